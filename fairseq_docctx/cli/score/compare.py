"""``docctx-score compare``: :mod:`fairseq_docctx.evaluation.significance`."""
import os

from ...evaluation import significance as sig
from ...evaluation.bleu import bleu_metric, metric_key, pretokenizer, scored_sides
from ...evaluation.io import HYP_FORMATS, POST_PROCESS, TEXT_FORMATS, ScoreInputError, corpus_identity, load_corpus, write_json_file
from .options import add_resegment_args, add_subcommand, empty_hypotheses_note, resegment_note


def add_parser(sub):
    p = add_subcommand(sub, "compare", main, help="paired bootstrap and approximate randomization against a "
                       "baseline, resampling documents",
                       description="Paired significance tests (sacreBLEU's) of systems against a baseline: "
                       "paired bootstrap resampling with 95%% confidence intervals and approximate "
                       "randomization, for BLEU and chrF, resampling whole documents.")
    g = p.add_argument_group("input")
    g.add_argument("--baseline", "-b", required=True, help="the baseline's hypotheses (formats as for bleu)")
    g.add_argument("--hyp", "-H", required=True, nargs="+", metavar="SYS", help="the systems' hypotheses")
    g.add_argument("--ref", "-r", required=True, help="references")
    g.add_argument("--names", help="comma-separated names of the baseline and the systems, in order "
                   "(default: the file names; use the --name of their run JSONs to mark them in a table)")
    g.add_argument("--hyp-format", choices=HYP_FORMATS, default="auto")
    g.add_argument("--ref-format", choices=TEXT_FORMATS, default="auto")
    g.add_argument("--ref-translator", help="WMT XML/JSON Lines references: the translator(s) to use, "
                   "comma-separated (default: every reference the file holds)")
    g.add_argument("--hyp-system", metavar="NAME", help="WMT 2021+ XML hypotheses: the system whose <hyp> to "
                   "compare (default: each file's only system)")
    g.add_argument("--docids", help="document-id file for plain-text sides")
    g.add_argument("--data", help="fairseq data directory whose SPLIT.*.docs index gives the documents of generate output")
    g.add_argument("--split", default="test")
    g.add_argument("--post-process", choices=POST_PROCESS, default="auto")
    add_resegment_args(p, hyp_docids=False)
    t = p.add_argument_group("tests")
    t.add_argument("--metrics", default="bleu,chrf",
                   help=f"comma-separated, of {', '.join(sig.METRICS)} (default: bleu,chrf)")
    t.add_argument("--test", choices=("bs", "ar", "both"), default="both",
                   help="paired bootstrap (bs), approximate randomization (ar) or both (default)")
    t.add_argument("--resample", choices=("documents", "sentences"), default="documents",
                   help="the unit of resampling (default: documents)")
    t.add_argument("--document", action="store_true", help="score joined documents (d-BLEU, d-chrF)")
    t.add_argument("--bs-samples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    t.add_argument("--ar-trials", type=int, default=10000, help="randomization trials (default 10000)")
    t.add_argument("--seed", type=int, default=12345, help="seed of both tests (default 12345, sacreBLEU's)")
    t.add_argument("--alpha", type=float, default=0.05, help="significance level of the marks (default 0.05)")
    t.add_argument("--tokenized", action="store_true",
                   help="BLEU of the text's whitespace tokens (sacreBLEU's tokenize='none'), as bleu --tokenized")
    t.add_argument("--pretokenize", metavar="NAME", help="BLEU: tokenize both sides first (implies "
                   "--tokenized), as bleu --pretokenize: moses, moses-aggressive, none, or a sacreBLEU tokenizer")
    t.add_argument("--lang", "-l", default="en", help="language of the references, for --pretokenize moses")
    t.add_argument("--tokenize", default="13a")
    t.add_argument("--lowercase", "-lc", action="store_true")
    t.add_argument("--smooth-method", default=None,
                   help="default: none with --tokenized (multi-bleu.perl's), else exp")
    p.add_argument("--json", metavar="FILE", help="write the results here (read by 'docctx-score table --significance')")
    return p


def main(args):
    files = [args.baseline] + list(args.hyp)
    names = args.names.split(",") if args.names else [os.path.basename(f) for f in files]
    if len(names) != len(files):
        raise ScoreInputError(f"--names gives {len(names)} names for {len(files)} systems (baseline included)")
    if len(set(names)) != len(names):
        raise ScoreInputError("two systems have the same name; give --names")
    metrics = [m for m in args.metrics.split(",") if m]
    for m in metrics:
        if m not in sig.METRICS:
            raise ScoreInputError(f"--metrics: unknown metric {m!r} (choose from {', '.join(sig.METRICS)})")
    if "bleu" in metrics:  # a tokenizer that cannot be built fails before the files are read
        if args.pretokenize is not None:
            pretokenizer(args.pretokenize, args.lang)
        elif not args.tokenized:
            bleu_metric(tokenize=args.tokenize)
    # resampled sentences of sentence-level scores need no documents: plain sentence-aligned
    # files are one corpus
    needs = ("--document" if args.document else "--resample documents"
             if args.resample == "documents" else False)
    corpora = [load_corpus(f, args.ref, hyp_format=args.hyp_format, ref_format=args.ref_format,
                           docids=args.docids, data=args.data, split=args.split,
                           post_process=args.post_process, ref_translator=args.ref_translator,
                           hyp_system=args.hyp_system, documents=needs, resegment=args.resegment)
               for f in files]
    for f, c in zip(files, corpora):
        empty_hypotheses_note(f, c)
        resegment_note(f, c)
    tests = sig.TESTS if args.test == "both" else (args.test,)
    report = {"baseline": names[0], "systems": names[1:], "files": dict(zip(names, files)), "ref": args.ref,
              "resample": "documents" if args.document else args.resample, "document": args.document,
              "documents": len(corpora[0].doc_ids) if corpora[0].has_documents else None,
              "sentences": corpora[0].num_sentences,
              **{k: v for k, v in corpus_identity(corpora[0]).items() if k.endswith("_sha1")},
              "alpha": args.alpha, "tests": list(tests), "seed": args.seed, "comparisons": {}}
    if args.resegment:
        report["resegmentation"] = {n: c.resegmentation.as_dict() for n, c in zip(names, corpora)}
    pretok = args.pretokenize if args.pretokenize != "none" else None
    for m in metrics:
        tok = (args.tokenized or args.pretokenize is not None) and m == "bleu"
        sides = [scored_sides(c, pretok if tok else None, args.lang) for c in corpora]
        smooth = args.smooth_method or ("none" if tok else "exp")
        metric = sig.metric_for(m, tokenized=tok, tokenize=args.tokenize, lowercase=args.lowercase,
                                smooth_method=smooth)
        res = sig.compare_systems(metric, (names[0], sides[0][0]), [(n, s[0]) for n, s in zip(names[1:], sides[1:])],
                                  sides[0][1], resample=args.resample, document=args.document, tests=tests,
                                  bs_samples=args.bs_samples, ar_trials=args.ar_trials, seed=args.seed)
        if tok:
            res["signature"] += f"|pretok:{pretok or 'none'}"
        report["comparisons"][metric_key(m, tok, args.document)] = res
    if args.json:  # first: a reader that stops reading (| head) loses no file
        write_json_file(args.json, report, args.outputs)
    print(sig.format_comparison(report))
    return 0
