"""The ``document_translation`` task: fairseq's ``translation`` plus document context.

With ``--context-size 0`` (or ``--context-sides none``) it is exactly fairseq's translation
task: same datasets, same batches, same loss. Otherwise every batch also carries the K
previous sentences of each sentence (see :mod:`fairseq_docctx.data.document_dataset`; the
layout: :mod:`fairseq_docctx.data.context_batch`). What a model reads of it, and how it wants
its batches, is its contract (:mod:`fairseq_docctx.models.document_context`).

With ``--doc-mode segments`` the samples are instead segments of consecutive sentences of a
document (:mod:`fairseq_docctx.data.segments`), translated whole (document-to-document
translation) and given back one hypothesis per source sentence (:meth:`DocumentTranslationTask.
inference_step`).

Context settings at inference (``--context-size``, ``--context-sides``, ``--doc-mode``, the
segment settings) default to the checkpoint's; one given that differs is refused unless
``--context-override``: :mod:`fairseq_docctx.tasks.context_settings`.
"""
import argparse
import contextlib
import logging
import re
from typing import Optional, Tuple

import torch
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from ..data import context_batch as cb
from ..data import dataset_builder as db
from ..data import dictionaries
from ..data import segments as seg
from ..data.doc_index import DocIndex, load_doc_index
from ..data.document_dataset import DocumentPairDataset
from ..data.pretrained import PretrainedError, PretrainedText
from ..errors import UsageError
from ..models import document_context as dc
from ..models.sentence_init import lr_scaled_groups
from . import context_settings as cs
from . import coword_dropout as coword
from . import cxmi_validation as cxmi
from .context_settings import ADOPTED_SETTINGS
from .length_limits import binarized_files, limit_each_row, row_limit, sample_too_long_message

logger = logging.getLogger(__name__)

TARGET_CONTEXT_CHOICES = ("reference", "hypothesis")
DOC_BATCHING_CHOICES = ("auto", "runs", "grouped-runs", "sentences")
#: the batch key of the corpus indices of every row's sentences (--doc-mode segments)
SEGMENT_SENTENCES = "segment_sentences"


@dataclass
class DocumentTranslationConfig(TranslationConfig):
    context_size: Optional[int] = field(
        default=None,
        metadata={"help": "number K of previous sentences of the same document given as "
                  "context (0 = sentence-level translation; default 3 in training, the "
                  "checkpoint's at inference)"},
    )
    context_sides: Optional[str] = field(
        default=None,
        metadata={"help": "which sides of the previous sentences are context: a "
                  "comma-separated set of sides (src, tgt, and any a model declares), or "
                  "source, target, both, none (default source in training, the "
                  "checkpoint's at inference)"},
    )
    target_context: ChoiceEnum(TARGET_CONTEXT_CHOICES) = field(
        default="hypothesis",
        metadata={"help": "where target-side context comes from at inference: the model's "
                  "own previous translations, decoded in document order (hypothesis), or "
                  "the references (oracle analysis). Training always uses references"},
    )
    context_separator: str = field(
        default="<sep>",
        metadata={"help": "token joining context sentences for concatenation models; "
                  "added to the dictionaries if missing"},
    )
    doc_run_length: int = field(
        default=16,
        metadata={"help": "batches keep runs of up to this many consecutive sentences of a "
                  "document together, so shared context is encoded once per batch"},
    )
    doc_batching: ChoiceEnum(DOC_BATCHING_CHOICES) = field(
        default="auto",
        metadata={"help": "training batches: 'runs' of consecutive sentences (each shared "
                  "context sentence encoded once per batch; for models that encode their "
                  "context), 'sentences' grouped by length like fairseq's translation task, "
                  "each with its own context (little padding; for models that only embed "
                  "their context), 'grouped-runs' (runs, tables counted at their real "
                  "length), or 'auto': what the model's contract asks for "
                  "(its ``doc_batching``; runs for sentence-level models)"},
    )
    doc_mode: Optional[ChoiceEnum(cs.DOC_MODE_CHOICES)] = field(
        default=None,
        metadata={"help": "samples: single 'sentences' with their context (default in "
                  "training), or 'segments' of consecutive sentences of a document translated "
                  "whole, sentences joined by --context-separator (document-to-document "
                  "translation; --context-size must then be 0). Default at inference: the "
                  "checkpoint's"},
    )
    max_segment_tokens: Optional[int] = field(
        default=None,
        metadata={"help": "--doc-mode segments: the limit of a segment's size under "
                  "--segment-packing (default 512 in training, the checkpoint's at inference); "
                  "a single sentence over it is a segment of its own"},
    )
    segment_packing: Optional[ChoiceEnum(seg.SEGMENT_PACKINGS)] = field(
        default=None,
        metadata={"help": "--doc-mode segments: how sentences are packed. 'g-transformer': each "
                  "costs max(source words, target words) + 2 and a segment grows while its cost "
                  "stays below --max-segment-tokens (the G-Transformer authors' data builder); "
                  "'per-side': while each side's tokens, separators and </s> included, stay "
                  "within it. The training split counts both sides, every other split the "
                  "source alone (as raw input is cut). Default g-transformer in training, the "
                  "checkpoint's at inference (per-side for a checkpoint that records none)"},
    )
    multi_resolution: bool = field(
        default=False,
        metadata={"help": "--doc-mode segments, training split: every document is also cut "
                  "into 2, 4, 8, ... equal parts (while a part has at least 2 sentences), each "
                  "packed into segments, all levels together the training samples "
                  "(multi-resolutional doc2doc, Sun et al. 2022)"},
    )
    no_sentence_count_constraint: bool = field(
        default=False,
        metadata={"help": "--doc-mode segments, generation: let a segment model's beam search "
                  "end a hypothesis with any number of sentences (by default a hypothesis ends "
                  "only after as many sentences as the source segment has); a segment whose "
                  "best hypothesis has another number is decoded again sentence by sentence"},
    )
    no_sentence_length_window: bool = field(
        default=False,
        metadata={"help": "--doc-mode segments, generation: no length window for the output "
                  "sentences of a segment model (by default, as the G-Transformer authors decode, "
                  "output sentence i ends after at least --min-len tokens and at most "
                  "--sentence-max-len-a * |s_i| + --sentence-max-len-b, s_i its source sentence; "
                  "off as well with --no-sentence-count-constraint)"},
    )
    fairseq_kv_cache: bool = field(
        default=False,
        metadata={"help": "--doc-mode segments, generation: the segment models' decoder attentions keep "
                  "their keys and values in fairseq's incremental state (the whole self-attention cache copied "
                  "at every step and every beam reordering, the encoder keys once per beam) instead of "
                  "preallocated buffers and keys shared by a segment's beams; the same hypotheses and scores, "
                  "slower on long segments: for comparing the two"},
    )
    sentence_max_len_a: float = field(
        default=seg.SENTENCE_MAX_LEN_A,
        metadata={"help": "--doc-mode segments, generation: the length window's a (see "
                  "--no-sentence-length-window; the authors' 1.2)"},
    )
    sentence_max_len_b: int = field(
        default=seg.SENTENCE_MAX_LEN_B,
        metadata={"help": "--doc-mode segments, generation: the length window's b (the authors' 10)"},
    )
    context_override: bool = field(
        default=False,
        metadata={"help": "inference: decode with the --context-size, --context-sides, --doc-mode, "
                  "--max-segment-tokens or --segment-packing given although it differs from the checkpoint's "
                  "(one warning line says so); without it such a value is refused"},
    )
    coword_dropout: float = field(
        default=0.0,
        metadata={"help": "training: CoWord dropout (Fernandes et al. 2021, section 3): each word of the current "
                  "source sentence (not its context, not the target; never at validation or inference) is "
                  "replaced by --coword-mask with this probability (0: off); the data needs the mask symbol "
                  "(docctx-prepare --mask-symbol)"},
    )
    coword_mask: str = field(
        default="<mask>",
        metadata={"help": "the symbol --coword-dropout writes (in the source dictionary: docctx-prepare "
                  "--mask-symbol SYM)"},
    )
    validate_cxmi: bool = field(
        default=False,
        metadata={"help": "validation: also score every batch's references with no context and with a random "
                  "document's context (drawn with --seed and the sentence ids) and log cxmi (true - none), "
                  "cxmi_random (random - none) and cxmi_true_vs_random (true - random) in nats per target "
                  "token, the figures of docctx-score cxmi (Fernandes et al. 2021); three forward passes per "
                  "validation batch instead of one. Does nothing for a model that reads no context; refused "
                  "with --doc-mode segments"},
    )
    # fairseq's --seed: that of --validate-cxmi's random contexts
    seed: int = II("common.seed")
    # fairseq's --num-shards / --shard-id (dataset options, which fairseq-generate itself
    # ignores): generation of shard I of N decodes the documents of that shard only
    num_shards: int = II("dataset.num_shards")
    shard_id: int = II("dataset.shard_id")


