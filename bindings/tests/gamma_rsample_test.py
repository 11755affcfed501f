"""Reparameterized samples of the Gamma family (torch's implicit reparameterization): the derivative of each
standard-gamma sample keeps its CDF level (checked with tessel's float64 incomplete gamma at a moved α), and
Monte Carlo gradients of the means match their closed forms for Gamma, Chi2, Beta, Dirichlet and StudentT."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributions as D
from tessel.distributions._more_families import _standard_gamma_grad
from tessel._special_more import _gammainc_pair


@pytest.mark.parametrize("alpha", [0.3, 1.0, 2.5, 7.0, 40.0])
def test_each_samples_derivative_keeps_its_cdf_level(alpha):
    rng = np.random.default_rng(1)
    x = rng.standard_gamma(alpha, 64)
    a = np.full_like(x, alpha)
    d = _standard_gamma_grad(a, x)
    step = 1e-4 * alpha
    level, _ = _gammainc_pair(a, x)
    moved, _ = _gammainc_pair(a + step, x + step * d)
    unmoved, _ = _gammainc_pair(a + step, x)
    # following dx/dα keeps P to second order; standing still moves it at first order
    assert np.max(np.abs(moved - level)) < 1e-3 * np.max(np.abs(unmoved - level))
    assert np.all(d > 0)  # larger α, larger samples at the same level


def mc_grad(make, param, n=40000, reduce=lambda x: x.mean()):
    tessel.manual_seed(0)
    p = tessel.tensor(param, dtype=tessel.float64, requires_grad=True)
    reduce(make(p).rsample((n,))).backward()
    return p.grad.numpy()


def test_monte_carlo_gradients_of_the_means():
    # Gamma(α, β): E = α / β
    g = mc_grad(lambda a: D.Gamma(a, tessel.tensor(3.0, dtype=tessel.float64)), 2.0)
    assert g == pytest.approx(1 / 3, rel=0.03)
    g = mc_grad(lambda b: D.Gamma(tessel.tensor(2.0, dtype=tessel.float64), b), 3.0)
    assert g == pytest.approx(-2 / 9, rel=0.03)
    # Chi²(k): E = k
    assert mc_grad(lambda k: D.Chi2(k), 3.0) == pytest.approx(1.0, rel=0.03)
    # Beta(a, b): E = a / (a + b), d/da = b / (a + b)²
    g = mc_grad(lambda a: D.Beta(a, tessel.tensor(3.0, dtype=tessel.float64)), 2.0)
    assert g == pytest.approx(3 / 25, rel=0.05)
    # Dirichlet(c): E_0 = c_0 / Σc, d/dc = (Σc - c_0, -c_0, -c_0) / (Σc)²
    c = np.array([1.5, 2.0, 0.5])
    g = mc_grad(lambda t: D.Dirichlet(t), c, reduce=lambda x: x[:, 0].mean())
    np.testing.assert_allclose(g, np.array([c.sum() - c[0], -c[0], -c[0]]) / c.sum() ** 2, rtol=0.06, atol=2e-3)
    # StudentT(df, loc, scale): E|X - loc| / scale depends on df only; the loc gradient of the mean is 1
    g = mc_grad(lambda loc: D.StudentT(tessel.tensor(5.0, dtype=tessel.float64), loc), 0.5)
    assert g == pytest.approx(1.0, abs=1e-9)
    assert all(d.has_rsample for d in (D.Gamma(1.0, 1.0), D.Beta(1.0, 1.0), D.StudentT(3.0)))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
