"""One prepared check of the architectures on one CUDA GPU, in at most 8 minutes.

``python -m benchmarks.gpu_check [--dry-run] [--out DIR]`` (from the repository root) writes
its own toy documents (``benchmarks/toy.py``: a GPU machine gets the checkout and nothing
else), prepares them with ``docctx-prepare`` and, all in this one process (one CUDA start, no
fairseq process start per run):

1. trains every registered architecture at its paper's size (the sizes and options of
   ``bench_models``, ``bench_rnn`` and ``bench_segments``: Transformer base, 6+6 x 512/2048,
   for ``transformer``, ``concat_transformer`` (source and target context), ``han_transformer``
   (Miculicich et al. 2018), ``mht_transformer`` (Zhang et al. 2021), ``doc2doc_transformer``
   (Sun et al. 2022) and ``g_transformer`` (Bao et al. 2021; both ``--doc-mode segments``);
   4+4 x 512/2048 for ``qcn_transformer`` with its PCC criterion (Yang et al. 2019), beside a
   ``transformer`` of that size; 600/1000 for ``rnnsearch``, ``hrnn_context`` (Wang et al.
   2017) and ``isg_rnnsearch`` (Kuang & Xiong 2018)) with fairseq-train's own ``main`` for the
   same small number of updates, in ``--fp16`` and in ``--bf16``: fairseq's training words/s
   (``wps`` of the epoch line) and the ratio against ``transformer`` measured in the same run,
   the words/s after the first updates (CUDA's first-call costs left out), the peak GPU memory,
   whether every logged loss is finite, and each model's matrix-product FLOPs per target word
   (``bench_models.count_train_flops``, ``benchmarks/flops.py``), hence the FLOP ceiling of the
   ratio (the transformer's FLOPs per word over the model's) and the ratio over that ceiling;
2. generation tokens/s (fairseq-generate, ``--fp16``): a ``concat_transformer`` with target
   context in document order, its own translations as context (``--target-context
   hypothesis``), against sentence-level generation of the ``transformer``;
3. ``docctx-export ctranslate2 --quantization float16`` of those two models decoded by
   ``docctx-translate --engine ctranslate2`` against ``docctx-translate --fp16`` (tokens/s);
4. writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out`` (default
   ``bench-work/gpu_check``), headed with the card, torch and CUDA versions and the targets:
   each context model at >= 0.9 of its FLOP ceiling against ``transformer``, and
   ``han_transformer`` at >= 0.88x ``transformer`` (Miculicich et al. 2018, section 4.1: 2.3K
   against 2.6K tokens/s).

Each part has a deadline within the 8 minutes; a run that would pass it (its expected time:
the longest run of its part so far) is skipped and listed as skipped. Progress lines carry
the seconds since the start.

fairseq 0.12's ``--bf16`` sets ``--tpu`` (``fairseq/options.py``); ``fairseq-train --user-dir
fairseq_docctx`` runs it on the trainer's device where ``torch_xla`` is missing
(``fairseq_docctx/bf16.py``). The check calls fairseq-train's ``main`` directly and applies
the same step to each configuration (:func:`training_cfg`).

``--dry-run`` runs the same code on the CPU at tiny sizes, a few updates, in seconds, training
in bfloat16 through fairseq's own ``--bf16`` path (``FP16Optimizer`` without loss scaling;
``--fp16`` needs CUDA), and writes the same files with ``"dry_run": true``: a check that the
script works and that every architecture trains under fairseq's bf16, not a measurement.

On the GPU machine (Python 3.12, a CUDA PyTorch, no network, no fairseq), install the wheels
that ``benchmarks/device_wheels.sh`` downloads beforehand into ``.whl/`` (docs/benchmarks.md).
"""
import argparse
import contextlib
import gc
import io
import json
import logging
import math
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

from benchmarks import bench_models, bench_rnn, bench_segments
from benchmarks.toy import prepare_command, write_toy_documents

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench-work" / "gpu_check"
USER_DIR = ["--user-dir", str(REPO / "fairseq_docctx")]
BASELINE = "transformer"
#: the transformer of qcn_transformer's size (Yang et al. 2019, section 4.1: 4+4 x 512)
QCN_BASELINE = "transformer (QCN's size)"
#: the registered architectures the check trains, in the order of its tables
ARCHITECTURES = ("transformer", "concat_transformer", "han_transformer", "qcn_transformer", "mht_transformer",
                 "rnnsearch", "hrnn_context", "isg_rnnsearch", "doc2doc_transformer", "g_transformer")
