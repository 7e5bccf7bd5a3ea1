"""METEOR, two implementations: nltk's (offline, the default) and METEOR 1.5 (Denkowski & Lavie
2014), the Java reference implementation of the METEOR papers (Lavie & Agarwal 2007).

**nltk** (``--meteor nltk``): nltk's ``meteor_score`` with WordNet 3.0 installed by
``setup-wordnet``. Each sentence pair is tokenized with sacrebleu's ``13a`` tokenizer
(``--tokenize``) and split at whitespace, then scored by
``nltk.translate.meteor_score.single_meteor_score`` with its defaults (lowercasing, exact +
Porter-stem + WordNet-synonym matching, alpha 0.9, beta 3, gamma 0.5). The corpus score is the
**mean of the sentence scores** (nltk has no corpus METEOR), a document's score the mean of its
sentences' scores; both are reported x100. nltk's METEOR is English-only in its resources
(Porter stemmer, English WordNet): for other target languages it is exact matching plus
accidental English stem/synonym matches. It is not METEOR 1.5 and its figures are not
comparable with METEOR 1.5's (nor with a paper's "Meteor"). JSON key ``meteor``.

**METEOR 1.5** (``--meteor 1.5``): ``java -Xmx2G -jar meteor-1.5.jar HYP REF -l LANG -norm``
(``-r N`` with several references), the jar found in the installed ``pycocoevalcap`` package
(PyPI, which ships ``meteor-1.5.jar`` and the English paraphrase table; ``make meteor``
installs it and a Java runtime) or given with ``--meteor-jar``. The corpus score is the jar's
"Final score" (its system-level score from the summed statistics, not a mean of sentences), a
document's score the mean of its sentences' segment scores; both x100. ``-norm`` (the jar's
tokenization, punctuation normalization, lowercasing) suits detokenized text;
``--meteor-lower`` passes ``-lower`` instead (already tokenized text). The matching modules
are the language's defaults (``-l en``: exact, stem, synonym, paraphrase) when the jar has the
language's paraphrase table (``data/paraphrase-LANG.gz`` beside it); pycocoevalcap has only
English's, so for other languages the paraphrase module is left out (German: exact + stem,
with the default weights of those modules) and the score says so: it is then lower than, and
not comparable with, a METEOR 1.5 score with paraphrases. ``--meteor-modules`` chooses the
modules. JSON key ``meteor-1.5`` with the language's default modules, else
``meteor-1.5-MODULE-...`` (e.g. ``meteor-1.5-exact-stem``); ``--metric-name`` overrides it.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, Optional, Sequence

from fairseq_docctx.evaluation.io import Corpus, ScoreInputError

IMPLEMENTATIONS = ("nltk", "1.5")
JAR_NAME = "meteor-1.5.jar"
#: METEOR 1.5's default modules of the languages whose defaults include paraphrases (what the
#: jar prints as "Modules:" for -l LANG); the paraphrase module reads data/paraphrase-LANG.gz
DEFAULT_MODULES = {
    "en": ("exact", "stem", "synonym", "paraphrase"),
    "cz": ("exact", "paraphrase"),
    "de": ("exact", "stem", "paraphrase"),
    "es": ("exact", "stem", "paraphrase"),
    "fr": ("exact", "stem", "paraphrase"),
    "ru": ("exact", "stem", "paraphrase"),
}
LANGUAGE_NAMES = {"en": "English", "cz": "Czech", "de": "German", "es": "Spanish", "fr": "French", "ru": "Russian"}


def sentence_meteor(hyp_tokens, ref_tokens, wordnet=None, alpha=0.9, beta=3.0, gamma=0.5) -> float:
    from nltk.translate.meteor_score import single_meteor_score

    from fairseq_docctx.evaluation.wordnet import load_wordnet

    if not hyp_tokens:
        return 0.0
    return single_meteor_score(ref_tokens, hyp_tokens, wordnet=wordnet or load_wordnet(),
                               alpha=alpha, beta=beta, gamma=gamma)


def meteor_scores(corpus: Corpus, tokenize: str = "13a", alpha=0.9, beta=3.0, gamma=0.5) -> Dict:
    """``{"score", "per_document", "per_sentence", "method"}`` (scores x100)."""
    from sacrebleu.metrics import BLEU

    from fairseq_docctx.evaluation.bleu import sacrebleu_metric
    from fairseq_docctx.evaluation.wordnet import load_wordnet

    if corpus.ref is None:
        raise ValueError("METEOR needs references")
    wn = load_wordnet()
    tok = sacrebleu_metric("--tokenize", tokenize, lambda: BLEU(tokenize=tokenize)).tokenizer
    per_doc, per_sent = {}, []
    for d, hs, rs in zip(corpus.doc_ids, corpus.hyp, corpus.ref):
        scores = [100 * sentence_meteor(tok(h).split(), tok(r).split(), wn, alpha, beta, gamma)
                  for h, r in zip(hs, rs)]
        per_sent.extend(scores)
        per_doc[d] = sum(scores) / len(scores)
    return {"score": sum(per_sent) / len(per_sent), "per_document": per_doc, "per_sentence": per_sent,
            "method": f"nltk {_nltk_version()} single_meteor_score, tok:{tokenize}, alpha={alpha} beta={beta} "
                      f"gamma={gamma}, WordNet 3.0, corpus = mean of sentence scores"}


def find_meteor_jar(path: Optional[str] = None) -> str:
    """``path`` if given, else ``meteor-1.5.jar`` of the installed ``pycocoevalcap`` package."""
    if path:
        if not os.path.isfile(path):
            raise ScoreInputError(f"--meteor-jar: no such file: {path}")
        return path
    spec = importlib.util.find_spec("pycocoevalcap")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        jar = os.path.join(loc, "meteor", JAR_NAME)
        if os.path.isfile(jar):
            return jar
    raise ScoreInputError(f"METEOR 1.5 needs {JAR_NAME}: install pycocoevalcap==1.2 (make meteor), "
                          "or give --meteor-jar PATH")


def java_command() -> str:
    java = shutil.which("java")
    if java is None:
        raise ScoreInputError("METEOR 1.5 runs on Java and there is no 'java' on PATH: install a Java "
                              "runtime (Debian: apt-get install -y default-jre-headless; make meteor)")
    return java


def meteor15_modules(jar: str, lang: str, modules: Optional[Sequence[str]] = None):
    """``(modules to pass with -m or None for the language's defaults, note)``: the language's
    default modules less ``paraphrase`` when its table is not beside the jar."""
    if modules:
        return tuple(modules), None
    default = DEFAULT_MODULES.get(lang)
    if default and "paraphrase" in default and not os.path.isfile(
            os.path.join(os.path.dirname(jar), "data", f"paraphrase-{lang}.gz")):
        kept = tuple(m for m in default if m != "paraphrase")
        return kept, f"no {LANGUAGE_NAMES.get(lang, lang)} paraphrase table"
    return None, None


_SEGMENT = re.compile(r"^Segment (\d+) score:\s+(\S+)\s*$")
_FINAL = re.compile(r"^Final score:\s+(\S+)\s*$")
_EVAL_ID = re.compile(r"^Eval ID:\s+(\S+)\s*$")


def parse_meteor15_output(text: str, n: int):
    """``(final score, [segment scores], eval id)`` of the jar's plaintext output (0-1)."""
    seg, final, eval_id = {}, None, None
    for line in text.splitlines():
        m = _SEGMENT.match(line)
        if m:
            seg[int(m.group(1))] = float(m.group(2))
        elif _FINAL.match(line):
            final = float(_FINAL.match(line).group(1))
        elif _EVAL_ID.match(line):
            eval_id = _EVAL_ID.match(line).group(1)
    if final is None or sorted(seg) != list(range(1, n + 1)):
        raise ScoreInputError(f"METEOR 1.5: unexpected output ({len(seg)} segment scores for {n} sentences, "
                              f"final score {'found' if final is not None else 'missing'}):\n{text[-2000:]}")
    return final, [seg[i] for i in range(1, n + 1)], eval_id


def run_meteor15(hyp: Sequence[str], refs: Sequence[Sequence[str]], lang: str = "en", *,
                 jar: Optional[str] = None, modules: Optional[Sequence[str]] = None, norm: bool = True,
                 memory: str = "2G"):
    """Run METEOR 1.5 on aligned sentences (``refs``: one list per reference): ``{"final",
    "segments", "eval_id", "modules", "note", "command"}`` (scores 0-1)."""
    jar = find_meteor_jar(jar)
    java = java_command()
    mods, note = meteor15_modules(jar, lang, modules)
    for s in list(hyp) + [r for ref in refs for r in ref]:
        if "\n" in s or "\r" in s:
            raise ScoreInputError("METEOR 1.5: a sentence holds a line break")
    with tempfile.TemporaryDirectory(prefix="docctx-meteor") as tmp:
        hp, rp = os.path.join(tmp, "hyp.txt"), os.path.join(tmp, "ref.txt")
        with open(hp, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in hyp))
        with open(rp, "w", encoding="utf-8") as f:  # -r N: each sentence's N references in a row
            f.write("".join(r[k] + "\n" for k in range(len(hyp)) for r in refs))
        cmd = [java, f"-Xmx{memory}", "-jar", jar, hp, rp, "-l", lang, "-norm" if norm else "-lower"]
        if len(refs) > 1:
            cmd += ["-r", str(len(refs))]
        if mods:
            cmd += ["-m", " ".join(mods)]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        raise ScoreInputError(f"METEOR 1.5 failed (exit {proc.returncode}): {' '.join(cmd[:4])} ...\n"
                              f"{(proc.stderr or proc.stdout)[-2000:]}")
    final, segments, eval_id = parse_meteor15_output(proc.stdout, len(hyp))
    shown = ["java", f"-Xmx{memory}", "-jar", JAR_NAME, "HYP", "REF"] + cmd[6:]
    return {"final": final, "segments": segments, "eval_id": eval_id,
            "modules": list(mods) if mods else list(DEFAULT_MODULES.get(lang, ())) or None,
            "note": note, "command": " ".join(f"'{a}'" if " " in a else a for a in shown)}


