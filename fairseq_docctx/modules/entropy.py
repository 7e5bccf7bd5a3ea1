"""The entropy of an attention distribution over its support, in units of ``log base``: the
measure of Kuang & Xiong (2018, §5.4, Eq. 12) that ``isg_rnnsearch`` reports per target word
and ``docctx-score entropy`` (:mod:`fairseq_docctx.evaluation.entropy`) over a whole split."""
import math

import torch


def entropy(weights: torch.Tensor, support: torch.Tensor, base: float = math.e):
    """Entropy of ``weights [..., N]`` renormalised over ``support [..., N]`` (bool), and
    ``log n`` of the support; both ``[...]`` in units of ``log base``. ``0 log 0 = 0``; a
    position whose supported weights sum to 0 (or that has no support) gets NaN."""
    w = weights.double().clamp(min=0) * support
    total = w.sum(-1, keepdim=True)
    p = w / total
    h = -torch.where(p > 0, p * p.log(), torch.zeros_like(p)).sum(-1)
    n = support.sum(-1).double()
    bad = (total.squeeze(-1) <= 0) | (n == 0)
    h = torch.where(bad, torch.full_like(h, float("nan")), h)
    scale = math.log(base)
    return h / scale, n.clamp(min=1).log() / scale
