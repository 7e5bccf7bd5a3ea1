"""Document-order inference speed (issue: document-level inference).

Measured in one run on IWSLT17 TED En-De (train: the dev talks, test: the 23 test talks,
2,271 sentences, ../shared/data/maruf-ende; or, with ``--test-set nc16``, the 155 documents /
2,999 sentences of newstest2016 from NC-2016, same models), with ONE sentence-level
`transformer`:

  * plain sentence-level `fairseq-generate --task translation` (length-sorted batches);
  * `fairseq-generate --task document_translation --context-sides both` in document order
    (position-major: batch t holds sentence t of up to --batch-size documents);
  * `docctx-translate` on the raw test documents (SentencePiece + detokenization included);
  * a `han_decoder_transformer` of the same size (HAN decoder over its own previous
    translations), initialised from that transformer (`--init-from-sentence-checkpoint`) and
    trained `--han-updates` more updates, in document order with its per-document cache;
  * a `concat_transformer` of the same size with K=3 previous sentences on both sides (its
    own previous translations form an unscored decoder prefix), trained `--concat-updates`
    updates, in document order twice: as it decodes (the prefix run once per sentence into
    fairseq's incremental state, one token per beam-search step after it), and re-running
    the decoder over the whole prefix and hypothesis at every step, as it decoded before the
    cache (the same model and outputs; this run patches the decoder inside this script only);
  * with ``--mht-updates N`` (N > 0), an ``mht_transformer`` of the same size (Zhang et al.
    2021: K=3, multi-hop context on both sides), its multi-hop encoder and decoder and its
    source-side sentence encoder initialised from that transformer (``--init-from-sentence-
    checkpoint``, ``--src-sentence-encoder-from``, the latter as the paper, §4.3) and trained N
    more updates, decoding with its drafts given (``fairseq-generate --task
    document_translation``): in fairseq's length-sorted batches (``--doc-batching
    sentences``, the batches of the sentence-level run) and in the task's default batches for
    it (document runs in corpus order: each context sentence and draft encoded once per
    batch). Its drafts are the data directory's drafts stream of each split if it has one
    (``docctx-drafts``), else the references copied as drafts (``bench_models.ensure_drafts``:
    the speed depends on the drafts' lengths only; the header says which). Next to the speed,
    the matrix-product FLOPs per generated token and per sentence of the sentence-level run
    and of MHT's length-sorted run are counted inside fairseq-generate (torch's
    ``FlopCounterMode``, benchmarks/flops.py, around the task's ``inference_step``: beam
    search with the encoders, every ``--flop-every``-th batch, the same sentences in both runs, checked), and their
    ratio, the speed ratio MHT could reach at the transformer's FLOP rate, is printed with the
    measured ratio over it (the FLOP-rate efficiency). ``--mht-only`` runs the sentence-level
    and MHT runs only.

Sentences/second and generated tokens/second are fairseq's own figures (model loading
excluded; docctx-translate: sentences/s); the mean hypothesis length (words) is printed beside
them, since a model that writes longer outputs is slower per sentence for that reason alone
(tokens/s then compares the work per step). Document order decodes position by position: each batch
holds at most one sentence per document, and a test set's longest document sets the number of
batches, so the document count and length spread of the test set bound its speed (23 talks of
up to ~200 sentences against 155 news documents).
Targets: document order >= 0.8x sentence level with >= 16 documents side by side; HAN decoder
in document order >= 0.7x sentence-level generation of the same size; MHT with drafts given
>= 0.6x sentence-level generation and >= 0.9 of its FLOP-bound ratio.

Usage (from the repository root): python -m benchmarks.bench_inference [--updates 300] [--han-updates 100] [--concat-updates 300]
       [--batch-size 32] [--beam 4] [--test-set iwslt17|nc16] [--test-docs N] [--repeats 2]
       [--mht-updates 0] [--mht-only] [--flop-every 4]
       (--test-docs N: only the first N test documents, for a quick check that it runs)
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_models import drafts_note, ensure_drafts

REPO = Path(__file__).resolve().parents[1]
MODULE = "benchmarks.bench_inference"  # its child processes run it with python -m
DATA = REPO.parent / "shared" / "data" / "maruf-ende" / "IWSLT2017"
NC16 = REPO.parent / "shared" / "data" / "maruf-ende" / "NC-2016"
WORK = REPO / "bench-work" / "inference"
BIN = Path(sys.executable).parent
MODEL = [
    "--arch", "transformer", "--encoder-layers", "3", "--decoder-layers", "3",
    "--encoder-embed-dim", "256", "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024",
    "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4",
    "--decoder-attention-heads", "4", "--share-all-embeddings", "--dropout", "0.1",
    "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "200", "--criterion", "label_smoothed_cross_entropy",
    "--label-smoothing", "0.1", "--max-tokens", "4096", "--cpu", "--seed", "1",
    "--log-format", "simple", "--log-interval", "50", "--no-epoch-checkpoints",
    "--disable-validation",
]
CONCAT = "concat_transformer (K=3 both), document order"
CONCAT_BEFORE = "concat_transformer, prefix re-run every step (before)"
FULL_RERUN = "--generate-full-rerun"  # internal: the child process of the run before the cache
COUNT_FLOPS = "--generate-count-flops"  # internal: fairseq-generate counting matrix-product FLOPs
SENTENCE_LEVEL = "sentence-level fairseq-generate (translation task)"
MHT = "mht_transformer (drafts given), length-sorted batches"
MHT_RUNS = "mht_transformer (drafts given), document runs (default)"


def sh(cmd, **kw):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep, not spin
    kw.setdefault("cwd", REPO)  # children run as ``python -m benchmarks.bench_inference``
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def generate_full_rerun(argv):
    """fairseq-generate with concat_transformer's decoder re-run over the whole target prefix
    and hypothesis at every beam-search step (the incremental state ignored): the uncached
    decoder the cached prefix is compared with. Same model, same outputs; only for this
    benchmark."""
    from fairseq_cli.generate import cli_main

    from fairseq_docctx.models.concat_transformer import ConcatContextDecoder

    cached = ConcatContextDecoder.forward

    def full_rerun(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        return cached(self, prev_output_tokens, encoder_out, None, **kwargs)

    ConcatContextDecoder.forward = full_rerun
    sys.argv = ["fairseq-generate", *argv]
    cli_main()


def generate_count_flops(every, argv):
    """fairseq-generate with the matrix-product FLOPs (``benchmarks.flops.flop_counter``:
    matmuls, linear layers and attention) of every ``every``-th batch's ``inference_step``
    counted (the whole beam search, encoders included); prints ``FLOPS <flops> <generated tokens> <sentences> <digest
    of their ids>`` for those batches (tokens as fairseq counts them: the best hypothesis of
    each sentence, EOS included). Only for this benchmark."""
    from fairseq.tasks.fairseq_task import FairseqTask
    from fairseq_cli.generate import cli_main
    from benchmarks.flops import flop_counter

    step = FairseqTask.inference_step
    tally = {"batches": 0, "flops": 0, "tokens": 0, "ids": []}

    def counted(self, generator, models, sample, prefix_tokens=None, constraints=None):
        tally["batches"] += 1
        if (tally["batches"] - 1) % every:
            return step(self, generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        counter = flop_counter()
        with counter:
            hypos = step(self, generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        tally["flops"] += counter.get_total_flops()
        tally["tokens"] += sum(len(h[0]["tokens"]) for h in hypos)
        tally["ids"] += sample["id"].tolist()
        return hypos

    FairseqTask.inference_step = counted  # the document task's length-sorted batches call it too
    sys.argv = ["fairseq-generate", *argv]
    cli_main()
    ids = sorted(tally["ids"])
    digest = hashlib.sha1(" ".join(map(str, ids)).encode()).hexdigest()[:12]
    print(f"FLOPS {tally['flops']} {tally['tokens']} {len(ids)} {digest}", flush=True)


def count_flops(cmd, every):
    """FLOPs, generated tokens, sentences and the digest of the sentence ids of the counted
    batches of the fairseq-generate command ``cmd`` (run again in a child process)."""
    assert cmd[0] == "fairseq-generate"
    p = sh([sys.executable, "-m", MODULE, COUNT_FLOPS, str(every), *cmd[1:]])
    flops, tokens, sents, digest = re.findall(r"^FLOPS (\d+) (\d+) (\d+) (\w+)$", p.stdout, re.M)[-1]
    return int(flops), int(tokens), int(sents), digest


def first_documents(src: Path, n: int, dest: Path) -> Path:
    """The first ``n`` documents of a ``<d>``-marker file."""
    lines, docs = [], 0
    for line in src.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.strip() == "<d>":
            docs += 1
            if docs > n:
                break
        lines.append(line)
    dest.write_text("".join(lines), encoding="utf-8")
    return dest


def hypotheses(out):
    """fairseq-generate's best hypotheses: sentence id -> (score, tokens)."""
    return {int(i): (float(score), toks)
            for i, score, toks in re.findall(r"^H-(\d+)\t([^\t]*)\t(.*)$", out, re.M)}


