"""What a command run reads and writes, decided in one place: no output lands on a file the
user has.

Every ``docctx-*`` command that writes files makes one :class:`Outputs` for its run, gives it
what the run reads (``(what it is, path)`` pairs) and declares every file and folder it will
write — its outputs and their side files (a translation's ``.docids``, a ``--json``, a
plot, an export folder, an averaged checkpoint) — before it does any work. The rules are the
same for every command:

1. **An output is never an input.** An output file that is a file the run reads, under any
   name (a hard or symbolic link, ``..``, another spelling), and an output folder that is, or
   holds, a file or folder the run reads, is refused with one line naming both, ``--force``
   or not.
2. **A file the command did not write is never replaced without ``--force``.** An existing
   file is replaced only when this command wrote it in an earlier run as the same output (a
   side file belongs to the output it goes with: ``-o a.hyp``'s ``a.docids`` is not
   ``-o a.txt``'s) and nothing has changed it since, when it is empty (it holds nothing to
   lose: ``mktemp``'s), or with ``--force``. What the commands wrote is kept in the *write
   record* (:class:`WriteRecord`), a JSON file of the user's state folder
   (``$DOCCTX_STATE_DIR``, else ``$XDG_STATE_HOME/fairseq_docctx``, else
   ``~/.local/state/fairseq_docctx``): for every file written, its real path, the command,
   the output it goes with and its device, inode, size and modification time, so that a file
   edited, moved, copied over or written by another program no longer matches. A command
   with its own record of what it wrote (``docctx-export``'s ``docctx-export.json``,
   ``docctx-drafts``' entries in ``docctx.json``) passes that as ``known``.
3. **Nothing is half written.** A file is written into a temporary file beside it and moved
   into place when it is complete (:meth:`Outputs.open`): a run that fails or is interrupted
   leaves the file as it was, and no temporary file. Special files (``/dev/null``,
   ``/dev/stdout``, a FIFO) are written directly. An output that is a symbolic link is
   written where the link points.
4. **Folders are made as needed.** The folders an output needs are created when it is
   written; those a failed run created and left empty are removed again.

The refusals are :class:`OutputClash` errors (a ``ValueError``), whose text is the one line
every command prints.
"""
import contextlib
import json
import os
import stat
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import missing_dirs
from .paths import file_mode, holds, same_path

#: the environment variable naming the folder of the write record
STATE_DIR_ENV = "DOCCTX_STATE_DIR"
RECORD_NAME = "outputs.json"
#: the most files the write record keeps (the oldest are forgotten first)
RECORD_LIMIT = 50_000


class OutputClash(ValueError):
    """An output that would destroy something: an input, or a file the command did not write;
    ``str(err)`` is the one line that says so."""


def state_dir() -> str:
    """The folder of the write record: ``$DOCCTX_STATE_DIR``, else
    ``$XDG_STATE_HOME/fairseq_docctx``, else ``~/.local/state/fairseq_docctx``."""
    given = os.environ.get(STATE_DIR_ENV)
    if given:
        return given
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "fairseq_docctx")


