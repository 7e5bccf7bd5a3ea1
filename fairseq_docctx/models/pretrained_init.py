"""Start a document model from a public pretrained translation model: ``--init-from-pretrained``.

The two-stage recipe of :mod:`~fairseq_docctx.models.sentence_init` (Miculicich et al. 2018,
§3.2) with a sentence-level model the plugin did not train: a fairseq ``transformer``
checkpoint (WMT19 En<->De; with ``layernorm_embedding`` and pre-norm: mBART-50, M2M-100,
NLLB-200 dense) or a ``bart`` one (mBART-25: Liu et al. 2020, "Multilingual Denoising
Pre-training for Neural Machine Translation"; its checkpoint has no
``decoder.output_projection.weight``, the projection is the tied embedding table, fairseq
issue #1758); or a Hugging Face ``transformers`` model folder (``config.json``: OPUS-MT's
Marian, M2M-100 / NLLB-200, mBART, FSMT), converted by :mod:`~fairseq_docctx.models.hf_import`
into the same three things a fairseq checkpoint gives (weights in fairseq's names and rows, the
network options, the model class), its families' own choices being the options of
:mod:`~fairseq_docctx.modules.hf_network` (part of :data:`NETWORK_OPTIONS`). The document model
is built with the checkpoint's own network and its weights:

1. :func:`configure` (the start of the model's ``build_model``): the options that define the
   network (:data:`NETWORK_OPTIONS`) are read from the checkpoint's saved configuration
   (``cfg["model"]``, a Namespace or a dict, or the older ``args``) and set in the model's
   arguments. An option the user gave with another value is refused with one line naming
   the flag and both values; "given" means "differs from the architecture function's own
   default" (the architecture function run on an empty namespace), so a flag given with the
   architecture's default value counts as not given. The model's other options that the
   architecture derives from the sizes (e.g. ``--han-ffn-embed-dim``) are derived again from
   the checkpoint's sizes unless given. The data dictionaries are checked against the
   checkpoint's embedding rows ``R``: with the ``pretrained`` record ``docctx-prepare
   --pretrained`` writes into ``docctx.json``, its ``model_symbols`` must equal ``R``;
   without the record the dictionaries need at least ``R`` symbols and a warning says that
   the data folder was not prepared with ``docctx-prepare --pretrained`` (its first ``R``
   ids are taken to be the checkpoint's: true of a data folder the checkpoint was trained on,
   which no file records). A folder ``docctx-export transformers`` wrote holds the
   dictionaries of the checkpoint it came from: the data's first ``R`` symbols must be its
   symbols, whatever data folder they come from (the checkpoint's own, or one ``docctx-prepare
   --pretrained`` made from the folder).
2. :func:`load_weights` (through :func:`sentence_init.apply`, so that it is applied once, not
   again on a resume, and ``--freeze-sentence-weights`` / ``--lr-scale-pretrained`` act on
   what it loaded): every weight whose name and shape match; the embedding tables (and an
   untied output projection, an output bias) take rows ``[0, R)`` from the checkpoint; the
   rows of the symbols the data dictionary has beyond ``R`` (the context separator) start as
   the average of the checkpoint's rows (:func:`grow`: never the argmax where the
   checkpoint's own tokens are there, so that at K=0 the model translates as the checkpoint
   does). A table that grew counts as new for freezing and learning-rate scaling: its new rows must learn.

The context parts start as each model's paper says (its own ``is_context`` rule and
initialisation, e.g. ``g_transformer``'s global attentions copied from the group ones).
"""
import argparse
import logging
import os
from typing import Dict, List, Optional, Tuple

import torch
from fairseq import checkpoint_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

from ..data.hf_folder import HFFolderError, export_metadata, folder_vocabularies, is_hf_folder
from ..data.manifest import ManifestError, read_manifest
from ..errors import UsageError
from ..modules import hf_network
from . import hf_import
from .resume import restore_path

