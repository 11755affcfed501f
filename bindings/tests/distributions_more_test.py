"""torch.distributions' further families and transforms (tessel/distributions/_more_families.py, transforms.py)
against densities written out in numpy/math (float64): MultivariateNormal (log_prob, entropy, gradients by
finite differences, rsample's moments, KL), Cauchy, HalfNormal, HalfCauchy, Gumbel, Gamma, Chi2, Beta,
Dirichlet, StudentT, Poisson, Binomial, Geometric (log_prob, entropy where torch has it, sample moments,
manual_seed reproducibility), KL(Gamma‖Gamma) and KL(Beta‖Beta) against numerical integration, and
TransformedDistribution with the Tanh (SAC), Affine, Exp, Sigmoid and Power transforms."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.distributions as D
from sharded_equivalence import finite_difference


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])
LOC = np.array([0.1, -0.2, 0.3])


def mvn_logpdf(x, mu, cov):
    d = x - mu
    return -0.5 * (len(mu) * math.log(2 * math.pi) + math.log(np.linalg.det(cov)) + d @ np.linalg.solve(cov, d))


def test_multivariate_normal():
    mvn = D.MultivariateNormal(t(LOC), covariance_matrix=t(COV))
    xs = np.array([[0.5, 0.1, -0.3], [1.0, 2.0, 0.0]])
    np.testing.assert_allclose(mvn.log_prob(t(xs)).numpy(), [mvn_logpdf(x, LOC, COV) for x in xs], rtol=1e-12)
    entropy = 0.5 * (3 * (1 + math.log(2 * math.pi)) + math.log(np.linalg.det(COV)))
    assert mvn.entropy().item() == pytest.approx(entropy, rel=1e-12)
    by_precision = D.MultivariateNormal(t(LOC), precision_matrix=t(np.linalg.inv(COV)))
    np.testing.assert_allclose(by_precision.log_prob(t(xs)).numpy(), mvn.log_prob(t(xs)).numpy(), rtol=1e-10)
    np.testing.assert_allclose(mvn.covariance_matrix.numpy(), COV, rtol=1e-12)
    tessel.manual_seed(0)
    draws = mvn.rsample((40000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), LOC, atol=0.03)
    np.testing.assert_allclose(np.cov(draws.T), COV, atol=0.05)
    # d log_prob / d(loc, covariance) against central differences (covariance perturbed symmetrically)
    x = xs[0]
    loc = t(LOC, requires_grad=True)
    cov = t(COV, requires_grad=True)
    D.MultivariateNormal(loc, covariance_matrix=cov).log_prob(t(x)).backward()
    np.testing.assert_allclose(loc.grad.numpy(), finite_difference(lambda m: mvn_logpdf(x, m, COV), LOC.copy()),
                               rtol=1e-6)
    e = np.zeros((3, 3))
    e[0, 1] = e[1, 0] = 1.0
    numerical = (mvn_logpdf(x, LOC, COV + 1e-6 * e) - mvn_logpdf(x, LOC, COV - 1e-6 * e)) / 2e-6
    assert (cov.grad.numpy() * e).sum() == pytest.approx(numerical, rel=1e-6)
    other = 2 * COV + np.eye(3)
    q = D.MultivariateNormal(t([0.0, 0.0, 0.0]), scale_tril=t(np.linalg.cholesky(other)))
    inv = np.linalg.inv(other)
    want = 0.5 * (np.trace(inv @ COV) + LOC @ inv @ LOC - 3 + math.log(np.linalg.det(other) / np.linalg.det(COV)))
    assert D.kl_divergence(mvn, q).item() == pytest.approx(want, rel=1e-10)
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix or precision_matrix or scale_tril"):
        D.MultivariateNormal(t(LOC))


def lgamma(x):
    return math.lgamma(x)


def test_continuous_families_densities():
    v = np.array([0.3, 1.2, 2.5])
    checks = [
        (D.Cauchy(t(0.5), t(2.0)), lambda x: -math.log(math.pi * 2.0 * (1 + ((x - 0.5) / 2.0) ** 2)), v),
        (D.HalfNormal(t(1.5)), lambda x: math.log(2) - 0.5 * math.log(2 * math.pi) - math.log(1.5) - x * x / 4.5, v),
        (D.HalfCauchy(t(1.5)), lambda x: math.log(2 / (math.pi * 1.5 * (1 + (x / 1.5) ** 2))), v),
        (D.Gumbel(t(0.5), t(2.0)), lambda x: -math.log(2.0) - (x - 0.5) / 2 - math.exp(-(x - 0.5) / 2), v),
        (D.Gamma(t(2.5), t(1.5)), lambda x: 2.5 * math.log(1.5) + 1.5 * math.log(x) - 1.5 * x - lgamma(2.5), v),
        (D.Chi2(t(3.0)), lambda x: -1.5 * math.log(2) - lgamma(1.5) + 0.5 * math.log(x) - x / 2, v),
        (D.Beta(t(2.0), t(3.0)), lambda x: math.log(x) + 2 * math.log(1 - x) + lgamma(5) - lgamma(2) - lgamma(3),
         np.array([0.3, 0.6, 0.9])),
        (D.StudentT(t(4.0), t(0.5), t(2.0)), lambda x: lgamma(2.5) - lgamma(2) - 0.5 * math.log(4 * math.pi)
         - math.log(2.0) - 2.5 * math.log(1 + ((x - 0.5) / 2) ** 2 / 4), v),
    ]
    for dist, logpdf, values in checks:
        np.testing.assert_allclose(dist.log_prob(t(values)).numpy(), [logpdf(x) for x in values], rtol=1e-12,
                                   err_msg=type(dist).__name__)
    assert D.Cauchy(t(0.5), t(2.0)).cdf(t(2.5)).item() == pytest.approx(0.5 + math.atan(1.0) / math.pi)
    # entropies against numerical integration of -p log p
    grid = np.linspace(1e-6, 60, 600001)
    for dist in (D.Gamma(t(2.5), t(1.5)), D.HalfNormal(t(1.5))):
        lp = dist.log_prob(t(grid)).numpy()
        assert dist.entropy().item() == pytest.approx(-np.trapz(np.exp(lp) * lp, grid), rel=1e-6)
    unit = np.linspace(1e-7, 1 - 1e-7, 400001)
    beta = D.Beta(t(2.0), t(3.0))
    lp = beta.log_prob(t(unit)).numpy()
    assert beta.entropy().item() == pytest.approx(-np.trapz(np.exp(lp) * lp, unit), rel=1e-6)
    line = np.linspace(-400, 400, 1600001)
    student = D.StudentT(t(4.0), t(0.5), t(2.0))
    lp = student.log_prob(t(line)).numpy()
    assert student.entropy().item() == pytest.approx(-np.trapz(np.exp(lp) * lp, line), rel=1e-5)
    dirichlet = D.Dirichlet(t([1.5, 2.0, 0.5]))
    x = np.array([0.2, 0.5, 0.3])
    want = lgamma(4.0) - lgamma(1.5) - lgamma(2.0) - lgamma(0.5) + 0.5 * math.log(0.2) + 1.0 * math.log(0.5) \
        - 0.5 * math.log(0.3)
    assert dirichlet.log_prob(t(x)).item() == pytest.approx(want, rel=1e-12)


def test_kl_between_gammas_and_betas_against_integration():
    grid = np.linspace(1e-7, 80, 800001)
    p, q = D.Gamma(t(2.5), t(1.5)), D.Gamma(t(1.0), t(0.5))
    lp, lq = p.log_prob(t(grid)).numpy(), q.log_prob(t(grid)).numpy()
    assert D.kl_divergence(p, q).item() == pytest.approx(np.trapz(np.exp(lp) * (lp - lq), grid), rel=1e-5)
    unit = np.linspace(1e-8, 1 - 1e-8, 400001)
    p, q = D.Beta(t(2.0), t(3.0)), D.Beta(t(1.0), t(1.5))
    lp, lq = p.log_prob(t(unit)).numpy(), q.log_prob(t(unit)).numpy()
    assert D.kl_divergence(p, q).item() == pytest.approx(np.trapz(np.exp(lp) * (lp - lq), unit), rel=1e-5)


def test_discrete_families():
    k = np.array([0.0, 2.0, 5.0])
    pois = D.Poisson(t(2.5))
    np.testing.assert_allclose(pois.log_prob(t(k)).numpy(), [x * math.log(2.5) - 2.5 - lgamma(x + 1) for x in k],
                               rtol=1e-12)
    binom = D.Binomial(10, t(0.3))
    want = [lgamma(11) - lgamma(x + 1) - lgamma(11 - x) + x * math.log(0.3) + (10 - x) * math.log(0.7) for x in k]
    np.testing.assert_allclose(binom.log_prob(t(k)).numpy(), want, rtol=1e-10)
    probs = np.exp(binom.log_prob(t(np.arange(11.0))).numpy())
    assert probs.sum() == pytest.approx(1.0) and binom.entropy().item() == pytest.approx(-(probs * np.log(probs)).sum())
    geo = D.Geometric(t(0.3))
    np.testing.assert_allclose(geo.log_prob(t(k)).numpy(), k * math.log(0.7) + math.log(0.3), rtol=1e-12)
    assert D.Binomial(10, logits=t(math.log(0.3 / 0.7))).log_prob(t(2.0)).item() == pytest.approx(want[1])


@pytest.mark.parametrize("dist, mean, var", [
    (lambda: D.Gamma(t(2.5), t(1.5)), 2.5 / 1.5, 2.5 / 1.5 ** 2),
    (lambda: D.Beta(t(2.0), t(3.0)), 0.4, 6 / (25 * 6)),
    (lambda: D.StudentT(t(6.0), t(0.5), t(2.0)), 0.5, 4 * 6 / 4),
    (lambda: D.Poisson(t(2.5)), 2.5, 2.5),
    (lambda: D.Binomial(10, t(0.3)), 3.0, 2.1),
    (lambda: D.Geometric(t(0.3)), 0.7 / 0.3, 0.7 / 0.09),
    (lambda: D.Gumbel(t(0.5), t(2.0)), 0.5 + 2 * 0.5772156649015329, math.pi ** 2 / 6 * 4),
])
def test_samples_have_the_moments_and_follow_manual_seed(dist, mean, var):
    tessel.manual_seed(3)
    d = dist()
    draws = (d.rsample((60000,)) if d.has_rsample else d.sample((60000,))).numpy()
    assert draws.mean() == pytest.approx(mean, abs=0.03 * max(1.0, math.sqrt(var)))
    assert draws.var() == pytest.approx(var, rel=0.06)
    tessel.manual_seed(3)
    again = (d.rsample((60000,)) if d.has_rsample else d.sample((60000,))).numpy()
    np.testing.assert_array_equal(draws, again)


def test_dirichlet_samples_and_gamma_family_rsample_refusal():
    tessel.manual_seed(1)
    draws = D.Dirichlet(t([1.5, 2.0, 0.5])).sample((30000,)).numpy()
    np.testing.assert_allclose(draws.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(draws.mean(0), np.array([1.5, 2.0, 0.5]) / 4.0, atol=0.01)
    # rsample draws the same values as sample (the gradients: gamma_rsample_test)
    tessel.manual_seed(3)
    a = D.Gamma(t(2.0), t(1.5)).sample((5,)).numpy()
    tessel.manual_seed(3)
    np.testing.assert_allclose(D.Gamma(t(2.0), t(1.5)).rsample((5,)).detach().numpy(), a, rtol=1e-6)


def test_transformed_distributions():
    mu, sd = np.array([0.1, -0.5]), np.array([0.8, 1.2])
    squashed = D.TransformedDistribution(D.Normal(t(mu), t(sd)), [D.TanhTransform(cache_size=1)])
    y = np.array([0.3, -0.9])
    x = np.arctanh(y)
    want = -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * math.log(2 * math.pi) - np.log(1 - y * y)
    np.testing.assert_allclose(squashed.log_prob(t(y)).numpy(), want, rtol=1e-10)
    tessel.manual_seed(0)
    a = squashed.rsample()
    pre = squashed.transforms[0].inv(a)  # the cached pre-tanh sample, not atanh of a rounded value
    np.testing.assert_allclose(pre.detach().tanh().numpy(), a.detach().numpy())
    ln = D.TransformedDistribution(D.Normal(t(0.0), t(1.0)), [D.AffineTransform(1.0, 2.0), D.ExpTransform()])
    np.testing.assert_allclose(ln.log_prob(t([0.5, 2.0, 7.0])).numpy(),
                               D.LogNormal(t(1.0), t(2.0)).log_prob(t([0.5, 2.0, 7.0])).numpy(), rtol=1e-12)
    logit_normal = D.TransformedDistribution(D.Normal(t(0.2), t(1.0)), D.SigmoidTransform())
    u = np.array([0.2, 0.5, 0.9])
    z = np.log(u / (1 - u))
    np.testing.assert_allclose(logit_normal.log_prob(t(u)).numpy(),
                               -0.5 * (z - 0.2) ** 2 - 0.5 * math.log(2 * math.pi) - np.log(u * (1 - u)), rtol=1e-10)
    weibull_like = D.TransformedDistribution(D.Exponential(t(1.0)), [D.PowerTransform(t(0.5))])
    w = np.array([0.5, 1.2])
    np.testing.assert_allclose(weibull_like.log_prob(t(w)).numpy(), -w ** 2 + np.log(2 * w), rtol=1e-12)
    mu_t = t(mu, requires_grad=True)
    D.TransformedDistribution(D.Normal(mu_t, t(sd)), [D.TanhTransform()]).log_prob(t(y)).sum().backward()
    np.testing.assert_allclose(mu_t.grad.numpy(), (x - mu) / sd ** 2, rtol=1e-10)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
