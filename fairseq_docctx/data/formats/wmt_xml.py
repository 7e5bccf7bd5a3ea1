"""``wmt-xml``: the single-file XML of WMT test sets since 2021: ``<dataset><collection><doc
id=.. origlang=..>`` holding ``<src lang=..>``, one or more ``<ref lang=.. translator=..>``
and any ``<hyp system=..>``, each made of ``<p>`` paragraphs of ``<seg id=..>``. One file holds
every side; its source and reference make a pair, matched by seg id. Detected as XML
(:func:`.xml.looks_like_xml`) whose first element is ``<dataset>``; written as the input's
elements with a ``<hyp>`` of the translating system beside them. Parsed with lxml."""
import copy
import html
import os
from typing import IO, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from ..documents import Document, DocumentFormatError, check_controls, invisible, match_seg_ids, shows_nothing, \
    side_name
from .registry import DocumentFormat, FormatWriter, register
from .xml import first_element, looks_like_xml


def _wmt_parser_options() -> dict:
    return dict(resolve_entities=False, no_network=True, remove_comments=True)


def _parse_wmt_xml(path: str):
    """The parsed tree of a WMT 2021+ file (lxml; line numbers kept); its root must be
    ``<dataset>``."""
    from lxml import etree

    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    parser = etree.XMLParser(**_wmt_parser_options())
    try:
        tree = etree.parse(path, parser)
    except etree.XMLSyntaxError as e:
        raise DocumentFormatError(path, e.lineno or 1, f"not well-formed XML ({e.msg})") from None
    _check_wmt_root(path, tree.getroot())
    return tree


def _check_wmt_root(path: str, root) -> None:
    if root.tag != "dataset":
        raise DocumentFormatError(path, root.sourceline or 1, f"<{root.tag}> is not a WMT <dataset>")


def _check_wmt_doc(path: str, el, seen: Dict[str, int]) -> str:
    """The id of a ``<doc>``, checked: inside a ``<collection>``, unique (``seen``: the ids
    so far and their lines)."""
    parent = el.getparent()
    if parent is None or parent.tag != "collection":
        raise DocumentFormatError(path, el.sourceline, "<doc> outside a <collection>")
    did = (el.get("id") or "").strip()
    if not did:
        raise DocumentFormatError(path, el.sourceline, "<doc> without an id attribute")
    if "\t" in did:
        raise DocumentFormatError(path, el.sourceline, f"doc id {did!r} contains a tab")
    if did in seen:
        raise DocumentFormatError(path, el.sourceline, f"doc id {did!r} appears twice (first at line {seen[did]})")
    seen[did] = el.sourceline
    return did


def _wmt_docs(path: str, root):
    """Every ``<doc>`` of a dataset, checked (:func:`_check_wmt_doc`)."""
    seen: Dict[str, int] = {}
    for el in root.iter("doc"):
        yield _check_wmt_doc(path, el, seen), el


def wmt_translators(path: str) -> List[str]:
    """The translators of the ``<ref>`` elements of a WMT 2021+ file, in order of appearance
    (``""`` for a ``<ref>`` without a translator attribute)."""
    root = _parse_wmt_xml(path).getroot()
    out: List[str] = []
    for el in root.iter("ref"):
        t = el.get("translator", "")
        if t not in out:
            out.append(t)
    return out


def wmt_systems(path: str) -> List[str]:
    """The systems of the ``<hyp>`` elements of a WMT 2021+ file, in order of appearance."""
    root = _parse_wmt_xml(path).getroot()
    out: List[str] = []
    for el in root.iter("hyp"):
        if el.get("system", "") not in out:
            out.append(el.get("system", ""))
    return out


