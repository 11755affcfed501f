"""Families torch 2.15 builds as TransformedDistribution: Weibull and Pareto (of an Exponential), Kumaraswamy (of
a Uniform), InverseGamma (of a Gamma), LogisticNormal (stick breaking of a Normal), RelaxedBernoulli (sigmoid of
LogitRelaxedBernoulli) and RelaxedOneHotCategorical (exp of ExpRelaxedCategorical).

They are TransformedDistribution subclasses as in torch, so log_prob, cdf / icdf (through the transforms'
signs), rsample, expand and KL's TransformedDistribution pair behave as torch's; the closed-form moments and
entropies are torch's formulas. Weibull and Pareto draw through Exponential.rsample (exponential_ over the host
stream), so a seeded generator gives torch's samples.
"""
import math

from .. import _C, _tensor
from . import constraints
from ._families import Categorical, Exponential, Normal, Uniform, _clamp_probs, _ProbsOrLogits
from ._more_families import Gamma
from .distribution import Distribution, broadcast_all
from .transforms import (AffineTransform, ExpTransform, PowerTransform, SigmoidTransform, StickBreakingTransform,
                         TransformedDistribution)

_EULER = 0.57721566490153286060
_where = _C._functional.where


def _nan_where(cond, t):
    return _where(cond, _C._full([], math.nan, t.dtype), t)


class Weibull(TransformedDistribution):
    """Weibull(scale λ, concentration k): λ · E^(1/k) for E ~ Exponential(1)."""
    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(_tensor.ones_like(self.scale), validate_args=validate_args)
        super().__init__(base, [PowerTransform(exponent=self.concentration_reciprocal),
                                AffineTransform(loc=0, scale=self.scale)], validate_args=validate_args)

    mean = property(lambda self: self.scale * (1 + self.concentration_reciprocal).lgamma().exp())
    mode = property(lambda self: self.scale * ((self.concentration - 1) / self.concentration)
                    ** self.concentration.reciprocal())

    @property
    def variance(self):
        r = self.concentration_reciprocal
        return self.scale.pow(2) * ((1 + 2 * r).lgamma().exp() - (2 * (1 + r).lgamma()).exp())

    def entropy(self):
        r = self.concentration_reciprocal
        return _EULER * (1 - r) + (self.scale * r).log() + 1


class Pareto(TransformedDistribution):
    """Pareto(scale, alpha) on [scale, ∞): scale · exp(E) for E ~ Exponential(alpha)."""
    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base = Exponential(self.alpha, validate_args=validate_args)
        super().__init__(base, [ExpTransform(), AffineTransform(loc=0, scale=self.scale)], validate_args=validate_args)

    support = property(lambda self: constraints.greater_than_eq(self.scale))
    mode = property(lambda self: self.scale)

    @property
    def mean(self):  # infinite for alpha <= 1 (the clamp makes a - 1 zero there)
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


def _kumaraswamy_moment(a, b, n):
    arg1 = 1 + n / a
    return b * (arg1.lgamma() + b.lgamma() - (arg1 + b).lgamma()).exp()


class Kumaraswamy(TransformedDistribution):
    """Kumaraswamy(a = concentration1, b = concentration0) on [0, 1]: (1 - U^(1/b))^(1/a) for U ~ Uniform(0, 1)."""
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base = Uniform(_tensor.full_like(self.concentration0, 0), _tensor.full_like(self.concentration0, 1),
                       validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()), AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base, transforms, validate_args=validate_args)

    mean = property(lambda self: _kumaraswamy_moment(self.concentration1, self.concentration0, 1))
    variance = property(lambda self: _kumaraswamy_moment(self.concentration1, self.concentration0, 2)
                        - self.mean.pow(2))

    @property
    def mode(self):  # undefined (NaN) where either concentration is below 1
        a, b = self.concentration1, self.concentration0
        log_mode = b.reciprocal() * (-b).log1p() - (-b * a).log1p()
        return _nan_where((b < 1) | (a < 1), log_mode).exp()

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        h0 = (self.concentration0 + 1).digamma() + _EULER
        return t0 + t1 * h0 - self.concentration1.log() - self.concentration0.log()


class InverseGamma(TransformedDistribution):
    """1 / X for X ~ Gamma(concentration, rate)."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = _C._full([], -1.0, base.rate.dtype)
        super().__init__(base, PowerTransform(neg_one), validate_args=validate_args)

    concentration = property(lambda self: self.base_dist.concentration)
    rate = property(lambda self: self.base_dist.rate)
    mode = property(lambda self: self.rate / (self.concentration + 1))

    @property
    def mean(self):
        inf = _C._full([], math.inf, self.rate.dtype)
        return _where(self.concentration > 1, self.rate / (self.concentration - 1), inf)

    @property
    def variance(self):
        a = self.concentration
        inf = _C._full([], math.inf, self.rate.dtype)
        return _where(a > 2, self.rate.square() / ((a - 1).square() * (a - 2)), inf)

    def entropy(self):
        a = self.concentration
        return a + self.rate.log() + a.lgamma() - (1 + a) * a.digamma()


class LogisticNormal(TransformedDistribution):
    """Stick breaking of X ~ Normal(loc, scale) over the last dim: K normal coordinates onto the K + 1 simplex."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand([1])
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    loc = property(lambda self: self.base_dist.base_dist.loc)
    scale = property(lambda self: self.base_dist.base_dist.scale)


class LogitRelaxedBernoulli(_ProbsOrLogits):
    """The logit of a RelaxedBernoulli sample: (logit(U) + logits) / temperature for U ~ Uniform(0, 1)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    _unexpanded = ("temperature",)

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        super().__init__(probs, logits, validate_args=validate_args)

    param_shape = property(lambda self: self._param.shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        probs = _clamp_probs(self.probs.expand(*shape))
        uniforms = _clamp_probs(_tensor.rand(*shape, dtype=probs.dtype))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class RelaxedBernoulli(TransformedDistribution):
    """The Concrete (Gumbel-sigmoid) relaxation of Bernoulli on (0, 1), sharper as temperature falls."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = LogitRelaxedBernoulli(temperature, probs, logits)  # (torch's: the base validates by default)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    temperature = property(lambda self: self.base_dist.temperature)
    logits = property(lambda self: self.base_dist.logits)
    probs = property(lambda self: self.base_dist.probs)


class ExpRelaxedCategorical(Distribution):
    """The log of a RelaxedOneHotCategorical sample: a log-softmax of (logits + Gumbel noise) / temperature."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True
    _unexpanded = ("temperature",)

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    param_shape = property(lambda self: self._categorical.param_shape)
    logits = property(lambda self: self._categorical.logits)
    probs = property(lambda self: self._categorical.probs)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        uniforms = _clamp_probs(_tensor.rand(*shape, dtype=self.logits.dtype))
        gumbels = -((-(uniforms.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value):
        k = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_scale = _tensor.full_like(self.temperature, float(k)).lgamma() - self.temperature.log() * -(k - 1)
        score = logits - value * self.temperature
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """The Concrete (Gumbel-softmax) relaxation of OneHotCategorical on the simplex."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    temperature = property(lambda self: self.base_dist.temperature)
    logits = property(lambda self: self.base_dist.logits)
    probs = property(lambda self: self.base_dist.probs)


__all__ = ["Weibull", "Pareto", "Kumaraswamy", "InverseGamma", "LogisticNormal", "LogitRelaxedBernoulli",
           "RelaxedBernoulli", "ExpRelaxedCategorical", "RelaxedOneHotCategorical"]
