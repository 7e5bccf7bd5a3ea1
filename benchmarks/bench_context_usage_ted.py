"""The training methods of docs/context-usage.md on a real corpus: IWSLT17 TED En->De, the
split of Maruf et al. 2019 (``../shared/data/maruf-ende/IWSLT2017``), at the scale two CPU cores
allow: the 93 dev talks (8,967 sentence pairs) as the training split, the 23 test talks (2,271
pairs) as the test split, SentencePiece 4,000 joined, the mask symbol in the dictionary
(``docctx-prepare --mask-symbol <mask>``, so every run has the same dictionary).

One sentence-level ``transformer`` (K0; 2+2 x 256/1024, 4 heads, shared embeddings, dropout 0.3)
is trained ``--k0-updates`` updates; every context model starts from it
(``--init-from-sentence-checkpoint``) and is trained ``--updates`` more:

* ``concat_transformer`` (K=2, source and target context) without a method (``baseline``), with
  CoWord dropout (``coword``: ``--coword-dropout 0.1``, Fernandes et al. 2021, §3), with the
  context-discounted loss (``focused``: ``label_smoothed_cross_entropy_focused
  --context-loss-weight 0.01``, Lupo et al. 2022, WMT) and with it and segment-shifted positions
  (``focused-shift``: ``--segment-shifted-positions 21``, the authors' IWSLT17 En->De value);
* ``han_encoder_transformer`` reading one previous source sentence with the sentence weights
  frozen (the K1 of Lupo et al. 2022, ACL), trained on the documents (``han``), or first half of
  the updates on the training pairs split in two at their middle (``docctx-prepare
  --split-sentences middle``) and then half on the documents (``han-divide-rule``,
  ``--finetune-from-model``): the same number of updates.

Every model is measured on the test talks: CXMI (``docctx-score cxmi``'s figures, nats per target
token, seed 1: true context against none and against a random document's context) over the 23
talks, and BLEU (sacreBLEU on the detokenized output, beam 4, document order with the model's own
translations as target context) on the first ``--bleu-docs`` talks.

    python -m benchmarks.bench_context_usage_ted --k0-updates 1000 --updates 300 --json out.json

The real-corpus table of docs/context-usage.md came from this script.
"""
import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

from benchmarks.bench_context_usage import runs as concat_methods
from benchmarks.bench_inference import first_documents
from benchmarks.probe_hrnn import add_job_args, run_jobs
from benchmarks.toy import run

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "maruf-ende" / "IWSLT2017"
USER_DIR = str(REPO / "fairseq_docctx")
MODEL = [
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "256",
    "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
    "--dropout", "0.3", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400", "--criterion",
    "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "4096", "--cpu",
    "--num-workers", "0", "--log-format", "simple", "--log-interval", "100",
    "--no-epoch-checkpoints",
    "--disable-validation",
]
CONCAT = ["--arch", "concat_transformer", "--context-size", "2", "--context-sides", "both"]
HAN = ["--arch", "han_encoder_transformer", "--context-size", "1", "--context-sides", "source",
       "--han-context-size", "1", "--freeze-sentence-weights"]
SHIFT = "21"  # Lupo et al. 2022 (WMT), the authors' scripts for IWSLT17 En->De


def prepare(work: Path, bleu_docs: int) -> dict:
    """The documents, the split training pairs (the same SentencePiece model and dictionary)
    and the first ``bleu_docs`` test talks, each prepared once under ``work``."""
    if not DATA.is_dir():
        sys.exit(f"needs {DATA} (the shared maruf-ende corpora beside the repository)")
    work.mkdir(parents=True, exist_ok=True)
    docs, split, bleu = work / "data", work / "data-split", work / f"data-test{bleu_docs}"
    train, test = DATA / "concatenated_en2de_dev_{lang}.txt", DATA / "concatenated_en2de_test_{lang}.txt"
    common = ["docctx-prepare", "-s", "en", "-t", "de", "--joined-dictionary", "--workers", "2"]
    if not (docs / "docctx.json").exists():
        run([*common, "--trainpref", train, "--testpref", test, "--spm-vocab-size", "4000",
             "--mask-symbol", "<mask>", "--destdir", docs])
    given = ["--srcdict", docs / "dict.en.txt", "--spm-model", docs / "spm.model"]
    if not (split / "docctx.json").exists():
        run([*common, *given, "--trainpref", train, "--split-sentences", "middle",
             "--mask-symbol", "<mask>", "--destdir", split])
    if not (bleu / "docctx.json").exists():
        cut = work / f"raw-test{bleu_docs}"
        cut.mkdir(exist_ok=True)
        for lang in ("en", "de"):
            first_documents(DATA / f"concatenated_en2de_test_{lang}.txt", bleu_docs, cut / f"test_{lang}.txt")
        run([*common, *given, "--testpref", cut / "test_{lang}.txt", "--mask-symbol", "<mask>",
             "--destdir", bleu])
    return {"docs": str(docs), "split": str(split), "bleu": str(bleu)}


