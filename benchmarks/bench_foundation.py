#!/usr/bin/env python
"""Foundation benchmark (``make bench``): what document context costs, measured in one run on
one data set (the 93 TED dev talks of ../shared/data/maruf-ende/IWSLT2017, 8,967 sentence
pairs, joint SentencePiece), all under ``bench-work/`` (git-ignored).

(a) Training speed of fairseq's ``transformer`` on fairseq's ``translation`` task and on
    ``document_translation --context-size 0``: same data, seed, model and number of updates;
    runs alternate A B A B... to spread the machine's noise over both. The task wrapper must
    cost nothing: target ratio >= 0.95.
(b) Sentence encodings per batch for K=3 under document-run batching (--max-tokens 4096, all
    training batches of one epoch): B current sentences, U rows of the unique-sentence table
    that a model encodes, and the naive count B + existing context rows that a model encoding
    every context window separately would need. Target U/B <= 1.3. Shown as information:
    the same count with runs of length 1 (no document-run batching).
(c) As information: training speed of ``concat_transformer`` with K=3 source sentences vs
    ``transformer`` (the sentence-level runs of (a)).

Speeds are fairseq's own ``wps`` (target tokens per second of training, start-up excluded)
combined over the epochs of a run. Options: ``--updates N`` per run, ``--repeats R`` pairs,
``--quick`` (a short smoke run).

Usage (from the repository root): python -m benchmarks.bench_foundation [--quick]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "maruf-ende", "IWSLT2017")
WORK = os.path.join(ROOT, "bench-work", "foundation")
BIN = os.path.join(WORK, "data-bin")
SPM_VOCAB = 4000
MAX_TOKENS = 4096

# the demo's model size
MODEL = [
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
    "--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim", "512",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--encoder-normalize-before", "--decoder-normalize-before",
    "--share-all-embeddings", "--dropout", "0.0",
]
COMMON = [
    "--source-lang", "en", "--target-lang", "de",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.004",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", str(MAX_TOKENS), "--seed", "1", "--cpu",
    # with the default multiple of 8 fairseq's batching drops a few sentences per epoch that
    # document_translation puts back as one more batch; with 1 both tasks get identical batches
    "--required-batch-size-multiple", "1",
    "--disable-validation", "--no-save", "--log-format", "simple", "--log-interval", "50",
]
CONFIGS = {
    "translation": ["--task", "translation", "--arch", "transformer"],
    "doc K=0": ["--user-dir", os.path.join(ROOT, "fairseq_docctx"), "--task", "document_translation",
                "--context-size", "0", "--arch", "transformer"],
    "concat K=3": ["--user-dir", os.path.join(ROOT, "fairseq_docctx"), "--task", "document_translation",
                   "--context-size", "3", "--context-sides", "source", "--arch", "concat_transformer"],
}


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tool(name):
    """A console script of this environment (next to the running interpreter), else PATH."""
    p = os.path.join(os.path.dirname(sys.executable), name)
    return p if os.path.exists(p) else name


def prepare():
    if os.path.exists(os.path.join(BIN, "docctx.json")):
        log(f"reusing {os.path.relpath(BIN, ROOT)}/")
        return
    shutil.rmtree(BIN, ignore_errors=True)
    os.makedirs(WORK, exist_ok=True)
    log(f"docctx-prepare: IWSLT2017 dev talks, SentencePiece {SPM_VOCAB} -> {os.path.relpath(BIN, ROOT)}/")
    subprocess.run(
        [tool("docctx-prepare"), "-s", "en", "-t", "de", "--input-format", "marker",
         "--joined-dictionary", "--workers", "2", "--spm-vocab-size", str(SPM_VOCAB),
         "--trainpref", os.path.join(DATA, "concatenated_en2de_dev_{lang}.txt"),
         "--destdir", BIN],
        check=True, stdout=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------------------------- (a), (c)
EPOCH_LINE = re.compile(r"\| train \| epoch (\d+) \|(.*)$", re.M)


def parse_epochs(text):
    """fairseq's end-of-epoch ``train`` lines -> [(updates in the epoch, wpb, wps)]."""
    out, prev = [], 0
    for m in EPOCH_LINE.finditer(text):
        f = dict(kv.strip().split(" ", 1) for kv in m.group(2).split("|") if kv.strip())
        n = int(float(f["num_updates"]))
        out.append((n - prev, float(f["wpb"]), float(f["wps"])))
        prev = n
    return out


