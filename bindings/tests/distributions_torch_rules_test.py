"""torch.distributions against torch 2.15, from the thirty-eighth session's sweep (each expected value below is
torch 2.15's for the same call): log_prob at the support's boundary through xlogy (Gamma, Chi2, Beta, Dirichlet
gave NaN where torch gives finite values), Geometric without a probability clamp, scalar-parameter samples
that are 0-d, and the sigmoid / tanh / affine transforms' clamps.

Then the families tessel lacked (Multinomial, NegativeBinomial, MixtureSameFamily, Weibull, Pareto, Kumaraswamy,
InverseGamma, LogisticNormal, RelaxedBernoulli, RelaxedOneHotCategorical, VonMises, ContinuousBernoulli,
FisherSnedecor, LowRankMultivariateNormal, Wishart, LKJCholesky), expand, StickBreakingTransform and the rest of
torch's KL registry: TORCH holds torch 2.15's values for the CASES calls of the same key, the other tests
torch's samples, moments, shapes, gradients and error messages, each pasted from torch."""
import math
import re

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


inf, nan = math.inf, math.nan


def MIX():
    return D.MixtureSameFamily(D.Categorical(probs=t([0.2, 0.5, 0.3])),
                               D.Normal(t([-1.0, 0.0, 2.0]), t([0.5, 1.0, 0.3])))


def MIX2():
    comp = D.Independent(D.Normal(t([[[0.0, 1.0], [2.0, -1.0]], [[0.5, 0.5], [-2.0, 0.0]]]),
                                  t([[[1.0, 0.5], [0.3, 2.0]], [[1.0, 1.0], [0.5, 0.5]]])), 1)
    return D.MixtureSameFamily(D.Categorical(logits=t([[0.2, 0.5], [1.0, -1.0]])), comp)


def WEI():
    return D.Weibull(t([1.5, 0.7, 2.0]), t([0.8, 2.5, 1.0]))


def PAR():
    return D.Pareto(t([1.0, 2.0, 0.5]), t([0.5, 1.5, 3.0]))


def KUM():
    return D.Kumaraswamy(t([0.5, 2.0, 3.0]), t([0.7, 1.5, 4.0]))


def IG():
    return D.InverseGamma(t([0.5, 2.5, 3.5]), t([1.0, 2.0, 0.5]))


def CB():
    return D.ContinuousBernoulli(probs=t([0.2, 0.4995, 0.8, 0.999]))


def FS():
    return D.FisherSnedecor(t([1.5, 3.0, 5.0]), t([1.0, 4.5, 10.0]))


def LR():
    return D.LowRankMultivariateNormal(t([[0.1, 0.2, 0.3], [1.0, -1.0, 0.0]]), t([[1.0, 0.5], [0.2, -0.3], [0.0, 1.0]]),
                                       t([1.0, 2.0, 0.5]))


def COV():
    return t([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])


def WIS():
    return D.Wishart(t(4.5), covariance_matrix=COV())


def KL(p, q):
    return D.kl_divergence(p, q)


