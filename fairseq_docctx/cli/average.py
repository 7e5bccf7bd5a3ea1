"""``docctx-average``: average the weights of several checkpoints of one training run into one
checkpoint (Vaswani et al. 2017, §6.1; the recipes' ``AVERAGE=N``).

Only parses the command line and calls :mod:`fairseq_docctx.inference.average`; see
docs/inference.md.
"""
import argparse
import sys

from . import add_force, exit_on_errors_and_signals


def build_parser():
    p = argparse.ArgumentParser(
        prog="docctx-average",
        description="Average the weights of checkpoints of one training run: the last N epoch "
                    "checkpoints (checkpointE.pt) of a save directory, or the files given (checkpoints of "
                    "different models or settings are refused).")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--inputs", nargs="+", metavar="CKPT", help="the checkpoints to average")
    what.add_argument("--dir", metavar="SAVE_DIR",
                      help="a fairseq-train --save-dir: average its last --last epoch checkpoints")
    p.add_argument("--last", type=int, default=5, metavar="N",
                   help="with --dir: how many of its latest epoch checkpoints (default %(default)s)")
    p.add_argument("--output", "-o", required=True, metavar="CKPT",
                   help="the averaged checkpoint (not one of the checkpoints averaged; an existing file only if "
                   "docctx-average wrote it, or with --force; missing folders are made)")
    add_force(p, "an -o file")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from ..data.outputs import Outputs
    from ..inference.average import last_epoch_checkpoints, write_average

    paths = args.inputs if args.inputs else last_epoch_checkpoints(args.dir, args.last)
    with Outputs("docctx-average", force=args.force) as outputs:
        write_average(paths, args.output, outputs)
    print(f"docctx-average: {args.output}: the mean of {len(paths)} checkpoints: "
          + ", ".join(paths), file=sys.stderr)
    return paths


def cli_main(argv=None):
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-average", main, argv, (CheckpointError,), message=str)


if __name__ == "__main__":
    cli_main()
