"""Data preparation: raw parallel documents -> a fairseq data directory + document index.

What ``docctx-prepare`` runs (the command only parses its options and prints the progress
this module reports). Reads documents (:mod:`.readers`), optionally
trains or applies one joint SentencePiece model, applies explicit length filters to the
training split (a filtered pair stays in its document as context only, never a training
target), builds the dictionaries (with the context separator at index 4) and
binarizes every split with fairseq's binarizer (:mod:`fairseq.binarizer`, what
``fairseq-preprocess`` runs); beside each split it writes the
document index ``{split}.{src}-{tgt}.docs`` (:mod:`.doc_index`), and into the data directory
the manifest ``docctx.json`` (:mod:`.manifest`). Everything is built in a temporary
directory next to the destination and moved there only at the end.

With ``--pretrained DIR`` the dictionaries, the segmentation and the language tokens are a
released fairseq model's (:mod:`.pretrained`): the ids are the model's ids, the language tokens
start every sentence of the families that prepend them, and the context separator, when the
model's dictionary lacks it, is appended after the model's symbols (recorded in the manifest's
``pretrained`` entry).

With ``--split-sentences MODE`` the training pairs are cut in two before the segmentation, each
first half the previous sentence of its second half (divide and rule, Lupo et al. 2022:
:mod:`.split`); the validation and test splits stay as they are.
"""
import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from . import formats
from .alignment import AlignmentError
from .doc_index import DocIndex, doc_index_path
from .documents import DocumentFormatError
from .manifest import FORMAT_VERSION, MANIFEST_NAME, SPM_MODEL_NAME, write_manifest
from .outputs import Outputs
from .hf_folder import HFFolderError, export_metadata
from .hf_release import TOKENIZER_COPY, is_hf_spec, load_hf_release, resolve
from .pretrained import BPE_CODES, HF_SEGMENTATION, NO_SEGMENTATION, Release, export_release, load_release
from .readers import prefix_name, read_parallel
from .split import DEFAULT_MIN_LEN as DEFAULT_SPLIT_MIN_LEN
from .split import split_documents

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
SPM_NAME = os.path.splitext(SPM_MODEL_NAME)[0]
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")

Log = Callable[[str], None]


class PrepareError(Exception):
    """A usage error (bad option combination, existing output...)."""


@dataclass
class SplitData:
    """One split: documents with their (tokenized) sentence pairs."""

    name: str
    doc_ids: List[str] = field(default_factory=list)
    src: List[List[str]] = field(default_factory=list)  # per document, one line per sentence
    tgt: List[List[str]] = field(default_factory=list)
    inputs: List[dict] = field(default_factory=list)  # manifest entries, one per prefix
    filtered: Optional[dict] = None
    #: per document, per sentence: the pair is context only, never a training target
    context_only: Optional[List[List[bool]]] = None
    #: ``--split-sentences``: what was split (the manifest's record, :mod:`.split`)
    split_sentences: Optional[dict] = None

    @property
    def num_sentences(self) -> int:
        return sum(map(len, self.src))

    def context_only_flags(self) -> List[bool]:
        """One flag per sentence of the split, in corpus order (all ``False`` unfiltered)."""
        if self.context_only is None:
            return [False] * self.num_sentences
        return [c for doc in self.context_only for c in doc]


def _check_pretrained_args(args) -> None:
    """Refuse the options ``--pretrained`` contradicts (the release fixes the dictionaries and
    the segmentation), and the ``--pretrained-*`` options without it."""
    if not getattr(args, "pretrained", None):
        for opt in ("pretrained_family", "pretrained_langs", "pretrained_segmentation"):
            if getattr(args, opt, None):
                raise PrepareError(f"--{opt.replace('_', '-')} needs --pretrained DIR")
        return
    given = [("--spm-vocab-size", args.spm_vocab_size), ("--spm-model", args.spm_model),
             ("--srcdict", args.srcdict), ("--tgtdict", args.tgtdict),
             ("--thresholdsrc", args.thresholdsrc), ("--thresholdtgt", args.thresholdtgt),
             ("--nwordssrc", args.nwordssrc != -1), ("--nwordstgt", args.nwordstgt != -1)]
    for opt, value in given:
        if value:
            raise PrepareError(f"{opt} contradicts --pretrained: the dictionaries and the segmentation "
                               "are the pretrained model's")
    langs = getattr(args, "pretrained_langs", None)
    if langs is not None and (len(langs.split(",")) != 2 or not all(langs.split(","))):
        raise PrepareError(f"--pretrained-langs {langs!r}: give the release's two codes, SRC,TGT")


