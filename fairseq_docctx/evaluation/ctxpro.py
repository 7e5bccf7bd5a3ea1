"""ctxpro evaluation sets (Wicks & Post 2023): ``docctx-score ctxpro``.

Wicks & Post (WMT 2023) released, per language pair and phenomenon (``gender``,
``formality``, ``auxiliary``, ``inflection``, ``animacy``), an evaluation set as JSON — a list
of examples, each with the sentence to translate (``"src segment"``), the form its translation
must contain (``"expected"``), the rule that found it (``"rule"``) and where it comes from
(``"document id"``, ``"segment id"``) — and the preceding context of every example as an
*inputs* file: one line per example, the context sentences and then the sentence itself,
joined by ``<eos>`` (what ``ctxpro extract`` writes; ``release/inputs/NAME`` beside
``release/evalsets/NAME.json`` in their repository). Both are read from paths the user gives;
nothing is downloaded.

Each example becomes a document (its context sentences, then the sentence), the documents are
translated in document order with the model's own translations as target context (the hub
API, :meth:`fairseq_docctx.hub.DocumentHubInterface.translate_documents`), and the
translations of the last sentences are scored by the ``ctxpro`` package's own scorer
(``ctxpro.score.score``: the last sentence of a translation, split with ``sentence_splitter``,
must contain the expected form, punctuation and case aside), per rule and in total; the
per-example verdicts (``ctxpro.score.get_last`` and ``passes_test``, checked to add up to the
scorer's counts) go to ``--json`` for McNemar's test (``docctx-score contrastive --compare``).
"""
import argparse
import contextlib
import io
import json
import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from .io import ScoreInputError

REQUIRED = ("src segment", "expected", "rule")
EOS = "<eos>"


