"""Drafts: a sentence-level model's translations of every source sentence, as a context side.

The Multi-Hop Transformer (Zhang et al. 2021, "Multi-Hop Transformer for Document-Level
Machine Translation", NAACL, §3.1 and §4.3) reads, besides the source context, *drafts*: the
translations a sentence-level src->tgt Transformer makes of the current sentence and of its
context sentences. They are made once per data directory (:func:`make_drafts`, the command
``docctx-drafts``) and stored beside the binarized data as one more stream:

``{split}.{src}-{tgt}.draft.{bin,idx}``
    fairseq's mmap indexed dataset in the *target* dictionary; line ``i`` is the draft of
    source line ``i`` (token ids ending in EOS). Recorded in ``docctx.json``
    (:func:`fairseq_docctx.data.manifest.record_drafts`).

Importing this module declares the context side ``draft``
(:func:`fairseq_docctx.data.context_batch.register_side`): with ``--context-sides src,draft``
the ``document_translation`` task loads the stream (:func:`load_drafts`) and every batch's
context carries a ``draft`` table holding, once each, the drafts of the batch's current
sentences (its self map) and of their ``K`` previous sentences (its index map).

Drafts do not depend on each other, so they are translated in fairseq's length-sorted
batches, not in document order, with fairseq's beam search (the task's
``build_generator``). The work is restartable: it is written in chunks of consecutive
batches, each moved into place when complete (a hidden work directory in the data
directory), and the final files are assembled in corpus order only at the end.
"""
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from . import manifest as mf
from .context_batch import ContextSide, register_side

logger = logging.getLogger(__name__)

DRAFT_SIDE = "draft"
#: the hidden directory of a data directory holding unfinished drafts
WORK_DIR = ".docctx-drafts"
DEFAULT_BEAM = 4
DEFAULT_SPLITS = ("train", "valid", "test")
#: sentences per chunk (a chunk ends at the first batch boundary past this many)
DEFAULT_CHUNK_SENTENCES = 5000
#: batch size when neither max_tokens nor batch_size is given
DEFAULT_MAX_TOKENS = 8000


class DraftsError(ValueError):
    """Drafts that cannot be made or loaded; ``str(err)`` is one line naming the file."""


def draft_prefix(data_dir: str, split: str, src: str, tgt: str) -> str:
    """The drafts of ``split``: ``{data_dir}/{split}.{src}-{tgt}.draft`` (+ ``.bin``/``.idx``)."""
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{DRAFT_SIDE}")


def drafts_exist(data_dir: str, split: str, src: str, tgt: str) -> bool:
    prefix = draft_prefix(data_dir, split, src, tgt)
    return os.path.isfile(prefix + ".bin") and os.path.isfile(prefix + ".idx")


# ------------------------------------------------------------------ loading (the task)
def load_drafts(task, split: str, data_path: str, pair=None):
    """The ``draft`` side's ``load`` hook: the drafts of ``split`` in ``data_path`` (an
    indexed dataset of target token tensors with ``sizes``), ``None`` if the split has none.
    A number of drafts other than the split's sentences is a :class:`DraftsError` naming
    the file."""
    from fairseq.data import data_utils

    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    prefix = draft_prefix(data_path, split, src, tgt)
    if not os.path.isfile(prefix + ".idx"):
        return None
    if not os.path.isfile(prefix + ".bin"):
        raise DraftsError(f"{prefix}.bin: missing (its .idx is there): make the drafts again "
                          "with docctx-drafts")
    if mf.read_manifest(data_path) is not None and mf.drafts_record(data_path, split) is None:
        logger.warning(f"{prefix}.idx is not recorded in {mf.manifest_path(data_path)} (made "
                       "before the data was prepared again?); docctx-drafts makes it again")
    data = data_utils.load_indexed_dataset(prefix, task.target_dictionary)
    if data is None:
        raise DraftsError(f"{prefix}.idx: not a readable fairseq indexed dataset")
    if pair is not None and len(data) != len(pair):
        raise DraftsError(f"{prefix}.idx: {len(data)} drafts, but split '{split}' of {data_path} "
                          f"has {len(pair)} sentences: make the drafts again with docctx-drafts")
    return data


