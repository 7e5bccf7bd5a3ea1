"""Inference on data written by ``docctx-prepare --pretrained``: tiny models trained from scratch
(fairseq-train, a few dozen updates) on the data folders of a tiny M2M-100-style release
(SentencePiece, language tokens) and of a tiny WMT19-style release (Moses + fastBPE) ->
fairseq-generate and docctx-translate force the target language token first (a segment model:
first in every sentence of the segment), leave it out of the text, undo the segmentation, and
give one translation per sentence in order, with either engine; a sentence-level model
decoding segments of such data is refused with one line."""
import json
import re

import pytest

from conftest import REPO, TINY_MODEL, run
from test_pretrained_data import _bpe_release, _sp_release, corpus  # noqa: F401  (fixture)

#: the tiny releases' models trained and decoded through every command (~3 min of the suite):
#: make test-all; tests/test_pretrained_data.py and tests/test_pretrained_layouts.py keep the
#: releases' data and a layout's chain in make test
pytestmark = pytest.mark.slow

UPDATES = "80"
#: the updates of a model still learning where sentences end: after 40 updates the tiny
#: concat_transformer (K=2, both sides) of the M2M-100-style data (its dictionary with M2M-100's
#: 8 madeupwords) ranks EOS among the 4 best candidates right after the forced language token
#: for 11 of the 40 valid sentences at beam 4, with and without length penalty (after 30, for
#: 12 and 18, most of them translated empty; after 45, for 2 and 1; after 80, for none)
EARLY_UPDATES = "40"
SOURCE_TOKEN = {"__de__": "__en__", "[de_DE]": "[en_XX]"}


@pytest.fixture(scope="module")
def released(corpus, tmp_path_factory):  # noqa: F811
    """{family: data folder} of the tiny m2m100 and transformer (WMT19 layout) releases."""
    root = tmp_path_factory.mktemp("pretrained_infer")
    raw, _ = corpus
    out = {}
    for family, make in (("m2m100", lambda: _sp_release(corpus, root / "m2m", "m2m100")),
                         ("mbart50", lambda: _sp_release(corpus, root / "mbart50", "mbart50")),
                         ("transformer", lambda: _bpe_release(corpus, root / "wmt19"))):
        release, _ = make()
        dest = root / f"bin-{family}"
        run(["docctx-prepare", "-s", "en", "-t", "de", "--trainpref", raw / "train", "--validpref", raw / "valid",
             "--testpref", raw / "valid", "--destdir", dest, "--pretrained", release])
        out[family] = dest
    return out


def _train(data, save, arch, *extra, share=True, updates=UPDATES):
    model = [a for a in TINY_MODEL if share or a != "--share-all-embeddings"]
    run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--arch", arch, *model, "--max-tokens", "1000", "--max-update", updates, "--no-epoch-checkpoints",
         "--no-save-optimizer-state", "--save-dir", save, *extra])
    return save / "checkpoint_last.pt"


class _Lazy(dict):
    """Models trained on first use (``make test`` runs the mBART-50 model's tests in
    ``make test-all`` only: its decoding is the M2M-100 one with other tokens)."""

    def __init__(self, makers):
        super().__init__()
        self.makers = makers

    def __missing__(self, name):
        value = self[name] = self.makers[name]()
        return value


@pytest.fixture(scope="module")
def models(released, tmp_path_factory):
    """(data, checkpoint, target language token or None) by name, each trained when first asked for."""
    root = tmp_path_factory.mktemp("pretrained_models")
    m2m, mbart, wmt = released["m2m100"], released["mbart50"], released["transformer"]
    return _Lazy({
        "m2m_sentence": lambda: (m2m, _train(m2m, root / "m2m_sentence", "transformer", "--context-size", "0"),
                                 "__de__"),
        # target context from the model's own translations: decoded in document order
        "m2m_concat": lambda: (m2m, _train(m2m, root / "m2m_concat", "concat_transformer", "--context-size", "1",
                                           "--context-sides", "both"), "__de__"),
        # K=2, both sides, stopped early: EOS is often among the best candidates right after the
        # forced language token (EARLY_UPDATES)
        "m2m_concat_early": lambda: (m2m, _train(m2m, root / "m2m_concat_early", "concat_transformer",
                                                 "--context-size", "2", "--context-sides", "both",
                                                 updates=EARLY_UPDATES), "__de__"),
        "mbart_sentence": lambda: (mbart, _train(mbart, root / "mbart_sentence", "transformer",
                                                 "--context-size", "0"), "[de_DE]"),
        "wmt_sentence": lambda: (wmt, _train(wmt, root / "wmt_sentence", "transformer", "--context-size", "0",
                                             share=False), None),
        # segments of the language-token data: every sentence starts with its token
        "m2m_g": lambda: (m2m, _train(m2m, root / "m2m_g", "g_transformer", "--doc-mode", "segments",
                                      "--max-segment-tokens", "64", "--encoder-ctxlayers", "1",
                                      "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1"), "__de__"),
    })


