"""torch.linalg's LU family (lu_factor, lu_factor_ex, lu, lu_solve, torch.lu_unpack) and eig / eigvals, on the
host; split from linalg.py by concept.

LU with partial pivoting is written here because numpy has none (scipy is not a dependency): getrf's
unblocked right-looking elimination, the pivot the first entry of largest magnitude in the column (idamax's
choice, so the permutation is LAPACK's), pivots 1-based int32 as torch returns them, info > 0 at the first
exactly-zero pivot (the factorization continues past it, as getrf's). Each column step is one numpy rank-1
update over the whole batch. eig / eigvals are numpy's geev and return complex tensors (tessel/_complex.py).
The LU family is differentiable: lu_factor through an autograd Function (tessel/_linalg_grad.py, torch's
formulas), lu_unpack and lu_solve composed of differentiable ops (triangles, solve_triangular) when an input
requires grad. eig / eigvals of a real matrix are differentiable (first order: torch's linalg_eig_backward on the
host, for distinct eigenvalues), as torch's; torch.lu is lu_factor_ex without its error check.
"""
import warnings

import numpy as np

from . import _C, return_types
from . import _linalg_checks as _checks
from .linalg import _back, _host, _info, _needs_grad
from ._autocast_policy import float32_under_autocast as _float32_under_autocast

_LU_FACTOR = return_types.linalg_lu_factor
_LU_FACTOR_EX = return_types.linalg_lu_factor_ex
_PLU = return_types.linalg_lu
_LU_UNPACK = return_types.lu_unpack
_EIG = return_types.linalg_eig
_LU_WITH_INFO = return_types._structseq("_lu_with_info", ["LU", "pivots", "info"])


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


def _lu_checks(A, pivot, fn="torch.lu_factor"):
    if A.dim() < 2:
        raise RuntimeError("%s: Expected tensor with 2 or more dimensions. Got size: %s instead" % (fn, list(A.shape)))
    _checks.not_implemented_for(A, "lu_cpu")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """torch.linalg.lu_factor_ex: (LU, pivots, info) with L's unit diagonal implicit below U; info > 0 names the
    first zero pivot (1-based) instead of an error."""
    _lu_checks(A, pivot)
    if _needs_grad(A):
        from ._linalg_grad import LuFactor
        lu, pivots, info = LuFactor.apply(A)
    else:
        lu, pivots, info = _lu_factor_host(A)
    if check_errors and bool(info.any()):
        raise RuntimeError(_checks.lu_factor_message(A.dim(), info.numpy(), "torch.linalg.lu_factor_ex"))
    return _LU_FACTOR_EX(lu, pivots, info)


def lu_factor(A, *, pivot=True):
    """torch.linalg.lu_factor: (LU, pivots); a singular matrix raises as torch's (lu_factor_ex returns its info)."""
    lu, pivots, info = lu_factor_ex(A, pivot=pivot)
    if info.numel() and bool(info.any()):
        raise RuntimeError(_checks.lu_factor_message(A.dim(), info.numpy(), "torch.linalg.lu_factor"))
    return _LU_FACTOR(lu, pivots)


_LU_DEPRECATION = []


def torch_lu(A, pivot=True, get_infos=False, out=None):
    """torch.lu (deprecated in torch): lu_factor_ex's (LU, pivots) as a plain tuple, or the three with get_infos;
    a singular matrix is no error here (torch's check covers LAPACK's argument errors only)."""
    if not _LU_DEPRECATION:  # torch warns once per process
        _LU_DEPRECATION.append(True)
        warnings.warn("torch.lu is deprecated in favor of torch.linalg.lu_factor / torch.linalg.lu_factor_ex and will "
                      "be removed in a future PyTorch release.\nLU, pivots = torch.lu(A, compute_pivots)\nshould be "
                      "replaced with\nLU, pivots = torch.linalg.lu_factor(A, compute_pivots)\nand\nLU, pivots, info = "
                      "torch.lu(A, compute_pivots, get_infos=True)\nshould be replaced with\nLU, pivots, info = "
                      "torch.linalg.lu_factor_ex(A, compute_pivots)", UserWarning, stacklevel=3)
    lu_, pivots, info = lu_factor_ex(A, pivot=pivot)
    result = _LU_WITH_INFO(lu_, pivots, info) if get_infos else (lu_, pivots)
    if out is not None:
        if len(out) != len(result):
            raise TypeError("expected tuple of %d elements but got %d" % (len(result), len(out)))
        for target, value in zip(out, result):
            target.resize_as_(value).copy_(value)
        return out
    return result


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
    _lu_checks(A, pivot, "linalg.lu")
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
    _checks.floating(LU, "torch.linalg.lu_solve")
    _checks.same_dtype(LU, B, "linalg.lu_solve", ("LU", "B"))
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


