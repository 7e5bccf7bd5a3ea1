"""Python API: translate whole documents with a trained checkpoint.

>>> from fairseq_docctx.hub import from_pretrained
>>> model = from_pretrained("checkpoints/ted", checkpoint_file="checkpoint_best.pt", data="data-bin/ted")
>>> model.translate_document(["First sentence.", "It is the second one."])
['Erster Satz.', 'Er ist der zweite.']

Built on fairseq's :class:`~fairseq.hub_utils.GeneratorHubInterface`: raw text in (the
SentencePiece model stored with the data is applied), detokenized text out. Documents are
decoded in document order, side by side (``batch_size`` documents at a time): sentence ``t``
of every document is translated after sentence ``t-1``, so models with target context read
their own previous translations.
"""
import copy
import glob
import hashlib
import logging
import os
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch
from fairseq import checkpoint_utils, tasks, utils
from fairseq.data import LanguagePairDataset
from fairseq.hub_utils import GeneratorHubInterface
from omegaconf import open_dict

from .data import manifest as mf
from .data.doc_index import DocIndex
from .data.drafts import DEFAULT_BEAM, DEFAULT_MAX_TOKENS, DraftsError
from .data.document_dataset import DocumentPairDataset
from .data.manifest import spm_model_path
from .models.document_context import context_spec

logger = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (missing, not a checkpoint, truncated, or trained
    with other dictionaries than those of the data directory); ``str(err)`` is one line
    naming the file and what is wrong. ``cli_message``: the same for a command line, where
    the data directory is the option ``--data``."""

    def __init__(self, message: str, cli_message: Optional[str] = None):
        super().__init__(message)
        self.cli_message = cli_message or message


def find_spm_model(*dirs) -> Optional[str]:
    """The SentencePiece model of the first directory that has one (its ``docctx.json``
    names it, :func:`fairseq_docctx.data.manifest.spm_model_path`)."""
    for d in dirs:
        path = spm_model_path(d)
        if path is not None:
            return path
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    msg = text[0] if text else type(e).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."


def load_checkpoint_state(path: str, arg_overrides: Optional[dict] = None) -> dict:
    """``checkpoint_utils.load_checkpoint_to_cpu`` with one-line errors
    (:class:`CheckpointError`) for a missing file and for a file that is not a fairseq
    checkpoint or is truncated."""
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not a checkpoint file (a directory?)")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)
    except Exception as e:  # torch.load's errors: pickle, zip archive, EOF...
        raise CheckpointError(f"{path}: not a readable fairseq checkpoint, truncated or of "
                              f"another kind ({_first_line(e)})") from None
    if not isinstance(state, dict) or "model" not in state or not (state.get("cfg") or state.get("args")):
        raise CheckpointError(f"{path}: not a fairseq checkpoint (no model weights and configuration)")
    return state


def _dictionary_rows(weights: dict, side: str) -> Optional[int]:
    for key in (f"{side}.embed_tokens.weight", f"{side}.output_projection.weight", f"{side}.embed_out"):
        if key in weights and hasattr(weights[key], "shape"):
            return int(weights[key].shape[0])
    return None


def _dictionary_file_digest(path: str) -> Optional[str]:
    import hashlib

    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return None


def _trained_on(state: dict) -> Optional[str]:
    """The data directory a checkpoint's configuration names (the one it was trained on)."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        return cfg["task"].get("data")
    return getattr(state.get("args"), "data", None)


def _apply_overrides(state: dict, arg_overrides: dict) -> None:
    """What ``load_checkpoint_to_cpu(path, arg_overrides)`` does, after the fact."""
    from fairseq.dataclass.utils import overwrite_args_by_name

    if state.get("args") is not None:
        for k, v in arg_overrides.items():
            setattr(state["args"], k, v)
    if state.get("cfg") is not None:
        overwrite_args_by_name(state["cfg"], arg_overrides)


def _recorded(state: dict, name: str):
    """A value the task or the model recorded in a checkpoint's model args (if any)."""
    cfg = state.get("cfg")
    model = cfg.get("model") if cfg is not None else None
    if model is None:
        model = state.get("args")
    return model.get(name) if isinstance(model, dict) else getattr(model, name, None)