def _generate(data, ckpt, *extra, check=True):
    return run(["fairseq-generate", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
                "--path", ckpt, "--gen-subset", "test", "--beam", "2", "--max-len-b", "20",
                "--required-batch-size-multiple", "1", "--batch-size", "16", *extra], check=check)


def _lines(text, kind):
    return {int(m.group(1)): m.group(2) for m in re.finditer(rf"^{kind}-(\d+)\t(.*)$", text, re.M)}


def _plain(line):
    return "@@" not in line and "▁" not in line and "&apos;" not in line and "&quot;" not in line


@pytest.mark.parametrize("name", [pytest.param("m2m_sentence", marks=pytest.mark.slow), "m2m_concat",
                                  pytest.param("mbart_sentence", marks=pytest.mark.slow),
                                  pytest.param("wmt_sentence", marks=pytest.mark.slow)])
def test_generate_forces_and_strips_the_language_token(name, models, corpus):  # noqa: F811
    data, ckpt, langtok = models[name]
    _, text = corpus
    n = len(text["valid"]["de"])
    out = _generate(data, ckpt).stdout
    hyps, detok, scores = _lines(out, "H"), _lines(out, "D"), _lines(out, "P")
    assert sorted(hyps) == list(range(n)) and sorted(detok) == list(range(n))  # every sentence once
    for i in range(n):
        h = hyps[i].split("\t", 1)[1]
        d = detok[i].split("\t", 1)[1]
        # the positional scores count the forced language token and </s>, the text neither
        assert len(scores[i].split()) == len(h.split()) + (2 if langtok else 1), (i, h, scores[i])
        assert not any(tok in x for tok in ("__de__", "__en__", "[de_DE]", "[en_XX]") for x in (h, d)), (i, h, d)
        assert _plain(d), (i, d)
    refs = _lines(out, "T")
    assert all(_plain(refs[i]) and "__de__" not in refs[i] and "[de_DE]" not in refs[i] for i in range(n))
    if name == "wmt_sentence":  # Moses detokenized: the reference is the raw sentence again
        assert [refs[i] for i in range(n)] == text["valid"]["de"]


@pytest.mark.slow  # ~18 s: make test-all (test_g_transformer's doc2doc run in make test)
def test_segment_model_starts_every_sentence_with_the_language_token(models, corpus):  # noqa: F811
    """g_transformer on segments of the M2M-100 data: fairseq-generate gives every test sentence
    once, each hypothesis (the P- line scores it) starting with the forced __de__ and the H-/D-
    lines without it; through the hub every sentence of a document starts with it too, and
    the raw documents come back as as many plain sentences."""
    data, ckpt, _ = models["m2m_g"]
    _, text = corpus
    n = len(text["valid"]["de"])
    out = _generate(data, ckpt, "--doc-mode", "segments").stdout
    hyps, detok, scores = _lines(out, "H"), _lines(out, "D"), _lines(out, "P")
    assert sorted(hyps) == list(range(n)) and sorted(detok) == list(range(n))
    for i in range(n):
        h, d = hyps[i].split("\t", 1)[1], detok[i].split("\t", 1)[1]
        assert "__de__" not in h and "__en__" not in h and _plain(d), (i, h, d)
        # the language token and </s> are scored beside the sentence's own tokens
        assert len(scores[i].split()) == len(h.split()) + 2, (i, h, scores[i])
    hub = _hub(data, ckpt)
    docs = [text["valid"]["en"][:3], text["valid"]["en"][3:5]]
    de = hub.tgt_dict.index("__de__")
    hypos = hub.generate_documents([[hub.encode(x) for x in doc] for doc in docs], beam=2)
    assert [len(t) for t in hypos] == [3, 2]
    assert all(int(h[0]["tokens"][0]) == de for t in hypos for h in t)
    got = hub.translate_documents(docs, beam=2)
    assert [len(t) for t in got] == [3, 2]
    assert all("__de__" not in x and _plain(x) for t in got for x in t), got


