"""docctx-score against the papers' own evaluation set-ups: plain sentence-aligned files,
multi-bleu.perl's tokenized BLEU (the HAN authors' released TED Zh-En outputs and their
multi-bleu.perl results), Moses pretokenization, METEOR 1.5 (the jar, when java and
pycocoevalcap are installed) and the recipes' Meteor columns.

Expected BLEU figures come from the authors' released ``.bleu`` files; the other expectations
are computed by hand in the comments, or are what the METEOR 1.5 jar itself prints."""
import json
import math
import re
import shutil
import subprocess

import pytest

from conftest import REPO
from fairseq_docctx.cli.score import build_parser


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# plain sentence-aligned files


def test_corpus_level_metrics_score_plain_files_document_level_ones_refuse(tmp_path, capsys):
    hyp = write(tmp_path / "hyp.en", "the cat sat on the mat\nhe read it\n")
    ref = write(tmp_path / "ref.en", "the cat sat on the mat\nshe read it\n")
    src = write(tmp_path / "src.de", "die Katze sass auf der Matte\nsie las es\n")
    rc, out, err = score_cli(["bleu", "--hyp", hyp, "--ref", ref, "--per-document", "--json", tmp_path / "r.json"], capsys)
    assert rc == 0, err
    # 1-grams 6+2 of 6+3, 2-grams 5+1 of 5+2, 3-grams 4+0 of 4+1, 4-grams 3+0 of 3+0; BP 1;
    # exp smoothing leaves every order with a match as it is
    expected = 100 * math.exp(sum(math.log(p) for p in (8 / 9, 6 / 7, 4 / 5, 3 / 3)) / 4)
    assert re.search(rf"^BLEU = {expected:.2f} ", out)
    assert err.count("\n") == 1 and "per-document scores need documents" in err
    assert len(out.strip().splitlines()) == 2  # the score and its signature: no per-document lines
    data = json.loads((tmp_path / "r.json").read_text())["metrics"]["bleu"]
    assert data["score"] == pytest.approx(expected) and "per_document" not in data
    for argv in (["chrf"], ["bleu", "--tokenized"], ["meteor"],
                 ["accuracy", "-t", "en", "--src", src, "--tokenize", "none",
                  "--align-ref", write(tmp_path / "a.ref", "0-0 1-1 2-2 3-3 4-4 5-5\n0-0 1-1 2-2\n"),
                  "--align-hyp", write(tmp_path / "a.hyp", "0-0 1-1 2-2 3-3 4-4 5-5\n0-0 1-1 2-2\n"),
                  "--kind", "pronoun"]):
        rc, out, err = score_cli(argv + ["--hyp", hyp, "--ref", ref], capsys)
        assert rc == 0 and "per-document scores need documents" in err, (argv, err)
    # pronouns: reference "she" (aligned to "sie") gets "he": different; "it" (to "es") gets
    # "it": correct; 1 of 2
    assert "pronoun accuracy = 50.00  (correct 1, different 1, missing 0;" in out
    # the document-level metrics need documents
    for argv, what in ((["bleu", "--document"], "d-BLEU"), (["chrf", "--both"], "d-chrF"),
                       (["cohesion", "-t", "en"], "lexical cohesion")):
        rc, out, err = score_cli(argv + ["--hyp", hyp, "--ref", ref], capsys)
        assert rc == 2 and f"{what} needs documents: no document structure in {hyp}" in err, (argv, err)
    # sides of different lengths: an error naming both files
    rc, _, err = score_cli(["bleu", "--hyp", write(tmp_path / "short.en", "a\n"), "--ref", ref], capsys)
    assert rc == 2 and "short.en has 1 sentences but" in err and "ref.en has 2" in err


# ------------------------------------------------------------------------------------------
# multi-bleu.perl


RELEASED = ["baseline", "cache", "HA-enc", "HA-dec", "HA-enc-dec"]


