"""``docctx-export``: a trained checkpoint written for another inference engine.

``docctx-export ctranslate2 CKPT OUTDIR`` writes a CTranslate2 model folder (with the data
directory's dictionaries and SentencePiece model, and the checkpoint's context settings) that
``docctx-translate --engine ctranslate2 --path OUTDIR`` and ``docctx-drafts --engine
ctranslate2`` decode; see docs/inference.md.
"""
import argparse
import sys

from . import exit_on_errors_and_signals, quiet_logging

#: CTranslate2's weight types (``ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES``)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")


def build_parser():
    p = argparse.ArgumentParser(prog="docctx-export",
                                description="Write a checkpoint for another inference engine.")
    sub = p.add_subparsers(dest="engine", required=True, metavar="ENGINE")
    c = sub.add_parser("ctranslate2", help="a CTranslate2 model folder (transformer, concat_transformer, "
                       "doc2doc_transformer)",
                       description="Write a transformer, concat_transformer or doc2doc_transformer checkpoint as "
                       "a CTranslate2 model folder for docctx-translate --engine ctranslate2 (g_transformer stays "
                       "on fairseq: its group attention is not a plain Transformer's).")
    c.add_argument("checkpoint", metavar="CKPT", help="checkpoint file (.pt)")
    c.add_argument("outdir", metavar="OUTDIR", help="folder to write (must not exist unless --force; never the "
                   "checkpoint, its folder, the data directory or a folder holding them)")
    c.add_argument("--data", help="data directory with the dictionaries (default: as docctx-translate "
                   "finds it: the checkpoint's directory, else the training data)")
    c.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                   help="weight type (default: float32, the checkpoint's)")
    c.add_argument("--force", action="store_true", help="replace OUTDIR if it is an earlier export (a folder "
                   "docctx-export wrote, holding only its files), once the new export is complete")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_logging()
    from ..hub import export_ctranslate2

    record = export_ctranslate2(args.checkpoint, args.outdir, data=args.data,
                                quantization=args.quantization, force=args.force)
    print(f"docctx-export: {record['model']} ({record['quantization']}) -> {args.outdir}", file=sys.stderr)
    return record


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-export", main, argv,
                               (FileNotFoundError, CheckpointError, ManifestError, ValueError))


if __name__ == "__main__":
    cli_main()
