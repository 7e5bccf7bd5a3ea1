"""docctx-probe: generate the synthetic context probe, or score translations of it.

    docctx-probe generate --outdir D [--train-docs N --valid-docs N --test-docs N --seed S ...]
        [--setting NAME --sentence-len MIN,MAX --cue-position P --cue C --distractors P ...]
    docctx-probe score --annotations D/test.probe.jsonl --hyp HYP [--json FILE]
    docctx-probe evaluate --data BIN --annotations D/test.probe.jsonl \
        --model NAME=CKPT [--model NAME=CKPT ...] [--json FILE] [--hyp-dir DIR]
    docctx-probe example --annotations D/test.probe.jsonl [--hyp HYP [--wrong HYP]]

HYP is plain text (one hypothesis per line, corpus order) or fairseq-generate output
(``H-<id>`` lines; generate with ``--required-batch-size-multiple 1`` so none is dropped).
"""
import argparse
import json
import sys

from . import add_force, exit_on_errors_and_signals, mark, output_guard
from ..data.outputs import DATA_DIRECTORY_FILES

#: what the subcommands' options read and write (the output guard: fairseq_docctx.data.outputs)
INPUTS = {"annotations": "the annotations", "hyp": "the hypotheses", "wrong": "the hypotheses",
          "source": "the source", "data": ("the data directory", DATA_DIRECTORY_FILES)}
OUTPUTS = {"json": "file", "outdir": "folder", "hyp_dir": "folder"}


def _fmt(name, s):
    acc = "n/a" if s["accuracy"] is None else f"{100 * s['accuracy']:.1f}%"
    return f"{name:<22} {acc:>7}  ({s['correct']}/{s['total']}, missing {s['missing']})"


def cli_main(argv=None):
    return exit_on_errors_and_signals("docctx-probe", main, argv)


def main(argv=None):
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
    g.add_argument("--distances", default=None,
                   help="antecedent distances, comma-separated (default: the setting's; 1,2)")
    g.add_argument("--no-consistency", action="store_true",
                   help="leave out the lexical-consistency phenomenon")
    g.add_argument("--consistency-anchor", choices=("cued", "free"), default="cued",
                   help="anchor mentions of a consistency word: form forced by a source "
                   "synonym (cued) or a free choice at the first mention (free)")
    from fairseq_docctx.probe import CUE_POSITIONS, CUES, SETTINGS

    g.add_argument("--setting", choices=tuple(SETTINGS), default="default",
                   help="a named shape of the data (docs/probe.md); the options below override it")
    g.add_argument("--sentence-len", metavar="MIN,MAX", default=None,
                   help="words per sentence, the final period not counted (default: the templates' own)")
    g.add_argument("--cue-position", choices=CUE_POSITIONS, default=None,
                   help="where the antecedent's noun phrase stands in its sentence (default: mixed)")
    g.add_argument("--cue", choices=CUES, default=None,
                   help="what decides a noun's class: the noun (a table to learn; the default), "
                   "the source article (determiner), or two cues in two sentences that must agree (two)")
    g.add_argument("--distractors", type=float, default=None, metavar="P",
                   help="chance that a sentence between an antecedent and its pronoun names another noun")
    g.add_argument("--nouns-per-class", type=int, default=None, metavar="N",
                   help="nouns of each class (default 8; more are invented words)")
    g.add_argument("--adjectives", type=int, default=None, metavar="N",
                   help="adjectives (default 9; more are invented words)")
    s = sub.add_parser("score", help="score hypotheses against {split}.probe.jsonl")
    s.add_argument("--annotations", required=True)
    s.add_argument("--hyp", required=True)
    s.add_argument("--consistency-against", choices=("hypothesis", "reference"),
                   default="hypothesis")
    s.add_argument("--phenomena", default=None,
                   help="comma-separated phenomena pooled into the overall accuracy")
    s.add_argument("--json", metavar="FILE", help="also write the full result to this JSON "
                   "file ('-': print it instead of the table)")
    e = sub.add_parser("evaluate", help="translate a split with one or more checkpoints (document "
                       "order) and print their accuracy on the context-dependent words and "
                       "their CXMI side by side")
    e.add_argument("--data", required=True, help="the binarized probe the models were trained on")
    e.add_argument("--annotations", required=True, help="{split}.probe.jsonl of the split")
    e.add_argument("--source", help="its source sentences (default: {split}.src next to it)")
    e.add_argument("--model", action="append", required=True, metavar="NAME=CKPT",
                   help="a column of the table: its name and checkpoint (repeat for more)")
    e.add_argument("--split", default="test", help="split of --data CXMI scores (default: test)")
    e.add_argument("--beam", type=int, default=1)
    e.add_argument("--batch-size", type=int, default=64, help="documents decoded side by side")
    e.add_argument("--no-cxmi", action="store_true", help="skip CXMI")
    e.add_argument("--seed", type=int, default=1, help="seed of CXMI's random context")
    e.add_argument("--json", metavar="FILE", help="write the full reports to this JSON file")
    e.add_argument("--hyp-dir", metavar="DIR", help="write each model's hypotheses to DIR/NAME.hyp")
    x = sub.add_parser("example", help="print a sentence worth showing: DOC_NUMBER SENTENCE "
                       "DOC_ID LINE (tab-separated, 0-based; LINE in the split's files) of the "
                       "first item at the largest distance that --hyp gets right and --wrong "
                       "gets wrong")
    x.add_argument("--annotations", required=True)
    x.add_argument("--phenomenon", default="anaphora")
    x.add_argument("--distance", type=int, default=None, help="default: the largest there is")
    x.add_argument("--hyp", help="hypotheses that must get the item right")
    x.add_argument("--wrong", help="hypotheses that must get it wrong")
    for parser in (g, s, e):
        mark(parser, INPUTS, OUTPUTS)
        add_force(parser, "a file (--json, the files of --outdir / --hyp-dir)")
    a = p.parse_args(argv)
    from fairseq_docctx.probe import find_example, load_annotations, read_hypotheses

    if a.cmd != "example":
        models = [spec.partition("=")[2] for spec in a.model] if a.cmd == "evaluate" else []
        with output_guard(p, a, "docctx-probe", [("the checkpoint", m) for m in models]) as outputs:
            return _run(p, a, outputs)
    if a.cmd == "example":
        try:
            anns = load_annotations(a.annotations)
            hyps = {k: read_hypotheses(getattr(a, k), n_expected=len(anns)) if getattr(a, k)
                    else None for k in ("hyp", "wrong")}
            ex = find_example(anns, a.phenomenon, a.distance, hyps["hyp"], hyps["wrong"])
        except (ValueError, OSError) as err:
            p.exit(2, f"docctx-probe example: error: {a.annotations}: {err}\n")
        print(f"{ex['doc_number']}\t{ex['sentence']}\t{ex['doc']}\t{ex['line']}")
        return 0