def _check_args(args) -> None:
    splits = [s for s in SPLITS if getattr(args, f"{s}pref")]
    if not splits:
        raise PrepareError("give at least one of --trainpref, --validpref, --testpref")
    if args.source_lang == args.target_lang:
        raise PrepareError("--source-lang and --target-lang must differ")
    _check_split_args(args)
    _check_pretrained_args(args)
    if args.spm_vocab_size and args.spm_model:
        raise PrepareError("--spm-vocab-size and --spm-model exclude each other")
    if args.spm_vocab_size < 0:
        raise PrepareError("--spm-vocab-size must be >= 0")
    if args.joined_dictionary and args.srcdict and args.tgtdict:
        raise PrepareError("cannot use both --srcdict and --tgtdict with --joined-dictionary")
    if not args.trainpref and not getattr(args, "pretrained", None):
        if args.spm_vocab_size:
            raise PrepareError("--spm-vocab-size needs --trainpref (or give --spm-model)")
        if not (args.srcdict and (args.tgtdict or args.joined_dictionary)):
            raise PrepareError("without --trainpref give --srcdict and --tgtdict "
                               "(or --srcdict with --joined-dictionary)")
    sep = args.context_separator
    if not sep or any(c.isspace() for c in sep) or sep in FAIRSEQ_SPECIALS:
        raise PrepareError(f"--context-separator {sep!r} must be one token, not one of {FAIRSEQ_SPECIALS}")
    mask = getattr(args, "mask_symbol", None)
    if mask is not None and (not mask or any(c.isspace() for c in mask) or mask in FAIRSEQ_SPECIALS or mask == sep):
        raise PrepareError(f"--mask-symbol {mask!r} must be one token, not one of {FAIRSEQ_SPECIALS} nor the "
                           "context separator")
    if args.min_len < 0 or (args.max_len is not None and args.max_len < 1):
        raise PrepareError("--min-len must be >= 0 and --max-len >= 1")
    for name in ("max_len_ratio", "tuple_max_len_ratio"):
        if getattr(args, name, None) is not None and getattr(args, name) <= 0:
            raise PrepareError(f"--{name.replace('_', '-')} must be > 0")
    if getattr(args, "tuple_max_len", None) is not None and args.tuple_max_len < 1:
        raise PrepareError("--tuple-max-len must be >= 1")
    if args.workers < 1:
        raise PrepareError("--workers must be >= 1")
    for f in (args.srcdict, args.tgtdict, args.spm_model):
        if f and not os.path.isfile(f):
            raise PrepareError(f"no such file: {f}")


def _check_split_args(args) -> None:
    """``--split-sentences`` (divide and rule) and its options: the training split only."""
    mode = getattr(args, "split_sentences", None)
    min_len = getattr(args, "split_min_len", None)
    align = getattr(args, "split_alignment", None)
    if mode is None:
        for opt, value in (("--split-min-len", min_len), ("--split-alignment", align)):
            if value is not None:
                raise PrepareError(f"{opt} needs --split-sentences")
        return
    if not args.trainpref:
        raise PrepareError(f"--split-sentences {mode} splits the training pairs: give --trainpref "
                           "(validation and test splits are never split)")
    if min_len is not None and min_len < 2:
        raise PrepareError(f"--split-min-len {min_len}: a pair needs at least 2 source words to be cut in two")
    if align is not None:
        if mode != "aligned":
            raise PrepareError(f"--split-alignment gives the links of --split-sentences aligned, not {mode}")
        if not os.path.isfile(align):
            raise PrepareError(f"no such file: {align}")


# ------------------------------------------------------------------------------------------
# reading, tokenization, filtering


def read_split(name: str, prefixes: Sequence[str], src: str, tgt: str, input_format: str,
               separator: str, log: Log = logger.info, translator: Optional[str] = None,
               mask: Optional[str] = None) -> SplitData:
    """Read and concatenate the prefixes of one split (raw sentences); doc ids that collide
    with an earlier prefix's are qualified as ``NAME:id``. A prefix that is one WMT 2021+
    XML or JSON Lines file gives both sides (``translator``: the WMT reference to use)."""
    data = SplitData(name)
    seen = set()
    for k, prefix in enumerate(prefixes):
        pd = read_parallel(prefix, src, tgt, input_format, translator)
        log(f"{name}: read {pd.src_path} + {pd.tgt_path}"
            + (f" + {pd.docids_path}" if pd.docids_path else "")
            + f" ({pd.format}): {len(pd.src)} documents, {pd.num_sentences} sentence pairs"
            + (f" ({pd.dropped_empty} pairs with an empty side dropped, their documents kept)"
               if pd.dropped_empty else ""))
        if not pd.src:
            raise DocumentFormatError(pd.src_path, 1, "no documents")
        for docs in (pd.src, pd.tgt):
            for d in docs:
                for s, ln in zip(d.sentences, d.lines):
                    if separator in s:
                        raise DocumentFormatError(
                            d.path, ln, f"the context separator {separator!r} occurs in the text; "
                            "choose another one with --context-separator")
                    if mask is not None and mask in s:
                        raise DocumentFormatError(
                            d.path, ln, f"the mask symbol {mask!r} occurs in the text; choose another one "
                            "with --mask-symbol")
        ids = [d.doc_id for d in pd.src]
        for qual in ("", prefix_name(prefix) + ":", f"{name}{k + 1}:"):
            cand = [qual + i for i in ids]
            if not seen.intersection(cand):
                break
        seen.update(cand)
        data.doc_ids += cand
        data.src += [d.sentences for d in pd.src]
        data.tgt += [d.sentences for d in pd.tgt]
        entry = {"prefix": prefix, "format": pd.format, "source": pd.src_path,
                 "target": pd.tgt_path, "docids": pd.docids_path}
        entry.update(formats.get(pd.format).describe(pd, translator))
        data.inputs.append(entry)
    return data


