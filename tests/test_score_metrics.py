"""docctx-score: input reading, BLEU, METEOR, discourse metrics, the summary table.

Expected values are computed by hand in the comments/arithmetic next to each assertion (not
by calling the function under test). WordNet must be installed (`make wordnet`, a
prerequisite of `make test`)."""
import json
import math
import re

import numpy as np
import pytest
import sacrebleu

from conftest import REPO, SHARED_DATA, run
from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.evaluation import discourse, io, summary
from fairseq_docctx.evaluation.bleu import bleu_scores
from fairseq_docctx.evaluation.io import Corpus, ScoreInputError, load_corpus


def score_cli(argv, capsys):
    args = build_parser().parse_args(argv)
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def wordnet():
    from fairseq_docctx.evaluation.wordnet import WordNetMissing, load_wordnet

    try:
        return load_wordnet()
    except WordNetMissing as e:
        pytest.fail(str(e))


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# input formats


def test_reference_formats_and_plain_hypotheses(tmp_path):
    hyp = write(tmp_path / "hyp.txt", "a\n\nc\nd\n")  # an empty translation on line 2
    docs = [["A x", "B y"], ["C z", "D w"]]
    # docids
    ref = write(tmp_path / "ref.de", "".join(s + "\n" for d in docs for s in d))
    write(tmp_path / "ref.docids", "t1\nt1\nt2\nt2\n")
    c = load_corpus(str(hyp), str(ref))
    assert c.doc_ids == ["t1", "t2"] and c.hyp == [["a", ""], ["c", "d"]] and c.ref == docs
    # blank-line separated, <d> markers (CRLF), XML
    write(tmp_path / "b.de", "A x\nB y\n\nC z\nD w\n")
    write(tmp_path / "m.de", "<d>\r\nA x\r\nB y\r\n<d>\r\nC z\r\nD w\r\n")
    write(tmp_path / "x.xml", '<refset><doc docid="t1"><seg id="1">A x</seg><seg id="2">B y</seg></doc>\n'
          '<doc docid="t2"><seg id="1">C z</seg>\n<seg id="2">D &amp; w</seg></doc></refset>\n')
    for f, ids in (("b.de", ["b.de:1", "b.de:2"]), ("m.de", ["m.de:1", "m.de:2"]), ("x.xml", ["t1", "t2"])):
        c = load_corpus(str(hyp), str(tmp_path / f))
        assert c.doc_ids == ids and c.hyp == [["a", ""], ["c", "d"]], f
    assert c.ref[1] == ["C z", "D & w"]
    # hypotheses with their own document ids must agree with the reference's
    write(tmp_path / "hyp2.txt", "a\nb\nc\nd\n")
    write(tmp_path / "hyp2.docids", "t1\nt2\nt2\nt2\n")
    with pytest.raises(ScoreInputError, match=r"hyp2\.txt:1: document 1 \('t1'\) has 1 sentences here but 2 in .*ref\.de"):
        load_corpus(str(tmp_path / "hyp2.txt"), str(ref))


def test_count_mismatch_names_the_files(tmp_path, capsys):
    ref = write(tmp_path / "ref.de", "A\nB\nC\n")
    write(tmp_path / "ref.docids", "d\nd\nd\n")
    hyp = write(tmp_path / "hyp.txt", "a\nb\n")
    with pytest.raises(ScoreInputError, match=r"hyp\.txt has 2 sentences but the documents of .*ref\.docids have 3"):
        load_corpus(str(hyp), str(ref))
    rc, out, err = score_cli(["bleu", "--hyp", str(hyp), "--ref", str(ref)], capsys)
    assert rc == 2 and "docctx-score bleu: error:" in err and "hyp.txt" in err and "ref.docids" in err
    # an empty reference sentence is an error with its file and line
    bad = write(tmp_path / "bad.de", "A\n   \nC\n")
    write(tmp_path / "bad.docids", "d\nd\nd\n")
    rc, out, err = score_cli(["bleu", "--hyp", str(write(tmp_path / "h3.txt", "a\nb\nc\n")), "--ref", str(bad)], capsys)
    assert rc == 2 and "bad.de:2:" in err
    # no document structure anywhere
    with pytest.raises(ScoreInputError, match="no document structure"):
        load_corpus(str(hyp), str(write(tmp_path / "plain.de", "A\nB\n")))


