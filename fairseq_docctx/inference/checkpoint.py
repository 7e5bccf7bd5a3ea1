"""Loading a checkpoint for inference, and the checks that refuse one that cannot be used.

Every command and API that runs a trained model loads it through this module: the hub
(:func:`fairseq_docctx.hub.from_pretrained`), ``docctx-translate``, ``docctx-drafts``
(:func:`fairseq_docctx.inference.drafter.load_draft_translator`), ``docctx-average`` and
``docctx-score``. :func:`load_checkpoint_state` reads a file (one-line errors for a file
that is missing, not a checkpoint or truncated); :func:`load_models` runs the whole
sequence: the data directory (:func:`data_directory`), the language pair
(:func:`resolve_language_pair`), the task, the dictionary checks
(:func:`check_dictionaries`) and fairseq's ``load_model_ensemble_and_task``. Every refusal
is a :class:`CheckpointError` of one line naming the file.
"""
import argparse
import glob
import os
from typing import List, NamedTuple, Optional

import torch

from fairseq import checkpoint_utils, tasks
from omegaconf import DictConfig, open_dict

from ..data import manifest as mf
from ..data.dictionaries import dictionary_digest, dictionary_mismatch
from ..data.manifest import spm_model_path
from .. import register
from ..data.paths import file_sha1
from ..errors import CheckpointError, first_line  # noqa: F401  (CheckpointError: this module's refusals)
from ..safe_loading import unreadable_checkpoint


def find_spm_model(*dirs) -> Optional[str]:
    """The SentencePiece model of the first directory that has one (its ``docctx.json``
    names it, :func:`fairseq_docctx.data.manifest.spm_model_path`)."""
    for d in dirs:
        path = spm_model_path(d)
        if path is not None:
            return path
    return None


def checkpoint_sha1(path: str) -> str:
    """The SHA-1 of a checkpoint file's content."""
    return file_sha1(path)


def load_checkpoint_state(path: str, arg_overrides: Optional[dict] = None) -> dict:
    """``checkpoint_utils.load_checkpoint_to_cpu`` with one-line errors
    (:class:`CheckpointError`) for a missing file and for a file that is not a fairseq
    checkpoint or is truncated."""
    register()  # the plugin's classes and safe loading, before any checkpoint is read
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not a checkpoint file (a directory?)")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)
    except CheckpointError:  # inside a fairseq command fairseq's loading says it already
        raise
    except Exception as e:  # torch.load's errors: pickle, zip archive, EOF...
        raise unreadable_checkpoint(path, e) from None
    if not isinstance(state, dict) or "model" not in state or not (state.get("cfg") or state.get("args")):
        raise CheckpointError(f"{path}: not a fairseq checkpoint (no model weights and configuration)")
    return state


def trained_on(state: dict) -> Optional[str]:
    """The data directory a checkpoint's configuration names (the one it was trained on)."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        return cfg["task"].get("data")
    return getattr(state.get("args"), "data", None)


def data_directory_of_file(path: str, data: Optional[str] = None) -> Optional[str]:
    """:func:`data_directory` of the checkpoint file ``path`` without loading its weights (the
    file is memory-mapped, its configuration read), for a command that must know every file a
    run will read before it starts; ``None`` where the file is not a readable checkpoint or no
    data directory is found (loading the model reports why)."""
    register()  # the plugin's classes and safe loading, before any checkpoint is read
    if data is not None:
        return os.fspath(data)
    beside = _dictionaries_beside(path)
    if beside:
        return beside
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception:  # not there, not a zip checkpoint, unsafe: the real load reports it
        return None
    return trained_on(state) if isinstance(state, dict) else None


def apply_overrides(state: dict, arg_overrides: dict) -> None:
    """What ``load_checkpoint_to_cpu(path, arg_overrides)`` does, on a state already read."""
    from fairseq.dataclass.utils import overwrite_args_by_name

    if state.get("args") is not None:
        for k, v in arg_overrides.items():
            setattr(state["args"], k, v)
    if state.get("cfg") is not None:
        overwrite_args_by_name(state["cfg"], arg_overrides)


def recorded(state: dict, name: str):
    """A value the task or the model recorded in a checkpoint's model args (if any)."""
    cfg = state.get("cfg")
    model = cfg.get("model") if cfg is not None else None
    if model is None:
        model = state.get("args")
    return model.get(name) if isinstance(model, dict) else getattr(model, name, None)


