"""``docctx-export transformers``: tiny trained fairseq models (post-norm and pre-norm, learned
and sinusoidal positions, shared and separate vocabularies; ``transformer``,
``concat_transformer`` with both context sides, ``doc2doc_transformer``) exported, then loaded
with ``AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` in a subprocess that cannot import
``fairseq_docctx`` or fairseq (tests/hf_isolated.py): the tokenizer gives the fairseq
dictionary's ids, the logits are fairseq's (atol 1e-4) with the context given as the model
card says, greedy ``generate`` is fairseq's beam 1; what does not export is one line."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, TINY_MODEL, beam_search, file_digests, prepare_command, run, run_in_process, venv_env
from test_pretrained_data import corpus  # noqa: F401  (fixture)
from fairseq_docctx.cli.export import cli_main as export_main
from hf_export_fixtures import MODELS, export_folder as _export

pytest.importorskip("transformers")

ISOLATED = Path(__file__).resolve().parent / "hf_isolated.py"
ATOL = 1e-4
#: the lines that make fairseq_docctx and fairseq unimportable in a script
BLOCKER = """import importlib.abc, sys
class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fairseq_docctx", "fairseq"):
            raise ImportError(name + " is blocked")
sys.meta_path.insert(0, _Blocked())
"""


def isolated(folder, jobs, tmp_path, **request):
    """The results of ``jobs`` (tests/hf_isolated.py) on ``folder``, run where ``fairseq_docctx``
    cannot be imported (from a temporary folder, PYTHONPATH unset, the package blocked)."""
    req, res = tmp_path / "request.json", tmp_path / "result.json"
    req.write_text(json.dumps({"folder": str(folder), "jobs": jobs, **request}))
    env = {k: v for k, v in venv_env().items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, ISOLATED, req, res], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(res.read_text())


def _hub(ckpt, data):
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(str(ckpt), data=str(data), target_context="reference")
    hub.models[0].eval()
    return hub


def _sample(hub, n=8):
    task = hub.task
    task.load_dataset("test")
    ds = task.dataset("test")
    return ds.collater([ds[i] for i in range(n)])


def _raw(toy_bin, side):
    return (toy_bin.parent / "raw" / f"test.{side}").read_text().splitlines()


def _context_pairs(hub, toy_bin, ids):
    """For the corpus sentences ``ids``: the source as the model card joins it (the previous K
    source sentences of the document, each followed by the separator, then the sentence) and
    the decoder input (the previous K reference translations, each followed by the separator,
    then ``</s>`` and the reference without its last token), as text, and the prefix lengths."""
    meta_k = hub.task.cfg.context_size
    sides = hub.models[0].context_sides
    sep = hub.task.cfg.context_separator
    src, tgt, docs = _raw(toy_bin, "src"), _raw(toy_bin, "tgt"), _raw(toy_bin, "docids")
    out = []
    for i in ids:
        prev = [j for j in range(max(0, i - meta_k), i) if docs[j] == docs[i]]
        source = " ".join([f"{src[j]} {sep}" for j in prev if "src" in sides] + [src[i]])
        prefix = " ".join(f"{tgt[j]} {sep}" for j in prev) if "tgt" in sides else ""
        out.append((source, prefix, tgt[i]))
    return out


def _ids(d, text, eos=True):
    return d.encode_line(text, add_if_not_exist=False, append_eos=eos).long().tolist() if text else []


def _check_logits(fairseq_logits, hf_rows, offsets, lengths):
    worst = 0.0
    for row, (hf, off, n) in enumerate(zip(hf_rows, offsets, lengths)):
        hf = torch.tensor(hf)[off:off + n]
        worst = max(worst, float((fairseq_logits[row, :n] - hf).abs().max()))
    assert worst < ATOL, worst
    print(f"max |logits difference| {worst:.1e}")
    return worst


@pytest.mark.parametrize("name", ["sentence", pytest.param("separate", marks=pytest.mark.slow), "mbart_like",
                                  pytest.param("bart_like", marks=pytest.mark.slow),
                                  pytest.param("doc2doc", marks=pytest.mark.slow)])
def test_logits_are_fairseqs_without_context(trained, name, tmp_path):
    """Each option set as its class: the test split's rows (sentences, or segments for
    doc2doc) alone and as one right-padded batch give fairseq's logits."""
    ckpt, data, folder = trained(name)
    hub = _hub(ckpt, data)
    sample = _sample(hub)
    with torch.no_grad():
        logits = hub.models[0](**sample["net_input"])[0]
    pad = hub.task.source_dictionary.pad()
    pairs = [(s[s.ne(pad)].tolist(), p[p.ne(pad)].tolist())
             for s, p in zip(sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"])]
    got = isolated(folder, [{"logits": pairs}, {"batch_logits": pairs}], tmp_path)
    assert got["class"] == MODELS[name][3]
    lengths = [len(p) for _, p in pairs]
    for rows in got["results"]:
        _check_logits(logits, rows, [0] * len(pairs), lengths)
    config = json.loads((folder / "config.json").read_text())
    assert config["docctx"]["model"] == ("doc2doc_transformer" if name == "doc2doc" else "transformer")
    if name == "doc2doc":
        assert config["docctx"]["segments"]["max_segment_tokens"] == 64
        assert config["docctx"]["segments"]["constrained"] is True


@pytest.mark.parametrize("name", ["concat_both", "prenorm_concat", pytest.param("concat_src", marks=pytest.mark.slow),
                                  pytest.param("concat_tgt", marks=pytest.mark.slow)])
def test_logits_with_context_are_fairseqs(trained, name, tmp_path, toy_bin):
    """concat_transformer (K=2 post-norm, K=1 pre-norm with both sides; K=2 source context
    only; K=1 pre-norm target context only): the source
    context joined with the separator by the tokenizer, the previous translations forced as
    the decoder prefix, give fairseq's logits at the current sentence; the tokenizer's ids of
    the joined text are the fairseq dictionary's."""
    ckpt, data, folder = trained(name)
    hub = _hub(ckpt, data)
    sample = _sample(hub)
    with torch.no_grad():
        logits = hub.models[0](**sample["net_input"])[0]
    sd, td = hub.task.source_dictionary, hub.task.target_dictionary
    texts = _context_pairs(hub, toy_bin, sample["id"].tolist())
    sides = hub.models[0].context_sides
    assert any(("<sep>" in source if "src" in sides else prefix) for source, prefix, _ in texts), "no context"
    pairs, offsets, lengths = [], [], []
    for source, prefix, target in texts:
        cur = _ids(td, target)
        pre = _ids(td, prefix, eos=False)
        pairs.append((_ids(sd, source), pre + [td.eos()] + cur[:-1]))
        offsets.append(len(pre))
        lengths.append(len(cur))
    got = isolated(folder, [{"encode": [s for s, _, _ in texts]}, {"logits": pairs}], tmp_path)
    assert got["results"][0] == [s for s, _ in pairs]
    _check_logits(logits, got["results"][1], offsets, lengths)
    meta = json.loads((folder / "config.json").read_text())["docctx"]
    assert meta["context"] == {"size": hub.task.cfg.context_size, "sides": list(sides), "separator": "<sep>",
                               "separator_id": sd.index("<sep>"), "source_context": "src" in sides,
                               "target_prefix": "tgt" in sides}
    assert set(sides) == {"both": {"src", "tgt"}, "src": {"src"}, "tgt": {"tgt"}}[
        {"concat_src": "src", "concat_tgt": "tgt"}.get(name, "both")]
    assert got["class"] == MODELS[name][3]


def test_tokenizer_gives_the_dictionary_ids(trained, toy_bin, tmp_path):
    """Real sentences of the test split, the separator and a word outside the dictionary
    (``<unk>``): ``AutoTokenizer``'s ids are ``Dictionary.encode_line``'s, ``</s>`` appended;
    decoding gives the pieces back."""
    ckpt, data, folder = trained("sentence")
    hub = _hub(ckpt, data)
    d = hub.task.source_dictionary
    lines = _raw(toy_bin, "src")[:20] + ["w1 <sep> w2 notaword w3", "  w4   w5 "]
    ids = [_ids(d, t) for t in lines]
    assert d.unk() in ids[-2]
    got = isolated(folder, [{"encode": lines}, {"decode": [i[:-1] for i in ids[:5]]}], tmp_path)
    assert got["results"][0] == ids
    assert got["results"][1] == lines[:5]
    assert got["tokenizer_class"] in ("PreTrainedTokenizerFast", "TokenizersBackend")


@pytest.mark.slow  # make test-all
def test_separate_vocabularies_have_their_own_target_tokenizer(trained, tmp_path):
    ckpt, data, folder = trained("separate")
    hub = _hub(ckpt, data)
    sd, td = hub.task.source_dictionary, hub.task.target_dictionary
    assert sd.symbols != td.symbols
    config = json.loads((folder / "config.json").read_text())
    assert (config["src_vocab_size"], config["tgt_vocab_size"]) == (len(sd), len(td))
    assert config["tie_word_embeddings"] is False
    line = "W1 W2 W3"
    got = isolated(folder, [{"encode": [line]}], tmp_path, tokenizer_kwargs={"subfolder": "target_tokenizer"})
    assert got["results"][0] == [_ids(td, line)]


def test_greedy_generate_is_fairseqs_beam_1(trained, toy_bin, tmp_path):
    """The sentence model: ``generate(num_beams=1)`` from ``</s>`` gives fairseq's beam-1
    hypothesis token for token (the search rules in generation_config.json)."""
    ckpt, data, folder = trained("sentence")
    hub = _hub(ckpt, data)
    d = hub.task.source_dictionary
    sources = [_ids(d, t) for t in _raw(toy_bin, "src")[:12]]
    fairseq = [h[0]["tokens"].tolist() for h in beam_search(hub.models[0], d, [torch.LongTensor(s) for s in sources],
                                                            1, max_len_b=40)]
    got = isolated(folder, [{"generate": [(s, [d.eos()]) for s in sources], "max_new_tokens": 41}], tmp_path)
    assert got["results"][0] == fairseq
    assert len({tuple(h) for h in fairseq}) > 3, "the model translates every sentence alike"


@pytest.mark.parametrize("name", ["concat_post2", "prenorm_concat"])
def test_generate_after_the_target_prefix_is_fairseqs_greedy(trained, toy_bin, tmp_path, name):
    """Two decoder layers, the previous translations forced as the prefix: at every step of
    greedy decoding after the prefix as the model card does it (M2M-100: ``generate``; FSMT: a
    full forward a step, as FSMT's ``generate`` runs a decoder input of several tokens without
    the causal mask) the logits are those of fairseq's decoder over the prefix and the tokens
    before it (atol 1e-4), and the token is their argmax (``<pad>`` aside, no ``</s>`` first)."""
    from fairseq.models.transformer import TransformerDecoderBase

    ckpt, data, folder = trained(name)
    hub = _hub(ckpt, data)
    sample = _sample(hub)
    texts = [t for t in _context_pairs(hub, toy_bin, sample["id"].tolist()) if t[1]]
    sd, td = hub.task.source_dictionary, hub.task.target_dictionary
    pairs = [(_ids(sd, s), _ids(td, p, eos=False) + [td.eos()]) for s, p, _ in texts]
    job = "greedy_loop" if MODELS[name][3].startswith("FSMT") else "generate"  # the model card's way
    got = isolated(folder, [{job: pairs, "max_new_tokens": 20, "step_logits": True}], tmp_path)
    model = hub.models[0]
    steps = 0
    for (src, prefix), (new, step_logits) in zip(pairs, got["results"][0]):
        with torch.no_grad():
            x = model.encoder.forward_scriptable(torch.tensor([src]), torch.tensor([len(src)]))
            out = TransformerDecoderBase.forward(model.decoder, torch.tensor([prefix + new[:-1]]), encoder_out=x)[0][0]
        out = out[len(prefix) - 1:]
        assert float((out - torch.tensor(step_logits)).abs().max()) < ATOL
        out[:, td.pad()] = float("-inf")
        out[0, td.eos()] = float("-inf")  # no </s> first (fairseq's min_len 1)
        greedy = out.argmax(-1).tolist()
        if len(new) == 20:  # the length limit: </s> forced last
            greedy, new = greedy[:-1], new[:-1]
        assert greedy == new
        steps += len(new)
    assert steps > len(pairs), "every sentence ended at its first step"


@pytest.mark.slow  # make test-all
def test_model_card_example_runs_in_plain_transformers(trained, tmp_path):
    """The card's example (K, sides, separator, target prefix) runs as it is where
    ``fairseq_docctx`` cannot be imported, and translates its sentences."""
    ckpt, data, folder = trained("concat_both")
    card = (folder / "README.md").read_text()
    assert "K = 2 previous sentences" in card and "`<sep>`" in card and "decoder_input_ids" in card
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1).replace(f'"{folder.name}"', json.dumps(str(folder)))
    script = tmp_path / "card.py"
    script.write_text(BLOCKER + code)
    env = {k: v for k, v in venv_env().items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    printed = eval(p.stdout.strip().splitlines()[-1])
    assert isinstance(printed, list) and len(printed) == 2


def _one_line(err):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("docctx-export: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("arch", ["han_transformer", "qcn_transformer", "g_transformer", "rnnsearch"])
def test_other_architectures_are_refused_in_one_line(concat_both_ckpt, tmp_path, capsys, arch):
    state = torch.load(concat_both_ckpt, map_location="cpu", weights_only=False)
    state["cfg"]["model"]._name = arch
    state["cfg"]["model"].arch = arch
    bad = tmp_path / "other.pt"
    torch.save(state, bad)
    code, _, err = run_in_process(export_main, ["transformers", bad, tmp_path / "out"], capsys)
    line = _one_line(err)
    assert code == 2 and arch in line and "layers are not a transformers class's" in line, line
    assert not (tmp_path / "out").exists()


def test_outdir_that_is_or_holds_what_it_reads_is_refused(sent_ckpt, toy_bin, tmp_path, capsys):
    before = file_digests(sent_ckpt.parent, toy_bin)
    for out in (sent_ckpt.parent, toy_bin, sent_ckpt.parent.parent, sent_ckpt):
        code, _, err = run_in_process(export_main, ["transformers", sent_ckpt, out, "--data", toy_bin], capsys)
        assert code == 2, (out, err)
        _one_line(err)
        code, _, err = run_in_process(export_main, ["transformers", sent_ckpt, out, "--data", toy_bin, "--force"],
                                      capsys)
        assert code == 2, (out, err)
    assert file_digests(sent_ckpt.parent, toy_bin) == before


def test_existing_outdir_rules_are_the_ctranslate2_exports(sent_ckpt, toy_bin, tmp_path, capsys):
    """An existing OUTDIR: refused without --force; with it replaced only if it is an earlier
    export holding only its files; the new export's record lists its files."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.txt").write_text("keep me\n")
    code, _, err = run_in_process(export_main, ["transformers", sent_ckpt, other, "--data", toy_bin], capsys)
    assert code == 2 and "exists" in _one_line(err)
    code, _, err = run_in_process(export_main, ["transformers", sent_ckpt, other, "--data", toy_bin, "--force"],
                                  capsys)
    assert code == 2 and "is not a folder docctx-export wrote" in _one_line(err)
    assert (other / "results.txt").read_text() == "keep me\n"
    out = _export(sent_ckpt, toy_bin, tmp_path / "hf")
    capsys.readouterr()
    record = json.loads((out / "docctx-export.json").read_text())
    assert record["engine"] == "transformers" and record["files"] == sorted(os.listdir(out))
    (out / "mine.txt").write_text("x\n")
    code, _, err = run_in_process(export_main, ["transformers", sent_ckpt, out, "--data", toy_bin, "--force"], capsys)
    assert code == 2 and "which docctx-export did not write" in _one_line(err)
    (out / "mine.txt").unlink()
    _export(sent_ckpt, toy_bin, out, "--force")
    assert json.loads((out / "docctx-export.json").read_text())["files"] == record["files"]


def test_networks_no_class_has_are_refused_naming_the_option(trained):
    """Pre-norm with separate dictionaries (no class but FSMT has two vocabularies), learned
    positions without the embedding layer norm, a mixed pre-/post-norm: one line each."""
    from fairseq.modules import LayerNorm

    from fairseq_docctx.inference.transformers_export import ExportError
    from fairseq_docctx.inference.transformers_export.classes import choose_class

    ckpt, data, _ = trained("separate")
    model = _hub(ckpt, data).models[0]
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.normalize_before = True
    model.encoder.layer_norm, model.decoder.layer_norm = LayerNorm(32), LayerNorm(32)
    with pytest.raises(ExportError, match="separate source and target dictionaries.*--joined-dictionary"):
        choose_class(model, "x.pt")
    model.decoder.layers[0].normalize_before = False
    with pytest.raises(ExportError, match="--encoder-normalize-before/--decoder-normalize-before differ"):
        choose_class(model, "x.pt")
    ckpt, data, _ = trained("bart_like")
    model = _hub(ckpt, data).models[0]
    model.encoder.layernorm_embedding = model.decoder.layernorm_embedding = None
    with pytest.raises(ExportError, match="--encoder-learned-pos without --layernorm-embedding in a post-norm"):
        choose_class(model, "x.pt")


def test_the_options_of_a_model_started_from_marian_are_refused(trained):
    """Marian's sinusoidal layout, an output bias, the decoder started with the padding token
    (modules/hf_network.py): one line naming each (no FSMT with Marian's positions)."""
    from fairseq_docctx.inference.transformers_export import ExportError
    from fairseq_docctx.inference.transformers_export.classes import choose_class
    from fairseq_docctx.modules.hf_network import EosAsPadEmbedding, MarianSinusoidalPositions

    ckpt, data, _ = trained("sentence")
    model = _hub(ckpt, data).models[0]
    model.encoder.embed_positions.__class__ = MarianSinusoidalPositions
    model.decoder.output_projection.bias = torch.nn.Parameter(torch.zeros(len(model.decoder.dictionary)))
    model.decoder.embed_tokens.__class__ = EosAsPadEmbedding
    with pytest.raises(ExportError, match="--positions-style marian, --output-bias, --decoder-start-pad$"):
        choose_class(model, "x.pt")


@pytest.fixture(scope="module")
def spm_export(toy_bin, tmp_path_factory):
    """The toy documents prepared with a joint SentencePiece model (80 pieces), a sentence
    model trained 20 updates on them, and its export."""
    root = tmp_path_factory.mktemp("hf_spm")
    data = root / "bin"
    run([*prepare_command(toy_bin.parent / "raw", data), "--spm-vocab-size", "80"])
    run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         *TINY_MODEL, "--arch", "transformer", "--context-size", "0", "--max-tokens", "1000", "--max-update", "20",
         "--no-epoch-checkpoints", "--save-dir", root / "ckpt"])
    ckpt = root / "ckpt" / "checkpoint_last.pt"
    return ckpt, data, _export(ckpt, data, root / "hf")


@pytest.mark.slow  # its own SentencePiece data (~20 s): make test-all
def test_sentencepiece_data_reads_pieces_and_decodes_text(spm_export, toy_bin, tmp_path):
    """On SentencePiece data the folder holds the SentencePiece model; the tokenizer reads its
    pieces (joined by spaces) as the data's ids and decodes them into the text."""
    import sentencepiece as spm

    ckpt, data, folder = spm_export
    meta = json.loads((folder / "config.json").read_text())["docctx"]
    assert meta["segmentation"] == {"kind": "sentencepiece", "file": "sentencepiece.model", "moses": False,
                                    "target_tokenizer": None}
    assert (folder / "sentencepiece.model").read_bytes() == (data / "spm.model").read_bytes()
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))
    lines = _raw(toy_bin, "src")[:10]
    pieces = [" ".join(sp.encode(t, out_type=str)) for t in lines]
    d = _hub(ckpt, data).task.source_dictionary
    ids = [_ids(d, p) for p in pieces]
    got = isolated(folder, [{"encode": pieces}, {"decode": [i[:-1] for i in ids]}], tmp_path)
    assert got["results"][0] == ids
    assert got["results"][1] == lines
    assert "SentencePiece model `sentencepiece.model`" in (folder / "README.md").read_text()


