"""A training that stops within an epoch exits with its own exit code (0), not 134
("terminate called without an active exception"): fairseq's batch-making thread, still
running when the interpreter exits, is stopped first (fairseq_docctx.data.background)."""
import subprocess
import sys

from conftest import REPO, venv_env

# what fairseq-train does at --max-update within an epoch: its buffered epoch iterator has
# handed over one batch and its thread is making the next ones (torch ops, as a collater)
STOPPED_WITHIN_AN_EPOCH = """
import torch
import fairseq_docctx  # what --user-dir fairseq_docctx imports
from fairseq.data import iterators

class Batches:
    def __len__(self):
        return 10 ** 6

    def __iter__(self):
        x = torch.randn(64, 64)
        while True:
            for _ in range(200):
                x = torch.tanh(x @ x)
            yield x

next(iterators.BufferedIterator(10 ** 6, Batches()))
print("done training")
"""


def test_exit_code_with_batches_still_being_made():
    env = {**venv_env(), "PYTHONPATH": str(REPO)}
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", STOPPED_WITHIN_AN_EPOCH], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and p.stdout == "done training\n", (p.returncode, p.stderr[-2000:])
        assert "terminate called" not in p.stderr
