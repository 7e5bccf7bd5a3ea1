"""The manifest of a data directory: ``docctx.json``, written by ``docctx-prepare``.

This module alone reads and writes it. The manifest is a JSON object with, among others::

    format_version            1
    source_lang, target_lang  the language codes of the binarized files
    joined_dictionary         true when both sides share one dictionary
    dictionaries              {lang: "dict.LANG.txt"}
    context_separator         the separator symbol (index 4 of every dictionary; appended
                              after the model's symbols with --pretrained)
    context_separator_index   {lang: index}
    mask_symbol               only with docctx-prepare --mask-symbol: the mask of CoWord dropout
                              (index 5 of a dictionary built there; appended to a given one)
    mask_symbol_index         {lang: index}, with mask_symbol
    spm                       null, or {"model": FILE, "vocab": FILE, "vocab_size": N,
                              "type": ..., "trained_from": ...}; FILE relative to the directory
    input_format              the --input-format docctx-prepare was given
    splits                    {split: {"inputs", "documents", "sentences", "context_only",
                              "source_tokens", "target_tokens", "filtered"}}; "sentences"
                              counts every binarized sentence, "context_only" those that are
                              context but never a training target (absent before they
                              existed: 0); "filtered": what the training split's filters
                              removed (:func:`filtered`), null for the others;
                              "split_sentences": only in the training split of data
                              prepared with --split-sentences (:func:`split_sentences`)
    command                   the docctx-prepare command line
    pretrained                only with docctx-prepare --pretrained: {"family", "dir",
                              "dictionary", "dictionary_sha1", "model_symbols",
                              "added_symbols", "langtok", "segmentation", "tokenizer"}, the
                              release the ids are those of (docs/pretrained.md); a transformers
                              folder's also "format", "model_type", "tokenizer_class",
                              "identity", "languages", "sides", "hub"
    drafts                    {split: {"files", "sentences", "checkpoint", "checkpoint_sha1",
                              "beam", "max_tokens", "batch_size", "fp16"}}, written by
                              docctx-drafts (:func:`record_drafts`)

Readers use :func:`read_manifest` and the helpers below (never the JSON keys themselves).
"""
import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional, Tuple

MANIFEST_NAME = "docctx.json"
FORMAT_VERSION = 1
#: the name docctx-prepare gives the SentencePiece model it trains or copies
SPM_MODEL_NAME = "spm.model"


class ManifestError(ValueError):
    """An unreadable ``docctx.json``; ``str(err)`` names the file."""


def manifest_path(data_dir: str) -> str:
    return os.path.join(data_dir, MANIFEST_NAME)


def write_manifest(data_dir: str, manifest: dict) -> str:
    """Write ``manifest`` as ``DATA_DIR/docctx.json``; returns the path."""
    path = manifest_path(data_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)  # an interrupted write leaves the old manifest
    return path


def read_manifest(data_dir: Optional[str]) -> Optional[dict]:
    """The manifest of a data directory, or ``None`` when it has none (data binarized with
    plain ``fairseq-preprocess``). Raises :class:`ManifestError` if it is not valid JSON."""
    if not data_dir:
        return None
    path = manifest_path(data_dir)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"{path}: not a readable manifest ({e})") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: not a readable manifest (a JSON object is expected)")
    return data


def spm_model_path(data_dir: Optional[str]) -> Optional[str]:
    """The SentencePiece model of a data directory: the file its manifest names (relative
    to the directory, or absolute); without a manifest, ``DATA_DIR/spm.model`` if it exists.
    ``None`` when the data has no SentencePiece model (text used as tokenized)."""
    if not data_dir:
        return None
    manifest = read_manifest(data_dir)
    if manifest is not None and "spm" in manifest:  # (a manifest of drafts only has no "spm")
        model = (manifest.get("spm") or {}).get("model")
        if not model:
            return None
        path = model if os.path.isabs(model) else os.path.join(data_dir, model)
        if not os.path.isfile(path):
            raise ManifestError(f"{manifest_path(data_dir)}: its SentencePiece model {path} is missing")
        return path
    path = os.path.join(data_dir, SPM_MODEL_NAME)
    return path if os.path.isfile(path) else None


def language_pair(data_dir: Optional[str]) -> Optional[Tuple[str, str]]:
    """``(source_lang, target_lang)`` of a data directory, ``None`` without a manifest."""
    manifest = read_manifest(data_dir)
    if manifest is None or not manifest.get("source_lang") or not manifest.get("target_lang"):
        return None
    return manifest["source_lang"], manifest["target_lang"]


def split_names(data_dir: Optional[str]) -> List[str]:
    """The splits a data directory's manifest lists (empty without a manifest)."""
    manifest = read_manifest(data_dir)
    return list((manifest or {}).get("splits") or {})


