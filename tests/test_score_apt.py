"""docctx-score apt: APT (Miculicich Werlen & Popescu-Belis 2017).

The released figures come from the HAN paper authors' `.apt.score` files (the reference
implementation's output on their TED Zh-En test outputs, ../shared/data/han-released-zhen/);
the hand-made cases' expectations are worked out in the comments."""
import json
import re

import pytest

from conftest import SHARED_DATA
from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.evaluation import apt
from fairseq_docctx.evaluation.apt import OTHER, AptConfig, apt_files, apt_score

HAN = SHARED_DATA / "han-released-zhen"
SYSTEMS = ["baseline", "cache", "HA-enc", "HA-dec", "HA-enc-dec"]


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def released(system):
    """Score, findings per case, total, "Not source" and the confusion table of a .apt.score file."""
    text = (HAN / f"TED_zh-en_{system}.apt.score").read_text(encoding="utf-8")
    head = dict(re.findall(r"^([A-Z][^:\t]*): (.*)$", text, re.M))
    lines = text.splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.startswith("\t"))
    cols = lines[k].split("\t")[1:]
    table = {}
    for ln in lines[k + 1:]:
        row = ln.split("\t")
        table[row[0]] = dict(zip(cols, map(int, row[1:])))
    return {"score": float(head["Score"]), "findings": [int(x) for x in head["Findings per case"].split(",")],
            "total": int(head["Total findings"]), "not_source": int(head["Not source"]) if "Not source" in head else None,
            "table": table}


@pytest.fixture(scope="module")
def han_files(shared_data):
    if not HAN.is_dir():
        pytest.skip(f"needs the HAN authors' released outputs at {HAN}")
    return HAN


@pytest.mark.parametrize("system", SYSTEMS)
def test_released_ted_zhen_scores(han_files, system):
    """The default configuration gives the authors' released APT figures (HAN paper Table 4:
    63.44 / 63.53 / 64.05 / 64.02 / 64.35) and their findings per case exactly."""
    rel = released(system)
    res = apt_files(HAN / "IWSLT15.TED.tst.tc.zh", HAN / "IWSLT15.TED.tst.tc.en", HAN / f"TED_zh-en_{system}.en",
                    HAN / "IWSLT15.TED.tst.tc.align", HAN / f"TED_zh-en_{system}.align")
    assert abs(res.score - rel["score"]) <= 1e-4
    assert f"{res.score:.4f}" == f"{rel['score']:.4f}"
    assert [res.findings[c] for c in range(1, 7)] == rel["findings"]
    assert res.total == rel["total"] == 9732
    # the files that print it say 1,935 reference pronouns were aligned to no source word
    assert res.not_aligned_to_source == 1935
    if rel["not_source"] is not None:
        assert res.not_aligned_to_source == rel["not_source"]
    # confusion table: each reference pronoun's row total, its correct (diagonal), non-pronoun
    # (OTHER) and unaligned (NONE) cells are the released ones; an item whose candidate words
    # hold several other pronouns may sit in another off-diagonal cell (APT takes the first of a
    # Python set), so off the diagonal only the row's sum over pronouns is compared
    table = rel["table"]
    for r, row in table.items():
        if r in ("-sum-", OTHER, "NONE"):
            assert row["-sum-"] == (9732 if r == "-sum-" else 0)
            continue
        mine = res.confusion.get(r, {})
        assert sum(mine.values()) == row["-sum-"], r
        for c in (r, OTHER, "NONE"):
            assert mine.get(c, 0) == row[c], (r, c)


def test_released_cli_json(han_files, tmp_path, capsys):
    """`docctx-score apt` prints the score and the findings and writes --json."""
    out = tmp_path / "run.json"
    rc, stdout, _ = score_cli(["apt", "-s", "zh", "-t", "en", "--src", HAN / "IWSLT15.TED.tst.tc.zh",
                               "--ref", HAN / "IWSLT15.TED.tst.tc.en", "--hyp", HAN / "TED_zh-en_HA-enc-dec.en",
                               "--align-ref", HAN / "IWSLT15.TED.tst.tc.align",
                               "--align-hyp", HAN / "TED_zh-en_HA-enc-dec.align", "--json", out, "--confusion"],
                              capsys)
    assert rc == 0
    assert "APT = 0.6435" in stdout
    assert "1 (equal): 6263" in stdout and "3 (different): 3058" in stdout and "total findings: 9732" in stdout
    assert "aligned to no source word): 1935" in stdout
    assert re.search(r"^-sum-\t.*\t9732$", stdout, re.M)
    data = json.loads(out.read_text())
    m = data["metrics"]["apt"]
    assert data["run"] == "TED_zh-en_HA-enc-dec.en"
    assert round(m["score"], 4) == 0.6435
    assert m["findings"] == {"1": 6263, "2": 0, "3": 3058, "4": 411, "5": 0, "6": 0}
    assert m["config"]["items"] == "reference" and len(m["config"]["target_pronouns"]) == 19


