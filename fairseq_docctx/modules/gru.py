"""A GRU layer over right-padded sequences of different lengths, for training on a CPU.

PyTorch's ``nn.GRU`` over a packed sequence computes the input projections of all steps at
once and, on a CPU, takes each step's rows out of that tensor; autograd answers every one of
those slices with a zero-filled gradient of the whole projection, so the backward pass costs
``O(steps × tokens)`` (fill and add of ``[tokens, 3H]`` per step) — quadratic in the length of
the longest sequence of the batch (the times of both ways: docs/benchmarks.md,
"Implementation choices").

:func:`gru_layer` runs the same equations (PyTorch's, gates in the order r, z, n) with the
parameters of an ``nn.GRU`` layer over the same positions: the real positions taken from
the padded input by one index in the order of a packed sequence (:func:`packed_positions`;
for the backward direction each row read from its end), their input projections in one
product, split into steps by ``split`` (one backward node for all of them), at step ``t``
only the rows longer than ``t`` (a prefix of the rows sorted by length), ``weight_hh``'s
gradient summed over the steps at once (:mod:`~fairseq_docctx.modules.recurrence`), and the
states put back into the padded layout by one index. Its results equal ``nn.GRU``'s over
the packed sequence. :func:`run_gru` picks it where it is faster (a CPU, gradients on) and
``nn.GRU`` elsewhere (the GPU's fused kernels, inference).
"""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .recurrence import linear, recurrence


def gru_step(gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    """One GRU step from its input and hidden projections (PyTorch's ``nn.GRUCell``
    equations, gates in the order r, z, n): ``gi = W_i x + b_i``, ``gh = W_h h + b_h``, all
    ``[N, 3H]``; ``h [N, H]``. Returns ``h' = (1 - z) ⊙ n + z ⊙ h``."""
    H = h.size(-1)
    rz = (gi[..., : 2 * H] + gh[..., : 2 * H]).sigmoid_()  # in place on fresh sums: fewer buffers
    r, z = rz[..., :H], rz[..., H:]
    n = (gi[..., 2 * H:] + r * gh[..., 2 * H:]).tanh_()
    return n + z * (h - n)


def take_positions(x: Tensor, idx: Tensor) -> Tensor:
    """``x [N, L, ...]`` with position ``t`` of row ``i`` taken from position ``idx[i, t]`` of
    the same row (``idx [N, L]``). One ``index_select`` over the flattened positions: its
    backward pass scatters whole rows, ``gather``'s every element, which takes longer
    (docs/benchmarks.md, "Implementation choices")."""
    N, L = idx.shape
    flat = (idx + torch.arange(N, device=idx.device).unsqueeze(1) * L).flatten()
    return x.flatten(0, 1).index_select(0, flat).view_as(x)


def packed_positions(lengths: Tensor, width: int, reverse: bool = False) -> Tuple[Tensor, Tensor, List[int]]:
    """The real positions of right-padded rows of ``lengths [N]`` (each ≥ 1) and width
    ``width`` in the order of a packed sequence: step-major, at step ``t`` the rows longer
    than ``t`` by decreasing length (``reverse``: step ``t`` of a row is its position
    ``length - 1 - t``). Returns the flat positions ``[P]`` (``row * width + position``),
    the rows by decreasing length ``[N]`` and the rows of every step (``batch_sizes``)."""
    order = torch.sort(lengths, descending=True, stable=True).indices
    sorted_lengths = lengths.index_select(0, order)
    t = torch.arange(int(sorted_lengths[0]), device=lengths.device).unsqueeze(1)  # [T, 1]
    real = t < sorted_lengths.unsqueeze(0)  # [T, N]
    position = sorted_lengths.unsqueeze(0) - 1 - t if reverse else t.expand_as(real)
    flat = (order.unsqueeze(0) * width + position)[real]
    return flat, order, real.sum(1).tolist()


def gru_layer(x: Tensor, lengths: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Optional[Tensor],
              bias_hh: Optional[Tensor], h0: Optional[Tensor] = None, reverse: bool = False,
              outputs: bool = True) -> Tuple[Optional[Tensor], Tensor]:
    """One direction of a GRU layer over right-padded ``x [N, L, E]`` with ``lengths [N]``
    (each ≥ 1) from ``h0 [N, H]`` (zeros if ``None``); ``reverse``: each row read from its
    last real position to its first. Returns the states at every position ``[N, L, H]``
    (zeros at padding; ``None`` unless ``outputs``) and the last state of every row
    ``[N, H]``."""
    N, L = x.shape[:2]
    # the real positions, step-major, rows by decreasing length: step t holds the first
    # steps[t] rows (those longer than t); taken from x and put back by one index each
    flat, order, steps = packed_positions(lengths, L, reverse)
    gi = F.linear(x.reshape(N * L, -1).index_select(0, flat), weight_ih, bias_ih).split(steps)  # one product
    h = x.new_zeros(N, weight_hh.size(1)) if h0 is None else h0
    h = h.index_select(0, order)
    finished: List[Tensor] = []  # the last states of the rows that ended, longest first
    states: List[Tensor] = []
    with recurrence():  # weight_hh's gradient summed over the steps
        for gi_t, n in zip(gi, steps):
            if n < h.size(0):
                finished.append(h[n:])
                h = h[:n]
            h = gru_step(gi_t, linear(h, weight_hh, bias_hh), h)
            states.append(h)
    last = torch.cat([h, *finished[::-1]]).index_select(0, torch.argsort(order))
    if not outputs:
        return None, last
    out = x.new_zeros(N * L, h.size(1)).index_copy(0, flat, torch.cat(states))
    return out.view(N, L, -1), last


def layer_weights(rnn: nn.GRU, layer: int = 0, reverse: bool = False):
    """``(weight_ih, weight_hh, bias_ih, bias_hh)`` of one layer and direction of ``rnn``."""
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    return tuple(getattr(rnn, f"{name}{suffix}", None) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))


