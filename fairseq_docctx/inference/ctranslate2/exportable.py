"""Which checkpoints export to CTranslate2: the architectures (:data:`SUPPORTED_MODELS`),
the segment models (:data:`SEGMENT_MODELS`), and a model's settings and parameters that
CTranslate2's Transformer computes as fairseq does (:func:`check_exportable`); each refusal
is one line (:class:`~fairseq_docctx.inference.ctranslate2.ExportError`) naming what does not
export and why."""
import re
from typing import List, Optional

from ...modules.hf_network import EosAsPadEmbedding, MarianSinusoidalPositions
from ...modules.sentence_positions import DocumentPositions
from . import ExportError

#: registered fairseq models (``--arch``'s model) that export
SUPPORTED_MODELS = ("transformer", "concat_transformer", "doc2doc_transformer")
#: the models that may translate segments (``--doc-mode segments``) through the engine: plain
#: Transformers over the joined sentences (``doc2doc_transformer``, or a ``transformer`` trained
#: on segments), whose segments are split into their sentences and checked after the search
SEGMENT_MODELS = ("transformer", "doc2doc_transformer")
#: fairseq's ``--activation-fn`` values CTranslate2 computes alike
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_accurate": "GELUTanh", "gelu_fast": "GELUTanh",
                "swish": "SWISH"}


def model_name_of(arch: Optional[str]) -> Optional[str]:
    """The registered model of an architecture name (``None`` if unknown)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return ARCH_MODEL_NAME_REGISTRY.get(arch) if arch else None


def check_architecture(arch: Optional[str], where: str) -> str:
    """The model name of ``arch``, or :class:`ExportError` naming the supported ones (a
    segment model other than ``doc2doc_transformer``, e.g. ``g_transformer``, saying why it
    stays on fairseq)."""
    from ...models.document_context import model_class, reads_segments

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
    tokens = task.language_tokens
    langtoks = tokens.target() is not None or tokens.bart() is not None
    if langtoks:
        raise ExportError(f"{where}: segments on data with language tokens (docctx-prepare --pretrained): every "
                          "sentence of a segment starts with its language token, forced inside fairseq's search, "
                          "which CTranslate2 cannot do: translate with --engine fairseq")


def check_exportable(model, where: str) -> None:
    """Refuse (one line) what CTranslate2's Transformer does not compute as fairseq does."""
    enc, dec = model.encoder, model.decoder
    cfg = getattr(enc, "cfg", None)
    problems = []
    act = getattr(getattr(cfg, "activation_fn", None), "value", getattr(cfg, "activation_fn", "relu"))
    if str(act) not in ACTIVATIONS:
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
    problems += plain_transformer_problems(model)
    if problems:
        raise ExportError(f"{where}: CTranslate2 does not compute this model as fairseq does: "
                          + ", ".join(problems))


#: the parameters of a plain fairseq Transformer, the ones :func:`model_spec` writes
_TRANSFORMER_PARAMETER = re.compile(
    r"(encoder|decoder)\.(embed_tokens\.weight|embed_positions\.weight|(layernorm_embedding|layer_norm)\.(weight|bias)"
    r"|layers\.\d+\.((self_attn|encoder_attn)\.(q_proj|k_proj|v_proj|out_proj)|fc1|fc2"
    r"|self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\.(weight|bias))"
    r"|decoder\.output_projection\.weight")


def plain_transformer_problems(model) -> List[str]:
    """The options of ``model`` that a plain Transformer (CTranslate2's spec, the
    transformers classes of ``docctx-export transformers``) does not compute, as flags: an
    adaptive softmax, projections around the decoder, cross self-attention, quantisation
    noise, document positions (Lupo et al. 2022, 2023: both engines number the tokens of
    the joined sequence 0, 1, 2, ... and add nothing else), the transformers families'
    choices (:mod:`~fairseq_docctx.modules.hf_network`) and any parameter a plain
    Transformer lacks."""
    enc, dec = model.encoder, model.decoder
    problems = []
    if getattr(dec, "adaptive_softmax", None) is not None:
        problems.append("--adaptive-softmax-cutoff")
    if dec.project_in_dim is not None or dec.project_out_dim is not None:
        problems.append("--decoder-input-dim/--decoder-output-dim other than --decoder-embed-dim")
    if getattr(dec, "cross_self_attention", False):
        problems.append("--cross-self-attention")
    if getattr(enc, "quant_noise", None) is not None or getattr(dec, "quant_noise", None) is not None:
        problems.append("--quant-noise-pq")
    if any(isinstance(p, DocumentPositions) and p.shift for p in (enc.embed_positions, dec.embed_positions)):
        problems.append("--segment-shifted-positions")
    if any(isinstance(p, DocumentPositions) and p.sentence_embeddings is not None
           for p in (enc.embed_positions, dec.embed_positions)):
        problems.append("--sentence-position-embeddings")
    if any(isinstance(p, MarianSinusoidalPositions) for p in (enc.embed_positions, dec.embed_positions)):
        problems.append("--positions-style marian")
    if getattr(getattr(dec, "output_projection", None), "bias", None) is not None:
        problems.append("--output-bias")
    if isinstance(dec.embed_tokens, EosAsPadEmbedding):
        problems.append("--decoder-start-pad")
    extra = [k for k in parameters_not_exported(model) if k != "decoder.output_projection.bias"]
    if extra:
        problems.append(f"parameters a plain Transformer lacks ({', '.join(extra[:3])}"
                        + (f" and {len(extra) - 3} more" if len(extra) > 3 else "") + ")")
    return problems


def parameters_not_exported(model) -> List[str]:
    """The names of ``model``'s parameters that a plain Transformer does not have (and the
    export would leave out): none for ``transformer``, ``concat_transformer`` and
    ``doc2doc_transformer``, whose encoder and decoder are fairseq's Transformer's."""
    return [n for n, _ in model.named_parameters() if not _TRANSFORMER_PARAMETER.fullmatch(n)]

