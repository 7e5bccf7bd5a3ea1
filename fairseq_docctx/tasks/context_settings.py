"""The context settings at inference: what a checkpoint records, what is taken from it, and the
one rule for a value given that differs.

A checkpoint records the context settings it was trained with (:data:`ADOPTED_SETTINGS`:
``--context-size``, ``--context-sides``, ``--doc-mode``, ``--max-segment-tokens``,
``--segment-packing``). At inference (:func:`adopt`) each one not given on the command line
is the checkpoint's (a segment checkpoint that records no ``--segment-packing``, written before
the option, packs ``per-side``, the rule it was trained with). One given that differs is
refused in one line unless ``--context-override`` says it is meant; then it is used, with one
warning line (:func:`check_given`). The same rule holds on every path: fairseq's commands
through the task, the hub and the CTranslate2 engine through
:func:`fairseq_docctx.inference.checkpoint.check_context_overrides`. ``--context-size`` and
``--context-sides`` of a model that reads no context tables change nothing it reads and are
taken as given.
"""
import logging
from typing import Optional

from omegaconf import open_dict

from ..data import context_batch as cb
from ..data import segments as seg
from ..errors import UsageError, warn
from ..models import document_context as dc

logger = logging.getLogger(__name__)

#: the settings a checkpoint records and inference adopts unless given (:func:`adopt`)
ADOPTED_SETTINGS = ("context_size", "context_sides", "doc_mode", "max_segment_tokens", "segment_packing")
#: the adopted settings that say what context tables hold (nothing to a model that reads none)
TABLE_SETTINGS = ("context_size", "context_sides")
#: the adopted settings that are names (recorded and compared as plain strings)
NAMED_SETTINGS = ("doc_mode", "segment_packing")


def set_config_value(cfg, name, value):
    """``cfg.name = value`` in an omegaconf config (its struct flag lifted) or a plain namespace."""
    try:
        with open_dict(cfg):
            setattr(cfg, name, value)
    except Exception:  # a plain namespace
        setattr(cfg, name, value)


def adopt(task, saved, where: str = "the checkpoint", arch: Optional[str] = None) -> None:
    """Take the context settings of a checkpoint (``saved``: its task config or model args)
    for those not given on ``task``'s command line (``task.command_line_context``); a given one
    that differs goes to :func:`check_given`. A checkpoint without the last three settings
    was trained on sentences; a segment checkpoint without the last, before the option,
    packed per side (:data:`~fairseq_docctx.data.segments.LEGACY_SEGMENT_PACKING`).
    ``where``: the checkpoint as the messages name it; ``arch``: its architecture or model
    name (default: ``saved``'s, else the model the task built)."""
    arch = arch or getattr(saved, "arch", None) or getattr(saved, "_name", None)
    for name in ADOPTED_SETTINGS:
        value = getattr(saved, name, None)
        if value is None and name == "segment_packing" and str(getattr(saved, "doc_mode", None)) == "segments":
            value = seg.LEGACY_SEGMENT_PACKING
        if value is None:
            continue
        mine = getattr(task.cfg, name)
        if name == "context_sides":
            same = cb.parse_sides(value) == cb.parse_sides(mine)
        elif name in NAMED_SETTINGS:
            same = str(value) == str(mine)
        else:
            same = int(value) == int(mine)
        if same:
            continue
        if name in task.command_line_context:
            check_given(task, name, mine, value, where, arch)
        else:
            logger.info(f"--{name.replace('_', '-')} {value} (from {where})")
            set_config_value(task.cfg, name, str(value) if name in NAMED_SETTINGS else value)
    task.check_doc_mode()
    if task.uses_context or task.segments:
        task.add_separator()


def check_given(task, name: str, mine, value, where: str = "the checkpoint", arch: Optional[str] = None) -> None:
    """A context setting given (``mine``) that differs from the checkpoint's (``value``):
    refused (:class:`UsageError`, one line naming the option, both values and what to do),
    or with ``--context-override`` used, with one warning line (once per process and
    setting). The table settings (:data:`TABLE_SETTINGS`) of a model that reads no context
    tables change nothing it reads: taken as given (``arch``: the checkpoint's architecture
    or model name; default the model ``task`` built); ``--doc-mode sentences`` for a segment
    model, which decodes segments only, is left to the model's own refusal."""
    flag = "--" + name.replace("_", "-")
    if name in TABLE_SETTINGS and reads_context_tables(task, arch) is False:
        logger.info(f"{flag} {mine} ({where}: {value}): the model reads no context, it changes nothing")
        return
    if name == "doc_mode" and str(mine) != "segments" and dc.reads_segments(dc.model_class(arch)):
        return  # a segment model decodes segments only: it refuses the setting when it is built
    if not getattr(task.cfg, "context_override", False):
        raise UsageError(f"{flag} {mine} differs from {where}'s ({value}): leave {flag} out to decode as "
                         f"trained, or add --context-override to decode with {mine} anyway")
    warn(f"{flag} {mine} differs from {where}'s ({value}): decoding with {mine} (--context-override)")


def reads_context_tables(task, arch: Optional[str] = None) -> Optional[bool]:
    """Whether the model of architecture (or model name) ``arch`` reads context tables (a
    :class:`~fairseq_docctx.models.document_context.DocumentContextModel`); without ``arch``,
    whether the model ``task`` built does; ``None`` when neither is known."""
    cls = dc.model_class(arch)
    if cls is not None:
        return issubclass(cls, dc.DocumentContextModel)
    return task.context_contract.reads_context if getattr(task, "built_model", False) else None
