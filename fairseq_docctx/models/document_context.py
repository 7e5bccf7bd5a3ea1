"""The contract between the ``document_translation`` task and a model that reads document
context. A model opts in by inheriting :class:`DocumentContextModel` (next to its fairseq base
class); every other model (fairseq's ``transformer``, ``lstm``, ...) is a sentence-level
model: the task removes the context from its batches (:func:`sample_for_model`), so it trains
and decodes through the task as through fairseq's ``translation``.

What a model declares, and what the task does with it:

======================================  =====================================================
declaration (default)                   use
======================================  =====================================================
``context_sides`` (``("src",)``)        the sides it reads (:mod:`~fairseq_docctx.data.
                                        context_batch`); checked against ``--context-sides``
                                        when the model is built: an error if the task does
                                        not give one of them
``context_size`` (the task's K)         K, the previous sentences it reads; a new model
                                        whose K differs from ``--context-size`` is refused
                                        (one K: a model's own K option defaults to it); a
                                        checkpoint reads at most the task's K. Once the task
                                        has built the model it holds the K the model reads
                                        (:func:`context_spec`'s ``size``)
``doc_batching`` (``"runs"``)           the batching of ``--doc-batching auto``: ``runs``,
                                        ``grouped-runs`` or ``sentences``
                                        (:class:`~fairseq_docctx.data.document_dataset.
                                        DocumentPairDataset`)
``context_token_cost`` (1.0)            what a token of a context-only sentence counts toward
                                        ``--max-tokens`` with the ``sentences`` batching,
                                        relative to a token of a current sentence: 1 for a
                                        model that runs its context through the network; less
                                        for one that only embeds its context words (QCN)
``packs_training_output`` (False)       in training mode the model returns the logits of the
                                        real target positions only (``[1, R, V]``, with
                                        ``packed_positions [B, T]`` in the extra dict); the
                                        mixin's ``get_targets`` returns the matching
                                        ``[1, R]`` targets and ``unpack_logits`` the
                                        ``[B, T, V]`` logits; fairseq's
                                        ``--ignore-prefix-size`` then cannot work and is
                                        refused
``document_cache_entries`` (None)       optional method ``(sample, hypos) -> list``: in
                                        document-order inference, per batch row, what later
                                        sentences need of it as context; see below
``analyses`` (``()``: none)             the analyses of its context it offers, of
                                        :data:`ANALYSES`: ``"panels"`` (its method
                                        ``context_weights(sample) -> list``, for
                                        ``docctx-score plot``) and ``"attention"``
                                        (``context_attention(sample) -> list``, the
                                        distributions it spreads over its context, for
                                        ``docctx-score entropy``); see below
``checkpoint_defaults`` (``{}``)          ``{option: value}``: the value a checkpoint written
                                        before ``option`` existed was trained with; given to
                                        a checkpoint's model arguments that lack the option
                                        before the model is built
                                        (:func:`apply_checkpoint_defaults`), so that a new
                                        option's default changes new models only
======================================  =====================================================

The model's ``forward`` (and its encoder's) takes a ``context`` keyword: the batch's context
dict (read it with :mod:`~fairseq_docctx.data.context_batch`), ``None`` when there is none.

**Document-order inference** (``--target-context hypothesis``): batches come in document
order and the task replaces the ``tgt`` side by the model's own translations
(:func:`~fairseq_docctx.data.context_batch.replace_side`). A model that defines
``document_cache_entries(sample, hypos)`` is called after each batch's beam search with
the batch (``sample``, holding under :data:`ENCODER_OUT` the encoder output the search
computed for it, when the task could capture it: single models under fairseq's
``SequenceGenerator``) and its hypotheses, and returns one entry per row (anything, e.g. a
dict of tensors). The entries of a batch's context sentences come back to it in the
context's ``cache`` (:func:`~fairseq_docctx.data.context_batch.cache`), aligned with the
``tgt`` table, so earlier sentences are never re-encoded. Nothing is kept on modules and
nothing is written into an encoder output while decoding: what a model caches during beam
search lives in fairseq's incremental state.

**Attention over the context** (``docctx-score entropy``): ``context_attention(sample)`` of a
teacher-forced batch returns a list of *distributions*, each a dict of

* ``title`` (str), ``positions`` (what a distribution belongs to: ``"target"`` positions,
  ``"source"`` positions of ``net_input["src_tokens"]``, or ``"source context"`` words),
  ``items`` (what it is over, in words: ``"context tokens"``, ``"context sentences"``, ...);
* ``weights``: ``[B, P, N]`` non-negative weights of the ``N`` items at each of the ``P``
  positions of every row (renormalised over ``support`` before use: e.g. the share of a
  cross-attention that falls on the context tokens);
* ``support``: ``[B, P, N]`` bool, the items that exist for that position (the context
  tokens or sentences a row has);
* ``position_mask``: ``[B, P]`` bool, the positions that have a distribution (real tokens of
  rows that have context).

A model declares what it gives in ``analyses``; the commands ask the model through
:func:`context_weights` and :func:`context_attention`, which refuse a model that does not
declare the analysis (:class:`ContextAnalysisUnsupported`, one line naming the registered
models that offer it, :func:`models_offering`). :func:`panel_distributions`
turns ``context_weights`` panels that are distributions (their columns over their rows) into
this form. What a model gives is said by its own ``context_attention``.
"""
import logging
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from ..data import context_batch as cb
from ..errors import UsageError

