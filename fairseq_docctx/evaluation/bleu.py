"""BLEU with sacrebleu, corpus level and per document, over sentences or whole documents.

* **detokenized** (default): sacrebleu on the text as given, with its own tokenizer
  (``--tokenize``, default ``13a``) — the standard, comparable score.
* **tokenized** (``--tokenized``): BLEU of the text's own whitespace tokens exactly as Moses'
  ``multi-bleu.perl`` computes it, the score most document-level papers report: tokens are
  split at ASCII whitespace (multi-bleu.perl reads bytes), n-grams of orders 1-4 clipped by
  their largest count in any one reference, the brevity penalty from the reference length
  closest to each hypothesis (the shorter on a tie), no smoothing (``--smooth-method`` still
  applies if given), case-sensitive; ``--lowercase`` is ``multi-bleu.perl -lc`` (ASCII letters
  only, as Perl's ``lc`` on bytes). The n-gram statistics are counted here and the score by
  sacreBLEU's ``BLEU.compute_bleu``; the line printed is multi-bleu.perl's, with the same
  2-decimal figure. The text is scored as it is: already tokenized text (``&apos;``,
  ``&quot;``, ``@-@``) is not tokenized again.
* **pretokenized** (``--pretokenize NAME``, implies ``--tokenized``): both sides are tokenized
  first, then scored as above. ``moses`` is Moses' ``tokenizer.perl`` (sacremoses, escaping on,
  language ``--lang``), as the papers tokenized their text; ``moses-aggressive`` adds its
  ``-a`` (``@-@`` between hyphenated parts); any sacreBLEU tokenizer (``13a``, ``intl``,
  ``zh``, ``char``, ...) also works; ``none`` tokenizes nothing. The signature ends
  ``|pretok:NAME``.
* **document level** (``--document``, "d-BLEU", Liu et al. 2020, §4; the usual score of
  document-level MT since): each document's sentences are joined with a space into one
  segment (its references likewise) and the corpus BLEU is computed over the documents, so
  n-grams may cross sentence boundaries and the brevity penalty is the whole test set's. The
  signature carries ``level:doc``; ``--both`` prints sentence-level BLEU beside.

``--lowercase`` lowercases both sides (``case:lc`` in the signature). A document's BLEU is
corpus BLEU over that document's sentences (document level: of its one joined segment) with
the same settings. Every reference the input gives is used (``nrefs`` in the signature).
Plain sentence-aligned files without documents get the corpus score only (not d-BLEU).
"""
import os
import re
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence

from sacrebleu.metrics import BLEU

from fairseq_docctx.evaluation.io import Corpus, ScoreInputError

SMOOTH = ("exp", "floor", "add-k", "none")
#: signature field marking a score over joined documents
LEVEL_FIELD = "level"


#: the pretokenizers that are Moses' tokenizer.perl (sacremoses); others are sacreBLEU's
MOSES_PRETOKENIZERS = ("moses", "moses-aggressive")


def moses_tokenizer(lang: str = "en", aggressive: bool = False):
    """Moses' ``tokenizer.perl`` (sacremoses) for ``lang`` with its defaults (escaping on:
    ``'`` -> ``&apos;``); ``aggressive``: its ``-a`` (``a-b`` -> ``a @-@ b``)."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise ScoreInputError("--pretokenize moses needs sacremoses (pip install sacremoses; "
                              "requirements.txt pins it)") from None
    mt = MosesTokenizer(lang=lang)
    return lambda s: mt.tokenize(s, aggressive_dash_splits=aggressive, escape=True, return_str=True)


def sacrebleu_metric(option: str, name: str, make: Callable[[], BLEU]) -> BLEU:
    """``make()``, a sacreBLEU metric built with the tokenizer ``name`` that ``option`` names
    (``--tokenize``, ``--pretokenize``). A tokenizer that cannot be built is a
    :class:`~fairseq_docctx.evaluation.io.ScoreInputError` of one line: an unknown name
    (listing the known ones, ``known`` first); one whose optional dependency is missing
    (``ja-mecab``, ``ko-mecab``: the ``pip install`` sacreBLEU asks for); one whose
    SentencePiece model (``flores101``, ``flores200``, ``spm``, ``spBLEU-1K``) is neither in
    sacreBLEU's model folder nor downloadable (the file, the address and why)."""
    if name not in BLEU.TOKENIZERS:
        known = ", ".join(list(PRETOKENIZER_NAMES if option == "--pretokenize" else ()) + list(BLEU.TOKENIZERS))
        raise ScoreInputError(f"{option} {name}: unknown tokenizer (one of {known})")
    try:
        return make()
    except (ImportError, RuntimeError) as e:  # sacreBLEU's extras: MeCab and its dictionary
        extra = re.search(r"pip install (\S+)", str(e))
        raise ScoreInputError(f"{option} {name}: sacreBLEU's {name} tokenizer needs packages that are not "
                              "installed" + (f": pip install '{extra.group(1)}'" if extra else f" ({e})")) from None
    except OSError as e:  # the SentencePiece model of the spm tokenizers, downloaded on first use
        from sacrebleu.tokenizers import tokenizer_spm

        spec = tokenizer_spm.SPM_MODELS.get(name, {})
        url = spec.get("url", "?")
        path = os.path.join(tokenizer_spm.SACREBLEU_DIR, "models", os.path.basename(url))
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        raise ScoreInputError(f"{option} {name}: sacreBLEU's {name} tokenizer reads the SentencePiece model "
                              f"{path}, which is not there and could not be downloaded from {url} ({why}): "
                              "put the file there (the environment variable SACREBLEU moves the folder), "
                              "or use another tokenizer") from None


