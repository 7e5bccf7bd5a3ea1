"""A Hugging Face ``transformers`` translation model folder as the vocabulary of a document data
folder: what ``docctx-prepare --pretrained DIR`` reads when ``DIR`` holds a ``config.json``
(:func:`~fairseq_docctx.data.hf_folder.is_hf_folder`) or is a hub id (:func:`resolve`).

:class:`HFRelease` answers what :class:`~fairseq_docctx.data.pretrained.Release` answers (the
family, the model's dictionary of each language, the segmentation, the language tokens and
their placement), so that :mod:`.prepare` and :class:`~fairseq_docctx.data.pretrained.PretrainedText`
only choose between the two:

* the **ids** are those of the folder's own tokenizer (``AutoTokenizer.from_pretrained(DIR)``,
  the source with ``src_lang`` set, the target through ``text_target`` with ``tgt_lang``),
  numbered as fairseq numbers them (:func:`~fairseq_docctx.data.hf_folder.folder_vocabularies`:
  the identity for M2M-100, NLLB-200, mBART and FSMT; Marian's ids renumbered, its ``<pad>``
  to fairseq's index 1). The data's sentences hold the symbols of those ids;
* the **language tokens** go where the tokenizer puts them (:data:`PLACEMENT_OF_LAYOUT`, read
  from what it gives for a probe sentence): ``[src] X </s>`` and ``[tgt] Y </s>`` (NLLB-200,
  M2M-100, mBART-50) is fairseq's ``prepend``; ``X </s> [src]`` with the decoder started from
  ``[tgt]`` (mBART-25's ``MBartTokenizer``, NLLB-200's ``legacy_behaviour``) is ``bart``;
  ``X </s>`` (Marian, FSMT) has none. Every sentence's ids are checked against that layout;
* the **segmentation** is the tokenizer itself (kind :data:`SEGMENTATION`): the data folder
  keeps a copy of its files and of ``config.json`` (:data:`TOKENIZER_COPY`), from which
  :class:`TokenizerText` reads new input and gives back text at inference.

FSMT's ``text_target`` numbers the target with the *source* vocabulary and tokenizes it with the
source language's Moses rules (``FSMTTokenizer`` has no target mode); the target here is what
fairseq's WMT19 models were trained on: the target language's Moses rules, the tokenizer's BPE,
``vocab-tgt.json``'s ids.
"""
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .hf_folder import (CONFIG, HFFolderError, Vocabulary, fairseq_vocabulary, embedding_rows, is_hf_folder,
                        load_tokenizer, read_config, tokenizer_specials, tokenizer_vocabularies)
from .paths import file_sha1
from .release_common import HF_SEGMENTATION as SEGMENTATION
from .release_common import PretrainedError, langtok_langs

#: the copy of the tokenizer's files (and config.json) in the data folder
TOKENIZER_COPY = "hf_tokenizer"
#: (language token first, language token last) -> placement (pretrained.PLACEMENT's names)
PLACEMENT_OF_LAYOUT = {(True, False): "prepend", (False, True): "bart", (False, False): None}
#: hub ids: ``owner/name``, optionally ``@revision``
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")
#: the files of a hub snapshot that a folder needs (not the TensorFlow, Flax, Rust or ONNX weights)
HUB_PATTERNS = ["*.json", "*.spm", "*.model", "*.txt", "*.safetensors", "pytorch_model.bin"]
PROBE = "a b"


def family_of(cfg: dict, tok) -> str:
    """The plugin's family of a folder: ``marian``, ``m2m100`` or ``nllb`` (``model_type``
    ``m2m_100``, told apart by the tokenizer's class), ``mbart50`` or ``mbart25``
    (MBart50Tokenizer, MBartTokenizer), ``fsmt``."""
    kind, name = cfg["model_type"], type(tok).__name__
    if kind == "m2m_100":
        return "nllb" if name.startswith("Nllb") else "m2m100"
    if kind == "mbart":
        return "mbart50" if name.startswith("MBart50") else "mbart25"
    return kind


