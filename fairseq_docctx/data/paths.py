"""What a command reads and what it writes: an output is never one of the run's inputs.

A command that writes a file or a folder (``docctx-translate -o``, ``docctx-export OUTDIR``,
``docctx-average -o``) lists the files and folders its run reads, each as ``(what it is,
path)``, and checks its output against them before writing anything
(:func:`check_output`): the output must not be an input under any name (the same file
through a hard or symbolic link, or another spelling of its path), and a folder the command
writes whole must not be an input's folder or hold an input at any depth. The refusal is one
line naming the output and the input.
"""
import hashlib
import os
from typing import Iterable, Optional, Tuple


class OutputClash(ValueError):
    """An output that is, or (a folder) holds, a file or folder the run reads; one line."""


def file_sha1(path: str) -> str:
    """The SHA-1 of a file's content (read in 4 MiB blocks)."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_mode(target: str) -> int:
    """The mode of an output file written through a temporary file: that of the file it
    replaces, else 0666 less the umask (what ``open(target, "w")`` gives)."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def same_path(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file or folder: the same inode where both exist (hard
    and symbolic links too), else the same real path (a path not written yet)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def holds(folder: str, path: str) -> bool:
    """Whether ``path`` lies inside ``folder``, at any depth (real paths compared: links
    followed)."""
    f, p = os.path.realpath(folder), os.path.realpath(path)
    return p != f and os.path.commonpath([f, p]) == f


def clash(output: str, reads: Iterable[Tuple[str, Optional[str]]], folder: bool = False) -> Optional[str]:
    """How writing ``output`` would destroy something the run reads (``reads``: ``(what it
    is, path)`` pairs; a ``None`` path is skipped): ``"is WHAT PATH"``, or with ``folder``
    (``output`` is a folder written whole) ``"holds WHAT PATH"``; ``None`` when it would not."""
    reads = [(what, os.fspath(path)) for what, path in reads if path]
    found = next((f"is {what} {path}" for what, path in reads if same_path(output, path)), None)
    if found is None and folder:
        found = next((f"holds {what} {path}" for what, path in reads if holds(output, path)), None)
    return found


def check_output(label: str, output: str, reads: Iterable[Tuple[str, Optional[str]]], folder: bool = False,
                 error: type = OutputClash) -> None:
    """Refuse (``error``, one line) an ``output`` that :func:`clash` finds: ``LABEL is WHAT
    PATH, which the run reads: give another output file`` (``folder``: ``... folder``).
    ``label``: how the line names the output, e.g. ``"-o out.txt"``."""
    found = clash(os.fspath(output), reads, folder)
    if found is not None:
        raise error(f"{label} {found}, which the run reads: give another {'folder' if folder else 'output file'}")
