"""``--validate-cxmi``: the conditional cross-mutual information (Fernandes et al. 2021,
"Measuring and Increasing Context Usage in Context-Aware Machine Translation", ACL) measured
at every validation.

Every validation batch's references are scored teacher-forced three times: with the true
context (the criterion's own forward pass), with none and with a random document's context
(the batch's context variants, :mod:`~fairseq_docctx.data.context_variants`, drawn with
``--seed`` and the sentence ids). The batch adds :data:`CXMI_SUMS` to its logging output;
:func:`reduce_metrics` turns their sums over batches and workers into ``cxmi``,
``cxmi_random`` and ``cxmi_true_vs_random`` in nats per target token, the figures of
``docctx-score cxmi``.
"""
import logging

import torch
from fairseq import metrics

from ..data import context_batch as cb
from ..data import context_variants as cv
from ..errors import UsageError
from ..models import document_context as dc

logger = logging.getLogger(__name__)

#: the sums a validation batch adds to its logging output (summed over batches and workers
#: like fairseq's --eval-bleu counts): target tokens, and the summed per-token
#: log-probability differences true - none and random - none (nats)
CXMI_TOKENS, CXMI_TRUE_NONE, CXMI_RANDOM_NONE = "_cxmi_tokens", "_cxmi_true_none", "_cxmi_random_none"
CXMI_SUMS = (CXMI_TOKENS, CXMI_TRUE_NONE, CXMI_RANDOM_NONE)


def check_settings(cfg, segments: bool) -> None:
    """Refuse ``--validate-cxmi`` with ``--doc-mode segments`` (one line): a segment holds its
    context inside it (a configuration made by hand may lack the option: off)."""
    if getattr(cfg, "validate_cxmi", False) and segments:
        raise UsageError("--validate-cxmi with --doc-mode segments: a segment holds its context inside it, "
                         "validation batches have no context to take away or swap; measure a segment model "
                         "with docctx-score cxmi")


def check_model(cfg, model) -> None:
    """Warn that ``--validate-cxmi`` does nothing for a new ``model`` that reads no document
    context (its CXMI is 0)."""
    if getattr(cfg, "validate_cxmi", False) and not dc.reads_context(model):
        logger.warning(f"--validate-cxmi does nothing: {model.__class__.__name__} reads no document context "
                       f"(--context-size {cfg.context_size}, --context-sides {cfg.context_sides}), "
                       "its CXMI is 0; validation scores each batch once")


def cxmi_seed(cfg) -> int:
    """The seed of the random contexts: fairseq's ``--seed`` (1 where the configuration does
    not resolve it, e.g. a task made by hand)."""
    try:
        return int(cfg.seed)
    except Exception:
        return 1


def validates_cxmi(cfg, model, segments: bool) -> bool:
    """Whether validation measures CXMI: ``--validate-cxmi``, a model that reads context and
    samples that are not segments."""
    return bool(cfg.validate_cxmi) and dc.reads_context(model) and not segments


def cxmi_sums(sample, model, pad: int, place_langtoks, true_output=None) -> dict:
    """The CXMI sums of a validation batch (:data:`CXMI_SUMS`) for ``model``, which reads
    context: its target tokens and the sums over them of ``log p(y_t | x, C) - log p(y_t |
    x)`` (true context against none) and of the same with the random context, in nats, each
    reference scored teacher-forced by
    :func:`~fairseq_docctx.models.document_context.target_logprobs` as ``docctx-score cxmi``
    scores it. ``place_langtoks``: the task's batch as the model reads it (mBART-25's
    language tokens); ``true_output``: the model's output on that batch (the criterion's
    forward pass), else computed here. A batch without context variants — the trainer's
    stand-in for a worker's missing batch, a training batch whose logging output it zeroes —
    runs the same forward passes on itself and adds zeros, so every worker runs as many
    forward passes and logs the same keys."""
    read = place_langtoks(sample)
    if true_output is None:
        true_output = model(**read["net_input"])
    true, mask = dc.target_logprobs(model, true_output, read, pad)
    variants = cb.variants(sample)
    diffs = {}
    for name in cv.VARIANTS:
        other = place_langtoks(cb.variant_sample(sample, name)) if variants is not None else read
        lp, _ = dc.target_logprobs(model, model(**other["net_input"]), other, pad)
        diffs[name] = (true - lp).masked_fill(~mask, 0.0).double().sum()
    if variants is None:
        return dict.fromkeys(CXMI_SUMS, 0.0)
    return {CXMI_TOKENS: float(mask.sum()), CXMI_TRUE_NONE: float(diffs[cv.NONE]),
            CXMI_RANDOM_NONE: float(diffs[cv.NONE] - diffs[cv.RANDOM])}


def reduce_metrics(logging_outputs) -> None:
    """Log ``cxmi`` (true - none), ``cxmi_random`` (random - none) and ``cxmi_true_vs_random``
    (true - random), nats per target token: the sums of :func:`cxmi_sums` over the batches
    and workers of the validation, divided by its target tokens (derived metrics, so also
    selectable with ``--best-checkpoint-metric``). Nothing for outputs without the sums."""
    if not any(CXMI_TOKENS in log for log in logging_outputs):
        return
    for key in CXMI_SUMS:
        total = sum(log.get(key, 0) for log in logging_outputs)
        metrics.log_scalar(key, float(total.cpu()) if torch.is_tensor(total) else float(total))

    def per_token(numerator):
        def fn(meters):
            tokens = meters[CXMI_TOKENS].sum
            return round(float(numerator(meters) / tokens), 4) if tokens > 0 else 0.0
        return fn

    metrics.log_derived("cxmi", per_token(lambda m: m[CXMI_TRUE_NONE].sum))
    metrics.log_derived("cxmi_random", per_token(lambda m: m[CXMI_RANDOM_NONE].sum))
    metrics.log_derived("cxmi_true_vs_random", per_token(lambda m: m[CXMI_TRUE_NONE].sum - m[CXMI_RANDOM_NONE].sum))


class captured_output:
    """``with captured_output(model) as c:`` — ``c.output``, the output of the first call of
    ``model`` inside the block (``None`` if there is none): a forward hook, whatever calls it
    (the criterion)."""

    def __init__(self, model):
        self.model, self.output = model, None

    def __enter__(self):
        def hook(module, args, output):
            if self.output is None:
                self.output = output

        self.handle = self.model.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False
