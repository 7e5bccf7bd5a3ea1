"""The manifest of a data directory: ``docctx.json``, written by ``docctx-prepare``.

This module alone reads and writes it. The manifest is a JSON object with, among others::

    format_version            1
    source_lang, target_lang  the language codes of the binarized files
    joined_dictionary         true when both sides share one dictionary
    dictionaries              {lang: "dict.LANG.txt"}
    context_separator         the separator symbol (index 4 of every dictionary)
    context_separator_index   {lang: index}
    spm                       null, or {"model": FILE, "vocab": FILE, "vocab_size": N,
                              "type": ..., "trained_from": ...}; FILE relative to the directory
    input_format              the --input-format docctx-prepare was given
    splits                    {split: {"inputs", "documents", "sentences", ...}}
    command                   the docctx-prepare command line

Readers use :func:`read_manifest` and the helpers below (never the JSON keys themselves).
"""
import json
import os
from typing import Optional

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
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
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
    if manifest is not None:
        model = (manifest.get("spm") or {}).get("model")
        if not model:
            return None
        path = model if os.path.isabs(model) else os.path.join(data_dir, model)
        if not os.path.isfile(path):
            raise ManifestError(f"{manifest_path(data_dir)}: its SentencePiece model {path} is missing")
        return path
    path = os.path.join(data_dir, SPM_MODEL_NAME)
    return path if os.path.isfile(path) else None
