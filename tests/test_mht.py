"""mht_transformer (Zhang et al. 2021): incremental decoding is exact, every ablation flag
changes the computation the way the paper describes it, rows without context work, the
sentence encoders are initialised from sentence-level checkpoints, every sublayer places its
LayerNorm as --encoder/decoder-normalize-before says, the hops read the sentence encoders'
self-attention outputs (Eq. 2), the parameter table at the paper's size and the options
that change it, and fairseq-generate decodes a trained model."""
import argparse

import pytest
import torch
from fairseq.models.transformer import base_architecture

from conftest import REPO, TINY_MODEL, assert_incremental_equals_full, run, toy_dictionary
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models import mht_transformer as mht
from fairseq_docctx.models.mht_transformer import MHTTransformerModel, mht_transformer
from fairseq_docctx.modules.multi_hop import HopAttention

MODULES = ["multi-hop", "concat", "hierarchical"]


def _model(seed=0, dim=16, layers=2, dictionary=None, **flags):
    d = dictionary if dictionary is not None else toy_dictionary()

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_size=3, context_sides="src,ref,draft")

    args = argparse.Namespace(
        encoder_layers=layers, decoder_layers=layers, encoder_embed_dim=dim, decoder_embed_dim=dim,
        encoder_ffn_embed_dim=2 * dim, decoder_ffn_embed_dim=2 * dim, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, max_source_positions=256, max_target_positions=256,
        **{"share_all_embeddings": True, **flags})
    base_architecture(args)
    mht_transformer(args)
    torch.manual_seed(seed)
    return MHTTransformerModel.build_model(args, Task()).eval(), d