def check_dictionaries(path: str, state: dict, task, data: str, trained_on: Optional[str] = None) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint whose embedding tables do not have one
    row per type of the data directory's dictionaries, or, where the directory the model
    was trained on is still there, whose training dictionaries differ in content from the
    data directory's (another language pair's dictionaries of the same size); where it is
    gone, the digests of the dictionaries' words recorded in the checkpoint decide."""
    weights = state["model"]
    fix = "give the data directory it was trained on"
    for side, name, d in (("encoder", "source", task.source_dictionary),
                          ("decoder", "target", task.target_dictionary)):
        rows = _dictionary_rows(weights, side)
        if d is None or rows is None or rows == len(d):
            continue
        msg = (f"{path} was trained with a {rows:,}-type {name} dictionary, {{opt}} {data} has "
               f"{len(d):,}: {fix}")
        raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
    if not trained_on or not os.path.isdir(trained_on):
        # the directory is gone: the digests of its dictionaries' words the task recorded
        mismatch = getattr(task, "dictionary_mismatch", lambda _: None)(_recorded(state, "dictionary_digests"))
        if mismatch:
            msg = (f"{path} was trained with another {mismatch} dictionary than {{opt}} {data}'s "
                   f"(same size, other words): {fix}")
            raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
        return
    if os.path.realpath(trained_on) == os.path.realpath(data):
        return
    for lang in (task.cfg.source_lang, task.cfg.target_lang):
        if not lang:
            continue
        ours, theirs = (os.path.join(x, f"dict.{lang}.txt") for x in (data, trained_on))
        a, b = _dictionary_file_digest(ours), _dictionary_file_digest(theirs)
        if a is not None and b is not None and a != b:
            msg = (f"{path} was trained with the dictionary {theirs}, which differs from {{opt}} "
                   f"{ours}: {fix}")
            raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))


def _dictionary_languages(data: str) -> List[str]:
    """The languages of the ``dict.LANG.txt`` files of a directory."""
    return sorted(os.path.basename(f)[len("dict."):-len(".txt")]
                  for f in glob.glob(os.path.join(data, "dict.*.txt")))


def _pair_of_dictionaries(data: str, digests: Optional[str], separator: Optional[str]):
    """The (source, target) languages of the two ``dict.LANG.txt`` of ``data`` that the
    dictionary digests a checkpoint records (``"<source>,<target>"``) tell apart; ``None``
    when there are not two or the digests do not single one direction out (a joined
    dictionary: both files hold the same words)."""
    from fairseq.data import Dictionary

    from .tasks.document_translation import dictionary_digest

    langs = _dictionary_languages(data)
    if len(langs) != 2 or not digests or len(digests.split(",")) != 2:
        return None
    try:
        found = {lang: dictionary_digest(Dictionary.load(os.path.join(data, f"dict.{lang}.txt")), separator)
                 for lang in langs}
    except Exception:  # an unreadable dictionary: the task's setup names it
        return None
    src, tgt = digests.split(",")
    pairs = [(a, b) for a, b in (langs, langs[::-1]) if found[a] == src and found[b] == tgt]
    return pairs[0] if len(pairs) == 1 else None


def _pair_of_directory(data: Optional[str], digests: Optional[str] = None, separator: Optional[str] = None):
    """The (source, target) languages of a data directory: its manifest's (``docctx.json``),
    else the binarized files' names (``SPLIT.SRC-TGT.*``, as fairseq infers them), else its
    dictionaries told apart by ``digests`` (:func:`_pair_of_dictionaries`); ``None`` when
    none of them says."""
    from fairseq.data import data_utils

    if not data or not os.path.isdir(data):
        return None
    pair = mf.language_pair(data)
    if pair is not None:
        return tuple(pair)
    src, tgt = data_utils.infer_language_pair(data)
    if src and tgt:
        return src, tgt
    return _pair_of_dictionaries(data, digests, separator)


