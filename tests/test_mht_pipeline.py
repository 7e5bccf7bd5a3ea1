"""examples/mht/pipeline.sh end to end (``make test-all``) on the toy data at a tiny size: the two sentence-level
models, the drafts of every split, the Multi-Hop Transformer initialised from both, the test
set translated; a second run reuses every step."""
import os
import shutil

import pytest

from conftest import REPO, run, venv_env

TINY = dict(LAYERS="1", DIM="32", FFN="64", HEADS="2", MAX_UPDATE="30", MHT_MAX_UPDATE="30", WARMUP="10",
            LR="3e-3", MAX_TOKENS="600", BEAM="2", PATIENCE="0", DEVICE_ARGS="--cpu",
            EXTRA_TRAIN_ARGS="--num-workers 0 --seed 1")


def _pipeline(data, work, **extra):
    import subprocess

    env = dict(venv_env(), DATA_BIN=str(data), WORK=str(work), **TINY, **extra)
    p = subprocess.run(["bash", str(REPO / "examples" / "mht" / "pipeline.sh")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


@pytest.mark.slow  # about a minute: make test-all (its parts are tested in make test)
def test_pipeline_end_to_end_and_restart(toy_bin, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(toy_bin, data)
    work = tmp_path / "work"
    out = _pipeline(data, work)
    for name in ("fwd", "bwd", "mht"):
        assert (work / name / "checkpoint_best.pt").exists(), out
    for split in ("train", "valid", "test"):
        for ext in ("bin", "idx"):
            assert (data / f"{split}.src-tgt.draft.{ext}").exists()
    log = (work / "mht.log").read_text()
    assert "source-side sentence encoder: initialised from the encoder of" in log
    assert "target-side sentence encoder: initialised from the encoder of" in log
    # every test sentence translated once
    n = sum(int(line.split("\t")[1]) for line in (data / "test.src-tgt.docs").read_text().splitlines())
    ids = sorted(int(line.split("\t")[0][2:]) for line in (work / "test.out").read_text().splitlines()
                 if line.startswith("H-"))
    assert ids == list(range(n))
    # a second run reuses the four steps
    again = _pipeline(data, work)
    assert again.count("reusing") == 4, again
    # the bwd model reads the target side as its source
    bwd = run(["python", "-c", "import torch,sys; s=torch.load(sys.argv[1], weights_only=False); "
               "print(s['cfg']['task']['source_lang'], s['cfg']['task']['target_lang'])",
               work / "bwd" / "checkpoint_best.pt"]).stdout.split()
    assert bwd == ["tgt", "src"]
    assert os.path.getsize(work / "test.out") > 0