@pytest.mark.slow
def test_docctx_generate_in_processes(models):
    """docctx-generate: the documents in 2 processes give fairseq-generate's lines (the language
    token forced and left out in every shard)."""
    data, ckpt, _ = models["m2m_concat"]
    single = _generate(data, ckpt).stdout
    p = run(["docctx-generate", "--processes", "2", "--", data, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--path", ckpt, "--gen-subset", "test", "--beam", "2",
             "--max-len-b", "20", "--required-batch-size-multiple", "1", "--batch-size", "16"])

    def texts(out, kind):  # the scores differ in the last digits with the batches
        return {i: x.split("\t", 1)[1] for i, x in _lines(out, kind).items()}

    for kind in ("H", "D"):
        assert texts(p.stdout, kind) == texts(single, kind) and len(texts(single, kind)) == 40
    assert all(_plain(d) and "__de__" not in d for d in texts(p.stdout, "D").values())


def _hub(data, ckpt):
    from fairseq_docctx.hub import from_pretrained

    return from_pretrained(str(ckpt), data=str(data))


@pytest.mark.parametrize("name", ["m2m_sentence", "m2m_concat", pytest.param("mbart_sentence", marks=pytest.mark.slow)])
def test_hub_forces_the_language_token_first(name, models, corpus):  # noqa: F811
    data, ckpt, langtok = models[name]
    _, text = corpus
    hub = _hub(data, ckpt)
    src = text["valid"]["en"][:10]
    tokens = [hub.encode(s) for s in src]
    en = hub.src_dict.index(SOURCE_TOKEN[langtok])
    assert all(int(t[0]) == en and int(t[-1]) == hub.src_dict.eos() for t in tokens)
    assert hub.encode_target(text["valid"]["de"][0])[0] == hub.tgt_dict.index(langtok)
    hypos = hub.generate_documents([tokens], beam=2)[0]
    de = hub.tgt_dict.index(langtok)
    assert len(hypos) == len(src) and all(int(h[0]["tokens"][0]) == de for h in hypos)
    if name == "m2m_concat":  # the model's own translations, as context, carry the token like the references
        assert hub.task.hypothesis_context
    # docctx-score's teacher-forced references: the target token first, as the training targets
    from fairseq_docctx.evaluation.scoring import ModelScorer

    ref = ModelScorer(hub).encode_target(text["valid"]["de"][1])
    assert int(ref[0]) == de and int(ref[-1]) == hub.tgt_dict.eos()
    assert ref[1:].tolist() == hub.tgt_dict.encode_line(
        hub.task.pretrained_text.encode(text["valid"]["de"][1], "de"), add_if_not_exist=False).tolist()


def _translate(data, ckpt, tmp_path, sents, check=True):
    raw = tmp_path / "input.en"
    raw.write_text("<d>\n" + "\n".join(sents[:5]) + "\n<d>\n" + "\n".join(sents[5:]) + "\n", encoding="utf-8")
    return run(["docctx-translate", raw, "--path", ckpt, "--data", data, "--quiet", "--beam", "2", "--cpu"],
               check=check)


@pytest.mark.parametrize("name", [pytest.param("m2m_sentence", marks=pytest.mark.slow), "m2m_concat",
                                  pytest.param("wmt_sentence", marks=pytest.mark.slow)])
def test_translate_raw_text(name, models, corpus, tmp_path):  # noqa: F811
    data, ckpt, langtok = models[name]
    _, text = corpus
    src = text["valid"]["en"][:12]
    out = [x for x in _translate(data, ckpt, tmp_path, src).stdout.splitlines() if x != "<d>" and x.strip() != ""]
    assert len(out) == len(src)
    hub = _hub(data, ckpt)
    from fairseq_docctx.inference.options import TRANSLATE_DEFAULTS

    search = {k: TRANSLATE_DEFAULTS[k] for k in ("lenpen", "max_len_a", "max_len_b")}
    expected = [t for doc in hub.translate_documents([src[:5], src[5:]], beam=2, **search) for t in doc]
    assert out == expected  # one translation per sentence, in order
    for line in out:
        assert _plain(line) and "__de__" not in line and "<unk>" not in line.lower(), line
    if name == "wmt_sentence":
        # the input is Moses-tokenized and split by the codes: the release's pieces, no <unk>
        enc = hub.encode(src[0])
        assert hub.src_dict.unk() not in enc.tolist()
        assert hub.src_dict.string(enc) == " ".join(
            hub.task.pretrained_text.encode(src[0], "en").split())