def resolve_language_pair(path: str, state: dict, data: str, trained_on: Optional[str]) -> dict:
    """The task options ``source_lang``/``target_lang`` a checkpoint is loaded with: none
    where its configuration holds them (trained with ``-s/-t``); else the pair the model
    records (``language_pair``, written by the task at training), the data directory's
    (:func:`_pair_of_directory`), or that of the directory it was trained on, in this
    order. Refuses (:class:`CheckpointError`) a model whose pair none of them tells."""
    cfg = state.get("cfg")
    task_cfg = cfg.get("task") if cfg is not None else None
    if task_cfg is None:
        task_cfg = state.get("args")
    get = (lambda k: task_cfg.get(k)) if hasattr(task_cfg, "get") else (lambda k: getattr(task_cfg, k, None))
    if get("source_lang") and get("target_lang"):
        return {}
    recorded = _recorded(state, "language_pair")
    pair = tuple(recorded.split("-", 1)) if isinstance(recorded, str) and "-" in recorded else None
    digests, separator = _recorded(state, "dictionary_digests"), get("context_separator")
    pair = pair or _pair_of_directory(data, digests, separator) or _pair_of_directory(trained_on, digests, separator)
    if pair is None:
        langs = _dictionary_languages(data)
        why = (f"its dictionaries ({', '.join(f'dict.{x}.txt' for x in langs)}) fit either direction"
               if len(langs) == 2 else "it has no dictionaries of two languages")
        msg = (f"{path}: cannot tell the model's language pair: the checkpoint records none, {{opt}} "
               f"{data} has no docctx.json and no binarized files, and {why}: give the data "
               f"directory with docctx.json (copy it beside the dictionaries)")
        raise CheckpointError(msg.format(opt="data"), msg.format(opt="--data"))
    return {"source_lang": pair[0], "target_lang": pair[1]}


def _reads_drafts(models) -> bool:
    return any("draft" in context_spec(m).sides for m in models)


