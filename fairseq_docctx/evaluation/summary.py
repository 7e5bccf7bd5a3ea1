"""``docctx-score table RUN.json ...``: several runs' scores side by side (markdown and JSON).

Each RUN.json is what a subcommand writes with ``--json`` (``{"run", "files", "metrics":
{metric: {"score": ..., ...}}}``; several subcommands may write into the same file for one
run). One row per run, one column per metric that any run has (``--metrics`` picks and
orders them); a run without a metric shows ``-``. The run files record the test set each
score was computed on (its numbers of sentences and documents, and the SHA-1 of its document
ids and of its references: :func:`~fairseq_docctx.evaluation.io.test_set_identity`; two
test sets of one size are still two): a column whose runs were
scored on different test sets is marked ``†`` in its header, with a line under the table
naming the runs of each test set. With ``--baseline NAME`` a ``Δ`` column follows every
metric (difference to that run); a column whose runs were scored on different test sets is
then refused, as a difference between two test sets is no Δ. With ``--significance
COMPARE.json`` (what ``docctx-score compare --json`` writes) a score whose difference to the compared baseline is
significant (p < the comparison's α, or ``--alpha``; the larger p of the tests it ran, or
``--test``'s) is marked ``*``. A comparison is refused unless it is about the table's runs:
its baseline and every system it compares are runs of the table, each system's score in it
is the run's score (to 0.005) and its test set is the run's (its sentences, documents,
document ids and references, where both record them); one of its metrics at least is a column of the
table. Per-document scores stay in the run files.
"""
import os
from typing import Dict, List, Optional, Sequence

from fairseq_docctx.evaluation.io import ScoreInputError, load_json_object

# column order when present; other metrics follow alphabetically
PREFERRED = ["bleu", "bleu_tok", "d-bleu", "d-bleu_tok", "chrf", "chrf++", "d-chrf", "d-chrf++", "meteor", "meteor-1.5",
             "meteor-1.5-exact-stem", "pronoun_accuracy", "noun_accuracy", "lexical_cohesion",
             "lexical_cohesion_ref", "coherence", "coherence_ref"]


def load_run(path: str) -> Dict:
    data = load_json_object(path, "metrics", "docctx-score")
    data.setdefault("run", os.path.splitext(os.path.basename(path))[0])
    return data


