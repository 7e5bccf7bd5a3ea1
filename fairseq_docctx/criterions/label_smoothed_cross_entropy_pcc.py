"""``label_smoothed_cross_entropy_pcc``: fairseq's label-smoothed cross entropy minus the
PCC reward of the QCN regularization layer (Yang et al. 2019, Eq. 11):

    loss = LS-CE − λ · Σ_sentences (number of target tokens) · PCC(Caps_enc(x), Caps_dec(y))

i.e. the per-sentence PCC is counted once per target token, like the log-likelihood it sits
next to in Eq. 11. ``--pcc-weight λ`` (default 1). ``pcc`` (mean PCC per target token) is
logged separately in training and validation logs (validation computes it with the model's
``regularizer_pcc``, so its loss is the same objective). Models without a regularizer (e.g.
``--no-pcc-regularizer``, or any other model) get plain label-smoothed cross entropy.
"""
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from .label_smoothing import logging_output


@dataclass
class LabelSmoothedCrossEntropyPCCConfig(LabelSmoothedCrossEntropyCriterionConfig):
    pcc_weight: float = field(
        default=1.0, metadata={"help": "weight λ of the PCC regularization term"}
    )


@register_criterion("label_smoothed_cross_entropy_pcc", dataclass=LabelSmoothedCrossEntropyPCCConfig)
class LabelSmoothedCrossEntropyPCCCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, pcc_weight=1.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self.pcc_weight = pcc_weight

    def pcc_term(self, model, net_output, sample):
        """Σ over target tokens of the sentence's PCC (None without a regularizer). In
        training the model returns the PCC with its output; in validation (eval mode) it is
        computed here, so that it is logged there too."""
        pcc = net_output[1].get("pcc") if isinstance(net_output[1], dict) else None
        if pcc is None and hasattr(model, "regularizer_pcc"):
            net_input = sample["net_input"]
            pcc = model.regularizer_pcc(net_input["src_tokens"], net_input["prev_output_tokens"])
        if pcc is None:
            return None
        ntok = sample["target"].ne(self.padding_idx).sum(1).to(pcc)
        return (pcc * ntok).sum()

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        pcc = self.pcc_term(model, net_output, sample)
        if pcc is not None:
            loss = loss - self.pcc_weight * pcc
        return loss, sample_size, logging_output(self, model, net_output, sample, loss, nll_loss, sample_size,
                                                 pcc=pcc.data if pcc is not None else 0.0)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        pcc = sum(log.get("pcc", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        metrics.log_scalar("pcc", float(pcc) / max(ntokens, 1), ntokens, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