def _sentences(g, n, eos, lo=2, hi=7):
    return [torch.randint(5, 35, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist() + [eos]
            for _ in range(n)]


def _table(rows, pad, left=False):
    w = max(len(r) for r in rows)
    t = torch.full((len(rows), w), pad)
    for i, r in enumerate(rows):
        if left:
            t[i, w - len(r):] = torch.tensor(r)
        else:
            t[i, : len(r)] = torch.tensor(r)
    return t, torch.tensor([len(r) for r in rows])


def _batch(d, seed=1):
    """Five rows of two documents (lengths 3 and 2, K=3): the src, draft and ref tables hold
    each sentence once; rows 0 and 3 are first sentences (no context)."""
    g = torch.Generator().manual_seed(seed)
    eos, pad = d.eos(), d.pad()
    src, drafts, refs = (_sentences(g, 5, eos) for _ in range(3))
    index = torch.tensor([[-1, -1, -1], [0, -1, -1], [1, 0, -1], [-1, -1, -1], [3, -1, -1]])
    self_rows = torch.arange(5)
    ctx = cb.new_context(index.clone())
    cb.add_table(ctx, "src", *_table(src, pad, left=True), index, self_rows)
    cb.add_table(ctx, "draft", *_table(drafts, pad), index, self_rows)
    cb.add_table(ctx, "ref", *_table(refs, pad), index, self_rows)
    src_tokens, src_lengths = _table(src, pad, left=True)
    prev = torch.randint(5, 35, (5, 6), generator=g)
    prev[:, 0] = eos
    return src_tokens, src_lengths, prev, ctx


def _forward(model, batch, ctx=None):
    src, lengths, prev, c = batch
    with torch.no_grad():  # [B, T, V] (unpacked in training mode)
        return model.unpack_logits(model(src, lengths, prev, context=ctx if ctx is not None else c))


def _perturbed(ctx, side, d, rows):
    """``ctx`` with the words of table rows ``rows`` of ``side`` replaced."""
    new = dict(ctx)
    t = ctx[f"{side}_tokens"].clone()
    for r in rows:
        words = t[r].ne(d.pad()) & t[r].ne(d.eos())
        t[r][words] = (t[r][words] - 5 + 7) % 30 + 5
    new[f"{side}_tokens"] = t
    return new


CONTEXT_ROWS = [0, 1, 3]  # sentences that are context of a later row (self rows of 0, 1, 3)


def _changed(a, b):
    return (a - b).abs().flatten(1).max(1).values > 1e-5


@pytest.mark.parametrize("sides,src_used,draft_used", [
    ("both", True, True), ("source", True, False), ("target", False, True), ("none", False, False)])
def test_context_sides_flag(sides, src_used, draft_used):
    """--mht-context-sides (Table 4): the source hops read the previous source sentences, the
    target hops the previous drafts; with ``none`` only the current draft is read. Rows
    without context (0 and 3) never change."""
    model, d = _model(mht_context_sides=sides)
    batch = _batch(d)
    ctx = batch[3]
    base = _forward(model, batch)
    assert torch.isfinite(base).all()
    has_ctx = torch.tensor([False, True, True, False, True])
    for side, used in (("src", src_used), ("draft", draft_used)):
        # the words of sentences that are only context of other rows (never the row's own)
        out = _forward(model, batch, _perturbed(ctx, side, d, CONTEXT_ROWS))
        changed = _changed(out, base)
        if side == "draft":  # rows 0, 1 and 3 read their own draft: perturbed too
            changed[[0, 1, 3]] = False
        assert not changed[~has_ctx].any()
        assert changed[has_ctx & torch.tensor([False, False, True, False, True])].all() == used, (side, changed)
    # the current sentence's draft is always read (draft attention, Eq. 7)
    out = _forward(model, batch, _perturbed(ctx, "draft", d, [4]))
    assert _changed(out, base)[4]


def test_direction_flag_reverses_the_hops():
    """--mht-direction (Table 3), same weights: rows with two or more previous sentences
    change, rows with at most one do not."""
    l2r, d = _model(mht_direction="l2r")
    r2l, _ = _model(mht_direction="r2l")
    r2l.load_state_dict(l2r.state_dict())
    batch = _batch(d)
    changed = _changed(_forward(l2r, batch), _forward(r2l, batch))
    assert changed.tolist() == [False, False, True, False, False]


@pytest.mark.parametrize("module", MODULES)
def test_context_module_flag(module):
    """--mht-context-module (Table 2): each module reads the previous source sentences and
    drafts; the modules differ from each other."""
    model, d = _model(mht_context_module=module)
    batch = _batch(d)
    base = _forward(model, batch)
    for side in ("src", "draft"):
        changed = _changed(_forward(model, batch, _perturbed(batch[3], side, d, [0, 1])), base)
        assert changed[2] and not changed[3]
    others = [m for m in MODULES if m != module]
    for other in others:
        m2, _ = _model(mht_context_module=other)
        shared = {k: v for k, v in model.state_dict().items() if k in m2.state_dict()}
        m2.load_state_dict(shared, strict=False)
        assert _changed(_forward(m2, batch), base)[[1, 2, 4]].all()


def test_reference_target_context_in_training_drafts_at_inference():
    """--mht-target-context reference (Table 5): in training the target hops read the
    references of the previous sentences; in evaluation (and decoding) their drafts."""
    model, d = _model(mht_target_context="reference")
    assert model.context_sides == ("src", "draft", "ref") or set(model.context_sides) == {"src", "draft", "ref"}
    batch = _batch(d)
    ctx = batch[3]
    for mode, ref_used in (("train", True), ("eval", False)):
        getattr(model, mode)()
        with torch.random.fork_rng():
            base = _forward(model, batch)
            ref = _forward(model, batch, _perturbed(ctx, "ref", d, CONTEXT_ROWS))
            draft = _forward(model, batch, _perturbed(ctx, "draft", d, [0]))  # context of rows 1, 2
        assert bool(_changed(ref, base)[2]) == ref_used
        assert bool(_changed(draft, base)[2]) == (not ref_used)
    draft_model, _ = _model(mht_target_context="draft")
    assert "ref" not in draft_model.context_sides


def test_training_runs_rows_in_length_groups_exactly():
    """In training the encoder and the decoder run the rows in groups of similar length and
    the output holds the real target positions only: the same logits and gradients as one
    padded pass."""
    model, d = _model(seed=5)
    g = torch.Generator().manual_seed(2)
    eos, pad = d.eos(), d.pad()
    B = 12
    src_rows = [torch.randint(5, 35, (n,), generator=g).tolist() + [eos] for n in [2, 40, 3, 35, 4, 2] * 2]
    tgt_rows = [torch.randint(5, 35, (n,), generator=g).tolist() + [eos] for n in [30, 2, 3, 40, 2, 5] * 2]
    src, lengths = _table(src_rows, pad, left=True)
    target, _ = _table(tgt_rows, pad)
    prev = target.roll(1, 1)
    prev[:, 0] = eos
    prev[target.eq(pad)] = pad
    index = torch.tensor([[-1, -1, -1]] + [[i - 1, i - 2 if i > 1 else -1, -1] for i in range(1, B)])
    ctx = cb.new_context(index.clone())
    cb.add_table(ctx, "src", src, lengths, index, torch.arange(B))
    cb.add_table(ctx, "draft", target, target.ne(pad).sum(1), index, torch.arange(B))
    with torch.no_grad():  # the encoder: length groups (context gathered per layer) vs one pass
        grouped = model.encoder(src, lengths, context=ctx)["encoder_out"][0]
        one = model.encoder(src, lengths, context=ctx, weights=[])["encoder_out"][0]
    assert (grouped - one)[src.ne(pad).t()].abs().max() < 1e-4
    full = model(src, lengths, prev, context=ctx)[0]
    real = target.ne(pad)
    weight = torch.randn(full[real].shape, generator=g)
    (full[real] * weight).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.train()  # dropout 0: the same function, computed group by group
    packed = model(src, lengths, prev, context=ctx)
    (packed[0][0] * weight).sum().backward()
    assert packed[0].shape == (1, int(real.sum()), full.size(-1))
    torch.testing.assert_close(packed[0][0], full[real], atol=1e-4, rtol=1e-4)
    assert torch.equal(model.get_targets({"target": target}, packed)[0], target[real])
    # the same gradients too (the grouped pass gathers its context once per layer)
    assert any("context" in n for n in grads) and any("draft_attn" in n for n in grads)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], atol=1e-4, rtol=1e-3, msg=n)


