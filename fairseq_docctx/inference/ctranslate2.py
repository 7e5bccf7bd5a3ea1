"""The CTranslate2 engine (Klein et al. 2020, "Efficient and High-Quality Neural Machine
Translation with OpenNMT"): a trained ``transformer``, ``concat_transformer`` or
``doc2doc_transformer`` exported to a CTranslate2 model folder, and decoded through the same
document-order scheduling as the fairseq models (the task's batches, its store of the model's
own previous translations).

A segment model (``--doc-mode segments``: ``doc2doc_transformer``, or a ``transformer``
trained on segments) is a Transformer over the joined sentences of a segment: the task packs
and decodes the segments as on the fairseq path (``segment_inference_step``), with this
engine's generator. CTranslate2 cannot apply ``doc2doc_transformer``'s sentence-count and
length-window rules inside its search, so the task checks them on the decoded segment
(:class:`ExportedSegmentModel` carries them) and decodes a segment that breaks one again
sentence by sentence. ``g_transformer`` (group attention) does not export.

A concatenation model is a Transformer over the joined tokens: the source context is joined
to the current sentence as the model's encoder joins it
(:func:`~fairseq_docctx.modules.context_concat.concat_with_context`: ``x_{j-K} <sep> ...
x_{j-1} <sep> x_j </s>``, positions counted from the first token, no other embedding), and
the target context (``y_{j-K} <sep> ... y_{j-1} <sep>``) followed by fairseq's decoder start
token ``</s>`` is the decoder's forced prefix (``target_prefix``), cut from the output.

The exported folder holds CTranslate2's ``model.bin`` and vocabularies, the data directory's
dictionaries and SentencePiece model, and :data:`EXPORT_FILE` (what the checkpoint was: its
architecture, language pair, task settings with the context settings K, sides and separator).
The ``ctranslate2`` package is an optional dependency (``pip install
fairseq_docctx[ctranslate2]``), imported only here and only when used.
"""
import contextlib
import copy
import json
import math
import os
import re
import shutil
import tempfile
from typing import List, Optional

import torch

from .. import register
from ..data import context_batch as cb
from ..models.document_context import DocumentContextModel
from ..data.drafts import DEFAULT_BEAM
from ..data.outputs import Outputs
from ..modules.context_concat import concat_with_context, gather_context_rows, pack_segments
from ..modules.sentence_positions import DocumentPositions
from .checkpoint import CheckpointError, check_context_overrides, checkpoint_sha1, recorded_context
from .options import CT2_PREFIX_MODES, check_ct2_prefix

#: the description of an exported folder, beside CTranslate2's files
EXPORT_FILE = "docctx-export.json"
#: registered fairseq models (``--arch``'s model) that export
SUPPORTED_MODELS = ("transformer", "concat_transformer", "doc2doc_transformer")
#: the models that may translate segments (``--doc-mode segments``) through the engine: plain
#: Transformers over the joined sentences (``doc2doc_transformer``, or a ``transformer`` trained
#: on segments), whose segments are split into their sentences and checked after the search
SEGMENT_MODELS = ("transformer", "doc2doc_transformer")
#: fairseq's ``--activation-fn`` values CTranslate2 computes alike
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_accurate": "GELUTanh", "gelu_fast": "GELUTanh",
                "swish": "SWISH"}
#: CTranslate2's name of the padding token (fairseq's ``<pad>`` is renamed in its vocabularies)
_CT2_PAD = "<blank>"
#: how the engine decodes a sentence after a target prefix (``--ct2-prefix``)
PREFIX_MODES = CT2_PREFIX_MODES


class ExportError(ValueError):
    """A checkpoint that does not export, or an exported folder that cannot be used; one line."""


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ExportError("the ctranslate2 engine needs the ctranslate2 package: "
                          "pip install fairseq_docctx[ctranslate2]") from None
    return ctranslate2


