"""``docctx-drafts``: the drafts of every split of a data directory
(:mod:`fairseq_docctx.data.drafts` describes the stream), translated by a sentence-level
checkpoint (:func:`fairseq_docctx.inference.drafter.load_draft_translator`) in fairseq's length-sorted
batches, not in document order. The work is restartable: it is written in chunks of
consecutive batches, each moved into place when complete (a hidden work directory in the data
directory), and the final files are assembled in corpus order only at the end. One run at a
time works in a data directory: a run holds an exclusive lock on the directory
(``flock``), and a second run is refused with one line.
"""
import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from ..data import manifest as mf
from ..data.outputs import Outputs
from ..data.drafts import (DEFAULT_BEAM, DEFAULT_CHUNK_SENTENCES, DEFAULT_MAX_TOKENS, DEFAULT_SPLITS,
                           WORK_DIR, DraftsError, draft_prefix, drafts_exist)
from .drafter import load_draft_translator
from .options import check_at_least

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ making (a data directory)
@dataclass
class DraftsResult:
    """What :func:`make_drafts` did for one split."""

    split: str
    prefix: str  # the drafts' files without .bin/.idx
    sentences: int
    translated: int  # sentences translated by this run (0: all found done)
    reused: int  # sentences of chunks an earlier run had finished
    seconds: float
    skipped: bool  # the split's drafts were there already


@contextlib.contextmanager
def _locked(data_dir: str):
    """Hold an exclusive lock on the data directory (released when the process ends,
    however it ends); another run holding it is a :class:`DraftsError`. On a file system
    without locks the run goes on unlocked, with a warning."""
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DraftsError(f"{data_dir}: another docctx-drafts run is making drafts there: "
                                  "wait for it to end (or stop it), then run again") from None
            logger.warning(f"{data_dir}: cannot lock the directory ({e.strerror}): two "
                           "docctx-drafts runs there at once would spoil each other's work")
        yield
    finally:
        os.close(fd)


def _source_prefix(data_dir: str, split: str, src: str, tgt: str) -> Optional[str]:
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data_dir, f"{split}.{a}-{b}.{src}")
        if os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin"):
            return prefix
    return None


def _settings_equal(a: dict, b: dict) -> bool:
    """Same settings of a split's work (the checkpoint by its content, not its path)."""
    def norm(x):
        return {k: v for k, v in json.loads(json.dumps(x)).items() if k != "checkpoint"}

    return norm(a) == norm(b)


class _SplitWork:
    """The hidden work directory of one split: ``settings.json`` and ``chunk-NNNNN.npz``
    files (sentence ids, lengths, tokens), each written to a temporary name and moved into
    place when complete."""

    def __init__(self, data_dir: str, split: str, src: str, tgt: str):
        self.dir = os.path.join(data_dir, WORK_DIR, f"{split}.{src}-{tgt}")

    def settings(self) -> Optional[dict]:
        try:
            with open(os.path.join(self.dir, "settings.json"), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def start(self, settings: dict) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        _write_atomic(os.path.join(self.dir, "settings.json"),
                      (json.dumps(settings, indent=2) + "\n").encode("utf-8"))

    def chunk_path(self, k: int) -> str:
        return os.path.join(self.dir, f"chunk-{k:05d}.npz")

    def read_chunk(self, k: int, ids: np.ndarray) -> Optional[List[np.ndarray]]:
        """The drafts of chunk ``k`` if it is complete and holds the sentences ``ids``."""
        try:
            with np.load(self.chunk_path(k), allow_pickle=False) as z:
                got, lengths, tokens = z["ids"], z["lengths"], z["tokens"]
        except (OSError, ValueError, KeyError):
            return None
        if not np.array_equal(got, ids) or int(lengths.sum()) != len(tokens):
            return None
        return np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []

    def write_chunk(self, k: int, ids: np.ndarray, drafts: List[torch.Tensor]) -> None:
        lengths = np.array([len(d) for d in drafts], dtype=np.int64)
        tokens = (torch.cat(drafts).numpy() if drafts else np.zeros(0)).astype(np.int32)
        tmp = self.chunk_path(k) + ".tmp"
        with open(tmp, "wb") as f:
            np.savez(f, ids=np.asarray(ids, dtype=np.int64), lengths=lengths, tokens=tokens)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.chunk_path(k))

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        parent = os.path.dirname(self.dir)
        try:
            os.rmdir(parent)  # only when empty
        except OSError:
            pass


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _chunks(batches: List[np.ndarray], chunk_sentences: int) -> List[List[np.ndarray]]:
    """Consecutive batches grouped into chunks of at least ``chunk_sentences`` sentences
    (the last one may hold fewer)."""
    chunks, cur, n = [], [], 0
    for b in batches:
        cur.append(b)
        n += len(b)
        if n >= chunk_sentences:
            chunks.append(cur)
            cur, n = [], 0
    if cur:
        chunks.append(cur)
    return chunks


