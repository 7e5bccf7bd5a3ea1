"""``concat_transformer``: the concatenation baseline (Tiedemann & Scherrer 2017,
"Neural Machine Translation with Extended Context"). See ``docs/concat.md``.

The K previous source sentences are joined to the current one with a separator token on the
encoder side (``x_{j-K} <sep> ... <sep> x_{j-1} <sep> x_j``). With target context
(``--context-sides target|both``) the previous target sentences form a decoder prefix
(``y_{j-K} <sep> ... y_{j-1} <sep>``) that the decoder reads but that is not scored: the
outputs at prefix positions are cut away before the loss. On request (``context_outputs=True``,
the criterion ``label_smoothed_cross_entropy_focused`` with ``--context-loss-weight``, Lupo et
al. 2022) the outputs at the prefix positions and their targets come back as extras.

Options (Lupo et al. 2022, 2023; :mod:`fairseq_docctx.modules.sentence_positions`):
``--segment-shifted-positions SHIFT`` and ``--sentence-position-embeddings
sinusoidal|learned``, on the encoder and the decoder.
"""
from typing import List, Optional

import torch
import torch.nn.functional as F
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from torch import Tensor

from ..data import context_batch as cb
from ..errors import UsageError
from ..modules.context_concat import concat_with_context, gather_context_rows, pack_segments
from ..modules.decoder_input import embed_decoder_input
from ..modules.masks import BoolFutureMask
from ..modules.sentence_positions import SENTENCE_EMBEDDINGS, DocumentPositions, document_positional_embedding
from . import pretrained_init, sentence_init
from .document_context import DEFAULT_CONTEXT_SIZE, DocumentContextModel, task_context

# positional embeddings the cached decoding can look up at per-row positions
_CACHED_POSITIONS = (LearnedPositionalEmbedding, SinusoidalPositionalEmbedding)


class ConcatContextEncoder(TransformerEncoderBase):
    """A Transformer encoder over the concatenation of context and current sentence."""

    sep_idx: int = -1  # set by ConcatTransformerModel.build_model
    #: the target dictionary's separator, which ends each sentence of the target prefix (set by
    #: build_model; it differs from ``sep_idx`` where the two dictionaries differ, e.g. FSMT's)
    tgt_sep_idx: Optional[int] = None

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings=None, context=None):
        if cb.has_side(context, "src"):
            src = cb.table(context, "src")
            src_tokens, src_lengths = concat_with_context(
                src_tokens, src.tokens, src.index,
                self.padding_idx, self.dictionary.eos(), self.sep_idx,
                left_pad=True, max_len=self.max_source_positions,
            )
            token_embeddings = None
        out = self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        if cb.has_side(context, "tgt"):
            # previous target sentences, farthest first, each ending in <sep>
            tgt = cb.table(context, "tgt")
            sep = self.sep_idx if self.tgt_sep_idx is None else self.tgt_sep_idx
            segs = [
                gather_context_rows(tgt.tokens, tgt.index[:, k], self.padding_idx,
                                    self.dictionary.eos(), sep)
                for k in reversed(range(tgt.index.size(1)))
            ]
            prefix, _ = pack_segments(segs, self.padding_idx, left_pad=False)
            out["tgt_prefix"] = [prefix]
        return out

    def reorder_encoder_out(self, encoder_out, new_order):
        new = super().reorder_encoder_out(encoder_out, new_order)
        if encoder_out.get("tgt_prefix"):
            new["tgt_prefix"] = [encoder_out["tgt_prefix"][0].index_select(0, new_order)]
        return new


