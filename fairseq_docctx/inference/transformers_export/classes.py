"""Which checkpoints export to ``transformers``, and the class and configuration of one.

The class is the one whose network is fairseq's, option for option (:func:`choose_class`):

=====================  ==================  ====================  ============================
fairseq options        positions           --layernorm-embedding  class
=====================  ==================  ====================  ============================
post-norm (default)    sinusoidal          no                     ``FSMTForConditionalGeneration``
pre-norm               sinusoidal          no                     ``M2M100ForConditionalGeneration``
pre-norm               learned             yes                    ``MBartForConditionalGeneration``
post-norm              learned             yes                    ``BartForConditionalGeneration``
=====================  ==================  ====================  ============================

(pre-norm: ``--encoder-normalize-before --decoder-normalize-before``; learned:
``--encoder-learned-pos --decoder-learned-pos``.) Every other combination is refused in one
line naming the option; so are separate source and target dictionaries with a class that has
one vocabulary (all but FSMT), and what no class computes (:func:`check_network`).
"""
import math
from typing import Optional, Tuple

from . import ExportError

#: registered fairseq models (``--arch``'s model) that export
SUPPORTED_MODELS = ("transformer", "concat_transformer", "doc2doc_transformer")
#: fairseq's ``--activation-fn`` -> the ``transformers`` activation computing the same function
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "gelu_fast": "gelu_new",
               "swish": "swish", "tanh": "tanh", "linear": "linear"}
#: (pre-norm, learned positions, layernorm_embedding) -> the class
CLASSES = {(False, False, False): "FSMTForConditionalGeneration",
           (True, False, False): "M2M100ForConditionalGeneration",
           (True, True, True): "MBartForConditionalGeneration",
           (False, True, True): "BartForConditionalGeneration"}
#: the class -> its ``model_type`` (``config.json``)
MODEL_TYPES = {"FSMTForConditionalGeneration": "fsmt", "M2M100ForConditionalGeneration": "m2m_100",
               "MBartForConditionalGeneration": "mbart", "BartForConditionalGeneration": "bart"}


