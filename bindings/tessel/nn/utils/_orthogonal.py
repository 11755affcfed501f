"""torch.nn.utils.parametrizations.orthogonal and the linear algebra under it (torch.geqrf,
torch.linalg.householder_product), with torch's semantics: the weight (a matrix or a batch, tall or wide, wide ones
handled transposed) becomes an orthogonal one computed from an unconstrained original by the matrix exponential
or the Cayley map of a skew-symmetric matrix (square weights' default) or a product of Householder reflections
(other shapes' default). With use_trivialization (the default) the module keeps `base`, the orthogonal matrix the
weight had at registration (its QR's Q, signs fixed), and the weight is base times the map's value, which is
the identity at the original registration sets; optimizers then move the original from there.

geqrf runs numpy's LAPACK QR in its raw form (no gradient, as torch's); householder_product is composed of
tessel's differentiable ops (one rank-1 update per reflection), so gradients reach the original.
"""
import numpy as np

from ... import _C

_MAPS = ("matrix_exp", "cayley", "householder")


def geqrf(input):
    """torch.geqrf: (a, tau), LAPACK's compact QR: R on and above a's diagonal, the Householder vectors below
    it (their leading 1 implicit), tau their scales. Not differentiable, as torch's."""
    if input.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    a = input.detach().numpy()
    flat = a.reshape(-1, *a.shape[-2:])
    k = min(a.shape[-2:])
    outs, taus = np.empty_like(flat), np.empty((flat.shape[0], k), dtype=a.dtype)
    for i, m in enumerate(flat):
        h, tau = np.linalg.qr(m, mode="raw")
        outs[i], taus[i] = h.T, tau
    from ..._tensor import tensor
    return (tensor(outs.reshape(a.shape), dtype=input.dtype),
            tensor(taus.reshape(*a.shape[:-2], k), dtype=input.dtype))


