"""``--init-from-pretrained DIR`` with a transformers model folder (fairseq_docctx/models/hf_import.py,
fairseq_docctx/modules/hf_network.py): the document model is the folder's network.

Per family the folder is tests/hf_fixtures.py's (its real tokenizer, made from the family's own
files, and its config), its config given two layers each side and the option set of the
family's real releases (OPUS-MT's Marian: swish, scaled embeddings, Marian's positions, one
shared table, pad = the last id = the decoder start, or a table each side with two
vocabularies; mBART-50 and mBART-25; M2M-100 and NLLB-200; the WMT19 FSMT port with two
vocabularies of different sizes), and a model of it with random weights (``final_logits_bias``
included) saved over the folder's. The sentences are ordinary tokens of each vocabulary (no
special or language token). The fairseq model built from it with ``--init-from-pretrained``
gives transformers' logits (fairseq column ``i`` against transformers' column ``hf_rows[i]``)
and its greedy search gives ``generate(num_beams=1)``'s tokens; ``folder_vocabularies`` gives
the tokenizer's tokens and ids.
"""
import json

import pytest
import torch

from conftest import REPO

transformers = pytest.importorskip("transformers")
from hf_fixtures import IWSLT17, UNNAMED_ROWS, make_random_folder  # noqa: E402
from test_pretrained_init import ARCHS  # noqa: E402  (each architecture's task options)

pytestmark = pytest.mark.skipif(not IWSLT17.is_dir(), reason=f"needs the shared corpora at {IWSLT17}")

USER_DIR = str(REPO / "fairseq_docctx")
#: two layers each side (hf_fixtures' folders have one): the layers stack as transformers' do
SIZES = dict(encoder_layers=2, decoder_layers=2, encoder_ffn_dim=24, decoder_ffn_dim=24)
#: the test's family -> (hf_fixtures' family, separate vocabularies, the release options the test sets)
KINDS = {
    # Helsinki-NLP/opus-mt-en-de: swish, scaled embeddings, one shared table, pad = the last id = the start
    "marian": ("marian", False, dict(activation_function="swish", scale_embedding=True,
                                     share_encoder_decoder_embeddings=True, tie_word_embeddings=True)),
    # a Marian model with two vocabularies (separate_vocabs): a table each side
    "marian_separate": ("marian", True, dict(activation_function="swish", scale_embedding=True,
                                             share_encoder_decoder_embeddings=False, tie_word_embeddings=True)),
    # facebook/mbart-large-50-many-to-many-mmt, facebook/mbart-large-cc25 (unscaled embeddings)
    "mbart": ("mbart50", False, dict(activation_function="gelu", scale_embedding=True, tie_word_embeddings=True)),
    "mbart25": ("mbart25", False, dict(activation_function="gelu", scale_embedding=False, tie_word_embeddings=True)),
    # facebook/m2m100_418M, facebook/nllb-200-distilled-600M
    "m2m_100": ("m2m100", False, dict(activation_function="relu", scale_embedding=True, decoder_start_token_id=2,
                                      tie_word_embeddings=True)),
    "nllb": ("nllb", False, dict(activation_function="relu", scale_embedding=True, decoder_start_token_id=2,
                                 tie_word_embeddings=True)),
    # facebook/wmt19-en-de: two vocabularies of different sizes, untied output
    "fsmt": ("fsmt", False, dict(activation_function="relu", scale_embedding=True, tie_word_embeddings=False)),
}
FAMILIES = list(KINDS)


def make_folder(root, kind, seed=0):
    """A tiny transformers folder of ``kind`` (:data:`KINDS`): hf_fixtures' folder (its real
    tokenizer, its config), the config given the test's sizes and release options, random
    weights (``make_random_folder``); returns (dir, hf model)."""
    family, separate, options = KINDS[kind]
    return make_random_folder(root, family, separate, {**SIZES, **options}, seed)


def write_data(root, vocabs, sep="<sep>", name="data"):
    """A data folder whose dictionaries are the vocabularies' symbols plus the separator
    (``sep=None``: without it)."""
    data = root / name
    data.mkdir()
    for lang, side in (("src", "source"), ("tgt", "target")):
        lines = [f"{s} 1" for s in vocabs[side].symbols[4:]] + ([f"{sep} 1"] if sep else [])
        (data / f"dict.{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data


def build(data, arch, *extra):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "-s", "src", "-t", "tgt", "--arch", arch, *map(str, extra)])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return args, task, task.build_model(args).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    from fairseq_docctx.data.hf_folder import folder_vocabularies

    root = tmp_path_factory.mktemp(request.param)
    d, hf = make_folder(root, request.param)
    vocabs = folder_vocabularies(str(d))
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    return {"kind": request.param, "dir": d, "hf": hf, "vocabs": vocabs, "tok": tok,
            "words": {side: ordinary_ids(v, tok) for side, v in vocabs.items()},
            "data": write_data(root, vocabs)}