def recorded_context(task_cfg, overrides: Optional[dict]) -> dict:
    """The context settings (:data:`~fairseq_docctx.tasks.context_settings.ADOPTED_SETTINGS`) that
    ``overrides`` give, as the task configuration ``task_cfg`` of a checkpoint or an export
    records them (read before the overrides are applied to it); with ``segment_packing`` also
    the ``doc_mode`` its default depends on."""
    from ..tasks.context_settings import ADOPTED_SETTINGS

    names = [k for k in (overrides or {}) if k in ADOPTED_SETTINGS]
    if "segment_packing" in names and "doc_mode" not in names:
        names.append("doc_mode")
    if task_cfg is None or not names:
        return {}
    get = task_cfg.get if hasattr(task_cfg, "get") else (lambda k: getattr(task_cfg, k, None))
    return {k: get(k) for k in names}


def check_context_overrides(task, recorded_settings: dict, where: str, arch: Optional[str] = None) -> None:
    """The task's rule for the context settings given that differ from a checkpoint's
    (``recorded_settings``, :func:`recorded_context`): refused in one line unless the task's
    ``context_override`` is set, then used with one warning line
    (:func:`fairseq_docctx.tasks.context_settings.adopt`;
    ``where``: the checkpoint or export as the messages name it, ``arch``: its architecture or
    model name)."""
    if recorded_settings and hasattr(task, "adopt_context_settings"):
        task.adopt_context_settings(argparse.Namespace(**recorded_settings), where=where, arch=arch)


def _dictionary_rows(weights: dict, side: str) -> Optional[int]:
    for key in (f"{side}.embed_tokens.weight", f"{side}.output_projection.weight", f"{side}.embed_out"):
        if key in weights and hasattr(weights[key], "shape"):
            return int(weights[key].shape[0])
    return None


def _dictionary_file_digest(path: str) -> Optional[str]:
    try:
        return file_sha1(path)
    except OSError:
        return None


def check_dictionaries(path: str, state: dict, task, data: str, trained_on: Optional[str] = None) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint whose embedding tables do not have one
    row per type of the data directory's dictionaries, or, where the directory the model
    was trained on is still there, whose training dictionaries differ in content from the
    data directory's (another language pair's dictionaries of the same size); where it is
    gone, the digests of the dictionaries' words recorded in the checkpoint decide."""
    weights = state["model"]
    fix = "give the data directory it was trained on"
    for side, name, d in (("encoder", "source", task.source_dictionary),
                          ("decoder", "target", task.target_dictionary)):
        rows = _dictionary_rows(weights, side)
        if d is None or rows is None or rows == len(d):
            continue
        msg = (f"{path} was trained with a {rows:,}-type {name} dictionary, {{opt}} {data} has "
               f"{len(d):,}: {fix}")
        raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
    if not trained_on or not os.path.isdir(trained_on):
        # the directory is gone: the digests of its dictionaries' words the task recorded
        mismatch = dictionary_mismatch(recorded(state, "dictionary_digests"), task.source_dictionary,
                                       task.target_dictionary, getattr(task.cfg, "context_separator", None))
        if mismatch:
            msg = (f"{path} was trained with another {mismatch} dictionary than {{opt}} {data}'s "
                   f"(same size, other words): {fix}")
            raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
        return
    if os.path.realpath(trained_on) == os.path.realpath(data):
        return
    for lang in (task.cfg.source_lang, task.cfg.target_lang):
        if not lang:
            continue
        ours, theirs = (os.path.join(x, f"dict.{lang}.txt") for x in (data, trained_on))
        a, b = _dictionary_file_digest(ours), _dictionary_file_digest(theirs)
        if a is not None and b is not None and a != b:
            msg = (f"{path} was trained with the dictionary {theirs}, which differs from {{opt}} "
                   f"{ours}: {fix}")
            raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))


