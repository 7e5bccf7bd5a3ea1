"""Checkpoints written by ``fairseq-train`` before the document-context contract (the fixture
``tests/fixtures/old_checkpoints``, see ``make_old_checkpoints.py``) load with today's code
and decode to the same output; at inference the context settings default to the
checkpoint's."""
import re

import pytest

from conftest import REPO, run

FIX = REPO / "tests" / "fixtures" / "old_checkpoints"
# the task arguments each checkpoint was trained with (and its reference was decoded with)
TASK_ARGS = {
    "concat_both": ["--context-size", "2", "--context-sides", "both"],
    "qcn": ["--context-size", "3"],
    "han": ["--context-size", "2", "--context-sides", "both"],
    # pre-norm, written before the MHT options that change the computation of a new model
    # (per-distance hops, post-norm hops, A^(n) = the layer output): it keeps computing as it did
    "mht_prenorm": ["--context-size", "2", "--context-sides", "src,draft"],
    # hrnn_context (16-dim) written before --decoder-init: its s_0 reads the backward RNN's
    # last state, as it was trained
    "hrnn": ["--context-size", "2"],
}


def generate(name, task_args, extra=()):
    p = run(["fairseq-generate", FIX / "data-bin", "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", *task_args, "--path", FIX / f"{name}.pt",
             "--beam", "2", "--max-len-b", "10", "--batch-size", "4", "--gen-subset", "test", *extra])
    return p.stdout + p.stderr, sorted(l for l in p.stdout.splitlines() if l[:2] in ("H-", "P-"))


def assert_same(lines, reference):
    want = reference.read_text().splitlines()
    assert len(lines) == len(want)
    for got, ref in zip(lines, want):
        g, r = got.split("\t"), ref.split("\t")
        assert g[0] == r[0]
        if g[0].startswith("H-"):
            assert g[2:] == r[2:], (got, ref)  # the same translation
        scores_g = [float(x) for x in g[1].split()] + ([] if g[0].startswith("P-") else [])
        scores_r = [float(x) for x in r[1].split()]
        # printed with 4 decimals: another CPU's rounding may flip the last digit (one unit)
        assert scores_g == pytest.approx(scores_r, abs=1.5e-4), (got, ref)


@pytest.mark.parametrize("name", list(TASK_ARGS))
def test_old_checkpoint_decodes_as_before(name):
    _, lines = generate(name, TASK_ARGS[name])
    assert_same(lines, FIX / f"{name}.generate.txt")


@pytest.mark.parametrize("name", ["concat_both", "han"])
def test_generate_without_context_flags_uses_the_checkpoints_settings(name):
    """The K=2, both-sides checkpoints decode with their own settings when the command line
    gives none (they were decoded with the task defaults K=3, source before)."""
    log, lines = generate(name, [])
    assert "differs" not in log
    assert_same(lines, FIX / f"{name}.generate.txt")


def test_a_differing_command_line_value_is_used_with_a_warning():
    """A value said to be meant (--context-override) is used, with one warning line; without
    it the run is refused (tests/test_context_override.py)."""
    log, lines = generate("concat_both", ["--context-size", "1", "--context-sides", "both", "--context-override"])
    assert re.search(r"^fairseq-generate: warning: --context-size 1 differs from the checkpoint's \(2\): "
                     r"decoding with 1 \(--context-override\)$", log, re.M)
    assert log.count("--context-size 1 differs") == 1
    assert sum(l.startswith("H-") for l in lines) == 11
