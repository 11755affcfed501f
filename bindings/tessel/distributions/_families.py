"""The distribution families: Normal, LogNormal, Uniform, Exponential, Laplace (reparameterized: rsample's
gradients reach the parameters), Bernoulli, Categorical and OneHotCategorical (discrete: sample only).
Formulas are torch's (its documentation's densities, entropies and moments); each is composed of tessel
ops, so log_prob, entropy and rsample are differentiable in the parameters.
"""
import math

from .. import _C
from .. import _special
from .. import _tensor
from .._dtypes import finfo
from ..nn import functional as F
from . import constraints
from .distribution import Distribution, broadcast_all

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class _lazy:
    """A parameter derived on first use (probs from logits or the reverse) and cached on the instance."""

    def __init__(self, fn):
        self.fn, self.__doc__ = fn, fn.__doc__

    def __get__(self, obj, cls):
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.fn.__name__] = value
        return value


def _clamp_probs(p):
    e = finfo(p.dtype).eps
    return p.clamp(e, 1.0 - e)


class _LocScale(Distribution):
    """A real-valued family with a location and a positive scale (Normal, Laplace), centred at loc."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)


class Normal(_LocScale):
    stddev = property(lambda self: self.scale)
    variance = property(lambda self: self.scale * self.scale)

    def rsample(self, sample_shape=()):
        eps = _tensor.randn(*self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        return 0.5 * (1 + ((value - self.loc) / (self.scale * math.sqrt(2))).erf())

    def icdf(self, value):
        return self.loc + self.scale * _special.FUNCTIONS["erfinv"](2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + _LOG_SQRT_2PI + self.scale.log()


class LogNormal(Distribution):
    """exp(X) for X ~ Normal(loc, scale)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.base_dist = Normal(loc, scale, validate_args=validate_args)
        self.loc, self.scale = self.base_dist.loc, self.base_dist.scale
        super().__init__(self.loc.shape, validate_args=validate_args)

    mean = property(lambda self: (self.loc + self.scale ** 2 / 2).exp())
    mode = property(lambda self: (self.loc - self.scale ** 2).exp())
    variance = property(lambda self: (self.scale ** 2).expm1() * (2 * self.loc + self.scale ** 2).exp())

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape).exp()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = value.log()
        return self.base_dist.log_prob(y) - y

    def cdf(self, value):
        return self.base_dist.cdf(value.log())

    def entropy(self):
        return self.base_dist.entropy() + self.loc


