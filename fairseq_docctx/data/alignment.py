"""Word alignment of sentence pairs: Pharaoh ``i-j`` links, Koehn et al.'s grow-diag-final-and,
and the eflomal aligner (Östling & Tiedemann 2016, PyPI ``eflomal``).

Shared by the data preparation (``docctx-prepare --split-sentences aligned``, :mod:`.split`)
and the evaluation (``docctx-score accuracy``, :mod:`fairseq_docctx.evaluation.discourse`),
which sits above ``data/`` and imports it from here. A link ``(i, j)`` joins the ``i``-th
source word and the ``j``-th target word (0-based). Errors are :class:`AlignmentError`
(a ``ValueError`` whose message names the file and line); each caller turns it into its own
one-line error.
"""
import logging
import os
import re
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

Links = Set[Tuple[int, int]]

#: the pip requirement of the aligner (requirements.txt pins the same)
EFLOMAL_REQUIREMENT = "eflomal==2.0.0"


class AlignmentError(ValueError):
    """A malformed alignment, or no aligner (the message says how to install it)."""


def parse_pharaoh(line: str, path: str = "<alignment>", lineno: int = 0,
                  n_src: Optional[int] = None, n_tgt: Optional[int] = None) -> Links:
    """The links of one Pharaoh line (``0-0 1-2 ...``; ``i:j`` is read too); a link outside
    a sentence of ``n_src``/``n_tgt`` words is an error naming ``path:lineno``."""
    links = set()
    for item in line.split():
        m = re.fullmatch(r"(\d+)[-:](\d+)", item)
        if not m:
            raise AlignmentError(f"{path}:{lineno}: malformed alignment link {item!r} (expected i-j)")
        i, j = int(m.group(1)), int(m.group(2))
        if (n_src is not None and i >= n_src) or (n_tgt is not None and j >= n_tgt):
            raise AlignmentError(
                f"{path}:{lineno}: link {item} outside the sentence pair ({n_src} source, {n_tgt} target words)")
        links.add((i, j))
    return links


def read_alignment_lines(path: str, src_tokens: Sequence[Sequence[str]],
                         tgt_tokens: Sequence[Sequence[str]]) -> List[Links]:
    """The links of a Pharaoh file with one line per sentence pair of ``src_tokens`` /
    ``tgt_tokens`` (every link checked against the pair's lengths)."""
    from .documents import read_lines

    lines = read_lines(path)
    if len(lines) != len(src_tokens):
        raise AlignmentError(f"{path} has {len(lines)} lines but there are {len(src_tokens)} sentence pairs")
    return [parse_pharaoh(ln, path, k, len(s), len(t))
            for k, (ln, s, t) in enumerate(zip(lines, src_tokens, tgt_tokens), 1)]


def grow_diag_final_and(fwd: Links, rev: Links) -> Links:
    """Koehn et al.'s symmetrization: the intersection, grown by neighbouring (incl. diagonal)
    union links that align a still unaligned word, then union links joining two unaligned words."""
    union = fwd | rev
    a = set(fwd & rev)
    src_done = {i for i, _ in a}
    tgt_done = {j for _, j in a}
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grown = True
    while grown:
        grown = False
        for i, j in sorted(a):
            for di, dj in neighbours:
                p = (i + di, j + dj)
                if p in union and p not in a and (p[0] not in src_done or p[1] not in tgt_done):
                    a.add(p)
                    src_done.add(p[0])
                    tgt_done.add(p[1])
                    grown = True
    for links in (fwd, rev):
        for i, j in sorted(links):
            if i not in src_done and j not in tgt_done:
                a.add((i, j))
                src_done.add(i)
                tgt_done.add(j)
    return a


#: how eflomal's forward and reverse links are combined
SYMMETRIZATIONS: Dict[str, Callable[[Links, Links], Links]] = {
    "grow-diag-final-and": grow_diag_final_and,
    "intersect": lambda x, y: x & y,
    "union": lambda x, y: x | y,
    "forward": lambda x, y: x,
}


def eflomal_installed() -> bool:
    try:
        import eflomal  # noqa: F401
    except ImportError:
        return False
    return True


def eflomal_align(src_tokens: Sequence[Sequence[str]], tgt_tokens: Sequence[Sequence[str]],
                  symmetrize: str = "grow-diag-final-and", seed_iterations=None,
                  alternative: str = "") -> List[Links]:
    """Word alignment of each sentence pair with eflomal (one run over all the pairs, forward
    and reverse links combined by ``symmetrize``). eflomal samples (Markov chain Monte Carlo,
    no seed option): two runs may differ. Without eflomal, an :class:`AlignmentError` says how
    to install it (``alternative``: what else the caller accepts, appended)."""
    logging.getLogger("eflomal").setLevel(logging.WARNING)
    try:
        import eflomal
    except ImportError:
        raise AlignmentError(f"word alignment needs eflomal (`pip install {EFLOMAL_REQUIREMENT}`)"
                             + (f" or {alternative}" if alternative else "")) from None
    if symmetrize not in SYMMETRIZATIONS:
        raise AlignmentError(f"unknown symmetrization {symmetrize!r} ({', '.join(SYMMETRIZATIONS)})")
    with tempfile.TemporaryDirectory() as d:
        fwd, rev = os.path.join(d, "fwd"), os.path.join(d, "rev")
        eflomal.Aligner(n_iterations=seed_iterations).align(
            [" ".join(s) for s in src_tokens], [" ".join(t) for t in tgt_tokens],
            links_filename_fwd=fwd, links_filename_rev=rev, quiet=True)
        with open(fwd) as f:
            fl = f.read().split("\n")[: len(src_tokens)]
        with open(rev) as f:
            rl = f.read().split("\n")[: len(src_tokens)]
    combine = SYMMETRIZATIONS[symmetrize]
    return [combine(parse_pharaoh(a, fwd), parse_pharaoh(b, rev)) for a, b in zip(fl, rl)]
