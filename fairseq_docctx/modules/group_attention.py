"""Group attention and combined attention of the G-Transformer (Bao, Zhang, Teng, Chen & Luo
2021, "G-Transformer for Document-level Machine Translation", §4).

A segment is n consecutive sentences of one document joined by the separator (``<sep>``):
``s_1 <sep> s_2 ... <sep> s_n </s>`` on the source, ``</s> t_1 <sep> ... t_n`` as decoder
input. Every token carries a *group tag*, the number of its sentence (§4.1), derived from the
tokens alone:

* :func:`source_groups`: 1 + the number of separators strictly before the token (the
  separator ending ``s_i`` belongs to group i, the final ``</s>`` to group n), 0 at padding;
* :func:`target_groups`: at decoder input position j, 1 + the number of separators in
  positions 1..j (inclusive): the group of the target token that position predicts; 0 at
  padding;
* :func:`sentence_counts`: n = 1 + the number of separators of a source row.

*Group attention* (§4.1) lets a query attend only to the keys of its own group: encoder
self-attention within a source sentence, decoder self-attention within a target sentence
(and causal), encoder-decoder attention from target sentence i to source sentence i.
:func:`group_blocked` builds the ``[B, T, S]`` mask of the pairs it forbids; a query of group 0
(padding) is left unrestricted, so no row of the softmax is empty.

*Combined attention* (§4.2) in the top layers mixes the group attention ``H_L`` with a global
multi-head attention ``H_G`` over the whole segment through a learned gate:
``g = sigmoid([H_L; H_G] W + b)``, ``H = H_L * g + H_G * (1 - g)``.

:class:`GroupAttention` is fairseq's :class:`~fairseq.modules.MultiheadAttention` (its own
weights are the group attention's, named as a sentence-level model's ``self_attn`` /
``encoder_attn``), optionally with a second, global ``MultiheadAttention`` and the gate. The
layers of :class:`GroupEncoderLayer` / :class:`GroupDecoderLayer` are fairseq's, with these
attentions built in their place. fairseq's layers hand an attention no per-row mask (the
encoder-decoder attention gets none at all), so the encoder / decoder give each
:class:`GroupAttention` its ``[B, T, S]`` mask for the duration of one forward call with
:func:`group_masks`; nothing stays on a module after the call.

fairseq's ``MultiheadAttention`` takes two code paths: without incremental state and without
static keys it calls PyTorch's ``F.multi_head_attention_forward``, which accepts a 3-D mask
``[B * heads, T, S]`` (given here); otherwise (incremental decoding, and every
encoder-decoder attention, which uses static keys) it runs its own code, whose ``attn_mask``
must be 2-D; there the group mask is added by the ``apply_sparse_mask`` hook that code calls
on the ``[B * heads, T, S]`` scores before the softmax.

The decoder attentions (group and global, self and encoder-decoder) are
:class:`~fairseq_docctx.modules.kv_cache.PreallocatedKVAttention`: in incremental decoding
the self-attentions keep their keys and values in preallocated buffers instead of fairseq's
``torch.cat`` cache, the encoder-decoder attentions keep theirs once per group of beams, and
both call the same ``apply_sparse_mask`` hook on their scores (in the rows' order), so the
group mask of a step (``[B, 1, L]``, L the history or the source) applies as in fairseq's path.
"""
import contextlib
import functools
from typing import Dict, Iterator, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from .kv_cache import PreallocatedKVAttention, wrap_layer


def source_groups(tokens: Tensor, sep: int, pad: int) -> Tensor:
    """Group tags ``[B, S]`` of source tokens ``[B, S]``: 1 + separators strictly before
    the token; 0 at padding."""
    is_sep = tokens.eq(sep).long()
    groups = 1 + is_sep.cumsum(1) - is_sep
    return groups.masked_fill(tokens.eq(pad), 0)


def target_groups(prev_output_tokens: Tensor, sep: int, pad: int) -> Tensor:
    """Group tags ``[B, T]`` of decoder input positions: 1 + separators in positions
    1..j inclusive (position 0 is the initial ``</s>``); 0 at padding."""
    is_sep = prev_output_tokens.eq(sep).long()
    is_sep[:, :1] = 0
    groups = 1 + is_sep.cumsum(1)
    return groups.masked_fill(prev_output_tokens.eq(pad), 0)


