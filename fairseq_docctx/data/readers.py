"""Readers for raw parallel documents (pure Python; no fairseq import).

Formats (see ``docs/prepare.md``):

* ``docids``  one sentence a line in ``PREFIX.LANG`` plus one document id a line in
  ``PREFIX.docids``;
* ``blank``   one sentence a line, an empty line between documents;
* ``marker``  one sentence a line, a line ``<d>`` before each document;
* ``xml``     IWSLT/WMT XML or SGML, ``<doc docid=..>`` containing ``<seg id=..>``;
* ``wmt-xml`` the single-file XML of WMT test sets since 2021: ``<dataset><collection><doc
  id=.. origlang=..>`` holding ``<src lang=..>``, one or more ``<ref lang=.. translator=..>``
  and any ``<hyp system=..>``, each made of ``<p>`` paragraphs of ``<seg id=..>``;
* ``jsonl``   JSON Lines, one document a line: ``{"id": .., "src": [..], "tgt": [..]}``
  (``"hyp": [..]`` for translations; other fields are kept by the writer);
* ``tags``    the IWSLT training files (``train.tags.L1-L2.L``): one sentence a line, each
  talk led by its metadata lines (``<url>``, ``<talkid>``, ``<title>``, ...), the id from
  ``<talkid>``.

The last two hold both sides in one file: a *side* (``src``, ``ref``/``tgt``, ``hyp``) says
which one to read, and ``read_parallel`` takes the file itself as its prefix.

Every error is a :class:`DocumentFormatError` whose message starts with ``FILE:LINE:``
(1-based line).  Sentences are returned with CR/LF and surrounding whitespace removed; a
stray carriage return inside a sentence becomes a space (it would split the line later).
"""
import bisect
import collections
import html
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, Union

FORMATS = ("docids", "blank", "marker", "xml", "wmt-xml", "jsonl", "tags")
INPUT_FORMATS = ("auto",) + FORMATS
#: formats holding source, references and translations in one file
SINGLE_FILE_FORMATS = ("wmt-xml", "jsonl")
#: formats whose segments carry ids of their own (sides are matched by document and seg id)
SEG_ID_FORMATS = ("xml", "wmt-xml")
SIDES = ("src", "ref", "tgt", "hyp")
XML_EXTENSIONS = (".xml", ".sgm", ".sgml")
JSONL_EXTENSIONS = (".jsonl", ".ndjson")
DOCIDS = "docids"
_XML_STARTS = ("<?xml", "<mteval", "<srcset", "<refset", "<tstset", "<doc")


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
# low-level file access

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


class _Lookahead:
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


def _clean(sentence: str) -> str:
    return sentence.replace("\r", " ").strip()


def _shows_nothing(text: str) -> bool:
    """Whether ``text`` has no visible character: empty, or only white space, format
    characters (Unicode category Cf: U+200B zero-width space, U+200C/U+200D joiners, U+2060
    word joiner, U+FEFF, U+00AD soft hyphen...) and control characters (Cc). Such a line is
    empty to a reader, and a model given it translates nothing real into invented words."""
    return all(c.isspace() or unicodedata.category(c) in ("Cf", "Cc") for c in text)


def _invisible(text: str) -> str:
    """``" (only invisible characters: U+200B, ...)"`` for a non-empty text that shows
    nothing (:func:`_shows_nothing`), else ``""``: what an "empty" error adds to say why a
    line that is not empty counts as one."""
    if not text:
        return ""
    codes = sorted({f"U+{ord(c):04X}" for c in text if not c.isspace()})
    return f" (only invisible characters: {', '.join(codes) or 'white space'})"


def _first_element(text: str) -> Optional[str]:
    """The name of the first element of an XML text (None if there is none)."""
    for m in _XML_TOKEN.finditer(text):
        if m.group(2) and not m.group(1):
            return m.group(2).lower()
    return None


