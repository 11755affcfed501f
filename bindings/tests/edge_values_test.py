"""Values at the edges, compared with an independent reference: C's libm through Python's math module (atan2,
hypot), exact integer arithmetic in Python (wrapping scalars, integer powers), numpy, and the closed forms
torch 2.15 computes (lerp's two-sided formula, bool arithmetic as logical or / and). Each case is one a
side-by-side sweep against torch 2.15 found wrong before the fix."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.nn.functional as F

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, 1e-30, -1e30, INF, -INF, NAN, 0.5, -0.5, 2.0, -3.0]


def same(a, b):
    """Equal as IEEE values, NaN equal to NaN and the sign of a zero counted."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def grid(dtype=tessel.float64):
    y = tessel.tensor([[v] for v in EDGES], dtype=dtype)
    x = tessel.tensor([EDGES], dtype=dtype)
    return y, x


@pytest.mark.parametrize("name", ["atan2", "hypot"])
def test_atan2_and_hypot_match_libm_on_every_pair_of_edge_values(name):
    y, x = grid()
    got = getattr(tessel, name)(y, x).tolist()
    ref = getattr(math, name)
    for i, a in enumerate(EDGES):
        for j, b in enumerate(EDGES):
            want = ref(a, b)
            close = abs(got[i][j] - want) <= 1e-15 * max(1.0, abs(want))
            assert close or same(got[i][j], want), (name, a, b, got[i][j])
            if want == 0.0:
                assert same(got[i][j], want), (name, a, b, got[i][j])  # atan2(±0, -0) = ±pi, atan2(-0, 1) = -0


def test_atan2_of_nan_and_zero_is_nan_and_gradient_stays_finite():
    # atan2(nan, 0) gave 0 (a NaN y counted as a nonzero y on the x = 0 axis), hypot(nan, 0) gave 0
    assert math.isnan(tessel.atan2(tessel.tensor([NAN]), tessel.tensor([0.0])).item())
    assert math.isnan(tessel.hypot(tessel.tensor([NAN]), tessel.tensor([0.0])).item())
    y = tessel.tensor([1.0, -2.0], requires_grad=True)
    x = tessel.tensor([3.0, 0.5], requires_grad=True)
    tessel.atan2(y, x).sum().backward()
    for k, (a, b) in enumerate([(1.0, 3.0), (-2.0, 0.5)]):
        assert y.grad[k].item() == pytest.approx(b / (a * a + b * b), rel=1e-6)
        assert x.grad[k].item() == pytest.approx(-a / (a * a + b * b), rel=1e-6)


def test_lerp_is_torchs_two_sided_formula():
    start = tessel.tensor([0.1, 1e30, 1e8, -3.3, 2.0])
    end = tessel.tensor([0.3, 1.0, 1.0, 7.1, 4.0])
    # weight 1: exactly end (start + (end - start) * 1 lost 1 next to 1e30: it gave 0)
    assert tessel.lerp(start, end, 1.0).tolist() == end.tolist()
    w = tessel.tensor([0.25, 1.0, 0.75, 0.5, 0.49])
    got = tessel.lerp(start, end, w).tolist()
    s32 = np.array([0.1, 1e30, 1e8, -3.3, 2.0], np.float32)
    e32 = np.array([0.3, 1.0, 1.0, 7.1, 4.0], np.float32)
    w32 = np.array([0.25, 1.0, 0.75, 0.5, 0.49], np.float32)
    want = np.where(np.abs(w32) < 0.5, s32 + w32 * (e32 - s32), e32 - (e32 - s32) * (np.float32(1) - w32))
    assert got == want.tolist()