def sentence_counts(src_tokens: Tensor, sep: int) -> Tensor:
    """The number of source sentences n ``[B]`` of each row: 1 + its separators."""
    return 1 + src_tokens.eq(sep).long().sum(1)


def group_blocked(query_groups: Tensor, key_groups: Tensor) -> Tensor:
    """``[B, T, S]`` bool, True where query t may not attend to key s: the groups differ and
    the query is not padding (group 0 queries are unrestricted; padded keys are removed by
    the key padding mask)."""
    q = query_groups.unsqueeze(2)
    return q.ne(key_groups.unsqueeze(1)) & q.ne(0)


def _same_tensor(a: Optional[Tensor], b: Optional[Tensor]) -> bool:
    """Whether ``a`` and ``b`` are the same tensor or views of the same memory with the same
    layout (fairseq's decoder slices its causal mask from one buffer for every layer)."""
    if a is None or b is None:
        return a is b
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
                      and a.dtype == b.dtype and a.device == b.device)


class GroupAttention(PreallocatedKVAttention):
    """Multi-head attention restricted to the query's group (Bao et al. 2021, §4.1), and with
    ``combined=True`` mixed with a global multi-head attention through a gate (§4.2).

    ``kind`` (``"self"`` or ``"cross"``) names the mask it takes from :func:`group_masks`.
    The other arguments are fairseq's ``MultiheadAttention``'s; the global attention (new
    weights ``global_attn.*``) is built with the same ones, the gate is ``gate`` (a linear
    map of ``[H_L; H_G]``, ``2 * embed_dim -> embed_dim``, Xavier-initialised, bias 0).
    """

    def __init__(self, embed_dim: int, num_heads: int, kind: str, combined: bool = False, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if kind not in ("self", "cross"):
            raise ValueError(f"GroupAttention: kind must be 'self' or 'cross', not {kind!r}")
        self.kind = kind
        self._blocked: Optional[Tensor] = None
        self._mask_cache: dict = {}
        self.global_attn: Optional[PreallocatedKVAttention] = None
        self.gate: Optional[nn.Linear] = None
        if combined:
            self.global_attn = PreallocatedKVAttention(embed_dim, num_heads, **kwargs)
            self.gate = nn.Linear(2 * embed_dim, embed_dim)
            nn.init.xavier_uniform_(self.gate.weight)
            nn.init.constant_(self.gate.bias, 0.0)

    @property
    def combined(self) -> bool:
        return self.global_attn is not None

    def _takes_pytorch_path(self, query: Tensor, incremental_state, static_kv: bool) -> bool:
        """Whether ``MultiheadAttention.forward`` hands this call to
        ``F.multi_head_attention_forward`` (its condition, read from fairseq 0.12)."""
        return (not self.onnx_trace and query.device.type != "xla" and incremental_state is None
                and not static_kv and not torch.jit.is_scripting() and not self.skip_embed_dim_check
                and not self.use_xformers)

    def apply_sparse_mask(self, attn_weights: Tensor, tgt_len: int, src_len: int, bsz: int):
        """fairseq's own attention code: the scores ``[B * heads, T, S]`` before the softmax,
        with the group mask applied."""
        blocked = self._blocked
        if blocked is None:
            return attn_weights
        w = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        return w.masked_fill(blocked.unsqueeze(1), float("-inf")).view(bsz * self.num_heads, tgt_len, src_len)

    def _head_mask(self, attn_mask: Optional[Tensor], dtype) -> Tensor:
        """The ``[B * heads, T, S]`` mask PyTorch's attention takes: the group mask, with
        ``attn_mask`` (the decoder's causal mask) added. Built once per forward call for all
        the layers that share the group mask, ``attn_mask`` and head count (the cache
        :func:`group_masks` hands out)."""
        key = (self.kind, self.num_heads, dtype)
        blocked = self._blocked
        hit = self._mask_cache.get(key)
        if hit is not None and hit[0] is blocked and _same_tensor(hit[1], attn_mask):
            return hit[2]
        if attn_mask is None:
            mask = blocked
        else:
            mask = attn_mask.to(dtype).expand(*blocked.shape).masked_fill(blocked, float("-inf"))
        mask = mask.repeat_interleave(self.num_heads, dim=0)  # [B * heads, T, S], batch-major
        self._mask_cache[key] = (blocked, attn_mask, mask)
        return mask

    def forward(self, query, key: Optional[Tensor], value: Optional[Tensor], key_padding_mask=None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False, attn_mask: Optional[Tensor] = None,
                before_softmax: bool = False, need_head_weights: bool = False):
        """fairseq's ``MultiheadAttention.forward`` (time-first ``[T, B, C]``) under the group
        mask given by :func:`group_masks`; ``attn_mask`` (e.g. the decoder's causal mask)
        applies to the group and to the global attention. Returns the (combined) output
        ``[T, B, C]`` and the group attention's weights."""
        if self._blocked is None:
            raise RuntimeError(f"GroupAttention ({self.kind}) called without its group mask: "
                               "call it inside group_masks(...)")
        if before_softmax:
            raise ValueError("GroupAttention does not return scores before the softmax")
        if self._takes_pytorch_path(query, incremental_state, static_kv):
            local, weights = super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                             need_weights=need_weights, attn_mask=self._head_mask(attn_mask, query.dtype),
                                             need_head_weights=need_head_weights)
        else:
            local, weights = super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                             incremental_state=incremental_state, need_weights=need_weights,
                                             static_kv=static_kv, attn_mask=attn_mask,
                                             need_head_weights=need_head_weights)
        if self.global_attn is None:
            return local, weights
        glob, _ = self.global_attn(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=False,
                                   static_kv=static_kv, attn_mask=attn_mask)
        g = torch.sigmoid(self.gate(torch.cat([local, glob], dim=-1)))  # §4.2
        return local * g + glob * (1 - g), weights


