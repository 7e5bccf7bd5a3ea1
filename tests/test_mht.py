"""mht_transformer (Zhang et al. 2021): incremental decoding is exact, every ablation flag
changes the computation the way the paper describes it, rows without context work, the
sentence encoders are initialised from sentence-level checkpoints, and fairseq-generate
decodes a trained model."""
import argparse

import pytest
import torch
from fairseq.models.transformer import base_architecture

from conftest import REPO, TINY_MODEL, assert_incremental_equals_full, run, toy_dictionary
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models.mht_transformer import MHTTransformerModel, mht_transformer

MODULES = ["multi-hop", "concat", "hierarchical"]


def _model(seed=0, **flags):
    d = toy_dictionary()

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_size=3, context_sides="src,ref,draft")

    args = argparse.Namespace(
        encoder_layers=2, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True,
        max_source_positions=256, max_target_positions=256, **flags)
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


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("sides", ["both", "none"])
def test_incremental_decoding_equals_full_run_under_beam_reordering(module, sides):
    """Beam 2, step by step from fairseq's incremental state with beam search's reorderings
    (rows redrawn among the beams of their sentence; sentence 1 leaves the batch at step 3):
    each step's output equals the full teacher-forced run's."""
    model, d = _model(mht_context_module=module, mht_context_sides=sides, seed=3)
    src, lengths, prev, ctx = _batch(d)
    assert_incremental_equals_full(model, src, lengths, prev, ctx, label=(module, sides))


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
    """MHT trained with both sentence encoders initialised and frozen."""
    save = tmp_path_factory.mktemp("mht_init")
    p = _train(mht_bin, save, "--context-size", "2", "--context-sides", "src,draft",
               "--src-sentence-encoder-from", sentence_ckpts["fwd"],
               "--tgt-sentence-encoder-from", sentence_ckpts["bwd"], "--freeze-sentence-encoders", epochs=3)
    return save / "checkpoint_last.pt", p.stdout


def test_sentence_encoders_initialised_and_frozen(mht_init, sentence_ckpts):
    """--src/tgt-sentence-encoder-from copy the encoders of the src->tgt and tgt->src
    checkpoints (printed report; tensors equal); --freeze-sentence-encoders keeps them
    through training; the src->tgt checkpoint is recorded as the model's draft maker."""
    from fairseq import checkpoint_utils

    ckpt, log = mht_init
    assert "source-side sentence encoder: initialised from the encoder of" in log
    assert "target-side sentence encoder: initialised from the encoder of" in log
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


def test_docctx_translate_makes_drafts_on_the_fly(mht_init, mht_bin, sentence_ckpts, tmp_path):
    """Raw documents in, translations out in one command: docctx-translate (and the hub)
    translate every sentence with the draft model the checkpoint records, then decode; the
    result equals fairseq-generate's on the binarized split whose drafts docctx-drafts made
    with the same model and beam. A model that records no draft model needs --draft-path."""
    import shutil

    from fairseq_docctx.data.drafts import make_drafts

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
