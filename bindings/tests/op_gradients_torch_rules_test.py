"""Gradients against torch 2.15's, from the thirty-eighth session's sweep of ~700 first- and second-order cases
(each expected value below is what torch 2.15 computed for the same call): vector_norm's second derivative for p
other than 1, 2 and inf, erfc at 0, xlogy / xlog1py with respect to x at x = 0, cov's observation weights, and
clamp with two tensor bounds at ties.
"""
import math

import numpy as np
import pytest

import tessel

D = tessel.float64


def t(v):
    return tessel.tensor(v, dtype=D, requires_grad=True)


def grad(y, x, **kw):
    return tessel.autograd.grad(y, x, **kw)


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=1e-9,
                               atol=1e-12)


def test_vector_norm_second_derivative_keeps_the_norms_own_dependence():
    for norm in (lambda x: tessel.linalg.vector_norm(x, 3), lambda x: tessel.norm(x, p=3),
                 lambda x: tessel.dist(x, tessel.zeros(3, dtype=D), p=3)):
        x = t([1.0, -2.0, 0.5])
        g, = grad(norm(x), x, create_graph=True)
        close(grad(g.sum(), x)[0].tolist(), [0.5960401180802657, 0.36389817735426755, 0.26351247325653854])
    x = t([[1.0, -2.0], [0.5, 3.0]])
    g, = grad(tessel.linalg.vector_norm(x, 1.5, dim=1).sum(), x, create_graph=True)
    close(grad((g * g).sum(), x)[0].tolist(),
          [[0.08842064311358744, 0.04421032155679355], [0.17675490181633258, -0.02945915030272206]])


def test_erfc_gradient_at_zero_is_minus_two_over_root_pi():
    x = t([0.0, 0.5, -0.5, -3.0])
    close(grad(tessel.erfc(x).sum(), x)[0].tolist(), [-2 / math.sqrt(math.pi)] + [
        -2 / math.sqrt(math.pi) * math.exp(-v * v) for v in (0.5, -0.5, -3.0)])
    close(tessel.erfc(tessel.tensor([0.0, -0.5, -3.0, 3.0], dtype=D)).tolist(),
          [math.erfc(v) for v in (0.0, -0.5, -3.0, 3.0)])


def test_xlogy_and_xlog1py_gradients_at_x_zero():
    x, y = t([0.0, 1.0]), t([2.0, 3.0])
    g, = grad(tessel.xlogy(x, y).sum(), x, create_graph=True)
    close(g.tolist(), [math.log(2.0), math.log(3.0)])  # the mask for the value 0 cut it: [0, log 3]
    close(grad(g.sum(), y)[0].tolist(), [0.5, 1 / 3])
    x = t([0.0])
    close(grad(tessel.special.xlog1py(x, tessel.tensor([1.0], dtype=D)).sum(), x)[0].tolist(), [math.log(2.0)])
    x, y = t([0.0, 0.0, 1.0]), t([0.0, -1.0, 0.0])  # torch's masked corners: 0 for x, x / y for y
    gx, gy = grad(tessel.xlogy(x, y).sum(), (x, y))
    close(gx.tolist(), [0.0, 0.0, -math.inf])
    assert math.isnan(gy.tolist()[0]) and gy.tolist()[1:] == [-0.0, math.inf]


def test_cov_gradient_with_respect_to_observation_weights():
    X = tessel.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 1.0, 3.0, 2.0]], dtype=D)
    w = t([0.5, 1.0, 2.0, 0.3])
    got = grad(tessel.cov(X, correction=0, aweights=w).sum(), w)[0].tolist()
    np.testing.assert_allclose(got, [0.643315, -0.243111, -0.135771, 0.643315], atol=1e-6)  # torch's
    close(got, grad(_cov_reference(X, w, 0).sum(), w)[0].tolist())
    w = t([0.5, 1.0, 2.0, 0.3])
    close(grad(tessel.cov(X, aweights=w).sum(), w)[0].tolist(), grad(_cov_reference(X, w, 1).sum(), w)[0].tolist())
    np.testing.assert_allclose(tessel.cov(X, correction=0, aweights=t([0.5, 1.0, 2.0, 0.3])).detach().numpy(),
                               np.cov(X.numpy(), aweights=[0.5, 1.0, 2.0, 0.3], ddof=0), rtol=1e-12)


