"""Document-to-document Transformers over segments: ``doc2doc_transformer`` and ``g_transformer``.

A *segment* is n >= 1 consecutive sentences of one document, on both sides joined by the
task's separator (``--context-separator``, default ``<sep>``)::

    source:             s_1 <sep> s_2 <sep> ... <sep> s_n </s>
    prev_output_tokens: </s> t_1 <sep> t_2 ... <sep> t_n

* ``doc2doc_transformer``: a plain Transformer over the segments, the document-to-document
  baseline of Sun, Wang, Zhou, Zhao, Huang, Chen & Li (2022, "Rethinking Document-level Neural
  Machine Translation", Findings of ACL).
* ``g_transformer``: the G-Transformer of Bao, Zhang, Teng, Chen & Luo (2021, "G-Transformer
  for Document-level Machine Translation", ACL, §4): group attention (every token attends to
  its own sentence only: encoder self-attention, causal decoder self-attention, and target
  sentence i to source sentence i) in every layer, combined with global attention through a
  gate in the top ``--encoder-ctxlayers`` / ``--decoder-ctxlayers`` / ``--cross-ctxlayers``
  layers (:mod:`fairseq_docctx.modules.group_attention`), and source/decoder-input tokens
  masked at random in the first epochs of training (``--doc-noise-mask``,
  ``--doc-noise-epochs``).

Both keep every sentence at inference: the encoder output carries each row's number of source
sentences n (``src_sentences``) and the length of each source sentence
(``src_sentence_lengths``), both reordered with the beams, and in incremental decoding
(fairseq's ``SequenceGenerator``) the decoder

* forbids the end of the segment while the hypothesis has fewer than n - 1 separators and a
  separator once it has n - 1, so a finished hypothesis has exactly n sentences unless fairseq
  forces the end at its maximum length (``set_sentence_count_constraint(False)`` turns this
  off);
* gives output sentence i the length window of the G-Transformer authors' decoder
  (``force_length`` in their ``sequence_generator.py``): its end (the separator, or ``</s>``
  for the last sentence) is forbidden before ``min_len`` tokens (fairseq's ``--min-len``, 0
  for an empty source sentence) and forced after ``int(a |s_i| + b)`` tokens (a = 1.2,
  b = 10 by default, the authors' run values; :class:`~fairseq_docctx.data.segments.
  LengthWindow`; ``set_sentence_length_window(False)`` turns this off, and so does turning
  the sentence count off);
* on data with language tokens (``docctx-prepare --pretrained`` of a family that puts the
  target language token first in every sentence), forces that token first in every output
  sentence, as the segments were trained, and nowhere else (``set_sentence_start``); the
  language tokens count in no sentence's length.

Training and teacher-forced scoring are unaffected.

Neither reads the task's context tables: for the document-context contract
(:mod:`fairseq_docctx.models.document_context`) they are sentence-level models (their
whole input is the segment); they are segment models
(:class:`~fairseq_docctx.models.segment_model.SegmentModel`: their rows are segments).
Both take ``--init-from-sentence-checkpoint`` (every weight of a sentence-level
``transformer`` of the same name and shape; :mod:`fairseq_docctx.models.sentence_init`).
"""
import functools
import logging
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)

from ..data.segments import LengthWindow, sentence_lengths
from ..errors import UsageError
from ..modules.beam_rows import moves_only_copies, row_numbers
from ..modules.group_attention import (
    GroupAttention,
    build_group_layer,
    group_blocked,
    group_masks,
    sentence_counts,
    source_groups,
    target_groups,
)
from ..modules.kv_cache import (PreallocatedKVAttention, PreallocatedKVDecoderLayer, giving_encoder_rows,
                                set_preallocated, wrap_layer)
from . import pretrained_init, sentence_init
from .arch_defaults import set_defaults
from .segment_model import SegmentModel

logger = logging.getLogger(__name__)


#: the logit of the end of segment while sentences are missing: finite, so that fairseq's
#: SequenceGenerator can still force the end at its maximum length (an end at -inf there
#: leaves no finite candidate and the search fails)
EOS_FORBIDDEN = -1e4