logger = logging.getLogger(__name__)

#: key of the sample handed to ``document_cache_entries`` holding the batch's encoder output
ENCODER_OUT = "encoder_out"
#: K of models whose own option and task say nothing (the papers' K)
DEFAULT_CONTEXT_SIZE = 3


#: the analyses a model may declare in ``analyses``: the method that gives each, and its command
ANALYSES = {
    "panels": ("context_weights", "docctx-score plot"),
    "attention": ("context_attention", "docctx-score entropy"),
}


class ContextAnalysisUnsupported(ValueError):
    """The model does not offer an analysis of its context (see :data:`ANALYSES`)."""


class ContextAttentionUnsupported(ContextAnalysisUnsupported):
    """The model does not give its attention over the context (``context_attention``)."""


class DocumentContextModel:
    """Mixin for a fairseq model that reads ``net_input["context"]`` (see the module doc).

    ``class MyModel(DocumentContextModel, TransformerModel)``; in ``build_model`` call
    :meth:`declare_context` with the sides and K the configuration reads."""

    context_sides: Tuple[str, ...] = ("src",)
    context_size: Optional[int] = None
    doc_batching: str = "runs"
    context_token_cost: float = 1.0
    packs_training_output: bool = False
    document_cache_entries = None
    checkpoint_defaults: dict = {}
    analyses: Tuple[str, ...] = ()

    def get_targets(self, sample, net_output):
        """fairseq's targets, or with a packed training output (``packed_positions`` in the
        output's extra dict, see ``packs_training_output``) those of the real positions,
        ``[1, R]``."""
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        target = sample["target"]
        real = extra.get("packed_positions")
        if real is None:
            return target
        if real.shape != target.shape or not torch.equal(real, target.ne(self.decoder.padding_idx)):
            raise ValueError(f"{self.__class__.__name__}: packed output positions do not match the "
                             "target's non-padding positions (right-padded targets expected)")
        return target[real].unsqueeze(0)

    @staticmethod
    def unpack_logits(net_output):
        """``[B, T, V]`` logits (zeros at padding) from a packed training-mode output
        (unchanged if it is not packed)."""
        logits, extra = net_output[0], net_output[1]
        real = extra.get("packed_positions") if isinstance(extra, dict) else None
        if real is None:
            return logits
        full = logits.new_zeros(*real.shape, logits.size(-1))
        full[real] = logits[0]
        return full

    def context_weights(self, sample):
        """The panels of this model's weights over its context for a teacher-forced batch
        (``analyses`` ``"panels"``, :mod:`fairseq_docctx.evaluation.plots`); a model that has
        none keeps this default."""
        raise _unsupported(self, "panels")

    def context_attention(self, sample):
        """The distributions this model spreads over its context for a teacher-forced batch
        (``analyses`` ``"attention"``, see the module doc); a model that has none keeps this
        default."""
        raise _unsupported(self, "attention")

    def declare_context(self, sides: Sequence[str], size: Optional[int] = None):
        """Record the sides (names or ``--context-sides`` spellings) and K this model reads
        (``None``: as many as the task gives)."""
        self.context_sides = cb.parse_sides(list(sides))
        self.context_size = size
        return self


