"""Pretrained fairseq translation releases as the vocabulary of a document data folder.

``docctx-prepare --pretrained DIR`` (:mod:`.prepare`) reads here what a released fairseq
translation model was built with, from the files of its release directory, so that the
binarized data carries the pretrained model's own ids:

* the **dictionary** as the model was built with it: fairseq's ``Dictionary.load`` of the
  release file, then every symbol the family's task adds, in the task's order (the language
  tokens of ``translation_multi_simple_epoch``, added by fairseq's own
  :func:`fairseq.data.multilingual.multilingual_utils.augment_dictionary`; ``<mask>`` for the
  mBART token style; NLLB's three data-source tags). Its length is the checkpoint's number of
  embedding rows;
* the **segmentation** (:data:`SEGMENTATIONS`): the release's SentencePiece model (as fairseq's
  ``sentencepiece`` BPE encodes: the pieces joined by spaces); its BPE codes after Moses
  tokenization (:func:`moses`, fairseq's own ``moses`` tokenizer with its default options),
  fastBPE codes applied as fastBPE applies them (:class:`FastBPE`), subword-nmt codes by
  fairseq's own ``subword_nmt`` BPE (:func:`subword_nmt_bpe`); or none (``none``: pre-tokenized
  text, used as it is);
* the **language tokens** of the families that prepend them to every sentence
  (``translation_multi_simple_epoch --encoder-langtok src --decoder-langtok``), and those of
  mBART-25, which ``translation_from_pretrained_bart`` places at the ends instead (placement
  ``bart``: the source token after the source's ``</s>``, the target token as the decoder's
  first input; the data folder's sentences carry none, the task places them).

The families (:data:`FAMILIES`) and the files each release holds:

``transformer``  fairseq ``transformer`` checkpoints with their own ``dict.{src,tgt}.txt`` and the
                 segmentation they were trained with, found in the folder (:func:`transformer_segmentation`):
                 a SentencePiece model (any ``*.model``), BPE codes (``bpecodes``, ``codes``, ``code``,
                 ``*.codes``: fastBPE's ``LEFT RIGHT COUNT`` lines, as the WMT19 En<->De releases of Ng
                 et al. 2019 have them, or subword-nmt's, as fairseq's ``examples/translation`` scripts
                 learn them; both after Moses tokenization), or none (pre-tokenized text); no language
                 tokens.
``m2m100``       M2M-100 (Fan et al. 2021): ``model_dict.128k.txt`` (or ``data_dict.128k.txt``),
                 ``spm.128k.model``, ``language_pairs*.txt`` (the language list is the sorted set of the
                 pairs' languages, as ``translation_multi_simple_epoch`` infers it from ``--lang-pairs``);
                 tokens ``__en__``, then the 8 ``madeupwordNNNN`` symbols ``model_dict.128k.txt`` ends with
                 (128,112 embedding rows for either file).
``nllb``         NLLB-200 dense (NLLB Team 2022): ``dictionary.txt``, the SPM-200 model
                 (``flores200_sacrebleu_tokenizer_spm.model`` or ``sentencepiece.bpe.model``),
                 ``langs.txt`` (``examples/nllb/modeling/scripts/flores200/langs.txt`` of fairseq's
                 ``nllb`` branch, comma-separated); tokens ``__eng_Latn__``, then the data-source
                 tags ``<MINED_DATA> <MMT_BT_DATA> <SMT_BT_DATA>`` (256,206 embedding rows for
                 255,997 dictionary lines: fairseq issue #4557).
``mbart50``      mBART-50 fine-tuned (Tang et al. 2020): ``dict.{xx_XX}.txt`` (or ``dict.txt``),
                 ``sentence.bpe.model``, ``ML50_langs.txt`` (one language a line, in order);
                 tokens ``[en_XX]`` then ``<mask>``.
``mbart25``      mBART-25 (Liu et al. 2020), ``mbart.cc25``: ``dict.txt``, ``sentence.bpe.model``
                 and no language file: the 25 languages of its pretraining in the order of
                 fairseq's ``examples/mbart`` (``--langs ar_AR,cs_CZ,...``, :data:`MBART25_LANGS`);
                 tokens ``[en_XX]`` then ``<mask>``, added by ``translation_from_pretrained_bart``.
"""
import functools
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .paths import file_sha1
from .release_common import HF_SEGMENTATION, PretrainedError
from .release_common import langtok_langs as _langtok_langs

FAMILIES = ("transformer", "m2m100", "nllb", "mbart50", "mbart25")
#: where a family puts its language tokens (None: it has none). ``prepend``: first in every
#: source and target sentence (``translation_multi_simple_epoch --encoder-langtok src
#: --decoder-langtok``), written into the data; ``bart``: the source token after the source's
#: ``</s>`` and the target token as the decoder's first input (``translation_from_pretrained_bart``),
#: placed by the task, not written into the data
PLACEMENT = {"transformer": None, "m2m100": "prepend", "nllb": "prepend", "mbart50": "prepend",
             "mbart25": "bart"}