def model_name_of(arch: Optional[str]) -> Optional[str]:
    """The registered model of an architecture name (``None`` if unknown)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return ARCH_MODEL_NAME_REGISTRY.get(arch) if arch else None


def check_architecture(arch: Optional[str], where: str) -> str:
    """The model name of ``arch``, or :class:`ExportError` naming the supported ones (a
    segment model other than ``doc2doc_transformer``, e.g. ``g_transformer``, saying why it
    stays on fairseq)."""
    from ..models.document_context import model_class, reads_segments

    name = model_name_of(arch)
    if name not in SUPPORTED_MODELS:
        if name is not None and reads_segments(model_class(name)):
            raise ExportError(
                f"{where}: architecture {arch!r} does not export to CTranslate2: it translates segments with "
                "attention that is not a plain Transformer's (g_transformer: group attention, each sentence "
                "attending to its own), which CTranslate2 does not compute; translate it with --engine fairseq, "
                "or train a doc2doc_transformer, which exports")
        raise ExportError(f"{where}: architecture {arch!r} does not export to CTranslate2; supported: "
                          + ", ".join(SUPPORTED_MODELS) + " (and their named variants)")
    return name


def check_segments(task, name: str, where: str) -> None:
    """Refuse a task that translates segments (``--doc-mode segments``) with a model the
    engine does not decode segments of: only plain Transformers over segments
    (:data:`SEGMENT_MODELS`) are, and not on data with language tokens (``docctx-prepare
    --pretrained``), where the segment models force the target language token first in every
    sentence inside fairseq's search, which CTranslate2's search cannot do."""
    if not getattr(task, "segments", False):
        return
    if name not in SEGMENT_MODELS:
        raise ExportError(f"{where}: a {name} that translates segments (--doc-mode segments) does not export to "
                          "CTranslate2 (segments: " + ", ".join(SEGMENT_MODELS) + "): translate with --engine fairseq")
    langtoks = (getattr(task, "target_langtok", lambda: None)() is not None
                or getattr(task, "bart_langtoks", lambda: None)() is not None)
    if langtoks:
        raise ExportError(f"{where}: segments on data with language tokens (docctx-prepare --pretrained): every "
                          "sentence of a segment starts with its language token, forced inside fairseq's search, "
                          "which CTranslate2 cannot do: translate with --engine fairseq")


def segment_record(task, model) -> Optional[dict]:
    """What the export record says of a segment model (``None`` for other models): its
    packing (``--max-segment-tokens``, ``--segment-packing``) and whether fairseq's search of
    the model keeps the sentence count and the length windows inside it (``constrained``:
    ``doc2doc_transformer``; a ``transformer`` on segments has no such rule). The engine
    checks them after its search instead (:class:`ExportedSegmentModel`)."""
    if not getattr(task, "segments", False):
        return None
    from ..models.document_context import reads_segments

    return {"max_segment_tokens": int(task.cfg.max_segment_tokens),
            "segment_packing": str(task.cfg.segment_packing),
            "constrained": reads_segments(model)}


# ---------------------------------------------------------------------- export
def _check_exportable(model, where: str) -> None:
    """Refuse (one line) what CTranslate2's Transformer does not compute as fairseq does."""
    enc, dec = model.encoder, model.decoder
    cfg = getattr(enc, "cfg", None)
    problems = []
    act = getattr(getattr(cfg, "activation_fn", None), "value", getattr(cfg, "activation_fn", "relu"))
    if str(act) not in _ACTIVATIONS:
        problems.append(f"--activation-fn {act}")
    if enc.embed_positions is None or dec.embed_positions is None:
        problems.append("--no-token-positional-embeddings")
    if len(enc.layers) and len(dec.layers):
        e_pre, d_pre = enc.layers[0].normalize_before, dec.layers[0].normalize_before
        if e_pre != d_pre:
            problems.append("different --encoder/--decoder-normalize-before")
        if d_pre and (enc.layer_norm is None) != (dec.layer_norm is None):
            problems.append("--no-decoder-final-norm")
        if enc.layers[0].self_attn.num_heads != dec.layers[0].self_attn.num_heads:
            problems.append("different encoder and decoder attention heads")
    if getattr(dec, "adaptive_softmax", None) is not None:
        problems.append("--adaptive-softmax-cutoff")
    if dec.project_in_dim is not None or dec.project_out_dim is not None:
        problems.append("--decoder-input-dim/--decoder-output-dim other than --decoder-embed-dim")
    if getattr(dec, "cross_self_attention", False):
        problems.append("--cross-self-attention")
    if getattr(enc, "quant_noise", None) is not None or getattr(dec, "quant_noise", None) is not None:
        problems.append("--quant-noise-pq")
    # document positions (Lupo et al. 2022, 2023): CTranslate2 numbers the tokens of the joined
    # sequence 0, 1, 2, ... and adds nothing else
    if any(isinstance(p, DocumentPositions) and p.shift for p in (enc.embed_positions, dec.embed_positions)):
        problems.append("--segment-shifted-positions")
    if any(isinstance(p, DocumentPositions) and p.sentence_embeddings is not None
           for p in (enc.embed_positions, dec.embed_positions)):
        problems.append("--sentence-position-embeddings")
    extra = _parameters_not_exported(model)
    if extra:  # a weight the spec would leave out: a model other than a plain Transformer
        problems.append(f"parameters a plain Transformer lacks ({', '.join(extra[:3])}"
                        + (f" and {len(extra) - 3} more" if len(extra) > 3 else "") + ")")
    if problems:
        raise ExportError(f"{where}: CTranslate2 does not compute this model as fairseq does: "
                          + ", ".join(problems))


#: the parameters of a plain fairseq Transformer, the ones :func:`model_spec` writes
_TRANSFORMER_PARAMETER = re.compile(
    r"(encoder|decoder)\.(embed_tokens\.weight|embed_positions\.weight|(layernorm_embedding|layer_norm)\.(weight|bias)"
    r"|layers\.\d+\.((self_attn|encoder_attn)\.(q_proj|k_proj|v_proj|out_proj)|fc1|fc2"
    r"|self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\.(weight|bias))"
    r"|decoder\.output_projection\.weight")


def _parameters_not_exported(model) -> List[str]:
    """The names of ``model``'s parameters that a plain Transformer does not have (and the
    export would leave out): none for ``transformer``, ``concat_transformer`` and
    ``doc2doc_transformer``, whose encoder and decoder are fairseq's Transformer's."""
    return [n for n, _ in model.named_parameters() if not _TRANSFORMER_PARAMETER.fullmatch(n)]


def _np(t: torch.Tensor):
    return t.detach().float().cpu().numpy()


def _linear(spec, *modules) -> None:
    """``spec``'s weight and bias: those of ``modules`` stacked (fused projections)."""
    spec.weight = _np(torch.cat([m.weight for m in modules], 0))
    if modules[0].bias is not None:
        spec.bias = _np(torch.cat([m.bias for m in modules], 0))


def _norm(spec, ln) -> None:
    spec.gamma, spec.beta = _np(ln.weight), _np(ln.bias)


def _inputs(spec, module) -> None:
    """Token embeddings, their scale, and the positions table from fairseq's first position
    (``padding_idx + 1``) on."""
    emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    emb.weight = _np(module.embed_tokens.weight)
    spec.scale_embeddings = float(module.embed_scale)
    pos = module.embed_positions
    table = pos.weight if isinstance(pos, torch.nn.Embedding) else pos.weights
    spec.position_encodings.encodings = _np(table[pos.padding_idx + 1:])
    if module.layernorm_embedding is not None:
        _norm(spec.layernorm_embedding, module.layernorm_embedding)
    if module.layer_norm is not None:
        _norm(spec.layer_norm, module.layer_norm)


def _attention(spec, attn, ln, self_attention: bool) -> None:
    if self_attention:
        _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    else:
        _linear(spec.linear[0], attn.q_proj)
        _linear(spec.linear[1], attn.k_proj, attn.v_proj)
    _linear(spec.linear[-1], attn.out_proj)
    _norm(spec.layer_norm, ln)


def _ffn(spec, layer) -> None:
    _linear(spec.linear_0, layer.fc1)
    _linear(spec.linear_1, layer.fc2)
    _norm(spec.layer_norm, layer.final_layer_norm)


