"""Discourse metrics of the papers: pronoun/noun translation accuracy, lexical cohesion, coherence.

Words are ``\\w+`` runs and single punctuation marks (regex ``\\w+|[^\\w\\s]``; ``l'homme`` is
``l ' homme``), compared lowercased, unless ``--tokenize none`` (split at whitespace, for
text that matches given alignment files).

**Pronoun / noun accuracy** (APT-style, Miculicich Werlen & Popescu-Belis 2017, extended to
nouns as in Miculicich et al. 2018). Source–reference and source–hypothesis word alignments
(``eflomal`` run once over both pairs, forward and reverse links symmetrized with
grow-diag-final-and, or Pharaoh ``i-j`` files given with ``--align-ref/--align-hyp``). Each
reference word that is a pronoun of the target language (``PRONOUNS``) — or a noun — is an
item: the source words aligned to it, then the hypothesis words aligned to those source
words. The item is *correct* when the reference word is among those hypothesis words,
*different* when they are other words, *missing* when there are none; a reference word aligned
to no source word is *not evaluated* (counted). Accuracy = correct / (correct + different +
missing), summed over the corpus (per document: over the document). Equivalent pronouns
(APT's case 2) are not credited. Nouns: English — words whose WordNet noun synsets are at
least as many as their verb+adjective+adverb synsets (no offline POS tagger exists here);
German — capitalised words not at the start of a sentence; any language — a list given with
``--noun-list`` (one noun a line). Function words (``FUNCTION_WORDS``) are never nouns.

**Lexical cohesion** (Wong & Kit 2012, as in Miculicich et al. 2018): the content words of a
document (alphabetic words of 2+ letters not in ``FUNCTION_WORDS``) in order; a content word
is cohesive if an earlier content word of the same document is the same word (lowercased;
English: or the same WordNet base form), a WordNet synonym (shares a synset) or a direct
hypernym/hyponym (superordinate/subordinate, instance relations included). WordNet relations
are English only; other languages count repetitions. Document score = cohesive / content
words; corpus score = mean of the document scores (the papers' "average ratio per document").

**Coherence** (Lapata & Barzilay 2005 as in Kuang & Xiong 2018): a sentence's vector is the
mean of its words' vectors (words without a vector are skipped), the document score the mean
cosine similarity of adjacent sentences, the corpus score the mean of the document scores
(documents with fewer than two scorable sentences are left out and counted). Vectors from a
word2vec text file (``--vectors``) or from a fairseq checkpoint's decoder embedding matrix
with its dictionary (``--checkpoint``/``--dict``, text split into the model's tokens with
``--spm-model`` or at whitespace).
"""
import re
from collections import Counter
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from fairseq_docctx.data import alignment
from fairseq_docctx.evaluation.io import Corpus, ScoreInputError

WORD_RE = re.compile(r"\w+|[^\w\s]")

# personal, possessive and reflexive pronouns (lowercase); homographs of articles and
# prepositions (French le/la/les/l/en, German der/die/das) are left out
PRONOUNS = {
    "en": set("""i me my mine myself you your yours yourself yourselves he him his himself she her
        hers herself it its itself we us our ours ourselves they them their theirs themselves""".split()),
    "de": set("""ich mich mir mein meine meinen meinem meiner meines du dich dir dein deine deinen
        deinem deiner deines er ihn ihm sein seine seinen seinem seiner seines sie ihr ihre ihren
        ihrem ihrer ihres es wir uns unser unsere unseren unserem unserer unseres euch euer eure
        euren eurem eurer eures ihnen sich""".split()),
    "fr": set("""je j me m moi mon ma mes tu te t toi ton ta tes il elle lui se s soi son sa ses
        nous notre nos vous votre vos ils elles eux leur leurs on y ce c ça cela ceci celui celle
        ceux celles mien mienne miens miennes tien tienne siens sienne siennes""".split()),
}

