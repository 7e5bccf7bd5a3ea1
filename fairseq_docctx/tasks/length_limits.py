"""Every row's length limit from its own source, whatever else is in its batch.

fairseq's ``SequenceGenerator`` takes one length limit for a whole batch from the batch's
padded source width: ``min(int(max_len_a * width + max_len_b), max_len - 1)`` target tokens
(``--max-len-a``, ``--max-len-b``; ``max_len`` the decoder's positions), at which it forces
``</s>``. A short sentence beside a long one may then run on to the long one's limit, so its
translation changes with what it is batched with (``--batch-size``, ``--max-tokens``, the
documents of a process or shard). :class:`RowLengthLimit` wraps the generator's search
strategy and forces ``</s>`` for each row once the step reaches the row's *own* limit, the
same formula applied to the row's own source length (its ``src_lengths``, ``</s>``
included, which is the width the row has when it is decoded alone). fairseq's batch limit is
never below a row's own limit, so fairseq still ends every row there; a row decoded alone
gets exactly fairseq's result, and in any batch the same result (up to floating-point
differences of the batched model computation).

A row's own source is the sentence being translated: context models take their context
apart from ``src_tokens`` (tables beside the batch, concatenated inside the model), so a
context model's limits are those of the sentence-level model on the same sentence. A segment
model's row is a segment (its sentences joined by the separator); its limit can be raised
per row (:meth:`RowLengthLimit.at_least`, the sum of its sentences' length windows).

:func:`limit_each_row` installs the wrapper on a generator; the task's ``build_generator``
calls it, so ``fairseq-generate``, ``docctx-generate``, ``docctx-translate``, the hub and
the draft translator all decode with per-row limits. Every search strategy of fairseq is
wrapped the same way (the wrapper masks the log-probabilities the strategy gets; fairseq's
diverse beam search also gets the rows' positions in the batch, by which it keeps its
state); ``--sampling`` still draws its random tokens batch by batch, so its translations
depend on the batch whatever the limits. A forced prefix (``--prefix-size``) longer than its
row's limit is refused (:func:`check_prefix`).

A sample longer than the model's positions at all is refused before any batch by the task
(fairseq's ``--skip-invalid-size-inputs-valid-test`` leaves it out instead):
:func:`too_long_message` is the one line that names it.
"""
import math
import os
from typing import Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.search import DiverseBeamSearch, Search
from torch import Tensor


