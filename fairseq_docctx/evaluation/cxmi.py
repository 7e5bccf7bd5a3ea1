"""Context usage: conditional cross-mutual information (CXMI, Fernandes et al. 2021).

For every sentence of a corpus the reference translation is scored three times by the same
model, teacher-forced (:class:`~.scoring.ModelScorer`):

* with its true context: the ``K`` previous sentences of its document (source, and the
  reference target sentences for models with target context);
* without context (context size 0 at inference — every model here can run so, since
  document-initial sentences have no context during training either);
* with a random context: ``n`` consecutive sentences (source and target) of another document,
  drawn with a generator seeded with the seed and the sentence's corpus index, where ``n`` is
  the number of true context sentences
  (:class:`~fairseq_docctx.data.context_variants.RandomContext`: the same draw as
  ``fairseq-train --validate-cxmi``'s, so its validation figure is this module's on the same
  split and seed).

``CXMI = mean over target tokens of log p(y_t | x, C) - log p(y_t | x)`` (nats per token);
``cxmi_random`` is the same with the random context and ``true_vs_random`` their difference.
A model that ignores its context gets exactly 0; the values are also reported over the
sentences that have context (``with_context``: document-initial sentences excluded).

A segment model (``--doc-mode segments``: ``g_transformer``, ``doc2doc_transformer``) scores
the sentence with its context inside one segment against the sentence as a one-sentence
segment (:class:`~.scoring.ModelScorer`); its true context is, by default, every previous
sentence of the document that fits with the sentence in a segment of the model's
``--max-segment-tokens`` (:meth:`~.scoring.ModelScorer.segment_context`), at most
``context_size`` sentences when that is given; the random context has as many sentences
(cut to what fits, nearest first, the same way).
"""
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from ..data.context_variants import RandomContext

Doc = List[torch.Tensor]


def _split_index(task, split: str):
    """The document index of a loaded split: the dataset's; a segment dataset (``--doc-mode
    segments``) keeps its plan only, so the index is read again from the data directory."""
    ds = task.dataset(split)
    index = getattr(ds, "docs", None)
    if index is None and hasattr(ds, "plan"):
        from fairseq import utils

        from ..data.doc_index import load_doc_index

        index = load_doc_index(utils.split_paths(task.cfg.data)[0], split, task.cfg.source_lang,
                               task.cfg.target_lang, len(ds.pair), missing="--doc-mode sentences")
    return index


def _docs_from_split(scorer, split: str):
    """(source documents, target documents) of a binarized split, as token tensors."""
    task = scorer.task
    task.load_dataset(split)
    ds = task.dataset(split)
    pair, index = getattr(ds, "pair", ds), _split_index(task, split)
    if pair.tgt is None:
        raise ValueError(f"split {split} has no target side: CXMI scores references")
    if index is None:
        raise ValueError(f"split {split} has no document index")
    src, tgt = [], []
    for off, n in zip(index.offsets.tolist(), index.lengths.tolist()):
        src.append([pair.src[i] for i in range(off, off + n)])
        tgt.append([pair.tgt[i] for i in range(off, off + n)])
    return src, tgt


def scorer_documents(scorer, split: str = "test", input: Optional[str] = None, input_format: str = "auto"):
    """``(source documents, target documents, document ids)`` as token tensors: of the raw
    parallel documents ``input`` (a prefix in any ``docctx-prepare`` format, or one WMT
    2021+ XML / JSON Lines file) if given, else of ``split`` of the data directory the
    model was loaded with."""
    if input:
        from ..data.readers import read_parallel

        source_lang, target_lang = scorer.languages
        if source_lang is None or target_lang is None:
            raise ValueError(f"--input {input}: give the languages of its files (-s/--source-lang, -t/--target-lang)")
        par = read_parallel(input, source_lang, target_lang, input_format)
        src = [[scorer.encode_source(s) for s in d.sentences] for d in par.src]
        tgt = [[scorer.encode_target(s) for s in d.sentences] for d in par.tgt]
        return src, tgt, [d.doc_id for d in par.src]
    if getattr(scorer, "task", None) is None:
        raise ValueError("a transformers model has no binarized split: give its documents with --input")
    src, tgt = _docs_from_split(scorer, split)
    return src, tgt, list(_split_index(scorer.task, split).doc_ids)


def cxmi_documents(src_docs: Sequence[Doc], tgt_docs: Sequence[Doc], context_size: int, seed: int = 1,
                   fit: Optional[Callable[[Doc, Doc], int]] = None):
    """Three lists of scoring documents (true, none, random context), one per sentence, and
    the number of true context sentences of each sentence. ``fit(src, tgt)``: how many of
    the context sentences of a scoring document (all but its last pair) the model reads (a
    segment model's :meth:`~.scoring.ModelScorer.segment_context`); the true context is cut
    to them. The random context of sentence ``j`` of document ``d`` is
    :class:`~fairseq_docctx.data.context_variants.RandomContext`'s for the sentence's corpus
    index (the documents' sentences numbered in order), the one ``fairseq-train
    --validate-cxmi`` scores on the same split with the same seed."""
    random_context = RandomContext([len(d) for d in src_docs], seed)
    true, none, rand, n_ctx = [], [], [], []
    for d, (s, t) in enumerate(zip(src_docs, tgt_docs)):
        for j in range(len(s)):
            n = min(j, context_size)
            if fit is not None and n:
                n = fit(s[j - n: j + 1], t[j - n: j + 1])
            true.append((s[j - n: j + 1], t[j - n: j + 1]))
            none.append(([s[j]], [t[j]]))
            n_ctx.append(n)
            drawn = random_context.draw(int(random_context.offsets[d]) + j, n)
            if drawn is None:
                rand.append(none[-1])
                continue
            start, m = drawn
            o = int(random_context.sent_doc[start])
            r = start - int(random_context.offsets[o])
            rand.append((list(src_docs[o][r: r + m]) + [s[j]], list(tgt_docs[o][r: r + m]) + [t[j]]))
    return true, none, rand, np.array(n_ctx)


