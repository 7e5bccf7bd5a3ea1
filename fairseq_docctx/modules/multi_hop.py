"""The context sublayer of the Multi-Hop Transformer (Zhang et al. 2021, §3.2-3.3).

In layer ``n`` a query ``q [T, B, C]`` (the encoder's self-attention output ``A_s``, or the
decoder's draft-attention output ``F_t``) reads the layer-``n`` states of the K previous
sentences of one side (source sentences, or target drafts) and is combined with what it read
by the context gate:

* **multi-hop** (Eqs. 3-4 and 8-9): hops in sentence order; the first hop's query is ``q``
  over the farthest sentence, each later hop's query is the previous hop's output,
  ``B^{i-j} = MHA(B^{i-j-1}, A^{(n)}_{c^{i-j}})``; the last hop's output is ``B^{i-1}``.
  With ``direction="r2l"`` (§5.3, Table 3) the hops go from the nearest sentence to the
  farthest. Each hop is a multi-head attention in fairseq's residual block (dropout, residual
  connection, LayerNorm after it, or before it with ``normalize_before``, as every sublayer of
  fairseq's Transformer layers). With ``shared_hops`` one attention and LayerNorm make every
  hop of the layer (the configuration of the paper's parameter count, Table 1: see
  :func:`fairseq_docctx.models.mht_transformer.parameter_table`); otherwise each distance has
  its own;
* **concat** (§5.1, Table 2): one attention over the concatenated states of the K sentences;
* **hierarchical** (§5.1, Table 2): word-level attention inside each sentence, then
  sentence-level attention over the K results, as in Miculicich et al. (2018, §2.1), without
  their FFN and gate (:class:`~fairseq_docctx.modules.han.HierarchicalAttention`);
* **context gate** (Eqs. 5-6 and 10): ``α = σ(W_a q + W_b B)``, ``out = α q + (1 - α) B``.

Context states are a *table* ``states [L, U, C]`` (time-major, one column per unique
sentence of the batch, ``pad [U, L]`` True at padding) and an index ``[B, K]`` (column 0 =
the previous sentence, -1 = none): a sentence shared by several rows is encoded once. A hop
over a missing sentence is skipped (its query passes on unchanged), so a row without context
gets ``q`` back.

Incremental decoding: the attentions are fairseq ``MultiheadAttention`` modules with static
keys (``encoder_decoder_attention``), so the projected context is computed at the first
step and kept, and reordered, in fairseq's incremental state; an attention shared by the
hops keeps the keys of each distance in a slot of its own (:class:`HopAttention`).
"""
from typing import Dict, List, NamedTuple, Optional

import torch
import torch.nn as nn
from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor

from .han import HierarchicalAttention

CONTEXT_MODULES = ("multi-hop", "concat", "hierarchical")
DIRECTIONS = ("l2r", "r2l")

IncrementalState = Optional[Dict[str, Dict[str, Optional[Tensor]]]]


def static_attention(embed_dim, heads, attention_dropout):
    """A fairseq attention whose keys are fixed for a sentence (projected once in incremental
    decoding and kept, reordered, in fairseq's incremental state)."""
    return MultiheadAttention(embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True)


