"""Grouping rows of very different lengths into a few tight batches."""
import numpy as np
import torch


def length_buckets(lengths: torch.Tensor, overhead: int = 32, step_overhead: float = 0.0):
    """Groups of rows (index tensors) of similar length, chosen to minimise the padded tokens
    of all groups plus ``overhead`` tokens' worth of cost per group and ``step_overhead``
    rows' worth per position of a group's longest row (the fixed cost of each step of a loop
    over the positions, e.g. a recurrent decoder's; exact dynamic programme over the rows
    sorted by length). A table of sentences of very different lengths is then run as a few
    tight batches instead of one padded to its longest row.

    The default (32) is the overhead that runs HAN training fastest on a CPU among those
    tried (docs/benchmarks.md, "Implementation choices")."""
    order = torch.argsort(lengths, stable=True)
    lens = np.asarray(lengths[order].tolist(), dtype=np.float64)
    n = len(lens)
    best, cut = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):  # best split of the j shortest rows: one vector op over i
        c = best[:j] + (j - np.arange(j) + step_overhead) * lens[j - 1] + overhead
        cut[j] = int(np.argmin(c))
        best[j] = c[cut[j]]
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]
