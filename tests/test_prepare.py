"""docctx-prepare: real corpora end to end, every input format, errors, filters."""
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fairseq_docctx.cli.prepare import cli_main, main
from fairseq_docctx.data.doc_index import DocIndex, doc_index_path
from fairseq_docctx.data.manifest import MANIFEST_NAME
from fairseq_docctx.data.prepare import PrepareError
from fairseq_docctx.data.documents import DocumentFormatError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
IWSLT17 = SHARED / "maruf-ende" / "IWSLT2017"
TED_XML = SHARED / "iwslt17-ted-xml"
needs_data = pytest.mark.skipif(
    not (IWSLT17.is_dir() and TED_XML.is_dir()),
    reason=f"needs the shared corpora at {SHARED} (maruf-ende/IWSLT2017, iwslt17-ted-xml)",
)


def script(name):
    return str(Path(sys.executable).parent / name)


def w(path, text, crlf=False):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((text.replace("\n", "\r\n") if crlf else text).encode("utf-8"))
    return path


def load_split(dest, split, src="en", tgt="de", decode=True):
    """(DocIndex, {lang: [sentence strings]}) of a prepared split, read back with fairseq
    (``decode=False``: {lang: sentence lengths with </s>})."""
    from fairseq.data import Dictionary, data_utils

    idx = DocIndex.read(doc_index_path(str(dest), split, src, tgt))
    text = {}
    for lang in (src, tgt):
        d = Dictionary.load(str(Path(dest) / f"dict.{lang}.txt"))
        ds = data_utils.load_indexed_dataset(str(Path(dest) / f"{split}.{src}-{tgt}.{lang}"), d, "mmap")
        assert len(ds) == idx.num_sentences
        text[lang] = [d.string(ds[i]) for i in range(len(ds))] if decode else ds.sizes.tolist()
    return idx, text


def manifest(dest):
    return json.loads((Path(dest) / MANIFEST_NAME).read_text())


# ------------------------------------------------------------------------------ real data


