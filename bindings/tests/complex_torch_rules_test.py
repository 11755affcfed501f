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


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