@dataclass(frozen=True)
class ContextSpec:
    """What a model reads of a batch's context (:func:`context_spec`)."""

    reads_context: bool
    sides: Tuple[str, ...] = ()
    size: Optional[int] = None
    doc_batching: str = "runs"
    context_token_cost: float = 1.0
    packs_training_output: bool = False
    caches: bool = False


SENTENCE_LEVEL = ContextSpec(reads_context=False)


def _data_parallel_wrappers() -> tuple:
    from fairseq.distributed import (DistributedTimeoutWrapper, LegacyDistributedDataParallel,
                                     ModuleProxyWrapper, TPUDistributedDataParallel)

    return (ModuleProxyWrapper, DistributedTimeoutWrapper, LegacyDistributedDataParallel,
            TPUDistributedDataParallel, torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def unwrapped(model):
    """The model inside fairseq's and torch's data-parallel wrappers: in distributed
    training fairseq's trainer hands the task ``ModuleProxyWrapper(DistributedDataParallel(
    model))`` (``legacy_ddp``: ``LegacyDistributedDataParallel``), whose class is not the
    model's."""
    wrappers = _data_parallel_wrappers()
    while isinstance(model, wrappers):
        model = model.module
    return model


def context_spec(model) -> ContextSpec:
    """The contract of any model (inside its data-parallel wrappers, :func:`unwrapped`): a
    :class:`DocumentContextModel`'s declarations, or :data:`SENTENCE_LEVEL` for every other
    model."""
    model = unwrapped(model)
    if not isinstance(model, DocumentContextModel):
        return SENTENCE_LEVEL
    return ContextSpec(True, tuple(model.context_sides), model.context_size, model.doc_batching,
                       float(model.context_token_cost), bool(model.packs_training_output),
                       model.document_cache_entries is not None)


def reads_context(model) -> bool:
    return context_spec(model).reads_context


def reads_segments(model_or_class) -> bool:
    """Whether a model (or model class) translates *segments*, several consecutive sentences
    of a document joined by the separator (``doc2doc_transformer``, ``g_transformer``: the
    segment models, :class:`~fairseq_docctx.models.segment_model.SegmentModel`, whose class
    attribute ``reads_segments = True`` it reads), rather than one sentence per row. Such a model reads
    no context tables: for :func:`context_spec` it is sentence-level; its document context is
    inside its rows."""
    return bool(getattr(model_or_class, "reads_segments", False))


def apply_checkpoint_defaults(args) -> list:
    """Give a checkpoint's model arguments ``args`` (a legacy model's ``Namespace``, or a
    config) the ``checkpoint_defaults`` of its model class (the model registered for
    ``args.arch``) for every option they lack: a checkpoint written before an option existed
    is built with the value it was trained with, not with the option's current default.
    Returns the options set."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from omegaconf import OmegaConf, open_dict

    cls = ARCH_MODEL_REGISTRY.get(getattr(args, "arch", None) or getattr(args, "_name", None))
    defaults = getattr(cls, "checkpoint_defaults", None) or {}
    is_config = OmegaConf.is_config(args)
    added = []
    for name, value in defaults.items():
        if (name in args) if is_config else hasattr(args, name):
            continue
        if is_config:
            with open_dict(args):
                args[name] = value
        else:
            setattr(args, name, value)
        added.append(name)
    if added:
        logger.info(f"{cls.__name__}: checkpoint written before "
                    + ", ".join(f"--{n.replace('_', '-')}" for n in added) + ": "
                    + ", ".join(f"{n} = {defaults[n]}" for n in added))
    return added


def task_context(task) -> Tuple[Tuple[str, ...], Optional[int]]:
    """``(sides, K)`` a task gives (``((), None)`` for a task without document context)."""
    cfg = getattr(task, "cfg", None)
    size = getattr(cfg, "context_size", None)
    sides = getattr(cfg, "context_sides", None)
    if size is None and sides is None:
        return (), None
    return (cb.parse_sides(sides) if sides is not None else ("src",)), size


def resolve_context_size(args, name: str, task) -> int:
    """The K of a model whose parameter shapes need it, for building it: the model option
    ``name`` (e.g. ``han_context_size``) when it is set (given on the command line, or stored
    in a checkpoint), else the task's ``--context-size``, else :data:`DEFAULT_CONTEXT_SIZE`;
    set in ``args`` so that the checkpoint records it. The task checks it against its own K
    when the model is built (:func:`check_context`)."""
    k = getattr(args, name, None)
    if k is None:
        _, task_k = task_context(task)
        k = task_k if task_k else DEFAULT_CONTEXT_SIZE
        setattr(args, name, k)
    return int(k)


class ContextMismatchError(UsageError):
    """A model asks for context the task does not give."""


def check_training_criterion(model, criterion) -> None:
    """Refuse ``--ignore-prefix-size`` for a model that packs its training output: fairseq's
    criteria cut the prefix off a ``[B, T, V]`` output, not off that of packed positions."""
    if context_spec(model).packs_training_output and getattr(criterion, "ignore_prefix_size", 0) > 0:
        raise UsageError(f"{model.__class__.__name__} packs its training output (real "
                         "target positions only): --ignore-prefix-size is not supported")


def check_context(model, sides: Sequence[str], size: int, from_checkpoint: bool = False) -> int:
    """Check what ``model`` reads against what the task gives (``sides``, K = ``size``) and
    return the K it reads (0 for a sentence-level model or a task without context), which
    the task then declares on the model (:attr:`ContextSpec.size`).

    A side the task does not give is an error. A new model whose K differs from the task's
    is an error: a model has one K, the task's ``--context-size`` (its own K option defaults
    to it). A checkpoint reads at most the task's K (a note when it reads fewer than it was
    trained with, a warning when the task collates more than it reads)."""
    spec = context_spec(model)
    if not spec.reads_context or size == 0 or not sides:
        return 0
    name = model.__class__.__name__
    missing = [s for s in spec.sides if s not in sides]
    if missing:
        raise ContextMismatchError(
            f"{name} reads the {cb.format_sides(missing)} side of the context but the task "
            f"gives --context-sides {cb.format_sides(sides)}: use --context-sides "
            f"{cb.format_sides(sorted(set(sides) | set(spec.sides), key=cb.declared_sides().index))}")
    if spec.size is None or spec.size == size:
        return size
    msg = f"{name} reads K={spec.size} previous sentences but the task gives --context-size {size}"
    if not from_checkpoint:
        raise ContextMismatchError(msg + f": use --context-size {spec.size}, or leave out the model's "
                                   "own K option (it defaults to --context-size)")
    if spec.size > size:
        logger.info(msg + f": it reads {size}")
        return size
    logger.warning(f"{name} reads K={spec.size} previous sentences; the task collates "
                   f"--context-size {size} (the extra ones cost batch space for nothing)")
    return spec.size


def sample_for_model(sample, model_or_models):
    """The batch as ``model_or_models`` (a model, or an ensemble's list) reads it: unchanged
    for models that read context, without the context for sentence-level models. An
    ensemble must not mix both kinds."""
    if cb.get_context(sample) is None:
        return sample
    if isinstance(model_or_models, (list, tuple, torch.nn.ModuleList)):
        models = list(model_or_models)
    else:
        models = [model_or_models]
    readers = [reads_context(m) for m in models]
    if all(readers):
        return sample
    if any(readers):
        raise ValueError("an ensemble must not mix context-aware and sentence-level models")
    return cb.without_context(sample)


def model_class(name: Optional[str]):
    """The model class of a registered architecture or model name (``transformer_iwslt_de_en``,
    ``han_transformer``), ``None`` if it is neither (or ``name`` is ``None``)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    return (ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name)) if name else None


