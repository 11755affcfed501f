"""More of torch.distributions: MultivariateNormal (reparameterized through the Cholesky factor, differentiable
since tessel/_linalg_grad.py), Cauchy, HalfNormal, HalfCauchy and Gumbel (reparameterized), and Gamma, Chi2,
Beta, Dirichlet, StudentT, Poisson, Binomial and Geometric. Densities, entropies and moments are torch's
formulas composed of tessel ops (differentiable in the parameters).

The Gamma family (Gamma, Chi2, Beta, Dirichlet, StudentT), Poisson and Binomial draw with torch's CPU samplers
(tessel._host_random: core/tensor/torch_random.h), so a seeded script's samples are torch's. The Gamma
family's rsample is torch's implicit reparameterization: a standard-gamma sample x of concentration α keeps its
CDF level as α moves, so dx/dα = −(∂P/∂α)(α, x) / p(x; α) (P the regularized incomplete gamma, p the density;
∂P/∂α by a central difference of tessel's float64 incomplete gamma); Beta and Dirichlet normalize such samples,
StudentT divides a normal by the square root of a Chi² one, as torch builds them.
"""
import math

import numpy as np

from .. import _C, _tensor
from . import constraints
from ._families import Normal, _LocScale, _ProbsOrLogits
from ..autograd import Function
from .distribution import Distribution, broadcast_all

Tensor = _C.Tensor
_LOG_PI = math.log(math.pi)


def _xlogy(x, y):
    from .. import xlogy
    return xlogy(x, y)


def _np(t):
    return t.detach().to(_C.dtype.float64).numpy()


def _standard_gamma_grad(alpha, x):
    """dx/dα of a standard-gamma sample x at concentration α (float64 arrays): −(∂P/∂α) / p(x; α), ∂P/∂α from a
    central difference of P, or of −Q where P is near 1 (no cancellation in the upper tail)."""
    from .._special_more import _gammainc_pair
    h = 1e-5 * np.maximum(alpha, 1e-3)
    p_hi, q_hi = _gammainc_pair(alpha + h, x)
    p_lo, q_lo = _gammainc_pair(alpha - h, x)
    p, _ = _gammainc_pair(alpha, x)
    dp = np.where(p < 0.5, (p_hi - p_lo), -(q_hi - q_lo)) / (2 * h)
    log_density = (alpha - 1) * np.log(np.maximum(x, 1e-300)) - x - np.vectorize(math.lgamma)(alpha)
    return -dp / np.exp(log_density)


class _StandardGamma(Function):
    """Gamma(α, 1) samples, differentiable in α (torch's _standard_gamma with _standard_gamma_grad)."""

    @staticmethod
    def forward(ctx, alpha):
        from .._host_random import _standard_gamma
        x = _standard_gamma(alpha)  # torch's CPU sampler, draw for draw
        ctx.save_for_backward(alpha, x)
        return x

    @staticmethod
    def backward(ctx, g):
        alpha, x = ctx.saved_tensors
        grad = _standard_gamma_grad(_np(alpha), _np(x))
        return g * _C._from_numpy(np.array(grad, dtype=np.float64, order="C")).to(g.dtype)


def _rsample_gamma(concentration, shape):
    return _StandardGamma.apply(concentration.expand(*shape) if tuple(concentration.shape) != tuple(shape)
                                else concentration)


class MultivariateNormal(Distribution):
    """N(loc, Σ) over the last dim, Σ given as covariance_matrix, precision_matrix or scale_tril (exactly one)."""
    arg_constraints = {"loc": constraints.real}
    support = constraints.real
    has_rsample = True
    _unexpanded = ("_unbroadcasted_scale_tril",)

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        from .. import linalg
        if scale_tril is not None:
            tril = scale_tril
        elif covariance_matrix is not None:
            tril = linalg.cholesky(covariance_matrix)
        else:  # Σ = P⁻¹: the Cholesky factor of the inverse
            tril = linalg.cholesky(linalg.inv(precision_matrix))
        n = loc.shape[-1]
        if tril.shape[-1] != n or tril.shape[-2] != n:
            raise ValueError("The covariance matrix's last two dims must be (%d, %d) for loc %s, got %s"
                             % (n, n, list(loc.shape), list(tril.shape)))
        batch = np.broadcast_shapes(tuple(loc.shape[:-1]), tuple(tril.shape[:-2]))
        self.loc = loc.expand(*(list(batch) + [n]))
        self._unbroadcasted_scale_tril = tril
        self.scale_tril = tril.expand(*(list(batch) + [n, n]))
        super().__init__(batch, (n,), validate_args=validate_args)

    covariance_matrix = property(lambda self: self.scale_tril @ self.scale_tril.transpose(-2, -1))
    precision_matrix = property(lambda self: _linalg().inv(self.covariance_matrix))
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: (self.scale_tril ** 2).sum(-1))

    def rsample(self, sample_shape=()):
        eps = _tensor.randn(*self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, value):
        from .. import linalg
        diff = (value - self.loc).unsqueeze(-1)
        tril = self._unbroadcasted_scale_tril
        if tril.dim() < diff.dim():
            tril = tril.expand(*(list(diff.shape[:-2]) + list(tril.shape[-2:])))
        m = linalg.solve_triangular(tril, diff, upper=False).squeeze(-1)
        half_log_det = tril.diagonal(0, -2, -1).log().sum(-1)
        n = self.loc.shape[-1]
        return -0.5 * (n * math.log(2 * math.pi) + (m * m).sum(-1)) - half_log_det

    def entropy(self):
        n = self.loc.shape[-1]
        half_log_det = self._unbroadcasted_scale_tril.diagonal(0, -2, -1).log().sum(-1)
        out = 0.5 * n * (1.0 + math.log(2 * math.pi)) + half_log_det
        return out.expand(*self.batch_shape) if len(self.batch_shape) else out


