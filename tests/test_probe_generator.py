"""Fast unit tests of the context probe generator and scorer (no training)."""
import filecmp
import json
from collections import Counter, defaultdict

import pytest

from fairseq_docctx.cli.probe import cli_main
from fairseq_docctx.probe import (CLASSES, CONSISTENCY, NOUNS, find_example, format_comparison,
                                  generate_probe, read_hypotheses, score_probe, source_documents)

SPLITS = {"train": 800, "valid": 20, "test": 60}
FILES = ("src", "tgt", "docids", "probe.jsonl")


def _read(d, split):
    out = {}
    for ext in FILES:
        with open(d / f"{split}.{ext}", encoding="utf-8") as f:
            out[ext] = f.read().splitlines()
    out["ann"] = [json.loads(x) for x in out["probe.jsonl"]]
    return out


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    stats = generate_probe(str(d), SPLITS, seed=3)
    return d, stats, {s: _read(d, s) for s in SPLITS}


def _items(data, phenomenon):
    for rec in data["ann"]:
        for it in rec["items"]:
            if it["phenomenon"] == phenomenon:
                yield rec, it


def test_deterministic_under_seed(probe, tmp_path):
    d, _, _ = probe
    generate_probe(str(tmp_path / "same"), SPLITS, seed=3)
    generate_probe(str(tmp_path / "other"), SPLITS, seed=4)
    for split in SPLITS:
        for ext in FILES:
            name = f"{split}.{ext}"
            assert filecmp.cmp(d / name, tmp_path / "same" / name, shallow=False)
        assert not filecmp.cmp(d / f"{split}.src", tmp_path / "other" / f"{split}.src",
                               shallow=False)
    # a split's content does not depend on the other splits' sizes
    generate_probe(str(tmp_path / "resized"), {"train": 10, "test": 60}, seed=3)
    assert filecmp.cmp(d / "test.tgt", tmp_path / "resized" / "test.tgt", shallow=False)


def test_files_aligned_and_docids_contiguous(probe):
    _, stats, data = probe
    for split, x in data.items():
        n = len(x["src"])
        assert n == stats[split]["sentences"]
        assert all(len(x[k]) == n for k in ("tgt", "docids", "ann"))
        runs = [doc for i, doc in enumerate(x["docids"]) if i == 0 or x["docids"][i - 1] != doc]
        assert len(runs) == len(set(runs)) == SPLITS[split]  # one contiguous run per document
        pos = 0
        for i, rec in enumerate(x["ann"]):
            pos = 0 if i == 0 or x["docids"][i - 1] != x["docids"][i] else pos + 1
            assert (rec["line"], rec["doc"], rec["pos"]) == (i, x["docids"][i], pos)
        lens = Counter(x["docids"]).values()
        assert min(lens) >= 4 and max(lens) <= 8


def test_closed_lowercase_vocabulary(probe):
    _, _, data = probe
    for side in ("src", "tgt"):
        vocab = {w for x in data.values() for line in x[side] for w in line.split()}
        assert all(w == w.lower() and w.isascii() for w in vocab)
        assert len(vocab) < 120
        assert all(line.strip() and line == " ".join(line.split()) for x in data.values()
                   for line in x[side])


def test_annotations_consistent_with_text(probe):
    _, _, data = probe
    class_of = {tgt: c for c, words in NOUNS.items() for tgt in
                (w.split(":")[1] for w in words.split())}
    alt_words = {w for c in CLASSES[:2] for w in c[1:3]} | {w for c in CONSISTENCY for w in c["forms"]}
    for x in data.values():
        tgt = [line.split() for line in x["tgt"]]
        for i, rec in enumerate(x["ann"]):
            annotated = {it["index"] for it in rec["items"]}
            # alternatives occur in the target only where annotated
            assert {k for k, w in enumerate(tgt[i]) if w in alt_words} == annotated
            for it in rec["items"]:
                assert tgt[i][it["index"]] == it["expected"] in it["alternatives"]
                if it.get("anchor"):
                    continue
                a = i - it["distance"]
                assert it["antecedent_pos"] == rec["pos"] - it["distance"] >= 0
                assert x["docids"][a] == rec["doc"]
                if it["phenomenon"] == "anaphora":
                    assert "it" in x["src"][i].split()
                    nouns = [class_of[w] for w in tgt[a] if w in class_of]
                    assert nouns == [it["class"]]  # the antecedent sentence names the noun
                    # no other noun between antecedent and pronoun
                    assert not any(w in class_of for j in range(a + 1, i) for w in tgt[j])
                else:  # nearest earlier mention and anchor use the same form
                    assert it["expected"] in tgt[a] and it["expected"] in tgt[
                        i - rec["pos"] + it["anchor_pos"]]
                    assert it["distance"] <= 2 and it["anchor_pos"] <= it["antecedent_pos"]


