"""``xml``: IWSLT/WMT XML or SGML test sets, ``<doc docid=..>`` holding ``<seg id=..>``, in
a set element (``<srcset>``, ``<refset>``, ``<tstset>``) whose attributes are kept. The two
sides of a pair are matched by docid and seg id. Detected by a name ending ``.xml``,
``.sgm``, ``.sgml`` or a start of ``<?xml``, ``<mteval``, a set element or ``<doc``; written as
an ``<mteval>`` holding a ``<tstset>``."""
import bisect
import html
import re
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ..documents import Document, DocumentFormatError, Lookahead, check_controls, clean, invisible, match_seg_ids, \
    read_lines, shows_nothing
from .registry import DocumentFormat, FormatWriter, register

XML_EXTENSIONS = (".xml", ".sgm", ".sgml")
_XML_STARTS = ("<?xml", "<mteval", "<srcset", "<refset", "<tstset", "<doc", "<dataset")

_XML_TOKEN = re.compile(
    r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<[?!][^>]*>|<(/?)([A-Za-z][\w.:-]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*)>",
    re.S,
)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_SEG_END = re.compile(r"</seg\s*>", re.I)
_STRUCTURE_TAG = re.compile(r"<(/?)(seg|doc)(?![\w.:-])", re.I)
_XML_ATTR = re.compile(r"([A-Za-z_][\w.:-]*)\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>\"']+)")


def _attrs(s: str) -> Dict[str, str]:
    return {k.lower(): html.unescape(v.strip("\"'")) for k, v in _XML_ATTR.findall(s)}


def _segment_text(raw: str) -> str:
    """The text of a ``<seg>``: CDATA sections as they are, comments dropped, character
    references decoded, every other character kept, ``<`` and ``>`` included (SGML test
    sets hold raw ``x<y`` or a literal ``<sep>``, which are text, not markup); runs of
    whitespace, newlines from ``&#10;`` included, become one space."""
    parts, pos = [], 0
    for m in _CDATA.finditer(raw):
        parts.append(html.unescape(_COMMENT.sub(" ", raw[pos:m.start()])))
        parts.append(m.group(1))
        pos = m.end()
    parts.append(html.unescape(_COMMENT.sub(" ", raw[pos:])))
    return " ".join("".join(parts).split())


def _self_closing(raw_attrs: str):
    """``(attributes, self-closing)`` of a start tag's attribute text: ``<seg id="2"/>`` is
    a self-closing (empty) element; the ``/`` is not part of the last attribute."""
    stripped = raw_attrs.rstrip()
    if stripped.endswith("/"):
        return stripped[:-1], True
    return raw_attrs, False