def _linalg():
    from .. import linalg
    return linalg


class Cauchy(_LocScale):
    mean = property(lambda self: self.loc * float("nan"))
    variance = property(lambda self: self.loc * 0 + float("inf"))

    def rsample(self, sample_shape=()):
        u = _tensor.rand(*self._extended_shape(sample_shape), dtype=self.loc.dtype)
        from .._namespace import tan
        return self.loc + self.scale * tan(math.pi * (u - 0.5))

    def log_prob(self, value):
        return -_LOG_PI - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class _Folded(Distribution):
    """|X| for X ~ family(0, scale) of a symmetric family: density doubled on [0, ∞)."""
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    family = None

    def __init__(self, scale, validate_args=None):
        self.base_dist = self.family(0.0 * scale if isinstance(scale, Tensor) else 0.0, scale)
        self.scale = self.base_dist.scale
        super().__init__(self.scale.shape, validate_args=validate_args)

    mode = property(lambda self: self.scale * 0)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape).abs()

    def log_prob(self, value):
        lp = self.base_dist.log_prob(value) + math.log(2)
        return _C._functional.where(value.ge(0), lp, lp * 0 - float("inf"))

    def cdf(self, value):
        return 2 * self.base_dist.cdf(value) - 1

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)


class HalfNormal(_Folded):
    """|X| for X ~ Normal(0, scale)."""
    family = Normal
    mean = property(lambda self: self.scale * math.sqrt(2 / math.pi))
    variance = property(lambda self: self.scale ** 2 * (1 - 2 / math.pi))


class HalfCauchy(_Folded):
    """|X| for X ~ Cauchy(0, scale)."""
    family = Cauchy
    mean = property(lambda self: self.scale * 0 + float("inf"))
    variance = property(lambda self: self.scale * 0 + float("inf"))


class Gumbel(_LocScale):
    mean = property(lambda self: self.loc + self.scale * 0.5772156649015329)
    variance = property(lambda self: (math.pi ** 2 / 6) * self.scale ** 2)

    def rsample(self, sample_shape=()):
        from .._dtypes import finfo
        eps = finfo(self.loc.dtype).tiny
        u = _tensor.rand(*self._extended_shape(sample_shape), dtype=self.loc.dtype).clamp(eps, 1 - eps)
        return self.loc - self.scale * (-u.log()).log()

    def log_prob(self, value):
        z = (value - self.loc) / self.scale
        return -(self.scale.log() + z + (-z).exp())

    def entropy(self):
        return self.scale.log() + 1 + 0.5772156649015329


