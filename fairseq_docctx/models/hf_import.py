"""A Hugging Face ``transformers`` translation model folder as a fairseq Transformer:
its network options and its weights in fairseq's names (``--init-from-pretrained DIR``,
:mod:`~fairseq_docctx.models.pretrained_init`).

The families (``config.json``'s ``model_type``): ``marian`` (OPUS-MT), ``m2m_100`` (M2M-100,
NLLB-200 dense), ``mbart`` (mBART-25/50), ``fsmt`` (the WMT19 port), and ``bart`` from a folder
``docctx-export transformers`` wrote (fairseq's post-norm network with learned positions and
``--layernorm-embedding``). Their layers are fairseq's (the same sublayers, names and biases,
LayerNorm eps 1e-5); what differs:

* :func:`network_options`: ``config.json`` -> fairseq's network options (the sizes,
  ``encoder/decoder_normalize_before``: pre-norm for mBART and M2M-100, ``layernorm_embedding``
  for mBART, learned positions for mBART (transformers' offset 2 = fairseq's ``padding_idx + 1``),
  ``no_scale_embedding`` = not ``scale_embedding``, the shared tables) and the three options of
  :mod:`~fairseq_docctx.modules.hf_network` (Marian's position table, the output bias of
  ``final_logits_bias``, Marian's pad start). Dropouts are training choices and not taken.
* :func:`convert_weights`: transformers' names -> fairseq's (``model.`` dropped, ``shared`` ->
  both ``embed_tokens``, ``lm_head`` -> ``decoder.output_projection``, ``final_logits_bias`` ->
  its bias), and the rows of the vocabulary tables reordered into the data dictionary's order
  (:func:`fairseq_docctx.data.hf_folder.folder_vocabularies`): fairseq row ``i`` is the
  checkpoint's row ``hf_rows[i]``. A fairseq symbol without a checkpoint row (Marian has no
  ``<s>``) gets a zero embedding row and an output bias of :data:`NO_ROW_BIAS`, so that its
  probability is below float precision and the log-probabilities are the checkpoint's.
* :func:`export_options`: a folder ``docctx-export transformers`` wrote
  (:func:`~fairseq_docctx.data.hf_folder.export_metadata`) is the network of a fairseq
  checkpoint, and three of that network's choices are read from it as the checkpoint had them,
  where ``config.json`` cannot say them: no output bias (the export writes the class's
  ``final_logits_bias`` buffer as zeros), the ties of tables the export wrote as equal copies
  (``tie_word_embeddings`` ties all tables or none) and the source and target position limits
  (``docctx.max_source_positions`` / ``max_target_positions``; ``max_position_embeddings`` is
  the longer). ``docctx-export transformers`` of the model built from it writes the folder's
  network again.

The weights are read with ``safetensors`` or ``torch.load(weights_only=True)``; this module
imports no ``transformers``: the vocabularies are the folder's own tokenizer's
(:func:`~fairseq_docctx.data.hf_folder.folder_vocabularies`, which loads it with
``AutoTokenizer``).
"""
import json
import os
from typing import Dict, Tuple

import torch

from ..data.hf_folder import HFFolderError, Vocabulary, export_metadata, folder_vocabularies, read_config

#: the output bias of a fairseq symbol that has no checkpoint row (exp(-100) ~ 4e-44)
NO_ROW_BIAS = -100.0

#: transformers 5.23's configuration defaults of the keys read here, where config.json lacks them
FAMILY_DEFAULTS = {
    "marian": dict(activation_function="gelu", scale_embedding=False, max_position_embeddings=1024,
                   share_encoder_decoder_embeddings=True, tie_word_embeddings=True),
    "mbart": dict(activation_function="gelu", scale_embedding=False, max_position_embeddings=1024,
                  tie_word_embeddings=True),
    "m2m_100": dict(activation_function="relu", scale_embedding=True, max_position_embeddings=1024,
                    tie_word_embeddings=True),
    "fsmt": dict(activation_function="relu", scale_embedding=True, max_position_embeddings=1024,
                 tie_word_embeddings=False),
    "bart": dict(activation_function="gelu", scale_embedding=False, max_position_embeddings=1024,
                 tie_word_embeddings=True),
}
#: transformers' activation names -> fairseq's
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish", "gelu_new": "gelu_accurate",
               "gelu_pytorch_tanh": "gelu_accurate", "tanh": "tanh", "linear": "linear"}