def train(data: str, save: Path, updates: int, args, seed: int) -> str:
    shutil.rmtree(save, ignore_errors=True)  # fairseq-train would resume from an earlier run
    p = run(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "document_translation",
             *MODEL, *args, "--max-update", str(updates), "--seed", str(seed), "--save-dir", save])
    (save / "train.log").write_text(p.stdout + p.stderr, encoding="utf-8")
    return str(save / "checkpoint_last.pt")


def bleu(ckpt: str, data: str) -> float:
    p = run(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "document_translation",
             "--path", ckpt, "--gen-subset", "test", "--beam", "4", "--batch-size", "32",
             "--max-len-a", "1.2", "--max-len-b", "10", "--required-batch-size-multiple", "1",
             "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu", "--cpu", "--num-workers", "0"])
    return float(re.search(r"BLEU = ([\d.]+)", p.stdout + p.stderr).group(1))


def runs() -> dict:
    """Run name -> (architecture options, method options, stages: [(data key, share of updates)])."""
    out = {name: (CONCAT, method, [("docs", 1.0)]) for name, method in concat_methods(0.1).items()}
    out["focused-shift"] = (CONCAT, out["focused-shift"][1][:-1] + [SHIFT], [("docs", 1.0)])
    out["han"] = (HAN, [], [("docs", 1.0)])
    out["han-divide-rule"] = (HAN, [], [("split", 0.5), ("docs", 0.5)])
    return out


def one_run(job) -> dict:
    from benchmarks.probe_hrnn import content

    name, seed, updates, k0, data, work = job
    arch, method, stages = runs()[name]
    t = time.time()
    ckpt, init = None, ["--init-from-sentence-checkpoint", k0]
    for i, (key, share) in enumerate(stages):
        ckpt = train(data[key], work / f"{name}-{updates}-s{seed}-{i}", round(updates * share),
                     arch + method + init, seed)
        init = ["--finetune-from-model", ckpt]
    row = dict(run=name, seed=seed, updates=updates, bleu=bleu(ckpt, data["bleu"]),
               cxmi=content(ckpt, data["docs"], int(arch[arch.index("--context-size") + 1])))
    row["seconds"] = round(time.time() - t)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=",".join(runs()))
    p.add_argument("--k0-updates", type=int, default=1000, help="updates of the sentence-level K0")
    p.add_argument("--bleu-docs", type=int, default=10, help="BLEU on the first N test talks")
    add_job_args(p, str(REPO / "bench-work" / "context-usage-ted"), 300)  # --updates: after K0
    a = p.parse_args(argv)
    unknown = [r for r in a.runs.split(",") if r not in runs()]
    if unknown:
        p.error(f"--runs: no run {', '.join(unknown)} (of {', '.join(runs())})")
    work = Path(a.work)
    data = prepare(work, a.bleu_docs)
    k0 = work / f"k0-{a.k0_updates}" / "checkpoint_last.pt"
    if not k0.exists():
        t = time.time()
        train(data["docs"], k0.parent, a.k0_updates, ["--arch", "transformer", "--context-size", "0"], 1)
        print(f"K0: {a.k0_updates} updates in {time.time() - t:.0f}s, BLEU {bleu(str(k0), data['bleu'])}",
              flush=True)
    jobs = [(r, int(s), a.updates, str(k0), data, work) for s in a.seeds.split(",") for r in a.runs.split(",")]
    rows = run_jobs(one_run, jobs, a.jobs, a.json)
    print(f"| run | seed | updates after K0 ({a.k0_updates}) | BLEU (first {a.bleu_docs} talks) | "
          "CXMI true - none | CXMI true - random |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['seed']} | {r['updates']} | {r['bleu']:.2f} | {r['cxmi']['cxmi']:+.4f} | "
              f"{r['cxmi']['true_vs_random']:+.4f} |")


if __name__ == "__main__":
    main()
