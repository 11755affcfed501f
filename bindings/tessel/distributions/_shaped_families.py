"""VonMises, ContinuousBernoulli, FisherSnedecor and LowRankMultivariateNormal, as torch 2.15 defines them.

Densities, moments and entropies are torch's formulas composed of tessel ops (differentiable in the
parameters): VonMises' log I0 / log I1 are torch's polynomial approximations (not exact Bessel functions), so
log_prob and variance agree with torch's to rounding; ContinuousBernoulli switches to torch's Taylor forms in
its unstable region around probs = 1/2. VonMises samples by torch's rejection sampler in float64,
FisherSnedecor as a ratio of reparameterized Gamma draws, LowRankMultivariateNormal as W·ε_W + sqrt(D)·ε_D.
"""
import math
import numbers

import numpy as np

from .. import _C, _tensor
from ..nn import functional as F
from . import constraints
from ._families import _clamp_probs, _lazy, _ProbsOrLogits
from ._more_families import Gamma
from .distribution import Distribution, broadcast_all

_where = _C._functional.where


def _const(value, like):
    return _C._full([], float(value), like.dtype)


def _no_grad():
    from .. import no_grad
    return no_grad()


def _eval_poly(y, coef):
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


# torch's coefficients (Abramowitz & Stegun 9.8.1 - 9.8.4): below 3.75 a series in (x / 3.75)², above it one in
# 3.75 / x for the scaled function
_COEF_SMALL = [[1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2],
               [0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2, 0.32411e-3]]
_COEF_LARGE = [[0.39894228, 0.1328592e-1, 0.225319e-2, -0.157565e-2, 0.916281e-2, -0.2057706e-1, 0.2635537e-1,
                -0.1647633e-1, 0.392377e-2],
               [0.39894228, -0.3988024e-1, -0.362018e-2, 0.163801e-2, -0.1031555e-1, 0.2282967e-1, -0.2895312e-1,
                0.1787654e-1, -0.420059e-2]]


def _log_modified_bessel_fn(x, order=0):
    """log I_order(x) for order 0 or 1 and x > 0 (torch's approximation)."""
    y = (x / 3.75) ** 2
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    small = small.log()
    large = x - 0.5 * x.log() + _eval_poly(3.75 / x, _COEF_LARGE[order]).log()
    return _where(x < 3.75, small, large)


class VonMises(Distribution):
    """The circular normal on [-π, π): density exp(κ cos(x - loc)) / (2π I0(κ))."""
    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, (), validate_args)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (self.concentration * (value - self.loc).cos() - math.log(2 * math.pi)
                - _log_modified_bessel_fn(self.concentration, order=0))

    @_lazy
    def variance(self):
        c = self.concentration
        return 1 - (_log_modified_bessel_fn(c, order=1) - _log_modified_bessel_fn(c, order=0)).exp()

    def sample(self, sample_shape=()):
        """Best and Fisher's rejection sampler in float64 (torch's): each round draws three uniforms per element
        and replaces the elements it accepts, until every element has been accepted once."""
        with _no_grad():
            shape = tuple(self._extended_shape(sample_shape))
            f64 = _C.dtype.float64
            loc, kappa = self.loc.detach().to(f64), self.concentration.detach().to(f64)
            tau = 1 + (1 + 4 * kappa ** 2).sqrt()
            rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
            r = _where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho ** 2) / (2 * rho))
            x = _tensor.zeros(*shape, dtype=f64)
            done = _tensor.zeros(*shape, dtype=_C.dtype.bool)
            while not bool(done.all().item()):
                u1, u2, u3 = _tensor.rand(*((3,) + shape), dtype=f64).unbind(0)
                z = (math.pi * u1).cos()
                f = (1 + r * z) / (r + z)
                c = kappa * (r - f)
                accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
                if bool(accept.any().item()):
                    x = _where(accept, (u3 - 0.5).sign() * f.acos(), x)
                    done = done | accept
            return ((x + math.pi + loc) % (2 * math.pi) - math.pi).to(self.loc.dtype)