def fairseq_rate(out):
    """Sentences, sentences/s, generated tokens/s (fairseq's own figures) and the mean
    hypothesis length in words."""
    m = re.search(r"Translated ([\d,]+) sentences .* \(([\d.]+) sentences/s, ([\d.]+) tokens/s\)", out)
    hyps = re.findall(r"^H-\d+\t[^\t]*\t(.*)$", out, re.M)
    mean_len = sum(len(h.split()) for h in hyps) / max(len(hyps), 1)
    return int(m.group(1).replace(",", "")), float(m.group(2)), float(m.group(3)), mean_len


def prepare_data(work: Path) -> Path:
    """``work/data``: the IWSLT17 TED dev talks (training) and test talks, SentencePiece 4000
    (prepared once)."""
    if not DATA.is_dir():
        sys.exit(f"needs {DATA} (the shared maruf-ende corpora beside the repository)")
    work.mkdir(parents=True, exist_ok=True)
    data_bin = work / "data"
    if not (data_bin / "docctx.json").exists():
        print("preparing IWSLT17 TED (SentencePiece 4000) ...", flush=True)
        sh(["docctx-prepare", "-s", "en", "-t", "de", "--joined-dictionary", "--workers", "2",
            "--trainpref", DATA / "concatenated_en2de_dev_{lang}.txt",
            "--testpref", DATA / "concatenated_en2de_test_{lang}.txt",
            "--spm-vocab-size", "4000", "--destdir", data_bin])
    return data_bin


