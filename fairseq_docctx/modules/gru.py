"""A GRU layer over right-padded sequences of different lengths, for training on a CPU.

PyTorch's ``nn.GRU`` over a packed sequence computes the input projections of all steps at
once and, on a CPU, takes each step's rows out of that tensor; autograd answers every one of
those slices with a zero-filled gradient of the whole projection, so the backward pass costs
``O(steps × tokens)`` (fill and add of ``[tokens, 3H]`` per step) — quadratic in the length of
the longest sequence of the batch. Forward + backward of the last states (H = 256, one
thread, best of 5): 60 sequences of up to 80 tokens 163 ms packed, 116 ms with
:func:`gru_layer`; 120 of up to 80: 387 ms, 206 ms; 20 of up to 30: 22.5 ms, 21.7 ms.

:func:`gru_layer` runs the same equations (PyTorch's, gates in the order r, z, n) with the
parameters of an ``nn.GRU`` layer over the same packed sequence: the input projections of
all real positions in one product, split into steps by ``split`` (one backward node for all
of them), and at step ``t`` only the rows longer than ``t`` (a prefix of the rows sorted by
length). Its results equal ``nn.GRU``'s over the packed sequence. :func:`run_gru` picks it where it is faster (a CPU, gradients on) and ``nn.GRU``
elsewhere (the GPU's fused kernels, inference).
"""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def gru_step(gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    """One GRU step from its input and hidden projections (PyTorch's ``nn.GRUCell``
    equations, gates in the order r, z, n): ``gi = W_i x + b_i``, ``gh = W_h h + b_h``, all
    ``[N, 3H]``; ``h [N, H]``. Returns ``h' = (1 - z) ⊙ n + z ⊙ h``."""
    H = h.size(-1)
    rz = (gi[..., : 2 * H] + gh[..., : 2 * H]).sigmoid_()  # in place on fresh sums: fewer buffers
    r, z = rz[..., :H], rz[..., H:]
    n = (gi[..., 2 * H:] + r * gh[..., 2 * H:]).tanh_()
    return n + z * (h - n)


def reverse_within_lengths(x: Tensor, lengths: Tensor) -> Tensor:
    """Right-padded ``x [N, L, ...]`` with the first ``lengths[i]`` positions of every row in
    reverse order (padding stays where it is). Its own inverse."""
    L = x.size(1)
    t = torch.arange(L, device=x.device).unsqueeze(0)
    idx = torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t)
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


def gru_layer(x: Tensor, lengths: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Optional[Tensor],
              bias_hh: Optional[Tensor], h0: Optional[Tensor] = None, reverse: bool = False,
              outputs: bool = True) -> Tuple[Optional[Tensor], Tensor]:
    """One direction of a GRU layer over right-padded ``x [N, L, E]`` with ``lengths [N]``
    (each ≥ 1) from ``h0 [N, H]`` (zeros if ``None``); ``reverse``: each row read from its
    last real position to its first. Returns the states at every position ``[N, L, H]``
    (zeros at padding; ``None`` unless ``outputs``) and the last state of every row
    ``[N, H]``."""
    if reverse:
        x = reverse_within_lengths(x, lengths)
    # the real positions, step-major, rows by decreasing length: step t holds the first
    # batch_sizes[t] rows (those longer than t)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    steps = packed.batch_sizes.tolist()
    gi = F.linear(packed.data, weight_ih, bias_ih).split(steps)  # one product, one backward node
    h = x.new_zeros(x.size(0), weight_hh.size(1)) if h0 is None else h0
    h = h.index_select(0, packed.sorted_indices)
    finished: List[Tensor] = []  # the last states of the rows that ended, longest first
    states: List[Tensor] = []
    for gi_t, n in zip(gi, steps):
        if n < h.size(0):
            finished.append(h[n:])
            h = h[:n]
        h = gru_step(gi_t, F.linear(h, weight_hh, bias_hh), h)
        states.append(h)
    last = torch.cat([h, *finished[::-1]]).index_select(0, packed.unsorted_indices)
    if not outputs:
        return None, last
    out = pad_packed_sequence(packed._replace(data=torch.cat(states)), batch_first=True,
                              total_length=x.size(1))[0]
    if reverse:
        out = reverse_within_lengths(out, lengths)
    return out, last


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
