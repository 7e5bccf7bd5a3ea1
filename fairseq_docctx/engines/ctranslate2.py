"""The CTranslate2 engine: a folder ``docctx-export ctranslate2`` wrote, decoded by
CTranslate2 in document order (:mod:`fairseq_docctx.inference.ctranslate2`), loaded through
the hub (:func:`~fairseq_docctx.hub.from_exported`), and the export itself."""
from ..inference.ctranslate2 import PREFIX_MODES
from .base import ExportedEngine, task_overrides

#: CTranslate2's weight types (``ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES``)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")


class CTranslate2Engine(ExportedEngine):
    name = "ctranslate2"
    precision = "the precision is the export's --quantization"
    summary = ("CTranslate2 (a model exported by docctx-export ctranslate2; transformer, concat_transformer, "
               "doc2doc_transformer)")
    translate_options = (
        ("--ct2-prefix", dict(
            choices=PREFIX_MODES,
            help="--engine ctranslate2: how a sentence after a target prefix (a concat_transformer's "
            "target context) is decoded: stepwise (default; fairseq's beam search, the prefix forced "
            "one step at a time on every beam), one-pass (the prefix in one decoder pass, the --beam "
            "best first tokens each continued greedily), one-pass-beam (the prefix in one pass, the "
            "best first token, then beam search); the same at --beam 1; the one-pass modes are refused for a "
            "model without target context")),
    )
    export_help = "a CTranslate2 model folder (transformer, concat_transformer, doc2doc_transformer)"

    def load(self, options):
        from ..hub import from_exported

        return from_exported(options.path, data=options.data, spm_model=options.spm_model, cpu=options.cpu,
                             ct2_prefix=options.ct2_prefix or PREFIX_MODES[0], **task_overrides(options))

    def draft_loader(self):
        from ..inference.ctranslate2.load import load_exported_draft_translator

        return load_exported_draft_translator

    def add_export_arguments(self, parser) -> None:
        parser.description = ("Write a transformer, concat_transformer or doc2doc_transformer checkpoint as a "
                              "CTranslate2 model folder for docctx-translate --engine ctranslate2 (g_transformer "
                              "stays on fairseq: its group attention is not a plain Transformer's).")
        super().add_export_arguments(parser)
        parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                            help="weight type (default: float32, the checkpoint's)")

    def export(self, args) -> str:
        from ..hub import export_ctranslate2

        record = export_ctranslate2(args.checkpoint, args.outdir, data=args.data,
                                    quantization=args.quantization, force=args.force)
        return f"{record['model']} ({record['quantization']})"
