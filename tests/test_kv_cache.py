"""The preallocated key/value buffers of the segment models' decoder self-attention
(``fairseq_docctx/modules/kv_cache.py``) against fairseq's ``torch.cat`` cache: one attention
step by step under every kind of beam reordering (identity, a few rows, most rows, rows
leaving, padded keys, buffers growing), the decoders' steps against teacher forcing under
fairseq's reorderings, and fairseq's SequenceGenerator (beam 1 and 4, segments of 1..20
sentences in one batch, sentence count and length windows on) giving the same hypotheses and
scores with either cache, for ``doc2doc_transformer`` and ``g_transformer``; no new weights."""
import argparse

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.transformer import TransformerModel
from fairseq.modules import MultiheadAttention

from conftest import assert_incremental_equals_full, beam_search, tilted_toward_ending, toy_dictionary
from test_g_transformer import (TINY, Doc2DocTransformerModel, Task, _issue_segments, _NoContext, build, collate,
                                g_model, segment)

from fairseq_docctx.modules import kv_cache
from fairseq_docctx.modules.kv_cache import PreallocatedKVAttention


@pytest.fixture
def small_buffers(monkeypatch):
    """Buffers of 4 positions at first, so that every decode below grows them."""
    monkeypatch.setattr(kv_cache, "INITIAL_CAPACITY", 4)


def _orders(B, g):
    """The reorderings of the attention test: identity, one row split, rows drawn at random
    (splits), a permutation, the identity again (rows still out of their buffer rows), a
    shrink."""
    return [torch.arange(B), torch.tensor([0, 0] + list(range(2, B))), torch.randint(0, B, (B,), generator=g),
            torch.arange(B).flip(0), torch.arange(B), torch.tensor([1, 3, 4, 5])]


def test_one_attention_equals_fairseqs_under_every_reordering(small_buffers):
    """Step by step, with reorderings of every kind and a padded key at one step, the
    buffered attention's outputs and weights equal fairseq's ``MultiheadAttention`` with the
    same weights; a permutation of the rows (the identity too) leaves the buffers as they are
    (same memory, no copy);
    outside incremental decoding it is fairseq's attention."""
    torch.manual_seed(0)
    E, H, B = 8, 2, 6
    ours = PreallocatedKVAttention(E, H, self_attention=True).eval()
    theirs = MultiheadAttention(E, H, self_attention=True).eval()
    theirs.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == set(theirs.state_dict())
    g = torch.Generator().manual_seed(1)
    s_ours, s_theirs = {}, {}
    rows, orders = B, _orders(B, g)
    with torch.no_grad():
        for t in range(12):  # 4 -> 8 -> 16 positions
            if 1 <= t <= len(orders):
                order = orders[t - 1]
                before, filled = ours.kv_buffers(s_ours)["key"], ours.kv_buffers(s_ours)["length"]
                snapshot = before[:, :, :filled].clone()  # past the filled part: uninitialised memory
                ours.reorder_incremental_state(s_ours, order)
                theirs.reorder_incremental_state(s_theirs, order)
                rows = order.numel()
                if rows == before.size(0) and torch.equal(order.sort().values, torch.arange(B)):
                    # a permutation (the identity too) copies nothing: the buffers stay as they are
                    assert ours.kv_buffers(s_ours)["key"] is before and torch.equal(before[:, :, :filled], snapshot)
            x = torch.randn(1, rows, E, generator=g)
            pad = torch.zeros(rows, 1, dtype=torch.bool)
            if t == 2:
                pad[1] = True
            kpm = pad if t == 2 else None
            a, wa = ours(x, x, x, key_padding_mask=kpm, incremental_state=s_ours, need_weights=True)
            b, wb = theirs(x, x, x, key_padding_mask=kpm, incremental_state=s_theirs, need_weights=True)
            assert torch.allclose(a, b, atol=1e-6) and torch.allclose(wa, wb, atol=1e-6), t
        assert ours.kv_buffers(s_ours)["length"] == 12 and ours.kv_buffers(s_ours)["key"].size(2) == 16
        assert ours.get_incremental_state(s_ours, "attn_state") is None  # fairseq's cache unused
        x = torch.randn(5, 3, E)
        mask = torch.triu(torch.full((5, 5), float("-inf")), 1)
        assert torch.equal(ours(x, x, x, attn_mask=mask)[0], theirs(x, x, x, attn_mask=mask)[0])


