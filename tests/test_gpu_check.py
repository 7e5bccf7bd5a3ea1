"""benchmarks/gpu_check.py: its dry run (the GPU check's code on the CPU at tiny sizes, in
bfloat16 through fairseq's own ``--bf16`` training path, which the plugin runs on the CPU)
trains every architecture with finite losses, compares each with its baseline from the same run, and writes the
JSON and the Markdown table; the skip rule and the log parsing on their own."""
import json
import math
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from conftest import REPO, venv_env


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """``python -m benchmarks.gpu_check --dry-run`` once, in a process of its own (it sets up
    logging and fairseq's global state for itself): (report, Markdown page)."""
    out = tmp_path_factory.mktemp("gpu_check")
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(out)],
                       cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


@pytest.mark.slow  # the CPU dry run (~25 s): make test-all
def test_every_architecture_trains_with_finite_losses(dry_run):
    report, _ = dry_run
    assert report["dry_run"] is True and report["skipped"] == []
    assert report["architectures"] == list(gpu_check.ARCHITECTURES)
    assert set(gpu_check.ARCHITECTURES) == set(report["training"])  # QCN's size is the transformer's
    for name, res in report["training"].items():
        r = res["precisions"]["bf16"]
        assert "error" not in r and "skipped" not in r, (name, r)
        assert r["wps"] > 0 and r["wps_steady"] > 0, name
        assert r["losses"] and all(math.isfinite(x) for x in r["losses"]) and r["losses_finite"], name
        assert res["mflop_per_word"] > 0, name


@pytest.mark.slow  # the CPU dry run: make test-all
def test_ratios_come_from_the_same_run(dry_run):
    report, _ = dry_run
    training = report["training"]
    assert {res["baseline"] for res in training.values()} == {gpu_check.BASELINE}
    for name, res in training.items():
        base = training[res["baseline"]]
        r, b = res["precisions"]["bf16"], base["precisions"]["bf16"]
        assert r["ratio"] == pytest.approx(r["wps"] / b["wps"])
        assert r["ratio_steady"] == pytest.approx(r["wps_steady"] / b["wps_steady"])
        assert res["ceiling"] == pytest.approx(base["mflop_per_word"] / res["mflop_per_word"])
        assert r["efficiency"] == pytest.approx(r["ratio"] / res["ceiling"])
    han = training["han_transformer"]["precisions"]["bf16"]
    assert han["targets_met"]["han_ratio"] == (han["ratio"] >= gpu_check.TARGET_HAN)
    rnn = training["rnnsearch"]["precisions"]["bf16"]["wps"]
    for name in ("hrnn_context", "isg_rnnsearch"):
        r = training[name]["precisions"]["bf16"]
        assert r["ratio_vs_rnnsearch"] == pytest.approx(r["wps"] / rnn)
    gen = report["generation"]
    sentence, document = gen["runs"].values()
    assert gen["ratio"] == pytest.approx(document["tokens_per_s"] / sentence["tokens_per_s"])
    assert sentence["sentences"] == document["sentences"] > 0
    ct2 = report["ctranslate2"]
    if "skipped" not in ct2:
        for name in ("transformer", "concat_transformer"):
            assert ct2[name]["ratio"] == pytest.approx(
                ct2[name]["ctranslate2"]["tokens_per_s"] / ct2[name]["fairseq"]["tokens_per_s"])


@pytest.mark.slow  # the CPU dry run: make test-all
def test_markdown_has_a_row_per_architecture(dry_run):
    report, md = dry_run
    assert md.startswith("# GPU check (dry run")
    assert f"torch {report['device']['torch']}" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    for name in gpu_check.ARCHITECTURES:
        assert any(ln.startswith(f"| {name} | ") and " bf16 | " in ln for ln in rows), name
    for target in report["targets"].values():
        assert target in md


def test_a_run_that_would_pass_its_deadline_is_skipped_and_listed():
    clock = gpu_check.Clock({"training": 1000.0})
    assert clock.fits("training", "a")
    clock.longest["training"] = 2000.0
    assert not clock.fits("training", "b")
    assert len(clock.skipped) == 1 and clock.skipped[0].startswith("training: b")


def test_training_log_parsing():
    inner = [("train_inner", f"epoch 001:      {i} / 9 loss={loss}, nll_loss=1, ppl=2, wps={wps}, ups=1, wpb={wpb}, "
                             f"bsz=3, num_updates={i}, lr=0.001")
             for i, (loss, wps, wpb) in enumerate([(7.5, 0, 100), (7.0, 1000, 200), (6.5, 500, 100)], 1)]
    epoch = [("train", "epoch 001 | loss 7.0 | nll_loss 1 | wps 640.5 | ups 1 | wpb 133 | num_updates 3")]
    r = gpu_check.parse_training(inner + epoch, warmup=1)
    assert r["wps"] == 640.5 and r["losses"] == [7.5, 7.0, 6.5, 7.0] and r["losses_finite"]
    assert r["wps_steady"] == pytest.approx(300 / (200 / 1000 + 100 / 500))
    nan = [("train_inner", "epoch 001:      1 / 9 loss=nan, wps=10, wpb=5, num_updates=1")]
    assert not gpu_check.parse_training(nan + epoch, warmup=0)["losses_finite"]
    assert not gpu_check.parse_training([], warmup=0)["losses_finite"]  # nothing logged: not "all finite"