@pytest.mark.parametrize("module,sides,flags", [(m, s, {}) for m in MODULES for s in ("both", "none")] + [
    ("multi-hop", "both", dict(mht_hop_weights="per-distance")),
    ("multi-hop", "both", dict(encoder_normalize_before=True, decoder_normalize_before=True))])
def test_incremental_decoding_equals_full_run_under_beam_reordering(module, sides, flags):
    """Beam 2, step by step from fairseq's incremental state with beam search's reorderings
    (rows redrawn among the beams of their sentence; sentence 1 leaves the batch at step 3):
    each step's output equals the full teacher-forced run's. With shared hop weights (the
    default) one attention reads every distance, each sentence's keys in a slot of their own."""
    model, d = _model(mht_context_module=module, mht_context_sides=sides, seed=3, **flags)
    src, lengths, prev, ctx = _batch(d)
    assert_incremental_equals_full(model, src, lengths, prev, ctx, label=(module, sides, flags))


# ------------------------------------------------------------------ LayerNorm placement
def _record(module, calls, kind):
    """Record every call of ``module``: ``(input, output)`` of a LayerNorm or of the FFN's
    ends, ``(query, output)`` of an attention."""
    def hook(m, args, kwargs, out):
        if kind == "attn":
            calls.append((kwargs["query"] if "query" in kwargs else args[0], out[0]))
        elif kind == "fc1":
            calls.append((args[0], None))
        elif kind == "fc2":
            calls[-1] = (calls[-1][0], out)
        else:
            calls.append((args[0], out))
    return module.register_forward_hook(hook, with_kwargs=True)


def _sublayers(model):
    """Every residual sublayer of the model's layers (the multi-hop encoder and decoder and
    the sentence encoders) as ``(name, [sublayer modules], LayerNorm)``."""
    out = []
    encoders = [("encoder", model.encoder.layers), ("src sentence encoder", model.encoder.src_sentence_encoder.layers),
                ("tgt sentence encoder", model.encoder.tgt_sentence_encoder.layers), ("decoder", model.decoder.layers)]
    for part, layers in encoders:
        for n, layer in enumerate(layers):
            subs = [("self-attention", [layer.self_attn], layer.self_attn_layer_norm)]
            if hasattr(layer, "draft_attn"):
                subs.append(("draft attention", [layer.draft_attn], layer.draft_attn_layer_norm))
            ctx = getattr(layer, "context", None)
            if ctx is not None:
                for j, (attn, norm) in enumerate(zip(ctx.attn, ctx.norm)):
                    subs.append((f"context attention {j}", [attn], norm))
            if getattr(layer, "encoder_attn", None) is not None:
                subs.append(("encoder-decoder attention", [layer.encoder_attn], layer.encoder_attn_layer_norm))
            subs.append(("FFN", [layer.fc1, layer.fc2], layer.final_layer_norm))
            out += [(f"{part} layer {n} {name}", mods, norm) for name, mods, norm in subs]
    return out


@pytest.mark.parametrize("module", ["multi-hop", "concat"])
@pytest.mark.parametrize("pre", [False, True])
def test_every_sublayer_places_its_layernorm_as_the_flag_says(module, pre):
    """With --encoder/decoder-normalize-before every residual sublayer (self-attention, draft
    attention, each hop or the concatenation's attention, encoder-decoder attention, FFN; in
    the multi-hop encoder and decoder and in the sentence encoders) normalizes its input and
    adds its output to the un-normalized residual stream: the sublayer's query is the
    LayerNorm's output. Without, the LayerNorm takes the residual stream plus the sublayer's
    output. Each LayerNorm runs once per call of its sublayer."""
    model, d = _model(seed=4, mht_context_module=module, encoder_normalize_before=pre,
                      decoder_normalize_before=pre)
    subs = _sublayers(model)
    calls, hooks = {}, []
    for name, mods, norm in subs:
        calls[name] = ([], [])
        if len(mods) == 1:
            hooks.append(_record(mods[0], calls[name][0], "attn"))
        else:
            hooks += [_record(mods[0], calls[name][0], "fc1"), _record(mods[1], calls[name][0], "fc2")]
        hooks.append(_record(norm, calls[name][1], "norm"))
    try:
        _forward(model, _batch(d))
    finally:
        for h in hooks:
            h.remove()
    checked = 0
    for name, _, _ in subs:
        sub, norm = calls[name]
        assert sub and len(sub) == len(norm), (name, len(sub), len(norm))
        for (query, out), (n_in, n_out) in zip(sub, norm):
            if pre:
                torch.testing.assert_close(query, n_out, msg=name)
            else:
                torch.testing.assert_close(n_in, query + out, msg=name)
            checked += 1
    assert checked >= len(subs)
    assert (model.encoder.layer_norm is not None) == pre and (model.decoder.layer_norm is not None) == pre


