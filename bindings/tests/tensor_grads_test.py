"""Gradients of torch.* tensor ops as torch 2.15 computes them, from a 630-case side-by-side sweep (float32 and
float64): the expected numbers are torch's (printed by the sweep's repros) or its derivatives.yaml formulas:
lgamma's gradient at 1 and 2 (digamma, not 0), atan2's on the y axis (-1/y), the full-reduction max / min /
median / nanmedian's evenly_distribute_backward (ties share, a NaN result's gradient goes to the NaNs),
linalg.eigh's eigenvalue gradient with repeated eigenvalues, p-norms' masks at zero, pow's base gradient at a
zero exponent, and pinverse's gradient (it was detached)."""
import math
import sys

import numpy as np
import pytest

import tessel as T

D = T.float64


def grad_of(f, values, dtype=D):
    x = T.tensor(values, dtype=dtype, requires_grad=True)
    f(x).sum().backward()
    return x.grad.tolist()


def test_lgamma_and_mvlgamma_gradients_at_one_and_two_are_digamma():
    g = grad_of(T.lgamma, [1.0, 2.0, 1.5])
    np.testing.assert_allclose(g, [-0.5772156649015328, 0.422784335098467, 0.036489973978576194], rtol=1e-10)
    assert T.lgamma(T.tensor([1.0, 2.0], dtype=D)).tolist() == [0.0, 0.0]  # the values stay exact
    np.testing.assert_allclose(grad_of(lambda x: T.mvlgamma(x, 2), [1.5, 2.0, 3.5]), [-0.5407, 0.4593, 2.0259],
                               atol=1e-4)


def test_atan2_on_the_y_axis_has_torchs_gradients():
    y = T.tensor([1.0, 2.0, -3.0, 0.5, 0.0], dtype=D, requires_grad=True)
    x = T.tensor([0.0, 0.0, 0.0, -0.0, 0.0], dtype=D, requires_grad=True)
    angle = T.atan2(y, x)
    assert angle.tolist()[:4] == [math.pi / 2, math.pi / 2, -math.pi / 2, math.pi / 2]
    angle.sum().backward()
    assert x.grad.tolist() == [-1.0, -0.5, 1 / 3, -2.0, 0.0]  # torch: -y / (x² + y²); 0 at the origin
    assert y.grad.tolist() == [0.0] * 5


def test_full_reductions_share_their_gradient_as_torchs_evenly_distribute_backward():
    assert grad_of(T.median, [2.0, 1.0, 2.0, 2.0, 5.0]) == pytest.approx([1 / 3, 0, 1 / 3, 1 / 3, 0])
    assert grad_of(T.nanmedian, [math.nan, math.nan, math.nan]) == pytest.approx([1 / 3] * 3)  # summed to 3 before
    assert grad_of(lambda x: x.max(), [1.0, math.nan, 3.0]) == [0.0, 1.0, 0.0]  # every entry NaN before
    assert grad_of(lambda x: x.min(), [1.0, math.nan, 3.0]) == [0.0, 1.0, 0.0]
    assert grad_of(lambda x: x.max(), [3.0, 1.0, 3.0]) == [0.5, 0.0, 0.5]
    assert grad_of(lambda x: T.median(x, 0).values, [2.0, 1.0, 2.0]) in ([1.0, 0.0, 0.0], [0.0, 0.0, 1.0])


def test_eigh_eigenvalue_gradient_with_repeated_eigenvalues():
    for a in (np.eye(2), np.diag([2.0, 2.0, 5.0])):
        g = grad_of(lambda m: T.linalg.eigh(m)[0], a.tolist())
        np.testing.assert_allclose(g, np.eye(len(a)), atol=1e-12)  # V diag(1) Vᵀ; all NaN before


def test_p_norms_are_masked_at_zero_and_pow_at_a_zero_exponent():
    for p in (3.0, 1.5, 0.5, -1.0):
        assert grad_of(lambda x: T.linalg.vector_norm(x, ord=p), [0.0, 0.0]) == [0.0, 0.0], p
    assert grad_of(lambda x: T.linalg.vector_norm(x, ord=0.5), [0.0, 1.0]) == [0.0, 1.0]
    np.testing.assert_allclose(grad_of(lambda x: T.linalg.vector_norm(x, ord=3.0), [1.0, 2.0]),
                               np.array([1.0, 4.0]) / 9.0 ** (2 / 3), rtol=1e-12)  # x|x| / norm²
    a = T.tensor([1.0, 2.0], dtype=D, requires_grad=True)
    T.dist(a, T.tensor([1.0, 3.0], dtype=D), p=0.5).backward()
    assert a.grad.tolist() == [0.0, -1.0]
    x = T.tensor([0.0, 1.0], dtype=D, requires_grad=True)
    e = T.tensor([0.0, 0.0], dtype=D, requires_grad=True)
    (x ** e).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0] and e.grad.tolist() == [0.0, 0.0]  # NaN at the zero base before


