"""``g_transformer`` (Bao et al. 2021) and ``doc2doc_transformer`` (Sun et al. 2022) on hand-built
segment batches (``s_1 <sep> ... <sep> s_n </s>``) with a tiny dictionary: group tags, group
attention against a hand-masked attention, locality of the group layers (gradients), the
combined layers' gate, incremental decoding against the full forward, the sentence-count
constraint and the sentence length windows under fairseq's SequenceGenerator (against a
reference written row by row), word masking, and the initialisation from a sentence-level
``transformer``."""
import argparse

import pytest
import torch
from fairseq.data import data_utils
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.transformer import TransformerModel
from fairseq.modules import MultiheadAttention

from conftest import assert_incremental_equals_full, beam_search, tilted_toward_ending, toy_dictionary

import fairseq_docctx.models  # noqa: F401  (registers the architectures)
from fairseq_docctx.data import segments as seg
from fairseq_docctx.data.segments import LengthWindow
from fairseq_docctx.models import document_context as dc
from fairseq_docctx.models.g_transformer import EOS_FORBIDDEN, Doc2DocTransformerModel, GTransformerModel
from fairseq_docctx.modules.group_attention import (
    GroupAttention,
    group_blocked,
    group_masks,
    sentence_counts,
    source_groups,
    target_groups,
)

TINY = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=2, encoder_layers=2,
            decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_attention_heads=2, decoder_layers=2,
            dropout=0.0)


class Task:
    def __init__(self, d, sep="<sep>"):
        self.source_dictionary = self.target_dictionary = d
        self.cfg = argparse.Namespace(context_separator=sep)


def build(cls, arch, d, seed=0, **over):
    args = argparse.Namespace(arch=arch, **{**TINY, **over})
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return cls.build_model(args, Task(d)).eval()


def g_model(d, ctx, **over):
    return build(GTransformerModel, "g_transformer", d, encoder_ctxlayers=ctx, decoder_ctxlayers=ctx,
                 cross_ctxlayers=ctx, **over)


def words(d, ids):
    return [d.index(f"w{i}") for i in ids]


def segment(d, sentences):
    """``s_1 <sep> ... <sep> s_n </s>`` of lists of word numbers."""
    sep, out = d.index("<sep>"), []
    for i, s in enumerate(sentences):
        out += words(d, s) + ([sep] if i < len(sentences) - 1 else [d.eos()])
    return torch.LongTensor(out)


def collate(d, sources, targets):
    """fairseq's layout: left-padded source, right-padded targets, prev = </s> + target[:-1]."""
    src = data_utils.collate_tokens(sources, d.pad(), d.eos(), left_pad=True)
    tgt = data_utils.collate_tokens(targets, d.pad(), d.eos(), left_pad=False)
    prev = data_utils.collate_tokens(targets, d.pad(), d.eos(), left_pad=False, move_eos_to_beginning=True)
    lengths = torch.LongTensor([len(s) for s in sources])
    return src, lengths, prev, tgt


def toy_batch(d):
    """Two rows: 3 and 2 sentences."""
    sources = [segment(d, [[1, 2], [3, 4, 5], [6]]), segment(d, [[7], [8, 9]])]
    targets = [segment(d, [[10, 11, 12], [13], [14, 15]]), segment(d, [[16, 17], [18]])]
    return collate(d, sources, targets)


def test_group_tags_follow_the_segment_format():
    d = toy_dictionary()
    src, lengths, prev, _ = toy_batch(d)
    # row 1, left-padded: 4 pads | w7 <sep> | w8 w9 </s>
    assert source_groups(src, d.index("<sep>"), d.pad())[1].tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    assert source_groups(src, d.index("<sep>"), d.pad())[0].tolist() == [1, 1, 1, 2, 2, 2, 2, 3, 3]
    # prev row 0: </s> w10 w11 w12 <sep> w13 <sep> w14 w15: a separator starts the next group
    assert target_groups(prev, d.index("<sep>"), d.pad())[0].tolist() == [1, 1, 1, 1, 2, 2, 3, 3, 3]
    assert target_groups(prev, d.index("<sep>"), d.pad())[1].tolist() == [1, 1, 1, 2, 2, 0, 0, 0, 0]
    assert sentence_counts(src, d.index("<sep>")).tolist() == [3, 2]


