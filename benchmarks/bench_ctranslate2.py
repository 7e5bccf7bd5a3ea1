"""The CTranslate2 and transformers engines against the fairseq path (``docctx-translate --engine``).

The checkpoints, data and test set of ``bench_inference`` (IWSLT17 TED En-De, SentencePiece
4000, the sentence-level ``transformer`` and the ``concat_transformer`` with K=3 on both
sides, trained once under ``bench-work/inference``), each exported with ``docctx-export
ctranslate2`` in float32 and int8 and with ``docctx-export transformers`` (float32). For one
thread and for all threads (``OMP_NUM_THREADS``, which sets the engines' threads), the same
beam and batch size:

  * ``docctx-translate`` on the raw test documents in document order, fairseq, CTranslate2
    (float32, int8) and transformers' ``generate`` (float32): sentences/s (the command's own figure: model loading
    excluded), the speed ratio over fairseq, BLEU (sacrebleu, detokenized) and its
    difference, and the share of sentences translated identically;
  * for the concatenation model, also ``--ct2-prefix one-pass`` and ``one-pass-beam`` (the
    target prefix run in one decoder pass; another search than fairseq's beam search above
    beam 1) in float32 and int8: the same figures, the BLEU difference and identical share
    against fairseq and against the stepwise path of the same weight type, and the decoder
    steps per sentence each path runs (counted from the prefixes and translations);
  * ``docctx-drafts`` of the test split with the transformer (MHT's drafts): sentences/s,
    the ratio, and the share of drafts identical to fairseq's.
  * the segment model ``doc2doc_transformer`` (initialised from the transformer, trained
    ``--doc2doc-updates`` more updates on segments of ``--max-segment-tokens``): the same
    ``docctx-translate`` rows, the documents packed into segments as the fairseq path packs
    them; each row also gives the segments decoded again sentence by sentence (the command's
    line: fairseq's search keeps the sentence count and length windows inside it, CTranslate2's
    search is checked after it, so its misaligned segments are decoded again).

Targets: >= 2x sentences/s in float32 with BLEU within 0.1, >= 3x in int8 with
BLEU within 0.5; docctx-drafts >= 2x likewise; doc2doc through CTranslate2 (float32) >= 2x its
fairseq path.

Usage: python -m benchmarks.bench_ctranslate2 [--updates 300] [--concat-updates N]
       [--doc2doc-updates 100] [--max-segment-tokens 512] [--no-doc2doc]
       [--beam 4] [--batch-size 32] [--test-docs N] [--threads 1,all] [--repeats 1]
       [--no-drafts] [--no-one-pass]
A smoke run: --updates 20 --doc2doc-updates 10 --test-docs 2 --threads 1 --no-drafts
       (bench-work/inference keeps the models: a later run with other --updates needs its own
       WORK, or the models removed)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .bench_inference import BIN, MODEL, REPO, WORK, prepare_data, prepared_test_set, sentence_model, sh

ENGINES = (("fairseq", None), ("ctranslate2", "float32"), ("ctranslate2", "int8"), ("transformers", "float32"))
#: the concatenation model's rows: each engine, and CTranslate2 with the target prefix run in one
#: decoder pass (``--ct2-prefix``: ``one-pass``, ``one-pass-beam``) beside the stepwise default
PREFIX_RUNS = (("fairseq", None, None),
               *[("ctranslate2", q, m) for q in ("float32", "int8")
                 for m in ("stepwise", "one-pass", "one-pass-beam")],
               ("transformers", "float32", None))


def concat_model(data_bin: Path, updates: int) -> Path:
    """bench_inference's concat_transformer (K=3, both sides), trained once."""
    ckpt = WORK / "concat-ckpt" / "checkpoint_last.pt"
    if not ckpt.exists():
        print(f"training concat_transformer (K=3, both sides) for {updates} updates ...", flush=True)
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
            "--context-size", "3", "--context-sides", "both",
            *[a if a != "transformer" else "concat_transformer" for a in MODEL],
            "--max-update", str(updates), "--save-dir", ckpt.parent])
    return ckpt