def train_spm(sentences: List[str], model_prefix: str, vocab_size: int, model_type: str,
              workers: int, input_sentence_size: int) -> str:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=model_prefix, vocab_size=vocab_size,
        character_coverage=1.0, model_type=model_type, input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True, num_threads=workers, hard_vocab_limit=False, minloglevel=2,
    )
    return model_prefix + ".model"


def _spm_model_type(sp) -> Optional[str]:
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb

        m = pb.ModelProto()
        m.ParseFromString(sp.serialized_model_proto())
        return pb.TrainerSpec.ModelType.Name(m.trainer_spec.model_type).lower()
    except Exception:  # protobuf missing or incompatible: the type is informative only
        return None


def _replace_sentences(side: List[List[str]], flat: Sequence[str]) -> None:
    """Replace the sentences of ``side`` (per document) by ``flat`` (in corpus order; in place)."""
    it = iter(flat)
    side[:] = [[next(it) for _ in doc] for doc in side]


def tokenize_split(data: SplitData, sp, workers: int) -> None:
    """Replace every sentence by its SentencePiece pieces joined by spaces (in place)."""
    for side in (data.src, data.tgt):
        pieces = sp.encode([s for doc in side for s in doc], out_type=str, num_threads=workers)
        _replace_sentences(side, [" ".join(p) for p in pieces])


def _spm_entry(sp, out: str, model_type: Optional[str], trained_from: str) -> dict:
    """Write ``out/spm.vocab`` (each piece and its score) beside ``out/spm.model``; returns the
    manifest's ``spm`` entry."""
    with open(os.path.join(out, SPM_NAME + ".vocab"), "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    return {"model": SPM_NAME + ".model", "vocab": SPM_NAME + ".vocab", "vocab_size": sp.get_piece_size(),
            "type": model_type, "trained_from": trained_from}


def _ratio_above(a: int, b: int, ratio: Optional[float]) -> bool:
    """Whether the longer of two lengths exceeds ``ratio`` times the shorter (an empty one:
    always)."""
    return ratio is not None and (min(a, b) == 0 or max(a, b) / min(a, b) > ratio)


def filter_split(data: SplitData, min_len: int, max_len: Optional[int], max_ratio: Optional[float],
                 tuple_max_len: Optional[int] = None, tuple_max_ratio: Optional[float] = None) -> dict:
    """Remove sentence pairs from the training targets by token length, each counted under
    the first filter that hits it: ``min_len``/``max_len`` (either side), ``max_ratio``
    (source/target), then the tuple filter of Kuang & Xiong (2018, §5.1, footnote 1) on the
    tuple (before-x, x, y) of every pair (x, y) and the source sentence before-x that precedes
    x in its document as the input gives it: ``tuple_max_len`` (any of the three longer),
    ``tuple_max_ratio`` (x and before-x; a document's first sentence has no before-x, only its
    own lengths count).

    A filtered pair stays in its document, marked context only (``data.context_only``): it
    is never a training target, but the next sentence's previous sentence is still the one
    the input gives (before-x of Kuang & Xiong 2018, §5.1, the previous sentences of Wang et
    al. 2017, §2), as the tuple filter judged it. A document none of whose pairs is a target
    any more vanishes (it would be nobody's context)."""
    removed = {"min_len": 0, "max_len": 0, "max_len_ratio": 0, "tuple_max_len": 0, "tuple_max_len_ratio": 0}
    ids, src, tgt, marks = [], [], [], []
    context_only = 0
    for d, sdoc, tdoc in zip(data.doc_ids, data.src, data.tgt):
        mark = []
        before = None  # the length of before-x, the input's previous source sentence
        for s, t in zip(sdoc, tdoc):
            ls, lt = len(s.split()), len(t.split())
            if min(ls, lt) < min_len:
                hit = "min_len"
            elif max_len is not None and max(ls, lt) > max_len:
                hit = "max_len"
            elif _ratio_above(ls, lt, max_ratio):
                hit = "max_len_ratio"
            elif tuple_max_len is not None and max(ls, lt, before or 0) > tuple_max_len:
                hit = "tuple_max_len"
            elif before is not None and _ratio_above(ls, before, tuple_max_ratio):
                hit = "tuple_max_len_ratio"
            else:
                hit = None
            if hit is not None:
                removed[hit] += 1
            mark.append(hit is not None)
            before = ls
        if not all(mark):
            ids.append(d)
            src.append(sdoc)
            tgt.append(tdoc)
            marks.append(mark)
            context_only += sum(mark)
    stats = {
        "settings": {"min_len": min_len, "max_len": max_len, "max_len_ratio": max_ratio,
                     "tuple_max_len": tuple_max_len, "tuple_max_len_ratio": tuple_max_ratio},
        "removed_pairs": removed,
        "context_only_pairs": context_only,
        "removed_documents": len(data.doc_ids) - len(ids),
    }
    data.doc_ids, data.src, data.tgt, data.context_only = ids, src, tgt, marks
    return stats