def test_det_and_slogdet_backward_through_a_singular_matrix():
    # it raised LinAlgError (the inverse); the gradient of det is the adjugate's transpose, through an SVD: torch
    # gives no error either (its rank n-1 2x2 gradient reads 0, the adjugate does not vanish there)
    g = grad_of(T.det, [[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_allclose(g, [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)
    assert grad_of(T.det, np.zeros((3, 3)).tolist()) == [[0.0] * 3] * 3
    batch = grad_of(T.det, [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]])
    np.testing.assert_allclose(batch[1], [[3.0, 0.0], [0.0, 2.0]], atol=1e-12)
    a = T.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=D, requires_grad=True)
    T.slogdet(a)[1].backward()
    assert all(math.isinf(v) for row in a.grad.tolist() for v in row)  # torch's: ±inf, not an error


def test_mode_with_nan_einsum_sublists_and_matrix_power_zero_as_torchs():
    m = T.mode(T.tensor([math.nan, 1.0, math.nan, 2.0]))  # it raised IndexError; torch: (nan, 0)
    assert math.isnan(m.values.item()) and m.indices.item() == 0
    x, y = T.arange(6.0).reshape(2, 3), T.arange(12.0).reshape(3, 4)
    assert T.einsum(x, [0, 1], y, [1, 2], [0, 2]).tolist() == T.einsum("ij,jk->ik", x, y).tolist()  # AttributeError
    assert T.einsum(x, [0, 1], [1]).tolist() == [3.0, 5.0, 7.0]
    a = T.ones(2, 2, requires_grad=True)
    eye = T.linalg.matrix_power(a, 0)  # torch's A⁰ requires grad (a zero gradient); backward raised before
    assert eye.tolist() == [[1.0, 0.0], [0.0, 1.0]] and eye.requires_grad
    eye.sum().backward()
    assert a.grad.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_fmod_and_remainder_by_infinity_and_float32_quantile_ranks():
    a = T.tensor([3.0, -3.0, 0.0, 2.5], requires_grad=True)
    b = T.tensor([math.inf, math.inf, -math.inf, -math.inf], requires_grad=True)
    f, r = T.fmod(a, b), T.remainder(a, b)  # NaN under autograd before (inf - inf in the gradient trick)
    assert f.tolist() == [3.0, -3.0, 0.0, 2.5] and r.tolist() == [3.0, math.inf, 0.0, -math.inf]
    (f.sum() + r.sum()).backward()
    assert a.grad.tolist() == [2.0] * 4 and b.grad.tolist() == [0.0, 1.0, 0.0, 1.0]  # torch's values
    x = T.arange(6.0)  # float32: q in float32 (0.2f · 5 is just above 1), as torch's ranks
    assert [T.quantile(x, q, interpolation="higher").item() for q in (0.2, 0.4, 0.6, 0.8)] == [2.0, 3.0, 4.0, 5.0]
    assert T.quantile(x, 0.7, interpolation="nearest").item() == 3.0
    assert T.quantile(x, 0.4, interpolation="midpoint").item() == 2.5
    assert T.nanquantile(x, 0.2, interpolation="higher").item() == 2.0
    assert T.quantile(x.double(), 0.2, interpolation="higher").item() == 1.0  # float64 keeps the decimal q


def test_maximum_and_minimum_send_a_nans_gradient_to_both_sides():
    a = T.tensor([math.nan, 1.0, 2.0, 3.0], requires_grad=True)
    b = T.tensor([1.0, math.nan, 2.0, 1.0], requires_grad=True)
    m = T.maximum(a, b)
    m.sum().backward()  # torch's masks (a < b, a > b) are both false at a NaN: each side keeps the gradient
    assert a.grad.tolist() == [1.0, 1.0, 0.5, 1.0] and b.grad.tolist() == [1.0, 1.0, 0.5, 0.0]
    assert all(math.isnan(v) for v in m.tolist()[:2]) and m.tolist()[2:] == [2.0, 3.0]


def test_pinverse_is_differentiable():
    a = T.tensor([[2.0, 0.0], [0.0, 4.0]], dtype=D, requires_grad=True)
    T.pinverse(a).sum().backward()  # d tr(1ᵀ A⁻¹) / dA = -(A⁻ᵀ 1 1ᵀ A⁻ᵀ)
    inv = np.diag([0.5, 0.25])
    np.testing.assert_allclose(a.grad.numpy(), -(inv.T @ np.ones((2, 2)) @ inv.T), rtol=1e-10)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
