"""tessel.linalg against numpy's float64 linalg: every vector and matrix norm order over chosen dimensions
(with keepdim), gradients of the composed norms against central differences, the host-side
factorizations' values, and the error for a factorization of a tensor that requires grad."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.linalg as LA


def _np_vector_norm(x, ord, axis, keepdims=False):
    a = np.abs(x)
    if ord == math.inf:
        return a.max(axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return a.min(axis=axis, keepdims=keepdims)
    if ord == 0:
        return (a != 0).sum(axis=axis, keepdims=keepdims).astype(np.float64)
    return (a ** ord).sum(axis=axis, keepdims=keepdims) ** (1.0 / ord)


def test_vector_norms_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5))
    x[0, 0, 0] = 0.0
    t = tessel.tensor(x, dtype=tessel.float64)
    for ord in (2, 1, 3, 0.5, 0, math.inf, -math.inf):
        for dim, axis in ((None, None), (1, 1), ((0, 2), (0, 2)), (-1, -1)):
            for keepdim in (False, True):
                got = LA.vector_norm(t, ord, dim, keepdim).numpy()
                want = _np_vector_norm(x, ord, axis, keepdim)
                np.testing.assert_allclose(got, want, rtol=1e-12, err_msg="ord %s dim %s" % (ord, dim))
    np.testing.assert_allclose(LA.norm(t).numpy(), np.sqrt((x ** 2).sum()), rtol=1e-12)
    np.testing.assert_allclose(LA.norm(t[0, 0], 1).numpy(), np.abs(x[0, 0]).sum(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="Expected a floating point or complex tensor as input. Got Long"):
        LA.vector_norm(tessel.arange(4))  # torch refuses integers (they were normed in float32)


def test_matrix_norms_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 5))
    t = tessel.tensor(a, dtype=tessel.float64)
    for ord in ("fro", 1, -1, math.inf, -math.inf, 2, -2, "nuc"):
        for dim in ((-2, -1), (0, 2), (2, 0)):
            got = LA.matrix_norm(t, ord, dim).numpy()
            moved = np.moveaxis(a, dim, (-2, -1))
            want = np.linalg.norm(moved, ord=ord, axis=(-2, -1))
            np.testing.assert_allclose(got, want, rtol=1e-10, err_msg="ord %s dim %s" % (ord, dim))
        kept = LA.matrix_norm(t, ord, (0, 2), keepdim=True)
        assert tuple(kept.shape) == (1, 4, 1)
    np.testing.assert_allclose(LA.norm(t, "fro", dim=(1, 2)).numpy(), np.linalg.norm(a, axis=(1, 2)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="input must be 1D or 2D. Got 3D"):
        LA.norm(t, 1)


def test_norm_gradients_match_central_differences():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    for f in (lambda t: LA.vector_norm(t, 2), lambda t: LA.vector_norm(t, 3, dim=1).sum(),
              lambda t: LA.matrix_norm(t, 1), lambda t: LA.matrix_norm(t, "fro")):
        t = tessel.tensor(x, dtype=tessel.float64, requires_grad=True)
        f(t).backward()
        eps, fd = 1e-6, np.zeros_like(x)
        for i in np.ndindex(*x.shape):
            e = np.zeros_like(x)
            e[i] = eps
            fd[i] = (f(tessel.tensor(x + e, dtype=tessel.float64)).item()
                     - f(tessel.tensor(x - e, dtype=tessel.float64)).item()) / (2 * eps)
        np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_host_factorizations_and_their_error_under_grad():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4))
    spd = a @ a.T + 4 * np.eye(4)
    t, s = tessel.tensor(a, dtype=tessel.float64), tessel.tensor(spd, dtype=tessel.float64)
    u, sv, vh = LA.svd(t, full_matrices=False)
    np.testing.assert_allclose((u.numpy() * sv.numpy()) @ vh.numpy(), a, atol=1e-12)
    np.testing.assert_allclose(LA.inv(t).numpy() @ a, np.eye(4), atol=1e-10)
    np.testing.assert_allclose(LA.det(t).item(), np.linalg.det(a), rtol=1e-12)
    b = rng.standard_normal((4, 2))
    np.testing.assert_allclose(a @ LA.solve(t, tessel.tensor(b, dtype=tessel.float64)).numpy(), b, atol=1e-10)
    x = LA.solve(t, tessel.tensor(b.T, dtype=tessel.float64), left=False).numpy()  # X A = B
    np.testing.assert_allclose(x @ a, b.T, atol=1e-10)
    low = LA.cholesky(s).numpy()
    np.testing.assert_allclose(low @ low.T, spd, atol=1e-10)
    assert np.allclose(np.triu(low, 1), 0)
    w, v = LA.eigh(s)
    np.testing.assert_allclose(v.numpy() @ np.diag(w.numpy()) @ v.numpy().T, spd, atol=1e-10)
    q, r = LA.qr(t)
    np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-12)
    assert LA.svd(tessel.tensor(a.astype(np.float32)))[1].dtype == tessel.float32
    # under autograd too (gradients: linalg_factor_grad_test); matrix_rank of such a tensor is an int, as torch's
    assert LA.matrix_rank(tessel.tensor(a, requires_grad=True)).item() == 4


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
