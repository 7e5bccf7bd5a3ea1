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

A folder that ``docctx-export transformers`` wrote (its ``config.json`` holds the ``docctx``
entry, :func:`export_metadata`) is read the same way: its tokenizer is a
``PreTrainedTokenizerFast`` over the fairseq dictionary, id for id, not the family's own class,
so the ids are the identity; the target's tokenizer of an export with two dictionaries is its
``target_tokenizer`` subfolder; and its BART class (``model_type`` ``bart``, fairseq's post-norm
network with learned positions and ``--layernorm-embedding``) is read from such a folder only.

``transformers`` is imported only where the folder's tokenizer is loaded
(:func:`load_tokenizer`): the tokenizer decides the ids, and the rest of the module reads
``config.json`` as JSON.
"""
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
#: config.json's model_type -> the plugin's name of the network
MODEL_TYPES = {"marian": "marian", "m2m_100": "m2m_100", "mbart": "mbart", "fsmt": "fsmt", "bart": "bart"}
#: the model_types read only from a folder docctx-export transformers wrote (:func:`export_metadata`)
EXPORT_ONLY = ("bart",)
#: the subfolder of an export's target tokenizer when its dictionaries differ
#: (inference/transformers_export/tokenizer.py writes it)
EXPORT_TARGET_TOKENIZER = "target_tokenizer"
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
    """``config.json`` of a folder, with a ``model_type`` this plugin reads (:data:`MODEL_TYPES`;
    those of :data:`EXPORT_ONLY` from an export only)."""
    path = os.path.join(d, CONFIG)
    cfg = read_json(path)
    kind = cfg.get("model_type")
    if kind not in MODEL_TYPES:
        raise HFFolderError(f"{path}: model_type {kind!r} is not one this plugin starts from "
                            f"({', '.join(k for k in MODEL_TYPES if k not in EXPORT_ONLY)}; bart from a folder "
                            "docctx-export transformers wrote)")
    if kind in EXPORT_ONLY and not isinstance(cfg.get("docctx"), dict):
        raise HFFolderError(f"{path}: model_type {kind!r} without the docctx entry docctx-export transformers "
                            "writes: only an export is read as BART (public BART folders are not translation "
                            "models with a tokenizer this plugin reads)")
    return cfg


def export_metadata(d: str) -> Optional[dict]:
    """The ``docctx`` entry of the ``config.json`` of a folder ``docctx-export transformers``
    wrote (its context settings, dictionaries' languages, segmentation:
    ``inference/transformers_export/card.py``), ``None`` for any other folder. The entry, not
    the export record ``docctx-export.json``, marks an export: ``transformers`` keeps it when
    the model is saved again with ``save_pretrained``."""
    path = os.path.join(d, CONFIG)
    if not os.path.isfile(path):
        return None
    meta = read_json(path).get("docctx")
    return meta if isinstance(meta, dict) and meta.get("format") == 1 else None


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


def load_tokenizer(d: str, subfolder: Optional[str] = None):
    """``transformers.AutoTokenizer.from_pretrained(d)`` (imported here: the rest of the module
    needs no ``transformers``; ``subfolder``: the tokenizer of that subfolder); a folder whose
    tokenizer cannot be made is one line naming the file it lacks, or the folder."""
    read_config(d)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise HFFolderError(f"{d}: a transformers folder: install transformers (requirements.txt pins it)") from None
    try:
        return AutoTokenizer.from_pretrained(d, **({"subfolder": subfolder} if subfolder else {}))
    except Exception as e:  # transformers raises OSError, ValueError, TypeError, AssertionError, KeyError...
        missing = _missing_tokenizer_file(d, subfolder)
        if missing:
            raise HFFolderError(f"{os.path.join(d, missing)}: missing (the tokenizer's file)") from None
        msg = " ".join(str(e).split())[:200] or type(e).__name__
        raise HFFolderError(f"{d}: its tokenizer cannot be loaded ({msg})") from None


#: the files each family's tokenizer is made of (one of each tuple)
TOKENIZER_FILES = {"marian": (("source.spm",), ("target.spm",), ("vocab.json",)),
                   "m2m_100": (("vocab.json", "tokenizer.json"), ("sentencepiece.bpe.model", "tokenizer.json")),
                   "mbart": (("sentencepiece.bpe.model", "tokenizer.json"),),
                   "fsmt": (("vocab-src.json",), ("vocab-tgt.json",), ("merges.txt",))}


def _missing_tokenizer_file(d: str, subfolder: Optional[str] = None) -> Optional[str]:
    """The first tokenizer file of the folder's family that it lacks (``None``: it has them all);
    an export's is ``tokenizer.json`` (in ``subfolder`` for its target tokenizer)."""
    if export_metadata(d) is not None:
        name = os.path.join(subfolder or "", "tokenizer.json")
        return None if os.path.isfile(os.path.join(d, name)) else name
    kind = read_config(d)["model_type"]
    tok_cfg = read_json(os.path.join(d, TOKENIZER_CONFIG)) if os.path.isfile(os.path.join(d, TOKENIZER_CONFIG)) else {}
    needs = list(TOKENIZER_FILES[kind])
    if kind == "m2m_100" and "Nllb" not in str(tok_cfg.get("tokenizer_class") or ""):
        needs = [("vocab.json",), ("sentencepiece.bpe.model",)]  # M2M100Tokenizer has no tokenizer.json
    if kind == "marian" and tok_cfg.get("separate_vocabs"):
        needs.append(("target_vocab.json",))
    for names in needs:
        if not any(os.path.isfile(os.path.join(d, n)) for n in names):
            return names[0]
    return None