def registered_name(model) -> str:
    """The name ``model``'s class is registered under (``han_transformer`` for all its
    architectures), else the class name."""
    from fairseq.models import MODEL_REGISTRY

    return next((name for name, cls in MODEL_REGISTRY.items() if type(model) is cls), type(model).__name__)


def offers(model, analysis: str) -> bool:
    """Whether ``model`` declares ``analysis`` (of :data:`ANALYSES`) in its ``analyses``."""
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r} (of {', '.join(ANALYSES)})")
    return reads_context(model) and analysis in tuple(model.analyses)


def models_offering(analysis: str) -> List[str]:
    """The registered models (fairseq's model registry) that declare ``analysis``."""
    from fairseq.models import MODEL_REGISTRY

    return sorted(name for name, cls in MODEL_REGISTRY.items()
                  if isinstance(cls, type) and issubclass(cls, DocumentContextModel) and analysis in cls.analyses)


_WHAT = {"panels": ("give its weights over the context", "nothing over its context to plot"),
         "attention": ("give its attention over the context", "it has no context to attend to")}


def _unsupported(model, analysis: str) -> ContextAnalysisUnsupported:
    """The one-line refusal of ``analysis`` for ``model``, naming the models that offer it."""
    method, command = ANALYSES[analysis]
    cls = ContextAttentionUnsupported if analysis == "attention" else ContextAnalysisUnsupported
    name = type(model).__name__
    offering = ", ".join(models_offering(analysis)) or "none"
    if not reads_context(model):
        why = f"{name} is a sentence-level model: {_WHAT[analysis][1]}"
    else:
        why = (f"{name} does not {_WHAT[analysis][0]} (it does not declare {analysis!r} in its analyses, "
               f"the {method}(sample) of docs/adding-a-model.md)")
    return cls(f"{why}; {command} needs one of: {offering}")


