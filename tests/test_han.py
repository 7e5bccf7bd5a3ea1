"""han_transformer: the HAN module, the five configurations, efficiency, inference cache,
two-stage training."""
import argparse
import re

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset

from conftest import REPO, TINY_MODEL, run, toy_document_batch
from conftest import toy_dictionary as _dict
from fairseq_docctx.data.doc_index import DocIndex
from fairseq_docctx.data.document_dataset import DocumentPairDataset
from fairseq_docctx.modules.han import HierarchicalAttention

CONFIGS = {  # the paper's five configurations: (--han-encoder, --han-decoder)
    "encoder": (True, "none"),
    "decoder": (False, "target"),
    "decoder_source": (False, "source"),
    "decoder_alignment": (False, "alignment"),
    "joint": (True, "target"),
}


def han_probe_args(config):
    """fairseq-train arguments of one configuration (also used by the context probe's
    fixtures, ``tests/probe_fixtures.py``)."""
    enc, dec = CONFIGS[config]
    sides = "both" if dec in ("target", "alignment") else "source"
    return ["--task", "document_translation", "--context-size", "3", "--context-sides", sides,
            "--arch", "han_transformer", "--han-encoder", str(enc), "--han-decoder", dec]


# ------------------------------------------------------------------ HAN module
def _han_inputs(seed=0, T=4, B=3, U=5, L=6, C=16):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(T, B, C, generator=g)
    values = torch.randn(U, L, C, generator=g)
    pad = torch.zeros(U, L, dtype=torch.bool)
    pad[torch.arange(U), :] = torch.arange(L)[None, :] < torch.arange(U)[:, None] % 3  # left pad
    index = torch.tensor([[-1, -1, -1], [0, -1, -1], [1, 2, 3]])
    return h, values, pad, index


def test_han_module_masking():
    torch.manual_seed(0)
    han = HierarchicalAttention(16, 2, 32, dropout=0.0).eval()
    h, values, pad, index = _han_inputs()
    out = han(h, values, pad, index)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, 0], h[:, 0])  # no context sentence: h unchanged
    assert not torch.allclose(out[:, 1:], h[:, 1:])
    # padding invariance: more padding words / garbage in padded positions change nothing
    extra = torch.randn(values.size(0), 3, 16)
    out2 = han(h, torch.cat([extra, values], 1), torch.cat([torch.ones(5, 3, dtype=torch.bool), pad], 1), index)
    torch.testing.assert_close(out2, out)
    # a missing sentence (-1) takes no part, whatever row 0 holds
    values3 = values.clone()
    values3[4] = 1e4
    torch.testing.assert_close(han(h, values3, pad, index), out)
    # the order of the table rows does not matter, only what the index points at
    perm = torch.tensor([4, 3, 2, 1, 0])
    inv = torch.argsort(perm)
    torch.testing.assert_close(han(h, values[perm], pad[perm], torch.where(index >= 0, inv[index.clamp(min=0)], index)), out)
    # gradients are finite (no softmax over an all-masked row)
    hh = h.clone().requires_grad_()
    vv = values.clone().requires_grad_()
    han(hh, vv, pad, index).sum().backward()
    assert torch.isfinite(hh.grad).all() and torch.isfinite(vv.grad).all()
    assert vv.grad[4].abs().sum() == 0 and vv.grad[pad].abs().sum() == 0


def test_han_incremental_matches_full_and_survives_beam_reordering():
    """Incremental decoding keeps the projected context; beam reordering (within the beams
    of a sentence, which share the context, and when finished sentences leave) is exact."""
    torch.manual_seed(0)
    han = HierarchicalAttention(16, 2, 32, dropout=0.0).eval()
    h, values, pad, _ = _han_inputs(B=6)
    index = torch.tensor([[0, 1, -1]] * 2 + [[2, -1, -1]] * 2 + [[-1, -1, -1]] * 2)  # 3 sentences x beam 2
    state = {}
    step0 = han(h[:1], values, pad, index, incremental_state=state)
    torch.testing.assert_close(step0, han(h[:1], values, pad, index))
    for order in (torch.tensor([1, 1, 3, 2, 4, 5]), torch.tensor([2, 3, 4, 5])):  # reorder, shrink
        han.word_attn.reorder_incremental_state(state, order)
        h, index = h[:, order], index[order]
        step = han(h[1:2], None, None, index, incremental_state=state)
        torch.testing.assert_close(step, han(h[1:2], values, pad, index))


# ------------------------------------------------------------------ the model
def build(d, config="joint", context_sides="both", **over):
    from fairseq_docctx.models.han_transformer import HANTransformerModel

    enc, dec = CONFIGS[config]

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_separator="<sep>", context_sides=context_sides)

    args = argparse.Namespace(
        encoder_layers=1, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True,
        max_source_positions=128, max_target_positions=128, han_encoder=enc, han_decoder=dec,
    )
    for k, v in over.items():
        setattr(args, k, v)
    torch.manual_seed(0)
    return HANTransformerModel.build_model(args, Task())


