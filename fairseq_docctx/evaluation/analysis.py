"""Looking inside trained document-level models, one sentence at a time.

* :func:`sentence_sample`: the one-row batch (with its context) of one sentence of a document;
* :func:`qcn_routing` / :func:`write_qcn_routing`: the routing of a ``qcn_transformer`` for
  one sentence — coupling coefficients ``c`` and query correlations ``p = tanh(PCC(u_i, q_j))``
  at every routing iteration (Yang et al. 2019, §3.2, Algorithm 1; their Figures 6 and 7),
  with the context words on one axis and the output capsules on the other, as heatmaps and
  JSON. ``docctx-analyze qcn`` is their command line.
"""
import json
import os
from typing import Dict

import torch

from ..data import context_batch as cb


def sentence_sample(hub, split: str, doc: str, sentence: int):
    """A one-row batch (with its context) of sentence ``sentence`` (0-based) of document
    ``doc`` (its id, or its number) of ``split``."""
    task = hub.task
    task.load_dataset(split)
    ds = task.dataset(split)
    docs = ds.docs
    d = docs.doc_ids.index(doc) if doc in docs.doc_ids else int(doc)
    if not 0 <= d < len(docs) or not 0 <= sentence < docs.lengths[d]:
        raise ValueError(f"{split} has no sentence {sentence} in document {doc}")
    sent_id = int(docs.offsets[d] + sentence)
    return ds.collater([ds[sent_id]])


def qcn_routing(hub, split, doc, sentence):
    """Routing history of one sentence: (context word labels, current sentence, c, p) with
    ``c``/``p`` as ``[iters, words, capsules]``; word labels ``-k:token`` (``k``: distance of
    the word's sentence)."""
    sample = sentence_sample(hub, split, doc, sentence)
    model = hub.models[0]
    enc = getattr(model, "encoder", None)
    if getattr(enc, "qcn", None) is None:
        raise ValueError("this checkpoint has no query-guided capsule network (qcn_transformer without --no-qcn)")
    ni = sample["net_input"]
    context = cb.get_context(ni)
    cur, cur_mask, ctx, ctx_mask, _, _ = enc.capsule_inputs(ni["src_tokens"], context)
    with torch.no_grad():
        _, c, p = enc.qcn(cur, cur_mask, ctx, ctx_mask, return_history=True)
    words = []
    if cb.has_side(context, "src"):
        src = cb.table(context, "src", ctx.size(1))
        table, index = src.tokens, src.index[0]
        for k, row in enumerate(index.tolist()):
            if row >= 0:
                toks = table[row]
                words += [f"-{k + 1}:{hub.src_dict[t]}" for t, m in zip(toks.tolist(), ctx_mask[0, k].tolist()) if m]
    flat = ctx_mask[0].reshape(-1)
    c, p = c[:, 0][:, flat], p[:, 0][:, flat]
    current = hub.src_dict.string(ni["src_tokens"][0])
    return words, current, c, p


def plot_routing(values, words, title, path):
    """Heatmaps ``[words, capsules]`` of ``values [iters, words, capsules]``, one per
    iteration, side by side, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    iters, n, m = values.shape
    fig, axes = plt.subplots(1, iters, figsize=(1.2 + 1.1 * m * iters, 1.5 + 0.22 * max(n, 4)), squeeze=False)
    for t, ax in enumerate(axes[0]):
        im = ax.imshow(values[t].numpy(), aspect="auto", cmap="viridis")
        ax.set_title(f"iteration {t + 1}")
        ax.set_xticks(range(m))
        ax.set_xticklabels([f"v{j + 1}" for j in range(m)])
        ax.set_yticks(range(n))
        ax.set_yticklabels(words if t == 0 else [""] * n, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.05)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_qcn_routing(hub, split: str, doc: str, sentence: int, outdir: str) -> Dict:
    """Write ``qcn_coupling.png`` and ``qcn_pcc.png`` (unless the sentence has no context)
    and ``qcn_routing.json`` (sentence, context_words, coupling, pcc) to ``outdir``. Returns
    what :func:`qcn_routing` found (``words``, ``current``, ``c``, ``p``) and the ``files``
    written."""
    words, current, c, p = qcn_routing(hub, split, doc, sentence)
    os.makedirs(outdir, exist_ok=True)
    files = []
    if words:
        for name, v, title in (("qcn_coupling.png", c, "coupling coefficients c"),
                               ("qcn_pcc.png", p, "query correlations p = tanh(PCC(u, q))")):
            plot_routing(v, words, f"{title}\n{current}", os.path.join(outdir, name))
            files.append(name)
    with open(os.path.join(outdir, "qcn_routing.json"), "w", encoding="utf-8") as f:
        json.dump({"sentence": current, "context_words": words, "coupling": c.tolist(), "pcc": p.tolist()}, f, indent=1)
    files.append("qcn_routing.json")
    return {"words": words, "current": current, "c": c, "p": p, "files": files}
