"""Hierarchical Attention Network (Miculicich et al. 2018, paper 002; SPEC §3.3).

For query states ``h`` (``[T, B, C]``) and the states of the K previous sentences of each
batch row:

* word level: ``q_w = f_w(h)``, ``s_j = LN(MultiHead(q_w, {h^j_i}))`` over the words of
  context sentence ``j`` (the K sentences are folded into the batch: one attention call);
* sentence level: ``q_s = f_s(h)``, ``a = LN(MultiHead(q_s, {s_j}))``,
  ``d = LN(a + FFN(a))``;
* context gate: ``λ = σ(W_h h + W_d d)``, ``h̃ = λ h + (1 - λ) d``.

Context states are given as a *table* ``values [U, L, C]`` (one row per context sentence,
``values_pad [U, L]`` True at padding) and an index ``[B, K]`` into it (``-1``: no such
sentence), so that a sentence shared by several rows of a batch is stored once and beam
search only reorders the index. Padding words and missing sentences take no part; a row with
no context sentence at all gets ``h`` back unchanged (no softmax over an all-masked row is
ever taken: masked rows attend to a dummy position whose result is discarded).

Incremental decoding: the word-level keys/values of the context are projected once (at the
first step) and kept in ``incremental_state`` like fairseq's encoder-decoder attention.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor


class FoldedMultiheadAttention(MultiheadAttention):
    """Encoder-decoder attention whose batch is ``B * fold`` rows (row ``b * fold + k``):
    beam reordering of the cached keys expands the ``[B]`` order over the folded rows."""

    fold: int = 1

    def set_beam_size(self, beam_size):
        """fairseq's beam trick (one key copy per sentence) assumes an unfolded batch."""

    def reorder_incremental_state(self, incremental_state, new_order):
        order = (new_order[:, None] * self.fold + torch.arange(self.fold, device=new_order.device)).view(-1)
        return super().reorder_incremental_state(incremental_state, order)


