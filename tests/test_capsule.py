"""Unit tests for fairseq_docctx.modules.capsule against loop-by-loop reference versions."""
import math

import numpy as np
import pytest
import torch

from fairseq_docctx.modules.capsule import (
    CapsuleLayer,
    dynamic_routing,
    pearson,
    query_guided_routing,
    squash,
)

EPS = 1e-6  # pearson's default epsilon, used by the routing


# ---------------------------------------------------------------- plain references (numpy)
def ref_squash(s):
    n = math.sqrt(float(np.dot(s, s)))
    return np.zeros_like(s) if n == 0 else (n * n / (1 + n * n)) * s / n


def ref_pcc(a, b, eps=EPS):
    ac, bc = a - a.mean(), b - b.mean()
    return float(np.dot(ac, bc)) / (math.sqrt(np.dot(ac, ac)) * math.sqrt(np.dot(bc, bc)) + eps)


def ref_softmax(x):
    e = [math.exp(v - max(x)) for v in x]
    return [v / sum(e) for v in e]


def ref_query_routing(u, u_hat, q, mask, iters):
    """Algorithm 1 line by line of Yang et al. (2019, §3.2), only over the real inputs of each row."""
    B, N, M, D = u_hat.shape
    V = np.zeros((B, M, D))
    C = np.zeros((iters, B, N, M))
    P = np.zeros((iters, B, N, M))
    for b in range(B):
        real = [i for i in range(N) if mask[b, i]]
        alpha = {(i, j): 0.0 for i in real for j in range(M)}
        qs = [q[b].copy() for _ in range(M)]
        p = {(i, j): math.tanh(ref_pcc(u[b, i], qs[j])) for i in real for j in range(M)}
        for t in range(iters):
            c = {}
            for i in real:
                ci = ref_softmax([alpha[i, j] for j in range(M)])
                for j in range(M):
                    c[i, j] = ci[j]
                    C[t, b, i, j], P[t, b, i, j] = ci[j], p[i, j]
            v = []
            for j in range(M):
                s = np.zeros(D)
                for i in real:
                    s = s + (c[i, j] + p[i, j]) * u_hat[b, i, j]
                v.append(ref_squash(s))
            for j in range(M):
                for i in real:
                    alpha[i, j] += p[i, j] * float(np.dot(u_hat[b, i, j], v[j]))
                qs[j] = (qs[j] + v[j]) / 2
                for i in real:
                    p[i, j] = math.tanh(ref_pcc(u[b, i], qs[j]))
            V[b] = np.stack(v)
    return V, C, P


def ref_dynamic_routing(u_hat, mask, iters):
    """Sabour et al. (2017) routing-by-agreement, line by line."""
    B, N, M, D = u_hat.shape
    V = np.zeros((B, M, D))
    C = np.zeros((iters, B, N, M))
    for b in range(B):
        real = [i for i in range(N) if mask[b, i]]
        logit = {(i, j): 0.0 for i in real for j in range(M)}
        for t in range(iters):
            for i in real:
                ci = ref_softmax([logit[i, j] for j in range(M)])
                for j in range(M):
                    C[t, b, i, j] = ci[j]
            v = []
            for j in range(M):
                s = np.zeros(D)
                for i in real:
                    s = s + C[t, b, i, j] * u_hat[b, i, j]
                v.append(ref_squash(s))
            for i in real:
                for j in range(M):
                    logit[i, j] += float(np.dot(u_hat[b, i, j], v[j]))
            V[b] = np.stack(v)
    return V, C


# ---------------------------------------------------------------- fixtures
def make_inputs(seed=0, B=4, N=6, M=3, D=5, padded=True):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    u_hat = torch.randn(B, N, M, D, generator=g, dtype=torch.float64) * 0.5
    q = torch.randn(B, D, generator=g, dtype=torch.float64)
    mask = torch.ones(B, N, dtype=torch.bool)
    if padded:
        mask[1, 4:] = False
        mask[2, :1] = False  # left padding
        mask[2, 5] = False
        mask[3] = False  # no input at all (first sentence of a document)
        # garbage in the padding must not matter
        u = torch.where(mask[..., None], u, torch.full_like(u, 1e3))
        u_hat = torch.where(mask[..., None, None], u_hat, torch.full_like(u_hat, -7e2))
    return u, u_hat, q, mask