class DocumentHubInterface(GeneratorHubInterface):
    """fairseq's hub interface plus :meth:`translate_document` / :meth:`translate_documents`.

    A model that reads the ``draft`` context side (``mht_transformer``) gets the drafts of
    raw input from ``drafter``, a sentence-level src->tgt checkpoint
    (:class:`DraftTranslator`, :func:`from_pretrained`'s
    ``draft_path``), which translates every sentence first, as ``docctx-drafts`` does for a
    data directory (length-sorted batches)."""

    def __init__(self, cfg, task, models, spm_model: Optional[str] = None, drafter=None):
        super().__init__(cfg, task, models)
        self.spm, self.spm_model = None, spm_model
        if spm_model is not None:
            import sentencepiece

            self.spm = sentencepiece.SentencePieceProcessor(model_file=spm_model)
        self.drafter = drafter

    @property
    def reads_drafts(self) -> bool:
        """Whether the model reads drafts, which raw input has to be given on the fly."""
        return _reads_drafts(self.models)

    def make_drafts(self, sentences: Sequence[torch.LongTensor], batch_size: Optional[int] = None,
                    max_tokens: Optional[int] = None) -> List[torch.LongTensor]:
        """The drafter's best translations (target token ids ending in EOS) of binarized
        source sentences, each on its own (no context)."""
        if self.drafter is None:
            raise CheckpointError("the model reads drafts of the sentences: give the src->tgt "
                                  "sentence-level checkpoint that makes them (draft_path=...)",
                                  "the model reads drafts of the sentences: give the src->tgt "
                                  "sentence-level checkpoint that makes them (--draft-path)")
        return self.drafter.translate(sentences, max_tokens=max_tokens, batch_size=batch_size)

    # raw text <-> model tokens: the SentencePiece model docctx-prepare trained
    def apply_bpe(self, sentence: str) -> str:
        if self.spm is None:
            return super().apply_bpe(sentence)
        return " ".join(self.spm.encode(sentence.strip(), out_type=str))

    def remove_bpe(self, sentence: str) -> str:
        if self.spm is None:
            return super().remove_bpe(sentence)
        return self.spm.decode(sentence.split())

    def build_generator(self, gen_args):
        """The generator of :meth:`generate_documents` (fairseq's beam search over the models)."""
        return self.task.build_generator(self.models, gen_args)

    # ------------------------------------------------------------------ documents
    def translate_document(self, sentences: Sequence[str], beam: int = 5, **kwargs) -> List[str]:
        """Translate one document (a list of sentences, in order)."""
        return self.translate_documents([list(sentences)], beam=beam, **kwargs)[0]

    def translate_documents(self, documents: Sequence[Sequence[str]], beam: int = 5,
                            batch_size: int = 16, max_tokens: Optional[int] = None,
                            progress: Optional[Callable[[int, int], None]] = None,
                            document_done: Optional[Callable[[int, List[str]], None]] = None,
                            keep: bool = True, tokens: Optional[Sequence[Sequence[torch.LongTensor]]] = None,
                            **kwargs) -> Optional[List[List[str]]]:
        """Translate documents (lists of raw sentences); returns detokenized translations,
        document by document, sentence by sentence, in the input order.
        ``document_done(i, translations)`` is called as soon as document ``i`` is done.
        With ``keep=False`` a document's translations go to ``document_done`` only and
        nothing is returned: memory then holds the translations of the documents still
        open, not the whole output. ``tokens``: the documents already encoded (:meth:`encode`,
        e.g. by a length check), which are then not encoded again."""
        if tokens is None:
            tokens = [[self.encode(s) for s in doc] for doc in documents]
        translations = self.generate_documents(
            tokens, beam=beam, batch_size=batch_size, max_tokens=max_tokens, progress=progress,
            document_done=document_done, keep=keep,
            sentence_done=lambda hypos: self.decode(hypos[0]["tokens"]), **kwargs)
        return translations if keep else None

    def generate_documents(self, documents: Sequence[Sequence[torch.LongTensor]], beam: int = 5,
                           batch_size: int = 16, max_tokens: Optional[int] = None,
                           progress: Optional[Callable[[int, int], None]] = None,
                           document_done: Optional[Callable[[int, List[list]], None]] = None,
                           sentence_done: Optional[Callable[[list], object]] = None,
                           keep: bool = True, **kwargs) -> Optional[List[List[list]]]:
        """Beam search over binarized documents in document order; returns fairseq's
        hypothesis lists per sentence. ``progress(sentences_done, documents_done)`` is
        called after every batch (``sentences_done``: the batch's sentences);
        ``document_done(i, hypotheses)`` as soon as document ``i`` is translated.

        ``sentence_done(hypotheses)``, if given, replaces each sentence's hypothesis list
        as soon as its batch is decoded (e.g. by the best translation's text), so that the
        beam's hypotheses (with their attention) are not held until the document is done.
        With ``keep=False`` nothing is returned and a document's results are dropped once
        ``document_done`` has them: memory holds the results of the open documents only."""
        lengths = [len(d) for d in documents]
        flat = [t for d in documents for t in d]
        if document_done is not None:
            for i, n in enumerate(lengths):
                if not n:
                    document_done(i, [])
        if not flat:
            return [[] for _ in documents] if keep else None
        doc_index = DocIndex([str(i) for i, n in enumerate(lengths) if n],
                             [n for n in lengths if n])
        pair = LanguagePairDataset(flat, [t.numel() for t in flat], self.src_dict,
                                   tgt_dict=self.tgt_dict, shuffle=False)
        cfg = self.task.cfg
        side_data = {}
        if self.reads_drafts:
            from .data.drafts import DraftSentences

            side_data["draft"] = DraftSentences(self.make_drafts(flat, batch_size=batch_size, max_tokens=max_tokens))
        # document order only where the model reads its own previous translations
        dataset = DocumentPairDataset(pair, doc_index, cfg.context_size, cfg.context_sides, shuffle=False,
                                      position_major=bool(getattr(self.task, "hypothesis_context", True)),
                                      side_data=side_data)
        gen_args = copy.deepcopy(self.cfg.generation)
        with open_dict(gen_args):
            gen_args.beam = beam
            for k, v in kwargs.items():
                setattr(gen_args, k, v)
        generator = self.build_generator(gen_args)
        batches = self.task.get_batch_iterator(
            dataset=dataset, max_tokens=max_tokens, max_sentences=batch_size,
            max_positions=self.max_positions, disable_iterator_cache=True,
        ).next_epoch_itr(shuffle=False)
        nonempty = [i for i, n in enumerate(lengths) if n]
        # a document is done when all its sentences are (in document order: its last one; in
        # length-sorted batches: in any order)
        doc_of = np.repeat(np.arange(len(nonempty)), doc_index.lengths)
        left = doc_index.lengths.astype(np.int64).copy()
        del flat, pair  # the dataset holds what it needs
        # the results of the sentences whose document is still open, by sentence id
        open_results, done_docs = {}, 0
        out = [[] for _ in documents] if keep else None
        for batch in batches:
            batch = utils.apply_to_sample(lambda t: t.to(self.device), batch)
            hypos = self.task.inference_step(generator, self.models, batch)
            ids = batch["id"].tolist()
            for i, h in zip(ids, hypos):
                open_results[i] = h if sentence_done is None else sentence_done(h)
            del hypos, batch
            for i in ids:
                k = int(doc_of[i])
                left[k] -= 1
                if left[k] == 0:
                    done_docs += 1
                    ids_k = range(int(doc_index.offsets[k]), int(doc_index.offsets[k] + doc_index.lengths[k]))
                    doc = [open_results.pop(j) for j in ids_k]
                    if hasattr(self.task, "forget"):
                        self.task.forget(ids_k)
                    if keep:
                        out[nonempty[k]] = doc
                    if document_done is not None:
                        document_done(nonempty[k], doc)
            if progress is not None:
                progress(len(ids), done_docs)
        return out