def test_drafts_start_with_the_language_token(models, corpus, tmp_path):  # noqa: F811
    """docctx-drafts: every draft is a target sentence as the data binarizes them (the target
    language token first, forced in the search, </s> last), one per source sentence."""
    import shutil

    from fairseq.data import Dictionary, data_utils

    from fairseq_docctx.data.drafts import draft_prefix
    from fairseq_docctx.inference.drafter import load_draft_translator

    data, ckpt, langtok = models["m2m_sentence"]
    _, text = corpus
    work = tmp_path / "bin"
    shutil.copytree(data, work)
    run(["docctx-drafts", work, "--path", ckpt, "--splits", "valid", "--cpu", "--quiet", "--beam", "2"])
    d = Dictionary.load(str(work / "dict.de.txt"))
    drafts = data_utils.load_indexed_dataset(draft_prefix(str(work), "valid", "en", "de"), d, "mmap")
    assert len(drafts) == len(text["valid"]["en"])
    assert all(int(x[0]) == d.index(langtok) and int(x[-1]) == d.eos() for x in drafts)
    # the forced prefix reaches the search (whatever the model would have chosen first)
    translator = load_draft_translator(str(ckpt), str(work), beam=2, cpu=True)
    seen = []
    generate = translator.generator.generate

    def spy(models_, sample, **kw):
        seen.append(kw.get("prefix_tokens"))
        return generate(models_, sample, **kw)

    translator.generator.generate = spy
    enc = Dictionary.load(str(work / "dict.en.txt"))
    translator.translate([drafts[0].new_tensor([enc.index("__en__"), 10, 11, enc.eos()])])
    assert seen and seen[0] is not None and seen[0].tolist() == [[d.index(langtok)]]


def _one_line(p, prog):
    """The one error line of a refusal (fairseq's commands log INFO lines before it)."""
    err = [x for x in p.stderr.splitlines() if "error" in x.lower()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), p.stderr[-3000:]
    assert p.stderr.strip().splitlines()[-1] == err[0]
    return err[0]


def test_refusals_one_line(models, tmp_path):
    data, ckpt, _ = models["m2m_sentence"]
    # a segment decoding of data with language tokens
    line = _one_line(_generate(data, ckpt, "--doc-mode", "segments", "--context-override", check=False),
                     "fairseq-generate")
    assert "--doc-mode segments" in line and "language tokens" in line


@pytest.mark.parametrize("name", [pytest.param("m2m_concat", marks=pytest.mark.slow),
                                  pytest.param("wmt_sentence", marks=pytest.mark.slow)])
def test_ctranslate2_engine_translates_as_the_fairseq_engine(name, models, corpus, tmp_path):  # noqa: F811
    """docctx-export ctranslate2 of a model of such data carries the release's segmentation and
    record; docctx-translate --engine ctranslate2 on raw documents (the export folder as the
    data) gives the fairseq engine's translations line for line: the target language token
    forced first (M2M-100), the segmentation undone, Moses-detokenized (WMT19), in document
    order with the model's own translations as context (concat_transformer)."""
    pytest.importorskip("ctranslate2")
    data, ckpt, langtok = models[name]
    _, text = corpus
    src = text["valid"]["en"][:12]
    out_dir = tmp_path / "ct2"
    run(["docctx-export", "ctranslate2", ckpt, out_dir, "--data", data])
    record = json.loads((out_dir / "docctx-export.json").read_text())
    seg_file = record["pretrained"]["segmentation"]["file"]
    assert (out_dir / seg_file).is_file() and record["pretrained"]["langtok"]["target"] == langtok
    raw = tmp_path / "input.en"
    raw.write_text("<d>\n" + "\n".join(src[:5]) + "\n<d>\n" + "\n".join(src[5:]) + "\n", encoding="utf-8")
    common = [raw, "--quiet", "--beam", "2", "--cpu"]
    fairseq = run(["docctx-translate", *common, "--path", ckpt, "--data", data]).stdout
    ct2 = run(["docctx-translate", *common, "--path", out_dir, "--engine", "ctranslate2"]).stdout
    lines = [x for x in ct2.splitlines() if x != "<d>" and x.strip()]
    assert ct2 == fairseq and len(lines) == len(src)
    assert all(_plain(x) and "__de__" not in x for x in lines), lines