# ---------------------------------------------------------------- (1) QCN vs loops
@pytest.mark.parametrize("iters", [1, 2, 4])
@pytest.mark.parametrize("padded", [False, True])
def test_query_routing_matches_loops(iters, padded):
    u, u_hat, q, mask = make_inputs(seed=iters, padded=padded)
    v, c, p = query_guided_routing(u, u_hat, q, mask if padded else None, iters,
                                   return_history=True)
    V, C, P = ref_query_routing(u.numpy(), u_hat.numpy(), q.numpy(), mask.numpy(), iters)
    assert v.shape == (4, 3, 5) and c.shape == p.shape == (iters, 4, 6, 3)
    np.testing.assert_allclose(v.numpy(), V, rtol=0, atol=1e-10)
    np.testing.assert_allclose(c.numpy(), C, rtol=0, atol=1e-10)
    np.testing.assert_allclose(p.numpy(), P, rtol=0, atol=1e-10)
    assert not torch.equal(c[0], c[-1]) or iters == 1  # routing really iterates


# ---------------------------------------------------------------- (2) Sabour vs loops
@pytest.mark.parametrize("iters", [1, 2, 4])
@pytest.mark.parametrize("padded", [False, True])
def test_dynamic_routing_matches_loops(iters, padded):
    _, u_hat, _, mask = make_inputs(seed=10 + iters, padded=padded)
    v, c = dynamic_routing(u_hat, mask if padded else None, iters, return_history=True)
    V, C = ref_dynamic_routing(u_hat.numpy(), mask.numpy(), iters)
    np.testing.assert_allclose(v.numpy(), V, rtol=0, atol=1e-10)
    np.testing.assert_allclose(c.numpy(), C, rtol=0, atol=1e-10)