class ContinuousBernoulli(_ProbsOrLogits):
    """The continuous Bernoulli on [0, 1]: density C(λ) λ^x (1 - λ)^(1 - x), λ = probs."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            # torch checks the given probs whenever validate_args is passed at all (False too), then clamps
            # them into (0, 1), so the constructor's own check always passes
            if validate_args is not None and not bool(self.arg_constraints["probs"].check(self.probs).all().item()):
                raise ValueError("The parameter probs has invalid values")
            self.probs = _clamp_probs(self.probs)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        self._lims = lims
        Distribution.__init__(self, self._param.shape, validate_args=validate_args)

    @_lazy
    def probs(self):
        return _clamp_probs(self.logits.sigmoid())

    param_shape = property(lambda self: self._param.shape)

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return _where(self._outside_unstable_region(), self.probs, _const(self._lims[0], self.probs))

    def _cont_bern_log_norm(self):
        cut = self._cut_probs()
        below = _where(cut <= 0.5, cut, _const(0.0, cut))
        above = _where(cut >= 0.5, cut, _const(1.0, cut))
        log_norm = ((-cut).log1p() - cut.log()).abs().log() - _where(cut <= 0.5, (-2.0 * below).log1p(),
                                                                     (2.0 * above - 1.0).log())
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return _where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / ((-cut).log1p() - cut.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x
        return _where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self):
        cut = self._cut_probs()
        var = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / ((-cut).log1p() - cut.log()) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return _where(self._outside_unstable_region(), var, taylor)

    def sample(self, sample_shape=()):
        u = _tensor.rand(*self._extended_shape(sample_shape), dtype=self.probs.dtype)
        with _no_grad():
            return self.icdf(u)

    def rsample(self, sample_shape=()):
        return self.icdf(_tensor.rand(*self._extended_shape(sample_shape), dtype=self.probs.dtype))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut = self._cut_probs()
        cdfs = (cut.pow(value) * (1.0 - cut).pow(1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        unbounded = _where(self._outside_unstable_region(), cdfs, value)
        return _where(value <= 0.0, _tensor.zeros_like(value),
                      _where(value >= 1.0, _tensor.ones_like(value), unbounded))

    def icdf(self, value):
        cut = self._cut_probs()
        inverse = ((-cut + value * (2.0 * cut - 1.0)).log1p() - (-cut).log1p()) / (cut.log() - (-cut).log1p())
        return _where(self._outside_unstable_region(), inverse, value)

    def entropy(self):
        log_probs0, log_probs1 = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        outside = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut = _where(outside, x, _const(self._lims[0] - 0.5, x))
        log_norm = cut.expm1().abs().log() - cut.abs().log()
        taylor = 0.5 * x + x ** 2 / 24.0 - x ** 4 / 2880.0
        return _where(outside, log_norm, taylor)


class FisherSnedecor(Distribution):
    """F(df1, df2): (X1 / df1) / (X2 / df2) for X1 ~ Chi²(df1), X2 ~ Chi²(df2)."""
    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        scalar = isinstance(df1, numbers.Number) and isinstance(df2, numbers.Number)
        super().__init__(() if scalar else self.df1.shape, validate_args=validate_args)

    @property
    def mean(self):  # NaN where df2 <= 2
        df2 = _where(self.df2 <= 2, _const(math.nan, self.df2), self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return _where(self.df1 <= 2, _const(math.nan, mode), mode)

    @property
    def variance(self):
        df2 = _where(self.df2 <= 4, _const(math.nan, self.df2), self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=()):
        from .._dtypes import finfo
        shape = self._extended_shape(sample_shape)
        x1 = self._gamma1.rsample(sample_shape).reshape(*shape)
        x2 = self._gamma2.rsample(sample_shape).reshape(*shape)
        tiny = finfo(x2.dtype).tiny
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3


def _batch_mv(bmat, bvec):
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bl, bx):
    """xᵀ (L Lᵀ)⁻¹ x for factors bl [..., n, n] whose batch broadcasts against bx [..., n]."""
    from .. import linalg
    n = bx.shape[-1]
    batch = tuple(np.broadcast_shapes(tuple(bl.shape[:-2]), tuple(bx.shape[:-1])))
    solved = linalg.solve_triangular(bl.expand(*(batch + (n, n))), bx.expand(*(batch + (n,))).unsqueeze(-1),
                                     upper=False)
    return solved.squeeze(-1).pow(2).sum(-1)


def _batch_capacitance_tril(w, d):
    """The Cholesky factor of I + Wᵀ D⁻¹ W (m x m)."""
    from .. import linalg
    m = w.shape[-1]
    k = (w.transpose(-2, -1) / d.unsqueeze(-2)) @ w
    return linalg.cholesky(k + _tensor.eye(m, dtype=k.dtype))


def _batch_lowrank_logdet(w, d, capacitance_tril):
    """log det(W Wᵀ + D) by the matrix determinant lemma."""
    return 2 * capacitance_tril.diagonal(0, -2, -1).log().sum(-1) + d.log().sum(-1)


def _batch_lowrank_mahalanobis(w, d, x, capacitance_tril):
    """xᵀ (W Wᵀ + D)⁻¹ x by the Woodbury identity."""
    wt_dinv = w.transpose(-2, -1) / d.unsqueeze(-2)
    return (x.pow(2) / d).sum(-1) - _batch_mahalanobis(capacitance_tril, _batch_mv(wt_dinv, x))


class LowRankMultivariateNormal(Distribution):
    """N(loc, W Wᵀ + diag(D)) with W = cov_factor (n x m) and D = cov_diag: log_prob and entropy through the
    m x m capacitance matrix."""
    arg_constraints = {"loc": constraints.real_vector, "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True
    _unexpanded = ("_unbroadcasted_cov_factor", "_unbroadcasted_cov_diag", "_capacitance_tril")

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = tuple(loc.shape[-1:])
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != event_shape:
            raise ValueError("cov_factor must be a batch of matrices with shape %d x m" % event_shape[0])
        if tuple(cov_diag.shape[-1:]) != event_shape:
            raise ValueError("cov_diag must be a batch of vectors with shape %s" % (_tensor.Size(event_shape),))
        try:
            loc_, self.cov_factor, cov_diag_ = _tensor.broadcast_tensors(loc.unsqueeze(-1), cov_factor,
                                                                          cov_diag.unsqueeze(-1))
        except RuntimeError as e:
            raise ValueError("Incompatible batch shapes: loc %s, cov_factor %s, cov_diag %s"
                             % (loc.shape, cov_factor.shape, cov_diag.shape)) from e
        self.loc, self.cov_diag = loc_[..., 0], cov_diag_[..., 0]
        self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag = cov_factor, cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(self.loc.shape[:-1], event_shape, validate_args=validate_args)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    def _full(self, t, matrix=True):
        shape = tuple(self._batch_shape) + tuple(self._event_shape) * (2 if matrix else 1)
        return t.expand(*shape)

    @_lazy
    def variance(self):
        return self._full(self._unbroadcasted_cov_factor.pow(2).sum(-1) + self._unbroadcasted_cov_diag, False)

    @_lazy
    def scale_tril(self):
        """sqrt(D) · chol(I + D^-1/2 W Wᵀ D^-1/2): the factor of W Wᵀ + D (torch's form, well conditioned)."""
        from .. import linalg
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        dinvsqrt_w = self._unbroadcasted_cov_factor / d_sqrt
        k = dinvsqrt_w @ dinvsqrt_w.transpose(-2, -1) + _tensor.eye(n, dtype=d_sqrt.dtype)
        return self._full(d_sqrt * linalg.cholesky(k))

    @_lazy
    def covariance_matrix(self):
        w = self._unbroadcasted_cov_factor
        return self._full(w @ w.transpose(-2, -1) + self._unbroadcasted_cov_diag.diag_embed())

    @_lazy
    def precision_matrix(self):
        from .. import linalg
        wt_dinv = self._unbroadcasted_cov_factor.transpose(-2, -1) / self._unbroadcasted_cov_diag.unsqueeze(-2)
        a = linalg.solve_triangular(self._capacitance_tril, wt_dinv, upper=False)
        return self._full(self._unbroadcasted_cov_diag.reciprocal().diag_embed() - a.transpose(-2, -1) @ a)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        w_shape = shape[:-1] + tuple(self.cov_factor.shape[-1:])
        eps_w = _tensor.randn(*w_shape, dtype=self.loc.dtype)
        eps_d = _tensor.randn(*shape, dtype=self.loc.dtype)
        return (self.loc + _batch_mv(self._unbroadcasted_cov_factor, eps_w)
                + self._unbroadcasted_cov_diag.sqrt() * eps_d)

    def _logdet(self):
        return _batch_lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                     self._capacitance_tril)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        m = _batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                       value - self.loc, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._logdet() + m)

    def entropy(self):
        h = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._logdet())
        return h.expand(*self._batch_shape) if len(self._batch_shape) else h


__all__ = ["VonMises", "ContinuousBernoulli", "FisherSnedecor", "LowRankMultivariateNormal"]
