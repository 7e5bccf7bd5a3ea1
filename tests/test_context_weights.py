"""``context_weights(sample)`` of every context model: the panels evaluation/plots.py draws
(shapes, masks, distributions) on whole batches of documents; each row's weights are those of
the row alone. The plots of trained models: tests/test_score_contrastive.py (concat, HAN),
tests/test_qcn.py (QCN)."""
import pytest
import torch

from conftest import toy_dictionary as _dict
from conftest import toy_document_batch
from test_concat_modules import build_concat
from test_han import CONFIGS, _drop_rows, sides_of
from test_han import build as build_han
from test_qcn import build as build_qcn

DOCS = [1, 2, 3, 4, 5]  # the first sentence of each document has no context


def check_panel(p, sample):
    """Shapes and masks against the batch; distributions where ``normalized``."""
    ni = sample["net_input"]
    B = ni["src_tokens"].size(0)
    w, rm, cm = p["weights"], p["row_mask"], p["column_mask"]
    assert w.dim() == 3 and w.size(0) == B and w.size(1) == len(p["rows"])
    assert rm.shape == w.shape[:2] and cm.shape == (B, w.size(2)) and rm.dtype == cm.dtype == torch.bool
    width = {"source": ni["src_tokens"].size(1), "target": sample["target"].size(1)}.get(p["columns"])
    if width is not None:
        assert w.size(2) == width
    assert (w[~cm.unsqueeze(1).expand_as(w)] == 0).all()  # nothing at padding
    assert (w[~rm.unsqueeze(2).expand_as(w)] == 0).all()  # nothing on absent rows
    assert ((w >= 0) & (w <= 1 + 1e-6)).all()  # sums of probabilities: 1 up to float32 rounding
    if p["normalized"]:
        live = rm.any(1, keepdim=True) & cm  # [B, C]
        torch.testing.assert_close(w.sum(1)[live], torch.ones(int(live.sum())), atol=1e-5, rtol=0)


def same_row_alone(model, sample, panels, rows=(0, 4, 9, 14)):
    """The weights of batch row ``b`` are those of a batch of that row alone (same context)."""
    for b in rows:
        alone = model.context_weights(_drop_rows(sample, torch.tensor([b])))
        for p, q in zip(panels, alone):
            cb, cq = p["column_mask"][b], q["column_mask"][0]
            assert cb.sum() == cq.sum() and p["row_mask"][b].tolist() == q["row_mask"][0].tolist()
            torch.testing.assert_close(p["weights"][b][:, cb], q["weights"][0][:, cq], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_han_context_weights(config):
    d = _dict()
    model = build_han(d, config)
    model.train()  # context_weights is measured in eval mode and restores the mode
    sample = toy_document_batch(d, DOCS, seed=1, sides=sides_of(config))
    panels = model.context_weights(sample)
    assert model.training
    enc, dec = CONFIGS[config]
    parts = (["encoder"] if enc else []) + (["decoder"] if dec != "none" else [])
    assert [p["title"].split(":")[0] for p in panels] == [f"{x} HAN" for x in parts for _ in (0, 1)]
    ctx = sample["net_input"]["context"]
    for att, gate in zip(panels[0::2], panels[1::2]):
        check_panel(att, sample)
        check_panel(gate, sample)
        assert att["rows"] == [1, 2, 3] and gate["rows"] == ["λ"]
        assert att["normalized"] and not gate["normalized"]
        side = "tgt" if att["columns"] == "target" and dec in ("target", "alignment") else "src"
        assert att["context_side"] == {"src": "source", "tgt": "target"}[side]
        present = ctx[f"{side}_index"][:, :3] >= 0
        assert att["row_mask"].tolist() == present.tolist()
        assert gate["row_mask"][:, 0].tolist() == present.any(1).tolist()
        g = gate["weights"][:, 0][gate["row_mask"][:, 0:1] & gate["column_mask"]]
        assert g.numel() and ((g > 0) & (g < 1)).all()
    # joint: the target context states are teacher-forced on the encoder output, which has
    # HAN applied for the sentences that are current rows of the batch only, so the decoder
    # HAN's weights of a row depend on which of its context sentences are in the batch
    same_row_alone(model, sample, panels[:2] if config == "joint" else panels)


def test_concat_context_weights():
    torch.manual_seed(0)  # the same random model whatever ran before
    d = _dict()
    model = build_concat(d)
    sample = toy_document_batch(d, DOCS, seed=1, sides="source")
    (p,) = model.context_weights(sample)
    check_panel(p, sample)
    assert p["rows"] == [0, 1, 2, 3] and p["columns"] == "target" and p["normalized"]
    present = sample["net_input"]["context"]["src_index"] >= 0
    assert p["row_mask"][:, 0].all() and p["row_mask"][:, 1:].tolist() == present.tolist()
    # the mass is the attention of the forward pass, summed per sentence
    with torch.no_grad():
        attn = model.eval()(**sample["net_input"])[1]["attn"][0]
    torch.testing.assert_close(p["weights"].sum(1), attn.sum(2) * p["column_mask"], atol=1e-5, rtol=0)
    same_row_alone(model, sample, [p])


def test_qcn_context_weights():
    d = _dict()
    model = build_qcn(d, routing_iters=3)
    sample = toy_document_batch(d, DOCS, seed=1, sides="source")
    panels = model.context_weights(sample)
    assert len(panels) == 3  # one per routing iteration
    ni = sample["net_input"]
    ctx = ni["context"]
    K, L = 3, ctx["src_tokens"].size(1)
    for p in panels:
        check_panel(p, sample)
        assert p["rows"] == ["v1", "v2", "v3"] and p["columns"] == "source context" and p["normalized"]
        assert p["weights"].shape == (ni["src_tokens"].size(0), 3, K * L)
    # the columns are the words of the present context sentences (no EOS, no padding)
    table = ctx["src_tokens"]
    words = table.ne(d.pad()) & table.ne(d.eos())
    for b in range(ni["src_tokens"].size(0)):
        expect = torch.cat([words[r] if r >= 0 else torch.zeros(L, dtype=torch.bool)
                            for r in ctx["src_index"][b, :K].tolist()])
        assert panels[0]["column_mask"][b].tolist() == expect.tolist()
    assert not panels[0]["column_mask"][0].any()  # a first sentence: no context word
    same_row_alone(model, sample, panels)


def test_mht_context_weights():
    """mht_transformer: the context gate α of every encoder and decoder layer (one column per
    source / target token), masked on rows without context; each row's as alone."""
    from test_mht import _batch, _model

    model, d = _model()
    src, lengths, prev, ctx = _batch(d)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev,
                            "context": ctx}, "target": prev}
    model.train()
    panels = model.context_weights(sample)
    assert model.training
    assert [p["title"].split(":")[0] for p in panels] == [
        "MHT encoder layer 1", "MHT encoder layer 2", "MHT decoder layer 1", "MHT decoder layer 2"]
    first = torch.tensor([True, False, False, True, False])  # first sentences of documents
    for p in panels:
        check_panel(p, sample)
        assert p["row_mask"][:, 0].tolist() == (~first).tolist()
        w = p["weights"][:, 0]
        assert (w[~first][p["column_mask"][~first]] > 0).all()