# ------------------------------------------------------------------------------------------
# hand-made cases


def toks(*sents):
    return [s.split() for s in sents]


def links(*lines):
    return [sorted(tuple(map(int, x.split("-"))) for x in ln.split()) for ln in lines]


SRC_CFG = dict(items="source", source_pronouns=["él", "ella"], target_pronouns=["he", "she", "it", "him"])


def one(src, ref, hyp, ar, ah, **cfg):
    res = apt_score(toks(src), toks(ref), toks(hyp), links(ar), links(ah), AptConfig(**{**SRC_CFG, **cfg}))
    assert len(res.items) == 1
    return res.items[0].case, res


@pytest.mark.parametrize("hyp,ar,ah,case", [
    ("he eats", "0-0 1-1", "0-0 1-1", 1),  # both sides "he"
    ("she eats", "0-0 1-1", "0-0 1-1", 3),  # "she" for "he", no similar group
    ("eats bread", "0-0 1-1", "1-0", 4),  # nothing aligned to "él" in the candidate
    ("he eats", "1-1", "0-0 1-1", 5),  # nothing aligned to "él" in the reference
    ("he eats", "1-1", "1-1", 6),  # neither
])
def test_cases_source_items(hyp, ar, ah, case):
    got, res = one("él come", "he eats", hyp, ar, ah)
    assert got == case
    assert res.findings[case] == 1 and res.total == 1
    assert res.score == {1: 1.0, 3: 0.0, 4: 0.0, 5: 0.0, 6: 0.0}[case]


def test_case_2_similar_and_equal_groups():
    # "she" for "he" is case 3 without groups, 2 (weight 0.5) when they are similar, 1 when equal
    assert one("él come", "he eats", "she eats", "0-0", "0-0")[0] == 3
    case, res = one("él come", "he eats", "she eats", "0-0", "0-0", similar=[["he", "she"]])
    assert case == 2 and res.score == 0.5
    assert res.confusion == {"he": {"she": 1}}
    case, res = one("él come", "he eats", "him eats", "0-0", "0-0", equal=[["he", "him"]])
    assert case == 1 and res.confusion == {"he": {"he": 1}}


def test_other_counts_as_equal_only_when_asked():
    # "él" aligned to non-pronouns on both sides: OTHER vs OTHER
    assert one("él come", "eats he", "eats he", "0-0", "0-0")[0] == 3
    assert one("él come", "eats he", "eats he", "0-0", "0-0", count_other_as_equal=True)[0] == 1
    # without a target list every word is its own category: "eats" = "eats"
    assert one("él come", "eats he", "eats he", "0-0", "0-0", target_pronouns=None)[0] == 1


def test_weights_and_excluded_cases():
    src = toks("él come", "ella come", "él duerme")
    ref = toks("he eats", "she eats", "he sleeps")
    hyp = toks("he eats", "he eats", "sleeps")
    ar, ah = links("0-0", "0-0", "0-0"), links("0-0", "0-0", "1-0")  # cases 1, 3, 4
    res = apt_score(src, ref, hyp, ar, ah, AptConfig(**SRC_CFG))
    assert [it.case for it in res.items] == [1, 3, 4]
    assert res.score == pytest.approx(1 / 3)
    res = apt_score(src, ref, hyp, ar, ah, AptConfig(**{**SRC_CFG, "cases": (1, 3), "weights": (1, 0.25)}))
    assert res.findings == {1: 1, 3: 1} and res.excluded == {4: 1}
    assert res.score == pytest.approx((1 + 0.25) / 2)


def test_reference_items():
    """Reference mode: every reference pronoun is an item; the candidate words are those aligned
    to its source words; a reference pronoun aligned to no source word is counted apart."""
    src = toks("他 说 她 来")
    ref = toks("he said she came it")  # "it" (4) aligned to no source word
    hyp = toks("he says her coming")
    ar = links("0-0 1-1 2-2 3-3")
    res = apt_score(src, ref, hyp, ar, links("0-0 1-1 2-2 3-3"), AptConfig())
    assert [(it.ref_words, it.hyp_words, it.case) for it in res.items] == [(["he"], ["he"], 1), (["she"], ["her"], 3)]
    assert res.not_aligned_to_source == 1 and res.score == 0.5
    res = apt_score(src, ref, hyp, ar, links("0-0 1-1 3-3"), AptConfig())  # nothing aligned to 她
    assert [it.case for it in res.items] == [1, 4]
    assert res.confusion == {"he": {"he": 1}, "she": {"NONE": 1}}