CASES = {
    # Multinomial: log_prob's 0 · log 0 rule at a -inf logit, entropy over the binomial support
    "multinomial.log_prob": lambda: D.Multinomial(5, probs=t([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])).log_prob(
        t([[1.0, 1.0, 3.0], [5.0, 0.0, 0.0]])),
    "multinomial.entropy": lambda: D.Multinomial(5, probs=t([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])).entropy(),
    "multinomial.mean": lambda: D.Multinomial(5, probs=t([0.2, 0.3, 0.5])).mean,
    "multinomial.variance": lambda: D.Multinomial(5, probs=t([0.2, 0.3, 0.5])).variance,
    "multinomial.inf_logit": lambda: D.Multinomial(3, logits=t([0.5, -inf, 2.0])).log_prob(t([1.0, 0.0, 2.0])),
    "multinomial.any_total": lambda: D.Multinomial(logits=t([0.5, -1.0, 2.0, 0.0]), validate_args=False).log_prob(
        t([1.0, 0.0, 9.0, 1.0])),
    # NegativeBinomial: total_count 0 at value 0 has probability 1
    "negbin.log_prob": lambda: D.NegativeBinomial(t([3.0, 0.0, 5.5]), probs=t([0.3, 0.5, 0.8])).log_prob(
        t([2.0, 0.0, 7.0])),
    "negbin.mean": lambda: D.NegativeBinomial(t([3.0, 5.5]), logits=t([-1.0, 0.5])).mean,
    "negbin.mode": lambda: D.NegativeBinomial(t([3.0, 5.5]), logits=t([-1.0, 0.5])).mode,
    "negbin.variance": lambda: D.NegativeBinomial(t([3.0, 5.5]), logits=t([-1.0, 0.5])).variance,
    # MixtureSameFamily over Normal and over Independent(Normal) components
    "mixture.mean": lambda: MIX().mean,
    "mixture.variance": lambda: MIX().variance,
    "mixture.log_prob": lambda: MIX().log_prob(t([0.5, -1.0, 2.1])),
    "mixture.cdf": lambda: MIX().cdf(t([0.5, -1.0, 2.1])),
    "mixture.batched_log_prob": lambda: MIX2().log_prob(t([[0.5, 1.0], [0.0, -0.5]])),
    "mixture.batched_mean": lambda: MIX2().mean,
    "mixture.batched_variance": lambda: MIX2().variance,
    "mixture.expand_log_prob": lambda: MIX().expand((2, 1)).log_prob(t([[0.5], [2.0]])),
    # Weibull
    "weibull.mean": lambda: WEI().mean,
    "weibull.mode": lambda: WEI().mode,
    "weibull.variance": lambda: WEI().variance,
    "weibull.entropy": lambda: WEI().entropy(),
    "weibull.log_prob": lambda: WEI().log_prob(t([0.3, 1.1, 2.5])),
    "weibull.cdf": lambda: WEI().cdf(t([0.3, 1.1, 2.5])),
    "weibull.icdf": lambda: WEI().icdf(t([0.1, 0.5, 0.9])),
    # Pareto: mean / variance infinite below alpha 1 / 2
    "pareto.mean": lambda: PAR().mean,
    "pareto.variance": lambda: PAR().variance,
    "pareto.entropy": lambda: PAR().entropy(),
    "pareto.log_prob": lambda: PAR().log_prob(t([1.5, 2.5, 0.7])),
    "pareto.cdf": lambda: PAR().cdf(t([1.5, 2.5, 0.7])),
    "pareto.icdf": lambda: PAR().icdf(t([0.1, 0.5, 0.9])),
    # Kumaraswamy: its cdf through the decreasing affine step (1 - the base's level)
    "kumaraswamy.mean": lambda: KUM().mean,
    "kumaraswamy.mode": lambda: KUM().mode,
    "kumaraswamy.variance": lambda: KUM().variance,
    "kumaraswamy.entropy": lambda: KUM().entropy(),
    "kumaraswamy.log_prob": lambda: KUM().log_prob(t([0.2, 0.5, 0.9])),
    "kumaraswamy.cdf": lambda: KUM().cdf(t([0.2, 0.5, 0.9])),
    "kumaraswamy.icdf": lambda: KUM().icdf(t([0.1, 0.5, 0.9])),
    # InverseGamma
    "inverse_gamma.mean": lambda: IG().mean,
    "inverse_gamma.mode": lambda: IG().mode,
    "inverse_gamma.variance": lambda: IG().variance,
    "inverse_gamma.entropy": lambda: IG().entropy(),
    "inverse_gamma.log_prob": lambda: IG().log_prob(t([0.4, 1.5, 0.2])),
    "inverse_gamma.cdf": lambda: IG().cdf(t([0.4, 1.5, 0.2])),
    # LogisticNormal (a scalar batch is expanded to [1], as torch's)
    "logistic_normal.log_prob": lambda: D.LogisticNormal(t([[0.2, -0.5], [1.0, 0.0]]),
                                                         t([[1.0, 0.5], [0.3, 2.0]])).log_prob(
        t([[0.3, 0.5, 0.2], [0.6, 0.1, 0.3]])),
    "logistic_normal.unbatched": lambda: D.LogisticNormal(t([0.2, -0.5]), t([1.0, 0.5])).log_prob(t([0.3, 0.5, 0.2])),
    # RelaxedBernoulli / RelaxedOneHotCategorical
    "relaxed_bernoulli.log_prob": lambda: D.RelaxedBernoulli(t(0.5), probs=t([0.2, 0.7, 0.5])).log_prob(
        t([0.1, 0.8, 0.5])),
    "relaxed_bernoulli.logits": lambda: D.RelaxedBernoulli(t([0.3]), logits=t([-1.0, 2.0])).log_prob(t([0.3, 0.99])),
    "relaxed_one_hot.log_prob": lambda: D.RelaxedOneHotCategorical(t(0.7), probs=t([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])
                                                                   ).log_prob(t([[0.1, 0.3, 0.6], [0.5, 0.25, 0.25]])),
    "relaxed_one_hot.logits": lambda: D.RelaxedOneHotCategorical(t([2.0]), logits=t([1.0, -1.0, 0.5, 0.0])).log_prob(
        t([0.1, 0.3, 0.4, 0.2])),
    # VonMises: torch's polynomial log I0 / log I1, both sides of 3.75
    "von_mises.log_prob": lambda: D.VonMises(t([0.5, -1.0, 2.0]), t([0.3, 4.0, 10.0])).log_prob(t([0.1, -1.2, 3.0])),
    "von_mises.variance": lambda: D.VonMises(t([0.5, -1.0, 2.0]), t([0.3, 4.0, 10.0])).variance,
    # ContinuousBernoulli: 0.4995 is inside the Taylor region
    "continuous_bernoulli.mean": lambda: CB().mean,
    "continuous_bernoulli.variance": lambda: CB().variance,
    "continuous_bernoulli.entropy": lambda: CB().entropy(),
    "continuous_bernoulli.log_prob": lambda: CB().log_prob(t([0.1, 0.5, 0.7, 0.3])),
    "continuous_bernoulli.cdf": lambda: CB().cdf(t([0.1, 0.5, 0.7, 0.3])),
    "continuous_bernoulli.icdf": lambda: CB().icdf(t([0.1, 0.5, 0.7, 0.3])),
    "continuous_bernoulli.logits": lambda: D.ContinuousBernoulli(logits=t([-2.0, 0.001, 1.5])).log_prob(
        t([0.0, 1.0, 0.7])),
    # FisherSnedecor: NaN moments for small df
    "fisher_snedecor.mean": lambda: FS().mean,
    "fisher_snedecor.mode": lambda: FS().mode,
    "fisher_snedecor.variance": lambda: FS().variance,
    "fisher_snedecor.log_prob": lambda: FS().log_prob(t([0.5, 1.2, 2.0])),
    # LowRankMultivariateNormal (batched loc over one cov_factor)
    "lowrank.log_prob": lambda: LR().log_prob(t([[0.5, -0.2, 1.0], [0.0, 0.0, 0.0]])),
    "lowrank.entropy": lambda: LR().entropy(),
    "lowrank.variance": lambda: LR().variance,
    "lowrank.scale_tril": lambda: LR().scale_tril,
    "lowrank.covariance_matrix": lambda: LR().covariance_matrix,
    "lowrank.precision_matrix": lambda: LR().precision_matrix,
    # Wishart
    "wishart.log_prob": lambda: WIS().log_prob(t([[1.5, 0.2, -0.1], [0.2, 2.0, 0.4], [-0.1, 0.4, 0.8]])),
    "wishart.entropy": lambda: WIS().entropy(),
    "wishart.mean": lambda: WIS().mean,
    "wishart.mode": lambda: WIS().mode,
    "wishart.variance": lambda: WIS().variance,
    "wishart.precision_log_prob": lambda: D.Wishart(t([4.5, 6.0]), precision_matrix=COV()).log_prob(
        t([[1.5, 0.2, -0.1], [0.2, 2.0, 0.4], [-0.1, 0.4, 0.8]])),
    # LKJCholesky
    "lkj.log_prob": lambda: D.LKJCholesky(3, t([0.5, 2.0])).log_prob(
        t([[1.0, 0.0, 0.0], [0.3, 0.9539392014169456, 0.0], [0.1, 0.2, 0.9746794344808963]])),
    # Gamma.cdf (InverseGamma's cdf goes through it)
    "gamma.cdf": lambda: D.Gamma(t([0.5, 2.0]), t([1.0, 3.0])).cdf(t([0.3, 1.0])),
    # StickBreakingTransform and a TransformedDistribution through a decreasing AffineTransform
    "stick_breaking.forward": lambda: D.StickBreakingTransform()(t([[0.5, -1.0, 2.0]])),
    "stick_breaking.inverse": lambda: D.StickBreakingTransform().inv(t([[0.1, 0.2, 0.3, 0.4]])),
    "stick_breaking.log_abs_det_jacobian": lambda: D.StickBreakingTransform().log_abs_det_jacobian(
        t([[0.5, -1.0, 2.0]]), t([[0.40758849, 0.06734541, 0.46349346, 0.06157264]])),
    "transformed.cdf": lambda: D.TransformedDistribution(D.Normal(t([0.3]), t([1.0])),
                                                         [D.AffineTransform(1.0, -2.0)]).cdf(t([0.5])),
    "transformed.icdf": lambda: D.TransformedDistribution(D.Normal(t([0.3]), t([1.0])), [D.AffineTransform(1.0, -2.0)]
                                                          ).icdf(t([0.2])),
    "transformed.broadcast": lambda: D.TransformedDistribution(D.Normal(t(0.0), t(1.0)), [D.AffineTransform(
        t([1.0, 2.0]), t([3.0, 4.0]))]).log_prob(t([0.5, 0.7])),
    # KL pairs torch registers among tessel's families
    "kl.poisson_poisson": lambda: KL(D.Poisson(t([0.5, 2.0])), D.Poisson(t([1.5, 1.0]))),
    "kl.binomial_binomial": lambda: KL(D.Binomial(t([5.0, 4.0]), probs=t([0.2, 0.9])),
                                       D.Binomial(t([5.0, 2.0]), probs=t([0.6, 0.5]))),
    "kl.geometric_geometric": lambda: KL(D.Geometric(probs=t([0.2, 0.9])), D.Geometric(probs=t([0.6, 0.5]))),
    "kl.dirichlet_dirichlet": lambda: KL(D.Dirichlet(t([[0.5, 2.0, 3.0], [1.0, 1.0, 1.0]])),
                                         D.Dirichlet(t([[1.5, 1.0, 4.0], [2.0, 0.5, 0.7]]))),
    "kl.gumbel_gumbel": lambda: KL(D.Gumbel(t([0.2, -1.0]), t([1.0, 0.5])), D.Gumbel(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.cauchy_cauchy": lambda: KL(D.Cauchy(t([0.2, -1.0]), t([1.0, 0.5])), D.Cauchy(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.halfnormal_halfnormal": lambda: KL(D.HalfNormal(t([1.0, 0.5])), D.HalfNormal(t([2.0, 1.5]))),
    "kl.halfcauchy_halfcauchy": lambda: KL(D.HalfCauchy(t([1.0, 0.5])), D.HalfCauchy(t([2.0, 1.5]))),
    "kl.pareto_pareto": lambda: KL(D.Pareto(t([1.0, 0.5]), t([0.5, 2.5])), D.Pareto(t([0.8, 1.0]), t([1.5, 2.0]))),
    "kl.cb_cb": lambda: KL(D.ContinuousBernoulli(probs=t([0.2, 0.5, 0.9])),
                           D.ContinuousBernoulli(logits=t([1.0, -0.5, 0.0]))),
    "kl.lowrank_lowrank": lambda: KL(LR(), D.LowRankMultivariateNormal(t([0.5, 0.0, 0.3]), t([[0.3], [1.0], [-0.5]]),
                                                                       t([0.3, 0.4, 0.5]))),
    "kl.mvn_lowrank": lambda: KL(D.MultivariateNormal(t([0.5, 0.0, 0.3]), COV()), LR()),
    "kl.lowrank_mvn": lambda: KL(LR(), D.MultivariateNormal(t([0.5, 0.0, 0.3]), COV())),
    "kl.transformed_same": lambda: KL(D.InverseGamma(t([1.0, 0.5]), t([0.5, 2.5])),
                                      D.InverseGamma(t([2.0, 1.5]), t([0.5, 2.5]))),
    "kl.bernoulli_poisson": lambda: KL(D.Bernoulli(probs=t([0.2, 0.9])), D.Poisson(t([1.5, 0.5]))),
    "kl.beta_normal": lambda: KL(D.Beta(t([0.5, 2.0]), t([1.0, 0.5])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.beta_gamma": lambda: KL(D.Beta(t([0.5, 2.0]), t([1.0, 0.5])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.5]))),
    "kl.beta_uniform": lambda: KL(D.Beta(t([0.5, 2.0]), t([1.0, 0.5])), D.Uniform(t([-1.0, 0.05]), t([2.0, 0.9]))),
    "kl.beta_exponential": lambda: KL(D.Beta(t([0.5, 2.0]), t([1.0, 0.5])), D.Exponential(t([2.0, 0.3]))),
    "kl.exponential_gamma": lambda: KL(D.Exponential(t([0.5, 3.0])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.5]))),
    "kl.exponential_gumbel": lambda: KL(D.Exponential(t([0.5, 3.0])), D.Gumbel(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.exponential_normal": lambda: KL(D.Exponential(t([0.5, 3.0])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.gamma_exponential": lambda: KL(D.Gamma(t([0.5, 2.0]), t([1.0, 0.5])), D.Exponential(t([2.0, 0.3]))),
    "kl.gamma_gumbel": lambda: KL(D.Gamma(t([0.5, 2.0]), t([1.0, 0.5])), D.Gumbel(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.gamma_normal": lambda: KL(D.Gamma(t([0.5, 2.0]), t([1.0, 0.5])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.gumbel_normal": lambda: KL(D.Gumbel(t([0.2, -1.0]), t([1.0, 0.5])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.laplace_normal": lambda: KL(D.Laplace(t([0.2, -1.0]), t([1.0, 0.5])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.normal_gumbel": lambda: KL(D.Normal(t([0.2, -1.0]), t([1.0, 0.5])), D.Gumbel(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.normal_laplace": lambda: KL(D.Normal(t([0.2, -1.0]), t([1.0, 0.5])), D.Laplace(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.normal_exponential": lambda: KL(D.Normal(t([0.2, -1.0]), t([1.0, 0.5])), D.Exponential(t([2.0, 0.3]))),
    "kl.pareto_exponential": lambda: KL(D.Pareto(t([1.0, 0.5]), t([0.5, 2.5])), D.Exponential(t([2.0, 0.3]))),
    "kl.pareto_gamma": lambda: KL(D.Pareto(t([1.0, 0.5]), t([0.5, 2.5])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.5]))),
    "kl.pareto_normal": lambda: KL(D.Pareto(t([1.0, 0.5, 2.0]), t([0.5, 2.5, 3.0])), D.Normal(t([0.0, 1.0, 0.0]),
                                                                                            t([2.0, 1.5, 1.0]))),
    "kl.poisson_binomial": lambda: KL(D.Poisson(t([0.5, 2.0])), D.Binomial(t([5.0, 2.0]), probs=t([0.6, 0.5]))),
    "kl.uniform_beta": lambda: KL(D.Uniform(t([0.1, 0.0, 0.2]), t([0.5, 1.0, 1.9])),
                                  D.Beta(t([1.5, 1.0, 4.0]), t([2.0, 1.5, 0.3]))),
    "kl.uniform_exponential": lambda: KL(D.Uniform(t([0.1, -1.0]), t([0.5, 1.0])), D.Exponential(t([2.0, 0.3]))),
    "kl.uniform_gamma": lambda: KL(D.Uniform(t([0.1, 0.0]), t([0.5, 1.0])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.5]))),
    "kl.uniform_gumbel": lambda: KL(D.Uniform(t([0.1, 0.0]), t([0.5, 1.0])), D.Gumbel(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.uniform_normal": lambda: KL(D.Uniform(t([0.1, 0.0]), t([0.5, 1.0])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.uniform_pareto": lambda: KL(D.Uniform(t([1.1, 0.0]), t([1.5, 1.0])), D.Pareto(t([0.8, 1.0]), t([1.5, 2.0]))),
    "kl.uniform_cb": lambda: KL(D.Uniform(t([0.1, 0.0]), t([0.5, 1.0])), D.ContinuousBernoulli(probs=t([0.3, 0.6]))),
    "kl.cb_normal": lambda: KL(D.ContinuousBernoulli(probs=t([0.3, 0.6])), D.Normal(t([0.0, 1.0]), t([2.0, 1.5]))),
    "kl.cb_exponential": lambda: KL(D.ContinuousBernoulli(probs=t([0.3, 0.6])), D.Exponential(t([2.0, 0.3]))),
    "kl.cb_uniform": lambda: KL(D.ContinuousBernoulli(probs=t([0.3, 0.6])), D.Uniform(t([-0.1, 0.0]), t([1.5, 1.0]))),
    "kl.beta_cb": lambda: KL(D.Beta(t([0.5, 2.0]), t([1.0, 0.5])), D.ContinuousBernoulli(probs=t([0.3, 0.6]))),
    "kl.normal_beta_infinite": lambda: KL(D.Normal(t([0.2, -1.0]), t([1.0, 0.5])),
                                          D.Beta(t([0.5, 2.0]), t([1.0, 0.5]))),
}

TORCH = {  # torch 2.15's values (float64) for the CASES of the same key
    'multinomial.log_prob': ((2,), [-1.8971199848858809, -2.5541281188299534]),
    'multinomial.entropy': ((2,), [2.5918085962714983, 2.296474398960703]),
    'multinomial.mean': ((3,), [1.0, 1.5, 2.5]),
    'multinomial.variance': ((3,), [0.8, 1.0499999999999998, 1.25]),
    'multinomial.inf_logit': ((), [-1.0056275452801477]),
    'multinomial.any_total': ((), [-2.5653650404956263]),
    'negbin.log_prob': ((3,), [-1.6862109712400142, -0.0, -4.162541194334708]),
    'negbin.mean': ((2,), [1.103638323514327, 9.067966988850705]),
    'negbin.mode': ((2,), [0.0, 7.0]),
    'negbin.variance': ((2,), [1.509644173224165, 24.018517045375454]),
    'mixture.mean': ((), [0.39999999999999997]),
    'mixture.variance': ((), [1.8170000000000002]),
    'mixture.log_prob': ((3,), [-1.7270572082478601, -1.270959566467416, -0.9178543877452496]),
    'mixture.cdf': ((3,), [0.5454613370261521, 0.17932762696572854, 0.8802353876075995]),
    'mixture.batched_log_prob': ((2,), [-2.1240822491735725, -2.5895993191812843]),
    'mixture.batched_mean': ((2, 2), [1.148885033623318, -0.14888503362331795, 0.20199269494470606,
        0.44039853898894116]),
    'mixture.batched_variance': ((2, 2), [1.455090556464374, 3.381992684806705, 1.5668077172553272,
        0.9368462048342883]),
    'mixture.expand_log_prob': ((2, 1), [-1.7270572082478601, -0.8534620323792164]),
    'weibull.mean': ((3,), [1.6995046444790194, 0.6210846722521527, 2.0]),
    'weibull.mode': ((3,), [nan, 0.5706351767241459, 0.0]),
    'weibull.variance': ((3,), [4.589223646901887, 0.07063187767375496, 4.0]),
    'weibull.entropy': ((3,), [1.484304743196991, 0.07336372312803219, 1.6931471805599454]),
    'weibull.log_prob': ((3,), [-0.5826670092277971, -1.1445980113843255, -1.9431471805599454]),
    'weibull.cdf': ((3,), [0.2411460408538305, 0.9547494915670394, 0.7134952031398099]),
    'weibull.icdf': ((3,), [0.0900406493628272, 0.6045444304216623, 4.605170185988092]),
    'pareto.mean': ((3,), [inf, 6.0, 0.75]),
    'pareto.variance': ((3,), [inf, inf, 0.1875]),
    'pareto.entropy': ((3,), [3.6931471805599454, 1.9543487391184473, -0.4584261358947217]),
    'pareto.log_prob': ((3,), [-1.3013448427221919, -0.8455409507373054, 0.44587052274320355]),
    'pareto.cdf': ((3,), [0.18350341907227397, 0.2844582472000673, 0.6355685131195334]),
    'pareto.icdf': ((3,), [1.2345679012345678, 3.1748021039363987, 1.077217345015942]),
    'kumaraswamy.mean': ((3,), [0.43572984749455324, 0.5890486225480863, 0.5340659340659342]),
    'kumaraswamy.mode': ((3,), [nan, nan, nan]),
    'kumaraswamy.variance': ((3,), [0.11081564548452633, 0.053021720274202155, 0.030357993654697102]),
    'kumaraswamy.entropy': ((3,), [-0.1645128438477773, -0.12509280256138833, -0.3460177608991115]),
    'kumaraswamy.log_prob': ((3,), [-0.06726808806661509, 0.2616240718822739, -1.6427237558349614]),
    'kumaraswamy.cdf': ((3,), [0.3396257244336446, 0.350480947161671, 0.9946064195190001]),
    'kumaraswamy.icdf': ((3,), [0.01952592424782858, 0.6083087004577227, 0.759239009052331]),
    'inverse_gamma.mean': ((3,), [inf, 1.3333333333333333, 0.2]),
    'inverse_gamma.mode': ((3,), [0.6666666666666666, 0.5714285714285714, 0.1111111111111111]),
    'inverse_gamma.variance': ((3,), [inf, 3.5555555555555554, 0.02666666666666667]),
    'inverse_gamma.entropy': ((3,), [4.017629981956834, 1.016781808774514, -0.956378461116465]),
    'inverse_gamma.log_prob': ((3,), [-1.6979288451134673, -1.3042761307849646, 1.1154818716465686]),
    'inverse_gamma.cdf': ((3,), [0.02534731867746831, 0.7512117103661213, 0.6599632296942824]),
    'logistic_normal.log_prob': ((2,), [-1.712642214925732, 2.4854391056945864]),
    'logistic_normal.unbatched': ((), [-1.712642214925732]),
    'relaxed_bernoulli.log_prob': ((3,), [0.3078847797693003, -0.25279481345134025, -0.6931471805599452]),
    'relaxed_bernoulli.logits': ((2,), [-1.1655696069421624, 1.929913888621254]),
    'relaxed_one_hot.log_prob': ((2,), [0.6587486500684911, -0.27039949009509634]),
    'relaxed_one_hot.logits': ((1,), [-0.49394268093024696]),
    'von_mises.log_prob': ((3,), [-1.5839334451329863, -0.3425835698541908, -4.3778261037520245]),
    'von_mises.variance': ((3,), [0.8516625718530736, 0.13647740531006647, 0.051400180300091525]),
    'continuous_bernoulli.mean': ((4,), [0.3880141871111483, 0.4998333332888889, 0.6119858128888517,
        0.8562162063289981]),
    'continuous_bernoulli.variance': ((4,), [0.0758978008069574, 0.08333331666667512, 0.07589780080695757,
        0.01995991918950142]),
    'continuous_bernoulli.entropy': ((4,), [-0.07641445280335896, -1.666667611699424e-07, -0.07641445280335879,
        -0.9404219844758108]),
    'continuous_bernoulli.log_prob': ((4,), [0.4756868963180729, -1.6666677216115033e-07, 0.19842802409409466,
        -2.9012269565487663]),
    'continuous_bernoulli.cdf': ((4,), [0.17259924893850087, 0.5, 0.5463386071819294, 0.006954808144309664]),
    'continuous_bernoulli.icdf': ((4,), [0.056237364629206275, 0.5, 0.8161341077497565, 0.8260196145267373]),
    'continuous_bernoulli.logits': ((3,), [0.8385606384288041, 0.0004999583333336055, 0.20794756703361827]),
    'fisher_snedecor.mean': ((3,), [nan, 1.8, 1.25]),
    'fisher_snedecor.mode': ((3,), [nan, 0.23076923076923078, 0.5]),
    'fisher_snedecor.variance': ((3,), [nan, 23.76, 1.3541666666666667]),
    'fisher_snedecor.log_prob': ((3,), [-1.0960518394759773, -1.23851077581195, -1.8201234988216672]),
    'lowrank.log_prob': ((2,), [-3.875655778102321, -4.206728039174582]),
    'lowrank.entropy': ((2,), [5.187691520138063, 5.187691520138063]),
    'lowrank.variance': ((2, 3), [2.25, 2.13, 1.5, 2.25, 2.13, 1.5]),
    'lowrank.scale_tril': ((2, 3, 3), [1.5, 0.0, 0.0, 0.033333333333333354, 1.459071241882619, 0.0,
        0.3333333333333333, -0.2132254424463118, 1.159061603014466, 1.5, 0.0, 0.0, 0.033333333333333354,
        1.459071241882619, 0.0, 0.3333333333333333, -0.2132254424463118, 1.159061603014466]),
    'lowrank.covariance_matrix': ((2, 3, 3), [2.25, 0.05000000000000002, 0.5, 0.05000000000000002, 2.13, -0.3, 0.5,
        -0.3, 1.5, 2.25, 0.05000000000000002, 0.5, 0.05000000000000002, 2.13, -0.3, 0.5, -0.3, 1.5]),
    'lowrank.precision_matrix': ((2, 3, 3), [0.4825174825174825, -0.034965034965034975, -0.16783216783216784,
        -0.034965034965034975, 0.48562548562548563, 0.10878010878010878, -0.16783216783216784, 0.10878010878010878,
        0.7443667443667443, 0.4825174825174825, -0.034965034965034975, -0.16783216783216784, -0.034965034965034975,
        0.48562548562548563, 0.10878010878010878, -0.16783216783216784, 0.10878010878010878, 0.7443667443667443]),
    'wishart.log_prob': ((), [-10.117017491616128]),
    'wishart.entropy': ((), [14.46996681988491]),
    'wishart.mean': ((3, 3), [9.0, 1.3499999999999999, 0.45, 1.3499999999999999, 4.5, 0.9, 0.45, 0.9, 6.75]),
    'wishart.mode': ((3, 3), [1.0, 0.15, 0.05, 0.15, 0.5, 0.1, 0.05, 0.1, 0.75]),
    'wishart.variance': ((3, 3), [36.0, 9.405, 13.544999999999998, 9.405, 9.0, 6.93, 13.544999999999998, 6.93,
        20.25]),
    'wishart.precision_log_prob': ((2,), [-7.077333984328584, -8.350231713144364]),
    'lkj.log_prob': ((2,), [-2.505377599775515, -0.808242651721542]),
    'gamma.cdf': ((2,), [0.5614219739190003, 0.8008517265285442]),
    'stick_breaking.forward': ((1, 4), [0.35466124439244334, 0.1002613801409296, 0.48010255958285813,
        0.06497481588376891]),
    'stick_breaking.inverse': ((1, 3), [-1.0986122886681093, -0.5596157879354225, -0.2876820724517808]),
    'stick_breaking.log_abs_det_jacobian': ((1,), [-7.09813628261121]),
    'transformed.cdf': ((1,), [0.5199388058383725]),
    'transformed.icdf': ((1,), [-1.2832424671458287]),
    'transformed.broadcast': ((2,), [-2.0314397107616715, -2.3580453943245634]),
    'kl.poisson_poisson': ((2,), [0.4506938556659452, 0.3862943611198906]),
    'kl.binomial_binomial': ((2,), [1.6739764335716711, inf]),
    'kl.geometric_geometric': ((2,), [1.6739764335716711, 0.408960230187219]),
    'kl.dirichlet_dirichlet': ((2,), [1.7753201904729128, 0.9409745428614027]),
    'kl.gumbel_gumbel': ((2,), [0.3064306311297993, 1.768136215717214]),
    'kl.cauchy_cauchy': ((2,), [0.12221763272424946, 0.980829253011726]),
    'kl.halfnormal_halfnormal': ((2,), [0.3181471805599453, 0.6541678442236654]),
    'kl.halfcauchy_halfcauchy': ((2,), [0.11778303565638382, 0.2876820724517808]),
    'kl.pareto_pareto': ((2,), [1.236103038303205, inf]),
    'kl.cb_cb': ((3,), [0.2297251203051287, 0.01039505099275645, 0.1796311160000552]),
    'kl.lowrank_lowrank': ((2,), [3.0485091781821287, 4.153625457251897]),
    'kl.mvn_lowrank': ((2,), [0.24759273547382787, 0.6083969312780235]),
    'kl.lowrank_mvn': ((2,), [0.42816238967849785, 1.024664004317895]),
    'kl.transformed_same': ((2,), [0.5772156649015328, 1.2703628454614777]),
    'kl.bernoulli_poisson': ((2,), [0.9185045548401793, 0.7987494891125027]),
    'kl.beta_normal': ((2,), [1.9439385332046721, 2.108730215695232]),
    'kl.beta_gamma': ((2,), [0.8130164776315574, 1.5598138472266116]),
    'kl.beta_uniform': ((2,), [1.4054651081081642, inf]),
    'kl.beta_exponential': ((2,), [0.2803723055467756, 2.209251759660712]),
    'kl.exponential_gamma': ((2,), [1.0883840531356856, 0.1931471805599454]),
    'kl.exponential_gumbel': ((2,), [0.5, 1.6532335313765647]),
    'kl.exponential_normal': ((2,), [0.9189385332046727, 1.5464727201044037]),
    'kl.gamma_exponential': ((2,), [0.21624288952606618, 0.13360995886445792]),
    'kl.gamma_gumbel': ((2,), [1.6690338315736826, 0.49284933141183074]),
    'kl.gamma_normal': ((2,), [1.6152257838506294, 2.8318185736291364]),
    'kl.gumbel_normal': ((2,), [0.315994830940155, 1.182578860940343]),
    'kl.laplace_normal': ((2,), [0.17393853320467256, 1.3244036413128368]),
    'kl.normal_gumbel': ((2,), [0.39952376787970145, 2.356732008005846]),
    'kl.normal_laplace': ((2,), [0.37425046377849436, 1.7061590328623377]),
    'kl.normal_exponential': ((2,), [inf, inf]),
    'kl.pareto_exponential': ((2,), [inf, 1.6634107167600365]),
    'kl.pareto_gamma': ((2,), [inf, 1.053972804325936]),
    'kl.pareto_normal': ((3,), [inf, 1.6634711833765672, 5.991070307979504]),
    'kl.poisson_binomial': ((2,), [inf, inf]),
    'kl.uniform_beta': ((3,), [0.6105559276477233, 0.09453489189183562, inf]),
    'kl.uniform_exponential': ((2,), [0.8231435513142097, inf]),
    'kl.uniform_gamma': ((2,), [1.001181574624702, 0.3445348918918356]),
    'kl.uniform_gumbel': ((2,), [2.6215811195806458, 1.4937328363568447]),
    'kl.uniform_normal': ((2,), [2.5412931123054396, 1.3984777153869112]),
    'kl.uniform_pareto': ((2,), [1.4915188530966133, inf]),
    'kl.uniform_cb': ((2,), [0.7765672830485897, inf]),
    'kl.cb_normal': ((2,), [1.674661485083828, 1.397912732158112]),
    'kl.cb_exponential': ((2,), [0.19668402395984108, 1.370903814779565]),
    'kl.cb_uniform': ((2,), [0.49938983147786475, inf]),
    'kl.beta_cb': ((2,), [0.19537263262739568, 0.6504801440061794]),
    'kl.normal_beta_infinite': ((2,), [inf, inf]),
}


def test_new_families_values_as_torchs():
    """Every CASES call against torch 2.15's value (log_prob, cdf / icdf, entropy, moments, expand, transforms)."""
    for key, make in CASES.items():
        shape, want = TORCH[key]
        got = make()
        assert tuple(got.shape) == shape, key
        np.testing.assert_allclose(np.asarray(got.detach().reshape(-1).tolist(), dtype=np.float64), want,
                                   rtol=1e-6, atol=1e-12, err_msg=key)


def test_kl_pairs_of_torchs_registry():
    """Same values as the family cases above, over torch's KL registry (its infinities where supports differ)."""
    assert sum(k.startswith("kl.") for k in CASES) > 40
    got = D.kl_divergence(D.Weibull(t([1.0]), t([2.0])), D.Weibull(t([1.0]), t([2.0])))  # same transforms: KL of bases
    assert got.tolist() == [0.0]
    with pytest.raises(NotImplementedError, match="^$"):  # torch's bare raise: transforms that differ
        D.kl_divergence(D.Weibull(t([1.0]), t([2.0])), D.Weibull(t([1.0]), t([3.0])))
    with pytest.raises(NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for p type VonMises and q "
                                                  "type VonMises"):
        D.kl_divergence(D.VonMises(t([0.0]), t([1.0])), D.VonMises(t([0.0]), t([2.0])))
    with pytest.raises(NotImplementedError, match="KL between Binomials where q.total_count > p.total_count"):
        D.kl_divergence(D.Binomial(t([2.0]), probs=t([0.5])), D.Binomial(t([3.0]), probs=t([0.5])))
    lr2 = D.LowRankMultivariateNormal(t([0.0, 0.0]), t([[1.0], [1.0]]), t([1.0, 1.0]))
    with pytest.raises(ValueError, match="KL-divergence between two Low Rank Multivariate Normals with"):
        D.kl_divergence(lr2, D.LowRankMultivariateNormal(t([0.0]), t([[1.0]]), t([1.0])))
    with pytest.raises(ValueError, match="KL-divergence between two Multivariate Normals with"):
        D.kl_divergence(D.MultivariateNormal(t([0.0, 0.0]), t([[1.0, 0.0], [0.0, 1.0]])),
                        D.MultivariateNormal(t([0.0]), t([[1.0]])))


def test_multinomial_samples_are_torchs_counts():
    tessel.manual_seed(7)
    got = D.Multinomial(6, probs=tessel.tensor([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])).sample((3,))
    assert got.dtype == tessel.float32
    assert got.tolist() == [[[1.0, 2.0, 3.0], [2.0, 0.0, 4.0]], [[3.0, 1.0, 2.0], [3.0, 1.0, 2.0]],
                            [[2.0, 0.0, 4.0], [2.0, 1.0, 3.0]]]  # torch's, seeded 7
    tessel.manual_seed(11)
    assert D.Multinomial(4, logits=tessel.tensor([0.5, -1.0, 2.0, 0.0])).sample().tolist() == [0.0, 1.0, 3.0, 0.0]
    with pytest.raises(NotImplementedError, match="inhomogeneous total_count is not supported"):
        D.Multinomial(2.0, probs=t([0.5, 0.5]))
    m = D.Multinomial(3, probs=t([0.5, 0.5]))
    with pytest.raises(ValueError, match="Expected value argument"):  # more than total_count draws
        m.log_prob(t([3.0, 2.0]))
    with pytest.raises(ValueError, match="The right-most size of value must match event_shape"):
        m.log_prob(t([1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="Value is not broadcastable with batch_shape\\+event_shape"):
        D.Multinomial(3, probs=t([[0.5, 0.5], [0.2, 0.8]])).log_prob(t([[1.0, 2.0], [1.0, 2.0], [0.0, 3.0]]))


def test_weibull_and_pareto_draw_torchs_exponential_samples():
    """Both push Exponential.rsample (exponential_ over the host stream) through their transforms."""
    tessel.manual_seed(5)
    got = D.Weibull(tessel.tensor([1.5, 0.7]), tessel.tensor([0.8, 2.5])).sample((3,))
    np.testing.assert_allclose(got.tolist(), [[1.5512934923171997, 0.4329088628292084], [0.54913729429245,
                               0.47461140155792236], [0.3461401164531708, 0.9061708450317383]], rtol=1e-6)  # torch's
    tessel.manual_seed(5)
    got = D.Pareto(t([1.5, 0.7]), t([0.8, 2.5])).rsample((2,))
    np.testing.assert_allclose(got.tolist(), [[5.417017419485138, 0.789493449703171],
                                              [2.624634049592193, 0.8144331536339565]], rtol=1e-12)  # torch's


def _sample_stats(d, n=20000, seed=0):
    tessel.manual_seed(seed)
    s = d.sample((n,))
    assert tuple(s.shape) == (n,) + tuple(d.batch_shape) + tuple(d.event_shape)
    return s.mean(0).reshape(-1).tolist(), s.var(0).reshape(-1).tolist()


def test_samples_follow_torchs_moments():
    """Means and variances of 20000 draws against torch's closed forms (or, where torch has none, the moments
    of 400000 torch draws), within a few standard errors."""
    cases = [  # (distribution, torch's mean, torch's variance, tolerance)
        (D.Kumaraswamy(t([0.5, 2.0, 3.0]), t([0.7, 1.5, 4.0])), [0.4357, 0.589, 0.5341], [0.1108, 0.053, 0.0304],
         0.01),
        (D.InverseGamma(t([3.5, 4.5]), t([1.0, 2.0])), [0.4, 0.5714], [0.1067, 0.1306], 0.02),
        (D.ContinuousBernoulli(probs=t([0.2, 0.4995, 0.8])), [0.388, 0.4998, 0.612], [0.0759, 0.0833, 0.0759], 0.01),
        (D.FisherSnedecor(t([3.0, 5.0]), t([6.0, 10.0])), [1.5, 1.25], None, 0.05),
        (D.NegativeBinomial(t([3.0, 5.5]), probs=t([0.3, 0.6])), [1.2857, 8.25], [1.8367, 20.625], 0.1),
        (D.LowRankMultivariateNormal(t([0.1, 0.2, 0.3]), t([[1.0, 0.5], [0.2, -0.3], [0.0, 1.0]]), t([1.0, 2.0, 0.5])),
         [0.1, 0.2, 0.3], [2.25, 2.13, 1.5], 0.06),
        (MIX(), [0.4], [1.817], 0.05),
        (D.RelaxedBernoulli(t(0.5), probs=t([0.2, 0.7])), [0.2308, 0.6746], [0.0995, 0.1246], 0.01),
        (D.RelaxedOneHotCategorical(t(0.7), probs=t([0.2, 0.3, 0.5])), [0.2236, 0.3108, 0.4655],
         [0.0749, 0.0941, 0.1104], 0.01),
        (D.LogisticNormal(t([0.2, -0.5]), t([1.0, 0.5])), [0.3995, 0.2306, 0.3699], [0.0408, 0.0111, 0.0206], 0.01),
    ]
    for d, mean, var, tol in cases:
        got_mean, got_var = _sample_stats(d)
        np.testing.assert_allclose(got_mean, mean, atol=tol, err_msg=type(d).__name__)
        if var is not None:
            np.testing.assert_allclose(got_var, var, rtol=0.05, err_msg=type(d).__name__)


def test_von_mises_lkj_and_wishart_samples():
    tessel.manual_seed(0)
    s = D.VonMises(t([0.5, -1.0, 2.0]), t([0.3, 4.0, 10.0])).sample((20000,))
    assert float(s.abs().max()) <= math.pi
    sin, cos = s.sin().mean(0), s.cos().mean(0)  # circular mean and 1 - resultant length, torch's from 400000 draws
    # (κ = 0.3: the circular mean of 20000 draws has a standard error of about 0.05 there, 0.004 for the others)
    np.testing.assert_allclose(tessel.atan2(sin, cos).tolist()[0], 0.5024, atol=0.15)
    np.testing.assert_allclose(tessel.atan2(sin, cos).tolist()[1:], [-0.9987, 2.0001], atol=0.02)
    np.testing.assert_allclose((1 - (sin ** 2 + cos ** 2).sqrt()).tolist(), [0.8518, 0.1368, 0.0515], atol=0.01)
    L = D.LKJCholesky(3, t(0.5)).sample((20000,))
    assert bool(D.constraints.corr_cholesky.check(L).all())
    c = L @ L.transpose(-2, -1)
    np.testing.assert_allclose(c.var(0).reshape(-1).tolist(), [0.0, 0.3336, 0.375, 0.3336, 0.0, 0.3743, 0.375, 0.3743,
                                                               0.0], atol=0.015)  # torch's from 400000 draws
    cov = t([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])
    w = D.Wishart(t(4.5), covariance_matrix=cov)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # positive definite draws: no "Singular sample detected."
        s = w.rsample((20000,))
    np.testing.assert_allclose(s.mean(0).reshape(-1).tolist(), [9.0, 1.35, 0.45, 1.35, 4.5, 0.9, 0.45, 0.9, 6.75],
                               atol=0.15)  # torch's mean
    with pytest.warns(UserWarning, match="Low df values detected"):
        D.Wishart(t(2.5), covariance_matrix=cov)


def test_expand_gives_torchs_shapes():
    cases = [  # (distribution, batch shape to expand to, torch's batch / event shapes and sample shape for (3,))
        (D.Weibull(t([1.0, 2.0]), t([0.5, 1.0])), (4, 2), ((4, 2), ())),
        (D.Pareto(t(1.0), t(2.0)), (3,), ((3,), ())),
        (D.Kumaraswamy(t([1.0, 2.0]), t([0.5, 1.0])), (1, 2), ((1, 2), ())),
        (D.InverseGamma(t([1.0, 2.0]), t([0.5, 1.0])), (3, 2), ((3, 2), ())),
        (D.LogisticNormal(t([0.2, -0.5]), t([1.0, 0.5])), (2,), ((2,), (3,))),
        (D.RelaxedBernoulli(t(0.5), probs=t([0.2, 0.7])), (3, 2), ((3, 2), ())),
        (D.RelaxedOneHotCategorical(t(0.5), probs=t([0.2, 0.8])), (4,), ((4,), (2,))),
        (D.VonMises(t([0.0, 1.0]), t([1.0, 2.0])), (3, 2), ((3, 2), ())),
        (D.ContinuousBernoulli(probs=t([0.2, 0.7])), (3, 2), ((3, 2), ())),
        (D.FisherSnedecor(t([3.0, 5.0]), t([6.0, 10.0])), (3, 2), ((3, 2), ())),
        (D.NegativeBinomial(t([3.0, 5.0]), probs=t([0.3, 0.6])), (3, 2), ((3, 2), ())),
        (D.Multinomial(4, probs=t([0.2, 0.8])), (3,), ((3,), (2,))),
        (D.MixtureSameFamily(D.Categorical(t([0.2, 0.8])), D.Normal(t([0.0, 1.0]), t([1.0, 1.5]))), (3,), ((3,), ())),
        (D.LowRankMultivariateNormal(t([0.0, 1.0]), t([[1.0], [0.5]]), t([1.0, 2.0])), (3,), ((3,), (2,))),
        (D.Wishart(t(4.0), covariance_matrix=t([[1.0, 0.2], [0.2, 2.0]])), (3,), ((3,), (2, 2))),
        (D.LKJCholesky(3, t(0.5)), (2,), ((2,), (3, 3))),
        (D.Normal(t([0.0, 1.0]), t([1.0, 2.0])), (3, 2), ((3, 2), ())),
        (D.Categorical(t([0.2, 0.8])), (3,), ((3,), ())),
        (D.Independent(D.Normal(t([0.0, 1.0]), t([1.0, 2.0])), 1), (3,), ((3,), (2,))),
    ]
    for d, batch, (want_batch, want_event) in cases:
        e = d.expand(batch)
        name = type(d).__name__
        assert (tuple(e.batch_shape), tuple(e.event_shape)) == (want_batch, want_event), name
        assert tuple(e.sample((3,)).shape) == (3,) + want_batch + want_event, name
        assert e._validate_args == d._validate_args
    with pytest.raises(RuntimeError, match="must match the existing size \\(2\\)"):
        D.Weibull(t([1.0, 2.0]), t([0.5, 1.0])).expand((3,))


def test_constructor_and_value_errors_as_torchs():
    errors = [  # (call, torch's exception type, a fragment of its message)
        (lambda: D.Weibull(t([-1.0]), t([1.0])), ValueError, "Expected parameter scale"),
        (lambda: D.Pareto(t([1.0]), t([-1.0])), ValueError, "Expected parameter rate"),  # its Exponential base's
        (lambda: D.Pareto(t([1.0]), t([1.0])).log_prob(t([0.5])), ValueError, "Expected value argument"),
        (lambda: D.Kumaraswamy(t([1.0]), t([0.0])), ValueError, "Expected parameter concentration0"),
        (lambda: D.InverseGamma(t([1.0]), t([1.0])).log_prob(t([-1.0])), ValueError, "Expected value argument"),
        (lambda: D.LogisticNormal(t([0.0, 1.0]), t([1.0, 1.0])).log_prob(t([0.5, 0.6, 0.1])), ValueError,
         "Expected value argument"),
        (lambda: D.RelaxedBernoulli(t(0.5), probs=t([1.2])), ValueError, "Expected parameter probs"),
        (lambda: D.RelaxedBernoulli(t(0.5), probs=t([0.2]), logits=t([0.1])), ValueError,
         "Either `probs` or `logits` must be specified, but not both."),
        (lambda: D.RelaxedOneHotCategorical(t(0.5), probs=t([-0.2, 0.5])), ValueError, "Expected parameter probs"),
        (lambda: D.ContinuousBernoulli(probs=t([1.5]), validate_args=False), ValueError,
         "The parameter probs has invalid values"),
        (lambda: D.FisherSnedecor(t([1.0]), t([0.0])), ValueError, "Expected parameter concentration"),
        (lambda: D.VonMises(t([0.0]), t([-1.0])), ValueError, "Expected parameter concentration"),
        (lambda: D.NegativeBinomial(t([1.0]), probs=t([1.0])), ValueError, "Expected parameter probs"),
        (lambda: D.NegativeBinomial(t([-1.0]), probs=t([0.5])), ValueError, "Expected parameter total_count"),
        (lambda: D.NegativeBinomial(t([1.0]), probs=t([0.5])).log_prob(t([1.5])), ValueError,
         "Expected value argument"),
        (lambda: D.MixtureSameFamily(D.Normal(t([0.0]), t([1.0])), D.Normal(t([0.0]), t([1.0]))), ValueError,
         "The Mixture distribution needs to be an  instance of torch.distributions.Categorical"),
        (lambda: D.MixtureSameFamily(D.Categorical(t([0.5, 0.5])), D.Normal(t([0.0, 1.0, 2.0]), t([1.0, 1.0, 1.0]))),
         ValueError, "does not equal `component_distribution.batch_shape[-1]` (3)"),
        (lambda: D.MixtureSameFamily(D.Categorical(t([[0.5, 0.5], [0.5, 0.5]])),
                                     D.Normal(t([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]), t([1.0, 1.0]))),
         ValueError, "is not compatible with `component_distribution.batch_shape`"),
        (lambda: D.MixtureSameFamily(D.Categorical(t([0.5, 0.5])), D.Gamma(t([1.0, 2.0]), t([1.0, 1.0]))).log_prob(
            t([-1.0])), ValueError, "Expected value argument"),
        (lambda: D.LowRankMultivariateNormal(t(0.0), t([[1.0]]), t([1.0])), ValueError,
         "loc must be at least one-dimensional."),
        (lambda: D.LowRankMultivariateNormal(t([0.0]), t([1.0]), t([1.0])), ValueError,
         "cov_factor must be at least two-dimensional, with optional leading batch dimensions"),
        (lambda: D.LowRankMultivariateNormal(t([0.0, 0.0]), t([[1.0, 2.0, 3.0]]), t([1.0, 1.0])), ValueError,
         "cov_factor must be a batch of matrices with shape 2 x m"),
        (lambda: D.LowRankMultivariateNormal(t([0.0, 0.0]), t([[1.0], [2.0]]), t([1.0, 1.0, 1.0])), ValueError,
         "cov_diag must be a batch of vectors with shape"),
        (lambda: D.LowRankMultivariateNormal(t([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]),
                                             t([[[1.0], [2.0]], [[1.0], [2.0]]]), t([1.0, 1.0])),
         ValueError, "Incompatible batch shapes"),
        (lambda: D.Wishart(t(3.0)), AssertionError,
         "Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified."),
        (lambda: D.Wishart(t(3.0), covariance_matrix=t([1.0, 2.0])), ValueError,
         "scale_tril must be at least two-dimensional"),
        (lambda: D.Wishart(t(1.5), covariance_matrix=t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])),
         ValueError, "Value of df=1.5 expected to be greater than ndim - 1 = 2."),
        (lambda: D.Wishart(t(4.0), covariance_matrix=t([[1.0, 2.0], [2.0, 1.0]])), ValueError,
         "Expected parameter covariance_matrix"),
        (lambda: D.Wishart(t(4.0), scale_tril=t([[1.0, 0.5], [0.2, 1.0]])), ValueError,
         "Expected parameter scale_tril"),
        (lambda: D.LKJCholesky(1, 1.0), ValueError,
         "Expected dim to be an integer greater than or equal to 2. Found dim=1."),
        (lambda: D.LKJCholesky(2, t(1.0)).log_prob(t([[1.0, 0.0], [0.5, 0.5]])), ValueError,
         "to be within the support (CorrCholesky())"),
        (lambda: D.TransformedDistribution(D.Normal(t([0.0]), t([1.0])), (D.ExpTransform(),)), ValueError,
         "transforms must be a Transform or list, but was"),
        (lambda: D.Normal(t([0.0, 1.0]), t([1.0, 2.0])).log_prob(t([0.5, 0.5, 0.5])), ValueError,
         "Value is not broadcastable with batch_shape+event_shape"),
    ]
    for make, kind, fragment in errors:
        with pytest.raises(kind, match=re.escape(fragment)):
            make()
    # torch checks ContinuousBernoulli's probs only when validate_args is passed; by default they are clamped
    assert D.ContinuousBernoulli(probs=t([1.5])).probs.tolist() == [0.9999999999999998]  # torch's
    assert D.Wishart(t(4.0), scale_tril=t([[1.0, 0.5], [0.2, 1.0]]), validate_args=False).df.item() == 4.0


def test_gradients_reach_the_parameters_as_torchs():
    """d log_prob / d parameters (and entropy's), torch's values to 6 decimals."""
    def p(v):
        return tessel.tensor(v, dtype=F64, requires_grad=True)

    x = t([0.3, 0.6])
    a, b = p([0.5, 2.0]), p([1.5, 3.0])
    cases = [
        (D.Kumaraswamy(a, b).log_prob(x).sum(), [a, b], [[1.525052, 0.563853], [-0.126793, -0.112954]]),
        (D.Weibull(a, b).log_prob(x).sum(), [a, b], [[-1.605726, -1.4595], [0.393251, -0.838132]]),
        (D.InverseGamma(a, b).log_prob(x).sum(), [a, b], [[3.572948, 1.186654], [-3.0, -1.0]]),
        (D.VonMises(a, b).log_prob(x).sum(), [a, b], [[-0.298004, -2.956349], [0.383933, -0.640018]]),
        (D.NegativeBinomial(b, logits=a).log_prob(t([1.0, 4.0])).sum(), [a, b],
         [[-0.556148, -2.16558], [-0.30741, -1.176928]]),
        (D.RelaxedBernoulli(b, logits=a).log_prob(x).sum(), [a, b], [[-0.709151, -0.372913], [0.065805, 0.484537]]),
        (D.LogisticNormal(a, b).log_prob(t([0.2, 0.3, 0.5])), [a, b],
         [[-0.530288, -0.278981], [-0.244859, -0.099843]]),
        (D.Multinomial(3, logits=a).entropy(), [a], [[0.358944, -0.358944]]),
        (D.MixtureSameFamily(D.Categorical(logits=a), D.Normal(b, b)).log_prob(t(0.7)), [a, b],
         [[0.159396, -0.159396], [-0.284598, -0.25864]]),
    ]
    for value, params, want in cases:
        got = tessel.autograd.grad(value, params)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.tolist(), w, atol=2e-6)
    W = p([[1.0, 0.5], [0.2, -0.3]])
    got = tessel.autograd.grad(D.LowRankMultivariateNormal(a, W, b).log_prob(x), [a, W, b])
    np.testing.assert_allclose(got[1].reshape(-1).tolist(), [-0.352638, -0.190177, 0.010556, 0.053454], atol=2e-6)
    for d, params in ((D.Kumaraswamy(a, b), [a, b]), (D.FisherSnedecor(a, b), [a, b]), (D.InverseGamma(a, b), [a, b]),
                      (D.ContinuousBernoulli(logits=a), [a]), (D.LowRankMultivariateNormal(a, W, b), [a, W, b])):
        grads = tessel.autograd.grad(d.rsample((3,)).sum(), params)  # reparameterized: every parameter is reached
        assert all(bool(tessel.isfinite(g).all()) for g in grads), type(d).__name__


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