def test_encoder_attention_shares_keys_among_row_copies():
    """An encoder-decoder attention given the encoder row of each row (``encoder_rows``: 3
    consecutive copies of each) keeps its keys and values once per group, and step by step (rows
    reordered within their groups, a padded source position, a group leaving) gives
    fairseq's ``MultiheadAttention``'s outputs and weights (in bfloat16 the same bits); an
    order that moves a row to another group is refused."""
    torch.manual_seed(0)
    E, H, S, g = 8, 2, 5, 3
    ours = PreallocatedKVAttention(E, H, encoder_decoder_attention=True).eval()
    theirs = MultiheadAttention(E, H, encoder_decoder_attention=True).eval()
    theirs.load_state_dict(ours.state_dict())
    src = torch.randn(S, 2, E).repeat_interleave(g, dim=1)  # 2 encoder rows, 3 copies each
    pad = torch.zeros(2 * g, S, dtype=torch.bool)
    pad[g:, -1] = True  # the second source is one position shorter
    s_ours, s_theirs = {}, {}
    key, kpm = src, pad
    rows = torch.arange(2).repeat_interleave(g)
    with torch.no_grad(), kv_cache.giving_encoder_rows([ours], rows):
        for t, order in enumerate([None, torch.tensor([2, 0, 0, 5, 4, 3]), torch.tensor([3, 3, 4])]):
            if order is not None:
                ours.reorder_incremental_state(s_ours, order)
                theirs.reorder_incremental_state(s_theirs, order)
                key, kpm = key.index_select(1, order), kpm.index_select(0, order)
            x = torch.randn(1, key.size(1), E)
            a, wa = ours(x, key, key, key_padding_mask=kpm, incremental_state=s_ours, static_kv=True)
            b, wb = theirs(x, key, key, key_padding_mask=kpm, incremental_state=s_theirs, static_kv=True)
            assert torch.allclose(a, b, atol=1e-6) and torch.allclose(wa, wb, atol=1e-6), t
            kept = ours._get_input_buffer(s_ours)["prev_key"]  # fairseq's state, once per group
            assert ours.row_copies(s_ours) == g and kept.size(0) == (2 if t < 2 else 1)
        with pytest.raises(RuntimeError, match="between groups"):
            ours.reorder_incremental_state(s_ours, torch.tensor([0, 1, 3]))
    # in half precision the first rows' projection equals fairseq's projection of every row
    # (tests/test_half_precision.py compares translations, which a rounding apart changes)
    ours, theirs = ours.to(torch.bfloat16), theirs.to(torch.bfloat16)
    x = torch.randn(1, 2 * g, E).to(torch.bfloat16)
    src = src.to(torch.bfloat16)
    with torch.no_grad(), kv_cache.giving_encoder_rows([ours], rows):
        a, _ = ours(x, src, src, key_padding_mask=pad, incremental_state={}, static_kv=True)
    b, _ = theirs(x, src, src, key_padding_mask=pad, incremental_state={}, static_kv=True)
    assert torch.equal(a, b)


def test_segment_encoder_output_is_not_copied_among_beams():
    """The segment encoder's output keeps its rows' encoder row numbers: beam search's first
    order copies the rows, an order among copies returns the output as it is (no copy), an
    order across rows reorders every per-row tensor."""
    d = toy_dictionary()
    model = build(Doc2DocTransformerModel, "doc2doc_transformer", d)
    src, lengths, _, _ = collate(d, [segment(d, [[1, 2], [3]]), segment(d, [[4, 5, 6]])],
                                 [segment(d, [[7], [8]]), segment(d, [[9]])])
    with torch.no_grad():
        out = model.encoder(src, lengths)
        copied = model.encoder.reorder_encoder_out(out, torch.tensor([0, 0, 1, 1]))
        assert copied["src_rows"][0].tolist() == [0, 0, 1, 1]
        assert model.encoder.reorder_encoder_out(copied, torch.tensor([1, 0, 3, 3])) is copied
        moved = model.encoder.reorder_encoder_out(copied, torch.tensor([2, 2]))
        assert moved["src_rows"][0].tolist() == [1, 1] and moved["src_sentences"][0].tolist() == [1, 1]
        assert torch.equal(moved["encoder_out"][0], out["encoder_out"][0][:, [1, 1]])


