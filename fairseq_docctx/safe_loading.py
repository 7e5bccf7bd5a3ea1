"""Keep ``torch.load(weights_only=True)`` working for fairseq checkpoints.

Torch >= 2.6 loads with ``weights_only=True`` by default. fairseq checkpoints carry a few
plain Python/numpy/omegaconf objects besides tensors (an ``argparse.Namespace`` for legacy
architectures, numpy scalars and dtypes when ``--eval-bleu`` ran, omegaconf containers when
distributed training broadcasts state on resume). We allow-list exactly those types instead
of turning safe loading off.
"""
import argparse
import collections
import typing

import numpy as np
import torch


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