def read_paper_scores(path: str) -> List[Dict]:
    """Published scores to show beside the runs: a tab-separated file, one score a line,
    ``RUN<TAB>METRIC<TAB>SCORE<TAB>SOURCE`` (SOURCE: the paper and table, e.g. ``Yang et al.
    2019, Table 2``); blank lines and lines starting with ``#`` are skipped. Several lines for
    one run and metric (two papers' numbers) are all shown."""
    scores = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise ScoreInputError(f"no such file: {path}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4 or not all(p.strip() for p in parts):
            raise ScoreInputError(f"{path}, line {i}: expected RUN<TAB>METRIC<TAB>SCORE<TAB>SOURCE, "
                                  f"got {line!r}")
        run, metric, score, source = (p.strip() for p in parts)
        try:
            value = float(score)
        except ValueError:
            raise ScoreInputError(f"{path}, line {i}: score {score!r} is not a number") from None
        scores.append({"run": run, "metric": metric, "score": value, "source": source})
    return scores


def summary_table(runs: Sequence[Dict], metrics: Optional[List[str]] = None,
                  baseline: Optional[str] = None, comparisons: Sequence[Dict] = (),
                  alpha: Optional[float] = None, test: Optional[str] = None,
                  paper_scores: Sequence[Dict] = ()) -> Dict:
    """``{"metrics": [...], "rows": [{"run", "scores": {metric: score|None}, "delta": {...},
    "p": {metric: p}, "significant": {metric: bool}, "paper": {metric: [{"score", "source"}]}}]}``;
    ``comparisons``: results of ``docctx-score compare`` whose p-values mark the rows of their
    systems; ``paper_scores``: what ``read_paper_scores`` returns (one whose run or metric is
    not in the table goes to ``"paper_unmatched"``, listed under the markdown table)."""
    if metrics is None:
        present = {m for r in runs for m in r["metrics"]}
        metrics = [m for m in PREFERRED if m in present] + sorted(present - set(PREFERRED))
    rows = [{"run": r["run"], "scores": {m: (r["metrics"].get(m) or {}).get("score") for m in metrics}}
            for r in runs]
    names = [r["run"] for r in rows]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ScoreInputError(f"two runs are named {dup!r}; give each run its own --name when scoring")
    test_sets = _test_sets(runs, metrics)
    if baseline is not None:
        base = next((r for r in rows if r["run"] == baseline), None)
        if base is None:
            raise ScoreInputError(f"--baseline {baseline!r} is not one of the runs ({', '.join(names)})")
        for m, sets in test_sets.items():  # the baseline's test set last
            a, b = sorted(sets, key=lambda t: baseline in t["runs"])[-2:]
            other = f"the baseline {baseline!r}" if baseline in b["runs"] else f"run {b['runs'][0]!r}"
            raise ScoreInputError(
                f"{m}: run {a['runs'][0]!r} was scored on {_size(a)}, {other} on {_size(b)}: a difference "
                "between two test sets is no Δ; score the runs on one test set, or leave out --baseline")
        for r in rows:
            r["delta"] = {m: (r["scores"][m] - base["scores"][m]
                              if r["scores"][m] is not None and base["scores"][m] is not None else None)
                          for m in metrics}
    marks = _significance(runs, rows, metrics, comparisons, alpha, test, baseline)
    by_name = {r["run"]: r for r in rows}
    unmatched = []
    for p in paper_scores:
        if p["run"] not in by_name or p["metric"] not in metrics:
            unmatched.append(dict(p))
            continue
        by_name[p["run"]].setdefault("paper", {}).setdefault(p["metric"], []).append(
            {"score": p["score"], "source": p["source"]})
    signatures = {}
    for r in runs:
        for m in metrics:
            sig = (r["metrics"].get(m) or {}).get("signature") or (r["metrics"].get(m) or {}).get("method")
            if sig:
                signatures.setdefault(m, set()).add(sig)
    return {"metrics": metrics, "rows": rows, "baseline": baseline,
            "methods": {m: sorted(s) for m, s in signatures.items()}, "significance": marks,
            "paper_unmatched": unmatched, "test_sets": test_sets}


#: what identifies a test set in a run file's score (:func:`~fairseq_docctx.evaluation.io.test_set_identity`)
IDENTITY = ("sentences", "documents", "doc_ids_sha1", "references_sha1")


def _identity(entry: Dict) -> Dict:
    """The test-set identity a score records (its fields of :data:`IDENTITY` that are set)."""
    return {k: entry[k] for k in IDENTITY if entry.get(k) is not None}


def same_test_set(a: Dict, b: Dict) -> bool:
    """Whether two identities (:func:`_identity`) can be one test set: equal in every field
    both record (a run file written before a field existed is compared by the others)."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _test_sets(runs: Sequence[Dict], metrics: Sequence[str]) -> Dict[str, List[Dict]]:
    """The metrics whose runs were scored on different test sets (what identifies the test
    set in the run files, with each score: its ``sentences``, ``documents``, the SHA-1 of its
    document ids and of its references; a score without any is left out): ``{metric:
    [{"sentences", "documents", ..., "runs": [...]}, ...]}``, in run order."""
    out = {}
    for m in metrics:
        groups: List[Dict] = []
        for r in runs:
            entry = r["metrics"].get(m)
            if not isinstance(entry, dict) or entry.get("score") is None:
                continue
            ident = _identity(entry)
            if not ident:
                continue
            group = next((g for g in groups if same_test_set(g["identity"], ident)), None)
            if group is None:
                groups.append({"identity": ident, "runs": [r["run"]]})
            else:
                group["identity"].update(ident)
                group["runs"].append(r["run"])
        if len(groups) > 1:
            out[m] = [{**{k: g["identity"].get(k) for k in IDENTITY if k in g["identity"] or k in ("sentences",
                                                                                                    "documents")},
                       "runs": g["runs"]} for g in groups]
    return out


def _size(test_set: Dict) -> str:
    text = f"{test_set['sentences']} sentences / {test_set['documents']} documents"
    more = [f"{what} {test_set[k][:8]}" for k, what in (("references_sha1", "references"),
                                                       ("doc_ids_sha1", "document ids")) if test_set.get(k)]
    return text + (f" ({', '.join(more)})" if more else "")


#: how far a comparison's score of a system may be from the run's (both printed to 2 decimals)
SCORE_TOLERANCE = 0.005


def _significance(runs, rows, metrics, comparisons, alpha, test, baseline) -> Optional[Dict]:
    """Add ``p`` and ``significant`` to the rows the comparisons name; the legend. Refuses
    (:class:`ScoreInputError`) a comparison that is not about the table's runs (see the
    module doc)."""
    from .significance import significant

    if not comparisons:
        return None
    names = {r["run"] for r in rows}
    bases = sorted({c["baseline"] for c in comparisons})
    if baseline is not None and bases != [baseline]:
        raise ScoreInputError(f"--baseline {baseline!r} but the comparisons are against {', '.join(bases)}")
    legend = []
    for c in comparisons:
        a = alpha if alpha is not None else c.get("alpha", 0.05)
        if c["baseline"] not in names:
            raise ScoreInputError(f"the comparison's baseline {c['baseline']!r} is not one of the runs "
                                  f"({', '.join(sorted(names))}); name the runs as compare did (--names / --name)")
        _check_comparison(c, runs, metrics)
        for m, by_sys in significant(c, test).items():
            for r in rows:
                if r["run"] in by_sys and r["scores"].get(m) is not None:
                    r.setdefault("p", {})[m] = by_sys[r["run"]]
                    r.setdefault("significant", {})[m] = by_sys[r["run"]] < a
        tests = [test] if test else c.get("tests", ["bs", "ar"])
        legend.append(f"* p < {a:g} against {c['baseline']} ("
                      + " and ".join({"bs": "paired bootstrap", "ar": "approximate randomization"}[t] for t in tests)
                      + f", {c.get('resample', 'documents')} resampled)")
    return {"legend": sorted(set(legend))}


def _check_comparison(c: Dict, runs: Sequence[Dict], metrics: Sequence[str]) -> None:
    """Refuse a comparison whose systems are not runs of the table, whose scores or test set
    are not the runs', or none of whose metrics is a column."""
    what = f"comparison {c['_file']}" if c.get("_file") else "the comparison"
    by_name = {r["run"]: r for r in runs}
    missing = [s for s in c.get("systems", []) if s not in by_name]
    if missing:
        raise ScoreInputError(f"{what}: {', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} "
                              f"not a run of the table ({', '.join(sorted(by_name))}); give the runs it compares, "
                              "named as compare named them (--names / --name)")
    marked = []
    for m, res in c["comparisons"].items():
        for s in res["systems"]:
            entry = by_name[s["name"]]["metrics"].get(m)
            if not isinstance(entry, dict) or entry.get("score") is None:
                continue
            for unit in IDENTITY:
                if entry.get(unit) is not None and c.get(unit) is not None and entry[unit] != c[unit]:
                    mine, theirs = ((c[unit], entry[unit]) if unit in ("sentences", "documents")
                                    else (c[unit][:8], entry[unit][:8]))
                    label = {"doc_ids_sha1": "the document ids", "references_sha1": "the references"}.get(unit, unit)
                    raise ScoreInputError(
                        f"{what} was computed on {mine} {unit}, run {s['name']!r}'s {m} on {theirs}: "
                        "not the same test set" if unit in ("sentences", "documents") else
                        f"{what} and run {s['name']!r}'s {m} were computed on different test sets ({label}: "
                        f"SHA-1 {mine}… and {theirs}…)")
            if abs(entry["score"] - s["score"]) > SCORE_TOLERANCE:
                raise ScoreInputError(
                    f"{what} gives {s['name']!r} the {m} score {s['score']:.2f}, the run {entry['score']:.2f}: "
                    "not the same hypotheses, references or metric settings")
            if m in metrics:
                marked.append(m)
    if not marked:
        raise ScoreInputError(f"{what} compares {', '.join(c['comparisons'])}: no column of the table holds "
                              "these scores of its systems")