def _models(d):
    return {"g_transformer": g_model(d, 1), "doc2doc_transformer": build(Doc2DocTransformerModel, "doc2doc_transformer", d)}


@pytest.mark.parametrize("name", ["g_transformer", "doc2doc_transformer"])
def test_decoder_steps_equal_teacher_forcing_with_growing_buffers(name, small_buffers):
    """conftest's check (beam 2, rows redrawn among their beams, a sentence leaving at step 3)
    with buffers of 4 positions at first: every step's logits equal the full forward's, and
    every decoder self-attention used its buffers (none fairseq's cache)."""
    d = toy_dictionary()
    model = _models(d)[name].set_sentence_count_constraint(False)
    assert model.preallocated_kv_cache
    sources = [segment(d, [[1, 2], [3, 4, 5], [6]]), segment(d, [[7], [8, 9]])]
    targets = [segment(d, [[10, 11, 12], [13], [14, 15]]), segment(d, [[16, 17, 18, 19], [20, 21, 22]])]
    src, lengths, prev, _ = collate(d, sources + sources, targets + targets)
    used = []
    step = PreallocatedKVAttention._buffered_step

    def spy(self, *a, **kw):
        used.append(self)
        return step(self, *a, **kw)

    PreallocatedKVAttention._buffered_step = spy
    try:
        assert_incremental_equals_full(_NoContext(model), src, lengths, prev, label=name)
    finally:
        PreallocatedKVAttention._buffered_step = step
    attns = [m for m in model.decoder.modules() if isinstance(m, PreallocatedKVAttention) and m.self_attention]
    assert attns and set(map(id, used)) == set(map(id, attns))
    assert len(attns) == (3 if name == "g_transformer" else 2)  # g: 2 group, the top layer's global


def _search(model, d, sources, beam):
    return beam_search(model, d, sources, beam)


@pytest.mark.parametrize("name", ["g_transformer", "doc2doc_transformer"])
def test_beam_search_gives_the_same_hypotheses_with_either_cache(name, small_buffers):
    """fairseq's SequenceGenerator, beam 1 and 4, 20 segments of 1..20 sentences in one batch
    (finishing at different steps), sentence count and length windows on, the model biased
    towards ending (it then runs into both rules): every hypothesis of every beam has the
    same tokens and, within 1e-5, the same score and positional scores with the preallocated
    buffers and shared encoder keys (at beam 4) as with fairseq's cache."""
    d = toy_dictionary()
    model = tilted_toward_ending(_models(d)[name], d)
    assert model.keeps_sentence_count and model.sentence_length_window is not None
    sources = _issue_segments(d)
    steps, shared = [], []
    step, firsts = PreallocatedKVAttention._buffered_step, PreallocatedKVAttention._groups_first_rows

    def spy(self, *a, **kw):
        steps.append(1)
        return step(self, *a, **kw)

    def firsts_spy(self, key, *a, **kw):
        out = firsts(self, key, *a, **kw)
        if key is not None and out[0].size(1) < key.size(1):  # keys kept once per group of beams
            shared.append(1)
        return out

    PreallocatedKVAttention._buffered_step = spy
    PreallocatedKVAttention._groups_first_rows = firsts_spy
    try:
        for beam in (1, 4):
            new = _search(model.set_preallocated_kv_cache(True), d, sources, beam)
            buffered, sharing = len(steps), len(shared)
            old = _search(model.set_preallocated_kv_cache(False), d, sources, beam)
            assert buffered > 0 and len(steps) == buffered  # fairseq's cache: no buffered step
            assert (sharing > 0) == (beam > 1) and len(shared) == sharing  # keys shared among beams only
            steps.clear()
            shared.clear()
            _compare(new, old, name, beam)
    finally:
        PreallocatedKVAttention._buffered_step, PreallocatedKVAttention._groups_first_rows = step, firsts
        model.set_preallocated_kv_cache(True)


