"""One K: a model reads the task's ``--context-size``; its own K option, given, must say the
same; a checkpoint reports the K it reads in its context spec, which the hub, generation and
scoring read."""
import pytest

from conftest import REPO, TINY_MODEL, run

OLD = REPO / "tests" / "fixtures" / "old_checkpoints"


@pytest.mark.parametrize("model_k", ["1", "3"])
def test_training_with_a_model_k_other_than_the_tasks_is_one_error(toy_bin, tmp_path, model_k):
    """fairseq-train stops before the first update with one line saying which flag to change,
    whether the model's own K is above or below --context-size."""
    p = run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--context-size", "2", "--arch", "qcn_transformer", "--qcn-context-size", model_k, *TINY_MODEL,
             "--max-tokens", "600", "--max-update", "2", "--save-dir", tmp_path / "ckpt"], check=False)
    assert p.returncode != 0
    want = (f"QCNTransformerModel reads K={model_k} previous sentences but the task gives --context-size 2: "
            f"use --context-size {model_k}, or leave out the model's own K option (it defaults to --context-size)")
    assert p.stderr.count(want) == 1, p.stderr[-3000:]
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_a_checkpoint_reports_the_k_it_reads_in_one_place():
    """The QCN checkpoint was trained with --context-size 3 and --qcn-context-size 2: it reads
    2 previous sentences, and that is the K its context spec, the hub and scoring report."""
    from fairseq_docctx.evaluation.scoring import ModelScorer
    from fairseq_docctx.hub import from_pretrained
    from fairseq_docctx.models.document_context import context_spec

    hub = from_pretrained(str(OLD / "qcn.pt"), data=str(OLD / "data-bin"))
    assert int(hub.task.cfg.context_size) == 3  # what the task collates (the checkpoint's)
    assert context_spec(hub.models[0]).size == 2 and hub.task.context_contract.size == 2
    assert ModelScorer(hub).context_size == 2
    # a task that gives fewer (said to be meant: context_override): the model reads those
    hub = from_pretrained(str(OLD / "qcn.pt"), data=str(OLD / "data-bin"), context_size=1, context_override=True)
    assert context_spec(hub.models[0]).size == 1 and ModelScorer(hub).context_size == 1
