"""``rnnsearch``: the attentional GRU encoder-decoder of Bahdanau, Cho & Bengio (2015) with
the "feedback attention" decoder of Kuang & Xiong (2018, §3, Eqs. 7-8) — the conditional GRU
of Nematus that Wang et al. (2017, §3.1) build on. See ``docs/rnn.md``.

* Encoder (Bahdanau et al. 2015, §3.2; Kuang & Xiong 2018, Eq. 1): a bidirectional GRU over
  the source embeddings (an ``nn.GRU``; in CPU training run step by step by
  :func:`~fairseq_docctx.modules.gru.run_gru`, faster there); the annotations
  ``h_j = [→h_j; ←h_j]``. The attention keys ``U_a h_j + b_a`` are computed here, once per
  sentence, and travel in the encoder output.
* Decoder, per target position ``t`` (the loop over the target positions):

  - ``s̃_t = GRU_1(s_{t-1}, y_{t-1})``                                (Kuang & Xiong, Eq. 7)
  - ``e_tj = v_a · tanh(W_a s̃_t + U_a h_j)``, ``α_tj = softmax_j e_tj``,
    ``c_t = Σ_j α_tj h_j``                           (Kuang & Xiong, Eqs. 4-7; Bahdanau A.1.2)
  - ``s_t = GRU_2(s̃_t, c_t)``                                        (Kuang & Xiong, Eq. 8)

  with ``s_0 = tanh(W_s ←h_1 + b_s)`` (``--decoder-init backward``; Bahdanau et al. 2015,
  A.2.2: the backward RNN's state after reading the whole sentence) or
  ``s_0 = tanh(W_s mean_j h_j + b_s)`` (``--decoder-init mean``: the mean of the annotations,
  Nematus' initial state, and that of Wang et al.'s (2017) released code, the base of
  ``hrnn_context``).
  Everything that does not depend on the recurrence is computed for all steps at once: the
  GRU_1 input projections of all ``y_{t-1}`` before the loop, the deep output after it. A
  teacher-forced batch runs in groups of rows of similar length (each cut to its longest
  target and source), so that batches of sentences of very different lengths (document
  runs) cost little padding.
* Deep output (Bahdanau et al. 2015, A.2.2; Kuang & Xiong, Eq. 2):
  ``t_t = f(U_o s_t + V_o y_{t-1} + C_o c_t)``, ``f`` = maxout with pools of 2 (Bahdanau) or
  tanh (Nematus), then dropout (Kuang & Xiong, §5.1: 0.5 on the output layer only) and the
  projection on the vocabulary.
* Initialisation (``--rnn-init``): PyTorch's own per module, or Bahdanau et al.'s (2015, B.1:
  :func:`bahdanau_init`), the setting Kuang & Xiong (2018, §5.1) keep.

The decoder is written for extension (the cross-sentence models of the family subclass it):
:meth:`RNNSearchDecoder.start` (the state before the first word and per-sentence constants),
:meth:`~RNNSearchDecoder.step_inputs` (per-step inputs precomputed for all steps),
:meth:`~RNNSearchDecoder.attend` (the attention of one step) and
:meth:`~RNNSearchDecoder.update` (the state update of one step) are separate methods; the
decoder's state lives in fairseq's incremental state as a dict of per-row tensors, and the
encoder output is a dict of per-row (batch-first) tensors; both are reordered generically,
so a subclass may add entries to either. The context models of the family derive from
:class:`RNNSearchContextModel` (the contract's declarations, the packed training output, the
decoder's per-step values for analysis); their parameters that ``rnnsearch`` lacks are named
``context_*`` (:func:`is_context_parameter`), so that they are the new ones when the model is
initialised from a trained ``rnnsearch``.
"""
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import FairseqDropout
from torch import Tensor

from ..data import context_batch as cb
from ..errors import UsageError
from ..modules import table_encoder
from ..modules.beam_rows import moves_only_copies, row_numbers
from ..modules.gru import gru_step, run_gru, take_positions
from ..modules.recurrence import AttendedValues, AttentionKeys, additive_scores, linear, project, recurrence
from .arch_defaults import set_defaults
from .document_context import DocumentContextModel

DEFAULT_MAX_POSITIONS = int(1e5)
#: fairseq Transformer options the RNN models accept only to refuse them with one line
UNSUPPORTED_FLAGS = ("--checkpoint-activations", "--offload-activations")
OUTPUT_ACTIVATIONS = ("maxout", "tanh")
#: what ``s_0`` reads (``--decoder-init``): the backward RNN's last state or the annotations' mean
DECODER_INITS = ("backward", "mean")
#: --rnn-init: PyTorch's own initialisation of each module, or Bahdanau et al.'s (2015, B.1)
RNN_INITS = ("pytorch", "bahdanau")


