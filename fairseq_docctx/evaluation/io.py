"""Reading hypotheses, references and sources for ``docctx-score``, and writing results.

Every side is a list of documents (``Side``: document ids + sentences). Formats:

* the formats ``docctx-prepare`` reads (those registered in ``fairseq_docctx.data.formats``,
  read with ``fairseq_docctx.data.readers``): ``docids`` (a
  ``.docids`` file beside the text, or ``--docids``), ``blank``, ``marker``, ``xml``, and the
  single-file ``wmt-xml`` and ``jsonl``, of which each side reads its own part: the
  hypotheses the ``<hyp>`` of one system (``--hyp-system``, default the file's only one) or
  the ``"hyp"`` lists, the references every ``<ref>`` (or those of ``--ref-translator``) or
  the ``"tgt"`` lists, the sources ``<src>`` / ``"src"``;
* ``lines``: one sentence a line and nothing else; the documents are taken from the side that
  defines them (the reference, else the source);
* ``generate``: ``fairseq-generate`` output (``H-``/``D-`` lines in any order, several per id
  with ``--nbest``: the first one of an id is taken), put back in id order; the ``D-`` line is
  used where present, else ``H-``. Sentences still holding SentencePiece pieces (``▁``) or
  subword-nmt joints (``@@ ``) are post-processed with fairseq's ``post_process``
  (``--post-process auto``; ``none`` keeps them). The documents come from ``--data DIR``
  (the split's ``.docs`` index, see ``fairseq_docctx.data.doc_index``), ``--docids``, or the
  reference.

Plain sentence-aligned files with no document structure on any side are read as one corpus
without documents (``Corpus.has_documents`` false) by the corpus-level metrics (BLEU, chrF,
METEOR, pronoun accuracy): they report the corpus score and one note that per-document scores
need documents. The document-level ones (d-BLEU, d-chrF, lexical cohesion, coherence) refuse
such files with an error naming them.

Hypotheses may be empty lines (an empty translation); references and sources may not.
Every inconsistency raises :class:`ScoreInputError` (``FILE:LINE: message`` when a line is
known) — never silently dropped — which the command prints and exits with status 2.
"""
import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

from fairseq_docctx.data import formats, readers
from fairseq_docctx.data.documents import Document, DocumentFormatError, match_seg_ids, read_lines
from fairseq_docctx.data.formats.docids import read_docids_file
from fairseq_docctx.data.formats.wmt_xml import wmt_translators

HYP_FORMATS = formats.Names("auto", "generate", "lines")
TEXT_FORMATS = formats.Names("auto", "lines")
POST_PROCESS = ("auto", "none", "sentencepiece", "subword_nmt")
_GEN_LINE = re.compile(r"^([SHDTPAEI])-(\d+)\t(.*)$")


class ScoreInputError(ValueError):
    """Inconsistent or malformed input to a metric (message names the files)."""


@dataclass
class Side:
    """One side (hypothesis, reference or source) of a scored corpus."""

    path: str
    format: str
    doc_ids: Optional[List[str]]  # None: no document structure of its own (``lines``)
    docs: List[List[str]]  # sentences per document (one document for ``lines``)
    lines: List[List[int]]  # 1-based file line of every sentence
    real_ids: bool = False  # ids from the file (docids/xml/.docs), not generated NAME:k
    structure_from: Optional[str] = None  # file the documents came from, if not `path`
    seg_ids: Optional[List[List[str]]] = None  # xml: <seg id> of every sentence
    starts: Optional[List[int]] = None  # xml: line of every document's <doc>

    @property
    def sentences(self) -> List[str]:
        return [s for d in self.docs for s in d]

    @property
    def num_sentences(self) -> int:
        return sum(len(d) for d in self.docs)


@dataclass
class Corpus:
    """Hypotheses with (optionally) references and sources, aligned document by document."""

    doc_ids: List[str]
    hyp: List[List[str]]
    ref: Optional[List[List[str]]] = None
    src: Optional[List[List[str]]] = None
    files: Dict[str, str] = field(default_factory=dict)
    more_refs: List[List[List[str]]] = field(default_factory=list)  # further references, aligned like ref
    # False: plain sentence-aligned files without documents, held as one pseudo-document
    has_documents: bool = True
    # what --resegment did (:class:`~fairseq_docctx.evaluation.resegment.Report`); None without it
    resegmentation: Optional[object] = None

    def flat(self, side: str) -> List[str]:
        return [s for d in getattr(self, side) for s in d]

    @property
    def references(self) -> List[List[List[str]]]:
        """Every reference (``ref`` first), each as documents of sentences; metrics that take
        several references (BLEU, chrF) read them all, the others ``ref``."""
        return ([self.ref] if self.ref is not None else []) + list(self.more_refs)

    @property
    def num_sentences(self) -> int:
        return sum(len(d) for d in self.hyp)