class RowLengthLimit(Search):
    """fairseq's search strategy ``inner``, with ``</s>`` forced for each row from its own
    length limit on.

    The limit of a row of ``n`` source tokens (``src_lengths``) is ``min(int(max_len_a * n +
    max_len_b), max_len - 1)``, or ``n`` with ``match_source_len``, computed in float64 as
    Python computes fairseq's batch limit; :meth:`at_least` raises it for the batches of a
    block. The generator hands the search the rows' source lengths before every step
    (``needs_src_lengths``) and the rows it keeps (:meth:`prune_sentences`); the limits are
    computed when a batch starts (:meth:`init_constraints`, which fairseq calls once per
    batch) and pruned with the rows."""

    def __init__(self, inner: Search, max_len_a: float, max_len_b: int, max_len: int, min_len: int = 1,
                 match_source_len: bool = False):
        torch.nn.Module.__init__(self)
        self.inner = inner
        self.pad, self.unk, self.eos, self.vocab_size = inner.pad, inner.unk, inner.eos, inner.vocab_size
        self.src_lengths = inner.src_lengths
        self.supports_constraints = inner.supports_constraints
        self.stop_on_max_len = inner.stop_on_max_len
        self.needs_src_lengths = True
        self.max_len_a, self.max_len_b = float(max_len_a), int(max_len_b)
        self.max_len, self.min_len = int(max_len), int(min_len)
        self.match_source_len = bool(match_source_len)
        #: the limits of the rows still in the batch (``None`` until the batch's first step)
        self.limits: Optional[Tensor] = None
        #: the positions the rows still in the batch had when it started
        self.rows: Optional[Tensor] = None
        #: fairseq's diverse beam search keeps its state by the rows' positions in the batch as
        #: it started but reads it by ``original_batch_idxs``, the sentence ids: it gets the
        #: positions (:meth:`step`)
        self.by_position = isinstance(inner, DiverseBeamSearch)
        self.floor: Optional[Tensor] = None

    def own_limits(self, src_lengths: Tensor) -> Tensor:
        """``[B]``: the limit of each row of ``src_lengths`` source tokens (``</s>`` included)."""
        if self.match_source_len:
            return src_lengths.long()
        own = torch.floor(src_lengths.double() * self.max_len_a + self.max_len_b).long()
        return own.clamp(max=self.max_len - 1)

    def at_least(self, floor: Optional[Tensor]):
        """Within the block, each row of the batch decoded there (one ``generate`` call) ends
        no earlier than ``floor`` ``[B]`` (row i of the batch: ``floor[i]``; still at most the
        decoder's positions). The generator's own batch limit must allow it (the caller
        raises it). ``None``: nothing changes."""
        return _Floor(self, floor)

    # ------------------------------------------------------------ fairseq's search interface
    def init_constraints(self, batch_constraints: Optional[Tensor], beam_size: int):
        self.limits = None
        self.inner.init_constraints(batch_constraints, beam_size)

    def set_src_lengths(self, src_lengths):
        if self.limits is None:
            limits = self.own_limits(src_lengths)
            if self.floor is not None:
                if self.floor.numel() != limits.numel():
                    raise RuntimeError(f"length limits raised for {self.floor.numel()} rows, the batch has "
                                       f"{limits.numel()}")
                limits = torch.maximum(limits, self.floor.to(limits)).clamp(max=self.max_len - 1)
            short = limits < self.min_len
            if bool(short.any()):
                n = int(src_lengths[short.nonzero()[0, 0]])
                raise ValueError(
                    f"--min-len {self.min_len} is above the length limit of a sentence of {n} source tokens "
                    f"(int({self.max_len_a:g} * {n} + {self.max_len_b}) = {int(limits[short][0])}, "
                    "--max-len-a * tokens + --max-len-b): lower --min-len or raise --max-len-a/--max-len-b")
            self.limits = limits
            self.rows = torch.arange(limits.numel(), device=limits.device)
        if getattr(self.inner, "needs_src_lengths", False):
            self.inner.set_src_lengths(src_lengths)
        self.src_lengths = src_lengths

    def prune_sentences(self, batch_idxs: Tensor):
        if self.limits is not None:
            self.limits, self.rows = self.limits[batch_idxs], self.rows[batch_idxs]
        self.inner.prune_sentences(batch_idxs)

    def update_constraints(self, active_hypos: Tensor):
        self.inner.update_constraints(active_hypos)

    def step(self, step: int, lprobs, scores: Optional[Tensor], prev_output_tokens: Optional[Tensor] = None,
             original_batch_idxs: Optional[Tensor] = None):
        """``lprobs`` ``[B, beam, V]`` with every token but ``</s>`` at -inf in the rows whose
        limit ``step`` has reached (fairseq's own rule at its batch limit), then ``inner``'s
        step (a diverse beam search gets the rows' positions in the batch as it started for
        ``original_batch_idxs``: it indexes its per-row state, made in batch order, with them;
        with the sentence ids it mixes the rows of a batch, or fails on an id past the batch
        size)."""
        if self.limits is None:
            raise RuntimeError("RowLengthLimit: no source lengths for this batch (the generator must "
                               "call set_src_lengths: its should_set_src_lengths is off)")
        if self.limits.numel() != lprobs.size(0):
            raise RuntimeError(f"RowLengthLimit: limits of {self.limits.numel()} rows, a step of {lprobs.size(0)}")
        ended = self.limits.to(lprobs.device) <= step
        if bool(ended.any()):
            not_eos = torch.ones(lprobs.size(-1), dtype=torch.bool, device=lprobs.device)
            not_eos[self.eos] = False
            lprobs = lprobs.masked_fill(ended.view(-1, 1, 1) & not_eos.view(1, 1, -1), -math.inf)
        if self.by_position:
            original_batch_idxs = self.rows.to(lprobs.device)
        return self.inner.step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)


class _Floor:
    def __init__(self, search: RowLengthLimit, floor: Optional[Tensor]):
        self.search, self.floor = search, floor

    def __enter__(self):
        self.before = self.search.floor
        self.search.floor = None if self.floor is None else self.floor.long()
        return self.search

    def __exit__(self, *exc):
        self.search.floor = self.before
        return False


def limit_each_row(generator):
    """``generator`` (fairseq's ``SequenceGenerator`` or a subclass) with its search wrapped
    in :class:`RowLengthLimit` (its ``max_len_a``, ``max_len_b``, ``max_len``, ``min_len``
    and ``match_source_len`` as they are now), so that each row's limit comes from its own
    source length; a generator without a search (fairseq's ``SequenceScorer`` of
    ``--score-reference``) or already wrapped is returned as it is."""
    search = getattr(generator, "search", None)
    if not isinstance(search, Search) or isinstance(search, RowLengthLimit):
        return generator
    generator.search = RowLengthLimit(search, generator.max_len_a, generator.max_len_b, generator.max_len,
                                      generator.min_len, getattr(generator, "match_source_len", False))
    generator.should_set_src_lengths = True
    return generator


def row_limit(generator) -> Optional[RowLengthLimit]:
    """The :class:`RowLengthLimit` of ``generator`` (``None`` when it has none)."""
    search = getattr(generator, "search", None)
    return search if isinstance(search, RowLengthLimit) else None


#: fairseq's option that leaves out the samples longer than the model's positions
SKIP_OPTION = "--skip-invalid-size-inputs-valid-test"


