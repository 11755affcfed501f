"""Complex tensors against torch 2.15, from the forty-first session's read-only sweep of complex code (rotary
embeddings, FFT-based losses and spectral layers, signal processing): Module.half() / float() keeping complex
buffers, abs() and its gradient at zero, real tensors with Python complex numbers, the float-class tests, the
factories, complex tensors as Tensors, indexing, numeric range, and the operations that were missing. Each expected
value below is what torch 2.15 printed for the same call (pasted from its output), never tessel's own.
"""
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn

C64 = tessel.complex64


def close(got, want, rtol=2e-6, atol=1e-7):
    got = got.tolist() if hasattr(got, "tolist") else got
    np.testing.assert_allclose(np.asarray(got, dtype=np.complex128), np.asarray(want, dtype=np.complex128),
                               rtol=rtol, atol=atol, equal_nan=True)


def raises(kind, fragment, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert fragment in str(info.value), str(info.value)
    return info.value


# ---- Module.half() / float() / double() / bfloat16() ------------------------------------------------------

class _Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("freqs_cis", tessel.polar(tessel.ones(2, 2), tessel.tensor([[0.5, 1.0], [1.5, 2.0]])),
                             persistent=False)
        self.register_buffer("scale", tessel.ones(2))


_FREQS_CIS = [[0.8775825500488281 + 0.4794255495071411j, 0.5403022766113281 + 0.8414709568023682j],
              [0.07073719799518585 + 0.9974949955940247j, -0.416146844625473 + 0.9092974066734314j]]  # torch's


def test_module_half_and_float_keep_complex_buffers_complex():
    # torch casts only the tensors whose is_floating_point() is true: a rotary table stays complex64 (it became
    # real, silently off by up to 2.0 in RoPE's output, with the "discards the imaginary part" warning)
    for name, real in (("half", tessel.float16), ("float", tessel.float32), ("double", tessel.float64),
                       ("bfloat16", tessel.bfloat16)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m = getattr(_Rotary(), name)()
        assert m.freqs_cis.dtype == C64 and m.scale.dtype == real, name
        close(m.freqs_cis, _FREQS_CIS, rtol=0, atol=0)
    m = _Rotary().to(tessel.float64)  # Module.to(dtype) does cast them, to their real part (torch's)
    assert m.freqs_cis.dtype == tessel.float64
    close(m.freqs_cis, [[0.8775825500488281, 0.5403022766113281], [0.07073719799518585, -0.416146844625473]], rtol=0,
          atol=0)



# ---- abs and its gradient -----------------------------------------------------------------------------------

def test_abs_gradient_is_zero_where_the_value_is_zero():
    # the composed sqrt(a² + b²) gave inf * 0 = NaN there, poisoning spectral losses of rfft(x).abs()
    x = tessel.ones(4, requires_grad=True)
    tessel.fft.rfft(x).abs().sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0, 1.0]  # torch's
    x = tessel.tensor([1.0, 0, 1, 0], requires_grad=True)
    tessel.fft.rfft(x).abs().mean().backward()
    close(x.grad, [0.6666666865348816, 0.0, 0.6666666865348816, 0.0], rtol=1e-7)  # torch's
    w = tessel.zeros(3, dtype=C64, requires_grad=True)
    tessel.linalg.vector_norm(w).backward()
    assert w.grad.tolist() == [0j, 0j, 0j]  # torch's
    w = tessel.complex(tessel.tensor([0.0, 3.0]), tessel.tensor([0.0, -4.0])).detach().requires_grad_()
    w.abs().sum().backward()
    close(w.grad, [0j, 0.6000000238418579 - 0.800000011920929j])  # torch's


def test_abs_keeps_float32_range_and_hypot_rules():
    z = tessel.complex(tessel.tensor([3e20, 3e-25, float("inf"), 0.0]),
                       tessel.tensor([4e20, 4e-25, float("nan"), -0.0]))
    close(z.abs(), [5.000000100204387e+20, 5.000000097707407e-25, float("inf"), 0.0], rtol=0, atol=0)  # torch's


# ---- real tensors with Python complex numbers ---------------------------------------------------------------

def test_real_tensor_operators_take_python_complex_numbers():
    t = tessel.tensor([1.0, 2.0])
    cases = {  # torch's values, all complex64 but the float64 one (TypeError here: the operators took no complex)
        "t*1j": (t * 1j, [1j, 2j]), "1j*t": (1j * t, [1j, 2j]), "t+1j": (t + 1j, [1 + 1j, 2 + 1j]),
        "t/1j": (t / 1j, [-1j, -2j]), "1j/t": (1j / t, [1j, 0.5j]), "t-1j": (t - 1j, [1 - 1j, 2 - 1j]),
        "1j-t": (1j - t, [-1 + 1j, -2 + 1j]), "mul": (tessel.mul(t, 1j), [1j, 2j]),
        "add": (tessel.add(t, 2j), [1 + 2j, 2 + 2j]), "int": (tessel.tensor([1, 2]) * 1j, [1j, 2j]),
        "exp": (tessel.exp(1j * t), [0.5403022766113281 + 0.8414709568023682j,
                                     -0.416146844625473 + 0.9092974066734314j]),
        "pow": (t ** 1j, [1 + 0j, 0.7692388892173767 + 0.6389612555503845j]),
    }
    for name, (got, want) in cases.items():
        assert got.dtype == C64, name
        close(got, want)
    f64 = tessel.tensor([1.0, 2.0], dtype=tessel.float64) * (1 + 1j)
    assert f64.dtype == tessel.complex128 and f64.tolist() == [1 + 1j, 2 + 2j]
    # elementwise comparisons, bool tensors (t == 1j was the Python bool False)
    assert (t == 1j).tolist() == [False, False] and (t != 1j).tolist() == [True, True]
    assert (t == (2 + 0j)).tolist() == [False, True]


# ---- angle, tan, conj_physical, the float-class tests ----------------------------------------------------------

Z = [1.0 + 0.5j, 2.0 - 1.0j, -3.0 + 2.0j]


def _z():
    return tessel.complex(tessel.tensor([1.0, 2.0, -3.0]), tessel.tensor([0.5, -1.0, 2.0]))


def test_angle_tan_and_conj_physical_of_complex_tensors():
    z = _z()
    close(tessel.angle(z), [0.46364760398864746, -0.46364760398864746, 2.5535900592803955])  # torch's
    tan = tessel.tan(z)  # (both used the real part alone)
    assert tan.dtype == C64
    close(tan, [0.8068774342536926 + 1.0428307056427002j, -0.24345821142196655 - 1.1667362451553345j,
                0.009884374216198921 + 0.965385913848877j])  # torch's
    assert tessel.conj_physical(z).tolist() == [1 - 0.5j, 2 + 1j, -3 - 2j]  # torch's (it returned z unconjugated)


def test_float_class_tests_of_complex_tensors():
    nan, inf = float("nan"), float("inf")
    w = tessel.complex(tessel.tensor([1.0, nan, inf, 0.0]), tessel.tensor([nan, 0.0, 0.0, inf]))
    assert tessel.isinf(w).tolist() == [False, False, True, True]  # torch's (tessel's was isnan's answer)
    assert tessel.isfinite(w).tolist() == [False, False, False, False]  # torch's
    assert tessel.isnan(w).tolist() == [True, True, False, False]
    real = tessel.complex(tessel.tensor([1.0, 2.0]), tessel.tensor([0.0, 1.0]))
    assert tessel.isreal(real).tolist() == [True, False]  # torch's (always True here)
    raises(TypeError, "isposinf does not support complex inputs.", tessel.isposinf, w)


# ---- factories and complex tensors as Tensors --------------------------------------------------------------

def test_like_factories_of_complex_tensors():
    z = _z()  # (each raised AttributeError: 'ComplexTensor' object has no attribute 'is_distributed')
    assert tessel.zeros_like(z).dtype == C64 and tessel.zeros_like(z).tolist() == [0j, 0j, 0j]
    assert tessel.ones_like(z).tolist() == [1 + 0j, 1 + 0j, 1 + 0j]
    assert tessel.full_like(z, 2j).tolist() == [2j, 2j, 2j]
    assert tessel.empty_like(z).dtype == C64 and tuple(tessel.empty_like(z).shape) == (3,)
    assert tessel.zeros_like(tessel.tensor([1.0, 2.0]), dtype=tessel.cfloat).tolist() == [0j, 0j]


def test_complex_tensors_are_tensors_to_generic_code():
    z = _z()
    assert isinstance(z, tessel.Tensor) and tessel.is_tensor(z)  # torch's: True, True
    copy = tessel.tensor(z)
    assert copy.dtype == C64 and copy.tolist() == Z and copy._r is not z._r
    assert tessel.as_tensor(z) is z and tessel.tensor(z, dtype=tessel.complex128).dtype == tessel.complex128
    a = np.asarray(z)
    assert a.dtype == np.complex64 and a.tolist() == Z  # (an object array)
    scaled = np.float64(2.0) * z  # numpy defers to the tensor (an ndarray came back)
    assert isinstance(scaled, tessel.Tensor) and scaled.tolist() == [2 + 1j, 4 - 2j, -6 + 4j]  # torch's
    assert tessel.allclose(z, z * (1 + 1e-7)) and not tessel.allclose(z, z * 1.001)  # torch's: True, False
    nan, inf = float("nan"), float("inf")
    w = tessel.complex(tessel.tensor([1.0, nan, inf, 0.0]), tessel.tensor([nan, 0.0, 0.0, inf]))
    assert tessel.isclose(w, w).tolist() == [False, False, True, True]  # torch's
    assert tessel.isclose(w, w, equal_nan=True).tolist() == [True, True, True, True]  # torch's
    raises(RuntimeError, "ComplexFloat did not match Float", tessel.allclose, z, z.real)
    tessel.testing.assert_close(z, z * (1 + 1e-7))
    err = raises(AssertionError, "Tensor-likes are not close!", tessel.testing.assert_close, z, z * 1.001)
    assert "Mismatched elements: 3 / 3 (100.0%)" in str(err)
    assert "Greatest absolute difference: 0.00360581" in str(err) and "at index (2,) (up to 1e-05 allowed)" in str(err)
    assert "Greatest relative difference: 0.00099907" in str(err)  # torch's: 0.0036058188..., 0.0009990750...



# ---- indexing, construction, copies -------------------------------------------------------------------------

def test_indexing_with_masks_tensors_and_ellipsis():
    a = tessel.complex(tessel.arange(6.0).view(2, 3), tessel.ones(2, 3))
    assert a[a.real > 1].tolist() == [2 + 1j, 3 + 1j, 4 + 1j, 5 + 1j]  # torch's (a 2-d mask raised IndexError)
    assert a[0, a[0].real > 0].tolist() == [1 + 1j, 2 + 1j]
    assert a[..., 1].tolist() == [1 + 1j, 4 + 1j] and tuple(a[None, :, 1].shape) == (1, 2)
    assert a[:, ::2].tolist() == [[1j, 2 + 1j], [3 + 1j, 5 + 1j]]
    assert a[tessel.tensor([1, 0])].tolist() == [[3 + 1j, 4 + 1j, 5 + 1j], [1j, 1 + 1j, 2 + 1j]]  # torch's


def test_complex_broadcasts_and_checks_dtypes_as_torch():
    assert tessel.complex(tessel.tensor([1.0, 2.0]), tessel.tensor(3.0)).tolist() == [1 + 3j, 2 + 3j]  # torch's
    raises(RuntimeError, "Expected object of scalar type Float but got scalar type Double for second argument",
           tessel.complex, tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, 4.0], dtype=tessel.float64))
    raises(NotImplementedError, "Expected both inputs to be Half, Float or Double tensors but got Long and Long",
           tessel.complex, tessel.tensor([1, 2]), tessel.tensor([3, 4]))