#: fairseq's language-token style of each family (multilingual_utils.LangTokStyle)
LANG_TOK_STYLE = {"m2m100": "multilingual", "nllb": "multilingual", "mbart50": "mbart", "mbart25": "mbart"}
#: the languages of mBART-25's pretraining, in the order fairseq's ``examples/mbart`` gives them
#: to ``--langs`` (the order its language tokens take in the dictionary; the release has no list)
MBART25_LANGS = ("ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX", "gu_IN", "hi_IN",
                 "it_IT", "ja_XX", "kk_KZ", "ko_KR", "lt_LT", "lv_LV", "my_MM", "ne_NP", "nl_XX", "ro_RO",
                 "ru_RU", "si_LK", "tr_TR", "vi_VN", "zh_CN")
#: the data-source tags the NLLB task adds after the language tokens
#: (``--add-data-source-prefix-tags`` of fairseq's ``nllb`` branch)
NLLB_DATA_SOURCE_TAGS = ("<MINED_DATA>", "<MMT_BT_DATA>", "<SMT_BT_DATA>")

BPE_CODES = "bpecodes"
#: the names of BPE codes files the ``transformer`` family finds in a release folder (besides
#: ``*.codes``): fairseq's releases name them ``bpecodes``; fairseq's ``examples/translation``
#: scripts (``prepare-iwslt14.sh``, ``prepare-wmt14en2de.sh``) write ``code``; fastBPE's README ``codes``
BPE_CODES_NAMES = (BPE_CODES, "codes", "code")
M2M_DICT, M2M_DATA_DICT, M2M_SPM = "model_dict.128k.txt", "data_dict.128k.txt", "spm.128k.model"
#: the symbols M2M-100's model dictionary ends with, after its 100 language tokens
#: (``madeupword0000`` .. ``madeupword0007``: 128,004 + 100 + 8 = 128,112 embedding rows)
M2M_MADEUPWORDS = tuple(f"madeupword{i:04d}" for i in range(8))
NLLB_DICT, NLLB_SPM, NLLB_LANGS = "dictionary.txt", "sentencepiece.bpe.model", "langs.txt"
#: the name SPM-200 has once downloaded as fairseq's NLLB README downloads it
#: (``wget --trust-server-names`` of its link; sacrebleu's ``flores200`` tokenizer is the same model)
NLLB_FLORES_SPM = "flores200_sacrebleu_tokenizer_spm.model"
MBART_SPM, MBART50_LANGS = "sentence.bpe.model", "ML50_langs.txt"
END_OF_WORD, JOINER = "</w>", "@@"
#: the segmentations (``segmentation.kind`` of the manifest's record; fairseq's ``--bpe`` names)
SEGMENTATIONS = ("sentencepiece", "fastbpe", "subword_nmt", "none")
#: the record's kind of the data folders prepared before ``fastbpe`` had its own name
LEGACY_KINDS = {"bpe": "fastbpe"}
NO_SEGMENTATION = "none"
#: GPT-2's byte-level BPE files (fairseq's ``--bpe gpt2``, read by its ``hub_utils.from_pretrained``)
GPT2_BPE_FILES = ("merges.txt", "vocab.json")
#: the option that names the release's segmentation file (or ``none``)
SEGMENTATION_OPTION = "--pretrained-segmentation"


# ------------------------------------------------------------------------------ fastBPE


def merge_pair(pieces: List[str], pair: Tuple[str, str]) -> List[str]:
    """``pieces`` with every occurrence of the adjacent ``pair`` merged into one piece, left to
    right (one BPE merge)."""
    merged, i = [], 0
    while i < len(pieces):
        if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == pair:
            merged.append(pieces[i] + pieces[i + 1])
            i += 2
        else:
            merged.append(pieces[i])
            i += 1
    return merged


class FastBPE:
    """fastBPE's ``applybpe`` (Sennrich et al. 2016, §3.2, as fastBPE implements it): a word is
    split into characters, ``</w>`` glued to the last one; while some adjacent pair is in the
    codes, the pair of lowest rank (its line in the codes file) is merged at each of its
    occurrences, left to right; the pieces are joined by ``@@ `` and ``</w>`` dropped.

    ``path``: a codes file, one merge ``LEFT RIGHT COUNT`` a line (fastBPE's ``learnbpe``; the
    two columns of subword-nmt after its ``#version`` line are read too)."""

    def __init__(self, path: str):
        self.path = path
        self.ranks: Dict[Tuple[str, str], int] = {}
        self._cache: Dict[str, str] = {}
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            raise PretrainedError(f"{path}: not UTF-8 text (fastBPE codes expected)") from None
        for n, line in enumerate(lines, 1):
            if n == 1 and line.startswith("#version"):
                continue
            parts = line.split(" ")
            if len(parts) not in (2, 3) or not all(parts[:2]) or (len(parts) == 3 and not parts[2].isdigit()):
                raise PretrainedError(f"{path}:{n}: not a BPE merge (expected 'LEFT RIGHT COUNT')")
            self.ranks.setdefault((parts[0], parts[1]), len(self.ranks))
        if not self.ranks:
            raise PretrainedError(f"{path}: no BPE merges")

    def word(self, word: str) -> str:
        """The pieces of one word, joined by ``@@ ``."""
        done = self._cache.get(word)
        if done is not None:
            return done
        pieces = list(word[:-1]) + [word[-1] + END_OF_WORD]
        while len(pieces) > 1:
            best, best_rank = None, None
            for pair in zip(pieces, pieces[1:]):
                r = self.ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            pieces = merge_pair(pieces, best)
        pieces[-1] = pieces[-1][: -len(END_OF_WORD)]
        done = (JOINER + " ").join(pieces)
        self._cache[word] = done
        return done

    def apply(self, line: str) -> str:
        """A whitespace-tokenized line, each word split into its pieces."""
        return " ".join(self.word(w) for w in line.split())

    encode = apply

    @staticmethod
    def decode(pieces: str) -> str:
        return remove_bpe(pieces)