def _wmt_side(path, did, doc_el, side, translator, system):
    """The ``<src>``, ``<ref translator=..>`` or ``<hyp system=..>`` element of one document."""
    if side == "src":
        found = doc_el.findall("src")
        if len(found) != 1:
            raise DocumentFormatError(path, doc_el.sourceline,
                                      f"document {did!r} has {len(found)} <src> elements (one is needed)")
        return found[0]
    attr, want = ("translator", translator) if side == "ref" else ("system", system)
    found = [el for el in doc_el.findall(side) if el.get(attr, "") == want]
    if not found:
        have = ", ".join(repr(el.get(attr, "")) for el in doc_el.findall(side)) or "none"
        raise DocumentFormatError(path, doc_el.sourceline,
                                  f"document {did!r} has no <{side} {attr}={want!r}> (it has: {have})")
    if len(found) > 1:
        raise DocumentFormatError(path, found[1].sourceline,
                                  f"document {did!r} has two <{side} {attr}={want!r}> elements")
    return found[0]


def _read_wmt_xml(path: str, side: str = "src", translator: Optional[str] = None,
                  system: Optional[str] = None, allow_empty: bool = False) -> List[Document]:
    """One side of a WMT 2021+ file. ``translator``: the reference's (default: the first
    ``<ref>``'s of the file); ``system``: the hypothesis' (default: the file's only one)."""
    side = side_name(side)
    root = _parse_wmt_xml(path).getroot()
    if side == "ref" and translator is None:
        first = next(root.iter("ref"), None)
        if first is None:
            raise DocumentFormatError(path, root.sourceline or 1, "no <ref> element: the file has no reference")
        translator = first.get("translator", "")
    if side == "hyp" and system is None:
        systems = []
        for el in root.iter("hyp"):
            if el.get("system", "") not in systems:
                systems.append(el.get("system", ""))
        if len(systems) != 1:
            raise DocumentFormatError(path, root.sourceline or 1,
                                      f"{len(systems)} systems' <hyp> elements ({', '.join(map(repr, systems))}): "
                                      "say which one (--hyp-system)" if systems else "no <hyp> element")
        system = systems[0]
    return [_wmt_document(path, did, doc_el, side, translator, system, allow_empty)
            for did, doc_el in _wmt_docs(path, root)]


def _wmt_document(path: str, did: str, doc_el, side: str, translator: Optional[str], system: Optional[str],
                  allow_empty: bool) -> Document:
    """One side of one ``<doc>`` element (its paragraphs' segments, in order)."""
    el = _wmt_side(path, did, doc_el, side, translator, system)
    doc = Document(did, [], [], path, [], doc_el.sourceline, dict(doc_el.attrib), source=doc_el)
    seen: Dict[str, int] = {}
    for seg in el.iter("seg"):
        if seg.getparent().tag != "p":
            raise DocumentFormatError(path, seg.sourceline, f"<seg> outside a <p> in document {did!r}")
        sid = (seg.get("id") or "").strip()
        if not sid:
            raise DocumentFormatError(path, seg.sourceline, f"<seg> without an id in document {did!r}")
        if sid in seen:
            raise DocumentFormatError(path, seg.sourceline, f"seg id={sid} appears twice in <{el.tag}> of "
                                      f"document {did!r} (first at line {seen[sid]})")
        seen[sid] = seg.sourceline
        text = " ".join(check_controls("".join(seg.itertext()), path, seg.sourceline).split())
        if shows_nothing(text) and not allow_empty:
            raise DocumentFormatError(path, seg.sourceline, f"empty segment id={sid} in document {did!r}"
                                      + invisible(text))
        doc.seg_ids.append(sid)
        doc.sentences.append(text)
        doc.lines.append(seg.sourceline)
    if not doc.sentences:
        raise DocumentFormatError(path, el.sourceline, f"<{el.tag}> of document {did!r} has no <seg>")
    return doc


def _iter_wmt_xml(source: Union[str, IO[bytes]], path: str) -> Iterator[Document]:
    """The source side of a WMT 2021+ file or byte stream, parsed as it is read (lxml's
    ``iterparse``): a document as soon as its ``</doc>`` is read. A document written
    (:func:`~fairseq_docctx.data.readers.release`) is removed from the tree, which then holds the documents read and not
    yet released."""
    from lxml import etree

    seen: Dict[str, int] = {}
    root = None
    try:
        for event, el in etree.iterparse(source, events=("start", "end"), **_wmt_parser_options()):
            if root is None:
                root = el
                _check_wmt_root(path, root)
            if event == "end" and el.tag == "doc":
                yield _wmt_document(path, _check_wmt_doc(path, el, seen), el, "src", None, None, False)
    except etree.XMLSyntaxError as e:
        raise DocumentFormatError(path, e.lineno or 1, f"not well-formed XML ({e.msg})") from None


