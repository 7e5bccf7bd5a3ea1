"""``hrnn_context``: cross-sentence context summarised by a hierarchical RNN (Wang, Tu, Way &
Liu 2017, *Exploiting Cross-Sentence Context for Neural Machine Translation*) on the
``rnnsearch`` base (:mod:`fairseq_docctx.models.rnnsearch`). See ``docs/rnn.md``.

Summary of the K previous **source** sentences (§2.1):

* sentence RNN (Eq. 1): the NMT encoder's bidirectional GRU over the words of each context
  sentence, ``S_k = [→h_N; ←h_1]`` (``--share-context-encoder``, the named architecture's
  default: "an additional document-level RNN on top of the sentence-level RNN encoder", §1),
  or a GRU of its own, its last state ``S_k = h_{N,k}`` (``--share-context-encoder False``,
  as in the authors' released code). Each unique context sentence of a batch runs through it
  once (the batch's source table, one run);
* document RNN (Eq. 2): a GRU over ``S_1..S_K``, farthest sentence first, once per batch row;
  its last state is ``D``. A row without context (a document's first sentence) gets
  ``D = 0``, the state of a document RNN that read nothing.

Integration (§2.2), each a switch:

=====================  ==================================================================
``--init-enc``         ``D`` is the initial state of both encoder directions (instead of 0)
``--init-dec``         ``s_0 = tanh(W_s h_N + W_D D)``
``--aux-context plain``  ``s_i = f(s_{i-1}, y_{i-1}, c_i, D)`` (Eq. 4): ``[c_i; D]`` is the
                       input of the decoder's state update GRU (``GRU_2`` of the conditional
                       GRU: ``s_i = GRU_2(s̃_i, [c_i; D])``)
``--aux-context gated``  ``z_i = σ(U_z s_{i-1} + W_z y_{i-1} + C_z c_i)`` (Eq. 5),
                       ``s_i = f(s_{i-1}, y_{i-1}, c_i, z_i ⊙ D)`` (Eq. 6)
=====================  ==================================================================

Two options the paper does not have, off by default (measured on probes of other shapes in
``docs/rnn.md``): ``--context-summary mean`` (``S_k`` the mean of the sentence RNN's states over
the words instead of its last state) and ``--context-summary-norm`` (each ``S_k``
layer-normalised before the document RNN).

The paper's best system (Table 1, row 8: Init-enc + Init-dec + gated auxiliary context) is the
named architecture ``hrnn_context``, at the sizes of its Nematus base (``rnnsearch_nematus``).
The parameters a sentence-level ``rnnsearch`` lacks are named ``context_*``: a model is
initialised from a trained ``rnnsearch`` of the same sizes with
``--init-from-sentence-checkpoint`` (:mod:`~fairseq_docctx.models.sentence_init`).
"""
from typing import Dict, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from torch import Tensor

from ..data import context_batch as cb
from ..errors import UsageError
from ..modules.gru import run_gru
from ..modules.recurrence import project
from . import sentence_init
from .arch_defaults import set_defaults
from .document_context import resolve_context_size
from .rnnsearch import (RNNSearchContextModel, RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel, cell_input,
                        cell_step, is_context_parameter, rnnsearch_nematus)

AUX_CONTEXT_CHOICES = ("none", "plain", "gated")
SUMMARY_CHOICES = ("last", "mean")


