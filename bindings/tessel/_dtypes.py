"""tessel's dtype objects under torch's names (tessel.float32, tessel.long, ...), and torch.finfo / iinfo."""
import builtins as _builtins

import numpy as _np

from ._C import Tensor as _Tensor, _promote_types, dtype
from ._C import _get_default_dtype as default_float  # torch.get_default_dtype (float32 until set)

float32 = dtype.float32
float64 = dtype.float64
bfloat16 = dtype.bfloat16
float16 = dtype.float16
int64 = dtype.int64
int32 = dtype.int32
int16 = dtype.int16
int8 = dtype.int8
uint8 = dtype.uint8
bool = bool_dtype = dtype.bool  # noqa: A001 (torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16

REDUCED = (bfloat16, float16)  # the 16-bit floats: torch's CPU kernels compute them in float32 (opmath)


def opmath(t):
    """The dtype torch's CPU kernels compute a `t` pointwise chain in: float32 for bfloat16 / float16 (one rounding
    at the end), `t` itself otherwise."""
    return float32 if t in REDUCED else t


def c_type_name(t):
    """The C++ type name torch's dtype checks print (float, c10::BFloat16, long int, ...)."""
    return {"float32": "float", "float64": "double", "bfloat16": "c10::BFloat16", "float16": "c10::Half",
            "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
            "bool": "bool"}.get(str(t).rsplit(".", 1)[-1], str(t))


def promoted(tensors):
    """tensors in their common dtype, torch's promotion for cat / stack and their kin (cat([int64, float32]) is
    float32; it raised a dtype mismatch); entries that are not tensors are left as they are."""
    tensors = list(tensors)
    first = None
    for t in tensors:  # fast path, the common case: one dtype (compared by .value: pybind's == is slow)
        if isinstance(t, _Tensor):
            v = t.dtype.value
            if first is None:
                first = v
            elif v != first:
                break
    else:
        return tensors
    kinds = [t.dtype for t in tensors if isinstance(t, _Tensor)]
    if not kinds or _builtins.all(k == kinds[0] for k in kinds):
        return tensors  # one dtype (the common case): no promotion
    target = kinds[0]
    for k in kinds[1:]:
        target = _promote_types(target, k)
    return [t.to(target) if isinstance(t, _Tensor) and t.dtype != target else t for t in tensors]



class finfo:
    """torch.finfo: the numeric limits of a floating dtype (the default dtype by default): bits, eps, max, min, tiny
    (= smallest_normal), resolution, dtype (its name, as torch's). A complex dtype gives its parts' limits."""

    def __init__(self, type=None):  # noqa: A002 (torch's argument name)
        type = default_float() if type is None else type
        if getattr(type, "is_complex", False) is True:
            type = type.to_real()  # torch: finfo(complex64) is float32's
        if not isinstance(type, dtype) or not type.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            "'torch.finfo'")
        if type == bfloat16:  # numpy has no bfloat16: 8 exponent bits as float32, 7 mantissa bits
            self.bits, self.eps, self.max, self.tiny, self.resolution = 16, 2.0 ** -7, 3.3895313892515355e38, \
                1.1754943508222875e-38, 0.01
        else:
            info = _np.finfo({float32: _np.float32, float64: _np.float64, float16: _np.float16}[type])
            self.bits, self.eps, self.max = info.bits, _builtins.float(info.eps), _builtins.float(info.max)
            self.tiny, self.resolution = _builtins.float(info.tiny), 10.0 ** -info.precision  # (torch's: a double)
        self.min, self.smallest_normal, self.dtype = -self.max, self.tiny, repr(type).split(".")[-1]

    def __repr__(self):
        return "finfo(resolution=%g, min=%g, max=%g, eps=%g, smallest_normal=%g, tiny=%g, dtype=%s)" % (
            self.resolution, self.min, self.max, self.eps, self.smallest_normal, self.tiny, self.dtype)


class iinfo:
    """torch.iinfo: bits, min, max of an integer dtype (bool is refused, as torch)."""

    def __init__(self, type):  # noqa: A002
        if not isinstance(type, dtype) or type.is_floating_point or type == bool_dtype:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle 'torch.iinfo'")
        info = _np.iinfo({int64: _np.int64, int32: _np.int32, int16: _np.int16, int8: _np.int8, uint8: _np.uint8}[type])
        self.bits, self.min, self.max = info.bits, _builtins.int(info.min), _builtins.int(info.max)
        self.dtype = repr(type).split(".")[-1]

    def __repr__(self):
        return "iinfo(min=%d, max=%d, dtype=%s)" % (self.min, self.max, self.dtype)


__all__ = ["finfo", "iinfo", "dtype", "float32", "float64", "bfloat16", "float16", "int64", "int32", "int16", "int8",
           "uint8", "bool", "float", "double", "half", "long", "int", "short"]
