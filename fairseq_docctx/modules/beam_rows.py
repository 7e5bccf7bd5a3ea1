"""Beam search's row copies: when reordering a per-row tensor changes nothing.

fairseq's ``SequenceGenerator`` copies each source row ``beam`` times once
(``reorder_encoder_out`` with ``[0, 0, 0, 0, 1, 1, ...]``), then reorders the encoder output
with the beams at every step. Within one source row's beams every copy holds the same values,
so a step's order that sends every row to a copy of itself changes nothing, and copying the
encoder output (``[S, B, C]`` and more, at every step) is wasted; it is most of what a long
segment's search copies outside the decoder's cache (docs/benchmarks.md).

An encoder output carries, next to its per-row tensors, the number of the encoder row each row
was copied from (:func:`row_numbers`, reordered with the others); :func:`moves_only_copies`
tells from those numbers alone whether an order can be skipped. Rows with the same number hold
the same values: true when the numbers are made (each row its own number) and kept by every
reordering that applies the order to the numbers too.
"""
import torch
from torch import Tensor


def row_numbers(batch: int, device=None) -> Tensor:
    """The row numbers ``[B]`` of a fresh encoder output: each row its own (0 .. B-1)."""
    return torch.arange(batch, device=device)


def moves_only_copies(numbers: Tensor, new_order: Tensor) -> bool:
    """Whether reordering rows numbered ``numbers [B]`` by ``new_order`` (row i takes row
    ``new_order[i]``) gives every row a copy of itself, so that every per-row tensor stays as
    it is: same row count, and ``numbers[new_order] == numbers``."""
    return new_order.numel() == numbers.numel() and bool(numbers.index_select(0, new_order).equal(numbers))


def copy_groups(numbers: Tensor) -> int:
    """``g`` when the rows numbered ``numbers [B]`` are consecutive groups of ``g`` copies of
    distinct encoder rows (beam search's layout: ``[0, 0, 0, 0, 1, 1, 1, 1, ...]`` for beam 4,
    and after finished sentences leave), else 1."""
    B = numbers.numel()
    g = int(numbers.eq(numbers[0]).sum()) if B else 1
    if g <= 1 or B % g:
        return 1
    firsts = numbers[::g]
    if not torch.equal(numbers, firsts.repeat_interleave(g)) or firsts.unique().numel() != firsts.numel():
        return 1
    return g
