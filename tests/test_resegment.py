"""``--resegment``: hypotheses whose documents have another number of lines than the
reference's, cut into the reference's sentences by the least word edit distance (Matusov et
al. 2005), and ``docctx-score resegment``."""
import itertools
import json
import random
import re

import pytest

from fairseq_docctx.evaluation.bleu import bleu_scores
from fairseq_docctx.evaluation.io import ScoreInputError, load_corpus
from fairseq_docctx.evaluation.resegment import resegment, segment_bounds
from test_score_eval_setups import score_cli


def write(path, lines):
    path.write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    return path


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row = row, [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            row[j] = min(prev[j - 1] + (x != y), prev[j] + 1, row[j - 1] + 1)
    return row[-1]


def test_segmentation_is_the_least_edit_distance_of_every_cut():
    """Against every way to cut the words (brute force), on random small documents: the
    bounds are ordered, cover the hypothesis, and reach the least total edit distance."""
    rng = random.Random(3)
    for _ in range(400):
        refs = [[rng.choice("abcd") for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(1, 4))]
        hyp = [rng.choice("abcde") for _ in range(rng.randint(0, 7))]
        bounds, cost = segment_bounds(hyp, refs)
        assert bounds[0] == 0 and bounds[-1] == len(hyp) and bounds == sorted(bounds)
        assert cost == sum(edit_distance(hyp[a:b], r) for a, b, r in zip(bounds, bounds[1:], refs))
        best = min(sum(edit_distance(hyp[a:b], r) for a, b, r in zip((0,) + cut, cut + (len(hyp),), refs))
                   for cut in itertools.combinations_with_replacement(range(len(hyp) + 1), len(refs) - 1))
        assert cost == best


def test_joined_and_split_lines_get_the_reference_back():
    ref = ["i saw a cat .", "it was big .", "we went home .", "the end ."]
    r = resegment(["i saw a cat . it was", "big . we went home . the end ."], ref)
    assert r.sentences == ref and r.cost == 0
    assert r.moved == 2  # "it was" came from the first line into the second sentence
    assert resegment([" ".join(ref)], ref).moved == 0  # one line cut: nothing crosses a line the system drew
    # an unmatched word between two sentences starts the next one; a dropped sentence is not
    # recovered: its words are missing from every segment and counted as edits
    r = resegment(["i saw a cat . oh it was big .", "the end ."], ref)
    assert r.sentences[0] == "i saw a cat ." and r.sentences[1].startswith("oh it was big")
    assert " ".join(r.sentences[1:3]).split() == "oh it was big .".split() and r.sentences[3] == "the end ."
    assert r.cost == 5  # "oh" inserted, "we went home" (and one ".") deleted
    assert resegment([], ["a b", "c"]).sentences == ["", ""]


@pytest.fixture
def files(tmp_path):
    """Two documents; the hypothesis equal to the reference, its sentences joined and split."""
    ref = ["i saw a cat .", "it was big .", "we went home .", "the dog ran .", "it barked .", "then it slept ."]
    write(tmp_path / "ref.en", ref)
    write(tmp_path / "ref.docids", ["d1"] * 3 + ["d2"] * 3)
    hyp = ["i saw a cat . it was big .", "we went", "home .", "the dog ran . it barked . then it slept ."]
    write(tmp_path / "hyp.en", hyp)
    write(tmp_path / "hyp.docids", ["d1"] * 3 + ["d2"])
    return tmp_path, ref


def test_bleu_of_a_resegmented_copy_of_the_reference_is_100(files, capsys):
    d, ref = files
    rc, out, err = score_cli(["bleu", "--hyp", d / "hyp.en", "--ref", d / "ref.en", "--resegment", "--both",
                              "--json", d / "s.json"], capsys)
    assert rc == 0, err
    assert out.startswith("BLEU = 100.00") and "d-BLEU = 100.00" in out
    assert "re-segmented 2 of 2 documents" in err and "d-BLEU needs no re-segmentation" in err
    report = json.loads((d / "s.json").read_text())["metrics"]["bleu"]["resegmentation"]
    assert report == {"documents": 2, "resegmented": 2, "unequal_line_counts": 1, "words_moved": 0,
                      "mean_words_moved": 0.0, "word_edits": 0}
    rc, out, err = score_cli(["resegment", "--hyp", d / "hyp.en", "--ref", d / "ref.en", "-o", d / "re.en"], capsys)
    assert rc == 0, err
    assert (d / "re.en").read_text().splitlines() == ref
    # METEOR, chrF and the significance tests read the same re-segmented lines
    write(d / "re.docids", ["d1"] * 3 + ["d2"] * 3)
    scores = [score_cli(["meteor", "--hyp", h, "--ref", d / "ref.en", *more], capsys)
              for h, more in ((d / "hyp.en", ["--resegment"]), (d / "re.en", []))]
    assert scores[0][0] == scores[1][0] == 0 and scores[0][1] == scores[1][1], scores
    rc, out, err = score_cli(["chrf", "--hyp", d / "hyp.en", "--ref", d / "ref.en", "--resegment"], capsys)
    assert rc == 0 and out.startswith("chrF2 = 100.00"), (out, err)
    rc, out, err = score_cli(["compare", "-b", d / "hyp.en", "--hyp", d / "re.en", "--names", "joined,resegmented",
                              "--ref", d / "ref.en", "--resegment", "--bs-samples", "20", "--ar-trials", "20",
                              "--json", d / "c.json"], capsys)
    assert rc == 0, err
    c = json.loads((d / "c.json").read_text())
    assert c["resegmentation"]["joined"]["resegmented"] == 2 and c["resegmentation"]["resegmented"]["resegmented"] == 0


def test_one_line_per_document_and_documents_matched_by_id(files, capsys):
    d, ref = files
    # one line per document, no ids: the reference's documents in order
    write(d / "one.txt", [" ".join(ref[:3]), " ".join(ref[3:])])
    rc, out, err = score_cli(["bleu", "--hyp", d / "one.txt", "--ref", d / "ref.en", "--resegment"], capsys)
    assert rc == 0 and out.startswith("BLEU = 100.00"), err
    # own ids in another order: matched by id
    write(d / "rev.txt", [" ".join(ref[3:]), " ".join(ref[:3])])
    write(d / "rev.ids", ["d2", "d1"])
    rc, out, err = score_cli(["resegment", "--hyp", d / "rev.txt", "--hyp-docids", d / "rev.ids",
                              "--ref", d / "ref.en", "-o", d / "rev.out"], capsys)
    assert rc == 0, err
    assert (d / "rev.out").read_text().splitlines() == ref


def test_refusals_name_what_differs(files, capsys):
    d, ref = files
    # without --resegment: one line naming the first document that differs
    rc, out, err = score_cli(["bleu", "--hyp", d / "hyp.en", "--ref", d / "ref.en"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert re.search(r"hyp\.en:4: document 2 \('d2'\) has 1 sentences here but 3", err) and "--resegment" in err
    # lines that are neither one per document nor one per sentence, without ids
    write(d / "odd.txt", ref[:4])
    with pytest.raises(ScoreInputError, match=r"odd.txt has 4 lines and no documents of its own.*--hyp-docids"):
        load_corpus(str(d / "odd.txt"), str(d / "ref.en"), resegment=True)
    # a document the hypothesis lacks
    write(d / "x.txt", ["a", "b"])
    write(d / "x.ids", ["d1", "d9"])
    with pytest.raises(ScoreInputError, match=r"'d2' in .*ref.en.*which the hypothesis lacks"):
        load_corpus(str(d / "x.txt"), str(d / "ref.en"), resegment=True, hyp_docids=str(d / "x.ids"))
    # no documents in the reference
    write(d / "plain.en", ref)
    with pytest.raises(ScoreInputError, match="needs the reference's documents"):
        load_corpus(str(d / "hyp.en"), str(d / "plain.en"), resegment=True)
    # the output is never the input
    rc, out, err = score_cli(["resegment", "--hyp", d / "hyp.en", "--ref", d / "ref.en", "-o", d / "ref.en"], capsys)
    assert rc == 2 and (d / "ref.en").read_text().splitlines() == ref


def test_aligned_scores_are_unchanged_without_the_flag(files, capsys):
    d, ref = files
    write(d / "good.en", ref)
    write(d / "good.docids", ["d1"] * 3 + ["d2"] * 3)
    rc, out, _ = score_cli(["bleu", "--hyp", d / "good.en", "--ref", d / "ref.en"], capsys)
    rc2, out2, err2 = score_cli(["bleu", "--hyp", d / "good.en", "--ref", d / "ref.en", "--resegment"], capsys)
    assert rc == rc2 == 0 and out == out2 and "re-segmented 0 of 2 documents" in err2


def test_han_released_outputs_joined_at_random_score_within_half_a_bleu(shared_data):
    """The HAN authors' TED Zh-En outputs (Miculicich et al. 2018), tst2010's 11 talks (the
    first 1,570 lines; the talks' lengths from the IWSLT15 XML): adjacent lines joined at
    random in every talk, re-segmented, tokenized BLEU within 0.5 of the aligned files'."""
    xml = (shared_data / "iwslt15-zhen" / "IWSLT15.TED.tst2010.zh-en.en.xml").read_text(encoding="utf-8")
    lengths = [len(re.findall(r"<seg ", doc)) for doc in xml.split("<doc ")[1:]]
    n = sum(lengths)
    d = shared_data / "han-released-zhen"
    ref = (d / "IWSLT15.TED.tst.tc.en").read_text(encoding="utf-8").splitlines()[:n]
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    ids = [f"talk{k}" for k in range(len(lengths))]
    ref_docs = [ref[s:s + ln] for s, ln in zip(starts, lengths)]
    from fairseq_docctx.evaluation.io import Corpus
    from fairseq_docctx.evaluation.resegment import resegment_documents

    for name in ("baseline", "HA-enc-dec"):
        hyp = (d / f"TED_zh-en_{name}.en").read_text(encoding="utf-8").splitlines()[:n]
        hyp_docs = [hyp[s:s + ln] for s, ln in zip(starts, lengths)]
        rng = random.Random(name)
        joined = []
        for doc in hyp_docs:
            out = [doc[0]]
            for s in doc[1:]:
                if rng.random() < 0.3:
                    out[-1] += " " + s
                else:
                    out.append(s)
            joined.append(out)
        assert sum(map(len, joined)) < 0.8 * n
        new, _, report = resegment_documents(ids, joined, ref_docs)
        assert report.documents == report.unequal == 11
        aligned = bleu_scores(Corpus(ids, hyp_docs, ref_docs), tokenized=True)["score"]
        again = bleu_scores(Corpus(ids, new, ref_docs), tokenized=True)["score"]
        assert abs(aligned - again) < 0.5, (name, aligned, again)
        assert again != aligned  # the cuts are the edit distance's, not the system's
