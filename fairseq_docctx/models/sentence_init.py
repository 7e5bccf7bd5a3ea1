"""Two-stage training of a context model: start from a sentence-level checkpoint.

Miculicich et al. (2018, §3.2, after Tu et al. 2018) train in two stages: the sentence-level
Transformer first, then the whole network with HAN, initialised from it; the same recipe serves
any context model whose parameter names extend those of a sentence-level model (fairseq's
``transformer``).

A model uses it in three lines::

    add_args(parser)                                   # in add_args
    set_defaults(args)                                 # in its architecture function
    apply(model, args, "my_model", is_context=...)     # in build_model, after building

Options:

* ``--init-from-sentence-checkpoint PATH``: copy every weight of ``PATH`` whose name and
  shape match (a report lists the loaded, new and ignored ones); applied once: the option is
  cleared in the model's arguments, so a checkpoint of the context model restores its own
  weights without the sentence checkpoint, and a resumed ``fairseq-train`` run (which
  restores every weight from its checkpoint) does not apply it again.
* ``--init-from-pretrained PATH`` (:mod:`~fairseq_docctx.models.pretrained_init`, the
  Transformer models only): the same with a public fairseq ``transformer``/``bart``
  checkpoint, whose network the model is built with; the two exclude each other, and the two
  options below act on either.
* ``--freeze-sentence-weights``: the weights that came from the sentence model (on a resume:
  every weight that is not a context weight) get ``requires_grad=False``.
* ``--lr-scale-pretrained S``: the same weights learn at S times the learning rate, the new
  ones at the learning rate (Bao et al. 2021's fine-tuning: their ``--doc-double-lr
  --lr-scale-pretrained 0.2``). Each such parameter carries fairseq's parameter attributes
  ``param_group = "pretrained"`` and ``optim_overrides = {"optimizer": {"lr_scale": S}}``
  (:func:`mark_lr_scale`; what fairseq's ``composite`` optimizer groups on), and the
  ``document_translation`` task's optimizer step gives them a parameter group of their own
  at S times the scheduler's learning rate
  (:func:`lr_scaled_groups`).
"""
import contextlib
import logging
import os
from typing import Callable, List, Sequence

from fairseq import checkpoint_utils, utils

from ..errors import UsageError
from ..modules import hf_network
from . import pretrained_init
from .arch_defaults import set_defaults as _set_defaults
from .resume import restore_path

logger = logging.getLogger(__name__)


def add_args(parser):
    """The two options (model arguments)."""
    parser.add_argument("--init-from-sentence-checkpoint", metavar="PATH",
                        help="stage 2 of two-stage training: initialise every weight whose "
                        "name and shape match from this sentence-level checkpoint")
    parser.add_argument("--freeze-sentence-weights", type=utils.eval_bool, nargs="?",
                        const=True, metavar="BOOL",
                        help="with --init-from-sentence-checkpoint or --init-from-pretrained: train the "
                        "context weights only")
    parser.add_argument("--lr-scale-pretrained", type=float, metavar="S",
                        help="with --init-from-sentence-checkpoint or --init-from-pretrained: the weights it "
                        "gives learn at S times "
                        "the learning rate, the new weights at the learning rate (default 1: one learning "
                        "rate; Bao et al. 2021 fine-tune with 0.2)")


def set_defaults(args):
    """Defaults of the three options and of ``--init-from-pretrained`` (none), for an
    architecture function."""
    _set_defaults(args, init_from_sentence_checkpoint=None, freeze_sentence_weights=False,
                  lr_scale_pretrained=1.0, init_from_pretrained=None)


#: the ``param_group`` attribute of the parameters ``--lr-scale-pretrained`` scales
PRETRAINED_GROUP = "pretrained"


def lr_scale(p) -> float:
    """A parameter's learning-rate scale: fairseq's ``optim_overrides["optimizer"]["lr_scale"]``
    attribute, 1 without one."""
    overrides = getattr(p, "optim_overrides", None)
    try:
        return float(overrides["optimizer"]["lr_scale"])
    except (TypeError, KeyError):
        return 1.0


