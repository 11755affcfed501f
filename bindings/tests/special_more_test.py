"""torch.special's Bessel, incomplete-gamma, polygamma and zeta functions (tessel/_special_more.py) against
independent computations in float64: numpy's i0, the Bessel functions' integral representations (trapezoid
rule on a fine grid), math.erfc, the incomplete gamma's integral, the Riemann zeta's closed forms (ζ(2) = π²/6,
ζ(4) = π⁴/90) and its defining sum, trigamma's known values, torch 2.15's own outputs at the far ends (x = 700,
erfcx at 1e5); gradients against central finite differences, second derivatives through create_graph, and
torch's refusals."""
import math
import sys

import numpy as np
import pytest

import tessel
from sharded_equivalence import finite_difference

S = tessel.special


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


X = np.array([-40.0, -3.5, -0.5, 0.0, 0.3, 1.0, 7.5, 29.0, 31.0, 120.0])


def bessel_integral(order, x):
    """I_n(x) = (1/π) ∫₀^π e^(x cos θ) cos(nθ) dθ."""
    theta = np.linspace(0.0, math.pi, 200001)
    return np.array([np.trapz(np.exp(v * np.cos(theta) - abs(v)) * np.cos(order * theta), theta) / math.pi
                     for v in x])  # scaled by e^-|x|


def test_bessel_functions():
    np.testing.assert_allclose(S.i0(t(X)).numpy(), np.i0(X), rtol=1e-13)
    np.testing.assert_allclose(S.i0e(t(X)).numpy(), bessel_integral(0, X), rtol=1e-9)
    np.testing.assert_allclose(S.i1e(t(X)).numpy(), bessel_integral(1, X), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(S.i1(t(X)).numpy(), bessel_integral(1, X) * np.exp(np.abs(X)), rtol=1e-9, atol=1e-15)
    # torch 2.15 at the far end: i0e(700), i1e(700), i1(700)
    np.testing.assert_allclose(S.i0e(t([700.0])).numpy(), [0.015081295651531355], rtol=1e-12)
    np.testing.assert_allclose(S.i1e(t([700.0])).numpy(), [0.015070519444716846], rtol=1e-12)
    assert np.isinf(S.i1(t([720.0])).item())
    assert tessel.i0(t([1.0])).item() == pytest.approx(np.i0(1.0)) and t([1.0]).i0().item() == pytest.approx(np.i0(1))


def test_erfcx():
    x = np.array([-26.0, -5.0, -1.0, 0.0, 0.5, 3.0, 10.0, 25.9])
    want = np.array([math.exp(v * v) * math.erfc(v) for v in x])
    np.testing.assert_allclose(S.erfcx(t(x)).numpy(), want, rtol=1e-13)
    far = np.array([26.1, 100.0, 1e5])  # beyond erfc's range: torch 2.15's values
    np.testing.assert_allclose(S.erfcx(t(far)).numpy(),
                               [0.02160062772634621, 0.005641613782989433, 5.6418958351954685e-06],
                               rtol=1e-12)
    assert np.isinf(S.erfcx(t([-30.0])).item())


def test_incomplete_gamma():
    a = np.array([0.5, 1.0, 2.5, 10.0, 50.0])
    x = np.array([0.1, 2.0, 2.5, 12.0, 40.0])
    want = []
    for ai, xi in zip(a, x):  # P(a, x) = ∫₀ˣ t^(a-1) e^-t dt / Γ(a)
        if ai < 1:  # u = t^a removes the singularity at 0
            u = np.linspace(0.0, xi ** ai, 400001)
            want.append(np.trapz(np.exp(-u ** (1 / ai)), u) / (ai * math.gamma(ai)))
        else:
            grid = np.linspace(1e-300, xi, 800001)
            want.append(np.trapz(np.exp((ai - 1) * np.log(grid) - grid - math.lgamma(ai)), grid))
    np.testing.assert_allclose(S.gammainc(t(a), t(x)).numpy(), want, rtol=1e-8)
    np.testing.assert_allclose(S.gammaincc(t(a), t(x)).numpy(), 1 - np.array(want), rtol=1e-7)
    np.testing.assert_allclose(S.gammainc(t([1.0]), t([2.0])).numpy(), [1 - math.exp(-2.0)], rtol=1e-14)
    assert S.gammainc(t([2.0]), t([0.0])).item() == 0.0 and S.gammaincc(t([2.0]), t([float("inf")])).item() == 0.0
    assert tessel.igammac(t([1.0]), t([2.0])).item() == pytest.approx(math.exp(-2.0))


def test_zeta_and_polygamma():
    assert S.zeta(t([2.0]), t([1.0])).item() == pytest.approx(math.pi ** 2 / 6, rel=1e-15)
    assert S.zeta(t([4.0]), t([1.0])).item() == pytest.approx(math.pi ** 4 / 90, rel=1e-15)
    k = np.arange(2_000_000, dtype=np.float64)
    for s, q in ((3.0, 0.5), (1.5, 3.0), (10.0, 0.1)):
        direct = ((q + k) ** -s).sum() + (q + len(k)) ** (1 - s) / (s - 1)  # the sum, its integral tail
        assert S.zeta(t([s]), t([q])).item() == pytest.approx(direct, rel=1e-9)
    assert np.isinf(S.zeta(t([1.0]), t([2.0])).item())
    # trigamma: ψ'(1) = π²/6, ψ'(1/2) = π²/2; the recurrence for negative x: ψ'(x) = ψ'(x + 1) + 1/x²
    assert S.polygamma(1, t([1.0])).item() == pytest.approx(math.pi ** 2 / 6, rel=1e-14)
    assert S.polygamma(1, t([0.5])).item() == pytest.approx(math.pi ** 2 / 2, rel=1e-14)
    assert S.polygamma(1, t([-0.5])).item() == pytest.approx(math.pi ** 2 / 2 + 4, rel=1e-13)
    assert S.polygamma(3, t([1.0])).item() == pytest.approx(6 * math.pi ** 4 / 90, rel=1e-13)  # 3!·ζ(4)
    np.testing.assert_allclose(S.polygamma(0, t([2.0])).numpy(), t([2.0]).digamma().numpy())
    assert t([2.0]).polygamma(2).item() == pytest.approx(S.polygamma(2, t([2.0])).item())
    with pytest.raises(RuntimeError, match="polygamma\\(n, x\\) does not support negative n"):
        S.polygamma(-1, t([1.0]))
    assert S.spherical_bessel_j0(t([0.0])).item() == 1.0
    assert S.spherical_bessel_j0(t([3.0])).item() == pytest.approx(math.sin(3.0) / 3.0, rel=1e-15)


def test_gradients_and_second_derivatives():
    for fn, x in ((S.i0, [0.3, -1.7, 5.0]), (S.i1, [0.3, -1.7, 5.0]), (S.i0e, [0.3, -1.7, 5.0, 35.0]),
                  (S.i1e, [0.3, -1.7, 5.0, 35.0]), (S.erfcx, [0.3, -1.7, 5.0, 35.0]),
                  (lambda v: S.polygamma(2, v.abs() + 0.5), [0.3, -1.7, 5.0]), (S.spherical_bessel_j0, [0.3, 5.0])):
        x = np.array(x)
        xt = t(x, requires_grad=True)
        fn(xt).sum().backward()
        np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda v: fn(t(v)).sum().item(), x.copy()),
                                   rtol=2e-6, atol=1e-9)
    xs = np.array([0.5, 2.0, 7.0])
    a = t([1.5, 2.0, 3.0])
    xt = t(xs, requires_grad=True)
    (S.gammainc(a, xt).sum() + S.gammaincc(a, xt * 2).sum() + S.zeta(t([2.0, 3.0, 4.0]), xt).sum()).backward()
    want = finite_difference(lambda v: (S.gammainc(a, t(v)).sum() + S.gammaincc(a, t(v) * 2).sum()
                                        + S.zeta(t([2.0, 3.0, 4.0]), t(v)).sum()).item(), xs.copy())
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=1e-6)
    xt = t([0.7, 2.0], requires_grad=True)
    g, = tessel.autograd.grad(S.i0(xt).sum(), xt, create_graph=True)  # i0'' = i1' = i0 - i1/x
    h, = tessel.autograd.grad(g.sum(), xt)
    v = np.array([0.7, 2.0])
    np.testing.assert_allclose(h.numpy(), np.i0(v) - S.i1(t(v)).numpy() / v, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="derivative of gammainc with respect to its first argument"):
        S.gammainc(t([1.5], requires_grad=True), t([2.0])).backward()


