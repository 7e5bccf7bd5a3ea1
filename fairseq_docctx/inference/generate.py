"""``fairseq-generate`` over several processes: shard by documents, merge by sentence id.

:func:`generate` starts N ``fairseq-generate`` processes on the same arguments plus
``--num-shards N --shard-id I`` (the ``document_translation`` task then decodes the documents
of shard I only, :meth:`~fairseq_docctx.tasks.document_translation.DocumentTranslationTask.
generation_shard`, with the corpus's sentence ids) and writes one output as fairseq-generate
writes it: the ``S-``/``T-``/``H-``/``D-``/``P-`` (and ``A-``, ``I-``, ``E-``) lines of every
sentence, in sentence-id order (corpus order), each id once, then a summary line and the score
line fairseq prints (``Generate <subset> with beam=<B>: ...``), computed over the merged
corpus with fairseq's own scorer (``--scoring``). The shards' log lines stay in their own
files (``work_dir``); a segment model's count of the segments decoded again sentence by
sentence is summed over them (:func:`segment_fallbacks`), reported, and added to the summary
line.

A sentence longer than the model's positions stops fairseq-generate with the task's one line
naming it (:meth:`~fairseq_docctx.tasks.document_translation.DocumentTranslationTask.
filter_indices_by_size`); with ``--skip-invalid-size-inputs-valid-test`` fairseq leaves it out
with a warning that names only the first few. The launcher knows every sentence id of the split (its document index),
so it names each sentence left out (:class:`SkippedSentences` unless skipping is accepted).
"""
import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, TextIO

from ..data.outputs import Outputs
from ..tasks.length_limits import SKIP_OPTION
from .shards import ShardError, num_processes, run_shards, shard_environment

logger = logging.getLogger(__name__)

#: a line fairseq-generate prints for a sentence: ``X-<id>`` (``E-<id>_<step>``), a tab
RECORD = re.compile(r"^([A-Z])-(\d+)(?:_\d+)?\t")
#: options the launcher sets for each shard itself
_SHARD_OPTIONS = ("--num-shards", "--shard-id", "--distributed-world-size", "--distributed-rank")
#: fairseq's warning for the sentences --skip-invalid-size-inputs-valid-test leaves out
_SKIPPED = re.compile(r"([\d,]+) samples have invalid sizes and will be skipped, "
                      r"max_positions=(.*?), first few sample ids=\[(.*?)\]")
#: the task's error when a skipped sentence is the target context of a later one
_UNTRANSLATED = re.compile(r"sentence (\d+) is context of this batch but has not been translated yet")


class SkippedSentences(ValueError):
    """Sentences of the split in no output: fairseq skipped them as too long for the model
    (``--skip-invalid-size-inputs-valid-test``) and skipping was not accepted."""


def _plain(text: str) -> str:
    """``(np.int32(10), np.int32(10))`` -> ``(10, 10)``."""
    return re.sub(r"np\.\w+\(([^()]*)\)", r"\1", text)


def _shard_log(work_dir: str, shard: int) -> str:
    """A shard's standard output and error output (fairseq logs to either)."""
    text = []
    for ext in ("err", "out"):
        try:
            with open(os.path.join(work_dir, f"shard-{shard}.{ext}"), encoding="utf-8",
                      errors="replace") as f:
                text.append(f.read())
        except OSError:
            pass
    return "\n".join(text)


def _max_positions(logs: Sequence[str]) -> Optional[str]:
    for log in logs:
        m = _SKIPPED.search(log)
        if m:
            return _plain(m.group(2))
    return None


def _failed_shard_error(error: ShardError, log: str, subset: str, skipping: bool) -> Optional[Exception]:
    """The one-line error of a shard that failed on a sentence too long for the model (the
    task's line, with what this command does about sentences left out), ``None`` for other
    failures."""
    if error.exit_code == 2 and str(error).endswith(SKIP_OPTION):
        return ShardError(f"{error} (each sentence left out is reported; --allow-skipped accepts the output "
                          "without them)", error.shard, 2)
    m = _UNTRANSLATED.search(log)
    skipped = _SKIPPED.search(log)
    if m and skipping and skipped:
        return ValueError(
            f"{skipped.group(1)} sentences of {subset} are longer than the model allows "
            f"(max_positions={_plain(skipped.group(2))}; first: {skipped.group(3)}) and {SKIP_OPTION} "
            f"leaves them out, but sentence {m.group(1)} is target context of the next sentences of "
            "its document (document-order inference needs its translation): shorten or split "
            "those sentences, or decode with --target-context reference")
    return None


