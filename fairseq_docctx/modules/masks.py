"""Attention masks of one type.

fairseq's Transformer decoder builds its causal (future) mask as a float tensor (``-inf``
above the diagonal) and hands its self-attention a key padding mask that fairseq's
``MultiheadAttention`` turns into a bool tensor before calling torch's
``F.multi_head_attention_forward``. Torch (>= 2.0) deprecates masks of mismatched types and
warns ("Support for mismatched key_padding_mask and attn_mask is deprecated") in every
teacher-forced forward over padded targets: every scoring run, every decoder run over a
target-context prefix. :class:`BoolFutureMask` gives the decoder a bool causal mask
(``True`` = may not attend), the type of the padding mask; torch turns both into the
additive ``-inf`` mask that a float causal mask gives, so the outputs are the same.
"""
import torch


class BoolFutureMask:
    """Mixin for a ``TransformerDecoderBase`` subclass (put it first among the bases):
    ``buffered_future_mask`` returns a bool mask where fairseq's attention hands the mask to
    torch's ``F.multi_head_attention_forward``. Where fairseq adds the mask to the attention
    weights itself (ONNX tracing, TPUs, TorchScript, pruned projections) the float mask is
    kept, since a bool mask cannot be added."""

    def buffered_future_mask(self, tensor):
        mask = super().buffered_future_mask(tensor)
        if not self._future_mask_goes_to_torch(tensor):
            return mask
        dim = mask.size(0)
        cached = getattr(self, "_bool_future_mask", None)
        if cached is None or cached.device != mask.device or cached.size(0) < dim:
            cached = torch.triu(torch.ones(dim, dim, dtype=torch.bool, device=mask.device), 1)
            self._bool_future_mask = cached
        return cached[:dim, :dim]

    def _future_mask_goes_to_torch(self, tensor) -> bool:
        if torch.jit.is_scripting() or tensor.device.type == "xla":
            return False
        for layer in self.layers:
            attn = getattr(layer, "self_attn", None)
            if attn is None or getattr(attn, "onnx_trace", False) or getattr(attn, "skip_embed_dim_check", False):
                return False
        return True
