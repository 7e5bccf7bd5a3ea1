"""rnnsearch (Bahdanau et al. 2015 with the feedback attention of Kuang & Xiong 2018, §3):
the fast paths equal a plain transcription of the equations, incremental decoding equals the
full run under beam search's reorderings, the model learns the reverse task, and it trains and
decodes through ``document_translation --context-size 0`` and fairseq's ``translation`` alike."""
import argparse
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, RNN_TINY, assert_incremental_equals_full, run, toy_dictionary
from fairseq_docctx.models.rnnsearch import RNNSearchModel, additive_attention, gru_step, rnnsearch
from test_task import losses

USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def build(cls=RNNSearchModel, arch=rnnsearch, seed=0, task_cfg=None, **flags):
    """A tiny model of ``cls`` (eval mode, no dropout) on the toy dictionary."""
    d = toy_dictionary()

    class Task:
        source_dictionary = target_dictionary = d
        cfg = task_cfg

    sizes = dict(encoder_embed_dim=8, encoder_hidden_size=6, decoder_hidden_size=7, decoder_out_embed_dim=5,
                 attention_dim=4, dropout=0.0)
    args = argparse.Namespace(**{**sizes, **flags})
    arch(args)
    torch.manual_seed(seed)
    return cls.build_model(args, Task()).eval(), d


