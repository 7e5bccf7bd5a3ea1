"""What the ``docctx-score`` subcommands share: their input, model and output options, the
registration of a subcommand with its errors, and the notes and results they print."""
import functools
import os
import sys
from typing import Dict, List, Union

from .. import add_force, mark, option_values, output_guard, run_command
from ...errors import UsageError
from ...data.outputs import DATA_DIRECTORY_FILES
from ...evaluation.io import (HYP_FORMATS, POST_PROCESS, TEXT_FORMATS, Corpus, corpus_identity, load_corpus,
                              write_json)

#: what the options of the subcommands read (their ``dest``: what the output guard calls it)
INPUTS = {
    "hyp": "the hypotheses", "ref": "the reference", "src": "the source", "docids": "the document ids",
    "data": ("the data directory", DATA_DIRECTORY_FILES),
    "path": "the checkpoint", "spm_model": "the SentencePiece model", "runs": "the run",
    "significance": "the comparison", "paper_scores": "the published scores", "align_ref": "the alignment",
    "align_hyp": "the alignment", "target_pronouns": "the pronoun list", "source_pronouns": "the pronoun list",
    "equal": "the groups", "similar": "the groups", "improve_tgt_words": "the word list",
    "improve_src_words": "the word list", "noun_list": "the noun list", "vectors": "the word vectors",
    "checkpoint": "the checkpoint", "dict": "the dictionary", "testset": "the test set",
    "groups": "the test set's groups", "compare": "the report", "evalsets": "the evaluation set",
    "inputs": "the inputs", "input": "the input", "baseline": "the baseline", "meteor_jar": "the METEOR jar",
    "hyp_docids": "the hypothesis' document ids",
}
#: what the options of the subcommands write
OUTPUTS = {"json": "file", "output": "file", "detail": "file", "scores_out": "file", "plot": "file",
           "translations_out": "folder", "outdir": "folder"}

#: the note a corpus-level metric prints (on stderr) for files without documents
NO_DOCUMENTS_NOTE = ("note: no document structure in {files}: corpus-level scores only; per-document "
                     "scores need documents (a .docids file, blank lines, <d> markers, XML, or --data DIR)")

#: the note (on stderr) for hypotheses that are empty (an empty line, ``<seg id="N"/>``)
EMPTY_HYPOTHESES_NOTE = "note: {hyp}: {n} of {total} hypotheses are empty (scored as empty translations)"


def input_errors():
    """The errors every subcommand turns into one line and exit code 2: bad input files, a
    checkpoint or data directory that cannot be used, WordNet missing."""
    from ...data.manifest import ManifestError
    from ...data.documents import DocumentFormatError
    from ...errors import CheckpointError, UsageError
    from ...evaluation.io import ScoreInputError
    from ...evaluation.wordnet import WordNetMissing

    return (ScoreInputError, DocumentFormatError, FileNotFoundError, WordNetMissing, CheckpointError, ManifestError,
            UsageError)


def add_subcommand(sub, name, main, errors=(), message=None, **kwargs):
    """The parser of subcommand ``name``; its ``func(args)`` runs ``main(args)`` and returns
    the exit code (:func:`fairseq_docctx.cli.run_command`): 2 with one line
    ``docctx-score NAME: error: ...`` for :func:`input_errors` and ``errors``."""
    p = sub.add_parser(name, **kwargs)
    extra = {} if message is None else {"message": message}
    p.set_defaults(func=functools.partial(run_command, f"docctx-score {name}", functools.partial(_guarded, p, main),
                                          errors=input_errors() + tuple(errors), **extra))
    return p


def finish_parser(p):
    """Mark what a subcommand's options read and write (:data:`INPUTS`, :data:`OUTPUTS`) and
    give it ``--force`` when it writes files."""
    mark(p, INPUTS, OUTPUTS)
    if any(a.dest in OUTPUTS for a in p._actions) and not any(a.dest == "force" for a in p._actions):
        add_force(p, "a file (--json, -o, ...)")
    return p


