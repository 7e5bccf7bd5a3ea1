"""The plugin's refusals of settings and input, one line inside fairseq's own commands.

fairseq's commands (``fairseq-train``, ``fairseq-generate``, ...) print a traceback for every
exception. A :class:`UsageError` is not a failure of the program but a refusal that says what
to change (an option the model cannot honour, data that does not fit, a checkpoint file that
cannot be read: :class:`CheckpointError`): raised inside a fairseq command that imported the
plugin (``--user-dir``), it ends the command with one line, ``fairseq-train: error: MESSAGE``,
and exit code 2, as fairseq's own option errors do (argparse), without a traceback; a
``--save-dir`` that ``fairseq-train`` created for the run and that is still empty is removed
first, so that a refused training leaves nothing behind. :func:`report_usage_errors` installs
this when the plugin is imported; the ``docctx-*`` commands report their errors themselves
(their own one-line messages, exit code 2 too), and in Python a ``UsageError`` is a
``ValueError`` like any other.

:func:`warn` is the one-line warning of the same commands: ``PROG: warning: MESSAGE`` on
standard error, once per process.
"""
import contextlib
import logging
import os
import sys
from typing import List, Optional

logger = logging.getLogger(__name__)


class UsageError(ValueError):
    """Settings or input the plugin refuses; ``str(err)`` is the one line that says what to
    change."""


class CheckpointError(UsageError):
    """A checkpoint that cannot be used (missing, not a checkpoint, truncated, or trained
    with other dictionaries than those of the data directory); ``str(err)`` is one line
    naming the file and what is wrong. ``cli_message``: the same for a command line, where
    the data directory is the option ``--data``."""

    def __init__(self, message: str, cli_message: Optional[str] = None):
        super().__init__(message)
        self.cli_message = cli_message or message


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 160 characters), else its type."""
    text = str(e).strip().splitlines()
    msg = text[0] if text else type(e).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."


def fairseq_command() -> Optional[str]:
    """The fairseq command this process runs (``fairseq-train``; ``python -m
    fairseq_cli.generate``: ``fairseq-generate``), else ``None``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name.startswith("fairseq_cli."):
        return "fairseq-" + name.split(".")[1].replace("_", "-")
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return prog if prog.startswith("fairseq-") else None


#: the plugin command this process runs, as :func:`running` sets it (``None``: none)
_command: Optional[str] = None


@contextlib.contextmanager
def running(prog: str):
    """Within the block, this process runs the plugin's command ``prog`` (``docctx-translate``):
    what :func:`command_name` says, and so how :func:`warn` prints. The command-line layer
    sets it around each command; the previous value comes back after the block."""
    global _command
    previous, _command = _command, prog
    try:
        yield
    finally:
        _command = previous


def command_name() -> Optional[str]:
    """The command this process runs: a fairseq command (:func:`fairseq_command`) or the
    plugin's command within :func:`running`, else ``None`` (Python)."""
    return fairseq_command() or _command


_warned = set()


def warn(message: str) -> None:
    """``PROG: warning: MESSAGE`` on standard error, once per process, in a command
    (:func:`command_name`); in Python a warning of this module's logger."""
    prog = command_name()
    if prog is None:
        logger.warning(message)
        return
    if message in _warned:
        return
    _warned.add(message)
    print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)


#: the directories fairseq-train's ``verify_checkpoint_directory`` created in this process
#: (the ``--save-dir`` and the parents it made for it), deepest first
_created_dirs: List[str] = []


def missing_dirs(path: str) -> List[str]:
    """``path`` and its parents up to the first that exists, deepest first."""
    out = []
    path = os.path.abspath(path)
    while path and not os.path.exists(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


def track_created_save_dir() -> None:
    """Wrap fairseq's ``checkpoint_utils.verify_checkpoint_directory`` (which makes
    ``--save-dir`` before the task and the model are set up) so that the directories it
    creates are recorded for :func:`remove_created_empty_dirs` (once)."""
    from fairseq import checkpoint_utils

    verify = checkpoint_utils.verify_checkpoint_directory
    if getattr(verify, "tracks_created_dirs", False):
        return

    def verify_checkpoint_directory(save_dir, *args, **kwargs):
        missing = missing_dirs(save_dir)
        verify(save_dir, *args, **kwargs)
        _created_dirs.extend(d for d in missing if d not in _created_dirs)

    verify_checkpoint_directory.tracks_created_dirs = True
    verify_checkpoint_directory.__wrapped__ = verify
    checkpoint_utils.verify_checkpoint_directory = verify_checkpoint_directory


def remove_created_empty_dirs() -> List[str]:
    """Remove the directories of :func:`track_created_save_dir` that are still empty,
    deepest first, stopping at the first that holds anything; returns those removed. A
    directory that existed before the run is never touched."""
    removed = []
    for d in sorted(_created_dirs, key=len, reverse=True):
        try:
            if os.path.isdir(d) and not os.listdir(d):
                os.rmdir(d)
                removed.append(d)
        except OSError:
            pass
    return removed


def report_usage_errors() -> None:
    """In a fairseq command, end the process on an uncaught :class:`UsageError` with one
    line ``PROG: error: MESSAGE`` on standard error and exit code 2 (``sys.excepthook``; every
    other exception keeps its traceback), after removing the empty directories the run
    created for its checkpoints (:func:`remove_created_empty_dirs`). Elsewhere nothing is
    installed."""
    prog = fairseq_command()
    if prog is None or getattr(sys.excepthook, "usage_errors", False):
        return
    track_created_save_dir()
    previous = sys.excepthook

    def excepthook(kind, err, tb):
        if not issubclass(kind, UsageError):
            return previous(kind, err, tb)
        remove_created_empty_dirs()
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