#: the families whose layers are pre-norm (with final layer norms)
PRE_NORM = {"marian": False, "fsmt": False, "mbart": True, "m2m_100": True, "bart": False}
#: the families with learned positions and the embedding layer norm
LEARNED = ("mbart", "bart")
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def _shared(cfg: dict) -> Tuple[bool, bool]:
    """(encoder and decoder share one table, the output projection is the decoder's table)."""
    kind, tie = cfg["model_type"], bool(cfg["tie_word_embeddings"])
    if kind == "marian":
        both = bool(cfg["share_encoder_decoder_embeddings"])
    elif kind == "fsmt":
        both = tie  # transformers ties the encoder's table to the decoder's with tie_word_embeddings
    else:
        both = True  # model.shared: one table for the encoder and the decoder
    return both, tie


def network_options(cfg: dict, where: str) -> Dict[str, object]:
    """fairseq's network options (:data:`pretrained_init.NETWORK_OPTIONS` names) of a folder's
    ``config.json`` ``cfg`` (the module doc)."""
    kind = cfg["model_type"]
    cfg = {**FAMILY_DEFAULTS[kind], **cfg}
    act = cfg["activation_function"]
    if act not in ACTIVATIONS:
        raise HFFolderError(f"{where}: activation_function {act!r} has no fairseq counterpart "
                            f"({', '.join(ACTIVATIONS)})")
    try:
        d = int(cfg["d_model"])
        pairs = (("layers", "layers"), ("ffn_embed_dim", "ffn_dim"), ("attention_heads", "attention_heads"))
        sizes = {f"{side}_{k}": int(cfg[f"{side}_{hf}"]) for side in ("encoder", "decoder") for k, hf in pairs}
    except KeyError as e:
        raise HFFolderError(f"{where}: no {e.args[0]}") from None
    both, tie = _shared(cfg)
    if both and cfg.get("src_vocab_size", 0) != cfg.get("tgt_vocab_size", 0):
        raise HFFolderError(f"{where}: tie_word_embeddings with src_vocab_size {cfg['src_vocab_size']} != "
                            f"tgt_vocab_size {cfg['tgt_vocab_size']}")
    pre, learned = PRE_NORM[kind], kind in LEARNED
    start_pad = kind == "marian" and cfg.get("decoder_start_token_id") == cfg.get("pad_token_id")
    return dict(
        sizes, encoder_embed_dim=d, decoder_embed_dim=d, decoder_output_dim=d, decoder_input_dim=d,
        encoder_normalize_before=pre, decoder_normalize_before=pre, no_decoder_final_norm=False,
        layernorm_embedding=learned, activation_fn=ACTIVATIONS[act],
        encoder_learned_pos=learned, decoder_learned_pos=learned, no_token_positional_embeddings=False,
        no_scale_embedding=not cfg["scale_embedding"],
        # fairseq ties the output projection with share_all_embeddings; an untied one is copied
        share_all_embeddings=both and tie, share_decoder_input_output_embed=tie,
        max_source_positions=int(cfg["max_position_embeddings"]),
        max_target_positions=int(cfg["max_position_embeddings"]),
        positions_style="marian" if kind == "marian" else "fairseq",
        output_bias=kind in ("marian", "mbart", "bart"), decoder_start_pad=start_pad,
    )


