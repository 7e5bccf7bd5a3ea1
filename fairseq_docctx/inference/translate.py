"""``docctx-translate``'s work: raw documents read, translated in document order, written.

The input is streamed: documents are read as they are needed, ``--batch-size`` x
:data:`STREAM_BATCHES` at a time (a *chunk*: the documents decoded side by side), translated,
written in input order as they complete, and forgotten, so that memory holds one chunk's
documents whatever the input's length; a document's translation does not depend on the
documents decoded beside it, so chunks change nothing in the output.

:func:`translate_file` runs one process: the input opened (:func:`open_input`: a
:class:`~fairseq_docctx.data.readers.DocumentStream`, its format read from its first lines),
the output opened (:class:`Output`: temporary files moved into place at the end), the model
loaded, and chunk by chunk: every sentence encoded and its length checked
(:func:`check_lengths`), the documents translated and written in input order as they
complete (:func:`translate_and_write`). Bad input is found when its chunk is read: with
``-o`` nothing is then written; on standard output the documents before its chunk are.

With several processes (:func:`translate_in_processes`) the input is read once for the
documents' sentence counts (standard input is kept in a temporary file first), every
process reads the same input and translates the documents of its shard
(:func:`shard_documents`, :func:`translate_shard`), writing them as they complete to a shard
file (JSON Lines: a first line with the model's languages, then ``{"doc": <number in the
input>, "hyp": [...]}`` per document); :func:`run_translation_shards` runs the processes
(:func:`~fairseq_docctx.inference.shards.run_shards`) and :class:`ShardTranslations` reads the
shard files back in input order as the input is read again and written.

``options`` is a namespace with the options of ``docctx-translate`` (``input``,
``input_format``, ``docids``, ``output``, ``path``, ``data``, ``spm_model``, ``draft_path``,
``beam``, ``lenpen``, ``max_len_a``, ``max_len_b``, ``batch_size``, ``max_tokens``,
``system_name``, ``quiet``, and a shard process's ``num_shards``, ``shard_id``,
``shard_output``). ``engine`` is what runs the model (an :class:`~fairseq_docctx.engines.base.Engine`
of ``--engine``): ``engine.load(options)`` returns the model (the hub's ``DocumentHubInterface``,
or an object with its ``translate_documents``, ``encode``, ``max_positions`` and ``task.cfg``),
``engine.model_files(options)`` names the files loading it reads.
"""
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..data import formats
from ..data.doc_index import balanced_shards, check_shard
from ..data.packed_tokens import PackedTokens
from ..data.outputs import DATA_DIRECTORY_FILES, Outputs, folder_files
from ..data.paths import same_path
from ..data.documents import DocumentFormatError
from ..data.readers import DocumentStream, docids_path, release
from ..data.writers import DocumentWriter
from .shards import ShardError, run_shards, shard_environment

#: a chunk of the input (the documents read, translated side by side and written before the
#: next ones are read) holds ``--batch-size`` times this many documents: enough that the
#: batches of a chunk stay full while its documents end at different lengths
STREAM_BATCHES = 16


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


