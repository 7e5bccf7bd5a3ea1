"""fairseq_docctx.modules.gru: the step-by-step GRU layer equals nn.GRU over packed sequences."""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from fairseq_docctx.modules.gru import packed_positions, run_gru, use_gru_layer


def packed_reference(rnn, x, lengths, h0):
    out, last = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False), h0)
    return pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0], last


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
def test_run_gru_equals_packed_gru_with_gradients(bidirectional, with_h0):
    torch.manual_seed(0)
    rnn = torch.nn.GRU(6, 5, batch_first=True, bidirectional=bidirectional)
    D = 2 if bidirectional else 1
    lengths = torch.tensor([3, 7, 1, 7, 4])
    x = torch.randn(5, 8, 6, requires_grad=True)  # one padded position more than the longest row
    x_ref = x.detach().clone().requires_grad_()
    h0 = torch.randn(D, 5, 5) if with_h0 else None
    weight = torch.randn(5, 8, 5 * D)
    out, last = run_gru(rnn, x, lengths, h0)
    assert use_gru_layer(rnn, x)
    ref_out, ref_last = packed_reference(rnn, x_ref, lengths, h0)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(last, ref_last, atol=1e-6, rtol=1e-5)
    assert out[0, 3:].abs().sum() == 0 and out[:, 7].abs().sum() == 0  # zeros at padding
    ((out * weight).sum() + last.sum()).backward()
    grads = [x.grad] + [p.grad.clone() for p in rnn.parameters()]
    rnn.zero_grad()
    ((ref_out * weight).sum() + ref_last.sum()).backward()
    for g, ref in zip(grads, [x_ref.grad] + [p.grad for p in rnn.parameters()]):
        torch.testing.assert_close(g, ref, atol=1e-5, rtol=1e-4)


def test_run_gru_without_gradients_is_the_packed_gru_and_outputs_can_be_skipped():
    torch.manual_seed(1)
    rnn = torch.nn.GRU(4, 3, batch_first=True)
    x, lengths = torch.randn(3, 5, 4), torch.tensor([5, 2, 4])
    with torch.no_grad():
        assert not use_gru_layer(rnn, x)
        out, last = run_gru(rnn, x, lengths)
    with torch.enable_grad():
        none, last_steps = run_gru(rnn, x, lengths, outputs=False)
    assert none is None
    torch.testing.assert_close(last_steps, last)
    torch.testing.assert_close(out, packed_reference(rnn, x, lengths, None)[0])


def test_run_gru_refuses_a_stacked_gru():
    with pytest.raises(ValueError, match="one layer"):
        run_gru(torch.nn.GRU(2, 2, num_layers=2, batch_first=True), torch.randn(1, 2, 2), torch.tensor([2]))


def test_packed_positions_follow_pack_padded_sequence():
    """The positions :func:`packed_positions` takes from right-padded rows are those
    ``pack_padded_sequence`` packs (forward), and each row read backwards (reverse)."""
    lengths = torch.tensor([2, 5, 1, 5, 3])
    x = torch.arange(5 * 5).view(5, 5, 1).float()
    flat, order, steps = packed_positions(lengths, 5)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    assert steps == packed.batch_sizes.tolist()
    assert torch.equal(x.view(-1, 1)[flat], packed.data)
    flat_r, _, _ = packed_positions(lengths, 5, reverse=True)
    rows, positions = flat_r // 5, flat_r % 5
    assert torch.equal(rows, flat // 5)
    assert torch.equal(positions, lengths[rows] - 1 - flat % 5)
