"""``docctx-translate``'s work: raw documents read, translated in document order, written.

:func:`translate_file` runs one process: the input read (:func:`read_input`), the output
opened (:class:`Output`: temporary files moved into place at the end), the model loaded,
every sentence encoded and its length checked (:func:`check_lengths`), and the documents
translated and written in input order as they complete (:func:`translate_and_write`).

With several processes (:func:`translate_in_processes`) every process reads the same input
and translates the documents of its shard (:func:`shard_documents`, :func:`translate_shard`),
writing them as they complete to a shard file (JSON Lines: a first line with the model's
languages, then ``{"doc": <number in the input>, "hyp": [...]}`` per document);
:func:`translate_sharded` runs the processes
(:func:`~fairseq_docctx.inference.shards.run_shards`) and returns the translations of all
documents in input order.

``options`` is a namespace with the options of ``docctx-translate`` (``input``,
``input_format``, ``docids``, ``output``, ``path``, ``data``, ``spm_model``, ``draft_path``,
``beam``, ``lenpen``, ``max_len_a``, ``max_len_b``, ``batch_size``, ``max_tokens``,
``system_name``, ``quiet``, and a shard process's ``num_shards``, ``shard_id``,
``shard_output``); ``load(options)`` returns the model (the hub's ``DocumentHubInterface``, or
an object with its ``translate_documents``, ``encode``, ``max_positions`` and ``task.cfg``).
"""
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..data.doc_index import balanced_shards, check_shard
from ..data.packed_tokens import PackedTokens
from ..data.paths import check_output, file_mode, same_path
from ..data.readers import DocumentFormatError, docids_path, read_file, read_set_attributes
from ..data.writers import DocumentWriter
from .shards import ShardError, run_shards, shard_environment


def shard_documents(lengths: Sequence[int], num_shards: int, shard_id: int) -> List[int]:
    """The numbers (in input order) of the documents of shard ``shard_id`` of ``num_shards``,
    given every document's sentence count (balanced by sentences, as ``fairseq-generate
    --num-shards`` shards a binarized split)."""
    return balanced_shards(lengths, num_shards)[check_shard(num_shards, shard_id)].tolist()


class ShardWriter:
    """A shard's translations, written to ``path`` as documents complete."""

    def __init__(self, path: str, source_lang: Optional[str], target_lang: Optional[str]):
        self.f = open(path, "w", encoding="utf-8")
        self._line({"source_lang": source_lang, "target_lang": target_lang})

    def _line(self, obj):
        self.f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.f.flush()

    def write(self, doc: int, translation: Sequence[str]):
        self._line({"doc": int(doc), "hyp": list(translation)})

    def write_fallbacks(self, report: Optional[tuple]):
        """A segment model's ``(segments decoded again sentence by sentence, segments decoded,
        {reason: misaligned segments})`` (the hub's ``segment_report``; nothing for other
        models)."""
        if report is not None:
            self._line({"segment_fallbacks": [int(report[0]), int(report[1])],
                        "segment_misaligned": {k: int(v) for k, v in report[2].items()}})

    def close(self):
        self.f.close()


def read_shard(path: str) -> Tuple[dict, Dict[int, List[str]]]:
    """A shard file: (its languages, translations by document number); a segment model's
    shard also reports its ``segment_fallbacks`` (:meth:`ShardWriter.write_fallbacks`), kept
    in the first item."""
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines:
        raise ShardError(f"{path}: empty shard output")
    header = dict(lines[0])
    for o in lines[1:]:
        if "segment_fallbacks" in o:
            header["segment_fallbacks"] = o["segment_fallbacks"]
            header["segment_misaligned"] = o.get("segment_misaligned", {})
    return header, {int(o["doc"]): o["hyp"] for o in lines[1:] if "doc" in o}