# ------------------------------------------------------------------------------------------
# dictionaries and binarization (fairseq)


def build_dictionary(files: List[str], separator: str, threshold: int, nwords: int,
                     workers: int, padding_factor: int = 8, mask: Optional[str] = None):
    """fairseq-preprocess's dictionary, with ``separator`` right after the special symbols
    (and ``mask``, when given, right after it)."""
    from fairseq.data import Dictionary
    from fairseq.tokenizer import tokenize_line

    d = Dictionary()
    for f in files:
        Dictionary.add_file_to_dictionary(f, d, tokenize_line, workers)
    if mask is None:
        d.add_symbol(separator, n=max(d.count) + 1)
    else:  # finalize sorts by count: the separator at index 4, the mask at 5
        d.add_symbol(separator, n=max(d.count) + 2)
        d.add_symbol(mask, n=max(d.count) - 1)
    d.finalize(threshold=threshold, nwords=nwords, padding_factor=padding_factor)
    return d


def load_dictionary(path: str, separator: str, log: Log = logger.info, mask: Optional[str] = None):
    from fairseq.data import Dictionary

    d = Dictionary.load(path)
    if separator not in d.indices:
        log(f"{path}: adding the context separator {separator} to the dictionary")
        d.add_symbol(separator)
    add_mask(d, mask, path, log)
    return d


def add_mask(d, mask: Optional[str], path: str, log: Log = logger.info) -> None:
    """Append the mask symbol of CoWord dropout (``--mask-symbol``) to ``d`` where it lacks it
    (``Dictionary.index`` would silently give ``<unk>``'s id for it)."""
    if mask is not None and mask not in d.indices:
        log(f"{path}: adding the mask symbol {mask} to the dictionary at index {len(d)}")
        d.add_symbol(mask)


def binarize(work: str, out: str, splits: List[str], langs: Sequence[str], dicts, workers: int,
             log: Log = logger.info) -> None:
    """Binarize ``work/{split}.{lang}`` into ``out/{split}.{src}-{tgt}.{lang}.{bin,idx}``
    (mmap) with fairseq's own binarizer (what ``fairseq-preprocess`` runs), and save the
    dictionaries as ``out/dict.{lang}.txt``; ``langs`` = (src, tgt), ``dicts`` their
    dictionaries. Lines end in EOS, unknown words become ``<unk>`` (counted in the log)."""
    from fairseq.binarizer import FileBinarizer, VocabularyDatasetBinarizer

    src, tgt = langs
    for lang, d in zip(langs, dicts):
        d.save(os.path.join(out, f"dict.{lang}.txt"))
    for split in splits:
        for lang, d in zip(langs, dicts):
            summary = FileBinarizer.multiprocess_dataset(
                os.path.join(work, f"{split}.{lang}"), "mmap",
                VocabularyDatasetBinarizer(d, append_eos=True),
                os.path.join(out, f"{split}.{src}-{tgt}.{lang}"),
                vocab_size=len(d), num_workers=workers,
            )
            log(f"  {split}.{lang}: {summary} (by {d.unk_word})")


def _binarized_sizes(out: str, split: str, src: str, tgt: str, lang: str):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    ds = MMapIndexedDataset(os.path.join(out, f"{split}.{src}-{tgt}.{lang}"))
    sizes = ds.sizes.astype("int64")  # a copy: ds.sizes is a view on a mmap closed with ds
    del ds
    return sizes


# ------------------------------------------------------------------------------------------
# a pretrained release (--pretrained DIR)


