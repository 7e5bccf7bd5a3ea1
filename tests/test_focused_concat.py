"""Focused concatenation (Lupo et al. 2022) and sentence positions (Lupo et al. 2023) for
``concat_transformer``: the context-discounted loss of ``label_smoothed_cross_entropy_focused
--context-loss-weight λ``, segment-shifted positions (``--segment-shifted-positions SHIFT``) and
sentence-position embeddings (``--sentence-position-embeddings``), on the encoder, the
teacher-forced decoder and the cached decoder; the CTranslate2 export refuses the two
position options."""
import pytest
import torch
from fairseq.models.transformer import TransformerDecoderBase

from conftest import REPO, TINY_MODEL, run

USER_DIR = str(REPO / "fairseq_docctx")
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings", "--dropout", "0"]


def _setup(data, *extra, arch="concat_transformer", criterion=()):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", USER_DIR, "--task", "document_translation",
                                                "--arch", arch, *TINY, *criterion, *map(str, extra)])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return args, task, task.build_model(args)


def _criterion(task, args, lam, eps=0.1):
    from fairseq_docctx.criterions.label_smoothed_cross_entropy_focused import (
        LabelSmoothedCrossEntropyFocusedCriterion as Focused,
    )

    return Focused(task, False, eps, context_loss_weight=lam)


@pytest.fixture(scope="module")
def both(toy_bin):
    """A tiny concat_transformer (K=2, both sides; eval mode) and a training batch of 24 rows."""
    args, task, model = _setup(toy_bin, "--context-size", "2", "--context-sides", "both")
    task.load_dataset("train")
    ds = task.dataset("train")
    sample = ds.collater([ds[i] for i in range(24)])
    return args, task, model.eval(), sample


def _ls(lprobs, target, eps):
    """fairseq's label-smoothed token loss, written out: (1 - ε - ε/(V-1))·(-log p(y)) +
    ε/(V-1)·Σ_v(-log p(v))."""
    V = lprobs.size(-1)
    e = eps / (V - 1)
    return (1 - eps - e) * -lprobs[target] + e * -lprobs.sum()


def _hand_losses(model, sample, eps):
    """(current, context) summed token losses from the decoder run row by row on its explicit
    concatenation ``prefix + prev_output_tokens`` (no padding, fairseq's own decoder)."""
    ni = sample["net_input"]
    pad = model.decoder.padding_idx
    with torch.no_grad():
        enc = model.encoder(ni["src_tokens"], src_lengths=ni["src_lengths"], context=ni["context"])
        cur, ctx, n_ctx = 0.0, 0.0, 0
        for i in range(ni["src_tokens"].size(0)):
            e = model.encoder.reorder_encoder_out(enc, torch.tensor([i]))
            prefix = e["tgt_prefix"][0][0]
            prefix = prefix[prefix.ne(pad)]
            prev = ni["prev_output_tokens"][i]
            prev = prev[prev.ne(pad)]
            tokens = torch.cat([prefix, prev]).unsqueeze(0)
            x, _ = TransformerDecoderBase.forward(model.decoder, tokens, e)
            lp = torch.log_softmax(x[0].float(), -1)
            P = prefix.numel()
            for t in range(P - 1):  # prefix position t predicts prefix token t+1
                ctx += float(_ls(lp[t], prefix[t + 1], eps))
                n_ctx += 1
            target = sample["target"][i]
            for t, y in enumerate(target[target.ne(pad)]):
                cur += float(_ls(lp[P + t], y, eps))
    return cur, ctx, n_ctx


