"""Distributions over matrices: Wishart (positive definite p x p, by Bartlett's decomposition) and LKJCholesky
(Cholesky factors of correlation matrices, by the onion method), as torch 2.15 defines them.

Wishart's rsample is differentiable in its scale (a Cholesky factor times Chi² and normal noise, the Chi²
draws reparameterized as Gamma's are); a draw that is not positive definite is redrawn, up to
max_try_correction times, with a UserWarning. torch 2.15 inverts that test (it warns "Singular sample
detected." and redraws every time, a valid draw included); tessel warns only for an actual singular draw, which
leaves the samples' distribution the same.
"""
import math
import numbers
import warnings

import numpy as np

from .. import _C, _tensor
from . import constraints
from ._families import _lazy
from ._more_families import Beta, Chi2
from .distribution import Distribution, broadcast_all

_LOG_2 = math.log(2)


def _linalg():
    from .. import linalg
    return linalg


def _cat(tensors):
    from .. import cat
    return cat(tensors)


def _mvlgamma(x, p):
    from .. import mvlgamma
    return mvlgamma(x, p=p)


def _mvdigamma(x, p):
    """Σ_i ψ(x - i / 2) over i < p: the derivative of the multivariate log-gamma."""
    if not bool(x.gt((p - 1) / 2).all().item()):
        raise AssertionError("Wrong domain for multivariate digamma function.")
    half_steps = _tensor.arange(p, dtype=x.dtype) / 2
    return (x.unsqueeze(-1) - half_steps.expand(*(tuple(x.shape) + (p,)))).digamma().sum(-1)


def _precision_to_scale_tril(p):
    """The lower Cholesky factor of P⁻¹ without inverting P: flip P, factor it, flip back and invert the factor."""
    lf = _linalg().cholesky(p.flip((-2, -1)))
    l_inv = lf.flip((-2, -1)).transpose(-2, -1)
    eye = _tensor.eye(p.shape[-1], dtype=p.dtype)
    return _linalg().solve_triangular(l_inv, eye, upper=False)