@pytest.fixture(scope="module")
def real_bin(tmp_path_factory):
    """maruf IWSLT17 dev (marker, CRLF) as train with SentencePiece, its test set (marker)
    as valid, and the official tst2016+tst2017 XML (the same talks) as test."""
    if not (IWSLT17.is_dir() and TED_XML.is_dir()):
        pytest.skip(f"needs the shared corpora at {SHARED}")
    root = tmp_path_factory.mktemp("real")
    for tgz in ("en-de.tgz", "de-en.tgz"):
        with tarfile.open(TED_XML / tgz) as t:
            t.extractall(root / "xml", filter="data")
    xml = ",".join(f"{root}/xml/{{lang}}-{{other}}/IWSLT17.TED.{s}.{{lang}}-{{other}}.{{lang}}.xml"
                   for s in ("tst2016", "tst2017"))
    dest = root / "bin"
    p = subprocess.run(
        [script("docctx-prepare"), "-s", "en", "-t", "de", "--joined-dictionary",
         "--trainpref", f"{IWSLT17}/concatenated_en2de_dev_{{lang}}.txt",
         "--validpref", f"{IWSLT17}/concatenated_en2de_test_{{lang}}.txt",
         "--testpref", xml, "--destdir", dest, "--spm-vocab-size", "1000", "--workers", "2"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="2"),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return root, dest, p.stdout


@needs_data
def test_real_marker_train_with_spm(real_bin):
    root, dest, out = real_bin
    m = manifest(dest)
    tr = m["splits"]["train"]
    assert (tr["documents"], tr["sentences"]) == (93, 8967)
    assert tr["inputs"][0]["format"] == "marker"
    assert tr["filtered"]["removed_pairs"] == {"min_len": 0, "max_len": 0, "max_len_ratio": 0, "tuple_max_len": 0,
                                               "tuple_max_len_ratio": 0}
    assert m["spm"]["model"] == "spm.model" and m["spm"]["type"] == "unigram"
    assert (dest / "spm.model").is_file() and (dest / "spm.vocab").is_file()
    assert m["context_separator"] == "<sep>" and m["context_separator_index"] == {"en": 4, "de": 4}
    assert "93 documents, 8967 sentence pairs" in out and "docctx-prepare --" not in m["command"]
    idx, sizes = load_split(dest, "train", decode=False)
    assert len(idx) == 93 and idx.num_sentences == 8967
    assert sum(sizes["en"]) - 8967 == tr["source_tokens"] and sum(sizes["de"]) - 8967 == tr["target_tokens"]
    first = (dest / "dict.en.txt").read_text().split("\n")[1:20]
    assert any(t.startswith("▁") for t in first)  # SentencePiece pieces
    from fairseq.data import Dictionary

    for lang in ("en", "de"):  # the separator survives save/load, right after the specials
        assert Dictionary.load(str(dest / f"dict.{lang}.txt")).index("<sep>") == 4
    assert not list(root.glob(".bin.tmp-*"))


@needs_data
def test_real_xml_test_sets(real_bin):
    root, dest, _ = real_bin
    m = manifest(dest)
    te = m["splits"]["test"]
    assert (te["documents"], te["sentences"]) == (23, 2271)
    assert [i["format"] for i in te["inputs"]] == ["xml", "xml"]
    en_ids, de_ids = [], []
    for s in ("tst2016", "tst2017"):
        en_ids += re.findall(r'<doc docid="(\d+)"', (root / f"xml/en-de/IWSLT17.TED.{s}.en-de.en.xml").read_text())
        de_ids += re.findall(r'<doc docid="(\d+)"', (root / f"xml/de-en/IWSLT17.TED.{s}.de-en.de.xml").read_text())
    idx, _ = load_split(dest, "test", decode=False)
    assert idx.doc_ids == en_ids and sorted(de_ids) == sorted(en_ids) and len(set(en_ids)) == 23
    # the maruf test files (marker format) hold the same talks: identical binarized data
    vidx = DocIndex.read(doc_index_path(str(dest), "valid", "en", "de"))
    assert vidx.lengths.tolist() == idx.lengths.tolist()
    for name in ("en-de.en.bin", "en-de.en.idx", "en-de.de.bin", "en-de.de.idx"):
        assert (dest / f"valid.{name}").read_bytes() == (dest / f"test.{name}").read_bytes()


@needs_data
def test_reuse_spm_model_and_dicts_without_train(real_bin, tmp_path):
    root, dest, _ = real_bin
    out = tmp_path / "bin"
    main(["-s", "en", "-t", "de", "--testpref", f"{IWSLT17}/concatenated_en2de_test_{{lang}}.txt",
          "--destdir", str(out), "--srcdict", str(dest / "dict.en.txt"),
          "--tgtdict", str(dest / "dict.de.txt"), "--spm-model", str(dest / "spm.model")])
    assert (out / "spm.model").read_bytes() == (dest / "spm.model").read_bytes()
    for name in ("en-de.en.bin", "en-de.de.bin", "en-de.en.idx"):  # marker files of the XML talks
        assert (out / f"test.{name}").read_bytes() == (dest / f"test.{name}").read_bytes()
    assert DocIndex.read(doc_index_path(str(out), "test", "en", "de")).num_sentences == 2271
    assert manifest(out)["spm"]["type"] in ("unigram", None)


# ------------------------------------------------------------------------------ formats

DOCS = [("talk1", [("a b c", "A B C"), ("d e", "D E")]),
        ("talk2", [("f", "F")]),
        ("talk3", [("g h", "G H"), ("i", "I"), ("j k l", "J K L")])]


def write_format(d, fmt, docs=DOCS):
    d = Path(d)
    for side, lang in ((0, "en"), (1, "de")):
        if fmt == "docids":
            w(d / f"c.{lang}", "".join(p[side] + "\n" for _, ps in docs for p in ps))
        elif fmt == "blank":
            w(d / f"c.{lang}", "\n\n".join("\n".join(p[side] for p in ps) for _, ps in docs) + "\n")
        elif fmt == "marker":
            w(d / f"c.{lang}", "".join("<d>\n" + "".join(p[side] + "  \n" for p in ps) for _, ps in docs),
              crlf=True)
    if fmt == "docids":
        w(d / "c.docids", "".join(f"{i}\n" for i, ps in docs for _ in ps))
    return str(d / "c")


def test_formats_give_the_same_data(tmp_path, capsys):
    results = {}
    for fmt in ("docids", "blank", "marker"):
        pref = write_format(tmp_path / fmt, fmt)
        dest = tmp_path / f"bin-{fmt}"
        main(["-s", "en", "-t", "de", "--trainpref", pref, "--validpref", pref, "--destdir", str(dest)])
        assert manifest(dest)["splits"]["train"]["inputs"][0]["format"] == fmt
        results[fmt] = dest
    ref = results["docids"]
    assert DocIndex.read(doc_index_path(str(ref), "train", "en", "de")).doc_ids == ["talk1", "talk2", "talk3"]
    assert DocIndex.read(doc_index_path(str(results["blank"]), "train", "en", "de")).doc_ids == ["c:1", "c:2", "c:3"]
    for fmt, dest in results.items():
        for name in sorted(os.listdir(ref)):
            if name.endswith((".bin", ".idx", ".txt")):
                assert (dest / name).read_bytes() == (ref / name).read_bytes(), (fmt, name)
        assert DocIndex.read(doc_index_path(str(dest), "valid", "en", "de")).lengths.tolist() == [2, 1, 3]
    idx, text = load_split(ref, "train")
    assert text["en"] == [p[0] for _, ps in DOCS for p in ps]


def test_spm_vocab_size_0_keeps_text_cli(tmp_path, capsys):
    docs = [("x", [("Hello@@ wor@@ ld  ,   yes", "Hal@@ lo Welt"), ("<unk> ok ?", "gut")])]
    pref = write_format(tmp_path, "docids", docs)
    cli_main(["-s", "en", "-t", "de", "--trainpref", pref, "--destdir", str(tmp_path / "bin"),
              "--spm-vocab-size", "0"])
    idx, text = load_split(tmp_path / "bin", "train")
    assert text == {"en": ["Hello@@ wor@@ ld , yes", "<unk> ok ?"], "de": ["Hal@@ lo Welt", "gut"]}
    assert not (tmp_path / "bin" / "spm.model").exists() and manifest(tmp_path / "bin")["spm"] is None
    assert "Hello@@" in (tmp_path / "bin" / "dict.en.txt").read_text()
    assert (tmp_path / "bin" / "dict.en.txt").read_text().split("\n")[0] == "<sep> 4"


def test_several_prefixes_concatenated_and_colliding_ids(tmp_path):
    a = write_format(tmp_path / "a", "blank")
    b = write_format(tmp_path / "b", "blank", DOCS[:1])
    m = main(["-s", "en", "-t", "de", "--trainpref", f"{a},{b}", "--destdir", str(tmp_path / "bin"),
              "--input-format", "blank"])  # a one-document file has no blank line
    idx = DocIndex.read(doc_index_path(str(tmp_path / "bin"), "train", "en", "de"))
    assert idx.doc_ids == ["c:1", "c:2", "c:3", "c:c:1"] and idx.lengths.tolist() == [2, 1, 3, 2]
    assert m["splits"]["train"]["sentences"] == 8 and len(m["splits"]["train"]["inputs"]) == 2


# ------------------------------------------------------------------------------ filters


def test_filters_report_and_keep_documents(tmp_path, capsys):
    """Filtered pairs are counted per filter and stay in their documents as context only
    (marked in the index, counted in the manifest); a document with no pair left vanishes."""
    docs = [("d1", [("a b c", "A B C"), ("a", "A B"), ("a b c d e f g h i", "A B"), ("a b", "A B")]),
            ("d2", [(" ".join("x" * 11), " ".join("X" * 11))]),
            ("d3", [("x y", "X Y")]),
            ("d4", [("p q", "P Q R")])]
    pref = write_format(tmp_path, "docids", docs)
    dest = tmp_path / "bin"
    m = main(["-s", "en", "-t", "de", "--trainpref", pref, "--validpref", pref, "--destdir", str(dest),
              "--min-len", "2", "--max-len", "10", "--max-len-ratio", "3"])
    out = capsys.readouterr().out
    f = m["splits"]["train"]["filtered"]
    assert f["removed_pairs"] == {"min_len": 1, "max_len": 1, "max_len_ratio": 1, "tuple_max_len": 0,
                                  "tuple_max_len_ratio": 0}
    assert f["removed_documents"] == 1 and f["context_only_pairs"] == 2
    assert "min-len 2: 1, max-len 10: 1, max-len-ratio 3: 1" in out and "1 documents vanished" in out
    assert "2 of them stay in their documents as context only" in out
    idx, text = load_split(dest, "train")
    assert idx.doc_ids == ["d1", "d3", "d4"] and idx.lengths.tolist() == [4, 1, 1]
    assert [idx.context_only_positions(d) for d in range(3)] == [[1, 2], [], []]
    assert text["en"] == ["a b c", "a", "a b c d e f g h i", "a b", "x y", "p q"]
    assert (dest / "train.en-de.docs").read_text() == "d1\t4\t1,2\nd3\t1\nd4\t1\n"
    tr = m["splits"]["train"]
    assert (tr["sentences"], tr["context_only"]) == (6, 2) and tr["target_tokens"] == 14
    # valid is never filtered
    vidx, _ = load_split(dest, "valid")
    assert vidx.lengths.tolist() == [4, 1, 1, 1] and m["splits"]["valid"]["filtered"] is None
    assert vidx.num_context_only == 0 and m["splits"]["valid"]["context_only"] == 0


def test_tuple_filter_of_kuang_and_xiong(tmp_path, capsys):
    """--tuple-max-len / --tuple-max-len-ratio judge every tuple (before-x, x, y) as the input
    gives it (before-x: the previous source sentence of the document, kept or not): counts per
    filter in the report and in docctx.json, a dropped pair stays in its document as context
    only (so before-x stays the previous sentence in training too), a document's first
    sentence is judged on its own lengths only."""
    from fairseq_docctx.data import manifest as mf

    docs = [("d1", [("a b c", "A B C"),  # first: kept
                    ("a", "A"),  # 1 token after 3: ratio 3 > 2
                    ("a b", "A B"),  # after "a" (dropped, but its before-x): ratio 2, kept
                    ("a b c d e f", "A B C D E F"),  # 6 tokens > 5
                    ("a b c d", "A B C D"),  # its before-x has 6 tokens > 5
                    ("a b c", "A B C")]),  # after 4 tokens: kept
            ("d2", [("x", "X"), ("x y z w", "X Y Z W")]),  # a short first sentence: kept; then ratio 4
            ("d3", [("p q r s t u", "P Q")]),  # a first sentence longer than 5: the document vanishes
            ("d4", [("m n", "M N O P Q R S"), ("m n o", "M N O")])]  # y longer than 5; then ratio 1.5
    pref = write_format(tmp_path, "docids", docs)
    dest = tmp_path / "bin"
    main(["-s", "en", "-t", "de", "--trainpref", pref, "--validpref", pref, "--destdir", str(dest),
          "--tuple-max-len", "5", "--tuple-max-len-ratio", "2"])
    out = capsys.readouterr().out
    f = mf.filtered(str(dest), "train")
    assert f["removed_pairs"] == {"min_len": 0, "max_len": 0, "max_len_ratio": 0, "tuple_max_len": 4,
                                  "tuple_max_len_ratio": 2}
    assert f["settings"]["tuple_max_len"] == 5 and f["settings"]["tuple_max_len_ratio"] == 2
    assert f["removed_documents"] == 1 and f["context_only_pairs"] == 5
    assert "tuple-max-len 5: 4, tuple-max-len-ratio 2: 2" in out and "1 documents vanished" in out
    idx, text = load_split(dest, "train")
    assert idx.doc_ids == ["d1", "d2", "d4"] and idx.lengths.tolist() == [6, 2, 2]
    assert [idx.context_only_positions(d) for d in range(3)] == [[1, 3, 4], [1], [0]]
    kept = [p for i, ps in docs if i != "d3" for p in ps]
    assert text["en"] == [x for x, _ in kept] and text["de"] == [y for _, y in kept]
    vidx, _ = load_split(dest, "valid")
    assert vidx.lengths.tolist() == [6, 2, 1, 2] and mf.filtered(str(dest), "valid") is None
    for bad in (["--tuple-max-len", "0"], ["--tuple-max-len-ratio", "0"]):
        with pytest.raises(PrepareError, match=bad[0]):
            main(["-s", "en", "-t", "de", "--trainpref", pref, "--destdir", str(tmp_path / "bad"), *bad])


def test_doc_index_context_only_positions_round_trip_and_errors(tmp_path):
    """The third field of a .docs line lists a document's context-only sentences; an index
    without any is written in the two-field format (and every two-field index reads with
    none); malformed positions are an error naming the file and the line."""
    import numpy as np

    idx = DocIndex(["a", "b", "c"], np.array([3, 1, 2]), np.array([0, 1, 1, 0, 0, 1], dtype=bool))
    path = tmp_path / "x.docs"
    idx.write(str(path))
    assert path.read_text() == "a\t3\t1,2\nb\t1\nc\t2\t1\n"
    back = DocIndex.read(str(path))
    assert back.context_only.tolist() == idx.context_only.tolist() and back.num_context_only == 3
    both = DocIndex.concat([back, DocIndex(["d"], np.array([2]))])
    assert both.context_only.tolist() == idx.context_only.tolist() + [False, False]
    DocIndex(["a", "b"], np.array([3, 1])).write(str(path))
    assert path.read_text() == "a\t3\nb\t1\n" and DocIndex.read(str(path)).num_context_only == 0
    for bad in ("2,1", "1,1", "3", "x", "", "-1", "1,"):
        path.write_text(f"a\t3\nb\t3\t{bad}\n")
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:2: malformed"):
            DocIndex.read(str(path))
    with pytest.raises(ValueError, match="context_only has 2 entries for 3 sentences"):
        DocIndex(["a"], np.array([3]), np.zeros(2, dtype=bool))


# ------------------------------------------------------------------------------ errors

IWSLT = """<?xml version="1.0" encoding="UTF-8"?>
<mteval><srcset setid="t" srclang="english">
<doc docid="7">
<talkid>7</talkid>
<seg id="1">One.</seg>
<seg id="2">Two.</seg>
</doc>
</srcset></mteval>
"""


def _docids(d, en="a\nb\nc\n", de="A\nB\nC\n", ids="x\nx\ny\n"):
    w(d / "c.en", en), w(d / "c.de", de), w(d / "c.docids", ids)
    return str(d / "c"), d / "c.en"


ERRORS = {
    "line counts": (lambda d: _docids(d, de="A\nB\n"), [], "c.en", 3, "line counts differ"),
    "docids count": (lambda d: _docids(d, ids="x\nx\n"), [], "c.en", 3, "c.docids has 2 lines"),
    "reappearing id": (lambda d: _docids(d, ids="x\ny\nx\n"), [], "c.docids", 3, "reappears"),
    "empty docids sentence": (lambda d: _docids(d, de="A\n \t\nC\n"), [], "c.de", 2, "empty sentence"),
    "blank mismatch": (lambda d: (str(d / "c"), w(d / "c.en", "a\nb\n\nc\n"), w(d / "c.de", "A\n\nB\nC\n"))[:2],
                       [], "c.en", 1, "document 1 has 2 sentences"),
    "marker empty": (lambda d: (str(d / "c"), w(d / "c.en", "<d>\na\n   \n", True), w(d / "c.de", "<d>\nA\nB\n"))[:2],
                     [], "c.en", 3, "empty sentence"),
    "xml no id": (lambda d: (str(d / "c.{lang}.xml"), w(d / "c.en.xml", IWSLT.replace('<seg id="2">', "<seg>")),
                             w(d / "c.de.xml", IWSLT))[:2], [], "c.en.xml", 6, "without an id"),
    "xml unclosed": (lambda d: (str(d / "c.{lang}.xml"), w(d / "c.en.xml", IWSLT),
                                w(d / "c.de.xml", IWSLT.replace("One.</seg>", "One.")))[:2],
                     [], "c.de.xml", 5, "not closed"),
    "xml docid mismatch": (lambda d: (str(d / "c.{lang}.xml"), w(d / "c.en.xml", IWSLT),
                                      w(d / "c.de.xml", IWSLT.replace('"7"', '"8"')))[:2],
                           [], "c.de.xml", 3, "'8' is in"),
    "separator in text": (lambda d: _docids(d, en="a\nb <sep> c\nc\n"), [], "c.en", 2, "context separator"),
    "no boundaries": (lambda d: (str(d / "c"), w(d / "c.en", "a\nb\n"), w(d / "c.de", "A\nB\n"))[:2],
                      [], "c.en", 1, "--input-format"),
    "explicit format": (lambda d: _docids(d), ["--input-format", "marker"], "c.en", 1, "before the first <d>"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_exit_2_with_file_and_line(tmp_path, capsys, case):
    make, extra, fname, line, what = ERRORS[case]
    pref, _ = make(tmp_path)
    dest = tmp_path / "out" / "bin"
    argv = ["-s", "en", "-t", "de", "--trainpref", pref, "--destdir", str(dest)] + extra
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"docctx-prepare: error: {tmp_path / fname}:{line}: "), err
    assert what in err and "Traceback" not in err
    assert not dest.exists() and not (tmp_path / "out").exists()
    with pytest.raises(DocumentFormatError) as e:  # in-process API: the exception itself
        main(argv)
    assert (e.value.path, e.value.line) == (str(tmp_path / fname), line)


def test_error_in_a_later_split_leaves_destdir_as_it_was(tmp_path, capsys):
    good = write_format(tmp_path / "good", "docids")
    bad, _ = _docids(tmp_path / "bad", ids="x\ny\nx\n")
    dest = tmp_path / "bin"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        cli_main(["-s", "en", "-t", "de", "--trainpref", good, "--testpref", bad, "--destdir", str(dest)])
    assert os.listdir(dest) == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["bad", "bin", "good"]
    # a good run adds its files beside the user's; a second run refuses to overwrite them
    main(["-s", "en", "-t", "de", "--trainpref", good, "--destdir", str(dest)])
    assert (dest / "notes.txt").read_text() == "mine" and (dest / "train.en-de.docs").is_file()
    with pytest.raises(SystemExit) as e:
        cli_main(["-s", "en", "-t", "de", "--trainpref", good, "--destdir", str(dest)])
    assert e.value.code == 2 and "already exists" in capsys.readouterr().err


def test_console_script_error_no_traceback(tmp_path):
    pref, _ = _docids(tmp_path, ids="x\ny\nx\n")
    p = subprocess.run([script("docctx-prepare"), "-s", "en", "-t", "de", "--trainpref", pref,
                        "--destdir", str(tmp_path / "bin")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 2
    assert f"docctx-prepare: error: {tmp_path / 'c.docids'}:3: document id 'x' reappears" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "bin").exists()


def test_usage_errors(tmp_path, capsys):
    pref = write_format(tmp_path, "docids")
    for argv, what in [
        (["--validpref", pref], "without --trainpref"),
        (["--trainpref", pref, "--spm-vocab-size", "8", "--spm-model", pref + ".en"], "exclude"),
        (["--trainpref", pref, "--context-separator", "</s>"], "context-separator"),
    ]:
        with pytest.raises(SystemExit) as e:
            cli_main(["-s", "en", "-t", "de", "--destdir", str(tmp_path / "bin")] + argv)
        assert e.value.code == 2 and what in capsys.readouterr().err
    assert not (tmp_path / "bin").exists()


def test_newline_reference_in_a_segment_with_spm_vocab_size_0(tmp_path, capsys):
    """``&#10;`` inside a <seg> used to reach fairseq-preprocess as a line break (one line
    too many, a traceback); it is a space."""
    en = IWSLT.replace("One.", "One&#10;more.")
    de = IWSLT.replace("Two.", "Zwei&#13;&#10;mehr.")
    w(tmp_path / "c.en.xml", en), w(tmp_path / "c.de.xml", de)
    main(["-s", "en", "-t", "de", "--trainpref", str(tmp_path / "c.{lang}.xml"),
          "--destdir", str(tmp_path / "bin"), "--spm-vocab-size", "0"])
    _, text = load_split(tmp_path / "bin", "train")
    assert text == {"en": ["One more.", "Two."], "de": ["One.", "Zwei mehr."]}


def test_unwritable_destdir_is_refused_before_any_work(tmp_path, capsys):
    pref = write_format(tmp_path, "docids")
    blocker = w(tmp_path / "file.txt", "not a directory")
    cases = [(str(blocker / "bin"), "is not a directory")]
    if os.geteuid() != 0:  # root writes anywhere: only the file-in-the-way case applies
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        cases.append((str(ro / "bin"), "cannot write in"))
    for dest, what in cases:
        with pytest.raises(SystemExit) as e:
            cli_main(["-s", "en", "-t", "de", "--trainpref", pref, "--destdir", dest])
        assert e.value.code == 2
        out = capsys.readouterr()
        assert out.err.startswith(f"docctx-prepare: error: --destdir {dest}: ") and what in out.err
        assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
        assert "read" not in out.out  # refused before reading the data


def test_empty_blank_input_is_an_error(tmp_path, capsys):
    w(tmp_path / "c.en", ""), w(tmp_path / "c.de", "")
    with pytest.raises(SystemExit) as e:
        cli_main(["-s", "en", "-t", "de", "--trainpref", str(tmp_path / "c"), "--input-format", "blank",
                  "--destdir", str(tmp_path / "bin")])
    assert e.value.code == 2
    assert f"docctx-prepare: error: {tmp_path / 'c.en'}:1: no documents" in capsys.readouterr().err