register_side(ContextSide(DRAFT_SIDE, "target", item_key=None, left_pad=False, load=load_drafts))


# ------------------------------------------------------------------ translating
class DraftTranslator:
    """A sentence-level checkpoint ready for batched beam search (fairseq's
    ``SequenceGenerator`` from the task's ``build_generator``).

    Built by :func:`load_draft_translator`. :meth:`translate` translates a list of source
    token tensors (e.g. raw input binarized on the fly); :meth:`plan` and
    :meth:`translate_batch` are what :func:`make_drafts` runs over a split.
    """

    def __init__(self, task, model, generator, checkpoint: str, checkpoint_sha1: str,
                 beam: int, fp16: bool, device: torch.device):
        self.task = task
        self.model = model
        self.generator = generator
        self.checkpoint = checkpoint
        self.checkpoint_sha1 = checkpoint_sha1
        self.beam = beam
        self.fp16 = fp16
        self.device = device

    @property
    def source_dictionary(self):
        return self.task.source_dictionary

    @property
    def target_dictionary(self):
        return self.task.target_dictionary

    def max_positions(self):
        from fairseq import utils

        return utils.resolve_max_positions(self.task.max_positions(), self.model.max_positions())

    def dataset(self, sentences, sizes=None):
        """A source-only ``LanguagePairDataset`` of ``sentences`` (an indexable of token
        tensors ending in EOS), padded as the model was trained."""
        from fairseq.data import LanguagePairDataset

        sizes = np.asarray(sizes if sizes is not None else [len(s) for s in sentences])
        return LanguagePairDataset(
            sentences, sizes, self.source_dictionary, tgt_dict=self.target_dictionary,
            left_pad_source=bool(getattr(self.task.cfg, "left_pad_source", True)),
            left_pad_target=bool(getattr(self.task.cfg, "left_pad_target", False)), shuffle=False,
        )

    def plan(self, dataset, max_tokens: Optional[int] = None, batch_size: Optional[int] = None,
             where: str = "the input") -> List[np.ndarray]:
        """fairseq's length-sorted batches of every sentence of ``dataset`` (a deterministic
        list of index arrays). No sentence is left out: a sentence longer than the model
        allows is an error naming it (``where``: the file), and the batches are checked to
        hold every sentence exactly once (``--required-batch-size-multiple`` is 1: fairseq's
        default of 8 drops a last batch)."""
        if max_tokens is None and batch_size is None:
            max_tokens = DEFAULT_MAX_TOKENS
        indices = dataset.ordered_indices()
        _, ignored = dataset.filter_indices_by_size(indices, self.max_positions())
        if len(ignored):
            i = int(min(ignored))
            raise DraftsError(f"{where}: line {i + 1} has {int(dataset.src_sizes[i])} tokens, more "
                              f"than the model's maximum {self.max_positions()}")
        if max_tokens is not None and len(dataset) and int(dataset.src_sizes.max()) > max_tokens:
            i = int(np.argmax(dataset.src_sizes))
            raise DraftsError(f"{where}: line {i + 1} has {int(dataset.src_sizes[i])} tokens, more "
                              f"than --max-tokens {max_tokens}")
        batches = [np.asarray(b, dtype=np.int64) for b in dataset.batch_by_size(
            indices, max_tokens=max_tokens, max_sentences=batch_size, required_batch_size_multiple=1)]
        seen = np.zeros(len(dataset), dtype=np.int64)
        for b in batches:
            np.add.at(seen, b, 1)
        if len(dataset) and not (seen == 1).all():
            bad = int(np.flatnonzero(seen != 1)[0])
            raise RuntimeError(f"internal error: the batches hold sentence {bad} of {where} "
                               f"{int(seen[bad])} times")
        return batches

    @torch.no_grad()
    def translate_batch(self, dataset, batch: np.ndarray) -> List[torch.Tensor]:
        """The best hypothesis (target token ids ending in EOS, on the CPU) of every
        sentence of ``batch`` (indices of ``dataset``), in the batch's order."""
        from fairseq import utils

        sample = dataset.collater([dataset[int(i)] for i in batch])
        if self.device.type != "cpu":
            sample = utils.move_to_cuda(sample, device=self.device)
        hypos = self.generator.generate([self.model], sample)
        order = sample["id"].tolist()
        out = {i: h[0]["tokens"].int().cpu() for i, h in zip(order, hypos)}
        if len(out) != len(batch):
            raise RuntimeError(f"internal error: {len(batch)} sentences in, {len(out)} translations out")
        return [out[int(i)] for i in batch]

    def translate(self, sentences: Sequence[torch.Tensor], max_tokens: Optional[int] = None,
                  batch_size: Optional[int] = None,
                  progress: Optional[Callable[[int, int], None]] = None) -> List[torch.Tensor]:
        """Drafts of ``sentences`` (source token tensors ending in EOS), in their order;
        ``progress(done, total)`` after every batch."""
        dataset = self.dataset(sentences)
        out: List[Optional[torch.Tensor]] = [None] * len(sentences)
        done = 0
        for batch in self.plan(dataset, max_tokens, batch_size):
            for i, t in zip(batch.tolist(), self.translate_batch(dataset, batch)):
                out[i] = t
            done += len(batch)
            if progress is not None:
                progress(done, len(sentences))
        return out