def meteor15_key(res: Dict, lang: str, modules: Optional[Sequence[str]] = None) -> str:
    """``meteor-1.5`` with the language's default modules, else ``meteor-1.5-MOD-MOD``."""
    used = tuple(res["modules"] or ())
    if (not modules and not res["note"]) or used == DEFAULT_MODULES.get(lang):
        return "meteor-1.5"
    return "meteor-1.5-" + "-".join(used)


def meteor15_scores(corpus: Corpus, lang: str = "en", *, jar: Optional[str] = None,
                    modules: Optional[Sequence[str]] = None, norm: bool = True) -> Dict:
    """``{"score", "per_document", "per_sentence", "method", "key", ...}`` of METEOR 1.5 (x100):
    the corpus score is the jar's system-level score, a document's the mean of its sentences'."""
    if corpus.ref is None:
        raise ValueError("METEOR needs references")
    hyp = corpus.flat("hyp")
    refs = [[s for d in r for s in d] for r in corpus.references]
    res = run_meteor15(hyp, refs, lang, jar=jar, modules=modules, norm=norm)
    seg = [100 * x for x in res["segments"]]
    per_doc, k = {}, 0
    for d, hs in zip(corpus.doc_ids, corpus.hyp):
        per_doc[d] = sum(seg[k:k + len(hs)]) / len(hs) if hs else None
        k += len(hs)
    mods = " + ".join(res["modules"] or ["the language's defaults"])
    label = f"METEOR 1.5, {mods}" + (f" ({res['note']})" if res["note"] else "")
    return {"score": 100 * res["final"], "per_document": per_doc, "per_sentence": seg,
            "method": f"{label}; {res['command']}; eval id {res['eval_id']}; corpus = the jar's final score",
            "label": label, "eval_id": res["eval_id"], "modules": res["modules"], "lang": lang,
            "key": meteor15_key(res, lang, modules)}


def _nltk_version():
    import nltk

    return nltk.__version__
