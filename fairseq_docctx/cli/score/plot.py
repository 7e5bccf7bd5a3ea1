"""``docctx-score plot``: :mod:`fairseq_docctx.evaluation.plots`."""
import os

from ...evaluation.io import write_json_file
from .options import add_subcommand


def add_parser(sub):
    p = add_subcommand(
        sub, "plot", main, errors=(ValueError,), message=str,
        help="PNG of attention / gate values over the context sentences of one sentence",
        description="Teacher-force one sentence of a document and plot how the model weighs its context "
        "(the model's context_weights: concat_transformer: cross-attention mass per sentence; "
        "han_transformer: sentence-level attention and gate; qcn_transformer: coupling coefficients "
        "of the context words with the output capsules; hrnn_context: the context gate per target word).")
    p.add_argument("--path", required=True, help="checkpoint file (.pt)")
    p.add_argument("--data", help="data directory (default: the training data)")
    p.add_argument("--split", default="test")
    p.add_argument("--doc", required=True, help="document: its id or its number (0-based)")
    p.add_argument("--sentence", type=int, required=True, help="sentence of the document (0-based)")
    p.add_argument("--outdir", required=True)
    return p


def main(args) -> int:
    from ...evaluation.plots import context_values, plot_context
    from ...evaluation.scoring import quiet_logs
    from ...hub import from_pretrained
    from ...models.document_context import registered_name

    quiet_logs()
    hub = from_pretrained(args.path, data=args.data)
    base = os.path.join(args.outdir, f"context_{registered_name(hub.models[0])}")
    for ext in (".json", ".png"):
        args.outputs.file(base + ext, f"--outdir {args.outdir}: {base + ext}")
    values = context_values(hub, args.split, args.doc, args.sentence)
    write_json_file(base + ".json", values, args.outputs)
    with args.outputs.open(base + ".png", "wb") as f:
        plot_context(values, f)
    print(f"docctx-score plot: wrote {base}.png and {base}.json")
    return 0
