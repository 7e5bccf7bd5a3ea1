"""The context probe: synthetic parallel documents whose translation needs context, and a scorer.

Source side: English-like; target side: German-like; both lowercased, whitespace-tokenized,
from a closed vocabulary of about 100 words. A document is a run of *episodes* (possibly
separated by filler sentences)::

    INTRO   i saw a red lamp .          ->  ich sah eine rot lampe .      (noun of class f)
    FILLER  (d-1 of them, no nouns)     ->  ...
    PRON    yesterday it was big .      ->  gestern war sie gross .       (d = 1 or 2)

Phenomena (annotated per target word in ``{split}.probe.jsonl``):

* ``anaphora``: source ``it`` becomes ``er/sie/es`` (nominative) or ``ihn/sie/es``
  (accusative) after the class of the noun introduced ``d`` sentences earlier (``d`` in
  ``distances``). The PRON sentence's template and adjective are drawn independently of the
  class, so the current sentence alone gives no clue: a sentence-level model sits at chance
  (1/n_classes). The antecedent is always the most recent INTRO noun.
* ``consistency`` (``consistency=True``): every document uses one word with two equally valid
  translations, several times: ``car`` -> ``auto``/``wagen`` or ``movie`` ->
  ``film``/``streifen`` in filler sentences, or the adjective ``nice`` -> ``schoen``/``huebsch``
  in the adjective slot of INTRO/PRON sentences. The form is drawn at random per document and
  every mention in the reference repeats it. *Anchor* mentions (``anchor: true``, never
  scored) set the form; every other mention (source ``car``/``movie``/``nice``, no clue in the
  sentence) must repeat its anchor's form: the form the model itself wrote at the anchor
  (default) or the reference form. ``distance`` counts back to the nearest earlier mention,
  which is all a model that copies its own previous output needs to see.
  With ``consistency_anchor="cued"`` (default) an anchor's source says ``automobile``/``wagon``,
  ``film``/``flick`` or ``beautiful``/``pretty``, which fixes the form; the first mention of a
  document is an anchor, and so is any mention more than max(distances) sentences after the
  previous one, so every scored mention is reachable through a window of that many sentences.
  A sentence model, whose output for ``car`` is the same in every document, then agrees with
  its own anchors about half of the time, while a model that reads its previous target
  sentences gets near 100%. (Scoring against the nearest earlier mention instead would let a
  constant output look consistent.) With ``"free"`` only the first mention is an anchor, its
  source says ``car`` (either form is right) and later mentions may be far apart; a model
  that always writes ``auto`` is then trivially 100% consistent.

Everything that is not context-dependent (nouns, articles, adjectives, fillers) is a fixed
word-for-word mapping, so tiny models learn it in a few hundred updates.

Settings (:data:`SETTINGS`, ``docctx-probe generate --setting``) change the shape of the data
while keeping these rules: the sentences' length (phrases of :data:`PHRASES`), where the
antecedent's noun phrase stands, what decides the class (the noun, the source article, or two
cues in two sentences that must agree), distractor sentences between an antecedent and its
pronoun, and the vocabulary's size. The default setting builds none of this and writes what
the templates alone give.

Scoring looks for the alternatives in the hypothesis rather than at a fixed position: the
alternatives of a phenomenon occur nowhere else in the target language, so the i-th occurrence
of any alternative in the hypothesis is the model's choice for the i-th annotated item with
that alternative set. This survives extra or dropped words elsewhere in the sentence; an item
whose word is absent counts as wrong (and as ``missing``). ``index`` (the reference token
position) is still recorded for tools that want positional alignment.
"""
import json
import os
import random
import re
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .data.outputs import Outputs
from .data.documents import read_lines

# (class name, nominative pronoun, accusative pronoun, indefinite article)
CLASSES = [("m", "er", "ihn", "ein"), ("f", "sie", "sie", "eine"), ("n", "es", "es", "ein")]
NOUNS = {  # source:target, by class
    "m": "dog:hund table:tisch chair:stuhl tree:baum key:schluessel apple:apfel coat:mantel hat:hut",
    "f": "cat:katze lamp:lampe door:tuer cup:tasse flower:blume bag:tasche box:kiste clock:uhr",
    "n": "house:haus book:buch bed:bett window:fenster picture:bild glass:glas boat:boot phone:telefon",
}
ADJS = "big:gross small:klein old:alt new:neu red:rot blue:blau cheap:billig heavy:schwer green:gruen"
# {a} article, {j} adjective, {n} noun
INTRO = [  # every INTRO names a noun with an adjective
    ("i saw a {j} {n} .", "ich sah {a} {j} {n} ."),
    ("we found a {j} {n} .", "wir fanden {a} {j} {n} ."),
    ("my friend bought a {j} {n} .", "mein freund kaufte {a} {j} {n} ."),
    ("there is a {j} {n} in the kitchen .", "in der kueche ist {a} {j} {n} ."),
]
# {p} nominative / {q} accusative pronoun; the source always says "it"
PRON = [
    ("it is very {j} .", "{p} ist sehr {j} ."),
    ("it was {j} .", "{p} war {j} ."),
    ("yesterday it was {j} .", "gestern war {p} {j} ."),
    ("i think it is {j} .", "ich glaube {p} ist {j} ."),
    ("i really like it .", "ich mag {q} sehr ."),
    ("we bought it today .", "wir kauften {q} heute ."),
    ("nobody wanted it .", "niemand wollte {q} ."),
]
FILLER = [
    ("we went home early .", "wir gingen frueh nach hause ."),
    ("the weather was sunny today .", "das wetter war heute sonnig ."),
    ("my brother called me .", "mein bruder rief mich an ."),
    ("then we ate lunch .", "dann assen wir zu mittag ."),
    ("everyone laughed .", "alle lachten ."),
    ("the children played outside .", "die kinder spielten draussen ."),
    ("i was very tired .", "ich war sehr muede ."),
    ("we talked for hours .", "wir redeten stundenlang ."),
]
# Consistency words: source word, its two target forms, the source synonyms that force each
# form at a cued anchor mention, and where it occurs: slot "c" of its own filler templates
# (nouns), or the adjective slot "j" of INTRO and PRON sentences (adjective).
CONSISTENCY = [
    {"word": "car", "forms": ("auto", "wagen"), "cues": ("automobile", "wagon"), "slot": "c",
     "templates": [
         ("our {c} was parked outside .", "unser {c} stand draussen ."),
         ("we drove to town in the {c} .", "wir fuhren mit dem {c} in die stadt ."),
         ("the {c} was fast .", "der {c} war schnell ."),  # (synthetic: article ignores gender)
     ]},
    {"word": "movie", "forms": ("film", "streifen"), "cues": ("film", "flick"), "slot": "c",
     "templates": [
         ("the {c} was long .", "der {c} war lang ."),
         ("we talked about the {c} .", "wir sprachen ueber den {c} ."),
         ("everyone liked the {c} .", "allen gefiel der {c} ."),
     ]},
    {"word": "nice", "forms": ("schoen", "huebsch"), "cues": ("beautiful", "pretty"),
     "slot": "j", "templates": []},
]

