"""The identity of a data directory's dictionaries, recorded with a model and checked at load.

A model trained by the ``document_translation`` task records, in its args, the digests of its
source and target dictionaries' words (:func:`dictionary_digests`) and their sizes
(:func:`dictionary_sizes`); at inference a checkpoint paired with other dictionaries is
refused (:func:`dictionary_mismatch`, :func:`dictionary_message`), even when they have the
same size and the training data directory is gone.
"""
import hashlib
from typing import Optional

from ..errors import UsageError

SIDES = ("source", "target")


def dictionary_digest(d, separator: Optional[str] = None) -> str:
    """A digest of a fairseq ``Dictionary``'s words in order (counts ignored; the context
    separator, which the task adds when missing, left out)."""
    words = [w for w in d.symbols if w != separator]
    return hashlib.sha1("\n".join(words).encode("utf-8")).hexdigest()[:16]


def dictionary_sizes(src_dict, tgt_dict) -> str:
    """``"<source types>,<target types>"`` (recorded beside :func:`dictionary_digests`, so
    that a mismatch can say whether the sizes differ)."""
    return f"{len(src_dict)},{len(tgt_dict)}"


def dictionary_digests(src_dict, tgt_dict, separator: Optional[str]) -> str:
    """``"<source digest>,<target digest>"`` of the dictionaries' words (recorded in a model's
    args, so that a checkpoint paired with other dictionaries of the same size is refused
    without its training data directory)."""
    return ",".join(dictionary_digest(d, separator) for d in (src_dict, tgt_dict))


def dictionary_mismatch(recorded: Optional[str], src_dict, tgt_dict, separator: Optional[str]) -> Optional[str]:
    """``"source"``/``"target"`` when the dictionary digests a checkpoint recorded differ from
    those of ``src_dict``/``tgt_dict``, else ``None`` (also for checkpoints without them)."""
    if not recorded:
        return None
    ours = dictionary_digests(src_dict, tgt_dict, separator).split(",")
    for name, theirs, mine in zip(SIDES, recorded.split(","), ours):
        if theirs != mine:
            return name
    return None


def dictionary_message(side: str, recorded_sizes: Optional[str], ours: int, data) -> str:
    """The one line refusing a checkpoint trained with another ``side`` dictionary than that
    of the data directory ``data`` (``ours`` types), saying whether the recorded sizes
    (:func:`dictionary_sizes`) differ."""
    fix = "give the data directory it was trained on"
    theirs = None
    if recorded_sizes:
        try:
            theirs = int(recorded_sizes.split(",")[SIDES.index(side)])
        except (ValueError, IndexError):
            theirs = None
    if theirs is not None and theirs != ours:
        return f"the model was trained with a {theirs:,}-type {side} dictionary, {data} has {ours:,}: {fix}"
    if theirs is not None:
        return (f"the model was trained with another {side} dictionary than {data}'s "
                f"(same size, other words): {fix}")
    return (f"the model was trained with another {side} dictionary than {data}'s "
            f"({ours:,} types; other words or another size): {fix}")


def record(args, src_dict, tgt_dict, separator: Optional[str]) -> None:
    """Record the dictionaries' digests and sizes in a new model's ``args``."""
    args.dictionary_digests = dictionary_digests(src_dict, tgt_dict, separator)
    args.dictionary_sizes = dictionary_sizes(src_dict, tgt_dict)


def check_recorded(args, src_dict, tgt_dict, separator: Optional[str], data) -> None:
    """Refuse (:class:`UsageError`, one line) a checkpoint whose ``args`` record dictionary
    digests other than those of ``src_dict``/``tgt_dict`` (the data directory ``data``'s)."""
    side = dictionary_mismatch(getattr(args, "dictionary_digests", None), src_dict, tgt_dict, separator)
    if side:
        ours = len(src_dict if side == "source" else tgt_dict)
        raise UsageError(dictionary_message(side, getattr(args, "dictionary_sizes", None), ours, data))