def _guarded(parser, main, args):
    """``main(args)`` with ``args.outputs``, the run's output guard
    (:func:`fairseq_docctx.cli.output_guard`): every file the options name checked before the
    work; the document-id files beside the text sides are inputs too."""
    from ...data.readers import docids_path

    extra = [("the document ids", docids_path(v, None)) for dest in ("hyp", "ref", "src")
             for v in option_values(getattr(args, dest, None))]
    with output_guard(parser, args, "docctx-score", extra) as args.outputs:
        return main(args)


# ------------------------------------------------------------------------------------------
# text metrics


def add_input_args(p, ref=True, src=False, ref_required=True, src_required=False):
    g = p.add_argument_group("input")
    g.add_argument("--hyp", "-H", required=True, help="hypotheses: text (formats below) or fairseq-generate output")
    if ref:
        g.add_argument("--ref", "-r", required=ref_required, action="append",
                       help="references; several references: --ref once per file (BLEU and chrF "
                       "use them all, the other metrics the first), or one WMT 2021+ XML file")
    if src:
        g.add_argument("--src", "-s", required=src_required, help="sources")
    g.add_argument("--hyp-format", choices=HYP_FORMATS, default="auto")
    g.add_argument("--ref-format", choices=TEXT_FORMATS, default="auto")
    g.add_argument("--src-format", choices=TEXT_FORMATS, default="auto")
    g.add_argument("--docids", help="document-id file for plain-text sides (default: each file's path with its "
                   "extension replaced by .docids, e.g. ref.de -> ref.docids, as docctx-prepare finds it)")
    g.add_argument("--ref-translator", metavar="NAMES", help="WMT 2021+ XML references: the translators whose "
                   "references to use, comma-separated (default: every <ref> of the file, several references)")
    g.add_argument("--hyp-system", metavar="NAME", help="WMT 2021+ XML hypotheses: the system whose <hyp> to "
                   "score (default: the file's only system)")
    g.add_argument("--data", help="fairseq data directory whose SPLIT.*.docs index gives the documents of generate output")
    g.add_argument("--split", default="test", help="split of --data (default: test)")
    g.add_argument("--post-process", choices=POST_PROCESS, default="auto",
                   help="undo SentencePiece/BPE on generate output (auto: when pieces are present)")
    add_resegment_args(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", help="write the scores (with per-document scores) to this JSON file")
    o.add_argument("--name", help="run name in the JSON/table (default: the hypothesis file)")
    o.add_argument("--per-document", action="store_true", help="also print per-document scores")


def add_resegment_args(p, hyp_docids: bool = True):
    """``--resegment`` (and ``--hyp-docids``): hypotheses whose documents have another number
    of lines than the reference's (:mod:`fairseq_docctx.evaluation.resegment`)."""
    g = p.add_argument_group("hypotheses with other sentence boundaries")
    g.add_argument("--resegment", action="store_true",
                   help="cut each document's hypothesis words into the reference's sentences by the least word "
                   "edit distance (Matusov et al. 2005, mwerSegmenter's segmentation), then score the new lines; "
                   "the hypothesis: its own documents (--hyp-docids, its .docids file, a document format), or "
                   "one line per reference document")
    if hyp_docids:
        g.add_argument("--hyp-docids", metavar="FILE", help="the hypothesis' own document ids, one a line (default: "
                       "its path with the extension replaced by .docids, if there is one)")


def resegment_note(path: str, corpus: Corpus) -> None:
    """The report of ``--resegment`` on stderr: documents re-segmented, words moved."""
    if corpus.resegmentation is not None:
        print(f"note: {path}: {corpus.resegmentation.line()}", file=sys.stderr)


def add_level_args(g):
    g.add_argument("--document", action="store_true",
                   help="document level: each document's sentences joined into one segment, the "
                   "score over documents (signature: level:doc)")
    g.add_argument("--both", action="store_true", help="sentence level and document level")


def levels(args) -> List[bool]:
    """The levels asked for, as ``document`` flags."""
    return [False, True] if args.both else [bool(args.document)]


def empty_hypotheses_note(path: str, corpus: Corpus):
    """:data:`EMPTY_HYPOTHESES_NOTE` on stderr if ``corpus`` has empty hypotheses."""
    empty = sum(1 for s in corpus.flat("hyp") if not s)
    if empty:
        print(EMPTY_HYPOTHESES_NOTE.format(hyp=path, n=empty, total=corpus.num_sentences), file=sys.stderr)


def corpus_from_args(args, documents: Union[bool, str] = False) -> Corpus:
    """The corpus of a subcommand's input options. ``documents``: as for
    :func:`~fairseq_docctx.evaluation.io.load_corpus` (False for corpus-level metrics, which
    then also score plain sentence-aligned files: the note :data:`NO_DOCUMENTS_NOTE` goes to
    stderr, and ``--per-document`` is ignored)."""
    corpus = load_corpus(args.hyp, getattr(args, "ref", None), getattr(args, "src", None),
                         hyp_format=args.hyp_format, ref_format=args.ref_format,
                         src_format=args.src_format, docids=args.docids, data=args.data,
                         split=args.split, post_process=args.post_process,
                         ref_translator=args.ref_translator, hyp_system=args.hyp_system,
                         documents=documents, resegment=args.resegment, hyp_docids=args.hyp_docids)
    if not corpus.has_documents:
        names = ", ".join(v for k, v in corpus.files.items())
        print(NO_DOCUMENTS_NOTE.format(files=names), file=sys.stderr)
        args.per_document = False
    empty_hypotheses_note(args.hyp, corpus)
    resegment_note(args.hyp, corpus)
    if args.resegment and isinstance(documents, str) and documents.startswith("d-"):
        print(f"note: {documents} needs no re-segmentation: a document's words are joined in their order, which "
              "re-segmentation keeps", file=sys.stderr)
    return corpus


def emit(args, metrics: Dict[str, dict], corpus: Corpus, text: str):
    """Print ``text``; with ``--json``, first write ``metrics``, each score with what identifies
    the test set it was computed on (``sentences``, ``documents``, ``doc_ids_sha1``,
    ``references_sha1``: :func:`~fairseq_docctx.evaluation.io.test_set_identity`, what
    ``docctx-score table`` compares runs and comparisons by)."""
    if not corpus.has_documents:  # the one pseudo-document's score is the corpus score
        metrics = {k: {f: v for f, v in m.items() if f != "per_document"} if isinstance(m, dict) else m
                   for k, m in metrics.items()}
    identity = corpus_identity(corpus)
    if corpus.resegmentation is not None:
        identity["resegmentation"] = corpus.resegmentation.as_dict()
    metrics = {k: {**m, **identity} if isinstance(m, dict) else m for k, m in metrics.items()}
    if getattr(args, "json", None):  # first: a reader that stops reading (| head) loses no file
        write_json(args.json, args.name or os.path.basename(args.hyp), corpus.files, metrics, args.outputs)
    print(text)


def per_document_text(res, digits=2):
    return "\n".join(f"  {d}\t{'n/a' if v is None else f'{v:.{digits}f}'}" for d, v in res["per_document"].items())


# ------------------------------------------------------------------------------------------
# subcommands that score with a model


def add_model_args(p, path_required: bool = True):
    """Options shared by the subcommands that load a model."""
    p.add_argument("--path", required=path_required, help="checkpoint file (.pt); with --engine transformers a "
                   "transformers model folder or hub id")
    p.add_argument("--data", help="data directory with the dictionaries (and spm.model / "
                   "docctx.json); default: the checkpoint's directory if it has them, else the "
                   "training data")
    p.add_argument("--spm-model", help="SentencePiece model (default: the one docctx.json of "
                   "--data names, or DATA/spm.model); without one, text must be tokenized")
    p.add_argument("--context-size", type=int, default=None,
                   help="number of context sentences of the model's task (default: the checkpoint's; another "
                   "value needs --context-override)")
    p.add_argument("--context-override", action="store_true",
                   help="score with a --context-size other than the checkpoint's (one warning line says so); "
                   "without it such a value is refused")
    p.add_argument("--max-tokens", type=int, default=4000,
                   help="padded tokens per batch, context tables included")
    p.add_argument("--batch-size", type=int, default=64, help="scored sentences per batch")
    p.add_argument("--gpu", action="store_true", help="score on the GPU if there is one")


#: the options only ``--engine transformers`` reads (a model this plugin did not export)
TRANSFORMERS_OPTIONS = ("context_sides", "context_separator", "tokenizer_src_lang", "tokenizer_tgt_lang")


def add_engine_args(p):
    """``--engine`` and what a transformers model of another origin needs: the context's
    sides and separator, its tokenizer's language codes
    (:mod:`fairseq_docctx.evaluation.transformers_scoring`)."""
    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=("fairseq", "transformers"), default="fairseq",
                   help="fairseq: --path is a checkpoint (default); transformers: --path is a transformers "
                   "seq2seq model, a folder or a hub id (docctx-export transformers' folders included), scored "
                   "by transformers' own forward pass")
    g.add_argument("--context-sides", choices=("src", "tgt", "both"), default=None,
                   help="--engine transformers, a model not exported by docctx-export: the sides whose --context-size "
                   "previous sentences are joined before the sentence (default src)")
    g.add_argument("--context-separator", metavar="TEXT", default=None,
                   help="--engine transformers: the text joined between two sentences (default: the tokenizer's "
                   "sep_token, else its eos_token; spaces only: the sentences follow each other)")
    g.add_argument("--tokenizer-src-lang", metavar="CODE", default=None,
                   help="--engine transformers: the tokenizer's source language code (NLLB eng_Latn, mBART-50 en_XX)")
    g.add_argument("--tokenizer-tgt-lang", metavar="CODE", default=None,
                   help="--engine transformers: the tokenizer's target language code (NLLB deu_Latn, mBART-50 de_DE)")


