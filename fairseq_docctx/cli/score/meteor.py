"""``docctx-score meteor``: :mod:`fairseq_docctx.evaluation.meteor`."""
from ...evaluation import meteor
from .options import add_input_args, add_subcommand, corpus_from_args, emit


def add_parser(sub):
    p = add_subcommand(sub, "meteor", main,
                       help="METEOR: nltk's (offline, default) or METEOR 1.5 (Java), corpus and per document",
                       description=meteor.__doc__.split("\n\n")[0])
    add_input_args(p)
    g = p.add_argument_group("METEOR")
    g.add_argument("--meteor", choices=meteor.IMPLEMENTATIONS, default="nltk",
                   help="implementation: nltk (default; JSON key meteor) or 1.5 (meteor-1.5.jar; JSON key "
                   "meteor-1.5 or meteor-1.5-MODULES)")
    g.add_argument("--tokenize", default="13a", help="nltk: sacrebleu tokenizer applied before splitting (default 13a)")
    g.add_argument("--alpha", type=float, default=0.9, help="nltk's alpha")
    g.add_argument("--beta", type=float, default=3.0, help="nltk's beta")
    g.add_argument("--gamma", type=float, default=0.5, help="nltk's gamma")
    g.add_argument("--lang", "-l", default="en", help="METEOR 1.5: target language, its -l (default en)")
    g.add_argument("--meteor-jar", metavar="PATH", help="METEOR 1.5: the jar (default: pycocoevalcap's)")
    g.add_argument("--meteor-modules", metavar="MODULES", help="METEOR 1.5: space-separated modules, its -m "
                   "(default: the language's, without paraphrase when the jar has no table for it)")
    g.add_argument("--meteor-lower", action="store_true",
                   help="METEOR 1.5: -lower instead of -norm (already tokenized text)")
    g.add_argument("--metric-name", metavar="NAME", help="the score's name in --json")
    return p


def main(args):
    if args.meteor == "1.5":
        return _main15(args)
    corpus = corpus_from_args(args)
    res = meteor.meteor_scores(corpus, args.tokenize, args.alpha, args.beta, args.gamma)
    text = f"METEOR = {res['score']:.2f}  ({res['method']})"
    if args.per_document:
        text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
    res_json = {k: v for k, v in res.items() if k != "per_sentence"}
    emit(args, {args.metric_name or "meteor": res_json}, corpus, text)
    return 0


def _main15(args):
    modules = args.meteor_modules.split() if args.meteor_modules else None
    meteor.find_meteor_jar(args.meteor_jar)  # missing jar or java: an error before reading the files
    meteor.java_command()
    corpus = corpus_from_args(args)
    res = meteor.meteor15_scores(corpus, args.lang, jar=args.meteor_jar, modules=modules,
                                 norm=not args.meteor_lower)
    text = f"METEOR 1.5 = {res['score']:.2f}  ({res['method']})"
    if args.per_document:
        text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
    res_json = {k: v for k, v in res.items() if k not in ("per_sentence", "key")}
    emit(args, {args.metric_name or res["key"]: res_json}, corpus, text)
    return 0