def prepared_test_set(data_bin: Path, work: Path, test_set: str = "iwslt17", test_docs=None):
    """The binarized test set (``data_bin`` itself for the IWSLT17 TED test talks; NC-2016
    newstest2016 or the first ``test_docs`` documents prepared once under ``work`` with
    ``data_bin``'s SentencePiece model and dictionary) and its raw source file."""
    test_dir = NC16 if test_set == "nc16" else DATA
    raw = test_dir / "concatenated_en2de_test_en.txt"
    if test_set != "nc16" and not test_docs:
        return data_bin, raw
    name = test_set + (f"-{test_docs}docs" if test_docs else "")
    test_bin = work / f"data-{name}"
    test_pref = test_dir / "concatenated_en2de_test_{lang}.txt"
    if test_docs:
        cut = work / f"raw-{name}"
        cut.mkdir(exist_ok=True)
        for lang in ("en", "de"):
            first_documents(test_dir / f"concatenated_en2de_test_{lang}.txt", test_docs, cut / f"test_{lang}.txt")
        test_pref, raw = cut / "test_{lang}.txt", cut / "test_en.txt"
    if not (test_bin / "docctx.json").exists():
        sh(["docctx-prepare", "-s", "en", "-t", "de", "--joined-dictionary", "--workers", "2",
            "--srcdict", data_bin / "dict.en.txt", "--spm-model", data_bin / "spm.model",
            "--testpref", test_pref, "--destdir", test_bin])
    return test_bin, raw


