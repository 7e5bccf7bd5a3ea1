"""Document segments: consecutive sentences of one document translated as one sequence.

Document-to-document translation (doc2doc; Sun et al. 2022, "Rethinking Document-level
Neural Machine Translation", Findings of ACL, §3; G-Transformer, Bao et al. 2021, §2) reads
and writes several consecutive sentences at once. A *segment* is n >= 1 consecutive
sentences s_1..s_n of one document, never across documents, never a sentence split. Both
sides are laid out the same way, in the task's dictionaries::

    source:  s_1 <sep> s_2 <sep> ... <sep> s_n </s>      (each s_i without its own </s>)
    target:  t_1 <sep> t_2 <sep> ... <sep> t_n </s>

so a segment has exactly the tokens of its binarized sentences (each sentence's </s> becomes
the separator, the last one stays </s>). A batch is an ordinary fairseq translation batch of
such segments plus ``sample["segment_sentences"]``: for every row the corpus indices of its
sentences, in the batch's row order. Sentence boundaries (G-Transformer's group tags) are
derived from the tokens: the number of source sentences of a row is 1 + its separators.

:func:`plan_segments` packs the sentences of a split's documents into segments, greedily in
document order, under a limit of ``max_tokens`` (Bao et al. 2021, §4.1, use 512) and one of
two rules (:class:`SegmentBudget`, ``--segment-packing``):

* ``g-transformer`` (the default): the rule of the G-Transformer authors' data builder
  (``exp_gtrans/data_builder.py``): a sentence costs max(|s|, |t|) + 2 for its |s| source
  and |t| target words (without ``</s>``; their ``<s>`` and ``</s>`` around every sentence
  make the 2), and a segment takes the next sentence while its total cost stays below the
  limit (strictly);
* ``per-side``: a segment takes the next sentence while the tokens of each side (separators
  and the final ``</s>`` included) stay within the limit (the rule of segment checkpoints
  written before the option, which record no rule).

Without target sizes (raw input, and every split but the training split: what inference
has) |t| is |s|, so ``fairseq-generate``, the hub and ``docctx-translate`` cut a test set into
the same segments. With ``multi_resolution`` every document is also cut into 2, 4, 8, ... equal parts
(while a part has at least 2 sentences), each part packed the same way, and the segments of
all levels together are the samples (Sun et al. 2022, §3, multi-resolutional doc2doc
training). :class:`SegmentPairDataset` serves a plan over fairseq's sentence-level
:class:`~fairseq.data.LanguagePairDataset` and collates with fairseq's own ``collate``.

The functions at the end split decoded segments back into sentences (:func:`split_tokens`,
:func:`split_hypothesis`) and say whether a decoded segment is aligned with its source
(:class:`LengthWindow`, :func:`misalignment`); the task uses them to give one hypothesis per
source sentence.
"""
import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils
from fairseq.data.language_pair_dataset import collate

from .doc_index import DocIndex
from .document_dataset import _restore_dropped

logger = logging.getLogger(__name__)

#: default of ``--max-segment-tokens``: Bao et al. (2021, §4.1) cut documents into segments of
#: at most 512 tokens
DEFAULT_MAX_SEGMENT_TOKENS = 512
#: the rules of ``--segment-packing`` (:class:`SegmentBudget`)
SEGMENT_PACKINGS = ("g-transformer", "per-side")
#: default of ``--segment-packing`` in training: the G-Transformer authors' rule
DEFAULT_SEGMENT_PACKING = "g-transformer"
#: the rule of a segment checkpoint that records none (written before ``--segment-packing``)
LEGACY_SEGMENT_PACKING = "per-side"
#: defaults of ``--sentence-max-len-a`` / ``--sentence-max-len-b``: the G-Transformer authors'
#: decoding (``force_length`` in their ``sequence_generator.py``, their run scripts'
#: ``--max-len-a 1.2 --max-len-b 10``) ends output sentence i by 1.2 |s_i| + 10 tokens
SENTENCE_MAX_LEN_A, SENTENCE_MAX_LEN_B = 1.2, 10
#: the ways a decoded segment can be misaligned with its source (:func:`misalignment`), in the
#: order they are checked
MISALIGNMENTS = ("count", "empty", "window")