def test_logcumsumexp_is_a_running_logaddexp_without_underflow_and_logaddexp_splits_ties():
    """One shift by the row's max underflowed entries far below it: logcumsumexp([0, 800]) gave [-inf, 800] and a
    masked -1e4 a NaN gradient; logaddexp(x, x) gave all of its gradient to one argument. References: numpy's
    logaddexp.accumulate in float64, and d(sum_i y_i)/dx_j = sum_{i >= j} exp(x_j - y_i)."""
    for values in ([0.0, 800.0], [-1e4, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0], [3.0, -2.0, 7.5, 7.5, -40.0, 1.0]):
        x = np.array(values)
        want = np.logaddexp.accumulate(x)
        t = tessel.tensor(x, requires_grad=True)
        y = tessel.logcumsumexp(t, 0)
        y.sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12, atol=1e-12)
        grad = np.array([sum(np.exp(x[j] - want[i]) for i in range(j, len(x))) for j in range(len(x))])
        np.testing.assert_allclose(t.grad.numpy(), grad, rtol=1e-12, atol=1e-12)
    rows = tessel.tensor([[0.0, 800.0], [-1e4, 0.0]], dtype=tessel.float32)
    np.testing.assert_allclose(tessel.logcumsumexp(rows, 1).numpy(), [[0.0, 800.0], [-1e4, 0.0]])
    a, b = tessel.tensor([0.5, 2.0], requires_grad=True), tessel.tensor([0.5, -1.0], requires_grad=True)
    tessel.logaddexp(a, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 1 / (1 + np.exp(-3.0))], rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [0.5, 1 / (1 + np.exp(3.0))], rtol=1e-6)


def test_logaddexp_gradients_at_infinities_and_logcumsumexp_dims():
    x = tessel.tensor(math.inf, requires_grad=True)
    tessel.logaddexp(x, tessel.tensor(1.0)).backward()
    assert x.grad.item() == 1.0  # torch's sigmoid(x - y); NaN for a moment today
    y = tessel.tensor(-math.inf, requires_grad=True)
    tessel.logaddexp(y, tessel.tensor(1.0)).backward()
    assert y.grad.item() == 0.0
    with pytest.raises(IndexError, match="Dimension out of range"):
        tessel.logcumsumexp(tessel.ones(2, 3), 2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