def _check_writable(path: str, what: str, file: Optional[str] = None) -> None:
    """Make directory ``path`` (as the run will) and check a file can be written there
    (``file``: that file, left as it was), before any decoding: else a ``ValueError``."""
    try:
        os.makedirs(path, exist_ok=True)
        if file is None:
            with tempfile.TemporaryFile(dir=path):
                pass
        else:
            target = os.path.join(path, file)
            existed = os.path.exists(target)
            with open(target, "a", encoding="utf-8"):
                pass
            if not existed:
                os.remove(target)
    except OSError as e:
        where = e.filename if e.filename is not None else path
        raise ValueError(f"{what} {path}: cannot write there ({where}: {e.strerror or e})") from None


def _without(args: Sequence[str], name: str, takes_value: bool) -> List[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == name:
            skip = takes_value
            continue
        if takes_value and a.startswith(name + "="):
            continue
        out.append(a)
    return out


def shard_arguments(args: Sequence[str], num_shards: int, shard_id: int,
                    devices: Optional[Sequence[str]]) -> List[str]:
    """The fairseq-generate arguments of shard ``shard_id``: ``args`` without ``--quiet`` and
    ``--results-path`` (the shard prints its sentences; the launcher writes the merged output),
    with ``--cpu`` unless the shards run on ``devices``, and ``--num-shards``/``--shard-id``."""
    for opt in _SHARD_OPTIONS:
        if any(a == opt or a.startswith(opt + "=") for a in args):
            raise ValueError(f"{opt} is set by docctx-generate for each process: leave it out")
    if devices and "--cpu" in args:
        raise ValueError("--cpu and --devices: the shards run on the GPUs of --devices; leave out --cpu")
    out = _without(_without(args, "--quiet", False), "--results-path", True)
    if not devices and "--cpu" not in out:
        out.append("--cpu")
    return out + ["--num-shards", str(num_shards), "--shard-id", str(shard_id)]


def read_records(path: str) -> "OrderedDict[int, List[str]]":
    """The sentence lines of a fairseq-generate output, by sentence id, each id's lines in
    the order printed; other lines (logs) are left out."""
    records: "OrderedDict[int, List[str]]" = OrderedDict()
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            m = RECORD.match(line)
            if m:
                records.setdefault(int(m.group(2)), []).append(line.rstrip("\n"))
    return records


def merge_records(paths: Sequence[str]) -> Dict[int, List[str]]:
    """The sentence lines of the shards' outputs, merged by id (sorted); a sentence printed
    by two shards is an error (:class:`~fairseq_docctx.inference.shards.ShardError`)."""
    merged: Dict[int, List[str]] = {}
    owner: Dict[int, int] = {}
    for shard, path in enumerate(paths):
        for i, lines in read_records(path).items():
            if i in merged:
                raise ShardError(f"sentence {i} was decoded by shard {owner[i]} and by shard {shard}: "
                                 "the shards do not partition the split (is the task document_translation?)")
            merged[i], owner[i] = lines, shard
    return dict(sorted(merged.items()))


def _fields(lines: Sequence[str], kind: str) -> Optional[List[str]]:
    """The tab-separated fields after the ``X-<id>`` of the first line of ``kind``."""
    for line in lines:
        if line.startswith(kind + "-"):
            return line.split("\t")[1:]
    return None


def check_user_dir(args: Sequence[str]) -> List[str]:
    """``args`` with their ``--user-dir`` checked against the plugin running this command: a
    ``--user-dir`` that is this package under another name (a link) becomes its path; one
    that is another copy of the package (a folder of the same name elsewhere) is a
    ``ValueError`` of one line, since Python imports a package of one name once (fairseq's
    own error: "module name ... is not globally unique")."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    name = os.path.basename(package)
    out = list(args)
    for i, a in enumerate(out):
        if a == "--user-dir" and i + 1 < len(out):
            k, value = i + 1, out[i + 1]
        elif a.startswith("--user-dir="):
            k, value = i, a.split("=", 1)[1]
        else:
            continue
        path = os.path.abspath(value)
        if os.path.basename(path.rstrip(os.sep)) != name:
            continue
        if os.path.realpath(path) != os.path.realpath(package):
            raise ValueError(f"--user-dir {value} is another copy of {name} than the one running docctx-generate "
                             f"({package}): give --user-dir {package}, or run the docctx-generate of that copy")
        out[k] = package if k == i + 1 else f"--user-dir={package}"
    return out


def parse_generate_args(args: Sequence[str]):
    """fairseq-generate's own parsing of ``args`` (as ``fairseq_cli.generate.cli_main``
    parses them): its configuration. A ``--user-dir`` that cannot be imported beside the
    plugin already running is a ``ValueError`` of one line."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from .. import register

    register()  # the plugin is imported already: fairseq's --user-dir import does not register it
    parser = options.get_generation_parser()
    # fairseq_cli.generate.cli_main's workaround for tasks that read model args
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
    try:
        return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, input_args=list(args)))
    except ImportError as e:  # fairseq's import of --user-dir
        raise ValueError(str(e)) from None


