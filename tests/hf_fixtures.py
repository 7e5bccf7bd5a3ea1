"""Tiny but real Hugging Face ``transformers`` translation folders, one per family, for the tests
of the data side (``docctx-prepare --pretrained DIR``), the import (``--init-from-pretrained
DIR``) and the export.

:func:`make_hf_folder` builds, in a few seconds, the folder a family's releases have: the
family's own tokenizer class made from its own files (a SentencePiece model trained here on a
few hundred sentences of ``../shared/data``'s IWSLT17 TED talks; FSMT: Moses + BPE merges
learnt by subword-nmt), saved with ``save_pretrained``, and a model of the family's config class
with the options its public releases set (``config.json`` of ``Helsinki-NLP/opus-mt-en-de``,
``facebook/m2m100_418M``, ``facebook/nllb-200-distilled-600M``,
``facebook/mbart-large-50-many-to-many-mmt``, ``facebook/mbart-large-cc25``,
``facebook/wmt19-en-de``) but tiny sizes (``d_model`` 16, one layer) and random weights, saved
into the same folder. The config's vocabulary sizes are the tokenizer's (``len(tokenizer)``,
language tokens included: M2M100Tokenizer's ``len`` leaves its own out), plus the rows that name no token where the releases have them
(M2M-100's 8 ``madeupword`` rows, NLLB-200's 2 unnamed rows).
"""
import io
import json
import os
from pathlib import Path

from conftest import SHARED_DATA

FAMILIES = ("marian", "m2m100", "nllb", "mbart50", "mbart25", "fsmt")
IWSLT17 = SHARED_DATA / "maruf-ende" / "IWSLT2017"
#: the rows of the real embedding tables that no token of the tokenizer names
UNNAMED_ROWS = {"m2m100": 8, "nllb": 2}
TINY = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256)


def ted_sentences(lang: str, n: int = 300, split: str = "dev", skip: int = 0):
    """The first ``n`` sentences (after ``skip``) of Maruf et al.'s IWSLT17 TED ``split`` in
    ``lang`` (``<d>`` markers and blank lines left out, white space collapsed)."""
    path = IWSLT17 / f"concatenated_en2de_{split}_{lang}.txt"
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = " ".join(line.split())
            if s and s != "<d>":
                out.append(s)
                if len(out) == skip + n:
                    break
    return out[skip:]


def _spm(sentences, vocab_size: int, model_type: str = "bpe") -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
                                   minloglevel=2, num_threads=1)
    return buf.getvalue()


def _write(path: Path, data) -> Path:
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data, encoding="utf-8")
    return path


def _marian_tokenizer(work: Path, separate: bool):
    """OPUS-MT's files: ``source.spm``, ``target.spm`` (SentencePiece unigram models of each
    side), ``vocab.json`` (Marian's ids: ``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last;
    joint over both sides unless ``separate``, then ``target_vocab.json`` too)."""
    from transformers import MarianTokenizer

    spms = {}
    for side, lang in (("source", "en"), ("target", "de")):
        spms[side] = _write(work / f"{side}.spm", _spm(ted_sentences(lang), 100, "unigram"))

    def vocab(sides):
        import sentencepiece as spm

        v = {"</s>": 0, "<unk>": 1}
        for side in sides:
            sp = spm.SentencePieceProcessor(model_file=str(spms[side]))
            for i in range(sp.get_piece_size()):
                p = sp.id_to_piece(i)
                if not sp.is_control(i) and not sp.is_unknown(i) and p not in v:
                    v[p] = len(v)
        v["<pad>"] = len(v)
        return v

    files = {}
    if separate:
        files["vocab"] = _write(work / "vocab.json", json.dumps(vocab(["source"])))
        files["target_vocab_file"] = _write(work / "target_vocab.json", json.dumps(vocab(["target"])))
    else:
        files["vocab"] = _write(work / "vocab.json", json.dumps(vocab(["source", "target"])))
    return MarianTokenizer(str(spms["source"]), str(spms["target"]), separate_vocabs=separate,
                           source_lang="en", target_lang="de", **{k: str(v) for k, v in files.items()})


