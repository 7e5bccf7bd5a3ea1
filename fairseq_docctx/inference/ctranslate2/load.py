"""An exported folder loaded: its ``ctranslate2.Translator`` (:func:`load_translator`), its
task rebuilt from the export record with the dictionaries of a data directory and the
stand-in model it decodes with (:func:`exported_task`), and a sentence-level export as the
drafts' translator (:func:`load_exported_draft_translator`)."""
import os
from typing import Optional

import torch

from ... import register
from ...data.drafts import DEFAULT_BEAM
from ..checkpoint import CheckpointError, check_context_overrides, checkpoint_sha1, recorded_context
from . import ExportError, import_ctranslate2
from .generator import draft_generator
from .record import EXPORT_FILE, check_data_dictionaries, read_export
from .standins import exported_model


def load_translator(path: str, cpu: bool = True, threads: Optional[int] = None):
    """``ctranslate2.Translator`` of an exported folder, on the CPU (``threads``: default
    torch's thread count, so that ``OMP_NUM_THREADS`` sets both engines) or the GPU."""
    ct2 = import_ctranslate2()
    device = "cpu" if cpu or ct2.get_cuda_device_count() == 0 else "cuda"
    threads = threads or torch.get_num_threads()
    try:
        return ct2.Translator(path, device=device, compute_type="default", inter_threads=1,
                              intra_threads=threads if device == "cpu" else 0)
    except (RuntimeError, ValueError) as e:
        raise ExportError(f"--path {path}: CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None


def exported_task(path: str, record: dict, data: Optional[str], **overrides):
    """The task of an exported folder (its recorded settings, the dictionaries of ``data``,
    default the folder itself) and the stand-in model it decodes with."""
    from fairseq import tasks
    from omegaconf import OmegaConf, open_dict

    from ...models.document_context import check_context, context_spec

    data = os.fspath(data) if data is not None else path
    if not os.path.isdir(data):
        raise CheckpointError(f"data={data}: no such directory", f"--data {data}: no such directory")
    if os.path.realpath(data) != os.path.realpath(path):
        check_data_dictionaries(path, record, data)
    task_cfg = OmegaConf.create(record["task"])
    with open_dict(task_cfg):
        task_cfg.data = data
        task_cfg.source_lang, task_cfg.target_lang = record["source_lang"], record["target_lang"]
        for k, v in overrides.items():
            setattr(task_cfg, k, v)
    register()
    task = tasks.setup_task(task_cfg, from_checkpoint=True)
    check_context_overrides(task, recorded_context(record["task"], overrides), path, record.get("model"))
    if record.get("pretrained") and getattr(task, "pretrained_text", None) is None:
        # the export's own copy of the release's segmentation (data of docctx-prepare --pretrained)
        from ...data.pretrained import PretrainedError, PretrainedText

        try:
            task.language_tokens.set_text(PretrainedText(path, record["pretrained"]))
        except PretrainedError as e:
            raise CheckpointError(str(e)) from None
    if getattr(task, "segments", False) and not record.get("segments"):
        raise ExportError(f"--path {path}: the model translates segments (--doc-mode segments) but its export "
                          f"record ({EXPORT_FILE}) does not say so: export the checkpoint again")
    model = exported_model(record, task)
    task.context_contract = context_spec(model)
    check_context(model, task.context_sides, task.cfg.context_size, True)
    return task, model, data


def load_exported_draft_translator(path: str, data_dir: str, beam: int = DEFAULT_BEAM,
                                   cpu: Optional[bool] = None, fp16: bool = False,
                                   **generation):
    """:func:`~fairseq_docctx.inference.drafter.load_draft_translator` for a sentence-level
    model exported by ``docctx-export ctranslate2``: the same drafts' interface, decoded by
    CTranslate2."""
    from ...data.drafts import DraftsError
    from ..drafter import DraftTranslator, check_language_pair

    path = os.fspath(path)
    record = read_export(path)
    if fp16:
        raise DraftsError("--fp16: the ctranslate2 engine computes in the type the model was "
                          "exported with (docctx-export --quantization float16)")
    if record["model"] != "transformer":
        raise CheckpointError(f"{path}: {record['model']} reads document context; drafts come from a "
                              "sentence-level model (e.g. transformer)")
    task, model, _ = exported_task(path, record, os.fspath(data_dir))
    check_language_pair(path, (record["source_lang"], record["target_lang"]), data_dir)
    translator = load_translator(path, cpu=bool(cpu))
    generator = draft_generator(translator, task, record, beam, **generation)
    return DraftTranslator(task, model, generator, os.path.abspath(path),
                           checkpoint_sha1(os.path.join(path, "model.bin")), int(beam), False,
                           torch.device("cpu"))
