"""The draft translator: a sentence-level checkpoint translating every sentence on its own.

The Multi-Hop Transformer (Zhang et al. 2021, §3.1) reads drafts, a sentence-level src->tgt
model's translations of the sentences (:mod:`fairseq_docctx.data.drafts` declares the
context side). :func:`load_draft_translator` loads that model (through
:func:`fairseq_docctx.inference.checkpoint.load_models`, with the same checks as any
checkpoint) into a :class:`DraftTranslator`, which translates in fairseq's length-sorted
batches: over a data directory's splits (:func:`fairseq_docctx.inference.drafts.make_drafts`,
``docctx-drafts``) or over raw input binarized on the fly (the hub and ``docctx-translate``,
:func:`load_model_drafter`).
"""
import os
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from ..data import manifest as mf
from ..data import context_batch as cb
from ..data.drafts import DEFAULT_BEAM, DEFAULT_MAX_TOKENS, DRAFT_SIDE, DraftSentences, DraftsError
from ..models.document_context import context_spec
from ..tasks.length_limits import limit_each_row
from .checkpoint import CheckpointError, checkpoint_sha1, load_models, recorded


def reads_drafts(models) -> bool:
    """Whether one of ``models`` reads the ``draft`` context side."""
    return any(DRAFT_SIDE in context_spec(m).sides for m in models)


def check_language_pair(where: str, langs, data_dir: str) -> None:
    """Refuse (:class:`CheckpointError`) a drafts model ``where`` that translates ``langs``
    (source, target) when the data directory ``data_dir`` records another language pair:
    drafts come from a model of the data's pair."""
    pair = mf.language_pair(data_dir)
    if pair is not None and tuple(pair) != tuple(langs):
        raise CheckpointError(f"{where} translates {langs[0]}->{langs[1]}, the data directory {data_dir} "
                              f"is {pair[0]}->{pair[1]}: drafts come from a {pair[0]}->{pair[1]} "
                              "sentence-level model")


class DraftTranslator:
    """A sentence-level checkpoint ready for batched beam search (fairseq's
    ``SequenceGenerator`` from the task's ``build_generator``, every sentence's length limit
    from its own length: :mod:`~fairseq_docctx.tasks.length_limits`, so that a draft does not
    depend on the sentences batched with it).

    Built by :func:`load_draft_translator`. :meth:`translate` translates a list of source
    token tensors (e.g. raw input binarized on the fly); :meth:`plan` and
    :meth:`translate_batch` are what
    :func:`fairseq_docctx.inference.drafts.make_drafts` runs over a split.
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
        # on data with language tokens the task's: the target token first, mBART-25's placed
        langtoks = getattr(self.task, "language_tokens", None)
        hypos = (langtoks.generate(self.generator, [self.model], sample, prefix_tokens=langtoks.prefix(sample))
                 if langtoks is not None else self.generator.generate([self.model], sample, prefix_tokens=None))
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


def load_draft_translator(checkpoint: str, data_dir: str, beam: int = DEFAULT_BEAM,
                          cpu: Optional[bool] = None, fp16: bool = False,
                          **generation) -> DraftTranslator:
    """Load a sentence-level src->tgt checkpoint with the dictionaries of ``data_dir``.

    Refuses (:class:`~fairseq_docctx.inference.checkpoint.CheckpointError`, one line) an
    unusable file, a checkpoint whose dictionaries differ from the data directory's
    (:func:`~fairseq_docctx.inference.checkpoint.check_dictionaries`) or that translates
    another language pair than the directory's, and a model that reads document context
    (drafts come from a sentence-level model). ``cpu``: ``None`` = a GPU if there is one.
    ``generation``: options of fairseq's ``GenerationConfig`` (``lenpen``, ``max_len_b``...),
    fairseq's defaults otherwise (those of ``fairseq-generate``).
    """
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf, open_dict

    checkpoint, data_dir = os.fspath(checkpoint), os.fspath(data_dir)
    models, cfg, task, _, _ = load_models(checkpoint, data_dir, fix="")
    check_language_pair(checkpoint, (task.cfg.source_lang, task.cfg.target_lang), data_dir)
    model = models[0]
    if context_spec(model).reads_context:
        raise CheckpointError(f"{checkpoint}: {model.__class__.__name__} reads document "
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
    # each sentence's length limit from its own length, whatever task the checkpoint names
    generator = limit_each_row(task.build_generator([model], gen))
    return DraftTranslator(task, model, generator, os.path.abspath(checkpoint),
                           checkpoint_sha1(checkpoint), int(beam), bool(fp16), device)


def load_model_drafter(path: str, state: dict, models, data: str, draft_path: Optional[str] = None,
                       beam: Optional[int] = None, cpu: bool = True,
                       fp16: bool = False) -> Optional[DraftTranslator]:
    """The draft translator of a model that reads drafts (``None`` for one that does not):
    ``draft_path``, else the checkpoint the model records (``draft_path``, the one its
    source-side sentence encoder was initialised from), loaded with the model's data
    directory ``data``; ``beam``: default that of ``docctx-drafts``. ``path``/``state``:
    the model's checkpoint file and its content. A model that reads drafts and records no
    drafter, without ``draft_path``, is refused (:class:`CheckpointError`)."""
    if not reads_drafts(models):
        return None
    draft_path = draft_path or recorded(state, "draft_path")
    if not draft_path:
        msg = (f"{path} reads drafts of the sentences and records no model that makes them: give the "
               "src->tgt sentence-level checkpoint ({opt})")
        raise CheckpointError(msg.format(opt="draft_path=CKPT"), msg.format(opt="--draft-path CKPT"))
    return load_draft_translator(draft_path, data, beam=beam or DEFAULT_BEAM, cpu=cpu, fp16=fp16)


def draft_input(request: cb.RawInputRequest):
    """The ``draft`` side's raw-input hook (:func:`~fairseq_docctx.data.context_batch.
    register_raw_input`): for a model that reads drafts, the maker of the drafts of raw
    input's sentences by its draft translator (:func:`load_model_drafter`, with the hub's
    ``draft_path`` and ``draft_beam`` options), each sentence translated on its own in
    length-sorted batches as ``docctx-drafts`` translates a data directory; ``None`` for
    other models."""
    translator = load_model_drafter(request.path, request.state, request.models, request.data,
                                    request.options.get("draft_path"), beam=request.options.get("draft_beam"),
                                    cpu=request.cpu, fp16=request.fp16)
    if translator is None:
        return None

    def make(sentences, batch_size=None, max_tokens=None):
        return DraftSentences(translator.translate(sentences, max_tokens=max_tokens, batch_size=batch_size))

    return make


cb.register_raw_input(DRAFT_SIDE, draft_input)