#: the line that reports the segments of a split decoded again sentence by sentence
#: (:func:`segment_run_line`); recipes, docctx-generate and the benchmarks read it
SEGMENT_RUN_LINE = re.compile(r"(\d+) of (\d+) segments of the split decoded again sentence by sentence"
                              r"(?: \(misaligned: (\d+) sentence count, (\d+) empty sentence, "
                              r"(\d+) outside the length window\))?")


def _describe_reasons(reasons: dict) -> str:
    return (f"{reasons.get('count', 0)} sentence count, {reasons.get('empty', 0)} empty sentence, "
            f"{reasons.get('window', 0)} outside the length window")


def segment_run_line(fallbacks: int, total: int, reasons: dict) -> str:
    """``F of N segments of the split decoded again sentence by sentence (misaligned: C
    sentence count, E empty sentence, W outside the length window)``: the segments of a split
    whose best hypothesis was misaligned with the source, by reason
    (:func:`~fairseq_docctx.data.segments.misalignment`), of its N segments."""
    return (f"{fallbacks} of {total} segments of the split decoded again sentence by sentence "
            f"(misaligned: {_describe_reasons(reasons)})")


def parse_segment_run_line(text: str) -> Optional[tuple]:
    """The last :func:`segment_run_line` in ``text``: ``(F, N, {reason: count})``, or ``None``."""
    found = SEGMENT_RUN_LINE.findall(text)
    if not found:
        return None
    f, n, *why = found[-1]
    return int(f), int(n), {k: int(v or 0) for k, v in zip(seg.MISALIGNMENTS, why)}


