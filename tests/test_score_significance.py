"""docctx-score: d-BLEU and chrF against sacreBLEU called directly on joined documents; the
paired tests of ``compare`` (documents resampled) against sacreBLEU's own paired tests;
approximate randomization of a system against itself; ``table --significance``; McNemar's test
of contrastive verdicts."""
import json
import random

import numpy as np
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest, estimate_ci

from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.evaluation import significance as S
from fairseq_docctx.evaluation.bleu import bleu_scores
from fairseq_docctx.evaluation.chrf import chrf_scores
from fairseq_docctx.evaluation.io import Corpus


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


WORDS = "the a cat dog sat ran on under mat house red big small old new quickly home tree".split()


def random_corpus(seed, doc_lengths, noise=0.3):
    """Documents of random sentences; a reference and two systems, each a noisy copy."""
    rng = random.Random(seed)

    def noisy(s, p):
        return " ".join(w if rng.random() > p else rng.choice(WORDS) for w in s.split())

    ref = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)] for n in doc_lengths]
    a = [[noisy(s, noise) for s in d] for d in ref]
    b = [[noisy(s, noise + 0.1) for s in d] for d in ref]
    return ref, a, b


def write_docs(path, docs, ids=None):
    path.write_text("".join(s + "\n" for d in docs for s in d), encoding="utf-8")
    if ids is not None:
        path.with_suffix(".docids").write_text(
            "".join(f"{i}\n" for i, d in zip(ids, docs) for _ in d), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# d-BLEU and chrF


def test_document_bleu_and_chrf_equal_sacrebleu_on_joined_documents(tmp_path, capsys):
    ref, hyp, _ = random_corpus(0, [3, 1, 5, 2])
    ref2 = [[s.upper() if k % 2 else s for k, s in enumerate(d)] for d in ref]  # a second reference
    ids = [f"d{i}" for i in range(4)]
    c = Corpus(doc_ids=ids, hyp=hyp, ref=ref, more_refs=[ref2])
    joined = lambda docs: [" ".join(d) for d in docs]  # noqa: E731
    flat = lambda docs: [s for d in docs for s in d]  # noqa: E731
    d = bleu_scores(c, document=True)
    direct = sacrebleu.corpus_bleu(joined(hyp), [joined(ref), joined(ref2)])
    assert d["score"] == pytest.approx(direct.score) and d["document"]
    assert "nrefs:2" in d["signature"] and "level:doc" in d["signature"]
    assert d["per_document"]["d2"] == pytest.approx(sacrebleu.corpus_bleu(joined(hyp[2:3]), [joined(ref[2:3]), joined(ref2[2:3])]).score)
    # n-grams across sentence boundaries count: d-BLEU differs from sentence BLEU here
    s = bleu_scores(c)
    assert s["score"] == pytest.approx(sacrebleu.corpus_bleu(flat(hyp), [flat(ref), flat(ref2)]).score)
    assert s["score"] != pytest.approx(d["score"]) and "level" not in s["signature"]
    # tokenized d-BLEU: 13a-tokenized sentences, joined, tokenize none
    t = BLEU(tokenize="13a").tokenizer
    tok = bleu_scores(c, document=True, tokenized=True)
    tj = lambda docs: [" ".join(t(x) for x in d) for d in docs]  # noqa: E731
    assert tok["score"] == pytest.approx(sacrebleu.corpus_bleu(tj(hyp), [tj(ref), tj(ref2)], tokenize="none").score)
    # chrF / chrF++ at both levels
    for word_order in (0, 2):
        for document, units in ((False, flat), (True, joined)):
            r = chrf_scores(c, document=document, word_order=word_order)
            m = CHRF(word_order=word_order)
            assert r["score"] == pytest.approx(m.corpus_score(units(hyp), [units(ref), units(ref2)]).score)
            assert r["name"] == ("chrF2++" if word_order else "chrF2")
    # the command line: --both prints both levels and writes both keys
    h = write_docs(tmp_path / "h.txt", hyp)
    r = write_docs(tmp_path / "r.txt", ref, ids)
    rc, out, err = score_cli(["bleu", "--hyp", h, "--ref", r, "--both", "--json", tmp_path / "run.json"], capsys)
    assert rc == 0, err
    assert out.startswith("BLEU = ") and "\nd-BLEU = " in out and "|level:doc|" in out
    rc, out, err = score_cli(["chrf", "--hyp", h, "--ref", r, "--document", "--word-order", "2",
                              "--json", tmp_path / "run.json"], capsys)
    assert rc == 0 and out.startswith("d-chrF2++ = ")
    metrics = json.loads((tmp_path / "run.json").read_text())["metrics"]
    assert set(metrics) == {"bleu", "d-bleu", "d-chrf++"}
    assert metrics["d-bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(joined(hyp), [joined(ref)]).score)
    assert metrics["d-chrf++"]["score"] == pytest.approx(
        CHRF(word_order=2).corpus_score(joined(hyp), [joined(ref)]).score)


# ------------------------------------------------------------------------------------------
# paired tests


def sacrebleu_paired(kind, systems, ref, n, seed, metric=None):
    """sacreBLEU's own sentence-level paired test on flat sentences."""
    with S.sacrebleu_seed(seed):
        sig, res = PairedTest(systems, {"m": metric or BLEU()}, [ref], test_type=kind, n_samples=n)()
    return next(v for k, v in res.items() if k != "System")


def test_one_sentence_per_document_is_sacrebleus_sentence_bootstrap():
    ref, a, b = random_corpus(1, [1] * 60)
    flat = lambda docs: [s for d in docs for s in d]  # noqa: E731
    for metric, make in (("bleu", BLEU), ("chrf", CHRF)):
        ours = S.compare_systems(make(), ("a", a), [("b", b)], [ref], resample="documents", bs_samples=300,
                                 ar_trials=500, seed=7)
        assert "resample:doc" in ours["signature"]
        theirs = sacrebleu_paired("bs", [("a", flat(a)), ("b", flat(b))], flat(ref), 300, 7, make())
        for o, t in zip(ours["systems"], theirs):
            assert o["score"] == t.score and o["mean"] == t.mean and o["ci"] == t.ci, metric
        assert ours["systems"][1]["p_bs"] == theirs[1].p_value
        # approximate randomization: sacreBLEU's trials; no tied trial here, so the same p
        ar = sacrebleu_paired("ar", [("a", flat(a)), ("b", flat(b))], flat(ref), 500, 7, make())
        assert ours["systems"][1]["p_ar"] == pytest.approx(ar[1].p_value)


def test_real_documents_are_resampled_whole():
    """Each bootstrap sample is the sum of the statistics of every sentence of the documents
    it draws: the systems' means and CIs follow from sacreBLEU's draws over documents."""
    lengths = [4, 1, 7, 2, 3, 5, 1, 6]
    ref, a, b = random_corpus(2, lengths)
    n, seed = 200, 11
    ours = S.compare_systems(BLEU(), ("a", a), [("b", b)], [ref], bs_samples=n, ar_trials=200, seed=seed)
    m = BLEU()
    sent = [np.array(m._extract_corpus_statistics([s for d in h for s in d], [[s for d in ref for s in d]]))
            for h in (a, b)]
    # per-document statistics: the sum of the document's sentences'
    bounds = np.cumsum([0] + lengths)
    docs = [np.stack([st[bounds[k]:bounds[k + 1]].sum(0) for k in range(len(lengths))]) for st in sent]
    wrapped = S.DocumentStatistics(m)
    assert np.array_equal(np.array(wrapped._extract_corpus_statistics(a, [ref])), docs[0])
    # sacreBLEU's draws (rng.choice over the samples) are over the 8 documents
    idxs = np.random.default_rng(seed).choice(len(lengths), size=(n, len(lengths)), replace=True)
    for k, st in enumerate(docs):
        scores = np.array([m._compute_score_from_stats(st[i].sum(0)).score for i in idxs])
        mean, ci = estimate_ci(scores)
        assert ours["systems"][k]["mean"] == pytest.approx(mean) and ours["systems"][k]["ci"] == pytest.approx(ci)
    # resampling sentences instead gives another interval
    by_sent = S.compare_systems(BLEU(), ("a", a), [("b", b)], [ref], resample="sentences", bs_samples=n,
                                tests=("bs",), seed=seed)
    assert by_sent["systems"][0]["ci"] != pytest.approx(ours["systems"][0]["ci"])
    assert by_sent["systems"][0]["score"] == pytest.approx(ours["systems"][0]["score"])


def test_a_system_against_itself_is_not_significant():
    ref, a, b = random_corpus(3, [3, 2, 4, 1, 2])
    res = S.compare_systems(BLEU(), ("a", a), [("same", [list(d) for d in a]), ("b", b)], [ref],
                            bs_samples=200, ar_trials=1000, seed=5)
    same, other = res["systems"][1], res["systems"][2]
    assert same["p_ar"] == 1.0 and same["p_bs"] == 1.0
    assert other["p_ar"] < 1.0
    # sacreBLEU's strict count would say p = 1/(n+1) for the identical system
    flat = lambda docs: [s for d in docs for s in d]  # noqa: E731
    theirs = sacrebleu_paired("ar", [("a", flat(a)), ("same", flat(a))], flat(ref), 1000, 5)
    assert theirs[1].p_value == pytest.approx(1 / 1001)


def test_compare_command_json_and_table_marks(tmp_path, capsys):
    ref, a, b = random_corpus(4, [3] * 30, noise=0.1)
    _, _, worse = random_corpus(4, [3] * 30, noise=0.6)
    ids = [f"t{i}" for i in range(30)]
    r = write_docs(tmp_path / "ref.txt", ref, ids)
    files = {n: write_docs(tmp_path / f"{n}.txt", d) for n, d in (("base", a), ("near", b), ("bad", worse))}
    for n, f in files.items():
        rc, _, err = score_cli(["bleu", "--hyp", f, "--ref", r, "--json", tmp_path / f"{n}.json", "--name", n], capsys)
        assert rc == 0, err
    rc, out, err = score_cli(["compare", "--baseline", files["base"], "--hyp", files["near"], files["bad"],
                              "--ref", r, "--names", "base,near,bad", "--ar-trials", "2000",
                              "--json", tmp_path / "cmp.json"], capsys)
    assert rc == 0, err
    rep = json.loads((tmp_path / "cmp.json").read_text())
    assert rep["resample"] == "documents" and rep["documents"] == 30 and set(rep["comparisons"]) == {"bleu", "chrf"}
    bad = rep["comparisons"]["bleu"]["systems"][2]
    assert bad["name"] == "bad" and bad["p_bs"] < 0.05 and bad["p_ar"] < 0.05
    assert "bad" in out and "*" in out and "95% CI" in out
    rc, out, err = score_cli(["table", tmp_path / "base.json", tmp_path / "near.json", tmp_path / "bad.json",
                              "--baseline", "base", "--significance", tmp_path / "cmp.json"], capsys)
    assert rc == 0, err
    rows = {ln.split(" | ")[0].strip("| "): ln for ln in out.splitlines() if ln.startswith("| ")}
    near_sig = rep["comparisons"]["bleu"]["systems"][1]
    assert (f"{near_sig['score']:.2f}*" in rows["near"]) == (max(near_sig["p_bs"], near_sig["p_ar"]) < 0.05)
    assert f"{bad['score']:.2f}*" in rows["bad"] and "*" not in rows["base"]
    assert "* p < 0.05 against base" in out
    # a comparison against another baseline than the table's is refused
    rc, _, err = score_cli(["table", tmp_path / "base.json", tmp_path / "bad.json", "--baseline", "bad",
                            "--significance", tmp_path / "cmp.json"], capsys)
    assert rc == 2 and "comparisons are against base" in err
    # systems of another test set: a count mismatch names the files
    short = write_docs(tmp_path / "short.txt", a[:-1])
    rc, _, err = score_cli(["compare", "--baseline", files["base"], "--hyp", short, "--ref", r], capsys)
    assert rc == 2 and "short.txt" in err


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docctx-score table: error: ") and "Traceback" not in err, err
    return lines[0]


def test_table_refuses_a_comparison_of_other_systems_scores_or_test_set(tmp_path, capsys):
    """A comparison marks the table's rows only when its systems are the table's runs, with
    the same scores on the same test set; otherwise one line, exit 2, no table."""
    ref, a, _ = random_corpus(5, [3] * 30, noise=0.1)
    _, _, worse = random_corpus(5, [3] * 30, noise=0.6)
    ids = [f"t{i}" for i in range(30)]
    r = write_docs(tmp_path / "ref.txt", ref, ids)
    files = {n: write_docs(tmp_path / f"{n}.txt", d) for n, d in (("base", a), ("bad", worse))}
    for n, f in files.items():
        rc, _, err = score_cli(["bleu", "--hyp", f, "--ref", r, "--json", tmp_path / f"{n}.json", "--name", n], capsys)
        assert rc == 0, err
    runs = [tmp_path / "base.json", tmp_path / "bad.json"]

    def compare(out, names, base, bad, ref_file):
        rc, _, err = score_cli(["compare", "--baseline", base, "--hyp", bad, "--ref", ref_file, "--names", names,
                                "--metrics", "bleu", "--ar-trials", "200", "--bs-samples", "200",
                                "--json", out], capsys)
        assert rc == 0, err
        return out

    # the same test set, the same systems: accepted, "bad" marked
    good = compare(tmp_path / "good.json", "base,bad", files["base"], files["bad"], r)
    rc, out, err = score_cli(["table", *runs, "--significance", good], capsys)
    assert rc == 0 and "* p < 0.05 against base" in out, err
    # another test set: the first 20 documents (other sentence count, other scores)
    r20 = write_docs(tmp_path / "ref20.txt", ref[:20], ids[:20])
    b20, w20 = write_docs(tmp_path / "base20.txt", a[:20]), write_docs(tmp_path / "bad20.txt", worse[:20])
    other = compare(tmp_path / "other.json", "base,bad", b20, w20, r20)
    rc, out, err = score_cli(["table", *runs, "--significance", other], capsys)
    line = _one_line(err)
    assert rc == 2 and out == "" and str(other) in line and "60 sentences" in line and "90" in line, line
    # the same sentence count, other hypotheses under the same names: the scores differ
    swapped = compare(tmp_path / "swapped.json", "base,bad", files["bad"], files["base"], r)
    rc, out, err = score_cli(["table", *runs, "--significance", swapped], capsys)
    line = _one_line(err)
    assert rc == 2 and out == "" and str(swapped) in line and "'base'" in line, line
    assert "score" in line
    # systems of the comparison that are not runs of the table
    renamed = compare(tmp_path / "renamed.json", "base,worse", files["base"], files["bad"], r)
    rc, out, err = score_cli(["table", *runs, "--significance", renamed], capsys)
    line = _one_line(err)
    assert rc == 2 and out == "" and "'worse'" in line and "not a run" in line, line
    # none of the comparison's metrics is scored by a run of the table
    rc, out, err = score_cli(["table", *runs, "--metrics", "chrf", "--significance", good], capsys)
    line = _one_line(err)
    assert rc == 2 and "bleu" in line and "no column" in line, line


# ------------------------------------------------------------------------------------------
# McNemar


def test_mcnemar_by_hand(tmp_path, capsys):
    # 10 examples: both right 4, only A 5, only B 1, neither 0
    a = [1] * 4 + [1] * 5 + [0] * 1
    b = [1] * 4 + [0] * 5 + [1] * 1
    res = S.mcnemar(a, b)
    assert (res["both"], res["only_a"], res["only_b"], res["neither"]) == (4, 5, 1, 0)
    # exact two-sided binomial on 6 discordant pairs, 1 of one kind: 2 * P(X <= 1), X ~ Bin(6, 1/2)
    assert res["p"] == pytest.approx(2 * (1 + 6) / 2 ** 6)
    assert S.mcnemar([1, 0, 1], [1, 0, 1])["p"] == 1.0  # no discordant pair
    # the command line on two reports of the same test set
    def report(name, verdicts, digest="abc"):
        m = {"score": sum(verdicts) / len(verdicts), "accuracy": sum(verdicts) / len(verdicts),
             "examples": len(verdicts), "verdicts": verdicts, "examples_digest": digest}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"run": name, "metrics": {"contrastive:anaphora": m}}))
        return path

    rc, out, err = score_cli(["contrastive", "--compare", report("A", a), report("B", b),
                              "--json", tmp_path / "mc.json"], capsys)
    assert rc == 0, err
    assert f"p = {2 * 7 / 64:.4g}" in out and "only A 5, only B 1" in out
    assert json.loads((tmp_path / "mc.json").read_text())["mcnemar"]["contrastive:anaphora"]["p"] == pytest.approx(7 / 32)
    rc, _, err = score_cli(["contrastive", "--compare", report("A", a), report("C", b, "other")], capsys)
    assert rc == 2 and "different test sets" in err