def batch(d, doc_lengths, seed=0, sides="both"):
    return toy_document_batch(d, doc_lengths, seed, sides)


def sides_of(config):
    return "both" if CONFIGS[config][1] in ("target", "alignment") else "source"


def han_params(model, part):
    return {n: p for n, p in model.named_parameters() if n.startswith(part + ".han.")}


def han_parameter_count(C, F):
    """Parameters of one HAN of width ``C`` and FFN size ``F`` (Miculicich et al. 2018,
    §2.1-2.2): ``f_w``, ``f_s`` (Eqs. 3, 5), the word- and sentence-level multi-head
    attentions (Eqs. 4, 6: four C×C projections each), the normalization after each level and
    after the FFN, the FFN, and the gate ``[W_h; W_d]`` (Eq. 7; with a bias)."""
    return 2 * (C * C + C) + 2 * 4 * (C * C + C) + 3 * 2 * C + (2 * C * F + F + C) + (2 * C * C + C)


NAMED_ARCHS = {  # named architecture: (HAN encoder, HAN decoder)
    "han_transformer": (True, "target"),
    "han_encoder_transformer": (True, "none"),
    "han_decoder_transformer": (False, "target"),
    "han_decoder_source_transformer": (False, "source"),
    "han_decoder_alignment_transformer": (False, "alignment"),
}


@pytest.mark.parametrize("arch", list(NAMED_ARCHS))
def test_named_architectures_build_the_papers_sizes(arch):
    """Miculicich et al. (2018), §3.2: Transformer base (6+6 layers, 512, FFN 2048, 8 heads,
    dropout 0.1; post-norm, as Vaswani et al. 2017), k = 3, 30K vocabulary; the named
    architecture of each configuration (§2.3) builds that Transformer (the same parameters as
    fairseq's ``transformer``) plus one HAN (two for the joint model) of the paper's size."""
    from fairseq.models.transformer import TransformerModel

    from conftest import count_parameters, paper_size_model
    from fairseq_docctx.models.han_transformer import HANTransformerModel

    model, a = paper_size_model(HANTransformerModel, arch, context_sides="both")
    assert (a.encoder_layers, a.decoder_layers, a.encoder_embed_dim, a.decoder_embed_dim) == (6, 6, 512, 512)
    assert (a.encoder_ffn_embed_dim, a.decoder_ffn_embed_dim) == (2048, 2048)
    assert (a.encoder_attention_heads, a.decoder_attention_heads, a.han_attention_heads) == (8, 8, 8)
    assert (a.dropout, a.attention_dropout, a.han_ffn_embed_dim, a.han_context_size) == (0.1, 0.0, 2048, 3)
    assert not a.encoder_normalize_before and not a.decoder_normalize_before
    assert (bool(a.han_encoder), a.han_decoder) == NAMED_ARCHS[arch]
    assert not a.han_context_grad
    hans = int(NAMED_ARCHS[arch][0]) + int(NAMED_ARCHS[arch][1] != "none")
    if arch == "han_transformer":  # fairseq's transformer at these sizes, built once
        assert count_parameters(paper_size_model(TransformerModel, "transformer")[0]) == 59_498_496
    assert count_parameters(model, lambda n: ".han." not in n) == 59_498_496
    assert count_parameters(model, lambda n: ".han." in n) == hans * han_parameter_count(512, 2048) == hans * 5_254_144


@pytest.mark.parametrize("config", list(CONFIGS))
def test_forward_backward_each_configuration(config):
    d = _dict()
    model = build(d, config)
    model.train()
    sample = batch(d, [1, 2, 3, 4, 5], sides=sides_of(config))
    out = model.unpack_logits(model(**sample["net_input"]))
    assert out.shape[:2] == sample["target"].shape and torch.isfinite(out).all()
    lprobs = model.get_normalized_probs((out, {}), log_probs=True)
    torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                                 ignore_index=d.pad()).backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    enc, dec = CONFIGS[config]
    for part, on in (("encoder", enc), ("decoder", dec != "none")):
        params = han_params(model, part)
        assert bool(params) == on
        for name, p in params.items():
            if "sent_attn.q_proj" in name or "sent_attn.k_proj.bias" in name:
                continue  # softmax over sentences: invariant to these in the 1-query case
            assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("config", list(CONFIGS))