def test_data_that_is_not_a_prepared_directory_is_one_line(tmp_path, capsys):
    """--data names a folder that does not exist, or one docctx-prepare did not write: one
    line saying so, not "expected one document index ... found 0"."""
    gen = write(tmp_path / "gen.out", "S-0\ta\nH-0\t-0.1\ta\nS-1\tb\nH-1\t-0.1\tb\n")
    ref = write(tmp_path / "ref.de", "a\nb\n")
    write(tmp_path / "ref.docids", "d\nd\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "prepared").mkdir()
    write(tmp_path / "prepared" / "docctx.json", "{}\n")
    write(tmp_path / "prepared" / "valid.en-de.docs", "d 2\n")
    for data, what in ((tmp_path / "nonexist", f"--data {tmp_path / 'nonexist'}: no such directory"),
                       (tmp_path / "empty", f"--data {tmp_path / 'empty'}: no docctx.json and no test.SRC-TGT.docs: "
                                            "not a data directory of docctx-prepare"),
                       (tmp_path / "prepared", f"--data {tmp_path / 'prepared'}: no document index test.SRC-TGT.docs")):
        for argv in (["bleu", "--hyp", gen, "--ref", ref], ["compare", "--baseline", gen, "--hyp", gen, "--ref", ref, "--names", "a,b"]):
            rc, out, err = score_cli([str(a) for a in argv] + ["--data", str(data)], capsys)
            lines = err.strip().splitlines()
            assert rc == 2 and len(lines) == 1 and what in lines[0] and "expected one" not in err, (argv, err)
    # plain-text hypotheses do not read --data, but a missing folder is still named
    rc, out, err = score_cli(["bleu", "--hyp", str(ref), "--ref", str(ref), "--data", str(tmp_path / "nonexist")],
                             capsys)
    assert rc == 2 and "no such directory" in err


def test_xml_hypotheses_empty_translation_and_extra_docid(tmp_path, capsys):
    """What docctx-translate writes for an empty translation (``<seg id="2"></seg>``) is
    scored as an empty hypothesis; a hypothesis document the reference lacks is reported
    at the line of its <doc>."""
    ref = write(tmp_path / "ref.xml", '<refset setid="t" trglang="de">\n<doc docid="t1">\n<seg id="1">A x</seg>\n'
                '<seg id="2">B y</seg>\n</doc>\n</refset>\n')
    hyp = write(tmp_path / "hyp.xml", '<tstset setid="t" trglang="de">\n<doc docid="t1" sysid="s">\n'
                '<seg id="1">A x</seg>\n<seg id="2"></seg>\n</doc>\n</tstset>\n')
    c = load_corpus(str(hyp), str(ref))
    assert c.hyp == [["A x", ""]] and c.ref == [["A x", "B y"]]
    rc, out, err = score_cli(["bleu", "--hyp", str(hyp), "--ref", str(ref)], capsys)
    assert rc == 0, err
    extra = write(tmp_path / "extra.xml", hyp.read_text().replace(
        "</tstset>", '<doc docid="t9" sysid="s">\n<seg id="1">z</seg>\n</doc>\n</tstset>'))
    rc, out, err = score_cli(["bleu", "--hyp", str(extra), "--ref", str(ref)], capsys)
    assert rc == 2 and f"{extra}:6: docid 't9' is in {extra} but not in {ref}" in err, err


def test_model_subcommands_write_json_file(tmp_path, toy_bin, concat_both_ckpt, capsys):
    """cxmi, like every docctx-score subcommand, writes its results with ``--json FILE``."""
    out = tmp_path / "run.json"
    rc, text, err = score_cli(["cxmi", "--path", str(concat_both_ckpt), "--data", str(toy_bin),
                               "--json", str(out), "--name", "concat"], capsys)
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["run"] == "concat" and data["files"]["split"] == "test"
    rep = data["metrics"]["cxmi"]
    assert rep["score"] == rep["cxmi"] and f"CXMI (true - none)       {rep['cxmi']:+.4f}" in text
    # the table reads it like any other run
    rc, text, err = score_cli(["table", str(out)], capsys)
    assert rc == 0 and "cxmi" in text.splitlines()[0]


GEN = """S-1\tw1 w2
T-1\tW1 W2
H-1\t-0.5\t\u2581Das \u2581ist\u2581gut
D-1\t-0.5\t\u2581Das \u2581ist\u2581gut
P-1\t-0.1 -0.2
H-1\t-0.9\t\u2581zweit beste
D-1\t-0.9\t\u2581zweit beste
H-0\t-0.4\t\u2581Hallo \u2581Welt
D-0\t-0.4\t\u2581Hallo \u2581Welt
H-2\t-0.3
D-2\t-0.3
Generate test with beam=2: BLEU4 = 0.00
"""


def test_generate_output_nbest_order_and_sentencepiece(tmp_path):
    gen = write(tmp_path / "gen.out", GEN)
    sents, lines = io.read_generate_output(str(gen))
    # id order, the first of the --nbest lines of id 1, SentencePiece undone, id 2 empty
    # fairseq's sentencepiece post-processing: drop the spaces, then "▁" -> " "
    assert sents == ["Hallo Welt", "Das ist gut", ""]
    assert lines == [9, 4, 11]
    assert io.read_generate_output(str(gen), "none")[0][0] == "\u2581Hallo \u2581Welt"
    data = tmp_path / "bin"
    data.mkdir()
    write(data / "test.en-de.docs", "talkA\t2\ntalkB\t1\n")
    c = load_corpus(str(gen), data=str(data))
    assert c.doc_ids == ["talkA", "talkB"] and c.hyp == [["Hallo Welt", "Das ist gut"], [""]]
    # a missing id is an error naming the file
    write(tmp_path / "gap.out", GEN.replace("H-0", "X-0").replace("D-0", "X-0"))
    with pytest.raises(ScoreInputError, match=r"gap\.out: sentence ids 0\.\.2 but 1 missing, first D-0"):
        io.read_generate_output(str(tmp_path / "gap.out"))
    write(data / "test.en-de.docs", "talkA\t2\ntalkB\t2\n")
    with pytest.raises(ScoreInputError, match=r"gen\.out has 3 sentences but the documents of .*test\.en-de\.docs have 4"):
        load_corpus(str(gen), data=str(data))


def test_real_fairseq_generate_output(tmp_path, toy_bin, concat_both_ckpt, capsys):
    p = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
             "--path", concat_both_ckpt, "--beam", "2", "--nbest", "2", "--max-tokens", "200",
             "--max-len-b", "12"])
    gen = write(tmp_path / "gen.out", p.stdout)
    index = [l.split("\t") for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines()]
    n = sum(int(k) for _, k in index)
    first = {}
    for m in re.finditer(r"^D-(\d+)\t\S+\t(.*)$", p.stdout, re.M):
        first.setdefault(int(m.group(1)), m.group(2).strip())
    refs = {}
    for m in re.finditer(r"^T-(\d+)\t(.*)$", p.stdout, re.M):
        refs[int(m.group(1))] = m.group(2).strip()
    assert len(first) == n
    c = load_corpus(str(gen), data=str(toy_bin))
    assert c.doc_ids == [d for d, _ in index] and [len(d) for d in c.hyp] == [int(k) for _, k in index]
    assert c.flat("hyp") == [first[i] for i in range(n)]
    # scored against the references of the T- lines, in docids format
    write(tmp_path / "ref.tgt", "".join(refs[i] + "\n" for i in range(n)))
    write(tmp_path / "ref.docids", "".join((d + "\n") * int(k) for d, k in index))
    rc, out, _ = score_cli(["bleu", "--hyp", str(gen), "--ref", str(tmp_path / "ref.tgt"), "--data", str(toy_bin),
                            "--json", str(tmp_path / "run.json")], capsys)
    assert rc == 0
    expected = sacrebleu.corpus_bleu([first[i] for i in range(n)], [[refs[i] for i in range(n)]]).score
    assert json.loads((tmp_path / "run.json").read_text())["metrics"]["bleu"]["score"] == pytest.approx(expected)
    assert "signature: BLEU|nrefs:1|case:mixed|eff:no|tok:13a" in out


