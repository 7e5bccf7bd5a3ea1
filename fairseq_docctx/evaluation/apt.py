"""APT, the accuracy of pronoun translation (Miculicich Werlen & Popescu-Belis 2017).

APT compares, pronoun by pronoun, the word(s) a candidate translation puts where the reference
translation has its pronoun; both are found through word alignments with the source
(source–reference and source–candidate, Moses/Pharaoh ``i-j`` links). Every *item* falls
into one of six cases:

1. *equal*: the reference and candidate words share a pronoun (or an ``--equal`` group);
2. *similar*: they share a ``--similar`` group instead;
3. *different*: both sides are aligned but neither holds;
4. the candidate has no word aligned (nothing translates the pronoun);
5. the reference has no word aligned, the candidate has one;
6. neither side has a word aligned.

APT = Σ_c w_c n_c / Σ_c n_c over the cases used (default all six, weights 1, 0.5, 0, 0, 0, 0,
the paper's and its released examples'); cases left out of ``cases`` are not items (counted
as ``excluded``).

Two ways of choosing the items (:class:`AptConfig` ``items``):

* ``source`` — the reference implementation's (github.com/idiap/APT): every source word in a
  list of source pronouns (``source_pronouns``) is an item; its reference and candidate words
  are the words aligned to it. Needs a source pronoun list (APT ships one only for Spanish,
  for a source marked with its own ``dummy-*``/``su-*`` tokens).
* ``reference`` (default) — the configuration of the HAN paper's released scores (Miculicich
  et al. 2018, §4.2, Table 4; the authors' ``.apt.score`` files): every reference word in the
  target pronoun list is an item, its reference word the pronoun itself; the candidate words are
  those aligned to the source words aligned to it. A reference pronoun aligned to no source word
  is not an item (counted as ``not_aligned_to_source``, the released files' "Not source"), so
  cases 5 and 6 cannot occur. It needs no source-language list, so it serves any source
  language; on the authors' released TED Zh-En outputs it gives their figures exactly (score
  and findings per case).

Words: tokens split at whitespace (the alignment files' positions), lowercased, as APT does.
A word's *category* is the pronoun of the target list it is (with ``tgt_word_sep``, the first
of its parts that is one: ``-`` for French ``est-il``), else ``OTHER``; without a target list
(``target_pronouns=None``, APT's example ``config_1``) a word is its own category. Words of an
``equal`` group count as its first word; ``OTHER`` only equals ``OTHER`` with
``count_other_as_equal``.

Alignment improvement (APT's ``improve_alignment`` step, run when ``improve_tgt_words`` is
given): when none of an item's aligned words on a side is one of ``improve_tgt_words``, the
nearest such word within two positions of the aligned span that is neither one of the item's
words nor aligned to a word of ``improve_src_words`` is added (nearest to the span's centre,
leftmost on a tie; APT's weighting ties the centre with its two neighbours in an odd-sized
window). An item with no aligned word on a side stays so (in APT the neighbour search for it
never runs). Unlike APT, the neighbours are compared lowercased and the added word is mapped to
its category like any other.

The confusion table counts one (reference category, candidate category) cell per item — the
first category of each side in sentence order where an item has several (APT takes the first
of a Python set, so only such items can land in another cell); ``NONE`` stands for "no word
aligned".
"""
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from fairseq_docctx.data.documents import read_lines
from fairseq_docctx.evaluation.discourse import parse_pharaoh
from fairseq_docctx.evaluation.io import ScoreInputError

OTHER = "OTHER"
NONE = "NONE"
CASES = (1, 2, 3, 4, 5, 6)
CASE_NAMES = {1: "equal", 2: "similar", 3: "different", 4: "no candidate word aligned",
              5: "no reference word aligned", 6: "neither aligned"}
WEIGHTS = (1.0, 0.5, 0.0, 0.0, 0.0, 0.0)

