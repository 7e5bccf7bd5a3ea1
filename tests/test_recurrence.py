"""modules/recurrence: the weights, keys and values a recurrence reads at every step, prepared
once (weights' and values' gradients summed after the steps, packed keys), give the results
and gradients of the plain operations written out per step."""
import pytest
import torch

from fairseq_docctx.modules.recurrence import AttendedValues, AttentionKeys, linear, recurrence


def toy(keys, values, mask, v, w, prepared, steps=5):
    """A toy recurrence that attends at every step with the query from its state: the summed
    squares of its states (a loss)."""
    N, S, A = keys.shape
    if prepared:
        k, vals = AttentionKeys(keys, mask), AttendedValues(values)
    h, loss = keys.new_zeros(N, values.size(-1)), 0
    for _ in range(steps):
        q = h @ w
        if prepared:
            e = k.scores(q, v)
        else:
            e = torch.matmul(torch.tanh(keys + q.unsqueeze(1)), v).masked_fill(mask, float("-inf"))
        alpha = torch.softmax(e, -1)
        c = vals.attend(alpha) if prepared else torch.bmm(alpha.unsqueeze(1), values).squeeze(1)
        h = torch.tanh(c + h)
        loss = loss + h.pow(2).sum()
    return loss


@pytest.mark.parametrize("lengths", [[6, 6, 5, 6], [6, 1, 2, 3, 1]], ids=["padded", "packed"])
def test_same_loss_and_gradients_as_the_plain_attention(lengths):
    g = torch.Generator().manual_seed(0)
    N, S, A, C = len(lengths), max(lengths), 4, 3
    mask = torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]
    leaves = [torch.randn(N, S, A, generator=g), torch.randn(N, S, C, generator=g),
              torch.randn(A, generator=g), torch.randn(C, A, generator=g)]
    results = []
    for prepared in (False, True):
        xs = [x.clone().requires_grad_() for x in leaves]
        loss = toy(xs[0], xs[1], mask, xs[2], xs[3], prepared)
        results.append((loss.detach(), torch.autograd.grad(loss, xs)))
    assert AttentionKeys(leaves[0], mask).packed == (lengths[1] == 1)
    (plain, plain_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, plain)
    for a, b in zip(fast_grads, plain_grads):
        assert b.abs().sum() > 0
        torch.testing.assert_close(a, b)


def test_values_gradient_deferred_only_where_autograd_records():
    values = torch.randn(2, 3, 4, requires_grad=True)
    assert AttendedValues(values).token is not None
    with torch.no_grad():
        assert AttendedValues(values).token is None
    assert AttendedValues(values.detach()).token is None


def test_repeated_backward_does_not_reuse_a_step():
    """A second forward and backward pass through new prepared values gives the same gradient
    (nothing of the first pass is left in the store)."""
    values = torch.randn(2, 3, 4, requires_grad=True)
    alpha = torch.softmax(torch.randn(2, 3), -1)
    grads = []
    for _ in range(2):
        av = AttendedValues(values)
        (av.attend(alpha).sum() + av.attend(alpha).pow(2).sum()).backward()
        grads.append(values.grad.clone())
        values.grad = None
    torch.testing.assert_close(grads[0], grads[1])
    c = torch.bmm(alpha.unsqueeze(1), values).squeeze(1).detach()
    torch.testing.assert_close(grads[0], alpha.unsqueeze(-1) * (1 + 2 * c).unsqueeze(1))  # ∂(Σc + Σc²)/∂values


@pytest.mark.parametrize("bias", [True, False])
def test_linear_in_a_recurrence_same_as_plain(bias):
    """A GRU-like recurrence whose weights are read at every step through ``linear``: the
    same states and gradients (weights, bias, input, initial state) as ``F.linear``; the
    weight's gradient is not computed step by step (no per-step product in the backward
    pass of the steps)."""
    g = torch.Generator().manual_seed(0)
    W, U = torch.randn(6, 4, generator=g), torch.randn(6, 6, generator=g)
    b = torch.randn(6, generator=g) if bias else None
    xs, h0 = torch.randn(7, 3, 4, generator=g), torch.randn(3, 6, generator=g)
    results = []
    for deferred in (False, True):
        leaves = [t.clone().requires_grad_() for t in (W, U, xs, h0) + ((b,) if bias else ())]
        w, u, x, h = leaves[:4]
        bb = leaves[4] if bias else None
        step = linear if deferred else torch.nn.functional.linear
        with recurrence():
            outs = []
            for t in range(x.size(0)):
                h = torch.tanh(step(x[t], w, bb) + step(h, u))
                outs.append(h)
        loss = torch.stack(outs).pow(2).sum()
        results.append((loss.detach(), torch.autograd.grad(loss, leaves)))
    (plain, plain_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, plain)
    for a, b_ in zip(fast_grads, plain_grads):
        torch.testing.assert_close(a, b_)


def test_linear_outside_a_recurrence_or_without_autograd_is_plain():
    w = torch.randn(3, 2, requires_grad=True)
    x = torch.randn(4, 2)
    assert linear(x, w).grad_fn.name() == torch.nn.functional.linear(x, w).grad_fn.name()
    with recurrence(), torch.no_grad():
        assert linear(x, w).grad_fn is None
    with recurrence():
        assert "_Linear" in linear(x, w).grad_fn.name()
