"""``marker``: one sentence a line, a line ``<d>`` before each document; the documents have
no ids of their own (``NAME:N``) and the two sides of a pair match by position. Detected by a
first non-empty line ``<d>``; written with ``<d>`` before each document."""
from typing import Iterable, Iterator, List, Tuple

from ..documents import Document, DocumentFormatError, clean, invisible, match_structure, shows_nothing
from .registry import DocumentFormat, FormatWriter, register


def _iter_marker(lines: Iterable[Tuple[int, str]], path: str, name: str) -> Iterator[Document]:
    """Documents each led by a ``<d>`` line; a document is complete at the next ``<d>``
    (or the end)."""
    doc, k, marker_line = None, 0, 0
    for i, line in lines:
        s = clean(line)
        if s == "<d>":
            if doc is not None:
                if not doc.sentences:
                    raise DocumentFormatError(path, marker_line, "empty document (<d> followed by <d>)")
                yield doc
            k += 1
            doc = Document(f"{name}:{k}", [], [], path)
            marker_line = i
        elif not s or shows_nothing(s):
            raise DocumentFormatError(path, i, f"empty sentence (a blank line in a <d>-marker file){invisible(s)}")
        elif doc is None:
            raise DocumentFormatError(path, i, "text before the first <d> marker")
        else:
            doc.sentences.append(s)
            doc.lines.append(i)
    if doc is not None:
        if not doc.sentences:
            raise DocumentFormatError(path, marker_line, "empty document (<d> at the end of the file)")
        yield doc


class MarkerWriter(FormatWriter):
    def write(self, doc: Document, sentences: List[str]) -> None:
        self.out.write("<d>\n" + "".join(s + "\n" for s in sentences))


class MarkerFormat(DocumentFormat):
    name = "marker"
    detection_order = 50
    writer = MarkerWriter

    def detect(self, lines, path, docids):
        first = lines.first(lambda t: bool(t.strip()))
        return first is not None and first.strip() == "<d>"

    def documents(self, lines, path, options):
        return _iter_marker(lines, path, options.name)

    def align(self, src, tgt):
        match_structure(src, tgt)
        return tgt, 0


register(MarkerFormat())
