"""``docctx-score apt``: :mod:`fairseq_docctx.evaluation.apt`."""
import os

from ...evaluation import apt
from ...evaluation.io import ScoreInputError, write_json
from .options import add_subcommand


def add_parser(sub):
    p = add_subcommand(sub, "apt", main,
                       help="APT: accuracy of pronoun translation (Miculicich Werlen & Popescu-Belis 2017)",
                       description="APT, the accuracy of pronoun translation, on plain sentence-aligned files "
                       "with source-reference and source-hypothesis alignments (see docs/evaluation.md).")
    g = p.add_argument_group("input (one sentence a line, whitespace-tokenized, as aligned)")
    g.add_argument("-s", "--source-lang", required=True, help="source language (recorded)")
    g.add_argument("-t", "--target-lang", required=True, help="target language (picks the built-in pronoun list)")
    g.add_argument("--src", required=True, help="source sentences")
    g.add_argument("--ref", required=True, help="reference translations")
    g.add_argument("--hyp", required=True, help="candidate translations")
    g.add_argument("--align-ref", required=True, help="Pharaoh/Moses i-j links source-reference, a line per sentence")
    g.add_argument("--align-hyp", required=True, help="Pharaoh/Moses i-j links source-hypothesis, a line per sentence")
    g = p.add_argument_group("APT configuration")
    g.add_argument("--items", choices=("reference", "source"), default="reference",
                   help="reference: every reference pronoun is an item (the HAN paper's released scores; "
                   "default); source: every source pronoun of --source-pronouns (APT's own)")
    g.add_argument("--target-pronouns", metavar="FILE|apt|none",
                   help="target pronouns, one a line (default: the built-in list of -t; en: the 19 of the HAN "
                   "paper's scores); 'apt': APT's 15-word English list; 'none': every word its own category")
    g.add_argument("--source-pronouns", metavar="FILE", help="source pronouns, one a line (--items source)")
    g.add_argument("--cases", default="1,2,3,4,5,6", help="cases to count (default 1,2,3,4,5,6)")
    g.add_argument("--weights", default="1,0.5,0,0,0,0", help="a weight per case (default 1,0.5,0,0,0,0)")
    g.add_argument("--count-other-as-equal", action="store_true",
                   help="a non-pronoun on both sides counts as equal (APT's count_OTHER_as_equal)")
    g.add_argument("--equal", metavar="FILE", help="groups of equal pronouns, comma-separated, one group a line")
    g.add_argument("--similar", metavar="FILE", help="groups of similar pronouns (case 2), one group a line")
    g.add_argument("--improve-tgt-words", metavar="FILE",
                   help="run APT's alignment improvement with these target words, one a line")
    g.add_argument("--improve-src-words", metavar="FILE",
                   help="source words whose aligned target words the improvement leaves alone")
    g.add_argument("--src-word-sep", help="separator of a source word's parts (e.g. '-')")
    g.add_argument("--tgt-word-sep", help="separator of a target word's parts (e.g. '-' for French est-il)")
    o = p.add_argument_group("output")
    o.add_argument("--confusion", action="store_true", help="also print the reference x candidate table")
    o.add_argument("--detail", metavar="FILE", help="write every item with its case (APT's .detail) to FILE")
    o.add_argument("--json", metavar="FILE", help="write the result to this JSON file (merged into it when it "
                   "holds the same run; read by 'docctx-score table')")
    o.add_argument("--name", help="run name in the JSON (default: the hypothesis file)")
    return p


def _numbers(text: str, kind, what: str):
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ScoreInputError(f"--{what}: expected comma-separated numbers, got {text!r}") from None


def config_from_args(args) -> apt.AptConfig:
    tgt = args.target_pronouns
    if tgt is None:
        if args.target_lang not in apt.TARGET_PRONOUNS:
            raise ScoreInputError(f"no built-in pronoun list for target language {args.target_lang!r} (have: "
                                  f"{', '.join(sorted(apt.TARGET_PRONOUNS))}); give --target-pronouns FILE")
        target_pronouns = apt.TARGET_PRONOUNS[args.target_lang]
    elif tgt == "none":
        target_pronouns = None
    elif tgt == "apt":
        target_pronouns = apt.EN_PRONOUNS_APT
    else:
        target_pronouns = apt.read_word_list(tgt)
    words = lambda path: apt.read_word_list(path) if path else None  # noqa: E731
    return apt.AptConfig(
        items=args.items, target_pronouns=target_pronouns, source_pronouns=words(args.source_pronouns),
        cases=_numbers(args.cases, int, "cases"), weights=_numbers(args.weights, float, "weights"),
        count_other_as_equal=args.count_other_as_equal,
        equal=apt.read_groups(args.equal) if args.equal else (),
        similar=apt.read_groups(args.similar) if args.similar else (),
        improve_tgt_words=words(args.improve_tgt_words), improve_src_words=words(args.improve_src_words),
        src_word_sep=args.src_word_sep or None, tgt_word_sep=args.tgt_word_sep or None)


def main(args):
    config = config_from_args(args)
    res = apt.apt_files(args.src, args.ref, args.hyp, args.align_ref, args.align_hyp, config)
    text = apt.format_report(res)
    if args.confusion:
        text += "\n" + apt.format_confusion(res)
    if args.detail:
        args.outputs.write_text(args.detail, apt.detail_text(res))
    if args.json:
        metric = res.as_dict()
        metric["source_lang"], metric["target_lang"] = args.source_lang, args.target_lang
        files = {"hyp": args.hyp, "ref": args.ref, "src": args.src, "align_ref": args.align_ref,
                 "align_hyp": args.align_hyp}
        write_json(args.json, args.name or os.path.basename(args.hyp), files, {"apt": metric}, args.outputs)
    print(text)  # after the files: a reader that stops reading (| head) loses none
    return 0
