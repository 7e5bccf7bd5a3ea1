"""``han_transformer``: Hierarchical Attention Networks (Miculicich et al. 2018:
the configurations of §2.3, two-stage training of §3.2). See ``docs/han.md``.

The paper's five configurations are flags (and named archs):

===============================  ===============================================  ==========================
configuration                    flags                                            arch
===============================  ===============================================  ==========================
HAN encoder                      ``--han-encoder --han-decoder none``             ``han_encoder_transformer``
HAN decoder (target context)     ``--han-encoder false --han-decoder target``     ``han_decoder_transformer``
HAN decoder source               ``--han-encoder false --han-decoder source``     ``han_decoder_source_transformer``
HAN decoder alignment            ``--han-encoder false --han-decoder alignment``  ``han_decoder_alignment_transformer``
HAN encoder + HAN decoder        ``--han-encoder --han-decoder target``           ``han_transformer`` (default)
===============================  ===============================================  ==========================

Efficiency (training): the unique source table of a batch (its context's ``src`` side) is
encoded once; the current sentences' encoder output and the context states are rows of it.
For the target/alignment decoders the decoder is teacher-forced once over the target table
(same rows) and the current rows' states feed the loss. Every sentence is encoded and
decoded once per batch.

Inference: HAN-decoder queries attend over context states given as a table + ``[B, K]``
index in the encoder output (beam search reorders the index only; the projected word-level
keys are cached in the incremental state). In document-order inference the model keeps,
per translated sentence, its encoder states and the decoder states / alignment vectors of
its best hypothesis (:meth:`HANTransformerModel.document_cache_entries`, from the encoder
output the task hands over) and reads them back from the context's cache
(:func:`~fairseq_docctx.data.context_batch.cache`): previous sentences are never re-encoded
or re-decoded. Without a cache (oracle reference context, ensembles) the decoder
teacher-forces the target table once, at its first step, into the incremental state.

Two-stage training (``--init-from-sentence-checkpoint``, ``--freeze-sentence-weights``):
:mod:`fairseq_docctx.models.sentence_init`. What the HANs weigh the previous sentences with
(``docctx-score plot``): :meth:`HANTransformerModel.context_weights`.
"""

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from torch.nn.utils.rnn import pad_sequence

from ..data import context_batch as cb
from ..errors import UsageError
from ..modules import table_encoder
from ..modules.han import HierarchicalAttention
from ..modules.masks import BoolFutureMask
from . import pretrained_init, sentence_init
from .arch_defaults import set_defaults
from .document_context import DocumentContextModel, batch_encoder_out, panel_distributions, resolve_context_size

HAN_DECODER_CHOICES = ("none", "target", "source", "alignment")


def _han(args, embed_dim, context_dim):
    return HierarchicalAttention(
        embed_dim, args.han_attention_heads, args.han_ffn_embed_dim, dropout=args.dropout,
        attention_dropout=args.attention_dropout, context_dim=context_dim,
    )


def _padded(tensors, like):
    """Right-padded ``[N, L, C]`` table of per-sentence states and its pad mask."""
    if len(tensors) == 0:  # no context sentence in the batch: one dummy row, never indexed
        return like.new_zeros(1, 1, like.size(-1)), torch.ones(1, 1, dtype=torch.bool, device=like.device)
    lengths = torch.tensor([t.size(0) for t in tensors], device=like.device)
    table = pad_sequence([t.to(like) for t in tensors], batch_first=True)
    return table, torch.arange(table.size(1), device=like.device)[None, :] >= lengths[:, None]


def shift_eos_to_front(tokens, pad, eos):
    """Decoder input (``prev_output_tokens``) from right-padded targets ending in EOS."""
    body = tokens.masked_fill(tokens == eos, pad)
    return torch.cat([tokens.new_full((tokens.size(0), 1), eos), body[:, :-1]], 1)


def tgt_to_src_rows(context):
    """``[U_t]`` row of the source table holding the source of each target-table row."""
    return cb.row_map(context, "tgt", "src")


