"""Three network choices of Hugging Face ``transformers`` translation models that fairseq's
Transformer does not make, as model options of every Transformer-based document model
(``--init-from-pretrained`` a transformers folder sets them: :mod:`fairseq_docctx.models.hf_import`).

* ``--positions-style marian``: Marian's sinusoidal position table (OPUS-MT;
  ``MarianSinusoidalPositionalEmbedding``): the first token at position 0, frequency
  ``10000 ** (-2i / C)`` for channel pair ``i`` (fairseq's: ``10000 ** (-i / (C/2 - 1))``), the
  sines in the first ``ceil(C/2)`` channels and the cosines after them. It is laid out in
  fairseq's numbering (row ``padding_idx + 1 + p`` holds position ``p``; the rows up to the pad
  index are zero), so fairseq's position code (the left-padded encoder, one-step decoding,
  ``concat_transformer``'s cached prefix) looks it up unchanged.
* ``--output-bias``: a learned bias on the output projection (transformers'
  ``final_logits_bias``: Marian, mBART), initialised to zero.
* ``--decoder-start-pad``: the decoder embeds the ``</s>`` it reads as ``<pad>``. Marian's
  decoder starts from its pad token (``decoder_start_token_id`` = pad), whose row is zero and
  not trained (``nn.Embedding(padding_idx=...)``, in transformers as in fairseq); fairseq's
  decoder starts from ``</s>`` (and reads no other ``</s>`` within a sentence). The table is
  unchanged (the encoder and the output projection still use the ``</s>`` row).

:func:`apply` also puts fairseq's ``--activation-fn swish`` in working order (:func:`fix_swish`).
The defaults are fairseq's network: a checkpoint saved without these options builds as before.
They are saved in the checkpoint's arguments, so a trained model rebuilds without the folder.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules import SinusoidalPositionalEmbedding

from ..errors import UsageError

#: the options and their defaults (fairseq's network)
DEFAULTS = {"positions_style": "fairseq", "output_bias": False, "decoder_start_pad": False}
POSITIONS_STYLES = ("fairseq", "marian")


def add_args(parser):
    """The three options (model arguments; defaults: fairseq's network)."""
    parser.add_argument("--positions-style", choices=POSITIONS_STYLES, default=DEFAULTS["positions_style"],
                        help="the sinusoidal position table: fairseq's (default) or Marian's (OPUS-MT: positions "
                             "from 0, frequencies 10000^(-2i/C), sines then cosines)")
    parser.add_argument("--output-bias", action="store_true", default=DEFAULTS["output_bias"],
                        help="a learned bias on the decoder's output projection (transformers' "
                             "final_logits_bias: Marian, mBART)")
    parser.add_argument("--decoder-start-pad", action="store_true", default=DEFAULTS["decoder_start_pad"],
                        help="the decoder embeds the </s> it reads as <pad> (Marian's decoder starts from its "
                             "pad token, whose embedding row is zero)")


def options(args) -> dict:
    """The three options of ``args`` (their defaults where ``args`` predates them)."""
    return {k: getattr(args, k, None) if getattr(args, k, None) is not None else v for k, v in DEFAULTS.items()}


def marian_table(rows: int, dim: int, padding_idx: int) -> torch.Tensor:
    """Marian's sinusoidal table in fairseq's numbering, ``[rows, dim]`` (the module doc);
    computed in float64 like transformers' (numpy) and returned as float32."""
    pos = torch.arange(rows, dtype=torch.float64) - (padding_idx + 1)
    j = torch.arange(dim, dtype=torch.float64)
    angle = pos.unsqueeze(1) / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    out = torch.cat([torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])], dim=1)
    out[: padding_idx + 1] = 0
    return out.float()