class HopAttention(MultiheadAttention):
    """A fairseq attention with static keys that reads ``slots`` sentences in one decoding
    step (the hops of one layer and side with shared weights, one sentence per distance).
    The projected keys of each sentence are kept in a slot of their own of fairseq's
    incremental state: :meth:`forward` takes ``slot`` (the hop's index column), and
    :meth:`reorder_incremental_state` reorders every slot with the beams."""

    def __init__(self, embed_dim: int, heads: int, attention_dropout: float, slots: int):
        super().__init__(embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True)
        self.slots = slots
        self._slot = 0  # the slot of the call in progress (fairseq's attention reads its buffer
        # through _get_input_buffer / _set_input_buffer, which take no slot)

    def forward(self, query, key, value, *args, slot: int = 0, **kwargs):
        if not 0 <= slot < self.slots:
            raise IndexError(f"HopAttention: slot {slot} of {self.slots}")
        self._slot = slot
        try:
            return super().forward(query, key, value, *args, **kwargs)
        finally:
            self._slot = 0

    def _get_input_buffer(self, incremental_state):
        result = self.get_incremental_state(incremental_state, f"attn_state.{self._slot}")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer):
        return self.set_incremental_state(incremental_state, f"attn_state.{self._slot}", buffer)

    def reorder_incremental_state(self, incremental_state, new_order):
        try:
            for slot in range(self.slots):
                self._slot = slot
                incremental_state = super().reorder_incremental_state(incremental_state, new_order)
        finally:
            self._slot = 0
        return incremental_state


def cached(attn: MultiheadAttention, incremental_state: IncrementalState, slot: int = 0) -> bool:
    """Whether ``attn`` holds its projected keys (of ``slot``, for a :class:`HopAttention`)
    in ``incremental_state`` (later steps of incremental decoding: its keys need not be
    given again)."""
    if incremental_state is None:
        return False
    if isinstance(attn, HopAttention):
        attn._slot = slot
        try:
            buf = attn._get_input_buffer(incremental_state)
        finally:
            attn._slot = 0
    else:
        buf = attn._get_input_buffer(incremental_state)
    return buf is not None and "prev_key" in buf


class RowKeys(NamedTuple):
    """The states one attention sublayer reads for a set of query rows, gathered from a
    table: ``key [W, n, C]`` (time-major), ``kpm [n, W]`` (True at padding) and ``present
    [n]`` (rows that have the sentence; the others pass their query through)."""

    key: Tensor
    kpm: Tensor
    present: Tensor


def gather_row_keys(states: Tensor, pad: Tensor, columns: List[Tensor], groups: List[Tensor]) -> List[List[RowKeys]]:
    """The table sentences ``columns`` (each ``[B]`` table rows, -1 = none: e.g. one column
    of the context index per hop) of the query rows of every group ``groups`` (row numbers),
    from ``states [L, U, C]`` / ``pad [U, L]``: ``out[g][c]``, each cut to the longest
    sentence it holds. All of it is one ``index_select`` of the table: its backward
    accumulates into one table-sized gradient, where gathering group by group and column by
    column would build one table-sized gradient per gather."""
    sel = [col.index_select(0, g) for g in groups for col in columns]
    if not sel:
        return [[] for _ in groups]
    flat = torch.cat(sel)
    rows = flat.clamp(min=0)
    left = not bool(pad[:, -1].any())  # every sentence ends in EOS: no padding at the end
    lengths = (~pad).sum(1).index_select(0, rows).masked_fill(flat < 0, 0)
    sizes = [len(r) for r in sel]
    gathered = states.index_select(1, rows).split(sizes, dim=1)
    pads = pad.index_select(0, rows).split(sizes)
    widths = torch.stack([x.max() for x in lengths.split(sizes)]).tolist()
    out, i = [], 0
    for _ in groups:
        row = []
        for r in sel[i: i + len(columns)]:
            w = max(int(widths[i]), 1)
            key, kpm = gathered[i], pads[i]
            key = key[key.size(0) - w:] if left else key[:w]
            kpm = kpm[:, kpm.size(1) - w:] if left else kpm[:, :w]
            present = r >= 0
            row.append(RowKeys(key, kpm & present.unsqueeze(1), present))  # absent rows: unmasked, discarded
            i += 1
        out.append(row)
    return out


