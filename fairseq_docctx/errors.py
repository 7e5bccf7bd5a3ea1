"""The plugin's refusals of settings and input, one line inside fairseq's own commands.

fairseq's commands (``fairseq-train``, ``fairseq-generate``, ...) print a traceback for every
exception. A :class:`UsageError` is not a failure of the program but a refusal that says what
to change (an option the model cannot honour, data that does not fit): raised inside a fairseq
command that imported the plugin (``--user-dir``), it ends the command with one line,
``fairseq-train: error: MESSAGE``, and exit code 2, as fairseq's own option errors do
(argparse), without a traceback. :func:`report_usage_errors` installs this when the plugin is
imported; the ``docctx-*`` commands report their errors themselves (their own one-line
messages and exit codes), and in Python a ``UsageError`` is a ``ValueError`` like any other.
"""
import os
import sys
from typing import Optional


class UsageError(ValueError):
    """Settings or input the plugin refuses; ``str(err)`` is the one line that says what to
    change."""


def fairseq_command() -> Optional[str]:
    """The fairseq command this process runs (``fairseq-train``; ``python -m
    fairseq_cli.generate``: ``fairseq-generate``), else ``None``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name.startswith("fairseq_cli."):
        return "fairseq-" + name.split(".")[1].replace("_", "-")
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return prog if prog.startswith("fairseq-") else None


def report_usage_errors() -> None:
    """In a fairseq command, end the process on an uncaught :class:`UsageError` with one
    line ``PROG: error: MESSAGE`` on standard error and exit code 2 (``sys.excepthook``; every
    other exception keeps its traceback). Elsewhere nothing is installed."""
    prog = fairseq_command()
    if prog is None or getattr(sys.excepthook, "usage_errors", False):
        return
    previous = sys.excepthook

    def excepthook(kind, err, tb):
        if not issubclass(kind, UsageError):
            return previous(kind, err, tb)
        print(f"{prog}: error: {err}", file=sys.stderr)
        _exit(2)

    excepthook.usage_errors = True
    sys.excepthook = excepthook


def _exit(code: int) -> None:
    """End the process with ``code`` after what the interpreter runs at exit (the ``atexit``
    functions: logging's flush, the plugin's batch-thread stop) and with the standard streams
    flushed: an exception hook cannot choose the exit code otherwise."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a stream closed by its reader
                pass
        os._exit(code)