def train_wps(name, updates, log_path):
    """Train ``updates`` updates; returns (words/s, updates done, wall seconds)."""
    cmd = [tool("fairseq-train"), BIN] + CONFIGS[name] + MODEL + COMMON + [
        "--max-update", str(updates), "--max-epoch", "1000"]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    # OpenMP threads sleep instead of spinning while they wait (as in the demo): otherwise any
    # other process on a 2-core machine slows training several-fold, and the noise swamps (a)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.time() - t0
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n\n" + r.stdout)
    if r.returncode != 0:
        sys.exit(f"bench: {name} training failed (exit {r.returncode}), see {log_path}:\n"
                 + "\n".join(r.stdout.splitlines()[-15:]))
    epochs = parse_epochs(r.stdout)
    done = sum(n for n, _, _ in epochs)
    if done != updates:
        sys.exit(f"bench: {name}: parsed {done} updates, expected {updates}; see {log_path}")
    words = sum(n * wpb for n, wpb, _ in epochs)
    seconds = sum(n * wpb / wps for n, wpb, wps in epochs)
    return words / seconds, words / done, wall


# -------------------------------------------------------------------------------------- (b)
def count_encodings(context_size, run_length):
    """Iterate one epoch of K=``context_size`` training batches; sum B, U and the naive count."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    import fairseq_docctx  # noqa: F401  (registers the task)
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    for name in ("fairseq", "hydra"):
        logging.getLogger(name).setLevel(logging.WARNING)

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        BIN, "--task", "document_translation", "--source-lang", "en", "--target-lang", "de",
        "--context-size", str(context_size), "--context-sides", "source",
        "--doc-run-length", str(run_length), "--arch", "transformer",
        "--max-tokens", str(MAX_TOKENS), "--seed", "1",
    ])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    ds = task.dataset("train")
    itr = task.get_batch_iterator(
        ds, max_tokens=MAX_TOKENS, max_positions=(1024, 1024), seed=1, epoch=1,
        num_workers=0, required_batch_size_multiple=8,
    ).next_epoch_itr(shuffle=True)
    tot = {"batches": 0, "B": 0, "U": 0, "naive": 0, "max_U/B": 0.0}
    seen = set()
    for sample in itr:
        ctx = sample["net_input"]["context"]
        b = int(sample["id"].numel())
        u = int(ctx["src_tokens"].size(0))
        naive = b + int((ctx["src_index"] >= 0).sum())
        tot["batches"] += 1
        tot["B"] += b
        tot["U"] += u
        tot["naive"] += naive
        tot["max_U/B"] = max(tot["max_U/B"], u / b)
        seen.update(sample["id"].tolist())
    if len(seen) != len(ds) or tot["B"] != len(ds):
        sys.exit(f"bench: batching covered {len(seen)} of {len(ds)} sentences ({tot['B']} rows)")
    return tot


# --------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=200, help="updates per training run (default 200)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="A B pairs for (a) (default 2: translation, doc K=0, translation, doc K=0)")
    ap.add_argument("--concat-repeats", type=int, default=1, help="concat K=3 runs for (c) (default 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 updates, 1 pair")
    a = ap.parse_args()
    if a.quick:
        a.updates, a.repeats, a.concat_repeats = 10, 1, 1
    if not os.path.exists(os.path.join(DATA, "concatenated_en2de_dev_en.txt")):
        sys.exit("bench: needs ../shared/data/maruf-ende/IWSLT2017/concatenated_en2de_dev_{en,de}.txt "
                 "(relative to the repository root): Maruf et al. 2019's TED documents")
    t_start = time.time()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    log(f"{os.cpu_count()} CPUs, load average {load:.2f} before the benchmark "
        "(other work on the machine lowers every speed below)")
    prepare()
    logs = os.path.join(WORK, "logs")
    os.makedirs(logs, exist_ok=True)

    # (b) first: in-process, no training
    log(f"(b) counting sentence encodings per batch, K=3, --max-tokens {MAX_TOKENS}, one epoch")
    counts = {}
    for label, run_length in (("document runs (--doc-run-length 16)", 16), ("no runs (--doc-run-length 1)", 1)):
        counts[label] = c = count_encodings(3, run_length)
        log(f"    {label}: {c['batches']} batches, B={c['B']} U={c['U']} naive={c['naive']}: "
            f"U/B={c['U'] / c['B']:.3f} naive/B={c['naive'] / c['B']:.3f}")

    # (a) and (c)
    order = ["translation", "doc K=0"] * a.repeats + ["concat K=3"] * a.concat_repeats
    runs = {k: [] for k in CONFIGS}
    for i, name in enumerate(order):
        path = os.path.join(logs, f"{i + 1:02d}-{name.replace(' ', '').replace('=', '')}.log")
        wps, wpb, wall = train_wps(name, a.updates, path)
        runs[name].append(wps)
        log(f"    run {i + 1}/{len(order)} {name:12s}: {a.updates} updates, {wps:7.0f} words/s "
            f"({wpb:.0f} target words per batch, {wall:.0f} s with start-up)")

    def mean(x):
        return sum(x) / len(x)

    tr, d0, c3 = mean(runs["translation"]), mean(runs["doc K=0"]), mean(runs["concat K=3"])
    docrun = counts["document runs (--doc-run-length 16)"]
    norun = counts["no runs (--doc-run-length 1)"]
    result = {
        "updates_per_run": a.updates,
        "wps": runs,
        "ratio_doc_k0_over_translation": d0 / tr,
        "ratio_concat_k3_over_transformer": c3 / tr,
        "encodings_k3": counts,
        "load_average_before": load,
        "seconds": time.time() - t_start,
    }
    with open(os.path.join(WORK, "results.json"), "w") as f:
        json.dump(result, f, indent=2)

    def fmt(xs):
        return " ".join(f"{x:.0f}" for x in xs)

    print()
    print(f"== foundation benchmark: TED dev talks (8,967 sentence pairs), SentencePiece {SPM_VOCAB}, "
          f"transformer 2+2 x 128 (the demo's size), --max-tokens {MAX_TOKENS}, {a.updates} updates per run ==")
    print(f"(a) translation wps {tr:.0f} ({fmt(runs['translation'])}) | document_translation K=0 wps "
          f"{d0:.0f} ({fmt(runs['doc K=0'])}) | ratio {d0 / tr:.3f} (target >= 0.95: "
          f"{'ok' if d0 / tr >= 0.95 else 'MISSED'})")
    print(f"(b) K=3, document runs: {docrun['batches']} batches, B={docrun['B']} sentences, "
          f"table U={docrun['U']}, naive B+context={docrun['naive']} | U/B {docrun['U'] / docrun['B']:.3f} "
          f"(target <= 1.3: {'ok' if docrun['U'] / docrun['B'] <= 1.3 else 'MISSED'}) | "
          f"naive/B {docrun['naive'] / docrun['B']:.3f}")
    print(f"    K=3, no runs (information): {norun['batches']} batches | U/B {norun['U'] / norun['B']:.3f} "
          f"| naive/B {norun['naive'] / norun['B']:.3f}")
    print(f"(c) concat_transformer K=3 wps {c3:.0f} ({fmt(runs['concat K=3'])}) | transformer wps {tr:.0f} "
          f"| ratio {c3 / tr:.3f} (information: 4 source sentences per row, smaller batches)")
    print(f"total {time.time() - t_start:.0f} s; logs in {os.path.relpath(logs, ROOT)}/, "
          f"numbers in {os.path.relpath(os.path.join(WORK, 'results.json'), ROOT)}")


if __name__ == "__main__":
    main()