def translate_sharded(command: Sequence[str], lengths: Sequence[int], processes: int,
                      devices: Optional[Sequence[str]] = None, work_dir: Optional[str] = None
                      ) -> Tuple[dict, List[List[str]]]:
    """Run ``command + [--num-shards N --shard-id I --shard-output FILE]`` for each shard I
    (N = ``processes``, at most one per document), on ``devices`` in turn or on the CPU; return
    (the languages the shards report, with a segment model's ``segment_fallbacks``
    ``(fallbacks, decoded, {reason: misaligned})`` summed over the shards, the translations
    of the documents in input order, checked: every document once, one translation per
    sentence)."""
    n = max(1, min(processes, len(lengths)))
    tmp = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="docctx-translate-") if tmp else work_dir
    os.makedirs(work_dir, exist_ok=True)
    try:
        files = [os.path.join(work_dir, f"shard-{i}.jsonl") for i in range(n)]
        commands = [list(command) + ["--num-shards", str(n), "--shard-id", str(i), "--shard-output", files[i]]
                    for i in range(n)]
        run_shards(commands, [shard_environment(i, n, devices) for i in range(n)], work_dir,
                   name="docctx-translate shard")
        langs, found, fallbacks = {}, {}, None
        for i, path in enumerate(files):
            header, docs = read_shard(path)
            if "segment_fallbacks" in header:
                f, n_seg = header.pop("segment_fallbacks")
                why = header.pop("segment_misaligned", {})
                if fallbacks is None:
                    fallbacks = (0, 0, {})
                fallbacks = (fallbacks[0] + f, fallbacks[1] + n_seg,
                             {k: fallbacks[2].get(k, 0) + why.get(k, 0) for k in {*fallbacks[2], *why}})
            langs = langs or header
            for d, hyp in docs.items():
                if d in found:
                    raise ShardError(f"document {d} was translated by two shards")
                found[d] = hyp
    finally:
        if tmp:
            shutil.rmtree(work_dir, ignore_errors=True)
    out = []
    for d, n_sents in enumerate(lengths):
        if d not in found or len(found[d]) != n_sents:
            raise ShardError(f"document {d}: {len(found.get(d, []))} translations from the shards, "
                             f"{n_sents} sentences in the input")
        out.append(found[d])
    if fallbacks is not None:
        langs = {**langs, "segment_fallbacks": fallbacks}
    return langs, out


def check_lengths(hub, docs, max_tokens: Optional[int] = None) -> list:
    """The documents' sentences encoded (``hub.encode``), refusing, before any decoding, a
    sentence longer than the model takes (its encoder's positions, end-of-sentence token
    included) or than ``max_tokens`` (``--max-tokens``):
    :class:`~fairseq_docctx.data.readers.DocumentFormatError` naming its file and line.
    ``docs``: the documents read (:class:`~fairseq_docctx.data.readers.Document`), ``hub``: a
    :class:`~fairseq_docctx.hub.DocumentHubInterface` (its SentencePiece model and
    dictionary count the tokens). The tokens go to ``hub.translate_documents(tokens=...)``,
    so each sentence is encoded once; they are returned packed, one
    :class:`~fairseq_docctx.data.packed_tokens.PackedTokens` a document, so that a long
    input costs a few bytes a token."""

    limit = hub.max_positions
    if isinstance(limit, (tuple, list)):
        limit = limit[0]
    encoded = []
    for d in docs:
        encoded.append(PackedTokens())
        for s, line in zip(d.sentences, d.lines):
            t = hub.encode(s)
            encoded[-1].append(t)
            n = int(t.numel())  # with the end-of-sentence token
            if limit is not None and n > limit:
                raise DocumentFormatError(
                    d.path, line, f"a sentence of {n - 1:,} tokens; the model takes at most {limit - 1:,}: "
                    "split the line into sentences")
            if max_tokens is not None and n > max_tokens:
                raise DocumentFormatError(
                    d.path, line, f"a sentence of {n - 1:,} tokens ({n:,} with the end-of-sentence token), "
                    f"more than --max-tokens {max_tokens}: raise --max-tokens or split the line")
    return encoded


STDIN = "<stdin>"


class OutputError(ValueError):
    """An output file that cannot be written."""