def _dictionary_languages(data: str) -> List[str]:
    """The languages of the ``dict.LANG.txt`` files of a directory."""
    return sorted(os.path.basename(f)[len("dict."):-len(".txt")]
                  for f in glob.glob(os.path.join(data, "dict.*.txt")))


def _pair_of_dictionaries(data: str, digests: Optional[str], separator: Optional[str]):
    """The (source, target) languages of the two ``dict.LANG.txt`` of ``data`` that the
    dictionary digests a checkpoint records (``"<source>,<target>"``) tell apart; ``None``
    when there are not two or the digests do not single one direction out (a joined
    dictionary: both files hold the same words)."""
    from fairseq.data import Dictionary

    langs = _dictionary_languages(data)
    if len(langs) != 2 or not digests or len(digests.split(",")) != 2:
        return None
    try:
        found = {lang: dictionary_digest(Dictionary.load(os.path.join(data, f"dict.{lang}.txt")), separator)
                 for lang in langs}
    except Exception:  # an unreadable dictionary: the task's setup names it
        return None
    src, tgt = digests.split(",")
    pairs = [(a, b) for a, b in (langs, langs[::-1]) if found[a] == src and found[b] == tgt]
    return pairs[0] if len(pairs) == 1 else None


def _pair_of_directory(data: Optional[str], digests: Optional[str] = None, separator: Optional[str] = None):
    """The (source, target) languages of a data directory: its manifest's (``docctx.json``),
    else the binarized files' names (``SPLIT.SRC-TGT.*``, as fairseq infers them), else its
    dictionaries told apart by ``digests`` (:func:`_pair_of_dictionaries`); ``None`` when
    none of them says."""
    from fairseq.data import data_utils

    if not data or not os.path.isdir(data):
        return None
    pair = mf.language_pair(data)
    if pair is not None:
        return tuple(pair)
    src, tgt = data_utils.infer_language_pair(data)
    if src and tgt:
        return src, tgt
    return _pair_of_dictionaries(data, digests, separator)


def resolve_language_pair(path: str, state: dict, data: str, trained_on: Optional[str]) -> dict:
    """The task options ``source_lang``/``target_lang`` a checkpoint is loaded with: none
    where its configuration holds them (trained with ``-s/-t``); else the pair the model
    records (``language_pair``, written by the task at training), the data directory's
    (:func:`_pair_of_directory`), or that of the directory it was trained on, in this
    order. Refuses (:class:`CheckpointError`) a model whose pair none of them tells."""
    cfg = state.get("cfg")
    task_cfg = cfg.get("task") if cfg is not None else None
    if task_cfg is None:
        task_cfg = state.get("args")
    get = (lambda k: task_cfg.get(k)) if hasattr(task_cfg, "get") else (lambda k: getattr(task_cfg, k, None))
    if get("source_lang") and get("target_lang"):
        return {}
    pair_recorded = recorded(state, "language_pair")
    pair = (tuple(pair_recorded.split("-", 1))
            if isinstance(pair_recorded, str) and "-" in pair_recorded else None)
    digests, separator = recorded(state, "dictionary_digests"), get("context_separator")
    pair = pair or _pair_of_directory(data, digests, separator) or _pair_of_directory(trained_on, digests, separator)
    if pair is None:
        langs = _dictionary_languages(data)
        why = (f"its dictionaries ({', '.join(f'dict.{x}.txt' for x in langs)}) fit either direction"
               if len(langs) == 2 else "it has no dictionaries of two languages")
        msg = (f"{path}: cannot tell the model's language pair: the checkpoint records none, {{opt}} "
               f"{data} has no docctx.json and no binarized files, and {why}: give the data "
               f"directory with docctx.json (copy it beside the dictionaries)")
        raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
    return {"source_lang": pair[0], "target_lang": pair[1]}


def checkpoint_path(checkpoint: str, checkpoint_file: str = "checkpoint_best.pt") -> str:
    """The ``.pt`` file of ``checkpoint``: the file itself, or ``checkpoint_file`` in the
    directory ``checkpoint``."""
    checkpoint = os.fspath(checkpoint)
    return os.path.join(checkpoint, checkpoint_file) if os.path.isdir(checkpoint) else checkpoint


