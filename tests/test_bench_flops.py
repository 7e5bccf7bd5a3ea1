"""benchmarks/flops.py: the benchmarks' FLOP counter counts the attention products of fairseq's
``MultiheadAttention`` on a CPU whichever path it takes. PyTorch's fused kernel (training, and the
encoder at inference) counts the products the explicit ``bmm`` path counts; its backward adds the
one score product it recomputes instead of keeping the attention weights."""

import pytest
import torch
from fairseq.modules import MultiheadAttention

from benchmarks.flops import flop_counter

DIM, HEADS, BATCH = 32, 4, 2


def attention_flops(need_weights: bool, length: int, mask: bool, backward: bool) -> int:
    torch.manual_seed(0)
    attn = MultiheadAttention(DIM, HEADS, dropout=0.0, self_attention=True)
    x = torch.randn(length, BATCH, DIM, requires_grad=True)
    attn_mask = torch.triu(torch.full((length, length), float("-inf")), 1) if mask else None
    with flop_counter() as counter:
        y, _ = attn(x, x, x, need_weights=need_weights, attn_mask=attn_mask)
        if backward:
            y.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("length", [8, 40])
def test_fused_cpu_attention_counts_the_products_of_the_bmm_path(length, mask):
    assert attention_flops(False, length, mask, backward=False) == attention_flops(True, length, mask, backward=False)
    recomputed_scores = 2 * BATCH * HEADS * length * length * (DIM // HEADS)
    assert (attention_flops(False, length, mask, backward=True)
            == attention_flops(True, length, mask, backward=True) + recomputed_scores)
