"""Reading raw parallel documents in any registered format (pure Python; no fairseq import).

The formats (``docids``, ``blank``, ``marker``, ``xml``, ``wmt-xml``, ``jsonl``, ``tags``; see
``docs/prepare.md``) are the entries of :mod:`fairseq_docctx.data.formats`, each with its
detector, reader, streamer and writer; this module asks them and names none:
:func:`detect_format` and :func:`read_file` for one file, :class:`DocumentStream` for one
file or stream read a document at a time, :func:`read_parallel` for the two sides of a
prefix. A format of ``one_file`` (``wmt-xml``, ``jsonl``) holds both sides in one file: a
*side* (``src``, ``ref``/``tgt``, ``hyp``) says which one to read, and ``read_parallel`` takes
the file itself as its prefix.

Every error is a :class:`~fairseq_docctx.data.documents.DocumentFormatError` whose message
starts with ``FILE:LINE:`` (1-based line).
"""
import os
import re
from dataclasses import dataclass, field
from typing import IO, Dict, Iterator, List, Optional, Tuple, Union

from . import formats
from .documents import Document, DocumentFormatError, Lookahead, iter_lines

#: what the functions' ``input_format`` may be: a registered format, or ``auto`` (detect it)
INPUT_FORMATS = formats.Names("auto")
DOCIDS = "docids"


@dataclass
class ParallelDocuments:
    """The documents of one prefix, source and target aligned document by document and
    sentence by sentence (``src[i].sentences[j]`` translates to ``tgt[i].sentences[j]``)."""

    src: List[Document]
    tgt: List[Document]
    src_path: str
    tgt_path: str
    format: str
    docids_path: Optional[str] = None
    formats: Dict[str, str] = field(default_factory=dict)  # file -> format
    # tags: sentence pairs dropped because one side (or both) is an empty line
    dropped_empty: int = 0

    @property
    def num_sentences(self) -> int:
        return sum(len(d) for d in self.src)


# ------------------------------------------------------------------------------------------
# prefixes and paths


def has_placeholders(prefix: str) -> bool:
    return "{lang}" in prefix or "{other}" in prefix


def side_path(prefix: str, lang: Optional[str], other: Optional[str] = None) -> str:
    """File of one side: ``PREFIX.LANG`` (fairseq style), or, when the prefix contains
    ``{lang}``/``{other}``, the prefix with those substituted and nothing appended.
    ``lang=None``: the prefix is the file itself."""
    if lang is None:
        return prefix
    if has_placeholders(prefix):
        return _subst(prefix, lang, other)
    return f"{prefix}.{lang}"


def _subst(s: str, lang: str, other: Optional[str]) -> str:
    return s.replace("{lang}", lang).replace("{other}", other or "")


def docids_path(prefix: str, lang: Optional[str], other: Optional[str] = None) -> str:
    """The document-id file of a prefix: ``PREFIX.docids``; with placeholders, the
    ``lang`` side's path with its *last* ``{lang}`` replaced by ``docids`` (so
    ``dev_{lang}.txt`` -> ``dev_docids.txt``, ``d/{lang}-{other}/f.{lang}`` ->
    ``d/en-de/f.docids``); ``lang=None``: the file with its extension replaced by
    ``.docids``."""
    if lang is None:
        return os.path.splitext(prefix)[0] + "." + DOCIDS
    if "{lang}" in prefix:
        head, _, tail = prefix.rpartition("{lang}")
        return _subst(head, lang, other) + DOCIDS + _subst(tail, lang, other)
    if has_placeholders(prefix):
        return _subst(prefix, lang, other) + "." + DOCIDS
    return f"{prefix}.{DOCIDS}"


def prefix_name(prefix: str) -> str:
    """Short name of a prefix for generated document ids (``NAME:N``): its base name
    without placeholders (``dev_{lang}.txt`` -> ``dev.txt``)."""
    name = re.sub(r"[._-]?\{(?:lang|other)\}", "", os.path.basename(prefix))
    return name.strip("._-") or "doc"