def separator_indices(task, name: str):
    """``(source, target)`` dictionary indices of the task's separator
    (``task.cfg.context_separator``, default ``<sep>``); a dictionary without it is an error."""
    sep = getattr(getattr(task, "cfg", None), "context_separator", None) or "<sep>"
    for side, d in (("source", task.source_dictionary), ("target", task.target_dictionary)):
        if sep not in d.indices:
            raise UsageError(f"{name}: the {side} dictionary has no separator {sep!r} (the task's "
                             "--context-separator), which joins the sentences of a segment: prepare "
                             "the data with docctx-prepare or use --task document_translation")
    return task.source_dictionary.index(sep), task.target_dictionary.index(sep)


class SegmentEncoder(TransformerEncoderBase):
    """fairseq's Transformer encoder whose output also carries ``src_sentences`` ``[B]``, each
    row's number of source sentences, ``src_sentence_lengths`` ``[B, N]``, the tokens of
    each of its sentences (:func:`~fairseq_docctx.data.segments.sentence_lengths`), and
    ``src_rows`` ``[B]``, the encoder row each row is a copy of (all three reordered with the
    beams). A reordering that sends every row to a copy of itself, as beam search's does at
    every step among one segment's beams, returns the output as it is instead of copying a
    segment's ``[S, B, C]`` encoder output and embeddings
    (:mod:`~fairseq_docctx.modules.beam_rows`)."""

    #: output keys of per-row tensors (batch first) added to fairseq's, reordered with it
    ROW_KEYS = ("src_sentences", "src_sentence_lengths", "src_rows")

    def __init__(self, cfg, dictionary, embed_tokens, sep_idx: Optional[int] = None):
        super().__init__(cfg, dictionary, embed_tokens)
        self.sep_idx = sep_idx
        #: the token every source sentence starts with (the source language token of data
        #: with language tokens), not counted in the sentences' lengths (a setting)
        self.sentence_start: Optional[int] = None

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        out = self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["src_sentences"] = [sentence_counts(src_tokens, self.sep_idx)]
        d = self.dictionary
        out["src_sentence_lengths"] = [sentence_lengths(src_tokens, self.sep_idx, d.pad(), d.eos(),
                                                        self.sentence_start)]
        out["src_rows"] = [row_numbers(src_tokens.size(0), src_tokens.device)]
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        rows = encoder_out.get("src_rows")
        if rows and moves_only_copies(rows[0], new_order):
            return encoder_out
        new = super().reorder_encoder_out(encoder_out, new_order)
        for key in self.ROW_KEYS:
            if key in encoder_out:
                new[key] = [t.index_select(0, new_order) for t in encoder_out[key]]
        return new


#: an ``alignment_layer`` that is none of the decoder's layers (fairseq's decoder then asks no
#: layer for its attention weights and returns none)
NO_LAYER = -1