def _hand_mask(q_groups, k_groups, heads):
    """The additive mask of group attention written out entry by entry: ``[B * heads, T, S]``."""
    B, T = q_groups.shape
    S = k_groups.size(1)
    m = torch.zeros(B, T, S)
    for b in range(B):
        for t in range(T):
            for s in range(S):
                if q_groups[b, t] != 0 and q_groups[b, t] != k_groups[b, s]:
                    m[b, t, s] = float("-inf")
    return m.repeat_interleave(heads, 0)


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_group_attention_equals_a_hand_masked_attention(kind):
    """Self-attention (PyTorch's path) and encoder-decoder attention (fairseq's own path,
    static keys) under the group mask equal fairseq's plain attention given the mask written
    out by hand; the combined attention is the gate's mix of it and a global attention."""
    torch.manual_seed(0)
    E, H, B, T, S = 8, 2, 2, 5, 6
    opts = dict(self_attention=True) if kind == "self" else dict(encoder_decoder_attention=True)
    group = GroupAttention(E, H, kind=kind, combined=True, **opts).eval()
    plain = MultiheadAttention(E, H, encoder_decoder_attention=True).eval()  # the reference: 3-D masks
    x = torch.randn(T, B, E)
    mem = x if kind == "self" else torch.randn(S, B, E)
    qg = torch.tensor([[1, 1, 2, 2, 3], [1, 2, 2, 0, 0]])
    kg = qg if kind == "self" else torch.tensor([[1, 2, 2, 3, 3, 3], [0, 1, 1, 2, 2, 2]])
    kpm = kg.eq(0)
    with torch.no_grad():
        with group_masks(group, {kind: group_blocked(qg, kg)}):
            out, _ = group(x, mem, mem, key_padding_mask=kpm, static_kv=kind == "cross", need_weights=False)
        plain.load_state_dict({k: v for k, v in group.state_dict().items() if not k.startswith(("global_attn", "gate"))})
        local, _ = plain(x, mem, mem, key_padding_mask=kpm, attn_mask=_hand_mask(qg, kg, H), need_weights=False)
        unmasked, _ = plain(x, mem, mem, key_padding_mask=kpm, need_weights=False)
        plain.load_state_dict(group.global_attn.state_dict())
        glob, _ = plain(x, mem, mem, key_padding_mask=kpm, need_weights=False)
        g = torch.sigmoid(group.gate(torch.cat([local, glob], -1)))
    assert torch.allclose(out, g * local + (1 - g) * glob, atol=1e-5)
    assert not torch.allclose(local, unmasked, atol=1e-3)  # the mask matters on this input
    with pytest.raises(RuntimeError, match="group mask"):
        group(x, mem, mem)


def _embedding_grads(model, src, lengths, prev, row, position):
    """Gradients of the output logits at ``(row, position)`` w.r.t. the encoder's and the
    decoder's token embeddings ``[B, S, C]``, ``[B, T, C]``."""
    grabbed = {}

    def hook(name):
        def keep(module, inputs, output):
            output.retain_grad()
            grabbed[name] = output
        return keep

    handles = [model.encoder.embed_tokens.register_forward_hook(hook("enc")),
               model.decoder.embed_tokens.register_forward_hook(hook("dec"))]
    try:
        logits = model(src, lengths, prev)[0]
        logits[row, position].sum().backward()
    finally:
        for h in handles:
            h.remove()
    return grabbed["enc"].grad.abs().sum(-1), grabbed["dec"].grad.abs().sum(-1)


def test_group_layers_never_see_another_sentence_and_combined_layers_do():
    """0 combined layers: the output at a token of target sentence 2 has zero gradient w.r.t.
    the embeddings of source sentences 1 and 3 and of target sentence 1; with combined
    layers (encoder, decoder self and cross) it has not."""
    d = toy_dictionary()
    src, lengths, prev, _ = toy_batch(d)
    sep = d.index("<sep>")
    sg, tg = source_groups(src, sep, d.pad())[0], target_groups(prev, sep, d.pad())[0]
    pos = int((tg == 2).nonzero()[-1])  # the last decoder position of sentence 2
    for ctx, local in ((0, True), (2, False)):
        model = g_model(d, ctx)
        enc, dec = _embedding_grads(model, src, lengths, prev, 0, pos)
        assert enc[0][sg == 2].gt(0).all() and dec[0][tg == 2][:1].gt(0).all()
        other_src = enc[0][(sg != 2) & (sg != 0)]
        other_tgt = dec[0][tg == 1]
        if local:
            assert other_src.eq(0).all() and other_tgt.eq(0).all(), (other_src, other_tgt)
        else:
            assert other_src.gt(0).all() and other_tgt.gt(0).all()
        assert enc[1].eq(0).all() and dec[1].eq(0).all()  # other rows: never