#: the models whose ratio over their FLOP ceiling has a target
CONTEXT_MODELS = ARCHITECTURES[1:5] + ARCHITECTURES[6:]
RNN_RUNS = {"rnnsearch": "rnnsearch_kx", "hrnn_context": "hrnn", "isg_rnnsearch": "isg"}  # bench_rnn's names
TARGET_EFFICIENCY = 0.9
TARGET_HAN = 0.88
TARGETS = {
    "efficiency": f"each context model's training words/s ratio against transformer >= {TARGET_EFFICIENCY} of its "
                  "FLOP ceiling (the transformer's matrix-product FLOPs per target word over the model's)",
    "han_transformer": f"han_transformer >= {TARGET_HAN}x transformer's training words/s (Miculicich et al. 2018, "
                       "section 4.1: 2.3K against 2.6K tokens/s on a GPU)",
}
#: the concat model of the generation and CTranslate2 parts: K=3, source and target context
CONCAT_GEN = ["--context-size", "3", "--context-sides", "both"]

GPU = {
    "precisions": ["fp16", "bf16"], "updates": 30, "warmup_updates": 5, "flop_batches": 3,
    "max_tokens": 4096, "segment_tokens": 512,  # Bao et al. 2021: segments of at most 512 tokens
    "transformer_size": bench_models.SIZES["base"], "qcn_size": bench_models.SIZES["qcn-paper"],
    "rnn_size": "paper", "gen_updates": 200, "beam": 4, "gen_batch": 32, "ct2_quantization": "float16",
    "data": {"docs": [600, 4, 32], "doc_sentences": [10, 40], "words": 8000, "lengths": [5, 30]},
    # seconds since the start by which each part ends (8 minutes in all)
    "deadlines": {"prepare": 40, "training": 290, "flops": 330, "generation": 410, "ctranslate2": 465},
}
DRY = {
    "precisions": ["bf16"], "updates": 2, "warmup_updates": 1, "flop_batches": 1,
    "max_tokens": 256, "segment_tokens": 64,
    "transformer_size": bench_segments.SIZES["tiny"], "qcn_size": bench_segments.SIZES["tiny"],
    "rnn_size": "tiny", "gen_updates": 2, "beam": 2, "gen_batch": 4, "ct2_quantization": "float32",
    "data": {"docs": [40, 2, 3], "doc_sentences": [2, 6], "words": 40, "lengths": [3, 10]},
    "deadlines": {part: math.inf for part in ("prepare", "training", "flops", "generation", "ctranslate2")},
}


class Clock:
    """Seconds since the start, progress lines, and the skip rule: a run of a part is started
    only if the longest run of that part so far still fits before the part's deadline."""

    def __init__(self, deadlines):
        self.start = time.perf_counter()
        self.deadlines = deadlines
        self.longest = {}
        self.skipped = []

    def now(self):
        return time.perf_counter() - self.start

    def log(self, msg):
        print(f"[{self.now():6.1f}s] {msg}", flush=True)

    def fits(self, part, what):
        """Whether ``what`` of ``part`` can start; if not, it is listed as skipped."""
        expected = self.longest.get(part, 0.0)
        if self.now() + expected <= self.deadlines[part]:
            return True
        self.skipped.append(f"{part}: {what} (at {self.now():.0f} s; its part ends at {self.deadlines[part]:.0f} s, "
                            f"a run of it took up to {expected:.0f} s)")
        self.log(f"skipped {what}: the {part} part's time is spent")
        return False

    @contextlib.contextmanager
    def timed(self, part):
        t = self.now()
        try:
            yield
        finally:
            self.longest[part] = max(self.longest.get(part, 0.0), self.now() - t)


