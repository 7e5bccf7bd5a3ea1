"""Tiny Hugging Face ``transformers`` translation folders in the layouts of OPUS-MT and
NLLB-200, made with transformers' and SentencePiece's own code: the SMOKE run of
examples/pretrained/run.sh (``opusmt-concat``, ``nllb-hf-concat``; no network) starts from them.
Documented in examples/pretrained/README.md and docs/recipes.md.

    python examples/lib/tiny_hf_release.py opusmt DIR --source FILE --target FILE
    python examples/lib/tiny_hf_release.py nllb-hf DIR --source FILE --target FILE

FILE: raw sentences, one a line (``<d>`` lines skipped), the two files line-aligned. DIR must
not exist or be empty. The folders (docs/pretrained.md, "Starting from a transformers folder"):

* ``opusmt``: ``Helsinki-NLP/opus-mt-en-de``'s files: ``source.spm`` and ``target.spm``
  (SentencePiece unigram models of each side), ``vocab.json`` (one vocabulary of both sides in
  Marian's numbering: ``</s>`` 0, ``<unk>`` 1, the pieces, ``<pad>`` last), the tokenizer's
  ``tokenizer_config.json``, and a ``MarianMTModel`` with the options of that release's
  ``config.json`` (swish, scaled embeddings, one shared table tied to the output, the decoder
  started from ``<pad>``, ``final_logits_bias``);
* ``nllb-hf``: ``facebook/nllb-200-distilled-600M``'s: an ``NllbTokenizer`` (its 202 language
  codes, ``eng_Latn`` ... ``deu_Latn``) made from a ``sentencepiece.bpe.model`` learnt here, saved
  with ``save_pretrained``, and an ``M2M100ForConditionalGeneration`` with that release's options
  (pre-norm, relu, scaled embeddings), ``vocab_size`` the tokenizer's ids plus NLLB-200's two
  rows no token names.

Both networks are 1+1 layers of ``d_model`` 16 with random weights (seed 0): the SMOKE run checks
the chain, not the translations. ``transformers`` and ``sentencepiece`` are needed.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_release import ReleaseError, read_pairs  # noqa: E402  (the sentence pairs, as tiny_release reads them)

LAYOUTS = ("opusmt", "nllb-hf")
#: the tiny network (config keys of every family)
TINY = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=512)
#: NLLB-200's embedding rows that no token of its tokenizer names
NLLB_UNNAMED_ROWS = 2


def _spm(sentences, path: Path, vocab_size: int, model_type: str) -> Path:
    """A SentencePiece model of ``sentences`` written to ``path`` (one thread, quiet)."""
    import sentencepiece as spm

    with open(path, "wb") as f:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=f, vocab_size=vocab_size,
                                       model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
                                       minloglevel=2, num_threads=1)
    return path


def opusmt_folder(root: Path, pairs):
    """OPUS-MT's tokenizer files and a tiny ``MarianMTModel`` in ``root`` (the module doc)."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        models = {side: _spm([p[i] for p in pairs], Path(tmp) / f"{side}.spm", 200, "unigram")
                  for i, side in enumerate(("source", "target"))}
        vocab = {"</s>": 0, "<unk>": 1}
        for side in ("source", "target"):
            sp = spm.SentencePieceProcessor(model_file=str(models[side]))
            for i in range(sp.get_piece_size()):
                if not sp.is_control(i) and not sp.is_unknown(i):
                    vocab.setdefault(sp.id_to_piece(i), len(vocab))
        vocab["<pad>"] = len(vocab)
        (Path(tmp) / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        tok = MarianTokenizer(str(models["source"]), str(models["target"]), str(Path(tmp) / "vocab.json"),
                              source_lang="en", target_lang="de")
        tok.save_pretrained(str(root))
    torch.manual_seed(0)
    cfg = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), activation_function="swish",
                       scale_embedding=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                       decoder_start_token_id=tok.pad_token_id, forced_eos_token_id=tok.eos_token_id,
                       bos_token_id=0, share_encoder_decoder_embeddings=True, **TINY)
    MarianMTModel(cfg).save_pretrained(str(root))


def nllb_folder(root: Path, pairs):
    """NLLB-200's tokenizer and a tiny ``M2M100ForConditionalGeneration`` in ``root`` (the module doc)."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    with tempfile.TemporaryDirectory() as tmp:
        _spm([s for p in pairs for s in p], Path(tmp) / "sentencepiece.bpe.model", 300, "bpe")
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
        tok = NllbTokenizer.from_pretrained(tmp, additional_special_tokens=FAIRSEQ_LANGUAGE_CODES,
                                            src_lang="eng_Latn", tgt_lang="deu_Latn")
        tok.save_pretrained(str(root))
    torch.manual_seed(0)
    cfg = M2M100Config(vocab_size=len(tok) + NLLB_UNNAMED_ROWS, activation_function="relu", scale_embedding=True,
                       pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                       tokenizer_class="NllbTokenizer", **TINY)
    M2M100ForConditionalGeneration(cfg).save_pretrained(str(root))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tiny_hf_release.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("layout", choices=LAYOUTS)
    parser.add_argument("dir")
    parser.add_argument("--source", required=True, help="English sentences, one a line")
    parser.add_argument("--target", required=True, help="German sentences, line-aligned")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is made here: never ask the hub
    try:
        if os.path.exists(args.dir) and (not os.path.isdir(args.dir) or os.listdir(args.dir)):
            raise ReleaseError(f"{args.dir}: exists and is not an empty folder")
        pairs = read_pairs(args.source, args.target)
        root = Path(args.dir)
        root.mkdir(parents=True, exist_ok=True)
        {"opusmt": opusmt_folder, "nllb-hf": nllb_folder}[args.layout](root, pairs)
    except ReleaseError as e:
        sys.exit(f"tiny_hf_release.py: error: {e}")
    print(f"tiny_hf_release.py: {args.layout} folder of {len(pairs)} sentence pairs in {root}: "
          + ", ".join(sorted(os.listdir(root))))


if __name__ == "__main__":
    main()