class _NoContext:
    """The model with the ``context=`` keyword of conftest's incremental check dropped."""

    def __init__(self, model):
        self.model, self.decoder, self.encoder = model, model.decoder, _Encoder(model.encoder)

    def __call__(self, src, lengths, prev, context=None):
        return self.model(src, lengths, prev)


class _Encoder:
    def __init__(self, encoder):
        self.encoder = encoder
        self.reorder_encoder_out = encoder.reorder_encoder_out

    def __call__(self, src, src_lengths=None, context=None):
        return self.encoder(src, src_lengths=src_lengths)


@pytest.mark.parametrize("arch", ["g_transformer-1", "g_transformer-0", "doc2doc_transformer"])
def test_incremental_decoding_equals_the_full_forward(arch):
    """Beam 2 with fairseq's reorderings (conftest): every step's logits equal the
    teacher-forced run's (the constraint off: it changes the logits on purpose)."""
    d = toy_dictionary()
    if arch.startswith("g_transformer"):
        model = g_model(d, int(arch[-1]))
    else:
        model = build(Doc2DocTransformerModel, "doc2doc_transformer", d)
    model.set_sentence_count_constraint(False)
    # targets of one length (fairseq's incremental positions ignore right padding), 3 and 2 sentences
    sources = [segment(d, [[1, 2], [3, 4, 5], [6]]), segment(d, [[7], [8, 9]])]
    targets = [segment(d, [[10, 11, 12], [13], [14, 15]]), segment(d, [[16, 17, 18, 19], [20, 21, 22]])]
    src, lengths, prev, _ = collate(d, sources + sources, targets + targets)  # 4 rows: one leaves at step 3
    assert prev.ne(d.pad()).all()
    assert_incremental_equals_full(_NoContext(model), src, lengths, prev, label=arch)


def _decode(model, d, sources, beam):
    return [h[0]["tokens"] for h in beam_search(model, d, sources, beam)]


def _issue_segments(d):
    """20 segments of 1..20 sentences (210 sentences) of 1..3 random words each."""
    g = torch.Generator().manual_seed(1)
    return [segment(d, [torch.randint(0, 30, (int(torch.randint(1, 4, (1,), generator=g)),),
                                      generator=g).tolist() for _ in range(n)]) for n in range(1, 21)]


def _sentence_pairs(d, sources, hyps):
    """(source length, output length) of every sentence, separators and </s> not counted."""
    sep, eos = d.index("<sep>"), d.eos()
    pairs = []
    for s, h in zip(sources, hyps):
        src, out = seg.split_tokens(s, sep, eos), seg.split_tokens(h, sep, eos)
        assert len(src) == len(out)
        pairs += [(a.numel() - 1, b.numel() - 1) for a, b in zip(src, out)]
    return pairs


