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
import os
from typing import Optional

import numpy as np
import torch
from dataclasses import dataclass, field

from fairseq import metrics, utils
from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from ..data import context_batch as cb
from ..data import context_variants as cv
from ..data import segments as seg
from ..data.doc_index import DocIndex, balanced_shards, check_shard, doc_index_path
from ..data.document_dataset import DocumentPairDataset
from ..data.pretrained import PretrainedText
from ..errors import UsageError
from ..models import document_context as dc
from ..models import sentence_init
from ..models.segment_model import SegmentModel
from . import context_settings as cs
from .context_settings import ADOPTED_SETTINGS, NAMED_SETTINGS
from .context_settings import set_cfg as _set_cfg
from .document_order import DocumentOrderMemory
from .language_tokens import LanguageTokens
from .length_limits import binarized_files, check_prefix, limit_each_row, sample_too_long_message
from .segment_decoding import SEGMENT_SENTENCES, SegmentDecoding

logger = logging.getLogger(__name__)

TARGET_CONTEXT_CHOICES = ("reference", "hypothesis")
DOC_BATCHING_CHOICES = ("auto", "runs", "grouped-runs", "sentences")
DOC_MODE_CHOICES = ("sentences", "segments")
#: --validate-cxmi: the sums a validation batch adds to its logging output (summed over batches
#: and workers like fairseq's --eval-bleu counts): target tokens, and the summed per-token
#: log-probability differences true - none and random - none (nats)
CXMI_TOKENS, CXMI_TRUE_NONE, CXMI_RANDOM_NONE = "_cxmi_tokens", "_cxmi_true_none", "_cxmi_random_none"
CXMI_SUMS = (CXMI_TOKENS, CXMI_TRUE_NONE, CXMI_RANDOM_NONE)
#: training default of --context-sides (at inference: the checkpoint's); that of
#: --context-size is :data:`~fairseq_docctx.models.document_context.DEFAULT_CONTEXT_SIZE`
DEFAULT_CONTEXT_SIDES = "source"


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
    doc_mode: Optional[ChoiceEnum(DOC_MODE_CHOICES)] = field(
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


@contextlib.contextmanager
def lr_scaled_groups(optimizer, model):
    """For the duration of one optimizer step: the trainable parameters of ``model`` with a
    learning-rate scale s (fairseq's ``optim_overrides`` attribute,
    :func:`~fairseq_docctx.models.sentence_init.lr_scale`, e.g. ``--lr-scale-pretrained``) in
    parameter groups of their own, one per scale, each a copy of its group's settings with
    the learning rate the scheduler set times s; afterwards the optimizer's groups are
    exactly as before, so its state and checkpoints keep fairseq's layout. Nothing changes
    when no parameter has a scale, nor under fairseq's ``composite`` optimizer, which groups
    on the same attributes itself. A scaled parameter the optimizer does not hold as such
    (fairseq's flattened fp16 copy) is an error naming ``--fp16-no-flatten-grads``."""
    scaled = {id(p) for p in model.parameters() if p.requires_grad and sentence_init.lr_scale(p) != 1.0}
    if not scaled or getattr(optimizer, "supports_groups", False):
        yield
        return
    groups = optimizer.param_groups
    originals = [(g, g["params"]) for g in groups]
    added, found = [], 0
    for g, params in originals:
        by_scale, keep = {}, []
        for p in params:
            s = sentence_init.lr_scale(p)
            (keep if s == 1.0 else by_scale.setdefault(s, [])).append(p)
        if by_scale:
            g["params"] = keep
            for s, ps in by_scale.items():
                added.append({**g, "params": ps, "lr": g["lr"] * s})
                found += len(ps)
    if found != len(scaled):
        for g, params in originals:
            g["params"] = params
        raise UsageError(f"--lr-scale-pretrained: the optimizer holds {found} of the {len(scaled)} parameters "
                         "with a learning-rate scale as parameters of their own (fairseq's fp16 training "
                         "flattens them into one: add --fp16-no-flatten-grads)")
    groups.extend(added)
    try:
        yield
    finally:
        del groups[len(originals):]
        for g, params in originals:
            g["params"] = params


def dictionary_digest(d, separator: Optional[str] = None) -> str:
    """A digest of a fairseq ``Dictionary``'s words in order (counts ignored; the context
    separator, which the task adds when missing, left out)."""
    import hashlib

    words = [w for w in d.symbols if w != separator]
    return hashlib.sha1("\n".join(words).encode("utf-8")).hexdigest()[:16]


def _encoder_name(args, kind: str) -> Optional[str]:
    """The name a tokenizer/BPE configuration gives (``--tokenizer``/``--bpe``), ``None`` when
    it gives none (fairseq-generate passes ``cfg.tokenizer``/``cfg.bpe``: ``None`` or a config
    with ``_name``; an argparse namespace has the option as an attribute)."""
    if args is None:
        return None
    name = getattr(args, "_name", None)
    if name is None and not hasattr(args, "_name"):
        name = getattr(args, kind, None)
    return None if name in (None, "", "none") else str(name)


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
        #: the context settings given on the command line (not defaulted): a checkpoint's
        #: settings are taken for the others (:meth:`adopt_context_settings`)
        self.given_context = {k for k in ADOPTED_SETTINGS if getattr(cfg, k, None) is not None}
        #: by split: its binarized (source, target) files and its documents, for the
        #: messages that name a sentence (:meth:`filter_indices_by_size`)
        self.split_files = {}
        #: whether :meth:`build_model` has built a model (whose contract is :attr:`model_spec`)
        self.built_model = False
        if getattr(cfg, "doc_mode", None) is None:
            _set_cfg(cfg, "doc_mode", "sentences")
        if getattr(cfg, "max_segment_tokens", None) is None:
            _set_cfg(cfg, "max_segment_tokens", seg.DEFAULT_MAX_SEGMENT_TOKENS)
        if getattr(cfg, "segment_packing", None) is None:
            _set_cfg(cfg, "segment_packing", seg.DEFAULT_SEGMENT_PACKING)
        if cfg.context_size is None:  # segments hold their own context: K is 0
            _set_cfg(cfg, "context_size", 0 if cfg.doc_mode == "segments" else dc.DEFAULT_CONTEXT_SIZE)
        if cfg.context_sides is None:
            _set_cfg(cfg, "context_sides", DEFAULT_CONTEXT_SIDES)
        if cfg.context_size < 0:
            raise UsageError("--context-size must be >= 0")
        p = float(getattr(cfg, "coword_dropout", 0.0) or 0.0)
        if not 0 <= p < 1:  # NaN included
            raise UsageError(f"--coword-dropout {p:g}: a probability below 1 and at least 0 (0: off)")
        cb.parse_sides(cfg.context_sides)  # a clear error for an unknown side
        self.check_doc_mode()
        if getattr(cfg, "validate_cxmi", False) and self.segments:
            raise UsageError("--validate-cxmi with --doc-mode segments: a segment holds its context inside it, "
                             "validation batches have no context to take away or swap; measure a segment model "
                             "with docctx-score cxmi")
        #: the language tokens of a pretrained family's data (:mod:`.language_tokens`), the
        #: decoding of segments and its counts (:mod:`.segment_decoding`), the memory of
        #: document-order inference (:mod:`.document_order`)
        self.language_tokens = LanguageTokens(self)
        self.segment_decoding = SegmentDecoding(self)
        self.document_order = DocumentOrderMemory(self)
        #: the contract of the last built model (batching of --doc-batching auto)
        self.model_spec = dc.SENTENCE_LEVEL

    @property
    def pretrained_text(self) -> Optional[PretrainedText]:
        """The raw text <-> tokens of a data folder written by ``docctx-prepare --pretrained``
        (:attr:`.language_tokens.LanguageTokens.text`), ``None`` for other data."""
        return self.language_tokens.text

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

    def check_doc_mode(self):
        """Refuse settings that segments cannot honour, naming the option to change."""
        if self.cfg.doc_mode not in DOC_MODE_CHOICES:
            raise UsageError(f"--doc-mode {self.cfg.doc_mode}: one of {', '.join(DOC_MODE_CHOICES)}")
        if not self.segments:
            return
        if int(self.cfg.context_size) > 0 and "context_size" not in self.given_context:
            # the default K, or a sentence-level checkpoint's: segments have no context tables
            logger.info(f"--doc-mode segments: --context-size 0 (not {self.cfg.context_size}): a "
                        "segment holds its own context")
            _set_cfg(self.cfg, "context_size", 0)
        if int(self.cfg.context_size) > 0:
            raise UsageError(
                f"--doc-mode segments with --context-size {self.cfg.context_size}: a segment "
                "holds its own context (the sentences before each sentence in it), there are no "
                "context tables; leave out --context-size (or give 0)"
            )
        if int(self.cfg.max_segment_tokens) < 1:
            raise UsageError(f"--max-segment-tokens {self.cfg.max_segment_tokens}: must be at least 1")
        if str(self.cfg.segment_packing) not in seg.SEGMENT_PACKINGS:
            raise UsageError(f"--segment-packing {self.cfg.segment_packing}: one of "
                             f"{', '.join(seg.SEGMENT_PACKINGS)}")

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        if task.uses_context or task.segments:
            task.add_separator()
        return task

    def add_separator(self):
        sep = self.cfg.context_separator
        for d in {id(self.src_dict): self.src_dict, id(self.tgt_dict): self.tgt_dict}.values():
            if sep not in d.indices:
                logger.warning(
                    f"context separator {sep} is not in the dictionary: adding it "
                    "(docctx-prepare puts it there for you)"
                )
                d.add_symbol(sep)

    def adopt_context_settings(self, saved, where="the checkpoint", arch=None):
        """Take the context settings of a checkpoint (``saved``: its task config or model
        args) for those not given, refuse a given one that differs unless
        ``--context-override`` (:func:`.context_settings.adopt`)."""
        cs.adopt(self, saved, where, arch)

    # ------------------------------------------------------------------ data
    def load_dataset(self, split, epoch=1, combine=False, task_cfg=None, **kwargs):
        if task_cfg is not None:  # fairseq-generate: the checkpoint's task config
            self.adopt_context_settings(task_cfg)
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        docs = self.load_doc_index(data_path, split, len(pair), combine)
        self.split_files[split] = (binarized_files(data_path, split, self.cfg.source_lang, self.cfg.target_lang),
                                   docs)
        if self.segments:
            self.datasets[split] = self.segment_dataset(split, pair, docs)
            return
        if docs.num_context_only:
            logger.info(f"{split}: {docs.num_context_only} of {docs.num_sentences} sentences are "
                        "context only (pairs docctx-prepare's filters removed from the training "
                        "targets): context of the next sentences, never a target")
        ds = self.datasets[split] = DocumentPairDataset(
            pair,
            docs,
            context_size=self.cfg.context_size,
            context_sides=self.context_sides,
            shuffle=(split != "test"),
            run_length=self.cfg.doc_run_length,
            # inference reads its own translations: decode in document order
            position_major=(split != self.cfg.train_subset and self.hypothesis_context),
            side_data=self.load_side_data(split, data_path, pair),
        )
        if getattr(self.cfg, "validate_cxmi", False) and ds.has_context and split != self.cfg.train_subset:
            ds.set_context_variants(self.cxmi_seed)

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

    def segment_dataset(self, split, pair, docs: DocIndex) -> seg.SegmentPairDataset:
        """``--doc-mode segments``: the split's sentences packed into segments under
        ``--max-segment-tokens`` and ``--segment-packing``
        (:func:`~fairseq_docctx.data.segments.plan_segments`; ``--multi-resolution`` on the
        training split). The training split is packed on the lengths of both sides; every
        other split on the source's alone, as the hub and ``docctx-translate`` pack raw
        documents, so that ``fairseq-generate`` decodes a test set in the same segments. With
        ``--num-shards N --shard-id I`` (generation) only the documents of shard I are
        packed; the sentence ids stay the split's."""
        training = split == self.cfg.train_subset
        documents = None
        if not training:
            try:
                num_shards, shard_id = int(self.cfg.num_shards or 1), int(self.cfg.shard_id or 0)
            except Exception:
                num_shards, shard_id = 1, 0
            if num_shards > 1:
                documents = balanced_shards(docs.lengths, num_shards)[check_shard(num_shards, shard_id)]
        plan = seg.plan_segments(
            docs, pair.src_sizes, pair.tgt_sizes if training else None, int(self.cfg.max_segment_tokens),
            multi_resolution=training and bool(self.cfg.multi_resolution), documents=documents,
            packing=str(self.cfg.segment_packing),
        )
        logger.info(f"{split}: {plan.describe()} ({docs.num_sentences:,} sentences in "
                    f"{len(docs) if documents is None else len(documents):,} documents)")
        if len(plan.long_sentences):
            shown = ", ".join(map(str, plan.long_sentences[:10].tolist()))
            logger.warning(
                f"{split}: {len(plan.long_sentences)} sentences are over --max-segment-tokens "
                f"{plan.max_tokens} on their own ({plan.packing} packing): each is a segment of its "
                f"own (sentences {shown}{', ...' if len(plan.long_sentences) > 10 else ''})"
            )
        if plan.context_only:
            logger.info(f"{split}: {plan.context_only} of {docs.num_sentences} sentences are "
                        "context only (pairs docctx-prepare's filters removed from the training "
                        "targets): never in a segment, segments end before them")
        sep = self.cfg.context_separator
        return seg.SegmentPairDataset(pair, plan, self.src_dict.index(sep), shuffle=(split != "test"),
                                      target_separator=self.tgt_dict.index(sep))

    def load_side_data(self, split, data_path, pair) -> dict:
        """The sentences of the context sides that are not in the pair dataset: each such
        side's ``load(task, split, data_path, pair)`` hook
        (:class:`~fairseq_docctx.data.context_batch.ContextSide`), one sentence per sentence
        of ``pair``; a side whose hook returns ``None`` is absent from this split's batches."""
        found = {}
        for side in self.context_sides:
            spec = cb.get_side(side)
            if spec.item_key is not None or spec.load is None:
                continue
            data = spec.load(self, split, data_path, pair)
            if data is None:
                logger.warning(f"{split}: no {side!r} context sentences in {data_path}: the "
                               f"batches of {split} carry no {side!r} side")
                continue
            if len(data) != len(pair):
                raise UsageError(f"{data_path}: the {side!r} sentences of '{split}' are "
                                 f"{len(data)}, the binarized data has {len(pair)} sentences")
            found[side] = data
        return found

    def load_doc_index(self, data_path, split, num_sentences, combine) -> DocIndex:
        """The document index of ``split`` (shards ``split1``, ``split2``... concatenated
        like fairseq concatenates the binarized shards)."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        parts, k = [], 0
        while True:
            split_k = split + (str(k) if k > 0 else "")
            found = [
                p
                for p in (
                    doc_index_path(data_path, split_k, src, tgt),
                    doc_index_path(data_path, split_k, tgt, src),
                )
                if os.path.exists(p)
            ]
            if not found:
                break
            parts.append(DocIndex.read(found[0]))
            k += 1
            if not combine:
                break
        if not parts:
            if self.uses_context or self.segments:
                raise FileNotFoundError(
                    f"no document index {doc_index_path(data_path, split, src, tgt)}: "
                    "prepare the data with docctx-prepare (or write one line "
                    "'<doc id>\\t<number of sentences>' per document), or train with "
                    + ("--doc-mode sentences" if self.segments else "--context-size 0")
                )
            return DocIndex.single_sentence_documents(num_sentences)
        docs = DocIndex.concat(parts)
        if docs.num_sentences != num_sentences:
            raise UsageError(
                f"{data_path}: the document index of '{split}' covers "
                f"{docs.num_sentences} sentences, the binarized data has {num_sentences}"
            )
        return docs

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None,
                           max_positions=None, ignore_invalid_inputs=False,
                           required_batch_size_multiple=1, seed=1, num_shards=1,
                           shard_id=0, num_workers=0, epoch=1, data_buffer_size=0,
                           disable_iterator_cache=False, skip_remainder_batch=False,
                           grouped_shuffling=False, update_epoch_batch_itr=False, **kwargs):
        shard = self.generation_shard(dataset)
        if shard is None and not (isinstance(dataset, DocumentPairDataset) and dataset.has_context):
            itr = super().get_batch_iterator(
                dataset, max_tokens=max_tokens, max_sentences=max_sentences,
                max_positions=max_positions, ignore_invalid_inputs=ignore_invalid_inputs,
                required_batch_size_multiple=required_batch_size_multiple, seed=seed,
                num_shards=num_shards, shard_id=shard_id, num_workers=num_workers,
                epoch=epoch, data_buffer_size=data_buffer_size,
                disable_iterator_cache=disable_iterator_cache,
                skip_remainder_batch=skip_remainder_batch,
                grouped_shuffling=grouped_shuffling,
                update_epoch_batch_itr=update_epoch_batch_itr,
            )
            if isinstance(dataset, seg.SegmentPairDataset) and dataset is not self.datasets.get(self.cfg.train_subset):
                # the segments this iterator hands this worker (fairseq's ShardedIterator:
                # every num_shards-th batch from shard_id)
                self.segment_decoding.start_run(sum(len(b) for b in itr.frozen_batches[shard_id::max(num_shards, 1)]))
            return itr
        if dataset.position_major:
            # In distributed training fairseq's trainer hands each worker every num_shards-th
            # batch of the validation split: right for the validation loss, which reads the
            # references as target context; document-order inference, which needs the
            # translations of the previous sentences on the same worker, refuses such an
            # iterator (inference_step).
            self.document_order_shards = max(int(num_shards or 1), 1)
            self.document_order.clear()
        # Document batching: runs are re-drawn every epoch, so the batch sampler is a
        # callable that EpochBatchIterator calls once per epoch.
        dataset.set_epoch(epoch)
        if dataset.has_context:
            dataset.set_doc_batching(self.doc_batching, self.model_spec.context_token_cost)
            # context sentences the batches never check (context-only ones, skipped long
            # ones) are cut to what the model's positions allow
            dataset.set_context_max_positions(max_positions)

        def make_batches(dataset, epoch):
            with data_utils.numpy_seed(seed + epoch):
                indices = dataset.ordered_indices()
            if shard is not None:  # this shard's documents, in the order of the whole split
                indices = indices[np.isin(indices, shard)]
            if max_positions is not None:
                indices = self.filter_indices_by_size(
                    indices, dataset, max_positions, ignore_invalid_inputs
                )
            return dataset.batch_by_size(
                indices, max_tokens=max_tokens, max_sentences=max_sentences,
                required_batch_size_multiple=required_batch_size_multiple,
            )

        return iterators.EpochBatchIterator(
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=make_batches,
            seed=seed,
            num_shards=num_shards,
            shard_id=shard_id,
            num_workers=num_workers,
            epoch=epoch,
            buffer_size=data_buffer_size,
            skip_remainder_batch=skip_remainder_batch,
            grouped_shuffling=grouped_shuffling,
        )

    def generation_shard(self, dataset) -> Optional[np.ndarray]:
        """With ``--num-shards N`` (N > 1) and ``--shard-id I``: the corpus indices of the
        sentences of shard I of a split that is not the training split, whole documents
        balanced by sentence count (:func:`~fairseq_docctx.data.doc_index.balanced_shards`);
        ``None`` otherwise. The sentence ids stay the split's own, so the outputs of the N
        shards merged by id are the output of the whole split."""
        try:  # absent from older configurations, unresolvable outside a whole configuration
            num_shards, shard_id = int(self.cfg.num_shards or 1), int(self.cfg.shard_id or 0)
        except Exception:
            num_shards, shard_id = 1, 0
        check_shard(num_shards, shard_id)
        if (num_shards == 1 or not isinstance(dataset, DocumentPairDataset)
                or dataset is self.datasets.get(self.cfg.train_subset)):
            return None
        shard = dataset.docs.shard_sentences(num_shards, shard_id)
        if len(shard) == 0:
            raise UsageError(f"--shard-id {shard_id} of --num-shards {num_shards}: the split has "
                             f"{len(dataset.docs)} documents, shard {shard_id} gets none: use at "
                             f"most {len(dataset.docs)} shards")
        return shard

    # ---------------------------------------------------------------- models
    @property
    def doc_batching(self) -> str:
        """How training batches are formed: --doc-batching, ``auto`` resolved by the
        contract of the last built model (``runs`` for sentence-level models)."""
        mode = self.cfg.doc_batching
        if mode == "auto":
            mode = self.model_spec.doc_batching
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
        self.model_spec = dc.context_spec(model)
        self.built_model = True
        if self.coword_mask_index() is not None and dc.reads_segments(model):
            raise UsageError(f"--coword-dropout: {type(model).__name__} translates segments, whose sentences are "
                             "one another's context: there is no current sentence to mask apart from its context")
        if isinstance(model, SegmentModel):  # kept out of g_transformer's word masking
            model.set_language_tokens(self.language_tokens.ids())
        if self.uses_context and not self.model_spec.reads_context:
            logger.info(
                f"{model.__class__.__name__} does not read document context: it is "
                "trained and decoded at sentence level"
            )
        if getattr(self.cfg, "validate_cxmi", False) and not from_checkpoint and not self.model_spec.reads_context:
            logger.warning(f"--validate-cxmi does nothing: {model.__class__.__name__} reads no document context "
                           f"(--context-size {self.cfg.context_size}, --context-sides {self.cfg.context_sides}), "
                           "its CXMI is 0; validation scores each batch once")
        if not from_checkpoint and isinstance(cfg, argparse.Namespace):
            # recorded with the model's args, read back at inference (:meth:`build_model`)
            for name in ADOPTED_SETTINGS:  # plain values (a choice is an enum of fairseq's)
                value = getattr(self.cfg, name)
                setattr(cfg, name, str(value) if name in NAMED_SETTINGS else value)
            cfg.dictionary_digests = self.dictionary_digests()
            cfg.dictionary_sizes = self.dictionary_sizes()
            # the language pair, for a checkpoint deployed beside its dictionaries alone
            cfg.language_pair = f"{self.cfg.source_lang}-{self.cfg.target_lang}"
        elif from_checkpoint:
            mismatch = self.dictionary_mismatch(getattr(cfg, "dictionary_digests", None))
            if mismatch:
                raise UsageError(self._dictionary_message(mismatch, getattr(cfg, "dictionary_sizes", None)))
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
        (:func:`lr_scaled_groups`)."""
        with lr_scaled_groups(optimizer, model):
            super().optimizer_step(optimizer, model, update_num)

    def build_generator(self, models, args, **kwargs):
        """fairseq's generator, every row's length limit (``--max-len-a``, ``--max-len-b``) from
        its own source length, not from the batch's width as in fairseq
        (:func:`~fairseq_docctx.tasks.length_limits.limit_each_row`), so that a sentence's
        translation does not depend on what it is batched with. Segment models get the
        decoding rules of the task's options
        (:meth:`.segment_decoding.SegmentDecoding.set_rules`) and, on data with language
        tokens, the tokens every sentence of a segment starts with; the target language token
        is left out of the printed translations
        (:meth:`.language_tokens.LanguageTokens.generator_kwargs`)."""
        if self.segments:
            self.language_tokens.set_sentence_starts(models)
        kwargs = self.language_tokens.generator_kwargs(kwargs)
        self.segment_decoding.set_rules(models, getattr(args, "min_len", 1))
        return limit_each_row(super().build_generator(models, args, **kwargs))

    def build_tokenizer(self, args):
        """fairseq's tokenizer of ``--tokenizer``; without one, on data of a pretrained
        ``transformer`` model (``docctx-prepare --pretrained``), the family's Moses
        tokenizer of the target language: ``fairseq-generate`` detokenizes its D- lines with it."""
        text = self.pretrained_text
        if _encoder_name(args, "tokenizer") is None and text is not None and text.moses:
            return text.step(self.cfg.source_lang, self.cfg.target_lang, tokenizer=True)
        return super().build_tokenizer(args)

    def build_bpe(self, args):
        """fairseq's BPE of ``--bpe``; without one, on data written by ``docctx-prepare
        --pretrained``, the release's segmentation (its SentencePiece model, or its fastBPE
        codes): ``fairseq-generate``'s D- lines are then plain text."""
        text = self.pretrained_text
        if _encoder_name(args, "bpe") is None and text is not None:
            return text.step(self.cfg.source_lang, self.cfg.target_lang)
        return super().build_bpe(args)

    def dictionary_sizes(self) -> str:
        """``"<source types>,<target types>"`` (recorded in a model's args beside
        :meth:`dictionary_digests`, so that a mismatch can say whether the sizes differ)."""
        return f"{len(self.src_dict)},{len(self.tgt_dict)}"

    def _dictionary_message(self, side: str, recorded_sizes: Optional[str]) -> str:
        fix = "give the data directory it was trained on"
        ours = len(self.src_dict if side == "source" else self.tgt_dict)
        theirs = None
        if recorded_sizes:
            try:
                theirs = int(recorded_sizes.split(",")[0 if side == "source" else 1])
            except (ValueError, IndexError):
                theirs = None
        if theirs is not None and theirs != ours:
            return (f"the model was trained with a {theirs:,}-type {side} dictionary, {self.cfg.data} has "
                    f"{ours:,}: {fix}")
        if theirs is not None:
            return (f"the model was trained with another {side} dictionary than {self.cfg.data}'s "
                    f"(same size, other words): {fix}")
        return (f"the model was trained with another {side} dictionary than {self.cfg.data}'s "
                f"({ours:,} types; other words or another size): {fix}")

    def dictionary_digests(self) -> str:
        """``"<source digest>,<target digest>"`` of the dictionaries' words (recorded in a
        model's args, so that a checkpoint paired with other dictionaries of the same size is
        refused without its training data directory)."""
        return ",".join(dictionary_digest(d, self.cfg.context_separator)
                        for d in (self.src_dict, self.tgt_dict))

    def dictionary_mismatch(self, recorded: Optional[str]) -> Optional[str]:
        """``"source"``/``"target"`` when the dictionary digests a checkpoint recorded differ
        from this task's dictionaries, else ``None`` (also for checkpoints without them)."""
        if not recorded:
            return None
        for name, theirs, ours in zip(("source", "target"), recorded.split(","),
                                      self.dictionary_digests().split(",")):
            if theirs != ours:
                return name
        return None

    def coword_mask_index(self) -> Optional[int]:
        """The index of the mask symbol of ``--coword-dropout`` (``None`` when it is off); a
        source dictionary without the symbol is refused (one line): ``Dictionary.index`` would
        give ``<unk>``'s index for it, and the model would learn to read unknown words as
        dropped ones."""
        p = float(getattr(self.cfg, "coword_dropout", 0.0) or 0.0)
        if p <= 0:  # in [0, 1): checked when the task is set up
            return None
        sym = self.cfg.coword_mask
        if sym not in self.src_dict.indices:
            raise UsageError(f"--coword-dropout: {self.cfg.data}'s source dictionary has no {sym} (the mask): "
                             f"prepare the data with docctx-prepare --mask-symbol {sym}")
        return self.src_dict.index(sym)

    def coword_dropout(self, sample, model):
        """``sample`` with CoWord dropout applied (Fernandes et al. 2021, §3): a copy whose
        current source sentences (``net_input["src_tokens"]``) have each word replaced by the
        mask with probability ``--coword-dropout``; the context (the batch's context tables,
        which hold their own copy of every sentence), the target and the decoder input are
        untouched. Words are the tokens past fairseq's special symbols other than the separator,
        the mask and the data's language tokens (``</s>`` stays, where the authors' code masks
        it too: docs/context-usage.md). The segment models, whose sentences are one another's
        context, are refused when they are built (:meth:`build_model`)."""
        mask = self.coword_mask_index()
        if mask is None or "net_input" not in sample or dc.reads_segments(model):
            return sample
        src = sample["net_input"]["src_tokens"]
        word = src.ge(self.src_dict.nspecial) & src.ne(mask)
        for tok in (self.src_dict.index(self.cfg.context_separator), *self.language_tokens.ids()):
            word &= src.ne(tok)
        drop = word & (torch.rand(src.shape, device=src.device) < float(self.cfg.coword_dropout))
        return {**sample, "net_input": {**sample["net_input"], "src_tokens": src.masked_fill(drop, mask)}}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if dc.context_spec(model).packs_training_output and getattr(criterion, "ignore_prefix_size", 0) > 0:
            # fairseq's criteria cut the prefix off the [B, T, V] output: not that of packed positions
            raise UsageError(f"{model.__class__.__name__} packs its training output (real "
                             "target positions only): --ignore-prefix-size is not supported")
        sample = self.coword_dropout(dc.sample_for_model(sample, model), model)
        return super().train_step(
            self.language_tokens.place(sample), model, criterion, optimizer, update_num, ignore_grad
        )

    def valid_step(self, sample, model, criterion):
        """fairseq's validation step; with ``--validate-cxmi`` (a model that reads context) the
        batch's references are also scored with no context and with a random document's
        context, the batch's context variants (:meth:`cxmi_sums`)."""
        true = self.language_tokens.place(dc.sample_for_model(sample, model))
        if not self.validates_cxmi(model):
            return super().valid_step(true, model, criterion)
        with _captured_output(model) as captured:  # the criterion's forward pass: the true context's scores
            loss, sample_size, logging_output = super().valid_step(true, model, criterion)
        logging_output.update(self.cxmi_sums(sample, model, captured.output))
        return loss, sample_size, logging_output

    @property
    def cxmi_seed(self) -> int:
        """The seed of ``--validate-cxmi``'s random contexts: fairseq's ``--seed`` (1 where the
        configuration does not resolve it, e.g. a task made by hand)."""
        try:
            return int(self.cfg.seed)
        except Exception:
            return 1

    def validates_cxmi(self, model) -> bool:
        """Whether validation measures CXMI: ``--validate-cxmi`` and a model that reads context."""
        return bool(getattr(self.cfg, "validate_cxmi", False)) and dc.reads_context(model) and not self.segments

    def cxmi_sums(self, sample, model, true_output=None) -> dict:
        """The CXMI sums of a validation batch (:data:`CXMI_SUMS`) for ``model``, which reads
        context: its target tokens and the sums over them of ``log p(y_t | x, C) - log p(y_t |
        x)`` (true context against none) and of the same with the random context, in nats, each
        reference scored teacher-forced by
        :func:`~fairseq_docctx.models.document_context.target_logprobs` as ``docctx-score
        cxmi`` scores it. ``true_output``: the model's output on ``sample`` as the model reads
        it (:meth:`.language_tokens.LanguageTokens.place`; the criterion's forward pass), else computed here. A batch without context variants — the trainer's
        stand-in for a worker's missing batch, a training batch whose logging output it zeroes
        — runs the same forward passes on itself and adds zeros, so every worker runs as many
        forward passes and logs the same keys."""
        pad = self.tgt_dict.pad()
        read = self.language_tokens.place(sample)
        if true_output is None:
            true_output = model(**read["net_input"])
        true, mask = dc.target_logprobs(model, true_output, read, pad)
        variants = cb.variants(sample)
        diffs = {}
        for name in cv.VARIANTS:
            other = self.language_tokens.place(cb.variant_sample(sample, name)) if variants is not None else read
            lp, _ = dc.target_logprobs(model, model(**other["net_input"]), other, pad)
            diffs[name] = (true - lp).masked_fill(~mask, 0.0).double().sum()
        if variants is None:
            return dict.fromkeys(CXMI_SUMS, 0.0)
        return {CXMI_TOKENS: float(mask.sum()), CXMI_TRUE_NONE: float(diffs[cv.NONE]),
                CXMI_RANDOM_NONE: float(diffs[cv.NONE] - diffs[cv.RANDOM])}

    def reduce_metrics(self, logging_outputs, criterion):
        """fairseq's metrics; with ``--validate-cxmi`` also ``cxmi`` (true - none),
        ``cxmi_random`` (random - none) and ``cxmi_true_vs_random`` (true - random), nats per
        target token: the sums of :meth:`cxmi_sums` over the batches and workers of the
        validation, divided by its target tokens (derived metrics, so also selectable with
        ``--best-checkpoint-metric``)."""
        super().reduce_metrics(logging_outputs, criterion)
        if not any(CXMI_TOKENS in log for log in logging_outputs):
            return
        for key in CXMI_SUMS:
            total = sum(log.get(key, 0) for log in logging_outputs)
            metrics.log_scalar(key, float(total.cpu()) if torch.is_tensor(total) else float(total))

        def per_token(numerator):
            def fn(meters):
                tokens = meters[CXMI_TOKENS].sum
                return round(float(numerator(meters) / tokens), 4) if tokens > 0 else 0.0
            return fn

        metrics.log_derived("cxmi", per_token(lambda m: m[CXMI_TRUE_NONE].sum))
        metrics.log_derived("cxmi_random", per_token(lambda m: m[CXMI_RANDOM_NONE].sum))
        metrics.log_derived("cxmi_true_vs_random", per_token(lambda m: m[CXMI_TRUE_NONE].sum - m[CXMI_RANDOM_NONE].sum))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Beam search of a batch as the models read it (the target language token forced
        first on data with language tokens: :meth:`.language_tokens.LanguageTokens.prefix`);
        in document-order inference (``--target-context hypothesis``) with the model's own
        translations as target context (:meth:`.document_order.DocumentOrderMemory.
        inference_step`); a batch of segments (``--doc-mode segments``) decoded and given back
        one hypothesis list per sentence (:meth:`.segment_decoding.SegmentDecoding.
        inference_step`)."""
        if self.segments and sample.get(SEGMENT_SENTENCES) is not None:
            return self.segment_decoding.inference_step(generator, models, sample, prefix_tokens, constraints)
        sample = dc.sample_for_model(sample, models)
        if prefix_tokens is None:  # the target language token first (data with language tokens)
            prefix_tokens = self.language_tokens.prefix(sample)
        check_prefix(generator, sample, prefix_tokens, self.tgt_dict.pad())
        if not self.hypothesis_context:  # batches are length-sorted: nothing to do
            return self.language_tokens.generate(generator, models, sample, prefix_tokens=prefix_tokens,
                                                 constraints=constraints)
        return self.document_order.inference_step(generator, models, sample, prefix_tokens, constraints)


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
