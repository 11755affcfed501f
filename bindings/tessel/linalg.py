"""torch.linalg: the norms, composed of tessel's ops (differentiable, on DTensors too where the ops are),
and the factorizations and solves through numpy's LAPACK on the host. inv, det, slogdet, solve, cholesky,
eigh, eigvalsh and svdvals are differentiable (tessel/_linalg_grad.py: autograd Functions with the standard
formulas, second derivatives included but for svdvals), as are svd, qr, pinv, lstsq's solution, the LU family
and eig / eigvals (tessel/_linalg_lu.py). matrix_exp (scaling and squaring, differentiable), diagonal, vander,
the *_ex forms, tensorinv and tensorsolve complete torch's list. Inputs are checked as torch checks them and
LAPACK's failures raise torch's messages (tessel/_linalg_checks.py).

    torch.linalg.vector_norm(g, 2)              # the gradient-clipping norm
    torch.linalg.matrix_norm(w, "fro")
    u, s, vh = torch.linalg.svd(w.detach(), full_matrices=False)
"""
import builtins
import math

import numpy as np

from . import _C, _dtypes, return_types
from . import _linalg_checks as _checks
from ._tensor import Tensor
from ._autocast_policy import float32_under_autocast as _float32_under_autocast
from ._autocast_policy import lower_precision_under_autocast as _lower_under_autocast


_QR = return_types.linalg_qr
class LinAlgError(RuntimeError, np.linalg.LinAlgError):
    """torch.linalg.LinAlgError, which is torch._C._LinAlgError (the name it prints): a RuntimeError, as torch's (the
    "try cholesky, except RuntimeError, add jitter" pattern), and numpy's LinAlgError, which LAPACK's failures here
    start as (every public function below turns numpy's into this one, with torch's message)."""


LinAlgError.__name__ = LinAlgError.__qualname__ = "_LinAlgError"
LinAlgError.__module__ = "tessel._C"
_C._LinAlgError = LinAlgError


def _dims(dim, ndim):
    return _checks.dim_list(dim, ndim)


def _real_input(x, dtype, fn):
    """x for a norm: |x| of a complex tensor (its norms are those of the moduli, in the real dtype), torch's dtype
    checks, then x in dtype (the dtype= argument converts before computing, as torch's)."""
    if dtype is None and isinstance(x, Tensor) and x.dtype.is_floating_point:  # the common case, kept cheap
        return x
    from ._complex import ComplexTensor
    if isinstance(x, ComplexTensor):
        x = x.abs()
        dtype = dtype.to_real() if hasattr(dtype, "to_real") else dtype  # complex128 computes in float64
    _checks.floating(x, fn)
    _checks.not_narrowing(x, dtype, fn)
    return x if dtype is None or dtype == x.dtype else x.to(dtype)


