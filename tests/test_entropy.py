"""Attention entropy over the context (``docctx-score entropy``): the entropy of a uniform
attention is log n and of a one-hot one 0; every context model's ``context_attention(sample)``
(shapes, supports, masks; concat renormalised over the context tokens, HAN's sentence-level
attention, QCN's routing coefficients, MHT's hops); the command on the context probe's trained
models (JSON, PNG, per sentence and test-set means)."""
import json
import math

import pytest
import torch

from conftest import toy_dictionary as _dict
from conftest import toy_document_batch
from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.evaluation.entropy import entropy
from fairseq_docctx.models import document_context as dc

DOCS = [1, 2, 3, 4, 5]  # the first sentence of each document has no context


def test_entropy_of_uniform_one_hot_and_renormalised_attention():
    n = torch.arange(1, 9)
    support = torch.arange(8)[None, :] < n[:, None]  # n items of 8
    uniform = support.double() / n[:, None]
    h, logn = entropy(uniform, support)
    torch.testing.assert_close(h, n.double().log())
    torch.testing.assert_close(logn, n.double().log())
    one_hot = torch.zeros(8, 8, dtype=torch.float64)
    one_hot[torch.arange(8), n - 1] = 1.0
    h, _ = entropy(one_hot, support)
    assert (h == 0).all()
    # weights outside the support are dropped and the rest renormalised: a half on 2 items
    # of the support, a half elsewhere -> uniform over the 2 -> log 2; in bits: 1
    w = torch.tensor([[0.25, 0.25, 0.5, 0.0]])
    s = torch.tensor([[True, True, False, True]])
    h, logn = entropy(w, s)
    assert h.item() == pytest.approx(math.log(2)) and logn.item() == pytest.approx(math.log(3))
    assert entropy(w, s, base=2)[0].item() == pytest.approx(1.0)
    # no support, or no weight on it: no entropy (NaN)
    h, _ = entropy(torch.tensor([[0.0, 1.0], [0.5, 0.5]]), torch.tensor([[True, False], [False, False]]))
    assert torch.isnan(h).all()


def check(dist, B, first_rows):
    w, s, m = dist["weights"], dist["support"], dist["position_mask"]
    assert w.dim() == 3 and w.size(0) == B and s.shape == w.shape and m.shape == w.shape[:2]
    assert not m[first_rows].any()  # a document's first sentence has no context
    assert m.any()
    h, logn = entropy(w, s)
    h, logn = h[m], logn[m]
    assert not torch.isnan(h).any() and (h >= -1e-9).all() and (h <= logn + 1e-9).all()
    return h, logn


def first_rows(sample):
    """The rows of a batch without any previous sentence (a document's first)."""
    from fairseq_docctx.data import context_batch as cb

    return (cb.index(sample["net_input"]["context"], "src") < 0).all(1)


