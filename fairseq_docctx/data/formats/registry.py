"""The registry of document formats: each format one :class:`DocumentFormat`, registered by
name (:func:`register`), holding what tells a file of it (:meth:`~DocumentFormat.detect`),
how it is read whole (:meth:`~DocumentFormat.read`) and one document at a time
(:meth:`~DocumentFormat.stream`), how its two sides are aligned, and its writer
(:class:`FormatWriter`). The readers (:mod:`fairseq_docctx.data.readers`), the writer
(:mod:`fairseq_docctx.data.writers`), ``docctx-prepare``'s manifest and the scorer's input ask
the registry; none of them names a format.

A format is one module that defines a subclass of :class:`DocumentFormat` (and of
:class:`FormatWriter` if documents can be written in it) and registers an instance of it:
``register(MyFormat())``. The package's own formats are registered on import of
:mod:`fairseq_docctx.data.formats`.
"""
import collections.abc
from dataclasses import dataclass
from typing import IO, Any, Dict, Iterable, List, Optional, Tuple, Type, Union

from ..documents import Document, DocumentFormatError, Lookahead, read_lines


@dataclass(frozen=True)
class ReadOptions:
    """What a reader is asked for besides the file.

    ``docids``: the document-id file of the file (a format that keeps its ids beside the text
    reads it); ``name``: the prefix of generated document ids ``NAME:N``; ``allow_empty``:
    accept empty sentences (hypotheses: an empty translation); ``side``, ``translator``,
    ``system``: what to read of a file holding several sides (``src``, ``ref``/``tgt``,
    ``hyp``; the reference of one translator, the hypothesis of one system)."""

    docids: Optional[str] = None
    name: str = "doc"
    allow_empty: bool = False
    side: str = "src"
    translator: Optional[str] = None
    system: Optional[str] = None