def test_lambda_zero_is_todays_loss(both):
    """λ = 0: the same loss, logs and gradients as label_smoothed_cross_entropy (the model is
    called as that criterion calls it, without the context outputs)."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    args, task, model, sample = both
    calls = []
    forward = model.forward
    model.forward = lambda *a, **kw: calls.append(sorted(kw)) or forward(*a, **kw)
    try:
        results = []
        for crit in (LabelSmoothedCrossEntropyCriterion(task, False, 0.1), _criterion(task, args, 0.0)):
            model.zero_grad()
            loss, size, log = crit(model, sample)
            loss.backward()
            results.append((loss.detach(), size, log, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    finally:
        model.forward = forward
    (l0, s0, g0_log, g0), (l1, s1, g1_log, g1) = results
    assert torch.equal(l0, l1) and s0 == s1 == sample["ntokens"] and g0_log.keys() == g1_log.keys()
    assert len(g0) == len(g1) > 0 and all(torch.equal(a, b) for a, b in zip(g0, g1))
    assert calls[0] == calls[1] and "context_outputs" not in calls[1]


def test_lambda_weights_the_context_tokens_as_the_formula_says(both):
    """λ = 1: the loss is the sum of the label-smoothed token losses over the prefix's and the
    current sentence's tokens, computed by hand from the decoder run on each row's explicit
    concatenation; λ = 0.3: current + 0.3 × context. sample_size stays the current tokens."""
    args, task, model, sample = both
    eps = 0.1
    cur, ctx, n_ctx = _hand_losses(model, sample, eps)
    assert n_ctx > 50 and ctx > 0  # the batch has target context to score
    with torch.no_grad():
        for lam in (0.0, 0.3, 1.0):
            loss, size, log = _criterion(task, args, lam, eps)(model, sample)
            assert size == sample["ntokens"]
            assert float(loss) == pytest.approx(cur + lam * ctx, rel=1e-5), lam
            if lam:
                assert log["context_ntokens"] == n_ctx
                assert float(log["context_loss"]) == pytest.approx(ctx, rel=1e-5)


def test_context_loss_trains_through_the_task(both):
    """A training step with λ = 0.5 through the task: the context term has gradients (a
    parameter that only the context's loss reaches differs from λ = 0's step) and the logged
    context metrics aggregate."""
    from fairseq import metrics
    from fairseq_docctx.criterions.label_smoothed_cross_entropy_focused import (
        LabelSmoothedCrossEntropyFocusedCriterion as Focused,
    )

    args, task, model, sample = both

    class Backward:
        def backward(self, loss):
            loss.backward()

    grads = []
    for lam in (0.0, 0.5):
        model.zero_grad()
        loss, size, log = task.train_step(sample, model, _criterion(task, args, lam), Backward(), 0)
        grads.append(model.decoder.embed_tokens.weight.grad.clone())
    model.eval()
    assert not torch.allclose(grads[0], grads[1])
    with metrics.aggregate() as agg:
        Focused.reduce_metrics([log, log])
    assert agg.get_smoothed_values()["context_loss"] > 0


def test_refusals(toy_bin, both):
    from fairseq_docctx.errors import UsageError

    args, task, model, sample = both
    with pytest.raises(UsageError, match="λ is between 0 and 1"):
        _criterion(task, args, 1.5)
    _, src_task, _ = _setup(toy_bin, "--context-size", "1", "--context-sides", "source")
    with pytest.raises(UsageError, match=r"needs target context \(--context-sides target\|both\)"):
        _criterion(src_task, args, 0.1)
    _, _, transformer = _setup(toy_bin, "--context-size", "1", "--context-sides", "both", arch="transformer")
    with pytest.raises(UsageError, match="TransformerModel does not predict its target context"):
        _criterion(task, args, 0.1)(transformer, sample)
    with pytest.raises(UsageError, match="the shift is >= 0"):
        _setup(toy_bin, "--context-size", "1", "--segment-shifted-positions", "-1")


# ------------------------------------------------------------------ positions
def _positions_model(toy_bin, *flags, learned=False):
    extra = ["--encoder-learned-pos", "--decoder-learned-pos"] if learned else []
    args, task, model = _setup(toy_bin, "--context-size", "3", "--context-sides", "both", *flags, *extra)
    if learned:  # fairseq initialises learned positions small: make them matter
        for part in (model.encoder, model.decoder):
            torch.nn.init.normal_(part.embed_positions.weight, std=1.0)
    return task, model.eval()


def test_positions_of_each_sentence_start_at_the_shift(toy_bin):
    """Every sentence's tokens continue the concatenation's positions, shifted by i × 21 for
    the i-th sentence (a separator closes its sentence; the decoder's start token </s> opens
    the current one, and a separator inside it opens nothing); the encoder and decoder embed
    those positions; without the options the positions are fairseq's own."""
    from fairseq.modules import SinusoidalPositionalEmbedding
    from fairseq_docctx.modules.sentence_positions import DocumentPositions

    task, model = _positions_model(toy_bin, "--segment-shifted-positions", "21")
    d = task.tgt_dict
    pad, eos, sep = d.pad(), d.eos(), d.index("<sep>")
    # decoder row: pad, y_{j-2} (2 tokens) <sep>, y_{j-1} (1 token) <sep>, </s> y_j (with a <sep>)
    row = torch.tensor([[pad, 10, 11, sep, 12, sep, eos, 13, sep, 14]])
    emb = model.decoder.embed_positions
    assert isinstance(emb, DocumentPositions) and emb.shift == 21
    pos, labels = emb.document_positions(row)
    first = pad + 1
    assert pos[0].tolist() == [pad, first, first + 1, first + 2, first + 3 + 21, first + 4 + 21,
                               *[first + k + 42 for k in range(5, 9)]]
    assert labels[0].tolist() == [0, 3, 3, 3, 2, 2, 1, 1, 1, 1]
    table = SinusoidalPositionalEmbedding.get_embedding(first + 9 + 42, 16, pad)
    torch.testing.assert_close(emb(row)[0, 1:], table[pos[0, 1:]])
    # the encoder: x_{j-1} <sep> x_j </s>
    src = torch.tensor([[20, 21, sep, 22, 23, eos]])
    enc_pos, _ = model.encoder.embed_positions.document_positions(src)
    assert enc_pos[0].tolist() == [first, first + 1, first + 2, first + 3 + 21, first + 4 + 21, first + 5 + 21]
    _, plain = _positions_model(toy_bin)
    assert not isinstance(plain.encoder.embed_positions, DocumentPositions)
    assert not isinstance(plain.decoder.embed_positions, DocumentPositions)