class _LinesAsBytes:
    """Numbered lines as a binary file object (``read``), for a parser that reads bytes."""

    def __init__(self, lines: Iterable[Tuple[int, str]]):
        self._lines = iter(lines)
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            nxt = next(self._lines, None)
            if nxt is None:
                break
            self._buf += (nxt[1] + "\n").encode("utf-8")
        out, self._buf = (self._buf, b"") if n < 0 else (self._buf[:n], self._buf[n:])
        return out


def _start_tag(el) -> str:
    attrs = "".join(f' {k}="{html.escape(v, quote=True)}"' for k, v in el.attrib.items())
    return f"<{el.tag}{attrs}>"


class WmtXmlWriter(FormatWriter):
    """The input's ``<dataset>``, ``<collection>`` and ``<doc>`` elements as they were
    (source, references, other systems' hypotheses), each document with a ``<hyp
    system=sysid lang=tgt_lang>`` beside them (replacing one of the same system) made of the
    source's ``<p>`` paragraphs and seg ids."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._open = []  # the <dataset>, <collection> elements whose start tags are written

    def write(self, doc: Document, sentences: List[str]) -> None:
        from lxml import etree

        el = doc.source
        if el is None or el.tag != "doc":
            raise ValueError(f"document {doc.doc_id!r} was not read from a WMT 2021+ XML file")
        collection = el.getparent()
        dataset = collection.getparent()
        if self._open[1:2] != [collection]:
            if self._open[1:]:
                self.out.write("</collection>\n")
            if not self._open:
                self.out.write('<?xml version="1.0" encoding="UTF-8"?>\n' + _start_tag(dataset) + "\n")
                self._open = [dataset]
            self.out.write(_start_tag(collection) + "\n")
            self._open = [dataset, collection]
        out = copy.deepcopy(el)
        for old in out.findall("hyp"):
            if old.get("system", "") == self.sysid:
                out.remove(old)
        src = out.find("src")
        hyp = etree.SubElement(out, "hyp", {"system": self.sysid, "lang": self.tgt_lang})
        hyp.text = src.text
        by_id = dict(zip(doc.seg_ids or [], sentences))
        for p_src in src.findall("p"):
            p = etree.SubElement(hyp, "p", dict(p_src.attrib))
            p.text, p.tail = p_src.text, p_src.tail
            for seg_src in p_src.findall("seg"):
                seg = etree.SubElement(p, "seg", dict(seg_src.attrib))
                seg.text, seg.tail = by_id[seg_src.get("id").strip()], seg_src.tail
        last = out[-2] if len(out) > 1 else None
        hyp.tail = last.tail if last is not None else "\n"
        if last is not None:
            last.tail = src.tail
        out.tail = None
        self.out.write(etree.tostring(out, encoding="unicode") + "\n")

    def close(self) -> None:
        if self._open:
            self.out.write("</collection>\n</dataset>\n")


class WmtXmlFormat(DocumentFormat):
    name = "wmt-xml"
    detection_order = 20
    one_file = True
    seg_ids = True
    own_ids = True
    writer = WmtXmlWriter

    def detect(self, lines, path, docids):
        return looks_like_xml(lines, path) and first_element("\n".join(lines.ahead(50))) == "dataset"

    def read(self, path, options):
        return _read_wmt_xml(path, options.side, options.translator, options.system, options.allow_empty)

    def stream(self, lines, path, options, source):
        """lxml reads the bytes: a file again from its start, a stream from the lines read
        ahead on."""
        if isinstance(source, (str, os.PathLike)):
            lines.close()
            yield from _iter_wmt_xml(source, path)
        else:
            yield from _iter_wmt_xml(_LinesAsBytes(lines), path)

    def align(self, src, tgt):
        return match_seg_ids(src, tgt), 0

    def describe(self, parallel, translator):
        return {"translator": translator if translator is not None else wmt_translators(parallel.src_path)[0]}


register(WmtXmlFormat())
