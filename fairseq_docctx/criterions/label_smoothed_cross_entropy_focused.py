"""``label_smoothed_cross_entropy_focused``: the context-discounted loss of focused
concatenation (Lupo, Dinarelli & Besacier 2022, "Focused Concatenation for Context-Aware
Neural Machine Translation", WMT, §3):

    loss = LS-CE(current sentence) + λ · LS-CE(target-context sentences)

for a concatenation model with target context (``concat_transformer``, ``--context-sides
target|both``): the decoder is teacher-forced over ``prefix + current`` and, besides the
current sentence's tokens, predicts the context sentences' tokens, whose token losses count
with weight ``λ = --context-loss-weight`` (0 ≤ λ ≤ 1; the paper's context discount, 0.01 in
the authors' scripts). λ = 0 is ``label_smoothed_cross_entropy`` exactly (the model is called
as that criterion calls it); λ = 1 scores every token of the concatenation alike, as a model
that generates the context too (Tiedemann & Scherrer 2017's extended target side).

Normalisation: ``sample_size`` and ``ntokens`` are the current sentences' target tokens, as
for ``label_smoothed_cross_entropy``, so the current sentence's gradient has the same scale at
any λ and the context adds ``λ × (its summed loss) / (current tokens)``. Logged: ``loss`` (the
objective above, per current token), ``nll_loss`` and ``ppl`` of the current sentences only
(comparable with λ = 0), and ``context_loss``/``context_nll_loss`` per context token
(unweighted; ``context_ntokens`` counts them). With ``reduce=False`` the per-token losses of
the current sentences are returned, as by ``label_smoothed_cross_entropy``.
"""
import math
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
    label_smoothed_nll_loss,
)

from ..errors import UsageError
from ..models.document_context import task_context, unwrapped
from .label_smoothing import logging_output


@dataclass
class LabelSmoothedCrossEntropyFocusedConfig(LabelSmoothedCrossEntropyCriterionConfig):
    context_loss_weight: float = field(
        default=0.0,
        metadata={"help": "weight λ (0 to 1) of the target-context tokens' loss (Lupo et al. 2022's "
                          "context discount); 0: the context is read, not scored"},
    )


@register_criterion("label_smoothed_cross_entropy_focused", dataclass=LabelSmoothedCrossEntropyFocusedConfig)
class LabelSmoothedCrossEntropyFocusedCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, context_loss_weight=0.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        lam = float(context_loss_weight)
        if not 0.0 <= lam <= 1.0:
            raise UsageError(f"--context-loss-weight {context_loss_weight}: λ is between 0 and 1")
        if lam > 0:
            sides, _ = task_context(task)
            if "tgt" not in sides:
                raise UsageError(f"--context-loss-weight {context_loss_weight} needs target context "
                                 "(--context-sides target|both): there are no context tokens to score")
            if ignore_prefix_size > 0:
                raise UsageError(f"--context-loss-weight with --ignore-prefix-size {ignore_prefix_size}: "
                                 "not implemented (the context tokens' own prefixes are not known)")
        self.context_loss_weight = lam

    def context_loss(self, model, net_output):
        """``(LS loss, NLL loss, tokens)`` summed over the target-context tokens the model
        returned (zeros where the batch has none)."""
        extra = net_output[1]
        if not extra.get("context_out"):
            zero = net_output[0].new_zeros(())
            return zero, zero, 0
        logits, target = extra["context_out"][0], extra["context_target"][0]
        lprobs = model.get_normalized_probs((logits, None), log_probs=True)
        loss, nll_loss = label_smoothed_nll_loss(
            lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1), self.eps,
            ignore_index=self.padding_idx, reduce=True)
        return loss, nll_loss, int(target.ne(self.padding_idx).sum())

    def forward(self, model, sample, reduce=True):
        if self.context_loss_weight == 0:
            return super().forward(model, sample, reduce=reduce)
        if not getattr(unwrapped(model), "supports_context_outputs", False):
            raise UsageError(f"--context-loss-weight: {type(unwrapped(model)).__name__} does not predict its "
                             "target context (use --arch concat_transformer)")
        net_output = model(**sample["net_input"], context_outputs=True)
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        ctx_loss, ctx_nll, ctx_ntokens = self.context_loss(model, net_output)
        if reduce:
            loss = loss + self.context_loss_weight * ctx_loss
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        return loss, sample_size, logging_output(self, model, net_output, sample, loss, nll_loss, sample_size,
                                                 context_loss=ctx_loss.data, context_nll_loss=ctx_nll.data,
                                                 context_ntokens=ctx_ntokens)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        n = sum(log.get("context_ntokens", 0) for log in logging_outputs)
        if n:
            for key in ("context_loss", "context_nll_loss"):
                total = sum(float(log.get(key, 0)) for log in logging_outputs)
                metrics.log_scalar(key, total / n / math.log(2), n, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