def batch(d, seed=1, B=4, S=7, T=6):
    """Left-padded sources of different lengths (EOS last) and right-padded decoder inputs."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([S, 2, 5, 3][:B])
    src = torch.full((B, S), d.pad())
    for i, n in enumerate(lengths.tolist()):
        src[i, S - n:] = torch.randint(5, 30, (n,), generator=g)
        src[i, -1] = d.eos()
    prev = torch.randint(5, 30, (B, T), generator=g)
    prev[:, 0] = d.eos()
    prev[1, 4:] = d.pad()
    return src, lengths, prev


def attend(v, query, keys, h):
    """``c = Σ_j α_j h_j``, ``α = softmax_j(v · tanh(query + keys(h_j)))``, summed position by
    position."""
    e = torch.stack([v @ torch.tanh(query + keys(h[j])) for j in range(len(h))])
    alpha = torch.softmax(e, 0)
    return sum(alpha[j] * h[j] for j in range(len(h)))


def reference_logits(model, src, prev, doc=None, previous=None):
    """The model's equations written out one sentence and one step at a time, with
    ``nn.GRU`` on each unpadded sentence, ``nn.GRUCell`` steps and the attention summed
    position by position. ``doc`` (hrnn_context): per row ``D`` or None; the model's
    switches say where it enters. ``previous`` (isg_rnnsearch): per row the words of the
    previous sentence A (Kuang & Xiong 2018, Eqs. 9-10). Returns ``[B, T, V]`` (zeros at
    padded positions)."""
    enc, dec = model.encoder, model.decoder
    pad = dec.padding_idx
    init_enc = getattr(enc, "init_enc", False)
    aux = getattr(dec, "aux_context", "none")
    out = torch.zeros(*prev.shape, len(dec.dictionary))
    for b in range(src.size(0)):
        words = src[b][src[b].ne(pad)]
        D = None if doc is None else doc[b]
        h0 = D.view(1, 1, -1).expand(2, 1, -1).contiguous() if init_enc else None
        h, last = enc.rnn(enc.embed_tokens(words).unsqueeze(0), h0)
        h = h[0]
        if previous is not None:  # the same encoder over A
            ha = enc.rnn(enc.embed_tokens(previous[b]).unsqueeze(0))[0][0]
        # s_0 reads ←h_1 (--decoder-init backward) or the mean of the annotations (mean)
        init = dec.init_state(last[1, 0] if dec.init_from == "backward" else h.mean(0))
        if getattr(dec, "context_init", None) is not None:
            init = init + dec.context_init(D)  # s_0 = tanh(W_s h_N + W_D D)
        s = torch.tanh(init)
        for t in range(prev.size(1)):
            if prev[b, t] == pad:
                continue
            y = dec.embed_tokens(prev[b, t])
            s_tilde = dec.gru1(y.unsqueeze(0), s.unsqueeze(0))[0]
            c = attend(dec.attention_v, dec.attention_query(s_tilde), enc.attention_keys, h)
            if previous is not None:  # Eqs. 9-10: c^a, the gate, GRU_2 over [c^b ⊙ (1-z); c^a ⊙ z]
                ca = attend(dec.context_attention_v, dec.context_attention_query(s_tilde), enc.context_attention_keys,
                            ha)
                z = torch.sigmoid(dec.context_gate_state(s) + dec.context_gate_embed(y)
                                  + dec.context_gate_current(c) + dec.context_gate_previous(ca))
                s = wide_gru2(dec, dec.context_input)(torch.cat([c * (1 - z), ca * z]).unsqueeze(0),
                                                      s_tilde.unsqueeze(0))[0]
            elif aux == "none":
                s = dec.gru2(c.unsqueeze(0), s_tilde.unsqueeze(0))[0]
            else:  # GRU_2 reads [c; D] (Eq. 4) or [c; z ⊙ D] (Eqs. 5-6)
                fed = D
                if aux == "gated":
                    fed = torch.sigmoid(dec.context_gate_state(s) + dec.context_gate_embed(y)
                                        + dec.context_gate_context(c)) * D
                s = wide_gru2(dec)(torch.cat([c, fed]).unsqueeze(0), s_tilde.unsqueeze(0))[0]
            t_ = dec.out_state(s) + dec.out_embed(y) + dec.out_context(c)
            t_ = torch.stack([torch.max(t_[2 * i], t_[2 * i + 1]) for i in range(len(t_) // 2)]) if dec.maxout \
                else torch.tanh(t_)
            out[b, t] = dec.output_layer(t_)
    return out


def wide_gru2(dec, extra=None):
    """The decoder's GRU_2 as one ``nn.GRUCell`` over ``[c; D]`` (hrnn_context keeps the
    columns that read D apart, as ``context_aux``), or over ``[c; x]`` with the columns
    ``extra`` reading ``x``."""
    extra = dec.context_aux if extra is None else extra
    cell = torch.nn.GRUCell(dec.gru2.input_size + extra.in_features, dec.hidden_size)
    with torch.no_grad():
        cell.weight_ih.copy_(torch.cat([dec.gru2.weight_ih, extra.weight], 1))
        for name in ("weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(dec.gru2, name))
    return cell


def test_gru_step_equals_gru_cell():
    """The step from precomputed projections is PyTorch's GRU cell (values and gradients)."""
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(5, 4)
    x, h = torch.randn(3, 5, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    ref = cell(x, h)
    gx, gh = torch.autograd.grad(ref.sum(), (x, h))
    fast = gru_step(F.linear(x, cell.weight_ih, cell.bias_ih), F.linear(h, cell.weight_hh, cell.bias_hh), h)
    torch.testing.assert_close(fast, ref)
    fx, fh = torch.autograd.grad(fast.sum(), (x, h))
    torch.testing.assert_close((fx, fh), (gx, gh))


def test_additive_attention_masks_padding():
    torch.manual_seed(0)
    q, keys, values = torch.randn(2, 3), torch.randn(2, 4, 3), torch.randn(2, 4, 5)
    mask = torch.tensor([[True, False, False, False], [False, False, True, True]])
    c, alpha = additive_attention(q, keys, values, mask, torch.randn(3))
    assert (alpha[mask] == 0).all()
    torch.testing.assert_close(alpha.sum(1), torch.ones(2))
    torch.testing.assert_close(c, (alpha.unsqueeze(-1) * values).sum(1))


@pytest.mark.parametrize("activation,decoder_init", [("maxout", "backward"), ("tanh", "backward"),
                                                     ("tanh", "mean")])
def test_model_equals_the_equations_written_out(activation, decoder_init):
    """Packed bidirectional encoder over left-padded sources, GRU_1 inputs precomputed for
    all steps, batched attention and deep output, ``s_0`` from ``←h_1`` or from the mean of
    the annotations: the same logits as the equations run sentence by sentence and step by
    step."""
    model, d = build(decoder_output_activation=activation, decoder_init=decoder_init)
    assert model.decoder.init_state.in_features == (6 if decoder_init == "backward" else 12)
    src, lengths, prev = batch(d)
    with torch.no_grad():
        fast = model(src, lengths, prev)[0]
        ref = reference_logits(model, src, prev)
    real = prev.ne(d.pad())
    torch.testing.assert_close(fast[real], ref[real], atol=1e-5, rtol=1e-5)


def test_encoder_output_follows_the_source_layout():
    """Annotations sit at the positions of ``src_tokens`` (left-padded: on the right), zeros
    at padding; ``final`` is the backward GRU's state after the whole sentence."""
    model, d = build()
    src, lengths, _ = batch(d)
    enc = model.encoder
    with torch.no_grad():
        out = enc(src, lengths)
        for b, n in enumerate(lengths.tolist()):
            h, last = enc.rnn(enc.embed_tokens(src[b, -n:]).unsqueeze(0))
            torch.testing.assert_close(out["annotations"][b, -n:], h[0], atol=1e-6, rtol=1e-5)
            assert (out["annotations"][b, :-n] == 0).all() and out["padding_mask"][b, :-n].all()
            torch.testing.assert_close(out["final"][b], last[1, 0], atol=1e-6, rtol=1e-5)


def test_incremental_decoding_equals_full_run_under_beam_reordering():
    model, d = build(seed=3)
    assert_incremental_equals_full(model, *batch(d))


def test_attention_in_source_layout_for_alignments():
    """With ``need_attn`` (fairseq-generate --print-alignment) the decoder returns the
    attention over the positions of ``src_tokens``: zero at padding, a distribution."""
    model, d = build()
    src, lengths, prev = batch(d)
    with torch.no_grad():
        attn = model(src, lengths, prev)[1]["attn"][0]
    assert attn.shape == (*prev.shape, src.size(1))
    assert (attn.masked_select(src.eq(d.pad()).unsqueeze(1).expand_as(attn)) == 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(prev.shape))
    model.decoder.make_generation_fast_(need_attn=False)
    assert model(src, lengths, prev)[1]["attn"] == [None]


def test_named_architectures_have_the_papers_sizes():
    from fairseq_docctx.models.rnnsearch import rnnsearch_nematus

    a = argparse.Namespace()
    rnnsearch(a)
    assert (a.encoder_embed_dim, a.encoder_hidden_size, a.decoder_hidden_size, a.decoder_out_embed_dim,
            a.decoder_output_activation, a.decoder_dropout_out, a.encoder_dropout_in) == (620, 1000, 1000, 500,
                                                                                          "maxout", 0.5, 0.0)
    n = argparse.Namespace()
    rnnsearch_nematus(n)
    assert (n.encoder_embed_dim, n.decoder_embed_dim, n.encoder_hidden_size, n.decoder_out_embed_dim,
            n.decoder_output_activation, n.attention_dim, n.decoder_init) == (600, 600, 1000, 600, "tanh", 2000, "mean")


@pytest.mark.slow  # ~11 s; make test keeps the transformer's, tests/test_task.py: make test-all
# ------------------------------------------------------------------ with fairseq-train
def test_context_size_zero_trains_exactly_like_translation(reverse_bin, tmp_path):
    """The same per-update losses through ``translation`` and ``document_translation
    --context-size 0``."""
    common = [*USER_DIR, "--arch", "rnnsearch", *RNN_TINY, "--max-tokens", "500", "--max-update", "8",
              "--log-interval", "1", "--no-save", "--required-batch-size-multiple", "1"]
    ref = losses(run(["fairseq-train", reverse_bin, "--task", "translation", *common]).stdout)
    doc = losses(run(["fairseq-train", reverse_bin, "--task", "document_translation", "--context-size", "0",
                      *common]).stdout)
    assert len(ref) == 8 and ref == doc


def _generate(data, ckpt, task_args, beam=5):
    p = run(["fairseq-generate", data, *USER_DIR, *task_args, "--path", ckpt, "--beam", str(beam),
             "--batch-size", "37", "--gen-subset", "test", "--cpu"])
    hyps = {}
    for i, h in re.findall(r"^H-(\d+)\t[^\t]*\t(.*)$", p.stdout, re.M):
        assert int(i) not in hyps, f"sentence {i} returned twice"
        hyps[int(i)] = h
    return hyps


@pytest.mark.slow  # ~11 s: make test-all
def test_rnnsearch_learns_the_reverse_task(reverse_bin, rnnsearch_reverse):
    """400 updates of a tiny rnnsearch reverse unseen sentences almost perfectly; beam 5
    through ``fairseq-generate`` returns every test sentence once, through ``translation``
    and ``document_translation`` alike (the same translations)."""
    log = rnnsearch_reverse["log"]
    train_losses = [float(x) for x in re.findall(r"\| train_inner \|.*? loss=([\d.]+),", log)]
    assert train_losses[-1] < train_losses[0] / 2
    refs = (reverse_bin.parent / "raw" / "test.tgt").read_text().splitlines()
    by_task = {}
    for name, task in (("translation", ["--task", "translation"]),
                       ("document", ["--task", "document_translation", "--context-size", "0"])):
        hyps = _generate(reverse_bin, rnnsearch_reverse["checkpoint"], task)
        assert sorted(hyps) == list(range(len(refs)))
        by_task[name] = hyps
    assert by_task["translation"] == by_task["document"]
    exact = sum(by_task["translation"][i] == r for i, r in enumerate(refs)) / len(refs)
    print(f"reverse task: {exact:.3f} of the test sentences exactly right")
    assert exact >= 0.9


def test_length_groups_give_the_same_outputs():
    """A teacher-forced batch run in length groups (each cut to its longest target and
    source) gives the outputs, attention and gradients of one padded pass."""
    model, d = build(seed=2)
    model.train()
    model.decoder.dropout_out_module.p = 0.0
    src, lengths, prev = batch(d, B=4, S=7, T=6)
    prev[2, 2:] = d.pad()
    outs, groups = [], []
    recur = model.decoder.recur
    model.decoder.recur = lambda y, *a: groups.append(y.size(0)) or recur(y, *a)
    for overhead in (1e9, 0):  # one group, then one group per length
        model.decoder.grouping = {"overhead": overhead, "step_overhead": overhead}
        model.zero_grad()
        logits, extra = model(src, lengths, prev)
        (logits * prev.ne(d.pad()).unsqueeze(-1)).sum().backward()
        outs.append((logits.detach(), extra["steps"]["attn"].detach(),
                     [p.grad.clone() for p in model.parameters()]))
    (a, attn_a, grad_a), (b, attn_b, grad_b) = outs
    assert groups == [4, 1, 1, 2]  # rows of target lengths 2 | 4 | 6, 6
    real = prev.ne(d.pad())
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn_a[real], attn_b[real], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad_a, grad_b, atol=1e-5, rtol=1e-4)
