"""``docctx-score cohesion``: :func:`fairseq_docctx.evaluation.discourse.lexical_cohesion`."""
from ...evaluation.discourse import lexical_cohesion
from .options import add_input_args, add_subcommand, corpus_from_args, emit, per_document_text


def add_parser(sub):
    p = add_subcommand(sub, "cohesion", main, help="lexical cohesion (Wong & Kit 2012) per document",
                       description="Lexical cohesion (see docs/evaluation.md).")
    add_input_args(p, ref=True, ref_required=False)
    p.add_argument("-t", "--target-lang", required=True)
    p.add_argument("--tokenize", choices=("words", "none"), default="words")
    return p


def _fmt(v):
    return "n/a" if v is None else f"{v:.2f}"


def main(args):
    corpus = corpus_from_args(args, documents="lexical cohesion")
    res = {"lexical_cohesion": lexical_cohesion(corpus.hyp, corpus.doc_ids, args.target_lang, args.tokenize)}
    if corpus.ref is not None:
        res["lexical_cohesion_ref"] = lexical_cohesion(corpus.ref, corpus.doc_ids, args.target_lang, args.tokenize)
    lines = []
    for key, r in res.items():
        c = r["counts"]
        lines.append(f"{key} = {_fmt(r['score'])}  (micro {_fmt(r['micro'])}; repetitions {c['repetition']}, "
                     f"synonyms {c['synonym']}, hypernym/hyponym {c['hypernym/hyponym']} of "
                     f"{c['content_words']} content words)  [{r['method']}]")
        if args.per_document:
            lines.append(per_document_text(r))
    emit(args, res, corpus, "\n".join(lines))
    return 0