_EN_FUNCTION = """a an the and or but nor so yet if then else than as of at by for from in into on onto
    to with without within about above across after against along among around before behind below
    beneath beside besides between beyond down during except inside near off out outside over past
    since through throughout till toward towards under underneath until up upon via per
    is am are was were be been being have has had having do does did doing done will would shall
    should can could may might must ought not no nor n't s t d ll m re ve
    this that these those there here where when why how what which who whom whose whatever whoever
    all any both each either neither every few many more most much other another some such own same
    very too also just only even still again ever never always often already quite rather really
    now then once twice yes oh ok okay well like one ones something anything nothing everything
    someone anyone everyone somebody anybody nobody everybody because although though while whether
    unless however therefore thus""".split()
_DE_FUNCTION = """der die das den dem des ein eine einen einem einer eines kein keine keinen keinem keiner
    keines und oder aber doch sondern denn dass daß ob wenn weil als wie so auch noch schon nur
    nicht nie sehr mehr viel viele wenig alle alles jede jeder jedes jeden jedem dieser diese
    dieses diesen diesem jener jene jenes welche welcher welches was wer wen wem wessen wo wann
    warum wie da dort hier dann jetzt heute immer ja nein in im ins an am ans auf aus bei beim mit
    nach von vom vor zu zum zur über unter durch für gegen ohne um bis seit zwischen hinter neben
    während wegen trotz bin bist ist sind seid war waren warst wart sein gewesen habe hast hat
    haben habt hatte hatten werde wirst wird werden werdet wurde wurden worden kann kannst können
    könnt konnte konnten muss musst müssen mussten soll sollen sollte sollten will willst wollen
    wollte darf dürfen mag mögen möchte man etwas nichts""".split()
_FR_FUNCTION = """le la les l un une des du de d au aux et ou mais donc or ni car que qu qui quoi dont où
    si ne n pas plus jamais rien personne très trop aussi bien tout tous toute toutes autre autres
    même mêmes quel quelle quels quelles quelque quelques chaque ceci cela ça en y dans sur sous
    avec sans pour par entre vers chez depuis pendant avant après contre selon comme est sont suis
    es sommes êtes était étaient été être ai as a avons avez ont avait avaient eu avoir fait faire
    peut peuvent pouvait doit doivent va vont ici là alors puis encore déjà toujours oui non""".split()
FUNCTION_WORDS = {
    "en": set(_EN_FUNCTION) | PRONOUNS["en"],
    "de": set(_DE_FUNCTION) | PRONOUNS["de"],
    "fr": set(_FR_FUNCTION) | PRONOUNS["fr"],
}


def tokenize(sentence: str, mode: str = "words") -> List[str]:
    return sentence.split() if mode == "none" else WORD_RE.findall(sentence)


# ------------------------------------------------------------------------------------------
# alignment


def parse_pharaoh(line: str, path: str = "<alignment>", lineno: int = 0,
                  n_src: Optional[int] = None, n_tgt: Optional[int] = None) -> Set[Tuple[int, int]]:
    """:func:`fairseq_docctx.data.alignment.parse_pharaoh`, its errors as :class:`ScoreInputError`."""
    try:
        return alignment.parse_pharaoh(line, path, lineno, n_src, n_tgt)
    except alignment.AlignmentError as e:
        raise ScoreInputError(str(e)) from None


def read_alignment_file(path: str, src_tokens: Sequence[Sequence[str]], tgt_tokens: Sequence[Sequence[str]]):
    try:
        return alignment.read_alignment_lines(path, src_tokens, tgt_tokens)
    except alignment.AlignmentError as e:
        raise ScoreInputError(str(e)) from None


grow_diag_final_and = alignment.grow_diag_final_and


def eflomal_align(src_tokens: Sequence[Sequence[str]], tgt_tokens: Sequence[Sequence[str]],
                  symmetrize: str = "grow-diag-final-and", seed_iterations=None) -> List[Set[Tuple[int, int]]]:
    """Word alignment of each sentence pair with eflomal (PyPI ``eflomal``;
    :func:`fairseq_docctx.data.alignment.eflomal_align`), its errors as :class:`ScoreInputError`."""
    try:
        return alignment.eflomal_align(src_tokens, tgt_tokens, symmetrize, seed_iterations,
                                       alternative="alignment files (--align-ref/--align-hyp)")
    except alignment.AlignmentError as e:
        raise ScoreInputError(str(e)) from None


# ------------------------------------------------------------------------------------------
# pronoun / noun accuracy