DOC2DOC = "doc2doc_transformer (segments)"


def doc2doc_model(data_bin: Path, init_from: Path, updates: int, segment_tokens: int) -> Path:
    """A ``doc2doc_transformer`` of bench_inference's size on segments of ``segment_tokens``,
    initialised from the sentence-level ``init_from`` and trained ``updates`` more updates
    (once per setting)."""
    ckpt = WORK / f"doc2doc-{segment_tokens}-{updates}-ckpt" / "checkpoint_last.pt"
    if not ckpt.exists():
        print(f"training doc2doc_transformer (segments of {segment_tokens} tokens) for {updates} updates ...",
              flush=True)
        sh(["fairseq-train", data_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
            "--doc-mode", "segments", "--max-segment-tokens", str(segment_tokens),
            *[a if a != "transformer" else "doc2doc_transformer" for a in MODEL],
            "--init-from-sentence-checkpoint", init_from, "--max-update", str(updates), "--save-dir", ckpt.parent])
    return ckpt


def sh_threads(cmd, threads: int):
    """``cmd`` with ``threads`` threads (``OMP_NUM_THREADS``: torch's, and the ctranslate2
    engine's, which takes torch's count)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS=str(threads))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def export(ckpt: Path, data_bin: Path, name: str, quantization: str, engine: str = "ctranslate2") -> Path:
    """``docctx-export ENGINE`` of ``ckpt`` (``ctranslate2`` in ``quantization``, or
    ``transformers``; again where the checkpoint changed)."""
    import hashlib
    import json

    out = WORK / ("ct2" if engine == "ctranslate2" else "hf") / f"{name}-{quantization}"
    record = out / "docctx-export.json"
    sha1 = hashlib.sha1(ckpt.read_bytes()).hexdigest()
    if not record.exists() or json.loads(record.read_text())["checkpoint_sha1"] != sha1:
        out.parent.mkdir(parents=True, exist_ok=True)
        more = ["--quantization", quantization] if engine == "ctranslate2" else []
        sh([sys.executable, "-m", "fairseq_docctx.cli.export", engine, ckpt, out, "--data", data_bin, *more,
            "--force"])
    return out


def _documents(path: Path):
    """The documents of a ``<d>``-marker file: lists of sentences."""
    docs = []
    for ln in path.read_text(encoding="utf-8").splitlines():
        if ln.strip() == "<d>":
            docs.append([])
        else:
            docs[-1].append(ln)
    return docs


def decoder_steps(out: Path, spm_model: Path, k: int, beam: int):
    """What the decoder runs per sentence when the target context (the previous ``k``
    translations of the document, SentencePiece tokens joined by a separator) is the decoder's
    prefix: (prefix tokens, generated tokens with EOS). CTranslate2 forces a prefix one token per
    step on every beam (full decoder step, vocabulary projection included); fairseq's inference
    cache runs it once as one parallel pass."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    prefix = generated = n = 0
    for doc in _documents(out):
        lengths = [len(sp.encode(s)) for s in doc]
        for i, m in enumerate(lengths):
            ctx = lengths[max(0, i - k):i]
            prefix += sum(ctx) + len(ctx)  # each context sentence and its separator / start token
            generated += m + 1
            n += 1
    return prefix / max(n, 1), generated / max(n, 1)


def _text(path: Path):
    """The sentences of a ``<d>``-marker file (document markers dropped)."""
    return [ln.rstrip("\n") for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() != "<d>"]


#: docctx-translate's line of a segment model's fallbacks
FALLBACKS = re.compile(r"docctx-translate: (\d+) of (\d+) segments decoded again sentence by sentence")