class SegmentBudget:
    """The running size of one segment under a packing rule (the module doc): ``fits(s, t)``
    says whether a sentence of ``s`` source and ``t`` target tokens (binarized sizes, each
    with its ``</s>``; ``t`` ``None``: the source's) may join the segment built so far,
    ``add(s, t)`` adds it, ``reset()`` starts a new segment. A first sentence always starts
    a segment; ``too_long(s, t)``: it exceeds the limit on its own."""

    def __init__(self, limit: int, packing: str = DEFAULT_SEGMENT_PACKING):
        if packing not in SEGMENT_PACKINGS:
            raise ValueError(f"--segment-packing {packing}: one of {', '.join(SEGMENT_PACKINGS)}")
        self.limit, self.packing = int(limit), packing
        self.reset()

    def reset(self):
        self.src = self.tgt = self.cost = 0
        self.sentences = 0

    @staticmethod
    def sentence_cost(s: int, t: Optional[int] = None) -> int:
        """The authors' cost of a sentence, max(|s|, |t|) + 2 over words without ``</s>``:
        ``max(s, t) + 1`` over binarized sizes."""
        return max(s, s if t is None else t) + 1

    def fits(self, s: int, t: Optional[int] = None) -> bool:
        t = s if t is None else t
        if self.sentences == 0:
            return True
        if self.packing == "g-transformer":
            return self.cost + self.sentence_cost(s, t) < self.limit
        return self.src + s <= self.limit and self.tgt + t <= self.limit

    def add(self, s: int, t: Optional[int] = None):
        t = s if t is None else t
        self.src, self.tgt = self.src + s, self.tgt + t
        self.cost += self.sentence_cost(s, t)
        self.sentences += 1

    def too_long(self, s: int, t: Optional[int] = None) -> bool:
        t = s if t is None else t
        if self.packing == "g-transformer":  # the authors' data builder warns above the limit
            return self.sentence_cost(s, t) > self.limit
        return s > self.limit or t > self.limit


@dataclass
class SegmentPlan:
    """The segments of a split: segment ``i`` is the sentences ``starts[i] ..
    starts[i] + counts[i] - 1`` (corpus indices, one document).

    ``levels[i]``: the resolution it was packed at (0: whole documents; k: a document cut
    into 2**k parts). ``long_sentences``: corpus indices of the sentences over the limit on
    their own (:meth:`SegmentBudget.too_long`; each a segment of its own). ``context_only``:
    the number of context-only sentences left out. ``packing``: the rule
    (:class:`SegmentBudget`)."""

    starts: np.ndarray
    counts: np.ndarray
    levels: np.ndarray
    long_sentences: np.ndarray
    context_only: int
    max_tokens: int
    packing: str = LEGACY_SEGMENT_PACKING

    def __len__(self):
        return len(self.starts)

    def sentences(self, i: int) -> np.ndarray:
        """Corpus indices of segment ``i``'s sentences, in document order."""
        return np.arange(self.starts[i], self.starts[i] + self.counts[i], dtype=np.int64)

    @property
    def num_levels(self) -> int:
        return int(self.levels.max()) + 1 if len(self.levels) else 0

    def describe(self) -> str:
        """One line: segments, levels, limit and rule, mean sentences per segment."""
        lv = f" at {self.num_levels} resolutions" if self.num_levels > 1 else ""
        mean = float(self.counts.mean()) if len(self.counts) else 0.0
        return (f"{len(self):,} segments{lv} of at most {self.max_tokens} tokens ({self.packing} packing), "
                f"{mean:.1f} sentences per segment")


