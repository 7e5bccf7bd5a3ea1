"""Divide and rule: every training sentence pair cut in two, its first half the context of its
second (Lupo, Dinarelli & Besacier 2022, ACL, "Divide and Rule: Effective Pre-Training for
Context-Aware Multi-Encoder Translation Models").

What ``docctx-prepare --split-sentences MODE`` runs on the training split. The paper pre-trains
the context parameters of a multi-encoder model on such a corpus before it trains them on the
real documents: a split breaks the syntactic links inside a sentence, so the model must look in
its context (the other half) far more often to translate, and the context it needs is short.
Each pair (x, y) of at least ``min_len`` source words (and two target words) becomes two
pairs (x1, y1) and (x2, y2), x = x1 + x2 and y = y1 + y2 word for word, written in its place
in its document, so that (x1, y1) is the previous sentence of (x2, y2) and the last half of a
pair is the previous sentence of the next pair's first half: as the authors' released
preparation (``lorelupo/divide-and-rule``, ``scripts/split_corpus_sentences.py``) writes the
two halves on consecutive lines of their document. Shorter pairs stay whole (counted).

The cuts (words: whitespace-separated tokens of the raw text, the units the authors split
their Moses-tokenized text at, before subword segmentation):

* ``middle``: x1 = the first ``len(x) // 2`` words of x, y1 the first ``len(y) // 2`` words of
  y (the authors' default split);
* ``aligned``: a cut (i, j) that crosses no word-alignment link between x and y, i.e. every
  link joins words of x1 and y1 or words of x2 and y2, the one closest to the middle of both
  sides (the smallest ``|i/len(x) - 1/2| + |j/len(y) - 1/2|``; ties: the earliest), with both
  halves of both sides non-empty. The links come from eflomal (:mod:`.alignment`; the authors
  used fast_align) run over the training pairs, or from a Pharaoh file. A pair with no such cut
  is cut at the middle, as the authors' script does (counted as ``middle_fallback``). A pair
  without links has every cut, and its aligned cut is the middle one.
"""
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import alignment

MODES = ("middle", "aligned")
#: the authors' --min-length: pairs of fewer source words stay whole
DEFAULT_MIN_LEN = 7
#: the side that must have at least two words to be cut (one word a half)
MIN_TGT_LEN = 2
SYMMETRIZE = "grow-diag-final-and"

Cut = Tuple[Optional[int], Optional[int], str]  # (source words of x1, target words of y1, how)


def middle_cut(n: int, m: int) -> Tuple[int, int]:
    """The middle cut of a pair of ``n`` source and ``m`` target words (the second half is the
    longer one where a length is odd, as in the authors' script)."""
    return n // 2, m // 2


def crosses(links, i: int, j: int) -> bool:
    """Whether the cut after ``i`` source and ``j`` target words crosses a link: one joining a
    word of the first half of one side to a word of the second half of the other."""
    return any((a < i) != (b < j) for a, b in links)