def bucketed_han(han, h, lengths, left_pad, values, values_pad, index):
    """``han`` over queries ``h [T, N, C]`` (rows of lengths ``lengths``, padded on the left
    or right) in groups of similar length: the HAN of every real position, with a fraction
    of the padded queries of one call. Zeros at padding."""
    T = h.size(0)
    table = {}  # the word-level keys/values of the table, projected at the first group only

    def run(rows, w):
        hg = h.index_select(1, rows)
        hg = hg[T - w:] if left_pad else hg[:w]
        return (han(hg, values, values_pad, index.index_select(0, rows), incremental_state=table).transpose(0, 1),)

    return table_encoder.run_bucketed(lengths, T, run, left_pad)[0].transpose(0, 1)


def _rows_of_encoder_out(eo, rows):
    """What the decoder reads of an encoder output (states and padding mask), for the batch
    rows ``rows``, cut to their longest (left-padded) source sentence."""
    x = eo["encoder_out"][0].index_select(1, rows)
    out = {"encoder_out": [x], "encoder_padding_mask": [], "encoder_embedding": [],
           "encoder_states": [], "src_tokens": [], "src_lengths": []}
    if eo.get("encoder_padding_mask"):
        mask = eo["encoder_padding_mask"][0].index_select(0, rows)
        width = max(int((~mask).sum(1).max()), 1)
        out["encoder_out"] = [x[x.size(0) - width:]]
        out["encoder_padding_mask"] = [mask[:, mask.size(1) - width:]]
    return out


class HANTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, args):
        super().__init__(cfg, dictionary, embed_tokens)
        self.context_size = args.han_context_size
        self.context_grad = args.han_context_grad
        self.han_decoder = args.han_decoder
        dim = cfg.encoder.embed_dim
        self.han = _han(args, dim, dim) if args.han_encoder else None

    @property
    def needs_source_values(self):
        return self.han is not None or self.han_decoder == "source"

    def _values(self, x):
        """Context values from encoder output ``[L, N, C]``: ``[N, L, C]``, detached unless
        ``--han-context-grad``."""
        v = x.transpose(0, 1)
        return v if self.context_grad else v.detach()

    def encode_table(self, context):
        """Encode the batch's unique source sentences once. Returns the table's encoder output
        (HAN applied to every row that is a current sentence of the batch), the pre-HAN
        states ``[U, L, C]`` (context values) and their pad mask ``[U, L]``. The table is
        encoded in groups of similar length (:func:`~fairseq_docctx.modules.table_encoder.encode_rows`)."""
        src = cb.table(context, "src", self.context_size)
        # rows that are only context: no backward pass through them (unless --han-context-grad)
        out = table_encoder.encode_rows(self, src.tokens, None if self.context_grad else src.self_rows)
        x, pad = out["encoder_out"][0], out["encoder_padding_mask"][0]
        values = self._values(x)
        if self.han is not None:  # HAN for the rows that are current sentences of the batch
            rows = src.self_rows
            lengths = (~pad).sum(1).index_select(0, rows)
            cur = bucketed_han(self.han, x.index_select(1, rows), lengths, True, values, pad, src.index)
            out["encoder_out"] = [x.index_copy(1, rows, cur)]
        return out, values, pad

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings=None, context=None):
        return self.forward_with_context(src_tokens, src_lengths, context)[0]

    def forward_with_context(self, src_tokens, src_lengths, context, training_pass=False):
        """Encoder output of the current sentences, with the HAN-decoder context
        (``han_dec_states/mask/index``, or ``han_pending_*`` to be computed by the decoder),
        and the table's encoder output when the source table was encoded (else ``None``).
        At inference the output also holds ``han_context_states`` ``[B, T, C]``: the
        pre-HAN states of the current sentences, what later sentences read as their context
        (:meth:`HANTransformerModel.document_cache_entries`; not kept through beam search)."""
        K = self.context_size
        cache = None if training_pass else cb.cache(context)
        if cache is not None and any(e is None for e in cache):
            cache = None
        table_out = None
        if cache is not None:  # document-order inference: context states of earlier sentences
            out = self.forward_scriptable(src_tokens, src_lengths, False, None)
            x = out["encoder_out"][0]
            index = cb.index(context, "tgt", K)
            if self.needs_source_values:
                values, vpad = _padded([e["enc"] for e in cache], x)
                if self.han is not None:
                    out["encoder_out"] = [self.han(x, values, vpad, index)]
                if self.han_decoder == "source":
                    out.update(han_dec_states=[values], han_dec_mask=[vpad], han_dec_index=[index])
            if self.han_decoder in ("target", "alignment"):
                values, vpad = _padded([e[self.han_decoder] for e in cache], x)
                out.update(han_dec_states=[values], han_dec_mask=[vpad], han_dec_index=[index])
            pre = self._values(x)
        elif cb.has_side(context, "src") and cb.table(context, "src").self_rows is not None:
            table_out, values, vpad = self.encode_table(context)
            rows = cb.table(context, "src").self_rows
            out = super().reorder_encoder_out(table_out, rows)
            pre = values.index_select(0, rows)
            if self.han_decoder == "source":
                out.update(han_dec_states=[values], han_dec_mask=[vpad],
                           han_dec_index=[cb.index(context, "src", K)])
            elif self.han_decoder in ("target", "alignment") and not training_pass:
                if not cb.has_side(context, "tgt"):
                    raise UsageError(f"HAN decoder ({self.han_decoder}) needs target context: "
                                     "use --context-sides both")
                # no cache (oracle reference context, ensembles): the decoder teacher-forces
                # the target table once, at its first step (kept in its incremental state)
                tab = super().reorder_encoder_out(table_out, tgt_to_src_rows(context))
                prev = shift_eos_to_front(cb.table(context, "tgt").tokens, self.padding_idx, self.dictionary.eos())
                out.update(han_pending_prev=[prev], han_pending_enc=tab,
                           han_dec_index=[cb.index(context, "tgt", K)])
        else:  # no context at all: HAN leaves the states unchanged
            if self.han_decoder != "none" and cb.has_side(context, "tgt"):
                raise UsageError("HAN needs the source context table (--context-sides both) or "
                                 "the document-order inference cache")
            out = self.forward_scriptable(src_tokens, src_lengths, False, None)
            pre = self._values(out["encoder_out"][0])
        if not self.training and not training_pass:
            out["han_context_states"] = [pre]
        return out, table_out

    def reorder_encoder_out(self, encoder_out, new_order):
        new = super().reorder_encoder_out(encoder_out, new_order)
        for k in ("han_dec_states", "han_dec_mask", "han_pending_prev", "han_pending_enc"):
            if k in encoder_out:  # tables: shared by all rows, only the index is reordered
                new[k] = encoder_out[k]
        if "han_dec_index" in encoder_out:
            new["han_dec_index"] = [encoder_out["han_dec_index"][0].index_select(0, new_order)]
        return new