def mark_lr_scale(params, scale: float):
    """Give ``params`` the learning-rate scale ``scale`` through fairseq's parameter
    attributes (``param_group``, ``optim_overrides``)."""
    for p in params:
        p.param_group = PRETRAINED_GROUP
        p.optim_overrides = {"optimizer": {"lr_scale": float(scale)}}


def load_sentence_weights(model, path: str, name: str) -> List[str]:
    """Copy every weight of the sentence-level checkpoint ``path`` whose name and shape match
    into ``model``; print a report (``name``: the model's name, its first word). Returns the
    names of the loaded parameters/buffers."""
    return load_part_weights(model, path, "", name, "--init-from-sentence-checkpoint")


def load_part_weights(module, path: str, prefix: str, name: str, option: str,
                      keep: Sequence[str] = (), keep_reason: str = "") -> List[str]:
    """Copy the weights of the part ``prefix`` (e.g. ``"encoder."``; ``""``: all) of the
    checkpoint ``path`` into ``module`` (e.g. a sentence encoder of a context model), where the
    name without the prefix and the shape match; print a report (``name``: the module's name in
    the messages; ``option``: the command-line option that gave ``path``). Weights of
    ``module`` whose names start with one of ``keep`` are left as they are (reported as kept,
    with ``keep_reason``: e.g. a table the module shares with the rest of the model). Returns
    the names of the loaded weights (in ``module``)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{option}: no such file {path}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)["model"]
    part = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    own = module.state_dict()
    kept = sorted(k for k in own if keep and k.startswith(tuple(keep)))
    loaded = [k for k, v in part.items() if k in own and own[k].shape == v.shape and k not in kept]
    ignored = sorted(set(part) - set(loaded) - set(kept))
    new = sorted(set(own) - set(loaded) - set(kept))
    module.load_state_dict({k: part[k] for k in loaded}, strict=False)
    source = f"the {prefix.rstrip('.')} of {path} ({option})" if prefix else path
    lines = [f"{name}: initialised from {source}: {len(loaded)} loaded, {len(new)} new, {len(ignored)} ignored"
             + (f", {len(kept)} kept" if kept else "")]
    lines += [f"  kept: {k}" + (f" ({keep_reason})" if keep_reason else "") for k in kept]
    lines += [f"  new: {k}" for k in new] + [
        f"  ignored: {k} {tuple(part[k].shape)}" + (f" (model: {tuple(own[k].shape)})" if k in own else "")
        for k in ignored]
    print("\n".join(lines), flush=True)
    logger.info(lines[0])
    return loaded


def apply(model, args, name: str, is_context: Callable[[str], bool],
          record_as: str = "initialized_from_sentence_checkpoint"):
    """``--init-from-sentence-checkpoint`` or ``--init-from-pretrained``
    (:mod:`~fairseq_docctx.models.pretrained_init`), ``--freeze-sentence-weights`` and
    ``--lr-scale-pretrained`` on a freshly built ``model`` (``name``: its name in the
    messages; ``is_context(parameter name)``: the weights a sentence-level model lacks, never
    frozen nor scaled, nor are the embedding tables ``--init-from-pretrained`` grows). The
    path applied is kept in ``args.<record_as>`` (``args.initialized_from_pretrained`` for a
    pretrained checkpoint). First builds in the parts the options of
    :mod:`~fairseq_docctx.modules.hf_network` add (every model passes here, built anew or
    rebuilt from a checkpoint). Returns the model."""
    hf_network.apply(model, args, name)  # the network parts the options add, before any weights load
    path = getattr(args, "init_from_sentence_checkpoint", None)
    pretrained = getattr(args, "init_from_pretrained", None)
    if path and pretrained:
        raise UsageError(f"{name}: --init-from-pretrained and --init-from-sentence-checkpoint exclude "
                         "each other: give one")
    grown = set()
    if pretrained:
        path, option, record_as = pretrained, pretrained_init.OPTION, "initialized_from_pretrained"
        grown = pretrained_init.grown_names(model, args)

        def load():
            return pretrained_init.load_weights(model, path, name)
    else:
        option = "--init-from-sentence-checkpoint"

        def load():
            return load_sentence_weights(model, path, name)
    scale = getattr(args, "lr_scale_pretrained", None)
    scale = 1.0 if scale is None else float(scale)
    if scale != 1.0:
        if not scale > 0:
            raise UsageError(f"{name}: --lr-scale-pretrained {scale} must be above 0 (to keep the "
                             "pre-trained weights fixed: --freeze-sentence-weights)")
        if getattr(args, "freeze_sentence_weights", False):
            raise UsageError(f"{name}: --lr-scale-pretrained {scale} with --freeze-sentence-weights: the "
                             "frozen weights do not learn; give one of the two")
        if not path and not getattr(args, record_as, None) and not getattr(args, "initialized_from_pretrained", None):
            raise UsageError(f"{name}: --lr-scale-pretrained {scale} scales the weights "
                             "--init-from-sentence-checkpoint or --init-from-pretrained gives: give the checkpoint")
    resume = restore_path(args) if path else None
    if resume:
        # fairseq-train restores every weight from that checkpoint right after building
        # the model: the initialisation would be overwritten (so the checkpoint it comes
        # from need not exist any more); freezing is decided below
        msg = f"{name}: resuming from {resume}: {option} {path} not applied again"
        print(msg, flush=True)
        logger.info(msg)
        loaded = [n for n, _ in model.named_parameters(remove_duplicate=False) if not is_context(n)]
    elif path:
        loaded = load()
    else:
        loaded = [n for n, _ in model.named_parameters(remove_duplicate=False) if not is_context(n)]
    loaded = [n for n in loaded if n not in grown]
    if path:
        # applied once: a checkpoint of this model restores its own weights (generation,
        # resume) without needing the initialising checkpoint again
        args.init_from_sentence_checkpoint = None
        if pretrained:
            args.init_from_pretrained = None
        setattr(args, record_as, path)
    if getattr(args, "freeze_sentence_weights", False):
        loaded = set(loaded)
        # every name of a shared parameter (a table shared by two modules is one parameter)
        for n, p in model.named_parameters(remove_duplicate=False):
            if n in loaded:
                p.requires_grad_(False)
    elif path and scale != 1.0:
        loaded = set(loaded)
        marked = {id(p): p for n, p in model.named_parameters(remove_duplicate=False) if n in loaded}
        mark_lr_scale(marked.values(), scale)
        msg = (f"{name}: the {len(marked)} parameters from {option} learn at "
               f"{scale:g} x the learning rate (--lr-scale-pretrained)")
        print(msg, flush=True)
        logger.info(msg)
    return model


@contextlib.contextmanager
def lr_scaled_groups(optimizer, model):
    """For the duration of one optimizer step: the trainable parameters of ``model`` with a
    learning-rate scale s (fairseq's ``optim_overrides`` attribute,
    :func:`lr_scale`, e.g. ``--lr-scale-pretrained``) in
    parameter groups of their own, one per scale, each a copy of its group's settings with
    the learning rate the scheduler set times s; afterwards the optimizer's groups are
    exactly as before, so its state and checkpoints keep fairseq's layout. Nothing changes
    when no parameter has a scale, nor under fairseq's ``composite`` optimizer, which groups
    on the same attributes itself. A scaled parameter the optimizer does not hold as such
    (fairseq's flattened fp16 copy) is an error naming ``--fp16-no-flatten-grads``."""
    scaled = {id(p) for p in model.parameters() if p.requires_grad and lr_scale(p) != 1.0}
    if not scaled or getattr(optimizer, "supports_groups", False):
        yield
        return
    groups = optimizer.param_groups
    originals = [(g, g["params"]) for g in groups]
    added, found = [], 0
    for g, params in originals:
        by_scale, keep = {}, []
        for p in params:
            s = lr_scale(p)
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
