"""Encoder-decoder attention over a handful of keys per batch row (QCN's context attention
over the ``m`` output capsules, Yang et al. 2019, §3.3, Eqs. 9-10), computed without projecting the queries or the
per-query outputs.

With ``S`` keys per row, ``H`` heads of size ``d`` (``E = H·d``) and fairseq's
``q = (W_q x + b_q)/√d``, ``out = W_o [Σ_j p^h_j v^h_j]_h + b_o``:

* ``q^h·k^h_j = x·(W_q^hᵀ k^h_j) + b_q^h·k^h_j`` — the ``S·H`` vectors ``W_q^hᵀ k^h_j`` (size
  ``E``) are formed once per row;
* ``W_o [Σ_j p^h_j v^h_j]_h = Σ_{h,j} p^h_j (W_o^h v^h_j)`` — so are the ``S·H`` vectors
  ``W_o^h v^h_j``.

Every query then costs ``2·E·S·H`` multiply-adds instead of the ``2·E²`` of the query and
output projections: exact (up to float rounding), and fewer operations whenever
``S·H < E`` (QCN: 4 capsules x 8 heads = 32 against 512).
"""
from typing import Optional

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor


class FewKeysAttention(MultiheadAttention):
    """:class:`fairseq.modules.MultiheadAttention` (same parameters, same results) that
    attends through the per-row products above when that is cheaper; anything else — weights
    asked for, masks, incremental state, bias_kv/zero_attn, or ``S·H >= E`` — goes to
    fairseq's implementation unchanged."""

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None, incremental_state=None,
                need_weights: bool = True, static_kv: bool = False, attn_mask: Optional[Tensor] = None,
                before_softmax: bool = False, need_head_weights: bool = False):
        H, d = self.num_heads, self.head_dim
        general = (
            key is None or value is None or need_weights or need_head_weights
            or before_softmax or key_padding_mask is not None or attn_mask is not None
            or incremental_state is not None or self.bias_k is not None or self.add_zero_attn
            or key.size(0) * H >= self.embed_dim
        )
        if general:
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights,
                                   static_kv, attn_mask, before_softmax, need_head_weights)
        S, B = key.shape[:2]
        T, E = query.size(0), self.embed_dim
        k = self.k_proj(key).view(S, B, H, d)
        v = self.v_proj(value).view(S, B, H, d)
        # W_q^hᵀ k^h_j and b_q^h·k^h_j, scaled: [B, H*S, E] and [B, 1, H*S]
        rk = torch.einsum("sbhd,hde->bhse", k, self.q_proj.weight.view(H, d, E)).reshape(B, H * S, E)
        if self.q_proj.bias is not None:
            r0 = torch.einsum("sbhd,hd->bhs", k, self.q_proj.bias.view(H, d)).reshape(B, 1, H * S)
        else:
            r0 = rk.new_zeros(B, 1, H * S)
        x = query.transpose(0, 1)  # [B, T, E]
        scores = torch.baddbmm(r0, x, rk.transpose(1, 2), beta=self.scaling, alpha=self.scaling)
        probs = torch.softmax(scores.view(B, T, H, S).float(), dim=-1).type_as(scores)
        probs = self.dropout_module(probs).view(B, T, H * S)
        # W_o^h v^h_j: [B, H*S, E]
        ov = torch.einsum("sbhd,ehd->bhse", v, self.out_proj.weight.view(E, H, d)).reshape(B, H * S, E)
        out = torch.bmm(probs, ov)
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias
        return out.transpose(0, 1), None


__all__ = ["FewKeysAttention"]
