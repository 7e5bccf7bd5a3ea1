"""Plots of how a model spreads its attention over the context of one sentence.

``docctx-score plot --path CKPT --split test --doc D --sentence J --outdir fig/`` teacher-forces
sentence ``J`` of document ``D`` (its reference, with the reference context the data holds)
and writes ``context_<model>.png`` plus the plotted values as ``context_<model>.json``. The
values come from the model's ``context_weights(sample)`` method, which every context model
implements and which returns a list of *panels*, each a dict of

* ``title`` (str);
* ``weights``: a float tensor ``[B, R, C]``, zero where a row or column does not exist;
* ``rows``: the ``R`` row labels: an int ``k`` is the sentence at distance ``k`` of the
  ``context_side`` (``0``: the current sentence), a str is a label of its own (``"λ"``, a
  capsule ``"v1"``);
* ``row_mask``: a bool tensor ``[B, R]``, the rows that exist for each batch row (the
  context sentences a row has);
* ``columns``: what the ``C`` columns are: ``"source"`` (the positions of
  ``net_input["src_tokens"]``), ``"target"`` (the target positions) or ``"source context"``
  (the words of the K previous source sentences: column ``(k-1)*L + l`` is position ``l`` of
  the context table's row of the sentence at distance ``k``, ``L`` the table's width);
* ``column_mask``: a bool tensor ``[B, C]``, the real columns (no padding, no EOS);
* ``context_side``: ``"source"`` or ``"target"``, the side of the sentences of int rows;
* ``normalized``: whether every real column is a distribution over the rows present.

Which models give panels is asked of the model: its ``analyses`` declaration (``"panels"``,
:data:`fairseq_docctx.models.document_context.ANALYSES`); any other model is refused with one
line naming those that offer them (:func:`~fairseq_docctx.models.document_context.require`).
What a model's panels hold is said by its ``context_weights`` and in docs/evaluation.md.
"""
from typing import Dict, List

import numpy as np

from ..data import context_batch as cb
from ..models.document_context import context_weights, registered_name, require, sample_for_model
from .analysis import sentence_sample


def _tokens(dictionary, row) -> List[str]:
    return [dictionary[t] for t in row.tolist() if t != dictionary.pad()]


def _text(dictionary, row) -> str:
    return dictionary.string(row[row.ne(dictionary.pad())])


def _context_row(ctx, side: str, k: int, b: int = 0):
    """Table row of batch row ``b``'s sentence at distance ``k`` on ``side`` (or ``None``)."""
    name = {"source": "src", "target": "tgt"}[side]
    index = cb.index(ctx, name) if cb.has_side(ctx, name) else None
    if index is None or k > index.size(1) or int(index[b, k - 1]) < 0:
        return None
    return int(index[b, k - 1])


def _column_labels(hub, sample, panel, b: int = 0) -> List[str]:
    ni = sample["net_input"]
    mask = panel["column_mask"][b]
    if panel["columns"] == "source":
        toks = ni["src_tokens"][b]
        return [hub.src_dict[t] for t in toks[mask].tolist()]
    if panel["columns"] == "target":
        toks = sample["target"][b] if sample.get("target") is not None else ni["prev_output_tokens"][b]
        return [hub.tgt_dict[t] for t in toks[: mask.numel()][mask].tolist()]
    if panel["columns"] == "source context":
        src = cb.table(cb.get_context(ni), "src")
        table, index = src.tokens, src.index
        L = table.size(1)
        return [f"-{c // L + 1}:{hub.src_dict[int(table[index[b, c // L], c % L])]}"
                for c in mask.nonzero().view(-1).tolist()]
    raise ValueError(f"unknown columns {panel['columns']!r}")


def panel_values(hub, sample, panel, b: int = 0) -> Dict:
    """One panel of batch row ``b`` as plotted: ``title``, ``row_labels`` (distances
    ``-k`` farthest first, then ``current``; or the panel's own labels), ``columns`` (token
    strings) and ``values [rows][columns]``."""
    w = panel["weights"][b].float()
    rows = [(i, r) for i, r in enumerate(panel["rows"]) if bool(panel["row_mask"][b, i])]
    if all(isinstance(r, int) for _, r in rows):
        rows = sorted(rows, key=lambda x: (x[1] == 0, -x[1]))  # farthest first, current last
    cols = panel["column_mask"][b]
    values = w[[i for i, _ in rows]][:, cols] if rows else w.new_zeros(0, int(cols.sum()))
    return {"title": panel["title"], "columns": _column_labels(hub, sample, panel, b),
            "row_labels": [(f"-{r}" if r else "current") if isinstance(r, int) else r for _, r in rows],
            "values": values.cpu().numpy().tolist()}


