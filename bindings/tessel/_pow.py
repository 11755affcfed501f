"""torch.pow with a tensor exponent (Tensor ** Tensor, number ** Tensor as in rotary tables' theta ** (i / d)),
composed in Python; split from _extra.py by concept. Tensor ** number stays the C++ op (with its
gradient, on DTensors too): the bindings' __pow__ / __rpow__ / pow overloads (tensor_ops_py.cc) take a
number exponent directly and call pow below only for a tensor one, so `x ** 2` pays no Python frame.
Importing this module registers torch.pow in _extra's TORCH_FUNCTIONS.

The value is computed on the host with torch's result type and broadcasting; an autograd.Function
differentiates both operands: d/dbase = exponent·base^(exponent-1), d/dexponent = base^exponent·ln(base)
(0 where base is 0 and the exponent >= 0, as torch). A float32 / 16-bit result is numpy's float64 power rounded
once: close to glibc's powf that torch's scalar loop calls, and within its vector kernel's 1-ulp error. Against
torch 2.15 (4096 random values) 1.6% of float32 values differ in the last bit (Sleef's vector pow; numpy's float32
power differed in 20%), none of a tensor under 32 elements in all but ~1 in 2000, bfloat16 none. float64 operands
of up to 4096 elements take long double (1.6% differ, 27% in numpy's float64), larger ones float64 (25x faster).
An integer or bool tensor raised to a float number is cast to the float result dtype and takes the C++ float
pow, as torch casts it (tensor([3]) ** 0.5 is the sqrt of 3.0f).
"""
import builtins

import numpy as np

_LONG_DOUBLE_MAX = 4096  # float64 operands up to this size are raised in long double

from . import _C, _dtypes
from ._extra import TORCH_FUNCTIONS, Tensor
from .autograd import Function


def _pow_dtype(base, exponent):
    """torch's result type of pow(base, exponent) where at least one is a Tensor (a Python number takes
    the tensor's dtype, or the default dtype when a float meets an integer tensor)."""
    def kind(x):
        if isinstance(x, Tensor):
            return x.dtype
        if isinstance(x, builtins.bool):
            return _dtypes.bool
        return _dtypes.default_float() if isinstance(x, builtins.float) else None  # None: a Python int
    a, b = kind(base), kind(exponent)
    if not isinstance(base, Tensor) or not isinstance(exponent, Tensor):  # number ** tensor or the reverse
        t, n = (b, a) if not isinstance(base, Tensor) else (a, b)
        if t == _dtypes.bool and n is None:
            return _dtypes.int64  # a bool tensor with a Python int: int64 (bool ** 2 is int64, as torch)
        return n if n is not None and n.is_floating_point and not t.is_floating_point else t
    from ._namespace import result_type
    return result_type(base, exponent)  # a 0-d tensor only lifts the category (uint8 ** tensor(3) is uint8)