def sentence_model(data_bin: Path, work: Path, updates: int) -> Path:
    """``work/ckpt/checkpoint_last.pt``: the sentence-level ``MODEL`` trained ``updates``
    updates on ``data_bin`` (trained once)."""
    ckpt = work / "ckpt" / "checkpoint_last.pt"
    if not ckpt.exists():
        print(f"training a sentence-level transformer for {updates} updates ...", flush=True)
        t = time.time()
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx",
            "--task", "document_translation", "--context-size", "0", *MODEL,
            "--max-update", str(updates), "--save-dir", ckpt.parent])
        print(f"  trained in {time.time() - t:.0f}s")
    return ckpt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=300, help="training updates of the model")
    ap.add_argument("--han-updates", type=int, default=100,
                    help="updates of the HAN decoder after initialising it from the transformer")
    ap.add_argument("--concat-updates", type=int, default=None,
                    help="training updates of the concat_transformer (default: --updates)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences (= documents side by side)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--test-set", choices=["iwslt17", "nc16"], default="iwslt17",
                    help="IWSLT17 TED test (23 talks) or NC-2016 newstest2016 (155 documents)")
    ap.add_argument("--test-docs", type=int, default=None,
                    help="only the first N documents of the test set (a quick check)")
    ap.add_argument("--mht-updates", type=int, default=0,
                    help="an mht_transformer of the same size, initialised from the transformer and "
                    "trained N more updates, decoding with drafts given (0: no MHT runs, the default)")
    ap.add_argument("--mht-only", action="store_true",
                    help="only the sentence-level and MHT runs (no document order, HAN, concat, "
                    "docctx-translate)")
    ap.add_argument("--flop-every", type=int, default=4,
                    help="with MHT: count the matrix-product FLOPs of every N-th batch of the "
                    "sentence-level and MHT generation (1: all batches, 0: no count)")
    args = ap.parse_args()
    if args.mht_only and args.mht_updates <= 0:
        sys.exit("--mht-only needs --mht-updates N (N > 0)")
    if args.concat_updates is None:
        args.concat_updates = args.updates
    data_bin = prepare_data(WORK)
    if args.mht_updates > 0:
        drafts = ensure_drafts(data_bin, ["train", "test"])
    ckpt = sentence_model(data_bin, WORK, args.updates)
    han_ckpt = WORK / "han-ckpt" / "checkpoint_last.pt"
    if not han_ckpt.exists() and not args.mht_only:
        print(f"training han_decoder_transformer from it for {args.han_updates} updates ...", flush=True)
        han_model = [a if a != "transformer" else "han_decoder_transformer" for a in MODEL]
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx",
            "--task", "document_translation", "--context-size", "3", "--context-sides", "both",
            *han_model, "--init-from-sentence-checkpoint", ckpt,
            "--max-update", str(args.han_updates), "--save-dir", han_ckpt.parent])
    concat_ckpt = WORK / "concat-ckpt" / "checkpoint_last.pt"
    if not concat_ckpt.exists() and not args.mht_only:
        print(f"training concat_transformer (K=3, both sides) for {args.concat_updates} updates ...",
              flush=True)
        concat_model = [a if a != "transformer" else "concat_transformer" for a in MODEL]
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx",
            "--task", "document_translation", "--context-size", "3", "--context-sides", "both",
            *concat_model, "--max-update", str(args.concat_updates),
            "--save-dir", concat_ckpt.parent])
    # one checkpoint per number of updates (a quick check's model is not reused by a real run)
    mht_ckpt = WORK / f"mht-ckpt-{args.mht_updates}" / "checkpoint_last.pt"
    if args.mht_updates > 0 and not mht_ckpt.exists():
        print(f"training mht_transformer (K=3, both sides) from it for {args.mht_updates} updates ...",
              flush=True)
        mht_model = [a if a != "transformer" else "mht_transformer" for a in MODEL]
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx",
            "--task", "document_translation", "--context-size", "3", "--context-sides", "src,draft",
            *mht_model, "--init-from-sentence-checkpoint", ckpt, "--src-sentence-encoder-from", ckpt,
            "--max-update", str(args.mht_updates), "--save-dir", mht_ckpt.parent])
    test_bin, raw = prepared_test_set(data_bin, WORK, args.test_set, args.test_docs)
    if args.mht_updates > 0 and test_bin != data_bin:
        drafts["test"] = ensure_drafts(test_bin, ["test"])["test"]
    gen = ["--beam", str(args.beam), "--batch-size", str(args.batch_size),
           "--max-len-a", "1.2", "--max-len-b", "10", "--remove-bpe", "sentencepiece",
           "--required-batch-size-multiple", "1", "--gen-subset", "test", "--cpu"]
    runs = {
        SENTENCE_LEVEL:
            ["fairseq-generate", test_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "translation", "--path", ckpt, *gen],
    }
    mht_gen = ["fairseq-generate", test_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
               "--context-size", "3", "--context-sides", "src,draft", "--path", mht_ckpt, *gen]
    if args.mht_updates > 0:
        runs[MHT] = [*mht_gen, "--doc-batching", "sentences"]
        runs[MHT_RUNS] = mht_gen
    if not args.mht_only:
        add_document_runs(runs, test_bin, ckpt, han_ckpt, concat_ckpt, gen)
    rates = {name: [] for name in list(runs) + ([] if args.mht_only else ["docctx-translate"])}
    tokens = {name: [] for name in runs}
    lengths, concat_hyps = {}, {}
    for r in range(args.repeats):
        for name, cmd in runs.items():
            p = sh(cmd)
            n, rate, tok_rate, mean_len = fairseq_rate(p.stdout + p.stderr)
            rates[name].append(rate)
            tokens[name].append(tok_rate)
            lengths[name] = mean_len
            if name in (CONCAT, CONCAT_BEFORE):
                concat_hyps[name] = hypotheses(p.stdout)
            print(f"[{r + 1}] {name}: {n} sentences, {rate:.2f} sentences/s, {tok_rate:.1f} tokens/s, "
                  f"mean hypothesis length {mean_len:.1f} words", flush=True)
        if args.mht_only:
            continue
        p = sh(["docctx-translate", raw, "--path", ckpt, "--data", test_bin, "--beam", str(args.beam),
                "--batch-size", str(args.batch_size), "--cpu", "-o", WORK / "test.de.txt"])
        m = re.search(r"(\d+) sentences in [\d.]+s \(([\d.]+) sentences/s\)", p.stderr)
        rates["docctx-translate"].append(float(m.group(2)))
        print(f"[{r + 1}] docctx-translate: {m.group(1)} sentences, {m.group(2)} sentences/s", flush=True)
    best = {k: max(v) for k, v in rates.items()}
    best_tok = {k: max(v) for k, v in tokens.items()}
    base = best[SENTENCE_LEVEL]
    base_tok = best_tok[SENTENCE_LEVEL]
    print(f"\ntest set {args.test_set}, beam {args.beam}, --batch-size {args.batch_size} (documents side by "
          f"side in document order), best of {args.repeats}; tokens/s: generated tokens (fairseq's figure), "
          f"the fair measure when models write outputs of different lengths")
    if args.mht_updates > 0:
        print(f"mht_transformer trained {args.mht_updates} updates from the transformer; " + drafts_note(drafts))
    print(f"{'run':58s} {'sent/s':>8s} {'ratio':>6s} {'tok/s':>8s} {'ratio':>6s} {'mean len':>8s}")
    for k, v in best.items():
        tok = f"{best_tok[k]:8.1f} {best_tok[k] / base_tok:6.2f}" if k in best_tok else f"{'':8s} {'':6s}"
        ml = f"{lengths[k]:8.1f}" if k in lengths else f"{'':8s}"
        print(f"{k:58s} {v:8.2f} {v / base:6.2f} {tok} {ml}")
    if not args.mht_only:
        new, old = concat_hyps[CONCAT], concat_hyps[CONCAT_BEFORE]
        same = sum(new[i][1] == old.get(i, (None, None))[1] for i in new)
        diff = max((abs(new[i][0] - old[i][0]) for i in new if i in old), default=0.0)
        print(f"\nconcat_transformer target prefix cached vs re-run at every step: "
              f"{best[CONCAT] / best[CONCAT_BEFORE]:.2f}x sentences/s, "
              f"{best_tok[CONCAT] / best_tok[CONCAT_BEFORE]:.2f}x tokens/s; identical hypotheses: "
              f"{same} of {len(old)}, largest score difference {diff:.1e}")
    if args.mht_updates > 0 and args.flop_every > 0:
        print_flop_bound(runs, best, best_tok, args.flop_every)