# The English pronouns of the HAN paper's released TED Zh-En APT scores (the rows and columns
# of the authors' .apt.score confusion tables), in the order the HAN paper's files list them.
EN_PRONOUNS_HAN = tuple("i we you it that they he me them she us their her his who him its whose whom".split())
# APT's own English list (github.com/idiap/APT, data_es-en/list_en): without me/them/us/him.
EN_PRONOUNS_APT = tuple("she they we you i it he his her their its who whose whom that".split())
TARGET_PRONOUNS = {"en": EN_PRONOUNS_HAN}


@dataclass
class AptConfig:
    items: str = "reference"  # "reference" (the HAN paper's scores) or "source" (APT's own)
    target_pronouns: Optional[Sequence[str]] = EN_PRONOUNS_HAN  # None: every word its own category
    source_pronouns: Optional[Sequence[str]] = None  # needed with items="source"
    cases: Sequence[int] = CASES
    weights: Sequence[float] = WEIGHTS
    count_other_as_equal: bool = False
    equal: Sequence[Sequence[str]] = ()
    similar: Sequence[Sequence[str]] = ()
    improve_tgt_words: Optional[Sequence[str]] = None
    improve_src_words: Optional[Sequence[str]] = None
    src_word_sep: Optional[str] = None
    tgt_word_sep: Optional[str] = None

    def check(self):
        if self.items not in ("reference", "source"):
            raise ScoreInputError(f"APT items must be 'reference' or 'source', not {self.items!r}")
        if self.items == "source" and not self.source_pronouns:
            raise ScoreInputError("APT with source items needs a list of source pronouns (--source-pronouns FILE)")
        if self.items == "reference" and not self.target_pronouns:
            raise ScoreInputError("APT with reference items needs a list of target pronouns (--target-pronouns FILE)")
        bad = [c for c in self.cases if c not in CASES]
        if bad or not self.cases or len(set(self.cases)) != len(self.cases):
            raise ScoreInputError(f"APT cases must be distinct numbers among 1-6, got {list(self.cases)}")
        if len(self.weights) != len(self.cases):
            raise ScoreInputError(f"APT needs one weight per case: {len(self.cases)} cases, {len(self.weights)} weights")

    def describe(self) -> dict:
        return {"items": self.items,
                "target_pronouns": list(self.target_pronouns) if self.target_pronouns else None,
                "source_pronouns": list(self.source_pronouns) if self.source_pronouns else None,
                "cases": list(self.cases), "weights": [float(w) for w in self.weights],
                "count_other_as_equal": self.count_other_as_equal,
                "equal": [list(g) for g in self.equal], "similar": [list(g) for g in self.similar],
                "improve_alignment": self.improve_tgt_words is not None,
                "lowercased": True}


@dataclass
class AptItem:
    """One evaluated pronoun: sentence (0-based), its word(s) on each side with positions
    (``None``: no word aligned) and its case."""

    sentence: int
    source_pos: List[int]
    source_word: str
    ref_pos: Optional[List[int]]
    ref_words: Optional[List[str]]  # categories
    hyp_pos: Optional[List[int]]
    hyp_words: Optional[List[str]]
    case: int = 0
    cell: Tuple[str, str] = (NONE, NONE)


@dataclass
class AptResult:
    score: Optional[float]
    findings: Dict[int, int]  # per case used
    total: int
    excluded: Dict[int, int]  # items of cases not used
    not_aligned_to_source: Optional[int]  # reference items only
    confusion: Dict[str, Dict[str, int]]
    items: List[AptItem] = field(repr=False, default_factory=list)
    config: Optional[AptConfig] = None

    def as_dict(self) -> dict:
        return {"score": self.score, "findings": {str(c): n for c, n in self.findings.items()},
                "total_findings": self.total, "excluded": {str(c): n for c, n in self.excluded.items()},
                "not_aligned_to_source": self.not_aligned_to_source, "confusion": self.confusion,
                "config": self.config.describe() if self.config else None}


# ------------------------------------------------------------------------------------------
# inputs


def read_word_list(path: str) -> List[str]:
    """One word a line, lowercased; blank lines skipped (APT's list files)."""
    return [ln.strip().lower() for ln in read_lines(path) if ln.strip()]