def score_line(cfg, tgt_dict, records: Dict[int, List[str]]) -> Optional[str]:
    """fairseq-generate's ``Generate <subset> with beam=<B>: <score>`` line over the merged
    sentences (``None`` without references), from their ``T-``/``D-`` lines, as fairseq
    scores them: scorers with ``add_string`` get the reference and detokenized hypothesis
    strings; ``bleu`` gets them as target dictionary ids (the ids fairseq scores, except
    with ``--bpe``/``--tokenizer`` but no ``--post-process``, where fairseq scores the BPE
    tokens of a reference the output does not hold: then a ``ValueError`` says so)."""
    from fairseq import scoring

    scorer = scoring.build_scorer(cfg.scoring, tgt_dict)
    by_strings = hasattr(scorer, "add_string")
    if not by_strings and (cfg.bpe is not None or cfg.tokenizer is not None) \
            and cfg.common_eval.post_process is None:
        raise ValueError("--scoring bleu with --bpe/--tokenizer and no --post-process scores BPE "
                         "tokens of the references, which the output does not hold: add "
                         "--post-process, or use --scoring sacrebleu")
    scored = 0
    for lines in records.values():
        ref, hyp = _fields(lines, "T"), _fields(lines, "D")
        if ref is None or hyp is None:
            continue
        ref_str, hyp_str = ref[0] if ref else "", hyp[1] if len(hyp) > 1 else ""
        if by_strings:
            scorer.add_string(ref_str, hyp_str)
        else:
            scorer.add(tgt_dict.encode_line(ref_str, add_if_not_exist=True),
                       tgt_dict.encode_line(hyp_str, add_if_not_exist=True))
        scored += 1
    if not scored:
        return None
    return "Generate {} with beam={}: {}".format(cfg.dataset.gen_subset, cfg.generation.beam,
                                                 scorer.result_string())


def _split_documents(task, cfg):
    """The document index of the split to generate, if there is one."""
    from fairseq import utils

    from ..data.doc_index import DocIndex, doc_index_path

    data = utils.split_paths(cfg.task.data)[0]
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    for path in (doc_index_path(data, cfg.dataset.gen_subset, src, tgt),
                 doc_index_path(data, cfg.dataset.gen_subset, tgt, src)):
        if os.path.exists(path):
            return DocIndex.read(path)
    return None


def segment_fallbacks(logs: Sequence[str]) -> Optional[str]:
    """A segment model's line ``F of N segments of the split decoded again sentence by
    sentence (misaligned: ...)`` (:func:`~fairseq_docctx.tasks.segment_decoding.
    segment_run_line`) with the counts summed over the shards' logs (each shard logs the line
    of its part of the split); ``None`` when no shard logged one (not a segment model)."""
    from ..tasks.segment_decoding import parse_segment_run_line, segment_run_line

    found = [parse_segment_run_line(log) for log in logs]
    found = [f for f in found if f is not None]
    if not found:
        return None
    if len(found) != len(logs):
        logger.warning(f"{len(logs) - len(found)} of {len(logs)} shards logged no count of their segments: "
                       "the count covers the others only")
    return segment_run_line(sum(f[0] for f in found), sum(f[1] for f in found),
                            {k: sum(f[2][k] for f in found) for k in found[0][2]})


def _log_line(message: str) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp} | INFO | {__name__} | {message}"