# ----------------------------------------------------------------------------- building blocks
def cell_input(cell: nn.GRUCell, x: Tensor) -> Tensor:
    """``W_i x + b_i`` of a GRU cell, for inputs of any leading shape (e.g. all steps)."""
    return linear(x, cell.weight_ih, cell.bias_ih)


def cell_step(cell: nn.GRUCell, gi: Tensor, h: Tensor) -> Tensor:
    """One step of ``cell`` from its precomputed input projection ``gi``."""
    return gru_step(gi, linear(h, cell.weight_hh, cell.bias_hh), h)


def additive_attention(query: Tensor, keys: Union[Tensor, AttentionKeys], values: Union[Tensor, AttendedValues],
                       padding_mask: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
    """``e_j = v · tanh(query + keys_j)``, ``α = softmax(e)`` over the real positions,
    ``c = Σ_j α_j values_j`` (Bahdanau et al. 2015, A.1.2, with ``query = W_a s`` and
    ``keys = U_a h + b``). ``query [N, A]``, ``keys [N, S, A]``, ``values [N, S, C]``,
    ``padding_mask [N, S]`` (True at padding), ``v [A]``; the keys and values may be those
    of a recurrence (:class:`~fairseq_docctx.modules.recurrence.AttentionKeys`,
    :class:`~fairseq_docctx.modules.recurrence.AttendedValues`: prepared once for all its
    steps). Returns ``c [N, C]`` and ``α [N, S]``."""
    if isinstance(keys, AttentionKeys):
        e = keys.scores(query, v)
    else:
        e = additive_scores(keys, query, v, padding_mask)
    alpha = torch.softmax(e, dim=-1)
    if isinstance(values, AttendedValues):
        return values.attend(alpha), alpha
    return torch.bmm(alpha.unsqueeze(1), values).squeeze(1), alpha


@torch.no_grad()
def bahdanau_init(model: nn.Module) -> None:
    """Bahdanau et al. (2015), Appendix B.1, on every parameter of ``model`` by its name: the
    recurrent matrices (``weight_hh*``: ``U_r``, ``U_z``, ``U`` of each GRU) random orthogonal,
    one ``[H, H]`` block per gate; the attention's ``W_a`` and ``U_a`` (``*attention_query``,
    ``*attention_keys``) ``N(0, 0.001²)``; ``v_a`` (``*attention_v``) and every bias 0; every
    other weight matrix (embeddings included, their padding row kept 0) ``N(0, 0.01²)``."""
    for name, p in model.named_parameters():
        last = name.rsplit(".", 1)[-1]
        if last.startswith("bias") or last.endswith("attention_v"):
            p.zero_()
        elif last.startswith("weight_hh"):
            for block in p.split(p.size(1)):  # r, z, n
                nn.init.orthogonal_(block)
        elif "attention_query" in name or "attention_keys" in name:
            p.normal_(0, 0.001)
        else:
            p.normal_(0, 0.01)
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            m.weight[m.padding_idx].zero_()


def Embedding(num_embeddings, dim, padding_idx):
    m = nn.Embedding(num_embeddings, dim, padding_idx=padding_idx)
    nn.init.uniform_(m.weight, -0.1, 0.1)
    nn.init.constant_(m.weight[padding_idx], 0)
    return m


def right_padded(tokens: Tensor, pad: int) -> Tuple[Tensor, Tensor, bool]:
    """``tokens [N, L]`` padded on either side -> the same rows right-padded, their lengths
    ``[N]`` and whether the input was left-padded (some row has padding on its left)."""
    mask = tokens.eq(pad)
    left = bool(mask[:, 0].any()) if tokens.numel() else False
    if left:
        tokens = utils.convert_padding_direction(tokens, pad, left_to_right=True)
    return tokens, (~mask).sum(1), left


def to_left_padding(x: Tensor, lengths: Tensor) -> Tensor:
    """Right-padded ``x [N, L, ...]`` (zeros at padding) moved to the right end of each row."""
    L = x.size(1)
    return take_positions(x, (torch.arange(L, device=x.device).unsqueeze(0) - (L - lengths).unsqueeze(1)) % L)


# ----------------------------------------------------------------------------- encoder
class RNNSearchEncoder(FairseqEncoder):
    """Bidirectional GRU encoder (Bahdanau et al. 2015, §3.2; Kuang & Xiong 2018, Eq. 1).

    Output (:meth:`forward`): a dict of per-row tensors, batch first —
    ``annotations [B, S, 2H]`` (``h_j``, in the padding layout of ``src_tokens``),
    ``keys [B, S, A]`` (``U_a h_j + b_a``, the attention's precomputed part),
    ``padding_mask [B, S]`` (True at padding), ``final [B, H]`` (``←h_1``, the backward
    RNN's last state) and ``sentence [B]`` (the row's number in the encoder's batch, carried
    through reordering: rows of the same number hold the same values). Every entry (also
    those a subclass adds) is reordered with the beams by :meth:`reorder_encoder_out`; an
    encoder output holds per-row tensors only.
    """

    def __init__(self, dictionary, embed_tokens, hidden_size, attention_dim, dropout_in=0.0,
                 dropout_out=0.0, max_positions=DEFAULT_MAX_POSITIONS):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = embed_tokens
        self.hidden_size = hidden_size
        self.output_units = 2 * hidden_size
        self.max_source_positions = max_positions
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.rnn = nn.GRU(embed_tokens.embedding_dim, hidden_size, batch_first=True, bidirectional=True)
        self.attention_keys = nn.Linear(self.output_units, attention_dim)  # U_a h_j + b_a

    def embedded(self, tokens: Tensor) -> Tuple[Tensor, Tensor, bool]:
        """The embedded rows of ``tokens [N, L]`` (padded on either side, each with at least
        one token), right-padded ``[N, L, E]``; their lengths and whether they were
        left-padded."""
        tokens, lengths, left = right_padded(tokens, self.padding_idx)
        return self.dropout_in_module(self.embed_tokens(tokens)), lengths, left

    def run_rnn(self, tokens: Tensor, h0: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """The bidirectional GRU over ``tokens [N, L]`` with initial state ``h0 [N, H]`` for
        both directions (zeros if ``None``): annotations ``[N, L, 2H]`` (zeros at padding, in
        the padding layout of ``tokens``), padding mask ``[N, L]`` and final states
        ``[2, N, H]`` (forward ``→h_N``, backward ``←h_1``)."""
        x, lengths, left = self.embedded(tokens)
        h, last = run_gru(self.rnn, x, lengths, None if h0 is None else h0.unsqueeze(0).expand(2, -1, -1))
        if left:
            h = to_left_padding(h, lengths)
        return h, tokens.eq(self.padding_idx), last

    def encoder_out(self, annotations: Tensor, padding_mask: Tensor, last: Tensor) -> Dict[str, Tensor]:
        annotations = self.dropout_out_module(annotations)
        real = ~padding_mask
        # U_a h_j + b_a of the real positions only (document runs pad their sources much)
        keys = annotations.new_zeros(*padding_mask.shape, self.attention_keys.out_features)
        keys = keys.index_put((real,), self.attention_keys(annotations[real]))
        return {"annotations": annotations, "keys": keys, "padding_mask": padding_mask, "final": last[1],
                "sentence": row_numbers(padding_mask.size(0), padding_mask.device)}

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        return self.encoder_out(*self.run_rnn(src_tokens))

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        """The rows in ``new_order``; unchanged when every row takes the place of a copy of
        itself (``sentence``: the encoder's row a row was copied from): beam search reorders
        the rows of each sentence's beams at every step, among copies of the same row."""
        sentence = encoder_out.get("sentence")
        if sentence is not None and moves_only_copies(sentence, new_order):
            return encoder_out
        return reorder_rows(encoder_out, new_order)

    def max_positions(self):
        return self.max_source_positions


def reorder_rows(d: Dict[str, Optional[Tensor]], new_order: Tensor) -> Dict[str, Optional[Tensor]]:
    """Every tensor of ``d`` (per-row, batch first) with its rows in ``new_order``."""
    return {k: (v.index_select(0, new_order) if isinstance(v, Tensor) else v) for k, v in d.items()}


def cut_positions(encoder_out: Dict[str, Tensor], mask_name: str, names) -> Tuple[Dict[str, Tensor], int, bool]:
    """``encoder_out`` with its entries ``names`` (``[N, S, ...]``, indexed by the positions
    of its padding mask ``mask_name [N, S]``) cut to the longest row of that mask, the width
    ``S`` before the cut and whether the rows are left-padded."""
    mask = encoder_out[mask_name]
    left = bool(mask[:, 0].any())
    width = int((~mask).sum(1).max())
    if width == mask.size(1):
        return encoder_out, width, left
    cut = slice(mask.size(1) - width, None) if left else slice(0, width)
    return {k: (v[:, cut] if k in names else v) for k, v in encoder_out.items()}, mask.size(1), left


# ----------------------------------------------------------------------------- decoder
class RNNSearchDecoder(FairseqIncrementalDecoder):
    """Conditional GRU decoder with feedback attention (see the module doc).

    Extension points (one target position ``t`` of rows ``N``; ``encoder_out`` as
    :class:`RNNSearchEncoder` returns it):

    * :meth:`start` ``(encoder_out) -> state``: the state before the first word, a dict of
      per-row tensors: ``s`` (``s_0 = tanh(`` :meth:`init_input` ``)``) and any per-sentence
      constant the steps read;
    * :meth:`step_inputs` ``(y, encoder_out) -> inputs``: what the steps read of the previous
      words ``y [N, T, E]``, for all steps at once (``[N, T, ...]`` each);
    * :meth:`attend` ``(s̃, state, encoder_out) -> ctx``: ``c`` (the context vector of the
      output layer), ``attn`` (the attention weights) and anything else the update reads;
    * :meth:`update` ``(s_prev, s̃, ctx, inputs_t, state, encoder_out) -> (s_t, extras)``:
      the new state and per-step values to report (``extras``: name -> ``[N, ...]``, stacked
      over the steps into the second output of :meth:`extract_features` as ``steps``).
    """

    #: the entries of the encoder output indexed by positions, by their padding mask: cut to
    #: the longest row of a group of rows (:meth:`teacher_forced`); a subclass adds its own
    position_entries = {"padding_mask": ("annotations", "keys", "padding_mask")}
    #: the per-step outputs indexed by those positions (by their padding mask): padded back
    #: to the full width after a cut
    position_outputs = {"attn": "padding_mask"}
    #: the attentions of a step, as the entries of the encoder output they read: (keys,
    #: values, padding mask), prepared once for all steps of a recurrence (:meth:`recur`:
    #: packed keys, the values' gradient summed over the steps); a subclass adds its own
    attentions = (("keys", "annotations", "padding_mask"),)
    #: the cost options of the length groups of a teacher-forced batch (:meth:`teacher_forced`,
    #: ``length_groups.length_buckets``): a group costs its padded positions plus the fixed cost
    #: of each of its steps (``step_overhead`` rows of work) and ``overhead`` positions
    grouping = {"overhead": 32, "step_overhead": 16}

    def __init__(self, dictionary, embed_tokens, hidden_size, context_dim, encoder_hidden_size,
                 attention_dim, out_embed_dim, output_activation="maxout", dropout_in=0.0,
                 dropout_out=0.5, share_input_output_embed=False, max_positions=DEFAULT_MAX_POSITIONS,
                 init_from="backward"):
        super().__init__(dictionary)
        if output_activation not in OUTPUT_ACTIVATIONS:
            raise UsageError(f"--decoder-output-activation: one of {', '.join(OUTPUT_ACTIVATIONS)}")
        if init_from not in DECODER_INITS:
            raise UsageError(f"--decoder-init: one of {', '.join(DECODER_INITS)}")
        E = embed_tokens.embedding_dim
        self.padding_idx = dictionary.pad()
        self.embed_tokens = embed_tokens
        self.hidden_size = hidden_size
        self.max_target_positions = max_positions
        self.need_attn = True
        self._prepared_keys = {}  # name -> (keys, padding mask, AttentionKeys): prepared_keys
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.init_from = init_from
        # W_s, b_s of s_0, reading ←h_1 [H_enc] or the annotations' mean [2 H_enc]
        self.init_state = nn.Linear(encoder_hidden_size if init_from == "backward" else context_dim, hidden_size)
        self.gru1 = nn.GRUCell(E, hidden_size)  # s̃_t = GRU_1(s_{t-1}, y_{t-1})
        self.attention_query = nn.Linear(hidden_size, attention_dim, bias=False)  # W_a
        self.attention_v = nn.Parameter(torch.empty(attention_dim).uniform_(-0.1, 0.1))  # v_a
        self.gru2 = nn.GRUCell(context_dim, hidden_size)  # s_t = GRU_2(s̃_t, c_t)
        # deep output t = f(U_o s_t + V_o y_{t-1} + C_o c_t); maxout pools pairs of units
        self.maxout = output_activation == "maxout"
        width = out_embed_dim * (2 if self.maxout else 1)
        self.out_state = nn.Linear(hidden_size, width)
        self.out_embed = nn.Linear(E, width, bias=False)
        self.out_context = nn.Linear(context_dim, width, bias=False)
        self.share_input_output_embed = share_input_output_embed
        if share_input_output_embed:
            if out_embed_dim != E:
                raise UsageError("--share-decoder-input-output-embed needs --decoder-out-embed-dim "
                                 "equal to --decoder-embed-dim")
            self.fc_out = None
        else:
            self.fc_out = nn.Linear(out_embed_dim, len(dictionary))

    # -------------------------------------------------------------- the extension points
    def start(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """``s_0 = tanh(`` :meth:`init_input` ``)``."""
        return {"s": torch.tanh(self.init_input(encoder_out))}

    def init_input(self, encoder_out: Dict[str, Tensor]) -> Tensor:
        """``W_s ←h_1 + b_s`` (Bahdanau et al. 2015, A.2.2: ``s_0 = tanh(W_s ←h_1)``) or, with
        ``--decoder-init mean``, ``W_s mean_j h_j + b_s`` over the real positions (Nematus)."""
        if self.init_from == "backward":
            return self.init_state(encoder_out["final"])
        real = (~encoder_out["padding_mask"]).unsqueeze(-1).to(encoder_out["annotations"])
        return self.init_state((encoder_out["annotations"] * real).sum(1) / real.sum(1))

    def step_inputs(self, y: Tensor, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """GRU_1's input projections of all previous words at once."""
        return {"gru1": cell_input(self.gru1, y)}

    def attend(self, s_tilde: Tensor, state: Dict[str, Tensor], encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """``c_t`` and ``α_t`` (Kuang & Xiong 2018, Eqs. 4-7: the attention queried with s̃_t)."""
        c, alpha = additive_attention(project(self.attention_query, s_tilde), encoder_out["keys"],
                                      encoder_out["annotations"], encoder_out["padding_mask"],
                                      self.attention_v)
        return {"c": c, "attn": alpha}

    def update(self, s_prev: Tensor, s_tilde: Tensor, ctx: Dict[str, Tensor], inputs: Dict[str, Tensor],
               state: Dict[str, Tensor], encoder_out: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``s_t = GRU_2(s̃_t, c_t)`` (Kuang & Xiong 2018, Eq. 8)."""
        return cell_step(self.gru2, cell_input(self.gru2, ctx["c"]), s_tilde), {}

    # -------------------------------------------------------------- the recurrence
    def prepared_keys(self, name: str, keys: Tensor, padding_mask: Tensor) -> AttentionKeys:
        """The :class:`~fairseq_docctx.modules.recurrence.AttentionKeys` of the encoder
        output's entry ``name``. Without autograd (beam search calls :meth:`recur` once per
        target position, with the same encoder output until a sentence is finished) the last
        one made for the same tensor is reused."""
        if torch.is_grad_enabled():
            return AttentionKeys(keys, padding_mask)
        last = self._prepared_keys.get(name)
        if last is None or last[0] is not keys or last[1] is not padding_mask:
            last = self._prepared_keys[name] = (keys, padding_mask, AttentionKeys(keys, padding_mask))
        return last[2]

    def step(self, inputs: Dict[str, Tensor], state: Dict[str, Tensor], encoder_out: Dict[str, Tensor]):
        """One target position: the new state and what it outputs (``s``, ``c``, ``attn`` and
        the update's extras)."""
        s_prev = state["s"]
        s_tilde = cell_step(self.gru1, inputs["gru1"], s_prev)  # Eq. 7
        ctx = self.attend(s_tilde, state, encoder_out)  # Eqs. 4-7
        s, extras = self.update(s_prev, s_tilde, ctx, inputs, state, encoder_out)  # Eq. 8
        return {**state, "s": s}, {"s": s, "c": ctx["c"], "attn": ctx["attn"], **extras}

    def recur(self, y: Tensor, state: Dict[str, Tensor], encoder_out: Dict[str, Tensor]):
        """The steps over the previous words ``y [N, T, E]`` from ``state``: the last state
        and the per-step outputs stacked, ``[N, T, ...]`` each."""
        per_step = {k: v.unbind(1) for k, v in self.step_inputs(y, encoder_out).items()}
        # the keys and values attended at every step, prepared once; the weights' gradients
        # summed over the steps (modules/recurrence)
        encoder_out = dict(encoder_out)
        for keys, values, mask in self.attentions:
            if keys in encoder_out:
                encoder_out[keys] = self.prepared_keys(keys, encoder_out[keys], encoder_out[mask])
                encoder_out[values] = AttendedValues(encoder_out[values])
        outs = {}
        with recurrence():
            for t in range(y.size(1)):
                state, out = self.step({k: v[t] for k, v in per_step.items()}, state, encoder_out)
                for k, v in out.items():
                    outs.setdefault(k, []).append(v)
        return state, {k: torch.stack(v, 1) for k, v in outs.items()}

    def teacher_forced(self, prev_output_tokens: Tensor, y: Tensor, encoder_out: Dict[str, Tensor]):
        """The per-step outputs ``[B, T, ...]`` (zeros at padding) of a whole target batch,
        run in groups of rows of similar target length (each cut to its longest target and
        source), so that sentences of very different lengths (document runs) cost little
        padding (:attr:`grouping` weighs the fixed cost of a step and of a group)."""
        pad = self.padding_idx
        if prev_output_tokens.size(0) == 1 or bool(prev_output_tokens[:, 0].eq(pad).any()):
            return self.recur(y, self.start(encoder_out), encoder_out)[1]  # one row / left-padded
        names = []

        def run(rows, width):
            eo, cuts = reorder_rows(encoder_out, rows), {}
            for mask_name, entries in self.position_entries.items():
                if mask_name in eo:
                    eo, *cuts[mask_name] = cut_positions(eo, mask_name, entries)
            steps = self.recur(y.index_select(0, rows)[:, :width], self.start(eo), eo)[1]
            for k, mask_name in self.position_outputs.items():
                if k in steps and mask_name in cuts:
                    full, left = cuts[mask_name]
                    extra = full - steps[k].size(-1)
                    steps[k] = F.pad(steps[k], [extra, 0] if left else [0, extra])
            names[:] = list(steps)
            return [steps[k] for k in names]

        outs = table_encoder.run_bucketed(prev_output_tokens.ne(pad).sum(1), prev_output_tokens.size(1), run,
                                          left_pad=False, **self.grouping)
        return dict(zip(names, outs))

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         positions: Optional[Tensor] = None, **kwargs):
        """Decoder outputs before the vocabulary projection, ``[B, T, out_embed_dim]`` (with
        ``positions [B, T]``: ``[R, out_embed_dim]`` at the R true positions only), and a
        dict with ``attn`` (``[[B, T, S]]`` when ``need_attn`` in eval mode, else ``[None]``)
        and ``steps`` (the per-step outputs, ``[B, T, ...]`` each)."""
        state = None
        if incremental_state is not None:
            state = self.get_incremental_state(incremental_state, "state")
            if state is not None:
                prev_output_tokens = prev_output_tokens[:, -1:]
        y = self.dropout_in_module(self.embed_tokens(prev_output_tokens))
        if incremental_state is not None:
            state, steps = self.recur(y, self.start(encoder_out) if state is None else state, encoder_out)
            self.set_incremental_state(incremental_state, "state", state)
        else:
            steps = self.teacher_forced(prev_output_tokens, y, encoder_out)
        s, c = steps["s"], steps["c"]
        if positions is not None:
            s, y, c = s[positions], y[positions], c[positions]
        x = self.deep_output(s, y, c)
        attn = steps["attn"] if self.need_attn and not self.training else None
        return x, {"attn": [attn], "steps": steps}

    def deep_output(self, s: Tensor, y: Tensor, c: Tensor) -> Tensor:
        """``t = f(U_o s_t + V_o y_{t-1} + C_o c_t)`` for all steps, then dropout."""
        t = self.out_state(s) + self.out_embed(y) + self.out_context(c)
        if self.maxout:
            t = t.view(*t.shape[:-1], -1, 2).amax(-1)
        else:
            t = torch.tanh(t)
        return self.dropout_out_module(t)

    def output_layer(self, features, **kwargs):
        if self.share_input_output_embed:
            return F.linear(features, self.embed_tokens.weight)
        return self.fc_out(features)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only=False, **kwargs):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return (x if features_only else self.output_layer(x)), extra

    def reorder_incremental_state(self, incremental_state, new_order):
        state = self.get_incremental_state(incremental_state, "state")
        if state is not None:
            self.set_incremental_state(incremental_state, "state", reorder_rows(state, new_order))

    def max_positions(self):
        return self.max_target_positions

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn


# ----------------------------------------------------------------------------- model
@register_model("rnnsearch")
class RNNSearchModel(FairseqEncoderDecoderModel):
    """RNNSearch with feedback attention (Bahdanau et al. 2015; Kuang & Xiong 2018, §3). A
    sentence-level model: through ``document_translation`` its batches carry no context."""

    encoder_class = RNNSearchEncoder
    decoder_class = RNNSearchDecoder
    #: a checkpoint written before ``--decoder-init`` existed was trained with ``s_0`` reading
    #: ``←h_1`` (:func:`~fairseq_docctx.models.document_context.apply_checkpoint_defaults`)
    checkpoint_defaults = {"decoder_init": "backward"}

    @staticmethod
    def add_args(parser):
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N", help="source embedding size")
        parser.add_argument("--encoder-hidden-size", type=int, metavar="N",
                            help="GRU size of each encoder direction (annotations: twice this)")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N", help="target embedding size")
        parser.add_argument("--decoder-hidden-size", type=int, metavar="N", help="decoder GRU size")
        parser.add_argument("--decoder-out-embed-dim", type=int, metavar="N",
                            help="size of the deep output layer (after the maxout)")
        parser.add_argument("--decoder-output-activation", choices=OUTPUT_ACTIVATIONS,
                            help="deep output non-linearity: maxout (Bahdanau et al. 2015) or tanh (Nematus)")
        parser.add_argument("--attention-dim", type=int, metavar="N",
                            help="hidden size of the attention network (default: decoder hidden size)")
        parser.add_argument("--share-decoder-input-output-embed", action="store_true",
                            help="share the decoder's input and output embeddings")
        parser.add_argument("--share-all-embeddings", action="store_true",
                            help="share encoder, decoder and output embeddings (joined dictionary, "
                            "same embedding sizes, --decoder-out-embed-dim = --decoder-embed-dim)")
        parser.add_argument("--dropout", type=float, metavar="D",
                            help="default of the four dropout options below")
        parser.add_argument("--encoder-dropout-in", type=float, metavar="D", help="on the source embeddings")
        parser.add_argument("--encoder-dropout-out", type=float, metavar="D", help="on the annotations")
        parser.add_argument("--decoder-dropout-in", type=float, metavar="D", help="on the target embeddings")
        parser.add_argument("--decoder-dropout-out", type=float, metavar="D", help="on the deep output layer")
        parser.add_argument("--rnn-init", choices=RNN_INITS,
                            help="initial weights of a new model: pytorch (each module's own) or bahdanau "
                            "(Bahdanau et al. 2015, B.1: orthogonal recurrent matrices, attention N(0, 0.001^2), "
                            "v_a and biases 0, other matrices N(0, 0.01^2))")
        parser.add_argument("--decoder-init", choices=DECODER_INITS,
                            help="what the decoder's initial state s_0 reads: backward (the backward RNN's last "
                            "state, Bahdanau et al. 2015) or mean (the mean of the annotations, Nematus)")
        for flag in UNSUPPORTED_FLAGS:  # fairseq's Transformer options, refused here with one line
            parser.add_argument(flag, action="store_true", help="not supported by the RNN models (refused): "
                                "fairseq's activation checkpointing wraps Transformer layers")

    @classmethod
    def build_embeddings(cls, args, task):
        """Source and target embedding tables (one shared table with --share-all-embeddings)."""
        src, tgt = task.source_dictionary, task.target_dictionary
        enc = Embedding(len(src), args.encoder_embed_dim, src.pad())
        if args.share_all_embeddings:
            if src != tgt:
                raise UsageError("--share-all-embeddings requires a joined dictionary")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise UsageError("--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim")
            args.share_decoder_input_output_embed = True
            return enc, enc
        return enc, Embedding(len(tgt), args.decoder_embed_dim, tgt.pad())

    @classmethod
    def build_model(cls, args, task):
        given = [f for f in UNSUPPORTED_FLAGS if getattr(args, f[2:].replace("-", "_"), False)]
        if given:
            arch = getattr(args, "arch", None) or "rnnsearch"
            raise UsageError(f"{arch} does not support {', '.join(given)}: fairseq's activation checkpointing "
                             "wraps Transformer layers (the RNN models' memory is their batch's states)")
        rnnsearch(args)
        enc_emb, dec_emb = cls.build_embeddings(args, task)
        encoder = cls.build_encoder(args, task.source_dictionary, enc_emb)
        decoder = cls.build_decoder(args, task.target_dictionary, dec_emb, encoder)
        model = cls(encoder, decoder)
        if getattr(args, "rnn_init", "pytorch") == "bahdanau":
            bahdanau_init(model)
        return model

    @classmethod
    def encoder_kwargs(cls, args):
        return dict(hidden_size=args.encoder_hidden_size, attention_dim=args.attention_dim,
                    dropout_in=args.encoder_dropout_in, dropout_out=args.encoder_dropout_out,
                    max_positions=getattr(args, "max_source_positions", DEFAULT_MAX_POSITIONS))

    @classmethod
    def build_encoder(cls, args, dictionary, embed_tokens):
        return cls.encoder_class(dictionary, embed_tokens, **cls.encoder_kwargs(args))

    @classmethod
    def decoder_kwargs(cls, args, encoder):
        return dict(hidden_size=args.decoder_hidden_size, context_dim=encoder.output_units,
                    encoder_hidden_size=encoder.hidden_size, attention_dim=args.attention_dim,
                    out_embed_dim=args.decoder_out_embed_dim,
                    output_activation=args.decoder_output_activation,
                    dropout_in=args.decoder_dropout_in, dropout_out=args.decoder_dropout_out,
                    share_input_output_embed=args.share_decoder_input_output_embed,
                    max_positions=getattr(args, "max_target_positions", DEFAULT_MAX_POSITIONS),
                    init_from=args.decoder_init)

    @classmethod
    def build_decoder(cls, args, dictionary, embed_tokens, encoder):
        return cls.decoder_class(dictionary, embed_tokens, **cls.decoder_kwargs(args, encoder))


# ----------------------------------------------------------------------------- context models
#: the name prefix of the parameters a context model of the family adds to ``rnnsearch``
CONTEXT_PREFIX = "context_"


def is_context_parameter(name: str) -> bool:
    """Whether a parameter of a context model of the family is one that a sentence-level
    ``rnnsearch`` lacks (a module or parameter named ``context_*`` on its path): the new
    weights when the model is initialised from a trained ``rnnsearch``."""
    return any(part.startswith(CONTEXT_PREFIX) for part in name.split("."))


class RNNSearchContextModel(DocumentContextModel, RNNSearchModel):
    """The base of the family's document-level models (``hrnn_context``, ``isg_rnnsearch``):
    ``rnnsearch`` whose encoder reads the batch's ``context`` (:mod:`~fairseq_docctx.models.
    document_context`). Both read previous *source* sentences only, so document runs buy
    nothing: batches group sentences by length like fairseq's translation task, each with its
    own context (``doc_batching = "sentences"``; its decoder then runs one group of similar
    lengths, where a batch of document runs needs several and trains slower: docs/
    benchmarks.md, "The RNN family"); the logits of the real target positions only in training
    (``packs_training_output``)."""

    doc_batching = "sentences"
    packs_training_output = True
    checkpoint_defaults = RNNSearchModel.checkpoint_defaults  # before DocumentContextModel's

    def current_word_macs(self) -> int:
        """Multiply-adds of the matrix products a word of a current sentence costs: a source
        word through the encoder plus a target word through the decoder and its output
        projection (one product per weight matrix; the context parameters left out)."""
        n = sum(p.numel() for name, p in self.named_parameters()
                if p.dim() == 2 and not is_context_parameter(name) and "embed_tokens" not in name)
        if self.decoder.share_input_output_embed:  # the output projection is the embedding matrix
            n += self.decoder.embed_tokens.weight.numel()
        return n

    def forward(self, src_tokens, src_lengths, prev_output_tokens, context=None, features_only=False, **kwargs):
        """In training mode the logits of the real target positions only, ``[1, R, V]``
        (``packed_positions`` in the extra dict; :meth:`get_targets`), else ``[B, T, V]``."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, context=context)
        if features_only or not self.training:
            return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)
        real = prev_output_tokens.ne(self.decoder.padding_idx)
        x, extra = self.decoder.extract_features(prev_output_tokens, encoder_out, positions=real)
        extra["packed_positions"] = real
        return self.decoder.output_layer(x).unsqueeze(0), extra

    @torch.no_grad()
    def decoder_steps(self, net_input, prev_output_tokens: Optional[Tensor] = None):
        """The encoder output and the decoder's per-step outputs (:meth:`RNNSearchDecoder.step`:
        ``s``, ``c``, ``attn`` and the update's extras, ``[B, T, ...]`` each, zeros at
        padding) of a batch (its ``net_input``) teacher-forced on its ``prev_output_tokens``
        or on those given. Eval mode, restored."""
        prev = net_input["prev_output_tokens"] if prev_output_tokens is None else prev_output_tokens
        was = self.training
        self.eval()
        try:
            encoder_out = self.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"],
                                       context=cb.get_context(net_input))
            _, extra = self.decoder(prev, encoder_out=encoder_out, features_only=True)
        finally:
            self.train(was)
        return encoder_out, extra["steps"]


@register_model_architecture("rnnsearch", "rnnsearch")
def rnnsearch(args):
    """RNNSearch as Kuang & Xiong (2018, §5.1) train it, with Bahdanau et al.'s (2015, A.2)
    sizes: embeddings 620, Bi-GRU 1000+1000, decoder 1000, attention 1000, maxout deep output
    500; dropout 0.5 on the output layer only; PyTorch's initialisation (``--rnn-init bahdanau``:
    Bahdanau et al.'s, B.1)."""
    set_defaults(args, encoder_embed_dim=620, encoder_hidden_size=1000)
    set_defaults(args, decoder_embed_dim=args.encoder_embed_dim, decoder_hidden_size=args.encoder_hidden_size,
                 decoder_out_embed_dim=500, decoder_output_activation="maxout")
    set_defaults(args, attention_dim=args.decoder_hidden_size, dropout=0.5)
    set_defaults(args, encoder_dropout_in=0.0, encoder_dropout_out=0.0, decoder_dropout_in=0.0,
                 decoder_dropout_out=args.dropout, share_all_embeddings=False,
                 share_decoder_input_output_embed=False, rnn_init="pytorch", decoder_init="backward")


@register_model_architecture("rnnsearch", "rnnsearch_nematus")
def rnnsearch_nematus(args):
    """The Nematus base of Wang et al. (2017, §3.1): embeddings 600, hidden 1000; Nematus'
    tanh readout of the embedding size, its attention of the annotations' size (2000) and its
    initial decoder state from the annotations' mean (``--decoder-init mean``, as in Wang et
    al.'s released code). Dropout as ``rnnsearch`` (Wang et al. do not state theirs)."""
    set_defaults(args, encoder_embed_dim=600, encoder_hidden_size=1000, decoder_init="mean")
    set_defaults(args, decoder_embed_dim=args.encoder_embed_dim, decoder_hidden_size=args.encoder_hidden_size)
    set_defaults(args, decoder_out_embed_dim=args.decoder_embed_dim, decoder_output_activation="tanh",
                 attention_dim=2 * args.encoder_hidden_size)
    rnnsearch(args)
