"""Gradients of torch.linalg's factorizations (tessel/_linalg_grad.py) against central finite differences in
float64: inv, det, slogdet, solve (left, right, vectors, batches), cholesky and eigh along symmetric
perturbations (their inputs are symmetric), eigvalsh, svdvals, lu_factor / lu / lu_solve (square, tall, wide,
batched), cholesky_solve (torch's gradient over the whole factor); second derivatives through create_graph (the
Hessian of log det A is -A⁻ᵀ ⊗ A⁻¹; svdvals, lu); and the rest of torch.linalg's list against numpy: vander,
the *_ex forms with LAPACK's info, tensorinv, tensorsolve, matrix_exp, diagonal."""
import sys

import numpy as np
import pytest

import tessel
from sharded_equivalence import finite_difference

L = tessel.linalg
RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 3)) + 3 * np.eye(3)
S = A @ A.T + np.eye(3)  # symmetric positive definite, distinct eigenvalues
W = RNG.standard_normal((3, 3))


def t(a, **kw):
    return tessel.tensor(np.asarray(a, dtype=np.float64), **kw)


def analytic(f, *xs):
    ts = [t(x, requires_grad=True) for x in xs]
    f(*ts).backward()
    return [x.grad.numpy() for x in ts]


def numeric(f, xs, i):
    def of(v):
        args = [t(x) for x in xs]
        args[i] = t(v)
        return f(*args).item()
    return finite_difference(of, xs[i])


def check(f, *xs):
    for i, g in enumerate(analytic(f, *xs)):
        np.testing.assert_allclose(g, numeric(f, xs, i), rtol=1e-6, atol=1e-8)


def check_symmetric(f, s):
    """The gradient along every symmetric direction E_ij + E_ji (what a function of a symmetric matrix has)."""
    g = analytic(f, s)[0]
    for i in range(s.shape[0]):
        for j in range(i, s.shape[1]):
            e = np.zeros_like(s)
            e[i, j] = e[j, i] = 1.0
            step = 1e-6
            numerical = (f(t(s + step * e)).item() - f(t(s - step * e)).item()) / (2 * step)
            assert (g * e).sum() == pytest.approx(numerical, rel=1e-6, abs=1e-8), (i, j)
    np.testing.assert_allclose(g, g.T, rtol=1e-12, atol=1e-14)  # symmetric, as torch's


def test_inverse_determinant_and_solve_gradients():
    w = t(W)
    check(lambda a: (L.inv(a) * w).sum(), A)
    check(lambda a: L.det(a), A)
    check(lambda a: L.slogdet(a).logabsdet, A)
    check(lambda a: L.slogdet(-a).logabsdet * 2, A)  # a negative determinant: the same log |det|
    b = RNG.standard_normal((3, 2))
    check(lambda a, c: (L.solve(a, c) ** 2).sum(), A, b)
    check(lambda a, c: (L.solve(a, c) ** 2).sum(), A, b[:, 0])
    check(lambda a, c: (L.solve(a, c, left=False) * t(W[:2])).sum(), A, b.T)
    batch = np.stack([A, A.T + np.eye(3)])
    check(lambda a: (L.inv(a) ** 2).sum() + L.det(a).sum(), batch)
    assert L.slogdet(t(A)).sign.item() == np.sign(np.linalg.det(A))


