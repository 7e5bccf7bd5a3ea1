"""``docctx-score resegment``: :mod:`fairseq_docctx.evaluation.resegment`, the re-segmented
hypothesis written out (for APT's word aligner, or another tool)."""
import sys

from ...evaluation import resegment
from ...evaluation.io import HYP_FORMATS, POST_PROCESS, TEXT_FORMATS, load_corpus, write_json_file
from .options import add_subcommand


def add_parser(sub):
    p = add_subcommand(sub, "resegment", main,
                       help="cut a hypothesis with other sentence boundaries into the reference's sentences",
                       description=resegment.__doc__.split("\n\n")[0] + " Writes one line per reference "
                       "sentence, in the reference's documents and order (its document ids are the reference's).")
    g = p.add_argument_group("input")
    g.add_argument("--hyp", "-H", required=True, help="hypotheses: text (one line per document, or lines with "
                   "their own document ids) or fairseq-generate output")
    g.add_argument("--ref", "-r", required=True, help="the reference, with its documents")
    g.add_argument("--hyp-format", choices=HYP_FORMATS, default="auto")
    g.add_argument("--ref-format", choices=TEXT_FORMATS, default="auto")
    g.add_argument("--docids", help="the reference's document-id file (default: its path with the extension "
                   "replaced by .docids)")
    g.add_argument("--hyp-docids", metavar="FILE", help="the hypothesis' own document ids, one a line (default: "
                   "its path with the extension replaced by .docids, if there is one)")
    g.add_argument("--ref-translator", metavar="NAMES", help="WMT 2021+ XML references: the translator to cut by "
                   "(default: the file's first)")
    g.add_argument("--hyp-system", metavar="NAME", help="WMT 2021+ XML hypotheses: the system to read")
    g.add_argument("--post-process", choices=POST_PROCESS, default="auto",
                   help="undo SentencePiece/BPE on generate output (auto: when pieces are present)")
    o = p.add_argument_group("output")
    o.add_argument("--output", "-o", required=True, help="the re-segmented hypothesis, one line per reference sentence")
    o.add_argument("--json", metavar="FILE", help="also write the report (documents re-segmented, words moved, "
                   "per document) to this JSON file")
    return p


def main(args):
    corpus = load_corpus(args.hyp, args.ref, hyp_format=args.hyp_format, ref_format=args.ref_format,
                         docids=args.docids, post_process=args.post_process, ref_translator=args.ref_translator,
                         hyp_system=args.hyp_system, resegment=True, hyp_docids=args.hyp_docids)
    report = corpus.resegmentation
    if args.json:  # first: a reader that stops reading (| head) loses no file
        write_json_file(args.json, {"hyp": args.hyp, "ref": args.ref, **report.as_dict(),
                                    "words_moved_per_document": report.per_document}, args.outputs)
    args.outputs.write_text(args.output, "".join(s + "\n" for s in corpus.flat("hyp")))
    print(f"{args.output}: {corpus.num_sentences} lines in {len(corpus.doc_ids)} documents; {report.line()}",
          file=sys.stderr)
    return 0