def scorer_from_args(args):
    from ...evaluation.scoring import load_scorer, quiet_logs

    quiet_logs()
    if getattr(args, "engine", "fairseq") == "transformers":
        from ...evaluation.transformers_scoring import load_transformers_scorer

        return load_transformers_scorer(
            args.path, data=args.data, spm_model=args.spm_model, context_size=args.context_size,
            context_override=args.context_override, context_sides=args.context_sides,
            separator=args.context_separator, src_lang=args.tokenizer_src_lang, tgt_lang=args.tokenizer_tgt_lang,
            cpu=not args.gpu, max_tokens=args.max_tokens, batch_size=args.batch_size,
            languages=(getattr(args, "source_lang", None), getattr(args, "target_lang", None)))
    given = [o for o in TRANSFORMERS_OPTIONS if getattr(args, o, None) is not None]
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')}: an option of --engine transformers")
    return load_scorer(args.path, data=args.data, spm_model=args.spm_model,
                       context_size=args.context_size, context_override=args.context_override, cpu=not args.gpu,
                       max_tokens=args.max_tokens, batch_size=args.batch_size)


def add_documents_args(p):
    """``--split`` / ``--input`` / ``--input-format``: the documents a model subcommand reads."""
    from ...data.readers import INPUT_FORMATS

    p.add_argument("--split", default="test", help="split of the binarized data directory (default: test)")
    p.add_argument("--input", help="instead of a binarized split: raw parallel documents, a prefix in "
                   "any docctx-prepare format (PREFIX.SRC, PREFIX.TGT [+ PREFIX.docids]) or one WMT 2021+ "
                   "XML / JSON Lines file")
    p.add_argument("--input-format", default="auto", choices=INPUT_FORMATS)


def documents_from_args(scorer, args):
    """``(source documents, target documents, document ids)`` of ``--input`` or ``--split``."""
    from ...evaluation.cxmi import scorer_documents

    return scorer_documents(scorer, split=args.split, input=args.input, input_format=args.input_format)


def documents_files(args) -> Dict[str, str]:
    return {"input": args.input} if args.input else {"split": args.split}


def add_json_args(p):
    """``--json FILE`` and ``--name NAME``, as every ``docctx-score`` subcommand has them."""
    p.add_argument("--json", metavar="FILE", help="write the results to this JSON file (merged "
                   "into it when it holds the same run; read by 'docctx-score table')")
    p.add_argument("--name", help="run name in the JSON (default: the checkpoint path)")


def write_model_json(args, metrics: dict, files: dict) -> None:
    """Write the ``--json FILE`` of a subcommand that scores with a model."""
    files = {"checkpoint": args.path, **({"data": args.data} if args.data else {}), **files}
    write_json(args.json, args.name or args.path, files, metrics, args.outputs)
