"""``docctx-export ctranslate2``: a checkpoint's CTranslate2 model folder written behind the
one output guard (:class:`~fairseq_docctx.data.outputs.Outputs`): the folder never one the
export reads, an existing one replaced only with ``force`` and only if it is an earlier
export, the new export written beside it and moved into place once it is complete."""
import copy
import json
import os
import shutil
import tempfile
from typing import Optional

from ...data.outputs import Outputs
from . import ExportError
from .exportable import check_architecture, check_segments
from .record import CT2_FILES, EXPORT_FILE, EXPORTING_ENGINES, export_record, read_export
from .spec import model_spec


def _check_earlier_export(outdir: str) -> None:
    """Refuse an existing ``outdir`` that ``--force`` may not replace: anything but a folder
    ``docctx-export`` wrote (its :data:`EXPORT_FILE`) holding only the files it wrote."""
    if os.path.islink(outdir) or not os.path.isdir(outdir) or not os.path.isfile(os.path.join(outdir, EXPORT_FILE)):
        raise ExportError(f"OUTDIR {outdir} exists and is not a folder docctx-export wrote (no {EXPORT_FILE}): "
                          "--force replaces only an earlier export; give another folder")
    record = read_export(outdir, engines=EXPORTING_ENGINES)
    written = set(record.get("files") or (EXPORT_FILE, *CT2_FILES, *record.get("dictionaries", {}).values(),
                                          record.get("spm_model")))
    other = sorted(set(os.listdir(outdir)) - written)
    if other:
        raise ExportError(f"OUTDIR {outdir} holds {os.path.join(outdir, other[0])}, which docctx-export did not "
                          "write: --force would delete it; move it or give another folder")


def files_read(checkpoint: str, data: Optional[str] = None, spm_model: Optional[str] = None) -> list:
    """What an export reads, as ``(what it is, path)``: the checkpoint, its folder (where the
    dictionaries and the SentencePiece model may be found), the data directory and the
    SentencePiece model (``None``: not known yet)."""
    return [("the checkpoint", checkpoint), ("the checkpoint's folder", os.path.dirname(os.path.abspath(checkpoint))),
            ("the data directory", data), ("the SentencePiece model", spm_model)]


def check_outdir(outdir: str, force: bool, reads=()):
    """The output guard of an export (:class:`~fairseq_docctx.data.outputs.Outputs`), with
    ``outdir`` declared: refused if it is or holds a file or folder of ``reads`` (``(what it
    is, path)``: the checkpoint, its folder, the data directory...), and if it exists unless
    ``force`` and it is an earlier export (:func:`_check_earlier_export`: ``docctx-export``'s
    own record says it wrote the folder); missing folders of its path are made when it is
    written."""
    guard = Outputs("docctx-export", reads, force=force)
    guard.folder(outdir, f"OUTDIR {outdir}", whole=True, ours=True)
    if os.path.lexists(outdir):
        if not force:
            raise ExportError(f"{outdir} exists: give another folder, or --force to replace an earlier export")
        _check_earlier_export(outdir)
    return guard


def export(model, task, checkpoint: str, outdir: str, spm_model: Optional[str] = None,
           quantization: Optional[str] = None, force: bool = False) -> dict:
    """Write the CTranslate2 model of ``model`` (loaded from ``checkpoint`` with ``task``) to
    ``outdir`` with the data directory's dictionaries, the SentencePiece model and
    :data:`EXPORT_FILE`; ``quantization``: CTranslate2's weight type (``int8``,
    ``int8_float32``, ``float16``...; default the checkpoint's float32). Returns the record
    written. ``outdir`` must not be or hold what the export reads (:func:`files_read`: the
    checkpoint, its folder, the data directory, the SentencePiece model), and must not
    exist, or be an earlier export with ``force`` (:func:`check_outdir`). The export is
    written into a temporary folder beside ``outdir``; an earlier export is moved aside only
    once the new one is complete, and deleted once the new one is in its place."""
    arch = getattr(model.cfg if hasattr(model, "cfg") else None, "_name", None)
    name = check_architecture(arch or getattr(getattr(model, "args", None), "arch", None), checkpoint)
    check_segments(task, name, checkpoint)
    spec = model_spec(model, checkpoint)
    outdir = outdir.rstrip("/") or outdir
    guard = check_outdir(outdir, force, files_read(checkpoint, getattr(task.cfg, "data", None), spm_model))
    spec.validate()
    try:
        spec.optimize(quantization=quantization)
    except ValueError as e:
        raise ExportError(f"--quantization {quantization}: {e}") from None
    with guard:
        return _write_export(guard, spec, model, task, name, arch, checkpoint, outdir, spm_model, quantization)


