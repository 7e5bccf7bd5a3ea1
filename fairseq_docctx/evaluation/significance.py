"""Paired significance tests of systems against a baseline on the same test set, resampling
whole documents (``docctx-score compare``), and McNemar's test for contrastive accuracy.

**What is resampled.** sacreBLEU's paired tests (Post 2018; sacrebleu 2.x,
``sacrebleu.significance``) work on per-segment sufficient statistics: a sample is a segment,
its statistics (BLEU: matches and totals per n-gram order, lengths; chrF: the n-gram counts)
are summed over the segments a resample draws, and the score is computed from the sums.
Sentences of one document are not independent (they share topic, terms, speaker), so
resampling sentences understates the variance of a document-level test set; here a sample is
a **document**: :class:`DocumentStatistics` gives sacreBLEU one row per document, the
statistics of its sentences summed, and sacreBLEU's own machinery does the rest. With one
sentence per document this is sacreBLEU's sentence-level test exactly (same seed, same
draws). ``--resample sentences`` gives that test on any corpus; ``--document`` scores joined
documents (d-BLEU / d-chrF: one segment per document, so documents are resampled by
construction).

* **Paired bootstrap resampling** (Koehn 2004): sacreBLEU's ``PairedTest(test_type="bs")`` —
  ``n`` resamples of the documents with replacement (the same draws for every system), the
  score of each; p-value as sacreBLEU computes it (Moses'
  ``bootstrap-hypothesis-difference-significance.pl``); the 95 % confidence interval
  (``mean ± ci``) of every system from the same resamples (``sacrebleu.significance.estimate_ci``).
* **Approximate randomization** (Noreen 1989; Riezler & Maxwell 2005, §3): sacreBLEU's trials
  — in each of ``n`` trials every document's statistics are swapped between the two systems
  with probability 1/2 (sacreBLEU's selector draws, seeded the same) — and its metric
  computes both pseudo-systems' scores. The p-value is ``(c + 1) / (n + 1)`` with ``c`` the
  number of trials whose absolute score difference is **at least** the observed one, as
  Riezler & Maxwell define it. sacreBLEU 2.6.0 counts only trials strictly above the
  observed difference, which gives a system compared with itself ``p = 1/(n+1)`` (the
  multeval report the same code follows, jhclark/multeval#5); counting ties gives it ``p =
  1``; on systems without tied trials both p-values are equal (tested). For the same reason a
  system whose statistics equal the baseline's on every sample gets bootstrap ``p = 1``.
* **McNemar's test** (McNemar 1947) for two systems' verdicts on the same contrastive
  examples: exact two-sided binomial test on the discordant pairs (examples one system gets
  right and the other wrong), ``scipy.stats.binomtest``.
"""
import contextlib
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

#: signature field naming the resampled unit
RESAMPLE_FIELD = "resample"
METRICS = ("bleu", "chrf", "chrf++")
TESTS = ("bs", "ar")


class DocumentStatistics:
    """A sacreBLEU metric whose samples are documents: :meth:`_extract_corpus_statistics`
    takes the hypotheses as documents (lists of sentences) and the references as streams of
    documents, and returns one row per document, the sum of the metric's own statistics of
    its sentences. Everything else is the metric's, so sacreBLEU's ``PairedTest`` and
    bootstrap run on it unchanged."""

    def __init__(self, metric):
        self.metric = metric

    def _extract_corpus_statistics(self, hypotheses, references):
        lengths = [len(d) for d in hypotheses]
        if min(lengths, default=1) < 1:
            raise ValueError("a document without sentences cannot be resampled")
        flat_h = [s for d in hypotheses for s in d]
        flat_r = None if references is None else [[s for d in r for s in d] for r in references]
        stats = np.asarray(self.metric._extract_corpus_statistics(flat_h, flat_r))
        starts = np.cumsum([0] + lengths[:-1])
        return np.add.reduceat(stats, starts, axis=0).tolist()

    def _aggregate_and_compute(self, stats):
        return self.metric._aggregate_and_compute(stats)

    def _compute_score_from_stats(self, stats):
        return self.metric._compute_score_from_stats(stats)

    def get_signature(self):
        sig = self.metric.get_signature()
        sig.update(RESAMPLE_FIELD, "doc")
        return sig