class Records(logging.Handler):
    """The messages of fairseq's loggers while a run is on (fairseq-train's ``train_inner`` and
    ``train`` lines, fairseq-generate's ``Translated`` line, the fp16 overflow notes)."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append((record.name, record.getMessage()))

    @contextlib.contextmanager
    def capture(self):
        self.messages = []
        yield self.messages


#: packages fairseq imports when it registers its tasks and criteria, for tasks the check does not
#: run (audio classification, sentence prediction), with the submodules it imports from
STAND_INS = {"sklearn": ("metrics",), "scipy": ("stats",)}


def _unavailable(module, name):
    def unavailable(*args, **kwargs):
        raise ImportError(f"{module}.{name}: {module.split('.')[0]} is not installed (benchmarks.gpu_check put "
                          "an empty stand-in in its place)")
    return unavailable


def place_stand_ins():
    """An empty stand-in in ``sys.modules`` for each package of :data:`STAND_INS` that is not
    installed, whose every name is a function raising ImportError when called: fairseq imports
    scikit-learn and SciPy at import time for tasks the check does not run, and the device
    wheels then need not carry them (~50 MB). Returns the packages stood in for."""
    import importlib.machinery
    import importlib.util
    import types

    placed = []
    for package, submodules in STAND_INS.items():
        if importlib.util.find_spec(package) is not None:
            continue
        for name in (package, *(f"{package}.{sub}" for sub in submodules)):
            module = types.ModuleType(name, f"an empty stand-in put in place by benchmarks.gpu_check ({package} is "
                                            "not installed)")

            def attribute(attr, name=name):
                if attr.startswith("__"):
                    raise AttributeError(attr)
                return _unavailable(name, attr)

            module.__getattr__ = attribute
            module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=name == package)
            sys.modules[name] = module
        for sub in submodules:
            setattr(sys.modules[package], sub, sys.modules[f"{package}.{sub}"])
        placed.append(package)
    return placed


def setup_logging(out):
    """fairseq's log lines into ``out/gpu_check.log`` (not the console) and into a
    :class:`Records` handler; returns the handler."""
    import fairseq_cli.train  # noqa: F401  (its logging.basicConfig runs at import)

    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    file_handler = logging.FileHandler(out / "gpu_check.log", mode="w")
    file_handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    records = Records()
    root.addHandler(file_handler)
    root.addHandler(records)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # hydra's and torch's warnings go to the log file too
    return records


def device_info(dry_run):
    import torch

    import fairseq

    cuda = torch.cuda.is_available()
    return {
        "card": torch.cuda.get_device_name(0) if cuda else None,
        "cuda_devices": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__, "cuda": torch.version.cuda, "fairseq": getattr(fairseq, "__version__", None),
        "python": platform.python_version(), "cpu_threads": torch.get_num_threads(), "dry_run": dry_run,
    }


def prepare(out, s, clock):
    """Toy documents (``benchmarks/toy.py``) binarized by docctx-prepare (in this process) into
    ``out/data``, the references copied as the drafts stream MHT reads
    (``bench_models.ensure_drafts``)."""
    from fairseq_docctx.cli.prepare import cli_main as prepare_main

    d = s["data"]
    raw, data_bin = out / "raw", out / "data"
    for p in (raw, data_bin):
        shutil.rmtree(p, ignore_errors=True)
    write_toy_documents(raw, seed=0, docs=tuple(d["docs"]), doc_sentences=tuple(d["doc_sentences"]),
                        words=d["words"], lengths=tuple(d["lengths"]))
    with contextlib.redirect_stdout(io.StringIO()):
        run_cli(prepare_main, [str(a) for a in prepare_command(raw, data_bin)[1:]])
    drafts = bench_models.ensure_drafts(data_bin, ["train"], src="src", tgt="tgt")
    sentences = {split: len((raw / f"{split}.src").read_text().splitlines()) for split in ("train", "valid", "test")}
    clock.log(f"prepared toy documents: {sentences} sentences -> {data_bin}")
    return raw, data_bin, {"sentences": sentences, **d, "drafts": bench_models.drafts_note(drafts)}


def run_cli(cli_main, argv):
    """A docctx command's ``cli_main`` in this process; a non-zero exit raises."""
    try:
        cli_main(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"exit code {e.code}: {' '.join(argv)}") from None


def size_label(argv):
    """A short label of a run's size from its fairseq-train options."""
    def opt(name):
        return argv[argv.index(name) + 1] if name in argv else None

    if opt("--encoder-layers"):
        return f"{opt('--encoder-layers')}+{opt('--decoder-layers')} x {opt('--encoder-embed-dim')}/" \
               f"{opt('--encoder-ffn-embed-dim')}"
    return f"embed {opt('--encoder-embed-dim')}, hidden {opt('--encoder-hidden-size')}, " \
           f"attention {opt('--attention-dim')}"


