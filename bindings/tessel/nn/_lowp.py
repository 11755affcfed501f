"""torch's CPU rounding for 16-bit (bfloat16 / float16) convolutions, where it is not "compute in float32, round
once": nn/_conv_ops.py hands these cases here.

- float16 conv_transpose, and bfloat16 with output_padding >= stride: torch's slow_conv_transpose*d (oneDNN
  has no float16 convolution on CPUs without AVX512-FP16 / AMX-FP16; torch keeps a large output_padding off
  oneDNN) rounds the gemm's columns to the dtype, then col2im adds them into the output one kernel offset at a
  time in that dtype (`data_im += data_col`), then adds the bias, rounding again. (The other 16-bit
  convolutions accumulate in float32 and add the bias there: _conv_ops rounds them once.)
"""
import functools
import itertools

import numpy as np

from .. import _C
from .._autocast_policy import autocast_off as _autocast_off

_BF16, _F16, _F32 = _C.dtype.bfloat16, _C.dtype.float16, _C.dtype.float32


def shared_16bit(*tensors):
    """bfloat16 / float16 where every given tensor (None skipped) has that one dtype, else None."""
    dtypes = {t.dtype for t in tensors if t is not None}
    dt = dtypes.pop() if len(dtypes) == 1 else None
    return dt if dt in (_BF16, _F16) else None


def rounded_once(dtype, fn, *args):
    """fn on the float32 copies of args' 16-bit tensors, autocast suspended, its result rounded once to dtype:
    torch's convolutions accumulate 16-bit operands in float32 and add the bias there before rounding."""
    up = [a.to(_F32) if isinstance(a, _C.Tensor) and a.dtype in (_BF16, _F16) else a for a in args]
    return _autocast_off(fn)(*up).to(dtype)


@functools.lru_cache(maxsize=64)
def _col2im_slices(size, kernel, stride, padding, dilation, size_in):
    """Per kernel offset, in torch's col2im order (row-major), its flat index and the (output, input) slices
    per spatial dim that its columns land on; offsets whose columns all fall in the padding are left out."""
    per_dim = []
    for i in range(len(size)):
        options = []
        for k in range(kernel[i]):
            start = k * dilation[i] - padding[i]  # where input position 0 lands
            lo = max(0, -(start // stride[i]))
            hi = min(size_in[i] - 1, (size[i] - 1 - start) // stride[i])
            options.append(None if lo > hi else (slice(start + lo * stride[i], start + hi * stride[i] + 1, stride[i]),
                                                 slice(lo, hi + 1)))
        per_dim.append(options)
    return [(flat, tuple(c[0] for c in combo), tuple(c[1] for c in combo))
            for flat, combo in enumerate(itertools.product(*per_dim)) if all(c is not None for c in combo)]


class _Col2im:
    """Built on first use (tessel.autograd imports tessel.nn's package): the autograd.Function of torch's col2im
    in a 16-bit dtype, cols [N, C, K, *L] added into a zero output [N, C, *size] one kernel offset at a time
    (each addition rounded to the dtype); its gradient is the gather of the output gradient (im2col)."""
    cls = None

    @classmethod
    def get(cls):
        if cls.cls is None:
            cls.cls = _make_col2im()
        return cls.cls


def _make_col2im():
    from ..autograd import Function
    from ._conv_ops import _window_index

    class Col2im(Function):
        @staticmethod
        def forward(ctx, cols, size, kernel, stride, padding, dilation):
            n, c, size_in = cols.shape[0], cols.shape[1], tuple(cols.shape[3:])
            ctx.geometry = (size, kernel, stride, padding, dilation, size_in)
            out = _C._full([n, c] + list(size), 0.0, cols.dtype)
            every = (slice(None), slice(None))
            for flat, out_slices, in_slices in _col2im_slices(size, kernel, stride, padding, dilation, size_in):
                view = out[every + out_slices]
                view.add_(cols[:, :, flat][every + in_slices])
            return out

        @staticmethod
        def backward(ctx, grad):
            size, kernel, stride, padding, dilation, size_in = ctx.geometry
            pads = tuple((p, p) for p in padding)
            index = _window_index(size, kernel, stride, pads, dilation, False, "zeros", size_in)[0]
            n, c, total = grad.shape[0], grad.shape[1], int(np.prod(size))
            flat = _C._functional.cat([grad.reshape(n, c, total), _C._full([n, c, 1], 0.0, grad.dtype)], 2)
            cols = flat[:, :, index].reshape(n, c, int(np.prod(kernel)), *size_in)
            return cols, None, None, None, None, None

    return Col2im


@_autocast_off
def conv_transpose_slow(x, weight, bias, groups, size, kernel, stride, padding, dilation):
    """torch's slow_conv_transpose*d of a 16-bit x [N, C, *L]: the columns W^T x rounded to x's dtype, summed
    into the output [N, OC, *size] in kernel-offset order with a rounding after each addition (col2im's
    `data_im += data_col` in that dtype), then the bias added, rounded again."""
    n, c = x.shape[0], x.shape[1]
    size_in = tuple(x.shape[2:])
    ocg, k, l = weight.shape[1], int(np.prod(kernel)), int(np.prod(size_in))
    cg = c // groups
    w = weight.reshape(groups, cg, ocg * k).transpose(1, 2).to(_F32)
    cols = (w.unsqueeze(0).expand(n, groups, ocg * k, cg) @ x.reshape(n, groups, cg, l).to(_F32)).to(x.dtype)
    cols = cols.reshape(n, groups * ocg, k, *size_in)
    out = _Col2im.get().apply(cols, tuple(size), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))
    if bias is not None:
        out = out + bias.reshape(1, groups * ocg, *([1] * len(size)))
    return out
