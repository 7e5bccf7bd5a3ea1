"""CoWord dropout (Fernandes et al. 2021, "Measuring and Increasing Context Usage in
Context-Aware Machine Translation", ACL, §3), the ``document_translation`` task's
``--coword-dropout P --coword-mask SYM``.

During training each word of the current source sentence is replaced by the mask with
probability P, so that the model has to lean on the context for it; the context (the batch's
context tables, which hold their own copy of every sentence), the target and the decoder
input are untouched, and validation and inference never mask.
"""
from typing import Optional, Sequence

import torch

from ..errors import UsageError
from ..models import document_context as dc


def check_probability(p) -> float:
    """``--coword-dropout``'s probability as a float in [0, 1); another one (NaN included) is a
    :class:`UsageError`."""
    p = float(p or 0.0)
    if not 0 <= p < 1:  # NaN included
        raise UsageError(f"--coword-dropout {p:g}: a probability below 1 and at least 0 (0: off)")
    return p


def coword_mask_index(cfg, src_dict) -> Optional[int]:
    """The index of the mask symbol of ``--coword-dropout`` (``None`` when it is off); a
    source dictionary without the symbol is refused (one line): ``Dictionary.index`` would
    give ``<unk>``'s index for it, and the model would learn to read unknown words as
    dropped ones."""
    # in [0, 1): checked when the task is set up (a configuration made by hand may lack it)
    if float(getattr(cfg, "coword_dropout", 0.0) or 0.0) <= 0:
        return None
    sym = cfg.coword_mask
    if sym not in src_dict.indices:
        raise UsageError(f"--coword-dropout: {cfg.data}'s source dictionary has no {sym} (the mask): "
                         f"prepare the data with docctx-prepare --mask-symbol {sym}")
    return src_dict.index(sym)


def check_model(cfg, src_dict, model) -> None:
    """Refuse ``--coword-dropout`` for a segment model, whose sentences are one another's
    context: there is no current sentence to mask apart from its context."""
    if coword_mask_index(cfg, src_dict) is not None and dc.reads_segments(model):
        raise UsageError(f"--coword-dropout: {type(model).__name__} translates segments, whose sentences are "
                         "one another's context: there is no current sentence to mask apart from its context")


def coword_dropout(sample, model, cfg, src_dict, language_tokens: Sequence[int] = ()):
    """``sample`` with CoWord dropout applied: a copy whose current source sentences
    (``net_input["src_tokens"]``) have each word replaced by the mask with probability
    ``cfg.coword_dropout``. Words are the tokens past fairseq's special symbols other than
    the separator, the mask and the data's ``language_tokens`` (``</s>`` stays, where the
    authors' code masks it too: docs/context-usage.md). ``sample`` itself when dropout is
    off, for a batch without ``net_input`` and for a segment model (:func:`check_model`)."""
    mask = coword_mask_index(cfg, src_dict)
    if mask is None or "net_input" not in sample or dc.reads_segments(model):
        return sample
    src = sample["net_input"]["src_tokens"]
    word = src.ge(src_dict.nspecial) & src.ne(mask)
    for tok in (src_dict.index(cfg.context_separator), *language_tokens):
        word &= src.ne(tok)
    drop = word & (torch.rand(src.shape, device=src.device) < float(cfg.coword_dropout))
    return {**sample, "net_input": {**sample["net_input"], "src_tokens": src.masked_fill(drop, mask)}}
