"""Speed of the document-to-document models (``doc2doc_transformer``, Sun et al. 2022;
``g_transformer``, Bao et al. 2021) against a sentence-level ``transformer`` of the same size,
measured in one run on the same data.

Data: IWSLT17 TED En-De (../shared/data/maruf-ende): training on the dev talks (8,967
sentences), generation on the 23 test talks (2,271 sentences), SentencePiece 4000 — the data
directory of ``bench_inference.py`` (``bench-work/inference/data``, prepared once by its
``prepare_data``; ``--data DIR`` reads another prepared copy); this script writes under
``bench-work/segments``. The segment models read the data as segments (``--doc-mode segments
--max-segment-tokens N``: consecutive sentences of a document, at most N tokens a side), the
transformer as sentences; a segment holds exactly the tokens of its sentences (each sentence's
``</s>`` becomes the separator), so words/s and tokens/s count the same tokens on both sides.

* Training words/second (fairseq's ``wps`` of the last ``train`` line) of each segment model
  and of the ``transformer``, same size, optimizer, ``--max-tokens`` and number of updates, runs
  alternating (transformer, doc2doc, G-Transformer, transformer, ...), best of ``--repeats``.
  Next to it the matrix-product FLOPs per target word (torch's FlopCounterMode with the fused CPU
  attention kernel, benchmarks/flops.py; forward + backward, over the first ``--flop-batches``
  batches of the same fairseq training run: ``bench_models.count_train_flops``): the
  transformer's FLOPs per word over the model's is the speed ratio the longer sequences allow
  on a machine bound by matrix products (a CPU), the *ceiling*; *efficiency* is the measured
  ratio over it. Target: efficiency >= 0.9.
* Generation target tokens/second (fairseq-generate's own figure, beam ``--beam``, batches of
  ``--gen-max-tokens`` source tokens for every run) of each segment model against
  sentence-level generation (``--task translation``) of the transformer they are initialised
  from (``--init-from-sentence-checkpoint``; transformer ``--gen-updates`` updates, each
  segment model ``--segment-updates`` more). With ``--flop-every N`` the matrix-product FLOPs
  per generated token of the beam search (``bench_inference.count_flops``, every N-th batch)
  give the bound (sentence level's FLOPs per token over the model's) and the efficiency.
  Target: efficiency >= 0.6. The sentence-count guarantee: each segment model is also decoded
  with its constraint off (``--no-sentence-count-constraint``, which turns the sentence length
  windows off too), and each run's fallbacks (the task's count of segments decoded again
  sentence by sentence, of the split's segments, from the line it logs for the split) are printed; the
  constraint's cost is 1 - tokens/s with the constraint / tokens/s without, and, since the two
  runs' hypotheses differ where the constraint changes them, also measured directly: the time
  spent in the decoders' ``constrain_sentence_count`` over the whole fairseq-generate run with
  the constraint on (one more run of each model, in a child process). Target: <= 10 %.
* The segment models decode with their decoder self-attentions' keys and values in
  preallocated buffers (the default; fairseq_docctx/modules/kv_cache.py). With
  ``--compare-kv-cache`` each is also decoded with fairseq's cache (``--fairseq-kv-cache``),
  in the same alternation, and the tokens/s of the two are compared (the hypotheses are
  the same).

Usage (from the repository root): python -m benchmarks.bench_segments [--size small|tiny]
       [--max-segment-tokens 512] [--updates 40] [--repeats 2] [--flop-batches 10]
       [--no-generate] [--gen-updates 300] [--segment-updates 100] [--beam 4]
       [--gen-max-tokens 4096] [--test-docs N] [--flop-every 4] [--data DIR] [--compare-kv-cache]
A smoke run: --size tiny --updates 5 --flop-batches 2 --gen-updates 20 --segment-updates 10
       --test-docs 2 --repeats 1 --flop-every 1
"""
import argparse
import os
import re
import sys
import time
from pathlib import Path

from benchmarks.bench_inference import WORK as INFERENCE_WORK
from benchmarks.bench_inference import count_flops as count_generation_flops
from benchmarks.bench_inference import fairseq_rate, prepare_data, prepared_test_set
from benchmarks.bench_models import COMMON, SIZES as MODEL_SIZES
from benchmarks.bench_models import (FLOP_HEADER, add_speed_args, best_train_wps, count_train_flops, flop_cells,
                                     sh, size_args, worker_flops)

REPO = Path(__file__).resolve().parents[1]
MODULE = "benchmarks.bench_segments"  # its child processes run it with python -m
WORK = REPO / "bench-work" / "segments"
USER_DIR = ["--user-dir", str(REPO / "fairseq_docctx")]
#: the line the task logs once the split is decoded (fairseq_docctx.tasks.segment_decoding.segment_run_line)
FALLBACKS = r"(\d+) of (\d+) segments of the split decoded again sentence by sentence"