DEFAULT_SPLITS = {"train": 2000, "valid": 100, "test": 200}
#: the files of a split (``{split}.{ext}``)
PROBE_FILES = ("src", "tgt", "docids", "probe.jsonl")


# ------------------------------------------------------------------- shapes of the probe
#: word-for-word phrases that lengthen a sentence to its drawn length (``sentence_len``); none
#: holds a word that a phenomenon scores, a noun, an adjective or a cue
PHRASES = [("today", "heute"), ("again", "wieder"), ("quietly", "leise"), ("at last", "endlich"),
           ("in the morning", "am morgen"), ("with my friend", "mit meinem freund"),
           ("after the rain", "nach dem regen"), ("for a while", "eine weile"),
           ("near the river", "am fluss"), ("at the station", "am bahnhof"),
           ("on monday", "am montag"), ("as usual", "wie immer"), ("in the city", "in der stadt"),
           ("before dinner", "vor dem essen"), ("quite suddenly", "ganz ploetzlich"),
           ("during the holidays", "in den ferien"), ("after school", "nach der schule"),
           ("once more", "noch einmal"), ("in the evening", "am abend"), ("at noon", "mittags")]
#: INTRO sentences by where their noun phrase stands (``cue_position``): it opens the sentence
#: (``first``) or ends it (``last``; ``middle``: a ``last`` one with phrases after it too)
INTRO_FIRST = [("a {j} {n} was here .", "{a} {j} {n} war hier ."), ("a {n} was here .", "{a} {n} war hier ."),
               ("a {j} {n} stood there .", "{a} {j} {n} stand dort ."), ("a {n} arrived .", "{a} {n} kam an .")]
INTRO_LAST = [("i saw a {j} {n} .", "ich sah {a} {j} {n} ."), ("i saw a {n} .", "ich sah {a} {n} ."),
              ("we found a {j} {n} .", "wir fanden {a} {j} {n} ."), ("we found a {n} .", "wir fanden {a} {n} ."),
              ("my friend bought a {j} {n} .", "mein freund kaufte {a} {j} {n} .")]
#: sentences between an antecedent and its pronoun that name another noun, of its own class
#: (``distractors``): the pronoun refers to the noun introduced with an article, never to one
#: after ``my``/``our``; {m}/{o} the possessive of the distractor's class
DISTRACTOR = [("my {n} was {j} .", "{m} {n} war {j} ."), ("my {n} is at home .", "{m} {n} ist zu hause ."),
              ("we sold our {n} .", "wir verkauften {o} {n} ."), ("my {n} broke .", "{m} {n} ging kaputt .")]
POSSESSIVE = {"m": ("mein", "unseren"), "f": ("meine", "unsere"), "n": ("mein", "unser")}
#: ``cue="determiner"``: the source article of an INTRO shows its class; the noun does not
DETERMINER = {"m": "un", "f": "una", "n": "uno"}
#: ``cue="two"``: the class is the agreement of two cues in two sentences, the INTRO's
#: demonstrative (this / that) and the sentence before it (the light on / off): m where they
#: agree (this + on, that + off), f where they differ; each alone says nothing
DEMONSTRATIVE = (("this", "dieses"), ("that", "jenes"))
LIGHT = [("the light was on .", "das licht war an ."), ("the light was off .", "das licht war aus .")]
CUES = ("noun", "determiner", "two")
CUE_POSITIONS = ("first", "middle", "last")

