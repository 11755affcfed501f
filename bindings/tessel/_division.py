"""torch's remainder, fmod and floor division (%, //) as torch's CPU kernels compute them: integers exactly on
the host, floats from an exact fmod (numpy's for dense tensors, exact tensor ops for DTensors, which keep their
layouts); split from _extra.py by concept. Importing it registers them in _extra's TORCH_FUNCTIONS /
TENSOR_METHODS.
"""
import builtins

import numpy as np

from . import _C, _dtypes
from ._dtensor_compose import aligned
from ._extra import TENSOR_METHODS, TORCH_FUNCTIONS, Tensor, _tensor, trunc
from ._tensor import _on_pieces


def _int_host(a, b, fn, name):
    """Integer operands (no gradient) on the host, exact for int64; a zero divisor raises as torch does;
    DTensors on each rank's pieces."""
    if builtins.any(isinstance(t, Tensor) and t.is_distributed for t in (a, b)):
        return _on_pieces(lambda x, y: _int_host(x, y, fn, name), a, b)
    from ._namespace import result_type
    # torch's result type (a 0-d tensor or a Python number only lifts the category: uint8 % int8 0-d is uint8,
    # bool % 2 is int64); a Python int takes it first, wrapping as torch's scalar cast: uint8 // -2 divides by 254
    result = result_type(a, b)
    if result == _dtypes.bool:  # torch's kernels have no bool case (bool // bool gave a bool)
        raise NotImplementedError("\"%s\" not implemented for 'Bool'" % _KERNELS[name])
    dtype = np.dtype(str(result).rsplit(".", 1)[-1])
    av = (a.numpy() if isinstance(a, Tensor) else np.asarray(a)).astype(dtype)
    bv = (b.numpy() if isinstance(b, Tensor) else np.asarray(b)).astype(dtype)
    if np.any(bv == 0):
        raise RuntimeError("ZeroDivisionError")
    with np.errstate(over="ignore"):  # int8 -128 // -1 wraps, as torch's (numpy warned)
        return _tensor(np.asarray(fn(av, bv)).astype(dtype))


_KERNELS = {"remainder": "remainder_cpu", "fmod": "fmod_cpu", "floor_divide": "div_floor_cpu"}


def _is_int(x):
    return isinstance(x, (bool, int, np.integer)) or (isinstance(x, Tensor) and not x.dtype.is_floating_point)


def _float_operands(input, other):
    """Both as tensors of their promoted dtype (a Python number takes a floating tensor's dtype first, as torch's
    wrapped scalars: x % 0.3 divides by float32's 0.3 for a float32 x; with an integer tensor the default float
    dtype: int_tensor // 2.5 divides by 2.5, not by 2)."""
    def like(number, t):
        return _C._full([], float(number), t.dtype if t.dtype.is_floating_point else _C._get_default_dtype())
    if not isinstance(input, Tensor):
        input = like(input, other)
    if not isinstance(other, Tensor):
        other = like(other, input)
    from ._namespace import result_type
    dtype = result_type(input, other)  # torch's: a 0-d operand does not widen a dimensioned one's dtype
    return input.to(dtype), other.to(dtype)


def _split(x):
    """Veltkamp's split of float64 x into hi + lo, each with at most 26 significant bits."""
    c = x * 134217729.0  # 2**27 + 1
    hi = c - (c - x)
    return hi, x - hi


def _fmod_value(a, b):
    """C's fmod(a, b) exactly, as torch's CPU kernels compute it: numpy's fmod for dense tensors; for DTensors by
    tensor ops, so they keep their layouts: q = trunc(a / b) in float64, a - q·b with the product exact
    (float32 and narrower: exact in float64 for quotients below 2**29; float64: Dekker's two-product, for
    quotients below 2**52), q corrected where a / b rounded up to the next integer, zeros with a's sign,
    fmod(finite, ±inf) = the dividend."""
    if not (a.is_distributed or b.is_distributed):
        narrow = a.dtype == _dtypes.bfloat16  # numpy has no bfloat16: float32 holds its values and the result
        an, bn = [(t.float() if narrow else t).detach().numpy() for t in (a, b)]
        with np.errstate(all="ignore"):
            r = _tensor(np.fmod(an, bn))
        return r.to(a.dtype) if narrow else r
    w = _C._functional.where
    A, B = a.double(), b.double()
    q = trunc(A / B)
    if a.dtype == _dtypes.float64:
        p = q * B
        (qh, ql), (bh, bl) = _split(q), _split(B)
        err = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl
        r = (A - p) - err
    else:
        r = A - q * B
    wrong_side = (r != 0.0) & ((r < 0.0) != (A < 0.0))  # q was one too many: step back by |b| towards a
    r = w(wrong_side, r + w(A < 0.0, -B.abs(), B.abs()), r)
    r = w(r == 0.0, A * 0.0, r)  # ±0 with a's sign
    r = w(B.isinf() & A.isfinite(), A, r)
    return r.to(a.dtype)


_VALUE_WITH_GRADIENT = []


