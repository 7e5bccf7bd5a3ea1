"""What the plugin's criteria share with fairseq's ``label_smoothed_cross_entropy``: its
logging output, so that a criterion adding a term to the loss logs what fairseq logs."""


def logging_output(criterion, model, net_output, sample, loss, nll_loss, sample_size, **extra) -> dict:
    """fairseq's ``LabelSmoothedCrossEntropyCriterion.forward`` logging output of ``loss`` and
    ``nll_loss`` (with the accuracy counts under ``--report-accuracy``), plus ``extra``."""
    out = {
        "loss": loss.data,
        "nll_loss": nll_loss.data,
        "ntokens": sample["ntokens"],
        "nsentences": sample["target"].size(0),
        "sample_size": sample_size,
        **extra,
    }
    if criterion.report_accuracy:
        n_correct, total = criterion.compute_accuracy(model, net_output, sample)
        out["n_correct"] = n_correct.data
        out["total"] = total.data
    return out