@pytest.mark.parametrize("name", [pytest.param("g_transformer", marks=pytest.mark.slow), "doc2doc_transformer"])
def test_decoding_returns_every_sentence(name):
    """fairseq's SequenceGenerator, beam 1 and 4, segments of 1..20 sentences in one batch, the
    model biased towards ending (conftest's ``tilted_toward_ending``): every hypothesis has
    exactly the source's number of sentences, and with the length windows (the default) no
    output sentence is empty and each is within its window (at least 1, at most
    int(1.2 |s_i| + 10) tokens); without the windows the same model leaves most sentences
    empty; without the sentence-count constraint it ends segments early."""
    d = toy_dictionary()
    sources = _issue_segments(d)
    model = (g_model(d, 1) if name == "g_transformer"
             else build(Doc2DocTransformerModel, "doc2doc_transformer", d))
    tilted_toward_ending(model, d)
    sep = d.index("<sep>")
    assert model.sentence_length_window == LengthWindow(1.2, 10, 1)
    for beam in (1, 4):
        hyps = _decode(model, d, sources, beam)
        assert [int(h.eq(sep).sum()) + 1 for h in hyps] == list(range(1, 21)), beam
        assert all(h[-1] == d.eos() and h[:-1].ne(d.eos()).all() for h in hyps)
        pairs = _sentence_pairs(d, sources, hyps)
        assert len(pairs) == 210 and all(s > 0 for s, _ in pairs)
        assert all(1 <= o <= int(1.2 * s + 10) for s, o in pairs), (beam, pairs)
    model.set_sentence_length_window(None)
    assert model.sentence_length_window is None
    empty = sum(o == 0 for _, o in _sentence_pairs(d, sources, _decode(model, d, sources, 4)))
    assert empty > 100, "without the windows the biased model was expected to leave sentences empty"
    model.set_sentence_length_window()
    model.set_sentence_count_constraint(False)
    assert not model.keeps_sentence_count and model.sentence_length_window is None
    assert [int(h.eq(sep).sum()) + 1 for h in _decode(model, d, sources, 1)] != list(range(1, 21))


@pytest.mark.parametrize("name", [pytest.param("g_transformer", marks=pytest.mark.slow), "doc2doc_transformer"])
def test_language_token_first_in_every_sentence(name):
    """Data with language tokens (``docctx-prepare --pretrained`` of M2M-100, NLLB, mBART-50):
    every source sentence of a segment starts with the source token and, with the tokens set
    (``set_sentence_start``, as the task sets them), every output sentence of every hypothesis
    starts with the target token and holds it nowhere else, beam 1 and 4, with the biased model of
    ``test_decoding_returns_every_sentence``: the source's number of sentences, none empty
    besides its token, each within the window of its source sentence with neither token
    counted. Without the setting the model starts most sentences with another token."""
    d = toy_dictionary()
    src_tok, tgt_tok = d.add_symbol("__en__"), d.add_symbol("__de__")
    model = (g_model(d, 1) if name == "g_transformer"
             else build(Doc2DocTransformerModel, "doc2doc_transformer", d))
    tilted_toward_ending(model, d)
    sep, eos = d.index("<sep>"), d.eos()
    sources = []
    for plain in _issue_segments(d):
        parts = seg.split_tokens(plain, sep, eos)
        sources.append(torch.cat([torch.cat([torch.LongTensor([src_tok]), p[:-1],
                                             torch.LongTensor([sep if i < len(parts) - 1 else eos])])
                                  for i, p in enumerate(parts)]))
    n_sentences = list(range(1, 21))
    hyps = _decode(model, d, sources, 1)
    starts = [int(o[0]) == tgt_tok for h in hyps for o in seg.split_tokens(h, sep, eos)]
    assert sum(starts) < len(starts) / 2, sum(starts)
    model.set_sentence_start(src_tok, tgt_tok)
    for beam in (1, 4):
        hyps = _decode(model, d, sources, beam)
        assert [int(h.eq(sep).sum()) + 1 for h in hyps] == n_sentences, beam
        pairs = []
        for s, h in zip(sources, hyps):
            src, out = seg.split_tokens(s, sep, eos), seg.split_tokens(h, sep, eos)
            assert all(int(o[0]) == tgt_tok and not o[1:].eq(tgt_tok).any() for o in out), (beam, out)
            pairs += [(seg.sentence_length(a, src_tok), seg.sentence_length(b, tgt_tok)) for a, b in zip(src, out)]
        assert len(pairs) == 210 and all(s > 0 for s, _ in pairs)
        assert all(1 <= o <= int(1.2 * s + 10) for s, o in pairs), (beam, pairs)


def reference_constraint(last, prev, n, src_lengths, window, eos, sep):
    """The constraint written out row by row (the reference of ``constrain_sentence_count``):
    ``last`` ``[B, V]`` unconstrained logits of the next position after ``prev`` ``[B, L]``
    (position 0 the initial </s>), ``n`` the rows' source sentences, ``src_lengths`` lists
    of their sentence lengths, ``window`` a ``LengthWindow`` or ``None``."""
    out = last.clone()
    for b in range(last.size(0)):
        hist = prev[b, 1:].tolist()
        k = hist.count(sep)
        more = k < n[b] - 1
        m = hist[::-1].index(sep) if sep in hist else len(hist)  # tokens after the last separator
        early = forced = False
        if window is not None:
            length = src_lengths[b][min(k, n[b] - 1)]
            hi = int(window.max_len_a * length + window.max_len_b)
            lo = 0 if length == 0 else min(window.min_len, hi)
            early, forced = m < lo, m >= hi
        if more or early:
            out[b, eos] = EOS_FORBIDDEN
        if not more or early:
            out[b, sep] = float("-inf")
        if forced:
            end = sep if more else eos
            for v in range(last.size(1)):
                if v not in (end, eos):
                    out[b, v] = float("-inf")
    return out