class ShardTranslations:
    """The translations of the documents in input order, read from the shard files
    (:class:`ShardWriter`) as they are asked for: document ``d``'s from the file of the shard
    that has it (``lengths``: every document's sentence count, which also gives the shards),
    reading that file up to it and keeping the documents read before it until they are asked
    for (a shard writes its documents in the order they complete). Checked: every document
    once, one translation per sentence, nothing left over (:class:`ShardError`).
    :attr:`languages` are the shards' (the first lines), :attr:`segment_fallbacks` a segment
    model's ``(fallbacks, decoded, {reason: misaligned})`` summed over the shards, once every
    file is read (``None`` for other models)."""

    def __init__(self, files: Sequence[str], lengths: Sequence[int]):
        self.lengths = list(lengths)
        owners = balanced_shards(self.lengths, len(files))
        self.owner = [0] * len(self.lengths)
        for s, docs in enumerate(owners):
            for d in docs.tolist():
                self.owner[d] = s
        self.files = [open(f, encoding="utf-8") for f in files]
        self.names = list(files)
        self.pending: List[Dict[int, List[str]]] = [{} for _ in files]
        self.seen: set = set()
        self.languages: dict = {}
        self.segment_fallbacks: Optional[tuple] = None
        for path, f in zip(files, self.files):
            header = self._next(f)
            if header is None:
                raise ShardError(f"{path}: empty shard output")
            self.languages = self.languages or header

    @staticmethod
    def _next(f) -> Optional[dict]:
        for line in f:
            if line.strip():
                return json.loads(line)
        return None

    def _read(self, s: int) -> bool:
        """Read the next document of shard ``s`` into its pending ones (a segment model's
        counts are added up); False at the end of its file."""
        while True:
            o = self._next(self.files[s])
            if o is None:
                return False
            if "segment_fallbacks" in o:
                f, n, why = *o["segment_fallbacks"], o.get("segment_misaligned", {})
                old = self.segment_fallbacks or (0, 0, {})
                self.segment_fallbacks = (old[0] + f, old[1] + n,
                                          {k: old[2].get(k, 0) + why.get(k, 0) for k in {*old[2], *why}})
                continue
            if "doc" in o:
                d = int(o["doc"])
                if d in self.seen or d in self.pending[s]:
                    raise ShardError(f"document {d} was translated twice by the shards")
                self.pending[s][d] = o["hyp"]
                return True

    def __iter__(self) -> Iterator[List[str]]:
        for d, n_sents in enumerate(self.lengths):
            s = self.owner[d]
            while d not in self.pending[s] and self._read(s):
                pass
            hyp = self.pending[s].pop(d, None)
            if hyp is None or len(hyp) != n_sents:
                raise ShardError(f"document {d}: {len(hyp or [])} translations from the shards, "
                                 f"{n_sents} sentences in the input")
            self.seen.add(d)
            yield hyp
        for s in range(len(self.files)):  # the rest: a segment model's counts, nothing else
            while self._read(s):
                pass
            if self.pending[s]:
                raise ShardError(f"document {min(self.pending[s])} translated by shard {s}: the input has "
                                 f"{len(self.lengths)} documents")

    def close(self):
        for f in self.files:
            f.close()


def run_translation_shards(command: Sequence[str], lengths: Sequence[int], processes: int,
                           devices: Optional[Sequence[str]], work_dir: str) -> List[str]:
    """Run ``command + [--num-shards N --shard-id I --shard-output FILE]`` for each shard I
    (N = ``processes``, at most one per document), on ``devices`` in turn or on the CPU;
    returns the shard files (read them with :class:`ShardTranslations`)."""
    n = max(1, min(processes, len(lengths)))
    os.makedirs(work_dir, exist_ok=True)
    files = [os.path.join(work_dir, f"shard-{i}.jsonl") for i in range(n)]
    commands = [list(command) + ["--num-shards", str(n), "--shard-id", str(i), "--shard-output", files[i]]
                for i in range(n)]
    run_shards(commands, [shard_environment(i, n, devices) for i in range(n)], work_dir,
               name="docctx-translate shard")
    return files


def check_lengths(hub, docs, max_tokens: Optional[int] = None) -> list:
    """The documents' sentences encoded (``hub.encode``), refusing, before any decoding, a
    sentence longer than the model takes (its encoder's positions, end-of-sentence token
    included) or than ``max_tokens`` (``--max-tokens``), and one that its SentencePiece model
    normalises to nothing (no token before the end-of-sentence one):
    :class:`~fairseq_docctx.data.documents.DocumentFormatError` naming its file and line.
    ``docs``: the documents read (:class:`~fairseq_docctx.data.documents.Document`), ``hub``: a
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
            if n <= 1:
                raise DocumentFormatError(
                    d.path, line, "an empty sentence: the model's SentencePiece model normalises "
                    f"{s!r} to nothing")
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


def open_input(options, path: Optional[str] = None) -> DocumentStream:
    """The input documents, read as they are needed
    (:class:`~fairseq_docctx.data.readers.DocumentStream`): the file ``options.input``, or
    standard input as it comes (read as bytes, so that invalid UTF-8 is reported as
    ``<stdin>:LINE``), or ``path``, a copy of standard input, named ``<stdin>`` too."""
    named = formats.find(options.input_format)
    if options.input is None and named is not None and named.id_file and not options.docids:
        raise ValueError(f"{STDIN}: --input-format {named.name} reads the document ids from a file: "
                         "give it with --docids FILE")
    if options.input is not None:
        docids = options.docids or docids_path(options.input, None)
        return DocumentStream(options.input, options.input_format, docids)
    return DocumentStream(sys.stdin.buffer if path is None else path, options.input_format, options.docids,
                          name="stdin", path=STDIN)


def document_lengths(options, path: Optional[str] = None) -> Tuple[List[int], str]:
    """Every input document's sentence count, and the input's format: the input read through
    once (:func:`open_input`), its documents checked and forgotten."""
    stream = open_input(options, path)
    try:
        lengths = []
        for d in stream:
            lengths.append(len(d))
            release(d)
        return lengths, stream.format
    finally:
        stream.close()


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter), each read when it is asked for."""
    chunk = []
    for x in items:
        chunk.append(x)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_separator(docs, separator: Optional[str]) -> None:
    """Refuse input holding the context separator, as docctx-prepare does."""
    for d in docs:
        for s, ln in zip(d.sentences, d.lines):
            if separator and separator in s:
                raise DocumentFormatError(
                    d.path, ln, f"the context separator {separator!r} of the model's data occurs in "
                    "the text; the model would read it as a sentence boundary")