@pytest.mark.parametrize("flags,learned", [
    (("--segment-shifted-positions", "21"), False),
    (("--segment-shifted-positions", "8", "--sentence-position-embeddings", "learned"), True),
    (("--sentence-position-embeddings", "sinusoidal"), False),
], ids=["shift-sinusoidal", "shift-learned-sentence-learned", "sentence-sinusoidal"])
def test_cached_decoding_equals_teacher_forcing(toy_bin, flags, learned):
    """Step by step with fairseq's incremental state (the prefix run once, then one token a
    step, beams reordered): the newest position's output equals the teacher-forced run over
    prefix + tokens so far, for rows whose prefixes hold 0 to 3 sentences."""
    task, model = _positions_model(toy_bin, *flags, learned=learned)
    if learned and model.decoder.embed_positions.sentence_embeddings is not None:
        torch.nn.init.normal_(model.decoder.embed_positions.sentence_embeddings.table.weight[1:], std=1.0)
    d = task.tgt_dict
    eos, pad = d.eos(), d.pad()
    src = torch.tensor([[10, 11, 12, eos], [13, 14, 15, eos], [16, 17, 18, eos], [19, 20, 21, eos]])
    table = torch.tensor([[22, 23, 24, eos], [25, eos, pad, pad], [26, 27, eos, pad]])
    ctx = {"tgt_tokens": table, "tgt_index": torch.tensor([[2, 1, 0], [-1, -1, -1], [1, 1, -1], [0, -1, -1]])}
    g = torch.Generator().manual_seed(1)
    hist = torch.randint(6, 30, (8, 7), generator=g)
    hist[:, 0] = eos
    hist[0, 3] = d.index("<sep>")  # a separator generated inside the current sentence
    beams = torch.arange(4).repeat_interleave(2)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=torch.full((4,), 4), context=ctx)
        enc = model.encoder.reorder_encoder_out(enc, beams)
        state = {}
        for t in range(1, hist.size(1) + 1):
            if t > 2:
                order = torch.tensor([1, 0, 2, 2, 5, 4, 6, 7])
                enc = model.encoder.reorder_encoder_out(enc, order)
                model.decoder.reorder_incremental_state_scripting(state, order)
                hist = hist.index_select(0, order)
            out, _ = model.decoder(hist[:, :t], encoder_out=enc, incremental_state=state)
            ref, _ = model.decoder(hist[:, :t], encoder_out=enc)
            torch.testing.assert_close(out[:, -1], ref[:, -1], atol=1e-5, rtol=1e-5)
    # decoded from the cache all along (not the full run's fallback)
    assert "prefix_len" in model.decoder.get_incremental_state(state, "concat_prefix")


def test_the_ctranslate2_export_refuses_document_positions(toy_bin):
    from fairseq_docctx.inference.ctranslate2 import ExportError
    from fairseq_docctx.inference.ctranslate2.exportable import check_exportable

    for flags, name in ((("--segment-shifted-positions", "21"), "--segment-shifted-positions"),
                        (("--sentence-position-embeddings", "sinusoidal"), "--sentence-position-embeddings")):
        _, model = _positions_model(toy_bin, *flags)
        with pytest.raises(ExportError) as e:
            check_exportable(model, "ckpt.pt")
        assert str(e.value) == f"ckpt.pt: CTranslate2 does not compute this model as fairseq does: {name}"
    _, plain = _positions_model(toy_bin)
    check_exportable(plain, "ckpt.pt")  # no flag: exports as before