def _vocabulary(d) -> List[str]:
    return [_CT2_PAD if i == d.pad() else s for i, s in enumerate(d.symbols)]


def model_spec(model, where: str = "the model"):
    """The CTranslate2 ``TransformerSpec`` of a fairseq Transformer (``transformer``, or
    ``concat_transformer``: the same network over joined tokens) with its weights."""
    _ctranslate2()  # installed, or one line saying how
    from ctranslate2.specs import common_spec, transformer_spec

    _check_exportable(model, where)
    enc, dec = model.encoder, model.decoder
    pre_norm = bool(enc.layers[0].normalize_before) if len(enc.layers) else False
    act = getattr(common_spec.Activation, _ACTIVATIONS[str(getattr(enc.cfg.activation_fn, "value",
                                                                   enc.cfg.activation_fn))])
    heads = enc.layers[0].self_attn.num_heads
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(
            len(enc.layers), heads, pre_norm=pre_norm, activation=act,
            layernorm_embedding=enc.layernorm_embedding is not None),
        transformer_spec.TransformerDecoderSpec(
            len(dec.layers), heads, pre_norm=pre_norm, activation=act,
            layernorm_embedding=dec.layernorm_embedding is not None,
            no_final_norm=pre_norm and dec.layer_norm is None),
    )
    _inputs(spec.encoder, enc)
    for ls, layer in zip(spec.encoder.layer, enc.layers):
        _attention(ls.self_attention, layer.self_attn, layer.self_attn_layer_norm, True)
        _ffn(ls.ffn, layer)
    _inputs(spec.decoder, dec)
    _linear(spec.decoder.projection, dec.output_projection)
    for ls, layer in zip(spec.decoder.layer, dec.layers):
        _attention(ls.self_attention, layer.self_attn, layer.self_attn_layer_norm, True)
        _attention(ls.attention, layer.encoder_attn, layer.encoder_attn_layer_norm, False)
        _ffn(ls.ffn, layer)
    spec.register_source_vocabulary(_vocabulary(enc.dictionary))
    spec.register_target_vocabulary(_vocabulary(dec.dictionary))
    # the decoder starts with the target prefix: fairseq's start token </s>, after the
    # target context where there is one; the source tokens carry their own </s>
    spec.config.decoder_start_token = None
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(getattr(dec.layers[0].final_layer_norm, "eps", 1e-5)
                                           if len(dec.layers) else 1e-5)
    return spec


def _container(cfg) -> dict:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return {k: v for k, v in vars(cfg).items() if isinstance(v, (str, int, float, bool, type(None), list))}


#: the files CTranslate2 writes into a model folder (for an export whose record does not list its files)
_CT2_FILES = ("model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
              "target_vocabulary.json", "shared_vocabulary.txt", "source_vocabulary.txt", "target_vocabulary.txt")