def test_cholesky_and_eigen_gradients_along_symmetric_directions():
    w = t(W)
    check_symmetric(lambda s: (L.cholesky(s) * w).sum(), S)
    check_symmetric(lambda s: (L.cholesky(s, upper=True) * w).sum(), S)
    check_symmetric(lambda s: (L.eigh(s).eigenvalues * t([1.0, 2.0, 3.0])).sum(), S)
    # eigenvectors up to sign: |V| is sign-free
    check_symmetric(lambda s: (L.eigh(s).eigenvectors.abs() * w).sum(), S)
    check_symmetric(lambda s: (L.eigvalsh(s) ** 2).sum(), S)
    rect = RNG.standard_normal((4, 3))
    check(lambda a: (L.svdvals(a) ** 3).sum(), rect)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_gradients(upper, left, unit):
    b = RNG.standard_normal((3, 2) if left else (2, 3))
    weights = t(RNG.standard_normal(b.shape))

    def f(a, c):
        return (L.solve_triangular(a, c, upper=upper, left=left, unitriangular=unit) * weights).sum()
    ga, gb = analytic(f, A, b)
    np.testing.assert_allclose(gb, numeric(f, [A, b], 1), rtol=1e-6, atol=1e-8)
    # only A's triangle (strict, when unitriangular) is read: the gradient lives there, and matches there
    np.testing.assert_allclose(ga, numeric(f, [A, b], 0), rtol=1e-6, atol=1e-8)
    outside = np.tril(np.ones((3, 3)), -1 if not unit else 0) if upper else np.triu(np.ones((3, 3)), 1 if not unit
                                                                                     else 0)
    assert not (ga * outside).any()


def test_second_derivatives_through_create_graph():
    x = t(S, requires_grad=True)
    g, = tessel.autograd.grad(L.slogdet(x).logabsdet, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.linalg.inv(S).T, rtol=1e-10)
    v = RNG.standard_normal((3, 3))
    hv, = tessel.autograd.grad((g * t(v)).sum(), x)
    inv = np.linalg.inv(S)
    # d/dA <A⁻ᵀ, V> = -A⁻ᵀ Vᵀ A⁻ᵀ ... as a matrix: -(A⁻¹ V A⁻¹)ᵀ
    np.testing.assert_allclose(hv.numpy(), -(inv @ v @ inv).T, rtol=1e-9)
    g, = tessel.autograd.grad((L.inv(x) * t(W)).sum(), x, create_graph=True)
    hv, = tessel.autograd.grad((g * t(v)).sum(), x)
    np.testing.assert_allclose(hv.numpy(), numeric(lambda a: (tessel.autograd.grad(
        (L.inv(a.requires_grad_(True)) * t(W)).sum(), a)[0] * t(v)).sum(), [S], 0), rtol=1e-5, atol=1e-7)
    # through cholesky (whose backward solves triangular systems): d/dS of <∇ f(S), V> by finite differences
    def cholesky_grad_dot_v(s):
        y = s if s.requires_grad else s.requires_grad_(True)
        g, = tessel.autograd.grad((L.cholesky(y) ** 2).sum(), y, create_graph=True)
        return (g * t(v + v.T)).sum()
    x = t(S, requires_grad=True)
    hv, = tessel.autograd.grad(cholesky_grad_dot_v(x), x)
    np.testing.assert_allclose(hv.numpy(), numeric(cholesky_grad_dot_v, [S], 0), rtol=1e-5, atol=1e-7)
    # through svdvals (its backward recomputes the SVD through Svd's Function; it refused create_graph before)
    def svdvals_grad_dot_v(a):
        y = a if a.requires_grad else a.requires_grad_(True)
        g, = tessel.autograd.grad((L.svdvals(y) ** 2).sum() + L.svdvals(y).sum(), y, create_graph=True)
        return (g * t(v)).sum()
    x = t(A, requires_grad=True)
    hv, = tessel.autograd.grad(svdvals_grad_dot_v(x), x)
    np.testing.assert_allclose(hv.numpy(), numeric(svdvals_grad_dot_v, [A], 0), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 3), (2, 4, 3), (2, 2, 3)])