logger = logging.getLogger(__name__)

OPTION = "--init-from-pretrained"

#: the model classes whose checkpoints can be the starting point
MODEL_CLASSES = ("transformer", "bart")

#: the options that define the network, taken from the checkpoint (fairseq's argument names)
NETWORK_OPTIONS = (
    "encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_embed_dim",
    "encoder_ffn_embed_dim", "decoder_ffn_embed_dim", "encoder_attention_heads",
    "decoder_attention_heads", "encoder_normalize_before", "decoder_normalize_before",
    "no_decoder_final_norm", "layernorm_embedding", "activation_fn", "encoder_learned_pos",
    "decoder_learned_pos", "no_token_positional_embeddings", "no_scale_embedding",
    "share_all_embeddings", "share_decoder_input_output_embed", "decoder_output_dim",
    "decoder_input_dim", "max_source_positions", "max_target_positions",
) + tuple(hf_network.DEFAULTS)  # the transformers families' choices (modules/hf_network.py)

#: the embedding tables whose rows follow the dictionaries
TABLES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight",
          "decoder.output_projection.bias")


def add_args(parser):
    """The option (a model argument)."""
    parser.add_argument(OPTION, metavar="PATH",
                        help="build the model with the network of this pretrained fairseq translation "
                        "checkpoint (transformer or bart: WMT19, mBART, M2M-100, NLLB) or transformers model "
                        "folder (marian, m2m_100, mbart, fsmt) and start from its weights; the context parts "
                        "start as the model's paper says")
    hf_network.add_args(parser)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _as_dict(cfg) -> Dict[str, object]:
    """A saved model configuration as a flat dict of fairseq's argument names: a Namespace,
    a dict / DictConfig with flat keys, or a dataclass ``TransformerConfig`` dict (nested
    ``encoder``/``decoder`` sections: ``encoder.layers`` -> ``encoder_layers``)."""
    if cfg is None:
        return {}
    if isinstance(cfg, argparse.Namespace):
        return dict(vars(cfg))
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=False)
    except ImportError:  # pragma: no cover
        pass
    out = {}
    for k, v in dict(cfg).items():
        if k in ("encoder", "decoder") and isinstance(v, dict):
            out.update({f"{k}_{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def read_checkpoint(path: str) -> Tuple[dict, Dict[str, object], str]:
    """The weights, the network options (:data:`NETWORK_OPTIONS`, completed by the
    checkpoint's own architecture function) and the model class of ``path``. A missing file,
    an unreadable one or a model class other than :data:`MODEL_CLASSES` is a
    :class:`UsageError` (one line). A transformers model folder (``config.json``) is read by
    :func:`hf_import.read_folder` (its model class: ``transformers <model_type>``)."""
    if is_hf_folder(path):
        try:
            return hf_import.read_folder(path)
        except HFFolderError as e:
            raise UsageError(f"{OPTION}: {e}") from None
    if os.path.isdir(path):
        raise UsageError(f"{OPTION}: {path} is a directory without a config.json (not a transformers model "
                         "folder; a fairseq checkpoint is a file)")
    if not os.path.isfile(path):
        raise UsageError(f"{OPTION}: no such file {path}")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line
        raise UsageError(f"{OPTION}: {path}: not a readable fairseq checkpoint ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    cfg = state.get("cfg") or {}
    model_cfg = cfg.get("model") if hasattr(cfg, "get") else None
    if model_cfg is None:
        model_cfg = state.get("args")
    saved = _as_dict(model_cfg)
    arch = saved.get("arch") or saved.get("_name")
    cls = ARCH_MODEL_NAME_REGISTRY.get(arch, arch if arch in MODEL_REGISTRY else None)
    if cls is None and isinstance(arch, str) and arch.startswith("transformer_"):
        # a transformer variant another fairseq branch registers (e.g. NLLB's): its saved
        # configuration holds the sizes; fairseq's transformer defaults fill the rest
        cls, arch = "transformer", "transformer"
    if cls not in MODEL_CLASSES:
        raise UsageError(f"{OPTION}: {path}: model class {cls or arch or 'unknown'} "
                         f"(--arch {arch}) is not one this option starts from "
                         f"({', '.join(MODEL_CLASSES)})")
    ns = argparse.Namespace(**{k: v for k, v in saved.items() if v is not None})
    if arch in ARCH_CONFIG_REGISTRY:
        ARCH_CONFIG_REGISTRY[arch](ns)
    options = {k: getattr(ns, k) for k in NETWORK_OPTIONS if hasattr(ns, k)}
    if "model" not in state:
        raise UsageError(f"{OPTION}: {path}: the checkpoint has no weights")
    return state["model"], options, cls


#: the checkpoint :func:`configure` read, until :func:`load_weights` takes it (path -> what
#: :func:`read_checkpoint` returns): a large checkpoint is read once and not kept afterwards
_READ: Dict[str, Tuple[dict, Dict[str, object], str]] = {}


def architecture_defaults(arch: str) -> Dict[str, object]:
    """What the architecture function ``arch`` sets on an empty namespace: its defaults."""
    ns = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](ns)
    return dict(vars(ns))


def _rows(weights: dict, key: str) -> Optional[int]:
    t = weights.get(key)
    return None if t is None else int(t.shape[0])


def _export_symbols(path: str) -> Optional[Dict[str, List[str]]]:
    """``{"encoder", "decoder"}``: the symbols of a folder ``docctx-export transformers`` wrote,
    the dictionaries of the checkpoint it came from (its tokenizers' ids are theirs); ``None``
    for any other checkpoint."""
    if not is_hf_folder(path) or export_metadata(path) is None:
        return None
    try:
        vocabs = folder_vocabularies(path)
    except HFFolderError as e:
        raise UsageError(f"{OPTION}: {e}") from None
    return {"encoder": vocabs["source"].symbols, "decoder": vocabs["target"].symbols}


def check_dictionaries(task, weights: dict, path: str, name: str) -> List[str]:
    """The data dictionaries against the checkpoint's embedding rows (the module doc, 1.);
    returns the report's lines."""
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None)
    langs = {"encoder": getattr(cfg, "source_lang", None), "decoder": getattr(cfg, "target_lang", None)}
    dicts = {"encoder": task.source_dictionary, "decoder": task.target_dictionary}
    try:
        manifest = read_manifest(str(data).split(":")[0]) if data else None
    except ManifestError as e:
        raise UsageError(str(e)) from None
    record = (manifest or {}).get("pretrained")
    export = _export_symbols(path)
    lines = []
    for side in ("encoder", "decoder"):
        rows = _rows(weights, f"{side}.embed_tokens.weight")
        if rows is None and export is not None:
            rows = _rows(weights, "decoder.embed_tokens.weight")  # an export's tied table, saved once
        if rows is None:
            continue
        size, lang = len(dicts[side]), langs[side]
        if export is not None:
            mine, theirs = dicts[side].symbols[:rows], export[side][:rows]
            if size < rows or mine != theirs:
                at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(size, rows))
                raise UsageError(
                    f"{name}: {OPTION} {path}: the dictionary is not the export's: dict.{lang}.txt has "
                    f"{dicts[side].symbols[at] if at < size else 'no symbol'!r} at index {at}, the export "
                    f"{theirs[at] if at < len(theirs) else 'no symbol'!r} (prepare the data with "
                    f"docctx-prepare --pretrained {path})")
            lines.append(f"  {side} dictionary ({lang}): the export's {rows} symbols, checked"
                         + (f", {size - rows} new: " + " ".join(dicts[side].symbols[rows:]) if size > rows else ""))
            continue
        if record is not None:
            want = (record.get("model_symbols") or {}).get(lang)
            if want != rows:
                raise UsageError(
                    f"{name}: {OPTION} {path}: the dictionary does not match the checkpoint: "
                    f"{side}.embed_tokens has {rows} rows, the data folder's docctx.json records "
                    f"model_symbols {want} for {lang} (docctx-prepare --pretrained {record.get('dir')})")
            added = (record.get("added_symbols") or {}).get(lang) or {}
            if size != rows + len(added):
                raise UsageError(
                    f"{name}: {OPTION} {path}: the dictionary does not match the checkpoint: dict.{lang}.txt "
                    f"has {size} symbols, docctx.json records {rows} + {len(added)} added")
        elif size < rows:
            raise UsageError(
                f"{name}: {OPTION} {path}: the dictionary does not match the checkpoint: "
                f"{side}.embed_tokens has {rows} rows, dict.{lang}.txt {size} symbols")
        lines.append(f"  {side} dictionary ({lang}): rows 0..{rows - 1} from the checkpoint"
                     + (f", {size - rows} new: " + " ".join(dicts[side].symbols[rows:]) if size > rows else ""))
    if record is None and export is None:
        lines.append(f"  warning: {data} was not prepared with docctx-prepare --pretrained (no 'pretrained' "
                     "record in docctx.json): its first symbols are taken to be the checkpoint's, unchecked")
    return lines


