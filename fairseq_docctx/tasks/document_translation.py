"""The ``document_translation`` task: fairseq's ``translation`` plus document context.

With ``--context-size 0`` (or ``--context-sides none``) it is exactly fairseq's translation
task: same datasets, same batches, same loss. Otherwise every batch also carries the K
previous sentences of each sentence (see :mod:`fairseq_docctx.data.document_dataset`; the
layout: :mod:`fairseq_docctx.data.context_batch`). What a model reads of it, and how it wants
its batches, is its contract (:mod:`fairseq_docctx.models.document_context`).

Context settings at inference: ``--context-size`` and ``--context-sides`` default to those the
checkpoint was trained with; a command-line value that differs is used, with a warning.
"""
import argparse
import logging
import os
from typing import Optional

import numpy as np
import torch
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, open_dict

from ..data import context_batch as cb
from ..data import length_groups
from ..data.doc_index import DocIndex, check_shard, doc_index_path
from ..data.document_dataset import DocumentPairDataset
from ..models import document_context as dc

logger = logging.getLogger(__name__)

TARGET_CONTEXT_CHOICES = ("reference", "hypothesis")
DOC_BATCHING_CHOICES = ("auto", "runs", "grouped-runs", "sentences")
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
    # fairseq's --num-shards / --shard-id (dataset options, which fairseq-generate itself
    # ignores): generation of shard I of N decodes the documents of that shard only
    num_shards: int = II("dataset.num_shards")
    shard_id: int = II("dataset.shard_id")


def dictionary_digest(d, separator: Optional[str] = None) -> str:
    """A digest of a fairseq ``Dictionary``'s words in order (counts ignored; the context
    separator, which the task adds when missing, left out)."""
    import hashlib

    words = [w for w in d.symbols if w != separator]
    return hashlib.sha1("\n".join(words).encode("utf-8")).hexdigest()[:16]