@pytest.fixture(scope="module")
def release_exports(corpus, tmp_path_factory):  # noqa: F811  (the fixture imported above)
    """Data of a tiny M2M-100-style release (SentencePiece, language tokens) and of a tiny
    WMT19-style one (Moses + fastBPE, two dictionaries) through ``docctx-prepare --pretrained``,
    a sentence model trained 40 updates on each, and its export: ``{name: (ckpt, data, folder)}``."""
    from test_pretrained_data import _bpe_release, _sp_release

    root = tmp_path_factory.mktemp("hf_release")
    raw, _ = corpus
    out = {}
    for name, make, share in (("m2m100", lambda: _sp_release(corpus, root / "m2m", "m2m100"), True),
                              ("wmt19", lambda: _bpe_release(corpus, root / "wmt19"), False)):
        release, _ = make()
        data = root / f"bin-{name}"
        run(["docctx-prepare", "-s", "en", "-t", "de", "--trainpref", raw / "train", "--validpref", raw / "valid",
             "--testpref", raw / "valid", "--destdir", data, "--pretrained", release])
        tiny = [a for a in TINY_MODEL if share or a != "--share-all-embeddings"]
        run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--arch", "transformer", "--context-size", "0", *tiny, "--max-tokens", "1000", "--max-update", "40",
             "--no-epoch-checkpoints", "--save-dir", root / f"ckpt-{name}"])
        ckpt = root / f"ckpt-{name}" / "checkpoint_last.pt"
        out[name] = (ckpt, data, _export(ckpt, data, root / f"hf-{name}"))
    return out