def read_groups(path: str) -> List[List[str]]:
    """One group a line, comma-separated words, lowercased (APT's equal/similar dictionaries)."""
    return [[w for w in ln.replace(" ", "").lower().split(",") if w] for ln in read_lines(path) if ln.strip()]


def read_apt_inputs(src: str, ref: str, hyp: str, align_ref: str, align_hyp: str):
    """Tokens (whitespace-split, lowercased) of the three files and the links of the two
    alignments, checked: same number of lines, every link inside its sentence pair."""
    sides = {}
    for name, path in (("source", src), ("reference", ref), ("hypothesis", hyp)):
        sides[name] = [ln.lower().split() for ln in read_lines(path)]
    n = len(sides["source"])
    for name, path in (("reference", ref), ("hypothesis", hyp)):
        if len(sides[name]) != n:
            raise ScoreInputError(f"{path} has {len(sides[name])} lines but the source {src} has {n}")
    links = []
    for path, tgt in ((align_ref, sides["reference"]), (align_hyp, sides["hypothesis"])):
        lines = read_lines(path)
        if len(lines) != n:
            raise ScoreInputError(f"{path} has {len(lines)} lines but the source {src} has {n}")
        links.append([sorted(parse_pharaoh(ln, path, k, len(s), len(t)))
                      for k, (ln, s, t) in enumerate(zip(lines, sides["source"], tgt), 1)])
    return sides["source"], sides["reference"], sides["hypothesis"], links[0], links[1]


# ------------------------------------------------------------------------------------------
# scoring


class _Vocabulary:
    """Categories of words: the target list (+ OTHER) or, without one, the words themselves;
    ``equal`` groups collapsed onto their first word."""

    def __init__(self, config: AptConfig):
        self.plist = set(config.target_pronouns) if config.target_pronouns else None
        self.sep = config.tgt_word_sep
        self.config = config
        self.canon: Dict[str, str] = {}
        self.similar: List[Set[str]] = []

    def category(self, word: str) -> Optional[str]:
        if self.plist is None:
            return word
        for part in (word.split(self.sep) if self.sep else [word]):
            if part in self.plist:
                return part
        return None

    def categories(self, words: Sequence[str]) -> List[str]:
        cats = [self.category(w) for w in words]
        cats = [c for c in cats if c is not None]
        return cats if cats else [OTHER]

    def finish(self, universe: Set[str]):
        """Equal/similar groups restricted to the words that can occur (APT drops the rest)."""
        if self.plist is not None:
            universe = self.plist
        for g in self.config.equal:
            members = [w for w in g if w in universe]
            if len(members) > 1:
                for w in members:
                    self.canon.setdefault(w, members[0])
        for g in self.config.similar:
            members = [self.canon.get(w, w) for w in g if w in universe]
            if len(members) > 1:
                self.similar.append(set(members))

    def norm(self, cats: Sequence[str]) -> List[str]:
        out = []
        for c in cats:
            c = self.canon.get(c, c)
            if c not in out:
                out.append(c)
        return out


def _window_weights(n: int) -> List[int]:
    """APT's closeness weights over an n-word window: 1 at the centre, growing outwards; for
    odd n the centre and both its neighbours get 1."""
    half, odd = n // 2, n % 2
    return [half - k if k < half else (1 if k < half + odd else k - half - odd + 1) for k in range(n)]


def _improve(pos: List[int], cats: List[str], sent: Sequence[str], links: Sequence[Tuple[int, int]],
             src_sent: Sequence[str], vocab: _Vocabulary, tgt_words: Set[str], src_words: Set[str]):
    """APT's alignment improvement of one side of one item (see the module docstring)."""
    if not pos or any(c in tgt_words for c in cats):
        return pos, cats
    lo, hi = max(min(pos) - 2, 0), min(max(pos) + 2, len(sent) - 1)
    best = None
    for k, (p, w) in enumerate(zip(range(lo, hi + 1), _window_weights(hi - lo + 1))):
        word = sent[p].split("-")[-1]
        if word not in tgt_words or word in cats:
            continue
        if any(src_sent[i] in src_words for i, j in links if j == p):
            continue
        if best is None or w < best[1]:
            best = (p, w, word)
    if best is None:
        return pos, cats
    new_cats = [] if cats == [OTHER] else list(cats)
    cat = vocab.category(best[2])
    new_cats.append(cat if cat is not None else OTHER)
    return pos + [best[0]], new_cats


