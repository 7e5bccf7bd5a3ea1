"""The transformers engine: a folder ``docctx-export transformers`` wrote (a Hugging Face
``transformers`` model folder with its tokenizer and the export record), decoded by
``transformers``' ``generate`` in document order
(:mod:`fairseq_docctx.inference.transformers_engine`), loaded through the hub
(:func:`~fairseq_docctx.hub.from_transformers`), and the export itself
(:mod:`fairseq_docctx.inference.transformers_export`)."""
from .base import ExportedEngine, task_overrides


class TransformersEngine(ExportedEngine):
    name = "transformers"
    precision = "the export computes in float32"
    summary = ("transformers' generate (a model exported by docctx-export transformers; transformer, "
               "concat_transformer, doc2doc_transformer)")
    export_help = ("a Hugging Face transformers model folder (transformer, concat_transformer, doc2doc_transformer) "
                   "that AutoModelForSeq2SeqLM and AutoTokenizer load")

    def load(self, options):
        from ..hub import from_transformers

        return from_transformers(options.path, data=options.data, spm_model=options.spm_model, cpu=options.cpu,
                                 **task_overrides(options))

    def draft_loader(self):
        from ..inference.transformers_engine import load_transformers_draft_translator

        return load_transformers_draft_translator

    def add_export_arguments(self, parser) -> None:
        parser.description = ("Write a transformer, concat_transformer or doc2doc_transformer checkpoint as a "
                              "transformers model folder (FSMT, M2M-100, mBART or BART, whichever computes the "
                              "network exactly), with its tokenizer, context settings and model card "
                              "(docs/transformers.md), for transformers itself and docctx-translate --engine "
                              "transformers.")
        super().add_export_arguments(parser)

    def export(self, args) -> str:
        from ..hub import export_transformers

        record = export_transformers(args.checkpoint, args.outdir, data=args.data, force=args.force)
        return f"{record['model']} ({record['class']})"
