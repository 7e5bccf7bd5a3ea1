"""``docctx-score contrastive`` and ``cxmi`` with ``--engine transformers``: an export of this
plugin (tests/hf_export_fixtures.py's session fixtures) scores what its fairseq checkpoint
scores; any other transformers model (a tiny Marian, OPUS-MT's layout, built here by
examples/lib/tiny_hf_release.py) is scored on the real Bawden et al. files with its context
concatenated, by transformers' own forward pass. No network."""
import json
import random
import sys

import numpy as np
import pytest

from conftest import REPO
from test_resegment import write
from test_score_eval_setups import score_cli

pytest.importorskip("transformers")
sys.path.insert(0, str(REPO / "examples" / "lib"))


def toy_contrastive(toy_bin, root):
    """A Bawden-format test set of the toy test documents: each sentence after the first of a
    document with its previous one, the correct translation, then another sentence's."""
    raw = toy_bin.parent / "raw"
    src, tgt, ids = (raw.joinpath(f"test.{e}").read_text().splitlines() for e in ("src", "tgt", "docids"))
    rng = random.Random(0)
    files = {k: [] for k in ("prev.src", "current.src", "prev.tgt", "current.tgt")}
    for i in range(1, len(src)):
        if ids[i] != ids[i - 1]:
            continue
        wrong = tgt[rng.choice([j for j in range(len(tgt)) if tgt[j] != tgt[i]])]
        for cand in (tgt[i], wrong):
            files["prev.src"].append(src[i - 1])
            files["current.src"].append(src[i])
            files["prev.tgt"].append(tgt[i - 1])
            files["current.tgt"].append(cand)
    for k, lines in files.items():
        write(root / f"toy.{k}", lines)
    return root / "toy", len(files["current.src"]) // 2


@pytest.mark.parametrize("name", ["concat_post2", pytest.param("prenorm_concat", marks=pytest.mark.slow)])
def test_an_export_scores_what_its_checkpoint_scores(trained, toy_bin, tmp_path, capsys, name):
    """FSMT and M2M-100 classes, source and target context (K=1): the same verdicts on every
    example, the same log-probabilities to 1e-4, CXMI within 1e-4."""
    ckpt, data, folder = trained(name)
    prefix, n = toy_contrastive(toy_bin, tmp_path)
    reports = {}
    for engine, path in (("fairseq", ckpt), ("transformers", folder)):
        rc, out, err = score_cli(["contrastive", prefix, "--format", "bawden", "-s", "src", "-t", "tgt",
                                  "--path", path, "--data", data, "--engine", engine,
                                  "--json", tmp_path / f"{engine}.json", "--scores-out", tmp_path / f"{engine}.txt"],
                                 capsys)
        assert rc == 0, err
        rc, out, err = score_cli(["cxmi", "--path", path, "--data", data, "--engine", engine, "--input",
                                  toy_bin.parent / "raw" / "test", "--json", tmp_path / f"{engine}.json"], capsys)
        assert rc == 0, err
        reports[engine] = json.loads((tmp_path / f"{engine}.json").read_text())["metrics"]
    a, b = reports["fairseq"]["contrastive:toy"], reports["transformers"]["contrastive:toy"]
    assert a["examples"] == b["examples"] == n > 20
    assert a["correct"] == b["correct"] and a["verdicts"] == b["verdicts"]
    sa, sb = (np.loadtxt(tmp_path / f"{e}.txt") for e in ("fairseq", "transformers"))
    np.testing.assert_allclose(sb, sa, atol=1e-4)
    ca, cb = reports["fairseq"]["cxmi"], reports["transformers"]["cxmi"]
    assert ca["tokens"] == cb["tokens"] > 100
    for key in ("cxmi", "cxmi_random", "true_vs_random"):
        assert abs(ca[key] - cb[key]) < 1e-4, (key, ca[key], cb[key])
    assert abs(ca["cxmi"]) > 1e-3  # the context changes the scores: the check compares something
    print(f"{name}: {a['correct']}/{n} both engines; scores differ by at most {np.abs(sa - sb).max():.2e}; "
          f"CXMI {ca['cxmi']:+.6f} / {cb['cxmi']:+.6f}, true - random {ca['true_vs_random']:+.6f} / "
          f"{cb['true_vs_random']:+.6f}")


@pytest.fixture(scope="module")
def bawden_marian(shared_data, tmp_path_factory):
    """A tiny MarianMTModel with OPUS-MT's tokenizer files, its SentencePiece models learnt on
    the Bawden et al. sentences (random weights)."""
    from tiny_hf_release import opusmt_folder

    d = shared_data / "bawden-enfr" / "test-sets"
    pairs = []
    for name in ("anaphora", "lexical_choice"):
        for part in ("prev", "current"):
            pairs += list(zip((d / f"{name}.{part}.en").read_text(encoding="utf-8").splitlines(),
                              (d / f"{name}.{part}.fr").read_text(encoding="utf-8").splitlines()))
    root = tmp_path_factory.mktemp("marian")
    opusmt_folder(root, pairs)
    return root, d


