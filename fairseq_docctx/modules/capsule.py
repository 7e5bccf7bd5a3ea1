"""Capsule-network building blocks for the QCN model (Yang et al., 2019, §3.2 and §3.4;
the dynamic routing of Sabour et al., 2017).

Everything is batched and vectorised; the only Python loop is over routing iterations.

Shapes and conventions (batch first, unlike fairseq's ``T x B x C``):

* ``B`` batch rows, ``N`` input capsules (e.g. the words of the context sentences),
  ``M`` output capsules, ``D`` capsule dimension.
* ``mask``: ``[B, N]`` bool, **True = real input**, False = padding (the opposite of
  fairseq's ``key_padding_mask``). Padded inputs take no part: their coupling coefficients
  ``c`` and query correlations ``p`` are 0 and their predictions are zeroed before any sum,
  so whatever values padding holds (even inf/NaN) cannot leak in. A row with no real input
  (a document's first sentence) yields ``v = 0`` with finite gradients.
* Half-precision inputs are routed in float32 (norms, softmax, divisions) and cast back.
"""
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def squash(s: Tensor, dim: int = -1, eps: float = 0.0) -> Tensor:
    """Eq. 8: ``squash(s) = ‖s‖²/(1+‖s‖²) · s/‖s‖ = s · ‖s‖/(1+‖s‖²)`` along ``dim``.

    The second form has no division, so it is exact and ``squash(0) = 0``; the gradient is
    finite everywhere (torch's norm has subgradient 0 at 0). Output norms lie in [0, 1) and
    the direction of ``s`` is kept. ``eps > 0`` optionally smooths the norm,
    ``‖s‖ -> sqrt(‖s‖² + eps)`` (never needed for finiteness).
    """
    if eps > 0:
        sq = s.pow(2).sum(dim, keepdim=True)
        return s * (sq / ((1.0 + sq) * torch.sqrt(sq + eps)))
    n = torch.linalg.vector_norm(s, dim=dim, keepdim=True)
    return s * (n / (1.0 + n * n))


_PCC_EPS = 1e-6


def pearson(a: Tensor, b: Tensor, dim: int = -1, eps: float = _PCC_EPS) -> Tensor:
    """Centred Pearson correlation (the PCC of Yang et al. 2019, Eq. 7, in its centred
    form: Eq. 7 prints uncentred norms in the denominator, the text defines PCC as Cov/(σσ)).

    ``PCC(a, b) = (a-ā)·(b-b̄) / (‖a-ā‖ ‖b-b̄‖ + eps)``, means taken along ``dim``; leading
    dims broadcast. ``eps`` sits in the denominator only, so a constant vector gives exactly
    0 (and finite gradients) instead of 0/0.
    """
    a, b = torch.broadcast_tensors(a, b)
    ac = a - a.mean(dim, keepdim=True)
    bc = b - b.mean(dim, keepdim=True)
    num = (ac * bc).sum(dim)
    den = torch.linalg.vector_norm(ac, dim=dim) * torch.linalg.vector_norm(bc, dim=dim)
    return num / (den + eps)


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _as_mask(mask: Optional[Tensor], B: int, N: int, like: Tensor) -> Tensor:
    """``[B, N]`` float mask (1 = real input) in the dtype/device of ``like``."""
    if mask is None:
        return like.new_ones(B, N)
    return mask.to(device=like.device, dtype=torch.bool).to(like.dtype)