def _empty_extremum(x, ord, dim, dims):
    """torch refuses an inf / -inf norm over an empty dimension (max and min have no identity)."""
    if ord in (math.inf, -math.inf) and x.numel() == 0:
        sign = "" if ord > 0 else "-"
        if dim is None:
            raise RuntimeError("linalg.vector_norm cannot compute the %sinf norm on an empty tensor because the "
                               "operation does not have an identity" % sign)
        for d in dims:
            if x.shape[d] == 0:
                raise RuntimeError("linalg.vector_norm cannot compute the %sinf norm on the dimension %dbecause this "
                                   "dimension is empty and the operation does not have an identity" % (sign, d))


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 (torch's argument name)
    """(Σ|x|^ord)^(1/ord) over dim (all dimensions by default); ord inf / -inf: max / min |x|; 0: the
    count of nonzero entries. A complex x: the norm of its moduli."""
    if isinstance(ord, str):
        raise TypeError("linalg_vector_norm(): argument 'ord' (position 2) must be Number, not str")
    x = _real_input(x, dtype, "linalg.vector_norm")
    if x.dim() == 0:  # a 0-d tensor is its own vector, dim 0 or -1 naming it (dim % 0 raised ZeroDivisionError)
        for d in () if dim is None else (dim if isinstance(dim, (tuple, list)) else (dim,)):
            _checks.dim_index(d, 0)
        return vector_norm(x.reshape(1), ord, 0)
    dims = _dims(dim, x.dim())
    _empty_extremum(x, ord, dim, dims)
    if x.dtype in _dtypes.REDUCED and ord not in (math.inf, -math.inf):  # torch's kernel accumulates in float32:
        # float16 [300, 400]'s squares overflowed to inf where torch's 2-norm is 500; one rounding back
        return vector_norm(x.float(), ord, dims, keepdim).to(x.dtype)
    a = x.abs()
    if ord == math.inf:
        return a.amax(dim=dims, keepdim=keepdim)
    if ord == -math.inf:
        return -(-a).amax(dim=dims, keepdim=keepdim)  # (amin: the max of the negation)
    if ord == 0:  # a count: torch's result still requires grad (a zero gradient)
        from ._tensor import with_zero_gradient
        return with_zero_gradient((a != 0).to(x.dtype).sum(dims, keepdim=keepdim), x.sum(dims, keepdim=keepdim))
    if ord == 2:
        from ._compat import _sqrt_zero_grad
        return _sqrt_zero_grad((x * x).sum(dims, keepdim=keepdim))  # a zero vector's gradient is 0, as torch's
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    if not (_C.is_grad_enabled() and x.requires_grad):
        return (a ** float(ord)).sum(dims, keepdim=keepdim) ** (1.0 / ord)
    return _PNorm.apply(x, float(ord), dims, keepdim)


class _PNormFunction:
    """(Σ|x|^p)^(1/p) with torch's linalg_vector_norm_backward: x·|x|^(p-2)·g / norm^(p-1), 0 where x is 0 for
    p < 1 and where the norm is 0 otherwise (the formula's 0 · inf was NaN there: a zero vector's p = 3 norm)."""
    _fn = None

    @classmethod
    def apply(cls, x, p, dims, keepdim):
        if cls._fn is None:
            from .autograd import Function

            class PNorm(Function):
                @staticmethod
                def forward(ctx, x, p, dims, keepdim):
                    out = (x.abs() ** p).sum(dims, keepdim=True) ** (1.0 / p)
                    ctx.save_for_backward(x, out)
                    ctx.p, ctx.dims, ctx.keepdim = p, dims, keepdim
                    return out if keepdim else out.squeeze(tuple(dims))

                @staticmethod
                def backward(ctx, g):
                    x, out = ctx.saved_tensors
                    p = ctx.p
                    if _C.is_grad_enabled():  # a create_graph backward: the norm recomputed from x with its
                        # graph (the saved one is a constant there: the second derivative lacked d norm / dx)
                        out = (x.abs() ** p).sum(ctx.dims, keepdim=True) ** (1.0 / p)
                    if not ctx.keepdim:
                        for d in sorted(ctx.dims):
                            g = g.unsqueeze(d)
                    grad = x.sign() * x.abs() ** (p - 1.0) * g / out ** (p - 1.0)
                    zero = _C._full([], 0.0, grad.dtype)
                    return _C._functional.where(x == 0 if p < 1 else out == 0, zero, grad), None, None, None
            cls._fn = PNorm
        return cls._fn.apply(x, p, dims, keepdim)


_PNorm = _PNormFunction


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: A002
    """Frobenius, 1 / -1 (max / min column sum of |A|), inf / -inf (row sums), and 2 / -2 / 'nuc' (through the
    differentiable svdvals)."""
    from ._complex import ComplexTensor
    if isinstance(A, ComplexTensor) and ord in (2, -2, "nuc"):
        raise NotImplementedError("linalg.matrix_norm: ord=%s of a complex matrix (its singular values) is not "
                                  "supported by tessel's complex tensors (tessel/_complex.py)" % (ord,))
    A = _real_input(A, dtype, "linalg.matrix_norm")
    _checks.at_least_2d(A, "linalg.matrix_norm")
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise RuntimeError("linalg.matrix_norm: dim must be a 2-tuple. Got %s"
                           % " ".join(str(d) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))))
    r, c = (_checks.dim_index(d, A.dim()) for d in dim)
    if r == c:
        raise RuntimeError("linalg.matrix_norm: dims must be different. Got (%d, %d)" % (r, c))
    if ord == "fro":
        return vector_norm(A, 2, (r, c), keepdim)
    if ord in (1, -1, math.inf, -math.inf):
        summed, over = (r, c) if ord in (1, -1) else (c, r)
        sums = A.abs().sum(summed, keepdim=True)
        out = sums.amax(dim=over, keepdim=True) if ord > 0 else -(-sums).amax(dim=over, keepdim=True)
        return out if keepdim else out.squeeze(builtins.max(r, c)).squeeze(builtins.min(r, c))
    if ord in (2, -2, "nuc"):
        s = svdvals(A.movedim((r, c), (-2, -1)))
        out = s.amax(-1) if ord == 2 else -(-s).amax(-1) if ord == -2 else s.sum(-1)
        return out.unsqueeze(builtins.min(r, c)).unsqueeze(builtins.max(r, c)) if keepdim else out
    raise RuntimeError("linalg.matrix_norm: Order %s not supported." % (ord,))


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: ord None is the 2-norm of the flattened tensor (or of dim); otherwise a vector
    norm for one dimension (or a 1-D input) and a matrix norm for two (or a 2-D input); a string ord is always
    a matrix norm (of dims (0, 1) without dim, as torch's: a 1-D input's error is matrix_norm's)."""
    dims = None if dim is None else list(dim) if isinstance(dim, (tuple, list)) else [dim]
    if dims is not None and len(dims) not in (1, 2):
        raise RuntimeError("linalg.norm: If dim is specified, it must be of length 1 or 2. Got %s" % dims)
    if dims is None and ord is not None and A.dim() not in (1, 2):
        raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got %dD."
                           % A.dim())
    if isinstance(ord, str):
        return matrix_norm(A, ord, (0, 1) if dims is None else dims, keepdim, dtype=dtype)
    if ord is not None and (len(dims) == 2 if dims is not None else A.dim() == 2):
        return matrix_norm(A, ord, (0, 1) if dims is None else dims, keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# ---- host-side factorizations (no gradient) ---------------------------------------------------------------

def _needs_grad(*xs):
    return _C.is_grad_enabled() and builtins.any(isinstance(x, Tensor) and x.requires_grad for x in xs)


def _host(x, name):
    """x as a numpy array for LAPACK (the differentiable ops wrap this in tessel/_linalg_grad.py's Functions)."""
    if x.is_distributed:
        raise NotImplementedError("torch.linalg.%s of a DTensor: call full_tensor() first" % name)
    return (x.float() if x.dtype in (_dtypes.bfloat16, _dtypes.float16) else x).detach().numpy()


def _back(a, like):
    out = _C._from_numpy(np.asarray(a))  # any layout; keeps a 0-d result 0-d (np.ascontiguousarray made det's 1-d)
    return out.to(like.dtype) if out.dtype != like.dtype and like.dtype.is_floating_point else out


_SVD = return_types.linalg_svd


def _svd_host(A, full_matrices):
    u, s, vh = np.linalg.svd(_host(A, "svd"), full_matrices=full_matrices)
    return _back(u, A), _back(s, A), _back(vh, A)


def _no_driver(driver):
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")


def _svd_checks(A, driver):
    _no_driver(driver)
    _checks.at_least_2d(A, "linalg.svd")
    _checks.floating(A, "linalg.svd")


@_float32_under_autocast
def svd(A, full_matrices=True, *, driver=None):
    """(U, S, Vh), a namedtuple as torch's; differentiable (tessel/_linalg_grad.py: the gradient of U and Vh
    needs distinct singular values, as torch's; with full_matrices the extra columns of U and rows of Vh, which
    are not unique, get no gradient, as torch's)."""
    _svd_checks(A, driver)
    return _SVD(*(_grad().Svd.apply(A, full_matrices) if _needs_grad(A) else _svd_host(A, full_matrices)))


def _svdvals_host(A):
    return _back(np.linalg.svd(_host(A, "svdvals"), compute_uv=False), A)


@_float32_under_autocast
def svdvals(A, *, driver=None):
    _svd_checks(A, driver)
    return _grad().Svdvals.apply(A) if _needs_grad(A) else _svdvals_host(A)


_EIGH = return_types.linalg_eigh
_LSTSQ = return_types.linalg_lstsq


def _eigh_host(A, UPLO):
    w, v = np.linalg.eigh(_host(A, "eigh"), UPLO=UPLO)
    return _back(w, A), _back(v, A)


def _eigh_checks(A, UPLO):
    if not isinstance(UPLO, str) or UPLO.upper() not in ("L", "U"):
        raise RuntimeError("Expected UPLO argument to be 'L' or 'U', but got %s" % (UPLO,))
    _checks.square(A, "linalg.eigh")
    _checks.not_implemented_for(A, "linalg_eigh_cpu")


@_float32_under_autocast
def eigh(A, UPLO="L"):
    """(eigenvalues, eigenvectors), a namedtuple as torch's (it unpacks as a pair too)."""
    _eigh_checks(A, UPLO)
    return _EIGH(*(_grad().Eigh.apply(A, UPLO) if _needs_grad(A) else _eigh_host(A, UPLO)))


@_float32_under_autocast
def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares (minimum-norm) solution, and the residuals, rank and singular values that torch's driver
    (default gelsy) gives; batched, with broadcast batch dims (tessel/_linalg_lstsq.py)."""
    from ._linalg_lstsq import lstsq as _lstsq
    return _LSTSQ(*_lstsq(A, B, rcond, driver))


def _eigvalsh_host(A, UPLO):
    return _back(np.linalg.eigvalsh(_host(A, "eigvalsh"), UPLO=UPLO), A)


@_float32_under_autocast
def eigvalsh(A, UPLO="L"):
    _eigh_checks(A, UPLO)
    return _grad().Eigvalsh.apply(A, UPLO) if _needs_grad(A) else _eigvalsh_host(A, UPLO)


def _grad():
    from . import _linalg_grad
    return _linalg_grad


def _inv_host(A):
    return _back(np.linalg.inv(_host(A, "inv")), A)


def _square_floating(A, fn):
    _checks.square(A, fn)
    _checks.floating(A, fn)


@_float32_under_autocast
def inv(A):
    _square_floating(A, "linalg.inv")
    return _grad().Inv.apply(A) if _needs_grad(A) else _inv_host(A)


def _det_host(A):
    return _back(np.asarray(np.linalg.det(_host(A, "det"))), A)


def det(A):
    _square_floating(A, "linalg.det")
    return _grad().Det.apply(A) if _needs_grad(A) else _det_host(A)


def _slogdet_host(A):
    sign, logabs = np.linalg.slogdet(_host(A, "slogdet"))
    return _back(np.asarray(sign), A), _back(np.asarray(logabs), A)


_SLOGDET = return_types.linalg_slogdet


def slogdet(A):
    _square_floating(A, "linalg.slogdet")
    return _SLOGDET(*(_grad().Slogdet.apply(A) if _needs_grad(A) else _slogdet_host(A)))


def vector_rhs(a_shape, b_shape):
    """torch's rule for linalg.solve's B: a (batch of) vector(s) when 1-D, or one dim short of A with A's batch and
    row dims; otherwise a (batch of) matrix(es) whose batch dims broadcast with A's."""
    return len(b_shape) == 1 or (len(b_shape) == len(a_shape) - 1 and tuple(b_shape) == tuple(a_shape[:-1]))


def _solve_host(A, B, left):
    a, b = _host(A, "solve"), _host(B, "solve")
    if not left:  # X A = B  <=>  Aᵀ Xᵀ = Bᵀ
        return _back(np.swapaxes(_solve_matrices(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), -1, -2), A)
    if vector_rhs(a.shape, b.shape):  # (numpy 1.x would read [n, n] @ [n] differently)
        return _back(_solve_matrices(a, b[..., None])[..., 0], A)
    return _back(_solve_matrices(a, b), A)


def _solve_matrices(a, b):
    """np.linalg.solve of matrix right-hand sides, their batch dims broadcast first (numpy reads a b one dim short
    of a as a stack of vectors: A [2, 3, 3] with B [3, 2] raised, torch broadcasts B to [2, 3, 2])."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.linalg.solve(np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:]))


def _solve_checks(A, B, left, fn="linalg.solve"):
    """torch's linalg.solve checks: dtypes, a square A, B's rows (columns when left=False) matching A's."""
    _checks.floating(A, fn)
    _checks.same_dtype(A, B, fn)
    _checks.square(A, fn)
    n = A.shape[-1]
    vector = left and vector_rhs(tuple(A.shape), tuple(B.shape))
    rows = (B.shape[-1] if vector else B.shape[-2 if left else -1]) if B.dim() else 1
    if rows != n or (not vector and B.dim() < 2):
        shape = "%dx1" % (B.shape[-1] if B.dim() else 1) if vector or B.dim() < 2 else "%dx%d" % tuple(B.shape[-2:])
        raise RuntimeError("%s: Incompatible shapes of A and B for the equation %s (%dx%d and %s)"
                           % (fn, "AX = B" if left else "XA = B", n, n, shape))
    if not vector:
        from ._linalg_lstsq import _broadcast_batch
        _broadcast_batch(tuple(B.shape[:-2]), tuple(A.shape[:-2]))  # (torch names B's sizes "tensor a")


@_float32_under_autocast
def solve(A, B, *, left=True):
    _solve_checks(A, B, left)
    return _grad().Solve.apply(A, B, left) if _needs_grad(A, B) else _solve_host(A, B, left)


def _cholesky_host(A, upper):
    """L with A = L L^H from A's lower triangle, or U with A = U^H U from its upper one (LAPACK's potrf 'U': the
    factor of A^H's lower triangle, transposed; numpy reads only the lower triangle)."""
    a = _host(A, "cholesky")
    if upper:
        return _back(np.swapaxes(_potrf(np.swapaxes(a, -1, -2).conj()), -1, -2).conj(), A)
    return _back(_potrf(a), A)


def _potrf(a):
    """numpy's cholesky, failing as LAPACK's potrf does on a NaN pivot too (numpy's returned NaNs there: torch raises
    "the leading minor of order 1 is not positive-definite" for [[nan, 1], [1, 3]])."""
    lower = np.linalg.cholesky(a)
    if np.isnan(np.diagonal(lower, axis1=-2, axis2=-1)).any():
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return lower


@_float32_under_autocast
def cholesky(A, *, upper=False):
    _square_floating(A, "linalg.cholesky")
    return _grad().Cholesky.apply(A, upper) if _needs_grad(A) else _cholesky_host(A, upper)


def _cutoff(s, atol, rtol, shape, dtype):
    """torch's singular-value cutoff max(atol, rtol·σ_max) per matrix; rtol defaults to eps·max(m, n) unless
    atol is given (> 0), then to 0."""
    if rtol is None:
        rtol = np.finfo(dtype).eps * max(shape[-2:]) if atol is None or np.all(np.asarray(atol) <= 0) else 0.0
    smax = s.max(axis=-1) if s.shape[-1] else np.zeros(s.shape[:-1])
    atol = 0.0 if atol is None else (atol.detach().numpy() if isinstance(atol, Tensor) else atol)
    rtol = rtol.detach().numpy() if isinstance(rtol, Tensor) else rtol
    return np.maximum(atol, rtol * smax)


def _singular_values(a, hermitian):
    return np.abs(np.linalg.eigvalsh(a)) if hermitian else np.linalg.svd(a, compute_uv=False)


@_float32_under_autocast
def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
    """torch.linalg.matrix_rank: the singular values above max(atol, rtol·σ_max) (tol: the old name of atol)."""
    _checks.at_least_2d(A, "torch.linalg.matrix_rank", "input")
    if not A.dtype.is_floating_point:
        raise RuntimeError("This function doesn't handle types other than float and double")
    a = _host(A, "matrix_rank")
    atol = tol if atol is None else atol
    s = _singular_values(a, hermitian)
    rank = (s > _cutoff(s, atol, rtol, a.shape, a.dtype)[..., None]).sum(axis=-1)
    return _C._from_numpy(np.asarray(rank, dtype=np.int64))


def _pinv_host(A, hermitian, atol=None, rtol=None):
    """A⁺ with the singular values at or below torch's cutoff treated as zero (eigh for hermitian A)."""
    a = _host(A, "pinv")
    if hermitian:
        w, v = np.linalg.eigh(a)
        keep = np.abs(w) > _cutoff(np.abs(w), atol, rtol, a.shape, a.dtype)[..., None]
        inv = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
        return _back((v * inv[..., None, :]) @ np.swapaxes(v, -1, -2).conj(), A)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    keep = s > _cutoff(s, atol, rtol, a.shape, a.dtype)[..., None]
    inv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
    return _back((np.swapaxes(vh, -1, -2).conj() * inv[..., None, :]) @ np.swapaxes(u, -1, -2).conj(), A)


def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None):
    """torch.linalg.pinv (differentiable); singular values at or below max(atol, rtol·σ_max) count as zero. rcond,
    positional or not, is torch's deprecated spelling of rtol (with atol 0), as numpy's pinv names it."""
    if A.dim() < 2 or not A.dtype.is_floating_point:
        raise RuntimeError("linalg.pinv(%s{%s}): expected a tensor with 2 or more dimensions of float, double, cfloat "
                           "or cdouble types" % (_checks.name(A.dtype), list(A.shape)))
    if rcond is not None:
        atol, rtol = 0.0, rcond
    if _needs_grad(A):
        return _grad().Pinv.apply(A, hermitian, atol, rtol)
    return _pinv_host(A, hermitian, atol, rtol)