def check_prefix(generator, sample, prefix_tokens, pad: int) -> None:
    """Refuse a prefix (``--prefix-size``; ``pad``: the target dictionary's padding) longer
    than its sentence's own length limit: fairseq stops forcing a prefix at the batch's limit,
    which a row's own limit may be below."""
    rows = row_limit(generator)
    if rows is None or prefix_tokens is None:
        return
    own = rows.own_limits(sample["net_input"]["src_lengths"]).to(prefix_tokens.device)
    prefix = prefix_tokens.ne(pad).sum(1)
    over = (prefix > own).nonzero()
    if over.numel():
        i = int(over[0, 0])
        raise ValueError(f"--prefix-size: the prefix of sentence {int(sample['id'][i])} has {int(prefix[i])} "
                         f"tokens, more than its length limit of {int(own[i])} (--max-len-a * source tokens "
                         "+ --max-len-b): raise the limit or shorten the prefix")


def too_long_message(split: str, item: str, sizes: Sequence[Optional[int]], max_positions,
                     files: Sequence[Optional[str]], others: Sequence[int] = (), segment: bool = False) -> str:
    """The one line of a sample of ``split`` longer than the model's positions: ``item`` says
    which (``sentence 3 (document 'd1', its sentence 4)``), ``sizes`` its (source, target)
    tokens (``</s>`` included, as fairseq counts them; target ``None`` without references),
    ``max_positions`` fairseq's (an int, or (source, target)), ``files`` the binarized files
    of the two sides, ``others`` the ids of the other samples of the split that are too long
    (the first ten named). The advice:
    fairseq's option that leaves them out, and for a source too long fairseq's
    ``--truncate-source`` (which cuts every source sentence, those of the context with them,
    to ``--max-source-positions``), or for a ``segment`` (``--doc-mode segments``) smaller
    segments."""
    limits = (max_positions, max_positions) if isinstance(max_positions, (int, float)) else tuple(max_positions)
    over = []
    for side, n, limit, path in zip(("source", "target"), sizes, limits, files):
        if n is not None and limit is not None and n > limit:
            where = f" ({path})" if path else ""
            what = "its source" if side == "source" else "its reference"
            over.append(f"{what}{where} has {int(n):,} tokens, more than the model's {int(limit):,} {side} positions")
    more = ""
    if len(others):
        shown = ", ".join(map(str, others[:10])) + (", ..." if len(others) > 10 else "")
        more = f" ({len(others):,} more of {split} are too long: {shown})"
    fix = "shorten or split it"
    if segment:
        fix += ", pack smaller segments (--max-segment-tokens below the model's positions, with --context-override)"
    elif sizes[0] is not None and limits[0] is not None and sizes[0] > limits[0]:
        fix += f", cut the sources with --truncate-source --max-source-positions {int(limits[0])}"
    # the option last: docctx-generate adds what it does with the sentences left out
    return f"{split}: {item}: {'; '.join(over)}{more}: {fix}, or leave it out with {SKIP_OPTION}"


def binarized_files(data_path: str, split: str, src: str, tgt: str) -> Tuple[Optional[str], Optional[str]]:
    """The binarized source and target files of ``split`` (``SPLIT.SRC-TGT.SRC``, or the pair's
    other order, as fairseq's ``load_langpair_dataset`` finds them; ``None`` for a side that
    has none)."""
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data_path, f"{split}.{a}-{b}.")
        if os.path.exists(prefix + src + ".idx"):
            return (prefix + src, prefix + tgt if os.path.exists(prefix + tgt + ".idx") else None)
    return (None, None)


def sample_too_long_message(split: str, dataset, index: int, max_positions, files, docs=None, others=()) -> str:
    """:func:`too_long_message` of sample ``index`` of ``dataset`` (a split of the
    ``document_translation`` task: sentences, or segments of them), named by its sentence's
    document and place there (``docs``: the split's document index) and its binarized
    ``files``; ``others``: the other samples too long."""
    from ..data import segments as seg

    size = dataset.size(index)
    sizes = tuple(size) if isinstance(size, (tuple, list, np.ndarray)) else (size, None)
    segment = isinstance(dataset, seg.SegmentPairDataset)
    first = int(dataset.plan.sentences(index)[0]) if segment else index
    doc = ""
    if docs is not None and first < docs.num_sentences:
        d, pos = int(docs.sent_doc[first]), int(docs.sent_pos[first]) + 1
        doc = f"document {docs.doc_ids[d]!r}, {'from ' if segment else ''}its sentence {pos}"
    if segment:
        ids = dataset.plan.sentences(index)
        item = f"segment {index} (sentences {ids[0]}-{ids[-1]}{' of ' + doc if doc else ''})"
    else:
        item = f"sentence {index}{f' ({doc})' if doc else ''}"
    return too_long_message(split, item, sizes[:2], max_positions, files, others, segment)


def split_too_long_message(split: Optional[str], dataset, ignored, max_positions, files, docs=None) -> str:
    """:func:`sample_too_long_message` of the first sample of ``split`` in corpus order among
    the ``ignored`` ones (those longer than ``max_positions``), the others named after it."""
    ignored = sorted(int(i) for i in ignored)
    return sample_too_long_message(split or "the split", dataset, ignored[0], max_positions, files, docs, ignored[1:])