def _identity(path: str) -> Optional[dict]:
    """What identifies the content of the regular file ``path`` now (``None``: no such file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


class WriteRecord:
    """The files the commands wrote (rule 2 of the module): ``{real path: {"command",
    "output", "dev", "ino", "size", "mtime_ns", "time"}}`` in ``DIR/outputs.json``, read and
    rewritten under a lock (``outputs.json.lock``) and replaced whole, so that commands
    running side by side keep each other's entries. A record that cannot be read counts as
    empty, one that cannot be written is left as it is: then a later run asks for ``--force``
    where it could have replaced the file, which loses nothing."""

    def __init__(self, folder: Optional[str] = None):
        self.folder = folder or state_dir()
        self.path = os.path.join(self.folder, RECORD_NAME)

    def _read(self) -> Dict[str, dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            files = data.get("files") if isinstance(data, dict) else None
            return files if isinstance(files, dict) else {}
        except (OSError, ValueError):
            return {}

    def wrote(self, command: str, path: str, output: str) -> bool:
        """Whether ``command`` wrote the file ``path`` as (a side file of) the output
        ``output`` and nothing has changed it since (both real paths)."""
        entry = self._read().get(path)
        now = _identity(path)
        if not isinstance(entry, dict) or now is None:
            return False
        return (entry.get("command") == command and entry.get("output") == output
                and all(entry.get(k) == v for k, v in now.items()))

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        os.makedirs(self.folder, exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def add(self, command: str, written: Sequence[Tuple[str, str]]) -> None:
        """Record the files ``written`` (``(real path, real path of its output)`` pairs) as
        written by ``command`` now; entries whose file has changed or gone are dropped."""
        if not written:
            return
        try:
            with self._locked():
                files = {p: e for p, e in self._read().items()
                         if isinstance(e, dict) and _identity(p) == {k: e.get(k) for k in ("dev", "ino", "size",
                                                                                          "mtime_ns")}}
                for path, output in written:
                    now = _identity(path)
                    if now is not None:
                        files.pop(path, None)
                        files[path] = {"command": command, "output": output, **now, "time": time.time()}
                if len(files) > RECORD_LIMIT:
                    files = dict(list(files.items())[-RECORD_LIMIT:])
                fd, tmp = tempfile.mkstemp(prefix=f".{RECORD_NAME}.", suffix=".part", dir=self.folder)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump({"version": 1, "files": files}, f)
                    os.replace(tmp, self.path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
        except OSError:
            pass


def _special(path: str) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a FIFO,
    a socket): written directly, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


class Outputs:
    """The files one run of ``command`` reads and writes (the module's rules).

    ``reads``: ``(what it is, path)`` pairs (``None`` paths are skipped; more can be added with
    :meth:`read`); ``force``: ``--force`` (rule 2 does not apply); ``force_flag``: how the
    refusals name it. Declare every output with :meth:`file` (or :meth:`folder`) before the
    work, write each with :meth:`open`; used as a context manager, a run that fails removes
    its temporary files and the empty folders it created."""

    def __init__(self, command: str, reads: Iterable[Tuple[str, Optional[str]]] = (), force: bool = False,
                 force_flag: str = "--force", record: Optional[WriteRecord] = None):
        self.command, self.force, self.force_flag = command, bool(force), force_flag
        self.reads: List[Tuple[str, str]] = []
        self.record = record if record is not None else WriteRecord()
        self.declared: Dict[str, Tuple[str, str]] = {}  # real path -> (its output's real path, label)
        self.created: List[str] = []
        self.parts: List[str] = []
        for what, path in reads:
            self.read(what, path)

    # ------------------------------------------------------------------ the checks
    def read(self, what: str, path: Optional[str]) -> None:
        """One more file or folder the run reads."""
        if path:
            self.reads.append((what, os.fspath(path)))

    def _input(self, path: str, folder: bool) -> Optional[str]:
        """``"is WHAT PATH"`` / ``"holds WHAT PATH"`` when writing ``path`` would destroy an input."""
        for what, p in self.reads:
            if same_path(path, p):
                return f"is {what} {p}"
        if folder:
            for what, p in self.reads:
                if holds(path, p):
                    return f"holds {what} {p}"
        return None

    def file(self, path: str, label: Optional[str] = None, output: Optional[str] = None,
             known: bool = False) -> str:
        """Declare the output file ``path`` and check it now (rules 1 and 2); returns the path
        it is written to (a symbolic link's target). ``label``: how a refusal names the option
        (``"-o out.txt"``, ``"--json r.json"``; default: the path); ``output``: for a side
        file, the output it goes with (default: itself); ``known``: the command's own record
        says it wrote the file that is there."""
        path = os.fspath(path)
        label = label or path
        if os.path.isdir(path):
            raise OutputClash(f"{label} is a directory: give a file")
        found = self._input(path, folder=False)
        if found is not None:
            raise OutputClash(f"{label} {found}, which the run reads: give another output file")
        target = os.path.realpath(path)
        owner = os.path.realpath(output) if output else target
        other = self.declared.get(target)
        if other is not None and other[0] != owner:
            raise OutputClash(f"{label} is also {other[1]}: give them different names")
        if (os.path.lexists(target) and not _special(target) and not self.force and not known
                and os.path.getsize(target) > 0 and not self.record.wrote(self.command, target, owner)):
            side = "" if owner == target else " for this output"
            raise OutputClash(f"{label} exists and {self.command} did not write it{side} (or it has changed "
                              f"since): give another name, or {self.force_flag} to replace it")
        self._check_writable(os.path.dirname(target), label)
        self.declared[target] = (owner, label)
        return target

    def folder(self, path: str, label: Optional[str] = None, whole: bool = False, ours: bool = False) -> str:
        """Declare an output folder: refused if it is a file or folder the run reads. A folder
        the files of the run go in (their names declared with :meth:`file`) may exist; one
        written ``whole`` (replaced as one) must not hold an input either, and an existing
        one that is not empty is replaced only when ``ours`` (the command's own record says it
        wrote it) or with ``--force``. Returns its path."""
        path = os.fspath(path)
        label = label or path
        found = self._input(path, folder=whole)
        if found is not None:
            raise OutputClash(f"{label} {found}, which the run reads: give another folder")
        if os.path.exists(path) and not os.path.isdir(path):
            raise OutputClash(f"{label} exists and is not a folder")
        if whole and os.path.isdir(path) and os.listdir(path) and not (ours or self.force):
            raise OutputClash(f"{label} exists and {self.command} did not write it: give another folder, or "
                              f"{self.force_flag} to replace it")
        self._check_writable(path, label)
        return path

    @staticmethod
    def _check_writable(folder: str, where: str) -> None:
        """Refuse a folder that cannot be made or written in (the nearest existing one of its
        path is not a writable folder)."""
        f = os.path.abspath(folder or ".")
        while not os.path.exists(f):
            f = os.path.dirname(f)
        if not os.path.isdir(f):
            raise OutputClash(f"{where}: {f} is not a folder")
        if not os.access(f, os.W_OK | os.X_OK):
            raise OutputClash(f"{where}: cannot write in {f} (permission denied)")

    # ------------------------------------------------------------------ writing
    def make_folders(self, folder: str) -> None:
        """Make the missing folders of ``folder``'s path (removed again when the run fails
        and leaves them empty)."""
        for f in reversed(missing_dirs(folder)):  # outermost first
            try:
                os.mkdir(f)
            except FileExistsError:
                continue
            self.created.append(f)

    def start(self, path: str, label: Optional[str] = None, output: Optional[str] = None) -> Tuple[str, str]:
        """Begin writing the declared output ``path`` (declared now if it was not): ``(the
        temporary file to write, the target)``; :meth:`finish` moves it into place. A special
        file is its own temporary file."""
        target = os.path.realpath(path)
        if target not in self.declared:
            target = self.file(path, label, output)
        if _special(target):
            return target, target
        folder = os.path.dirname(target)
        self.make_folders(folder)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".part", dir=folder)
            os.fchmod(fd, file_mode(target))
            os.close(fd)
        except OSError as e:
            raise OutputClash(f"{self.declared[target][1]}: cannot write in {folder} ({e.strerror or e})") from None
        self.parts.append(tmp)
        return tmp, target

    def finish(self, written: Sequence[Tuple[str, str]]) -> None:
        """Move the temporary files of :meth:`start` into place (``(temporary, target)``
        pairs, in this order) and record them."""
        done = []
        for tmp, target in written:
            if tmp != target:
                os.replace(tmp, target)
                self.parts.remove(tmp)
            done.append((target, self.declared[target][0]))
        self.record.add(self.command, [(t, o) for t, o in done if not _special(t)])

    def discard(self, tmp: str) -> None:
        """Remove a temporary file of :meth:`start` (the output stays as it was)."""
        if tmp in self.parts:
            self.parts.remove(tmp)
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    @contextlib.contextmanager
    def open(self, path: str, mode: str = "w", label: Optional[str] = None, output: Optional[str] = None,
             **kwargs):
        """``with outputs.open(path) as f:`` writes the declared output ``path`` (rules 3
        and 4); ``mode`` ``"w"`` (UTF-8 text unless ``encoding`` is given) or ``"wb"``."""
        tmp, target = self.start(path, label, output)
        if "b" not in mode:
            kwargs.setdefault("encoding", "utf-8")
        try:
            with open(tmp, mode, **kwargs) as f:
                yield f
        except BaseException:
            if tmp != target:
                self.discard(tmp)
            raise
        self.finish([(tmp, target)])

    def write_text(self, path: str, text: str, **kwargs) -> None:
        """Write ``text`` to the declared output ``path`` (:meth:`open`)."""
        with self.open(path, **kwargs) as f:
            f.write(text)

    def written_files(self, paths: Sequence[str], output: Optional[str] = None) -> None:
        """Record files the command wrote by other means (moved into place itself)."""
        self.record.add(self.command, [(os.path.realpath(p), os.path.realpath(output or p)) for p in paths])

    def close(self, failed: bool = False) -> None:
        """Remove what is left of an unfinished run: its temporary files and, ``failed``,
        the folders it created that are still empty."""
        for tmp in list(self.parts):
            self.discard(tmp)
        if failed:
            for f in reversed(self.created):
                with contextlib.suppress(OSError):
                    os.rmdir(f)
        self.created = []

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        self.close(failed=kind is not None)
        return False


def input_files(*groups: Iterable[Tuple[str, Optional[object]]]) -> List[Tuple[str, str]]:
    """``(what it is, path)`` pairs of the groups, a list of paths under one name expanded
    (``("the reference", [a, b])`` -> two pairs), ``None`` left out."""
    out = []
    for group in groups:
        for what, value in group:
            values = value if isinstance(value, (list, tuple)) else [value]
            out += [(what, os.fspath(v)) for v in values if v]
    return out


#: the files of a data directory that the commands read (its dictionaries, manifest,
#: SentencePiece model, binarized splits and document indices): an output is never one of them
DATA_DIRECTORY_FILES = ("dict.*.txt", "docctx.json", "*.model", "*.docs", "*.bin", "*.idx")


def folder_files(what: str, folder: Optional[str], patterns: Sequence[str] = ("*",)) -> List[Tuple[str, str]]:
    """``(what, path)`` for the files of ``folder`` matching ``patterns`` (not recursive)."""
    import glob

    if not folder or not os.path.isdir(folder):
        return []
    found = sorted({f for p in patterns for f in glob.glob(os.path.join(glob.escape(folder), p))})
    return [(what, f) for f in found if os.path.isfile(f)]

