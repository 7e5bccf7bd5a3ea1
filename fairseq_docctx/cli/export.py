"""``docctx-export``: a trained checkpoint written for another inference engine.

``docctx-export ctranslate2 CKPT OUTDIR`` writes a CTranslate2 model folder (with the data
directory's dictionaries and SentencePiece model, and the checkpoint's context settings) that
``docctx-translate --engine ctranslate2 --path OUTDIR`` and ``docctx-drafts --engine
ctranslate2`` decode; see docs/inference.md. Each engine that writes a model of its own
(:attr:`fairseq_docctx.engines.base.Engine.export_help`, :data:`fairseq_docctx.engines.EXPORTS`) is a
subcommand with its arguments.

``docctx-export transformers CKPT OUTDIR`` writes a Hugging Face ``transformers`` model folder
(``AutoModelForSeq2SeqLM`` / ``AutoTokenizer``, no plugin needed to load it; the context
settings in its ``config.json`` and model card); see docs/transformers.md.
"""
import argparse
import sys

from . import exit_on_errors_and_signals, quiet_logging
from ..engines import EXPORTS


def build_parser():
    p = argparse.ArgumentParser(prog="docctx-export",
                                description="Write a checkpoint for another inference engine.")
    sub = p.add_subparsers(dest="engine", required=True, metavar="ENGINE")
    for target in EXPORTS.values():
        target.add_export_arguments(sub.add_parser(target.name, help=target.export_help))
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_logging()
    written = EXPORTS[args.engine].export(args)
    print(f"docctx-export: {written} -> {args.outdir}", file=sys.stderr)
    return written


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-export", main, argv,
                               (FileNotFoundError, CheckpointError, ManifestError, ValueError))


if __name__ == "__main__":
    cli_main()
