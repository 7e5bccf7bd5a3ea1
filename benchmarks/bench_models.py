"""Training speed of the document-level architectures against a sentence-level
`transformer` of the same size, measured in one run on the same data.

Data: IWSLT17 TED En-De dev talks (../shared/data/maruf-ende, 8,967 sentences), SentencePiece
4000. Every model trains for the same number of updates with the same batches settings;
fairseq's own training words/second (`wps` of the last `train` line) is compared. Runs
alternate (A B A B ...) and the best of the repeats is kept, to damp machine noise.

Usage (from the repository root): python -m benchmarks.bench_models [--updates 60] [--repeats 2] [--size small|qcn-paper|base]
       [--models qcn han concat mht mht-frozen] [--flop-batches N (--updates)]
Targets: qcn_transformer (with the PCC regularizer) >= 0.8x transformer; joint HAN
(han_transformer) >= 0.8x; mht_transformer >= 0.5x and >= 0.9 of the ratio its FLOPs allow
(efficiency >= 0.9), at the paper's size (Transformer base, Zhang et al. 2021, §4.3:
``--size base``).

``mht`` is the Multi-Hop Transformer (Zhang et al. 2021, §3-4: K=3, multi-hop context on both
sides) with its sentence encoders trained with the rest (nothing initialises them here, so
the default ``--freeze-sentence-encoders initialised`` fixes none); ``mht-frozen`` the same with
them fixed (``--freeze-sentence-encoders``, no backward pass through them), as the paper's
pipeline trains it once they are initialised (docs/mht.md).
MHT reads drafts, a sentence-level model's translations (§3.1). Unless the data directory
holds real drafts (made by ``docctx-drafts``), the script writes the references of each split
as its drafts stream (:func:`ensure_drafts`): the speed depends on the drafts' lengths only,
and a trained sentence model's drafts are about as long as the references.

Next to the speed, each model's matrix-product work is counted (torch's FlopCounterMode with
the fused CPU attention kernel, benchmarks/flops.py: matmuls, linear layers and attention,
forward + backward, one training step per batch) over its first
--flop-batches batches (by default the --updates batches whose speed is measured: the work
per word differs from batch to batch), per target word, with the source words per target word of those
batches. On a machine where training is bound by matrix products (a CPU), the transformer's
FLOPs per word over the model's is the highest speed ratio the model can reach while doing
the same arithmetic; "efficiency" is the model's achieved FLOP rate over the transformer's.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "maruf-ende" / "IWSLT2017"
WORK = REPO / "bench-work" / "models"
BIN = Path(sys.executable).parent

def size_args(layers, dim, ffn, heads):
    return ["--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
            "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn),
            "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads),
            "--share-all-embeddings", "--dropout", "0.1"]


# every model of a run (and its transformer baseline) gets the same size
SIZES = {
    "small": size_args(3, 256, 1024, 4),  # CPU-friendly default
    "qcn-paper": size_args(4, 512, 2048, 8),  # Yang et al. 2019
    "base": size_args(6, 512, 2048, 8),  # Transformer base: Miculicich et al. 2018 (HAN)
}
COMMON = [
    "--optimizer", "adam", "--lr", "5e-4", "--max-tokens", "2048", "--cpu", "--seed", "1",
    "--label-smoothing", "0.1", "--log-format", "simple", "--log-interval", "1000",
    "--no-save", "--disable-validation", "--num-workers", "0",
]
MODELS = {
    "transformer": ["--arch", "transformer", "--context-size", "0",
                    "--criterion", "label_smoothed_cross_entropy"],
    "qcn": ["--arch", "qcn_transformer", "--context-size", "3",
            "--criterion", "label_smoothed_cross_entropy_pcc"],
    "concat": ["--arch", "concat_transformer", "--context-size", "3",
               "--criterion", "label_smoothed_cross_entropy"],
    # joint HAN (HAN encoder + HAN decoder over the previous target sentences)
    "han": ["--arch", "han_transformer", "--context-size", "3", "--context-sides", "both",
            "--criterion", "label_smoothed_cross_entropy"],
    # Multi-Hop Transformer (Zhang et al. 2021): K=3 previous source sentences and drafts,
    # multi-hop on both sides, sentence encoders trained or fixed (the pipeline's, once initialised)
    "mht": ["--arch", "mht_transformer", "--context-size", "3", "--context-sides", "src,draft",
            "--criterion", "label_smoothed_cross_entropy"],
    "mht-frozen": ["--arch", "mht_transformer", "--context-size", "3", "--context-sides", "src,draft",
                   "--freeze-sentence-encoders", "--criterion", "label_smoothed_cross_entropy"],
}
#: the models that read the ``draft`` context side
READS_DRAFTS = ("mht", "mht-frozen")
#: beside a drafts stream this script wrote from the references (see :func:`ensure_drafts`)
STAND_IN_MARK = ".references-as-drafts"


def sh(cmd, cwd=None):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    # idle OpenMP threads sleep instead of spinning: otherwise any other process on a small
    # machine slows training several-fold and the noise swamps the comparison
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout + p.stderr


def prepare():
    data_bin = WORK / "data"
    if not (data_bin / "docctx.json").exists():
        print("preparing IWSLT17 TED dev (SentencePiece 4000) ...", flush=True)
        sh(["docctx-prepare", "-s", "en", "-t", "de", "--joined-dictionary", "--workers", "2",
            "--trainpref", DATA / "concatenated_en2de_dev_{lang}.txt", "--spm-vocab-size", "4000",
            "--destdir", data_bin])
    return data_bin


def ensure_drafts(data_bin, splits, src="en", tgt="de"):
    """A drafts stream (``{split}.{src}-{tgt}.draft.{bin,idx}``, target dictionary, line i =
    draft of source line i) for every split of ``splits`` in the prepared directory
    ``data_bin``, and what it holds: ``"drafts"`` where the directory already has one that this
    function did not write (``docctx-drafts``'s, recorded in ``docctx.json`` under
    ``"drafts"``; used as it is), else ``"references"``: the split's target stream, copied as
    its drafts (written once, marked by a ``.references-as-drafts`` file beside it). For speed
    figures only: MHT's work depends on the drafts' lengths, not on their words."""
    data_bin = Path(data_bin)
    manifest = data_bin / "docctx.json"
    recorded = (json.loads(manifest.read_text(encoding="utf-8")).get("drafts") or {}) if manifest.exists() else {}
    kinds = {}
    for split in splits:
        prefix = data_bin / f"{split}.{src}-{tgt}.draft"
        mark = Path(f"{prefix}{STAND_IN_MARK}")
        complete = all(Path(f"{prefix}.{ext}").is_file() for ext in ("bin", "idx"))
        if complete and (split in recorded or not mark.exists()):
            kinds[split] = "drafts"
            continue
        if not complete:
            mark.write_text("the references of this split, copied by benchmarks/bench_models.py as its drafts "
                            "(for speed figures only)\n", encoding="utf-8")
            ref = data_bin / f"{split}.{src}-{tgt}.{tgt}"
            for ext in ("bin", "idx"):  # the .idx last: a stream is there only when complete
                shutil.copyfile(f"{ref}.{ext}", f"{prefix}.{ext}.tmp")
                os.replace(f"{prefix}.{ext}.tmp", f"{prefix}.{ext}")
        kinds[split] = "references"
    return kinds


def drafts_note(kinds):
    """One line saying what the drafts of a run are."""
    if set(kinds.values()) == {"drafts"}:
        return "drafts: a sentence-level model's translations (docctx-drafts)"
    refs = ", ".join(s for s, k in kinds.items() if k == "references")
    return (f"drafts ({refs}): copies of the references, standing in for a sentence-level model's "
            "translations (the speed depends on the drafts' lengths only)")


def train_wps(argv, updates):
    """fairseq's training words/second (``wps`` of the last ``train`` line) of
    ``fairseq-train argv`` over ``updates`` updates."""
    log = sh(["fairseq-train", *argv, "--max-update", str(updates)])
    return float(re.findall(r"\| train \|.*?\| wps ([\d.]+)", log)[-1])


def best_train_wps(runs, updates, repeats):
    """The best training words/s of each run (``runs``: name -> ``fairseq-train`` argv) over
    ``repeats`` rounds, the runs alternating in the order given within each round."""
    best = {}
    for r in range(repeats):
        for name, argv in runs.items():
            w = train_wps(argv, updates)
            best[name] = max(best.get(name, 0.0), w)
            print(f"[{r + 1}] {name}: {w:.0f} words/s", flush=True)
    return best


def add_speed_args(ap):
    """The options of a benchmark that measures training speed, then generation:
    ``--updates``, ``--repeats``, ``--flop-batches`` and ``--no-generate``."""
    ap.add_argument("--updates", type=int, default=40, help="updates of each training-speed run")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each model (alternating); the best counts")
    ap.add_argument("--flop-batches", type=int, default=10,
                    help="batches over which the training FLOPs per word are counted (0: skip)")
    ap.add_argument("--no-generate", action="store_true", help="training speed only")


#: the FLOP columns of a training-speed table (:func:`flop_cells`)
FLOP_HEADER = f" {'MFLOP/word':>10s} {'src/tgt':>7s} {'ceiling':>7s} {'efficiency':>10s}"


def flop_cells(work, name, baseline, ratio):
    """The FLOP columns of model ``name``'s row (``work``: name -> (FLOPs per target word,
    source words per target word)): its MFLOP per word, source per target word, the ceiling
    (``baseline``'s FLOPs per word over the model's: the speed ratio the FLOPs allow) and the
    efficiency (the measured ``ratio`` over the ceiling)."""
    flops_per_word, src_per_tgt = work[name]
    ceiling = work[baseline][0] / flops_per_word
    return f" {flops_per_word / 1e6:10.2f} {src_per_tgt:7.2f} {ceiling:7.2f} {ratio / ceiling:10.2f}"


def train_args(data_bin, name, size):
    return [str(data_bin), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
            *MODELS[name], *SIZES[size], *COMMON]


def count_flops(data_bin, name, size, batches):
    count_train_flops(train_args(data_bin, name, size), batches)


def train_setup(argv):
    """``(cfg, task)`` of ``fairseq-train argv`` as fairseq-train sets them up: the options
    parsed (``--bf16`` on the trainer's device, as the plugin runs it:
    :func:`fairseq_docctx.bf16.bf16_off_tpu`), the user directory imported, the seed set, the
    task set up."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_docctx.bf16 import bf16_off_tpu

    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv]))
    bf16_off_tpu(cfg)
    utils.import_user_module(cfg.common)
    utils.set_torch_seed(cfg.common.seed)
    return cfg, tasks.setup_task(cfg.task)


