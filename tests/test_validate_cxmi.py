"""``--validate-cxmi``: fairseq's validation also measures context usage, CXMI (Fernandes et al.
2021), with the true context against none and against a random document's context — the figures
``docctx-score cxmi`` gives on the same split and seed, from the same per-sentence random
contexts (``fairseq_docctx/data/context_variants.py``). Off by default: one forward pass a
validation batch, the same loss."""
import re

import numpy as np
import pytest
import torch

import probe_utils as pu
from conftest import REPO, run

USER_DIR = str(REPO / "fairseq_docctx")
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings"]
CXMI_KEYS = ("cxmi", "cxmi_random", "cxmi_true_vs_random")


def _setup(data, *extra, arch="concat_transformer", model_args=TINY):
    """Task, model and criterion built from fairseq-train arguments, as the trainer builds them."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "--arch", arch, "--criterion", "label_smoothed_cross_entropy",
                                                "--label-smoothing", "0.1", *model_args, *map(str, extra)])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = task.build_model(args)
    return task, model, task.build_criterion(args)


def _validate(task, model, criterion, split="valid", max_tokens=2000):
    """What fairseq's ``validate`` logs for ``split``: every batch through ``task.valid_step``
    and ``task.reduce_metrics`` inside one aggregation (the trainer's per-batch reduction), the
    smoothed values; and the number of forward passes of the model."""
    from fairseq import metrics

    task.load_dataset(split)
    ds = task.dataset(split)
    itr = task.get_batch_iterator(ds, max_tokens=max_tokens, max_positions=(1024, 1024)).next_epoch_itr(shuffle=False)
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    model.eval()
    criterion.eval()
    try:
        with metrics.aggregate(new_root=True) as agg, torch.no_grad():
            for sample in itr:
                _, _, log = task.valid_step(sample, model, criterion)
                task.reduce_metrics([log], criterion)
            return dict(agg.get_smoothed_values()), len(calls)
    finally:
        hook.remove()


@pytest.fixture(scope="module")
def toy_setups(toy_bin):
    """A tiny untrained concat_transformer (K=2, both sides) on the toy data, without and with
    the flag (same weights)."""
    args = ("--context-size", "2", "--context-sides", "both")
    off = _setup(toy_bin, *args)
    on = _setup(toy_bin, *args, "--validate-cxmi")
    on[1].load_state_dict(off[1].state_dict())
    return off, on


def test_off_by_default_one_forward_pass_the_same_loss(toy_setups):
    (task, model, crit), (task_on, model_on, crit_on) = toy_setups
    assert task.cfg.validate_cxmi is False
    off, calls_off = _validate(task, model, crit)
    on, calls_on = _validate(task_on, model_on, crit_on)
    assert not set(CXMI_KEYS) & set(off) and set(CXMI_KEYS) <= set(on)
    assert calls_on == 3 * calls_off > 0  # true (the criterion's pass), none, random
    assert on["loss"] == off["loss"] and on["nll_loss"] == off["nll_loss"]
    assert abs(on["cxmi_true_vs_random"] - (on["cxmi"] - on["cxmi_random"])) <= 2e-4
    # the training split never carries the variants
    task_on.load_dataset("train")
    ds = task_on.dataset("train")
    assert "context_variants" not in ds.collater([ds[i] for i in range(4)])


def test_sentence_level_model_does_nothing_segments_refused(toy_bin, caplog):
    from fairseq_docctx.errors import UsageError

    with caplog.at_level("WARNING"):
        task, model, crit = _setup(toy_bin, "--context-size", "0", "--validate-cxmi", arch="transformer")
    assert any("--validate-cxmi does nothing: TransformerModel reads no document context" in r.getMessage()
               for r in caplog.records)
    stats, calls = _validate(task, model, crit)
    assert calls > 0 and not set(CXMI_KEYS) & set(stats)
    with pytest.raises(UsageError, match="--validate-cxmi with --doc-mode segments: .* measure a segment model "
                                         "with docctx-score cxmi$"):
        _setup(toy_bin, "--doc-mode", "segments", "--validate-cxmi", "--encoder-ctxlayers", "1",
               "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1", arch="g_transformer")


def test_random_context_rows_depend_on_the_sentence_alone():
    from fairseq_docctx.data.context_variants import RandomContext

    lengths = np.array([5, 1, 3, 7, 2, 4])
    rc = RandomContext(lengths, seed=3)
    ids = np.arange(lengths.sum())
    n = np.minimum(ids - rc.offsets[rc.sent_doc[ids]], 3)
    rows = rc.rows(ids, n, 3)
    perm = np.random.RandomState(0).permutation(len(ids))
    assert np.array_equal(rc.rows(ids[perm], n[perm], 3), rows[perm])  # whatever the batch and its order
    assert not np.array_equal(RandomContext(lengths, seed=4).rows(ids, n, 3), rows)
    for i, (row, want) in enumerate(zip(rows, n)):
        got = row[row >= 0]
        assert np.array_equal(row[:len(got)], got) and len(got) == min(want, len(got))  # the -1s trail
        if want == 0:
            assert len(got) == 0
            continue
        docs = set(rc.sent_doc[got].tolist())
        d = int(rc.sent_doc[i])
        assert len(docs) == 1 and d not in docs  # one other document
        o = docs.pop()
        if any(lengths[e] >= want for e in range(len(lengths)) if e != d):  # one long enough, when there is one
            assert lengths[o] >= want and len(got) == want
        else:
            assert len(got) == min(want, lengths[o])
        assert np.array_equal(got, got[0] - np.arange(len(got)))  # consecutive, the nearest first
    # no other document: no random context
    assert RandomContext([4], seed=1).draw(2, 2) is None


def test_data_parallel_wrapper_keeps_the_context(toy_setups):
    """fairseq's trainer hands the task ``ModuleProxyWrapper(DistributedDataParallel(model))``
    in distributed training: the model's contract is read through it."""
    from fairseq.distributed import ModuleProxyWrapper

    from fairseq_docctx.models import document_context as dc

    (_, model, _), _ = toy_setups
    wrapped = ModuleProxyWrapper(torch.nn.DataParallel(model))
    assert dc.reads_context(wrapped) and dc.context_spec(wrapped) == dc.context_spec(model)
    sample = {"net_input": {"src_tokens": torch.ones(1, 2), "context": {"ids": torch.zeros(1, 2)}}}
    assert dc.sample_for_model(sample, wrapped) is sample


def test_validation_figure_is_docctx_score_cxmi(probe, concat_model):
    """The probe's concat_transformer (K=2, both sides): validation with --validate-cxmi logs,
    on the valid split, the CXMI docctx-score cxmi reports there with the same seed, at any
    batch size; the model reads its context, so the figures are far from 0."""
    from fairseq_docctx.evaluation.cxmi import cxmi_split
    from fairseq_docctx.evaluation.scoring import load_scorer
    from fairseq_docctx.inference.checkpoint import load_checkpoint_state

    task, model, crit = _setup(probe["data_bin"], "--context-size", "2", "--context-sides", "both", "--validate-cxmi",
                               "--seed", "7", model_args=pu.TINY_TRANSFORMER)
    model.load_state_dict(load_checkpoint_state(concat_model["checkpoint"])["model"])
    logged, _ = _validate(task, model, crit)
    rep = cxmi_split(load_scorer(concat_model["checkpoint"], data=probe["data_bin"]), "valid", seed=7)
    print("validation:", {k: logged[k] for k in CXMI_KEYS}, "docctx-score cxmi:",
          {k: round(rep[k], 4) for k in ("cxmi", "cxmi_random", "true_vs_random")})
    for key, theirs in (("cxmi", "cxmi"), ("cxmi_random", "cxmi_random"), ("cxmi_true_vs_random", "true_vs_random")):
        assert abs(logged[key] - rep[theirs]) <= 6e-5, (key, logged[key], rep[theirs])  # rounded to 4 places
    assert logged["cxmi_true_vs_random"] > 0.05
    small, _ = _validate(task, model, crit, max_tokens=300)  # other batches, the same figures
    assert all(abs(small[k] - logged[k]) <= 1e-4 for k in CXMI_KEYS)


def _valid_lines(log):
    return [line for line in log.splitlines() if "| valid on 'valid' subset" in line]


def _stat(line, key):
    m = re.search(rf"\| {key} (-?[0-9.e+-]+)", line)
    return float(m.group(1)) if m else None


def test_fairseq_train_logs_cxmi_at_each_validation(toy_bin, tmp_path):
    """A short fairseq-train run: every validation line has the three figures, and
    --best-checkpoint-metric selects on one of them."""
    from fairseq_docctx.inference.checkpoint import load_checkpoint_state

    p = run(["fairseq-train", toy_bin, "--user-dir", USER_DIR, "--task", "document_translation",
             "--context-size", "2", "--context-sides", "both", "--arch", "concat_transformer", *TINY,
             "--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy",
             "--max-tokens", "400", "--max-update", "4", "--validate-interval-updates", "2", "--validate-cxmi",
             "--best-checkpoint-metric", "cxmi_true_vs_random", "--maximize-best-checkpoint-metric",
             "--save-interval-updates", "2",
             "--cpu", "--num-workers", "0", "--log-format", "simple", "--save-dir", tmp_path / "ckpt",
             "--no-epoch-checkpoints", "--no-last-checkpoints"])
    lines = _valid_lines(p.stdout + p.stderr)
    assert len(lines) >= 2, p.stdout[-3000:] + p.stderr[-3000:]
    for line in lines:
        got = {k: _stat(line, k) for k in CXMI_KEYS}
        assert None not in got.values(), line
        assert abs(got["cxmi_true_vs_random"] - (got["cxmi"] - got["cxmi_random"])) <= 2e-4, line
    best = max(_stat(line, "cxmi_true_vs_random") for line in lines)
    assert _stat(lines[-1], "best_cxmi_true_vs_random") == best, lines[-1]  # (after the first save)
    state = load_checkpoint_state(str(tmp_path / "ckpt" / "checkpoint_best.pt"))
    assert state["extra_state"]["best"] == pytest.approx(best)


@pytest.mark.slow  # ~1 min (one thread, 2 shared cores): 300 updates on the context probe
def test_true_vs_random_rises_while_a_model_learns_the_probe(probe, tmp_path):
    """concat_transformer learning the probe (the setting of tests/probe_fixtures.py), validated
    every 100 updates: the true context comes to beat a random one."""
    common = [a for a in pu.TRAIN_COMMON if a != "--disable-validation"]
    log = pu._run([pu._tool("fairseq-train"), probe["data_bin"], "--user-dir", USER_DIR, "--task", "document_translation",
                   "--arch", "concat_transformer", "--save-dir", str(tmp_path), "--max-update", "300", "--seed", "1",
                   *common, *pu.TINY_TRANSFORMER, "--context-size", "2", "--context-sides", "both", "--validate-cxmi",
                   "--validate-interval-updates", "100", "--no-save"], str(tmp_path / "train.log"))
    lines = _valid_lines(log)
    figures = [_stat(line, "cxmi_true_vs_random") for line in lines]
    print("updates:", [_stat(line, "num_updates") for line in lines], "cxmi_true_vs_random:", figures,
          "cxmi:", [_stat(line, "cxmi") for line in lines], "loss:", [_stat(line, "loss") for line in lines])
    assert len(figures) >= 3
    assert figures[-1] > figures[0] + 0.05 and figures[-1] > 0.05


@pytest.mark.slow  # ~15 s: two CPU ranks (gloo) and fairseq-validate
def test_distributed_validation_sums_over_workers(toy_bin, tmp_path):
    """fairseq-train on two CPU ranks validates half the batches on each: the figures, summed
    over the workers, are those fairseq-validate logs for the final checkpoint in one process."""
    from test_task import _free_port

    args = ["--task", "document_translation", "--context-size", "2", "--context-sides", "both",
            "--target-context", "reference", "--validate-cxmi", "--seed", "5"]
    p = run(["torchrun", "--nproc_per_node", "2", "--master_port", str(_free_port()), "--no-python",
             REPO / "examples" / "fairseq-train-gloo.sh", toy_bin, "--user-dir", USER_DIR, *args,
             "--arch", "concat_transformer", *TINY, "--optimizer", "adam", "--lr", "1e-3",
             "--criterion", "label_smoothed_cross_entropy", "--max-tokens", "300", "--max-update", "6",
             "--validate-interval-updates", "3", "--cpu", "--num-workers", "0", "--save-dir", tmp_path,
             "--no-epoch-checkpoints", "--log-format", "simple"], timeout=600)
    trained = _valid_lines(p.stdout + p.stderr)
    q = run(["fairseq-validate", toy_bin, "--user-dir", USER_DIR, *args, "--path", tmp_path / "checkpoint_last.pt",
             "--valid-subset", "valid", "--max-tokens", "1000", "--cpu", "--num-workers", "0"])
    alone = _valid_lines(q.stdout + q.stderr)
    assert len(trained) == 2 and len(alone) == 1
    for key in CXMI_KEYS + ("loss", "wpb"):
        assert _stat(trained[-1], key) == _stat(alone[0], key) is not None, (key, trained[-1], alone[0])
