"""The FLOP counter every benchmark uses: torch's ``FlopCounterMode`` with PyTorch's fused CPU
attention kernel counted.

``FlopCounterMode`` counts matrix products (``mm``, ``addmm``, ``bmm``, ...) and the fused
attention kernels of the GPU (flash, memory-efficient, cuDNN). On a CPU,
``F.scaled_dot_product_attention`` dispatches to ``_scaled_dot_product_flash_attention_for_cpu``
instead, which torch's registry does not list, so the two attention products of every
fairseq ``MultiheadAttention`` call that takes PyTorch's path (encoder self-attention, and
every attention in training; ``need_weights=False``) would count zero. The formulas registered
here are torch's own ones for the GPU kernels (``sdpa_flop_count``,
``sdpa_backward_flop_count``): the CPU kernel computes the same products, the full
``T x S`` score matrix included when a mask blocks part of it (as group attention's mask does).
"""

import torch
from torch.utils.flop_counter import (FlopCounterMode, flop_registry, register_flop_formula,
                                      sdpa_backward_flop_count, sdpa_flop_count)

_aten = torch.ops.aten


def _register_cpu_attention() -> None:
    forward = _aten._scaled_dot_product_flash_attention_for_cpu
    backward = _aten._scaled_dot_product_flash_attention_for_cpu_backward
    if forward not in flop_registry:
        @register_flop_formula(forward)
        def _cpu_sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return sdpa_flop_count(query_shape, key_shape, value_shape)
    if backward not in flop_registry:
        @register_flop_formula(backward)
        def _cpu_sdpa_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                               **kwargs) -> int:
            return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def flop_counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` (no display) that also counts the CPU attention kernel."""
    _register_cpu_attention()
    return FlopCounterMode(display=False)
