"""Document-batched parallel dataset.

:class:`DocumentPairDataset` wraps fairseq's :class:`~fairseq.data.LanguagePairDataset` (one
item per sentence pair, in corpus order) and a :class:`~fairseq_docctx.data.doc_index.DocIndex`.
Every collated batch is what ``LanguagePairDataset`` produces, plus
``net_input["context"]`` with the K previous sentences of every sentence of the batch:

``src_tokens`` ``[U_s, L]`` / ``src_lengths`` ``[U_s]``
    a table of the *unique* source sentences the batch needs: the current sentences and
    their context, each stored once, padded like ``src_tokens`` (``--left-pad-source``).
``src_index`` ``[B, K]``
    row of the table holding the (k+1)-th previous source sentence of batch row ``b``
    (column 0 = the previous sentence), ``-1`` where the document has no such sentence.
``src_self`` ``[B]``
    row of the table holding the current source sentence of batch row ``b``.
``tgt_tokens``, ``tgt_lengths``, ``tgt_index``, ``tgt_self``
    the same for target sentences (right-padded, ending in EOS) when target context is
    used and the split has references. ``tgt_self`` (the current reference) is there so a
    model can teacher-force each sentence once per batch; it must never be read to predict
    that sentence. In document-order inference the task replaces these with the model's own
    translations (``tgt_self`` then is absent).
``ids`` ``[B, K]``
    corpus indices of the context sentences (``-1`` if none).

Context never crosses a document boundary; a document's first sentence has an all ``-1``
row (masked, not filled with other text).

With ``position_major`` (document-order inference) batch ``t`` holds sentence ``t`` of many
documents, so every sentence comes after the sentences it takes context from.

Training batching (:meth:`batch_by_size`) keeps *runs* of consecutive sentences of a document
together, so that sentence ``j`` is usually both a current sentence and the context of
``j+1 .. j+K`` in the same batch and is encoded once. Runs are re-drawn and shuffled every
epoch. ``--max-tokens`` counts the padded tokens of the tables a batch really holds. No
sentence is ever dropped by batching, whatever ``--required-batch-size-multiple`` says.
"""
import logging
from typing import List, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from .doc_index import DocIndex

logger = logging.getLogger(__name__)

CONTEXT_SIDES = ("source", "target", "both", "none")