def context_values(hub, split: str, doc: str, sentence: int) -> Dict:
    """The plotted values for one sentence (see the module doc); keys ``arch`` (the model's
    registered name), ``sentence``, ``rows`` (the context sentences of the first panel,
    farthest first, then the current one where it is plotted) and ``panels`` (``title``,
    ``row_labels``, ``columns``, ``values [rows][columns]``)."""
    model = hub.models[0]
    require(model, "panels")
    model.eval()
    sample = sample_for_model(sentence_sample(hub, split, doc, sentence), model)
    panels = context_weights(model, sample)
    ni = sample["net_input"]
    ctx = cb.get_context(ni)
    rows = []
    if panels:
        first = panels[0]
        side = first["context_side"]
        name, dictionary = ("src", hub.src_dict) if side == "source" else ("tgt", hub.tgt_dict)
        table = cb.table(ctx, name).tokens if cb.has_side(ctx, name) else None
        dist = {r for r in first["rows"] if isinstance(r, int)}
        if first["columns"] == "source context":  # the sentences whose words are columns
            L = cb.table(ctx, "src").tokens.size(1)
            dist = {c // L + 1 for c in first["column_mask"][0].nonzero().view(-1).tolist()}
        for k in sorted((r for r in dist if r > 0), reverse=True):
            row = _context_row(ctx, side, k)
            if row is not None:
                rows.append(f"-{k}: {_text(dictionary, table[row])}")
        if 0 in dist:
            rows.append(f"current: {_text(hub.src_dict, ni['src_tokens'][0])}")
    return {"arch": registered_name(model), "sentence": _text(hub.src_dict, ni["src_tokens"][0]),
            "reference": _text(hub.tgt_dict, sample["target"][0]), "split": split, "doc": doc, "index": sentence,
            "rows": rows, "panels": [panel_values(hub, sample, p) for p in panels]}


def plot_context(values: Dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in values["panels"] if p["values"] and p["values"][0]]
    if not panels:
        raise ValueError("nothing to plot: the sentence has no context")
    ncols = max(len(p["columns"]) for p in panels)
    heights = [max(len(p["row_labels"]), 1) + 1.2 for p in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(2.5 + 0.32 * ncols, 1.0 + 0.45 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    width = fig.get_figwidth()
    for ax, p in zip(axes[:, 0], panels):
        v = np.array(p["values"], dtype=float)
        im = ax.imshow(v, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
        # a title wider than its panel is wrapped to the panel's width (about 75 % of the figure's)
        ax.set_title(_wrap(p["title"], 0.75 * width, 8), fontsize=8)
        ax.set_yticks(range(len(p["row_labels"])))
        ax.set_yticklabels(p["row_labels"], fontsize=8)
        ax.set_xticks(range(len(p["columns"])))
        ax.set_xticklabels(p["columns"], rotation=60, ha="right", fontsize=7)
        for i in range(v.shape[0]):
            for j in range(v.shape[1]):
                ax.text(j, i, f"{v[i, j]:.2f}", ha="center", va="center", fontsize=5,
                        color="white" if v[i, j] < 0.6 else "black")
        fig.colorbar(im, ax=ax, fraction=0.02)
    head = [f"{values['arch']}: {values['split']} doc {values['doc']} sentence {values['index']}"]
    lines = [_wrap(x, width, 8) for x in head + list(values.get("rows", []))]
    fig.suptitle("\n".join(lines), fontsize=8, ha="left", x=0.01)
    fig.tight_layout()
    # the saved image is the bounding box of everything drawn: no text is cut at an edge
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.1, format="png")
    plt.close(fig)


def _wrap(text: str, inches: float, fontsize: float) -> str:
    """``text`` wrapped at spaces into lines of about ``inches`` at ``fontsize`` points (an
    average character of a sans-serif font is about 0.6 of its size wide)."""
    import textwrap

    chars = max(int(inches * 72 / (0.6 * fontsize)), 20)
    return "\n".join(textwrap.wrap(text, chars, break_long_words=False, break_on_hyphens=False)) or text
