"""Speed of the RNN family (``rnnsearch``, ``hrnn_context``, ``isg_rnnsearch``), each against
its baseline measured in the same run on the same data.

Data: IWSLT17 TED En-De (../shared/data/maruf-ende): training on the dev talks (8,967
sentences), generation on the 23 test talks (2,271 sentences), SentencePiece 4000 — the data
directory of ``bench_inference.py`` (``bench-work/inference/data``, prepared once by its
``prepare_data``); this script's checkpoints go to ``bench-work/rnn``.

* Training words/second (fairseq's ``wps`` of the last ``train`` line), every model with the
  same embedding/hidden sizes, batches settings and number of updates, runs alternating
  (A B A B ...), best of ``--repeats``:

  - ``rnnsearch`` (``rnnsearch_nematus``: the base of Wang et al. 2017) against fairseq's own
    ``lstm`` of the same size (one layer, bidirectional encoder, attention): target >= 0.8x;
  - ``hrnn_context`` (Init-enc + Init-dec + gated auxiliary context, K=3) against
    ``rnnsearch`` of the same size: target >= 0.8x;
  - ``isg_rnnsearch`` (the inter-sentence gate of Kuang & Xiong 2018, the previous sentence
    A encoded too) against the ``rnnsearch`` it is built on (architecture ``rnnsearch``:
    maxout deep output, Kuang & Xiong's RNNSearch) of the same size: target >= 0.7x.

  Next to the speed, each model's matrix-product FLOPs per target word (torch's
  FlopCounterMode, forward + backward, over the first ``--flop-batches`` batches of the same
  fairseq training run, ``bench_models.count_train_flops``): the baseline's FLOPs over the
  model's is the ceiling of the speed ratio on a machine bound by matrix products (a CPU);
  "efficiency" is the measured ratio over that ceiling.

* Generation sentences/second (fairseq-generate's own figure, the beam of each model's paper
  unless ``--beam`` says otherwise: 5 for ``hrnn_context``, 10 for ``isg_rnnsearch``), the
  context model initialised from its baseline's checkpoint (``--init-from-sentence-checkpoint``)
  and trained ``--context-updates`` more, against that baseline at the same beam:
  ``hrnn_context`` against ``rnnsearch`` (beam 5), target >= 0.9x; ``isg_rnnsearch`` against
  its ``rnnsearch`` (beam 10), target >= 0.7x. A context model decodes in its default batches
  (its ``doc_batching``: fairseq's length-sorted sentences, each with its own context) and in
  document runs (``--doc-batching runs``: each context sentence encoded once per batch). Generated tokens/second and the mean hypothesis length are
  printed too (briefly trained models write outputs of different lengths); with
  ``--flop-every N`` the matrix-product FLOPs per sentence of the beam search
  (``bench_inference.count_flops``) and the ratio they allow.

A model of a later part of the family is one more entry of ``MODELS`` (its fairseq-train
options), ``BASELINE`` (what its training speed is compared with), and, for generation,
``GENERATE`` (its fairseq-generate task options; the model is initialised from the baseline's
checkpoint).

Usage (from the repository root): python -m benchmarks.bench_rnn [--models rnnsearch hrnn isg] [--size small|paper|tiny]
       [--updates 40] [--repeats 2] [--flop-batches 10] [--no-generate] [--gen-updates 300]
       [--context-updates 100] [--beam N] [--batch-size 32] [--test-docs N] [--flop-every 4]
"""
import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.bench_inference import WORK as INFERENCE_WORK
from benchmarks.bench_inference import count_flops as count_generation_flops
from benchmarks.bench_inference import fairseq_rate, prepare_data, prepared_test_set
from benchmarks.bench_models import (FLOP_HEADER, add_speed_args, best_train_wps, count_train_flops, flop_cells,
                                     sh, worker_flops)

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench-work" / "rnn"
USER_DIR = ["--user-dir", str(REPO / "fairseq_docctx")]


def size_args(embed, hidden):
    """One size for every model of a run: embeddings, GRU/LSTM states, output layer (the
    embedding size, Nematus' readout) and attention (the decoder's size)."""
    return ["--encoder-embed-dim", str(embed), "--decoder-embed-dim", str(embed),
            "--encoder-hidden-size", str(hidden), "--decoder-hidden-size", str(hidden),
            "--decoder-out-embed-dim", str(embed), "--share-all-embeddings"]


