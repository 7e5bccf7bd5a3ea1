"""``mht_transformer``: the Multi-Hop Transformer (Zhang et al. 2021, "Multi-Hop Transformer
for Document-Level Machine Translation", NAACL). See ``docs/mht.md``.

Three components (§3):

* **sentence encoders** (§3.1, Eq. 2): a source-side one over the previous source
  sentences, a target-side one over the *drafts* (a sentence-level model's translations) of
  the previous sentences and of the current sentence; parameters shared among the sentence
  encoders of one side; layer ``n``'s self-attention output ``A^(n)`` (Eq. 2;
  ``--mht-context-state layer-output``: the whole layer output) is read by layer ``n`` of the
  multi-hop encoder / decoder. Initialised from the encoders of a src→tgt and a tgt→src
  sentence-level ``transformer`` (§4.3: ``--src-sentence-encoder-from``,
  ``--tgt-sentence-encoder-from``) and then kept fixed (``--freeze-sentence-encoders``,
  default ``initialised``: see :func:`parameter_table` for why);
* **multi-hop encoder** (§3.2): per layer self-attention ``A_s``, hops over the previous
  source sentences (Eqs. 3-4; one attention for every hop distance, ``--mht-hop-weights``),
  the context gate (Eqs. 5-6), FFN;
* **multi-hop decoder** (§3.3): per layer masked self-attention ``A_t``, draft attention
  ``F_t`` over the current sentence's draft (Eq. 7), hops over the previous sentences'
  drafts (Eqs. 8-9), the gate (Eq. 10), encoder-decoder attention (Eq. 11), FFN.

Every sublayer, each hop included, has fairseq's dropout, residual and LayerNorm (post-norm as
the paper; pre-norm with ``--encoder/decoder-normalize-before``; ``--mht-hop-norm post`` keeps
the hops post-norm). The hops and the gate: :mod:`fairseq_docctx.modules.multi_hop`. The
model's size by component: :func:`parameter_table` (logged when the model is built).

Context (:mod:`fairseq_docctx.data.context_batch`): the ``src`` side, the ``draft`` side
(declared by :mod:`fairseq_docctx.data.drafts`: the draft of every current sentence through
the self map, of its K previous sentences through the index) and, for the ablation that
trains on reference target context, the ``ref`` side (the references, declared here: unlike
``tgt`` it is never replaced by the model's own translations). Drafts come from a data
directory (``docctx-drafts``), so an MHT model decodes ordinary batches, not
in document order. Everything the decoder reads of the context is computed once per sentence
in the encoder (beam search reorders the per-row maps only; the tables are not copied).

The paper's ablations are flags (§5, Tables 2-5):

====================================  ===============================================
ablation                              flag
====================================  ===============================================
context module (Table 2)              ``--mht-context-module multi-hop|concat|hierarchical``
reasoning direction (Table 3)         ``--mht-direction l2r|r2l``
sides with context (Table 4)          ``--mht-context-sides both|source|target|none``
training target context (Table 5)     ``--mht-target-context draft|reference``
context window (Figure 2)             ``--mht-context-size K`` (default ``--context-size``)
====================================  ===============================================

Checkpoints written before the options ``--mht-hop-weights``, ``--mht-context-state``,
``--mht-hop-norm`` and ``--mht-sentence-encoder-embeddings`` existed load with the values they
were trained with (:attr:`MHTTransformerModel.checkpoint_defaults`).
"""
import argparse
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    TransformerModelBase,
    base_architecture,
)
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from ..data import context_batch as cb
from ..data import drafts  # noqa: F401  (declares the draft side)
from ..errors import UsageError
from ..modules import table_encoder
from ..modules.decoder_input import embed_decoder_input
from ..modules.masks import BoolFutureMask
from ..data import length_groups
from ..modules.multi_hop import (
    CONTEXT_MODULES,
    DIRECTIONS,
    ContextHops,
    RowKeys,
    attend_rows,
    gather_row_keys,
    static_attention,
)
from . import pretrained_init, sentence_init
from .arch_defaults import set_defaults
from .document_context import ContextAttentionUnsupported, DocumentContextModel, resolve_context_size

logger = logging.getLogger(__name__)

MHT_CONTEXT_SIDES = ("both", "source", "target", "none")
TARGET_CONTEXTS = ("draft", "reference")
#: --mht-hop-weights: one attention (and LayerNorm) for every hop distance of a layer and
#: side, or one per distance
HOP_WEIGHTS = ("shared", "per-distance")
#: --mht-context-state: A^(n), what layer n reads of a sentence: the sentence encoder's layer-n
#: self-attention output (Eq. 2), or its whole layer-n output (after the FFN)
CONTEXT_STATES = ("self-attention", "layer-output")
#: --mht-hop-norm: the hops' LayerNorm placed as the layers' (--encoder/decoder-normalize-before),
#: or always after the residual connection
HOP_NORMS = ("as-layers", "post")
#: --mht-sentence-encoder-embeddings: tables of their own, or the model's (source side: the
#: encoder's; target side: the decoder's)
SENTENCE_ENCODER_EMBEDDINGS = ("own", "model")
#: --freeze-sentence-encoders: the sentence encoders kept fixed
FREEZE = ("initialised", "both", "source", "target", "none")
#: Zhang et al. (2021, Table 1, "Params"): their Transformer and MHT
PAPER_PARAMETERS = {"transformer": 50_000_000, "mht": 80_000_000}

#: the references of the previous sentences, never replaced by the model's own translations
#: (the ``tgt`` side is, in document-order inference): the target context of
#: ``--mht-target-context reference`` in training
REF = cb.register_side(cb.ContextSide("ref", "target", item_key="target", left_pad=False,
                                      aliases=("reference",)))


def _hops(args, k, normalize_before: bool):
    """One side's context sublayer of a layer whose sublayers are pre-norm when
    ``normalize_before`` (the hops follow unless ``--mht-hop-norm post``)."""
    return ContextHops(args.encoder_embed_dim, args.encoder_attention_heads, k, args.mht_context_module,
                       args.mht_direction, args.dropout, args.attention_dropout,
                       normalize_before=bool(normalize_before) and args.mht_hop_norm == "as-layers",
                       shared_hops=args.mht_hop_weights == "shared")