def test_tokenized_bleu_reproduces_the_han_authors_multi_bleu_files(shared_data, capsys):
    """The HAN authors' TED Zh-En outputs (Miculicich et al. 2018) and their multi-bleu.perl
    results: --tokenized prints the same line, figure to two decimals included."""
    d = shared_data / "han-released-zhen"
    ref = d / "IWSLT15.TED.tst.tc.en"
    for name in RELEASED:
        released = (d / f"TED_zh-en_{name}.bleu").read_text().strip()
        rc, out, err = score_cli(["bleu", "--tokenized", "--hyp", d / f"TED_zh-en_{name}.en", "--ref", ref], capsys)
        assert rc == 0, err
        first = out.splitlines()[0]
        assert first == "BLEU (tokenized, multi-bleu.perl) = " + released.split(" = ", 1)[1], (first, released)
    # the figure of the first line; re-tokenizing with 13a scores something else (19.66)
    figure = float(re.match(r"BLEU = ([\d.]+),", (d / "TED_zh-en_baseline.bleu").read_text()).group(1))
    rc, out, _ = score_cli(["bleu", "--pretokenize", "13a", "--hyp", d / "TED_zh-en_baseline.en", "--ref", ref], capsys)
    assert rc == 0 and f"= {figure:.2f}," not in out and "|pretok:13a" in out


def test_multi_bleu_by_hand_case_lowercase_and_closest_reference_length():
    from fairseq_docctx.evaluation.bleu import MultiBleu, multibleu_line

    # case-sensitive: "The" does not match "the"; 1-grams 2/3, 2-grams 1/2 ("cat sat"),
    # 3-grams 0/1: no smoothing, BLEU 0
    s = MultiBleu().corpus_score(["The cat sat"], [["the cat sat"]])
    assert s.score == 0.0 and s.precisions[:3] == pytest.approx([200 / 3, 50.0, 0.0])
    # -lc lowercases ASCII letters only (multi-bleu.perl reads bytes): "Über" stays, "The" matches
    s = MultiBleu(lowercase=True).corpus_score(["The Über cat"], [["the über cat"]])
    assert s.precisions[0] == pytest.approx(200 / 3)
    # tokens are split at ASCII whitespace: a no-break space joins "a\u00a0b" into one token
    assert MultiBleu().corpus_score(["a\u00a0b c"], [["a b c"]]).sys_len == 2
    # two references of lengths 3 and 5 for a hypothesis of 4: equally close, the shorter (3)
    # is the reference length; 1-grams clipped by the largest count in one reference:
    # "a a a a" against "a a b" and "a c d e f": 2 of 4
    s = MultiBleu().corpus_score(["a a a a"], [["a a b"], ["a c d e f"]])
    assert s.ref_len == 3 and s.precisions[0] == pytest.approx(50.0)
    # the line multi-bleu.perl prints
    s = MultiBleu().corpus_score(["a b c d e"], [["a b c d e f"]])
    bp = math.exp(1 - 6 / 5)
    assert multibleu_line(s) == f"{100 * bp:.2f}, 100.0/100.0/100.0/100.0 (BP={bp:.3f}, ratio=0.833, hyp_len=5, ref_len=6)"