def _assemble(work: _SplitWork, prefix: str, drafts: List[np.ndarray], vocab_size: int) -> None:
    """Write the drafts (in corpus order) as ``prefix.{bin,idx}``: built in the work
    directory, checked, then moved into place, the ``.idx`` last (a draft file that looks
    complete is complete)."""
    from fairseq.data import indexed_dataset

    tmp = os.path.join(work.dir, "final")
    builder = indexed_dataset.make_builder(tmp + ".bin", impl="mmap", vocab_size=vocab_size)
    for d in drafts:
        builder.add_item(torch.from_numpy(np.asarray(d, dtype=np.int64)))
    builder.finalize(tmp + ".idx")
    check = indexed_dataset.MMapIndexedDataset(tmp)
    if len(check) != len(drafts):
        raise RuntimeError(f"internal error: {tmp}.idx holds {len(check)} drafts, not {len(drafts)}")
    del check
    if os.path.exists(prefix + ".idx"):
        os.remove(prefix + ".idx")
    os.replace(tmp + ".bin", prefix + ".bin")
    os.replace(tmp + ".idx", prefix + ".idx")


def make_drafts(data_dir: str, checkpoint: str, splits: Optional[Sequence[str]] = None,
                beam: int = DEFAULT_BEAM, max_tokens: Optional[int] = None,
                batch_size: Optional[int] = None, cpu: Optional[bool] = None, fp16: bool = False,
                chunk_sentences: int = DEFAULT_CHUNK_SENTENCES, overwrite: bool = False,
                progress: Optional[Callable[[str, int, int], None]] = None,
                log: Callable[[str], None] = logger.info, load: Optional[Callable] = None,
                **generation) -> List[DraftsResult]:
    """Translate every source sentence of ``splits`` of a prepared data directory with a
    sentence-level src->tgt checkpoint, and store the drafts as
    ``{split}.{src}-{tgt}.draft.{bin,idx}`` (:func:`draft_prefix`), recorded in
    ``docctx.json`` (Zhang et al. 2021, §3.1, §4.3: the drafts of the Multi-Hop Transformer).

    Batches are fairseq's length-sorted ones (``max_tokens``/``batch_size``; default
    ``max_tokens`` 8000), decoded with beam search (``beam``; ``generation``: more options
    of fairseq's ``GenerationConfig``). Every ``chunk_sentences`` sentences (at batch
    boundaries) the drafts so far are written to a chunk file in ``DATA/.docctx-drafts``;
    a re-run with the same settings skips finished chunks, and splits already made with the
    same checkpoint and beam (unless ``overwrite``); different settings start a split over.
    ``splits``: default the splits ``docctx.json`` lists, else train, valid and test.
    ``progress(split, sentences_done, sentences_total)`` after every batch; ``log`` gets one
    line per note (resumed chunks, skipped splits, restarts). ``load(checkpoint, data_dir,
    beam=, cpu=, fp16=, **generation)``: what loads the translator (default
    :func:`~fairseq_docctx.inference.drafter.load_draft_translator`;
    :func:`~fairseq_docctx.inference.ctranslate2.load.load_exported_draft_translator` for a folder
    written by ``docctx-export ctranslate2``, decoded by CTranslate2 in the same batches; any
    loader of an object with :class:`~fairseq_docctx.inference.drafter.DraftTranslator`'s
    interface).

    The run holds an exclusive lock on ``data_dir`` while it works; ``docctx.json`` records
    the batch settings used (``max_tokens`` 8000 when neither is given).

    Errors (one line naming the file): :class:`DraftsError` (missing data directory or
    split, sentence too long, a beam or batch size below 1, another run working in the
    directory), :class:`~fairseq_docctx.inference.checkpoint.CheckpointError` (unusable checkpoint, other
    dictionaries or language pair, a document-level model).
    """
    data_dir = os.fspath(data_dir)
    if not os.path.isdir(data_dir):
        raise DraftsError(f"{data_dir}: no such data directory")
    if max_tokens is not None and batch_size is not None:
        raise DraftsError("give --max-tokens or --batch-size, not both")
    try:
        check_at_least({"--beam": beam, "--max-tokens": max_tokens, "--batch-size": batch_size,
                        "--chunk-sentences": chunk_sentences})
    except ValueError as e:
        raise DraftsError(str(e)) from None
    if max_tokens is None and batch_size is None:
        max_tokens = DEFAULT_MAX_TOKENS  # what the batches use, recorded as such
    with _locked(data_dir):
        return _make_drafts(data_dir, checkpoint, splits, beam, max_tokens, batch_size, cpu, fp16,
                            chunk_sentences, overwrite, progress, log, load or load_draft_translator,
                            generation)


