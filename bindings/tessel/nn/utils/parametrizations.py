"""tessel.nn.utils.parametrizations: torch.nn.utils.parametrizations.weight_norm and spectral_norm, on
tessel.nn.utils.parametrize (torch's formulas, state-dict keys and buffers):

    weight_norm(m)     m.weight = g · v / ‖v‖ (norm over every dim but `dim`), originals
                       parametrizations.weight.original0 (g) and .original1 (v)
    spectral_norm(m)   m.weight = W / σ(W), σ by power iteration on the buffers
                       parametrizations.weight.0._u / ._v, one step per training-mode forward

The helpers below also serve the hook-based forms in tessel.nn.utils (weight_norm, spectral_norm).
"""
from ... import _C
from .. import functional as F
from ..modules import Module
from .parametrize import register_parametrization


def _norm_except_dim(v, dim):
    """torch.norm_except_dim(v, 2, dim): the 2-norm over every dim but `dim`, shaped to broadcast against v
    (dim -1: the norm of the whole tensor)."""
    if dim == -1:
        return (v * v).sum().sqrt()
    moved = v.transpose(0, dim) if dim != 0 else v
    norms = (moved.reshape(moved.shape[0], -1) ** 2).sum(1).sqrt()
    shape = [1] * v.dim()
    shape[dim] = v.shape[dim]
    return norms.reshape(*shape)


def _weight_norm(v, g, dim):
    """torch._weight_norm(v, g, dim) = v · (g / norm_except_dim(v, 2, dim))."""
    return v * (g / _norm_except_dim(v, dim))


def _as_matrix(weight, dim):
    """The weight as spectral norm sees it: dim `dim` first, the others flattened ([out, rest])."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.dim()) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def _random_unit(n, dtype, eps):
    return F.normalize(_C._empty([n], dtype).normal_(0, 1), dim=0, eps=eps)


def _divided_by_sigma(weight, matrix, u, v):
    """weight / σ with σ = uᵀ·matrix·v; u and v enter as constants (clones: the power step writes them)."""
    return weight / (u.clone() * (matrix @ v.clone())).sum()


def _transposed_convs():
    """The transposed convolutions, whose weight's output dim is 1 (spectral_norm's default dim)."""
    from .. import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
    return ConvTranspose1d, ConvTranspose2d, ConvTranspose3d


class _WeightNorm(Module):
    _weight_norm_compat = True  # loads the hook-based weight_norm's keys (parametrize.py)

    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, self.dim), weight


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.dim()
        if dim >= ndim or dim < -ndim:
            raise IndexError("Dimension out of range (expected to be in range of [-%d, %d] but got %d)"
                             % (ndim, ndim - 1, dim))
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got n_power_iterations=%d"
                             % n_power_iterations)
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            h, w = _as_matrix(weight.detach(), self.dim).shape
            self.register_buffer("_u", _random_unit(h, weight.dtype, eps))
            self.register_buffer("_v", _random_unit(w, weight.dtype, eps))
            self._power_method(_as_matrix(weight, self.dim), 15)

    def _power_method(self, weight_mat, n_power_iterations):
        with _C._GradMode(False):
            weight_mat = weight_mat.detach()
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(weight_mat @ self._v, dim=0, eps=self.eps))
                self._v.copy_(F.normalize(weight_mat.transpose(0, 1) @ self._u, dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.dim() == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = _as_matrix(weight, self.dim)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        return _divided_by_sigma(weight, weight_mat, self._u, self._v)

    def right_inverse(self, value):
        return value


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.parametrizations.weight_norm: ``module.<name>`` = g · v / ‖v‖ with g and v the
    parametrization's originals (dim None: one norm for the whole tensor)."""
    if dim is not None and dim < -1:
        dim += getattr(module, name).dim()
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """torch.nn.utils.parametrizations.spectral_norm: ``module.<name>`` = W / σ(W), σ estimated by
    ``n_power_iterations`` power-iteration steps per training-mode forward (15 at registration)."""
    weight = module._lookup(name)
    if not isinstance(weight, _C.Tensor):
        raise ValueError("Module '%s' has no parameter or buffer with name '%s'" % (module, name))
    if dim is None:
        dim = 1 if isinstance(module, _transposed_convs()) else 0
    return register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))


from ._orthogonal import orthogonal  # noqa: E402,F401 (torch.nn.utils.parametrizations.orthogonal)