def _json_object(line: Optional[str]) -> bool:
    """Whether ``line`` (the first non-empty line) is a JSON object (a JSON Lines file)."""
    import json

    first = (line or "").strip()
    if not first.startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def detect_format(path: str, docids: Optional[str] = None) -> str:
    """Guess the format of one file (see the module docstring for the rules)."""
    lines = _Lookahead(iter_lines(path))
    try:
        return _detect(lines, path, docids)
    finally:
        lines.close()


def _detect(lines: _Lookahead, path: str, docids: Optional[str] = None) -> str:
    """The format of the lines ahead of ``lines`` (named ``path``), read no further than
    needed: the first non-empty line (JSON Lines, ``<d>``, IWSLT metadata), the first 50
    (XML), and, failing those, up to the first blank line (blank-line separated)."""
    first = lines.first(lambda t: bool(t.strip()))
    if path.lower().endswith(JSONL_EXTENSIONS) or _json_object(first):
        return "jsonl"
    head = "\n".join(lines.ahead(5)).lstrip().lower()
    if path.lower().endswith(XML_EXTENSIONS) or head.startswith(_XML_STARTS + ("<dataset",)):
        return "wmt-xml" if _first_element("\n".join(lines.ahead(50))) == "dataset" else "xml"
    if docids is not None and os.path.exists(docids):
        return "docids"
    first = first.strip() if first is not None else None
    if first == "<d>":
        return "marker"
    if first is not None and _TAGS_LINE.match(first):
        return "tags"
    if lines.first(lambda t: not t.strip()) is not None:
        return "blank"
    raise DocumentFormatError(
        path, 1,
        "cannot tell where documents start: no XML, no <d> markers, no blank lines and "
        f"no document-id file {docids or ''}; give --input-format or a .docids file",
    )


# ------------------------------------------------------------------------------------------
# one file, one format: each format read from numbered lines, one document at a time


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
        s = _clean(line)
        if not s or _shows_nothing(s):
            raise DocumentFormatError(path, i, f"empty sentence in document {d!r}{_invisible(s)}")
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


def _read_blank(path: str, name: str) -> List[Document]:
    return list(_iter_blank(enumerate(read_lines(path), 1), path, name))


def _iter_blank(lines: Iterable[Tuple[int, str]], path: str, name: str) -> Iterator[Document]:
    """Documents separated by empty lines; a document is complete at the empty line after
    it (or the end). A line of invisible characters only is neither a sentence nor an empty
    line: an error."""
    doc, k = None, 0
    for i, line in lines:
        s = _clean(line)
        if not s:
            if doc is not None:
                yield doc
                doc = None
            continue
        if _shows_nothing(s):
            raise DocumentFormatError(path, i, f"a line that shows nothing{_invisible(s)}: neither a sentence "
                                      "nor the empty line between documents")
        if doc is None:
            k += 1
            doc = Document(f"{name}:{k}", [], [], path)
        doc.sentences.append(s)
        doc.lines.append(i)
    if doc is not None:
        yield doc


def _read_marker(path: str, name: str) -> List[Document]:
    return list(_iter_marker(enumerate(read_lines(path), 1), path, name))


def _iter_marker(lines: Iterable[Tuple[int, str]], path: str, name: str) -> Iterator[Document]:
    """Documents each led by a ``<d>`` line; a document is complete at the next ``<d>``
    (or the end)."""
    doc, k, marker_line = None, 0, 0
    for i, line in lines:
        s = _clean(line)
        if s == "<d>":
            if doc is not None:
                if not doc.sentences:
                    raise DocumentFormatError(path, marker_line, "empty document (<d> followed by <d>)")
                yield doc
            k += 1
            doc = Document(f"{name}:{k}", [], [], path)
            marker_line = i
        elif not s or _shows_nothing(s):
            raise DocumentFormatError(path, i, f"empty sentence (a blank line in a <d>-marker file){_invisible(s)}")
        elif doc is None:
            raise DocumentFormatError(path, i, "text before the first <d> marker")
        else:
            doc.sentences.append(s)
            doc.lines.append(i)
    if doc is not None:
        if not doc.sentences:
            raise DocumentFormatError(path, marker_line, "empty document (<d> at the end of the file)")
        yield doc


