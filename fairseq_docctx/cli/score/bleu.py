"""``docctx-score bleu``: :mod:`fairseq_docctx.evaluation.bleu`."""
from ...evaluation import bleu
from ...evaluation.io import ScoreInputError
from .options import add_input_args, add_level_args, add_subcommand, corpus_from_args, emit, levels


def add_parser(sub):
    p = add_subcommand(sub, "bleu", main, help="sacreBLEU, corpus level and per document; d-BLEU over documents",
                       description=bleu.__doc__.split("\n\n")[0])
    add_input_args(p)
    g = p.add_argument_group("BLEU")
    g.add_argument("--tokenized", action="store_true",
                   help="BLEU of the text's whitespace tokens exactly as multi-bleu.perl computes it "
                   "(no tokenization, no smoothing, case-sensitive)")
    g.add_argument("--pretokenize", metavar="NAME",
                   help="tokenize both sides first, then score as --tokenized (implies it): moses "
                   "(Moses' tokenizer.perl by sacremoses, as the papers tokenized), moses-aggressive "
                   "(its -a), none, or a sacreBLEU tokenizer (13a, intl, zh, ...)")
    g.add_argument("--lang", "-l", default="en", help="language of the references, for --pretokenize moses "
                   "(default en)")
    g.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer of detokenized BLEU (default 13a)")
    g.add_argument("--lowercase", "-lc", action="store_true",
                   help="case-insensitive (with --tokenized: multi-bleu.perl -lc, ASCII letters)")
    g.add_argument("--smooth-method", choices=bleu.SMOOTH, default=None,
                   help="default: none with --tokenized (multi-bleu.perl's), else exp (sacreBLEU's)")
    add_level_args(g)
    g.add_argument("--metric-name", metavar="NAME",
                   help="the score's name in --json (default: bleu, bleu_tok, d-bleu, d-bleu_tok), "
                   "e.g. a test set's, to keep the scores of one run on several test sets apart")
    return p


def main(args):
    if args.metric_name and args.both:
        raise ScoreInputError("--metric-name names one score: not with --both")
    tokenized = args.tokenized or args.pretokenize is not None
    # a tokenizer that cannot be built (unknown, its extra missing, its model not downloadable)
    # fails before the files are read
    if tokenized and args.pretokenize is not None:
        bleu.pretokenizer(args.pretokenize, args.lang)
    elif not tokenized:
        bleu.bleu_metric(tokenize=args.tokenize)
    corpus = corpus_from_args(args, documents="d-BLEU" if args.document or args.both else False)
    texts, metrics = [], {}
    for document in levels(args):
        res = bleu.bleu_scores(corpus, tokenized=tokenized, pretokenize=args.pretokenize,
                               tokenize=args.tokenize, lowercase=args.lowercase,
                               smooth_method=args.smooth_method, document=document, lang=args.lang)
        text = bleu.format_bleu(res)
        if args.per_document:
            text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
        texts.append(text)
        metrics[args.metric_name or bleu.metric_key("bleu", tokenized, document)] = res
    emit(args, metrics, corpus, "\n".join(texts))
    return 0