def test_same_output_as_decoding_each_sentence_with_its_own_context(config):
    """The batched scheme (table encoded once, decoder teacher-forced once over the target
    table) gives what the straightforward computation gives, and the loss does not depend
    on the current sentence's own row being present as anyone's context."""
    d = _dict()
    model = build(d, config).eval()
    sample = batch(d, [3, 2], sides=sides_of(config))
    ni = sample["net_input"]
    fast, _ = model(**ni)
    # straightforward: the generator's path (no training-time reuse of the current rows)
    enc_out = model.encoder(ni["src_tokens"], ni["src_lengths"], context=ni["context"])
    slow, _ = model.decoder(ni["prev_output_tokens"], encoder_out=enc_out)
    real = sample["target"].ne(d.pad())  # padded positions: ignored by every criterion
    assert (~real).any() and real.any()
    torch.testing.assert_close(fast[real], slow[real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("config", ["joint", "decoder_alignment"])
def test_training_output_is_packed_and_gives_the_padded_loss(config):
    """In training mode the logits of the real target positions come packed ``[1, R, V]``
    and ``get_targets`` hands the criterion the matching targets: fairseq's label-smoothed
    loss and its gradients equal those of the padded ``[B, T, V]`` output (eval layout)."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    d = _dict()
    model = build(d, config)  # dropout 0: train and eval modes compute the same
    sample = batch(d, [4, 3], seed=3, sides=sides_of(config))
    sample["ntokens"] = int(sample["target"].ne(d.pad()).sum())

    class Task:
        target_dictionary = d

    crit = LabelSmoothedCrossEntropyCriterion(Task(), sentence_avg=False, label_smoothing=0.1,
                                              report_accuracy=True)
    results = {}
    for mode in ("train", "eval"):
        getattr(model, mode)()
        model.zero_grad()
        out = model(**sample["net_input"])
        if mode == "train":
            real = sample["target"].ne(d.pad())
            assert out[0].shape == (1, int(real.sum()), len(d))
            assert model.get_targets(sample, out).tolist() == [sample["target"][real].tolist()]
            torch.testing.assert_close(model.unpack_logits(out)[real], out[0][0])
        else:
            assert out[0].shape[:2] == sample["target"].shape
        loss, _, log = crit(model, sample)
        loss.backward()
        results[mode] = (loss.detach(), log["nll_loss"], log["n_correct"],
                         {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (lt, nt, ct, gt), (le, ne, ce, ge) = results["train"], results["eval"]
    torch.testing.assert_close(lt, le)
    torch.testing.assert_close(nt, ne)
    assert ct == ce
    assert gt.keys() == ge.keys()
    for n in gt:
        torch.testing.assert_close(gt[n], ge[n], atol=1e-6, rtol=1e-5, msg=n)
    model.train()
    out = model(**sample["net_input"])
    bad = dict(sample, target=torch.cat([sample["target"], sample["target"].new_full((sample["target"].size(0), 1), d.pad())], 1)[:, 1:])
    with pytest.raises(ValueError, match="packed output positions"):
        model.get_targets(bad, out)


@pytest.mark.parametrize("config,grad", [("joint", False), ("joint", True), ("decoder_alignment", False),
                                         ("decoder_source", True)])
def test_context_gradient_flag(config, grad):
    """Detached context (default): the loss of a document's second sentence sends no
    gradient into the first sentence's embeddings, except through its own words."""
    d = _dict()
    model = build(d, config, han_context_grad=grad)
    model.train()
    sample = batch(d, [2], sides=sides_of(config))
    ni = sample["net_input"]
    ctx = ni["context"]
    second = int((sample["id"] == 1).nonzero())
    first_src = ctx["src_tokens"][ctx["src_index"][second, 0]]
    calls = []

    def keep(module, inp, out):  # every embedding call (the table runs in length groups)
        out.retain_grad()
        calls.append((inp[0], out))

    h = model.encoder.embed_tokens.register_forward_hook(keep)
    try:
        out = model.unpack_logits(model(**ni))
    finally:
        h.remove()
    out[second].sum().backward()
    # the gradient reaching the embedded words of the first sentence, wherever it was embedded
    want = first_src[first_src.ne(d.pad())].tolist()
    found = [(o.grad[r] if o.grad is not None else torch.zeros(1)).abs().sum()
             for toks, o in calls for r in range(toks.size(0))
             if toks[r][toks[r].ne(d.pad())].tolist() == want]
    assert found  # the first sentence was embedded (once per pass that reads it)
    g = sum(found)
    assert (g > 0) == grad, float(g)
    assert first_src.ne(d.pad()).any()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_each_sentence_encoded_and_decoded_once_per_batch(config):
    d = _dict()
    model = build(d, config)
    model.train()
    sample = batch(d, [5, 4], sides=sides_of(config))
    ctx = sample["net_input"]["context"]
    rows = {"enc": [], "dec": []}
    h1 = model.encoder.layers[0].register_forward_hook(lambda m, i, o: rows["enc"].append(o.size(1)))
    h2 = model.decoder.layers[0].register_forward_hook(lambda m, i, o: rows["dec"].append(o[0].size(1)))
    try:
        model(**sample["net_input"])
    finally:
        h1.remove()
        h2.remove()
    assert rows["enc"] == [ctx["src_tokens"].size(0)]  # one pass over the unique sentences
    n_dec = ctx["tgt_tokens"].size(0) if CONFIGS[config][1] in ("target", "alignment") else 9
    assert rows["dec"] == [n_dec]  # once over the target table, or once over the batch
    assert ctx["src_tokens"].size(0) == 9  # 9 sentences, each a row of the table once


def _toy_task():
    from fairseq_docctx.tasks.document_order import DocumentOrderMemory
    from fairseq_docctx.tasks.document_translation import DocumentTranslationTask
    from fairseq_docctx.tasks.language_tokens import LanguageTokens

    task = DocumentTranslationTask.__new__(DocumentTranslationTask)  # no data needed
    task.cfg = argparse.Namespace(context_size=3, context_sides="both", target_context="hypothesis")
    task.src_dict = task.tgt_dict = _dict()
    task.language_tokens, task.document_order = LanguageTokens(task), DocumentOrderMemory(task)
    return task


@pytest.mark.parametrize("config", list(CONFIGS))
def test_inference_cache_gives_the_same_translations_as_recomputing(config):
    """Document-order beam search with the cache (context states of earlier sentences kept
    by ``document_cache_entries``) equals recomputing them from the model's own earlier
    translations (no cache: the encoder re-encodes the table, the decoder teacher-forces the
    hypotheses)."""
    from fairseq.sequence_generator import SequenceGenerator

    d = _dict()
    model = build(d, config).eval()
    lengths = [4, 1, 3]
    rng = np.random.RandomState(1)
    src = [torch.LongTensor(list(rng.randint(5, 35, rng.randint(1, 7))) + [d.eos()]) for _ in range(sum(lengths))]
    pair = LanguagePairDataset(src, [len(s) for s in src], d, tgt_dict=d)
    ds = DocumentPairDataset(pair, DocIndex(["a", "b", "c"], np.array(lengths)), 3, "both",
                             shuffle=False, position_major=True)
    batches = ds.batch_by_size(ds.ordered_indices(), max_sentences=8)
    gen = SequenceGenerator([model], d, beam_size=2, max_len_b=5)
    out, calls, seen_cache = {}, [], []
    for use_cache in (True, False):
        task = _toy_task()
        encoder_forward = model.encoder.forward

        def spy_encoder(*a, context=None, **kw):
            seen_cache.append(use_cache and context is not None and "cache" in context)
            return encoder_forward(*a, context=context, **kw)

        model.encoder.forward = spy_encoder
        try:
            for b in batches:
                sample = ds.collater([ds[int(i)] for i in b])
                if use_cache:
                    hyps = task.inference_step(gen, [model], sample)
                    calls.append(len(task.document_order.cache_entries))
                else:
                    with torch.no_grad():
                        hyps = gen.generate([model], task.document_order.with_translations(sample))
                    for i, sid in enumerate(sample["id"].tolist()):
                        task.document_order.translations[sid] = hyps[i][0]["tokens"]
                for i, sid in enumerate(sample["id"].tolist()):
                    out[use_cache, sid] = hyps[i][0]["tokens"].tolist()
        finally:
            model.encoder.forward = encoder_forward
    assert all(c > 0 for c in calls) and any(seen_cache)
    pos = ds.docs.sent_pos
    for sid in range(sum(lengths)):
        # joint: recomputing applies no HAN encoder to a sentence that is only context (its
        # own context is not in the batch), so from position 2 on the cache is more exact
        if config != "joint" or pos[sid] < 2:
            assert out[True, sid] == out[False, sid], sid


# ------------------------------------------------------- fairseq-train / generate / hub
def _train(toy_bin, save, arch_args, epochs=2, overrides=()):
    return run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", *arch_args,
                *TINY_MODEL, "--max-tokens", "800", "--max-epoch", str(epochs),
                "--no-epoch-checkpoints", "--save-dir", save, *overrides])