class HANTransformerDecoder(BoolFutureMask, TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, args, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.han_mode = args.han_decoder
        self.context_grad = args.han_context_grad
        dim = self.output_embed_dim
        ctx_dim = {"source": args.encoder_embed_dim, "alignment": cfg.decoder.embed_dim}.get(self.han_mode, dim)
        self.han = _han(args, dim, ctx_dim) if self.han_mode != "none" else None

    def context_pass(self, prev_output_tokens, encoder_out, grad_rows=None):
        """Teacher-forced pass without HAN: final states ``[N, T, C]`` (before the output
        projection) and the last layer's encoder-attention outputs ``[N, T, C]`` (alignment
        vectors, captured with a forward hook; ``None`` unless ``--han-decoder alignment``).
        Rows run in groups of similar length (`data.length_groups`), each group's source
        cut to its own longest sentence; states at padding are zero. Rows not in
        ``grad_rows`` (row numbers, default all) run without autograd."""
        pad = self.padding_idx

        def run(rows, width):
            captured = {}
            hook = None
            if self.han_mode == "alignment":
                hook = self.layers[-1].encoder_attn.register_forward_hook(
                    lambda mod, inp, out: captured.__setitem__("aln", out[0]))
            eo = _rows_of_encoder_out(encoder_out, rows)
            try:
                x, _ = self.extract_features_scriptable(prev_output_tokens.index_select(0, rows)[:, :width], eo)
            finally:
                if hook is not None:
                    hook.remove()
            return x, (captured["aln"].transpose(0, 1) if "aln" in captured else None)

        return tuple(table_encoder.run_bucketed(prev_output_tokens.ne(pad).sum(1), prev_output_tokens.size(1),
                                                run, left_pad=False, grad_rows=grad_rows))

    def context_values(self, states, aln):
        v = aln if self.han_mode == "alignment" else states
        return v if self.context_grad else v.detach()

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        x, extra = self.extract_features_scriptable(
            prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
            alignment_layer, alignment_heads,
        )
        return self.apply_han(x, encoder_out, incremental_state), extra

    def apply_han(self, x, encoder_out, incremental_state=None):
        """HAN over ``x [B, T, C]`` with the context of ``encoder_out`` (read only)."""
        if self.han is None or encoder_out is None or "han_dec_index" not in encoder_out:
            return x
        if "han_dec_states" in encoder_out:
            values, mask = encoder_out["han_dec_states"][0], encoder_out["han_dec_mask"][0]
        else:  # no cache: teacher-force the target table once, kept in the incremental state
            # (fairseq's per-module key; a table shared by all rows: never reordered)
            kept = self.get_incremental_state(incremental_state, "han_context_table")
            if kept is None:
                prev, enc = encoder_out["han_pending_prev"][0], encoder_out["han_pending_enc"]
                states, aln = self.context_pass(prev, enc)
                kept = {"values": self.context_values(states, aln), "mask": prev.eq(self.padding_idx)}
                self.set_incremental_state(incremental_state, "han_context_table", kept)
            values, mask = kept["values"], kept["mask"]
        y = self.han(x.transpose(0, 1), values, mask, encoder_out["han_dec_index"][0], incremental_state)
        return y.transpose(0, 1)


@register_model("han_transformer")
class HANTransformerModel(DocumentContextModel, TransformerModel):
    """Transformer with Hierarchical Attention Networks over the previous sentences.

    Contract (:mod:`~fairseq_docctx.models.document_context`): reads the ``src`` side (HAN
    encoder, source HAN decoder, and the training pass of the target/alignment HAN decoder)
    and the ``tgt`` side (target/alignment HAN decoder); K = ``--han-context-size`` (default:
    the task's ``--context-size``); caches each translated sentence's context states in
    document-order inference."""

    @property
    def packs_training_output(self):
        """In training mode the target/alignment HAN decoder returns the logits of the real
        target positions only, ``[1, R, V]`` (:meth:`get_targets`, :meth:`unpack_logits`)."""
        return self.decoder.han_mode in ("target", "alignment")

    @property
    def doc_batching(self):
        """Batching for --doc-batching auto: document runs (each sentence encoded once, as
        current sentence and as context). With a target/alignment HAN decoder both tables and
        the current rows run in length groups, so --max-tokens counts rows at their real
        length (grouped-runs); otherwise the decoder runs the current rows padded (runs)."""
        return "grouped-runs" if self.decoder.han_mode in ("target", "alignment") else "runs"

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--han-encoder", type=utils.eval_bool, nargs="?", const=True,
                            metavar="BOOL", help="HAN on the encoder output (source context)")
        parser.add_argument("--han-decoder", choices=HAN_DECODER_CHOICES,
                            help="HAN on the decoder output; values: previous target sentences' "
                            "decoder states (target), their encoder states (source), their "
                            "encoder-decoder attention outputs (alignment)")
        parser.add_argument("--han-context-size", type=int, metavar="K",
                            help="previous sentences HAN attends to (default: the task's "
                            "--context-size; given, it must equal it)")
        parser.add_argument("--han-context-grad", type=utils.eval_bool, nargs="?", const=True,
                            metavar="BOOL", help="back-propagate into the context states "
                            "(default: detached, as in the paper's implementation)")
        parser.add_argument("--han-attention-heads", type=int, metavar="N",
                            help="heads of the HAN attentions (default: encoder heads)")
        parser.add_argument("--han-ffn-embed-dim", type=int, metavar="N",
                            help="HAN sentence-level FFN size (default: encoder FFN size)")
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "han_transformer")
        resolve_context_size(args, "han_context_size", task)
        han_transformer(args)
        model = super().build_model(args, task)
        sides = []
        if args.han_encoder or args.han_decoder != "none":
            sides.append("src")  # the target decoders are trained over the source table too
        if args.han_decoder in ("target", "alignment"):
            sides.append("tgt")
        model.declare_context(sides, args.han_context_size)
        # two-stage training (Miculicich et al. 2018, §3.2): the HAN weights are the new ones
        return sentence_init.apply(model, args, "han_transformer", is_context=lambda n: ".han." in n,
                                   record_as="han_initialized_from")

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return HANTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens, args)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return HANTransformerDecoder(TransformerConfig.from_namespace(args), tgt_dict, embed_tokens, args,
                                     no_encoder_attn=args.no_cross_attention)

    # ------------------------------------------------------------------- training
    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer=None, alignment_heads=None):
        enc, dec = self.encoder, self.decoder
        encoder_out, table_out = enc.forward_with_context(src_tokens, src_lengths, context, training_pass=True)
        kw = dict(features_only=features_only, alignment_layer=alignment_layer,
                  alignment_heads=alignment_heads, src_lengths=src_lengths,
                  return_all_hiddens=return_all_hiddens)
        if dec.han_mode not in ("target", "alignment") or not cb.has_side(context, "tgt"):
            return dec(prev_output_tokens, encoder_out=encoder_out, **kw)
        if table_out is None:
            raise UsageError(f"HAN decoder ({dec.han_mode}) is trained with --context-sides both")
        # teacher-force the decoder once over the target table
        tgt = cb.table(context, "tgt", enc.context_size)
        prev_tab = shift_eos_to_front(tgt.tokens, dec.padding_idx, dec.dictionary.eos())
        rows = tgt.self_rows  # context-only rows: states read detached, no backward
        states, aln = dec.context_pass(prev_tab, enc.reorder_encoder_out(table_out, tgt_to_src_rows(context)),
                                       None if dec.context_grad else rows)
        index = tgt.index
        encoder_out.update(han_dec_states=[dec.context_values(states, aln)],
                           han_dec_mask=[prev_tab.eq(dec.padding_idx)], han_dec_index=[index])
        T = prev_output_tokens.size(1)
        if rows is None or T > prev_tab.size(1) or not torch.equal(prev_tab[rows, :T], prev_output_tokens):
            return dec(prev_output_tokens, encoder_out=encoder_out, **kw)
        x = bucketed_han(dec.han, states[rows, :T].transpose(0, 1), prev_output_tokens.ne(dec.padding_idx).sum(1),
                         False, encoder_out["han_dec_states"][0], encoder_out["han_dec_mask"][0],
                         index).transpose(0, 1)
        extra = {"attn": [None], "inner_states": [x.transpose(0, 1)]}
        if features_only:
            return x, extra
        # the output projection of the real positions only: the current rows of a document
        # run differ in length (their padding: docs/benchmarks.md, "Foundation")
        real = prev_output_tokens.ne(dec.padding_idx)
        y = dec.output_layer(x[real])
        if self.training:
            # packed [1, R, V]: the criterion's log-softmax and loss run on the R real positions
            # only (get_targets hands it the matching targets)
            extra["packed_positions"] = real
            return y.unsqueeze(0), extra
        logits = y.new_zeros(*real.shape, y.size(-1))  # padded positions: zero logits
        logits[real] = y
        return logits, extra

    # ------------------------------------------------------------------- analysis
    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels", "attention")

    @torch.no_grad()
    def context_weights(self, sample):
        """How this model's HANs weigh the previous sentences, for a teacher-forced batch with
        the reference context the task collates (the source table; the target table too for
        a target/alignment HAN decoder). Returns a list of panels (the format of
        :mod:`fairseq_docctx.evaluation.plots`), two per HAN (the encoder's: one column per
        position of ``net_input["src_tokens"]``; the decoder's: one per target position):

        * ``<part> HAN: sentence-level attention``: ``weights [B, K, C]``, the attention of
          the sentence-level query ``f_s(h_t)`` over the summaries of the K previous
          sentences (Miculicich et al. 2018, §2.1, Eqs. 5-6; mean over heads); row k-1 is the sentence
          at distance k, of the source (encoder HAN, ``source`` decoder) or target side; a
          distribution over the present sentences at every real position;
        * ``<part> HAN: context gate λ``: ``weights [B, 1, C]``, the context gate of §2.2, Eq. 7
          (mean over channels; ``λ`` weighs the position's own state, ``1-λ`` the context); rows without
          any context sentence are masked (their states pass unchanged).
        """
        enc, dec = self.encoder, self.decoder
        ni = sample["net_input"]
        ctx = cb.get_context(ni)
        if not cb.has_side(ctx, "src") or cb.table(ctx, "src").self_rows is None:
            raise ValueError("han_transformer.context_weights: the batch has no source context table")
        was = self.training
        self.eval()
        try:
            K = enc.context_size
            table_out, values, vpad = enc.encode_table(ctx)
            src_tab = cb.table(ctx, "src", K)
            rows = src_tab.self_rows
            panels = []
            if enc.han is not None:
                # queries: the current rows' pre-HAN states at the positions of src_tokens
                src = ni["src_tokens"]
                width, L = src.size(1), values.size(1)
                left = cb.left_padded(src_tab.tokens, enc.padding_idx)
                cols = slice(L - width, L) if left else slice(0, width)
                h = values.index_select(0, rows)[:, cols].transpose(0, 1)
                index = src_tab.index
                _, w = enc.han(h, values, vpad, index, need_weights=True)
                panels += _han_panels("encoder", w, index, "source", "source", src.ne(enc.padding_idx))
            if dec.han is not None:
                if dec.han_mode == "source":
                    v, v_pad, index, side = values, vpad, src_tab.index, "source"
                else:
                    if not cb.has_side(ctx, "tgt"):
                        raise UsageError(f"HAN decoder ({dec.han_mode}) needs target context: "
                                         "use --context-sides both")
                    tgt_tab = cb.table(ctx, "tgt", K)
                    prev_tab = shift_eos_to_front(tgt_tab.tokens, dec.padding_idx, dec.dictionary.eos())
                    states, aln = dec.context_pass(
                        prev_tab, enc.reorder_encoder_out(table_out, tgt_to_src_rows(ctx)))
                    v, v_pad = dec.context_values(states, aln), prev_tab.eq(dec.padding_idx)
                    index, side = tgt_tab.index, "target"
                prev = ni["prev_output_tokens"]
                x, _ = dec.extract_features_scriptable(prev, enc.reorder_encoder_out(table_out, rows))
                _, w = dec.han(x.transpose(0, 1), v, v_pad, index, need_weights=True)
                panels += _han_panels("decoder", w, index, side, "target", prev.ne(dec.padding_idx))
        finally:
            self.train(was)
        return panels

    def context_attention(self, sample):
        """The sentence-level attention of each HAN over the K previous sentences
        (Miculicich et al. 2018, §2.1, Eqs. 5-6; mean over heads), one distribution per
        position (the encoder's: source positions; the decoder's: target positions), from
        :meth:`context_weights` (``docctx-score entropy``)."""
        panels = [p for p in self.context_weights(sample) if p["normalized"]]
        return panel_distributions(panels, "context sentences")

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def document_cache_entries(self, sample, hypos):
        """Per batch row, what later sentences need as context: its pre-HAN encoder states
        (``enc``), and the decoder states (``target``) or alignment vectors (``alignment``)
        of its best hypothesis, from one teacher-forced pass over the hypotheses. The encoder
        output is the one the task hands over with the batch (the search's), or recomputed."""
        enc, dec = self.encoder, self.decoder
        ni = sample["net_input"]
        out = batch_encoder_out(sample)
        if out is None or "han_context_states" not in out:
            was = self.training
            self.eval()
            out = enc.forward(ni["src_tokens"], ni["src_lengths"], context=cb.get_context(sample))
            self.train(was)
        pre = out["han_context_states"][0]
        entries = [{} for _ in hypos]
        if enc.needs_source_values:
            lengths = (~out["encoder_padding_mask"][0]).sum(1).tolist()
            for e, s in zip(entries, torch.split(pre[~out["encoder_padding_mask"][0]], lengths)):
                e["enc"] = s
        if dec.han_mode in ("target", "alignment"):
            pad, eos = dec.padding_idx, dec.dictionary.eos()
            prev = data_utils.collate_tokens([h[0]["tokens"] for h in hypos], pad, eos,
                                             move_eos_to_beginning=True).to(ni["src_tokens"].device)
            states, aln = dec.context_pass(prev, out)
            v = aln if dec.han_mode == "alignment" else states
            valid = prev.ne(pad)
            for e, s in zip(entries, torch.split(v[valid], valid.sum(1).tolist())):
                e[dec.han_mode] = s
        return entries