def test_hop_norm_post_keeps_the_hops_post_norm():
    """--mht-hop-norm post (checkpoints written before the option): the hops' LayerNorm after
    the residual connection even in pre-norm layers."""
    model, _ = _model(encoder_normalize_before=True, decoder_normalize_before=True, mht_hop_norm="post")
    assert not model.encoder.layers[0].context.normalize_before
    assert not model.decoder.layers[0].context.normalize_before
    assert model.decoder.layers[0].self_attn_layer_norm is not None and model.decoder.layers[0].normalize_before


# ------------------------------------------------------------------ A^(n), Eq. 2
def test_layer_n_reads_the_sentence_encoders_self_attention_output():
    """--mht-context-state self-attention (Eq. 2, the default): the states layer n reads of a
    context sentence or draft are the sentence encoder's layer-n self-attention sublayer
    outputs (its LayerNorm's output, post-norm), so the FFN of the sentence encoders' last
    layer takes no part in the translation; with layer-output they are the whole layer
    outputs and that FFN does."""
    outs = {}
    for state in ("self-attention", "layer-output"):
        model, d = _model(seed=6, mht_context_state=state)
        batch = _batch(d)
        enc = model.encoder
        tokens = cb.table(batch[3], "draft", 3).tokens
        with torch.no_grad():
            states, pad = enc.sentence_states(enc.tgt_sentence_encoder, tokens, torch.arange(tokens.size(0)),
                                              "target")
        # one padded pass of the sentence encoder, its sublayers' outputs hooked
        seen = {"attn": [], "layer": []}
        hooks = [layer.self_attn_layer_norm.register_forward_hook(lambda m, a, o: seen["attn"].append(o))
                 for layer in enc.tgt_sentence_encoder.layers]
        hooks += [layer.register_forward_hook(lambda m, a, o: seen["layer"].append(o[0]))
                  for layer in enc.tgt_sentence_encoder.layers]
        with torch.no_grad():
            enc.tgt_sentence_encoder.forward_scriptable(tokens, tokens.ne(d.pad()).sum(1))
        for h in hooks:
            h.remove()
        expected = seen["attn" if state == "self-attention" else "layer"]
        assert len(states) == len(expected) == 2
        real = ~pad.t()
        for n, (got, want) in enumerate(zip(states, expected)):
            torch.testing.assert_close(got[real], want[real], msg=(state, n))
        other = seen["layer" if state == "self-attention" else "attn"]
        assert not torch.allclose(states[-1][real], other[-1][real])
        base = _forward(model, batch)
        for side in (enc.src_sentence_encoder, enc.tgt_sentence_encoder):
            with torch.no_grad():
                side.layers[-1].fc2.weight.add_(torch.randn_like(side.layers[-1].fc2.weight))
        outs[state] = _changed(_forward(model, batch), base)
    assert not outs["self-attention"].any()
    assert outs["layer-output"].all()  # every row reads its current draft


# ------------------------------------------------------------------ size and sharing
def _paper_counts(V=30000, d=512, f=2048, L=6, K=3):
    """The parameters of the paper-size components, counted by hand (fairseq's attention:
    q, k, v, out projections with biases; LayerNorm: weight and bias)."""
    mha, ln, ffn, gate = 4 * (d * d + d), 2 * d, 2 * d * f + f + d, 2 * d * d + d
    enc_layer, dec_layer = mha + ffn + 2 * ln, 2 * mha + ffn + 3 * ln
    return dict(base=V * d + L * (enc_layer + dec_layer), hop=mha + ln, gate=gate, draft=L * (mha + ln),
                sentence_layers=L * enc_layer, sentence_embed=V * d, L=L, K=K)


def _size_table(**options):
    rows = mht.parameter_table(mht.paper_size_model(**options))
    assert [r[0] for r in rows] == [label for _, label in mht.COMPONENTS] + ["total"]
    return {key: row[1:] for (key, _), row in zip(mht.COMPONENTS + (("total", ""),), rows)}


