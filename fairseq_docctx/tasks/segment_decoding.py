"""Decoding segments (``--doc-mode segments``): one search per batch of segments, one
hypothesis list per source **sentence** back.

:class:`SegmentDecoding` gives a segment model the rules of the task's options (the sentence
count, the length windows of its output sentences, the key/value buffers; the models'
interface: :class:`~fairseq_docctx.models.segment_model.SegmentModel`), raises a segment's
length limit to the sum of its windows, checks every decoded segment against its source
(:func:`~fairseq_docctx.data.segments.misalignment`), decodes a misaligned one again sentence
by sentence, and counts both: over the task's lifetime (what the hub reports) and over the
split being decoded, whose line :func:`segment_run_line` is logged once its last segment is
decoded (recipes, ``docctx-generate`` and the benchmarks read it back:
:func:`parse_segment_run_line`).
"""
import contextlib
import logging
import re
from typing import Optional

import torch
from fairseq import utils
from fairseq.data import data_utils

from ..data import segments as seg
from ..errors import UsageError
from ..models import document_context as dc
from ..models.segment_model import SegmentModel
from .length_limits import row_limit

logger = logging.getLogger(__name__)

#: the batch key of the corpus indices of every row's sentences
#: (:class:`~fairseq_docctx.data.segments.SegmentPairDataset`)
SEGMENT_SENTENCES = "segment_sentences"
#: the line that reports the segments of a split decoded again sentence by sentence
#: (:func:`segment_run_line`)
SEGMENT_RUN_LINE = re.compile(r"(\d+) of (\d+) segments of the split decoded again sentence by sentence"
                              r"(?: \(misaligned: (\d+) sentence count, (\d+) empty sentence, "
                              r"(\d+) outside the length window\))?")


def fallback_line(fallbacks: int, total: int, reasons: dict, of: str = "") -> str:
    """``F of N segments[ of OF] decoded again sentence by sentence (misaligned: C sentence
    count, E empty sentence, W outside the length window)``: the segments whose best
    hypothesis was misaligned with the source, by reason
    (:func:`~fairseq_docctx.data.segments.misalignment`; a reason missing from ``reasons``
    counts 0), of N segments (``of``: of what, e.g. ``"the split"``)."""
    where = f" of {of}" if of else ""
    return (f"{fallbacks} of {total} segments{where} decoded again sentence by sentence (misaligned: "
            f"{reasons.get('count', 0)} sentence count, {reasons.get('empty', 0)} empty sentence, "
            f"{reasons.get('window', 0)} outside the length window)")


def segment_run_line(fallbacks: int, total: int, reasons: dict) -> str:
    """The line of a split: :func:`fallback_line` of its N segments."""
    return fallback_line(fallbacks, total, reasons, "the split")


def parse_segment_run_line(text: str) -> Optional[tuple]:
    """The last :func:`segment_run_line` in ``text``: ``(F, N, {reason: count})``, or ``None``."""
    found = SEGMENT_RUN_LINE.findall(text)
    if not found:
        return None
    f, n, *why = found[-1]
    return int(f), int(n), {k: int(v or 0) for k, v in zip(seg.MISALIGNMENTS, why)}


