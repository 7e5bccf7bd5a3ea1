"""What a plugin adds to the package, added the way a plugin would, and run through the
commands: ``docctx-prepare``, ``docctx-translate`` and ``docctx-score`` (in-process, each
command's main called with its arguments)."""
import json

import pytest

from conftest import run_in_process
from fairseq_docctx.cli.prepare import main as prepare_main
from fairseq_docctx.cli.score import build_parser as score_parser
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.data import formats
from fairseq_docctx.data.readers import read_file, read_parallel

# ------------------------------------------------------------------------------------------
# a toy document format (tests/toy_tab_format.py: one module, registered here)


@pytest.fixture(scope="module")
def toy_tab_format():
    from toy_tab_format import TabFormat

    formats.register(TabFormat())
    yield "toy-tab"
    formats.unregister("toy-tab")


def _write_tab(path, docs):
    path.write_text("".join(f"{doc_id}\t{s}\n" for doc_id, sentences in docs for s in sentences))
    return path


@pytest.fixture(scope="module")
def toy_tab_raw(toy_bin, toy_tab_format, tmp_path_factory):
    """The toy documents of ``toy_bin`` (docids format) written again in the toy format:
    ``{split}.{src,tgt}``."""
    out = tmp_path_factory.mktemp("toy_tab")
    for split in ("train", "valid", "test"):
        pd = read_parallel(str(toy_bin.parent / "raw" / split), "src", "tgt")
        for lang, docs in (("src", pd.src), ("tgt", pd.tgt)):
            _write_tab(out / f"{split}.{lang}", [(d.doc_id, d.sentences) for d in docs])
    return out


def test_a_toy_format_prepares_the_same_data(toy_bin, toy_tab_raw, tmp_path):
    dest = tmp_path / "bin"
    prepare_main(["-s", "src", "-t", "tgt", "--trainpref", str(toy_tab_raw / "train"),
                  "--validpref", str(toy_tab_raw / "valid"), "--testpref", str(toy_tab_raw / "test"),
                  "--destdir", str(dest), "--joined-dictionary", "--workers", "1", "--input-format", "toy-tab"])
    inputs = json.loads((dest / "docctx.json").read_text())["splits"]["train"]["inputs"]
    assert [i["format"] for i in inputs] == ["toy-tab"]
    for name in sorted(p.name for p in toy_bin.iterdir()):
        if name.endswith((".bin", ".idx", ".txt", ".docs")):
            assert (dest / name).read_bytes() == (toy_bin / name).read_bytes(), name


def _score(argv, capsys):
    args = score_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    capsys.readouterr()
    return rc


def test_a_toy_format_is_translated_and_scored_in_its_format(toy_bin, concat_both_ckpt, toy_tab_raw, tmp_path,
                                                              capsys):
    raw = toy_bin.parent / "raw"
    common = ["--path", concat_both_ckpt, "--data", toy_bin, "--beam", "2", "--cpu", "--quiet"]
    # the toy format detected, and written back in it; the same translations as from docids
    rc, _, err = run_in_process(translate_main, [toy_tab_raw / "test.src", *common, "-o", tmp_path / "hyp.tab"],
                                capsys)
    assert rc == 0, err
    rc, _, err = run_in_process(translate_main, [raw / "test.src", "--docids", raw / "test.docids", *common,
                                                 "-o", tmp_path / "hyp.txt"], capsys)
    assert rc == 0, err
    hyp, fmt = read_file(str(tmp_path / "hyp.tab"))
    src, _ = read_file(str(toy_tab_raw / "test.src"))
    assert fmt == "toy-tab" and [d.doc_id for d in hyp] == [d.doc_id for d in src]
    assert [s for d in hyp for s in d.sentences] == (tmp_path / "hyp.txt").read_text().splitlines()
    # scored with toy-format hypotheses and references: the scores of the docids files
    rc = _score(["bleu", "--hyp", tmp_path / "hyp.tab", "--hyp-format", "toy-tab", "--ref", toy_tab_raw / "test.tgt",
                 "--both", "--json", tmp_path / "tab.json"], capsys)
    assert rc == 0
    rc = _score(["bleu", "--hyp", tmp_path / "hyp.txt", "--ref", raw / "test.tgt", "--docids", raw / "test.docids",
                 "--both", "--json", tmp_path / "txt.json"], capsys)
    assert rc == 0
    tab, txt = (json.loads((tmp_path / f"{n}.json").read_text())["metrics"] for n in ("tab", "txt"))
    assert tab == txt and tab