def _write_export(guard, spec, model, task, name, arch, checkpoint, outdir, spm_model, quantization) -> dict:
    """:func:`export`'s writing: the folder made beside ``outdir`` and moved into place."""
    def fill(tmp):
        spec.save(tmp)
        files = copy_data_files(tmp, task, spm_model)
        return export_record(model, task, name, arch, checkpoint, files, quantization)

    return write_folder(guard, outdir, fill)


def write_folder(guard, outdir: str, fill) -> dict:
    """An export folder written behind ``guard`` (:func:`check_outdir`): ``fill(tmp)`` writes
    its files into a temporary folder beside ``outdir`` and returns the record, which is
    written as :data:`EXPORT_FILE` with the names of the files; the folder is then moved
    into place (:func:`move_into_place`). Returns the record."""
    guard.make_folders(os.path.dirname(os.path.abspath(outdir)))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(outdir)}.", suffix=".part",
                           dir=os.path.dirname(os.path.abspath(outdir)))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # the mode os.makedirs gives, not mkdtemp's 0700
    try:
        record = fill(tmp)
        record["files"] = sorted([*os.listdir(tmp), EXPORT_FILE])
        with open(os.path.join(tmp, EXPORT_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
        move_into_place(tmp, outdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def copy_data_files(tmp: str, task, spm_model: Optional[str]) -> dict:
    """The data the model is decoded with, copied into the export ``tmp``: the task's
    dictionaries, the SentencePiece model and a pretrained release's segmentation file
    (:class:`~fairseq_docctx.data.pretrained.PretrainedText`); returns what the record says of
    them (``dictionaries``, ``spm_model``, ``pretrained``)."""
    cfg = task.cfg
    dicts = {}
    for side, lang, d in (("source", cfg.source_lang, task.source_dictionary),
                          ("target", cfg.target_lang, task.target_dictionary)):
        dicts[side] = f"dict.{lang}.txt"
        if not os.path.exists(os.path.join(tmp, dicts[side])):
            d.save(os.path.join(tmp, dicts[side]))
    spm = None
    if spm_model:
        spm = os.path.basename(spm_model)
        shutil.copyfile(spm_model, os.path.join(tmp, spm))
    pretrained = None
    text = getattr(task, "pretrained_text", None)
    if text is not None:  # the release's segmentation travels with the model (PretrainedText)
        seg_file = text.segmentation_file and os.path.basename(text.segmentation_file)  # none: no file
        if seg_file and not os.path.exists(os.path.join(tmp, seg_file)):
            shutil.copyfile(text.segmentation_file, os.path.join(tmp, seg_file))
        pretrained = copy.deepcopy(text.record)
        pretrained["segmentation"] = dict(pretrained.get("segmentation") or {}, file=seg_file)
    return {"dictionaries": dicts, "spm_model": spm, "pretrained": pretrained}


def move_into_place(tmp: str, outdir: str) -> None:
    """The complete export ``tmp`` renamed to ``outdir``; an earlier export there is renamed
    aside first (put back if the rename fails) and deleted last."""
    if not os.path.lexists(outdir):
        os.rename(tmp, outdir)
        return
    old = tmp + ".old"
    os.rename(outdir, old)
    try:
        os.rename(tmp, outdir)
    except BaseException:
        os.rename(old, outdir)
        raise
    shutil.rmtree(old)