@pytest.mark.parametrize("window", [None, LengthWindow(), LengthWindow(0.5, 1, 1), LengthWindow(0.0, 2, 2)])
def test_the_constraint_equals_the_reference_and_acts_only_in_incremental_decoding(window):
    """Teacher-forced logits are the plain ones; in incremental decoding every step's logits
    are the reference's (:func:`reference_constraint`) applied to them: </s> forbidden before
    the last sentence and <sep> in it, and, with a window, the end of a sentence forbidden
    before its minimum and forced at its maximum (small windows, so that sentences reach it;
    a segment with an empty source sentence, whose minimum is 0)."""
    d = toy_dictionary()
    model = g_model(d, 1).set_sentence_length_window(window)
    sources = [segment(d, [[1, 2], [3, 4, 5], [6]]), segment(d, [[7], [8, 9]]), segment(d, [[1], [], [2, 3]])]
    targets = [segment(d, [[10, 11, 12], [13], [14, 15]]), segment(d, [[16, 17, 18, 19], [20]]),
               segment(d, [[21, 22], [], [23, 24, 25]])]
    src, lengths, prev, _ = collate(d, sources, targets)
    sep, eos = d.index("<sep>"), d.eos()
    n = [3, 2, 3]
    src_lengths = [[2, 3, 1], [1, 2], [1, 0, 2]]
    state, steps = {}, []
    with torch.no_grad():
        full = model(src, lengths, prev)[0]
        enc = model.encoder(src, src_lengths=lengths)
        assert enc["src_sentence_lengths"][0].tolist() == [[2, 3, 1], [1, 2, 0], [1, 0, 2]]
        for t in range(prev.size(1)):
            steps.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0][:, -1])
    assert torch.isfinite(full).all()
    forced = early = 0
    for t, out in enumerate(steps):
        want = reference_constraint(full[:, t], prev[:, : t + 1], n, src_lengths, window, eos, sep)
        for b in range(len(n)):
            if prev[b, t] == d.pad():
                continue
            assert torch.equal(torch.isneginf(out[b]), torch.isneginf(want[b])), (b, t)
            finite = torch.isfinite(want[b])
            assert torch.allclose(out[b, finite], want[b, finite], atol=1e-5), (b, t)
            forced += int(torch.isneginf(want[b]).sum()) > 2
            early += bool(want[b, sep] == float("-inf") and want[b, eos] == EOS_FORBIDDEN)
    if window is not None and window.max_len_a < 1:
        assert forced > 0 and early > 0  # the small windows reach both rules


def test_sentence_lengths_and_windows():
    d = toy_dictionary()
    sep = d.index("<sep>")
    rows = [segment(d, [[1, 2], [], [3, 4, 5]]), segment(d, [[6]])]
    for left in (True, False):
        tokens = data_utils.collate_tokens(rows, d.pad(), d.eos(), left_pad=left)
        assert seg.sentence_lengths(tokens, sep, d.pad(), d.eos()).tolist() == [[2, 0, 3], [1, 0, 0]]
    lo, hi = LengthWindow().bounds(torch.tensor([0, 1, 5, 50]))
    assert lo.tolist() == [0, 1, 1, 1] and hi.tolist() == [int(1.2 * x + 10) for x in (0, 1, 5, 50)]
    assert LengthWindow(0.0, 2, 5).bounds(torch.tensor([3]))[0].tolist() == [2]  # never above the maximum
    with pytest.raises(ValueError, match="--sentence-max-len-b"):
        LengthWindow(1.2, 0)


