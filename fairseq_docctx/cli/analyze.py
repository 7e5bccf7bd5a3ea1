"""``docctx-analyze``: look inside trained document-level models.

``docctx-analyze qcn`` writes, for one sentence of a document, heatmaps of the QCN's coupling
coefficients ``c`` and of its query correlations ``p = tanh(PCC(u_i, q_j))`` at every routing
iteration (the paper's Figures 6 and 7), with the context words on one axis and the output
capsules on the other, plus the raw values as JSON (:mod:`fairseq_docctx.evaluation.analysis`).
"""
import argparse
import logging
import sys


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


def _quiet_logs():
    """Importing fairseq's models runs ``logging.basicConfig(level=logging.DEBUG)`` (in
    ``fairseq/models/wav2vec/wav2vec2_classification.py``): the root logger then prints every
    library's DEBUG records (matplotlib's font manager...). Back to WARNING, and fairseq's and
    matplotlib's own loggers too."""
    from ..evaluation.scoring import quiet_logs

    logging.getLogger().setLevel(logging.WARNING)
    quiet_logs()


def main(argv=None):
    args = build_parser().parse_args(argv)
    from ..evaluation.analysis import write_qcn_routing
    from ..hub import from_pretrained

    _quiet_logs()
    hub = from_pretrained(args.path, data=args.data)
    out = write_qcn_routing(hub, args.split, args.doc, args.sentence, args.outdir)
    if not out["words"]:
        print("docctx-analyze: this sentence has no context (first sentence of its document)", file=sys.stderr)
    print(f"docctx-analyze: wrote {args.outdir}/" + ", ".join(out["files"]))


def cli_main(argv=None):
    try:
        main(argv)
    except (ValueError, FileNotFoundError) as e:
        print(f"docctx-analyze: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
