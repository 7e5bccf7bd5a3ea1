"""Vectorised context concatenation and the concat_transformer decoder prefix."""
import argparse

import torch
from fairseq.data import Dictionary

from fairseq_docctx.modules.context_concat import concat_with_context, pack_segments

PAD, EOS, SEP = 1, 2, 4


def rows(t):
    return [r[r.ne(PAD)].tolist() for r in t]


def test_pack_segments_left_and_right():
    a = torch.tensor([[PAD, 5, 6], [7, 8, 9]])
    b = torch.tensor([[10, PAD], [PAD, PAD]])
    for left in (True, False):
        out, lengths = pack_segments([a, b], PAD, left_pad=left)
        assert rows(out) == [[5, 6, 10], [7, 8, 9]]
        assert lengths.tolist() == [3, 3]
    out, _ = pack_segments([torch.tensor([[PAD, 5]]), torch.tensor([[6, PAD]])], PAD, left_pad=True)
    assert out.tolist() == [[5, 6]]
    out, lengths = pack_segments([torch.tensor([[3, 4, 5, PAD]])], PAD, left_pad=True, max_len=2)
    assert out.tolist() == [[4, 5]] and lengths.tolist() == [2]


def test_concat_with_context_farthest_first_and_masked():
    table = torch.tensor([[PAD, 10, EOS], [11, 12, EOS], [PAD, 13, EOS]])
    current = torch.tensor([[PAD, 20, EOS], [21, 22, EOS]])
    index = torch.tensor([[1, 0], [-1, -1]])  # row 0: prev = table[1], prev-2 = table[0]
    out, lengths = concat_with_context(current, table, index, PAD, EOS, SEP, left_pad=True)
    assert rows(out) == [[10, SEP, 11, 12, SEP, 20, EOS], [21, 22, EOS]]
    assert lengths.tolist() == [7, 3]
    assert out[1, :4].eq(PAD).all()  # left padded


def _tiny_concat_model():
    d = Dictionary()
    d.add_symbol("<sep>")
    for i in range(20):
        d.add_symbol(f"w{i}")
    model = build_concat(d)
    model.eval()
    return model, d


def build_concat(d):
    """A 1+1-layer, 16-dim concat_transformer over dictionary ``d`` (which holds ``<sep>``)."""
    from fairseq.models.transformer import base_architecture

    from fairseq_docctx.models.concat_transformer import ConcatTransformerModel

    class Task:
        source_dictionary = target_dictionary = d
        cfg = argparse.Namespace(context_separator="<sep>")

    args = argparse.Namespace(
        encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True,
        max_source_positions=256, max_target_positions=256,
    )
    base_architecture(args)
    torch.manual_seed(0)
    return ConcatTransformerModel.build_model(args, Task())


def test_decoder_prefix_is_read_but_not_scored():
    """The outputs for the current sentence equal those of a decoder run on the explicit
    concatenation ``prefix + current``, taken at the current sentence's positions."""
    model, d = _tiny_concat_model()
    sep, eos, pad = d.index("<sep>"), d.eos(), d.pad()
    src = torch.tensor([[10, 11, eos], [12, 13, eos]])
    prev = torch.tensor([[eos, 14, 15], [eos, 16, pad]])
    ctx = {
        "tgt_tokens": torch.tensor([[17, 18, eos], [19, eos, pad]]),
        "tgt_index": torch.tensor([[1, 0], [-1, -1]]),
    }
    with torch.no_grad():
        out, _ = model(src, torch.tensor([3, 3]), prev, context=ctx)
        assert out.shape[:2] == prev.shape
        # row 0 by hand: prefix y_{j-2} <sep> y_{j-1} <sep>
        enc = model.encoder(src[:1], src_lengths=torch.tensor([3]))
        full = torch.tensor([[17, 18, sep, 19, sep, eos, 14, 15]])
        ref, _ = model.decoder(full, encoder_out=enc)
        torch.testing.assert_close(out[0], ref[0, 5:])
        # row 1 has no context: same as the plain decoder
        enc = model.encoder(src[1:], src_lengths=torch.tensor([3]))
        ref, _ = model.decoder(prev[1:2, :2], encoder_out=enc)
        torch.testing.assert_close(out[1, :2], ref[0])
        # and the prefix changes the output (it is read)
        no_ctx, _ = model(src, torch.tensor([3, 3]), prev)
        assert not torch.allclose(no_ctx[0], out[0])


def test_prefix_decoding_under_beam_search_matches_training_pass():
    """fairseq's beam search calls the decoder with an incremental state and all tokens so
    far; with a target prefix the last position must equal the teacher-forced output."""
    from fairseq.sequence_generator import SequenceGenerator

    model, d = _tiny_concat_model()
    eos, pad = d.eos(), d.pad()
    src = torch.tensor([[10, 11, eos], [12, 13, eos]])
    ctx = {"tgt_tokens": torch.tensor([[17, 18, eos], [19, eos, pad]]),
           "tgt_index": torch.tensor([[1, 0], [-1, -1]])}
    enc = model.encoder(src, src_lengths=torch.tensor([3, 3]), context=ctx)
    prev = torch.tensor([[eos, 14, 15], [eos, 16, 9]])
    with torch.no_grad():
        full, _ = model.decoder(prev, encoder_out=enc)
        for t in range(1, 4):
            step, _ = model.decoder(prev[:, :t], encoder_out=enc, incremental_state={})
            torch.testing.assert_close(step[:, -1], full[:, t - 1])
        # and the whole of fairseq's beam search runs with the prefix, beam reordering included
        gen = SequenceGenerator([model], d, beam_size=3, max_len_b=5)
        sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([3, 3]), "context": ctx}}
        hyps = gen.generate([model], sample)
        assert len(hyps) == 2 and all(len(h) == 3 for h in hyps)