def _items_source(src, ref, hyp, align_ref, align_hyp, config: AptConfig, vocab: _Vocabulary):
    plist = set(config.source_pronouns)
    items = []
    for k, (s, r, h, ar, ah) in enumerate(zip(src, ref, hyp, align_ref, align_hyp)):
        for i, w in enumerate(s):
            parts = w.split(config.src_word_sep) if config.src_word_sep else [w]
            hit = next((p for p in parts if p in plist), None)
            if hit is None:
                continue
            rp = sorted(j for ii, j in ar if ii == i)
            hp = sorted(j for ii, j in ah if ii == i)
            items.append(AptItem(k, [i], hit, rp or None, vocab.categories([r[j] for j in rp]) if rp else None,
                                 hp or None, vocab.categories([h[j] for j in hp]) if hp else None))
    return items, None


def _items_reference(src, ref, hyp, align_ref, align_hyp, config: AptConfig, vocab: _Vocabulary):
    items, not_aligned = [], 0
    for k, (s, r, h, ar, ah) in enumerate(zip(src, ref, hyp, align_ref, align_hyp)):
        for j, w in enumerate(r):
            cat = vocab.category(w)
            if cat is None:
                continue
            sp = sorted({i for i, jj in ar if jj == j})
            if not sp:
                not_aligned += 1
                continue
            spset = set(sp)
            hp = sorted({t for i, t in ah if i in spset})
            items.append(AptItem(k, sp, " ".join(s[i] for i in sp), [j], [cat],
                                 hp or None, vocab.categories([h[t] for t in hp]) if hp else None))
    return items, not_aligned


def _case(item: AptItem, vocab: _Vocabulary, config: AptConfig) -> Tuple[int, Tuple[str, str]]:
    if item.ref_words is None:
        return (5, (NONE, vocab.norm(item.hyp_words)[0])) if item.hyp_words is not None else (6, (NONE, NONE))
    rc = vocab.norm(item.ref_words)
    if item.hyp_words is None:
        return 4, (rc[0], NONE)
    hc = vocab.norm(item.hyp_words)
    skip_other = vocab.plist is not None and not config.count_other_as_equal
    equal = [c for c in rc if c in hc and not (skip_other and c == OTHER)]
    if equal:
        return 1, (equal[0], equal[0])
    for g in vocab.similar:
        a, b = [c for c in rc if c in g], [c for c in hc if c in g]
        if a and b:
            return 2, (a[0], b[0])
    return 3, (rc[0], hc[0])


def apt_score(src: Sequence[Sequence[str]], ref: Sequence[Sequence[str]], hyp: Sequence[Sequence[str]],
              align_ref: Sequence[Sequence[Tuple[int, int]]], align_hyp: Sequence[Sequence[Tuple[int, int]]],
              config: Optional[AptConfig] = None) -> AptResult:
    """APT over sentence-aligned token lists (lowercase them first: :func:`read_apt_inputs`
    does) with their source–reference and source–hypothesis links."""
    config = config or AptConfig()
    config.check()
    vocab = _Vocabulary(config)
    make = _items_source if config.items == "source" else _items_reference
    items, not_aligned = make(src, ref, hyp, align_ref, align_hyp, config, vocab)
    if config.improve_tgt_words is not None:
        tw, sw = set(config.improve_tgt_words), set(config.improve_src_words or ())
        for it in items:
            s = src[it.sentence]
            if config.items == "source" and it.ref_pos:
                it.ref_pos, it.ref_words = _improve(it.ref_pos, it.ref_words, ref[it.sentence],
                                                    align_ref[it.sentence], s, vocab, tw, sw)
            if it.hyp_pos:
                it.hyp_pos, it.hyp_words = _improve(it.hyp_pos, it.hyp_words, hyp[it.sentence],
                                                    align_hyp[it.sentence], s, vocab, tw, sw)
    universe = set()
    for it in items:
        universe.update(it.ref_words or ())
        universe.update(it.hyp_words or ())
    vocab.finish(universe)
    findings = {c: 0 for c in config.cases}
    excluded = Counter()
    cells = Counter()
    for it in items:
        it.case, it.cell = _case(it, vocab, config)
        if it.case in findings:
            findings[it.case] += 1
            cells[it.cell] += 1
        else:
            excluded[it.case] += 1
    total = sum(findings.values())
    weights = dict(zip(config.cases, config.weights))
    score = sum(weights[c] * n for c, n in findings.items()) / total if total else None
    confusion: Dict[str, Dict[str, int]] = {}
    for (a, b), n in sorted(cells.items()):
        confusion.setdefault(a, {})[b] = n
    return AptResult(score, findings, total, dict(sorted(excluded.items())), not_aligned, confusion, items, config)


