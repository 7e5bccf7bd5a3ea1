"""The probe's settings (``docctx-probe generate --setting`` and the shape options): each changes
what the context must carry or how far, and keeps what makes the probe a probe (the current
sentence gives no clue, the annotations point at the words they score). No training."""
import hashlib
import json
from collections import Counter, defaultdict

import pytest

from fairseq_docctx.cli.probe import cli_main
from fairseq_docctx.probe import (CLASSES, CONSISTENCY, DEMONSTRATIVE, DETERMINER, LIGHT, NOUNS, SETTINGS,
                                  generate_probe, vocabulary)

SPLITS = {"train": 1200, "test": 60}


def _read(d, split="train"):
    lines = {ext: (d / f"{split}.{ext}").read_text(encoding="utf-8").splitlines()
             for ext in ("src", "tgt", "docids", "probe.jsonl")}
    lines["ann"] = [json.loads(x) for x in lines.pop("probe.jsonl")]
    return lines


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    out = {}
    for name, kwargs in SETTINGS.items():
        d = tmp_path_factory.mktemp(name)
        generate_probe(str(d), SPLITS, seed=2, **kwargs)
        out[name] = (d, _read(d))
    return out


def _anaphora(data):
    for rec in data["ann"]:
        for it in rec["items"]:
            if it["phenomenon"] == "anaphora":
                yield rec, it


def test_default_setting_is_the_calibrated_probe(tmp_path):
    """The default setting writes, byte for byte, the data every probe test was calibrated on
    (the files of this generator before the settings existed: their digest)."""
    generate_probe(str(tmp_path), {"train": 50, "valid": 5, "test": 10}, seed=1)
    digest = hashlib.md5()
    for split in ("train", "valid", "test"):
        for ext in ("src", "tgt", "docids", "probe.jsonl"):
            digest.update((tmp_path / f"{split}.{ext}").read_bytes())
    assert digest.hexdigest() == "279742d8c7d553130c205642d4879193"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_annotations_point_at_what_they_score(settings, name):
    """Every annotated word is the reference's word at its index, the alternatives occur
    nowhere else in the target, and an antecedent lies in its document."""
    _, x = settings[name]
    alt_words = {w for c in CLASSES for w in c[1:3]} | {w for c in CONSISTENCY for w in c["forms"]}
    for i, rec in enumerate(x["ann"]):
        tgt = x["tgt"][i].split()
        assert {k for k, w in enumerate(tgt) if w in alt_words} == {it["index"] for it in rec["items"]}
        for it in rec["items"]:
            assert tgt[it["index"]] == it["expected"] in it["alternatives"]
            if it["phenomenon"] == "anaphora":
                a = i - it["distance"]
                assert x["docids"][a] == rec["doc"] and "it" in x["src"][i].split()
    assert sum(1 for _ in _anaphora(x)) > 200


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_current_sentence_gives_no_clue(settings, name):
    """No word of a pronoun's own source sentence tells its class: every word seen in 100 or
    more of them goes with each class 30 to 70 % of the time (the classes are drawn 50:50; a
    word with a clue goes with one class only)."""
    _, x = settings[name]
    by_word = defaultdict(Counter)
    for rec, it in _anaphora(x):
        for w in set(x["src"][rec["line"]].split()):
            by_word[w][it["class"]] += 1
    frequent = {w: c for w, c in by_word.items() if sum(c.values()) >= 100}
    assert len(frequent) >= 5
    for w, c in frequent.items():
        assert 0.3 < c["m"] / sum(c.values()) < 0.7, (w, c)


@pytest.mark.parametrize("name, lo, hi", [("short", 3, 5), ("short-distractors", 3, 5), ("long", 15, 25),
                                          ("cue-first", 6, 10)])
def test_sentence_length(settings, name, lo, hi):
    _, x = settings[name]
    lengths = Counter(len(s.split()) - 1 for s in x["src"])
    assert min(lengths) == lo and max(lengths) == hi, lengths
    assert len(lengths) == hi - lo + 1


def _intro_lines(x):
    return {rec["line"] - it["distance"] for rec, it in _anaphora(x)}


def test_cue_position(settings):
    """The antecedent's noun phrase opens its sentence (first), ends it (last), or has words
    after it (middle, the short setting's mix)."""
    nouns = {s for c in NOUNS.values() for s in (w.split(":")[0] for w in c.split())}
    for name, where in (("cue-first", "first"), ("cue-last", "last")):
        _, x = settings[name]
        for line in _intro_lines(x):
            words = x["src"][line].split()[:-1]
            noun = max(i for i, w in enumerate(words) if w in nouns)
            if where == "first":
                assert words[0] == "a" and noun <= 2, words
            else:
                assert noun == len(words) - 1 and words[0] != "a", words
    d, _ = settings["default"]
    generate_probe(str(d / "middle"), {"train": 60}, seed=2, cue_position="middle", sentence_len=(6, 9))
    x = _read(d / "middle")
    for line in _intro_lines(x):
        words = x["src"][line].split()[:-1]
        noun = max(i for i, w in enumerate(words) if w in nouns)
        assert 0 < noun < len(words) - 1, words