def _segment_pretrained(release: Release, data: Dict[str, SplitData], out: str, src: str, tgt: str,
                        workers: int, log: Log) -> Optional[dict]:
    """Segment every split as the release does (in place) and copy its segmentation file into
    ``out``; returns the manifest's ``spm`` entry (``None`` without a SentencePiece model)."""
    if release.segmentation == HF_SEGMENTATION:
        log(f"segmenting with the tokenizer of {release.dir} ({type(release.tokenizer_object).__name__})")
    elif release.segmentation == NO_SEGMENTATION:
        log("the release has no segmentation file: the text is used as it is (pre-tokenized)")
    else:
        log(f"segmenting with the release's {release.path(release.segmentation_file)} ({release.segmentation})"
            + (" after Moses tokenization" if release.tokenizer == "moses" else ""))
    for d in data.values():
        for lang, side in ((src, d.src), (tgt, d.tgt)):
            _replace_sentences(side, release.segment([s for doc in side for s in doc], lang, workers))
    if release.segmentation == HF_SEGMENTATION:
        release.save_tokenizer(out)
        return None
    if release.segmentation == NO_SEGMENTATION:
        return None
    if release.segmentation != "sentencepiece":
        shutil.copyfile(release.path(release.segmentation_file), os.path.join(out, BPE_CODES))
        return None
    shutil.copyfile(release.path(release.segmentation_file), os.path.join(out, SPM_NAME + ".model"))
    sp = release.sentencepiece()
    return _spm_entry(sp, out, _spm_model_type(sp), release.path(release.segmentation_file))


def _segmentation_copy(release: Release) -> Optional[str]:
    """The name of the copy of the release's segmentation file in the data folder."""
    if release.segmentation == NO_SEGMENTATION:
        return None
    if release.segmentation == HF_SEGMENTATION:
        return TOKENIZER_COPY
    return SPM_NAME + ".model" if release.segmentation == "sentencepiece" else BPE_CODES


def _pretrained_dictionaries(release: Release, src: str, tgt: str, sep: str, log: Log,
                             mask: Optional[str] = None):
    """The model's dictionaries of both sides, the separator (and the mask symbol, when asked
    for) appended where one lacks it (``Dictionary.index`` would silently give ``<unk>`` for
    it), and the manifest's ``pretrained`` entry."""
    dicts, model_symbols, added = {}, {}, {}
    for lang in (src, tgt):
        d = release.model_dictionary(lang)
        model_symbols[lang] = len(d)
        added[lang] = {}
        if sep not in d.indices:
            added[lang][sep] = d.add_symbol(sep)
            log(f"{release.path(release.dict_files[lang])}: the model's dictionary ({model_symbols[lang]} "
                f"symbols) lacks the context separator {sep}: appended at index {added[lang][sep]}")
        if mask is not None and mask not in d.indices:
            added[lang][mask] = d.add_symbol(mask)
            log(f"{release.path(release.dict_files[lang])}: the model's dictionary lacks the mask symbol "
                f"{mask}: appended at index {added[lang][mask]}")
        for tok in filter(None, [release.langtok(lang)]):
            if tok not in d.indices:  # augment_dictionary adds every listed language: cannot happen
                raise PrepareError(f"{release.path(release.dict_files[lang])}: no language token {tok}")
        dicts[lang] = d
    seg = {"kind": release.segmentation, "file": _segmentation_copy(release),
           "release_file": release.segmentation_file and release.path(release.segmentation_file)}
    info = {
        "family": release.family,
        "dir": release.dir,
        "dictionary": {lang: release.dict_files[lang] for lang in (src, tgt)},
        "dictionary_sha1": {lang: release.dictionary_sha1(lang) for lang in (src, tgt)},
        "model_symbols": model_symbols,
        "added_symbols": added,
        "langtok": {"source": release.langtok(src), "target": release.langtok(tgt), "placement": release.placement},
        "segmentation": seg,
        "tokenizer": release.tokenizer,
        **(release.record() if release.segmentation == HF_SEGMENTATION else {}),
    }
    return dicts[src], dicts[tgt], info


# ------------------------------------------------------------------------------------------
# main


#: the links eflomal gave the aligned split (--split-sentences aligned), kept in the data folder
SPLIT_ALIGNMENT_NAME = "train.split-alignment"

def _outputs(args, splits: List[str]) -> List[str]:
    s, t = args.source_lang, args.target_lang
    names = [f"dict.{s}.txt", f"dict.{t}.txt", MANIFEST_NAME]
    if getattr(args, "split_sentences", None) == "aligned" and not getattr(args, "split_alignment", None):
        names.append(SPLIT_ALIGNMENT_NAME)
    for split in splits:
        names.append(os.path.basename(doc_index_path("", split, s, t)))
        names += [f"{split}.{s}-{t}.{lang}.{ext}" for lang in (s, t) for ext in ("bin", "idx")]
    return names


