"""Every architecture in bfloat16 and float16, on the CPU.

fairseq's ``--fp16`` and ``--bf16`` need CUDA (on a CPU ``--bf16`` takes fairseq's TPU path
and fails), so the half-precision paths are exercised here at the model level: each
architecture's context-probe model (the session's trained models, tests/probe_fixtures.py)
cast with ``model.to(dtype)`` — the weights, buffers and activations in half precision, as
``--fp16``/``--bf16`` run the forward and backward passes — takes a training step through
fairseq's own criterion of the model (label-smoothed cross-entropy; QCN's with the PCC term)
and the task's ``train_step`` (its context and language-token handling), and decodes the first
test documents in document order through the hub (beam 4, the model's own translations as
target context where it reads them). Asserted: a finite loss and finite gradients (in the
half precision), the loss per target token within :data:`LOSS_TOLERANCE` of float32's, and for every
sentence float32's best hypothesis, or one that float32's model scores no worse
(:func:`_no_worse`). Dropout is off in both runs so that the two compute the same function.
"""
import copy
import math

import torch

from conftest import REPO, TINY_MODEL, run
from test_batch_independence import probe_documents

#: the largest difference of a training batch's loss per target token (nats) from float32's:
#: bfloat16 keeps 8 bits of mantissa (a relative rounding of 2^-9 per operation), float16 11
#: (2^-12). Measured on the 11 probe models: at most 0.0024 (bfloat16) and 0.0001 (float16),
#: both qcn_transformer's (its loss, with the PCC term, is a difference of two terms); the
#: others at most 0.0005 and 0.00004
LOSS_TOLERANCE = {torch.bfloat16: 0.01, torch.float16: 0.001}
#: how much worse (nats per target token, float32's teacher-forced score) a sentence's
#: half-precision translation may be than float32's where the two searches choose differently
SCORE_TOLERANCE = 0.01
#: the probe's test documents decoded (the first of them; 32 sentences)
DOCS = 6

def _no_dropout(model):
    for m in model.modules():
        if "Dropout" in type(m).__name__ and isinstance(getattr(m, "p", None), float):
            m.p = 0.0
    return model


class _Backward:
    """The part of fairseq's optimizer a training step uses."""

    def backward(self, loss):
        loss.backward()


def _train_step(hub, model, sample):
    """(loss, gradients) of one training step of ``model`` on ``sample``: the task's
    ``train_step`` with the checkpoint's own criterion."""
    criterion = hub.task.build_criterion(hub.cfg.criterion)
    model.zero_grad(set_to_none=True)
    loss, sample_size, _ = hub.task.train_step(sample, model, criterion, _Backward(), 1000)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return float(loss) / float(sample_size), grads


def _sample(hub, dtype=None):
    """The first 16 items of the probe's test split, as the task batches them for training."""
    from fairseq import utils

    task = hub.task
    if "test" not in task.datasets:
        task.load_dataset("test")
    ds = task.dataset("test")
    sample = ds.collater([ds[i] for i in range(16)])
    if dtype is not None:  # floating inputs (none of the tasks' batches has any) in the model's dtype
        sample = utils.apply_to_sample(lambda t: t.to(dtype) if t.is_floating_point() else t, sample)
    return sample


def _check(probe, model, **overrides):
    """The training step and the beam search of a session model (``model``: its fixture's
    value; ``overrides``: the hub's) in each half precision against float32."""
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(model["checkpoint"], data=probe["data_bin"], **overrides)
    decoder32 = hub.models[0]  # prepared for generation by the hub (no training after that)
    trainable = hub.task.build_model(hub.cfg.model, from_checkpoint=True)
    trainable.load_state_dict(decoder32.state_dict())
    _no_dropout(trainable)
    docs = probe_documents(probe, n=DOCS)
    reference = hub.translate_documents(docs, beam=4)
    loss32, _ = _train_step(hub, trainable, _sample(hub))
    assert math.isfinite(loss32)
    for dtype in (torch.bfloat16, torch.float16):
        model = copy.deepcopy(trainable).to(dtype)
        loss, grads = _train_step(hub, model, _sample(hub, dtype))
        assert math.isfinite(loss) and grads, (dtype, loss)
        assert all(g.dtype == dtype and bool(torch.isfinite(g).all()) for g in grads), dtype
        assert abs(loss - loss32) <= LOSS_TOLERANCE[dtype], (dtype, loss, loss32)
        hub.models[0] = copy.deepcopy(decoder32).to(dtype)
        try:
            got = hub.translate_documents(docs, beam=4)
        finally:
            hub.models[0] = decoder32
        if got != reference:
            _no_worse(hub, docs, got, reference, dtype)


