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
DOC_MODE_CHOICES = ("sentences", "segments")
#: training default of --context-sides (at inference: the checkpoint's); that of
#: --context-size is :data:`~fairseq_docctx.models.document_context.DEFAULT_CONTEXT_SIZE`
DEFAULT_CONTEXT_SIDES = "source"


def set_config_value(cfg, name, value):
    """``cfg.name = value`` in an omegaconf config (its struct flag lifted) or a plain namespace."""
    try:
        with open_dict(cfg):
            setattr(cfg, name, value)
    except Exception:  # a plain namespace
        setattr(cfg, name, value)


def set_defaults(cfg) -> None:
    """The defaults of the context settings not given (training's; at inference the
    checkpoint's replace them, :func:`adopt`): sentences, K = 3 (0 for segments, which hold
    their own context), the source side, the segments' limit and packing; a negative K or an
    unknown side is a :class:`UsageError`."""
    for name, default in (("doc_mode", "sentences"), ("max_segment_tokens", seg.DEFAULT_MAX_SEGMENT_TOKENS),
                          ("segment_packing", seg.DEFAULT_SEGMENT_PACKING)):
        if getattr(cfg, name) is None:
            set_config_value(cfg, name, default)
    if cfg.context_size is None:  # segments hold their own context: K is 0
        set_config_value(cfg, "context_size", 0 if cfg.doc_mode == "segments" else dc.DEFAULT_CONTEXT_SIZE)
    if cfg.context_sides is None:
        set_config_value(cfg, "context_sides", DEFAULT_CONTEXT_SIDES)
    if cfg.context_size < 0:
        raise UsageError("--context-size must be >= 0")
    cb.parse_sides(cfg.context_sides)  # a clear error for an unknown side


def check_doc_mode(task) -> None:
    """Refuse settings that segments cannot honour, naming the option to change; a K that is
    not given (the default, or a sentence-level checkpoint's) is 0 for segments."""
    cfg = task.cfg
    if cfg.doc_mode not in DOC_MODE_CHOICES:
        raise UsageError(f"--doc-mode {cfg.doc_mode}: one of {', '.join(DOC_MODE_CHOICES)}")
    if not task.segments:
        return
    if int(cfg.context_size) > 0 and "context_size" not in task.command_line_context:
        # the default K, or a sentence-level checkpoint's: segments have no context tables
        logger.info(f"--doc-mode segments: --context-size 0 (not {cfg.context_size}): a segment holds its own context")
        set_config_value(cfg, "context_size", 0)
    if int(cfg.context_size) > 0:
        raise UsageError(f"--doc-mode segments with --context-size {cfg.context_size}: a segment holds its own "
                         "context (the sentences before each sentence in it), there are no context tables; "
                         "leave out --context-size (or give 0)")
    if int(cfg.max_segment_tokens) < 1:
        raise UsageError(f"--max-segment-tokens {cfg.max_segment_tokens}: must be at least 1")
    if str(cfg.segment_packing) not in seg.SEGMENT_PACKINGS:
        raise UsageError(f"--segment-packing {cfg.segment_packing}: one of {', '.join(seg.SEGMENT_PACKINGS)}")


def record(task, cfg) -> None:
    """Record the task's context settings in a new model's args ``cfg`` (plain values: a
    choice is an enum of fairseq's), where inference reads them back (:func:`adopt`)."""
    for name in ADOPTED_SETTINGS:
        value = getattr(task.cfg, name)
        setattr(cfg, name, str(value) if name in NAMED_SETTINGS else value)


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
    check_doc_mode(task)
    add_separator(task)


def add_separator(task) -> None:
    """With context or segments, the context separator (``--context-separator``) in the
    task's dictionaries, added with a warning where missing (``docctx-prepare`` puts it there)."""
    if not (task.uses_context or task.segments):
        return
    sep = task.cfg.context_separator
    for d in {id(task.src_dict): task.src_dict, id(task.tgt_dict): task.tgt_dict}.values():
        if sep not in d.indices:
            logger.warning(f"context separator {sep} is not in the dictionary: adding it "
                           "(docctx-prepare puts it there for you)")
            d.add_symbol(sep)


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
