"""Several processes, one per shard of a corpus's documents, run side by side.

Documents are independent (context never crosses a document boundary), so a corpus can be
decoded in N processes, each with the documents of one shard
(:func:`~fairseq_docctx.data.doc_index.balanced_shards`), and the outputs merged by sentence
or document. This module starts the processes (one per device with ``devices``:
``CUDA_VISIBLE_DEVICES`` per process; on the CPU otherwise, with the cores shared out through
``OMP_NUM_THREADS``), waits for them, and stops them all with the failing shard's error
output when one fails; the one-line warnings of the shards (``PROG: warning: ...``, e.g. a
context setting decoded with ``--context-override``) are said once by the launcher.
"""
import os
import re
import shlex
import subprocess
import time
from typing import List, Optional, Sequence

from ..errors import warn

#: a one-line warning of a command (:func:`fairseq_docctx.errors.warn`)
_WARNING = re.compile(r"^[\w.-]+: warning: (.*)$", re.M)


class ShardError(RuntimeError):
    """A shard process that failed (its exit code and the end of its error output), or
    outputs of the shards that do not add up to the corpus. ``shard``: the index of the
    failed process, if one failed; ``exit_code``: the command's exit code for it (2 when the
    shard refused its input or arguments with one error line, which is then the message)."""

    def __init__(self, message: str, shard: Optional[int] = None, exit_code: int = 1):
        super().__init__(message)
        self.shard = shard
        self.exit_code = exit_code


def parse_devices(spec: Optional[str], cpu: bool = False, available: Optional[int] = None) -> Optional[List[str]]:
    """``"0,1"`` -> ``["0", "1"]``; ``None`` or ``""`` -> ``None`` (the CPU). The numbers are
    those of the GPUs this process sees (torch's and fairseq's numbering; ``available``:
    how many, default ``torch.cuda.device_count()``); a GPU that is not there, or ``cpu``
    (``--cpu``) with devices, is refused rather than decoded on the CPU."""
    if not spec:
        return None
    devices = [d.strip() for d in spec.split(",")]
    if any(not d.isdigit() for d in devices):
        raise ValueError(f"--devices {spec}: expected a comma-separated list of GPU numbers, e.g. 0,1")
    if cpu:
        raise ValueError(f"--cpu and --devices {spec}: the processes run on the GPUs of --devices; leave out "
                         "one of them")
    if available is None:
        import torch

        available = torch.cuda.device_count()
    missing = [d for d in devices if int(d) >= available]
    if missing:
        seen = ("no GPU" if not available else "1 GPU (0)" if available == 1 else
                f"{available} GPUs (0-{available - 1})")
        fix = "give GPUs among those, or leave" if available else "leave"
        raise ValueError(f"--devices {spec}: GPU {missing[0]} is not there: this machine shows {seen} "
                         f"to torch; {fix} out --devices to decode on the CPU")
    return devices


def num_processes(processes: Optional[int], devices: Optional[Sequence[str]]) -> int:
    """The number of shard processes: ``processes``, by default one per device."""
    if processes is None:
        return len(devices) if devices else 1
    if processes < 1:
        raise ValueError(f"--processes {processes}: must be at least 1")
    return processes


def shard_environment(shard_id: int, num_shards: int, devices: Optional[Sequence[str]],
                      base: Optional[dict] = None) -> dict:
    """The environment of shard ``shard_id``'s process: its device (``devices`` taken in turn:
    4 processes on ``0,1`` put two on each GPU; numbered among the GPUs this process sees:
    under ``CUDA_VISIBLE_DEVICES=2,3`` device 0 is GPU 2), or no GPU at all and
    ``OMP_NUM_THREADS`` = cores / processes (unless already set)."""
    env = dict(os.environ if base is None else base)
    if devices:
        device = devices[shard_id % len(devices)]
        visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if visible and device.isdigit() and int(device) < len(visible):
            device = visible[int(device)]  # GPU I of those this process sees
        env["CUDA_VISIBLE_DEVICES"] = device
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_shards)))
    return env


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().rstrip("\n").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _error_line(path: str) -> Optional[str]:
    """The message of an error output that ends in one ``PROG: error: MESSAGE`` line (what
    this package's commands print when they refuse their input or arguments) after warnings
    only, no traceback; else None."""
    lines = [ln for ln in _tail(path).splitlines() if ln.strip()]
    if lines and ": error: " in lines[-1] and not any(ln.startswith("Traceback") for ln in lines):
        return lines[-1].split(": error: ", 1)[1]
    return None


def forward_warnings(paths: Sequence[str]) -> List[str]:
    """The one-line warnings in the error outputs ``paths`` of finished shards, each said once
    by this process (:func:`~fairseq_docctx.errors.warn`); returns them."""
    found = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        found += [m for m in _WARNING.findall(text) if m not in found]
    for message in found:
        warn(message)
    return found


def run_shards(commands: Sequence[Sequence[str]], envs: Sequence[dict], work_dir: str,
               name: str = "shard", poll_s: float = 0.2) -> List[str]:
    """Run the commands side by side (shard ``i``: ``commands[i]`` with ``envs[i]``), standard
    output and error to ``work_dir/shard-I.out`` / ``.err``; returns the ``.out`` paths.

    When one exits with an error the others are stopped and :class:`ShardError` says which
    shard failed, its command and the end of its error output (or of its standard output,
    where fairseq logs, if the error output is empty); a shard that exits with code 2 and
    one error line (a refused input: every shard reads the same input and options) gives
    that line alone, with exit code 2. Once all have ended, their one-line warnings are
    said once (:func:`forward_warnings`)."""
    os.makedirs(work_dir, exist_ok=True)
    outs = [os.path.join(work_dir, f"shard-{i}.out") for i in range(len(commands))]
    errs = [os.path.join(work_dir, f"shard-{i}.err") for i in range(len(commands))]
    procs = []
    try:
        for cmd, env, out, err in zip(commands, envs, outs, errs):
            with open(out, "wb") as fo, open(err, "wb") as fe:
                procs.append(subprocess.Popen([str(c) for c in cmd], env=env, stdout=fo, stderr=fe,
                                              stdin=subprocess.DEVNULL))
        running = set(range(len(procs)))
        while running:
            for i in sorted(running):
                rc = procs[i].poll()
                if rc is None:
                    continue
                running.discard(i)
                line = _error_line(errs[i]) if rc == 2 else None
                if line is not None:
                    raise ShardError(line, shard=i, exit_code=2)
                if rc != 0:
                    tail = _tail(errs[i]) or _tail(outs[i])
                    raise ShardError(
                        f"{name} {i} of {len(procs)} failed (exit code {rc}): "
                        f"{shlex.join(str(c) for c in commands[i])}\n{tail}", shard=i)
            if running:
                time.sleep(poll_s)
        forward_warnings(errs)
    finally:
        for p in procs:  # the others, when one failed (or on an interrupt)
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return outs
