"""``docctx-generate``: ``fairseq-generate`` over several processes or GPUs.

    docctx-generate --processes N [--devices 0,1,...] [--work-dir DIR] -- <fairseq-generate arguments>

Runs N fairseq-generate processes, each with ``--num-shards N --shard-id I`` (the documents of
shard I, :mod:`fairseq_docctx.inference.generate`), and writes one output: every sentence's
lines in sentence-id order, a summary and the score over the whole split.
"""
import argparse
import logging
import sys

from . import add_force, exit_on_errors_and_signals, quiet_logging


def build_parser():
    p = argparse.ArgumentParser(
        prog="docctx-generate",
        usage="docctx-generate [--processes N] [--devices LIST] [--work-dir DIR] [--force] -- FAIRSEQ_GENERATE_ARGS...",
        description="fairseq-generate over several processes or GPUs: the documents of the split "
        "are shared out (balanced by sentence count), the outputs merged in sentence-id order.",
    )
    p.add_argument("--processes", type=int, default=None, metavar="N",
                   help="number of fairseq-generate processes (default: one per device of --devices, else 1)")
    p.add_argument("--devices", metavar="LIST",
                   help="GPUs, e.g. 0,1: process I runs on device I mod len(LIST) (CUDA_VISIBLE_DEVICES); "
                   "a GPU torch does not see is refused; default: every process on the CPU (--cpu added)")
    p.add_argument("--work-dir", metavar="DIR",
                   help="keep each shard's output and log here (default: a temporary directory, removed)")
    p.add_argument("--allow-skipped", action="store_true",
                   help="leave out sentences longer than the model allows (adds "
                   "--skip-invalid-size-inputs-valid-test) and exit 0; each is still reported by id. "
                   "Without it, a sentence left out by --skip-invalid-size-inputs-valid-test makes "
                   "the run exit with code 2 (after writing the output)")
    add_force(p, "a --results-path generate-SUBSET.txt or --work-dir shard file")
    p.add_argument("fairseq_args", nargs=argparse.REMAINDER,
                   help="fairseq-generate's arguments, after --")
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        args = build_parser().parse_args(argv[:cut])
        args.fairseq_args = argv[cut + 1:]
    else:
        args = build_parser().parse_args(argv)
    if not args.fairseq_args:
        build_parser().error("give the fairseq-generate arguments after --")
    quiet_logging()
    logging.getLogger("hydra").setLevel(logging.WARNING)
    from ..inference.generate import generate
    from ..inference.shards import parse_devices

    def report(line):
        print(f"docctx-generate: {line}", file=sys.stderr, flush=True)

    return generate(args.fairseq_args, processes=args.processes, devices=parse_devices(args.devices),
                    work_dir=args.work_dir, allow_skipped=args.allow_skipped, report=report, force=args.force)


def cli_main(argv=None):
    exit_on_errors_and_signals("docctx-generate", main, argv, (ValueError, FileNotFoundError))


if __name__ == "__main__":
    cli_main()