# ------------------------------------------------------------------------------------------
# fairseq-generate output


def looks_like_generate(path: str) -> bool:
    for line in read_lines(path)[:50]:
        if line.strip():
            if _GEN_LINE.match(line):
                return True
    return False


def detect_post_process(sentences: Sequence[str]) -> str:
    """``sentencepiece`` if any sentence holds ``▁``, ``subword_nmt`` if any holds ``@@ ``."""
    if any("\u2581" in s for s in sentences):
        return "sentencepiece"
    if any("@@ " in s or s.endswith("@@") for s in sentences):
        return "subword_nmt"
    return "none"


def apply_post_process(sentences: List[str], mode: str) -> List[str]:
    if mode == "auto":
        mode = detect_post_process(sentences)
    if mode == "none":
        return list(sentences)
    from fairseq.data.data_utils import post_process

    return [post_process(s, mode) for s in sentences]


def read_generate_output(path: str, post_process: str = "auto"):
    """Hypotheses of a fairseq-generate log in id order: ``(sentences, lines)``.

    Takes the first ``D-`` line of each id (the first ``H-`` line if the log has no ``D-``
    lines); ids must be ``0..N-1`` without gaps."""
    first: Dict[str, Dict[int, tuple]] = {"D": {}, "H": {}}
    for ln, line in enumerate(read_lines(path), 1):
        m = _GEN_LINE.match(line)
        if not m or m.group(1) not in first:
            continue
        kind, i = m.group(1), int(m.group(2))
        parts = m.group(3).split("\t", 1)
        if len(parts) != 2:
            if kind == "H" or kind == "D":  # empty hypothesis: score and an empty text
                parts = [parts[0], ""]
        try:
            float(parts[0])
        except ValueError:
            raise ScoreInputError(f"{path}:{ln}: malformed {kind}- line (expected '{kind}-ID<TAB>SCORE<TAB>TEXT')")
        first[kind].setdefault(i, (parts[1].strip(), ln))
    kind = "D" if first["D"] else "H"
    got = first[kind]
    if not got:
        raise ScoreInputError(f"{path}: no H-/D- lines: not fairseq-generate output")
    if first["D"] and set(first["H"]) - set(first["D"]):
        i = min(set(first["H"]) - set(first["D"]))
        raise ScoreInputError(f"{path}:{first['H'][i][1]}: H-{i} has no D-{i} line")
    n = max(got) + 1
    if len(got) != n:
        missing = min(set(range(n)) - set(got))
        raise ScoreInputError(
            f"{path}: sentence ids 0..{n - 1} but {n - len(got)} missing, first {kind}-{missing}; "
            "was the output truncated, or generated with --required-batch-size-multiple > 1 "
            "on a task that drops sentences?")
    sents = [got[i][0] for i in range(n)]
    return apply_post_process(sents, post_process), [got[i][1] for i in range(n)]


def find_doc_index(data: str, split: str) -> str:
    from fairseq_docctx.data.doc_index import DOC_INDEX_SUFFIX

    from fairseq_docctx.data.manifest import MANIFEST_NAME

    if not os.path.isdir(data):
        raise ScoreInputError(f"--data {data}: no such directory")
    found = sorted(glob.glob(os.path.join(glob.escape(data), f"{split}.*-*.{DOC_INDEX_SUFFIX}")))
    if not found:
        pattern = f"{split}.SRC-TGT.{DOC_INDEX_SUFFIX}"
        if not os.path.exists(os.path.join(data, MANIFEST_NAME)):
            raise ScoreInputError(f"--data {data}: no {MANIFEST_NAME} and no {pattern}: not a data directory "
                                  "of docctx-prepare")
        raise ScoreInputError(f"--data {data}: no document index {pattern} (is {split!r} a prepared split? --split)")
    if len(found) != 1:
        raise ScoreInputError(
            f"{data}: expected one document index {split}.SRC-TGT.{DOC_INDEX_SUFFIX}, found "
            f"{len(found)}{': ' + ', '.join(found) if found else ''}")
    return found[0]