class Gamma(Distribution):
    """Gamma(concentration α, rate β): density β^α x^(α-1) e^(-βx) / Γ(α)."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.shape, validate_args=validate_args)

    mean = property(lambda self: self.concentration / self.rate)
    mode = property(lambda self: ((self.concentration - 1) / self.rate).clamp(0, None))
    variance = property(lambda self: self.concentration / self.rate ** 2)

    def sample(self, sample_shape=()):
        with _C._GradMode(False):
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """torch's: _standard_gamma(concentration) / rate, at least the dtype's tiny (its draws)."""
        from .._dtypes import finfo
        shape = self._extended_shape(sample_shape)
        value = _rsample_gamma(self.concentration, shape) / self.rate.expand(*shape)
        value.detach().clamp_(min=finfo(value.dtype).tiny)
        return value

    def log_prob(self, value):
        a, b = self.concentration, self.rate
        return _xlogy(a, b) + _xlogy(a - 1, value) - b * value - a.lgamma()  # (torch's: 0 · log 0 is 0 at x = 0)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        from .. import special
        return special.gammainc(self.concentration, self.rate * value)

    def entropy(self):
        a = self.concentration
        return a - self.rate.log() + a.lgamma() + (1.0 - a) * a.digamma()


class Chi2(Gamma):
    """Chi²(df) = Gamma(df / 2, 1 / 2)."""
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        df = df if isinstance(df, Tensor) else _C._full([], float(df), _C.dtype.float32)
        super().__init__(0.5 * df, df * 0 + 0.5, validate_args=validate_args)

    df = property(lambda self: self.concentration * 2)


class Beta(Distribution):
    """Beta(α, β) on [0, 1], sampled as X / (X + Y) for X ~ Gamma(α), Y ~ Gamma(β)."""
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        super().__init__(self.concentration1.shape, validate_args=validate_args)

    mean = property(lambda self: self.concentration1 / (self.concentration1 + self.concentration0))
    variance = property(lambda self: self.concentration1 * self.concentration0 / (
        (self.concentration1 + self.concentration0) ** 2 * (self.concentration1 + self.concentration0 + 1)))

    def sample(self, sample_shape=()):
        with _C._GradMode(False):
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """torch's: the first coordinate of a Dirichlet([α, β]) sample (its draws where no gradient is asked; with
        one, X / (X + Y) of two reparameterized gamma samples)."""
        from .. import stack
        shape = self._extended_shape(sample_shape)
        a, b = self.concentration1, self.concentration0
        if not (_C.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
            return Dirichlet(stack([a, b], -1)).rsample(sample_shape).select(-1, 0)
        x, y = _rsample_gamma(a, shape), _rsample_gamma(b, shape)
        return x / (x + y)

    def log_prob(self, value):
        a, b = self.concentration1, self.concentration0
        # torch's (its Dirichlet over [x, 1 - x]): xlogy, so the boundaries give finite values where α or β is 1
        return (_xlogy(a - 1, value) + _xlogy(b - 1, 1.0 - value)) + (a + b).lgamma() - (a.lgamma() + b.lgamma())

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        log_beta = a.lgamma() + b.lgamma() - (a + b).lgamma()
        return log_beta - (a - 1) * a.digamma() - (b - 1) * b.digamma() + (a + b - 2) * (a + b).digamma()


class Dirichlet(Distribution):
    """Dirichlet(concentration) over the simplex of the last dim."""
    arg_constraints = {"concentration": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args=validate_args)

    mean = property(lambda self: self.concentration / self.concentration.sum(-1, True))
    variance = property(lambda self: (lambda c, s: c * (s - c) / (s ** 2 * (s + 1)))(
        self.concentration, self.concentration.sum(-1, True)))

    def sample(self, sample_shape=()):
        with _C._GradMode(False):
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """torch's _sample_dirichlet (its draws) where no gradient is asked; with one, reparameterized gamma
        samples normalized (torch's gradient estimator differs: _dirichlet_grad)."""
        shape = self._extended_shape(sample_shape)
        c = self.concentration
        if not (_C.is_grad_enabled() and c.requires_grad):
            from .._host_random import _sample_dirichlet
            return _sample_dirichlet(c.expand(*shape))
        g = _rsample_gamma(c, shape)
        return g / g.sum(-1, True)

    def log_prob(self, value):
        c = self.concentration
        return _xlogy(c - 1, value).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1)  # (torch's xlogy)

    def entropy(self):
        c = self.concentration
        k, c0 = c.shape[-1], c.sum(-1)
        return c.lgamma().sum(-1) - c0.lgamma() - (k - c0) * c0.digamma() - ((c - 1) * c.digamma()).sum(-1)


class StudentT(Distribution):
    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(self.df.shape, validate_args=validate_args)

    mean = property(lambda self: _C._functional.where(self.df.gt(1), self.loc, self.loc * float("nan")))
    variance = property(lambda self: _C._functional.where(
        self.df.gt(2), self.scale ** 2 * self.df / (self.df - 2),
        _C._functional.where(self.df.gt(1), self.df * 0 + float("inf"), self.df * float("nan"))))

    def sample(self, sample_shape=()):
        with _C._GradMode(False):
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """loc + scale · N / sqrt(G / df) with G ~ Chi²(df) = 2 · Gamma(df / 2), as torch's."""
        shape = self._extended_shape(sample_shape)
        normal = _tensor.randn(*shape, dtype=self.df.dtype)
        chi2 = _rsample_gamma(0.5 * self.df, shape) / 0.5  # torch's Chi2(df).rsample
        return self.loc + self.scale * normal * (chi2 / self.df).rsqrt()

    def entropy(self):
        half_df = 0.5 * self.df
        log_beta = half_df.lgamma() + 0.5 * _LOG_PI - (half_df + 0.5).lgamma()  # lgamma(1/2) = log(pi)/2
        return (self.scale.log() + (half_df + 0.5) * ((half_df + 0.5).digamma() - half_df.digamma())
                + 0.5 * self.df.log() + log_beta)

    def log_prob(self, value):
        y = (value - self.loc) / self.scale
        z = self.scale.log() + 0.5 * self.df.log() + 0.5 * _LOG_PI + (0.5 * self.df).lgamma() - \
            (0.5 * (self.df + 1.0)).lgamma()
        return -0.5 * (self.df + 1.0) * (y ** 2 / self.df).log1p() - z


