"""``docctx-export transformers``: a checkpoint's ``transformers`` model folder, written behind
the same output guard as ``docctx-export ctranslate2``
(:func:`~fairseq_docctx.inference.ctranslate2.export.check_outdir`: never a folder the export
reads, an existing one replaced only with ``force`` and only if it is an earlier export, the
new folder written beside it and moved into place once complete).

The folder: ``config.json`` (with the ``docctx`` context entry, :mod:`.card`),
``generation_config.json``, ``model.safetensors``, the tokenizer's files (:mod:`.tokenizer`),
the model card ``README.md``, the data directory's dictionaries and ``docctx-export.json``
(the export record: engine ``transformers``, the class, the checkpoint's path and SHA-1, the
files written, and what the transformers engine decodes with, as a CTranslate2 export
records it: the task's settings, the dictionaries, the SentencePiece model, the positions;
:func:`~fairseq_docctx.inference.ctranslate2.record.export_record`)."""
import json
import os
from typing import Optional

from ..checkpoint import checkpoint_sha1
from ..ctranslate2.export import check_outdir, copy_data_files, files_read, write_folder
from ..ctranslate2.record import export_record
from .card import docctx_metadata, example_sentences, model_card
from . import ExportError
from .classes import MODEL_TYPES, check_architecture, choose_class, hf_config
from .tokenizer import SPM_FILE, write_tokenizers

#: fairseq's search rules as ``generate`` options (``generation_config.json``): ``<pad>`` never
#: generated, no ``</s>`` as the first token (fairseq's ``min_len`` 1), ``</s>`` forced at the
#: length limit, greedy unless asked
GENERATION = {"num_beams": 1, "min_new_tokens": 1, "max_length": 200}


def export(model, task, checkpoint: str, outdir: str, spm_model: Optional[str] = None,
           force: bool = False, example=None) -> dict:
    """Write ``model`` (loaded from ``checkpoint`` with ``task``) as a ``transformers`` folder
    ``outdir``; returns the export record. Refused (:class:`~.ExportError`, one line) for an
    architecture other than :data:`~.classes.SUPPORTED_MODELS`, a network no class computes
    (:func:`~.classes.choose_class`), an ``outdir`` that is or holds what the export reads, or
    that exists, unless ``force`` and it is an earlier export. ``example``: sentences for the
    model card's example (default: made of the dictionary's first words)."""
    arch = getattr(model.cfg if hasattr(model, "cfg") else None, "_name", None) or getattr(
        getattr(model, "args", None), "arch", None)
    name = check_architecture(arch, checkpoint)
    langtoks = _check_language_tokens(task, checkpoint)
    class_name = choose_class(model, checkpoint)
    outdir = outdir.rstrip("/") or outdir
    guard = check_outdir(outdir, force, files_read(checkpoint, getattr(task.cfg, "data", None), spm_model))
    from .weights import build_hf_model

    kwargs = hf_config(model, class_name, task.cfg.source_lang, task.cfg.target_lang)
    hf = build_hf_model(model, class_name, kwargs)

    def fill(tmp):
        segmentation = write_tokenizers(task.source_dictionary, task.target_dictionary, tmp, spm_model,
                                        int(model.encoder.max_positions()), getattr(task, "pretrained_text", None))
        meta = docctx_metadata(model, task, name, arch, segmentation)
        meta["language_tokens"] = langtoks
        meta["checkpoint_sha1"] = checkpoint_sha1(checkpoint)
        _save_model(hf, meta, tmp, task.target_dictionary)
        files = copy_data_files(tmp, task, None)  # the dictionaries; the release's file is there already
        files["spm_model"] = SPM_FILE if segmentation["kind"] == "sentencepiece" else None
        sentences = list(example or example_sentences(task.source_dictionary))
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card(meta, class_name, os.path.basename(os.path.abspath(outdir)), sentences))
        record = export_record(model, task, name, arch, checkpoint, files, None)
        del record["quantization"]
        record.update(engine="transformers", model_type=MODEL_TYPES[class_name], docctx=meta)
        record["class"] = class_name
        return record

    with guard:
        return write_folder(guard, outdir, fill)


def _check_language_tokens(task, where: str) -> Optional[dict]:
    """The language tokens of the data (``docctx-prepare --pretrained`` of M2M-100, NLLB-200,
    mBART-50: every sentence starts with its token, the target's forced first) as the
    ``docctx.language_tokens`` record (``None`` without them); refused in one line: mBART-25's
    placement (the task adds the tokens to every batch) and segments (fairseq forces the token
    first in every sentence of a segment inside its search), which ``generate`` does not do."""
    tokens = getattr(task, "language_tokens", None)
    if tokens is None or not tokens.ids():
        return None
    if tokens.bart() is not None:
        raise ExportError(f"{where}: mBART-25's language tokens (added to every batch by the task) do not export "
                          "to transformers yet")
    if getattr(task, "segments", False):
        raise ExportError(f"{where}: segments on data with language tokens: fairseq forces the token first in every "
                          "sentence of a segment inside its search, which transformers' generate cannot do")
    text = tokens.text
    return {"source": text.source_langtok, "target": text.target_langtok,
            "source_id": tokens.source(), "target_id": tokens.target()}


def _save_model(hf, meta: dict, folder: str, target_dict) -> None:
    """``hf`` saved into ``folder`` (safetensors) with the ``docctx`` entry in its
    ``config.json`` and fairseq's search rules in ``generation_config.json``."""
    from transformers import GenerationConfig

    hf.config.docctx = meta
    langtoks = meta.get("language_tokens")
    forced = {"forced_bos_token_id": langtoks["target_id"]} if langtoks and langtoks["target_id"] is not None else {}
    gen = GenerationConfig(**forced, decoder_start_token_id=target_dict.eos(), eos_token_id=target_dict.eos(),
                           pad_token_id=target_dict.pad(), bos_token_id=target_dict.bos(),
                           forced_eos_token_id=target_dict.eos(), suppress_tokens=[target_dict.pad()],
                           **GENERATION)
    hf.generation_config = gen
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf.save_pretrained(folder, safe_serialization=True)
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(folder):  # the mode open() gives (safetensors writes its file 0600)
        if os.path.isfile(os.path.join(folder, name)):
            os.chmod(os.path.join(folder, name), 0o666 & ~umask)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        if json.load(f).get("docctx") != meta:  # transformers keeps a configuration's extra keys
            raise RuntimeError("transformers dropped config.json's docctx entry")