def _cov_reference(X, w, correction):
    """numpy's weighted covariance formula written with tessel ops (every term differentiable)."""
    w_sum = w.sum()
    mean = (X * w).sum(1, keepdim=True) / w_sum
    xc = X - mean
    norm = w_sum - correction * (w * w).sum() / w_sum
    return (xc * w).matmul(xc.t()) / norm


def test_clamp_with_two_tensor_bounds_shares_gradients_as_torch():
    want = {  # (x, lo, hi): (value, gradients of x, lo, hi), as torch 2.15
        (0.3, 0.3, 0.3): (0.3, [1.0, 0.0, 0.0]), (0.1, 0.3, 0.3): (0.3, [0.0, 1.0, 0.0]),
        (0.5, 0.3, 0.3): (0.3, [0.0, 0.0, 1.0]), (0.3, 0.3, 0.5): (0.3, [0.5, 0.5, 0.0]),
        (0.5, 0.3, 0.5): (0.5, [0.5, 0.0, 0.5]), (0.1, 0.7, 0.3): (0.3, [0.0, 0.0, 1.0]),
        (0.7, 0.7, 0.3): (0.3, [0.0, 0.0, 1.0]), (0.4, 0.3, 0.5): (0.4, [1.0, 0.0, 0.0]),
    }
    for (xv, lo, hi), (value, grads) in want.items():
        x, lo_t, hi_t = t([xv]), t([lo]), t([hi])
        out = tessel.clamp(x, lo_t, hi_t)
        close(out.tolist(), [value])
        close([g.item() for g in grad(out.sum(), (x, lo_t, hi_t))], grads)
    x, lo_t = t([0.5, 0.2]), t([0.5, 0.5])  # one tensor bound: maximum's split of a tie, as torch
    close([g.tolist() for g in grad(tessel.clamp(x, lo_t).sum(), (x, lo_t))], [[0.5, 0.0], [0.5, 1.0]])



def test_hypot_second_derivatives_at_a_zero_argument():
    want = {  # (x, y): (h, dh/dx, dh/dy, d2h/dx2, d2h/dxdy, d2h/dy2), as torch 2.15
        (0.0, 2.0): (2.0, 0.0, 1.0, 0.5, 0.0, 0.0), (3.0, 0.0): (3.0, 1.0, 0.0, 0.0, 0.0, 1 / 3),
        (3.0, 4.0): (5.0, 0.6, 0.8, 0.128, -0.096, 0.072), (-1.5, 2.0): (2.5, -0.6, 0.8, 0.256, 0.192, 0.144),
    }
    for (xv, yv), w in want.items():
        x, y = t([xv]), t([yv])
        h = tessel.hypot(x, y)
        gx, gy = grad(h.sum(), (x, y), create_graph=True)
        hxx, hxy = grad(gx.sum(), (x, y), retain_graph=True)
        hyy = grad(gy.sum(), y)[0]
        np.testing.assert_allclose([h.item(), gx.item(), gy.item(), hxx.item(), hxy.item(), hyy.item()], w,
                                   rtol=1e-12, atol=1e-15)
    x, y = t([0.0]), t([0.0])
    assert all(math.isnan(g.item()) for g in grad(tessel.hypot(x, y).sum(), (x, y)))  # torch's 0 / 0 at the origin


def test_cdist_inf_gives_every_tied_coordinate_the_whole_gradient():
    x1 = t([[1.0, 3.0], [0.0, 0.0]])
    x2 = t([[2.0, 2.0], [0.0, 0.0], [-1.0, 5.0]])
    out = tessel.cdist(x1, x2, p=math.inf)
    close(out.tolist(), [[1.0, 3.0, 2.0], [2.0, 0.0, 5.0]])
    g1, g2 = grad((out * tessel.arange(1.0, 7.0, dtype=D).reshape(2, 3)).sum(), (x1, x2))
    close(g1.tolist(), [[2.0, 0.0], [-4.0, -10.0]])  # torch 2.15's; the split of the norm gave halves at ties
    close(g2.tolist(), [[5.0, 3.0], [0.0, -2.0], [-3.0, 9.0]])