def decoder_steps_per_path(src: Path, out: Path, spm_model: Path, k: int, beam: int, mode: str):
    """The decoder steps per sentence (one sentence's steps in turn, each over its beam's rows)
    a path runs on the translations ``out`` of the source ``src`` (``<d>``-marker files) with
    the target context of the previous ``k`` translations as the prefix: ``stepwise`` (the
    prefix forced one step at a time, then the translation: prefix + generated tokens with
    EOS), ``one-pass`` and ``one-pass-beam`` (one decoder call over the prefix, then the
    translation's steps; a document's first sentence has no prefix), ``fairseq`` (the same
    count as one pass: its inference cache runs the prefix once in parallel). Counted on the
    best translation: a search that goes on past its end (beam search, the other
    alternatives) runs a few steps more."""
    p, g = decoder_steps(out, spm_model, k, beam)
    if mode == "stepwise":
        return p + g
    firsts = sum(1 for d in _documents(src) if d) / max(len(_text(src)), 1)  # sentences without a prefix
    return g + (1 - firsts)


def _prefix_mode(engine: str) -> str:
    """How ``engine`` runs a target prefix, as :func:`decoder_steps_per_path` counts it:
    CTranslate2 (without ``--ct2-prefix``) steps through it, fairseq and the transformers engine
    run it in one pass."""
    return "stepwise" if engine == "ctranslate2" else "fairseq"


def translate(path, data_bin, raw, engine, threads, args, out: Path, prefix=None):
    """``docctx-translate`` (``prefix``: ``--ct2-prefix``): (sentences/s, translations, a
    segment model's ``(segments decoded again sentence by sentence, segments)`` or ``None``)."""
    best, fallbacks = 0.0, None
    more = ["--ct2-prefix", prefix] if prefix else []
    for _ in range(args.repeats):
        p = sh_threads(["docctx-translate", raw, "--path", path, "--data", data_bin, "--engine", engine, "--cpu",
                        "--beam", args.beam, "--batch-size", args.batch_size, *more, "-o", out], threads)
        best = max(best, float(re.search(r"\(([\d.]+) sentences/s\)", p.stderr).group(1)))
        m = FALLBACKS.search(p.stderr)
        fallbacks = (int(m.group(1)), int(m.group(2))) if m else None
    return best, _text(out), fallbacks