def test_alignment_improvement():
    """A side whose aligned words hold none of the improvement words gets the nearest one within
    two words added, unless that word is aligned to one of the source improvement words."""
    src, ref, hyp = toks("ella come pan"), toks("she eats bread"), toks("she eats bread")
    ar = ah = links("0-1 1-1 2-2")  # "ella" wrongly aligned to "eats"
    cfg = dict(SRC_CFG, source_pronouns=["ella"])
    assert one("ella come pan", "she eats bread", "she eats bread", "0-1", "0-1", **cfg)[0] == 3  # OTHER vs OTHER
    res = apt_score(src, ref, hyp, ar, ah, AptConfig(**cfg, improve_tgt_words=["she", "he"]))
    it = res.items[0]
    assert (it.ref_pos, it.ref_words, it.hyp_pos, it.hyp_words, it.case) == ([1, 0], ["she"], [1, 0], ["she"], 1)
    # the nearest improvement word wins, leftmost on a tie; one aligned to a source improvement
    # word ("lo") is passed over
    src2, hyp2 = toks("ella lo come"), toks("she eats it")  # window 0..2 around "eats": weights 1,1,1
    ah2 = links("0-1 1-0 2-1")
    res = apt_score(src2, toks("she it eats"), hyp2, links("0-0 1-1 2-2"), ah2,
                    AptConfig(**cfg, improve_tgt_words=["she", "it"]))
    assert (res.items[0].hyp_pos, res.items[0].hyp_words) == ([1, 0], ["she"])
    res = apt_score(src2, toks("she it eats"), hyp2, links("0-0 1-1 2-2"), ah2,
                    AptConfig(**cfg, improve_tgt_words=["she", "it"], improve_src_words=["lo"]))
    assert (res.items[0].hyp_pos, res.items[0].hyp_words) == ([1, 2], ["it"])
    assert res.items[0].ref_pos == [0]  # aligned to "she" already: nothing to do
    # no aligned word at all: the improvement does not search (APT's neighbour search never runs)
    res = apt_score(src, ref, hyp, links("1-1 2-2"), ah, AptConfig(**cfg, improve_tgt_words=["she"]))
    assert res.items[0].case == 5


def test_window_weights():
    # APT's closeness weights: range(n/2, 0, -1) + [1]*(n % 2) + range(1, n/2 + 1)
    assert apt._window_weights(5) == [2, 1, 1, 1, 2]
    assert apt._window_weights(4) == [2, 1, 1, 2]
    assert apt._window_weights(6) == [3, 2, 1, 1, 2, 3]
    assert apt._window_weights(1) == [1]


# ------------------------------------------------------------------------------------------
# files and errors


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_files_lowercased_and_errors(tmp_path, capsys):
    src = write(tmp_path / "s", "他 来\n她 走\n")
    ref = write(tmp_path / "r", "He came\nShe left\n")
    hyp = write(tmp_path / "h", "HE comes\nit leaves\n")
    ar = write(tmp_path / "ar", "0-0 1-1\n0-0 1-1\n")
    ah = write(tmp_path / "ah", "0-0 1-1\n0-0 1-1\n")
    res = apt_files(src, ref, hyp, ar, ah)
    assert [it.case for it in res.items] == [1, 3] and res.score == 0.5
    base = ["apt", "-s", "zh", "-t", "en", "--src", src, "--ref", ref, "--hyp", hyp, "--align-ref", ar]
    bad = write(tmp_path / "bad", "0-0 1-1\n0-0 1-7\n")
    rc, _, err = score_cli(base + ["--align-hyp", bad], capsys)
    assert rc == 2 and f"{bad}:2" in err and "outside the sentence pair" in err
    short = write(tmp_path / "short", "0-0\n")
    rc, _, err = score_cli(base + ["--align-hyp", short], capsys)
    assert rc == 2 and str(short) in err and "1 lines" in err
    rc, _, err = score_cli(base + ["--align-hyp", ah, "--items", "source"], capsys)
    assert rc == 2 and "--source-pronouns" in err
    rc, _, err = score_cli(["apt", "-s", "en", "-t", "xx", "--src", src, "--ref", ref, "--hyp", hyp,
                            "--align-ref", ar, "--align-hyp", ah], capsys)
    assert rc == 2 and "--target-pronouns" in err
    rc, _, err = score_cli(base + ["--align-hyp", ah, "--cases", "1,2", "--weights", "1"], capsys)
    assert rc == 2 and "one weight per case" in err
