"""``docctx-translate``: translate raw documents in document order.

Reads the formats ``docctx-prepare`` reads (plain text + ``.docids``, blank-line separated,
``<d>`` markers, IWSLT/WMT XML, WMT 2021+ XML, JSON Lines; standard input when no file is
given), applies the
SentencePiece model stored with the data, translates every document in order with the
model's own previous translations as target context, detokenizes, and writes the documents
in the input's format (XML keeps the set's id and languages, the documents' attributes
and the seg ids; ``--system-name`` is the sysid; WMT 2021+ XML gets a ``<hyp system=NAME>``
beside each document's source and references; JSON Lines a ``"hyp"`` list in each line's
object). With ``-o`` the output is checked first (and refused if it is a file the run
reads), written document by document as they complete into a temporary file beside it, and moved
into place at the end.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from . import exit_on_errors_and_signals, quiet_logging
from ..data.readers import INPUT_FORMATS, DocumentFormatError, docids_path, read_file, read_set_attributes
from ..data.writers import DocumentWriter


def build_parser():
    p = argparse.ArgumentParser(
        prog="docctx-translate",
        description="Translate raw documents in document order with a fairseq_docctx checkpoint.",
    )
    p.add_argument("input", nargs="?", help="input file (default: standard input)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt); with --engine ctranslate2 the "
                   "folder docctx-export ctranslate2 wrote")
    p.add_argument("--engine", choices=["fairseq", "ctranslate2"], default="fairseq",
                   help="what decodes: fairseq (default) or CTranslate2 (a model exported by docctx-export "
                   "ctranslate2; transformer, concat_transformer)")
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
                   "is a file the run reads")
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


def _progress(total_sents, total_docs, quiet):
    from tqdm import tqdm

    bar = tqdm(total=total_sents, unit="sent", file=sys.stderr, disable=quiet,
               desc="translating", dynamic_ncols=True)

    def update(n_sents, docs_done):
        bar.update(n_sents)
        bar.set_postfix_str(f"documents {docs_done}/{total_docs}")

    return bar, update


STDIN = "<stdin>"


def _read_input(args, keep_dir=None):
    """The input documents, their format and (XML) the set element's attributes; standard
    input is read as bytes, so that invalid UTF-8 is reported as ``<stdin>:LINE`` (and kept
    as ``keep_dir/stdin.txt`` if ``keep_dir`` is given)."""
    if args.input is None and args.input_format == "docids" and not args.docids:
        raise ValueError(f"{STDIN}: --input-format docids reads the document ids from a file: "
                         "give it with --docids FILE")
    if args.input is not None:
        docids = args.docids or docids_path(args.input, None)
        docs, fmt = read_file(args.input, args.input_format, docids)
        return docs, fmt, read_set_attributes(args.input) if fmt == "xml" else None
    tmp = keep_dir or tempfile.mkdtemp(prefix="docctx-translate-")
    try:
        path = os.path.join(tmp, "stdin.txt")
        with open(path, "wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f)
        try:
            docs, fmt = read_file(path, args.input_format, args.docids or docids_path(path, None),
                                  name="stdin")
        except DocumentFormatError as e:
            raise DocumentFormatError(STDIN, e.line, e.message) from None
        for d in docs:
            d.path = STDIN
        return docs, fmt, read_set_attributes(path) if fmt == "xml" else None
    finally:
        if keep_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_separator(docs, separator):
    """Refuse input holding the context separator, as docctx-prepare does."""
    for d in docs:
        for s, ln in zip(d.sentences, d.lines):
            if separator and separator in s:
                raise DocumentFormatError(
                    d.path, ln, f"the context separator {separator!r} of the model's data occurs in "
                    "the text; the model would read it as a sentence boundary")


def _same_file(a, b):
    """Whether two paths name one file (the same inode: links and other spellings too)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _files_read(args, fmt):
    """The files a run reads, as (what it is, path): the input, the document ids of a docids
    input, the checkpoint, the draft checkpoint, the SentencePiece model, and the
    dictionaries, ``docctx.json`` and SentencePiece models of ``--data`` and of the
    checkpoint's directory."""
    import glob

    files = [("the input", args.input), ("the checkpoint", args.path), ("the draft checkpoint", args.draft_path),
             ("the SentencePiece model", args.spm_model)]
    if fmt == "docids":
        files.append(("the input's document ids",
                      args.docids or (docids_path(args.input, None) if args.input else None)))
    folders = {args.data, os.path.dirname(os.path.abspath(args.path))}
    if os.path.isdir(args.path):  # an exported model's folder (--engine ctranslate2)
        folders.add(args.path)
    for d in folders:
        if d:
            files += [("the model's data file", f) for pattern in ("dict.*.txt", "docctx.json", "*.model")
                      for f in glob.glob(os.path.join(glob.escape(d), pattern))]
    return [(what, f) for what, f in files if f]


