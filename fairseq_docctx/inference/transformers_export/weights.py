"""The parameters of a fairseq Transformer under the names of its ``transformers`` class
(:mod:`.classes`), loaded into that class's model.

The layers keep fairseq's names below ``model.`` (``encoder.layers.0.self_attn.q_proj``,
``fc1``, ``final_layer_norm``, ``layernorm_embedding``, ``layer_norm``...: the ported classes
named them after fairseq's); the output projection is FSMT's
``model.decoder.output_projection`` and the others' ``lm_head``; M2M-100's, mBART's and BART's
``model.shared`` is the encoder's embedding. Learned position tables (fairseq's rows: position
``p`` of a token at ``p - 2``... as the classes' offset 2 reads them) are copied row for row,
the shorter one padded with zero rows to the class's one length; sinusoidal tables are the
classes' own, computed with fairseq's formula.
"""
import torch

from . import ExportError, import_transformers


def hf_state_dict(model, name: str, config) -> dict:
    """``model``'s float32 parameters under the names of ``name`` (with ``config``)."""
    out = {}
    for key, value in model.state_dict().items():
        if key.endswith(("_float_tensor", ".version")) or ".embed_positions." in key and "weight" not in key:
            continue
        value = value.detach().float().cpu().clone()
        if key == "decoder.output_projection.weight":
            out["model.decoder.output_projection.weight" if name.startswith("FSMT") else "lm_head.weight"] = value
        elif key.startswith(("encoder.", "decoder.")):
            out["model." + key] = value
    rows = config.max_position_embeddings + 2
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_positions.weight"
        if key in out and out[key].size(0) < rows:  # learned: the shorter table padded
            out[key] = torch.cat([out[key], out[key].new_zeros(rows - out[key].size(0), out[key].size(1))])
    if not name.startswith("FSMT"):
        out["model.shared.weight"] = out["model.encoder.embed_tokens.weight"]
    return out


def build_hf_model(model, name: str, config_kwargs: dict):
    """The ``transformers`` model ``name`` of ``model``: built from its configuration, then
    given fairseq's parameters; :class:`ExportError` if a parameter of either has no place in
    the other (a network this module does not map)."""
    transformers = import_transformers()  # installed, or one line saying how
    config = getattr(transformers, name.replace("ForConditionalGeneration", "Config"))(**config_kwargs)
    hf = getattr(transformers, name)(config)
    state = hf_state_dict(model, name, config)
    if name.startswith("FSMT"):  # sinusoidal tables: the class's own (fairseq's formula)
        for side in (hf.model.encoder, hf.model.decoder):
            table = side.embed_positions
            state[f"model.{'encoder' if side is hf.model.encoder else 'decoder'}.embed_positions.weight"] = (
                table.get_embedding(table.weight.size(0), table.weight.size(1), table.padding_idx))
    if hasattr(hf, "final_logits_bias"):
        state["final_logits_bias"] = torch.zeros_like(hf.final_logits_bias)
    own = hf.state_dict()
    unexpected = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state))
    if unexpected or missing:
        raise ExportError(f"the {name} of this model: parameters without a place: "
                          f"{', '.join((unexpected + missing)[:4])}")
    for key, value in state.items():
        if own[key].shape != value.shape:
            raise ExportError(f"the {name} of this model: {key} has shape {tuple(value.shape)}, the class "
                              f"{tuple(own[key].shape)}")
    hf.load_state_dict(state, strict=True)
    hf.eval()
    return hf