def generate(fairseq_args: Sequence[str], processes: Optional[int] = None,
             devices: Optional[Sequence[str]] = None, work_dir: Optional[str] = None,
             output: Optional[TextIO] = None, python: str = sys.executable,
             allow_skipped: bool = False,
             report: Callable[[str], None] = logger.warning, force: bool = False) -> Dict[int, List[str]]:
    """Run ``fairseq-generate <fairseq_args>`` as ``processes`` shard processes (one per
    device of ``devices`` in turn, else on the CPU) and write the merged output to
    ``output`` (default: ``--results-path``'s ``generate-<subset>.txt``, else standard
    output). ``work_dir``: where the shards' outputs and logs go (kept; default a temporary
    directory, removed). Both directories are checked writable before any decoding, and the
    files written there by the output guard (:class:`~fairseq_docctx.data.outputs.Outputs`):
    ``generate-<subset>.txt`` and the shards' ``shard-I.out`` / ``.err`` are not the
    checkpoints and not files ``docctx-generate`` did not write, unless ``force``.
    Returns the merged sentence lines by id.

    Sentences longer than the model allows: without ``--skip-invalid-size-inputs-valid-test``
    (which ``allow_skipped`` adds) a ``ValueError`` names the first; with it they are left
    out, ``report`` gets one line per sentence left out (its id), the summary line counts
    them, and unless ``allow_skipped`` :class:`SkippedSentences` is raised after the output
    is written.

    Raises ``ValueError`` for arguments that cannot be sharded or outputs that cannot be
    written and :class:`~fairseq_docctx.inference.shards.ShardError` when a shard fails."""
    from fairseq import tasks

    n = num_processes(processes, devices)
    fairseq_args, cfg = _document_generation_args(fairseq_args, allow_skipped)
    skipping = bool(cfg.dataset.skip_invalid_size_inputs_valid_test)
    subset = cfg.dataset.gen_subset
    guard, results = _output_guard(cfg, output, work_dir, force)
    task = tasks.setup_task(cfg.task)
    docs = _split_documents(task, cfg)
    if docs is not None and len(docs) < n:
        logger.warning(f"{cfg.dataset.gen_subset} has {len(docs)} documents: {len(docs)} processes, not {n}")
        n = len(docs)
    commands = [[python, "-m", "fairseq_cli.generate", *shard_arguments(fairseq_args, n, i, devices)]
                for i in range(n)]
    envs = [shard_environment(i, n, devices) for i in range(n)]
    records, logs, elapsed = _decode_shards(commands, envs, work_dir, guard, subset, skipping)
    skipped = _skipped_sentences(docs, records, logs, subset, skipping)
    limit = _max_positions(logs)
    for i in skipped:
        report(f"sentence {i} of {subset} left out: longer than the model allows"
               + (f" (max_positions={limit})" if limit else ""))
    try:
        score = score_line(cfg, task.target_dictionary, records)
    except ValueError as e:  # not recoverable from the output: said in its place
        score = _log_line(f"no score over the merged shards: {e}")
    segments = segment_fallbacks(logs)
    if segments is not None:
        report(segments)
    summary = _summary_line(records, elapsed, n, skipped, segments)
    _write_output(cfg, records, summary, score, output, results, guard)
    if skipped and not allow_skipped:
        raise SkippedSentences(
            f"{len(skipped)} sentences of {subset} are left out as longer than the model allows "
            f"(ids reported above); the output holds the other {len(records)}: shorten or split "
            "them, or add --allow-skipped to accept the output without them")
    return records


def _document_generation_args(fairseq_args: Sequence[str], allow_skipped: bool):
    """The fairseq-generate arguments (``--user-dir`` checked, the skip option added for
    ``allow_skipped``) and their configuration, refused unless the task is document_translation."""
    fairseq_args = check_user_dir(fairseq_args)
    if allow_skipped and SKIP_OPTION not in fairseq_args:
        fairseq_args = [*fairseq_args, SKIP_OPTION]
    cfg = parse_generate_args(fairseq_args)
    if getattr(cfg.task, "_name", None) != "document_translation":
        raise ValueError("docctx-generate shards the documents of --task document_translation "
                         f"(got --task {getattr(cfg.task, '_name', None)})")
    return fairseq_args, cfg