def test_copy_and_load_state_dict_take_real_tensors():
    z = _z()
    z.copy_(tessel.ones(3))  # (ValueError: only one element tensors can be converted to Python scalars)
    assert z.tolist() == [1 + 0j, 1 + 0j, 1 + 0j]  # torch's

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("fc", tessel.zeros(3, dtype=C64))
    m = M()
    m.load_state_dict({"fc": tessel.ones(3)})
    assert m.fc.dtype == C64 and m.fc.tolist() == [1 + 0j, 1 + 0j, 1 + 0j]  # torch's


def test_view_as_complex_and_view_as_real_checks_and_views():
    raises(RuntimeError, "Tensor must have a stride divisible by 2 for all but last dimension",
           tessel.view_as_complex, tessel.zeros(3, 3)[:, 1:])
    raises(RuntimeError, "Tensor must have a storage_offset divisible by 2", tessel.view_as_complex,
           tessel.zeros(7)[1:].view(3, 2))
    raises(TypeError, "view_as_complex is not supported for complex tensors", tessel.view_as_complex, _z())
    raises(TypeError, "view_as_real is only supported for complex tensors", tessel.view_as_real, tessel.ones(2))
    raises(NotImplementedError, "view_as_complex is only supported for half, float and double tensors, but got a "
           "tensor of scalar type: Long", tessel.view_as_complex, tessel.ones(2, 2, dtype=tessel.int64))
    raises(RuntimeError, "Input tensor must have one or more dimensions", tessel.view_as_complex, tessel.tensor(1.0))
    x = tessel.ones(3, 2)
    r = tessel.view_as_real(tessel.view_as_complex(x))
    assert r is not x and r.grad_fn is None  # torch's: a new view (it was x itself)
    r[0, 1] = 5.0
    assert x[0, 1].item() == 5.0
    z = _z()
    assert isinstance(z.shape, tessel.Size) and z.shape.numel() == 3 and z.size() == (3,)  # torch's Size


