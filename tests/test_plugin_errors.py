"""The plugin's refusals inside fairseq's own commands (fairseq-train, fairseq-generate, and
fairseq-generate's arguments given to docctx-generate): one line ``PROG: error: MESSAGE``,
exit code 2, no traceback (fairseq_docctx.errors), with advice the model then accepts."""
import shutil

import pytest

from conftest import REPO, TINY_MODEL, run, run_in_process

USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def one_line(p, prog):
    """The one error line of a finished command (after fairseq's log lines), checked."""
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if ": error: " in ln]
    assert p.returncode == 2 and len(errors) == 1 and errors[0].startswith(f"{prog}: error: "), \
        (p.returncode, p.stderr[-3000:])
    assert p.stderr.rstrip().endswith(errors[0])
    return errors[0]


@pytest.mark.parametrize("extra,says", [
    (["--arch", "g_transformer"],
     "--arch g_transformer translates segments of consecutive sentences: add --doc-mode segments"),
    (["--arch", "g_transformer", "--doc-mode", "segments", "--context-size", "2"],
     "--doc-mode segments with --context-size 2: a segment holds its own context"),
])
def test_training_refusals_are_one_line(toy_bin, tmp_path, extra, says):
    p = run(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", *extra, *TINY_MODEL,
             "--max-tokens", "600", "--max-update", "1", "--save-dir", tmp_path / "ckpt"], check=False)
    assert one_line(p, "fairseq-train").startswith(f"fairseq-train: error: {says}")
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


@pytest.fixture(scope="module")
def g_ckpt(toy_bin, tmp_path_factory):
    """A g_transformer trained 2 updates on the toy segments."""
    save = tmp_path_factory.mktemp("g")
    run(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", "--doc-mode", "segments",
         "--arch", "g_transformer", "--encoder-ctxlayers", "1", "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1",
         *TINY_MODEL, "--max-tokens", "600", "--max-update", "2", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.mark.slow  # two fairseq-generate runs for one message (make test-all)
def test_a_prefix_with_a_segment_model_is_one_line_whose_advice_holds(toy_bin, g_ckpt):
    """--prefix-size with a segment model: one line that does not send the user to --doc-mode
    sentences, which the model refuses (also one line)."""
    common = [toy_bin, *USER_DIR, "--task", "document_translation", "--path", g_ckpt, "--gen-subset", "valid",
              "--beam", "1", "--cpu"]
    p = run(["fairseq-generate", *common, "--doc-mode", "segments", "--prefix-size", "1"], check=False)
    line = one_line(p, "fairseq-generate")
    assert "--prefix-size and --constraints apply to a sentence" in line and "leave them out" in line
    assert "--doc-mode sentences" not in line
    p = run(["fairseq-generate", *common, "--doc-mode", "sentences"], check=False)
    assert "add --doc-mode segments" in one_line(p, "fairseq-generate")


def test_docctx_generate_with_another_copy_of_the_plugin_is_one_line(toy_bin, concat_both_ckpt, tmp_path, capsys):
    """--user-dir naming another copy of fairseq_docctx (Python imports one package of a name):
    one line naming both copies, before any process starts; the package under another path (a
    link) is this one."""
    from fairseq_docctx.cli.generate import cli_main

    copy = tmp_path / "elsewhere" / "fairseq_docctx"
    shutil.copytree(REPO / "fairseq_docctx", copy, ignore=shutil.ignore_patterns("__pycache__"))
    args = [toy_bin, "--task", "document_translation", "--path", concat_both_ckpt, "--gen-subset", "valid",
            "--beam", "1", "--quiet"]
    code, out, err = run_in_process(cli_main, ["--processes", "2", "--work-dir", tmp_path / "work", "--", *args,
                                               "--user-dir", copy], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"docctx-generate: error: --user-dir {copy} is another copy of fairseq_docctx than the one "
                        f"running docctx-generate ({REPO / 'fairseq_docctx'}): give --user-dir "
                        f"{REPO / 'fairseq_docctx'}, or run the docctx-generate of that copy")
    assert not (tmp_path / "work").exists() or not list((tmp_path / "work").iterdir())
    from fairseq_docctx.inference.generate import check_user_dir

    link = tmp_path / "link" / "fairseq_docctx"
    link.parent.mkdir()
    link.symlink_to(REPO / "fairseq_docctx")
    assert check_user_dir(["x", "--user-dir", str(link)]) == ["x", "--user-dir", str(REPO / "fairseq_docctx")]


def _truncated(ckpt, dest):
    """The first half of a checkpoint file: what an interrupted copy or a full disk leaves."""
    data = ckpt.read_bytes()
    dest.write_bytes(data[: len(data) // 2])
    return dest


def test_a_truncated_checkpoint_is_one_line_naming_it(toy_bin, concat_both_ckpt, tmp_path):
    """fairseq's own loading inside its commands (--path, --restore-file): one line naming the
    file, exit code 2, as docctx-translate says it; the --save-dir the refused training made
    is not left behind."""
    bad = _truncated(concat_both_ckpt, tmp_path / "half.pt")
    says = (f"{bad}: not a readable fairseq checkpoint, truncated or of another kind (PytorchStreamReader failed "
            "reading zip archive: failed finding central directory.")
    p = run(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation", "--path", bad,
             "--gen-subset", "valid", "--beam", "1"], check=False)
    assert one_line(p, "fairseq-generate").startswith(f"fairseq-generate: error: {says}")
    save = tmp_path / "ckpt"
    p = run(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", "--arch", "transformer",
             *TINY_MODEL, "--max-tokens", "600", "--max-update", "1", "--save-dir", save, "--restore-file", bad],
            check=False)
    assert one_line(p, "fairseq-train").startswith(f"fairseq-train: error: {says}")
    assert not save.exists() and bad.stat().st_size == concat_both_ckpt.stat().st_size // 2


@pytest.mark.parametrize("value,existed", [("-1", True), ("1", False)])
def test_coword_dropout_outside_0_1_is_refused_and_the_save_dir_left_as_it_was(toy_bin, tmp_path, value, existed):
    """--coword-dropout -1 trained as if off: refused in one line like 1. The --save-dir (and
    the parents) a refused run made are removed; one that was there stays, empty."""
    save = tmp_path / "runs" / "a" / "ckpt"
    if existed:
        save.mkdir(parents=True)
    p = run(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", "--arch", "concat_transformer",
             *TINY_MODEL, "--max-tokens", "600", "--max-update", "1", "--save-dir", save, "--coword-dropout", value],
            check=False)
    if existed:
        assert save.is_dir() and not list(save.iterdir())
    else:
        assert not (tmp_path / "runs").exists()
    assert one_line(p, "fairseq-train") == (f"fairseq-train: error: --coword-dropout {value}: a probability below 1 "
                                            "and at least 0 (0: off)")