def training_runs(data_bin, s, dry_run, save_dir):
    """Run name -> (architecture, fairseq-train argv without precision and updates): the
    architectures of :data:`ARCHITECTURES` and :data:`QCN_BASELINE` (where QCN's size is not the
    transformer's) with the sizes and options
    of ``bench_models``, ``bench_segments`` and ``bench_rnn``, the check's batches (``--max-tokens``), every
    loss logged (``--log-interval 1``), nothing saved, one device (fairseq-train's ``main`` is
    called directly, without its launcher of one process per GPU)."""
    t, q = s["transformer_size"], s["qcn_size"]
    segments = ["--max-segment-tokens", str(s["segment_tokens"]), "--criterion", "label_smoothed_cross_entropy"]
    family = {
        "transformer": ("transformer", bench_models.MODELS["transformer"], t),
        QCN_BASELINE: ("transformer", bench_models.MODELS["transformer"], q),
        "concat_transformer": ("concat_transformer", [*bench_models.MODELS["concat"], "--context-sides", "both"], t),
        "han_transformer": ("han_transformer", bench_models.MODELS["han"], t),
        "qcn_transformer": ("qcn_transformer", bench_models.MODELS["qcn"], q),
        "mht_transformer": ("mht_transformer", bench_models.MODELS["mht"], t),
    }
    if q == t:  # the dry run's one size: the transformer is QCN's baseline
        del family[QCN_BASELINE]
    runs = {name: (arch, [str(data_bin), *USER_DIR, "--task", "document_translation", *opts, *size,
                          *bench_models.COMMON])
            for name, (arch, opts, size) in family.items()}
    for name, key in RNN_RUNS.items():
        runs[name] = (name, bench_rnn.train_argv(data_bin, key, s["rnn_size"]))
    for name in bench_segments.SEGMENT_MODELS:
        runs[name] = (name, [str(data_bin), *USER_DIR, "--task", "document_translation",
                             *bench_segments.MODELS[name], *segments, *t, *bench_models.COMMON])
    device = ["--cpu"] if dry_run else []
    check = ["--max-tokens", str(s["max_tokens"]), "--log-interval", "1", "--no-save", "--disable-validation",
             "--save-dir", str(save_dir), "--seed", "1", "--distributed-world-size", "1", *device]
    return {name: (arch, [a for a in argv if a != "--cpu"] + check) for name, (arch, argv) in runs.items()}


def precision_args(precision):
    return {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}[precision]


def training_cfg(argv):
    """fairseq-train's configuration of ``argv``, as ``fairseq-train --user-dir
    fairseq_docctx`` runs it: ``--bf16`` on the trainer's device (the plugin's
    :func:`~fairseq_docctx.bf16.bf16_off_tpu`)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_docctx.bf16 import bf16_off_tpu

    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    bf16_off_tpu(cfg)
    return cfg


def free_memory():
    """The last run's GPU memory released and the peak counter reset (nothing on the CPU,
    where a collection costs ~0.2 s of fairseq's configuration objects a call)."""
    import torch

    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def parse_training(messages, warmup):
    """From the log of one fairseq-train run: fairseq's words/s of the last epoch line, the
    words/s of the updates after the first ``warmup`` (each update's ``wpb`` and ``wps``), the
    logged losses and the fp16 overflow notes."""
    inner = [m for n, m in messages if n == "train_inner"]
    epoch = [m for n, m in messages if n == "train"]

    def fields(line):
        return dict(re.findall(r"(\w+)=([^,\s]+)", line))

    losses = [float(fields(m)["loss"]) for m in inner if "loss" in fields(m)]
    losses += [float(x) for m in epoch for x in re.findall(r"\| loss ([^\s|]+)", m)]
    wps = [float(x) for m in epoch for x in re.findall(r"\| wps ([\d.]+)", m)]
    steady_words = steady_seconds = 0.0
    for m in inner:
        f = fields(m)
        if int(float(f.get("num_updates", 0))) > warmup and float(f.get("wps", 0)) > 0:
            steady_words += float(f["wpb"])
            steady_seconds += float(f["wpb"]) / float(f["wps"])
    overflows = sum("overflow" in m for _, m in messages)
    return {
        "wps": wps[-1] if wps else None,
        "wps_steady": steady_words / steady_seconds if steady_seconds else None,
        "epochs": len(epoch), "losses": losses, "losses_finite": bool(losses) and all(map(math.isfinite, losses)),
        "overflow_notes": overflows,
    }


def train_once(argv, records, warmup):
    """One fairseq-train run (fairseq_cli.train.main) in this process: its figures (see
    :func:`parse_training`), the peak GPU memory and the seconds it took, or the error."""
    import torch
    from fairseq_cli import train

    free_memory()
    t = time.perf_counter()
    with records.capture() as messages:
        try:
            train.main(training_cfg(argv))
            error = None
        except (Exception, SystemExit) as e:  # one run's failure is reported, the check goes on
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    result = parse_training(messages, warmup)
    result["seconds"] = round(time.perf_counter() - t, 2)
    result["peak_memory_mib"] = (round(torch.cuda.max_memory_allocated() / 2**20, 1)
                                 if torch.cuda.is_available() else None)
    if error:
        result["error"] = error
    free_memory()
    return result


