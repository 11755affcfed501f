"""tessel.testing.assert_close: torch.testing.assert_close's comparison and messages, for the test suites of
ported code.

Tensors (a DTensor compares as its full tensor), Python numbers, and sequences or mappings of them (compared
element by element, recursively) are close when |actual - expected| <= atol + rtol * |expected| everywhere, with
torch's default tolerances per dtype when neither is given; shapes and (check_dtype) dtypes must match; NaNs are
equal only with equal_nan=True. A failure raises AssertionError with torch's message, or `msg`.

    tessel.testing.assert_close(model(x), expected, rtol=1e-4, atol=1e-5)
"""
import collections.abc
import math

import numpy as np

from . import _C, _dtypes
from ._complex import ComplexTensor, complex64, complex128

# torch.testing's defaults: (rtol, atol) by dtype.
_DEFAULT_TOLERANCES = {_dtypes.float16: (1e-3, 1e-5), _dtypes.bfloat16: (1.6e-2, 1e-5),
                       _dtypes.float32: (1.3e-6, 1e-5), _dtypes.float64: (1e-7, 1e-7),
                       complex64: (1.3e-6, 1e-5), complex128: (1e-7, 1e-7)}


def _fail(msg, default):
    raise AssertionError(default if msg is None else (msg(default) if callable(msg) else msg))


def _tolerances(dtype, rtol, atol):
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, but got no %s."
                         % ("rtol" if rtol is None else "atol"))
    if rtol is not None:
        return float(rtol), float(atol)
    return _DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


def _host(t):
    t = t.full_tensor() if t.is_distributed else t
    if t.dtype in (_dtypes.bfloat16, _dtypes.float16):
        t = t.float()
    if t.dtype.is_complex:
        return t.detach().numpy().astype(np.complex128)
    return t.detach().numpy().astype(np.float64 if t.dtype.is_floating_point else np.int64
                                     if t.dtype != _dtypes.bool else np.bool_)


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, msg):
    if tuple(actual.shape) != tuple(expected.shape):
        _fail(msg, "The values for attribute 'shape' do not match: %s != %s."
              % (_C_size(actual.shape), _C_size(expected.shape)))
    if check_dtype and actual.dtype != expected.dtype:
        _fail(msg, "The values for attribute 'dtype' do not match: %s != %s." % (actual.dtype, expected.dtype))
    rtol, atol = _tolerances(actual.dtype if actual.dtype == expected.dtype else _dtypes.float64, rtol, atol)
    wide = any(d in (_dtypes.float64, complex128) for d in (actual.dtype, expected.dtype))  # torch compares in
    complex_ = actual.dtype.is_complex or expected.dtype.is_complex  # the wider dtype, else in float32
    a, e = (_host(t).astype((np.complex128 if wide else np.complex64) if complex_ else np.float64 if wide
                            else np.float32) for t in (actual, expected))
    close = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.all():
        return
    diff = np.where(close, 0, np.abs(a - e))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(close, 0, diff / np.abs(e))
    integral = not any(d.is_floating_point or d.is_complex for d in (actual.dtype, expected.dtype))
    exact = rtol == 0 and atol == 0
    allowed = lambda tol: "" if exact else " (up to %s allowed)" % _num(tol)  # noqa: E731
    bad = int((~close).sum())
    (abs_max, abs_at), (rel_max, rel_at) = _greatest(diff), _greatest(rel)
    _fail(msg, "Tensor-likes are not %s!\n\nMismatched elements: %d / %d (%.1f%%)\n"
               "Greatest absolute difference: %s at index %s%s\n"
               "Greatest relative difference: %s at index %s%s"
          % ("equal" if exact else "close", bad, close.size, 100.0 * bad / close.size,
             int(abs_max) if integral else _num(abs_max), abs_at, allowed(atol), _num(rel_max), rel_at,
             allowed(rtol)))


def _greatest(arr):
    """(the largest entry, its index), a NaN counting as the largest (torch's max propagates it)."""
    flat = np.isnan(arr).reshape(-1)
    i = int(np.argmax(flat)) if flat.any() else int(np.argmax(arr))
    return arr.reshape(-1)[i], tuple(int(j) for j in np.unravel_index(i, arr.shape))


def _num(v):
    return repr(float(v))


def _C_size(shape):
    from ._tensor import Size
    return repr(Size(shape)).replace("tessel.", "torch.")


def _compare_numbers(actual, expected, rtol, atol, equal_nan, msg):
    rtol, atol = _tolerances(_dtypes.float64 if isinstance(actual, float) or isinstance(expected, float) else None,
                             rtol, atol)
    if math.isnan(actual) and math.isnan(expected) and equal_nan:
        return
    if actual == expected or abs(actual - expected) <= atol + rtol * abs(expected):
        return
    diff = abs(actual - expected)
    rel = diff / abs(expected) if expected != 0 else math.inf
    _fail(msg, "Scalars are not close!\n\nExpected %r but got %r.\nAbsolute difference: %s (up to %s allowed)\n"
               "Relative difference: %s (up to %s allowed)" % (expected, actual, _num(diff), _num(atol), _num(rel),
                                                                 _num(rtol)))


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    if isinstance(actual, (_C.Tensor, ComplexTensor)) and isinstance(expected, (_C.Tensor, ComplexTensor)):
        return _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, msg)
    numbers = (int, float, bool, np.number)
    if isinstance(actual, numbers) and isinstance(expected, numbers):
        return _compare_numbers(actual, expected, rtol, atol, equal_nan, msg)
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            _fail(msg, "The keys of the mappings do not match:\nactual: %s\nexpected: %s"
                  % (sorted(map(str, actual)), sorted(map(str, expected))))
        for k in expected:
            assert_close(actual[k], expected[k], rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype,
                         msg=msg)
        return
    sequences = (list, tuple)
    if isinstance(actual, sequences) and isinstance(expected, sequences):
        if len(actual) != len(expected):
            _fail(msg, "The length of the sequences mismatch: %d != %d" % (len(actual), len(expected)))
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype, msg=msg)
        return
    raise TypeError("No comparison pair was able to handle inputs of type %s and %s."
                    % (type(actual), type(expected)))
