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