def freeze_value(value) -> str:
    """``--freeze-sentence-encoders``' value as one of :data:`FREEZE`: also a boolean (``True``:
    ``both``, ``False``: ``none``; checkpoints written before the other values hold one) or
    its spelling (``true``/``false``, ``yes``/``no``, ``1``/``0``)."""
    if isinstance(value, bool):
        return "both" if value else "none"
    v = str(value).strip().lower()
    if v in ("true", "yes", "1"):
        return "both"
    if v in ("false", "no", "0", "none"):
        return "none"
    if v in ("initialized",):
        return "initialised"
    if v not in FREEZE:
        raise argparse.ArgumentTypeError(f"--freeze-sentence-encoders {value}: one of {', '.join(FREEZE)} "
                                         "(or true/false)")
    return v


def frozen_sides(value, initialised: Dict[str, bool]) -> Tuple[str, ...]:
    """The sides (``source``, ``target``) whose sentence encoder ``--freeze-sentence-encoders
    value`` keeps fixed; ``initialised``: per side, whether its encoder is initialised from a
    sentence-level checkpoint (``--src/tgt-sentence-encoder-from`` given)."""
    v = freeze_value(value)
    if v == "initialised":
        return tuple(side for side in ("source", "target") if initialised.get(side))
    return {"both": ("source", "target"), "none": ()}.get(v, (v,))


class _Sublayers:
    """fairseq's residual block around a sublayer ``fn``: dropout, residual, LayerNorm
    (before the sublayer with ``normalize_before``)."""

    def block(self, x, norm, fn):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x = self.residual_connection(self.dropout_module(fn(x)), residual)
        return x if self.normalize_before else norm(x)

    def ffn(self, x):
        return self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))


class MHTEncoderLayer(_Sublayers, TransformerEncoderLayerBase):
    """fairseq's encoder layer with the context sublayer (hops + gate) between the
    self-attention and the FFN (§3.2); without context it is fairseq's layer."""

    def forward(self, x, encoder_padding_mask: Optional[Tensor], context=None, weights=None):
        x = self.block(x, self.self_attn_layer_norm, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=encoder_padding_mask, need_weights=False)[0])
        if context is not None and getattr(self, "context", None) is not None:
            x = _read_context(self.context, x, context, None, weights)
        return self.block(x, self.final_layer_norm, self.ffn)


class MHTDecoderLayer(_Sublayers, TransformerDecoderLayerBase):
    """fairseq's decoder layer with draft attention and the context sublayer between the
    self-attention and the encoder-decoder attention (§3.3)."""

    def forward(self, x, encoder_out, encoder_padding_mask, incremental_state=None, self_attn_mask=None,
                self_attn_padding_mask=None, draft=None, context=None, weights=None):
        x = self.block(x, self.self_attn_layer_norm, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state, need_weights=False, attn_mask=self_attn_mask)[0])
        # Eq. 7: F_t = MHA(A_t, A_d)
        if isinstance(draft, RowKeys):
            x, w = attend_rows(self.draft_attn, self.draft_attn_layer_norm, self.dropout_module, x, None, None,
                               None, None, self.normalize_before, weights is not None, draft)
        else:
            x, w = attend_rows(self.draft_attn, self.draft_attn_layer_norm, self.dropout_module, x, *draft,
                               incremental_state, self.normalize_before, weights is not None)
        if weights is not None:
            weights.append(("draft", w))
        if context is not None and getattr(self, "context", None) is not None:
            x = _read_context(self.context, x, context, incremental_state, weights)
        x = self.block(x, self.encoder_attn_layer_norm, lambda h: self.encoder_attn(
            query=h, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state, static_kv=incremental_state is not None, need_weights=False)[0])
        return self.block(x, self.final_layer_norm, self.ffn)


def _read_context(hops: ContextHops, x, context, incremental_state, weights):
    """The context sublayer over ``context``: ``(states, pad, index)`` of a table, or the
    list of :class:`RowKeys` gathered before for each index column."""
    if isinstance(context, list):
        return hops(x, None, None, None, incremental_state, weights, keys=context)
    return hops(x, *context, incremental_state, weights)


def _layer_keys(states: List[Tensor], pad: Tensor, index: Tensor, k: int, groups: List[Tensor]):
    """Per group of rows, per layer, the :class:`RowKeys` of the ``k`` nearest context
    sentences of each row (:func:`gather_row_keys`, one gather per layer):
    ``out[g][n][j]``."""
    columns = [index[:, j] for j in range(min(k, index.size(1)))]
    per_layer = [gather_row_keys(s, pad, columns, groups) for s in states]
    return [[layer[g] for layer in per_layer] for g in range(len(groups))]


class MHTSentenceEncoderLayer(_Sublayers, TransformerEncoderLayerBase):
    """fairseq's encoder layer (the same computation) that also returns its self-attention
    sublayer's output ``A^(n)`` (Zhang et al. 2021, §3.1, Eq. 2: ``A^(n) = MHA(H^(n-1),
    H^(n-1), H^(n-1))``, with the sublayer's residual and LayerNorm): ``(H^(n), A^(n))``,
    both ``[T, B, C]``; fairseq's encoder collects the second in ``fc_results``."""

    def forward(self, x, encoder_padding_mask: Optional[Tensor]):
        a = self.block(x, self.self_attn_layer_norm, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=encoder_padding_mask, need_weights=False)[0])
        return self.block(a, self.final_layer_norm, self.ffn), a


class MHTSentenceEncoder(TransformerEncoderBase):
    """A sentence encoder (§3.1): fairseq's Transformer encoder whose layers also return their
    self-attention outputs (:class:`MHTSentenceEncoderLayer`)."""

    def build_encoder_layer(self, cfg):
        return MHTSentenceEncoderLayer(cfg)