# ------------------------------------------------------------------------------------------
# one file


def detect_format(path: str, docids: Optional[str] = None) -> str:
    """The format of one file: the first registered format whose detector says so
    (:func:`fairseq_docctx.data.formats.detect`), reading no further than it needs."""
    lines = Lookahead(iter_lines(path))
    try:
        return formats.detect(lines, path, docids)
    finally:
        lines.close()


def _no_documents(path: str, fmt: str) -> DocumentFormatError:
    return DocumentFormatError(path, 1, f"no documents (no sentence in this {fmt}-format file)")


def read_file(path: str, input_format: str = "auto", docids: Optional[str] = None,
              name: Optional[str] = None, allow_empty: bool = False, side: str = "src",
              translator: Optional[str] = None, system: Optional[str] = None) -> Tuple[List[Document], str]:
    """Read the documents of one file; returns ``(documents, format)``.

    ``docids``: the document-id file (``docids`` format, and for auto-detection);
    ``name``: prefix of generated ids ``NAME:N`` (``blank``/``marker``; default: the
    file's base name); ``allow_empty``: accept empty XML segments (hypotheses: an empty
    translation) and empty lines of a ``tags`` file (as empty sentences). ``side``,
    ``translator``, ``system``: what to read of a file holding several sides (``wmt-xml``,
    ``jsonl``; see :class:`~fairseq_docctx.data.formats.ReadOptions`). A file without any document
    is an error in every format. A sentence that shows nothing (white space, format and
    control characters only, e.g. U+200B) is an empty sentence."""
    fmt = detect_format(path, docids) if input_format == "auto" else input_format
    options = formats.ReadOptions(docids, name or prefix_name(path), allow_empty, side, translator, system)
    reader = formats.get(fmt)
    reader.check(path, options)
    docs = reader.read(path, options)
    if not docs:
        raise _no_documents(path, fmt)
    return docs, fmt


class DocumentStream:
    """The source documents of one file (``source`` a path) or byte stream (standard
    input's buffer), read as they are needed: iterating gives one :class:`Document` at a
    time, each as soon as the lines that complete it are read (blank: the empty line after
    it; ``<d>`` markers: the next marker; docids: the next document's first id; XML/SGML:
    its ``</doc>`` line; WMT 2021+ XML: its ``</doc>``; JSON Lines: its line), so that a
    reader of the documents holds those it has not finished with, not the file. The same
    documents and errors as :func:`read_file` (source side), except that an error is raised
    when its line is reached, after the documents before it, and that a document id that
    reappears or two line counts that differ are found at the line where they show.

    ``path``: the name errors and documents give (default: ``source``; standard input:
    ``<stdin>``); ``name``: the prefix of generated ids (default: the file's base name).
    :attr:`format` is known on construction (auto-detection reads the lines it needs, the
    first document at most, and leaves them to be read); :attr:`set_attributes`, those of
    an XML set element (:func:`~fairseq_docctx.data.formats.xml.read_set_attributes`), once
    the first document is read (``{}`` for other formats: a format's stream gives them as
    its ``set_attributes``)."""

    def __init__(self, source: Union[str, IO[bytes]], input_format: str = "auto",
                 docids: Optional[str] = None, name: Optional[str] = None, path: Optional[str] = None):
        self.source = source
        self.path = path or str(source)
        self.docids = docids
        self.name = name or prefix_name(self.path)
        if isinstance(source, (str, os.PathLike)) and not os.path.exists(source):
            raise FileNotFoundError(f"no such file: {source}")
        self._lines = Lookahead(iter_lines(source, self.path))
        try:
            fmt = formats.detect(self._lines, self.path, docids) if input_format == "auto" else input_format
            reader = formats.get(fmt)
            options = formats.ReadOptions(docids, self.name)
            reader.check(self.path, options)
        except BaseException:
            self._lines.close()
            raise
        self.format = fmt
        self._documents = reader.stream(self._lines, self.path, options, source)
        self.count = 0

    @property
    def set_attributes(self) -> Dict[str, str]:
        return getattr(self._documents, "set_attributes", {})

    def __iter__(self) -> Iterator[Document]:
        for doc in self._documents:
            self.count += 1
            yield doc
        if not self.count:
            raise _no_documents(self.path, self.format)

    def close(self) -> None:
        self._lines.close()