# ------------------------------------------------------------------------------------------
# reading one side


def _docids_file(path: str, docids: Optional[str]) -> str:
    return docids or readers.docids_path(path, None)


def _lines_side(path, fmt, lines_text, allow_empty):
    for i, s in enumerate(lines_text, 1):
        if not s.strip() and not allow_empty:
            raise ScoreInputError(f"{path}:{i}: empty sentence")
    return Side(path, fmt, None, [[s.strip() for s in lines_text]], [list(range(1, len(lines_text) + 1))])


def _split_by(side: Side, doc_ids: List[str], lengths: List[int], source: str, real_ids=True,
              hint: str = "") -> Side:
    n = sum(lengths)
    if side.num_sentences != n:
        raise ScoreInputError(
            f"{side.path} has {side.num_sentences} sentences but the documents of {source} have {n}{hint}")
    docs, lines, k = [], [], 0
    flat, flat_lines = side.sentences, [x for d in side.lines for x in d]
    for ln in lengths:
        docs.append(flat[k:k + ln])
        lines.append(flat_lines[k:k + ln])
        k += ln
    return Side(side.path, side.format, list(doc_ids), docs, lines, real_ids, source)


def read_side(path: str, input_format: str = "auto", *, docids: Optional[str] = None,
              hypothesis: bool = False, data: Optional[str] = None, split: str = "test",
              post_process: str = "auto", side: Optional[str] = None, translator: Optional[str] = None,
              system: Optional[str] = None) -> Side:
    """Read one side. Hypotheses (``hypothesis=True``) may be empty and default to ``lines``
    when no document structure is detected; ``auto`` for references/sources decides as
    ``docctx-prepare`` does (xml, docids file present, ``<d>`` marker, blank lines).
    ``side`` (``src``, ``ref``, ``hyp``; default ``hyp`` for hypotheses, else ``ref``),
    ``translator``, ``system``: the part of a ``wmt-xml``/``jsonl`` file to read."""
    if not os.path.exists(path):
        raise ScoreInputError(f"no such file: {path}")
    fmt = input_format
    if fmt == "auto":
        if hypothesis and looks_like_generate(path):
            fmt = "generate"
        else:
            try:
                fmt = readers.detect_format(path, _docids_file(path, docids))
            except DocumentFormatError:
                fmt = "lines"
            if hypothesis and fmt != "lines" and formats.get(fmt).empty_line_separates:
                fmt = "lines"  # a blank line in a hypothesis file is an empty translation
    if fmt == "generate":
        sents, lines = read_generate_output(path, post_process)
        side = Side(path, fmt, None, [sents], [lines])
        if data or docids:
            if data:
                from fairseq_docctx.data.doc_index import DocIndex

                idx_path = find_doc_index(data, split)
                try:
                    index = DocIndex.read(idx_path)
                except ValueError as e:
                    raise ScoreInputError(str(e)) from None
                side = _split_by(side, index.doc_ids, index.lengths.tolist(), idx_path)
            else:
                ids = read_docids_file(docids)
                index_ids, lengths = _runs([d for d, _ in ids])
                side = _split_by(side, index_ids, lengths, docids)
        return side
    if fmt == "lines":
        return _lines_side(path, fmt, read_lines(path), hypothesis)
    reader = formats.find(fmt)
    if reader is None:
        raise ScoreInputError(f"unknown format {fmt!r}")
    if reader.id_file and hypothesis:  # allow empty hypotheses, unlike the docids format's reader
        dpath = _docids_file(path, docids)
        if not os.path.exists(dpath):
            raise ScoreInputError(f"no such file: {dpath} (document ids for {path})")
        ids = read_docids_file(dpath)
        text = read_lines(path)
        if len(text) != len(ids):
            raise ScoreInputError(f"{path} has {len(text)} lines but {dpath} has {len(ids)}")
        side = _lines_side(path, fmt, text, True)
        doc_ids, lengths = _runs([d for d, _ in ids])
        return _split_by(side, doc_ids, lengths, dpath)
    side = side or ("hyp" if hypothesis else "ref")
    docs, fmt = readers.read_file(path, fmt, _docids_file(path, docids), allow_empty=hypothesis, side=side,
                                  translator=translator, system=system)
    seg = reader.seg_ids
    return Side(path, fmt, [d.doc_id for d in docs], [list(d.sentences) for d in docs],
                [list(d.lines) for d in docs], reader.own_ids,
                _docids_file(path, docids) if reader.id_file else None,
                [list(d.seg_ids) for d in docs] if seg else None,
                [d.start for d in docs] if seg else None)