SIZES = {
    "small": MODEL_SIZES["small"],  # 3+3 x 256/1024, as bench_models and bench_inference
    # a smoke run: two layers, so that G-Transformer's combined attention (the top 2 layers,
    # Bao et al. 2021, §4.2) has its layers
    "tiny": size_args(2, 32, 64, 2),
}
SENTENCE = "transformer"
#: name -> fairseq-train options of the model (besides the size and the common settings)
MODELS = {
    SENTENCE: ["--arch", "transformer", "--context-size", "0"],
    "doc2doc_transformer": ["--arch", "doc2doc_transformer", "--doc-mode", "segments"],
    "g_transformer": ["--arch", "g_transformer", "--doc-mode", "segments"],
}
SEGMENT_MODELS = ("doc2doc_transformer", "g_transformer")
SENTENCE_LEVEL = "transformer, sentence level"
FAIRSEQ_CACHE = "fairseq's kv cache"  # the run name's suffix with --compare-kv-cache
TIME_CONSTRAINT = "--generate-time-constraint"  # internal: fairseq-generate timing the constraint
TRAIN_MAX_TOKENS = int(COMMON[COMMON.index("--max-tokens") + 1])


def train_argv(data_bin, name, size, segment_tokens):
    segments = ["--max-segment-tokens", str(segment_tokens)] if name in SEGMENT_MODELS else []
    return [str(data_bin), *USER_DIR, "--task", "document_translation", *MODELS[name], *segments,
            *SIZES[size], *COMMON, "--criterion", "label_smoothed_cross_entropy"]