class HRNNContextEncoder(RNNSearchEncoder):
    """:class:`RNNSearchEncoder` with the hierarchical summary ``D`` of the previous source
    sentences; its output holds ``D`` as ``doc_context [B, context_hidden_size]``."""

    def __init__(self, dictionary, embed_tokens, *, context_size, context_hidden_size,
                 share_context_encoder, init_enc, summary_norm=False, summary="last", **kwargs):
        super().__init__(dictionary, embed_tokens, **kwargs)
        self.context_size = context_size
        self.context_dim = context_hidden_size
        if summary not in SUMMARY_CHOICES:
            raise UsageError(f"--context-summary: one of {', '.join(SUMMARY_CHOICES)}")
        self.summary = summary
        self.init_enc = init_enc
        if init_enc and context_hidden_size != self.hidden_size:
            raise UsageError("--init-enc: D is the encoder's initial state, so --context-hidden-size "
                             f"({context_hidden_size}) must equal --encoder-hidden-size ({self.hidden_size})")
        if share_context_encoder:  # the sentence RNN is the encoder's Bi-GRU
            self.context_sentence_rnn = None
            sentence_dim = self.output_units
        else:
            self.context_sentence_rnn = nn.GRU(embed_tokens.embedding_dim, context_hidden_size, batch_first=True)
            sentence_dim = context_hidden_size
        self.context_document_rnn = nn.GRU(sentence_dim, context_hidden_size, batch_first=True)
        # --context-summary-norm: each S_k layer-normalised before the document RNN
        self.context_summary_norm = nn.LayerNorm(sentence_dim) if summary_norm else None

    def sentence_summaries(self, tokens: Tensor) -> Tensor:
        """``S_k = h_{N,k}`` (Eq. 1; with ``--context-summary mean`` the mean of the states
        over the words) of every row of ``tokens [N, L]`` (padded on either side), all rows in
        one run: ``[N, sentence_dim]``."""
        x, lengths, _ = self.embedded(tokens)
        rnn = self.rnn if self.context_sentence_rnn is None else self.context_sentence_rnn
        states, last = run_gru(rnn, x, lengths, outputs=self.summary == "mean")
        if self.summary == "mean":  # the states' mean over the words (zeros at padding)
            return states.sum(1) / lengths.unsqueeze(1).to(states)
        if self.context_sentence_rnn is None:
            return torch.cat([last[0], last[1]], -1)  # [→h_N; ←h_1]
        return last[0]

    def document_summary(self, context, batch_size: int, like: Tensor) -> Tensor:
        """``D [B, context_hidden_size]`` (Eq. 2) of every batch row; 0 for a row without
        context (and for every row when the batch carries no source context)."""
        D = like.new_zeros(batch_size, self.context_dim)
        if not cb.has_side(context, "src"):
            return D
        table = cb.table(context, "src", self.context_size)
        present = table.index >= 0  # [B, K], column k-1: the sentence k back
        rows = present.any(1).nonzero().squeeze(1)
        if rows.numel() == 0:
            return D
        # each table row that is some row's context through the sentence RNN once
        used = torch.unique(table.index[present])
        S = self.sentence_summaries(table.tokens.index_select(0, used))
        if self.context_summary_norm is not None:
            S = self.context_summary_norm(S)
        where = torch.where(present, torch.searchsorted(used, table.index.clamp(min=0)), table.index)
        per_row = cb.gather_rows(S, where.index_select(0, rows))  # [R, K, C]
        # the document RNN reads S_1..S_K from the farthest sentence to the nearest
        K = present.size(1)
        distance = torch.arange(1, K + 1, device=present.device).expand_as(present)
        order = torch.where(present, distance, 0).index_select(0, rows).argsort(1, descending=True)
        seq = per_row.gather(1, order.unsqueeze(-1).expand_as(per_row))
        last = run_gru(self.context_document_rnn, seq, present.sum(1).index_select(0, rows), outputs=False)[1][0]
        return D.index_copy(0, rows, last.to(D))

    def forward(self, src_tokens, src_lengths=None, context=None, **kwargs):
        D = self.document_summary(context, src_tokens.size(0), self.attention_keys.weight)
        # Init-enc (§2.2): D instead of the all-zero initial state of the encoder
        out = self.encoder_out(*self.run_rnn(src_tokens, D if self.init_enc else None))
        out["doc_context"] = D
        return out


