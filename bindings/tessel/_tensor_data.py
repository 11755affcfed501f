"""tessel.tensor()'s scans of nested Python data (lists and tuples of numbers, numpy scalars, tensors); split from
_tensor.py to keep it under 1,000 lines."""
import builtins

import numpy as np

from . import _C, _dtypes

Tensor = _C.Tensor


def _plain_numbers(data):
    """Whether the (nested) list holds only Python floats and ints (their exact types: no bool, no numpy scalar,
    no tensor): tensor()'s two scans (_holds_tensor, _holds_numpy_float64) would find nothing."""
    for x in data:
        tx = type(x)
        if tx is builtins.float or tx is builtins.int:
            continue
        if (tx is list or tx is tuple) and _plain_numbers(x):
            continue
        return False
    return True


def _holds_tensor(data):
    return builtins.any(isinstance(x, Tensor) or (isinstance(x, (list, tuple)) and _holds_tensor(x)) for x in data)


def _tensors_as_scalars(data):
    """The nested list with each tensor replaced by its one number (torch: only one-element tensors can be), as
    a numpy scalar of the tensor's dtype, so the list's dtype is inferred from the tensors' as torch's (two
    float64 tensors made a float32 tensor); bfloat16 / float16 ones as Python floats."""
    if isinstance(data, Tensor):
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        if data.dtype in (_dtypes.bfloat16, _dtypes.float16) or data.is_distributed:
            return data.item()
        return data.detach().reshape(()).numpy()[()]
    if isinstance(data, (list, tuple)):
        return [_tensors_as_scalars(x) for x in data]
    return data


def _holds_numpy_float64(data):
    """Whether (nested) data holds a numpy float64 scalar (np.float64 is also a Python float)."""
    if isinstance(data, np.float64):
        return True
    if isinstance(data, (list, tuple)):
        return builtins.any(_holds_numpy_float64(x) for x in data)
    return False


def _flat(data):
    """The scalars of (nested) lists and tuples, depth first."""
    if isinstance(data, (list, tuple)):
        for x in data:
            yield from _flat(x)
    else:
        yield data


def _is_integer(v):
    return isinstance(v, (builtins.int, np.integer)) and not isinstance(v, (builtins.bool, np.bool_))


_INT64_RANGE = (-2 ** 63, 2 ** 63)
_INTEGER_NAMES = {_dtypes.uint8: "uint8", _dtypes.int8: "int8", _dtypes.int16: "int16", _dtypes.int32: "int32",
                  _dtypes.int64: "int64"}


def checked_numbers(data, array, dtype):
    """np.asarray(data) of Python numbers (data not an array or a tensor) as torch's tensor() unpacks them: an
    integer beyond int64 is "Overflow when unpacking long long" where torch reads it as an int64 (all-integer
    data of no dtype, or an integer dtype), else a float; into an integer dtype every value must fit ("value
    cannot be converted to type int32 without overflow": a float in [min, max + 1), NaN and infinities never;
    an integer in range, or for uint8 down to -255, which wraps as torch's)."""
    integer = dtype in _INTEGER_NAMES
    kind = array.dtype.kind
    if kind in "uO" or (kind == "f" and array.size and (dtype is None or integer)
                        and np.abs(array).max() >= 2.0 ** 63):  # (numpy holds such integers as uint64 / objects)
        values = list(_flat(data))
        if not builtins.all(isinstance(v, (builtins.int, builtins.float, np.number, np.bool_)) for v in values):
            return array  # not numbers: tensor()'s own error
        if builtins.any(_is_integer(v) and not _INT64_RANGE[0] <= v < _INT64_RANGE[1] for v in values) and (
                integer or (dtype is None and not builtins.any(isinstance(v, (builtins.float, np.floating))
                                                               for v in values))):
            raise ValueError("Overflow when unpacking long long")
        if kind in "uO":
            array = np.asarray(data, dtype=np.float64)
            array = array != 0 if dtype == _dtypes.bool else array
    if not integer or not array.size or array.dtype.kind not in "fiu":
        return array
    info = np.iinfo(_INTEGER_NAMES[dtype])
    with np.errstate(invalid="ignore"):
        if array.dtype.kind == "f":
            fits = (array >= info.min) & (array < info.max + 1.0)  # (NaN compares False)
        else:
            fits = (array >= (-info.max if dtype == _dtypes.uint8 else info.min)) & (array <= info.max)
    if fits.all():
        return array
    for v in _flat(data):  # mixed data: each number by its own type's rule, as torch unpacks them
        if _is_integer(v):
            ok = (-info.max if dtype == _dtypes.uint8 else info.min) <= v <= info.max
        else:
            ok = isinstance(v, (builtins.bool, np.bool_)) or info.min <= v < info.max + 1.0
        if not ok:
            raise RuntimeError("value cannot be converted to type %s without overflow" % _INTEGER_NAMES[dtype])
    return np.trunc(array).astype(np.int64)  # (a uint8's -1 among floats: wrapped by the cast that follows)


def complex_tensor(data, array, dtype):
    """tensor() of complex data, or with a complex dtype: a ComplexTensor (tessel/_complex.py) in that dtype, else
    the array's complex dtype for a numpy array and torch's default complex dtype for Python numbers."""
    from ._complex import complex64, from_numpy
    if dtype is None:
        if isinstance(data, np.ndarray):
            return from_numpy(array)
        from ._promotion import default_complex
        dtype = default_complex()
    return from_numpy(array.astype(np.complex64 if dtype is complex64 else np.complex128))


def dtype_of_scalar(v):
    """full()'s dtype of a fill value: torch's Scalar types (bool, int64, the default float or complex dtype)."""
    if isinstance(v, builtins.bool):  # (a numpy bool is no bool to torch: the default dtype)
        return _dtypes.bool
    if isinstance(v, (builtins.int, np.integer)):  # a numpy integer scalar too (torch.full((2,), np.int64(3)))
        return _dtypes.int64
    if isinstance(v, (builtins.complex, np.complexfloating)):
        from ._promotion import default_complex
        return default_complex()
    return _dtypes.default_float()