def test_tokenized_text_with_escaped_quotes_is_not_tokenized_again(tmp_path, capsys):
    """Moses-tokenized text (``&apos;s``, ``&quot;``) scored with --tokenized: its own
    whitespace tokens, as multi-bleu.perl counts them (by hand below), not 13a-tokenized
    again (``&apos;s`` -> ``& apos ; s``), which gives another figure."""
    hyp = write(tmp_path / "hyp.tok.en", "the cat &apos;s toy is &quot; red &quot; .\n")
    ref = write(tmp_path / "ref.tok.en", "the cat &apos;s ball is &quot; red &quot; .\n")
    # 9 tokens each, only "toy"/"ball" differ (token 4): 1-grams 8/9; 2-grams 6/8 (not
    # "&apos;s toy", "toy is"); 3-grams 4/7 (three contain "toy"); 4-grams 2/6 (four do); BP 1
    expected = 100 * math.exp(sum(math.log(p) for p in (8 / 9, 6 / 8, 4 / 7, 2 / 6)) / 4)
    rc, out, err = score_cli(["bleu", "--tokenized", "--hyp", hyp, "--ref", ref], capsys)
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first.startswith(f"BLEU (tokenized, multi-bleu.perl) = {expected:.2f}, 88.9/75.0/57.1/33.3 "), first
    assert "hyp_len=9, ref_len=9)" in first
    # the same text 13a-tokenized first: other tokens, another score
    rc, out, err = score_cli(["bleu", "--pretokenize", "13a", "--hyp", hyp, "--ref", ref], capsys)
    assert rc == 0 and "hyp_len=9," not in out and f"= {expected:.2f}," not in out, out


def test_pretokenize_moses(tmp_path, capsys):
    from fairseq_docctx.evaluation.bleu import pretokenizer

    tok = pretokenizer("moses")
    assert tok("don't") == "don &apos;t"
    assert tok('a "b" & c.') == "a &quot; b &quot; &amp; c ."
    assert pretokenizer("moses-aggressive")("well-known") == "well @-@ known"
    hyp = write(tmp_path / "h.txt", "I don't know.\n")
    ref = write(tmp_path / "r.txt", "I don't know.\n")
    rc, out, err = score_cli(["bleu", "--tokenized", "--hyp", hyp, "--ref", ref], capsys)
    assert rc == 0 and "hyp_len=3," in out and "|pretok:none" in out  # I / don't / know.
    rc, out, err = score_cli(["bleu", "--pretokenize", "moses", "--hyp", hyp, "--ref", ref,
                              "--json", tmp_path / "r.json"], capsys)
    assert rc == 0 and "hyp_len=5," in out and "|pretok:moses-en" in out  # I / don / &apos;t / know / .
    assert set(json.loads((tmp_path / "r.json").read_text())["metrics"]) == {"bleu_tok"}
    rc, _, err = score_cli(["bleu", "--pretokenize", "nosuch", "--hyp", hyp, "--ref", ref], capsys)
    assert rc == 2 and "--pretokenize nosuch: unknown tokenizer" in err


# ------------------------------------------------------------------------------------------
# METEOR 1.5


def _jar():
    pytest.importorskip("pycocoevalcap", reason="METEOR 1.5's jar comes with pycocoevalcap (make meteor)")
    if shutil.which("java") is None:
        pytest.skip("METEOR 1.5 needs a Java runtime (make meteor)")
    from fairseq_docctx.evaluation.meteor import find_meteor_jar

    return find_meteor_jar()


def _jar_final(jar, hyp, ref, *options):
    out = subprocess.run(["java", "-Xmx2G", "-jar", jar, str(hyp), str(ref), *options], capture_output=True,
                         text=True, check=True).stdout
    return float(re.search(r"^Final score:\s+(\S+)$", out, re.M).group(1)), out


