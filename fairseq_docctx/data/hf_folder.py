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


#: the tokenizer's special tokens when ``tokenizer_config.json`` does not name them
#: (transformers' tokenizer classes' defaults; Marian's tokenizer has no bos token)
DEFAULT_SPECIALS = {
    "marian": {"bos_token": None, "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"},
    None: {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"},
}


def _token(value) -> Optional[str]:
    """A special token as ``tokenizer_config.json`` writes it: a string or an ``AddedToken``
    dict (``{"content": ...}``)."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def tokenizer_specials(d: str, kind: str) -> Dict[str, Optional[str]]:
    """The tokenizer's bos / pad / eos / unk tokens: ``tokenizer_config.json``'s, else the
    family's defaults (:data:`DEFAULT_SPECIALS`)."""
    out = dict(DEFAULT_SPECIALS.get(kind, DEFAULT_SPECIALS[None]))
    path = os.path.join(d, TOKENIZER_CONFIG)
    if os.path.isfile(path):
        cfg = read_json(path)
        for attr in TOKENIZER_SPECIALS:
            if attr in cfg:
                out[attr] = _token(cfg[attr])
    return out


def _added_tokens(d: str) -> Dict[str, int]:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` (id -> token) as token -> id."""
    path = os.path.join(d, TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        return {}
    added = read_json(path).get("added_tokens_decoder") or {}
    return {_token(v): int(k) for k, v in added.items()}


def _fast_vocab(path: str) -> Dict[str, int]:
    """token -> id of a fast tokenizer's ``tokenizer.json``: its model's vocabulary (a dict for
    BPE / WordPiece / WordLevel, a list of ``[piece, score]`` for Unigram, ids in list order)
    and its ``added_tokens``."""
    obj = read_json(path)
    vocab = (obj.get("model") or {}).get("vocab")
    if isinstance(vocab, list):
        out = {entry[0]: i for i, entry in enumerate(vocab)}
    elif isinstance(vocab, dict):
        out = {k: int(v) for k, v in vocab.items()}
    else:
        raise HFFolderError(f"{path}: no model vocabulary")
    for tok in obj.get("added_tokens") or []:
        out[tok["content"]] = int(tok["id"])
    return out


def _auto_vocab(d: str, side: str) -> Dict[str, int]:
    """The vocabulary of ``AutoTokenizer.from_pretrained(d)`` (FSMT: the side's), for a folder
    whose tokenizer files are not the JSON ones :func:`_side_vocab` reads."""
    try:
        from transformers import AutoTokenizer  # the folder's own tokenizer decides
    except ImportError:  # pragma: no cover
        raise HFFolderError(f"{d}: reading its tokenizer needs transformers (pip install transformers)") from None
    try:
        tok = AutoTokenizer.from_pretrained(d)
    except Exception as e:  # noqa: BLE001 - any unreadable tokenizer is one line
        raise HFFolderError(f"{d}: AutoTokenizer cannot read its tokenizer ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if side == "target" and hasattr(tok, "get_tgt_vocab"):
        return dict(tok.get_tgt_vocab())
    if hasattr(tok, "get_src_vocab"):
        return dict(tok.get_src_vocab())
    return dict(tok.get_vocab())


def _side_vocab(d: str, kind: str, side: str) -> Dict[str, int]:
    """token -> id of one side's vocabulary, from the tokenizer's JSON files where the family
    keeps its whole vocabulary there: FSMT ``vocab-src.json`` / ``vocab-tgt.json``; Marian
    ``vocab.json`` (``target_vocab.json`` for the target with ``separate_vocabs``); a fast
    tokenizer's ``tokenizer.json`` (mBART, NLLB); ``vocab.json`` with ``tokenizer_config.json``'s
    ``added_tokens_decoder`` (M2M-100's language tokens). Otherwise the folder's
    ``AutoTokenizer`` (:func:`_auto_vocab`)."""
    def path(name):
        return os.path.join(d, name)

    if kind == "fsmt":
        name = "vocab-src.json" if side == "source" else "vocab-tgt.json"
        return read_json(path(name)) if os.path.isfile(path(name)) else _auto_vocab(d, side)
    if kind == "marian":
        cfg = read_json(path(TOKENIZER_CONFIG)) if os.path.isfile(path(TOKENIZER_CONFIG)) else {}
        name = "target_vocab.json" if side == "target" and cfg.get("separate_vocabs") else "vocab.json"
        return read_json(path(name)) if os.path.isfile(path(name)) else _auto_vocab(d, side)
    if os.path.isfile(path("tokenizer.json")):
        return _fast_vocab(path("tokenizer.json"))
    added = _added_tokens(d)
    if os.path.isfile(path("vocab.json")) and (added or kind != "m2m_100"):
        return {**read_json(path("vocab.json")), **added}
    return _auto_vocab(d, side)


def folder_vocabularies(d: str) -> Dict[str, Vocabulary]:
    """The source and target vocabularies of the folder ``d`` in fairseq's order
    (:func:`fairseq_vocabulary`), sized by ``config.json``'s embedding tables (``vocab_size``;
    Marian's ``decoder_vocab_size``; FSMT's ``src_vocab_size`` / ``tgt_vocab_size``). Both
    are the same vocabulary where the family shares one. Reads the tokenizer's JSON files
    (:func:`_side_vocab`) and imports ``transformers`` only for a tokenizer they do not hold."""
    cfg = read_config(d)
    kind = cfg["model_type"]
    if kind == "fsmt":
        rows = {"source": cfg.get("src_vocab_size"), "target": cfg.get("tgt_vocab_size")}
    else:
        rows = {"source": cfg.get("vocab_size"),
                "target": (cfg.get("decoder_vocab_size") or cfg.get("vocab_size")) if kind == "marian"
                else cfg.get("vocab_size")}
    specials = tokenizer_specials(d, kind)
    out = {}
    for side in ("source", "target"):
        if not isinstance(rows[side], int):
            raise HFFolderError(f"{os.path.join(d, CONFIG)}: no vocabulary size for the {side} side")
        vocab = _side_vocab(d, kind, side)
        out[side] = fairseq_vocabulary(vocab, rows[side], specials, where=f"{d} ({side} vocabulary)")
    return out
