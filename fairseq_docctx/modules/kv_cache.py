"""Decoder attentions for incremental decoding: self-attention keys and values in
preallocated buffers, encoder-decoder keys and values once per group of beams.

fairseq's :class:`~fairseq.modules.MultiheadAttention` keeps a decoder self-attention's past
keys and values in its incremental state as tensors ``[B, heads, L, head_dim]`` and, at
every step, appends the step's keys and values with ``torch.cat`` (a copy of the whole
cache), and :meth:`reorder_incremental_state` ``index_select``-s the whole cache of every
layer along the beams at every step of the beam search. Decoding T tokens thus copies
O(T^2) cached values per row. Sentence-level models (T ~ 30) hardly notice; the segment
models (``doc2doc_transformer``, ``g_transformer``), whose segments run to 512 target
tokens, spend a large share of their decoding there (docs/benchmarks.md).

:class:`PreallocatedKVAttention` is fairseq's ``MultiheadAttention`` whose decoder
self-attention keeps, in incremental decoding, one key buffer and one value buffer
``[B, heads, capacity, head_dim]`` per attention (and a ``[B, capacity]`` padding buffer
once a padded key occurs):

* a step writes its keys and values in place at positions ``length .. length + T - 1``
  (O(1) per step and row); the buffer grows geometrically (doubling, at least
  :data:`INITIAL_CAPACITY`) when full, so growing costs O(T) over a whole decode;
* the attention reads the filled prefix ``[:length]`` as a view (no copy): scores, the
  ``apply_sparse_mask`` hook (G-Transformer's group mask), ``attn_mask``, the key padding
  mask, fairseq's softmax, dropout and the output projection as in fairseq's own code path;
* rows are not moved when the beams reorder: each row of the search (a hypothesis, the
  "logical" row) keeps its keys and values in a buffer row of its own (its slot, a
  permutation of the rows; the identity until a reordering needs otherwise), and the step's
  query rows are put in slot order before the attention and its output back after it (two
  row permutations of ``[B, heads, T, head_dim]`` and two of the scores ``[B, heads, T, L]``
  per step, against ``[B, heads, L, head_dim]`` for moving a row's cache);
* :meth:`reorder_incremental_state` hands each slot to the first new row that continues it
  and copies a filled part only for a hypothesis that continues a row another one already
  continues (a beam that splits), into a slot no new row continues (a beam that ends):
  one row copy per split, where reordering the rows moves every row whose place changes.
  When finished sentences leave the batch (a shorter order), the filled parts of the
  remaining rows are gathered into fresh buffers in row order.

As an encoder-decoder attention, in incremental decoding, it reads the encoder output's row
numbers that the decoder gives it (:attr:`~PreallocatedKVAttention.encoder_rows`,
:mod:`~fairseq_docctx.modules.beam_rows`) at a search's first step: when the batch's rows are
consecutive groups of g copies of one encoder row (beam search's beams), it hands fairseq's
``MultiheadAttention.forward`` the source of each group's first row only. fairseq's code then
keeps the keys and values once per group and computes each group's g queries against them in
one product (its "beamable" encoder-decoder attention, which ``transformer`` leaves off:
``set_beam_size`` would also change the attention outside the search), and
:meth:`~PreallocatedKVAttention.reorder_incremental_state` reorders them with fairseq's code for
groups of g.

Every other call (training and teacher forcing, an encoder-decoder attention without row
copies, attentions built with ``add_bias_kv`` / ``add_zero_attn``, ONNX tracing, ``xformers``,
``before_softmax``) and every attention with :attr:`PreallocatedKVAttention.preallocated`
off runs fairseq's ``MultiheadAttention.forward`` unchanged. The class adds no parameter and
no state-dict key, so checkpoints of fairseq's attention load as they are.
"""
import contextlib
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from fairseq import utils
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from .beam_rows import copy_groups

#: the first capacity of a buffer (positions); it doubles when full
INITIAL_CAPACITY = 64
#: the slot of the buffers in fairseq's incremental state (not fairseq's ``attn_state``, so
#: that the two kinds of state are never mistaken for each other)
STATE_KEY = "preallocated_kv"
#: the slot of an encoder-decoder attention's number of row copies per group in a search
COPIES_KEY = "row_copies"


class PreallocatedKVAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` with preallocated key/value buffers for a decoder
    self-attention and keys shared by row copies for an encoder-decoder attention, in
    incremental decoding (the module doc); otherwise fairseq's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: keep the keys and values of incremental decoding in preallocated buffers, and an
        #: encoder-decoder attention's keys and values once per group of row copies (a
        #: setting; ``False``: fairseq's incremental state, for comparison)
        self.preallocated = True
        #: the encoder row each row of the batch is a copy of (``[B]``), given by the decoder for
        #: an incremental step (:func:`giving_encoder_rows`); an encoder-decoder attention reads it at a
        #: search's first step (``None``: no sharing)
        self.encoder_rows: Optional[Tensor] = None

    def _plain(self, incremental_state, before_softmax: bool) -> bool:
        return (self.preallocated and incremental_state is not None and not before_softmax and self.bias_k is None
                and not self.add_zero_attn and not self.onnx_trace and not self.use_xformers
                and not torch.jit.is_scripting())

    def _uses_buffers(self, incremental_state, static_kv: bool, before_softmax: bool) -> bool:
        return self.self_attention and not static_kv and self._plain(incremental_state, before_softmax)

    def _shares_keys(self, incremental_state, static_kv: bool, before_softmax: bool) -> bool:
        return self.encoder_decoder_attention and static_kv and self._plain(incremental_state, before_softmax)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False, attn_mask: Optional[Tensor] = None,
                before_softmax: bool = False, need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's ``MultiheadAttention.forward`` (time-first ``[T, B, C]``); a decoder
        self-attention step of incremental decoding reads and writes the preallocated buffers."""
        if self._shares_keys(incremental_state, static_kv, before_softmax):
            key, value, key_padding_mask = self._groups_first_rows(key, value, key_padding_mask, incremental_state)
        if not self._uses_buffers(incremental_state, static_kv, before_softmax):
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=need_weights,
                                   static_kv=static_kv, attn_mask=attn_mask, before_softmax=before_softmax,
                                   need_head_weights=need_head_weights)
        return self._buffered_step(query, key_padding_mask, incremental_state, need_weights or need_head_weights,
                                   attn_mask, need_head_weights)

    # the buffers

    def kv_buffers(self, incremental_state) -> Optional[dict]:
        """This attention's buffers in ``incremental_state``: ``{"key", "value": [B, heads,
        capacity, head_dim], "padding": [B, capacity] bool or None, "length": int, "slot",
        "inverse": [B] or None}``, or ``None`` before the first step. Row i of the search keeps
        its keys and values in buffer row ``slot[i]``; buffer row p holds row ``inverse[p]``
        (both ``None``: row i in buffer row i)."""
        return self.get_incremental_state(incremental_state, STATE_KEY)

    def _append(self, incremental_state, k: Tensor, v: Tensor, padding: Optional[Tensor]) -> dict:
        """Write the step's keys and values ``[B, heads, T, head_dim]`` (and its key padding
        mask ``[B, T]``, if any) at the end of the filled part, each row in its slot, growing
        the buffers if needed."""
        B, H, T, D = k.shape
        state = self.kv_buffers(incremental_state)
        if state is None:
            cap = max(INITIAL_CAPACITY, T)
            state = {"key": k.new_empty(B, H, cap, D), "value": v.new_empty(B, H, cap, D), "padding": None,
                     "length": 0, "slot": None, "inverse": None}
            self.set_incremental_state(incremental_state, STATE_KEY, state)
        n = state["length"]
        cap = state["key"].size(2)
        if n + T > cap:  # geometric growth: O(T) copying over a whole decode
            cap = max(2 * cap, n + T)
            for name in ("key", "value"):
                old = state[name]
                state[name] = old.new_empty(B, H, cap, D)
                state[name][:, :, :n] = old[:, :, :n]
            if state["padding"] is not None:
                old = state["padding"]
                state["padding"] = old.new_zeros(B, cap)
                state["padding"][:, :n] = old[:, :n]
        if padding is not None and state["padding"] is None:
            state["padding"] = torch.zeros(B, cap, dtype=torch.bool, device=k.device)
        slot = state["slot"]
        for name, new in (("key", k), ("value", v), ("padding", padding)):
            if state[name] is None:
                continue
            end = state[name][:, n:n + T] if name == "padding" else state[name][:, :, n:n + T]
            if new is None:  # no padding at this step
                end.fill_(False)
            elif slot is None:
                end.copy_(new)
            else:  # row i into its slot: one copy
                end.index_copy_(0, slot, new.to(end.dtype))
        state["length"] = n + T
        return state

    def _buffered_step(self, query: Tensor, key_padding_mask: Optional[Tensor], incremental_state,
                       need_weights: bool, attn_mask: Optional[Tensor], need_head_weights: bool):
        T, B, E = query.size()
        H, D = self.num_heads, self.head_dim
        q = self.q_proj(query)
        k = self.k_proj(query)
        v = self.v_proj(query)
        q *= self.scaling
        # [T, B, C] -> [B * heads, T, head_dim] (the query) and [B, heads, T, head_dim] (keys, values)
        q = q.contiguous().view(T, B * H, D).transpose(0, 1)
        k = k.view(T, B, H, D).permute(1, 2, 0, 3)
        v = v.view(T, B, H, D).permute(1, 2, 0, 3)
        state = self._append(incremental_state, k, v, key_padding_mask)
        L = state["length"]
        slot, inverse = state["slot"], state["inverse"]
        keys = state["key"][:, :, :L].view(B * H, L, D)  # views of the filled part: no copy
        values = state["value"][:, :, :L].view(B * H, L, D)
        if inverse is not None:  # the queries in the buffers' row order, the scores back in the rows'
            q = _rows(q, B, inverse)
        scores = torch.bmm(q, keys.transpose(1, 2))
        if slot is not None:
            scores = _rows(scores, B, slot)
        scores = self.apply_sparse_mask(scores, T, L, B)
        if attn_mask is not None:
            scores += attn_mask.unsqueeze(0)
        padding = state["padding"]
        if padding is not None:
            padding = padding[:, :L] if slot is None else padding[:, :L].index_select(0, slot)
            scores = scores.view(B, H, T, L).masked_fill(padding.view(B, 1, 1, L), float("-inf"))
            scores = scores.view(B * H, T, L)
        weights_float = utils.softmax(scores, dim=-1, onnx_trace=self.onnx_trace)
        probs = self.dropout_module(weights_float.type_as(scores))
        if inverse is not None:
            attn = _rows(torch.bmm(_rows(probs, B, inverse), values), B, slot)
        else:
            attn = torch.bmm(probs, values)
        attn = self.out_proj(attn.transpose(0, 1).contiguous().view(T, B, E))
        weights: Optional[Tensor] = None
        if need_weights:
            weights = weights_float.view(B, H, T, L).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights

    # an encoder-decoder attention's keys and values, once per group of row copies

    def row_copies(self, incremental_state) -> Optional[int]:
        """How many consecutive rows read one group's keys and values in this search (1: fairseq's
        keys for every row), or ``None`` before its first step."""
        state = self.get_incremental_state(incremental_state, COPIES_KEY)
        return None if state is None else state["copies"]

    def _groups_first_rows(self, key: Optional[Tensor], value: Optional[Tensor], key_padding_mask: Optional[Tensor],
                           incremental_state):
        """At a search's first step, the source ``[S, B, C]`` (and its padding mask) of each
        group of row copies' first row ``[S, G, C]``, the number of copies recorded; later
        (fairseq's code then reads its kept keys) and without copies, as they are."""
        if self.row_copies(incremental_state) is not None:
            return key, value, key_padding_mask
        g = 1 if self.encoder_rows is None else copy_groups(self.encoder_rows)
        self.set_incremental_state(incremental_state, COPIES_KEY, {"copies": g})
        if g == 1 or key is None:
            return key, value, key_padding_mask

        def first(x: Tensor) -> Tensor:
            # contiguous: a strided input takes another matrix-product path, whose half
            # precision rounding differs from fairseq's projection of every row
            return x.view(x.size(0), -1, g, x.size(2))[:, :, 0].contiguous()

        firsts = first(key)
        mask = None if key_padding_mask is None else key_padding_mask.view(-1, g, key_padding_mask.size(1))[:, 0]
        return firsts, (firsts if value is key else first(value)), mask

    def reorder_incremental_state(self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
                                  new_order: Tensor):
        """Row i of the search continues row ``new_order[i]``: each buffer row goes to the
        first row that continues it, and only a row continuing one already taken gets a copy,
        in a buffer row nobody continues (the module doc); when rows leave, the remaining rows'
        filled parts are gathered in row order. fairseq's state as fairseq reorders it."""
        g = self.row_copies(incremental_state)
        if g is not None and g > 1:  # rows move within their groups, or whole groups leave
            if not torch.equal(new_order // g, (new_order.view(-1, g)[:, :1] // g).expand(-1, g).reshape(-1)):
                raise RuntimeError(f"{type(self).__name__}: a reordering moves rows between groups of {g} copies "
                                   "of one encoder row (the keys are kept once per group)")
            beam, self.beam_size = self.beam_size, g  # fairseq's reordering of keys kept per group
            try:
                return super().reorder_incremental_state(incremental_state, new_order)
            finally:
                self.beam_size = beam
        state = self.kv_buffers(incremental_state)
        if state is None:
            return super().reorder_incremental_state(incremental_state, new_order)
        n, B = state["length"], state["key"].size(0)
        names = [x for x in ("key", "value", "padding") if state[x] is not None]
        source = new_order if state["slot"] is None else state["slot"].index_select(0, new_order)
        if new_order.numel() == B:
            slot = source.clone()
            order = torch.sort(source, stable=True).indices
            ranked = source.index_select(0, order)
            again = torch.zeros(B, dtype=torch.bool, device=source.device)
            again[1:] = ranked[1:].eq(ranked[:-1])
            splits = order[again]  # rows that continue a buffer row another row keeps
            if splits.numel():
                taken = torch.zeros(B, dtype=torch.bool, device=source.device)
                taken[source] = True
                free = (~taken).nonzero().squeeze(1)  # as many as the splits
                pairs = list(zip(free.tolist(), source.index_select(0, splits).tolist()))
                for x in names:  # row by row: one copy each (a gather and a scatter copy twice)
                    filled = state[x][:, :, :n] if x != "padding" else state[x][:, :n]
                    for to, of in pairs:
                        filled[to].copy_(filled[of])
                slot[splits] = free
            if torch.equal(slot, torch.arange(B, device=slot.device)):
                state["slot"] = state["inverse"] = None
            else:
                state["slot"] = slot
                state["inverse"] = torch.empty_like(slot).index_copy_(0, slot, torch.arange(B, device=slot.device))
            return incremental_state
        for x in names:  # rows leave: the filled parts gathered into fresh buffers, in row order
            old = state[x]
            new = old.new_empty((new_order.numel(),) + tuple(old.shape[1:]))
            if x == "padding":
                torch.index_select(old[:, :n], 0, source, out=new[:, :n])
            else:
                torch.index_select(old[:, :, :n], 0, source, out=new[:, :, :n])
            state[x] = new
        state["slot"] = state["inverse"] = None
        return incremental_state


def _rows(x: Tensor, batch: int, index: Tensor) -> Tensor:
    """``x [batch * heads, ...]`` (batch-major) with its batch rows taken in ``index``'s order."""
    return x.view(batch, -1, *x.shape[1:]).index_select(0, index).view(x.shape)


class PreallocatedKVDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention and encoder-decoder attention are
    :class:`PreallocatedKVAttention` (built with the arguments fairseq's layer gives its own;
    same weights, same names)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return PreallocatedKVAttention(embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
                                       add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                                       self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
                                       qn_block_size=self.quant_noise_block_size,
                                       xformers_att_config=cfg.decoder.xformers_att_config)

    def build_encoder_attention(self, embed_dim, cfg):
        return PreallocatedKVAttention(embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
                                       vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
                                       encoder_decoder_attention=True, q_noise=self.quant_noise,
                                       qn_block_size=self.quant_noise_block_size,
                                       xformers_att_config=cfg.encoder.xformers_att_config)


def wrap_layer(layer, cfg, checkpoint=None):
    """fairseq's wrapping of a built layer as its ``build_*_layer`` applies it: activation
    checkpointing (``checkpoint``: a function of the layer and ``offload_to_cpu``; fairseq's
    ``checkpoint_wrapper`` by default), then FSDP."""
    from fairseq.distributed import fsdp_wrap
    from fairseq.modules.checkpoint_activations import checkpoint_wrapper

    on = cfg.checkpoint_activations
    if on:
        layer = (checkpoint or checkpoint_wrapper)(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not on else 0)


def set_preallocated(root: torch.nn.Module, on: bool = True) -> int:
    """Turn the preallocated buffers of every :class:`PreallocatedKVAttention` under ``root``
    on or off (off: fairseq's cache); returns how many attentions were set. Change it between
    searches, not during one (the two keep different incremental states)."""
    mods = [m for m in root.modules() if isinstance(m, PreallocatedKVAttention)]
    for m in mods:
        m.preallocated = bool(on)
    return len(mods)


@contextlib.contextmanager
def giving_encoder_rows(mods, rows: Optional[Tensor]):
    """Within the block, the encoder-decoder :class:`PreallocatedKVAttention` s ``mods`` read
    ``rows`` as the encoder row of each row of the batch (their
    :attr:`~PreallocatedKVAttention.encoder_rows`; ``None`` again after the block)."""
    for m in mods:
        m.encoder_rows = rows
    try:
        yield
    finally:
        for m in mods:
            m.encoder_rows = None