def bpe_codes_format(path: str) -> str:
    """``"fastbpe"`` or ``"subword_nmt"``: the program that learnt the BPE codes file ``path``,
    from its lines. subword-nmt (Sennrich et al. 2016) writes ``#version: 0.2`` first and then
    two columns ``LEFT RIGHT`` (a file without the version line is its version 0.1, as its
    ``apply_bpe`` reads it); fastBPE's ``learnbpe`` writes three, ``LEFT RIGHT COUNT``. A file
    that is neither is a :class:`PretrainedError` naming its line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise PretrainedError(f"{path}: not UTF-8 text (BPE codes expected)") from None
    either = "'LEFT RIGHT COUNT' (fastBPE) or 'LEFT RIGHT' (subword-nmt)"
    if lines and lines[0].startswith("#version:"):
        kind, columns, first = "subword_nmt", 2, 2
    elif not lines:
        raise PretrainedError(f"{path}: no BPE merges")
    else:  # the first line decides
        columns, first = len(lines[0].split(" ")), 1
        kind = {3: "fastbpe", 2: "subword_nmt"}.get(columns)
        if kind is None:
            raise PretrainedError(f"{path}:1: not a BPE merge (expected {either})")
    if len(lines) < first:
        raise PretrainedError(f"{path}: no BPE merges")
    expected = "'LEFT RIGHT COUNT' (fastBPE)" if columns == 3 else "'LEFT RIGHT' (subword-nmt)"
    for n, line in enumerate(lines[first - 1:], first):
        parts = line.split(" ")
        if len(parts) != columns or not all(parts[:2]) or (columns == 3 and not parts[2].isdigit()):
            raise PretrainedError(f"{path}:{n}: not a BPE merge (expected {expected})")
    return kind


def subword_nmt_bpe(path: str):
    """fairseq's own ``subword_nmt`` BPE of the codes file ``path`` (``--bpe subword_nmt
    --bpe-codes PATH``: subword-nmt's ``apply_bpe``, pieces joined by ``@@ ``): ``encode`` and
    ``decode`` as fairseq-interactive and fairseq-generate apply them. The codes are checked
    first (:func:`bpe_codes_format`: subword-nmt itself exits on a bad line)."""
    bpe_codes_format(path)
    try:
        import subword_nmt  # noqa: F401
    except ImportError:
        raise PretrainedError(f"{path}: subword-nmt codes: install subword-nmt (pip install subword-nmt)") from None
    from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE, SubwordNMTBPEConfig

    return SubwordNMTBPE(SubwordNMTBPEConfig(bpe_codes=path))


@functools.lru_cache(maxsize=None)
def moses(lang: str):
    """fairseq's ``moses`` tokenizer for one language with its default options (sacremoses,
    aggressive dash splits, HTML escaping): ``encode`` tokenizes, ``decode`` detokenizes text
    of ``lang``."""
    try:
        from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

        return MosesTokenizer(MosesTokenizerConfig(source_lang=lang, target_lang=lang))
    except ImportError:
        raise PretrainedError("the 'transformer' family tokenizes with Moses: "
                              "install sacremoses (pip install sacremoses)") from None


def open_sentencepiece(path: str):
    """A SentencePiece processor of the model file ``path`` (an unreadable file: one line
    naming it)."""
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as e:
        raise PretrainedError(f"{path}: not a SentencePiece model ({str(e).strip()[:80]})") from None


class SentencePiece:
    """A release's SentencePiece model as fairseq's ``sentencepiece`` BPE applies it: the
    pieces joined by spaces; ``decode`` joins them back into text."""

    def __init__(self, path: str):
        self.sp = open_sentencepiece(path)

    def encode(self, text: str) -> str:
        return " ".join(self.sp.encode(text.strip(), out_type=str))

    def encode_all(self, lines: Sequence[str], workers: int = 1) -> List[str]:
        return [" ".join(p) for p in self.sp.encode(list(lines), out_type=str, num_threads=workers)]

    def decode(self, pieces: str) -> str:
        return self.sp.decode(pieces.split())


class NoSegmentation:
    """Pre-tokenized text (a release without a segmentation file): the tokens are the text's
    words, as ``fairseq-preprocess`` reads them (split at whitespace)."""

    @staticmethod
    def encode(text: str) -> str:
        return " ".join(text.split())

    @staticmethod
    def decode(pieces: str) -> str:
        return pieces


def open_segmenter(kind: str, path: Optional[str]):
    """The segmenter of a segmentation kind (:data:`SEGMENTATIONS`, or a legacy name of
    :data:`LEGACY_KINDS`) and its file: ``encode(text) -> pieces``, ``decode(pieces) -> text``."""
    kind = LEGACY_KINDS.get(kind, kind)
    if kind == "sentencepiece":
        return SentencePiece(path)
    if kind == "fastbpe":
        return FastBPE(path)
    if kind == "subword_nmt":
        return subword_nmt_bpe(path)
    return NoSegmentation()


# ------------------------------------------------------------------------------ the release


@dataclass
class Release:
    """A release directory read for one language pair of the data folder.

    ``dict_files``: {data lang: release file name}; ``langtok_langs``: {data lang: the release's
    language code} (empty without language tokens); ``languages``: the release's language list
    in the order its task adds the tokens; ``lang_list_file``: the file it comes from.
    ``segmentation``: one of :data:`SEGMENTATIONS`; ``segmentation_file``: its file (a name in
    ``dir``, or the absolute path :data:`SEGMENTATION_OPTION` gave), ``None`` for ``none``."""

    family: str
    dir: str
    dict_files: Dict[str, str]
    segmentation: str
    segmentation_file: Optional[str]
    tokenizer: Optional[str] = None
    languages: List[str] = field(default_factory=list)
    lang_list_file: Optional[str] = None
    langtok_langs: Dict[str, str] = field(default_factory=dict)
    _segmenter: object = None

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    @property
    def placement(self) -> Optional[str]:
        return PLACEMENT[self.family]

    def langtok(self, lang: str) -> Optional[str]:
        """The language token of a data language (``None`` for a family without them)."""
        if not self.placement:
            return None
        from fairseq.data.multilingual.multilingual_utils import get_lang_tok

        return get_lang_tok(self.langtok_langs[lang], LANG_TOK_STYLE[self.family])

    def model_dictionary(self, lang: str):
        """The dictionary the pretrained model was built with, for data language ``lang``:
        ``Dictionary.load`` of the release file + the symbols the family's task adds."""
        from fairseq.data import Dictionary

        path = self.path(self.dict_files[lang])
        try:
            d = Dictionary.load(path)
        except (ValueError, RuntimeError, UnicodeDecodeError) as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PretrainedError(f"{path}: not a fairseq dictionary ({msg})") from None
        if len(d) == d.nspecial:
            raise PretrainedError(f"{path}: not a fairseq dictionary (no entries)")
        if self.placement:
            from fairseq.data.multilingual.multilingual_utils import augment_dictionary

            augment_dictionary(d, self.languages, LANG_TOK_STYLE[self.family])
            for sym in {"nllb": NLLB_DATA_SOURCE_TAGS, "m2m100": M2M_MADEUPWORDS}.get(self.family, ()):
                d.add_symbol(sym)  # a symbol the file holds keeps its place (model_dict.128k.txt)
        return d

    def dictionary_sha1(self, lang: str) -> str:
        return file_sha1(self.path(self.dict_files[lang]))

    def segment(self, sentences: Sequence[str], lang: str, workers: int = 1) -> List[str]:
        """The release's segmentation of raw sentences of data language ``lang``: pieces
        joined by single spaces (no language token)."""
        seg = self.segmenter()
        if isinstance(seg, SentencePiece):
            return seg.encode_all(sentences, workers)
        tok = moses(lang) if self.tokenizer == "moses" else None
        return [seg.encode(tok.encode(s) if tok else s) for s in sentences]

    def segmenter(self):
        """The release's segmenter (:func:`open_segmenter`, opened once; errors name the file)."""
        if self._segmenter is None:
            self._segmenter = open_segmenter(self.segmentation, self.segmentation_file and
                                             self.path(self.segmentation_file))
        return self._segmenter

    def sentencepiece(self):
        """The release's SentencePiece processor."""
        return self.segmenter().sp

    def check(self) -> None:
        """Open the segmentation file (errors name it) and the tokenizer before any work is done."""
        self.segmenter()
        if self.tokenizer == "moses":
            for lang in self.dict_files:
                moses(lang)


