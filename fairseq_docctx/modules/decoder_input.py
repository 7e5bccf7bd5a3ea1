"""The input of a fairseq ``TransformerDecoderBase`` layer stack, for decoders that run their
own loop over the layers (``concat_transformer``'s cached target prefix, the Multi-Hop
Transformer's layers that read per-layer context)."""
from typing import Optional

from torch import Tensor


def embed_decoder_input(decoder, tokens: Tensor, positions: Optional[Tensor]) -> Tensor:
    """What fairseq's decoder feeds its first layer, ``[T, B, C]``: the scaled token
    embeddings of ``tokens [B, T]`` (quant noise, input projection), plus ``positions``
    (``[B, T, C]`` or ``None``), the embedding LayerNorm, dropout."""
    x = decoder.embed_scale * decoder.embed_tokens(tokens)
    if decoder.quant_noise is not None:
        x = decoder.quant_noise(x)
    if decoder.project_in_dim is not None:
        x = decoder.project_in_dim(x)
    if positions is not None:
        x = x + positions
    if decoder.layernorm_embedding is not None:
        x = decoder.layernorm_embedding(x)
    return decoder.dropout_module(x).transpose(0, 1)
