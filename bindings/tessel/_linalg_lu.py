"""torch.linalg's LU family (lu_factor, lu_factor_ex, lu, lu_solve, torch.lu_unpack) and eig / eigvals, on the
host; split from linalg.py by concept.

LU with partial pivoting is written here because numpy has none (scipy is not a dependency): getrf's
unblocked right-looking elimination, the pivot the first entry of largest magnitude in the column (idamax's
choice, so the permutation is LAPACK's), pivots 1-based int32 as torch returns them, info > 0 at the first
exactly-zero pivot (the factorization continues past it, as getrf's). Each column step is one numpy rank-1
update over the whole batch. eig / eigvals are numpy's geev and return complex tensors (tessel/_complex.py).
The LU family is differentiable: lu_factor through an autograd Function (tessel/_linalg_grad.py, torch's
formulas), lu_unpack and lu_solve composed of differentiable ops (triangles, solve_triangular) when an input
requires grad. eig / eigvals have no gradient here: a tensor that requires grad raises NotImplementedError.
"""

import numpy as np

from . import _C, return_types
from .linalg import _back, _host, _info, _needs_grad
from ._autocast_policy import float32_under_autocast as _float32_under_autocast

_LU_FACTOR = return_types.linalg_lu_factor
_LU_FACTOR_EX = return_types.linalg_lu_factor_ex
_PLU = return_types.linalg_lu
_LU_UNPACK = return_types.lu_unpack
_EIG = return_types.linalg_eig


def _no_grad(name, *xs):
    if _needs_grad(*xs):
        raise NotImplementedError("torch.linalg.%s of a tensor that requires grad: tessel computes it on the host "
                                  "without a gradient (detach the input)" % name)


def _getrf(a):
    """(LU, 0-based pivot rows, info) of a batch [..., m, n]: getrf's partial pivoting, unblocked."""
    lu = np.array(a, dtype=np.result_type(a.dtype, np.float32), copy=True)
    m, n = lu.shape[-2:]
    k = min(m, n)
    flat = lu.reshape((-1, m, n))
    batch = np.arange(flat.shape[0])
    pivots = np.zeros((flat.shape[0], k), dtype=np.int64)
    info = np.zeros(flat.shape[0], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(k):
            p = j + np.argmax(np.abs(flat[:, j:, j]), axis=1)  # the first largest (idamax)
            pivots[:, j] = p
            rows_j, rows_p = flat[batch, j].copy(), flat[batch, p].copy()
            flat[batch, j], flat[batch, p] = rows_p, rows_j
            pivot = flat[:, j, j]
            zero = pivot == 0
            info[(info == 0) & zero] = j + 1
            scale = np.where(zero, 1.0, pivot)  # a zero pivot leaves its column unscaled (getrf's)
            flat[:, j + 1:, j] /= scale[:, None]
            flat[:, j + 1:, j + 1:] -= flat[:, j + 1:, j, None] * flat[:, j, None, j + 1:]
    shape = lu.shape[:-2]
    return flat.reshape(lu.shape), pivots.reshape(shape + (k,)), info.reshape(shape)


def _lu_factor_host(A):
    """(LU, 1-based int32 pivots, info) as tensors, computed on the host."""
    lu, pivots, info = _getrf(_host(A, "lu_factor"))
    return (_back(lu, A), _C._from_numpy((pivots + 1).astype(np.int32)),
            _info(tuple(A.shape[:-2]), info.reshape(-1).tolist()))


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """torch.linalg.lu_factor_ex: (LU, pivots, info) with L's unit diagonal implicit below U; info > 0 names the
    first zero pivot (1-based) instead of an error."""
    if not pivot:
        raise NotImplementedError("linalg.lu_factor: LU without pivoting is not implemented on the CPU (as torch's)")
    if _needs_grad(A):
        from ._linalg_grad import LuFactor
        lu, pivots, info = LuFactor.apply(A)
    else:
        lu, pivots, info = _lu_factor_host(A)
    if check_errors and bool(info.any()):
        bad = int(info.max().item())
        raise RuntimeError("torch.linalg.lu_factor_ex: U[%d,%d] is zero and using it on lu_solve would result in a "
                           "division by zero." % (bad, bad))  # (torch's wording)
    return _LU_FACTOR_EX(lu, pivots, info)


def lu_factor(A, *, pivot=True):
    """torch.linalg.lu_factor: (LU, pivots); a singular matrix raises as torch's (lu_factor_ex returns its info)."""
    lu, pivots, info = lu_factor_ex(A, pivot=pivot)
    bad = int(info.max().item()) if info.numel() else 0
    if bad:
        raise RuntimeError("torch.linalg.lu_factor: U[%d,%d] is zero and using it on lu_solve would result in a "
                           "division by zero. If you still want to perform the factorization, consider calling "
                           "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)" % (bad, bad))
    return _LU_FACTOR(lu, pivots)


def _permutation(pivots, m):
    """The row order [..., m] that the 0-based pivot swaps, applied in turn, produce."""
    order = np.broadcast_to(np.arange(m), pivots.shape[:-1] + (m,)).copy()
    flat, piv = order.reshape(-1, m), pivots.reshape(-1, pivots.shape[-1])
    rows = np.arange(flat.shape[0])
    for j in range(piv.shape[1]):
        a, b = flat[rows, j].copy(), flat[rows, piv[:, j]].copy()
        flat[rows, j], flat[rows, piv[:, j]] = b, a
    return flat.reshape(order.shape)


def _unpack(lu, pivots0):
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=lu.dtype)
    upper = np.triu(lu[..., :k, :])
    order = _permutation(pivots0, m)  # row i of P^T A is row order[i] of A
    p = np.zeros(order.shape + (m,), dtype=lu.dtype)
    np.put_along_axis(p, order[..., None], 1.0, axis=-1)  # P^T[i, order[i]] = 1
    return np.swapaxes(p, -1, -2), lower, upper


