"""One dataset builder: a split's sentence pairs and document index -> the dataset a
``document_translation`` task batches.

:func:`build_document_dataset` makes either a :class:`~fairseq_docctx.data.document_dataset.
DocumentPairDataset` (single sentences, each with the K previous sentences of its document as
context: ``--doc-mode sentences``) or a :class:`~fairseq_docctx.data.segments.
SegmentPairDataset` (segments of consecutive sentences, ``--doc-mode segments``, packed by
:func:`~fairseq_docctx.data.segments.plan_segments` or given as a plan). The task's
``load_dataset`` (training, validation, ``fairseq-generate``), the hub (raw documents) and the
scorer (documents scored teacher-forced) all build their datasets here.

The context sides whose sentences are not in the pair dataset come from the sides'
registration (:class:`~fairseq_docctx.data.context_batch.ContextSide`): a binarized split's
through the side's ``load`` hook (:func:`load_side_data`), raw input's through the side's
raw-input hook (:func:`raw_side_data`).

:func:`document_batch_iterator` is fairseq's epoch batch iterator over a dataset whose
batches keep document context together (runs re-drawn every epoch), and
:func:`generation_shard` the sentences of one shard of a split decoded by several processes.
"""
import logging
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from fairseq.data import data_utils, iterators

from ..errors import UsageError
from . import context_batch as cb
from .doc_index import DocIndex, balanced_shards, check_shard
from .document_dataset import DocumentPairDataset
from .segments import SegmentPairDataset, SegmentPlan, plan_segments

logger = logging.getLogger(__name__)


def build_document_dataset(pair, docs: DocIndex, *, segments: bool = False, context_size: int = 0,
                           context_sides=(), shuffle: bool = False, run_length: int = 16,
                           position_major: bool = False, side_data: Optional[Dict[str, object]] = None,
                           separators: Optional[Tuple[int, int]] = None, max_segment_tokens: Optional[int] = None,
                           packing: Optional[str] = None, count_targets: bool = False,
                           multi_resolution: bool = False, shard: Optional[Tuple[int, int]] = None,
                           plan: Optional[SegmentPlan] = None, split: Optional[str] = None):
    """The dataset of ``pair`` (fairseq's ``LanguagePairDataset``, corpus order) with the
    documents of ``docs``.

    Sentences (``segments`` false): a :class:`DocumentPairDataset` with ``context_size`` K
    previous sentences of the ``context_sides``, ``side_data`` the sentences of the sides not
    in ``pair``, batches of runs of up to ``run_length`` sentences, ``position_major`` for
    document-order inference (batch t holds sentence t of many documents).

    Segments: a :class:`SegmentPairDataset` over ``plan``, or, without one, the segments of
    :func:`plan_segments` under ``max_segment_tokens`` and ``packing`` (on both sides'
    lengths with ``count_targets``, else the source's; ``multi_resolution``; only the
    documents of shard I of N with ``shard=(N, I)``, N > 1), sentences joined by
    ``separators`` (source, target indices).

    ``shuffle``: shuffle before sorting by length (training and validation). ``split``: the
    split's name, to log what it holds (the plan, context-only and long sentences); ``None``
    logs nothing."""
    if not segments:
        if split is not None and docs.num_context_only:
            logger.info(f"{split}: {docs.num_context_only} of {docs.num_sentences} sentences are "
                        "context only (pairs docctx-prepare's filters removed from the training "
                        "targets): context of the next sentences, never a target")
        return DocumentPairDataset(pair, docs, context_size, context_sides, shuffle=shuffle, run_length=run_length,
                                   position_major=position_major, side_data=side_data)
    if plan is None:
        documents = None
        if shard is not None and shard[0] > 1:
            documents = balanced_shards(docs.lengths, shard[0])[check_shard(*shard)]
        plan = plan_segments(docs, pair.src_sizes, pair.tgt_sizes if count_targets else None, int(max_segment_tokens),
                             multi_resolution=multi_resolution, documents=documents, packing=str(packing))
        if split is not None:
            _log_plan(split, plan, docs, documents)
    return SegmentPairDataset(pair, plan, separators[0], shuffle=shuffle, target_separator=separators[1])


