"""Paths and files: the same file under two names, a folder holding a path, a file's digest and
the mode an output file is given. The rules of what a command may write are
:mod:`fairseq_docctx.data.outputs`'s, built on these.
"""
import hashlib
import os


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