def _eig_checks(A, fn):
    _checks.square(A, fn)
    if not A.dtype.is_floating_point:
        raise RuntimeError("Unknown Complex ScalarType for %s" % _checks.name(A.dtype))
    a = _host(A, fn)
    if not np.isfinite(a).all():
        raise RuntimeError("torch.linalg.eig: input tensor should not contain infs or NaNs.")
    return a


def _eig_host(a):
    w, v = np.linalg.eig(a)
    kind = np.complex128 if a.dtype == np.float64 else np.complex64
    return w.astype(kind), v.astype(kind)


def _eig_backward(w, v, g_w, g_v):
    """torch's linalg_eig_backward for distinct eigenvalues, A real: Re V⁻ᴴ (diag(ḡ_w) + (Vᴴ ḡ_V - Vᴴ V
    Re diag(Vᴴ ḡ_V)) / Ē) Vᴴ with Ē_ij = conj(w_j) - conj(w_i) off the diagonal."""
    vh = np.conj(np.swapaxes(v, -1, -2))
    if g_v is None:
        return np.linalg.solve(vh, g_w[..., :, None] * vh).real
    vhgv = vh @ g_v
    diagonal = np.diagonal(vhgv, axis1=-2, axis2=-1)
    if not np.allclose(diagonal.imag, 0.0, rtol=1e-2, atol=1e-2):
        raise RuntimeError("linalg_eig_backward: The eigenvectors in the complex case are specified up to "
                           "multiplication by e^{i phi}. The specified loss function depends on this quantity, so it "
                           "is ill-defined.")
    vhgv = vhgv - vh @ (v * diagonal.real[..., None, :])
    wc = np.conj(w)
    gaps = wc[..., None, :] - wc[..., :, None]
    n = w.shape[-1]
    gaps[..., range(n), range(n)] = 1.0
    inner = vhgv / gaps
    if g_w is not None:
        inner[..., range(n), range(n)] = g_w
    return np.linalg.solve(vh, inner @ vh).real


def _eig_function():
    from .autograd import Function

    class Eig(Function):
        """eig / eigvals of a real matrix with torch's gradient, as the real and imaginary parts of each output (the
        ComplexTensors are stacked from them, so their gradients arrive here as pairs)."""
        @staticmethod
        def forward(ctx, a, vectors):
            ctx.save_for_backward(a)
            w, v = _eig_host(_host(a, "eig"))
            ctx.w, ctx.v, ctx.vectors = w.astype(np.complex128), v.astype(np.complex128), vectors
            parts = [w.real, w.imag] + ([v.real, v.imag] if vectors else [])
            return tuple(_back(np.ascontiguousarray(p), a) for p in parts)

        @staticmethod
        def backward(ctx, *grads):
            def joined(re, im, like):
                if re is None and im is None:
                    return None
                re = np.zeros(like.shape) if re is None else re.detach().to(_C.dtype.float64).numpy()
                im = np.zeros(like.shape) if im is None else im.detach().to(_C.dtype.float64).numpy()
                return re + 1j * im
            g_w = joined(grads[0], grads[1], ctx.w)
            g_v = joined(grads[2], grads[3], ctx.v) if ctx.vectors else None
            a, = ctx.saved_tensors
            if g_w is None and g_v is None:
                return None, None
            return _back(_eig_backward(ctx.w, ctx.v, g_w, g_v), a), None

    return Eig


_EIG_FUNCTION = []


def _eig_differentiable(A, vectors):
    from ._complex import _from_parts
    if not _EIG_FUNCTION:
        _EIG_FUNCTION.append(_eig_function())
    parts = _EIG_FUNCTION[0].apply(A, vectors)
    w = _from_parts(parts[0], parts[1])
    return (w, _from_parts(parts[2], parts[3])) if vectors else w


@_float32_under_autocast
def eigvals(A):
    """torch.linalg.eigvals: the eigenvalues of a square matrix, complex (numpy's geev); differentiable."""
    from ._complex import from_numpy
    a = _eig_checks(A, "linalg.eigvals")
    if _needs_grad(A):
        return _eig_differentiable(A, False)
    return from_numpy(_eig_host(a)[0])


@_float32_under_autocast
def eig(A):
    """torch.linalg.eig: (eigenvalues, eigenvectors), complex, the eigenvectors of unit norm (numpy's geev);
    differentiable."""
    from ._complex import from_numpy
    a = _eig_checks(A, "linalg.eig")
    if _needs_grad(A):
        return _EIG(*_eig_differentiable(A, True))
    w, v = _eig_host(a)
    return _EIG(from_numpy(w), from_numpy(v))