def _m2m100_tokenizer(work: Path):
    """M2M-100's files: ``vocab.json`` (fairseq's ids: ``<s> <pad> </s> <unk>``, then the
    SentencePiece pieces) and ``sentencepiece.bpe.model``; its 100 language tokens ``__en__``
    follow the vocabulary."""
    import sentencepiece as spm
    from transformers import M2M100Tokenizer

    model = _write(work / "sentencepiece.bpe.model", _spm(ted_sentences("en") + ted_sentences("de"), 120))
    sp = spm.SentencePieceProcessor(model_file=str(model))
    v = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not sp.is_control(i) and not sp.is_unknown(i):
            v.setdefault(sp.id_to_piece(i), len(v))
    vocab = _write(work / "vocab.json", json.dumps(v))
    return M2M100Tokenizer(str(vocab), str(model), src_lang="en", tgt_lang="de")


def _sentencepiece_tokenizer(work: Path, cls_name: str, **kw):
    """NLLB-200's and mBART's tokenizers made as ``from_pretrained`` makes them from the
    release's ``sentencepiece.bpe.model`` alone (the pieces numbered from 4, fairseq's)."""
    import transformers

    src = work / "spm-release"
    src.mkdir()
    _write(src / "sentencepiece.bpe.model", _spm(ted_sentences("en") + ted_sentences("de"), 120))
    _write(src / "tokenizer_config.json", json.dumps({"tokenizer_class": cls_name}))
    return getattr(transformers, cls_name).from_pretrained(str(src), **kw)


def _fsmt_tokenizer(work: Path):
    """WMT19's files: ``vocab-src.json``, ``vocab-tgt.json`` (fairseq's dictionaries, ``<s> <pad>
    </s> <unk>`` first; separate) and ``merges.txt`` (BPE merges, learnt here by subword-nmt on
    the Moses-tokenized text of both sides)."""
    from sacremoses import MosesTokenizer
    from subword_nmt.learn_bpe import learn_bpe
    from transformers import FSMTTokenizer

    text = {lang: [" ".join(MosesTokenizer(lang).tokenize(s, escape=False)) for s in ted_sentences(lang)]
            for lang in ("en", "de")}
    merges = io.StringIO()
    learn_bpe(io.StringIO("\n".join(text["en"] + text["de"]) + "\n"), merges, 150)
    merges_file = _write(work / "merges.txt", "\n".join(merges.getvalue().splitlines()[1:]) + "\n")
    probe = FSMTTokenizer(langs=["en", "de"], src_vocab_file=str(_write(work / "v.json", "{}")),
                          tgt_vocab_file=str(work / "v.json"), merges_file=str(merges_file))
    files = {}
    for side, lang in (("src", "en"), ("tgt", "de")):
        v = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for s in text[lang]:
            for w in s.split():
                for piece in probe.bpe(w).split(" "):
                    v.setdefault(piece, len(v))
        files[side] = _write(work / f"vocab-{side}.json", json.dumps(v, ensure_ascii=False))
    return FSMTTokenizer(langs=["en", "de"], src_vocab_file=str(files["src"]), tgt_vocab_file=str(files["tgt"]),
                         merges_file=str(merges_file))


