"""torch's dtype rules: promote_types, can_cast and result_type over bool < integer < floating < complex (the
complex dtypes are tessel/_complex.py's ComplexDType), torch's check of add / sub's alpha against the result
dtype, and the dtype conversions torch.dtype has (to_complex, to_real). Split from _namespace.py, which
re-exports the names its neighbours import from there.

    promote_types(complex64, float64)          # complex128
    result_type(torch.ones(2), 1j)             # complex64 (a Python complex takes the default complex dtype)
    result_type(torch.ones(2), torch.tensor(1, dtype=complex128))  # complex64: a 0-d tensor lifts the category
"""
import builtins

import numpy as np

from . import _C, _dtypes
from ._complex import ComplexDType, ComplexTensor, complex64, complex128

Tensor = _C.Tensor
_bool, _float, _int, _complex = builtins.bool, builtins.float, builtins.int, builtins.complex

_CATEGORY = {_dtypes.bool: 0, _dtypes.uint8: 1, _dtypes.int8: 1, _dtypes.int16: 1, _dtypes.int32: 1, _dtypes.int64: 1,
             _dtypes.float16: 2, _dtypes.bfloat16: 2, _dtypes.float32: 2, _dtypes.float64: 2,
             complex64: 3, complex128: 3}
_NAMES = {_dtypes.bool: "Bool", _dtypes.uint8: "Byte", _dtypes.int8: "Char", _dtypes.int16: "Short",
          _dtypes.int32: "Int", _dtypes.int64: "Long", _dtypes.float16: "Half", _dtypes.bfloat16: "BFloat16",
          _dtypes.float32: "Float", _dtypes.float64: "Double", complex64: "ComplexFloat", complex128: "ComplexDouble"}


def _name(d):
    """torch's ScalarType name of a dtype (Float, Long, ...), as its messages print it."""
    return _NAMES.get(d, str(d))


def _check_dtype(d, fn):
    if d not in _CATEGORY:
        raise TypeError("%s(): expected a tessel dtype, got %r" % (fn, d))


def promote_types(type1, type2):
    """torch.promote_types: the smallest dtype both convert to without leaving their category (bool < integer
    < floating < complex): int32 + int64 -> int64, int64 + float16 -> float16, float16 + bfloat16 -> float32,
    complex64 + float64 -> complex128 (the complex dtype wide enough for the float's precision)."""
    _check_dtype(type1, "promote_types")
    _check_dtype(type2, "promote_types")
    if type(type1) is not ComplexDType and type(type2) is not ComplexDType:
        return _C._promote_types(type1, type2)  # the ops' own rule (bindings/tensor_ops_py.cc)
    wide = complex128 in (type1, type2) or _dtypes.float64 in (type1, type2)
    return complex128 if wide else complex64


def can_cast(from_, to):
    """torch.can_cast: whether an op may write a `from_` result into a `to` tensor (same or higher
    category: float -> int, int -> bool and complex -> float may not)."""
    _check_dtype(from_, "can_cast")
    _check_dtype(to, "can_cast")
    return _CATEGORY[from_] <= _CATEGORY[to]


def default_complex():
    """torch's default complex dtype: complex128 when the default dtype is float64, else complex64."""
    return complex128 if _dtypes.default_float() == _dtypes.float64 else complex64


def _scalar_dtype(v):
    if isinstance(v, _bool):
        return _dtypes.bool
    if isinstance(v, (_int, np.integer)):
        return _dtypes.int64
    if isinstance(v, (_float, np.floating)):
        return _dtypes.default_float()  # torch's default dtype
    if isinstance(v, (_complex, np.complexfloating)):
        return default_complex()
    raise TypeError("result_type(): expected a Tensor or a Python number, got %s" % type(v).__name__)


def _to_complex(d):
    """The complex dtype of a floating one (torch's toComplexType); tessel has no complex32."""
    if d == _dtypes.float64:
        return complex128
    if d == _dtypes.float32:
        return complex64
    raise TypeError("the result is torch's %s, a complex dtype tessel does not have (its complex tensors are "
                    "complex64 and complex128: cast the %s operand to float32 first)"
                    % ("complex32" if d == _dtypes.float16 else "bcomplex32", d))


