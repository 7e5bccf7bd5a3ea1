"""Hierarchical Attention Network (Miculicich et al. 2018, §2.1, Eqs. 3-6;
the context gate §2.2, Eqs. 7-8).

For query states ``h`` (``[T, B, C]``) and the states of the K previous sentences of each
batch row:

* word level: ``q_w = f_w(h)``, ``s_j = LN(MultiHead(q_w, {h^j_i}))`` over the words of
  context sentence ``j`` (all (row, sentence) pairs of a batch attend in a few groups of
  similar sentence length);
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

from ..data import length_groups


def chained_projection(x: Tensor, outer: nn.Linear, inner: nn.Linear, scale: float = 1.0,
                       cache: Optional[dict] = None, key: str = "") -> Tensor:
    """``outer(inner(x)) * scale`` (two linear maps of a query, e.g. HAN's ``f_w`` and the
    attention's ``W_q``). With more rows than features it is computed as one linear map whose
    weight is ``scale · W_outer W_inner`` (formed once per call at ``C³`` multiply-adds, or once
    per sentence batch when ``cache`` is given, for incremental decoding): ``N·C²`` instead of
    ``2·N·C²`` multiply-adds, forward and backward. Same parameters, same result."""
    rows = x.numel() // max(x.size(-1), 1)
    if cache is None and rows <= inner.in_features:
        return outer(inner(x)) * scale
    composed = None if cache is None else cache.get(key)
    if composed is None:
        weight = outer.weight @ inner.weight
        bias = outer.bias if inner.bias is None else F.linear(inner.bias, outer.weight, outer.bias)
        composed = (weight * scale, None if bias is None else bias * scale)
        if cache is not None:
            cache[key] = composed
    return F.linear(x, *composed)


class HierarchicalAttention(nn.Module):
    """Word- and sentence-level attention over previous sentences plus the context gate.

    Args:
        embed_dim: size of the query states ``h`` (and of the output).
        heads: attention heads of both levels.
        ffn_dim: hidden size of the sentence-level FFN (unused without ``ffn_and_gate``).
        dropout / attention_dropout: as in the Transformer.
        context_dim: size of the context states (default ``embed_dim``).
    """

    def __init__(self, embed_dim, heads, ffn_dim, dropout=0.1, attention_dropout=0.0, context_dim=None,
                 ffn_and_gate=True):
        super().__init__()
        #: False: the module ends at the sentence level (no FFN, no gate; rows without context
        #: get ``h`` back), for a model that combines the summary with its own gate
        self.ffn_and_gate = ffn_and_gate
        context_dim = context_dim or embed_dim
        self.f_w = nn.Linear(embed_dim, embed_dim)
        self.f_s = nn.Linear(embed_dim, embed_dim)
        # fairseq attentions for their parameters (and dropout): the attention itself is
        # computed in _word_level / _sentence_level
        self.word_attn = MultiheadAttention(
            embed_dim, heads, kdim=context_dim, vdim=context_dim, dropout=attention_dropout,
            encoder_decoder_attention=True,
        )
        self.word_norm = LayerNorm(embed_dim)
        self.sent_attn = MultiheadAttention(
            embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True
        )
        self.sent_norm = LayerNorm(embed_dim)
        if ffn_and_gate:
            self.fc1 = nn.Linear(embed_dim, ffn_dim)
            self.fc2 = nn.Linear(ffn_dim, embed_dim)
            self.ffn_norm = LayerNorm(embed_dim)
            self.gate = nn.Linear(2 * embed_dim, embed_dim)  # [W_h; W_d] on [h; d]
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self._cache_key = f"han_word_kv_{id(self)}"

    def _project_table(self, values: Tensor, values_pad: Tensor):
        """Word-level keys and values of the table's real words, with one matmul for both:
        ``kv [R + 1, 2C]`` (the last row zeros, for padding) and ``slot [U, L]``, the row of
        ``kv`` of each table position (``R`` at padding). Kept compact: gathering from it
        (and its backward) costs the real words, not the padded table."""
        mha = self.word_attn
        real = ~values_pad
        weight = torch.cat([mha.k_proj.weight, mha.v_proj.weight])
        bias = None if mha.k_proj.bias is None else torch.cat([mha.k_proj.bias, mha.v_proj.bias])
        kv = F.linear(values[real], weight, bias)  # [R, 2C]
        kv = torch.cat([kv, kv.new_zeros(1, kv.size(1))])
        slot = torch.full(values_pad.shape, kv.size(0) - 1, dtype=torch.long, device=kv.device)
        slot[real] = torch.arange(kv.size(0) - 1, device=kv.device)
        return kv, slot

    def _pair_groups(self, kv: Tensor, slot: Tensor, pad_tab: Tensor, index: Tensor, T: int):
        """The (row, distance) pairs that have a context sentence, in groups of similar
        sentence length (`data.length_groups`): per group the pairs' query rows ``b`` (pair
        ``b*K + k``), and keys ``[n, H, d, w]``, values ``[n, H, w, d]`` and pad mask ``[n, w]``
        cut to the group's longest sentence ``w`` (the table is padded to the batch's longest
        sentence: attending over it would be mostly padding). The keys/values of all groups
        are gathered from ``kv`` in one call. Also returns the pairs without a sentence
        (``missing``) and ``inv``, which puts the groups' outputs followed by those of the
        missing pairs back in pair order; all of it depends on ``index`` only (reused across
        beam-search steps)."""
        mha = self.word_attn
        H, hd = mha.num_heads, mha.head_dim
        U, L = pad_tab.shape
        K = index.size(1)
        pairs = (index >= 0).view(-1).nonzero().squeeze(1)
        rows = index.view(-1).index_select(0, pairs)
        lengths = (~pad_tab).sum(1).index_select(0, rows)
        left = bool((pad_tab[:, 1:] <= pad_tab[:, :-1]).all())  # padding, then words
        right = bool((pad_tab[:, 1:] >= pad_tab[:, :-1]).all())  # words, then padding
        # a key costs ~T query products: fewer, wider groups for short queries (decoding)
        overhead = max(16, 3072 // max(T, 1))
        spans = []
        for g in (length_groups.length_buckets(lengths, overhead) if pairs.numel() else []):
            r = rows.index_select(0, g)
            w = int(lengths.index_select(0, g).max()) if (left or right) else L
            cols = slice(L - w, L) if left else slice(0, w)
            spans.append((pairs.index_select(0, g), slot.index_select(0, r)[:, cols],
                          pad_tab.index_select(0, r)[:, cols]))
        missing = (index < 0).view(-1).nonzero().squeeze(1)
        order = torch.cat([p for p, _, _ in spans] + [missing])
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel(), device=order.device)
        if not spans:
            return [], missing, inv
        gathered = kv.index_select(0, torch.cat([sl.reshape(-1) for _, sl, _ in spans]))
        groups, start = [], 0
        for p, sl, kpm in spans:
            n, w = sl.shape
            kv_g = gathered[start : start + n * w].view(n, w, 2, H, hd)
            start += n * w
            # contiguous: matmul would copy these strided views at every call (in beam search,
            # at every step that reuses the groups)
            groups.append((torch.div(p, K, rounding_mode="floor"),
                           kv_g[:, :, 0].permute(0, 2, 3, 1).contiguous(),
                           kv_g[:, :, 1].transpose(1, 2).contiguous(), kpm))
        return groups, missing, inv

    def _word_level(self, h: Tensor, values: Optional[Tensor], values_pad: Optional[Tensor], index: Tensor,
                    incremental_state=None) -> Tensor:
        """Multi-head attention of every query over the words of each of its K context
        sentences: ``[T, B*K, C]`` (row ``b*K + k``; zeros where there is no sentence), with
        ``word_attn``'s projections. The query is projected once per position and the
        keys/values once per *table row* (not per (row, distance) pair as a folded
        ``MultiheadAttention`` call would); pairs attend in groups of similar sentence length.
        With ``incremental_state`` the projected table is computed at the first step only
        (beam search reorders the index, never the table), and the keys/values gathered for
        the pairs are reused for as long as the rows' index stays the same."""
        mha = self.word_attn
        T, B, C = h.shape
        K = index.size(1)
        H, hd = mha.num_heads, mha.head_dim
        cache = None
        if incremental_state is not None:
            cache = incremental_state.setdefault(self._cache_key, {})
        if cache and "kv" in cache:
            kv, slot, pad_tab = cache["kv"], cache["slot"], cache["pad"]
        else:
            kv, slot = self._project_table(values, values_pad)
            pad_tab = values_pad
            if cache is not None:
                cache.update(kv=kv, slot=slot, pad=pad_tab)
        q = chained_projection(h, mha.q_proj, self.f_w, mha.scaling, cache, "q_w")
        q = q.view(T, B, H, hd).permute(1, 2, 0, 3)  # [B, H, T, d]
        if cache is not None and "index" in cache and torch.equal(cache["index"], index):
            # the rows' context is what it was at the last step (beam search moves hypotheses
            # between the beams of one sentence, whose context is the same): no new gather
            groups, missing, inv = cache["groups"]
        else:
            groups, missing, inv = self._pair_groups(kv, slot, pad_tab, index, T)
            if cache is not None:
                cache.update(index=index, groups=(groups, missing, inv))
        parts = []
        for qrows, k, v, kpm in groups:
            logits = torch.matmul(q.index_select(0, qrows), k)  # [n, H, T, w]
            logits = logits.masked_fill(kpm[:, None, None, :], float("-inf"))
            probs = mha.dropout_module(torch.softmax(logits.float(), dim=-1).type_as(logits))
            parts.append(torch.matmul(probs, v))  # [n, H, T, d]
        if missing.numel():
            parts.append(q.new_zeros(missing.numel(), H, T, hd))
        attn = torch.cat(parts).index_select(0, inv)  # [B*K, H, T, d]
        attn = attn.permute(2, 0, 1, 3).reshape(T, B * K, C)
        return mha.out_proj(attn)

    def _sentence_level(self, h: Tensor, s: Tensor, mask: Tensor, cache: Optional[dict] = None,
                        return_probs: bool = False):
        """``sent_attn`` (its parameters, fairseq's results) of each query ``f_s(h)``, ``h [N, C]``,
        over its own K summaries ``s [N, K, C]`` (``mask [N, K]`` True = missing), without projecting
        the summaries: per head ``q·(W_k s_j + b_k) = (W_kᵀ q)·s_j + q·b_k``, whose last term is
        the same for every j and drops out of the softmax, and ``Σ_j p_j (W_v s_j + b_v) =
        W_v (Σ_j p_j s_j) + b_v``: 2·C² multiply-adds per query instead of 2·K·C².
        With ``return_probs`` also the attention weights ``[N, H, K]`` (before dropout)."""
        mha = self.sent_attn
        H, d = mha.num_heads, mha.head_dim
        N, K, C = s.shape
        q = chained_projection(h, mha.q_proj, self.f_s, mha.scaling, cache, "q_s").view(N, H, d)
        r = torch.einsum("nhd,hdc->nhc", q, mha.k_proj.weight.view(H, d, -1))  # W_k^hᵀ q^h
        scores = torch.bmm(r, s.transpose(1, 2)).masked_fill(mask.unsqueeze(1), float("-inf"))  # [N, H, K]
        weights = torch.softmax(scores.float(), dim=-1).type_as(scores)
        probs = mha.dropout_module(weights)
        o = torch.einsum("nhc,hdc->nhd", torch.bmm(probs, s), mha.v_proj.weight.view(H, d, -1))
        if mha.v_proj.bias is not None:
            o = o + mha.v_proj.bias.view(H, d)
        out = mha.out_proj(o.reshape(N, H * d))
        return (out, weights) if return_probs else out

    def forward(self, h: Tensor, values: Optional[Tensor], values_pad: Optional[Tensor], index: Tensor,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = False):
        """``h [T, B, C]``; ``values [U, L, Cv]``, ``values_pad [U, L]`` (bool, True = pad);
        ``index [B, K]`` rows of ``values`` (-1 = none). Returns ``h̃ [T, B, C]``.

        With ``incremental_state`` the projected context is computed at the first call
        only (``values`` may then be ``None`` at later calls).

        With ``need_weights`` returns ``(h̃, weights)``, ``weights`` a dict of
        ``sentence_attn [T, B, K]`` (the sentence-level attention over the K previous
        sentences, mean over heads; a distribution over the present ones), ``gate [T, B]``
        (``λ``, mean over channels) and ``has_context [B]`` (rows with at least one context
        sentence; the other rows' ``h`` is returned unchanged and their weights mean nothing)."""
        T, B, C = h.shape
        K = index.size(1)
        present = index >= 0  # [B, K]
        has_ctx = present.any(1)  # [B]
        s = self._word_level(h, values, values_pad, index, incremental_state).view(T, B, K, C)
        s = self.word_norm(self.dropout(s))
        # sentence level: one query per (t, b) over its K sentence summaries
        s = s.permute(2, 0, 1, 3).reshape(K, T * B, C)
        spm = ~present & has_ctx[:, None]  # rows without any context: unmasked, discarded below
        spm = spm.unsqueeze(0).expand(T, B, K).reshape(T * B, K)
        cache = None if incremental_state is None else incremental_state.get(self._cache_key)
        a = self._sentence_level(h.reshape(T * B, C), s.transpose(0, 1), spm, cache, return_probs=need_weights)
        if need_weights:
            a, probs = a
        a = self.sent_norm(self.dropout(a)).view(T, B, C)
        if not self.ffn_and_gate:
            return torch.where(has_ctx.view(1, B, 1), a, h)
        d = self.ffn_norm(a + self.dropout(self.fc2(F.relu(self.fc1(a)))))
        lam = torch.sigmoid(self.gate(torch.cat([h, d], -1)))
        out = torch.where(has_ctx.view(1, B, 1), lam * h + (1 - lam) * d, h)
        if not need_weights:
            return out
        return out, {"sentence_attn": probs.mean(1).view(T, B, K), "gate": lam.mean(-1), "has_context": has_ctx}