def plan_segments(
    docs: DocIndex,
    src_sizes: np.ndarray,
    tgt_sizes: Optional[np.ndarray] = None,
    max_tokens: int = DEFAULT_MAX_SEGMENT_TOKENS,
    multi_resolution: bool = False,
    documents: Optional[Sequence[int]] = None,
    packing: str = DEFAULT_SEGMENT_PACKING,
) -> SegmentPlan:
    """Pack the sentences of ``docs`` into segments.

    Args:
        docs: the split's document index.
        src_sizes, tgt_sizes: the binarized length of every sentence (with its </s>); a
            segment's length on a side is the sum of its sentences' (each </s> becomes a
            separator or the final </s>). ``tgt_sizes`` ``None``: the source's lengths alone
            (a split without targets, or a split cut as inference cuts raw input).
        max_tokens: the limit of the packing rule. A sentence over it on its own is a
            segment of its own (reported in ``long_sentences``, never dropped).
        multi_resolution: also cut every document into 2, 4, 8, ... equal parts while every
            part has at least 2 sentences (Sun et al. 2022, §3), each part packed the same way.
        documents: pack only these documents (numbers in ``docs``; default all).
        packing: the rule, ``g-transformer`` or ``per-side`` (:class:`SegmentBudget`).

    Context-only sentences (``docs.context_only``) are never a segment's sentence: a segment
    ends before one and the next begins after it.
    """
    if max_tokens < 1:
        raise ValueError(f"--max-segment-tokens {max_tokens}: must be at least 1")
    src_sizes = np.asarray(src_sizes, dtype=np.int64)
    if len(src_sizes) != docs.num_sentences:
        raise ValueError(f"the document index covers {docs.num_sentences} sentences, the "
                         f"binarized data has {len(src_sizes)}")
    tgt_arr = src_sizes if tgt_sizes is None else np.asarray(tgt_sizes, dtype=np.int64)
    # plain lists: the packing loop reads one sentence at a time
    src, tgt, skip = src_sizes.tolist(), tgt_arr.tolist(), docs.context_only.tolist()
    starts, counts, levels = [], [], []
    long = set()
    budget = SegmentBudget(max_tokens, packing)

    def pack(begin: int, end: int, level: int):
        """Greedy packing of sentences ``begin .. end - 1`` (one document)."""
        seg = None
        for i in range(begin, end):
            if skip[i]:
                if seg is not None:
                    starts.append(seg), counts.append(i - seg), levels.append(level)
                seg = None
                continue
            if seg is not None and not budget.fits(src[i], tgt[i]):
                starts.append(seg), counts.append(i - seg), levels.append(level)
                seg = None
            if seg is None:
                seg = i
                budget.reset()
            budget.add(src[i], tgt[i])
            if budget.too_long(src[i], tgt[i]):
                long.add(i)
        if seg is not None:
            starts.append(seg), counts.append(end - seg), levels.append(level)

    doc_numbers = range(len(docs)) if documents is None else [int(d) for d in documents]
    for d in doc_numbers:
        first, n = int(docs.offsets[d]), int(docs.lengths[d])
        pack(first, first + n, 0)
        if not multi_resolution:
            continue
        level = 1
        while n // (2 ** level) >= 2:  # every one of the 2**level parts has >= 2 sentences
            parts = 2 ** level
            cuts = (np.arange(parts + 1) * n) // parts
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
                pack(first + a, first + b, level)
            level += 1
    marked = docs.context_only
    if documents is None:
        context_only = int(marked.sum())
    else:
        context_only = int(sum(marked[docs.offsets[d]:docs.offsets[d] + docs.lengths[d]].sum() for d in doc_numbers))
    return SegmentPlan(
        np.asarray(starts, dtype=np.int64), np.asarray(counts, dtype=np.int64),
        np.asarray(levels, dtype=np.int64), np.asarray(sorted(long), dtype=np.int64),
        context_only, max_tokens, packing,
    )


def segment_sums(sizes: np.ndarray, plan: SegmentPlan) -> np.ndarray:
    """Per segment, the sum of its sentences' ``sizes``."""
    csum = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    return csum[plan.starts + plan.counts] - csum[plan.starts]