def test_statistics_of_complex_tensors_keep_the_imaginary_part():
    z4 = tessel.complex(tessel.tensor([1.0, 2.0, -3.0, 0.5]), tessel.tensor([0.5, -1.0, 2.0, 0.25]))
    (g,) = tessel.gradient(z4)  # (each cast to float32 and dropped the imaginary parts)
    assert g.dtype == C64 and g.tolist() == [1 - 1.5j, -2 + 0.75j, -0.75 + 0.625j, 3.5 - 1.75j]  # torch's
    assert tessel.gradient(z4, spacing=2.0)[0].tolist() == [0.5 - 0.75j, -1 + 0.375j, -0.375 + 0.3125j,
                                                           1.75 - 0.875j]  # torch's
    close(tessel.cov(z4), 6.2447919845581055 + 0j)  # torch's
    close(tessel.corrcoef(z4), 1 + 0j)
    zz = tessel.stack([z4, z4 * 1j + 1])
    close(tessel.cov(zz), [[6.2447919845581055 + 0j, -6.2447919845581055j],
                           [6.2447919845581055j, 6.2447919845581055 + 0j]])  # torch's: the adjoint's product
    close(tessel.corrcoef(zz), [[1 + 0j, -1j], [1j, 1 + 0j]])
    close(tessel.cov(zz, correction=0), [[4.68359375 + 0j, -4.68359375j], [4.68359375j, 4.68359375 + 0j]])


