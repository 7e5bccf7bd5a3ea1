"""The decoders' causal mask has the padding mask's type: no torch warning about mismatched
masks in teacher-forced runs over padded targets, and the same outputs as fairseq's float mask."""
import warnings

import numpy as np
import torch

from conftest import toy_dictionary
from fairseq_docctx.modules.masks import BoolFutureMask

MISMATCH = "mismatched key_padding_mask and attn_mask"


def _record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught if MISMATCH in str(w.message)]


def test_every_document_decoder_uses_the_bool_future_mask():
    from fairseq_docctx.models.concat_transformer import ConcatContextDecoder
    from fairseq_docctx.models.han_transformer import HANTransformerDecoder
    from fairseq_docctx.models.qcn_transformer import QCNTransformerDecoder

    for cls in (ConcatContextDecoder, HANTransformerDecoder, QCNTransformerDecoder):
        assert issubclass(cls, BoolFutureMask)


def test_bool_future_mask_gives_fairseqs_outputs_without_the_warning():
    from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase

    from fairseq_docctx.models.qcn_transformer import QCNTransformerDecoder

    d = toy_dictionary()
    cfg = TransformerConfig()
    cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim, cfg.decoder.attention_heads = 16, 32, 2
    cfg.decoder.layers, cfg.decoder.output_dim, cfg.decoder.input_dim = 2, 16, 16
    cfg.dropout = 0.0
    torch.manual_seed(0)
    emb = torch.nn.Embedding(len(d), 16, padding_idx=d.pad())
    ours = QCNTransformerDecoder(cfg, d, emb, no_encoder_attn=True).eval()
    plain = TransformerDecoderBase(cfg, d, emb, no_encoder_attn=True).eval()
    plain.load_state_dict(ours.state_dict())
    tokens = torch.tensor([[2, 7, 8, 9, 10], [2, 11, 12, d.pad(), d.pad()]])  # right-padded targets
    with torch.no_grad():
        (x_ours, _), w_ours = _record(lambda: ours(tokens))
        (x_plain, _), w_plain = _record(lambda: plain(tokens))
    assert w_plain and not w_ours  # fairseq's float mask warns, ours does not
    real = tokens.ne(d.pad())
    np.testing.assert_allclose(x_ours[real].numpy(), x_plain[real].numpy(), rtol=0, atol=1e-6)
    # where the mask is added to the weights by fairseq itself, the float mask is kept
    ours.layers[0].self_attn.onnx_trace = True
    assert ours.buffered_future_mask(torch.zeros(3, 1, 16)).dtype == torch.float32


def test_scoring_a_context_model_prints_no_mask_warning(concat_both_ckpt, toy_bin, monkeypatch):
    from fairseq_docctx.evaluation.scoring import load_scorer

    scorer = load_scorer(str(concat_both_ckpt), data=str(toy_bin))
    enc_s = [scorer.tgt_dict.encode_line(s, add_if_not_exist=False) for s in ("w1 w2 w3", "w4", "w5 w6")]
    docs = [([enc_s[0], enc_s[1]], [enc_s[0], enc_s[1]]), ([enc_s[2]], [enc_s[2]]),
            ([enc_s[1], enc_s[2], enc_s[0]], [enc_s[1], enc_s[2], enc_s[0]])]
    ours, caught = _record(lambda: scorer.score_documents(docs))
    assert not caught
    monkeypatch.setattr(BoolFutureMask, "_future_mask_goes_to_torch", lambda self, t: False)
    plain, caught = _record(lambda: scorer.score_documents(docs))
    assert caught  # the float mask: torch's warning (the test can fail)
    for a, b in zip(ours, plain):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, rtol=0, atol=1e-5)
