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
import logging
import os
from typing import Callable, List, Optional, Sequence

import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import LanguagePairDataset
from fairseq.hub_utils import GeneratorHubInterface
from omegaconf import open_dict

from .data.doc_index import DocIndex
from .data.document_dataset import DocumentPairDataset

logger = logging.getLogger(__name__)


def find_spm_model(*dirs) -> Optional[str]:
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "spm.model")):
            return os.path.join(d, "spm.model")
    return None


class DocumentHubInterface(GeneratorHubInterface):
    """fairseq's hub interface plus :meth:`translate_document` / :meth:`translate_documents`."""

    def __init__(self, cfg, task, models, spm_model: Optional[str] = None):
        super().__init__(cfg, task, models)
        self.spm = None
        if spm_model is not None:
            import sentencepiece

            self.spm = sentencepiece.SentencePieceProcessor(model_file=spm_model)

    # raw text <-> model tokens: the SentencePiece model docctx-prepare trained
    def apply_bpe(self, sentence: str) -> str:
        if self.spm is None:
            return super().apply_bpe(sentence)
        return " ".join(self.spm.encode(sentence.strip(), out_type=str))

    def remove_bpe(self, sentence: str) -> str:
        if self.spm is None:
            return super().remove_bpe(sentence)
        return self.spm.decode(sentence.split())

    # ------------------------------------------------------------------ documents
    def translate_document(self, sentences: Sequence[str], beam: int = 5, **kwargs) -> List[str]:
        """Translate one document (a list of sentences, in order)."""
        return self.translate_documents([list(sentences)], beam=beam, **kwargs)[0]

    def translate_documents(self, documents: Sequence[Sequence[str]], beam: int = 5,
                            batch_size: int = 16, max_tokens: Optional[int] = None,
                            progress: Optional[Callable[[int, int], None]] = None,
                            **kwargs) -> List[List[str]]:
        """Translate documents (lists of raw sentences); returns detokenized translations,
        document by document, sentence by sentence, in the input order."""
        tokens = [[self.encode(s) for s in doc] for doc in documents]
        hypos = self.generate_documents(tokens, beam=beam, batch_size=batch_size,
                                        max_tokens=max_tokens, progress=progress, **kwargs)
        return [[self.decode(h[0]["tokens"]) for h in doc] for doc in hypos]

    def generate_documents(self, documents: Sequence[Sequence[torch.LongTensor]], beam: int = 5,
                           batch_size: int = 16, max_tokens: Optional[int] = None,
                           progress: Optional[Callable[[int, int], None]] = None,
                           **kwargs) -> List[List[list]]:
        """Beam search over binarized documents in document order; returns fairseq's
        hypothesis lists per sentence. ``progress(sentences_done, documents_done)`` is
        called after every batch."""
        lengths = [len(d) for d in documents]
        flat = [t for d in documents for t in d]
        if not flat:
            return [[] for _ in documents]
        doc_index = DocIndex([str(i) for i, n in enumerate(lengths) if n],
                             [n for n in lengths if n])
        pair = LanguagePairDataset(flat, [t.numel() for t in flat], self.src_dict,
                                   tgt_dict=self.tgt_dict, shuffle=False)
        cfg = self.task.cfg
        dataset = DocumentPairDataset(pair, doc_index, cfg.context_size, cfg.context_sides,
                                      shuffle=False, position_major=True)
        gen_args = copy.deepcopy(self.cfg.generation)
        with open_dict(gen_args):
            gen_args.beam = beam
            for k, v in kwargs.items():
                setattr(gen_args, k, v)
        generator = self.task.build_generator(self.models, gen_args)
        batches = self.task.get_batch_iterator(
            dataset=dataset, max_tokens=max_tokens, max_sentences=batch_size,
            max_positions=self.max_positions, disable_iterator_cache=True,
        ).next_epoch_itr(shuffle=False)
        last_of_doc = set((doc_index.offsets + doc_index.lengths - 1).tolist())
        results, done_docs = [None] * len(flat), 0
        for batch in batches:
            batch = utils.apply_to_sample(lambda t: t.to(self.device), batch)
            hypos = self.task.inference_step(generator, self.models, batch)
            ids = batch["id"].tolist()
            for i, h in zip(ids, hypos):
                results[i] = h
            done_docs += sum(i in last_of_doc for i in ids)
            if progress is not None:
                progress(len(ids), done_docs)
        out, start = [], 0
        for n in lengths:
            out.append(results[start : start + n])
            start += n
        return out


def from_pretrained(checkpoint_dir: str, checkpoint_file: str = "checkpoint_best.pt",
                    data: Optional[str] = None, spm_model: Optional[str] = None,
                    cpu: bool = True, fp16: bool = False, **overrides) -> DocumentHubInterface:
    """Load a checkpoint (directory + file name, or a path to the ``.pt`` itself).

    ``data``: the data directory with the dictionaries (default: the checkpoint directory if
    it holds ``dict.*.txt``, else the ``data`` the model was trained on). ``spm_model``:
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
    if data is None:
        if glob.glob(os.path.join(ckpt_dir, "dict.*.txt")):
            data = ckpt_dir
        else:
            state = checkpoint_utils.load_checkpoint_to_cpu(path)
            data = state["cfg"]["task"]["data"]
            if not os.path.isdir(data):
                raise FileNotFoundError(
                    f"the dictionaries of {path} are not found: the model was trained on "
                    f"'{data}'; pass data=<directory with dict.*.txt>"
                )
    arg_overrides = {"data": data, "target_context": "hypothesis", **overrides}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=arg_overrides)
    spm_model = spm_model or find_spm_model(data, ckpt_dir)
    if spm_model is None:
        logger.warning("no spm.model next to the data or checkpoint: input must be tokenized already")
    for m in models:
        if fp16:
            m.half()
        if not cpu and torch.cuda.is_available():
            m.cuda()
    hub = DocumentHubInterface(cfg, task, models, spm_model)
    if not cpu and torch.cuda.is_available():
        hub.cuda()
    return hub
