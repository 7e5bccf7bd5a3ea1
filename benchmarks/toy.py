"""Toy parallel documents and a tiny Transformer's training settings: real fairseq data and a
model trained in seconds on a CPU, for the benchmarks that measure how something scales (not
how well a model translates) and for the tests."""
import os
import random
import subprocess
import sys
from pathlib import Path

#: fairseq-train options of a 1+1-layer, 32-dim Transformer with shared embeddings (CPU)
TINY_MODEL = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
    "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim",
    "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--optimizer", "adam", "--lr", "3e-3", "--cpu", "--seed", "1",
    "--log-format", "simple", "--num-workers", "0",
]


def write_split(out_dir, split, src, tgt, docids):
    """``{split}.src``, ``.tgt`` and ``.docids`` (one line per sentence) in ``out_dir``."""
    for ext, lines in (("src", src), ("tgt", tgt), ("docids", docids)):
        (Path(out_dir) / f"{split}.{ext}").write_text("\n".join(lines) + "\n")


def write_toy_documents(out_dir, seed=0, docs=(60, 8, 8), doc_sentences=(1, 9), words=30, lengths=(2, 10),
                        reverse=False):
    """Small random parallel documents in the docids format (src -> tgt = upper-cased
    source words; with ``reverse``, in reverse order). ``docs``: documents per split,
    ``doc_sentences``: (min, max) sentences of a document, ``words``: vocabulary size,
    ``lengths``: (min, max) words."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(words)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "valid", "test"), docs):
        src, tgt, ids = [], [], []
        for d in range(n):
            for _ in range(rng.randint(*doc_sentences)):
                s = [rng.choice(vocab) for _ in range(rng.randint(*lengths))]
                src.append(" ".join(s))
                tgt.append(" ".join(w.upper() for w in (s[::-1] if reverse else s)))
                ids.append(f"{split}-doc{d}")
        write_split(out_dir, split, src, tgt, ids)
    return out_dir


def prepare_command(raw, dest):
    """The docctx-prepare command that binarizes ``raw/{train,valid,test}.{src,tgt,docids}``
    (joined dictionary) into ``dest``."""
    raw = Path(raw)
    return ["docctx-prepare", "-s", "src", "-t", "tgt", "--trainpref", raw / "train",
            "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", dest,
            "--joined-dictionary", "--workers", "1"]


def run(cmd):
    """Run a command whose first word is a console script of the running Python's
    environment; on failure, exit with the command and the tail of its output."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def prepare_documents(raw, dest):
    """``raw`` through docctx-prepare (:func:`prepare_command`) into ``dest``."""
    run(prepare_command(raw, dest))
    return dest
