"""Tiny releases in the layouts of public pretrained fairseq translation models, made with
fairseq's and SentencePiece's own code: the SMOKE run of examples/pretrained/run.sh (no
network) and the tests of ``docctx-prepare --pretrained`` use them. Documented in
docs/recipes.md and docs/pretrained.md.

    python examples/lib/tiny_release.py wmt19 DIR --source FILE --target FILE [--updates N]
    python examples/lib/tiny_release.py nllb DIR --source FILE --target FILE [--updates N]
    python examples/lib/tiny_release.py mbart25 DIR --source FILE --target FILE [--updates N]

FILE: raw sentences, one a line (``<d>`` lines, document markers, are skipped), the two files
line-aligned. DIR must not exist or be empty. The layouts (docs/pretrained.md):

* ``wmt19``: the single model of fairseq's WMT19 En-De release (Ng et al. 2019; the
  ``joined-dict`` archive): ``bpecodes`` (fastBPE codes ``LEFT RIGHT COUNT``, learnt here on
  the Moses-tokenized text), ``dict.en.txt`` and ``dict.de.txt`` (one joined dictionary of the
  pieces, as ``fairseq-preprocess`` writes it) and ``model.pt``;
* ``nllb``: NLLB-200 (NLLB Team 2022): ``sentencepiece.bpe.model``, ``dictionary.txt`` (the
  pieces; no language tokens), ``langs.txt`` (a comma-separated language list holding
  ``eng_Latn`` and ``deu_Latn``) and ``checkpoint.pt``, whose embeddings have a row per symbol
  of the dictionary, per language token ``__xxx_Xxxx__`` of ``langs.txt`` in its order, and
  per data-source tag (``<MINED_DATA>``, ``<MMT_BT_DATA>``, ``<SMT_BT_DATA>``), as the
  ``nllb`` branch's task builds it;
* ``mbart25``: mBART-25 (Liu et al. 2020, ``mbart.cc25``): ``sentence.bpe.model``, ``dict.txt``
  (the pieces; no language tokens) and ``model.pt``, a ``bart`` model (``mbart_large`` at tiny
  sizes) whose embeddings have a row per symbol of the dictionary, per language token
  ``[xx_XX]`` of mBART-25's 25 languages in their order and one for ``<mask>``, without
  ``decoder.output_projection.weight`` (as in the release, fairseq issue #1758).

:func:`transformer_release` makes sentence-level ``transformer`` releases as fairseq's own
examples train them, with each segmentation such a release comes with (a SentencePiece model,
subword-nmt or fastBPE codes, or none): ``model.pt``, ``dict.en.txt``, ``dict.de.txt`` and the
segmentation file (the tests of the ``transformer`` family use them).

The ``wmt19`` and ``nllb`` checkpoints are a tiny fairseq ``transformer`` trained for a few
updates by ``fairseq-train --task translation`` on the sentences binarized with the release's
own dictionary (for ``nllb`` with the language tokens first in every sentence, as
``--encoder-langtok src --decoder-langtok`` puts them); the ``mbart25`` one is trained by
``fairseq-train --task translation_from_pretrained_bart`` (en_XX -> de_DE), which places the
language tokens as mBART-25's fine-tuning does.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

#: the tiny network of the checkpoints (fairseq-train flags)
TINY_NETWORK = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
                "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
                "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings"]

#: SentencePiece layouts: family -> (model file, dictionary files, language list file, its text)
SP_LAYOUTS = {
    "m2m100": ("spm.128k.model", ["model_dict.128k.txt"], "language_pairs_small_models.txt",
               "en-de,de-en,en-fr,fr-en,af-en\n"),
    "nllb": ("sentencepiece.bpe.model", ["dictionary.txt"], "langs.txt", "ace_Arab,fra_Latn,eng_Latn,deu_Latn\n"),
    "mbart50": ("sentence.bpe.model", ["dict.en_XX.txt", "dict.de_DE.txt"], "ML50_langs.txt",
                "ar_AR\nen_XX\ncs_CZ\nde_DE\n"),
    "mbart25": ("sentence.bpe.model", ["dict.txt"], None, None),  # the languages: MBART25_LANGS
}
#: the data-source tags the NLLB task adds after the language tokens
NLLB_TAGS = ("<MINED_DATA>", "<MMT_BT_DATA>", "<SMT_BT_DATA>")


class ReleaseError(ValueError):
    """Bad input: ``str(err)`` is one line naming the file."""


# ------------------------------------------------------------------------------ the pieces


def fairseq_dictionary(lines_of_pieces, path, padding_factor=8):
    """A release dictionary as fairseq-preprocess writes it: counted, sorted, padded."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for line in lines_of_pieces:
        for p in line.split():
            d.add_symbol(p)
    d.finalize(padding_factor=padding_factor)
    d.save(str(path))


