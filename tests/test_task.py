"""The document_translation task through fairseq's own command-line tools."""
import re
import socket

import pytest
import torch

from conftest import REPO, run

TINY = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
    "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim",
    "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--cpu", "--seed", "1",
    "--log-format", "simple", "--log-interval", "1", "--num-workers", "0",
]
USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def losses(stdout_and_err):
    """Per-update training losses logged with --log-interval 1."""
    return [float(m) for m in re.findall(r"\| train_inner \|.*? loss=([\d.]+),", stdout_and_err)]


def train(data, save_dir, task_args, arch="transformer", extra=()):
    p = run(["fairseq-train", data, *USER_DIR, *task_args, "--arch", arch, *TINY,
             "--max-tokens", "400", "--save-dir", save_dir, *extra])
    return p.stdout + p.stderr


def test_context_size_zero_trains_exactly_like_translation(toy_bin, tmp_path):
    common = ["--max-update", "12", "--no-save", "--required-batch-size-multiple", "1"]
    ref = losses(train(toy_bin, tmp_path / "a", ["--task", "translation"], extra=common))
    doc = losses(train(toy_bin, tmp_path / "b",
                       ["--task", "document_translation", "--context-size", "0"], extra=common))
    print("translation:", ref, "\ndocument_translation K=0:", doc)
    assert len(ref) == 12
    assert ref == doc


@pytest.fixture(scope="module")
def sentence_ckpt(toy_bin, tmp_path_factory):
    """fairseq's transformer trained through document_translation (context removed)."""
    save = tmp_path_factory.mktemp("sent")
    log = train(toy_bin, save, ["--task", "document_translation", "--context-size", "3"],
                extra=["--max-epoch", "3", "--no-epoch-checkpoints"])
    assert "does not read document context" in log
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def concat_ckpt(toy_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("concat")
    log = train(toy_bin, save, ["--task", "document_translation", "--context-size", "2"],
                arch="concat_transformer", extra=["--max-epoch", "3", "--no-epoch-checkpoints"])
    ls = losses(log)
    assert ls[-1] < ls[0], "training loss did not fall"
    return save / "checkpoint_last.pt"


def n_test_sentences(toy_bin):
    return sum(int(l.split("\t")[1]) for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines())


@pytest.mark.parametrize("model", ["sentence", "concat"])
def test_generate_keeps_every_sentence(model, toy_bin, sentence_ckpt, concat_ckpt):
    """fairseq-generate with its default --required-batch-size-multiple 8 loses nothing."""
    ckpt = sentence_ckpt if model == "sentence" else concat_ckpt
    k = "3" if model == "sentence" else "2"
    p = run(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation",
             "--context-size", k, "--path", ckpt, "--beam", "2", "--max-tokens", "150",
             "--gen-subset", "test", "--scoring", "sacrebleu"])
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", p.stdout, re.M))
    assert ids == list(range(n_test_sentences(toy_bin)))
    assert re.search(r"BLEU = [\d.]+", p.stdout)


def test_checkpoint_loads_with_safe_loading(sentence_ckpt):
    """A fairseq-train checkpoint (argparse.Namespace inside) loads with weights_only=True
    once the plugin is imported, with no environment variable."""
    import fairseq_docctx  # noqa: F401  (registers the allow-list)

    state = torch.load(sentence_ckpt, map_location="cpu", weights_only=True)
    assert "model" in state and state["cfg"] is not None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_distributed_training_two_cpu_ranks_agree(toy_bin, tmp_path):
    out = tmp_path / "ranks"
    out.mkdir()
    run(["torchrun", "--nproc_per_node", "2", "--master_port", str(_free_port()),
         REPO / "tests" / "dist_train.py", out, toy_bin, *USER_DIR,
         "--task", "document_translation", "--context-size", "2", "--arch",
         "concat_transformer", *TINY, "--max-tokens", "400", "--max-update", "8",
         "--no-save"], timeout=600)
    r0 = torch.load(out / "rank0.pt", weights_only=True)
    r1 = torch.load(out / "rank1.pt", weights_only=True)
    assert r0["num_updates"] == r1["num_updates"] == 8
    assert r0["state"].keys() == r1["state"].keys()
    for k in r0["state"]:
        torch.testing.assert_close(r0["state"][k], r1["state"][k], rtol=0, atol=0)


@pytest.mark.slow
def test_distributed_training_validates_a_target_context_model(toy_bin, tmp_path):
    """Two gloo ranks train a model with target context and validate it: each rank scores its
    share of the validation batches (the references as target context), and the logged loss
    is the one fairseq-validate gives in one process on the checkpoint saved there."""
    out, save = tmp_path / "ranks", tmp_path / "ckpt"
    out.mkdir()
    both = ["--task", "document_translation", "--context-size", "2", "--context-sides", "both"]
    p = run(["torchrun", "--nproc_per_node", "2", "--master_port", str(_free_port()),
             REPO / "tests" / "dist_train.py", out, toy_bin, *USER_DIR, *both, "--arch",
             "concat_transformer", *TINY, "--max-tokens", "400", "--max-update", "8",
             "--validate-interval-updates", "4", "--save-interval-updates", "4", "--no-epoch-checkpoints",
             "--save-dir", save], timeout=600)
    logged = re.findall(r"valid on 'valid' subset \| loss ([\d.]+) .*num_updates (\d+)", p.stdout + p.stderr)
    assert ("8" in [n for _, n in logged]), (p.stdout + p.stderr)[-3000:]
    loss = [l for l, n in logged if n == "8"][-1]
    ckpt, = save.glob("checkpoint_*_8.pt")  # checkpoint_EPOCH_UPDATES.pt of update 8
    v = run(["fairseq-validate", toy_bin, *USER_DIR, *both, "--path", ckpt,
             "--max-tokens", "400", "--cpu"])
    assert re.search(r"valid on 'valid' subset \| loss ([\d.]+)", v.stdout + v.stderr).group(1) == loss


@pytest.mark.slow  # make test: docctx-translate's same messages (tests/test_translate_cli.py)
def test_generate_with_other_dictionaries_says_whether_their_size_differs(toy_bin, concat_both_ckpt, tmp_path):
    """docctx-generate (fairseq's model loading) with a data directory whose dictionaries are
    not the model's: the message gives both sizes where they differ, "same size, other
    words" only where they are the same size."""
    import shutil

    from fairseq.data import Dictionary

    n = len(Dictionary.load(str(toy_bin / "dict.src.txt")))  # joined: both sides the same
    bigger, other = tmp_path / "bigger", tmp_path / "other"
    shutil.copytree(toy_bin, bigger)
    shutil.copytree(toy_bin, other)
    for lang in ("src", "tgt"):
        with open(bigger / f"dict.{lang}.txt", "a") as f:
            f.writelines(f"zz{i} 1\n" for i in range(21))
        p = other / f"dict.{lang}.txt"
        p.write_text(p.read_text().replace("w1 ", "x1 ").replace("W1 ", "X1 "))

    def generate(data):
        p = run(["docctx-generate", "--", data, *USER_DIR, "--task", "document_translation", "--path",
                 concat_both_ckpt, "--gen-subset", "test", "--cpu"], check=False)
        assert p.returncode != 0
        return p.stdout + p.stderr

    out = generate(bigger)
    assert (f"the model was trained with a {n:,}-type source dictionary, {bigger} has {n + 21:,}: "
            "give the data directory it was trained on") in out, out[-2000:]
    assert "same size" not in out
    assert f"than {other}'s (same size, other words)" in generate(other)