@pytest.fixture(scope="module")
def sentence_ckpt(toy_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("han_sent")
    _train(toy_bin, save, ["--task", "document_translation", "--context-size", "0", "--arch", "transformer"], 1)
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def joint_ckpt(toy_bin, sentence_ckpt, tmp_path_factory):
    """Stage 2: the joint HAN initialised from the sentence-level model, sentence weights frozen."""
    save = tmp_path_factory.mktemp("han_joint")
    p = _train(toy_bin, save, [*han_probe_args("joint"), "--init-from-sentence-checkpoint", sentence_ckpt,
                               "--freeze-sentence-weights"])
    return save / "checkpoint_last.pt", p.stdout + p.stderr


def _config_ckpt(toy_bin, tmp_path_factory, config):
    save = tmp_path_factory.mktemp(f"han_{config}")
    _train(toy_bin, save, han_probe_args(config))
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def decoder_ckpt(toy_bin, tmp_path_factory):
    return _config_ckpt(toy_bin, tmp_path_factory, "decoder")


@pytest.fixture(scope="module")
def encoder_ckpt(toy_bin, tmp_path_factory):
    return _config_ckpt(toy_bin, tmp_path_factory, "encoder")


@pytest.fixture(scope="module")
def decoder_source_ckpt(toy_bin, tmp_path_factory):
    return _config_ckpt(toy_bin, tmp_path_factory, "decoder_source")


@pytest.fixture(scope="module")
def decoder_alignment_ckpt(toy_bin, tmp_path_factory):
    return _config_ckpt(toy_bin, tmp_path_factory, "decoder_alignment")


def _load(path):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))["model"]


