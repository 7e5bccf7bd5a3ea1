"""``docctx-translate``: translate raw documents in document order.

Reads the formats ``docctx-prepare`` reads (plain text + ``.docids``, blank-line separated,
``<d>`` markers, IWSLT/WMT XML; standard input when no file is given), applies the
SentencePiece model stored with the data, translates every document in order with the
model's own previous translations as target context, detokenizes, and writes the documents
in the input's format (XML keeps docids and seg ids).
"""
import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings

from ..data.readers import DocumentFormatError, docids_path, read_file
from ..data.writers import write_documents


def build_parser():
    p = argparse.ArgumentParser(
        prog="docctx-translate",
        description="Translate raw documents in document order with a fairseq_docctx checkpoint.",
    )
    p.add_argument("input", nargs="?", help="input file (default: standard input)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt)")
    p.add_argument("--data", help="data directory with the dictionaries (and spm.model); "
                   "default: the checkpoint's directory if it has them, else the training data")
    p.add_argument("--spm-model", help="SentencePiece model (default: spm.model of --data)")
    p.add_argument("--input-format", default="auto", choices=["auto", "docids", "blank", "marker", "xml"])
    p.add_argument("--docids", help="document-id file of a docids-format input "
                   "(default: the input path with its extension replaced by .docids)")
    p.add_argument("-o", "--output", help="output file (default: standard output); with the "
                   "docids format the ids go to OUTPUT's .docids file")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16,
                   help="documents decoded side by side")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--context-size", type=int, default=None,
                   help="override the model's number of context sentences")
    p.add_argument("--target-context", choices=["hypothesis", "reference"], default="hypothesis",
                   help=argparse.SUPPRESS)
    p.add_argument("--cpu", action="store_true", help="decode on the CPU even if a GPU is there")
    p.add_argument("--fp16", action="store_true", help="half-precision inference")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _progress(total_sents, total_docs, quiet):
    from tqdm import tqdm

    bar = tqdm(total=total_sents, unit="sent", file=sys.stderr, disable=quiet,
               desc="translating", dynamic_ncols=True)

    def update(n_sents, docs_done):
        bar.update(n_sents)
        bar.set_postfix_str(f"documents {docs_done}/{total_docs}")

    return bar, update


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("fairseq", "fairseq_docctx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    tmp = None
    path = args.input
    if path is None:  # standard input: read it into a file the readers can sniff
        tmp = tempfile.mkdtemp(prefix="docctx-translate-")
        path = os.path.join(tmp, "stdin.txt")
        with open(path, "w", encoding="utf-8") as f:
            shutil.copyfileobj(sys.stdin, f)
    try:
        docids = args.docids or docids_path(path, None)
        docs, fmt = read_file(path, args.input_format, docids)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    from ..hub import from_pretrained

    overrides = {"target_context": args.target_context}
    if args.context_size is not None:
        overrides["context_size"] = args.context_size
    hub = from_pretrained(args.path, data=args.data, spm_model=args.spm_model,
                          cpu=args.cpu, fp16=args.fp16, **overrides)
    total = sum(len(d) for d in docs)
    bar, update = _progress(total, len(docs), args.quiet)
    start = time.time()
    translations = hub.translate_documents(
        [d.sentences for d in docs], beam=args.beam, batch_size=args.batch_size,
        max_tokens=args.max_tokens, progress=update, lenpen=args.lenpen,
        max_len_a=args.max_len_a, max_len_b=args.max_len_b,
    )
    bar.close()
    elapsed = time.time() - start
    cfg = hub.task.cfg
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    ids_out = None
    if fmt == "docids" and args.output:
        ids_out = open(docids_path(args.output, None), "w", encoding="utf-8")
    try:
        write_documents(docs, translations, fmt, out, ids_out,
                        src_lang=cfg.source_lang, tgt_lang=cfg.target_lang)
    finally:
        if args.output:
            out.close()
        if ids_out:
            ids_out.close()
    empty = sum(1 for t in translations for s in t if not s.strip())
    if empty:
        print(f"docctx-translate: warning: {empty} empty translations", file=sys.stderr)
    if not args.quiet:
        print(f"docctx-translate: {len(docs)} documents, {total} sentences in {elapsed:.1f}s "
              f"({total / max(elapsed, 1e-9):.1f} sentences/s)", file=sys.stderr)
    return translations


def cli_main(argv=None):
    try:
        main(argv)
    except (DocumentFormatError, FileNotFoundError, ValueError) as e:
        print(f"docctx-translate: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