def test_paper_size_parameter_table_and_what_each_option_changes():
    """At the paper's size (6+6 layers, 512/2048, 30K joint vocabulary, K=3) the named
    architecture's table (built on the meta device) has the hand-counted components:
    Transformer 59.5M, hops 12.6M and gates 6.3M (one attention per layer and side), draft
    attention 6.3M, two sentence encoders of 18.9M layers + 15.4M embeddings each: 153.3M,
    of which 84.7M are trained when both sentence encoders are initialised (kept fixed).
    --mht-hop-weights per-distance adds (K - 1) hops per layer and side (+25.2M: 178.5M, the
    largest configuration), --mht-sentence-encoder-embeddings model removes the two tables
    (-30.7M), --freeze-sentence-encoders decides what is trained."""
    c = _paper_counts()
    L, K = c["L"], c["K"]
    hops, gates = 2 * L * c["hop"], 2 * L * c["gate"]
    sentence = c["sentence_layers"] + c["sentence_embed"]
    total = c["base"] + hops + gates + c["draft"] + 2 * sentence
    t = _size_table()  # nothing initialised here: "initialised" freezes nothing
    assert t["transformer"] == (c["base"],) * 2 and t["hops"] == (hops,) * 2 and t["gates"] == (gates,) * 2
    assert t["draft"] == (c["draft"],) * 2
    for side in ("src", "tgt"):
        assert t[f"{side}_layers"] == (c["sentence_layers"],) * 2
        assert t[f"{side}_embed"] == (c["sentence_embed"],) * 2
    assert t["total"] == (total, total)
    assert round(total / 1e6, 1) == 153.3
    # the paper's pipeline: both sentence encoders initialised, hence fixed
    paper = _size_table(freeze_sentence_encoders="both")["total"]
    assert paper == (total, total - 2 * sentence)
    assert round(paper[1] / 1e6, 1) == 84.7
    assert _size_table(freeze_sentence_encoders="source")["total"] == (total, total - sentence)
    largest = _size_table(mht_hop_weights="per-distance")["total"]
    assert largest == (total + 2 * L * (K - 1) * c["hop"],) * 2
    assert round(largest[0] / 1e6, 1) == 178.5
    shared = _size_table(mht_sentence_encoder_embeddings="model")
    assert shared["total"] == (total - 2 * c["sentence_embed"],) * 2
    assert shared["src_embed"] == shared["tgt_embed"] == (0, 0)
    # the other flags keep the size
    assert _size_table(mht_context_state="layer-output", mht_hop_norm="post")["total"] == (total, total)


def test_parameter_table_in_the_docs_is_the_functions():
    """docs/mht.md shows the tables parameter_table gives at the paper's size: the named
    architecture as the paper's pipeline trains it (both sentence encoders initialised, so
    fixed) and the largest configuration."""
    docs = (REPO / "docs" / "mht.md").read_text()
    for options in (dict(freeze_sentence_encoders="both"), dict(mht_hop_weights="per-distance",
                                                               freeze_sentence_encoders="none")):
        table = mht.format_parameter_table(mht.parameter_table(mht.paper_size_model(**options)))
        assert table in docs, options


def test_shared_hops_have_one_attention_per_layer_and_side():
    """--mht-hop-weights: shared, one attention and LayerNorm read every distance; per-distance
    one each; weights of the other kind are refused with the option to give."""
    shared, d = _model()
    per, _ = _model(mht_hop_weights="per-distance")
    for model, n in ((shared, 1), (per, 3)):
        for layer in list(model.encoder.layers) + list(model.decoder.layers):
            assert len(layer.context.attn) == len(layer.context.norm) == n
    assert isinstance(shared.encoder.layers[0].context.attn[0], HopAttention)
    # the one attention reads both previous sentences of row 2: perturbing it changes row 2
    # through both hops, and rows without context stay
    batch = _batch(d)
    base = _forward(shared, batch)
    with torch.no_grad():
        shared.encoder.layers[0].context.attn[0].v_proj.weight.mul_(2)
    changed = _changed(_forward(shared, batch), base)
    assert changed.tolist() == [False, True, True, False, True]
    with pytest.raises(ValueError, match="--mht-hop-weights shared.*unexpected .*context.attn.1"):
        shared.load_state_dict(per.state_dict())
    with pytest.raises(ValueError, match="--mht-hop-weights per-distance.*missing .*context.attn.1"):
        per.load_state_dict(shared.state_dict())


