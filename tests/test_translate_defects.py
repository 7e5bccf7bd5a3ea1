"""docctx-translate as a user meets it: a deployed checkpoint, an output path that is one of
the run's inputs, a sentence longer than the model takes, the output's file mode, standard
input without its document ids, a closed pipe, an interrupted run, a beam of 0."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import run_in_process, venv_env
from test_translate_cli import one_line_error, translate

FAST = ["--beam", "1", "--max-len-b", "3", "--quiet"]


@pytest.fixture
def doc(tmp_path):
    src = tmp_path / "doc.txt"
    src.write_text("w1 w2\nw3\n\nw4\n")
    return src


# ------------------------------------------------------------------ a deployed checkpoint


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, concat_both_ckpt, toy_bin):
    """The quickstart's way to ship a model (trained without -s/-t): the checkpoint and its
    dictionaries in one folder; a folder with the dictionaries and docctx.json; the same
    checkpoint with its training directory gone."""
    d = tmp_path_factory.mktemp("deploy")
    deploy = d / "deploy"
    deploy.mkdir()
    shutil.copy(concat_both_ckpt, deploy / "checkpoint_last.pt")
    dicts = d / "dicts"
    dicts.mkdir()
    for lang in ("src", "tgt"):
        shutil.copy(toy_bin / f"dict.{lang}.txt", deploy)
        shutil.copy(toy_bin / f"dict.{lang}.txt", dicts)
    shutil.copy(toy_bin / "docctx.json", dicts)
    # its training directory gone, its dictionaries joined (the same words on both sides):
    # the pair the task records in the model's arguments, and a checkpoint without it
    orphan = d / "orphan"
    orphan.mkdir()
    state = torch.load(concat_both_ckpt, weights_only=False)
    state["cfg"]["task"]["data"] = str(d / "gone")
    model_args = state["cfg"]["model"]
    torch.save(state, orphan / "recorded.pt")
    if hasattr(model_args, "language_pair"):
        delattr(model_args, "language_pair")
    torch.save(state, orphan / "checkpoint.pt")
    for lang in ("src", "tgt"):
        shutil.copy(toy_bin / f"dict.{lang}.txt", orphan)
    return {"ckpt": deploy / "checkpoint_last.pt", "dicts": dicts, "orphan": orphan / "checkpoint.pt",
            "recorded": orphan / "recorded.pt"}


def test_a_deployed_checkpoint_translates(deployed, concat_both_ckpt, doc, tmp_path, capsys):
    from fairseq_docctx.hub import from_pretrained

    # the checkpoint's folder holds its dictionaries: the --data default
    code, out, err = translate([doc, "--path", deployed["ckpt"], *FAST], capsys)
    assert code == 0 and len(out.split("\n\n")) == 2, err
    # --data: dictionaries and docctx.json, no binarized files
    code, out2, err = translate([doc, "--path", concat_both_ckpt, "--data", deployed["dicts"], *FAST], capsys)
    assert code == 0 and out2 == out, err
    hub = from_pretrained(str(deployed["ckpt"]))
    assert (hub.task.cfg.source_lang, hub.task.cfg.target_lang) == ("src", "tgt")
    code, out3, err = translate([doc, "--path", deployed["recorded"], *FAST], capsys)
    assert code == 0 and out3 == out, err
    # a pair nothing tells: one line
    code, _, err = translate([doc, "--path", deployed["orphan"], *FAST], capsys)
    line = one_line_error(err)
    assert code == 2 and "cannot tell the model's language pair" in line and "docctx.json" in line


def test_a_deployed_checkpoint_scores_contrastive(deployed, tmp_path, capsys):
    from fairseq_docctx.cli.score import cli_main as score_main

    prefix = tmp_path / "test"  # Bawden's layout: PREFIX.{prev,current}.{src,tgt}
    for part, src, tgt in (("prev", "w1 w2\nw1 w2\n", "W1 W2\nW1 W2\n"),
                           ("current", "w3\nw3\n", "W3\nW4\n")):
        (tmp_path / f"test.{part}.src").write_text(src)
        (tmp_path / f"test.{part}.tgt").write_text(tgt)
    code, out, err = run_in_process(score_main, ["contrastive", prefix, "--format", "bawden", "--path",
                                                 deployed["ckpt"]], capsys)
    assert code in (0, None) and "Could not infer" not in err and "Traceback" not in err, err


# ------------------------------------------------------------------ the output is an input


def test_output_that_is_a_file_the_run_reads_is_refused(concat_both_ckpt, toy_bin, doc, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("a\na\nb\n")
    plain = tmp_path / "plain.txt"
    plain.write_text("w1 w2\nw3\nw4\n")
    link = tmp_path / "link.txt"
    os.link(doc, link)  # another name of the input
    cases = [
        ([doc], doc),
        ([doc], tmp_path / "." / "doc.txt"),
        ([doc], link),
        ([plain, "--docids", ids, "--input-format", "docids"], ids),
        ([doc], concat_both_ckpt),
        ([doc, "--processes", "2"], doc),
    ]
    for argv, out in cases:
        before = {p: p.read_bytes() for p in (doc, ids, plain, concat_both_ckpt)}
        code, stdout, err = translate([*argv, "--path", concat_both_ckpt, "--data", toy_bin, "-o", out, *FAST],
                                      capsys)
        line = one_line_error(err)
        assert code == 2 and f"-o {out}" in line and "reads" in line, (argv, out, err)
        assert {p: p.read_bytes() for p in before} == before
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_output_onto_the_training_data_the_checkpoint_records_is_refused(concat_both_ckpt, toy_bin, doc, capsys):
    """Without --data the dictionaries come from the data directory the model was trained on
    (the checkpoint's directory has none): an output there is a file the run reads."""
    assert not list(Path(concat_both_ckpt).parent.glob("dict.*.txt"))
    for name in ("dict.tgt.txt", "docctx.json"):
        out = Path(toy_bin) / name
        before = out.read_bytes()
        code, _, err = translate([doc, "--path", concat_both_ckpt, "-o", out, *FAST], capsys)
        line = one_line_error(err)
        assert code == 2 and f"-o {out} is " in line and "reads" in line, err
        assert out.read_bytes() == before


def test_output_ids_beside_the_input_ids_leave_them_as_they_are(concat_both_ckpt, toy_bin, tmp_path, capsys):
    """``test.src -o test.hyp``: both have ``test.docids``; it holds the output's ids already."""
    src, ids = tmp_path / "test.src", tmp_path / "test.docids"
    src.write_text("w1 w2\nw3\nw4\n")
    ids.write_text("a\na\nb  \n")
    code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "-o", tmp_path / "test.hyp",
                              "--input-format", "docids", *FAST], capsys)
    assert code == 0, err
    assert ids.read_text() == "a\na\nb  \n" and len((tmp_path / "test.hyp").read_text().splitlines()) == 3


