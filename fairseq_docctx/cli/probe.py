"""docctx-probe: generate the synthetic context probe, or score translations of it.

    docctx-probe generate --outdir D [--train-docs N --valid-docs N --test-docs N --seed S ...]
    docctx-probe score --annotations D/test.probe.jsonl --hyp HYP [--json]

HYP is plain text (one hypothesis per line, corpus order) or fairseq-generate output
(``H-<id>`` lines; generate with ``--required-batch-size-multiple 1`` so none is dropped).
"""
import argparse
import json
import sys

from fairseq_docctx.probe import (generate_probe, load_annotations, read_hypotheses,
                                  score_probe)


def _fmt(name, s):
    acc = "n/a" if s["accuracy"] is None else f"{100 * s['accuracy']:.1f}%"
    return f"{name:<22} {acc:>7}  ({s['correct']}/{s['total']}, missing {s['missing']})"


def cli_main(argv=None):
    p = argparse.ArgumentParser(prog="docctx-probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write {split}.src/.tgt/.docids/.probe.jsonl")
    g.add_argument("--outdir", required=True)
    g.add_argument("--train-docs", type=int, default=2000)
    g.add_argument("--valid-docs", type=int, default=100)
    g.add_argument("--test-docs", type=int, default=200)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--min-len", type=int, default=4, help="min sentences per document")
    g.add_argument("--max-len", type=int, default=8, help="max sentences per document")
    g.add_argument("--classes", type=int, default=2, choices=(2, 3),
                   help="noun classes: 2 (er/sie) or 3 (er/sie/es)")
    g.add_argument("--distances", default="1,2", help="antecedent distances, comma-separated")
    g.add_argument("--no-consistency", action="store_true",
                   help="leave out the lexical-consistency phenomenon")
    g.add_argument("--consistency-anchor", choices=("cued", "free"), default="cued",
                   help="anchor mentions of a consistency word: form forced by a source "
                   "synonym (cued) or a free choice at the first mention (free)")
    s = sub.add_parser("score", help="score hypotheses against {split}.probe.jsonl")
    s.add_argument("--annotations", required=True)
    s.add_argument("--hyp", required=True)
    s.add_argument("--consistency-against", choices=("hypothesis", "reference"),
                   default="hypothesis")
    s.add_argument("--phenomena", default=None,
                   help="comma-separated phenomena pooled into the overall accuracy")
    s.add_argument("--json", action="store_true", help="print the full result as JSON")
    a = p.parse_args(argv)

    if a.cmd == "generate":
        stats = generate_probe(
            a.outdir, {"train": a.train_docs, "valid": a.valid_docs, "test": a.test_docs},
            seed=a.seed, doc_len=(a.min_len, a.max_len), n_classes=a.classes,
            distances=tuple(int(x) for x in a.distances.split(",")),
            consistency=not a.no_consistency, consistency_anchor=a.consistency_anchor)
        for split, st in stats.items():
            print(f"{split}: {st['documents']} documents, {st['sentences']} sentences, "
                  f"items {st['items']}")
        return 0

    anns = load_annotations(a.annotations)
    hyps = read_hypotheses(a.hyp, n_expected=len(anns))
    res = score_probe(hyps, anns, consistency_against=a.consistency_against,
                      phenomena=a.phenomena.split(",") if a.phenomena else None)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(_fmt("overall", res))
    for k, v in res["by_phenomenon"].items():
        print(_fmt(k, v))
    for k, v in res["by_phenomenon_distance"].items():
        print(_fmt(k, v))
    if res["consistency_anchor_majority"] is not None:
        print(f"consistency: anchor-mention majority form share "
              f"{res['consistency_anchor_majority']:.2f}, unscorable "
              f"{res['consistency_unscorable']}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
