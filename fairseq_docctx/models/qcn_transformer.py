"""``qcn_transformer``: Query-guided Capsule Network + PCC regularizer (Yang et al. 2019,
§3; settings §4.1, ablation rows Table 2). See ``docs/qcn.md``.

* A Query-guided Capsule Network turns the words of the K previous source sentences into
  ``--num-capsules`` output capsules, routed (``--routing-iters``) under the guidance of the
  current sentence (:class:`~fairseq_docctx.modules.qcn.QueryGuidedCapsuleNetwork`).
* Sub-layer-expanded encoder: every encoder layer is self-attention -> **context attention
  over the output capsules** (query: the self-attention sub-layer's output) -> FFN, each
  with residual + LayerNorm.
* Regularization layer (training only): ``PCC(Caps_enc(x), Caps_dec(y))`` per sentence,
  returned as ``extra["pcc"]`` for the ``label_smoothed_cross_entropy_pcc`` criterion.

The paper's Table 2 rows are flags: Transformer (``--no-qcn --no-pcc-regularizer``, with the
paper's dropout for a context-agnostic model, ``--dropout 0.1``), +regularizer (``--no-qcn``),
+QCN (``--no-pcc-regularizer``), +QCN+regularizer (default).
"""
import functools

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from ..data import context_batch as cb
from ..modules.few_keys_attention import FewKeysAttention
from ..modules.masks import BoolFutureMask
from ..modules.qcn import (
    PCCRegularizer,
    QueryGuidedCapsuleNetwork,
    gather_context_embeddings,
    word_mask,
)
from . import pretrained_init, sentence_init
from .arch_defaults import set_defaults
from .document_context import DocumentContextModel, panel_distributions, resolve_context_size


class QCNEncoderLayer(TransformerEncoderLayerBase):
    """Self-attention -> context attention over the capsules -> FFN."""

    def __init__(self, cfg, capsule_dim):
        super().__init__(cfg)
        # attention over the m capsules of each row, without query/output projections
        self.ctx_attn = FewKeysAttention(
            self.embed_dim, cfg.encoder.attention_heads, kdim=capsule_dim, vdim=capsule_dim,
            dropout=cfg.attention_dropout, encoder_decoder_attention=True,
        )
        self.ctx_attn_layer_norm = LayerNorm(self.embed_dim)
        #: ``[m, B, D]`` output capsules of the current batch, set by the encoder
        self.capsules = None

    def _sublayer(self, x, norm, fn):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x = self.dropout_module(fn(x))
        x = self.residual_connection(x, residual)
        return x if self.normalize_before else norm(x)

    def forward(self, x, encoder_padding_mask, attn_mask=None, capsules=None):
        """``capsules``: the output capsules to attend to (default: :attr:`capsules`, set by the
        encoder; given explicitly by the activation checkpointing, whose recomputation in the
        backward pass runs after the encoder has taken them off the layer)."""
        capsules = self.capsules if capsules is None else capsules
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        x = self._sublayer(x, self.self_attn_layer_norm, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=encoder_padding_mask,
            need_weights=False, attn_mask=attn_mask)[0])
        if capsules is not None:
            caps = capsules.to(x.dtype)
            x = self._sublayer(x, self.ctx_attn_layer_norm, lambda h: self.ctx_attn(
                query=h, key=caps, value=caps, need_weights=False, static_kv=True)[0])
        return self._sublayer(x, self.final_layer_norm, lambda h: self.fc2(
            self.activation_dropout_module(self.activation_fn(self.fc1(h)))))


class QCNTransformerEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, args):
        self._capsule_dim = args.capsule_dim if not args.no_qcn else None
        super().__init__(cfg, dictionary, embed_tokens)
        self.qcn_context_size = args.qcn_context_size
        self.qcn = None
        if not args.no_qcn:
            self.qcn = QueryGuidedCapsuleNetwork(
                cfg.encoder.embed_dim, args.qcn_context_size, args.num_capsules,
                args.capsule_dim, args.routing_iters,
            )

    def build_encoder_layer(self, cfg):
        """fairseq's layer without capsules (``--no-qcn``), else a :class:`QCNEncoderLayer`,
        wrapped as fairseq wraps its layers (``--checkpoint-activations``,
        ``--offload-activations``, FSDP): the checkpointed forward is handed the capsules the
        layer reads, a tensor input of the checkpoint, so that the recomputation attends to them
        and their gradient reaches the capsule network."""
        if self._capsule_dim is None:
            return super().build_encoder_layer(cfg)
        from fairseq.distributed import fsdp_wrap
        from fairseq.modules.checkpoint_activations import checkpoint_wrapper

        layer = QCNEncoderLayer(cfg, self._capsule_dim)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
            layer.forward = functools.partial(_forward_with_capsules, layer, layer.forward)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def capsule_inputs(self, src_tokens, context, gathered: bool = True, token_embeddings=None):
        """Embeddings and word masks of the current sentences and of their context:
        ``(cur, cur_mask, ctx, ctx_mask, index, words)``. ``gathered``: the context as ``[B, K, L, E]``
        per row (``index`` None; what docctx-analyze reads); otherwise the embeddings of the
        distinct context words of the batch's table of unique sentences, their positions in
        the table ``[U, L]``, its ``[B, K]`` index and each context word's row of the distinct
        words ``[R]`` (training and inference; ``index`` and ``words`` are None when gathered)."""
        pad, eos = self.padding_idx, self.dictionary.eos()
        cur = self.embed_tokens(src_tokens) if token_embeddings is None else token_embeddings
        cur_mask = word_mask(src_tokens, pad, eos)
        if cb.has_side(context, "src"):
            table, _, index, _ = cb.table(context, "src", self.qcn_context_size)
            if gathered:
                ctx, ctx_mask = gather_context_embeddings(self.embed_tokens, table, index, pad, eos)
                return cur, cur_mask, ctx, ctx_mask, None, None
            # only the words of sentences that are some row's context are embedded
            used = torch.zeros(table.size(0), dtype=torch.bool, device=table.device)
            used[index[index >= 0]] = True
            mask = word_mask(table, pad, eos) & used.unsqueeze(1)
            # each distinct word once (embedding and f_e), and every word's row of them
            distinct, words = torch.unique(table[mask], return_inverse=True)
            return cur, cur_mask, self.embed_tokens(distinct), mask, index, words
        # no context at all: every row is like a document's first sentence
        ctx = cur.new_zeros(cur.size(0), 1, 1, cur.size(-1))
        ctx_mask = src_tokens.new_zeros(cur.size(0), 1, 1, dtype=torch.bool)
        return cur, cur_mask, ctx, ctx_mask, None, None

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings=None, context=None):
        caps = None
        if self.qcn is not None:
            if token_embeddings is None:  # looked up once, for the QCN query and the encoder
                token_embeddings = self.embed_tokens(src_tokens)
            caps = self.qcn(*self.capsule_inputs(src_tokens, context, False, token_embeddings)).transpose(0, 1)
        for layer in self.layers:
            layer.capsules = caps
        try:
            return self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            for layer in self.layers:
                layer.capsules = None


def _forward_with_capsules(layer, checkpointed, *args, **kwargs):
    """fairseq's checkpointed forward of a :class:`QCNEncoderLayer`, handed the capsules the
    layer reads now."""
    return checkpointed(*args, capsules=layer.capsules, **kwargs)


class QCNTransformerDecoder(BoolFutureMask, TransformerDecoderBase):
    """fairseq's Transformer decoder (the QCN reads its context in the encoder) with a causal
    mask of the padding mask's type (:mod:`fairseq_docctx.modules.masks`)."""


