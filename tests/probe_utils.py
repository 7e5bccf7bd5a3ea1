"""Helpers for the architecture probe tests: binarize the probe, train tiny models with
fairseq-train, decode with fairseq-generate and score with the probe scorer.

Everything runs the fairseq console scripts as subprocesses (from the virtualenv next to the
running Python), so a test exercises exactly what a user types.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "fairseq_docctx")
BIN = os.path.dirname(sys.executable)

# Model size for transformer-family archs (rnn archs pass their own model_args).
TINY_TRANSFORMER = [
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--share-all-embeddings",
]
# Optimisation / bookkeeping shared by every probe run (validated in docs/probe.md).
TRAIN_COMMON = [
    "--cpu", "--num-workers", "0",
    "--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
    "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "2000", "--required-batch-size-multiple", "1",
    "--disable-validation", "--no-epoch-checkpoints",
    "--log-format", "simple", "--log-interval", "50",
]
DEFAULT_MAX_UPDATE = 600


def _tool(name: str) -> str:
    path = os.path.join(BIN, name)
    return path if os.path.exists(path) else (shutil.which(name) or name)


def _forked(cmd: List[str], env: Dict[str, str]):
    """tests/cli_fork.py when the test session runs ``cmd`` through its fork server (never for
    a benchmark: the module is only enabled by the tests' conftest.py), else None."""
    cli_fork = sys.modules.get("cli_fork")
    return cli_fork if cli_fork is not None and cli_fork.entry_point(cmd, env) else None


def _run(cmd: List[str], log_path: str, cwd: Optional[str] = None) -> str:
    """Run a command, tee its output into log_path, raise with the log tail on failure."""
    # One intra-op thread: on a busy 2-core machine two threads per process oversubscribe the
    # CPU and a tiny model trains 5-10x slower (measured 0.8 vs 6.5 updates/s); when the
    # machine is idle one thread costs only ~25%. Override with DOCCTX_PROBE_THREADS.
    threads = os.environ.get("DOCCTX_PROBE_THREADS", "1")
    # idle OpenMP threads sleep instead of spinning: the suite runs these trainings beside
    # other tests, and spinning threads of one process slow the others several-fold
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=threads,
               MKL_NUM_THREADS=threads, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    with open(log_path, "w", encoding="utf-8") as f:  # streamed, so a long run can be watched
        f.write(" ".join(cmd) + "\n")
        f.flush()
        fork = _forked(cmd, env)
        if fork is None:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if fork is not None:
        proc = subprocess.CompletedProcess(cmd, fork.run(cmd, env, log_path, cwd=cwd))
    with open(log_path, encoding="utf-8") as f:
        out = f.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed (rc {proc.returncode}), log {log_path}:\n"
                           + out[-4000:])
    return out


def num_sentences(data_bin: str, subset: str = "test", src: str = "src", tgt: str = "tgt") -> int:
    """Number of sentences of a binarized (mmap) split, read from its .idx header."""
    with open(os.path.join(data_bin, f"{subset}.{src}-{tgt}.{src}.idx"), "rb") as f:
        head = f.read(26)
    if head[:9] != b"MMIDIDX\x00\x00":
        raise ValueError("not an mmap index file")
    return struct.unpack("<Q", head[18:26])[0]


