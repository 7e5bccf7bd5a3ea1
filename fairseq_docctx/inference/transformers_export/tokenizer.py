"""The exported folder's tokenizer: a ``tokenizers`` ``tokenizer.json`` whose vocabulary is the
fairseq dictionary, id for id, loaded by ``AutoTokenizer`` as a ``PreTrainedTokenizerFast``.

It reads text as the data was binarized, *segmented already*: the pieces separated by spaces
(``WordLevel`` over the dictionary's symbols, split on whitespace, a piece not in the
dictionary ``<unk>``, as fairseq's ``Dictionary.encode_line`` reads a line), and appends
``</s>``. The dictionary's bracketed symbols other than fairseq's four (the context separator
``<sep>``, a mask symbol, ...) are special tokens. Decoding gives the pieces joined by spaces;
when the data was segmented with SentencePiece (its model is copied into the folder as
:data:`SPM_FILE`) the pieces are joined back into text (``Metaspace`` decoder: ``▁`` becomes a
space), as fairseq's ``--post-process sentencepiece`` does. The segmentation itself
(SentencePiece, BPE) is not part of ``tokenizer.json``: the input is segmented first (the
model card says how), which the folder's ``config.json`` records (``docctx.segmentation``).

With separate source and target dictionaries the target's tokenizer is written the same way
into the subfolder :data:`TARGET_SUBFOLDER` (``AutoTokenizer.from_pretrained(DIR,
subfolder="target_tokenizer")``): decode the model's output with it.
"""
import json
import os
import re
from typing import List, Optional

#: the SentencePiece model's name in the exported folder
SPM_FILE = "sentencepiece.model"
#: the subfolder of the target tokenizer when the dictionaries differ
TARGET_SUBFOLDER = "target_tokenizer"
#: a dictionary symbol that is a special token (``<sep>``, ``<mask>``, ``<s>``...)
_SPECIAL = re.compile(r"<[^<>\s]+>")


def special_symbols(d) -> List[str]:
    """The symbols of the fairseq dictionary ``d`` that the tokenizer keeps whole and marks
    special: fairseq's four, then every other bracketed symbol, in id order."""
    four = [d.bos_word, d.pad_word, d.eos_word, d.unk_word]
    return four + [s for s in d.symbols if _SPECIAL.fullmatch(s) and s not in four]


def build_tokenizer(d, sentencepiece: bool):
    """The ``tokenizers.Tokenizer`` of the fairseq dictionary ``d`` (ids identical)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {}
    for i, s in enumerate(d.symbols):
        vocab.setdefault(s, i)  # a repeated symbol: fairseq's lookup gives its first id
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=d.unk_word))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {d.eos_word}", pair=f"$A {d.eos_word} $B {d.eos_word}",
        special_tokens=[(d.eos_word, d.eos())])
    if sentencepiece:
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special_symbols(d)])
    return tok


def save_tokenizer(d, folder: str, sentencepiece: bool, model_max_length: int) -> List[str]:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` of ``d``
    in ``folder``; returns the names written."""
    os.makedirs(folder, exist_ok=True)
    build_tokenizer(d, sentencepiece).save(os.path.join(folder, "tokenizer.json"))
    extra = [s for s in special_symbols(d)[4:]]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": d.bos_word, "eos_token": d.eos_word,
              "unk_token": d.unk_word, "pad_token": d.pad_word, "additional_special_tokens": extra,
              "model_max_length": model_max_length, "padding_side": "right", "clean_up_tokenization_spaces": False}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
    specials = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token",
                                       "additional_special_tokens")}
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f, indent=1, ensure_ascii=False)
    return ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


def write_tokenizers(source_dict, target_dict, folder: str, spm_model: Optional[str],
                     model_max_length: int, pretrained=None) -> dict:
    """The tokenizer of the source dictionary in ``folder`` (and that of a different target
    dictionary in :data:`TARGET_SUBFOLDER`), the SentencePiece model copied as
    :data:`SPM_FILE` (or the segmentation file of a pretrained release's data, ``pretrained``:
    its :class:`~fairseq_docctx.data.pretrained.PretrainedText`, copied under its own name);
    returns the ``docctx.segmentation`` record: ``kind`` (``pre-segmented``,
    ``sentencepiece``, or the release's ``fastbpe``/``subword_nmt``/``none``), ``file``,
    ``moses`` (the release's text is Moses-tokenized first) and ``target_tokenizer``."""
    import shutil

    kind, source, name, moses = "pre-segmented", None, None, False
    if spm_model is not None:
        kind, source, name = "sentencepiece", spm_model, SPM_FILE
    elif pretrained is not None:
        kind, source, moses = pretrained.kind, pretrained.segmentation_file, bool(pretrained.moses)
        name = os.path.basename(source) if source else None
    sentencepiece = kind == "sentencepiece"
    save_tokenizer(source_dict, folder, sentencepiece, model_max_length)
    separate = source_dict.symbols != target_dict.symbols
    if separate:
        save_tokenizer(target_dict, os.path.join(folder, TARGET_SUBFOLDER), sentencepiece, model_max_length)
    if source:
        shutil.copyfile(source, os.path.join(folder, name))
    return {"kind": kind, "file": name, "moses": moses, "target_tokenizer": TARGET_SUBFOLDER if separate else None}