def _check_destdir(destdir: str, names: List[str]) -> None:
    """Refuse a destination that exists as a file, that cannot be written (the directory,
    or where it does not exist yet, its nearest existing parent), or that already holds
    one of the files to write."""
    if os.path.exists(destdir) and not os.path.isdir(destdir):
        raise PrepareError(f"--destdir {destdir} exists and is not a directory")
    probe = os.path.abspath(destdir)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise PrepareError(f"--destdir {destdir}: {probe} is not a directory")
    try:  # try it (permissions, read-only file systems) rather than trust os.access
        os.rmdir(tempfile.mkdtemp(prefix=".docctx-prepare-check-", dir=probe))
    except OSError as e:
        raise PrepareError(f"--destdir {destdir}: cannot write in {probe} ({e.strerror or e})") from None
    clash = [n for n in names if os.path.exists(os.path.join(destdir, n))]
    if clash:
        raise PrepareError(f"{os.path.join(destdir, clash[0])} already exists; remove it or "
                           "choose another --destdir")


def prepare(args: argparse.Namespace, command: Optional[str] = None, log: Log = logger.info) -> dict:
    """Prepare a data directory; ``args`` holds the options of ``docctx-prepare`` (as its
    ``--help`` lists them, with their defaults), ``command`` is recorded in the
    manifest, ``log`` receives one line per step. Returns the manifest written to
    ``args.destdir``. Raises :class:`DocumentFormatError`, :class:`PrepareError` or
    ``FileNotFoundError``."""
    _check_args(args)
    src, tgt, sep = args.source_lang, args.target_lang, args.context_separator
    mask = getattr(args, "mask_symbol", None)
    splits = [s for s in SPLITS if getattr(args, f"{s}pref")]
    _check_destdir(args.destdir, _outputs(args, splits))
    release = None
    if getattr(args, "pretrained", None):
        langs = args.pretrained_langs.split(",") if getattr(args, "pretrained_langs", None) else None
        release = _load_release(args, src, tgt, langs)
        release.check()
        log(f"pretrained release {release.dir}: family {release.family}, dictionaries "
            f"{', '.join(sorted(set(release.dict_files.values())))}, segmentation {release.segmentation}"
            + (f" ({release.segmentation_file})" if release.segmentation_file else "")
            + (f", language tokens {release.langtok(src)} {release.langtok(tgt)}" if release.placement else ""))

    data: Dict[str, SplitData] = {}
    translator = getattr(args, "ref_translator", None)
    for split in splits:
        prefixes = [p for p in getattr(args, f"{split}pref").split(",") if p]
        data[split] = read_split(split, prefixes, src, tgt, args.input_format, sep, log, translator, mask)
    if translator is not None and not any(i["format"] == "wmt-xml" for d in data.values() for i in d.inputs):
        raise PrepareError("--ref-translator chooses the reference of a WMT 2021+ XML input, but no input is one")

    with Outputs("docctx-prepare") as guard:  # the folders made for --destdir go again if the run fails
        parent = os.path.dirname(os.path.abspath(args.destdir))
        guard.make_folders(parent)
        return _prepare_into(args, guard, parent, data, splits, release, log, command)


def _load_release(args, src: str, tgt: str, langs):
    """The release of ``--pretrained``: a fairseq release folder (:mod:`.pretrained`), or a
    transformers folder or hub id (:mod:`.hf_release`), whose family and segmentation are its
    own; a folder ``docctx-export transformers`` wrote is read as the fairseq release it is
    (:func:`~.pretrained.export_release`: the checkpoint's dictionaries and segmentation)."""
    if not is_hf_spec(args.pretrained):
        return load_release(args.pretrained, src, tgt, getattr(args, "pretrained_family", None), langs,
                            getattr(args, "pretrained_segmentation", None))
    for opt in ("pretrained_family", "pretrained_segmentation"):
        if getattr(args, opt, None):
            raise PrepareError(f"--{opt.replace('_', '-')} contradicts --pretrained {args.pretrained}: a transformers "
                               "folder's family is its config.json's model_type, its segmentation its tokenizer")
    d = resolve(args.pretrained)["dir"]
    try:
        meta = export_metadata(d)
    except HFFolderError as e:
        raise PrepareError(str(e)) from None
    if meta is not None:
        return export_release(d, meta, src, tgt, langs)
    return load_hf_release(args.pretrained, src, tgt, langs)