def from_pretrained(checkpoint_dir: str, checkpoint_file: str = "checkpoint_best.pt",
                    data: Optional[str] = None, spm_model: Optional[str] = None,
                    cpu: bool = True, fp16: bool = False, draft_path: Optional[str] = None,
                    draft_beam: Optional[int] = None, **overrides) -> DocumentHubInterface:
    """Load a checkpoint (directory + file name, or a path to the ``.pt`` itself).

    ``draft_path``: for a model that reads drafts (``mht_transformer``), the src->tgt
    sentence-level checkpoint that makes them (default: the one the model records, the
    checkpoint its source-side sentence encoder was initialised from); loaded with the same
    data directory; ``draft_beam``: its beam (default that of ``docctx-drafts``, 4).

    ``data``: the data directory with the dictionaries (default: the checkpoint directory if
    it holds ``dict.*.txt``, else the ``data`` the model was trained on); the language pair
    is resolved by :func:`resolve_language_pair`, so a folder with the dictionaries alone
    (or with ``docctx.json``) serves a deployed checkpoint. ``spm_model``:
    default ``spm.model`` of the data or checkpoint directory; without one the text is
    assumed to be tokenized already. ``overrides``: task options such as
    ``context_size=2`` or ``target_context="reference"``.
    """
    from . import register_safe_globals  # noqa: F401  (the plugin is imported: safe loading on)

    path = checkpoint_dir = os.fspath(checkpoint_dir)
    data = os.fspath(data) if data is not None else None
    if os.path.isdir(checkpoint_dir):
        path = os.path.join(checkpoint_dir, checkpoint_file)
    ckpt_dir = os.path.dirname(os.path.abspath(path))
    state = load_checkpoint_state(path)  # read once (one-line errors for unusable files)
    trained_on = _trained_on(state)
    if data is None:
        if glob.glob(os.path.join(ckpt_dir, "dict.*.txt")):
            data = ckpt_dir
        else:
            data = trained_on
            if not data or not os.path.isdir(data):
                msg = (f"{path}: the dictionaries are not found: the model was trained on "
                       f"'{data}', which is not there; give the data directory with its dict.*.txt ({{opt}})")
                raise CheckpointError(msg.format(opt="data=DIR"), msg.format(opt="--data DIR"))
    elif not os.path.isdir(data):
        raise CheckpointError(f"data={data}: no such directory", f"--data {data}: no such directory")
    arg_overrides = {"data": data, "target_context": "hypothesis",
                     **resolve_language_pair(path, state, data, trained_on), **overrides}
    _apply_overrides(state, arg_overrides)
    try:
        task = tasks.setup_task(state["cfg"].task, from_checkpoint=True)
    except FileNotFoundError as e:
        missing = e.filename or _first_line(e)
        msg = (f"{path}: the data directory {data} does not hold the dictionaries of this model "
               f"({missing} is missing): give the data directory it was trained on")
        raise CheckpointError(msg) from None
    check_dictionaries(path, state, task, data, trained_on)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides=arg_overrides, task=task, state=state)
    spm_model = spm_model or find_spm_model(data, ckpt_dir)
    if spm_model is None:
        logger.warning("no SentencePiece model recorded in the data directory (docctx.json) nor "
                       "next to the checkpoint: input must be tokenized already")
    for m in models:
        if fp16:
            m.half()
        if not cpu and torch.cuda.is_available():
            m.cuda()
    drafter = None
    if _reads_drafts(models):
        draft_path = draft_path or _recorded(state, "draft_path")
        if not draft_path:
            msg = (f"{path} reads drafts of the sentences and records no model that makes them: give the "
                   "src->tgt sentence-level checkpoint ({opt})")
            raise CheckpointError(msg.format(opt="draft_path=CKPT"), msg.format(opt="--draft-path CKPT"))

        drafter = load_draft_translator(draft_path, data, beam=draft_beam or DEFAULT_BEAM,
                                               cpu=cpu, fp16=fp16)
    hub = DocumentHubInterface(cfg, task, models, spm_model, drafter=drafter)
    if not cpu and torch.cuda.is_available():
        hub.cuda()
    return hub