def _runs(ids: List[str]):
    out, lengths = [], []
    for d in ids:
        if out and out[-1] == d:
            lengths[-1] += 1
        else:
            out.append(d)
            lengths.append(1)
    return out, lengths


# ------------------------------------------------------------------------------------------
# aligning the sides


def _has_seg_ids(side: Side) -> bool:
    """Whether the segments of ``side`` carry ids of their own (its format's ``seg_ids``)."""
    reader = formats.find(side.format)
    return reader is not None and reader.seg_ids


#: what a hypothesis' count mismatch adds to its message
RESEGMENT_HINT = " (--resegment scores a hypothesis with other sentence boundaries)"


def _conform(side: Side, anchor: Side, hint: str = "") -> Side:
    """``side`` split into ``anchor``'s documents, checking every count and id on the way;
    ``hint`` ends the message of a sentence count that differs."""
    what = f"{anchor.structure_from or anchor.path}"
    if side.doc_ids is None:
        return _split_by(side, anchor.doc_ids, [len(d) for d in anchor.docs], what, anchor.real_ids, hint)
    if _has_seg_ids(side) and _has_seg_ids(anchor):
        a = [Document(i, s, l, anchor.path, _seg_ids(anchor, k), _start(anchor, k))
             for k, (i, s, l) in enumerate(zip(anchor.doc_ids, anchor.docs, anchor.lines))]
        b = [Document(i, s, l, side.path, _seg_ids(side, k), _start(side, k))
             for k, (i, s, l) in enumerate(zip(side.doc_ids, side.docs, side.lines))]
        matched = match_seg_ids(a, b)
        return Side(side.path, side.format, [d.doc_id for d in matched], [d.sentences for d in matched],
                    [d.lines for d in matched], True, seg_ids=[d.seg_ids for d in matched])
    for k, (ia, da, la, ib, db, lb) in enumerate(zip(anchor.doc_ids, anchor.docs, anchor.lines,
                                                        side.doc_ids, side.docs, side.lines), 1):
        if len(da) != len(db):
            raise ScoreInputError(
                f"{side.path}:{lb[0]}: document {k} ({ib!r}) has {len(db)} sentences here but "
                f"{len(da)} in {anchor.path} (document {ia!r}, from line {la[0]}){hint}")
        if anchor.real_ids and side.real_ids and ia != ib:
            raise ScoreInputError(
                f"{side.path}:{lb[0]}: document {k} is {ib!r} here but {ia!r} in {anchor.path} (line {la[0]})")
    if side.num_sentences != anchor.num_sentences:  # the documents both have agree: one has more
        raise ScoreInputError(
            f"{side.path} has {side.num_sentences} sentences but {anchor.path} has {anchor.num_sentences}{hint}")
    if len(side.docs) != len(anchor.docs):
        raise ScoreInputError(
            f"{side.path} has {len(side.docs)} documents but {anchor.path} has {len(anchor.docs)}")
    ids = anchor.doc_ids if anchor.real_ids or not side.real_ids else side.doc_ids
    return Side(side.path, side.format, list(ids), side.docs, side.lines, anchor.real_ids or side.real_ids)


def _seg_ids(side: Side, k: int):
    return side.seg_ids[k]


def _start(side: Side, k: int) -> int:
    """The line where document ``k`` of a side starts (its ``<doc>`` in XML)."""
    if side.starts is not None:
        return side.starts[k]
    return side.lines[k][0] if side.lines[k] else 1