def test_sentence_checkpoint_initialisation_copies_and_freezes(joint_ckpt, sentence_ckpt):
    path, log = joint_ckpt
    m = re.search(r"initialised from .*: (\d+) loaded, (\d+) new, (\d+) ignored", log)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0
    sent, han = _load(sentence_ckpt), _load(path)
    shared = [k for k in sent if k in han]
    assert len(shared) == int(m.group(1))
    assert all("han." not in k for k in shared) and any("han." in k for k in han)
    for k in shared:  # copied, and unchanged by two epochs of training (frozen)
        assert torch.equal(sent[k], han[k]), k
    assert "new: encoder.han.f_w.weight" in log
    # applied once: the HAN checkpoint restores its own weights without the sentence model
    from fairseq import checkpoint_utils

    cfg = checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["model"]
    assert cfg.init_from_sentence_checkpoint is None and cfg.freeze_sentence_weights


def test_sentence_checkpoint_initialisation_in_memory(sentence_ckpt):
    sent = _load(sentence_ckpt)
    vocab = sent["encoder.embed_tokens.weight"].size(0)
    d = _dict()
    while len(d) < vocab:
        d.add_symbol(f"x{len(d)}")
    model = build(d, "joint", encoder_embed_dim=32, decoder_embed_dim=32, encoder_ffn_embed_dim=64,
                  decoder_ffn_embed_dim=64, decoder_layers=1,
                  init_from_sentence_checkpoint=str(sentence_ckpt), freeze_sentence_weights=True)
    own = model.state_dict()
    for k, v in sent.items():
        if k in own and own[k].shape == v.shape:
            assert torch.equal(own[k], v), k
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".han." in n for n in trainable)


def _updates(ckpt):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))["optimizer_history"][-1]["num_updates"]


@pytest.fixture(scope="module")
def frozen_resume(toy_bin, sentence_ckpt, joint_ckpt, tmp_path_factory):
    """Resume the frozen stage-2 run (``joint_ckpt``: 2 epochs with
    ``--init-from-sentence-checkpoint X --freeze-sentence-weights``) for one more epoch with the
    same command line: (a) fairseq's default resume (``checkpoint_last.pt`` in the save dir);
    (b) ``--restore-file`` into another save dir with ``--lr 0`` (the weights cannot move, so
    they show what the resumed run started from)."""
    import shutil

    stage1 = joint_ckpt[0]
    args = [*han_probe_args("joint"), "--init-from-sentence-checkpoint", sentence_ckpt, "--freeze-sentence-weights"]
    out = {}
    for name, extra in (("default", []), ("lr0", ["--lr", "0"])):
        save = tmp_path_factory.mktemp(f"han_resume_{name}")
        if name == "default":
            shutil.copy(stage1, save / "checkpoint_last.pt")
        else:
            extra = extra + ["--restore-file", stage1]
        p = _train(toy_bin, save, args, epochs=3, overrides=extra)  # after TINY_MODEL's --lr
        out[name] = (save / "checkpoint_last.pt", p.stdout + p.stderr)
    return out


@pytest.mark.slow  # ~21 s: make test-all
@pytest.mark.parametrize("how", ["default", "lr0"])
def test_resume_with_frozen_sentence_weights(how, frozen_resume, joint_ckpt, sentence_ckpt):
    """Resuming a ``--freeze-sentence-weights`` run keeps every sentence-level weight exactly
    equal to the sentence checkpoint's, goes on training the HAN weights from where the run
    stopped (not from a fresh initialisation, not re-initialised from the sentence checkpoint)."""
    path, log = frozen_resume[how]
    stage1 = joint_ckpt[0]
    assert re.search(r"[Ll]oaded checkpoint .*\(epoch 3 @ \d+ updates\)", log)
    assert _updates(path) > _updates(stage1)  # it trained on
    assert "initialised from" not in log  # not applied again over the checkpoint
    sent, before, after = _load(sentence_ckpt), _load(stage1), _load(path)
    assert set(before) == set(after)
    han = [k for k in after if ".han." in k]
    shared = [k for k in after if k in sent]
    assert han and shared and set(han) | set(shared) == set(after)
    for k in shared:
        assert torch.equal(after[k], sent[k]), k
    moved = [k for k in han if not torch.equal(after[k], before[k])]
    if how == "default":  # the HAN weights went on training ...
        assert len(moved) > len(han) // 2, moved
    else:  # ... from the trained ones: with lr 0 nothing moves
        assert moved == []


