"""BLEU with sacrebleu, corpus level and per document.

* **detokenized** (default): sacrebleu on the text as given, with its own tokenizer
  (``--tokenize``, default ``13a``) — the standard, comparable score.
* **tokenized** ("multi-bleu style", what most document-level papers report): both sides are
  first tokenized with sacrebleu's tokenizer ``--pretokenize`` (default ``13a``; ``intl``,
  ``char``, ``zh``, ... also work), and the resulting tokens are scored by sacrebleu with
  ``tokenize='none'`` — i.e. BLEU over whitespace tokens of tokenized text, as
  ``multi-bleu.perl`` computes on Moses-tokenized text. The signature's ``tok:none`` is
  followed by ``|pretok:NAME`` to mark it; multi-bleu.perl itself has no smoothing
  (``--smooth-method none``), sacrebleu's default is ``exp``.

``--lowercase`` lowercases both sides (``case:lc`` in the signature). A document's BLEU is
corpus BLEU over that document's sentences with the same settings.
"""
from typing import Dict

from sacrebleu.metrics import BLEU

from fairseq_docctx.evaluation.io import Corpus, add_input_args, corpus_from_args, emit, run_command

SMOOTH = ("exp", "floor", "add-k", "none")


def _pretokenizer(name: str):
    return BLEU(tokenize=name).tokenizer


def bleu_scores(corpus: Corpus, *, tokenized: bool = False, pretokenize: str = "13a",
                tokenize: str = "13a", lowercase: bool = False, smooth_method: str = "exp",
                per_document: bool = True) -> Dict:
    """``{"score", "signature", "tokenized", "text", "per_document": {doc_id: score}}``."""
    if corpus.ref is None:
        raise ValueError("BLEU needs references")
    hyp, ref = corpus.hyp, corpus.ref
    if tokenized:
        tok = _pretokenizer(pretokenize)
        hyp = [[tok(s) for s in d] for d in hyp]
        ref = [[tok(s) for s in d] for d in ref]
        tokenize = "none"
    # force: tokenized text is intended here, no "forgot to detokenize" warning
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method, force=tokenized)
    flat_h = [s for d in hyp for s in d]
    flat_r = [s for d in ref for s in d]
    score = metric.corpus_score(flat_h, [flat_r])
    sig = metric.get_signature().format()
    if tokenized:
        sig += f"|pretok:{pretokenize}"
    out = {"score": score.score, "signature": sig, "tokenized": tokenized, "text": str(score),
           "precisions": list(score.precisions), "bp": score.bp, "sys_len": score.sys_len,
           "ref_len": score.ref_len}
    if per_document:
        out["per_document"] = {
            d: metric.corpus_score(h, [r]).score for d, h, r in zip(corpus.doc_ids, hyp, ref)
        }
    return out


def format_bleu(res: Dict) -> str:
    label = "BLEU (tokenized, multi-bleu style)" if res["tokenized"] else "BLEU"
    return f"{label} = {res['text'].split('=', 1)[1].strip()}\n  signature: BLEU|{res['signature']}"


def add_subcommand(sub):
    p = sub.add_parser("bleu", help="sacreBLEU, corpus level and per document", description=__doc__.split("\n\n")[0])
    add_input_args(p)
    g = p.add_argument_group("BLEU")
    g.add_argument("--tokenized", action="store_true",
                   help="tokenized BLEU (multi-bleu style): pretokenize both sides, then tokenize='none'")
    g.add_argument("--pretokenize", default="13a", help="sacrebleu tokenizer for --tokenized (default 13a)")
    g.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer of detokenized BLEU (default 13a)")
    g.add_argument("--lowercase", "-lc", action="store_true")
    g.add_argument("--smooth-method", choices=SMOOTH, default="exp")
    p.set_defaults(func=lambda a: run_command("docctx-score bleu", _main, a))


def _main(args):
    corpus = corpus_from_args(args)
    res = bleu_scores(corpus, tokenized=args.tokenized, pretokenize=args.pretokenize,
                      tokenize=args.tokenize, lowercase=args.lowercase, smooth_method=args.smooth_method)
    text = format_bleu(res)
    if args.per_document:
        text += "\n" + "\n".join(f"  {d}\t{v:.2f}" for d, v in res["per_document"].items())
    key = "bleu_tok" if args.tokenized else "bleu"
    emit(args, {key: res}, corpus, text)
    return 0