class SegmentDecoding:
    """The segment decoding of ``task`` (its ``cfg``, dictionaries and ``language_tokens``,
    read when asked), and its counts: :attr:`decoded` segments and the :attr:`fallbacks`
    among them decoded again sentence by sentence, :attr:`misaligned` by reason, over the
    task's lifetime."""

    def __init__(self, task):
        self.task = task
        self.decoded = 0
        self.fallbacks = 0
        self.misaligned = dict.fromkeys(seg.MISALIGNMENTS, 0)
        #: the same counts of the split being decoded (:meth:`start_run`), logged once its
        #: last segment is decoded
        self.run = None

    # ----------------------------------------------------------------- rules
    def length_window(self, min_len: int = 1) -> Optional[seg.LengthWindow]:
        """The length window of a segment model's output sentences (``--sentence-max-len-a``,
        ``--sentence-max-len-b``, ``min_len``: the generation's ``--min-len``); ``None`` with
        ``--no-sentence-length-window`` (a configuration without these options: the defaults)."""
        cfg = self.task.cfg
        if getattr(cfg, "no_sentence_length_window", False):
            return None
        a = getattr(cfg, "sentence_max_len_a", None)
        b = getattr(cfg, "sentence_max_len_b", None)
        return seg.LengthWindow(seg.SENTENCE_MAX_LEN_A if a is None else float(a),
                                seg.SENTENCE_MAX_LEN_B if b is None else int(b), int(min_len or 0))

    def set_rules(self, models, min_len: int = 1) -> None:
        """Give the segment models the decoding rules of the task's options: the sentence
        count (``--no-sentence-count-constraint`` turns it off), the length window of their
        output sentences (:meth:`length_window`, with the generation's ``min_len``) and the
        key/value buffers (``--fairseq-kv-cache``). The task's ``build_generator`` calls it; so
        does a generator built elsewhere (the CTranslate2 engine's, whose stand-in model
        carries the rules that :meth:`inference_step` checks after its search)."""
        cfg = self.task.cfg
        window = self.length_window(min_len)
        for m in models:
            if isinstance(m, SegmentModel):
                m.set_sentence_count_constraint(not getattr(cfg, "no_sentence_count_constraint", False))
                m.set_sentence_length_window(window)
                m.set_preallocated_kv_cache(not getattr(cfg, "fairseq_kv_cache", False))

    @staticmethod
    def decoding_window(models) -> Optional[seg.LengthWindow]:
        """The length window the models decode segments with (the segment models'
        ``sentence_length_window``, set by :meth:`set_rules`); ``None`` when one of them has
        none (off, or a model that is no segment model such as a ``transformer`` on segments)."""
        windows = [m.sentence_length_window if isinstance(m, SegmentModel) else None for m in models]
        return windows[0] if windows and all(w is not None and w == windows[0] for w in windows) else None

    @contextlib.contextmanager
    def length_limit(self, generator, src_tokens, window: Optional[seg.LengthWindow],
                     lengths: Optional[torch.Tensor] = None):
        """Within the block, fairseq's ``generator`` ends no hypothesis of the batch of segments
        ``src_tokens`` before the sum of the length windows of its sentences plus its
        separators: each row's own limit (``int(max_len_a * its tokens + max_len_b)``,
        :mod:`~fairseq_docctx.tasks.length_limits`) is raised to that sum where it is lower, and
        the generator's batch limit (from the batch's width) with it where the largest of them
        is above it (by raising ``max_len_b``; the model's positions still bound both).
        On data with language tokens each sentence's token counts beside its window.
        ``lengths``: the source sentences' lengths (:func:`~fairseq_docctx.data.segments.
        sentence_lengths` of ``src_tokens``), if computed. Nothing changes without a ``window``
        or for a generator without these limits. A generator that keeps each row's limit
        itself and offers ``at_least(floor)`` (the CTranslate2 engine's) gets the rows' raised
        limits through it, its ``max_len_b`` untouched."""
        b = getattr(generator, "max_len_b", None)
        a = getattr(generator, "max_len_a", None)
        if window is None or a is None or b is None or getattr(generator, "match_source_len", False):
            yield
            return
        rows = row_limit(generator)
        # a generator that keeps each row's limit itself (the CTranslate2 engine's): its rows
        # raised, nothing else (its max_len_b is every row's, not a batch limit)
        own_rows = getattr(generator, "at_least", None) if rows is None else None
        src_dict = self.task.src_dict
        pad, eos = src_dict.pad(), src_dict.eos()
        sep = src_dict.index(self.task.cfg.context_separator)
        if lengths is None:
            lengths = seg.sentence_lengths(src_tokens, sep, pad, eos, self.task.language_tokens.source())
        n = src_tokens.eq(sep).sum(1, keepdim=True) + 1
        real = torch.arange(lengths.size(1), device=lengths.device).unsqueeze(0) < n
        need = (window.bounds(lengths)[1] * real).sum(1) + n.squeeze(1) - 1  # [B]
        if self.task.language_tokens.target() is not None:  # and the language token starting every sentence
            need = need + n.squeeze(1)
        if own_rows is not None:
            with own_rows(need):
                yield
            return
        floor = rows.at_least(need) if rows is not None else contextlib.nullcontext()
        raise_by = max(int(need.max()) - int(a * src_tokens.size(1) + b), 0)
        generator.max_len_b = b + raise_by
        try:
            with floor:
                yield
        finally:
            generator.max_len_b = b

    # ---------------------------------------------------------------- counts
    def start_run(self, total: int) -> None:
        """Count the decoding of a split of ``total`` segments (:meth:`count`)."""
        self.run = {"total": int(total), "decoded": 0, "fallbacks": 0, **dict.fromkeys(seg.MISALIGNMENTS, 0)}

    def count(self, decoded: int, reasons: dict) -> None:
        """Add a batch's ``decoded`` segments and its misaligned ones by reason to the task's
        counts and to those of the split being decoded; once the split's last segment is
        decoded, log its line (:func:`segment_run_line`), N the split's segments (those of its
        batches)."""
        fallbacks = sum(reasons.values())
        self.decoded += decoded
        self.fallbacks += fallbacks
        for k, v in reasons.items():
            self.misaligned[k] += v
        run = self.run
        if run is None:
            return
        run["decoded"] += decoded
        run["fallbacks"] += fallbacks
        for k, v in reasons.items():
            run[k] += v
        if run["decoded"] >= run["total"]:
            logger.info(segment_run_line(run["fallbacks"], run["total"], {k: run[k] for k in seg.MISALIGNMENTS}))
            self.run = None

    # ------------------------------------------------------------ decoding
    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Decode a batch of segments and give back one hypothesis list per source sentence.

        Every row's hypotheses are split at the separator
        (:func:`~fairseq_docctx.data.segments.split_hypothesis`) and checked against the
        source sentences (:func:`~fairseq_docctx.data.segments.misalignment`): another number
        of sentences, an empty output sentence whose source sentence is not, or (when the
        model decoded with length windows, :meth:`length_window`) an output sentence outside
        its window. A row whose best hypothesis is aligned gives each sentence its piece of
        every aligned hypothesis (best first). A row whose best hypothesis is misaligned is
        decoded again sentence by sentence, each sentence a one-sentence segment (the
        per-segment fallback; a separator such a decoding emits is removed), and counted in
        :attr:`fallbacks` and :attr:`misaligned` (logged; the split's counts once its last
        segment is decoded, :meth:`count`).

        A segment's length limit (fairseq's ``--max-len-a``/``--max-len-b`` applied to the
        segment's own source tokens, :mod:`~fairseq_docctx.tasks.length_limits`) is, with
        length windows, raised where it is lower to the sum of the windows of its sentences
        and its separators (:meth:`length_limit`), so that it never ends a sentence before its
        window does; a sentence decoded again alone gets the limit of a one-sentence segment.

        The batch is then rewritten in place into the sentences, in the segments' order, so
        that fairseq-generate prints one S-/T-/H-/D- group per source sentence under its own
        corpus id: ``sample["id"]`` holds the sentence ids, ``net_input`` their source
        sentences (``src_tokens``, ``src_lengths``; ``prev_output_tokens`` when there are
        targets), ``target`` their target sentences, each ending in </s>, and
        ``segment_sentences`` one sentence per row."""
        self._refuse_options(generator, models, prefix_tokens, constraints)
        sample = dc.sample_for_model(sample, models)
        task = self.task
        src_sep = task.src_dict.index(task.cfg.context_separator)
        window = self.decoding_window(models)
        src_tokens = sample["net_input"]["src_tokens"]
        # [B, N]: every source sentence's own tokens (separators, </s>, language tokens not
        # counted), for the segments' limits and the checks of their output below
        lengths = seg.sentence_lengths(src_tokens, src_sep, task.src_dict.pad(), task.tgt_dict.eos(),
                                       task.language_tokens.source())
        with self.length_limit(generator, src_tokens, window, lengths):
            hypos = task.language_tokens.generate(generator, models, sample)
        groups = [g.tolist() for g in sample[SEGMENT_SENTENCES]]
        split = self._split_rows(sample, groups, hypos, lengths, window, float(getattr(generator, "len_penalty", 1.0)))
        per_sentence, sources, targets, source_lengths, reasons = split
        fallbacks = sum(reasons.values())
        if fallbacks:
            still_empty = self._decode_alone(generator, models, sample, per_sentence, sources, source_lengths, window)
            logger.info(fallback_line(fallbacks, len(groups), reasons, "the batch"))
            if still_empty:
                logger.warning(f"{still_empty} sentences decoded alone have an empty translation (their "
                               "source is not empty)")
        self.count(len(groups), reasons)
        self._rewrite_as_sentences(sample, [i for g in groups for i in g], sources, targets)
        return per_sentence

    @staticmethod
    def _refuse_options(generator, models, prefix_tokens, constraints) -> None:
        """Refuse what applies to a sentence, not to a segment (one line each)."""
        from fairseq.sequence_generator import SequenceGeneratorWithAlignment

        if prefix_tokens is not None or constraints is not None:
            # a segment model decodes segments only; another model can decode sentences
            advice = ("leave them out: a segment model decodes segments only" if any(dc.reads_segments(m) for m in models)
                      else "decode with --doc-mode sentences (and --context-override if the model was trained on "
                      "segments)")
            raise UsageError("--doc-mode segments: --prefix-size and --constraints apply to a "
                             f"sentence, not to a segment; {advice}")
        if isinstance(generator, SequenceGeneratorWithAlignment):
            raise UsageError("--doc-mode segments: --print-alignment is not supported (the "
                             "alignment of a segment is not split into its sentences)")

    def _split_rows(self, sample, groups, hypos, lengths_all, window, lenpen: float):
        """Every row's hypotheses split into its sentences and checked: ``(per_sentence,
        sources, targets, source_lengths, reasons)``, over the batch's sentences in order
        (``per_sentence[k]``: the hypotheses of sentence k, ``None`` for a sentence of a
        misaligned row), ``reasons`` the misaligned rows by reason."""
        tgt_dict = self.task.tgt_dict
        sep, eos, pad = tgt_dict.index(self.task.cfg.context_separator), tgt_dict.eos(), tgt_dict.pad()
        src_sep = self.task.src_dict.index(self.task.cfg.context_separator)
        tgt_start = self.task.language_tokens.target()  # None without language tokens
        ni, target = sample["net_input"], sample.get("target")
        bounds_all = window.bounds(lengths_all) if window is not None else None
        per_sentence, sources, targets, source_lengths = [], [], [], []
        reasons = dict.fromkeys(seg.MISALIGNMENTS, 0)
        for i, ids in enumerate(groups):
            src = seg.split_tokens(utils.strip_pad(ni["src_tokens"][i], pad), src_sep, eos)
            if len(src) != len(ids):
                raise RuntimeError(f"a segment of sentences {ids} has {len(src)} source sentences "
                                   "in its tokens: the batch is not in the segment format")
            sources.extend(src)
            if target is not None:
                targets.extend(seg.split_tokens(utils.strip_pad(target[i], pad), sep, eos))
            src_lengths = lengths_all[i, :len(ids)].tolist()
            source_lengths.extend(src_lengths)
            bounds = None if bounds_all is None else [b[i, :len(ids)].tolist() for b in bounds_all]
            split = [seg.split_hypothesis(h, sep, eos, len(ids), lenpen) for h in hypos[i]]
            why = [seg.misalignment(s, src_lengths, bounds, tgt_start) for s in split]
            if not split or why[0] is not None:  # decoded again, sentence by sentence
                reasons[why[0] if split else "count"] += 1
                per_sentence.extend([None] * len(ids))
            else:
                aligned = [s for s, w in zip(split, why) if w is None]
                per_sentence.extend([[s[k] for s in aligned] for k in range(len(ids))])
        return per_sentence, sources, targets, source_lengths, reasons

    def _decode_alone(self, generator, models, sample, per_sentence, sources, source_lengths, window) -> int:
        """The per-segment fallback: the sentences of the misaligned rows (``None`` in
        ``per_sentence``) decoded again, each a one-sentence segment, into ``per_sentence``;
        returns how many of them have an empty translation whose source is not empty."""
        task = self.task
        sep, eos, pad = (task.tgt_dict.index(task.cfg.context_separator), task.tgt_dict.eos(),
                         task.tgt_dict.pad())
        tgt_start = task.language_tokens.target()
        todo = [k for k, h in enumerate(per_sentence) if h is None]
        sub_src = [sources[k] for k in todo]
        sub_tokens = data_utils.collate_tokens(sub_src, pad, eos, left_pad=task.cfg.left_pad_source)
        sub = {
            "id": torch.tensor(todo, device=sample["id"].device), "nsentences": len(todo),
            "net_input": {
                "src_tokens": sub_tokens,
                "src_lengths": torch.tensor([t.numel() for t in sub_src], device=sample["id"].device),
            },
        }
        with self.length_limit(generator, sub_tokens, window):
            sub_hypos = task.language_tokens.generate(generator, models, sub)
        still_empty = 0
        for k, h in zip(todo, sub_hypos):
            per_sentence[k] = [seg.without_separators(x, sep) for x in h]
            still_empty += (seg.sentence_length(per_sentence[k][0]["tokens"], tgt_start) == 0
                            and source_lengths[k] > 0)
        return still_empty

    def _rewrite_as_sentences(self, sample, ids, sources, targets) -> None:
        """Turn a decoded batch of segments into the batch of its sentences (in place)."""
        task = self.task
        pad, eos = task.tgt_dict.pad(), task.tgt_dict.eos()
        device = sample["id"].device
        ni = sample["net_input"]
        sample["id"] = torch.tensor(ids, dtype=torch.long, device=device)
        sample["nsentences"] = len(ids)
        ni["src_tokens"] = data_utils.collate_tokens(sources, pad, eos, left_pad=task.cfg.left_pad_source)
        ni["src_lengths"] = torch.tensor([t.numel() for t in sources], dtype=torch.long, device=device)
        ni.pop("prev_output_tokens", None)
        if sample.get("target") is not None:
            sample["target"] = data_utils.collate_tokens(targets, pad, eos, left_pad=task.cfg.left_pad_target)
            ni["prev_output_tokens"] = data_utils.collate_tokens(
                targets, pad, eos, left_pad=task.cfg.left_pad_target, move_eos_to_beginning=True)
            sample["ntokens"] = sum(t.numel() for t in targets)
        sample[SEGMENT_SENTENCES] = [torch.tensor([i], dtype=torch.long) for i in ids]
