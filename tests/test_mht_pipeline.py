"""examples/mht/pipeline.sh end to end (``make test-all``) on the toy data at a tiny size: the two sentence-level
models, the drafts of every split, the Multi-Hop Transformer initialised from both, the test
set translated; a second run reuses every step."""
import os
import shutil

import pytest

from conftest import REPO, run, venv_env
from stub_tools import stub_tools  # noqa: F401  (a fixture)

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


@pytest.mark.slow  # ~13 s: make test-all
def test_pipeline_learning_rate_is_the_recipes_and_bleu_is_of_post_processed_text(tmp_path, stub_tools):
    """One learning rate for MHT: the pipeline's default is the recipes' LR (Vaswani et al.'s
    schedule; examples/lib/models.sh); on data with a SentencePiece model the test BLEU is
    sacreBLEU of the post-processed text (--post-process sentencepiece), not of the pieces."""
    import json
    import re
    import subprocess

    env, log = stub_tools
    data = tmp_path / "bin"
    data.mkdir()
    (data / "spm.model").write_text("stub")
    (data / "docctx.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de",
                                                  "spm": {"model": "spm.model"}}))
    p = subprocess.run(["bash", str(REPO / "examples" / "mht" / "pipeline.sh")], capture_output=True, text=True,
                       env=dict(env, DATA_BIN=str(data), WORK=str(tmp_path / "work"), DEVICE_ARGS="--cpu"),
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    calls = log.read_text().splitlines()
    trains = [c for c in calls if c.startswith("fairseq-train ")]
    assert len(trains) == 3, calls
    models = subprocess.run(["bash", "-c", f"set -eu; source {REPO}/examples/lib/recipe.sh; recipe_init t; "
                             f"source {REPO}/examples/lib/models.sh; model_settings; echo LR=$LR"],
                            env=dict(env, WORK=str(tmp_path / "r"), DEVICE="cpu"), capture_output=True, text=True)
    lr = re.search(r"^LR=(\S+)$", models.stdout, re.M).group(1)
    assert all(re.findall(r"--lr (\S+)", t) == [lr] for t in trains), (lr, trains)
    gen = next(c for c in calls if c.startswith("fairseq-generate "))
    assert "--post-process sentencepiece " in gen and "--scoring sacrebleu " in gen, gen
    # without a SentencePiece model the text is scored as it is
    (data / "docctx.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de", "spm": None}))
    log.unlink()
    p = subprocess.run(["bash", str(REPO / "examples" / "mht" / "pipeline.sh")], capture_output=True, text=True,
                       env=dict(env, DATA_BIN=str(data), WORK=str(tmp_path / "work"), DEVICE_ARGS="--cpu", FRESH="1"),
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    gen = next(c for c in log.read_text().splitlines() if c.startswith("fairseq-generate "))
    assert "--post-process" not in gen, gen