@contextlib.contextmanager
def sacrebleu_seed(seed: int):
    """sacreBLEU reads its tests' seed from ``SACREBLEU_SEED`` (its command line's way)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(int(seed))
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def units(docs: Sequence[Sequence[str]], resample: str, document: bool):
    """The samples handed to sacreBLEU: documents (lists of sentences), every sentence alone,
    or (``document``) joined documents."""
    if document:
        return [" ".join(d) for d in docs]
    if resample == "documents":
        return [list(d) for d in docs]
    return [s for d in docs for s in d]


def _reference_units(refs, resample, document):
    return [units(r, resample, document) for r in refs]


def paired_bootstrap(metric, named_systems, references, n_samples: int = 1000, seed: int = 12345):
    """sacreBLEU's paired bootstrap: ``(signature, [Result per system])`` (the baseline
    first; ``Result.score``, ``.p_value`` (None for the baseline), ``.mean``, ``.ci``)."""
    import logging

    from sacrebleu.significance import PairedTest

    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # its progress lines
    with sacrebleu_seed(seed):
        test = PairedTest(named_systems, {"m": metric}, references, test_type="bs", n_samples=n_samples)
        sigs, scores = test()
    (name,) = sigs
    return sigs[name].format(), scores[name]


def approximate_randomization(metric, base_stats, sys_stats, trials: int = 10000, seed: int = 12345):
    """Paired approximate randomization of two systems' per-sample statistics (rows of
    ``metric._extract_corpus_statistics``): ``(p, observed difference)``, ties counted (see
    the module doc). The trials are sacreBLEU's (``_paired_ar_test``: the same generator and
    selector draws), the scores its metric's."""
    base, sys_ = np.asarray(base_stats), np.asarray(sys_stats)
    if base.shape != sys_.shape:
        raise ValueError(f"statistics of {base.shape[0]} and {sys_.shape[0]} samples: not the same test set")
    rng = np.random.default_rng(seed)
    pos = rng.integers(2, size=(trials, base.shape[0]), dtype=bool)
    neg = ~pos
    observed = abs(metric._aggregate_and_compute(base).score - metric._aggregate_and_compute(sys_).score)
    shuf_a = pos @ base + neg @ sys_
    shuf_b = neg @ base + pos @ sys_
    a = np.array([metric._aggregate_and_compute(x).score for x in shuf_a[:, None]])
    b = np.array([metric._aggregate_and_compute(x).score for x in shuf_b[:, None]])
    # ties: the same statistics summed in another order may differ in the last bits
    c = int(np.sum(np.abs(a - b) >= observed - 1e-9))
    return (c + 1) / (trials + 1), observed


def compare_systems(metric, baseline, systems, references, *, resample: str = "documents",
                    document: bool = False, tests: Sequence[str] = TESTS, bs_samples: int = 1000,
                    ar_trials: int = 10000, seed: int = 12345) -> Dict:
    """Compare every system with the baseline on one metric. ``baseline``: ``(name, documents)``,
    ``systems``: a list of those, ``references``: reference streams of documents (all
    aligned). Returns ``{"signature", "signature_ar", "systems": [{"name", "score", "mean",
    "ci", "p_bs", "p_ar"}, ...]}`` (the baseline first, its p-values ``None``)."""
    if resample not in ("documents", "sentences"):
        raise ValueError(f"resample {resample!r}: documents or sentences")
    if seed < 1:
        raise ValueError("the seed must be a positive integer (sacreBLEU treats 0 as 'no seed')")
    wrapped = DocumentStatistics(metric) if resample == "documents" and not document else metric
    named = [(n, units(d, resample, document)) for n, d in [baseline] + list(systems)]
    refs = _reference_units(references, resample, document)
    sig, results = paired_bootstrap(wrapped, named, refs, bs_samples, seed)
    stats = [np.asarray(wrapped._extract_corpus_statistics(h, refs)) for _, h in named]
    out = {"signature": sig, "systems": []}
    for (name, _), r, st in zip(named, results, stats):
        p_bs = None
        if r.p_value is not None and "bs" in tests:
            # identical statistics: every resampled difference is 0, which sacreBLEU's strict
            # count reports as p = 1/(n+1); no difference is p = 1
            p_bs = 1.0 if np.array_equal(st, stats[0]) else float(r.p_value)
        out["systems"].append({"name": name, "score": float(r.score), "mean": float(r.mean),
                               "ci": float(r.ci), "p_bs": p_bs, "p_ar": None})
    if "ar" in tests:
        ar_sig = wrapped.get_signature()
        ar_sig.update("seed", str(seed))
        ar_sig.update("ar", ar_trials)
        out["signature_ar"] = ar_sig.format()
        for entry, st in zip(out["systems"][1:], stats[1:]):
            entry["p_ar"], _ = approximate_randomization(wrapped, stats[0], st, ar_trials, seed)
    return out