def attend_rows(attn, norm, dropout, query, states, pad, rows, incremental_state=None,
                normalize_before=False, need_weights=False, keys: Optional[RowKeys] = None,
                slot: int = 0):
    """One attention sublayer of ``query [T, B, C]`` over the table sentences ``rows [B]``
    (-1 = none: the query passes unchanged) in fairseq's residual block (LayerNorm after the
    residual connection, or before the attention with ``normalize_before``), or over
    ``keys`` gathered before (:func:`gather_row_keys`; ``states``, ``pad``, ``rows`` unused);
    ``slot``: the incremental-state slot of a :class:`HopAttention`. Returns ``(output,
    attention weights [B, T, L] or None)``."""
    if keys is not None:
        present = keys.present
        if not bool(present.any()):
            return query, None
        key, kpm = keys.key, keys.kpm
    else:
        present = rows >= 0
        if cached(attn, incremental_state, slot):  # later decoding steps: the keys were projected
            key = kpm = None
        elif not bool(present.any()):  # no row has this sentence (e.g. a batch of first sentences)
            return query, None
        else:
            r = rows.clamp(min=0)
            key, kpm = states.index_select(1, r), pad.index_select(0, r)
    x = norm(query) if normalize_before else query
    # static keys matter to the incremental state only; without it fairseq's attention takes
    # PyTorch's fused path
    extra = {"slot": slot} if isinstance(attn, HopAttention) else {}
    y, w = attn(query=x, key=key, value=key, key_padding_mask=kpm, incremental_state=incremental_state,
                static_kv=incremental_state is not None, need_weights=need_weights, **extra)
    y = query + dropout(y)
    if not normalize_before:
        y = norm(y)
    if keys is not None and bool(present.all()):
        return y, w
    return torch.where(present.view(1, -1, 1), y, query), w