def check_architecture(arch: Optional[str], where: str) -> str:
    """The registered model of ``arch`` if it exports, else :class:`ExportError` (one line:
    the other models' layers are not a ``transformers`` class's)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    name = ARCH_MODEL_NAME_REGISTRY.get(arch) if arch else None
    if name not in SUPPORTED_MODELS:
        raise ExportError(f"{where}: architecture {arch!r} does not export to transformers: its layers are not "
                          "a transformers class's; exported: " + ", ".join(SUPPORTED_MODELS)
                          + " (and their named variants)")
    return name


def _activation(enc) -> str:
    act = getattr(enc.cfg, "activation_fn", "relu")
    return str(getattr(act, "value", act))


def check_network(model, where: str) -> None:
    """Refuse (one line naming the options) what no ``transformers`` seq2seq class computes as
    fairseq does: other activations, no positions, different encoder and decoder widths,
    projections, adaptive softmax, cross self-attention, quantisation noise, document positions,
    parameters a plain Transformer lacks, a mixed pre-/post-norm, a pre-norm network without
    its final layer norms, mixed learned and sinusoidal positions; the options of a model started
    from a transformers folder (``--positions-style marian``, ``--output-bias``,
    ``--decoder-start-pad``: Marian's network, which no class here has)."""
    from ..ctranslate2.exportable import plain_transformer_problems

    enc, dec = model.encoder, model.decoder
    problems = []
    if _activation(enc) not in ACTIVATIONS:
        problems.append(f"--activation-fn {_activation(enc)}")
    if enc.embed_positions is None or dec.embed_positions is None:
        problems.append("--no-token-positional-embeddings")
    if enc.embed_tokens.embedding_dim != dec.embed_tokens.embedding_dim:
        problems.append("--encoder-embed-dim other than --decoder-embed-dim")
    problems += plain_transformer_problems(model)
    if not len(enc.layers) or not len(dec.layers):
        problems.append("--encoder-layers/--decoder-layers 0")
    if problems:
        raise ExportError(f"{where}: no transformers class computes this model as fairseq does: "
                          + ", ".join(problems))


def network_options(model, where: str) -> Tuple[bool, bool, bool]:
    """``(pre_norm, learned_positions, layernorm_embedding)`` of ``model``, each the same on
    the encoder and the decoder, else :class:`ExportError` naming the option."""
    from fairseq.modules import LearnedPositionalEmbedding

    enc, dec = model.encoder, model.decoder
    pre = (bool(enc.layers[0].normalize_before), bool(dec.layers[0].normalize_before))
    learned = tuple(isinstance(p, LearnedPositionalEmbedding) for p in (enc.embed_positions, dec.embed_positions))
    ln_emb = (enc.layernorm_embedding is not None, dec.layernorm_embedding is not None)
    for flags, option in ((pre, "--encoder-normalize-before/--decoder-normalize-before"),
                          (learned, "--encoder-learned-pos/--decoder-learned-pos")):
        if flags[0] != flags[1]:
            raise ExportError(f"{where}: {option} differ between the encoder and the decoder: no transformers "
                              "class has that network")
    if pre[0] and (enc.layer_norm is None or dec.layer_norm is None):
        raise ExportError(f"{where}: pre-norm without its final layer norm (--no-decoder-final-norm): no "
                          "transformers class has that network (M2M-100 and mBART always normalise the output)")
    return pre[0], learned[0], ln_emb[0]


def choose_class(model, where: str) -> str:
    """The ``transformers`` class of ``model`` (:data:`CLASSES`), or :class:`ExportError`
    naming the option no class has."""
    check_network(model, where)
    key = network_options(model, where)
    if key not in CLASSES:
        pre, learned, ln_emb = key
        if pre and not learned:
            bad = "--layernorm-embedding with pre-norm and sinusoidal positions (M2M-100 has no embedding layer norm)"
        elif pre:
            bad = ("--encoder-learned-pos without --layernorm-embedding in a pre-norm network (mBART has the "
                   "embedding layer norm)")
        elif learned:
            bad = ("--encoder-learned-pos without --layernorm-embedding in a post-norm network (BART has the "
                   "embedding layer norm)")
        else:
            bad = ("--layernorm-embedding with post-norm and sinusoidal positions (FSMT has no embedding layer "
                   "norm, BART learned positions)")
        raise ExportError(f"{where}: {bad}: no transformers class has that network")
    name = CLASSES[key]
    if name != "FSMTForConditionalGeneration" and model.encoder.dictionary.symbols != model.decoder.dictionary.symbols:
        raise ExportError(f"{where}: separate source and target dictionaries in a {'pre' if key[0] else 'post'}-norm "
                          f"network: {name[:-len('ForConditionalGeneration')]} has one vocabulary; prepare the data "
                          "with --joined-dictionary")
    return name


def tied(model) -> Tuple[bool, bool]:
    """``(encoder-decoder embeddings shared, decoder input-output embeddings shared)``: the
    same parameter in fairseq (``--share-all-embeddings``,
    ``--share-decoder-input-output-embed``)."""
    enc, dec = model.encoder, model.decoder
    out = getattr(dec, "output_projection", None)
    return (enc.embed_tokens.weight is dec.embed_tokens.weight,
            out is not None and out.weight is dec.embed_tokens.weight)


def hf_config(model, name: str, source_lang: str, target_lang: str) -> dict:
    """The keyword arguments of the ``transformers`` configuration of ``model`` as ``name``:
    sizes, dropout, activation, embedding scale, one position table as long as the longer of
    fairseq's, fairseq's special ids with ``</s>`` as the decoder's start and end, and the
    embeddings tied only where fairseq ties all of them."""
    enc, dec = model.encoder, model.decoder
    d = dec.dictionary
    cfg = enc.cfg
    embed_dim = enc.embed_tokens.embedding_dim
    all_tied = tied(model) == (True, True)
    kw = dict(
        d_model=embed_dim,
        encoder_layers=len(enc.layers), decoder_layers=len(dec.layers),
        encoder_ffn_dim=enc.layers[0].fc1.out_features, decoder_ffn_dim=dec.layers[0].fc1.out_features,
        encoder_attention_heads=enc.layers[0].self_attn.num_heads,
        decoder_attention_heads=dec.layers[0].self_attn.num_heads,
        dropout=float(cfg.dropout), attention_dropout=float(cfg.attention_dropout),
        activation_dropout=float(cfg.activation_dropout), activation_function=ACTIVATIONS[_activation(enc)],
        encoder_layerdrop=float(getattr(cfg.encoder, "layerdrop", 0.0) or 0.0),
        decoder_layerdrop=float(getattr(cfg.decoder, "layerdrop", 0.0) or 0.0),
        max_position_embeddings=max_positions(model),
        scale_embedding=math.isclose(float(enc.embed_scale), math.sqrt(embed_dim)),
        pad_token_id=d.pad(), bos_token_id=d.bos(), eos_token_id=d.eos(),
        decoder_start_token_id=d.eos(), forced_eos_token_id=d.eos(),
        is_encoder_decoder=True, tie_word_embeddings=all_tied, use_cache=True,
    )
    if float(enc.embed_scale) not in (1.0,) and not kw["scale_embedding"]:
        raise ExportError(f"an embedding scale of {float(enc.embed_scale)}: transformers scales by sqrt(d_model) or 1")
    if name == "FSMTForConditionalGeneration":
        # FSMT's forward masks the future only when it is given input_ids and no cache
        # (use_cache off): otherwise a decoder input of several tokens sees its future
        kw.update(langs=[source_lang, target_lang], src_vocab_size=len(enc.dictionary),
                  tgt_vocab_size=len(d), use_cache=False, num_beams=1)
    else:
        kw.update(vocab_size=len(d))
    return kw


def max_positions(model) -> int:
    """The longest sequence the network reads (the longer of fairseq's source and target limits)."""
    return int(max(model.encoder.max_positions(), model.decoder.max_positions()))