#: named settings of ``docctx-probe generate --setting`` (docs/probe.md): each changes what the
#: context must carry or how far; the options given on the command line override them
SETTINGS = {
    "default": {},
    "short": dict(sentence_len=(3, 5)),
    "short-distractors": dict(sentence_len=(3, 5), distances=(1, 2, 3), distractors=1.0),
    "long": dict(sentence_len=(15, 25)),
    "cue-first": dict(sentence_len=(6, 10), cue_position="first"),
    "cue-last": dict(sentence_len=(6, 10), cue_position="last"),
    "far-distractors": dict(distances=(2, 3), distractors=1.0),
    "determiner": dict(cue="determiner"),
    "two-cues": dict(cue="two", distances=(1, 2)),
    "large-vocabulary": dict(nouns_per_class=60, adjectives=40),
}


def _words(template: str) -> int:
    """Words of a source template, its final period not counted (a slot is one word)."""
    return len(template.split()) - template.endswith(" .")


def pseudo_words(n: int, avoid, stream: str) -> List[Tuple[str, str]]:
    """``n`` invented (source, target) word pairs, the same for the same ``stream`` (the
    vocabulary of a setting does not depend on the seed): source consonant-vowel syllables,
    target the reversed source with ``-e``; none equal to a word of ``avoid`` or to each other."""
    rng = random.Random(f"docctx-probe/vocabulary/{stream}")
    out, seen = [], set(avoid)
    while len(out) < n:
        src = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 3)))
        tgt = src[::-1] + "e"
        if src not in seen and tgt not in seen:
            seen.update((src, tgt))
            out.append((src, tgt))
    return out


def _template_words():
    """Every word of the templates, tables and phrases (what invented words must avoid)."""
    words = set()
    texts = [t for group in (INTRO, PRON, FILLER, INTRO_FIRST, INTRO_LAST, DISTRACTOR, LIGHT, PHRASES)
             for pair in group for t in pair]
    texts += [t for c in CONSISTENCY for pair in c["templates"] for t in pair]
    texts += [w for c in CONSISTENCY for w in (c["word"],) + c["forms"] + c["cues"]]
    texts += [w for v in list(NOUNS.values()) + [ADJS] for w in v.replace(":", " ").split()]
    texts += [w for c in CLASSES for w in c[1:]] + list(DETERMINER.values()) + \
        [w for pair in DEMONSTRATIVE for w in pair] + [w for pair in POSSESSIVE.values() for w in pair]
    for t in texts:
        words.update(t.split())
    return words


def vocabulary(n_classes: int = 2, nouns_per_class: Optional[int] = None,
               adjectives: Optional[int] = None):
    """The nouns (class -> (source, target) pairs) and adjectives of a setting: the tables'
    first ``nouns_per_class`` / ``adjectives`` (all of them for None), then invented words."""
    nouns = {}
    avoid = _template_words()
    for name, *_ in CLASSES[:n_classes]:
        table = _pairs(NOUNS[name])
        n = len(table) if nouns_per_class is None else nouns_per_class
        if n < 1:
            raise ValueError("nouns_per_class must be at least 1")
        nouns[name] = table[:n] + pseudo_words(max(0, n - len(table)), avoid, f"nouns/{name}")
        avoid |= {w for pair in nouns[name] for w in pair}
    table = _pairs(ADJS)
    n = len(table) if adjectives is None else adjectives
    if n < 1:
        raise ValueError("adjectives must be at least 1")
    return nouns, table[:n] + pseudo_words(max(0, n - len(table)), avoid, "adjectives")


class _Shape:
    """What a non-default setting changes in a document's sentences: their length (phrases of
    :data:`PHRASES` before or after the core template), the INTRO's noun phrase position, the
    cue (noun table, determiner, two cues), distractor sentences and the vocabulary. The
    default setting does not build one: its documents are those of the templates alone."""

    def __init__(self, sentence_len, cue_position, cue, distractors, classes):
        self.len = sentence_len
        self.cue_position, self.cue, self.distractors = cue_position, cue, distractors
        lo, hi = sentence_len if sentence_len else (1, 10 ** 6)
        if lo > hi or lo < 1:
            raise ValueError(f"sentence length {sentence_len}: expected 1 <= MIN <= MAX")
        if cue_position is None:
            intro = INTRO + INTRO_FIRST + INTRO_LAST if sentence_len else INTRO
        else:
            intro = INTRO_FIRST if cue_position == "first" else INTRO_LAST
        room = 1 if cue_position == "middle" else 0  # a phrase after the noun phrase
        # the INTRO's source article is a slot, for the cues that change it
        intro = [(re.sub(r"(^| )a (?=\{[jn]\})", r"\1{a} ", src), tgt) for src, tgt in intro]
        self.intro = self._fitting(intro, hi - room, "INTRO")
        self.pron = self._fitting(PRON, hi, "PRON")
        self.filler = self._fitting(FILLER, hi, "FILLER")
        self.distractor = self._fitting(DISTRACTOR, hi, "distractor")
        self.light = self._fitting(LIGHT, hi, "cue")
        self.cons = {c["word"]: [t for t in c["templates"] if _words(t[0]) <= hi] for c in CONSISTENCY}

    @staticmethod
    def _fitting(templates, hi, what):
        fit = [t for t in templates if _words(t[0]) <= hi]
        if not fit:
            shortest = min(_words(t[0]) for t in templates)
            raise ValueError(f"sentence length at most {hi}: the shortest {what} sentence has {shortest} words")
        return fit

    def lengthen(self, rng, tpl, intro=False):
        """``tpl`` with phrases before or after it up to a length drawn from ``sentence_len``
        (an INTRO keeps its noun phrase where ``cue_position`` puts it)."""
        if not self.len:
            return tpl
        need = max(0, rng.randint(*self.len) - _words(tpl[0]))
        where = {"first": "after", "last": "before", "middle": "both"}.get(self.cue_position) if intro else None
        if where == "both":
            need = max(need, 1)
        before, after = [], []
        unused = [p for p in PHRASES if f" {p[0]} " not in f" {tpl[0]} "]  # no phrase twice
        words = lambda p: len(p[0].split())  # noqa: E731
        while need:
            # a phrase that leaves words to fill only while a one-word phrase is left for them
            fit = [p for p in unused if words(p) == need
                   or words(p) < need and any(words(q) == 1 for q in unused if q is not p)]
            if not fit:  # (the 46 words of PHRASES make sentences of up to about 45 words)
                raise ValueError(f"sentence length {self.len}: not enough phrases")
            phrase = rng.choice(fit)
            unused.remove(phrase)
            side = where if where in ("before", "after") else (
                "after" if where == "both" and not after else rng.choice(("before", "after")))
            (before if side == "before" else after).append(phrase)
            need -= words(phrase)

        def join(i):
            core = tpl[i][:-2] if tpl[i].endswith(" .") else tpl[i]
            return " ".join([p[i] for p in before] + [core] + [p[i] for p in after]) + " ."
        return join(0), join(1)


