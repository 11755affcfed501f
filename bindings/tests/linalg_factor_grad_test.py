"""Gradients of torch.linalg's factorizations with more than one output or a rank condition: svd (U, S, Vh),
qr (tall, square, wide), pinv and lstsq's solution, each checked by central finite differences in float64
(tessel.autograd.gradcheck), on losses that do not depend on the sign choice of singular vectors or QR's
Householder signs; plus torch's refusals (qr mode='r', full_matrices SVD of a non-square matrix) and
second derivatives through svd and qr; cond's values (numpy) and gradients."""
import sys

import numpy as np
import pytest

import tessel
from tessel.autograd import gradcheck

RNG = np.random.default_rng(11)


def mat(*shape):
    return tessel.tensor(RNG.standard_normal(shape), dtype=tessel.float64, requires_grad=True)


def weights(*shape):
    return tessel.tensor(RNG.standard_normal(shape), dtype=tessel.float64)


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (4, 4), (2, 3, 2)])
def test_svd_gradients_by_finite_differences(shape):
    a = mat(*shape)
    k = min(shape[-2:])
    wu, ws, wv, wr = weights(*shape[:-1], k), weights(*shape[:-2], k), weights(*shape[:-2], k, shape[-1]), \
        weights(*shape)

    def loss(x):
        u, s, vh = tessel.linalg.svd(x, full_matrices=False)
        # squares are sign-invariant; the rank-2 reconstruction pairs each u_i with its v_i
        top = (u[..., :, :2] * s[..., None, :2]) @ vh[..., :2, :]
        return (u * u * wu).sum() + (s * ws).sum() + (vh * vh * wv).sum() + (top * wr).sum()

    assert gradcheck(loss, (a,), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_svd_full_matrices_square_and_tall():
    a, w = mat(3, 3), weights(3, 3)
    assert gradcheck(lambda x: (tessel.linalg.svd(x)[0] ** 2 * w).sum(), (a,), eps=1e-6, atol=1e-6)
    tall = mat(4, 2)
    u, s, vh = tessel.linalg.svd(tall)  # full_matrices=True: U is 4 x 4
    assert tuple(u.shape) == (4, 4)
    # U's extra columns (not unique) get no gradient, as torch's; the first two get the reduced U's
    reduced, w42 = tall.detach().clone().requires_grad_(True), weights(4, 2)
    (u[:, :2] ** 2 * w42).sum().backward()
    (tessel.linalg.svd(reduced, full_matrices=False)[0] ** 2 * w42).sum().backward()
    np.testing.assert_allclose(tall.grad.numpy(), reduced.grad.numpy(), rtol=1e-10, atol=1e-12)
    tall.grad = None
    u, s, vh = tessel.linalg.svd(tall)
    s.sum().backward()  # the singular values alone
    x = mat(3, 2)  # a second derivative through svd
    assert tessel.autograd.gradgradcheck(lambda y: (tessel.linalg.svd(y, full_matrices=False)[0] ** 2 * w[:, :2]).sum(),
                                         (x,), eps=1e-6, atol=1e-5, rtol=1e-3)
    np.testing.assert_allclose(tall.grad.numpy(), (u[:, :2] @ vh).detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (3, 5), (2, 4, 2)])
def test_qr_gradients_by_finite_differences(shape):
    a = mat(*shape)
    m, n = shape[-2:]
    k = min(m, n)
    wq, wr = weights(*shape[:-1], k), weights(*shape[:-2], k, n)

    def loss(x):
        q, r = tessel.linalg.qr(x)
        # q * r's diagonal sign pairs: scaling column i of Q and row i of R by the same sign leaves Q R fixed
        return ((q * q) * wq).sum() + ((r * r) * wr).sum() + (q @ r * tessel.ones_like(x)).sum() * 0.5

    assert gradcheck(loss, (a,), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_qr_refusals_and_second_derivative():
    a = mat(4, 3)
    _, r = tessel.linalg.qr(a, mode="r")
    np.testing.assert_allclose(np.abs(r.detach().numpy()), np.abs(np.linalg.qr(a.detach().numpy())[1]), rtol=1e-12)
    with pytest.raises(RuntimeError, match="not computed when mode='r'"):
        r.sum().backward()
    q, _ = tessel.linalg.qr(a, mode="complete")
    with pytest.raises(RuntimeError, match="mode='complete' and nrows > ncols"):  # (torch's RuntimeError)
        (q ** 2 * weights(4, 4)).sum().backward()
    wide = mat(3, 4)
    qc, rc = tessel.linalg.qr(wide, mode="complete")  # wide: complete is reduced, and differentiable
    (qc ** 2 * weights(3, 3)).sum().backward()
    assert wide.grad is not None
    x = mat(3, 3)  # a second derivative through qr: gradgradcheck's finite differences of the gradient
    assert tessel.autograd.gradgradcheck(lambda y: (tessel.linalg.qr(y)[1] ** 2).sum(), (x,), eps=1e-6, atol=1e-5,
                                         rtol=1e-3)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_pinv_and_lstsq_gradients_by_finite_differences(shape):
    a = mat(*shape)
    w = weights(*shape[::-1])
    assert gradcheck(lambda x: (tessel.linalg.pinv(x) * w).sum(), (a,), eps=1e-6, atol=1e-6, rtol=1e-4)
    b = mat(shape[0], 2)
    sol = tessel.linalg.lstsq(a, b).solution
    np.testing.assert_allclose(sol.detach().numpy(), np.linalg.lstsq(a.detach().numpy(), b.detach().numpy(),
                                                                      rcond=None)[0], rtol=1e-9, atol=1e-10)
    wb = weights(shape[1], 2)
    assert gradcheck(lambda x, y: (tessel.linalg.lstsq(x, y).solution * wb).sum(), (a, b), eps=1e-6, atol=1e-6,
                     rtol=1e-4)
    vec = mat(shape[0])
    assert tuple(tessel.linalg.lstsq(a, vec).solution.shape) == (shape[1],)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, float("inf")])
def test_cond_values_and_gradients(p):
    a = mat(4, 4)
    want = np.linalg.cond(a.detach().numpy(), p)
    np.testing.assert_allclose(tessel.linalg.cond(a, p).item(), want, rtol=1e-10)
    assert gradcheck(lambda x: tessel.linalg.cond(x, p), (a,), eps=1e-7, atol=1e-5, rtol=1e-4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