# ---- numeric range and signed zeros --------------------------------------------------------------------------

def test_division_keeps_range_and_torchs_zero_divisor():
    big = tessel.complex(tessel.tensor([1e30, 1e-30]), tessel.tensor([1e30, 1e-30]))
    assert (big / big).tolist() == [1 + 0j, 1 + 0j]  # torch's (the 1 / |b|² form gave nan+nanj)
    zero = tessel.complex(tessel.tensor(0.0), tessel.tensor(0.0))
    assert str((_z() / zero).tolist()) == "[(inf+infj), (inf-infj), (-inf+infj)]"  # torch's
    z = _z()
    assert (z / tessel.tensor([3.0, 7.0, 11.0])).tolist() == [
        0.3333333432674408 + 0.1666666716337204j, 0.2857142984867096 - 0.1428571492433548j,
        -0.27272728085517883 + 0.1818181872367859j]  # torch's, to the bit (a times the divisor's reciprocal)
    assert (z / (1 + 2j)).tolist() == [0.4000000059604645 - 0.30000001192092896j, -1j,
                                       0.20000000298023224 + 1.600000023841858j]  # torch's
    close(3.0 / z, [2.4000000953674316 - 1.2000000476837158j, 1.2000000476837158 + 0.6000000238418579j,
                    -0.6923076510429382 - 0.4615384340286255j])  # torch's
    close(tessel.tensor([3.0, 7.0, 11.0]) / z, [2.4000000953674316 - 1.2000000476837158j,
                                              2.799999952316284 + 1.399999976158142j,
                                              -2.538461446762085 - 1.6923075914382935j])  # torch's


def test_real_times_complex_keeps_torchs_signed_zeros():
    one = tessel.complex(tessel.tensor([1.0]), tessel.tensor([0.0]))
    assert (tessel.tensor([-2.0]) * one).angle().item() == 3.1415927410125732  # torch's (-pi here: -0.0 imag)
    both = tessel.complex(tessel.tensor([1.0, -1.0]), tessel.tensor([0.0, 0.0]))
    parts = tessel.view_as_real(tessel.tensor([-2.0, -2.0]) * both).tolist()
    assert parts == [[-2.0, 0.0], [2.0, -0.0]] and [np.signbit(p[1]) for p in parts] == [False, True]  # torch's



def test_logical_ops_and_the_functions_torch_refuses_for_complex():
    z = _z()
    zero = tessel.complex(tessel.tensor([0.0, 1.0]), tessel.tensor([0.0, 0.0]))
    assert tessel.logical_and(z, z).tolist() == [True, True, True]  # torch's (z itself came back)
    assert tessel.logical_xor(z, z).tolist() == [False, False, False]  # torch's (all True)
    assert tessel.logical_not(zero).tolist() == [True, False]
    assert tessel.logical_or(zero, tessel.zeros(2)).tolist() == [False, True]
    close(tessel.dist(z, z * 2, 1), 6.959653377532959)  # torch's
    close(tessel.dist(z, z * 2), 4.387482166290283)
    assert tessel.ldexp(z, tessel.tensor([1, 2, 3])).tolist() == [2 + 1j, 8 - 4j, -24 + 16j]
    raises(NotImplementedError, "Unsupported input type encountered for isin(): ComplexFloat", tessel.isin, z, z)
    raises(NotImplementedError, "deg2rad is not supported for complex tensors.", tessel.deg2rad, z)
    raises(NotImplementedError, "rad2deg is not supported for complex tensors.", tessel.rad2deg, z)
    raises(NotImplementedError, "\"lt_cpu\" not implemented for 'ComplexFloat'", lambda: z < z)
    assert z.to(tessel.bool).tolist() == [True, True, True]


# ---- the operations that were missing ---------------------------------------------------------------------------

def _m():
    return tessel.complex(tessel.tensor([[1.0, 2.0], [-3.0, 0.5]]), tessel.tensor([[0.5, -1.0], [2.0, 0.25]]))


def _z4():
    return tessel.complex(tessel.tensor([1.0, 2.0, -3.0, 0.5]), tessel.tensor([0.5, -1.0, 2.0, 0.25]))


def test_reductions_of_complex_tensors():
    z, m = _z(), _m()
    assert z.sum().item() == 1.5j and tessel.sum(m, 0).tolist() == [-2 + 2.5j, 2.5 - 0.75j]  # torch's
    assert m.sum(1, keepdim=True).tolist() == [[3 - 0.5j], [-2.5 + 2.25j]]
    assert m.mean().item() == 0.125 + 0.4375j and tessel.mean(m, dim=1).tolist() == [1.5 - 0.25j, -1.25 + 1.125j]
    assert m.prod().item() == -5 + 0.625j and tessel.prod(m, 1).tolist() == [2.5 + 0j, -2 + 0.25j]
    assert z.prod().item() == -7.5 + 5j
    assert tessel.cumsum(m, 0).tolist() == [[1 + 0.5j, 2 - 1j], [-2 + 2.5j, 2.5 - 0.75j]]
    assert tessel.cumprod(_z4(), 0).tolist() == [1 + 0.5j, 2.5 + 0j, -7.5 + 5j, -5 + 0.625j]
    close(m.var(), 6.244791507720947)  # torch's: real, the parts' variances summed
    close(tessel.std(m), 2.498958110809326)
    assert m.var(0, unbiased=False).tolist() == [4.5625, 0.953125]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's "discards the imaginary part")
        assert m.sum(dtype=tessel.float32).item() == 0.5  # torch's: the real parts' sum


