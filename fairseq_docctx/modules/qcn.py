"""The Query-guided Capsule Network and the PCC regularization layer (Yang et al. 2019,
§3.2, Eqs. 5-8 and Algorithm 1; the regularization layer §3.4). Shapes are batch first."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..data import context_batch as cb
from .capsule import CapsuleLayer, pearson, route_together


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
                index: Optional[Tensor] = None, ctx_words: Optional[Tensor] = None,
                return_history: bool = False):
        """``cur_emb`` ``[B, T, E]`` / ``cur_mask`` ``[B, T]`` (True = word): the current
        sentence. The context comes in one of two forms:

        * gathered (``index=None``): ``ctx_emb`` ``[B, K, L, E]`` / ``ctx_mask`` ``[B, K, L]``,
          the K previous sentences of every row (column k-1 = distance k), all-False where a
          sentence does not exist;
        * table: ``ctx_mask`` ``[U, L]`` marks the context words of the batch's unique
          sentences, ``ctx_emb`` ``[R, E]`` holds their embeddings (the True positions of
          ``ctx_mask`` in row-major order: padding and sentences that are nobody's context
          need not be embedded), ``index`` ``[B, K]`` gives the table row of the sentence at
          distance k (-1 = none), as the document dataset collates them. With ``ctx_words``
          ``[R]``, ``ctx_emb`` holds each distinct word once and ``ctx_words`` gives the row
          of every context word: ``f_e`` then runs once per distinct word.

        The context words of each row are packed (padding dropped) before routing, and
        ``f_e(emb)`` is computed once per word of the table, not once per (row, distance):
        ``u_i = f_e(emb_i) + f_k(onehot(k)) + b`` by linearity; the capsule layer routes
        without materialising the predictions (see :class:`~.capsule.CapsuleLayer`). Returns ``v`` ``[B, m, D]`` (zeros for rows without context); with
        ``return_history`` also ``c`` and ``p`` as ``[iters, B, K*L, m]`` over the word
        positions ``(k, l)`` of the gathered form (0 at padding).
        """
        B = cur_emb.size(0)
        if index is None:  # gathered: a table of B*K rows
            K, L = ctx_mask.shape[1:]
            index = torch.arange(B * K, device=ctx_emb.device).view(B, K)
            ctx_mask = ctx_mask.reshape(B * K, L)
            ctx_emb = ctx_emb.reshape(B * K * L, -1)[ctx_mask.reshape(-1)]
        K, L = index.size(1), ctx_mask.size(1)
        caps = self.capsules
        q = self.query_proj((cur_emb * cur_mask.unsqueeze(-1).to(cur_emb)).sum(1))

        # every context word of the table once: u = f_e(emb) + b (+ f_k(onehot(k)) per row below)
        e = ctx_emb.size(-1)
        f_e, f_k = self.input_proj.weight[:, :e], self.input_proj.weight[:, e:]
        u_words = F.linear(ctx_emb, f_e, self.input_proj.bias)  # [R or distinct words, D]
        if ctx_words is None:
            ctx_words = torch.arange(u_words.size(0), device=u_words.device)
        dist = f_k.t()[:K]  # f_k(onehot(k)) for k = 1..K: [K, D]
        # a zero row after each (index R / K): padded slots read it
        R = ctx_words.numel()
        ctx_words = torch.cat([ctx_words, ctx_words.new_full((1,), u_words.size(0))])  # R -> zero row
        u_words = torch.cat([u_words, u_words.new_zeros(1, u_words.size(1))])
        dist = torch.cat([dist, dist.new_zeros(1, dist.size(1))])

        # pack each row's context words, in (k, l) order: slot -> (word, distance)
        rows = index.clamp(min=0)
        present = ctx_mask[rows] & index.ge(0).unsqueeze(-1)  # [B, K, L]
        first = torch.cumsum(ctx_mask.sum(1), 0) - ctx_mask.sum(1)  # word number of row starts
        word_no = first[rows].unsqueeze(-1) + torch.cumsum(ctx_mask[rows], -1) - 1  # [B, K, L]
        n = present.flatten(1).sum(1)  # context words per row
        N = max(int(n.max()) if B else 0, 1)
        order = torch.argsort((~present).flatten(1).to(torch.int8), dim=1, stable=True)[:, :N]
        mask = torch.arange(N, device=n.device).unsqueeze(0) < n.unsqueeze(1)  # [B, N]
        slot_word = ctx_words[torch.where(mask, word_no.flatten(1).gather(1, order), R)]
        slot_dist = torch.where(mask, order // L, K)
        # index_select (backward: index_add) rather than advanced indexing (index_put)
        u = u_words.index_select(0, slot_word.reshape(-1)) + dist.index_select(0, slot_dist.reshape(-1))
        out = caps(u.view(B, N, -1), mask, q, return_history)
        if not return_history:
            return out
        v, c, p = out  # [iters, B, N, m] -> positions (k, l) of the gathered form
        def unpack(h):
            full = h.new_zeros(h.size(0), B, K * L, h.size(-1))
            pos = order.unsqueeze(0).unsqueeze(-1).expand(h.size(0), -1, -1, h.size(-1))
            return full.scatter(2, pos, h * mask[None, :, :, None].to(h))
        return v, unpack(c), unpack(p)


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
        # one routing for both networks (same shapes, same batch): fewer small operations
        v_enc, v_dec = route_together([self.caps_enc, self.caps_dec], [src_emb, tgt_emb], [src_mask, tgt_mask])
        return pearson(v_enc.flatten(1), v_dec.flatten(1))


def gather_context_embeddings(
    embed_tokens: nn.Module, table: Tensor, index: Tensor, pad: int, eos: int
) -> Tuple[Tensor, Tensor]:
    """Embed each unique context sentence once and gather the K context sentences of every
    batch row: ``([B, K, L, E], [B, K, L] word mask)``; EOS and padding are not words."""
    out = cb.gather_rows(embed_tokens(table), index)  # [B, K, L, E]
    return out, cb.gather_rows(word_mask(table, pad, eos), index, fill=False)


def word_mask(tokens: Tensor, pad: int, eos: int) -> Tensor:
    return tokens.ne(pad) & tokens.ne(eos)


__all__ = ["QueryGuidedCapsuleNetwork", "PCCRegularizer", "gather_context_embeddings", "word_mask"]
