"""``isg_rnnsearch``: the inter-sentence gate model NMT_ISG of Kuang & Xiong (2018), *Fusing
Recency into Neural Machine Translation with an Inter-Sentence Gate Model*, on the
``rnnsearch`` base (:mod:`fairseq_docctx.models.rnnsearch`, their §3). See ``docs/rnn.md``.

Two adjacent source sentences of a document: A, the previous one ("before-x"), and B, the
current one.

* **Encoder** (§4.1): the same bidirectional GRU encodes A and B into annotations
  ``h^a_1..h^a_m`` and ``h^b_1..h^b_n``. A is read through the task's source table with K = 1
  (``context_batch.table(context, "src", 1)``); every sentence of a batch runs through the GRU
  once, in one packed run: the current sentences (B, from ``src_tokens``, as in ``rnnsearch``)
  and the previous sentences that are not current sentences of the batch too (under
  document-run batching A of sentence j is sentence j-1, mostly a current sentence already).
  A document's first sentence gets A = (eos, eos, eos) (§5.1: the stop symbol three times).
  A's attention keys ``U^a h^a_j + b^a`` are computed once per sentence and travel with A's
  annotations in the encoder output (per-row tensors ``context_*``, reordered with the beams).
* **Decoder**, target position t: ``rnnsearch``'s step with feedback attention (§3, Eqs. 7-8)
  and the gate —

  - ``s̃_t = GRU_1(s_{t-1}, y_{t-1})``                                            (Eq. 7)
  - ``c^b_t = Σ_j α^b_tj h^b_j`` and ``c^a_t = Σ_j α^a_tj h^a_j``: two attention networks of
    the form of Eqs. 4-7 (§4.1; §5.4: "we use two attention networks"), each with its own
    parameters, both queried with ``s̃_t``, the query of the feedback attention the model is
    built on (Eq. 7; "our proposed model is implemented on the top of RNNSearch", §3)
  - ``z_t = σ(U_z s_{t-1} + W_z y_{t-1} + C_b c^b_t + C_a c^a_t)``                (Eq. 9)
  - ``s_t = GRU_2(s̃_t, C_1 (c^a_t ⊙ z_t) + C_2 (c^b_t ⊙ (1 - z_t)))``            (Eq. 10)

    Eq. 10 written in the feedback form of Eq. 8: ``U s_{t-1} + W y_{t-1}`` enter through
    ``GRU_1`` and ``s̃_t`` as in ``rnnsearch``; the context input of ``GRU_2`` is the gated
    pair. ``C_2`` is ``rnnsearch``'s ``GRU_2`` input weights (the ones that read ``c_t``);
    ``C_1`` is new.
  - ``p(y_t) = g(f(s_t, y_{t-1}, c^b_t))``: ``rnnsearch``'s deep output on ``c^b_t``
    (Eq. 11): A never feeds the output layer.

  ``W_z y_{t-1}`` is one matrix product for all steps, before the loop; ``C_b c^b_t`` and
  ``C_a c^a_t`` are computed at every step rather than precomputed per source position
  (``C h_j`` once per sentence; the measurement behind this choice: docs/benchmarks.md,
  "Implementation choices"). The equations have no bias in the gate; there is none.
* **Table 3** (§5.3) at inference, ``--isg-ablation`` (a model option: ``fairseq-generate
  --model-overrides "{'isg_ablation': 'null'}"``): ``null`` (+NULL: every A is the null
  sentence), ``zero-gate`` (+z=0: ``z_t = 0``, A is not read), ``random-context`` (+RV:
  ``c^a_t`` uniform in [-1, 1], drawn at every step from torch's generator, which
  ``fairseq-generate`` seeds with ``--seed``).
* **Initialisation** (§5.1): from a trained ``rnnsearch`` of the same sizes "except for those
  related to the operations of the inter-sentence gate": the parameters ``rnnsearch`` lacks
  are named ``context_*`` (A's attention network, ``U_z, W_z, C_b, C_a``, ``C_1``) and are the
  new ones of ``--init-from-sentence-checkpoint`` (:mod:`~fairseq_docctx.models.sentence_init`).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from torch import Tensor

from ..data import context_batch as cb
from ..errors import UsageError
from ..modules.entropy import entropy
from ..modules.recurrence import project
from . import sentence_init
from .arch_defaults import set_defaults
from .document_context import ContextAttentionUnsupported
from .rnnsearch import (RNNSearchContextModel, RNNSearchDecoder, RNNSearchEncoder, RNNSearchModel,
                        additive_attention, cell_input, cell_step, is_context_parameter, right_padded,
                        rnnsearch, to_left_padding)

#: the inference switches of the paper's Table 3 (``--isg-ablation``)
ABLATIONS = ("none", "null", "zero-gate", "random-context")
#: the null previous sentence of a document's first sentence: the stop symbol this many times
NULL_LENGTH = 3


def with_rows(tokens: Tensor, rows, pad: int) -> Tensor:
    """Right-padded ``tokens [N, L]`` followed by the right-padded rows ``rows`` (tensors
    ``[M, L']``), all padded to the widest."""
    width = max(t.size(1) for t in [tokens, *rows])
    return torch.cat([nn.functional.pad(t, [0, width - t.size(1)], value=pad) for t in [tokens, *rows]])


class ISGEncoder(RNNSearchEncoder):
    """:class:`RNNSearchEncoder` that also encodes the previous sentence A of every row (the
    same GRU, §4.1). Its output adds, per row, ``context_annotations [B, m, 2H]`` (``h^a_j``,
    right-padded to the batch's longest A), ``context_keys [B, m, A]`` (``U^a h^a_j + b^a``),
    ``context_padding_mask [B, m]`` and ``context_tokens [B, m]`` (A's tokens, for analysis);
    none of them with ``--isg-ablation random-context`` or ``zero-gate`` (A is not read)."""

    def __init__(self, dictionary, embed_tokens, *, ablation="none", **kwargs):
        super().__init__(dictionary, embed_tokens, **kwargs)
        if ablation not in ABLATIONS:
            raise UsageError(f"--isg-ablation: one of {', '.join(ABLATIONS)}")
        self.ablation = ablation
        self.eos = dictionary.eos()
        # U^a, b^a of A's attention network (§4.1; B's are rnnsearch's attention_keys)
        self.context_attention_keys = nn.Linear(self.output_units, self.attention_keys.out_features)

    def previous_rows(self, context, batch_size: int, device) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """Where A of every row is: its row of the batch's source table ``[B]`` (-1: the null
        sentence: a document's first sentence, a batch without source context, or
        ``--isg-ablation null``), the table's tokens, and for every table row the batch row
        whose current sentence it is (-1: a context sentence only; ``None`` if the table does
        not say)."""
        none = torch.full((batch_size,), -1, dtype=torch.long, device=device)
        if self.ablation == "null" or not cb.has_side(context, "src"):
            return none, None, None
        table = cb.table(context, "src", 1)
        prev = table.index[:, 0] if table.index.size(1) else none
        current = None
        if table.self_rows is not None:
            current = torch.full((table.tokens.size(0),), -1, dtype=torch.long, device=device)
            current[table.self_rows] = torch.arange(batch_size, device=device)
        return prev, table.tokens, current

    def forward(self, src_tokens, src_lengths=None, context=None, **kwargs):
        if self.ablation in ("random-context", "zero-gate"):  # A is not read
            return super().forward(src_tokens, src_lengths)
        B, S = src_tokens.shape
        pad = self.padding_idx
        prev, table, current = self.previous_rows(context, B, src_tokens.device)  # table: its tokens
        # A of each row as a row of one run: a current sentence (row b), an extra table row
        # (B + i) or the null sentence (the last row, if some row reads it)
        has = prev >= 0
        in_batch = torch.full_like(prev, -1) if current is None else torch.where(has, current[prev.clamp(min=0)], -1)
        extra = torch.unique(prev[has & (in_batch < 0)])
        cur, cur_lengths, cur_left = right_padded(src_tokens, pad)
        rows = [] if table is None or extra.numel() == 0 else [right_padded(table.index_select(0, extra), pad)[0]]
        if not bool(has.all()):
            rows.append(src_tokens.new_full((1, NULL_LENGTH), self.eos))
        tokens = with_rows(cur, rows, pad)
        a_rows = torch.where(in_batch >= 0, in_batch, B + torch.searchsorted(extra, prev.clamp(min=0)))
        a_rows = torch.where(has, a_rows, tokens.size(0) - 1)  # the null sentence: the last row
        # the one GRU run (right-padded annotations)
        h, mask, last = self.run_rnn(tokens)
        # B: rnnsearch's encoder output, in the padding layout of src_tokens
        hb = h[:B, :S]
        if cur_left:
            hb = to_left_padding(hb, cur_lengths)
        out = self.encoder_out(hb, src_tokens.eq(pad), last[:, :B])
        # A: annotations and keys of each sentence used as A once, then gathered per row
        used, a_rows = torch.unique(a_rows, return_inverse=True)
        lengths = (~mask.index_select(0, used)).sum(1)
        width = int(lengths.max())
        ha = self.dropout_out_module(h.index_select(0, used)[:, :width])
        a_mask = mask.index_select(0, used)[:, :width]
        keys = ha.new_zeros(*a_mask.shape, self.context_attention_keys.out_features)
        keys = keys.index_put((~a_mask,), self.context_attention_keys(ha[~a_mask]))
        out.update(context_annotations=ha.index_select(0, a_rows), context_keys=keys.index_select(0, a_rows),
                   context_padding_mask=a_mask.index_select(0, a_rows),
                   context_tokens=tokens.index_select(0, used)[:, :width].index_select(0, a_rows))
        return out


class ISGDecoder(RNNSearchDecoder):
    """:class:`RNNSearchDecoder` with the second attention network (over A) and the
    inter-sentence gate (Eqs. 9-10). The per-step outputs (``steps``) add ``gate`` (``z_t``,
    ``[B, T, 2H]``) and ``context_attn`` (``α^a_t``, ``[B, T, m]``; not with the
    ``random-context`` and ``zero-gate`` switches)."""

    #: A's entries are cut to the longest A of a group of rows too
    position_entries = {**RNNSearchDecoder.position_entries,
                        "context_padding_mask": ("context_annotations", "context_keys", "context_padding_mask",
                                                 "context_tokens")}
    position_outputs = {**RNNSearchDecoder.position_outputs, "context_attn": "context_padding_mask"}
    attentions = (*RNNSearchDecoder.attentions, ("context_keys", "context_annotations", "context_padding_mask"))

    def __init__(self, dictionary, embed_tokens, *, ablation="none", **kwargs):
        super().__init__(dictionary, embed_tokens, **kwargs)
        if ablation not in ABLATIONS:
            raise UsageError(f"--isg-ablation: one of {', '.join(ABLATIONS)}")
        self.ablation = ablation
        H, E, C = self.hidden_size, embed_tokens.embedding_dim, self.gru2.input_size
        attention_dim = self.attention_query.out_features
        # A's attention network (§4.1): W^a and v^a (U^a, b^a: the encoder's context_attention_keys)
        self.context_attention_query = nn.Linear(H, attention_dim, bias=False)
        self.context_attention_v = nn.Parameter(torch.empty(attention_dim).uniform_(-0.1, 0.1))
        # the inter-sentence gate (Eq. 9): U_z, W_z, C_b, C_a
        self.context_gate_state = nn.Linear(H, C, bias=False)
        self.context_gate_embed = nn.Linear(E, C, bias=False)
        self.context_gate_current = nn.Linear(C, C, bias=False)
        self.context_gate_previous = nn.Linear(C, C, bias=False)
        # C_1 of Eq. 10: GRU_2's input weights that read c^a ⊙ z (C_2: GRU_2's own)
        self.context_input = nn.Linear(C, 3 * H, bias=False)

    def step_inputs(self, y, encoder_out):
        inputs = super().step_inputs(y, encoder_out)
        if self.ablation != "zero-gate":  # W_z y_{t-1} of all steps at once
            inputs["gate"] = self.context_gate_embed(y)
        return inputs

    def attend(self, s_tilde, state, encoder_out):
        """``c^b_t``, ``α^b_t`` (``c``, ``attn``: rnnsearch's attention over B) and
        ``c^a_t``, ``α^a_t`` (``c_previous``, ``attn_previous``: A's attention network, the
        same query ``s̃_t``), with ``C_b c^b_t`` and ``C_a c^a_t`` (``gate_current``,
        ``gate_previous``); ``c^a_t`` random with ``random-context``; none of A's with
        ``zero-gate``."""
        ctx = super().attend(s_tilde, state, encoder_out)
        if self.ablation == "zero-gate":
            return ctx
        ctx["gate_current"] = project(self.context_gate_current, ctx["c"])  # C_b c^b_t
        if self.ablation == "random-context":  # Table 3, +RV
            ctx["c_previous"] = torch.rand_like(ctx["c"]) * 2 - 1
        else:
            ctx["c_previous"], alpha = additive_attention(
                project(self.context_attention_query, s_tilde), encoder_out["context_keys"],
                encoder_out["context_annotations"], encoder_out["context_padding_mask"], self.context_attention_v)
            ctx["attn_previous"] = alpha
        ctx["gate_previous"] = project(self.context_gate_previous, ctx["c_previous"])  # C_a c^a_t
        return ctx

    def update(self, s_prev, s_tilde, ctx, inputs, state, encoder_out) -> Tuple[Tensor, Dict[str, Tensor]]:
        c_b = ctx["c"]
        if self.ablation == "zero-gate":  # Table 3, +z=0: s_t = GRU_2(s̃_t, C_2 c^b_t)
            return cell_step(self.gru2, cell_input(self.gru2, c_b), s_tilde), {"gate": torch.zeros_like(c_b)}
        z = torch.sigmoid(project(self.context_gate_state, s_prev) + inputs["gate"] + ctx["gate_current"]
                          + ctx["gate_previous"])  # Eq. 9
        gi = cell_input(self.gru2, c_b * (1 - z)) + project(self.context_input, ctx["c_previous"] * z)  # Eq. 10
        extras = {"gate": z}
        if "attn_previous" in ctx:
            extras["context_attn"] = ctx["attn_previous"]
        return cell_step(self.gru2, gi, s_tilde), extras


@register_model("isg_rnnsearch")
class ISGRNNSearchModel(RNNSearchContextModel):
    """``rnnsearch`` with the inter-sentence gate (Kuang & Xiong 2018, §4). Contract
    (:mod:`~fairseq_docctx.models.document_context`): reads the ``src`` side, K = 1 (the
    previous sentence only); length-sorted sentence batches, A's words counted in full; packed
    training output."""

    encoder_class = ISGEncoder
    decoder_class = ISGDecoder

    #: a word of A counts as a word of a current sentence toward --max-tokens (the contract's
    #: default): A is encoded like B and attended at every target step, over the longest A of
    #: a group of rows; counted at its matrix products only (0.26 of a current word at
    #: 256/256), batches grow and train slower (docs/benchmarks.md, "Implementation choices")
    context_token_cost = 1.0

    @staticmethod
    def add_args(parser):
        RNNSearchModel.add_args(parser)
        parser.add_argument("--isg-ablation", choices=ABLATIONS,
                            help="the inference switches of Kuang & Xiong (2018), Table 3: null (+NULL: "
                            "every previous sentence is the null sentence), zero-gate (+z=0: the gate is 0), "
                            "random-context (+RV: the previous sentence's context vector is uniform in [-1, 1]); "
                            "at generation: --model-overrides \"{'isg_ablation': 'null'}\"")
        sentence_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        isg_rnnsearch(args)
        model = super().build_model(args, task)
        model.declare_context(("src",), 1)
        return sentence_init.apply(model, args, "isg_rnnsearch", is_context=is_context_parameter,
                                   record_as="isg_initialized_from")

    @classmethod
    def encoder_kwargs(cls, args):
        return dict(super().encoder_kwargs(args), ablation=args.isg_ablation)

    @classmethod
    def decoder_kwargs(cls, args, encoder):
        return dict(super().decoder_kwargs(args, encoder), ablation=args.isg_ablation)

    # ------------------------------------------------------------------- analysis
    def previous_sentence_attention(self, src_tokens, src_lengths, prev_output_tokens, context=None, **kwargs):
        """The attention over the previous sentence A (``α^a``, §4.1, §5.4) at every target
        position of a teacher-forced batch: ``[B, T, m]`` (zeros at padding) and A's tokens
        ``[B, m]`` (right-padded; ``(eos, eos, eos)`` for the null sentence). Eval mode,
        restored."""
        if self.decoder.ablation in ("random-context", "zero-gate"):
            raise ContextAttentionUnsupported(f"isg_rnnsearch with --isg-ablation {self.decoder.ablation} does "
                                              "not attend to the previous sentence")
        net_input = dict(src_tokens=src_tokens, src_lengths=src_lengths, prev_output_tokens=prev_output_tokens,
                         context=context)
        encoder_out, steps = self.decoder_steps(net_input)
        real = prev_output_tokens.ne(self.decoder.padding_idx).unsqueeze(-1)
        return steps["context_attn"] * real, encoder_out["context_tokens"]

    def gate_values(self, sample, prev_output_tokens: Optional[Tensor] = None) -> Tensor:
        """The inter-sentence gate ``z_t`` (Eq. 9) at every target position of a
        teacher-forced batch (its ``prev_output_tokens``, or those given): ``[B, T, 2H]``,
        zeros at padding. Eval mode, restored."""
        ni = sample["net_input"]
        prev = ni["prev_output_tokens"] if prev_output_tokens is None else prev_output_tokens
        _, steps = self.decoder_steps(ni, prev)
        return steps["gate"] * prev.ne(self.decoder.padding_idx).unsqueeze(-1)

    def context_attention(self, sample):
        """The attention over the previous sentence as one distribution per target position
        (``docctx-score entropy``'s format): ``weights [B, T, m]``, ``support`` A's tokens
        (the three stop symbols of the null sentence included, as in the paper's Figure 3).
        A document's first sentence has a distribution too, over the null sentence (the
        paper's Figure 3): every real target position is measured."""
        ni = sample["net_input"]
        alpha, prev_tokens = self.previous_sentence_attention(**ni)
        real = ni["prev_output_tokens"].ne(self.decoder.padding_idx)
        support = prev_tokens.ne(self.encoder.padding_idx)[:, None, :].expand_as(alpha)
        return [dict(title="attention over the previous sentence", positions="target",
                     items="previous sentence's tokens", weights=alpha, support=support, position_mask=real)]

    #: the analyses of the context this model offers (models/document_context.py: ANALYSES)
    analyses = ("panels", "attention")

    def context_weights(self, sample):
        """For ``docctx-score plot``: panels over the target words (``weights [B, 1, T]``,
        nothing masked: a document's first sentence reads the null sentence): the gate
        ``z_t`` (Eq. 9, mean over its channels: the share of ``c^a_t`` in the state update),
        and, unless the switches turn the attention over A off, that attention's entropy
        (Eq. 12) over ``log m`` (0: on one word of A, 1: even over its ``m`` tokens)."""
        ni = sample["net_input"]
        real = ni["prev_output_tokens"].ne(self.decoder.padding_idx)
        every = real.new_ones(real.size(0), 1)
        panels = [dict(title="inter-sentence gate z (mean over channels; share of the previous sentence)",
                       weights=self.gate_values(sample).mean(-1).unsqueeze(1), rows=["z"], row_mask=every,
                       columns="target", column_mask=real, context_side="source", normalized=False)]
        if self.decoder.ablation in ("none", "null"):
            (dist,) = self.context_attention(sample)
            h, log_m = (x.float() for x in entropy(dist["weights"], dist["support"]))  # Eq. 12; NaN at padding
            panels.append(dict(title="entropy of the attention over the previous sentence / log m",
                               weights=torch.where(real, (h / log_m.clamp(min=1e-6)).clamp(max=1), 0).unsqueeze(1), rows=["H/log m"],
                               row_mask=every, columns="target", column_mask=real, context_side="source",
                               normalized=False))
        return panels


@register_model_architecture("isg_rnnsearch", "isg_rnnsearch")
def isg_rnnsearch(args):
    """NMT_ISG at the sizes of Kuang & Xiong (2018, §5.1): ``rnnsearch``'s (embeddings 620,
    Bi-GRU 1000+1000, decoder 1000, dropout 0.5 on the output layer only); the gate and the
    attention over A of the sizes they act on; no switch of Table 3."""
    set_defaults(args, isg_ablation="none")
    rnnsearch(args)
    sentence_init.set_defaults(args)
