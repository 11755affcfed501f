"""Tensor.clamp (installed by tessel/_compat.py): number bounds through the bound op with torch's dtype rules, tensor
bounds as maximum / minimum with torch's gradients at ties (an autograd Function). Split from _compat.py by concept.

    x.clamp(-1.0, 1.0); x.clamp(min=lo_tensor, max=hi_tensor)
"""
import builtins
import math

from . import _C
from ._lazy_function import lazy_function

Tensor = _C.Tensor
_PLAIN_FLOATS = (_C.dtype.float32.value, _C.dtype.float64.value)


_clamp_cpp = Tensor.clamp


def _clamp(self, min=None, max=None):
    """An integer or bool tensor with a Python float bound computes in the default dtype (float32 unless
    set), as torch's result type (clamp(int_tensor, min=2.0) is floating); tensor bounds (elementwise,
    broadcast) are maximum / minimum."""
    if self.dtype.value in _PLAIN_FLOATS and _plain_bound(min) and _plain_bound(max):
        return _clamp_cpp(self, min, max)  # fast path: float32 / float64, number bounds (no NaN): the checks pass
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        from . import _extra
        out = self
        if min is not None:
            out = _extra.maximum(out, min) if isinstance(min, Tensor) else _clamp(out, min=min)
        if max is not None:
            out = _extra.minimum(out, max) if isinstance(max, Tensor) else _clamp(out, max=max)
        return _clamp_grads(out, self, min, max) if isinstance(min, Tensor) and isinstance(max, Tensor) else out
    return _clamp_numbers(self, min, max)


def _clamp_grads(value, x, lo, hi):
    """value with torch 2.15's gradients of clamp(x, lo, hi) for two tensor bounds (maximum then minimum split
    ties, so x == lo == hi gave x a quarter; torch gives it all): with lo > hi all to hi (the value); else to lo
    where x < lo, to hi where x > hi, half to x and half to the bound x equals when it equals one of them, all
    to x where it equals both, lies inside, or is NaN."""
    if not (_C.is_grad_enabled() and builtins.any(t.requires_grad for t in (x, lo, hi))):
        return value
    return _clamp_grads_apply(value.detach(), x, lo, hi)


def _clamp_numbers(self, min, max):
    if not self.dtype.is_floating_point and any(isinstance(b, builtins.float) for b in (min, max)):
        self = self.to(_C._get_default_dtype())
    if self.dtype == _C.dtype.float16:  # torch's checked conversion of the bounds (float16 clamp(min=-70000))
        for b in (min, max):
            if b is not None:
                _C._check_number_fits(builtins.float(b), self.dtype)
    if self.dtype.is_floating_point and any(isinstance(b, builtins.float) and b != b for b in (min, max)):
        return self * 0.0 + math.nan  # a NaN bound makes every value NaN (torch's); the gradient is 0
    if self.dtype in _INT_RANGES:  # integer bounds beyond the dtype's range would wrap when cast: clip them
        lo, hi = _INT_RANGES[self.dtype]
        min = None if min is None else builtins.min(builtins.max(min, lo), hi)
        max = None if max is None else builtins.min(builtins.max(max, lo), hi)
    return _clamp_cpp(self, min, max)


def _plain_bound(b):
    return b is None or type(b) is builtins.int or (type(b) is builtins.float and b == b)


_INT_RANGES = {_C.dtype.uint8: (0, 255), _C.dtype.int8: (-128, 127), _C.dtype.int16: (-32768, 32767),
               _C.dtype.int32: (-2 ** 31, 2 ** 31 - 1), _C.dtype.int64: (-2 ** 63, 2 ** 63 - 1)}


def _build_clamp_grads():
    from .autograd import Function
    from ._pow import _sum_to

    class ClampGrads(Function):
        @staticmethod
        def forward(ctx, value, x, lo, hi):
            ctx.tensors = (x.detach(), lo.detach(), hi.detach())
            ctx.shapes = (x.shape, lo.shape, hi.shape)
            ctx.needs = (x.requires_grad, lo.requires_grad, hi.requires_grad)
            return value.clone()

        @staticmethod
        def backward(ctx, g):
            x, lo, hi = ctx.tensors
            w = _C._functional.where
            zero, one, half = (_C._full([], v, g.dtype) for v in (0.0, 1.0, 0.5))
            ordered = lo <= hi
            at_lo, at_hi = x == lo, x == hi
            share_lo = w(ordered & (x < lo), one, w(ordered & at_lo & ~at_hi, half, zero))
            share_hi = w(~ordered | (x > hi), one, w(at_hi & ~at_lo, half, zero))
            share_x = w(~ordered | (x < lo) | (x > hi), zero, w(at_lo != at_hi, half, one))
            return (None,) + tuple(_sum_to(g * share, shape) if need else None for share, shape, need in
                                   zip((share_x, share_lo, share_hi), ctx.shapes, ctx.needs))
    return ClampGrads


_clamp_grads_apply = lazy_function(_build_clamp_grads)