# ------------------------------------------------------------------ fairseq-train, fairseq-generate
FLAGS = {
    "context-loss": ["--criterion", "label_smoothed_cross_entropy_focused", "--context-loss-weight", "0.3",
                     "--label-smoothing", "0.1"],
    "shifted": ["--segment-shifted-positions", "21"],
    "sentence-embeddings": ["--sentence-position-embeddings", "learned", "--criterion",
                            "label_smoothed_cross_entropy_focused", "--context-loss-weight", "0.01"],
}


@pytest.fixture(scope="module")
def trained(toy_bin, tmp_path_factory):
    """One tiny concat_transformer (K=2, both sides) per option, trained for 40 updates."""
    out = {}
    for name, flags in FLAGS.items():
        save = tmp_path_factory.mktemp(name)
        p = run(["fairseq-train", toy_bin, "--user-dir", USER_DIR, "--task", "document_translation",
                 "--context-size", "2", "--context-sides", "both", "--arch", "concat_transformer", *TINY_MODEL,
                 *flags, "--max-tokens", "600", "--max-update", "40", "--no-epoch-checkpoints", "--save-dir", save])
        out[name] = (save / "checkpoint_last.pt", p.stdout + p.stderr)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FLAGS))
def test_train_and_generate_with_each_option(trained, toy_bin, name):
    """fairseq-train with the option trains (its validation loss falls below the first
    epoch's; the context loss is logged with λ > 0) and fairseq-generate decodes every test
    sentence once."""
    import re

    ckpt, log = trained[name]
    valid = [float(v) for v in re.findall(r"\| valid on 'valid' subset \| loss ([0-9.]+)", log)]
    assert len(valid) >= 2 and valid[-1] < valid[0], valid
    assert ("context_loss" in log) == ("--context-loss-weight" in FLAGS[name])
    p = run(["fairseq-generate", toy_bin, "--user-dir", USER_DIR, "--task", "document_translation",
             "--path", ckpt, "--gen-subset", "test", "--beam", "2", "--cpu", "--batch-size", "8"])
    ids = [int(m) for m in re.findall(r"^H-(\d+)\t", p.stdout, flags=re.M)]
    n_test = len((toy_bin.parent / "raw" / "test.src").read_text().splitlines())
    assert sorted(ids) == list(range(n_test)), ids[:20]


@pytest.mark.slow
def test_beam_search_equals_full_rescoring_with_shifted_positions(trained, toy_bin, monkeypatch):
    """Document-order beam search of the shifted-positions model (own translations as target
    context, beam 4): tokens and scores equal those of the decoder that re-runs prefix and
    hypothesis in full at every step (teacher forcing)."""
    from fairseq_docctx.hub import from_pretrained
    from fairseq_docctx.models.concat_transformer import ConcatContextDecoder

    hub = from_pretrained(trained["shifted"][0], data=str(toy_bin))
    import random

    rng = random.Random(5)
    docs = [[hub.encode(" ".join(rng.choice([f"w{i}" for i in range(30)]) for _ in range(rng.randint(2, 9))))
             for _ in range(n)] for n in (6, 1, 4, 7)]
    kw = dict(beam=4, batch_size=4, max_len_b=12)
    new = hub.generate_documents(docs, **kw)
    full = ConcatContextDecoder.forward
    monkeypatch.setattr(ConcatContextDecoder, "forward",
                        lambda self, prev, encoder_out=None, incremental_state=None, **kw:
                        full(self, prev, encoder_out, None, **kw))
    old = hub.generate_documents(docs, **kw)
    n = 0
    for doc_new, doc_old in zip(new, old):
        for hyps_new, hyps_old in zip(doc_new, doc_old):
            for a, b in zip(hyps_new, hyps_old):
                assert a["tokens"].tolist() == b["tokens"].tolist()
                torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-5, rtol=1e-5)
                n += 1
    assert n == 4 * 18


@pytest.mark.slow
@pytest.mark.parametrize("name,flag", [("shifted", "--segment-shifted-positions"),
                                       ("sentence-embeddings", "--sentence-position-embeddings")])
def test_docctx_export_refuses_the_checkpoint_in_one_line(trained, tmp_path, capsys, name, flag):
    pytest.importorskip("ctranslate2")
    from conftest import run_in_process
    from fairseq_docctx.cli.export import cli_main as export_main

    code, _, err = run_in_process(export_main, ["ctranslate2", trained[name][0], tmp_path / "out"], capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("docctx-export: error: ") and lines[0].endswith(
        f"CTranslate2 does not compute this model as fairseq does: {flag}")
    assert not (tmp_path / "out").exists()