class MarianSinusoidalPositions(SinusoidalPositionalEmbedding):
    """fairseq's sinusoidal positions over Marian's table (:func:`marian_table`); grows the
    table itself before fairseq's ``forward`` would grow it with fairseq's formula."""

    def __init__(self, embedding_dim, padding_idx, init_size=1024):
        super().__init__(embedding_dim, padding_idx, init_size=init_size)
        self.weights = marian_table(init_size, embedding_dim, self.padding_idx)

    def _grow(self, rows: int):
        if rows > self.weights.size(0):
            self.weights = marian_table(rows, self.embedding_dim, self.padding_idx).to(self.weights)

    def forward(self, input, incremental_state=None, timestep=None, positions=None):
        self._grow(self.padding_idx + 1 + input.size(1))
        return super().forward(input, incremental_state=incremental_state, timestep=timestep, positions=positions)


class EosAsPadEmbedding(nn.Embedding):
    """An embedding table that looks ``</s>`` (``eos_idx``) up as its padding row; it holds the
    same weight parameter as the table it replaces (tying and parameter names unchanged)."""

    eos_idx: int = -1

    def forward(self, tokens):
        return super().forward(tokens.masked_fill(tokens.eq(self.eos_idx), self.padding_idx))


def _start_pad(decoder, name: str):
    old = decoder.embed_tokens
    if isinstance(old, EosAsPadEmbedding):
        return
    if not isinstance(old, nn.Embedding) or old.padding_idx is None:
        raise UsageError(f"{name}: --decoder-start-pad needs an nn.Embedding decoder table with a pad row")
    new = EosAsPadEmbedding(old.num_embeddings, old.embedding_dim, padding_idx=old.padding_idx, device="meta")
    new.weight = old.weight  # the same parameter: still tied to the encoder / the output projection
    new.eos_idx = decoder.dictionary.eos()
    decoder.embed_tokens = new


def _output_bias(decoder, name: str):
    proj = getattr(decoder, "output_projection", None)
    if not isinstance(proj, nn.Linear):
        raise UsageError(f"{name}: --output-bias needs a linear output projection (not an adaptive softmax)")
    if proj.bias is None:
        proj.bias = nn.Parameter(torch.zeros(proj.out_features, dtype=proj.weight.dtype))


def _marian_positions(model, name: str):
    for mod_name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is SinusoidalPositionalEmbedding:
                setattr(module, child_name, MarianSinusoidalPositions(
                    child.embedding_dim, child.padding_idx, init_size=child.weights.size(0)))
            elif isinstance(child, SinusoidalPositionalEmbedding) and not isinstance(child, MarianSinusoidalPositions):
                raise UsageError(f"{name}: --positions-style marian: {mod_name}.{child_name} is a "
                                 f"{type(child).__name__} (document positions: --segment-shifted-positions / "
                                 "--sentence-position-embeddings), which has fairseq's table only")


def fix_swish(model):
    """fairseq's ``--activation-fn swish`` (OPUS-MT's activation) in working order: fairseq's
    ``utils.get_activation_fn("swish")`` returns the class ``torch.nn.SiLU``, so a layer would
    call ``SiLU(x)`` (a module, not the activation); the layers get ``F.silu`` instead."""
    for m in model.modules():
        if getattr(m, "activation_fn", None) is nn.SiLU:
            m.activation_fn = F.silu


def apply(model, args, name: str):
    """Build the options' network parts into a freshly built ``model`` (before its weights are
    loaded): every sinusoidal table, every Transformer decoder's table and output projection;
    and :func:`fix_swish`. With the defaults nothing else changes. Returns ``model``."""
    fix_swish(model)
    opts = options(args)
    if opts == DEFAULTS:
        return model
    if opts["positions_style"] == "marian":
        _marian_positions(model, name)
    decoders = [m for m in model.modules() if isinstance(m, TransformerDecoderBase)]
    for dec in decoders:
        if opts["output_bias"]:
            _output_bias(dec, name)
        if opts["decoder_start_pad"]:
            _start_pad(dec, name)
    return model
