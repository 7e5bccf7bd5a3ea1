"""Keep ``torch.load(weights_only=True)`` working for fairseq checkpoints.

Torch >= 2.6 loads with ``weights_only=True`` by default. fairseq checkpoints carry a few
plain Python/numpy/omegaconf objects besides tensors (an ``argparse.Namespace`` for legacy
architectures, numpy scalars and dtypes when ``--eval-bleu`` ran, omegaconf containers when
distributed training broadcasts state on resume). We allow-list exactly those types instead
of turning safe loading off.

A checkpoint file that cannot be read (truncated by a full disk or an interrupted copy, or
not a checkpoint) is one line naming the file (:func:`unreadable_checkpoint`, a
:class:`~fairseq_docctx.errors.CheckpointError`): the plugin's own loading
(:mod:`fairseq_docctx.inference.checkpoint`) says so, and inside fairseq's commands
(``fairseq-generate --path``, ``fairseq-train --restore-file``, ``fairseq-interactive``...)
:func:`report_unreadable_checkpoints` makes fairseq's ``load_checkpoint_to_cpu`` say the same,
which the plugin's exception hook prints as ``PROG: error: ...`` with exit code 2
(:mod:`fairseq_docctx.errors`).
"""
import argparse
import collections
import functools
import typing

import numpy as np
import torch

from .errors import CheckpointError, UsageError, fairseq_command, first_line


def _numpy_globals():
    out = [np.ndarray, np.dtype]
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct, scalar
    out += [_reconstruct, scalar]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        out += [
            getattr(dtypes, name)
            for name in dir(dtypes)
            if name.endswith("DType") and isinstance(getattr(dtypes, name), type)
        ]
    return out


def _omegaconf_globals():
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    return [DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode]


def _fairseq_globals():
    out = []
    try:
        from fairseq.distributed.utils import _TensorPlaceholder

        out.append(_TensorPlaceholder)
    except ImportError:  # pragma: no cover - older fairseq
        pass
    return out


def safe_globals():
    """The allow-list registered with :func:`torch.serialization.add_safe_globals`."""
    return (
        [argparse.Namespace, collections.defaultdict, dict, list, int, typing.Any]
        + _numpy_globals()
        + _omegaconf_globals()
        + _fairseq_globals()
    )


def register_safe_globals():
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 loads without weights_only anyway
        return
    add(safe_globals())


def unreadable_checkpoint(path, error: BaseException) -> CheckpointError:
    """The one-line error of a checkpoint file that ``torch.load`` (or fairseq's upgrade of
    what it read) failed on: ``error``'s first line says how."""
    return CheckpointError(f"{path}: not a readable fairseq checkpoint, truncated or of another kind "
                           f"({first_line(error)})")


def report_unreadable_checkpoints() -> None:
    """In a fairseq command, wrap fairseq's ``checkpoint_utils.load_checkpoint_to_cpu`` (every
    checkpoint fairseq loads: ``--path``, ``--restore-file``, ``--finetune-from-model``, and
    the plugin's ``--init-from-*`` options) so that a file it cannot read raises
    :func:`unreadable_checkpoint`'s error instead of torch's; what it loads, how (safe
    loading, ``load_on_all_ranks``) and every other error are fairseq's. Elsewhere (Python,
    the ``docctx-*`` commands) fairseq's function is left as it is."""
    if fairseq_command() is None:
        return
    from fairseq import checkpoint_utils

    load = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(load, "one_line_errors", False):
        return

    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load(path, *args, **kwargs)
        except (UsageError, MemoryError):
            raise
        except Exception as e:  # torch.load's errors: zip archive, pickle, EOF...
            raise unreadable_checkpoint(path, e) from None

    load_checkpoint_to_cpu.one_line_errors = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