def binarize(text_dir: str, data_bin: str, splits: Sequence[str] = ("train", "valid", "test"),
             src: str = "src", tgt: str = "tgt", extra_args: Sequence[str] = ()) -> str:
    """fairseq-preprocess {split}.{src,tgt} with a joined dictionary, plus the document index
    (``{split}.{src}-{tgt}.docs``) from ``{split}.docids`` when those files exist.
    ``data_bin`` must not hold a binarized corpus yet (fairseq-preprocess refuses)."""
    os.makedirs(data_bin, exist_ok=True)
    cmd = [_tool("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
           "--joined-dictionary", "--destdir", data_bin, "--workers", "1"]
    for split in splits:  # fairseq-preprocess knows these three split names
        if split not in ("train", "valid", "test"):
            raise ValueError(f"split {split!r}: only train, valid and test are supported")
        cmd += [f"--{split}pref", os.path.join(text_dir, split)]
    _run(cmd + list(extra_args), os.path.join(data_bin, "preprocess.log"))
    for split in splits:
        ids = os.path.join(text_dir, f"{split}.docids")
        if os.path.exists(ids):
            from fairseq_docctx.data.doc_index import DocIndex, doc_index_path
            with open(ids, encoding="utf-8") as f:
                index = DocIndex.from_sentence_doc_ids([line.rstrip("\n") for line in f])
            index.write(doc_index_path(data_bin, split, src, tgt))
    return data_bin


def make_probe_data(workdir: str, train_docs: int = 2000, valid_docs: int = 50,
                    test_docs: int = 200, seed: int = 1, **probe_kwargs) -> Dict[str, str]:
    """Generate the probe into ``workdir/text`` and binarize it into ``workdir/data-bin``
    (joined dictionary + document index). Returns the paths: text, data_bin, annotations
    (test split)."""
    from fairseq_docctx.probe import generate_probe
    text, data_bin = os.path.join(workdir, "text"), os.path.join(workdir, "data-bin")
    generate_probe(text, {"train": train_docs, "valid": valid_docs, "test": test_docs},
                   seed=seed, **probe_kwargs)
    binarize(text, data_bin)
    return {"text": text, "data_bin": data_bin,
            "annotations": os.path.join(text, "test.probe.jsonl")}


def concat_context(text_dir: str, out_dir: str, k: int = 2, sep: str = "<sep>",
                   splits: Sequence[str] = ("train", "valid", "test")) -> str:
    """Write a sentence-level copy of the corpus whose source lines carry the k previous
    source sentences of the same document (``prev2 <sep> prev1 <sep> cur``): the plain
    ``translation`` task on it emulates a source-context concatenation model."""
    os.makedirs(out_dir, exist_ok=True)
    for split in splits:
        with open(os.path.join(text_dir, f"{split}.src"), encoding="utf-8") as f:
            src = f.read().splitlines()
        with open(os.path.join(text_dir, f"{split}.docids"), encoding="utf-8") as f:
            docs = f.read().splitlines()
        with open(os.path.join(out_dir, f"{split}.src"), "w", encoding="utf-8") as f:
            for i, cur in enumerate(src):
                ctx = [src[j] for j in range(max(0, i - k), i) if docs[j] == docs[i]]
                f.write(" ".join(c + f" {sep}" for c in ctx) + (" " if ctx else "") + cur + "\n")
        for ext in ("tgt", "docids", "probe.jsonl"):
            shutil.copyfile(os.path.join(text_dir, f"{split}.{ext}"),
                            os.path.join(out_dir, f"{split}.{ext}"))
    return out_dir


def train(data_bin: str, arch: str, workdir: str, extra_args: Sequence[str] = (),
          max_update: int = DEFAULT_MAX_UPDATE, seed: int = 1, task: str = "translation",
          model_args: Sequence[str] = tuple(TINY_TRANSFORMER),
          user_dir: Optional[str] = USER_DIR) -> Dict[str, object]:
    """Train a tiny model with fairseq-train on CPU; later arguments override earlier ones
    (argparse keeps the last), so ``extra_args`` can change any default.

    Use a fresh ``workdir``: fairseq resumes from a checkpoint_last.pt it finds there.
    Returns {"checkpoint": path to checkpoint_last.pt, "seconds": wall time, "log": path}.
    """
    os.makedirs(workdir, exist_ok=True)
    cmd = [_tool("fairseq-train"), data_bin, "--task", task, "--arch", arch,
           "--save-dir", workdir, "--max-update", str(max_update), "--seed", str(seed)]
    if user_dir:
        cmd += ["--user-dir", user_dir]
    cmd += list(TRAIN_COMMON) + list(model_args) + list(extra_args)
    log = os.path.join(workdir, "train.log")
    t0 = time.time()
    _run(cmd, log)
    ckpt = os.path.join(workdir, "checkpoint_last.pt")
    if not os.path.exists(ckpt):
        raise RuntimeError(f"no checkpoint written, see {log}")
    return {"checkpoint": ckpt, "seconds": time.time() - t0, "log": log}


def export_transformers(ckpt: str, data_bin: str, outdir: str) -> str:
    """``docctx-export transformers CKPT OUTDIR --data DATA_BIN`` (the console script); the
    folder written."""
    _run([_tool("docctx-export"), "transformers", ckpt, outdir, "--data", data_bin],
         outdir.rstrip("/") + ".log")
    return outdir


def train_losses(log_path: str) -> List[float]:
    """The ``loss=`` of each ``train_inner`` line of a fairseq-train log (one per
    ``--log-interval`` updates), in order."""
    with open(log_path, encoding="utf-8") as f:
        return [float(x) for x in re.findall(r"\| train_inner \|.*? loss=([\d.]+),", f.read())]


def generate(data_bin: str, ckpt: str, subset: str = "test", beam: int = 1,
             batch_size: int = 64, extra_args: Sequence[str] = (), task: str = "translation",
             user_dir: Optional[str] = USER_DIR, log_path: Optional[str] = None) -> List[str]:
    """Decode a subset with fairseq-generate; return hypotheses in corpus order.

    Raises if any sentence of the subset has no ``H-`` line (fairseq drops the last batch
    when it is not a multiple of --required-batch-size-multiple, so 1 is always passed).
    Without ``log_path`` each call logs to a file of its own beside the checkpoint: the probe
    fixtures decode one checkpoint with different arguments in two threads at once, and a
    shared log would be truncated by the second run while the first reads it back.
    """
    cmd = [_tool("fairseq-generate"), data_bin, "--task", task, "--path", ckpt,
           "--gen-subset", subset, "--beam", str(beam), "--batch-size", str(batch_size),
           "--required-batch-size-multiple", "1", "--cpu", "--num-workers", "0"]
    if user_dir:
        cmd += ["--user-dir", user_dir]
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix=f"generate-{subset}-", suffix=".log",
                                        dir=os.path.dirname(ckpt))
        os.close(fd)
    out = _run(cmd + list(extra_args), log_path)
    hyps: Dict[int, str] = {}
    for line in out.splitlines():
        m = re.match(r"H-(\d+)\t[^\t]*\t?(.*)$", line)
        if m:
            hyps.setdefault(int(m.group(1)), m.group(2))
    try:
        n = num_sentences(data_bin, subset)
    except (OSError, ValueError):  # other dataset formats: trust the highest id
        n = max(hyps) + 1 if hyps else 0
    missing = [i for i in range(n) if i not in hyps]
    if missing or len(hyps) != n:
        raise RuntimeError(f"fairseq-generate returned {len(hyps)} of {n} sentences "
                           f"(missing ids {missing[:10]})")
    return [hyps[i] for i in range(n)]


def probe_accuracy(data_bin: str, ckpt: str, annotations: str, subset: str = "test",
                   phenomenon: Optional[str] = None, **generate_kwargs):
    """Decode ``subset`` and score it against ``annotations`` ({subset}.probe.jsonl).

    Returns the full score dict, or, with ``phenomenon`` (e.g. "anaphora"), that phenomenon's
    accuracy as a float.
    """
    from fairseq_docctx.probe import score_probe
    res = score_probe(generate(data_bin, ckpt, subset=subset, **generate_kwargs), annotations)
    return res["by_phenomenon"][phenomenon]["accuracy"] if phenomenon else res