def test_products_of_complex_tensors():
    z, m = _z(), _m()
    want = [[-3.25 + 8j, 3.75 + 0j], [-6 + 0.75j, -3.8125 + 7.25j]]  # torch's
    assert (m @ m).tolist() == want and tessel.matmul(m, m).tolist() == want and tessel.mm(m, m).tolist() == want
    assert tessel.bmm(m[None], m[None]).tolist() == [want]
    assert (m @ z[:2]).tolist() == [3.75 - 3j, -2.75 + 0.5j] and (z @ z).item() == 8.75 - 15j
    assert tessel.einsum("ij,jk,kl->il", m, m, m).tolist() == [[-18.5 + 13.875j, 3.375 + 20.1875j],
                                                                [-9.4375 - 31.625j, -14.96875 + 10.171875j]]
    assert tessel.einsum("ii->", m).item() == 1.5 + 0.75j
    assert tessel.dot(z, z).item() == 8.75 - 15j and tessel.vdot(z, z).item() == 19.25 + 0j
    assert tessel.outer(z[:2], z[1:]).tolist() == [[2.5 + 0j, -4 + 0.5j], [3 - 4j, -4 + 7j]]
    # torch has no mixed complex x real GEMM
    raises(RuntimeError, "expected m1 and m2 to have the same dtype, but got: c10::complex<float> != float",
           lambda: m @ tessel.ones(2, 2))
    raises(RuntimeError, "expected m1 and m2 to have the same dtype, but got: float != c10::complex<float>",
           lambda: tessel.ones(2, 2) @ m)
    raises(RuntimeError, "expected scalar type ComplexFloat but found Float", tessel.einsum, "ij,jk->ik", m,
           tessel.ones(2, 2))
    raises(RuntimeError, "but got: c10::complex<float> != c10::complex<double>", lambda: m @ m.to(tessel.complex128))


_MATH = {  # torch's values for z = [1+0.5j, 2-1j, -3+2j]
    "exp": [2.38551664352417 + 1.3032137155532837j, 3.992323875427246 - 6.217676162719727j,
            -0.020718730986118317 + 0.04527125135064125j],
    "log": [0.1115717738866806 + 0.46364760398864746j, 0.8047189712524414 - 0.46364760398864746j,
            1.2824746370315552 + 2.5535900592803955j],
    "sqrt": [1.0290855169296265 + 0.24293413758277893j, 1.455346703529358 - 0.34356075525283813j,
             0.5502505302429199 + 1.8173539638519287j],
    "sin": [0.9488644599914551 + 0.28154897689819336j, 1.4031192064285278 + 0.489056259393692j,
            -0.5309211015701294 - 3.590564489364624j],
    "cos": [0.6092588901519775 - 0.4384865462779999j, -0.6421481370925903 + 1.0686073303222656j,
            -3.72454571723938 + 0.511822521686554j],
    "tanh": [0.8429661393165588 + 0.19557732343673706j, 1.0147936344146729 - 0.03381282463669777j,
             -1.0032386779785156 - 0.003764025866985321j],
    "sinh": [1.0313360691070557 + 0.7397922277450562j, 1.9596009254455566 - 3.165778636932373j,
             4.168907165527344 + 9.154499053955078j],
    "cosh": [1.3541805744171143 + 0.5634214878082275j, 2.0327229499816895 - 3.0518977642059326j,
             -4.1896257400512695 - 9.109227180480957j],
    "sigmoid": [0.7427436113357544 + 0.09902773052453995j, 0.9214832186698914 - 0.09778866916894913j,
                -0.01897939294576645 + 0.047106459736824036j],
    "rsqrt": [0.9204420447349548 - 0.21728689968585968j, 0.6508508324623108 + 0.15364503860473633j,
              0.15261204540729523 - 0.5040433406829834j],
    "reciprocal": [0.800000011920929 - 0.4000000059604645j, 0.4000000059604645 + 0.20000000298023224j,
                   -0.23076921701431274 - 0.1538461446762085j],
    "sgn": [0.8944271802902222 + 0.4472135901451111j, 0.8944271802902222 - 0.4472135901451111j,
            -0.8320503234863281 + 0.5547001957893372j],
    "log10": [0.04845500364899635 + 0.2013595998287201j, 0.34948500990867615 - 0.2013595998287201j,
              0.5569716691970825 + 1.109010100364685j],
    "log2": [0.16096404194831848 + 0.6689020991325378j, 1.160964012145996 - 0.6689020991325378j,
             1.8502198457717896 + 3.684051752090454j],
    "square": [0.75 + 1j, 3 - 4j, 5 - 12j],
}


