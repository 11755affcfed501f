"""The rest of torch's namespace (tessel/_namespace.py) against numpy in float64: function forms and aliases
(torch.add(x, y, alpha=), div's rounding modes on floats and integers), the dtype rules (promote_types,
result_type, can_cast as torch's tables give them), products, linear algebra's older spellings (matrix_exp
against the eigendecomposition), shape helpers, the out-of-place scatters, statistics (cov with weights against
numpy.cov, nanmedian, nanquantile, histogram), window functions, torch's top-level nn forms, and the in-place
methods written back from their out-of-place ops (values, dtype and shape errors, autograd through them).
Gradients of the compositions are checked against central finite differences."""
import math
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn.functional as F
from sharded_equivalence import finite_difference

RNG = np.random.default_rng(7)
A = RNG.standard_normal((2, 3)).astype(np.float32)
B = RNG.standard_normal((2, 3)).astype(np.float32)


def t(x, **kw):
    return tessel.tensor(x, **kw)


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, np.float64),
                               np.asarray(want, np.float64), rtol=tol, atol=tol)


def check_grad(f, x):
    xt = t(x, requires_grad=True)
    f(xt).backward()
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda v: f(t(v)).item(), x), rtol=1e-5,
                               atol=1e-6)


def test_arithmetic_function_forms_and_division_rounding():
    a, b = t(A), t(B)
    close(tessel.add(a, b, alpha=2), A + 2 * B)
    close(a.add(3), A + 3)
    close(a.add(b, alpha=-0.5), A - 0.5 * B)
    close(tessel.sub(a, b, alpha=0.5), A - 0.5 * B)
    close(a.sub(1), A - 1)
    close(tessel.subtract(a, b), A - B)
    close(tessel.rsub(a, b, alpha=2), B - 2 * A)
    close(tessel.mul(a, 2), 2 * A)
    close(tessel.multiply(a, b), A * B)
    close(a.div(b), A / B)
    close(tessel.divide(a, b, rounding_mode="trunc"), np.trunc(A / B))
    close(a.div(b, rounding_mode="floor"), np.floor(A / B))
    i, j = np.array([7, -7, 9, -9, 6, -6]), np.array([2, 2, -4, -4, 3, -3])
    got = tessel.div(t(i), t(j), rounding_mode="trunc")
    assert got.dtype == tessel.int64 and got.tolist() == (np.sign(i * j) * (np.abs(i) // np.abs(j))).tolist()
    got = t(i).div(t(j), rounding_mode="floor")
    assert got.dtype == tessel.int64 and got.tolist() == (i // j).tolist()
    assert t(i).div(2, rounding_mode="trunc").tolist() == [3, -3, 4, -4, 3, -3]
    assert t(i).divide(t(j)).dtype == tessel.float32
    close(tessel.true_divide(t(i), 2), i / 2)
    with pytest.raises(ValueError, match="rounding_mode to be one of None, 'trunc', or 'floor' but found 'up'"):
        a.div(b, rounding_mode="up")
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        tessel.sub(a > 0, b > 0)
    with pytest.raises(NotImplementedError, match="The `\\+` operator, on a bool tensor is not supported"):
        tessel.positive(a > 0)
    assert tessel.pi == math.pi and tessel.e == math.e and tessel.inf == math.inf and math.isnan(tessel.nan)
    assert tessel.newaxis is None


def test_dtype_rules_follow_torchs_tables():
    f16, bf16, f32, f64, i32, i64, b = (tessel.float16, tessel.bfloat16, tessel.float32, tessel.float64,
                                        tessel.int32, tessel.int64, tessel.bool)
    # torch.promote_types(x, y) as torch 2.15 answers it
    for x, y, want in ((i32, f16, f16), (b, i32, i32), (i64, i32, i64), (f16, bf16, f32), (f64, f32, f64),
                       (b, b, b), (bf16, i64, bf16)):
        assert tessel.promote_types(x, y) == want and tessel.promote_types(y, x) == want, (x, y)
    for x, y, want in ((f32, i32, False), (i64, f16, True), (i32, b, False), (b, i64, True), (f64, f16, True)):
        assert tessel.can_cast(x, y) == want, (x, y)
    cases = ((t([1, 2]), 2.5, f32), (t([1, 2], dtype=i32), 5, i32), (t([1.0], dtype=f16), 2.5, f16),
             (t([1, 2]), t(1.0, dtype=f64), f64), (t([True]), 2, i64), (t(1), t([1], dtype=i32), i32),
             (t([1.0], dtype=bf16), t([1.0], dtype=f16), f32), (t([True]), True, b))
    for x, y, want in cases:
        assert tessel.result_type(x, y) == want, (x, y)
    with pytest.raises(TypeError, match="expected a tessel dtype"):
        tessel.promote_types(f32, "float")


def test_elementwise_compositions_against_numpy():
    x = np.array([[0.3, -1.2, 1.4], [2.9, -0.01, 0.8]])
    close(tessel.tan(t(x.astype(np.float32))), np.tan(x.astype(np.float32).astype(np.float64)), 1e-6)
    assert tessel.tan(t([1, 2])).dtype == tessel.float32
    check_grad(lambda z: tessel.tan(z).sum(), x)
    close(tessel.angle(t([-1.0, 0.0, 2.0, float("inf"), -float("inf")])), [math.pi, 0, 0, 0, math.pi])
    assert math.isnan(tessel.angle(t([float("nan")])).item())
    close(tessel.ldexp(t([1.5, -2.0, 3.0]), t([1, 2, -3])), np.ldexp([1.5, -2.0, 3.0], [1, 2, -3]))
    vals = np.array([0.0, 1.0, -3.0, 0.1, 1024.0, 1e-40, 3.4e38, -0.75], np.float32)
    m, e = tessel.frexp(t(vals))
    wm, we = np.frexp(vals)
    assert m.dtype == tessel.float32 and e.dtype == tessel.int32
    np.testing.assert_array_equal(m.numpy(), wm)
    np.testing.assert_array_equal(e.numpy(), we)
    m, e = tessel.frexp(t([float("inf"), float("nan")]))
    assert e.tolist() == [0, 0] and m[0].item() == math.inf and math.isnan(m[1].item())
    p, q = np.array([12, -18, 0, 7, 0, 2 ** 40]), np.array([8, 12, 0, 0, -5, 6 * 2 ** 20])
    assert tessel.gcd(t(p), t(q)).tolist() == np.gcd(p, q).tolist()
    assert tessel.lcm(t(p[:5]), t(q[:5])).tolist() == np.lcm(p[:5], q[:5]).tolist()
    with pytest.raises(NotImplementedError, match='"gcd_cpu" not implemented for \'Float\''):
        tessel.gcd(t(A), t(B))
    got = tessel.mvlgamma(t([2.5, 3.0, 4.25], dtype=tessel.float64), 3)
    want = [sum(math.lgamma(v - k / 2) for k in range(3)) + 3 * 2 / 4 * math.log(math.pi) for v in (2.5, 3.0, 4.25)]
    close(got, want, 1e-12)
    close(tessel.hardshrink(t(A), 0.8), np.where(np.abs(A) > 0.8, A, 0))


def renorm_reference(x, p, dim, maxnorm):
    out = x.copy()
    for i in range(x.shape[dim]):
        sl = np.take(x, i, axis=dim)
        n = np.sum(np.abs(sl) ** p) ** (1 / p)
        if n > maxnorm:
            idx = [slice(None)] * x.ndim
            idx[dim] = i
            out[tuple(idx)] = sl * maxnorm / (n + 1e-7)
    return out


def test_renorm_scales_only_the_slices_over_the_bound():
    x = np.array([[1.5, -2.0, 3.0], [0.5, 0.4, -1.0]])
    for p, dim, maxnorm in ((2, 0, 3.0), (1, 1, 2.0), (3, 1, 0.5)):
        close(tessel.renorm(t(x), p, dim, maxnorm), renorm_reference(x, p, dim, maxnorm), 1e-12)
    check_grad(lambda z: (tessel.renorm(z, 2, 0, 3.0) * t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum(), x)
    with pytest.raises(RuntimeError, match="renorm: non-positive-norm not supported"):
        tessel.renorm(t(x), 0, 0, 1.0)


def test_products():
    v, w = RNG.standard_normal(3), RNG.standard_normal(3)
    a = RNG.standard_normal((2, 3))
    close(tessel.dot(t(v), t(w)), v @ w, 1e-12)
    close(t(v).vdot(t(w)), v @ w, 1e-12)
    close(tessel.inner(t(a), t(a)), a @ a.T, 1e-12)
    close(tessel.inner(t(a), t(v)), a @ v, 1e-12)
    close(tessel.inner(t(a), t(2.0)), 2 * a, 1e-12)
    close(tessel.mv(t(a), t(v)), a @ v, 1e-12)
    y = np.array([1.0, -2.0])
    close(tessel.addmv(t(y), t(a), t(v), beta=0.5, alpha=2), 0.5 * y + 2 * (a @ v), 1e-12)
    close(tessel.addmv(t([float("nan"), 1.0]), t(a), t(v), beta=0), a @ v, 1e-12)
    close(tessel.addr(t(a), t(y), t(v), alpha=3), a + 3 * np.outer(y, v), 1e-12)
    close(tessel.ger(t(v), t(w)), np.outer(v, w), 1e-12)
    close(t(a).mH, a.T)
    close(tessel.adjoint(t(np.ones((2, 3, 4)))), np.ones((2, 4, 3)))
    check_grad(lambda z: tessel.mv(z, t(v)).pow(2).sum(), a)
    with pytest.raises(RuntimeError, match="1D tensors expected, but got 2D and 2D tensors"):
        tessel.dot(t(a), t(a))
    with pytest.raises(RuntimeError, match="expected both vectors to have same dtype, but found Float and Double"):
        tessel.dot(t(v.astype(np.float32)), t(w))
    with pytest.raises(RuntimeError, match="size mismatch, got input \\(2\\), mat \\(2x3\\), vec \\(2\\)"):
        tessel.mv(t(a), t(y))
    with pytest.raises(RuntimeError, match="Got 3-D tensor. For batches of matrices, consider using tensor.mH"):
        t(np.ones((2, 2, 2))).H


def test_linear_algebra_spellings():
    sq = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    close(tessel.det(t(sq)), np.linalg.det(sq), 1e-10)
    close(tessel.logdet(t(sq)), math.log(np.linalg.det(sq)), 1e-10)
    assert math.isnan(tessel.logdet(t(-sq)).item())
    close(tessel.inverse(t(sq)), np.linalg.inv(sq), 1e-10)
    close(t(A).pinverse(), np.linalg.pinv(A), 1e-5)
    L = np.linalg.cholesky(sq)
    rhs = RNG.standard_normal((3, 2))
    close(tessel.cholesky_solve(t(rhs), t(L)), np.linalg.solve(sq, rhs), 1e-10)
    close(tessel.cholesky_solve(t(rhs), t(L.T), upper=True), np.linalg.solve(sq, rhs), 1e-10)
    close(tessel.cholesky_inverse(t(L)), np.linalg.inv(sq), 1e-10)
    x, coefficient = tessel.triangular_solve(t(rhs), t(L), upper=False)
    close(x, np.linalg.solve(L, rhs), 1e-10)
    close(coefficient, L)
    close(tessel.triangular_solve(t(rhs), t(L), upper=False, transpose=True).solution, np.linalg.solve(L.T, rhs), 1e-10)
    u, s, v = tessel.svd(t(A.astype(np.float64)))
    close(u.numpy() @ np.diag(s.numpy()) @ v.numpy().T, A, 1e-10)
    close(tessel.chain_matmul(t(A), t(B.T), t(A)), A @ B.T @ A, 1e-5)
    close(tessel.frobenius_norm(t(A), (0, 1)), np.linalg.norm(A), 1e-6)
    close(tessel.nuclear_norm(t(A)), np.linalg.norm(A, "nuc"), 1e-5)
    with pytest.raises(RuntimeError, match="`torch.cholesky` is deprecated in favor of `torch.linalg.cholesky`"):
        tessel.cholesky(t(sq))


def test_matrix_exp_against_the_eigendecomposition_and_its_gradient():
    sq = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])  # symmetric: exp = V diag(e^w) Vᵀ
    w, vecs = np.linalg.eigh(sq)
    close(tessel.matrix_exp(t(sq)), vecs @ np.diag(np.exp(w)) @ vecs.T, 1e-12)
    close(tessel.matrix_exp(t(sq.astype(np.float32))), vecs @ np.diag(np.exp(w)) @ vecs.T, 2e-6)
    rot = np.array([[[0.0, 1.0], [-1.0, 0.0]], [[0.0, 0.3], [-0.3, 0.0]]])  # batched rotations
    want = np.stack([[[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]] for a in (1.0, 0.3)])
    close(tessel.matrix_exp(t(rot)), want, 1e-12)
    # d/dA <G, exp(A)> against central differences, for a non-normal A
    a = np.array([[0.2, 1.1, -0.4], [0.0, -0.5, 0.7], [0.3, 0.1, 0.4]])
    g = t(np.arange(9.0).reshape(3, 3) / 9)
    check_grad(lambda z: (tessel.matrix_exp(z) * g).sum(), a)
    with pytest.raises(RuntimeError, match="A must be batches of square matrices, but they are 2 by 3 matrices"):
        tessel.matrix_exp(t(A))


def test_shape_helpers_against_numpy():
    a, v = np.arange(12.0).reshape(2, 6), np.arange(3.0)
    assert [x.numpy().tolist() for x in tessel.hsplit(t(a), 3)] == [x.tolist() for x in np.hsplit(a, 3)]
    assert [x.numpy().tolist() for x in tessel.hsplit(t(a), [1, 4])] == [x.tolist() for x in np.hsplit(a, [1, 4])]
    b = a.reshape(4, 3)
    assert [x.numpy().tolist() for x in tessel.vsplit(t(b), 2)] == [x.tolist() for x in np.vsplit(b, 2)]
    c = a.reshape(1, 2, 6)
    assert [x.numpy().tolist() for x in tessel.dsplit(t(c), [2])] == [x.tolist() for x in np.dsplit(c, [2])]
    with pytest.raises(RuntimeError, match="size of the dimension 6 is not divisible by the split_size 4"):
        tessel.hsplit(t(a), 4)
    with pytest.raises(RuntimeError, match="torch.dsplit requires a tensor with at least 3 dimension, but got a "
                                           "tensor with 2 dimensions"):
        tessel.dsplit(t(a), 2)
    assert [tuple(x.shape) for x in tessel.atleast_3d(t(1.0), t(v), t(a))] == \
        [x.shape for x in np.atleast_3d(1.0, v, a)]
    assert tuple(tessel.atleast_2d(t(v)).shape) == (1, 3) and tuple(tessel.atleast_1d(t(2.0)).shape) == (1,)
    close(tessel.column_stack([t(v), t(v * 2), t(v.reshape(3, 1))]), np.column_stack([v, v * 2, v.reshape(3, 1)]))
    close(tessel.dstack([t(a), t(-a)]), np.dstack([a, -a]))
    close(tessel.concat([t(a), t(a)], 1), np.concatenate([a, a], 1))
    close(tessel.fliplr(t(a)), np.fliplr(a))
    close(tessel.flipud(t(a)), np.flipud(a))
    with pytest.raises(RuntimeError, match="Input must be >= 2-d."):
        tessel.fliplr(t(v))
    close(t(a).t().ravel(), a.T.ravel())
    close(tessel.msort(t(A)), np.sort(A, 0))
    close(tessel.diagflat(t([[1.0, 2.0], [3.0, 4.0]]), 1), np.diagflat([[1.0, 2.0], [3.0, 4.0]], 1))
    idx = np.array([[0], [2]])
    close(tessel.take_along_dim(t(A), t(idx), 1), np.take_along_axis(A, idx, 1))
    close(tessel.take_along_dim(t(A), t([[2, 0, 1]]), 1), np.take_along_axis(A, np.array([[2, 0, 1]] * 2), 1))
    close(tessel.take_along_dim(t(A), t([5, 0])), A.reshape(-1)[[5, 0]])
    with pytest.raises(RuntimeError, match="should have the same number of dimensions"):
        tessel.take_along_dim(t(A), t([0]), 1)
    coords = tessel.unravel_index(t([4, 1, -1, 5]), (2, 3))
    assert [c.tolist() for c in coords] == [c.tolist() for c in np.unravel_index([4, 1, 5, 5], (2, 3))]
    with pytest.raises(RuntimeError, match="'indices' must be in range \\[-6, 6\\)"):
        tessel.unravel_index(t([6]), (2, 3))
    close(t(A).reshape_as(t(B.T)), A.reshape(3, 2))
    close(t(np.ones((2, 3, 4))).sum_to_size(3, 1), np.full((3, 1), 8.0))
    with pytest.raises(RuntimeError, match="size \\{\\[4\\]\\} is not expandable to size \\{\\[2, 3\\]\\}"):
        t(A).sum_to_size(4)
    assert tessel.is_nonzero(t([2.0])) and not tessel.is_nonzero(t([0.0]))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        tessel.is_nonzero(t(v))
    assert tessel.is_same_size(t(A), t(B)) and t(A).is_signed() and not (t(A) > 0).is_signed()
    close(t(A).real, A)  # an attribute, as torch's
    row = t(A[0])  # (values, indices) results named as torch.return_types names them
    assert [type(r).__name__ for r in (row.sort(), row.min(0), row.max(0), row.topk(2))] == ["sort", "min", "max",
                                                                                             "topk"]
    with pytest.raises(TypeError, match="imag is not implemented for tensors with non-complex dtypes"):
        t(A).imag


def test_out_of_place_scatters_and_their_gradients():
    x = np.arange(12.0).reshape(3, 4)
    src = np.array([-1.0, -2.0, -3.0, -4.0])
    want = x.copy()
    want[1] = src
    close(tessel.select_scatter(t(x), t(src), 0, 1), want)
    want = x.copy()
    want[:, 1:4:2] = [[9.0, 8.0]] * 3
    close(tessel.slice_scatter(t(x), t([[9.0, 8.0]] * 3), 1, 1, 4, 2), want)
    want = x.copy()
    want[[0, 1, 2], [1, 2, 3]] = [7.0, 8.0, 9.0]
    close(tessel.diagonal_scatter(t(x), t([7.0, 8.0, 9.0]), 1), want)
    weights = t(np.arange(1.0, 13.0).reshape(3, 4))
    check_grad(lambda z: (tessel.select_scatter(z, t(src), 0, 1) * weights).sum(), x)
    check_grad(lambda s: (tessel.slice_scatter(t(x), s, 1, 1, 4, 2) * weights).sum(), np.ones((3, 2)))
    check_grad(lambda s: (tessel.diagonal_scatter(t(x), s, 1) * weights).sum(), np.ones(3))
    with pytest.raises(RuntimeError, match="expected src to have a size equal to the slice of self. src size = "
                                           "\\[2\\], slice size = \\[4\\]"):
        tessel.select_scatter(t(x), t([1.0, 2.0]), 0, 0)


def test_cov_and_corrcoef_against_numpy_with_weights():
    data = RNG.standard_normal((3, 6))
    fw, aw = np.array([1, 2, 1, 3, 1, 2]), RNG.uniform(0.5, 2.0, 6)
    close(tessel.cov(t(data)), np.cov(data), 1e-12)
    close(tessel.cov(t(data), correction=0), np.cov(data, ddof=0), 1e-12)
    close(tessel.cov(t(data), fweights=t(fw)), np.cov(data, fweights=fw), 1e-12)
    close(tessel.cov(t(data), aweights=t(aw)), np.cov(data, aweights=aw), 1e-12)
    close(tessel.cov(t(data), fweights=t(fw), aweights=t(aw), correction=2),
          np.cov(data, fweights=fw, aweights=aw, ddof=2), 1e-12)
    close(tessel.cov(t(data[0])), np.cov(data[0]), 1e-12)
    close(tessel.corrcoef(t(data)), np.corrcoef(data), 1e-12)
    check_grad(lambda z: (tessel.cov(z, aweights=t(aw)) * t(np.arange(9.0).reshape(3, 3))).sum(), data)


def test_nan_order_statistics_and_histogram():
    nan = float("nan")
    x = np.array([[1.0, nan, 3.0, 2.0, 5.0], [nan] * 5, [4.0, 1.0, nan, 0.0, 2.0]])

    def lower_median(row):
        r = np.sort(row[~np.isnan(row)])
        return r[(len(r) - 1) // 2] if len(r) else nan
    got = tessel.nanmedian(t(x), 1)
    close(got.values, [lower_median(r) for r in x])
    assert got.indices[0].item() == 3 and got.indices[2].item() == 1  # where the medians sit in x
    close(tessel.nanmedian(t(x)), lower_median(x.reshape(-1)))
    for method in ("linear", "lower", "higher", "midpoint"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns about the all-NaN row (NaN, as torch gives)
            want = np.nanquantile(x, 0.4, axis=1, method=method)
        close(tessel.nanquantile(t(x), 0.4, dim=1, interpolation=method), want)
    close(tessel.nanquantile(t(x), t([0.25, 0.9])), np.nanquantile(x, [0.25, 0.9]))
    distinct = np.where(np.isnan(x), np.arange(15.0).reshape(3, 5) * 0.37 + 6.0, x)  # no ties: differentiable
    check_grad(lambda z: tessel.nanquantile(z, 0.3, dim=1).sum(), distinct)
    vals, w = np.array([1.0, 2.0, 1.0, 4.0, 2.5]), np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    hist, edges = tessel.histogram(t(vals), bins=3)
    want_h, want_e = np.histogram(vals, bins=3)
    close(hist, want_h)
    close(edges, want_e)
    hist, edges = tessel.histogram(t(vals), bins=4, range=(0.0, 4.0), weight=t(w), density=True)
    close(hist, np.histogram(vals, bins=4, range=(0.0, 4.0), weights=w, density=True)[0])
    hist, _ = tessel.histogram(t(vals), bins=t([0.0, 1.5, 5.0]))
    close(hist, [2.0, 3.0])


def test_window_functions_against_numpy():
    for n in (1, 5, 8):
        close(tessel.hann_window(n), np.hanning(n + 1)[:n] if n > 1 else [1.0], 1e-6)
        close(tessel.hann_window(n, periodic=False), np.hanning(n), 1e-6)
        close(tessel.hamming_window(n), np.hamming(n + 1)[:n] if n > 1 else [1.0], 1e-6)
        close(tessel.blackman_window(n, False), np.blackman(n), 1e-6)
        close(tessel.bartlett_window(n, False), np.bartlett(n), 1e-6)
        close(tessel.kaiser_window(n, False, 3.0), np.kaiser(n, 3.0), 1e-6)
    close(tessel.kaiser_window(6), np.kaiser(7, 12.0)[:6], 1e-6)
    assert tessel.hann_window(4, dtype=tessel.float64).dtype == tessel.float64
    assert tessel.hann_window(0).shape == (0,)


def test_top_level_nn_forms_take_torchs_argument_orders():
    x = t(np.arange(16.0, dtype=np.float32).reshape(1, 1, 4, 4))
    close(tessel.conv2d(x, tessel.ones(1, 1, 2, 2)), F.conv2d(x, tessel.ones(1, 1, 2, 2)))
    close(tessel.max_pool2d(x, 2), [[[[5.0, 7.0], [13.0, 15.0]]]])
    close(tessel.dropout(t(A), 0.5, False), A)
    close(tessel.layer_norm(t(A), [3]), (A - A.mean(1, keepdims=True)) / np.sqrt(A.var(1, keepdims=True) + 1e-5))
    weight = t(A)
    close(tessel.embedding(weight, t([1, 0, 1])), A[[1, 0, 1]])
    logits, target = np.array([1.0, 2.0, -3.0]), np.array([1.0, 0.0, 1.0])
    elementwise = np.log1p(np.exp(-np.abs(logits))) + np.maximum(logits, 0) - logits * target
    close(tessel.binary_cross_entropy_with_logits(t(logits), t(target)), elementwise, 1e-12)
    close(tessel.binary_cross_entropy_with_logits(t(logits), t(target), reduction=1), elementwise.mean(), 1e-12)
    close(tessel.binary_cross_entropy_with_logits(t(logits), t(target), reduction=2), elementwise.sum(), 1e-12)
    values, indices = tessel.adaptive_max_pool1d(t([[[1.0, 5.0, 2.0, 0.0]]]), 2)
    assert values.tolist() == [[[5.0, 2.0]]] and indices.tolist() == [[[1, 2]]]


UNARY = {"cos_": np.cos, "sin_": np.sin, "tan_": np.tan, "square_": np.square, "sign_": np.sign, "expm1_": np.expm1,
         "log1p_": lambda v: np.log1p(np.abs(v)), "exp2_": np.exp2, "sinh_": np.sinh, "atan_": np.arctan,
         "negative_": np.negative, "absolute_": np.abs, "deg2rad_": np.deg2rad, "frac_": lambda v: v - np.trunc(v),
         "rsqrt_": lambda v: 1 / np.sqrt(np.abs(v))}


def test_in_place_methods_write_their_out_of_place_results():
    for name, ref in UNARY.items():
        base = np.abs(A) if name in ("log1p_", "rsqrt_") else A
        x = t(base)
        assert getattr(x, name)() is x, name
        close(x, ref(base.astype(np.float64)), 1e-5)
    x = t(A)
    x.tril_()
    close(x, np.tril(A))
    x = t(A)
    x.cumsum_(1)
    close(x, np.cumsum(A, 1))
    x = t(A)
    x.eq_(t(A * (A > 0)))  # a comparison keeps the tensor's dtype: 1.0 / 0.0
    assert x.dtype == tessel.float32
    close(x, (A > 0).astype(np.float64))
    x = t(A)
    x.addmm_(t(B), t(np.eye(3, dtype=np.float32)))
    close(x, A + B)
    batch = RNG.standard_normal((2, 3, 3))
    x = t(batch)
    x.baddbmm_(t(batch), t(batch), beta=0.5, alpha=2.0)
    close(x, 0.5 * batch + 2.0 * batch @ batch, 1e-12)
    x = t([7, -7])
    x.div_(2, rounding_mode="trunc")
    assert x.dtype == tessel.int64 and x.tolist() == [3, -3]
    x = t([7.0, -7.0])
    x.divide_(2, rounding_mode="floor")
    assert x.tolist() == [3.0, -4.0]
    x = t([12, 18])
    x.gcd_(t([8, 12]))
    assert x.tolist() == [4, 6]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        t([4, 9]).rsqrt_()
    with pytest.raises(RuntimeError, match="output with shape \\[3\\] doesn't match the broadcast shape \\[2, 3\\]"):
        t(A[0]).hypot_(t(A))
    x = tessel.zeros(5, 3)
    x.fill_diagonal_(7.0)
    want = np.zeros((5, 3))
    np.fill_diagonal(want, 7.0)
    close(x, want)
    x = tessel.zeros(7, 3)
    x.fill_diagonal_(7.0, wrap=True)
    want = np.zeros((7, 3))
    np.fill_diagonal(want, 7.0, wrap=True)
    close(x, want)
    x = t(A)
    x.apply_(lambda z: z * 10 + 1)
    close(x, A * 10 + 1)


def test_in_place_methods_under_autograd_record_the_write():
    a = np.array([[0.3, -1.2, 1.4], [2.0, -0.4, 0.8]])

    def f(z):
        h = z * 1.0
        h.cos_()
        h.tril_()
        h[:, 1:].square_()  # through a view: the base gets CopySlices
        return (h * t(np.arange(1.0, 7.0).reshape(2, 3))).sum()
    check_grad(f, a)


def test_random_fills_have_their_distributions():
    tessel.manual_seed(0)
    n = 40000
    g = tessel.empty(n).geometric_(0.25).double()
    assert g.min().item() == 1.0 and abs(g.mean().item() - 4.0) < 0.1  # E = 1/p
    ln = tessel.empty(n).log_normal_(0.5, 0.25).double().log()
    assert abs(ln.mean().item() - 0.5) < 0.01 and abs(ln.std().item() - 0.25) < 0.01
    c = tessel.empty(n).cauchy_(2.0, 1.0).double()
    assert abs(c.median().item() - 2.0) < 0.05
    q = ((c - 2.0).abs() < 1.0).double().mean().item()  # P(|X - median| < sigma) = 1/2
    assert abs(q - 0.5) < 0.01
    b = tessel.empty(n).bernoulli_(0.3).double()
    assert set(np.unique(b.numpy()).tolist()) == {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.01



def test_uniform_draws_stay_below_their_bound_and_randint_is_exact_past_2_to_53():
    # A bfloat16 U[0, 1) draw rounded 1 - 2^-9 up to 1 (0.2% of them); randint over 2^62 went through a double,
    # so two thirds of its values were multiples of 512.
    tessel.manual_seed(1)
    for dt, top in ((tessel.bfloat16, 255 / 256), (tessel.float16, 2047 / 2048)):
        x = tessel.rand(1 << 16, dtype=dt).double()
        assert x.max().item() == top and x.min().item() >= 0
        w = tessel.empty(1 << 16, dtype=dt).uniform_(0.0, 1.0).double()
        assert w.max().item() == top
    v = tessel.randint(0, 2 ** 62, (20000,)).numpy()
    assert v.max() < 2 ** 62 and v.min() >= 0 and (v % 512 == 0).sum() < 100
    # normal_ / uniform_ / trunc_normal_ write in place (self returned) with their moments.
    n = tessel.empty(40000, dtype=tessel.float64)
    assert n.normal_(3.0, 0.5) is n and abs(n.mean().item() - 3.0) < 0.01 and abs(n.std().item() - 0.5) < 0.01
    t = tessel.empty(40000)
    assert tessel.nn.init.trunc_normal_(t, mean=0.0, std=1.0, a=-1.0, b=2.0) is t
    td = t.double()
    assert td.min().item() >= -1.0 and td.max().item() <= 2.0
    # E[X] of N(0, 1) on [-1, 2]: (phi(-1) - phi(2)) / (Phi(2) - Phi(-1)) = 0.2290
    assert abs(td.mean().item() - 0.2290) < 0.01
    with pytest.raises(RuntimeError, match="\"normal_kernel_cpu\" not implemented for 'Long'"):
        tessel.nn.init.trunc_normal_(tessel.zeros(3, dtype=tessel.int64))
    leaf = tessel.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="normal_: a leaf tensor that requires grad"):
        leaf.normal_()
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range, but found from=1 > to=0"):
        tessel.empty(3).uniform_(1.0, 0.0)
    with pytest.raises(RuntimeError, match="from is out of bounds for float"):
        tessel.empty(3).uniform_(-1e39, 1e39)  # (it gave inf and the dtype's max)
    with pytest.raises(RuntimeError, match="to is out of bounds for c10::Half"):
        tessel.empty(3, dtype=tessel.float16).uniform_(0, 1e5)
    with pytest.raises(RuntimeError, match=r"uniform_ expects to-from <= std::numeric_limits<Float>::max\(\)"):
        tessel.empty(3).uniform_(-3e38, 3e38)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std nan"):
        tessel.empty(3).normal_(0.0, float("nan"))
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds for int$"):  # torch's C type name
        tessel.randint(0, 2 ** 40, (4,), dtype=tessel.int32)
    with pytest.raises(RuntimeError, match="from is out of bounds for unsigned char"):
        tessel.empty(2, dtype=tessel.uint8).random_(-1, 3)
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds for short int"):
        tessel.randint(0, 2 ** 40, (4,), dtype=tessel.int16)
    assert tessel.empty(1 << 16, dtype=tessel.bfloat16).uniform_(0.0, 0.7).double().max().item() < 0.69921875


def test_version_is_torchs_api_level_and_orders_as_torchs():
    # A ported script's version gates: tessel mirrors torch 2.15 (tessel's own version as the local label).
    v = tessel.__version__
    assert v == "2.15.0+tessel.0.1.0" and v is tessel.version.__version__ and tessel.version.tessel == "0.1.0"
    assert v >= "2.9" and v > "2.1.0" and v >= (2, 1) and v < "2.16" and not v < "2.15"  # as str: "2.15" < "2.9"
    assert v >= "2.15.0a0" and v <= (2, 15, 0)
    assert tessel.version.cuda is None and tessel.version.hip is None and tessel.version.debug is False
    assert isinstance(v, str) and v.split("+")[0] == "2.15.0"

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