class Poisson(Distribution):
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        self.rate, = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    mean = property(lambda self: self.rate)
    mode = property(lambda self: self.rate.floor())
    variance = property(lambda self: self.rate)

    def sample(self, sample_shape=()):
        from .._host_random import poisson
        with _C._GradMode(False):
            return poisson(self.rate.expand(*self._extended_shape(sample_shape)))

    def log_prob(self, value):
        from .. import special
        return special.xlogy(value, self.rate) - self.rate - (value + 1).lgamma()


class Binomial(_ProbsOrLogits):
    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        param = probs if probs is not None else logits
        if param is not None:  # total_count and the probability broadcast against each other
            total_count, param = broadcast_all(total_count, param)
        super().__init__(param if probs is not None else None, param if logits is not None else None,
                         validate_args=validate_args)
        self.total_count = total_count.to(self._param.dtype)
        if self._validate_args:  # set after the base checks ran: Binomial(total_count=-1) was accepted
            self._validate_params(("total_count",))

    support = property(lambda self: constraints.integer_interval(0, self.total_count))
    has_enumerate_support = True
    mean = property(lambda self: self.total_count * self.probs)

    def enumerate_support(self, expand=True):
        top = int(self.total_count.max().item())
        if not self.total_count.min().item() == top:
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        values = _tensor.arange(1 + top, dtype=self._param.dtype).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand(-1, *self._batch_shape) if expand else values
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def sample(self, sample_shape=()):
        from .._host_random import binomial
        shape = self._extended_shape(sample_shape)
        with _C._GradMode(False):
            return binomial(self.total_count.expand(*shape), self.probs.expand(*shape))

    def entropy(self):
        """-Σ_k p(k) log p(k) over k = 0..total_count (torch's enumeration of the support)."""
        top = int(self.total_count.max().item())
        ks = _tensor.arange(top + 1).to(self.probs.dtype).reshape([top + 1] + [1] * len(self.batch_shape))
        lp = self.log_prob(ks)
        inside = ks.le(self.total_count)
        terms = _C._functional.where(inside, lp.exp() * lp, lp * 0)
        return -terms.sum(0)

    def log_prob(self, value):
        n = self.total_count
        log_comb = (n + 1).lgamma() - (value + 1).lgamma() - (n - value + 1).lgamma()
        # value·log p + (n - value)·log(1 - p) in logits' stable form
        from ..nn import functional as F
        return log_comb + value * self.logits - n * F.softplus(self.logits)


class Geometric(_ProbsOrLogits):
    """The number of failures before the first success (support 0, 1, 2, ...), as torch's."""
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        super().__init__(probs, logits, validate_args=validate_args)
        if self._validate_args and probs is not None and not bool((self.probs > 0).all().item()):
            raise ValueError("Expected parameter probs (Tensor of shape %s) of distribution %r to be positive but "
                             "found invalid values:\n%r" % (tuple(self.probs.shape), self, self.probs))

    mean = property(lambda self: 1.0 / self.probs - 1.0)
    mode = property(lambda self: self.probs * 0)
    variance = property(lambda self: (1.0 / self.probs - 1.0) / self.probs)

    def sample(self, sample_shape=()):
        """torch's: floor(log u / log1p(-p)) with u uniform on [tiny, 1) (a CPU uniform_: torch's draws)."""
        from .._dtypes import finfo
        from .._tensor import empty
        shape = self._extended_shape(sample_shape)
        with _C._GradMode(False):
            u = empty(*shape, dtype=self.probs.dtype).uniform_(finfo(self.probs.dtype).tiny, 1)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        """torch's: value·log1p(-p) + log p, with p = 1 read as 0 inside the log1p where value is 0 (so P(0) = 1
        and P(k > 0) = 0 there; the clamp to [1e-12, 1 - 1e-12] it replaces moved every small p's values)."""
        p = self.probs
        inner = _C._functional.where((p == 1) & (value == 0), p * 0, p)
        return value * (-inner).log1p() + p.log()

    def entropy(self):
        from ..nn import functional as F
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none") / self.probs