def _pairs(s: str) -> List[Tuple[str, str]]:
    return [tuple(w.split(":")) for w in s.split()]


def _fill(tpl: Tuple[str, str], **slots) -> Tuple[str, List[str], Dict[str, int]]:
    """Fill a (source, target) template; return source, target tokens and slot positions."""
    src = tpl[0].format(**{k: v[0] for k, v in slots.items()})
    tgt, where = [], {}
    for tok in tpl[1].split():
        if tok.startswith("{") and tok.endswith("}"):
            where[tok[1:-1]] = len(tgt)
            tok = slots[tok[1:-1]][1]
        tgt.append(tok)
    return src, tgt, where


def _document(rng: random.Random, n_sent: int, classes, distances, consistency: bool,
              cued_anchors: bool, p_consistency_doc: float, p_gap: float, p_mention: float,
              nouns, adjs, shape: Optional[_Shape] = None):
    """One document: list of (src, tgt tokens, annotation items). ``nouns`` (class -> (source,
    target) pairs) and ``adjs`` are the setting's vocabulary; ``shape`` what a non-default
    setting changes (None: the templates as they are)."""
    cons, form, mentions, anchors = None, None, [], []  # positions of the consistency word
    if consistency and rng.random() < p_consistency_doc:
        cons = rng.choice(CONSISTENCY)
        k = rng.randrange(2)
        form, cue = cons["forms"][k], (cons["cues"][k] if cued_anchors else cons["word"])
    out = []

    def emit(tpl, slots, items=(), mention_slot=None, intro=False):
        """Fill and append a sentence. items: (annotation, slot) pairs whose target index is
        the slot's position; mention_slot holds the consistency word, if any."""
        pos = len(out)
        # an anchor mention's own source fixes the form (cued mode: the document's first
        # mention, and any mention too far from the previous one for a context window of
        # max(distances) sentences); free mode: only the first mention, which is a free choice
        anchor = not mentions or (cued_anchors and pos - mentions[-1] > max(distances))
        if mention_slot:
            slots[mention_slot] = (cue if anchor else cons["word"], form)
        if shape is not None:
            tpl = shape.lengthen(rng, tpl, intro=intro)
        src, tgt, where = _fill(tpl, **slots)
        items = [dict(it, index=where[slot]) for it, slot in items]
        if mention_slot:
            item = {"phenomenon": "consistency", "word": cons["word"],
                    "index": where[mention_slot], "expected": form,
                    "alternatives": list(cons["forms"])}
            if anchor:  # never scored
                item.update(anchor=True, cued=cued_anchors, distance=None, antecedent_pos=None)
                anchors.append(pos)
            else:  # repeats the nearest earlier mention, and the anchor that set the form
                item.update(distance=pos - mentions[-1], antecedent_pos=mentions[-1],
                            anchor_pos=anchors[-1])
            mentions.append(pos)
            items.append(item)
        out.append((src, tgt, sorted(items, key=lambda it: it["index"])))

    def adj_slot(tpl):  # the adjective slot takes an adjective consistency word sometimes
        use = (cons is not None and cons["slot"] == "j" and "{j}" in tpl[1]
               and rng.random() < p_mention)
        return "j" if use else None

    def filler():
        templates = None if cons is None else cons["templates"] if shape is None else shape.cons[cons["word"]]
        if cons is not None and cons["slot"] == "c" and templates and rng.random() < p_mention:
            emit(rng.choice(templates), {}, mention_slot="c")
        else:
            emit(rng.choice(FILLER if shape is None else shape.filler), {})

    def distractor():  # another noun, of its own class, after "my" / "our"
        other = rng.choice(classes)[0]
        mine, ours = POSSESSIVE[other]
        emit(rng.choice(shape.distractor), {"n": rng.choice(nouns[other]), "j": rng.choice(adjs),
                                            "m": ("my", mine), "o": ("our", ours)})

    cue_kind = "noun" if shape is None else shape.cue
    every_noun = [n for c in classes for n in nouns[c[0]]]
    while len(out) < n_sent:
        room = n_sent - len(out)
        d = rng.choice(distances)
        need = d + 1 + (cue_kind == "two")  # "two": the sentence before the INTRO is a cue
        if room < need or (room > need and rng.random() < p_gap):
            filler()
            continue
        name, nom, acc, art = rng.choice(classes)
        article = ("a", art)
        if cue_kind == "two":  # the light's state and the demonstrative agree for m only
            this = rng.randrange(2)
            emit(shape.light[this if name == classes[0][0] else 1 - this], {})
            article = DEMONSTRATIVE[this]
        elif cue_kind == "determiner":
            article = (DETERMINER[name], art)
        intro_pos = len(out)
        tpl = rng.choice(INTRO if shape is None else shape.intro)
        adj = rng.choice(adjs)  # (drawn before the noun)
        noun = rng.choice(nouns[name] if cue_kind == "noun" else every_noun)
        emit(tpl, {"a": article, "j": adj, "n": noun}, mention_slot=adj_slot(tpl), intro=True)
        between = 0
        for _ in range(d - 1):
            if shape is not None and shape.distractors and rng.random() < shape.distractors:
                distractor()
                between += 1
            else:
                filler()
        tpl = rng.choice(PRON if shape is None else shape.pron)
        slot = "p" if "{p}" in tpl[1] else "q"
        item = {"phenomenon": "anaphora", "expected": nom if slot == "p" else acc,
                "alternatives": sorted({c[1] if slot == "p" else c[2] for c in classes}),
                "distance": len(out) - intro_pos, "antecedent_pos": intro_pos, "class": name}
        if shape is not None:
            item["distractors"] = between
            if cue_kind == "two":
                item["cue_distances"] = [len(out) - intro_pos + 1, len(out) - intro_pos]
        emit(tpl, {"j": rng.choice(adjs), "p": ("it", nom), "q": ("it", acc)}, [(item, slot)],
             adj_slot(tpl))
    return out