def task_dataset(task, split: Optional[str], pair, docs: DocIndex, data_path: Optional[str] = None,
                 side_data: Optional[dict] = None):
    """The dataset of ``split`` of a ``document_translation`` ``task`` (:func:`build_document_dataset`
    with the task's options), shuffled unless it is ``test``; ``split`` ``None``: raw input.
    Sentences: with the task's context, the sides the pair lacks ``side_data``, else loaded
    from ``data_path`` (:func:`load_side_data`), in document order where inference reads its
    own translations. ``--doc-mode segments``: packed under ``--max-segment-tokens`` and
    ``--segment-packing`` (``--multi-resolution`` on the training split), the training split
    on the lengths of both sides, every other split on the source's alone, as the hub and
    ``docctx-translate`` pack raw documents, so that ``fairseq-generate`` decodes a test set
    in the same segments; with ``--num-shards N --shard-id I`` (generation) only the
    documents of shard I, the sentence ids the split's."""
    training = split == task.cfg.train_subset
    if task.segments:
        sep = task.cfg.context_separator
        options = dict(separators=(task.src_dict.index(sep), task.tgt_dict.index(sep)),
                       max_segment_tokens=task.cfg.max_segment_tokens, packing=task.cfg.segment_packing,
                       count_targets=training, multi_resolution=training and bool(task.cfg.multi_resolution),
                       shard=None if training or split is None else generation_shards(task.cfg))
    else:
        if side_data is None:
            side_data = load_side_data(task, task.context_sides, split, data_path, pair)
        options = dict(context_size=task.cfg.context_size, context_sides=task.context_sides,
                       run_length=task.cfg.doc_run_length, side_data=side_data,
                       # inference reads its own translations: decode in document order
                       position_major=not training and task.hypothesis_context)
    return build_document_dataset(pair, docs, segments=task.segments, shuffle=split not in ("test", None),
                                  split=split, **options)


def generation_shards(cfg) -> Tuple[int, int]:
    """``(N, I)`` of ``--num-shards N --shard-id I`` of a task's ``cfg``: generation of shard I
    of N decodes the documents of that shard only (``(1, 0)`` where the configuration does not
    resolve them: options absent from older configurations, a configuration made by hand)."""
    try:
        return int(cfg.num_shards or 1), int(cfg.shard_id or 0)
    except Exception:
        return 1, 0


def _log_plan(split: str, plan: SegmentPlan, docs: DocIndex, documents) -> None:
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


def one_segment_per_document(docs: DocIndex, max_tokens: int, packing: str) -> SegmentPlan:
    """The plan of every document of ``docs`` as one segment (its id the document's
    position): documents already cut to what one segment holds (the scorer's)."""
    n = len(docs)
    return SegmentPlan(docs.offsets.astype(np.int64), docs.lengths.astype(np.int64), np.zeros(n, dtype=np.int64),
                       np.zeros(0, dtype=np.int64), 0, int(max_tokens), str(packing))


def load_side_data(task, sides: Sequence[str], split: str, data_path: str, pair) -> dict:
    """The sentences of the context ``sides`` that are not in the pair dataset of a binarized
    split: each such side's ``load(task, split, data_path, pair)`` hook
    (:class:`~fairseq_docctx.data.context_batch.ContextSide`), one sentence per sentence of
    ``pair``; a side whose hook returns ``None`` is absent from this split's batches."""
    found = {}
    for side in sides:
        spec = cb.get_side(side)
        if spec.item_key is not None or spec.load is None:
            continue
        data = spec.load(task, split, data_path, pair)
        if data is None:
            logger.warning(f"{split}: no {side!r} context sentences in {data_path}: the "
                           f"batches of {split} carry no {side!r} side")
            continue
        if len(data) != len(pair):
            raise UsageError(f"{data_path}: the {side!r} sentences of '{split}' are "
                             f"{len(data)}, the binarized data has {len(pair)} sentences")
        found[side] = data
    return found


