"""Write translated documents back in the format they were read in (see ``readers``)."""
import copy
import html
import json
from typing import IO, Dict, List, Optional, Sequence

from .readers import Document

_LANG_ATTRS = ("srclang", "trglang", "tgtlang")


def _q(s: str) -> str:
    return html.escape(s, quote=True)


class DocumentWriter:
    """Writes translated documents one at a time, in the input's format:

    ``docids``: one sentence per line; the document ids go to ``docids_out`` (if given).
    ``blank``: an empty line between documents. ``marker``: ``<d>`` before each document.
    ``xml``: an IWSLT/WMT-style ``<tstset>`` keeping the input set's ``setid`` and language
    attributes (``set_attributes``, as :func:`.readers.read_set_attributes` returns them;
    ``src_lang``/``tgt_lang`` fill in the languages it lacks), every document's attributes
    (its docid, genre, origlang...) with ``sysid`` set to ``sysid``, and every seg id.
    ``wmt-xml``: the input's ``<dataset>``, ``<collection>`` and ``<doc>`` elements as they
    were (source, references, other systems' hypotheses), each document with a ``<hyp
    system=sysid lang=tgt_lang>`` beside them (replacing one of the same system) made of the
    source's ``<p>`` paragraphs and seg ids. ``jsonl``: one line per document, the input's
    object with ``"hyp"`` set to the translation (``{"id", "src", "hyp"}`` for documents that
    were not read from JSON Lines).

    Call :meth:`write` once per document, in order, then :meth:`close` (writes the XML
    closing tags; the streams themselves stay open).
    """

    def __init__(self, fmt: str, out: IO[str], docids_out: Optional[IO[str]] = None,
                 src_lang: str = "src", tgt_lang: str = "tgt", sysid: str = "fairseq_docctx",
                 set_attributes: Optional[Dict[str, str]] = None):
        if fmt not in ("docids", "blank", "marker", "xml", "wmt-xml", "jsonl"):
            raise ValueError(f"unknown output format {fmt!r}")
        self.fmt, self.out, self.docids_out, self.sysid = fmt, out, docids_out, sysid
        self.tgt_lang = tgt_lang
        self.count = 0
        self._open = []  # wmt-xml: the <dataset>, <collection> elements whose start tags are written
        if fmt == "xml":
            attrs = {k: v for k, v in (set_attributes or {}).items()}
            attrs.setdefault("setid", "docctx")
            attrs.setdefault("srclang", src_lang)
            if not any(k in attrs for k in ("trglang", "tgtlang")):
                attrs["trglang"] = tgt_lang
            head = " ".join(f'{k}="{_q(v)}"' for k, v in attrs.items())
            out.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<tstset {head}>\n')

    def write(self, doc: Document, translation: Sequence[str]) -> None:
        """Write the translation (one string per sentence) of one document."""
        if len(doc.sentences) != len(translation):
            raise ValueError(f"document {doc.doc_id!r}: {len(doc.sentences)} sentences, "
                             f"{len(translation)} translations")
        t = [" ".join(s.split()) for s in translation]
        out = self.out
        if self.fmt == "docids":
            for s in t:
                out.write(s + "\n")
                if self.docids_out is not None:
                    self.docids_out.write(doc.doc_id + "\n")
        elif self.fmt == "blank":
            out.write(("\n" if self.count else "") + "".join(s + "\n" for s in t))
        elif self.fmt == "marker":
            out.write("<d>\n" + "".join(s + "\n" for s in t))
        elif self.fmt == "jsonl":
            obj = dict(doc.source) if isinstance(doc.source, dict) else {"id": doc.doc_id, "src": list(doc.sentences)}
            obj["hyp"] = t
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        elif self.fmt == "wmt-xml":
            self._write_wmt(doc, t)
        else:
            attrs = dict(doc.attributes or {})
            attrs["docid"] = doc.doc_id
            attrs["sysid"] = self.sysid
            attrs = {"docid": attrs.pop("docid"), **attrs}
            out.write("<doc " + " ".join(f'{k}="{_q(v)}"' for k, v in attrs.items()) + ">\n")
            seg_ids: List[str] = doc.seg_ids or [str(j + 1) for j in range(len(t))]
            for sid, s in zip(seg_ids, t):
                out.write(f'<seg id="{_q(sid)}">{html.escape(s, quote=False)}</seg>\n')
            out.write("</doc>\n")
        self.count += 1

    def _write_wmt(self, doc: Document, t: Sequence[str]) -> None:
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
        by_id = dict(zip(doc.seg_ids or [], t))
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
        if self.fmt == "xml":
            self.out.write("</tstset>\n</mteval>\n")
        elif self.fmt == "wmt-xml" and self._open:
            self.out.write("</collection>\n</dataset>\n")


def _start_tag(el) -> str:
    attrs = "".join(f' {k}="{_q(v)}"' for k, v in el.attrib.items())
    return f"<{el.tag}{attrs}>"


def write_documents(docs: Sequence[Document], translations: Sequence[Sequence[str]], fmt: str,
                    out: IO[str], docids_out: IO[str] = None, src_lang: str = "src",
                    tgt_lang: str = "tgt", sysid: str = "fairseq_docctx",
                    set_attributes: Optional[Dict[str, str]] = None) -> None:
    """``translations[i][j]`` translates ``docs[i].sentences[j]``; all documents at once
    (see :class:`DocumentWriter` for the formats)."""
    if len(docs) != len(translations):
        raise ValueError("one translation list per document is needed")
    for d, t in zip(docs, translations):
        if len(d.sentences) != len(t):
            raise ValueError(f"document {d.doc_id!r}: {len(d.sentences)} sentences, {len(t)} translations")
    w = DocumentWriter(fmt, out, docids_out, src_lang, tgt_lang, sysid, set_attributes)
    for d, t in zip(docs, translations):
        w.write(d, t)
    w.close()
