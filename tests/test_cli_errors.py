"""The one error-to-exit handler of every command (fairseq_docctx.cli.exit_on_errors_and_signals),
seen from the shell: ``docctx-score`` with its standard output closed by the reader (``| head``)
ends quietly with exit code 141, as a Unix tool killed by SIGPIPE."""
import json
import os
import subprocess

import pytest

from conftest import venv_env


@pytest.fixture
def runs(tmp_path):
    paths = []
    for name, score in (("a", 30.0), ("b", 31.0)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"run": name, "files": {}, "metrics": {"bleu": {"score": score}}}))
        paths.append(str(path))
    return paths


def test_score_with_its_output_closed_ends_quietly_with_141(runs):
    env = venv_env()
    env.pop("PYTHONUNBUFFERED", None)  # standard output block-buffered, as in a shell pipeline
    read, write = os.pipe()
    os.close(read)  # the reader has gone: every write fails with EPIPE
    try:
        p = subprocess.run(["docctx-score", "table", *runs], stdout=write, stderr=subprocess.PIPE, env=env,
                           timeout=300)
    finally:
        os.close(write)
    assert p.returncode == 141 and p.stderr == b"", p.stderr.decode()