SIZES = {
    "small": size_args(256, 256),  # CPU-friendly default
    "paper": size_args(600, 1000),  # Wang et al. 2017, §3.1 (Nematus base)
    "tiny": size_args(32, 32),  # a smoke run
}
#: the attention size of the RNNSearch models at each size (Nematus: the annotations' size)
ATTENTION = {"small": 256, "paper": 2000, "tiny": 32}
COMMON = [
    "--optimizer", "adam", "--lr", "5e-4", "--max-tokens", "2048", "--cpu", "--seed", "1",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--log-format", "simple", "--log-interval", "1000", "--disable-validation", "--num-workers", "0",
    "--task", "document_translation",
]
#: name -> fairseq-train options of the model (besides the size and COMMON)
MODELS = {
    # fairseq's own LSTM: one layer, bidirectional encoder, attention, dropout on the output
    "lstm": ["--arch", "lstm", "--context-size", "0", "--encoder-bidirectional", "--encoder-layers", "1",
             "--decoder-layers", "1", "--dropout", "0.0", "--decoder-dropout-out", "0.5"],
    "rnnsearch": ["--arch", "rnnsearch_nematus", "--context-size", "0"],
    "hrnn": ["--arch", "hrnn_context", "--context-size", "3"],
    # Kuang & Xiong's RNNSearch (maxout deep output), the base of isg_rnnsearch
    "rnnsearch_kx": ["--arch", "rnnsearch", "--context-size", "0"],
    "isg": ["--arch", "isg_rnnsearch", "--context-size", "1"],
}
#: the models of the RNN family (need --attention-dim)
RNN_FAMILY = ("rnnsearch", "hrnn", "rnnsearch_kx", "isg")
#: name -> the model its training speed is compared with
BASELINE = {"rnnsearch": "lstm", "hrnn": "rnnsearch", "isg": "rnnsearch_kx"}
#: name -> fairseq-generate task options, for the models whose generation speed is compared
#: with their baseline's (each initialised from the baseline's checkpoint)
GENERATE = {
    "hrnn": ["--task", "document_translation", "--context-size", "3"],
    "isg": ["--task", "document_translation", "--context-size", "1"],
}
#: name -> the beam of its paper (Wang et al. 2017 do not state theirs: fairseq's 5; Kuang &
#: Xiong 2018, §5.1: 10), for the model and its baseline unless --beam is given
BEAM = {"hrnn": 5, "isg": 10}
SENTENCE_LEVEL = ["--task", "document_translation", "--context-size", "0"]


def train_argv(data_bin, name, size):
    attention = ["--attention-dim", str(ATTENTION[size])] if name in RNN_FAMILY else []
    return [str(data_bin), *USER_DIR, *MODELS[name], *SIZES[size], *attention, *COMMON]


def train_checkpoint(data_bin, name, size, updates, init_from=None):
    """``name`` trained ``updates`` updates (from ``init_from``'s weights if given), once:
    ``WORK/ckpt-<name>-<size>-<updates>[-from-<baseline>]/checkpoint_last.pt``."""
    tag = f"{name}-{size}-{updates}" + (f"-from-{init_from[0]}" if init_from else "")
    ckpt = WORK / f"ckpt-{tag}" / "checkpoint_last.pt"
    if not ckpt.exists():
        print(f"training {name} ({size}) for {updates} updates ...", flush=True)
        t = time.time()
        init = ["--init-from-sentence-checkpoint", init_from[1]] if init_from else []
        sh(["fairseq-train", *train_argv(data_bin, name, size), *init, "--max-update", str(updates),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100", "--lr", "1e-3",
            "--no-epoch-checkpoints", "--save-dir", ckpt.parent])
        print(f"  trained in {time.time() - t:.0f}s", flush=True)
    return ckpt


def training_speed(data_bin, models, args):
    """Best training words/s of every model and its baseline (alternating runs), and the
    FLOPs per word of each (``--flop-batches``)."""
    names = list(dict.fromkeys(n for m in models for n in (BASELINE[m], m)))
    best = best_train_wps({name: [*train_argv(data_bin, name, args.size), "--no-save"] for name in names},
                          args.updates, args.repeats)
    work = {}
    if args.flop_batches:
        for name in names:
            work[name] = worker_flops("benchmarks.bench_rnn", ["--count-flops", name, "--size", args.size,
                                                 "--flop-batches", str(args.flop_batches)])
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"\ntraining words/second, {args.updates} updates, best of {args.repeats}, size {args.size} "
          f"({' '.join(SIZES[args.size][:8])} ...), --max-tokens 2048, threads: {threads}")
    if work:
        print(f"FLOPs: matrix products, forward + backward, per target word, first {args.flop_batches} batches; "
              f"ceiling = the baseline's FLOPs/word over the model's")
    print(f"{'model':12s} {'baseline':12s} {'wps':>8s} {'base wps':>8s} {'ratio':>6s}" + (FLOP_HEADER if work else ""))
    for m in models:
        b = BASELINE[m]
        ratio = best[m] / best[b]
        cells = flop_cells(work, m, b, ratio) if work else ""
        print(f"{m:12s} {b:12s} {best[m]:8.0f} {best[b]:8.0f} {ratio:6.2f}{cells}")


