"""Write translated documents back in the format they were read in: each format's writer
(:class:`~fairseq_docctx.data.formats.FormatWriter`) is its registry entry's; this module
checks what is written and names no format."""
from typing import IO, Dict, Optional, Sequence

from . import formats
from .documents import Document


class DocumentWriter:
    """Writes translated documents one at a time, in the input's format ``fmt`` (its
    registered writer: see the format modules of :mod:`fairseq_docctx.data.formats`), each
    sentence's white space folded to single spaces.

    ``docids_out``: where the ``docids`` format writes the document ids (if given);
    ``set_attributes``: the input's XML set attributes (as
    :func:`~fairseq_docctx.data.formats.xml.read_set_attributes` returns them);
    ``src_lang``/``tgt_lang``, ``sysid``: the languages and the system's name, for the formats
    that record them.

    Call :meth:`write` once per document, in order, then :meth:`close` (writes the XML
    closing tags; the streams themselves stay open).
    """

    def __init__(self, fmt: str, out: IO[str], docids_out: Optional[IO[str]] = None,
                 src_lang: str = "src", tgt_lang: str = "tgt", sysid: str = "fairseq_docctx",
                 set_attributes: Optional[Dict[str, str]] = None):
        found = formats.find(fmt)
        if found is None or found.writer is None:
            raise ValueError(f"unknown output format {fmt!r}")
        self.fmt = fmt
        self._writer = found.writer(out, docids_out, src_lang, tgt_lang, sysid, set_attributes)

    @property
    def count(self) -> int:
        """The documents written so far."""
        return self._writer.count

    def write(self, doc: Document, translation: Sequence[str]) -> None:
        """Write the translation (one string per sentence) of one document."""
        if len(doc.sentences) != len(translation):
            raise ValueError(f"document {doc.doc_id!r}: {len(doc.sentences)} sentences, "
                             f"{len(translation)} translations")
        self._writer.write(doc, [" ".join(s.split()) for s in translation])
        self._writer.count += 1

    def close(self) -> None:
        self._writer.close()


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