def _make_drafts(data_dir, checkpoint, splits, beam, max_tokens, batch_size, cpu, fp16, chunk_sentences,
                 overwrite, progress, log, load, generation) -> List[DraftsResult]:
    """:func:`make_drafts` once its arguments are checked and the directory is locked."""
    from fairseq.data import data_utils

    if splits is None:
        splits = mf.split_names(data_dir) or DEFAULT_SPLITS
    splits = list(dict.fromkeys(splits))
    translator = load(checkpoint, data_dir, beam=beam, cpu=cpu, fp16=fp16, **generation)
    src, tgt = translator.task.cfg.source_lang, translator.task.cfg.target_lang
    sources = {}
    for split in splits:  # every split checked before any work
        prefix = _source_prefix(data_dir, split, src, tgt)
        if prefix is None:
            raise DraftsError(f"{data_dir}: split '{split}' has no binarized {src} sentences "
                              f"({os.path.join(data_dir, f'{split}.{src}-{tgt}.{src}')}.bin/.idx)")
        sources[split] = prefix
    guard = Outputs("docctx-drafts", force=overwrite, force_flag="--overwrite")
    for split in splits:  # drafts files docctx-drafts did not make are never replaced
        known = mf.drafts_record(data_dir, split) is not None
        for ext in (".bin", ".idx"):
            guard.file(draft_prefix(data_dir, split, src, tgt) + ext, known=known)
    settings_base = {
        "checkpoint": translator.checkpoint, "checkpoint_sha1": translator.checkpoint_sha1,
        "beam": int(beam), "max_tokens": max_tokens, "batch_size": batch_size, "fp16": bool(fp16),
        "chunk_sentences": int(chunk_sentences), "generation": dict(sorted(generation.items())),
    }
    results = []
    for split in splits:
        start = time.time()
        src_data = data_utils.load_indexed_dataset(sources[split], translator.source_dictionary)
        n = len(src_data)
        prefix = draft_prefix(data_dir, split, src, tgt)
        record = mf.drafts_record(data_dir, split)
        if (not overwrite and record is not None and drafts_exist(data_dir, split, src, tgt)
                and record.sentences == n and record.checkpoint_sha1 == translator.checkpoint_sha1
                and record.beam == int(beam)):
            log(f"{split}: drafts already made ({n} sentences, {record.checkpoint}, beam "
                f"{record.beam}): skipped")
            results.append(DraftsResult(split, prefix, n, 0, 0, 0.0, True))
            continue
        if record is not None:
            _forget_drafts(data_dir, split, src, tgt, record, n, translator, beam, max_tokens, batch_size,
                           fp16, log)
        dataset = translator.dataset(src_data, src_data.sizes)
        batches = translator.plan(dataset, max_tokens, batch_size, where=sources[split] + ".bin")
        chunks = _chunks(batches, chunk_sentences)
        work = _split_work(data_dir, split, src, tgt, {**settings_base, "split": split, "sentences": n}, log)
        drafts, reused, todo = _reused_chunks(work, chunks, split, n, log)
        _translate_chunks(translator, dataset, work, todo, drafts, split, reused, n, progress)
        missing = [i for i, d in enumerate(drafts) if d is None]
        if missing:
            raise RuntimeError(f"internal error: sentence {missing[0]} of {sources[split]} has no draft")
        _assemble(work, prefix, drafts, len(translator.target_dictionary))
        guard.written_files([prefix + ".bin", prefix + ".idx"])
        seconds = time.time() - start
        mf.record_drafts(data_dir, split, mf.DraftsRecord(
            files=[os.path.basename(prefix) + ".bin", os.path.basename(prefix) + ".idx"],
            sentences=n, checkpoint=translator.checkpoint,
            checkpoint_sha1=translator.checkpoint_sha1, beam=int(beam), max_tokens=max_tokens,
            batch_size=batch_size, fp16=bool(fp16),
        ))
        work.remove()
        results.append(DraftsResult(split, prefix, n, n - reused, reused, seconds, False))
    return results


