"""dtype semantics against torch 2.15, from the type-promotion sweep (each expected value or message below is what
torch 2.15 printed for the same call): complex dtypes in promote_types / can_cast / result_type, torch.tensor()'s
checked conversion of Python numbers, full() of a 0-d tensor, add / sub's alpha check, isclose's dtype and
tolerance checks, conversions that return the tensor itself, nan_to_num's overflow, reduced-precision floor
division, error types of unsupported dtypes, linspace's values, integer pow, and out= (dtype rules per op,
resizing with a warning, overlap).
"""
import math
import warnings

import numpy as np
import pytest

import tessel

T = tessel.tensor
inf, nan = math.inf, math.nan
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64",
          "complex128"]


def same(t, values, dtype, shape):
    assert t.dtype == dtype and tuple(t.shape) == shape, (t.dtype, tuple(t.shape))
    np.testing.assert_array_equal(t.numpy(), np.asarray(values))


def names(dtypes):
    return [str(d).rsplit(".", 1)[-1] for d in dtypes]


def test_complex_dtypes_promote_cast_and_lift_categories():
    row = [tessel.promote_types(tessel.complex64, getattr(tessel, d)) for d in DTYPES]
    # torch: complex64 with each of DTYPES
    assert names(row) == ["complex64"] * 9 + ["complex128", "complex64", "complex128"]
    assert names([tessel.promote_types(tessel.float64, tessel.complex64),
                  tessel.promote_types(tessel.int8, tessel.complex128)]) == ["complex128", "complex128"]
    assert [tessel.can_cast(tessel.complex64, getattr(tessel, d)) for d in DTYPES] == [False] * 10 + [True, True]
    assert [tessel.can_cast(getattr(tessel, d), tessel.complex64) for d in DTYPES] == [True] * 12
    f32 = tessel.ones(2)
    assert names([tessel.result_type(f32, s) for s in (True, 1, 1.5, 1j)]) == ["float32"] * 3 + ["complex64"]
    assert tessel.result_type(f32.double(), 1j) == tessel.complex128
    assert tessel.result_type(T([1, 2]), 1j) == tessel.complex64 and tessel.result_type(1, 1j) == tessel.complex64
    c64 = tessel.ones(2, dtype=tessel.complex64)
    assert names([tessel.result_type(c64, s) for s in (True, 1, 1.5)]) == ["complex64"] * 3
    zero_d = tessel.ones((), dtype=tessel.complex128)  # a 0-d complex128 keeps a float32 tensor's precision
    assert tessel.result_type(f32, zero_d) == tessel.complex64
    assert tessel.result_type(T([1, 2]), zero_d) == tessel.complex128
    assert tessel.result_type(zero_d, tessel.ones(2, dtype=tessel.float64)) == tessel.complex128


def test_complex_dtype_conversions_finfo_and_complex_data():
    assert tessel.float32.to_complex() == tessel.complex64 and tessel.float64.to_complex() == tessel.complex128
    assert tessel.float16.to_real() == tessel.float16 and tessel.int64.to_real() == tessel.int64
    assert tessel.complex64.to_real() == tessel.float32 and tessel.complex128.to_complex() == tessel.complex128
    with pytest.raises(RuntimeError, match="Unknown Complex ScalarType for Long"):
        tessel.int64.to_complex()
    f = tessel.finfo(tessel.complex64)
    assert (f.eps, f.bits, f.dtype) == (1.1920928955078125e-07, 32, "float32")  # torch's
    assert tessel.finfo(tessel.complex128).eps == 2.220446049250313e-16
    with pytest.raises(TypeError, match="Use torch.iinfo to handle 'torch.finfo'"):
        tessel.finfo(tessel.int32)
    with pytest.raises(TypeError, match="Use torch.finfo to handle 'torch.iinfo'"):
        tessel.iinfo(tessel.float32)
    assert T([1 + 2j]).dtype == tessel.complex64 and T([1, 2.5j]).dtype == tessel.complex64
    z = T([1, 2], dtype=tessel.complex128)
    assert z.dtype == tessel.complex128 and z.tolist() == [(1 + 0j), (2 + 0j)]
    assert tessel.full((2,), 1 + 1j).dtype == tessel.complex64
    zero_d = T(1, dtype=tessel.complex128)
    for real in ("bool", "uint8", "int32", "int64"):  # torch: an integer tensor takes the complex dtype
        assert (tessel.ones(2, dtype=getattr(tessel, real)) + zero_d).dtype == tessel.complex128, real
    assert (tessel.ones(2) * zero_d).dtype == tessel.complex64  # a float tensor keeps its precision
    assert (tessel.ones(2) / zero_d).dtype == tessel.complex64
    z = tessel.ones(2, dtype=tessel.complex64) + tessel.ones(2, dtype=tessel.float64)
    assert z.dtype == tessel.complex128 and z.tolist() == [(2 + 0j), (2 + 0j)]


