"""``docids``: one sentence a line in ``PREFIX.LANG`` plus one document id a line in
``PREFIX.docids``; a document is one contiguous run of lines with the same id. Detected when
the document-id file exists; written as the sentences, the ids to their own file."""
import os
from typing import Iterable, Iterator, List, Tuple

from ..documents import Document, DocumentFormatError, clean, invisible, iter_lines, read_lines, shows_nothing
from .registry import DocumentFormat, FormatWriter, register


def read_docids_file(path: str) -> List[Tuple[str, int]]:
    """``(doc_id, line)`` per line of a document-id file; each id one contiguous run."""
    return list(_iter_docids_file(enumerate(read_lines(path), 1), path))


def _iter_docids_file(lines: Iterable[Tuple[int, str]], path: str) -> Iterator[Tuple[str, int]]:
    prev, seen = None, {}
    for i, line in lines:
        d = line.strip()
        if not d:
            raise DocumentFormatError(path, i, "empty document id")
        if "\t" in d:
            raise DocumentFormatError(path, i, f"document id {d!r} contains a tab")
        if prev is not None and prev != d and d in seen:
            raise DocumentFormatError(
                path, i,
                f"document id {d!r} reappears after another document (its first run "
                f"starts at line {seen[d]}); a document must be one contiguous run of lines",
            )
        seen.setdefault(d, i)
        prev = d
        yield d, i


def _count_mismatch(path_a: str, n_a: int, path_b: str, n_b: int):
    longer, shorter = (path_a, path_b) if n_a > n_b else (path_b, path_a)
    raise DocumentFormatError(
        longer, min(n_a, n_b) + 1,
        f"line counts differ: {path_a} has {n_a} lines, {path_b} has {n_b} lines "
        f"(this line has no counterpart in {shorter})",
    )


def _read_docids_format(path: str, docids: str) -> List[Document]:
    ids = read_docids_file(docids)
    lines = read_lines(path)
    if len(lines) != len(ids):
        _count_mismatch(path, len(lines), docids, len(ids))
    return list(_iter_docids_format(enumerate(lines, 1), iter(ids), path, docids))


def _iter_docids_format(lines: Iterable[Tuple[int, str]], ids: Iterator[Tuple[str, int]], path: str,
                        docids: str) -> Iterator[Document]:
    """The documents of sentence lines and their ids (``(id, line)``, one a line); a
    document is complete when the next id differs. Line counts that differ are an error
    once one side ends."""
    doc, n = None, 0
    for i, line in lines:
        pair = next(ids, None)
        if pair is None:
            _count_mismatch(path, i + sum(1 for _ in lines), docids, i - 1)
        n, d = i, pair[0]
        s = clean(line)
        if not s or shows_nothing(s):
            raise DocumentFormatError(path, i, f"empty sentence in document {d!r}{invisible(s)}")
        if doc is None or doc.doc_id != d:
            if doc is not None:
                yield doc
            doc = Document(d, [], [], path)
        doc.sentences.append(s)
        doc.lines.append(i)
    rest = sum(1 for _ in ids)
    if rest:
        _count_mismatch(path, n, docids, n + rest)
    if doc is not None:
        yield doc


class DocidsWriter(FormatWriter):
    """One sentence a line; the document id of each line to ``docids_out`` (if given)."""

    def write(self, doc: Document, sentences: List[str]) -> None:
        for s in sentences:
            self.out.write(s + "\n")
            if self.docids_out is not None:
                self.docids_out.write(doc.doc_id + "\n")


class DocidsFormat(DocumentFormat):
    name = "docids"
    detection_order = 40
    own_ids = True
    id_file = True
    writer = DocidsWriter

    def detect(self, lines, path, docids):
        return docids is not None and os.path.exists(docids)

    def check(self, path, options):
        if options.docids is None:
            raise ValueError("the docids format needs the document-id file")
        if not os.path.exists(options.docids):
            raise FileNotFoundError(f"no such file: {options.docids} (document ids for {path})")

    def read(self, path, options):
        return _read_docids_format(path, options.docids)

    def stream(self, lines, path, options, source):
        ids = _iter_docids_file(iter_lines(options.docids), options.docids)
        return _iter_docids_format(lines, ids, path, options.docids)

    def check_pair(self, prefix, src_path, tgt_path, docids):
        """The id file exists and both sides have as many lines."""
        if not os.path.exists(docids):
            raise FileNotFoundError(f"no such file: {docids} (document ids for prefix {prefix})")
        n_src, n_tgt = len(read_lines(src_path)), len(read_lines(tgt_path))
        if n_src != n_tgt:
            _count_mismatch(src_path, n_src, tgt_path, n_tgt)


register(DocidsFormat())