def test_sentence_encoder_embeddings_model_shares_the_models_tables():
    """--mht-sentence-encoder-embeddings model: the source-side sentence encoder embeds with
    the encoder's table, the target-side one with the decoder's; own (default): tables of
    their own."""
    model, _ = _model(mht_sentence_encoder_embeddings="model", share_all_embeddings=False)
    enc = model.encoder
    assert enc.src_sentence_encoder.embed_tokens is enc.embed_tokens
    assert enc.tgt_sentence_encoder.embed_tokens is model.decoder.embed_tokens
    own, _ = _model()
    assert own.encoder.src_sentence_encoder.embed_tokens is not own.encoder.embed_tokens
    assert own.encoder.tgt_sentence_encoder.embed_tokens is not own.decoder.embed_tokens


def test_bad_option_values_are_refused():
    for opt, value in (("mht_hop_weights", "tied"), ("mht_context_state", "ffn"), ("mht_hop_norm", "pre"),
                       ("mht_sentence_encoder_embeddings", "joint"), ("freeze_sentence_encoders", "sometimes")):
        with pytest.raises(ValueError, match="--" + opt.replace("_", "-")):
            _model(**{opt: value})


@pytest.mark.parametrize("value,initialised,sides", [
    ("initialised", dict(source=True, target=False), ("source",)),
    ("initialised", dict(source=True, target=True), ("source", "target")),
    ("initialised", {}, ()), ("both", {}, ("source", "target")), (True, {}, ("source", "target")),
    (False, dict(source=True), ()), ("false", dict(source=True), ()), ("target", {}, ("target",))])
def test_freeze_sentence_encoders_values(value, initialised, sides):
    """--freeze-sentence-encoders: ``initialised`` (default) fixes the sentence encoders a
    sentence-level checkpoint initialises; booleans (checkpoints written before the other
    values hold one) mean both / none."""
    assert mht.frozen_sides(value, initialised) == sides


def test_checkpoint_defaults_apply_to_arguments_that_lack_the_options():
    """A checkpoint's arguments without the options added since get the values it was trained
    with; options it records are kept."""
    from fairseq_docctx.models.document_context import apply_checkpoint_defaults

    old = argparse.Namespace(arch="mht_transformer", mht_context_state="self-attention")
    added = apply_checkpoint_defaults(old)
    assert set(added) == set(MHTTransformerModel.checkpoint_defaults) - {"mht_context_state"}
    assert old.mht_hop_weights == "per-distance" and old.mht_hop_norm == "post"
    assert old.mht_context_state == "self-attention"
    new = argparse.Namespace(arch="mht_transformer")
    mht_transformer(new)
    assert apply_checkpoint_defaults(new) == [] and new.mht_hop_weights == "shared"


# ------------------------------------------------------------------ with fairseq-train
@pytest.fixture(scope="module")
def mht_bin(toy_bin, tmp_path_factory):
    """The toy data with drafts that differ from the references (the reference with its
    first word dropped), written as docctx-drafts writes them."""
    import shutil

    from fairseq.data import data_utils, indexed_dataset
    from fairseq.data.dictionary import Dictionary

    dest = tmp_path_factory.mktemp("mht") / "bin"
    shutil.copytree(toy_bin, dest)
    d = Dictionary.load(str(dest / "dict.tgt.txt"))
    for split in ("train", "valid", "test"):
        tgt = data_utils.load_indexed_dataset(str(dest / f"{split}.src-tgt.tgt"), d)
        out = str(dest / f"{split}.src-tgt.draft")
        b = indexed_dataset.make_builder(out + ".bin", impl="mmap", vocab_size=len(d))
        for i in range(len(tgt)):
            t = tgt[i]
            b.add_item(t[1:] if len(t) > 2 else t)
        b.finalize(out + ".idx")
    return dest


def _train(data, save, *extra, arch="mht_transformer", epochs=4):
    return run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
                "--arch", arch, *TINY_MODEL, "--max-tokens", "600", "--max-epoch", str(epochs),
                "--no-epoch-checkpoints", "--save-dir", save, *extra])


@pytest.fixture(scope="module")
def sentence_ckpts(mht_bin, tmp_path_factory):
    """Tiny src->tgt and tgt->src sentence-level transformers on the toy data."""
    out = {}
    for name, pair in (("fwd", ["-s", "src", "-t", "tgt"]), ("bwd", ["-s", "tgt", "-t", "src"])):
        save = tmp_path_factory.mktemp(name)
        _train(mht_bin, save, "--context-size", "0", *pair, arch="transformer", epochs=2)
        out[name] = save / "checkpoint_last.pt"
    return out