def _set_cfg(cfg, name, value):
    try:
        with open_dict(cfg):
            setattr(cfg, name, value)
    except Exception:  # a plain namespace
        setattr(cfg, name, value)


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
        #: the context settings given on the command line (not defaulted): a checkpoint's
        #: settings are taken for the others (:meth:`adopt_context_settings`)
        self.given_context = {k for k in ("context_size", "context_sides")
                              if getattr(cfg, k, None) is not None}
        self._warned = set()
        if cfg.context_size is None:
            _set_cfg(cfg, "context_size", dc.DEFAULT_CONTEXT_SIZE)
        if cfg.context_sides is None:
            _set_cfg(cfg, "context_sides", DEFAULT_CONTEXT_SIDES)
        if cfg.context_size < 0:
            raise ValueError("--context-size must be >= 0")
        cb.parse_sides(cfg.context_sides)  # a clear error for an unknown side
        #: document-order inference memory, by corpus index of a decoded sentence: its best
        #: translation (target token ids ending in EOS), the target context of the next
        #: sentences, and whatever the model caches (see :meth:`inference_step`). A sentence
        #: is forgotten once the sentence K positions later has been decoded, or its
        #: document is done (:meth:`forget`).
        self.hypotheses = {}
        self.model_cache = {}
        #: the contract of the last built model (batching of --doc-batching auto)
        self.model_spec = dc.SENTENCE_LEVEL

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

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        if task.uses_context:
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

    def adopt_context_settings(self, saved, where="the checkpoint"):
        """Take the context settings of a checkpoint (``saved``: its task config or model
        args) for those not given on the command line; warn about given ones that differ."""
        for name in ("context_size", "context_sides"):
            value = getattr(saved, name, None)
            if value is None:
                continue
            mine = getattr(self.cfg, name)
            same = (cb.parse_sides(value) == cb.parse_sides(mine) if name == "context_sides"
                    else int(value) == int(mine))
            if same:
                continue
            flag = "--" + name.replace("_", "-")
            if name in self.given_context:
                msg = f"{flag} {mine} differs from {where}'s ({value}): decoding with {mine}"
                if msg not in self._warned:
                    self._warned.add(msg)
                    logger.warning(msg)
            else:
                logger.info(f"{flag} {value} (from {where})")
                _set_cfg(self.cfg, name, value)
        if self.uses_context:
            self.add_separator()

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
        if docs.num_context_only:
            logger.info(f"{split}: {docs.num_context_only} of {docs.num_sentences} sentences are "
                        "context only (pairs docctx-prepare's filters removed from the training "
                        "targets): context of the next sentences, never a target")
        self.datasets[split] = DocumentPairDataset(
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
                raise ValueError(f"{data_path}: the {side!r} sentences of '{split}' are "
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
            if self.uses_context:
                raise FileNotFoundError(
                    f"no document index {doc_index_path(data_path, split, src, tgt)}: "
                    "prepare the data with docctx-prepare (or write one line "
                    "'<doc id>\\t<number of sentences>' per document), or train with "
                    "--context-size 0"
                )
            return DocIndex.single_sentence_documents(num_sentences)
        docs = DocIndex.concat(parts)
        if docs.num_sentences != num_sentences:
            raise ValueError(
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
            return super().get_batch_iterator(
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
        if dataset.position_major:
            if num_shards > 1:
                raise ValueError(
                    "document-order inference (--target-context hypothesis) does not split "
                    "its batches over distributed workers (a sentence needs the translations "
                    "of the previous ones): split the documents with --num-shards N "
                    "--shard-id I instead (docctx-generate runs the N processes and merges)"
                )
            self.hypotheses.clear()
            self.model_cache.clear()
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
            raise ValueError(f"--shard-id {shard_id} of --num-shards {num_shards}: the split has "
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
        model = super().build_model(cfg, from_checkpoint)
        k = dc.check_context(model, self.context_sides, self.cfg.context_size, from_checkpoint)
        if dc.reads_context(model):  # the K it reads, where the hub and generation read it
            model.declare_context(model.context_sides, k)
        self.model_spec = dc.context_spec(model)
        if self.uses_context and not self.model_spec.reads_context:
            logger.info(
                f"{model.__class__.__name__} does not read document context: it is "
                "trained and decoded at sentence level"
            )
        if not from_checkpoint and isinstance(cfg, argparse.Namespace):
            # recorded with the model's args, read back at inference (:meth:`build_model`)
            for name in ("context_size", "context_sides"):
                setattr(cfg, name, getattr(self.cfg, name))
            cfg.dictionary_digests = self.dictionary_digests()
            cfg.dictionary_sizes = self.dictionary_sizes()
            # the language pair, for a checkpoint deployed beside its dictionaries alone
            cfg.language_pair = f"{self.cfg.source_lang}-{self.cfg.target_lang}"
        elif from_checkpoint:
            mismatch = self.dictionary_mismatch(getattr(cfg, "dictionary_digests", None))
            if mismatch:
                raise ValueError(self._dictionary_message(mismatch, getattr(cfg, "dictionary_sizes", None)))
        return model

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

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if dc.context_spec(model).packs_training_output and getattr(criterion, "ignore_prefix_size", 0) > 0:
            # fairseq's criteria cut the prefix off the [B, T, V] output: not that of packed positions
            raise ValueError(f"{model.__class__.__name__} packs its training output (real "
                             "target positions only): --ignore-prefix-size is not supported")
        return super().train_step(
            dc.sample_for_model(sample, model), model, criterion, optimizer, update_num, ignore_grad
        )

    def valid_step(self, sample, model, criterion):
        return super().valid_step(dc.sample_for_model(sample, model), model, criterion)

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
        sample = dc.sample_for_model(sample, models)
        from_hypotheses = self.hypothesis_context and cb.get_context(sample) is not None
        cacher = None
        if from_hypotheses and len(models) == 1 and dc.context_spec(models[0]).caches:
            cacher = models[0].document_cache_entries
        if not self.hypothesis_context:  # batches are length-sorted: nothing to do
            return super().inference_step(
                generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
            )
        if from_hypotheses:
            sample = self.with_hypothesis_context(sample, with_cache=cacher is not None)
        # A position-major batch mixes sentences of any length, and fairseq's generator sets
        # one length limit from the batch's widest source (--max-len-a/b): decode it in
        # groups of similar source length, as sentence-level batches are. Each group costs a
        # whole beam search of per-step overhead, so only clearly different lengths are split.
        B = sample["id"].numel()
        hypos, entries = [None] * B, [None] * B
        for rows in length_groups.length_buckets(sample["net_input"]["src_lengths"], overhead=256):
            sub = self.select_rows(sample, rows)
            with _captured_encoder_out(generator if cacher is not None else None) as captured:
                sub_hypos = super().inference_step(
                    generator, models, sub,
                    prefix_tokens=None if prefix_tokens is None else prefix_tokens.index_select(0, rows),
                    constraints=None if constraints is None else constraints.index_select(0, rows),
                )
            if cacher is not None:
                handed = {**sub, dc.ENCODER_OUT: captured[0]} if captured else sub
                sub_entries = cacher(handed, sub_hypos)
            else:
                sub_entries = [None] * len(sub_hypos)
            for j, r in enumerate(rows.tolist()):
                hypos[r], entries[r] = sub_hypos[j], sub_entries[j]
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

    def forget(self, sentence_ids):
        """Drop the document-order inference memory of these sentences (those of a
        document that is done: no later sentence reads them)."""
        for i in sentence_ids:
            self.hypotheses.pop(i, None)
            self.model_cache.pop(i, None)

    def select_rows(self, sample, rows):
        """The rows ``rows`` of a batch, sources cut to their longest; the context's tables
        are shared (:func:`~fairseq_docctx.data.context_batch.select_rows`)."""
        ni = sample["net_input"]
        if len(rows) == sample["id"].numel() and torch.equal(rows, torch.arange(len(rows), device=rows.device)):
            return sample  # the whole batch in its order
        lengths = ni["src_lengths"].index_select(0, rows)
        src = ni["src_tokens"].index_select(0, rows)
        src = cb.cut_width(src, int(lengths.max()), cb.left_padded(ni["src_tokens"], self.source_dictionary.pad()))
        new_ni = {**ni, "src_tokens": src, "src_lengths": lengths}
        ctx = cb.get_context(sample)
        if ctx is not None:
            new_ni[cb.NET_INPUT_KEY] = cb.select_rows(ctx, rows)
        if ni.get("prev_output_tokens") is not None:
            new_ni["prev_output_tokens"] = ni["prev_output_tokens"].index_select(0, rows)
        sub = {**sample, "id": sample["id"].index_select(0, rows), "nsentences": len(rows),
               "net_input": new_ni}
        if sample.get("target") is not None:
            sub["target"] = sample["target"].index_select(0, rows)
        return sub

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