def ordinary_ids(vocab, tok):
    """The fairseq ids of a vocabulary's ordinary tokens, in id order: a row of the checkpoint,
    named by the tokenizer (not a ``madeupword`` row), neither a special token nor a language
    token of the tokenizer."""
    special = set(map(str, tok.all_special_tokens)) | set(getattr(tok, "lang_token_to_id", None) or ())
    return [i for i, (sym, row) in enumerate(zip(vocab.symbols, vocab.hf_rows))
            if i >= 4 and row is not None and sym not in special and not sym.startswith("madeupword")]


def words(family, side, sents):
    """Sentences of fairseq ids: position ``j`` in ``sents`` is the ``j``-th ordinary token of the
    side's vocabulary (:func:`ordinary_ids`), the same tokens whatever the family's numbering."""
    ids = family["words"][side]
    return [[ids[j] for j in s] for s in sents]


#: positions among the ordinary tokens (:func:`words`)
SENTS = [[5, 9, 11, 30, 7], [12, 4, 40], [33, 21, 6, 8, 17, 9, 10]]
TGT = [[7, 8, 9, 10], [11, 12], [13, 14, 15, 16, 17, 18]]


def _batch(vocab, sents, eos, pad, hf_pad):
    """fairseq's source batch (left-padded, </s> last) and transformers' (right-padded)."""
    n = max(len(s) for s in sents) + 1
    fs = torch.full((len(sents), n), pad)
    hf = torch.full((len(sents), n), hf_pad)
    mask = torch.zeros((len(sents), n), dtype=torch.long)
    for i, s in enumerate(sents):
        ids = s + [eos]
        fs[i, n - len(ids):] = torch.tensor(ids)
        hf[i, :len(ids)] = torch.tensor(vocab.hf_ids(ids))
        mask[i, :len(ids)] = 1
    return fs, torch.tensor([len(s) + 1 for s in sents]), hf, mask


def _logits_pair(family, arch, *extra):
    """fairseq's and transformers' logits ``[B, T, V]`` on the same teacher-forced batch, and
    the target vocabulary."""
    hf, vocabs = family["hf"], family["vocabs"]
    args, task, model = build(family["data"], arch, "--init-from-pretrained", family["dir"], *extra)
    sd, td = task.source_dictionary, task.target_dictionary
    src, lengths, hf_src, mask = _batch(vocabs["source"], words(family, "source", SENTS), sd.eos(), sd.pad(),
                                        hf.config.pad_token_id)
    tgt = words(family, "target", TGT)
    T = max(len(t) for t in tgt) + 1
    prev = torch.full((len(tgt), T), td.pad())
    hf_prev = torch.full((len(tgt), T), hf.config.pad_token_id)
    dmask = torch.zeros((len(tgt), T), dtype=torch.long)
    for i, t in enumerate(tgt):
        prev[i, :len(t) + 1] = torch.tensor([td.eos()] + t)
        hf_prev[i, :len(t) + 1] = torch.tensor([hf.config.decoder_start_token_id] + vocabs["target"].hf_ids(t))
        dmask[i, :len(t) + 1] = 1
    with torch.no_grad():
        ours = model(src, lengths, prev)[0]
        theirs = hf(input_ids=hf_src, attention_mask=mask, decoder_input_ids=hf_prev,
                    decoder_attention_mask=dmask, use_cache=False).logits  # FSMT: no causal mask with the cache
    real = dmask.bool()
    return model, ours, theirs, real, vocabs["target"]


def _compare(ours, theirs, real, vocab):
    cols = [i for i, r in enumerate(vocab.hf_rows) if r is not None]
    a = ours[..., cols][real]
    b = theirs[..., [vocab.hf_rows[i] for i in cols]][real]
    return (a - b).abs().max().item()


def test_logits_equal_transformers(family):
    """concat_transformer at K=0 from the folder: transformers' logits (atol 1e-4), and the
    log-probabilities too (the fairseq-only symbols, Marian's <s> and the separator, hold no
    probability mass)."""
    model, ours, theirs, real, vocab = _logits_pair(family, "concat_transformer", "--context-size", "0")
    assert _compare(ours, theirs, real, vocab) < 1e-4
    lp_ours = torch.log_softmax(ours[..., : len(vocab.symbols)], -1)
    lp_theirs = torch.log_softmax(theirs, -1)
    assert _compare(lp_ours, lp_theirs, real, vocab) < 1e-4
    # the logits are not trivially equal: they vary over the vocabulary
    assert theirs[real].std().item() > 0.5