def language_codes(tok) -> List[str]:
    """The language codes the tokenizer takes as ``src_lang``/``tgt_lang`` (``en`` of M2M-100,
    ``en_XX`` of mBART, ``eng_Latn`` of NLLB-200), in its order; empty without them."""
    codes = getattr(tok, "lang_code_to_id", None)
    if codes:
        return list(codes)
    if not hasattr(tok, "src_lang"):
        return []
    extra = getattr(tok, "extra_special_tokens", None) or getattr(tok, "additional_special_tokens", None) or []
    return [str(t) for t in extra if "_" in str(t) and not str(t).startswith("<")]


def lang_token_id(tok, code: str) -> int:
    """The tokenizer's id of the language token of ``code``."""
    ids = getattr(tok, "lang_code_to_id", None)
    return int(ids[code]) if ids else int(tok.convert_tokens_to_ids(code))


def resolve(spec: str) -> Dict[str, Optional[str]]:
    """``{"dir", "repo_id", "revision", "requested"}`` of ``--pretrained SPEC``: a folder as it
    is (no hub fields), or a hub id ``owner/name[@revision]`` fetched with ``huggingface_hub``'s
    ``snapshot_download`` (the files :data:`HUB_PATTERNS`), ``revision`` the commit it resolved
    to (the name of the snapshot's folder). A hub that cannot give it (offline, no such repo)
    is one line."""
    if os.path.isdir(spec):
        return {"dir": os.path.abspath(spec), "repo_id": None, "revision": None, "requested": None}
    if os.path.exists(spec) or not HUB_ID.match(spec):
        raise PretrainedError(f"--pretrained {spec}: not a directory (nor a hub id owner/name[@revision])")
    repo_id, _, requested = spec.partition("@")
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, revision=requested or None, allow_patterns=HUB_PATTERNS)
    except ImportError:
        raise PretrainedError(f"--pretrained {spec}: a hub id: install huggingface_hub") from None
    except Exception as e:  # offline mode, connection, not found, gated: all one line
        msg = " ".join(str(e).split()).split(". ")[0][:200] or type(e).__name__
        raise PretrainedError(f"--pretrained {spec}: not a directory, and the hub cannot give it "
                              f"({type(e).__name__}: {msg})") from None
    return {"dir": path, "repo_id": repo_id, "revision": os.path.basename(os.path.normpath(path)),
            "requested": requested or None}