class _XmlParser:
    """IWSLT/WMT XML or SGML, read tolerantly (unquoted attributes, bare ``&``, raw ``<``
    inside a segment) but strictly in structure: every ``<seg>`` has an id and is closed
    inside an open ``<doc>``. A self-closing ``<seg id="N"/>`` is an empty segment.
    ``allow_empty``: accept empty segments (hypotheses).

    The text is given in pieces (:meth:`feed`), each ending where a document may end; a
    document still open at the end of a piece is parsed again with the next one.
    :attr:`set_attributes`: those of the set element (``<srcset>``, ``<refset>``,
    ``<tstset>``) before the first document, ``{}`` when there is none (``None`` until the
    first document or set element is read)."""

    def __init__(self, path: str, allow_empty: bool = False):
        self.path, self.allow_empty = path, allow_empty
        self.doc_lines: Dict[str, int] = {}
        self.found = 0
        self.set_attributes: Optional[Dict[str, str]] = None

    def feed(self, text: str, first_line: int = 1, final: bool = True) -> Tuple[List[Document], str, int]:
        """The documents completed in ``text`` (whose first line is line ``first_line`` of
        the file), and the text, with its first line, from the start of a document still open
        at its end (``""`` if none); ``final``: the end of the file (a document still open is
        an error)."""
        path = self.path
        line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

        def line_of(pos: int) -> int:
            return first_line - 1 + bisect.bisect_right(line_starts, pos)

        docs: List[Document] = []
        doc: Optional[Document] = None
        doc_line = doc_start = 0
        seg_ids: Dict[str, int] = {}
        pos = 0
        while True:
            m = _XML_TOKEN.search(text, pos)
            if m is None:
                break
            pos = m.end()
            closing, tag = m.group(1), (m.group(2) or "").lower()
            if not tag:
                continue  # comment, processing instruction, doctype, CDATA outside a seg
            ln = line_of(m.start())
            if self.set_attributes is None:
                if tag in ("srcset", "refset", "tstset") and not closing:
                    self.set_attributes = _attrs(m.group(3))
                elif tag in ("doc", "seg"):
                    self.set_attributes = {}
            if tag == "doc" and closing:
                if doc is None:
                    raise DocumentFormatError(path, ln, "</doc> without an open <doc>")
                if not doc.sentences:
                    raise DocumentFormatError(path, doc_line, f"document {doc.doc_id!r} has no <seg>")
                docs.append(doc)
                doc = None
            elif tag == "doc":
                doc = self._open_doc(m, ln, doc, doc_line)
                doc_line, doc_start, seg_ids = ln, m.start(), {}
            elif tag == "seg":
                pos = self._segment(text, m, ln, doc, seg_ids, line_of)
        self.found += len(docs)
        if doc is not None:
            if final:
                raise DocumentFormatError(path, doc_line,
                                          f"<doc docid={doc.doc_id}> is not closed before the end of the file")
            del self.doc_lines[doc.doc_id]  # read again with the next piece
            return docs, text[doc_start:], line_of(doc_start)
        if final and not self.found:
            raise DocumentFormatError(path, 1, "no <doc docid=...> element found")
        return docs, "", 0

    def _open_doc(self, m, ln: int, doc: Optional[Document], doc_line: int) -> Document:
        """The document a ``<doc>`` start tag (``m``, at line ``ln``) opens, checked: none
        open (``doc``, opened at ``doc_line``), a docid without a tab, not seen before."""
        path = self.path
        if doc is not None:
            raise DocumentFormatError(
                path, doc_line, f"<doc docid={doc.doc_id}> is not closed (next <doc> at line {ln})"
            )
        raw, self_closing = _self_closing(m.group(3))
        attrs = _attrs(raw)
        docid = attrs.get("docid", "").strip()
        if not docid:
            raise DocumentFormatError(path, ln, "<doc> without a docid attribute")
        if "\t" in docid:
            raise DocumentFormatError(path, ln, f"docid {docid!r} contains a tab")
        if docid in self.doc_lines:
            raise DocumentFormatError(
                path, ln, f"docid {docid!r} appears twice (first at line {self.doc_lines[docid]})"
            )
        self.doc_lines[docid] = ln
        if self_closing:  # <doc docid="..."/>
            raise DocumentFormatError(path, ln, f"document {docid!r} has no <seg>")
        return Document(docid, [], [], path, [], ln, attrs)

    def _segment(self, text: str, m, ln: int, doc: Optional[Document], seg_ids: Dict[str, int],
                 line_of: Callable[[int], int]) -> int:
        """Add to ``doc`` the segment whose start tag is ``m`` (at line ``ln``; ``seg_ids``:
        the document's seg ids so far and their lines); returns where parsing goes on."""
        path, allow_empty = self.path, self.allow_empty
        if m.group(1):
            raise DocumentFormatError(path, ln, "</seg> without an open <seg>")
        if doc is None:
            raise DocumentFormatError(path, ln, "<seg> outside a <doc>")
        raw, self_closing = _self_closing(m.group(3))
        sid = _attrs(raw).get("id", "").strip()
        if not sid:
            raise DocumentFormatError(path, ln, f"<seg> without an id in document {doc.doc_id!r}")
        if sid in seg_ids:
            raise DocumentFormatError(
                path, ln, f"seg id={sid} appears twice in document {doc.doc_id!r} (first at line {seg_ids[sid]})"
            )
        seg_ids[sid] = ln
        if self_closing:  # <seg id="..."/>: an empty segment
            if not allow_empty:
                raise DocumentFormatError(path, ln, f"empty segment id={sid} in document {doc.doc_id!r} "
                                          f"(<seg id={sid}/>)")
            doc.seg_ids.append(sid)
            doc.sentences.append("")
            doc.lines.append(ln)
            return m.end()
        # the segment runs to the next </seg>: what lies between is text
        end = _SEG_END.search(text, m.end())
        inner = _STRUCTURE_TAG.search(text, m.end(), end.start() if end else len(text))
        if inner is not None:
            found = f"<{inner.group(1)}{inner.group(2).lower()}>"
            raise DocumentFormatError(
                path, ln, f"<seg id={sid}> is not closed (found {found} at line {line_of(inner.start())})"
            )
        if end is None:
            raise DocumentFormatError(path, ln, f"<seg id={sid}> is not closed before the end of the file")
        s = clean(check_controls(_segment_text(text[m.end():end.start()]), path, ln))
        if shows_nothing(s) and not allow_empty:
            raise DocumentFormatError(path, ln, f"empty segment id={sid} in document {doc.doc_id!r}"
                                      + invisible(s))
        doc.seg_ids.append(sid)
        doc.sentences.append(s)
        doc.lines.append(ln)
        return end.end()


#: a line that ends a document (the closing tag alone on its line, as XML and SGML test sets
#: write it): where a piece of text given to the parser may end
_DOC_END_LINE = re.compile(r"^\s*</doc\s*>\s*$", re.I)