def _triangles(LU_data):
    """(L, U) of packed LU data as differentiable ops: L's strict lower triangle plus the unit diagonal [m, k],
    U's upper triangle [k, n]."""
    from ._tensor import eye
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    return LU_data[..., :, :k].tril(-1) + eye(m, k, dtype=LU_data.dtype), LU_data[..., :k, :].triu()


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """torch.lu_unpack: (P, L, U) from lu_factor's result, A = P L U (L and U differentiable in LU_data)."""
    lu = _host(LU_data, "lu_unpack")
    p, lower, upper = _unpack(lu, LU_pivots.detach().numpy().astype(np.int64) - 1)
    if _needs_grad(LU_data) and unpack_data:
        lower, upper = _triangles(LU_data)
    else:
        lower, upper = _back(lower, LU_data), _back(upper, LU_data)
    empty = _C._from_numpy(np.zeros((0,), dtype=lu.dtype))
    return _LU_UNPACK(_back(p, LU_data) if unpack_pivots else empty, lower if unpack_data else empty,
                      upper if unpack_data else empty)


def lu(A, *, pivot=True):
    """torch.linalg.lu: (P, L, U) with A = P L U, L unit lower triangular [m, k], U upper [k, n]."""
    lu_, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return _PLU(*lu_unpack(lu_, pivots))


def _triangular(a, b, lower, unit):
    """X with T X = B for the triangle of a (row substitution as trsm: a zero diagonal gives inf / NaN)."""
    n = a.shape[-1]
    x = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.result_type(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in (range(n) if lower else range(n - 1, -1, -1)):
            done = slice(0, i) if lower else slice(i + 1, n)
            acc = b[..., i, :] - np.einsum("...j,...jk->...k", a[..., i, done], x[..., done, :])
            x[..., i, :] = acc if unit else acc / a[..., i, i, None]
    return x


@_float32_under_autocast
def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """torch.linalg.lu_solve: X with A X = B (A^H X = B with adjoint; X A = B when left=False) from A's
    lu_factor."""
    if _needs_grad(LU, B):
        return _lu_solve_differentiable(LU, pivots, B, left, adjoint)
    lu_, b = _host(LU, "lu_solve"), _host(B, "lu_solve")
    piv = pivots.detach().numpy().astype(np.int64) - 1
    order = _permutation(piv, lu_.shape[-1])
    if not left:  # X A = B  <=>  A^H X^H = B^H
        return _back(np.swapaxes(_lu_solve(lu_, order, np.swapaxes(b, -1, -2).conj(), not adjoint), -1, -2).conj(),
                     LU)
    return _back(_lu_solve(lu_, order, b, adjoint), LU)


def _lu_solve_differentiable(LU, pivots, B, left, adjoint):
    """lu_solve as permutation and two solve_triangular calls, each differentiable in LU's triangles and B."""
    from .linalg import solve_triangular
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _lu_solve_differentiable(LU, pivots, B.transpose(-2, -1), True, not adjoint).transpose(-2, -1)
    p = lu_unpack(LU.detach(), pivots, unpack_data=False).P.to(B.dtype)
    lower, upper = _triangles(LU)
    if adjoint:  # A^T = U^T L^T P^T
        y = solve_triangular(upper.transpose(-2, -1), B, upper=False)
        return p @ solve_triangular(lower.transpose(-2, -1), y, upper=True, unitriangular=True)
    y = solve_triangular(lower, p.transpose(-2, -1) @ B, upper=False, unitriangular=True)
    return solve_triangular(upper, y, upper=True)


def _lu_solve(lu_, order, b, adjoint):
    if adjoint:  # A^H = U^H L^H P^T: solve U^H, then L^H, then undo the row order
        h = np.swapaxes(lu_, -1, -2).conj()
        y = _triangular(h, b, lower=True, unit=False)
        z = _triangular(h, y, lower=False, unit=True)
        x = np.empty_like(z)
        np.put_along_axis(x, np.broadcast_to(order[..., None], z.shape), z, axis=-2)
        return x
    pb = np.take_along_axis(b, np.broadcast_to(order[..., None], b.shape[:-2] + order.shape[-1:] + b.shape[-1:]),
                            axis=-2)
    y = _triangular(lu_, pb, lower=True, unit=True)
    return _triangular(lu_, y, lower=False, unit=False)


@_float32_under_autocast
def eigvals(A):
    """torch.linalg.eigvals: the eigenvalues of a square matrix, complex (numpy's geev)."""
    from ._complex import from_numpy
    _no_grad("eigvals", A)
    a = _host(A, "eigvals")
    return from_numpy(np.linalg.eigvals(a).astype(np.complex128 if a.dtype == np.float64 else np.complex64))


@_float32_under_autocast
def eig(A):
    """torch.linalg.eig: (eigenvalues, eigenvectors), complex, the eigenvectors of unit norm (numpy's geev)."""
    from ._complex import from_numpy
    _no_grad("eig", A)
    a = _host(A, "eig")
    w, v = np.linalg.eig(a)
    kind = np.complex128 if a.dtype == np.float64 else np.complex64
    return _EIG(from_numpy(w.astype(kind)), from_numpy(v.astype(kind)))