def _prepare_into(args, guard, parent, data, splits, release, log, command) -> dict:
    """:func:`prepare` once its input is read: the data folder written in a temporary folder
    beside ``--destdir`` and its files moved into place."""
    src, tgt, sep = args.source_lang, args.target_lang, args.context_separator
    mask = getattr(args, "mask_symbol", None)
    split_mode = getattr(args, "split_sentences", None)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(args.destdir))}.tmp-", dir=parent)
    try:
        work, out = os.path.join(tmp, "work"), os.path.join(tmp, "out")
        os.makedirs(work)
        os.makedirs(out)

        # SentencePiece (a model is trained on the training sentences as read: before they are split)
        spm_info = sp = None
        if release is None:  # a release is segmented below, after the split
            sp, spm_info = _spm_model(args, data, out, log)

        # divide and rule (training split only): at words, before the subword segmentation
        if split_mode:
            _split_training(args, data["train"], split_mode, out, log)

        if release is not None:
            spm_info = _segment_pretrained(release, data, out, src, tgt, args.workers, log)
        elif sp is not None:
            for d in data.values():
                tokenize_split(d, sp, args.workers)

        # filters (training split only)
        if "train" in data:
            _filter_training(args, data["train"], log)

        if release is not None and release.placement == "prepend":
            for d in data.values():
                for lang, side in ((src, d.src), (tgt, d.tgt)):
                    tok = release.langtok(lang)
                    side[:] = [[f"{tok} {s}" for s in doc] for doc in side]

        # plain text for the binarizer
        _write_plain_text(data, work, src, tgt)

        # dictionaries (separator at index 4)
        sd, td, pretrained_info = _dictionaries(args, release, work, log)
        log(f"dictionaries: {src} {len(sd)} types, {tgt} {len(td)} types"
            + (" (joined)" if args.joined_dictionary else "")
            + f"; {sep} at index {sd.index(sep)}" + (f", {mask} at index {sd.index(mask)}" if mask else ""))
        log(f"binarizing {', '.join(splits)}")
        binarize(work, out, splits, (src, tgt), (sd, td), args.workers, log)

        # document indexes + checks + manifest
        split_info = _index_splits(data, out, src, tgt, log)
        manifest = {
            "format_version": FORMAT_VERSION,
            "source_lang": src,
            "target_lang": tgt,
            "joined_dictionary": bool(args.joined_dictionary) if release is None else sd.symbols == td.symbols,
            "dictionaries": {src: f"dict.{src}.txt", tgt: f"dict.{tgt}.txt"},
            "context_separator": sep,
            "context_separator_index": {src: sd.index(sep), tgt: td.index(sep)},
            **({"mask_symbol": mask, "mask_symbol_index": {src: sd.index(mask), tgt: td.index(mask)}}
               if mask else {}),
            "spm": spm_info,
            "input_format": args.input_format,
            "splits": split_info,
            "command": command or "docctx-prepare",
        }
        if pretrained_info is not None:
            manifest["pretrained"] = pretrained_info
        write_manifest(out, manifest)

        _publish(args, out, splits, spm_info, release, log)
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _spm_model(args, data: Dict[str, SplitData], out: str, log: Log):
    """The SentencePiece model of ``--spm-model`` or trained for ``--spm-vocab-size`` (in
    ``out``) and the manifest's ``spm`` entry; ``(None, None)`` without either option."""
    if not (args.spm_vocab_size or args.spm_model):
        return None, None
    import sentencepiece as spm

    if args.spm_model:
        shutil.copyfile(args.spm_model, os.path.join(out, SPM_NAME + ".model"))
    else:
        train = data["train"]
        sents = [s for side in (train.src, train.tgt) for doc in side for s in doc]
        log(f"training SentencePiece ({args.spm_model_type}, vocab {args.spm_vocab_size}) "
            f"on {len(sents)} {args.source_lang}+{args.target_lang} training sentences")
        train_spm(sents, os.path.join(out, SPM_NAME), args.spm_vocab_size,
                  args.spm_model_type, args.workers, args.spm_input_sentence_size)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, SPM_NAME + ".model"))
    spm_info = _spm_entry(sp, out, args.spm_model_type if args.spm_vocab_size else _spm_model_type(sp),
                          "train" if args.spm_vocab_size else args.spm_model)
    return sp, spm_info


def _split_training(args, tr: SplitData, split_mode: str, out: str, log: Log) -> None:
    """Cut the training pairs in two (``--split-sentences``, in place); an alignment error is a
    :class:`PrepareError`."""
    try:
        tr.src, tr.tgt, tr.split_sentences = split_documents(
            tr.src, tr.tgt, split_mode, getattr(args, "split_min_len", None) or DEFAULT_SPLIT_MIN_LEN,
            getattr(args, "split_alignment", None), log, os.path.join(out, SPLIT_ALIGNMENT_NAME))
    except AlignmentError as e:
        raise PrepareError(str(e)) from None


def _filter_training(args, tr: SplitData, log: Log) -> None:
    """Apply the length filters to the training split (in place) and log what they removed; a
    split left with no pair is a :class:`PrepareError`."""
    stats = filter_split(tr, args.min_len, args.max_len, args.max_len_ratio,
                         getattr(args, "tuple_max_len", None), getattr(args, "tuple_max_len_ratio", None))
    tr.filtered = stats
    r = stats["removed_pairs"]
    active = [f"min-len {args.min_len}: {r['min_len']}"]
    for name, value in stats["settings"].items():
        if name != "min_len" and value is not None:
            active.append(f"{name.replace('_', '-')} {value:g}: {r[name]}")
    log(f"train: filters removed sentence pairs from the training targets ({', '.join(active)}); "
        f"{stats['context_only_pairs']} of them stay in their documents as context only, "
        f"{stats['removed_documents']} documents vanished entirely")
    if not tr.src:
        raise PrepareError("the filters removed every training sentence pair")