# ------------------------------------------------------------------ a sentence longer than the model takes


def test_a_sentence_longer_than_the_model_takes_is_one_line(concat_both_ckpt, toy_bin, tmp_path, capsys):
    src = tmp_path / "long.txt"
    src.write_text("w1 w2\n" + "w3 " * 100_000 + "\n\nw4\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, *FAST], capsys)
    line = one_line_error(err)
    assert code == 2 and f"{src}:2: " in line and "100,000 tokens" in line, err
    assert "skip-invalid-size" not in err and out == ""
    # --max-tokens below a sentence's length
    src.write_text("w1\n\nw1 w2 w3 w4 w5 w6\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--max-tokens", "4", *FAST],
                               capsys)
    assert code == 2 and f"{src}:3: " in one_line_error(err) and "--max-tokens 4" in err, err


@pytest.mark.slow  # make test: the refused options of a shard process (the same one-line path)
def test_a_shard_process_refusing_its_input_is_one_line(concat_both_ckpt, toy_bin):
    """``--processes 2``: the shard holding the long sentence refuses it; the command prints
    that line alone (file:line, standard input as ``<stdin>``) and exits 2."""
    text = ("w1 w2\n\n" + "w3 " * 5_000 + "\n").encode()
    p = subprocess.run(["docctx-translate", "--processes", "2", "--path", str(concat_both_ckpt), "--data",
                        str(toy_bin), *FAST], input=text, capture_output=True, env=venv_env())
    err = p.stderr.decode()
    line = one_line_error(err)
    assert p.returncode == 2 and "<stdin>:3: " in line and "5,000 tokens" in line and "stdin.txt" not in err, err