def print_flop_bound(runs, best, best_tok, every):
    """The matrix-product FLOPs per generated token and per sentence of the sentence-level run
    and of MHT's length-sorted run (counted over the same batches), the speed ratios they
    allow (the transformer's FLOPs over MHT's) and the measured ratios over those."""
    work = {name: count_flops(runs[name], every) for name in (SENTENCE_LEVEL, MHT)}
    (f0, t0, n0, d0), (f1, t1, n1, d1) = work[SENTENCE_LEVEL], work[MHT]
    same = "the same sentences" if d0 == d1 else "NOT the same sentences (the two tasks batched differently)"
    print(f"\nmatrix-product FLOPs of generation (beam search with the encoders), every {every}. batch, "
          f"{n0} and {n1} sentences ({same}); bound = sentence level's FLOPs over MHT's, "
          f"efficiency = measured ratio / bound")
    print(f"{'run':58s} {'MFLOP/tok':>10s} {'MFLOP/sent':>10s}")
    for name, (f, t, n, _) in work.items():
        print(f"{name:58s} {f / t / 1e6:10.2f} {f / n / 1e6:10.2f}")
    tok_bound, sent_bound = (f0 / t0) / (f1 / t1), (f0 / n0) / (f1 / n1)
    tok_ratio, sent_ratio = best_tok[MHT] / best_tok[SENTENCE_LEVEL], best[MHT] / best[SENTENCE_LEVEL]
    print(f"MHT / sentence level: tokens/s {tok_ratio:.2f}x (FLOP bound {tok_bound:.2f}x, efficiency "
          f"{tok_ratio / tok_bound:.2f}); sentences/s {sent_ratio:.2f}x (FLOP bound {sent_bound:.2f}x, "
          f"efficiency {sent_ratio / sent_bound:.2f})")


def add_document_runs(runs, test_bin, ckpt, han_ckpt, concat_ckpt, gen):
    """The document-order runs (transformer, HAN decoder, concat with and without its cache)."""
    runs.update({
        "document-order fairseq-generate (document_translation)":
            ["fairseq-generate", test_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "3", "--context-sides", "both",
             "--path", ckpt, *gen],
        "han_decoder_transformer, document order":
            ["fairseq-generate", test_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "3", "--context-sides", "both",
             "--path", han_ckpt, *gen],
    })
    concat_gen = [test_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
                  "--context-size", "3", "--context-sides", "both", "--path", concat_ckpt, *gen]
    runs[CONCAT] = ["fairseq-generate", *concat_gen]
    runs[CONCAT_BEFORE] = [sys.executable, "-m", MODULE, FULL_RERUN, *concat_gen]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == FULL_RERUN:
        generate_full_rerun(sys.argv[2:])
    elif len(sys.argv) > 2 and sys.argv[1] == COUNT_FLOPS:
        generate_count_flops(int(sys.argv[2]), sys.argv[3:])
    else:
        main()
