"""``docctx-analyze``: look inside trained document-level models.

``docctx-analyze qcn`` writes, for one sentence of a document, heatmaps of the QCN's coupling
coefficients ``c`` and of its query correlations ``p = tanh(PCC(u_i, q_j))`` at every routing
iteration (the paper's Figures 6 and 7), with the context words on one axis and the output
capsules on the other, plus the raw values as JSON; ``docctx-analyze hrnn`` writes, for one
sentence, the context gate ``z_i`` of an ``hrnn_context`` (Wang et al. 2017, Eq. 5) at every
target word, as JSON, TSV and a PNG; ``docctx-analyze isg`` writes, for one sentence, what an
``isg_rnnsearch`` (Kuang & Xiong 2018) reads of the previous sentence at every target word: the
attention over its tokens, that attention's entropy (Eq. 12; their Figures 3 and 4) and the
inter-sentence gate (Eq. 9), as JSON, TSV and a PNG (:mod:`fairseq_docctx.evaluation.analysis`).
"""
import argparse
import logging
import sys

from . import add_force, exit_on_errors_and_signals, mark, output_guard
from ..data.outputs import DATA_DIRECTORY_FILES

#: what the options read and write (the output guard: fairseq_docctx.data.outputs)
INPUTS = {"path": "the checkpoint", "data": ("the data directory", DATA_DIRECTORY_FILES)}
OUTPUTS = {"outdir": "folder"}


def _one_sentence(p, model):
    """The options that choose a checkpoint of ``model`` and one sentence of a split."""
    p.add_argument("--path", required=True, help=f"checkpoint of {model}")
    p.add_argument("--data", help="data directory (default: the training data)")
    p.add_argument("--split", default="test")
    p.add_argument("--doc", required=True, help="document: its id or its number (0-based)")
    p.add_argument("--sentence", type=int, required=True, help="sentence of the document (0-based)")
    p.add_argument("--outdir", required=True, help="the folder the files go in (made if missing)")
    add_force(p, "a file of --outdir")
    return mark(p, INPUTS, OUTPUTS)


def build_parser():
    p = argparse.ArgumentParser(prog="docctx-analyze", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    _one_sentence(sub.add_parser("qcn", help="routing heatmaps of a qcn_transformer (paper Fig. 6/7)"),
                  "a qcn_transformer")
    h = _one_sentence(sub.add_parser("hrnn", help="context gate values per target word of an hrnn_context "
                                     "(gated auxiliary context)"), "an hrnn_context with --aux-context gated")
    i = _one_sentence(sub.add_parser("isg", help="entropy of the attention over the previous sentence and "
                                     "inter-sentence gate per target word of an isg_rnnsearch (paper Fig. 3/4)"),
                      "an isg_rnnsearch")
    i.add_argument("--base", type=float, default=2.0,
                   help="base of the entropy's logarithm (default 2: bits, as the paper's figures)")
    for q in (h, i):
        q.add_argument("--target", choices=["reference", "hypothesis"], default="reference",
                       help="the target words: the reference (teacher-forced) or the model's translation")
        q.add_argument("--beam", type=int, default=5, help="beam of the translation (--target hypothesis)")
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
    parser = build_parser()
    args = parser.parse_args(argv)
    with output_guard(parser, args, "docctx-analyze") as outputs:
        return _analyze(args, outputs)


def _analyze(args, outputs):
    import os

    from ..evaluation.analysis import FILES, write_hrnn_gates, write_isg_attention, write_qcn_routing
    from ..hub import from_pretrained

    for name in FILES[args.what]:  # refused before the model is loaded
        outputs.file(os.path.join(args.outdir, name), f"--outdir {args.outdir}: {os.path.join(args.outdir, name)}")
    _quiet_logs()
    hub = from_pretrained(args.path, data=args.data)
    if args.what == "qcn":
        out = write_qcn_routing(hub, args.split, args.doc, args.sentence, args.outdir, outputs)
        no_context = not out["words"]
    elif args.what == "hrnn":
        out = write_hrnn_gates(hub, args.split, args.doc, args.sentence, args.outdir, args.target, args.beam,
                               outputs=outputs)
        no_context = not out["has_context"]
    else:
        out = write_isg_attention(hub, args.split, args.doc, args.sentence, args.outdir, args.target, args.beam,
                                  args.base, outputs=outputs)
        no_context = False
        if out["null"]:
            print("docctx-analyze: the previous sentence is the null sentence (first sentence of its document)",
                  file=sys.stderr)
    if no_context:
        print("docctx-analyze: this sentence has no context (first sentence of its document)", file=sys.stderr)
    print(f"docctx-analyze: wrote {args.outdir}/" + ", ".join(out["files"]))


def cli_main(argv=None):
    exit_on_errors_and_signals("docctx-analyze", main, argv, (ValueError, FileNotFoundError), message=str)


if __name__ == "__main__":
    cli_main()
