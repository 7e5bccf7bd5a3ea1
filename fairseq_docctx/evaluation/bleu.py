"""BLEU with sacrebleu, corpus level and per document, over sentences or whole documents.

* **detokenized** (default): sacrebleu on the text as given, with its own tokenizer
  (``--tokenize``, default ``13a``) — the standard, comparable score.
* **tokenized** ("multi-bleu style", what most document-level papers report): both sides are
  first tokenized with sacrebleu's tokenizer ``--pretokenize`` (default ``13a``; ``intl``,
  ``char``, ``zh``, ... also work), and the resulting tokens are scored by sacrebleu with
  ``tokenize='none'`` — i.e. BLEU over whitespace tokens of tokenized text, as
  ``multi-bleu.perl`` computes on Moses-tokenized text. The signature's ``tok:none`` is
  followed by ``|pretok:NAME`` to mark it; multi-bleu.perl itself has no smoothing
  (``--smooth-method none``), sacrebleu's default is ``exp``.
* **document level** (``--document``, "d-BLEU", Liu et al. 2020, §4; the usual score of
  document-level MT since): each document's sentences are joined with a space into one
  segment (its references likewise) and sacrebleu's corpus BLEU is computed over the
  documents, so n-grams may cross sentence boundaries and the brevity penalty is the whole
  test set's. The signature carries ``level:doc``; ``--both`` prints sentence-level BLEU beside.

``--lowercase`` lowercases both sides (``case:lc`` in the signature). A document's BLEU is
corpus BLEU over that document's sentences (document level: of its one joined segment) with
the same settings. Every reference the input gives is used (``nrefs`` in the signature).
"""
from typing import Dict, List, Sequence

from sacrebleu.metrics import BLEU

from fairseq_docctx.evaluation.io import Corpus, ScoreInputError, add_input_args, corpus_from_args, emit, run_command

SMOOTH = ("exp", "floor", "add-k", "none")
#: signature field marking a score over joined documents
LEVEL_FIELD = "level"


def _pretokenizer(name: str):
    return BLEU(tokenize=name).tokenizer


def scored_sides(corpus: Corpus, pretokenize=None):
    """``(hypothesis documents, [reference documents, ...])`` of a corpus, every sentence
    tokenized with sacrebleu's tokenizer ``pretokenize`` if given."""
    if corpus.ref is None:
        raise ValueError("this metric needs references")
    hyp, refs = corpus.hyp, corpus.references
    if pretokenize:
        tok = _pretokenizer(pretokenize)
        hyp = [[tok(s) for s in d] for d in hyp]
        refs = [[[tok(s) for s in d] for d in r] for r in refs]
    return hyp, refs


def segments(docs: Sequence[Sequence[str]], document: bool) -> List[str]:
    """The units a corpus score is computed over: every sentence, or (``document``) every
    document's sentences joined with a space into one segment."""
    if document:
        return [" ".join(d) for d in docs]
    return [s for d in docs for s in d]


def corpus_and_documents(metric, hyp, refs, doc_ids, *, document: bool, per_document: bool = True):
    """sacreBLEU's ``metric`` over the whole corpus and per document: ``(score, signature,
    per_document)``; ``document``: over joined documents, the signature marked ``level:doc``."""
    score = metric.corpus_score(segments(hyp, document), [segments(r, document) for r in refs])
    sig = metric.get_signature()
    if document:
        sig.update(LEVEL_FIELD, "doc")
    per = None
    if per_document:
        per = {d: metric.corpus_score(segments([h], document), [segments([r[k]], document) for r in refs]).score
               for k, (d, h) in enumerate(zip(doc_ids, hyp))}
    return score, sig.format(), per


def bleu_metric(*, tokenized: bool = False, tokenize: str = "13a", lowercase: bool = False,
                smooth_method: str = "exp") -> BLEU:
    # force: tokenized text is intended here, no "forgot to detokenize" warning
    return BLEU(tokenize="none" if tokenized else tokenize, lowercase=lowercase,
                smooth_method=smooth_method, force=tokenized)


