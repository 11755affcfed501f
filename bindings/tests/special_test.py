"""The composed special functions (tessel/_special.py, tessel.special) against Python's math module and
numpy in float64, their edge values as torch 2.15 returns them, their gradients against the closed forms
and central differences; and finfo / iinfo / broadcast_shapes / broadcast_tensors / normal / is_tensor."""
import math

import numpy as np
import pytest

import tessel

F64 = tessel.float64
GAMMA = 0.5772156649015329


def t64(values, grad=False):
    return tessel.tensor(np.asarray(values, dtype=np.float64), requires_grad=grad)


def close(got, want, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


def test_inverse_trigonometric_and_hyperbolic_functions_match_numpy():
    x = np.linspace(-0.99, 0.99, 41)
    t = t64(x)
    close(tessel.atan(t * 5), np.arctan(x * 5))
    close(tessel.asin(t), np.arcsin(x))
    close(tessel.acos(t), np.arccos(x))
    close(tessel.sinh(t * 3), np.sinh(x * 3))
    close(tessel.cosh(t * 3), np.cosh(x * 3))
    close(tessel.asinh(t * 100), np.arcsinh(x * 100))
    close(tessel.acosh(t.abs() * 10 + 1), np.arccosh(np.abs(x) * 10 + 1))
    close(tessel.atanh(t), np.arctanh(x))
    close(tessel.sinh(t64([1e-9])), [1e-9], 1e-15)  # expm1 form: no cancellation near 0
    y = np.array([1.0, -1.0, 0.0, -0.0, 1.0, -1.0, 0.0, -0.0, 2.0, 3.0])
    xx = np.array([1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 0.0, -0.5])
    got = tessel.atan2(t64(y), t64(xx)).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.arctan2(y, xx)))  # ±pi and ±0 by y's sign
    close(tessel.atan2(t64(y), t64(xx)), np.arctan2(y, xx))
    assert tessel.tensor([1.0, 2.0]).atan2(tessel.tensor([1.0, 1.0])).dtype == tessel.float32


def test_logs_signs_and_friends_match_numpy():
    x = np.linspace(-3, 3, 25)
    t = t64(x)
    close(tessel.log2(t.abs() + 1), np.log2(np.abs(x) + 1))
    close(tessel.log10(t.abs() + 1), np.log10(np.abs(x) + 1))
    close(tessel.hypot(t, t * 2), np.hypot(x, x * 2))
    close(tessel.logaddexp(t * 100, -t * 50), np.logaddexp(x * 100, -x * 50))
    close(tessel.logaddexp2(t, t * 0.5), np.logaddexp2(x, x * 0.5))
    close(tessel.copysign(t, t64([-0.0] * 25)), -np.abs(x))
    close(tessel.sinc(t), np.sinc(x))
    close(tessel.frac(t * 1.3), np.modf(x * 1.3)[0])
    close(tessel.heaviside(t64([-1.0, 0.0, 2.0]), t64([0.5])), [0.0, 0.5, 1.0])
    close(tessel.xlogy(t64([0.0, 1.0, 2.0, 0.0]), t64([0.0, 2.0, 3.0, np.inf])), [0.0, math.log(2), 2 * math.log(3), 0.0])
    close(tessel.logit(t64([0.25, 0.5, 0.0]), eps=1e-6), [math.log(1 / 3), 0.0, math.log(1e-6 / (1 - 1e-6))])
    close(tessel.logcumsumexp(t * 100, 0), np.logaddexp.accumulate(x * 100))
    close(tessel.special.entr(t64([0.5, 0.0, -1.0])), [0.5 * math.log(2), 0.0, -np.inf])


def test_error_function_inverse_and_tails():
    x = np.concatenate([np.linspace(-4, 4, 33), [6.0, 9.0, 20.0, -7.0]])
    np.testing.assert_allclose(tessel.erfc(t64(x)).numpy(), [math.erfc(v) for v in x], rtol=1e-14, atol=0)
    u = np.linspace(-0.999, 0.999, 41)
    close(tessel.erf(tessel.erfinv(t64(u))), u)
    edges = tessel.erfinv(t64([1.0, -1.0, 0.0, 1.5])).numpy()
    assert edges[0] == np.inf and edges[1] == -np.inf and edges[2] == 0.0 and np.isnan(edges[3])
    close(tessel.special.ndtr(t64([0.0, 1.959963984540054])), [0.5, 0.975])
    close(tessel.special.ndtri(t64([0.975])), [1.959963984540054])
    close(tessel.special.log_ndtr(t64([-10.0])), [math.log(0.5 * math.erfc(10 / math.sqrt(2)))], 1e-10)


def test_lgamma_and_digamma_values_and_torchs_edges():
    g = np.concatenate([np.linspace(-5.5, 30, 71), [1e-3, 100.0, 1e5]])
    close(tessel.lgamma(t64(g)), [math.lgamma(v) for v in g], 1e-11)
    # psi at integers and half-integers from its closed forms; psi(x) = psi(x + 1) - 1/x below
    half = -GAMMA - 2 * math.log(2)
    pts = [1.0, 2.0, 5.0, 30.0, 0.5, 10.5, -0.5, -2.5]
    ref = [-GAMMA, 1 - GAMMA, 1 + 1 / 2 + 1 / 3 + 1 / 4 - GAMMA, sum(1 / k for k in range(1, 30)) - GAMMA, half,
           half + sum(2 / (2 * k - 1) for k in range(1, 11)), half + 2, half + 1 / 2.5 + 1 / 1.5 + 1 / 0.5]
    close(tessel.digamma(t64(pts)), ref, 1e-12)
    # float32 edges exactly as torch 2.15 returns them
    edge = tessel.tensor([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf, np.nan])
    lg, dg = tessel.lgamma(edge).numpy(), tessel.digamma(edge).numpy()
    np.testing.assert_array_equal(lg, np.array([np.inf, np.inf, 0, np.inf, 0, np.inf, np.inf, np.inf, np.nan], np.float32))
    np.testing.assert_array_equal(dg[[0, 1, 3, 5, 6, 7, 8]], np.array([-np.inf, np.inf, np.nan, np.nan, np.inf, np.nan, np.nan], np.float32))
    assert tessel.special.gammaln(tessel.tensor([0.5])).dtype == tessel.float32