def require(model, analysis: str):
    """Raise the one-line :class:`ContextAnalysisUnsupported` (naming the models that offer
    it) unless ``model`` declares ``analysis``."""
    if not offers(model, analysis):
        raise _unsupported(model, analysis)


def context_weights(model, sample):
    """``model.context_weights(sample)``, the panels of :mod:`fairseq_docctx.evaluation.plots`,
    for any model: one that does not declare ``"panels"`` raises
    :class:`ContextAnalysisUnsupported`."""
    require(model, "panels")
    return model.context_weights(sample)


def context_attention(model, sample):
    """``model.context_attention(sample)`` (the module doc), for any model: one that does not
    declare ``"attention"`` (a sentence-level model has no context to attend to) raises
    :class:`ContextAttentionUnsupported`."""
    require(model, "attention")
    return model.context_attention(sample)


def panel_distributions(panels, items: str):
    """``context_weights`` panels whose every column is a distribution over their rows
    (``normalized``) as ``context_attention`` distributions: the columns are the positions,
    the rows the items."""
    out = []
    for p in panels:
        if not p["normalized"]:
            continue
        w, rows = p["weights"].float(), p["row_mask"]
        out.append(dict(title=p["title"], positions=p["columns"], items=items,
                        weights=w.transpose(1, 2), support=rows[:, None, :].expand(-1, w.size(2), -1),
                        position_mask=p["column_mask"] & rows.any(1, keepdim=True)))
    return out


def target_logprobs(model, net_output, sample, pad: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced scores of a batch's references: ``(logprobs [B, T], mask [B, T])``, the
    model's log-probability (natural log, float32) of every target token of ``sample`` given
    ``net_output`` (its output on the sample: evaluation mode, unpacked), and which positions
    are tokens (not ``pad``, the target dictionary's padding; EOS included). Shared by ``docctx-score``'s scorer
    (:class:`~fairseq_docctx.evaluation.scoring.ModelScorer`) and ``--validate-cxmi``, so both
    score a reference alike."""
    lprobs = model.get_normalized_probs(net_output, log_probs=True, sample=sample)
    target = sample["target"]
    tok = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).float()
    return tok, target.ne(pad)


def batch_encoder_out(sample) -> Optional[dict]:
    """The encoder output the task handed over with a batch (``document_cache_entries``)."""
    return sample.get(ENCODER_OUT) if isinstance(sample, dict) else None


__all__ = [
    "DocumentContextModel", "ContextSpec", "SENTENCE_LEVEL", "context_spec", "reads_context", "unwrapped",
    "target_logprobs",
    "task_context", "resolve_context_size", "check_context", "ContextMismatchError",
    "sample_for_model", "batch_encoder_out", "reads_segments", "ENCODER_OUT", "DEFAULT_CONTEXT_SIZE",
    "ContextAttentionUnsupported", "context_attention", "panel_distributions", "ANALYSES",
    "ContextAnalysisUnsupported", "context_weights", "offers", "require", "models_offering", "registered_name",
]
