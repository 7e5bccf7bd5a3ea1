"""Memory of a transformers folder taken up through the import (``--init-from-pretrained DIR``,
``models/hf_import.py``) against fairseq's own ``transformer`` of the same size built directly
(docs/benchmarks.md, "A transformers folder through the import").

The folder is an OPUS-MT-sized Marian model (``Helsinki-NLP/opus-mt-en-de``'s ``config.json``:
``d_model`` 512, 6 + 6 layers, 8 heads, feed-forward 2048, 58,101 rows in one shared table,
``max_position_embeddings`` 512, swish, scaled embeddings, ``<pad>`` the last id and the
decoder start): a ``MarianMTModel`` of that ``MarianConfig`` with transformers' random
initialisation, saved with ``save_pretrained`` (safetensors) beside a ``MarianTokenizer`` of
OPUS-MT's files (``source.spm`` / ``target.spm``: a SentencePiece model trained here on the toy
documents; ``vocab.json``: ``</s>`` 0, ``<unk>`` 1, the pieces, fillers up to 58,100 rows,
``<pad>`` last). ``docctx-prepare --pretrained DIR`` makes the data folder both variants read
(58,102 symbols in fairseq's order, Marian's missing ``<s>`` included, + the separator).

Each variant runs in its own process, three times, the two alternating, and the best of three
is kept:

* ``import``: ``concat_transformer --context-size 0 --init-from-pretrained DIR``, the model
  fairseq-train builds (its options parsed, the task set up, ``task.build_model``: the folder's
  weights read, converted to fairseq's names and rows, the model built and loaded);
* ``fairseq``: ``transformer`` with the same sizes and ``--share-all-embeddings``, built the same
  way with fairseq's random initialisation (no weights read); its activation is fairseq's relu
  (``--activation-fn`` offers no swish; the import sets it), which holds no parameter.

Both processes import torch, fairseq, the plugin and transformers before they are measured
(``base``); ``peak`` is the process's maximum resident set size after the build
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``), ``peak - base`` what the build took.

Usage (from the repository root, nothing else running):
    python -m benchmarks.bench_hf_memory [--repeats 3] [--workdir bench-work/hf-memory]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench-work" / "hf-memory"
#: Helsinki-NLP/opus-mt-en-de's config.json (the sizes and the options the import reads)
OPUS_MT_EN_DE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=58101,
                     decoder_vocab_size=58101, max_position_embeddings=512, activation_function="swish",
                     scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
                     pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0,
                     bos_token_id=0)
VARIANTS = ("import", "fairseq")


def make_folder(work: Path) -> Path:
    """The OPUS-MT-sized Marian folder (the module doc) in ``work/opus-mt-sized``, made once."""
    folder = work / "opus-mt-sized"
    if (folder / "model.safetensors").exists():
        return folder
    import io

    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    files = work / "tokenizer-files"
    files.mkdir(parents=True, exist_ok=True)
    sentences = [line for side in ("src", "tgt") for line in (work / "raw" / f"train.{side}").read_text().splitlines()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=buf, vocab_size=60,
                                   model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                   minloglevel=2, num_threads=1)
    model_file = files / "sentencepiece.model"
    model_file.write_bytes(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    rows = OPUS_MT_EN_DE["vocab_size"]
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if not sp.is_control(i) and not sp.is_unknown(i):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    for i in range(rows - 1 - len(vocab)):
        vocab[f"\u2581filler{i}"] = len(vocab)
    vocab["<pad>"] = rows - 1
    (files / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tok = MarianTokenizer(str(model_file), str(model_file), vocab=str(files / "vocab.json"), source_lang="en",
                          target_lang="de")
    tok.save_pretrained(str(folder))
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(**OPUS_MT_EN_DE)).save_pretrained(str(folder))
    return folder


def prepare(work: Path) -> Path:
    """The toy documents, the folder and ``docctx-prepare --pretrained`` of the documents (once)."""
    from benchmarks.toy import run, write_toy_documents

    data = work / "bin"
    if (data / "docctx.json").exists():
        return data
    raw = write_toy_documents(work / "raw", docs=(60, 4, 4))
    folder = make_folder(work)
    run(["docctx-prepare", "-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--validpref", raw / "valid",
         "--destdir", data, "--pretrained", folder, "--workers", "1"])
    return data


def train_argv(variant: str, data: Path, folder: Path):
    """fairseq-train's options of a variant (the module doc)."""
    common = [str(data), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
              "--context-size", "0", "--optimizer", "adam", "--lr", "1e-4", "--max-tokens", "1024", "--cpu",
              "--seed", "1", "--num-workers", "0"]
    if variant == "import":
        return common + ["--arch", "concat_transformer", "--init-from-pretrained", str(folder)]
    c = OPUS_MT_EN_DE
    return common + ["--arch", "transformer", "--encoder-layers", str(c["encoder_layers"]),
                     "--decoder-layers", str(c["decoder_layers"]), "--encoder-embed-dim", str(c["d_model"]),
                     "--decoder-embed-dim", str(c["d_model"]), "--encoder-ffn-embed-dim", str(c["encoder_ffn_dim"]),
                     "--decoder-ffn-embed-dim", str(c["decoder_ffn_dim"]),
                     "--encoder-attention-heads", str(c["encoder_attention_heads"]),
                     "--decoder-attention-heads", str(c["decoder_attention_heads"]), "--share-all-embeddings",
                     "--max-source-positions", str(c["max_position_embeddings"]),
                     "--max-target-positions", str(c["max_position_embeddings"])]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB


def worker(variant: str, data: str, folder: str) -> None:
    """Build one variant as fairseq-train does; print one ``RESULT`` JSON line."""
    import contextlib
    import importlib

    import torch

    importlib.import_module("transformers")  # imported by both variants before the base is read

    from benchmarks.bench_models import train_setup

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cfg, task = train_setup(train_argv(variant, Path(data), Path(folder)))
    base = peak_mib()
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # the import's report lines
        model = task.build_model(cfg.model)
    seconds = time.perf_counter() - start
    params = {id(p): p for p in model.parameters()}.values()
    out = {"variant": variant, "base_mib": base, "peak_mib": peak_mib(), "seconds": seconds,
           "params": sum(p.numel() for p in params), "param_bytes": sum(p.numel() * p.element_size() for p in params),
           "rows": len(task.source_dictionary)}
    print("RESULT " + json.dumps(out), flush=True)


def measure(variant: str, data: Path, folder: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    cmd = [sys.executable, "-m", "benchmarks.bench_hf_memory", "--worker", variant, "--data", str(data),
           "--folder", str(folder)]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    res = [line[7:] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    if p.returncode or not res:
        sys.exit(f"{variant}: the worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(res[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default=str(WORK))
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.data, a.folder)
    work = Path(a.workdir)
    data = prepare(work)
    folder = make_folder(work)
    runs = {v: [] for v in VARIANTS}
    for r in range(a.repeats):
        for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            runs[v].append(measure(v, data, folder))
            print(json.dumps(runs[v][-1]), flush=True)
    best = {v: min(rs, key=lambda x: x["peak_mib"]) for v, rs in runs.items()}
    for v in VARIANTS:
        best[v]["build_mib"] = min(x["peak_mib"] - x["base_mib"] for x in runs[v])
        best[v]["seconds"] = min(x["seconds"] for x in runs[v])
    mib = 2 ** 20
    print(f"\nfolder: {folder} ({sum(f.stat().st_size for f in folder.iterdir()) / mib:,.0f} MiB on disk); "
          f"data dictionary {best['import']['rows']:,} symbols; best of {a.repeats}, runs alternating")
    print("\n| variant | parameters | parameter bytes | base RSS | peak RSS | peak − base | build time |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    names = {"import": "`concat_transformer --init-from-pretrained DIR` (the import)",
             "fairseq": "fairseq's `transformer`, same size, built directly"}
    for v in VARIANTS:
        b = best[v]
        print(f"| {names[v]} | {b['params']:,} | {b['param_bytes'] / mib:,.0f} MiB | {b['base_mib']:,.0f} MiB "
              f"| {b['peak_mib']:,.0f} MiB | {b['build_mib']:,.0f} MiB | {b['seconds']:.1f} s |")
    i, f = best["import"], best["fairseq"]
    print(f"\nratio import / fairseq: parameters {i['params'] / f['params']:.4f}, peak RSS "
          f"{i['peak_mib'] / f['peak_mib']:.2f}, peak − base {i['build_mib'] / f['build_mib']:.2f}")


if __name__ == "__main__":
    main()