def drafts(path, test_bin, engine, threads, args, dest: Path):
    """``docctx-drafts`` of the test split: (sentences/s, drafts as token id lists)."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from fairseq_docctx.data.drafts import draft_prefix

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(test_bin, dest, ignore=shutil.ignore_patterns("*.draft.*", ".docctx-drafts"))
    p = sh_threads(["docctx-drafts", dest, "--path", path, "--engine", engine, "--splits", "test", "--cpu",
                    "--beam", args.beam, "--batch-size", args.batch_size, "--quiet"], threads)
    rate = float(re.search(r"\(([\d.]+) sentences/s\)", p.stderr).group(1))
    ds = MMapIndexedDataset(draft_prefix(str(dest), "test", "en", "de"))
    return rate, [ds[i].tolist() for i in range(len(ds))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=300, help="training updates of the transformer")
    ap.add_argument("--concat-updates", type=int, default=None, help="of the concat_transformer (default --updates)")
    ap.add_argument("--doc2doc-updates", type=int, default=100,
                    help="updates of the doc2doc_transformer after its initialisation from the transformer")
    ap.add_argument("--max-segment-tokens", type=int, default=512, help="the doc2doc_transformer's segments")
    ap.add_argument("--no-doc2doc", action="store_true", help="leave out the doc2doc_transformer rows")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--test-docs", type=int, default=None, help="only the first N test documents")
    ap.add_argument("--threads", default="1,all", help="thread counts, 'all' = every core")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-drafts", action="store_true")
    ap.add_argument("--no-one-pass", action="store_true",
                    help="leave out the concatenation model's --ct2-prefix one-pass and one-pass-beam rows")
    args = ap.parse_args()
    import sacrebleu

    data_bin = prepare_data(WORK)
    test_bin, raw = prepared_test_set(data_bin, WORK, "iwslt17", args.test_docs)
    ref = _text(Path(str(raw).replace("_en.txt", "_de.txt")))
    models = {"transformer (sentence level)": sentence_model(data_bin, WORK, args.updates),
              "concat_transformer (K=3 both), document order":
                  concat_model(data_bin, args.concat_updates or args.updates)}
    if not args.no_doc2doc:
        models[DOC2DOC] = doc2doc_model(data_bin, models["transformer (sentence level)"], args.doc2doc_updates,
                                        args.max_segment_tokens)
    threads = [os.cpu_count() if t == "all" else int(t) for t in args.threads.split(",")]
    out_dir = WORK / "ct2-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"beam {args.beam}, batch size {args.batch_size}, {len(ref)} test sentences, threads {threads}")
    print(f"{'run':58s} {'thr':>3s} {'sent/s':>8s} {'ratio':>6s} {'BLEU':>6s} {'dBLEU':>6s} {'same':>6s}"
          "   (segments decoded again sentence by sentence)")
    for name, ckpt in models.items():
        short = ("concat" if name.startswith("concat") else f"doc2doc-{args.max_segment_tokens}" if name == DOC2DOC
                 else "transformer")
        runs = ([(e, q, None) for e, q in ENGINES] if short != "concat" or args.no_one_pass else PREFIX_RUNS)
        for t in threads:
            base, stepwise = None, {}
            for engine, q, mode in runs:
                path = ckpt if engine == "fairseq" else export(ckpt, data_bin, short, q, engine)
                start = time.time()
                suffix = f"-{mode}" if mode and mode != "stepwise" else ""
                out = out_dir / f"{short}-{engine}-{q}{suffix}-{t}.txt"
                rate, hyp, fell = translate(path, data_bin, raw, engine, t, args, out,
                                            prefix=mode if mode and mode != "stepwise" else None)
                bleu = sacrebleu.corpus_bleu(hyp, [ref]).score
                if base is None:
                    base = (rate, bleu, hyp)
                if mode == "stepwise":
                    stepwise[q] = (bleu, hyp)
                same = sum(a == b for a, b in zip(hyp, base[2])) / max(len(hyp), 1)
                label = f"{name}: {engine}{' ' + q if q else ''}{' --ct2-prefix ' + mode if suffix else ''}"
                line = (f"{label:58s} {t:3d} {rate:8.1f} {rate / base[0]:6.2f} {bleu:6.2f} {bleu - base[1]:+6.2f} "
                        f"{same:6.1%}")
                if suffix and q in stepwise:  # against the stepwise path of the same weights
                    s_bleu, s_hyp = stepwise[q]
                    line += (f"  vs stepwise: BLEU {bleu - s_bleu:+.2f}, identical "
                             f"{sum(a == b for a, b in zip(hyp, s_hyp)) / max(len(hyp), 1):.1%}")
                if short == "concat":
                    steps = decoder_steps_per_path(raw, out, data_bin / "spm.model", 3, args.beam,
                                                   mode or _prefix_mode(engine))
                    line += f"  decoder steps/sentence {steps:.1f}"
                print(f"{line}   ({time.time() - start:.0f}s"
                      + (f"; {fell[0]} of {fell[1]} segments)" if fell else ")"), flush=True)
        if short == "concat":
            p, g = decoder_steps(out_dir / f"concat-fairseq-None-{threads[0]}.txt", data_bin / "spm.model", 3, args.beam)
            print(f"  concat decoder steps per sentence: target prefix {p:.1f} tokens + {g:.1f} generated; "
                  f"CTranslate2 runs {p + g:.1f} steps on {args.beam} beams ({(p + g) / g:.1f}x the generated), "
                  f"fairseq {g:.1f} steps after one parallel pass over the prefix", flush=True)
    if args.no_drafts:
        return
    ckpt = models["transformer (sentence level)"]
    for t in threads:
        base = None
        for engine, q in ENGINES:
            path = ckpt if engine == "fairseq" else export(ckpt, data_bin, "transformer", q, engine)
            rate, made = drafts(path, test_bin, engine, t, args, out_dir / f"drafts-{engine}-{q}")
            if base is None:
                base = (rate, made)
            same = sum(a == b for a, b in zip(made, base[1])) / max(len(made), 1)
            label = f"docctx-drafts (transformer): {engine}{' ' + q if q else ''}"
            print(f"{label:58s} {t:3d} {rate:8.1f} {rate / base[0]:6.2f} {'':6s} {'':6s} {same:6.1%}", flush=True)


if __name__ == "__main__":
    main()