@contextlib.contextmanager
def group_masks(root: nn.Module, masks: Dict[str, Tensor]) -> Iterator[None]:
    """Give every :class:`GroupAttention` under ``root`` the mask of its ``kind`` (``masks``:
    ``{"self": [B, T, S] bool, "cross": ...}``) for the duration of the block, with one cache
    of the per-head masks built from them, so that the layers build each once; they are
    removed when it ends, also on an error."""
    mods = [m for m in root.modules() if isinstance(m, GroupAttention)]
    missing = sorted({m.kind for m in mods} - set(masks))
    if missing:
        raise ValueError(f"group_masks: no mask for the {', '.join(missing)} group attention")
    cache = {}  # the per-head masks built from these masks, shared by every layer
    try:
        for m in mods:
            m._blocked, m._mask_cache = masks[m.kind], cache
        yield
    finally:
        for m in mods:
            m._blocked, m._mask_cache = None, {}


@contextlib.contextmanager
def _masks_installed(mods, masks: Dict[str, Tensor]) -> Iterator[None]:
    """The group masks ``masks`` (kind -> ``[B, T, S]``) on the attentions ``mods`` for the
    block, with a cache of their own; the attentions' previous masks and cache come back
    after it."""
    before = [(m._blocked, m._mask_cache) for m in mods]
    cache = {}
    try:
        for m in mods:
            m._blocked, m._mask_cache = masks[m.kind], cache
        yield
    finally:
        for m, (blocked, old_cache) in zip(mods, before):
            m._blocked, m._mask_cache = blocked, old_cache


def _group_attentions(layer: nn.Module):
    return [m for m in layer.modules() if isinstance(m, GroupAttention)]


def _forward_under_masks(layer, *args, group_masks_state: Optional[Dict[str, Tensor]] = None, **kwargs):
    """The layer's own forward, under the group masks ``group_masks_state`` when given
    (the recomputation of :func:`checkpoint_group_layer`)."""
    own = type(layer).forward
    if group_masks_state is None:  # unwrapped (fairseq's unwrap_checkpoint): the masks are on
        return own(layer, *args, **kwargs)
    with _masks_installed(_group_attentions(layer), group_masks_state):
        return own(layer, *args, **kwargs)