class ConcatContextDecoder(BoolFutureMask, TransformerDecoderBase):
    """A Transformer decoder that reads the previous target sentences as an unscored prefix.

    Teacher forcing (``incremental_state=None``) runs the decoder over ``prefix + current``
    and keeps the outputs at the current sentence's positions. Under fairseq's beam search
    (``incremental_state`` given) the prefix is run once per sentence: the first call runs
    ``prefix + tokens so far`` with the causal mask into the self-attention key/value buffers
    of every layer (fairseq's incremental state, reordered with the beams by
    ``reorder_incremental_state``), and every later call runs only the newest token, at the
    position it has after its row's prefix. The outputs are those of teacher forcing.

    In a batch the prefixes have different lengths: for the cached run they are left-padded
    (row ``[pad ... pad, prefix, current]``), the padding is masked as keys in every later
    step, and the positions count only real tokens, as in teacher forcing.
    """

    sep_idx: int = -1  # set by ConcatTransformerModel.build_model

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                context_outputs: bool = False, **kwargs):
        prefix = encoder_out.get("tgt_prefix") if encoder_out is not None else None
        if not prefix:
            return super().forward(prev_output_tokens, encoder_out, incremental_state, **kwargs)
        if incremental_state is not None:
            out = self._forward_cached(prev_output_tokens, encoder_out, prefix[0],
                                       incremental_state, **kwargs)
            if out is not None:
                return out
        return self._forward_full(prev_output_tokens, encoder_out, prefix[0],
                                  context_outputs=context_outputs, **kwargs)

    def _forward_full(self, prev_output_tokens, encoder_out, prefix, context_outputs: bool = False,
                      **kwargs):
        """The decoder over ``prefix + prev_output_tokens``, outputs at the current sentence's
        positions ``[B, T, V]`` (teacher forcing; row lengths over ``max_target_positions``
        lose their earliest prefix tokens).

        With ``context_outputs`` the extras also hold ``context_out`` ``[[B, P-1, V]]``, the
        outputs at the first ``P-1`` positions (P the longest prefix of the batch), and
        ``context_target`` ``[[B, P-1]]``: at prefix position ``t`` the prefix token ``t+1``
        (the next context token, separators included), padding where ``t+1`` is past the row's
        prefix. The prefix's first token has no position before it and is not predicted; the
        last separator's position is followed by the start token ``</s>`` of the current
        sentence, which is not a context token either."""
        pad = self.padding_idx
        width = prev_output_tokens.size(1)
        cur_len = prev_output_tokens.ne(pad).sum(1)
        tokens, lengths = pack_segments(
            [prefix, prev_output_tokens], pad, left_pad=False,
            max_len=self.max_target_positions,
        )
        prefix_len = lengths - cur_len
        x, extra = super().forward(tokens, encoder_out, None, **kwargs)
        if context_outputs:
            span = max(int(prefix_len.max()) - 1, 0)
            nxt = torch.arange(1, span + 1, device=x.device)
            extra["context_out"] = [x[:, :span]]
            extra["context_target"] = [tokens[:, 1:span + 1].masked_fill(
                nxt.unsqueeze(0) >= prefix_len.unsqueeze(1), pad)]
        # keep the outputs at the current sentence's positions only
        pos = (prefix_len.unsqueeze(1) + torch.arange(width, device=x.device)).clamp(
            max=tokens.size(1) - 1
        )
        x = x.gather(1, pos.unsqueeze(-1).expand(-1, -1, x.size(-1)))
        if extra.get("attn") and extra["attn"][0] is not None:
            a = extra["attn"][0]
            extra["attn"] = [a.gather(1, pos.unsqueeze(-1).expand(-1, -1, a.size(-1)))]
        return x, extra

    def _forward_cached(self, prev_output_tokens, encoder_out, prefix, incremental_state,
                        features_only: bool = False, full_context_alignment: bool = False,
                        alignment_layer: Optional[int] = None,
                        alignment_heads: Optional[int] = None, **unused):
        """One beam-search step from the cache, or None where only the full run gives the
        outputs of teacher forcing: a row longer than ``max_target_positions`` (teacher forcing
        then cuts its prefix, which shifts every position), padding among the tokens so far,
        or a decoder option the cached run does not implement. That choice is kept for the
        rest of the sentence (the cache is not filled by the full run)."""
        pad = self.padding_idx
        state = self.get_incremental_state(incremental_state, "concat_prefix")
        if state is not None and "prefix_len" not in state:
            return None
        first = state is None
        prefix_len = prefix.ne(pad).sum(1) if first else state["prefix_len"]
        # the current sentence's index in the row (the prefix's separators): its position shift
        prefix_sents = prefix.eq(self.sep_idx).sum(1) if first else state["prefix_sents"]
        width = prev_output_tokens.size(1)
        if (
            full_context_alignment
            or self.cross_self_attention
            or not isinstance(self.embed_positions, _CACHED_POSITIONS + (type(None),))
            or bool(prev_output_tokens.eq(pad).any()
                    | (prefix_len.max() + width > self.max_target_positions))
        ):
            self.set_incremental_state(incremental_state, "concat_prefix", {"full": None})
            return None
        if first:
            # left-padded [pad ... pad, prefix, tokens so far]: the current sentence ends
            # every row, its positions count real tokens only (as in teacher forcing)
            tokens, _ = pack_segments([prefix, prev_output_tokens], pad, left_pad=True)
            pad_mask = tokens.eq(pad)
            if not bool(pad_mask.any()):
                pad_mask = None
            positions = self.embed_positions(tokens) if self.embed_positions is not None else None
        else:
            tokens = prev_output_tokens[:, -1:]
            pad_mask = None  # the cached prefix padding stays masked in the layers' buffers
            positions = None
            if self.embed_positions is not None:
                positions = self._embed_positions_at((pad + prefix_len + width).unsqueeze(1),
                                                     prefix_sents.unsqueeze(1))
        self.set_incremental_state(incremental_state, "concat_prefix",
                                   {"prefix_len": prefix_len, "prefix_sents": prefix_sents})
        x, extra = self._extract_features_cached(
            tokens, positions, encoder_out, incremental_state, pad_mask, causal=first,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
        )
        if first:
            x = x[:, -width:]
            if extra["attn"][0] is not None:
                extra["attn"] = [extra["attn"][0][:, -width:]]
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def _embed_positions_at(self, positions: Tensor, sentence: Optional[Tensor] = None) -> Tensor:
        """Positional embeddings ``[B, T, C]`` of the absolute positions ``[B, T]`` (fairseq's
        numbering: the first real token is at ``padding_idx + 1``) of tokens of the current
        sentence, the row's sentence ``sentence`` ``[B, T]`` (0 = its first; document
        positions shift them and add the current sentence's embedding)."""
        emb = self.embed_positions
        if isinstance(emb, DocumentPositions):
            if sentence is None:
                sentence = torch.zeros_like(positions)
            return emb.embed_at(positions + emb.shift * sentence, positions.ne(emb.padding_idx).long())
        if isinstance(emb, SinusoidalPositionalEmbedding):
            return emb.weights.index_select(0, positions.reshape(-1)).view(
                *positions.shape, -1).detach()
        return F.embedding(positions, emb.weight, emb.padding_idx, emb.max_norm,
                           emb.norm_type, emb.scale_grad_by_freq, emb.sparse)

    def _extract_features_cached(self, tokens, positions, encoder_out, incremental_state,
                                 pad_mask: Optional[Tensor], causal: bool,
                                 alignment_layer: Optional[int] = None,
                                 alignment_heads: Optional[int] = None):
        """fairseq's decoder layers over ``tokens`` ``[B, T]`` into ``incremental_state``, with
        the given positional embeddings, the causal mask over the ``T`` new positions if
        ``causal``, and the key padding ``pad_mask`` ``[B, T]`` (kept by the layers for the
        later steps). Returns features ``[B, T, C]`` and fairseq's extras."""
        enc = encoder_out["encoder_out"][0] if len(encoder_out["encoder_out"]) > 0 else None
        enc_mask = (encoder_out["encoder_padding_mask"][0]
                    if len(encoder_out["encoder_padding_mask"]) > 0 else None)
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        x = embed_decoder_input(self, tokens, positions)  # T x B x C
        # with an incremental state fairseq's attention adds the mask to its weights itself:
        # the float causal mask (a bool one cannot be added), not BoolFutureMask's
        self_attn_mask = TransformerDecoderBase.buffered_future_mask(self, x) if causal else None
        # a left-padding position sees only padding under the causal mask: its attention is
        # undefined (NaN); zeroed after each layer so the next layer's keys/values there are
        # finite (they are masked, so the real positions' outputs do not depend on them)
        pad_rows = pad_mask.t().unsqueeze(-1) if pad_mask is not None else None
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        for idx, layer in enumerate(self.layers):
            x, layer_attn, _ = layer(
                x, enc, enc_mask, incremental_state, self_attn_mask=self_attn_mask,
                self_attn_padding_mask=pad_mask, need_attn=idx == alignment_layer,
                need_head_weights=idx == alignment_layer,
            )
            if pad_rows is not None:
                x = x.masked_fill(pad_rows, 0.0)
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)  # average over heads
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states}

    def reorder_incremental_state(self, incremental_state, new_order):
        """The rows' prefix lengths follow the beams (the layers reorder their own buffers)."""
        state = self.get_incremental_state(incremental_state, "concat_prefix")
        if state is not None and state.get("prefix_len") is not None:
            for key in ("prefix_len", "prefix_sents"):
                state[key] = state[key].index_select(0, new_order)
            self.set_incremental_state(incremental_state, "concat_prefix", state)