def test_other_architecture_same_network(family):
    """han_transformer from the folder: the same network (its sentence-level logits at K=0)."""
    _, ours, theirs, real, vocab = _logits_pair(family, "han_transformer", "--context-size", "0")
    assert _compare(ours, theirs, real, vocab) < 1e-4


GEN_SENTS = [[5, 9, 11, 30, 7], [12, 4, 40], [33, 21, 6, 8, 17, 9, 10], [44, 45], [20, 19, 18, 17, 16, 15]]


def test_greedy_search_equals_generate(family):
    """fairseq's beam search at beam 1 (incremental decoding: the positions, the output bias and
    the decoder start of one-step calls) gives transformers' ``generate(num_beams=1)``'s tokens.
    The data dictionary holds the separator after the checkpoint's symbols: its new rows, the
    average of the checkpoint's (``pretrained_init.grow``), never win the argmax."""
    from fairseq.sequence_generator import SequenceGenerator

    hf, vocabs = family["hf"], family["vocabs"]
    _, task, model = build(family["data"], "han_transformer", "--context-size", "0",
                           "--init-from-pretrained", family["dir"])
    sd, td = task.source_dictionary, task.target_dictionary
    src, lengths, hf_src, mask = _batch(vocabs["source"], words(family, "source", GEN_SENTS), sd.eos(),
                                        sd.pad(), hf.config.pad_token_id)
    n = 12
    gen = SequenceGenerator([model], td, beam_size=1, max_len_a=0, max_len_b=n, min_len=1)
    with torch.no_grad():
        hyps = gen.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
        out = hf.generate(input_ids=hf_src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=n,
                          min_new_tokens=1, decoder_start_token_id=hf.config.decoder_start_token_id,
                          eos_token_id=vocabs["target"].hf_rows[td.eos()],
                          bad_words_ids=[[hf.config.pad_token_id]], forced_bos_token_id=None,
                          forced_eos_token_id=None)
    eos = vocabs["target"].hf_rows[td.eos()]
    lengths_seen = []
    for i, h in enumerate(hyps):
        ours = vocabs["target"].hf_ids(h[0]["tokens"].tolist())
        theirs = out[i, 1:].tolist()
        if eos in theirs:
            theirs = theirs[: theirs.index(eos) + 1]
        # fairseq ends a hypothesis at max_len with </s>; transformers stops after n tokens
        assert ours[: len(theirs)] == theirs, (i, ours, theirs)
        lengths_seen.append(len(theirs))
    assert max(lengths_seen) > 2  # not all empty translations


#: the choices a conversion sets and fairseq's default for each (with the options it goes with)
CHOICES = {"positions_style": {"positions_style": "fairseq"}, "output_bias": {"output_bias": False},
           "decoder_start_pad": {"decoder_start_pad": False},
           "encoder_learned_pos": {"encoder_learned_pos": False, "decoder_learned_pos": False},
           "layernorm_embedding": {"layernorm_embedding": False},
           "encoder_normalize_before": {"encoder_normalize_before": False, "decoder_normalize_before": False}}


def test_each_choice_is_needed(family, monkeypatch):
    """Without one of the family's choices (fairseq's default instead) the logits are not
    transformers': each choice the conversion sets is needed where it is set."""
    from fairseq_docctx.models import hf_import

    real = hf_import.network_options
    opts = real(json.loads((family["dir"] / "config.json").read_text()), "x")
    tried = []
    for option, off in CHOICES.items():
        if opts[option] == off[option]:
            continue
        monkeypatch.setattr(hf_import, "network_options", lambda cfg, where, off=off: {**real(cfg, where), **off})
        _, ours, theirs, real_pos, vocab = _logits_pair(family, "concat_transformer", "--context-size", "0")
        assert _compare(ours, theirs, real_pos, vocab) > 1e-2, option
        tried.append(option)
    monkeypatch.undo()
    assert tried or family["kind"] in ("m2m_100", "nllb", "fsmt")  # fairseq's own Transformer choices


