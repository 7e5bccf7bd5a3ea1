"""Contrastive evaluation: does the model score the correct translation above contrastive
variants, given the context?

Test-set readers (every one returns :class:`ContrastiveExample` objects):

* :func:`read_bawden` — Bawden et al. 2018 (DiscEvalMT): ``PREFIX.prev.{src,tgt}`` and
  ``PREFIX.current.{src,tgt}``, one line per candidate, each example a correct line followed by
  a contrastive line; the fine type (``m.pl``, ``repet``, ...) is read from the set's JSON when
  it sits next to the files.
* :func:`read_contrapro` — ContraPro (Müller et al. 2018): ``contrapro.json`` plus the files
  its ``json2text_and_context.pl`` extracts: ``PREFIX.text.{src,tgt}`` (the reference line, then
  one line per ``errors`` entry) and ``PREFIX.context.{src,tgt}`` (``K`` lines per text line,
  farthest first; empty line = no context).
* :func:`read_voita` — Voita et al. 2019 consistency sets: the JSON (``src``: context and
  current sentence joined by `` _eos ``; ``dst``: the candidate translations, each with its own
  target context; ``true_ind``; ``ctx_dist``) or their ``scoring_data/NAME.{src,dst}`` files
  (one line per candidate, grouped with the JSON).
* :func:`read_lopes` — Lopes et al. 2020 (large EN-FR pronoun sets):
  ``PREFIX.current.{src,trg}`` (correct line, contrastive line) and
  ``PREFIX.cK.context.{src,trg}`` (``K`` lines per current line, farthest first).

:func:`score_examples` scores every candidate with a :class:`~.scoring.ModelScorer` (batched
across examples) and :func:`accuracy_report` counts an example as correct when the correct
candidate's log-probability is strictly higher than every contrastive one's.
"""
import glob
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from ..data.documents import check_controls, check_json_controls

FORMATS = ("auto", "bawden", "contrapro", "voita", "voita-scoring", "lopes")


class ContrastiveFormatError(ValueError):
    """Malformed test-set files; ``str(err)`` is ``FILE:LINE: message`` (or ``FILE: message``)."""

    def __init__(self, path: str, line: Optional[int], message: str):
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass
class Candidate:
    """One translation of the current sentence, with the target context it comes with
    (document order: farthest sentence first)."""

    target: str
    target_context: List[str] = field(default_factory=list)


@dataclass
class ContrastiveExample:
    source: str
    source_context: List[str]                 # document order: farthest first
    candidates: List[Candidate]
    correct: int = 0                          # index of the correct candidate
    phenomenon: str = ""
    category: Optional[str] = None            # finer type (pronoun pair, m.pl, repet, ...)
    distance: Optional[int] = None            # sentences between antecedent and current one
    where: str = ""                           # FILE:LINE of the example's first candidate