def _write_plain_text(data: Dict[str, SplitData], work: str, src: str, tgt: str) -> None:
    """Write every split's sentences as ``work/{split}.{lang}``, one a line (the binarizer's input)."""
    for split, d in data.items():
        for lang, side in ((src, d.src), (tgt, d.tgt)):
            with open(os.path.join(work, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                for doc in side:
                    f.writelines(s + "\n" for s in doc)


def _dictionaries(args, release: Optional[Release], work: str, log: Log):
    """The source and target dictionaries (the release's, given or built from the plain text
    in ``work``) and the manifest's ``pretrained`` entry (``None`` without a release)."""
    src, tgt, sep = args.source_lang, args.target_lang, args.context_separator
    mask = getattr(args, "mask_symbol", None)
    trainfiles = {lang: os.path.join(work, f"train.{lang}") for lang in (src, tgt)}
    pretrained_info = None
    if release is not None:
        sd, td, pretrained_info = _pretrained_dictionaries(release, src, tgt, sep, log, mask)
        if args.joined_dictionary and sd.symbols != td.symbols:
            raise PrepareError(f"--joined-dictionary: the release's dictionaries "
                               f"{release.dict_files[src]} and {release.dict_files[tgt]} differ")
    elif args.joined_dictionary:
        given = args.srcdict or args.tgtdict
        sd = td = (load_dictionary(given, sep, log, mask) if given else build_dictionary(
            [trainfiles[src], trainfiles[tgt]], sep, args.thresholdsrc, args.nwordssrc,
            args.workers, args.padding_factor, mask))
    else:
        sd = (load_dictionary(args.srcdict, sep, log, mask) if args.srcdict else build_dictionary(
            [trainfiles[src]], sep, args.thresholdsrc, args.nwordssrc, args.workers,
            args.padding_factor, mask))
        td = (load_dictionary(args.tgtdict, sep, log, mask) if args.tgtdict else build_dictionary(
            [trainfiles[tgt]], sep, args.thresholdtgt, args.nwordstgt, args.workers,
            args.padding_factor, mask))
    return sd, td, pretrained_info


def _index_splits(data: Dict[str, SplitData], out: str, src: str, tgt: str, log: Log) -> dict:
    """Write the document index of every split into ``out``, check the binarized files against
    it and return the manifest's ``splits`` entry."""
    split_info = {}
    for split, d in data.items():
        idx = DocIndex(d.doc_ids, [len(doc) for doc in d.src], d.context_only_flags())
        idx.write(doc_index_path(out, split, src, tgt))
        tokens = {}
        for lang, side in ((src, d.src), (tgt, d.tgt)):
            sizes = _binarized_sizes(out, split, src, tgt, lang)
            tokens[lang] = int(sizes.sum()) - len(sizes)  # without </s>
            expected = sum(len(s.split()) for doc in side for s in doc)
            if len(sizes) != idx.num_sentences or tokens[lang] != expected:
                raise RuntimeError(
                    f"internal error: {split}.{lang} binarized {len(sizes)} lines / "
                    f"{tokens[lang]} tokens, expected {idx.num_sentences} / {expected}")
        split_info[split] = {
            "inputs": d.inputs, "documents": len(idx), "sentences": idx.num_sentences,
            "context_only": idx.num_context_only,
            "source_tokens": tokens[src], "target_tokens": tokens[tgt],
            "filtered": d.filtered,
        }
        if d.split_sentences is not None:
            split_info[split]["split_sentences"] = d.split_sentences
        log(f"{split}: {len(idx)} documents, {idx.num_sentences} sentences"
            + (f" ({idx.num_context_only} context only)" if idx.num_context_only else "")
            + f", {tokens[src]} {src} / {tokens[tgt]} {tgt} tokens")
    return split_info


def _publish(args, out: str, splits: List[str], spm_info: Optional[dict], release: Optional[Release],
             log: Log) -> None:
    """Move the files of ``out`` into ``--destdir`` (checked again first) and log what was written."""
    src, tgt = args.source_lang, args.target_lang
    _check_destdir(args.destdir, os.listdir(out))
    if os.path.isdir(args.destdir):
        for name in sorted(os.listdir(out)):
            os.replace(os.path.join(out, name), os.path.join(args.destdir, name))
    else:
        os.replace(out, args.destdir)
    log(f"wrote {args.destdir}: {', '.join(splits)} ({src}-{tgt} .bin/.idx + .docs), "
        f"dict.{src}.txt, dict.{tgt}.txt, {MANIFEST_NAME}" + (f", {SPM_MODEL_NAME}" if spm_info else "")
        + (f", {BPE_CODES}" if release is not None and _segmentation_copy(release) == BPE_CODES else ""))