def test_concat_cached_prefix_decoding_with_the_options(family):
    """concat_transformer from the folder with target context: the cached prefix run and its
    one-token steps (``ConcatContextDecoder._forward_cached``: Marian's positions looked up at
    per-row positions, the output bias, the pad start) give the full run's outputs."""
    _, task, model = build(family["data"], "concat_transformer", "--context-size", "3", "--context-sides", "both",
                           "--init-from-pretrained", family["dir"])
    td = task.target_dictionary
    eos, pad = td.eos(), td.pad()
    src = torch.tensor([[10, 11, 12, eos], [13, 14, 15, eos], [16, 17, 18, eos], [19, 20, 21, eos]])
    table = torch.tensor([[22, 23, 24, eos], [25, eos, pad, pad], [26, 27, eos, pad]])
    ctx = {"tgt_tokens": table, "tgt_index": torch.tensor([[2, 1, 0], [-1, -1, -1], [1, 1, -1], [0, 1, -1]])}
    hist = torch.randint(5, 40, (4, 6), generator=torch.Generator().manual_seed(2))
    hist[:, 0] = eos
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=torch.tensor([4] * 4), context=ctx)
        state = {}
        for t in range(1, hist.size(1) + 1):
            out, _ = model.decoder(hist[:, :t], encoder_out=enc, incremental_state=state)
            ref, _ = model.decoder(hist[:, :t], encoder_out=enc)
            torch.testing.assert_close(out[:, -1], ref[:, -1], atol=1e-4, rtol=1e-5)
    cached = model.decoder.get_incremental_state(state, "concat_prefix")
    assert "prefix_len" in cached  # the cached path ran (not the full-run fallback)


def test_trained_checkpoint_rebuilds_without_the_folder(family, tmp_path):
    """The options are in the model's arguments (what a checkpoint saves): the model rebuilt
    from them, the folder gone, with the weights loaded, gives the same logits."""
    import copy
    import shutil

    from fairseq import tasks

    folder = tmp_path / "copy"
    shutil.copytree(family["dir"], folder)
    args, task, model = build(family["data"], "concat_transformer", "--context-size", "0",
                              "--init-from-pretrained", folder)
    shutil.rmtree(folder)
    saved = copy.deepcopy(args)
    assert saved.init_from_pretrained is None and saved.initialized_from_pretrained == str(folder)
    again = tasks.setup_task(saved).build_model(saved).eval()
    again.load_state_dict(model.state_dict())
    src = torch.tensor([[5, 6, 7, 2], [1, 8, 9, 2]])
    prev = torch.tensor([[2, 10, 11], [2, 12, 13]])
    with torch.no_grad():
        torch.testing.assert_close(again(src, torch.tensor([4, 3]), prev)[0], model(src, torch.tensor([4, 3]), prev)[0])
    from fairseq_docctx.modules import hf_network

    assert hf_network.options(saved) == {k: v for k, v in hf_network.options(args).items()}


def test_refusals(family, tmp_path):
    """One line each: an option given against the folder's, Marian's table with document
    positions, the CTranslate2 export of a model with the options, a folder of another family
    or without weights."""
    from fairseq_docctx.errors import UsageError
    from fairseq_docctx.inference.ctranslate2 import ExportError
    from fairseq_docctx.inference.ctranslate2.exportable import check_exportable

    kind = family["kind"]
    args, task, model = build(family["data"], "concat_transformer", "--context-size", "0",
                              "--init-from-pretrained", family["dir"])
    if kind == "marian":
        with pytest.raises(UsageError, match="--positions-style marian: .*document positions"):
            build(family["data"], "concat_transformer", "--init-from-pretrained", family["dir"],
                  "--segment-shifted-positions", "8")
        with pytest.raises(ExportError, match="--positions-style marian, --output-bias, --decoder-start-pad"):
            check_exportable(model, "x")
    if kind in ("mbart", "mbart25"):
        with pytest.raises(ExportError, match="--output-bias"):
            check_exportable(model, "x")
    if kind == "m2m_100":
        check_exportable(model, "x")  # M2M-100's network is a plain fairseq Transformer
        # (a flag given with its default value counts as not given: pretrained_init's rule)
        with pytest.raises(UsageError, match="--output-bias True contradicts .*--output-bias is False"):
            build(family["data"], "concat_transformer", "--init-from-pretrained", family["dir"], "--output-bias")
        other = tmp_path / "other"
        other.mkdir()
        (other / "config.json").write_text(json.dumps({"model_type": "t5"}))
        with pytest.raises(UsageError, match=r"model_type 't5' is not one"):
            build(family["data"], "concat_transformer", "--init-from-pretrained", other)
        empty = tmp_path / "empty"
        shutil_copy_config(family["dir"], empty)
        with pytest.raises(UsageError, match="no weights"):
            build(family["data"], "concat_transformer", "--init-from-pretrained", empty)
        (empty / "config.json").unlink()
        with pytest.raises(UsageError, match="a directory without a config.json"):
            build(family["data"], "concat_transformer", "--init-from-pretrained", empty)