def _routing_inputs(u: Tensor, mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Inputs in the routing dtype with padded ones zeroed (``where``: even inf/NaN there
    cannot leak), and the ``[B, N]`` float mask."""
    u = u.to(_compute_dtype(u))
    if mask is not None:
        u = torch.where(mask.to(device=u.device, dtype=torch.bool).unsqueeze(-1), u, u.new_zeros(()))
    return u, _as_mask(mask, u.size(0), u.size(1), u)


def _capsule_major(u_hat: Tensor, mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """``[B, N, M, D]`` predictions -> the routing layout ``[B, M, N, D]`` (one copy), in the
    routing dtype with padded inputs zeroed (:func:`_routing_inputs`), plus the float mask."""
    flat, m = _routing_inputs(u_hat.flatten(2), mask)
    return flat.view(u_hat.shape).transpose(1, 2).contiguous(), m


def _history(xs) -> Tensor:
    """Per-iteration ``[B, M, N]`` tensors -> ``[iters, B, N, M]``."""
    return torch.stack(xs).transpose(2, 3)


# The routing proper is written against operations on the predictions, so that it runs
# either on explicit predictions or on the factored form below (both batch first):
#   wsum(w):      s_j = Σ_i w_ij û_{j|i}                (w: [B, M, N] -> [B, M, D])
#   agree(v, x):  a_ij = û_{j|i}·v_j and, if x is given,
#                 d_ij = u_i·x_j (the inputs themselves) (v, x: [B, M, D] -> [B, M, N] each)
# c, p and the logits live in the layout [B, M, N] (softmax over M = dim 1); ``m`` is the
# [B, N] float mask (padded predictions and inputs must already be zero).
class _Explicit:
    """Predictions given as a tensor ``[B, M, N, D]``: each op is one batched matmul."""

    def __init__(self, u_hat: Tensor, u: Optional[Tensor] = None):
        self.u_hat, self.u = u_hat, u

    def wsum(self, w: Tensor) -> Tensor:
        return torch.matmul(w.unsqueeze(-2), self.u_hat).squeeze(-2)

    def dots(self, x: Tensor) -> Tensor:
        return torch.bmm(x, self.u.transpose(1, 2))

    def agree(self, v: Tensor, x: Optional[Tensor] = None):
        a = torch.matmul(self.u_hat, v.unsqueeze(-1)).squeeze(-1)
        return a, (None if x is None else self.dots(x))


# Routing reads the inputs u and the weights W in every iteration. Left to autograd, each
# read adds a full-size gradient (``[B, N, Din]`` for u, ``[G, M, Din, D]`` for W) to an
# accumulator in the backward pass: memory traffic that dominates these small matmuls. The
# functions below keep the factors of each read's gradient instead and form the sum once,
# as one batched matmul over all of them, when the backward pass reaches the tensor
# (``_Summed``: identity forward; its backward runs after every read's).
class _Summed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pieces: list, reduce):
        ctx.set_materialize_grads(False)
        ctx.pieces, ctx.reduce = pieces, reduce
        return x.view_as(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        if ctx.pieces:
            total = ctx.reduce(ctx.pieces)
            ctx.pieces.clear()  # a second backward pass (retain_graph) collects afresh
            grad = total if grad is None else grad + total
        return grad, None, None


def _sum_u_pieces(pieces) -> Tensor:  # Σ Lᵀ R over pieces (L [B, P, N], R [B, P, Din])
    left = torch.cat([p[0] for p in pieces], 1)
    right = torch.cat([p[1] for p in pieces], 1)
    return torch.bmm(left.transpose(1, 2), right)


def _sum_w_pieces(pieces) -> Tensor:  # Σ_b A[g,b,m]ᵀ C[g,b,m] (A [G, B, M, Din], C [G, B, M, D])
    return torch.einsum("gbmi,gbmd->gmid", torch.cat([p[0] for p in pieces], 1),
                        torch.cat([p[1] for p in pieces], 1))


class _ReadU(torch.autograd.Function):
    """``x @ u`` (``x`` ``[B, P, N]``) or, with ``transpose``, ``x @ uᵀ`` (``x`` ``[B, P, Din]``)."""

    @staticmethod
    def forward(ctx, x, u, pieces: list, transpose: bool):
        ctx.save_for_backward(x, u)
        ctx.pieces, ctx.transpose = pieces, transpose
        return torch.bmm(x, u.transpose(1, 2) if transpose else u)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, u = ctx.saved_tensors
        gx = None
        if ctx.needs_input_grad[0]:
            gx = torch.bmm(grad, u) if ctx.transpose else torch.bmm(grad, u.transpose(1, 2))
        if ctx.needs_input_grad[1]:
            ctx.pieces.append((grad, x) if ctx.transpose else (x, grad))
        return gx, None, None, None


class _ReadW(torch.autograd.Function):
    """Per layer g and capsule j: ``x W_gj`` (``x`` ``[G*B, M, Din]``) or, with ``transpose``,
    ``x W_gjᵀ`` (``x`` ``[G*B, M, D]``)."""

    @staticmethod
    def forward(ctx, x, w, pieces: list, transpose: bool):
        ctx.save_for_backward(x, w)
        ctx.pieces, ctx.transpose = pieces, transpose
        return _per_layer(x, w, transpose)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = _per_layer(grad, w, not ctx.transpose) if ctx.needs_input_grad[0] else None
        if ctx.needs_input_grad[1]:
            G = w.size(0)
            a, c = (grad, x) if ctx.transpose else (x, grad)
            ctx.pieces.append((a.view(G, -1, *a.shape[1:]), c.view(G, -1, *c.shape[1:])))
        return gx, None, None, None


def _per_layer(x: Tensor, w: Tensor, transpose: bool) -> Tensor:
    G = w.size(0)
    spec = "gbmd,gmid->gbmi" if transpose else "gbmi,gmid->gbmd"
    y = torch.einsum(spec, x.view(G, -1, *x.shape[1:]), w)
    return y.reshape(-1, *y.shape[2:])


class _Factored:
    """Predictions ``û_{j|i} = W_j u_i`` never materialised. ``W_j`` is shared over the
    inputs, so ``Σ_i w_ij W_j u_i = W_j (Σ_i w_ij u_i)`` and ``(W_j u_i)·v_j = u_i·(W_jᵀ v_j)``:
    every op reads ``u`` ``[B, N, Din]`` once instead of the M times larger ``û``, the
    prediction GEMM disappears, and the agreements and the query dot products of one
    iteration are one batched matmul. Exact up to float rounding. The gradients of u and W
    are summed once over all iterations (``_Summed``).

    Several capsule layers of the same shape can route together, each on its own inputs:
    ``weight`` ``[G, M, Din, D]`` and ``u`` stacked as G blocks of B rows, block g read by
    layer g (one op per routing step for all of them)."""

    def __init__(self, u: Tensor, weight: Tensor):
        weight = weight if weight.dim() == 4 else weight.unsqueeze(0)  # [G, M, Din, D]
        self.track = torch.is_grad_enabled() and (u.requires_grad or weight.requires_grad)
        if self.track:
            self.u_pieces, self.w_pieces = [], []
            u = _Summed.apply(u, self.u_pieces, _sum_u_pieces)
            weight = _Summed.apply(weight, self.w_pieces, _sum_w_pieces)
        self.u, self.weight = u, weight  # [G*B, N, Din]

    def _read_u(self, x: Tensor, transpose: bool) -> Tensor:
        if self.track:
            return _ReadU.apply(x, self.u, self.u_pieces, transpose)
        return torch.bmm(x, self.u.transpose(1, 2) if transpose else self.u)

    def _read_w(self, x: Tensor, transpose: bool) -> Tensor:
        if self.track:
            return _ReadW.apply(x, self.weight, self.w_pieces, transpose)
        return _per_layer(x, self.weight, transpose)

    def wsum(self, w: Tensor) -> Tensor:
        return self._read_w(self._read_u(w, False), False)  # W_j Σ_i w_ij u_i: [G*B, M, D]

    def dots(self, x: Tensor) -> Tensor:
        return self._read_u(x, True)

    def agree(self, v: Tensor, x: Optional[Tensor] = None):
        t = self._read_w(v, True)  # W_jᵀ v_j: [G*B, M, Din]
        M = t.size(1)
        if x is not None:
            t = torch.cat([t, x.expand(-1, -1, t.size(-1))], 1)
        d = self.dots(t)  # [B, M (+M), N]
        return (d, None) if x is None else (d[:, :M], d[:, M:])


def _route_dynamic(preds, m: Tensor, iters: int, M: int):
    m = m.unsqueeze(1)  # [B, 1, N]
    logits = m.new_zeros(m.size(0), M, m.size(2))  # b_ij: [B, M, N]
    cs = []
    for t in range(iters):
        c = torch.softmax(logits, dim=1) * m
        v = squash(preds.wsum(c))  # [B, M, D]
        cs.append(c)
        if t < iters - 1:  # the last update would not change v
            logits = logits + preds.agree(v)[0]
    return v, cs


def _route_query(u: Tensor, preds, q: Tensor, m: Tensor, iters: int, M: int):
    # u: [B, N, D] with padded inputs zero; q: [B, D].
    # PCC(u_i, q_j) for all pairs from the dot products u_i·(q_j - mean(q_j)): centring one
    # side is enough (Σ_d (q_jd - q̄_j) = 0), so the dots are those of the plain inputs and
    # come out of the same batched matmul as the agreements; ‖u_i - ū_i‖ is computed once.
    u_norm = torch.linalg.vector_norm(u - u.mean(-1, keepdim=True), dim=-1).unsqueeze(1)  # [B, 1, N]
    m = m.unsqueeze(1)  # [B, 1, N]

    def centred(qj: Tensor) -> Tensor:
        return qj - qj.mean(-1, keepdim=True)

    def corr(qc: Tensor, dots: Tensor) -> Tensor:  # p = tanh(PCC): [B, M', N]
        den = torch.linalg.vector_norm(qc, dim=-1).unsqueeze(-1) * u_norm + _PCC_EPS
        return torch.tanh(dots / den) * m

    qc = centred(q.unsqueeze(1))  # every q_j starts as q: one row, broadcast over M
    p = corr(qc, preds.dots(qc)).expand(-1, M, -1)
    qj = q.unsqueeze(1)
    alpha = m.new_zeros(m.size(0), M, m.size(2))
    cs, ps = [], []
    for t in range(iters):
        c = torch.softmax(alpha, dim=1) * m
        v = squash(preds.wsum(c + p))  # [B, M, D]
        cs.append(c)
        ps.append(p)
        if t < iters - 1:  # the last updates would not change v
            qj = (qj + v) / 2
            qc = centred(qj)
            agree, dots = preds.agree(v, qc)
            alpha = alpha + p * agree
            p = corr(qc, dots)
    return v, cs, ps


def dynamic_routing(
    u_hat: Tensor, mask: Optional[Tensor] = None, iters: int = 3, return_history: bool = False
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Routing-by-agreement of Sabour et al. (2017).

    ``u_hat``: ``[B, N, M, D]`` predictions ``û_{j|i}``; ``mask``: ``[B, N]`` (True = real).
    ``b_ij = 0``; repeat ``iters`` times: ``c_i = softmax_j(b_i)``;
    ``s_j = Σ_i c_ij û_{j|i}``; ``v_j = squash(s_j)``; ``b_ij += û_{j|i}·v_j``.
    Returns ``v`` ``[B, M, D]``; with ``return_history`` also the coupling coefficients used
    in each iteration, ``[iters, B, N, M]`` (0 for padded inputs).
    """
    assert iters >= 1, "need at least one routing iteration"
    out_dtype = u_hat.dtype
    u_hat, m = _capsule_major(u_hat, mask)
    v, cs = _route_dynamic(_Explicit(u_hat), m, iters, u_hat.size(1))
    v = v.to(out_dtype)
    return (v, _history(cs).to(out_dtype)) if return_history else v


def query_guided_routing(
    u: Tensor,
    u_hat: Tensor,
    q: Tensor,
    mask: Optional[Tensor] = None,
    iters: int = 4,
    return_history: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
    """Algorithm 1 of Yang et al. (2019), "improved dynamic routing" (§3.2),
    with the PCC of Eq. 7 and the squash of Eq. 8.

    ``u``: ``[B, N, D]`` input capsules, ``u_hat``: ``[B, N, M, D]`` predictions
    ``û_{j|i} = W_j u_i``, ``q``: ``[B, D]`` query, ``mask``: ``[B, N]`` (True = real).
    ``u``, ``q`` and the outputs share the dimension ``D``: PCC compares ``u_i`` with
    ``q_j``, and ``q_j`` is averaged with ``v_j``.

    Initialise ``α_ij = 0``, ``q_j = q``, ``p_ij = tanh(PCC(u_i, q_j))``; repeat ``iters`` times:

    * ``c_i = softmax_j(α_i)``
    * ``s_j = Σ_i (c_ij + p_ij) û_{j|i}``;  ``v_j = squash(s_j)``
    * ``α_ij += p_ij · (û_{j|i}·v_j)``;  ``q_j = (q_j + v_j)/2``;  ``p_ij = tanh(PCC(u_i, q_j))``

    Padded inputs get ``c = p = 0``. Returns ``v`` ``[B, M, D]``; with ``return_history``
    also ``(c, p)``, each ``[iters, B, N, M]``: the values that entered ``s_j`` in each
    iteration (what the paper's Figs. 6/7 plot).
    """
    assert iters >= 1, "need at least one routing iteration"
    assert u.shape[-1] == q.shape[-1] == u_hat.shape[-1], (
        f"u, q and u_hat need the same last dim, got {u.shape}, {q.shape}, {u_hat.shape}"
    )
    out_dtype = u_hat.dtype
    u_hat_mb, m = _capsule_major(u_hat, mask)
    u = _routing_inputs(u, mask)[0].to(u_hat_mb.dtype)  # padded u_i -> 0: PCC 0, finite gradients
    v, cs, ps = _route_query(u, _Explicit(u_hat_mb, u), q.to(u_hat_mb.dtype), m, iters, u_hat_mb.size(1))
    v = v.to(out_dtype)
    if return_history:
        return v, _history(cs).to(out_dtype), _history(ps).to(out_dtype)
    return v


class CapsuleLayer(nn.Module):
    """Input capsules ``[B, N, in_dim]`` -> ``M`` output capsules ``[B, M, caps_dim]``.

    One matrix per output capsule, shared over inputs (``N`` varies):
    ``û_{j|i} = W_j u_i`` with ``W`` ``[M, in_dim, caps_dim]``, computed as one einsum, then
    routed with ``routing="dynamic"`` (Sabour; Caps_enc/Caps_dec of the regularizer) or
    ``routing="query"`` (Algorithm 1; needs a ``query`` ``[B, caps_dim]`` and
    ``in_dim == caps_dim`` because PCC compares ``u_i`` with ``q_j``).
    """

    def __init__(self, in_dim: int, num_caps: int, caps_dim: int, iters: int = 3,
                 routing: str = "dynamic"):
        super().__init__()
        if routing not in ("dynamic", "query"):
            raise ValueError(f"routing must be 'dynamic' or 'query', got {routing!r}")
        if routing == "query" and in_dim != caps_dim:
            raise ValueError(
                f"query-guided routing correlates u_i with q_j: in_dim ({in_dim}) must equal "
                f"caps_dim ({caps_dim})"
            )
        self.in_dim, self.num_caps, self.caps_dim = in_dim, num_caps, caps_dim
        self.iters, self.routing = iters, routing
        self.weight = nn.Parameter(torch.empty(num_caps, in_dim, caps_dim))
        self.reset_parameters()

    def reset_parameters(self):
        # Xavier-uniform for each W_j separately (fan_in=in_dim, fan_out=caps_dim).
        bound = math.sqrt(6.0 / (self.in_dim + self.caps_dim))
        nn.init.uniform_(self.weight, -bound, bound)

    def predictions(self, u: Tensor) -> Tensor:
        """``û_{j|i} = W_j u_i``: ``[B, N, in_dim]`` -> ``[B, N, M, caps_dim]`` (for analysis
        and tests: routing itself never materialises them, see :class:`_Factored`)."""
        return torch.einsum("bni,mid->bnmd", u, self.weight.to(u.dtype))

    def forward(self, u: Tensor, mask: Optional[Tensor] = None, query: Optional[Tensor] = None,
                return_history: bool = False):
        """``u`` ``[B, N, in_dim]``, ``mask`` ``[B, N]`` (True = real), ``query`` ``[B, caps_dim]``
        (query routing only). Returns ``v`` ``[B, M, caps_dim]`` (plus the routing history
        of :func:`dynamic_routing` / :func:`query_guided_routing` with ``return_history``),
        the same values as those functions on :meth:`predictions`, computed without them."""
        if self.routing == "query" and query is None:
            raise ValueError("query-guided capsule layer needs a query")
        out_dtype = u.dtype
        u, m = _routing_inputs(u, mask)
        preds = _Factored(u, self.weight.to(u.dtype))
        if self.routing == "dynamic":
            v, cs = _route_dynamic(preds, m, self.iters, self.num_caps)
            hist = (_history(cs),)
        else:
            v, cs, ps = _route_query(u, preds, query.to(u.dtype), m, self.iters, self.num_caps)
            hist = (_history(cs), _history(ps))
        v = v.to(out_dtype)
        if return_history:
            return (v,) + tuple(h.to(out_dtype) for h in hist)
        return v

    def extra_repr(self) -> str:
        return (f"in_dim={self.in_dim}, num_caps={self.num_caps}, caps_dim={self.caps_dim}, "
                f"iters={self.iters}, routing={self.routing}")


def route_together(layers: Sequence[CapsuleLayer], inputs: Sequence[Tensor],
                   masks: Sequence[Optional[Tensor]]) -> List[Tensor]:
    """``layers[g](inputs[g], masks[g])`` for dynamic-routing capsule layers of one shape
    whose inputs have one batch size, computed as one routing (inputs padded to the longest
    and stacked; every step is one batched op for all layers): the values of calling each
    layer alone, with a fraction of the small operations (Caps_enc and Caps_dec of the PCC
    regularizer)."""
    first = layers[0]
    assert all(l.routing == "dynamic" and l.weight.shape == first.weight.shape and l.iters == first.iters
               for l in layers), "route_together needs dynamic-routing layers of one shape"
    B = inputs[0].size(0)
    assert all(u.size(0) == B for u in inputs), "route_together needs inputs of one batch size"
    N = max(u.size(1) for u in inputs)
    u = torch.cat([F.pad(x, (0, 0, 0, N - x.size(1))) for x in inputs])
    mask = torch.cat([
        F.pad(m.to(torch.bool) if m is not None else x.new_ones(x.shape[:2], dtype=torch.bool),
              (0, N - x.size(1)), value=False)
        for x, m in zip(inputs, masks)
    ])
    out_dtype = inputs[0].dtype
    u, m = _routing_inputs(u, mask)
    weight = torch.stack([l.weight for l in layers]).to(u.dtype)
    v, _ = _route_dynamic(_Factored(u, weight), m, first.iters, first.num_caps)
    return list(v.to(out_dtype).split(B))