def generate_probe(out_dir: str, splits: Optional[Dict[str, int]] = None, seed: int = 1,
                   doc_len: Tuple[int, int] = (4, 8), n_classes: int = 2,
                   distances: Sequence[int] = (1, 2), consistency: bool = True,
                   consistency_anchor: str = "cued", p_consistency_doc: float = 1.0,
                   p_gap: float = 0.2, p_mention: float = 0.8, sentence_len: Optional[Tuple[int, int]] = None,
                   cue_position: Optional[str] = None, cue: str = "noun", distractors: float = 0.0,
                   nouns_per_class: Optional[int] = None, adjectives: Optional[int] = None,
                   outputs=None) -> Dict[str, dict]:
    """Write ``{split}.src/.tgt/.docids/.probe.jsonl`` for every split into ``out_dir``.

    ``splits`` maps split name to number of documents (default ``DEFAULT_SPLITS``); each split
    has its own random stream derived from ``seed`` and the split name, so adding a split or
    resizing one does not change the others. ``doc_len`` is the (min, max) number of sentences
    per document, ``n_classes`` 2 (er/sie) or 3 (er/sie/es), ``distances`` the antecedent
    distances to draw from; ``consistency_anchor`` "cued" or "free" (see the module docstring).
    ``p_consistency_doc``: share of documents with a consistency word; ``p_mention``: chance
    that a slot able to hold it does; ``p_gap``: chance of a filler before an episode.

    The shape of the data (``docs/probe.md``; each setting of :data:`SETTINGS` is a set of
    these): ``sentence_len`` (min, max) words of every sentence, its final period not counted
    (None: the templates' own 2 to 8), reached with the phrases of :data:`PHRASES`;
    ``cue_position`` where the antecedent's noun phrase stands in its sentence (``first``,
    ``middle``, ``last``; None: the templates' mix); ``cue`` what decides the class: the noun
    (``noun``, a table to learn), the source article (``determiner``; the noun is drawn from
    every class) or the agreement of two cues in two sentences (``two``, two classes only);
    ``distractors`` the chance that a sentence between an antecedent and its pronoun names
    another noun (after ``my``/``our``) instead of being a filler; ``nouns_per_class`` and
    ``adjectives`` the vocabulary (None: 8 nouns a class and 9 adjectives; more are invented
    words, :func:`pseudo_words`). The corpus size is ``splits`` (2,000 training documents are
    about 12,000 sentences).
    ``outputs``: the run's output guard (:class:`~fairseq_docctx.data.outputs.Outputs`;
    ``docctx-probe generate``'s, which refuses files it did not write; default: one that
    replaces them). Every file is checked before any is written, and each is written whole.
    Returns per-split counts.
    """
    if consistency_anchor not in ("cued", "free"):
        raise ValueError("consistency_anchor must be 'cued' or 'free'")
    if not 2 <= n_classes <= 3:
        raise ValueError("n_classes must be 2 or 3")
    if cue not in CUES:
        raise ValueError(f"cue must be one of {', '.join(CUES)}")
    if cue_position is not None and cue_position not in CUE_POSITIONS:
        raise ValueError(f"cue_position must be one of {', '.join(CUE_POSITIONS)}")
    if cue == "two" and n_classes != 2:
        raise ValueError("cue 'two' (the agreement of two cues) decides between two classes only")
    if not 0.0 <= distractors <= 1.0:
        raise ValueError("distractors is a probability (0 to 1)")
    if min(doc_len) < max(distances) + 1 + (cue == "two") or doc_len[0] > doc_len[1]:
        raise ValueError(f"doc_len {doc_len} too short for distances {tuple(distances)}")
    nouns, adjs = vocabulary(n_classes, nouns_per_class, adjectives)
    shape = None
    if sentence_len or cue_position or cue != "noun" or distractors:
        shape = _Shape(sentence_len, cue_position, cue, distractors, CLASSES[:n_classes])
    splits = dict(DEFAULT_SPLITS if splits is None else splits)
    classes = CLASSES[:n_classes]
    if outputs is None:  # the Python API: the files are replaced, each written whole
        outputs = Outputs("docctx-probe", force=True)
    paths = {split: {ext: os.path.join(out_dir, f"{split}.{ext}") for ext in PROBE_FILES} for split in splits}
    outputs.folder(out_dir, f"--outdir {out_dir}")
    for split in splits:  # every file checked before any is written
        for p in paths[split].values():
            outputs.file(p, f"--outdir {out_dir}: {p}")
    stats = {}
    for split, n_docs in splits.items():
        rng = random.Random(f"docctx-probe/{seed}/{split}")  # str seeds are stable across runs
        counts = defaultdict(int)
        parts = {ext: outputs.start(p) for ext, p in paths[split].items()}
        files = {ext: open(tmp, "w", encoding="utf-8") for ext, (tmp, _) in parts.items()}
        try:
            line = 0
            for i in range(n_docs):
                doc_id = f"{split}-{i:05d}"
                doc = _document(rng, rng.randint(*doc_len), classes, tuple(distances),
                                consistency, consistency_anchor == "cued",
                                p_consistency_doc, p_gap, p_mention, nouns, adjs, shape)
                for pos, (src, tgt, items) in enumerate(doc):
                    files["src"].write(src + "\n")
                    files["tgt"].write(" ".join(tgt) + "\n")
                    files["docids"].write(doc_id + "\n")
                    rec = {"line": line, "doc": doc_id, "pos": pos, "items": items}
                    files["probe.jsonl"].write(json.dumps(rec) + "\n")
                    line += 1
                    for it in items:
                        counts[it["phenomenon"] + ("/anchor" if it.get("anchor") else "")] += 1
            stats[split] = {"documents": n_docs, "sentences": line, "items": dict(counts)}
        except BaseException:
            for f in files.values():
                f.close()
            for tmp, _ in parts.values():
                outputs.discard(tmp)
            raise
        for f in files.values():
            f.close()
        outputs.finish(list(parts.values()))
    return stats


