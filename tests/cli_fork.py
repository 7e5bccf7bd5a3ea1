"""The suite's runner of console scripts: a ``fairseq-*`` or ``docctx-*`` command runs in a
process forked from a server that has already imported torch, NumPy, SciPy, scikit-learn and
fairseq (:mod:`cli_fork_preload`), instead of a new interpreter that imports them again.

Every ``fairseq-*`` command spends seconds on imports before it reads an argument (about 5
CPU-seconds measured on a slower day: torch 1.8 s, SciPy and scikit-learn 1.5 s, through
``fairseq.criterions``; fairseq's own modules 0.7 s on a faster one, where torch took 1.1 s),
and the suite runs about 170 of them on its two cores. A forked child starts with those
libraries loaded. Importing fairseq changes the process (the root
logger's configuration, one environment variable), and a command's output depends on when
that happens (``fairseq_cli.train`` configures logging before it imports fairseq, so fairseq's
``logging.basicConfig`` call does nothing there; ``fairseq_cli.generate`` imports fairseq
first): the server imports fairseq with those effects held back, and the child hides
fairseq's modules until the command imports one of them, then makes the effects
(:class:`_Preloaded`). Until then ``"fairseq" in sys.modules`` is false, as in a new
interpreter (the plugin's ``docctx-*`` commands import fairseq only when they need it).

The child is the command as a user runs it: the console script's entry point, called with
the command's argv, environment, working directory and niceness (that of the calling
thread: the probe's background trainings run niced), stdout and stderr on files, stdin on
``/dev/null``, ``sys.path`` that of a new interpreter started from the script, an exit code as
the interpreter gives it (``sys.exit``'s code, 1 and ``sys.excepthook``'s report on an exception), then the
interpreter's shutdown (non-daemon threads joined, ``atexit`` handlers, streams flushed).
What differs from a new interpreter: the preloaded modules other than fairseq's are there
before the command runs (torch, SciPy..., and the libraries fairseq imports: hydra, omegaconf,
sacrebleu, tensorboardX...; ``CRC32C_SW_MODE``, which tensorboardX's import sets, is set when
the command imports fairseq), and every child of a session has the server's hash seed.

A command runs as a new interpreter instead (:func:`entry_point` returns None) when it is not
one of those console scripts, when its environment changes a variable read when an
interpreter or a preloaded library starts (``PYTHON*``, ``OMP_*`` other than the thread
count, ``LD_*``, ...), and in every case when ``DOCCTX_TEST_FRESH_PROCESSES=1``.
"""
import atexit
import importlib
import importlib.machinery
import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import types

BIN = os.path.dirname(sys.executable)

#: the environment the server starts with (the tests' commands run with these: conftest.py's
#: venv_env, probe_utils._run); a child whose thread count differs sets its own
SERVER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
              "PYTHONWARNINGS": "ignore"}

#: variables read when an interpreter or a preloaded library starts: a command that sets one
#: to a value other than the server's runs as a new interpreter
_STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "LD_", "MALLOC", "TORCH", "CUDA")
_THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_lock = threading.Lock()
_state = {"enabled": False, "context": None, "scripts": None, "sys_path": None}


def enable():
    """Use the server for the session's commands (conftest.py) unless
    ``DOCCTX_TEST_FRESH_PROCESSES=1``."""
    _state["enabled"] = os.environ.get("DOCCTX_TEST_FRESH_PROCESSES", "") not in ("1", "true", "yes")


def _scripts():
    """``{console script name: "module:function"}`` of the commands the server runs."""
    if _state["scripts"] is None:
        from importlib.metadata import entry_points

        _state["scripts"] = {ep.name: ep.value for ep in entry_points(group="console_scripts")
                             if ep.name.startswith(("fairseq-", "docctx-"))}
    return _state["scripts"]


def entry_point(cmd, env):
    """``(script path, "module:function")`` when ``cmd`` (run with the environment ``env``)
    runs in a forked child; None when it runs as a new interpreter."""
    if not _state["enabled"] or not cmd:
        return None
    exe = str(cmd[0])
    name = os.path.basename(exe)
    path = exe if os.sep in exe else os.path.join(BIN, name)
    if os.path.dirname(os.path.abspath(path)) != BIN or not os.path.exists(path):
        return None
    if os.sep not in exe and shutil.which(name, path=env.get("PATH")) != path:
        return None  # PATH finds another program of that name first
    value = _scripts().get(name)
    if value is None:
        return None
    for key in set(env) | set(os.environ):
        if key.startswith(_STARTUP_PREFIXES) and key not in _THREAD_COUNTS:
            if env.get(key) != SERVER_ENV.get(key, os.environ.get(key)):
                return None
    return path, value


