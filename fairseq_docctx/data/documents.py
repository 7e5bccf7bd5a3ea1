"""What a document is and how the text of one is read (pure Python; no fairseq import).

A :class:`Document` is one side's document: its id, its sentences and the file line of each.
Every format of :mod:`fairseq_docctx.data.formats` reads its files with :func:`read_lines`
(the whole file) or :func:`iter_lines` (one line at a time, for a stream) and raises
:class:`DocumentFormatError`, whose message starts with ``FILE:LINE:`` (1-based line).
Sentences are returned with CR/LF and surrounding whitespace removed (:func:`clean`); a stray
carriage return inside a sentence becomes a space (it would split the line later). Text that
holds a control character other than the tab is refused (:func:`check_controls`).
"""
import collections
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, Union

#: the sides a file holding several of them can give (``tgt`` is another name of ``ref``)
SIDES = ("src", "ref", "tgt", "hyp")


class DocumentFormatError(ValueError):
    """Bad input documents; ``str(err)`` is ``FILE:LINE: message``."""

    def __init__(self, path: str, line: int, message: str):
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}")


@dataclass
class Document:
    """One document of one side: id, sentences, and the 1-based file line of each."""

    doc_id: str
    sentences: List[str]
    lines: List[int]
    path: str
    seg_ids: Optional[List[str]] = None  # xml: the <seg id=...> of each sentence
    start: int = 0  # line where the document starts (xml: its <doc>)
    attributes: Dict[str, str] = field(default_factory=dict)  # xml: the <doc>'s attributes
    # wmt-xml: the <doc> element, jsonl: the line's object (what the writers write back)
    source: Any = field(default=None, repr=False, compare=False)

    def __len__(self):
        return len(self.sentences)


