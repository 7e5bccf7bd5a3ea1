"""``docctx-score coherence``: :func:`fairseq_docctx.evaluation.discourse.coherence`."""
from ...evaluation.discourse import WordVectors, coherence
from ...evaluation.io import ScoreInputError
from .options import add_input_args, add_subcommand, corpus_from_args, emit, per_document_text


def add_parser(sub):
    p = add_subcommand(sub, "coherence", main, help="coherence: cosine of adjacent sentences' mean word vectors",
                       description="Coherence (see docs/evaluation.md).")
    add_input_args(p, ref=True, ref_required=False)
    g = p.add_argument_group("vectors (one of)")
    g.add_argument("--vectors", help="word2vec text file")
    g.add_argument("--checkpoint", help="fairseq checkpoint whose decoder embeddings are used")
    g.add_argument("--dict", help="the checkpoint's target dictionary (dict.TGT.txt)")
    g.add_argument("--spm-model", help="SentencePiece model splitting text into the checkpoint's tokens")
    return p


def main(args):
    if bool(args.vectors) == bool(args.checkpoint):
        raise ScoreInputError("give --vectors FILE or --checkpoint CKPT --dict DICT")
    if args.checkpoint:
        if not args.dict:
            raise ScoreInputError("--checkpoint needs --dict (the model's target dictionary)")
        vec = WordVectors.from_checkpoint(args.checkpoint, args.dict, args.spm_model)
    else:
        vec = WordVectors.from_word2vec(args.vectors)
    corpus = corpus_from_args(args, documents="coherence")
    res = {"coherence": coherence(corpus.hyp, corpus.doc_ids, vec)}
    if corpus.ref is not None:
        res["coherence_ref"] = coherence(corpus.ref, corpus.doc_ids, vec)
    lines = []
    for key, r in res.items():
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        lines.append(f"{key} = {score}  ({r['documents_left_out']} documents left out, "
                     f"{r['sentences_without_vector']} sentences without a vector)  [{r['method']}]")
        if args.per_document:
            lines.append(per_document_text(r, 4))
    emit(args, res, corpus, "\n".join(lines))
    return 0