# metadata lines of the IWSLT training files (train.tags.*): one element on a line
_TAGS_LINE = re.compile(r"^<(url|keywords|speaker|talkid|title|description|reviewer|translator|transcript)\b[^>]*>.*</\1>$",
                        re.I)
_TALKID = re.compile(r"^<talkid>\s*(.*?)\s*</talkid>$", re.I)


def _read_tags(path: str, name: str, allow_empty: bool = False) -> List[Document]:
    return list(_iter_tags(enumerate(read_lines(path), 1), path, name, allow_empty))


def _iter_tags(lines: Iterable[Tuple[int, str]], path: str, name: str,
               allow_empty: bool = False) -> Iterator[Document]:
    """IWSLT training talks: a run of metadata lines starts a document (id: its ``<talkid>``,
    else ``NAME:N``); every other line is a sentence. ``allow_empty``: an empty line (or one
    of invisible characters only) is an empty sentence (``read_parallel`` drops the pairs
    with an empty side) instead of an error."""
    doc, k, in_meta, last = None, 0, False, 0
    for i, line in lines:
        last = i
        s = _clean(line)
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
        if _shows_nothing(s):
            if not allow_empty:
                raise DocumentFormatError(path, i, "empty sentence (a blank line in an IWSLT train.tags file)"
                                          + _invisible(s))
            s = ""
        if doc is None:
            raise DocumentFormatError(path, i, "text before the first talk's metadata (<url>, <talkid>, ...)")
        doc.sentences.append(s)
        doc.lines.append(i)
    if doc is not None:
        if not doc.sentences:
            raise DocumentFormatError(path, last, "the last talk has no sentences")
        yield doc


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
        path, allow_empty = self.path, self.allow_empty
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
            if tag == "doc":
                if closing:
                    if doc is None:
                        raise DocumentFormatError(path, ln, "</doc> without an open <doc>")
                    if not doc.sentences:
                        raise DocumentFormatError(path, doc_line, f"document {doc.doc_id!r} has no <seg>")
                    docs.append(doc)
                    doc = None
                    continue
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
                self.doc_lines[docid] = doc_line = ln
                doc_start = m.start()
                if self_closing:  # <doc docid="..."/>
                    raise DocumentFormatError(path, ln, f"document {docid!r} has no <seg>")
                doc = Document(docid, [], [], path, [], ln, attrs)
                seg_ids = {}
            elif tag == "seg":
                if closing:
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
                    continue
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
                s = _clean(check_controls(_segment_text(text[m.end():end.start()]), path, ln))
                if _shows_nothing(s) and not allow_empty:
                    raise DocumentFormatError(path, ln, f"empty segment id={sid} in document {doc.doc_id!r}"
                                              + _invisible(s))
                doc.seg_ids.append(sid)
                doc.sentences.append(s)
                doc.lines.append(ln)
                pos = end.end()
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


def _read_xml(path: str, allow_empty: bool = False) -> List[Document]:
    """The documents of an IWSLT/WMT XML or SGML file (:class:`_XmlParser`), its text
    parsed whole."""
    return _XmlParser(path, allow_empty).feed("\n".join(read_lines(path)))[0]


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



# ------------------------------------------------------------------------------------------
# single-file formats: WMT 2021+ XML and JSON Lines


def _side_name(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"side {side!r}: one of {', '.join(SIDES)}")
    return "ref" if side == "tgt" else side


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
    side = _side_name(side)
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
        if _shows_nothing(text) and not allow_empty:
            raise DocumentFormatError(path, seg.sourceline, f"empty segment id={sid} in document {did!r}"
                                      + _invisible(text))
        doc.seg_ids.append(sid)
        doc.sentences.append(text)
        doc.lines.append(seg.sourceline)
    if not doc.sentences:
        raise DocumentFormatError(path, el.sourceline, f"<{el.tag}> of document {did!r} has no <seg>")
    return doc