def test_word_masking_in_the_noise_epochs_only():
    """--doc-noise-mask replaces words (never separators or </s>) of the source and of the
    decoder input in training while epoch < --doc-noise-epochs; the targets and evaluation
    are untouched."""
    d = toy_dictionary()
    model = g_model(d, 1, doc_noise_mask=0.5, doc_noise_epochs=3)
    src, lengths, prev, _ = toy_batch(d)
    seen, seen_prev = [], []
    model.encoder.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    model.decoder.register_forward_pre_hook(lambda m, args: seen_prev.append(args[0].clone()))
    model.train()
    for epoch in (1, 2, 3):
        model.set_epoch(epoch)
        torch.manual_seed(epoch)
        model(src, lengths, prev)
    model.eval()
    model.set_epoch(1)
    model(src, lengths, prev)
    masked = [s.ne(src) for s in seen]
    sep = d.index("<sep>")
    special = (src < d.nspecial) | src.eq(sep)
    assert masked[0].any() and masked[1].any() and not masked[2].any() and not masked[3].any()
    assert not (masked[0] & special).any() and seen[0][masked[0]].eq(d.unk()).all()  # no <mask>: <unk>
    assert source_groups(seen[0], sep, d.pad()).equal(source_groups(src, sep, d.pad()))
    masked_prev = [p.ne(prev) for p in seen_prev]
    assert masked_prev[0].any() and not masked_prev[2].any() and not masked_prev[3].any()
    assert not (masked_prev[0] & ((prev < d.nspecial) | prev.eq(sep))).any()


def test_a_dictionary_without_the_separator_is_refused():
    from fairseq.data import Dictionary

    d = Dictionary()
    d.add_symbol("w0")
    for cls, arch in ((GTransformerModel, "g_transformer"), (Doc2DocTransformerModel, "doc2doc_transformer")):
        with pytest.raises(ValueError, match="no separator '<sep>'"):
            build(cls, arch, d)


def test_segment_models_are_sentence_level_for_the_context_contract():
    d = toy_dictionary()
    for model in (g_model(d, 1), build(Doc2DocTransformerModel, "doc2doc_transformer", d)):
        assert dc.context_spec(model) == dc.SENTENCE_LEVEL and dc.reads_segments(model)
    assert not dc.reads_segments(TransformerModel)


def _sentence_checkpoint(d, path):
    args = argparse.Namespace(arch="transformer", **TINY)
    ARCH_CONFIG_REGISTRY["transformer"](args)
    torch.manual_seed(7)
    sent = TransformerModel.build_model(args, Task(d))
    torch.save({"model": sent.state_dict(), "args": None, "cfg": None, "extra_state": {"train_iterator": None},
                "optimizer_history": [{"criterion_name": "x", "optimizer_name": "x", "lr_scheduler_state": {},
                                       "num_updates": 0}]}, path)
    return sent.state_dict()