def tokenizer_specials(tok, vocab: Dict[str, int]) -> Dict[str, Optional[str]]:
    """The tokenizer's bos / pad / eos / unk tokens (:data:`TOKENIZER_SPECIALS`); one it does not
    name is fairseq's name where its vocabulary has that (MBart50Tokenizer names no ``bos_token``,
    FSMTTokenizer no ``eos_token``: ``<s>`` and ``</s>`` are ids 0 and 2 of their vocabularies),
    else ``None`` (Marian has no ``<s>``)."""
    out = {}
    for attr, name in zip(TOKENIZER_SPECIALS, FAIRSEQ_SPECIALS):
        tok_name = getattr(tok, attr, None)
        out[attr] = str(tok_name) if tok_name is not None else (name if name in vocab else None)
    return out


def tokenizer_vocabularies(tok) -> Dict[str, Dict[str, int]]:
    """{"source", "target"}: token -> id of each side of a loaded tokenizer, every token it can
    give included (M2M100Tokenizer's ``get_vocab`` leaves out its language tokens; FSMT's
    ``get_tgt_vocab`` maps ids to tokens; Marian's ``get_tgt_vocab`` fails on added tokens)."""
    if hasattr(tok, "get_src_vocab") and hasattr(tok, "src_vocab_size"):  # FSMT: two vocabularies
        tgt = {v: k for k, v in tok.decoder.items()}
        return {"source": dict(tok.get_src_vocab()), "target": tgt}
    vocab = dict(tok.get_vocab())
    vocab.update(getattr(tok, "lang_token_to_id", None) or {})
    if getattr(tok, "separate_vocabs", False):  # Marian with a target vocabulary of its own
        tgt = dict(tok.target_encoder)
        tgt.update({str(t): i for t, i in tok.added_tokens_encoder.items()})
        return {"source": vocab, "target": tgt}
    return {"source": vocab, "target": vocab}


def embedding_rows(cfg: dict, path: str = CONFIG) -> Dict[str, int]:
    """{"source", "target"}: the rows of the model's embedding tables, from ``config.json``
    (``vocab_size``; FSMT's ``src_vocab_size`` / ``tgt_vocab_size``; Marian's
    ``decoder_vocab_size`` where its vocabularies are separate)."""
    try:
        if cfg["model_type"] == "fsmt":
            return {"source": int(cfg["src_vocab_size"]), "target": int(cfg["tgt_vocab_size"])}
        rows = int(cfg["vocab_size"])
        if cfg["model_type"] == "marian" and not cfg.get("share_encoder_decoder_embeddings", True):
            return {"source": rows, "target": int(cfg.get("decoder_vocab_size") or rows)}
        return {"source": rows, "target": rows}
    except (KeyError, TypeError, ValueError) as e:
        raise HFFolderError(f"{path}: no embedding size ({e})") from None


def folder_vocabularies(d: str) -> Dict[str, Vocabulary]:
    """{"source": Vocabulary, "target": Vocabulary} of a transformers folder: its tokenizer's
    vocabulary of each side (:func:`tokenizer_vocabularies`) in fairseq's order
    (:func:`fairseq_vocabulary`) for the rows of its embedding tables (:func:`embedding_rows`).
    The data (``docctx-prepare --pretrained DIR``) and the weights (``--init-from-pretrained
    DIR``) map ids through the same vocabularies."""
    cfg = read_config(d)
    tok = load_tokenizer(d)
    rows = embedding_rows(cfg, os.path.join(d, CONFIG))
    vocabs = tokenizer_vocabularies(tok)
    toks = {"source": tok, "target": tok}
    meta = export_metadata(d)
    if meta is not None and (meta.get("segmentation") or {}).get("target_tokenizer"):
        # an export with two dictionaries: the target's tokenizer is the subfolder's
        toks["target"] = load_tokenizer(d, EXPORT_TARGET_TOKENIZER)
        vocabs["target"] = dict(toks["target"].get_vocab())
    out = {}
    for side in ("source", "target"):
        where = f"{d} ({type(toks[side]).__name__}, {side} side)"
        out[side] = fairseq_vocabulary(vocabs[side], rows[side], tokenizer_specials(toks[side], vocabs[side]), where)
    return out
