"""The contexts CXMI compares: a sentence's true context, no context, a random document's.

Conditional cross-mutual information (Fernandes, Yin, Neubig & Martins 2021, §3) compares a
model's log-probability of a reference with the context against without it; the plugin also
scores it with a *random* context, to tell a model that reads what its context says from one
that only gains from there being some context. This module decides, per sentence, which
sentences are its context in each case, as **corpus indices of previous sentences** — rows
``[K]`` in the layout of a batch's ``ids`` (column 0 = the nearest previous sentence, ``-1`` =
none; :mod:`~fairseq_docctx.data.context_batch`). Both users build their inputs from these
rows, so the two cannot drift:

* ``fairseq-train --validate-cxmi``: the validation dataset collates, beside each batch's true
  context, the contexts of :func:`no_context_rows` and :func:`random_context_rows`
  (:meth:`~fairseq_docctx.data.document_dataset.DocumentPairDataset.collate_variants`);
* ``docctx-score cxmi`` (:mod:`fairseq_docctx.evaluation.cxmi`): its scoring documents take
  their random context sentences from the same rows.

The definitions:

* **true context** — the ``n = min(j, K)`` previous sentences of sentence ``j`` of its document;
* **no context** — none (what a document's first sentence sees in training too);
* **random context** — ``m`` consecutive sentences of another document ``o``, the nearest of
  them in column 0, so the sentences keep their order, where ``o`` is drawn uniformly among the
  other documents that have at least ``n`` sentences (among all other documents when none has;
  ``m = min(n, |o|)``), and the start uniformly among the ``|o| - m + 1`` possible ones. A
  sentence without true context (``n = 0``) gets none; a split of one document has no random
  context at all. The draws of sentence ``i`` come from a generator seeded with ``(seed, i)``
  alone: the same rows whatever the batch, its order or the worker that collates it.
"""
from typing import Optional

import numpy as np

#: the names of the compared contexts other than the true one
NONE, RANDOM = "none", "random"
VARIANTS = (NONE, RANDOM)


def no_context_rows(num: int, k: int) -> np.ndarray:
    """``[num, k]`` rows of no context (all ``-1``)."""
    return np.full((num, k), -1, dtype=np.int64)


class RandomContext:
    """The random contexts of the sentences of one split (see the module doc).

    Args:
        lengths: the number of sentences of every document, in corpus order (a split's
            :class:`~fairseq_docctx.data.doc_index.DocIndex` ``lengths``).
        seed: the seed of the draws (``fairseq-train``'s ``--seed``; ``docctx-score cxmi
            --seed``).
    """

    def __init__(self, lengths, seed: int = 1):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.offsets = np.zeros(len(self.lengths), dtype=np.int64)
        if len(self.lengths):
            self.offsets[1:] = np.cumsum(self.lengths)[:-1]
        self.sent_doc = np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths)
        #: the documents in ascending length (ties in corpus order) and each one's rank there:
        #: the documents of at least n sentences are a suffix of this order
        self.by_length = np.argsort(self.lengths, kind="stable")
        self.rank = np.empty_like(self.by_length)
        self.rank[self.by_length] = np.arange(len(self.by_length))
        self.sorted_lengths = self.lengths[self.by_length]
        self.seed = int(seed) % (2 ** 63)

    def rows(self, ids, n, k: int) -> np.ndarray:
        """``[len(ids), k]`` corpus indices of the random context of the sentences ``ids``
        (corpus indices) whose true context has ``n`` sentences (``n <= k``), nearest first,
        ``-1`` past the ``m`` drawn ones."""
        ids = np.asarray(ids, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        out = no_context_rows(len(ids), k)
        for b, (i, want) in enumerate(zip(ids.tolist(), n.tolist())):
            drawn = self.draw(i, want)
            if drawn is not None:
                start, m = drawn
                out[b, :m] = start + m - 1 - np.arange(m)
        return out

    def draw(self, i: int, n: int) -> Optional[tuple]:
        """``(corpus index of the first sentence, m)`` of the random context of sentence ``i``
        whose true context has ``n`` sentences; ``None`` if it gets none."""
        if n <= 0 or len(self.lengths) < 2:
            return None
        d = int(self.sent_doc[i])
        first = int(np.searchsorted(self.sorted_lengths, n, side="left"))
        count = len(self.lengths) - first - int(self.rank[d] >= first)  # the other long-enough ones
        if count == 0:  # no other document is long enough: any other one
            first, count = 0, len(self.lengths) - 1
        rng = np.random.default_rng((self.seed, int(i)))
        u = int(rng.integers(count))
        own = int(self.rank[d]) - first
        if 0 <= own <= u:  # skip the sentence's own document
            u += 1
        o = int(self.by_length[first + u])
        m = min(n, int(self.lengths[o]))
        start = int(rng.integers(int(self.lengths[o]) - m + 1))
        return int(self.offsets[o]) + start, m


__all__ = ["NONE", "RANDOM", "VARIANTS", "no_context_rows", "RandomContext"]