@register_task("document_translation", dataclass=DocumentTranslationConfig)
class DocumentTranslationTask(TranslationTask):
    """Translate documents sentence by sentence with the previous sentences as context.

    Models that read context follow :class:`~fairseq_docctx.models.document_context.
    DocumentContextModel`; for all other models (fairseq's ``transformer``, ``lstm``, ...)
    the context is removed from the batch (:func:`~fairseq_docctx.models.document_context.
    sample_for_model`), so they train and generate at sentence level through this task.
    """

    cfg: DocumentTranslationConfig
    #: the number of workers the last document-order batch iterator was split over (fairseq's
    #: trainer splits a validation split's batches over its workers); document-order
    #: inference refuses more than one
    document_order_shards = 1

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        #: the names of the context settings given on the command line (not defaulted): a
        #: checkpoint's settings are taken for the others (:meth:`adopt_context_settings`)
        self.command_line_context = {k for k in ADOPTED_SETTINGS if getattr(cfg, k, None) is not None}
        #: by split: its binarized (source, target) files and its documents, for the
        #: messages that name a sentence (:meth:`filter_indices_by_size`)
        self.split_files = {}
        #: whether :meth:`build_model` has built a model (whose contract is :attr:`context_contract`)
        self.built_model = False
        cs.set_defaults(cfg)
        # (a configuration made by hand, without fairseq's dataclass, may lack the training options)
        coword.check_probability(getattr(cfg, "coword_dropout", 0.0))
        cs.check_doc_mode(self)
        cxmi.check_settings(cfg, self.segments)
        #: --doc-mode segments: segments decoded, and those whose best hypothesis was
        #: misaligned with their source and were decoded again sentence by sentence, by
        #: reason (:func:`~fairseq_docctx.data.segments.misalignment`; :meth:`inference_step`),
        #: over this task's lifetime
        self.segments_decoded = 0
        self.segment_fallbacks = 0
        self.segment_misaligned = dict.fromkeys(seg.MISALIGNMENTS, 0)
        #: the same counts of the split being decoded (the segments of its batches, set by
        #: :meth:`get_batch_iterator`), logged once its last segment is decoded
        self.segment_run = None
        #: document-order inference memory, by corpus index of a decoded sentence: its best
        #: translation (target token ids ending in EOS), the target context of the next
        #: sentences, and whatever the model caches (see :meth:`inference_step`). A sentence
        #: is forgotten once the sentence K positions later has been decoded, or its
        #: document is done (:meth:`forget`).
        self.hypotheses = {}
        self.model_cache = {}
        #: the context contract of the last built model (:func:`~fairseq_docctx.models.
        #: document_context.context_spec`; batching of --doc-batching auto)
        self.context_contract = dc.SENTENCE_LEVEL

    @property
    def pretrained_text(self) -> Optional[PretrainedText]:
        """The raw text <-> tokens of a data folder written by ``docctx-prepare --pretrained``
        (:class:`~fairseq_docctx.data.pretrained.PretrainedText`: the release's segmentation and
        the language tokens of its family), ``None`` for other data. Read once from the
        manifest of the first path of ``DATA``; a record that cannot be used is a
        :class:`UsageError` naming its file."""
        if not hasattr(self, "_pretrained_text"):
            try:
                self._pretrained_text = PretrainedText.of_data(getattr(self.cfg, "data", None))
            except PretrainedError as e:
                raise UsageError(str(e)) from None
        return self._pretrained_text

    def set_pretrained_text(self, text: Optional[PretrainedText]) -> None:
        """Use ``text`` as :attr:`pretrained_text` (a model exported by ``docctx-export
        ctranslate2`` carries its own copy of the release's segmentation and record, read when
        its folder is the data directory)."""
        self._pretrained_text = text

    def target_langtok(self) -> Optional[int]:
        """The index of the target language token every target sentence starts with (the
        prepend families of a ``--pretrained`` data folder: m2m100, nllb, mbart50), else
        ``None``. A token the target dictionary lacks is a :class:`UsageError`."""
        text = self.pretrained_text
        return self._langtok_index(text and text.target_langtok, self.tgt_dict, "target")

    def source_langtok(self) -> Optional[int]:
        """The index of the source language token every source sentence starts with, as
        :meth:`target_langtok`."""
        text = self.pretrained_text
        return self._langtok_index(text and text.source_langtok, self.src_dict, "source")

    def _langtok_index(self, symbol: Optional[str], d, side: str) -> Optional[int]:
        if not symbol:
            return None
        if symbol not in d.indices:
            raise UsageError(f"{self.cfg.data}: the {side} dictionary has no language token "
                             f"{symbol} (its docctx.json names it): prepare the data again")
        return d.index(symbol)

    def bart_langtoks(self) -> Optional[Tuple[int, int]]:
        """mBART-25's ``(source token, target token)`` indices on data of an ``mbart25``
        release (placement ``bart``, as fairseq's ``translation_from_pretrained_bart`` places
        them: the source token after the encoder input's ``</s>``, the target token as the
        decoder's first input), else ``None``. The data's sentences do not carry them:
        :meth:`place_langtoks` puts them into each batch the model reads."""
        text = self.pretrained_text
        if text is None or text.placement != "bart":
            return None
        return (self._langtok_index(text.source_suffix, self.src_dict, "source"),
                self._langtok_index(text.decoder_start, self.tgt_dict, "target"))

    def language_token_ids(self) -> Tuple[int, ...]:
        """The indices of the language tokens the data's sentences or the task's batches carry
        (:meth:`source_langtok`, :meth:`target_langtok`, :meth:`bart_langtoks`); empty on data
        without them."""
        toks = [self.source_langtok(), self.target_langtok(), *(self.bart_langtoks() or ())]
        return tuple(sorted({t for t in toks if t is not None}))

    def place_langtoks(self, sample):
        """``sample`` as the model reads it on mBART-25 data (:meth:`bart_langtoks`): a copy
        whose encoder input ends ``</s> [src]`` (``src_tokens`` one column wider,
        ``src_lengths`` one more) and whose decoder input starts with ``[tgt]`` instead of
        ``</s>``; on other data ``sample`` itself. The context sentences HAN, QCN and MHT
        encode apart are left as they are (mBART-25 places its token in the input the
        encoder translates)."""
        toks = self.bart_langtoks()
        if toks is None or sample is None or "net_input" not in sample:
            return sample
        src_tok, tgt_tok = toks
        ni = dict(sample["net_input"])
        src, lengths = ni["src_tokens"], ni["src_lengths"]
        wide = src.new_full((src.size(0), src.size(1) + 1), self.src_dict.pad())
        wide[:, :src.size(1)] = src
        if self.cfg.left_pad_source:
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

    def search(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's ``inference_step`` (``generator.generate``) on the batch as the model
        reads it (:meth:`place_langtoks`); on mBART-25 data the search starts from the target
        language token (``bos_token``), as ``translation_from_pretrained_bart`` starts it."""
        toks = self.bart_langtoks()
        if toks is None:
            return TranslationTask.inference_step(self, generator, models, sample, prefix_tokens, constraints)
        with torch.no_grad():
            return generator.generate(models, self.place_langtoks(sample), prefix_tokens=prefix_tokens,
                                      constraints=constraints, bos_token=toks[1])

    def langtok_prefix(self, sample) -> Optional[torch.Tensor]:
        """The forced first output token of every row of ``sample``: the target language token
        (``[B, 1]``, as fairseq's ``translation_multi_simple_epoch --decoder-langtok`` forces
        it), or ``None`` for data without language tokens."""
        tok = self.target_langtok()
        if tok is None:
            return None
        src = sample["net_input"]["src_tokens"]
        return torch.full((src.size(0), 1), tok, dtype=src.dtype, device=src.device)

    def set_langtok_segments(self, models):
        """Give the segment models the language tokens every sentence of a segment starts with
        on such data (``set_sentence_start``: the target one forced first in every output
        sentence; ``None`` on other data). A model decoding segments without that setting
        (e.g. a sentence-level ``transformer`` with ``--doc-mode segments``) is refused on data
        with language tokens (one line): it would place the token in the first sentence only."""
        if not self.segments:
            return
        src_tok, tgt_tok = self.source_langtok(), self.target_langtok()
        for m in models:
            if hasattr(m, "set_sentence_start"):
                m.set_sentence_start(src_tok, tgt_tok)
            elif tgt_tok is not None:
                raise UsageError(f"--doc-mode segments: {self.cfg.data} is data of a pretrained "
                                 f"{self.pretrained_text.family} model with language tokens, which every "
                                 f"sentence of a segment starts with; {type(m).__name__} does not place them "
                                 "(doc2doc_transformer and g_transformer do): decode it with --doc-mode sentences "
                                 "(and --context-override if it was trained on segments)")

    @property
    def context_sides(self):
        """The sides of the context (names of declared sides; empty with K=0)."""
        if not self.cfg.context_size:
            return ()
        return cb.parse_sides(self.cfg.context_sides)

    @property
    def hypothesis_context(self) -> bool:
        """Target context at inference comes from the model's own translations."""
        return (
            any(cb.get_side(s).from_hypotheses for s in self.context_sides)
            and self.cfg.target_context == "hypothesis"
        )

    @property
    def uses_context(self) -> bool:
        return bool(self.context_sides)

    @property
    def segments(self) -> bool:
        """``--doc-mode segments``: the samples are segments of consecutive sentences (a
        config without the option, e.g. a task made by hand, is of sentences)."""
        return getattr(self.cfg, "doc_mode", "sentences") == "segments"

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        cs.add_separator(task)
        return task

    def adopt_context_settings(self, saved, where="the checkpoint", arch=None):
        """Take the context settings of a checkpoint (``saved``: its task config or model
        args) for those not given, refuse a given one that differs unless
        ``--context-override`` (:func:`.context_settings.adopt`)."""
        cs.adopt(self, saved, where, arch)

    # ------------------------------------------------------------------ data
    def load_dataset(self, split, epoch=1, combine=False, task_cfg=None, **kwargs):
        """fairseq's sentence pairs of ``split`` with its document index
        (:func:`~fairseq_docctx.data.doc_index.load_doc_index`), made the split's dataset by
        :meth:`document_dataset`; with ``--validate-cxmi``, a validation split's batches carry
        the context variants (:mod:`.cxmi_validation`)."""
        if task_cfg is not None:  # fairseq-generate: the checkpoint's task config
            self.adopt_context_settings(task_cfg)
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        missing = None  # what to train with instead when the split has no document index
        if self.uses_context or self.segments:
            missing = "--doc-mode sentences" if self.segments else "--context-size 0"
        docs = load_doc_index(data_path, split, src, tgt, len(pair), combine, missing)
        self.split_files[split] = (binarized_files(data_path, split, src, tgt), docs)
        ds = self.datasets[split] = self.document_dataset(split, pair, docs, data_path)
        if (getattr(self.cfg, "validate_cxmi", False) and not self.segments and ds.has_context
                and split != self.cfg.train_subset):
            ds.set_context_variants(cxmi.cxmi_seed(self.cfg))

    def document_dataset(self, split: Optional[str], pair, docs: DocIndex, data_path: Optional[str] = None,
                         side_data: Optional[dict] = None):
        """The dataset of ``split`` (:func:`~fairseq_docctx.data.dataset_builder.build_document_dataset`),
        shuffled unless it is ``test``; ``split`` ``None``: raw input (:meth:`build_dataset_for_inference`).
        Sentences: with the task's context, the sides the pair lacks ``side_data``, else loaded
        from ``data_path`` (:func:`~fairseq_docctx.data.dataset_builder.load_side_data`), in
        document order where inference reads its own translations. ``--doc-mode segments``:
        packed under ``--max-segment-tokens`` and ``--segment-packing`` (``--multi-resolution``
        on the training split), the training split on the lengths of both sides, every other
        split on the source's alone, as the hub and ``docctx-translate`` pack raw documents, so
        that ``fairseq-generate`` decodes a test set in the same segments; with ``--num-shards
        N --shard-id I`` (generation) only the documents of shard I, the sentence ids the split's."""
        training = split == self.cfg.train_subset
        if self.segments:
            sep = self.cfg.context_separator
            options = dict(separators=(self.src_dict.index(sep), self.tgt_dict.index(sep)),
                           max_segment_tokens=self.cfg.max_segment_tokens, packing=self.cfg.segment_packing,
                           count_targets=training, multi_resolution=training and bool(self.cfg.multi_resolution),
                           shard=None if training or split is None else self.generation_shards)
        else:
            if side_data is None:
                side_data = db.load_side_data(self, self.context_sides, split, data_path, pair)
            options = dict(context_size=self.cfg.context_size, context_sides=self.context_sides,
                           run_length=self.cfg.doc_run_length, side_data=side_data,
                           # inference reads its own translations: decode in document order
                           position_major=not training and self.hypothesis_context)
        return db.build_document_dataset(pair, docs, segments=self.segments, shuffle=split not in ("test", None),
                                         split=split, **options)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None,
                                    documents: Optional[DocIndex] = None, side_data: Optional[dict] = None):
        """fairseq's hook for raw input (its hub's ``translate``): the source sentences in
        fairseq's ``LanguagePairDataset``; with ``documents``, the document index of the
        sentences (in document order), the dataset of those documents as the task decodes a
        test split (:meth:`document_dataset`), ``side_data`` the sentences of the context sides
        raw input lacks (e.g. the hub's :meth:`~fairseq_docctx.hub.DocumentHubInterface.side_data`)."""
        pair = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        if documents is None:
            return pair
        return self.document_dataset(None, pair, documents, side_data=side_data or {})

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's filter; without ``--skip-invalid-size-inputs-valid-test`` (``ignore_invalid_inputs``,
        with which fairseq leaves the samples out with a warning) a sample longer than the
        model's positions is a :class:`UsageError` of one line naming it
        (:func:`~fairseq_docctx.tasks.length_limits.sample_too_long_message`)."""
        if ignore_invalid_inputs or max_positions is None:
            return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) == 0:
            return kept
        ignored = sorted(int(i) for i in ignored)  # corpus order: the first is the first of the split
        split = next((k for k, v in self.datasets.items() if v is dataset), None)
        files, docs = self.split_files.get(split, ((None, None), None))
        raise UsageError(sample_too_long_message(split or "the split", dataset, ignored[0], max_positions, files,
                                                 docs, ignored[1:]))

    @property
    def generation_shards(self) -> Tuple[int, int]:
        """``(N, I)`` of ``--num-shards N --shard-id I``: generation of shard I of N decodes the
        documents of that shard only (``(1, 0)`` where the configuration does not resolve
        them: options absent from older configurations, a configuration made by hand)."""
        try:
            return int(self.cfg.num_shards or 1), int(self.cfg.shard_id or 0)
        except Exception:
            return 1, 0

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None,
                           max_positions=None, ignore_invalid_inputs=False,
                           required_batch_size_multiple=1, seed=1, num_shards=1,
                           shard_id=0, num_workers=0, epoch=1, data_buffer_size=0,
                           disable_iterator_cache=False, skip_remainder_batch=False,
                           grouped_shuffling=False, update_epoch_batch_itr=False, **kwargs):
        """fairseq's iterator, except for a dataset with context or a generation shard
        (:func:`~fairseq_docctx.data.dataset_builder.generation_shard`): batches that keep
        runs of consecutive sentences together, drawn every epoch
        (:func:`~fairseq_docctx.data.dataset_builder.document_batch_iterator`)."""
        # fairseq's arguments, by name (``__class__``: the cell of ``super()``)
        options = {k: v for k, v in locals().items() if k not in ("self", "dataset", "kwargs", "__class__")}
        training = dataset is self.datasets.get(self.cfg.train_subset)
        shard = db.generation_shard(dataset, *self.generation_shards, training=training)
        if shard is None and not (isinstance(dataset, DocumentPairDataset) and dataset.has_context):
            itr = super().get_batch_iterator(dataset, **options)
            if isinstance(dataset, seg.SegmentPairDataset) and not training:
                # the segments this iterator hands this worker (fairseq's ShardedIterator:
                # every num_shards-th batch from shard_id)
                self.start_segment_run(sum(len(b) for b in itr.frozen_batches[shard_id::max(num_shards, 1)]))
            return itr
        if dataset.position_major:
            # In distributed training fairseq's trainer hands each worker every num_shards-th
            # batch of the validation split: right for the validation loss, which reads the
            # references as target context; document-order inference, which needs the
            # translations of the previous sentences on the same worker, refuses such an
            # iterator (inference_step).
            self.document_order_shards = max(int(num_shards or 1), 1)
            self.hypotheses.clear()
            self.model_cache.clear()
        return db.document_batch_iterator(
            dataset, lambda indices: self.filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs),
            self.doc_batching, self.context_contract.context_token_cost, shard, **options)

    # ---------------------------------------------------------------- models
    @property
    def doc_batching(self) -> str:
        """How training batches are formed: --doc-batching, ``auto`` resolved by the
        contract of the last built model (``runs`` for sentence-level models)."""
        mode = self.cfg.doc_batching
        if mode == "auto":
            mode = self.context_contract.doc_batching
        return mode

    def build_model(self, cfg, from_checkpoint=False):
        if from_checkpoint:  # legacy models' args hold the task settings they were trained with
            self.adopt_context_settings(cfg)
            # and the model options of their time: those added since get the values they had
            dc.apply_checkpoint_defaults(cfg)
        arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
        if dc.reads_segments(ARCH_MODEL_REGISTRY.get(arch)) and not self.segments:
            raise UsageError(f"--arch {arch} translates segments of consecutive sentences: add "
                             "--doc-mode segments")
        model = super().build_model(cfg, from_checkpoint)
        k = dc.check_context(model, self.context_sides, self.cfg.context_size, from_checkpoint)
        if dc.reads_context(model):  # the K it reads, where the hub and generation read it
            model.declare_context(model.context_sides, k)
        self.context_contract = dc.context_spec(model)
        self.built_model = True
        coword.check_model(self.cfg, self.src_dict, model)
        if hasattr(model, "set_language_tokens"):  # kept out of g_transformer's word masking
            model.set_language_tokens(self.language_token_ids())
        if self.uses_context and not self.context_contract.reads_context:
            logger.info(f"{model.__class__.__name__} does not read document context: it is "
                        "trained and decoded at sentence level")
        if not from_checkpoint:
            cxmi.check_model(self.cfg, model)
        if not from_checkpoint and isinstance(cfg, argparse.Namespace):
            # recorded with the model's args, read back at inference (:meth:`build_model`)
            cs.record(self, cfg)
            dictionaries.record(cfg, self.src_dict, self.tgt_dict, self.cfg.context_separator)
            # the language pair, for a checkpoint deployed beside its dictionaries alone
            cfg.language_pair = f"{self.cfg.source_lang}-{self.cfg.target_lang}"
        elif from_checkpoint:
            dictionaries.check_recorded(cfg, self.src_dict, self.tgt_dict, self.cfg.context_separator, self.cfg.data)
        return model

    def begin_epoch(self, epoch, model):
        """fairseq's trainer calls this at the start of every epoch but not the model's
        ``set_epoch``: models whose training changes with the epoch (``g_transformer``'s
        ``--doc-noise-epochs``) are told here."""
        super().begin_epoch(epoch, model)
        inner = getattr(model, "module", model)  # a DistributedDataParallel wrapper
        if hasattr(inner, "set_epoch"):
            inner.set_epoch(epoch)

    def optimizer_step(self, optimizer, model, update_num):
        """fairseq's step, with the parameters that have a learning-rate scale
        (``--lr-scale-pretrained``) in groups of their own at the scaled learning rate
        (:func:`~fairseq_docctx.models.sentence_init.lr_scaled_groups`)."""
        with lr_scaled_groups(optimizer, model):
            super().optimizer_step(optimizer, model, update_num)

    def build_generator(self, models, args, **kwargs):
        """fairseq's generator; segment models search with the sentence count and the
        length windows of the output sentences (:meth:`sentence_length_window`, with the
        generation's ``--min-len``), or without them (``--no-sentence-count-constraint``,
        ``--no-sentence-length-window``), their decoder self-attentions keeping keys and values
        in preallocated buffers (fairseq's cache with ``--fairseq-kv-cache``);
        :meth:`inference_step` still accounts for every
        sentence. Every row's length limit (``--max-len-a``, ``--max-len-b``) comes from its own
        source length, not from the batch's width as in fairseq
        (:func:`~fairseq_docctx.tasks.length_limits.limit_each_row`), so that a sentence's
        translation does not depend on what it is batched with.

        On data with language tokens (:meth:`target_langtok`) the target language token is
        one of the generator's ``symbols_to_strip_from_output`` (left out of fairseq-generate's
        H-/D- lines, as ``translation_multi_simple_epoch`` does), and :meth:`inference_step`
        forces it as the first output token; segment models force it first in every sentence of
        the segment (:meth:`set_langtok_segments`)."""
        self.set_langtok_segments(models)
        tok = self.target_langtok()
        if tok is not None:  # left out of the printed translations, as fairseq's multilingual task does
            kwargs = dict(kwargs)
            extra = dict(kwargs.get("extra_gen_cls_kwargs") or {})
            extra["symbols_to_strip_from_output"] = set(extra.get("symbols_to_strip_from_output") or ()) | {tok}
            kwargs["extra_gen_cls_kwargs"] = extra
        self.set_segment_rules(models, getattr(args, "min_len", 1))
        return limit_each_row(super().build_generator(models, args, **kwargs))

    def set_segment_rules(self, models, min_len: int = 1):
        """Give the segment models the decoding rules of the task's options: the sentence
        count (``--no-sentence-count-constraint`` turns it off) and the length window of their
        output sentences (:meth:`sentence_length_window`, with the generation's ``min_len``).
        :meth:`build_generator` calls it; so does a generator built elsewhere (the CTranslate2
        engine's, whose stand-in model carries the rules that :meth:`segment_inference_step`
        checks after its search)."""
        window = self.sentence_length_window(min_len)
        for m in models:
            if hasattr(m, "set_sentence_count_constraint"):
                m.set_sentence_count_constraint(not getattr(self.cfg, "no_sentence_count_constraint", False))
                m.set_sentence_length_window(window)
            if hasattr(m, "set_preallocated_kv_cache"):
                m.set_preallocated_kv_cache(not getattr(self.cfg, "fairseq_kv_cache", False))

    def build_tokenizer(self, args):
        """fairseq's tokenizer of ``--tokenizer``; without one, on data of a pretrained
        ``transformer`` model (``docctx-prepare --pretrained``), the family's Moses tokenizer of
        the target language: ``fairseq-generate`` detokenizes its D- lines with it."""
        text = self.pretrained_text
        step = text and text.default_step(args, "tokenizer", self.cfg.source_lang, self.cfg.target_lang)
        return step or super().build_tokenizer(args)

    def build_bpe(self, args):
        """fairseq's BPE of ``--bpe``; without one, on data written by ``docctx-prepare
        --pretrained``, the release's segmentation (its SentencePiece model, or its fastBPE
        codes): ``fairseq-generate``'s D- lines are then plain text."""
        text = self.pretrained_text
        step = text and text.default_step(args, "bpe", self.cfg.source_lang, self.cfg.target_lang)
        return step or super().build_bpe(args)

    def sentence_length_window(self, min_len: int = 1) -> Optional[seg.LengthWindow]:
        """The length window of a segment model's output sentences (``--sentence-max-len-a``,
        ``--sentence-max-len-b``, ``min_len``: the generation's ``--min-len``); ``None`` with
        ``--no-sentence-length-window`` (a configuration without these options: the defaults)."""
        if getattr(self.cfg, "no_sentence_length_window", False):
            return None
        a = getattr(self.cfg, "sentence_max_len_a", None)
        b = getattr(self.cfg, "sentence_max_len_b", None)
        return seg.LengthWindow(seg.SENTENCE_MAX_LEN_A if a is None else float(a),
                                seg.SENTENCE_MAX_LEN_B if b is None else int(b), int(min_len or 0))

    def coword_dropout(self, sample, model):
        """``sample`` with ``--coword-dropout`` applied to its current source sentences
        (:func:`.coword_dropout.coword_dropout`; the data's language tokens are never masked)."""
        return coword.coword_dropout(sample, model, self.cfg, self.src_dict, self.language_token_ids())

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if dc.context_spec(model).packs_training_output and getattr(criterion, "ignore_prefix_size", 0) > 0:
            # fairseq's criteria cut the prefix off the [B, T, V] output: not that of packed positions
            raise UsageError(f"{model.__class__.__name__} packs its training output (real "
                             "target positions only): --ignore-prefix-size is not supported")
        sample = self.coword_dropout(dc.sample_for_model(sample, model), model)
        return super().train_step(
            self.place_langtoks(sample), model, criterion, optimizer, update_num, ignore_grad
        )

    def valid_step(self, sample, model, criterion):
        """fairseq's validation step; with ``--validate-cxmi`` (a model that reads context) the
        batch's references are also scored with no context and with a random document's
        context, the batch's context variants (:func:`.cxmi_validation.cxmi_sums`)."""
        true = self.place_langtoks(dc.sample_for_model(sample, model))
        if not cxmi.validates_cxmi(self.cfg, model, self.segments):
            return super().valid_step(true, model, criterion)
        with _captured_output(model) as captured:  # the criterion's forward pass: the true context's scores
            loss, sample_size, logging_output = super().valid_step(true, model, criterion)
        logging_output.update(cxmi.cxmi_sums(sample, model, self.tgt_dict.pad(), self.place_langtoks, captured.output))
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        """fairseq's metrics; with ``--validate-cxmi`` also the CXMI figures
        (:func:`.cxmi_validation.reduce_metrics`)."""
        super().reduce_metrics(logging_outputs, criterion)
        cxmi.reduce_metrics(logging_outputs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Beam search; in document-order inference (``--target-context hypothesis``) the
        batch's target context is first replaced by the model's own translations.

        Cache hand-off (a single model whose contract defines ``document_cache_entries``):
        after the search of a batch the model gets the batch, with the encoder output the
        search computed (:data:`~fairseq_docctx.models.document_context.ENCODER_OUT`), and
        its hypotheses, and returns one entry per row; the entries of a batch's context
        sentences come back to it in the context's ``cache``, aligned with the ``tgt``
        table (see :mod:`fairseq_docctx.models.document_context`).
        """
        if self.segments and sample.get(SEGMENT_SENTENCES) is not None:
            return self.segment_inference_step(generator, models, sample, prefix_tokens, constraints)
        sample = dc.sample_for_model(sample, models)
        if prefix_tokens is None:  # the target language token first (data with language tokens)
            prefix_tokens = self.langtok_prefix(sample)
        self.check_prefix(generator, sample, prefix_tokens)
        from_hypotheses = self.hypothesis_context and cb.get_context(sample) is not None
        cacher = None
        if from_hypotheses and len(models) == 1 and dc.context_spec(models[0]).caches:
            cacher = models[0].document_cache_entries
        if not self.hypothesis_context:  # batches are length-sorted: nothing to do
            return self.search(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        if from_hypotheses:
            if self.document_order_shards > 1:
                raise UsageError(
                    "document-order inference (--target-context hypothesis) does not split "
                    "its batches over distributed workers (a sentence needs the translations "
                    "of the previous ones): split the documents with --num-shards N "
                    "--shard-id I instead (docctx-generate runs the N processes and merges)"
                )
            sample = self.with_hypothesis_context(sample, with_cache=cacher is not None)
        # one search for the whole position batch: every row ends at its own length limit
        # (:mod:`~fairseq_docctx.tasks.length_limits`), whatever the lengths beside it
        with _captured_encoder_out(generator if cacher is not None else None) as captured:
            hypos = self.search(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        entries = [None] * len(hypos)
        if cacher is not None:
            entries = cacher({**sample, dc.ENCODER_OUT: captured[0]} if captured else sample, hypos)
        if not from_hypotheses:
            return hypos
        for i, sent_id in enumerate(sample["id"].tolist()):
            self.hypotheses[sent_id] = hypos[i][0]["tokens"]
            if entries[i] is not None:
                self.model_cache[sent_id] = entries[i]
        # the farthest context sentence of each row is no one's context any more
        ctx_ids = cb.context_ids(cb.get_context(sample))
        for old in ctx_ids[:, -1][ctx_ids[:, -1] >= 0].tolist():
            self.hypotheses.pop(old, None)
            self.model_cache.pop(old, None)
        return hypos

    def check_prefix(self, generator, sample, prefix_tokens):
        """Refuse a prefix (``--prefix-size``) longer than its sentence's own length limit:
        fairseq stops forcing a prefix at the batch's limit, which a row's own limit may be
        below (:mod:`~fairseq_docctx.tasks.length_limits`)."""
        rows = row_limit(generator)
        if rows is None or prefix_tokens is None:
            return
        own = rows.own_limits(sample["net_input"]["src_lengths"]).to(prefix_tokens.device)
        prefix = prefix_tokens.ne(self.tgt_dict.pad()).sum(1)
        over = (prefix > own).nonzero()
        if over.numel():
            i = int(over[0, 0])
            raise ValueError(f"--prefix-size: the prefix of sentence {int(sample['id'][i])} has {int(prefix[i])} "
                             f"tokens, more than its length limit of {int(own[i])} (--max-len-a * source tokens "
                             "+ --max-len-b): raise the limit or shorten the prefix")

    def segment_inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """``--doc-mode segments``: decode a batch of segments and give back one hypothesis
        list per source **sentence**.

        Every row's hypotheses are split at the separator
        (:func:`~fairseq_docctx.data.segments.split_hypothesis`) and checked against the
        source sentences (:func:`~fairseq_docctx.data.segments.misalignment`): another number
        of sentences, an empty output sentence whose source sentence is not, or (when the
        model decoded with length windows, :meth:`sentence_length_window`) an output sentence
        outside its window. A row whose best hypothesis is aligned gives each sentence its
        piece of every aligned hypothesis (best first). A row whose best hypothesis is
        misaligned is decoded again sentence by sentence, each sentence a one-sentence
        segment (the per-segment fallback; a separator such a decoding emits is removed), and
        counted in :attr:`segment_fallbacks` and :attr:`segment_misaligned` (logged; the
        split's counts once its last segment is decoded, :meth:`count_segments`).

        A segment's length limit (fairseq's ``--max-len-a``/``--max-len-b`` applied to the
        segment's own source tokens, :mod:`~fairseq_docctx.tasks.length_limits`) is, with
        length windows, raised where it is lower to the sum of the windows of its sentences
        and its separators (:meth:`segment_length_limit`), so that it never ends a sentence
        before its window does; a sentence decoded again alone gets the limit of a
        one-sentence segment.

        The batch is then rewritten in place into the sentences, in the segments' order, so
        that fairseq-generate prints one S-/T-/H-/D- group per source sentence under its own
        corpus id: ``sample["id"]`` holds the sentence ids, ``net_input`` their source
        sentences (``src_tokens``, ``src_lengths``; ``prev_output_tokens`` when there are
        targets), ``target`` their target sentences, each ending in </s>, and
        ``segment_sentences`` one sentence per row."""
        from fairseq.sequence_generator import SequenceGeneratorWithAlignment

        if prefix_tokens is not None or constraints is not None:
            # a segment model decodes segments only; another model can decode sentences
            advice = ("leave them out: a segment model decodes segments only" if any(dc.reads_segments(m) for m in models)
                      else "decode with --doc-mode sentences (and --context-override if the model was trained on "
                      "segments)")
            raise UsageError("--doc-mode segments: --prefix-size and --constraints apply to a "
                             f"sentence, not to a segment; {advice}")
        if isinstance(generator, SequenceGeneratorWithAlignment):
            raise UsageError("--doc-mode segments: --print-alignment is not supported (the "
                             "alignment of a segment is not split into its sentences)")
        sample = dc.sample_for_model(sample, models)
        sep, eos, pad = self.tgt_dict.index(self.cfg.context_separator), self.tgt_dict.eos(), self.tgt_dict.pad()
        src_sep = self.src_dict.index(self.cfg.context_separator)
        src_start, tgt_start = self.source_langtok(), self.target_langtok()  # None without language tokens
        lenpen = float(getattr(generator, "len_penalty", 1.0))
        window = self.decoding_window(models)
        ni, target = sample["net_input"], sample.get("target")
        # [B, N]: every source sentence's own tokens (separators, </s>, language tokens not
        # counted), for the segments' limits and the checks of their output below
        src_lengths_all = seg.sentence_lengths(ni["src_tokens"], src_sep, self.src_dict.pad(), eos, src_start)
        bounds_all = window.bounds(src_lengths_all) if window is not None else None
        with self.segment_length_limit(generator, ni["src_tokens"], window, src_lengths_all):
            hypos = self.search(generator, models, sample)
        groups = [g.tolist() for g in sample[SEGMENT_SENTENCES]]
        per_sentence, sources, targets, source_lengths = [], [], [], []
        reasons = dict.fromkeys(seg.MISALIGNMENTS, 0)
        for i, ids in enumerate(groups):
            src = seg.split_tokens(utils.strip_pad(ni["src_tokens"][i], pad), src_sep, eos)
            if len(src) != len(ids):
                raise RuntimeError(f"a segment of sentences {ids} has {len(src)} source sentences "
                                   "in its tokens: the batch is not in the segment format")
            sources.extend(src)
            if target is not None:
                targets.extend(seg.split_tokens(utils.strip_pad(target[i], pad), sep, eos))
            src_lengths = src_lengths_all[i, :len(ids)].tolist()
            source_lengths.extend(src_lengths)
            bounds = None if bounds_all is None else [b[i, :len(ids)].tolist() for b in bounds_all]
            split = [seg.split_hypothesis(h, sep, eos, len(ids), lenpen) for h in hypos[i]]
            why = [seg.misalignment(s, src_lengths, bounds, tgt_start) for s in split]
            if not split or why[0] is not None:  # decoded again below, sentence by sentence
                reasons[why[0] if split else "count"] += 1
                per_sentence.extend([None] * len(ids))
            else:
                aligned = [s for s, w in zip(split, why) if w is None]
                per_sentence.extend([[s[k] for s in aligned] for k in range(len(ids))])
        fallbacks = sum(reasons.values())
        if fallbacks:
            todo = [k for k, h in enumerate(per_sentence) if h is None]
            sub_src = [sources[k] for k in todo]
            sub_tokens = data_utils.collate_tokens(sub_src, pad, eos, left_pad=self.cfg.left_pad_source)
            sub = {
                "id": torch.tensor(todo, device=sample["id"].device), "nsentences": len(todo),
                "net_input": {
                    "src_tokens": sub_tokens,
                    "src_lengths": torch.tensor([t.numel() for t in sub_src], device=sample["id"].device),
                },
            }
            with self.segment_length_limit(generator, sub_tokens, window):
                sub_hypos = self.search(generator, models, sub)
            still_empty = 0
            for k, h in zip(todo, sub_hypos):
                per_sentence[k] = [seg.without_separators(x, sep) for x in h]
                still_empty += (seg.sentence_length(per_sentence[k][0]["tokens"], tgt_start) == 0
                                and source_lengths[k] > 0)
            logger.info(f"{fallbacks} of {len(groups)} segments of the batch decoded again sentence by "
                        f"sentence (misaligned: {_describe_reasons(reasons)})")
            if still_empty:
                logger.warning(f"{still_empty} sentences decoded alone have an empty translation (their "
                               "source is not empty)")
        self.count_segments(len(groups), reasons)
        self._rewrite_as_sentences(sample, [i for g in groups for i in g], sources, targets)
        return per_sentence

    def decoding_window(self, models) -> Optional[seg.LengthWindow]:
        """The length window the models decode segments with (the segment models'
        ``sentence_length_window``, set by :meth:`build_generator`); ``None`` when one of them
        has none (off, or a model without the window such as a ``transformer`` on segments)."""
        windows = [getattr(m, "sentence_length_window", None) for m in models]
        return windows[0] if windows and all(w is not None and w == windows[0] for w in windows) else None

    @contextlib.contextmanager
    def segment_length_limit(self, generator, src_tokens, window: Optional[seg.LengthWindow],
                             lengths: Optional[torch.Tensor] = None):
        """Within the block, fairseq's ``generator`` ends no hypothesis of the batch of segments
        ``src_tokens`` before the sum of the length windows of its sentences plus its
        separators: each row's own limit (``int(max_len_a * its tokens + max_len_b)``,
        :mod:`~fairseq_docctx.tasks.length_limits`) is raised to that sum where it is lower, and
        the generator's batch limit (from the batch's width) with it where the largest of them
        is above it (by raising ``max_len_b``; the model's positions still bound both).
        On data with language tokens each sentence's token counts beside its window.
        ``lengths``: the source sentences' lengths (:func:`~fairseq_docctx.data.segments.
        sentence_lengths` of ``src_tokens``), if computed. Nothing changes without a ``window``
        or for a generator without these limits. A generator that keeps each row's limit
        itself and offers ``at_least(floor)`` (the CTranslate2 engine's) gets the rows' raised
        limits through it, its ``max_len_b`` untouched."""
        b = getattr(generator, "max_len_b", None)
        a = getattr(generator, "max_len_a", None)
        if window is None or a is None or b is None or getattr(generator, "match_source_len", False):
            yield
            return
        rows = row_limit(generator)
        # a generator that keeps each row's limit itself (the CTranslate2 engine's): its rows
        # raised, nothing else (its max_len_b is every row's, not a batch limit)
        own_rows = getattr(generator, "at_least", None) if rows is None else None
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        sep = self.src_dict.index(self.cfg.context_separator)
        if lengths is None:
            lengths = seg.sentence_lengths(src_tokens, sep, pad, eos, self.source_langtok())
        n = src_tokens.eq(sep).sum(1, keepdim=True) + 1
        real = torch.arange(lengths.size(1), device=lengths.device).unsqueeze(0) < n
        need = (window.bounds(lengths)[1] * real).sum(1) + n.squeeze(1) - 1  # [B]
        if self.target_langtok() is not None:  # and the language token starting every sentence
            need = need + n.squeeze(1)
        if own_rows is not None:
            with own_rows(need):
                yield
            return
        floor = rows.at_least(need) if rows is not None else contextlib.nullcontext()
        raise_by = max(int(need.max()) - int(a * src_tokens.size(1) + b), 0)
        generator.max_len_b = b + raise_by
        try:
            with floor:
                yield
        finally:
            generator.max_len_b = b

    def start_segment_run(self, total: int):
        """Count the decoding of a split of ``total`` segments (:meth:`count_segments`)."""
        self.segment_run = {"total": int(total), "decoded": 0, "fallbacks": 0,
                            **dict.fromkeys(seg.MISALIGNMENTS, 0)}

    def count_segments(self, decoded: int, reasons: dict):
        """Add a batch's ``decoded`` segments and its misaligned ones by reason to the task's
        counts and to those of the split being decoded; once the split's last segment is
        decoded, log its line ``F of N segments of the split decoded again sentence by
        sentence (misaligned: ...)``, N the split's segments (those of its batches)."""
        fallbacks = sum(reasons.values())
        self.segments_decoded += decoded
        self.segment_fallbacks += fallbacks
        for k, v in reasons.items():
            self.segment_misaligned[k] += v
        run = self.segment_run
        if run is None:
            return
        run["decoded"] += decoded
        run["fallbacks"] += fallbacks
        for k, v in reasons.items():
            run[k] += v
        if run["decoded"] >= run["total"]:
            logger.info(segment_run_line(run["fallbacks"], run["total"], {k: run[k] for k in seg.MISALIGNMENTS}))
            self.segment_run = None

    def _rewrite_as_sentences(self, sample, ids, sources, targets):
        """Turn a decoded batch of segments into the batch of its sentences (in place)."""
        pad, eos = self.tgt_dict.pad(), self.tgt_dict.eos()
        device = sample["id"].device
        ni = sample["net_input"]
        sample["id"] = torch.tensor(ids, dtype=torch.long, device=device)
        sample["nsentences"] = len(ids)
        ni["src_tokens"] = data_utils.collate_tokens(sources, pad, eos, left_pad=self.cfg.left_pad_source)
        ni["src_lengths"] = torch.tensor([t.numel() for t in sources], dtype=torch.long, device=device)
        ni.pop("prev_output_tokens", None)
        if sample.get("target") is not None:
            sample["target"] = data_utils.collate_tokens(targets, pad, eos, left_pad=self.cfg.left_pad_target)
            ni["prev_output_tokens"] = data_utils.collate_tokens(
                targets, pad, eos, left_pad=self.cfg.left_pad_target, move_eos_to_beginning=True)
            sample["ntokens"] = sum(t.numel() for t in targets)
        sample[SEGMENT_SENTENCES] = [torch.tensor([i], dtype=torch.long) for i in ids]

    def forget(self, sentence_ids):
        """Drop the document-order inference memory of these sentences (those of a
        document that is done: no later sentence reads them)."""
        for i in sentence_ids:
            self.hypotheses.pop(i, None)
            self.model_cache.pop(i, None)

    def with_hypothesis_context(self, sample, with_cache=False):
        """Replace the sides of a batch's context that come from translations by the model's
        own translations of those sentences (decoded earlier: batches come in document
        order), with the model's cached entries for them if asked."""
        ctx = cb.get_context(sample)
        for side in cb.parse_sides(self.cfg.context_sides):
            if not cb.get_side(side).from_hypotheses:
                continue
            try:
                ctx = cb.replace_side(ctx, side, self.hypotheses, self.tgt_dict.pad(),
                                      cache_entries=self.model_cache if with_cache else None)
            except KeyError as e:
                raise RuntimeError(
                    f"document-order inference: sentence {e.args[0]} is context of this batch "
                    "but has not been translated yet (batches must come in document order: "
                    "use --target-context reference for oracle context)"
                ) from None
        return cb.with_context(sample, ctx)


class _captured_output:
    """``with _captured_output(model) as c:`` — ``c.output``, the output of the first call of
    ``model`` inside the block (``None`` if there is none): a forward hook, whatever calls it
    (the criterion)."""

    def __init__(self, model):
        self.model, self.output = model, None

    def __enter__(self):
        def hook(module, args, output):
            if self.output is None:
                self.output = output

        self.handle = self.model.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


class _captured_encoder_out:
    """Within the block, the encoder output fairseq's generator computes (its model's
    ``forward_encoder``; single model) is kept in the list it yields."""

    def __init__(self, generator):
        self.model = getattr(generator, "model", None) if generator is not None else None
        self.found = []

    def __enter__(self):
        fe = getattr(self.model, "forward_encoder", None)
        if fe is None:
            self.model = None
            return self.found

        def capture(net_input):
            out = fe(net_input)
            if out is not None and len(out) == 1:
                self.found.append(out[0])
            return out

        self.model.forward_encoder = capture
        return self.found

    def __exit__(self, *exc):
        if self.model is not None:
            del self.model.forward_encoder
        return False
