"""The ``document_translation`` task: fairseq's ``translation`` plus document context.

With ``--context-size 0`` (or ``--context-sides none``) it is exactly fairseq's translation
task: same datasets, same batches, same loss. Otherwise every batch also carries the K
previous sentences of each sentence (see :mod:`fairseq_docctx.data.document_dataset`).
"""
import logging
import os

import torch
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data import length_groups
from ..data.doc_index import DocIndex, doc_index_path
from ..data.document_dataset import CONTEXT_SIDES, DocumentPairDataset

logger = logging.getLogger(__name__)

TARGET_CONTEXT_CHOICES = ("reference", "hypothesis")
DOC_BATCHING_CHOICES = ("auto", "runs", "grouped-runs", "sentences")


@dataclass
class DocumentTranslationConfig(TranslationConfig):
    context_size: int = field(
        default=3,
        metadata={"help": "number K of previous sentences of the same document given as "
                  "context (0 = sentence-level translation)"},
    )
    context_sides: ChoiceEnum(CONTEXT_SIDES) = field(
        default="source",
        metadata={"help": "which sides of the previous sentences are context"},
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
                  "their context), or 'auto': what the model asks for (its "
                  "``context_batching`` attribute; runs if it says nothing)"},
    )


def model_reads_context(model) -> bool:
    """A model consumes ``net_input["context"]`` if it says so (``reads_document_context``)."""
    return bool(getattr(model, "reads_document_context", False))


