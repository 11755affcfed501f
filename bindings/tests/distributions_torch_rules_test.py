"""torch.distributions against torch 2.15, from the thirty-eighth session's sweep (each expected value below is
torch 2.15's for the same call): log_prob at the support's boundary through xlogy (Gamma, Chi2, Beta, Dirichlet
gave NaN where torch gives finite values), Geometric without a probability clamp, scalar-parameter samples
that are 0-d, and the sigmoid / tanh / affine transforms' clamps."""
import math

import numpy as np
import pytest

import tessel
from tessel import distributions as D

F64 = tessel.float64


def t(v):
    return tessel.tensor(v, dtype=F64)


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=1e-12)


def test_log_prob_at_the_support_boundary_is_finite_as_torchs():
    close(D.Gamma(t([1.0]), t([2.0])).log_prob(t([0.0])).tolist(), [math.log(2.0)])
    close(D.Chi2(t([2.0])).log_prob(t([0.0])).tolist(), [-math.log(2.0)])
    close(D.Beta(t([1.0, 2.0]), t([1.0, 1.0])).log_prob(t([0.0, 1.0])).tolist(), [0.0, math.log(2.0)])
    close([D.Dirichlet(t([1.0, 1.0, 2.0])).log_prob(t([0.0, 0.5, 0.5])).item()], [math.log(3.0)])
    close(D.Gamma(t([3.0]), t([2.0])).log_prob(t([0.5])).tolist(),  # inside: the textbook formula
          [3 * math.log(2.0) + 2 * math.log(0.5) - 1.0 - math.lgamma(3.0)])
    assert D.Gamma(t([3.0]), t([2.0])).log_prob(t([0.0])).item() == -math.inf


def test_geometric_log_prob_takes_tiny_and_unit_probabilities_as_they_are():
    p = t([1e-15, 1e-13])
    close(D.Geometric(probs=p).log_prob(t([0.0, 2.0])).tolist(),
          [math.log(1e-15), 2 * math.log1p(-1e-13) + math.log(1e-13)])  # the clamp at 1e-12 gave -27.63 twice
    assert D.Geometric(probs=t([1.0, 1.0])).log_prob(t([0.0, 1.0])).tolist() == [0.0, -math.inf]


def test_scalar_parameter_samples_are_zero_dim():
    tessel.manual_seed(0)
    for d in (D.Gamma(2.0, 1.0), D.Beta(2.0, 3.0), D.Poisson(3.0), D.Chi2(3.0), D.StudentT(4.0),
              D.Geometric(probs=0.3), D.Binomial(5, probs=0.3)):
        s = d.sample()
        assert tuple(s.shape) == (), type(d).__name__  # was (1,)
        assert tuple(d.log_prob(s).shape) == ()
        assert tuple(d.sample((3,)).shape) == (3,)



def test_sigmoid_tanh_and_affine_transforms_clamp_as_torch():
    d = D.TransformedDistribution(D.Normal(t([0.3, -1.0]), t([5.0, 20.0])), [D.SigmoidTransform()])
    np.testing.assert_allclose(d.log_prob(t([1e-20, 1e-100])).tolist(), [0.5537, 160.6445], atol=1e-4)  # torch's
    T = D.SigmoidTransform()
    np.testing.assert_allclose(T.inv(T(t([-800.0]))).tolist(), [-708.3964], atol=1e-4)  # tiny, not eps (-36.04)
    d2 = D.TransformedDistribution(D.Normal(t([0.3, -1.0]), t([0.5, 20.0])), [D.TanhTransform()])
    np.testing.assert_allclose(d2.log_prob(t([1 - 1e-16, -(1 - 1e-16)])).tolist(), [-642.4047, 31.7367], atol=1e-4)
    d3 = D.TransformedDistribution(D.Normal(t([0.3]), t([0.5])), [D.AffineTransform(1.5, -2.0)])
    assert d3.log_prob(t([math.inf])).tolist() == [-math.inf]  # x * 0 made the Jacobian term NaN


def test_uniform_support_is_closed_as_torchs():
    u = D.Uniform(tessel.tensor(0.0), tessel.tensor(2.0), validate_args=True)
    assert u.support.check(tessel.tensor(2.0)).item() and not u.support.check(tessel.tensor(2.5)).item()
    assert u.log_prob(tessel.tensor(2.0)).item() == -math.inf  # raised ValueError (a half-open support)
    with pytest.raises(ValueError):
        u.log_prob(tessel.tensor(2.5))


def test_parameters_checked_as_torch_validates_them():
    for make in (lambda: D.Chi2(tessel.tensor(-1.5)), lambda: D.Binomial(total_count=-1, probs=tessel.tensor(0.3)),
                 lambda: D.Binomial(total_count=2.5, probs=tessel.tensor(0.3)),
                 lambda: D.Geometric(probs=tessel.tensor(0.0))):
        with pytest.raises(ValueError, match="Expected parameter"):  # each was accepted
            make()
    D.Chi2(tessel.tensor(1.5))  # valid ones and lazily derived parameters pass
    D.Binomial(5, logits=tessel.tensor(0.3))
    D.Geometric(logits=tessel.tensor(-50.0))
    assert D.Chi2(tessel.tensor(-1.5), validate_args=False).df.item() == -1.5

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