def side_name(side: str) -> str:
    """``side`` checked against :data:`SIDES`, ``tgt`` given as ``ref``."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: one of {', '.join(SIDES)}")
    return "ref" if side == "tgt" else side


# ------------------------------------------------------------------------------------------
# reading text

#: the control characters (Unicode category Cc) text may not hold: every one but the tab (white
#: space between words), the line feed and the carriage return (line endings; a carriage
#: return inside a line is read as a space)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "backspace", 0x0B: "vertical tab", 0x0C: "form feed",
                  0x1B: "ESC", 0x7F: "DEL", 0x85: "NEL"}


def check_controls(text: str, path: str, line: Optional[int]) -> str:
    """``text``, refused (:class:`DocumentFormatError` naming ``path`` and ``line``) when it
    holds a control character other than the tab and the line endings (a NUL byte, ESC, DEL,
    the C1 controls U+0080-U+009F of text decoded with the wrong encoding...): a model reads
    such a character as an unknown word, or a tokenizer drops it, and the translation
    changes without a word. Every reading path of the package's input calls this: the line
    readers (:func:`read_lines`, :func:`iter_lines`) and the text decoded from JSON strings,
    XML and SGML character references."""
    m = _CONTROL.search(text)
    if m is not None:
        code = ord(m.group())
        name = f" ({_CONTROL_NAMES[code]})" if code in _CONTROL_NAMES else ""
        raise DocumentFormatError(path, line, f"control character U+{code:04X}{name} at column {m.start() + 1}: "
                                  "text must not hold control characters (tab excepted); remove them")
    return text


#: a JSON escape of a refused control character (``\\u0000``, ``\\b``, ``\\f``...)
_JSON_CONTROL = re.compile(r"\\(?:u00(?:0[0-8bBcC]|0[eEfF]|1[0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])|[bf])")


def check_json_controls(obj: Any, text: str, path: str) -> Any:
    """``obj`` (what ``json.loads(text)`` of the file ``path`` gave), refused as
    :func:`check_controls` refuses text when one of its strings holds a control character
    (written in the JSON as an escape, ``\\u0000``): the error names the line of the first
    such escape."""
    def strings(x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            for k, v in x.items():
                yield from strings(k)
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)

    for x in strings(obj):
        if _CONTROL.search(x):
            m = _JSON_CONTROL.search(text)
            check_controls(x, path, text.count("\n", 0, m.start()) + 1 if m else 1)
    return obj


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 file (BOM dropped, ``\\n`` or ``\\r\\n`` endings removed)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DocumentFormatError(path, line, f"not valid UTF-8 ({e.reason})") from None
    if _CONTROL.search(text):  # which line: only when there is one
        for i, ln in enumerate(text.split("\n"), 1):
            check_controls(ln, path, i)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line, it does not start a new one
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def iter_lines(source: Union[str, IO[bytes]], path: Optional[str] = None) -> Iterator[Tuple[int, str]]:
    """The lines of a UTF-8 file (``source`` a path) or byte stream (standard input's
    buffer), read one at a time as :func:`read_lines` reads them (BOM dropped, ``\\n`` or
    ``\\r\\n`` removed), each with its 1-based number; invalid UTF-8 is a
    :class:`DocumentFormatError` naming the line of ``path`` (the name errors give; default:
    ``source``)."""
    path = path or str(source)
    own = isinstance(source, (str, os.PathLike))
    if own:
        try:
            f = open(source, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {source}") from None
    else:
        f = source
    try:
        for i, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8-sig" if i == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DocumentFormatError(path, i, f"not valid UTF-8 ({e.reason})") from None
            if text.endswith("\n"):
                text = text[:-1]
            check_controls(text, path, i)
            yield i, text[:-1] if text.endswith("\r") else text
    finally:
        if own:
            f.close()


class Lookahead:
    """Numbered lines (``(number, text)``, as :func:`iter_lines` gives them) that can be
    looked at before they are read: the lines looked at stay to be read."""

    def __init__(self, lines: Iterable[Tuple[int, str]]):
        self._it = iter(lines)
        self._ahead: Deque[Tuple[int, str]] = collections.deque()

    def __iter__(self):
        return self

    def __next__(self) -> Tuple[int, str]:
        if self._ahead:
            return self._ahead.popleft()
        return next(self._it)

    def ahead(self, n: int) -> List[str]:
        """The text of the next ``n`` lines (fewer at the end), left to be read."""
        while len(self._ahead) < n and self._more():
            pass
        return [t for _, t in list(self._ahead)[:n]]

    def first(self, test: Callable[[str], bool]) -> Optional[str]:
        """The first line ahead whose text passes ``test`` (None: none before the end); it
        and the lines before it are left to be read."""
        k = 0
        while True:
            if k == len(self._ahead) and not self._more():
                return None
            text = self._ahead[k][1]
            if test(text):
                return text
            k += 1

    def _more(self) -> bool:
        nxt = next(self._it, None)
        if nxt is None:
            return False
        self._ahead.append(nxt)
        return True

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


def clean(sentence: str) -> str:
    """A sentence as read: surrounding white space removed, a carriage return a space."""
    return sentence.replace("\r", " ").strip()


def shows_nothing(text: str) -> bool:
    """Whether ``text`` has no visible character: empty, or only white space, format
    characters (Unicode category Cf: U+200B zero-width space, U+200C/U+200D joiners, U+2060
    word joiner, U+FEFF, U+00AD soft hyphen...) and control characters (Cc). Such a line is
    empty to a reader, and a model given it translates nothing real into invented words."""
    return all(c.isspace() or unicodedata.category(c) in ("Cf", "Cc") for c in text)


def invisible(text: str) -> str:
    """``" (only invisible characters: U+200B, ...)"`` for a non-empty text that shows
    nothing (:func:`shows_nothing`), else ``""``: what an "empty" error adds to say why a
    line that is not empty counts as one."""
    if not text:
        return ""
    codes = sorted({f"U+{ord(c):04X}" for c in text if not c.isspace()})
    return f" (only invisible characters: {', '.join(codes) or 'white space'})"


# ------------------------------------------------------------------------------------------
# aligning two sides


def _span(doc: Document) -> str:
    return f"lines {doc.lines[0]}-{doc.lines[-1]}"


def match_structure(src: List[Document], tgt: List[Document]):
    """Check that two sides whose documents match by position (blank lines, ``<d>`` markers,
    IWSLT talks) hold as many documents, each with as many sentences."""
    for k, (a, b) in enumerate(zip(src, tgt), 1):
        if len(a) != len(b):
            raise DocumentFormatError(
                a.path, a.lines[0],
                f"document {k} has {len(a)} sentences here ({_span(a)}) but {len(b)} in "
                f"{b.path} ({_span(b)})",
            )
    if len(src) != len(tgt):
        longer, other = (src, tgt) if len(src) > len(tgt) else (tgt, src)
        extra = longer[len(other)]
        raise DocumentFormatError(
            extra.path, extra.lines[0],
            f"document {len(other) + 1} has no counterpart: {src[0].path if src else '?'} has "
            f"{len(src)} documents, {tgt[0].path if tgt else '?'} has {len(tgt)}",
        )


def match_seg_ids(src: List[Document], tgt: List[Document]) -> List[Document]:
    """The target documents and their segments in the source's order of docids and seg ids
    (the formats whose segments carry ids); a docid or seg id on one side only is an error."""
    spath, tpath = src[0].path, tgt[0].path
    by_id = {d.doc_id: d for d in tgt}
    src_ids = {d.doc_id for d in src}
    for d in tgt:
        if d.doc_id not in src_ids:
            raise DocumentFormatError(tpath, d.start, f"docid {d.doc_id!r} is in {tpath} but not in {spath}")
    out = []
    for d in src:
        t = by_id.get(d.doc_id)
        if t is None:
            raise DocumentFormatError(spath, d.start, f"docid {d.doc_id!r} is in {spath} but not in {tpath}")
        tsegs = {sid: (s, ln) for sid, s, ln in zip(t.seg_ids, t.sentences, t.lines)}
        src_segs = set(d.seg_ids)
        extra = [(sid, ln) for sid, ln in zip(t.seg_ids, t.lines) if sid not in src_segs]
        if extra:
            raise DocumentFormatError(
                tpath, extra[0][1],
                f"seg id(s) {', '.join(s for s, _ in extra)} of docid {d.doc_id!r} are in {tpath} but not in {spath}",
            )
        missing = [(sid, ln) for sid, ln in zip(d.seg_ids, d.lines) if sid not in tsegs]
        if missing:
            raise DocumentFormatError(
                spath, missing[0][1],
                f"seg id(s) {', '.join(s for s, _ in missing)} of docid {d.doc_id!r} are in {spath} but not in {tpath}",
            )
        pairs = [tsegs[sid] for sid in d.seg_ids]
        out.append(Document(t.doc_id, [s for s, _ in pairs], [ln for _, ln in pairs], tpath, list(d.seg_ids), t.start))
    return out