def to_markdown(table: Dict, digits: int = 2) -> str:
    def cell(v, sign=False):
        if v is None:
            return "-"
        return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"

    ms = table["metrics"]
    delta = table["baseline"] is not None
    paper = {m for r in table["rows"] for m in r.get("paper", {})}
    differ = table.get("test_sets") or {}
    head = ["run"] + [h for m in ms for h in ([m + ("†" if m in differ else "")] + (["Δ"] if delta else [])
                                              + ([f"{m}, paper"] if m in paper else []))]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in table["rows"]:
        cells = [r["run"]]
        for m in ms:
            cells.append(cell(r["scores"][m]) + ("*" if r.get("significant", {}).get(m) else ""))
            if delta:
                cells.append(cell(r["delta"][m], sign=True))
            if m in paper:
                cells.append(" / ".join(f"{cell(p['score'])} ({p['source']})" for p in r.get("paper", {}).get(m, []))
                             or "-")
        out.append("| " + " | ".join(cells) + " |")
    if table.get("significance"):
        out.append("")
        out.extend(table["significance"]["legend"])
    if differ:
        out.append("")
        out.extend(f"† {m}: scored on different test sets: " + "; ".join(
            f"{', '.join(t['runs'])}: {_size(t)}" for t in sets) for m, sets in differ.items())
    if table.get("paper_unmatched"):
        out.append("")
        out.append("Published scores without a run or metric in this table: " + "; ".join(
            f"{p['run']} {p['metric']} {cell(p['score'])} ({p['source']})" for p in table["paper_unmatched"]))
    if table["methods"]:
        out.append("")
        for m, sigs in table["methods"].items():
            flag = " (differs between runs!)" if len(sigs) > 1 else ""
            out.extend(f"- {m}{flag}: {s}" for s in sigs)
    return "\n".join(out)
