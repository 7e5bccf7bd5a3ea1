"""Checkpoint averaging (fairseq_docctx.inference.average, docctx-average; the recipes'
AVERAGE=N): on real checkpoints of a tiny training that keeps its last epoch checkpoints as
the recipes do (--keep-last-epochs N), the average is the mean of every weight, and it loads
and translates like any checkpoint."""
import pytest
import torch

from conftest import REPO, TINY_MODEL, run, run_in_process


@pytest.fixture(scope="module")
def epoch_run(toy_bin, tmp_path_factory):
    """A tiny transformer trained for 3 epochs keeping its last 2 epoch checkpoints."""
    save = tmp_path_factory.mktemp("average")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--context-size", "0", "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-epoch", "3",
         "--keep-last-epochs", "2", "--save-dir", save])
    return save


def test_the_last_epoch_checkpoints_are_kept_and_averaged_to_the_mean(epoch_run, tmp_path):
    from fairseq_docctx.hub import CheckpointError, load_checkpoint_state
    from fairseq_docctx.inference.average import last_epoch_checkpoints, write_average

    assert not (epoch_run / "checkpoint1.pt").exists()  # --keep-last-epochs 2 removed it
    paths = last_epoch_checkpoints(str(epoch_run), 2)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["checkpoint2.pt", "checkpoint3.pt"]
    out = tmp_path / "avg.pt"
    write_average(paths, str(out))
    a, b = (load_checkpoint_state(p)["model"] for p in paths)
    avg = load_checkpoint_state(str(out))
    assert set(avg["model"]) == set(a)
    moved = 0
    for k, v in avg["model"].items():
        if v.is_floating_point():
            assert torch.allclose(v, (a[k].double() + b[k].double()).div(2).to(v.dtype), atol=1e-7), k
            moved += not torch.equal(a[k], b[k])
        else:
            assert torch.equal(v, a[k])
    assert moved > 0  # the two epochs differ: the mean is not a copy of one
    assert "last_optimizer_state" not in avg and avg["averaged_checkpoints"][-1].endswith("checkpoint3.pt")
    with pytest.raises(CheckpointError, match=r"2 epoch checkpoint\(s\) \(checkpoint2.pt, checkpoint3.pt\), 3 needed"):
        last_epoch_checkpoints(str(epoch_run), 3)


@pytest.mark.slow  # ~8 s: make test-all
def test_docctx_average_command_and_the_averaged_checkpoint_translates(epoch_run, toy_bin, tmp_path, capsys):
    from fairseq_docctx.cli.average import cli_main

    out = tmp_path / "checkpoint_avg2.pt"
    # in process (python -m fairseq_docctx.cli.average: what docctx-average runs)
    rc, _, err = run_in_process(cli_main, ["--dir", epoch_run, "--last", "2", "-o", out], capsys)
    assert rc == 0 and f"{out}: the mean of 2 checkpoints" in err, err
    gen = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
               "--path", out, "--gen-subset", "valid", "--beam", "2", "--max-tokens", "2000", "--cpu",
               "--num-workers", "0"])
    assert sum(ln.startswith("H-") for ln in gen.stdout.splitlines()) > 0
    rc, _, err = run_in_process(cli_main, ["--dir", epoch_run, "--last", "5", "-o", out], capsys)
    assert rc == 2 and "docctx-average: error:" in err and "5 needed" in err, err


def test_checkpoints_of_different_models_are_not_averaged(epoch_run, tmp_path):
    from fairseq_docctx.hub import CheckpointError, load_checkpoint_state
    from fairseq_docctx.inference.average import average_checkpoints

    state = load_checkpoint_state(str(epoch_run / "checkpoint3.pt"))
    name = next(k for k, v in state["model"].items() if v.dim() == 2)
    state["model"][name] = state["model"][name][:, :1].clone()
    other = tmp_path / "other.pt"
    torch.save(state, other)
    with pytest.raises(CheckpointError, match=rf"other.pt: weight {name} has shape"):
        average_checkpoints([str(epoch_run / "checkpoint2.pt"), str(other)])
