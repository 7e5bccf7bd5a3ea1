"""concat_transformer with target context decodes from fairseq's incremental state: the prefix
(previous target sentences) is run once per sentence, then one token per beam-search step.
Its outputs must be those of the full run over ``prefix + tokens so far`` at every step (how
the decoder ran before the cache, and how it still runs under teacher forcing)."""
import argparse
import random

import pytest
import torch
from fairseq.models.transformer import base_architecture

from conftest import REPO, TINY_MODEL, run, toy_dictionary
from fairseq_docctx.models.concat_transformer import ConcatContextDecoder, ConcatTransformerModel


def _model(layers=2, learned=False, max_positions=256):
    d = toy_dictionary()

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_separator="<sep>")

    args = argparse.Namespace(
        encoder_layers=1, decoder_layers=layers, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True,
        max_source_positions=256, max_target_positions=max_positions,
        decoder_learned_pos=learned,
    )
    base_architecture(args)
    torch.manual_seed(0)
    model = ConcatTransformerModel.build_model(args, Task())
    if learned:  # fairseq zero-initialises nothing but padding: make positions matter
        torch.nn.init.normal_(model.decoder.embed_positions.weight, std=1.0)
    return model.eval(), d


def _batch(d):
    """Four rows whose target prefixes have 9, 0, 4 and 6 tokens (K=3, farthest first)."""
    eos, pad = d.eos(), d.pad()
    src = torch.tensor([[10, 11, 12, eos], [13, 14, 15, eos], [16, 17, 18, eos], [19, 20, 21, eos]])
    table = torch.tensor([[22, 23, 24, eos], [25, eos, pad, pad], [26, 27, eos, pad]])
    ctx = {"tgt_tokens": table,
           "tgt_index": torch.tensor([[2, 1, 0], [-1, -1, -1], [1, 1, -1], [0, 1, -1]])}
    return src, torch.tensor([4, 4, 4, 4]), ctx


