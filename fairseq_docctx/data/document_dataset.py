"""Document-batched parallel dataset.

:class:`DocumentPairDataset` wraps fairseq's :class:`~fairseq.data.LanguagePairDataset` (one
item per sentence pair, in corpus order) and a :class:`~fairseq_docctx.data.doc_index.DocIndex`.
Every collated batch is what ``LanguagePairDataset`` produces, plus
``net_input["context"]`` with the K previous sentences of every sentence of the batch, on
each side of ``--context-sides``: per side a table of the batch's *unique* sentences and
per-row index maps, as :mod:`fairseq_docctx.data.context_batch` describes (the only module
that knows that layout). The ``tgt`` side is there when the split has references; in
document-order inference the task replaces it with the model's own translations.

Context never crosses a document boundary; a document's first sentence has an all ``-1``
row (masked, not filled with other text).

Context-only sentences (marked in the document index: pairs ``docctx-prepare``'s training
filters removed from the targets) are context like any sentence, so the previous sentences
of every sentence are those of the input document, but they are never a sample of a batch
(training or validation) — except in document-order inference, which translates them: their
translations are the next sentences' target context. A context sentence longer than the
model allows (the ``max_positions`` the task passes, :meth:`set_context_max_positions`) is
cut to its last tokens, so a long context-only sentence cannot overrun a model's positions.

With ``position_major`` (document-order inference) batch ``t`` holds sentence ``t`` of many
documents, so every sentence comes after the sentences it takes context from.

Training batching (:meth:`batch_by_size`) keeps *runs* of consecutive sentences of a document
together, so that sentence ``j`` is usually both a current sentence and the context of
``j+1 .. j+K`` in the same batch and is encoded once. Runs are re-drawn and shuffled every
epoch. ``--max-tokens`` counts the padded tokens of the tables a batch really holds (or, with
the other batchings, real tokens; context tokens weighted by ``context_token_cost``). No
sentence is ever dropped by batching, whatever ``--required-batch-size-multiple`` says.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from . import context_batch as cb
from . import context_variants as cv
from .doc_index import DocIndex

logger = logging.getLogger(__name__)

BATCHINGS = ("runs", "grouped-runs", "sentences")


class DocumentPairDataset(FairseqDataset):
    """A :class:`LanguagePairDataset` that knows its documents.

    Args:
        pair: the sentence-level dataset (items in corpus order).
        doc_index: documents of the split (its sentence count must equal ``len(pair)``).
        context_size: K, the number of previous sentences given as context.
        context_sides: the sides of the context (``--context-sides``: ``source``,
            ``target``, ``both``, ``none`` or a comma-separated set of declared side names,
            e.g. ``src,tgt``).
        shuffle: shuffle document runs every epoch (training).
        run_length: maximum number of consecutive sentences of a document kept together.
        side_data: the sentences of declared sides that are not in ``pair`` (name ->
            indexable of token tensors with a ``sizes`` array), e.g. drafts.

    Batching (:meth:`set_doc_batching`, by the task from ``--doc-batching`` and the model):
    ``"runs"`` (default) packs runs of consecutive sentences so that each shared context
    sentence sits once in a batch's table; ``"sentences"`` orders and packs sentences by
    length like fairseq's ``LanguagePairDataset``, each batch with the context of its
    sentences (little padding of the current sentences; for models that only embed their
    context); ``"grouped-runs"`` packs runs like ``"runs"`` but counts every row of a
    batch's tables at its real length (for models that run their tables in groups of similar
    length, `data.length_groups`, and so hold little padding). ``context_token_cost``: what
    one token of a context-only sentence counts toward ``--max-tokens`` with the
    ``"sentences"`` batching, relative to a token of a current sentence (the model's
    declaration, e.g. QCN's, whose context words are only embedded).
    """

    def __init__(
        self,
        pair,
        doc_index: DocIndex,
        context_size: int = 3,
        context_sides="source",
        shuffle: bool = True,
        run_length: int = 16,
        position_major: bool = False,
        side_data: Optional[Dict[str, object]] = None,
    ):
        if doc_index.num_sentences != len(pair):
            raise ValueError(
                f"the document index covers {doc_index.num_sentences} sentences but the "
                f"binarized data has {len(pair)}"
            )
        if context_size < 0:
            raise ValueError("context_size must be >= 0")
        if run_length < 1:
            raise ValueError("run_length must be >= 1")
        self.pair = pair
        self.docs = doc_index
        self.context_size = context_size
        #: the sides of the context (names of declared sides)
        self.sides = cb.parse_sides(context_sides) if context_size > 0 else ()
        self.side_data = dict(side_data or {})
        self.shuffle = shuffle
        self.run_length = run_length
        #: document order for inference: batch t holds sentence t of many documents
        self.position_major = position_major
        if self.use_target and pair.tgt is None and not position_major:
            logger.warning(
                "no references in this split: target context can only come from the "
                "model's own translations (document-order inference)"
            )
        self.epoch = 1
        self.doc_batching = "runs"
        self.context_token_cost = 1.0
        #: the longest context sentence per dictionary ("source", "target"); None = any
        self.context_limits: Dict[str, Optional[int]] = {"source": None, "target": None}
        self._limited_sizes: Dict[str, np.ndarray] = {}
        #: --validate-cxmi: the seed of the random contexts collated with every batch
        #: (:meth:`set_context_variants`); None: no context variants
        self.variant_seed: Optional[int] = None
        self._random_context = None

    @property
    def context_sides(self) -> str:
        return cb.format_sides(self.sides)

    @property
    def use_source(self) -> bool:
        return "src" in self.sides

    @property
    def use_target(self) -> bool:
        return "tgt" in self.sides

    def set_doc_batching(self, doc_batching: str, context_token_cost: float = 1.0):
        """How :meth:`batch_by_size` packs (see the class doc)."""
        if doc_batching not in BATCHINGS:
            raise ValueError(f"doc_batching must be one of {BATCHINGS}")
        self.doc_batching = doc_batching
        self.context_token_cost = float(context_token_cost)

    def set_context_max_positions(self, max_positions):
        """Cut context sentences to the model's limits: ``max_positions`` as fairseq resolves
        it for the task and the model (an int for both sides, a (source, target) pair, or
        ``None``: no limit). A table row that is not a sentence of the batch and is longer
        than its dictionary's limit keeps its last ``limit`` tokens (the end nearest the next
        sentence, EOS included); the batch's own sentences are never cut (fairseq keeps
        longer ones out of the batches). Batching counts the rows at their cut length."""
        if isinstance(max_positions, (tuple, list)) and len(max_positions) == 2:
            src, tgt = max_positions
        elif isinstance(max_positions, (int, np.integer)):
            src = tgt = max_positions
        else:  # None, or a shape this dataset does not know (e.g. per language pair)
            src = tgt = None
        limits = {"source": None if src is None else int(src), "target": None if tgt is None else int(tgt)}
        if limits != self.context_limits:
            self.context_limits = limits
            self._limited_sizes = {}

    def context_sizes(self, side: str, sizes: np.ndarray) -> np.ndarray:
        """``sizes``, the lengths of the sentences of ``side``, as a batch's table of that
        side holds them: at most the context limit of its dictionary
        (:meth:`set_context_max_positions`); computed once per side and limit."""
        limit = self.context_limits.get(cb.get_side(side).dictionary)
        if limit is None:
            return sizes
        if side not in self._limited_sizes:
            self._limited_sizes[side] = np.minimum(sizes, limit)
        return self._limited_sizes[side]

    def _side_sentences(self, side: str):
        """``(getter(i) -> token tensor, sizes)`` of a side's sentences, ``None`` if this
        split has none (e.g. no references)."""
        spec = cb.get_side(side)
        if spec.item_key == "source":
            return (lambda i: self.pair.src[i]), self.pair.src_sizes
        if spec.item_key == "target":
            if self.pair.tgt is None:
                return None
            return (lambda i: self.pair.tgt[i]), self.pair.tgt_sizes
        data = self.side_data.get(side)
        if data is None:
            return None
        return (lambda i: data[i]), np.asarray(data.sizes)

    # ------------------------------------------------------------------ basics
    @property
    def has_context(self) -> bool:
        return bool(self.sides)

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

    def _table(self, ids: np.ndarray, prev: np.ndarray, side: str):
        """Unique-sentence table of one side: tokens, lengths, index map, self map."""
        getter, _ = self._side_sentences(side)
        spec = cb.get_side(side)
        left_pad = self.pair.left_pad_source if spec.left_pad is None else spec.left_pad
        pad = (self.pair.src_dict if spec.dictionary == "source" else self.pair.tgt_dict).pad()
        rows = np.unique(np.concatenate([ids, prev[prev >= 0]]))
        items = [getter(int(i)) for i in rows]
        limit = self.context_limits.get(spec.dictionary)
        if limit is not None:  # context sentences longer than the model allows: their end
            current = np.isin(rows, ids)
            items = [t if cur or t.numel() <= limit else t[-limit:] for t, cur in zip(items, current.tolist())]
        tokens = data_utils.collate_tokens(items, pad, self.pair.eos, left_pad=left_pad)
        lengths = torch.LongTensor([t.numel() for t in items])
        pos = np.searchsorted(rows, np.maximum(prev, 0))
        index = np.where(prev >= 0, pos, -1)
        return (tokens, lengths, torch.from_numpy(index.astype(np.int64)),
                torch.from_numpy(np.searchsorted(rows, ids).astype(np.int64)))

    def collate_context(self, ids, prev: Optional[np.ndarray] = None) -> dict:
        """The context of the batch rows ``ids`` (corpus indices): their previous sentences,
        or those of ``prev [len(ids), K]`` (corpus indices, ``-1`` = none; e.g. a
        :mod:`~.context_variants` row set)."""
        ids = np.asarray(ids, dtype=np.int64)
        prev = self.context_rows(ids) if prev is None else np.asarray(prev, dtype=np.int64)
        # corpus ids of the context sentences: inference fills target context from them
        ctx = cb.new_context(torch.from_numpy(prev))
        for side in self.sides:
            if self._side_sentences(side) is not None:
                cb.add_table(ctx, side, *self._table(ids, prev, side))
        return ctx

    def set_context_variants(self, seed: Optional[int]):
        """Collate with every batch its context variants (``--validate-cxmi``): the rows'
        contexts of no context and of a random document's context drawn with ``seed``
        (:mod:`~.context_variants`); ``None``: none (the default)."""
        self.variant_seed = seed
        self._random_context = None if seed is None else cv.RandomContext(self.docs.lengths, seed)

    def collate_variants(self, ids) -> dict:
        """``{name: context}`` of the rows ``ids``: no context (``none``) and a random
        document's context (``random``) in the layout of :meth:`collate_context`, with as many
        sentences as each row's true context."""
        ids = np.asarray(ids, dtype=np.int64)
        n = (self.context_rows(ids) >= 0).sum(axis=1)
        return {cv.NONE: self.collate_context(ids, cv.no_context_rows(len(ids), self.context_size)),
                cv.RANDOM: self.collate_context(ids, self._random_context.rows(ids, n, self.context_size))}

    def collater(self, samples, pad_to_length=None):
        res = self.pair.collater(samples, pad_to_length=pad_to_length)
        if self.has_context and len(samples) > 0:
            ids = res["id"].numpy()
            res = cb.with_context(res, self.collate_context(ids))
            if self._random_context is not None:
                cb.with_variants(res, self.collate_variants(ids))
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

    def samples(self, indices: np.ndarray) -> np.ndarray:
        """``indices`` (in their order) without the context-only sentences, which are never a
        sample; in document-order inference all of them (a context-only sentence is
        translated there: its translation is the next sentences' target context)."""
        marked = self.docs.context_only
        if self.position_major or not marked.any():
            return indices
        return indices[~marked[indices]]

    def ordered_indices(self):
        """Sentence-level data: fairseq's order. With context: document runs, shuffled
        (training) and grouped by length so that batches pad little; the runs stay in
        corpus order inside. Context-only sentences are left out (:meth:`samples`)."""
        if not self.has_context:
            return self.samples(self.pair.ordered_indices())
        if self.position_major:  # by position in the document, then by length
            return np.lexsort((self.pair.num_tokens_vec(np.arange(len(self))), self.docs.sent_pos))
        if self.doc_batching == "sentences":  # fairseq's order: shuffled, then by length
            return self.samples(self.pair.ordered_indices())
        runs = self.doc_runs(self.samples(np.arange(len(self), dtype=np.int64)))
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
        if self.doc_batching == "sentences":
            return self._pack_runs(indices, max_tokens, max_sentences, _SentenceBatchState,
                                   runs=[indices[i : i + 1] for i in range(len(indices))])
        if self.doc_batching == "grouped-runs":
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


