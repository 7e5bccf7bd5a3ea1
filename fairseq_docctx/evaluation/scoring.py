"""Teacher-forced scoring of sentences in their document context with a trained model.

Shared by the contrastive test suites (:mod:`.contrastive`) and CXMI (:mod:`.cxmi`).

A unit of scoring is a small *document*: the context sentences (source and target, in
document order) followed by the sentence to score. The documents are flattened into one
sentence-level :class:`~fairseq.data.LanguagePairDataset`, indexed with a
:class:`~fairseq_docctx.data.doc_index.DocIndex`, and wrapped in the task's
:class:`~fairseq_docctx.data.document_dataset.DocumentPairDataset`
(:func:`~fairseq_docctx.data.dataset_builder.build_document_dataset`), so every batch carries
``net_input["context"]`` exactly as in training (the model's own ``--context-size`` and
``--context-sides``; the target context is the given reference, teacher-forced; a side whose
sentences raw input lacks, e.g. the drafts MHT reads, comes from its raw-input hook as at test
time: :meth:`~fairseq_docctx.hub.DocumentHubInterface.side_data`). Only the last sentence of
each document is scored, many documents per batch. Models
that do not read context get it removed (:func:`~fairseq_docctx.models.document_context.sample_for_model`),
i.e. they are scored at sentence level.

A segment model (a checkpoint trained with ``--doc-mode segments``: ``g_transformer``,
``doc2doc_transformer``) reads its context inside its rows: each scoring document is then ONE
segment, its context sentences and the sentence to score joined by the separator on both
sides (``s_1 <sep> ... <sep> s_n </s>``, :mod:`fairseq_docctx.data.segments`), scored
teacher-forced in one forward pass, and only the tokens of the last group (those after the
last separator of the target, its final </s> included) count. The context kept is the
nearest sentences that fit, with the scored sentence, in a segment of the model's
``--max-segment-tokens`` on both sides (:meth:`ModelScorer.segment_context`): the segments
the model was trained on.
"""
import logging
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset

from ..data.doc_index import DocIndex
from ..data.dataset_builder import build_document_dataset, one_segment_per_document
from ..data.segments import SegmentBudget

# (source sentences, target sentences) of one document; the last pair is scored
TokenDocument = Tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]


@dataclass
class SentenceScore:
    """Teacher-forced score of one sentence: per-token log-probabilities (natural log,
    EOS included) and their sum."""

    token_logprobs: np.ndarray

    @property
    def logprob(self) -> float:
        return float(self.token_logprobs.sum())

    @property
    def ntokens(self) -> int:
        return int(self.token_logprobs.size)