def test_clamp_with_a_nan_bound_is_nan_everywhere():
    x = tessel.tensor([0.0, -1.0, 5.0, INF], requires_grad=True)
    for out in (x.clamp(min=NAN), x.clamp(max=NAN), tessel.clamp(x, -1.0, NAN)):
        assert all(math.isnan(v) for v in out.tolist())
    x.clamp(min=NAN).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_bool_arithmetic_is_logical_as_torchs():
    a = tessel.tensor([True, True, False, False])
    b = tessel.tensor([True, False, True, False])
    assert (a + b).dtype == tessel.bool and (a + b).tolist() == [True, True, True, False]
    assert (a * b).dtype == tessel.bool and (a * b).tolist() == [True, False, False, False]
    assert (a + True).tolist() == [True] * 4 and (a * False).tolist() == [False] * 4
    assert (a * True).dtype == tessel.bool and (a * True).tolist() == a.tolist()
    assert (a + 2).dtype == tessel.int64 and (a + 2).tolist() == [3, 3, 2, 2]  # a Python int promotes to int64
    assert a.max().item() is True and b.min().item() is False and a.amax().dtype == tessel.bool
    assert a.reshape(2, 2).amin(1).tolist() == [True, False]
    v, i = tessel.tensor([[False, True, True], [False, False, False]]).max(1)
    assert v.tolist() == [True, False] and i.tolist() == [1, 0]  # the first maximum, as torch
    assert tessel.sign(a).dtype == tessel.bool and tessel.sign(a).tolist() == a.tolist()
    assert tessel.square(a).dtype == tessel.int64 and tessel.square(a).tolist() == [1, 1, 0, 0]
    assert (a ** 2).dtype == tessel.int64 and (a ** 2).tolist() == [1, 1, 0, 0]
    assert tessel.logsumexp(a, 0).item() == pytest.approx(math.log(2 * math.e + 2), rel=1e-6)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors is not supported"):
        a - b
    for bad in (lambda: a - True, lambda: a - 1, lambda: 1.5 - a, lambda: a - tessel.tensor([1, 0, 1, 0])):
        with pytest.raises(RuntimeError, match="with a bool tensor is not supported|with two bool tensors"):
            bad()  # torch refuses every subtraction with a bool operand (bool - True computed an XOR)