# ------------------------------------------------------------------------------------------
# BLEU


def two_doc_corpus():
    return Corpus(doc_ids=["d1", "d2"], hyp=[["the cat sat on the mat"], ["a b c d"]],
                  ref=[["the cat sat on a mat"], ["a b c d"]])


def test_several_reference_files_lowercased_under_a_test_set_name(tmp_path, capsys):
    """NIST-style scoring: case-insensitive BLEU against four references, each in its own
    file (--ref once per file), the score stored under the test set's name."""
    refs = [["The cat sat on the mat today", "A dog ran in the park"],
            ["The cat was sitting on the mat", "Some dog ran through the big park"],
            ["A cat sat on a mat", "The dog was running in the park"],
            ["There is a cat on the mat", "A dog is running in a park"]]
    hyp = ["the cat was sitting on the mat", "a dog is running in a park"]
    files = []
    for k, r in enumerate(refs):
        files.append(write(tmp_path / f"mt06.ref{k}.sgm", f'<refset setid="mt06" refid="ref{k}">\n<doc docid="d1">\n'
                           + "".join(f'<seg id="{i + 1}">{s}</seg>\n' for i, s in enumerate(r)) + "</doc>\n</refset>\n"))
    h = write(tmp_path / "hyp.txt", "\n".join(hyp) + "\n")
    argv = ["bleu", "--hyp", str(h), "--lowercase", "--metric-name", "mt06", "--json", str(tmp_path / "r.json")]
    rc, out, err = score_cli(argv + sum((["--ref", str(f)] for f in files), []), capsys)
    assert rc == 0, err
    expected = sacrebleu.corpus_bleu(hyp, refs, lowercase=True)
    res = json.loads((tmp_path / "r.json").read_text())["metrics"]["mt06"]
    assert res["score"] == pytest.approx(expected.score, abs=1e-6)
    assert res["signature"].startswith("nrefs:4|case:lc|")
    # each sentence matches one reference exactly: four references score above any one alone
    assert all(res["score"] > sacrebleu.corpus_bleu(hyp, [r], lowercase=True).score + 10 for r in refs)
    bad = write(tmp_path / "bad.sgm", files[1].read_text().replace('<seg id="2">Some dog ran through the big park</seg>\n', ""))
    rc, out, err = score_cli(["bleu", "--hyp", str(h), "--ref", str(files[0]), "--ref", str(bad)], capsys)
    assert rc == 2 and "bad.sgm" in err, err
    rc, out, err = score_cli(["bleu", "--hyp", str(h), "--ref", str(files[0]), "--both", "--metric-name", "x"], capsys)
    assert rc == 2 and "--metric-name names one score: not with --both" in err


