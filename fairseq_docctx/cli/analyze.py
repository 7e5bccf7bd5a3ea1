"""``docctx-analyze``: look inside trained document-level models.

``docctx-analyze qcn`` writes, for one sentence of a document, heatmaps of the QCN's coupling
coefficients ``c`` and of its query correlations ``p = tanh(PCC(u_i, q_j))`` at every routing
iteration (the paper's Figures 6 and 7), with the context words on one axis and the output
capsules on the other, plus the raw values as JSON.
"""
import argparse
import json
import os
import sys

import torch


def build_parser():
    p = argparse.ArgumentParser(prog="docctx-analyze", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    q = sub.add_parser("qcn", help="routing heatmaps of a qcn_transformer (paper Fig. 6/7)")
    q.add_argument("--path", required=True, help="checkpoint of a qcn_transformer")
    q.add_argument("--data", help="data directory (default: the training data)")
    q.add_argument("--split", default="test")
    q.add_argument("--doc", required=True, help="document: its id or its number (0-based)")
    q.add_argument("--sentence", type=int, required=True, help="sentence of the document (0-based)")
    q.add_argument("--outdir", required=True)
    return p


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
    ``c``/``p`` as ``[iters, words, capsules]``."""
    sample = sentence_sample(hub, split, doc, sentence)
    model = hub.models[0]
    enc = getattr(model, "encoder", None)
    if getattr(enc, "qcn", None) is None:
        raise ValueError("this checkpoint has no query-guided capsule network (qcn_transformer without --no-qcn)")
    ni = sample["net_input"]
    cur, cur_mask, ctx, ctx_mask, _, _ = enc.capsule_inputs(ni["src_tokens"], ni.get("context"))
    with torch.no_grad():
        _, c, p = enc.qcn(cur, cur_mask, ctx, ctx_mask, return_history=True)
    words = []
    context = ni.get("context")
    if context is not None:
        table, index = context["src_tokens"], context["src_index"][0, : ctx.size(1)]
        for k, row in enumerate(index.tolist()):
            if row >= 0:
                toks = table[row]
                words += [f"-{k + 1}:{hub.src_dict[t]}" for t, m in zip(toks.tolist(), ctx_mask[0, k].tolist()) if m]
    flat = ctx_mask[0].reshape(-1)
    c, p = c[:, 0][:, flat], p[:, 0][:, flat]
    current = hub.src_dict.string(ni["src_tokens"][0])
    return words, current, c, p


def plot(values, words, title, path):
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


def main(argv=None):
    args = build_parser().parse_args(argv)
    from ..hub import from_pretrained

    hub = from_pretrained(args.path, data=args.data)
    words, current, c, p = qcn_routing(hub, args.split, args.doc, args.sentence)
    os.makedirs(args.outdir, exist_ok=True)
    if not words:
        print("docctx-analyze: this sentence has no context (first sentence of its document)", file=sys.stderr)
    else:
        plot(c, words, f"coupling coefficients c\n{current}", os.path.join(args.outdir, "qcn_coupling.png"))
        plot(p, words, f"query correlations p = tanh(PCC(u, q))\n{current}", os.path.join(args.outdir, "qcn_pcc.png"))
    with open(os.path.join(args.outdir, "qcn_routing.json"), "w", encoding="utf-8") as f:
        json.dump({"sentence": current, "context_words": words, "coupling": c.tolist(), "pcc": p.tolist()}, f, indent=1)
    print(f"docctx-analyze: wrote {args.outdir}/qcn_coupling.png, qcn_pcc.png, qcn_routing.json")


def cli_main(argv=None):
    try:
        main(argv)
    except (ValueError, FileNotFoundError) as e:
        print(f"docctx-analyze: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