class NounTagger:
    """Decides which (target-language) words are nouns; see the module docstring."""

    def __init__(self, lang: str, noun_list: Optional[str] = None):
        self.lang, self.nouns, self.wn = lang, None, None
        self.function = FUNCTION_WORDS.get(lang, set())
        if noun_list:
            from fairseq_docctx.data.documents import read_lines

            self.nouns = {w.strip().lower() for w in read_lines(noun_list) if w.strip()}
            self.method = f"noun list {noun_list}"
        elif lang == "en":
            from fairseq_docctx.evaluation.wordnet import load_wordnet

            self.wn = load_wordnet()
            self.method = "WordNet: noun synsets >= verb+adj+adv synsets"
        elif lang == "de":
            self.method = "capitalised, not sentence-initial"
        else:
            raise ScoreInputError(f"no noun identification for language {lang!r}: give --noun-list FILE")
        self._cache = {}

    def is_noun(self, tokens: Sequence[str], k: int) -> bool:
        w = tokens[k]
        lw = w.lower()
        if not w.isalpha() or lw in self.function:
            return False
        if self.nouns is not None:
            return lw in self.nouns
        if self.lang == "de":
            return k > 0 and w[0].isupper()
        if lw not in self._cache:
            n = len(self.wn.synsets(lw, "n"))
            other = sum(len(self.wn.synsets(lw, p)) for p in ("v", "a", "r"))
            self._cache[lw] = n > 0 and n >= other
        return self._cache[lw]


def accuracy_counts(src: Sequence[Sequence[str]], ref: Sequence[Sequence[str]], hyp: Sequence[Sequence[str]],
                    align_ref, align_hyp, select) -> Counter:
    """Counts ``correct``/``different``/``missing``/``unaligned`` over sentence pairs;
    ``select(ref_tokens, j)`` says whether reference word ``j`` is an item."""
    c = Counter(correct=0, different=0, missing=0, unaligned=0)
    for s, r, h, ar, ah in zip(src, ref, hyp, align_ref, align_hyp):
        for j in range(len(r)):
            if not select(r, j):
                continue
            srcs = {i for i, jj in ar if jj == j}
            if not srcs:
                c["unaligned"] += 1
                continue
            words = {h[k].lower() for i, k in ah if i in srcs}
            if not words:
                c["missing"] += 1
            elif r[j].lower() in words:
                c["correct"] += 1
            else:
                c["different"] += 1
    return c


def _acc(c: Counter) -> Optional[float]:
    n = c["correct"] + c["different"] + c["missing"]
    return 100.0 * c["correct"] / n if n else None


def translation_accuracy(corpus: Corpus, lang: str, *, kinds=("pronoun", "noun"), tokenize_mode="words",
                         align_ref: Optional[str] = None, align_hyp: Optional[str] = None,
                         noun_list: Optional[str] = None, symmetrize="grow-diag-final-and") -> Dict:
    if corpus.ref is None or corpus.src is None:
        raise ScoreInputError("pronoun/noun accuracy needs sources (--src) and references (--ref)")
    src = [tokenize(s, tokenize_mode) for s in corpus.flat("src")]
    ref = [tokenize(s, tokenize_mode) for s in corpus.flat("ref")]
    hyp = [tokenize(s, tokenize_mode) for s in corpus.flat("hyp")]
    if (align_ref is None) != (align_hyp is None):
        raise ScoreInputError("give both --align-ref and --align-hyp, or neither (eflomal aligns)")
    if align_ref:
        ar = read_alignment_file(align_ref, src, ref)
        ah = read_alignment_file(align_hyp, src, hyp)
        method = f"alignments from {align_ref} and {align_hyp}"
    else:
        both = eflomal_align(src + src, ref + hyp, symmetrize)
        ar, ah = both[: len(src)], both[len(src):]
        method = f"eflomal (source-reference and source-hypothesis in one run), {symmetrize}"
    selectors = {}
    if "pronoun" in kinds:
        if lang not in PRONOUNS:
            raise ScoreInputError(f"no pronoun list for target language {lang!r} (have: {', '.join(sorted(PRONOUNS))})")
        plist = PRONOUNS[lang]
        selectors["pronoun"] = (lambda r, j: r[j].lower() in plist, f"{len(plist)} {lang} pronouns")
    if "noun" in kinds:
        tagger = NounTagger(lang, noun_list)
        selectors["noun"] = (tagger.is_noun, tagger.method)
    out = {}
    bounds = np.cumsum([0] + [len(d) for d in corpus.hyp])
    for kind, (sel, how) in selectors.items():
        total = Counter()
        per_doc = {}
        for k, d in enumerate(corpus.doc_ids):
            a, b = bounds[k], bounds[k + 1]
            c = accuracy_counts(src[a:b], ref[a:b], hyp[a:b], ar[a:b], ah[a:b], sel)
            total.update(c)
            per_doc[d] = _acc(c)
        out[f"{kind}_accuracy"] = {"score": _acc(total), "counts": dict(total), "per_document": per_doc,
                                   "method": f"{method}; items: {how}"}
    return out