def generation_speed(data_bin, models, args):
    """Sentences/s (and tokens/s) of each model of ``GENERATE`` against its baseline,
    alternating runs, best of ``--repeats``."""
    test_bin, _ = prepared_test_set(data_bin, WORK, "iwslt17", args.test_docs)
    gen = ["--batch-size", str(args.batch_size), "--max-len-a", "1.2",
           "--max-len-b", "10", "--remove-bpe", "sentencepiece", "--required-batch-size-multiple", "1",
           "--gen-subset", "test", "--cpu"]
    runs, pairs = {}, []
    for m in models:
        if m not in GENERATE:
            continue
        b = BASELINE[m]
        beam = ["--beam", str(args.beam or BEAM[m])]
        base_ckpt = train_checkpoint(data_bin, b, args.size, args.gen_updates)
        ckpt = train_checkpoint(data_bin, m, args.size, args.context_updates, init_from=(b, base_ckpt))
        base_run = f"{b} (beam {beam[1]})"
        runs[base_run] = ["fairseq-generate", test_bin, *USER_DIR, *SENTENCE_LEVEL, "--path", base_ckpt, *gen, *beam]
        runs[m] = ["fairseq-generate", test_bin, *USER_DIR, *GENERATE[m], "--path", ckpt, *gen, *beam]
        runs[f"{m} (document runs)"] = [*runs[m], "--doc-batching", "runs"]
        pairs += [(m, base_run), (f"{m} (document runs)", base_run)]
    if not runs:
        return
    rates = {}
    for r in range(args.repeats):
        for name, cmd in runs.items():
            n, rate, tok_rate, mean_len = fairseq_rate(sh(cmd))
            old = rates.get(name, (0.0, 0.0, mean_len, n))
            rates[name] = (max(old[0], rate), max(old[1], tok_rate), mean_len, n)
            print(f"[{r + 1}] {name}: {n} sentences, {rate:.2f} sentences/s, {tok_rate:.1f} tokens/s, "
                  f"mean hypothesis length {mean_len:.1f} words", flush=True)
    work = {}
    if args.flop_every:
        for name in runs:
            f, t, n, digest = count_generation_flops([str(c) for c in runs[name]], args.flop_every)
            work[name] = (f / n, digest)
    print(f"\ngeneration, IWSLT17 TED test ({rates[pairs[0][1]][3]} sentences), each pair at one beam, --batch-size "
          f"{args.batch_size}, best of {args.repeats}; models trained {args.gen_updates} updates (baseline) "
          f"+ {args.context_updates} (initialised from it)")
    if work:
        print(f"FLOPs: matrix products of the beam search (encoders included), every {args.flop_every}. batch; "
              f"ceiling = the baseline's FLOPs/sentence over the model's")
    print(f"{'run':28s} {'baseline':24s} {'sent/s':>8s} {'ratio':>6s} {'tok/s':>8s} {'ratio':>6s} {'mean len':>8s}"
          + (f" {'MFLOP/sent':>10s} {'ceiling':>7s}" if work else ""))
    for m, b in pairs:
        (s, t, ml, _), (sb, tb, _, _) = rates[m], rates[b]
        line = f"{m:28s} {b:24s} {s:8.2f} {s / sb:6.2f} {t:8.1f} {t / tb:6.2f} {ml:8.1f}"
        if work:
            same = "" if work[m][1] == work[b][1] else " (other sentences counted)"
            line += f" {work[m][0] / 1e6:10.1f} {work[b][0] / work[m][0]:7.2f}{same}"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(BASELINE), choices=list(BASELINE),
                    help="models compared with their baselines (rnnsearch: rnnsearch_nematus vs fairseq's lstm; "
                    "hrnn: hrnn_context vs rnnsearch_nematus; isg: isg_rnnsearch vs rnnsearch)")
    ap.add_argument("--size", choices=list(SIZES), default="small",
                    help="size of every model: small (256/256, default), paper (600/1000, Wang et al. 2017; for isg "
                    "too, next to Kuang & Xiong's 620/1000), "
                    "tiny (32/32, a smoke run)")
    add_speed_args(ap)
    ap.add_argument("--gen-updates", type=int, default=300, help="training updates of the baseline decoded")
    ap.add_argument("--context-updates", type=int, default=100,
                    help="updates of the context model after initialising it from the baseline")
    ap.add_argument("--beam", type=int, default=None,
                    help="beam of every generation run (default: each model's paper: hrnn 5, isg 10)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per generation batch")
    ap.add_argument("--test-docs", type=int, default=None, help="only the first N test documents (a quick check)")
    ap.add_argument("--flop-every", type=int, default=4,
                    help="count the generation FLOPs of every N-th batch (0: no count)")
    ap.add_argument("--count-flops", choices=list(MODELS), help=argparse.SUPPRESS)  # worker
    args = ap.parse_args()
    data_bin = prepare_data(INFERENCE_WORK)  # the data of bench_inference.py, prepared once
    WORK.mkdir(parents=True, exist_ok=True)
    if args.count_flops:
        count_train_flops(train_argv(data_bin, args.count_flops, args.size), args.flop_batches)
        return
    training_speed(data_bin, args.models, args)
    if not args.no_generate:
        generation_speed(data_bin, args.models, args)


if __name__ == "__main__":
    sys.exit(main())