@dataclass
class _Table:
    """One table a batch being packed holds: the rows (corpus indices) of one side's
    sentences. ``sizes``: every sentence's length; ``with_context``: the table holds the
    context sentences too (that side is context), not only the current sentences."""

    sizes: np.ndarray
    with_context: bool
    rows: Set[int] = field(default_factory=set)
    #: the longest row held (padded counting) or the sum of the rows' lengths (real counting)
    longest: int = 0
    total: int = 0
    #: ``"sentences"`` batching: the current sentences, and the context-only rows
    current: Set[int] = field(default_factory=set)
    context_only: Set[int] = field(default_factory=set)
    context_total: int = 0


def _tables(ds: "DocumentPairDataset") -> List[_Table]:
    """The tables of a batch of ``ds``: the source and target sentences (current sentences,
    plus context on the sides that are context), and every other context side."""
    tables = [_Table(ds.context_sizes("src", ds.pair.src_sizes), ds.use_source)]
    if ds.pair.tgt_sizes is not None:
        tables.append(_Table(ds.context_sizes("tgt", ds.pair.tgt_sizes), ds.use_target))
    for side in ds.sides:
        if cb.get_side(side).item_key is None:
            found = ds._side_sentences(side)
            if found is not None:
                tables.append(_Table(ds.context_sizes(side, np.asarray(found[1])), True))
    return tables