def test_solve_broadcasts_a_matrix_right_hand_side_and_its_gradients():
    A = t([[[2.0, 1, 0], [1, 3, 1], [0, 1, 4]], [[1.0, 0, 0], [0, 2, 0], [1, 0, 3]]])
    want = {  # B: (X's shape, X, dL/dB, sum of dL/dA) for L = sum(X²), as torch 2.15
        ((3, 2), (1.0, 2, 3, 4, 5, 6)): ((2, 3, 2), [2 / 9, 2 / 3, 5 / 9, 2 / 3, 10 / 9, 4 / 3, 1, 2, 1.5, 2, 4 / 3,
                                                     4 / 3], [1.259259259, 3.777777778, 1.648148148, 2.0,
                                                              1.407407407, 1.555555556], -50.511316872),
        ((2, 3), (1.0, 2, 3, 4, 5, 6)): ((2, 3), [1 / 3, 1 / 3, 2 / 3, 4, 2.5, 2 / 3],
                                         [1 / 3, 0.0, 1 / 3, 7.555555556, 2.5, 0.444444444], -76.138888889),
        ((3,), (1.0, 2, 3)): ((2, 3), [1 / 3, 1 / 3, 2 / 3, 1, 1, 2 / 3], [1.888888889, 1.0, 0.777777778],
                              -8.888888889),
    }
    for (shape, values), (x_shape, x, gb, ga_sum) in want.items():
        B = tessel.tensor(values, dtype=D).reshape(*shape).requires_grad_(True)
        X = tessel.linalg.solve(A, B)  # [3, 2] against [2, 3, 3]: broadcast to [2, 3, 2] (numpy's rule raised)
        assert tuple(X.shape) == x_shape
        ga, g = grad((X * X).sum(), (A, B))
        np.testing.assert_allclose(X.detach().numpy().reshape(-1), x, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(g.numpy().reshape(-1), gb, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(ga.sum().item(), ga_sum, rtol=1e-9)


def test_func_transforms_keep_each_levels_input_apart_from_captured_uses():
    F = tessel.func
    two = tessel.tensor(2.0, dtype=D)
    # d/da [d/db (a·b) at b = a] = d/da a = 1: the inner grad differentiated a's captured use too (2)
    assert F.grad(lambda a: F.grad(lambda b: a * b)(a))(two).item() == 1.0
    assert F.jacrev(lambda a: F.jacrev(lambda b: a * b)(a))(two).item() == 1.0
    a = two.clone().requires_grad_()  # an input that requires grad and is also closed over: d/db (a·b) = a
    assert F.grad(lambda b: a * b)(a).item() == 2.0 and F.jvp(lambda b: a * b, (a,), (tessel.ones((), dtype=D),))[
        1].item() == 2.0
    x = tessel.tensor([0.3, -1.2, 2.0], dtype=D).requires_grad_()
    close(F.grad(lambda p, q: (p * q).sum())(x, x).tolist(), [0.3, -1.2, 2.0])  # was 2x


def test_vjp_and_jvp_inside_grad_keep_their_graph():
    F = tessel.func
    three, one = tessel.tensor(3.0, dtype=D), tessel.tensor(1.0, dtype=D)
    # d/da [d/db b³ at b = a] = 6a = 18 (vjp_fn's and jvp's products were detached: 0)
    assert F.grad(lambda a: F.vjp(lambda b: b ** 3, a)[1](one)[0])(three).item() == 18.0
    assert F.grad(lambda a: F.jvp(lambda b: b ** 3, (a,), (one,))[1])(three).item() == 18.0
    jac = F.jacrev(lambda a: F.vjp(lambda b: b ** 3, a)[1](tessel.ones(2, dtype=D))[0])(
        tessel.tensor([3.0, 2.0], dtype=D))
    close(jac.tolist(), [[18.0, 0.0], [0.0, 12.0]])
    out, fn = F.vjp(lambda b: b ** 3, three)  # at the top level vjp_fn's gradients stay plain, as torch's
    assert not fn(one)[0].requires_grad and fn(one)[0].item() == 27.0


def test_vmap_refuses_a_function_that_writes_a_captured_tensor_it_returns():
    acc = tessel.zeros(3, dtype=D)
    X = tessel.tensor([[0.3, -1.2, 2.0], [1.0, 2.0, 3.0]], dtype=D)
    with pytest.raises(RuntimeError, match="wrote in place into a tensor it did not get through the mapped inputs"):
        tessel.func.vmap(lambda x: acc.add_(x))(X)  # every output row was the final sum, silently
    close(tessel.func.vmap(lambda x: acc * 0 + x)(X).tolist(), X.tolist())
    assert tessel.func.vmap(lambda x: acc)(X).tolist() == [acc.tolist()] * 2  # returned unwritten: fine

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