def _han_panels(part, weights, index, side, columns, column_mask):
    """The two panels of one HAN (see :meth:`HANTransformerModel.context_weights`) from the
    weights ``HierarchicalAttention`` returns with ``need_weights``."""
    att = weights["sentence_attn"].permute(1, 2, 0)  # [B, K, T]
    gate = weights["gate"].t().unsqueeze(1)  # [B, 1, T]
    has_ctx = weights["has_context"]
    present = (index >= 0) & has_ctx[:, None]
    common = dict(columns=columns, column_mask=column_mask, context_side=side)
    return [
        dict(title=f"{part} HAN: sentence-level attention (mean over heads)",
             weights=att * present[:, :, None] * column_mask[:, None, :], rows=list(range(1, index.size(1) + 1)),
             row_mask=present, normalized=True, **common),
        dict(title=f"{part} HAN: context gate λ (mean over channels; 1-λ = share of context)",
             weights=gate * (has_ctx[:, None] & column_mask)[:, None, :], rows=["λ"], row_mask=has_ctx[:, None], normalized=False,
             **common),
    ]


@register_model_architecture("han_transformer", "han_transformer")
def han_transformer(args):
    """Paper defaults: Transformer base (6+6, 512, 8 heads, dropout 0.1), joint HAN encoder
    + HAN decoder (target context); K (the paper's 3) is the task's ``--context-size``
    unless ``--han-context-size`` says otherwise."""
    base_architecture(args)
    set_defaults(args, han_encoder=True, han_decoder="target", han_context_size=None, han_context_grad=False,
                 han_attention_heads=args.encoder_attention_heads,
                 han_ffn_embed_dim=args.encoder_ffn_embed_dim)
    sentence_init.set_defaults(args)


def _variant(name, encoder, decoder):
    @register_model_architecture("han_transformer", name)
    def arch(args):
        set_defaults(args, han_encoder=encoder, han_decoder=decoder)
        han_transformer(args)

    return arch


han_encoder_transformer = _variant("han_encoder_transformer", True, "none")
han_decoder_transformer = _variant("han_decoder_transformer", False, "target")
han_decoder_source_transformer = _variant("han_decoder_source_transformer", False, "source")
han_decoder_alignment_transformer = _variant("han_decoder_alignment_transformer", False, "alignment")