def training(runs, s, records, clock):
    """Part 1: every run in every precision (all runs of the first precision first, the
    baselines first within each), the FLOPs per word of each model."""
    updates = ["--max-update", str(s["updates"])]
    results = {name: {"arch": arch, "size": size_label(argv), "precisions": {}} for name, (arch, argv) in runs.items()}
    first = s["precisions"][0]
    # the process's CUDA start, cuBLAS handles and allocator pools go to an untimed run
    warm = train_once([*runs[BASELINE][1], *precision_args(first), "--max-update", str(s["warmup_updates"])],
                      records, 0)
    clock.log(f"warm-up run ({BASELINE}, {first}, {s['warmup_updates']} updates): {warm['seconds']} s"
              + (f", {warm['error']}" if "error" in warm else ""))
    for precision in s["precisions"]:
        for name, (arch, argv) in runs.items():
            if not clock.fits("training", f"{name} ({precision})"):
                results[name]["precisions"][precision] = {"skipped": "the training part's time was spent"}
                continue
            with clock.timed("training"):
                r = train_once([*argv, *precision_args(precision), *updates], records, s["warmup_updates"])
            results[name]["precisions"][precision] = r
            clock.log(f"{name} ({precision}): " + (r["error"] if "error" in r else
                      f"{fmt(r['wps'], '.0f')} words/s, after warm-up {fmt(r['wps_steady'], '.0f')}, peak "
                      f"{r['peak_memory_mib']} MiB, losses finite: {r['losses_finite']}, {r['seconds']} s"))
    add_ratios(results)
    count_flops(runs, results, s, clock)
    return results


def add_ratios(results):
    """Each run's words/s over its baseline's in the same precision (fairseq's figure and the
    one after warm-up), and over rnnsearch's for the two RNN context models."""
    for name, res in results.items():
        base = QCN_BASELINE if res["arch"] == "qcn_transformer" and QCN_BASELINE in results else BASELINE
        res["baseline"] = base
        for precision, r in res["precisions"].items():
            b = results[base]["precisions"].get(precision, {})
            for key, ratio in (("wps", "ratio"), ("wps_steady", "ratio_steady")):
                r[ratio] = r[key] / b[key] if r.get(key) and b.get(key) else None
            if name in ("hrnn_context", "isg_rnnsearch"):
                rnn = results["rnnsearch"]["precisions"].get(precision, {})
                r["ratio_vs_rnnsearch"] = r["wps"] / rnn["wps"] if r.get("wps") and rnn.get("wps") else None


def count_flops(runs, results, s, clock):
    """Matrix-product FLOPs per target word of each run (the first precision; the count does
    not depend on it), over its first ``flop_batches`` batches (``bench_models.count_train_flops``),
    then each run's FLOP ceiling (its baseline's FLOPs per word over its own) and its ratio
    over that ceiling."""
    precision = precision_args(s["precisions"][0])
    for name, (arch, argv) in runs.items():
        if not clock.fits("flops", f"FLOP count of {name}"):
            continue
        with clock.timed("flops"):
            free_memory()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    per_word, src_per_tgt = bench_models.count_train_flops(
                        [*argv, *precision, "--max-update", "1"], s["flop_batches"])
                results[name]["mflop_per_word"] = per_word / 1e6
                results[name]["src_per_tgt"] = src_per_tgt
            except Exception as e:  # reported, not fatal
                results[name]["flops_error"] = f"{type(e).__name__}: {e}"
            free_memory()
    for name, res in results.items():
        base = results[res["baseline"]].get("mflop_per_word")
        if res.get("mflop_per_word") and base:
            res["ceiling"] = base / res["mflop_per_word"]
            for r in res["precisions"].values():
                if r.get("ratio"):
                    r["efficiency"] = r["ratio"] / res["ceiling"]
                if r.get("ratio_steady"):
                    r["efficiency_steady"] = r["ratio_steady"] / res["ceiling"]
    clock.log("FLOPs per target word: " + ", ".join(
        f"{n} {r['mflop_per_word']:.1f} M" for n, r in results.items() if r.get("mflop_per_word")))


def verdicts(results):
    """Each run's targets: met, not met, or unknown (a figure missing), per precision."""
    for name, res in results.items():
        for r in res["precisions"].values():
            v = {}
            if name in CONTEXT_MODELS:
                e = r.get("efficiency")
                v["efficiency"] = None if e is None else e >= TARGET_EFFICIENCY
            if name == "han_transformer":
                v["han_ratio"] = None if r.get("ratio") is None else r["ratio"] >= TARGET_HAN
            r["targets_met"] = v