@dataclass
class HFRelease:
    """A transformers folder read for one language pair of the data folder (the module doc).
    ``langtok_langs``: {data lang: the tokenizer's language code} (empty without language
    tokens); ``sides``: {data lang: "source" or "target"}."""

    family: str
    dir: str
    model_type: str
    tokenizer_object: object
    vocabularies: Dict[str, Vocabulary]
    sides: Dict[str, str]
    dict_files: Dict[str, str]
    placement: Optional[str] = None
    langtok_langs: Dict[str, str] = field(default_factory=dict)
    hub: Optional[dict] = None
    segmentation: str = SEGMENTATION
    segmentation_file: Optional[str] = None
    tokenizer: Optional[str] = None  # the record's Moses tokenizer: none (the tokenizer does it all)
    _cache: dict = field(default_factory=dict)  # the layouts' (head, tail) ids and the id maps, made once

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def vocabulary(self, lang: str) -> Vocabulary:
        return self.vocabularies[self.sides[lang]]

    def langtok(self, lang: str) -> Optional[str]:
        """The fairseq symbol of a data language's language token (``None`` without them)."""
        if not self.placement:
            return None
        row = lang_token_id(self.tokenizer_object, self.langtok_langs[lang])
        return self.vocabulary(lang).symbols[self._maps(self.sides[lang])["row"][row]]

    def model_dictionary(self, lang: str):
        """A fairseq dictionary of the folder's symbols for data language ``lang``, in fairseq's
        order (its length is the model's embedding rows, plus Marian's ``<s>``)."""
        from fairseq.data import Dictionary

        d = Dictionary()
        for sym in self.vocabulary(lang).symbols[d.nspecial:]:
            d.add_symbol(sym)
        if d.symbols != self.vocabulary(lang).symbols:
            raise PretrainedError(f"{self.path(self.dict_files[lang])}: its tokens do not make a fairseq dictionary")
        return d

    def dictionary_sha1(self, lang: str) -> str:
        return file_sha1(self.path(self.dict_files[lang]))

    def check(self) -> None:
        """Nothing more to open: the tokenizer is loaded already."""

    def encode(self, sentences: Sequence[str], side: str, code: Optional[str], strip: bool = True) -> List[List[int]]:
        """The tokenizer's ids of ``sentences`` of one side (``code``: the language code, set as
        ``src_lang``/``tgt_lang``); ``strip``: without the specials of the family's layout
        (checked for every sentence)."""
        tok = self.tokenizer_object
        if code is not None:
            setattr(tok, "src_lang" if side == "source" else "tgt_lang", code)
        if side == "target" and self.family == "fsmt":
            ids = [self._fsmt_target(s) for s in sentences]
        elif side == "target":
            ids = [list(x) for x in tok(text_target=list(sentences)).input_ids]
        else:
            ids = [list(x) for x in tok(list(sentences)).input_ids]
        if not strip:
            return ids
        head, tail = self._specials(side, code)
        out = []
        for n, x in enumerate(ids):
            if x[:len(head)] != head or x[len(x) - len(tail):] != tail or len(x) < len(head) + len(tail):
                raise PretrainedError(f"{self.dir}: the tokenizer gives {x[:3]}...{x[-3:]} for {side} sentence "
                                      f"{n + 1}, not the layout {head} ... {tail} of its probe sentence")
            out.append(x[len(head):len(x) - len(tail)])
        return out

    def encode_plain(self, text: str, side: str) -> List[int]:
        """The ids of ``text`` without any special token."""
        tok = self.tokenizer_object
        if side == "target" and self.family == "fsmt":
            return self._fsmt_target(text)[:-1]
        if side == "target":
            return list(tok(text_target=text, add_special_tokens=False).input_ids)
        return list(tok(text, add_special_tokens=False).input_ids)

    def _fsmt_target(self, text: str) -> List[int]:
        """FSMT's target ids (the module doc): Moses of the target language, BPE, vocab-tgt.json, ``</s>``."""
        tok, v = self.tokenizer_object, self.vocabularies["target"]
        words = tok.moses_tokenize(tok.moses_pipeline(text, lang=tok.tgt_lang), lang=tok.tgt_lang)
        index, unk, eos = self._maps("target")["symbol"], v.hf_rows[3], v.hf_rows[2]
        return [v.hf_rows[index[p]] if p in index else unk for w in words if w for p in tok.bpe(w).split(" ")] + [eos]

    def _maps(self, side: str) -> Dict[str, dict]:
        """{"row": the tokenizer's id -> fairseq index, "symbol": symbol -> fairseq index} of one
        side (made once: a vocabulary has up to 256k entries)."""
        key = ("maps", side)
        if key not in self._cache:
            v = self.vocabularies[side]
            self._cache[key] = {"row": {r: i for i, r in enumerate(v.hf_rows) if r is not None},
                                "symbol": {sym: i for i, sym in enumerate(v.symbols)}}
        return self._cache[key]

    def _specials(self, side: str, code: Optional[str]):
        """(head, tail): the special ids of the layout of one side (the probe sentence's)."""
        key = (side, code)
        if key not in self._cache:
            enc = self.encode([PROBE], side, code, strip=False)[0]
            inner = self.encode_plain(PROBE, side)
            starts = [i for i in range(len(enc) - len(inner) + 1) if enc[i:i + len(inner)] == inner]
            if not starts:
                raise PretrainedError(f"{self.dir}: the tokenizer's ids of {PROBE!r} with special tokens do not "
                                      "hold those without: its layout cannot be read")
            self._cache[key] = (enc[:starts[0]], enc[starts[0] + len(inner):])
        return self._cache[key]

    def segment(self, sentences: Sequence[str], lang: str, workers: int = 1) -> List[str]:
        """The fairseq symbols of the tokenizer's ids of raw sentences of data language ``lang``,
        joined by single spaces: no ``</s>`` (the binarizer appends it), no language token
        (prepended by :mod:`.prepare` for ``prepend``; placed by the task for ``bart``)."""
        side, v = self.sides[lang], self.vocabulary(lang)
        ids = self.encode(sentences, side, self.langtok_langs.get(lang))
        back = self._maps(side)["row"]
        return [" ".join(v.symbols[back[int(i)]] for i in x) for x in ids]

    def decode(self, pieces: str, lang: str) -> str:
        """Symbols of data language ``lang`` (joined by spaces, no language token) as text."""
        v = self.vocabulary(lang)
        index = self._maps(self.sides[lang])["symbol"]
        rows = [v.hf_rows[index.get(p, 3)] for p in pieces.split()]
        return self.tokenizer_object.decode([r for r in rows if r is not None], skip_special_tokens=True)

    def save_tokenizer(self, out: str) -> str:
        """Copy the tokenizer's files and ``config.json`` into ``out/`` :data:`TOKENIZER_COPY`
        (what :class:`TokenizerText` reads); returns the name."""
        import shutil

        dest = os.path.join(out, TOKENIZER_COPY)
        self.tokenizer_object.save_pretrained(dest)
        shutil.copyfile(self.path(CONFIG), os.path.join(dest, CONFIG))
        return TOKENIZER_COPY

    def record(self) -> dict:
        """What the manifest's ``pretrained`` record holds beyond a fairseq release's."""
        return {
            "segmentation": {"kind": SEGMENTATION, "file": TOKENIZER_COPY, "release_file": self.dir},
            "format": "transformers", "model_type": self.model_type,
            "tokenizer_class": type(self.tokenizer_object).__name__,
            "identity": {lang: self.vocabulary(lang).identity for lang in self.sides},
            "languages": {lang: self.langtok_langs.get(lang) for lang in self.sides},
            "sides": dict(self.sides),
            "hub": self.hub,
        }