class Wishart(Distribution):
    """Wishart(df, Σ) over p x p positive definite matrices, Σ given as covariance_matrix, precision_matrix or
    scale_tril (exactly one); df > p - 1."""
    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0
    _unexpanded = ("_dist_chi2",)

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                                 "specified.")
        param = given[0]
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional leading batch dimensions")
        if isinstance(df, numbers.Number):
            batch_shape = tuple(param.shape[:-2])
            self.df = _C._full([], float(df), param.dtype)
        else:
            batch_shape = tuple(np.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(*batch_shape)
        event_shape = tuple(param.shape[-2:])
        p = event_shape[-1]
        if bool(self.df.le(p - 1).any().item()):
            shown = df.item() if isinstance(df, _C.Tensor) and df.dim() == 0 else df  # (f-string of a 0-d tensor)
            raise ValueError("Value of df=%s expected to be greater than ndim - 1 = %d." % (shown, p - 1))
        full = batch_shape + (-1, -1)
        if scale_tril is not None:
            self.scale_tril = param.expand(*full)
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(*full)
        else:
            self.precision_matrix = param.expand(*full)
        if bool(self.df.lt(p).any().item()):
            warnings.warn("Low df values detected. Singular samples are highly likely to occur for ndim - 1 < df < "
                          "ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._batch_dims = [-(x + 1) for x in range(len(self._batch_shape))]
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = _linalg().cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)
        self._dist_chi2 = self._chi2()

    def _chi2(self):
        """The Bartlett factor's squared diagonal: Chi²(df - i) for row i."""
        p = self._event_shape[-1]
        steps = _tensor.arange(p, dtype=self._unbroadcasted_scale_tril.dtype)
        return Chi2(self.df.unsqueeze(-1) - steps.expand(*(tuple(self._batch_shape) + (-1,))))

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(
            *(tuple(new._batch_shape) + tuple(self._event_shape)))
        new._batch_dims = [-(x + 1) for x in range(len(new._batch_shape))]
        new._dist_chi2 = new._chi2()
        return new

    def _full(self, t):
        return t.expand(*(tuple(self._batch_shape) + tuple(self._event_shape)))

    @_lazy
    def scale_tril(self):
        return self._full(self._unbroadcasted_scale_tril)

    @_lazy
    def covariance_matrix(self):
        tril = self._unbroadcasted_scale_tril
        return self._full(tril @ tril.transpose(-2, -1))

    @_lazy
    def precision_matrix(self):
        from .. import cholesky_solve
        eye = _tensor.eye(self._event_shape[-1], dtype=self._unbroadcasted_scale_tril.dtype)
        return self._full(cholesky_solve(eye, self._unbroadcasted_scale_tril))

    def _df_matrix(self):
        return self.df.reshape(*(tuple(self._batch_shape) + (1, 1)))

    @property
    def mean(self):
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self):  # NaN where df <= p + 1
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = _C._functional.where(factor <= 0, _C._full([], math.nan, factor.dtype), factor)
        return factor.reshape(*(tuple(self._batch_shape) + (1, 1))) * self.covariance_matrix

    @property
    def variance(self):
        v = self.covariance_matrix
        diag = v.diagonal(0, -2, -1)
        return self._df_matrix() * (v.pow(2) + diag.unsqueeze(-1) * diag.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape=()):
        """L A Aᵀ Lᵀ with A lower triangular: sqrt(Chi²) on the diagonal, standard normals below it."""
        from .._dtypes import finfo
        p = self._event_shape[-1]
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        diag = chi.clamp(min=finfo(chi.dtype).eps).diag_embed()
        from .. import tril_indices
        i, j = tril_indices(p, p, offset=-1)
        below = _tensor.zeros(*diag.shape, dtype=diag.dtype)
        below[..., i, j] = _tensor.randn(*(tuple(sample_shape) + tuple(self._batch_shape) + (p * (p - 1) // 2,)),
                                         dtype=diag.dtype)
        chol = self._unbroadcasted_scale_tril @ (diag + below)
        return chol @ chol.transpose(-2, -1)

    def rsample(self, sample_shape=(), max_try_correction=None):
        max_try_correction = 10 if max_try_correction is None else max_try_correction
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        sample = self._bartlett_sampling(sample_shape)
        singular = ~self.support.check(sample)
        if self._batch_shape:
            singular = singular.amax(self._batch_dims)
        if bool(singular.any().item()):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                redraw = self._bartlett_sampling(sample_shape)
                keep = singular.reshape(*(tuple(singular.shape) + (1,) * (sample.dim() - singular.dim())))
                sample = _C._functional.where(keep, redraw, sample)
                singular = ~self.support.check(sample)
                if self._batch_shape:
                    singular = singular.amax(self._batch_dims)
                if not bool(singular.any().item()):
                    break
        return sample

    def _half_log_det_scale(self):
        return self._unbroadcasted_scale_tril.diagonal(0, -2, -1).log().sum(-1)

    def log_prob(self, value):
        from .. import cholesky_solve
        if self._validate_args:
            self._validate_sample(value)
        nu, p = self.df, self._event_shape[-1]
        trace = cholesky_solve(value, self._unbroadcasted_scale_tril).diagonal(0, -2, -1).sum(-1)
        return (-nu * (p * _LOG_2 / 2 + self._half_log_det_scale()) - _mvlgamma(nu / 2, p)
                + (nu - p - 1) / 2 * _linalg().slogdet(value).logabsdet - trace / 2)

    def entropy(self):
        nu, p = self.df, self._event_shape[-1]
        return ((p + 1) * (p * _LOG_2 / 2 + self._half_log_det_scale()) + _mvlgamma(nu / 2, p)
                - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

    @property
    def _natural_params(self):
        return -self.precision_matrix / 2, (self.df - self._event_shape[-1] - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-_linalg().slogdet(-2 * x).logabsdet + _LOG_2 * p)
                + _mvlgamma(y + (p + 1) / 2, p))


class LKJCholesky(Distribution):
    """LKJ(concentration η) over the Cholesky factors of dim x dim correlation matrices: density ∝ det(C)^(η-1)."""
    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError("Expected dim to be an integer greater than or equal to 2. Found dim=%s." % (dim,))
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        marginal_conc = self.concentration + 0.5 * (dim - 2)
        offset = _tensor.arange(dim - 1, dtype=self.concentration.dtype)
        offset = _cat([_tensor.zeros(1, dtype=offset.dtype), offset])
        self._beta = Beta(offset + 0.5, marginal_conc.unsqueeze(-1) - 0.5 * offset)
        super().__init__(self.concentration.shape, (dim, dim), validate_args)

    def sample(self, sample_shape=()):
        """The onion method: row i is sqrt(y_i) times a uniform direction in its first i coordinates,
        y_i ~ Beta, and the diagonal completes each row to unit norm."""
        from .._dtypes import finfo
        y = self._beta.sample(sample_shape).unsqueeze(-1)
        u_normal = _tensor.randn(*self._extended_shape(sample_shape), dtype=y.dtype).tril(-1)
        u_hypersphere = u_normal / u_normal.norm(dim=-1, keepdim=True)
        u_hypersphere[..., 0, :].fill_(0.0)  # the first row has no direction (0 / 0)
        w = y.sqrt() * u_hypersphere
        diag = (1 - (w ** 2).sum(-1)).clamp(min=finfo(w.dtype).tiny).sqrt()
        return w + diag.diag_embed()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(0, -1, -2)[..., 1:]
        order = _tensor.arange(2, self.dim + 1)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        normalize = 0.5 * dm1 * math.log(math.pi) + _mvlgamma(alpha - 0.5, dm1) - alpha.lgamma() * dm1
        return unnormalized - normalize


__all__ = ["Wishart", "LKJCholesky"]