class ModelScorer:
    """Scores target sentences given their source and context with one trained model.

    Build it with :func:`load_scorer` (a checkpoint) or directly from a hub interface
    (:func:`fairseq_docctx.hub.from_pretrained`).
    """

    def __init__(self, hub, max_tokens: int = 4000, batch_size: int = 64):
        self.hub = hub
        self.task = hub.task
        self.model = hub.models[0]
        self.model.eval()
        self.src_dict, self.tgt_dict = self.task.source_dictionary, self.task.target_dictionary
        self.max_tokens = max_tokens
        self.batch_size = batch_size

    @property
    def context_size(self) -> int:
        """The K the model reads (its context spec, set when the task built it); the task's
        ``--context-size`` for a sentence-level model."""
        from ..models.document_context import context_spec

        spec = context_spec(self.model)
        return int(spec.size) if spec.reads_context and spec.size is not None else int(self.task.cfg.context_size)

    @property
    def context_sides(self) -> str:
        return str(self.task.cfg.context_sides)

    @property
    def languages(self) -> Tuple[str, str]:
        """The model's (source, target) languages, as the files of a test set name them."""
        return self.task.cfg.source_lang, self.task.cfg.target_lang

    @property
    def reads_segments(self) -> bool:
        """Whether the model translates segments (``--doc-mode segments``): its context is
        scored inside one segment with the sentence (see the module doc)."""
        return bool(getattr(self.task, "segments", False))

    @property
    def segment_limit(self) -> int:
        """The most tokens of a scoring segment on either side (the hub's
        :meth:`~fairseq_docctx.hub.DocumentHubInterface.segment_limit` under ``max_tokens``)."""
        return self.hub.segment_limit(self.max_tokens)

    def segment_context(self, src: Sequence[torch.Tensor], tgt: Sequence[torch.Tensor]) -> int:
        """How many of a scoring document's context sentences (all but the last pair) a
        segment model reads: the nearest ones that fit, with the scored sentence, in one
        segment under :attr:`segment_limit` and the checkpoint's ``--segment-packing``
        (:class:`~fairseq_docctx.data.segments.SegmentBudget`, both sides counted). The
        scored sentence alone is always a segment, however long."""
        budget = SegmentBudget(self.segment_limit, str(self.task.cfg.segment_packing))
        budget.add(int(src[-1].numel()), int(tgt[-1].numel()))
        kept = 0
        for s, t in zip(reversed(src[:-1]), reversed(tgt[:-1])):
            if not budget.fits(int(s.numel()), int(t.numel())):
                break
            budget.add(int(s.numel()), int(t.numel()))
            kept += 1
        return kept

    @property
    def reads_context(self) -> bool:
        from ..models.document_context import reads_context

        return reads_context(self.model) and self.task.uses_context

    # ------------------------------------------------------------------ text
    def encode_source(self, sentence: str) -> torch.Tensor:
        return self.hub.encode(sentence)

    def encode_target(self, sentence: str) -> torch.Tensor:
        """Raw target text -> token ids ending in EOS (SentencePiece applied if the data has
        a model; on data of a pretrained model its segmentation and the target language token,
        :meth:`~fairseq_docctx.hub.DocumentHubInterface.encode_target`; otherwise the text
        must already be tokenized)."""
        return self.hub.encode_target(sentence)

    # --------------------------------------------------------------- scoring
    def _dataset(self, documents: Sequence[TokenDocument]):
        src, tgt, lengths = [], [], []
        for d, (s, t) in enumerate(documents):
            if len(s) != len(t) or len(s) == 0:
                raise ValueError(f"document {d}: {len(s)} source and {len(t)} target sentences "
                                 "(need the same number, at least one)")
            if self.reads_segments:  # the context that fits in the segment
                n = len(s) - 1 - self.segment_context(s, t)
                s, t = s[n:], t[n:]
            src.extend(s)
            tgt.extend(t)
            lengths.append(len(s))
        cfg = self.task.cfg
        pair = LanguagePairDataset(
            src, np.array([x.numel() for x in src]), self.src_dict,
            tgt, np.array([x.numel() for x in tgt]), self.tgt_dict,
            left_pad_source=cfg.left_pad_source, left_pad_target=cfg.left_pad_target,
            shuffle=False,
        )
        index = DocIndex([str(i) for i in range(len(lengths))], lengths)
        if self.reads_segments:  # one segment a document; its id is the document's position
            sep = cfg.context_separator
            plan = one_segment_per_document(index, self.segment_limit, self.task.cfg.segment_packing)
            return build_document_dataset(pair, index, segments=True, plan=plan,
                                          separators=(self.src_dict.index(sep), self.tgt_dict.index(sep))), None
        # the sides raw input lacks (e.g. MHT's drafts of every source sentence), made as at test time
        side_data = self.hub.side_data(src, batch_size=self.batch_size, max_tokens=self.max_tokens)
        ds = build_document_dataset(pair, index, context_size=cfg.context_size, context_sides=cfg.context_sides,
                                    side_data=side_data)
        last = (index.offsets + index.lengths - 1).astype(np.int64)
        return ds, last

    def batches(self, documents: Sequence[TokenDocument]):
        """Yield ``(positions, sample)``: the documents (positions in ``documents``) a batch
        scores and the collated batch (with ``net_input["context"]`` when the task uses
        context). Documents are grouped by length; a batch holds at most ``batch_size``
        scored sentences and ``max_tokens`` padded tokens (context tables included)."""
        ds, last = self._dataset(documents)
        if last is None:  # segments: one row a document
            for b in ds.batch_by_size(ds.ordered_indices(), max_tokens=self.max_tokens,
                                      max_sentences=self.batch_size):
                sample = ds.collater([ds[int(i)] for i in b])
                yield sample["id"].tolist(), sample
            return
        order = np.lexsort((ds.src_sizes[last], ds.tgt_sizes[last]))
        pos_of = {int(i): p for p, i in enumerate(last)}
        for b in ds.batch_by_size(last[order], max_tokens=self.max_tokens,
                                  max_sentences=self.batch_size):
            sample = ds.collater([ds[int(i)] for i in b])
            yield [pos_of[int(i)] for i in sample["id"].tolist()], sample

    def model_sample(self, sample):
        """The batch as the model reads it: the context removed for a model that reads none,
        mBART-25's language tokens placed as the task trains."""
        from ..models.document_context import sample_for_model

        sample = sample_for_model(sample, self.model)
        langtoks = getattr(self.task, "language_tokens", None)
        return langtoks.place(sample) if langtoks is not None else sample

    def target_rows(self, sample) -> List[np.ndarray]:
        """Per-token log-probabilities of every row's target tokens (padding left out), from
        the fairseq model."""
        from ..models.document_context import target_logprobs

        model = self.model
        device = next(model.parameters()).device
        sample = utils.move_to_cuda(sample, device=device) if device.type == "cuda" else sample
        net_output = model(**sample["net_input"])
        tok, mask = target_logprobs(model, net_output, sample, self.tgt_dict.pad())
        return [tok[i][mask[i]].cpu().numpy() for i in range(tok.size(0))]

    @torch.no_grad()
    def score_sample(self, sample) -> List[np.ndarray]:
        """Per-token target log-probabilities of every row of a collated batch (of a segment
        model: of the tokens of every row's last group only)."""
        sample = self.model_sample(sample)
        rows = self.target_rows(sample)
        if not self.reads_segments:
            return rows
        sep = self.tgt_dict.index(self.task.cfg.context_separator)
        pad = self.tgt_dict.pad()
        out = []
        for target, lp in zip(sample["target"].cpu(), rows):
            seps = (target[target.ne(pad)] == sep).nonzero(as_tuple=False).view(-1)
            out.append(lp[int(seps[-1]) + 1:] if seps.numel() else lp)
        return out

    def score_documents(self, documents: Sequence[TokenDocument]) -> List[SentenceScore]:
        """Score the last target sentence of every document given the document's earlier
        sentences as context (as many as the model's ``--context-size``; a segment model:
        as many as fit in its segment, :meth:`segment_context`)."""
        out: List[Optional[SentenceScore]] = [None] * len(documents)
        for positions, sample in self.batches(documents):
            for p, lp in zip(positions, self.score_sample(sample)):
                out[p] = SentenceScore(lp)
        return out