def _files(d: str) -> List[str]:
    return sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))


def _is_codes_name(name: str) -> bool:
    return name in BPE_CODES_NAMES or name.endswith(".codes")


def detect_family(d: str, langs: Sequence[str] = ()) -> str:
    """The family of a release directory, from the names of its files (``langs``: the data's
    source and target languages, whose ``dict.{lang}.txt`` a ``transformer`` release has)."""
    names = set(_files(d))
    if MBART50_LANGS in names:
        return "mbart50"
    if MBART_SPM in names and "dict.txt" in names:
        return "mbart25"
    if any(n.startswith(("model_dict.", "data_dict.")) and n.endswith(".txt") for n in names):
        return "m2m100"
    if NLLB_DICT in names:
        return "nllb"
    if (langs and all(f"dict.{lang}.txt" in names for lang in langs)) or any(map(_is_codes_name, names)):
        return "transformer"
    src, tgt = tuple(langs) if len(langs) == 2 else ("SRC", "TGT")
    raise PretrainedError(
        f"{d}: not a known release layout (transformer: dict.{src}.txt, dict.{tgt}.txt and a SentencePiece "
        f"*.model, BPE codes ({BPE_CODES}) or no segmentation file; m2m100: {M2M_DICT} or {M2M_DATA_DICT}, "
        f"{M2M_SPM}, language_pairs*.txt; nllb: {NLLB_DICT}, {NLLB_FLORES_SPM} or {NLLB_SPM}, {NLLB_LANGS}; "
        f"mbart50: dict.xx_XX.txt, {MBART_SPM}, {MBART50_LANGS}; mbart25: dict.txt, {MBART_SPM}); "
        "or give --pretrained-family")