def test_bleu_hand_computed_and_per_document():
    res = bleu_scores(two_doc_corpus(), smooth_method="none")
    # d1: 1-grams 5/6 (one "the" clipped), 2-grams 3/5, 3-grams 2/4, 4-grams 1/3, BP 1
    d1 = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    # corpus: (5+4)/(6+4), (3+3)/(5+3), (2+2)/(4+2), (1+1)/(3+1), BP 1
    corpus = 100 * (9 / 10 * 6 / 8 * 4 / 6 * 2 / 4) ** 0.25
    assert d1 == pytest.approx(53.7285, abs=1e-3) and corpus == pytest.approx(68.8725, abs=1e-3)
    assert res["score"] == pytest.approx(corpus, abs=1e-6)
    assert res["per_document"] == {"d1": pytest.approx(d1, abs=1e-6), "d2": pytest.approx(100.0)}
    assert res["signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:none|version:{sacrebleu.__version__}"


def test_bleu_matches_sacrebleu_on_real_data_detok_and_tokenized(shared_data):
    from fairseq_docctx.data.readers import read_file

    base = shared_data / "maruf-ende" / "IWSLT2017" / "concatenated_en2de_test_"
    ref_docs, _ = read_file(str(base) + "de.txt")
    ref_docs = ref_docs[:3]
    # a "hypothesis": every reference sentence with its words rotated by one
    hyp = [[" ".join(s.split()[1:] + s.split()[:1]) for s in d.sentences] for d in ref_docs]
    ref = [d.sentences for d in ref_docs]
    c = Corpus(doc_ids=[d.doc_id for d in ref_docs], hyp=hyp, ref=ref)
    flat_h, flat_r = [s for d in hyp for s in d], [s for d in ref for s in d]
    res = bleu_scores(c)
    assert res["score"] == pytest.approx(sacrebleu.corpus_bleu(flat_h, [flat_r]).score)
    assert res["per_document"][c.doc_ids[1]] == pytest.approx(sacrebleu.corpus_bleu(hyp[1], [ref[1]]).score)
    # tokenized: 13a-tokenize both sides, then tokenize="none"; lowercase
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    t = Tokenizer13a()
    tok = bleu_scores(c, tokenized=True, lowercase=True)
    direct = sacrebleu.corpus_bleu([t(s) for s in flat_h], [[t(s) for s in flat_r]], tokenize="none", lowercase=True)
    assert tok["score"] == pytest.approx(direct.score) and tok["tokenized"]
    assert tok["signature"].endswith("|pretok:13a") and "tok:none" in tok["signature"] and "case:lc" in tok["signature"]


# ------------------------------------------------------------------------------------------
# METEOR


def test_meteor_hand_computed(wordnet, tmp_path, capsys):
    from fairseq_docctx.evaluation.meteor import meteor_scores

    c = Corpus(doc_ids=["d1", "d2"], hyp=[["the cat sat", "red car"], ["the car", "nothing here"]],
               ref=[["the cat sat on a mat", "red auto"], ["auto the", "completely different"]])
    res = meteor_scores(c)
    # s1: 3 exact matches, P = 3/3, R = 3/6, Fmean = P R / (0.9 P + 0.1 R) = 0.5 / 0.95,
    #     1 chunk of 3 matches: penalty = 0.5 (1/3)^3
    s1 = (0.5 / 0.95) * (1 - 0.5 * (1 / 3) ** 3)
    # s2: "red" exact + "car"~"auto" (WordNet synset car.n.01), P = R = 1, Fmean = 1,
    #     one chunk of 2 matches: penalty = 0.5 (1/2)^3
    s2 = 1 - 0.5 * (1 / 2) ** 3
    # s3: "the" exact (0->1) + "car"~"auto" (1->0): P = R = 1, 2 chunks of 2 matches:
    #     penalty = 0.5 (2/2)^3
    s3 = 1 - 0.5
    s4 = 0.0  # no match
    assert round(s1, 4) == 0.5166 and s2 == 0.9375
    assert res["per_document"]["d1"] == pytest.approx(100 * (s1 + s2) / 2)
    assert res["per_document"]["d2"] == pytest.approx(100 * (s3 + s4) / 2)
    assert res["score"] == pytest.approx(100 * (s1 + s2 + s3 + s4) / 4)  # mean of sentence scores
    # command line
    write(tmp_path / "r.txt", "the cat sat on a mat\nred auto\n")
    write(tmp_path / "r.docids", "d\nd\n")
    write(tmp_path / "h.txt", "the cat sat\nred car\n")
    rc, out, _ = score_cli(["meteor", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "r.txt")], capsys)
    assert rc == 0 and f"METEOR = {100 * (s1 + s2) / 2:.2f}" in out