def files_read(options, fmt: str, engine) -> List[Tuple[str, str]]:
    """The files a run reads, as (what it is, path): the input, the document ids of a docids
    input, the checkpoint, the draft checkpoint, the SentencePiece model, the other files the
    engine reads (``engine.model_files``: an exported model's folder's), and the data files
    (dictionaries, ``docctx.json``, SentencePiece models, binarized splits and document
    indices: :data:`~fairseq_docctx.data.outputs.DATA_DIRECTORY_FILES`) of ``--data`` and of
    the data directories the engine loads the model with (the checkpoint's directory, the
    data it was trained on...)."""
    model = engine.model_files(options)
    files = [("the input", options.input), ("the checkpoint", model.checkpoint),
             ("the draft checkpoint", options.draft_path), ("the SentencePiece model", options.spm_model)]
    if formats.get(fmt).id_file:
        files.append(("the input's document ids",
                      options.docids or (docids_path(options.input, None) if options.input else None)))
    folders = {options.data, *model.data_folders}
    files += model.files
    for d in folders:
        if d:
            files += folder_files("the model's data file", d, DATA_DIRECTORY_FILES)
    return [(what, f) for what, f in files if f]


class Output:
    """``-o FILE`` (and, for the docids format, its ``.docids`` file: FILE with its extension
    replaced by ``.docids``, the name ``docctx-score`` looks for), declared to the one output
    guard (:class:`~fairseq_docctx.data.outputs.Outputs`) with the files the run reads
    (``inputs``: (what it is, path) pairs) before any work: an output that is an input, or an
    existing file ``docctx-translate`` did not write as this output, is refused unless
    ``force`` (the ids file may be the input's document ids, the same ids: it is left as it
    is). The temporary files beside the destinations are created at once (so a folder that
    cannot be written fails first) and moved into place by :meth:`commit`; standard output
    without ``-o``."""

    def __init__(self, path, with_docids, inputs=(), input_docids=None, force=False):
        self.files, self.guard = [], None
        if path is None:
            self.out, self.ids = sys.stdout, None
            return
        self.guard = Outputs("docctx-translate", inputs, force=force)
        targets = [(path, f"-o {path}", None)]
        if with_docids:
            ids = docids_path(path, None)
            if not (input_docids and same_path(ids, input_docids)):
                targets.append((ids, f"-o {path}: its document-id file {ids}", path))
        for t, label, owner in targets:
            self.guard.file(t, label, output=owner)
        try:
            for t, label, owner in targets:
                tmp, target = self.guard.start(t)
                self.files.append((tmp, target, open(tmp, "w", encoding="utf-8")))
        except BaseException:
            self.discard()
            raise
        self.out = self.files[0][2]
        self.ids = self.files[1][2] if len(self.files) > 1 else None

    def commit(self):
        if self.guard is None:  # standard output
            return
        for _, _, f in self.files:
            f.close()
        self.guard.finish([(tmp, target) for tmp, target, _ in self.files])
        self.files = []
        self.guard.close()

    def discard(self):
        for tmp, target, f in self.files:
            f.close()
            if tmp != target:
                self.guard.discard(tmp)
        if self.files:
            self.guard.close(failed=True)
        self.files = []


