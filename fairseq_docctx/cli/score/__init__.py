"""docctx-score: document-level evaluation (see docs/evaluation.md).

One module here per subcommand: its ``add_parser(subparsers)`` adds the subcommand's parser,
whose ``func(args)`` calls the evaluation library (:mod:`fairseq_docctx.evaluation`) and
returns the exit code (:func:`.options.add_subcommand`).
"""
import argparse
import sys

from .. import exit_on_errors_and_signals
from .options import finish_parser
from . import (accuracy, apt, bleu, chrf, coherence, cohesion, compare, contrastive, ctxpro, cxmi, entropy, meteor,
               plot, resegment, setup_wordnet, table)

#: the subcommands in the order --help lists them
SUBCOMMANDS = [bleu, chrf, meteor, accuracy, cohesion, coherence, apt, table, compare, resegment, setup_wordnet,
               contrastive, ctxpro, cxmi, plot, entropy]


def build_parser():
    ap = argparse.ArgumentParser(prog="docctx-score", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in SUBCOMMANDS:
        finish_parser(module.add_parser(sub))
    return ap


def cli_main(argv=None):
    args = build_parser().parse_args(argv)
    sys.exit(exit_on_errors_and_signals(f"docctx-score {args.command}", args.func, args))


if __name__ == "__main__":
    cli_main()
