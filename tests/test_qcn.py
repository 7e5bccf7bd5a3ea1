"""qcn_transformer and the label_smoothed_cross_entropy_pcc criterion."""
import argparse
import re

import numpy as np
import pytest
import torch

from conftest import REPO, TINY_MODEL, run, toy_document_batch
from conftest import toy_dictionary as _dict


def build(d, **over):
    from fairseq_docctx.models.qcn_transformer import QCNTransformerModel

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_separator="<sep>")

    args = argparse.Namespace(
        encoder_layers=2, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True,
        num_capsules=3, routing_iters=2, max_source_positions=128, max_target_positions=128,
    )
    for k, v in over.items():
        setattr(args, k, v)
    torch.manual_seed(0)
    return QCNTransformerModel.build_model(args, Task())


def batch(d, doc_lengths, seed=0):
    return toy_document_batch(d, doc_lengths, seed, sides="source")


def test_forward_backward_documents_of_1_to_5_sentences():
    d = _dict()
    model = build(d)
    model.train()
    sample = batch(d, [1, 2, 3, 4, 5])
    out, extra = model(**sample["net_input"])
    assert torch.isfinite(out).all() and torch.isfinite(extra["pcc"]).all()
    assert extra["pcc"].shape == (15,)
    lprobs = model.get_normalized_probs((out, extra), log_probs=True)
    loss = torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                                        ignore_index=d.pad()) - extra["pcc"].sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    for name in ("encoder.qcn.capsules.weight", "encoder.qcn.query_proj.weight",
                 "encoder.qcn.input_proj.weight", "encoder.layers.0.ctx_attn.k_proj.weight",
                 "regularizer.caps_enc.weight", "regularizer.caps_dec.weight"):
        g = dict(model.named_parameters())[name].grad
        assert g is not None and g.abs().sum() > 0, name


def test_first_sentence_gets_zero_capsules_and_finite_output():
    d = _dict()
    model = build(d).eval()
    sample = batch(d, [1, 1, 1])  # three one-sentence documents: no context anywhere
    enc = model.encoder
    v = enc.qcn(*enc.capsule_inputs(sample["net_input"]["src_tokens"], sample["net_input"]["context"]))
    assert v.abs().sum() == 0
    out, _ = model(**sample["net_input"])
    assert torch.isfinite(out).all()


def test_context_changes_the_encoding():
    d = _dict()
    model = build(d).eval()
    sample = batch(d, [4])
    ni = sample["net_input"]
    with_ctx = model.encoder(ni["src_tokens"], ni["src_lengths"], context=ni["context"])["encoder_out"][0]
    without = model.encoder(ni["src_tokens"], ni["src_lengths"], context=None)["encoder_out"][0]
    first = int((sample["id"] == 0).nonzero())
    others = [b for b in range(4) if b != first]
    assert torch.allclose(with_ctx[:, first], without[:, first], atol=1e-6)  # no context anyway
    assert not torch.allclose(with_ctx[:, others], without[:, others])


