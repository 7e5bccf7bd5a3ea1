"""The document index stored beside each binarized split.

File ``{split}.{src}-{tgt}.docs`` in the data directory, UTF-8 text, one line per document
in corpus order::

    <document id> TAB <number of sentences> [TAB <context-only positions>]

The sentences of a split are the lines of fairseq's binarized ``.bin/.idx`` files, in order,
so document ``d`` covers sentences ``offsets[d] .. offsets[d] + lengths[d] - 1``. Nothing is
duplicated per context window: context is looked up through this index at batching time.

The optional third field lists, comma-separated and ascending, the positions in the document
(0 = its first sentence) of its **context-only** sentences: pairs that ``docctx-prepare``'s
training filters keep in their document as the context of the next sentences but never as a
training target (so that the previous sentence of every sentence stays the one the input
gives). A line without it (every index written before context-only sentences existed) has
none.
"""
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from ..errors import UsageError

DOC_INDEX_SUFFIX = "docs"


def doc_index_path(data_path: str, split: str, src: str, tgt: str) -> str:
    return os.path.join(data_path, f"{split}.{src}-{tgt}.{DOC_INDEX_SUFFIX}")


@dataclass
class DocIndex:
    """Documents of one split: ids and sentence counts, plus per-sentence lookups.

    ``context_only`` (bool ``[num_sentences]``, default all ``False``) marks the sentences
    that are context of the next ones but never a training target (see the module doc)."""

    doc_ids: List[str]
    lengths: np.ndarray  # int64 [num_docs]
    context_only: Optional[np.ndarray] = None  # bool [num_sentences]

    def __post_init__(self):
        self.lengths = np.asarray(self.lengths, dtype=np.int64)
        if len(self.doc_ids) != len(self.lengths):
            raise ValueError("doc_ids and lengths differ in length")
        n = int(self.lengths.sum())
        if self.context_only is None:
            self.context_only = np.zeros(n, dtype=bool)
        self.context_only = np.asarray(self.context_only, dtype=bool)
        if self.context_only.shape != (n,):
            raise ValueError(f"context_only has {self.context_only.size} entries for {n} sentences")
        self.offsets = np.zeros(len(self.lengths), dtype=np.int64)
        if len(self.lengths):
            self.offsets[1:] = np.cumsum(self.lengths)[:-1]
        #: document number of every sentence
        self.sent_doc = np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths)
        #: position of every sentence inside its document (0 = first sentence)
        self.sent_pos = np.arange(n, dtype=np.int64) - self.offsets[self.sent_doc]

    @property
    def num_sentences(self) -> int:
        return int(self.lengths.sum())

    @property
    def num_context_only(self) -> int:
        """The number of context-only sentences (never a training target)."""
        return int(self.context_only.sum())

    def context_only_positions(self, d: int) -> List[int]:
        """The positions (0 = first sentence) of document ``d``'s context-only sentences."""
        start = int(self.offsets[d])
        return np.flatnonzero(self.context_only[start:start + int(self.lengths[d])]).tolist()

    def __len__(self):
        return len(self.doc_ids)

    @classmethod
    def from_sentence_doc_ids(cls, sentence_doc_ids: Sequence[str]) -> "DocIndex":
        """Build from one document id per sentence (ids must form contiguous runs)."""
        doc_ids, lengths = [], []
        for d in sentence_doc_ids:
            if doc_ids and doc_ids[-1] == d:
                lengths[-1] += 1
            else:
                doc_ids.append(d)
                lengths.append(1)
        return cls(doc_ids, np.array(lengths, dtype=np.int64))

    @classmethod
    def concat(cls, parts: Sequence["DocIndex"]) -> "DocIndex":
        ids, lens, marks = [], [], []
        for p in parts:
            ids.extend(p.doc_ids)
            lens.extend(p.lengths.tolist())
            marks.append(p.context_only)
        return cls(ids, np.array(lens, dtype=np.int64),
                   np.concatenate(marks) if marks else np.zeros(0, dtype=bool))

    def write(self, path: str) -> None:
        """Write the index; the third field only on the lines of documents that have
        context-only sentences (an index without any is the two-field format)."""
        with open(path, "w", encoding="utf-8") as f:
            for k, (d, n) in enumerate(zip(self.doc_ids, self.lengths.tolist())):
                if "\t" in d or "\n" in d:
                    raise ValueError(f"document id {d!r} contains a tab or newline")
                marked = self.context_only_positions(k)
                f.write(f"{d}\t{n}" + (f"\t{','.join(map(str, marked))}" if marked else "") + "\n")

    @classmethod
    def read(cls, path: str) -> "DocIndex":
        """Read an index (with or without context-only positions); a malformed line is a
        ``ValueError`` naming the file and the line."""
        ids, lens, marks = [], [], []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                parts = line.split("\t")
                if len(parts) not in (2, 3) or not parts[1].isdigit() or int(parts[1]) < 1:
                    raise ValueError(
                        f"{path}:{lineno}: malformed document index line {line!r} "
                        "(expected '<doc id>\\t<number of sentences>', optionally followed by "
                        "'\\t<context-only positions>')"
                    )
                n = int(parts[1])
                mark = np.zeros(n, dtype=bool)
                if len(parts) == 3:
                    pos = [int(p) if p.isdigit() else -1 for p in parts[2].split(",")]
                    if min(pos) < 0 or pos != sorted(set(pos)) or pos[-1] >= n:
                        raise ValueError(
                            f"{path}:{lineno}: malformed context-only positions {parts[2]!r} "
                            f"(expected ascending comma-separated positions 0..{n - 1} of the "
                            "document's sentences)"
                        )
                    mark[pos] = True
                ids.append(parts[0])
                lens.append(n)
                marks.append(mark)
        return cls(ids, np.array(lens, dtype=np.int64),
                   np.concatenate(marks) if marks else np.zeros(0, dtype=bool))

    @classmethod
    def single_sentence_documents(cls, n: int) -> "DocIndex":
        """Every sentence its own document (for data without a document index)."""
        return cls([str(i) for i in range(n)], np.ones(n, dtype=np.int64))

    def shard_sentences(self, num_shards: int, shard_id: int) -> np.ndarray:
        """The corpus indices (sorted) of the sentences of the documents of shard
        ``shard_id`` of ``num_shards`` (:func:`balanced_shards`)."""
        docs = balanced_shards(self.lengths, num_shards)[check_shard(num_shards, shard_id)]
        return np.flatnonzero(np.isin(self.sent_doc, docs))