def test_lu_factor_and_lu_gradients(shape):
    # lu_factor / lu / lu_unpack raised NotImplementedError on an input that requires grad
    a = RNG.standard_normal(shape)
    w = RNG.standard_normal(shape)
    check(lambda x: (L.lu_factor(x).LU * t(w)).sum(), a)

    def of_factors(x):
        _, lower, upper = L.lu(x)
        return (lower * lower).sum() + (upper * upper * upper).sum()
    check(of_factors, a)
    x = t(a, requires_grad=True)  # second order: d/dA of <∇ of_factors, V>, by finite differences
    v = RNG.standard_normal(shape)

    def grad_dot_v(y):
        y = y if y.requires_grad else y.requires_grad_(True)
        g, = tessel.autograd.grad(of_factors(y), y, create_graph=True)
        return (g * t(v)).sum()
    hv, = tessel.autograd.grad(grad_dot_v(x), x)
    np.testing.assert_allclose(hv.numpy(), numeric(grad_dot_v, [a], 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("left,adjoint", [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve_gradients(left, adjoint):
    b = RNG.standard_normal((3, 2) if left else (2, 3))

    def f(a, rhs):
        lu, piv = L.lu_factor(a)
        x = L.lu_solve(lu, piv, rhs, left=left, adjoint=adjoint)
        return (x * x).sum()
    check(f, A, b)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_gradients_are_torchs_over_the_whole_factor(upper):
    factor = (np.triu(A) if upper else np.tril(A)) + np.eye(3)
    b = RNG.standard_normal((2, 3, 2))  # batched right-hand sides, one factor (its gradient summed over the batch)
    x = t(factor, requires_grad=True)
    rhs = t(b, requires_grad=True)
    out = tessel.cholesky_solve(rhs, x, upper=upper)
    gram = factor.T @ factor if upper else factor @ factor.T
    want = np.linalg.solve(gram, b)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10)
    (out * out).sum().backward()
    g_b = np.linalg.solve(gram, 2 * want)  # B̄ = (L Lᵀ)⁻¹ Ḡ, and L̄ = −(B̄ Xᵀ + X B̄ᵀ) L over all of L (torch's)
    common = (g_b @ want.transpose(0, 2, 1)).sum(0)
    common = common + common.T
    np.testing.assert_allclose(rhs.grad.numpy(), g_b, rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), -(factor @ common) if upper else -(common @ factor), rtol=1e-10)


def test_the_rest_of_torch_linalg():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(L.vander(t(x), N=4).numpy(), np.vander(x, 4, increasing=True))
    np.testing.assert_array_equal(L.vander(t(x)).numpy(), np.vander(x, increasing=True))
    singular = np.array([[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 2.0]]])
    inverse, info = L.inv_ex(t(singular))
    assert info.tolist() == [2, 0] and np.isnan(inverse[0].numpy()).all()  # LAPACK's first zero pivot: 2
    np.testing.assert_allclose(inverse[1].numpy(), [[1.0, 0.0], [0.0, 0.5]])
    lower, info = L.cholesky_ex(t([[4.0, 2.0, 0.0], [2.0, 5.0, 9.0], [0.0, 9.0, 1.0]]))
    assert info.dim() == 0 and info.item() == 3  # the third leading minor is the first not positive
    with pytest.raises(RuntimeError, match="not positive-definite"):
        L.cholesky_ex(t([[1.0, 2.0], [2.0, 1.0]]), check_errors=True)
    result, info = L.solve_ex(t(A), t([1.0, 2.0, 3.0]))
    assert info.item() == 0
    np.testing.assert_allclose(result.numpy(), np.linalg.solve(A, [1.0, 2.0, 3.0]), rtol=1e-12)
    a4 = RNG.standard_normal((6, 2, 3))
    np.testing.assert_allclose(L.tensorinv(t(a4), 1).numpy(), np.linalg.tensorinv(a4, 1), rtol=1e-10)
    b = RNG.standard_normal((2, 3))
    a5 = RNG.standard_normal((2, 3, 6))
    np.testing.assert_allclose(L.tensorsolve(t(a5), t(b)).numpy(), np.linalg.tensorsolve(a5, b), rtol=1e-10)
    w, v = np.linalg.eigh(S)
    np.testing.assert_allclose(L.matrix_exp(t(S)).numpy(), v @ np.diag(np.exp(w)) @ v.T, rtol=1e-12)
    np.testing.assert_array_equal(L.diagonal(t(np.arange(12.0).reshape(3, 4)), offset=1).numpy(), [1.0, 6.0, 11.0])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