def release(doc: Document) -> None:
    """Drop what a document read by :class:`DocumentStream` keeps of its file once it is
    written: an element that a parsed tree holds (WMT 2021+ XML) leaves the tree."""
    el = doc.source
    if el is not None and hasattr(el, "getparent"):
        parent = el.getparent()
        el.clear()
        if parent is not None:
            parent.remove(el)
    doc.source = None


def read_documents(prefix: str, lang: Optional[str] = None, other: Optional[str] = None,
                   input_format: str = "auto") -> List[Document]:
    """The documents of one side of a prefix (e.g. raw input for translation).

    ``read_documents("corpus/test", "en")`` reads ``corpus/test.en`` (+ ``corpus/test.docids``);
    ``read_documents("talk.en.xml")`` reads that file."""
    path = side_path(prefix, lang, other)
    docs, _ = read_file(path, input_format, docids_path(prefix, lang, other), prefix_name(prefix))
    return docs


# ------------------------------------------------------------------------------------------
# two sides


def _single_file_format(prefix: str, input_format: str) -> Optional[str]:
    """The format of ``prefix`` if it is one file holding both sides (``wmt-xml``, ``jsonl``)."""
    if has_placeholders(prefix) or not os.path.isfile(prefix):
        return None
    try:
        fmt = detect_format(prefix) if input_format == "auto" else input_format
    except DocumentFormatError:  # a file named like the prefix, of no document format
        return None
    found = formats.find(fmt)
    return fmt if found is not None and found.one_file else None


def read_parallel(prefix: str, src: str, tgt: str, input_format: str = "auto",
                  translator: Optional[str] = None) -> ParallelDocuments:
    """Read both sides of one prefix and align them (see :class:`ParallelDocuments`). A
    prefix that is itself a file of a ``one_file`` format (``wmt-xml``, ``jsonl``) gives both:
    its source and its reference (of ``translator``: in ``wmt-xml``, default the file's
    first ``<ref>``'s; other formats have one reference)."""
    single = _single_file_format(prefix, input_format)
    if single is not None:
        sdocs, _ = read_file(prefix, single, side="src")
        tdocs, _ = read_file(prefix, single, side="ref", translator=translator)
        tdocs, _ = formats.get(single).align(sdocs, tdocs)
        return ParallelDocuments(sdocs, tdocs, prefix, prefix, single, None, {prefix: single})
    spath, tpath = side_path(prefix, src, tgt), side_path(prefix, tgt, src)
    docids = docids_path(prefix, src, tgt)
    for p in (spath, tpath):
        if not os.path.exists(p):
            raise FileNotFoundError(f"no such file: {p} (from prefix {prefix})")
    if input_format == "auto":
        sfmt, tfmt = detect_format(spath, docids), detect_format(tpath, docids)
        if sfmt != tfmt:
            raise DocumentFormatError(
                tpath, 1, f"looks like format {tfmt!r} but {spath} looks like {sfmt!r}; give --input-format"
            )
        fmt = sfmt
    else:
        fmt = input_format
    reader = formats.get(fmt)
    name = prefix_name(prefix)
    reader.check_pair(prefix, spath, tpath, docids)
    sdocs, _ = read_file(spath, fmt, docids, name, allow_empty=reader.drops_empty_pairs)
    tdocs, _ = read_file(tpath, fmt, docids, name, allow_empty=reader.drops_empty_pairs)
    tdocs, dropped = reader.align(sdocs, tdocs)
    files = {spath: fmt, tpath: fmt}
    if reader.id_file:
        files[docids] = fmt
    return ParallelDocuments(sdocs, tdocs, spath, tpath, fmt, docids if reader.id_file else None, files, dropped)