matmul = _C.Tensor.matmul


def _qr_host(A, mode):
    a = _host(A, "qr")
    if mode == "r":  # numpy returns R alone (unpacking it as (Q, R) split R's rows)
        r = np.linalg.qr(a, mode="r") if a.ndim == 2 else np.linalg.qr(a, mode="reduced")[1]
        return _back(np.zeros((0,)), A), _back(r, A)
    q, r = np.linalg.qr(a, mode=mode)
    return _back(q, A), _back(r, A)


@_float32_under_autocast
def qr(A, mode="reduced"):
    """(Q, R) of A = QR (numpy's LAPACK, as torch's on the CPU: the same Householder signs); differentiable
    (tessel/_linalg_grad.py) except mode='r' and mode='complete' of a tall matrix, whose backward raises as
    torch's."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError("qr received unrecognized mode '%s' but expected one of 'reduced' (default), 'r', or "
                           "'complete'" % mode)
    _checks.at_least_2d(A, "linalg.qr")
    _checks.floating(A, "linalg.qr")
    return _QR(*(_grad().Qr.apply(A, mode) if _needs_grad(A) else _qr_host(A, mode)))


def cross(input, other, *, dim=-1):
    from ._composed import cross as _cross
    return _cross(input, other, dim)


def matrix_power(A, n):
    _checks.square(A, "linalg.matrix_power")
    from ._composed import matrix_power as _power
    return _power(A, n)


@_lower_under_autocast
def vecdot(x, y, *, dim=-1):
    _checks.floating(x, "linalg.vecdot")
    _checks.same_dtype(x, y, "linalg.vecdot", ("x", "y"))
    from ._composed import vecdot as _vecdot
    return _vecdot(x, y, dim=dim)


def multi_dot(tensors):
    from ._composed import multi_dot as _multi_dot
    return _multi_dot(tensors)


@_float32_under_autocast
def cond(A, p=None):
    from ._composed import cond as _cond
    return _cond(A, p)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    from ._composed import solve_triangular as _solve_triangular
    return _solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)


def matrix_exp(A):
    """torch.linalg.matrix_exp (tessel/_namespace.py: scaling and squaring, differentiable)."""
    from ._namespace import matrix_exp as _matrix_exp
    return _matrix_exp(A)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: torch.diagonal with the last two dims as the default."""
    for d in (dim1, dim2):
        _checks.dim_index(d, A.dim())
    return A.diagonal(offset, dim1, dim2)