def _combine_categories(higher, lower):
    """torch's combine_categories: the dtype of a higher tier (dimensioned tensors over 0-d ones over numbers)
    unless the lower tier's category is higher; a complex lower tier keeps the higher's precision."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    c_high, c_low = _CATEGORY[higher], _CATEGORY[lower]
    if c_high == 3:
        return higher
    if c_low == 3:
        return _to_complex(higher) if c_high == 2 else lower
    if c_high == 2:
        return higher
    if higher == _dtypes.bool or c_low == 2:
        return promote_types(higher, lower)
    return higher


def result_type(tensor1, tensor2, *more):
    """torch.result_type: the dtype an arithmetic op of the two gives. Tensors with dimensions decide within
    their category; a zero-dim tensor or a Python number only lifts the category (int tensor + 2.5 -> float32,
    float16 tensor + 2.5 -> float16, int32 tensor + 5 -> int32, float32 tensor + 1j -> complex64)."""
    tiers = [None, None, None]  # dimensioned tensors, zero-dim tensors, Python numbers
    for v in (tensor1, tensor2) + more:  # (more: tessel's own n-ary uses, addcmul's three)
        if isinstance(v, (Tensor, ComplexTensor)):
            tier, d = (0 if v.dim() > 0 else 1), v.dtype
        else:
            tier, d = 2, _scalar_dtype(v)
        tiers[tier] = d if tiers[tier] is None else promote_types(tiers[tier], d)
    return _combine_categories(tiers[0], _combine_categories(tiers[1], tiers[2]))


def check_alpha(dtype, alpha):
    """torch's alpha_check for add / sub with alpha, against the result dtype: a bool alpha only for a bool
    result, a float (or complex) alpha never for an integer or bool one, a complex alpha only for a complex one."""
    if isinstance(alpha, (_bool, np.bool_)):
        if dtype != _dtypes.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
        return
    if isinstance(alpha, (_int, np.integer)):
        return
    if isinstance(alpha, Tensor):  # a 0-d tensor alpha counts as the number it holds
        return check_alpha(dtype, alpha.item())
    category = _CATEGORY.get(dtype, 2)
    if category < 2:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if category == 2 and isinstance(alpha, (_complex, np.complexfloating)):
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


def check_alpha_of(input, other, alpha):
    """check_alpha on the result dtype of input and other, computed only where it can matter (an int alpha
    always passes, and a float one does for a floating tensor input)."""
    kind = alpha.__class__
    if kind is _int or (kind is _float and isinstance(input, Tensor) and input.dtype.is_floating_point):
        return
    check_alpha(result_type(input, other), alpha)


def _dtype_to_complex(self):
    if self.is_floating_point:
        return _to_complex(self)
    raise RuntimeError("Unknown Complex ScalarType for %s" % _name(self))


# torch.dtype's conversions: float32.to_complex() is complex64, a real dtype's to_real() itself
_C.dtype.to_complex = _dtype_to_complex
_C.dtype.to_real = lambda self: self
ComplexDType.to_complex = lambda self: self


def _converting(name, dtype):
    """Tensor.float() / long() / ...: the tensor itself where it already has the dtype, as torch's (a new handle
    was returned: `x.float() is x` was False)."""
    convert = getattr(Tensor, name)

    def method(self):
        return self if self.dtype is dtype else convert(self)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "torch's Tensor.%s(): self if its dtype is %s already, else a converted copy" % (name, dtype)
    return method


for _method, _target in (("float", _dtypes.float32), ("double", _dtypes.float64), ("half", _dtypes.float16),
                         ("bfloat16", _dtypes.bfloat16), ("long", _dtypes.int64), ("int", _dtypes.int32),
                         ("short", _dtypes.int16), ("char", _dtypes.int8), ("byte", _dtypes.uint8),
                         ("bool", _dtypes.bool)):
    setattr(Tensor, _method, _converting(_method, _target))