class DraftSentences:
    """Drafts held in memory as a context side's sentences (an indexable of token tensors
    with a ``sizes`` array), e.g. those :meth:`DraftTranslator.translate` made on the fly
    for raw input: ``DocumentPairDataset(..., side_data={"draft": DraftSentences(drafts)})``."""

    def __init__(self, drafts: Sequence[torch.Tensor]):
        self.drafts = [torch.as_tensor(d).long() for d in drafts]
        self.sizes = np.array([len(d) for d in self.drafts], dtype=np.int64)

    def __len__(self):
        return len(self.drafts)

    def __getitem__(self, i):
        return self.drafts[i]


def checkpoint_sha1(path: str) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def load_draft_translator(checkpoint: str, data_dir: str, beam: int = DEFAULT_BEAM,
                          cpu: Optional[bool] = None, fp16: bool = False,
                          **generation) -> DraftTranslator:
    """Load a sentence-level src->tgt checkpoint with the dictionaries of ``data_dir``.

    Refuses (:class:`~fairseq_docctx.hub.CheckpointError`, one line) an unusable file, a
    checkpoint whose dictionaries differ from the data directory's
    (:func:`fairseq_docctx.hub.check_dictionaries`) or that translates another language
    pair than the directory's, and a model that reads document context (drafts come from a
    sentence-level model). ``cpu``: ``None`` = a GPU if there is one. ``generation``:
    options of fairseq's ``GenerationConfig`` (``lenpen``, ``max_len_b``...), fairseq's
    defaults otherwise (those of ``fairseq-generate``).
    """
    from fairseq import checkpoint_utils, tasks
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf, open_dict

    from .. import hub
    from ..models import document_context as dc

    checkpoint = os.fspath(checkpoint)
    state = hub.load_checkpoint_state(checkpoint)
    trained_on = hub._trained_on(state)
    overrides = {"data": os.fspath(data_dir)}
    hub._apply_overrides(state, overrides)
    cfg = state["cfg"]
    try:
        task = tasks.setup_task(cfg.task, from_checkpoint=True)
    except FileNotFoundError as e:
        raise hub.CheckpointError(
            f"{checkpoint}: the data directory {data_dir} does not hold the dictionaries of this "
            f"model ({e.filename or hub._first_line(e)} is missing)") from None
    hub.check_dictionaries(checkpoint, state, task, data_dir, trained_on)
    pair = mf.language_pair(data_dir)
    langs = (task.cfg.source_lang, task.cfg.target_lang)
    if pair is not None and tuple(pair) != langs:
        raise hub.CheckpointError(f"{checkpoint} translates {langs[0]}->{langs[1]}, the data "
                                  f"directory {data_dir} is {pair[0]}->{pair[1]}: drafts come "
                                  f"from a {pair[0]}->{pair[1]} sentence-level model")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides=overrides, task=task, state=state)
    model = models[0]
    if dc.context_spec(model).reads_context:
        raise hub.CheckpointError(f"{checkpoint}: {model.__class__.__name__} reads document "
                                  "context; drafts come from a sentence-level model (e.g. transformer)")
    gen = OmegaConf.structured(GenerationConfig())
    with open_dict(gen):
        gen.beam = int(beam)
        for k, v in generation.items():
            if not hasattr(gen, k):
                raise ValueError(f"unknown generation option {k!r}")
            setattr(gen, k, v)
    use_cuda = torch.cuda.is_available() if cpu is None else (not cpu and torch.cuda.is_available())
    if cpu is False and not torch.cuda.is_available():
        raise DraftsError("no GPU: use --cpu")
    model.eval()
    model.prepare_for_inference_(OmegaConf.create({"generation": gen}))
    if fp16:
        model.half()
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    model.to(device)
    generator = task.build_generator([model], gen)
    return DraftTranslator(task, model, generator, os.path.abspath(checkpoint),
                           checkpoint_sha1(checkpoint), int(beam), bool(fp16), device)


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
                log: Callable[[str], None] = logger.info, **generation) -> List[DraftsResult]:
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
    line per note (resumed chunks, skipped splits, restarts).

    Errors (one line naming the file): :class:`DraftsError` (missing data directory or
    split, sentence too long), :class:`~fairseq_docctx.hub.CheckpointError` (unusable
    checkpoint, other dictionaries or language pair, a document-level model).
    """
    from fairseq.data import data_utils

    data_dir = os.fspath(data_dir)
    if not os.path.isdir(data_dir):
        raise DraftsError(f"{data_dir}: no such data directory")
    if max_tokens is not None and batch_size is not None:
        raise DraftsError("give --max-tokens or --batch-size, not both")
    if chunk_sentences < 1:
        raise DraftsError("chunk_sentences must be >= 1")
    if splits is None:
        splits = mf.split_names(data_dir) or DEFAULT_SPLITS
    splits = list(dict.fromkeys(splits))
    translator = load_draft_translator(checkpoint, data_dir, beam=beam, cpu=cpu, fp16=fp16, **generation)
    src, tgt = translator.task.cfg.source_lang, translator.task.cfg.target_lang
    sources = {}
    for split in splits:  # every split checked before any work
        prefix = _source_prefix(data_dir, split, src, tgt)
        if prefix is None:
            raise DraftsError(f"{data_dir}: split '{split}' has no binarized {src} sentences "
                              f"({os.path.join(data_dir, f'{split}.{src}-{tgt}.{src}')}.bin/.idx)")
        sources[split] = prefix
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
            log(f"{split}: the drafts there were made with other settings or data: making them again")
            mf.forget_drafts(data_dir, split)
        dataset = translator.dataset(src_data, src_data.sizes)
        batches = translator.plan(dataset, max_tokens, batch_size, where=sources[split] + ".bin")
        chunks = _chunks(batches, chunk_sentences)
        work = _SplitWork(data_dir, split, src, tgt)
        settings = {**settings_base, "split": split, "sentences": n}
        old = work.settings()
        if old is not None and not _settings_equal(old, settings):
            log(f"{split}: the unfinished drafts in {work.dir} were made with other settings: "
                "starting this split over")
            old = None
        if old is None:
            work.start(settings)
        drafts: List[Optional[np.ndarray]] = [None] * n
        done = reused = reused_chunks = 0
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
        done = reused
        if reused_chunks:
            log(f"{split}: resuming: {reused_chunks} of {len(chunks)} chunks already done "
                f"({reused} of {n} sentences)")
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
        missing = [i for i, d in enumerate(drafts) if d is None]
        if missing:
            raise RuntimeError(f"internal error: sentence {missing[0]} of {sources[split]} has no draft")
        _assemble(work, prefix, drafts, len(translator.target_dictionary))
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


__all__ = [
    "DRAFT_SIDE", "DraftsError", "DraftTranslator", "DraftSentences", "DraftsResult", "draft_prefix",
    "drafts_exist", "load_drafts", "load_draft_translator", "make_drafts",
]