def _with_gradient(value, a, b, quotient):
    """value (exact, computed apart) with torch's gradients: 1 for a, -quotient for b (through a Function: the
    value + (b - b.detach()) trick gave NaN for an infinite divisor, where fmod(x, ±inf) is x)."""
    if not (_C.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        return value
    q = _C._functional.where(quotient.isfinite(), quotient, quotient * 0.0).detach()
    if not _VALUE_WITH_GRADIENT:
        from .autograd import Function
        from ._pow import _sum_to

        class ValueWithGradient(Function):
            @staticmethod
            def forward(ctx, value, a, b, q):
                ctx.save_for_backward(q)
                ctx.shapes = (tuple(a.shape), tuple(b.shape))
                return value.clone()

            @staticmethod
            def backward(ctx, g):
                q, = ctx.saved_tensors
                return None, _sum_to(g, ctx.shapes[0]), _sum_to(-(g * q), ctx.shapes[1]), None
        _VALUE_WITH_GRADIENT.append(ValueWithGradient)
    return _VALUE_WITH_GRADIENT[0].apply(value.detach(), a, b, q)


def _floor_div_value(a, b, mod):
    """torch's div_floor_floating: (a - fmod(a, b)) / b, one less where the remainder's sign differs from b's,
    rounded to the nearest integer; ±0 with the sign of a / b; a / b itself for b == 0."""
    w = _C._functional.where
    div = (a - mod) / b
    div = w((mod != 0.0) & ((b < 0.0) != (mod < 0.0)), div - 1.0, div)
    floordiv = div.floor()
    floordiv = w(div - floordiv > 0.5, floordiv + 1.0, floordiv)
    floordiv = w(div == 0.0, (a / b) * 0.0, floordiv)  # ±0 with the sign of a / b
    return w(b == 0.0, a / b, floordiv)


@aligned
def remainder(input, other):
    """Python's modulo as torch computes it: fmod(a, b), plus b where that has the other sign than b (so the
    result has the divisor's sign); exact, as torch's CPU kernel (floor(a / b) would round 3.0 / 0.3f up to 10).
    Gradients 1 and -floor_divide(a, b)."""
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.remainder, "remainder")
    a, b = _float_operands(input, other)
    mod = _fmod_value(a, b)
    value = _C._functional.where((mod != 0.0) & ((b < 0.0) != (mod < 0.0)), mod + b, mod)
    if not (_C.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        return value
    return _with_gradient(value, a, b, _floor_div_value(a.detach(), b.detach(), mod.detach()))


@aligned
def fmod(input, other):
    """C's fmod: the result has the dividend's sign; exact (see _fmod_value). Gradients 1 and -trunc(a / b)."""
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.fmod, "fmod")
    a, b = _float_operands(input, other)
    value = _fmod_value(a, b)
    if not (_C.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        return value
    return _with_gradient(value, a, b, trunc(a.detach() / b.detach()))


@aligned
def floor_divide(input, other):
    """floor(a / b) as torch computes it (torch.floor_divide rounds down since 1.13): from the exact fmod, so
    3.0 // 0.3f is 9 as in torch and Python; integers stay integers. Of tensors that require grad the result
    requires grad, and its backward raises torch's "derivative for aten::floor_divide is not implemented"
    (div(rounding_mode="floor") has a zero gradient instead)."""
    with _C._GradMode(False):
        value = _floor_divide(input, other)
    inputs = [t for t in (input, other) if isinstance(t, Tensor) and t.requires_grad]
    if inputs and _C.is_grad_enabled() and value.dtype.is_floating_point:
        return _no_derivative("floor_divide").apply(value, *inputs)
    return value


_NO_DERIVATIVE = {}


def _no_derivative(op):
    """An autograd Function that passes its first argument through and whose backward raises torch's error for
    an op without a derivative."""
    if op not in _NO_DERIVATIVE:
        from .autograd import Function

        class NoDerivative(Function):
            @staticmethod
            def forward(ctx, value, *inputs):
                return value.clone()

            @staticmethod
            def backward(ctx, grad):
                raise RuntimeError("derivative for aten::%s is not implemented" % op)
        _NO_DERIVATIVE[op] = NoDerivative
    return _NO_DERIVATIVE[op]


def _floor_divide(input, other):
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.floor_divide, "floor_divide")
    a, b = _float_operands(input, other)
    if a.dtype in _REDUCED and not (isinstance(other, Tensor) and other.numel() > 1):
        # torch's kernel for one divisor (a number or a one-element tensor): in float32 (a divisor number at
        # float32 precision; a dividend number is rounded to the tensor's dtype), one rounding at the end
        return _floor_divide(_float32(input if isinstance(input, Tensor) else a), _float32(other)).to(a.dtype)
    # (a 16-bit divisor tensor: torch's element kernel rounds every step to the 16-bit dtype, which the ops below
    # do in that dtype; from float32 values 288 of 4096 float16 quotients beyond 2048 differed)
    a, b = a.detach(), b.detach()
    return _floor_div_value(a, b, _fmod_value(a, b))


_REDUCED = _dtypes.REDUCED


def _float32(x):
    """A bfloat16 / float16 tensor as float32 (exact); anything else as it is."""
    return x.float() if isinstance(x, Tensor) and x.dtype in _REDUCED else x


TORCH_FUNCTIONS.update(remainder=remainder, fmod=fmod, floor_divide=floor_divide)
TENSOR_METHODS.update(remainder=remainder, fmod=fmod, floor_divide=floor_divide, __mod__=remainder,
                      __rmod__=lambda a, b: remainder(b, a), __floordiv__=floor_divide,
                      __rfloordiv__=lambda a, b: floor_divide(b, a))