def vander(x, *, N=None):
    """torch.linalg.vander: [..., n, N] with columns x⁰, x¹, ..., x^(N-1) (increasing powers, unlike
    numpy.vander's default). The x⁰ column is 1 for inf and NaN too (x·0 + 1 made it NaN there)."""
    n = N if N is not None else (x.shape[-1] if x.dim() else 1)
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    if x.dim() < 1:
        raise RuntimeError("linalg.vander: x must have at least one dimension")
    column = x.unsqueeze(-1)
    powers = [column.detach() ** 0, column]
    for _ in range(2, n):
        powers.append(powers[-1] * column)
    return _C._functional.cat(powers, -1)


_INV_EX = return_types.linalg_inv_ex
_CHOLESKY_EX = return_types.linalg_cholesky_ex
_SOLVE_EX = return_types.linalg_solve_ex


def _info(shape, codes):
    """LAPACK's info per batch entry (0 for success), shaped as the batch (0-d for one matrix)."""
    return _C._from_numpy(np.asarray(codes, dtype=np.int32).reshape(shape))


def _each_with_info(A, op, info_of):
    """After a batched op failed: op of every matrix (NaN where it fails; no gradient, a batch with a failure is
    a diagnostic as torch's *_ex results for the failed entries are) and LAPACK's info for each."""
    a = _host(A, "ex")
    outs, codes = [], []
    for m in a.reshape((-1,) + a.shape[-2:]):
        try:
            outs.append(op(m))
            codes.append(0)
        except np.linalg.LinAlgError:
            outs.append(np.full(m.shape, np.nan))
            codes.append(info_of(m))
    return _back(np.stack(outs).reshape(a.shape), A), codes