def _iter_wmt_xml(source: Union[str, IO[bytes]], path: str) -> Iterator[Document]:
    """The source side of a WMT 2021+ file or byte stream, parsed as it is read (lxml's
    ``iterparse``): a document as soon as its ``</doc>`` is read. A document written
    (:func:`release`) is removed from the tree, which then holds the documents read and not
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


def release(doc: Document) -> None:
    """Drop what a document read by :class:`DocumentStream` keeps of its file once it is
    written: a WMT 2021+ document's element leaves the parsed tree."""
    el = doc.source
    if el is not None and hasattr(el, "getparent"):
        parent = el.getparent()
        el.clear()
        if parent is not None:
            parent.remove(el)
    doc.source = None


#: the field of a JSON Lines document holding each side
JSONL_FIELDS = {"src": "src", "ref": "tgt", "hyp": "hyp"}


def _read_jsonl(path: str, side: str = "src", allow_empty: bool = False) -> List[Document]:
    return list(_iter_jsonl(enumerate(read_lines(path), 1), path, side, allow_empty))


def _iter_jsonl(lines: Iterable[Tuple[int, str]], path: str, side: str = "src",
                allow_empty: bool = False) -> Iterator[Document]:
    """One side of JSON Lines: one JSON object a line, ``id`` and the side's list of
    sentences (``src``, ``tgt``, ``hyp``), as long as ``src`` where both are given."""
    import json

    key = JSONL_FIELDS[_side_name(side)]
    seen: Dict[str, int] = {}
    for i, line in lines:
        if not line.strip():
            raise DocumentFormatError(path, i, "empty line (JSON Lines: one document, a JSON object, per line)")
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise DocumentFormatError(path, i, f"not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise DocumentFormatError(path, i, "not a JSON object ({\"id\": ..., \"src\": [...], ...})")
        if not isinstance(obj.get("id"), (str, int)) or isinstance(obj.get("id"), bool) or str(obj["id"]).strip() == "":
            raise DocumentFormatError(path, i, "no \"id\" (a string or an integer)")
        did = str(obj["id"]).strip()
        if "\t" in did:
            raise DocumentFormatError(path, i, f"document id {did!r} contains a tab")
        if did in seen:
            raise DocumentFormatError(path, i, f"document id {did!r} appears twice (first at line {seen[did]})")
        seen[did] = i
        sents = obj.get(key)
        if not isinstance(sents, list) or not all(isinstance(x, str) for x in sents):
            raise DocumentFormatError(path, i, f"document {did!r}: no \"{key}\" list of sentences (strings)")
        if not sents:
            raise DocumentFormatError(path, i, f"document {did!r}: \"{key}\" is empty")
        if key != "src" and isinstance(obj.get("src"), list) and len(obj["src"]) != len(sents):
            raise DocumentFormatError(path, i, f"document {did!r}: {len(obj['src'])} \"src\" sentences but "
                                      f"{len(sents)} \"{key}\" sentences")
        text = [" ".join(check_controls(x, path, i).split()) for x in sents]
        for k, x in enumerate(text):
            if _shows_nothing(x) and not allow_empty:
                raise DocumentFormatError(path, i, f"document {did!r}: sentence {k + 1} of \"{key}\" is empty"
                                          + _invisible(x))
        yield Document(did, text, [i] * len(text), path, [str(k + 1) for k in range(len(text))], i, source=obj)


def read_file(path: str, input_format: str = "auto", docids: Optional[str] = None,
              name: Optional[str] = None, allow_empty: bool = False, side: str = "src",
              translator: Optional[str] = None, system: Optional[str] = None) -> Tuple[List[Document], str]:
    """Read the documents of one file; returns ``(documents, format)``.

    ``docids``: the document-id file (``docids`` format, and for auto-detection);
    ``name``: prefix of generated ids ``NAME:N`` (``blank``/``marker``; default: the
    file's base name); ``allow_empty``: accept empty XML segments (hypotheses: an empty
    translation) and empty lines of a ``tags`` file (as empty sentences). ``side``, ``translator``, ``system``: what to read of a file holding
    several sides (``wmt-xml``, ``jsonl``; see the module doc). A file without any document
    is an error in every format. A sentence that shows nothing (white space, format and
    control characters only, e.g. U+200B) is an empty sentence."""
    fmt = detect_format(path, docids) if input_format == "auto" else input_format
    name = name or prefix_name(path)
    if fmt == "docids":
        if docids is None:
            raise ValueError("the docids format needs the document-id file")
        if not os.path.exists(docids):
            raise FileNotFoundError(f"no such file: {docids} (document ids for {path})")
        docs = _read_docids_format(path, docids)
    elif fmt == "blank":
        docs = _read_blank(path, name)
    elif fmt == "marker":
        docs = _read_marker(path, name)
    elif fmt == "tags":
        docs = _read_tags(path, name, allow_empty)
    elif fmt == "xml":
        docs = _read_xml(path, allow_empty)
    elif fmt == "wmt-xml":
        docs = _read_wmt_xml(path, side, translator, system, allow_empty)
    elif fmt == "jsonl":
        docs = _read_jsonl(path, side, allow_empty)
    else:
        raise ValueError(f"unknown input format {fmt!r} (choose from {', '.join(INPUT_FORMATS)})")
    if not docs:
        raise DocumentFormatError(path, 1, f"no documents (no sentence in this {fmt}-format file)")
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
    an XML set element (:func:`read_set_attributes`), once the first document is read (``{}``
    for other formats)."""

    def __init__(self, source: Union[str, IO[bytes]], input_format: str = "auto",
                 docids: Optional[str] = None, name: Optional[str] = None, path: Optional[str] = None):
        self.source = source
        self.path = path or str(source)
        self.docids = docids
        self.name = name or prefix_name(self.path)
        if isinstance(source, (str, os.PathLike)) and not os.path.exists(source):
            raise FileNotFoundError(f"no such file: {source}")
        self._lines = _Lookahead(iter_lines(source, self.path))
        try:
            fmt = _detect(self._lines, self.path, docids) if input_format == "auto" else input_format
            if fmt not in FORMATS:
                raise ValueError(f"unknown input format {fmt!r} (choose from {', '.join(INPUT_FORMATS)})")
            if fmt == "docids":
                if docids is None:
                    raise ValueError("the docids format needs the document-id file")
                if not os.path.exists(docids):
                    raise FileNotFoundError(f"no such file: {docids} (document ids for {self.path})")
        except BaseException:
            self._lines.close()
            raise
        self.format = fmt
        self._xml = _XmlParser(self.path) if fmt == "xml" else None
        self.count = 0

    @property
    def set_attributes(self) -> Dict[str, str]:
        return (self._xml.set_attributes or {}) if self._xml is not None else {}

    def __iter__(self) -> Iterator[Document]:
        for doc in self._documents():
            self.count += 1
            yield doc
        if not self.count:
            raise DocumentFormatError(self.path, 1, f"no documents (no sentence in this {self.format}-format file)")

    def _documents(self) -> Iterator[Document]:
        fmt, lines, path = self.format, self._lines, self.path
        if fmt == "docids":
            ids = _iter_docids_file(iter_lines(self.docids), self.docids)
            return _iter_docids_format(lines, ids, path, self.docids)
        if fmt == "blank":
            return _iter_blank(lines, path, self.name)
        if fmt == "marker":
            return _iter_marker(lines, path, self.name)
        if fmt == "tags":
            return _iter_tags(lines, path, self.name)
        if fmt == "jsonl":
            return _iter_jsonl(lines, path)
        if fmt == "xml":
            return _iter_xml(lines, self._xml)
        # wmt-xml: lxml reads the bytes: a file again from its start, a stream from the lines
        # read ahead on
        if isinstance(self.source, (str, os.PathLike)):
            lines.close()
            return _iter_wmt_xml(self.source, path)
        return _iter_wmt_xml(_LinesAsBytes(lines), path)

    def close(self) -> None:
        self._lines.close()


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


def _count_mismatch(path_a: str, n_a: int, path_b: str, n_b: int):
    longer, shorter = (path_a, path_b) if n_a > n_b else (path_b, path_a)
    raise DocumentFormatError(
        longer, min(n_a, n_b) + 1,
        f"line counts differ: {path_a} has {n_a} lines, {path_b} has {n_b} lines "
        f"(this line has no counterpart in {shorter})",
    )


def _span(doc: Document) -> str:
    return f"lines {doc.lines[0]}-{doc.lines[-1]}"


def _match_structure(src: List[Document], tgt: List[Document]):
    """blank/marker: same number of documents with the same sentence counts."""
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


def _match_xml(src: List[Document], tgt: List[Document]) -> List[Document]:
    """Reorder the target documents/segments to the source's docids and seg ids."""
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


def _single_file_format(prefix: str, input_format: str) -> Optional[str]:
    """The format of ``prefix`` if it is one file holding both sides (``wmt-xml``, ``jsonl``)."""
    if has_placeholders(prefix) or not os.path.isfile(prefix):
        return None
    try:
        fmt = detect_format(prefix) if input_format == "auto" else input_format
    except DocumentFormatError:  # a file named like the prefix, of no document format
        return None
    return fmt if fmt in SINGLE_FILE_FORMATS else None


def read_parallel(prefix: str, src: str, tgt: str, input_format: str = "auto",
                  translator: Optional[str] = None) -> ParallelDocuments:
    """Read both sides of one prefix and align them (see :class:`ParallelDocuments`). A
    prefix that is itself a ``wmt-xml`` or ``jsonl`` file gives both: its source and its
    reference (of ``translator``, default the file's first; see :func:`_read_wmt_xml`;
    ``translator`` means nothing to the other formats)."""
    single = _single_file_format(prefix, input_format)
    if single is not None:
        sdocs, _ = read_file(prefix, single, side="src")
        tdocs, _ = read_file(prefix, single, side="ref", translator=translator if single == "wmt-xml" else None)
        if single == "wmt-xml":
            tdocs = _match_xml(sdocs, tdocs)
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
    name = prefix_name(prefix)
    if fmt == "docids":
        if not os.path.exists(docids):
            raise FileNotFoundError(f"no such file: {docids} (document ids for prefix {prefix})")
        n_src, n_tgt = len(read_lines(spath)), len(read_lines(tpath))
        if n_src != n_tgt:
            _count_mismatch(spath, n_src, tpath, n_tgt)
    # tags: empty lines are read as empty sentences, then the pairs holding one are dropped
    sdocs, _ = read_file(spath, fmt, docids, name, allow_empty=fmt == "tags")
    tdocs, _ = read_file(tpath, fmt, docids, name, allow_empty=fmt == "tags")
    dropped = 0
    if fmt in ("blank", "marker", "tags"):
        _match_structure(sdocs, tdocs)
    elif fmt == "xml":
        tdocs = _match_xml(sdocs, tdocs)
    if fmt == "tags":
        dropped = _drop_empty_pairs(sdocs, tdocs)
    formats = {spath: fmt, tpath: fmt}
    if fmt == "docids":
        formats[docids] = "docids"
    return ParallelDocuments(sdocs, tdocs, spath, tpath, fmt,
                             docids if fmt == "docids" else None, formats, dropped)


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