def _n_test_sentences(toy_bin):
    return sum(int(l.split("\t")[1]) for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines())


def _test_documents(toy_bin):
    """Document of each test sentence id (corpus order)."""
    doc = []
    for i, line in enumerate((toy_bin / "test.src-tgt.docs").read_text().splitlines()):
        doc += [i] * int(line.split("\t")[1])
    return doc


@pytest.mark.parametrize("which,sides", [
    ("joint", "both"),
    # the decoder's (~20 s: make test-all; make test decodes the HAN decoder on the probe,
    # tests/test_context_probe.py)
    pytest.param("decoder", "both", marks=pytest.mark.slow),
    # the decoder's alignment variant (~18 s: make test-all; make test keeps its packed training
    # output and context gradients, and the decoder's generation above)
    pytest.param("decoder_alignment", "both", marks=pytest.mark.slow),
    # source-only models given target context too: document order + cache (~18 s each: make test-all)
    pytest.param("encoder", "both", marks=pytest.mark.slow),
    pytest.param("decoder_source", "both", marks=pytest.mark.slow),
    # source-only models in their usual batching (~17 s each: make test-all; make test decodes
    # the HAN encoder's on the probe, tests/test_context_probe.py)
    pytest.param("encoder", "source", marks=pytest.mark.slow),
    pytest.param("decoder_source", "source", marks=pytest.mark.slow),
])
def test_generate_beam_2_in_document_order(which, sides, request, toy_bin):
    """Every configuration trains (2 epochs of fairseq-train) and fairseq-generate --beam 2
    prints every test sentence exactly once; with target context (``--context-sides both``)
    the sentences of a document come out in document order (position-major batches)."""
    path = request.getfixturevalue(f"{which}_ckpt")
    path = path[0] if isinstance(path, tuple) else path
    p = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "3", "--context-sides", sides,
             "--path", path, "--beam", "2", "--max-tokens", "300", "--max-len-b", "10"])
    ids = [int(m) for m in re.findall(r"^H-(\d+)\t", p.stdout, re.M)]
    doc = _test_documents(toy_bin)
    assert sorted(ids) == list(range(len(doc))) == list(range(_n_test_sentences(toy_bin)))
    if sides == "both":
        # printed batch by batch: a sentence never comes before an earlier one of its document
        for d in set(doc):
            mine = [i for i in ids if doc[i] == d]
            assert mine == sorted(mine), (d, mine)
        assert ids != sorted(ids)  # position-major: not corpus order (several documents)


def test_hub_decoder_uses_the_cache(decoder_ckpt, toy_bin):
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(decoder_ckpt, data=str(toy_bin))
    model = hub.models[0]
    kept, used = [], []
    cacher = model.document_cache_entries
    decoder_pass = model.decoder.context_pass

    def spy_cacher(sample, hypos):
        kept.append(len(hypos))
        return cacher(sample, hypos)

    def spy_pass(prev, enc):
        used.append(prev.size(0))
        return decoder_pass(prev, enc)

    model.document_cache_entries, model.decoder.context_pass = spy_cacher, spy_pass
    try:
        docs = [["w1 w2 w3", "w4 w5", "w6", "w7 w8"], ["w9 w1"], ["w2 w3", "w4"]]
        out = hub.translate_documents(docs, beam=2, max_len_b=6)
    finally:
        del model.document_cache_entries, model.decoder.context_pass
    assert [len(d) for d in out] == [4, 1, 2]
    assert sum(kept) == 7
    # the decoder teacher-forced each translated sentence once (to cache it), nothing else
    assert sum(used) == 7


def test_length_groups_are_chosen_by_cost_and_are_exact(monkeypatch):
    """Table rows run in length groups (less padding); the outputs are those of one padded
    pass, whatever the grouping."""
    import fairseq_docctx.data.length_groups as ht

    # by hand: one group costs 5*30+10 = 160; {5,5,6} + {29,30} cost (3*6+10) + (2*30+10) = 98;
    # three groups {5,5}, {6}, {29,30} cost 20 + 16 + 70 = 106
    groups = ht.length_buckets(torch.tensor([5, 30, 6, 29, 5]), overhead=10)
    assert [sorted(g.tolist()) for g in groups] == [[0, 2, 4], [1, 3]]
    assert len(ht.length_buckets(torch.tensor([5, 30, 6, 29, 5]), overhead=10 ** 6)) == 1

    d = _dict()
    original = ht.length_buckets
    outs = {}
    for config in ("joint", "decoder_alignment"):
        model = build(d, config).eval()
        sample = batch(d, [3, 4, 5], seed=4, sides=sides_of(config))
        for name, overhead in (("one group", 10 ** 6), ("many groups", 0)):
            monkeypatch.setattr(ht, "length_buckets", lambda lengths, overhead=overhead: original(lengths, overhead))
            with torch.no_grad():
                outs[name] = model(**sample["net_input"])[0]
        assert len(original(sample["net_input"]["context"]["src_lengths"], 0)) > 2  # really several groups
        real = sample["target"].ne(d.pad())
        torch.testing.assert_close(outs["many groups"][real], outs["one group"][real], atol=1e-5, rtol=1e-5)


