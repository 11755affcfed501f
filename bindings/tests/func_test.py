"""tessel.func (torch.func's transforms) against derivatives written out: functional_call with substituted
parameters and buffers (restored afterwards, also after an exception), a MAML second-order gradient against
central finite differences of the whole inner-and-outer step, grad / grad_and_value (nested, with aux),
jacrev / jacfwd / hessian, vjp / jvp, and vmap (in_dims, out_dims, per-sample gradients, the three randomness
modes)."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from sharded_equivalence import finite_difference
from tessel.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp, vmap

RNG = np.random.default_rng(5)
W0 = RNG.standard_normal((2, 3))
B0 = RNG.standard_normal(2)
X = RNG.standard_normal((4, 3))


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


def linear(w=W0, b=B0):
    layer = nn.Linear(3, 2, dtype=tessel.float64)
    with tessel.no_grad():
        layer.weight.copy_(t(w))
        layer.bias.copy_(t(b))
    return layer


def test_functional_call_substitutes_and_restores():
    layer = linear()
    w2, b2 = RNG.standard_normal((2, 3)), RNG.standard_normal(2)
    out = functional_call(layer, {"weight": t(w2), "bias": t(b2)}, (t(X),))
    np.testing.assert_allclose(out.detach().numpy(), X @ w2.T + b2, rtol=1e-12)
    np.testing.assert_allclose(layer(t(X)).detach().numpy(), X @ W0.T + B0, rtol=1e-12)  # its own again
    out = functional_call(layer, ({"weight": t(w2)}, {"bias": t(b2)}), t(X))  # several dicts, one argument
    np.testing.assert_allclose(out.detach().numpy(), X @ w2.T + b2, rtol=1e-12)

    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = linear()

        def forward(self, x):
            self.inner(x)
            raise ValueError("boom")
    boom = Boom()
    with pytest.raises(ValueError, match="boom"):
        functional_call(boom, {"inner.weight": t(w2)}, (t(X),))
    np.testing.assert_array_equal(boom.inner.weight.detach().numpy(), W0)
    # an unknown key is left out without strict (torch 2.15's), refused with it
    np.testing.assert_array_equal(functional_call(layer, {"weights": t(w2)}, (t(X),)).detach().numpy(),
                                  layer(t(X)).detach().numpy())
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'weights'"):
        functional_call(layer, {"weights": t(w2)}, (t(X),), strict=True)
    with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'bias'"):
        functional_call(layer, {"weight": t(w2)}, (t(X),), strict=True)
    bn = nn.BatchNorm1d(3, dtype=tessel.float64)
    bn.eval()
    mean, var = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    out = functional_call(bn, {"running_mean": t(mean), "running_var": t(var)}, (t(X),))
    np.testing.assert_allclose(out.numpy(), (X - mean) / np.sqrt(var + 1e-5), rtol=1e-12)
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3))


def maml_outer_loss(w, b, lr=0.1):
    """One inner SGD step on X's squared outputs, then the outer loss on 2·X, as a function of (w, b)."""
    layer = linear(w, b)
    loss = (layer(t(X)) ** 2).sum()
    gs = tessel.autograd.grad(loss, list(layer.parameters()), create_graph=True)
    fast = {n: p - lr * g for (n, p), g in zip(layer.named_parameters(), gs)}
    return (functional_call(layer, fast, (t(2 * X),)) ** 2).sum(), layer


def test_maml_second_order_gradient_matches_finite_differences():
    outer, layer = maml_outer_loss(W0, B0)
    outer.backward()
    want_w = finite_difference(lambda w: maml_outer_loss(w, B0)[0].item(), W0.copy())
    want_b = finite_difference(lambda b: maml_outer_loss(W0, b)[0].item(), B0.copy())
    np.testing.assert_allclose(layer.weight.grad.numpy(), want_w, rtol=1e-6)
    np.testing.assert_allclose(layer.bias.grad.numpy(), want_b, rtol=1e-6)