def open_output(options, fmt: str, engine) -> Output:
    """The output of the options (:class:`Output`), refused if it is a file the run reads or a
    file ``docctx-translate`` did not write (without ``--force``)."""
    input_docids, id_file = None, formats.get(fmt).id_file
    if id_file:
        input_docids = options.docids or (docids_path(options.input, None) if options.input else None)
    return Output(options.output, id_file, files_read(options, fmt, engine), input_docids,
                  force=getattr(options, "force", False))


@dataclass
class Counts:
    """What a run translated: documents, sentences, and empty translations."""

    documents: int = 0
    sentences: int = 0
    empty: int = 0


class Progress:
    """A tqdm bar of sentences on standard error (none with ``quiet``), made when the first
    chunk is read: its total is the sentences read so far (the whole input's once it is
    read), its postfix the documents done of those read."""

    def __init__(self, quiet: bool):
        self.quiet, self.bar, self.read_docs, self.done_docs = quiet, None, 0, 0

    def read(self, docs) -> None:
        from tqdm import tqdm

        n = sum(len(d) for d in docs)
        self.read_docs += len(docs)
        if self.bar is None:
            self.bar = tqdm(total=n, unit="sent", file=sys.stderr, disable=self.quiet, desc="translating",
                            dynamic_ncols=True)
        else:
            self.bar.total += n
            self.bar.refresh()

    def update(self, n_sents: int, docs_done: int) -> None:
        """``n_sents`` more sentences done; ``docs_done``: the documents done of the chunk."""
        self.bar.update(n_sents)
        self.bar.set_postfix_str(f"documents {self.done_docs + docs_done}/{self.read_docs}")

    def chunk_done(self, docs: int) -> None:
        self.done_docs += docs

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def translate(model, docs, options, progress=None, document_done=None, keep=True):
    """Translate ``docs``; every sentence is encoded and its length checked first (one
    error naming its file and line before any of them is decoded), and encoded once."""
    return model.translate_documents(
        [d.sentences for d in docs], beam=options.beam, batch_size=options.batch_size,
        max_tokens=options.max_tokens, progress=progress, document_done=document_done,
        keep=keep, lenpen=options.lenpen, max_len_a=options.max_len_a, max_len_b=options.max_len_b,
        tokens=check_lengths(model, docs, options.max_tokens),
    )


def translate_and_write(model, docs, options, writer, out, progress: Progress, counts: Counts) -> None:
    """Translate one chunk's documents and write each one, in input order, as soon as it and
    those before it are done; a written document is forgotten (its translation and what the
    reader kept of it, :func:`~fairseq_docctx.data.readers.release`), so memory holds the
    translations of the documents still open rather than the whole output. ``counts``
    gets the documents, sentences and empty translations written."""
    check_separator(docs, getattr(model.task.cfg, "context_separator", None))
    progress.read(docs)
    pending, next_doc = {}, 0

    def document_done(i, translation):
        nonlocal next_doc
        pending[i] = translation
        while next_doc in pending:
            translation = pending.pop(next_doc)
            counts.empty += sum(1 for s in translation if not s.strip())
            writer.write(docs[next_doc], translation)
            counts.documents += 1
            counts.sentences += len(translation)
            release(docs[next_doc])
            next_doc += 1
        out.flush()

    translate(model, docs, options, progress=progress.update, document_done=document_done, keep=False)
    progress.chunk_done(len(docs))


def translate_file(options, engine):
    """One process: the input opened (its format read from its first lines), the output
    opened (refused before the model is loaded when it cannot be written), the model loaded
    (``engine.load(options)``), and the input read, translated and written chunk by chunk
    (:data:`STREAM_BATCHES`), in input order. Returns (the :class:`Counts`, the seconds
    translating took, and a segment model's ``(segments decoded again sentence by sentence,
    segments decoded, {reason: misaligned segments})``, the hub's ``segment_report``, else
    ``None``)."""
    stream = open_input(options)
    try:
        output = open_output(options, stream.format, engine)
        try:
            model = engine.load(options)
            cfg = model.task.cfg
            counts, progress, writer = Counts(), Progress(options.quiet), None
            start = time.time()
            for chunk in chunks(stream, STREAM_BATCHES * options.batch_size):
                if writer is None:  # after the first documents: an XML set element's attributes
                    writer = DocumentWriter(stream.format, output.out, output.ids, src_lang=cfg.source_lang,
                                            tgt_lang=cfg.target_lang, sysid=options.system_name,
                                            set_attributes=stream.set_attributes)
                translate_and_write(model, chunk, options, writer, output.out, progress, counts)
            progress.close()
            elapsed = time.time() - start
            writer.close()
            output.commit()
        finally:
            output.discard()
    finally:
        stream.close()
    return counts, elapsed, getattr(model, "segment_report", None)