def metric_for(name: str, *, tokenized: bool = False, tokenize: str = "13a", lowercase: bool = False,
               smooth_method: str = "exp"):
    """The sacreBLEU metric object of ``bleu``, ``chrf`` or ``chrf++`` with these options."""
    from .bleu import bleu_metric
    from .chrf import chrf_metric

    if name == "bleu":
        return bleu_metric(tokenized=tokenized, tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method)
    if name in ("chrf", "chrf++"):
        return chrf_metric(word_order=2 if name == "chrf++" else 0, lowercase=lowercase)
    raise ValueError(f"unknown metric {name!r} (choose from {', '.join(METRICS)})")


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> Dict:
    """McNemar's exact test on paired verdicts: ``{"both", "only_a", "only_b", "neither",
    "p"}``; ``p`` is the two-sided exact binomial p-value of ``only_a`` among the discordant
    pairs (1 when there are none)."""
    from scipy.stats import binomtest

    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} verdicts: not the same examples")
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    n = only_a + only_b
    p = 1.0 if n == 0 else float(binomtest(only_a, n, 0.5).pvalue)
    return {"both": int(np.sum(a & b)), "only_a": only_a, "only_b": only_b, "neither": int(np.sum(~a & ~b)),
            "p": p}


# ------------------------------------------------------------------------------------------
# docctx-score compare