class _BatchState:
    """The tables a batch being packed holds, and its padded cost (``doc_batching="runs"``):
    per table, rows x longest row; the batch costs its most expensive table."""

    def __init__(self, ds: DocumentPairDataset):
        self.ds = ds
        self.tables = _tables(ds)

    def _new_rows(self, run, table: _Table) -> Set[int]:
        rows = set(run.tolist())
        if table.with_context:
            prev = self.ds.context_rows(run)
            rows.update(prev[prev >= 0].tolist())
        return rows - table.rows

    def _table_cost(self, table: _Table, new: Set[int]) -> int:
        longest_new = int(table.sizes[list(new)].max()) if new else 0
        return (len(table.rows) + len(new)) * max(table.longest, longest_new)

    def _add_to_table(self, table: _Table, new: Set[int]):
        table.longest = max(table.longest, int(table.sizes[list(new)].max()))

    def cost_with(self, run) -> int:
        return max(self._table_cost(t, self._new_rows(run, t)) for t in self.tables)

    def add(self, run):
        for t in self.tables:
            new = self._new_rows(run, t)
            if new:
                self._add_to_table(t, new)
                t.rows |= new


class _GroupedBatchState(_BatchState):
    """The tables of a batch of runs counted at their real lengths
    (``doc_batching="grouped-runs"``): the model runs its tables in length groups, whose
    padding (kept small by `data.length_groups`) is not counted."""

    def _table_cost(self, table: _Table, new: Set[int]) -> int:
        return table.total + (int(table.sizes[list(new)].sum()) if new else 0)

    def _add_to_table(self, table: _Table, new: Set[int]):
        table.total += int(table.sizes[list(new)].sum())