def test_tensor_checks_python_numbers_into_integer_dtypes():
    for data, dtype, name in (([1e10], tessel.int32, "int32"), ([nan], tessel.int64, "int64"),
                              ([inf], tessel.int32, "int32"), ([1.7, -1.7, 2.5], tessel.uint8, "uint8"),
                              ([-0.5], tessel.uint8, "uint8"), ([256.0], tessel.uint8, "uint8"),
                              ([-128.5], tessel.int8, "int8"), ([2147483648.0], tessel.int32, "int32"),
                              ([9223372036854775807.0], tessel.int64, "int64"), ([-256], tessel.uint8, "uint8"),
                              ([40000.0], tessel.int16, "int16"), (nan, tessel.uint8, "uint8"),
                              (np.float64(1e10), tessel.int32, "int32")):
        with pytest.raises(RuntimeError, match="value cannot be converted to type %s without overflow" % name):
            T(data, dtype=dtype)
    # torch: floats truncate inside [min, max + 1); integers down to -255 wrap into uint8
    same(T([1.7, 2.5, 255.9, -0.0], dtype=tessel.uint8), [1, 2, 255, 0], tessel.uint8, (4,))
    same(T([-1, -255], dtype=tessel.uint8), [255, 1], tessel.uint8, (2,))
    same(T([1.5, -1], dtype=tessel.uint8), [1, 255], tessel.uint8, (2,))
    same(T([-128.0, 2147483647.5], dtype=tessel.int64), [-128, 2147483647], tessel.int64, (2,))
    same(T([2147483647.5], dtype=tessel.int32), [2147483647], tessel.int32, (1,))
    same(T(np.array([300]), dtype=tessel.uint8), [44], tessel.uint8, (1,))  # a numpy array is cast unchecked
    for data, dtype in (([1, 2 ** 63], None), (2 ** 63, None), ([-2 ** 63 - 1], None), ([2 ** 70], None),
                        ([[2 ** 63]], None), ([2 ** 63], tessel.int64), ([2 ** 63], tessel.uint8)):
        with pytest.raises(ValueError, match="Overflow when unpacking long long"):
            T(data, dtype=dtype)
    same(T([2 ** 70, 1.5]), [1.1805916207174113e+21, 1.5], tessel.float32, (2,))  # torch's values
    same(T([2 ** 63], dtype=tessel.float64), [9.223372036854776e+18], tessel.float64, (1,))
    same(T([2 ** 63], dtype=tessel.bool), [True], tessel.bool, (1,))
    same(T(-2 ** 63), -9223372036854775808, tessel.int64, ())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch overflows to inf silently (numpy's cast warned)
        same(T([1e300, 3.5e38]), [inf, inf], tessel.float32, (2,))


def test_full_takes_a_zero_dim_tensor_as_the_number_it_holds():
    same(tessel.full((2,), T(3)), [3, 3], tessel.int64, (2,))  # torch: int64 (was float32)
    same(tessel.full((2,), T(3, dtype=tessel.uint8)), [3, 3], tessel.int64, (2,))
    same(tessel.full((2,), T(True)), [True, True], tessel.bool, (2,))
    same(tessel.full((2,), T(2 ** 40)), [2 ** 40] * 2, tessel.int64, (2,))
    same(tessel.full((2,), T(3.5, dtype=tessel.float64)), [3.5, 3.5], tessel.float32, (2,))
    same(tessel.full((2,), T(3), dtype=tessel.float64), [3.0, 3.0], tessel.float64, (2,))
    same(tessel.full((2,), np.bool_(True)), [1.0, 1.0], tessel.float32, (2,))  # torch: a numpy bool is a float
    for bad in (T([3]), T([3, 4]), T(3.5, requires_grad=True)):
        with pytest.raises(TypeError, match="argument 'fill_value' \\(position 2\\) must be Number, not Tensor"):
            tessel.full((2,), bad)


def test_alpha_is_checked_against_the_result_dtype():
    integral = "For integral input tensors, argument alpha must not be a floating point number"
    i2, i32 = T([1, 2]), T([1, 2], dtype=tessel.int32)
    for call in (lambda: tessel.add(i2, i2, alpha=0.5), lambda: i2.add(3, alpha=1.5), lambda: i2.add(i2, alpha=1.0),
                 lambda: tessel.sub(i2, i2, alpha=0.5), lambda: i2.sub(1, alpha=0.5),
                 lambda: tessel.add(i2, 2, alpha=0.5), lambda: tessel.rsub(i2, 3, alpha=0.5),
                 lambda: T([True]).add(T([True]), alpha=0.5), lambda: i32.add(T(1), alpha=0.5),
                 lambda: i2.clone().add_(1, alpha=0.5), lambda: i2.clone().sub_(1, alpha=0.5),
                 lambda: i32.clone().add_(i32, alpha=0.5)):
        with pytest.raises(RuntimeError, match=integral):
            call()
    for call in (lambda: i2.add(i2, alpha=True), lambda: T([1.0, 2.0]).add(i2, alpha=True)):
        with pytest.raises(RuntimeError, match="Boolean alpha only supported for Boolean results"):
            call()
    # torch: a float result takes a float alpha; a bool one a bool alpha; an integer alpha always passes
    same(i2.add(3.0, alpha=1.5), [5.5, 6.5], tessel.float32, (2,))
    same(i2.add(T([1.0, 2.0]), alpha=1.5), [2.5, 5.0], tessel.float32, (2,))
    same(T([True, False]).add(T([True, True]), alpha=True), [True, True], tessel.bool, (2,))
    same(tessel.add(i2, i2, alpha=2), [3, 6], tessel.int64, (2,))
    x = T([1, 2])
    x.add_(1, alpha=2)
    same(x, [3, 4], tessel.int64, (2,))


def test_isclose_and_allclose_check_dtypes_and_tolerances():
    for a, b, msg in ((T([1, 2]), T([1.0, 2.0000001]), "Long did not match Float"),
                      (T([1.0, 2]), T([1.0, 2], dtype=tessel.float64), "Float did not match Double"),
                      (T([1, 2], dtype=tessel.int32), T([1, 3]), "Int did not match Long"),
                      (T([1.0, 2]), T([1.0, 2], dtype=tessel.bfloat16), "Float did not match BFloat16"),
                      (T([True]), T([1]), "Bool did not match Long")):
        for fn in (tessel.isclose, tessel.allclose):
            with pytest.raises(RuntimeError, match=msg):
                fn(a, b)
    with pytest.raises(RuntimeError, match="Half did not match BFloat16"):
        T([1.0], dtype=tessel.float16).allclose(T([1.0], dtype=tessel.bfloat16))
    one, near = T([1.0]), T([1.1])
    for kwargs, msg in (({"rtol": -1}, "rtol must be greater than or equal to zero, but got -1"),
                        ({"atol": -1e-3}, "atol must be greater than or equal to zero, but got -0.001"),
                        ({"rtol": -1.5, "atol": -1}, "rtol must be greater than or equal to zero, but got -1.5"),
                        ({"rtol": nan}, "rtol must be greater than or equal to zero, but got nan")):
        for fn in (tessel.isclose, tessel.allclose):
            with pytest.raises(RuntimeError, match=msg):
                fn(one, near, **kwargs)
    for fn, name in ((tessel.isclose, "isclose"), (tessel.allclose, "allclose")):
        with pytest.raises(TypeError, match=r"%s\(\): argument 'other' \(position 2\) must be Tensor, not fl" % name):
            fn(T([1.0, 2]), 1.0)
    assert tessel.isclose(T([1.0, 2]), T([1.0, 2.1]), rtol=0.1, atol=0).tolist() == [True, True]


def test_conversions_to_the_same_dtype_return_the_tensor_itself():
    for dtype, method in ((tessel.float32, "float"), (tessel.float64, "double"), (tessel.float16, "half"),
                          (tessel.bfloat16, "bfloat16"), (tessel.int64, "long"), (tessel.int32, "int"),
                          (tessel.int16, "short"), (tessel.int8, "char"), (tessel.uint8, "byte"),
                          (tessel.bool, "bool")):
        x = T([1, 0], dtype=dtype)
        assert getattr(x, method)() is x, method  # torch: the same object
    x = T([1.5, 2])
    y = x.float()
    y.add_(1)
    assert y is x and x.tolist() == [2.5, 3.0]
    w = T([1.0, 2.0], requires_grad=True)
    assert w.float() is w and w.float().requires_grad and w.float().grad_fn is None
    x = T([1, 2])
    assert x.int().int() is not x and x.long() is x and x.double() is not x and x.double().dtype == tessel.float64


def test_nan_to_num_replaces_from_the_input_and_overflows_to_inf():
    x = T([nan, inf, -inf, 1.5])
    # torch: a nan beyond float32's range is inf (it became float32's max); float16's 1e5 is inf too
    same(tessel.nan_to_num(x, nan=1e39), [inf, 3.4028234663852886e+38, -3.4028234663852886e+38, 1.5],
         tessel.float32, (4,))
    same(x.nan_to_num(posinf=1e39), [0.0, inf, -3.4028234663852886e+38, 1.5], tessel.float32, (4,))
    same(x.half().nan_to_num(nan=1e5), [inf, 65504.0, -65504.0, 1.5], tessel.float16, (4,))
    same(x.nan_to_num(0.5, 2, -2), [0.5, 2.0, -2.0, 1.5], tessel.float32, (4,))


def test_reduced_float_floor_division_rounds_as_torch_kernels():
    a = T([5.2148438, -7.37, 3.91, 6.02], dtype=tessel.float16)
    b = T([-0.0011224747, 0.0031, -0.0017, 0.0009], dtype=tessel.float16)
    # torch: a 16-bit divisor tensor rounds every step to float16 (-4644, not float32's -4648)
    same(a // b, [-4644.0, -2380.0, -2300.0, 6688.0], tessel.float16, (4,))
    same(tessel.div(a, b, rounding_mode="floor"), [-4644.0, -2380.0, -2300.0, 6688.0], tessel.float16, (4,))
    same(a // b[0], [-4648.0, 6568.0, -3484.0, -5364.0], tessel.float16, (4,))  # one divisor: float32, once
    bf = a.bfloat16() // b.bfloat16()
    assert bf.dtype == tessel.bfloat16 and bf.tolist() == [-4640.0, -2384.0, -2288.0, 6688.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch wraps silently (numpy warned)
        same(T([-128], dtype=tessel.int8) // -1, [-128], tessel.int8, (1,))


def test_integer_and_bool_inputs_of_float_only_kernels_raise_not_implemented():
    i, b = T([1, 2]), T([True, False])
    F = tessel.nn.functional
    for call, msg in (
            (lambda: T([1, 2, 3]).mean(), "mean\\(\\): could not infer output dtype. Input dtype must be either a "
                                          "floating point or complex dtype. Got: Long"),
            (lambda: tessel.mean(i, 0), "Input dtype must be either a floating point or complex dtype. Got: Long"),
            (lambda: b.mean(), "Got: Bool"),
            (lambda: T([1.0, 2]).mean(0, dtype=tessel.int32), "Optional dtype must be either a floating point or "
                                                               "complex dtype. Got: Int"),
            (lambda: T([1, 2, 3]).norm(), "linalg.vector_norm: Expected a floating point or complex tensor as "
                                          "input. Got Long"),
            (lambda: tessel.norm(T([1, 2], dtype=tessel.int32)), "Got Int"),
            (lambda: tessel.linalg.vector_norm(i), "linalg.vector_norm: Expected a floating point"),
            (lambda: i.norm(dtype=tessel.float32), "linalg.vector_norm: Expected a floating point"),
            (lambda: tessel.softmax(i, 0), "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
            (lambda: tessel.softmax(T([[1, 2]]), 0), "\"softmax_kernel_impl\" not implemented for 'Long'"),
            (lambda: F.softmax(T([[1, 2]]), 1), "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
            (lambda: i.softmax(0), "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
            (lambda: tessel.log_softmax(T([[1, 2]]), 0), "\"log_softmax_kernel_impl\" not implemented for 'Long'"),
            (lambda: F.log_softmax(T([[1, 2]]), -1), "\"log_softmax_lastdim_kernel_impl\" not implemented"),
            (lambda: F.gelu(T([1], dtype=tessel.int32)), "\"GeluKernelImpl\" not implemented for 'Int'"),
            (lambda: F.gelu(T([True])), "\"GeluKernelImpl\" not implemented for 'Bool'"),
            (lambda: F.silu(i), "\"silu_cpu\" not implemented for 'Long'"),
            (lambda: F.layer_norm(T([[1, 2]]), (2,)), "\"LayerNormKernelImpl\" not implemented for 'Long'"),
            (lambda: i.std(), "std and var only support floating point and complex dtypes"),
            (lambda: tessel.var_mean(i), "var_mean only support floating point and complex dtypes"),
            (lambda: tessel.std_mean(i), "std_mean only support floating point and complex dtypes"),
            (lambda: tessel.nanmean(i), "nanmean\\(\\): expected input to have floating point or complex dtype "
                                        "but got Long"),
            (lambda: b // b, "\"div_floor_cpu\" not implemented for 'Bool'"),
            (lambda: b // True, "\"div_floor_cpu\" not implemented for 'Bool'"),
            (lambda: b % b, "\"remainder_cpu\" not implemented for 'Bool'"),
            (lambda: tessel.remainder(True, b), "\"remainder_cpu\" not implemented for 'Bool'"),
            (lambda: tessel.fmod(b, True), "\"fmod_cpu\" not implemented for 'Bool'"),
            (lambda: tessel.div(b, b, rounding_mode="trunc"), "\"div_trunc_cpu\" not implemented for 'Bool'"),
            (lambda: tessel.div(b, True, rounding_mode="floor"), "\"div_floor_cpu\" not implemented for 'Bool'"),
            (lambda: b ** b, "\"pow\" not implemented for 'Bool'"),
            (lambda: T(True) ** T(True), "\"pow\" not implemented for 'Bool'"),
            (lambda: i & 1.5, "\"bitwise_and_cpu\" not implemented for 'Float'"),
            (lambda: T([1.5]) & 1, "\"bitwise_and_cpu\" not implemented for 'Float'"),
            (lambda: i | T(1.5), "\"bitwise_or_cpu\" not implemented for 'Float'"),
            (lambda: tessel.bitwise_xor(i, 1.5), "\"bitwise_xor_cpu\" not implemented for 'Float'")):
        with pytest.raises(NotImplementedError, match=msg):
            call()
    assert (b ** True).tolist() == [True, False] and (b // 2).tolist() == [0, 0]  # torch's values


def test_in_place_cast_errors_carry_torch_messages():
    def raises(call, msg):
        with pytest.raises(RuntimeError, match="^" + msg + "$"):
            call()
    cast = "result type %s can't be cast to the desired output type %s"
    raises(lambda: T([1, 2]).add_(1.5), cast % ("Float", "Long"))  # torch: no "add_: " prefix
    raises(lambda: T([1, 2]).sub_(1.5), cast % ("Float", "Long"))
    raises(lambda: T([1, 2]).mul_(T(1.5)), cast % ("Float", "Long"))
    raises(lambda: T([1, 2]).div_(2), cast % ("Float", "Long"))
    raises(lambda: T([1, 2], dtype=tessel.uint8).div_(2), cast % ("Float", "Byte"))
    raises(lambda: T([True]).div_(2), cast % ("Float", "Bool"))
    raises(lambda: T([1, 2]).pow_(2.0), cast % ("Float", "Long"))
    raises(lambda: T([1, 2]).exp_(), cast % ("Float", "Long"))
    raises(lambda: T([1, 2], dtype=tessel.int16).sqrt_(), cast % ("Float", "Short"))
    raises(lambda: T([1, 2]).clamp_(2.5, 8), cast % ("Float", "long int"))  # torch names the C++ type here
    raises(lambda: T([1, 2], dtype=tessel.int32).clamp_(2.5, 8), cast % ("Float", "int"))
    raises(lambda: T([1, 2], dtype=tessel.uint8).clamp_(min=2.5), cast % ("Float", "unsigned char"))
    raises(lambda: T([1, 2], dtype=tessel.int8).clamp_(2.5), cast % ("Float", "signed char"))
    raises(lambda: T([True, False]).clamp_(0, 2), cast % ("Long", "bool"))
    raises(lambda: T([1, 2]).clamp_min_(2.5), cast % ("Float", "long int"))
    raises(lambda: T([1, 2]).clip_(2.5, 8), cast % ("Float", "long int"))
    raises(lambda: T([1, 2]).clamp_(T(2.5)), cast % ("Float", "Long"))  # a tensor bound: the dtype's name
    raises(lambda: T([1, 2]).clamp_(T(2.5, dtype=tessel.float64)), cast % ("Double", "Long"))
    raises(lambda: T([1, 2], dtype=tessel.uint8).clamp_(T(2.5)), cast % ("Float", "Byte"))
    raises(lambda: T([1, 2]).bitwise_and_(1.5), cast % ("Float", "Long"))
    raises(lambda: T([1, 2]).bitwise_or_(T([1.5])), cast % ("Float", "Long"))
    raises(lambda: T([1, 5]).addcmul_(T([1.0, 2]), T([1, 2])), cast % ("Float", "Long"))
    raises(lambda: T([1, 5]).addcdiv_(T([1.0, 2]), T([1, 2])), cast % ("Float", "Long"))

    def augmented(dtype, op, other):
        x = T([5, -5], dtype=dtype)
        return lambda: op(x, other)

    def iand(x, y):
        x &= y

    def ixor(x, y):
        x ^= y

    def ifloordiv(x, y):
        x //= y

    def ipow(x, y):
        x **= y

    def iadd(x, y):
        x += y
    raises(augmented(tessel.int32, iand, 1.5), cast % ("Float", "Int"))
    raises(augmented(tessel.int32, ixor, 1.5), cast % ("Float", "Int"))
    raises(augmented(tessel.int32, ifloordiv, 2.0), cast % ("Float", "Int"))
    raises(augmented(tessel.int64, ipow, 0.5), cast % ("Float", "Long"))
    raises(augmented(tessel.int32, iadd, T([1.5, 2.0])), cast % ("Float", "Int"))
    raises(augmented(tessel.bool, iadd, 1), cast % ("Long", "Bool"))
    raises(augmented(tessel.bool, ipow, 2), cast % ("Long", "Bool"))


def test_linspace_values_are_torch_kernels_bit_for_bit():
    # torch's values (numpy's linspace gave 0.6666666865 and -0.0277777780 below)
    assert tessel.linspace(0, 1, 7).tolist() == [0.0, 0.1666666716337204, 0.3333333432674408, 0.5,
                                                  0.6666666269302368, 0.8333333134651184, 1.0]
    assert tessel.linspace(-3, 7.7, 37)[8:12].tolist() == [-0.6222221851348877, -0.32499995827674866,
                                                          -0.02777773141860962, 0.2694444954395294]
    x = tessel.linspace(-3, 7.7, 37, dtype=tessel.float64)
    assert x.dtype == tessel.float64 and x[5:9].tolist() == [-1.5138888888888888, -1.2166666666666668,
                                                             -0.9194444444444445, -0.6222222222222222]
    assert tessel.linspace(0.1, 0.9, 9, dtype=tessel.bfloat16).tolist() == [
        0.10009765625, 0.2001953125, 0.298828125, 0.400390625, 0.5, 0.59765625, 0.69921875, 0.796875, 0.8984375]
    assert tessel.linspace(-1.3, 2.9, 11, dtype=tessel.float16).tolist() == [
        -1.2998046875, -0.8798828125, -0.459716796875, -0.03973388671875, 0.38037109375, 0.80029296875,
        1.220703125, 1.640625, 2.060546875, 2.48046875, 2.900390625]
    same(tessel.linspace(-7, 12, 8, dtype=tessel.int64), [-7, -4, -1, 1, 3, 6, 9, 12], tessel.int64, (8,))
    same(tessel.linspace(2.7, 9.9, 4, dtype=tessel.int32), [2, 4, 6, 9], tessel.int32, (4,))
    same(tessel.linspace(3, 5, 1), [3.0], tessel.float32, (1,))
    same(tessel.linspace(T(0.5), T(1.5), 3), [0.5, 1.0, 1.5], tessel.float32, (3,))
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        tessel.linspace(0, 1, -1)
    with pytest.raises(TypeError):
        tessel.linspace(0, 1, 2.0)


def test_pow_of_integer_tensors_and_tensor_exponents_rounds_as_torch():
    # torch's values: an integer tensor is cast, then takes the float pow (numpy's float32 power gave 1.7320508957)
    assert (T([3]) ** 0.5).item() == 1.7320507764816284
    assert (T([2, 3, 5, 7, 10]) ** 0.5).tolist() == [1.4142135381698608, 1.7320507764816284, 2.2360680103302,
                                                      2.6457512378692627, 3.1622776985168457]
    assert tessel.pow(T([4], dtype=tessel.uint8), 0.5).dtype == tessel.float32
    # tensor exponents and number bases: glibc's pow as torch's scalar loop (numpy's vector power differed)
    assert (T([3.0]) ** T([1.5])).item() == 5.196152210235596
    assert (T([2.84375, 0.376953125, 5.5]) ** T([1.3, 2.7, 0.45])).tolist() == [
        3.8909783363342285, 0.07177543640136719, 2.1535909175872803]
    assert (3.0 ** T([0.5, 1.7, 2.9, -1.3])).tolist() == [1.7320507764816284, 6.473008155822754,
                                                         24.190881729125977, 0.23974104225635529]
    assert (T([2, 3]) ** T([0.5, 1.5])).tolist() == [1.4142135381698608, 5.196152210235596]
    x = T([2.0, 3.0, 7.5], dtype=tessel.float64) ** T([0.3, 1.7, -2.2], dtype=tessel.float64)
    assert x.dtype == tessel.float64 and x.tolist() == [1.2311444133449163, 6.473007839923779, 0.011881334434813665]


def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught]


def test_out_resizes_with_torch_warning_and_refuses_partial_overlap():
    o = tessel.empty(5)
    r, caught = _warnings_of(lambda: tessel.add(T([1.0, 2, 3]), 1, out=o))
    assert r is o and o.tolist() == [2.0, 3.0, 4.0]
    assert len(caught) == 1 and caught[0].startswith(  # (torch adds where in its C++ it was "Triggered internally")
        "An output with one or more elements was resized since it had shape [5], which does not match the required "
        "output shape [3]. This behavior is deprecated, and in a future PyTorch release outputs will not be resized "
        "unless they have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
        "elements with t.resize_(0).")
    _, caught = _warnings_of(lambda: tessel.add(T([1.0, 2, 3]), 1, out=tessel.empty(0)))
    assert caught == []  # (an empty out is resized silently)
    o2 = tessel.empty(2, 2)
    _, caught = _warnings_of(lambda: tessel.argmax(T([[1.0, 2, 3]]), 1, out=tessel.empty(3, dtype=tessel.int64)))
    assert len(caught) == 1 and "had shape [3], which does not match the required output shape [1]" in caught[0]
    _, caught = _warnings_of(lambda: tessel.add(T([1.0, 2, 3]), 1, out=o2))
    assert tuple(o2.shape) == (3,) and "had shape [2, 2]" in caught[0]
    overlap = "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single"
    for call in (lambda a: tessel.add(a[:3], 1, out=a[1:]), lambda a: tessel.exp(a[:3], out=a[1:]),
                 lambda a: tessel.mul(a[1:], a[:3], out=a[:3]), lambda a: tessel.cat([a[:2], a[2:]], out=a),
                 lambda a: tessel.eq(a[:3], 2, out=a[1:]), lambda a: tessel.clamp(a[:3], 2, 3, out=a[1:]),
                 lambda a: tessel.cumsum(a[:3], 0, out=a[1:]), lambda a: tessel.floor(a[:3], out=a[1:]),
                 lambda a: tessel.add(a.view(2, 2), 1, out=a.view(2, 2).t())):
        a = T([1.0, 2, 3, 4])
        with pytest.raises(RuntimeError, match=overlap):
            call(a)
        assert a.tolist() == [1.0, 2.0, 3.0, 4.0]
    a = T([1.0, 2, 3, 4])
    tessel.add(a, 1, out=a)  # the same memory (full overlap) is allowed, as torch's
    tessel.add(a[:2], 1, out=a[2:])
    assert a.tolist() == [2.0, 3.0, 3.0, 4.0]
    a = T([[1.0, 2], [3, 4]])
    tessel.mm(a, a, out=a)
    assert a.tolist() == [[7.0, 10.0], [15.0, 22.0]]  # torch's


def test_out_dtype_rules_per_op():
    def raises(exc, msg, call):
        with pytest.raises(exc, match=msg):
            call()
    f64, i32, i64 = tessel.float64, tessel.int32, tessel.int64
    raises(RuntimeError, "Found dtype Float but expected Long", lambda: tessel.abs(T([-1, 4]), out=tessel.empty(2)))
    raises(RuntimeError, "Found dtype Double but expected Float",
           lambda: tessel.abs(T([-1.5, 4]), out=tessel.empty(2, dtype=f64)))
    raises(RuntimeError, "Found dtype Float but expected Long", lambda: tessel.neg(T([-1, 4]), out=tessel.empty(2)))
    raises(RuntimeError, "Found dtype Int but expected Long",
           lambda: tessel.clamp(T([-1, 4, 9]), 0, 5, out=tessel.empty(3, dtype=i32)))
    raises(RuntimeError, "Found dtype Int but expected Float",
           lambda: tessel.floor(T([1.5, 2]), out=tessel.empty(2, dtype=i32)))
    raises(RuntimeError, "Found dtype Long but expected Float",
           lambda: tessel.round(T([1.5, 2]), out=tessel.empty(2, dtype=i64)))
    raises(RuntimeError, "Found dtype Long but expected Int",
           lambda: tessel.sign(T([-1, 0, 3], dtype=i32), out=tessel.empty(3, dtype=i64)))
    raises(RuntimeError, "Found dtype Int but expected Long",
           lambda: tessel.bitwise_not(T([1, 2]), out=tessel.empty(2, dtype=i32)))
    raises(RuntimeError, "Expected out tensor to have dtype float, but got double instead",
           lambda: tessel.mm(tessel.ones(2, 2), tessel.ones(2, 2), out=tessel.empty(2, 2, dtype=f64)))
    raises(RuntimeError, "Expected out tensor to have dtype float, but got double instead",
           lambda: tessel.matmul(tessel.ones(2, 2), tessel.ones(2, 2), out=tessel.empty(2, 2, dtype=f64)))
    raises(RuntimeError, "Expected out tensor to have dtype long int, but got float instead",
           lambda: tessel.mm(tessel.ones(2, 2, dtype=i64), tessel.ones(2, 2, dtype=i64), out=tessel.empty(2, 2)))
    raises(RuntimeError, "Expected out tensor to have dtype long int, but got int instead",
           lambda: tessel.sort(T([2.0, 1]), out=(tessel.empty(2), tessel.empty(2, dtype=i32))))
    raises(RuntimeError, "Expected out tensor to have dtype float, but got int instead",
           lambda: tessel.max(T([[1.0, 2], [3, 0]]), 1, out=(tessel.empty(2, dtype=i32), tessel.empty(2, dtype=i64))))
    raises(RuntimeError, "Expected out tensor to have dtype long int, but got int instead",
           lambda: tessel.argmax(T([[1.0, 2, 3]]), 1, out=tessel.empty(1, dtype=i32)))
    raises(RuntimeError, "Expected out tensor to have dtype float, but got double instead",
           lambda: tessel.softmax(T([1.0, 2, 3]), 0, out=tessel.empty(3, dtype=f64)))
    raises(RuntimeError, "Expected out tensor to have dtype float, but got int instead",
           lambda: tessel.sum(T([[1.5, 2.5, 3]]), 0, dtype=tessel.float32, out=tessel.empty(3, dtype=i32)))
    raises(RuntimeError, "Expected the dtype for input and out to match, but got Float for input's dtype and Double "
           "for out's dtype.", lambda: tessel.amax(T([[1.0, 2, 3]]), 1, out=tessel.empty(1, dtype=f64)))
    raises(RuntimeError, "Expected out type to be Float but got Double",
           lambda: tessel.where(T([True, False]), T([1.0, 2]), T([0.0, 0]), out=tessel.empty(2, dtype=f64)))
    raises(TypeError, "where\\(\\): argument 'other' \\(position 3\\) must be Tensor, not float",
           lambda: tessel.where(T([True, False]), T([1.0, 2]), 0.0, out=tessel.empty(2)))
    raises(TypeError, "torch.cat\\(\\): input types can't be cast to the desired output type Long",
           lambda: tessel.cat([T([1.0]), T([2.0])], out=tessel.empty(2, dtype=i64)))
    raises(TypeError, "torch.cat\\(\\): input types can't be cast to the desired output type Long",
           lambda: tessel.stack([T([1.0]), T([2.0])], out=tessel.empty(2, 1, dtype=i64)))
    raises(RuntimeError, "nan_to_num: dtype of out: Double should be same as input: Float",
           lambda: tessel.nan_to_num(T([nan, 3.0]), out=tessel.empty(2, dtype=f64)))
    raises(RuntimeError, "all only supports bool tensor for result, got: Long",
           lambda: tessel.all(T([[1.0, 2]]), 1, out=tessel.empty(1, dtype=i64)))
    raises(RuntimeError, "output values must be of same type as input",
           lambda: tessel.kthvalue(T([[1.0, 2, 3]]), 1, 1, out=(tessel.empty(1, dtype=f64),
                                                                tessel.empty(1, dtype=i64))))
    raises(RuntimeError, "expected scalar type 'Long' but got 'Int' for indices output",
           lambda: tessel.mode(T([[1.0, 2, 3]]), 1, out=(tessel.empty(1), tessel.empty(1, dtype=i32))))
    raises(RuntimeError, "expected scalar_type Float but found Double",
           lambda: tessel.cummax(T([1.0, 2, 3]), 0, out=(tessel.empty(3, dtype=f64), tessel.empty(3, dtype=i64))))
    raises(RuntimeError, "result type Float can't be cast to the desired output type Long",
           lambda: tessel.remainder(T([-5.0, 4]), 3, out=tessel.empty(2, dtype=i64)))
    raises(RuntimeError, "result type Float can't be cast to the desired output type Long",
           lambda: tessel.clamp(T([1.0, 2]), min=T(1.5), out=tessel.empty(2, dtype=i64)))
    raises(RuntimeError, "^add\\(\\): functions with out=... arguments don't support automatic differentiation",
           lambda: tessel.add(tessel.ones(2, requires_grad=True), 1, out=tessel.empty(2)))
    raises(TypeError, "sort\\(\\) received an invalid combination of arguments - got \\(Tensor, out=Tensor\\)",
           lambda: tessel.sort(T([2.0, 1]), out=tessel.empty(2)))
    raises(TypeError, "sum\\(\\) received an invalid combination of arguments - got \\(Tensor, out=Tensor\\)",
           lambda: tessel.sum(T([1, 2]), out=tessel.empty((), dtype=f64)))
    raises(TypeError, "argsort\\(\\) received an invalid combination of arguments",
           lambda: tessel.argsort(T([1.0, 2]), out=tessel.empty(2, dtype=i64)))
    raises(TypeError, "einsum\\(\\) got an unexpected keyword argument 'out'",
           lambda: tessel.einsum("i,j->ij", tessel.ones(2), tessel.ones(2), out=tessel.empty(2, 2)))
    # torch's values: a float result into a wider float out, an integer or bool out of a cast reduction
    same(tessel.add(T([1, 2]), 1, out=tessel.empty(2)), [2.0, 3.0], tessel.float32, (2,))
    same(tessel.clamp(T([-1, 4, 9]), 0.5, 5, out=tessel.empty(3)), [0.5, 4.0, 5.0], tessel.float32, (3,))
    same(tessel.sum(T([[1.5], [2.5]]), 0, out=tessel.empty(1, dtype=i64)), [3], i64, (1,))
    same(tessel.sum(T([[0.5], [0.0]]), 0, out=tessel.empty(1, dtype=tessel.bool)), [True], tessel.bool, (1,))
    same(tessel.prod(T([[1.5], [2.5]]), 0, out=tessel.empty(1, dtype=i64)), [2], i64, (1,))
    same(tessel.cumsum(T([1.5, 2.5]), 0, out=tessel.empty(2, dtype=i64)), [1, 3], i64, (2,))
    same(tessel.sum(T([1.1, 2.2, 3.3]), 0, out=tessel.empty((), dtype=f64)), 6.600000023841858, f64, ())
    same(tessel.mean(T([1.1, 2.2, 3.3], dtype=f64), out=tessel.empty(())), 2.200000047683716, tessel.float32, ())
    same(tessel.eq(T([1, 2, 3]), 2, out=tessel.empty(3, dtype=i64)), [0, 1, 0], i64, (3,))
    same(tessel.gt(T([1, 2, 3]), 2, out=tessel.empty(3)), [0.0, 0.0, 1.0], tessel.float32, (3,))
    same(tessel.remainder(T([-5, 4, 9]), 3, out=tessel.empty(3, dtype=i32)), [1, 1, 0], i32, (3,))
    same(tessel.floor_divide(T([1, 2, 3]), 2, out=tessel.empty(3, dtype=f64)), [0.0, 1.0, 1.0], f64, (3,))
    same(tessel.bitwise_and(T([1, 2, 3]), 1, out=tessel.empty(3)), [1.0, 0.0, 1.0], tessel.float32, (3,))
    same(tessel.logical_not(T([1.0, 0, 3]), out=tessel.empty(3, dtype=i64)), [0, 1, 0], i64, (3,))
    same(tessel.logical_and(T([1, 0, 3]), T([1, 1, 0]), out=tessel.empty(3)), [1.0, 0.0, 0.0], tessel.float32, (3,))
    same(tessel.sign(T([-1.0, 0, 3]), out=tessel.empty(3)), [-1.0, 0.0, 1.0], tessel.float32, (3,))
    same(tessel.nan_to_num(T([nan, 3.0]), out=tessel.empty(2)), [0.0, 3.0], tessel.float32, (2,))
    same(tessel.addcmul(tessel.ones(2), tessel.ones(2), tessel.ones(2), out=tessel.empty(2, dtype=f64)), [2.0, 2.0],
         f64, (2,))
    same(tessel.lerp(tessel.zeros(2), tessel.ones(2), 0.5, out=tessel.empty(2)), [0.5, 0.5], tessel.float32, (2,))
    same(tessel.greater(T([1.0, 3]), T([2.0, 2]), out=tessel.empty(2, dtype=f64)), [0.0, 1.0], f64, (2,))
    same(tessel.subtract(T([1.0, 3]), 1, out=tessel.empty(2, dtype=f64)), [0.0, 2.0], f64, (2,))
    raises(RuntimeError, "Found dtype Double but expected Float",
           lambda: tessel.absolute(T([1.0]), out=tessel.empty(1, dtype=f64)))
    a = tessel.zeros(4, dtype=i64)
    tessel.remainder(T([5, -5]), 3, out=a[2:])
    assert a.tolist() == [0, 0, 2, 1]


def test_factories_with_out_take_its_dtype():
    same(tessel.arange(2, out=tessel.empty(2, dtype=tessel.int64)), [0, 1], tessel.int64, (2,))
    o, caught = _warnings_of(lambda: tessel.arange(0, 1, 0.3, out=tessel.empty(2, dtype=tessel.float64)))
    same(o, [0.0, 0.3, 0.6, 0.8999999999999999], tessel.float64, (4,))  # torch's values
    assert len(caught) == 1 and caught[0].startswith(
        "The number of elements in the out tensor of shape [2] is 2 which does not match the computed number of "
        "elements 4. Note that this may occur as a result of rounding error. The out tensor will be resized to a "
        "tensor of shape (4,).")
    same(tessel.arange(0, 1, 0.3, out=tessel.empty(2, 2, dtype=tessel.float64)),
         [[0.0, 0.3], [0.6, 0.8999999999999999]], tessel.float64, (2, 2))
    same(tessel.arange(0, 2.5, out=tessel.empty(3, dtype=tessel.int32)), [0, 1, 2], tessel.int32, (3,))
    same(tessel.linspace(0, 1, 5, out=tessel.empty(2, dtype=tessel.float16)), [0.0, 0.25, 0.5, 0.75, 1.0],
         tessel.float16, (5,))
    same(tessel.linspace(0, 10, 5, out=tessel.empty(5, dtype=tessel.int64)), [0, 2, 5, 7, 10], tessel.int64, (5,))
    o, caught = _warnings_of(lambda: tessel.zeros(3, out=tessel.empty(2, dtype=tessel.int32)))
    same(o, [0, 0, 0], tessel.int32, (3,))
    assert caught == []
    same(tessel.ones(2, 2, out=tessel.empty(2, dtype=tessel.int32)), [[1, 1], [1, 1]], tessel.int32, (2, 2))
    same(tessel.full((3,), 2.5, out=tessel.empty(2, dtype=tessel.int32)), [2, 2, 2], tessel.int32, (3,))
    with pytest.raises(RuntimeError, match="dtype Float does not match dtype of out parameter \\(Int\\)"):
        tessel.ones(3, out=tessel.empty(2, dtype=tessel.int32), dtype=tessel.float32)
    with pytest.raises(RuntimeError, match="dtype Long does not match dtype of out parameter \\(Float\\)"):
        tessel.arange(4, out=tessel.empty(2), dtype=tessel.int64)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
