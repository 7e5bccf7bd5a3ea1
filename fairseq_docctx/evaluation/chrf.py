"""chrF and chrF++ with sacrebleu, corpus level and per document, over sentences or whole
documents.

chrF (Popović 2015) is the F-score (β = 2) of character n-grams (n ≤ 6); chrF++ (Popović
2017) adds word n-grams (n ≤ 2: ``--word-order 2``). Both are sacreBLEU's ``CHRF`` as it is
(whitespace ignored unless ``--whitespace``, case kept unless ``--lowercase``); the corpus
score is computed from the statistics summed over the units. ``--document`` scores every
document's sentences joined with a space as one unit (signature ``level:doc``), ``--both``
prints both levels. Every reference the input gives is used.
"""
from typing import Dict

from sacrebleu.metrics import CHRF

from fairseq_docctx.evaluation.bleu import corpus_and_documents, metric_key, scored_sides
from fairseq_docctx.evaluation.io import Corpus


def chrf_metric(*, char_order: int = CHRF.CHAR_ORDER, word_order: int = 0, beta: int = CHRF.BETA,
                lowercase: bool = False, whitespace: bool = False) -> CHRF:
    return CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase,
                whitespace=whitespace)


def chrf_scores(corpus: Corpus, *, document: bool = False, per_document: bool = True, **options) -> Dict:
    """``{"score", "name" (chrF2 / chrF2++), "signature", "document", "text", "per_document"}``;
    ``options``: those of :func:`chrf_metric`."""
    hyp, refs = scored_sides(corpus)
    metric = chrf_metric(**options)
    score, sig, per = corpus_and_documents(metric, hyp, refs, corpus.doc_ids, document=document,
                                           per_document=per_document)
    out = {"score": score.score, "name": score.name, "signature": sig, "document": document,
           "text": str(score)}
    if per is not None:
        out["per_document"] = per
    return out


def chrf_key(word_order: int, document: bool) -> str:
    return metric_key("chrf" + ("++" if word_order > 0 else ""), document=document)


def format_chrf(res: Dict) -> str:
    label = ("d-" if res["document"] else "") + res["name"]
    return f"{label} = {res['score']:.2f}\n  signature: {res['name']}|{res['signature']}"
