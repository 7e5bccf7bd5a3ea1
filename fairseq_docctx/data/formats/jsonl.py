"""``jsonl``: JSON Lines, one document a line: ``{"id": .., "src": [..], "tgt": [..]}``
(``"hyp": [..]`` for translations; other fields are kept by the writer). One file holds every
side. Detected by a name ending ``.jsonl`` or ``.ndjson``, or a first non-empty line that is a
JSON object; written as the input's objects with ``"hyp"`` set."""
import json
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from ..documents import Document, DocumentFormatError, check_controls, invisible, shows_nothing, side_name
from .registry import DocumentFormat, FormatWriter, register

JSONL_EXTENSIONS = (".jsonl", ".ndjson")
#: the field of a JSON Lines document holding each side
JSONL_FIELDS = {"src": "src", "ref": "tgt", "hyp": "hyp"}


def _iter_jsonl(lines: Iterable[Tuple[int, str]], path: str, side: str = "src",
                allow_empty: bool = False) -> Iterator[Document]:
    """One side of JSON Lines: one JSON object a line, ``id`` and the side's list of
    sentences (``src``, ``tgt``, ``hyp``), as long as ``src`` where both are given."""
    key = JSONL_FIELDS[side_name(side)]
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
            if shows_nothing(x) and not allow_empty:
                raise DocumentFormatError(path, i, f"document {did!r}: sentence {k + 1} of \"{key}\" is empty"
                                          + invisible(x))
        yield Document(did, text, [i] * len(text), path, [str(k + 1) for k in range(len(text))], i, source=obj)


def _json_object(line: Optional[str]) -> bool:
    """Whether ``line`` (the first non-empty line) is a JSON object (a JSON Lines file)."""
    first = (line or "").strip()
    if not first.startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


class JsonlWriter(FormatWriter):
    """One line per document: the input's object with ``"hyp"`` set to the translation
    (``{"id", "src", "hyp"}`` for documents that were not read from JSON Lines)."""

    def write(self, doc: Document, sentences: List[str]) -> None:
        obj = dict(doc.source) if isinstance(doc.source, dict) else {"id": doc.doc_id, "src": list(doc.sentences)}
        obj["hyp"] = sentences
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")


class JsonlFormat(DocumentFormat):
    name = "jsonl"
    detection_order = 10
    one_file = True
    own_ids = True
    writer = JsonlWriter

    def detect(self, lines, path, docids):
        return path.lower().endswith(JSONL_EXTENSIONS) or _json_object(lines.first(lambda t: bool(t.strip())))

    def documents(self, lines, path, options):
        return _iter_jsonl(lines, path, options.side, options.allow_empty)


register(JsonlFormat())