def configure(args, task, name: str):
    """Set the checkpoint's network options in ``args`` (the module doc, 1.) when
    ``--init-from-pretrained`` is given; call it first in ``build_model``, before the model's
    own architecture function. On a resume of ``fairseq-train`` the pretrained checkpoint
    still gives the network; when it is gone, the checkpoint being restored does. Records the
    checkpoint's embedding rows per side in ``args.pretrained_rows``. Returns ``args``."""
    path = getattr(args, "init_from_pretrained", None)
    if not path:
        return args
    if getattr(args, "init_from_sentence_checkpoint", None):
        raise UsageError(f"{name}: {OPTION} and --init-from-sentence-checkpoint exclude each other: give one")
    resume = restore_path(args)
    if resume and not os.path.exists(path):
        state = checkpoint_utils.load_checkpoint_to_cpu(resume)
        saved = _as_dict(state["cfg"]["model"] if state.get("cfg") else state.get("args"))
        options = {k: saved[k] for k in NETWORK_OPTIONS if k in saved}
        rows, cls = dict(saved.get("pretrained_rows") or {}), "resumed"
    else:
        weights, options, cls = read_checkpoint(path)
        if not resume:  # load_weights takes it: the file is read once
            _READ[path] = (weights, options, cls)
        rows = {side: _rows(weights, f"{side}.embed_tokens.weight") for side in ("encoder", "decoder")}
    if options.get("share_all_embeddings") and task.source_dictionary != task.target_dictionary:
        raise UsageError(f"{name}: {OPTION} {path}: the checkpoint shares one embedding table between source and "
                         "target: the data folder needs a joined dictionary (docctx-prepare --joined-dictionary)")
    arch_defaults = architecture_defaults(args.arch)
    defaults = {**arch_defaults, **hf_network.DEFAULTS}
    given = {k for k, v in defaults.items() if hasattr(args, k) and getattr(args, k) != v}
    taken = []
    for k, v in options.items():
        mine = getattr(args, k, None)
        if k in given and mine != v:
            raise UsageError(f"{name}: {_flag(k)} {mine} contradicts {path}: its {_flag(k)} is {v}")
        if mine != v:
            taken.append(f"{_flag(k)} {v}")
        setattr(args, k, v)
    # the options the architecture derives from the sizes are derived again (unless given)
    for k in arch_defaults:
        if k not in given and k not in options and hasattr(args, k):
            delattr(args, k)
    ARCH_CONFIG_REGISTRY[args.arch](args)
    args.pretrained_rows = rows
    lines = [f"{name}: {OPTION} {path}: a {cls} checkpoint; the network is the checkpoint's"
             + (f" ({len(taken)} options taken: {', '.join(taken)})" if taken else "")]
    if resume:
        lines.append(f"  resuming from {resume}: the weights are not loaded again")
    else:
        lines += check_dictionaries(task, weights, path, name)
    print("\n".join(lines), flush=True)
    for line in lines:
        logger.info(line)
    return args