@register_task("document_translation", dataclass=DocumentTranslationConfig)
class DocumentTranslationTask(TranslationTask):
    """Translate documents sentence by sentence with the previous sentences as context.

    Models that read context set ``reads_document_context = True`` and accept a
    ``context`` keyword (a dict of tensors) in their forward and encoder forward; for all
    other models (fairseq's ``transformer``, ``lstm``, ...) the context is removed from the
    batch, so they train and generate at sentence level through this task.
    """

    cfg: DocumentTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.context_size < 0:
            raise ValueError("--context-size must be >= 0")
        #: document-order inference memory, by corpus index of a decoded sentence: its best
        #: translation (target token ids ending in EOS), the target context of the next
        #: sentences, and whatever the model caches (see :meth:`inference_step`). A sentence
        #: is forgotten once the sentence K positions later has been decoded.
        self.hypotheses = {}
        self.model_cache = {}
        #: batching the last built model asks for (``context_batching``), for --doc-batching auto
        self.model_batching = None

    @property
    def hypothesis_context(self) -> bool:
        """Target context at inference comes from the model's own translations."""
        return (
            self.cfg.context_size > 0
            and self.cfg.context_sides in ("target", "both")
            and self.cfg.target_context == "hypothesis"
        )

    @property
    def uses_context(self) -> bool:
        return self.cfg.context_size > 0 and self.cfg.context_sides != "none"

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        if cfg.context_size > 0 and cfg.context_sides != "none":
            sep = cfg.context_separator
            for d in {id(task.src_dict): task.src_dict, id(task.tgt_dict): task.tgt_dict}.values():
                if sep not in d.indices:
                    logger.warning(
                        f"context separator {sep} is not in the dictionary: adding it "
                        "(docctx-prepare puts it there for you)"
                    )
                    d.add_symbol(sep)
        return task

    # ------------------------------------------------------------------ data
    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        docs = self.load_doc_index(data_path, split, len(pair), combine)
        self.datasets[split] = DocumentPairDataset(
            pair,
            docs,
            context_size=self.cfg.context_size,
            context_sides=self.cfg.context_sides,
            shuffle=(split != "test"),
            run_length=self.cfg.doc_run_length,
            # inference reads its own translations: decode in document order
            position_major=(split != self.cfg.train_subset and self.hypothesis_context),
        )

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
        if not (isinstance(dataset, DocumentPairDataset) and dataset.has_context):
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
                    "document-order inference (--target-context hypothesis) runs in one "
                    "process: a sentence needs the translations of the previous ones"
                )
            self.hypotheses.clear()
            self.model_cache.clear()
        # Document batching: runs are re-drawn every epoch, so the batch sampler is a
        # callable that EpochBatchIterator calls once per epoch.
        dataset.set_epoch(epoch)
        dataset.batching = self.doc_batching

        def make_batches(dataset, epoch):
            with data_utils.numpy_seed(seed + epoch):
                indices = dataset.ordered_indices()
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

    # ---------------------------------------------------------------- models
    @property
    def doc_batching(self) -> str:
        """How training batches are formed (--doc-batching, auto resolved by the model)."""
        mode = self.cfg.doc_batching
        if mode == "auto":
            mode = self.model_batching or "runs"
        return mode

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        self.model_batching = getattr(model, "context_batching", None)
        if self.uses_context and not model_reads_context(model):
            logger.info(
                f"{model.__class__.__name__} does not read document context: it is "
                "trained and decoded at sentence level"
            )
        return model

    def _for_model(self, sample, model_or_models):
        """Remove the context from the batch for models that do not read it."""
        if sample is None or "net_input" not in sample or "context" not in sample["net_input"]:
            return sample
        if isinstance(model_or_models, (list, tuple, torch.nn.ModuleList)):
            models = list(model_or_models)
        else:
            models = [model_or_models]
        readers = [model_reads_context(m) for m in models]
        if all(readers):
            return sample
        if any(readers):
            raise ValueError("an ensemble must not mix context-aware and sentence-level models")
        net_input = {k: v for k, v in sample["net_input"].items() if k != "context"}
        return {**sample, "net_input": net_input}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if getattr(model, "packs_training_output", False) and getattr(criterion, "ignore_prefix_size", 0) > 0:
            # fairseq's criteria cut the prefix off the [B, T, V] output: not that of packed positions
            raise ValueError(f"{model.__class__.__name__} packs its training output (real "
                             "target positions only): --ignore-prefix-size is not supported")
        return super().train_step(
            self._for_model(sample, model), model, criterion, optimizer, update_num, ignore_grad
        )

    def valid_step(self, sample, model, criterion):
        return super().valid_step(self._for_model(sample, model), model, criterion)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Beam search; in document-order inference (``--target-context hypothesis``) the
        batch's target context is first replaced by the model's own translations.

        Caching protocol: a model may define ``document_cache_entries(sample, hypos)``
        returning one entry (anything, e.g. a dict of tensors) per batch row: the context
        representation of that sentence it wants to keep. The entries of a batch's context
        sentences then come back to it in ``net_input["context"]["cache"]``, a list aligned
        with the rows of ``tgt_tokens``, instead of the model re-running the network over
        those sentences. Single models only (an ensemble recomputes).
        """
        sample = self._for_model(sample, models)
        from_hypotheses = self.hypothesis_context and "context" in sample.get("net_input", {})
        cacher = None
        if from_hypotheses and len(models) == 1:
            cacher = getattr(models[0], "document_cache_entries", None)
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
            sub = self._select_rows(sample, rows)
            sub_hypos = super().inference_step(
                generator, models, sub,
                prefix_tokens=None if prefix_tokens is None else prefix_tokens.index_select(0, rows),
                constraints=None if constraints is None else constraints.index_select(0, rows),
            )
            sub_entries = cacher(sub, sub_hypos) if cacher is not None else [None] * len(sub_hypos)
            for j, r in enumerate(rows.tolist()):
                hypos[r], entries[r] = sub_hypos[j], sub_entries[j]
        if not from_hypotheses:
            return hypos
        for i, sent_id in enumerate(sample["id"].tolist()):
            self.hypotheses[sent_id] = hypos[i][0]["tokens"]
            if entries[i] is not None:
                self.model_cache[sent_id] = entries[i]
        # the farthest context sentence of each row is no one's context any more
        ctx_ids = sample["net_input"]["context"]["ids"]
        for old in ctx_ids[:, -1][ctx_ids[:, -1] >= 0].tolist():
            self.hypotheses.pop(old, None)
            self.model_cache.pop(old, None)
        return hypos

    def _select_rows(self, sample, rows):
        """The rows ``rows`` of a batch, sources cut to their longest; context tables are
        shared (only the per-row index maps are selected)."""
        ni = sample["net_input"]
        if len(rows) == sample["id"].numel() and torch.equal(rows, torch.arange(len(rows), device=rows.device)):
            return sample  # the whole batch in its order
        lengths = ni["src_lengths"].index_select(0, rows)
        width = int(lengths.max())
        src = ni["src_tokens"].index_select(0, rows)
        left_pad = bool(ni["src_tokens"][:, -1].ne(self.source_dictionary.pad()).all())
        src = src[:, src.size(1) - width:] if left_pad else src[:, :width]
        per_row = lambda k: k == "ids" or k.endswith("_index") or k.endswith("_self")  # noqa: E731
        new_ni = {**ni, "src_tokens": src, "src_lengths": lengths}
        if "context" in ni:
            new_ni["context"] = {k: (v.index_select(0, rows) if per_row(k) else v) for k, v in ni["context"].items()}
        if ni.get("prev_output_tokens") is not None:
            new_ni["prev_output_tokens"] = ni["prev_output_tokens"].index_select(0, rows)
        sub = {**sample, "id": sample["id"].index_select(0, rows), "nsentences": len(rows),
               "net_input": new_ni}
        if sample.get("target") is not None:
            sub["target"] = sample["target"].index_select(0, rows)
        return sub

    def with_hypothesis_context(self, sample, with_cache=False):
        """Replace the target context of a batch by the model's own translations of those
        sentences (decoded earlier: batches come in document order), and add the model's
        cached entries for them if asked."""
        ctx = sample["net_input"]["context"]
        ids = ctx["ids"]
        needed = torch.unique(ids[ids >= 0])
        missing = [i for i in needed.tolist() if i not in self.hypotheses]
        if missing:
            raise RuntimeError(
                f"document-order inference: sentence {missing[0]} is context of this batch "
                "but has not been translated yet (batches must come in document order: "
                "use --target-context reference for oracle context)"
            )
        rows = [self.hypotheses[i] for i in needed.tolist()]
        pad, eos = self.tgt_dict.pad(), self.tgt_dict.eos()
        new = {k: v for k, v in ctx.items() if not k.startswith("tgt_")}
        if rows:
            new["tgt_tokens"] = data_utils.collate_tokens(rows, pad, eos, left_pad=False).to(ids.device)
            new["tgt_lengths"] = torch.tensor([len(r) for r in rows], device=ids.device)
        else:  # no sentence of the batch has context (first sentences of documents)
            new["tgt_tokens"] = ids.new_full((1, 1), pad)
            new["tgt_lengths"] = ids.new_zeros(1)
        if with_cache:
            new["cache"] = [self.model_cache.get(i) for i in needed.tolist()]
        new["tgt_index"] = torch.where(
            ids >= 0, torch.searchsorted(needed, ids.clamp(min=0).contiguous()), ids.new_tensor(-1)
        )
        return {**sample, "net_input": {**sample["net_input"], "context": new}}