# ------------------------------------------------------------------------------------------
# lexical cohesion


class CohesionScorer:
    def __init__(self, lang: str):
        self.lang = lang
        self.function = FUNCTION_WORDS.get(lang)
        if self.function is None:
            raise ScoreInputError(f"no function-word list for language {lang!r} (have: {', '.join(sorted(FUNCTION_WORDS))})")
        self.wn = None
        if lang == "en":
            from fairseq_docctx.evaluation.wordnet import load_wordnet

            self.wn = load_wordnet()
        self._info = {}

    def content_words(self, sentences: Sequence[str], tokenize_mode="words") -> List[str]:
        return [w.lower() for s in sentences for w in tokenize(s, tokenize_mode)
                if w.isalpha() and len(w) > 1 and w.lower() not in self.function]

    def _word_info(self, w):
        """(base forms, synsets, synsets related by one hypernym/hyponym step)."""
        if w not in self._info:
            if self.wn is None:
                self._info[w] = ({w}, set(), set())
            else:
                syns = set(self.wn.synsets(w))
                bases = {w} | {self.wn.morphy(w, p) for p in "nvar"} - {None}
                related = set()
                for s in syns:
                    related.update(s.hypernyms() + s.instance_hypernyms() + s.hyponyms() + s.instance_hyponyms())
                self._info[w] = (bases, syns, related)
        return self._info[w]

    def relation(self, w: str, earlier: Sequence[str]) -> Optional[str]:
        """``repetition``, ``synonym``, ``hypernym/hyponym`` or None."""
        bases, syns, related = self._word_info(w)
        for e in earlier:
            if e == w or bases & self._word_info(e)[0]:
                return "repetition"
        for e in earlier:
            if syns & self._word_info(e)[1]:
                return "synonym"
        for e in earlier:
            if related & self._word_info(e)[1]:
                return "hypernym/hyponym"
        return None

    def document(self, sentences: Sequence[str], tokenize_mode="words") -> Tuple[Counter, int]:
        words = self.content_words(sentences, tokenize_mode)
        c = Counter()
        seen: List[str] = []
        seen_set = set()
        for w in words:
            rel = "repetition" if w in seen_set else self.relation(w, seen)
            if rel:
                c[rel] += 1
            if w not in seen_set:
                seen.append(w)
                seen_set.add(w)
        return c, len(words)


def lexical_cohesion(docs: Sequence[Sequence[str]], doc_ids: Sequence[str], lang: str,
                     tokenize_mode="words") -> Dict:
    scorer = CohesionScorer(lang)
    per_doc, total, n_total, skipped = {}, Counter(), 0, 0
    for d, sents in zip(doc_ids, docs):
        c, n = scorer.document(sents, tokenize_mode)
        total.update(c)
        n_total += n
        if n:
            per_doc[d] = 100.0 * sum(c.values()) / n
        else:
            per_doc[d] = None
            skipped += 1
    vals = [v for v in per_doc.values() if v is not None]
    rel = "repetition, WordNet synonym, direct hypernym/hyponym" if scorer.wn else "repetition only: no WordNet for this language"
    return {"score": sum(vals) / len(vals) if vals else None,
            "micro": 100.0 * sum(total.values()) / n_total if n_total else None,
            "counts": {**{k: total[k] for k in ("repetition", "synonym", "hypernym/hyponym")}, "content_words": n_total},
            "documents_without_content_words": skipped, "per_document": per_doc,
            "method": f"Wong & Kit 2012 ({rel}); corpus = mean of document ratios"}