def _forget_drafts(data_dir, split, src, tgt, record, n, translator, beam, max_tokens, batch_size, fp16,
                   log) -> None:
    """Say why the recorded drafts of ``split`` are made again, and drop their record from
    ``docctx.json``."""
    same = (drafts_exist(data_dir, split, src, tgt) and record.sentences == n
            and record.checkpoint_sha1 == translator.checkpoint_sha1
            and record.beam == int(beam) and record.max_tokens == max_tokens
            and record.batch_size == batch_size and bool(record.fp16) == bool(fp16))
    if same:
        log(f"{split}: overwriting the drafts made with the same settings (--overwrite)")
    elif not drafts_exist(data_dir, split, src, tgt):
        log(f"{split}: the drafts recorded in {mf.manifest_path(data_dir)} are missing: "
            "making them again")
    else:
        log(f"{split}: the drafts there were made with other settings or data: making them again")
    mf.forget_drafts(data_dir, split)


def _split_work(data_dir, split, src, tgt, settings, log) -> _SplitWork:
    """The work directory of ``split``, kept when an earlier run left it with the same
    ``settings``, else started over."""
    work = _SplitWork(data_dir, split, src, tgt)
    old = work.settings()
    if old is not None and not _settings_equal(old, settings):
        log(f"{split}: the unfinished drafts in {work.dir} were made with other settings: "
            "starting this split over")
        old = None
    if old is None:
        work.start(settings)
    return work


def _reused_chunks(work, chunks, split, n, log):
    """The drafts of the chunks an earlier run finished (``None`` for the others' sentences),
    how many sentences they hold, and the chunks still to translate as ``(k, chunk, ids)``."""
    drafts: List[Optional[np.ndarray]] = [None] * n
    reused = reused_chunks = 0
    todo = []
    for k, chunk in enumerate(chunks):
        ids = np.concatenate(chunk) if chunk else np.zeros(0, np.int64)
        found = work.read_chunk(k, ids)
        if found is None:
            todo.append((k, chunk, ids))
            continue
        for i, d in zip(ids.tolist(), found):
            drafts[i] = d
        reused += len(ids)
        reused_chunks += 1
    if reused_chunks:
        log(f"{split}: resuming: {reused_chunks} of {len(chunks)} chunks already done "
            f"({reused} of {n} sentences)")
    return drafts, reused, todo


def _translate_chunks(translator, dataset, work, todo, drafts, split, done, n, progress) -> None:
    """Translate the chunks of ``todo``, writing each chunk file when complete and its drafts
    into ``drafts`` (in place); ``progress`` after every batch."""
    if progress is not None:
        progress(split, done, n)
    for k, chunk, ids in todo:
        out = []
        for batch in chunk:
            out.extend(translator.translate_batch(dataset, batch))
            done += len(batch)
            if progress is not None:
                progress(split, done, n)
        work.write_chunk(k, ids, out)
        for i, d in zip(ids.tolist(), out):
            drafts[i] = d.numpy()
