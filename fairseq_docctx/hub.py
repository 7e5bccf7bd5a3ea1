"""Python API: translate whole documents with a trained checkpoint.

>>> from fairseq_docctx.hub import from_pretrained
>>> model = from_pretrained("checkpoints/ted", checkpoint_file="checkpoint_best.pt", data="data-bin/ted")
>>> model.translate_document(["First sentence.", "It is the second one."])
['Erster Satz.', 'Er ist der zweite.']

Built on fairseq's :class:`~fairseq.hub_utils.GeneratorHubInterface`: raw text in (the
SentencePiece model stored with the data is applied; on data written by ``docctx-prepare
--pretrained``, the release's segmentation and language tokens), detokenized text out. Documents are
decoded in document order, side by side (``batch_size`` documents at a time): sentence ``t``
of every document is translated after sentence ``t-1``, so models with target context read
their own previous translations. A segment model (a checkpoint trained with ``--doc-mode
segments``: ``g_transformer``, ``doc2doc_transformer``) translates each document as segments
of consecutive sentences instead, and still gives back one translation per sentence, in order.
"""
import copy
import logging
import os
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset
from fairseq.hub_utils import GeneratorHubInterface
from omegaconf import open_dict

from .data import context_batch as cb
from .data.dataset_builder import build_document_dataset, raw_side_data
from .data.doc_index import DocIndex
from .data.packed_tokens import PackedTokens
# the loading of checkpoints, importable from here as well
from .inference.checkpoint import (CheckpointError, check_dictionaries, checkpoint_path,  # noqa: F401
                                   find_spm_model, load_checkpoint_state, load_models,
                                   resolve_language_pair)
# the draft side's raw-input hook, registered on import; the draft translator, importable from here
from .inference.drafter import load_draft_translator  # noqa: F401
from .inference.options import TRANSLATE_DEFAULTS
from .models.document_context import context_spec

logger = logging.getLogger(__name__)


