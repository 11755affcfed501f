"""Counts and mixtures: Multinomial, NegativeBinomial and MixtureSameFamily, as torch 2.15 defines them.

Multinomial draws total_count categories with Categorical.sample (torch.multinomial over the host stream) and
counts them with scatter_add_, in torch's order, so a seeded generator gives torch's very counts.
NegativeBinomial is a Gamma-Poisson mixture drawn on the host (numpy seeded from tessel's generator), as the
other count families; its log_prob is composed of tessel ops (differentiable in the parameters).
"""
import math

from .. import _C, _tensor
from ..nn import functional as F
from . import constraints
from ._families import Categorical, _lazy, _ProbsOrLogits
from ._more_families import Binomial, Gamma
from .distribution import Distribution, broadcast_all

_where = _C._functional.where


def _no_grad():
    from .. import no_grad
    return no_grad()


class Multinomial(Distribution):
    """Counts of total_count draws over the categories of probs / logits (last dim); log_prob takes any total."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)
    param_shape = property(lambda self: self._categorical.param_shape)
    support = property(lambda self: constraints.multinomial(self.total_count))
    mean = property(lambda self: self.probs * self.total_count)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def sample(self, sample_shape=()):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        draws = self._categorical.sample((self.total_count,) + sample_shape)  # [total_count, *sample, *batch]
        order = list(range(1, draws.dim())) + [0]
        draws = draws.permute(*order).contiguous()
        counts = _tensor.zeros(*self._extended_shape(sample_shape), dtype=draws.dtype)
        counts.scatter_add_(-1, draws, _tensor.ones_like(draws))
        return counts.to(self.probs.dtype)

    def entropy(self):
        n = _C._full([], float(self.total_count), self.probs.dtype)
        term1 = n * self._categorical.entropy() - (n + 1).lgamma()
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = self._binomial.log_prob(support).exp()
        return term1 + (binomial_probs * (support + 1).lgamma()).sum([0, -1])

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        # 0 · log 0 is 0: a category of zero probability that was not drawn adds nothing
        logits = _where((value == 0) & (logits == -math.inf), _C._full([], 0.0, logits.dtype), logits)
        log_factorial_n = (value.sum(-1) + 1).lgamma()
        log_factorial_xs = (value + 1).lgamma().sum(-1)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)


class NegativeBinomial(_ProbsOrLogits):
    """The number of successes before total_count failures, each trial a success with probability probs."""
    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0), "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            total_count, self.probs = broadcast_all(total_count, probs)
            self._param = self.probs
        else:
            total_count, self.logits = broadcast_all(total_count, logits)
            self._param = self.logits
        self.total_count = total_count.to(self._param.dtype)
        Distribution.__init__(self, self._param.shape, validate_args=validate_args)

    param_shape = property(lambda self: self._param.shape)
    mean = property(lambda self: self.total_count * self.logits.exp())
    mode = property(lambda self: ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0))
    variance = property(lambda self: self.mean / (-self.logits).sigmoid())

    @_lazy
    def _gamma(self):
        return Gamma(self.total_count, (-self.logits).exp(), validate_args=False)

    def sample(self, sample_shape=()):
        from .._host_random import poisson
        with _no_grad():
            return poisson(self._gamma.sample(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        n, logits = self.total_count, self.logits
        log_unnormalized = n * F.logsigmoid(-logits) + value * F.logsigmoid(logits)
        log_normalization = -(n + value).lgamma() + (1.0 + value).lgamma() + n.lgamma()
        log_normalization = log_normalization.masked_fill(n + value == 0.0, 0.0)  # P(0) = 1 at total_count 0
        return log_unnormalized - log_normalization


class MixtureSameFamily(Distribution):
    """A mixture whose components are the rightmost batch dim of one component_distribution, chosen with the
    probabilities of a Categorical mixture_distribution."""
    arg_constraints = {}
    has_rsample = False

    def __init__(self, mixture_distribution, component_distribution, validate_args=None):
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError(" The Mixture distribution needs to be an  instance of torch.distributions.Categorical")
        if not isinstance(component_distribution, Distribution):
            raise ValueError("The Component distribution needs to be an instance of torch.distributions.Distribution")
        mdbs = mixture_distribution.batch_shape
        cdbs = component_distribution.batch_shape[:-1]
        for size1, size2 in zip(reversed(tuple(mdbs)), reversed(tuple(cdbs))):
            if size1 != 1 and size2 != 1 and size1 != size2:
                raise ValueError("`mixture_distribution.batch_shape` (%s) is not compatible with "
                                 "`component_distribution.batch_shape`(%s)" % (mdbs, _tensor.Size(cdbs)))
        km = mixture_distribution.logits.shape[-1]
        kc = component_distribution.batch_shape[-1]
        if km != kc:
            raise ValueError("`mixture_distribution component` (%d) does not equal "
                             "`component_distribution.batch_shape[-1]` (%d)" % (km, kc))
        self._num_component = km
        event_shape = component_distribution.event_shape
        self._event_ndims = len(event_shape)
        super().__init__(cdbs, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        batch_shape = _tensor.Size(batch_shape)
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new._component_distribution = self._component_distribution.expand(tuple(batch_shape) +
                                                                          (self._num_component,))
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component, new._event_ndims = self._num_component, self._event_ndims
        Distribution.__init__(new, batch_shape, new._component_distribution.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    mixture_distribution = property(lambda self: self._mixture_distribution)
    component_distribution = property(lambda self: self._component_distribution)
    support = property(lambda self: constraints.MixtureSameFamilyConstraint(self._component_distribution.support))

    @property
    def mean(self):
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        return (probs * self.component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self):
        """The law of total variance: E[Var(Y | X)] + Var(E[Y | X]) over the component X."""
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        dim = -1 - self._event_ndims
        mean_cond_var = (probs * self.component_distribution.variance).sum(dim)
        var_cond_mean = (probs * (self.component_distribution.mean - self._pad(self.mean)).pow(2.0)).sum(dim)
        return mean_cond_var + var_cond_mean

    def cdf(self, x):
        cdf_x = self.component_distribution.cdf(self._pad(x))
        return (cdf_x * self.mixture_distribution.probs).sum(-1)

    def log_prob(self, x):
        if self._validate_args:
            self._validate_sample(x)
        log_prob_x = self.component_distribution.log_prob(self._pad(x))  # [S, B, k]
        log_mix_prob = self.mixture_distribution.logits.log_softmax(-1)  # [B, k]
        return (log_prob_x + log_mix_prob).logsumexp(-1)

    def sample(self, sample_shape=()):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        with _no_grad():
            gather_dim = len(sample_shape) + len(self.batch_shape)
            es = tuple(self.event_shape)
            mix_sample = self.mixture_distribution.sample(sample_shape)  # [n, B]
            mix_shape = tuple(mix_sample.shape)
            comp_samples = self.component_distribution.sample(sample_shape)  # [n, B, k, E]
            index = mix_sample.reshape(*(mix_shape + (1,) * (len(es) + 1)))
            index = index.repeat(*((1,) * len(mix_shape) + (1,) + es))
            return comp_samples.gather(gather_dim, index).squeeze(gather_dim)

    def _pad(self, x):
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture_dimensions(self, x):
        dist_batch_ndims = len(self.batch_shape)
        cat_batch_ndims = len(self.mixture_distribution.batch_shape)
        pad_ndims = 0 if cat_batch_ndims == 1 else dist_batch_ndims - cat_batch_ndims
        xs = tuple(x.shape)
        return x.reshape(*(xs[:-1] + (1,) * pad_ndims + xs[-1:] + (1,) * self._event_ndims))

    def __repr__(self):
        return "MixtureSameFamily(\n  %r,\n  %r)" % (self.mixture_distribution, self.component_distribution)


__all__ = ["Multinomial", "NegativeBinomial", "MixtureSameFamily"]