def test_wordnet_lexnames_from_manual_page():
    from fairseq_docctx.evaluation.wordnet import lexnames_from_man

    cats = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}
    names = ["adj.all", "adj.pert", "adv.all", "noun.Tops"] + [f"noun.x{i}" for i in range(25)] + \
            [f"verb.y{i}" for i in range(15)] + ["adj.ppl"]
    man = ".TS\n\\fBFile Number\\fP\t\\fBName\\fP\t\\fBContents\\fP\n_\n" + "".join(
        f"{i:02d}\t{n}  \tsome text  \n" for i, n in enumerate(names)) + ".TE\n"
    lex = lexnames_from_man(man).splitlines()
    assert lex[0] == "00\tadj.all\t3" and lex[3] == "03\tnoun.Tops\t1" and lex[44] == "44\tadj.ppl\t3"
    assert all(l.split("\t")[2] == str(cats[l.split("\t")[1].split(".")[0]]) for l in lex)
    with pytest.raises(RuntimeError, match="45 lexicographer files"):
        lexnames_from_man(man.replace("44\tadj.ppl", "xx\tadj.ppl"))


def test_setup_wordnet_is_idempotent(wordnet, capsys):
    from fairseq_docctx.evaluation.wordnet import STAMP, default_dir

    import os

    installed = os.path.join(default_dir(), "corpora", "wordnet")
    if not os.path.exists(os.path.join(installed, STAMP)):
        pytest.skip("WordNet was not installed by setup-wordnet")
    rc, out, _ = score_cli(["setup-wordnet"], capsys)
    assert rc == 0 and "already installed" in out


# ------------------------------------------------------------------------------------------
# pronoun / noun accuracy


def test_grow_diag_final_and_by_hand():
    fwd = {(0, 0), (1, 1), (2, 3)}
    rev = {(0, 0), (1, 2), (2, 3), (3, 3)}
    # intersection {(0,0), (2,3)}; (1,1) and (1,2) are union neighbours of (0,0)/(2,3) with an
    # unaligned side at the time: (1,1) is added first (sorted order: neighbours of (0,0)),
    # then (1,2) (target 2 still unaligned); (3,3): neighbour of (2,3), source 3 unaligned
    assert discourse.grow_diag_final_and(fwd, rev) == {(0, 0), (1, 1), (1, 2), (2, 3), (3, 3)}
    # a link far from everything only joins two unaligned words in the final step
    assert discourse.grow_diag_final_and({(0, 0), (5, 5)}, {(0, 0)}) == {(0, 0), (5, 5)}


