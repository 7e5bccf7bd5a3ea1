"""mBART-25 (``mbart.cc25``) as a starting point: a tiny release in its layout (``dict.txt``,
``sentence.bpe.model``, ``model.pt``: an ``mbart_large`` trained by fairseq's own
``translation_from_pretrained_bart``, without ``decoder.output_projection.weight``) ->
``docctx-prepare --pretrained`` -> the language tokens placed as fairseq places them for
mBART-25: the source token after the encoder input's ``</s>``, the target token as the
decoder's first input, in training, scoring and search; the data's sentences carry none."""
import json
from pathlib import Path

import pytest
import torch

from conftest import REPO, run
from test_pretrained_data import corpus  # noqa: F401  (fixture)
from test_pretrained_init import build as _build

#: the mBART-25 release's model (~45 s): make test-all
pytestmark = pytest.mark.slow

USER_DIR = str(REPO / "fairseq_docctx")


@pytest.fixture(scope="module")
def mbart(corpus, tmp_path_factory):  # noqa: F811
    """(release dir, data folder) of a tiny mBART-25 release of the corpus (30 updates)."""
    from examples.lib.tiny_release import mbart25_release
    from fairseq_docctx.cli.prepare import main

    raw, text = corpus
    root = tmp_path_factory.mktemp("mbart25")
    release = mbart25_release(root / "mbart.cc25", list(zip(text["train"]["en"], text["train"]["de"])), updates=30)
    main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
          "--testpref", str(raw / "valid"), "--destdir", str(root / "bin"), "--pretrained", str(release)])
    return release, root / "bin"


def _batch(task, split="valid", n=6):
    task.load_dataset(split)
    ds = task.dataset(split)
    return ds.collater([ds[i] for i in range(n)])


