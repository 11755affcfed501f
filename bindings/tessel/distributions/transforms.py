"""torch.distributions.transforms and TransformedDistribution: ExpTransform, AffineTransform, SigmoidTransform,
TanhTransform (SAC's squashed Gaussian), PowerTransform, AbsTransform, StickBreakingTransform and
ComposeTransform, each with its inverse and log |det J|; cache_size=1 keeps the last (x, y) pair so inv(y) of a
sampled y returns the very x it came from (no atanh of a value rounded to ±1), as torch's. A transform's sign
(+1 increasing, -1 decreasing) lets TransformedDistribution carry the base's cdf / icdf across it, and
forward_shape / inverse_shape how it changes a shape (stick breaking adds one coordinate).

    base = Normal(mu, std)
    pi = TransformedDistribution(base, [TanhTransform(cache_size=1)])
    a = pi.rsample(); logp = pi.log_prob(a)                          # SAC's policy
"""
import math

from .. import _C
from ..nn import functional as F
from . import constraints
from .distribution import Distribution, Independent

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

    def inverse_shape(self, shape):
        return shape

    @property
    def sign(self):
        raise NotImplementedError

    def __eq__(self, other):  # torch's: identity, unless a transform defines its parameters' equality
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __repr__(self):
        return type(self).__name__ + "()"


class _Stateless(Transform):
    """A transform without parameters: any two instances are equal (torch's ExpTransform, SigmoidTransform, ...)."""
    sign = 1

    def __eq__(self, other):
        return isinstance(other, type(self))

    __hash__ = object.__hash__


def _broadcast_shape(shape, *params):
    import numpy as np
    return tuple(np.broadcast_shapes(tuple(shape), *[tuple(getattr(p, "shape", ())) for p in params]))


class ExpTransform(_Stateless):
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

    @property
    def sign(self):
        if isinstance(self.scale, Tensor):
            return self.scale.sign()
        return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0

    def __eq__(self, other):
        if not isinstance(other, AffineTransform):
            return False
        for a, b in ((self.loc, other.loc), (self.scale, other.scale)):
            if isinstance(a, Tensor) or isinstance(b, Tensor):
                if not bool((a == b).all().item()):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = object.__hash__

    def forward_shape(self, shape):
        return _broadcast_shape(shape, self.loc, self.scale)

    inverse_shape = forward_shape

    def log_abs_det_jacobian(self, x, y):
        scale = self.scale if isinstance(self.scale, Tensor) else _C._full([], float(self.scale), x.dtype)
        zeros = _C._full(list(x.shape), 0.0, x.dtype)  # x's shape without x's values (x * 0 was NaN at x = inf)
        return _sum_rightmost(scale.abs().log() + zeros, self.event_dim)


class SigmoidTransform(_Stateless):
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


class TanhTransform(_Stateless):
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

    @property
    def sign(self):
        if isinstance(self.exponent, Tensor):
            return self.exponent.sign()
        return 1 if float(self.exponent) > 0 else -1 if float(self.exponent) < 0 else 0

    def __eq__(self, other):
        if not isinstance(other, PowerTransform):
            return False
        a, b = self.exponent, other.exponent
        return bool((a == b).all().item()) if isinstance(a, Tensor) or isinstance(b, Tensor) else a == b

    __hash__ = object.__hash__

    def forward_shape(self, shape):
        return _broadcast_shape(shape, self.exponent)

    inverse_shape = forward_shape

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()


