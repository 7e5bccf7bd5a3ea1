"""``docctx-score contrastive``: :mod:`fairseq_docctx.evaluation.contrastive`."""
import os

from ...evaluation import contrastive as ct
from ...evaluation.io import ScoreInputError, write_json_file
from ...evaluation.summary import load_run
from .options import add_engine_args, add_json_args, add_model_args, add_subcommand, scorer_from_args, write_model_json


def add_parser(sub):
    p = add_subcommand(
        sub, "contrastive", main, errors=(ValueError,),
        help="contrastive test suites: accuracy of the model's scores",
        description="Score every candidate translation of a contrastive test set with a model (given "
        "its context) and report how often the correct one scores highest: overall, per phenomenon, "
        "per antecedent distance.")
    p.add_argument("testset", nargs="?", help="ContraPro or Voita JSON; Voita scoring_data .src file; Bawden "
                   "PREFIX (PREFIX.prev.*, PREFIX.current.*); Lopes PREFIX (PREFIX.current.src)")
    p.add_argument("--format", default="auto", choices=ct.FORMATS)
    p.add_argument("-s", "--source-lang", help="source language code of the file names (default: the model's)")
    p.add_argument("-t", "--target-lang", help="target language code of the file names (default: the model's)")
    p.add_argument("--context-prefix", help="ContraPro: prefix of the extracted .text/.context files "
                   "(default: the JSON path without .json)")
    p.add_argument("--context-lines", type=int, help="ContraPro/Lopes: context lines per candidate "
                   "(Lopes: picks PREFIX.cK.context.*; default: the largest there)")
    p.add_argument("--groups", help="Voita scoring_data: the test set's JSON (default: NAME.json next "
                   "to scoring_data/)")
    add_model_args(p, path_required=False)
    add_engine_args(p)
    add_json_args(p)
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="instead of scoring: McNemar's test between the verdicts of two systems' --json "
                   "reports on the same test set (every contrastive and ctxpro metric they share)")
    p.add_argument("--scores-out", help="write one log-probability per candidate line (file order)")
    return p


def main(args) -> int:
    if args.compare:
        return _compare(args)
    if not args.testset or not args.path:
        raise ScoreInputError("give a test set and --path (or --compare A.json B.json)")
    if args.format in ("bawden", "contrapro", "auto") and not (args.source_lang and args.target_lang):
        scorer = scorer_from_args(args)
        src = args.source_lang or scorer.languages[0]
        tgt = args.target_lang or scorer.languages[1]
        if src is None or tgt is None:
            raise ScoreInputError(f"{args.testset}: give the languages of its file names (-s, -t)")
    else:
        scorer, src, tgt = None, args.source_lang, args.target_lang
    examples = ct.load_examples(args.testset, args.format, src, tgt, args.context_prefix,
                                args.context_lines, args.groups)
    if scorer is None:
        scorer = scorer_from_args(args)
    rep = ct.evaluate(scorer, examples)
    if args.scores_out:
        with args.outputs.open(args.scores_out) as f:
            for sc in rep["scores"]:
                f.writelines(f"{s:.6f}\n" for s in sc)
    if args.json:  # first: a reader that stops reading (| head) loses no file
        name = os.path.splitext(os.path.basename(os.path.normpath(args.testset)))[0]
        metric = {"score": rep["accuracy"], **{k: v for k, v in rep.items() if k != "scores"}}
        write_model_json(args, {f"contrastive:{name}": metric}, {"testset": args.testset})
    print(ct.format_report(rep))
    return 0


def _compare(args) -> int:
    runs = [load_run(p) for p in args.compare]
    shared = [m for m in runs[0]["metrics"] if m.startswith(("contrastive:", "ctxpro:")) and m in runs[1]["metrics"]]
    if not shared:
        raise ScoreInputError(f"{args.compare[0]} and {args.compare[1]} share no contrastive or ctxpro test set")
    results = {m: ct.compare_reports(runs[0]["metrics"][m], runs[1]["metrics"][m], runs[0]["run"], runs[1]["run"])
               for m in shared}
    if args.json:  # first: a reader that stops reading (| head) loses no file
        write_json_file(args.json, {"mcnemar": results, "files": list(args.compare)}, args.outputs)
    for m, res in results.items():
        print(f"{m}\n{ct.format_mcnemar(res)}")
    return 0