# ------------------------------------------------------------------ drafts: a sentence-level model translating
class DraftTranslator:
    """A sentence-level checkpoint ready for batched beam search (fairseq's
    ``SequenceGenerator`` from the task's ``build_generator``).

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

    Refuses (:class:`~fairseq_docctx.CheckpointError`, one line) an unusable file, a
    checkpoint whose dictionaries differ from the data directory's
    (:func:`fairseq_docctx.check_dictionaries`) or that translates another language
    pair than the directory's, and a model that reads document context (drafts come from a
    sentence-level model). ``cpu``: ``None`` = a GPU if there is one. ``generation``:
    options of fairseq's ``GenerationConfig`` (``lenpen``, ``max_len_b``...), fairseq's
    defaults otherwise (those of ``fairseq-generate``).
    """
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf, open_dict

    checkpoint = os.fspath(checkpoint)
    state = load_checkpoint_state(checkpoint)
    trained_on = _trained_on(state)
    overrides = {"data": os.fspath(data_dir),
                 **resolve_language_pair(checkpoint, state, os.fspath(data_dir), trained_on)}
    _apply_overrides(state, overrides)
    cfg = state["cfg"]
    try:
        task = tasks.setup_task(cfg.task, from_checkpoint=True)
    except FileNotFoundError as e:
        raise CheckpointError(
            f"{checkpoint}: the data directory {data_dir} does not hold the dictionaries of this "
            f"model ({e.filename or _first_line(e)} is missing)") from None
    check_dictionaries(checkpoint, state, task, data_dir, trained_on)
    pair = mf.language_pair(data_dir)
    langs = (task.cfg.source_lang, task.cfg.target_lang)
    if pair is not None and tuple(pair) != langs:
        raise CheckpointError(f"{checkpoint} translates {langs[0]}->{langs[1]}, the data "
                                  f"directory {data_dir} is {pair[0]}->{pair[1]}: drafts come "
                                  f"from a {pair[0]}->{pair[1]} sentence-level model")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides=overrides, task=task, state=state)
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
    generator = task.build_generator([model], gen)
    return DraftTranslator(task, model, generator, os.path.abspath(checkpoint),
                           checkpoint_sha1(checkpoint), int(beam), bool(fp16), device)


# ------------------------------------------------------------------ the CTranslate2 engine
class ExportedHubInterface(DocumentHubInterface):
    """:class:`DocumentHubInterface` over a model exported by ``docctx-export ctranslate2``
    (:mod:`fairseq_docctx.inference.ctranslate2`): the same documents in, in the same
    document order, decoded by CTranslate2."""

    def __init__(self, cfg, task, models, spm_model, translator, record: dict):
        super().__init__(cfg, task, models, spm_model)
        self.translator = translator
        self.record = record

    def build_generator(self, gen_args):
        from .inference.ctranslate2 import CTranslate2Generator

        sep = getattr(self.task.cfg, "context_separator", None)
        return CTranslate2Generator(
            self.translator, self.src_dict, self.tgt_dict,
            self.src_dict.index(sep) if sep and sep in self.src_dict.indices else None,
            beam=gen_args.beam, lenpen=gen_args.lenpen, max_len_a=gen_args.max_len_a,
            max_len_b=gen_args.max_len_b, min_len=gen_args.min_len, unkpen=gen_args.unkpen,
            max_source_positions=self.record["max_source_positions"],
            max_target_positions=self.record["max_target_positions"])


def _exported_task(path: str, record: dict, data: Optional[str], **overrides):
    """The task of an exported folder (its recorded settings, the dictionaries of ``data``,
    default the folder itself) and the stand-in model it decodes with."""
    from omegaconf import OmegaConf

    from .inference import ctranslate2 as ct2
    from .models.document_context import check_context

    data = os.fspath(data) if data is not None else path
    if not os.path.isdir(data):
        raise CheckpointError(f"data={data}: no such directory", f"--data {data}: no such directory")
    if os.path.realpath(data) != os.path.realpath(path):
        ct2.check_data_dictionaries(path, record, data)
    task_cfg = OmegaConf.create(record["task"])
    with open_dict(task_cfg):
        task_cfg.data = data
        task_cfg.source_lang, task_cfg.target_lang = record["source_lang"], record["target_lang"]
        for k, v in overrides.items():
            setattr(task_cfg, k, v)
    task = tasks.setup_task(task_cfg, from_checkpoint=True)
    model = ct2.exported_model(record, task)
    if hasattr(task, "model_spec"):
        task.model_spec = context_spec(model)
        check_context(model, task.context_sides, task.cfg.context_size, True)
    return task, model, data


