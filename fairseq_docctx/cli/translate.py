"""``docctx-translate``: translate raw documents in document order.

Reads the formats ``docctx-prepare`` reads (plain text + ``.docids``, blank-line separated,
``<d>`` markers, IWSLT/WMT XML, WMT 2021+ XML, JSON Lines; standard input when no file is
given) as it is needed, a chunk of documents at a time, applies the
SentencePiece model stored with the data, translates every document in order with the
model's own previous translations as target context, detokenizes, and writes the documents
in the input's format (XML keeps the set's id and languages, the documents' attributes
and the seg ids; ``--system-name`` is the sysid; WMT 2021+ XML gets a ``<hyp system=NAME>``
beside each document's source and references; JSON Lines a ``"hyp"`` list in each line's
object). With ``-o`` the output is checked first by the one output guard
(:mod:`fairseq_docctx.data.outputs`: refused if it is a file the run reads, or an existing
file ``docctx-translate`` did not write, unless ``--force``), written document by document as they complete into a temporary file beside it, and moved
into place at the end.

Parses the command line (``--engine`` and each engine's own options from
:mod:`fairseq_docctx.engines`), takes the engine of the options (:func:`load_model` is the
model it loads) and calls :mod:`fairseq_docctx.inference.translate` with it, which does the
work (one process, a shard process, or several shard processes with ``--processes``).
"""
import argparse
import sys

from . import exit_on_errors_and_signals, quiet_logging
from ..data.documents import DocumentFormatError
from ..data.readers import INPUT_FORMATS
from ..engines import add_engine_arguments, engine_of
from ..inference.options import TRANSLATE_DEFAULTS