def test_data_and_dictionary_are_the_releases(mbart):
    """The dictionary is ``dict.txt``, mBART-25's 25 language tokens in fairseq's ``--langs``
    order and ``<mask>`` (the checkpoint's embedding rows), then the appended separator; the
    sentences carry no language token; the record says where the task places them."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_docctx.data.pretrained import MBART25_LANGS, PretrainedText

    release, data = mbart
    rec = json.loads((data / "docctx.json").read_text())["pretrained"]
    assert rec["family"] == "mbart25"
    assert rec["langtok"] == {"source": "[en_XX]", "target": "[de_DE]", "placement": "bart"}
    model = Dictionary.load(str(release / "dict.txt"))
    n = len(model)
    rows = torch.load(release / "model.pt", weights_only=False)["model"]["encoder.embed_tokens.weight"].size(0)
    for lang in ("en", "de"):
        d = Dictionary.load(str(data / f"dict.{lang}.txt"))
        assert d.symbols == model.symbols + [f"[{x}]" for x in MBART25_LANGS] + ["<mask>", "<sep>"]
        assert rec["model_symbols"][lang] == rows == n + 26
        ds = data_utils.load_indexed_dataset(str(data / f"valid.en-de.{lang}"), d, "mmap")
        assert all(int(s.max()) < n and int(s[-1]) == d.eos() for s in ds)  # no language token inside
    text = PretrainedText.of_data(str(data))
    assert (text.source_langtok, text.target_langtok) == (None, None)  # nothing prepended
    assert (text.source_suffix, text.decoder_start) == ("[en_XX]", "[de_DE]")


def test_languages_outside_mbart25_refused(mbart, corpus, tmp_path, capsys):  # noqa: F811
    """A language mBART-25 was not pretrained on has no token: one line naming the release."""
    from fairseq_docctx.cli.prepare import cli_main

    release, _ = mbart
    raw, _ = corpus
    for argv, what in ((["-s", "en", "-t", "uk"], "no language uk"),
                       (["-s", "en", "-t", "de", "--pretrained-langs", "en_XX,de_AT"], "no language de_AT")):
        with pytest.raises(SystemExit) as e:
            cli_main([*argv, "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "bin"),
                      "--pretrained", str(release)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"docctx-prepare: error: {release} (mBART-25") and what in err, err
        assert not (tmp_path / "bin").exists()


def test_tokens_placed_as_fairseq_places_them(mbart):
    """In a training step the encoder reads ``... </s> [en_XX]`` and the decoder starts with
    ``[de_DE]`` (concat_transformer, source and target context); at K=0 the model initialised
    from the release computes, on the data's batch, the logits fairseq's own BART model of the
    release computes on ``translation_from_pretrained_bart``'s layout of the same sentences."""
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion
    from fairseq.models.bart import BARTModel

    release, data = mbart
    _, task, model = _build(data, "concat_transformer", "--context-size", "1", "--context-sides", "both",
                            "--init-from-pretrained", release / "model.pt")
    en, de = task.src_dict.index("[en_XX]"), task.tgt_dict.index("[de_DE]")
    assert task.language_tokens.bart() == (en, de) and task.language_tokens.ids() == tuple(sorted({en, de}))
    sample = _batch(task)
    seen = []
    forward = model.forward

    def spy(src_tokens, src_lengths, prev_output_tokens, **kw):
        seen.append((src_tokens, src_lengths, prev_output_tokens))
        return forward(src_tokens, src_lengths, prev_output_tokens, **kw)

    model.forward = spy
    class Backward:  # fairseq's optimizer, as far as a training step uses it
        def backward(self, loss):
            loss.backward()

    task.train_step(sample, model, CrossEntropyCriterion(task, False), Backward(), 0)
    src, lengths, prev = seen[0]
    orig = sample["net_input"]
    assert src.size(1) == orig["src_tokens"].size(1) + 1 and torch.equal(src[:, :-1], orig["src_tokens"])
    assert src[:, -1].eq(en).all() and torch.equal(lengths, orig["src_lengths"] + 1)  # left-padded: the last column
    assert prev[:, 0].eq(de).all() and torch.equal(prev[:, 1:], orig["prev_output_tokens"][:, 1:])
    assert orig["src_tokens"].ne(en).all() and orig["prev_output_tokens"][:, 0].eq(task.tgt_dict.eos()).all()

    # fairseq's BART model of the release, on the layout of translation_from_pretrained_bart
    _, task0, ours = _build(data, "concat_transformer", "--context-size", "0", "--init-from-pretrained",
                            release / "model.pt")
    state = torch.load(release / "model.pt", weights_only=False)
    rows = state["model"]["encoder.embed_tokens.weight"].size(0)

    class Dicts:  # the release's dictionary as the task built it (no separator)
        source_dictionary = target_dictionary = task0.src_dict

    bart = BARTModel.build_model(state["cfg"]["model"], Dicts)
    bart.encoder.embed_tokens.weight.data = bart.encoder.embed_tokens.weight.data[:rows]  # no <sep> row
    bart.load_state_dict(state["model"], strict=False)
    bart.eval(), ours.eval()
    sample = _batch(task0)
    pad, eos = task0.tgt_dict.pad(), task0.tgt_dict.eos()
    with torch.no_grad():
        ni = task0.language_tokens.place(sample)["net_input"]
        got = ours(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])[0]
        for i in range(sample["target"].size(0)):
            s = sample["net_input"]["src_tokens"][i]
            t = sample["target"][i][sample["target"][i].ne(pad)]
            src_b = torch.cat([s[s.ne(pad)], s.new_tensor([en])]).unsqueeze(0)  # w </s> [en_XX]
            tgt_b = torch.cat([t, t.new_tensor([de])])  # w </s> [de_DE]
            prev_b = torch.cat([tgt_b[-1:], tgt_b[:-1]]).unsqueeze(0)  # [de_DE] w </s>
            want = bart(src_b, torch.tensor([src_b.size(1)]), prev_b)[0][0]
            # the positions predicting w </s>: fairseq's last one predicts [de_DE] after </s>
            assert torch.allclose(got[i, :t.numel(), :rows], want[:t.numel()], atol=1e-4), i
            assert int(t[-1]) == eos


@pytest.fixture(scope="module")
def concat_model(mbart, tmp_path_factory):
    """concat_transformer (K=1, both sides) fine-tuned from the release for 40 updates."""
    release, data = mbart
    save = tmp_path_factory.mktemp("mbart25_concat")
    run(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
         "concat_transformer", "--context-size", "1", "--context-sides", "both", "--init-from-pretrained",
         release / "model.pt", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "40",
         "--cpu", "--num-workers", "0", "--no-epoch-checkpoints", "--no-save-optimizer-state",
         "--disable-validation", "--save-dir", save])
    return save / "checkpoint_last.pt"