def load_corpus(hyp: str, ref: Union[str, Sequence[str], None] = None, src: Optional[str] = None, *,
                hyp_format: str = "auto", ref_format: str = "auto", src_format: str = "auto",
                docids: Optional[str] = None, data: Optional[str] = None, split: str = "test",
                post_process: str = "auto", ref_translator: Optional[str] = None,
                hyp_system: Optional[str] = None, documents: Union[bool, str] = True,
                resegment: bool = False, hyp_docids: Optional[str] = None) -> Corpus:
    """Read and align the given sides. The documents are those of the first side that has
    any, in the order reference, source, hypothesis; every other side must agree (same
    numbers of documents and sentences per document, same ids where both sides have file
    ids) or is split into those documents (``lines``, generate output without ``--data``).
    A WMT 2021+ XML reference gives every reference it holds (``ref_translator``: the
    comma-separated translators to use instead), the first as ``ref``, the others as
    ``more_refs``; several reference files (``ref`` a list: NIST's four references, say) are
    read alike, the first as ``ref``; ``hyp_system``: the system whose ``<hyp>`` to read.

    ``documents``: whether the scores need documents. True (or a string naming the metric
    that needs them, for the message): no document structure on any side is an error.
    False: plain sentence-aligned sides without any are read as one corpus without documents
    (one pseudo-document, ``has_documents`` false), every side with the same number of lines.

    ``hyp_docids``: the hypothesis' own document-id file (instead of ``docids``, which with
    ``resegment`` are the reference's only).
    ``resegment``: the hypothesis' words are cut into the reference's sentences document by
    document (:func:`resegmented_side`), whatever its number of lines; the corpus'
    ``resegmentation`` says what moved."""
    if data is not None and not os.path.isdir(data):
        raise ScoreInputError(f"--data {data}: no such directory")
    sides = {}
    # re-segmented, a hypothesis has its own ids or none: --docids are the reference's
    sides["hyp"] = read_side(hyp, hyp_format, docids=hyp_docids or (None if resegment else docids),
                             hypothesis=True, data=data,
                             split=split, post_process=post_process, system=hyp_system)
    more = []
    refs = [ref] if isinstance(ref, str) else list(ref or [])
    ref = refs[0] if refs else None
    if len(refs) > 1:
        if ref_translator:
            raise ScoreInputError("--ref-translator picks the references of one WMT 2021+ XML file: give one --ref")
        sides["ref"] = read_side(ref, ref_format, docids=docids)
        more = [read_side(r, ref_format, docids=docids) for r in refs[1:]]
        for r, side in zip(refs, [sides["ref"]] + more):
            if side.format == "wmt-xml":
                raise ScoreInputError(f"{r}: a WMT 2021+ XML file holds its own references: give it as the only --ref")
    elif ref:
        translators = _translators(ref, ref_format, docids, ref_translator)
        sides["ref"] = read_side(ref, ref_format, docids=docids, translator=translators[0])
        more = [read_side(ref, "wmt-xml", translator=t) for t in translators[1:]]
    elif ref_translator:
        raise ScoreInputError("--ref-translator needs --ref")
    if src:
        sides["src"] = read_side(src, src_format, docids=docids, side="src")
    if all(s.num_sentences == 0 for s in sides.values()):  # a score of nothing is no 0.00
        raise ScoreInputError(f"{', '.join(s.path for s in sides.values())}: no sentences: nothing to score")
    anchor = next((sides[k] for k in ("ref", "src", "hyp") if k in sides and sides[k].doc_ids is not None), None)
    if resegment and (ref is None or anchor is None or anchor is sides["hyp"]):
        what = "a reference (--ref)" if ref is None else f"the reference's documents ({ref}: a .docids file, " \
            "--docids, blank lines, <d> markers or XML)"
        raise ScoreInputError(f"--resegment cuts each document's hypothesis into its reference sentences: it needs {what}")
    if anchor is None:
        names = ", ".join(s.path for s in sides.values())
        if documents:
            need = f"{documents} needs documents: " if isinstance(documents, str) else ""
            raise ScoreInputError(
                f"{need}no document structure in {names}: give a .docids file (--docids), a document format "
                "(blank lines, <d> markers, XML), or --data DIR for fairseq-generate output")
        return _plain_corpus(sides, more, refs)
    out = {k: s if s is anchor or (resegment and k == "hyp") else _conform(s, anchor, RESEGMENT_HINT if k == "hyp" else "")
           for k, s in sides.items()}
    report = None
    if resegment:
        out["hyp"], report = resegmented_side(sides["hyp"], out["ref"])
    more = [_conform(m, anchor) for m in more]
    files = {k: s.path for k, s in sides.items()}
    if hyp_docids:
        files["hyp_docids"] = hyp_docids
    if len(refs) > 1:
        files["more_refs"] = ",".join(refs[1:])
    if ref and sides["ref"].format == "wmt-xml":
        files["ref_translators"] = ",".join(_translators(ref, "wmt-xml", docids, ref_translator))
    return Corpus(doc_ids=list(out[next(k for k in ("ref", "src", "hyp") if out.get(k) is anchor)].doc_ids),
                  hyp=out["hyp"].docs, ref=out["ref"].docs if "ref" in out else None,
                  src=out["src"].docs if "src" in out else None, files=files,
                  more_refs=[m.docs for m in more], resegmentation=report)