class ContextHops(nn.Module):
    """One side's context sublayer (see the module doc).

    Args:
        embed_dim: size of the queries and of the context states.
        heads: attention heads.
        context_size: K.
        module: ``multi-hop``, ``concat`` or ``hierarchical``.
        direction: ``l2r`` (farthest sentence first, the paper's) or ``r2l``.
        dropout / attention_dropout: as in the Transformer.
        normalize_before: pre-norm residual blocks (``--encoder/decoder-normalize-before``)
            around the hops and the concatenation's attention (the ``hierarchical`` module
            keeps the LayerNorms of Miculicich et al. 2018, after each attention).
        shared_hops: ``multi-hop`` only: one attention and LayerNorm for every hop distance
            (:class:`HopAttention`) instead of one per distance.
    """

    def __init__(self, embed_dim: int, heads: int, context_size: int, module: str = "multi-hop",
                 direction: str = "l2r", dropout: float = 0.1, attention_dropout: float = 0.0,
                 normalize_before: bool = False, shared_hops: bool = False):
        super().__init__()
        if module not in CONTEXT_MODULES:
            raise ValueError(f"context module {module!r}: one of {', '.join(CONTEXT_MODULES)}")
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
        if context_size < 1:
            raise ValueError(f"context size {context_size}: at least 1")
        self.module, self.direction, self.context_size = module, direction, context_size
        self.normalize_before = normalize_before
        self.shared_hops = shared_hops and module == "multi-hop"
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        if module == "hierarchical":
            self.han = HierarchicalAttention(embed_dim, heads, None, dropout, attention_dropout,
                                             ffn_and_gate=False)
        elif self.shared_hops:
            self.attn = nn.ModuleList([HopAttention(embed_dim, heads, attention_dropout, context_size)])
            self.norm = nn.ModuleList([LayerNorm(embed_dim)])
        else:
            n = context_size if module == "multi-hop" else 1
            self.attn = nn.ModuleList(static_attention(embed_dim, heads, attention_dropout) for _ in range(n))
            self.norm = nn.ModuleList(LayerNorm(embed_dim) for _ in range(n))
        # context gate, Eq. 5: α = σ(W_a q + W_b B)
        self.gate_a = nn.Linear(embed_dim, embed_dim)
        self.gate_b = nn.Linear(embed_dim, embed_dim, bias=False)

    def hop(self, j: int):
        """The attention, LayerNorm and incremental-state slot of the hop over index column
        ``j`` (distance ``j + 1``)."""
        if self.shared_hops:
            return self.attn[0], self.norm[0], j
        return self.attn[j], self.norm[j], 0

    def hop_order(self, k: int):
        """Columns of the index in hop order: farthest first (``l2r``) or nearest first."""
        cols = list(range(min(k, self.context_size)))
        return cols[::-1] if self.direction == "l2r" else cols

    def read(self, query: Tensor, states: Tensor, pad: Tensor, index: Tensor,
             incremental_state: IncrementalState = None, weights: Optional[list] = None,
             keys: Optional[List[RowKeys]] = None) -> Tensor:
        """``B``: what ``query`` reads of the K sentences (``query`` itself for rows without
        any). ``weights``: a list that receives each hop's ``(distance, [B, T, L] weights)``.
        ``keys``: multi-hop only, the states of each index column gathered before
        (:func:`gather_row_keys`, column ``j`` = distance ``j + 1``)."""
        if self.module == "multi-hop":
            b = query
            k = len(keys) if keys is not None else index.size(1)
            for j in self.hop_order(k):
                attn, norm, slot = self.hop(j)
                if keys is not None:
                    b, w = attend_rows(attn, norm, self.dropout, b, None, None, None, None,
                                       self.normalize_before, weights is not None, keys[j])
                else:
                    b, w = attend_rows(attn, norm, self.dropout, b, states, pad, index[:, j],
                                       incremental_state, self.normalize_before, weights is not None,
                                       slot=slot)
                if weights is not None:
                    weights.append((j + 1, w))
            return b
        index = index[:, : self.context_size]
        if self.module == "concat":
            return self._concat(query, states, pad, index, incremental_state)
        out = self.han(query, states.transpose(0, 1), pad, index, incremental_state)
        return out

    def _concat(self, query, states, pad, index, incremental_state):
        attn, norm = self.attn[0], self.norm[0]
        present = index >= 0
        has = present.any(1)
        if cached(attn, incremental_state):
            key = kpm = None
        else:
            K = index.size(1)
            r = index.clamp(min=0)
            L, B = states.size(0), index.size(0)
            key = states.index_select(1, r.reshape(-1)).view(L, B, K, -1).transpose(1, 2).reshape(K * L, B, -1)
            kpm = (pad.index_select(0, r.reshape(-1)).view(B, K, L) | ~present.unsqueeze(2)).reshape(B, K * L)
            kpm = kpm & has.unsqueeze(1)  # rows without context: unmasked, discarded below
        x = norm(query) if self.normalize_before else query
        y, _ = attn(query=x, key=key, value=key, key_padding_mask=kpm, incremental_state=incremental_state,
                    static_kv=incremental_state is not None, need_weights=False)
        y = query + self.dropout(y)
        if not self.normalize_before:
            y = norm(y)
        return torch.where(has.view(1, -1, 1), y, query)

    def forward(self, query: Tensor, states: Tensor, pad: Tensor, index: Tensor,
                incremental_state: IncrementalState = None, weights: Optional[list] = None,
                keys: Optional[List[RowKeys]] = None) -> Tensor:
        """``query [T, B, C]``; ``states [L, U, C]``, ``pad [U, L]``; ``index [B, K]``; or, for
        the multi-hop module, ``keys`` (the gathered states of each index column, see
        :meth:`read`). Returns the gated ``α q + (1 - α) B`` (Eq. 6 / Eq. 10)."""
        b = self.read(query, states, pad, index, incremental_state, weights, keys)
        alpha = torch.sigmoid(self.gate_a(query) + self.gate_b(b))
        if weights is not None:
            weights.append(("gate", alpha.mean(-1).transpose(0, 1)))  # [B, T]
        return alpha * query + (1 - alpha) * b


__all__ = ["ContextHops", "HopAttention", "RowKeys", "gather_row_keys", "attend_rows", "cached", "static_attention", "CONTEXT_MODULES", "DIRECTIONS"]
