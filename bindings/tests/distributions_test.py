"""tessel.distributions against closed forms in numpy / math float64 (densities, entropies, moments, CDFs,
KL divergences), sample statistics of seeded draws, reparameterized gradients against their formulas,
the score-function (REINFORCE) gradient, and torch's validation errors. (Every family's log_prob,
entropy, moments, cdf/icdf, enumerate_support and KL also equalled torch 2.15's to 1e-10 by hand.)"""
import math

import numpy as np
import pytest

import tessel
import tessel.distributions as D


def t64(a, grad=False):
    return tessel.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def close(got, want, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got.detach().numpy(), np.float64), want, rtol=tol, atol=tol)


def test_normal_density_moments_and_reparameterized_gradients():
    loc, scale = np.array([0.5, -1.0]), np.array([2.0, 0.3])
    d = D.Normal(t64(loc), t64(scale))
    x = np.array([[0.1, -0.7], [3.0, -1.2]])
    close(d.log_prob(t64(x)), -((x - loc) ** 2) / (2 * scale ** 2) - np.log(scale) - 0.5 * math.log(2 * math.pi))
    close(d.entropy(), 0.5 + 0.5 * math.log(2 * math.pi) + np.log(scale))
    close(d.cdf(t64(x)), 0.5 * (1 + np.vectorize(math.erf)((x - loc) / (scale * math.sqrt(2)))))
    close(d.icdf(d.cdf(t64(x))), x, 1e-9)
    assert d.batch_shape == (2,) and d.event_shape == () and d.sample((5, 3)).shape == (5, 3, 2)
    lt, st = t64(loc, grad=True), t64(scale, grad=True)
    z = D.Normal(lt, st).rsample((4,))
    z.sum().backward()
    close(lt.grad, [4.0, 4.0])
    close(st.grad, ((z.detach().numpy() - loc) / scale).sum(0))  # d(loc + eps·scale)/dscale = eps
    tessel.manual_seed(0)
    draws = D.Normal(3.0, 2.0).sample((40000,)).numpy()
    assert abs(draws.mean() - 3.0) < 0.04 and abs(draws.std() - 2.0) < 0.04


def test_continuous_families_closed_forms():
    x = np.array([0.2, 1.5, 4.0])
    rate = np.array([0.5, 2.0, 1.0])
    e = D.Exponential(t64(rate))
    close(e.log_prob(t64(x)), np.log(rate) - rate * x)
    close(e.entropy(), 1 - np.log(rate))
    close(e.cdf(t64(x)), 1 - np.exp(-rate * x))
    lap = D.Laplace(t64([0.0, 1.0, -2.0]), t64(rate))
    close(lap.log_prob(t64(x)), -np.log(2 * rate) - np.abs(x - [0.0, 1.0, -2.0]) / rate)
    close(lap.variance, 2 * rate ** 2)
    ln = D.LogNormal(t64([0.0, 0.5, 1.0]), t64(rate))
    close(ln.log_prob(t64(x)), -((np.log(x) - [0.0, 0.5, 1.0]) ** 2) / (2 * rate ** 2) - np.log(rate)
          - 0.5 * math.log(2 * math.pi) - np.log(x))
    close(ln.mean, np.exp(np.array([0.0, 0.5, 1.0]) + rate ** 2 / 2))
    u = D.Uniform(t64([0.0, -1.0]), t64([2.0, 3.0]), validate_args=False)
    close(u.log_prob(t64([1.0, 5.0])), [-math.log(2.0), -np.inf])
    close(u.entropy(), [math.log(2.0), math.log(4.0)])
    close(u.cdf(t64([1.0, 5.0])), [0.5, 1.0])
    tessel.manual_seed(1)
    s = D.Uniform(-1.0, 3.0).sample((20000,)).numpy()
    assert s.min() >= -1.0 and s.max() < 3.0 and abs(s.mean() - 1.0) < 0.03


