"""Checkpoint averaging: one model whose every weight is the mean of that weight over several
checkpoints of one training run (``docctx-average``; the recipes' ``AVERAGE=N``).

Vaswani et al. (2017, §6.1) translate with the average of the last checkpoints of a run;
fairseq's ``--keep-last-epochs N`` keeps the last N epoch checkpoints (``checkpointE.pt``)
for it. :func:`last_epoch_checkpoints` finds them in a save directory,
:func:`average_checkpoints` averages them, :func:`write_average` writes the result as a
fairseq checkpoint that ``fairseq-generate --path`` and ``docctx-translate`` read.

Checkpoints are read as the rest of the plugin reads them (:func:`~fairseq_docctx.inference.checkpoint.load_checkpoint_state`:
``torch.load(weights_only=True)`` with the plugin's allow-list, one-line errors). Floating-point
weights are summed in float64 and stored in their own dtype; any other tensor (an integer
buffer) must be equal in every checkpoint and is kept. The averaged checkpoint holds the
configuration and the training state of the last checkpoint given, without the optimizer
state (a model to translate with, not to resume training from).
"""
import os
import re
from typing import Dict, List, Sequence

import torch

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


def average_checkpoints(paths: Sequence[str]) -> Dict:
    """The state of the last of ``paths`` with its ``model`` weights replaced by the mean over
    ``paths`` (each read once, one at a time); checkpoints with other weight names or shapes
    are an error naming the file and the weight."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    sums: Dict[str, torch.Tensor] = {}
    dtypes: Dict[str, torch.dtype] = {}
    state = None
    for i, path in enumerate(paths):
        state = load_checkpoint_state(path)
        weights = state["model"]
        if i == 0:
            for k, v in weights.items():
                dtypes[k] = v.dtype
                sums[k] = v.detach().to(torch.float64).clone() if v.is_floating_point() else v.detach().clone()
            first = path
            continue
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


def write_average(paths: Sequence[str], output: str) -> Dict:
    """Average ``paths`` (:func:`average_checkpoints`) and write the checkpoint to ``output``
    (through a temporary file beside it: a reader never sees half a file)."""
    state = average_checkpoints(paths)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    part = output + ".part"
    torch.save(state, part)
    os.replace(part, output)
    return state
