"""Values at the edges, compared with an independent reference: C's libm through Python's math module (atan2,
hypot), exact integer arithmetic in Python (wrapping scalars, integer powers), numpy, and the closed forms
torch 2.15 computes (lerp's two-sided formula, bool arithmetic as logical or / and). Each case is one a
side-by-side sweep against torch 2.15 found wrong before the fix."""
import math

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
    with pytest.raises(tessel.InvalidArgumentError, match="subtraction with two bool tensors"):
        a - b


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