# ------------------------------------------------------------------------------------------
# coherence


class WordVectors:
    """Token -> vector, from a word2vec text file or a fairseq checkpoint + dictionary."""

    def __init__(self, vectors: Dict[str, np.ndarray], tokenizer, source: str):
        self.vectors, self.tokenizer, self.source = vectors, tokenizer, source

    @classmethod
    def from_word2vec(cls, path: str) -> "WordVectors":
        from fairseq_docctx.data.documents import read_lines

        vecs, dim = {}, None
        for k, line in enumerate(read_lines(path), 1):
            parts = line.rstrip().split(" ")
            if k == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # "<count> <dim>" header
            if len(parts) < 2:
                if not line.strip():
                    continue
                raise ScoreInputError(f"{path}:{k}: expected 'word v1 v2 ...'")
            try:
                v = np.array([float(x) for x in parts[1:]], dtype=np.float64)
            except ValueError:
                raise ScoreInputError(f"{path}:{k}: non-numeric vector component") from None
            if dim is None:
                dim = len(v)
            elif len(v) != dim:
                raise ScoreInputError(f"{path}:{k}: {len(v)} components, earlier lines have {dim}")
            vecs[parts[0]] = v
        if not vecs:
            raise ScoreInputError(f"{path}: no vectors")
        return cls(vecs, lambda s: re.findall(r"\w+", s), f"word2vec file {path}")

    @classmethod
    def from_checkpoint(cls, ckpt: str, dict_path: str, spm_model: Optional[str] = None) -> "WordVectors":
        from fairseq.data import Dictionary

        from fairseq_docctx.inference.checkpoint import CheckpointError, load_checkpoint_state

        try:
            state = load_checkpoint_state(ckpt)
        except CheckpointError as e:
            raise ScoreInputError(str(e)) from None
        model = state["model"]
        key = next((k for k in ("decoder.embed_tokens.weight", "encoder.embed_tokens.weight") if k in model), None)
        if key is None:
            raise ScoreInputError(f"{ckpt}: no decoder/encoder embed_tokens.weight in the model")
        emb = model[key].float().numpy()
        d = Dictionary.load(dict_path)
        if len(d) != emb.shape[0]:
            raise ScoreInputError(f"{dict_path} has {len(d)} symbols but {ckpt}'s {key} has {emb.shape[0]} rows")
        specials = {d.bos_word, d.pad_word, d.eos_word, d.unk_word}
        vecs = {w: emb[i] for i, w in enumerate(d.symbols) if w not in specials}
        if spm_model:
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(model_file=spm_model)
            tok = lambda s: sp.encode(s, out_type=str)  # noqa: E731
        else:
            tok = str.split
        return cls(vecs, tok, f"{ckpt} ({key}) with {dict_path}" + (f" and {spm_model}" if spm_model else ""))

    def sentence_vector(self, sentence: str) -> Optional[np.ndarray]:
        vs = []
        for t in self.tokenizer(sentence):
            v = self.vectors.get(t)
            if v is None:
                v = self.vectors.get(t.lower())
            if v is not None:
                vs.append(v)
        return np.mean(vs, axis=0) if vs else None


def _cos(a, b) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def coherence(docs: Sequence[Sequence[str]], doc_ids: Sequence[str], vectors: WordVectors) -> Dict:
    per_doc, skipped_docs, no_vector = {}, 0, 0
    for d, sents in zip(doc_ids, docs):
        vs = [vectors.sentence_vector(s) for s in sents]
        no_vector += sum(v is None for v in vs)
        sims = [_cos(a, b) for a, b in zip(vs, vs[1:]) if a is not None and b is not None]
        if sims:
            per_doc[d] = sum(sims) / len(sims)
        else:
            per_doc[d] = None
            skipped_docs += 1
    vals = [v for v in per_doc.values() if v is not None]
    return {"score": sum(vals) / len(vals) if vals else None, "per_document": per_doc,
            "documents_left_out": skipped_docs, "sentences_without_vector": no_vector,
            "method": f"mean cosine of adjacent sentences' mean word vectors ({vectors.source}); "
                      "corpus = mean of document scores"}


# ------------------------------------------------------------------------------------------
# command line