def _given_file(d: str, given: str) -> str:
    """The absolute path of the file :data:`SEGMENTATION_OPTION` names: as given, else in ``d``."""
    path = given if os.path.isfile(given) else os.path.join(d, given)
    if not os.path.isfile(path):
        raise PretrainedError(f"{SEGMENTATION_OPTION} {given}: no such file (nor {os.path.join(d, given)})")
    return os.path.abspath(path)


def _only(d: str, names: List[str], what: str) -> str:
    """The one segmentation file of ``names`` (files of ``d``); several with the same bytes
    count as one, several others are refused."""
    if len(names) > 1 and len({file_sha1(os.path.join(d, n)) for n in names}) > 1:
        raise PretrainedError(f"{d}: several segmentation files ({', '.join(names)}): name the release's "
                              f"with {SEGMENTATION_OPTION} FILE ({what})")
    return names[0]


def sentencepiece_file(d: str, family: str, preferred: Sequence[str], what: str,
                       given: Optional[str] = None) -> str:
    """The SentencePiece model of a release of a SentencePiece family: ``given``
    (:data:`SEGMENTATION_OPTION`), else the first of the ``preferred`` names ``d`` holds, else
    its one ``*.model`` file."""
    if given is not None:
        if given == NO_SEGMENTATION:
            raise PretrainedError(f"{SEGMENTATION_OPTION} none: the {family} family segments with "
                                  f"SentencePiece ({what})")
        return _given_file(d, given)
    names = _files(d)
    found = [n for n in preferred if n in names] or [n for n in names if n.endswith(".model")]
    if not found:
        raise PretrainedError(f"{os.path.join(d, preferred[0])}: missing ({what}; or give "
                              f"{SEGMENTATION_OPTION} FILE)")
    return _only(d, found, what)