def test_both_distances_and_classes_balanced(probe):
    _, stats, data = probe
    items = [it for x in data.values() for _, it in _items(x, "anaphora")]
    dist = Counter(it["distance"] for it in items)
    assert set(dist) == {1, 2} and min(dist.values()) > 0.35 * len(items)
    cls = Counter(it["class"] for it in items)
    assert set(cls) == {"m", "f"} and min(cls.values()) > 0.4 * len(items)
    assert stats["test"]["items"]["consistency"] > 20


def test_current_sentence_gives_no_clue(probe):
    """Every source sentence that carries a context-dependent word occurs with each target
    form, and the best predictor from the current source sentence alone is near chance."""
    _, _, data = probe
    for phen, min_forms in (("anaphora", 2), ("consistency", 2)):
        by_src = defaultdict(Counter)
        for x in data.values():
            for rec, it in _items(x, phen):
                if not it.get("anchor"):
                    by_src[(x["src"][rec["line"]], it["word"] if "word" in it else "")][
                        it["expected"]] += 1
        frequent = {s: c for s, c in by_src.items() if sum(c.values()) >= 15}
        assert len(frequent) >= 5
        for s, c in frequent.items():
            assert len(c) >= min_forms, (phen, s, c)
        # leave-one-out majority form per current source sentence: an (unbiased) estimate of
        # the best a sentence-level predictor can do; it must be near chance (0.5)
        hit = total = 0
        for c in by_src.values():
            for form, n in c.items():
                rest = c.copy()
                rest[form] -= 1
                top = max(rest.values())
                winners = [f for f, m in rest.items() if m == top]
                hit += n * (winners.count(form) / len(winners))
                total += n
        assert hit / total < 0.6, (phen, hit / total)
    # later consistency mentions say car/movie/nice, never the cue word
    for x in data.values():
        for rec, it in _items(x, "consistency"):
            if not it.get("anchor"):
                assert it["word"] in x["src"][rec["line"]].split()


def _hyps_with(data, pick):
    """Reference targets with each annotated word replaced by pick(item, rec)."""
    out = []
    for line, rec in zip(data["tgt"], data["ann"]):
        toks = line.split()
        for it in rec["items"]:
            toks[it["index"]] = pick(it, rec)
        out.append(" ".join(toks))
    return out


def test_scorer_perfect_and_wrong(probe):
    _, _, data = probe
    x = data["test"]
    ann = x["ann"]
    for mode in ("hypothesis", "reference"):
        res = score_probe(x["tgt"], ann, consistency_against=mode)
        assert res["accuracy"] == 1.0 and res["missing"] == 0
        assert set(res["by_phenomenon"]) == {"anaphora", "consistency"}
        assert set(res["by_distance"]) >= {"1", "2"}
        assert all(v["accuracy"] == 1.0 for v in res["by_phenomenon_distance"].values())

    def other(it, rec):
        return next(a for a in it["alternatives"] if a != it["expected"])
    wrong = _hyps_with(x, lambda it, rec: it["expected"] if it.get("anchor") else other(it, rec))
    for mode in ("hypothesis", "reference"):  # anchors right, every later mention wrong
        res = score_probe(wrong, ann, consistency_against=mode)
        assert res["correct"] == 0 and res["by_phenomenon"]["consistency"]["total"] > 0
    # flipping the whole document consistently: wrong against the reference, consistent
    flipped = _hyps_with(x, other)
    res = score_probe(flipped, ann, consistency_against="hypothesis")
    assert res["by_phenomenon"]["consistency"]["accuracy"] == 1.0
    assert res["by_phenomenon"]["anaphora"]["accuracy"] == 0.0
    assert score_probe(flipped, ann, "reference")["by_phenomenon"]["consistency"]["accuracy"] == 0
    # robust to shifted positions; a missing word is wrong and counted
    shifted = ["und " + h for h in x["tgt"]]
    assert score_probe(shifted, ann)["accuracy"] == 1.0
    dropped = _hyps_with(x, lambda it, rec: "xxx" if it["phenomenon"] == "anaphora"
                         else it["expected"])
    res = score_probe(dropped, ann, phenomena=["anaphora"])
    assert res["accuracy"] == 0.0 and res["missing"] == res["total"]
    with pytest.raises(ValueError):
        score_probe(x["tgt"][:-1], ann)