def train_checkpoint(argv, name, updates, out, records, clock, precision):
    """``name`` trained ``updates`` updates (inverse square root schedule) and saved:
    ``out/ckpt-<name>/checkpoint_last.pt``, or None where it failed."""
    save = out / f"ckpt-{name}"
    shutil.rmtree(save, ignore_errors=True)
    kept = [a for a in argv if a not in ("--no-save",)]
    r = train_once([*kept, *precision_args(precision), "--max-update", str(updates), "--lr-scheduler", "inverse_sqrt",
                    "--warmup-updates", str(max(1, updates // 2)), "--lr", "1e-3", "--no-epoch-checkpoints",
                    "--save-dir", str(save), "--log-interval", "10"], records, 0)
    ckpt = save / "checkpoint_last.pt"
    clock.log(f"trained {name} for {updates} updates to decode: {r['seconds']} s"
              + (f", {r['error']}" if "error" in r else ""))
    return ckpt if ckpt.exists() else None


def generate(argv, records):
    """fairseq-generate (fairseq_cli.generate.main) in this process: (sentences, generated
    tokens, seconds, sentences/s, tokens/s) of its ``Translated`` line."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate as fairseq_generate

    free_memory()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), argv))
    with records.capture() as messages, contextlib.redirect_stdout(io.StringIO()):
        fairseq_generate.main(cfg)
    line = [m for _, m in messages if m.startswith("Translated ")][-1]
    n, tokens, secs, sent_rate, tok_rate = re.search(
        r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s, ([\d.]+) tokens/s\)",
        line).groups()
    return {"sentences": int(n.replace(",", "")), "tokens": int(tokens.replace(",", "")), "seconds": float(secs),
            "sentences_per_s": float(sent_rate), "tokens_per_s": float(tok_rate)}


def generation(data_bin, ckpts, s, dry_run, records, clock):
    """Part 2: sentence-level fairseq-generate of the transformer against the concat model in
    document order with its own translations as target context (tokens/s, same test split,
    beam and batch size)."""
    device = ["--cpu"] if dry_run else ["--fp16"]
    common = [str(data_bin), *USER_DIR, "--gen-subset", "test", "--beam", str(s["beam"]), "--batch-size",
              str(s["gen_batch"]), "--max-len-a", "1.2", "--max-len-b", "10", "--required-batch-size-multiple", "1",
              "--num-workers", "0", "--quiet", *device]  # a loader worker's shutdown waits up to 5 s
    runs = {
        "transformer, sentence level": (ckpts.get("transformer"), ["--task", "translation"]),
        "concat_transformer (K=3, both sides), document order": (
            ckpts.get("concat_transformer"),
            ["--task", "document_translation", *CONCAT_GEN, "--target-context", "hypothesis"]),
    }
    out = {}
    for name, (ckpt, task) in runs.items():
        if ckpt is None:
            out[name] = {"skipped": "no checkpoint"}
            continue
        if not clock.fits("generation", f"generation: {name}"):
            out[name] = {"skipped": "the generation part's time was spent"}
            continue
        with clock.timed("generation"):
            try:
                out[name] = generate([*common, *task, "--path", str(ckpt)], records)
                clock.log(f"{name}: {out[name]['tokens_per_s']:.0f} tokens/s")
            except Exception as e:
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                clock.log(f"{name}: {out[name]['error']}")
    base, doc = out[list(runs)[0]], out[list(runs)[1]]
    ratio = doc["tokens_per_s"] / base["tokens_per_s"] if "tokens_per_s" in doc and "tokens_per_s" in base else None
    return {"runs": out, "ratio": ratio, "beam": s["beam"], "batch_size": s["gen_batch"],
            "precision": "fp32 (CPU)" if dry_run else "fp16"}


def ct2_unavailable(dry_run):
    """Why CTranslate2 cannot decode here (None when it can): not installed, or, on a GPU, no
    CUDA device for it or no cuBLAS of the CUDA major version it was built with."""
    try:
        import ctranslate2
    except ImportError as e:
        return f"ctranslate2 is not installed ({e})"
    if dry_run:
        return None
    if ctranslate2.get_cuda_device_count() < 1:
        return f"ctranslate2 {ctranslate2.__version__} sees no CUDA device"
    import ctypes

    for lib in ("libcublas.so.12",):  # CTranslate2 4.x's GPU build loads CUDA 12's cuBLAS at run time
        try:
            ctypes.CDLL(lib)
        except OSError:
            return (f"ctranslate2 {ctranslate2.__version__} loads {lib} (CUDA 12's cuBLAS), which this machine "
                    f"does not have (torch's CUDA: {__import__('torch').version.cuda})")
    return None


def translate_rate(argv):
    """docctx-translate in this process: (sentences/s as it reports it, tokens per sentence of
    its output, sentences), the output being ``argv``'s ``-o`` file."""
    from fairseq_docctx.cli.translate import cli_main as translate_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        run_cli(translate_main, argv)
    rate = float(re.findall(r"\(([\d.]+) sentences/s\)", err.getvalue())[-1])
    lines = Path(argv[argv.index("-o") + 1]).read_text(encoding="utf-8").splitlines()
    tokens = sum(len(ln.split()) + 1 for ln in lines)  # + EOS, as fairseq counts generated tokens
    return rate, tokens / max(len(lines), 1), len(lines)


def ctranslate2_part(raw, data_bin, ckpts, s, dry_run, out, clock):
    """Part 3: each checkpoint exported to CTranslate2 (``s['ct2_quantization']``) and decoded
    by docctx-translate with both engines on the raw test documents (tokens/s, ratio)."""
    from fairseq_docctx.cli.export import cli_main as export_main

    why = ct2_unavailable(dry_run)
    if why:
        clock.log(f"CTranslate2 part skipped: {why}")
        clock.skipped.append(f"ctranslate2: {why}")
        return {"skipped": why}
    device = ["--cpu"] if dry_run else []
    results = {}
    for name in ("transformer", "concat_transformer"):
        ckpt = ckpts.get(name)
        if ckpt is None:
            results[name] = {"skipped": "no checkpoint"}
            continue
        if not clock.fits("ctranslate2", f"CTranslate2 export and decoding of {name}"):
            results[name] = {"skipped": "the CTranslate2 part's time was spent"}
            continue
        r = {}
        with clock.timed("ctranslate2"):
            try:
                folder = out / f"ct2-{name}"
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    run_cli(export_main, ["ctranslate2", str(ckpt), str(folder), "--data", str(data_bin),
                                          "--quantization", s["ct2_quantization"], "--force"])
                common = [str(raw / "test.src"), "--data", str(data_bin), "--beam", str(s["beam"]),
                          "--batch-size", str(s["gen_batch"]), *device]
                for engine, path, extra in (("fairseq", ckpt, [] if dry_run else ["--fp16"]),
                                            ("ctranslate2", folder, ["--engine", "ctranslate2"])):
                    rate, per_sentence, n = translate_rate([*common, "--path", str(path), *extra,
                                                            "-o", str(out / f"translate-{name}-{engine}.tgt")])
                    r[engine] = {"sentences": n, "sentences_per_s": rate, "tokens_per_sentence": per_sentence,
                                 "tokens_per_s": rate * per_sentence}
                r["ratio"] = r["ctranslate2"]["tokens_per_s"] / r["fairseq"]["tokens_per_s"]
                clock.log(f"{name}: fairseq {r['fairseq']['tokens_per_s']:.0f}, CTranslate2 "
                          f"{r['ctranslate2']['tokens_per_s']:.0f} tokens/s ({r['ratio']:.2f}x)")
            except Exception as e:
                r["error"] = f"{type(e).__name__}: {e}"
                clock.log(f"{name}: {r['error']}")
        results[name] = r
    results["quantization"] = s["ct2_quantization"]
    results["fairseq_precision"] = "fp32 (CPU)" if dry_run else "fp16"
    return results


def fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def markdown(report):
    """The report as a Markdown page: header, targets, the training table, generation, CTranslate2."""
    d, s = report["device"], report["settings"]
    lines = [f"# GPU check{' (dry run on the CPU: no GPU figure)' if report['dry_run'] else ''}", "",
             f"- card: {d['card'] or 'none (CPU)'}", f"- torch {d['torch']}, CUDA {d['cuda'] or 'none'}, "
             f"fairseq {d['fairseq']}, Python {d['python']}",
             f"- {report['date']}, {report['seconds']:.0f} s in all", "",
             "Targets:", ""] + [f"- {t}" for t in report["targets"].values()] + [
        "", f"Training: {s['updates']} updates a run, --max-tokens {s['max_tokens']}, toy documents "
            f"({report['data']['sentences']['train']} training sentences); words/s: fairseq's (`wps` of the epoch "
            f"line); after warm-up: updates {s['warmup_updates'] + 1}-{s['updates']}; ratio: against the baseline "
            f"in the same precision; ceiling: the baseline's matrix-product FLOPs per target word over the model's; "
            f"efficiency: ratio / ceiling.", "",
        "| model | size | precision | words/s | ratio | after warm-up | ratio | MFLOP/word | ceiling | efficiency "
        "| targets | peak GPU MiB | losses finite |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, res in report["training"].items():
        for precision, r in res["precisions"].items():
            if "skipped" in r or "error" in r:
                lines.append(f"| {name} | {res['size']} | {precision} | {r.get('skipped') or r.get('error')} "
                             "| | | | | | | | | |")
                continue
            met = ", ".join(f"{k}: {'met' if v else 'not met' if v is not None else '?'}"
                            for k, v in r.get("targets_met", {}).items())
            lines.append(
                f"| {name} | {res['size']} | {precision} | {fmt(r['wps'], '.0f')} | {fmt(r['ratio'])} "
                f"| {fmt(r['wps_steady'], '.0f')} | {fmt(r['ratio_steady'])} | {fmt(res.get('mflop_per_word'), '.1f')} "
                f"| {fmt(res.get('ceiling'))} | {fmt(r.get('efficiency'))} | {met} "
                f"| {fmt(r['peak_memory_mib'], '.0f', 'n/a')} | {'yes' if r['losses_finite'] else 'NO'} |")
    g = report["generation"]
    lines += ["", f"## Generation ({g['precision']}, beam {g['beam']}, --batch-size {g['batch_size']})", "",
              "| run | sentences | tokens/s | ratio |", "| --- | --- | --- | --- |"]
    base = next(iter(g["runs"].values())).get("tokens_per_s")  # sentence-level generation
    for name, r in g["runs"].items():
        if "tokens_per_s" not in r:
            lines.append(f"| {name} | {r.get('skipped') or r.get('error')} | | |")
            continue
        lines.append(f"| {name} | {r['sentences']} | {r['tokens_per_s']:.0f} "
                     f"| {fmt(r['tokens_per_s'] / base if base else None)} |")
    c = report["ctranslate2"]
    lines += ["", "## CTranslate2 against fairseq (docctx-translate)", ""]
    if "skipped" in c:
        lines.append(f"Skipped: {c['skipped']}.")
    else:
        lines += [f"CTranslate2 {c['quantization']} against fairseq {c['fairseq_precision']}.", "",
                  "| model | fairseq tokens/s | CTranslate2 tokens/s | ratio |", "| --- | --- | --- | --- |"]
        for name in ("transformer", "concat_transformer"):
            r = c.get(name, {})
            if "ratio" in r:
                lines.append(f"| {name} | {r['fairseq']['tokens_per_s']:.0f} | {r['ctranslate2']['tokens_per_s']:.0f} "
                             f"| {r['ratio']:.2f} |")
            else:
                lines.append(f"| {name} | {r.get('skipped') or r.get('error')} | | |")
    if report["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {x}" for x in report["skipped"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="the same code on the CPU at tiny sizes, fp32, a few updates (a check that it runs)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device (torch.cuda.is_available() is False); --dry-run runs on the CPU")
    s = DRY if args.dry_run else GPU
    clock = Clock(s["deadlines"])
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    stand_ins = place_stand_ins()
    records = setup_logging(out)
    info = device_info(args.dry_run)
    info["stand_ins"] = stand_ins
    clock.log(f"{info['card'] or 'CPU (dry run)'}, torch {info['torch']}, CUDA {info['cuda']}, fairseq "
              f"{info['fairseq']}; writing to {out}")
    raw, data_bin, data = prepare(out, s, clock)
    runs = training_runs(data_bin, s, args.dry_run, out / "no-save")
    results = training(runs, s, records, clock)
    verdicts(results)
    first = s["precisions"][0]
    ckpts = {}
    for name, gen_argv in (("transformer", runs[BASELINE][1]),
                           ("concat_transformer", runs["concat_transformer"][1])):
        if clock.fits("generation", f"training {name} to decode"):
            with clock.timed("generation"):
                ckpts[name] = train_checkpoint(gen_argv, name, s["gen_updates"], out, records, clock, first)
    gen = generation(data_bin, ckpts, s, args.dry_run, records, clock)
    ct2 = ctranslate2_part(raw, data_bin, ckpts, s, args.dry_run, out, clock)
    report = {
        "dry_run": args.dry_run, "device": info, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "targets": TARGETS, "architectures": list(ARCHITECTURES),
        "settings": {k: v for k, v in s.items() if k not in ("transformer_size", "qcn_size", "deadlines")},
        "data": data, "training": results, "generation": gen,
        "ctranslate2": ct2, "skipped": clock.skipped, "seconds": round(clock.now(), 1),
    }
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "gpu_check.md").write_text(markdown(report))
    clock.log(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    return report


if __name__ == "__main__":
    main()