class DocumentPairDataset(FairseqDataset):
    """A :class:`LanguagePairDataset` that knows its documents.

    Args:
        pair: the sentence-level dataset (items in corpus order).
        doc_index: documents of the split (its sentence count must equal ``len(pair)``).
        context_size: K, the number of previous sentences given as context.
        context_sides: ``source``, ``target``, ``both`` or ``none``.
        shuffle: shuffle document runs every epoch (training).
        run_length: maximum number of consecutive sentences of a document kept together.

    Attribute ``batching`` (set by the task from ``--doc-batching``): ``"runs"`` (default)
    packs runs of consecutive sentences so that each shared context sentence sits once in a
    batch's table; ``"sentences"`` orders and packs sentences by length like fairseq's
    ``LanguagePairDataset``, each batch with the context of its sentences (little padding of
    the current sentences; for models that only embed their context); ``"grouped-runs"``
    packs runs like ``"runs"`` but counts every row of a batch's tables at its real length
    (for models that run their tables in groups of similar length, `data.length_groups`, and
    so hold little padding).
    """

    def __init__(
        self,
        pair,
        doc_index: DocIndex,
        context_size: int = 3,
        context_sides: str = "source",
        shuffle: bool = True,
        run_length: int = 16,
        position_major: bool = False,
    ):
        if doc_index.num_sentences != len(pair):
            raise ValueError(
                f"the document index covers {doc_index.num_sentences} sentences but the "
                f"binarized data has {len(pair)}"
            )
        if context_sides not in CONTEXT_SIDES:
            raise ValueError(f"context_sides must be one of {CONTEXT_SIDES}")
        if context_size < 0:
            raise ValueError("context_size must be >= 0")
        if run_length < 1:
            raise ValueError("run_length must be >= 1")
        self.pair = pair
        self.docs = doc_index
        self.context_size = context_size
        self.context_sides = context_sides
        self.shuffle = shuffle
        self.run_length = run_length
        self.use_source = context_size > 0 and context_sides in ("source", "both")
        self.use_target = context_size > 0 and context_sides in ("target", "both")
        #: document order for inference: batch t holds sentence t of many documents
        self.position_major = position_major
        if self.use_target and pair.tgt is None and not position_major:
            logger.warning(
                "no references in this split: target context can only come from the "
                "model's own translations (document-order inference)"
            )
        self.epoch = 1
        self.batching = "runs"

    # ------------------------------------------------------------------ basics
    @property
    def has_context(self) -> bool:
        return self.use_source or self.use_target

    @property
    def sizes(self):
        return self.pair.sizes

    @property
    def src_sizes(self):
        return self.pair.src_sizes

    @property
    def tgt_sizes(self):
        return self.pair.tgt_sizes

    @property
    def src(self):
        return self.pair.src

    @property
    def tgt(self):
        return self.pair.tgt

    @property
    def src_dict(self):
        return self.pair.src_dict

    @property
    def tgt_dict(self):
        return self.pair.tgt_dict

    def __getitem__(self, index):
        return self.pair[index]

    def __len__(self):
        return len(self.pair)

    def num_tokens(self, index):
        return self.pair.num_tokens(index)

    def num_tokens_vec(self, indices):
        return self.pair.num_tokens_vec(indices)

    def size(self, index):
        return self.pair.size(index)

    def filter_indices_by_size(self, indices, max_sizes):
        return self.pair.filter_indices_by_size(indices, max_sizes)

    def get_batch_shapes(self):
        return self.pair.get_batch_shapes()

    @property
    def supports_prefetch(self):
        return self.pair.supports_prefetch

    def prefetch(self, indices):
        self.pair.prefetch(self.with_context_indices(np.asarray(indices, dtype=np.int64)))

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        # document runs are re-drawn every epoch (see the task's get_batch_iterator)
        return not self.has_context

    def set_epoch(self, epoch):
        self.epoch = epoch
        if hasattr(self.pair, "set_epoch"):
            self.pair.set_epoch(epoch)

    # ---------------------------------------------------------------- context
    def context_rows(self, ids: np.ndarray) -> np.ndarray:
        """``[len(ids), K]`` corpus indices of the previous sentences, ``-1`` if none."""
        ids = np.asarray(ids, dtype=np.int64)
        k = np.arange(1, self.context_size + 1, dtype=np.int64)
        prev = ids[:, None] - k[None, :]
        prev[self.docs.sent_pos[ids][:, None] < k[None, :]] = -1
        return prev

    def with_context_indices(self, ids: np.ndarray) -> np.ndarray:
        if not self.has_context or len(ids) == 0:
            return ids
        prev = self.context_rows(ids)
        return np.unique(np.concatenate([ids, prev[prev >= 0]]))

    def _table(self, ids: np.ndarray, prev: np.ndarray, key: str, pad: int, eos: int, left_pad: bool):
        """Unique-sentence table for one side: tokens, lengths, index map, self map."""
        rows = np.unique(np.concatenate([ids, prev[prev >= 0]]))
        items = [self.pair[int(i)][key] for i in rows]
        tokens = data_utils.collate_tokens(items, pad, eos, left_pad=left_pad)
        lengths = torch.LongTensor([t.numel() for t in items])
        pos = np.searchsorted(rows, np.maximum(prev, 0))
        index = np.where(prev >= 0, pos, -1)
        return {
            "tokens": tokens,
            "lengths": lengths,
            "index": torch.from_numpy(index.astype(np.int64)),
            "self": torch.from_numpy(np.searchsorted(rows, ids).astype(np.int64)),
        }

    def collate_context(self, ids) -> dict:
        ids = np.asarray(ids, dtype=np.int64)
        prev = self.context_rows(ids)
        # corpus ids of the context sentences: inference fills target context from them
        ctx = {"ids": torch.from_numpy(prev)}
        pad, eos = self.pair.src_dict.pad(), self.pair.eos
        if self.use_source:
            t = self._table(ids, prev, "source", pad, eos, self.pair.left_pad_source)
            ctx.update({"src_" + k: v for k, v in t.items()})
        if self.use_target and self.pair.tgt is not None:
            t = self._table(ids, prev, "target", pad, eos, False)
            ctx.update({"tgt_" + k: v for k, v in t.items()})
        return ctx

    def collater(self, samples, pad_to_length=None):
        res = self.pair.collater(samples, pad_to_length=pad_to_length)
        if self.has_context and len(samples) > 0:
            res["net_input"]["context"] = self.collate_context(res["id"].numpy())
        return res

    # --------------------------------------------------------------- batching
    def doc_runs(self, indices: np.ndarray) -> List[np.ndarray]:
        """Split ``indices`` (in the given order) into runs of consecutive sentences of one
        document, at most ``run_length`` long."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) == 0:
            return []
        brk = np.flatnonzero(
            (np.diff(indices) != 1) | (np.diff(self.docs.sent_doc[indices]) != 0)
        ) + 1
        return [
            seg[s : s + self.run_length]
            for seg in np.split(indices, brk)
            for s in range(0, len(seg), self.run_length)
        ]

    def ordered_indices(self):
        """Sentence-level data: fairseq's order. With context: document runs, shuffled
        (training) and grouped by length so that batches pad little; the runs stay in
        corpus order inside."""
        if not self.has_context:
            return self.pair.ordered_indices()
        if self.position_major:  # by position in the document, then by length
            return np.lexsort((self.pair.num_tokens_vec(np.arange(len(self))), self.docs.sent_pos))
        if self.batching == "sentences":  # fairseq's order: shuffled, then by length
            return self.pair.ordered_indices()
        runs = self.doc_runs(np.arange(len(self), dtype=np.int64))
        order = np.arange(len(runs))
        if self.shuffle:
            order = np.random.permutation(len(runs))
            lens = np.array([self.pair.num_tokens_vec(r).max() for r in runs])
            order = order[np.argsort(lens[order], kind="mergesort")]
        return np.concatenate([runs[i] for i in order]) if runs else np.zeros(0, np.int64)

    def batch_by_size(
        self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1
    ):
        indices = np.asarray(indices, dtype=np.int64)
        if not self.has_context:
            batches = super().batch_by_size(
                indices, max_tokens, max_sentences, required_batch_size_multiple
            )
            return _restore_dropped(batches, indices)
        if self.position_major:  # a batch never mixes positions
            indices = indices[np.argsort(self.docs.sent_pos[indices], kind="stable")]
            cuts = np.flatnonzero(np.diff(self.docs.sent_pos[indices])) + 1
            return [
                b
                for group in np.split(indices, cuts)
                for b in self._pack_runs(group, max_tokens, max_sentences)
            ]
        if self.batching == "sentences":
            return self._pack_runs(indices, max_tokens, max_sentences, _SentenceBatchState,
                                   runs=[indices[i : i + 1] for i in range(len(indices))])
        if self.batching == "grouped-runs":
            return self._pack_runs(indices, max_tokens, max_sentences, _GroupedBatchState)
        return self._pack_runs(indices, max_tokens, max_sentences)

    def _pack_runs(self, indices, max_tokens, max_sentences, state_cls=None, runs=None) -> List[np.ndarray]:
        """Greedy packing of document runs (as ordered by :meth:`ordered_indices`) into
        batches of at most ``max_tokens`` tokens (``state_cls`` counts them; by default
        padded, context tables included) and ``max_sentences`` sentences. A run is split
        only if it cannot fit a batch alone."""
        max_tokens = max_tokens or float("inf")
        max_sentences = max_sentences or float("inf")
        state_cls = state_cls or _BatchState
        runs = self.doc_runs(indices) if runs is None else runs
        batches, cur, state = [], [], state_cls(self)

        def close():
            nonlocal cur, state
            batches.append(np.array(cur, dtype=np.int64))
            cur, state = [], state_cls(self)

        for run in runs:
            if cur and (len(cur) + len(run) > max_sentences or state.cost_with(run) > max_tokens):
                close()
            if len(run) > max_sentences or state.cost_with(run) > max_tokens:
                # the run alone is too big for a batch: add it sentence by sentence
                for i in run:
                    one = np.array([i], dtype=np.int64)
                    if cur and (len(cur) + 1 > max_sentences or state.cost_with(one) > max_tokens):
                        close()
                    state.add(one)
                    cur.append(int(i))
                continue
            state.add(run)
            cur.extend(int(i) for i in run)
        if cur:
            close()
        return batches


class _BatchState:
    """Rows a batch being packed holds, per side (current sentences plus their context
    where that side's context is used), and its padded cost."""

    def __init__(self, ds: DocumentPairDataset):
        self.ds = ds
        self.sides = [(ds.pair.src_sizes, ds.use_source, set(), [0])]
        if ds.pair.tgt_sizes is not None:
            self.sides.append((ds.pair.tgt_sizes, ds.use_target, set(), [0]))

    def _new_rows(self, run, use, held):
        rows = set(run.tolist())
        if use:
            prev = self.ds.context_rows(run)
            rows.update(prev[prev >= 0].tolist())
        return rows - held

    def cost_with(self, run) -> int:
        cost = 0
        for sizes, use, held, longest in self.sides:
            new = self._new_rows(run, use, held)
            longest_new = int(sizes[list(new)].max()) if new else 0
            cost = max(cost, (len(held) + len(new)) * max(longest[0], longest_new))
        return cost

    def add(self, run):
        for sizes, use, held, longest in self.sides:
            new = self._new_rows(run, use, held)
            if new:
                longest[0] = max(longest[0], int(sizes[list(new)].max()))
                held |= new


class _GroupedBatchState(_BatchState):
    """Rows a batch of runs holds, per side, counted at their real lengths
    (``batching="grouped-runs"``): the model runs its tables in length groups, whose
    padding (kept small by `data.length_groups`) is not counted. ``total`` (the last
    field of a side) is the sum of the held rows' lengths."""

    def cost_with(self, run) -> int:
        cost = 0
        for sizes, use, held, total in self.sides:
            new = self._new_rows(run, use, held)
            cost = max(cost, total[0] + (int(sizes[list(new)].sum()) if new else 0))
        return cost

    def add(self, run):
        for sizes, use, held, total in self.sides:
            new = self._new_rows(run, use, held)
            if new:
                total[0] += int(sizes[list(new)].sum())
                held |= new


class _SentenceBatchState:
    """Cost of a batch of sentences packed by length (``batching="sentences"``), per side:
    the current sentences padded as fairseq pads them (rows x longest) plus the real tokens
    of the context sentences that are not current sentences of the batch."""

    def __init__(self, ds: DocumentPairDataset):
        self.ds = ds
        self.sides = [[ds.pair.src_sizes, ds.use_source, set(), set(), 0, 0]]
        if ds.pair.tgt_sizes is not None:
            self.sides.append([ds.pair.tgt_sizes, ds.use_target, set(), set(), 0, 0])

    def _delta(self, run, side):
        sizes, use, cur, ctx, longest, ctx_sum = side
        new_cur = [int(i) for i in run if int(i) not in cur]
        longest = max([longest] + [int(sizes[i]) for i in new_cur])
        ctx_sum -= sum(int(sizes[i]) for i in new_cur if i in ctx)
        new_ctx = []
        if use:
            prev = self.ds.context_rows(run)
            new_ctx = [r for r in set(prev[prev >= 0].tolist()) if r not in ctx and r not in cur and r not in new_cur]
            ctx_sum += sum(int(sizes[r]) for r in new_ctx)
        return new_cur, new_ctx, longest, ctx_sum

    def cost_with(self, run) -> int:
        cost = 0
        for side in self.sides:
            new_cur, _, longest, ctx_sum = self._delta(run, side)
            cost = max(cost, (len(side[2]) + len(new_cur)) * longest + ctx_sum)
        return cost

    def add(self, run):
        for side in self.sides:
            new_cur, new_ctx, side[4], side[5] = self._delta(run, side)
            side[2].update(new_cur)
            side[3].update(new_ctx)


def _restore_dropped(batches, indices):
    """fairseq's ``batch_by_size`` silently drops a last batch whose size is not a multiple
    of ``--required-batch-size-multiple``; put those sentences back as a final batch."""
    batches = list(batches)
    n = sum(len(b) for b in batches)
    if n < len(indices):
        seen = np.concatenate(batches) if batches else np.zeros(0, np.int64)
        missing = indices[~np.isin(indices, seen)]
        batches.append(missing.astype(np.int64))
    return batches