def test_elementwise_math_of_complex_tensors():
    z = _z()
    for name, want in _MATH.items():
        got = getattr(tessel, name)(z)
        assert got.dtype == C64, name
        close(got, want)  # to float32 rounding (these round once from float64 here)
        close(getattr(z, name)(), want)
    signed = tessel.complex(tessel.tensor([-4.0, -4.0, 0.0, 3.0]), tessel.tensor([0.0, -0.0, 0.0, 4.0]))
    assert tessel.sqrt(signed).tolist() == [2j, -2j, 0j, 2 + 1j]  # torch's, exactly (-4's root is 2j, no -8.7e-8)
    assert (z ** 2).tolist() == [0.75 + 1j, 3 - 4j, 5 - 12j]
    close(z ** 0.5, _MATH["sqrt"])
    close(z ** (1 + 1j), [0.5900585651397705 + 0.3825686573982239j, 3.3502590656280518 + 1.189150333404541j,
                          -0.21554811298847198 - 0.17952625453472137j])  # torch's
    close(2 ** z, [1.8810842037200928 + 0.6793542504310608j, 3.076955556869507 - 2.555845022201538j,
                   0.02293212153017521 + 0.12287846952676773j])
    close(z ** tessel.tensor([1.0, 2.0, 3.0]), [1 + 0.5j, 3 - 4j, 8.999987602233887 + 46j])
    close(tessel.pow(z, 2.5), [0.5288800001144409 + 1.2112860679626465j, 2.99179744720459 - 6.852068901062012j,
                               24.559497833251953 + 2.4837610721588135j])


def _grads(fn, *values):
    leaves = [v.detach().clone().requires_grad_() for v in values]
    fn(*leaves).backward()
    return [leaf.grad for leaf in leaves]


def test_gradients_follow_torchs_conjugate_wirtinger_convention():
    gz = tessel.complex(tessel.tensor([0.3, -1.2, 0.7]), tessel.tensor([0.8, 0.4, -1.1]))
    w = tessel.complex(tessel.tensor([1.0, 2.0, 3.0]), tessel.tensor([-0.5, 0.25, 1.0]))
    want = {  # torch's z.grad for L = Re(sum(f(z) * w)) + sum(Im(f(z))²)
        "exp": [3.2999444007873535 + 1.3232403993606567j, 0.5530279874801636 - 0.23885858058929443j,
                10.976652145385742 + 1.191969633102417j],
        "log": [-2.79348087310791 + 2.297555446624756j, -2.8474209308624268 - 3.5422630310058594j,
                -0.71114581823349 - 3.1798200607299805j],
        "sqrt": [-0.03389078378677368 + 0.9985754489898682j, -0.7222099304199219 + 1.0179694890975952j,
                 0.7092761397361755 - 1.4378207921981812j],
        "sin": [0.701121985912323 + 3.0694081783294678j, 0.8017228841781616 - 0.7469971179962158j,
                1.2100149393081665 - 6.46483039855957j],
        "tan": [0.9794918894767761 + 0.7925909757614136j, -8.877696990966797 + 6.8719563484191895j,
                1.6024407148361206 + 0.7179535627365112j],
        "tanh": [-0.6777974367141724 + 4.170977592468262j, 0.49413827061653137 - 0.4061923325061798j,
                 -3.220257520675659 - 3.3411056995391846j],
        "sigmoid": [0.25193652510643005 + 0.29562681913375854j, 0.35326290130615234 - 0.09797674417495728j,
                    0.6300548911094666 - 0.7561952471733093j],
        "reciprocal": [-0.4917522668838501 - 2.6467995643615723j, -0.71875 + 1.1249998807907104j,
                       0.590677797794342 + 1.6718910932540894j],
        "sgn": [0.11313217878341675 - 0.04242461919784546j, 0.24882113933563232 + 0.7464635372161865j,
                0.704146683216095 + 0.44809332489967346j],
    }
    for name, values in want.items():
        f = getattr(tessel, name)
        (g,) = _grads(lambda q: (f(q) * w).real.sum() + f(q).imag.pow(2).sum(), gz)
        close(g, values, rtol=5e-6, atol=1e-6)
    close(_grads(lambda q: (q ** 2.5).abs().sum(), gz)[0], [
        0.6932533979415894 + 1.8486756086349487j, -3.3740479946136475 + 1.124681830406189j,
        1.9982514381408691 - 3.140110731124878j], rtol=5e-6, atol=1e-6)
    gp, gq = _grads(lambda p, q: (p / q).real.sum() + (p / q).imag.sum(), _z(), gz)
    close(gp, [-0.6849315166473389 + 1.5068492889404297j, -1 - 0.5j, 1.058823585510254 - 0.2352941334247589j])
    close(gq, [1.9984986782073975 - 0.8350533843040466j, -1.625 - 1.125j, 2.415225028991699 - 1.7785468101501465j])
    m = _m()
    ga, gb = _grads(lambda p, q: (p @ q).abs().sum(), m, m.conj() + 1)
    close(ga, [[1.4100377559661865 - 1.9180879592895508j, 4.069275856018066 - 0.7230844497680664j],
               [-4.465716361999512 + 2.6364524364471436j, -1.0638959407806396 - 2.5760982036590576j]], atol=1e-6)
    close(gb, [[2.48837947845459 - 0.054195284843444824j, 4.508840560913086 + 0.5906699299812317j],
               [-1.7428877353668213 - 1.1749881505966187j, 1.4958162307739258 + 1.5752512216567993j]], atol=1e-6)
    close(_grads(lambda q: q.prod().imag, gz)[0], [1.6000001430511475 - 0.3999999463558197j,
                                                   0.22999992966651917 + 1.0900001525878906j,
                                                   -0.8400000929832458 - 0.6800001263618469j], atol=1e-6)
    close(_grads(lambda q: q.cumsum(0).abs().sum(), gz)[0], [-1.1433038711547852 + 2.1835427284240723j,
                                                             -1.49442720413208 + 1.24721360206604j,
                                                             -0.8944272398948669 + 0.44721347093582153j])
    close(_grads(lambda q: q.var(), gz)[0], [0.366666704416275 + 0.7666666507720947j,
                                             -1.1333333253860474 + 0.36666667461395264j,
                                             0.7666666507720947 - 1.1333333253860474j])
    close(_grads(lambda q: q.masked_fill(q.real > 0, 1j).abs().sum(), gz)[0],
          [0j, -0.9486833214759827 + 0.3162277638912201j, 0j])


