"""``concat_transformer``: the concatenation baseline (SPEC §3.6).

The K previous source sentences are joined to the current one with a separator token on the
encoder side (``x_{j-K} <sep> ... <sep> x_{j-1} <sep> x_j``). With target context
(``--context-sides target|both``) the previous target sentences form a decoder prefix
(``y_{j-K} <sep> ... y_{j-1} <sep>``) that the decoder reads but that is not scored: the
outputs at prefix positions are cut away before the loss.
"""
import logging

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)

from ..data import context_batch as cb
from ..modules.context_concat import concat_with_context, gather_context_rows, pack_segments
from .document_context import DocumentContextModel, task_context

logger = logging.getLogger(__name__)


class ConcatContextEncoder(TransformerEncoderBase):
    """A Transformer encoder over the concatenation of context and current sentence."""

    sep_idx: int = -1  # set by ConcatTransformerModel.build_model

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
            segs = [
                gather_context_rows(tgt.tokens, tgt.index[:, k], self.padding_idx,
                                    self.dictionary.eos(), self.sep_idx)
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


class ConcatContextDecoder(TransformerDecoderBase):
    """A Transformer decoder that reads the previous target sentences as an unscored prefix."""

    sep_idx: int = -1  # set by ConcatTransformerModel.build_model

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        prefix = encoder_out.get("tgt_prefix") if encoder_out is not None else None
        if not prefix:
            return super().forward(prev_output_tokens, encoder_out, incremental_state, **kwargs)
        # With a prefix the decoder always runs over prefix + all tokens so far: under beam
        # search (incremental_state given) fairseq passes every token generated so far and
        # keeps the output of the last position, so ignoring the cache is exact, at
        # quadratic cost in the sentence length.
        pad = self.padding_idx
        width = prev_output_tokens.size(1)
        cur_len = prev_output_tokens.ne(pad).sum(1)
        tokens, lengths = pack_segments(
            [prefix[0], prev_output_tokens], pad, left_pad=False,
            max_len=self.max_target_positions,
        )
        prefix_len = lengths - cur_len
        x, extra = super().forward(tokens, encoder_out, None, **kwargs)
        # keep the outputs at the current sentence's positions only
        pos = (prefix_len.unsqueeze(1) + torch.arange(width, device=x.device)).clamp(
            max=tokens.size(1) - 1
        )
        x = x.gather(1, pos.unsqueeze(-1).expand(-1, -1, x.size(-1)))
        if extra.get("attn") and extra["attn"][0] is not None:
            a = extra["attn"][0]
            extra["attn"] = [a.gather(1, pos.unsqueeze(-1).expand(-1, -1, a.size(-1)))]
        return x, extra


@register_model("concat_transformer")
class ConcatTransformerModel(DocumentContextModel, TransformerModel):
    """Transformer over context sentences concatenated with ``--context-separator``.

    Context sides and size come from the task (``--context-size``, ``--context-sides``):
    it reads the ``src`` and ``tgt`` sides the task gives, all K sentences.
    """

    @classmethod
    def build_model(cls, args, task):
        sep = getattr(getattr(task, "cfg", None), "context_separator", "<sep>")
        for d in (task.source_dictionary, task.target_dictionary):
            if sep not in d.indices:
                raise ValueError(
                    f"concat_transformer needs the context separator {sep} in the "
                    "dictionaries: use --task document_translation"
                )
        model = super().build_model(args, task)
        sides, _ = task_context(task)
        model.declare_context([s for s in sides if s in ("src", "tgt")], None)
        model.encoder.sep_idx = task.source_dictionary.index(sep)
        model.decoder.sep_idx = task.target_dictionary.index(sep)
        return model

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
                alignment_layer=None, alignment_heads=None):
        encoder_out = self.encoder(
            src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
            context=context,
        )
        return self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
        )


@register_model_architecture("concat_transformer", "concat_transformer")
def concat_transformer_base(args):
    base_architecture(args)