class SegmentDecoder(TransformerDecoderBase):
    """fairseq's Transformer decoder that, in incremental decoding, keeps the number of
    sentences of each hypothesis to the source's n and each output sentence to its length
    window (the module doc)."""

    def __init__(self, cfg, dictionary, embed_tokens, sep_idx: Optional[int] = None, no_encoder_attn: bool = False):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.sep_idx = sep_idx
        #: the sentence-count constraint of incremental decoding (a setting, not a cache)
        self.keep_sentence_count = True
        #: the length window of every output sentence within it (a setting; ``None``: none)
        self.length_window: Optional[LengthWindow] = LengthWindow()
        #: the token every output sentence starts with (the target language token of data with
        #: language tokens; a setting, ``None``: none): forced first in every sentence in
        #: incremental decoding, and not counted in its length
        self.sentence_start: Optional[int] = None
        #: return the last layer's encoder-decoder attention in incremental decoding (a
        #: setting; off: fairseq's generator keeps and reorders a ``[B, S, T]`` attention
        #: buffer at every step, O(S·T) per row and step on a segment, that only a caller
        #: reading the hypotheses' ``attention`` needs; translations are the same either way)
        self.search_attention = False

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        """fairseq's decoder layer with a self-attention that keeps incremental decoding's keys
        and values in preallocated buffers (:mod:`fairseq_docctx.modules.kv_cache`; same
        weights), wrapped as fairseq wraps its layers."""
        return wrap_layer(PreallocatedKVDecoderLayer(cfg, no_encoder_attn), cfg)

    def forward(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                features_only: bool = False, full_context_alignment: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None,
                src_lengths=None, return_all_hiddens: bool = False):
        rows = None
        if incremental_state is not None:
            if not self.search_attention and alignment_layer is None:
                alignment_layer = NO_LAYER  # no layer computes or returns attention weights
            rows = (encoder_out or {}).get("src_rows")
        with giving_encoder_rows(self._encoder_attentions if rows else (), rows[0] if rows else None):
            x, extra = super().forward(prev_output_tokens, encoder_out=encoder_out,
                                       incremental_state=incremental_state, features_only=features_only,
                                       full_context_alignment=full_context_alignment,
                                       alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                                       src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        if incremental_state is not None and not features_only and (
                self.keep_sentence_count or self.sentence_start is not None):
            current = self._current_sentence(prev_output_tokens)  # once a step, for both rules
            if self.keep_sentence_count:
                x = self.constrain_sentence_count(x, prev_output_tokens, encoder_out, current)
            if self.sentence_start is not None:
                x = self.force_sentence_start(x, prev_output_tokens, current)
        return x, extra

    @functools.cached_property
    def _encoder_attentions(self) -> List[PreallocatedKVAttention]:
        """The encoder-decoder attentions that can share their keys among row copies."""
        return [m for m in self.modules() if isinstance(m, PreallocatedKVAttention) and m.encoder_decoder_attention]

    def _current_sentence(self, prev_output_tokens: Tensor):
        """``(is_sep [B, L], m [B])``: which history positions are separators (not the
        initial ``</s>``), and how many tokens the current sentence has (those after the last
        separator, or after the start)."""
        is_sep = prev_output_tokens.eq(self.sep_idx)
        is_sep[:, 0] = False  # the initial </s>
        width = prev_output_tokens.size(1)
        positions = torch.arange(width, device=is_sep.device)
        return is_sep, (width - 1) - (is_sep * positions).amax(1)

    def force_sentence_start(self, logits: Tensor, prev_output_tokens: Tensor, current=None) -> Tensor:
        """``logits`` with the :attr:`sentence_start` token forced at the last position of the
        rows whose current sentence has no token yet (the first step, and the step after a
        separator): every other token at -inf there, as fairseq's multilingual task forces the
        language token first (``--decoder-langtok``), here in every sentence of the segment,
        as the segments of such data were trained; and at -inf everywhere else in the
        sentence, so that every token the length window counts is one of the sentence's own.
        Set in place. ``current``: :meth:`_current_sentence` of the history, if computed."""
        _, m = current if current is not None else self._current_sentence(prev_output_tokens)
        last, tok = logits[:, -1], self.sentence_start
        first = m.eq(0)
        kept = last[:, tok].masked_fill(~first, float("-inf"))
        rows = first.nonzero().squeeze(1)
        if rows.numel():
            last[rows] = float("-inf")
        last[:, tok] = kept
        return logits

    def constrain_sentence_count(self, logits: Tensor, prev_output_tokens: Tensor, encoder_out,
                                 current=None) -> Tensor:
        """``logits`` ``[B, T, V]`` with its last position constrained given the history
        ``prev_output_tokens`` ``[B, L]`` (position 0 the initial ``</s>``), whose k separators
        put it in sentence k + 1 of the source's n:

        * the end of segment (``</s>``) at :data:`EOS_FORBIDDEN` while k < n - 1, the separator
          at -inf once k = n - 1;
        * with a length window (:attr:`length_window`), when the current sentence has m tokens
          and its source sentence's window is [lo, hi]: its end (the separator while k < n - 1,
          else ``</s>``) forbidden as above while m < lo, and forced once m >= hi (every other
          token at -inf; ``</s>`` stays at :data:`EOS_FORBIDDEN` when the end is the
          separator, so that fairseq can still end there at its maximum length).

        The columns are set in place (the logits are the output layer's fresh tensor): two
        columns for every row and whole rows only for the forced ones, no ``[B, V]`` mask.
        ``current``: :meth:`_current_sentence` of the history, if computed."""
        if encoder_out is None or "src_sentences" not in encoder_out:
            raise ValueError(f"{type(self).__name__}: the encoder output has no src_sentences "
                             "(the sentence-count constraint needs the segment encoder's output)")
        n = encoder_out["src_sentences"][0]
        is_sep, m = current if current is not None else self._current_sentence(prev_output_tokens)
        if self.sentence_start is not None:  # the forced start token is not one of the sentence's
            m = (m - 1).clamp(min=0)
        seps = is_sep.sum(1)
        more = seps < n - 1  # [B]: sentences still to come
        last, eos, sep = logits[:, -1], self.dictionary.eos(), self.sep_idx
        eos_off, sep_off, forced = more, ~more, None
        window = self.length_window
        if window is not None:
            lengths = encoder_out.get("src_sentence_lengths")
            if lengths is None:
                raise ValueError(f"{type(self).__name__}: the encoder output has no src_sentence_lengths "
                                 "(the sentence length window needs the segment encoder's output)")
            lengths = lengths[0]
            # the current sentence (never past n - 1 with the count rule; clamped for safety)
            k = seps.clamp(max=lengths.size(1) - 1).unsqueeze(1)
            lo, hi = window.bounds(lengths.gather(1, k).squeeze(1))
            early = m < lo
            eos_off, sep_off, forced = more | early, ~more | early, m >= hi
        # two columns of the last position, set in place: no [B, 1, V] mask, no copy of the logits
        last[:, eos] = last[:, eos].masked_fill(eos_off, EOS_FORBIDDEN)
        last[:, sep] = last[:, sep].masked_fill(sep_off, float("-inf"))
        if forced is not None and bool(forced.any()):
            rows = forced.nonzero().squeeze(1)
            end = torch.where(more[rows], sep, eos)
            kept_end, kept_eos = last[rows, end], last[rows, eos]
            last[rows] = float("-inf")
            last[rows, eos] = kept_eos
            last[rows, end] = kept_end
        return logits


class SegmentModelMixin(SegmentModel):
    """What both segment models share: the segment-model interface implemented inside
    fairseq's search (:class:`~fairseq_docctx.models.segment_model.SegmentModel`: the sentence
    count, the length windows, the sentence-start tokens, the key/value buffers), and the
    building of their encoder and decoder (the classes ``encoder_class`` and
    ``decoder_class`` name)."""

    places_sentence_start = True
    encoder_class = None  # a SegmentEncoder
    decoder_class = None  # a SegmentDecoder

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return cls.encoder_class(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return cls.decoder_class(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def set_sentence_count_constraint(self, on: bool = True):
        """Whether incremental decoding keeps every hypothesis to the source's number of
        sentences (on by default)."""
        self.decoder.keep_sentence_count = bool(on)
        return self

    @property
    def keeps_sentence_count(self) -> bool:
        return bool(self.decoder.keep_sentence_count)

    def set_preallocated_kv_cache(self, on: bool = True):
        """Incremental decoding keeps the decoder self-attentions' keys and values in
        preallocated buffers (``True``, the default: O(1) copying per step, reordered along the
        beams only where the order changes; :mod:`fairseq_docctx.modules.kv_cache`) or in
        fairseq's cache (``False``: ``torch.cat`` of the whole cache every step and
        ``index_select`` of it at every reordering). Both give the same hypotheses and scores
        (tests/test_kv_cache.py). Set it between searches."""
        set_preallocated(self.decoder, on)
        return self

    def set_search_attention(self, on: bool = True):
        """Incremental decoding returns the last decoder layer's attention over the source
        (``True``: fairseq's generator then gives every hypothesis its ``attention``
        ``[S, T]``) or none (``False``, the default: the hypotheses' ``attention`` is empty,
        and the search neither computes the weights nor reorders fairseq's ``[B, S, T]``
        attention buffer at every step). Translations and scores are the same either way;
        no command reads the search's attention of a segment (the task refuses
        ``--print-alignment`` with ``--doc-mode segments``)."""
        self.decoder.search_attention = bool(on)
        return self

    @property
    def preallocated_kv_cache(self) -> bool:
        """Whether incremental decoding uses the preallocated key/value buffers."""
        return all(m.preallocated for m in self.decoder.modules() if isinstance(m, PreallocatedKVAttention))

    def set_sentence_length_window(self, window: Optional[LengthWindow] = LengthWindow()):
        """The length window of every output sentence in incremental decoding (the authors'
        by default; ``None`` or ``False``: none). It acts with the sentence-count constraint
        only: sentence i's window is that of source sentence i."""
        self.decoder.length_window = window if isinstance(window, LengthWindow) else None
        return self

    def set_sentence_start(self, source: Optional[int] = None, target: Optional[int] = None):
        """The tokens every source and every target sentence of a segment starts with (the
        language tokens of data written by ``docctx-prepare --pretrained`` for a family that
        prepends them; ``None``: none): incremental decoding forces the target one first in
        every output sentence, and neither counts in a sentence's length (its window, the
        empty-sentence check)."""
        self.encoder.sentence_start, self.decoder.sentence_start = source, target
        return self

    @property
    def sentence_length_window(self) -> Optional[LengthWindow]:
        """The window incremental decoding applies: ``None`` when off, or when the sentence
        count is not kept (the window needs it)."""
        return self.decoder.length_window if self.decoder.keep_sentence_count else None

    @classmethod
    def _build(cls, args, task, name: str, is_new_weight):
        src_sep, tgt_sep = separator_indices(task, name)
        model = super().build_model(args, task)
        model.encoder.sep_idx, model.decoder.sep_idx = src_sep, tgt_sep
        return sentence_init.apply(model, args, name, is_context=is_new_weight)


@register_model("doc2doc_transformer")
class Doc2DocTransformerModel(SegmentModelMixin, TransformerModel):
    """A plain Transformer over segments (Sun et al. 2022: document-to-document
    translation), keeping every sentence at inference (the module doc)."""

    encoder_class, decoder_class = SegmentEncoder, SegmentDecoder

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "doc2doc_transformer")
        doc2doc_base(args)
        if args.freeze_sentence_weights:
            raise UsageError("doc2doc_transformer: --freeze-sentence-weights would freeze every weight "
                             "(all of them are a sentence-level transformer's)")
        return cls._build(args, task, "doc2doc_transformer", is_new_weight=lambda name: False)



class GroupEncoder(SegmentEncoder):
    """The G-Transformer encoder (Bao et al. 2021, §4): group self-attention in every layer,
    combined with global attention in the top ``--encoder-ctxlayers``; its output also
    carries the source group tags ``src_groups`` ``[B, S]``."""

    ROW_KEYS = SegmentEncoder.ROW_KEYS + ("src_groups",)

    def __init__(self, cfg, dictionary, embed_tokens, sep_idx: Optional[int] = None):
        self._layers_built = 0  # the index of the next layer build_encoder_layer builds
        super().__init__(cfg, dictionary, embed_tokens, sep_idx)
        del self._layers_built

    def build_encoder_layer(self, cfg):
        i, self._layers_built = self._layers_built, self._layers_built + 1
        return build_group_layer(cfg, decoder=False, index=i, num_layers=cfg.encoder.layers)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        groups = source_groups(src_tokens, self.sep_idx, self.padding_idx)
        with group_masks(self, {"self": group_blocked(groups, groups)}):
            out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["src_groups"] = [groups]
        return out


class GroupDecoder(SegmentDecoder):
    """The G-Transformer decoder (Bao et al. 2021, §4): group self-attention (causal) and
    group encoder-decoder attention (target sentence i to source sentence i) in every layer,
    each combined with global attention in the top ``--decoder-ctxlayers`` /
    ``--cross-ctxlayers``. In incremental decoding the new position's group is 1 + the
    separators of the history (positions 1..L-1)."""

    def __init__(self, cfg, dictionary, embed_tokens, sep_idx: Optional[int] = None, no_encoder_attn: bool = False):
        if no_encoder_attn:
            raise UsageError("g_transformer: --no-cross-attention is not supported")
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, sep_idx, no_encoder_attn=False)
        del self._layers_built

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        i, self._layers_built = self._layers_built, self._layers_built + 1
        return build_group_layer(cfg, decoder=True, index=i, num_layers=cfg.decoder.layers,
                                 no_encoder_attn=no_encoder_attn)

    def extract_features(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                         incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        if encoder_out is None or "src_groups" not in encoder_out:
            raise ValueError("g_transformer: the decoder needs the G-Transformer encoder's output (src_groups)")
        groups = target_groups(prev_output_tokens, self.sep_idx, self.padding_idx)
        query = groups[:, -1:] if incremental_state is not None else groups
        # a target sentence beyond the source's n (only when the sentence-count constraint is
        # off) attends to the last source sentence, so its attention row is never empty
        n = encoder_out["src_sentences"][0].unsqueeze(1)
        cross_query = torch.minimum(query, n)
        masks = {"self": group_blocked(query, groups),
                 "cross": group_blocked(cross_query, encoder_out["src_groups"][0])}
        with group_masks(self, masks):
            return super().extract_features(prev_output_tokens, encoder_out=encoder_out,
                                            incremental_state=incremental_state,
                                            full_context_alignment=full_context_alignment,
                                            alignment_layer=alignment_layer, alignment_heads=alignment_heads)


def _is_g_weight(name: str) -> bool:
    """The weights a sentence-level transformer lacks: the global attentions and gates."""
    return ".global_attn." in name or ".gate." in name


@register_model("g_transformer")
class GTransformerModel(SegmentModelMixin, TransformerModel):
    """G-Transformer (Bao et al. 2021): the module doc."""

    encoder_class, decoder_class = GroupEncoder, GroupDecoder

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--encoder-ctxlayers", type=int, metavar="N",
                            help="the top N encoder layers combine group and global self-attention "
                            "(the rest: group attention only; 0: group attention everywhere)")
        parser.add_argument("--decoder-ctxlayers", type=int, metavar="N",
                            help="the top N decoder layers combine group and global self-attention")
        parser.add_argument("--cross-ctxlayers", type=int, metavar="N",
                            help="the top N decoder layers combine group and global encoder-decoder attention")
        parser.add_argument("--doc-noise-mask", type=float, metavar="P",
                            help="training: replace each word of the source and of the decoder input by "
                            "<mask> (<unk> where the dictionary has no <mask>) with probability P")
        parser.add_argument("--doc-noise-epochs", type=int, metavar="N",
                            help="apply --doc-noise-mask in the epochs before epoch N")
        parser.add_argument("--global-attn-init", choices=["group", "random"],
                            help="with --init-from-sentence-checkpoint or --init-from-pretrained: the global attentions start as "
                            "copies of the group attentions the checkpoint gives (group) or at random")
        sentence_init.add_args(parser)
        pretrained_init.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        pretrained_init.configure(args, task, "g_transformer")
        g_transformer_base(args)
        # the architecture's default (not given: pretrained_init's rule) is bounded by the
        # network's depth, e.g. the layers of an --init-from-pretrained checkpoint; a value given is not
        defaults, bounded = pretrained_init.architecture_defaults(args.arch), []
        for side in ("encoder", "decoder", "cross"):
            n = getattr(args, f"{side}_ctxlayers")
            layers = args.encoder_layers if side == "encoder" else args.decoder_layers
            if n > layers and n == defaults.get(f"{side}_ctxlayers"):
                setattr(args, f"{side}_ctxlayers", layers)
                bounded.append(f"--{side}-ctxlayers {layers} (default {n})")
            elif not 0 <= n <= layers:
                raise UsageError(f"g_transformer: --{side}-ctxlayers {n} must be between 0 and the "
                                 f"{'encoder' if side == 'encoder' else 'decoder'}'s {layers} layers")
        if bounded:
            line = (f"g_transformer: {', '.join(bounded)}: the default is deeper than the network, "
                    "combined attention in all its layers")
            print(line, flush=True)
            logger.info(line)
        if not 0 <= args.doc_noise_mask < 1:
            raise UsageError(f"g_transformer: --doc-noise-mask {args.doc_noise_mask} must be in [0, 1)")
        path = getattr(args, "init_from_sentence_checkpoint", None) or getattr(args, "init_from_pretrained", None)
        fresh = bool(path) and not sentence_init.restore_path(args)
        model = cls._build(args, task, "g_transformer", is_new_weight=_is_g_weight)
        if fresh and args.global_attn_init == "group":
            model.copy_group_to_global()
        return model

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.doc_noise_mask = float(getattr(args, "doc_noise_mask", 0.0) or 0.0)
        self.doc_noise_epochs = int(getattr(args, "doc_noise_epochs", 0) or 0)
        self.epoch = 1  # fairseq counts epochs from 1; the task sets it (set_epoch)
        #: the data's language tokens, never masked (set by the task: set_language_tokens)
        self.language_tokens: Tuple[int, ...] = ()

    def copy_group_to_global(self):
        """Every global attention starts as a copy of its layer's group attention."""
        for m in self.modules():
            if isinstance(m, GroupAttention) and m.combined:
                own = {k: v for k, v in m.state_dict().items() if not k.startswith(("global_attn.", "gate."))}
                m.global_attn.load_state_dict(own)

    def set_language_tokens(self, tokens) -> None:
        """The indices of the data's language tokens (of a pretrained release's data), which
        the word masking of ``--doc-noise-mask`` leaves as they are: the authors' noise skips
        the symbols their mBART task appends (``naddition``)."""
        self.language_tokens = tuple(int(t) for t in tokens)

    def set_epoch(self, epoch: int):
        """The training epoch (fairseq's, from 1), which decides ``--doc-noise-epochs``; the
        task calls it at the start of every epoch (fairseq's trainer does not)."""
        super().set_epoch(epoch)
        self.epoch = int(epoch)

    @property
    def doc_noise_active(self) -> bool:
        """Training with word masking this epoch: epochs before ``--doc-noise-epochs``
        (the authors' condition ``epoch < doc_noise_epochs``)."""
        return self.training and self.doc_noise_mask > 0 and self.epoch < self.doc_noise_epochs

    def add_doc_noise(self, tokens: Tensor, dictionary, sep_idx: int) -> Tensor:
        """``tokens`` with each word (not a special symbol, not the separator, so the group
        tags are unchanged) replaced by ``<mask>`` (``<unk>`` without one) with probability
        ``--doc-noise-mask``; the language tokens (:meth:`set_language_tokens`) are kept."""
        mask_idx = dictionary.indices.get("<mask>", dictionary.unk())
        word = tokens.ge(dictionary.nspecial) & tokens.ne(sep_idx) & tokens.ne(mask_idx)
        for tok in self.language_tokens:
            word &= tokens.ne(tok)
        drop = torch.rand(tokens.shape, device=tokens.device) < self.doc_noise_mask
        return tokens.masked_fill(word & drop, mask_idx)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None):
        """fairseq's forward; in training during the noise epochs the source and the decoder
        input have words masked (the targets are not)."""
        if self.doc_noise_active:
            src_tokens = self.add_doc_noise(src_tokens, self.encoder.dictionary, self.encoder.sep_idx)
            prev_output_tokens = self.add_doc_noise(prev_output_tokens, self.decoder.dictionary,
                                                    self.decoder.sep_idx)
        return super().forward(src_tokens, src_lengths, prev_output_tokens, return_all_hiddens=return_all_hiddens,
                               features_only=features_only, alignment_layer=alignment_layer,
                               alignment_heads=alignment_heads)