def test_named_architecture_builds_the_papers_sizes():
    """Yang et al. (2019), §4.1: 4+4 layers, hidden 512, FFN 2048, 8 heads, dropout 0.2 (the
    context-aware model); §4.2: m = 4 output capsules, r = 4 routing iterations, 3 previous
    sentences. With a 30K vocabulary: the Transformer of those sizes (``--no-qcn
    --no-pcc-regularizer``, the same parameters as fairseq's ``transformer``), plus ``g``
    (Eq. 5), ``f`` (Eq. 6, over ``[emb; onehot(k)]``), one ``W_j`` per output capsule
    (Algorithm 1), a context attention (Eqs. 9-10; keys and values from the capsules) with its
    normalization in every encoder layer (§3.3), and ``Caps_enc``/``Caps_dec`` (§3.4)."""
    from fairseq.models.transformer import TransformerModel

    from conftest import count_parameters, paper_size_model
    from fairseq_docctx.models.qcn_transformer import QCNTransformerModel

    model, a = paper_size_model(QCNTransformerModel, "qcn_transformer")
    assert (a.encoder_layers, a.decoder_layers, a.encoder_embed_dim, a.decoder_embed_dim) == (4, 4, 512, 512)
    assert (a.encoder_ffn_embed_dim, a.decoder_ffn_embed_dim) == (2048, 2048)
    assert (a.encoder_attention_heads, a.decoder_attention_heads, a.dropout, a.attention_dropout) == (8, 8, 0.2, 0.0)
    assert (a.num_capsules, a.routing_iters, a.capsule_dim, a.qcn_context_size) == (4, 4, 512, 3)
    assert not a.no_qcn and not a.no_pcc_regularizer
    E = D = 512
    m, K, L = 4, 3, 4
    qcn = (E * D + D) + ((E + K) * D + D) + m * D * D
    ctx_attn = L * (2 * (E * E + E) + 2 * (D * E + E) + 2 * E)
    regularizer = 2 * m * E * D
    assert count_parameters(model, lambda n: ".qcn." in n) == qcn
    assert count_parameters(model, lambda n: "ctx_attn" in n) == ctx_attn
    assert count_parameters(model, lambda n: n.startswith("regularizer.")) == regularizer
    sentence, _ = paper_size_model(TransformerModel, "transformer", encoder_layers=4, decoder_layers=4)
    base = count_parameters(sentence)
    assert base == 44_785_664
    assert count_parameters(model) == base + qcn + ctx_attn + regularizer
    plain, _ = paper_size_model(QCNTransformerModel, "qcn_transformer", no_qcn=True, no_pcc_regularizer=True)
    assert count_parameters(plain) == base


@pytest.mark.parametrize("no_qcn,no_reg", [(True, True), (True, False), (False, True), (False, False)])
def test_table2_rows_are_flags(no_qcn, no_reg):
    d = _dict()
    model = build(d, no_qcn=no_qcn, no_pcc_regularizer=no_reg)
    names = [n for n, _ in model.named_parameters()]
    assert any(".qcn." in n for n in names) == (not no_qcn)
    assert any("ctx_attn" in n for n in names) == (not no_qcn)
    assert any(n.startswith("regularizer.") for n in names) == (not no_reg)
    model.train()
    out, extra = model(**batch(d, [2, 3])["net_input"])
    assert ("pcc" in extra) == (not no_reg)


def test_criterion_pcc_term_equals_direct_computation():
    from fairseq_docctx.criterions.label_smoothed_cross_entropy_pcc import (
        LabelSmoothedCrossEntropyPCCCriterion,
    )

    d = _dict()
    model = build(d)
    model.train()
    sample = batch(d, [3, 2])

    class Task:
        target_dictionary = d

    losses = {}
    for lam in (0.0, 1.0, 2.5):
        crit = LabelSmoothedCrossEntropyPCCCriterion(Task(), False, 0.1, pcc_weight=lam)
        torch.manual_seed(0)
        losses[lam], _, log = crit(model, sample)
    # direct: Caps_enc / Caps_dec outputs, numpy's Pearson correlation, one per target token
    ni = sample["net_input"]
    src, prev = ni["src_tokens"], ni["prev_output_tokens"]
    reg = model.regularizer
    m_src = src.ne(d.pad()) & src.ne(d.eos())
    m_tgt = prev.ne(d.pad()) & prev.ne(d.eos())
    with torch.no_grad():
        v_enc = reg.caps_enc(model.encoder.embed_tokens(src), m_src).flatten(1).numpy()
        v_dec = reg.caps_dec(model.decoder.embed_tokens(prev), m_tgt).flatten(1).numpy()
    pcc = np.array([np.corrcoef(a, b)[0, 1] for a, b in zip(v_enc, v_dec)])
    ntok = sample["target"].ne(d.pad()).sum(1).numpy()
    direct = float((pcc * ntok).sum())
    assert float(log["pcc"]) == pytest.approx(direct, rel=1e-4)
    assert float(losses[0.0] - losses[1.0]) == pytest.approx(direct, rel=1e-4)
    assert float(losses[0.0] - losses[2.5]) == pytest.approx(2.5 * direct, rel=1e-4)