def _sentence_encoder(args, dictionary, layers, embed=None):
    """A sentence encoder of the model's encoder sizes with ``layers`` layers, embedding with
    ``embed`` (the model's table) or a table of its own."""
    cfg = TransformerConfig.from_namespace(args)
    cfg.encoder.layers = layers
    if embed is None:
        embed = TransformerModelBase.build_embedding(cfg, dictionary, cfg.encoder.embed_dim)
    return MHTSentenceEncoder(cfg, dictionary, embed)


def _rows_of(index: Tensor, extra: Optional[Tensor] = None):
    """The table rows ``index`` (and ``extra``) refer to, each once, in order (the rows the
    sentence encoders encode; :func:`_remap` maps table rows to their positions)."""
    parts = [index[index >= 0]] + ([extra] if extra is not None else [])
    return torch.unique(torch.cat(parts))


def _remap(rows: Tensor, size: int, index: Tensor) -> Tensor:
    m = index.new_full((size,), -1)
    m[rows] = torch.arange(rows.numel(), device=rows.device)
    return torch.where(index >= 0, m[index.clamp(min=0)], index)


class MHTEncoder(TransformerEncoderBase):
    """The multi-hop encoder; it also runs the sentence encoders, so that everything the
    decoder reads of the context is in its output (computed once per sentence in beam
    search)."""

    def build_encoder_layer(self, cfg):
        layer = MHTEncoderLayer(cfg)
        return layer

    def setup_context(self, args, tgt_dict, tgt_embed):
        """Sentence encoders and the context sublayers (after fairseq built the layers);
        ``tgt_embed``: the decoder's table (the target-side sentence encoder's with
        ``--mht-sentence-encoder-embeddings model``)."""
        self.mht_sides = args.mht_context_sides
        self.context_size = args.mht_context_size
        self.target_context = args.mht_target_context
        self.context_state = args.mht_context_state
        #: the sides whose sentence encoder is kept fixed (set by the model's build_model)
        self.frozen_sides: Tuple[str, ...] = ()
        shared = args.mht_sentence_encoder_embeddings == "model"
        self.src_sentence_encoder = (_sentence_encoder(args, self.dictionary, args.encoder_layers,
                                                       self.embed_tokens if shared else None)
                                     if self.reads("source") else None)
        self.tgt_sentence_encoder = _sentence_encoder(args, tgt_dict, args.decoder_layers,
                                                      tgt_embed if shared else None)
        if self.reads("source"):
            for layer in self.layers:
                layer.context = _hops(args, self.context_size, args.encoder_normalize_before)

    def reads(self, side: str) -> bool:
        return self.mht_sides in ("both", side)

    def sentence_states(self, encoder, tokens: Tensor, rows: Tensor, side: str):
        """Layer-wise states ``[A^(1) .. A^(N)]`` (each ``[L, n, C]``) and padding ``[n, L]``
        of the table sentences ``rows``, each encoded once, in groups of similar length, by
        the ``side`` (``source``/``target``) sentence encoder ``encoder``: each layer's
        self-attention output (Eq. 2), or with ``--mht-context-state layer-output`` each
        layer's output."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and side not in self.frozen_sides):
            out = table_encoder.encode_rows(encoder, tokens.index_select(0, rows), return_all_hiddens=True)
        states = out["fc_results"] if self.context_state == "self-attention" else out["encoder_states"][1:]
        return states, out["encoder_padding_mask"][0]

    def context_states(self, context: Optional[dict]) -> Dict[str, List]:
        """What the multi-hop layers read, from the batch's context tables."""
        if context is None or not cb.has_side(context, "draft"):
            raise UsageError("mht_transformer reads the drafts of the sentences: train and decode with "
                             "--context-sides ...,draft on a data directory with drafts (docctx-drafts), "
                             "and --context-size >= 1")
        K = self.context_size
        out: Dict[str, List] = {}
        draft = cb.table(context, "draft", K)
        if draft.self_rows is None:
            raise ValueError("the batch's draft table has no drafts of the current sentences")
        use_ref = self.training and self.target_context == "reference"
        if use_ref and not cb.has_side(context, "ref"):
            raise UsageError("--mht-target-context reference trains on the references: --context-sides "
                             "...,ref,draft and a split with references")
        hops_tgt = self.reads("target")
        # the drafts: of the current sentences, and of the previous ones unless the
        # references are the target context; each table row encoded once
        rows = _rows_of(draft.index if hops_tgt and not use_ref else draft.index[:0], draft.self_rows)
        states, pad = self.sentence_states(self.tgt_sentence_encoder, draft.tokens, rows, "target")
        U = draft.tokens.size(0)
        out.update(mht_draft_states=states, mht_draft_pad=[pad],
                   mht_draft_self=[_remap(rows, U, draft.self_rows)])
        if hops_tgt:
            if use_ref:
                ref = cb.table(context, "ref", K)
                ref_rows = _rows_of(ref.index)
                states, pad = (self.sentence_states(self.tgt_sentence_encoder, ref.tokens, ref_rows, "target")
                               if ref_rows.numel() else (None, None))
                index = _remap(ref_rows, ref.tokens.size(0), ref.index)
            else:
                index = _remap(rows, U, draft.index)
            if states is not None:
                out.update(mht_tgt_states=states, mht_tgt_pad=[pad], mht_tgt_index=[index])
        if self.reads("source"):
            src = cb.table(context, "src", K)
            src_rows = _rows_of(src.index)
            if src_rows.numel():
                states, pad = self.sentence_states(self.src_sentence_encoder, src.tokens, src_rows, "source")
                out.update(mht_src_states=states, mht_src_pad=[pad],
                           mht_src_index=[_remap(src_rows, src.tokens.size(0), src.index)])
        return out

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, context: Optional[dict] = None,
                weights: Optional[list] = None):
        """fairseq's encoder output plus what the decoder reads of the context (``mht_*``
        keys). ``weights``: a list that receives, per layer, the list of what its context
        sublayer weighs (:meth:`MHTTransformerModel.context_weights`)."""
        ctx = self.context_states(context)
        pad = src_tokens.eq(self.padding_idx)
        left = cb.left_padded(src_tokens, self.padding_idx)
        # the rows run in groups of similar length (a batch of document runs mixes lengths):
        # the same states as one padded pass, with a fraction of the padding
        if weights is not None:  # analysis: one pass, the weights in row order
            outs = self._run_layers(src_tokens, ctx, torch.arange(src_tokens.size(0), device=src_tokens.device),
                                    return_all_hiddens, weights)
        else:
            lengths = pad.logical_not().sum(1)
            groups = length_groups.length_buckets(lengths)
            keys = [None] * len(groups)
            if "mht_src_index" in ctx and self.module_reads_source_multi_hop():
                keys = _layer_keys(ctx["mht_src_states"], ctx["mht_src_pad"][0], ctx["mht_src_index"][0],
                                   self.context_size, groups)
            parts = [self._run_layers(cb.cut_width(src_tokens.index_select(0, rows), int(lengths[rows].max()), left),
                                      ctx, rows, return_all_hiddens, keys=k)
                     for rows, k in zip(groups, keys)]
            outs = table_encoder.assemble(parts, groups, src_tokens.size(1), left)
        x, emb, states = outs[0].transpose(0, 1), outs[1], [h.transpose(0, 1) for h in outs[2:]]
        lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        out = {"encoder_out": [x], "encoder_padding_mask": [pad], "encoder_embedding": [emb],
               "encoder_states": states, "fc_results": [], "src_tokens": [], "src_lengths": [lengths]}
        out.update({k: v for k, v in ctx.items() if k.startswith("mht_draft") or k.startswith("mht_tgt")})
        return out

    def module_reads_source_multi_hop(self) -> bool:
        """Source hops of the multi-hop module (whose keys are gathered once per layer)."""
        ctx = getattr(self.layers[0], "context", None) if len(self.layers) else None
        return ctx is not None and ctx.module == "multi-hop"

    def _run_layers(self, src_tokens, ctx, rows, return_all_hiddens=False, weights=None, keys=None):
        """The multi-hop layers over the batch rows ``rows`` (their sources cut to
        ``src_tokens``): ``[x, embedding] + states``, each ``[n, T, C]``. ``keys``: per layer,
        the gathered source context of these rows (:func:`_layer_keys`)."""
        pad = src_tokens.eq(self.padding_idx)
        has_pads = bool(pad.any())
        x, emb = self.forward_embedding(src_tokens)
        if has_pads:
            x = x * (1 - pad.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)
        states = [x] if return_all_hiddens else []
        index = ctx["mht_src_index"][0].index_select(0, rows) if "mht_src_index" in ctx else None
        for n, layer in enumerate(self.layers):
            src_ctx = (ctx["mht_src_states"][n], ctx["mht_src_pad"][0], index) if index is not None else None
            if keys is not None:
                src_ctx = keys[n]
            layer_weights = [] if weights is not None else None
            x = layer(x, pad if has_pads else None, context=src_ctx, weights=layer_weights)
            if weights is not None:
                weights.append(layer_weights)
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return [x.transpose(0, 1), emb] + [h.transpose(0, 1) for h in states]

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        new = super().reorder_encoder_out(encoder_out, new_order)
        for k, v in encoder_out.items():
            if k.startswith("mht_"):  # tables stay; the per-row maps follow the beams
                new[k] = [x.index_select(0, new_order) for x in v] if k.endswith(("_self", "_index")) else v
        return new