def raw_side_data(makers: Dict[str, object], sentences, batch_size: Optional[int] = None,
                  max_tokens: Optional[int] = None) -> dict:
    """The sentences of the context sides of raw input (binarized on the fly): each side's
    maker (what the side's raw-input hook gave when the model was loaded,
    :func:`~fairseq_docctx.data.context_batch.raw_input_makers`) called on the source
    ``sentences``, in batches of ``batch_size`` sentences or ``max_tokens`` tokens."""
    return {side: make(sentences, batch_size=batch_size, max_tokens=max_tokens) for side, make in makers.items()}


def generation_shard(dataset, num_shards: int, shard_id: int, training: bool = False) -> Optional[np.ndarray]:
    """With ``num_shards`` N > 1: the corpus indices of the sentences of shard ``shard_id`` of
    a :class:`DocumentPairDataset` that is not the ``training`` split (whole documents balanced by sentence count,
    :func:`~fairseq_docctx.data.doc_index.balanced_shards`); ``None`` otherwise. The sentence
    ids stay the split's own, so the outputs of the N shards merged by id are the output of
    the whole split. A shard without documents is a :class:`UsageError`."""
    check_shard(num_shards, shard_id)
    if num_shards == 1 or not isinstance(dataset, DocumentPairDataset) or training:
        return None
    shard = dataset.docs.shard_sentences(num_shards, shard_id)
    if len(shard) == 0:
        raise UsageError(f"--shard-id {shard_id} of --num-shards {num_shards}: the split has "
                         f"{len(dataset.docs)} documents, shard {shard_id} gets none: use at "
                         f"most {len(dataset.docs)} shards")
    return shard


def document_batch_iterator(dataset: DocumentPairDataset, filter_indices, doc_batching: str,
                            context_token_cost: float, shard: Optional[np.ndarray] = None, max_tokens=None,
                            max_sentences=None, max_positions=None, required_batch_size_multiple=1, seed=1,
                            num_shards=1, shard_id=0, num_workers=0, epoch=1, data_buffer_size=0,
                            skip_remainder_batch=False, grouped_shuffling=False, **_):
    """fairseq's ``EpochBatchIterator`` over ``dataset`` whose batch sampler is called once
    per epoch, as the runs of consecutive sentences are drawn again every epoch: the
    dataset's ordered indices (those of ``shard`` only, in the order of the whole split),
    ``filter_indices(indices)`` (the task's length filter) when ``max_positions`` is given,
    batched by :meth:`DocumentPairDataset.batch_by_size` with ``doc_batching`` and the
    model's ``context_token_cost``. The other arguments are those of fairseq's
    ``get_batch_iterator``."""
    dataset.set_epoch(epoch)
    if dataset.has_context:
        dataset.set_doc_batching(doc_batching, context_token_cost)
        # context sentences the batches never check (context-only ones, skipped long
        # ones) are cut to what the model's positions allow
        dataset.set_context_max_positions(max_positions)

    def make_batches(dataset, epoch):
        with data_utils.numpy_seed(seed + epoch):
            indices = dataset.ordered_indices()
        if shard is not None:  # this shard's documents, in the order of the whole split
            indices = indices[np.isin(indices, shard)]
        if max_positions is not None:
            indices = filter_indices(indices)
        return dataset.batch_by_size(indices, max_tokens=max_tokens, max_sentences=max_sentences,
                                     required_batch_size_multiple=required_batch_size_multiple)

    return iterators.EpochBatchIterator(
        dataset=dataset, collate_fn=dataset.collater, batch_sampler=make_batches, seed=seed,
        num_shards=num_shards, shard_id=shard_id, num_workers=num_workers, epoch=epoch,
        buffer_size=data_buffer_size, skip_remainder_batch=skip_remainder_batch,
        grouped_shuffling=grouped_shuffling,
    )