def shutil_copy_config(src, dst):
    """The folder without its weights (its config and its tokenizer's files)."""
    import shutil

    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin"):
            shutil.copy(f, dst / f.name)




@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_architecture_gets_the_network(arch, tmp_path):
    """The six Transformer document models built from a Marian folder: Marian's tables in every
    sinusoidal position module, the output bias and the pad start in every decoder, every
    weight of the folder loaded (the converted tensors)."""
    from fairseq.models.transformer import TransformerDecoderBase
    from fairseq.modules import SinusoidalPositionalEmbedding

    from fairseq_docctx.data.hf_folder import folder_vocabularies
    from fairseq_docctx.models import hf_import
    from fairseq_docctx.modules.hf_network import EosAsPadEmbedding, MarianSinusoidalPositions

    d, _ = make_folder(tmp_path, "marian")
    data = write_data(tmp_path, folder_vocabularies(str(d)))
    _, _, model = build(data, arch, *ARCHS[arch], "--init-from-pretrained", d)
    positions = [m for m in model.modules() if isinstance(m, SinusoidalPositionalEmbedding)]
    assert positions and all(isinstance(m, MarianSinusoidalPositions) for m in positions)
    decoders = [m for m in model.modules() if isinstance(m, TransformerDecoderBase)]
    assert decoders and all(isinstance(m.embed_tokens, EosAsPadEmbedding) and m.output_projection.bias is not None
                            for m in decoders)
    own = model.state_dict()
    weights, _, _ = hf_import.read_folder(str(d))
    for k, v in weights.items():
        if k.endswith(".version"):
            continue
        assert torch.equal(own[k][: v.shape[0]], v), k


def test_folder_vocabularies_are_the_tokenizers_ids(family):
    """folder_vocabularies of a folder with a real tokenizer (``AutoTokenizer``): fairseq's
    ``<pad> </s> <unk>`` at 1-3 are the tokenizer's, every embedding row of each side appears
    once (Marian's lacking ``<s>`` is ``None``), each symbol is the tokenizer's token of its row
    (``madeupword`` only for the rows no token names), and real text the tokenizer encodes reads
    back as the same tokens through the fairseq ids."""
    tok, cfg, kind = family["tok"], family["hf"].config, family["kind"]
    text = "Thank you so much, Chris. And it's truly a great honor."
    if kind == "fsmt":  # WMT19's port: two vocabularies of different sizes
        assert cfg.src_vocab_size != cfg.tgt_vocab_size
    for side, v in family["vocabs"].items():
        if kind == "fsmt":  # two vocabularies
            id_to_tok = dict(tok.decoder) if side == "target" else {i: t for t, i in tok.encoder.items()}
            rows = cfg.tgt_vocab_size if side == "target" else cfg.src_vocab_size
        elif kind.startswith("marian"):  # its encoder (source) and target_encoder (target: the same, or its own)
            mine = getattr(tok, "target_encoder", tok.encoder) if side == "target" else tok.encoder
            id_to_tok = {i: t for t, i in mine.items()}
            rows = cfg.decoder_vocab_size if side == "target" else cfg.vocab_size
        else:  # one vocabulary, the language tokens included; no token for the rows that name none
            id_to_tok = {i: tok.convert_ids_to_tokens(i) for i in range(cfg.vocab_size)}
            id_to_tok = {i: t for i, t in id_to_tok.items() if t not in (None, tok.unk_token) or i == tok.unk_token_id}
            rows = cfg.vocab_size
        inv = {t: i for i, t in id_to_tok.items()}
        assert v.hf_rows[1:4] == [inv["<pad>"], inv["</s>"], inv["<unk>"]] and v.hf_rows[1] == cfg.pad_token_id
        assert (v.hf_rows[0] is None) == kind.startswith("marian")
        assert sorted(r for r in v.hf_rows if r is not None) == list(range(rows))
        unnamed = [s for s, r in zip(v.symbols, v.hf_rows) if r is not None and r not in id_to_tok]
        assert unnamed == [f"madeupword{j:04d}" for j in range(len(unnamed))]
        assert len(unnamed) == UNNAMED_ROWS.get(KINDS[kind][0], 0)
        assert all(s == id_to_tok[r] for s, r in zip(v.symbols, v.hf_rows) if r in id_to_tok)
        if side == "source":
            ids = tok(text).input_ids
            assert len(ids) > 5 and [id_to_tok[i] for i in ids] == [v.symbols[i] for i in v.fairseq_ids(ids)]