def checkpoint(data_bin, name, args, updates, init_from=None):
    """``name`` trained ``updates`` updates (from the sentence-level checkpoint ``init_from``
    if given), once: ``WORK/<name>-<size>-<segment tokens>-<updates>[-init]/checkpoint_last.pt``."""
    tag = f"{name}-{args.size}-{args.max_segment_tokens}-{updates}" + ("-init" if init_from else "")
    ckpt = WORK / tag / "checkpoint_last.pt"
    if ckpt.exists():
        return ckpt
    print(f"training {name} ({args.size}) for {updates} updates ...", flush=True)
    t = time.time()
    saved = [a for a in train_argv(data_bin, name, args.size, args.max_segment_tokens) if a != "--no-save"]
    init = ["--init-from-sentence-checkpoint", str(init_from)] if init_from else []
    sh(["fairseq-train", *saved, *init, "--max-update", str(updates), "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "100", "--lr", "1e-3", "--no-epoch-checkpoints", "--save-dir", ckpt.parent])
    print(f"  trained in {time.time() - t:.0f}s", flush=True)
    return ckpt


def training_speed(data_bin, args):
    """Best training words/s of the transformer and the segment models (alternating runs)
    and, with ``--flop-batches``, the FLOPs per target word of each."""
    best = best_train_wps({name: [*train_argv(data_bin, name, args.size, args.max_segment_tokens), "--no-save"]
                           for name in MODELS}, args.updates, args.repeats)
    work = {}
    if args.flop_batches:
        for name in MODELS:
            work[name] = worker_flops(MODULE, ["--count-flops", name, "--size", args.size, "--data", str(data_bin),
                                               "--max-segment-tokens", str(args.max_segment_tokens),
                                               "--flop-batches", str(args.flop_batches)])
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"\ntraining words/second, {args.updates} updates, best of {args.repeats}, size {args.size} "
          f"({' '.join(SIZES[args.size][:8])} ...), --max-tokens {TRAIN_MAX_TOKENS}, segments of at most "
          f"{args.max_segment_tokens} tokens, threads: {threads}")
    if work:
        print(f"FLOPs: matrix products, forward + backward, per target word, first {args.flop_batches} batches; "
              f"ceiling = the transformer's FLOPs/word over the model's; target: efficiency >= 0.9")
    print(f"{'model':22s} {'wps':>8s} {'ratio':>6s}" + (FLOP_HEADER if work else ""))
    for name, w in best.items():
        ratio = w / best[SENTENCE]
        print(f"{name:22s} {w:8.0f} {ratio:6.2f}" + (flop_cells(work, name, SENTENCE, ratio) if work else ""))


def generation_speed(data_bin, args):
    """Target tokens/s of each segment model, with the constraint on and off, against
    sentence-level generation of the transformer (alternating runs, best of ``--repeats``),
    with the fallbacks and the FLOP bound."""
    test_bin, _ = prepared_test_set(data_bin, WORK, "iwslt17", args.test_docs)
    base_ckpt = checkpoint(data_bin, SENTENCE, args, args.gen_updates)
    gen = [test_bin, *USER_DIR, "--beam", str(args.beam), "--max-tokens", str(args.gen_max_tokens),
           "--max-len-a", "1.2", "--max-len-b", "10", "--remove-bpe", "sentencepiece",
           "--required-batch-size-multiple", "1", "--gen-subset", "test", "--cpu"]
    runs = {SENTENCE_LEVEL: ["fairseq-generate", *gen, "--task", "translation", "--path", base_ckpt]}
    counted = {SENTENCE_LEVEL: runs[SENTENCE_LEVEL]}  # the runs whose FLOPs are counted
    for m in SEGMENT_MODELS:
        ckpt = checkpoint(data_bin, m, args, args.segment_updates, init_from=base_ckpt)
        seg = [*gen, "--task", "document_translation", "--doc-mode", "segments",
               "--max-segment-tokens", str(args.max_segment_tokens), "--path", ckpt]
        counted[m] = ["fairseq-generate", *seg]
        runs[f"{m}, constraint on"] = ["fairseq-generate", *seg]
        runs[f"{m}, constraint off"] = ["fairseq-generate", *seg, "--no-sentence-count-constraint"]
        if args.compare_kv_cache:
            runs[f"{m}, {FAIRSEQ_CACHE}"] = ["fairseq-generate", *seg, "--fairseq-kv-cache"]
    rates = {}
    for r in range(args.repeats):
        for name, cmd in runs.items():
            out = sh(cmd, cwd=REPO)
            n, rate, tok_rate, mean_len = fairseq_rate(out)
            fallbacks = re.findall(FALLBACKS, out)
            old = rates.get(name, (0.0, 0.0))
            rates[name] = (max(old[0], rate), max(old[1], tok_rate), mean_len, n, fallbacks[-1] if fallbacks else None)
            print(f"[{r + 1}] {name}: {n} sentences, {rate:.2f} sentences/s, {tok_rate:.1f} tokens/s, "
                  f"mean hypothesis length {mean_len:.1f} words"
                  + (f", {fallbacks[-1][0]} of {fallbacks[-1][1]} segments decoded again sentence by sentence"
                     if fallbacks else ""), flush=True)
    work = {}
    if args.flop_every:
        for name, cmd in counted.items():
            f, t, _, _ = count_generation_flops([str(c) for c in cmd], args.flop_every)
            work[name] = f / t
    constraint = {m: constraint_time(counted[m]) for m in SEGMENT_MODELS}
    print_generation(rates, work, constraint, args)


def generate_timing_constraint(argv):
    """fairseq-generate ``argv`` in this process with the time spent in the segment decoders'
    sentence-count constraint summed; prints ``CONSTRAINT <seconds in it> <seconds of
    generation>``. Only for this benchmark."""
    from fairseq_cli.generate import cli_main

    from fairseq_docctx.models.g_transformer import SegmentDecoder

    spent = [0.0]
    constrain = SegmentDecoder.constrain_sentence_count

    def timed(self, *a, **kw):
        t = time.perf_counter()
        try:
            return constrain(self, *a, **kw)
        finally:
            spent[0] += time.perf_counter() - t

    SegmentDecoder.constrain_sentence_count = timed
    sys.argv = ["fairseq-generate", *argv]
    t = time.perf_counter()
    cli_main()
    print(f"CONSTRAINT {spent[0]} {time.perf_counter() - t}", flush=True)


def constraint_time(cmd):
    """(seconds in the sentence-count constraint, seconds of the whole generation) of the
    fairseq-generate command ``cmd`` (run again in a child process)."""
    assert cmd[0] == "fairseq-generate"
    out = sh([sys.executable, "-m", MODULE, TIME_CONSTRAINT, *map(str, cmd[1:])], cwd=REPO)
    spent, total = re.findall(r"^CONSTRAINT ([\d.e+-]+) ([\d.e+-]+)$", out, re.M)[-1]
    return float(spent), float(total)


def print_generation(rates, work, constraint, args):
    """The generation table: each run against sentence level, FLOP bound, efficiency, and
    the cost of the sentence-count constraint (``constraint``: model -> seconds in it and of
    the whole generation)."""
    base_tok = rates[SENTENCE_LEVEL][1]
    print(f"\ngeneration, IWSLT17 TED test ({rates[SENTENCE_LEVEL][3]} sentences), beam {args.beam}, --max-tokens "
          f"{args.gen_max_tokens}, best of {args.repeats}; transformer trained {args.gen_updates} updates, the segment "
          f"models {args.segment_updates} more from it, segments of at most {args.max_segment_tokens} tokens")
    if work:
        print(f"FLOPs: matrix products of the beam search (encoder included), every {args.flop_every}. batch, per "
              f"generated token, constraint on; bound = sentence level's FLOPs/token over the model's; target: "
              f"efficiency >= 0.6")
    print(f"{'run':36s} {'sent/s':>8s} {'tok/s':>8s} {'ratio':>6s} {'mean len':>8s} {'fallbacks':>10s}"
          + (f" {'MFLOP/tok':>9s} {'bound':>6s} {'efficiency':>10s}" if work else ""))
    for name, (sent, tok, mean_len, _, fallbacks) in rates.items():
        # every segment run logs the split's line; a run without one did not finish
        fb = f"{fallbacks[0]}/{fallbacks[1]}" if fallbacks else ("?" if name != SENTENCE_LEVEL else "")
        line = f"{name:36s} {sent:8.2f} {tok:8.1f} {tok / base_tok:6.2f} {mean_len:8.1f} {fb:>10s}"
        model = name.split(",")[0] if name != SENTENCE_LEVEL else SENTENCE_LEVEL
        if work and not name.endswith(("constraint off", FAIRSEQ_CACHE)):
            bound = work[SENTENCE_LEVEL] / work[model]
            line += f" {work[model] / 1e6:9.2f} {bound:6.2f} {tok / base_tok / bound:10.2f}"
        print(line)
    for m in SEGMENT_MODELS:
        on, off = rates[f"{m}, constraint on"], rates[f"{m}, constraint off"]
        same = on[2] == off[2] and on[4] == off[4]
        spent, total = constraint[m]
        print(f"{m}: the sentence-count constraint takes {spent:.2f} s of {total:.1f} s of decoding "
              f"({spent / total:.1%}, target <= 10 %); on against off: {1 - on[1] / off[1]:.1%} of the tokens/s"
              + ("" if same else " (the two runs' hypotheses differ in length or fallbacks: not the constraint's "
                 "cost alone)"))
        old = rates.get(f"{m}, {FAIRSEQ_CACHE}")
        if old is not None:
            same = on[2] == old[2] and on[4] == old[4]
            print(f"{m}: preallocated key/value buffers against fairseq's cache: {on[1] / old[1]:.2f}x the tokens/s"
                  + (" (same mean length and fallbacks)" if same else " (the runs differ in length or fallbacks: "
                     "they should not)"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=list(SIZES), default="small",
                    help="size of every model: small (3+3 x 256/1024, default), tiny (2+2 x 32/64, a smoke run)")
    ap.add_argument("--max-segment-tokens", type=int, default=512,
                    help="the segment models' segments: at most N tokens a side (Bao et al. 2021: 512)")
    add_speed_args(ap)
    ap.add_argument("--gen-updates", type=int, default=300, help="training updates of the transformer decoded")
    ap.add_argument("--segment-updates", type=int, default=100,
                    help="updates of each segment model after initialising it from the transformer")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--gen-max-tokens", type=int, default=4096,
                    help="source tokens per generation batch, every run (at least --max-segment-tokens)")
    ap.add_argument("--test-docs", type=int, default=None, help="only the first N test documents (a quick check)")
    ap.add_argument("--flop-every", type=int, default=4,
                    help="count the generation FLOPs of every N-th batch (0: no count)")
    ap.add_argument("--data", type=Path, default=None,
                    help="a directory prepared by bench_inference's prepare_data (default: bench-work/inference/data, "
                    "prepared when missing)")
    ap.add_argument("--compare-kv-cache", action="store_true",
                    help="also decode each segment model with fairseq's key/value cache (--fairseq-kv-cache) "
                    "and print the preallocated buffers' speed-up")
    ap.add_argument("--count-flops", choices=list(MODELS), help=argparse.SUPPRESS)  # worker
    args = ap.parse_args()
    if args.gen_max_tokens < args.max_segment_tokens:
        sys.exit(f"--gen-max-tokens {args.gen_max_tokens} is below --max-segment-tokens {args.max_segment_tokens}: "
                 "a batch must hold the longest segment")
    if args.max_segment_tokens > TRAIN_MAX_TOKENS:
        sys.exit(f"--max-segment-tokens {args.max_segment_tokens} is above the training batches' --max-tokens "
                 f"{TRAIN_MAX_TOKENS}")
    data_bin = args.data or prepare_data(INFERENCE_WORK)
    if not (Path(data_bin) / "docctx.json").exists():
        sys.exit(f"--data {data_bin}: not a directory prepared by docctx-prepare (no docctx.json)")
    if args.count_flops:
        count_train_flops(train_argv(data_bin, args.count_flops, args.size, args.max_segment_tokens),
                          args.flop_batches)
        return
    WORK.mkdir(parents=True, exist_ok=True)
    training_speed(data_bin, args)
    if not args.no_generate:
        generation_speed(data_bin, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == TIME_CONSTRAINT:
        generate_timing_constraint(sys.argv[2:])
    else:
        sys.exit(main())
