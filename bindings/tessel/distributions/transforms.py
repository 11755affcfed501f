"""torch.distributions.transforms and TransformedDistribution: ExpTransform, AffineTransform, SigmoidTransform,
TanhTransform (SAC's squashed Gaussian), PowerTransform, AbsTransform and ComposeTransform, each with its
inverse and log |det J|; cache_size=1 keeps the last (x, y) pair so inv(y) of a sampled y returns the very x it
came from (no atanh of a value rounded to ±1), as torch's.

    base = Normal(mu, std)
    pi = TransformedDistribution(base, [TanhTransform(cache_size=1)])
    a = pi.rsample(); logp = pi.log_prob(a)                          # SAC's policy
"""
import math

from .. import _C
from ..nn import functional as F
from . import constraints
from .distribution import Distribution

Tensor = _C.Tensor


def _sum_rightmost(x, n):
    return x.sum(list(range(-n, 0))) if n > 0 else x


class Transform:
    """y = f(x) with its inverse and log |df/dx|; event_dim is the number of rightmost dims one event spans."""
    bijective = True
    domain = constraints.real
    codomain = constraints.real
    event_dim = 0

    def __init__(self, cache_size=0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size, self._cached = cache_size, None

    def __call__(self, x):
        if self._cache_size and self._cached is not None and self._cached[0] is x:
            return self._cached[1]
        y = self._call(x)
        if self._cache_size:
            self._cached = (x, y)
        return y

    def inv(self, y):
        if self._cache_size and self._cached is not None and self._cached[1] is y:
            return self._cached[0]
        x = self._inverse(y)
        if self._cache_size:
            self._cached = (x, y)
        return x

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError

    def forward_shape(self, shape):
        return shape

    def __repr__(self):
        return type(self).__name__ + "()"


class ExpTransform(Transform):
    codomain = constraints.positive

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class AffineTransform(Transform):
    def __init__(self, loc, scale, event_dim=0, cache_size=0):
        super().__init__(cache_size)
        self.loc, self.scale, self.event_dim = loc, scale, event_dim

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        scale = self.scale if isinstance(self.scale, Tensor) else _C._full([], float(self.scale), x.dtype)
        zeros = _C._full(list(x.shape), 0.0, x.dtype)  # x's shape without x's values (x * 0 was NaN at x = inf)
        return _sum_rightmost(scale.abs().log() + zeros, self.event_dim)


class SigmoidTransform(Transform):
    codomain = constraints.unit_interval

    def _call(self, x):  # torch's clipped sigmoid: in [tiny, 1 - eps]
        from .._dtypes import finfo
        info = finfo(x.dtype)
        return x.sigmoid().clamp(info.tiny, 1.0 - info.eps)

    def _inverse(self, y):  # clamped at tiny below, as torch's (at eps: logit(1e-20) was -36, not -46)
        from .._dtypes import finfo
        info = finfo(y.dtype)
        y = y.clamp(info.tiny, 1.0 - info.eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -F.softplus(-x) - F.softplus(x)


class TanhTransform(Transform):
    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):  # atanh unclamped, as torch's (it clamped at ±(1 - eps): -617.8 for torch's -642.4)
        return 0.5 * (y.log1p() - (-y).log1p())

    def log_abs_det_jacobian(self, x, y):
        # log(1 - tanh(x)²) in the stable form torch uses
        return 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))


class PowerTransform(Transform):
    domain = constraints.positive
    codomain = constraints.positive

    def __init__(self, exponent, cache_size=0):
        super().__init__(cache_size)
        self.exponent = exponent

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()


class AbsTransform(Transform):
    bijective = False
    codomain = constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class ComposeTransform(Transform):
    def __init__(self, parts, cache_size=0):
        super().__init__(cache_size)
        self.parts = list(parts)
        self.event_dim = max((p.event_dim for p in self.parts), default=0)

    def _call(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def _inverse(self, y):
        for part in reversed(self.parts):
            y = part.inv(y)
        return y

    def log_abs_det_jacobian(self, x, y):
        total = None
        for part in self.parts:
            y_part = part(x)
            term = _sum_rightmost(part.log_abs_det_jacobian(x, y_part), self.event_dim - part.event_dim)
            total = term if total is None else total + term
            x = y_part
        return total if total is not None else x * 0


class TransformedDistribution(Distribution):
    """base_distribution pushed through the transforms: samples are transforms(base samples); log_prob(y) is the
    base's log_prob of the inverse minus each transform's log |det J| (summed over event dims)."""

    def __init__(self, base_distribution, transforms, validate_args=None):
        self.base_dist = base_distribution
        self.transforms = [transforms] if isinstance(transforms, Transform) else list(transforms)
        event_dim = max([len(base_distribution.event_shape)] + [t.event_dim for t in self.transforms])
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    has_rsample = property(lambda self: self.base_dist.has_rsample)

    def sample(self, sample_shape=()):
        with _C._GradMode(False):
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
        return x

    def rsample(self, sample_shape=()):
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value):
        event_dim = len(self.event_shape)
        log_prob = 0.0
        y = value
        for t in reversed(self.transforms):
            x = t.inv(y)
            log_prob = log_prob - _sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            y = x
        return log_prob + _sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))