def sentencepiece_model(sentences, path, vocab_size=120, hard_vocab_limit=True):
    """A unigram SentencePiece model of ``sentences`` written to ``path``."""
    import sentencepiece as spm

    prefix = str(path)[: -len(".model")]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_prefix=prefix, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2,
                                   hard_vocab_limit=hard_vocab_limit)
    shutil.move(prefix + ".model", path)
    Path(prefix + ".vocab").unlink()


def fairseq_sentencepiece(path):
    """fairseq's ``sentencepiece`` BPE of the model file: ``encode`` gives the pieces."""
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

    return SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(path)))


def sp_release(root, sentences, family, vocab_size=120, hard_vocab_limit=True, names=None):
    """A SentencePiece release in ``family``'s layout (:data:`SP_LAYOUTS`; ``names``: (model
    file, dictionary files) of a layout of no language list instead), the model and the
    dictionary learnt on ``sentences`` (both languages); returns (dir, segment(text, lang))."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    spm_name, dict_names, langs_file, langs_text = SP_LAYOUTS[family] if names is None else (*names, None, None)
    sentencepiece_model(sentences, root / spm_name, vocab_size, hard_vocab_limit)
    enc = fairseq_sentencepiece(root / spm_name)
    pieces = [enc.encode(s) for s in sentences]
    for name in dict_names:
        fairseq_dictionary(pieces, root / name, padding_factor=8)
    if langs_file:
        (root / langs_file).write_text(langs_text)
    return root, lambda s, lang: enc.encode(s)


def learn_bpe(word_counts, merges):
    """A small BPE learner (Sennrich et al. 2016, Algorithm 1): codes ``((a, b), count)`` and
    each word's final segmentation (``</w>`` on the last symbol)."""
    from fairseq_docctx.data.pretrained import merge_pair

    vocab = {w: list(w[:-1]) + [w[-1] + "</w>"] for w in word_counts}
    codes = []
    for _ in range(merges):
        pairs = Counter()
        for w, syms in vocab.items():
            for pair in zip(syms, syms[1:]):
                pairs[pair] += word_counts[w]
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        codes.append((best, pairs[best]))
        for w, syms in vocab.items():
            vocab[w] = merge_pair(syms, best)
    return codes, vocab


def bpe_release(root, codes_text, dict_text, merges=120, joined=False):
    """A WMT19-layout release: ``bpecodes`` learnt on the Moses-tokenized ``codes_text``
    ({lang: sentences}), ``dict.{lang}.txt`` of the pieces of ``dict_text`` ({lang:
    sentences}; ``joined``: one dictionary of both languages in both files, as the
    ``joined-dict`` releases have). Returns (dir, segment(text, lang)); ``segment`` knows the
    words of ``codes_text``."""
    from fairseq_docctx.data.pretrained import moses as moses_tokenizer  # fairseq's, with its defaults

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    moses = {lang: moses_tokenizer(lang) for lang in codes_text}
    counts = Counter(w for lang, sents in codes_text.items() for s in sents for w in moses[lang].encode(s).split())
    codes, segs = learn_bpe(counts, merges)
    (root / "bpecodes").write_text("".join(f"{a} {b} {c}\n" for (a, b), c in codes), encoding="utf-8")

    def segment(s, lang):
        words = moses[lang].encode(s).split()
        return " ".join("@@ ".join(segs[w])[: -len("</w>")] for w in words)

    pieces = {lang: [segment(s, lang) for s in sents] for lang, sents in dict_text.items()}
    for lang in dict_text:
        fairseq_dictionary(sum(pieces.values(), []) if joined else pieces[lang], root / f"dict.{lang}.txt")
    return root, segment