def test_a_python_int_wraps_into_a_narrow_integer_dtype():
    x = tessel.tensor([-2 ** 31, -7, 0, 2 ** 31 - 1], dtype=tessel.int32)
    assert (x + 2 ** 40).tolist() == x.tolist()  # 2**40 is 0 in int32 (it saturated to 2**31 - 1)
    assert (x + (2 ** 32 + 5)).tolist() == [-2 ** 31 + 5, -2, 5, -2 ** 31 + 4]
    u = tessel.tensor([0, 1, 7, 128, 200, 255], dtype=tessel.uint8)
    assert (u // -2).tolist() == [v // 254 for v in [0, 1, 7, 128, 200, 255]]  # -2 is 254 as uint8
    assert (u % -3).tolist() == [v % 253 for v in [0, 1, 7, 128, 200, 255]]
    assert (u * -1).tolist() == [(-v) % 256 for v in [0, 1, 7, 128, 200, 255]]


def test_integer_powers_with_negative_exponent_tensors():
    base = tessel.tensor([0, 1, -1, -1, 2, -3, 5])
    exp = tessel.tensor([-1, -5, -3, -4, -2, 3, 0])
    want = [0, 1, -1, 1, 0, -27, 1]  # torch's powi: 1 ** n = 1, (-1) ** n = ±1, other bases to a negative power 0
    assert tessel.pow(base, exp).tolist() == want
    assert (2 ** tessel.tensor([-1, 0, 3, 7], dtype=tessel.int8)).tolist() == [0, 1, 8, -128]
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        base ** -1  # a negative Python int exponent still raises, as torch


@pytest.mark.parametrize("dtype", [tessel.int8, tessel.uint8, tessel.int32, tessel.int64])
def test_hardtanh_and_relu6_keep_an_integer_dtype(dtype):
    vals = [0, 1, 2, 5, 6, 7, 100] + ([-100, -1] if dtype != tessel.uint8 else [])
    x = tessel.tensor(vals, dtype=dtype)
    assert F.relu6(x).dtype == dtype and F.relu6(x).tolist() == [min(max(v, 0), 6) for v in vals]
    assert F.hardtanh(x).dtype == dtype and F.hardtanh(x).tolist() == [min(max(v, -1), 1) for v in vals]


def test_logsumexp_of_integers_is_computed_in_float():
    x = tessel.tensor([-128, -1, 0, 100, 127], dtype=tessel.int8)
    want = 127 + math.log1p(sum(math.exp(v - 127) for v in [-128, -1, 0, 100]))
    out = tessel.logsumexp(x, 0)
    assert out.dtype == tessel.float32 and out.item() == pytest.approx(want, rel=1e-6)  # int8 x - max wrapped


# ---- special functions: references from mpmath 1.3 at 40 digits (torch 2.15's values where noted) -----------

def f64(values):
    return tessel.tensor(values, dtype=tessel.float64)


def test_polygamma_below_zero_by_reflection_and_its_poles():
    cases = [(1, -7.3, 14.951383181433921153), (2, -2.5, -0.108204051641727403), (3, -0.5, 193.40909103400243724),
             (1, 0.1, 101.4332991507927477), (2, 7.3, -0.021510814441620252037),
             (1, -1e6 - 0.25, 19.739207802179467237)]  # the last took a million recurrence steps
    for n, x, want in cases:
        assert tessel.polygamma(n, f64([x])).item() == pytest.approx(want, rel=1e-12), (n, x)
    # the poles: -inf for even n (torch's sign), at once even for -1e30 (it hung) and -inf (it raised
    # OverflowError); n = 1 is torch's trigamma formula, whose sin(pi x) at a pole is a rounding error, not 0: large
    # and finite below 0, NaN at -inf (torch 2.15's values)
    got = tessel.polygamma(1, f64([0.0, -3.0, -1e30, -INF])).tolist()
    assert got[:3] == [INF, 7.311989052578831e+31, 12.97825621408955] and math.isnan(got[3])
    assert tessel.polygamma(2, f64([-0.0, -2.0, -1e30])).tolist() == [-INF] * 3
    assert tessel.polygamma(1, f64([INF])).item() == 0.0
    assert tessel.polygamma(1, tessel.tensor([-2 ** 31, 5], dtype=tessel.int32)).tolist()[0] == 20.94628143310547


def test_zeta_poles_dominant_term_and_negative_q():
    z = tessel.special.zeta
    assert z(f64([3.0, 2.0, 4.0]), f64([-0.5, -7.3, -2.5])).tolist() == pytest.approx(
        [0.4143983221171599978, 14.951383181433921153, 32.457979369864603737], rel=1e-12)
    assert z(f64([1.5, 3.0, NAN]), f64([0.0, -2.0, -1e30])).tolist() == [INF, INF, INF]  # q at a pole
    assert z(f64([1e30, 1e30, INF]), f64([1.0, 0.5, 1.0])).tolist() == [1.0, INF, 1.0]  # q^-s alone
    assert math.isnan(z(f64([2.5]), f64([-0.5])).item())  # q < 0 needs an integer s


def test_ndtri_and_log_ndtr_far_tails():
    p = f64([1e-300, 1e-45, 1e-30, 1e-17, 0.5, 0.0, 1.0, -0.1])
    want = [-37.047096299361199237, -14.14518149252347501, -11.464024688443615727, -8.4937932241095980744, 0.0,
            -INF, INF, NAN]
    got = tessel.special.ndtri(p).tolist()
    for g, w in zip(got, want):
        assert same(g, w) or g == pytest.approx(w, rel=1e-14), (g, w)  # 1e-30 gave -inf
    x = f64([-1e30, -1000.0, -40.0, -10.0, 3.0])
    want = [-5.0000000000000001988e+59, -500007.82669481218431, -804.60844201375378817, -53.231285150512470578,
            -0.0013508099647481937988]
    assert tessel.special.log_ndtr(x).tolist() == pytest.approx(want, rel=1e-14)  # below -38 it gave -inf
    # their gradients are the closed forms: d ndtri/dp = sqrt(2 pi) exp(ndtri² / 2), d log_ndtr/dx = pdf / cdf
    q = f64([0.01, 0.3]).requires_grad_()
    tessel.special.ndtri(q).sum().backward()
    y = tessel.special.ndtri(q).detach().tolist()
    assert q.grad.tolist() == pytest.approx([math.sqrt(2 * math.pi) * math.exp(v * v / 2) for v in y], rel=1e-12)
    t = f64([-30.0, 0.5]).requires_grad_()
    tessel.special.log_ndtr(t).sum().backward()
    cdf = [0.5 * math.erfc(-v / math.sqrt(2)) for v in (-30.0, 0.5)]
    pdf = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in (-30.0, 0.5)]
    assert t.grad.tolist() == pytest.approx([a / b for a, b in zip(pdf, cdf)], rel=1e-12)


