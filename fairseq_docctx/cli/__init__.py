def quiet_logging():
    """Warnings only on stderr (fairseq's and the plugin's INFO lines are noise for a command
    that prints its own progress), and no DataLoader pin_memory warning."""
    import logging
    import sys
    import warnings

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("fairseq", "fairseq_docctx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")


#: the attribute that marks an option as a file the command reads: ``(what it is, patterns)``
READS = "docctx_reads"
#: the attribute that marks an option as a file (``"file"``) or folder (``"folder"``) it writes
WRITES = "docctx_writes"


def mark(parser, inputs=None, outputs=None):
    """Mark the options of ``parser`` by their ``dest``, for :func:`output_guard`: ``inputs``
    ``{dest: what it is}`` (how a refusal names it, ``"the hypotheses"``), or ``(what it is,
    patterns)`` for a folder standing for its files that match the glob ``patterns``;
    ``outputs`` ``{dest: "file" | "folder"}`` (a folder the command's files go in). Dests the
    parser does not have are skipped. Returns ``parser``."""
    for a in parser._actions:
        if inputs and a.dest in inputs:
            what = inputs[a.dest]
            setattr(a, READS, (what, ()) if isinstance(what, str) else (what[0], tuple(what[1])))
        if outputs and a.dest in outputs:
            setattr(a, WRITES, outputs[a.dest])
    return parser


def add_force(p, what: str = "an output file"):
    """The ``--force`` option of a command that writes files (the output guard's rule 2:
    :mod:`fairseq_docctx.data.outputs`)."""
    p.add_argument("--force", action="store_true",
                   help=f"replace {what} that exists and that this command did not write (never a file the "
                   "run reads)")


def option_values(value):
    """The paths an option's value gives: itself, or the items of a list (``nargs``,
    ``action="append"``), empty ones and non-strings left out."""
    return [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str) and v]


def _actions(parser, args):
    """The options of ``parser`` and of the subcommand ``args`` chose, at any depth."""
    import argparse

    out = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            chosen = a.choices.get(getattr(args, a.dest, None))
            out += _actions(chosen, args) if chosen is not None else []
        elif a.dest != "help":
            out.append(a)
    return out


def output_guard(parser, args, command: str, extra_reads=()):
    """The :class:`~fairseq_docctx.data.outputs.Outputs` of one run, from the options the
    parser (and the subcommand ``args`` chose) marks (:func:`mark`):
    every input, then every output
    declared and checked (before the command does any work). ``extra_reads``: more ``(what
    it is, path)`` pairs."""
    from ..data.outputs import Outputs, folder_files

    guard = Outputs(command, extra_reads, force=getattr(args, "force", False))
    marked = _actions(parser, args)
    for a in marked:
        if hasattr(a, READS):
            what, patterns = getattr(a, READS)
            for v in option_values(getattr(args, a.dest, None)):
                guard.read(what, v)
                if patterns:
                    guard.reads.extend(folder_files(what, v, patterns))
    for a in marked:
        kind = getattr(a, WRITES, None)
        flag = (a.option_strings or [a.metavar or a.dest])[-1]
        for v in option_values(getattr(args, a.dest, None)) if kind else ():
            if kind == "folder":
                guard.folder(v, f"{flag} {v}", whole=False)
            elif v != "-":
                guard.file(v, f"{flag} {v}")
    return guard


def _message(e) -> str:
    return str(getattr(e, "cli_message", e))


def run_command(prog, main, argv, errors=(), message=_message) -> int:
    """``main(argv)`` as a command's exit code: its return value (``None``: 0); a failing
    shard process (``ShardError``) prints ``prog: error: ...`` on stderr and gives 1 (2 when
    the shard refused its input with one line, which is then the line), one of
    ``errors`` (the errors the command declares: bad input or arguments, classes of light
    modules, so that ``--help`` imports neither torch nor fairseq) and an output the
    output guard refuses (:class:`~fairseq_docctx.data.outputs.OutputClash`) the same line and 2.
    ``message(error)``: the text of the line (default: the error's ``cli_message``, else the
    error itself). Every other exception propagates."""
    code, value = _run(prog, main, argv, errors, message)
    return value or 0 if code is None else code


def _run(prog, main, argv, errors, message):
    """``(None, main(argv))``, or ``(exit code, None)`` after the one error line."""
    import sys

    from ..data.outputs import OutputClash
    from ..inference.shards import ShardError

    try:
        return None, main(argv)
    except BrokenPipeError:  # an OSError a command may declare: the reader went away
        raise
    except ShardError as e:
        code, text = e.exit_code, str(e)
    except (OutputClash,) + tuple(errors) as e:
        code, text = 2, message(e)
    print(f"{prog}: error: {text}", file=sys.stderr)
    return code, None


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so that ``finally`` blocks clean up
    (a ``BaseException``: no handler of errors catches it)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def exit_on_errors_and_signals(prog, main, argv, errors=(), message=_message):
    """The error-to-exit handler of every command: ``main(argv)``, returning its value; the
    errors of :func:`run_command` print its one line and exit with its code; SIGINT (Ctrl-C)
    and SIGTERM stop the command through :class:`Interrupted` (temporary files are removed on
    the way out), with one line and exit code 130 / 143; standard output closed by its reader
    (``| head``) ends the command quietly with exit code 141, as a Unix tool killed by
    SIGPIPE."""
    import os
    import signal
    import sys

    def interrupted(signum, frame):
        for s in handled:  # a second signal does not break the clean-up
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    handled = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        try:
            handled[s] = signal.signal(s, interrupted)
        except ValueError:  # not the main thread: the default handlers stay
            pass
    from ..errors import running

    try:
        with running(prog.split(" ")[0]):
            code, value = _run(prog, main, argv, errors, message)
        if code is None:
            sys.stdout.flush()  # a closed standard output shows here, not at the interpreter's exit
            return value
    except Interrupted as e:
        print(f"{prog}: error: interrupted by {signal.Signals(e.signum).name}", file=sys.stderr)
        code = 128 + e.signum
    except BrokenPipeError:
        try:  # the interpreter's final flush of stdout would fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        code = 128 + signal.SIGPIPE
    finally:
        for s, previous in handled.items():
            signal.signal(s, previous)
    sys.exit(code)
