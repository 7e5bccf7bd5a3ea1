import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))
pytest_plugins = ["probe_fixtures"]


def pytest_collection_modifyitems(session, config, items):
    """The tests that read the context probe's trained models run last: the models train in
    the background meanwhile (probe_fixtures.py)."""
    from probe_fixtures import TRAININGS

    uses = [bool(set(getattr(item, "fixturenames", ())) & (set(TRAININGS) | {"sentence_acc"})) for item in items]
    items[:] = [i for i, u in zip(items, uses) if not u] + [i for i, u in zip(items, uses) if u]


def venv_env():
    """Environment for subprocesses: the interpreter's bin dir first on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "2")
    # idle OpenMP threads sleep instead of spinning (the probe's models train beside the tests)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_in_process(cli_main, argv, capsys):
    """A command's ``cli_main`` in this process: (exit code, stdout, stderr)."""
    try:
        cli_main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared corpora at {SHARED_DATA}")
    return SHARED_DATA


def run(cmd, cwd=None, timeout=900, check=True):
    """Run a command (list) with the venv's scripts on PATH; fail with its output."""
    import subprocess

    p = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=venv_env(), capture_output=True, text=True,
        timeout=timeout,
    )
    if check and p.returncode != 0:
        raise AssertionError(
            f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-6000:]}"
        )
    return p


def write_toy_documents(out_dir, seed=0, docs=(60, 8, 8)):
    """Small random parallel documents in the docids format (src -> tgt = upper-cased
    source words), for task and batching tests that need real fairseq data quickly."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "valid", "test"), docs):
        src, tgt, ids = [], [], []
        for d in range(n):
            for _ in range(rng.randint(1, 9)):
                s = [rng.choice(words) for _ in range(rng.randint(2, 10))]
                src.append(" ".join(s))
                tgt.append(" ".join(w.upper() for w in s))
                ids.append(f"{split}-doc{d}")
        for ext, lines in (("src", src), ("tgt", tgt), ("docids", ids)):
            (out_dir / f"{split}.{ext}").write_text("\n".join(lines) + "\n")
    return out_dir


@pytest.fixture(scope="session")
def toy_bin(tmp_path_factory):
    """Toy documents prepared with docctx-prepare (no SentencePiece)."""
    root = tmp_path_factory.mktemp("toy")
    raw = write_toy_documents(root / "raw")
    dest = root / "bin"
    run(["docctx-prepare", "-s", "src", "-t", "tgt", "--trainpref", raw / "train",
         "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", dest,
         "--joined-dictionary", "--workers", "1"])
    return dest


TINY_MODEL = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
    "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim",
    "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--optimizer", "adam", "--lr", "3e-3", "--cpu", "--seed", "1",
    "--log-format", "simple", "--num-workers", "0",
]


@pytest.fixture(scope="session")
def concat_both_ckpt(toy_bin, tmp_path_factory):
    """concat_transformer with source and target context (K=2) trained on the toy data."""
    save = tmp_path_factory.mktemp("concat_both")
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx",
         "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
         "--arch", "concat_transformer", *TINY_MODEL, "--max-tokens", "600",
         "--max-epoch", "6", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


def toy_dictionary():
    """A fairseq dictionary with <sep> and the words w0..w29 (unit tests of the models)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    d.add_symbol("<sep>")
    for i in range(30):
        d.add_symbol(f"w{i}")
    return d


def toy_document_batch(d, doc_lengths, seed=0, sides="both"):
    """One collated batch of all sentences of random documents with the given lengths
    (K=3 context on ``sides``), sentences of 1-6 random words."""
    import numpy as np
    import torch
    from fairseq.data import LanguagePairDataset

    from fairseq_docctx.data.doc_index import DocIndex
    from fairseq_docctx.data.document_dataset import DocumentPairDataset

    rng = np.random.RandomState(seed)
    n = sum(doc_lengths)
    mk = lambda: [torch.LongTensor(list(rng.randint(5, 35, rng.randint(1, 7))) + [d.eos()]) for _ in range(n)]  # noqa: E731
    src, tgt = mk(), mk()
    pair = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    docs = DocIndex([f"d{i}" for i in range(len(doc_lengths))], np.array(doc_lengths))
    ds = DocumentPairDataset(pair, docs, 3, sides, shuffle=False)
    return ds.collater([ds[i] for i in range(n)])
