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


def exit_on_errors(prog, main, argv, errors):
    """``main(argv)``; a failing shard process (``ShardError``) prints ``prog: error: ...``
    and exits with code 1 (2 when the shard refused its input with one line), one of
    ``errors`` (bad input or arguments) with code 2."""
    import sys

    from ..inference.shards import ShardError

    try:
        return main(argv)
    except ShardError as e:
        code, message = e.exit_code, str(e)
    except tuple(errors) as e:
        code, message = 2, str(getattr(e, "cli_message", e))
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so that ``finally`` blocks clean up
    (a ``BaseException``: no handler of errors catches it)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def exit_on_errors_and_signals(prog, main, argv, errors):
    """:func:`exit_on_errors`, and: SIGINT (Ctrl-C) and SIGTERM stop the command through
    :class:`Interrupted` (temporary files are removed on the way out), with one line and exit
    code 130 / 143; standard output closed by its reader (``| head``) ends the command
    quietly with exit code 141, as a Unix tool killed by SIGPIPE."""
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
        return exit_on_errors(prog, main, argv, errors)
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
