"""torch.distributions against torch 2.15, from the thirty-eighth session's sweep (each expected value below is
torch 2.15's for the same call): log_prob at the support's boundary through xlogy (Gamma, Chi2, Beta, Dirichlet
gave NaN where torch gives finite values), Geometric without a probability clamp, and scalar-parameter samples
that are 0-d."""
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


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