class MHTDecoder(BoolFutureMask, TransformerDecoderBase):
    """The multi-hop decoder (§3.3)."""

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = MHTDecoderLayer(cfg, no_encoder_attn)
        return layer

    def setup_context(self, args):
        self.reads_target = args.mht_context_sides in ("both", "target")
        for layer in self.layers:
            layer.draft_attn = static_attention(args.decoder_embed_dim, args.decoder_attention_heads,
                                                 args.attention_dropout)
            layer.draft_attn_layer_norm = LayerNorm(args.decoder_embed_dim)
            if self.reads_target:
                layer.context = _hops(args, args.mht_context_size, args.decoder_normalize_before)

    def row_keys(self, encoder_out, groups: List[Tensor]):
        """For each group of rows (row numbers), per layer, what the draft attention and the
        multi-hop target hops read: ``out[g][n] = (draft RowKeys, [hop RowKeys] or None)``,
        gathered once per layer for all groups (:func:`gather_row_keys`)."""
        ds, dpad, dself = (encoder_out["mht_draft_states"], encoder_out["mht_draft_pad"][0],
                           encoder_out["mht_draft_self"][0])
        draft = [gather_row_keys(s, dpad, [dself], groups) for s in ds]
        hops = [[None] * len(self.layers) for _ in groups]
        layer_ctx = getattr(self.layers[0], "context", None) if len(self.layers) else None
        if ("mht_tgt_states" in encoder_out and self.reads_target and layer_ctx is not None
                and layer_ctx.module == "multi-hop"):
            hops = _layer_keys(encoder_out["mht_tgt_states"], encoder_out["mht_tgt_pad"][0],
                               encoder_out["mht_tgt_index"][0], layer_ctx.context_size, groups)
        return [[(draft[n][g][0], hops[g][n]) for n in range(len(self.layers))] for g in range(len(groups))]

    def extract_features_scriptable(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
                                    incremental_state=None, full_context_alignment: bool = False,
                                    alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None,
                                    weights: Optional[list] = None, row_keys: Optional[list] = None):
        """fairseq's decoder pass with the draft attention and target hops of every layer.
        ``row_keys``: per layer, the draft and hop states of these rows gathered before
        (:meth:`row_keys`; training's grouped pass)."""
        enc = encoder_out["encoder_out"][0]
        enc_pad = encoder_out["encoder_padding_mask"][0] if encoder_out["encoder_padding_mask"] else None
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:] if positions is not None else None
        x = embed_decoder_input(self, prev_output_tokens.contiguous(), positions)
        self_pad = prev_output_tokens.eq(self.padding_idx)
        self_pad = self_pad if bool(self_pad.any()) else None
        ds, dpad, dself = (encoder_out["mht_draft_states"], encoder_out["mht_draft_pad"][0],
                           encoder_out["mht_draft_self"][0])
        tgt = "mht_tgt_states" in encoder_out and self.reads_target
        inner_states: List[Optional[Tensor]] = [x]
        for n, layer in enumerate(self.layers):
            mask = self.buffered_future_mask(x) if incremental_state is None and not full_context_alignment else None
            ctx = ((encoder_out["mht_tgt_states"][n], encoder_out["mht_tgt_pad"][0],
                    encoder_out["mht_tgt_index"][0]) if tgt else None)
            draft = (ds[n], dpad, dself)
            if row_keys is not None:
                draft = row_keys[n][0]
                if tgt and row_keys[n][1] is not None:
                    ctx = row_keys[n][1]
            layer_weights = [] if weights is not None else None
            x = layer(x, enc, enc_pad, incremental_state, mask, self_pad, draft=draft,
                      context=ctx, weights=layer_weights)
            if weights is not None:
                weights.append(layer_weights)
            inner_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [None], "inner_states": inner_states}


