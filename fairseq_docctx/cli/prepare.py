"""``docctx-prepare``: raw parallel documents -> a fairseq data directory + document index.

Parses the options and prints the progress; the work is :func:`fairseq_docctx.data.prepare.prepare`.
"""
import argparse
import shlex
import sys
from typing import List, Optional

from fairseq_docctx.data.documents import DocumentFormatError
from fairseq_docctx.data.prepare import SPLITS, PrepareError, prepare
from fairseq_docctx.data.pretrained import FAMILIES, PretrainedError
from fairseq_docctx.data.readers import INPUT_FORMATS
from fairseq_docctx.data.split import DEFAULT_MIN_LEN as SPLIT_MIN_LEN
from fairseq_docctx.data.split import MODES as SPLIT_MODES

from . import exit_on_errors_and_signals

PROG = "docctx-prepare"


def log(msg: str) -> None:
    print(f"{PROG}: {msg}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Raw parallel documents -> fairseq binarized data + document index "
        "(for --task document_translation).",
    )
    p.add_argument("-s", "--source-lang", required=True, metavar="SRC")
    p.add_argument("-t", "--target-lang", required=True, metavar="TGT")
    for split in SPLITS:
        p.add_argument(f"--{split}pref", metavar="FP", default=None,
                       help=f"{split} file prefix(es), comma-separated and concatenated in order; "
                       "PREFIX.LANG, a path with {lang}/{other} placeholders, or one WMT 2021+ XML / "
                       "JSON Lines file holding both sides")
    p.add_argument("--destdir", default="data-bin", metavar="DIR", help="output directory (default: data-bin)")
    p.add_argument("--input-format", choices=INPUT_FORMATS, default="auto",
                   help="how documents are delimited (default: auto-detect per file)")
    p.add_argument("--ref-translator", metavar="NAME",
                   help="WMT 2021+ XML inputs (one file per prefix, source and references in it): the "
                   "translator of the reference to use (default: the first <ref> of the file)")
    p.add_argument("--joined-dictionary", action="store_true", help="one dictionary for both sides")
    p.add_argument("--srcdict", metavar="FP", help="reuse this source dictionary")
    p.add_argument("--tgtdict", metavar="FP", help="reuse this target dictionary")
    p.add_argument("--thresholdsrc", type=int, default=0, metavar="N",
                   help="map source words seen fewer than N times to <unk>")
    p.add_argument("--thresholdtgt", type=int, default=0, metavar="N", help="same for the target")
    p.add_argument("--nwordssrc", type=int, default=-1, metavar="N",
                   help="source dictionary size incl. special symbols (-1 = all)")
    p.add_argument("--nwordstgt", type=int, default=-1, metavar="N", help="same for the target")
    p.add_argument("--padding-factor", type=int, default=8, metavar="N")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes/threads for SentencePiece and binarization")
    p.add_argument("--spm-vocab-size", type=int, default=0, metavar="N",
                   help="train one joint SentencePiece model of N pieces on the training data "
                   "(0 = text is already tokenized, use it as is)")
    p.add_argument("--spm-model", metavar="FP", help="apply this SentencePiece model instead")
    p.add_argument("--spm-model-type", default="unigram", choices=("unigram", "bpe", "char", "word"))
    p.add_argument("--spm-input-sentence-size", type=int, default=2_000_000, metavar="N",
                   help="sentences sampled for SentencePiece training (0 = all)")
    p.add_argument("--pretrained", metavar="DIR",
                   help="the release directory of a pretrained fairseq translation model: its "
                   "dictionaries, segmentation (SentencePiece; Moses + fastBPE or subword-nmt codes; or none) "
                   "and language tokens make the data; or a Hugging Face transformers model folder (config.json "
                   "of model_type marian, m2m_100, mbart or fsmt) or hub id OWNER/NAME[@REVISION]: its "
                   "tokenizer's ids and language tokens (see docs/pretrained.md)")
    p.add_argument("--pretrained-family", choices=FAMILIES, metavar="NAME",
                   help="the release's family (" + ", ".join(FAMILIES) + "; default: detected from "
                   "DIR's files; a transformers folder's is its model_type)")
    p.add_argument("--pretrained-segmentation", metavar="FILE|none",
                   help="the release's segmentation: a SentencePiece model (*.model) or BPE codes (any other "
                   "file; fastBPE or subword-nmt, read from its lines), as given or in DIR; none: the text is "
                   "pre-tokenized, transformer family only (default: the one such file in DIR; a transformer release "
                   "without one: none; see docs/pretrained.md)")
    p.add_argument("--pretrained-langs", metavar="SRC,TGT",
                   help="the release's codes of the two languages for the language tokens (default: "
                   "-s/-t when the release lists them, else its one code CODE_*, e.g. en -> en_XX; a "
                   "transformers folder: its tokenizer's src_lang/tgt_lang codes, e.g. eng_Latn,deu_Latn)")
    p.add_argument("--context-separator", default="<sep>", metavar="SYM",
                   help="symbol put in every dictionary at index 4 (default: <sep>)")
    p.add_argument("--mask-symbol", default=None, metavar="SYM",
                   help="also put SYM (e.g. <mask>) in both dictionaries: the mask of CoWord dropout "
                   "(fairseq-train --coword-dropout; Fernandes et al. 2021), right after the separator in a "
                   "dictionary built here, appended to a given or pretrained one that lacks it; recorded in "
                   "docctx.json (default: none)")
    p.add_argument("--min-len", type=int, default=1, metavar="N",
                   help="train: drop pairs with fewer than N tokens on either side")
    p.add_argument("--max-len", type=int, default=None, metavar="N",
                   help="train: drop pairs with more than N tokens on either side")
    p.add_argument("--max-len-ratio", type=float, default=None, metavar="R",
                   help="train: drop pairs whose token-length ratio exceeds R")
    p.add_argument("--tuple-max-len", type=int, default=None, metavar="N",
                   help="train, the tuple filter of Kuang & Xiong (2018): drop a pair (x, y) when x, y or "
                   "the previous source sentence before-x has more than N tokens (the paper: 50)")
    p.add_argument("--tuple-max-len-ratio", type=float, default=None, metavar="R",
                   help="train, the tuple filter of Kuang & Xiong (2018): drop a pair (x, y) when the "
                   "lengths of x and before-x differ by a factor above R (longer/shorter)")
    p.add_argument("--split-sentences", choices=SPLIT_MODES, default=None, metavar="MODE",
                   help="divide and rule (Lupo et al. 2022): cut every training pair in two, its first half "
                   "the previous sentence of its second in the pair's document; MODE middle (each side at "
                   "its middle word) or aligned (a cut that crosses no word-alignment link, eflomal's or "
                   "--split-alignment's); validation and test are not split (default: off)")
    p.add_argument("--split-min-len", type=int, default=None, metavar="N",
                   help=f"with --split-sentences: pairs of fewer than N source words (or fewer than 2 target "
                   f"words) stay whole (default {SPLIT_MIN_LEN}, the authors')")
    p.add_argument("--split-alignment", metavar="FILE",
                   help="with --split-sentences aligned: Pharaoh links (i-j, 0-based whitespace words), one "
                   "line per training pair in the order read, instead of aligning with eflomal")
    return p


def main(argv: Optional[List[str]] = None) -> dict:
    """In-process entry point: parse ``argv`` and run; errors are raised, not printed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    return prepare(args, command=shlex.join([PROG] + argv), log=log)


def cli_main(argv: Optional[List[str]] = None) -> None:
    """Console script: errors are printed as ``docctx-prepare: error: ...``, exit code 2."""
    exit_on_errors_and_signals(PROG, main, argv, (DocumentFormatError, PrepareError, PretrainedError, FileNotFoundError),
                               message=_message)


def _message(e) -> str:
    return str(e) if not isinstance(e, FileNotFoundError) or not e.filename else f"no such file: {e.filename}"


if __name__ == "__main__":
    cli_main()