def build_parser():
    p = argparse.ArgumentParser(
        prog="docctx-translate",
        description="Translate raw documents in document order with a fairseq_docctx checkpoint.",
    )
    p.add_argument("input", nargs="?", help="input file (default: standard input)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt); with --engine ctranslate2 the "
                   "folder docctx-export ctranslate2 wrote")
    add_engine_arguments(p)
    p.add_argument("--data", help="data directory with the dictionaries (and the SentencePiece "
                   "model its docctx.json names); default: the checkpoint's directory if it has "
                   "them, else the training data")
    p.add_argument("--spm-model", help="SentencePiece model (default: the one docctx.json of --data "
                   "names)")
    p.add_argument("--input-format", default="auto", choices=INPUT_FORMATS)
    p.add_argument("--docids", help="document-id file of a docids-format input "
                   "(default: the input path with its extension replaced by .docids, e.g. "
                   "test.en -> test.docids; standard input needs --docids)")
    p.add_argument("-o", "--output", help="output file (default: standard output); with the "
                   "docids format the ids go to OUTPUT with its extension replaced by .docids "
                   "(left as it is when that is the input's document-id file); refused when it "
                   "is a file the run reads, and when it exists and docctx-translate did not write it "
                   "as this output (unless --force); missing folders are created")
    p.add_argument("--force", action="store_true",
                   help="replace an existing -o file (and its .docids file) that docctx-translate did not "
                   "write; never a file the run reads")
    p.add_argument("--beam", type=int, default=TRANSLATE_DEFAULTS["beam"])
    p.add_argument("--lenpen", type=float, default=TRANSLATE_DEFAULTS["lenpen"])
    p.add_argument("--max-len-a", type=float, default=TRANSLATE_DEFAULTS["max_len_a"],
                   help="a translation (a segment model's: a segment) has at most A x the source's tokens + B")
    p.add_argument("--max-len-b", type=int, default=TRANSLATE_DEFAULTS["max_len_b"])
    p.add_argument("--no-sentence-length-window", action="store_true",
                   help="a segment model (g_transformer, doc2doc_transformer): no length window for its "
                   "output sentences (by default, as the G-Transformer authors decode, output sentence i has "
                   "at least 1 and at most 1.2 |s_i| + 10 tokens)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="documents decoded side by side")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--context-size", type=int, default=None,
                   help="number of context sentences (default: the checkpoint's; another value needs "
                   "--context-override)")
    p.add_argument("--context-override", action="store_true",
                   help="decode with a --context-size other than the checkpoint's (one warning line says so); "
                   "without it such a value is refused")
    p.add_argument("--target-context", choices=["hypothesis", "reference"], default="hypothesis",
                   help=argparse.SUPPRESS)
    p.add_argument("--draft-path", metavar="CKPT",
                   help="for a model that reads drafts (mht_transformer): the src->tgt sentence-level "
                   "checkpoint that translates every sentence first (default: the one the model "
                   "records, which initialised its source-side sentence encoder)")
    p.add_argument("--draft-beam", type=int, default=None, help="beam of the drafts (default: --beam)")
    p.add_argument("--cpu", action="store_true", help="decode on the CPU even if a GPU is there")
    p.add_argument("--fp16", action="store_true", help="half-precision inference")
    p.add_argument("--system-name", default="fairseq_docctx", metavar="NAME",
                   help="XML/SGML output: the sysid of every document; WMT 2021+ XML: the system of "
                   "the <hyp> elements (default: fairseq_docctx)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--processes", type=int, default=None, metavar="N",
                   help="translate in N processes, each with a share of the documents (balanced by "
                   "sentence count), merged in input order (default: one per device of --devices, else 1)")
    p.add_argument("--devices", metavar="LIST",
                   help="with --processes: GPUs, e.g. 0,1; process I runs on device I mod len(LIST) "
                   "(CUDA_VISIBLE_DEVICES); default: every process on the CPU")
    # one shard's process (run by --processes): its documents, written to a shard file
    p.add_argument("--num-shards", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--shard-id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--shard-output", help=argparse.SUPPRESS)
    return p


def load_model(args):
    """The model that translates, loaded from the parsed options (the checkpoint ``--path``
    with ``--data``, ``--spm-model``, ``--draft-path``...) by the engine of ``--engine``
    (:func:`fairseq_docctx.engines.engine_of`)."""
    return engine_of(args).load(args)


#: options a shard process gets from the launcher, not from the command line
_LAUNCHER_OPTIONS = {"input", "output", "force", "processes", "devices", "num_shards", "shard_id", "shard_output",
                     "quiet", "input_format", "docids", "cpu"}


def _shard_command(args, input_path, fmt, devices):
    """The command line of a shard process: this command on ``input_path`` with the same
    options, quiet, on the CPU unless ``devices``."""
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "fairseq_docctx.cli.translate",
            input_path, "--input-format", fmt, "--quiet"]
    if args.docids:
        argv += ["--docids", args.docids]
    if not devices or args.cpu:
        argv.append("--cpu")
    for a in build_parser()._actions:
        if not a.option_strings or a.dest in _LAUNCHER_OPTIONS or a.dest == "help":
            continue
        value, flag = getattr(args, a.dest), [o for o in a.option_strings if o.startswith("--")][0]
        if isinstance(a, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def _report(args, counts, elapsed, fallbacks=None, processes=1):
    """The run's lines on standard error: empty translations, a segment model's fallbacks,
    and (unless ``--quiet``) the documents, sentences and speed (``counts``: the
    :class:`~fairseq_docctx.inference.translate.Counts` of the run)."""
    if counts.empty:
        print(f"docctx-translate: warning: {counts.empty} empty translations", file=sys.stderr)
    if fallbacks is not None:  # a segment model: its segments decoded again sentence by sentence
        from ..tasks.segment_decoding import fallback_line

        why = fallbacks[2] if len(fallbacks) > 2 else {}
        print(f"docctx-translate: {fallback_line(fallbacks[0], fallbacks[1], why)}", file=sys.stderr)
    if not args.quiet:
        total = counts.sentences
        by = f" with {processes} processes" if processes > 1 else ""
        print(f"docctx-translate: {counts.documents} documents, {total} sentences in {elapsed:.1f}s{by} "
              f"({total / max(elapsed, 1e-9):.1f} sentences/s)", file=sys.stderr)


def main(argv=None):
    from ..inference.options import check_at_least
    from ..inference.shards import num_processes, parse_devices

    args = build_parser().parse_args(argv)
    check_at_least({"--beam": args.beam, "--draft-beam": args.draft_beam, "--batch-size": args.batch_size,
                    "--max-tokens": args.max_tokens})
    check_at_least({"--max-len-a": args.max_len_a, "--max-len-b": args.max_len_b}, minimum=0)
    engine = engine_of(args)  # another engine's options and what does not apply refused
    quiet_logging()
    from ..inference.translate import translate_file, translate_in_processes, translate_shard

    if args.shard_output is not None:
        return translate_shard(args, engine)
    devices = parse_devices(args.devices, cpu=args.cpu)
    n = num_processes(args.processes, devices)
    if n > 1 or devices:
        counts, elapsed, fallbacks = translate_in_processes(
            args, engine, lambda path, fmt: _shard_command(args, path, fmt, devices), n, devices)
        _report(args, counts, elapsed, fallbacks, n)
        return
    counts, elapsed, fallbacks = translate_file(args, engine)
    _report(args, counts, elapsed, fallbacks)


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..errors import CheckpointError

    exit_on_errors_and_signals("docctx-translate", main, argv, (DocumentFormatError, FileNotFoundError,
                                                                CheckpointError, ManifestError, ValueError))


if __name__ == "__main__":
    cli_main()