# ----------------------------------------------------------------------------- scoring

def load_annotations(annotations: Union[str, Iterable[dict]]) -> List[dict]:
    if isinstance(annotations, (str, os.PathLike)):
        with open(annotations, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return list(annotations)


def _choices(hyp: str, items: List[dict]) -> List[Optional[str]]:
    """The hypothesis word chosen for each item (None if absent); see the module docstring."""
    toks = hyp.split()
    order = sorted(range(len(items)), key=lambda k: items[k]["index"])
    used: Dict[frozenset, int] = defaultdict(int)
    out: List[Optional[str]] = [None] * len(items)
    for k in order:
        alts = frozenset(items[k]["alternatives"])
        occ = [t for t in toks if t in alts]
        n = used[alts]
        used[alts] += 1
        out[k] = occ[n] if n < len(occ) else None
    return out


def score_probe(hypotheses: Sequence[str], annotations: Union[str, Iterable[dict]],
                consistency_against: str = "hypothesis",
                phenomena: Optional[Sequence[str]] = None) -> dict:
    """Score hypotheses (corpus order, one per annotated sentence) on the probe's items.

    ``consistency_against``: "hypothesis" (a mention must repeat the form the model itself
    produced at its anchor; unscorable if the anchor's output has neither form) or
    "reference" (must equal the reference form). ``phenomena`` restricts the
    pooled ``accuracy`` (default: every phenomenon present). Returns::

        {"accuracy", "correct", "total", "missing",
         "by_phenomenon": {name: {"accuracy", "correct", "total", "missing"}},
         "by_distance":   {"1": {...}, "2": {...}},             # pooled phenomena only
         "by_phenomenon_distance": {"anaphora/1": {...}, ...},
         "consistency_unscorable": n, "consistency_anchor_majority": share}

    ``consistency_anchor_majority`` is the share of the more frequent form (per word) among the
    model's anchor mentions: near 1.0 means the model always picks the same form, in which
    case consistency is trivially high and says nothing about context use (about 0.5 with
    cued anchors).
    """
    if consistency_against not in ("hypothesis", "reference"):
        raise ValueError("consistency_against must be 'hypothesis' or 'reference'")
    anns = load_annotations(annotations)
    if len(hypotheses) != len(anns):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(anns)} annotated sentences")
    chosen = {}  # (doc, pos, word) -> form the hypothesis used for a consistency word
    tallies: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0])  # correct, total, missing
    unscorable, anchor_forms = 0, defaultdict(lambda: defaultdict(int))
    pooled = set(phenomena) if phenomena is not None else None

    def add(key, ok, miss):
        t = tallies[key]
        t[0] += ok
        t[1] += 1
        t[2] += miss

    for hyp, rec in zip(hypotheses, anns):
        items = rec["items"]
        for it, got in zip(items, _choices(hyp, items)):
            name = it["phenomenon"]
            tallies["phen:" + name]  # listed even when none of its items can be scored
            if name == "consistency":
                chosen[(rec["doc"], rec["pos"], it["word"])] = got
                if it.get("anchor"):
                    if got is not None:
                        anchor_forms[it["word"]][got] += 1
                    continue
                if consistency_against == "hypothesis":
                    expected = chosen.get((rec["doc"], it["anchor_pos"], it["word"]))
                    if expected is None:
                        unscorable += 1
                        continue
                else:
                    expected = it["expected"]
            else:
                expected = it["expected"]
            ok, miss = int(got == expected), int(got is None)
            add("phen:" + name, ok, miss)
            add(f"pd:{name}/{it['distance']}", ok, miss)
            if pooled is None or name in pooled:
                add("all", ok, miss)
                add(f"dist:{it['distance']}", ok, miss)

    def summary(t):
        return {"accuracy": t[0] / t[1] if t[1] else None, "correct": t[0], "total": t[1],
                "missing": t[2]}

    res = summary(tallies["all"])
    res["by_phenomenon"] = {k[5:]: summary(v) for k, v in sorted(tallies.items())
                            if k.startswith("phen:")}
    res["by_distance"] = {k[5:]: summary(v) for k, v in sorted(tallies.items())
                          if k.startswith("dist:")}
    res["by_phenomenon_distance"] = {k[3:]: summary(v) for k, v in sorted(tallies.items())
                                     if k.startswith("pd:")}
    res["consistency_unscorable"] = unscorable
    n_anchor = sum(sum(f.values()) for f in anchor_forms.values())
    res["consistency_anchor_majority"] = (  # per word, pooled
        sum(max(f.values()) for f in anchor_forms.values()) / n_anchor if n_anchor else None)
    return res