def _dict_files(d: str, family: str, cfg: dict, tok) -> Dict[str, str]:
    """{"source", "target"}: the file each side's vocabulary comes from (its SHA-1 is recorded)."""
    def first(*names):
        for n in names:
            if os.path.isfile(os.path.join(d, n)):
                return n
        raise PretrainedError(f"{os.path.join(d, names[0])}: missing (the tokenizer's vocabulary)")

    if family == "fsmt":
        return {"source": first("vocab-src.json"), "target": first("vocab-tgt.json")}
    if family == "marian" and getattr(tok, "separate_vocabs", False):
        return {"source": first("vocab.json"), "target": first("target_vocab.json")}
    name = first("vocab.json", "tokenizer.json") if family in ("marian", "m2m100") else first(
        "tokenizer.json", "sentencepiece.bpe.model")
    return {"source": name, "target": name}


def load_hf_release(spec: str, src: str, tgt: str, langs: Optional[Sequence[str]] = None) -> HFRelease:
    """Read a transformers folder (or hub id, :func:`resolve`) for the data pair ``src``-``tgt``;
    ``langs``: the tokenizer's (source, target) language codes (``--pretrained-langs``). Errors
    are :class:`PretrainedError`, one line naming the file."""
    where = resolve(spec)
    d = where["dir"]
    try:
        if not is_hf_folder(d):
            raise HFFolderError(f"{os.path.join(d, CONFIG)}: no such file (a transformers folder has one)")
        cfg = read_config(d)
        tok = load_tokenizer(d)
        rows = embedding_rows(cfg, os.path.join(d, CONFIG))
        vocabs = tokenizer_vocabularies(tok)
        family = family_of(cfg, tok)
        files = _dict_files(d, family, cfg, tok)
        voc = {side: fairseq_vocabulary(vocabs[side], rows[side], tokenizer_specials(tok, vocabs[side]),
                                        os.path.join(d, files[side])) for side in ("source", "target")}
    except HFFolderError as e:
        raise PretrainedError(str(e)) from None
    r = HFRelease(family, d, cfg["model_type"], tok, voc, {src: "source", tgt: "target"},
                  {src: files["source"], tgt: files["target"]},
                  hub=None if where["repo_id"] is None else {k: where[k] for k in ("repo_id", "revision", "requested")})
    codes = language_codes(tok)
    if codes:
        r.langtok_langs = langtok_langs(codes, f"{d} ({type(tok).__name__}'s languages)", (src, tgt), langs)
    elif langs is not None:
        raise PretrainedError(f"--pretrained-langs: {d}: the {family} tokenizer has no language tokens")
    layouts = {}
    for lang in (src, tgt):
        side, code = r.sides[lang], r.langtok_langs.get(lang)
        head, tail = r._specials(side, code)
        lang_id = lang_token_id(tok, code) if code else None
        first, last = lang_id is not None and head == [lang_id], lang_id is not None and tail[1:] == [lang_id]
        layouts[side] = PLACEMENT_OF_LAYOUT.get((first, last), "unknown")
        if (head != ([lang_id] if first else []) or tail != [voc[side].hf_rows[2]] + ([lang_id] if last else [])
                or layouts[side] == "unknown"):
            raise PretrainedError(f"{d}: {type(tok).__name__} puts {head} before and {tail} after a {side} "
                                  "sentence: not a layout fairseq's tasks place (language token first, or "
                                  "</s> and the language token last)")
    if layouts["source"] != layouts["target"]:
        raise PretrainedError(f"{d}: {type(tok).__name__} places the language tokens of the source "
                              f"({layouts['source']}) and of the target ({layouts['target']}) differently")
    r.placement = layouts["source"]
    return r


