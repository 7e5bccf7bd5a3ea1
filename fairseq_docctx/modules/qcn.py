"""The Query-guided Capsule Network and the PCC regularization layer (Yang et al. 2019;
SPEC §3.1). Shapes are batch first."""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .capsule import CapsuleLayer, pearson


class QueryGuidedCapsuleNetwork(nn.Module):
    """Context words -> ``m`` output capsules, routed under the guidance of the current
    sentence.

    * query ``q = g(Σ_{w ∈ x_j} emb(w))`` (Eq. 5), ``g`` linear;
    * input capsules ``u_i = f([emb(w_i); onehot(k)])`` (Eq. 6) for every word of the ``k``-th
      previous sentence, ``k = 1..K``, ``f`` linear;
    * query-guided dynamic routing (Algorithm 1) into ``m`` capsules of size ``D``.
    """

    def __init__(self, embed_dim: int, context_size: int, num_capsules: int, capsule_dim: int,
                 routing_iters: int):
        super().__init__()
        self.context_size = context_size
        self.query_proj = nn.Linear(embed_dim, capsule_dim)  # g
        self.input_proj = nn.Linear(embed_dim + context_size, capsule_dim)  # f
        self.capsules = CapsuleLayer(capsule_dim, num_capsules, capsule_dim, iters=routing_iters,
                                     routing="query")

    def forward(self, cur_emb: Tensor, cur_mask: Tensor, ctx_emb: Tensor, ctx_mask: Tensor,
                return_history: bool = False):
        """``cur_emb`` ``[B, T, E]`` / ``cur_mask`` ``[B, T]`` (True = word): the current
        sentence. ``ctx_emb`` ``[B, K, L, E]`` / ``ctx_mask`` ``[B, K, L]``: its K previous
        sentences (column k-1 = distance k), all-False where a sentence does not exist.
        Returns ``v`` ``[B, m, D]`` (zeros for rows without context)."""
        B, K, L, _ = ctx_emb.shape
        q = self.query_proj((cur_emb * cur_mask.unsqueeze(-1).to(cur_emb)).sum(1))
        dist = F.one_hot(torch.arange(K, device=ctx_emb.device), self.context_size).to(ctx_emb)
        dist = dist.view(1, K, 1, -1).expand(B, K, L, -1)
        u = self.input_proj(torch.cat([ctx_emb, dist], dim=-1)).view(B, K * L, -1)
        return self.capsules(u, ctx_mask.reshape(B, K * L), query=q, return_history=return_history)


class PCCRegularizer(nn.Module):
    """Regularization layer (paper §3.4): two ordinary capsule networks (Sabour routing),
    ``Caps_enc`` over the current source embeddings and ``Caps_dec`` over the decoder-input
    target embeddings; returns ``PCC(Caps_enc(x), Caps_dec(y))`` per sentence (the capsules
    of each side flattened to one vector)."""

    def __init__(self, embed_dim: int, num_capsules: int, capsule_dim: int, routing_iters: int):
        super().__init__()
        self.caps_enc = CapsuleLayer(embed_dim, num_capsules, capsule_dim, iters=routing_iters)
        self.caps_dec = CapsuleLayer(embed_dim, num_capsules, capsule_dim, iters=routing_iters)

    def forward(self, src_emb: Tensor, src_mask: Tensor, tgt_emb: Tensor, tgt_mask: Tensor) -> Tensor:
        v_enc = self.caps_enc(src_emb, src_mask).flatten(1)
        v_dec = self.caps_dec(tgt_emb, tgt_mask).flatten(1)
        return pearson(v_enc, v_dec)


def gather_context_embeddings(
    embed_tokens: nn.Module, table: Tensor, index: Tensor, pad: int, eos: int
) -> Tuple[Tensor, Tensor]:
    """Embed each unique context sentence once and gather the K context sentences of every
    batch row: ``([B, K, L, E], [B, K, L] word mask)``; EOS and padding are not words."""
    emb = embed_tokens(table)  # [U, L, E]
    rows = index.clamp(min=0)
    out = emb[rows]  # [B, K, L, E]
    mask = table.ne(pad) & table.ne(eos)
    mask = mask[rows] & index.ge(0).unsqueeze(-1)
    return out, mask


def word_mask(tokens: Tensor, pad: int, eos: int) -> Tensor:
    return tokens.ne(pad) & tokens.ne(eos)


__all__ = ["QueryGuidedCapsuleNetwork", "PCCRegularizer", "gather_context_embeddings", "word_mask"]
