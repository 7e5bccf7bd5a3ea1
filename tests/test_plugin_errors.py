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
