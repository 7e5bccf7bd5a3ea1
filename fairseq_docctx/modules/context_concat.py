"""Vectorised concatenation of context sentences (no Python loop over rows or tokens).

Context arrives as a table of unique sentences plus an index map (see
:mod:`fairseq_docctx.data.document_dataset`); these helpers gather the rows each batch row
needs and pack them, with their padding squeezed out, into one padded tensor.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..data import context_batch as cb


def pack_segments(
    segments: List[Tensor], pad: int, left_pad: bool, max_len: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """Join ``[B, L_i]`` token tensors row by row, dropping their padding.

    Returns ``(tokens [B, T], lengths [B])`` padded on the left or right. With ``max_len``
    only the last ``max_len`` tokens of each row are kept (the earliest are cut first).
    """
    cat = torch.cat(segments, dim=1)
    keep = cat.ne(pad)
    if max_len is not None:
        kept_from_here = keep.flip(1).cumsum(1).flip(1)
        keep = keep & (kept_from_here <= max_len)
    lengths = keep.sum(1)
    width = max(int(lengths.max()) if lengths.numel() else 0, 1)
    col = keep.cumsum(1) - 1
    if left_pad:
        col = col + (width - lengths).unsqueeze(1)
    rows = torch.arange(cat.size(0), device=cat.device).unsqueeze(1).expand_as(cat)
    out = cat.new_full((cat.size(0), width), pad)
    out[rows[keep], col[keep]] = cat[keep]
    return out, lengths


def gather_context_rows(
    table: Tensor, index: Tensor, pad: int, eos: int, sep: Optional[int] = None
) -> Tensor:
    """``table[index]`` with missing rows (``index < 0``) all padding and, if ``sep`` is
    given, each sentence's EOS replaced by the separator."""
    rows = cb.gather_rows(table, index, fill=pad)
    if sep is not None:
        rows = rows.masked_fill(rows.eq(eos), sep)
    return rows


def concat_with_context(
    current: Tensor,
    table: Tensor,
    index: Tensor,
    pad: int,
    eos: int,
    sep: int,
    left_pad: bool,
    max_len: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """``x_{j-K} <sep> ... x_{j-1} <sep> x_j`` for every row: farthest context first.
    ``index`` is ``[B, K]`` (column 0 = previous sentence)."""
    segments = [
        gather_context_rows(table, index[:, k], pad, eos, sep)
        for k in reversed(range(index.size(1)))
    ]
    return pack_segments(segments + [current], pad, left_pad, max_len)