def add_subcommand(sub):
    from .io import HYP_FORMATS, POST_PROCESS, TEXT_FORMATS, run_command

    p = sub.add_parser("compare", help="paired bootstrap and approximate randomization against a baseline, "
                       "resampling documents",
                       description="Paired significance tests (sacreBLEU's) of systems against a baseline: "
                       "paired bootstrap resampling with 95%% confidence intervals and approximate "
                       "randomization, for BLEU and chrF, resampling whole documents.")
    g = p.add_argument_group("input")
    g.add_argument("--baseline", "-b", required=True, help="the baseline's hypotheses (formats as for bleu)")
    g.add_argument("--hyp", "-H", required=True, nargs="+", metavar="SYS", help="the systems' hypotheses")
    g.add_argument("--ref", "-r", required=True, help="references")
    g.add_argument("--names", help="comma-separated names of the baseline and the systems, in order "
                   "(default: the file names; use the --name of their run JSONs to mark them in a table)")
    g.add_argument("--hyp-format", choices=HYP_FORMATS, default="auto")
    g.add_argument("--ref-format", choices=TEXT_FORMATS, default="auto")
    g.add_argument("--ref-translator", help="WMT XML/JSON Lines references: the translator(s) to use, "
                   "comma-separated (default: every reference the file holds)")
    g.add_argument("--hyp-system", metavar="NAME", help="WMT 2021+ XML hypotheses: the system whose <hyp> to "
                   "compare (default: each file's only system)")
    g.add_argument("--docids", help="document-id file for plain-text sides")
    g.add_argument("--data", help="fairseq data directory whose SPLIT.*.docs index gives the documents of generate output")
    g.add_argument("--split", default="test")
    g.add_argument("--post-process", choices=POST_PROCESS, default="auto")
    t = p.add_argument_group("tests")
    t.add_argument("--metrics", default="bleu,chrf", help=f"comma-separated, of {', '.join(METRICS)} (default: bleu,chrf)")
    t.add_argument("--test", choices=("bs", "ar", "both"), default="both",
                   help="paired bootstrap (bs), approximate randomization (ar) or both (default)")
    t.add_argument("--resample", choices=("documents", "sentences"), default="documents",
                   help="the unit of resampling (default: documents)")
    t.add_argument("--document", action="store_true", help="score joined documents (d-BLEU, d-chrF)")
    t.add_argument("--bs-samples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    t.add_argument("--ar-trials", type=int, default=10000, help="randomization trials (default 10000)")
    t.add_argument("--seed", type=int, default=12345, help="seed of both tests (default 12345, sacreBLEU's)")
    t.add_argument("--alpha", type=float, default=0.05, help="significance level of the marks (default 0.05)")
    t.add_argument("--tokenized", action="store_true",
                   help="BLEU of the text's whitespace tokens (sacreBLEU's tokenize='none'), as bleu --tokenized")
    t.add_argument("--pretokenize", metavar="NAME", help="BLEU: tokenize both sides first (implies "
                   "--tokenized), as bleu --pretokenize: moses, moses-aggressive, none, or a sacreBLEU tokenizer")
    t.add_argument("--lang", "-l", default="en", help="language of the references, for --pretokenize moses")
    t.add_argument("--tokenize", default="13a")
    t.add_argument("--lowercase", "-lc", action="store_true")
    t.add_argument("--smooth-method", default=None,
                   help="default: none with --tokenized (multi-bleu.perl's), else exp")
    p.add_argument("--json", metavar="FILE", help="write the results here (read by 'docctx-score table --significance')")
    p.set_defaults(func=lambda a: run_command("docctx-score compare", _main, a))


def _main(args):
    from .bleu import metric_key, scored_sides
    from .io import EMPTY_HYPOTHESES_NOTE, ScoreInputError, load_corpus

    files = [args.baseline] + list(args.hyp)
    names = args.names.split(",") if args.names else [os.path.basename(f) for f in files]
    if len(names) != len(files):
        raise ScoreInputError(f"--names gives {len(names)} names for {len(files)} systems (baseline included)")
    if len(set(names)) != len(names):
        raise ScoreInputError("two systems have the same name; give --names")
    metrics = [m for m in args.metrics.split(",") if m]
    for m in metrics:
        if m not in METRICS:
            raise ScoreInputError(f"--metrics: unknown metric {m!r} (choose from {', '.join(METRICS)})")
    corpora = [load_corpus(f, args.ref, hyp_format=args.hyp_format, ref_format=args.ref_format,
                           docids=args.docids, data=args.data, split=args.split,
                           post_process=args.post_process, ref_translator=args.ref_translator,
                           hyp_system=args.hyp_system)
               for f in files]
    for f, c in zip(files, corpora):
        empty = sum(1 for s in c.flat("hyp") if not s)
        if empty:
            print(EMPTY_HYPOTHESES_NOTE.format(hyp=f, n=empty, total=c.num_sentences), file=sys.stderr)
    tests = TESTS if args.test == "both" else (args.test,)
    report = {"baseline": names[0], "systems": names[1:], "files": dict(zip(names, files)), "ref": args.ref,
              "resample": "documents" if args.document else args.resample, "document": args.document,
              "documents": len(corpora[0].doc_ids), "sentences": corpora[0].num_sentences,
              "alpha": args.alpha, "tests": list(tests), "seed": args.seed, "comparisons": {}}
    pretok = args.pretokenize if args.pretokenize != "none" else None
    for m in metrics:
        tok = (args.tokenized or args.pretokenize is not None) and m == "bleu"
        sides = [scored_sides(c, pretok if tok else None, args.lang) for c in corpora]
        smooth = args.smooth_method or ("none" if tok else "exp")
        metric = metric_for(m, tokenized=tok, tokenize=args.tokenize, lowercase=args.lowercase,
                            smooth_method=smooth)
        res = compare_systems(metric, (names[0], sides[0][0]), [(n, s[0]) for n, s in zip(names[1:], sides[1:])],
                              sides[0][1], resample=args.resample, document=args.document, tests=tests,
                              bs_samples=args.bs_samples, ar_trials=args.ar_trials, seed=args.seed)
        if tok:
            res["signature"] += f"|pretok:{pretok or 'none'}"
        report["comparisons"][metric_key(m, tok, args.document)] = res
    print(format_comparison(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return 0


def format_comparison(report: Dict) -> str:
    alpha = report["alpha"]
    lines = [f"{len(report['systems'])} system(s) against {report['baseline']}; resampled: "
             f"{report['resample']} ({report['documents']} documents, {report['sentences']} sentences); "
             f"* p < {alpha:g}"]
    for m, res in report["comparisons"].items():
        lines.append("")
        lines.append(f"{m}: {res['signature']}" + (f"\n  approximate randomization: {res['signature_ar']}"
                                                   if res.get("signature_ar") else ""))
        width = max(len(s["name"]) for s in res["systems"])
        lines.append(f"  {'system':<{width}}  {'score':>7}  {'95% CI (bootstrap)':>20}  {'p (bs)':>9}  {'p (ar)':>9}")
        for s in res["systems"]:
            ci = f"{s['mean']:.2f} ± {s['ci']:.2f}"

            def p(v):
                return "-" if v is None else f"{v:.4f}" + ("*" if v < alpha else " ")

            lines.append(f"  {s['name']:<{width}}  {s['score']:>7.2f}  {ci:>20}  {p(s['p_bs']):>9}  {p(s['p_ar']):>9}")
    return "\n".join(lines)


def load_comparison(path: str) -> Dict:
    from .io import load_json_object

    return load_json_object(path, "comparisons", "'docctx-score compare'")


def significant(comparison: Dict, test: Optional[str] = None) -> Dict[str, Dict[str, float]]:
    """``{metric: {system: p}}`` of a compare result: the p-value of ``test`` (``bs``/``ar``;
    default: the larger of the two run)."""
    out: Dict[str, Dict[str, float]] = {}
    for m, res in comparison["comparisons"].items():
        for s in res["systems"][1:]:
            ps = [s.get("p_" + t) for t in ([test] if test else TESTS)]
            ps = [v for v in ps if v is not None]
            if ps:
                out.setdefault(m, {})[s["name"]] = max(ps)
    return out


__all__ = ["DocumentStatistics", "paired_bootstrap", "approximate_randomization", "compare_systems",
           "metric_for", "mcnemar", "significant", "load_comparison", "format_comparison"]