class HRNNContextDecoder(RNNSearchDecoder):
    """:class:`RNNSearchDecoder` reading ``D`` through the switches of §2.2."""

    def __init__(self, dictionary, embed_tokens, *, doc_dim, init_dec, aux_context, **kwargs):
        super().__init__(dictionary, embed_tokens, **kwargs)
        if aux_context not in AUX_CONTEXT_CHOICES:
            raise UsageError(f"--aux-context: one of {', '.join(AUX_CONTEXT_CHOICES)}")
        H, E, C = self.hidden_size, embed_tokens.embedding_dim, self.gru2.input_size
        self.aux_context = aux_context
        # Init-dec: W_D of s_0 = tanh(W_s h_N + W_D D)
        self.context_init = nn.Linear(doc_dim, H, bias=False) if init_dec else None
        # auxiliary context: the columns of GRU_2's input weights that read D (Eq. 4)
        self.context_aux = nn.Linear(doc_dim, 3 * H, bias=False) if aux_context != "none" else None
        if aux_context == "gated":  # U_z, W_z, C_z of the context gate (Eq. 5)
            self.context_gate_state = nn.Linear(H, doc_dim, bias=False)
            self.context_gate_embed = nn.Linear(E, doc_dim, bias=False)
            self.context_gate_context = nn.Linear(C, doc_dim, bias=False)

    def init_input(self, encoder_out):
        x = super().init_input(encoder_out)
        if self.context_init is not None:  # Init-dec: W_s h_N + W_D D
            x = x + self.context_init(encoder_out["doc_context"])
        return x

    def start(self, encoder_out):
        state = super().start(encoder_out)
        if self.aux_context == "plain":  # W_D D: the same at every step of the sentence
            state["aux"] = self.context_aux(encoder_out["doc_context"])
        return state

    def step_inputs(self, y, encoder_out):
        inputs = super().step_inputs(y, encoder_out)
        if self.aux_context == "gated":  # W_z y_{i-1} of all steps at once
            inputs["gate"] = self.context_gate_embed(y)
        return inputs

    def update(self, s_prev, s_tilde, ctx, inputs, state, encoder_out) -> Tuple[Tensor, Dict[str, Tensor]]:
        gi = cell_input(self.gru2, ctx["c"])
        extras = {}
        if self.aux_context == "plain":  # Eq. 4: s_i = GRU_2(s̃_i, [c_i; D])
            gi = gi + state["aux"]
        elif self.aux_context == "gated":
            z = torch.sigmoid(project(self.context_gate_state, s_prev) + inputs["gate"]
                              + project(self.context_gate_context, ctx["c"]))  # Eq. 5
            gi = gi + project(self.context_aux, z * encoder_out["doc_context"])  # Eq. 6: [c_i; z_i ⊙ D]
            extras["gate"] = z
        return cell_step(self.gru2, gi, s_tilde), extras