@register_model("concat_transformer")
class ConcatTransformerModel(DocumentContextModel, TransformerModel):
    """Transformer over context sentences concatenated with ``--context-separator``.

    Context sides and size come from the task (``--context-size``, ``--context-sides``):
    it reads the ``src`` and ``tgt`` sides the task gives, all K sentences.
    """

    #: the decoder returns the outputs at the target-context positions on request
    #: (``forward(..., context_outputs=True)``; ``label_smoothed_cross_entropy_focused``)
    supports_context_outputs = True

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)
        parser.add_argument(
            "--segment-shifted-positions", type=int, metavar="SHIFT",
            help="segment-shifted positions (Lupo et al. 2022): the tokens of the i-th sentence of "
                 "a concatenation (i = 0 the first) are at their position plus i*SHIFT, on the "
                 "encoder and the decoder (0: off, the default; the authors' scripts: 21 En-De, 8 En-Ru)")
        parser.add_argument(
            "--sentence-position-embeddings", choices=SENTENCE_EMBEDDINGS, metavar="KIND",
            help="add to every token embedding an embedding of its sentence's distance from the "
                 "current sentence (Lupo et al. 2023): none (default), sinusoidal or learned")

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "concat_transformer")
        concat_transformer_base(args)
        if args.freeze_sentence_weights:
            raise UsageError("concat_transformer: --freeze-sentence-weights would freeze every weight "
                             "(all of them are a sentence-level transformer's)")
        sep = getattr(getattr(task, "cfg", None), "context_separator", "<sep>")
        for d in (task.source_dictionary, task.target_dictionary):
            if sep not in d.indices:
                raise UsageError(
                    f"concat_transformer needs the context separator {sep} in the "
                    "dictionaries: use --task document_translation"
                )
        shift = int(args.segment_shifted_positions or 0)
        if shift < 0:
            raise UsageError(f"concat_transformer: --segment-shifted-positions {shift}: the shift is >= 0")
        model = super().build_model(args, task)
        sides, K = task_context(task)
        model.declare_context([s for s in sides if s in ("src", "tgt")], None)
        model.encoder.sep_idx = task.source_dictionary.index(sep)
        model.decoder.sep_idx = task.target_dictionary.index(sep)
        model.encoder.tgt_sep_idx = model.decoder.sep_idx
        if shift or args.sentence_position_embeddings != "none":
            # the number of sentences a row holds sizes the learned tables: recorded in the
            # checkpoint (the task's K + 1 when the model is first built)
            if getattr(args, "concat_max_sentences", None) is None:
                args.concat_max_sentences = (int(K) if K is not None else DEFAULT_CONTEXT_SIZE) + 1
            for part, max_pos in ((model.encoder, args.max_source_positions),
                                  (model.decoder, args.max_target_positions)):
                part.embed_positions = document_positional_embedding(
                    part.embed_positions, max_pos, args.concat_max_sentences, part.sep_idx,
                    part.dictionary.eos(), shift, args.sentence_position_embeddings)
        # every weight is a sentence-level transformer's (the separator's embedding row is
        # new when the checkpoint's dictionary lacks it)
        return sentence_init.apply(model, args, "concat_transformer", is_context=lambda name: False)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return ConcatContextEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return ConcatContextDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer=None, alignment_heads=None, context_outputs: bool = False):
        """fairseq's forward; ``context_outputs``: the extras also hold the outputs at the
        target-context positions and their targets (``ConcatContextDecoder._forward_full``)."""
        encoder_out = self.encoder(
            src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
            context=context,
        )
        return self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
            context_outputs=context_outputs,
        )

    @torch.no_grad()
    def _attention_by_distance(self, sample):
        """The last decoder layer's encoder-decoder attention (mean over heads) ``[B, T, S]``
        of a teacher-forced batch, the distance of every concatenated source position (its
        sentence's: 0 the current one; a separator closes its sentence) ``[B, S]``, whether
        it is a token ``[B, S]``, and K."""
        ni = sample["net_input"]
        ctx = cb.get_context(ni)
        enc = self.encoder
        pad = enc.padding_idx
        was = self.training
        self.eval()
        try:
            attn = self(**ni)[1]["attn"][0]  # [B, T, S]
        finally:
            self.train(was)
        tokens = ni["src_tokens"]
        K = 0
        if cb.has_side(ctx, "src"):
            src = cb.table(ctx, "src")
            K = src.index.size(1)
            tokens, _ = concat_with_context(tokens, src.tokens, src.index, pad,
                                            enc.dictionary.eos(), enc.sep_idx, left_pad=True,
                                            max_len=enc.max_source_positions)
        # a position's distance: the number of separators at or after it
        dist = tokens.eq(enc.sep_idx).flip(1).cumsum(1).flip(1)
        return attn.float(), dist, tokens.ne(pad), K

    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels", "attention")

    def context_weights(self, sample):
        """How much of its encoder-decoder attention every target position spends on each
        sentence of the concatenated source (last decoder layer, mean over heads), for a
        teacher-forced batch with its context. Returns a list of one panel (the format of
        :mod:`fairseq_docctx.evaluation.plots`): ``weights [B, K+1, T]``, row ``k`` the
        attention mass on the source sentence at distance ``k`` (its closing separator
        included; row 0: the current sentence), one column per target position; each real
        column sums to 1 over the sentences present (``row_mask``: the sentences the
        concatenation holds, the farthest being cut first at ``--max-source-positions``)."""
        attn, dist, real, K = self._attention_by_distance(sample)
        onehot = (dist.unsqueeze(1) == torch.arange(K + 1, device=dist.device)[None, :, None]) & real[:, None]
        weights = torch.einsum("bts,bks->bkt", attn, onehot.float())
        prev = sample["net_input"]["prev_output_tokens"]
        pad = self.encoder.padding_idx
        return [dict(title="encoder-decoder attention mass per sentence (last layer, mean over heads)",
                     weights=weights * prev.ne(pad)[:, None, :], rows=list(range(K + 1)), row_mask=onehot.any(2),
                     columns="target", column_mask=prev.ne(pad), context_side="source", normalized=True)]

    def context_attention(self, sample):
        """Per target position, the last decoder layer's encoder-decoder attention (mean over
        heads) over the tokens of the previous source sentences in the concatenation (their
        separators included), to be renormalised over them (``docctx-score entropy``); rows
        without context have none."""
        attn, dist, real, _ = self._attention_by_distance(sample)
        context = (dist > 0) & real  # [B, S]
        prev = sample["net_input"]["prev_output_tokens"]
        return [dict(title="encoder-decoder attention over the context tokens (last layer, mean over heads)",
                     positions="target", items="context tokens", weights=attn,
                     support=context[:, None, :].expand_as(attn),
                     position_mask=prev.ne(self.encoder.padding_idx) & context.any(1, keepdim=True))]


@register_model_architecture("concat_transformer", "concat_transformer")
def concat_transformer_base(args):
    sentence_init.set_defaults(args)
    args.segment_shifted_positions = getattr(args, "segment_shifted_positions", None) or 0
    args.sentence_position_embeddings = getattr(args, "sentence_position_embeddings", None) or "none"
    base_architecture(args)
