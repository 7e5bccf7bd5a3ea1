"""Speed of ``docctx-drafts`` against ``fairseq-generate`` of the same checkpoint on the same split.

The drafts of the Multi-Hop Transformer (Zhang et al. 2021, §3.1, §4.3) are a sentence-level
model's translations of every source sentence; ``docctx-drafts`` makes them with fairseq's
batched beam search over length-sorted batches and writes them as a binarized stream (in
restartable chunks). This script trains a small sentence-level ``transformer`` (IWSLT17 TED
dev talks, SentencePiece 4000, ../shared/data/maruf-ende), then translates the 23 TED test
talks (2,271 sentences) with both commands, alternating, best of ``--repeats``: sentences per
second as each command reports it (model loading excluded; ``docctx-drafts`` includes writing
its chunks and the final files), and checks that the drafts are fairseq-generate's best
hypotheses. Target: ``docctx-drafts`` >= 0.9x of ``fairseq-generate``.

Usage (from the repository root): python -m benchmarks.bench_drafts [--updates 300] [--beam 4] [--max-tokens 4000] [--repeats 2]
Writes under bench-work/drafts/ (git-ignored).
"""
import argparse
import os
import re

from benchmarks.bench_inference import REPO, prepare_data, sentence_model, sh

WORK = REPO / "bench-work" / "drafts"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=300, help="training updates of the sentence model")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=4000, help="batch size of both commands")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    data_bin = prepare_data(WORK)
    ckpt = sentence_model(data_bin, WORK, args.updates)
    common = ["--beam", str(args.beam), "--max-tokens", str(args.max_tokens), "--cpu"]
    runs = {
        "fairseq-generate": ["fairseq-generate", data_bin, "--user-dir", REPO / "fairseq_docctx",
                             "--task", "translation", "--path", ckpt, "--gen-subset", "test",
                             "--required-batch-size-multiple", "1", *common],
        "docctx-drafts": ["docctx-drafts", data_bin, "--path", ckpt, "--splits", "test", "--overwrite",
                          "--quiet", *common],
    }
    rates = {k: [] for k in runs}
    out = {}
    for r in range(args.repeats):
        for name, cmd in runs.items():
            p = sh(cmd)
            text = p.stdout + p.stderr
            if name == "fairseq-generate":
                m = re.search(r"Translated ([\d,]+) sentences .* \(([\d.]+) sentences/s", text)
                out[name] = {int(i): toks for i, toks in re.findall(r"^H-(\d+)\t[^\t]*\t(.*)$", p.stdout, re.M)}
            else:
                m = re.search(r"test: ([\d,]+) sentences .* \(([\d.]+) sentences/s\)", text)
            n, rate = int(m.group(1).replace(",", "")), float(m.group(2))
            rates[name].append(rate)
            print(f"[{r + 1}] {name}: {n} sentences, {rate:.2f} sentences/s", flush=True)
    same = _compare(data_bin, out["fairseq-generate"])
    best = {k: max(v) for k, v in rates.items()}
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"\nIWSLT17 TED test (23 talks), 3+3 x 256 transformer, beam {args.beam}, --max-tokens "
          f"{args.max_tokens}, best of {args.repeats}, threads: {threads}")
    for k, v in best.items():
        print(f"{k:18s} {v:8.2f} sentences/s")
    print(f"docctx-drafts / fairseq-generate: {best['docctx-drafts'] / best['fairseq-generate']:.2f}x "
          f"(target >= 0.9); drafts equal to fairseq-generate's best hypotheses: {same[0]} of {same[1]}")


def _compare(data_bin, generated):
    """(equal, total): the drafts against fairseq-generate's best hypotheses (subword text)."""
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(data_bin / "dict.de.txt"))
    drafts = data_utils.load_indexed_dataset(str(data_bin / "test.en-de.draft"), d)
    equal = sum(d.string(drafts[i]) == generated.get(i) for i in range(len(drafts)))
    return equal, len(drafts)


if __name__ == "__main__":
    main()