def test_grad_transforms():
    z = t([1.0, 2.0, -0.5])

    def f(v):
        return (v ** 3).sum()
    np.testing.assert_allclose(grad(f)(z).numpy(), 3 * z.numpy() ** 2)
    np.testing.assert_allclose(grad(lambda v: grad(f)(v).sum())(z).numpy(), 6 * z.numpy())  # nested
    g, value = grad_and_value(f)(z)
    assert value.item() == pytest.approx((z.numpy() ** 3).sum()) and not g.requires_grad
    g, aux = grad(lambda v: (f(v), v.sum()), has_aux=True)(z)
    assert aux.item() == pytest.approx(2.5)
    ga, gb = grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(z, 2 * z)
    np.testing.assert_allclose(ga.numpy(), 2 * z.numpy())
    np.testing.assert_allclose(gb.numpy(), z.numpy())
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor"):
        grad(lambda v: v * 2)(z)
    ja, jb = jacrev(lambda a, b: a * b.sin(), argnums=(0, 1))(z, z)
    np.testing.assert_allclose(ja.numpy(), np.diag(np.sin(z.numpy())), rtol=1e-12)
    np.testing.assert_allclose(jb.numpy(), np.diag(z.numpy() * np.cos(z.numpy())), rtol=1e-12)
    np.testing.assert_allclose(jacfwd(lambda a: a.exp())(z).numpy(), np.diag(np.exp(z.numpy())), rtol=1e-12)
    h = hessian(lambda v: (v ** 3).sum() + v[0] * v[1])(z)
    want = np.diag(6 * z.numpy())
    want[0, 1] = want[1, 0] = 1.0
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-12)
    out, vjp_fn = vjp(lambda a: a.sin(), z)
    np.testing.assert_allclose(vjp_fn(t([1.0, 2.0, 3.0]))[0].numpy(), np.cos(z.numpy()) * [1, 2, 3], rtol=1e-12)
    out, tangent = jvp(lambda a: a.sin() * a[0], (z,), (t([1.0, 0.0, 0.0]),))
    jac = np.diag(np.cos(z.numpy()) * z.numpy()[0])
    jac[:, 0] += np.sin(z.numpy())
    np.testing.assert_allclose(tangent.numpy(), jac @ [1.0, 0.0, 0.0], rtol=1e-12)
    # has_aux: the auxiliary output comes third, as func returned it, and does not enter the product
    out2, tangent2, aux = jvp(lambda a: (a.sin() * a[0], {"norm": a.norm(), "tag": "x"}), (z,), (t([1.0, 0.0, 0.0]),),
                              has_aux=True)
    np.testing.assert_allclose(tangent2.numpy(), tangent.numpy(), rtol=1e-15)
    np.testing.assert_allclose(out2.numpy(), np.sin(z.numpy()) * z.numpy()[0], rtol=1e-12)
    assert aux["tag"] == "x" and aux["norm"].item() == pytest.approx(np.linalg.norm(z.numpy()))
    with pytest.raises(RuntimeError, match=r"should be a tuple: \(output, aux\)"):
        jvp(lambda a: a.sin(), (z,), (t([1.0, 0.0, 0.0]),), has_aux=True)


def test_vmap_maps_stacks_and_gives_per_sample_gradients():
    xs, ys = RNG.standard_normal((5, 3)), RNG.standard_normal(5)
    w = RNG.standard_normal(3)
    np.testing.assert_allclose(vmap(lambda a, b: (a * b).sum(), in_dims=(0, None))(t(xs), t(w)).numpy(), xs @ w)
    np.testing.assert_allclose(vmap(lambda a: a * 2, in_dims=1, out_dims=1)(t(xs)).numpy(), 2 * xs)
    pair = vmap(lambda a: (a.sum(), a * 0 + 1))(t(xs))
    np.testing.assert_allclose(pair[0].numpy(), xs.sum(1))

    def loss(wv, a, y):
        return ((a * wv).sum() - y) ** 2
    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(t(w), t(xs), t(ys))
    np.testing.assert_allclose(per_sample.numpy(), 2 * (xs @ w - ys)[:, None] * xs, rtol=1e-12)
    with pytest.raises(ValueError, match="same size in the mapped dimension"):
        vmap(lambda a, b: a + b)(t(xs), t(xs[:2]))
    with pytest.raises(RuntimeError, match="called random operation while in randomness error mode"):
        vmap(lambda a: a + tessel.rand(3, dtype=tessel.float64))(t(xs))
    same = vmap(lambda a: tessel.rand(2), randomness="same")(t(xs)).numpy()
    assert (same == same[0]).all()
    different = vmap(lambda a: tessel.rand(2), randomness="different")(t(xs)).numpy()
    assert len({tuple(r) for r in different}) == 5



def test_grad_vjp_and_hessians_of_outputs_independent_of_the_inputs_are_zeros_as_torchs():
    # func.grad / vjp of an output that does not depend on the input raised "does not require grad" (torch: zeros),
    # and with them hessian of a linear function and jacrev(jacrev(...))
    x, w = tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, 4.0])
    assert tessel.func.grad(lambda x: tessel.tensor(1.0))(x).tolist() == [0.0, 0.0]
    assert tessel.func.grad(lambda x: (w * 2).sum())(x).tolist() == [0.0, 0.0]
    assert tessel.func.vjp(lambda x: w * 1, x)[1](tessel.ones(2))[0].tolist() == [0.0, 0.0]
    assert tessel.func.hessian(lambda x: (x * w).sum())(x).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert tessel.func.jacrev(tessel.func.jacrev(lambda x: x * w))(x).tolist() == [[[0.0, 0.0]] * 2] * 2

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