# architectures

@register_model_architecture("doc2doc_transformer", "doc2doc_transformer")
def doc2doc_base(args):
    """Transformer base over segments (Sun et al. 2022's document-to-document baseline)."""
    sentence_init.set_defaults(args)
    base_architecture(args)


@register_model_architecture("doc2doc_transformer", "doc2doc_transformer_iwslt_de_en")
def doc2doc_iwslt_de_en(args):
    """fairseq's ``transformer_iwslt_de_en`` sizes over segments."""
    sentence_init.set_defaults(args)
    transformer_iwslt_de_en(args)


def _g_defaults(args):
    """The authors' G-Transformer settings (Bao et al. 2021; their ``exp_gtrans/run-randinit.sh``):
    combined attention in the top 2 layers of each kind, words masked with p = 0.3 in the
    first 30 epochs, dropout 0.3. The fine-tuning defaults are ours: ``--global-attn-init
    group`` (the authors' ``run-finetune.sh`` starts the global attentions at random: give
    ``random``) and one learning rate (:func:`sentence_init.set_defaults`; theirs:
    ``--lr-scale-pretrained 0.2``)."""
    set_defaults(args, encoder_ctxlayers=2, decoder_ctxlayers=2, cross_ctxlayers=2,
                 doc_noise_mask=0.3, doc_noise_epochs=30, global_attn_init="group", dropout=0.3)
    sentence_init.set_defaults(args)


@register_model_architecture("g_transformer", "g_transformer")
def g_transformer_base(args):
    """Transformer base (512/2048, 8 heads, 6+6 layers) with the authors' settings."""
    _g_defaults(args)
    base_architecture(args)


@register_model_architecture("g_transformer", "g_transformer_iwslt_de_en")
def g_transformer_iwslt_de_en(args):
    """fairseq's ``transformer_iwslt_de_en`` sizes (512/1024, 4 heads) with the authors' settings."""
    _g_defaults(args)
    transformer_iwslt_de_en(args)