def test_pronoun_and_noun_accuracy_with_given_alignments(tmp_path, wordnet):
    # source / reference / hypothesis (German target), alignments written by hand
    src = ["it is red", "she sees the house", "the dog barks"]
    ref = ["es ist rot", "sie sieht das Haus", "der Hund bellt"]
    hyp = ["er ist rot", "sie sieht ein Gebäude", "bellt"]
    for name, text in (("src.en", src), ("ref.de", ref), ("hyp.de", hyp)):
        write(tmp_path / name, "".join(s + "\n" for s in text))
    write(tmp_path / "ids.docids", "a\na\nb\n")
    write(tmp_path / "ar.txt", "0-0 1-1 2-2\n0-0 1-1 2-2 3-3\n0-0 1-1 2-2\n")
    write(tmp_path / "ah.txt", "0-0 1-1 2-2\n0-0 1-1 2-2 3-3\n2-0\n")
    c = load_corpus(str(tmp_path / "hyp.de"), str(tmp_path / "ref.de"), str(tmp_path / "src.en"),
                    docids=str(tmp_path / "ids.docids"))
    res = discourse.translation_accuracy(c, "de", align_ref=str(tmp_path / "ar.txt"),
                                         align_hyp=str(tmp_path / "ah.txt"))
    # pronouns in the references: "es" (-> it -> "er": different), "sie" (-> she -> "sie": correct)
    p = res["pronoun_accuracy"]
    assert p["counts"] == {"correct": 1, "different": 1, "missing": 0, "unaligned": 0}
    assert p["score"] == pytest.approx(50.0) and p["per_document"] == {"a": pytest.approx(50.0), "b": None}
    # nouns (capitalised, not sentence-initial): "Haus" (-> house -> "Gebäude": different),
    # "Hund" (-> dog -> nothing aligned: missing); 0 of 2
    n = res["noun_accuracy"]
    assert n["counts"] == {"correct": 0, "different": 1, "missing": 1, "unaligned": 0} and n["score"] == 0.0
    # a link outside the sentence is an error with file and line
    write(tmp_path / "bad.txt", "0-0 1-1 2-2\n0-0 1-1 2-7\n0-0\n")
    with pytest.raises(ScoreInputError, match=r"bad\.txt:2: link 2-7 outside the sentence pair"):
        discourse.translation_accuracy(c, "de", align_ref=str(tmp_path / "bad.txt"), align_hyp=str(tmp_path / "ah.txt"))
    # English nouns from WordNet: "house" (noun synsets 12 >= verb 2), not "sees"/"red"... as items
    tagger = discourse.NounTagger("en")
    toks = ["she", "sees", "the", "house", "quickly"]
    assert [tagger.is_noun(toks, k) for k in range(5)] == [False, False, False, True, False]
    with pytest.raises(ScoreInputError, match="--noun-list"):
        discourse.NounTagger("fr")


def test_eflomal_aligns_a_small_synthetic_corpus():
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(20)]
    src, tgt = [], []
    for _ in range(300):
        s = [rng.choice(words) for _ in range(rng.randint(2, 7))]
        src.append(s)
        tgt.append(["x"] + [w.upper() + "z" for w in s])  # target word k+1 translates source word k
    links = discourse.eflomal_align(src, tgt)
    good = sum((i, i + 1) in a for a, s in zip(links, src) for i in range(len(s)))
    assert good / sum(len(s) for s in src) > 0.95


# ------------------------------------------------------------------------------------------
# lexical cohesion and coherence


def test_lexical_cohesion_hand_computed(wordnet):
    docs = [["The dog barked.", "The canine was red.", "A hound and the dog."], ["Nothing."]]
    res = discourse.lexical_cohesion(docs, ["en1", "en2"], "en")
    # content words of en1: dog barked canine red hound dog (6). Cohesive: canine (dog.n.01's
    # hypernym is canine.n.02), hound (shares synset cad.n.01 with dog), dog (repetition): 3/6.
    # en2: "nothing" is a function word -> no content words, left out of the mean.
    assert res["counts"] == {"repetition": 1, "synonym": 1, "hypernym/hyponym": 1, "content_words": 6}
    assert res["per_document"] == {"en1": pytest.approx(50.0), "en2": None}
    assert res["score"] == pytest.approx(50.0) and res["documents_without_content_words"] == 1
    # German: repetitions only. d1 content words: haus alt haus garten -> 1/4; d2: baum baum -> 1/2
    de = discourse.lexical_cohesion([["Das Haus ist alt.", "Ein Haus und ein Garten."], ["Baum, Baum."]],
                                    ["d1", "d2"], "de")
    assert de["per_document"] == {"d1": pytest.approx(25.0), "d2": pytest.approx(50.0)}
    assert de["score"] == pytest.approx((25.0 + 50.0) / 2) and de["micro"] == pytest.approx(100 * 2 / 6)