def test_autograd_grad_and_backward_with_complex_tensors():
    z = _z().requires_grad_()
    w = tessel.complex(tessel.tensor([0.3, -1.2, 0.7]), tessel.tensor([0.8, 0.4, -1.1]))
    (g,) = tessel.autograd.grad((z * w).abs().sum(), z)  # (pybind's TypeError; grad(y, z) iterated z's elements)
    close(g, [0.7641989588737488 + 0.3820994794368744j, 1.1313709020614624 - 0.5656854510307312j,
              -1.0848608016967773 + 0.7232406139373779j])  # torch's
    seed = tessel.complex(tessel.ones(3), tessel.tensor([1.0, 0.0, -1.0]))
    (g,) = tessel.autograd.grad(z * w, z, grad_outputs=seed)
    close(g, [1.100000023841858 - 0.5j, -1.2000000476837158 - 0.4000000059604645j,
              1.7999999523162842 + 0.40000003576278687j])  # torch's
    raises(RuntimeError, "grad can be implicitly created only for scalar outputs", tessel.autograd.grad, z * w, z)
    (z * w).sum().backward(tessel.complex(tessel.tensor(1.0), tessel.tensor(2.0)))
    close(z.grad, [1.9000000953674316 - 0.19999998807907104j, -0.40000003576278687 - 2.8000001907348633j,
                   -1.5 + 2.5j])  # torch's
    raises(RuntimeError, "grad can be implicitly created only for real scalar outputs but got",
           lambda: (z * w).sum().backward())


def test_joins_shape_ops_and_masked_writes():
    z, m = _z(), _m()
    assert tessel.cat([z, z[:1]]).tolist() == [1 + 0.5j, 2 - 1j, -3 + 2j, 1 + 0.5j]  # torch's
    assert tessel.cat([m, tessel.ones(1, 2)]).tolist() == [[1 + 0.5j, 2 - 1j], [-3 + 2j, 0.5 + 0.25j],
                                                            [1 + 0j, 1 + 0j]]
    assert tessel.stack([z, tessel.ones(3)], 1).tolist() == [[1 + 0.5j, 1 + 0j], [2 - 1j, 1 + 0j], [-3 + 2j, 1 + 0j]]
    assert tessel.cat([z, z.to(tessel.complex128)]).dtype == tessel.complex128
    assert [c.tolist() for c in _z4().chunk(2)] == [[1 + 0.5j, 2 - 1j], [-3 + 2j, 0.5 + 0.25j]]
    assert tessel.flip(m, [0]).tolist() == [[-3 + 2j, 0.5 + 0.25j], [1 + 0.5j, 2 - 1j]]
    assert m.tril().tolist() == [[1 + 0.5j, 0j], [-3 + 2j, 0.5 + 0.25j]]
    assert tessel.diag(z[:2]).tolist() == [[1 + 0.5j, 0j], [0j, 2 - 1j]]
    assert m.T.tolist() == [[1 + 0.5j, -3 + 2j], [2 - 1j, 0.5 + 0.25j]]
    assert m.mH.tolist() == [[1 - 0.5j, -3 - 2j], [2 + 1j, 0.5 - 0.25j]]
    assert tessel.roll(z, 1).tolist() == [-3 + 2j, 1 + 0.5j, 2 - 1j]
    assert tessel.where(m.real > 0, m, 0).tolist() == [[1 + 0.5j, 2 - 1j], [0j, 0.5 + 0.25j]]
    eye = tessel.tensor([[True, False], [False, True]])
    assert tessel.where(eye, tessel.ones(2, 2), m).tolist() == [[1 + 0j, 2 - 1j], [-3 + 2j, 1 + 0j]]
    assert m.masked_fill(m.real > 0, 1j).tolist() == [[1j, 1j], [-3 + 2j, 1j]]
    q = tessel.complex(tessel.arange(6.0).view(2, 3), tessel.ones(2, 3))
    q[:, :2] = tessel.complex(tessel.tensor([9.0]), tessel.tensor([9.0]))
    q[q.real > 4] = 0
    q[1, 2] = 2 + 3j
    assert q.tolist() == [[0j, 0j, 2 + 1j], [0j, 0j, 2 + 3j]]  # torch's
    q = z.clone()
    q += 1j
    q *= 2
    q -= z
    q /= 1 + 1j
    q.mul_(z).add_(1.0).sub_(z, alpha=2).div_(2.0)
    assert q.tolist() == [0.1875 + 0.3125j, -0.25 - 0.25j, -0.75 - 6.75j]  # torch's