def read_weights(d: str) -> Dict[str, torch.Tensor]:
    """The state dict of the folder ``d`` (transformers' names): ``model.safetensors`` or
    ``pytorch_model.bin``, or their shards listed in the ``.index.json``."""
    name = next((n for n in WEIGHTS if os.path.isfile(os.path.join(d, n))), None)
    if name is None:
        raise HFFolderError(f"{d}: no weights ({', '.join(WEIGHTS)})")
    files = [name]
    if name.endswith(".index.json"):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            files = sorted(set((json.load(f).get("weight_map") or {}).values()))
    out = {}
    for n in files:
        path = os.path.join(d, n)
        try:
            if n.endswith(".safetensors"):
                from safetensors.torch import load_file

                out.update(load_file(path))
            else:
                out.update(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as e:  # noqa: BLE001 - any unreadable file is one line
            raise HFFolderError(f"{path}: not readable weights ({type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return out


def _rows(t: torch.Tensor, vocab: Vocabulary, fill: float = 0.0) -> torch.Tensor:
    """The rows of ``t`` (a table ``[V, C]`` or a bias ``[V]``) in fairseq's order; ``fill``
    where the checkpoint has no row."""
    index = torch.tensor([r if r is not None else 0 for r in vocab.hf_rows])
    out = t.index_select(0, index).clone()
    missing = torch.tensor([r is None for r in vocab.hf_rows])
    out[missing] = fill
    return out


def _rename(key: str) -> str:
    """fairseq's name of a transformers weight."""
    if key.startswith("model."):
        key = key[len("model."):]
    if key == "lm_head.weight":
        return "decoder.output_projection.weight"
    if key == "final_logits_bias":
        return "decoder.output_projection.bias"
    return key


def convert_weights(hf: Dict[str, torch.Tensor], options: Dict[str, object],
                    vocabs: Dict[str, Vocabulary]) -> Dict[str, torch.Tensor]:
    """A transformers state dict in fairseq's names and rows (the module doc)."""
    out = {}
    for key, value in hf.items():
        name = _rename(key)
        if ".embed_positions." in name and not options["encoder_learned_pos"]:
            continue  # a sinusoidal table: computed, not a weight
        out[name] = value
    shared = out.pop("shared.weight", None)
    for side in ("encoder", "decoder"):
        if shared is not None:
            out.setdefault(f"{side}.embed_tokens.weight", shared)
    if options["share_decoder_input_output_embed"]:
        out.pop("decoder.output_projection.weight", None)  # the decoder's table (tied)
    elif "decoder.output_projection.weight" not in out and "decoder.embed_tokens.weight" in out:
        out["decoder.output_projection.weight"] = out["decoder.embed_tokens.weight"]
    sides = {"encoder.embed_tokens.weight": "source", "decoder.embed_tokens.weight": "target",
             "decoder.output_projection.weight": "target"}
    for name, side in sides.items():
        if name in out:
            out[name] = _rows(out[name], vocabs[side])
    # fairseq's state-dict version: without it fairseq's upgrade drops the final layer norms
    # (checkpoints before version 2 had none)
    for side in ("encoder", "decoder"):
        out[f"{side}.version"] = torch.tensor([3.0])
    bias = out.get("decoder.output_projection.bias")
    if bias is not None:
        out["decoder.output_projection.bias"] = _rows(bias.reshape(-1), vocabs["target"], NO_ROW_BIAS)
    return out


def _same(weights: Dict[str, torch.Tensor], a: str, b: str) -> bool:
    """Whether the tables ``a`` and ``b`` are both there and hold the same values."""
    return a in weights and b in weights and torch.equal(weights[a], weights[b])


def export_options(weights: Dict[str, torch.Tensor], options: Dict[str, object], meta: dict) -> None:
    """The network options of an export (the module doc) set in ``options``, and ``weights``
    (fairseq's names) made to fit them: a ``final_logits_bias`` of zeros is no bias; an output
    projection equal to the decoder's table is that table (``--share-decoder-input-output-embed``),
    and with it an encoder table equal to the decoder's is one table (``--share-all-embeddings``);
    the position limits are the checkpoint's, a learned table cut back to them (the export pads
    the shorter one with zero rows)."""
    bias = weights.get("decoder.output_projection.bias")
    if bias is not None and not bias.any():
        del weights["decoder.output_projection.bias"]
        options["output_bias"] = False
    if not options["share_decoder_input_output_embed"] and _same(
            weights, "decoder.output_projection.weight", "decoder.embed_tokens.weight"):
        del weights["decoder.output_projection.weight"]
        options["share_decoder_input_output_embed"] = True
    if options["share_decoder_input_output_embed"] and not options["share_all_embeddings"] and _same(
            weights, "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        options["share_all_embeddings"] = True
    for side in ("source", "target"):
        limit = meta.get(f"max_{side}_positions")
        if limit is None:
            continue
        options[f"max_{side}_positions"] = int(limit)
        key = f"{'encoder' if side == 'source' else 'decoder'}.embed_positions.weight"
        if key in weights:  # learned: fairseq's rows are the limit + padding_idx + 1
            weights[key] = weights[key][: int(limit) + 2]


def read_folder(d: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, object], str]:
    """What :func:`pretrained_init.read_checkpoint` returns for a transformers folder: the
    weights in fairseq's names and rows, the network options and the family's name (``docctx-exported
    transformers fsmt`` for an export: :func:`export_options`)."""
    cfg = read_config(d)
    options = network_options(cfg, os.path.join(d, "config.json"))
    vocabs = folder_vocabularies(d)
    if options["share_all_embeddings"] and vocabs["source"].symbols != vocabs["target"].symbols:
        raise HFFolderError(f"{d}: one shared table, but the source and target vocabularies differ")
    weights = convert_weights(read_weights(d), options, vocabs)
    meta = export_metadata(d)
    if meta is None:
        return weights, options, f"transformers {cfg['model_type']}"
    export_options(weights, options, meta)
    return weights, options, f"docctx-exported transformers {cfg['model_type']}"
