"""fairseq_docctx.data.readers: the four raw formats, auto-detection and their errors."""
import re

import pytest

from fairseq_docctx.data.documents import DocumentFormatError
from fairseq_docctx.data.readers import (
    detect_format,
    docids_path,
    prefix_name,
    read_documents,
    read_parallel,
    side_path,
)


def w(path, text, crlf=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    if crlf:
        text = text.replace("\n", "\r\n")
    path.write_bytes(text.encode("utf-8"))
    return path


def err(excinfo, path, line):
    """The error names FILE:LINE at its start."""
    assert isinstance(excinfo.value, DocumentFormatError)
    assert str(excinfo.value).startswith(f"{path}:{line}: "), str(excinfo.value)
    assert (excinfo.value.path, excinfo.value.line) == (str(path), line)


def sents(docs):
    return [d.sentences for d in docs]


# ------------------------------------------------------------------------------ paths


def test_paths_and_placeholders():
    assert side_path("c/train", "en", "de") == "c/train.en"
    assert side_path("c/dev_{lang}.txt", "de", "en") == "c/dev_de.txt"
    p = "X/{lang}-{other}/T.tst2016.{lang}-{other}.{lang}.xml"
    assert side_path(p, "en", "de") == "X/en-de/T.tst2016.en-de.en.xml"
    assert side_path(p, "de", "en") == "X/de-en/T.tst2016.de-en.de.xml"
    assert docids_path("c/train", "en", "de") == "c/train.docids"
    assert docids_path("c/dev_{lang}.txt", "en", "de") == "c/dev_docids.txt"
    assert docids_path(p, "en", "de") == "X/en-de/T.tst2016.en-de.docids.xml"
    assert docids_path("c/test.en", None) == "c/test.docids"
    assert prefix_name("c/dev_{lang}.txt") == "dev.txt"
    assert prefix_name(p) == "T.tst2016.xml"
    assert prefix_name("c/train") == "train"


# ------------------------------------------------------------------------------ docids


def test_docids_crlf_and_trailing_spaces(tmp_path):
    w(tmp_path / "c.en", "a b   \nc d\ne f \n", crlf=True)
    w(tmp_path / "c.de", "A B\nC D\nE F\n")
    w(tmp_path / "c.docids", "d1\nd1\nd2\n", crlf=True)
    p = read_parallel(str(tmp_path / "c"), "en", "de")
    assert p.format == "docids" and p.docids_path == str(tmp_path / "c.docids")
    assert [d.doc_id for d in p.src] == ["d1", "d2"] == [d.doc_id for d in p.tgt]
    assert sents(p.src) == [["a b", "c d"], ["e f"]]
    assert sents(p.tgt) == [["A B", "C D"], ["E F"]]
    assert [d.lines for d in p.src] == [[1, 2], [3]]


def test_docids_reappearing_id(tmp_path):
    w(tmp_path / "c.en", "a\nb\nc\nd\n")
    w(tmp_path / "c.de", "a\nb\nc\nd\n")
    w(tmp_path / "c.docids", "x\ny\ny\nx\n")
    with pytest.raises(DocumentFormatError, match="reappears") as e:
        read_parallel(str(tmp_path / "c"), "en", "de")
    err(e, tmp_path / "c.docids", 4)


def test_docids_line_counts(tmp_path):
    w(tmp_path / "c.en", "a\nb\nc\n")
    w(tmp_path / "c.de", "a\nb\n")
    w(tmp_path / "c.docids", "x\nx\nx\n")
    with pytest.raises(DocumentFormatError) as e:
        read_parallel(str(tmp_path / "c"), "en", "de")
    err(e, tmp_path / "c.en", 3)
    msg = str(e.value)
    assert f"{tmp_path / 'c.en'} has 3 lines" in msg and f"{tmp_path / 'c.de'} has 2 lines" in msg
    w(tmp_path / "c.de", "a\nb\nc\n")
    w(tmp_path / "c.docids", "x\nx\n")
    with pytest.raises(DocumentFormatError, match="c.docids has 2 lines") as e:
        read_parallel(str(tmp_path / "c"), "en", "de")
    err(e, tmp_path / "c.en", 3)


def test_docids_empty_segment(tmp_path):
    w(tmp_path / "c.en", "a\n   \nc\n", crlf=True)
    w(tmp_path / "c.de", "a\nb\nc\n")
    w(tmp_path / "c.docids", "x\nx\nx\n")
    with pytest.raises(DocumentFormatError, match="empty sentence") as e:
        read_parallel(str(tmp_path / "c"), "en", "de", "docids")
    err(e, tmp_path / "c.en", 2)


# ------------------------------------------------------------------------------ blank / marker


def test_blank(tmp_path):
    w(tmp_path / "c.en", "\n\na\nb\n\n\n\nc\n\n")
    w(tmp_path / "c.de", "A\nB\n \nC\n", crlf=True)
    p = read_parallel(str(tmp_path / "c"), "en", "de")
    assert p.format == "blank"
    assert [d.doc_id for d in p.src] == ["c:1", "c:2"]
    assert sents(p.src) == [["a", "b"], ["c"]] and sents(p.tgt) == [["A", "B"], ["C"]]


def test_blank_mismatch(tmp_path):
    w(tmp_path / "c.en", "a\nb\n\nc\n\nd\n")
    w(tmp_path / "c.de", "A\nB\n\nC\nD\n")
    with pytest.raises(DocumentFormatError, match="document 2 has 1 sentences") as e:
        read_parallel(str(tmp_path / "c"), "en", "de")
    err(e, tmp_path / "c.en", 4)
    assert "lines 4-5" in str(e.value) and str(tmp_path / "c.de") in str(e.value)


def test_marker_maruf_style(tmp_path):
    w(tmp_path / "dev_en.txt", "<d>\nHello .   \nWorld .  \n<d>\nBye .\n", crlf=True)
    w(tmp_path / "dev_de.txt", "<d>\nHallo .\nWelt .\n <d> \nTschüss .\n", crlf=True)
    p = read_parallel(str(tmp_path / "dev_{lang}.txt"), "en", "de")
    assert p.format == "marker"
    assert [d.doc_id for d in p.src] == ["dev.txt:1", "dev.txt:2"]
    assert sents(p.src) == [["Hello .", "World ."], ["Bye ."]]
    assert sents(p.tgt) == [["Hallo .", "Welt ."], ["Tschüss ."]]


@pytest.mark.parametrize(
    "text,line,what",
    [
        ("<d>\na\n  \nb\n", 3, "empty sentence"),
        ("x\n<d>\na\n", 1, "before the first"),
        ("<d>\n<d>\na\n", 1, "empty document"),
    ],
)
def test_marker_errors(tmp_path, text, line, what):
    w(tmp_path / "m.en", text, crlf=True)
    w(tmp_path / "m.de", "<d>\na\nb\n")
    with pytest.raises(DocumentFormatError, match=what) as e:
        read_parallel(str(tmp_path / "m"), "en", "de", "marker")
    err(e, tmp_path / "m.en", line)


# ------------------------------------------------------------------------------ xml

IWSLT = """<?xml version="1.0" encoding="UTF-8"?>
<mteval>
<srcset setid="t" srclang="english">
<doc docid="7" genre="lectures">
<url>http://x</url>
<keywords>a, b</keywords>
<speaker>S</speaker>
<talkid>7</talkid>
<title>T &amp; t</title>
<description>desc</description>
<reviewer></reviewer>
<translator></translator>
<seg id="1"> One &amp; two &lt;3.    </seg>
<seg id="2"> Three.</seg>
</doc>
<doc docid="9" genre="lectures">
<seg id="1">Nine.</seg>
</doc>
</srcset>
</mteval>
"""

SGML = """<refset setid="n" srclang="any" trglang="de">
<doc docid=9 sysid=ref>
<p>
<seg id=1>Neun & so.</seg>
</p>
</doc>
<doc sysid="ref" docid="7">
<seg id=2>Drei.</seg>
<seg id=1>Eins
 &amp; zwei.</seg>
</doc>
</refset>
"""


TAGS_ZH = ("<url>http://www.ted.com/talks/a.html</url>\n<keywords>talks</keywords>\n<speaker>A</speaker>\n"
           "<talkid>535</talkid>\n<title>A: t</title>\n<description>d</description>\n一 。\n二 。\n"
           "<url>http://www.ted.com/talks/b.html</url>\n<talkid>536</talkid>\n三 。\n")
TAGS_EN = ("<url>http://www.ted.com/talks/a.html</url>\n<keywords>talks</keywords>\n<speaker>A</speaker>\n"
           "<talkid>535</talkid>\n<title>A: t</title>\n<reviewer>r</reviewer>\n<description>d</description>\n"
           "One .\nTwo .\n<url>http://www.ted.com/talks/b.html</url>\n<talkid>536</talkid>\nThree .\n")


def test_iwslt_train_tags(tmp_path):
    """IWSLT training files (train.tags.zh-en.*): talks led by metadata lines, detected as
    'tags', ids from <talkid>, metadata lines (also one side only) never sentences."""
    w(tmp_path / "train.tags.zh-en.zh", TAGS_ZH)
    w(tmp_path / "train.tags.zh-en.en", TAGS_EN, crlf=True)
    assert detect_format(str(tmp_path / "train.tags.zh-en.en")) == "tags"
    p = read_parallel(str(tmp_path / "train.tags.zh-en"), "zh", "en")
    assert p.format == "tags"
    assert [d.doc_id for d in p.src] == ["535", "536"] == [d.doc_id for d in p.tgt]
    assert sents(p.src) == [["一 。", "二 。"], ["三 。"]]
    assert sents(p.tgt) == [["One .", "Two ."], ["Three ."]]
    assert p.tgt[0].lines == [8, 9]
    # a sentence missing on one side: the talk's counts differ, named with file and line
    w(tmp_path / "bad.en", TAGS_EN.replace("Two .\n", ""))
    w(tmp_path / "bad.zh", TAGS_ZH)
    with pytest.raises(DocumentFormatError, match="document 1 has 2 sentences here"):
        read_parallel(str(tmp_path / "bad"), "zh", "en")
    w(tmp_path / "blank.en", TAGS_EN.replace("Two .\n", "\n"))
    with pytest.raises(DocumentFormatError, match="empty sentence") as e:
        read_documents(str(tmp_path / "blank.en"), input_format="tags")
    err(e, tmp_path / "blank.en", 9)


def test_iwslt_train_tags_pairs_with_an_empty_side_are_dropped_and_counted(tmp_path):
    """An empty line on one side (or both) of train.tags.*: the pair is dropped, as the HAN
    authors' preparation drops it (Miculicich et al. 2018); the rest of the talk stays one
    document; the count is in docctx-prepare's log and manifest input entry."""
    from fairseq_docctx.data.prepare import read_split

    w(tmp_path / "train.tags.zh-en.zh", TAGS_ZH.replace("二 。\n", "\n二 。\n").replace("三 。\n", "三 。\n四 。\n"))
    w(tmp_path / "train.tags.zh-en.en", TAGS_EN.replace("Two .\n", "Extra .\nTwo .\n").replace("Three .\n", "Three .\n\n"))
    p = read_parallel(str(tmp_path / "train.tags.zh-en"), "zh", "en")
    assert [d.doc_id for d in p.src] == ["535", "536"] == [d.doc_id for d in p.tgt]
    assert sents(p.src) == [["一 。", "二 。"], ["三 。"]]
    assert sents(p.tgt) == [["One .", "Two ."], ["Three ."]]
    assert p.tgt[0].lines == [8, 10] and p.src[0].lines == [7, 9]
    assert p.dropped_empty == 2
    logged = []
    data = read_split("train", [str(tmp_path / "train.tags.zh-en")], "zh", "en", "auto", "<ctx>", logged.append)
    assert data.src == [["一 。", "二 。"], ["三 。"]] and data.inputs[0]["dropped_empty_pairs"] == 2
    assert "2 documents, 3 sentence pairs (2 pairs with an empty side dropped, their documents kept)" in logged[0]


def test_xml_matching(tmp_path):
    w(tmp_path / "en" / "t.xml", IWSLT)
    w(tmp_path / "de" / "t.xml", SGML, crlf=True)
    p = read_parallel(str(tmp_path / "{lang}" / "t.xml"), "en", "de")
    assert p.format == "xml"
    assert [d.doc_id for d in p.src] == ["7", "9"] == [d.doc_id for d in p.tgt]
    assert sents(p.src) == [["One & two <3.", "Three."], ["Nine."]]
    # target reordered into the source's document and segment order
    assert sents(p.tgt) == [["Eins & zwei.", "Drei."], ["Neun & so."]]
    assert p.src[0].lines == [13, 14] and p.tgt[0].lines == [9, 8]


def _xml_pair(tmp_path, en, de):
    w(tmp_path / "en" / "t.xml", en)
    w(tmp_path / "de" / "t.xml", de)
    return str(tmp_path / "{lang}" / "t.xml")


@pytest.mark.parametrize(
    "en,line,what",
    [
        (IWSLT.replace('<seg id="2">', "<seg>"), 14, "without an id"),
        (IWSLT.replace(" Three.</seg>", " Three."), 14, "not closed"),
        (IWSLT.replace("</doc>\n<doc docid=\"9\"", "<doc docid=\"9\""), 4, "not closed"),
        (IWSLT.replace("</seg>\n</doc>\n</srcset>", "</seg>\n</srcset>"), 16, "not closed"),
        (IWSLT.replace('docid="9"', 'docid="7"'), 16, "appears twice"),
        (IWSLT.replace(" Three.", "   "), 14, "empty segment"),
        (IWSLT.replace('<doc docid="9" genre="lectures">', "<doc>"), 16, "without a docid"),
    ],
)
def test_xml_errors(tmp_path, en, line, what):
    pref = _xml_pair(tmp_path, en, IWSLT)
    with pytest.raises(DocumentFormatError, match=what) as e:
        read_parallel(pref, "en", "de")
    err(e, tmp_path / "en" / "t.xml", line)


def test_xml_ids_on_one_side(tmp_path):
    pref = _xml_pair(tmp_path, IWSLT, IWSLT.replace('docid="9"', 'docid="10"'))
    with pytest.raises(DocumentFormatError, match="'10' is in") as e:
        read_parallel(pref, "en", "de")
    err(e, tmp_path / "de" / "t.xml", 16)
    assert str(tmp_path / "en" / "t.xml") in str(e.value)
    pref = _xml_pair(tmp_path, IWSLT, IWSLT.replace('<seg id="2">', '<seg id="3">'))
    with pytest.raises(DocumentFormatError, match=r"seg id\(s\) 3 of docid '7'") as e:
        read_parallel(pref, "en", "de")
    err(e, tmp_path / "de" / "t.xml", 14)
    pref = _xml_pair(tmp_path, IWSLT, re.sub(r'<seg id="2">.*\n', "", IWSLT))
    with pytest.raises(DocumentFormatError, match=r"seg id\(s\) 2 of docid '7'") as e:
        read_parallel(pref, "en", "de")
    err(e, tmp_path / "en" / "t.xml", 14)


# ------------------------------------------------------------------------------ auto


def test_detect_format(tmp_path):
    assert detect_format(str(w(tmp_path / "a.sgm", "junk\n"))) == "xml"
    assert detect_format(str(w(tmp_path / "a.txt", "\ufeff  <mteval>\n"))) == "xml"
    assert detect_format(str(w(tmp_path / "b.txt", "<d>\na\n"))) == "marker"
    assert detect_format(str(w(tmp_path / "c.txt", "a\n\nb\n"))) == "blank"
    d = w(tmp_path / "d.docids", "x\n")
    assert detect_format(str(w(tmp_path / "d.txt", "a\n\nb\n")), str(d)) == "docids"
    with pytest.raises(DocumentFormatError, match="--input-format") as e:
        detect_format(str(w(tmp_path / "e.txt", "a\nb\n")))
    err(e, tmp_path / "e.txt", 1)


def test_invalid_utf8(tmp_path):
    (tmp_path / "u.en").write_bytes(b"<d>\nok\nbad \xff\n")
    w(tmp_path / "u.de", "<d>\na\nb\n")
    with pytest.raises(DocumentFormatError, match="UTF-8") as e:
        read_parallel(str(tmp_path / "u"), "en", "de")
    err(e, tmp_path / "u.en", 3)


def test_read_documents_single_side(tmp_path):
    w(tmp_path / "x.en", "a\nb\nc\n")
    w(tmp_path / "x.docids", "1\n2\n2\n")
    docs = read_documents(str(tmp_path / "x"), "en")
    assert [(d.doc_id, d.sentences) for d in docs] == [("1", ["a"]), ("2", ["b", "c"])]
    assert [d.sentences for d in read_documents(str(tmp_path / "x.en"))] == [["a"], ["b", "c"]]
    w(tmp_path / "y.txt", "<d>\na\n")
    assert read_documents(str(tmp_path / "y.txt"))[0].doc_id == "y.txt:1"


# ------------------------------------------------------------------ SGML segment text


def test_raw_angle_brackets_in_a_segment_are_text(tmp_path):
    """WMT SGML holds raw ``<``/``>`` inside segments: they are text, not markup."""
    from fairseq_docctx.data.readers import read_file

    f = w(tmp_path / "t.sgm", '<srcset setid="s" srclang="en">\n<doc docid="d1">\n'
          '<seg id="1">if x<y and y>z then x<z</seg>\n'
          '<seg id="2">a literal <sep> stays, it\'s "<b>bold</b>"</seg>\n'
          "<seg id=3>x <y don't</seg>\n"
          '</doc>\n</srcset>\n')
    docs, fmt = read_file(str(f))
    assert fmt == "xml" and docs[0].seg_ids == ["1", "2", "3"]
    assert docs[0].sentences == ["if x<y and y>z then x<z",
                                 'a literal <sep> stays, it\'s "<b>bold</b>"', "x <y don't"]
    # a segment that is not closed before the next <seg> is still refused at its line
    f = w(tmp_path / "u.sgm", '<srcset><doc docid="d1">\n<seg id="1">a<b\n<seg id="2">c</seg>\n</doc></srcset>\n')
    with pytest.raises(DocumentFormatError, match=r"<seg id=1> is not closed \(found <seg> at line 3\)") as e:
        read_file(str(f))
    err(e, f, 2)


def test_newline_reference_in_a_segment_becomes_a_space(tmp_path):
    from fairseq_docctx.data.readers import read_file

    f = w(tmp_path / "t.xml", '<refset><doc docid="d1"><seg id="1">one&#10;two &#13;&#10; three</seg>'
          '<seg id="2"><![CDATA[a <b>\nc]]> &amp; d</seg></doc></refset>\n')
    docs, _ = read_file(str(f))
    assert docs[0].sentences == ["one two three", "a <b> c & d"]


def test_set_and_document_attributes(tmp_path):
    from fairseq_docctx.data.formats.xml import read_set_attributes
    from fairseq_docctx.data.readers import read_file

    f = w(tmp_path / "t.sgm", '<srcset setid="newstest2019" srclang="en">\n'
          '<doc sysid="ref" docid="a-1" genre="news" origlang="de">\n<seg id="1">x</seg>\n</doc>\n</srcset>\n')
    assert read_set_attributes(str(f)) == {"setid": "newstest2019", "srclang": "en"}
    docs, _ = read_file(str(f))
    assert docs[0].attributes == {"sysid": "ref", "docid": "a-1", "genre": "news", "origlang": "de"}


def test_empty_segments_only_where_allowed(tmp_path):
    from fairseq_docctx.data.readers import read_file

    f = w(tmp_path / "h.xml", '<tstset><doc docid="d"><seg id="1">a</seg><seg id="2"></seg></doc></tstset>\n')
    with pytest.raises(DocumentFormatError, match="empty segment id=2"):
        read_file(str(f))
    docs, _ = read_file(str(f), allow_empty=True)
    assert docs[0].sentences == ["a", ""]


def test_self_closing_segment_is_an_empty_segment(tmp_path, capsys):
    """``<seg id="2"/>`` is an empty segment, not an unclosed one: docctx-prepare refuses it
    at its line as it refuses ``<seg id="2"></seg>`` (empty sentences are an error in test
    sets); in hypotheses docctx-score reads it as an empty translation and says how many
    hypotheses are empty."""
    from fairseq_docctx.cli.prepare import cli_main
    from fairseq_docctx.cli.score import build_parser

    en = IWSLT.replace('<seg id="2"> Three.</seg>', '<seg id="2"/>')
    pref = _xml_pair(tmp_path, en, IWSLT)
    with pytest.raises(SystemExit) as e:
        cli_main(["-s", "en", "-t", "de", "--trainpref", pref, "--destdir", str(tmp_path / "bin")])
    msg = capsys.readouterr().err
    assert e.value.code == 2 and msg.count("\n") == 1 and "not closed" not in msg, msg
    assert msg.startswith(f"docctx-prepare: error: {tmp_path / 'en' / 't.xml'}:14: empty segment id=2 in "
                          "document '7'"), msg
    assert not (tmp_path / "bin").exists()

    def score(hyp):
        args = build_parser().parse_args(["bleu", "--hyp", str(hyp), "--ref", str(tmp_path / "de" / "t.xml")])
        rc = args.func(args)
        return rc, capsys.readouterr()

    closed = w(tmp_path / "hyp1.xml", IWSLT.replace('<seg id="2"> Three.</seg>', '<seg id="2"></seg>'))
    selfclosing = w(tmp_path / "hyp2.xml", en.replace('<seg id="1">Nine.</seg>', '<seg id="1" />'))
    rc, a = score(closed)
    assert rc == 0 and "note: " + str(closed) + ": 1 of 3 hypotheses are empty" in a.err, a.err
    rc, b = score(selfclosing)
    assert rc == 0 and "note: " + str(selfclosing) + ": 2 of 3 hypotheses are empty" in b.err, b.err
    assert a.out.splitlines()[0] != b.out.splitlines()[0]  # "Nine." is a translation in one, not the other
    rc, c = score(w(tmp_path / "hyp3.xml", en))
    assert rc == 0 and c.out == a.out  # <seg id="2"/> scores as <seg id="2"></seg>
    args = build_parser().parse_args(["compare", "--baseline", str(closed), "--hyp", str(selfclosing), "--ref",
                                      str(tmp_path / "de" / "t.xml"), "--names", "a,b", "--metrics", "bleu",
                                      "--bs-samples", "50", "--ar-trials", "50"])
    assert args.func(args) == 0
    msg = capsys.readouterr().err
    assert f"note: {closed}: 1 of 3 hypotheses are empty" in msg and f"note: {selfclosing}: 2 of 3" in msg, msg
    # a self-closing <doc/> has no segments
    with pytest.raises(DocumentFormatError, match="document '9' has no <seg>") as e:
        read_parallel(_xml_pair(tmp_path, re.sub(r'<doc docid="9" genre="lectures">\n<seg id="1">Nine.</seg>\n</doc>',
                                                 '<doc docid="9"/>', IWSLT), IWSLT), "en", "de")
    err(e, tmp_path / "en" / "t.xml", 16)


@pytest.mark.parametrize("fmt", ["blank", "marker", "docids"])
def test_a_file_without_documents_is_an_error_in_every_format(tmp_path, fmt):
    from fairseq_docctx.data.readers import read_file

    f = w(tmp_path / "e.txt", "")
    d = w(tmp_path / "e.docids", "")
    with pytest.raises(DocumentFormatError, match="no documents") as e:
        read_file(str(f), fmt, str(d))
    err(e, f, 1)


# ------------------------------------------------------------------------------ streams and invisible lines

# every format with two documents or more (XML: a comment and a CDATA section that hold
# "</doc>" lines, a document closed on the line of the next one's start)
STREAMED = {
    "docids": ("a\nb\nc\nd\n", "x\nx\ny\nz\n"),
    "blank": ("\na\nb\n\n\nc\n\nd\n", None),
    "marker": ("<d>\na\nb\n<d>\nc\n<d>\nd\n", None),
    "tags": (TAGS_EN, None),
    "jsonl": ('{"id": "x", "src": ["a", "b"]}\n{"id": 7, "src": ["c"], "more": 1}\n', None),
    "xml": ('<?xml version="1.0"?>\n<srcset setid="s" srclang="en">\n<doc docid="1" genre="g">\n'
            '<seg id="1">a</seg>\n<!-- a comment\n</doc>\n-->\n<seg id="2">b</seg>\n<![CDATA[\n</doc>\n]]>\n</doc>\n'
            '<doc docid="2">\n<seg id="1">c</seg>\n</doc><doc docid="3">\n<seg id="9">d</seg>\n</doc>\n</srcset>\n',
            None),
    "wmt-xml": ('<?xml version="1.0"?>\n<dataset id="t">\n<collection id="c">\n<doc id="1" origlang="en">\n'
                '<src lang="en"><p><seg id="1">a</seg><seg id="2">b</seg></p></src>\n</doc>\n<doc id="2">\n'
                '<src lang="en"><p><seg id="1">c</seg></p></src>\n</doc>\n</collection>\n</dataset>\n', None),
}


def _fields(docs):
    return [(d.doc_id, d.sentences, d.lines, d.seg_ids, d.attributes, d.path) for d in docs]


class _Pipe:
    """A byte stream that hands out its lines one at a time and counts them."""

    def __init__(self, text):
        self.lines = text.encode("utf-8").splitlines(keepends=True)
        self.given = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.given == len(self.lines):
            raise StopIteration
        self.given += 1
        return self.lines[self.given - 1]

    def read(self, n=-1):  # what lxml reads
        return b"".join(next(self, b"") for _ in range(1))


@pytest.mark.parametrize("fmt", sorted(STREAMED))
def test_a_stream_gives_the_documents_of_the_file_one_at_a_time(tmp_path, fmt):
    """DocumentStream (what docctx-translate reads) gives read_file's documents in every
    format, from a file and from a byte stream (named as given), and a document as soon as
    the lines that complete it are read."""
    from fairseq_docctx.data.readers import DocumentStream, read_file

    text, ids = STREAMED[fmt]
    f = w(tmp_path / "in.txt", text)
    d = w(tmp_path / "in.docids", ids) if ids else None
    docs, _ = read_file(str(f), fmt if fmt == "docids" else "auto", str(d) if d else None)
    assert len(docs) >= 2
    stream = DocumentStream(str(f), "auto", str(d) if d else None)
    assert stream.format == fmt and _fields(stream) == _fields(docs)
    if fmt == "xml":
        assert stream.set_attributes == {"setid": "s", "srclang": "en"}
    pipe = _Pipe(text)
    stream = DocumentStream(pipe, fmt, str(d) if d else None, name="in.txt", path="<stdin>")
    first = next(iter(stream))
    assert _fields([first])[0][:4] == _fields(docs[:1])[0][:4] and first.path == "<stdin>"
    # no further than the line that completes the document (blank: its empty line; the next
    # marker, id or talk; XML: its </doc> line; lxml reads ahead in blocks of its own)
    completes = {"docids": 3, "blank": 4, "marker": 4, "tags": 10, "jsonl": 1, "xml": 12}
    if fmt in completes:
        assert pipe.given == completes[fmt], (pipe.given, first.lines)


@pytest.mark.parametrize("fmt,text,line", [
    ("docids", "a\n\u200b\n", 2),
    ("blank", "a\n\u200b \u2060\n\nb\n", 2),
    ("marker", "<d>\na\n\ufeff\n", 3),
    ("jsonl", '{"id": "x", "src": ["a", "\\u200b\\u200d"]}\n', 1),
    ("xml", '<srcset>\n<doc docid="1">\n<seg id="1">a</seg>\n<seg id="2">&#8203;</seg>\n</doc>\n</srcset>\n', 4),
    ("wmt-xml", '<dataset>\n<collection id="c">\n<doc id="1">\n<src lang="en"><p><seg id="1">a</seg>\n'
                '<seg id="2">\u200b</seg></p></src>\n</doc>\n</collection>\n</dataset>\n', 5),
])
def test_a_line_that_shows_nothing_is_an_empty_sentence(tmp_path, fmt, text, line):
    """A sentence of zero-width and other format characters only (U+200B, U+2060, U+FEFF,
    U+200D) is refused as an empty one is, naming file and line, in every format (read_file:
    docctx-prepare and docctx-score; DocumentStream: docctx-translate); in a blank-line file it
    is neither a sentence nor a document break."""
    from fairseq_docctx.data.readers import DocumentStream, read_file

    f = w(tmp_path / "in.txt", text)
    d = w(tmp_path / "in.docids", "x\nx\n")
    for read in (lambda: read_file(str(f), fmt, str(d)), lambda: list(DocumentStream(str(f), fmt, str(d)))):
        with pytest.raises(DocumentFormatError, match=r"only invisible characters: U\+") as e:
            read()
        err(e, f, line)
        assert "empty" in str(e.value) or "shows nothing" in str(e.value)


def test_a_line_that_shows_nothing_drops_its_pair_in_tags_files(tmp_path):
    """In IWSLT train.tags files an invisible line is an empty sentence: its pair is dropped
    as the pairs of empty lines are."""
    w(tmp_path / "train.tags.zh-en.zh", TAGS_ZH)
    w(tmp_path / "train.tags.zh-en.en", TAGS_EN.replace("Two .\n", "\u200b\n"))
    p = read_parallel(str(tmp_path / "train.tags.zh-en"), "zh", "en")
    assert sents(p.tgt) == [["One ."], ["Three ."]] and p.dropped_empty == 1


def test_docctx_prepare_refuses_a_line_that_shows_nothing(tmp_path, capsys):
    """docctx-prepare: a sentence of zero-width spaces is one line naming file and line, and
    no data directory is written."""
    from fairseq_docctx.cli.prepare import cli_main

    w(tmp_path / "c.en", "a b\n\u200b\u200b\nc\n")
    w(tmp_path / "c.de", "A B\nX\nC\n")
    w(tmp_path / "c.docids", "x\nx\ny\n")
    with pytest.raises(SystemExit) as e:
        cli_main(["-s", "en", "-t", "de", "--trainpref", str(tmp_path / "c"), "--destdir", str(tmp_path / "bin")])
    msg = capsys.readouterr().err
    assert e.value.code == 2 and msg.count("\n") == 1, msg
    assert msg.startswith(f"docctx-prepare: error: {tmp_path / 'c.en'}:2: empty sentence in document 'x' "
                          "(only invisible characters: U+200B)"), msg
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("fmt,text,line,code", [
    ("docids", "a\nb \x00c\n", 2, "U+0000 (NUL) at column 3"),
    ("blank", "a\n\nb\x1b[1m c\n", 3, "U+001B (ESC)"),
    ("marker", "<d>\na\n<d>\nb\x7f\n", 4, "U+007F (DEL)"),
    ("jsonl", '{"id": "x", "src": ["a"]}\n{"id": "y", "src": ["a", "b\\u0000c"]}\n', 2, "U+0000 (NUL)"),
    ("jsonl", '{"id": "x", "src": ["a \\f b"]}\n', 1, "U+000C (form feed)"),
    ("xml", '<srcset>\n<doc docid="1">\n<seg id="1">a</seg>\n<seg id="2">b \x9d</seg>\n</doc>\n</srcset>\n', 4,
     "U+009D at column"),
    ("wmt-xml", '<dataset>\n<collection id="c">\n<doc id="1">\n<src lang="en"><p><seg id="1">a</seg>\n'
                '<seg id="2">b &#133;</seg></p></src>\n</doc>\n</collection>\n</dataset>\n', 5, "U+0085 (NEL)"),
])
def test_a_control_character_is_refused_on_every_reading_path(tmp_path, fmt, text, line, code):
    """A NUL byte, ESC, DEL, a C1 control (the mark of text decoded with the wrong encoding)
    or a JSON-escaped one inside a sentence is refused naming file, line and column, in every
    format and by every reader (read_file: docctx-prepare, docctx-score; DocumentStream:
    docctx-translate; read_lines: hypotheses, docids, the contrastive and ctxpro files); a
    model would read it as an unknown word and translate the line differently without a
    word. The tab stays white space."""
    from fairseq_docctx.data.documents import read_lines
    from fairseq_docctx.data.readers import DocumentStream, read_file

    f = w(tmp_path / "in.txt", text)
    d = w(tmp_path / "in.docids", "x\nx\n")
    for read in (lambda: read_file(str(f), fmt, str(d)), lambda: list(DocumentStream(str(f), fmt, str(d)))):
        with pytest.raises(DocumentFormatError, match=re.escape(code)) as e:
            read()
        err(e, f, line)
    if fmt in ("docids", "blank", "marker"):
        with pytest.raises(DocumentFormatError, match=re.escape(code)) as e:
            read_lines(str(f))
        err(e, f, line)
    assert read_file(str(w(tmp_path / "tab.txt", "a\tb\n")), "docids", str(w(tmp_path / "tab.docids", "x\n")))[0][0] \
        .sentences == ["a\tb"]


def test_docctx_prepare_translate_and_score_refuse_a_nul_byte(tmp_path, capsys):
    """The three commands: one line naming the file and line, exit code 2, nothing written."""
    from conftest import run_in_process
    from fairseq_docctx.cli.prepare import cli_main as prepare
    from fairseq_docctx.cli.score import cli_main as score

    w(tmp_path / "c.en", "a b\nc \x00d\n")
    w(tmp_path / "c.de", "A B\nC D\n")
    w(tmp_path / "c.docids", "x\nx\n")
    code, _, msg = run_in_process(prepare, ["-s", "en", "-t", "de", "--trainpref", tmp_path / "c",
                                            "--destdir", tmp_path / "bin"], capsys)
    assert code == 2 and msg == (f"docctx-prepare: error: {tmp_path / 'c.en'}:2: control character U+0000 (NUL) at "
                                 "column 3: text must not hold control characters (tab excepted); remove them\n")
    assert not (tmp_path / "bin").exists()
    code, _, msg = run_in_process(score, ["bleu", "--hyp", tmp_path / "c.en", "--ref", tmp_path / "c.de"], capsys)
    assert code == 2 and msg.startswith(f"docctx-score bleu: error: {tmp_path / 'c.en'}:2: control character U+0000")