@register_model("hrnn_context")
class HRNNContextModel(RNNSearchContextModel):
    """``rnnsearch`` with the hierarchical summary of the previous source sentences (Wang et
    al. 2017). Contract (:mod:`~fairseq_docctx.models.document_context`): reads the ``src``
    side, K = ``--hrnn-context-size`` (default: the task's ``--context-size``); length-sorted
    sentence batches, context words counted at their cost (:attr:`context_token_cost`; each
    context sentence of a batch through the sentence RNN once); packed training output."""

    encoder_class = HRNNContextEncoder
    decoder_class = HRNNContextDecoder
    #: what a checkpoint written before ``--context-summary`` / ``--context-summary-norm``
    #: existed was trained with (the last state, no normalisation)
    checkpoint_defaults = dict(RNNSearchContextModel.checkpoint_defaults, context_summary="last",
                               context_summary_norm=False)

    @property
    def context_token_cost(self) -> float:
        """What a context word counts toward ``--max-tokens`` with the ``sentences`` batching:
        it goes through the sentence RNN (Eq. 1) only, the encoder's Bi-GRU
        (``--share-context-encoder``, the default: ``2·3·(E + H)·H`` multiply-adds) or a GRU
        of its own (``3·(E + C)·C``), over those of a word of a current sentence
        (:meth:`current_word_macs`): about 0.22 (0.11 with a GRU of its own) at 256/256 with
        4,000 words."""
        enc = self.encoder
        rnn = enc.rnn if enc.context_sentence_rnn is None else enc.context_sentence_rnn
        return sum(p.numel() for p in rnn.parameters() if p.dim() == 2) / self.current_word_macs()

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--hrnn-context-size", type=int, metavar="K",
                            help="previous source sentences summarised (default: the task's "
                            "--context-size; given, it must equal it)")
        parser.add_argument("--context-hidden-size", type=int, metavar="N",
                            help="size of the document RNN, that of D, and of the sentence RNN when it "
                            "is not the encoder's (default: --encoder-hidden-size)")
        parser.add_argument("--init-enc", type=utils.eval_bool, nargs="?", const=True, metavar="BOOL",
                            help="Init-enc: D is the encoder's initial state")
        parser.add_argument("--init-dec", type=utils.eval_bool, nargs="?", const=True, metavar="BOOL",
                            help="Init-dec: s_0 = tanh(W_s h_N + W_D D)")
        parser.add_argument("--aux-context", choices=AUX_CONTEXT_CHOICES,
                            help="D as auxiliary input of the decoder's state update: none, plain "
                            "(Eq. 4) or through the context gate (gated, Eqs. 5-6)")
        parser.add_argument("--share-context-encoder", type=utils.eval_bool, nargs="?", const=True,
                            metavar="BOOL", help="the sentence RNN is the NMT encoder's Bi-GRU "
                            "(S_k = [forward last state; backward last state]; the default), or "
                            "(False) a GRU of its own, as in the authors' released code")
        parser.add_argument("--context-summary", choices=SUMMARY_CHOICES,
                            help="S_k: the sentence RNN's last state (last, Eq. 1) or the mean of its "
                            "states over the words (mean)")
        parser.add_argument("--context-summary-norm", type=utils.eval_bool, nargs="?", const=True,
                            metavar="BOOL", help="layer-normalise each sentence summary S_k before the "
                            "document RNN (not in the paper)")
        sentence_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        resolve_context_size(args, "hrnn_context_size", task)
        hrnn_context(args)
        model = super().build_model(args, task)
        model.declare_context(("src",), args.hrnn_context_size)
        return sentence_init.apply(model, args, "hrnn_context", is_context=is_context_parameter,
                                   record_as="hrnn_initialized_from")

    @classmethod
    def encoder_kwargs(cls, args):
        return dict(super().encoder_kwargs(args), context_size=args.hrnn_context_size,
                    context_hidden_size=args.context_hidden_size,
                    share_context_encoder=args.share_context_encoder, init_enc=args.init_enc,
                    summary_norm=args.context_summary_norm, summary=args.context_summary)

    @classmethod
    def decoder_kwargs(cls, args, encoder):
        return dict(super().decoder_kwargs(args, encoder), doc_dim=encoder.context_dim,
                    init_dec=args.init_dec, aux_context=args.aux_context)

    # ------------------------------------------------------------------- analysis
    @torch.no_grad()
    def gate_values(self, sample, prev_output_tokens=None) -> Tuple[Tensor, Tensor]:
        """The context gate ``z_i`` (Eq. 5) at every target position of a teacher-forced
        batch (its ``prev_output_tokens``, or those given): ``z [B, T, context_hidden_size]``
        (zeros at padding) and which rows have context ``[B]`` (for the others ``D = 0`` and
        the gate changes nothing). Eval mode, restored."""
        if self.decoder.aux_context != "gated":
            raise ValueError("hrnn_context: only the gated auxiliary context (--aux-context gated) "
                             "has gate values")
        ni = sample["net_input"]
        prev = ni["prev_output_tokens"] if prev_output_tokens is None else prev_output_tokens
        _, steps = self.decoder_steps(ni, prev)
        ctx = cb.get_context(ni)
        has = (cb.index(ctx, "src", self.encoder.context_size) >= 0).any(1) if cb.has_side(ctx, "src") \
            else prev.new_zeros(prev.size(0), dtype=torch.bool)
        z = steps["gate"] * prev.ne(self.decoder.padding_idx).unsqueeze(-1)
        return z, has

    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels",)

    def context_weights(self, sample):
        """For ``docctx-score plot``: one panel, the context gate ``z_i`` (Eq. 5; mean over
        its channels) at every target word, ``weights [B, 1, T]``; rows without context are
        masked (their ``D`` is 0)."""
        z, has = self.gate_values(sample)
        real = sample["net_input"]["prev_output_tokens"].ne(self.decoder.padding_idx)
        weights = z.mean(-1) * (real & has[:, None])
        return [dict(title="context gate z (mean over channels; share of D fed to the decoder)",
                     weights=weights.unsqueeze(1), rows=["z"], row_mask=has[:, None], columns="target",
                     column_mask=real, context_side="source", normalized=False)]


@register_model_architecture("hrnn_context", "hrnn_context")
def hrnn_context(args):
    """The paper's best system (Wang et al. 2017, Table 1, row 8): Init-enc + Init-dec +
    gated auxiliary context, on the Nematus base (embeddings 600, hidden 1000; §3.1; its
    ``s_0`` from the annotations' mean, ``--decoder-init mean``); the sentence RNN is the NMT
    encoder (§1: the document RNN "on top of the sentence-level RNN encoder"), whose states
    carry the words of a sentence from the first updates on, where a sentence RNN of its own
    starts from summaries that hardly differ between sentences and, on the context probe,
    often learns only how many previous sentences there are (``docs/benchmarks.md``); a
    document RNN of the encoder's size; K (the paper's 3) is the task's ``--context-size``
    unless ``--hrnn-context-size`` says otherwise. A checkpoint keeps the sentence RNN it was
    trained with (its arguments record ``--share-context-encoder``)."""
    set_defaults(args, init_enc=True, init_dec=True, aux_context="gated", share_context_encoder=True,
                 context_summary="last", context_summary_norm=False)
    rnnsearch_nematus(args)
    set_defaults(args, context_hidden_size=args.encoder_hidden_size)
    sentence_init.set_defaults(args)
