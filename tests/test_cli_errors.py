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



def _plain_files(tmp_path):
    """A hypothesis and a reference, plain sentence-aligned files without documents."""
    ref = tmp_path / "ref.txt"
    hyp = tmp_path / "hyp.txt"
    ref.write_text("the cat sat on the mat\nthe dog ran home\na red house\nan old tree\n")
    hyp.write_text("the cat sat on a mat\nthe dog ran home\na big house\nan old tree\n")
    return hyp, ref


def test_score_writes_its_json_before_a_closed_output_ends_it(tmp_path):
    """``docctx-score bleu ... --per-document --json x.json | head -1``: the JSON is written
    first, so the reader going away (exit code 141) loses no file, also when the text is
    longer than the output's buffer (1,500 documents' scores)."""
    lines = [f"w{i % 7} w{i % 5} w{i % 3} w{i % 11}" for i in range(1500)]
    ref, hyp, ids = tmp_path / "ref.txt", tmp_path / "hyp.txt", tmp_path / "ref.docids"
    ref.write_text("\n".join(lines) + "\n")
    hyp.write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    ids.write_text("".join(f"document-{i}\n" for i in range(1500)))
    env = venv_env()
    env.pop("PYTHONUNBUFFERED", None)
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run(["docctx-score", "bleu", "--hyp", hyp, "--ref", ref, "--per-document",
                            "--json", tmp_path / "x.json"],
                           stdout=write, stderr=subprocess.PIPE, env=env, timeout=300)
    finally:
        os.close(write)
    assert p.returncode == 141, p.stderr.decode()
    assert "bleu" in json.loads((tmp_path / "x.json").read_text())["metrics"]


@pytest.mark.parametrize("option", ["--tokenize", "--pretokenize"])
def test_a_tokenizer_that_cannot_be_built_is_one_line(tmp_path, capsys, monkeypatch, option):
    """sacreBLEU's ja-mecab without its extra and flores101 without its model or a network:
    one line saying what is missing (not "unknown tokenizer", not a traceback), exit 2."""
    import urllib.error
    import urllib.request

    from sacrebleu.tokenizers import tokenizer_ja_mecab, tokenizer_spm

    from conftest import run_in_process
    from fairseq_docctx.cli.score import cli_main

    hyp, ref = _plain_files(tmp_path)
    monkeypatch.setattr(tokenizer_ja_mecab, "MeCab", None)  # the extra not installed
    monkeypatch.setattr(tokenizer_spm, "SACREBLEU_DIR", str(tmp_path / "sacrebleu"))

    def offline(*a, **k):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    for name, says in (("ja-mecab", "pip install 'sacrebleu[ja]'"),
                       ("flores101", f"{tmp_path / 'sacrebleu' / 'models' / 'sacrebleu_tokenizer_spm.model'}, which is "
                                     "not there and could not be downloaded from https://")):
        code, out, err = run_in_process(cli_main, ["bleu", "--hyp", hyp, "--ref", ref, option, name], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"docctx-score bleu: error: {option} {name}: ") and says in lines[0], err
        assert "Name or service not known" in lines[0] or name == "ja-mecab"
    code, _, err = run_in_process(cli_main, ["bleu", "--hyp", hyp, "--ref", ref, option, "nonesuch"], capsys)
    assert code == 2 and f"{option} nonesuch: unknown tokenizer (one of " in err and "13a" in err


def test_compare_resamples_sentences_of_plain_files(tmp_path, capsys):
    """``compare --resample sentences`` works on plain sentence-aligned files (no documents);
    resampling documents needs them (one line)."""
    from conftest import run_in_process
    from fairseq_docctx.cli.score import cli_main

    hyp, ref = _plain_files(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("the cat sat\nthe dog ran home\na red house\nan old tree\n")
    args = ["compare", "--baseline", hyp, "--hyp", other, "--ref", ref, "--bs-samples", "20", "--ar-trials", "20"]
    code, out, err = run_in_process(cli_main, args + ["--resample", "sentences", "--json", tmp_path / "c.json"],
                                    capsys)
    assert code == 0, err
    rep = json.loads((tmp_path / "c.json").read_text())
    assert rep["resample"] == "sentences" and rep["documents"] is None and rep["sentences"] == 4
    assert "resampled: sentences (no documents, 4 sentences)" in out
    code, _, err = run_in_process(cli_main, args, capsys)
    assert code == 2 and "--resample documents needs documents: no document structure" in err, err