def test_search_starts_from_the_target_token(mbart, concat_model, corpus):  # noqa: F811
    """fairseq-generate in document order: every sentence once, no language token in the H-/D-
    lines, plain text; the search gets the source ending ``</s> [en_XX]`` and ``[de_DE]`` as
    its start (``bos_token``), and the hub decodes alike."""
    from fairseq_docctx.hub import from_pretrained

    _, data = mbart
    _, text = corpus
    out = run(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "document_translation", "--path",
               concat_model, "--gen-subset", "test", "--beam", "2", "--max-len-b", "20", "--batch-size", "16",
               "--required-batch-size-multiple", "1"]).stdout
    hyps = {int(x.split("\t")[0][2:]): x.split("\t")[2] for x in out.splitlines() if x.startswith("H-")}
    detok = {int(x.split("\t")[0][2:]): x.split("\t")[2] for x in out.splitlines() if x.startswith("D-")}
    n = len(text["valid"]["de"])
    assert sorted(hyps) == sorted(detok) == list(range(n))
    assert not any(t in x for x in (*hyps.values(), *detok.values()) for t in ("[de_DE]", "[en_XX]", "</s>"))
    assert not any("▁" in x for x in detok.values())
    hub = from_pretrained(str(concat_model), data=str(data))
    seen = []
    import fairseq.sequence_generator as sg

    generate = sg.SequenceGenerator.generate

    def spy(self, models, sample, **kw):
        seen.append((sample["net_input"]["src_tokens"], kw.get("bos_token")))
        return generate(self, models, sample, **kw)

    sg.SequenceGenerator.generate = spy
    try:
        docs = [text["valid"]["en"][:3], text["valid"]["en"][3:5]]
        got = hub.translate_documents(docs, beam=2)
    finally:
        sg.SequenceGenerator.generate = generate
    en, de = hub.src_dict.index("[en_XX]"), hub.tgt_dict.index("[de_DE]")
    assert seen and all(b == de and s[:, -1].eq(en).all() for s, b in seen)
    assert [len(d) for d in got] == [3, 2] and not any("[de_DE]" in x for d in got for x in d)


@pytest.mark.slow
def test_ctranslate2_engine_and_segments(mbart, concat_model, corpus, tmp_path):  # noqa: F811
    """docctx-export ctranslate2 of the fine-tuned concat model translates raw documents as
    the fairseq engine does, line for line (the source token appended, the search started from
    the target token); g_transformer fine-tuned from the release decodes segments of the data
    into every sentence once."""
    pytest.importorskip("ctranslate2")
    release, data = mbart
    _, text = corpus
    src = text["valid"]["en"][:12]
    out_dir = tmp_path / "ct2"
    run(["docctx-export", "ctranslate2", concat_model, out_dir, "--data", data])
    raw = tmp_path / "input.en"
    raw.write_text("<d>\n" + "\n".join(src[:5]) + "\n<d>\n" + "\n".join(src[5:]) + "\n", encoding="utf-8")
    common = [raw, "--quiet", "--beam", "2", "--cpu"]
    fairseq = run(["docctx-translate", *common, "--path", concat_model, "--data", data]).stdout
    ct2 = run(["docctx-translate", *common, "--path", out_dir, "--engine", "ctranslate2"]).stdout
    assert ct2 == fairseq and len([x for x in ct2.splitlines() if x != "<d>"]) == len(src)

    save = tmp_path / "g"
    run(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "document_translation", "--arch", "g_transformer",
         "--doc-mode", "segments", "--max-segment-tokens", "64", "--encoder-ctxlayers", "1", "--decoder-ctxlayers",
         "1", "--cross-ctxlayers", "1", "--init-from-pretrained", release / "model.pt", "--optimizer", "adam",
         "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "30", "--cpu", "--num-workers", "0",
         "--no-epoch-checkpoints", "--no-save-optimizer-state", "--disable-validation", "--save-dir", save])
    out = run(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "document_translation", "--path",
               save / "checkpoint_last.pt", "--gen-subset", "test", "--beam", "2", "--batch-size", "4",
               "--doc-mode", "segments"]).stdout
    ids = sorted(int(x.split("\t")[0][2:]) for x in out.splitlines() if x.startswith("H-"))
    assert ids == list(range(len(text["valid"]["de"])))
    assert "[de_DE]" not in out.split("H-", 1)[1]


def test_segment_lengths_leave_the_source_token_out():
    """The sentence lengths of a segment (the G-Transformer length windows) count neither
    ``</s>`` nor the mBART-25 source token after it."""
    from fairseq_docctx.data.segments import sentence_lengths

    pad, eos, sep, tok = 1, 2, 9, 30
    rows = torch.tensor([[pad, 5, 6, sep, 7, eos, tok], [5, sep, 6, 7, 8, eos, tok]])
    assert sentence_lengths(rows, sep, pad, eos).tolist() == [[2, 1], [1, 3]]


def test_doc_noise_keeps_the_language_tokens():
    """g_transformer's word masking (--doc-noise-mask) never masks the data's language tokens."""
    from fairseq.data import Dictionary

    from fairseq_docctx.models.g_transformer import GTransformerModel

    d = Dictionary()
    for w in ("a", "b", "c", "<sep>", "[en_XX]", "<mask>"):
        d.add_symbol(w)
    model = GTransformerModel.__new__(GTransformerModel)
    torch.nn.Module.__init__(model)
    model.doc_noise_mask, model.doc_noise_epochs, model.epoch = 1.0, 10, 1
    model.set_language_tokens([d.index("[en_XX]")])
    tokens = torch.tensor([[d.index("a"), d.index("b"), d.eos(), d.index("[en_XX]")]])
    out = model.add_doc_noise(tokens, d, d.index("<sep>"))
    assert out.tolist() == [[d.index("<mask>")] * 2 + [d.eos(), d.index("[en_XX]")]]