def test_a_transformers_model_on_the_bawden_files(bawden_marian, tmp_path, capsys):
    """End to end on the real files: every candidate scored; at K=0 each score is
    transformers' own loss of the pair; at K=1 the previous sentence is read (another one
    changes the scores); the report's counts are the scores' verdicts; McNemar between the
    two runs."""
    import torch

    from fairseq_docctx.evaluation import contrastive as C
    from fairseq_docctx.evaluation.transformers_scoring import load_transformers_scorer

    model, d = bawden_marian
    runs = {}
    for k in ("0", "1"):
        rc, out, err = score_cli(["contrastive", d / "anaphora", "-s", "en", "-t", "fr", "--engine", "transformers",
                                  "--path", model, "--context-size", k, "--context-sides", "both",
                                  "--json", tmp_path / f"k{k}.json", "--name", f"k{k}",
                                  "--scores-out", tmp_path / f"k{k}.txt"], capsys)
        assert rc == 0, err
        runs[k] = json.loads((tmp_path / f"k{k}.json").read_text())["metrics"]["contrastive:anaphora"]
        s = np.loadtxt(tmp_path / f"k{k}.txt").reshape(-1, 2)
        assert runs[k]["examples"] == 200 and runs[k]["correct"] == int((s[:, 0] > s[:, 1]).sum())
        assert np.isfinite(s).all() and (s < 0).all()
        assert out.startswith(f"accuracy {runs[k]['accuracy']:.4f}")
    s0, s1 = np.loadtxt(tmp_path / "k0.txt"), np.loadtxt(tmp_path / "k1.txt")
    assert not np.allclose(s0, s1, atol=1e-3)
    # K=0: the candidate's log-probability is transformers' loss of the pair, times its tokens
    scorer = load_transformers_scorer(str(model), context_size=0)
    ex = C.load_examples(str(d / "anaphora"), "auto", "en", "fr")[:3]
    for e, got in zip(ex, C.score_examples(scorer, ex)):
        for c, g in zip(e.candidates, got):
            b = scorer.tokenizer(e.source, text_target=c.target, return_tensors="pt")
            with torch.no_grad():
                loss = scorer.model(**b).loss.item()
            assert g == pytest.approx(-loss * b["labels"].numel(), abs=1e-3)
    # K=1: another previous sentence, other scores
    scorer = load_transformers_scorer(str(model), context_size=1, context_sides="both")
    moved = [C.ContrastiveExample(e.source, ex[-1].source_context, [
        C.Candidate(c.target, ex[-1].candidates[0].target_context) for c in e.candidates]) for e in ex[:2]]
    assert not np.allclose(C.score_examples(scorer, moved), C.score_examples(scorer, ex[:2]), atol=1e-4)
    rc, out, err = score_cli(["contrastive", "--compare", tmp_path / "k0.json", tmp_path / "k1.json"], capsys)
    assert rc == 0 and "mcnemar" in out.lower(), (out, err)


def test_a_transformers_model_scores_cxmi_and_refuses_what_it_cannot_read(bawden_marian, tmp_path, capsys):
    model, d = bawden_marian
    en = (d / "anaphora.prev.en").read_text(encoding="utf-8").splitlines()[:40]
    fr = (d / "anaphora.prev.fr").read_text(encoding="utf-8").splitlines()[:40]
    write(tmp_path / "doc.en", en)
    write(tmp_path / "doc.fr", fr)
    write(tmp_path / "doc.docids", [f"d{i // 5}" for i in range(40)])
    rc, out, err = score_cli(["cxmi", "--engine", "transformers", "--path", model, "--context-size", "2",
                              "--input", tmp_path / "doc", "-s", "en", "-t", "fr", "--json", tmp_path / "c.json"],
                             capsys)
    assert rc == 0, err
    rep = json.loads((tmp_path / "c.json").read_text())["metrics"]["cxmi"]
    assert rep["context_size"] == 2 and rep["tokens"] > 200 and rep["cxmi"] != 0
    # no binarized split for a transformers model; -s/-t are refused for a checkpoint
    rc, out, err = score_cli(["cxmi", "--engine", "transformers", "--path", model, "-s", "en", "-t", "fr"], capsys)
    assert rc == 2 and "--input" in err and len(err.strip().splitlines()) == 1
    rc, out, err = score_cli(["cxmi", "--engine", "transformers", "--path", tmp_path / "nowhere", "--input",
                              tmp_path / "doc", "-s", "en", "-t", "fr"], capsys)
    assert rc == 2 and "transformers cannot load it" in err
    rc, out, err = score_cli(["contrastive", d / "anaphora", "-s", "en", "-t", "fr", "--path", model,
                              "--context-sides", "both"], capsys)
    assert rc == 2 and "--context-sides: an option of --engine transformers" in err