def read_hypotheses(path: str, n_expected: Optional[int] = None) -> List[str]:
    """Hypotheses in corpus order from plain text (one per line) or fairseq-generate output
    (read by :func:`fairseq_docctx.evaluation.io.read_generate_output`: the first ``D-`` line
    of each id, ids ``0..n-1`` without gaps; ``--nbest`` > 1 safe)."""
    from .evaluation.io import looks_like_generate, read_generate_output

    if looks_like_generate(path):
        hyps, _ = read_generate_output(path, post_process="none")
        if n_expected is not None and len(hyps) < n_expected:
            raise ValueError(f"{path}: {n_expected - len(hyps)} of {n_expected} sentences have no "
                             "H- line (the last ones); was --required-batch-size-multiple 1 passed?")
    else:
        hyps = read_lines(path)
    if n_expected is not None and len(hyps) != n_expected:
        raise ValueError(f"{path}: {len(hyps)} hypotheses, expected {n_expected}")
    return hyps


# ------------------------------------------------------------------ evaluating a checkpoint

def source_documents(annotations: Union[str, Iterable[dict]], source: str) -> List[List[str]]:
    """The source sentences of a probe split (``{split}.src``), grouped into the documents of
    its annotations (``{split}.probe.jsonl``: one record per sentence, in corpus order)."""
    anns = load_annotations(annotations)
    lines = read_lines(source)
    if len(lines) != len(anns):
        raise ValueError(f"{source}: {len(lines)} sentences, but the annotations have "
                         f"{len(anns)} records: give the .src file of the same split")
    docs: List[List[str]] = []
    for i, (line, rec) in enumerate(zip(lines, anns)):
        if rec.get("line", i) != i:
            raise ValueError(f"annotation record {i + 1} says line {rec['line']}: the "
                             "annotations are not in corpus order")
        if i == 0 or rec["doc"] != anns[i - 1]["doc"]:
            docs.append([])
        docs[-1].append(line)
    return docs


def translate_probe(hub, documents: Sequence[Sequence[str]], beam: int = 1,
                    batch_size: int = 64) -> List[str]:
    """Translate probe documents in document order with a loaded model
    (:func:`fairseq_docctx.hub.from_pretrained`: a model with target context reads its own
    previous translations); returns the hypotheses in corpus order."""
    out = hub.translate_documents(documents, beam=beam, batch_size=batch_size)
    return [h for doc in out for h in doc]


def evaluate_checkpoint(path: str, data: str, annotations: str, split: str = "test",
                        source: Optional[str] = None, beam: int = 1, batch_size: int = 64,
                        cxmi: bool = True, seed: int = 1) -> dict:
    """Score one checkpoint on the probe's context-dependent words and its context usage.

    ``data`` is the binarized probe (the checkpoint's dictionaries and the ``split`` CXMI
    scores); ``annotations`` the split's ``.probe.jsonl``, whose ``.src`` (default: next to it)
    is translated in document order with beam ``beam``. Returns ``{"path", "arch",
    "context_size", "context_sides", "reads_context", "hypotheses", "probe", "cxmi"}``:
    ``probe`` is the :func:`score_probe` report, ``cxmi`` the report of
    :func:`fairseq_docctx.evaluation.cxmi.cxmi_split` (``None`` with ``cxmi=False``) — CXMI
    (Fernandes et al. 2021, *Measuring and Increasing Context Usage in Context-Aware Machine
    Translation*): the mean per-token log-likelihood gain of the reference given the true
    context over no context."""
    from .evaluation.cxmi import cxmi_split
    from .evaluation.scoring import ModelScorer, quiet_logs
    from .hub import from_pretrained

    quiet_logs()
    anns = load_annotations(annotations)
    if source is None:
        if (not isinstance(annotations, (str, os.PathLike))
                or not str(annotations).endswith(".probe.jsonl")):
            raise ValueError("give the source file: the annotations are not a "
                             "{split}.probe.jsonl file")
        source = str(annotations)[: -len(".probe.jsonl")] + ".src"
    docs = source_documents(anns, source)
    hub = from_pretrained(path, data=data)
    hyps = translate_probe(hub, docs, beam=beam, batch_size=batch_size)
    scorer = ModelScorer(hub)
    cfg = hub.task.cfg
    return {
        "path": path, "arch": hub.cfg.model._name, "context_size": scorer.context_size,
        "context_sides": str(cfg.context_sides), "reads_context": bool(scorer.reads_context),
        "hypotheses": hyps, "probe": score_probe(hyps, anns),
        "cxmi": cxmi_split(scorer, split, seed=seed) if cxmi else None,
    }