@register_model("qcn_transformer")
class QCNTransformerModel(DocumentContextModel, TransformerModel):
    """Transformer with a Query-guided Capsule Network over the previous source sentences
    and the PCC regularization layer (Yang et al. 2019, §3).

    Contract (:mod:`~fairseq_docctx.models.document_context`): reads the ``src`` side, K =
    ``--qcn-context-size`` (default: the task's ``--context-size``)."""

    #: the context is only embedded (never run through the encoder), so nothing is gained by
    #: keeping runs of a document together: batches group sentences by length (little
    #: padding), each with its own context (--doc-batching auto)
    doc_batching = "sentences"

    @property
    def context_token_cost(self) -> float:
        """A context word is embedded, projected by ``f`` (Eq. 6) and routed (Algorithm 1),
        never run through the encoder: its matrix-product multiply-adds relative to those of
        a source word through the encoder layers, ``(E·D + 3·r·m·D) / (L·(4E² + 2E·F))``
        (``f``; per routing iteration the weighted sum, the agreement and the query
        correlation over ``m`` capsules of size ``D``; an encoder layer's four attention
        projections and its FFN). About 0.023 at the paper's size (512, 2048, 4 layers,
        m=4, r=4), 0 without the QCN (``--no-qcn``: the context is not read)."""
        enc = self.encoder
        if enc.qcn is None:
            return 0.0
        E, L = enc.embed_tokens.embedding_dim, max(len(enc.layers), 1)
        F = enc.layers[0].fc1.out_features if len(enc.layers) else 4 * E
        caps = enc.qcn.capsules
        D, m, r = enc.qcn.query_proj.out_features, caps.num_caps, caps.iters
        return (E * D + 3 * r * m * D) / (L * (4 * E * E + 2 * E * F))

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--num-capsules", type=int, metavar="M", help="output capsules m")
        parser.add_argument("--routing-iters", type=int, metavar="R", help="routing iterations r")
        parser.add_argument("--capsule-dim", type=int, metavar="D",
                            help="capsule size (default: encoder embedding size)")
        parser.add_argument("--qcn-context-size", type=int, metavar="K",
                            help="previous source sentences the QCN reads (default: the "
                            "task's --context-size; given, it must equal it)")
        parser.add_argument("--no-qcn", action="store_true",
                            help="ablation: no capsule network / context attention")
        parser.add_argument("--no-pcc-regularizer", action="store_true",
                            help="ablation: no regularization layer")
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "qcn_transformer")
        resolve_context_size(args, "qcn_context_size", task)
        qcn_transformer(args)
        model = super().build_model(args, task)
        model.declare_context(("src",), args.qcn_context_size)
        model.regularizer = None
        if not args.no_pcc_regularizer:
            model.regularizer = PCCRegularizer(
                args.encoder_embed_dim, args.num_capsules, args.capsule_dim, args.routing_iters
            )
        # the capsule network, the context attentions and the regularizer are the new weights
        return sentence_init.apply(model, args, "qcn_transformer", is_context=cls.is_context_weight)

    @staticmethod
    def is_context_weight(name: str) -> bool:
        """Weights a sentence-level ``transformer`` does not have."""
        return name.startswith(("encoder.qcn.", "regularizer.")) or ".ctx_attn" in name

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return QCNTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens, args)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return QCNTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer=None, alignment_heads=None):
        src_embeddings = None
        if self.regularizer is not None and self.training:  # shared by encoder and regularizer
            src_embeddings = self.encoder.embed_tokens(src_tokens)
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   token_embeddings=src_embeddings, context=context)
        x, extra = self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
        )
        if self.regularizer is not None and self.training:
            extra["pcc"] = self.regularizer_pcc(src_tokens, prev_output_tokens, src_embeddings)
        return x, extra

    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels", "attention")

    @torch.no_grad()
    def context_weights(self, sample):
        """The coupling coefficients of the query-guided routing (Yang et al. 2019, §3.2,
        Algorithm 1; their Figure 6) for every row of a batch with its source context.
        Returns a list of panels (the format of :mod:`fairseq_docctx.evaluation.plots`), one per
        routing iteration: ``weights [B, m, K*L]``, the coupling coefficients of every context
        word (columns ``source context``: column ``(k-1)*L + l`` is word ``l`` of the source
        sentence at distance ``k``, ``L`` the width of the context table, EOS and padding
        masked) with the ``m`` output capsules (rows); each real column is a distribution
        over the capsules."""
        enc = self.encoder
        if enc.qcn is None:
            raise ValueError("this qcn_transformer has no query-guided capsule network (--no-qcn)")
        ni = sample["net_input"]
        was = self.training
        self.eval()
        try:
            cur, cur_mask, ctx, ctx_mask, _, _ = enc.capsule_inputs(ni["src_tokens"], ni.get("context"))
            _, c, _ = enc.qcn(cur, cur_mask, ctx, ctx_mask, return_history=True)  # [iters, B, K*L, m]
        finally:
            self.train(was)
        B, m = c.size(1), c.size(-1)
        words = ctx_mask.reshape(B, -1)
        return [dict(title=f"QCN coupling coefficients c, routing iteration {t + 1}",
                     weights=c[t].transpose(1, 2) * words[:, None, :], rows=[f"v{j + 1}" for j in range(m)],
                     row_mask=words.new_ones(B, m), columns="source context", column_mask=words,
                     context_side="source", normalized=True)
                for t in range(c.size(0))]

    def context_attention(self, sample):
        """The routing coefficients (Yang et al. 2019, Algorithm 1): at every routing iteration,
        each context word's coupling coefficients over the ``m`` output capsules, one
        distribution per context word (``docctx-score entropy``; iteration 1 is uniform, the
        routing starts from α = 0)."""
        return panel_distributions(self.context_weights(sample), "output capsules")

    def regularizer_pcc(self, src_tokens, prev_output_tokens, src_embeddings=None):
        """``PCC(Caps_enc(x), Caps_dec(y))`` per sentence, from the source embeddings and the
        (teacher-forced) decoder-input embeddings; ``None`` without a regularizer."""
        if self.regularizer is None:
            return None
        pad, eos = self.encoder.padding_idx, self.encoder.dictionary.eos()
        return self.regularizer(
            self.encoder.embed_tokens(src_tokens) if src_embeddings is None else src_embeddings,
            word_mask(src_tokens, pad, eos),
            self.decoder.embed_tokens(prev_output_tokens), word_mask(prev_output_tokens, pad, eos),
        )


@register_model_architecture("qcn_transformer", "qcn_transformer")
def qcn_transformer(args):
    """Paper defaults: 4+4 layers, 512/2048, 8 heads, dropout 0.2, 4 capsules, 4 routing
    iterations; K (the paper's 3) is the task's ``--context-size`` unless
    ``--qcn-context-size`` says otherwise."""
    set_defaults(args, encoder_layers=4, decoder_layers=4, encoder_embed_dim=512, encoder_ffn_embed_dim=2048,
                 encoder_attention_heads=8, decoder_attention_heads=8, dropout=0.2)
    base_architecture(args)
    set_defaults(args, num_capsules=4, routing_iters=4, capsule_dim=args.encoder_embed_dim, qcn_context_size=None,
                 no_qcn=False, no_pcc_regularizer=False)
    sentence_init.set_defaults(args)
