"""The CTranslate2 ``TransformerSpec`` of a fairseq Transformer (``transformer``,
``concat_transformer``: the same network over joined tokens, ``doc2doc_transformer``: over
segments) with its weights and vocabularies.

The weights are copied by CTranslate2's own fairseq converter
(``ctranslate2.converters.fairseq``: ``set_transformer_encoder``, ``set_transformer_decoder``),
which reads the same modules of fairseq's Transformer; the spec itself is built here, as the
converter builds it from a checkpoint's options, from the loaded model (its layers, heads,
normalisation and activation), and the decoder starts with the target prefix rather than the
converter's start token.
"""
from typing import List

import torch

from . import import_ctranslate2
from .exportable import ACTIVATIONS, check_exportable

#: CTranslate2's name of the padding token (fairseq's ``<pad>`` is renamed in its vocabularies)
CT2_PAD = "<blank>"


def vocabulary(d) -> List[str]:
    """The words of the fairseq dictionary ``d`` as CTranslate2 names them (its padding token
    :data:`CT2_PAD`)."""
    return [CT2_PAD if i == d.pad() else s for i, s in enumerate(d.symbols)]


def model_spec(model, where: str = "the model"):
    """The CTranslate2 ``TransformerSpec`` of a fairseq Transformer (``transformer``, or
    ``concat_transformer``: the same network over joined tokens) with its weights, refused
    (:class:`~fairseq_docctx.inference.ctranslate2.ExportError`, ``where`` naming it) where
    CTranslate2 does not compute it as fairseq does."""
    import_ctranslate2()  # installed, or one line saying how
    from ctranslate2.converters.fairseq import set_transformer_decoder, set_transformer_encoder
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(model, where)
    enc, dec = model.encoder, model.decoder
    pre_norm = bool(enc.layers[0].normalize_before) if len(enc.layers) else False
    act = getattr(common_spec.Activation, ACTIVATIONS[str(getattr(enc.cfg.activation_fn, "value",
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
    with torch.no_grad():  # the converter reads the parameters as arrays
        set_transformer_encoder(spec.encoder, _float32(enc))
        set_transformer_decoder(spec.decoder, _float32(dec))
    spec.register_source_vocabulary(vocabulary(enc.dictionary))
    spec.register_target_vocabulary(vocabulary(dec.dictionary))
    # the decoder starts with the target prefix: fairseq's start token </s>, after the
    # target context where there is one; the source tokens carry their own </s>
    spec.config.decoder_start_token = None
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(getattr(dec.layers[0].final_layer_norm, "eps", 1e-5)
                                           if len(dec.layers) else 1e-5)
    return spec


def _float32(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` if its weights are float32 on the CPU (as the hub loads a checkpoint for an
    export), else a float32 copy on the CPU: the converter reads each weight's array as it is."""
    if all(p.device.type == "cpu" and p.dtype == torch.float32 for p in module.parameters()):
        return module
    import copy

    return copy.deepcopy(module).float().cpu()