@pytest.mark.slow  # ~14 s: make test-all
def test_a_shard_process_refusing_its_options_is_one_line(concat_both_ckpt, toy_bin, tmp_path):
    """A SentencePiece model that is missing (refused inside the processes of --processes 2)
    or is not one: one line naming it, exit 2, not a shard's traceback."""
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\n\nw3\n")
    bad = tmp_path / "notes.model"
    bad.write_text("not a model\n")
    for spm, says, processes in ((tmp_path / "none.model", "no such SentencePiece model file", ["--processes", "2"]),
                                 (bad, "not a SentencePiece model", [])):
        p = subprocess.run(["docctx-translate", str(src), *processes, "--path", str(concat_both_ckpt),
                            "--data", str(toy_bin), "--spm-model", str(spm), *FAST],
                           capture_output=True, env=venv_env())
        err = p.stderr.decode()
        assert p.returncode == 2 and one_line_error(err).startswith(f"docctx-translate: error: {spm}: {says}"), err


# ------------------------------------------------------------------ small things


def test_output_files_follow_the_umask(concat_both_ckpt, toy_bin, tmp_path, capsys):
    src, ids = tmp_path / "in.txt", tmp_path / "in.docids"
    src.write_text("w1 w2\nw3\n")
    ids.write_text("a\nb\n")
    (tmp_path / "o").mkdir()
    old = os.umask(0o022)
    try:
        code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "-o", tmp_path / "o" / "x.hyp",
                                  "--input-format", "docids", "--docids", ids, *FAST], capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("x.hyp", "x.docids"):
        assert oct((tmp_path / "o" / name).stat().st_mode & 0o777) == oct(0o644), name


def test_docids_format_on_stdin_needs_docids(concat_both_ckpt, toy_bin):
    p = subprocess.run(["docctx-translate", "--path", str(concat_both_ckpt), "--data", str(toy_bin), "--quiet",
                        "--input-format", "docids"], input=b"w1 w2\nw3\n", capture_output=True, env=venv_env())
    err = p.stderr.decode()
    line = one_line_error(err)
    assert p.returncode == 2 and "<stdin>" in line and "--docids" in line and "stdin.txt" not in line, err


def test_a_closed_pipe_ends_quietly(concat_both_ckpt, toy_bin, tmp_path):
    src = tmp_path / "many.txt"
    src.write_text("".join(f"w{i % 30} w{(i * 7) % 30}\n\n" for i in range(300)))
    p = subprocess.Popen(["docctx-translate", str(src), "--path", str(concat_both_ckpt), "--data", str(toy_bin),
                          "--batch-size", "4", *FAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=venv_env())
    p.stdout.readline()
    p.stdout.close()  # like `| head -1`
    err = p.stderr.read().decode()
    p.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert p.returncode == 141, err


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_leaves_nothing(concat_both_ckpt, toy_bin, tmp_path, sig, code):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"w{i % 30} w{(i * 7) % 30}\n\n" for i in range(3000)))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    p = subprocess.Popen(["docctx-translate", str(src), "--path", str(concat_both_ckpt), "--data", str(toy_bin),
                          "-o", str(out_dir / "out.txt"), *FAST], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=venv_env())
    deadline = time.time() + 120
    while not os.listdir(out_dir) and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert os.listdir(out_dir), "no temporary output appeared"
    time.sleep(0.5)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    err = err.decode()
    assert p.returncode == code, err
    assert os.listdir(out_dir) == []
    line = one_line_error(err)
    assert "interrupted" in line and "KeyboardInterrupt" not in err


def test_beam_zero_is_one_line(concat_both_ckpt, toy_bin, doc, capsys):
    for option in ("--beam", "--draft-beam", "--batch-size", "--max-tokens"):
        code, _, err = translate([doc, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet", option, "0"],
                                 capsys)
        assert code == 2 and f"{option} 0: must be at least 1" in one_line_error(err), err
    for option, value in (("--max-len-a", "-0.5"), ("--max-len-b", "-5")):
        code, _, err = translate([doc, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet", option, value],
                                 capsys)
        assert code == 2 and f"{option} {float(value) if option.endswith('-a') else value}: must be at least 0" \
            in one_line_error(err), err


def test_help_says_where_the_docids_are_looked_for(capsys):
    from fairseq_docctx.cli.score import build_parser as score_parser
    from fairseq_docctx.cli.translate import build_parser

    for parser in (build_parser(), score_parser()._subparsers._group_actions[0].choices["bleu"]):
        text = " ".join(parser.format_help().split())
        assert "FILE.docids" not in text and "extension replaced by .docids" in text