def test_digamma_i1_logit_and_tan_at_the_edges():
    # reflection with cot of x's fraction: pi x rounded for large |x| (it gave 40.7)
    assert tessel.digamma(f64([-4503599627370495.5])).item() == pytest.approx(36.04365338911715609, rel=1e-14)
    got = tessel.special.i1(f64([700.0, 800.0, INF, -INF])).tolist()
    assert got[0] == pytest.approx(1.5285003902339006881e+302, rel=1e-12) and got[1] == INF
    assert math.isnan(got[2]) and math.isnan(got[3])  # torch's i1(±inf) is NaN (its e^x · P(1/x) / sqrt(x))
    # logit with eps clamps to [eps, 1 - eps] in the input's dtype (torch's): 1 - 1e-6 is 0.99999899 in float32
    hi = float(np.float32(1) - np.float32(1e-6))
    out = tessel.logit(tessel.tensor([1.0, 2.0]), eps=1e-6).tolist()
    assert out == pytest.approx([math.log(hi / (1 - hi))] * 2, rel=1e-6) and out[0] < 13.81
    assert tessel.logit(tessel.tensor([1.0], dtype=tessel.float16), eps=1e-6).item() == INF  # 1 - eps is 1 there
    # an integer input rounds to float32 before tan (16777217 is 16777216 there)
    got = tessel.tan(tessel.tensor([2 ** 24 + 1, 7], dtype=tessel.int32)).tolist()
    assert got == pytest.approx([math.tan(16777216.0), math.tan(7.0)], rel=1e-6)


# ---- reductions -------------------------------------------------------------------------------------------

def test_quantile_is_nan_with_nan_and_interpolates_as_torchs_lerp():
    x = tessel.tensor([[3.0, NAN, 1.0, 2.0], [4.0, 1.0, 2.0, 3.0]])
    got = tessel.quantile(x, 0.5, dim=1).tolist()
    assert math.isnan(got[0]) and got[1] == 2.5  # the NaN row gave 2.0
    for how in ("linear", "lower", "higher", "nearest", "midpoint"):
        assert math.isnan(tessel.quantile(tessel.tensor([1.0, NAN]), 0.3, interpolation=how).item()), how
    # q = 0 at -inf next to a finite value: torch's lerp(-inf, 1, 0) = -inf + 0 * inf = NaN; lower keeps -inf
    y = tessel.tensor([-INF, 1.0, 2.0])
    assert math.isnan(tessel.quantile(y, 0.0).item())
    assert tessel.quantile(y, 0.0, interpolation="lower").item() == -INF


def test_var_std_and_cumsum_accumulate_in_float64():
    x = tessel.tensor([1e30, 1e30, -1e30, 1.0])
    vals = [1e30, 1e30, -1e30, 1.0]
    mean = sum(float(np.float32(v)) for v in vals) / 4
    var = sum((float(np.float32(v)) - mean) ** 2 for v in vals) / 3
    assert x.std().item() == pytest.approx(math.sqrt(var), rel=1e-6)  # it overflowed to inf in float32
    s, m = tessel.std_mean(x, correction=0)
    assert s.item() == pytest.approx(math.sqrt(var * 3 / 4), rel=1e-6) and m.item() == pytest.approx(mean, rel=1e-6)
    c = tessel.tensor([2.0 ** 24, 1.0, -2.0 ** 24, 1.0])
    assert tessel.var_mean(c)[1].item() == 0.5  # float32 sums lost the first 1 (0.25)
    assert c.cumsum(0).tolist() == [2.0 ** 24, 2.0 ** 24, 1.0, 2.0]  # a float64 running sum rounded at each step