class AbsTransform(_Stateless):
    bijective = False
    codomain = constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class StickBreakingTransform(_Stateless):
    """Real vectors of length K onto the K + 1 simplex (torch's stick breaking: a clipped sigmoid of x - log of
    the remaining coordinates' count, each taking its share of the stick left)."""
    codomain = constraints.simplex
    event_dim = 1

    def _offset(self, n, like):
        from .. import _tensor
        return n - _tensor.arange(n, dtype=like.dtype)

    def _call(self, x):
        from .._dtypes import finfo
        info = finfo(x.dtype)
        z = (x - self._offset(x.shape[-1], x).log()).sigmoid().clamp(info.tiny, 1.0 - info.eps)
        rest = (1 - z).cumprod(-1)
        return F.pad(z, [0, 1], value=1) * F.pad(rest, [1, 0], value=1)

    def _inverse(self, y):
        from .._dtypes import finfo
        crop = y[..., :-1]
        left = (1 - crop.cumsum(-1)).clamp(min=finfo(y.dtype).tiny)
        return crop.log() - left.log() + self._offset(crop.shape[-1], y).log()

    def log_abs_det_jacobian(self, x, y):
        x = x - self._offset(x.shape[-1], x).log()
        return (-x + F.logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class ComposeTransform(Transform):
    def __init__(self, parts, cache_size=0):
        super().__init__(cache_size)
        self.parts = list(parts)
        self.event_dim = max((p.event_dim for p in self.parts), default=0)

    @property
    def sign(self):
        sign = 1
        for part in self.parts:
            sign = sign * part.sign
        return sign

    def __eq__(self, other):
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    def forward_shape(self, shape):
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape

    def inverse_shape(self, shape):
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape

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
    base's log_prob of the inverse minus each transform's log |det J| (summed over event dims). As torch's, a
    base of too few event dims for the transforms is wrapped in Independent, and one that a transform's
    parameters broadcast over is expanded first."""
    arg_constraints = {}

    def __init__(self, base_distribution, transforms, validate_args=None):
        if isinstance(transforms, Transform):
            self.transforms = [transforms]
        elif isinstance(transforms, list):
            if not all(isinstance(t, Transform) for t in transforms):
                raise ValueError("transforms must be a Transform or a list of Transforms")
            self.transforms = transforms
        else:
            raise ValueError("transforms must be a Transform or list, but was %s" % (transforms,))
        base_shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        base_event_dim = len(base_distribution.event_shape)
        compose = ComposeTransform(self.transforms)
        if len(base_shape) < compose.event_dim:
            raise ValueError("base_distribution needs to have shape with size at least %d, but got %s."
                             % (compose.event_dim, _size(base_shape)))
        forward_shape = tuple(compose.forward_shape(base_shape))
        expanded = tuple(compose.inverse_shape(forward_shape))
        if expanded != base_shape:
            base_distribution = base_distribution.expand(expanded[:len(expanded) - base_event_dim])
        if compose.event_dim > base_event_dim:
            base_distribution = Independent(base_distribution, compose.event_dim - base_event_dim)
        self.base_dist = base_distribution
        cut = len(forward_shape) - max(compose.event_dim, base_event_dim)
        super().__init__(forward_shape[:cut], forward_shape[cut:], validate_args=validate_args)

    has_rsample = property(lambda self: self.base_dist.has_rsample)

    @property
    def support(self):
        if not self.transforms:
            return self.base_dist.support
        support = self.transforms[-1].codomain
        if len(self.event_shape) > support.event_dim:
            support = constraints.independent(support, len(self.event_shape) - support.event_dim)
        return support

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
        if self._validate_args:
            self._validate_sample(value)
        event_dim = len(self.event_shape)
        log_prob = 0.0
        y = value
        for t in reversed(self.transforms):
            x = t.inv(y)
            log_prob = log_prob - _sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            y = x
        return log_prob + _sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value):
        """The base's cdf level read through decreasing transforms (sign -1) as 1 - level, as torch's."""
        sign = 1
        for t in self.transforms:
            sign = sign * t.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value):
        for t in reversed(self.transforms):
            value = t.inv(value)
        if self._validate_args:
            self.base_dist._validate_sample(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value):
        value = self.base_dist.icdf(self._monotonize_cdf(value))
        for t in self.transforms:
            value = t(value)
        return value


def _size(shape):
    from .._tensor import Size
    return Size(shape)