def _file_mode(target):
    """The mode of an output file: that of the file it replaces, else 0666 less the umask
    (what ``open(target, "w")`` gives)."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class _Output:
    """``-o FILE`` (and its ``.docids`` file): temporary files beside the destination,
    created before any work (so a directory that is missing or not writable fails first)
    and moved into place by :meth:`commit`, with the mode the files would have if written
    directly; standard output without ``-o``. ``inputs``: the files the run reads, which
    (what it is, path) pairs, which the output must not be (the ``.docids`` file may be the
    input's document ids, the same ids: it is left as it is)."""

    def __init__(self, path, with_docids, inputs=(), input_docids=None):
        self.targets, self.files = [], []
        if path is None:
            self.out, self.ids = sys.stdout, None
            return
        targets = [path]
        if with_docids:
            ids = docids_path(path, None)
            if not (input_docids and _same_file(ids, input_docids)):
                targets.append(ids)
        for t in targets:
            read = next(((what, f) for what, f in inputs if _same_file(t, f)), None)
            if read is not None:
                raise OutputError(f"-o {path}: {t} is {read[0]} {read[1]}, which the run reads: give another "
                                  "output file")
        for t in targets:
            d = os.path.dirname(os.path.abspath(t))
            if os.path.isdir(t):
                self.discard()
                raise OutputError(f"-o {path}: {t} is a directory")
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(t)}.", suffix=".part", dir=d)
                os.fchmod(fd, _file_mode(t))
            except OSError as e:
                self.discard()
                raise OutputError(f"-o {path}: cannot write in {d} ({e.strerror or e})") from None
            self.targets.append(t)
            self.files.append((tmp, os.fdopen(fd, "w", encoding="utf-8")))
        self.out = self.files[0][1]
        self.ids = self.files[1][1] if len(self.files) > 1 else None

    def commit(self):
        for (tmp, f), t in zip(self.files, self.targets):
            f.close()
            os.replace(tmp, t)
        self.files = []

    def discard(self):
        for tmp, f in self.files:
            f.close()
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self.files = []


def _open_output(args, fmt):
    """The output of the arguments (:class:`_Output`), refused if it is a file the run reads."""
    input_docids = None
    if fmt == "docids":
        input_docids = args.docids or (docids_path(args.input, None) if args.input else None)
    return _Output(args.output, fmt == "docids", _files_read(args, fmt), input_docids)


class OutputError(ValueError):
    """An output file that cannot be written."""


def _load(args, docs):
    """The model (hub) of the arguments; the input checked against its separator."""
    from ..hub import from_pretrained

    overrides = {"target_context": args.target_context}
    if args.context_size is not None:
        overrides["context_size"] = args.context_size
    if args.engine == "ctranslate2":
        from ..hub import from_exported

        if args.fp16 or args.draft_path:
            raise ValueError(f"--engine ctranslate2: {'--fp16' if args.fp16 else '--draft-path'} does not apply "
                             "(the precision is the export's --quantization; drafts-reading models do not export)")
        hub = from_exported(args.path, data=args.data, spm_model=args.spm_model, cpu=args.cpu, **overrides)
        _check_separator(docs, getattr(hub.task.cfg, "context_separator", None))
        return hub
    hub = from_pretrained(args.path, data=args.data, spm_model=args.spm_model,
                          cpu=args.cpu, fp16=args.fp16, draft_path=args.draft_path,
                          draft_beam=args.draft_beam or args.beam, **overrides)
    _check_separator(docs, getattr(hub.task.cfg, "context_separator", None))
    return hub


def _translate(hub, args, docs, progress=None, document_done=None, keep=True):
    """Translate ``docs``; every sentence is encoded and its length checked first (one
    error naming its file and line before any decoding), and encoded once."""
    from ..inference.translate import check_lengths

    return hub.translate_documents(
        [d.sentences for d in docs], beam=args.beam, batch_size=args.batch_size,
        max_tokens=args.max_tokens, progress=progress, document_done=document_done,
        keep=keep, lenpen=args.lenpen, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
        tokens=check_lengths(hub, docs, args.max_tokens),
    )