@pytest.mark.parametrize("name", ["g_transformer", "doc2doc_transformer"])
def test_initialised_from_a_sentence_level_transformer(name, tmp_path):
    """Every weight of the sentence-level transformer is copied; the only new weights are the
    global attentions and gates; the global attentions start as copies of the group ones."""
    d = toy_dictionary()
    sent = _sentence_checkpoint(d, tmp_path / "sent.pt")
    if name == "g_transformer":
        model = g_model(d, 1, seed=3, init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
    else:
        model = build(Doc2DocTransformerModel, "doc2doc_transformer", d, seed=3,
                      init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
    own = model.state_dict()
    for k, v in sent.items():
        assert torch.equal(own[k], v), k
    new = sorted(set(own) - set(sent))
    if name == "doc2doc_transformer":
        assert new == []
        with pytest.raises(ValueError, match="would freeze every weight"):
            build(Doc2DocTransformerModel, "doc2doc_transformer", d, freeze_sentence_weights=True,
                  init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
        return
    assert new and all(".global_attn." in k or ".gate." in k for k in new)
    assert {k.split(".layers.")[0] + "." + k.split(".")[3] for k in new if ".gate." in k} == {
        "encoder.self_attn", "decoder.self_attn", "decoder.encoder_attn"}
    for k in new:
        if ".global_attn." in k:
            assert torch.equal(own[k], own[k.replace("global_attn.", "")]), k


def test_layers_share_the_per_head_mask_of_a_forward_call():
    """The [B * heads, T, S] mask PyTorch's attention takes is built once per forward call
    for all layers (the same tensor in every layer), and equals the group mask with the
    causal mask added."""
    d = toy_dictionary()
    model = g_model(d, 1, encoder_layers=3, decoder_layers=3)
    src, lengths, prev, _ = toy_batch(d)
    seen = {}
    for name, m in model.named_modules():
        if isinstance(m, GroupAttention) and m.kind == "self":
            build = m._head_mask

            def spy(attn_mask, dtype, build=build, name=name):
                mask = build(attn_mask, dtype)
                seen[name] = (mask, attn_mask)
                return mask
            m._head_mask = spy
    model(src, lengths, prev)
    enc = [v for k, v in seen.items() if k.startswith("encoder.")]
    dec = [v for k, v in seen.items() if k.startswith("decoder.")]
    assert len(enc) == len(dec) == 3
    assert all(m is enc[0][0] for m, _ in enc) and all(m is dec[0][0] for m, _ in dec)
    mask, causal = dec[0]
    blocked = group_blocked(target_groups(prev, d.index("<sep>"), d.pad()),
                            target_groups(prev, d.index("<sep>"), d.pad()))
    expected = causal.expand(*blocked.shape).masked_fill(blocked, float("-inf"))
    assert torch.equal(mask, expected.repeat_interleave(2, dim=0))


@pytest.mark.parametrize("offload", [False, True])
def test_activation_checkpointing_gives_the_same_losses_and_gradients(offload):
    """--checkpoint-activations (and --offload-activations): fairseq recomputes each layer in
    the backward pass, after the forward call's group masks are gone; the layers keep their
    masks for it, so three SGD updates (dropout on) give the losses and gradients of the
    model without checkpointing."""
    d = toy_dictionary()
    src, lengths, prev, tgt = toy_batch(d)
    runs = []
    for checkpoint in (False, True):
        model = g_model(d, 1, dropout=0.1, checkpoint_activations=checkpoint, offload_activations=offload).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses, grads = [], []
        for step in range(3):
            torch.manual_seed(step)  # the same dropout masks in both runs
            logits = model(src, lengths, prev)[0]
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=d.pad())
            opt.zero_grad()
            loss.backward()
            losses.append(float(loss))
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            opt.step()
        runs.append((losses, grads))
    (plain_losses, plain_grads), (ckpt_losses, ckpt_grads) = runs
    assert ckpt_losses == pytest.approx(plain_losses, abs=1e-6) and plain_losses[2] < plain_losses[0]
    for plain, ckpt in zip(plain_grads, ckpt_grads):
        assert plain.keys() == ckpt.keys() and len(plain) > 20
        assert any(".gate." in n for n in plain)  # the combined layers' weights take part
        for n in plain:
            assert torch.allclose(plain[n], ckpt[n], atol=1e-6), n
    # the checkpointed layers are fairseq's wrapping, and decode as before
    model = g_model(d, 1, checkpoint_activations=True)
    assert all(hasattr(layer, "precheckpoint_forward") for layer in model.encoder.layers)
    plain = g_model(d, 1)
    with torch.no_grad():
        assert torch.allclose(model(src, lengths, prev)[0], plain(src, lengths, prev)[0], atol=1e-6)


def _trainer(tmp_path, d, scale, optimizer=("--optimizer", "sgd")):
    """fairseq's Trainer (in this process) for a g_transformer fine-tuned from the sentence
    checkpoint ``tmp_path/sent.pt`` with ``--lr-scale-pretrained scale``, warming up its
    learning rate from 0.1 to 0.5 over 4 updates."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    from conftest import REPO

    for side in ("src", "tgt"):
        d.save(str(tmp_path / f"dict.{side}.txt"))
    sizes = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    argv = [str(tmp_path), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
            "-s", "src", "-t", "tgt", "--doc-mode", "segments", "--arch", "g_transformer", *sizes,
            "--init-from-sentence-checkpoint", str(tmp_path / "sent.pt"), "--lr-scale-pretrained", str(scale),
            *optimizer, "--lr", "0.5", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4", "--warmup-init-lr", "0.1",
            "--criterion", "cross_entropy", "--cpu", "--save-dir", str(tmp_path / "none")]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)  # the new weights (gates) start the same in every run
    model = task.build_model(cfg.model)
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion))


def _sample(d):
    src, lengths, prev, tgt = toy_batch(d)
    return {"id": torch.arange(2), "nsentences": 2, "ntokens": int(tgt.ne(d.pad()).sum()),
            "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}, "target": tgt}


def test_pretrained_weights_learn_at_the_scaled_learning_rate(tmp_path):
    """--lr-scale-pretrained 0.2 under fairseq's Trainer (SGD): after the first update the
    weights from the sentence checkpoint moved 0.2 times as far as with scale 1, the new
    weights (global attentions, gates) as far; at every update the optimizer steps with the
    scaled weights in a group of their own at 0.2 x the scheduler's learning rate, and its
    state keeps fairseq's single group (checkpoints and resuming unchanged). Adam's first
    step is proportional to the learning rate too."""
    d = toy_dictionary()
    _sentence_checkpoint(d, tmp_path / "sent.pt")
    for optimizer in (("--optimizer", "sgd"), ("--optimizer", "adam")):
        moved = {}
        for scale in (0.2, 1.0):
            trainer = _trainer(tmp_path, d, scale, optimizer)
            model = trainer.model
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            torch_opt = trainer.optimizer.optimizer
            seen, step = [], torch_opt.step

            def spy(*args, step=step, **kwargs):
                seen.append([(len(g["params"]), g["lr"]) for g in torch_opt.param_groups])
                return step(*args, **kwargs)
            torch_opt.step = spy
            trainer.train_step([_sample(d)])
            moved[scale] = {n: p.detach() - before[n] for n, p in model.named_parameters()}
            for _ in range(2):
                trainer.train_step([_sample(d)])
            n_params = len(list(model.parameters()))
            n_new = sum(1 for n, _ in model.named_parameters() if _is_new(n))
            assert len(torch_opt.param_groups) == 1 and len(torch_opt.state_dict()["param_groups"]) == 1
            lrs = [0.1 + 0.1 * u for u in (0, 1, 2)]  # inverse_sqrt's warm-up from 0.1 to 0.5 in 4 updates
            if scale == 1.0:
                assert all(len(groups) == 1 for groups in seen)
                continue
            assert len(seen) == 3
            for groups, lr in zip(seen, lrs):
                assert [n for n, _ in groups] == [n_new, n_params - n_new]
                assert groups[0][1] == pytest.approx(lr) and groups[1][1] == pytest.approx(0.2 * lr)
        checked = 0
        for n, delta in moved[1.0].items():
            if not delta.abs().sum() > 0:  # e.g. the keys' biases: no gradient (the softmax ignores them)
                assert moved[0.2][n].abs().sum() == 0, n
                continue
            want = delta if _is_new(n) else 0.2 * delta
            assert torch.allclose(moved[0.2][n], want, atol=1e-7, rtol=1e-4), (optimizer, n)
            checked += not _is_new(n)
        assert checked > 20


def _is_new(name):
    return ".global_attn." in name or ".gate." in name


def test_lr_scale_needs_a_sentence_checkpoint_and_learning_weights(tmp_path):
    d = toy_dictionary()
    _sentence_checkpoint(d, tmp_path / "sent.pt")
    with pytest.raises(ValueError, match="--lr-scale-pretrained 0.2 scales the weights --init-from-sentence"):
        g_model(d, 1, lr_scale_pretrained=0.2)
    with pytest.raises(ValueError, match="with --freeze-sentence-weights: the frozen weights do not learn"):
        g_model(d, 1, lr_scale_pretrained=0.2, freeze_sentence_weights=True,
                init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
    with pytest.raises(ValueError, match="must be above 0"):
        g_model(d, 1, lr_scale_pretrained=0.0, init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
    # a flattened copy of the parameters (fairseq's fp16 training) cannot be grouped: refused
    from fairseq_docctx.models.sentence_init import lr_scaled_groups

    model = g_model(d, 1, lr_scale_pretrained=0.2, init_from_sentence_checkpoint=str(tmp_path / "sent.pt"))
    flat = torch.nn.Parameter(torch.cat([p.detach().view(-1) for p in model.parameters()]))
    opt = torch.optim.SGD([flat], lr=0.1)
    with pytest.raises(ValueError, match="add --fp16-no-flatten-grads"):
        with lr_scaled_groups(opt, model):
            pass
    assert opt.param_groups[0]["params"] == [flat]