def _success(A):
    """info for a batch that factored: zeros shaped as the batch."""
    batch = tuple(A.shape[:-2])
    return _info(batch, [0] * int(np.prod(batch)))


@_float32_under_autocast
def inv_ex(A, *, check_errors=False):
    """torch.linalg.inv_ex: (inverse, info) with info > 0 (LAPACK's: the first zero pivot) where A is singular
    instead of an error (unless check_errors: torch's LinAlgError, named for inv_ex); the inverse is
    differentiable where it exists."""
    _square_floating(A, "linalg.inv")
    try:
        return _INV_EX(inv(A), _success(A))
    except np.linalg.LinAlgError:
        values, codes = _each_with_info(A, np.linalg.inv, _checks.getrf_info)
    if check_errors:
        raise LinAlgError(_checks.inv_message(_host(A, "inv_ex"), "linalg.inv_ex"))
    return _INV_EX(values, _info(tuple(A.shape[:-2]), codes))


def _lower_of(A, upper):
    """The matrix whose lower triangle potrf factors: A itself, or A^H for upper=True (A's upper triangle)."""
    a = _host(A, "cholesky")
    return np.swapaxes(a, -1, -2).conj() if upper else a


@_float32_under_autocast
def cholesky_ex(A, *, upper=False, check_errors=False):
    """torch.linalg.cholesky_ex: (L, info), info > 0 where A is not positive definite (no error unless
    check_errors)."""
    _square_floating(A, "linalg.cholesky")
    try:
        return _CHOLESKY_EX(cholesky(A, upper=upper), _success(A))
    except np.linalg.LinAlgError:
        lower, codes = _each_with_info(A, _potrf, _checks.potrf_info)
    if check_errors:
        raise LinAlgError(_checks.cholesky_message(_lower_of(A, upper), "linalg.cholesky_ex"))
    return _CHOLESKY_EX(lower.transpose(-2, -1) if upper else lower, _info(tuple(A.shape[:-2]), codes))