def test_python_scalars_and_printing():
    z, m = _z(), _m()
    assert z[0].item() == 1 + 0.5j and complex(z[1]) == 2 - 1j  # torch's
    assert bool(z[0]) and not bool(tessel.complex(tessel.tensor(0.0), tessel.tensor(0.0)))
    assert repr(z) == "tensor([ 1.+0.5000j,  2.-1.0000j, -3.+2.0000j])"  # torch's
    assert repr(m) == "tensor([[ 1.0000+0.5000j,  2.0000-1.0000j],\n        [-3.0000+2.0000j,  0.5000+0.2500j]])"
    assert repr(z[0]) == "tensor(1.+0.5000j)" and f"{z[0]}" == "(1+0.5j)"
    assert repr(z * 1e5) == "tensor([ 100000.+50000.j,  200000.-100000.j, -300000.+200000.j])"
    odd = tessel.complex(tessel.tensor([1.0, float("nan")]), tessel.tensor([-0.0, float("inf")]))
    assert repr(odd) == "tensor([1.-0.j, nan+infj])"
    assert repr(z.to(tessel.complex128)).endswith("-3.+2.0000j], dtype=tessel.complex128)")
    wide = tessel.complex(tessel.arange(30.0).view(3, 10), -tessel.arange(30.0).view(3, 10) / 7)
    assert repr(wide).splitlines()[:2] == [
        "tensor([[ 0.-0.0000j,  1.-0.1429j,  2.-0.2857j,  3.-0.4286j,  4.-0.5714j,",
        "          5.-0.7143j,  6.-0.8571j,  7.-1.0000j,  8.-1.1429j,  9.-1.2857j],"]  # torch's
    leaf = tessel.complex(tessel.tensor([1.0, 2.0]), tessel.tensor([0.0, 1.0])).requires_grad_()
    assert repr(leaf) == "tensor([1.+0.j, 2.+1.j], requires_grad=True)"


def test_random_complex_draws_equal_torchs_for_a_seed():
    # torch draws normal_ / uniform_ of the real view, normal's std 1/sqrt(2): the same values bit for bit
    tessel.manual_seed(0)
    assert tessel.randn(3, dtype=tessel.cfloat).tolist() == [
        1.0896488428115845 - 0.20748557150363922j, -1.5406367778778076 + 0.40194159746170044j,
        -0.7668731212615967 - 0.9889562726020813j]  # torch's (fewer than 16 parts: drawn in double)
    tessel.manual_seed(1)
    assert tessel.randn(4, 5, dtype=tessel.cfloat).tolist()[0] == [
        -1.0787591934204102 - 0.530493974685669j, -0.462434321641922 - 1.1380776166915894j,
        -0.0708288922905922 - 0.4307616055011749j, -0.6928036212921143 - 1.1378028392791748j,
        -0.5035622715950012 + 0.21476387977600098j]  # torch's
    tessel.manual_seed(2)
    assert tessel.randn(3, dtype=tessel.complex128).tolist() == [
        0.27739574503933 - 0.15808363343863785j, -0.2259208038075553 - 0.8520899126819805j,
        0.7385472549009483 - 0.4477596256047121j]
    tessel.manual_seed(0)
    assert tessel.rand(3, dtype=tessel.cfloat).tolist() == [
        0.49625658988952637 + 0.7682217955589294j, 0.08847743272781372 + 0.13203048706054688j,
        0.30742281675338745 + 0.6340786814689636j]
    gen = tessel.Generator().manual_seed(5)
    assert tessel.randn(9, dtype=tessel.cfloat, generator=gen).tolist()[:2] == [
        1.3027238845825195 + 0.36690863966941833j, -0.2379056215286255 - 0.6824005842208862j]
    tessel.manual_seed(0)
    assert tessel.randn_like(_z()).tolist()[0] == 1.0896488428115845 - 0.20748557150363922j
    assert tessel.randn(2, dtype=tessel.cfloat, requires_grad=True).requires_grad


def test_from_numpy_of_complex_arrays():
    t = tessel.from_numpy(np.array([1 + 2j, 3 - 1j], dtype=np.complex64))
    assert t.dtype == C64 and t.tolist() == [1 + 2j, 3 - 1j]  # torch's
    assert tessel.from_numpy(np.array([[1 + 2j], [3 - 1j]])).dtype == tessel.complex128


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