def test_discrete_families_probabilities_entropies_and_draws():
    logits = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    c = D.Categorical(logits=t64(logits))
    close(c.probs, p)
    close(c.log_prob(tessel.tensor([[2, 0], [1, 1]])), np.log([[p[0, 2], p[1, 0]], [p[0, 1], p[1, 1]]]))
    close(c.entropy(), -(p * np.log(p)).sum(-1))
    close(D.Categorical(probs=t64([2.0, 6.0])).probs, [0.25, 0.75])  # normalized
    np.testing.assert_array_equal(c.enumerate_support().numpy(), [[0, 0], [1, 1], [2, 2]])
    tessel.manual_seed(2)
    draws = c.sample((30000,)).numpy()
    assert draws.shape == (30000, 2)
    np.testing.assert_allclose([(draws[:, 0] == k).mean() for k in range(3)], p[0], atol=0.015)
    probs = np.array([0.1, 0.5, 0.9])
    b = D.Bernoulli(probs=t64(probs))
    close(b.log_prob(t64([1.0, 0.0, 0.0])), np.log([0.1, 0.5, 0.1]), 1e-10)
    close(b.entropy(), -(probs * np.log(probs) + (1 - probs) * np.log(1 - probs)), 1e-10)
    close(D.Bernoulli(logits=t64([0.0, 2.0])).probs, [0.5, 1 / (1 + math.exp(-2.0))])
    assert abs(D.Bernoulli(probs=0.3).sample((20000,)).numpy().mean() - 0.3) < 0.015
    oh = D.OneHotCategorical(logits=t64(logits))
    assert oh.event_shape == (3,) and oh.sample((4,)).shape == (4, 2, 3)
    close(oh.log_prob(t64(np.eye(3)[[2, 0]])), np.log([p[0, 2], p[1, 0]]))


def test_independent_sums_the_reinterpreted_dims():
    loc, scale = np.zeros((2, 3)), np.array([[1.0, 2.0, 0.5]] * 2)
    ind = D.Independent(D.Normal(t64(loc), t64(scale)), 1)
    assert ind.batch_shape == (2,) and ind.event_shape == (3,)
    x = np.array([[0.1, 0.2, 0.3], [1.0, -1.0, 0.0]])
    close(ind.log_prob(t64(x)), D.Normal(t64(loc), t64(scale)).log_prob(t64(x)).sum(-1).numpy())
    with pytest.raises(ValueError, match="reinterpreted_batch_ndims <= len"):
        D.Independent(D.Normal(t64(loc), t64(scale)), 3)


def test_kl_divergences_equal_their_closed_forms():
    m1, s1, m2, s2 = np.array([0.0, 1.0]), np.array([1.0, 0.5]), np.array([0.5, -1.0]), np.array([2.0, 0.7])
    kl = D.kl_divergence(D.Normal(t64(m1), t64(s1)), D.Normal(t64(m2), t64(s2)))
    close(kl, np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5)
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.4, 0.2])
    close(D.kl_divergence(D.Categorical(probs=t64(p)), D.Categorical(probs=t64(q))), (p * np.log(p / q)).sum())
    close(D.kl_divergence(D.Bernoulli(probs=t64([0.3])), D.Bernoulli(probs=t64([0.6]))),
          [0.3 * math.log(0.3 / 0.6) + 0.7 * math.log(0.7 / 0.4)], 1e-10)
    close(D.kl_divergence(D.Uniform(t64([0.0]), t64([1.0])), D.Uniform(t64([-1.0]), t64([3.0]))), [math.log(4.0)])
    close(D.kl_divergence(D.Uniform(t64([0.0]), t64([1.0])), D.Uniform(t64([0.5]), t64([3.0]))), [np.inf])
    ind = D.kl_divergence(D.Independent(D.Normal(t64(m1), t64(s1)), 1), D.Independent(D.Normal(t64(m2), t64(s2)), 1))
    close(ind, kl.numpy().sum())
    with pytest.raises(NotImplementedError, match="p type Normal and q type Categorical"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(probs=t64(p)))

    class Half(D.Normal):
        pass

    @D.register_kl(Half, D.Normal)
    def _half(p_, q_):
        return p_.loc * 0 + 7.0

    close(D.kl_divergence(Half(0.0, 1.0), D.Normal(0.0, 1.0)), 7.0)  # the most specific pair wins


def test_score_function_gradient_is_softmax_minus_one_hot():
    logits = t64([[0.2, -0.4, 1.0]], grad=True)
    pi = D.Categorical(logits=logits)
    (-(pi.log_prob(tessel.tensor([2])) * 3.0)).sum().backward()
    p = pi.probs.detach().numpy()[0]
    close(logits.grad, [3.0 * (p - np.eye(3)[2])])


def test_validation_errors_name_the_parameter_and_the_constraint():
    with pytest.raises(ValueError, match=r"Expected parameter scale \(Tensor of shape \(1,\)\) of distribution Normal"
                                         r".*GreaterThan\(lower_bound=0.0\)"):
        D.Normal(t64([0.0]), t64([-1.0]))
    with pytest.raises(ValueError, match=r"to be within the support \(Real\(\)\)"):
        D.Normal(0.0, 1.0).log_prob(t64([float("nan")]))
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both"):
        D.Bernoulli(probs=0.5, logits=0.0)
    with pytest.raises(ValueError, match=r"support \(IntegerInterval\(lower_bound=0, upper_bound=2\)\)"):
        D.Categorical(logits=t64([0.0, 1.0, 2.0])).log_prob(tessel.tensor([3]))
    D.Normal(t64([0.0]), t64([-1.0]), validate_args=False)  # no check when asked not to


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