@pytest.mark.parametrize("learned", [False, True], ids=["sinusoidal", "learned"])
@pytest.mark.parametrize("max_positions", [256, 14], ids=["fits", "prefix-cut-midway"])
def test_cached_steps_equal_full_run_under_beam_reordering(learned, max_positions):
    """Four sentences, beam 2, step by step with beam search's reorderings (each sentence's
    rows redrawn from its own beams; at step 5 sentence 1 finishes and leaves the batch): the
    newest position's output equals the full run's. With ``max_target_positions`` 14 the
    longest row outgrows it midway, where the full run cuts the earliest prefix tokens:
    decoding then goes on without the cache, still exact."""
    model, d = _model(learned=learned, max_positions=max_positions)
    src, src_lengths, ctx = _batch(d)
    g = torch.Generator().manual_seed(1)
    beams = torch.arange(4).repeat_interleave(2)  # row -> sentence
    hist = torch.randint(5, 35, (8, 8), generator=g)
    hist[:, 0] = d.eos()
    prefix_len = torch.tensor([9, 0, 4, 6]).index_select(0, beams)  # follows the rows
    widths = []
    hook = model.decoder.embed_tokens.register_forward_hook(
        lambda m, inp, out: widths.append(inp[0].size(1)))
    without_cache = False
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths, context=ctx)
        enc = model.encoder.reorder_encoder_out(enc, beams)
        state = {}
        for t in range(1, hist.size(1) + 1):
            if t > 1:
                sents = beams.unique().tolist()
                if t == 5:
                    sents.remove(1)
                # fairseq's reorder: the new row j of sentence s is one of s's current rows
                old_rows = {s: (beams == s).nonzero().flatten() for s in sents}
                order = torch.cat([old_rows[s][torch.randint(0, 2, (2,), generator=g)]
                                   for s in sents])
                enc = model.encoder.reorder_encoder_out(enc, order)
                model.decoder.reorder_incremental_state_scripting(state, order)
                hist, prefix_len = hist.index_select(0, order), prefix_len.index_select(0, order)
                beams = beams.index_select(0, order)
            widths.clear()
            out, extra = model.decoder(hist[:, :t], encoder_out=enc, incremental_state=state)
            step_widths = list(widths)
            ref, ref_extra = model.decoder(hist[:, :t], encoder_out=enc)
            torch.testing.assert_close(out[:, -1], ref[:, -1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(extra["attn"][0][:, -1], ref_extra["attn"][0][:, -1],
                                       atol=1e-5, rtol=1e-5)
            # the tokens the decoder embedded in this call: the prefix (9 tokens at most) and
            # the first token once, then one token a step, until a row outgrows the limit
            longest = int(prefix_len.max()) + t
            without_cache = without_cache or longest > max_positions
            if without_cache:
                expected = min(longest, max_positions)
            else:
                expected = longest if t == 1 else 1
            assert step_widths == [expected], (t, step_widths, expected)
    assert without_cache == (max_positions == 14)
    hook.remove()


def test_cache_without_any_prefix_token():
    """A batch whose rows have no previous sentence: the cached run is the plain decoder's."""
    model, d = _model()
    src, src_lengths, ctx = _batch(d)
    ctx["tgt_index"] = torch.full((4, 3), -1)
    hist = torch.tensor([[d.eos(), 7, 8, 9]] * 4)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths, context=ctx)
        plain = model.encoder(src, src_lengths=src_lengths)
        state = {}
        for t in range(1, 5):
            out, _ = model.decoder(hist[:, :t], encoder_out=enc, incremental_state=state)
            ref, _ = model.decoder(hist[:, :t], encoder_out=plain)
            torch.testing.assert_close(out[:, -1], ref[:, -1], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ trained models, beam search
def _toy_docs(lengths, seed=5):
    rng = random.Random(seed)
    return [[" ".join(rng.choice([f"w{i}" for i in range(30)]) for _ in range(rng.randint(2, 9)))
             for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def concat_trained_ckpt(toy_bin, tmp_path_factory):
    """concat_transformer, 2 decoder layers, K=3 on both sides, trained until its outputs
    differ in length (30 epochs of the toy data, ~30 s): in document order the rows of a
    batch then have target prefixes of different lengths."""
    save = tmp_path_factory.mktemp("concat_trained")
    model = list(TINY_MODEL)
    model[model.index("--decoder-layers") + 1] = "2"
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx",
         "--task", "document_translation", "--context-size", "3", "--context-sides", "both",
         "--arch", "concat_transformer", *model, "--max-tokens", "600",
         "--max-epoch", "30", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.mark.slow  # a trained model (~37 s): make test-all; the cached steps are checked above
def test_beam_search_outputs_equal_full_recomputation(concat_trained_ckpt, toy_bin, monkeypatch):
    """Document-order beam search (own translations as target context, documents side by side,
    beam 4, all hypotheses): tokens and scores equal those of the decoder that re-runs the
    whole prefix and hypothesis at every step (the implementation before the cache)."""
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(concat_trained_ckpt, data=str(toy_bin))
    docs = [[hub.encode(s) for s in doc] for doc in _toy_docs([7, 1, 5, 9, 3, 6])]
    kw = dict(beam=4, batch_size=4, max_len_b=12)
    seen = {"uneven prefixes": 0, "cached steps": 0, "full runs": 0}
    real_cached = ConcatContextDecoder._forward_cached

    def counting(self, prev_output_tokens, encoder_out, prefix, incremental_state, **kwargs):
        out = real_cached(self, prev_output_tokens, encoder_out, prefix, incremental_state,
                          **kwargs)
        if prev_output_tokens.size(1) == 1:
            lengths = prefix.ne(hub.tgt_dict.pad()).sum(1)
            seen["uneven prefixes"] += int(lengths.unique().numel() > 1)
        seen["cached steps" if out is not None else "full runs"] += 1
        return out

    monkeypatch.setattr(ConcatContextDecoder, "_forward_cached", counting)
    new = hub.generate_documents(docs, **kw)
    # the comparison means something: rows with prefixes of different lengths side by side,
    # and many steps decoded from the cache
    assert seen["uneven prefixes"] >= 3 and seen["cached steps"] >= 50, seen
    assert not seen["full runs"], seen

    full = ConcatContextDecoder.forward

    def today(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        return full(self, prev_output_tokens, encoder_out, None, **kwargs)  # cache ignored

    monkeypatch.setattr(ConcatContextDecoder, "forward", today)
    seen["cached steps"] = 0
    old = hub.generate_documents(docs, **kw)
    assert seen["cached steps"] == 0
    n_hyps = 0
    for doc_new, doc_old in zip(new, old):
        for hyps_new, hyps_old in zip(doc_new, doc_old):
            assert len(hyps_new) == len(hyps_old) == 4
            for a, b in zip(hyps_new, hyps_old):
                assert a["tokens"].tolist() == b["tokens"].tolist()
                torch.testing.assert_close(a["score"], b["score"], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(a["positional_scores"], b["positional_scores"],
                                           atol=1e-5, rtol=1e-5)
                n_hyps += 1
    assert n_hyps == 4 * 31
