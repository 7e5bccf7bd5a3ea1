"""Re-segmentation of a document's hypothesis into the reference's sentences: the
minimum-edit-distance segmentation of Matusov, Leusch, Bender & Ney (2005), *Evaluating
Machine Translation Output with Automatic Sentence Segmentation* (IWSLT), which the
``mwerSegmenter`` tool implements and IWSLT evaluations use.

A document-to-document or LLM translator returns a document whose lines do not match the
reference's sentences (one line for the whole document, sentences merged or split). The
hypothesis' words, in their order, are cut into as many segments as the reference has
sentences so that the sum of the segments' word edit distances (Levenshtein: substitution,
insertion, deletion, each cost 1) to their reference sentences is the least possible. That
least sum is the edit distance between the hypothesis and the reference's sentences joined,
and the cuts are where an optimal alignment of the two crosses a reference sentence's end
(Matusov et al. 2005, §3): one dynamic programme over (hypothesis word, reference word),
``O(M N)`` time for ``M`` hypothesis and ``N`` reference words of a document, rows computed
as vectors; the cost is linear in the number of documents.

Choices where the paper leaves one open, and where this differs from ``mwerSegmenter``:

* documents stay apart: a document's words are segmented into that document's sentences only
  (the tool segments a whole test set's output as one stream against all its sentences);
* one reference (the first); the tool takes the minimum over several (mWER);
* words are the whitespace-separated tokens, compared exactly (case-sensitive, punctuation
  as tokens, as the tool's default); text in a language written without spaces needs
  tokenizing first;
* ties between optimal segmentations: a hypothesis word that matches no reference word at a
  sentence boundary starts the next sentence (in the backtrace, at a sentence's end column an
  insertion is taken before leaving the column; elsewhere a match or substitution first, then
  a deletion, then an insertion).

What re-segmentation cannot recover: a sentence the system dropped stays missing (its segment
is empty or holds a neighbour's words) and is scored as such.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np


def _ids(words: Sequence[str], vocab: Dict[str, int]) -> np.ndarray:
    return np.array([vocab.setdefault(w, len(vocab)) for w in words], dtype=np.int64)


def edit_table(hyp: Sequence[str], ref: Sequence[str]) -> np.ndarray:
    """``D [M+1, N+1]``: ``D[i, j]`` the word edit distance between ``hyp[:i]`` and
    ``ref[:j]``. A row from the one above in vector operations: the substitution and deletion
    candidates, then the insertions along the row as a running minimum of ``T[j'] - j'``."""
    vocab: Dict[str, int] = {}
    r, h = _ids(ref, vocab), _ids(hyp, vocab)
    M, N = len(h), len(r)
    dtype = np.uint16 if max(M, N) < np.iinfo(np.uint16).max else np.int32
    D = np.empty((M + 1, N + 1), dtype=dtype)
    cols = np.arange(N + 1, dtype=np.int64)
    prev = cols.copy()
    D[0] = prev
    for i in range(1, M + 1):
        T = np.empty(N + 1, dtype=np.int64)
        T[0] = i
        # substitution / match from (i-1, j-1), deletion of ref[j-1] from (i, j-1) below,
        # insertion of hyp[i-1] from (i-1, j)
        T[1:] = np.minimum(prev[:-1] + (r != h[i - 1]), prev[1:] + 1)
        row = np.minimum.accumulate(T - cols) + cols
        D[i] = row
        prev = row
    return D


def segment_bounds(hyp: Sequence[str], sentences: Sequence[Sequence[str]]) -> Tuple[List[int], int]:
    """``(bounds, cost)``: the hypothesis words ``hyp[bounds[k]:bounds[k + 1]]`` are the
    segment of reference sentence ``k`` (``len(sentences) + 1`` bounds, the first 0, the last
    ``len(hyp)``) in a segmentation of least total edit distance, ``cost``."""
    ref = [w for s in sentences for w in s]
    ends = np.cumsum([len(s) for s in sentences]).tolist()  # column where sentence k ends
    D = edit_table(hyp, ref).item  # D(i, j): a Python int
    M, N = len(hyp), len(ref)
    # sentence ends at each column; several when sentences are empty
    end_at: Dict[int, List[int]] = {}
    for k, e in enumerate(ends[:-1]):
        end_at.setdefault(e, []).append(k)
    bounds = [0] * (len(sentences) + 1)
    bounds[-1] = M
    i, j = M, N

    def leave(col: int, row: int):
        for k in end_at.get(col, ()):
            bounds[k + 1] = row

    while j > 0:
        d = D(i, j)
        up = i > 0 and D(i - 1, j) + 1 == d  # insertion of hyp[i-1]
        if up and j in end_at:  # at a sentence's end: the unmatched word starts the next one
            i -= 1
            continue
        if i > 0 and D(i - 1, j - 1) + (hyp[i - 1] != ref[j - 1]) == d:
            leave(j, i)
            i, j = i - 1, j - 1
        elif D(i, j - 1) + 1 == d:  # deletion of ref[j-1]
            leave(j, i)
            j -= 1
        else:
            i -= 1
    for k in end_at.get(0, ()):  # sentences before the first word of the reference: empty
        bounds[k + 1] = 0
    return bounds, D(M, N)


def _pairing_cost(a: List[int], b: List[int]) -> int:
    """The least total distance of pairing every point of the shorter of ``a``, ``b`` (sorted
    positions) with a point of the other, in order (an optimal pairing on a line does not
    cross)."""
    if len(a) > len(b):
        a, b = b, a
    if not a:
        return 0
    inf = float("inf")
    f = [0] * (len(b) + 1)  # f[j]: the first i points of a paired within the first j of b
    for i, x in enumerate(a, 1):
        g = [inf] * (len(b) + 1)
        for j in range(i, len(b) + 1):
            g[j] = min(g[j - 1], f[j - 1] + abs(x - b[j - 1]))
        f = g
    return int(f[-1])


def words_moved(line_bounds: Sequence[int], bounds: Sequence[int]) -> int:
    """Words moved across a sentence boundary: a boundary the system drew (between two of its
    lines) that the segmentation drops, paired with a cut the segmentation makes where the
    system drew none, in the same stretch between two boundaries both keep; the words between
    the two moved. Joining lines or cutting one moves none."""
    system, cuts = set(line_bounds[1:-1]), set(bounds[1:-1])
    kept = sorted(system & cuts) + [float("inf")]
    dropped, added = sorted(system - cuts), sorted(cuts - system)
    moved, lo = 0, float("-inf")
    for hi in kept:
        moved += _pairing_cost([x for x in dropped if lo < x < hi], [x for x in added if lo < x < hi])
        lo = hi
    return moved


@dataclass
class Resegmented:
    """A document's hypothesis cut into the reference's sentences: ``sentences`` (one per
    reference sentence), ``origin`` (for each, the index of the hypothesis line its first word
    comes from; -1 for an empty one), ``moved`` (:func:`words_moved`), ``cost`` (word edits)."""

    sentences: List[str]
    origin: List[int]
    moved: int
    cost: int


def resegment(hyp_lines: Sequence[str], ref_sentences: Sequence[str]) -> Resegmented:
    """Cut the words of one document's hypothesis lines, in order, into one segment per
    reference sentence (:func:`segment_bounds`); each segment's words joined by one space."""
    words, line_of, line_bounds = [], [], [0]
    for n, line in enumerate(hyp_lines):
        w = line.split()
        words += w
        line_of += [n] * len(w)
        line_bounds.append(len(words))
    bounds, cost = segment_bounds(words, [s.split() for s in ref_sentences])
    out = [" ".join(words[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    origin = [line_of[a] if a < b else -1 for a, b in zip(bounds[:-1], bounds[1:])]
    return Resegmented(out, origin, words_moved(line_bounds, bounds), cost)


@dataclass
class Report:
    """What a corpus' re-segmentation did: ``documents`` (all), ``resegmented`` (those whose
    hypothesis lines came out different), ``unequal`` (those whose number of lines differed
    from the reference's), ``words_moved`` (:func:`words_moved`, summed), ``edits`` (the word
    edit distance of the whole, summed), ``per_document`` (words moved, each re-segmented
    document)."""

    documents: int = 0
    resegmented: int = 0
    unequal: int = 0
    words_moved: int = 0
    edits: int = 0
    per_document: Dict[str, int] = field(default_factory=dict)

    @property
    def mean_words_moved(self) -> float:
        """Words moved per re-segmented document (0 when none is)."""
        return self.words_moved / self.resegmented if self.resegmented else 0.0

    def as_dict(self) -> dict:
        return {"documents": self.documents, "resegmented": self.resegmented, "unequal_line_counts": self.unequal,
                "words_moved": self.words_moved, "mean_words_moved": round(self.mean_words_moved, 3),
                "word_edits": self.edits}

    def line(self) -> str:
        return (f"re-segmented {self.resegmented} of {self.documents} documents into the reference's sentences "
                f"({self.unequal} with another number of lines than the reference; "
                f"{self.mean_words_moved:.2f} words moved across a sentence boundary per re-segmented document)")


def resegment_documents(doc_ids: Sequence[str], hyp_docs: Sequence[Sequence[str]],
                        ref_docs: Sequence[Sequence[str]]) -> Tuple[List[List[str]], List[List[int]], Report]:
    """Every document re-segmented (:func:`resegment`): the new hypothesis documents (the
    reference's number of sentences each), for each new sentence the index of the hypothesis
    line it comes from (-1: empty), and the :class:`Report`."""
    report = Report()
    docs, origins = [], []
    for doc_id, hyp, ref in zip(doc_ids, hyp_docs, ref_docs):
        r = resegment(hyp, ref)
        docs.append(r.sentences)
        origins.append(r.origin)
        report.documents += 1
        report.unequal += len(hyp) != len(ref)
        if list(r.sentences) != [" ".join(h.split()) for h in hyp]:
            report.resegmented += 1
            report.words_moved += r.moved
            report.per_document[doc_id] = r.moved
        report.edits += r.cost
    return docs, origins, report
