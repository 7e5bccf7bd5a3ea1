"""Memory a document model needs when it starts from a public fairseq translation family at
the family's real size (docs/pretrained.md, "Memory").

For each family, a ``concat_transformer`` (source context, K=1) is built by fairseq's own
``fairseq-train`` set-up (options parsed, task set up, model and criterion built, fairseq's
``Trainer``) with the sizes of the family's release — layers, width, feed-forward widths,
heads, embedding rows, shared embeddings, positions, ``layernorm_embedding`` — on a data folder
whose dictionaries have the release's number of rows plus the context separator that
``docctx-prepare --pretrained`` appends. Its parameters are counted; where the model fits this
machine's memory, one real training step (fp32, Adam, CPU) is taken on a batch of about
``--max-tokens`` target tokens of toy documents and the process's peak resident memory is read
(``ru_maxrss``): weights, gradients, Adam's two moments and the step's activations. The sizes
too large for the machine are built on PyTorch's ``meta`` device (no memory) and only counted.

The sizes are those of each release's model configuration as published with it (the
checkpoints themselves could not be downloaded here): WMT19 En-De single model (Ng et al.
2019: Transformer big, encoder FFN 8192, 42,024 rows per side, decoder input and output
embeddings shared), mBART-25 and mBART-50 (``mbart_large``: 12+12 layers, 1024, pre-norm,
``layernorm_embedding``, learned positions; 250,027 and 250,054 rows), M2M-100 418M and 1.2B
(128,112 rows), NLLB-200 distilled 600M, 1.3B and 3.3B (256,206 rows).

Usage (from the repository root, nothing else running):
    python -m benchmarks.bench_pretrained_memory [--families ...] [--max-tokens 1024]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench-work" / "pretrained-memory"


def family(layers, dim, ffn, heads, rows, dec_layers=None, dec_ffn=None, joined=True, mbart=False):
    """A release's size: encoder/decoder layers, width, FFN widths, heads, embedding rows
    (per side; one joined dictionary when ``joined``), ``mbart``: pre-norm,
    ``layernorm_embedding`` and learned positions."""
    return dict(layers=layers, dec_layers=dec_layers or layers, dim=dim, ffn=ffn, dec_ffn=dec_ffn or ffn,
                heads=heads, rows=rows, joined=joined, mbart=mbart)


#: name -> size; ``fits``: one training step is taken on this machine (24 GB)
FAMILIES = {
    "wmt19-en-de": dict(family(6, 1024, 8192, 16, 42024, dec_ffn=4096, joined=False), fits=True),
    "m2m100-418M": dict(family(12, 1024, 4096, 16, 128112), fits=True),
    "nllb200-distilled-600M": dict(family(12, 1024, 4096, 16, 256206), fits=True),
    "mbart-large-cc25": dict(family(12, 1024, 4096, 16, 250027, mbart=True), fits=True),
    "mbart-large-50": dict(family(12, 1024, 4096, 16, 250054, mbart=True), fits=True),
    "m2m100-1.2B": dict(family(24, 1024, 8192, 16, 128112), fits=False),
    "nllb200-1.3B": dict(family(24, 1024, 8192, 16, 256206), fits=False),
    "nllb200-3.3B": dict(family(24, 2048, 8192, 16, 256206), fits=False),
}
SPECIALS = 4  # <s> <pad> </s> <unk>: the rows fairseq's Dictionary has before the file's lines


def model_args(size):
    a = ["--arch", "concat_transformer",
         "--encoder-layers", size["layers"], "--decoder-layers", size["dec_layers"],
         "--encoder-embed-dim", size["dim"], "--decoder-embed-dim", size["dim"],
         "--encoder-ffn-embed-dim", size["ffn"], "--decoder-ffn-embed-dim", size["dec_ffn"],
         "--encoder-attention-heads", size["heads"], "--decoder-attention-heads", size["heads"]]
    a += ["--share-all-embeddings"] if size["joined"] else ["--share-decoder-input-output-embed"]
    if size["mbart"]:
        a += ["--encoder-normalize-before", "--decoder-normalize-before", "--layernorm-embedding",
              "--encoder-learned-pos", "--decoder-learned-pos", "--max-source-positions", "1024",
              "--max-target-positions", "1024"]
    return [str(x) for x in a]


def write_dictionary(path, rows, words):
    """A dictionary file giving ``rows`` rows (with fairseq's 4 special symbols): ``words``
    first, then filler symbols."""
    lines = list(words) + [f"x{i}" for i in range(rows - SPECIALS - len(words))]
    Path(path).write_text("".join(f"{w} 1\n" for w in lines), encoding="utf-8")


def prepare(name, size, root=WORK):
    """Toy documents binarized with dictionaries of the family's size into ``root/name``
    (``docctx-prepare`` appends the separator row, as it does for a release)."""
    from benchmarks.toy import prepare_command, run, write_toy_documents

    work = Path(root) / name
    data = work / "bin"
    if (data / "docctx.json").exists():
        return data
    raw = write_toy_documents(work / "raw", docs=(60, 4, 4), doc_sentences=(4, 9), lengths=(8, 20))
    words = [f"w{i}" for i in range(30)] + [f"W{i}" for i in range(30)]
    write_dictionary(work / "dict.txt", size["rows"], words)
    cmd = [str(c) for c in prepare_command(raw, data) if str(c) != "--joined-dictionary"]
    cmd += ["--srcdict", str(work / "dict.txt")]
    cmd += ["--joined-dictionary"] if size["joined"] else ["--tgtdict", str(work / "dict.txt")]
    run(cmd)
    return data


def train_argv(data, size, max_tokens):
    return [str(data), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
            "--context-size", "1", "--context-sides", "source", *model_args(size),
            "--optimizer", "adam", "--lr", "1e-4", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", str(max_tokens), "--cpu", "--seed", "1",
            "--num-workers", "0", "--dropout", "0.1"]


def peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB -> GiB


def worker(name, data, max_tokens, step):
    """Build the model as fairseq-train does; count it; with ``step``, one training step.
    Prints one JSON line."""
    import torch

    from benchmarks.bench_models import train_setup

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    cfg, task = train_setup(train_argv(data, FAMILIES[name], max_tokens))
    out = {"family": name, "rows": len(task.source_dictionary), "base_gib": peak_gib()}
    # built on the meta device (no memory) where it is only counted
    with torch.device("cpu" if step else "meta"):
        model = task.build_model(cfg.model)
    out["params"] = sum(p.numel() for p in model.parameters())
    if not step:
        print("RESULT " + json.dumps(out), flush=True)
        return
    from fairseq.trainer import Trainer
    from fairseq_docctx.data import context_batch

    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    out["built_gib"] = peak_gib()
    itr = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=False)
    sample = next(iter(itr))
    trainer.train_step([sample])
    ctx = context_batch.table(context_batch.get_context(sample), "src")
    out.update(step_gib=peak_gib(), target_tokens=int(sample["ntokens"]),
               source_tokens=int(sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).sum()),
               context_tokens=int(ctx.lengths[ctx.index[ctx.index >= 0]].sum()))
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--count-only", action="store_true", help="count every family's parameters, no step")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--step", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.data, a.max_tokens, a.step)
    rows = []
    for name in a.families:
        size = FAMILIES[name]
        data = prepare(name, size)
        step = size["fits"] and not a.count_only
        cmd = [sys.executable, "-m", "benchmarks.bench_pretrained_memory", "--worker", name, "--data", str(data),
               "--max-tokens", str(a.max_tokens)] + (["--step"] if step else [])
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        res = [line[7:] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        if p.returncode or not res:
            sys.exit(f"{name}: the worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
        rows.append(json.loads(res[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| family | embedding rows (+ separator) | parameters | fp32 weights | fp16 weights "
          "| 16 bytes/parameter (fp32 weights, gradients, Adam) | measured peak of one fp32 Adam step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        p = r["params"]
        step = (f"{r['step_gib']:.1f} GiB ({r['target_tokens']} target, {r['source_tokens']} source + "
                f"{r['context_tokens']} context tokens;"
                f" {r['base_gib']:.1f} GiB before the model)" if "step_gib" in r
                else "not run (--count-only)" if a.count_only else "not run (more than this machine's 24 GB)")
        print(f"| {r['family']} | {r['rows']:,} | {p / 1e6:,.0f} M | {4 * p / 2 ** 30:.1f} GiB | {2 * p / 2 ** 30:.1f} GiB "
              f"| {16 * p / 2 ** 30:.1f} GiB | {step} |")


if __name__ == "__main__":
    main()
