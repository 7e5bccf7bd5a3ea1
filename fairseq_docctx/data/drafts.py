"""Drafts: a sentence-level model's translations of every source sentence, as a context side.

The Multi-Hop Transformer (Zhang et al. 2021, "Multi-Hop Transformer for Document-Level
Machine Translation", NAACL, §3.1 and §4.3) reads, besides the source context, *drafts*: the
translations a sentence-level src->tgt Transformer makes of the current sentence and of its
context sentences. They are made once per data directory
(:func:`fairseq_docctx.inference.drafts.make_drafts`, the command ``docctx-drafts``) and stored beside the binarized data as one more stream:

``{split}.{src}-{tgt}.draft.{bin,idx}``
    fairseq's mmap indexed dataset in the *target* dictionary; line ``i`` is the draft of
    source line ``i`` (token ids ending in EOS). Recorded in ``docctx.json``
    (:func:`fairseq_docctx.data.manifest.record_drafts`).

Importing this module declares the context side ``draft``
(:func:`fairseq_docctx.data.context_batch.register_side`): with ``--context-sides src,draft``
the ``document_translation`` task loads the stream (:func:`load_drafts`) and every batch's
context carries a ``draft`` table holding, once each, the drafts of the batch's current
sentences (its self map) and of their ``K`` previous sentences (its index map).

Drafts do not depend on each other, so they are translated in fairseq's length-sorted
batches, not in document order (:class:`fairseq_docctx.inference.drafter.DraftTranslator`).
"""
import logging
import os
from typing import Sequence

import numpy as np
import torch

from . import manifest as mf
from .draft_settings import DEFAULT_BEAM, DEFAULT_CHUNK_SENTENCES, DEFAULT_MAX_TOKENS, DEFAULT_SPLITS  # noqa: F401
from .context_batch import ContextSide, register_side

logger = logging.getLogger(__name__)

DRAFT_SIDE = "draft"
#: the hidden directory of a data directory holding unfinished drafts
WORK_DIR = ".docctx-drafts"


class DraftsError(ValueError):
    """Drafts that cannot be made or loaded; ``str(err)`` is one line naming the file."""


def draft_prefix(data_dir: str, split: str, src: str, tgt: str) -> str:
    """The drafts of ``split``: ``{data_dir}/{split}.{src}-{tgt}.draft`` (+ ``.bin``/``.idx``)."""
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{DRAFT_SIDE}")


def drafts_exist(data_dir: str, split: str, src: str, tgt: str) -> bool:
    prefix = draft_prefix(data_dir, split, src, tgt)
    return os.path.isfile(prefix + ".bin") and os.path.isfile(prefix + ".idx")


# ------------------------------------------------------------------ loading (the task)
def load_drafts(task, split: str, data_path: str, pair=None):
    """The ``draft`` side's ``load`` hook: the drafts of ``split`` in ``data_path`` (an
    indexed dataset of target token tensors with ``sizes``), ``None`` if the split has none.
    A number of drafts other than the split's sentences is a :class:`DraftsError` naming
    the file."""
    from fairseq.data import data_utils

    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    prefix = draft_prefix(data_path, split, src, tgt)
    if not os.path.isfile(prefix + ".idx"):
        return None
    if not os.path.isfile(prefix + ".bin"):
        raise DraftsError(f"{prefix}.bin: missing (its .idx is there): make the drafts again "
                          "with docctx-drafts")
    if mf.read_manifest(data_path) is not None and mf.drafts_record(data_path, split) is None:
        logger.warning(f"{prefix}.idx is not recorded in {mf.manifest_path(data_path)} (made "
                       "before the data was prepared again?); docctx-drafts makes it again")
    data = data_utils.load_indexed_dataset(prefix, task.target_dictionary)
    if data is None:
        raise DraftsError(f"{prefix}.idx: not a readable fairseq indexed dataset")
    if pair is not None and len(data) != len(pair):
        raise DraftsError(f"{prefix}.idx: {len(data)} drafts, but split '{split}' of {data_path} "
                          f"has {len(pair)} sentences: make the drafts again with docctx-drafts")
    return data


register_side(ContextSide(DRAFT_SIDE, "target", item_key=None, left_pad=False, load=load_drafts))


class DraftSentences:
    """Drafts held in memory as a context side's sentences (an indexable of token tensors
    with a ``sizes`` array), e.g. those :meth:`DraftTranslator.translate` made on the fly
    for raw input: ``DocumentPairDataset(..., side_data={"draft": DraftSentences(drafts)})``."""

    def __init__(self, drafts: Sequence[torch.Tensor]):
        self.drafts = [torch.as_tensor(d).long() for d in drafts]
        self.sizes = np.array([len(d) for d in self.drafts], dtype=np.int64)

    def __len__(self):
        return len(self.drafts)

    def __getitem__(self, i):
        return self.drafts[i]
