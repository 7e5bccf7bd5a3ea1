"""The tensors a recurrence reads at every step, prepared once for all its steps.

A recurrent decoder (or a GRU layer) applies the same weight matrices, and attends over the
same keys and values, at every step. Autograd answers each step with its own share of their
gradients: for a weight ``W`` of a product ``x_t Wᵀ`` the product ``g_tᵀ x_t`` (an inner size
of the rows of one step) added to the sum of the other steps; for values ``[N, S, C]``
attended with weights ``α_t`` the outer product ``α_tᵀ g_t`` (an inner size of 1),
``[N, S, C]`` written and added per step. On a CPU these small products and the additions
cost much more than the products of the forward pass (the times: docs/benchmarks.md,
"Implementation choices").

Here the gradient of such a tensor is summed over the steps in one product after the
backward pass of every step: a step's backward node returns the gradient of its input and
stores ``(x_t, g_t)`` (for values ``(α_t, g_t)``); a node placed before all steps (their
common input, a scalar) runs after all of them — autograd's dependency count guarantees it —
and returns ``Gᵀ X`` (``Aᵀ G`` for values) with the stacked pairs. Results and gradients
are those of the plain operations. Deferred where autograd records on a CPU; elsewhere
(inference, the GPU) the plain operations run.

* :func:`linear` ``(x, weight, bias)`` (and :func:`project` for an ``nn.Linear``) inside
  :func:`recurrence`, a context for one run of a recurrence; outside it ``F.linear``;
* :class:`AttendedValues`: ``c_t = Σ_j α_tj values_j``;
* :class:`AttentionKeys`: the scores of an additive attention over padded keys, packed to
  their real positions when the rows are padded much.
"""
import threading
from contextlib import contextmanager
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def defers(*tensors: Optional[Tensor]) -> bool:
    """Whether the gradient of ``tensors`` (``None`` ignored) is summed after the steps: on a
    CPU, when autograd records and one of them needs a gradient."""
    real = [t for t in tensors if t is not None]
    return torch.is_grad_enabled() and real[0].device.type == "cpu" and any(t.requires_grad for t in real)


class _Collector:
    """The tensors the steps read (detached), the pairs the steps' backward nodes store, and
    how those pairs sum to the tensors' gradients (``summed(pairs) -> gradients``)."""

    def __init__(self, saved: Tuple[Optional[Tensor], ...], summed: Callable):
        self.saved = tuple(None if t is None else t.detach() for t in saved)
        self.summed = summed
        self.pairs: List[Tuple[Tensor, Tensor]] = []


class _Sink(torch.autograd.Function):
    """``tensors -> token``, a scalar every step reads: its backward, run after every step's,
    returns the tensors' gradients summed over the steps."""

    @staticmethod
    def forward(ctx, collector, *tensors):
        ctx.collector = collector
        ctx.count = len(tensors)
        return tensors[0].new_zeros(())

    @staticmethod
    def backward(ctx, _):
        pairs, ctx.collector.pairs = ctx.collector.pairs, []
        if not pairs:
            return (None,) * (1 + ctx.count)
        return (None, *ctx.collector.summed(pairs))


def _sink(tensors: Tuple[Optional[Tensor], ...], summed: Callable) -> Tuple[_Collector, Tensor]:
    collector = _Collector(tensors, summed)
    return collector, _Sink.apply(collector, *[t for t in tensors if t is not None])


# ----------------------------------------------------------------------------- linear maps
class _Linear(torch.autograd.Function):
    """``x Wᵀ + b``: its backward returns ``∂L/∂x`` and stores ``(x, ∂L/∂y)``."""

    @staticmethod
    def forward(ctx, x, token, collector):
        ctx.collector = collector
        ctx.save_for_backward(x)
        return F.linear(x, *collector.saved)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        ctx.collector.pairs.append((x.reshape(-1, x.size(-1)), grad.reshape(-1, grad.size(-1))))
        grad_x = grad.matmul(ctx.collector.saved[0]) if ctx.needs_input_grad[0] else None
        return grad_x, grad.new_zeros(()), None


def _weight_gradients(has_bias: bool) -> Callable:
    def summed(pairs):
        x = torch.cat([p[0] for p in pairs])
        g = torch.cat([p[1] for p in pairs])
        return [g.t().mm(x), g.sum(0)] if has_bias else [g.t().mm(x)]
    return summed


class StepWeights:
    """The weight matrices of one run of a recurrence (:func:`recurrence`), each with the
    node that sums its gradient."""

    def __init__(self):
        self.collectors: Dict[Tuple[int, int], Tuple[_Collector, Tensor]] = {}

    def linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        if not defers(weight, bias):
            return F.linear(x, weight, bias)
        key = (id(weight), id(bias))
        if key not in self.collectors:
            self.collectors[key] = _sink((weight, bias), _weight_gradients(bias is not None))
        collector, token = self.collectors[key]
        return _Linear.apply(x, token, collector)


_current = threading.local()