def filtered(data_dir: Optional[str], split: str = "train") -> Optional[dict]:
    """What ``docctx-prepare``'s filters removed from ``split``'s training targets:
    ``settings`` (``min_len``, ``max_len``, ``max_len_ratio``, ``tuple_max_len``,
    ``tuple_max_len_ratio``: the options, ``None`` when off), ``removed_pairs`` (sentence
    pairs per filter, each counted under the first filter that removed it, in that order),
    ``context_only_pairs`` (how many of those stay in their documents as the context of the
    next sentences; absent from a manifest that does not record it: data whose filtered
    pairs left their documents) and ``removed_documents`` (documents whose every pair was
    removed: they are gone). ``None`` for a split that was not filtered (validation, test)
    and without a manifest."""
    entry = ((read_manifest(data_dir) or {}).get("splits") or {}).get(split)
    return entry.get("filtered") if isinstance(entry, dict) else None


def split_sentences(data_dir: Optional[str], split: str = "train") -> Optional[dict]:
    """What ``docctx-prepare --split-sentences`` (divide and rule, Lupo et al. 2022;
    :mod:`fairseq_docctx.data.split`) did to ``split``'s pairs, ``None`` where it did nothing
    (validation and test, data prepared without it, no manifest). Keys: ``mode`` (``middle``
    or ``aligned``), ``min_len`` (pairs of fewer source words, or fewer than 2 target words,
    stay whole), ``alignment`` (``null`` for ``middle``; ``{"file": PATH}`` for given links;
    ``{"aligner": "eflomal", "symmetrize": ..., "words": ...}``), ``pairs`` (the pairs read),
    ``split_pairs`` (those cut in two), ``kept_whole`` (those too short to cut), ``cuts``
    (``middle``, ``aligned``, ``middle_fallback``: split pairs by where they were cut;
    ``middle_fallback``: aligned mode, every cut crossed a link) and ``halves``
    (``"in_document"``: each pair's halves are consecutive sentences in its place in its
    document, the first the second's previous sentence). The split's ``sentences`` count is
    ``pairs + split_pairs``."""
    entry = ((read_manifest(data_dir) or {}).get("splits") or {}).get(split)
    return entry.get("split_sentences") if isinstance(entry, dict) else None


# ------------------------------------------------------------------ drafts
_DRAFTS = "drafts"


@dataclass
class DraftsRecord:
    """The drafts of one split (``docctx-drafts``; Zhang et al. 2021, §3.1): ``files`` (the
    ``.bin``/``.idx`` names, relative to the directory), ``sentences``, the sentence-level
    ``checkpoint`` (its path and the SHA-1 of its content) and the beam size and batch
    settings it decoded with."""

    files: List[str] = field(default_factory=list)
    sentences: int = 0
    checkpoint: str = ""
    checkpoint_sha1: str = ""
    beam: int = 0
    max_tokens: Optional[int] = None
    batch_size: Optional[int] = None
    fp16: bool = False


def drafts_record(data_dir: Optional[str], split: str) -> Optional[DraftsRecord]:
    """The recorded drafts of ``split``, ``None`` if none are recorded."""
    entry = ((read_manifest(data_dir) or {}).get(_DRAFTS) or {}).get(split)
    if not isinstance(entry, dict):
        return None
    known = {f.name for f in fields(DraftsRecord)}
    return DraftsRecord(**{k: v for k, v in entry.items() if k in known})


def drafts_splits(data_dir: Optional[str]) -> List[str]:
    """The splits whose drafts are recorded."""
    return list(((read_manifest(data_dir) or {}).get(_DRAFTS) or {}))


def _update_drafts(data_dir: str, split: str, record: Optional[DraftsRecord]) -> None:
    manifest = read_manifest(data_dir)
    if manifest is None:  # data binarized without docctx-prepare: a manifest of drafts only
        manifest = {"format_version": FORMAT_VERSION}
    drafts = dict(manifest.get(_DRAFTS) or {})
    if record is None:
        if split not in drafts:
            return
        drafts.pop(split)
    else:
        drafts[split] = asdict(record)
    manifest[_DRAFTS] = drafts
    write_manifest(data_dir, manifest)


def record_drafts(data_dir: str, split: str, record: DraftsRecord) -> None:
    """Record (or replace) the drafts of ``split`` in the directory's manifest (one is
    created if the directory has none)."""
    _update_drafts(data_dir, split, record)


def forget_drafts(data_dir: str, split: str) -> None:
    """Remove the record of ``split``'s drafts (before they are made again)."""
    _update_drafts(data_dir, split, None)
