"""``docctx-score accuracy``: :func:`fairseq_docctx.evaluation.discourse.translation_accuracy`."""
from ...evaluation.discourse import translation_accuracy
from .options import add_input_args, add_subcommand, corpus_from_args, emit, per_document_text


def add_parser(sub):
    p = add_subcommand(sub, "accuracy", main,
                       help="pronoun and noun translation accuracy against the reference (APT-style)",
                       description="Pronoun / noun translation accuracy (see docs/evaluation.md).")
    add_input_args(p, ref=True, src=True, src_required=True)
    g = p.add_argument_group("accuracy")
    g.add_argument("-t", "--target-lang", required=True, help="language of hypotheses and references")
    g.add_argument("--kind", choices=("pronoun", "noun", "both"), default="both")
    g.add_argument("--align-ref", help="Pharaoh i-j links source->reference, one line per sentence")
    g.add_argument("--align-hyp", help="Pharaoh i-j links source->hypothesis, one line per sentence")
    g.add_argument("--symmetrize", choices=("grow-diag-final-and", "intersect", "union", "forward"),
                   default="grow-diag-final-and", help="how eflomal's two directions are combined")
    g.add_argument("--noun-list", help="file of nouns (one a line) instead of the built-in noun identification")
    g.add_argument("--tokenize", choices=("words", "none"), default="words",
                   help="words: \\w+ runs and punctuation; none: split at whitespace (as alignment files were made)")
    return p


def main(args):
    corpus = corpus_from_args(args)
    kinds = ("pronoun", "noun") if args.kind == "both" else (args.kind,)
    res = translation_accuracy(corpus, args.target_lang, kinds=kinds, tokenize_mode=args.tokenize,
                               align_ref=args.align_ref, align_hyp=args.align_hyp,
                               noun_list=args.noun_list, symmetrize=args.symmetrize)
    lines = []
    for key, r in res.items():
        c = r["counts"]
        score = "n/a" if r["score"] is None else f"{r['score']:.2f}"
        lines.append(f"{key.replace('_', ' ')} = {score}  (correct {c['correct']}, different "
                     f"{c['different']}, missing {c['missing']}; not evaluated (reference word unaligned) "
                     f"{c['unaligned']})  [{r['method']}]")
        if args.per_document:
            lines.append(per_document_text(r))
    emit(args, res, corpus, "\n".join(lines))
    return 0