@pytest.fixture(scope="module")
def qcn_ckpt(toy_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("qcn")
    p = run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "3", "--arch", "qcn_transformer",
             *TINY_MODEL, "--num-capsules", "2", "--routing-iters", "2",
             "--criterion", "label_smoothed_cross_entropy_pcc", "--label-smoothing", "0.1",
             "--max-tokens", "600", "--max-epoch", "3", "--no-epoch-checkpoints",
             "--log-interval", "1", "--save-dir", save])
    log = p.stdout + p.stderr
    assert re.search(r"\| valid \|.*\| pcc -?[\d.]+", log), "pcc is not logged in validation"
    assert re.search(r"train_inner .*pcc=-?[\d.]+", log), "pcc is not logged in training"
    return save / "checkpoint_last.pt"


def test_generate_beam_search_in_document_order(qcn_ckpt, toy_bin):
    p = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "3", "--path", qcn_ckpt,
             "--beam", "4", "--max-tokens", "200", "--max-len-b", "10"])
    n = sum(int(l.split("\t")[1]) for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines())
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", p.stdout, re.M))
    assert ids == list(range(n))


def test_analyze_writes_routing_heatmaps(qcn_ckpt, toy_bin, tmp_path):
    import json

    docs = [l.split("\t") for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines()]
    doc_id, n = next((d, int(n)) for d, n in docs if int(n) >= 3)
    out = run(["docctx-analyze", "qcn", "--path", qcn_ckpt, "--data", toy_bin, "--doc", doc_id,
               "--sentence", "2", "--outdir", tmp_path])
    # fairseq's import sets the root logger to DEBUG: no library's debug lines (matplotlib's)
    assert "DEBUG" not in out.stderr + out.stdout, (out.stderr + out.stdout)[-2000:]
    for f in ("qcn_coupling.png", "qcn_pcc.png"):
        assert (tmp_path / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = json.loads((tmp_path / "qcn_routing.json").read_text())
    c, p = np.array(r["coupling"]), np.array(r["pcc"])
    assert c.shape == p.shape == (2, len(r["context_words"]), 2)  # iterations x words x capsules
    assert {w.split(":")[0] for w in r["context_words"]} == {"-1", "-2"}  # two previous sentences
    np.testing.assert_allclose(c.sum(-1), 1.0, rtol=1e-5)  # softmax over output capsules
    assert (np.abs(p) <= 1).all()


@pytest.mark.slow  # ~10 s: make test-all
def test_plot_shows_the_coupling_coefficients(qcn_ckpt, toy_bin, tmp_path):
    """``docctx-score plot`` draws the model's context_weights: the coupling coefficients of
    every context word at each routing iteration, the values docctx-analyze writes."""
    import json

    docs = [l.split("\t") for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines()]
    doc_id = next(d for d, n in docs if int(n) >= 3)
    args = ["--path", qcn_ckpt, "--data", toy_bin, "--doc", doc_id, "--sentence", "2"]
    run(["docctx-analyze", "qcn", *args, "--outdir", tmp_path])
    p = run(["docctx-score", "plot", *args, "--outdir", tmp_path])
    assert "context_qcn_transformer.png" in p.stdout
    assert (tmp_path / "context_qcn_transformer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = json.loads((tmp_path / "qcn_routing.json").read_text())
    v = json.loads((tmp_path / "context_qcn_transformer.json").read_text())
    assert v["arch"] == "qcn_transformer" and len(v["panels"]) == 2  # routing iterations
    assert [row.split(":")[0] for row in v["rows"]] == ["-2", "-1"]
    for t, panel in enumerate(v["panels"]):
        assert panel["row_labels"] == ["v1", "v2"] and panel["columns"] == r["context_words"]
        np.testing.assert_allclose(np.array(panel["values"]).T, np.array(r["coupling"][t]), atol=1e-6)


def test_table_path_equals_the_plain_transcription():
    """The fast path (table words embedded/predicted once, context packed per row) gives
    the capsules and routing history of the direct per-row computation with
    ``u_i = f([emb; onehot(k)])`` and query_guided_routing over all K*L positions."""
    from fairseq_docctx.modules.capsule import query_guided_routing

    d = _dict()
    model = build(d, routing_iters=3).eval()
    sample = batch(d, [1, 2, 4, 3], seed=3)
    enc, ni = model.encoder, sample["net_input"]
    qcn = enc.qcn
    cur, cur_mask, ctx, ctx_mask, _, _ = enc.capsule_inputs(ni["src_tokens"], ni["context"])
    B, K, L, E = ctx.shape
    onehot = torch.eye(qcn.context_size)[:K].view(1, K, 1, -1).expand(B, K, L, -1)
    u = qcn.input_proj(torch.cat([ctx, onehot], -1)).view(B, K * L, -1)
    q = qcn.query_proj((cur * cur_mask.unsqueeze(-1)).sum(1))
    ref_v, ref_c, ref_p = query_guided_routing(u, qcn.capsules.predictions(u), q, ctx_mask.view(B, K * L),
                                               iters=3, return_history=True)
    v, c, p = qcn(cur, cur_mask, ctx, ctx_mask, return_history=True)
    torch.testing.assert_close(v, ref_v, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c, ref_c, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p, ref_p, atol=1e-5, rtol=1e-5)
    table_v = qcn(*enc.capsule_inputs(ni["src_tokens"], ni["context"], gathered=False))
    torch.testing.assert_close(table_v, ref_v, atol=1e-5, rtol=1e-5)
    assert ref_v.abs().sum() > 0 and (ctx_mask.view(B, -1).sum(1) == 0).any()  # not vacuous


@pytest.mark.parametrize("embed_dim,heads,keys", [(16, 2, 3), (64, 8, 4), (32, 4, 8)])
def test_few_keys_attention_equals_multihead_attention(embed_dim, heads, keys):
    """The context attention over the capsules (no query/output projections) gives fairseq's
    MultiheadAttention results and gradients with the same weights; with S·H >= E, weights
    asked for or a padding mask it is fairseq's own code."""
    from fairseq.modules import MultiheadAttention

    from fairseq_docctx.modules.few_keys_attention import FewKeysAttention

    torch.manual_seed(0)
    ref = MultiheadAttention(embed_dim, heads, kdim=embed_dim, vdim=embed_dim,
                             encoder_decoder_attention=True).double()
    new = FewKeysAttention(embed_dim, heads, kdim=embed_dim, vdim=embed_dim,
                           encoder_decoder_attention=True).double()
    new.load_state_dict(ref.state_dict())
    x = torch.randn(7, 5, embed_dim, dtype=torch.float64, requires_grad=True)
    caps = torch.randn(keys, 5, embed_dim, dtype=torch.float64, requires_grad=True)
    outs = []
    for mha in (ref, new):
        y = mha(query=x, key=caps, value=caps, need_weights=False, static_kv=True)[0]
        grads = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum(),
                                    [x, caps] + list(mha.parameters()))
        outs.append((y, grads))
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-12)
    for a, b in zip(outs[0][1], outs[1][1]):
        assert torch.allclose(a, b, atol=1e-11)
    # weights asked for / a padding mask: fairseq's path, same weights returned
    mask = torch.zeros(5, keys, dtype=torch.bool)
    mask[0, -1] = True
    for kw in ({"need_weights": True}, {"need_weights": False, "key_padding_mask": mask}):
        a = ref(query=x, key=caps, value=caps, static_kv=True, **kw)
        b = new(query=x, key=caps, value=caps, static_kv=True, **kw)
        assert torch.allclose(a[0], b[0], atol=1e-12)
        assert (a[1] is None) == (b[1] is None)
