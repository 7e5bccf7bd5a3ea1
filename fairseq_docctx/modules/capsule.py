"""Capsule-network building blocks for the QCN model (Yang et al., 2019; SPEC §3.1).

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
from typing import Optional, Tuple, Union

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
    """Centred Pearson correlation (the PCC of Eq. 7 in the centred form SPEC §3.1 asks for).

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


def _capsule_major(u_hat: Tensor, mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """``[B, N, M, D]`` predictions -> the routing layout ``[B, M, N, D]`` (one copy), padded
    inputs zeroed with ``where`` (so even inf/NaN there cannot leak), plus the float mask."""
    B, N = u_hat.shape[:2]
    u_hat = u_hat.to(_compute_dtype(u_hat))
    if mask is not None:
        real = mask.to(device=u_hat.device, dtype=torch.bool)[:, :, None, None]
        u_hat = torch.where(real, u_hat, u_hat.new_zeros(()))
    return u_hat.transpose(1, 2).contiguous(), _as_mask(mask, B, N, u_hat)


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

    def agree(self, v: Tensor, x: Optional[Tensor] = None):
        a = torch.matmul(self.u_hat, v.unsqueeze(-1)).squeeze(-1)
        return a, (None if x is None else torch.bmm(x, self.u.transpose(1, 2)))


class _Factored:
    """Predictions ``û_{j|i} = W_j u_i`` never materialised. ``W_j`` is shared over the
    inputs, so ``Σ_i w_ij W_j u_i = W_j (Σ_i w_ij u_i)`` and ``(W_j u_i)·v_j = u_i·(W_jᵀ v_j)``:
    every op reads ``u`` ``[B, N, Din]`` once instead of the M times larger ``û``, the
    prediction GEMM disappears, and the agreements and the query dot products of one
    iteration are one batched matmul. Exact up to float rounding."""

    def __init__(self, u: Tensor, weight: Tensor):
        self.u, self.weight = u, weight  # [B, N, Din], [M, Din, D]

    def wsum(self, w: Tensor) -> Tensor:
        z = torch.bmm(w, self.u)  # Σ_i w_ij u_i: [B, M, Din]
        return torch.einsum("bmi,mid->bmd", z, self.weight)

    def agree(self, v: Tensor, x: Optional[Tensor] = None):
        t = torch.einsum("bmd,mid->bmi", v, self.weight)  # W_jᵀ v_j: [B, M, Din]
        M = t.size(1)
        if x is not None:
            t = torch.cat([t, x.expand(-1, -1, t.size(-1))], 1)
        d = torch.bmm(t, self.u.transpose(1, 2))  # [B, M (+M), N]
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
    p = corr(qc, torch.bmm(qc, u.transpose(1, 2))).expand(-1, M, -1)
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
    """Algorithm 1 of Yang et al. (2019), "improved dynamic routing", as SPEC §3.1 gives it.

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
    u = u.to(u_hat_mb.dtype)
    if mask is not None:  # padded u_i -> 0, a constant vector: PCC 0, finite gradients
        u = torch.where(m.bool().unsqueeze(-1), u, u.new_zeros(()))
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
        u = u.to(_compute_dtype(u))
        if mask is not None:  # zero padded inputs (where: even inf/NaN there cannot leak)
            u = torch.where(mask.to(device=u.device, dtype=torch.bool).unsqueeze(-1), u, u.new_zeros(()))
        m = _as_mask(mask, u.size(0), u.size(1), u)
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