def use_gru_layer(rnn: nn.GRU, x: Tensor) -> bool:
    """Whether :func:`gru_layer` is the faster way to run ``rnn`` over ``x``: on a CPU, when
    autograd records the run (see the module doc)."""
    return x.device.type == "cpu" and torch.is_grad_enabled() and (
        x.requires_grad or any(p.requires_grad for p in rnn.parameters()))


def run_gru(rnn: nn.GRU, x: Tensor, lengths: Tensor, h0: Optional[Tensor] = None,
            outputs: bool = True) -> Tuple[Optional[Tensor], Tensor]:
    """``rnn`` (one layer, ``batch_first``, uni- or bidirectional) over right-padded
    ``x [N, L, E]`` with ``lengths [N]`` (each ≥ 1) from ``h0 [D, N, H]`` (``D`` directions;
    zeros if ``None``): the states at every position ``[N, L, D·H]`` (zeros at padding;
    ``None`` unless ``outputs``) and the last states ``[D, N, H]`` (backward direction:
    its state after reading the whole row), as ``nn.GRU`` gives them over the packed
    sequence."""
    if rnn.num_layers != 1 or not rnn.batch_first:
        raise ValueError("run_gru: one layer, batch_first")
    directions = 2 if rnn.bidirectional else 1
    if use_gru_layer(rnn, x):
        runs = [gru_layer(x, lengths, *layer_weights(rnn, 0, d == 1), h0=None if h0 is None else h0[d],
                          reverse=d == 1, outputs=outputs) for d in range(directions)]
        out = torch.cat([r[0] for r in runs], -1) if outputs else None
        return out, torch.stack([r[1] for r in runs])
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, last = rnn(packed, None if h0 is None else h0.contiguous())
    if outputs:
        out = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0]
        return out, last
    return None, last