def _context():
    """The forkserver context, its server started with :data:`SERVER_ENV`."""
    with _lock:
        if _state["context"] is None:
            from multiprocessing import forkserver

            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["cli_fork", "cli_fork_preload"])
            # the server imports its preload from this folder (it starts as ``python -c``)
            server_env = dict(SERVER_ENV, PYTHONPATH=os.pathsep.join(
                [os.path.dirname(os.path.abspath(__file__))] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
            saved = {k: os.environ.get(k) for k in server_env}
            os.environ.update(server_env)
            try:
                forkserver.ensure_running()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            # the path of a new interpreter (without the script's folder, the child's first entry)
            _state["sys_path"] = json.loads(subprocess.run(
                [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                capture_output=True, text=True, check=True, env={**os.environ, **SERVER_ENV}).stdout)
            _state["context"] = ctx
        return _state["context"]


def run(cmd, env, stdout_path, stderr_path=None, cwd=None, timeout=None):
    """Run ``cmd`` (for which :func:`entry_point` is not None) in a forked child with the
    environment ``env``, its stdout appended to ``stdout_path`` and its stderr to
    ``stderr_path`` (None: with stdout). Returns the exit code (negative: the signal that ended
    it), as ``subprocess.run`` does; raises ``subprocess.TimeoutExpired`` (the child killed)."""
    script, value = entry_point(cmd, env)
    ctx = _context()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        nice = 0
    args = (script, value, [str(a) for a in cmd[1:]], None if cwd is None else str(cwd), dict(env),
            str(stdout_path), None if stderr_path is None else str(stderr_path), nice, _state["sys_path"])
    p = ctx.Process(target=_child, args=args, daemon=False)
    with _lock:
        p.start()
    p.join(timeout)
    if p.exitcode is None:
        p.kill()
        p.join()
        raise subprocess.TimeoutExpired(list(map(str, cmd)), timeout)
    code = p.exitcode
    p.close()
    return code


def _redirect(fd, path):
    target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(target, fd)
    os.close(target)


def _child(script, value, argv, cwd, env, stdout_path, stderr_path, nice, sys_path):
    """The forked child: the command as a new interpreter would run it (module docstring)."""
    from multiprocessing import context

    context._default_context._actual_context = None  # the platform's start method, not forkserver's
    os.environ.clear()
    os.environ.update(env)
    if nice > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    _redirect(1, stdout_path)
    if stderr_path is None:
        os.dup2(1, 2)
    else:
        _redirect(2, stderr_path)
    threads = env.get("OMP_NUM_THREADS", SERVER_ENV["OMP_NUM_THREADS"])
    if threads != SERVER_ENV["OMP_NUM_THREADS"] and threads.isdigit():
        import torch

        torch.set_num_threads(int(threads))
    sys.argv = [script] + argv
    sys.path[:] = [os.path.dirname(script)] + sys_path
    _hide_fairseq()
    main = types.ModuleType("__main__")
    main.__file__ = script  # what a process this one spawns imports as its __mp_main__
    sys.modules["__main__"] = main
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        module, _, attr = value.partition(":")
        fn = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
        code = fn()
    except SystemExit as e:
        code = e.code
    except BaseException:
        sys.excepthook(*sys.exc_info())  # as the interpreter reports it (the plugin sets its own hook)
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code & 0xFF)


class _Preloaded:
    """Import finder and loader of the fairseq modules the server has imported
    (:mod:`cli_fork_preload`), hidden from ``sys.modules`` until the command imports one: then
    all of them are back, and importing fairseq's effects on the process made (its
    ``logging.basicConfig`` calls, the variables it sets where unset), as a new interpreter's
    import of fairseq makes them at that point."""

    def __init__(self, modules, effects):
        self.modules, self.effects = modules, effects
        self.specs = {name: module.__spec__ for name, module in modules.items()}

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        spec = self.specs[name]
        return importlib.machinery.ModuleSpec(name, self, origin=getattr(spec, "origin", None),
                                              is_package=getattr(spec, "submodule_search_locations", None) is not None)

    def create_module(self, spec):
        return self.modules[spec.name]

    def exec_module(self, module):
        module.__spec__ = self.specs[module.__name__]  # (the import system set the finder's)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for name, other in self.modules.items():
            sys.modules.setdefault(name, other)
        for key, value in self.effects["env"].items():
            os.environ.setdefault(key, value)
        import logging

        for args, kwargs in self.effects["basic_config"]:
            logging.basicConfig(*args, **kwargs)


def _hide_fairseq():
    """In the child: the preloaded fairseq modules out of ``sys.modules`` until the command
    imports one (:class:`_Preloaded`)."""
    preload = sys.modules.get("cli_fork_preload")
    if preload is None:
        return
    for name in preload.FAIRSEQ_MODULES:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, _Preloaded(preload.FAIRSEQ_MODULES, preload.FAIRSEQ_EFFECTS))


def imported(names, path):
    """A forked child's report for tests/test_cli_fork.py, as JSON in ``path``: which of the
    modules ``names`` are in ``sys.modules`` and the root logger's level and handlers' streams
    as a command starts, and after ``import fairseq``."""
    import logging

    def state():
        root = logging.getLogger()
        return {"modules": [n for n in names if n in sys.modules],
                "root logger": [logging.getLevelName(root.level),
                                [getattr(getattr(h, "stream", None), "name", type(h).__name__) for h in root.handlers]]}

    _hide_fairseq()
    start = state()
    import fairseq  # noqa: F401

    with open(path, "w", encoding="utf-8") as f:
        json.dump({"start": start, "after import fairseq": state()}, f)


def completed(cmd, env, cwd=None, timeout=None):
    """:func:`run` with stdout and stderr read back as text: a ``subprocess.CompletedProcess``."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cli-fork-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        code = run(cmd, env, out, err, cwd=cwd, timeout=timeout)
        texts = []
        for path in (out, err):
            try:
                with open(path, encoding=io.text_encoding(None)) as f:
                    texts.append(f.read())
            except FileNotFoundError:
                texts.append("")
    return subprocess.CompletedProcess([str(c) for c in cmd], code, texts[0], texts[1])
