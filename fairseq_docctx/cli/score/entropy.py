"""``docctx-score entropy``: :mod:`fairseq_docctx.evaluation.entropy`."""
import math

from ...evaluation.io import test_set_identity

from .options import (add_documents_args, add_json_args, add_model_args, add_subcommand, documents_files,
                      documents_from_args, scorer_from_args, write_model_json)


def add_parser(sub):
    p = add_subcommand(
        sub, "entropy", main, errors=(ValueError,),
        help="entropy of a model's attention over its context, per word, sentence and test set",
        description="Per position, the entropy of the model's attention over its context (Kuang & Xiong 2018, "
        "Eq. 12): concat_transformer: cross-attention over the context tokens; han_transformer: sentence-level "
        "attention; qcn_transformer: routing coefficients. Averaged per sentence and over the test set; JSON "
        "and PNG.")
    add_model_args(p)
    add_documents_args(p)
    p.add_argument("--base", default="e", choices=("e", "2"), help="logarithm: e (nats, default) or 2 (bits)")
    p.add_argument("--max-sentences", type=int, help="measure the first N sentences only")
    p.add_argument("--plot", metavar="PNG", help="write the plot here")
    p.add_argument("--plot-doc", help="the plotted sentence's document (id or number; default: the first "
                   "sentence with context)")
    p.add_argument("--plot-sentence", type=int, default=0, help="its sentence number in the document (0-based)")
    add_json_args(p)
    return p


def _plot_index(rep, doc, sentence):
    if doc is None:
        return None
    ids = []
    for s in rep["sentences"]:
        if s["doc"] not in ids:
            ids.append(s["doc"])
    name = doc if doc in ids else (ids[int(doc)] if doc.isdigit() and int(doc) < len(ids) else None)
    for i, s in enumerate(rep["sentences"]):
        if s["doc"] == name and s["index"] == sentence:
            return i
    raise ValueError(f"--plot-doc {doc} --plot-sentence {sentence}: no such sentence among those measured")


def main(args) -> int:
    from ...evaluation.entropy import entropy_report, format_report, plot_entropy
    from ...models.document_context import require

    base = math.e if args.base == "e" else 2.0
    scorer = scorer_from_args(args)
    require(scorer.model, "attention")  # before the documents are read
    src, tgt, ids = documents_from_args(scorer, args)
    rep = entropy_report(scorer, src, tgt, ids, base, args.max_sentences)
    rep.update(documents_files(args))
    identity = {k: v for k, v in test_set_identity(ids, [len(d) for d in tgt]).items() if k not in rep}
    # the files first: a reader that stops reading standard output (| head) loses none
    if args.json:
        means = [d["mean"] for d in rep["distributions"] if d["mean"] is not None]
        write_model_json(args, {"attention_entropy": {"score": means[0] if means else None, **rep, **identity}},
                         documents_files(args))
    k = None
    if args.plot:
        with args.outputs.open(args.plot, "wb") as f:
            k = plot_entropy(rep, f, _plot_index(rep, args.plot_doc, args.plot_sentence))
    print(format_report(rep))
    if k is not None:
        print(f"docctx-score entropy: wrote {args.plot} (sentence {rep['sentences'][k]['index']} of "
              f"{rep['sentences'][k]['doc']})")
    return 0