def test_a_sentence_longer_than_the_model_is_one_line_naming_it(toy_bin, concat_both_ckpt):
    """fairseq-generate on a split with sentences longer than the model's positions: one line
    naming the split, the first such sentence (its id, document and place), its file, its
    length and the model's, the others' ids, and what to do (fairseq's message: "Size of sample
    #N is invalid", a traceback); --skip-invalid-size-inputs-valid-test still leaves them out
    (tests/test_generate_errors.py)."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from fairseq_docctx.data.doc_index import DocIndex

    ds = MMapIndexedDataset(str(toy_bin / "valid.src-tgt.src"))
    sizes = ds.sizes.tolist()  # a copy, while the dataset (its memory map) is open
    long = [i for i, n in enumerate(sizes) if n > 9]
    docs = DocIndex.read(toy_bin / "valid.src-tgt.docs")
    first = long[0]
    doc, pos = docs.doc_ids[docs.sent_doc[first]], docs.sent_pos[first] + 1
    p = run(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation", "--path", concat_both_ckpt,
             "--gen-subset", "valid", "--beam", "1", "--max-source-positions", "9"], check=False)
    assert one_line(p, "fairseq-generate") == (
        f"fairseq-generate: error: valid: sentence {first} (document {doc!r}, its sentence {pos}): its source "
        f"({toy_bin / 'valid.src-tgt.src'}) has {sizes[first]} tokens, more than the model's 9 source positions "
        f"({len(long) - 1} more of valid are too long: {', '.join(map(str, long[1:]))}): shorten or split it, cut "
        "the sources with --truncate-source --max-source-positions 9, or leave it out with "
        "--skip-invalid-size-inputs-valid-test")