def resegmented_side(hyp: Side, ref: Side):
    """``(side, report)``: the hypothesis cut into the reference's sentences, document by
    document (:func:`~fairseq_docctx.evaluation.resegment.resegment_documents`). The
    hypothesis' documents: its own (a document format, its ``.docids`` or ``--hyp-docids``),
    matched to the reference's by id when both have ids from their files, else in order; or,
    for plain lines, one line per reference document, or one line per reference sentence in
    the reference's documents. A new sentence's line (for messages) is that of the hypothesis
    line its first word comes from (an empty one: its document's first line)."""
    from .resegment import resegment_documents

    if hyp.doc_ids is None:
        flat, flat_lines = hyp.sentences, [x for d in hyp.lines for x in d]
        if len(flat) == len(ref.docs):  # one line per document
            docs, lines = [[s] for s in flat], [[n] for n in flat_lines]
        elif len(flat) == ref.num_sentences:
            split = _split_by(hyp, ref.doc_ids, [len(d) for d in ref.docs], ref.path)
            docs, lines = split.docs, split.lines
        else:
            raise ScoreInputError(
                f"{hyp.path} has {len(flat)} lines and no documents of its own: with --resegment a hypothesis "
                f"without document ids has one line per reference document ({len(ref.docs)}) or one per "
                f"reference sentence ({ref.num_sentences}); give its document ids with --hyp-docids")
    else:
        if len(hyp.docs) != len(ref.docs):
            raise ScoreInputError(f"{hyp.path} has {len(hyp.docs)} documents but {ref.path} has {len(ref.docs)}")
        docs, lines = hyp.docs, hyp.lines
        if hyp.real_ids and ref.real_ids and list(hyp.doc_ids) != list(ref.doc_ids):
            where = {d: k for k, d in enumerate(hyp.doc_ids)}
            for k, d in enumerate(ref.doc_ids, 1):
                if d not in where:
                    at = f"{hyp.path}:{hyp.lines[k - 1][0]}" if hyp.lines[k - 1] else hyp.path
                    raise ScoreInputError(f"{at}: document {k} is {hyp.doc_ids[k - 1]!r} here but {d!r} in "
                                          f"{ref.path} (line {ref.lines[k - 1][0]}), which the hypothesis lacks")
            docs, lines = [hyp.docs[where[d]] for d in ref.doc_ids], [hyp.lines[where[d]] for d in ref.doc_ids]
    new, origins, report = resegment_documents(ref.doc_ids, docs, ref.docs)
    first = [ln[0] if ln else 0 for ln in lines]
    new_lines = [[ln[o] if o >= 0 else f for o in orig] for ln, orig, f in zip(lines, origins, first)]
    return Side(hyp.path, hyp.format, list(ref.doc_ids), new, new_lines, ref.real_ids), report


def _plain_corpus(sides: Dict[str, Side], more: List[Side], refs: List[str]) -> Corpus:
    """Sides without any document structure: one pseudo-document ``all``, every side with the
    reference's number of sentences (else the first side's)."""
    first = sides.get("ref") or sides.get("src") or sides["hyp"]
    for s in list(sides.values()) + list(more):
        if s.num_sentences != first.num_sentences:
            raise ScoreInputError(f"{s.path} has {s.num_sentences} sentences but {first.path} has "
                                  f"{first.num_sentences}")
    files = {k: s.path for k, s in sides.items()}
    if len(refs) > 1:
        files["more_refs"] = ",".join(refs[1:])
    flat = lambda s: [s.sentences]  # noqa: E731
    return Corpus(doc_ids=["all"], hyp=flat(sides["hyp"]), ref=flat(sides["ref"]) if "ref" in sides else None,
                  src=flat(sides["src"]) if "src" in sides else None, files=files,
                  more_refs=[flat(m) for m in more], has_documents=False)


