"""docctx-score: document-level evaluation (see docs/evaluation.md).

Every subcommand lives in a module of ``fairseq_docctx.evaluation`` that defines
``add_subcommand(subparsers)``; the parser it adds sets ``func`` to a callable taking the
parsed namespace and returning an exit code.
"""
import argparse
import importlib
import sys

# (module, ...) in the order --help lists them
SUBCOMMAND_MODULES = [
    "bleu",
    "chrf",
    "meteor",
    "discourse",
    "apt",
    "summary",
    "significance",
    "wordnet",
    "contrastive",
    "ctxpro",
    "cxmi",
    "plots",
    "entropy",
]


def build_parser():
    ap = argparse.ArgumentParser(prog="docctx-score", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"fairseq_docctx.evaluation.{name}").add_subcommand(sub)
    return ap


def cli_main(argv=None):
    from fairseq_docctx.data.manifest import ManifestError
    from fairseq_docctx.hub import CheckpointError

    args = build_parser().parse_args(argv)
    try:
        code = args.func(args) or 0
    except (CheckpointError, ManifestError) as e:  # a subcommand that does not catch them
        print(f"docctx-score {args.command}: error: {getattr(e, 'cli_message', e)}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    cli_main()