@pytest.fixture(scope="module")
def mht_init(mht_bin, sentence_ckpts, tmp_path_factory):
    """MHT trained with both sentence encoders initialised, hence kept fixed (the default
    --freeze-sentence-encoders initialised)."""
    save = tmp_path_factory.mktemp("mht_init")
    p = _train(mht_bin, save, "--context-size", "2", "--context-sides", "src,draft",
               "--src-sentence-encoder-from", sentence_ckpts["fwd"],
               "--tgt-sentence-encoder-from", sentence_ckpts["bwd"], epochs=3)
    return save / "checkpoint_last.pt", p.stdout


def test_sentence_encoders_initialised_and_frozen(mht_init, sentence_ckpts):
    """--src/tgt-sentence-encoder-from copy the encoders of the src->tgt and tgt->src
    checkpoints (printed report; tensors equal); --freeze-sentence-encoders (by default the
    initialised ones) keeps them through training; the src->tgt checkpoint is recorded as
    the model's draft maker; fairseq-train logs the parameter table (the sentence encoders
    counted, not trained)."""
    from fairseq import checkpoint_utils

    ckpt, log = mht_init
    assert "source-side sentence encoder: initialised from the encoder of" in log
    assert "target-side sentence encoder: initialised from the encoder of" in log
    table = log[log.index("mht_transformer parameters"):].splitlines()
    total = next(l for l in table if l.startswith("| total |")).split("|")
    sentence = [l.split("|") for l in table[:12] if "sentence encoder" in l]
    assert len(sentence) == 4 and all(r[3].strip() == "0" for r in sentence)
    assert all(int(r[2].strip().replace(",", "")) > 0 for r in sentence)
    assert int(total[2].strip().replace(",", "")) > int(total[3].strip().replace(",", "")) > 0
    state = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))
    mht = state["model"]
    args = state["cfg"]["model"]
    assert args.draft_path == str(sentence_ckpts["fwd"]) and args.src_sentence_encoder_from is None
    # frozen through training: still the sentence models' tensors
    for name, side in (("fwd", "src"), ("bwd", "tgt")):
        sent = checkpoint_utils.load_checkpoint_to_cpu(str(sentence_ckpts[name]))["model"]
        keys = [k for k in sent if k.startswith("encoder.") and "version" not in k and "_float_tensor" not in k]
        assert len(keys) > 10
        for k in keys:
            mk = f"encoder.{side}_sentence_encoder." + k[len("encoder."):]
            assert torch.equal(mht[mk], sent[k]), mk


def test_sentence_encoder_initialisation_keeps_a_shared_table(mht_bin, sentence_ckpts, capsys):
    """With --mht-sentence-encoder-embeddings model the initialisation loads the sentence
    encoders' layers and keeps the model's tables (reported); with only the source-side one
    initialised, --freeze-sentence-encoders initialised fixes that one and trains the other."""
    from fairseq.data.dictionary import Dictionary

    d = Dictionary.load(str(mht_bin / "dict.src.txt"))
    for embeddings in ("model", "own"):
        model, _ = _model(dim=32, layers=1, dictionary=d, mht_sentence_encoder_embeddings=embeddings,
                          src_sentence_encoder_from=str(sentence_ckpts["fwd"]))
        log = capsys.readouterr().out
        bare, _ = _model(dim=32, layers=1, dictionary=d, mht_sentence_encoder_embeddings=embeddings)
        src, bare_src = model.encoder.src_sentence_encoder, bare.encoder.src_sentence_encoder
        assert "loaded" in log
        # the same seed: the layers differ from the bare model's by the initialisation only
        assert not torch.equal(src.layers[0].fc1.weight, bare_src.layers[0].fc1.weight)
        if embeddings == "model":
            assert "kept: embed_tokens.weight (the model's table" in log
            assert torch.equal(src.embed_tokens.weight, bare_src.embed_tokens.weight)  # untouched
        else:
            assert "kept:" not in log
            assert not torch.equal(src.embed_tokens.weight, bare_src.embed_tokens.weight)
        assert model.encoder.frozen_sides == ("source",)
        assert not any(p.requires_grad for n, p in src.named_parameters() if "embed_tokens" not in n)
        assert all(p.requires_grad for p in model.encoder.tgt_sentence_encoder.layers.parameters())
        assert model.encoder.embed_tokens.weight.requires_grad  # the model's table trains


def test_trained_model_generates_every_sentence_once(mht_bin, tmp_path):
    """fairseq-generate with beam 4 and ordinary batches (no document order) returns
    every test sentence exactly once; the loss falls."""
    p = _train(mht_bin, tmp_path, "--context-size", "2", "--context-sides", "src,draft", epochs=6)
    losses = [float(l.split(" loss ")[1].split(" ")[0]) for l in p.stdout.splitlines()
              if "| train |" in l and "train_wall" in l]
    assert losses[-1] < losses[0]
    g = run(["fairseq-generate", mht_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--path", tmp_path / "checkpoint_last.pt", "--beam", "4", "--batch-size", "7",
             "--required-batch-size-multiple", "1", "--gen-subset", "test", "--cpu"])
    ids = sorted(int(l.split("\t")[0][2:]) for l in g.stdout.splitlines() if l.startswith("H-"))
    from fairseq.data import data_utils
    from fairseq.data.dictionary import Dictionary

    src = data_utils.load_indexed_dataset(str(mht_bin / "test.src-tgt.src"), Dictionary.load(str(mht_bin / "dict.src.txt")))
    assert ids == list(range(len(src)))
    assert "document order" not in g.stderr


