"""``docctx-export``: a trained checkpoint written for another inference engine.

``docctx-export ctranslate2 CKPT OUTDIR`` writes a CTranslate2 model folder (with the data
directory's dictionaries and SentencePiece model, and the checkpoint's context settings) that
``docctx-translate --engine ctranslate2 --path OUTDIR`` and ``docctx-drafts --engine
ctranslate2`` decode; see docs/inference.md. Each engine that writes a model of its own
(:attr:`fairseq_docctx.engines.base.Engine.export_help`) is a subcommand with its arguments.

``docctx-export transformers CKPT OUTDIR`` writes a Hugging Face ``transformers`` model folder
(``AutoModelForSeq2SeqLM`` / ``AutoTokenizer``, no plugin needed to load it; the context
settings in its ``config.json`` and model card); see docs/transformers.md.
"""
import argparse
import sys

from . import exit_on_errors_and_signals, quiet_logging
from ..engines import ENGINES

def build_parser():
    p = argparse.ArgumentParser(prog="docctx-export",
                                description="Write a checkpoint for another inference engine.")
    sub = p.add_subparsers(dest="engine", required=True, metavar="ENGINE")
    for engine in ENGINES.values():
        if engine.export_help:
            engine.add_export_arguments(sub.add_parser(engine.name, help=engine.export_help))
    if TRANSFORMERS not in ENGINES:  # an export target that no docctx-translate engine reads yet
        _add_transformers_arguments(sub.add_parser(TRANSFORMERS, help=TRANSFORMERS_HELP))
    return p


#: the subcommand writing a transformers model folder
TRANSFORMERS = "transformers"
TRANSFORMERS_HELP = ("a Hugging Face transformers model folder (transformer, concat_transformer, "
                     "doc2doc_transformer) that AutoModelForSeq2SeqLM and AutoTokenizer load")


def _add_transformers_arguments(parser) -> None:
    parser.description = ("Write a transformer, concat_transformer or doc2doc_transformer checkpoint as a "
                          "transformers model folder (FSMT, M2M-100, mBART or BART, whichever computes the "
                          "network exactly), with its tokenizer, context settings and model card "
                          "(docs/transformers.md).")
    parser.add_argument("checkpoint", metavar="CKPT", help="checkpoint file (.pt)")
    parser.add_argument("outdir", metavar="OUTDIR", help="folder to write (must not exist unless --force; never "
                        "the checkpoint, its folder, the data directory or a folder holding them)")
    parser.add_argument("--data", help="data directory with the dictionaries (default: as docctx-translate "
                        "finds it: the checkpoint's directory, else the training data)")
    parser.add_argument("--force", action="store_true", help="replace OUTDIR if it is an earlier export (a "
                        "folder docctx-export wrote, holding only its files), once the new export is complete")


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_logging()
    if args.engine == TRANSFORMERS and TRANSFORMERS not in ENGINES:
        from ..hub import export_transformers

        record = export_transformers(args.checkpoint, args.outdir, data=args.data, force=args.force)
        written = f"{record['model']} ({record['class']})"
    else:
        written = ENGINES[args.engine].export(args)
    print(f"docctx-export: {written} -> {args.outdir}", file=sys.stderr)
    return written


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-export", main, argv,
                               (FileNotFoundError, CheckpointError, ManifestError, ValueError))


if __name__ == "__main__":
    cli_main()