def _host_pow(base, exponent, dtype):
    """The value of pow on the host: integers exactly in the result dtype; floats in numpy's power one precision
    up from the compute type (float32 for 16-bit), rounded once (see the module docstring)."""
    compute = {_dtypes.float64: np.float64, _dtypes.int64: np.int64, _dtypes.int32: np.int32, _dtypes.int16: np.int16,
               _dtypes.int8: np.int8, _dtypes.uint8: np.uint8}.get(dtype, np.float32)
    floating = np.issubdtype(compute, np.floating)

    def arr(x):
        if not isinstance(x, Tensor):  # a number operand in the result dtype first, as torch's wrapped scalars
            if not floating:
                return compute(x)
            x = _C._full([], builtins.float(x), dtype)
        x = x.detach()
        x = (x.float() if x.dtype in (_dtypes.bfloat16, _dtypes.float16) else x).numpy().astype(compute)
        # float32 and 16-bit: one precision up; float64 in long double up to _LONG_DOUBLE_MAX elements (25x
        # slower than float64: 0.76 s for a million values against torch's 0.03 s), for the last bit of 1 in 4
        if not floating:
            return x
        wide = compute is np.float64 and x.size <= _LONG_DOUBLE_MAX
        return x.astype(np.longdouble if wide else np.float64)
    a, b = arr(base), arr(exponent)
    negative = None
    if not np.issubdtype(compute, np.floating) and np.any(b < 0):
        if not isinstance(exponent, Tensor):
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        # a tensor of integer exponents: torch's powi, 1 for a base of 1, ±1 for -1, else 0 (0 ** -1 too)
        negative = b < 0
        sign = np.where(b % 2 != 0, -1, 1)
        b = np.where(negative, 0, b).astype(b.dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf / NaN results, as torch's (silent)
        value = np.power(a, b)
        if negative is not None:
            value = np.where(negative, np.where(a == 1, 1, np.where(a == -1, sign, 0)), value)
        value = np.asarray(value, dtype=compute)  # (the one rounding of a float result)
    out = _C._from_numpy(value)  # (_from_numpy keeps a 0-d result 0-d)
    return out if out.dtype == dtype else out.to(dtype)


def _sum_to(g, shape):
    """g summed over the dimensions broadcasting added or stretched, back to `shape`."""
    shape = tuple(shape)
    lead = g.dim() - len(shape)
    if lead > 0:
        g = g.sum(tuple(range(lead)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(stretched, keepdim=True) if stretched else g


class PowBackward1(Function):
    """pow(a, b) for two tensors with a gradient; the result's dtype is torch's (_pow_dtype)."""

    @staticmethod
    def forward(ctx, a, b):
        out = _host_pow(a, b, _pow_dtype(a, b))
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = g * b * pow(a, b - 1)  # masked where b == 0 (torch's pow_backward_self: 0 * 0^-1 is not NaN)
            ga = _sum_to(_C._functional.where(b == 0, _C._full([], 0.0, ga.dtype), ga), a.shape)
        if ctx.needs_input_grad[1]:
            log_a = (a if a.dtype.is_floating_point else a.to(out.dtype)).log()
            gb = _sum_to(_C._functional.where((a == 0) & (b >= 0), g * 0.0, g * out * log_a), b.shape)
        return ga, gb


def pow(input, exponent):  # noqa: A001 (torch.pow)
    """torch.pow for every operand mix (see the module docstring)."""
    native = not isinstance(exponent, Tensor) and isinstance(input, Tensor) and input.dtype.is_floating_point
    if not native and builtins.any(isinstance(x, Tensor) and x.is_distributed for x in (input, exponent)):
        from ._tensor import _on_pieces  # computed on the host: on each rank's pieces, the layout kept
        return _on_pieces(pow, input, exponent)
    if not isinstance(exponent, Tensor):
        if isinstance(input, Tensor) and not input.dtype.is_floating_point:  # int_tensor ** 2: torch's int result
            dtype = _pow_dtype(input, exponent)
            if dtype.is_floating_point:  # int_tensor ** 0.5: torch casts the tensor and takes its float pow
                return _C.Tensor.pow(input.to(dtype), exponent)
            return _host_pow(input, exponent, dtype)
        if isinstance(input, Tensor):
            return _C.Tensor.pow(input, exponent)
        raise TypeError("pow(): one of the operands must be a Tensor, got %s and %s"
                        % (type(input).__name__, type(exponent).__name__))
    dtype = _pow_dtype(input, exponent)
    if dtype == _dtypes.bool and isinstance(input, Tensor):  # torch's tensor kernel has no bool case (a bool
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")  # number exponent is another kernel)
    grad = _C.is_grad_enabled() and builtins.any(isinstance(x, Tensor) and x.requires_grad for x in (input, exponent))
    if not grad:
        return _host_pow(input, exponent, dtype)
    base = input if isinstance(input, Tensor) else _C._full([], builtins.float(input), dtype)
    return PowBackward1.apply(base, exponent)


TORCH_FUNCTIONS["pow"] = pow


def _integer_aware(cpp_pow):
    """Tensor ** exponent / Tensor.pow: the C++ op, except for an integer or bool tensor raised to a number
    (torch gives an integer tensor for an integer exponent), which takes the host path above."""
    def tensor_pow(self, exponent):
        if not self.dtype.is_floating_point and not isinstance(exponent, Tensor):
            return pow(self, exponent)
        return cpp_pow(self, exponent)
    return tensor_pow


_C.Tensor.__pow__ = _integer_aware(_C.Tensor.__pow__)
_C.Tensor.pow = _integer_aware(_C.Tensor.pow)