def test_gradients_equal_the_closed_forms():
    z = t64([0.3, 1.7, -2.5, 4.0], grad=True)
    tessel.lgamma(z).sum().backward()
    close(z.grad, tessel.digamma(z.detach()).numpy(), 1e-10)
    z.grad = None
    tessel.atan2(z, t64([0.7])).sum().backward()
    close(z.grad, 0.7 / (0.49 + z.detach().numpy() ** 2))
    w = t64([0.3, -0.8, 0.95], grad=True)
    tessel.erfinv(w).sum().backward()
    close(w.grad, math.sqrt(math.pi) / 2 * np.exp(tessel.erfinv(w.detach()).numpy() ** 2), 1e-10)
    for name in ("asinh", "atanh", "acos", "erfc", "digamma", "sinc", "logit"):
        fn = getattr(tessel, name)
        v = np.array([0.2, 0.45, 0.7])
        x = t64(v, grad=True)
        fn(x).sum().backward()
        h = 1e-6
        fd = (fn(t64(v + h)).numpy() - fn(t64(v - h)).numpy()) / (2 * h)
        np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, err_msg=name)


def test_gradients_at_the_edges_are_torchs_closed_forms():
    # the compositions met 0·inf or a where's dead branch there: erfinv'(±1) and lgamma'(0) read 0, logit'(0),
    # atanh'(±1) and acosh'(1) NaN, entr'(0) 0 (torch: inf, -inf, inf, inf, inf, inf)
    cases = {
        "erfinv": (tessel.erfinv, [-1.0, 1.0, 1.5], [np.inf, np.inf, np.nan]),
        "logit": (tessel.logit, [0.0, 1.0, 0.5], [np.inf, np.inf, 4.0]),
        "atanh": (tessel.atanh, [-1.0, 1.0, 0.5], [np.inf, np.inf, 4.0 / 3.0]),
        "acosh": (tessel.acosh, [1.0, 0.5, 2.0], [np.inf, np.nan, 1.0 / math.sqrt(3.0)]),
        "lgamma": (tessel.lgamma, [0.0, -1.0, 1.0], [-np.inf, np.nan, -0.5772156649015329]),
        "entr": (tessel.special.entr, [0.0, -1.0, 1.0], [np.inf, np.nan, -1.0]),
    }
    for name, (fn, xs, want) in cases.items():
        for dtype in (tessel.float32, tessel.float64):
            x = tessel.tensor(xs, dtype=dtype, requires_grad=True)
            fn(x).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, err_msg="%s %s" % (name, dtype))
    x = tessel.tensor([0.0, 0.05, 0.5, 0.95, 1.0], requires_grad=True)  # eps: zero outside [eps, 1 - eps]
    tessel.logit(x, eps=0.1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 4.0, 0.0, 0.0], rtol=1e-6)
    w = t64([0.3, -0.8], grad=True)  # second order through the closed form: erfinv'' = 2·y·erfinv'(x)²
    (g,) = tessel.autograd.grad(tessel.erfinv(w).sum(), w, create_graph=True)
    g.sum().backward()
    y = np.array([0.27246271472675443, -0.9061938024368232])
    close(w.grad, 2 * y * (math.sqrt(math.pi) / 2 * np.exp(y ** 2)) ** 2, 1e-9)


def test_dtype_limits_shapes_and_draws():
    f = tessel.finfo(tessel.float32)
    assert (f.eps, f.max, f.tiny, f.bits) == (2.0 ** -23, float(np.finfo(np.float32).max), 2.0 ** -126, 32)
    assert tessel.finfo().eps == 2.0 ** -23 and tessel.finfo(tessel.bfloat16).eps == 2.0 ** -7
    assert tessel.finfo(tessel.float16).max == 65504.0 and tessel.finfo(tessel.float64).min == -np.finfo(np.float64).max
    assert (tessel.iinfo(tessel.int32).min, tessel.iinfo(tessel.int64).max) == (-2 ** 31, 2 ** 63 - 1)
    with pytest.raises(TypeError, match="requires an integer input type"):
        tessel.iinfo(tessel.float32)
    with pytest.raises(TypeError, match="requires a floating point input type"):
        tessel.finfo(tessel.int64)
    assert tessel.broadcast_shapes((2, 1), (3,), 1) == (2, 3) == tessel.Size([2, 3])
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        tessel.broadcast_shapes((2, 3), (4,))
    a, b = tessel.broadcast_tensors(tessel.ones(2, 1, requires_grad=True), tessel.arange(3.0))
    assert a.shape == b.shape == (2, 3)
    np.testing.assert_array_equal(b.numpy(), [[0, 1, 2], [0, 1, 2]])
    assert tessel.is_tensor(a) and not tessel.is_tensor(np.ones(2)) and tessel.empty_like(a).shape == (2, 3)
    tessel.manual_seed(0)
    draws = tessel.normal(t64(np.full(20000, 3.0)), t64([2.0]))
    assert draws.dtype == F64 and abs(draws.mean().item() - 3.0) < 0.05 and abs(draws.std().item() - 2.0) < 0.05
    assert tessel.normal(0.0, 1.0, (2, 5)).shape == (2, 5)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