def _summary(true_lp, none_lp, rand_lp, mask) -> dict:
    tokens = [true_lp[i].size for i in range(len(true_lp)) if mask[i]]
    T = int(sum(tokens))
    if T == 0:
        return {"sentences": 0, "tokens": 0}
    t = sum(float(true_lp[i].sum()) for i in range(len(true_lp)) if mask[i])
    n = sum(float(none_lp[i].sum()) for i in range(len(none_lp)) if mask[i])
    r = sum(float(rand_lp[i].sum()) for i in range(len(rand_lp)) if mask[i])
    return {
        "sentences": int(np.sum(mask)), "tokens": T,
        "logprob_true_context": t / T, "logprob_no_context": n / T, "logprob_random_context": r / T,
        "cxmi": (t - n) / T, "cxmi_random": (r - n) / T, "true_vs_random": (t - r) / T,
    }


def compute_cxmi(scorer, src_docs: Sequence[Doc], tgt_docs: Sequence[Doc], seed: int = 1,
                 context_size: Optional[int] = None) -> dict:
    """CXMI of ``scorer``'s model on the given token documents (see the module doc).
    ``context_size`` defaults to the model's (at least 1, so that the scoring documents
    carry context even for a model without any: it then scores them alike, CXMI 0); a
    segment model's: every previous sentence that fits in its segment."""
    segments = bool(getattr(scorer, "reads_segments", False))
    fit = scorer.segment_context if segments else None
    if context_size is not None:
        K = context_size
    elif segments:
        K = max([len(d) for d in src_docs] + [1])
    else:
        K = max(scorer.context_size, 1)
    true, none, rand, n_ctx = cxmi_documents(src_docs, tgt_docs, K, seed, fit=fit)
    for name, docs in (("true", true), ("random", rand)):
        for (s, t), (s0, t0) in zip(docs, none):
            assert torch.equal(t[-1], t0[0]), name  # the scored sentence is the same
    t_lp = [x.token_logprobs for x in scorer.score_documents(true)]
    n_lp = [x.token_logprobs for x in scorer.score_documents(none)]
    r_lp = [x.token_logprobs for x in scorer.score_documents(rand)]
    rep = _summary(t_lp, n_lp, r_lp, np.ones(len(t_lp), dtype=bool))
    rep["with_context"] = _summary(t_lp, n_lp, r_lp, n_ctx > 0)
    rep.update(context_size=K, model_context_size=scorer.context_size,
               model_reads_context=scorer.reads_context or segments, seed=seed)
    if segments:
        rep.update(segment_tokens=scorer.segment_limit, mean_context_sentences=float(n_ctx.mean()) if len(n_ctx) else 0.0)
    return rep


def cxmi_split(scorer, split: str = "test", seed: int = 1) -> dict:
    """CXMI on a split of the binarized data directory the model was loaded with."""
    if getattr(scorer, "task", None) is None:
        raise ValueError("a transformers model has no binarized split: give its documents with --input")
    src, tgt = _docs_from_split(scorer, split)
    rep = compute_cxmi(scorer, src, tgt, seed=seed)
    rep["split"] = split
    return rep


def format_report(rep: dict) -> str:
    def block(r, indent=""):
        if not r.get("tokens"):
            return [indent + "no tokens"]
        return [
            f"{indent}sentences {r['sentences']}, target tokens {r['tokens']}",
            f"{indent}mean log-prob per token: true context {r['logprob_true_context']:.4f}, "
            f"no context {r['logprob_no_context']:.4f}, random context {r['logprob_random_context']:.4f}",
            f"{indent}CXMI (true - none)       {r['cxmi']:+.4f} nats/token",
            f"{indent}CXMI (random - none)     {r['cxmi_random']:+.4f}",
            f"{indent}true - random            {r['true_vs_random']:+.4f}",
        ]

    if "segment_tokens" in rep:  # a segment model: its context is inside the segment
        lines = [f"segment model: context in segments of at most {rep['segment_tokens']} tokens, "
                 f"{rep['mean_context_sentences']:.2f} context sentences per sentence on average "
                 f"(at most {rep['context_size']}), random-context seed {rep['seed']}"]
    else:
        lines = [f"context size {rep['context_size']} (model: {rep['model_context_size']}, reads context: "
                 f"{rep['model_reads_context']}), random-context seed {rep['seed']}"]
    lines += block(rep)
    lines += ["sentences with context only:"] + block(rep["with_context"], "  ")
    return "\n".join(lines)