def _no_worse(hub, docs, got, reference, dtype):
    """Where the half-precision search's best hypothesis differs from float32's, float32's
    model scores it (teacher-forced, per target token, its own earlier translations as
    context) at least as well as its own best, within :data:`SCORE_TOLERANCE`: fairseq's
    beam search stops once ``beam`` hypotheses have ended, so a rounding can let a better
    hypothesis end before the search stops (or a worse one after); a broken half-precision
    path scores far below. Measured on the probe's ``mht_transformer`` (float16, 1 of 32
    sentences): float32's best ``ich glaube sie assen .`` at -1.196 nats per token ended before
    ``ich glaube sie ist schwer .`` (-0.070, float16's) could."""
    from fairseq_docctx.evaluation.scoring import ModelScorer

    scorer = ModelScorer(hub)
    for d, (src, ours, theirs) in enumerate(zip(docs, got, reference)):
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if a == b:
                continue
            source = [scorer.encode_source(x) for x in src[:i + 1]]
            scores = scorer.score_documents([
                (source, [scorer.encode_target(x) for x in ours[:i + 1]]),
                (source, [scorer.encode_target(x) for x in theirs[:i + 1]])])
            half, full = (s.logprob / s.ntokens for s in scores)
            assert half >= full - SCORE_TOLERANCE, (dtype, d, i, a, half, b, full)


# one test per architecture, each reading its session model (tests/probe_fixtures.py starts
# the trainings the collected tests name)
def test_transformer(probe, sentence_model):
    _check(probe, sentence_model)


def test_concat_transformer(probe, concat_model):
    _check(probe, concat_model)


def test_han_transformer_encoder(probe, han_encoder_model):
    _check(probe, han_encoder_model)


def test_han_transformer_decoder(probe, han_decoder_model):
    _check(probe, han_decoder_model)


def test_qcn_transformer(probe, qcn_model):
    _check(probe, qcn_model)


def test_mht_transformer(probe, mht_model, sentence_model):
    _check(probe, mht_model, draft_path=sentence_model["checkpoint"])


def test_rnnsearch(probe, rnnsearch_model):
    _check(probe, rnnsearch_model)


def test_hrnn_context(hrnn_model):
    _check(hrnn_model["probe"], hrnn_model)  # (its own probe: short sentences, distractors)


def test_isg_rnnsearch(probe, isg_model):
    _check(probe, isg_model)


def test_doc2doc_transformer(probe, doc2doc_model):
    _check(probe, doc2doc_model)


def test_g_transformer(probe, g_model):
    _check(probe, g_model)


# ------------------------------------------------------------------ fairseq's --bf16
def test_fairseq_train_bf16_runs_on_the_trainers_device(toy_bin, tmp_path):
    """fairseq 0.12 turns --bf16 into --tpu; with the plugin, fairseq-train --bf16 trains in
    bfloat16 on the trainer's device (here the CPU) where torch_xla is missing: fairseq's own
    bf16 training (FP16Optimizer without loss scaling) with finite, falling losses."""
    import re

    p = run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--arch", "concat_transformer", "--context-size", "1", *TINY_MODEL, "--bf16", "--max-update", "6",
             "--max-tokens", "500", "--log-interval", "1", "--no-save", "--disable-validation", "--save-dir", tmp_path])
    log = p.stdout + p.stderr
    assert "--bf16 without torch_xla: bfloat16 training on the trainer's device" in log, log[-3000:]
    losses = [float(x) for x in re.findall(r"train_inner \| .* loss=([\d.na]+),", log)]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses


def test_bf16_keeps_fairseqs_tpu_path_where_torch_xla_is_installed(monkeypatch):
    from types import SimpleNamespace

    from fairseq.distributed import utils as distributed_utils

    from fairseq_docctx import bf16

    cfg = SimpleNamespace(common=SimpleNamespace(bf16=True, tpu=True))
    monkeypatch.setattr(bf16, "has_xla", lambda: True)
    assert not bf16.bf16_off_tpu(cfg) and cfg.common.tpu
    monkeypatch.setattr(bf16, "has_xla", lambda: False)
    assert bf16.bf16_off_tpu(cfg) and not cfg.common.tpu
    plain = SimpleNamespace(common=SimpleNamespace(bf16=False, tpu=True))  # --tpu asked for itself
    assert not bf16.bf16_off_tpu(plain) and plain.common.tpu
    wrapped = distributed_utils.call_main
    assert wrapped.docctx_bf16  # installed when the plugin is imported, once
    bf16.install_bf16_fix()
    assert distributed_utils.call_main is wrapped