def check_shard(num_shards: int, shard_id: int) -> int:
    """``shard_id``, or a ``ValueError`` naming the options if it is not a shard of
    ``num_shards``."""
    if num_shards < 1:
        raise ValueError(f"--num-shards {num_shards}: must be at least 1")
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"--shard-id {shard_id} with --num-shards {num_shards}: the shard id "
                         f"must be in 0..{num_shards - 1}")
    return shard_id


def balanced_shards(lengths: Sequence[int], num_shards: int) -> List[np.ndarray]:
    """Documents (numbers, ascending) of each of ``num_shards`` shards, balanced by sentence
    count: documents are taken longest first (ties: corpus order) and each goes to the shard
    with the fewest sentences so far (ties: the lowest shard). Deterministic; every document
    in exactly one shard; a shard is empty only if there are fewer documents than shards."""
    import heapq

    lengths = np.asarray(lengths, dtype=np.int64)
    if num_shards < 1:
        raise ValueError(f"--num-shards {num_shards}: must be at least 1")
    owner = np.zeros(len(lengths), dtype=np.int64)
    heap = [(0, s) for s in range(num_shards)]
    for d in np.argsort(-lengths, kind="stable"):
        load, s = heapq.heappop(heap)
        owner[d] = s
        heapq.heappush(heap, (load + int(lengths[d]), s))
    return [np.flatnonzero(owner == s) for s in range(num_shards)]


def load_doc_index(data_path: str, split: str, src: str, tgt: str, num_sentences: int,
                   combine: bool = False, missing: Optional[str] = None) -> DocIndex:
    """The document index of ``split`` of a binarized data directory (shards ``split1``,
    ``split2``... concatenated with ``combine``, as fairseq concatenates the binarized
    shards), written for either direction. A split without one is one document a sentence,
    or, when ``missing`` names what to do instead (the option that needs no documents), a
    ``FileNotFoundError`` saying so; an index that covers another number of sentences than
    ``num_sentences`` is a :class:`~fairseq_docctx.errors.UsageError`."""
    parts, k = [], 0
    while True:
        split_k = split + (str(k) if k > 0 else "")
        found = [p for p in (doc_index_path(data_path, split_k, src, tgt), doc_index_path(data_path, split_k, tgt, src))
                 if os.path.exists(p)]
        if not found:
            break
        parts.append(DocIndex.read(found[0]))
        k += 1
        if not combine:
            break
    if not parts:
        if missing is not None:
            raise FileNotFoundError(
                f"no document index {doc_index_path(data_path, split, src, tgt)}: prepare the data with "
                "docctx-prepare (or write one line '<doc id>\\t<number of sentences>' per document), or "
                f"train with {missing}")
        return DocIndex.single_sentence_documents(num_sentences)
    docs = DocIndex.concat(parts)
    if docs.num_sentences != num_sentences:
        raise UsageError(f"{data_path}: the document index of '{split}' covers {docs.num_sentences} sentences, "
                         f"the binarized data has {num_sentences}")
    return docs