def test_unique_keeps_each_nan_and_bfloat16_host_ops_work():
    x = tessel.tensor([2.0, NAN, 1.0, NAN, 2.0])
    values, inverse, counts = tessel.unique(x, return_inverse=True, return_counts=True)
    assert values.tolist()[:2] == [1.0, 2.0] and all(math.isnan(v) for v in values.tolist()[2:])
    assert inverse.tolist() == [1, 2, 0, 3, 1] and counts.tolist() == [1, 2, 1, 1]  # torch 2.15's answer
    b = tessel.tensor([2.5, -1.0, 7.0, 0.5], dtype=tessel.bfloat16)
    assert b.tolist() == [2.5, -1.0, 7.0, 0.5]  # tolist of bfloat16 raised (numpy has no bfloat16)
    v, i = b.sort()
    assert v.dtype == tessel.bfloat16 and v.tolist() == [-1.0, 0.5, 2.5, 7.0] and i.tolist() == [1, 3, 0, 2]
    assert b.topk(2).indices.tolist() == [2, 0] and b.argsort(descending=True).tolist() == [2, 0, 3, 1]
    assert b.median().item() == 0.5 and tessel.unique(b).dtype == tessel.bfloat16
    assert tessel.searchsorted(v, tessel.tensor([1.0], dtype=tessel.bfloat16)).tolist() == [2]
    h = tessel.histc(tessel.tensor([0.0, 1.0, 1.0], dtype=tessel.float16), bins=2, min=0, max=1)
    assert h.dtype == tessel.float16 and h.tolist() == [1.0, 2.0]  # float16's histogram is float16 (torch's)


# ---- linear algebra: torch.linalg's LU family, eig, tolerances; references from numpy's LAPACK ------------

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 3), (2, 3, 3)])
def test_lu_factor_lu_and_lu_unpack_rebuild_a_with_lapacks_pivots(shape):
    a = RNG.standard_normal(shape)
    LU, piv = tessel.linalg.lu_factor(f64(a))
    assert piv.dtype == tessel.int32 and LU.shape == shape
    P, L, U = tessel.linalg.lu(f64(a))
    p, l_, u = P.numpy(), L.numpy(), U.numpy()
    np.testing.assert_allclose(p @ l_ @ u, a, rtol=1e-12, atol=1e-12)
    k = min(shape[-2:])
    np.testing.assert_array_equal(np.diagonal(l_, axis1=-2, axis2=-1), np.ones(shape[:-2] + (k,)))
    np.testing.assert_array_equal(np.triu(l_[..., :k, :], 1), 0 * l_[..., :k, :])
    # partial pivoting: every multiplier is at most 1 in magnitude (the largest entry of its column led)
    assert np.abs(l_).max() <= 1.0 + 1e-15
    for got, want in zip(tessel.lu_unpack(LU, piv), (P, L, U)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_lu_solve_all_three_forms_and_singular_matrices():
    a, b = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 2))
    LU, piv = tessel.linalg.lu_factor(f64(a))
    np.testing.assert_allclose(tessel.linalg.lu_solve(LU, piv, f64(b)).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(tessel.linalg.lu_solve(LU, piv, f64(b), adjoint=True).numpy(),
                               np.linalg.solve(a.T, b), rtol=1e-10)
    np.testing.assert_allclose(tessel.linalg.lu_solve(LU, piv, f64(b.T), left=False).numpy(),
                               np.linalg.solve(a.T, b).T, rtol=1e-10)
    s = f64([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(RuntimeError, match=r"U\[2,2\] is zero"):  # torch's lu_factor raises; the _ex form reports
        tessel.linalg.lu_factor(s)
    LU, piv, info = tessel.linalg.lu_factor_ex(s)
    assert info.item() == 2 and LU.tolist() == [[2.0, 4.0], [0.5, 0.0]] and piv.tolist() == [2, 2]


def test_eig_and_eigvals_are_complex():
    rotation = f64([[0.0, -2.0], [2.0, 0.0]])  # eigenvalues ±2i
    w = tessel.linalg.eigvals(rotation)
    assert str(w.dtype).endswith("complex128")
    got = sorted(w.numpy().tolist(), key=lambda z: z.imag)
    assert got == [pytest.approx(-2j, abs=1e-12), pytest.approx(2j, abs=1e-12)]
    a = RNG.standard_normal((3, 3))
    values, vectors = tessel.linalg.eig(f64(a))
    vals, vecs = values.numpy(), vectors.numpy()
    np.testing.assert_allclose(a @ vecs, vecs * vals[None, :], rtol=1e-10, atol=1e-12)


def test_pinv_and_matrix_rank_tolerances():
    u, _ = np.linalg.qr(RNG.standard_normal((4, 4)))
    v, _ = np.linalg.qr(RNG.standard_normal((4, 4)))
    s = np.array([4.0, 1.0, 0.3, 1e-9])
    a = u @ np.diag(s) @ v.T
    for kwargs, kept in [({}, 4), (dict(atol=0.5), 2), (dict(rtol=0.1), 2), (dict(atol=0.2, rtol=0.01), 3),
                         (dict(rtol=1e-12), 4)]:
        want = v[:, :kept] @ np.diag(1 / s[:kept]) @ u[:, :kept].T
        np.testing.assert_allclose(tessel.linalg.pinv(f64(a), **kwargs).numpy(), want, rtol=1e-6, atol=1e-8)
        assert tessel.linalg.matrix_rank(f64(a), **kwargs).item() == kept, kwargs
    assert tessel.linalg.matrix_rank(f64(a), tol=0.5).item() == 2  # the old name of atol
    h = a @ a.T  # eigenvalues s²: 16, 1, 0.09, 1e-18; atol 0.5 keeps two
    np.testing.assert_allclose(tessel.linalg.pinv(f64(h), hermitian=True, atol=0.5).numpy(),
                               u[:, :2] @ np.diag(1 / s[:2] ** 2) @ u[:, :2].T, rtol=1e-8, atol=1e-10)


def test_cholesky_upper_reads_the_upper_triangle_and_cond_of_singular_matrices():
    m = RNG.standard_normal((4, 4))
    spd = m @ m.T + 4 * np.eye(4)
    junk = np.triu(spd) + np.tril(np.full((4, 4), 99.0), -1)  # only the upper triangle is A's
    u = tessel.linalg.cholesky(f64(junk), upper=True).numpy()
    np.testing.assert_allclose(u, np.linalg.cholesky(spd).T, rtol=1e-12)
    # its gradient reads the same triangle: a junk lower triangle gives the symmetric matrix's gradient
    w = f64([[1.0, 2.0], [3.0, 4.0]])
    grads = []
    for lower_value in (2.0, 7.0):
        x = f64([[4.0, 2.0], [lower_value, 3.0]]).requires_grad_()
        (tessel.linalg.cholesky(x, upper=True) * w).sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1]
    s = f64([[1.0, 2.0], [2.0, 4.0]])
    for p in ("fro", 1, -1, INF, -INF):
        assert tessel.linalg.cond(s, p).item() == INF, p  # it raised "Singular matrix"
    batch = tessel.linalg.cond(f64([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 1.0]]]), 1)
    assert batch.tolist() == [INF, 2.0]
    x = RNG.standard_normal((3, 4))
    assert tessel.norm(f64(x), p="nuc").item() == pytest.approx(np.linalg.svd(x, compute_uv=False).sum(), rel=1e-12)