def householder_product(A, tau):
    """torch.linalg.householder_product: the first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_iᵀ with v_i
    column i of A below the diagonal and 1 on it (A [..., m, n], tau [..., k], k <= n <= m)."""
    m, n = A.shape[-2], A.shape[-1]
    if m < n:
        raise RuntimeError("torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    k = tau.shape[-1]
    if k > n:
        raise RuntimeError("torch.linalg.householder_product: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    eye = _eye(m, n, A.dtype)
    V = A.tril(-1) + eye
    Q = eye.expand(*A.shape[:-2], m, n) if A.dim() > 2 else eye
    for i in reversed(range(k)):
        v = V[..., :, i:i + 1]
        Q = Q - tau[..., i:i + 1].unsqueeze(-1) * (v @ (v.transpose(-2, -1) @ Q))
    return Q


def ormqr(input, input2, input3, left=True, transpose=False, *, out=None):
    """torch.ormqr: Q·C (C·Q with left=False; Qᵀ with transpose) for the Q of geqrf's (input, tau = input2) and
    C = input3, applying the reflectors H_i = I - tau_i v_i v_iᵀ in turn instead of forming Q (differentiable)."""
    m = input.shape[-2]
    if (input3.shape[-2] if left else input3.shape[-1]) != m:
        raise RuntimeError("torch.ormqr: other.shape[%d] must be equal to input.shape[-2]" % (-2 if left else -1))
    V = input.tril(-1) + _eye(m, input.shape[-1], input.dtype)
    c = input3
    k = input2.shape[-1]
    for i in (range(k) if transpose == left else reversed(range(k))):  # Q = H_1 ... H_k
        v, tau = V[..., :, i:i + 1], input2[..., i:i + 1].unsqueeze(-1)
        c = c - tau * (v @ (v.transpose(-2, -1) @ c)) if left else c - tau * ((c @ v) @ v.transpose(-2, -1))
    return c


def _eye(m, n, dtype):
    from ..._tensor import tensor
    return tensor(np.eye(m, n), dtype=dtype)


def _make_orthogonal(A):
    """Q of A = QR (A tall) with R's diagonal made non-negative: Q's columns signed by it."""
    X, tau = geqrf(A)
    Q = householder_product(X, tau)
    signs = X.diagonal(0, -2, -1).sign()
    signs = _C._functional.where(signs == 0, _C._full([], 1.0, signs.dtype), signs)
    return Q * signs.unsqueeze(-2)


def _is_orthogonal(Q):
    n, k = Q.shape[-2], Q.shape[-1]
    eps = 10.0 * n * float(np.finfo(np.float64 if Q.dtype == _C.dtype.float64 else np.float32).eps)
    gram = (Q.transpose(-2, -1) @ Q).numpy()
    return bool(np.allclose(gram, np.eye(k), atol=eps, rtol=0))


def _orthogonal_module_class():
    from ..modules import Module

    class _Orthogonal(Module):
        """The parametrization orthogonal() registers (torch's _Orthogonal): forward maps the original to an
        orthogonal matrix; right_inverse sets the original (and base) from a given orthogonal value."""

        def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
            super().__init__()
            self.shape, self.orthogonal_map = tuple(weight.shape), orthogonal_map
            self._trivialized = use_trivialization
            if use_trivialization:
                self.register_buffer("base", None)

        def forward(self, X):
            n, k = X.shape[-2], X.shape[-1]
            transposed = n < k
            if transposed:
                X, n, k = X.transpose(-2, -1), k, n
            if self.orthogonal_map in ("matrix_exp", "cayley"):
                X = X.tril()  # the n·k - k(k-1)/2 free entries of a skew-symmetric n x n matrix
                if n != k:
                    X = _C._functional.cat([X, _C._full(list(X.shape[:-1]) + [n - k], 0.0, X.dtype)], -1)
                A = X - X.transpose(-2, -1)
                if self.orthogonal_map == "matrix_exp":
                    from ... import linalg
                    Q = linalg.matrix_exp(A)
                else:  # Cayley: (I - A/2)⁻¹ (I + A/2)
                    from ... import linalg
                    eye = _eye(n, n, A.dtype)
                    Q = linalg.solve(eye - A * 0.5, eye + A * 0.5)
                if n != k:
                    Q = Q[..., :k]
            else:
                A = X.tril(-1)
                tau = 2.0 / (1.0 + (A * A).sum(-2))
                Q = householder_product(A, tau)
                # the original's diagonal (±1) signs the columns; not a direction the optimizer moves
                Q = Q * X.detach().diagonal(0, -2, -1).sign().unsqueeze(-2)
            if getattr(self, "base", None) is not None:
                Q = self.base @ Q
            return Q.transpose(-2, -1) if transposed else Q

        def right_inverse(self, Q):
            if tuple(Q.shape) != self.shape:
                raise ValueError("Expected a matrix or batch of matrices of shape %s. Got a tensor of shape %s."
                                 % (self.shape, tuple(Q.shape)))
            with _C._GradMode(False):
                start = Q
                n, k = Q.shape[-2], Q.shape[-1]
                if n < k:
                    Q, n, k = Q.transpose(-2, -1), k, n
                if not self._trivialized:
                    if self.orthogonal_map != "householder":
                        raise NotImplementedError("It is not possible to assign to the matrix exponential or the "
                                                  "Cayley parametrizations when use_trivialization=False.")
                    A, tau = geqrf(Q)
                    diag = A.diagonal(0, -2, -1)
                    signs = _C._functional.where(tau == 0, -diag.sign(), diag.sign())
                    A = _with_diagonal(A, signs)
                    return A.transpose(-2, -1) if start.shape[-2] < start.shape[-1] else A
                if n == k:
                    Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
                else:  # completed to an n x n orthogonal matrix by random columns (torch's randn)
                    from ..._tensor import randn
                    Q = _make_orthogonal(_C._functional.cat([Q, randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype)], -1))
                self.register_buffer("base", Q)
                minus_eye = _C._full(list(start.shape), 0.0, start.dtype)
                diag = minus_eye.diagonal(0, -2, -1)
                diag.fill_(-1.0)
                return minus_eye
    return _Orthogonal


def _with_diagonal(A, values):
    out = A.clone()
    out.diagonal(0, -2, -1).copy_(values)
    return out


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """torch.nn.utils.parametrizations.orthogonal: module.<name> becomes orthogonal (or semi-orthogonal)."""
    from .parametrize import register_parametrization
    weight = getattr(module, name, None)
    if not isinstance(weight, _C.Tensor):
        raise ValueError("Module '%s' has no parameter or buffer with name '%s'" % (module, name))
    if weight.dim() < 2:
        raise ValueError("Expected a matrix or batch of matrices. Got a tensor of %d dimensions." % weight.dim())
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _MAPS:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: %s'
                         % orthogonal_map)
    orth = _orthogonal_module_class()(weight, orthogonal_map, use_trivialization=use_trivialization)
    register_parametrization(module, name, orth, unsafe=True)
    return module