def _array_with_lines(path: str) -> List[Tuple[dict, int]]:
    """The objects of a JSON array with the line each starts on."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ScoreInputError(f"no such file: {path}") from None
    except UnicodeDecodeError as e:
        raise ScoreInputError(f"{path}: not valid UTF-8 ({e.reason})") from None
    dec = json.JSONDecoder()
    ws = re.compile(r"\s*")

    def line(pos):
        return text.count("\n", 0, pos) + 1

    pos = ws.match(text, 0).end()
    if not text.startswith("[", pos):
        raise ScoreInputError(f"{path}:{line(pos)}: not a ctxpro evaluation set (a JSON list of examples)")
    pos = ws.match(text, pos + 1).end()
    out = []
    if text.startswith("]", pos):
        return out
    while True:
        try:
            obj, end = dec.raw_decode(text, pos)
        except ValueError as e:
            raise ScoreInputError(f"{path}:{line(pos)}: not valid JSON ({e})") from None
        out.append((obj, line(pos)))
        pos = ws.match(text, end).end()
        if text.startswith(",", pos):
            pos = ws.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            return out
        else:
            raise ScoreInputError(f"{path}:{line(pos)}: expected ',' or ']' after an example")


def read_evalset(path: str) -> List[dict]:
    """The examples of a ctxpro evaluation set, checked (``FILE:LINE`` of a bad example)."""
    from ..data.documents import check_json_controls

    examples = []
    items = _array_with_lines(path)
    with open(path, encoding="utf-8") as f:
        check_json_controls([ex for ex, _ in items], f.read(), path)
    for k, (ex, ln) in enumerate(items):
        if not isinstance(ex, dict):
            raise ScoreInputError(f"{path}:{ln}: example {k + 1} is not a JSON object")
        missing = [f for f in REQUIRED if not isinstance(ex.get(f), str) or not ex[f].strip()]
        if missing:
            raise ScoreInputError(f"{path}:{ln}: example {k + 1} has no {', '.join(repr(m) for m in missing)}")
        examples.append(ex)
    if not examples:
        raise ScoreInputError(f"{path}: no examples")
    return examples


def default_inputs(evalset: str) -> List[str]:
    """Where the inputs of ``DIR/NAME.json`` are looked for: ``DIR/../inputs/NAME`` (the
    released layout) and ``DIR/NAME``."""
    d, name = os.path.split(os.path.abspath(evalset))
    name = name[:-5] if name.endswith(".json") else name
    return [os.path.join(os.path.dirname(d), "inputs", name), os.path.join(d, name)]


def read_inputs(path: str, examples: Sequence[dict], joining: str = EOS) -> List[List[str]]:
    """Per example, its document: the context sentences of its line of ``path`` and the
    sentence to translate (the line's last piece, which must be the example's ``src
    segment``)."""
    from ..data.documents import read_lines

    lines = read_lines(path)
    if len(lines) != len(examples):
        raise ScoreInputError(f"{path} has {len(lines)} lines but the evaluation set has {len(examples)} examples")
    docs = []
    for i, (line, ex) in enumerate(zip(lines, examples), 1):
        pieces = [" ".join(p.split()) for p in line.split(joining)]
        if any(not p for p in pieces):
            raise ScoreInputError(f"{path}:{i}: an empty sentence between {joining!r} separators")
        want = " ".join(ex["src segment"].split())
        if pieces[-1] != want:
            raise ScoreInputError(f"{path}:{i}: the line ends in {pieces[-1]!r}, not in the example's "
                                  f"\"src segment\" {want!r}: inputs of another evaluation set?")
        docs.append(pieces)
    return docs


def phenomenon(evalset: str) -> str:
    """``formality`` of ``formality.opensubtitles.en-de.test.json``."""
    name = os.path.basename(evalset)
    return name.split(".")[0] if "." in name else name


def ctxpro_score(evalset: str, translations: Sequence[str], lang: str) -> Dict:
    """Score translations (one per example, in order) with the ``ctxpro`` package's scorer:
    ``{"correct", "total", "accuracy", "rules": {rule: {"expected", "correct", "total",
    "accuracy"}}, "verdicts": [0/1 per example]}``."""
    import logging

    try:
        from ctxpro import score as cs
    except ImportError as e:  # pragma: no cover - a requirement of the package
        raise ScoreInputError(f"the ctxpro package is not installed ({e}): pip install ctxpro==0.0.5") from None
    logging.getLogger("ctxpro").setLevel(logging.WARNING)
    examples = read_evalset(evalset)
    if len(translations) != len(examples):
        raise ValueError(f"{len(translations)} translations for {len(examples)} examples")
    with tempfile.TemporaryDirectory(prefix="docctx-ctxpro-") as tmp:
        path = os.path.join(tmp, "translations.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(" ".join(t.split()) + "\n" for t in translations)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cs.score(argparse.Namespace(translations=path, eval_set=evalset, lang=lang, complete=True,
                                        pretty=False))
    rules, total = {}, None
    for line in out.getvalue().splitlines():
        parts = line.split("\t")
        if parts[0] == "total":
            total = (int(parts[1]), int(parts[2]))
            continue
        m = re.match(r"^(.*) \((.*)\)$", parts[0])
        rules[m.group(1)] = {"expected": m.group(2), "correct": int(parts[1]), "total": int(parts[2]),
                             "accuracy": int(parts[1]) / int(parts[2])}
    splitter = cs.SentenceSplitter(language=lang)
    verdicts = [int(cs.passes_test(cs.get_last(" ".join(t.split()), splitter), ex["expected"]))
                for t, ex in zip(translations, examples)]
    if total is None or sum(verdicts) != total[0] or len(verdicts) != total[1]:
        raise RuntimeError(f"ctxpro's scorer counted {total}, its per-example test {sum(verdicts)}/{len(verdicts)}")
    return {"correct": total[0], "total": total[1], "accuracy": total[0] / total[1], "rules": rules,
            "verdicts": verdicts}


def evaluate(hub, evalset: str, inputs: str, lang: str, joining: str = EOS, max_context: Optional[int] = None,
             beam: int = 4, batch_size: int = 16, **generate) -> Dict:
    """Translate the documents of one evaluation set in document order and score the last
    sentences (see the module doc)."""
    examples = read_evalset(evalset)
    docs = read_inputs(inputs, examples, joining)
    if max_context is not None:
        docs = [d[max(0, len(d) - 1 - max_context):] for d in docs]
    translations = hub.translate_documents(docs, beam=beam, batch_size=batch_size, **generate)
    last = [t[-1] for t in translations]
    rep = ctxpro_score(evalset, last, lang)
    rep.update(phenomenon=phenomenon(evalset), evalset=evalset, inputs=inputs, lang=lang,
               context_sentences=sum(len(d) - 1 for d in docs), translations=last,
               examples_digest=_digest(examples, docs))
    return rep


def _digest(examples, docs) -> str:
    import hashlib

    h = hashlib.sha256()
    for ex, d in zip(examples, docs):
        h.update(json.dumps([ex["src segment"], ex["expected"], ex["rule"], d], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()[:16]


def format_report(rep: Dict) -> str:
    lines = [f"{rep['phenomenon']} ({os.path.basename(rep['evalset'])}): accuracy {rep['accuracy']:.4f} "
             f"({rep['correct']}/{rep['total']})"]
    for rule, r in rep["rules"].items():
        lines.append(f"  {rule} ({r['expected']})".ljust(40) + f" {r['accuracy']:.4f}  ({r['correct']}/{r['total']})")
    return "\n".join(lines)