class HierarchicalAttention(nn.Module):
    """Word- and sentence-level attention over previous sentences plus the context gate.

    Args:
        embed_dim: size of the query states ``h`` (and of the output).
        heads: attention heads of both levels.
        ffn_dim: hidden size of the sentence-level FFN.
        dropout / attention_dropout: as in the Transformer.
        context_dim: size of the context states (default ``embed_dim``).
    """

    def __init__(self, embed_dim, heads, ffn_dim, dropout=0.1, attention_dropout=0.0, context_dim=None):
        super().__init__()
        context_dim = context_dim or embed_dim
        self.f_w = nn.Linear(embed_dim, embed_dim)
        self.f_s = nn.Linear(embed_dim, embed_dim)
        self.word_attn = FoldedMultiheadAttention(
            embed_dim, heads, kdim=context_dim, vdim=context_dim, dropout=attention_dropout,
            encoder_decoder_attention=True,
        )
        self.word_norm = LayerNorm(embed_dim)
        self.sent_attn = FoldedMultiheadAttention(  # fold 1: never incremental, no beam trick
            embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True
        )
        self.sent_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.ffn_norm = LayerNorm(embed_dim)
        self.gate = nn.Linear(2 * embed_dim, embed_dim)  # [W_h; W_d] on [h; d]
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        #: analysis hook (``docctx-score plot``): when a list, every call appends the
        #: sentence-level attention weights ``[T, B, K]`` (head average), the mean gate
        #: ``λ`` ``[T, B]`` and the rows that have context ``[B]``
        self.record: Optional[list] = None
        self._cache_key = f"han_word_kv_{id(self)}"

    def _project_table(self, values: Tensor, values_pad: Tensor):
        """Word-level keys and values ``[U, L, C]`` of the table: the real words only, with
        one matmul for both (zeros at padding, which is masked anyway)."""
        mha = self.word_attn
        real = ~values_pad
        C = mha.embed_dim
        weight = torch.cat([mha.k_proj.weight, mha.v_proj.weight])
        bias = None if mha.k_proj.bias is None else torch.cat([mha.k_proj.bias, mha.v_proj.bias])
        kv = F.linear(values[real], weight, bias)  # [R, 2C]
        tab = kv.new_zeros(*values_pad.shape, 2 * C)
        tab[real] = kv
        return tab[..., :C], tab[..., C:]

    def _word_level(self, h: Tensor, values: Optional[Tensor], values_pad: Optional[Tensor], index: Tensor,
                    incremental_state=None) -> Tensor:
        """Multi-head attention of every query over the words of each of its K context
        sentences: ``[T, B*K, C]`` (row ``b*K + k``), with ``word_attn``'s projections. The
        query is projected once per position and the keys/values once per *table row*
        (not per (row, distance) pair as a folded ``MultiheadAttention`` call would); with
        ``incremental_state`` the projected table is computed at the first step only (beam
        search reorders the index, never the table), and the keys/values gathered for the
        rows are reused for as long as the rows' index stays the same."""
        mha = self.word_attn
        T, B, C = h.shape
        K = index.size(1)
        H, hd = mha.num_heads, mha.head_dim
        cache = None
        if incremental_state is not None:
            cache = incremental_state.setdefault(self._cache_key, {})
        if cache and "k" in cache:
            k_tab, v_tab, pad_tab = cache["k"], cache["v"], cache["pad"]
        else:
            k_tab, v_tab = self._project_table(values, values_pad)
            pad_tab = values_pad
            if cache is not None:
                cache.update(k=k_tab, v=v_tab, pad=pad_tab)
        U, L = pad_tab.shape
        present = index >= 0
        rows = index.clamp(min=0)
        q = (mha.q_proj(self.f_w(h)) * mha.scaling).view(T, B, H, hd).permute(1, 2, 0, 3)  # [B, H, T, d]
        if cache is not None and "index" in cache and torch.equal(cache["index"], index):
            # the rows' context is what it was at the last step (beam search moves hypotheses
            # between the beams of one sentence, whose context is the same): no new gather
            k, v, kpm = cache["rows_k"], cache["rows_v"], cache["rows_mask"]
        else:
            flat = rows.reshape(-1)  # index_select: its backward is index_add, not index_put
            k = k_tab.view(U, L, H, hd).permute(0, 2, 3, 1).index_select(0, flat).view(B, K, H, hd, L)
            v = v_tab.view(U, L, H, hd).transpose(1, 2).index_select(0, flat).view(B, K, H, L, hd)
            kpm = pad_tab.index_select(0, flat).view(B, K, L) | ~present.unsqueeze(-1)  # [B, K, L]
            kpm[..., 0] &= present  # missing sentences attend to a dummy word (result discarded)
            if cache is not None:
                cache.update(index=index, rows_k=k, rows_v=v, rows_mask=kpm)
        logits = torch.matmul(q.unsqueeze(1), k)  # [B, K, H, T, L]
        logits = logits.masked_fill(kpm[:, :, None, None, :], float("-inf"))
        probs = mha.dropout_module(torch.softmax(logits.float(), dim=-1).type_as(logits))
        attn = torch.matmul(probs, v)  # [B, K, H, T, d]
        attn = attn.permute(3, 0, 1, 2, 4).reshape(T, B * K, C)
        return mha.out_proj(attn)

    def _sentence_level(self, query: Tensor, s: Tensor, mask: Tensor) -> Tensor:
        """``sent_attn`` (its parameters, fairseq's results) of each query ``[N, C]`` over its
        own K summaries ``s [N, K, C]`` (``mask [N, K]`` True = missing), without projecting
        the summaries: per head ``q·(W_k s_j + b_k) = (W_kᵀ q)·s_j + q·b_k``, whose last term is
        the same for every j and drops out of the softmax, and ``Σ_j p_j (W_v s_j + b_v) =
        W_v (Σ_j p_j s_j) + b_v``: 2·C² multiply-adds per query instead of 2·K·C²."""
        mha = self.sent_attn
        H, d = mha.num_heads, mha.head_dim
        N, K, C = s.shape
        q = (mha.q_proj(query) * mha.scaling).view(N, H, d)
        r = torch.einsum("nhd,hdc->nhc", q, mha.k_proj.weight.view(H, d, -1))  # W_k^hᵀ q^h
        scores = torch.bmm(r, s.transpose(1, 2)).masked_fill(mask.unsqueeze(1), float("-inf"))  # [N, H, K]
        probs = mha.dropout_module(torch.softmax(scores.float(), dim=-1).type_as(scores))
        o = torch.einsum("nhc,hdc->nhd", torch.bmm(probs, s), mha.v_proj.weight.view(H, d, -1))
        if mha.v_proj.bias is not None:
            o = o + mha.v_proj.bias.view(H, d)
        return mha.out_proj(o.reshape(N, H * d))

    def forward(self, h: Tensor, values: Optional[Tensor], values_pad: Optional[Tensor], index: Tensor,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None) -> Tensor:
        """``h [T, B, C]``; ``values [U, L, Cv]``, ``values_pad [U, L]`` (bool, True = pad);
        ``index [B, K]`` rows of ``values`` (-1 = none). Returns ``h̃ [T, B, C]``.

        With ``incremental_state`` the projected context is computed at the first call
        only (``values`` may then be ``None`` at later calls)."""
        T, B, C = h.shape
        K = index.size(1)
        present = index >= 0  # [B, K]
        has_ctx = present.any(1)  # [B]
        s = self._word_level(h, values, values_pad, index, incremental_state).view(T, B, K, C)
        s = self.word_norm(self.dropout(s))
        # sentence level: one query per (t, b) over its K sentence summaries
        s = s.permute(2, 0, 1, 3).reshape(K, T * B, C)
        q_s = self.f_s(h).reshape(1, T * B, C)
        spm = ~present & has_ctx[:, None]  # rows without any context: unmasked, discarded below
        spm = spm.unsqueeze(0).expand(T, B, K).reshape(T * B, K)
        record = self.record is not None
        if record:  # the attention weights are wanted: fairseq's MultiheadAttention
            a, w = self.sent_attn(query=q_s, key=s, value=s, key_padding_mask=spm, static_kv=True,
                                  need_weights=True)
        else:
            a = self._sentence_level(q_s.view(T * B, C), s.transpose(0, 1), spm)
        a = self.sent_norm(self.dropout(a)).view(T, B, C)
        d = self.ffn_norm(a + self.dropout(self.fc2(F.relu(self.fc1(a)))))
        lam = torch.sigmoid(self.gate(torch.cat([h, d], -1)))
        out = lam * h + (1 - lam) * d
        if record:
            self.record.append({"sentence_attn": w.detach().view(T, B, K), "gate": lam.detach().mean(-1),
                                "has_context": has_ctx.detach()})
        return torch.where(has_ctx.view(1, B, 1), out, h)