def bleu_scores(corpus: Corpus, *, tokenized: bool = False, pretokenize: str = "13a",
                tokenize: str = "13a", lowercase: bool = False, smooth_method: str = "exp",
                per_document: bool = True, document: bool = False) -> Dict:
    """``{"score", "signature", "tokenized", "document", "text", "per_document": {doc_id:
    score}, ...}``; ``document``: d-BLEU over joined documents."""
    hyp, refs = scored_sides(corpus, pretokenize if tokenized else None)
    metric = bleu_metric(tokenized=tokenized, tokenize=tokenize, lowercase=lowercase,
                         smooth_method=smooth_method)
    score, sig, per = corpus_and_documents(metric, hyp, refs, corpus.doc_ids, document=document,
                                           per_document=per_document)
    if tokenized:
        sig += f"|pretok:{pretokenize}"
    out = {"score": score.score, "signature": sig, "tokenized": tokenized, "document": document,
           "text": str(score), "precisions": list(score.precisions), "bp": score.bp,
           "sys_len": score.sys_len, "ref_len": score.ref_len}
    if per is not None:
        out["per_document"] = per
    return out


def metric_key(base: str, tokenized: bool = False, document: bool = False) -> str:
    """The name of a score in ``--json`` files: ``bleu``, ``bleu_tok``, ``d-bleu``, ``d-bleu_tok``
    (likewise ``chrf``, ``chrf++``, ``d-chrf``, ...)."""
    return ("d-" if document else "") + base + ("_tok" if tokenized else "")


def format_bleu(res: Dict) -> str:
    label = ("d-BLEU" if res.get("document") else "BLEU") + (
        " (tokenized, multi-bleu style)" if res["tokenized"] else "")
    return f"{label} = {res['text'].split('=', 1)[1].strip()}\n  signature: BLEU|{res['signature']}"


def add_level_args(g):
    g.add_argument("--document", action="store_true",
                   help="document level: each document's sentences joined into one segment, the "
                   "score over documents (signature: level:doc)")
    g.add_argument("--both", action="store_true", help="sentence level and document level")


def levels(args) -> List[bool]:
    """The levels asked for, as ``document`` flags."""
    return [False, True] if args.both else [bool(args.document)]


def add_subcommand(sub):
    p = sub.add_parser("bleu", help="sacreBLEU, corpus level and per document; d-BLEU over documents",
                       description=__doc__.split("\n\n")[0])
    add_input_args(p)
    g = p.add_argument_group("BLEU")
    g.add_argument("--tokenized", action="store_true",
                   help="tokenized BLEU (multi-bleu style): pretokenize both sides, then tokenize='none'")
    g.add_argument("--pretokenize", default="13a", help="sacrebleu tokenizer for --tokenized (default 13a)")
    g.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer of detokenized BLEU (default 13a)")
    g.add_argument("--lowercase", "-lc", action="store_true")
    g.add_argument("--smooth-method", choices=SMOOTH, default="exp")
    add_level_args(g)
    g.add_argument("--metric-name", metavar="NAME",
                   help="the score's name in --json (default: bleu, bleu_tok, d-bleu, d-bleu_tok), "
                   "e.g. a test set's, to keep the scores of one run on several test sets apart")
    p.set_defaults(func=lambda a: run_command("docctx-score bleu", _main, a))


def _main(args):
    if args.metric_name and args.both:
        raise ScoreInputError("--metric-name names one score: not with --both")
    corpus = corpus_from_args(args)
    texts, metrics = [], {}
    for document in levels(args):
        res = bleu_scores(corpus, tokenized=args.tokenized, pretokenize=args.pretokenize,
                          tokenize=args.tokenize, lowercase=args.lowercase,
                          smooth_method=args.smooth_method, document=document)
        text = format_bleu(res)
        if args.per_document:
            text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
        texts.append(text)
        metrics[args.metric_name or metric_key("bleu", args.tokenized, document)] = res
    emit(args, metrics, corpus, "\n".join(texts))
    return 0