# ------------------------------------------------------------------------- file helpers
def _read_lines(path: str) -> List[str]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        with open(path, "rb") as f:
            raw = f.read()
        line = raw[: e.start].count(b"\n") + 1
        raise ContrastiveFormatError(path, line, "invalid UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, ln in enumerate(lines, 1):
        check_controls(ln, path, i)
    return [ln.rstrip("\r").strip() for ln in lines]


def _same_count(files: Dict[str, List[str]], per: Optional[Dict[str, int]] = None):
    """All files must have the same number of lines (times ``per[file]``)."""
    per = per or {}
    items = [(p, len(v) / per.get(p, 1)) for p, v in files.items()]
    if len({n for _, n in items}) > 1:
        desc = ", ".join(f"{p}: {len(files[p])} lines" + (f" ({per[p]} per example line)" if per.get(p, 1) != 1 else "")
                         for p, _ in items)
        raise ContrastiveFormatError(items[0][0], None, f"line counts do not match ({desc})")


def _load_json(path: str):
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
        return check_json_controls(json.loads(text), text, path)
    except json.JSONDecodeError as e:
        raise ContrastiveFormatError(path, e.lineno, f"invalid JSON: {e.msg}") from None


def _context_block(src: List[str], tgt: List[str]):
    """Context lines of one candidate (farthest first) -> aligned source/target context:
    the run of sentences nearest the current one; an empty pair of lines (document start)
    ends it."""
    s_out, t_out = [], []
    for s, t in zip(reversed(src), reversed(tgt)):
        if not s and not t:
            break
        s_out.append(s)
        t_out.append(t)
    return s_out[::-1], t_out[::-1]


# ------------------------------------------------------------------------------ Bawden
def _bawden_json(prefix: str) -> Optional[str]:
    d, base = os.path.split(prefix)
    for name in (base, base.replace("_", "-"), base.replace("-", "_")):
        p = os.path.join(d, name + ".json")
        if os.path.exists(p):
            return p
    return None


def _bawden_types(path: str):
    """``[(current source, correct target, type)]`` in the order of the text files."""
    data = _load_json(path)
    out = []
    for key in data:
        ex = data[key]
        if "examples" in ex:  # lexical choice: one type per example group
            for e in ex["examples"]:
                out.append((e["src"][-1], e["trg"]["correct"][-1], ex.get("type")))
        else:  # anaphora: one type per target variant
            for t in ex["trg"]:
                good = t.get("correct") or t.get("semi-correct")
                out.append((ex["src"][-1], good[-1], t.get("type")))
    return out


def read_bawden(prefix: str, src: str, tgt: str, phenomenon: Optional[str] = None) -> List[ContrastiveExample]:
    """Bawden et al. 2018: ``PREFIX.prev.SRC``, ``PREFIX.current.SRC``, ``PREFIX.prev.TGT``,
    ``PREFIX.current.TGT``; lines 2i-1 / 2i are the correct and the contrastive candidate of
    example i (same source sentence and source context)."""
    paths = {k: f"{prefix}.{k.split('_')[0]}.{src if k.endswith('src') else tgt}"
             for k in ("prev_src", "current_src", "prev_tgt", "current_tgt")}
    files = {paths[k]: _read_lines(paths[k]) for k in paths}
    _same_count(files)
    ps, cs, pt, ct = (files[paths[k]] for k in ("prev_src", "current_src", "prev_tgt", "current_tgt"))
    if len(cs) % 2:
        raise ContrastiveFormatError(paths["current_src"], len(cs),
                                     "odd number of lines: every example is a correct line followed by a contrastive line")
    phenomenon = phenomenon or os.path.basename(prefix)
    types = None
    jpath = _bawden_json(prefix)
    if jpath is not None:
        t = _bawden_types(jpath)
        if len(t) == len(cs) // 2 and all(t[i][0] == cs[2 * i] and t[i][1] == ct[2 * i] for i in range(len(t))):
            types = [x[2] for x in t]
    examples = []
    for i in range(0, len(cs), 2):
        for p, lines in ((paths["current_src"], cs), (paths["prev_src"], ps)):
            if lines[i] != lines[i + 1]:
                raise ContrastiveFormatError(p, i + 2, "the contrastive line's source differs from the "
                                             f"correct line's (line {i + 1}): lines must come in pairs")
        if not cs[i] or not ct[i] or not ct[i + 1]:
            raise ContrastiveFormatError(paths["current_src"] if not cs[i] else paths["current_tgt"], i + 1,
                                         "empty current sentence")
        s_ctx, t_ctx = _context_block([ps[i]], [pt[i]])
        _, t_ctx2 = _context_block([ps[i + 1]], [pt[i + 1]])
        examples.append(ContrastiveExample(
            source=cs[i], source_context=s_ctx,
            candidates=[Candidate(ct[i], t_ctx), Candidate(ct[i + 1], t_ctx2)],
            correct=0, phenomenon=phenomenon, category=types[i // 2] if types else None,
            distance=1, where=f"{paths['current_tgt']}:{i + 1}",
        ))
    return examples


# ---------------------------------------------------------------------------- ContraPro
def read_contrapro(json_path: str, src: str, tgt: str, prefix: Optional[str] = None,
                   context_lines: Optional[int] = None) -> List[ContrastiveExample]:
    """ContraPro: the JSON and the extracted ``PREFIX.text.{src,tgt}`` /
    ``PREFIX.context.{src,tgt}`` (default ``PREFIX``: the JSON path without ``.json``).
    ``context_lines`` (K): context lines per text line; default: context lines / text lines."""
    data = _load_json(json_path)
    if not isinstance(data, list) or (data and "errors" not in data[0]):
        raise ContrastiveFormatError(json_path, None, "not a ContraPro JSON file (a list of objects with 'errors')")
    prefix = prefix or re.sub(r"\.json$", "", json_path)
    p = {k: f"{prefix}.{k.split('_')[0]}.{src if k.endswith('src') else tgt}"
         for k in ("text_src", "text_tgt", "context_src", "context_tgt")}
    lines = {k: _read_lines(v) for k, v in p.items()}
    n = sum(1 + len(ex["errors"]) for ex in data)
    for k in ("text_src", "text_tgt"):
        if len(lines[k]) != n:
            raise ContrastiveFormatError(p[k], None, f"{len(lines[k])} lines, but {json_path} has {n} "
                                         "candidates (one reference and one line per 'errors' entry per example)")
    k_ctx = context_lines
    if k_ctx is None:
        k_ctx, rest = divmod(len(lines["context_src"]), n) if n else (0, 0)
        if rest:
            raise ContrastiveFormatError(p["context_src"], None, f"{len(lines['context_src'])} lines is not a "
                                         f"multiple of the {n} text lines")
    _same_count({p[k]: lines[k] for k in ("context_src", "context_tgt")})
    if len(lines["context_src"]) != k_ctx * n:
        raise ContrastiveFormatError(p["context_src"], None, f"{len(lines['context_src'])} lines, expected "
                                     f"{k_ctx} per text line ({k_ctx * n})")
    examples, row = [], 0
    for i, ex in enumerate(data):
        m = 1 + len(ex["errors"])
        srcs = lines["text_src"][row: row + m]
        if len(set(srcs)) != 1:
            raise ContrastiveFormatError(p["text_src"], row + 1 + next(j for j in range(m) if srcs[j] != srcs[0]),
                                         f"the candidates of example {i + 1} have different source sentences")
        cands, s_ctx = [], None
        for j in range(m):
            r = row + j
            cs = lines["context_src"][r * k_ctx: (r + 1) * k_ctx]
            ct = lines["context_tgt"][r * k_ctx: (r + 1) * k_ctx]
            sc, tc = _context_block(cs, ct)
            s_ctx = sc if s_ctx is None else s_ctx
            cands.append(Candidate(lines["text_tgt"][r], tc))
        sp, rp = ex.get("src pronoun"), ex.get("ref pronoun")
        dist = ex.get("ante distance")
        examples.append(ContrastiveExample(
            source=srcs[0], source_context=s_ctx, candidates=cands, correct=0, phenomenon="anaphora",
            category=f"{sp.lower()}:{rp.lower()}" if sp and rp else None,
            distance=int(dist) if dist is not None else None, where=f"{p['text_tgt']}:{row + 1}",
        ))
        row += m
    return examples


# -------------------------------------------------------------------------------- Voita
_EOS = " _eos "


def _split_eos(text: str) -> List[str]:
    return [s.strip() for s in f" {text.strip()} ".split(_EOS)]


def _voita_phenomenon(path: str) -> str:
    return re.sub(r"_(test|dev)$", "", os.path.splitext(os.path.basename(path))[0])


def _voita_example(src: str, dsts: Sequence[str], true_ind: int, dist, phenomenon: str, where: str,
                   path: str, line: int, number: int) -> ContrastiveExample:
    """Example ``number`` (1-based) of a Voita et al. set; errors name it (and ``line``,
    the line of its first candidate, where the files have lines)."""
    s = _split_eos(src)
    cands = []
    for j, d in enumerate(dsts):
        t = _split_eos(d)
        if len(t) != len(s):
            raise ContrastiveFormatError(path, line + j if line else None,
                                         f"example {number}, candidate {j + 1}: {len(t)} sentences "
                                         f"(joined by '_eos') but the source has {len(s)}")
        cands.append(Candidate(t[-1], t[:-1]))
    if not 0 <= true_ind < len(cands):
        raise ContrastiveFormatError(path, line, f"example {number}: true_ind {true_ind} is not a "
                                     "candidate index")
    return ContrastiveExample(source=s[-1], source_context=s[:-1], candidates=cands, correct=int(true_ind),
                              phenomenon=phenomenon, distance=int(dist) if dist is not None else None,
                              where=where)


def read_voita(json_path: str, phenomenon: Optional[str] = None) -> List[ContrastiveExample]:
    """A Voita et al. 2019 consistency test set (``deixis_test.json``, ...)."""
    data = _load_json(json_path)
    if not isinstance(data, list) or (data and not {"src", "dst", "true_ind"} <= set(data[0])):
        raise ContrastiveFormatError(json_path, None, "not a Voita et al. consistency test set "
                                     "(a list of objects with 'src', 'dst', 'true_ind')")
    phenomenon = phenomenon or _voita_phenomenon(json_path)
    return [_voita_example(ex["src"], ex["dst"], ex["true_ind"], ex.get("ctx_dist"), phenomenon,
                           f"{json_path}:example {i + 1}", json_path, None, i + 1)
            for i, ex in enumerate(data)]


def _voita_groups_json(src_path: str) -> Optional[str]:
    stem = os.path.splitext(os.path.basename(src_path))[0]
    d = os.path.dirname(os.path.abspath(src_path))
    for cand in (os.path.join(d, stem + ".json"), os.path.join(os.path.dirname(d), stem + ".json")):
        if os.path.exists(cand):
            return cand
    return None


def read_voita_scoring(src_path: str, dst_path: Optional[str] = None,
                       groups_json: Optional[str] = None) -> List[ContrastiveExample]:
    """``scoring_data/NAME.src`` / ``NAME.dst``: one candidate per line. The files do not
    say where an example ends, so the grouping (number of candidates, ``true_ind``,
    ``ctx_dist``) comes from the test set's JSON (default: ``NAME.json`` next to
    ``scoring_data/``); every line is checked against it."""
    dst_path = dst_path or re.sub(r"\.src$", "", src_path) + ".dst"
    groups_json = groups_json or _voita_groups_json(src_path)
    if groups_json is None:
        raise FileNotFoundError(f"{src_path}: the scoring files need the test set's JSON to know the "
                                "examples (give it with --groups)")
    data = _load_json(groups_json)
    s_lines, d_lines = _read_lines(src_path), _read_lines(dst_path)
    _same_count({src_path: s_lines, dst_path: d_lines})
    n = sum(len(ex["dst"]) for ex in data)
    if len(s_lines) != n:
        raise ContrastiveFormatError(src_path, None, f"{len(s_lines)} lines, but {groups_json} has {n} candidates")
    phenomenon = _voita_phenomenon(src_path)
    out, row = [], 0
    for i, ex in enumerate(data):
        m = len(ex["dst"])
        for j in range(m):
            if s_lines[row + j] != ex["src"].strip():
                raise ContrastiveFormatError(src_path, row + j + 1, f"does not match example {i + 1} of {groups_json}")
            if d_lines[row + j] != ex["dst"][j].strip():
                raise ContrastiveFormatError(dst_path, row + j + 1, f"does not match example {i + 1} of {groups_json}")
        out.append(_voita_example(s_lines[row], d_lines[row: row + m], ex["true_ind"], ex.get("ctx_dist"),
                                  phenomenon, f"{dst_path}:{row + 1}", dst_path, row + 1, i + 1))
        row += m
    return out


# -------------------------------------------------------------------------------- Lopes
def _lopes_context_files(prefix: str):
    found = {}
    for p in glob.glob(glob.escape(prefix) + ".c*.context.src"):
        m = re.search(r"\.c(\d+)\.context\.src$", p)
        if m and os.path.exists(p[:-3] + "trg"):
            found[int(m.group(1))] = p
    return found


def read_lopes(prefix: str, context_lines: Optional[int] = None,
               phenomenon: str = "anaphora") -> List[ContrastiveExample]:
    """Lopes et al. 2020: ``PREFIX.current.{src,trg}`` (correct line, contrastive line) and
    ``PREFIX.cK.context.{src,trg}`` with K context lines per current line (farthest first;
    empty lines where the document has fewer). Default K: the largest file present."""
    cur_s, cur_t = f"{prefix}.current.src", f"{prefix}.current.trg"
    files = _lopes_context_files(prefix)
    if context_lines is None:
        if not files:
            raise FileNotFoundError(f"no context files {prefix}.c1.context.src/.trg (c1, c2, c3...)")
        context_lines = max(files)
    ctx_s = f"{prefix}.c{context_lines}.context.src"
    ctx_t = ctx_s[:-3] + "trg"
    cs, ct = _read_lines(cur_s), _read_lines(cur_t)
    xs, xt = _read_lines(ctx_s), _read_lines(ctx_t)
    _same_count({cur_s: cs, cur_t: ct, ctx_s: xs, ctx_t: xt},
                {ctx_s: context_lines, ctx_t: context_lines})
    if len(xs) != context_lines * len(cs):
        raise ContrastiveFormatError(ctx_s, None, f"{len(xs)} lines, expected {context_lines} per line of {cur_s}")
    if len(cs) % 2:
        raise ContrastiveFormatError(cur_s, len(cs), "odd number of lines: every example is a correct "
                                     "line followed by a contrastive line")
    K = context_lines
    out = []
    for i in range(0, len(cs), 2):
        if cs[i] != cs[i + 1]:
            raise ContrastiveFormatError(cur_s, i + 2, f"the contrastive line's source differs from line {i + 1}")
        if xs[i * K:(i + 1) * K] != xs[(i + 1) * K:(i + 2) * K]:
            raise ContrastiveFormatError(ctx_s, (i + 1) * K + 1, f"the contrastive line's source context "
                                         f"differs from the correct line's (line {i + 1} of {cur_s})")
        s_ctx, t_ctx = _context_block(xs[i * K:(i + 1) * K], xt[i * K:(i + 1) * K])
        _, t_ctx2 = _context_block(xs[(i + 1) * K:(i + 2) * K], xt[(i + 1) * K:(i + 2) * K])
        out.append(ContrastiveExample(
            source=cs[i], source_context=s_ctx, candidates=[Candidate(ct[i], t_ctx), Candidate(ct[i + 1], t_ctx2)],
            correct=0, phenomenon=phenomenon, where=f"{cur_t}:{i + 1}"))
    return out


# ------------------------------------------------------------------------------ loading
def detect_format(path: str) -> str:
    if path.endswith(".json"):
        data = _load_json(path)
        if isinstance(data, list) and data and "errors" in data[0]:
            return "contrapro"
        if isinstance(data, list) and data and "dst" in data[0]:
            return "voita"
        raise ContrastiveFormatError(path, None, "unknown JSON test set (ContraPro: objects with 'errors'; "
                                     "Voita et al.: objects with 'src', 'dst', 'true_ind'); Bawden et al. sets are "
                                     "read from their PREFIX.prev/.current text files")
    if path.endswith(".src") and os.path.exists(path[:-4] + ".dst"):
        return "voita-scoring"
    if glob.glob(glob.escape(path) + ".prev.*"):
        return "bawden"
    if os.path.exists(path + ".current.src"):
        return "lopes"
    raise FileNotFoundError(f"{path}: cannot tell the test-set format (give --format): expected a ContraPro or "
                            "Voita JSON, a scoring_data .src file, a Bawden PREFIX (PREFIX.prev.*) or a Lopes "
                            "PREFIX (PREFIX.current.src)")


def load_examples(path: str, fmt: str = "auto", src: Optional[str] = None, tgt: Optional[str] = None,
                  context_prefix: Optional[str] = None, context_lines: Optional[int] = None,
                  groups_json: Optional[str] = None) -> List[ContrastiveExample]:
    """Read a test set in any supported format (``fmt='auto'`` detects it from ``path``)."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt in ("bawden", "contrapro") and not (src and tgt):
        raise ValueError(f"the {fmt} format needs the source and target language codes")
    if fmt == "bawden":
        return read_bawden(path, src, tgt)
    if fmt == "contrapro":
        return read_contrapro(path, src, tgt, prefix=context_prefix, context_lines=context_lines)
    if fmt == "voita":
        return read_voita(path)
    if fmt == "voita-scoring":
        return read_voita_scoring(path, groups_json=groups_json)
    if fmt == "lopes":
        return read_lopes(path, context_lines=context_lines)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


# ------------------------------------------------------------------------------ scoring
def example_documents(scorer, examples: Sequence[ContrastiveExample]):
    """One token document per candidate (context sentences + current sentence), in order."""
    docs = []
    for ex in examples:
        src = [scorer.encode_source(s) for s in ex.source_context + [ex.source]]
        for c in ex.candidates:
            if len(c.target_context) != len(ex.source_context):
                raise ContrastiveFormatError(ex.where, None, f"{len(ex.source_context)} source but "
                                             f"{len(c.target_context)} target context sentences")
            tgt = [scorer.encode_target(t) for t in c.target_context + [c.target]]
            docs.append((src, tgt))
    return docs


def score_examples(scorer, examples: Sequence[ContrastiveExample]) -> List[List[float]]:
    """Sum of target log-probabilities of every candidate of every example (one list per
    example), scored in batches across examples."""
    scores = scorer.score_documents(example_documents(scorer, examples))
    out, k = [], 0
    for ex in examples:
        out.append([s.logprob for s in scores[k: k + len(ex.candidates)]])
        k += len(ex.candidates)
    return out


def is_correct(example: ContrastiveExample, scores: Sequence[float]) -> bool:
    good = scores[example.correct]
    return all(good > s for j, s in enumerate(scores) if j != example.correct)


def examples_digest(examples: Sequence[ContrastiveExample]) -> str:
    """A digest of the examples (sources, contexts, candidates, which is correct), so that two
    reports' verdicts are compared only on the same test set (:func:`compare_reports`)."""
    import hashlib

    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.source, ex.source_context, [[c.target, c.target_context] for c in ex.candidates],
                             ex.correct], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()[:16]


def compare_reports(a: Dict, b: Dict, name_a: str = "A", name_b: str = "B") -> Dict:
    """McNemar's test (:func:`.significance.mcnemar`) on the verdicts of two reports of the
    same test set: ``{"a", "b", "accuracy_a", "accuracy_b", "both", "only_a", "only_b",
    "neither", "p"}``."""
    from .significance import mcnemar

    for r, n in ((a, name_a), (b, name_b)):
        if "verdicts" not in r:
            raise ValueError(f"{n}: the report has no per-example verdicts (written before they were "
                             "recorded: score the test set again with --json)")
    if a.get("examples_digest") != b.get("examples_digest") or len(a["verdicts"]) != len(b["verdicts"]):
        raise ValueError(f"{name_a} and {name_b} are reports of different test sets ({a['examples']} and "
                         f"{b['examples']} examples, digests {a.get('examples_digest')} and {b.get('examples_digest')})")
    res = mcnemar(a["verdicts"], b["verdicts"])
    return {"a": name_a, "b": name_b, "accuracy_a": a["accuracy"], "accuracy_b": b["accuracy"], **res}


def accuracy_report(examples: Sequence[ContrastiveExample], scores: Sequence[Sequence[float]]) -> dict:
    """Accuracy overall, per phenomenon, per antecedent distance and per category."""
    if len(examples) != len(scores):
        raise ValueError(f"{len(examples)} examples but {len(scores)} score lists")
    groups = {"by_phenomenon": defaultdict(lambda: [0, 0]), "by_distance": defaultdict(lambda: [0, 0]),
              "by_category": defaultdict(lambda: [0, 0])}
    correct = 0
    for ex, sc in zip(examples, scores):
        ok = is_correct(ex, sc)
        correct += ok
        keys = {"by_phenomenon": ex.phenomenon or "all",
                "by_distance": str(ex.distance) if ex.distance is not None else "unknown",
                "by_category": ex.category}
        for g, key in keys.items():
            if key is not None:
                groups[g][key][0] += ok
                groups[g][key][1] += 1
    rep = {"examples": len(examples), "correct": correct,
           "accuracy": correct / len(examples) if examples else 0.0,
           "verdicts": [int(is_correct(ex, sc)) for ex, sc in zip(examples, scores)],
           "examples_digest": examples_digest(examples)}

    def fmt(d, numeric=False):
        order = sorted(d, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k)) if numeric else sorted(d)
        return {k: {"correct": d[k][0], "total": d[k][1], "accuracy": d[k][0] / d[k][1]} for k in order}

    rep["by_phenomenon"] = fmt(groups["by_phenomenon"])
    rep["by_distance"] = fmt(groups["by_distance"], numeric=True)
    if groups["by_category"]:
        rep["by_category"] = fmt(groups["by_category"])
    return rep


def evaluate(scorer, examples: Sequence[ContrastiveExample]) -> dict:
    """Score and report; the report also holds the per-candidate ``scores``."""
    scores = score_examples(scorer, examples)
    rep = accuracy_report(examples, scores)
    rep["scores"] = scores
    return rep


def format_mcnemar(res: Dict) -> str:
    return (f"{res['a']}: accuracy {res['accuracy_a']:.4f}   {res['b']}: accuracy {res['accuracy_b']:.4f}\n"
            f"  both right {res['both']}, only {res['a']} {res['only_a']}, only {res['b']} {res['only_b']}, "
            f"neither {res['neither']}\n"
            f"  McNemar (exact, two-sided): p = {res['p']:.4g}")


def format_report(rep: dict) -> str:
    lines = [f"accuracy {rep['accuracy']:.4f} ({rep['correct']}/{rep['examples']})"]
    for title, key in (("per phenomenon", "by_phenomenon"), ("per antecedent distance", "by_distance"),
                       ("per category", "by_category")):
        if key in rep:
            lines.append(title + ":")
            for k, v in rep[key].items():
                lines.append(f"  {k:<20} {v['accuracy']:.4f}  ({v['correct']}/{v['total']})")
    return "\n".join(lines)
