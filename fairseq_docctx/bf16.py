"""``--bf16`` on the device the trainer uses.

fairseq 0.12's ``parse_args_and_arch`` turns every ``--bf16`` into ``--tpu``
(``fairseq/options.py``: bfloat16 was a TPU feature when it was written), so ``fairseq-train
--bf16`` asks its Trainer for an XLA device and, where ``torch_xla`` is not installed, stops
with ``AttributeError: 'NoneType' object has no attribute 'xla_device'`` — on a CUDA machine
as on a CPU. The plugin, imported by ``--user-dir`` while fairseq parses the command line,
wraps fairseq's ``call_main`` (the step between parsing and training of ``fairseq-train``):
where ``torch_xla`` is missing, a configuration with ``bf16`` and the ``tpu`` that ``--bf16``
implied runs with ``tpu`` off, i.e. fairseq's own bfloat16 training (``FP16Optimizer``
without loss scaling, the model and criterion cast to bfloat16) on the device the Trainer
picks: the GPU, or the CPU with ``--cpu``. With ``torch_xla`` installed nothing changes.
"""
import importlib.util
import logging

logger = logging.getLogger(__name__)


def has_xla() -> bool:
    """Whether ``torch_xla`` (fairseq's TPU path) is installed."""
    return importlib.util.find_spec("torch_xla") is not None


def bf16_off_tpu(cfg) -> bool:
    """Clear ``cfg.common.tpu`` where ``--bf16`` implied it and ``torch_xla`` is missing;
    returns whether it did."""
    common = getattr(cfg, "common", None)
    if common is None or not getattr(common, "bf16", False) or not getattr(common, "tpu", False) or has_xla():
        return False
    common.tpu = False
    logger.info("--bf16 without torch_xla: bfloat16 training on the trainer's device (fairseq's --bf16 "
                "implies --tpu, whose XLA device is not installed)")
    return True


def install_bf16_fix() -> None:
    """Wrap ``fairseq.distributed.utils.call_main`` with :func:`bf16_off_tpu` (once)."""
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if getattr(original, "docctx_bf16", False):
        return

    def call_main(cfg, main, **kwargs):
        bf16_off_tpu(cfg)
        return original(cfg, main, **kwargs)

    call_main.docctx_bf16 = True
    call_main.__doc__ = original.__doc__
    distributed_utils.call_main = call_main