# ---------------------------------------------------------------- (3) pearson
def test_pearson_matches_corrcoef():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 9)), rng.normal(size=(7, 9))
    got = pearson(torch.from_numpy(a), torch.from_numpy(b), eps=0.0).numpy()
    want = [np.corrcoef(x, y)[0, 1] for x, y in zip(a, b)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    got_eps = pearson(torch.from_numpy(a), torch.from_numpy(b)).numpy()  # default eps
    np.testing.assert_allclose(got_eps, want, atol=1e-5)
    # broadcasting: [3, 1, D] x [1, 4, D] -> [3, 4]; other dims
    x, y = rng.normal(size=(3, 1, 6)), rng.normal(size=(1, 4, 6))
    got = pearson(torch.from_numpy(x), torch.from_numpy(y), eps=0.0).numpy()
    assert got.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert abs(got[i, j] - np.corrcoef(x[i, 0], y[0, j])[0, 1]) < 1e-12
    z = torch.from_numpy(rng.normal(size=(6, 5)))
    np.testing.assert_allclose(pearson(z, z.flip(0), dim=0).numpy(),
                               [np.corrcoef(z[:, k], z.flip(0)[:, k])[0, 1] for k in range(5)],
                               atol=1e-5)
    # invariant to affine maps, sign flips
    t = torch.from_numpy(a)
    assert torch.allclose(pearson(t, 3 * t + 2, eps=0.0), torch.ones(7, dtype=t.dtype))
    assert torch.allclose(pearson(t, -t, eps=0.0), -torch.ones(7, dtype=t.dtype))


def test_pearson_constant_vectors():
    const = torch.full((3, 8), 2.5, requires_grad=True)
    other = torch.randn(3, 8, requires_grad=True)
    r = pearson(const, other)
    assert torch.equal(r, torch.zeros(3))
    r2 = pearson(const, const)
    assert torch.equal(r2, torch.zeros(3))
    ga, gb = torch.autograd.grad((r + r2).sum(), (const, other))
    assert torch.isfinite(ga).all() and torch.isfinite(gb).all()


# ---------------------------------------------------------------- (4) squash
def test_squash():
    s = torch.randn(5, 7, dtype=torch.float64) * torch.tensor([1e-3, 0.1, 1, 10, 1e3])[:, None]
    v = squash(s)
    n_s, n_v = s.norm(dim=-1), v.norm(dim=-1)
    assert (n_v < 1).all()
    torch.testing.assert_close(n_v, n_s**2 / (1 + n_s**2), rtol=1e-9, atol=0)
    torch.testing.assert_close(torch.cosine_similarity(s, v, dim=-1), torch.ones(5, dtype=s.dtype))
    # along another dim
    torch.testing.assert_close(squash(s.t(), dim=0), v.t())
    # optional smoothing of the norm only perturbs by ~eps/(2‖s‖²)
    torch.testing.assert_close(squash(s[1:], eps=1e-12), v[1:], rtol=1e-9, atol=0)
    for eps in (0.0, 1e-12):
        for val in (0.0, 1e-30):  # zero, and values whose square underflows in float32
            z = torch.full((2, 4), val, requires_grad=True)
            out = squash(z, eps=eps)
            assert torch.isfinite(out).all() and out.abs().max() < 1e-30
            (g,) = torch.autograd.grad((out * torch.randn(2, 4)).sum(), z)
            assert torch.isfinite(g).all()


# ---------------------------------------------------------------- (5) empty rows
@pytest.mark.parametrize("routing", ["query", "dynamic"])
def test_all_masked_row_zero_output_finite_grads(routing):
    torch.manual_seed(0)
    B, N, M, D = 2, 5, 4, 6
    u = torch.randn(B, N, D, requires_grad=True)
    u_hat = torch.randn(B, N, M, D, requires_grad=True)
    q = torch.randn(B, D, requires_grad=True)
    mask = torch.tensor([[True, True, True, False, False], [False] * 5])
    if routing == "query":
        v, c, p = query_guided_routing(u, u_hat, q, mask, iters=4, return_history=True)
        loss = v.pow(2).sum() + v.sum() + c.sum() + p.sum()
        inputs = (u, u_hat, q)
    else:
        v, c = dynamic_routing(u_hat, mask, iters=3, return_history=True)
        loss = v.pow(2).sum() + v.sum() + c.sum()
        inputs = (u_hat,)
    assert torch.isfinite(v).all() and torch.equal(v[1], torch.zeros(M, D))
    assert v[0].abs().sum() > 0
    assert torch.equal(c[:, 1], torch.zeros_like(c[:, 1]))
    grads = torch.autograd.grad(loss, inputs)
    for g in grads:
        assert torch.isfinite(g).all()
        assert torch.equal(g[1], torch.zeros_like(g[1]))  # nothing flows into the empty row
    # nothing flows into padded positions of the real row either
    assert torch.equal(grads[0][0, 3:], torch.zeros_like(grads[0][0, 3:]))


def test_half_precision_routes_in_float32():
    torch.manual_seed(0)
    u = torch.randn(2, 5, 8)
    mask = torch.tensor([[True] * 5, [False] * 5])
    for routing in ("query", "dynamic"):
        layer = CapsuleLayer(8, 4, 8, iters=3, routing=routing)
        ref = layer(u, mask, query=u[:, 0])
        out = layer.to(torch.bfloat16)(u.bfloat16(), mask, query=u[:, 0].bfloat16())
        assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
        assert torch.equal(out[1].float(), torch.zeros(4, 8))
        torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


# ---------------------------------------------------------------- (6) CapsuleLayer
@pytest.mark.parametrize("routing", ["query", "dynamic"])
def test_capsule_layer_grads_reach_weights(routing):
    torch.manual_seed(0)
    layer = CapsuleLayer(in_dim=8, num_caps=4, caps_dim=8, iters=3, routing=routing)
    u = torch.randn(3, 7, 8)
    mask = torch.rand(3, 7) > 0.3
    mask[2] = False
    v = layer(u, mask, query=torch.randn(3, 8))
    assert v.shape == (3, 4, 8)
    v.pow(2).sum().backward()
    g = layer.weight.grad
    assert g is not None and torch.isfinite(g).all()
    assert (g.flatten(1).abs().sum(1) > 0).all()  # every W_j gets a gradient
    # û_{j|i} = W_j u_i
    u_hat = layer.predictions(u)
    torch.testing.assert_close(u_hat[1, 2, 3], u[1, 2] @ layer.weight[3])


def test_capsule_layer_args():
    layer = CapsuleLayer(6, 3, 10)
    assert layer.weight.shape == (3, 6, 10)
    assert layer.weight.abs().max() <= math.sqrt(6 / 16)
    assert layer(torch.randn(2, 4, 6)).shape == (2, 3, 10)
    with pytest.raises(ValueError):
        CapsuleLayer(6, 3, 10, routing="query")
    with pytest.raises(ValueError):
        CapsuleLayer(6, 3, 6, routing="bogus")
    with pytest.raises(ValueError):
        CapsuleLayer(6, 3, 6, routing="query")(torch.randn(2, 4, 6))


# ---------------------------------------------------------------- (7) invariances
@pytest.mark.parametrize("routing", ["query", "dynamic"])
def test_permutation_and_padding_invariance(routing):
    u, u_hat, q, mask = make_inputs(seed=5, padded=True)

    def run(u, u_hat, mask):
        if routing == "query":
            return query_guided_routing(u, u_hat, q, mask, iters=4, return_history=True)
        return dynamic_routing(u_hat, mask, iters=4, return_history=True)

    v, *hist = run(u, u_hat, mask)
    perm = torch.randperm(u.size(1), generator=torch.Generator().manual_seed(1))
    v_p, *hist_p = run(u[:, perm], u_hat[:, perm], mask[:, perm])
    torch.testing.assert_close(v_p, v, rtol=1e-12, atol=1e-12)
    for h, h_p in zip(hist, hist_p):
        torch.testing.assert_close(h_p, h[:, :, perm], rtol=1e-12, atol=1e-12)

    # more padding (with garbage), on both sides: same outputs
    B, N, M, D = u_hat.shape
    extra = 3
    u2 = torch.cat([torch.full((B, extra, D), 5.0, dtype=u.dtype), u,
                    torch.randn(B, extra, D, dtype=u.dtype)], 1)
    u_hat2 = torch.cat([torch.full((B, extra, M, D), float("nan"), dtype=u.dtype), u_hat,
                        torch.randn(B, extra, M, D, dtype=u.dtype) * 100], 1)
    pad = torch.zeros(B, extra, dtype=torch.bool)
    mask2 = torch.cat([pad, mask, pad], 1)
    v2, *hist2 = run(u2, u_hat2, mask2)
    torch.testing.assert_close(v2, v, rtol=1e-12, atol=1e-12)
    for h, h2 in zip(hist, hist2):
        torch.testing.assert_close(h2[:, :, extra:extra + N], h, rtol=1e-12, atol=1e-12)
        assert torch.equal(h2[:, :, :extra], torch.zeros_like(h2[:, :, :extra]))


@pytest.mark.parametrize("routing", ["query", "dynamic"])
def test_capsule_layer_routes_without_predictions_exactly(routing):
    """CapsuleLayer never materialises û = W_j u_i (factored routing); it gives what the
    routing functions give on the explicit predictions, history included."""
    torch.manual_seed(3)
    layer = CapsuleLayer(in_dim=8, num_caps=3, caps_dim=8, iters=4, routing=routing).double()
    u = torch.randn(4, 9, 8, dtype=torch.float64)
    mask = torch.rand(4, 9) > 0.3
    mask[1] = False
    q = torch.randn(4, 8, dtype=torch.float64)
    got = layer(u, mask, query=q, return_history=True)
    if routing == "query":
        want = query_guided_routing(u, layer.predictions(u), q, mask, iters=4, return_history=True)
    else:
        want = dynamic_routing(layer.predictions(u), mask, iters=4, return_history=True)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("routing", ["query", "dynamic"])
def test_capsule_layer_gradients_equal_the_explicit_routing(routing):
    """The factored routing sums the gradients of u and W over all iterations itself (one
    matmul each, not one accumulation per read): gradients for u, q and W equal plain
    autograd through the explicit predictions; a second backward of a retained graph gives
    them again (not twice)."""
    torch.manual_seed(5)
    layer = CapsuleLayer(in_dim=8, num_caps=3, caps_dim=8, iters=4, routing=routing).double()
    mask = torch.rand(4, 9) > 0.3
    mask[1] = False
    weights = torch.randn(4, 3, 8, dtype=torch.float64)  # a loss that is not symmetric in v

    def grads(fn):
        u = torch.randn(4, 9, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
        q = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
        loss = (fn(u, q) * weights).sum()
        first = torch.autograd.grad(loss, [u, q, layer.weight], allow_unused=True, retain_graph=True)
        second = torch.autograd.grad(loss, [u, q, layer.weight], allow_unused=True)
        return first, second

    got, again = grads(lambda u, q: layer(u, mask, query=q) + (0 * q.sum() if routing == "dynamic" else 0))
    if routing == "query":
        want, _ = grads(lambda u, q: query_guided_routing(u, layer.predictions(u), q, mask, iters=4))
    else:
        want, _ = grads(lambda u, q: dynamic_routing(layer.predictions(u), mask, iters=4) + 0 * q.sum())
    for g, a, w in zip(got, again, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(a, w, rtol=1e-10, atol=1e-10)
    assert got[2].abs().sum() > 0 and got[0].abs().sum() > 0


def test_route_together_equals_each_layer_alone():
    """Caps_enc and Caps_dec routed as one stacked routing (inputs of different lengths):
    the outputs and gradients of each layer on its own input."""
    from fairseq_docctx.modules.capsule import route_together

    torch.manual_seed(6)
    a = CapsuleLayer(in_dim=6, num_caps=3, caps_dim=5, iters=4).double()
    b = CapsuleLayer(in_dim=6, num_caps=3, caps_dim=5, iters=4).double()
    xa = torch.randn(4, 7, 6, dtype=torch.float64, requires_grad=True)
    xb = torch.randn(4, 10, 6, dtype=torch.float64, requires_grad=True)
    ma, mb = torch.rand(4, 7) > 0.2, torch.rand(4, 10) > 0.4
    ma[2] = False
    wa, wb = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(4, 3, 5, dtype=torch.float64)
    params = [xa, xb, a.weight, b.weight]
    va, vb = route_together([a, b], [xa, xb], [ma, mb])
    got = torch.autograd.grad((va * wa).sum() + (vb * wb).sum(), params)
    ra, rb = a(xa, ma), b(xb, mb)
    want = torch.autograd.grad((ra * wa).sum() + (rb * wb).sum(), params)
    torch.testing.assert_close(va, ra, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(vb, rb, rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
