"""Checkpoint averaging (fairseq_docctx.inference.average, docctx-average; the recipes'
AVERAGE=N): on real checkpoints of a tiny training that keeps its last epoch checkpoints as
the recipes do (--keep-last-epochs N), the average is the mean of every weight, and it loads
and translates like any checkpoint."""
import os
import shutil

import pytest
import torch

from conftest import REPO, TINY_MODEL, file_digests, run, run_in_process


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


def _one_line(err):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("WARNING", "INFO"))]
    assert len(lines) == 1 and lines[0].startswith("docctx-average: error: ") and "Traceback" not in err, err
    return lines[0][len("docctx-average: error: "):]


def test_an_output_that_is_an_input_is_refused(epoch_run, tmp_path, capsys):
    """``-o`` one of the checkpoints averaged, under its name, another spelling or a link:
    one line, exit 2, the checkpoints as they were, nothing written."""
    from fairseq_docctx.cli.average import cli_main

    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    shutil.copyfile(epoch_run / "checkpoint2.pt", a)
    shutil.copyfile(epoch_run / "checkpoint3.pt", b)
    os.symlink(b, tmp_path / "link.pt")
    before = file_digests(tmp_path)
    for out in (b, f"{tmp_path}/./b.pt", tmp_path / "link.pt"):
        code, _, err = run_in_process(cli_main, ["--inputs", a, b, "-o", out], capsys)
        assert code == 2 and _one_line(err) == (f"-o {out} is the input checkpoint {b}, which the run reads: "
                                                "give another output file"), err
        assert file_digests(tmp_path) == before and len(os.listdir(tmp_path)) == 3


def test_checkpoints_of_different_models_or_settings_are_refused(epoch_run, concat_both_ckpt, tmp_path, capsys):
    """A ``transformer`` and a ``concat_transformer`` of one size have the same weight names and
    shapes; a checkpoint whose task read other context: both refused in one line naming the
    two files, nothing written."""
    from fairseq_docctx.cli.average import cli_main
    from fairseq_docctx.hub import load_checkpoint_state

    sent = epoch_run / "checkpoint3.pt"
    assert {k: v.shape for k, v in load_checkpoint_state(str(sent))["model"].items()} == \
        {k: v.shape for k, v in load_checkpoint_state(str(concat_both_ckpt))["model"].items()}
    out = tmp_path / "avg.pt"
    code, _, err = run_in_process(cli_main, ["--inputs", sent, concat_both_ckpt, "-o", out], capsys)
    assert code == 2 and _one_line(err) == (f"{concat_both_ckpt} is a concat_transformer, {sent} a transformer: "
                                            "checkpoints of different models are not averaged"), err
    state = load_checkpoint_state(str(sent))
    state["cfg"]["task"].context_size = 2
    other = tmp_path / "context2.pt"
    torch.save(state, other)
    code, _, err = run_in_process(cli_main, ["--inputs", sent, other, "-o", out], capsys)
    assert code == 2 and _one_line(err) == (f"{other} was trained with --context-size 2, {sent} with 0: checkpoints "
                                            "of differently configured models are not averaged"), err
    assert sorted(os.listdir(tmp_path)) == ["context2.pt"]
