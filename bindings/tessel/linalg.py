"""torch.linalg: the norms, composed of tessel's ops (differentiable, on DTensors too where the ops are),
and the factorizations and solves through numpy's LAPACK on the host for tensors that do not require grad
(a tensor that does raises NotImplementedError: tessel has no differentiable factorization).

    torch.linalg.vector_norm(g, 2)              # the gradient-clipping norm
    torch.linalg.matrix_norm(w, "fro")
    u, s, vh = torch.linalg.svd(w.detach(), full_matrices=False)
"""
import builtins
import collections
import math

import numpy as np

from . import _C, _dtypes
from ._tensor import Tensor


_QR = collections.namedtuple("qr", ["Q", "R"])


def _dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    return tuple(d % ndim for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))


def _float(x, dtype):
    if dtype is not None:
        return x.to(dtype)
    return x if x.dtype.is_floating_point else x.to(_dtypes.float32)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 (torch's argument name)
    """(Σ|x|^ord)^(1/ord) over dim (all dimensions by default); ord inf / -inf: max / min |x|; 0: the
    count of nonzero entries."""
    x = _float(x, dtype)
    dims = _dims(dim, x.dim())
    if x.dim() == 0:
        x, dims = x.reshape(1), (0,)
    a = x.abs()
    if ord == math.inf:
        return a.amax(dim=dims, keepdim=keepdim)
    if ord == -math.inf:
        return -(-a).amax(dim=dims, keepdim=keepdim)  # (amin: the max of the negation)
    if ord == 0:
        return (a != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    if ord == 2:
        return (x * x).sum(dims, keepdim=keepdim).sqrt()
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    return (a ** float(ord)).sum(dims, keepdim=keepdim) ** (1.0 / ord)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: A002
    """Frobenius, 1 / -1 (max / min column sum of |A|), inf / -inf (row sums), and 2 / -2 / 'nuc' (singular
    values, host-side: constants only)."""
    A = _float(A, dtype)
    r, c = _dims(dim, A.dim())
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
    raise RuntimeError("linalg.matrix_norm: Order %r not supported." % (ord,))


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: ord None is the 2-norm of the flattened tensor (or of dim); otherwise a vector
    norm for one dimension (or a 1-D input) and a matrix norm for two (or a 2-D input)."""
    if isinstance(ord, str) or (dim is not None and isinstance(dim, (tuple, list)) and len(dim) == 2) or (
            dim is None and ord is not None and A.dim() == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    if ord is not None and dim is None and A.dim() != 1:
        raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got %dD."
                           % A.dim())
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# ---- host-side factorizations (no gradient) ---------------------------------------------------------------

def _host(x, name):
    if isinstance(x, Tensor) and x.requires_grad and _C.is_grad_enabled():
        raise NotImplementedError("torch.linalg.%s of a tensor that requires grad: tessel computes it on the host "
                                  "with numpy's LAPACK and has no gradient for it (detach it, or run under "
                                  "no_grad)" % name)
    if x.is_distributed:
        raise NotImplementedError("torch.linalg.%s of a DTensor: call full_tensor() first" % name)
    return (x.float() if x.dtype in (_dtypes.bfloat16, _dtypes.float16) else x).detach().numpy()


def _back(a, like):
    out = _C._from_numpy(np.asarray(a))  # any layout; keeps a 0-d result 0-d (np.ascontiguousarray made det's 1-d)
    return out.to(like.dtype) if out.dtype != like.dtype and like.dtype.is_floating_point else out


def svd(A, full_matrices=True):
    u, s, vh = np.linalg.svd(_host(A, "svd"), full_matrices=full_matrices)
    return _back(u, A), _back(s, A), _back(vh, A)


def svdvals(A):
    return _back(np.linalg.svd(_host(A, "svdvals"), compute_uv=False), A)


_EIGH = collections.namedtuple("eigh", ["eigenvalues", "eigenvectors"])
_LSTSQ = collections.namedtuple("lstsq", ["solution", "residuals", "rank", "singular_values"])


def eigh(A, UPLO="L"):
    """(eigenvalues, eigenvectors), a namedtuple as torch's (it unpacks as a pair too)."""
    w, v = np.linalg.eigh(_host(A, "eigh"), UPLO=UPLO)
    return _EIGH(_back(w, A), _back(v, A))


def lstsq(A, B, rcond=None, *, driver=None):
    solution, residuals, rank, sv = np.linalg.lstsq(_host(A, "lstsq"), _host(B, "lstsq"), rcond=rcond)
    return _LSTSQ(_back(solution, A), _back(residuals, A), _C._from_numpy(np.asarray(rank, dtype=np.int64)),
                  _back(sv, A))


def eigvalsh(A, UPLO="L"):
    return _back(np.linalg.eigvalsh(_host(A, "eigvalsh"), UPLO=UPLO), A)


def qr(A, mode="reduced"):
    q, r = np.linalg.qr(_host(A, "qr"), mode=mode)
    return _back(q, A), _back(r, A)


def inv(A):
    return _back(np.linalg.inv(_host(A, "inv")), A)


def det(A):
    return _back(np.asarray(np.linalg.det(_host(A, "det"))), A)


def slogdet(A):
    sign, logabs = np.linalg.slogdet(_host(A, "slogdet"))
    return _back(np.asarray(sign), A), _back(np.asarray(logabs), A)


def solve(A, B, *, left=True):
    a, b = _host(A, "solve"), _host(B, "solve")
    if not left:  # X A = B  <=>  Aᵀ Xᵀ = Bᵀ
        return _back(np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), -1, -2), A)
    return _back(np.linalg.solve(a, b), A)


def cholesky(A, *, upper=False):
    lower = np.linalg.cholesky(_host(A, "cholesky"))
    return _back(np.swapaxes(lower, -1, -2).conj() if upper else lower, A)


def matrix_rank(A, *, hermitian=False):
    return _C._from_numpy(np.asarray(np.linalg.matrix_rank(_host(A, "matrix_rank"), hermitian=hermitian),
                                     dtype=np.int64))


def pinv(A, *, hermitian=False):
    return _back(np.linalg.pinv(_host(A, "pinv"), hermitian=hermitian), A)


matmul = _C.Tensor.matmul


def qr(A, mode="reduced"):
    """(Q, R) of A = QR (numpy's LAPACK, as torch's on the CPU: the same Householder signs)."""
    q, r = np.linalg.qr(_host(A, "qr"), mode={"reduced": "reduced", "complete": "complete", "r": "r"}[mode])
    if mode == "r":
        return _QR(_back(np.zeros((0,)), A), _back(q, A))
    return _QR(_back(q, A), _back(r, A))


def cross(input, other, *, dim=-1):
    from ._composed import cross as _cross
    return _cross(input, other, dim)


def matrix_power(A, n):
    from ._composed import matrix_power as _power
    return _power(A, n)


def vecdot(x, y, *, dim=-1):
    from ._composed import vecdot as _vecdot
    return _vecdot(x, y, dim=dim)


def multi_dot(tensors):
    from ._composed import multi_dot as _multi_dot
    return _multi_dot(tensors)


def cond(A, p=None):
    from ._composed import cond as _cond
    return _cond(A, p)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    from ._composed import solve_triangular as _solve_triangular
    return _solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)