def grown_names(model, args) -> set:
    """The names (tied names included) of the embedding tables of ``model`` that have more
    rows than the checkpoint's (``args.pretrained_rows``): partly new, so neither frozen nor
    scaled."""
    rows = getattr(args, "pretrained_rows", None) or {}
    params = dict(model.named_parameters(remove_duplicate=False))
    grown = set()
    for k in TABLES:
        side = k.split(".")[0]
        p = params.get(k)
        if p is not None and rows.get(side) is not None and p.shape[0] > rows[side]:
            grown |= {n for n, q in params.items() if q is p}
    return grown


def grow(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table`` (a model's embedding table ``[V, C]`` or output bias ``[V]``) with its first
    rows the checkpoint's ``rows`` ``[R, ...]`` and each row after them (the symbols the data
    adds: the context separator, the mask) their average. A new symbol's output logit is then
    the average of the checkpoint's logits (``h · mean(W) + mean(b)``), below the largest one
    unless all are equal: the model started from the checkpoint never predicts it where the
    checkpoint predicts a token of its own, so at K=0 it translates as the checkpoint does
    (fairseq's random rows could win the argmax). The rows still learn (Hewitt 2021,
    "Initializing new word embeddings for pretrained language models")."""
    out = table.detach().clone()
    out[: rows.shape[0]] = rows
    out[rows.shape[0]:] = rows.float().mean(0).to(out.dtype)
    return out


def load_weights(model, path: str, name: str) -> List[str]:
    """Copy the checkpoint's weights into ``model`` (the module doc, 2.); print a report of
    what is loaded, grown, added (new) and left out. Returns the names of the loaded
    parameters and buffers (those of the tables that grew included)."""
    weights, _, cls = _READ.pop(path, None) or read_checkpoint(path)
    own = model.state_dict()
    params = dict(model.named_parameters(remove_duplicate=False))
    full, grown, ignored = {}, {}, []
    for k, v in weights.items():
        mine = own.get(k)
        if mine is None:
            ignored.append(f"  left out: {k} {tuple(v.shape)} (not in the model)")
        elif mine.shape == v.shape:
            full[k] = v
        elif k in TABLES and v.dim() == mine.dim() and v.shape[1:] == mine.shape[1:] and v.shape[0] < mine.shape[0]:
            grown[k] = v
        else:
            ignored.append(f"  left out: {k} {tuple(v.shape)} (model: {tuple(mine.shape)})")
    update = dict(full)
    for k, v in grown.items():
        update[k] = grow(own[k], v)
    model.load_state_dict(dict(update), strict=False)  # a copy: fairseq upgrades it in place
    # a name of a tied tensor the checkpoint lacks is loaded with it (bart: the output
    # projection is decoder.embed_tokens.weight; fairseq issue #1758)
    tied = {}
    for k, p in params.items():
        if k not in update:
            j = next((j for j in update if j in params and params[j] is p), None)
            if j is not None:
                tied[k] = j
    new = sorted(k for k in own if k not in update and k not in tied)
    lines = [f"{name}: initialised from {path} ({OPTION}, {cls}): {len(full)} loaded, {len(grown)} grown, "
             f"{len(new)} new, {len(ignored)} left out"]
    lines += [f"  grown: {k}: rows 0..{v.shape[0] - 1} loaded, rows {v.shape[0]}..{own[k].shape[0] - 1} new"
              for k, v in grown.items()]
    lines += [f"  tied: {k} is {j}" for k, j in sorted(tied.items())]
    lines += [f"  new: {k}" for k in new] + ignored
    print("\n".join(lines), flush=True)
    logger.info(lines[0])
    return list(update) + list(tied)