def find_example(annotations: Union[str, Iterable[dict]], phenomenon: str = "anaphora",
                 distance: Optional[int] = None, hypotheses: Optional[Sequence[str]] = None,
                 wrong: Optional[Sequence[str]] = None) -> dict:
    """A sentence to show: the first annotated item of ``phenomenon`` at ``distance`` (default:
    the largest there is) that ``hypotheses`` get right and ``wrong`` (e.g. a sentence-level
    model's output) gets wrong, where given; if none qualifies, the first at that distance.
    Returns ``{"doc", "doc_number", "sentence", "line", "expected", "distance"}``
    (``doc_number`` and ``sentence`` are 0-based)."""
    anns = load_annotations(annotations)
    for name, hyp in (("hypotheses", hypotheses), ("wrong", wrong)):
        if hyp is not None and len(hyp) != len(anns):
            raise ValueError(f"{name}: {len(hyp)} sentences for {len(anns)} annotated sentences")
    items = []  # (record number, item, choice in hypotheses, choice in wrong)
    for r, rec in enumerate(anns):
        got = _choices(hypotheses[r], rec["items"]) if hypotheses is not None else None
        bad = _choices(wrong[r], rec["items"]) if wrong is not None else None
        for k, it in enumerate(rec["items"]):
            if it["phenomenon"] == phenomenon and not it.get("anchor"):
                items.append((r, it, got and got[k], bad and bad[k]))
    if not items:
        raise ValueError(f"no {phenomenon} item in the annotations")
    d = distance if distance is not None else max(it["distance"] for _, it, _, _ in items)
    at_d = [x for x in items if x[1]["distance"] == d]
    if not at_d:
        raise ValueError(f"no {phenomenon} item at distance {d}")
    if phenomenon == "consistency":  # the expected form is the model's own at the anchor
        good = at_d
    else:
        good = [x for x in at_d if (hypotheses is None or x[2] == x[1]["expected"])
                and (wrong is None or x[3] != x[1]["expected"])]
    r, it, _, _ = (good or at_d)[0]
    doc_numbers = {}
    for rec in anns:
        doc_numbers.setdefault(rec["doc"], len(doc_numbers))
    rec = anns[r]
    return {"doc": rec["doc"], "doc_number": doc_numbers[rec["doc"]], "sentence": rec["pos"],
            "line": rec.get("line", r), "expected": it["expected"], "distance": it["distance"]}


def _pct(s: Optional[dict]) -> str:
    if not s or s.get("accuracy") is None:
        return "n/a"
    return f"{100 * s['accuracy']:.1f}% ({s['correct']}/{s['total']})"


def format_comparison(results: Dict[str, dict]) -> str:
    """The reports of :func:`evaluate_checkpoint` side by side, one column per model."""
    names = list(results)
    rows: List[Tuple[str, List[str]]] = []

    def row(label, fn):
        rows.append((label, [fn(results[n]) for n in names]))

    def ctx(r):
        return f"{r['context_size']} prev. ({r['context_sides']})" if r["reads_context"] else "none"

    row("architecture", lambda r: r["arch"])
    row("context read", ctx)
    distances = sorted({k.split("/")[1] for r in results.values()
                        for k in r["probe"]["by_phenomenon_distance"] if k.startswith("anaphora/")},
                       key=int)
    row("pronoun it -> er/sie (anaphora)",
        lambda r: _pct(r["probe"]["by_phenomenon"].get("anaphora")))
    for d in distances:
        row(f"  antecedent {d} sentence{'s' if d != '1' else ''} back",
            lambda r, d=d: _pct(r["probe"]["by_phenomenon_distance"].get(f"anaphora/{d}")))
    if any("consistency" in r["probe"]["by_phenomenon"] for r in results.values()):
        row("same word as earlier (consistency)",
            lambda r: _pct(r["probe"]["by_phenomenon"].get("consistency")))
    row("all context-dependent words", lambda r: _pct(r["probe"]))

    def cx(key, sub=None):
        def f(r):
            c = r.get("cxmi")
            c = c and (c.get(sub) if sub else c)
            return "n/a" if not c or c.get(key) is None else f"{c[key]:+.4f}"
        return f

    row("CXMI, nats/token (true context)", cx("cxmi"))
    row("  sentences with context only", cx("cxmi", "with_context"))
    row("  random context instead", cx("cxmi_random"))
    width = max(len(label) for label, _ in rows)
    cols = [max([len(n)] + [len(v[i]) for _, v in rows]) for i, n in enumerate(names)]

    def line(label, vals):
        return "  ".join([label.ljust(width)] + [v.rjust(w) for v, w in zip(vals, cols)])

    out = [line("", names), line("", ["-" * w for w in cols])]
    out += [line(label, vals) for label, vals in rows]
    return "\n".join(out)