def _output_guard(cfg, output: Optional[TextIO], work_dir: Optional[str], force: bool):
    """Check the output directories writable and return the output guard with the merged
    output's file in it (``None`` when the output goes to ``output`` or standard output)."""
    results_file = f"generate-{cfg.dataset.gen_subset}.txt"
    if output is None and cfg.common_eval.results_path is not None:
        _check_writable(cfg.common_eval.results_path, "--results-path", results_file)
    if work_dir is not None:
        _check_writable(work_dir, "--work-dir")
    guard = Outputs("docctx-generate", [("the checkpoint", p) for p in str(cfg.common_eval.path or "").split(
        os.pathsep)], force=force)
    results = None
    if output is None and cfg.common_eval.results_path is not None:
        results = guard.file(os.path.join(cfg.common_eval.results_path, results_file),
                             f"--results-path {cfg.common_eval.results_path}: {results_file}")
    return guard, results


def _decode_shards(commands, envs, work_dir: Optional[str], guard, subset: str, skipping: bool):
    """Run the shard processes in ``work_dir`` (default a temporary directory, removed) and
    return their merged sentence lines, their logs and the seconds they took."""
    n = len(commands)
    tmp = work_dir is None
    shard_files = [] if tmp else [os.path.join(work_dir, f"shard-{i}.{ext}") for i in range(n) for ext in ("out", "err")]
    for f in shard_files:
        guard.file(f, f"--work-dir {work_dir}: {f}")
    work_dir = tempfile.mkdtemp(prefix="docctx-generate-") if tmp else work_dir
    try:
        start = time.time()
        try:
            outs = run_shards(commands, envs, work_dir, name="fairseq-generate shard")
        except ShardError as e:
            if e.shard is None:
                raise
            error = _failed_shard_error(e, _shard_log(work_dir, e.shard), subset, skipping)
            if error is None:
                raise
            raise error from None
        elapsed = time.time() - start
        records = merge_records(outs)
        logs = [_shard_log(work_dir, i) for i in range(n)]
    finally:
        guard.written_files([f for f in shard_files if os.path.exists(f)])
        if tmp:
            shutil.rmtree(work_dir, ignore_errors=True)
    return records, logs, elapsed


def _skipped_sentences(docs, records: Dict[int, List[str]], logs: Sequence[str], subset: str,
                       skipping: bool) -> List[int]:
    """The ids of the sentences of the split in no output, sorted: by the document index, else
    by fairseq's warnings (which name the first few only)."""
    skipped: List[int] = []
    if docs is not None:
        missing = sorted(set(range(docs.num_sentences)) - set(records))
        if missing and not skipping:
            raise ShardError(f"{len(missing)} sentences of {subset} are in no shard's "
                             f"output (first: {missing[0]})")
        skipped = missing
    else:  # no document index: fairseq's warnings (which name the first few only)
        for log in logs:
            m = _SKIPPED.search(log)
            if m:
                skipped += [int(i) for i in m.group(3).split(",") if i.strip()]
        skipped = sorted(skipped)
    return skipped


def _summary_line(records: Dict[int, List[str]], elapsed: float, n: int, skipped: List[int],
                  segments: Optional[str]) -> str:
    """The summary log line of the merged output: sentences, tokens, speed, the sentences left
    out and a segment model's count."""
    tokens = sum(len(p[0].split()) for p in (_fields(lines, "P") for lines in records.values()) if p)
    return _log_line(f"Translated {len(records):,} sentences ({tokens:,} tokens) in {elapsed:.1f}s "
                     f"with {n} processes ({len(records) / max(elapsed, 1e-9):.2f} sentences/s)"
                     + (f"; {len(skipped):,} sentences left out as too long (ids: "
                        f"{', '.join(map(str, skipped))})" if skipped else "")
                     + (f"; {segments}" if segments is not None else ""))


def _write_output(cfg, records: Dict[int, List[str]], summary: str, score: Optional[str],
                  output: Optional[TextIO], results, guard) -> None:
    """Write the merged sentence lines (unless ``--quiet``), the summary and the score line to
    the results file, else ``output``, else standard output."""
    with contextlib.ExitStack() as stack:
        if results is not None:
            output = stack.enter_context(guard.open(results))
        elif output is None:
            output = sys.stdout
        if not cfg.common_eval.quiet:
            for lines in records.values():
                output.write("\n".join(lines) + "\n")
        output.write(summary + "\n")
        if score is not None:
            output.write(score + "\n")
        output.flush()