def test_solve_triangular_substitutes_through_a_zero_diagonal():
    # row substitution as trsm: x0 = 1 / 0 = inf, x1 = (1 - 1 * inf) / 2 = -inf (numpy's solve raised)
    got = tessel.linalg.solve_triangular(f64([[0.0, 0.0], [1.0, 2.0]]), f64([[1.0], [1.0]]), upper=False)
    assert got.tolist() == [[INF], [-INF]]
    a, b = np.triu(RNG.standard_normal((4, 4))) + 3 * np.eye(4), RNG.standard_normal((4, 2))
    np.testing.assert_allclose(tessel.linalg.solve_triangular(f64(a), f64(b), upper=True).numpy(),
                               np.linalg.solve(a, b), rtol=1e-12)
    np.testing.assert_allclose(tessel.linalg.solve_triangular(f64(a.T), f64(b.T), upper=False, left=False).numpy(),
                               np.linalg.solve(a, b).T, rtol=1e-12)
    unit = np.tril(a.T, -1) + np.eye(4)
    np.testing.assert_allclose(
        tessel.linalg.solve_triangular(f64(a.T), f64(b), upper=False, unitriangular=True).numpy(),
        np.linalg.solve(unit, b), rtol=1e-12)


# ---- nn.functional and friends ----------------------------------------------------------------------------