def test_concat_attention_over_the_context_tokens():
    from test_concat_modules import build_concat

    d = _dict()
    model = build_concat(d)
    sample = toy_document_batch(d, DOCS, seed=1, sides="source")
    (dist,) = dc.context_attention(model, sample)
    B = sample["net_input"]["src_tokens"].size(0)
    check(dist, B, first_rows(sample))
    assert dist["positions"] == "target" and dist["items"] == "context tokens"
    # the weights are the cross-attention; their mass on the context tokens equals the mass
    # context_weights gives the context sentences (rows k >= 1)
    (panel,) = model.context_weights(sample)
    mass = (dist["weights"] * dist["support"]).sum(-1)
    m = dist["position_mask"]
    torch.testing.assert_close(mass[m], panel["weights"][:, 1:].sum(1)[m], atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", ["encoder", "decoder", "joint"])
def test_han_sentence_level_attention(config):
    from test_han import build as build_han
    from test_han import sides_of

    d = _dict()
    model = build_han(d, config)
    sample = toy_document_batch(d, DOCS, seed=1, sides=sides_of(config))
    dists = dc.context_attention(model, sample)
    panels = [p for p in model.context_weights(sample) if p["normalized"]]
    assert len(dists) == len(panels) == (2 if config == "joint" else 1)
    B = sample["net_input"]["src_tokens"].size(0)
    for dist, p in zip(dists, panels):
        check(dist, B, first_rows(sample))
        assert dist["items"] == "context sentences" and dist["positions"] == p["columns"]
        # the support is the row's context sentences: log n = log(number of them)
        present = p["row_mask"].sum(1).double()
        _, logn = entropy(dist["weights"], dist["support"])
        rows = dist["position_mask"].any(1)
        torch.testing.assert_close(logn[rows][:, 0], present[rows].log())


def test_qcn_routing_coefficients_start_uniform():
    from test_qcn import build as build_qcn

    d = _dict()
    model = build_qcn(d, routing_iters=3)
    sample = toy_document_batch(d, DOCS, seed=1, sides="source")
    dists = dc.context_attention(model, sample)
    assert len(dists) == 3 and dists[0]["positions"] == "source context"
    B = sample["net_input"]["src_tokens"].size(0)
    hs = [check(x, B, first_rows(sample)) for x in dists]
    # Algorithm 1 starts from α = 0: the first iteration's coefficients are uniform over the
    # m = 3 capsules (log 3), the later ones no more even than that
    torch.testing.assert_close(hs[0][0], torch.full_like(hs[0][0], math.log(3)))
    assert (hs[2][0] < math.log(3) - 1e-6).any()


def test_mht_hops_and_unsupported_models():
    from test_mht import _batch, _model

    model, d = _model()
    src, lengths, prev, ctx = _batch(d)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev,
                            "context": ctx}, "target": prev}
    dists = dc.context_attention(model, sample)
    titles = [x["title"].split(":")[0] for x in dists]
    assert "MHT encoder layer 1" in titles and "MHT decoder layer 2" in titles
    for x in dists:
        check(x, src.size(0), torch.tensor([True, False, False, True, False]))
        # a hop's attention is over its sentence's tokens only: it sums to 1 on the support
        m = x["position_mask"]
        torch.testing.assert_close((x["weights"] * x["support"]).sum(-1)[m], torch.ones(int(m.sum())),
                                   atol=1e-5, rtol=0)
    # other modules, and sentence-level models, have no attention to give
    concat, _ = _model(mht_context_module="concat")
    with pytest.raises(dc.ContextAttentionUnsupported, match="multi-hop"):
        dc.context_attention(concat, sample)

    class Plain(dc.DocumentContextModel):
        pass

    with pytest.raises(dc.ContextAttentionUnsupported, match="Plain does not give"):
        dc.context_attention(Plain(), sample)
    with pytest.raises(dc.ContextAttentionUnsupported, match="sentence-level"):
        dc.context_attention(torch.nn.Linear(1, 1), sample)


# ------------------------------------------------------------------------------------------
# the command on trained models


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_entropy(probe, model, tmp_path, capsys, name):
    out, png = tmp_path / f"{name}.json", tmp_path / f"{name}.png"
    rc, text, err = score_cli(["entropy", "--path", model["checkpoint"], "--data", probe["data_bin"],
                               "--max-sentences", "150", "--json", out, "--name", name, "--plot", png], capsys)
    assert rc == 0, err
    assert png.stat().st_size > 1000
    return json.loads(out.read_text())["metrics"]["attention_entropy"], text


def check_report(rep):
    sents = rep["sentences"]
    assert len(sents) == 150
    # a document's first sentence has no context, every other one has (K = 2)
    assert [not s["entropy"] for s in sents] == [s["index"] == 0 for s in sents]
    for d in rep["distributions"]:
        t = d["title"]
        flat = [v for s in sents for v in s["entropy"].get(t, [])]
        assert d["positions_measured"] == len(flat) > 0
        assert d["mean"] == pytest.approx(sum(flat) / len(flat))
        means = [s["mean"][t] for s in sents if t in s["mean"]]
        assert d["mean_of_sentences"] == pytest.approx(sum(means) / len(means))
        assert 0 <= d["mean"] <= d["mean_max"] + 1e-9


def test_entropy_command_on_trained_concat_and_qcn(probe, concat_model, qcn_model, tmp_path, capsys):
    rep, text = run_entropy(probe, concat_model, tmp_path, capsys, "concat")
    check_report(rep)
    (d,) = rep["distributions"]
    assert rep["arch"] == "concat_transformer" and d["items"] == "context tokens"
    assert "attention entropy over the context (nats)" in text and f"mean {d['mean']:.4f}" in text
    # the trained model does not spread its attention evenly over the context tokens
    assert d["mean"] < d["mean_max"]
    rep, _ = run_entropy(probe, qcn_model, tmp_path, capsys, "qcn")
    check_report(rep)
    first, last = rep["distributions"][0], rep["distributions"][-1]
    assert len(rep["distributions"]) == 3  # --routing-iters 3
    assert first["mean"] == pytest.approx(math.log(4)) and first["mean_max"] == pytest.approx(math.log(4))
    assert last["mean"] < first["mean"]


def test_entropy_command_refuses_a_sentence_level_model(probe, sentence_model, capsys):
    rc, _, err = score_cli(["entropy", "--path", sentence_model["checkpoint"], "--data", probe["data_bin"],
                            "--max-sentences", "5"], capsys)
    assert rc == 2 and "sentence-level model" in err