def is_hf_spec(spec: str) -> bool:
    """Whether ``--pretrained SPEC`` names a transformers folder or a hub id (not a fairseq
    release folder)."""
    return is_hf_folder(spec) or (not os.path.exists(spec) and bool(HUB_ID.match(spec)))


class TokenizerText:
    """The tokenizer copy of a data folder (:data:`TOKENIZER_COPY`) as inference reads and writes
    text (:class:`~fairseq_docctx.data.pretrained.PretrainedText`'s segmenter of kind
    :data:`SEGMENTATION`): ``encode(text, lang)`` -> symbols joined by spaces, ``decode(symbols,
    lang)`` -> text; ``record``: the manifest's ``pretrained`` record (its sides and languages)."""

    def __init__(self, path: str, record: dict):
        sides = record.get("sides") or {}
        langs = record.get("languages") or {}
        src = next((lang for lang, s in sides.items() if s == "source"), None)
        tgt = next((lang for lang, s in sides.items() if s == "target"), None)
        if src is None or tgt is None:
            raise PretrainedError(f"{path}: the pretrained record names no source and target sides")
        given = [langs.get(src), langs.get(tgt)] if langs.get(src) else None
        self.release = load_hf_release(path, src, tgt, given)

    def encode(self, text: str, lang: Optional[str] = None) -> str:
        lang = lang or next(k for k, s in self.release.sides.items() if s == "source")
        return self.release.segment([text.strip()], lang)[0]

    def decode(self, pieces: str, lang: Optional[str] = None) -> str:
        lang = lang or next(k for k, s in self.release.sides.items() if s == "target")
        return self.release.decode(pieces, lang)