@contextmanager
def recurrence():
    """One run of a recurrence: inside it :func:`linear` sums the gradient of each weight
    over the steps, after the backward pass of every step."""
    outer = getattr(_current, "run", None)
    _current.run = StepWeights()
    try:
        yield _current.run
    finally:
        _current.run = outer


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, weight, bias)``; inside :func:`recurrence` with the weights' gradients
    summed over the steps (see the module doc)."""
    run = getattr(_current, "run", None)
    return F.linear(x, weight, bias) if run is None else run.linear(x, weight, bias)


def project(module: torch.nn.Linear, x: Tensor) -> Tensor:
    """``module(x)`` for an ``nn.Linear``, through :func:`linear`."""
    return linear(x, module.weight, module.bias)


# ----------------------------------------------------------------------------- attention
class _Attend(torch.autograd.Function):
    """``c_t = α_t values``: its backward returns ``∂L/∂α_t`` and stores ``(α_t, ∂L/∂c_t)``."""

    @staticmethod
    def forward(ctx, alpha, token, collector):
        ctx.collector = collector
        ctx.save_for_backward(alpha)
        return torch.bmm(alpha.unsqueeze(1), collector.saved[0]).squeeze(1)

    @staticmethod
    def backward(ctx, grad_c):
        (alpha,) = ctx.saved_tensors
        ctx.collector.pairs.append((alpha, grad_c))
        grad_alpha = None
        if ctx.needs_input_grad[0]:
            grad_alpha = torch.bmm(grad_c.unsqueeze(1), ctx.collector.saved[0].transpose(1, 2)).squeeze(1)
        return grad_alpha, grad_c.new_zeros(()), None


def _values_gradient(pairs):
    alphas = torch.stack([a for a, _ in pairs], 1)  # [N, T, S]
    grads = torch.stack([g for _, g in pairs], 1)  # [N, T, C]
    return [torch.bmm(alphas.transpose(1, 2), grads)]


class AttendedValues:
    """``values [N, S, C]`` that a recurrence attends at every step: :meth:`attend`
    ``(α_t [N, S]) -> c_t [N, C]``. Make one per run of the recurrence (per forward pass);
    the values' gradient is complete once the backward pass has gone through every step."""

    def __init__(self, values: Tensor):
        self.values = values
        self.token = None
        if defers(values):
            self.collector, self.token = _sink((values,), _values_gradient)

    def attend(self, alpha: Tensor) -> Tensor:
        if self.token is None:
            return torch.bmm(alpha.unsqueeze(1), self.values).squeeze(1)
        return _Attend.apply(alpha, self.token, self.collector)


def additive_scores(keys: Tensor, query: Tensor, v: Tensor, padding_mask: Tensor) -> Tensor:
    """``e_j = v · tanh(query + keys_j)`` over padded ``keys [N, S, A]`` with ``query [N, A]``
    and ``v [A]``; ``-inf`` where ``padding_mask [N, S]`` is True."""
    return torch.matmul((keys + query.unsqueeze(1)).tanh_(), v).masked_fill(padding_mask, float("-inf"))


#: pack the keys (:class:`AttentionKeys`) when their real positions are fewer than this share
#: of the padded ones
PACK_BELOW = 0.75


class AttentionKeys:
    """The keys ``[N, S, A]`` of an additive attention (``U h_j + b``) with their padding mask
    ``[N, S]`` (True at padding), read at every step of a recurrence: :meth:`scores`
    ``(query [N, A], v [A]) -> e [N, S]`` with ``e_j = v · tanh(query + keys_j)`` at the real
    positions and ``-inf`` at padding. The ``tanh`` over ``[N, S, A]`` and its backward pass
    are the largest element-wise work of a step: when the rows are padded much (real
    positions fewer than :data:`PACK_BELOW` of the padded ones; e.g. previous sentences, not
    grouped by length with the current ones), the keys of the real positions are packed
    once, ``[P, A]``, and each step adds the query of every position's row to them (an index
    of the rows), so that a step computes ``tanh`` over the real positions only."""

    def __init__(self, keys: Tensor, padding_mask: Tensor):
        self.padding_mask = padding_mask
        real = ~padding_mask
        self.packed = int(real.sum()) < PACK_BELOW * real.numel()
        if self.packed:
            self.flat = real.flatten().nonzero().squeeze(1)  # the real positions, row by row
            self.rows = self.flat.div(real.size(1), rounding_mode="floor")
            self.keys = keys.flatten(0, 1).index_select(0, self.flat)  # [P, A]
        else:
            self.keys = keys

    def scores(self, query: Tensor, v: Tensor) -> Tensor:
        if not self.packed:
            return additive_scores(self.keys, query, v, self.padding_mask)
        e = torch.matmul((self.keys + query.index_select(0, self.rows)).tanh_(), v)  # [P]
        full = e.new_full((self.padding_mask.numel(),), float("-inf"))
        return full.index_copy(0, self.flat, e).view_as(self.padding_mask)
