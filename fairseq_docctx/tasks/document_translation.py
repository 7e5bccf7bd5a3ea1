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
import logging
from typing import Optional

from dataclasses import dataclass, field

from fairseq import utils
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
from ..data.pretrained import PretrainedText
from ..errors import UsageError
from ..models import document_context as dc
from ..models.segment_model import SegmentModel
from ..models.sentence_init import lr_scaled_groups
from . import context_settings as cs
from . import coword_dropout as coword
from . import cxmi_validation as cxmi
from .context_settings import ADOPTED_SETTINGS
from .document_order import DocumentOrderMemory
from .language_tokens import LanguageTokens
from .length_limits import binarized_files, check_prefix, limit_each_row, split_too_long_message
from .segment_decoding import SEGMENT_SENTENCES, SegmentDecoding

logger = logging.getLogger(__name__)

TARGET_CONTEXT_CHOICES = ("reference", "hypothesis")
DOC_BATCHING_CHOICES = ("auto", "runs", "grouped-runs", "sentences")


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


@register_task("document_translation", dataclass=DocumentTranslationConfig)
class DocumentTranslationTask(TranslationTask):
    """Translate documents sentence by sentence with the previous sentences as context.

    Models that read context follow :class:`~fairseq_docctx.models.document_context.
    DocumentContextModel`; for all other models (fairseq's ``transformer``, ``lstm``, ...)
    the context is removed from the batch (:func:`~fairseq_docctx.models.document_context.
    sample_for_model`), so they train and generate at sentence level through this task.
    """

    cfg: DocumentTranslationConfig

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
        #: the language tokens of a pretrained family's data (:mod:`.language_tokens`), the
        #: decoding of segments and its counts (:mod:`.segment_decoding`), the memory of
        #: document-order inference (:mod:`.document_order`)
        self.language_tokens = LanguageTokens(self)
        self.segment_decoding = SegmentDecoding(self)
        self.document_order = DocumentOrderMemory(self)
        #: the context contract of the last built model (:func:`~fairseq_docctx.models.
        #: document_context.context_spec`; batching of --doc-batching auto)
        self.context_contract = dc.SENTENCE_LEVEL

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
        """The dataset of ``split`` as this task batches it
        (:func:`~fairseq_docctx.data.dataset_builder.task_dataset`); ``split`` ``None``: raw
        input (:meth:`build_dataset_for_inference`)."""
        return db.task_dataset(self, split, pair, docs, data_path, side_data)

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
        (:func:`~fairseq_docctx.tasks.length_limits.split_too_long_message`)."""
        if ignore_invalid_inputs or max_positions is None:
            return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) == 0:
            return kept
        split = next((k for k, v in self.datasets.items() if v is dataset), None)
        files, docs = self.split_files.get(split, ((None, None), None))
        raise UsageError(split_too_long_message(split, dataset, ignored, max_positions, files, docs))

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
        shard = db.generation_shard(dataset, *db.generation_shards(self.cfg), training=training)
        if shard is None and not (isinstance(dataset, DocumentPairDataset) and dataset.has_context):
            itr = super().get_batch_iterator(dataset, **options)
            if isinstance(dataset, seg.SegmentPairDataset) and not training:
                # the segments this iterator hands this worker (fairseq's ShardedIterator:
                # every num_shards-th batch from shard_id)
                self.segment_decoding.start_run(sum(len(b) for b in itr.frozen_batches[shard_id::max(num_shards, 1)]))
            return itr
        if dataset.position_major:  # decoded in document order (its batches on num_shards workers)
            self.document_order.start(num_shards)
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
        if isinstance(model, SegmentModel):  # kept out of g_transformer's word masking
            model.set_language_tokens(self.language_tokens.ids())
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

    def coword_dropout(self, sample, model):
        """``sample`` with ``--coword-dropout`` applied to its current source sentences
        (:func:`.coword_dropout.coword_dropout`; the data's language tokens are never masked)."""
        return coword.coword_dropout(sample, model, self.cfg, self.src_dict, self.language_tokens.ids())

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        dc.check_training_criterion(model, criterion)
        sample = self.language_tokens.place(self.coword_dropout(dc.sample_for_model(sample, model), model))
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        """fairseq's validation step; with ``--validate-cxmi`` (a model that reads context) the
        batch's references are also scored with no context and with a random document's
        context, the batch's context variants (:func:`.cxmi_validation.cxmi_sums`)."""
        true = self.language_tokens.place(dc.sample_for_model(sample, model))
        if not cxmi.validates_cxmi(self.cfg, model, self.segments):
            return super().valid_step(true, model, criterion)
        with cxmi.captured_output(model) as captured:  # the criterion's forward pass: the true context's scores
            loss, sample_size, logging_output = super().valid_step(true, model, criterion)
        pad, place = self.tgt_dict.pad(), self.language_tokens.place
        logging_output.update(cxmi.cxmi_sums(sample, model, pad, place, captured.output))
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        """fairseq's metrics; with ``--validate-cxmi`` also the CXMI figures
        (:func:`.cxmi_validation.reduce_metrics`)."""
        super().reduce_metrics(logging_outputs, criterion)
        cxmi.reduce_metrics(logging_outputs)

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