def translate_shard(options, engine) -> None:
    """One shard process: the documents of shard ``options.shard_id`` of
    ``options.num_shards``, written as they complete to ``options.shard_output``; the input
    read twice, for the documents' sentence counts (which give the shards), then for the
    shard's documents, chunk by chunk."""
    lengths, _ = document_lengths(options)
    mine = set(shard_documents(lengths, options.num_shards, options.shard_id))
    model = engine.load(options)
    sep = getattr(model.task.cfg, "context_separator", None)
    writer = ShardWriter(options.shard_output, model.task.cfg.source_lang, model.task.cfg.target_lang)
    stream = open_input(options)
    try:
        def numbered():  # the shard's documents with their numbers; the others forgotten
            for k, d in enumerate(stream):
                if k in mine:
                    yield k, d
                else:
                    release(d)

        for chunk in chunks(numbered(), STREAM_BATCHES * options.batch_size):
            docs = [d for _, d in chunk]
            check_separator(docs, sep)
            translate(model, docs, options, keep=False,
                      document_done=lambda j, translation: writer.write(chunk[j][0], translation))
            for d in docs:
                release(d)
        writer.write_fallbacks(getattr(model, "segment_report", None))
    finally:
        stream.close()
        writer.close()


def translate_in_processes(options, engine, command: Callable[[str, str], Sequence[str]], processes: int,
                           devices: Optional[Sequence[str]] = None):
    """The documents translated by ``processes`` shard processes, written in input order
    once all are done. ``command(input_path, input_format)``: the command line of a shard
    process (without the shard options :func:`run_translation_shards` adds); standard input
    is kept in a temporary file the processes read. The input is read three times, none of it
    held: for the documents' sentence counts (which give the shards), by the processes, and
    as the translations are written. Returns (the :class:`Counts`, the seconds the processes
    took, a segment model's ``(segments decoded again sentence by sentence, segments decoded,
    {reason: misaligned segments})`` over all processes, else ``None``)."""
    work = tempfile.mkdtemp(prefix="docctx-translate-")
    try:
        path = options.input
        if path is None:
            path = os.path.join(work, "stdin.txt")
            with open(path, "wb") as f:
                shutil.copyfileobj(sys.stdin.buffer, f)
        lengths, fmt = document_lengths(options, path)
        output = open_output(options, fmt, engine)
        try:
            start = time.time()
            try:
                files = run_translation_shards(command(path, fmt), lengths, processes, devices,
                                               os.path.join(work, "shards"))
            except ShardError as e:  # a shard's one-line refusal names standard input as such
                if options.input is not None or e.exit_code != 2:
                    raise
                raise ShardError(str(e).replace(path, STDIN), e.shard, e.exit_code) from None
            elapsed = time.time() - start
            results = ShardTranslations(files, lengths)
            stream = open_input(options, path)
            try:
                counts, writer, translations = Counts(), None, iter(results)
                for doc, translation in zip(stream, translations):
                    if writer is None:
                        langs = results.languages
                        writer = DocumentWriter(fmt, output.out, output.ids, src_lang=langs.get("source_lang"),
                                                tgt_lang=langs.get("target_lang"), sysid=options.system_name,
                                                set_attributes=stream.set_attributes)
                    writer.write(doc, translation)
                    release(doc)
                    counts.documents += 1
                    counts.sentences += len(translation)
                    counts.empty += sum(1 for s in translation if not s.strip())
                if counts.documents != len(lengths):
                    raise ShardError(f"the input changed while it was translated: {counts.documents} documents, "
                                     f"{len(lengths)} before")
                for _ in translations:  # the shards' files read to their end (and checked)
                    pass
            finally:
                stream.close()
                results.close()
            writer.close()
            output.commit()
        finally:
            output.discard()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return counts, elapsed, results.segment_fallbacks
