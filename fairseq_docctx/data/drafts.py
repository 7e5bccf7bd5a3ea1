"""TEMPORARY stub (coordinator's local testing; replaced by the drafts branch)."""
import os

from fairseq.data import data_utils

from . import context_batch as cb


def draft_prefix(data_dir, split, src, tgt):
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.draft")


def load_drafts(task, split, data_path, pair):
    prefix = draft_prefix(data_path, split, task.cfg.source_lang, task.cfg.target_lang)
    if not os.path.exists(prefix + ".idx"):
        return None
    return data_utils.load_indexed_dataset(prefix, task.tgt_dict)


DRAFT = cb.register_side(cb.ContextSide("draft", "target", item_key=None, left_pad=False, load=load_drafts))