def test_constant_sentence_model_is_not_consistent(probe):
    """Cued anchors: a model that ignores context (one fixed form per word, the cued
    form at anchors) is about 50% consistent with its own output."""
    _, _, data = probe
    x = data["train"]
    fixed = {c["word"]: c["forms"][0] for c in CONSISTENCY}
    hyps = _hyps_with(x, lambda it, rec: it["expected"] if it.get("anchor") or
                      it["phenomenon"] == "anaphora" else fixed[it["word"]])
    res = score_probe(hyps, x["ann"])
    assert 0.4 < res["by_phenomenon"]["consistency"]["accuracy"] < 0.6
    assert res["consistency_anchor_majority"] < 0.6
    # cued anchors name the form in the source; the others say car/movie/nice
    cues = {c: f for w in CONSISTENCY for c, f in zip(w["cues"], w["forms"])}
    for rec, it in _items(x, "consistency"):
        src = x["src"][rec["line"]].split()
        if it.get("anchor"):
            assert any(cues.get(w) == it["expected"] for w in src)
        else:
            assert it["word"] in src


def test_read_hypotheses_formats(probe, tmp_path):
    _, _, data = probe
    refs = data["valid"]["tgt"]
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join(refs) + "\n")
    assert read_hypotheses(str(plain), len(refs)) == refs
    gen = tmp_path / "gen.txt"
    lines = []
    for i in reversed(range(len(refs))):  # fairseq prints in batch order, not corpus order
        lines += [f"S-{i}\tsrc", f"H-{i}\t-0.1\t{refs[i]}", f"D-{i}\t-0.1\t{refs[i]}"]
    gen.write_text("\n".join(lines) + "\n")
    assert read_hypotheses(str(gen), len(refs)) == refs
    gen.write_text("\n".join(lines[3:]) + "\n")  # one sentence dropped
    with pytest.raises(ValueError, match="no H- line"):
        read_hypotheses(str(gen), len(refs))