def transformer_segmentation(d: str, given: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """(kind, file) of a ``transformer`` release: ``given`` (:data:`SEGMENTATION_OPTION`: a
    file, or ``none``), else the one segmentation file of ``d`` — a SentencePiece model
    (``*.model``) or BPE codes (:data:`BPE_CODES_NAMES`, ``*.codes``; fastBPE's or
    subword-nmt's, told apart by :func:`bpe_codes_format`) — else ``none``: the release has
    no segmentation, the text is pre-tokenized."""
    if given == NO_SEGMENTATION:
        return NO_SEGMENTATION, None
    if given is not None:
        name = _given_file(d, given)
    else:
        names = _files(d)
        found = [n for n in names if n.endswith(".model") or _is_codes_name(n)]
        gpt2 = [n for n in GPT2_BPE_FILES if n in names]
        if not found and gpt2:  # fairseq's hub reads them as --bpe gpt2: not pre-tokenized text
            raise PretrainedError(f"{os.path.join(d, gpt2[0])}: GPT-2 byte-level BPE is not read here: give "
                                  f"{SEGMENTATION_OPTION} none if the text is pre-tokenized as the model's was")
        if not found:
            return NO_SEGMENTATION, None
        name = _only(d, found, "a SentencePiece model or BPE codes, or none")
    kind = "sentencepiece" if name.endswith(".model") else bpe_codes_format(os.path.join(d, name))
    return kind, name


def _one(d: str, prefix: str, suffix: str, preferred: str, what: str) -> str:
    """The one file of ``d`` named ``preferred``, else the only ``prefix*suffix``."""
    names = _files(d)
    if preferred in names:
        return preferred
    cands = [n for n in names if n.startswith(prefix) and n.endswith(suffix)]
    if len(cands) == 1:
        return cands[0]
    if not cands:
        raise PretrainedError(f"{os.path.join(d, preferred)}: missing ({what})")
    raise PretrainedError(f"{d}: several {prefix}*{suffix} files ({', '.join(cands)}): keep the {what} only")


def _need(d: str, name: str, what: str) -> str:
    if not os.path.isfile(os.path.join(d, name)):
        raise PretrainedError(f"{os.path.join(d, name)}: missing ({what})")
    return name


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise PretrainedError(f"{path}: not UTF-8 text") from None


def read_language_list(path: str, pairs: bool = False) -> List[str]:
    """A release's language list: one code a line or comma-separated (``pairs``: ``a-b``
    pairs, the sorted set of their languages, as ``translation_multi_simple_epoch`` infers it
    from ``--lang-pairs``)."""
    langs: List[str] = []
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        for item in (x.strip() for x in line.split(",")):
            if not item:
                continue
            if any(c.isspace() for c in item) or (pairs and (item.count("-") != 1 or item.startswith("-")
                                                               or item.endswith("-"))):
                raise PretrainedError(f"{path}:{n}: {item!r} is not a "
                                      + ("language pair 'xx-yy'" if pairs else "language code"))
            langs += item.split("-") if pairs else [item]
    if not langs:
        raise PretrainedError(f"{path}: no languages")
    if pairs:
        return sorted(set(langs))
    seen = set()
    return [x for x in langs if not (x in seen or seen.add(x))]


def load_release(d: str, src: str, tgt: str, family: Optional[str] = None,
                 langs: Optional[Sequence[str]] = None, segmentation: Optional[str] = None) -> Release:
    """Read a release directory for the data pair ``src``-``tgt``; ``family`` overrides the
    detection, ``langs`` = (source, target) codes of the release's language list,
    ``segmentation`` the segmentation file (or ``none``, :data:`SEGMENTATION_OPTION`). Raises
    :class:`PretrainedError` (one line naming the file) for a missing or malformed file."""
    if not os.path.isdir(d):
        raise PretrainedError(f"--pretrained {d}: not a directory")
    d = os.path.abspath(d)
    family = family or detect_family(d, (src, tgt))
    if family not in FAMILIES:
        raise PretrainedError(f"--pretrained-family {family}: unknown (one of {', '.join(FAMILIES)})")
    if langs is not None and PLACEMENT[family] is None:
        raise PretrainedError(f"--pretrained-langs: the {family} family has no language tokens")
    if family == "transformer":
        dicts = {lang: _need(d, f"dict.{lang}.txt", f"the {lang} dictionary of the release") for lang in (src, tgt)}
        kind, seg_file = transformer_segmentation(d, segmentation)
        r = Release(family, d, dicts, kind, seg_file, "moses" if kind in ("fastbpe", "subword_nmt") else None)
    elif family == "m2m100":
        # model_dict.128k.txt (fairseq-generate's --fixed-dictionary), else data_dict.128k.txt
        # (fairseq-preprocess's --srcdict): the same model dictionary (Release.model_dictionary)
        names = _files(d)
        data_only = not any(n.startswith("model_dict.") for n in names) and any(n.startswith("data_dict.") for n in names)
        dict_file = _one(d, "data_dict." if data_only else "model_dict.", ".txt",
                         M2M_DATA_DICT if data_only else M2M_DICT,
                         f"the dictionary of M2M-100, {M2M_DICT} or {M2M_DATA_DICT}")
        lang_file = _one(d, "language_pairs", ".txt", "language_pairs_small_models.txt",
                         "the language pairs of M2M-100")
        lang_list = read_language_list(os.path.join(d, lang_file), pairs=True)
        r = Release(family, d, {src: dict_file, tgt: dict_file}, "sentencepiece",
                    sentencepiece_file(d, family, (M2M_SPM,), "the SentencePiece model of M2M-100", segmentation),
                    languages=lang_list, lang_list_file=lang_file)
    elif family == "nllb":
        lang_file = _need(d, NLLB_LANGS, "the language list of NLLB-200, "
                          "examples/nllb/modeling/scripts/flores200/langs.txt of fairseq's nllb branch")
        dict_file = _need(d, NLLB_DICT, "the dictionary of NLLB-200")
        r = Release(family, d, {src: dict_file, tgt: dict_file}, "sentencepiece",
                    sentencepiece_file(d, family, (NLLB_FLORES_SPM, NLLB_SPM),
                                       f"SPM-200, the SentencePiece model of NLLB-200: {NLLB_FLORES_SPM} as "
                                       f"fairseq's NLLB README downloads it, or {NLLB_SPM}", segmentation),
                    languages=read_language_list(os.path.join(d, lang_file)), lang_list_file=lang_file)
    elif family == "mbart25":
        dict_file = _need(d, "dict.txt", "the dictionary of mBART-25")
        r = Release(family, d, {src: dict_file, tgt: dict_file}, "sentencepiece",
                    sentencepiece_file(d, family, (MBART_SPM,), "the SentencePiece model of mBART-25", segmentation),
                    languages=list(MBART25_LANGS))
    else:  # mbart50
        lang_file = _need(d, MBART50_LANGS, "the language list of mBART-50")
        r = Release(family, d, {}, "sentencepiece",
                    sentencepiece_file(d, family, (MBART_SPM,), "the SentencePiece model of mBART-50", segmentation),
                    languages=read_language_list(os.path.join(d, lang_file)), lang_list_file=lang_file)
    if r.placement:
        where = (os.path.join(d, r.lang_list_file) if r.lang_list_file
                 else f"{d} (mBART-25's languages: {','.join(MBART25_LANGS)})")
        r.langtok_langs = _langtok_langs(r.languages, where, (src, tgt), langs)
    if family == "mbart50":
        for lang in (src, tgt):
            name = f"dict.{r.langtok_langs[lang]}.txt"
            r.dict_files[lang] = name if os.path.isfile(os.path.join(d, name)) else _need(
                d, "dict.txt", f"the dictionary of mBART-50 ({name} or dict.txt)")
    return r


#: an export's ``docctx.segmentation.kind`` -> the release's segmentation (:data:`SEGMENTATIONS`)
EXPORT_SEGMENTATIONS = {"pre-segmented": NO_SEGMENTATION, "none": NO_SEGMENTATION, "sentencepiece": "sentencepiece",
                        "fastbpe": "fastbpe", "subword_nmt": "subword_nmt"}


def export_release(d: str, meta: dict, src: str, tgt: str, langs: Optional[Sequence[str]] = None) -> Release:
    """A folder ``docctx-export transformers`` wrote (``meta``: its ``config.json``'s ``docctx``
    entry) read as the ``transformer`` release it is: the dictionaries of the checkpoint it came
    from (``dict.{lang}.txt`` of the checkpoint's languages, whatever ``src``/``tgt`` the new
    data has; the context separator is among their symbols) and the segmentation the export
    copied and recorded (``docctx.segmentation``: pre-segmented text, its SentencePiece model,
    or its BPE codes after Moses tokenization). Data prepared from it has the checkpoint's
    ids, so ``--init-from-pretrained`` the folder continues from the checkpoint's network.
    Refused in one line: an export of data with language tokens (they come from the release the
    data was prepared from: prepare from that release) and a segmentation not listed here."""
    d = os.path.abspath(d)
    if meta.get("language_tokens"):
        pretrained = meta.get("pretrained") or {}
        raise PretrainedError(f"--pretrained {d}: an export of data with language tokens "
                              f"({meta['language_tokens'].get('source')}, {meta['language_tokens'].get('target')}): "
                              f"prepare the data from the release it came from (--pretrained "
                              f"{pretrained.get('dir') or 'RELEASE'}), then --init-from-pretrained {d}")
    if langs is not None:
        raise PretrainedError(f"--pretrained-langs: {d} is an export of data without language tokens")
    seg = meta.get("segmentation") or {}
    kind = EXPORT_SEGMENTATIONS.get(seg.get("kind"))
    if kind is None:
        raise PretrainedError(f"{os.path.join(d, 'config.json')}: docctx.segmentation kind {seg.get('kind')!r} is "
                              f"not one docctx-prepare reads from an export ({', '.join(EXPORT_SEGMENTATIONS)})")
    name = seg.get("file") if kind != NO_SEGMENTATION else None
    if kind != NO_SEGMENTATION:
        _need(d, name or "?", f"the {kind} file of the export (docctx.segmentation)")
    moses = kind in ("fastbpe", "subword_nmt") and bool(seg.get("moses"))
    if kind in ("fastbpe", "subword_nmt") and not moses:
        raise PretrainedError(f"{os.path.join(d, 'config.json')}: BPE codes without Moses tokenization "
                              "(docctx.segmentation): a release's codes are applied after Moses here")
    dicts = {lang: _need(d, f"dict.{meta[key]}.txt", f"the {side} dictionary of the export")
             for lang, key, side in ((src, "source_lang", "source"), (tgt, "target_lang", "target"))}
    return Release("transformer", d, dicts, kind, name, "moses" if moses else None)


# ------------------------------------------------------------------------------ inference


def remove_bpe(pieces: str) -> str:
    """fastBPE/subword-nmt pieces joined back into words (``@@ `` removed)."""
    return (pieces + " ").replace(JOINER + " ", "").rstrip()


class PretrainedText:
    """Raw text <-> the tokens of a data folder written by ``docctx-prepare --pretrained``,
    from its manifest's ``pretrained`` record: the release's segmentation (the SentencePiece
    model, or Moses + the fastBPE or subword-nmt codes, that the folder holds a copy of; or
    none, for pre-tokenized text) and the language tokens
    the family prepends (``--encoder-langtok src --decoder-langtok``). What inference needs
    to read new input as the data was binarized and to give back plain text:

    * :meth:`encode`: raw text -> pieces joined by spaces (no language token);
    * :meth:`decode`: pieces -> raw text (SentencePiece decoded; or ``@@ `` removed and Moses
      detokenized with the language's rules; the tokens as they are for ``none``);
    * :attr:`source_langtok`, :attr:`target_langtok`: the symbols the family puts first in
      every source and every target sentence (placement ``prepend``; else ``None``);
    * :attr:`source_suffix`, :attr:`decoder_start`: mBART-25's tokens (placement ``bart``; else
      ``None``), which the data's sentences do not carry: the source token follows the
      encoder input's ``</s>``, the target token is the decoder's first input."""

    def __init__(self, data_dir: str, record: dict):
        self.data_dir = data_dir
        self.record = record
        self.family = record.get("family")
        langtok = record.get("langtok") or {}
        self.placement = langtok.get("placement")
        prepend, bart = self.placement == "prepend", self.placement == "bart"
        self.source_langtok = langtok.get("source") if prepend else None
        self.target_langtok = langtok.get("target") if prepend else None
        self.source_suffix = langtok.get("source") if bart else None
        self.decoder_start = langtok.get("target") if bart else None
        seg = record.get("segmentation") or {}
        self.kind = LEGACY_KINDS.get(seg.get("kind"), seg.get("kind"))
        name = seg.get("file")
        self.segmentation_file = name if not name or os.path.isabs(name) else os.path.join(data_dir, name)
        self.transformers = self.kind == HF_SEGMENTATION  # a transformers folder's tokenizer (hf_release)
        if (self.kind not in SEGMENTATIONS and not self.transformers) or (
                self.kind != NO_SEGMENTATION and not self.segmentation_file):
            raise PretrainedError(f"{os.path.join(data_dir, 'docctx.json')}: its pretrained record has no "
                                  f"segmentation (kind {', '.join(SEGMENTATIONS + (HF_SEGMENTATION,))}, and its file)")
        if self.segmentation_file and not (os.path.isdir if self.transformers else os.path.isfile)(
                self.segmentation_file):
            raise PretrainedError(f"{self.segmentation_file}: missing (the segmentation of the pretrained "
                                  f"{self.family} model, named by {os.path.join(data_dir, 'docctx.json')})")
        self.moses = record.get("tokenizer") == "moses"
        self._segmenter = None

    @classmethod
    def of_data(cls, data: Optional[str]) -> Optional["PretrainedText"]:
        """The text of a data folder (``data``: fairseq's ``DATA`` argument, the first of
        its ``:``-separated paths), ``None`` when its manifest has no ``pretrained`` record."""
        from .manifest import read_manifest

        if not data:
            return None
        first = str(data).split(":")[0]
        record = (read_manifest(first) or {}).get("pretrained")
        return cls(first, record) if record else None

    def segmenter(self):
        """The segmenter of the record's kind and file (:func:`open_segmenter`, opened once)."""
        if self._segmenter is None and self.transformers:
            from .hf_release import TokenizerText

            self._segmenter = TokenizerText(self.segmentation_file, self.record)
        if self._segmenter is None:
            self._segmenter = open_segmenter(self.kind, self.segmentation_file)
        return self._segmenter

    def tokenize(self, text: str, lang: str) -> str:
        """Moses tokenization of ``lang`` for the ``transformer`` family; else ``text`` as it is."""
        return moses(lang).encode(text) if self.moses else text

    def detokenize(self, text: str, lang: str) -> str:
        """The inverse of :meth:`tokenize`."""
        return moses(lang).decode(text) if self.moses else text

    def segment(self, text: str, lang: Optional[str] = None) -> str:
        """The release's pieces of ``text`` (tokenized already for ``transformer``'s BPE codes);
        ``lang``: its language, which a transformers folder's tokenizer needs (default: the
        source's)."""
        return self.segmenter().encode(text, lang) if self.transformers else self.segmenter().encode(text)

    def unsegment(self, pieces: str, lang: Optional[str] = None) -> str:
        """The inverse of :meth:`segment` (``lang`` default: the target's)."""
        return self.segmenter().decode(pieces, lang) if self.transformers else self.segmenter().decode(pieces)

    def encode(self, text: str, lang: str) -> str:
        """One raw sentence of language ``lang`` as the release segments it (as
        ``docctx-prepare --pretrained`` wrote the data folder; no language token)."""
        return self.segment(self.tokenize(text.strip(), lang), lang)

    def decode(self, pieces: str, lang: str) -> str:
        """Pieces (joined by spaces, no language token) back into raw text of ``lang``."""
        return self.detokenize(self.unsegment(pieces, lang), lang)

    def step(self, source_lang: str, target_lang: str, tokenizer: bool = False):
        """fairseq's BPE (or, ``tokenizer``, tokenizer) object: ``encode`` applies it to
        input of ``source_lang`` (``fairseq-interactive``), ``decode`` undoes it on output of
        ``target_lang`` (``fairseq-generate``'s D- lines). The segmentation (SentencePiece, BPE
        codes, or none) is the BPE step; Moses, before BPE codes, the tokenizer step. Language
        tokens are not added here."""
        return _Step(self, source_lang, target_lang, tokenizer)

    def default_step(self, args, kind: str, source_lang: str, target_lang: str):
        """The step a task builds for fairseq's ``--tokenizer`` (``kind`` ``"tokenizer"``) or
        ``--bpe`` (``"bpe"``) configuration ``args`` that names none: the family's Moses
        tokenizer (families that tokenize with Moses only), or the release's segmentation
        (:meth:`step`); ``None`` when ``args`` names one (fairseq builds it)."""
        if encoder_name(args, kind) is not None or (kind == "tokenizer" and not self.moses):
            return None
        return self.step(source_lang, target_lang, tokenizer=kind == "tokenizer")


def encoder_name(args, kind: str) -> Optional[str]:
    """The name a tokenizer/BPE configuration gives (``--tokenizer``/``--bpe``), ``None`` when
    it gives none (fairseq-generate passes ``cfg.tokenizer``/``cfg.bpe``: ``None`` or a config
    with ``_name``; an argparse namespace has the option as an attribute)."""
    if args is None:
        return None
    name = getattr(args, "_name", None)
    if name is None and not hasattr(args, "_name"):
        name = getattr(args, kind, None)
    return None if name in (None, "", "none") else str(name)


class _Step:
    """One of :meth:`PretrainedText.step`: ``encode``/``decode`` as fairseq's encoders have them."""

    def __init__(self, text: PretrainedText, source_lang: str, target_lang: str, tokenizer: bool):
        self.text, self.source_lang, self.target_lang, self.tokenizer = text, source_lang, target_lang, tokenizer

    def encode(self, x: str) -> str:
        return self.text.tokenize(x, self.source_lang) if self.tokenizer else self.text.segment(x, self.source_lang)

    def decode(self, x: str) -> str:
        return self.text.detokenize(x, self.target_lang) if self.tokenizer else self.text.unsegment(x, self.target_lang)