def test_record_names_the_tokens(released):
    rec = json.loads((released["m2m100"] / "docctx.json").read_text())["pretrained"]
    assert rec["langtok"] == {"source": "__en__", "target": "__de__", "placement": "prepend"}
    from fairseq_docctx.data.pretrained import PretrainedText

    t = PretrainedText.of_data(str(released["transformer"]))
    assert t.target_langtok is None and t.moses
    for raw in ("It's a well-known \"house\", isn't it?", "Don't say \"no\" (or 'yes') -- fine."):
        pieces = t.encode(raw, "en")
        assert "&quot;" in pieces and "@@" in pieces  # Moses-escaped, split by the codes
        assert t.decode(pieces, "en") == raw
    assert PretrainedText.of_data(str(released["m2m100"]) + ":/elsewhere").source_langtok == "__en__"


@pytest.mark.parametrize("search", [pytest.param({"beam": 4}, marks=pytest.mark.slow), {"beam": 4, "lenpen": 0}])
def test_ctranslate2_search_after_the_language_token_is_fairseqs(search, models, corpus, tmp_path):  # noqa: F811
    """Right after the forced language token fairseq's beam search ends every candidate among
    the ``beam`` best that is EOS (the empty translation, counted among the ``beam`` finished
    hypotheses it waits for), where CTranslate2's own search lets EOS end only the best: the
    engine decides that step as fairseq does, so the translations are fairseq's line for line
    (the early concat_transformer, K=2 with its own translations as target context, every
    valid sentence in documents of 10). The case is there: fairseq's finished hypotheses hold
    the empty translation for some sentences."""
    pytest.importorskip("ctranslate2")
    from fairseq_docctx.hub import from_exported

    data, ckpt, langtok = models["m2m_concat_early"]
    _, text = corpus
    src = text["valid"]["en"]
    docs = [src[i:i + 10] for i in range(0, len(src), 10)]
    out_dir = tmp_path / "ct2"
    run(["docctx-export", "ctranslate2", ckpt, out_dir, "--data", data])
    fairseq, ct2 = _hub(data, ckpt), from_exported(str(out_dir))
    expected = fairseq.translate_documents(docs, **search)
    assert ct2.translate_documents(docs, **search) == expected
    assert sum(len(d) for d in expected) == len(src)
    nbest = [h for d in fairseq.generate_documents([[fairseq.encode(s) for s in d] for d in docs], **search)
             for h in d]
    empty = [fairseq.tgt_dict.index(langtok), fairseq.tgt_dict.eos()]
    ended_empty = sum(any(h["tokens"].tolist() == empty for h in hyps) for hyps in nbest)
    assert ended_empty >= 5, ended_empty  # 11 measured


@pytest.mark.parametrize("name", [pytest.param("m2m_concat", marks=pytest.mark.slow),
                                  pytest.param("wmt_sentence", marks=pytest.mark.slow)])
def test_transformers_engine_translates_as_the_fairseq_engine(name, models, corpus, tmp_path):  # noqa: F811
    """docctx-export transformers of a model of such data carries the release's segmentation
    and record as the CTranslate2 export does; docctx-translate --engine transformers on raw
    documents (the export folder as the data) gives the fairseq engine's text byte for byte at
    beam 1: the target language token forced first (M2M-100), after the model's own previous
    translations (concat_transformer), the segmentation undone, Moses-detokenized (WMT19: FSMT
    with two vocabularies)."""
    pytest.importorskip("transformers")
    data, ckpt, langtok = models[name]
    _, text = corpus
    src = text["valid"]["en"][:12]
    out_dir = tmp_path / "hf"
    run(["docctx-export", "transformers", ckpt, out_dir, "--data", data])
    record = json.loads((out_dir / "docctx-export.json").read_text())
    assert (out_dir / record["pretrained"]["segmentation"]["file"]).is_file()
    raw = tmp_path / "input.en"
    raw.write_text("<d>\n" + "\n".join(src[:5]) + "\n<d>\n" + "\n".join(src[5:]) + "\n", encoding="utf-8")
    common = [raw, "--quiet", "--beam", "1", "--cpu"]
    fairseq = run(["docctx-translate", *common, "--path", ckpt, "--data", data]).stdout
    hf = run(["docctx-translate", *common, "--path", out_dir, "--engine", "transformers"]).stdout
    lines = [x for x in hf.splitlines() if x != "<d>" and x.strip()]
    assert hf == fairseq and len(lines) == len(src)
    assert all(_plain(x) and "__de__" not in x for x in lines), lines