def test_coherence_word2vec_hand_computed(tmp_path, capsys):
    vec = write(tmp_path / "v.txt", "3 2\na 1 0\nb 0 1\nc 1 1\n")
    # doc t1: "a b" -> (0.5, 0.5); "a" -> (1, 0); "b" -> (0, 1)
    #   cos1 = 0.5 / (sqrt(0.5) * 1) = 0.70711, cos2 = 0 -> mean 0.35355
    # doc t2: one sentence -> left out; corpus = mean over t1 only
    expected = (0.5 / math.sqrt(0.5) + 0.0) / 2
    write(tmp_path / "h.txt", "a b\na .\nb\nc\n")
    write(tmp_path / "h.docids", "t1\nt1\nt1\nt2\n")
    rc, out, _ = score_cli(["coherence", "--hyp", str(tmp_path / "h.txt"), "--hyp-format", "docids",
                            "--vectors", str(vec), "--json", str(tmp_path / "run.json")], capsys)
    assert rc == 0
    r = json.loads((tmp_path / "run.json").read_text())["metrics"]["coherence"]
    assert r["score"] == pytest.approx(expected) and r["per_document"] == {"t1": pytest.approx(expected), "t2": None}
    assert r["documents_left_out"] == 1
    write(tmp_path / "bad.txt", "a 1 0\nb 0 1 2\n")
    rc, _, err = score_cli(["coherence", "--hyp", str(tmp_path / "h.txt"), "--vectors", str(tmp_path / "bad.txt")], capsys)
    assert rc == 2 and "bad.txt:2:" in err


def test_coherence_from_checkpoint_embeddings(toy_bin, concat_both_ckpt):
    import torch

    w = torch.load(concat_both_ckpt, map_location="cpu", weights_only=True)["model"]["decoder.embed_tokens.weight"].numpy()
    symbols = [l.split()[0] for l in (toy_bin / "dict.tgt.txt").read_text().splitlines()]
    row = {s: 4 + k for k, s in enumerate(symbols)}  # fairseq's 4 special symbols come first
    vec = discourse.WordVectors.from_checkpoint(str(concat_both_ckpt), str(toy_bin / "dict.tgt.txt"))
    s1, s2 = "W1 W2", "W3 QQQ"  # QQQ is not in the dictionary: skipped
    a, b = (w[row["W1"]] + w[row["W2"]]) / 2, w[row["W3"]]
    expected = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    res = discourse.coherence([[s1, s2]], ["d"], vec)
    assert res["score"] == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------------------------------
# summary table


