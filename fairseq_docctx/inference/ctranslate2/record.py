"""The export record: :data:`EXPORT_FILE` beside CTranslate2's files in an exported folder,
what the checkpoint was (its architecture, language pair, dictionaries, SentencePiece model,
task settings with the context settings K, sides and separator, segment packing, positions,
weight type, and the checkpoint's path and SHA-1), written by :func:`export_record` and read
back, with the folder's files checked, by :func:`read_export`, :func:`check_export_files` and
:func:`check_data_dictionaries`."""
import json
import os
from typing import Optional

from ...models.document_context import DocumentContextModel
from ..checkpoint import checkpoint_sha1
from . import ExportError

#: the description of an exported folder, beside CTranslate2's files
EXPORT_FILE = "docctx-export.json"


def segment_record(task, model) -> Optional[dict]:
    """What the export record says of a segment model (``None`` for other models): its
    packing (``--max-segment-tokens``, ``--segment-packing``) and whether fairseq's search of
    the model keeps the sentence count and the length windows inside it (``constrained``:
    ``doc2doc_transformer``; a ``transformer`` on segments has no such rule). The engine
    checks them after its search instead
    (:class:`~fairseq_docctx.inference.ctranslate2.standins.ExportedSegmentModel`)."""
    if not getattr(task, "segments", False):
        return None
    from ...models.document_context import reads_segments

    return {"max_segment_tokens": int(task.cfg.max_segment_tokens),
            "segment_packing": str(task.cfg.segment_packing),
            "constrained": reads_segments(model)}


def _container(cfg) -> dict:
    """The task's configuration as plain values (an OmegaConf node or an argparse namespace)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return {k: v for k, v in vars(cfg).items() if isinstance(v, (str, int, float, bool, type(None), list))}


#: the files CTranslate2 writes into a model folder (for an export whose record does not list its files)
CT2_FILES = ("model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
             "target_vocabulary.json", "shared_vocabulary.txt", "source_vocabulary.txt", "target_vocabulary.txt")


#: the ``docctx-export`` subcommands that write :data:`EXPORT_FILE` (an earlier export of any
#: of them is what ``--force`` replaces)
EXPORTING_ENGINES = ("ctranslate2", "transformers")


def read_export(path: str, engines=("ctranslate2",)) -> dict:
    """The record (:data:`EXPORT_FILE`) of an exported folder, written by ``docctx-export``
    for one of ``engines``; :class:`ExportError` if ``path`` is not one."""
    if not os.path.isdir(path):
        raise ExportError(f"--path {path}: not a folder exported by docctx-export ctranslate2 "
                          "(the ctranslate2 engine reads an exported folder, not a checkpoint)")
    rec_path = os.path.join(path, EXPORT_FILE)
    try:
        with open(rec_path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise ExportError(f"--path {path}: no {EXPORT_FILE}: not a folder exported by "
                          "docctx-export ctranslate2") from None
    except (OSError, ValueError) as e:
        raise ExportError(f"{rec_path}: unreadable ({e})") from None
    if not isinstance(record, dict) or record.get("engine") not in engines:
        raise ExportError(f"{rec_path}: not a record of docctx-export {' or '.join(engines)}")
    return record


def check_export_files(path: str, record: dict, data: Optional[str] = None) -> None:
    """Refuse an exported folder without the files an export holds (CTranslate2's model,
    configuration and vocabulary, and the dictionaries, unless ``data`` gives them), naming
    those missing, rather than failing on the first file opened."""
    names = ["model.bin", "config.json"]
    if data is None:
        names += [record.get("dictionaries", {}).get(side) for side in ("source", "target")]
    missing = sorted({n for n in names if n and not os.path.isfile(os.path.join(path, n))})
    if not any("vocabulary" in n for n in os.listdir(path)):  # shared, or source and target
        missing.append("its vocabulary (shared_vocabulary.json)")
    if missing:
        raise ExportError(f"--path {path}: {', '.join(missing)} missing: not a whole export of docctx-export "
                          "ctranslate2 (export the checkpoint again)")


def check_data_dictionaries(path: str, record: dict, data: str) -> None:
    """Refuse a data directory whose dictionaries differ from those exported."""
    for side in ("source", "target"):
        name = record["dictionaries"][side]
        ours, theirs = os.path.join(data, name), os.path.join(path, name)
        if not os.path.exists(ours):
            raise ExportError(f"the data directory {data} has no {name}, the {side} dictionary of the model {path}")
        if os.path.exists(theirs) and checkpoint_sha1(ours) != checkpoint_sha1(theirs):
            raise ExportError(f"the data directory {data}: {name} differs from the dictionary the model {path} was "
                              "exported with: give the data directory it was trained on")



def export_record(model, task, name: str, arch: Optional[str], checkpoint: str, files: dict,
                  quantization: Optional[str]) -> dict:
    """The record of ``model`` (the registered model ``name`` of architecture ``arch``, loaded
    from ``checkpoint`` with ``task``) exported with ``files``: the dictionaries
    (``{"source": name, "target": name}``), the SentencePiece model's name and the pretrained
    release's record as the export copied them (:func:`~fairseq_docctx.inference.ctranslate2.export.export`)."""
    cfg = task.cfg
    task_cfg = _container(cfg)
    task_cfg.pop("data", None)
    return {
        "engine": "ctranslate2",
        "model": name,
        "arch": arch,
        "source_lang": cfg.source_lang,
        "target_lang": cfg.target_lang,
        "dictionaries": files["dictionaries"],
        "spm_model": files["spm_model"],
        "pretrained": files["pretrained"],
        "context": {"size": getattr(cfg, "context_size", 0), "sides": getattr(cfg, "context_sides", None),
                    "separator": getattr(cfg, "context_separator", None),
                    "model_sides": list(getattr(model, "context_sides", ()) if isinstance(
                        model, DocumentContextModel) else ())},
        "segments": segment_record(task, model),
        "max_source_positions": int(model.encoder.max_positions()),
        "max_target_positions": int(model.decoder.max_positions()),
        "quantization": quantization or "float32",
        "checkpoint": os.path.abspath(checkpoint),
        "checkpoint_sha1": checkpoint_sha1(checkpoint),
        "task": task_cfg,
    }
