"""Decoder self-attention with preallocated key/value buffers for incremental decoding.

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
* :meth:`reorder_incremental_state` changes the buffers only where the order changes
  something: an identity order (beam 1 while no sentence finishes, and every beam that keeps
  its place) is skipped; when at most half of the rows change origin only those rows are
  rewritten (a gather of their sources, then an in-place write), otherwise the filled prefix
  alone is gathered into a fresh buffer of the same capacity; the same when finished
  sentences leave the batch (a shorter order).

Every other call (training and teacher forcing, encoder-decoder attention with its static
keys, attentions built with ``add_bias_kv`` / ``add_zero_attn``, ONNX tracing, ``xformers``,
``before_softmax``) and every attention with :attr:`PreallocatedKVAttention.preallocated`
off runs fairseq's ``MultiheadAttention.forward`` unchanged. The class adds no parameter and
no state-dict key, so checkpoints of fairseq's attention load as they are.
"""
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from fairseq import utils
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

#: the first capacity of a buffer (positions); it doubles when full
INITIAL_CAPACITY = 64
#: reordering rewrites in place only the rows whose origin changes when they are at most this
#: share of the rows (each costs a gather and a write: two row copies), else gathers all rows
#: into a fresh buffer (one copy each)
IN_PLACE_SHARE = 0.5
#: the slot of the buffers in fairseq's incremental state (not fairseq's ``attn_state``, so
#: that the two kinds of state are never mistaken for each other)
STATE_KEY = "preallocated_kv"


class PreallocatedKVAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` with preallocated key/value buffers for a decoder
    self-attention in incremental decoding (the module doc); otherwise fairseq's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: keep the keys and values of incremental decoding in preallocated buffers (a
        #: setting; ``False``: fairseq's ``torch.cat`` cache, for comparison)
        self.preallocated = True

    def _uses_buffers(self, incremental_state, static_kv: bool, before_softmax: bool) -> bool:
        return (self.preallocated and incremental_state is not None and self.self_attention
                and not static_kv and not before_softmax and self.bias_k is None and not self.add_zero_attn
                and not self.onnx_trace and not self.use_xformers and not torch.jit.is_scripting())

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False, attn_mask: Optional[Tensor] = None,
                before_softmax: bool = False, need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's ``MultiheadAttention.forward`` (time-first ``[T, B, C]``); a decoder
        self-attention step of incremental decoding reads and writes the preallocated buffers."""
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
        capacity, head_dim], "padding": [B, capacity] bool or None, "length": int}``, or
        ``None`` before the first step."""
        return self.get_incremental_state(incremental_state, STATE_KEY)

    def _append(self, incremental_state, k: Tensor, v: Tensor, padding: Optional[Tensor]) -> dict:
        """Write the step's keys and values ``[B, heads, T, head_dim]`` (and its key padding
        mask ``[B, T]``, if any) at the end of the filled part, growing the buffers if needed."""
        B, H, T, D = k.shape
        state = self.kv_buffers(incremental_state)
        if state is None:
            cap = max(INITIAL_CAPACITY, T)
            state = {"key": k.new_empty(B, H, cap, D), "value": v.new_empty(B, H, cap, D), "padding": None,
                     "length": 0}
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
        state["key"][:, :, n:n + T] = k
        state["value"][:, :, n:n + T] = v
        if padding is not None and state["padding"] is None:
            state["padding"] = torch.zeros(B, cap, dtype=torch.bool, device=k.device)
        if state["padding"] is not None:
            state["padding"][:, n:n + T] = padding.bool() if padding is not None else False
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
        keys = state["key"][:, :, :L].view(B * H, L, D)  # views of the filled part: no copy
        values = state["value"][:, :, :L].view(B * H, L, D)
        scores = torch.bmm(q, keys.transpose(1, 2))
        scores = self.apply_sparse_mask(scores, T, L, B)
        if attn_mask is not None:
            scores += attn_mask.unsqueeze(0)
        padding = state["padding"]
        if padding is not None:
            scores = scores.view(B, H, T, L).masked_fill(padding[:, :L].view(B, 1, 1, L), float("-inf"))
            scores = scores.view(B * H, T, L)
        weights_float = utils.softmax(scores, dim=-1, onnx_trace=self.onnx_trace)
        probs = self.dropout_module(weights_float.type_as(scores))
        attn = torch.bmm(probs, values)
        attn = self.out_proj(attn.transpose(0, 1).contiguous().view(T, B, E))
        weights: Optional[Tensor] = None
        if need_weights:
            weights = weights_float.view(B, H, T, L).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights

    def reorder_incremental_state(self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
                                  new_order: Tensor):
        """The buffers reordered along the beams (row i takes row ``new_order[i]``), only where
        the order changes something (the module doc); fairseq's state as fairseq reorders it."""
        state = self.kv_buffers(incremental_state)
        if state is None:
            return super().reorder_incremental_state(incremental_state, new_order)
        n, B = state["length"], state["key"].size(0)
        names = [x for x in ("key", "value", "padding") if state[x] is not None]
        if new_order.numel() == B:
            moved = new_order.ne(torch.arange(B, device=new_order.device))
            rows = moved.nonzero().squeeze(1)
            changed = rows.numel()
            if changed == 0:
                return incremental_state
            if changed <= IN_PLACE_SHARE * B:  # only the rows whose origin changes, in place
                sources = new_order.index_select(0, rows)
                for x in names:
                    filled = state[x][:, :, :n] if x != "padding" else state[x][:, :n]
                    filled.index_copy_(0, rows, filled.index_select(0, sources))
                return incremental_state
        for x in names:  # the filled part gathered into a fresh buffer (also when rows leave)
            old = state[x]
            new = old.new_empty((new_order.numel(),) + tuple(old.shape[1:]))
            if x == "padding":
                torch.index_select(old[:, :n], 0, new_order, out=new[:, :n])
            else:
                torch.index_select(old[:, :, :n], 0, new_order, out=new[:, :, :n])
            state[x] = new
        return incremental_state


class PreallocatedKVDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is a :class:`PreallocatedKVAttention`
    (built with the arguments fairseq's layer gives its own; same weights, same names)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return PreallocatedKVAttention(embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
                                       add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                                       self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
                                       qn_block_size=self.quant_noise_block_size,
                                       xformers_att_config=cfg.decoder.xformers_att_config)


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
