"""``docctx-score cxmi``: :mod:`fairseq_docctx.evaluation.cxmi`."""
from ...errors import UsageError
from ...evaluation.io import test_set_identity
from .options import (add_documents_args, add_engine_args, add_json_args, add_model_args, add_subcommand,
                      documents_files, documents_from_args, scorer_from_args, write_model_json)


def add_parser(sub):
    p = add_subcommand(
        sub, "cxmi", main, errors=(ValueError,),
        help="context usage: CXMI with true and random context",
        description="Mean per-token log-likelihood gain of the reference with the true context over "
        "no context (CXMI, Fernandes et al. 2021), and the same with a random context from another "
        "document.")
    add_model_args(p)
    add_engine_args(p)
    add_documents_args(p)
    p.add_argument("-s", "--source-lang", help="--engine transformers, a model not exported by docctx-export: "
                   "the source language of --input's files")
    p.add_argument("-t", "--target-lang", help="... and their target language")
    p.add_argument("--seed", type=int, default=1, help="seed of the random context")
    add_json_args(p)
    return p


def main(args) -> int:
    from ...evaluation import cxmi

    if args.engine == "fairseq" and (args.source_lang or args.target_lang):
        raise UsageError("-s/-t: the languages of a transformers model's --input (--engine transformers); a "
                         "checkpoint has its own")
    scorer = scorer_from_args(args)
    src, tgt, ids = documents_from_args(scorer, args)
    rep = cxmi.compute_cxmi(scorer, src, tgt, seed=args.seed)
    rep.update(documents_files(args))
    # what identifies the test set (docctx-score table compares it), the report's own counts kept
    rep.update({k: v for k, v in test_set_identity(ids, [len(d) for d in tgt]).items() if k not in rep})
    if args.json:  # first: a reader that stops reading (| head) loses no file
        write_model_json(args, {"cxmi": {"score": rep["cxmi"], **rep}}, documents_files(args))
    print(cxmi.format_report(rep))
    return 0