class Uniform(Distribution):
    """Uniform on [low, high): samples and density there; its support is torch's closed interval, so validation
    passes `high` itself, whose log_prob is -inf (it raised ValueError)."""
    arg_constraints = {"low": constraints.dependent, "high": constraints.dependent}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, validate_args=validate_args)
        if self._validate_args and not bool((self.low < self.high).all().item()):
            raise ValueError("Expected parameter low (Tensor of shape %s) of distribution %r to be less than high, "
                             "but found invalid values:\n%r" % (tuple(self.low.shape), self, self.low))

    support = property(lambda self: constraints.interval(self.low, self.high))
    mean = property(lambda self: (self.high + self.low) / 2)
    mode = property(lambda self: self.low * float("nan"))
    variance = property(lambda self: (self.high - self.low) ** 2 / 12)

    def rsample(self, sample_shape=()):
        u = _tensor.rand(*self._extended_shape(sample_shape), dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        inside = ((self.low <= value) & (value < self.high)).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        return ((value - self.low) / (self.high - self.low)).clamp(0.0, 1.0)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()


class Exponential(Distribution):
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    mean = property(lambda self: 1.0 / self.rate)
    mode = property(lambda self: self.rate * 0.0)
    variance = property(lambda self: self.rate ** -2)

    def rsample(self, sample_shape=()):  # torch's draws: exponential_ over the host stream, then / rate
        return _tensor.empty(*self._extended_shape(sample_shape), dtype=self.rate.dtype).exponential_() / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        return 1 - (-self.rate * value).exp()

    def icdf(self, value):
        return -(-value).log1p() / self.rate

    def entropy(self):
        return 1.0 - self.rate.log()


class Laplace(_LocScale):
    variance = property(lambda self: 2 * self.scale ** 2)
    stddev = property(lambda self: math.sqrt(2) * self.scale)

    def rsample(self, sample_shape=()):
        e = finfo(self.loc.dtype).eps
        u = _tensor.rand(*self._extended_shape(sample_shape), dtype=self.loc.dtype) * (2 - e) + (e - 1)  # (-1, 1)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        d = value - self.loc
        return 0.5 - 0.5 * d.sign() * (-d.abs() / self.scale).expm1()

    def entropy(self):
        return 1 + (2 * self.scale).log()


class _ProbsOrLogits(Distribution):
    """A family of one success probability, given as probs (in [0, 1]) or logits (log-odds); the other is
    derived on first use (Bernoulli, Geometric, Binomial)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    @_lazy
    def probs(self):
        return self.logits.sigmoid()

    @_lazy
    def logits(self):
        p = _clamp_probs(self.probs)
        return p.log() - (-p).log1p()


class Bernoulli(_ProbsOrLogits):
    """One of probs (in [0, 1]) or logits (log-odds)."""
    support = constraints.boolean
    has_enumerate_support = True

    mean = property(lambda self: self.probs)
    variance = property(lambda self: self.probs * (1 - self.probs))

    @property
    def mode(self):
        m = (self.probs >= 0.5).to(self.probs.dtype)
        return _C._functional.where(self.probs == 0.5, m * float("nan"), m)

    def sample(self, sample_shape=()):
        from .. import no_grad
        with no_grad():
            return _tensor.bernoulli(self.probs.detach().expand(*self._extended_shape(sample_shape)).contiguous())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value.to(logits.dtype), reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = _tensor.arange(2, dtype=self._param.dtype).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand(2, *self._batch_shape) if expand else values


class Categorical(Distribution):
    """Categories 0 .. K-1 with probabilities along the last dim of probs (normalized to sum to 1) or
    logits (unnormalized log-probabilities)."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        super().__init__(self._param.shape[:-1], validate_args=validate_args)

    @_lazy
    def probs(self):
        return self.logits.softmax(-1)

    @_lazy
    def logits(self):
        return _clamp_probs(self.probs).log()

    param_shape = property(lambda self: self._param.shape)
    support = property(lambda self: constraints.integer_interval(0, self._num_events - 1))
    mean = property(lambda self: _C._full(list(self._batch_shape), float("nan"), self._param.dtype))
    variance = mean
    mode = property(lambda self: self.probs.argmax(-1))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        n = _tensor.Size((sample_shape,) if isinstance(sample_shape, int) else sample_shape).numel()
        probs_2d = self.probs.detach().reshape(-1, self._num_events)
        draws = probs_2d.multinomial(n, True)  # [batch, n]
        return draws.transpose(0, 1).contiguous().reshape(*shape) if shape else draws.reshape(())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _tensor.broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1].contiguous()).squeeze(-1)

    def entropy(self):
        return -(self.logits.clamp(min=finfo(self.logits.dtype).min) * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = _tensor.arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand(self._num_events, *self._batch_shape) if expand else values


class OneHotCategorical(Distribution):
    """Categorical draws as one-hot vectors of length K (event_shape (K,))."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        param = self._categorical._param
        super().__init__(param.shape[:-1], param.shape[-1:], validate_args=validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)
    mean = property(lambda self: self._categorical.probs)
    variance = property(lambda self: self._categorical.probs * (1 - self._categorical.probs))

    @property
    def mode(self):
        return F.one_hot(self._categorical.mode, self._categorical._num_events).to(self.probs.dtype)

    def sample(self, sample_shape=()):
        indices = self._categorical.sample(sample_shape)
        return F.one_hot(indices, self._categorical._num_events).to(self.probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        n = self._categorical._num_events
        values = _tensor.eye(n, dtype=self.probs.dtype).reshape((n,) + (1,) * len(self._batch_shape) + (n,))
        return values.expand(n, *self._batch_shape, n) if expand else values