def toy_ctxpro(toy_bin, root, n=20):
    """A ctxpro evaluation set of the toy test documents (each sentence after the first with
    every earlier one of its document as context, its translation's first word expected) and
    its inputs file."""
    raw = toy_bin.parent / "raw"
    src, tgt, ids = (raw.joinpath(f"test.{e}").read_text().splitlines() for e in ("src", "tgt", "docids"))
    examples, inputs = [], []
    for k in range(1, len(src)):
        if ids[k] != ids[k - 1] or len(examples) == n:
            continue
        context = [src[j] for j in range(k) if ids[j] == ids[k]]
        examples.append({"src segment": src[k], "expected": tgt[k].split()[0], "rule": "TOY.first",
                         "document id": ids[k], "segment id": len(context) + 1, "ante distance": 1})
        inputs.append("<eos> ".join(context + [src[k]]))
    path = root / "anaphora.toy.src-tgt.test.json"
    path.write_text(json.dumps(examples), encoding="utf-8")
    write(root / "anaphora.toy.src-tgt.test", inputs)
    return path, root / "anaphora.toy.src-tgt.test"


@pytest.mark.slow  # ~20 s of translation: make test-all
def test_ctxpro_through_transformers(trained, toy_bin, bawden_marian, tmp_path, capsys):
    """An export translates the evaluation set as its checkpoint does (beam 1: the same
    translations, the same verdicts); any other transformers model translates it in document
    order with its own previous translations as the target context."""
    pytest.importorskip("ctxpro")
    ckpt, data, folder = trained("concat_post2")
    evalset, inputs = toy_ctxpro(toy_bin, tmp_path)
    got = {}
    for engine, path in (("fairseq", ckpt), ("transformers", folder)):
        rc, out, err = score_cli(["ctxpro", evalset, "--inputs", inputs, "--path", path, "--data", data, "--engine",
                                  engine, "--lang", "en", "--beam", "1", "--translations-out", tmp_path / engine,
                                  "--json", tmp_path / f"{engine}.json"], capsys)
        assert rc == 0, err
        rep = json.loads((tmp_path / f"{engine}.json").read_text())["metrics"]["ctxpro:anaphora.toy.src-tgt.test"]
        got[engine] = (rep["verdicts"], (tmp_path / engine / "anaphora.toy.src-tgt.test.txt").read_text())
    assert got["transformers"] == got["fairseq"] and len(got["fairseq"][0]) == 20
    model, _ = bawden_marian
    rc, out, err = score_cli(["ctxpro", evalset, "--inputs", inputs, "--path", model, "--engine", "transformers",
                              "--context-size", "1", "--context-sides", "both", "--lang", "en", "--beam", "2",
                              "--translations-out", tmp_path / "marian"], capsys)
    assert rc == 0, err
    lines = (tmp_path / "marian" / "anaphora.toy.src-tgt.test.txt").read_text().splitlines()
    assert len(lines) == 20 and out.startswith("anaphora (anaphora.toy.src-tgt.test.json): accuracy")
    # without --lang a transformers model's target language is unknown: one line
    rc, out, err = score_cli(["ctxpro", evalset, "--inputs", inputs, "--path", model, "--engine", "transformers"],
                             capsys)
    assert rc == 2 and "--lang" in err


def test_language_codes_stay_outside_the_scored_tokens(tmp_path):
    """NLLB's layout (a tiny M2M-100 with an NllbTokenizer): the source starts with the source
    language code, the labels with the target one (after the decoder's start), the context
    joined after the code; the score is transformers' log-probabilities of the sentence's own
    tokens and </s>, not of the code."""
    import torch

    from fairseq_docctx.evaluation.transformers_scoring import load_transformers_scorer
    from tiny_hf_release import nllb_folder

    pairs = [("the cat sleeps .", "le chat dort ."), ("it is big .", "il est grand ."),
             ("we went home .", "nous sommes rentrés .")] * 20
    nllb_folder(tmp_path, pairs)
    scorer = load_transformers_scorer(str(tmp_path), context_size=1, context_sides="both",
                                      src_lang="eng_Latn", tgt_lang="fra_Latn")
    tok = scorer.tokenizer
    eng, fra, eos = (tok.convert_tokens_to_ids(t) for t in ("eng_Latn", "fra_Latn", "</s>"))
    doc = ([scorer.encode_source(s) for s in ("the cat sleeps .", "it is big .")],
           [scorer.encode_target(t) for t in ("le chat dort .", "il est grand .")])
    source, decoder, scored = scorer.row(doc)
    ctx_src, cur_src = doc[0][0].tolist(), doc[0][1].tolist()
    assert source == [eng] + ctx_src + [eos] + cur_src + [eos]  # the separator: the tokenizer's </s>
    ctx_tgt, cur_tgt = doc[1][0].tolist(), doc[1][1].tolist()
    assert decoder == [scorer.start, fra] + ctx_tgt + [eos] + cur_tgt and scored == cur_tgt + [eos]
    (lp,) = scorer.score_documents([doc])
    with torch.no_grad():
        logits = scorer.model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder])).logits
    direct = torch.log_softmax(logits[0], -1)[torch.arange(len(decoder) - len(scored), len(decoder)),
                                              torch.tensor(scored)]
    np.testing.assert_allclose(lp.token_logprobs, direct.numpy(), atol=1e-5)
