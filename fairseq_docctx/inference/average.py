"""Checkpoint averaging: one model whose every weight is the mean of that weight over several
checkpoints of one training run (``docctx-average``; the recipes' ``AVERAGE=N``).

Vaswani et al. (2017, §6.1) translate with the average of the last checkpoints of a run;
fairseq's ``--keep-last-epochs N`` keeps the last N epoch checkpoints (``checkpointE.pt``)
for it. :func:`last_epoch_checkpoints` finds them in a save directory,
:func:`average_checkpoints` averages them, :func:`write_average` writes the result as a
fairseq checkpoint that ``fairseq-generate --path`` and ``docctx-translate`` read.

Only checkpoints of one model are averaged (:func:`model_settings`): the same registered
model, the same options of it that shape what the weights compute, the same language pair,
context settings and dictionaries; checkpoints of another model with weights of the same
names and shapes (a ``transformer`` and a ``concat_transformer`` of one size) are refused,
naming both files. The output is never one of the checkpoints averaged.

Checkpoints are read as the rest of the plugin reads them (:func:`~fairseq_docctx.inference.checkpoint.load_checkpoint_state`:
``torch.load(weights_only=True)`` with the plugin's allow-list, one-line errors). Floating-point
weights are summed in float64 and stored in their own dtype; any other tensor (an integer
buffer) must be equal in every checkpoint and is kept. The averaged checkpoint holds the
configuration and the training state of the last checkpoint given, without the optimizer
state (a model to translate with, not to resume training from).
"""
import argparse
import os
import re
from typing import Dict, List, Sequence

import torch

from ..data.outputs import Outputs
from .checkpoint import CheckpointError, load_checkpoint_state

_EPOCH = re.compile(r"^checkpoint(\d+)\.pt$")


def last_epoch_checkpoints(directory: str, n: int) -> List[str]:
    """The ``n`` epoch checkpoints (``checkpointE.pt``) of ``directory`` with the highest
    epochs, oldest first; fewer than ``n`` there is an error naming what is there."""
    if n < 1:
        raise CheckpointError(f"average the last {n} checkpoints: give a number of checkpoints >= 1")
    if not os.path.isdir(directory):
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    epochs = sorted((int(m.group(1)), name) for name in os.listdir(directory) for m in [_EPOCH.match(name)] if m)
    if len(epochs) < n:
        found = ", ".join(name for _, name in epochs) or "none"
        raise CheckpointError(
            f"{directory}: {len(epochs)} epoch checkpoint(s) ({found}), {n} needed to average the last {n}: "
            f"train with --keep-last-epochs {n} (not --no-epoch-checkpoints) for at least {n} epochs")
    return [os.path.join(directory, name) for _, name in epochs[-n:]]


#: the task's settings the weights are trained for: the language pair, what is read as context
_TASK_SETTINGS = ("source_lang", "target_lang", "doc_mode", "context_size", "context_sides", "context_separator")
#: model options that change how a model is trained or initialised, not what its weights compute
_TRAINING_ONLY = re.compile(r"dropout|layerdrop|_embed_path$|^init_from|^freeze_|^lr_scale|^quant_noise|"
                            r"^checkpoint_activations$|^offload_activations$|^min_params_to_wrap$|^export$|"
                            r"^base_shuffle$")
_MISSING = object()


def _get(cfg, key):
    if cfg is None:
        return _MISSING
    if isinstance(cfg, argparse.Namespace):
        return getattr(cfg, key, _MISSING)
    return cfg[key] if key in cfg else _MISSING


