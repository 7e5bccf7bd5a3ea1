"""``docctx-score table``: :mod:`fairseq_docctx.evaluation.summary`."""
from ...evaluation import summary
from ...evaluation.io import write_json_file
from ...evaluation.significance import load_comparison
from .options import add_subcommand


def add_parser(sub):
    p = add_subcommand(sub, "table", main, help="markdown/JSON table comparing runs' --json results",
                       description=summary.__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN.json")
    p.add_argument("--metrics", help="comma-separated metrics (columns) in this order")
    p.add_argument("--baseline", help="run name; adds a difference column per metric")
    p.add_argument("--digits", type=int, default=2)
    p.add_argument("--significance", action="append", default=[], metavar="COMPARE.json",
                   help="a 'docctx-score compare --json' result: mark significant differences with * "
                   "(repeatable)")
    p.add_argument("--alpha", type=float, help="significance level (default: the comparison's)")
    p.add_argument("--test", choices=("bs", "ar"), help="mark by this test's p only (default: the larger "
                   "p of the tests the comparison ran)")
    p.add_argument("--paper-scores", metavar="FILE", help="published scores to show beside the runs: "
                   "RUN<TAB>METRIC<TAB>SCORE<TAB>SOURCE lines (a column 'METRIC, paper' after each such metric)")
    p.add_argument("--json", help="also write the table as JSON here")
    p.add_argument("--output", "-o", help="write the markdown here instead of stdout")
    return p


def main(args):
    runs = [summary.load_run(p) for p in args.runs]
    comparisons = [{**load_comparison(p), "_file": p} for p in args.significance]
    paper = summary.read_paper_scores(args.paper_scores) if args.paper_scores else ()
    table = summary.summary_table(runs, args.metrics.split(",") if args.metrics else None, args.baseline,
                                  comparisons, args.alpha, args.test, paper)
    md = summary.to_markdown(table, args.digits)
    if args.json:  # first: a reader that stops reading (| head) loses no file
        write_json_file(args.json, table, args.outputs)
    if args.output:
        args.outputs.write_text(args.output, md + "\n")
    else:
        print(md)
    return 0
