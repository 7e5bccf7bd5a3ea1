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
import os
from typing import Dict, Optional, Sequence

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


def format_comparison(report: Dict) -> str:
    alpha = report["alpha"]
    lines = [f"{len(report['systems'])} system(s) against {report['baseline']}; resampled: "
             f"{report['resample']} ({'no' if report['documents'] is None else report['documents']} documents, "
             f"{report['sentences']} sentences); "
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

