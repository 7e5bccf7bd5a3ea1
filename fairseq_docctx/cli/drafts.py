"""``docctx-drafts``: translate every source sentence of a prepared data directory with a
sentence-level checkpoint, the drafts of the Multi-Hop Transformer (Zhang et al. 2021, §3.1).

Only parses the command line and calls :func:`fairseq_docctx.inference.drafts.make_drafts`;
see docs/drafts.md.
"""
import argparse
import sys

from . import exit_on_errors_and_signals, quiet_logging
from ..engines import ENGINES, add_engine_arguments


def build_parser():
    from ..data.draft_settings import DEFAULT_BEAM, DEFAULT_CHUNK_SENTENCES

    p = argparse.ArgumentParser(
        prog="docctx-drafts",
        description="Translate every source sentence of the splits of a prepared data directory "
                    "with a sentence-level src->tgt checkpoint and store the translations (drafts) "
                    "as {split}.{src}-{tgt}.draft.{bin,idx} in that directory. Restartable.",
    )
    p.add_argument("data", metavar="DATA", help="data directory prepared by docctx-prepare")
    p.add_argument("--path", required=True, metavar="CKPT",
                   help="sentence-level src->tgt checkpoint (e.g. a transformer)")
    p.add_argument("--splits", default=None,
                   help="comma-separated splits (default: those docctx.json lists, else train,valid,test)")
    add_engine_arguments(p, options=False)
    p.add_argument("--beam", type=int, default=DEFAULT_BEAM, help=f"beam size (default {DEFAULT_BEAM})")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--max-tokens", type=int, default=None,
                      help="source tokens per batch (default 8000 unless --batch-size)")
    size.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    dev = p.add_mutually_exclusive_group()
    dev.add_argument("--cpu", action="store_true", help="decode on the CPU even if a GPU is there")
    dev.add_argument("--fp16", action="store_true", help="half-precision inference")
    p.add_argument("--chunk-sentences", type=int, default=DEFAULT_CHUNK_SENTENCES, metavar="N",
                   help="sentences per chunk of restartable work (default %(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="make the drafts again even of splits made with the same checkpoint and beam")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class _Progress:
    """A tqdm bar per split: sentences done of the split's total."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.bar = None
        self.split = None

    def __call__(self, split, done, total):
        from tqdm import tqdm

        if split != self.split:
            self.close()
            self.split = split
            self.bar = tqdm(total=total, initial=done, unit="sent", file=sys.stderr,
                            disable=self.quiet, desc=f"drafts {split}", dynamic_ncols=True)
        self.bar.update(done - self.bar.n)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def load_translator(args):
    """What loads the sentence-level model that makes the drafts, for the parsed options
    (:func:`~fairseq_docctx.inference.drafts.make_drafts`' ``load``): the draft loader of the
    engine of ``--engine`` (:meth:`fairseq_docctx.engines.base.Engine.draft_loader`)."""
    return ENGINES[args.engine].draft_loader()


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_logging()
    from ..inference.drafts import make_drafts

    splits = None
    if args.splits is not None:
        splits = [s.strip() for s in args.splits.split(",") if s.strip()]
        if not splits:
            raise ValueError("--splits: no split given")
    progress = _Progress(args.quiet)

    def log(line):
        progress.close()
        print(f"docctx-drafts: {line}", file=sys.stderr, flush=True)

    try:
        results = make_drafts(args.data, args.path, splits=splits, beam=args.beam,
                              max_tokens=args.max_tokens, batch_size=args.batch_size,
                              cpu=True if args.cpu else None, fp16=args.fp16,
                              chunk_sentences=args.chunk_sentences, overwrite=args.overwrite,
                              progress=progress, log=log, load=load_translator(args))
    finally:
        progress.close()
    for r in results:
        if r.skipped:
            line = f"{r.split}: {r.sentences} sentences, already made ({r.prefix}.bin/.idx)"
        else:
            rate = r.translated / max(r.seconds, 1e-9)
            line = (f"{r.split}: {r.sentences} sentences ({r.translated} translated"
                    + (f", {r.reused} from an earlier run" if r.reused else "")
                    + f") in {r.seconds:.1f}s ({rate:.1f} sentences/s) -> {r.prefix}.bin/.idx")
        print(f"docctx-drafts: {line}", file=sys.stderr, flush=True)
    return results


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-drafts", main, argv, (FileNotFoundError, CheckpointError, ManifestError,
                                                             ValueError), message=str)  # DATA is positional


if __name__ == "__main__":
    cli_main()
