"""What an engine that runs an exported plain Transformer (CTranslate2, ``transformers``) needs
of a batch the task collates: every row's source joined after its source context, its target
context as the decoder's forced prefix, and its length limit, each row as it would be alone
(:class:`ContextRows`).

A concatenation model is a Transformer over the joined tokens: the source context is joined
to the current sentence as the model's encoder joins it
(:func:`~fairseq_docctx.modules.context_concat.concat_with_context`: ``x_{j-K} <sep> ...
x_{j-1} <sep> x_j </s>``, positions counted from the first token), and the target context
(``y_{j-K} <sep> ... y_{j-1} <sep>``, the model's own previous translations in document
order, as the task gives them) is forced before the decoder's start token."""
import contextlib
from typing import List, Optional

import torch

from ..data import context_batch as cb
from ..modules.context_concat import concat_with_context, gather_context_rows, pack_segments


class ContextRows:
    """The rows of a batch as an exported concatenation model reads them, and fairseq's length
    limits per row: ``max_len_a * n + max_len_b`` tokens before EOS, ``n`` the row's own source
    sentence's tokens (EOS included), whatever its neighbours in the batch, at most the
    decoder's positions less one, raised within :meth:`at_least`."""

    def __init__(self, src_dict, tgt_dict, sep: Optional[int], lenpen: float = 1.0, max_len_a: float = 0.0,
                 max_len_b: int = 200, min_len: int = 1, max_source_positions: int = 1024,
                 max_target_positions: int = 1024):
        self.src_dict, self.tgt_dict, self.sep = src_dict, tgt_dict, sep
        self.lenpen = float(lenpen)
        self.max_len_a, self.max_len_b, self.min_len = float(max_len_a), int(max_len_b), int(min_len)
        self.max_source_positions = int(max_source_positions)
        self.max_target_positions = int(max_target_positions)
        #: the rows' raised limits of the batch decoded within :meth:`at_least` (``None``: none)
        self.floor: Optional[torch.Tensor] = None

    @property
    def len_penalty(self) -> float:
        """``--lenpen``, under the name fairseq's generator gives it (the task's segment
        decoding reads it to score each sentence of a segment)."""
        return self.lenpen

    @contextlib.contextmanager
    def at_least(self, floor: Optional[torch.Tensor]):
        """Within the block, row i of the batch decoded there (one ``generate`` call) ends
        no earlier than ``floor[i]`` tokens (still at most the decoder's positions less one), as
        :meth:`~fairseq_docctx.tasks.length_limits.RowLengthLimit.at_least` raises fairseq's
        limits: the task raises a segment's limit to the sum of its sentences' length windows
        and separators. ``None``: nothing changes."""
        before, self.floor = self.floor, None if floor is None else floor.long().cpu()
        try:
            yield self
        finally:
            self.floor = before

    def max_len(self, source_length: int) -> int:
        """The length limit (tokens before EOS) of a sentence of ``source_length`` tokens (its
        EOS included): ``int(max_len_a * source_length + max_len_b)``, at most the decoder's
        positions less one."""
        return min(int(self.max_len_a * source_length + self.max_len_b), self.max_target_positions - 1)

    def limits(self, src_tokens: torch.Tensor) -> List[int]:
        """Every row's length limit (:meth:`max_len` of its own source sentence), raised
        within :meth:`at_least`."""
        limits = [self.max_len(n) for n in src_tokens.ne(self.src_dict.pad()).sum(1).tolist()]
        if self.floor is not None:
            if self.floor.numel() != len(limits):
                raise RuntimeError(f"length limits raised for {self.floor.numel()} rows, the batch has {len(limits)}")
            limits = [min(max(n, f), self.max_target_positions - 1) for n, f in zip(limits, self.floor.tolist())]
        return limits

    @staticmethod
    def ids(tokens: torch.Tensor, pad: int) -> List[List[int]]:
        """The rows of ``tokens`` without their padding."""
        return [[i for i in row if i != pad] for row in tokens.tolist()]

    def source_ids(self, src: torch.Tensor, ctx) -> List[List[int]]:
        """The rows' source tokens: the sentence, joined after its source context as the
        model's encoder joins it (where the batch has one), the earliest tokens cut beyond the
        encoder's positions."""
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        src = src.cpu()
        if cb.has_side(ctx, "src"):
            table = cb.table(ctx, "src")
            src, _ = concat_with_context(src, table.tokens.cpu(), table.index.cpu(), pad, eos, self.sep,
                                         left_pad=True, max_len=self.max_source_positions)
        return self.ids(src, pad)

    def context_prefix_ids(self, ctx, limits: List[int], rows: int) -> List[List[int]]:
        """The rows' target context tokens (none where the batch has no target side), their
        earliest tokens cut where the prefix and the sentence outgrow the decoder's positions."""
        if not cb.has_side(ctx, "tgt"):
            return [[] for _ in range(rows)]
        tpad = self.tgt_dict.pad()
        table = cb.table(ctx, "tgt")
        segs = [gather_context_rows(table.tokens.cpu(), table.index[:, k].cpu(), tpad,
                                    self.tgt_dict.eos(), self.sep)
                for k in reversed(range(table.index.size(1)))]
        packed, _ = pack_segments(segs, tpad, left_pad=False)
        rooms = [max(self.max_target_positions - (n + 1) - 1, 0) for n in limits]
        return [p[len(p) - room:] if len(p) > room else p
                for p, room in zip(self.ids(packed, tpad), rooms)]
