"""tests/cli_fork.py, the suite's runner of console scripts: a command forked from the server
that has preloaded torch prints, writes and exits as the same command in a new interpreter."""
import os
import subprocess

import pytest

import cli_fork
from conftest import REPO, TINY_MODEL, venv_env

USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


@pytest.fixture(autouse=True)
def runner_on(monkeypatch):
    """The runner's own tests use it even where the session runs every command as a new
    interpreter (``DOCCTX_TEST_FRESH_PROCESSES=1``)."""
    monkeypatch.setitem(cli_fork._state, "enabled", True)


def both(cmd, cwd=None):
    """``cmd`` forked and in a new interpreter: the two ``CompletedProcess``."""
    env = venv_env()
    assert cli_fork.entry_point(cmd, env), "the session forks this command"
    forked = cli_fork.completed(cmd, env, cwd=cwd, timeout=600)
    fresh = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return forked, fresh


def translations(stdout):
    """fairseq-generate's lines without its log records (they carry the time)."""
    return [line for line in stdout.splitlines() if line[:2] in ("S-", "T-", "H-", "D-", "P-")]


def test_generate_prints_what_a_new_interpreter_prints(toy_bin, sent_ckpt):
    forked, fresh = both(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation",
                          "--context-size", "0", "--path", sent_ckpt, "--gen-subset", "valid", "--beam", "2",
                          "--batch-size", "8"])
    assert forked.returncode == fresh.returncode == 0
    assert translations(forked.stdout) == translations(fresh.stdout) and translations(fresh.stdout)


def test_a_refusal_is_the_same_line_and_exit_code(toy_bin, tmp_path):
    """The plugin's one-line refusal (its ``sys.excepthook``) and fairseq-train's exit code."""
    forked, fresh = both(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation",
                          "--arch", "g_transformer", *TINY_MODEL, "--max-tokens", "600", "--max-update", "1",
                          "--save-dir", tmp_path / "ckpt"])
    assert forked.returncode == fresh.returncode != 0
    assert forked.stderr.strip().splitlines()[-1] == fresh.stderr.strip().splitlines()[-1]
    assert "Traceback" not in forked.stderr and "--doc-mode segments" in forked.stderr


def test_relative_paths_are_read_from_the_working_directory(tmp_path):
    (tmp_path / "hyp").write_text("a b c d e\nf g h\n")
    (tmp_path / "ref").write_text("a b c d x\nf g h\n")
    forked, fresh = both(["docctx-score", "bleu", "--hyp", "hyp", "--ref", "ref"], cwd=tmp_path)
    assert forked.returncode == fresh.returncode == 0
    assert (forked.stdout, forked.stderr) == (fresh.stdout, fresh.stderr)


def test_a_command_past_its_timeout_is_killed(toy_bin, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        cli_fork.completed(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation",
                            "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-update", "100000",
                            "--save-dir", tmp_path / "ckpt"], venv_env(), timeout=3)


def test_what_is_not_forked(monkeypatch):
    env = venv_env()
    assert cli_fork.entry_point(["fairseq-train", "--help"], env)
    assert cli_fork.entry_point([os.path.join(cli_fork.BIN, "docctx-score"), "bleu"], env)
    assert cli_fork.entry_point(["bash", "-c", "true"], env) is None  # not one of the console scripts
    assert cli_fork.entry_point(["torchrun", "x.py"], env) is None
    assert cli_fork.entry_point(["fairseq-train"], dict(env, PYTHONHASHSEED="3")) is None  # read at startup
    assert cli_fork.entry_point(["fairseq-train"], dict(env, OMP_WAIT_POLICY="ACTIVE")) is None
    assert cli_fork.entry_point(["fairseq-train"], dict(env, OMP_NUM_THREADS="2"))  # the child sets its threads
    monkeypatch.setenv("DOCCTX_TEST_FRESH_PROCESSES", "1")
    monkeypatch.setitem(cli_fork._state, "enabled", True)
    cli_fork.enable()
    assert cli_fork.entry_point(["fairseq-train", "--help"], env) is None


def test_fairseq_is_imported_where_the_command_imports_it(tmp_path):
    """The server has imported fairseq, but a forked command starts without it in
    ``sys.modules`` (the plugin's ``docctx-*`` commands import it only when they need it) and
    with the root logger as a new interpreter's (WARNING, no handler), and finds all of it
    there once it imports fairseq, the root logger configured as fairseq's import configures
    it (``logging.basicConfig(level=logging.DEBUG)``: DEBUG, one handler on stderr)."""
    import json

    names = ["fairseq", "fairseq.models.transformer", "fairseq.tasks", "torch"]
    p = cli_fork._context().Process(target=cli_fork.imported, args=(names, str(tmp_path / "report.json")))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"start": {"modules": ["torch"], "root logger": ["WARNING", []]},
                      "after import fairseq": {"modules": names, "root logger": ["DEBUG", ["<stderr>"]]}}


def test_fairseq_train_and_generate_log_what_a_new_interpreter_logs(toy_bin, sent_ckpt, tmp_path):
    """The log records of both orders: fairseq-train configures logging before it imports
    fairseq, fairseq-generate after (fairseq's import configures it); times and speeds aside."""
    import re

    def records(p):
        text = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", "", p.stdout + p.stderr, flags=re.M)
        return [re.sub(r"[\d.,]+( seconds|s | sentences/s| tokens/s)|(wps|ups|train_wall|wall)[= ][\d.]+", "#", line)
                for line in text.splitlines() if "INFO" in line or "WARNING" in line]

    forked, fresh = both(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation",
                          "--context-size", "0", "--path", sent_ckpt, "--gen-subset", "valid", "--beam", "2",
                          "--batch-size", "8"])
    assert records(forked) == records(fresh) != []
    assert "INFO:fairseq_cli.generate:" in fresh.stderr  # (fairseq's configuration: the default format)
    forked, fresh = both(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", "--context-size", "0",
                          "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-update", "2",
                          "--optimizer", "adam", "--lr", "1e-3", "--cpu", "--disable-validation", "--no-save",
                          "--save-dir", tmp_path / "ckpt", "--log-format", "simple", "--log-interval", "1"])
    assert records(forked) == records(fresh) and any("| fairseq_cli.train |" in line for line in records(fresh))