class DocumentHubInterface(GeneratorHubInterface):
    """fairseq's hub interface plus :meth:`translate_document` / :meth:`translate_documents`.

    A model that reads a context side whose sentences raw input lacks (e.g. the drafts
    ``mht_transformer`` reads) gets them from ``raw_inputs``, the makers the sides'
    raw-input hooks gave when the model was loaded (:func:`~fairseq_docctx.data.
    context_batch.raw_input_makers`; :meth:`side_data`)."""

    def __init__(self, cfg, task, models, spm_model: Optional[str] = None, raw_inputs: Optional[dict] = None):
        super().__init__(cfg, task, models)
        self.spm, self.spm_model = None, spm_model
        if spm_model is not None:
            import sentencepiece

            if not os.path.isfile(spm_model):
                raise CheckpointError(f"{spm_model}: no such SentencePiece model file")
            try:
                self.spm = sentencepiece.SentencePieceProcessor(model_file=spm_model)
            except (OSError, RuntimeError) as e:
                raise CheckpointError(f"{spm_model}: not a SentencePiece model ({e})") from None
        self.raw_inputs = dict(raw_inputs or {})

    @property
    def reads_segments(self) -> bool:
        """Whether the task translates segments (``--doc-mode segments``, adopted from the
        checkpoint): several consecutive sentences of a document decoded as one sequence."""
        return bool(getattr(self.task, "segments", False))

    @property
    def segment_fallbacks(self) -> Optional[tuple]:
        """A segment model's ``(segments decoded again sentence by sentence, segments
        decoded)`` so far, every segment of every call counted once (the task's counts, see
        :meth:`~fairseq_docctx.tasks.segment_decoding.SegmentDecoding.inference_step`);
        ``None`` for other models."""
        if not self.reads_segments:
            return None
        return int(self.task.segment_decoding.fallbacks), int(self.task.segment_decoding.decoded)

    @property
    def segment_report(self) -> Optional[tuple]:
        """:attr:`segment_fallbacks` with the misaligned segments by reason:
        ``(fallbacks, decoded, {"count": C, "empty": E, "window": W})`` (another number of
        sentences, an empty output sentence, one outside its length window; see
        :func:`~fairseq_docctx.data.segments.misalignment`); ``None`` for other models."""
        if not self.reads_segments:
            return None
        return (*self.segment_fallbacks, {k: int(v) for k, v in self.task.segment_decoding.misaligned.items()})

    def segment_limit(self, max_tokens: Optional[int] = None) -> int:
        """The limit of the segments' packing (under either rule a segment has at most this
        many tokens on a side): the checkpoint's (or overridden) ``--max-segment-tokens``, at
        most ``max_tokens`` (a batch must hold a segment) and the model's positions (a longer single sentence is refused before decoding, see
        :func:`~fairseq_docctx.inference.translate.check_lengths`)."""
        limits = [int(self.task.cfg.max_segment_tokens)]
        if max_tokens is not None:
            limits.append(int(max_tokens))
        positions = self.max_positions
        for p in (positions if isinstance(positions, (tuple, list)) else (positions,)):
            if p is not None:
                limits.append(int(p))
        return min(limits)

    def side_data(self, sentences: Sequence[torch.LongTensor], batch_size: Optional[int] = None,
                  max_tokens: Optional[int] = None) -> dict:
        """The sentences of the context sides the model reads that raw input lacks, of
        binarized source ``sentences`` (:attr:`raw_inputs`; e.g. the drafts of every sentence,
        each translated on its own), by side."""
        return raw_side_data(self.raw_inputs, sentences, batch_size=batch_size, max_tokens=max_tokens)

    def documents_dataset(self, sentences: PackedTokens, doc_index: DocIndex, batch_size: Optional[int] = None,
                          max_tokens: Optional[int] = None):
        """The dataset of the documents' binarized sentences (in document order, no targets;
        :func:`~fairseq_docctx.data.dataset_builder.build_document_dataset`), with the sides raw
        input lacks (:meth:`side_data`, made in batches of ``batch_size`` sentences or
        ``max_tokens`` tokens). A segment model's: packed into segments
        under :meth:`segment_limit` and the checkpoint's ``--segment-packing``, document by
        document, on the source's lengths (as the task packs a test split for
        ``fairseq-generate``). Another model's: in document order where it reads its own
        previous translations."""
        pair = LanguagePairDataset(sentences, sentences.sizes, self.src_dict, tgt_dict=self.tgt_dict, shuffle=False)
        cfg = self.task.cfg
        if self.reads_segments:  # a segment holds its own context: no side data
            sep = cfg.context_separator
            return build_document_dataset(pair, doc_index, segments=True, max_segment_tokens=self.segment_limit(max_tokens),
                                          packing=cfg.segment_packing,
                                          separators=(self.src_dict.index(sep), self.tgt_dict.index(sep)))
        side_data = self.side_data(sentences, batch_size=batch_size, max_tokens=max_tokens)
        return build_document_dataset(pair, doc_index, context_size=cfg.context_size, context_sides=cfg.context_sides,
                                      position_major=bool(getattr(self.task, "hypothesis_context", True)),
                                      side_data=side_data)

    # raw text <-> model tokens: the data folder of a pretrained model (docctx-prepare
    # --pretrained) says how; else the SentencePiece model docctx-prepare trained
    @property
    def pretrained_text(self):
        """The task's :class:`~fairseq_docctx.data.pretrained.PretrainedText` (data written by
        ``docctx-prepare --pretrained``), else ``None``."""
        return getattr(self.task, "pretrained_text", None)

    def _encode_pretrained(self, sentence: str, side: str) -> torch.LongTensor:
        text = self.pretrained_text
        source = side == "source"
        d = self.src_dict if source else self.tgt_dict
        lang = self.task.cfg.source_lang if source else self.task.cfg.target_lang
        ids = d.encode_line(text.encode(sentence, lang), add_if_not_exist=False, append_eos=True).long()
        langtoks = self.task.language_tokens
        langtok = langtoks.source() if source else langtoks.target()
        if langtok is None:
            return ids
        return torch.cat([ids.new_tensor([langtok]), ids])

    def encode(self, sentence: str) -> torch.LongTensor:
        """A raw source sentence -> token ids ending in EOS. On data of a pretrained model
        (:attr:`pretrained_text`): the release's segmentation (Moses + fastBPE, or its
        SentencePiece model) and the source language token first, as ``docctx-prepare
        --pretrained`` binarized the data; else fairseq's (tokenizer, BPE or the data's
        SentencePiece model)."""
        if self.pretrained_text is None:
            return super().encode(sentence)
        return self._encode_pretrained(sentence, "source")

    def encode_target(self, sentence: str) -> torch.LongTensor:
        """A raw target sentence -> token ids ending in EOS, as the data's target sentences
        are binarized (the target language token first on data with language tokens):
        what teacher-forced scoring reads."""
        if self.pretrained_text is None:
            bpe = self.apply_bpe(self.tokenize(sentence))
            return self.tgt_dict.encode_line(bpe, add_if_not_exist=False, append_eos=True).long()
        return self._encode_pretrained(sentence, "target")

    def decode(self, tokens: torch.LongTensor) -> str:
        """Output token ids -> raw text. On data of a pretrained model the target language
        token is left out and the release's segmentation undone (SentencePiece decoded, or
        ``@@ `` removed and Moses detokenized)."""
        text = self.pretrained_text
        if text is None:
            return super().decode(tokens)
        strip = {self.tgt_dict.index(text.target_langtok)} if text.target_langtok else None
        pieces = self.tgt_dict.string(tokens, extra_symbols_to_ignore=strip)
        return text.decode(pieces, self.task.cfg.target_lang)

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
    def translate_document(self, sentences: Sequence[str], beam: int = TRANSLATE_DEFAULTS["beam"], **kwargs) -> List[str]:
        """Translate one document (a list of sentences, in order)."""
        return self.translate_documents([list(sentences)], beam=beam, **kwargs)[0]

    def translate_documents(self, documents: Sequence[Sequence[str]], beam: int = TRANSLATE_DEFAULTS["beam"],
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
        e.g. by a length check; lists of tensors or
        :class:`~fairseq_docctx.data.packed_tokens.PackedTokens`), which are then not encoded
        again. The sentences are held packed (:class:`PackedTokens`): a few bytes a token
        rather than a tensor object a sentence."""
        if tokens is None:
            tokens = [PackedTokens(self.encode(s) for s in doc) for doc in documents]
        translations = self.generate_documents(
            tokens, beam=beam, batch_size=batch_size, max_tokens=max_tokens, progress=progress,
            document_done=document_done, keep=keep,
            sentence_done=lambda hypos: self.decode(hypos[0]["tokens"]), **kwargs)
        return translations if keep else None

    def generate_documents(self, documents: Sequence[Sequence[torch.LongTensor]], beam: int = TRANSLATE_DEFAULTS["beam"],
                           batch_size: int = 16, max_tokens: Optional[int] = None,
                           progress: Optional[Callable[[int, int], None]] = None,
                           document_done: Optional[Callable[[int, List[list]], None]] = None,
                           sentence_done: Optional[Callable[[list], object]] = None,
                           keep: bool = True, **kwargs) -> Optional[List[List[list]]]:
        """Beam search over binarized documents in document order; returns fairseq's
        hypothesis lists per sentence. ``progress(sentences_done, documents_done)`` is
        called after every batch (``sentences_done``: the batch's sentences);
        ``document_done(i, hypotheses)`` as soon as document ``i`` is translated.

        A segment model (:attr:`reads_segments`) gets the documents packed into segments
        (:meth:`documents_dataset`); the task's ``inference_step`` gives back one hypothesis
        list per source sentence and rewrites the batch's ``id`` to those sentences' ids, so
        the results are gathered by sentence as for the other models; the segments decoded
        again sentence by sentence (misaligned with their source) are counted in
        :attr:`segment_fallbacks` and :attr:`segment_report`. Its search
        settings default to ``docctx-translate``'s (``lenpen`` 1, ``max_len_a`` 1.2,
        ``max_len_b`` 10: :data:`~fairseq_docctx.inference.options.TRANSLATE_DEFAULTS`), not
        to fairseq's ``max_len_b`` 200 of the checkpoint's generation settings, which would
        cut a segment longer than 200 tokens and send it to the fallback; ``kwargs`` override
        them. Other models search with the checkpoint's generation settings and ``kwargs``.

        ``sentence_done(hypotheses)``, if given, replaces each sentence's hypothesis list
        as soon as its batch is decoded (e.g. by the best translation's text), so that the
        beam's hypotheses (with their attention) are not held until the document is done.
        With ``keep=False`` nothing is returned and a document's results are dropped once
        ``document_done`` has them: memory holds the results of the open documents only."""
        lengths = [len(d) for d in documents]
        flat = PackedTokens.join(documents)
        if document_done is not None:
            for i, n in enumerate(lengths):
                if not n:
                    document_done(i, [])
        if not flat:
            return [[] for _ in documents] if keep else None
        doc_index = DocIndex([str(i) for i, n in enumerate(lengths) if n],
                             [n for n in lengths if n])
        dataset = self.documents_dataset(flat, doc_index, batch_size, max_tokens)
        gen_args = copy.deepcopy(self.cfg.generation)
        with open_dict(gen_args):
            gen_args.beam = beam
            if self.reads_segments:
                for k in ("lenpen", "max_len_a", "max_len_b"):
                    setattr(gen_args, k, TRANSLATE_DEFAULTS[k])
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
        del flat  # the dataset holds what it needs
        # the results of the sentences whose document is still open, by sentence id
        open_results, done_docs = {}, 0
        out = [[] for _ in documents] if keep else None
        for batch in batches:
            batch = utils.apply_to_sample(lambda t: t.to(self.device), batch)
            hypos = self.task.inference_step(generator, self.models, batch)
            # read after the step: a segment batch comes back rewritten into its sentences
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
                    if hasattr(self.task, "document_order"):  # the task's memory of the document
                        self.task.document_order.forget(ids_k)
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
    ``context_size=2`` or ``target_context="reference"``; a context setting other than the
    checkpoint's is a :class:`~fairseq_docctx.errors.UsageError` unless ``context_override=True``
    (then one warning line, :func:`~fairseq_docctx.inference.checkpoint.check_context_overrides`).
    """
    from . import register

    register()  # the plugin registered with fairseq: its models, safe loading
    from .inference.ctranslate2.record import EXPORT_FILE

    if os.path.isfile(os.path.join(checkpoint_dir, EXPORT_FILE)):
        _refuse_transformers_export(checkpoint_dir)
        raise CheckpointError(f"{checkpoint_dir}: a model exported by docctx-export ctranslate2, not a fairseq "
                              "checkpoint: load it with from_exported",
                              f"--path {checkpoint_dir}: a model exported by docctx-export ctranslate2, not a "
                              "fairseq checkpoint (docctx-translate decodes it with --engine ctranslate2)")
    path = checkpoint_path(checkpoint_dir, checkpoint_file)
    models, cfg, task, state, data = load_models(path, data, {"target_context": "hypothesis", **overrides})
    spm_model = spm_model or find_spm_model(data, os.path.dirname(os.path.abspath(path)))
    if spm_model is None and getattr(task, "pretrained_text", None) is None:
        _no_sentencepiece(data)
    for m in models:
        if fp16:
            m.half()
        if not cpu and torch.cuda.is_available():
            m.cuda()
    request = cb.RawInputRequest(path, state, models, data, {"draft_path": draft_path, "draft_beam": draft_beam},
                                 cpu=cpu, fp16=fp16)
    sides = [s for m in models for s in context_spec(m).sides]
    hub = DocumentHubInterface(cfg, task, models, spm_model, raw_inputs=cb.raw_input_makers(sides, request))
    if not cpu and torch.cuda.is_available():
        hub.cuda()
    return hub


def _refuse_transformers_export(folder: str) -> None:
    """A folder ``docctx-export transformers`` wrote, given where a fairseq checkpoint is read:
    one line saying what it is and what loads it."""
    from .inference.ctranslate2.record import EXPORTING_ENGINES, read_export
    from .inference.ctranslate2 import ExportError

    try:
        engine = read_export(folder, engines=EXPORTING_ENGINES).get("engine")
    except ExportError:
        return
    if engine == "transformers":
        raise CheckpointError(f"{folder}: a model exported by docctx-export transformers, not a fairseq checkpoint: "
                              "load it with transformers' AutoModelForSeq2SeqLM.from_pretrained",
                              f"--path {folder}: a model exported by docctx-export transformers, not a fairseq "
                              "checkpoint (load it with transformers' AutoModelForSeq2SeqLM.from_pretrained)")


def _no_sentencepiece(data: Optional[str]) -> None:
    """Say that the input must be tokenized already: at INFO level when the data directory's
    ``docctx.json`` records that it was prepared without SentencePiece (``docctx-prepare``
    without ``--spm-vocab-size`` / ``--spm-model``: the text is tokenized by design), as a
    warning where nothing says so (no manifest, or none beside the checkpoint)."""
    from .data.manifest import read_manifest

    try:
        manifest = read_manifest(str(data).split(":")[0]) if data else None
    except Exception:  # an unreadable manifest is reported where it is read for the model
        manifest = None
    if manifest is not None and "spm" in manifest and not manifest.get("spm"):
        logger.info("the data directory was prepared without SentencePiece: the input is read as tokenized")
    else:
        logger.warning("no SentencePiece model recorded in the data directory (docctx.json) nor "
                       "next to the checkpoint: input must be tokenized already")


# ------------------------------------------------------------------ the CTranslate2 engine
class ExportedHubInterface(DocumentHubInterface):
    """:class:`DocumentHubInterface` over a model exported by ``docctx-export ctranslate2``
    (:mod:`fairseq_docctx.inference.ctranslate2`): the same documents in, in the same
    document order, decoded by CTranslate2."""

    def __init__(self, cfg, task, models, spm_model, translator, record: dict, ct2_prefix: str = "stepwise"):
        super().__init__(cfg, task, models, spm_model)
        self.translator = translator
        self.record = record
        #: how a sentence after a target prefix is decoded (``--ct2-prefix``; a search's
        #: ``ct2_prefix=`` overrides it)
        self.ct2_prefix = self.check_prefix_mode(ct2_prefix)

    @property
    def has_target_prefix(self) -> bool:
        """Whether a sentence may be decoded after a target prefix: the model reads target
        context (a ``concat_transformer`` with ``--context-sides both`` or ``tgt``) and the
        task gives some (K above 0)."""
        from .models.document_context import DocumentContextModel

        model = self.models[0]
        return (isinstance(model, DocumentContextModel) and "tgt" in model.context_sides
                and bool(getattr(self.task.cfg, "context_size", 0)))

    def check_prefix_mode(self, mode: str) -> str:
        """``mode`` (``--ct2-prefix``), or :class:`ValueError` (one line) for a value other
        than ``stepwise`` where no sentence has a target prefix (:attr:`has_target_prefix`):
        the one-pass modes decode only what follows a prefix, so on such a model they would
        change nothing, as ``--ct2-prefix`` does not with the fairseq engine, which is refused
        alike."""
        from .inference.ctranslate2 import check_prefix_mode

        if check_prefix_mode(mode) != "stepwise" and not self.has_target_prefix:
            raise ValueError(f"--ct2-prefix {mode}: applies to a model with target context only (a "
                             "concat_transformer with --context-sides both or tgt and --context-size above 0); "
                             f"this {self.record['model']} decodes no sentence after a target prefix")
        return mode

    def build_generator(self, gen_args):
        """The CTranslate2 generator of ``gen_args``; a segment model's stand-in gets the task's
        segment rules (sentence count, length windows), which the task checks after each
        search (:meth:`~fairseq_docctx.tasks.segment_decoding.SegmentDecoding.inference_step`)."""
        from .inference.ctranslate2.generator import CTranslate2Generator

        self.task.segment_decoding.set_rules(self.models, gen_args.min_len)
        sep = getattr(self.task.cfg, "context_separator", None)
        return CTranslate2Generator(
            self.translator, self.src_dict, self.tgt_dict,
            self.src_dict.index(sep) if sep and sep in self.src_dict.indices else None,
            beam=gen_args.beam, lenpen=gen_args.lenpen, max_len_a=gen_args.max_len_a,
            max_len_b=gen_args.max_len_b, min_len=gen_args.min_len, unkpen=gen_args.unkpen,
            max_source_positions=self.record["max_source_positions"],
            max_target_positions=self.record["max_target_positions"],
            prefix=self.check_prefix_mode(gen_args.get("ct2_prefix", None) or self.ct2_prefix))


def from_exported(path: str, data: Optional[str] = None, spm_model: Optional[str] = None,
                  cpu: bool = True, threads: Optional[int] = None, ct2_prefix: str = "stepwise",
                  **overrides) -> ExportedHubInterface:
    """A model exported by ``docctx-export ctranslate2`` (the folder ``path``), decoded by
    CTranslate2 in document order as :func:`from_pretrained`'s models are. ``data``: a data
    directory whose dictionaries are those exported (default: the folder's own copies);
    ``threads``: CPU threads (default torch's); ``ct2_prefix``: how a sentence after a target
    prefix is decoded (``--ct2-prefix``:
    :data:`~fairseq_docctx.inference.ctranslate2.PREFIX_MODES`, default ``stepwise``);
    ``overrides``: task options (``context_size=2``; another context setting than the
    export's needs ``context_override=True``, as in :func:`from_pretrained`)."""
    from .inference.ctranslate2 import check_prefix_mode
    from .inference.ctranslate2.load import load_translator
    from .inference.ctranslate2.record import check_export_files, read_export

    check_prefix_mode(ct2_prefix)  # before the model is loaded
    path = os.fspath(path)
    record = read_export(path)
    check_export_files(path, record, data)
    cfg, task, model, spm_model = _exported_parts(path, record, data, spm_model, overrides)
    return ExportedHubInterface(cfg, task, [model], spm_model, load_translator(path, cpu, threads), record,
                                ct2_prefix)


def _exported_parts(path: str, record: dict, data: Optional[str], spm_model: Optional[str], overrides: dict):
    """What an exported folder's hub interface is made of: the generation settings, the task
    of its record (:func:`~fairseq_docctx.inference.ctranslate2.load.exported_task`, the
    model's own translations as target context unless ``overrides`` say), the stand-in model
    and the SentencePiece model (given, the export's copy, or the data directory's)."""
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf

    from .inference.ctranslate2.load import exported_task

    task, model, data = exported_task(path, record, data, **{"target_context": "hypothesis", **overrides})
    if spm_model is None and record.get("spm_model"):
        spm_model = os.path.join(path, record["spm_model"])
    spm_model = spm_model or find_spm_model(data)
    cfg = OmegaConf.create({"generation": OmegaConf.structured(GenerationConfig()), "tokenizer": None,
                            "bpe": None})
    return cfg, task, model, spm_model


# ------------------------------------------------------------------ the transformers engine
class TransformersHubInterface(DocumentHubInterface):
    """:class:`DocumentHubInterface` over a model exported by ``docctx-export transformers``
    (:mod:`fairseq_docctx.inference.transformers_engine`): the same documents in, in the same
    document order, decoded by ``transformers``' ``generate``."""

    def __init__(self, cfg, task, models, spm_model, hf_model, record: dict):
        super().__init__(cfg, task, models, spm_model)
        self.hf_model = hf_model
        self.record = record

    def build_generator(self, gen_args):
        """The transformers generator of ``gen_args``; a segment model's stand-in gets the task's
        segment rules (sentence count, length windows), which the task checks after each
        search (:meth:`~fairseq_docctx.tasks.segment_decoding.SegmentDecoding.inference_step`)."""
        from .inference.transformers_engine import transformers_generator

        self.task.segment_decoding.set_rules(self.models, gen_args.min_len)
        return transformers_generator(self.hf_model, self.task, self.record, gen_args.beam, lenpen=gen_args.lenpen,
                                      max_len_a=gen_args.max_len_a, max_len_b=gen_args.max_len_b,
                                      min_len=gen_args.min_len, unkpen=gen_args.unkpen)


def from_transformers(path: str, data: Optional[str] = None, spm_model: Optional[str] = None,
                      cpu: bool = True, **overrides) -> TransformersHubInterface:
    """A model exported by ``docctx-export transformers`` (the folder ``path``), decoded by
    ``transformers``' ``generate`` in document order as :func:`from_pretrained`'s models are.
    ``data``: a data directory whose dictionaries are those exported (default: the folder's
    own copies); ``overrides``: task options (``context_size=2``; another context setting
    than the export's needs ``context_override=True``, as in :func:`from_pretrained`)."""
    from .inference.transformers_engine import load_hf_model, read_transformers_export

    path = os.fspath(path)
    record = read_transformers_export(path, data)
    cfg, task, model, spm_model = _exported_parts(path, record, data, spm_model, overrides)
    return TransformersHubInterface(cfg, task, [model], spm_model, load_hf_model(path, cpu), record)


def export_ctranslate2(path: str, outdir: str, data: Optional[str] = None,
                       quantization: Optional[str] = None, force: bool = False) -> dict:
    """``docctx-export ctranslate2``: the checkpoint ``path`` (``transformer``,
    ``concat_transformer`` or ``doc2doc_transformer``), loaded as :func:`from_pretrained` loads it (``data``: its data
    directory), written as a CTranslate2 model folder ``outdir``
    (:func:`fairseq_docctx.inference.ctranslate2.export.export`). Returns the record written."""
    from .inference.ctranslate2.export import export
    from .inference.ctranslate2.exportable import check_architecture

    path = os.fspath(path)
    hub = _exporting(path, outdir, data, force, check_architecture)
    return export(hub.models[0], hub.task, path, os.fspath(outdir), spm_model=hub.spm_model,
                  quantization=quantization, force=force)


def _exporting(path: str, outdir: str, data: Optional[str], force: bool, check_architecture):
    """The checkpoint ``path`` an export writes, loaded as :func:`from_pretrained` loads it,
    once its architecture (``check_architecture(arch, path)``: the export's own list) and
    ``outdir`` (:func:`~fairseq_docctx.inference.ctranslate2.export.check_outdir`) are
    accepted, both before the model is loaded."""
    from .inference.ctranslate2.export import check_outdir, files_read

    state = load_checkpoint_state(path)
    cfg = state.get("cfg")
    model_cfg = cfg.get("model") if cfg is not None else None
    model_cfg = model_cfg if model_cfg is not None else state.get("args")
    check_architecture(getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None), path)
    check_outdir(os.fspath(outdir), force, files_read(path, data))
    del state
    return from_pretrained(path, data=data)


def export_transformers(path: str, outdir: str, data: Optional[str] = None, force: bool = False) -> dict:
    """``docctx-export transformers``: the checkpoint ``path`` (``transformer``,
    ``concat_transformer`` or ``doc2doc_transformer``), loaded as :func:`from_pretrained` loads
    it (``data``: its data directory), written as a ``transformers`` model folder ``outdir``
    (:func:`fairseq_docctx.inference.transformers_export.export.export`). Returns the record written."""
    from .inference.transformers_export.classes import check_architecture
    from .inference.transformers_export.export import export

    path = os.fspath(path)
    hub = _exporting(path, outdir, data, force, check_architecture)
    return export(hub.models[0], hub.task, path, os.fspath(outdir), spm_model=hub.spm_model, force=force)