def _rows(hub, sample):
    pad = hub.task.source_dictionary.pad()
    return [(s[s.ne(pad)].tolist(), p[p.ne(pad)].tolist())
            for s, p in zip(sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"])]


@pytest.mark.slow  # the two release exports (~40 s): make test-all
def test_language_token_data_forces_the_target_token_first(release_exports, tmp_path):
    """M2M-100-style data (every sentence starts with its language token): the logits are
    fairseq's, and greedy ``generate`` from ``</s>`` forces ``__de__`` first
    (``forced_bos_token_id``) and then gives fairseq's beam-1 search with the token forced."""
    from fairseq.sequence_generator import SequenceGenerator

    ckpt, data, folder = release_exports["m2m100"]
    hub = _hub(ckpt, data)
    sample = _sample(hub, 10)
    td = hub.task.target_dictionary
    meta = json.loads((folder / "config.json").read_text())["docctx"]
    assert meta["language_tokens"] == {"source": "__en__", "target": "__de__",
                                       "source_id": hub.task.source_dictionary.index("__en__"),
                                       "target_id": td.index("__de__")}
    assert json.loads((folder / "generation_config.json").read_text())["forced_bos_token_id"] == td.index("__de__")
    pairs = _rows(hub, sample)
    assert all(s[0] == meta["language_tokens"]["source_id"] for s, _ in pairs)
    with torch.no_grad():
        logits = hub.models[0](**sample["net_input"])[0]
    got = isolated(folder, [{"logits": pairs}, {"generate": [(s, [td.eos()]) for s, _ in pairs],
                                                "max_new_tokens": 41}], tmp_path)
    _check_logits(logits, got["results"][0], [0] * len(pairs), [len(p) for _, p in pairs])
    gen = SequenceGenerator(hub.models, td, beam_size=1, max_len_a=0, max_len_b=40)
    net = {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths")}
    prefix = torch.full((len(pairs), 1), td.index("__de__"))
    with torch.no_grad():
        hyps = gen.generate(hub.models, {"id": sample["id"], "net_input": net}, prefix_tokens=prefix)
    assert got["results"][1] == [h[0]["tokens"].tolist() for h in hyps]
    assert "every source sentence starts with `__en__`" in (folder / "README.md").read_text()


@pytest.mark.slow  # the two release exports: make test-all
def test_a_wmt19_style_release_carries_its_codes(release_exports, tmp_path):
    """Moses + fastBPE data with two dictionaries: FSMT with two vocabularies, the codes file
    copied and named in the segmentation record, fairseq's logits."""
    ckpt, data, folder = release_exports["wmt19"]
    hub = _hub(ckpt, data)
    meta = json.loads((folder / "config.json").read_text())["docctx"]
    seg = meta["segmentation"]
    assert (seg["kind"], seg["moses"], seg["target_tokenizer"]) == ("fastbpe", True, "target_tokenizer")
    text = hub.task.pretrained_text
    assert (folder / seg["file"]).read_bytes() == Path(text.segmentation_file).read_bytes()
    assert meta["language_tokens"] is None
    sample = _sample(hub, 10)
    pairs = _rows(hub, sample)
    with torch.no_grad():
        logits = hub.models[0](**sample["net_input"])[0]
    got = isolated(folder, [{"logits": pairs}], tmp_path)
    assert got["class"] == "FSMTForConditionalGeneration"
    _check_logits(logits, got["results"][0], [0] * len(pairs), [len(p) for _, p in pairs])


def test_an_export_given_as_a_fairseq_checkpoint_is_one_line(trained, toy_bin, tmp_path, capsys):
    from fairseq_docctx.cli.translate import cli_main as translate_main

    _, _, folder = trained("sentence")
    capsys.readouterr()  # the export's own line
    src = tmp_path / "in.txt"
    src.write_text("<d>\nw1 w2\n")
    code, _, err = run_in_process(translate_main, [src, "--path", folder, "--data", toy_bin, "-o", tmp_path / "o"],
                                  capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert code == 2 and len(lines) == 1 and "exported by docctx-export transformers" in lines[0], err