class FormatWriter:
    """Writes translated documents in one format: :meth:`write` once per document, in order
    (``sentences`` one translation per sentence of ``doc``, white space already folded), then
    :meth:`close` (closing tags; the streams themselves stay open). ``count``: the documents
    written so far (kept by the caller, :class:`~fairseq_docctx.data.writers.DocumentWriter`).

    ``docids_out``: where a format keeping its ids beside the text writes them;
    ``set_attributes``: the input's set attributes (an XML set element's, ``{}`` else);
    ``src_lang``, ``tgt_lang``, ``sysid``: the languages and the name of the translating system,
    for the formats that record them."""

    def __init__(self, out: IO[str], docids_out: Optional[IO[str]] = None, src_lang: str = "src",
                 tgt_lang: str = "tgt", sysid: str = "fairseq_docctx",
                 set_attributes: Optional[Dict[str, str]] = None):
        self.out, self.docids_out = out, docids_out
        self.src_lang, self.tgt_lang, self.sysid = src_lang, tgt_lang, sysid
        self.set_attributes = set_attributes
        self.count = 0

    def write(self, doc: Document, sentences: List[str]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DocumentFormat:
    """One document format. A subclass sets :attr:`name` and defines :meth:`documents`
    (numbered lines to documents), or :meth:`read` and :meth:`stream` where reading a whole
    file and streaming one differ; the other methods have defaults (no precondition, the two
    sides of a pair taken as read, nothing more in the manifest).

    Attributes: ``detection_order``: where :meth:`detect` is asked among the formats (lowest
    first; ties in order of registration); ``one_file``: a file holds source, references and
    translations (``read_parallel`` takes the file itself as its prefix); ``seg_ids``: its
    segments carry ids of their own (sides are matched by document and seg id); ``own_ids``:
    its documents carry ids of their own (the scorer checks that sides agree on them);
    ``id_file``: the ids are read from a document-id file beside the text;
    ``empty_line_separates``: an empty line ends a document (in hypotheses, where an empty
    line is an empty translation, the scorer reads a file detected as this format as plain
    lines); ``drops_empty_pairs``: the two sides of a training pair are read with empty
    sentences allowed, and :meth:`align` drops the pairs with an empty side; ``writer``:
    its :class:`FormatWriter` (None: documents are not written in it)."""

    name: str = ""
    detection_order: int = 100
    one_file: bool = False
    seg_ids: bool = False
    own_ids: bool = False
    id_file: bool = False
    empty_line_separates: bool = False
    drops_empty_pairs: bool = False
    writer: Optional[Type[FormatWriter]] = None

    def detect(self, lines: Lookahead, path: str, docids: Optional[str]) -> bool:
        """Whether the lines ahead of ``lines`` (of the file ``path``; ``docids`` its
        document-id file, which may not exist) are of this format; read no further than
        needed, and leave every line to be read."""
        return False

    def check(self, path: str, options: ReadOptions) -> None:
        """Raise if ``path`` cannot be read with ``options`` before any of it is read."""

    def documents(self, lines: Iterable[Tuple[int, str]], path: str,
                  options: ReadOptions) -> Iterable[Document]:
        """The documents of numbered lines (``(number, text)``) of the file ``path``, each
        given as soon as the lines that complete it are read."""
        raise NotImplementedError(f"the {self.name} format defines no documents()")

    def read(self, path: str, options: ReadOptions) -> List[Document]:
        """Every document of the file ``path`` (read whole: its encoding and control
        characters are checked before any document is made)."""
        return list(self.documents(enumerate(read_lines(path), 1), path, options))

    def stream(self, lines: Lookahead, path: str, options: ReadOptions,
               source: Union[str, IO[bytes]]) -> Iterable[Document]:
        """The documents of a file or byte stream (``source``; ``lines``: its numbered lines,
        some perhaps looked at by detection and left to be read), one at a time, reading
        nothing before they are asked for. ``path``: the name errors give."""
        return self.documents(lines, path, options)

    def check_pair(self, prefix: str, src_path: str, tgt_path: str, docids: str) -> None:
        """Raise if the two sides of ``prefix`` cannot make a pair, before either is read."""

    def align(self, src: List[Document], tgt: List[Document]) -> Tuple[List[Document], int]:
        """The target documents aligned to the source's (``src[i].sentences[j]`` translates
        to ``tgt[i].sentences[j]``), checked, and the number of sentence pairs dropped; by
        default the target as read."""
        return tgt, 0

    def describe(self, parallel: Any, translator: Optional[str]) -> Dict[str, Any]:
        """What ``docctx-prepare``'s manifest records of a pair of this format besides its
        files (``parallel``: the :class:`~fairseq_docctx.data.readers.ParallelDocuments`;
        ``translator``: the reference asked for)."""
        return {}


_FORMATS: Dict[str, DocumentFormat] = {}
#: names that mean something else where a format is asked for
_RESERVED = ("auto", "lines", "generate")


def register(fmt: DocumentFormat) -> DocumentFormat:
    """Register ``fmt`` under its name (a name may be registered once)."""
    if not fmt.name or fmt.name in _RESERVED:
        raise ValueError(f"a document format needs a name other than {', '.join(_RESERVED)}")
    if fmt.name in _FORMATS:
        raise ValueError(f"document format {fmt.name!r} is registered already")
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> DocumentFormat:
    """Remove the format registered as ``name`` (a format loaded for a while: a test's)."""
    return _FORMATS.pop(name)


def find(name: str) -> Optional[DocumentFormat]:
    """The format registered as ``name`` (None: none)."""
    return _FORMATS.get(name)


def get(name: str) -> DocumentFormat:
    """The format registered as ``name``; an unknown name is a ValueError naming the choices."""
    fmt = _FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown input format {name!r} (choose from {', '.join(Names('auto'))})")
    return fmt


class Names(collections.abc.Sequence):
    """The names of the registered formats, in order of registration, after ``fixed`` names
    (``"auto"``...), read each time they are used: a command's choices of format
    (``choices=Names("auto")``) include the formats registered after it was imported."""

    def __init__(self, *fixed: str):
        self.fixed = fixed

    def _all(self) -> Tuple[str, ...]:
        return self.fixed + tuple(_FORMATS)

    def __getitem__(self, i):
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


def detect(lines: Lookahead, path: str, docids: Optional[str] = None) -> str:
    """The name of the format of the lines ahead of ``lines`` (named ``path``): the first
    format whose :meth:`DocumentFormat.detect` says so, in order of ``detection_order``;
    none is a :class:`DocumentFormatError`."""
    for fmt in sorted(_FORMATS.values(), key=lambda f: f.detection_order):
        if fmt.detect(lines, path, docids):
            return fmt.name
    raise DocumentFormatError(
        path, 1,
        "cannot tell where documents start: no XML, no <d> markers, no blank lines and "
        f"no document-id file {docids or ''}; give --input-format or a .docids file",
    )