#: the names ``--pretokenize`` takes besides sacreBLEU's tokenizers
PRETOKENIZER_NAMES = MOSES_PRETOKENIZERS + ("none",)


def pretokenizer(name: str, lang: str = "en"):
    """The tokenizer ``--pretokenize NAME`` applies to every sentence (str -> str); a name
    that is not one is a one-line error (:func:`sacrebleu_metric`)."""
    if name in MOSES_PRETOKENIZERS:
        return moses_tokenizer(lang, name == "moses-aggressive")
    if name == "none":
        return lambda s: s
    return sacrebleu_metric("--pretokenize", name, lambda: BLEU(tokenize=name)).tokenizer


def scored_sides(corpus: Corpus, pretokenize=None, lang: str = "en"):
    """``(hypothesis documents, [reference documents, ...])`` of a corpus, every sentence
    tokenized with ``pretokenize`` (see :func:`pretokenizer`) if given."""
    if corpus.ref is None:
        raise ValueError("this metric needs references")
    hyp, refs = corpus.hyp, corpus.references
    if pretokenize:
        tok = pretokenizer(pretokenize, lang)
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


# ------------------------------------------------------------------------------------------
# multi-bleu.perl: BLEU of whitespace tokens

#: multi-bleu.perl's ``split``: Perl's \s on bytes, ASCII whitespace only (not NBSP, U+3000, ...)
_ASCII_SPACE = re.compile(r"[ \t\n\r\f\v]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
MAX_ORDER = 4


def multibleu_words(sentence: str, lowercase: bool = False) -> List[str]:
    """A sentence's tokens as multi-bleu.perl splits them (``-lc``: ASCII letters lowercased)."""
    if lowercase:
        sentence = sentence.translate(_ASCII_LOWER)
    return [w for w in _ASCII_SPACE.split(sentence) if w]


def _ngrams(words: Sequence[str]) -> Counter:
    return Counter(tuple(words[i:i + n]) for n in range(1, MAX_ORDER + 1) for i in range(len(words) - n + 1))


def multibleu_stats(hyp: Sequence[str], refs: Sequence[Sequence[str]], lowercase: bool = False):
    """multi-bleu.perl's sufficient statistics of aligned segments: ``(correct, total, sys_len,
    ref_len)`` (``correct``/``total`` per n-gram order 1-4). ``refs``: one list per reference.
    A hypothesis n-gram counts up to its largest count in any one reference; the reference
    length is the one closest to the hypothesis length, the shorter on a tie."""
    correct, total = [0] * MAX_ORDER, [0] * MAX_ORDER
    sys_len = ref_len = 0
    for k, h in enumerate(hyp):
        words = multibleu_words(h, lowercase)
        best, closest = None, None
        max_ref: Counter = Counter()
        for r in refs:
            rw = multibleu_words(r[k], lowercase)
            diff = abs(len(words) - len(rw))
            if best is None or diff < best or (diff == best and len(rw) < closest):
                best, closest = diff, len(rw)
            max_ref |= _ngrams(rw)  # Counter union: the largest count
        sys_len += len(words)
        ref_len += closest or 0
        for ng, c in _ngrams(words).items():
            total[len(ng) - 1] += c
            correct[len(ng) - 1] += min(c, max_ref.get(ng, 0))
    return correct, total, sys_len, ref_len


def multibleu_line(score) -> str:
    """The line multi-bleu.perl prints for a sacreBLEU ``BLEUScore``."""
    ratio = score.sys_len / score.ref_len if score.ref_len else 0.0
    return (f"{score.score:.2f}, " + "/".join(f"{p:.1f}" for p in score.precisions)
            + f" (BP={score.bp:.3f}, ratio={ratio:.3f}, hyp_len={score.sys_len}, ref_len={score.ref_len})")


class MultiBleu:
    """multi-bleu.perl's BLEU over segments (``corpus_score(hyp, [ref, ...])``), with a
    sacreBLEU-style signature (``tok:none``; ``case:lc`` is multi-bleu.perl's ``-lc``)."""

    def __init__(self, lowercase: bool = False, smooth_method: str = "none"):
        self.lowercase, self.smooth_method = lowercase, smooth_method
        self.num_refs = None

    def corpus_score(self, hyp: Sequence[str], refs: Sequence[Sequence[str]]):
        self.num_refs = len(refs)
        correct, total, sys_len, ref_len = multibleu_stats(hyp, refs, self.lowercase)
        return BLEU.compute_bleu(correct, total, sys_len, ref_len, smooth_method=self.smooth_method)

    def get_signature(self):
        bleu = BLEU(tokenize="none", lowercase=self.lowercase, smooth_method=self.smooth_method, force=True)
        bleu.num_refs = self.num_refs
        return bleu.get_signature()


def bleu_metric(*, tokenized: bool = False, tokenize: str = "13a", lowercase: bool = False,
                smooth_method: str = "exp") -> BLEU:
    # force: tokenized text is intended here, no "forgot to detokenize" warning
    name = "none" if tokenized else tokenize
    return sacrebleu_metric("--tokenize", name, lambda: BLEU(tokenize=name, lowercase=lowercase,
                                                             smooth_method=smooth_method, force=tokenized))


def bleu_scores(corpus: Corpus, *, tokenized: bool = False, pretokenize: Optional[str] = "13a",
                tokenize: str = "13a", lowercase: bool = False, smooth_method: Optional[str] = "exp",
                per_document: bool = True, document: bool = False, lang: str = "en") -> Dict:
    """``{"score", "signature", "tokenized", "document", "text", "per_document": {doc_id:
    score}, ...}``; ``document``: d-BLEU over joined documents.

    ``tokenized``: multi-bleu.perl's BLEU (:class:`MultiBleu`) of the sentences tokenized
    first with ``pretokenize`` (:func:`pretokenizer`; ``None`` or ``"none"``: the text's own
    tokens, what ``docctx-score bleu --tokenized`` scores; this function's own default is
    ``13a``); ``smooth_method`` ``None``: none for tokenized BLEU (multi-bleu.perl's), exp
    otherwise (sacreBLEU's; this function's default is ``exp`` at both)."""
    pretokenize = pretokenize if tokenized and pretokenize != "none" else None
    hyp, refs = scored_sides(corpus, pretokenize, lang)
    if smooth_method is None:
        smooth_method = "none" if tokenized else "exp"
    if tokenized:
        metric = MultiBleu(lowercase=lowercase, smooth_method=smooth_method)
    else:
        metric = bleu_metric(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method)
    score, sig, per = corpus_and_documents(metric, hyp, refs, corpus.doc_ids, document=document,
                                           per_document=per_document and corpus.has_documents)
    if tokenized:
        sig += f"|pretok:{pretokenize or 'none'}" + (f"-{lang}" if pretokenize in MOSES_PRETOKENIZERS else "")
    out = {"score": score.score, "signature": sig, "tokenized": tokenized, "document": document,
           "text": ("BLEU = " + multibleu_line(score)) if tokenized else str(score),
           "precisions": list(score.precisions), "bp": score.bp,
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
        " (tokenized, multi-bleu.perl)" if res["tokenized"] else "")
    return f"{label} = {res['text'].split('=', 1)[1].strip()}\n  signature: BLEU|{res['signature']}"