def test_sum_dtype_round_decimals_and_cosine_similarity():
    assert tessel.tensor([100, 100], dtype=tessel.int8).sum(dtype=tessel.int8).tolist() == (200 + 128) % 256 - 128
    x = [1234.5678, 0.125, 2.675, -1234.5678, 1.005]
    for decimals in (2, 3, -3, 1):
        got = tessel.tensor(x, dtype=tessel.float16).round(decimals=decimals).tolist()
        x32, scale = np.float16(x).astype(np.float32), np.float32(10.0 ** abs(decimals))
        want = np.round(x32 / scale) * scale if decimals < 0 else np.round(x32 * scale) / scale
        assert got == want.astype(np.float16).astype(np.float64).tolist(), decimals  # x * 100 overflowed in float16
    assert all(math.isnan(v) for v in tessel.tensor([1.5, -2.0]).round(decimals=400).tolist())  # it raised
    big = F.cosine_similarity(tessel.tensor([[1e30, 1e30]]), tessel.tensor([[1e30, -1e30]]))
    assert big.tolist() == [0.0]  # normalized before the product (torch's order); it was inf / inf = NaN
    a, b = RNG.standard_normal((3, 5)), RNG.standard_normal((3, 5))
    want = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(F.cosine_similarity(f64(a), f64(b)).numpy(), want, rtol=1e-12)


def test_logit_with_eps_above_a_half_is_torchs_ternary():
    out = tessel.logit(tessel.tensor([0.3, 0.9], dtype=tessel.float64), eps=0.6).tolist()
    assert out == pytest.approx([math.log(0.6 / 0.4), math.log(0.4 / 0.6)], rel=1e-12)


def test_interpolate_keeps_a_dim_whose_size_is_kept_and_halves_exactly():
    img = tessel.arange(12.0).reshape(1, 1, 3, 4)
    out = F.interpolate(img, scale_factor=1.3, mode="bilinear").numpy()[0, 0]
    assert out.shape == (3, 5)
    dst = np.arange(5)
    src = np.maximum((dst + 0.5) / 1.3 - 0.5, 0.0)  # torch's source index along W (the given scale used as is)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, 3)
    rows = np.arange(12.0).reshape(3, 4)
    want = rows[:, lo] * (1 - (src - lo)) + rows[:, hi] * (src - lo)  # H: 3 -> 3 is copied (it was resampled)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    near = F.interpolate(tessel.arange(3.0).reshape(1, 1, 3), scale_factor=2.1, mode="nearest")
    assert near.reshape(-1).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 2.0]  # 1-D: floor(i / 2.1), as torch 2.15
    near2d = F.interpolate(tessel.arange(3.0).reshape(1, 1, 3, 1), scale_factor=(2.1, 1), mode="nearest")
    assert near2d.reshape(-1).tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]  # 2-D, 6 == 2 * 3: torch's i >> 1


def test_circular_pad_crops_first_and_integer_max_pool_and_p0_distances():
    x = tessel.arange(4.0).reshape(1, 1, 4)
    assert F.pad(x, (-1, 1), mode="circular").reshape(-1).tolist() == [1.0, 2.0, 3.0, 1.0]
    assert F.pad(x, (2, -1), mode="circular").reshape(-1).tolist() == [1.0, 2.0, 0.0, 1.0, 2.0]
    big = 2 ** 40 + 1
    p = tessel.tensor([[[[1, 5, big, 2], [3, -7, 0, 9]]]])
    out = F.max_pool2d(p, 2)
    assert out.dtype == tessel.int64 and out.reshape(-1).tolist() == [5, big]  # it raised for int64
    a, b = RNG.integers(0, 2, (3, 4)).astype(np.float32), RNG.integers(0, 2, (2, 4)).astype(np.float32)
    want = (a[:, None, :] != b[None, :, :]).sum(-1)
    assert tessel.cdist(tessel.tensor(a), tessel.tensor(b), p=0).tolist() == want.astype(np.float64).tolist()
    pw = [float((a[i] != a[j]).sum()) for i in range(3) for j in range(i + 1, 3)]
    assert F.pdist(tessel.tensor(a), p=0).tolist() == pw


