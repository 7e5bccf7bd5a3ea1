"""``blank``: one sentence a line, an empty line between documents; the documents have no
ids of their own (``NAME:N``) and the two sides of a pair match by position. Detected, after
every other format, by an empty line; written with an empty line between documents."""
from typing import Iterable, Iterator, List, Tuple

from ..documents import Document, DocumentFormatError, clean, invisible, match_structure, shows_nothing
from .registry import DocumentFormat, FormatWriter, register


def _iter_blank(lines: Iterable[Tuple[int, str]], path: str, name: str) -> Iterator[Document]:
    """Documents separated by empty lines; a document is complete at the empty line after
    it (or the end). A line of invisible characters only is neither a sentence nor an empty
    line: an error."""
    doc, k = None, 0
    for i, line in lines:
        s = clean(line)
        if not s:
            if doc is not None:
                yield doc
                doc = None
            continue
        if shows_nothing(s):
            raise DocumentFormatError(path, i, f"a line that shows nothing{invisible(s)}: neither a sentence "
                                      "nor the empty line between documents")
        if doc is None:
            k += 1
            doc = Document(f"{name}:{k}", [], [], path)
        doc.sentences.append(s)
        doc.lines.append(i)
    if doc is not None:
        yield doc


class BlankWriter(FormatWriter):
    def write(self, doc: Document, sentences: List[str]) -> None:
        self.out.write(("\n" if self.count else "") + "".join(s + "\n" for s in sentences))


class BlankFormat(DocumentFormat):
    name = "blank"
    detection_order = 70
    empty_line_separates = True
    writer = BlankWriter

    def detect(self, lines, path, docids):
        return lines.first(lambda t: not t.strip()) is not None

    def documents(self, lines, path, options):
        return _iter_blank(lines, path, options.name)

    def align(self, src, tgt):
        match_structure(src, tgt)
        return tgt, 0


register(BlankFormat())