def _forward_with_masks(layer, checkpointed, *args, **kwargs):
    """fairseq's checkpointed forward, handed the group masks the layer runs under."""
    state = {}
    for m in _group_attentions(layer):
        if m._blocked is None:
            raise RuntimeError(f"GroupAttention ({m.kind}) called without its group mask: "
                               "call it inside group_masks(...)")
        state[m.kind] = m._blocked
    return checkpointed(*args, group_masks_state=state, **kwargs)


def checkpoint_group_layer(layer: nn.Module, offload_to_cpu: bool = False) -> nn.Module:
    """fairseq's activation checkpointing (``checkpoint_wrapper``, also with
    ``--offload-activations``) of a layer with group attentions. fairseq recomputes a
    checkpointed layer's forward in the backward pass, after :func:`group_masks` has taken
    the masks off the attentions: the layer's forward hands the group masks it runs under
    (kind -> ``[B, T, S]``, a non-tensor argument, which fairseq keeps for the recomputation)
    to the checkpointed forward, which puts them back on the layer's attentions for the
    duration of the recomputation. The per-head masks are rebuilt there rather than kept
    from the forward pass (kept, they would hold ``[B * heads, T, S]`` floats per kind until
    the backward pass). The forwards are partials of the layer (no closures), so a deep copy
    of the model (e.g. fairseq's ``--ema``) runs its own layers."""
    from fairseq.modules.checkpoint_activations import checkpoint_wrapper

    layer.forward = functools.partial(_forward_under_masks, layer)
    checkpoint_wrapper(layer, offload_to_cpu=offload_to_cpu)
    layer.forward = functools.partial(_forward_with_masks, layer, layer.forward)
    return layer


def _wrap(layer, cfg):
    """fairseq's wrapping of a built layer (activation checkpointing, FSDP), as its
    ``build_*_layer`` applies it; the checkpointing keeps the group masks for the
    recomputation (:func:`checkpoint_group_layer`)."""
    return wrap_layer(layer, cfg, checkpoint=checkpoint_group_layer)


class GroupEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with group self-attention, combined with global attention
    when ``combined`` (Bao et al. 2021, §4)."""

    def __init__(self, cfg, combined: bool = False):
        self._combined = combined  # read by build_self_attention during the base __init__
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return GroupAttention(embed_dim, cfg.encoder.attention_heads, kind="self", combined=self._combined,
                              dropout=cfg.attention_dropout, self_attention=True,
                              q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)


class GroupDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with group self-attention (causal) and group encoder-decoder
    attention, each combined with global attention when asked (Bao et al. 2021, §4)."""

    def __init__(self, cfg, no_encoder_attn=False, self_combined: bool = False, cross_combined: bool = False):
        if cfg.cross_self_attention:
            raise ValueError("G-Transformer: --cross-self-attention is not supported")
        self._self_combined, self._cross_combined = self_combined, cross_combined
        super().__init__(cfg, no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return GroupAttention(embed_dim, cfg.decoder.attention_heads, kind="self", combined=self._self_combined,
                              dropout=cfg.attention_dropout, add_bias_kv=add_bias_kv,
                              add_zero_attn=add_zero_attn, self_attention=True,
                              q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)

    def build_encoder_attention(self, embed_dim, cfg):
        return GroupAttention(embed_dim, cfg.decoder.attention_heads, kind="cross", combined=self._cross_combined,
                              kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim,
                              dropout=cfg.attention_dropout, encoder_decoder_attention=True,
                              q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)


def build_group_layer(cfg, decoder: bool, index: int, num_layers: int, no_encoder_attn: bool = False):
    """Layer ``index`` of ``num_layers``: the top ``--*-ctxlayers`` use combined attention
    (Bao et al. 2021, §4.2), the rest group attention only; wrapped as fairseq wraps its layers."""
    def combined(option):
        return index >= num_layers - int(getattr(cfg, option, 0) or 0)

    if decoder:
        layer = GroupDecoderLayer(cfg, no_encoder_attn, self_combined=combined("decoder_ctxlayers"),
                                  cross_combined=combined("cross_ctxlayers"))
    else:
        layer = GroupEncoderLayer(cfg, combined=combined("encoder_ctxlayers"))
    return _wrap(layer, cfg)
