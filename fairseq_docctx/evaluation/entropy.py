"""Entropy of a model's attention over its context (``docctx-score entropy``).

Kuang & Xiong (2018, §5.4, Eq. 12; their Figures 3-4) measure how evenly the attention over
the previous sentence spreads when a target word is generated: ``H = -Σ_j α_j log α_j`` over
the attended items; ``log n`` for a uniform attention over ``n`` items (their NULL sentence of
three stop symbols: log₂ 3 ≈ 1.58 bits), ``0`` when it falls on one item. Here every
distribution a model gives through its ``context_attention(sample)`` method (the contract in
:mod:`fairseq_docctx.models.document_context`) is measured this way, for every sentence of a
split, teacher-forced with the reference context (as in training). Which models give it is
asked of the model: its ``analyses`` declaration (``"attention"``); any other model is refused
with one line naming those that do. What each model's distributions are is said by its
``context_attention`` and in docs/evaluation.md.

Reported per distribution: the mean entropy per sentence (over its positions), over the test
set (over all positions, and over the sentences' means), and the mean ``log n`` (the entropy of
a uniform attention over the same items), in nats (``--base 2``: bits). Sentences without
context (a document's first, except for ``isg_rnnsearch``) have no distribution and are left
out (counted).
"""
import math
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from ..modules.entropy import entropy  # noqa: F401  (docctx-score entropy's measure)


def sentence_entropies(model, sample, base: float = math.e) -> List[Dict]:
    """For every row of a teacher-forced batch, every distribution's per-position entropies:
    a list (one per distribution) of ``{"title", "positions", "items", "rows": [[(entropy,
    log n) per position with a distribution] per row]}``."""
    from ..models.document_context import context_attention

    out = []
    for d in context_attention(model, sample):
        h, logn = entropy(d["weights"], d["support"], base)
        keep = d["position_mask"] & ~torch.isnan(h)
        rows = [[(float(a), float(b)) for a, b in zip(h[i][keep[i]].tolist(), logn[i][keep[i]].tolist())]
                for i in range(h.size(0))]
        out.append({"title": d["title"], "positions": d["positions"], "items": d["items"], "rows": rows})
    return out


def _true_context_documents(src_docs, tgt_docs, k: int):
    """One scoring document per sentence: its k previous sentences (both sides) and itself;
    ``(documents, [(document number, sentence number)])``."""
    docs, where = [], []
    for d, (s, t) in enumerate(zip(src_docs, tgt_docs)):
        for j in range(len(s)):
            n = min(j, k)
            docs.append((s[j - n: j + 1], t[j - n: j + 1]))
            where.append((d, j))
    return docs, where


def entropy_report(scorer, src_docs, tgt_docs, doc_ids: Sequence[str], base: float = math.e,
                   max_sentences: Optional[int] = None) -> Dict:
    """The entropies of ``scorer``'s model over the given token documents (see the module
    doc): ``{"arch", "base", "distributions": [{"title", "positions", "items", "sentences",
    "positions_measured", "mean", "mean_of_sentences", "mean_max"}], "sentences": [{"doc",
    "index", "entropy": {title: [per position]}, "max": {title: [...]}, "mean": {title:
    mean}}], "sentences_without_context"}``."""
    from ..models.document_context import registered_name, require, sample_for_model

    model = scorer.model
    require(model, "attention")
    model.eval()
    docs, where = _true_context_documents(src_docs, tgt_docs, max(scorer.context_size, 1))
    if max_sentences is not None:
        docs, where = docs[:max_sentences], where[:max_sentences]
    per_sentence: List[Dict] = [{"doc": doc_ids[d], "index": j, "entropy": {}, "max": {}} for d, j in where]
    titles: Dict[str, Dict] = {}
    for positions, sample in scorer.batches(docs):
        sample = sample_for_model(sample, model)
        for dist in sentence_entropies(model, sample, base):
            titles.setdefault(dist["title"], {k: dist[k] for k in ("title", "positions", "items")})
            for p, row in zip(positions, dist["rows"]):
                if row:
                    per_sentence[p]["entropy"][dist["title"]] = [a for a, _ in row]
                    per_sentence[p]["max"][dist["title"]] = [b for _, b in row]
    summary = []
    for title, info in titles.items():
        values = [s["entropy"][title] for s in per_sentence if title in s["entropy"]]
        maxima = [s["max"][title] for s in per_sentence if title in s["max"]]
        flat = [v for x in values for v in x]
        summary.append({**info, "sentences": len(values), "positions_measured": len(flat),
                        "mean": float(np.mean(flat)) if flat else None,
                        "mean_of_sentences": float(np.mean([np.mean(x) for x in values])) if values else None,
                        "mean_max": float(np.mean([v for x in maxima for v in x])) if flat else None})
    for s in per_sentence:
        s["mean"] = {t: float(np.mean(v)) for t, v in s["entropy"].items()}
    return {"arch": registered_name(model), "base": "e" if base == math.e else base, "distributions": summary,
            "sentences": per_sentence,
            "sentences_without_context": sum(1 for s in per_sentence if not s["entropy"])}


def format_report(rep: Dict) -> str:
    unit = "nats" if rep["base"] == "e" else ("bits" if rep["base"] == 2 else f"log base {rep['base']}")
    lines = [f"{rep['arch']}: attention entropy over the context ({unit}); "
             f"{len(rep['sentences'])} sentences, {rep['sentences_without_context']} without context"]
    for d in rep["distributions"]:
        if d["mean"] is None:
            continue
        lines.append(f"  {d['title']}\n    per {d['positions']} position over {d['items']}: mean {d['mean']:.4f} "
                     f"(sentence means: {d['mean_of_sentences']:.4f}; uniform: {d['mean_max']:.4f}) over "
                     f"{d['positions_measured']} positions of {d['sentences']} sentences")
    return "\n".join(lines)


def plot_entropy(rep: Dict, path: str, sentence: Optional[int] = None, labels: Optional[List[str]] = None):
    """PNG: for every distribution, the entropy at each position of one sentence (Kuang &
    Xiong 2018, Figures 3-4; ``sentence``: its number in the report, default the first with
    context) beside the uniform attention's, and the histogram of the sentences' means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dists = [d for d in rep["distributions"] if d["mean"] is not None]
    if not dists:
        raise ValueError("nothing to plot: no sentence has context")
    if sentence is None:
        sentence = next(i for i, s in enumerate(rep["sentences"]) if s["entropy"])
    s = rep["sentences"][sentence]
    fig, axes = plt.subplots(len(dists), 2, squeeze=False, figsize=(11, 2.4 * len(dists) + 0.6))
    for (ax, hist), d in zip(axes, dists):
        t = d["title"]
        if t in s["entropy"]:
            x = range(len(s["entropy"][t]))
            ax.plot(x, s["entropy"][t], marker="o", label="entropy")
            ax.plot(x, s["max"][t], linestyle="--", color="grey", label="uniform (log n)")
            if labels is not None and d["positions"] == "target" and len(labels) >= len(s["entropy"][t]):
                ax.set_xticks(list(x))
                ax.set_xticklabels(labels[: len(s["entropy"][t])], rotation=60, ha="right", fontsize=7)
            ax.legend(fontsize=7)
        ax.set_title(f"{t}\n{rep['sentences'][sentence]['doc']} sentence {s['index']}", fontsize=8)
        means = [x["mean"][t] for x in rep["sentences"] if t in x["mean"]]
        hist.hist(means, bins=30)
        hist.set_title(f"sentence means (test set mean {d['mean']:.3f})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return sentence
