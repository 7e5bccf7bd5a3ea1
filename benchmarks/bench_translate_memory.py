"""Peak memory of ``docctx-translate`` against the input's length.

Trains (or, with ``--path``/``--data``, reuses) a tiny ``concat_transformer`` (K=2, source
and target context; 32-dim, one layer) on random toy documents, then translates inputs of N
random toy sentences in D documents of N/D sentences each (``--layouts N:D,...``; default 200
and 20,000 sentences in 1 document and in 1,000, 200 sentences in 200 documents standing for
the 1,000 they cannot fill) with beam 4 on the CPU, blank-line separated, and prints, for each,
the child's maximum resident set size (``os.wait4``'s rusage of that process alone), its time
and the ratio to the first input's. Document-order inference needs the last K translations of
each open document, and the input is read a chunk of documents at a time, so the peak should
stay flat in both the number of sentences and the number of documents. ``--code DIR``: run
another checkout's ``fairseq_docctx`` (e.g. an older commit, for a comparison).

    python -m benchmarks.bench_translate_memory --workdir /tmp/bench-mem   # from the repository root
"""
import argparse
import os
import random
import subprocess
import sys
import time

from benchmarks.toy import TINY_MODEL, prepare_documents, run, write_toy_documents

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_model(workdir):
    """A checkpoint and data directory: the toy documents of the tests, prepared, and a
    concat_transformer trained on them for 6 epochs."""
    data = os.path.join(workdir, "bin")
    if not os.path.exists(os.path.join(data, "dict.src.txt")):
        prepare_documents(write_toy_documents(os.path.join(workdir, "raw")), data)
    save = os.path.join(workdir, "model")
    ckpt = os.path.join(save, "checkpoint_last.pt")
    if not os.path.exists(ckpt):
        run(["fairseq-train", data, "--user-dir", os.path.join(REPO, "fairseq_docctx"),
             "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
             "--arch", "concat_transformer", *TINY_MODEL, "--max-tokens", "600",
             "--max-epoch", "6", "--no-epoch-checkpoints", "--save-dir", save])
    return ckpt, data


def write_document(path, n, seed=0, documents=1):
    """``n`` random toy sentences (the toy vocabulary w0..w29) in ``documents`` documents of
    ``n // documents`` sentences (the first ``n % documents`` one more), blank-line separated."""
    rng = random.Random(seed)
    sizes = [n // documents + (1 if d < n % documents else 0) for d in range(documents)]
    with open(path, "w") as f:
        for d, size in enumerate(sizes):
            if d:
                f.write("\n")
            for _ in range(size):
                f.write(" ".join(f"w{rng.randrange(30)}" for _ in range(rng.randint(2, 10))) + "\n")


def measure(ckpt, data, path, beam, code=REPO):
    """(max RSS in MB, seconds) of one docctx-translate run on ``path`` (``code``: the
    checkout whose fairseq_docctx runs)."""
    env = {**os.environ, "PYTHONPATH": code + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [os.path.join(os.path.dirname(sys.executable), "docctx-translate"), path, "--path", ckpt,
           "--data", data, "--cpu", "--quiet", "--beam", str(beam), "--input-format", "blank",
           "-o", path + ".out"]
    start = time.time()
    p = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.time() - start
    err = p.stderr.read().decode()
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"docctx-translate failed on {path}:\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, elapsed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--path", help="checkpoint to reuse (with --data)")
    p.add_argument("--data", help="its data directory")
    p.add_argument("--layouts", default="200:1,200:200,20000:1,20000:1000",
                   help="comma-separated SENTENCES:DOCUMENTS of the inputs (default %(default)s)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--code", default=REPO, help="the checkout whose fairseq_docctx runs (default: this one)")
    args = p.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    ckpt, data = (args.path, args.data) if args.path else tiny_model(args.workdir)
    rows = []
    for layout in args.layouts.split(","):
        n, docs = (int(x) for x in layout.split(":"))
        path = os.path.join(args.workdir, f"in{n}x{docs}.txt")
        write_document(path, n, documents=docs)
        rss, secs = measure(ckpt, data, path, args.beam, os.path.abspath(args.code))
        rows.append((n, docs, rss, secs))
        print(f"{n:>7} sentences in {docs:>5} documents: max RSS {rss:7.1f} MB, {secs:7.1f} s "
              f"(x{rss / rows[0][2]:.3f} of {rows[0][0]}:{rows[0][1]})", flush=True)


if __name__ == "__main__":
    main()