def load_scorer(path: str, data: Optional[str] = None, spm_model: Optional[str] = None,
                context_size: Optional[int] = None, cpu: bool = True,
                max_tokens: int = 4000, batch_size: int = 64, context_override: bool = False) -> ModelScorer:
    """Load a checkpoint the way ``docctx-translate`` does (safe loading, task
    ``document_translation``, dictionaries of ``data`` or of the training data, the
    SentencePiece model recorded in the data directory's ``docctx.json``). A checkpoint that
    cannot be used raises :class:`fairseq_docctx.hub.CheckpointError`; a ``context_size``
    other than the checkpoint's a :class:`~fairseq_docctx.errors.UsageError` unless
    ``context_override`` (the task's ``--context-override``)."""
    from ..hub import from_pretrained

    overrides = {}
    if context_size is not None:
        overrides["context_size"] = context_size
    if context_override:
        overrides["context_override"] = True
    hub = from_pretrained(path, data=data, spm_model=spm_model, cpu=cpu, **overrides)
    return ModelScorer(hub, max_tokens=max_tokens, batch_size=batch_size)


def quiet_logs():
    """Command-line use: fairseq's and matplotlib's INFO/DEBUG logs off."""
    for name in ("fairseq", "fairseq_docctx", "fairseq_cli", "matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)