def from_exported(path: str, data: Optional[str] = None, spm_model: Optional[str] = None,
                  cpu: bool = True, threads: Optional[int] = None, **overrides) -> ExportedHubInterface:
    """A model exported by ``docctx-export ctranslate2`` (the folder ``path``), decoded by
    CTranslate2 in document order as :func:`from_pretrained`'s models are. ``data``: a data
    directory whose dictionaries are those exported (default: the folder's own copies);
    ``threads``: CPU threads (default torch's); ``overrides``: task options
    (``context_size=2``)."""
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf

    from .inference import ctranslate2 as ct2

    path = os.fspath(path)
    record = ct2.read_export(path)
    task, model, data = _exported_task(path, record, data, **{"target_context": "hypothesis", **overrides})
    if spm_model is None and record.get("spm_model"):
        spm_model = os.path.join(path, record["spm_model"])
    spm_model = spm_model or find_spm_model(data)
    cfg = OmegaConf.create({"generation": OmegaConf.structured(GenerationConfig()), "tokenizer": None,
                            "bpe": None})
    return ExportedHubInterface(cfg, task, [model], spm_model, ct2.load_translator(path, cpu, threads), record)


def load_exported_draft_translator(path: str, data_dir: str, beam: int = DEFAULT_BEAM,
                                   cpu: Optional[bool] = None, fp16: bool = False,
                                   **generation) -> DraftTranslator:
    """:func:`load_draft_translator` for a sentence-level model exported by ``docctx-export
    ctranslate2``: the same drafts' interface, decoded by CTranslate2."""
    from .inference import ctranslate2 as ct2

    path = os.fspath(path)
    record = ct2.read_export(path)
    if fp16:
        raise DraftsError("--fp16: the ctranslate2 engine computes in the type the model was "
                          "exported with (docctx-export --quantization float16)")
    if record["model"] != "transformer":
        raise CheckpointError(f"{path}: {record['model']} reads document context; drafts come from a "
                              "sentence-level model (e.g. transformer)")
    task, model, _ = _exported_task(path, record, os.fspath(data_dir))
    pair = mf.language_pair(data_dir)
    langs = (record["source_lang"], record["target_lang"])
    if pair is not None and tuple(pair) != langs:
        raise CheckpointError(f"{path} translates {langs[0]}->{langs[1]}, the data directory {data_dir} "
                              f"is {pair[0]}->{pair[1]}: drafts come from a {pair[0]}->{pair[1]} "
                              "sentence-level model")
    translator = ct2.load_translator(path, cpu=bool(cpu))
    generator = ct2.draft_generator(translator, task, record, beam, **generation)
    return DraftTranslator(task, model, generator, os.path.abspath(path),
                           checkpoint_sha1(os.path.join(path, "model.bin")), int(beam), False,
                           torch.device("cpu"))


def export_ctranslate2(path: str, outdir: str, data: Optional[str] = None,
                       quantization: Optional[str] = None, force: bool = False) -> dict:
    """``docctx-export ctranslate2``: the checkpoint ``path`` (``transformer`` or
    ``concat_transformer``), loaded as :func:`from_pretrained` loads it (``data``: its data
    directory), written as a CTranslate2 model folder ``outdir``
    (:func:`fairseq_docctx.inference.ctranslate2.export`). Returns the record written."""
    from .inference import ctranslate2 as ct2

    path = os.fspath(path)
    state = load_checkpoint_state(path)
    cfg = state.get("cfg")
    model_cfg = cfg.get("model") if cfg is not None else None
    model_cfg = model_cfg if model_cfg is not None else state.get("args")
    arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    ct2.check_architecture(arch, path)
    ct2.check_outdir(os.fspath(outdir), force)
    del state
    hub = from_pretrained(path, data=data)
    return ct2.export(hub.models[0], hub.task, path, os.fspath(outdir), spm_model=hub.spm_model,
                      quantization=quantization, force=force)