def test_search_attention_on_request_same_translations():
    """A segment model's search returns no attention by default (the hypotheses' ``attention``
    is empty) and the last layer's ``[S, T]`` (S the batch's source width) with
    ``set_search_attention``; the hypotheses
    and scores are the same either way (beam 4, keys shared among the beams)."""
    d = toy_dictionary()
    model = tilted_toward_ending(_models(d)["doc2doc_transformer"], d)
    sources = _issue_segments(d)
    off = _search(model, d, sources, 4)
    on = _search(model.set_search_attention(True), d, sources, 4)
    model.set_search_attention(False)
    assert all(h["attention"].numel() == 0 for hs in off for h in hs)
    width = max(src.numel() for src in sources)  # the batch's source width
    for hs in on:
        for h in hs:
            assert h["attention"].shape == (width, h["tokens"].numel())
            assert torch.allclose(h["attention"].sum(0), torch.ones(h["tokens"].numel()), atol=1e-5)
    _compare(off, on, "doc2doc_transformer", 4)


def _compare(new, old, name, beam):
    assert max(h[0]["tokens"].numel() for h in new) > 16  # past the buffers' first two sizes
    for a, b in zip(new, old):
        assert len(a) == len(b) == beam
        for x, y in zip(a, b):
            assert torch.equal(x["tokens"], y["tokens"]), (name, beam)
            assert abs(float(x["score"]) - float(y["score"])) <= 1e-5
            assert torch.allclose(x["positional_scores"], y["positional_scores"], atol=1e-5)


def test_no_new_weights_old_state_dicts_load():
    """The buffers add no weight: a ``doc2doc_transformer`` and fairseq's ``transformer`` of
    the same arguments load each other's state dicts strictly (a checkpoint of the decoder
    before the buffers has fairseq's layers), and the teacher-forced outputs agree."""
    d = toy_dictionary()
    model = build(Doc2DocTransformerModel, "doc2doc_transformer", d)
    args = argparse.Namespace(arch="transformer", **TINY)
    ARCH_CONFIG_REGISTRY["transformer"](args)
    plain = TransformerModel.build_model(args, Task(d)).eval()
    plain.load_state_dict(model.state_dict(), strict=True)
    model.load_state_dict(plain.state_dict(), strict=True)
    src, lengths, prev, _ = collate(d, [segment(d, [[1, 2], [3]])], [segment(d, [[4], [5, 6]])])
    with torch.no_grad():
        assert torch.equal(model(src, lengths, prev)[0], plain(src, lengths, prev)[0])


def test_no_cache_cat_and_less_copying_counted_by_the_benchmark():
    """benchmarks/bench_kv_cache.py's count (its ``CopyCounter`` at PyTorch's dispatcher) on a
    random 2+2 x 32 ``doc2doc_transformer``, beam 4, segments of 60-110 target tokens: with
    fairseq's cache the decoder self-attentions ``cat`` at every step and ``index_select``
    at every reordering; with the buffers they ``cat`` never, and copy less than half of
    the bytes; the hypotheses are the same; the other copies of the search are the same."""
    from benchmarks import bench_kv_cache as bench

    d = bench.dictionary(50)
    size = dict(TINY, decoder_layers=2, encoder_layers=2, encoder_embed_dim=32, decoder_embed_dim=32)
    model = bench.build_model("doc2doc_transformer", d, size=size)
    sample = bench.segments(d, [3, 5], 6)
    counts, hyps = {}, {}
    for on in (False, True):
        with bench.attributed(bench.CopyCounter()) as counts[on]:
            hyps[on] = bench.search(model.set_preallocated_kv_cache(on), d, sample, 4)
    old, new = counts[False], counts[True]
    assert min(h[0]["tokens"].numel() for h in hyps[True]) > 40
    assert [h[0]["tokens"].tolist() for h in hyps[True]] == [h[0]["tokens"].tolist() for h in hyps[False]]
    assert old.calls["cat", "cache"] > 0 and old.calls["index_select", "cache"] > 0
    assert new.calls["cat", "cache"] == 0

    def cache_bytes(c):
        return sum(v for (_, where), v in c.bytes.items() if where == "cache")

    assert cache_bytes(new) < cache_bytes(old) / 2, (cache_bytes(new), cache_bytes(old))
    assert {k: v for k, v in old.bytes.items() if k[1] == "other"} == {k: v for k, v in new.bytes.items() if k[1] == "other"}