def model_settings(state: Dict) -> Dict[str, object]:
    """What a checkpoint's weights are the weights of, as ``{setting: value}``: ``model`` (the
    registered model of its architecture), the options of that model (its ``add_args``) that
    shape what the weights compute (training-only ones such as dropout, layer drop or
    quantization noise left out), the task's language pair and context settings, and the
    dictionaries' digests the task records; settings a checkpoint does not record are left out."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY
    from omegaconf import OmegaConf

    cfg, args = state.get("cfg"), state.get("args")
    model_cfg = _get(cfg, "model")
    model_cfg = args if model_cfg is _MISSING or model_cfg is None else model_cfg
    task_cfg = _get(cfg, "task")
    task_cfg = args if task_cfg is _MISSING or task_cfg is None else task_cfg
    arch = next((a for a in (_get(model_cfg, "arch"), _get(model_cfg, "_name")) if isinstance(a, str)), None)
    options = []
    if arch in ARCH_MODEL_REGISTRY:
        parser = argparse.ArgumentParser()
        ARCH_MODEL_REGISTRY[arch].add_args(parser)
        options = [a.dest for a in parser._actions if a.dest != "help" and not _TRAINING_ONLY.search(a.dest)]
    out = {"model": ARCH_MODEL_NAME_REGISTRY.get(arch, arch)}
    for where, keys in ((model_cfg, options + ["dictionary_digests"]), (task_cfg, _TASK_SETTINGS)):
        for k in keys:
            v = _get(where, k)
            if v is not _MISSING:
                out[k] = OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
    return out


def check_same_model(path: str, settings: Dict, first: str, first_settings: Dict) -> None:
    """Refuse (one line naming both files) a checkpoint whose :func:`model_settings` differ
    from those of the first checkpoint averaged."""
    if settings["model"] != first_settings["model"]:
        raise CheckpointError(f"{path} is a {settings['model']}, {first} a {first_settings['model']}: "
                              "checkpoints of different models are not averaged")
    differ = [k for k in settings if k in first_settings and settings[k] != first_settings[k]]
    if differ:
        k = differ[0]
        more = f" (and {len(differ) - 1} other setting{'s' if len(differ) > 2 else ''})" if len(differ) > 1 else ""
        what = ("other dictionaries than" if k == "dictionary_digests" else
                f"--{k.replace('_', '-')} {settings[k]},")
        than = "" if k == "dictionary_digests" else f" with {first_settings[k]}"
        raise CheckpointError(f"{path} was trained with {what} {first}{than}{more}: checkpoints of differently "
                              "configured models are not averaged")


def average_checkpoints(paths: Sequence[str]) -> Dict:
    """The state of the last of ``paths`` with its ``model`` weights replaced by the mean over
    ``paths`` (each read once, one at a time); checkpoints of another model or settings
    (:func:`check_same_model`), or with other weight names or shapes, are an error naming
    the file."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    sums: Dict[str, torch.Tensor] = {}
    dtypes: Dict[str, torch.dtype] = {}
    state = None
    for i, path in enumerate(paths):
        state = load_checkpoint_state(path)
        weights = state["model"]
        settings = model_settings(state)
        if i == 0:
            first_settings = settings
            for k, v in weights.items():
                dtypes[k] = v.dtype
                sums[k] = v.detach().to(torch.float64).clone() if v.is_floating_point() else v.detach().clone()
            first = path
            continue
        check_same_model(path, settings, first, first_settings)
        if set(weights) != set(sums):
            extra = sorted(set(weights) - set(sums))
            missing = sorted(set(sums) - set(weights))
            raise CheckpointError(f"{path}: other weights than {first} (extra: {', '.join(extra[:3]) or 'none'}; "
                                  f"missing: {', '.join(missing[:3]) or 'none'}): not checkpoints of one model")
        for k, v in weights.items():
            if v.shape != sums[k].shape:
                raise CheckpointError(f"{path}: weight {k} has shape {tuple(v.shape)}, "
                                      f"{tuple(sums[k].shape)} in {first}")
            if dtypes[k].is_floating_point:
                sums[k] += v.detach().to(torch.float64)
            elif not torch.equal(v, sums[k]):
                raise CheckpointError(f"{path}: the non-floating-point tensor {k} differs from {first}'s; "
                                      "it cannot be averaged")
    n = len(paths)
    state["model"] = {k: (v / n).to(dtypes[k]) if dtypes[k].is_floating_point else v for k, v in sums.items()}
    state.pop("last_optimizer_state", None)
    state["averaged_checkpoints"] = [os.path.abspath(p) for p in paths]
    return state


def write_average(paths: Sequence[str], output: str, outputs=None) -> Dict:
    """Average ``paths`` (:func:`average_checkpoints`) and write the checkpoint to ``output``
    through the output guard ``outputs`` (:class:`~fairseq_docctx.data.outputs.Outputs`:
    written into a temporary file beside it, so a reader never sees half a file; default: one
    of ``docctx-average`` that may replace an existing file). An ``output`` that is one of
    ``paths`` under any name is refused before anything is read, as is (with the guard of
    the command) an existing file ``docctx-average`` did not write."""
    if outputs is None:
        outputs = Outputs("docctx-average", force=True)
    for p in paths:
        outputs.read("the input checkpoint", p)
    outputs.file(output, f"-o {output}")
    state = average_checkpoints(paths)
    with outputs.open(output, "wb") as f:
        torch.save(state, f)
    return state