def count_train_flops(argv, batches):
    """Matrix-product FLOPs (forward + backward) per target word over the first ``batches``
    training steps of epoch 1 of ``fairseq-train argv``, taken by fairseq's own Trainer as
    fairseq-train sets it up (same options, seed and batches), and source words per target
    word, printed as ``FLOPS <per word> <src per tgt>`` and returned as that pair. The speed
    benchmarks run it in its own process (a script's ``--count-flops`` worker, read by
    :func:`worker_flops`); ``benchmarks.gpu_check`` calls it in the running process."""
    from fairseq.trainer import Trainer
    from benchmarks.flops import flop_counter

    cfg, task = train_setup(argv)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    itr = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=True)
    counter, tgt, src = flop_counter(), 0, 0
    with counter:
        for _, sample in zip(range(batches), itr):
            trainer.train_step([sample])
            tgt += sample["ntokens"]
            src += int(sample["net_input"]["src_lengths"].sum())
    print(f"FLOPS {counter.get_total_flops() / tgt} {src / tgt}")
    return counter.get_total_flops() / tgt, src / tgt


def flops(data_bin, name, size, batches):
    return worker_flops("benchmarks.bench_models", ["--count-flops", name, "--size", size, "--flop-batches", str(batches)])


def worker_flops(module, worker_args):
    """(FLOPs per target word, source words per target word) that ``python -m module
    worker_args`` prints (:func:`count_train_flops`), run in a child process from the
    repository root."""
    out = sh([sys.executable, "-m", module, *worker_args], cwd=REPO)
    per_word, src_per_tgt = re.findall(r"^FLOPS ([\d.e+]+) ([\d.]+)$", out, re.M)[-1]
    return float(per_word), float(src_per_tgt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--size", choices=list(SIZES), default="small",
                    help="model size of every run: small (3+3 x 256, default), qcn-paper (4+4 x 512), "
                    "base (6+6 x 512)")
    ap.add_argument("--models", nargs="+", default=["qcn", "han", "concat"],
                    choices=[m for m in MODELS if m != "transformer"],
                    help="models compared with transformer (default: qcn han concat); mht: the Multi-Hop "
                    "Transformer with its sentence encoders trained, mht-frozen: with them fixed "
                    "(--freeze-sentence-encoders, as the paper's pipeline once they are initialised)")
    ap.add_argument("--flop-batches", type=int, default=None,
                    help="batches over which each model's FLOPs per word are counted (default: --updates, "
                    "the batches the speed is measured on; 0: skip)")
    ap.add_argument("--count-flops", choices=list(MODELS), help=argparse.SUPPRESS)  # worker
    args = ap.parse_args()
    if args.flop_batches is None:
        args.flop_batches = args.updates
    if args.count_flops:
        count_flops(prepare(), args.count_flops, args.size, args.flop_batches)
        return
    if not DATA.is_dir():
        sys.exit(f"needs {DATA} (the shared maruf-ende corpora beside the repository)")
    WORK.mkdir(parents=True, exist_ok=True)
    data_bin = prepare()
    drafts = ensure_drafts(data_bin, ["train"]) if set(args.models) & set(READS_DRAFTS) else None
    best = best_train_wps({name: train_args(data_bin, name, args.size) for name in ["transformer"] + args.models},
                          args.updates, args.repeats)
    base = best["transformer"]
    work = {}
    if args.flop_batches:
        for name in best:
            work[name] = flops(data_bin, name, args.size, args.flop_batches)
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"\ntraining words/second, {args.updates} updates, best of {args.repeats}, size {args.size} "
          f"({' '.join(SIZES[args.size][:8])} ...), --max-tokens 2048, K=3, threads: {threads}")
    if drafts:
        print(drafts_note(drafts))
    if work:
        print(f"FLOPs: matrix products, forward + backward, per target word, first {args.flop_batches} batches; "
              f"ceiling = transformer's FLOPs/word over the model's")
    print(f"{'model':28s} {'wps':>8s} {'ratio':>6s}" + (FLOP_HEADER if work else ""))
    for name, w in best.items():
        cells = flop_cells(work, name, "transformer", w / base) if work else ""
        print(f"{name:28s} {w:8.0f} {w / base:6.2f}{cells}")


if __name__ == "__main__":
    main()
