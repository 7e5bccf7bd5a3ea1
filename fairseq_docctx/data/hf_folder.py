"""A Hugging Face ``transformers`` translation model folder: its family and its vocabularies
as fairseq dictionaries.

A folder holds ``config.json`` (its ``model_type`` names the network: ``marian`` for OPUS-MT,
``m2m_100`` for M2M-100 and NLLB-200, ``mbart`` for mBART-25/50, ``fsmt`` for the WMT19 port),
the weights and the tokenizer's files. The plugin's data and models are fairseq's, whose
:class:`~fairseq.data.Dictionary` keeps its four special symbols at fixed indices
(``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3; fairseq's positions are counted from the pad
index, so the pad index cannot move). :func:`fairseq_vocabulary` orders a tokenizer's
vocabulary that way: the tokenizer's own bos / pad / eos / unk tokens take fairseq's indices
0-3, every other id follows in the tokenizer's order. For M2M-100, NLLB-200, mBART and FSMT,
whose tokenizers number their vocabularies as fairseq does, this is the identity; for Marian
(``</s>`` 0, ``<unk>`` 1, ``<pad>`` last, no ``<s>``) the ids are renumbered and
``hf_rows`` records, per fairseq index, the row of the checkpoint's embedding table (``None``
for fairseq's ``<s>``, which Marian lacks). Rows of the embedding table that no token names
(M2M-100's ``madeupwordNNNN`` rows) keep fairseq's placeholder names.

Nothing here imports ``transformers``: the folder's files are read as JSON, so that a data
folder can be checked without it.
"""
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
#: config.json's model_type -> the plugin's name of the network
MODEL_TYPES = {"marian": "marian", "m2m_100": "m2m_100", "mbart": "mbart", "fsmt": "fsmt"}
#: fairseq's special symbols in their index order (fairseq.data.Dictionary)
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
#: the tokenizer attributes that hold them, in the same order
TOKENIZER_SPECIALS = ("bos_token", "pad_token", "eos_token", "unk_token")


class HFFolderError(ValueError):
    """A folder that cannot be used; ``str(err)`` is one line naming the file."""


def is_hf_folder(d: str) -> bool:
    """Whether ``d`` is a directory with a ``config.json`` (a transformers model folder)."""
    return os.path.isdir(d) and os.path.isfile(os.path.join(d, CONFIG))


def read_json(path: str) -> dict:
    """A JSON object from ``path``; a missing or malformed file is one line naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise HFFolderError(f"{path}: no such file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise HFFolderError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(obj, dict):
        raise HFFolderError(f"{path}: not a JSON object")
    return obj


def read_config(d: str) -> dict:
    """``config.json`` of a folder, with a ``model_type`` this plugin reads (:data:`MODEL_TYPES`)."""
    path = os.path.join(d, CONFIG)
    cfg = read_json(path)
    kind = cfg.get("model_type")
    if kind not in MODEL_TYPES:
        raise HFFolderError(f"{path}: model_type {kind!r} is not one this plugin starts from "
                            f"({', '.join(MODEL_TYPES)})")
    return cfg


@dataclass
class Vocabulary:
    """One side's vocabulary in fairseq's order: ``symbols[i]`` is fairseq index ``i``'s
    symbol, ``hf_rows[i]`` the checkpoint's embedding row it takes (``None``: the checkpoint
    has no row for it)."""

    symbols: List[str]
    hf_rows: List[Optional[int]]

    def hf_ids(self, fairseq_ids) -> List[Optional[int]]:
        """The tokenizer's ids of fairseq ids."""
        return [self.hf_rows[i] for i in fairseq_ids]

    def fairseq_ids(self, hf_ids) -> List[int]:
        """The fairseq ids of tokenizer ids (an id without a fairseq symbol is a KeyError)."""
        back = {r: i for i, r in enumerate(self.hf_rows) if r is not None}
        return [back[int(i)] for i in hf_ids]

    @property
    def identity(self) -> bool:
        """Whether fairseq's ids are the tokenizer's."""
        return all(r == i for i, r in enumerate(self.hf_rows))


def fairseq_vocabulary(vocab: Dict[str, int], rows: int, specials: Dict[str, Optional[str]],
                       where: str = "the tokenizer") -> Vocabulary:
    """A tokenizer's vocabulary (token -> id) as a fairseq dictionary's symbols for an embedding
    table of ``rows`` rows (the module doc). ``specials`` maps :data:`TOKENIZER_SPECIALS` to the
    tokenizer's tokens (``None``: it has none)."""
    by_id: Dict[int, str] = {}
    for tok, i in vocab.items():
        i = int(i)
        if i >= rows:
            raise HFFolderError(f"{where}: token {tok!r} has id {i}, the model has {rows} embedding rows")
        if i in by_id:
            raise HFFolderError(f"{where}: tokens {by_id[i]!r} and {tok!r} share id {i}")
        by_id[i] = tok
    special_rows: List[Optional[int]] = []
    for attr, name in zip(TOKENIZER_SPECIALS, FAIRSEQ_SPECIALS):
        tok = specials.get(attr)
        if tok is None:
            special_rows.append(None)
            continue
        if tok not in vocab:
            raise HFFolderError(f"{where}: its {attr} {tok!r} is not in its vocabulary")
        special_rows.append(int(vocab[tok]))
    taken = {r for r in special_rows if r is not None}
    symbols, hf_rows = list(FAIRSEQ_SPECIALS), list(special_rows)
    placeholder = 0
    for i in range(rows):
        if i in taken:
            continue
        tok = by_id.get(i)
        if tok is None:
            while f"madeupword{placeholder:04d}" in vocab:
                placeholder += 1
            tok = f"madeupword{placeholder:04d}"
            placeholder += 1
        elif tok in FAIRSEQ_SPECIALS:
            raise HFFolderError(f"{where}: token {tok!r} (id {i}) is not its "
                                f"{TOKENIZER_SPECIALS[FAIRSEQ_SPECIALS.index(tok)]}: fairseq reserves the name")
        elif any(c.isspace() for c in tok) or not tok:
            raise HFFolderError(f"{where}: token {tok!r} (id {i}) is empty or holds white space: "
                                "a fairseq dictionary cannot hold it")
        symbols.append(tok)
        hf_rows.append(i)
    return Vocabulary(symbols, hf_rows)