def _run(p, a, outputs) -> int:
    """``generate``, ``score`` and ``evaluate``, their files written through ``outputs``."""
    from fairseq_docctx.probe import generate_probe, load_annotations, read_hypotheses, score_probe

    if a.cmd == "evaluate":
        return _evaluate(p, a, outputs)
    if a.cmd == "generate":
        try:
            shape = _shape(a)
            stats = generate_probe(
                a.outdir, {"train": a.train_docs, "valid": a.valid_docs, "test": a.test_docs},
                seed=a.seed, doc_len=(a.min_len, a.max_len), n_classes=a.classes,
                consistency=not a.no_consistency, consistency_anchor=a.consistency_anchor,
                outputs=outputs, **shape)
        except ValueError as err:
            from fairseq_docctx.data.outputs import OutputClash

            if isinstance(err, OutputClash):  # the output guard's own message
                raise
            p.exit(2, f"docctx-probe generate: error: {err}\n")
        for split, st in stats.items():
            print(f"{split}: {st['documents']} documents, {st['sentences']} sentences, "
                  f"items {st['items']}")
        return 0

    anns = load_annotations(a.annotations)
    hyps = read_hypotheses(a.hyp, n_expected=len(anns))
    res = score_probe(hyps, anns, consistency_against=a.consistency_against,
                      phenomena=a.phenomena.split(",") if a.phenomena else None)
    if a.json == "-":
        print(json.dumps(res, indent=2))
        return 0
    if a.json:
        try:
            outputs.write_text(a.json, json.dumps(res, indent=2))
        except OSError as err:
            p.exit(2, f"docctx-probe score: error: --json {a.json}: {err.strerror}\n")
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


def _ints(text: str, option: str):
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{option} {text}: expected comma-separated integers") from None


def _shape(a) -> dict:
    """The shape options of ``generate``: the setting's, overridden by those given."""
    from fairseq_docctx.probe import SETTINGS

    shape = dict(SETTINGS[a.setting])
    if a.distances is not None:
        shape["distances"] = _ints(a.distances, "--distances")
    if a.sentence_len is not None:
        shape["sentence_len"] = _ints(a.sentence_len, "--sentence-len")
        if len(shape["sentence_len"]) != 2:
            raise ValueError(f"--sentence-len {a.sentence_len}: expected MIN,MAX")
    for key in ("cue_position", "cue", "distractors", "nouns_per_class", "adjectives"):
        if getattr(a, key) is not None:
            shape[key] = getattr(a, key)
    return shape


def _evaluate(p, a, outputs) -> int:
    import os

    from fairseq_docctx.probe import evaluate_checkpoint, format_comparison

    models = []
    for spec in a.model:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            p.error(f"--model {spec}: expected NAME=CHECKPOINT")
        if not os.path.isfile(path):
            p.exit(2, f"docctx-probe evaluate: error: --model {name}: no checkpoint file {path}\n")
        models.append((name, path))
    for path, what in ((a.annotations, "--annotations"), (a.source, "--source")):
        if path and not os.path.isfile(path):
            p.exit(2, f"docctx-probe evaluate: error: {what}: no such file {path}\n")
    hyp_files = {name: os.path.join(a.hyp_dir, f"{name}.hyp") for name, _ in models} if a.hyp_dir else {}
    for name, f in hyp_files.items():  # refused before the work, not after it
        outputs.file(f, f"--hyp-dir {a.hyp_dir}: {f}")
    results = {}
    try:
        for name, path in models:
            results[name] = evaluate_checkpoint(
                path, a.data, a.annotations, split=a.split, source=a.source, beam=a.beam,
                batch_size=a.batch_size, cxmi=not a.no_cxmi, seed=a.seed)
    except (ValueError, FileNotFoundError) as err:
        p.exit(2, f"docctx-probe evaluate: error: {err}\n")
    print(format_comparison(results))
    for name, f in hyp_files.items():
        outputs.write_text(f, "".join(h + "\n" for h in results[name]["hypotheses"]))
    if a.json:
        outputs.write_text(a.json, json.dumps({n: {k: v for k, v in r.items() if k != "hypotheses"}
                                               for n, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