def _model(family: str, tok, separate: bool):
    """The family's tiny model: its config class with the options of its releases."""
    import torch
    from transformers import FSMTConfig, FSMTForConditionalGeneration, M2M100Config, M2M100ForConditionalGeneration
    from transformers import MarianConfig, MarianMTModel, MBartConfig, MBartForConditionalGeneration

    torch.manual_seed(0)
    # M2M100Tokenizer's len() and get_vocab() leave out its language tokens (ids after the vocabulary)
    rows = len(tok) + len(getattr(tok, "lang_token_to_id", ())) + UNNAMED_ROWS.get(family, 0)
    if family == "marian":  # Helsinki-NLP/opus-mt-en-de
        dec_rows = len(tok.target_encoder) if separate else rows
        cfg = MarianConfig(vocab_size=rows, decoder_vocab_size=dec_rows, activation_function="swish",
                           scale_embedding=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                           decoder_start_token_id=tok.pad_token_id, forced_eos_token_id=tok.eos_token_id,
                           bos_token_id=0, share_encoder_decoder_embeddings=not separate, **TINY)
        return MarianMTModel(cfg)
    if family in ("m2m100", "nllb"):  # facebook/m2m100_418M, facebook/nllb-200-distilled-600M
        cfg = M2M100Config(vocab_size=rows, activation_function="relu", scale_embedding=True, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                           **({"tokenizer_class": "NllbTokenizer"} if family == "nllb" else {}), **TINY)
        return M2M100ForConditionalGeneration(cfg)
    if family in ("mbart50", "mbart25"):  # facebook/mbart-large-50-many-to-many-mmt, facebook/mbart-large-cc25
        cfg = MBartConfig(vocab_size=rows, activation_function="gelu", scale_embedding=family == "mbart50",
                          pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                          tokenizer_class="MBart50Tokenizer" if family == "mbart50" else "MBartTokenizer", **TINY)
        return MBartForConditionalGeneration(cfg)
    # facebook/wmt19-en-de
    cfg = FSMTConfig(langs=["en", "de"], src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size,
                     activation_function="relu", scale_embedding=True, tie_word_embeddings=False, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, **TINY)
    return FSMTForConditionalGeneration(cfg)


def make_hf_folder(root, family: str, separate_vocabs: bool = False) -> Path:
    """A tiny transformers model folder of ``family`` (:data:`FAMILIES`) in ``root/family``
    (``separate_vocabs``: Marian with a target vocabulary of its own); returns its path."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(root)
    d = root / (family + ("-separate" if separate_vocabs else ""))
    work = root / f".{d.name}-files"
    d.mkdir(parents=True)
    work.mkdir()
    if family == "marian":
        tok = _marian_tokenizer(work, separate_vocabs)
    elif family == "m2m100":
        tok = _m2m100_tokenizer(work)
    elif family == "nllb":
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        tok = _sentencepiece_tokenizer(work, "NllbTokenizer", additional_special_tokens=FAIRSEQ_LANGUAGE_CODES,
                                       src_lang="eng_Latn", tgt_lang="deu_Latn")
    elif family == "mbart50":
        tok = _sentencepiece_tokenizer(work, "MBart50Tokenizer", src_lang="en_XX", tgt_lang="de_DE")
    elif family == "mbart25":
        tok = _sentencepiece_tokenizer(work, "MBartTokenizer", src_lang="en_XX", tgt_lang="de_DE")
    else:
        tok = _fsmt_tokenizer(work)
    tok.save_pretrained(str(d))
    _model(family, tok, separate_vocabs).save_pretrained(str(d))
    return d


def make_random_folder(root, family: str, separate_vocabs: bool = False, options=None, seed: int = 0):
    """:func:`make_hf_folder`'s folder with its config given ``options`` (sizes, release options)
    and a model of it with spread random weights saved over the folder's (normal, standard
    deviation 0.5 for the matrices and 0.2 for the vectors, LayerNorm gains around 1,
    ``final_logits_bias`` normal; the sinusoidal tables left as they are), so that its
    logits and translations vary with the input; returns (dir, the transformers model)."""
    import torch
    import transformers

    d = make_hf_folder(root, family, separate_vocabs)
    cfg = transformers.AutoConfig.from_pretrained(str(d))
    for k, v in (options or {}).items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    model = transformers.AutoModelForSeq2SeqLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and ".embed_positions." not in name or family.startswith("mbart"):
                p.normal_(0, 0.5 if p.dim() > 1 else 0.2)
                if "norm" in name and name.endswith(".weight"):
                    p.add_(1.0)  # a LayerNorm gain around 1
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0, 1.0)
    model.save_pretrained(str(d))
    return d, model