@register_model("mht_transformer")
class MHTTransformerModel(DocumentContextModel, TransformerModel):
    """Multi-Hop Transformer (Zhang et al. 2021).

    Contract (:mod:`~fairseq_docctx.models.document_context`): reads the ``draft`` side
    always (the current sentence's draft), the ``src`` side with source hops, the ``ref``
    side with ``--mht-target-context reference`` (training only); K = ``--mht-context-size``
    (default: the task's ``--context-size``); document runs (each context sentence and draft
    encoded once per batch); in training the rows run in groups of similar length and the
    output is packed (real target positions only), so batches count their tables at their
    real length (``grouped-runs``)."""

    doc_batching = "grouped-runs"
    packs_training_output = True
    #: the options of checkpoints written before they existed: the computation those
    #: checkpoints were trained with (applied by the task to a checkpoint's arguments that
    #: lack them, :func:`~fairseq_docctx.models.document_context.apply_checkpoint_defaults`)
    checkpoint_defaults = {"mht_hop_weights": "per-distance", "mht_context_state": "layer-output",
                           "mht_hop_norm": "post", "mht_sentence_encoder_embeddings": "own"}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--mht-context-size", type=int, metavar="K",
                            help="previous sentences read (default: the task's --context-size; given, it "
                            "must equal it; the paper's 3)")
        parser.add_argument("--mht-context-sides", choices=MHT_CONTEXT_SIDES,
                            help="sides with multi-hop context (Zhang et al. 2021, Table 4): both "
                            "(default), source, target, none (the current draft only)")
        parser.add_argument("--mht-context-module", choices=CONTEXT_MODULES,
                            help="how a side reads its K sentences (Table 2): multi-hop (default), concat, "
                            "hierarchical")
        parser.add_argument("--mht-direction", choices=DIRECTIONS,
                            help="order of the hops (Table 3): l2r, farthest sentence first (default), "
                            "or r2l")
        parser.add_argument("--mht-target-context", choices=TARGET_CONTEXTS,
                            help="target context in training (Table 5): the previous sentences' drafts "
                            "(default) or their references (needs --context-sides ...,ref); always the "
                            "drafts at inference")
        parser.add_argument("--src-sentence-encoder-from", metavar="PATH",
                            help="initialise the source-side sentence encoder from the encoder of this "
                            "src->tgt sentence-level checkpoint (also the default --draft-path of "
                            "docctx-translate)")
        parser.add_argument("--tgt-sentence-encoder-from", metavar="PATH",
                            help="initialise the target-side sentence encoder from the encoder of this "
                            "tgt->src sentence-level checkpoint")
        parser.add_argument("--freeze-sentence-encoders", type=freeze_value, nargs="?", const="both",
                            metavar="|".join(FREEZE),
                            help="the sentence encoders kept fixed (no gradients): initialised (default: "
                            "those initialised by --src/--tgt-sentence-encoder-from), both (also the "
                            "bare flag, or true), source, target, none (or false)")
        parser.add_argument("--mht-hop-weights", choices=HOP_WEIGHTS,
                            help="shared (default): one attention and LayerNorm for every hop distance of a "
                            "layer and side (Eqs. 3-4, 8-9); per-distance: one per distance (K times the "
                            "hop parameters)")
        parser.add_argument("--mht-context-state", choices=CONTEXT_STATES,
                            help="A^(n), what layer n reads of a context sentence or draft: the sentence "
                            "encoder's layer-n self-attention output (default, Eq. 2) or its whole layer-n "
                            "output (layer-output)")
        parser.add_argument("--mht-hop-norm", choices=HOP_NORMS,
                            help="the hops' LayerNorm: placed as the layers' (as-layers, default: pre-norm "
                            "with --encoder/decoder-normalize-before) or always after the residual (post)")
        parser.add_argument("--mht-sentence-encoder-embeddings", choices=SENTENCE_ENCODER_EMBEDDINGS,
                            help="the sentence encoders' token embeddings: tables of their own (default, "
                            "from the sentence-level checkpoints) or the model's (source side: the "
                            "encoder's, target side: the decoder's)")
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "mht_transformer")
        resolve_context_size(args, "mht_context_size", task)
        mht_transformer(args)
        if args.encoder_embed_dim != args.decoder_embed_dim:
            raise UsageError("mht_transformer: the decoder reads encoder-sized drafts states: "
                             "--encoder-embed-dim must equal --decoder-embed-dim")
        if args.mht_context_size < 1:
            raise UsageError("mht_transformer: --mht-context-size must be >= 1")
        unsupported = [o for o in ("checkpoint_activations", "offload_activations", "scale_attn", "scale_fc", "scale_heads",
                                   "scale_resids", "cross_self_attention") if getattr(args, o, False)]
        if unsupported:
            raise UsageError("mht_transformer does not support " + ", ".join(
                "--" + o.replace("_", "-") for o in unsupported))
        for opt, choices in (("mht_context_sides", MHT_CONTEXT_SIDES), ("mht_context_module", CONTEXT_MODULES),
                             ("mht_direction", DIRECTIONS), ("mht_target_context", TARGET_CONTEXTS),
                             ("mht_hop_weights", HOP_WEIGHTS), ("mht_context_state", CONTEXT_STATES),
                             ("mht_hop_norm", HOP_NORMS),
                             ("mht_sentence_encoder_embeddings", SENTENCE_ENCODER_EMBEDDINGS)):
            if getattr(args, opt) not in choices:
                raise UsageError(f"mht_transformer: --{opt.replace('_', '-')} {getattr(args, opt)}: "
                                 f"one of {', '.join(choices)}")
        try:
            args.freeze_sentence_encoders = freeze_value(args.freeze_sentence_encoders)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"mht_transformer: {e}") from None
        model = super().build_model(args, task)
        model.encoder.setup_context(args, task.target_dictionary, model.decoder.embed_tokens)
        model.decoder.setup_context(args)
        sides = ["draft"]
        if args.mht_context_sides in ("both", "source"):
            sides.append("src")
        if args.mht_context_sides in ("both", "target") and args.mht_target_context == "reference":
            sides.append("ref")
        model.declare_context(sides, args.mht_context_size)
        # decided before init_sentence_encoders clears the paths it applies
        frozen = frozen_sides(args.freeze_sentence_encoders, {
            "source": bool(args.src_sentence_encoder_from) and model.encoder.src_sentence_encoder is not None,
            "target": bool(args.tgt_sentence_encoder_from)})
        model.init_sentence_encoders(args)
        # --init-from-sentence-checkpoint: the multi-hop encoder/decoder from a sentence model
        sentence_init.apply(model, args, "mht_transformer", is_context=cls.is_context_weight,
                            record_as="mht_initialized_from")
        model.freeze_sentence_encoders(frozen)
        logger.info("mht_transformer parameters (Zhang et al. 2021, Table 1: Transformer 50M, MHT 80M):\n"
                    + format_parameter_table(parameter_table(model)))
        return model

    def sentence_encoders(self) -> Dict[str, TransformerEncoderBase]:
        """The sentence encoders by side (``source`` only with source-side context)."""
        enc = self.encoder
        out = {"source": enc.src_sentence_encoder, "target": enc.tgt_sentence_encoder}
        return {side: m for side, m in out.items() if m is not None}

    def freeze_sentence_encoders(self, sides: Sequence[str]):
        """Keep the sentence encoders of ``sides`` fixed: no gradients (their weights, except
        a table shared with the model, ``--mht-sentence-encoder-embeddings model``), run
        without autograd."""
        own = {id(p) for n, p in self.named_parameters(remove_duplicate=False) if "sentence_encoder." not in n}
        encoders = self.sentence_encoders()
        self.encoder.frozen_sides = tuple(s for s in sides if s in encoders)
        for side in self.encoder.frozen_sides:
            for p in encoders[side].parameters():
                if id(p) not in own:
                    p.requires_grad_(False)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's, with a one-line error when the context sublayers' attentions of the
        weights are not the model's (weights of another ``--mht-hop-weights``,
        ``--mht-context-module`` or K: e.g. fairseq-train resuming a checkpoint of another
        configuration)."""
        if strict:
            mine = set(self.state_dict())
            extra = sorted(k for k in state_dict if ".context." in k and k not in mine)
            missing = sorted(k for k in mine if ".context." in k and k not in state_dict)
            if extra or missing:
                a = self.args
                raise ValueError(
                    "mht_transformer: the weights' context sublayers are not this model's "
                    f"(--mht-hop-weights {a.mht_hop_weights}, --mht-context-module {a.mht_context_module}, "
                    f"--mht-context-size {a.mht_context_size}): "
                    + (f"unexpected {extra[0]}" if extra else f"missing {missing[0]}")
                    + ": build it with the options the weights were trained with")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    @staticmethod
    def is_context_weight(name: str) -> bool:
        """Weights a sentence-level ``transformer`` does not have."""
        return any(s in name for s in ("sentence_encoder.", ".context.", ".draft_attn"))

    def init_sentence_encoders(self, args):
        """``--src/tgt-sentence-encoder-from``: applied once (cleared in the args, the path
        kept in ``args.draft_path`` for the source one, so a checkpoint of this model
        restores its own weights and knows the model that makes its drafts)."""
        resume = sentence_init.restore_path(args)
        for opt, module in (("src_sentence_encoder_from", self.encoder.src_sentence_encoder),
                            ("tgt_sentence_encoder_from", self.encoder.tgt_sentence_encoder)):
            path = getattr(args, opt, None)
            if not path:
                continue
            flag = "--" + opt.replace("_", "-")
            if opt == "src_sentence_encoder_from":
                args.draft_path = path
            if resume:
                print(f"mht_transformer: resuming from {resume}: {flag} {path} not applied again", flush=True)
            elif module is None:
                print(f"mht_transformer: {flag} {path} not used (no source-side context)", flush=True)
            else:
                which = "source" if opt.startswith("src") else "target"
                shared = module.embed_tokens is (self.encoder.embed_tokens if which == "source"
                                                 else self.decoder.embed_tokens)
                sentence_init.load_part_weights(
                    module, path, "encoder.", f"mht_transformer {which}-side sentence encoder", flag,
                    keep=("embed_tokens.",) if shared else (),
                    keep_reason="the model's table: --mht-sentence-encoder-embeddings model")
            setattr(args, opt, None)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return MHTEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return MHTDecoder(TransformerConfig.from_namespace(args), tgt_dict, embed_tokens,
                          no_encoder_attn=args.no_cross_attention)

    def _weights_pass(self, sample):
        """One teacher-forced pass in eval mode collecting what every context sublayer weighs:
        ``(encoder output, encoder layers' weights, decoder layers' weights)``."""
        ni = sample["net_input"]
        was = self.training
        self.eval()
        enc_w, dec_w = [], []
        try:
            with torch.no_grad():
                eo = self.encoder(ni["src_tokens"], src_lengths=ni["src_lengths"], context=ni.get("context"),
                                  weights=enc_w)
                self.decoder.extract_features_scriptable(ni["prev_output_tokens"], eo, weights=dec_w)
        finally:
            self.train(was)
        return eo, enc_w, dec_w

    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels", "attention")

    def context_weights(self, sample):
        """What the model weighs its context with, for every row of a batch (the panel format
        of :mod:`fairseq_docctx.evaluation.plots`): per layer with context, the context gate
        ``α`` of the multi-hop encoder (Eq. 5; one column per source token) and decoder (Eq.
        10; one per target token), mean over channels: ``α`` weighs the current sentence
        (the self-attention / draft-attention output), ``1 - α`` what the hops read. Rows
        without a previous sentence have no gate (their row is masked)."""
        ni = sample["net_input"]
        _, enc_w, dec_w = self._weights_pass(sample)
        panels = []
        ctx, K = ni.get("context"), self.encoder.context_size
        for part, layers, tokens, pad, columns, side in (
                ("encoder", enc_w, ni["src_tokens"], self.encoder.padding_idx, "source", "src"),
                ("decoder", dec_w, ni["prev_output_tokens"], self.decoder.padding_idx, "target", "draft")):
            real = tokens.ne(pad)
            # rows without a previous sentence: the gate mixes the query with itself
            has = cb.index(ctx, side, K).ge(0).any(1, keepdim=True) if cb.has_side(ctx, side) else None
            for n, ws in enumerate(layers):
                for name, w in ws:
                    if name != "gate" or has is None:
                        continue
                    panels.append(dict(
                        title=f"MHT {part} layer {n + 1}: context gate α (weight of the current sentence)",
                        weights=(w * real * has).unsqueeze(1), rows=["α"], row_mask=has,
                        columns=columns, column_mask=real, context_side=columns, normalized=False))
        return panels

    def context_attention(self, sample):
        """Each hop's attention (mean over heads) over the tokens of its context sentence
        (Zhang et al. 2021, §3.2-3.3, Eqs. 3-4 and 8-9), per layer: the encoder's over the
        previous source sentences (one distribution per source position), the decoder's over
        the previous drafts (per target position); rows without the hop's sentence have none.
        Only the multi-hop context module attends hop by hop."""
        if getattr(self.args, "mht_context_module", "multi-hop") != "multi-hop":
            raise ContextAttentionUnsupported(f"mht_transformer --mht-context-module {self.args.mht_context_module}: "
                                              "only the multi-hop module gives hop attentions")
        ni = sample["net_input"]
        eo, enc_w, dec_w = self._weights_pass(sample)
        with torch.no_grad():
            src_ctx = self.encoder.context_states(ni.get("context"))
        out = []
        for part, layers, tokens, pad_idx, positions, tables in (
                ("encoder", enc_w, ni["src_tokens"], self.encoder.padding_idx, "source",
                 (src_ctx.get("mht_src_pad"), src_ctx.get("mht_src_index"))),
                ("decoder", dec_w, ni["prev_output_tokens"], self.decoder.padding_idx, "target",
                 (eo.get("mht_tgt_pad"), eo.get("mht_tgt_index")))):
            if tables[0] is None:
                continue
            pad, index = tables[0][0], tables[1][0]
            real = tokens.ne(pad_idx)
            for n, ws in enumerate(layers):
                for dist, w in ws:
                    if dist == "gate" or dist == "draft" or w is None:
                        continue
                    rows = index[:, dist - 1]
                    keys = ~pad.index_select(0, rows.clamp(min=0))  # [B, L]
                    out.append(dict(title=f"MHT {part} layer {n + 1}: hop over the sentence at distance {dist}",
                                    positions=positions, items="context tokens", weights=w.float(),
                                    support=keys[:, None, :].expand_as(w),
                                    position_mask=real & (rows >= 0)[:, None]))
        return out

    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer=None, alignment_heads=None):
        packed = self.training and not features_only
        # the packed training pass reads no encoder layer states
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens and not packed, context=context)
        if packed:
            return self._packed_training_output(prev_output_tokens, encoder_out)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)


    def _packed_training_output(self, prev_output_tokens, encoder_out):
        """Training: the decoder over the rows in groups of similar target length (a batch of
        document runs pads its targets: docs/benchmarks.md, "Foundation") and the output
        projection of the real positions only: logits ``[1, R, V]`` (``packs_training_output``)."""
        dec = self.decoder
        real = prev_output_tokens.ne(dec.padding_idx)
        lengths = real.sum(1)
        groups = length_groups.length_buckets(lengths)
        # per-row tensors with a gradient are gathered once for all groups and split (a
        # gather per group would build one batch-sized gradient per group in the backward)
        sizes = [len(g) for g in groups]
        order = torch.cat(groups)
        enc = encoder_out["encoder_out"][0].index_select(1, order).split(sizes, dim=1)
        enc_pad = encoder_out["encoder_padding_mask"]
        enc_pad = enc_pad[0].index_select(0, order).split(sizes) if enc_pad else [None] * len(groups)
        keys = dec.row_keys(encoder_out, groups)
        parts = []
        for i, rows in enumerate(groups):
            eo = {"encoder_out": [enc[i]], "encoder_padding_mask": [enc_pad[i]] if enc_pad[i] is not None else []}
            for k, v in encoder_out.items():
                if k.startswith("mht_"):  # tables shared, per-row maps of the group's rows
                    eo[k] = [x.index_select(0, rows) for x in v] if k.endswith(("_self", "_index")) else v
            w = int(lengths[rows].max())
            parts.append([dec.extract_features_scriptable(prev_output_tokens.index_select(0, rows)[:, :w], eo,
                                                          row_keys=keys[i])[0]])
        x = table_encoder.assemble(parts, groups, prev_output_tokens.size(1), False)[0]
        return dec.output_layer(x[real]).unsqueeze(0), {"attn": [None], "inner_states": None,
                                                         "packed_positions": real}


#: the rows of :func:`parameter_table`, in order
COMPONENTS = (
    ("transformer", "Transformer: embeddings, self-attention, encoder-decoder attention, FFN, LayerNorms"),
    ("hops", "hops (Eqs. 3-4, 8-9): attention + LayerNorm, encoder and decoder"),
    ("gates", "context gates (Eqs. 5, 10): W_a, W_b"),
    ("draft", "draft attention (Eq. 7): attention + LayerNorm"),
    ("src_layers", "source-side sentence encoder (§3.1): layers"),
    ("src_embed", "source-side sentence encoder: embeddings"),
    ("tgt_layers", "target-side sentence encoder (§3.1): layers"),
    ("tgt_embed", "target-side sentence encoder: embeddings"),
)


def _component(name: str) -> str:
    for side in ("src", "tgt"):
        if f"encoder.{side}_sentence_encoder." in name:
            return f"{side}_embed" if ".embed_tokens." in name or ".embed_positions." in name else f"{side}_layers"
    if ".context." in name:
        return "gates" if ".gate_" in name else "hops"
    if ".draft_attn" in name:
        return "draft"
    return "transformer"


def parameter_table(model) -> List[Tuple[str, int, int]]:
    """The parameters of an ``mht_transformer`` by component (:data:`COMPONENTS`):
    ``[(component, parameters, trained)]`` with a last row ``total``; ``trained``: those that
    get gradients (not kept fixed). A parameter shared by several modules (an embedding table)
    is counted once, under the first of its components in :data:`COMPONENTS`' order (a
    sentence encoder's table shared with the model is the Transformer's).

    Zhang et al. (2021, Table 1) report 80M parameters for MHT and 50M for their Transformer
    ("the improvements of our model are not from enlarging the network", §4.4). The 30M added
    cannot hold two sentence encoders trained with the model: their layers alone are 2 ×
    18.9M at the paper's size (6 layers, 512/2048), beside the draft attention of Eq. 7
    (6.3M) and the hop sublayers (at least one attention and a gate per layer and side,
    18.9M). The count leaves out the sentence encoders, the "pre-trained encoders" (§3)
    initialised from two sentence-level models (§4.3): the architecture keeps them fixed when
    initialised (``--freeze-sentence-encoders initialised``). What remains is the draft
    attention and the hops: 50.5M with one attention per hop distance, 25.2M with one per
    layer and side (``--mht-hop-weights shared``, the default; the paper: 30M). docs/mht.md
    gives the figures and the readings the count leaves open."""
    component = {}
    rank = {key: i for i, (key, _) in enumerate(COMPONENTS)}
    params = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        c = _component(name)
        if id(p) not in component or rank[c] < rank[component[id(p)]]:
            component[id(p)] = c
        params[id(p)] = p
    rows = []
    for key, label in COMPONENTS:
        ps = [params[i] for i, c in component.items() if c == key]
        rows.append((label, sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad)))
    rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    return rows


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def format_parameter_table(rows: List[Tuple[str, int, int]], paper: bool = True) -> str:
    """:func:`parameter_table`'s rows as a Markdown table (in millions with one decimal when
    the total is a million or more, else exact), with the paper's figures (Table 1) beside the
    Transformer and the total when ``paper``."""
    figures = {COMPONENTS[0][1]: _millions(PAPER_PARAMETERS["transformer"]),
               "total": _millions(PAPER_PARAMETERS["mht"])}
    number = _millions if rows[-1][1] >= 1_000_000 else "{:,}".format
    head = "| component | parameters | trained |" + (" Zhang et al. 2021, Table 1 |" if paper else "")
    lines = [head, "| --- | ---: | ---: |" + (" ---: |" if paper else "")]
    for label, n, trained in rows:
        cells = [label, number(n), number(trained)] + ([figures.get(label, "")] if paper else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_size_model(vocabulary: int = 30000, context_size: int = 3, **options):
    """An ``mht_transformer`` at the paper's size (Zhang et al. 2021, §4.1 and §4.3: 6+6
    layers, 512/2048, 8 heads, one joint vocabulary of ``vocabulary`` entries with shared
    embeddings, K = ``context_size``) built on the meta device (shapes only: no memory, no
    initialisation), for :func:`parameter_table`. ``options``: model options by their
    argument names (e.g. ``mht_hop_weights="per-distance"``); ``freeze_sentence_encoders``
    also decides what the table counts as trained (``initialised`` freezes nothing here: no
    sentence-level checkpoint is given)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocabulary - len(d)):
        d.add_symbol(f"w{i}")

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_size=context_size, context_sides="src,draft")

    args = argparse.Namespace(arch="mht_transformer", share_all_embeddings=True, **options)
    mht_transformer(args)
    with torch.device("meta"):
        return MHTTransformerModel.build_model(args, Task())


@register_model_architecture("mht_transformer", "mht_transformer")
def mht_transformer(args):
    """Paper defaults (Zhang et al. 2021, §4.3): Transformer base (6+6 layers, 512/2048, 8
    heads, dropout 0.1), multi-hop context on both sides, left to right, drafts as training
    target context; K (the paper's 3) is the task's ``--context-size`` unless
    ``--mht-context-size`` says otherwise; ``A^(n)`` the sentence encoders' self-attention
    outputs (Eq. 2); one hop attention per layer and side and the initialised sentence
    encoders kept fixed, the configuration of the paper's 80M (Table 1, see
    :func:`parameter_table`)."""
    base_architecture(args)
    set_defaults(args, mht_context_size=None, mht_context_sides="both", mht_context_module="multi-hop",
                 mht_direction="l2r", mht_target_context="draft", src_sentence_encoder_from=None,
                 tgt_sentence_encoder_from=None, freeze_sentence_encoders="initialised", draft_path=None,
                 mht_hop_weights="shared", mht_context_state="self-attention", mht_hop_norm="as-layers",
                 mht_sentence_encoder_embeddings="own")
    sentence_init.set_defaults(args)