class SegmentPairDataset(FairseqDataset):
    """Segments of consecutive sentences over a sentence-level dataset.

    Args:
        pair: fairseq's :class:`~fairseq.data.LanguagePairDataset` of the split (one item per
            sentence, corpus order); its targets are optional, as there.
        plan: the segments (:func:`plan_segments`).
        separator: the index of the sentence separator in the source dictionary.
        target_separator: its index in the target dictionary (default ``separator``: a
            joined dictionary).
        shuffle: shuffle before sorting by length (training), as ``LanguagePairDataset``.

    Items: ``{"id": segment index, "source", "target" (None without targets), "sentences":
    LongTensor of the corpus indices of its sentences}``. The collater is fairseq's
    ``collate`` (rows sorted by source length) plus ``"segment_sentences"``, a list with the
    sentences of every row in the collated row order.
    """

    def __init__(self, pair, plan: SegmentPlan, separator: int, shuffle: bool = True,
                 target_separator: Optional[int] = None):
        self.pair = pair
        self.plan = plan
        self.separator = int(separator)
        self.target_separator = self.separator if target_separator is None else int(target_separator)
        self.shuffle = shuffle
        self.eos = pair.eos
        self.src_sizes = segment_sums(pair.src_sizes, plan)
        self.tgt_sizes = None if pair.tgt_sizes is None else segment_sums(pair.tgt_sizes, plan)
        self.sizes = (self.src_sizes if self.tgt_sizes is None
                      else np.vstack((self.src_sizes, self.tgt_sizes)).T)

    @property
    def src_dict(self):
        return self.pair.src_dict

    @property
    def tgt_dict(self):
        return self.pair.tgt_dict

    @property
    def has_targets(self) -> bool:
        return self.pair.tgt is not None

    def __len__(self):
        return len(self.plan)

    def _join(self, items: List[torch.Tensor], ids: np.ndarray, side: str) -> torch.Tensor:
        """The sentences of a segment in the segment layout: each sentence's final </s>
        becomes the separator, the last sentence keeps its </s>."""
        sep = self.separator if side == "source" else self.target_separator
        for t, i in zip(items, ids.tolist()):
            if t.numel() == 0 or int(t[-1]) != self.eos:
                raise ValueError(f"{side} sentence {i} does not end in </s>: segments need "
                                 "fairseq's binarized sentences as they are")
            if bool((t[:-1] == sep).any()):
                raise ValueError(f"{side} sentence {i} contains the sentence separator "
                                 f"(index {sep}): it would split the sentence in a "
                                 "segment; remove the separator token from the text")
        joined = torch.cat(items)
        ends = torch.as_tensor(np.cumsum([t.numel() for t in items])[:-1] - 1, dtype=torch.long)
        joined[ends] = sep
        return joined

    def __getitem__(self, index):
        ids = self.plan.sentences(index)
        items = [self.pair[int(i)] for i in ids]
        source = self._join([it["source"] for it in items], ids, "source")
        target = None
        if items[0]["target"] is not None:
            target = self._join([it["target"] for it in items], ids, "target")
        return {"id": index, "source": source, "target": target,
                "sentences": torch.from_numpy(ids)}

    def collater(self, samples, pad_to_length=None):
        """fairseq's translation batch of the segments, plus ``segment_sentences``."""
        res = collate(
            samples, pad_idx=self.pair.src_dict.pad(), eos_idx=self.eos,
            left_pad_source=self.pair.left_pad_source, left_pad_target=self.pair.left_pad_target,
            input_feeding=self.pair.input_feeding, pad_to_length=pad_to_length,
            pad_to_multiple=self.pair.pad_to_multiple,
        )
        if len(samples) == 0:
            return res
        by_id = {s["id"]: s["sentences"] for s in samples}
        res["segment_sentences"] = [by_id[i] for i in res["id"].tolist()]
        return res

    def num_tokens(self, index):
        return max(self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def num_tokens_vec(self, indices):
        sizes = self.src_sizes[indices]
        if self.tgt_sizes is not None:
            sizes = np.maximum(sizes, self.tgt_sizes[indices])
        return sizes

    def size(self, index):
        return (self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def ordered_indices(self):
        """Shuffled (training), then sorted by target and source length, as fairseq's
        ``LanguagePairDataset`` orders sentences."""
        if self.shuffle:
            indices = np.random.permutation(len(self)).astype(np.int64)
        else:
            indices = np.arange(len(self), dtype=np.int64)
        if self.tgt_sizes is not None:
            indices = indices[np.argsort(self.tgt_sizes[indices], kind="mergesort")]
        return indices[np.argsort(self.src_sizes[indices], kind="mergesort")]

    def filter_indices_by_size(self, indices, max_sizes):
        return data_utils.filter_paired_dataset_indices_by_size(
            self.src_sizes, self.tgt_sizes, indices, max_sizes
        )

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """fairseq's batching; a last batch it drops for ``--required-batch-size-multiple``
        comes back as a batch of its own (no segment is lost)."""
        batches = super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)
        return _restore_dropped(batches, np.asarray(indices, dtype=np.int64))

    def set_epoch(self, epoch):
        if hasattr(self.pair, "set_epoch"):
            self.pair.set_epoch(epoch)


# ------------------------------------------------------------ decoded segments
def split_tokens(tokens: torch.Tensor, separator: int, eos: int) -> List[torch.Tensor]:
    """A segment's tokens (no padding, ending in </s>) as its sentences, each ending in </s>
    like a binarized sentence: the pieces between separators."""
    body = tokens[:-1] if tokens.numel() and int(tokens[-1]) == eos else tokens
    cuts = (body == separator).nonzero(as_tuple=False).view(-1).tolist()
    bounds = [-1] + cuts + [body.numel()]
    end = tokens.new_tensor([eos])
    return [torch.cat([body[a + 1:b], end]) for a, b in zip(bounds[:-1], bounds[1:])]


def count_sentences(tokens: torch.Tensor, separator: int) -> int:
    """The number of sentences of a segment's tokens: 1 + its separators."""
    return 1 + int((tokens == separator).sum())


def split_hypothesis(hypo: Dict, separator: int, eos: int, n: int, len_penalty: float = 1.0) -> Optional[List[Dict]]:
    """A decoded segment (a hypothesis of fairseq's generator: ``tokens`` ending in </s>,
    ``positional_scores``, ``attention``, ``alignment``) as ``n`` sentence hypotheses, or
    ``None`` when it does not have exactly ``n`` sentences.

    Sentence i gets the tokens between separators i-1 and i followed by </s>; its
    positional scores are those of its tokens and of the separator (or final </s>) that
    ends it, so they sum to the segment's. Its ``score`` is those scores' sum over
    ``length ** len_penalty``, as fairseq normalizes a hypothesis; ``attention`` keeps the
    columns of its target positions."""
    tokens = hypo["tokens"]
    if count_sentences(tokens[:-1] if int(tokens[-1]) == eos else tokens, separator) != n:
        return None
    ends = (tokens == separator).nonzero(as_tuple=False).view(-1).tolist() + [tokens.numel() - 1]
    scores = hypo.get("positional_scores")
    attn = _attention(hypo)
    out, a = [], 0
    end_token = tokens.new_tensor([eos])
    for b in ends:
        piece = {
            "tokens": torch.cat([tokens[a:b], end_token]),
            "alignment": hypo.get("alignment"),
            "attention": None if attn is None else attn[:, a:b + 1],
        }
        if scores is not None:
            piece["positional_scores"] = scores[a:b + 1].clone()
            piece["score"] = piece["positional_scores"].sum() / float(b + 1 - a) ** len_penalty
        else:
            piece["score"] = hypo["score"]
        out.append(piece)
        a = b + 1
    return out


def without_separators(hypo: Dict, separator: int) -> Dict:
    """A one-sentence hypothesis with any separator a model emitted removed (its positional
    scores and attention columns with it; the search's score kept)."""
    keep = hypo["tokens"] != separator
    if bool(keep.all()):
        return hypo
    out = dict(hypo, tokens=hypo["tokens"][keep])
    if hypo.get("positional_scores") is not None:
        out["positional_scores"] = hypo["positional_scores"][keep]
    if _attention(hypo) is not None:
        out["attention"] = hypo["attention"][:, keep]
    return out


def _attention(hypo: Dict) -> Optional[torch.Tensor]:
    """A hypothesis' attention ``[S, T]``, or ``None`` where its search returned none (fairseq's
    generator then gives an empty tensor)."""
    attn = hypo.get("attention")
    return attn if attn is not None and attn.dim() == 2 else None


def sentence_lengths(tokens: torch.Tensor, separator: int, pad: int, eos: int,
                     start: Optional[int] = None) -> torch.Tensor:
    """``[B, N]``: the number of tokens of every sentence of every row of a batch of segments
    ``tokens`` ``[B, S]`` (either padding side), separators, ``</s>``, what follows ``</s>``
    (mBART-25's source language token) and padding not counted, nor ``start``, the token every
    sentence starts with where there is one (the language token of data with language tokens);
    N is the most sentences of a row, a row's columns past its own sentences are 0."""
    is_sep = tokens.eq(separator)
    seps = is_sep.long()
    sentence = seps.cumsum(1) - seps  # 0-based sentence of every token (a separator ends its own)
    word = tokens.ne(pad) & ~is_sep & tokens.eq(eos).long().cumsum(1).eq(0)
    if start is not None:
        word &= tokens.ne(start)
    n = int(seps.sum(1).max()) + 1 if tokens.numel() else 1
    return tokens.new_zeros(tokens.size(0), n).scatter_add_(1, sentence, word.long())


@dataclass(frozen=True)
class LengthWindow:
    """The length window of an output sentence, as the G-Transformer authors decode (their
    ``force_length``): for a source sentence of L tokens, at least ``min_len`` tokens (0 for
    an empty source sentence) and at most ``int(max_len_a * L + max_len_b)``. ``min_len`` is
    fairseq's ``--min-len`` (default 1), the minimum the authors' decoder applies to every
    sentence."""

    max_len_a: float = SENTENCE_MAX_LEN_A
    max_len_b: int = SENTENCE_MAX_LEN_B
    min_len: int = 1

    def __post_init__(self):
        if self.max_len_a < 0 or self.max_len_b < 1:
            raise ValueError(f"the sentence length window {self.max_len_a} * |s| + {self.max_len_b}: "
                             "--sentence-max-len-a must be >= 0 and --sentence-max-len-b >= 1")

    def bounds(self, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(shortest, longest)``, each shaped like ``lengths`` (source sentence lengths, an
        integer tensor of any shape): the window of each sentence. The longest is computed in
        float64, as Python computes ``int(a * L + b)``; the shortest is never above it."""
        longest = torch.floor(lengths.double() * self.max_len_a + self.max_len_b).long()
        shortest = torch.clamp(longest, max=int(self.min_len)).masked_fill(lengths.eq(0), 0)
        return shortest.clamp(min=0), longest


def sentence_length(tokens: torch.Tensor, start: Optional[int] = None) -> int:
    """The tokens of one sentence ending in ``</s>``: ``</s>`` not counted, nor ``start``
    (the token every sentence starts with on data with language tokens)."""
    body = tokens[:-1]
    return int(body.numel() if start is None else body.ne(start).sum())


def misalignment(pieces: Optional[List[Dict]], src_lengths: Sequence[int],
                 window: Optional[Tuple[Sequence[int], Sequence[int]]] = None,
                 start: Optional[int] = None) -> Optional[str]:
    """Why a decoded segment, split into sentences (:func:`split_hypothesis`; ``None``: not
    the source's number of sentences), is not aligned with its source sentences of
    ``src_lengths`` tokens, or ``None`` when it is: ``"count"`` (another number of
    sentences), ``"empty"`` (an output sentence without a token while its source sentence
    has some), ``"window"`` (an output sentence's length outside ``window``, the
    ``(shortest, longest)`` lists of :meth:`LengthWindow.bounds`; not checked without).
    ``start``: the target token every sentence starts with, not counted (a sentence of only
    the language token is empty)."""
    if pieces is None or len(pieces) != len(src_lengths):
        return "count"
    lengths = [sentence_length(p["tokens"], start) for p in pieces]
    if any(n == 0 and s > 0 for n, s in zip(lengths, src_lengths)):
        return "empty"
    if window is not None and any(not lo <= n <= hi for n, lo, hi in zip(lengths, *window)):
        return "window"
    return None