def _drop_rows(sample, keep):
    """The batch restricted to the current rows ``keep``: the other sentences stay in the
    tables as context only (what a document run that starts mid-document looks like)."""
    ni = sample["net_input"]
    ctx = dict(ni["context"])
    for k in ("src_index", "tgt_index", "src_self", "tgt_self"):
        if k in ctx:
            ctx[k] = ctx[k][keep]
    new = {k: v[keep] for k, v in ni.items() if k != "context"}
    new["context"] = ctx
    return {"net_input": new, "target": sample["target"][keep]}


@pytest.mark.parametrize("config", ["joint", "decoder_alignment", "encoder"])
def test_context_only_rows_run_without_autograd(config, monkeypatch):
    """Table rows that are only context (states read detached) are encoded and teacher-forced
    without autograd: same outputs and same gradients as one pass with autograd over all
    rows, and the layers see those rows in passes that record no graph."""
    import fairseq_docctx.modules.table_encoder as te

    d = _dict()
    model = build(d, config)
    model.train()
    sample = batch(d, [5, 4], seed=2, sides=sides_of(config))
    keep = torch.tensor([i for i in range(9) if int(sample["id"][i]) not in (0, 1, 5)])
    sub = _drop_rows(sample, keep)
    ctx = sub["net_input"]["context"]
    assert ctx["src_tokens"].size(0) > keep.numel()  # really context-only rows in the table

    def loss_and_grads():
        model.zero_grad()
        out = model.unpack_logits(model(**sub["net_input"]))
        real = sub["target"].ne(d.pad())
        (out[real] * torch.linspace(-1, 1, out.size(-1))).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def run_and_watch():
        passes = []
        hook = model.encoder.layers[0].register_forward_hook(
            lambda m, i, o: passes.append((o.size(1), torch.is_grad_enabled())))
        try:
            return loss_and_grads(), passes
        finally:
            hook.remove()

    (split_out, split_grads), passes = run_and_watch()
    n_cur, n_all = keep.numel(), ctx["src_tokens"].size(0)
    assert sum(n for n, g in passes if g) == n_cur  # current rows: with autograd
    assert sum(n for n, g in passes if not g) == n_all - n_cur  # the rest: without

    original = te.run_bucketed
    monkeypatch.setattr(te, "run_bucketed", lambda *a, grad_rows=None, **k: original(*a, **k))
    (full_out, full_grads), passes = run_and_watch()
    assert sum(n for n, g in passes if g) == n_all  # the reference: every row with autograd
    torch.testing.assert_close(split_out, full_out, atol=1e-6, rtol=1e-5)
    assert split_grads.keys() == full_grads.keys() and split_grads
    for n in full_grads:
        torch.testing.assert_close(split_grads[n], full_grads[n], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("rows", [7, 40])  # fewer / more query rows than features (C = 16)
def test_sentence_level_without_projecting_the_summaries_equals_multihead_attention(rows):
    """The sentence-level attention computed from W_kᵀq and W_v(Σ p s), with f_s and W_q
    applied as one composed map when there are more rows than features, gives fairseq's
    MultiheadAttention of f_s(h) (missing sentences masked, rows without any context
    unmasked): outputs and gradients of the inputs and of every parameter."""
    torch.manual_seed(0)
    han = HierarchicalAttention(16, 4, 32, dropout=0.0).double()
    N, K, C = rows, 3, 16
    h = torch.randn(N, C, dtype=torch.float64, requires_grad=True)
    s = torch.randn(N, K, C, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(N, K, dtype=torch.bool)
    mask[1, 2] = mask[2, 1:] = True
    weights = torch.randn(N, C, dtype=torch.float64)
    params = [h, s] + list(han.sent_attn.parameters()) + list(han.f_s.parameters())
    got = han._sentence_level(h, s, mask)
    # the key bias shifts every score of a query alike: no gradient (None here, ~0 in fairseq's)
    g_got = torch.autograd.grad((got * weights).sum(), params, allow_unused=True)
    want, _ = han.sent_attn(query=han.f_s(h).unsqueeze(0), key=s.transpose(0, 1), value=s.transpose(0, 1),
                            key_padding_mask=mask, static_kv=True, need_weights=False)
    g_want = torch.autograd.grad((want[0] * weights).sum(), params)
    # (both take the softmax in float32, as fairseq does)
    torch.testing.assert_close(got, want[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(torch.zeros_like(b) if a is None else a, b, rtol=1e-5, atol=1e-6)


def test_chained_projection_composes_only_when_it_saves_work_and_caches():
    """``outer(inner(x))·scale``: the two maps in turn for few rows, one composed map for
    many rows, the composed weights formed once when a cache is given; the same values and
    parameter gradients in every case."""
    from fairseq_docctx.modules.han import chained_projection

    torch.manual_seed(0)
    inner, outer = torch.nn.Linear(8, 8).double(), torch.nn.Linear(8, 8).double()
    params = list(inner.parameters()) + list(outer.parameters())
    for n in (3, 50):
        x = torch.randn(n, 8, dtype=torch.float64)
        want = outer(inner(x)) * 0.5
        g_want = torch.autograd.grad(want.sum(), params)
        cache = {}
        for c in (None, cache, cache):  # no cache; cache filled; cache read
            got = chained_projection(x, outer, inner, 0.5, c, "q")
            torch.testing.assert_close(got, want)
            for a, b in zip(torch.autograd.grad(got.sum(), params, retain_graph=True), g_want):
                torch.testing.assert_close(a, b)
        assert set(cache) == {"q"}
    calls = []
    inner.register_forward_hook(lambda *a: calls.append(1))
    chained_projection(torch.randn(3, 8, dtype=torch.float64), outer, inner)
    chained_projection(torch.randn(50, 8, dtype=torch.float64), outer, inner)
    assert calls == [1]  # the composed map does not call inner on the rows


@pytest.mark.parametrize("padding", ["left", "right", "scattered"])
def test_word_level_in_length_groups_equals_multihead_attention(padding, monkeypatch):
    """The word level (pairs attending in length groups over keys cut to the group's longest
    sentence) gives, per (row, distance), fairseq's MultiheadAttention of f_w(h) over that
    context sentence, outputs and gradients, whatever side the table is padded on."""
    import fairseq_docctx.data.length_groups as lg

    original = lg.length_buckets
    monkeypatch.setattr(lg, "length_buckets", lambda lengths, overhead=0: original(lengths, 0))  # many groups
    torch.manual_seed(0)
    han = HierarchicalAttention(16, 4, 32, dropout=0.0).double()
    T, B, K, U, L, C = 5, 4, 3, 6, 9, 16
    h = torch.randn(T, B, C, dtype=torch.float64, requires_grad=True)
    values = torch.randn(U, L, C, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([9, 2, 5, 3, 7, 1])
    cols = torch.arange(L)[None, :]
    pad = {"left": cols < L - lengths[:, None], "right": cols >= lengths[:, None],
           "scattered": torch.rand(U, L, generator=torch.Generator().manual_seed(1)) < 0.4}[padding]
    pad[:, 4] = False if padding == "scattered" else pad[:, 4]  # every row has a word
    index = torch.tensor([[0, 1, 2], [3, -1, -1], [5, 4, 1], [-1, -1, -1]])
    weights = torch.randn(T, B * K, C, dtype=torch.float64)
    params = [h, values] + list(han.word_attn.parameters()) + list(han.f_w.parameters())
    got = han._word_level(h, values, pad, index)
    present = (index >= 0).view(-1)
    g_got = torch.autograd.grad((got * weights)[:, present].sum(), params)
    want = torch.zeros_like(got)
    for b in range(B):
        for k in range(K):
            r = int(index[b, k])
            if r >= 0:
                o, _ = han.word_attn(query=han.f_w(h[:, b : b + 1]), key=values[r].unsqueeze(1),
                                     value=values[r].unsqueeze(1), key_padding_mask=pad[r][None],
                                     static_kv=True, need_weights=False)
                want[:, b * K + k] = o[:, 0]
    g_want = torch.autograd.grad((want * weights)[:, present].sum(), params)
    torch.testing.assert_close(got[:, present], want[:, present], rtol=1e-5, atol=1e-6)
    assert torch.isfinite(got).all()
    for a, b in zip(g_got, g_want):  # inputs and parameters (f_w and W_q composed: T·B > C)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_packed_output_refuses_ignore_prefix_size(toy_bin):
    """fairseq's criteria cut ``--ignore-prefix-size`` positions off a ``[B, T, V]`` output;
    on a packed output that would drop other sentences' tokens: refused, not done."""
    import fairseq_docctx  # noqa: F401
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(toy_bin), "--task", "document_translation", "--source-lang", "src", "--target-lang", "tgt",
        "--context-sides", "both", "--arch", "han_transformer", "--encoder-layers", "1", "--decoder-layers", "1",
        "--criterion", "label_smoothed_cross_entropy", "--ignore-prefix-size", "1"])
    task = tasks.setup_task(args)
    model = task.build_model(args)
    assert model.packs_training_output
    criterion = task.build_criterion(args)
    with pytest.raises(ValueError, match="--ignore-prefix-size"):
        task.train_step({"net_input": {}}, model, criterion, None, 0)