def read_input(options, keep_dir: Optional[str] = None):
    """The input documents, their format and (XML) the set element's attributes; standard
    input is read as bytes, so that invalid UTF-8 is reported as ``<stdin>:LINE`` (and kept
    as ``keep_dir/stdin.txt`` if ``keep_dir`` is given)."""
    if options.input is None and options.input_format == "docids" and not options.docids:
        raise ValueError(f"{STDIN}: --input-format docids reads the document ids from a file: "
                         "give it with --docids FILE")
    if options.input is not None:
        docids = options.docids or docids_path(options.input, None)
        docs, fmt = read_file(options.input, options.input_format, docids)
        return docs, fmt, read_set_attributes(options.input) if fmt == "xml" else None
    tmp = keep_dir or tempfile.mkdtemp(prefix="docctx-translate-")
    try:
        path = os.path.join(tmp, "stdin.txt")
        with open(path, "wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f)
        try:
            docs, fmt = read_file(path, options.input_format, options.docids or docids_path(path, None),
                                  name="stdin")
        except DocumentFormatError as e:
            raise DocumentFormatError(STDIN, e.line, e.message) from None
        for d in docs:
            d.path = STDIN
        return docs, fmt, read_set_attributes(path) if fmt == "xml" else None
    finally:
        if keep_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def check_separator(docs, separator: Optional[str]) -> None:
    """Refuse input holding the context separator, as docctx-prepare does."""
    for d in docs:
        for s, ln in zip(d.sentences, d.lines):
            if separator and separator in s:
                raise DocumentFormatError(
                    d.path, ln, f"the context separator {separator!r} of the model's data occurs in "
                    "the text; the model would read it as a sentence boundary")


def files_read(options, fmt: str) -> List[Tuple[str, str]]:
    """The files a run reads, as (what it is, path): the input, the document ids of a docids
    input, the checkpoint (``checkpoint_best.pt`` of a ``--path`` folder), the draft
    checkpoint, the SentencePiece model, the dictionaries, ``docctx.json`` and SentencePiece
    models of ``--data`` and of the checkpoint's directory, and every file of an exported
    model's folder (``--engine ctranslate2``: its ``model.bin``, vocabularies, configuration
    and record)."""
    from .checkpoint import checkpoint_path

    exported = getattr(options, "engine", "fairseq") == "ctranslate2"
    checkpoint = options.path if exported else checkpoint_path(options.path)
    files = [("the input", options.input), ("the checkpoint", checkpoint),
             ("the draft checkpoint", options.draft_path), ("the SentencePiece model", options.spm_model)]
    if fmt == "docids":
        files.append(("the input's document ids",
                      options.docids or (docids_path(options.input, None) if options.input else None)))
    folders = {options.data, os.path.dirname(os.path.abspath(checkpoint))}
    if exported and os.path.isdir(options.path):
        files += [("the exported model's file", os.path.join(options.path, name))
                  for name in sorted(os.listdir(options.path))]
    for d in folders:
        if d:
            files += [("the model's data file", f) for pattern in ("dict.*.txt", "docctx.json", "*.model")
                      for f in glob.glob(os.path.join(glob.escape(d), pattern))]
    return [(what, f) for what, f in files if f]


class Output:
    """``-o FILE`` (and its ``.docids`` file): temporary files beside the destination,
    created before any work (so a directory that is missing or not writable fails first)
    and moved into place by :meth:`commit`, with the mode the files would have if written
    directly; standard output without ``-o``. ``inputs``: the files the run reads, as
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
            if not (input_docids and same_path(ids, input_docids)):
                targets.append(ids)
        for t in targets:
            check_output(f"-o {path}: {t}", t, inputs, error=OutputError)
        for t in targets:
            d = os.path.dirname(os.path.abspath(t))
            if os.path.isdir(t):
                self.discard()
                raise OutputError(f"-o {path}: {t} is a directory")
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(t)}.", suffix=".part", dir=d)
                os.fchmod(fd, file_mode(t))
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


def open_output(options, fmt: str) -> Output:
    """The output of the options (:class:`Output`), refused if it is a file the run reads."""
    input_docids = None
    if fmt == "docids":
        input_docids = options.docids or (docids_path(options.input, None) if options.input else None)
    return Output(options.output, fmt == "docids", files_read(options, fmt), input_docids)


def progress_bar(total_sents: int, total_docs: int, quiet: bool):
    """A tqdm bar of sentences on standard error and its ``update(sentences, documents_done)``."""
    from tqdm import tqdm

    bar = tqdm(total=total_sents, unit="sent", file=sys.stderr, disable=quiet,
               desc="translating", dynamic_ncols=True)

    def update(n_sents, docs_done):
        bar.update(n_sents)
        bar.set_postfix_str(f"documents {docs_done}/{total_docs}")

    return bar, update


def load_checked(load: Callable, options, docs):
    """``load(options)``, the model; the input checked against its context separator."""
    model = load(options)
    check_separator(docs, getattr(model.task.cfg, "context_separator", None))
    return model


def translate(model, docs, options, progress=None, document_done=None, keep=True):
    """Translate ``docs``; every sentence is encoded and its length checked first (one
    error naming its file and line before any decoding), and encoded once."""
    return model.translate_documents(
        [d.sentences for d in docs], beam=options.beam, batch_size=options.batch_size,
        max_tokens=options.max_tokens, progress=progress, document_done=document_done,
        keep=keep, lenpen=options.lenpen, max_len_a=options.max_len_a, max_len_b=options.max_len_b,
        tokens=check_lengths(model, docs, options.max_tokens),
    )


def translate_and_write(model, docs, options, writer, out) -> int:
    """Translate the documents and write each one, in input order, as soon as it and
    those before it are done; a written document's translation is dropped, so memory
    holds the translations of the documents still open rather than the whole output. Returns the
    number of empty translations."""
    bar, update = progress_bar(sum(len(d) for d in docs), len(docs), options.quiet)
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

    translate(model, docs, options, progress=update, document_done=document_done, keep=False)
    bar.close()
    return empty


def translate_file(options, load: Callable):
    """One process: the input read, the output opened (refused before the model is loaded
    when it cannot be written), the model loaded (``load(options)``), and the documents
    translated and written in input order. Returns (the documents, the number of empty
    translations, the seconds translating took, and a segment model's ``(segments decoded
    again sentence by sentence, segments decoded, {reason: misaligned segments})``, the hub's
    ``segment_report``, else ``None``)."""
    docs, fmt, set_attributes = read_input(options)
    output = open_output(options, fmt)
    try:
        model = load_checked(load, options, docs)
        cfg = model.task.cfg
        writer = DocumentWriter(fmt, output.out, output.ids, src_lang=cfg.source_lang,
                                tgt_lang=cfg.target_lang, sysid=options.system_name,
                                set_attributes=set_attributes)
        start = time.time()
        empty = translate_and_write(model, docs, options, writer, output.out)
        elapsed = time.time() - start
        writer.close()
        output.commit()
    finally:
        output.discard()
    return docs, empty, elapsed, getattr(model, "segment_report", None)


def translate_shard(options, load: Callable) -> None:
    """One shard process: the documents of shard ``options.shard_id`` of
    ``options.num_shards``, written as they complete to ``options.shard_output``."""
    docs = read_input(options)[0]
    mine = shard_documents([len(d) for d in docs], options.num_shards, options.shard_id)
    model = load_checked(load, options, docs)
    writer = ShardWriter(options.shard_output, model.task.cfg.source_lang, model.task.cfg.target_lang)
    try:
        translate(model, [docs[i] for i in mine], options,
                  document_done=lambda k, translation: writer.write(mine[k], translation), keep=False)
        writer.write_fallbacks(getattr(model, "segment_report", None))
    finally:
        writer.close()


def translate_in_processes(options, command: Callable[[str, str], Sequence[str]], processes: int,
                           devices: Optional[Sequence[str]] = None):
    """The documents translated by ``processes`` shard processes, written in input order
    once all are done. ``command(input_path, input_format)``: the command line of a shard
    process (without the shard options :func:`translate_sharded` adds); standard input is
    kept in a temporary file the processes read. Returns (the documents, their
    translations, the seconds the processes took, a segment model's ``(segments decoded
    again sentence by sentence, segments decoded, {reason: misaligned segments})`` over all
    processes, else ``None``)."""
    work = tempfile.mkdtemp(prefix="docctx-translate-")
    try:
        docs, fmt, set_attributes = read_input(options, keep_dir=work)
        output = open_output(options, fmt)
        try:
            start = time.time()
            path = options.input or os.path.join(work, "stdin.txt")
            try:
                langs, translations = translate_sharded(
                    command(path, fmt), [len(d) for d in docs], processes, devices,
                    work_dir=os.path.join(work, "shards"))
            except ShardError as e:  # a shard's one-line refusal names standard input as such
                if options.input is not None or e.exit_code != 2:
                    raise
                raise ShardError(str(e).replace(path, STDIN), e.shard, e.exit_code) from None
            elapsed = time.time() - start
            writer = DocumentWriter(fmt, output.out, output.ids, src_lang=langs.get("source_lang"),
                                    tgt_lang=langs.get("target_lang"), sysid=options.system_name,
                                    set_attributes=set_attributes)
            for doc, translation in zip(docs, translations):
                writer.write(doc, translation)
            writer.close()
            output.commit()
        finally:
            output.discard()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return docs, translations, elapsed, langs.get("segment_fallbacks")