def test_elu_family_uses_expm1_and_hardshrink_gives_plus_zero():
    x = tessel.tensor([-1e-10, -0.0, -2.0])
    # alpha (e^x - 1) through expm1: exp(-1e-10) - 1 is 0 in float32, expm1 keeps -1e-10; -0 stays -0 (torch's)
    selu_slope = 1.0507009873554805 * 1.6732632423543772
    for fn, k in [(F.elu, 1.0), (lambda t: F.celu(t, alpha=0.5), 1.0), (F.selu, selu_slope)]:
        got = fn(x).tolist()
        assert got[0] == pytest.approx(-1e-10 * k, rel=1e-5) and same(got[1], -0.0)
    assert F.elu(x).tolist()[2] == pytest.approx(math.expm1(-2.0), rel=1e-6)
    assert [math.copysign(1.0, v) for v in F.hardshrink(tessel.tensor([-0.1, 0.2, -0.0])).tolist()] == [1.0] * 3
    assert [math.copysign(1.0, v) for v in F.softshrink(tessel.tensor([-0.1, -0.0, 0.3])).tolist()] == [1.0] * 3
    assert [math.copysign(1.0, v) for v in F.logsigmoid(tessel.tensor([200.0, INF])).tolist()] == [1.0] * 2
    assert same(tessel.asinh(tessel.tensor([-0.0])).item(), -0.0)


def test_erfcx_of_nan_and_nextafter_in_bfloat16():
    # erfcx left NaN entries uninitialized (random values, differing run to run)
    got = tessel.special.erfcx(f64([NAN] * 17 + [0.0])).tolist()
    assert all(math.isnan(v) for v in got[:17]) and got[17] == 1.0
    a = tessel.tensor([0.0, 1.0, 1.0, -1.0, -0.0, INF, 2.0], dtype=tessel.bfloat16)
    b = tessel.tensor([1.0, 2.0, 0.0, 0.0, -1.0, 0.0, 2.0], dtype=tessel.bfloat16)
    step = 2.0 ** -7  # bfloat16's spacing at 1 (7 stored mantissa bits)
    want = [2.0 ** -133, 1.0 + step, 1.0 - step / 2, -1.0 + step / 2, -2.0 ** -133, 3.3895313892515355e+38, 2.0]
    assert tessel.nextafter(a, b).tolist() == want  # it raised (no numpy bfloat16)
    assert same(tessel.nextafter(tessel.tensor([0.0]), tessel.tensor([-0.0])).item(), -0.0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_sort_family_dims_and_index_dtypes_are_checked_as_torchs():
    # the C++ sort keys took dim modulo ndim, so argsort(dim=2) of a 2-D tensor sorted dim 0; topk's dim raised
    # "tuple index out of range"; index_select took a uint8 index as int64 (torch refuses all three)
    x = tessel.tensor([[3.0, 1.0], [2.0, 5.0]])
    for fn in (lambda: tessel.argsort(x, dim=2), lambda: tessel.argsort(x, dim=-3), lambda: tessel.sort(x, dim=2),
               lambda: tessel.topk(x, 1, dim=2)):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\]"):
            fn()
    np.testing.assert_array_equal(tessel.argsort(x, dim=-2).numpy(), [[1, 0], [0, 1]])
    for bad in (tessel.tensor([1, 0], dtype=tessel.uint8), tessel.tensor([1.0])):
        with pytest.raises(RuntimeError, match=r"index_select\(\): Expected dtype int32 or int64 for index"):
            tessel.index_select(x, 0, bad)
    np.testing.assert_array_equal(tessel.index_select(x, 0, tessel.tensor([1, 0], dtype=tessel.int32)).numpy(),
                                  [[2.0, 5.0], [3.0, 1.0]])


def test_int64_cumsum_wraps_on_overflow_as_torchs():
    big = tessel.tensor([2 ** 63 - 1, 1, 1])
    np.testing.assert_array_equal(tessel.cumsum(big, 0).numpy(), np.array([2 ** 63 - 1, -2 ** 63, -2 ** 63 + 1]))


def test_fill_of_int64_keeps_every_bit_of_a_python_int():
    # through a double, fill_(2**62 + 1) stored 2**62 (torch stores the int); strided views too
    np.testing.assert_array_equal(tessel.zeros(2, dtype=tessel.int64).fill_(2 ** 62 + 1).numpy(), [2 ** 62 + 1] * 2)
    view = tessel.zeros(3, 4, dtype=tessel.int64)[:, 1]
    view.fill_(-2 ** 60 - 7)
    np.testing.assert_array_equal(view.numpy(), [-2 ** 60 - 7] * 3)
    with pytest.raises(Exception, match="value cannot be converted to type int64_t without overflow"):
        tessel.zeros(2, dtype=tessel.int64).fill_(2 ** 64)
