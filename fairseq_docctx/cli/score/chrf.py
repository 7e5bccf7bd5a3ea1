"""``docctx-score chrf``: :mod:`fairseq_docctx.evaluation.chrf`."""
from sacrebleu.metrics import CHRF

from ...evaluation import chrf
from .options import add_input_args, add_level_args, add_subcommand, corpus_from_args, emit, levels


def add_parser(sub):
    p = add_subcommand(sub, "chrf", main,
                       help="sacreBLEU's chrF / chrF++, corpus level and per document; over documents",
                       description=chrf.__doc__.split("\n\n")[0])
    add_input_args(p)
    g = p.add_argument_group("chrF")
    g.add_argument("--word-order", type=int, default=0,
                   help="word n-gram order: 0 = chrF (default), 2 = chrF++")
    g.add_argument("--char-order", type=int, default=CHRF.CHAR_ORDER, help="character n-gram order (default 6)")
    g.add_argument("--beta", type=int, default=CHRF.BETA, help="recall weight β (default 2)")
    g.add_argument("--lowercase", "-lc", action="store_true")
    g.add_argument("--whitespace", action="store_true", help="keep whitespace in the character n-grams")
    add_level_args(g)
    return p


def main(args):
    corpus = corpus_from_args(args, documents="d-chrF" if args.document or args.both else False)
    options = dict(char_order=args.char_order, word_order=args.word_order, beta=args.beta,
                   lowercase=args.lowercase, whitespace=args.whitespace)
    texts, metrics = [], {}
    for document in levels(args):
        res = chrf.chrf_scores(corpus, document=document, **options)
        text = chrf.format_chrf(res)
        if args.per_document:
            text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
        texts.append(text)
        metrics[chrf.chrf_key(args.word_order, document)] = res
    emit(args, metrics, corpus, "\n".join(texts))
    return 0
