"""docctx-score contrastive / cxmi / plot: test-set readers on real and faithfully formatted
files, batched contrastive scoring with a tiny model trained on the real Bawden et al. data,
CXMI on the context probe (shared probe fixtures), attention/gate plots."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, TINY_MODEL, run
from fairseq_docctx.evaluation import contrastive as C
from fairseq_docctx.models.document_context import sample_for_model


def _write(path, lines):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# ------------------------------------------------------------------------ readers
@pytest.fixture(scope="module")
def bawden_dir(shared_data):
    return shared_data / "bawden-enfr" / "test-sets"


def test_bawden_real_files(bawden_dir):
    ana = C.read_bawden(str(bawden_dir / "anaphora"), "en", "fr")
    assert len(ana) == 200 and all(len(e.candidates) == 2 and e.correct == 0 for e in ana)
    e = ana[0]
    assert e.source == "Soon they will be full of new residents."
    assert e.source_context == ["The buildings will be finished next week."]
    assert e.candidates[0].target.startswith("Ils seront") and e.candidates[1].target.startswith("Elles seront")
    assert e.candidates[0].target_context == ["Les bâtiments seront terminés la semaine prochaine."]
    assert {x.distance for x in ana} == {1} and {x.phenomenon for x in ana} == {"anaphora"}
    # the fine types come from anaphora.json (50 examples of each)
    assert {t: sum(x.category == t for x in ana) for t in ("m.sg", "f.sg", "m.pl", "f.pl")} == \
        {"m.sg": 50, "f.sg": 50, "m.pl": 50, "f.pl": 50}
    lex = C.read_bawden(str(bawden_dir / "lexical_choice"), "en", "fr")
    assert len(lex) == 200 and {x.category for x in lex} >= {"repet", "disambig"}
    assert lex[0].source == "Is this crazy?" and lex[0].candidates[1].target == "Est-ce que ça c'est fou ?"
    assert C.detect_format(str(bawden_dir / "anaphora")) == "bawden"


def test_bawden_errors(tmp_path, bawden_dir):
    for k in ("prev.en", "current.en", "prev.fr", "current.fr"):
        lines = (bawden_dir / f"anaphora.{k}").read_text(encoding="utf-8").splitlines()[:6]
        if k == "current.en":
            lines[3] = "A different source sentence."
        _write(tmp_path / f"bad.{k}", lines)
    with pytest.raises(C.ContrastiveFormatError, match=r"bad\.current\.en:4: "):
        C.read_bawden(str(tmp_path / "bad"), "en", "fr")
    _write(tmp_path / "bad.prev.fr", ["x"] * 5)
    with pytest.raises(C.ContrastiveFormatError, match="line counts do not match.*bad.prev.fr: 5 lines"):
        C.read_bawden(str(tmp_path / "bad"), "en", "fr")


def _contrapro_files(d: Path):
    """Two ContraPro examples (fields as in contrapro.json) and the files
    json2text_and_context.pl writes with --context 2 (K=2 lines per text line, farthest
    first; the second example starts its document: empty farthest context line)."""
    data = [
        {"document id": "1980/123_de.xml", "segment id": 57, "src segment": "I know it is here.",
         "ref segment": "Ich weiß, dass er hier ist.", "src pronoun": "it", "ref pronoun": "er",
         "ante distance": 2, "intrasegmental": False, "src ante phrase": "the key", "ref ante phrase": "der Schlüssel",
         "errors": [{"contrastive": "Ich weiß, dass sie hier ist.", "replacement": "sie"},
                    {"contrastive": "Ich weiß, dass es hier ist.", "replacement": "es"}]},
        {"document id": "1980/456_de.xml", "segment id": 2, "src segment": "Where is it?",
         "ref segment": "Wo ist sie?", "src pronoun": "it", "ref pronoun": "sie", "ante distance": 1,
         "intrasegmental": False, "errors": [{"contrastive": "Wo ist er?", "replacement": "er"}]},
    ]
    (d / "contrapro.json").write_text(json.dumps(data), encoding="utf-8")
    _write(d / "contrapro.text.en", ["I know it is here."] * 3 + ["Where is it?"] * 2)
    _write(d / "contrapro.text.de", ["Ich weiß, dass er hier ist.", "Ich weiß, dass sie hier ist.",
                                     "Ich weiß, dass es hier ist.", "Wo ist sie?", "Wo ist er?"])
    _write(d / "contrapro.context.en", ["Where is the key?", "Look around."] * 3 + ["", "I lost my bag."] * 2)
    _write(d / "contrapro.context.de", ["Wo ist der Schlüssel?", "Schau dich um."] * 3 + ["", "Ich habe meine Tasche verloren."] * 2)
    return d / "contrapro.json"


def test_contrapro(tmp_path):
    path = _contrapro_files(tmp_path)
    assert C.detect_format(str(path)) == "contrapro"
    ex = C.load_examples(str(path), "auto", "en", "de")
    assert [len(e.candidates) for e in ex] == [3, 2]
    assert ex[0].source_context == ["Where is the key?", "Look around."]
    assert ex[0].candidates[2].target == "Ich weiß, dass es hier ist."
    assert ex[0].candidates[1].target_context == ["Wo ist der Schlüssel?", "Schau dich um."]
    assert ex[1].source_context == ["I lost my bag."]  # empty farthest line: document start
    assert [e.distance for e in ex] == [2, 1] and [e.category for e in ex] == ["it:er", "it:sie"]
    _write(tmp_path / "contrapro.text.de", ["x"] * 4)
    with pytest.raises(C.ContrastiveFormatError, match="contrapro.text.de: 4 lines, but .* has 5 candidates"):
        C.load_examples(str(path), "contrapro", "en", "de")


def _voita_files(d: Path):
    """A Voita et al. consistency set: JSON (context _eos-joined, per-candidate target
    context, true_ind, ctx_dist) and its scoring_data/ .src/.dst files."""
    src = "Are you coming ? _eos Maybe . _eos I do not know . _eos Do you want to ?"
    g1 = ["Ты идешь ? _eos Может быть . _eos Я не знаю . _eos Ты хочешь ?",
          "Ты идешь ? _eos Может быть . _eos Я не знаю . _eos Вы хотите ?"]
    g2 = ["Вы идете ? _eos Может быть . _eos Я не знаю . _eos Вы хотите ?",
          "Вы идете ? _eos Может быть . _eos Я не знаю . _eos Ты хочешь ?",
          "Вы идете ? _eos Может быть . _eos Я не знаю . _eos Тебе хочется ?"]
    data = [{"dst": g1, "true_ind": 0, "src": src, "ctx_dist": 3},
            {"dst": g2, "true_ind": 0, "src": src, "ctx_dist": 3}]
    (d / "deixis_test.json").write_text(json.dumps(data, ensure_ascii=True), encoding="utf-8")
    _write(d / "scoring_data" / "deixis_test.src", [src] * 5)
    _write(d / "scoring_data" / "deixis_test.dst", g1 + g2)
    return d / "deixis_test.json", d / "scoring_data" / "deixis_test.src"


def test_voita_json_and_scoring_data(tmp_path):
    jpath, spath = _voita_files(tmp_path)
    a = C.load_examples(str(jpath))
    b = C.load_examples(str(spath))  # grouping from ../deixis_test.json
    assert [len(e.candidates) for e in a] == [2, 3] == [len(e.candidates) for e in b]
    for x, y in zip(a, b):
        assert (x.source, x.source_context, x.distance, x.phenomenon) == (y.source, y.source_context, y.distance, y.phenomenon)
        assert [(c.target, c.target_context) for c in x.candidates] == [(c.target, c.target_context) for c in y.candidates]
    e = a[1]
    assert e.source == "Do you want to ?" and len(e.source_context) == 3 and e.phenomenon == "deixis"
    assert e.candidates[0].target == "Вы хотите ?" and e.candidates[0].target_context[0] == "Вы идете ?"
    assert e.distance == 3
    lines = spath.read_text(encoding="utf-8").splitlines()
    lines[3] = "Something else ."
    _write(spath, lines)
    with pytest.raises(C.ContrastiveFormatError, match=r"deixis_test.src:4: does not match example 2"):
        C.load_examples(str(spath))


def test_voita_candidate_with_wrong_sentence_count_names_the_example(tmp_path):
    jpath, spath = _voita_files(tmp_path)
    data = json.loads(jpath.read_text(encoding="utf-8"))
    data[1]["dst"][1] = data[1]["dst"][1].split(" _eos ", 1)[1]  # one context sentence short
    jpath.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(C.ContrastiveFormatError) as e:
        C.load_examples(str(jpath))
    assert str(e.value) == (f"{jpath}: example 2, candidate 2: 3 sentences (joined by '_eos') but the "
                            "source has 4")
    dst = spath.with_suffix(".dst")
    lines = dst.read_text(encoding="utf-8").splitlines()
    lines[3] = data[1]["dst"][1]
    _write(dst, lines)
    with pytest.raises(C.ContrastiveFormatError) as e:
        C.load_examples(str(spath))
    assert str(e.value).startswith(f"{dst}:4: example 2, candidate 2: 3 sentences")


def test_lopes(tmp_path):
    p = tmp_path / "OpenSubs"
    _write(f"{p}.current.src", ["So they swam over."] * 2 + ["Is it real?"] * 2)
    _write(f"{p}.current.trg", ["Alors ils ont nagé.", "Alors elles ont nagé.", "Est-ce qu'il est réel ?",
                                "Est-ce qu'elle est réel ?"])
    _write(f"{p}.c1.context.src", ["The boys were there."] * 2 + ["Look at the diamond."] * 2)
    _write(f"{p}.c1.context.trg", ["Les garçons étaient là."] * 2 + ["Regarde le diamant."] * 2)
    _write(f"{p}.c3.context.src", ["", "Hello.", "The boys were there."] * 2 + ["", "", "Look at the diamond."] * 2)
    _write(f"{p}.c3.context.trg", ["", "Salut.", "Les garçons étaient là."] * 2 + ["", "", "Regarde le diamant."] * 2)
    assert C.detect_format(str(p)) == "lopes"
    ex = C.load_examples(str(p))  # the largest context file: c3
    assert len(ex) == 2 and [e.source_context for e in ex] == [["Hello.", "The boys were there."], ["Look at the diamond."]]
    assert ex[0].candidates[1].target == "Alors elles ont nagé." and ex[0].candidates[1].target_context[-1] == "Les garçons étaient là."
    assert C.read_lopes(str(p), context_lines=1)[0].source_context == ["The boys were there."]
    _write(f"{p}.c3.context.trg", ["x"] * 11)
    with pytest.raises(C.ContrastiveFormatError, match="line counts do not match"):
        C.read_lopes(str(p))


def test_cli_reports_bad_files(tmp_path, capsys):
    from fairseq_docctx.cli.score import build_parser

    path = _contrapro_files(tmp_path)
    _write(tmp_path / "contrapro.context.en", ["a"] * 7)
    args = build_parser().parse_args(["contrastive", str(path), "-s", "en", "-t", "de", "--path", "none.pt"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "contrastive: error:" in err and "contrapro.context.en" in err and "Traceback" not in err


# ------------------------------------------------------------ scoring (real data)
@pytest.fixture(scope="module")
def bawden_model(bawden_dir, tmp_path_factory):
    """A tiny concat_transformer (source + target context, K=1) trained for a few seconds on the
    correct pairs of the real Bawden et al. files (each pair a two-sentence document), with a
    SentencePiece model prepared by docctx-prepare."""
    root = tmp_path_factory.mktemp("bawden")
    en, fr, ids = [], [], []
    for name in ("anaphora", "lexical_choice"):
        f = {k: (bawden_dir / f"{name}.{k}").read_text(encoding="utf-8").splitlines()
             for k in ("prev.en", "current.en", "prev.fr", "current.fr")}
        for i in range(0, len(f["current.en"]), 2):
            en += [f["prev.en"][i], f["current.en"][i]]
            fr += [f["prev.fr"][i], f["current.fr"][i]]
            ids += [f"{name}-{i}"] * 2
    for ext, lines in (("en", en), ("fr", fr), ("docids", ids)):
        _write(root / "raw" / f"train.{ext}", lines)
    run(["docctx-prepare", "-s", "en", "-t", "fr", "--trainpref", root / "raw" / "train",
         "--destdir", root / "bin", "--spm-vocab-size", "400", "--joined-dictionary", "--workers", "1"])
    run(["fairseq-train", root / "bin", "--user-dir", REPO / "fairseq_docctx",
         "--task", "document_translation", "--context-size", "1", "--context-sides", "both",
         "--arch", "concat_transformer", *TINY_MODEL, "--max-tokens", "2000", "--max-epoch", "5",
         "--disable-validation", "--no-epoch-checkpoints", "--save-dir", root / "ck"])
    return {"checkpoint": str(root / "ck" / "checkpoint_last.pt"), "data": str(root / "bin")}


@pytest.mark.slow  # ~16 s: make test-all
def test_contrastive_scoring_on_bawden(bawden_model, bawden_dir):
    from fairseq_docctx.evaluation.scoring import load_scorer

    scorer = load_scorer(bawden_model["checkpoint"], data=bawden_model["data"])
    assert scorer.hub.spm is not None  # SentencePiece model found through docctx.json
    examples = C.load_examples(str(bawden_dir / "anaphora"), "auto", "en", "fr")
    docs = C.example_documents(scorer, examples)
    n_batches = sum(1 for _ in scorer.batches(docs))
    assert n_batches < len(docs) / 10  # batched across examples
    rep = C.evaluate(scorer, examples)
    scores = rep["scores"]
    assert len(scores) == 200 and all(len(s) == 2 and all(np.isfinite(s)) and max(s) < 0 for s in scores)
    # the accuracy is what the scores say
    direct = sum(s[0] > s[1] for s in scores)
    assert rep["correct"] == direct and rep["accuracy"] == pytest.approx(direct / 200)
    assert rep["by_distance"]["1"]["total"] == 200
    assert sum(v["correct"] for v in rep["by_category"].values()) == direct
    # batched scores equal scoring one candidate at a time
    one = load_scorer(bawden_model["checkpoint"], data=bawden_model["data"], batch_size=1)
    sub = examples[:12]
    alone = C.score_examples(one, sub)
    np.testing.assert_allclose(np.array(alone), np.array(scores[:12]), atol=1e-4)
    # the context is really read: another previous sentence changes the score
    moved = [C.ContrastiveExample(e.source, examples[-1].source_context, [
        C.Candidate(c.target, examples[-1].candidates[0].target_context) for c in e.candidates]) for e in sub]
    assert not np.allclose(np.array(C.score_examples(scorer, moved)), np.array(scores[:12]), atol=1e-3)
    print(f"bawden anaphora accuracy (tiny model, 5 epochs on the set itself): {rep['accuracy']:.3f}")


@pytest.mark.slow  # the Bawden model (~80 s): make test-all; --json is checked by every other subcommand's tests
def test_contrastive_cli_json(bawden_model, bawden_dir, tmp_path):
    """``--json FILE`` writes the report into FILE, as every docctx-score subcommand does."""
    out = tmp_path / "scores.txt"
    p = run(["docctx-score", "contrastive", bawden_dir / "lexical_choice", "--path", bawden_model["checkpoint"],
             "--data", bawden_model["data"], "--json", tmp_path / "run.json", "--name", "tiny",
             "--scores-out", out])
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["run"] == "tiny" and data["files"]["checkpoint"] == bawden_model["checkpoint"]
    rep = data["metrics"]["contrastive:lexical_choice"]
    s = np.array([float(x) for x in out.read_text().split()]).reshape(-1, 2)
    assert rep["examples"] == 200 and rep["correct"] == int((s[:, 0] > s[:, 1]).sum())
    assert rep["score"] == rep["accuracy"] == pytest.approx(rep["correct"] / 200)
    assert set(rep["by_phenomenon"]) == {"lexical_choice"} and "repet" in rep["by_category"]
    assert p.stdout.startswith(f"accuracy {rep['accuracy']:.4f} ({rep['correct']}/200)")


@pytest.mark.slow  # the Bawden model (~80 s): make test-all
def test_spm_model_found_through_the_manifest(bawden_model, tmp_path):
    """The SentencePiece model is the file docctx.json names, whatever its name: scoring
    and the hub find it through the manifest (no spm.model fallback to lean on)."""
    import shutil

    from fairseq_docctx.data.manifest import read_manifest, write_manifest
    from fairseq_docctx.evaluation.scoring import load_scorer
    from fairseq_docctx.hub import from_pretrained

    data = tmp_path / "bin"
    shutil.copytree(bawden_model["data"], data)
    (data / "spm.model").rename(data / "enfr-400.model")
    manifest = read_manifest(str(data))
    manifest["spm"]["model"] = "enfr-400.model"
    write_manifest(str(data), manifest)
    ckpt_dir = tmp_path / "ck"  # the checkpoint alone, away from any spm.model
    ckpt_dir.mkdir()
    shutil.copy(bawden_model["checkpoint"], ckpt_dir / "checkpoint_last.pt")
    ckpt = str(ckpt_dir / "checkpoint_last.pt")
    scorer = load_scorer(ckpt, data=str(data))
    hub = from_pretrained(ckpt, data=str(data))
    for sp in (scorer.hub.spm, hub.spm):
        assert sp is not None and sp.get_piece_size() == manifest["spm"]["vocab_size"]
    assert hub.apply_bpe("Bonjour") == " ".join(sp.encode("Bonjour", out_type=str))


# ------------------------------------------------------------------ CXMI (probe)
def test_cxmi_sentence_model_is_zero_and_context_model_positive(probe, sentence_model, concat_model):
    from fairseq_docctx.evaluation.cxmi import cxmi_split
    from fairseq_docctx.evaluation.scoring import load_scorer

    sent = cxmi_split(load_scorer(sentence_model["checkpoint"]), "test", seed=1)
    conc = cxmi_split(load_scorer(concat_model["checkpoint"]), "test", seed=1)
    print(f"CXMI sentence model {sent['cxmi']:+.4f}, concat {conc['cxmi']:+.4f} (random context "
          f"{conc['cxmi_random']:+.4f}; with context only {conc['with_context']['cxmi']:+.4f})")
    assert sent["tokens"] == conc["tokens"] > 1000
    assert abs(sent["cxmi"]) < 1e-6 and abs(sent["cxmi_random"]) < 1e-6
    assert conc["cxmi"] > 0.05 and conc["with_context"]["cxmi"] > conc["cxmi"]
    assert conc["true_vs_random"] > 0.05  # the true context helps more than a random one


# ------------------------------------------------------------------------- plots
def _check_png(path):
    from PIL import Image

    with Image.open(path) as im:
        assert im.size[0] > 200 and im.size[1] > 100


def test_plot_concat_attention(probe, concat_model, tmp_path):
    from fairseq_docctx.evaluation import plots
    from fairseq_docctx.hub import from_pretrained
    from fairseq_docctx.modules.context_concat import concat_with_context

    hub = from_pretrained(concat_model["checkpoint"])
    vals = plots.context_values(hub, "test", "2", 3)  # 4th sentence: two context sentences
    panel = vals["panels"][0]
    assert panel["row_labels"] == ["-2", "-1", "current"] and len(vals["rows"]) == 3
    v = np.array(panel["values"])
    np.testing.assert_allclose(v.sum(0), 1.0, atol=1e-5)  # all attention mass is on some sentence
    # recompute from the model: segments of the concatenation told apart by its <sep> tokens
    sample = sample_for_model(plots.sentence_sample(hub, "test", "2", 3), hub.models[0])
    ni, ctx = sample["net_input"], sample["net_input"]["context"]
    enc = hub.models[0].encoder
    cat, _ = concat_with_context(ni["src_tokens"], ctx["src_tokens"], ctx["src_index"], enc.padding_idx,
                                 enc.dictionary.eos(), enc.sep_idx, left_pad=True)
    with torch.no_grad():
        attn = hub.models[0](**ni)[1]["attn"][0][0]
    # number of <sep> at or after each position: 0 = current sentence, 1 = previous sentence
    # (its own closing <sep> included), 2 = the one before
    seg = torch.flip(torch.cumsum(torch.flip(cat[0].eq(enc.sep_idx).long(), [0]), 0), [0])
    for row, k in zip(v, (2, 1, 0)):
        np.testing.assert_allclose(row, attn[:, seg == k].sum(1).numpy(), atol=1e-5)
    plots.plot_context(vals, tmp_path / "c.png")
    _check_png(tmp_path / "c.png")


@pytest.fixture(scope="module")
def han_ckpt(toy_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("han_plot")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx",
         "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
         "--arch", "han_transformer", "--han-context-size", "2", *TINY_MODEL, "--max-tokens", "600",
         "--max-update", "15", "--no-epoch-checkpoints", "--disable-validation", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.mark.slow  # make test: QCN's routing heatmaps (tests/test_qcn.py) and the plot refusals
def test_plot_han_attention_and_gate(han_ckpt, tmp_path):
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(str(han_ckpt))
    hub.task.load_dataset("test")
    docs = hub.task.dataset("test").docs
    d = int(np.flatnonzero(docs.lengths >= 3)[0])
    from fairseq_docctx.evaluation import plots

    vals = plots.context_values(hub, "test", str(d), 2)
    titles = [p["title"].split(":")[0] for p in vals["panels"]]
    assert titles == ["encoder HAN", "encoder HAN", "decoder HAN", "decoder HAN"]
    for att, gate in zip(vals["panels"][0::2], vals["panels"][1::2]):
        a, g = np.array(att["values"]), np.array(gate["values"])
        assert att["row_labels"] == ["-2", "-1"] and a.shape == (2, len(att["columns"]))
        np.testing.assert_allclose(a.sum(0), 1.0, atol=1e-5)
        assert ((g > 0) & (g < 1)).all() and g.shape == (1, len(att["columns"]))
    # context_weights weighs what the forward pass computes: the inputs each HAN gets in
    # model(**net_input), captured, give the same weights; asking for them changes no output
    model = hub.models[0]
    sample = sample_for_model(plots.sentence_sample(hub, "test", str(d), 2), model)
    calls = []
    hans = (model.encoder.han, model.decoder.han)
    hooks = [h.register_forward_pre_hook(lambda m, a, k: calls.append((m, a, k)), with_kwargs=True) for h in hans]
    try:
        with torch.no_grad():
            model(**sample["net_input"])
    finally:
        for h in hooks:
            h.remove()
    assert [m for m, _, _ in calls] == list(hans)
    panels = model.context_weights(sample)
    assert [p["columns"] for p in panels] == ["source", "source", "target", "target"]
    for (m, a, _), att, gate in zip(calls, panels[0::2], panels[1::2]):
        with torch.no_grad():
            out, w = m(*a[:4], need_weights=True)
            torch.testing.assert_close(out, m(*a[:4]))
        T = w["sentence_attn"].size(0)
        assert att["weights"].shape == (1, 2, T) and att["row_mask"].tolist() == [[True, True]]
        torch.testing.assert_close(att["weights"][0], w["sentence_attn"][:, 0].T, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(gate["weights"][0, 0], w["gate"][:, 0], atol=1e-5, rtol=1e-4)
    out = tmp_path / "fig"
    p = run(["docctx-score", "plot", "--path", han_ckpt, "--split", "test", "--doc", str(d), "--sentence", "2",
             "--outdir", out])
    assert "context_han_transformer.png" in p.stdout
    _check_png(out / "context_han_transformer.png")
    saved = json.loads((out / "context_han_transformer.json").read_text())
    np.testing.assert_allclose(np.array(saved["panels"][0]["values"]), np.array(vals["panels"][0]["values"]), atol=1e-6)


def test_plot_keeps_its_titles_inside_the_image(toy_bin, concat_both_ckpt, tmp_path, capsys):
    """``docctx-score plot`` of a sentence with a short translation (a narrow figure) and two
    context sentences: the panel title, wider than the panel, and the suptitle are inside the
    PNG: its outermost pixels are background, no text cut at an edge."""
    from PIL import Image

    from fairseq_docctx.cli.score import build_parser

    raw = toy_bin.parent / "raw"
    ids = (raw / "test.docids").read_text().split()
    tgt = (raw / "test.tgt").read_text().splitlines()
    docs = list(dict.fromkeys(ids))
    doc, k = next((d, ids[:i + 1].count(d) - 1) for i, (d, t) in enumerate(zip(ids, tgt))
                  if ids[:i + 1].count(d) >= 3 and len(t.split()) <= 3)
    args = build_parser().parse_args(["plot", "--path", str(concat_both_ckpt), "--data", str(toy_bin),
                                      "--doc", str(docs.index(doc)), "--sentence", str(k), "--outdir", str(tmp_path)])
    assert args.func(args) == 0, capsys.readouterr().err
    values = json.loads((tmp_path / "context_concat_transformer.json").read_text())
    assert len(values["panels"][0]["columns"]) <= 4 and len(values["rows"]) == 3
    with Image.open(tmp_path / "context_concat_transformer.png") as im:
        a = np.asarray(im.convert("L"))
    for name, edge in (("left", a[:, 0]), ("right", a[:, -1]), ("top", a[0]), ("bottom", a[-1])):
        assert edge.min() == 255, f"something is drawn across the {name} edge"
