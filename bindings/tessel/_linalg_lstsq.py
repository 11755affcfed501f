"""torch.linalg.lstsq on the host (split from tessel/linalg.py): batched, A's and B's batch dims broadcast, and the
driver deciding which of residuals, rank and singular_values torch fills in (numpy's lstsq is 2-D only and always
returned all three, gelsd's).

Every driver's solution is computed as gelsd's, the minimum-norm least-squares solution with singular values at or
below rcond · σ_max dropped: for a full-rank A that is what gels and gelsy return too, and gelsy's rank-revealing QR
gives the same minimum-norm solution for a rank-deficient one. torch's rules for the other outputs:

    residuals        ‖A X - B‖² per column, only for m > n, only for drivers other than gelsy, and for gelsd /
                     gelss only when every matrix has rank n (empty otherwise)
    rank             every driver but gels (empty for gels)
    singular_values  gelsd and gelss only (empty otherwise)

B is a batch of vectors when it has one dim fewer than A (torch's rule: B [3, 1] with A [2, 3, 2] is a batch of
three vectors, whose batch does not broadcast with A's two).
"""
import numpy as np

from . import _C
from ._linalg_checks import name as _dtype_name

_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _broadcast_batch(a_batch, b_batch):
    """The broadcast of A's and B's batch shapes, with torch's message for a mismatch."""
    n = max(len(a_batch), len(b_batch))
    a, b = (1,) * (n - len(a_batch)) + tuple(a_batch), (1,) * (n - len(b_batch)) + tuple(b_batch)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError("The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton "
                               "dimension %d" % (x, y, i))
    return tuple(max(x, y) for x, y in zip(a, b))


def _check(A, B, driver):
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if B.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if A.dtype != B.dtype:
        raise RuntimeError("torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
                           "%s and other's dtype %s" % (_dtype_name(A.dtype), _dtype_name(B.dtype)))
    if not 0 <= A.dim() - B.dim() <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and (input.dim() - "
                           "other.dim()) <= 1")
    vector = B.dim() == A.dim() - 1
    _broadcast_batch(tuple(A.shape[:-2]), tuple(B.shape[:-1] if vector else B.shape[:-2]))
    if A.shape[-2] != B.shape[-1 if vector else -2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(%d)" % (-1 if vector else -2))
    if driver not in _DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if not A.dtype.is_floating_point:
        raise RuntimeError("This function doesn't handle types other than float and double")
    return vector


def lstsq_host(A, B, rcond, driver):
    """(solution, residuals, rank, singular_values) as numpy arrays, per torch's rules for `driver`."""
    from .linalg import _host
    vector = _check(A, B, driver or "gelsy")
    driver = driver or "gelsy"
    a, b = _host(A, "lstsq"), _host(B, "lstsq")
    if vector:
        b = b[..., None]
    m, n = a.shape[-2:]
    batch = _broadcast_batch(a.shape[:-2], b.shape[:-2])
    count = int(np.prod(batch))
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape((count, m, n))
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape((count, m, b.shape[-1]))
    k = b.shape[-1]
    if not (np.isfinite(a).all() and np.isfinite(b).all()):  # (numpy's gufunc turned its error into SystemError)
        from ._linalg_checks import svd_message
        from .linalg import LinAlgError
        bad = a if np.isfinite(b).all() else b
        raise LinAlgError(svd_message(bad.reshape(batch + bad.shape[-2:]), "torch.linalg.lstsq"))
    if rcond is None:  # torch's default: eps · max(m, n), numpy's too
        rcond = np.finfo(a.dtype).eps * max(m, n)
    solutions = np.zeros((a.shape[0], n, k), a.dtype)
    ranks = np.zeros(a.shape[0], np.int64)
    values = np.zeros((a.shape[0], min(m, n)), a.dtype)
    for i in range(a.shape[0]):
        if m and n and k:
            solutions[i], _, ranks[i], values[i] = np.linalg.lstsq(a[i], b[i], rcond=rcond)
    real = a.dtype
    residuals = np.zeros((0,), real)
    if m > n and driver != "gelsy" and (driver == "gels" or bool(np.all(ranks == n))):
        residuals = (np.abs(a @ solutions - b) ** 2).sum(axis=-2).reshape(batch + (k,)).astype(real)
    solution = solutions.reshape(batch + (n, k))
    if vector:
        solution = solution[..., 0]
    rank = ranks.reshape(batch) if driver != "gels" else np.zeros((0,), np.int64)
    singular = values.reshape(batch + (min(m, n),)) if driver in ("gelsd", "gelss") else np.zeros((0,), real)
    return solution, residuals, rank, singular


def lstsq(A, B, rcond=None, driver=None):
    """torch.linalg.lstsq's (solution, residuals, rank, singular_values); under autograd the solution is pinv(A) @ B,
    which is differentiable (A of constant rank)."""
    from .linalg import _back, _needs_grad, pinv
    solution, residuals, rank, singular = lstsq_host(A, B, rcond, driver)
    if _needs_grad(A, B):
        vector = B.dim() == A.dim() - 1
        x = pinv(A) @ (B.unsqueeze(-1) if vector else B)
        solution = x.squeeze(-1) if vector else x
    else:
        solution = _back(solution, A)
    return solution, _back(residuals, A), _C._from_numpy(np.asarray(rank, dtype=np.int64)), _back(singular, A)