def solve_ex(A, B, *, left=True, check_errors=False):
    """torch.linalg.solve_ex: (X, info), info > 0 where A is singular."""
    _solve_checks(A, B, left)
    try:
        return _SOLVE_EX(solve(A, B, left=left), _success(A))
    except np.linalg.LinAlgError:
        _, codes = _each_with_info(A, np.linalg.inv, _checks.getrf_info)
    if check_errors:
        raise LinAlgError(_checks.solve_message(_host(A, "solve_ex"), "torch.linalg.solve_ex"))
    with _C._GradMode(False):
        nan = B.detach() * float("nan")
    return _SOLVE_EX(nan, _info(tuple(A.shape[:-2]), codes))


@_float32_under_autocast
def tensorinv(A, ind=2):
    """torch.linalg.tensorinv: the inverse of A seen as a matrix [prod(shape[:ind]), prod(shape[ind:])],
    shaped shape[ind:] + shape[:ind]."""
    if ind <= 0:
        raise RuntimeError("Expected a strictly positive integer for 'ind', but got %d" % ind)
    lead, rest = list(A.shape[:ind]), list(A.shape[ind:])
    rows, cols = int(np.prod(lead)), int(np.prod(rest))
    if rows != cols:
        raise RuntimeError("Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           "prod(self.shape[:ind]), but got %d != %d" % (cols, rows))
    return inv(A.reshape(rows, cols)).reshape(rest + lead)


@_float32_under_autocast
def tensorsolve(A, B, dims=None):
    """torch.linalg.tensorsolve: X with tensordot(A, X, X.ndim) = B (dims of A moved to the end first)."""
    if dims is not None:
        order = [d for d in range(A.dim()) if d not in [d % A.dim() for d in dims]] + [d % A.dim() for d in dims]
        A = A.permute(*order)
    rest = list(A.shape[B.dim():])
    rows, cols = B.numel(), int(np.prod(rest))
    if rows != cols:
        raise RuntimeError("Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           "prod(self.shape[:other.ndim]), but got %d != %d" % (cols, rows))
    return solve(A.reshape(rows, cols), B.reshape(rows)).reshape(rest)


from ._linalg_lu import eig, eigvals, lu, lu_factor, lu_factor_ex, lu_solve  # noqa: E402,F401 (LU family, eig)


def _torchs_failure(name, args, kwargs, error):
    """torch's message for a LAPACK failure numpy reported as `error`, from LAPACK's info of the first failing
    matrix; numpy's own text for the failures torch has no message of its own for."""
    A = args[0] if args else kwargs.get("A", kwargs.get("input"))
    if isinstance(A, Tensor):
        if name == "inv":
            return _checks.inv_message(_host(A, name))
        if name == "cholesky":
            return _checks.cholesky_message(_lower_of(A, kwargs.get("upper", False)))
        if name == "solve":
            return _checks.solve_message(_host(A, name))
        if name in ("svd", "svdvals", "pinv", "matrix_rank", "cond"):
            return _checks.svd_message(_host(A, name))
    return "linalg.%s: %s" % (name, error)


def _raising_torchs_error(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except np.linalg.LinAlgError as e:
            if isinstance(e, LinAlgError):
                raise
            raise LinAlgError(_torchs_failure(fn.__name__, args, kwargs, e)) from None
    return wrapper


def _wrap_public_functions():
    import types
    for name, fn in list(globals().items()):
        if not name.startswith("_") and isinstance(fn, types.FunctionType):
            globals()[name] = _raising_torchs_error(fn)


_wrap_public_functions()