def aligned_cut(n: int, m: int, links) -> Optional[Tuple[int, int]]:
    """The cut (i, j), 1 <= i < n, 1 <= j < m, that crosses no link of ``links`` (``(a, b)``:
    source word a, target word b, 0-based) closest to the middle of both sides, ``None`` where
    every cut crosses one. For a source cut i, the target cuts that cross nothing are those
    above every target word linked to x[:i] and at most every target word linked to x[i:]."""
    if n < 2 or m < 2:
        return None
    left_max = [-1] * (n + 1)  # left_max[i]: the largest target index linked to a source word < i
    right_min = [m] * (n + 1)  # right_min[i]: the smallest target index linked to a source word >= i
    by_src: Dict[int, List[int]] = {}
    for a, b in links:
        by_src.setdefault(a, []).append(b)
    for i in range(1, n + 1):
        left_max[i] = max([left_max[i - 1]] + by_src.get(i - 1, []))
    for i in range(n - 1, -1, -1):
        right_min[i] = min([right_min[i + 1]] + by_src.get(i, []))
    best, best_score = None, None
    for i in range(1, n):
        lo, hi = max(1, left_max[i] + 1), min(m - 1, right_min[i])
        if lo > hi:
            continue
        j = min(max(m // 2, lo), hi)
        score = abs(2 * i - n) * m + abs(2 * j - m) * n  # 2nm (|i/n - 1/2| + |j/m - 1/2|)
        if best_score is None or score < best_score:
            best, best_score = (i, j), score
    return best


def choose_cut(n: int, m: int, mode: str, links=None, min_len: int = DEFAULT_MIN_LEN) -> Cut:
    """Where a pair of ``n`` source and ``m`` target words is cut: ``(i, j, how)``, ``how`` one
    of ``middle``, ``aligned``, ``middle_fallback`` (``aligned`` mode, every cut crosses a
    link), or ``(None, None, "too_short")`` for a pair that stays whole (fewer than
    ``min_len`` source or two target words)."""
    if n < max(min_len, 2) or m < MIN_TGT_LEN:
        return None, None, "too_short"
    if mode == "middle":
        return (*middle_cut(n, m), "middle")
    if mode != "aligned":
        raise ValueError(f"unknown split mode {mode!r} ({', '.join(MODES)})")
    cut = aligned_cut(n, m, links or ())
    if cut is None:
        return (*middle_cut(n, m), "middle_fallback")
    return (*cut, "aligned")


_EDGE_PUNCT = re.compile(r"^\W+|\W+$")


def align_form(word: str) -> str:
    """The form a word is aligned in: lowercased, punctuation at its edges removed (raw text
    keeps punctuation attached to words; a word of punctuation only stays as it is)."""
    w = _EDGE_PUNCT.sub("", word.lower())
    return w or word.lower()


Aligner = Callable[[Sequence[Sequence[str]], Sequence[Sequence[str]]], List[set]]


def split_documents(src_docs: List[List[str]], tgt_docs: List[List[str]], mode: str,
                    min_len: int = DEFAULT_MIN_LEN, alignment_file: Optional[str] = None,
                    log: Callable[[str], None] = print,
                    save_alignment: Optional[str] = None) -> Tuple[List[List[str]], List[List[str]], dict]:
    """Split the pairs of ``src_docs``/``tgt_docs`` (per document, one string a sentence, words
    separated by whitespace); returns the new documents (each split pair's halves in its place,
    the first before the second; document order and count unchanged) and the record of
    ``docctx.json`` (``splits.train.split_sentences``, :func:`fairseq_docctx.data.manifest.split_sentences`).
    ``alignment_file``: Pharaoh links, one line per pair in corpus order (``aligned`` mode;
    without it eflomal aligns). ``save_alignment``: where eflomal's links are written, in that
    format (eflomal draws from the system's entropy, with no seed: given back as
    ``alignment_file`` they make the same split again)."""
    if mode not in MODES:
        raise ValueError(f"unknown split mode {mode!r} ({', '.join(MODES)})")
    src_words = [s.split() for doc in src_docs for s in doc]
    tgt_words = [t.split() for doc in tgt_docs for t in doc]
    links: Optional[list] = None
    how_aligned = None
    if mode == "aligned":
        if alignment_file:
            links = alignment.read_alignment_lines(alignment_file, src_words, tgt_words)
            how_aligned = {"file": alignment_file}
            log(f"train: word alignment of {len(links)} sentence pairs read from {alignment_file}")
        else:
            log(f"train: aligning {len(src_words)} sentence pairs with eflomal ({SYMMETRIZE}; words "
                "lowercased, punctuation at their edges removed)")
            links = alignment.eflomal_align([[align_form(w) for w in s] for s in src_words],
                                            [[align_form(w) for w in t] for t in tgt_words], SYMMETRIZE,
                                            alternative="a Pharaoh file of the training pairs (--split-alignment FILE)")
            how_aligned = {"aligner": "eflomal", "symmetrize": SYMMETRIZE,
                           "words": "lowercased, punctuation at their edges removed"}
            if save_alignment:
                with open(save_alignment, "w", encoding="utf-8") as f:
                    f.writelines(" ".join(f"{i}-{j}" for i, j in sorted(pair)) + "\n" for pair in links)
                how_aligned["links"] = os.path.basename(save_alignment)
    counts = {"middle": 0, "aligned": 0, "middle_fallback": 0, "too_short": 0}
    new_src, new_tgt = [], []
    k = 0
    for sdoc, tdoc in zip(src_docs, tgt_docs):
        out_s, out_t = [], []
        for _ in sdoc:
            s, t = src_words[k], tgt_words[k]
            i, j, how = choose_cut(len(s), len(t), mode, links[k] if links is not None else None, min_len)
            counts[how] += 1
            if i is None:
                out_s.append(" ".join(s))
                out_t.append(" ".join(t))
            else:
                out_s += [" ".join(s[:i]), " ".join(s[i:])]
                out_t += [" ".join(t[:j]), " ".join(t[j:])]
            k += 1
        new_src.append(out_s)
        new_tgt.append(out_t)
    split = counts["middle"] + counts["aligned"] + counts["middle_fallback"]
    record = {
        "mode": mode,
        "min_len": min_len,
        "alignment": how_aligned,
        "pairs": len(src_words),
        "split_pairs": split,
        "kept_whole": counts["too_short"],
        "cuts": {name: counts[name] for name in ("middle", "aligned", "middle_fallback")},
        "halves": "in_document",
    }
    cuts = (f"{counts['aligned']} at a cut that crosses no alignment link, {counts['middle_fallback']} at the "
            "middle (every cut crossed a link)" if mode == "aligned" else "each side at its middle word")
    log(f"train: --split-sentences {mode}: {split} of {len(src_words)} sentence pairs split in two ({cuts}), "
        f"{counts['too_short']} kept whole (fewer than {min_len} source or {MIN_TGT_LEN} target words); each "
        "first half is its second half's previous sentence, in the pair's document")
    return new_src, new_tgt, record