def _translate_and_write(hub, args, docs, writer, out):
    """Translate the documents and write each one, in input order, as soon as it and
    those before it are done; a written document's translation is dropped, so memory
    holds the translations of the documents still open rather than the whole output. Returns the
    number of empty translations."""
    bar, update = _progress(sum(len(d) for d in docs), len(docs), args.quiet)
    pending, next_doc, empty = {}, 0, 0

    def document_done(i, translation):
        nonlocal next_doc, empty
        pending[i] = translation
        while next_doc in pending:
            translation = pending.pop(next_doc)
            empty += sum(1 for s in translation if not s.strip())
            writer.write(docs[next_doc], translation)
            next_doc += 1
        out.flush()

    _translate(hub, args, docs, progress=update, document_done=document_done, keep=False)
    bar.close()
    return empty


#: options a shard process gets from the launcher, not from the command line
_LAUNCHER_OPTIONS = {"input", "output", "processes", "devices", "num_shards", "shard_id", "shard_output",
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


def _translate_shard(args, docs):
    """One shard process: the documents of shard ``--shard-id``, to ``--shard-output``."""
    from ..inference.translate import ShardWriter, shard_documents

    mine = shard_documents([len(d) for d in docs], args.num_shards, args.shard_id)
    hub = _load(args, docs)
    writer = ShardWriter(args.shard_output, hub.task.cfg.source_lang, hub.task.cfg.target_lang)
    try:
        _translate(hub, args, [docs[i] for i in mine],
                   document_done=lambda k, translation: writer.write(mine[k], translation), keep=False)
    finally:
        writer.close()


def _translate_in_processes(args, n, devices):
    """``--processes N``: the documents translated by N shard processes, written in input
    order once all are done."""
    from ..inference.translate import translate_sharded

    work = tempfile.mkdtemp(prefix="docctx-translate-")
    try:
        docs, fmt, set_attributes = _read_input(args, keep_dir=work)
        output = _open_output(args, fmt)
        try:
            start = time.time()
            langs, translations = translate_sharded(
                _shard_command(args, args.input or os.path.join(work, "stdin.txt"), fmt, devices),
                [len(d) for d in docs], n, devices, work_dir=os.path.join(work, "shards"))
            elapsed = time.time() - start
            writer = DocumentWriter(fmt, output.out, output.ids, src_lang=langs.get("source_lang"),
                                    tgt_lang=langs.get("target_lang"), sysid=args.system_name,
                                    set_attributes=set_attributes)
            for doc, translation in zip(docs, translations):
                writer.write(doc, translation)
            writer.close()
            output.commit()
        finally:
            output.discard()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return docs, translations, elapsed


def _report(args, docs, empty, elapsed, processes=1):
    if empty:
        print(f"docctx-translate: warning: {empty} empty translations", file=sys.stderr)
    if not args.quiet:
        total = sum(len(d) for d in docs)
        by = f" with {processes} processes" if processes > 1 else ""
        print(f"docctx-translate: {len(docs)} documents, {total} sentences in {elapsed:.1f}s{by} "
              f"({total / max(elapsed, 1e-9):.1f} sentences/s)", file=sys.stderr)


def main(argv=None):
    from ..inference.shards import num_processes, parse_devices

    from ..inference.options import check_at_least

    args = build_parser().parse_args(argv)
    check_at_least({"--beam": args.beam, "--draft-beam": args.draft_beam, "--batch-size": args.batch_size,
                    "--max-tokens": args.max_tokens})
    quiet_logging()
    if args.shard_output is not None:
        return _translate_shard(args, _read_input(args)[0])
    devices = parse_devices(args.devices)
    n = num_processes(args.processes, devices)
    if n > 1 or devices:
        docs, translations, elapsed = _translate_in_processes(args, n, devices)
        _report(args, docs, sum(1 for t in translations for s in t if not s.strip()), elapsed, n)
        return translations
    docs, fmt, set_attributes = _read_input(args)
    output = _open_output(args, fmt)
    try:
        hub = _load(args, docs)
        cfg = hub.task.cfg
        writer = DocumentWriter(fmt, output.out, output.ids, src_lang=cfg.source_lang,
                                tgt_lang=cfg.target_lang, sysid=args.system_name,
                                set_attributes=set_attributes)
        start = time.time()
        empty = _translate_and_write(hub, args, docs, writer, output.out)
        elapsed = time.time() - start
        writer.close()
        output.commit()
    finally:
        output.discard()
    _report(args, docs, empty, elapsed)


def cli_main(argv=None):
    from ..data.manifest import ManifestError
    from ..hub import CheckpointError

    exit_on_errors_and_signals("docctx-translate", main, argv, (DocumentFormatError, FileNotFoundError,
                                                                CheckpointError, ManifestError, OutputError,
                                                                ValueError))


if __name__ == "__main__":
    cli_main()
