"""The language tokens of the pretrained families on data written by ``docctx-prepare
--pretrained``: which tokens the data's sentences or the task's batches carry, and where.

Two placements (the family's record, :class:`~fairseq_docctx.data.pretrained.PretrainedText`):

* ``prepend`` (m2m100, nllb, mbart50): every source and target sentence of the data starts
  with its language token; the target one is forced as the first output token, as fairseq's
  ``translation_multi_simple_epoch --decoder-langtok`` forces it (:meth:`LanguageTokens.
  prefix`), and a segment model forces it first in every sentence of a segment
  (:meth:`LanguageTokens.set_sentence_starts`).
* ``bart`` (mbart25): the data's sentences carry none; every batch the model reads gets the
  source token after the encoder input's ``</s>`` and the target token as the decoder's first
  input, and the search starts from it, as fairseq's ``translation_from_pretrained_bart``
  places them (:meth:`LanguageTokens.place`, :meth:`LanguageTokens.generate`).

A new family with one of these placements is a record in :mod:`fairseq_docctx.data.pretrained`;
nothing here changes.
"""
from typing import Optional, Tuple

import torch

from ..data.pretrained import PretrainedError, PretrainedText
from ..errors import CheckpointError, UsageError
from ..models.segment_model import SegmentModel


class LanguageTokens:
    """The language tokens of ``task``'s data (its ``cfg``, ``src_dict`` and ``tgt_dict``, read
    when asked); on data without them every answer is ``None`` (or empty) and batches stay as
    they are."""

    def __init__(self, task):
        self.task = task

    @property
    def text(self) -> Optional[PretrainedText]:
        """The raw text <-> tokens of a data folder written by ``docctx-prepare --pretrained``
        (the release's segmentation and the language tokens of its family), ``None`` for other
        data. Read once from the manifest of the first path of ``DATA``; a record that cannot
        be used is a :class:`UsageError` naming its file."""
        if not hasattr(self, "_text"):
            try:
                self._text = PretrainedText.of_data(getattr(self.task.cfg, "data", None))
            except PretrainedError as e:
                raise UsageError(str(e)) from None
        return self._text

    def set_text(self, text: Optional[PretrainedText]) -> None:
        """Use ``text`` as :attr:`text` (a model exported by ``docctx-export ctranslate2``
        carries its own copy of the release's segmentation and record, read when its folder
        is the data directory)."""
        self._text = text

    def index(self, symbol: Optional[str], side: str) -> Optional[int]:
        """The index of the language token ``symbol`` in the ``side`` (``"source"`` or
        ``"target"``) dictionary, ``None`` for no symbol. A token the dictionary lacks is a
        :class:`~fairseq_docctx.errors.CheckpointError` (a :class:`UsageError`) of one line:
        the data was prepared for another release."""
        if not symbol:
            return None
        d = self.task.src_dict if side == "source" else self.task.tgt_dict
        if symbol not in d.indices:
            raise CheckpointError(f"{self.task.cfg.data}: the {side} dictionary has no language token {symbol} "
                                  "(its docctx.json names it): prepare the data again")
        return d.index(symbol)

    def source(self) -> Optional[int]:
        """The index of the token every source sentence starts with (placement ``prepend``),
        else ``None``."""
        text = self.text
        return self.index(text and text.source_langtok, "source")

    def target(self) -> Optional[int]:
        """The index of the token every target sentence starts with (placement ``prepend``),
        else ``None``."""
        text = self.text
        return self.index(text and text.target_langtok, "target")

    def bart(self) -> Optional[Tuple[int, int]]:
        """mBART-25's ``(source token, target token)`` indices (placement ``bart``: the source
        token after the encoder input's ``</s>``, the target token as the decoder's first
        input), else ``None``. The data's sentences do not carry them: :meth:`place` puts them
        into each batch the model reads."""
        text = self.text
        if text is None or text.placement != "bart":
            return None
        return self.index(text.source_suffix, "source"), self.index(text.decoder_start, "target")

    def ids(self) -> Tuple[int, ...]:
        """The indices of all the language tokens the data's sentences or the task's batches
        carry (:meth:`source`, :meth:`target`, :meth:`bart`); empty on data without them."""
        toks = [self.source(), self.target(), *(self.bart() or ())]
        return tuple(sorted({t for t in toks if t is not None}))

    def place(self, sample):
        """``sample`` as the model reads it on mBART-25 data (:meth:`bart`): a copy whose
        encoder input ends ``</s> [src]`` (``src_tokens`` one column wider, ``src_lengths`` one
        more) and whose decoder input starts with ``[tgt]`` instead of ``</s>``; on other data
        ``sample`` itself. The context sentences HAN, QCN and MHT encode apart are left as they
        are (mBART-25 places its token in the input the encoder translates)."""
        toks = self.bart()
        if toks is None or sample is None or "net_input" not in sample:
            return sample
        src_tok, tgt_tok = toks
        ni = dict(sample["net_input"])
        src, lengths = ni["src_tokens"], ni["src_lengths"]
        wide = src.new_full((src.size(0), src.size(1) + 1), self.task.src_dict.pad())
        wide[:, :src.size(1)] = src
        if self.task.cfg.left_pad_source:
            wide[:, -1] = src_tok
        else:
            wide[torch.arange(src.size(0), device=src.device), lengths] = src_tok
        ni["src_tokens"], ni["src_lengths"] = wide, lengths + 1
        prev = ni.get("prev_output_tokens")
        if prev is not None:
            prev = prev.clone()
            prev[:, 0] = tgt_tok
            ni["prev_output_tokens"] = prev
        return {**sample, "net_input": ni}

    def generate(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's inference step (``generator.generate`` without gradients) on the batch as
        the model reads it (:meth:`place`); on mBART-25 data the search starts from the target
        language token (``bos_token``), as ``translation_from_pretrained_bart`` starts it."""
        toks = self.bart()
        with torch.no_grad():
            if toks is None:
                return generator.generate(models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
            return generator.generate(models, self.place(sample), prefix_tokens=prefix_tokens,
                                      constraints=constraints, bos_token=toks[1])

    def prefix(self, sample) -> Optional[torch.Tensor]:
        """The forced first output token of every row of ``sample``: the target language token
        (``[B, 1]``), or ``None`` for data without it."""
        tok = self.target()
        if tok is None:
            return None
        src = sample["net_input"]["src_tokens"]
        return torch.full((src.size(0), 1), tok, dtype=src.dtype, device=src.device)

    def generator_kwargs(self, kwargs: dict) -> dict:
        """fairseq's ``build_generator`` keyword arguments with the target language token among
        the generator's ``symbols_to_strip_from_output`` (left out of fairseq-generate's H-/D-
        lines, as ``translation_multi_simple_epoch`` does); ``kwargs`` itself on data without
        it."""
        tok = self.target()
        if tok is None:
            return kwargs
        extra = dict(kwargs.get("extra_gen_cls_kwargs") or {})
        extra["symbols_to_strip_from_output"] = set(extra.get("symbols_to_strip_from_output") or ()) | {tok}
        return {**kwargs, "extra_gen_cls_kwargs": extra}

    def set_sentence_starts(self, models) -> None:
        """Give the segment models the language tokens every sentence of a segment starts with
        (:meth:`~fairseq_docctx.models.segment_model.SegmentModel.set_sentence_start`: the target
        one forced first in every output sentence; ``None`` on other data). A model decoding
        segments that does not place them (e.g. a sentence-level ``transformer`` with
        ``--doc-mode segments``) is refused on data with language tokens (one line): it would
        place the token in the first sentence only."""
        src_tok, tgt_tok = self.source(), self.target()
        for m in models:
            if isinstance(m, SegmentModel) and m.places_sentence_start:
                m.set_sentence_start(src_tok, tgt_tok)
            elif tgt_tok is not None:
                raise UsageError(f"--doc-mode segments: {self.task.cfg.data} is data of a pretrained "
                                 f"{self.text.family} model with language tokens, which every "
                                 f"sentence of a segment starts with; {type(m).__name__} does not place them "
                                 "(doc2doc_transformer and g_transformer do): decode it with --doc-mode sentences "
                                 "(and --context-override if it was trained on segments)")