def _check_earlier_export(outdir: str) -> None:
    """Refuse an existing ``outdir`` that ``--force`` may not replace: anything but a folder
    ``docctx-export`` wrote (its :data:`EXPORT_FILE`) holding only the files it wrote."""
    if os.path.islink(outdir) or not os.path.isdir(outdir) or not os.path.isfile(os.path.join(outdir, EXPORT_FILE)):
        raise ExportError(f"OUTDIR {outdir} exists and is not a folder docctx-export wrote (no {EXPORT_FILE}): "
                          "--force replaces only an earlier export; give another folder")
    record = read_export(outdir)
    written = set(record.get("files") or (EXPORT_FILE, *_CT2_FILES, *record.get("dictionaries", {}).values(),
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
    guard.make_folders(os.path.dirname(os.path.abspath(outdir)))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(outdir)}.", suffix=".part",
                           dir=os.path.dirname(os.path.abspath(outdir)))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # the mode os.makedirs gives, not mkdtemp's 0700
    try:
        spec.save(tmp)
        cfg = task.cfg
        src, tgt = cfg.source_lang, cfg.target_lang
        dicts = {}
        for side, lang, d in (("source", src, task.source_dictionary), ("target", tgt, task.target_dictionary)):
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
        task_cfg = _container(cfg)
        task_cfg.pop("data", None)
        record = {
            "engine": "ctranslate2",
            "model": name,
            "arch": arch,
            "source_lang": src,
            "target_lang": tgt,
            "dictionaries": dicts,
            "spm_model": spm,
            "pretrained": pretrained,
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
        record["files"] = sorted([*os.listdir(tmp), EXPORT_FILE])
        with open(os.path.join(tmp, EXPORT_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
        _move_into_place(tmp, outdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _move_into_place(tmp: str, outdir: str) -> None:
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


# ---------------------------------------------------------------------- loading
def read_export(path: str) -> dict:
    """The record (:data:`EXPORT_FILE`) of an exported folder; :class:`ExportError` if
    ``path`` is not one."""
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
    if not isinstance(record, dict) or record.get("engine") != "ctranslate2":
        raise ExportError(f"{rec_path}: not a record of docctx-export ctranslate2")
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


class ExportedModel(torch.nn.Module):
    """What the task and the hub ask of a model (its positions, its context contract),
    for a model that CTranslate2 runs."""

    def __init__(self, record: dict):
        super().__init__()
        self.record = record
        self.max_source_positions = int(record["max_source_positions"])
        self.max_target_positions = int(record["max_target_positions"])

    def max_positions(self):
        return self.max_source_positions, self.max_target_positions

    def max_decoder_positions(self):
        return self.max_target_positions

    def prepare_for_inference_(self, cfg):
        pass


class ExportedContextModel(DocumentContextModel, ExportedModel):
    """An exported ``concat_transformer``: it reads the source and target sides."""


class ExportedSegmentModel(ExportedModel):
    """An exported ``doc2doc_transformer``: a Transformer over segments whose fairseq search
    keeps every hypothesis to its source's number of sentences and each output sentence to
    its length window (:class:`~fairseq_docctx.models.g_transformer.SegmentDecoder`).
    CTranslate2 searches without those rules; the task checks the same rules on the decoded
    segment instead (``decoding_window`` reads :attr:`sentence_length_window`, and
    ``segment_inference_step`` decodes a segment that breaks one again sentence by sentence).
    The settings are the segment models' (``set_sentence_count_constraint``,
    ``set_sentence_length_window``), so the task sets them alike."""

    reads_segments = True

    def __init__(self, record: dict):
        super().__init__(record)
        self.keep_sentence_count = True
        self.length_window = None

    def set_sentence_count_constraint(self, on: bool = True):
        self.keep_sentence_count = bool(on)
        return self

    @property
    def keeps_sentence_count(self) -> bool:
        return self.keep_sentence_count

    def set_sentence_length_window(self, window=None):
        from ..data.segments import LengthWindow

        self.length_window = window if isinstance(window, LengthWindow) else None
        return self

    @property
    def sentence_length_window(self):
        """The window each output sentence is checked against after the search (``None``:
        off, or with the sentence count off, as in fairseq's search)."""
        return self.length_window if self.keep_sentence_count else None


def exported_model(record: dict, task) -> ExportedModel:
    """The stand-in model of an export record, its context declared as the model's."""
    if (record.get("segments") or {}).get("constrained"):
        return ExportedSegmentModel(record)
    if record["model"] != "concat_transformer":
        return ExportedModel(record)
    from ..models.document_context import task_context

    sides, _ = task_context(task)
    return ExportedContextModel(record).declare_context([s for s in sides if s in ("src", "tgt")], None)


def load_translator(path: str, cpu: bool = True, threads: Optional[int] = None):
    """``ctranslate2.Translator`` of an exported folder, on the CPU (``threads``: default
    torch's thread count, so that ``OMP_NUM_THREADS`` sets both engines) or the GPU."""
    ct2 = _ctranslate2()
    device = "cpu" if cpu or ct2.get_cuda_device_count() == 0 else "cuda"
    threads = threads or torch.get_num_threads()
    try:
        return ct2.Translator(path, device=device, compute_type="default", inter_threads=1,
                              intra_threads=threads if device == "cpu" else 0)
    except (RuntimeError, ValueError) as e:
        raise ExportError(f"--path {path}: CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None


# ---------------------------------------------------------------------- decoding
class CTranslate2Generator:
    """fairseq's generator interface (``generate(models, sample)`` -> one list of hypotheses
    per row, best first, ``tokens`` ending in EOS) over a ``ctranslate2.Translator``, running
    fairseq's beam search (``fairseq.sequence_generator.SequenceGenerator``).

    The rows' context (``net_input["context"]``, as the task collates it, with the model's
    own translations on the target side in document order) is joined as the model's encoder
    joins it. Every row is decoded as it would be alone: its length limit is
    ``max_len_a * n + max_len_b`` tokens before EOS, ``n`` its own source sentence's tokens
    (EOS included), whatever its neighbours in the batch; at least ``min_len`` tokens; EOS is
    forced at the limit. The search is fairseq's: the same ``2 * beam`` candidates per step,
    hypotheses ending in EOS among the first ``beam`` set aside and the beam refilled from the
    others, a sentence ended when ``beam`` hypotheses have ended (CTranslate2's rule with a
    length penalty other than 0 and patience 1; with a length penalty of 0 it also waits for
    a step whose best candidate ends, searching on past fairseq's end), the first step after a
    target prefix (the target context, a forced language token) ending the empty translation
    where fairseq's does (CTranslate2's own search ends only its best candidate there), and the
    ended hypotheses ranked as fairseq ranks them (:meth:`_search`).

    ``prefix`` (:data:`PREFIX_MODES`, ``--ct2-prefix``): how a row with a target prefix (the
    target context) is decoded. ``stepwise`` (the default) is the search above: CTranslate2's
    ``translate_batch`` forces the prefix one step at a time on every beam. ``one-pass`` and
    ``one-pass-beam`` use CTranslate2's ``return_alternatives`` search (:meth:`_one_pass`),
    which runs the prefix through the decoder in one call and then searches each row alone:
    ``one-pass`` takes the ``beam`` best first tokens after the prefix and continues each
    greedily, the best of them by fairseq's ranking is the translation; ``one-pass-beam``
    takes the best first token and continues it with CTranslate2's beam search of ``beam``.
    Both are greedy search at beam 1 (the same translations as ``stepwise``), and another
    search than fairseq's beam search above it. Rows without a prefix (a document's first
    sentence, a sentence-level model) are decoded ``stepwise`` in every mode."""

    def __init__(self, translator, src_dict, tgt_dict, sep: Optional[int], beam: int = 5,
                 lenpen: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200, min_len: int = 1,
                 max_source_positions: int = 1024, max_target_positions: int = 1024,
                 unkpen: float = 0.0, max_batch_size: int = 0, prefix: str = "stepwise"):
        self.prefix = check_ct2_prefix(prefix)
        self.translator = translator
        self.src_dict, self.tgt_dict, self.sep = src_dict, tgt_dict, sep
        self.beam, self.lenpen = int(beam), float(lenpen)
        self.max_len_a, self.max_len_b, self.min_len = float(max_len_a), int(max_len_b), int(min_len)
        self.max_source_positions = int(max_source_positions)
        self.max_target_positions = int(max_target_positions)
        self.disable_unk = unkpen == float("inf")
        self.src_words = _vocabulary(src_dict)
        self.tgt_words = _vocabulary(tgt_dict)
        self.tgt_index = {w: i for i, w in enumerate(self.tgt_words)}
        self.eos_word = self.tgt_words[tgt_dict.eos()]
        #: the decoder's start token of the search under way (fairseq's </s>, or its ``bos_token``)
        self.start_word = self.eos_word
        # CTranslate2's length penalty: fairseq's, or one too small to change a float32
        # score where fairseq's is 0 (CTranslate2's stopping rule needs one other than 0)
        self.ct2_lenpen = self.lenpen if self.lenpen != 0 else 1e-12
        #: the rows' raised limits of the batch decoded within :meth:`at_least` (``None``: none)
        self.floor: Optional[torch.Tensor] = None

    @property
    def len_penalty(self) -> float:
        """``--lenpen``, under the name fairseq's generator gives it (the task's segment
        decoding reads it to score each sentence of a segment)."""
        return self.lenpen

    @contextlib.contextmanager
    def at_least(self, floor: Optional[torch.Tensor]):
        """Within the block, row i of the batch decoded there (one :meth:`generate` call) ends
        no earlier than ``floor[i]`` tokens (still at most the decoder's positions less one), as
        :meth:`~fairseq_docctx.tasks.length_limits.RowLengthLimit.at_least` raises fairseq's
        limits: the task raises a segment's limit to the sum of its sentences' length windows
        and separators. ``None``: nothing changes."""
        before, self.floor = self.floor, None if floor is None else floor.long().cpu()
        try:
            yield self
        finally:
            self.floor = before

    def _rows(self, tokens: torch.Tensor, words: List[str], pad: int) -> List[List[str]]:
        return [[words[i] for i in row if i != pad] for row in tokens.tolist()]

    def max_len(self, source_length: int) -> int:
        """The length limit (tokens before EOS) of a sentence of ``source_length`` tokens (its
        EOS included): ``int(max_len_a * source_length + max_len_b)``, at most the decoder's
        positions less one."""
        return min(int(self.max_len_a * source_length + self.max_len_b), self.max_target_positions - 1)

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **unused):
        """``prefix_tokens`` ``[B, k]``: the first output tokens of every row, forced as
        fairseq's generator forces them (the target language token of data with language
        tokens): they are the first tokens of each translation, scored and counted in its
        length and limit. ``bos_token``: the decoder's start token in place of ``</s>``, as
        fairseq's generator takes it (mBART-25's target language token)."""
        self.start_word = self.tgt_words[bos_token] if bos_token is not None else self.eos_word
        if constraints is not None:
            raise ValueError("the ctranslate2 engine takes no constraints")
        ni = sample["net_input"]
        src = ni["src_tokens"].cpu()
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        limits = [self.max_len(n) for n in src.ne(pad).sum(1).tolist()]
        if self.floor is not None:
            if self.floor.numel() != len(limits):
                raise RuntimeError(f"length limits raised for {self.floor.numel()} rows, the batch has {len(limits)}")
            limits = [min(max(n, f), self.max_target_positions - 1) for n, f in zip(limits, self.floor.tolist())]
        ctx = cb.get_context(ni)
        if cb.has_side(ctx, "src"):
            table = cb.table(ctx, "src")
            src, _ = concat_with_context(src, table.tokens.cpu(), table.index.cpu(), pad, eos, self.sep,
                                         left_pad=True, max_len=self.max_source_positions)
        sources = self._rows(src, self.src_words, pad)
        B = len(sources)
        tpad = self.tgt_dict.pad()
        prefixes = [[] for _ in range(B)]
        if cb.has_side(ctx, "tgt"):
            table = cb.table(ctx, "tgt")
            segs = [gather_context_rows(table.tokens.cpu(), table.index[:, k].cpu(), tpad,
                                        self.tgt_dict.eos(), self.sep)
                    for k in reversed(range(table.index.size(1)))]
            packed, _ = pack_segments(segs, tpad, left_pad=False)
            # the earliest context tokens go where the prefix and the sentence outgrow the positions
            rooms = [max(self.max_target_positions - (n + 1) - 1, 0) for n in limits]
            prefixes = [p[len(p) - room:] if len(p) > room else p
                        for p, room in zip(self._rows(packed, self.tgt_words, tpad), rooms)]
        # the target prefix: the context, then fairseq's start token; CTranslate2 takes its
        # first token as the decoder's start and returns the rest before the translation
        targets = [p + [self.start_word] for p in prefixes]
        forced = [[] for _ in range(B)]
        if prefix_tokens is not None:
            forced = self._rows(prefix_tokens.cpu(), self.tgt_words, tpad)
        best = self._search(sources, targets, [len(p) for p in prefixes], limits, forced)
        return [[{"tokens": torch.tensor(ids, dtype=torch.long), "score": score, "attention": None,
                  "alignment": None, "positional_scores": torch.zeros(len(ids))}]
                for ids, score in best]

    def _search(self, sources, targets, cut: List[int], limits: List[int], forced=None):
        """The best translation ``(token ids ending in EOS, score)`` of every row, ranked as
        fairseq ranks finished hypotheses: the sum of the translation's log-probabilities
        (EOS included) over its length (EOS included) to the power ``lenpen``.

        CTranslate2 normalises by the length of the returned prefix and translation, so the
        hypotheses are ranked here (:meth:`_finished` returns each row's ``beam`` best).
        Where CTranslate2 keeps EOS out of the first free step (:meth:`_first_step`), it
        renormalises that step's probabilities over the other tokens, which fairseq does not:
        every hypothesis of the row gains ``-log(1 - p(EOS))``, taken off again (``p(EOS)``
        scored by CTranslate2; needed only where the ranking depends on it). A translation
        cut at the length limit is scored again, ending in EOS, as fairseq ends and scores it.

        ``forced``: per row, the words forced first in its translation (fairseq's
        ``prefix_tokens``), given to CTranslate2 at the end of the target prefix; CTranslate2
        returns them as the translation's first tokens, and their log-probabilities, which
        fairseq counts in the score and CTranslate2 does not, are added (scored once per row).

        After a target prefix, CTranslate2's beam search lets EOS end only the best candidate
        of the first free step (it drops EOS from the others, ``update_sample_with_prefix`` in
        its ``decoding.cc``), where fairseq's beam search ends every hypothesis of the step's
        ``beam`` best candidates that ends in EOS, and counts it among the ``beam`` it waits
        for: the empty translation (the forced words alone, or nothing after the target
        context at a minimum length of 0). Above beam 1 the engine keeps EOS out of that
        step in CTranslate2's search, finds whether fairseq ends the empty translation there
        (:meth:`_ends_empty`), and then searches the row to ``beam - 1`` finished hypotheses
        (patience ``(beam - 1) / beam``) and adds the empty translation with fairseq's score:
        the same candidates at every step, the same end and ranking as fairseq's."""
        forced = forced or [[] for _ in sources]
        starts, targets = targets, [t + f for t, f in zip(targets, forced)]
        one_pass = [self.prefix != "stepwise" and c > 0 for c in cut]
        first = [self._first_step(len(t) - 1, len(f), one) for t, f, one in zip(targets, forced, one_pass)]
        # the forced words' log-probabilities and p(EOS) at the first free step (scored once)
        extra, eos_lp = [0.0] * len(sources), [None] * len(sources)
        scored_rows = [i for i, f in enumerate(forced) if f or first[i][2]]
        if scored_rows:
            scored = self.translator.score_batch([sources[i] for i in scored_rows],
                                                 [targets[i] for i in scored_rows], max_input_length=0)
            for i, r in zip(scored_rows, scored):  # the last token scored: EOS right after the prefix
                extra[i] = float(sum(r.log_probs[-(len(forced[i]) + 1):-1]))
                eos_lp[i] = float(r.log_probs[-1])
        empty = self._ends_empty(sources, targets, [i for i, f in enumerate(first) if f[2]], eos_lp)
        rows = self._finished(sources, targets, cut, limits, one_pass, first, empty)
        for i in range(len(rows)):
            if extra[i]:
                rows[i] = [(ids, score + extra[i], again) for ids, score, again in rows[i]]
        # translations cut at the length limit: fairseq ends them with EOS there, scored so
        cut_hyps = [(i, j) for i, hyps in enumerate(rows) for j, h in enumerate(hyps) if h[2]]
        if cut_hyps:
            scored = self.translator.score_batch(
                [sources[i] for i, _ in cut_hyps],
                [starts[i] + [self.tgt_words[t] for t in rows[i][j][0]] for i, j in cut_hyps],
                max_input_length=0)
            for (i, j), r in zip(cut_hyps, scored):
                ids = rows[i][j][0]
                rows[i][j] = (ids, float(sum(r.log_probs[-(len(ids) + 1):])), True)
        # fairseq's empty translation, ended at the first free step: exact
        forced_ids = [[self.tgt_index[w] for w in f] for f in forced]
        for i in empty:
            rows[i].append((forced_ids[i], extra[i] + eos_lp[i], True))
        # the ranking depends on the renormalisation where the hypotheses' lengths differ
        # (and it is normalised) or some were scored again
        need = [i for i, hyps in enumerate(rows)
                if first[i][1] and len({(len(h[0]) if self.lenpen != 0 else 0, h[2]) for h in hyps}) > 1]
        missing = [i for i in need if eos_lp[i] is None]
        if missing:
            scored = self.translator.score_batch([sources[i] for i in missing], [targets[i] for i in missing],
                                                 max_input_length=0)
            for i, r in zip(missing, scored):
                eos_lp[i] = float(r.log_probs[-1])
        offset = [0.0] * len(rows)
        for i in need:
            offset[i] = -math.log1p(-math.exp(min(eos_lp[i], -1e-12)))
        out = []
        for hyps, c in zip(rows, offset):
            fairseq_scores = [score if exact else score - c for _, score, exact in hyps]
            key = [f / (len(ids) + 1) ** self.lenpen for f, (ids, _, _) in zip(fairseq_scores, hyps)]
            best = max(range(len(hyps)), key=key.__getitem__)
            out.append((hyps[best][0] + [self.tgt_dict.eos()], fairseq_scores[best]))
        return out

    def _first_step(self, prefix: int, forced: int, one_pass: bool):
        """How CTranslate2's search treats EOS at a row's first free step (the first after
        its target prefix less the start token, ``prefix`` tokens, ``forced`` of them forced
        words): ``(least, renormalised, empty)``. ``least``: CTranslate2's minimum length
        (counted with the prefix); ``renormalised``: whether EOS is kept out of the step, its
        probabilities renormalised over the other tokens; ``empty``: whether fairseq lets EOS
        end its candidates there, with a target prefix above beam 1, which the engine then
        decides itself (:meth:`_search`). Fairseq keeps EOS out of its first ``min_len``
        steps, the forced words counted; CTranslate2 (``min_len`` above one) of its first
        ``least`` steps, the prefix counted. After a prefix, EOS is kept out of the first
        free step by suppressing the sequence of the start token, the forced words and EOS
        (:meth:`_suppressed`), and, where the prefix is the forced words alone, by ``least``.
        A row decoded in one pass (:meth:`_one_pass`) keeps EOS out of its first free step
        whatever the minimum length."""
        if one_pass:
            return 0, True, False
        cut = prefix - forced
        blocked = prefix > 0 and (self.beam > 1 or forced < self.min_len)
        if self.min_len > 1:  # searched apart per prefix length
            least = cut + max(self.min_len, forced + 1 if blocked else 0)
        else:
            least = forced + 1 if blocked else self.min_len
        return least, blocked or (prefix == 0 and self.min_len > 0), blocked and forced >= self.min_len

    def _suppressed(self, targets, cut: List[int], rows: List[int]) -> Optional[List[List[str]]]:
        """CTranslate2's ``suppress_sequences`` that keep EOS out of the first free step of
        ``rows``: the start token, the row's forced words (the end of its target prefix) and
        EOS. CTranslate2 matches a sequence against the tokens after the decoder's first, so
        it applies after a target context; the start token is followed by the forced words
        only there (``</s>`` ends a translation), so no later step is affected. A row whose
        prefix is the forced words alone keeps EOS out by its minimum length instead
        (:meth:`_first_step`), a row without a prefix by ``min_len`` (the sequence is then
        never matched)."""
        found = []
        for i in rows:
            seq = targets[i][cut[i]:] + [self.eos_word]
            if seq not in found:
                found.append(seq)
        return found or None

    def _ends_empty(self, sources, targets, rows: List[int], eos_lp) -> set:
        """The rows (of ``rows``) whose first free step fairseq's beam search ends with EOS:
        EOS among the step's ``beam`` best candidates. CTranslate2's ``return_alternatives``
        gives the step's ``beam`` best other tokens (their probabilities renormalised without
        EOS), compared with ``p(EOS)`` (``eos_lp``); rows of one prefix length share a call,
        which ends at that step."""
        groups, ends = {}, set()
        for i in rows:
            groups.setdefault(len(targets[i]), []).append(i)
        for length, group in groups.items():
            results = self.translator.translate_batch(
                [sources[i] for i in group], target_prefix=[targets[i] for i in group], beam_size=1,
                num_hypotheses=self.beam, return_alternatives=True, max_decoding_length=length,
                min_decoding_length=0, return_scores=True, disable_unk=self.disable_unk, max_input_length=0)
            for i, r in zip(group, results):
                if len(r.scores) < self.beam:
                    ends.add(i)
                    continue
                # the beam-th best other token's log-probability, without the renormalisation
                kth = float(r.scores[self.beam - 1]) + math.log1p(-math.exp(min(eos_lp[i], -1e-12)))
                if eos_lp[i] > kth:
                    ends.add(i)
        return ends

    def _finished(self, sources, targets, cut: List[int], limits: List[int], one_pass: List[bool],
                  first: List[tuple], empty: set):
        """Every row's finished hypotheses ``[(token ids without EOS, unnormalised score, to
        be scored again ending in EOS)]``, each row searched as it is alone: the ``beam`` best
        of a search that ends before the row's length limit, all those a search that reaches
        the limit ends with.

        CTranslate2 takes one length limit per call, counted with the prefix: a row's own is
        its prefix, its limit and one step more, where fairseq forces EOS (a translation going
        on there is cut at the limit and scored again ending in EOS, :meth:`_search`). The
        rows are searched together under the longest of their limits; a search that ends
        before its row's own limit is the same as alone. Greedy search cut at the limit is
        its search alone. A beam search that reaches its row's limit is searched again with
        the rows of the same limit, twice, with patience 2 and twice ``beam`` hypotheses
        returned (the same search: it ends at the limit either way; nothing that ended
        before is left out for the last step's hypotheses): to the step where fairseq forces
        EOS, and to the step before, whose last step returns the hypotheses of fairseq's beam
        at the limit (all of them unless some of that step's ``beam`` best candidates end
        there: fairseq then refills the beam with candidates CTranslate2 returns only where
        one of their continuations is among the next step's ``beam`` best).

        ``first``: per row, how its first free step treats EOS (:meth:`_first_step`: the
        minimum length, counted from the first token of the prefix; rows of one minimum
        length share a call); ``empty``: the rows whose search has ended the empty translation
        at that step (:meth:`_ends_empty`), searched to ``beam - 1`` finished hypotheses (the
        search after the step is the same). ``one_pass``: per row, whether it is decoded in
        one pass (:meth:`_one_pass`) rather than by the search above."""
        own = [c + n + 1 for c, n in zip(cut, limits)]
        out = [None] * len(sources)
        single = [i for i, one in enumerate(one_pass) if one]
        if single:
            for i, hyps in zip(single, self._one_pass(sources, targets, cut, single, own)):
                out[i] = hyps
        groups = {}
        for i in range(len(sources)):
            if not one_pass[i]:
                patience = (self.beam - 1) / self.beam if i in empty else 1.0
                groups.setdefault((first[i][0], patience), []).append(i)
        again = {}
        for (least, patience), rows in groups.items():
            longest = max(own[i] for i in rows)
            keep_out = [i for i in rows if first[i][1]]
            for i, hyps in zip(rows, self._translate(sources, targets, cut, rows, longest, least, keep_out,
                                                     patience)):
                if self.beam > 1 and max((len(ids) for ids, _, _ in hyps), default=0) >= limits[i]:
                    again.setdefault((least, own[i]), []).append(i)
                else:
                    out[i] = hyps
        for (least, longest), rows in again.items():
            keep_out = [i for i in rows if first[i][1]]
            to_eos = self._translate(sources, targets, cut, rows, longest, least, keep_out, patience=2)
            to_limit = (self._translate(sources, targets, cut, rows, longest - 1, least, keep_out, patience=2)
                        if longest - 1 >= least else [[] for _ in rows])
            for i, a, b in zip(rows, to_eos, to_limit):
                out[i] = a + b
        rows = []
        for hyps, n in zip(out, limits):
            seen = {}
            for ids, score, ended in sorted(hyps, key=lambda h: not h[2]):  # ended ones first
                key = tuple(ids[:n])
                if key not in seen:  # (ids, score, whether to be scored again ending in EOS)
                    seen[key] = (list(key), score, not ended or len(ids) > n)
            rows.append(list(seen.values()))
        return rows

    def _one_pass(self, sources, targets, cut: List[int], rows: List[int], own: List[int]):
        """The hypotheses of ``rows`` (as :meth:`_translate` gives them) decoded by CTranslate2's
        ``return_alternatives`` search: the target prefix run through the decoder in one call
        (not one step at a time on every beam), then the first free position expanded to its
        best tokens (EOS kept out, the step's probabilities renormalised over the others, as
        the stepwise search's first step), then each of them continued alone. ``one-pass``:
        ``beam`` first tokens, each continued greedily (CTranslate2's length penalty 0: the
        score returned is the sum of the log-probabilities); ``one-pass-beam``: the best first
        token, continued by CTranslate2's beam search of ``beam`` with its length penalty over
        the continuation's length (the score returned is the first token's log-probability plus
        the continuation's normalised score, not fairseq's; the only hypothesis is not ranked).

        CTranslate2 decodes the rows of a call one at a time in this search, so they gain
        nothing from sharing a call's length limit: the rows are searched in groups of the same
        own length limit (``own``: the prefix, the limit and the step where fairseq forces EOS)
        and minimum length, each under its own limit."""
        alternatives, beam = (self.beam, 1) if self.prefix == "one-pass" else (1, self.beam)
        groups = {}
        for i in rows:
            # the first free step keeps EOS out; a minimum length above one counts the rest
            # from the prefix's first token
            least = cut[i] + self.min_len if self.min_len > 1 else 0
            groups.setdefault((own[i], least), []).append(i)
        eos = self.tgt_dict.eos()
        found = {}
        for (max_length, least), group in groups.items():
            results = self.translator.translate_batch(
                [sources[i] for i in group], target_prefix=[targets[i] for i in group], beam_size=beam,
                num_hypotheses=alternatives, return_alternatives=True,
                length_penalty=self.ct2_lenpen if beam > 1 else 0.0, max_decoding_length=max_length,
                min_decoding_length=least, return_scores=True, return_end_token=True,
                disable_unk=self.disable_unk, max_input_length=0)
            for i, r in zip(group, results):
                hyps = []
                for words, score in zip(r.hypotheses, r.scores):
                    ids = [self.tgt_index[w] for w in words[cut[i]:]]
                    ended = bool(ids) and ids[-1] == eos
                    hyps.append((ids[:-1] if ended else ids, float(score), ended))
                found[i] = hyps
        return [found[i] for i in rows]

    def _translate(self, sources, targets, cut: List[int], rows: List[int], max_length: int, least: int,
                   keep_out: List[int], patience: float = 1):
        """CTranslate2's ``patience * beam`` best hypotheses ``[(token ids without EOS,
        unnormalised score, whether it ended with EOS)]`` of ``rows``, searched under one
        length limit ``max_length`` and one minimum length ``least`` (prefix included), EOS
        kept out of the first free step of the rows ``keep_out`` (:meth:`_suppressed`)."""
        results = self.translator.translate_batch(
            [sources[i] for i in rows], target_prefix=[targets[i] for i in rows], beam_size=self.beam,
            patience=float(patience), num_hypotheses=int(round(self.beam * patience)),
            length_penalty=self.ct2_lenpen, max_decoding_length=max_length, min_decoding_length=least,
            suppress_sequences=self._suppressed(targets, cut, keep_out),
            return_scores=True, return_end_token=True, disable_unk=self.disable_unk, max_input_length=0,
        )
        eos = self.tgt_dict.eos()
        out = []
        for i, r in zip(rows, results):
            hyps = []
            for words, score in zip(r.hypotheses, r.scores):
                # CTranslate2's score is divided by the hypothesis' length (prefix and EOS
                # included) to the power of its length penalty
                raw = float(score) * float(len(words)) ** self.ct2_lenpen
                ids = [self.tgt_index[w] for w in words[cut[i]:]]
                ended = bool(ids) and ids[-1] == eos
                hyps.append((ids[:-1] if ended else ids, raw, ended))
            out.append(hyps)
        return out


def draft_generator(translator, task, record: dict, beam: int, **generation) -> CTranslate2Generator:
    """The generator of sentence-level drafts (fairseq-generate's defaults unless
    ``generation`` says: ``max_len_a`` 0, ``max_len_b`` 200, ``lenpen`` 1)."""
    return CTranslate2Generator(
        translator, task.source_dictionary, task.target_dictionary, None, beam=beam,
        lenpen=generation.get("lenpen", 1.0), max_len_a=generation.get("max_len_a", 0.0),
        max_len_b=generation.get("max_len_b", 200), min_len=generation.get("min_len", 1),
        max_source_positions=record["max_source_positions"],
        max_target_positions=record["max_target_positions"], unkpen=generation.get("unkpen", 0.0))


def exported_task(path: str, record: dict, data: Optional[str], **overrides):
    """The task of an exported folder (its recorded settings, the dictionaries of ``data``,
    default the folder itself) and the stand-in model it decodes with."""
    from fairseq import tasks
    from omegaconf import OmegaConf, open_dict

    from ..models.document_context import check_context, context_spec

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
        from ..data.pretrained import PretrainedError, PretrainedText

        try:
            task.set_pretrained_text(PretrainedText(path, record["pretrained"]))
        except PretrainedError as e:
            raise CheckpointError(str(e)) from None
    if getattr(task, "segments", False) and not record.get("segments"):
        raise ExportError(f"--path {path}: the model translates segments (--doc-mode segments) but its export "
                          f"record ({EXPORT_FILE}) does not say so: export the checkpoint again")
    model = exported_model(record, task)
    if hasattr(task, "model_spec"):
        task.model_spec = context_spec(model)
        check_context(model, task.context_sides, task.cfg.context_size, True)
    return task, model, data


def load_exported_draft_translator(path: str, data_dir: str, beam: int = DEFAULT_BEAM,
                                   cpu: Optional[bool] = None, fp16: bool = False,
                                   **generation):
    """:func:`~fairseq_docctx.inference.drafter.load_draft_translator` for a sentence-level
    model exported by ``docctx-export ctranslate2``: the same drafts' interface, decoded by
    CTranslate2."""
    from ..data import manifest as mf
    from ..data.drafts import DraftsError
    from .drafter import DraftTranslator

    path = os.fspath(path)
    record = read_export(path)
    if fp16:
        raise DraftsError("--fp16: the ctranslate2 engine computes in the type the model was "
                          "exported with (docctx-export --quantization float16)")
    if record["model"] != "transformer":
        raise CheckpointError(f"{path}: {record['model']} reads document context; drafts come from a "
                              "sentence-level model (e.g. transformer)")
    task, model, _ = exported_task(path, record, os.fspath(data_dir))
    pair = mf.language_pair(data_dir)
    langs = (record["source_lang"], record["target_lang"])
    if pair is not None and tuple(pair) != langs:
        raise CheckpointError(f"{path} translates {langs[0]}->{langs[1]}, the data directory {data_dir} "
                              f"is {pair[0]}->{pair[1]}: drafts come from a {pair[0]}->{pair[1]} "
                              "sentence-level model")
    translator = load_translator(path, cpu=bool(cpu))
    generator = draft_generator(translator, task, record, beam, **generation)
    return DraftTranslator(task, model, generator, os.path.abspath(path),
                           checkpoint_sha1(os.path.join(path, "model.bin")), int(beam), False,
                           torch.device("cpu"))