def test_summary_table_markdown_and_json(tmp_path, capsys):
    a = {"run": "sent", "metrics": {"bleu": {"score": 20.0, "signature": "SIG"}, "meteor": {"score": 40.5}}}
    b = {"run": "ctx", "metrics": {"bleu": {"score": 21.25, "signature": "SIG"}, "coherence": {"score": 0.5}}}
    for name, r in (("a.json", a), ("b.json", b)):
        write(tmp_path / name, json.dumps(r))
    rc, out, _ = score_cli(["table", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--baseline", "sent",
                            "--json", str(tmp_path / "t.json")], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "| run | bleu | Δ | meteor | Δ | coherence | Δ |"
    assert lines[2] == "| sent | 20.00 | +0.00 | 40.50 | +0.00 | - | - |"
    assert lines[3] == "| ctx | 21.25 | +1.25 | - | - | 0.50 | - |"  # 21.25 - 20.00
    t = json.loads((tmp_path / "t.json").read_text())
    assert t["rows"][1]["delta"]["bleu"] == pytest.approx(1.25) and t["methods"]["bleu"] == ["SIG"]
    write(tmp_path / "c.json", json.dumps(a))
    rc, _, err = score_cli(["table", str(tmp_path / "a.json"), str(tmp_path / "c.json")], capsys)
    assert rc == 2 and "two runs are named 'sent'" in err
    write(tmp_path / "d.json", "{not json")
    rc, _, err = score_cli(["table", str(tmp_path / "d.json")], capsys)
    assert rc == 2 and "d.json: not valid JSON" in err


def test_summary_table_of_runs_scored_on_different_test_sets(tmp_path, capsys):
    """The run files record each score's test set: a column mixing test sets is marked (no
    baseline) or refused (a Δ against the baseline would compare two test sets)."""
    paths = []
    for name, score, n, d in (("sent", 20.0, 173, 30), ("ctx", 21.0, 173, 30), ("short", 24.0, 100, 18)):
        paths.append(str(write(tmp_path / f"{name}.json", json.dumps({"run": name, "metrics": {
            "bleu": {"score": score, "sentences": n, "documents": d},
            "chrf": {"score": 2 * score, "sentences": 173, "documents": 30}}}))))
    rc, out, _ = score_cli(["table", *paths, "--json", str(tmp_path / "t.json")], capsys)
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "| run | bleu† | chrf |" and lines[4] == "| short | 24.00 | 48.00 |"
    assert lines[-1] == ("† bleu: scored on different test sets: sent, ctx: 173 sentences / 30 documents; "
                         "short: 100 sentences / 18 documents")
    assert json.loads((tmp_path / "t.json").read_text())["test_sets"] == {"bleu": [
        {"sentences": 173, "documents": 30, "runs": ["sent", "ctx"]},
        {"sentences": 100, "documents": 18, "runs": ["short"]}]}
    rc, out, err = score_cli(["table", *paths, "--baseline", "sent"], capsys)
    assert rc == 2 and not out and err.splitlines() == [
        "docctx-score table: error: bleu: run 'short' was scored on 100 sentences / 18 documents, the baseline "
        "'sent' on 173 sentences / 30 documents: a difference between two test sets is no Δ; score the runs on "
        "one test set, or leave out --baseline"]
    rc, out, _ = score_cli(["table", *paths[:2], "--baseline", "sent"], capsys)  # one test set: no mark
    assert rc == 0 and out.splitlines()[0] == "| run | bleu | Δ | chrf | Δ |" and "†" not in out


def test_two_test_sets_of_one_size_are_two_test_sets(tmp_path, capsys):
    """Runs scored on different references and documents of the same size: the table marks the
    column and refuses a Δ (the run files record the SHA-1 of the references and document ids,
    not only the counts); a run scored again on the same test set is one test set."""
    write(tmp_path / "h.txt", "a b c\nd e f\ng h i\n")
    for k, (ref, ids) in enumerate((("a b c\nd e f\ng h i\n", "d0\nd0\nd1\n"),
                                    ("a b x\nd y f\nz h i\n", "e0\ne0\ne1\n"))):
        write(tmp_path / f"r{k}.ref", ref)
        write(tmp_path / f"r{k}.docids", ids)
        rc, _, _ = score_cli(["bleu", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / f"r{k}.ref"),
                              "--docids", str(tmp_path / f"r{k}.docids"), "--json", str(tmp_path / f"d{k}.json"),
                              "--name", f"d{k}", "--tokenized"], capsys)
        assert rc == 0
    runs = [str(tmp_path / "d0.json"), str(tmp_path / "d1.json")]
    data = [json.loads((tmp_path / f"d{k}.json").read_text())["metrics"]["bleu_tok"] for k in (0, 1)]
    assert (data[0]["sentences"], data[0]["documents"]) == (data[1]["sentences"], data[1]["documents"]) == (3, 2)
    rc, out, err = score_cli(["table", *runs, "--baseline", "d0"], capsys)
    assert rc == 2 and not out and "a difference between two test sets is no Δ" in err
    assert "3 sentences / 2 documents (references " in err
    rc, out, _ = score_cli(["table", *runs], capsys)
    assert rc == 0 and "| run | bleu_tok† |" in out
    # the same hypotheses scored again against r0 under another name: one test set
    rc, _, _ = score_cli(["bleu", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "r0.ref"),
                          "--docids", str(tmp_path / "r0.docids"), "--json", str(tmp_path / "again.json"),
                          "--name", "again", "--tokenized"], capsys)
    rc, out, _ = score_cli(["table", runs[0], str(tmp_path / "again.json"), "--baseline", "d0"], capsys)
    assert rc == 0 and "†" not in out and "+0.00" in out


@pytest.mark.parametrize("options", [[], ["--tokenized"], ["--pretokenize", "moses"]])
def test_bleu_of_two_empty_files_is_refused(tmp_path, options):
    """No sentences on either side: one line, exit 2, not BLEU 0.00 (nor a traceback)."""
    hyp, ref = write(tmp_path / "hyp.txt", ""), write(tmp_path / "ref.txt", "")
    p = run(["docctx-score", "bleu", "--hyp", hyp, "--ref", ref, *options], check=False)
    assert p.returncode == 2 and not p.stdout, (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines()[-1] == f"docctx-score bleu: error: {hyp}, {ref}: no sentences: nothing to score"


def test_json_of_several_subcommands_merges_into_one_run(tmp_path, capsys, wordnet):
    write(tmp_path / "r.txt", "the cat sat on a mat\n")
    write(tmp_path / "r.docids", "d\n")
    write(tmp_path / "h.txt", "the cat sat on the mat\n")
    out = str(tmp_path / "run.json")
    for cmd in (["bleu"], ["bleu", "--tokenized"], ["meteor"], ["cohesion", "-t", "en"]):
        rc, _, _ = score_cli(cmd + ["--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "r.txt"),
                                    "--json", out, "--name", "sys"], capsys)
        assert rc == 0
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["run"] == "sys"
    assert set(data["metrics"]) == {"bleu", "bleu_tok", "meteor", "lexical_cohesion", "lexical_cohesion_ref"}
    t = summary.summary_table([data])
    assert t["metrics"][:3] == ["bleu", "bleu_tok", "meteor"]