class _SentenceBatchState:
    """Cost of a batch of sentences packed by length (``doc_batching="sentences"``), per table:
    the current sentences padded as fairseq pads them (rows x longest) plus the real tokens
    of the context sentences that are not current sentences of the batch, each counted at
    ``context_token_cost``."""

    def __init__(self, ds: DocumentPairDataset):
        self.ds = ds
        self.tables = _tables(ds)

    def _delta(self, run, t: _Table):
        """The run's new current rows and context-only rows, and the table's longest current
        row and context-only total with them."""
        sizes = t.sizes
        new_cur = [int(i) for i in run if int(i) not in t.current]
        longest = max([t.longest] + [int(sizes[i]) for i in new_cur])
        context_total = t.context_total - sum(int(sizes[i]) for i in new_cur if i in t.context_only)
        new_ctx = []
        if t.with_context:
            prev = self.ds.context_rows(run)
            new_ctx = [r for r in set(prev[prev >= 0].tolist())
                       if r not in t.context_only and r not in t.current and r not in new_cur]
            context_total += sum(int(sizes[r]) for r in new_ctx)
        return new_cur, new_ctx, longest, context_total

    def cost_with(self, run) -> float:
        cost = 0
        for t in self.tables:
            new_cur, _, longest, context_total = self._delta(run, t)
            cost = max(cost, (len(t.current) + len(new_cur)) * longest
                       + self.ds.context_token_cost * context_total)
        return cost

    def add(self, run):
        for t in self.tables:
            new_cur, new_ctx, t.longest, t.context_total = self._delta(run, t)
            t.current.update(new_cur)
            t.context_only.difference_update(new_cur)
            t.context_only.update(new_ctx)


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
