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


def _message(e) -> str:
    return str(getattr(e, "cli_message", e))


def run_command(prog, main, argv, errors=(), message=_message) -> int:
    """``main(argv)`` as a command's exit code: its return value (``None``: 0); a failing
    shard process (``ShardError``) prints ``prog: error: ...`` on stderr and gives 1 (2 when
    the shard refused its input with one line, which is then the line), one of
    ``errors`` (the errors the command declares: bad input or arguments) the same line and 2.
    ``message(error)``: the text of the line (default: the error's ``cli_message``, else the
    error itself). Every other exception propagates."""
    code, value = _run(prog, main, argv, errors, message)
    return value or 0 if code is None else code


def _run(prog, main, argv, errors, message):
    """``(None, main(argv))``, or ``(exit code, None)`` after the one error line."""
    import sys

    from ..inference.shards import ShardError

    try:
        return None, main(argv)
    except BrokenPipeError:  # an OSError a command may declare: the reader went away
        raise
    except ShardError as e:
        code, text = e.exit_code, str(e)
    except tuple(errors) as e:
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
    try:
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