# ------------------------------------------------------------------------------ the checkpoint


#: ``fairseq-train`` with ``translation_from_pretrained_bart`` able to read its options: the
#: task reads ``self.args``, which its dataclass-configured parent no longer sets (it keeps
#: them as ``self.cfg``); nothing else is changed
_TRAIN_BART = ("import sys; import fairseq.tasks.translation_from_pretrained_bart as t; "
               "t.TranslationFromPretrainedBARTTask.args = property(lambda self: self.cfg); "
               "from fairseq_cli.train import cli_main; sys.argv[0] = 'fairseq-train'; cli_main()")


def _fairseq(module, args):
    """A fairseq command (``fairseq_cli.<module>``) in a subprocess; its log on failure."""
    args = [str(a) for a in args]
    cmd = ([sys.executable, "-c", _TRAIN_BART] if module == "train" and "translation_from_pretrained_bart" in args
           else [sys.executable, "-m", f"fairseq_cli.{module}"])
    p = subprocess.run(cmd + args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"fairseq-{module} failed:\n{p.stdout[-2000:]}{p.stderr[-3000:]}")


def train_checkpoint(dest, dictionary, src, tgt, source_lines, target_lines, updates=20, network=(),
                     model=("--task", "translation", "--arch", "transformer")):
    """A tiny model (``model``: fairseq-train's task and architecture, a ``transformer`` by
    default) trained ``updates`` updates on the lines (pieces, joined by spaces) binarized
    with ``dictionary`` (the one file of both sides), saved as ``dest``."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for lang, lines in ((src, source_lines), (tgt, target_lines)):
            (tmp / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        _fairseq("preprocess", ["-s", src, "-t", tgt, "--srcdict", dictionary, "--tgtdict", dictionary,
                                "--trainpref", tmp / "train", "--validpref", tmp / "train", "--destdir", tmp / "bin",
                                "--workers", "1"])
        _fairseq("train", [tmp / "bin", *model, *TINY_NETWORK, *network,
                           "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", updates,
                           "--cpu", "--num-workers", "0", "--save-dir", tmp / "ckpt", "--no-epoch-checkpoints",
                           "--no-save-optimizer-state", "--disable-validation", "--seed", "1",
                           "--log-format", "simple",
                           # no batch-making thread: fairseq's own task (no plugin to stop it at exit)
                           # would leave it running as the interpreter ends, which aborts the
                           # process at times ("terminate called without an active exception")
                           "--data-buffer-size", "0"])
        shutil.copyfile(tmp / "ckpt" / "checkpoint_last.pt", dest)


def subword_nmt_release(root, codes_text, dict_text, merges=200, codes_name="bpecodes"):
    """A release whose BPE codes are subword-nmt's, as fairseq's ``examples/translation``
    scripts make them: the text Moses-tokenized (fairseq's ``moses`` tokenizer), the codes learnt
    by subword-nmt's own ``learn_bpe`` (``#version: 0.2``, two columns) and applied by fairseq's
    own ``subword_nmt`` BPE; ``dict.{lang}.txt``: one joined dictionary of the pieces of
    ``dict_text``. Returns (dir, segment(text, lang))."""
    import io

    from subword_nmt.learn_bpe import learn_bpe as subword_nmt_learn

    from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE, SubwordNMTBPEConfig
    from fairseq_docctx.data.pretrained import moses as moses_tokenizer  # fairseq's, with its defaults

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    moses = {lang: moses_tokenizer(lang) for lang in codes_text}
    tokenized = "".join(moses[lang].encode(s) + "\n" for lang, sents in codes_text.items() for s in sents)
    with open(root / codes_name, "w", encoding="utf-8") as out:
        subword_nmt_learn(io.StringIO(tokenized), out, merges, min_frequency=1)
    bpe = SubwordNMTBPE(SubwordNMTBPEConfig(bpe_codes=str(root / codes_name)))

    def segment(s, lang):
        return bpe.encode(moses[lang].encode(s))

    pieces = [segment(s, lang) for lang, sents in dict_text.items() for s in sents]
    for lang in dict_text:
        fairseq_dictionary(pieces, root / f"dict.{lang}.txt")
    return root, segment


#: the segmentations of :func:`transformer_release` (fastbpe: the WMT19 layout)
TRANSFORMER_SEGMENTATIONS = ("sentencepiece", "subword_nmt", "fastbpe", "none")


def transformer_release(root, pairs, segmentation, updates=20, spm_name="sentencepiece.bpe.model"):
    """A sentence-level fairseq ``transformer`` as fairseq's own examples train one and people
    share it: ``model.pt`` (``fairseq-preprocess`` with the release's dictionary, then
    ``fairseq-train --task translation``), ``dict.en.txt`` and ``dict.de.txt`` (one joined
    dictionary of the pieces) and the segmentation file of ``segmentation``:

    * ``sentencepiece``: a SentencePiece model named ``spm_name`` (the issue's
      ``sentencepiece.bpe.model`` by default), its pieces as fairseq's ``sentencepiece`` BPE gives them;
    * ``subword_nmt``: ``bpecodes`` of subword-nmt (:func:`subword_nmt_release`), after Moses;
    * ``fastbpe``: ``bpecodes`` of fastBPE (:func:`bpe_release`), after Moses;
    * ``none``: no file: the text is pre-tokenized, its words are the tokens.

    ``pairs``: (English, German) raw sentences. Returns (dir, segment(text, lang)), ``segment``
    the release's own pieces of a sentence (from fairseq's and subword-nmt's code, not the plugin's)."""
    text = {"en": [s for s, _ in pairs], "de": [t for _, t in pairs]}
    root = Path(root)
    if segmentation == "sentencepiece":
        root, segment = sp_release(root, text["en"] + text["de"], "transformer_spm", vocab_size=300,
                                   hard_vocab_limit=False, names=(spm_name, ["dict.en.txt", "dict.de.txt"]))
    elif segmentation == "subword_nmt":
        root, segment = subword_nmt_release(root, text, text)
    elif segmentation == "fastbpe":
        root, segment = bpe_release(root, text, text, merges=200, joined=True)
    elif segmentation == "none":
        root.mkdir(parents=True, exist_ok=True)

        def segment(s, lang):
            return " ".join(s.split())

        for lang in text:
            fairseq_dictionary([segment(s, lang) for sents in text.values() for s in sents], root / f"dict.{lang}.txt")
    else:
        raise ReleaseError(f"segmentation {segmentation!r}: one of {', '.join(TRANSFORMER_SEGMENTATIONS)}")
    train_checkpoint(root / "model.pt", root / "dict.en.txt", "en", "de", [segment(s, "en") for s in text["en"]],
                     [segment(t, "de") for t in text["de"]], updates)
    return root, segment


def wmt19_release(root, pairs, updates=20, merges=200):
    """``bpecodes``, ``dict.en.txt``, ``dict.de.txt`` (joined) and ``model.pt`` of ``pairs``
    ((English, German) raw sentences)."""
    text = {"en": [s for s, _ in pairs], "de": [t for _, t in pairs]}
    root, segment = bpe_release(root, text, text, merges=merges, joined=True)
    train_checkpoint(root / "model.pt", root / "dict.en.txt", "en", "de", [segment(s, "en") for s in text["en"]],
                     [segment(t, "de") for t in text["de"]], updates)
    return root


def nllb_release(root, pairs, updates=20, vocab_size=500):
    """``sentencepiece.bpe.model``, ``dictionary.txt``, ``langs.txt`` and ``checkpoint.pt``
    (the dictionary + the language tokens of ``langs.txt`` + the data-source tags: its
    embedding rows) of ``pairs`` ((English, German) raw sentences)."""
    from fairseq.data import Dictionary
    from fairseq.data.multilingual.multilingual_utils import augment_dictionary, get_lang_tok

    sents = [s for pair in pairs for s in pair]
    root, segment = sp_release(root, sents, "nllb", vocab_size=vocab_size, hard_vocab_limit=False)
    langs = (root / "langs.txt").read_text().strip().split(",")
    model_dict = Dictionary.load(str(root / "dictionary.txt"))
    augment_dictionary(model_dict, langs, "multilingual")  # the language tokens, as the task adds them
    for tag in NLLB_TAGS:
        model_dict.add_symbol(tag)
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "dict.txt"
        model_dict.save(str(full))
        src_tok, tgt_tok = (get_lang_tok(lang, "multilingual") for lang in ("eng_Latn", "deu_Latn"))
        train_checkpoint(root / "checkpoint.pt", full, "eng_Latn", "deu_Latn",
                         [f"{src_tok} {segment(s, 'en')}" for s, _ in pairs],
                         [f"{tgt_tok} {segment(t, 'de')}" for _, t in pairs], updates,
                         network=["--encoder-normalize-before", "--decoder-normalize-before"])
    return root


def mbart25_release(root, pairs, updates=20, vocab_size=500):
    """``sentence.bpe.model``, ``dict.txt`` and ``model.pt`` (a tiny ``mbart_large`` trained
    by ``translation_from_pretrained_bart``, which adds the 25 language tokens and
    ``<mask>`` to the dictionary and places ``[en_XX]``/``[de_DE]`` itself; its
    ``decoder.output_projection.weight`` removed as in the release) of ``pairs``."""
    import torch

    from fairseq_docctx.data.pretrained import MBART25_LANGS

    sents = [s for pair in pairs for s in pair]
    root, segment = sp_release(root, sents, "mbart25", vocab_size=vocab_size, hard_vocab_limit=False)
    train_checkpoint(root / "model.pt", root / "dict.txt", "en_XX", "de_DE", [segment(s, "en") for s, _ in pairs],
                     [segment(t, "de") for _, t in pairs], updates,
                     model=("--task", "translation_from_pretrained_bart", "--langs", ",".join(MBART25_LANGS),
                            "--arch", "mbart_large", "--activation-fn", "gelu",
                            # pre-norm, as mBART-25 was trained (mbart_large is post-norm unless told)
                            "--encoder-normalize-before", "--decoder-normalize-before", "--layernorm-embedding"))
    state = torch.load(root / "model.pt", map_location="cpu", weights_only=False)
    state["model"].pop("decoder.output_projection.weight", None)
    torch.save(state, root / "model.pt")
    return root


def read_pairs(source, target):
    """(source, target) sentence pairs of two line-aligned files; ``<d>`` lines skipped."""
    sides = []
    for path in (source, target):
        try:
            with open(path, encoding="utf-8") as f:
                sides.append([ln.strip() for ln in f.read().splitlines() if ln.strip() != "<d>"])
        except (OSError, UnicodeDecodeError) as e:
            raise ReleaseError(f"{path}: cannot read it ({e.__class__.__name__})") from None
    if len(sides[0]) != len(sides[1]):
        raise ReleaseError(f"{source}, {target}: {len(sides[0])} and {len(sides[1])} sentences: not line-aligned")
    pairs = [(s, t) for s, t in zip(*sides) if s and t]
    if not pairs:
        raise ReleaseError(f"{source}: no sentence pairs")
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tiny_release.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("layout", choices=("wmt19", "nllb", "mbart25"))
    parser.add_argument("dir")
    parser.add_argument("--source", required=True, help="English sentences, one a line")
    parser.add_argument("--target", required=True, help="German sentences, line-aligned")
    parser.add_argument("--updates", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        if os.path.exists(args.dir) and (not os.path.isdir(args.dir) or os.listdir(args.dir)):
            raise ReleaseError(f"{args.dir}: exists and is not an empty folder")
        pairs = read_pairs(args.source, args.target)
        make = {"wmt19": wmt19_release, "nllb": nllb_release, "mbart25": mbart25_release}[args.layout]
        root = make(Path(args.dir), pairs, args.updates)
    except ReleaseError as e:
        sys.exit(f"tiny_release.py: error: {e}")
    print(f"tiny_release.py: {args.layout} release of {len(pairs)} sentence pairs in {root}: "
          + ", ".join(sorted(os.listdir(root))))


if __name__ == "__main__":
    main()