def apt_files(src: str, ref: str, hyp: str, align_ref: str, align_hyp: str,
              config: Optional[AptConfig] = None) -> AptResult:
    """APT of a hypothesis file (see :func:`read_apt_inputs` for the inputs)."""
    return apt_score(*read_apt_inputs(src, ref, hyp, align_ref, align_hyp), config=config)


# ------------------------------------------------------------------------------------------
# reports


def format_report(res: AptResult) -> str:
    score = "n/a (no items)" if res.score is None else f"{res.score:.4f}"
    cfg = res.config or AptConfig()
    what = ("reference words in the target pronoun list" if cfg.items == "reference"
            else "source words in the source pronoun list")
    lines = [f"APT = {score}",
             f"items: {what}; cases {','.join(map(str, cfg.cases))}, weights "
             f"{','.join(f'{w:g}' for w in cfg.weights)}",
             "findings per case:"]
    for c, n in res.findings.items():
        lines.append(f"  {c} ({CASE_NAMES[c]}): {n}")
    lines.append(f"total findings: {res.total}")
    for c, n in res.excluded.items():
        lines.append(f"excluded (case {c} not used): {n}")
    if res.not_aligned_to_source is not None:
        lines.append(f"not evaluated (reference pronoun aligned to no source word): {res.not_aligned_to_source}")
    return "\n".join(lines)


def format_confusion(res: AptResult) -> str:
    """Reference categories (rows) × candidate categories (columns), most diagonal first."""
    rows = set(res.confusion)
    cols = {b for r in res.confusion.values() for b in r}
    labels = sorted(rows | cols, key=lambda x: (-res.confusion.get(x, {}).get(x, 0), {OTHER: 1, NONE: 2}.get(x, 0), x))
    out = ["\t" + "\t".join(labels + ["-sum-"])]
    for a in labels:
        row = [res.confusion.get(a, {}).get(b, 0) for b in labels]
        out.append("\t".join([a] + [str(v) for v in row] + [str(sum(row))]))
    sums = [sum(res.confusion.get(a, {}).get(b, 0) for a in labels) for b in labels]
    out.append("\t".join(["-sum-"] + [str(v) for v in sums] + [str(sum(sums))]))
    return "\n".join(out)


def detail_text(res: AptResult) -> str:
    """One line per item, as APT's ``.detail`` file (positions 0-based, ``-`` for none)."""
    def pos(p):
        return " ".join(map(str, p)) if p else "-"

    lines = ["SENT.\tPOS. SOURCE\tSOURCE\tPOS. REF.\tREF.\tPOS. TARGET\tTARGET\tCASE"]
    for it in res.items:
        lines.append("\t".join([str(it.sentence), pos(it.source_pos), it.source_word, pos(it.ref_pos),
                                " ".join(it.ref_words) if it.ref_words else "-", pos(it.hyp_pos),
                                " ".join(it.hyp_words) if it.hyp_words else "-", str(it.case)]))
    return "\n".join(lines) + "\n"