def _iter_xml(lines: Iterable[Tuple[int, str]], parser: _XmlParser) -> Iterator[Document]:
    """The documents of XML/SGML lines, parsed a few at a time: the text is given to
    ``parser`` up to each line that closes a document outside any comment or CDATA section,
    so that no more than a document (and what lies between documents) is held."""
    piece: List[str] = []
    first = 0
    for i, line in lines:
        if not piece:
            first = i
        piece.append(line)
        if _DOC_END_LINE.match(line):
            text = "\n".join(piece)
            if text.rfind("<!--") <= text.rfind("-->") and text.rfind("<![CDATA[") <= text.rfind("]]>"):
                docs, rest, first = parser.feed(text, first, final=False)
                yield from docs
                piece = [rest] if rest else []
    docs, _, _ = parser.feed("\n".join(piece), first or 1, final=True)
    yield from docs


def read_set_attributes(path: str) -> Dict[str, str]:
    """The attributes of the set element (``<srcset>``, ``<refset>``, ``<tstset>``) of an
    XML/SGML file: ``setid``, ``srclang``, ``trglang``...; empty when there is none."""
    text = "\n".join(read_lines(path))
    for m in _XML_TOKEN.finditer(text):
        tag = (m.group(2) or "").lower()
        if tag in ("srcset", "refset", "tstset") and not m.group(1):
            return _attrs(m.group(3))
        if tag in ("doc", "seg"):
            break
    return {}


def first_element(text: str) -> Optional[str]:
    """The name of the first element of an XML text (None if there is none)."""
    for m in _XML_TOKEN.finditer(text):
        if m.group(2) and not m.group(1):
            return m.group(2).lower()
    return None


def looks_like_xml(lines: Lookahead, path: str) -> bool:
    """Whether a file is XML or SGML by its name or its first five lines (IWSLT/WMT test
    sets, WMT 2021+ datasets)."""
    head = "\n".join(lines.ahead(5)).lstrip().lower()
    return path.lower().endswith(XML_EXTENSIONS) or head.startswith(_XML_STARTS)


def _q(s: str) -> str:
    return html.escape(s, quote=True)


class XmlWriter(FormatWriter):
    """An IWSLT/WMT-style ``<tstset>`` keeping the input set's ``setid`` and language
    attributes (``set_attributes``, as :func:`read_set_attributes` returns them;
    ``src_lang``/``tgt_lang`` fill in the languages it lacks), every document's attributes
    (its docid, genre, origlang...) with ``sysid`` set to ``sysid``, and every seg id."""

    def __init__(self, out, *args, **kwargs):
        super().__init__(out, *args, **kwargs)
        attrs = {k: v for k, v in (self.set_attributes or {}).items()}
        attrs.setdefault("setid", "docctx")
        attrs.setdefault("srclang", self.src_lang)
        if not any(k in attrs for k in ("trglang", "tgtlang")):
            attrs["trglang"] = self.tgt_lang
        head = " ".join(f'{k}="{_q(v)}"' for k, v in attrs.items())
        out.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<tstset {head}>\n')

    def write(self, doc: Document, sentences: List[str]) -> None:
        out = self.out
        attrs = dict(doc.attributes or {})
        attrs["docid"] = doc.doc_id
        attrs["sysid"] = self.sysid
        attrs = {"docid": attrs.pop("docid"), **attrs}
        out.write("<doc " + " ".join(f'{k}="{_q(v)}"' for k, v in attrs.items()) + ">\n")
        seg_ids: List[str] = doc.seg_ids or [str(j + 1) for j in range(len(sentences))]
        for sid, s in zip(seg_ids, sentences):
            out.write(f'<seg id="{_q(sid)}">{html.escape(s, quote=False)}</seg>\n')
        out.write("</doc>\n")

    def close(self) -> None:
        self.out.write("</tstset>\n</mteval>\n")


class _XmlStream:
    """The documents of XML/SGML lines (:func:`_iter_xml`) and, once the first is read, the
    attributes of the set element before it (:attr:`set_attributes`; ``{}`` before)."""

    def __init__(self, lines: Iterable[Tuple[int, str]], path: str):
        self._lines, self._parser = lines, _XmlParser(path)

    @property
    def set_attributes(self) -> Dict[str, str]:
        return self._parser.set_attributes or {}

    def __iter__(self) -> Iterator[Document]:
        return _iter_xml(self._lines, self._parser)


class XmlFormat(DocumentFormat):
    name = "xml"
    detection_order = 30
    seg_ids = True
    own_ids = True
    writer = XmlWriter

    def detect(self, lines, path, docids):
        return looks_like_xml(lines, path)

    def read(self, path, options):
        """The text parsed whole (:class:`_XmlParser`)."""
        return _XmlParser(path, options.allow_empty).feed("\n".join(read_lines(path)))[0]

    def stream(self, lines, path, options, source):
        return _XmlStream(lines, path)

    def align(self, src, tgt):
        return match_seg_ids(src, tgt), 0


register(XmlFormat())
