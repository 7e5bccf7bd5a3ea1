"""``tags``: the IWSLT training files (``train.tags.L1-L2.L``): one sentence a line, each talk
led by its metadata lines (``<url>``, ``<talkid>``, ``<title>``, ...), the id from
``<talkid>``. The two sides of a pair match by position; the pairs with an empty side are
dropped, as the HAN authors' preparation does (Miculicich et al. 2018). Detected by a first
non-empty line of metadata; not written."""
import re
from typing import Iterable, Iterator, List, Tuple

from ..documents import Document, DocumentFormatError, clean, invisible, match_structure, shows_nothing
from .registry import DocumentFormat, register

# metadata lines of the IWSLT training files (train.tags.*): one element on a line
_TAGS_LINE = re.compile(r"^<(url|keywords|speaker|talkid|title|description|reviewer|translator|transcript)\b[^>]*>.*</\1>$",
                        re.I)
_TALKID = re.compile(r"^<talkid>\s*(.*?)\s*</talkid>$", re.I)


def _iter_tags(lines: Iterable[Tuple[int, str]], path: str, name: str,
               allow_empty: bool = False) -> Iterator[Document]:
    """IWSLT training talks: a run of metadata lines starts a document (id: its ``<talkid>``,
    else ``NAME:N``); every other line is a sentence. ``allow_empty``: an empty line (or one
    of invisible characters only) is an empty sentence (``read_parallel`` drops the pairs
    with an empty side) instead of an error."""
    doc, k, in_meta, last = None, 0, False, 0
    for i, line in lines:
        last = i
        s = clean(line)
        if _TAGS_LINE.match(s):
            if not in_meta:
                if doc is not None:
                    if not doc.sentences:
                        raise DocumentFormatError(path, i, "a talk without sentences before this one")
                    yield doc
                k += 1
                doc = Document(f"{name}:{k}", [], [], path)
                in_meta = True
            m = _TALKID.match(s)
            if m:
                doc.doc_id = m.group(1)
            continue
        in_meta = False
        if shows_nothing(s):
            if not allow_empty:
                raise DocumentFormatError(path, i, "empty sentence (a blank line in an IWSLT train.tags file)"
                                          + invisible(s))
            s = ""
        if doc is None:
            raise DocumentFormatError(path, i, "text before the first talk's metadata (<url>, <talkid>, ...)")
        doc.sentences.append(s)
        doc.lines.append(i)
    if doc is not None:
        if not doc.sentences:
            raise DocumentFormatError(path, last, "the last talk has no sentences")
        yield doc


def _drop_empty_pairs(src: List[Document], tgt: List[Document]) -> int:
    """Remove (in place) the sentence pairs of aligned documents where either side is empty,
    as the HAN authors' preparation of the IWSLT training files does (Miculicich et al. 2018);
    the rest of each document stays one document. Returns how many pairs were dropped; a
    document left without any pair is an error naming it."""
    dropped = 0
    for a, b in zip(src, tgt):
        keep = [k for k, (x, y) in enumerate(zip(a.sentences, b.sentences)) if x and y]
        if len(keep) == len(a.sentences):
            continue
        if not keep:
            raise DocumentFormatError(a.path, a.lines[0] if a.lines else a.start,
                                      f"talk {a.doc_id!r}: every sentence pair has an empty side")
        dropped += len(a.sentences) - len(keep)
        for d in (a, b):
            d.sentences = [d.sentences[k] for k in keep]
            d.lines = [d.lines[k] for k in keep]
    return dropped


class TagsFormat(DocumentFormat):
    name = "tags"
    detection_order = 60
    drops_empty_pairs = True

    def detect(self, lines, path, docids):
        first = lines.first(lambda t: bool(t.strip()))
        return first is not None and bool(_TAGS_LINE.match(first.strip()))

    def documents(self, lines, path, options):
        return _iter_tags(lines, path, options.name, options.allow_empty)

    def align(self, src, tgt):
        match_structure(src, tgt)
        return tgt, _drop_empty_pairs(src, tgt)

    def describe(self, parallel, translator):
        return {"dropped_empty_pairs": parallel.dropped_empty}


register(TagsFormat())