def test_determiner_decides_the_class(settings):
    """With ``cue="determiner"`` the source article says the class, the noun does not."""
    _, x = settings["determiner"]
    by_article, by_noun = defaultdict(Counter), defaultdict(Counter)
    nouns = {s for c in NOUNS.values() for s in (w.split(":")[0] for w in c.split())}
    for rec, it in _anaphora(x):
        words = x["src"][rec["line"] - it["distance"]].split()
        article = next(w for w in words if w in DETERMINER.values())
        by_article[article][it["class"]] += 1
        by_noun[next(w for w in words if w in nouns)][it["class"]] += 1
    assert {a: set(c) for a, c in by_article.items()} == {DETERMINER["m"]: {"m"}, DETERMINER["f"]: {"f"}}
    assert sum(len(c) == 2 for c in by_noun.values()) >= 12  # nouns of both classes


def test_two_cues_agree(settings):
    """With ``cue="two"`` the class is m where the light's state and the demonstrative agree
    (this + on, that + off), f where they differ, and each cue alone is at chance."""
    _, x = settings["two-cues"]
    alone = {"light": defaultdict(Counter), "demonstrative": defaultdict(Counter)}
    n = 0
    for rec, it in _anaphora(x):
        first, second = it["cue_distances"]
        light = x["src"][rec["line"] - first]
        this = next(w for w in x["src"][rec["line"] - second].split() if w in ("this", "that"))
        assert light in [src for src, _ in LIGHT]
        on = light == LIGHT[0][0]
        assert it["class"] == ("m" if on == (this == DEMONSTRATIVE[0][0]) else "f")
        alone["light"][on][it["class"]] += 1
        alone["demonstrative"][this][it["class"]] += 1
        n += 1
    for cue in alone.values():
        for c in cue.values():
            assert 0.4 < c["m"] / sum(c.values()) < 0.6
    assert n > 200


def test_distractors_name_another_noun_between(settings):
    """``far-distractors``: every sentence between an antecedent and its pronoun names a noun
    after my/our (half of them of the other class), and the annotations count them."""
    _, x = settings["far-distractors"]
    other = total = 0
    for rec, it in _anaphora(x):
        between = range(rec["line"] - it["distance"] + 1, rec["line"])
        assert it["distractors"] == len(between) >= 1
        for line in between:
            words = x["src"][line].split()
            assert "my" in words or "our" in words, words
            possessive = next(w for w in x["tgt"][line].split() if w in ("mein", "meine", "unseren", "unsere"))
            other += ("f" if possessive in ("meine", "unsere") else "m") != it["class"]
            total += 1
    assert total > 200 and 0.4 < other / total < 0.6
    _, y = settings["short-distractors"]
    assert {it["distance"] for _, it in _anaphora(y)} == {1, 2, 3}


def test_vocabulary_grows_with_invented_words(settings):
    nouns, adjs = vocabulary(2, 60, 40)
    assert [len(nouns[c]) for c in "mf"] == [60, 60] and len(adjs) == 40
    pairs = [p for c in "mf" for p in nouns[c]] + adjs
    assert len({s for s, _ in pairs}) == len({t for _, t in pairs}) == len(pairs)  # one to one
    assert nouns == vocabulary(2, 60, 40)[0]  # the same words every time
    _, x = settings["large-vocabulary"]
    assert len({w for s in x["src"] for w in s.split()}) > 120


def test_cli_setting_and_overrides(tmp_path, capsys):
    out = tmp_path / "p"
    assert cli_main(["generate", "--outdir", str(out), "--train-docs", "30", "--valid-docs", "2",
                     "--test-docs", "2", "--setting", "short-distractors", "--sentence-len", "4,6"]) == 0
    x = _read(out)
    assert {len(s.split()) - 1 for s in x["src"]} <= set(range(4, 7))
    assert any(it.get("distractors") for _, it in _anaphora(x))
    for argv, message in ((["--sentence-len", "1,2"], "the shortest INTRO sentence has 3 words"),
                          (["--sentence-len", "5"], "expected MIN,MAX"),
                          (["--cue", "two", "--classes", "3"], "two classes only"),
                          (["--distractors", "2"], "a probability")):
        with pytest.raises(SystemExit) as e:
            cli_main(["generate", "--outdir", str(tmp_path / "bad"), "--train-docs", "3"] + argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