def test_meteor_15_german_is_the_jars_exact_stem_score_labelled(tmp_path, capsys):
    jar = _jar()
    hyp = write(tmp_path / "h.de", "Die Katze saß auf der Matte.\nEr liest Bücher.\n")
    ref = write(tmp_path / "r.de", "Die Katze sitzt auf der Matte.\nEr las ein Buch.\n")
    docs = write(tmp_path / "r.docids", "d1\nd2\n")
    final, out = _jar_final(jar, hyp, ref, "-l", "de", "-norm", "-m", "exact stem")
    seg = [float(x) for x in re.findall(r"^Segment \d+ score:\s+(\S+)$", out, re.M)]
    rc, text, err = score_cli(["meteor", "--meteor", "1.5", "-l", "de", "--hyp", hyp, "--ref", ref, "--docids", docs,
                               "--per-document", "--json", tmp_path / "m.json"], capsys)
    assert rc == 0, err
    assert text.startswith(f"METEOR 1.5 = {100 * final:.2f}  (METEOR 1.5, exact + stem (no German paraphrase table)")
    m = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert set(m) == {"meteor-1.5-exact-stem"}
    r = m["meteor-1.5-exact-stem"]
    assert r["score"] == pytest.approx(100 * final)
    assert r["per_document"] == {"d1": pytest.approx(100 * seg[0]), "d2": pytest.approx(100 * seg[1])}
    assert r["modules"] == ["exact", "stem"] and r["eval_id"].startswith("meteor-1.5-wo-de-norm-")
    # a jar that is not there: a clear error
    rc, _, err = score_cli(["meteor", "--meteor", "1.5", "--meteor-jar", tmp_path / "no.jar", "--hyp", hyp, "--ref", ref],
                           capsys)
    assert rc == 2 and "--meteor-jar: no such file" in err


@pytest.mark.slow  # the English paraphrase table loads for about 10 s: make test-all
def test_meteor_15_english_default_modules_two_references(tmp_path, capsys):
    jar = _jar()
    hyp = write(tmp_path / "h.en", "the cat was sitting on the mat .\nhe reads books\n")
    ref = write(tmp_path / "r.en", "the cat sat on the mat .\nhe is reading a book\n")
    ref2 = write(tmp_path / "r2.en", "a cat sat on a mat .\nhe reads a book\n")
    both = write(tmp_path / "both.en", "".join(a + b for a, b in zip(ref.read_text().splitlines(True),
                                                                      ref2.read_text().splitlines(True))))
    final, _ = _jar_final(jar, hyp, both, "-l", "en", "-norm", "-r", "2")
    rc, text, err = score_cli(["meteor", "--meteor", "1.5", "--hyp", hyp, "--ref", ref, "--ref", ref2,
                               "--json", tmp_path / "m.json"], capsys)
    assert rc == 0, err
    m = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert set(m) == {"meteor-1.5"} and m["meteor-1.5"]["score"] == pytest.approx(100 * final)
    assert "exact + stem + synonym + paraphrase" in text


# ------------------------------------------------------------------------------------------
# the recipes' Meteor columns


@pytest.mark.parametrize("recipe", ["ted-ende", "nc-ende", "europarl-ende"])
def test_recipes_put_the_papers_meteor_beside_no_incomparable_column(recipe, tmp_path, capsys):
    """Yang et al. (2019) report Meteor without its version or options; the recipes score nltk's
    METEOR (``meteor``) and METEOR 1.5 without German paraphrases (``meteor-1.5-exact-stem``):
    neither column gets the paper's figure beside it; it is listed under the table."""
    run = {"run": "qcn", "files": {}, "metrics": {
        "bleu_tok": {"score": 20.0, "signature": "S"}, "meteor": {"score": 40.0},
        "meteor-1.5-exact-stem": {"score": 30.0}}}
    write(tmp_path / "qcn.json", json.dumps(run))
    tsv = REPO / "examples" / recipe / "paper-scores.tsv"
    rc, out, err = score_cli(["table", tmp_path / "qcn.json", "--metrics", "bleu_tok,meteor,meteor-1.5-exact-stem",
                              "--paper-scores", tsv], capsys)
    assert rc == 0, err
    head = next(ln for ln in out.splitlines() if ln.startswith("| run |"))
    assert "bleu_tok, paper" in head and "meteor, paper" not in head and "meteor-1.5-exact-stem, paper" not in head
    paper_meteor = [ln.split("\t") for ln in tsv.read_text().splitlines()
                    if ln.startswith("qcn\t") and "meteor" in ln.split("\t")[1]]
    assert paper_meteor and all(f"{float(p[2]):.2f} ({p[3]})" in out for p in paper_meteor)