def test_cli_roundtrip(tmp_path, capsys):
    d = tmp_path / "p"
    assert cli_main(["generate", "--outdir", str(d), "--train-docs", "5", "--valid-docs", "2",
                     "--test-docs", "10", "--seed", "2"]) == 0
    ref = d / "test.tgt"
    capsys.readouterr()
    assert cli_main(["score", "--annotations", str(d / "test.probe.jsonl"), "--hyp", str(ref),
                     "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0
    # --json FILE, as every other scoring command: the file, and the table printed
    assert cli_main(["score", "--annotations", str(d / "test.probe.jsonl"), "--hyp", str(ref),
                     "--json", str(tmp_path / "res.json")]) == 0
    assert json.loads((tmp_path / "res.json").read_text())["accuracy"] == 1.0
    assert "overall" in capsys.readouterr().out
    assert cli_main(["score", "--annotations", str(d / "test.probe.jsonl"),
                     "--hyp", str(ref)]) == 0
    assert "overall" in capsys.readouterr().out
    assert cli_main(["generate", "--outdir", str(tmp_path / "q"), "--train-docs", "3",
                     "--valid-docs", "1", "--test-docs", "3", "--no-consistency",
                     "--classes", "3"]) == 0
    anns = [json.loads(x) for x in open(tmp_path / "q" / "train.probe.jsonl")]
    assert all(it["phenomenon"] == "anaphora" for a in anns for it in a["items"])


def test_free_anchor_mode(tmp_path):
    """consistency_anchor="free": only the first mention is an anchor and it says car/movie/
    nice like every other mention; an unknown mode is refused."""
    generate_probe(str(tmp_path), {"test": 100}, seed=5, consistency_anchor="free")
    x = _read(tmp_path, "test")
    seen = set()
    for rec, it in _items(x, "consistency"):
        assert it["word"] in x["src"][rec["line"]].split()
        assert it.get("anchor", False) == (rec["doc"] not in seen)
        seen.add(rec["doc"])
    with pytest.raises(ValueError):
        generate_probe(str(tmp_path), {"test": 1}, consistency_anchor="nope")


def test_source_documents_follow_the_annotations(probe, tmp_path):
    d, _, data = probe
    x = data["test"]
    docs = source_documents(str(d / "test.probe.jsonl"), str(d / "test.src"))
    assert [s for doc in docs for s in doc] == x["src"]
    runs = [doc for i, doc in enumerate(x["docids"]) if i == 0 or x["docids"][i - 1] != doc]
    assert len(docs) == len(runs) == SPLITS["test"]
    assert [len(doc) for doc in docs] == [x["docids"].count(r) for r in runs]
    short = tmp_path / "short.src"
    short.write_text("\n".join(x["src"][:-1]) + "\n")
    with pytest.raises(ValueError, match="short.src: .* sentences, but the annotations have"):
        source_documents(str(d / "test.probe.jsonl"), str(short))


def _swap(x, phenomenon):
    """References with every non-anchor item of ``phenomenon`` given a wrong alternative."""
    return _hyps_with(x, lambda it, rec: next(a for a in it["alternatives"] if a != it["expected"])
                      if it["phenomenon"] == phenomenon and not it.get("anchor") else it["expected"])


def test_find_example_right_in_context_wrong_without(probe):
    _, _, data = probe
    x = data["test"]
    ann = x["ann"]
    # no hypotheses: the first anaphora item at the largest distance
    ex = find_example(ann)
    far = max(it["distance"] for _, it in _items(x, "anaphora"))
    first = next((rec, it) for rec, it in _items(x, "anaphora") if it["distance"] == far)
    assert (ex["line"], ex["doc"], ex["sentence"], ex["distance"]) == (
        first[0]["line"], first[0]["doc"], first[0]["pos"], far)
    doc_order = list(dict.fromkeys(x["docids"]))
    assert doc_order[ex["doc_number"]] == ex["doc"]
    # the reference gets every item right; a wrong output on one chosen item moves the pick to
    # the next item the reference gets right and the "wrong" output gets wrong
    wrong = _swap(x, "anaphora")
    assert find_example(ann, hypotheses=x["tgt"], wrong=wrong)["line"] == first[0]["line"]
    bad = list(x["tgt"])
    bad[first[0]["line"]] = wrong[first[0]["line"]]
    ex2 = find_example(ann, distance=far, hypotheses=bad, wrong=wrong)
    assert ex2["line"] > first[0]["line"] and ex2["distance"] == far
    assert ex2["expected"] in x["tgt"][ex2["line"]].split()
    # nobody qualifies (the "wrong" output is right everywhere): the first item at the distance
    assert find_example(ann, hypotheses=x["tgt"], wrong=x["tgt"])["line"] == first[0]["line"]
    assert find_example(ann, distance=1)["distance"] == 1
    with pytest.raises(ValueError, match="no anaphora item at distance 9"):
        find_example(ann, distance=9)
    with pytest.raises(ValueError, match="hypotheses: .* sentences for"):
        find_example(ann, hypotheses=x["tgt"][:-1])


def test_format_comparison_side_by_side(probe):
    _, _, data = probe
    x = data["test"]
    wrong = _swap(x, "anaphora")

    def report(arch, k, hyps, cxmi):
        return {"arch": arch, "context_size": k, "context_sides": "source", "reads_context": k > 0,
                "probe": score_probe(hyps, x["ann"]),
                "cxmi": {"cxmi": cxmi, "cxmi_random": cxmi - 0.2, "with_context": {"cxmi": 2 * cxmi}}}

    table = format_comparison({"sentence": report("transformer", 0, wrong, 0.0),
                               "context": report("concat_transformer", 2, x["tgt"], 0.1234)})
    lines = table.splitlines()
    assert lines[0].split() == ["sentence", "context"]
    rows = {line[:36].strip(): line[36:].split() for line in lines[2:]}
    assert rows["architecture"] == ["transformer", "concat_transformer"]
    assert rows["context read"] == ["none", "2", "prev.", "(source)"]
    n = sum(1 for _ in _items(x, "anaphora"))
    assert rows["pronoun it -> er/sie (anaphora)"] == ["0.0%", f"(0/{n})", "100.0%", f"({n}/{n})"]
    assert "antecedent 2 sentences back" in rows and "antecedent 1 sentence back" in rows
    assert rows["CXMI, nats/token (true context)"] == ["+0.0000", "+0.1234"]
    assert rows["sentences with context only"] == ["+0.0000", "+0.2468"]
    assert rows["random context instead"] == ["-0.2000", "-0.0766"]
    no_cxmi = format_comparison({"m": dict(report("transformer", 0, wrong, 0.0), cxmi=None)})
    assert "n/a" in no_cxmi.splitlines()[-1]


def test_cli_example_and_evaluate_errors(probe, tmp_path, capsys):
    d, _, data = probe
    x = data["test"]
    ann = str(d / "test.probe.jsonl")
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("\n".join(_swap(x, "anaphora")) + "\n")
    capsys.readouterr()
    assert cli_main(["example", "--annotations", ann, "--hyp", str(d / "test.tgt"),
                     "--wrong", str(wrong), "--distance", "1"]) == 0
    doc_number, sentence, doc, line = capsys.readouterr().out.rstrip("\n").split("\t")
    ex = find_example(ann, distance=1)
    assert (int(doc_number), int(sentence), doc, int(line)) == (
        ex["doc_number"], ex["sentence"], ex["doc"], ex["line"])
    with pytest.raises(SystemExit) as e:
        cli_main(["example", "--annotations", ann, "--distance", "7"])
    assert e.value.code == 2 and "no anaphora item at distance 7" in capsys.readouterr().err
    for model, msg in (("sentence", "expected NAME=CHECKPOINT"),
                       (f"m={tmp_path / 'none.pt'}", "--model m: no checkpoint file")):
        with pytest.raises(SystemExit) as e:
            cli_main(["evaluate", "--data", str(tmp_path), "--annotations", ann, "--model", model])
        assert e.value.code == 2 and msg in capsys.readouterr().err