def _dictionaries_beside(path: str) -> Optional[str]:
    """The checkpoint's directory where it holds ``dict.*.txt``, else ``None``."""
    ckpt_dir = os.path.dirname(os.path.abspath(path))
    return ckpt_dir if glob.glob(os.path.join(glob.escape(ckpt_dir), "dict.*.txt")) else None


def data_directory(path: str, state: dict, data: Optional[str] = None) -> str:
    """The data directory (dictionaries) a checkpoint is loaded with: ``data`` if given
    (refused if it is not a directory), else the checkpoint's directory if it holds
    ``dict.*.txt``, else the directory the model was trained on (refused if it is gone)."""
    if data is not None:
        data = os.fspath(data)
        if not os.path.isdir(data):
            raise CheckpointError(f"data={data}: no such directory", f"--data {data}: no such directory")
        return data
    beside = _dictionaries_beside(path)
    if beside:
        return beside
    data = trained_on(state)
    if not data or not os.path.isdir(data):
        msg = (f"{path}: the dictionaries are not found: the model was trained on "
               f"'{data}', which is not there; give the data directory with its dict.*.txt ({{opt}})")
        raise CheckpointError(msg.format(opt="data=DIR"), msg.format(opt="--data DIR"))
    return data


class LoadedCheckpoint(NamedTuple):
    """What :func:`load_models` returns."""

    models: list
    cfg: object  # the checkpoint's configuration, with the overrides
    task: object
    state: dict  # the checkpoint as read (weights and configuration)
    data: str  # the data directory it was loaded with


def load_models(path: str, data: Optional[str] = None, overrides: Optional[dict] = None,
                fix: str = ": give the data directory it was trained on") -> LoadedCheckpoint:
    """Load a checkpoint file for inference, with the dictionaries of ``data``
    (:func:`data_directory` when ``None``): the file read once
    (:func:`load_checkpoint_state`), the language pair resolved
    (:func:`resolve_language_pair`), ``overrides`` (task options such as
    ``context_size=2``) applied, the task set up, the context settings given checked against
    the checkpoint's (:func:`check_context_overrides`), the dictionaries checked
    (:func:`check_dictionaries`), and the models built by fairseq's
    ``load_model_ensemble_and_task``. ``fix``: what the error of a data directory without
    the model's dictionaries advises."""
    register()  # the plugin's classes and safe loading, before any checkpoint is read
    state = load_checkpoint_state(path)
    trained = trained_on(state)
    data = data_directory(path, state, data)
    arg_overrides = {"data": data, **resolve_language_pair(path, state, data, trained), **(overrides or {})}
    # task options newer than the checkpoint: fairseq's overrides skip a key the recorded
    # configuration lacks, the task then has the option's default; set them after set-up
    saved_task = state["cfg"].get("task") if state.get("cfg") is not None else None
    newer = {}
    if isinstance(saved_task, DictConfig):
        newer = {k: v for k, v in (overrides or {}).items() if k not in saved_task}
    context = recorded_context(saved_task if saved_task is not None else state.get("args"), overrides)
    apply_overrides(state, arg_overrides)
    try:
        task = tasks.setup_task(state["cfg"].task, from_checkpoint=True)
    except FileNotFoundError as e:
        missing = e.filename or first_line(e)
        raise CheckpointError(f"{path}: the data directory {data} does not hold the dictionaries of this "
                              f"model ({missing} is missing){fix}") from None
    newer = {k: v for k, v in newer.items() if isinstance(task.cfg, DictConfig) and k in task.cfg}
    if newer:
        with open_dict(task.cfg):
            for k, v in newer.items():
                setattr(task.cfg, k, v)
    # a context setting given that differs from the checkpoint's: refused, or said (context_override)
    check_context_overrides(task, context, path, recorded(state, "arch") or recorded(state, "_name"))
    check_dictionaries(path, state, task, data, trained)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides=arg_overrides, task=task, state=state)
    return LoadedCheckpoint(models, cfg, task, state, data)