@pytest.mark.slow  # ~23 s: make test-all
def test_docctx_translate_makes_drafts_on_the_fly(mht_init, mht_bin, sentence_ckpts, tmp_path):
    """Raw documents in, translations out in one command: docctx-translate (and the hub)
    translate every sentence with the draft model the checkpoint records, then decode; the
    result equals fairseq-generate's on the binarized split whose drafts docctx-drafts made
    with the same model and beam. A model that records no draft model needs --draft-path."""
    import shutil

    from fairseq_docctx.inference.drafts import make_drafts

    ckpt, _ = mht_init
    data = tmp_path / "bin"
    shutil.copytree(mht_bin, data)
    make_drafts(str(data), str(sentence_ckpts["fwd"]), splits=("test",), beam=2, batch_size=8, cpu=True)
    g = run(["fairseq-generate", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--path", ckpt, "--beam", "3", "--batch-size", "8", "--required-batch-size-multiple", "1",
             "--max-len-a", "1.2", "--max-len-b", "10", "--gen-subset", "test", "--cpu"])
    expected = dict(sorted((int(l.split("\t")[0][2:]), l.split("\t")[2]) for l in g.stdout.splitlines()
                           if l.startswith("H-")))
    src = tmp_path / "test.txt"
    from fairseq.data import data_utils
    from fairseq.data.dictionary import Dictionary

    d = Dictionary.load(str(data / "dict.src.txt"))
    lines = [d.string(t) for t in data_utils.load_indexed_dataset(str(data / "test.src-tgt.src"), d)]
    docs = [l.split("\t")[0] for l in (data / "test.src-tgt.docs").read_text().splitlines()]
    sizes = [int(l.split("\t")[1]) for l in (data / "test.src-tgt.docs").read_text().splitlines()]
    src.write_text("\n".join(lines) + "\n")
    (tmp_path / "test.docids").write_text("".join(f"{doc}\n" * n for doc, n in zip(docs, sizes)))
    out = tmp_path / "out.txt"
    run(["docctx-translate", src, "--path", ckpt, "--data", data, "--input-format", "docids",
         "--docids", tmp_path / "test.docids", "--beam", "3", "--draft-beam", "2", "--batch-size", "8", "--cpu", "--quiet", "-o", out])
    assert out.read_text().splitlines() == [expected[i] for i in range(len(lines))]
    # without a recorded draft model: one line, exit 2
    state = torch.load(ckpt, weights_only=False)
    state["cfg"]["model"].draft_path = None
    bare = tmp_path / "bare.pt"
    torch.save(state, bare)
    p = run(["docctx-translate", src, "--path", bare, "--data", data,
             "--input-format", "docids", "--docids", tmp_path / "test.docids", "--cpu", "--quiet"], check=False)
    errors = [l for l in p.stderr.splitlines() if "error" in l]
    assert p.returncode == 2 and len(errors) == 1 and "--draft-path" in errors[0]
    assert errors[0].startswith("docctx-translate: error:")


@pytest.mark.parametrize("module", MODULES)
def test_a_batch_of_first_sentences(module):
    """Sentences without any previous sentence (a batch of document starts): no hop runs,
    the output equals that of the same rows with context elsewhere in the batch, and beam
    search's incremental path agrees."""
    model, d = _model(mht_context_module=module)
    src, lengths, prev, ctx = _batch(d)
    rows = torch.tensor([0, 3])
    sub = cb.select_rows(ctx, rows)
    with torch.no_grad():
        alone = model(src[rows], lengths[rows], prev[rows], context=sub)[0]
        full = model(src, lengths, prev, context=ctx)[0]
        enc = model.encoder(src[rows], src_lengths=lengths[rows], context=sub)
        assert (enc["mht_tgt_index"][0] < 0).all()  # nothing to hop over
        state, steps = {}, []
        for t in range(prev.size(1)):
            steps.append(model.decoder(prev[rows, : t + 1], encoder_out=enc, incremental_state=state)[0][:, -1])
    assert torch.isfinite(alone).all()
    torch.testing.assert_close(alone, full[rows], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(steps, 1), alone, atol=1e-5, rtol=1e-5)