def _translators(ref: str, ref_format: str, docids: Optional[str], chosen: Optional[str]) -> List[Optional[str]]:
    """The references to read of ``ref``: ``[None]`` (its one reference) unless it is a WMT
    2021+ XML file, whose translators are those ``chosen`` (comma-separated) or all of it."""
    fmt = ref_format
    if fmt == "auto" and os.path.exists(ref):
        try:
            fmt = readers.detect_format(ref, _docids_file(ref, docids))
        except DocumentFormatError:
            fmt = "lines"
    if fmt != "wmt-xml":
        if chosen:
            raise ScoreInputError(f"--ref-translator: {ref} is not a WMT 2021+ XML file (which names its references' "
                                  "translators)")
        return [None]
    present = wmt_translators(ref)
    if not chosen:
        if not present:
            raise ScoreInputError(f"{ref}: no <ref> element: the file has no reference")
        return present
    names = [t.strip() for t in chosen.split(",") if t.strip()]
    for t in names:
        if t not in present:
            raise ScoreInputError(f"--ref-translator {t}: {ref} has references by {', '.join(map(repr, present))}")
    return names


def load_json_object(path: str, key: str, what: str) -> Dict:
    """A JSON file holding an object with the object ``key`` (a result file of ``what``)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ScoreInputError(f"no such file: {path}") from None
    except ValueError as e:
        raise ScoreInputError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise ScoreInputError(f"{path}: not a {what} result (no \"{key}\" object)")
    return data


def _sha1_lines(lines) -> str:
    import hashlib

    h = hashlib.sha1()
    for line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


def test_set_identity(doc_ids: Optional[Sequence[str]], lengths: Sequence[int],
                      references: Optional[Sequence[Sequence[Sequence[str]]]] = None) -> Dict[str, object]:
    """What identifies the test set a score was computed on, as ``docctx-score table``
    compares it: its ``sentences`` and ``documents`` (one for plain sentence-aligned files,
    read as one document), the SHA-1 of its documents' ids and sentence counts
    (``doc_ids_sha1``; ``None`` without document ids) and, where the score read
    references, the SHA-1 of their sentences as scored (``references_sha1``: every reference
    in order, its documents' sentences one a line). ``lengths``: each document's sentence
    count."""
    out: Dict[str, object] = {"sentences": int(sum(lengths)), "documents": len(lengths),
                              "doc_ids_sha1": (_sha1_lines(f"{d}\t{n}" for d, n in zip(doc_ids, lengths))
                                               if doc_ids else None)}
    if references:
        out["references_sha1"] = _sha1_lines(
            line for k, ref in enumerate(references) for line in [f"# reference {k}"] + [s for d in ref for s in d])
    return out


def corpus_identity(corpus: "Corpus") -> Dict[str, object]:
    """:func:`test_set_identity` of a corpus (its references, if it has any)."""
    return test_set_identity(corpus.doc_ids if corpus.has_documents else None, [len(d) for d in corpus.hyp],
                             corpus.references or None)


def write_json(path: str, name: str, files: Dict[str, str], metrics: Dict[str, dict], outputs):
    """Write (or merge into an existing file of the same run) ``{"run", "files", "metrics"}``,
    through the run's output guard ``outputs`` (:class:`~fairseq_docctx.data.outputs.Outputs`,
    which declared ``path``)."""
    data = {"run": name, "files": files, "metrics": {}}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            if old.get("run") == name:
                data["metrics"].update(old.get("metrics", {}))
                data["files"] = {**old.get("files", {}), **files}
        except (OSError, ValueError, AttributeError):
            pass
    data["metrics"].update(metrics)
    write_json_file(path, data, outputs)


def write_json_file(path: str, data, outputs, indent: int = 1) -> None:
    """``data`` as JSON (UTF-8, a final newline) in ``path``, through the output guard ``outputs``."""
    with outputs.open(path) as f:
        json.dump(data, f, indent=indent, ensure_ascii=False)
        f.write("\n")
