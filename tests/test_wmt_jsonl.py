"""WMT 2021+ XML (``wmt-xml``) and JSON Lines (``jsonl``): the readers and their errors
(file and line), auto-detection, the writers, and the round trip docctx-prepare ->
docctx-translate -> docctx-score with every document and seg id kept, several references."""
import json

import pytest
import sacrebleu

from conftest import run_in_process
from fairseq_docctx.cli.prepare import main as prepare_main
from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.data import readers
from fairseq_docctx.data.doc_index import DocIndex
from fairseq_docctx.data.documents import DocumentFormatError
from fairseq_docctx.data.formats import wmt_xml
from fairseq_docctx.data.readers import read_file, read_parallel


def wmt_file(path, docs, refs=("A",), seg_ids=None, collections=("news", "speech")):
    """A WMT 2021+ file: ``docs`` = [(doc id, source sentences, reference sentences)],
    every reference translator's text = the reference with the translator's name appended to
    its second and later copies; two sentences a paragraph; the documents alternate between
    two collections."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<dataset id="toytest2099">']
    by_coll = {}
    for k, d in enumerate(docs):
        by_coll.setdefault(collections[k * len(collections) // len(docs)], []).append(d)
    for coll, ds in by_coll.items():
        out.append(f'  <collection id="{coll}">')
        for did, src, ref in ds:
            ids = seg_ids(did, len(src)) if seg_ids else [str(j + 1) for j in range(len(src))]
            out.append(f'    <doc id="{did}" origlang="src" domain="{coll}">')

            def side(tag, attrs, sents):
                out.append(f"      <{tag} {attrs}>")
                for p in range(0, len(sents), 2):
                    segs = "".join(f'<seg id="{i}">{s}</seg>' for i, s in zip(ids[p:p + 2], sents[p:p + 2]))
                    out.append(f"        <p>{segs}</p>")
                out.append(f"      </{tag}>")

            side("src", 'lang="src"', src)
            for n, t in enumerate(refs):
                side("ref", f'lang="tgt" translator="{t}"', [s if n == 0 else f"{s} {t}" for s in ref])
            out.append("    </doc>")
        out.append("  </collection>")
    out.append("</dataset>")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


DOCS = [("d1", ["w1 w2", "w3 w4 w5", "w6"], ["W1 W2", "W3 W4 W5", "W6"]),
        ("d2", ["w7 w8"], ["W7 W8"]),
        ("d3", ["w9 w1", "w2"], ["W9 W1", "W2"])]


def test_wmt_xml_reader_sides_and_translators(tmp_path):
    f = wmt_file(tmp_path / "t.xml", DOCS, refs=("A", "B"))
    assert readers.detect_format(str(f)) == "wmt-xml"
    src, fmt = read_file(str(f))
    assert fmt == "wmt-xml" and [d.doc_id for d in src] == ["d1", "d2", "d3"]
    assert src[0].sentences == DOCS[0][1] and src[0].seg_ids == ["1", "2", "3"]
    assert src[0].attributes == {"id": "d1", "origlang": "src", "domain": "news"}
    assert src[0].lines == [6, 6, 7]  # two segments a paragraph line
    b, _ = read_file(str(f), side="ref", translator="B")
    assert b[1].sentences == ["W7 W8 B"]
    assert wmt_xml.wmt_translators(str(f)) == ["A", "B"]
    pd = read_parallel(str(f), "src", "tgt")  # the file itself as the prefix: source + first reference
    assert pd.format == "wmt-xml" and [d.sentences for d in pd.tgt] == [d[2] for d in DOCS]
    with pytest.raises(DocumentFormatError, match=r"t\.xml:4: document 'd1' has no <ref translator='C'> \(it has: 'A', 'B'\)"):
        read_file(str(f), side="ref", translator="C")
    with pytest.raises(DocumentFormatError, match=r"t\.xml:2: no <hyp> element"):
        read_file(str(f), side="hyp")


@pytest.mark.parametrize("edit, line, what", [
    (lambda t: t.replace('<seg id="2">w3 w4 w5</seg>', '<seg>w3 w4 w5</seg>'), 6, "<seg> without an id in document 'd1'"),
    (lambda t: t.replace('doc id="d2"', 'doc id="d1"'), 14, "doc id 'd1' appears twice (first at line 4)"),
    (lambda t: t.replace('<seg id="1">w7 w8</seg>', '<seg id="1"></seg>'), 16, "empty segment id=1 in document 'd2'"),
    (lambda t: t.replace("<p><seg id=\"1\">w7 w8</seg></p>", "<seg id=\"1\">w7 w8</seg>"), 16, "<seg> outside a <p>"),
    (lambda t: t.replace("w3 w4 w5", "w3 < w5", 1), 6, "not well-formed XML"),
    (lambda t: t.replace('<doc id="d3"', '<doc'), 24, "<doc> without an id attribute"),
])
def test_wmt_xml_errors_name_file_and_line(tmp_path, edit, line, what):
    f = wmt_file(tmp_path / "t.xml", DOCS)
    f.write_text(edit(f.read_text()))
    with pytest.raises(DocumentFormatError) as e:
        read_file(str(f))
    assert str(e.value).startswith(f"{f}:{line}: ") and what in str(e.value), str(e.value)


def jsonl_file(path, docs, with_tgt=True):
    path.write_text("".join(json.dumps({"id": d, "src": s, **({"tgt": t} if with_tgt else {})}) + "\n"
                            for d, s, t in docs), encoding="utf-8")
    return path


@pytest.mark.parametrize("line, what", [
    ('{"id": "a", "src": ["x"]', "not valid JSON"),
    ('["x"]', "not a JSON object"),
    ('{"src": ["x"], "tgt": ["y"]}', 'no "id"'),
    ('{"id": "a", "src": ["x", "y"], "tgt": ["X"]}', '2 "src" sentences but 1 "tgt" sentences'),
    ('{"id": "a", "src": ["x", " "], "tgt": ["X", "Y"]}', 'sentence 2 of "src" is empty'),
    ('{"id": "d1", "src": ["x"], "tgt": ["X"]}', "document id 'd1' appears twice (first at line 1)"),
    ('', "empty line"),
    ('{"id": "a", "src": "x y", "tgt": ["X"]}', 'no "src" list of sentences'),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line, what):
    f = jsonl_file(tmp_path / "t.jsonl", DOCS[:2])
    f.write_text(f.read_text() + line + "\n" + json.dumps({"id": "z", "src": ["q"], "tgt": ["Q"]}) + "\n")
    with pytest.raises(DocumentFormatError) as e:
        read_parallel(str(f), "src", "tgt")
    assert str(e.value).startswith(f"{f}:3: ") and what in str(e.value), str(e.value)


# ------------------------------------------------------------------------------------------
# prepare -> translate -> score


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def toy_test_docs(toy_bin):
    pd = read_parallel(str(toy_bin.parent / "raw" / "test"), "src", "tgt")
    return [(d.doc_id, s.sentences, t.sentences) for d, s, t in zip(pd.src, pd.src, pd.tgt)]


def test_wmt_xml_round_trip_prepare_translate_score(toy_bin, concat_both_ckpt, toy_test_docs, tmp_path, capsys):
    # seg ids that are not 1..n: they must be kept, not renumbered
    f = wmt_file(tmp_path / "test.xml", toy_test_docs, refs=("A", "B"),
                 seg_ids=lambda did, n: [f"{did}-s{10 * (j + 1)}" for j in range(n)])
    dest = tmp_path / "bin"
    prepare_main(["-s", "src", "-t", "tgt", "--testpref", str(f), "--destdir", str(dest), "--joined-dictionary",
                  "--srcdict", str(toy_bin / "dict.src.txt"), "--ref-translator", "B"])
    index = DocIndex.read(str(dest / "test.src-tgt.docs"))
    assert index.doc_ids == [d for d, _, _ in toy_test_docs]
    assert index.lengths.tolist() == [len(s) for _, s, _ in toy_test_docs]
    manifest = json.loads((dest / "docctx.json").read_text())
    assert manifest["splits"]["test"]["inputs"][0]["format"] == "wmt-xml"
    assert manifest["splits"]["test"]["inputs"][0]["translator"] == "B"
    # translate: a <hyp system=...> beside the source and the references of every document
    out = tmp_path / "out.xml"
    rc, _, err = run_in_process(translate_main, [f, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "2",
                                                 "--cpu", "--quiet", "--system-name", "ctx", "-o", out], capsys)
    assert rc == 0, err
    hyp, fmt = read_file(str(out), side="hyp")
    src, _ = read_file(str(f))
    assert fmt == "wmt-xml" and [d.doc_id for d in hyp] == [d.doc_id for d in src]
    assert [d.seg_ids for d in hyp] == [d.seg_ids for d in src]
    assert [d.attributes for d in hyp] == [d.attributes for d in src]
    assert wmt_xml.wmt_translators(str(out)) == ["A", "B"] and wmt_xml.wmt_systems(str(out)) == ["ctx"]
    assert [d.sentences for d in read_file(str(out))[0]] == [d.sentences for d in src]
    # the paragraphs of the hypothesis are the source's
    from lxml import etree

    for doc in etree.parse(str(out)).getroot().iter("doc"):
        shape = lambda el: [[s.get("id") for s in p.findall("seg")] for p in el.findall("p")]  # noqa: E731
        assert shape(doc.find("hyp")) == shape(doc.find("src"))
        assert doc.getparent().get("id") in ("news", "speech")
    # translating the output again replaces the system's <hyp>, it does not add a second one
    rc, _, err = run_in_process(translate_main, [out, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "2",
                                                 "--cpu", "--quiet", "--system-name", "ctx", "-o", tmp_path / "again.xml"],
                                capsys)
    assert rc == 0 and wmt_xml.wmt_systems(str(tmp_path / "again.xml")) == ["ctx"]
    # score: both references by default, one with --ref-translator; per document by doc id
    flat = [s for d in hyp for s in d.sentences]
    refs = [[s for _, _, t in toy_test_docs for s in t], [s + " B" for _, _, t in toy_test_docs for s in t]]
    rc, text, err = score_cli(["bleu", "--hyp", out, "--ref", f, "--json", tmp_path / "run.json"], capsys)
    assert rc == 0, err
    res = json.loads((tmp_path / "run.json").read_text())["metrics"]["bleu"]
    assert res["score"] == pytest.approx(sacrebleu.corpus_bleu(flat, refs).score) and "nrefs:2" in res["signature"]
    assert list(res["per_document"]) == [d for d, _, _ in toy_test_docs]
    rc, text, err = score_cli(["bleu", "--hyp", out, "--ref", f, "--ref-translator", "B"], capsys)
    assert rc == 0 and f"{sacrebleu.corpus_bleu(flat, refs[1:]).score:.2f}" in text and "nrefs:1" in text
    rc, _, err = score_cli(["bleu", "--hyp", out, "--ref", f, "--ref-translator", "C"], capsys)
    assert rc == 2 and "has references by 'A', 'B'" in err
    # a hypothesis file with a segment the reference lacks: file and line
    tree = etree.parse(str(out))
    seg = next(tree.getroot().iter("hyp")).find("p").find("seg")
    first = seg.get("id")
    seg.set("id", "zz")
    bad = tmp_path / "bad.xml"
    tree.write(str(bad), encoding="UTF-8", xml_declaration=True)
    rc, _, err = score_cli(["bleu", "--hyp", bad, "--ref", f, "--hyp-system", "ctx"], capsys)
    assert rc == 2 and f"{bad}:{seg.sourceline}: seg id(s) zz of docid" in err, err
    assert first == f"{toy_test_docs[0][0]}-s10"


def test_jsonl_round_trip_prepare_translate_score(toy_bin, concat_both_ckpt, toy_test_docs, tmp_path, capsys):
    f = jsonl_file(tmp_path / "test.jsonl", toy_test_docs)
    dest = tmp_path / "bin"
    prepare_main(["-s", "src", "-t", "tgt", "--testpref", str(f), "--destdir", str(dest), "--joined-dictionary",
                  "--srcdict", str(toy_bin / "dict.src.txt")])
    assert DocIndex.read(str(dest / "test.src-tgt.docs")).doc_ids == [d for d, _, _ in toy_test_docs]
    # translate a source-only file: each line's object with its "hyp"
    src_only = jsonl_file(tmp_path / "src.jsonl", toy_test_docs, with_tgt=False)
    out = tmp_path / "out.jsonl"
    rc, _, err = run_in_process(translate_main, [src_only, "--path", concat_both_ckpt, "--data", toy_bin,
                                                 "--beam", "2", "--cpu", "--quiet", "-o", out], capsys)
    assert rc == 0, err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [d for d, _, _ in toy_test_docs]
    assert [x["src"] for x in lines] == [s for _, s, _ in toy_test_docs]
    assert [len(x["hyp"]) for x in lines] == [len(s) for _, s, _ in toy_test_docs]
    # the hub gives the same translations
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(str(concat_both_ckpt), data=str(toy_bin))
    assert [x["hyp"] for x in lines] == hub.translate_documents([s for _, s, _ in toy_test_docs], beam=2, lenpen=1.0,
                                                                max_len_a=1.2, max_len_b=10)
    rc, text, err = score_cli(["bleu", "--hyp", out, "--ref", f, "--json", tmp_path / "run.json", "--both"], capsys)
    assert rc == 0, err
    metrics = json.loads((tmp_path / "run.json").read_text())["metrics"]
    flat = [s for x in lines for s in x["hyp"]]
    assert metrics["bleu"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(flat, [[s for _, _, t in toy_test_docs for s in t]]).score)
    assert list(metrics["d-bleu"]["per_document"]) == [d for d, _, _ in toy_test_docs]
    # a translation of another document set: the id names the file and line
    other = tmp_path / "other.jsonl"
    other.write_text(out.read_text().replace(f'"id": "{toy_test_docs[1][0]}"', '"id": "zzz"'), encoding="utf-8")
    rc, _, err = score_cli(["bleu", "--hyp", other, "--ref", f], capsys)
    assert rc == 2 and f"{other}:2: document 2 is 'zzz' here but '{toy_test_docs[1][0]}'" in err
