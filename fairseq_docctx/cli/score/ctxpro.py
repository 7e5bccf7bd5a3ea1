"""``docctx-score ctxpro``: :mod:`fairseq_docctx.evaluation.ctxpro`."""
import os

from ...evaluation import ctxpro
from ...evaluation.io import ScoreInputError
from .options import TRANSFORMERS_OPTIONS, add_engine_args, add_json_args, add_subcommand, write_model_json


def add_parser(sub):
    p = add_subcommand(
        sub, "ctxpro", main, errors=(ValueError,),
        help="ctxpro evaluation sets (Wicks & Post 2023): translate in document order, score with ctxpro",
        description="Translate every example of ctxpro evaluation sets as a document (its context sentences, then "
        "the sentence) in document order with the model's own translations as context, and score the "
        "translations of the sentences with the ctxpro package's scorer, per rule and phenomenon.")
    p.add_argument("evalsets", nargs="+", metavar="EVALSET.json", help="ctxpro evaluation sets (JSON)")
    p.add_argument("--inputs", nargs="+", metavar="FILE", help="their contexts, one file per evaluation set, "
                   "in order: a line per example, the context sentences and the sentence joined by --joining-string "
                   "(default: DIR/../inputs/NAME or DIR/NAME beside DIR/NAME.json)")
    p.add_argument("--joining-string", default=ctxpro.EOS,
                   help=f"what joins the sentences of an inputs line (default {ctxpro.EOS})")
    p.add_argument("--max-context", type=int, help="translate at most N context sentences before each example "
                   "(default: all the inputs give)")
    p.add_argument("--lang", help="target language code for ctxpro's sentence splitter (default: the model's "
                   "target language)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt); with --engine transformers a transformers "
                   "model folder or hub id")
    p.add_argument("--context-size", type=int, default=None,
                   help="--engine transformers, a model not exported by docctx-export: the previous sentences joined "
                   "before each one (default 0)")
    p.add_argument("--data", help="data directory with the dictionaries (default: as docctx-translate)")
    p.add_argument("--spm-model", help="SentencePiece model (default: the data directory's)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16, help="documents decoded side by side")
    p.add_argument("--gpu", action="store_true", help="translate on the GPU if there is one")
    p.add_argument("--translations-out", metavar="DIR", help="write the translations of the sentences here, "
                   "one file per evaluation set (NAME.txt), for ctxpro score")
    add_engine_args(p)
    add_json_args(p)
    return p


def _inputs(args):
    inputs = args.inputs
    if inputs is not None and len(inputs) != len(args.evalsets):
        raise ScoreInputError(f"--inputs gives {len(inputs)} files for {len(args.evalsets)} evaluation sets")
    if inputs is None:
        inputs = []
        for e in args.evalsets:
            found = [c for c in ctxpro.default_inputs(e) if os.path.isfile(c)]
            if not found:
                raise ScoreInputError(f"no inputs (contexts) for {e}: looked for "
                                      f"{' and '.join(ctxpro.default_inputs(e))}; give --inputs")
            inputs.append(found[0])
    return inputs


def _translator(args):
    """What translates the documents: the checkpoint's hub (``--engine fairseq``), an export's
    (:func:`~fairseq_docctx.hub.from_transformers`), or any other transformers model
    (:class:`~fairseq_docctx.evaluation.transformers_scoring.TransformersScorer`)."""
    from ...errors import UsageError
    from ...hub import from_pretrained

    if args.engine == "fairseq":
        given = [o for o in TRANSFORMERS_OPTIONS + ("context_size",) if getattr(args, o, None) is not None]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')}: an option of --engine transformers")
        return from_pretrained(args.path, data=args.data, spm_model=args.spm_model, cpu=not args.gpu)
    from ...evaluation.transformers_scoring import is_export, load_transformers_scorer

    if is_export(args.path):
        from ...hub import from_transformers

        given = [o for o in ("context_size",) + TRANSFORMERS_OPTIONS if getattr(args, o, None) is not None]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')}: {args.path} is an export of docctx-export transformers, "
                             "which records its own context settings and language tokens")
        return from_transformers(args.path, data=args.data, spm_model=args.spm_model, cpu=not args.gpu)
    return load_transformers_scorer(args.path, data=args.data, spm_model=args.spm_model,
                                    context_size=args.context_size, context_sides=args.context_sides,
                                    separator=args.context_separator, src_lang=args.tokenizer_src_lang,
                                    tgt_lang=args.tokenizer_tgt_lang, cpu=not args.gpu)


def _name(evalset: str) -> str:
    name = os.path.basename(evalset)
    return name[:-5] if name.endswith(".json") else name


def main(args) -> int:
    from ...evaluation.scoring import quiet_logs

    inputs = _inputs(args)
    for i in inputs:
        args.outputs.read("the inputs", i)
    names = [os.path.join(args.translations_out, _name(e) + ".txt") for e in args.evalsets] \
        if args.translations_out else []
    for n in names:  # the outputs first, then every input file, before the model works
        args.outputs.file(n, f"--translations-out {args.translations_out}: {n}")
    for e, i in zip(args.evalsets, inputs):
        ctxpro.read_inputs(i, ctxpro.read_evalset(e), args.joining_string)
    quiet_logs()
    hub = _translator(args)
    lang = args.lang or (hub.task.cfg.target_lang if getattr(hub, "task", None) is not None else None)
    if lang is None:
        raise ScoreInputError("--lang: the target language of a transformers model's translations (ISO 639-1)")
    try:
        reports = [ctxpro.evaluate(hub, e, i, lang, args.joining_string, args.max_context, args.beam,
                                   args.batch_size)
                   for e, i in zip(args.evalsets, inputs)]
    except Exception as e:  # the sentence splitter's unknown language
        if type(e).__name__ == "SentenceSplitterException":
            raise ScoreInputError(f"{e} (give --lang, the target language's ISO 639-1 code)") from None
        raise
    for n, r in zip(names, reports):
        with args.outputs.open(n) as f:
            f.writelines(t + "\n" for t in r["translations"])
    if args.json:
        metrics = {f"ctxpro:{_name(r['evalset'])}": {"score": r["accuracy"],
                                                     **{k: v for k, v in r.items() if k != "translations"}}
                   for r in reports}
        write_model_json(args, metrics, {"evalsets": ",".join(args.evalsets)})
    for r in reports:  # after the files: a reader that stops reading (| head) loses none
        print(ctxpro.format_report(r))
    return 0
