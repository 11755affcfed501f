"""torch's CPU rounding for 16-bit (bfloat16 / float16) convolutions and batch norm, where it is not "compute in
float32, round once": nn/_conv_ops.py hands these cases here.

- float16 conv_transpose, and bfloat16 with output_padding >= stride: torch's slow_conv_transpose*d (oneDNN
  has no float16 convolution on CPUs without AVX512-FP16 / AMX-FP16; torch keeps a large output_padding off
  oneDNN) rounds the gemm's columns to the dtype, then col2im adds them into the output one kernel offset at a
  time in that dtype (`data_im += data_col`), then adds the bias, rounding again. (The other 16-bit
  convolutions accumulate in float32 and add the bias there: _conv_ops rounds them once.)
- batch norm in training with 16-bit input and 16-bit (or absent) parameters and statistics (a model
  `.to(bfloat16)`): torch's save_mean / save_invstd are held in the input's dtype and the output is normalized
  with those rounded values; the running statistics blend in that dtype's arithmetic (c10::BFloat16 rounds after
  every operation); the backward uses the rounded statistics too. Which kernel runs (contiguous, channels-last,
  generic strides) changes some of these roundings. A 16-bit input with float32 parameters is torch's mixed
  kernel, which keeps float32 statistics: its training stays on the fused op.
- batch norm in evaluation of a 16-bit input: invstd in float32 and one fused multiply-add per element, as
  torch's kernel (the generic one: the dtype's own arithmetic).
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


def _round_scalar(value, dtype):
    return _C._full([1], float(value), dtype).item()


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


@functools.cache
def _make_col2im():
    """Built on first use (tessel.autograd imports tessel.nn's package): the autograd.Function of torch's col2im
    in a 16-bit dtype, cols [N, C, K, *L] added into a zero output [N, C, *size] one kernel offset at a time
    (each addition rounded to the dtype); its gradient is the gather of the output gradient (im2col)."""
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
    out = _make_col2im().apply(cols, tuple(size), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))
    if bias is not None:
        out = out + bias.reshape(1, groups * ocg, *([1] * len(size)))
    return out


def _layout(x):
    """Which of torch's CPU batch-norm kernels a 16-bit input takes: "contiguous", "channels_last" (NHWC / NDHWC
    memory, and contiguous input with one value per sample and channel, which torch treats as channels-last) or
    "generic" (other strides: TensorIterator loops in the dtype's own arithmetic)."""
    from .._tensor_extras import channels_last, channels_last_3d
    if x.is_contiguous():
        return "channels_last" if x.numel() == x.shape[0] * x.shape[1] else "contiguous"
    if (x.ndim == 4 and x.is_contiguous(memory_format=channels_last)) or \
            (x.ndim == 5 and x.is_contiguous(memory_format=channels_last_3d)):
        return "channels_last"
    return "generic"


def _batch_statistics(x, count, eps, layout):
    """torch's save_mean / save_invstd in x's dtype, and the float32 mean and sum of squared deviations the
    running statistics blend. The fused op's float64 sums give the exact statistics, where torch's float32
    sums round to the same 16-bit values but within float32 noise of a rounding boundary."""
    dt, f64 = x.dtype, _C.dtype.float64
    _, mean, var = _C._functional._batch_norm_train(x if dt == _BF16 else x.to(_F32), None, None, eps)
    var_sum = var.to(f64) * float(count)
    if layout == "generic" or (dt == _BF16 and layout == "channels_last"):
        # these kernels take the deviations from the rounded mean: Σ(x - c)² = Σ(x - mean)² + N (mean - c)²
        var_sum = var_sum + float(count) * (mean.to(f64) - mean.to(dt).to(f64)) ** 2
    var_sum = var_sum.to(_F32)
    if dt == _BF16 and layout != "generic":
        # the sum of squares is held in bfloat16 and divided by the count as a bfloat16 (c10's BFloat16 / int64)
        var = (var_sum.to(dt).to(_F32) / _round_scalar(count, dt)).to(dt)
    else:
        var = var_sum / float(count)
    var64 = var.to(f64)
    invstd = (1.0 / (var64 + eps).sqrt()).to(_F32)  # torch's InvStd: double arithmetic, held in float
    if eps == 0:
        invstd = _C._functional.where(var64 == 0.0, invstd * 0.0, invstd)
    return mean.to(dt), invstd.to(dt), mean, var_sum


def _blend_running(running_mean, running_var, mean, var_sum, count, momentum, layout):
    """torch's running-statistics update for 16-bit statistics: bfloat16 rounds after every operation (c10's
    BFloat16 arithmetic, the momentum itself a bfloat16); float16 blends in float32 and rounds once; the
    generic kernel blends the rounded mean and the float32 unbiased variance in double."""
    dt = (running_mean if running_mean is not None else running_var).dtype
    if layout == "generic":
        f64 = _C.dtype.float64
        if running_mean is not None:
            new = mean.to(dt).to(f64) * momentum + running_mean.to(f64) * (1.0 - momentum)
            running_mean.copy_(new.to(_F32).to(dt))
        if running_var is not None:
            new = (var_sum / float(count - 1)).to(f64) * momentum + running_var.to(f64) * (1.0 - momentum)
            running_var.copy_(new.to(_F32).to(dt))
        return
    if dt == _BF16:
        m = _round_scalar(momentum, dt)
        keep = _round_scalar(1.0 - m, dt)
        if running_mean is not None:
            new = (mean.to(dt).to(_F32) * m).to(dt).to(_F32) + (running_mean.to(_F32) * keep).to(dt).to(_F32)
            running_mean.copy_(new.to(dt))
        if running_var is not None:
            unbiased = (var_sum.to(dt).to(_F32) / _round_scalar(count - 1, dt)).to(dt).to(_F32)
            running_var.copy_((unbiased * m + (running_var.to(_F32) * keep).to(dt).to(_F32)).to(dt))
        return
    m = _round_scalar(momentum, _F32)
    keep = _round_scalar(1.0 - m, _F32)
    if running_mean is not None:
        running_mean.copy_((mean * m + running_mean.to(_F32) * keep).to(dt))
    if running_var is not None:
        running_var.copy_(((var_sum / float(count - 1)) * m + running_var.to(_F32) * keep).to(dt))


def batch_norm_train(input, running_mean, running_var, weight, bias, momentum, eps):
    """torch.nn.functional.batch_norm(training=True) of a 16-bit input whose parameters and statistics share
    its dtype (or are absent), with torch's CPU rounding (see the module docstring)."""
    c = input.shape[1]
    count = input.numel() // c
    layout = _layout(input)
    with _C._GradMode(False):
        save_mean, save_invstd, mean, var_sum = _batch_statistics(input.detach(), count, eps, layout)
        if running_mean is not None or running_var is not None:
            _blend_running(running_mean, running_var, mean, var_sum, count, momentum, layout)
    return _make_batch_norm16().apply(input, weight, bias, save_mean, save_invstd, eps, layout)


def _in_dtype_arithmetic(x, weight, bias, mean, invstd, shape):
    """The generic kernel's ((x - mean) * invstd) * weight + bias, each operation rounded to x's dtype."""
    dt = x.dtype

    def r(t):
        return t.to(dt).to(_F32)
    y = r(r(x.to(_F32) - mean.to(_F32).reshape(shape)) * invstd.to(_F32).reshape(shape))
    if weight is not None:
        y = r(y * weight.to(_F32).reshape(shape))
    if bias is not None:
        y = r(y + bias.to(_F32).reshape(shape))
    return y.to(dt)


def _normalize(x, weight, bias, mean, invstd, shape, fused_shift=False):
    """torch's batch_norm_cpu_contiguous_impl: alpha = invstd * weight, beta = bias - mean * alpha in float32
    (one rounding for beta where fused_shift: torch's mixed-dtype kernel, whose compiler fuses it), each output
    one fused multiply-add x * alpha + beta rounded to float32 (emulated in float64, where the product is
    exact), then to x's dtype."""
    f64 = _C.dtype.float64
    alpha = invstd.to(_F32)
    if weight is not None:
        alpha = alpha * weight.to(_F32)
    shift = bias.to(_F32) if bias is not None else _C._full([shape[1]], 0.0, _F32)
    if fused_shift:
        beta = (shift.to(f64) - mean.to(f64) * alpha.to(f64)).to(_F32)
    else:
        beta = shift - mean.to(_F32) * alpha
    y = x.to(f64) * alpha.to(f64).reshape(shape) + beta.to(f64).reshape(shape)
    return y.to(_F32).to(x.dtype)


def eval_parameters(input, *params):
    """How torch's CPU batch norm treats a 16-bit input in evaluation: "same" (parameters and statistics in
    its dtype), "mixed" (all float32), or None (another input dtype or combination: the float32 path)."""
    if input.dtype not in (_BF16, _F16) or input.is_distributed:
        return None
    dtypes = {t.dtype for t in params if t is not None}
    return "same" if dtypes == {input.dtype} else "mixed" if dtypes == {_F32} else None


def batch_norm_eval(input, running_mean, running_var, weight, bias, eps, kind):
    """batch_norm(training=False) of a 16-bit input as torch's CPU kernels: invstd = 1 / sqrt(running_var + eps)
    in float32 and the fused multiply-add of _normalize; for generic strides invstd from tensor operations in
    the statistics' dtype, then ((x - mean) * invstd) * weight + bias, rounded after each operation where the
    parameters share x's dtype and once where they are float32."""
    shape = [1, input.shape[1]] + [1] * (input.ndim - 2)
    if _layout(input) != "generic":
        invstd = 1.0 / (running_var.to(_F32) + eps).sqrt()
        return _normalize(input, weight, bias, running_mean, invstd, shape, fused_shift=kind == "mixed")
    invstd = 1.0 / (running_var + eps).sqrt()
    if kind == "same":
        return _in_dtype_arithmetic(input, weight, bias, running_mean, invstd, shape)
    y = (input.to(_F32) - running_mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y.to(input.dtype)


def _backward(x, dy, weight, mean, invstd, dims, shape, count, needs):
    """batch_norm_backward_cpu's contiguous / channels-last kernels (float32 arithmetic)."""
    dy32 = dy.to(_F32)
    xm = x.to(_F32) - mean.reshape(shape)
    total = dy32.sum(dims)
    dotp = (xm * dy32).sum(dims)
    dx = dw = db = None
    if needs[0]:
        k = dotp * invstd * invstd / float(count)
        dx = ((dy32 - (total / float(count)).reshape(shape)) - xm * k.reshape(shape)) * invstd.reshape(shape)
        if weight is not None:
            dx = dx * weight.to(_F32).reshape(shape)
        dx = dx.to(x.dtype)
    if needs[1]:
        dw = (dotp * invstd).to(weight.dtype)
    if needs[2]:
        db = total.to(x.dtype)
    return dx, dw, db


def _backward_generic(x, dy, weight, mean, invstd, dims, shape, count, needs):
    """batch_norm_backward_cpu's generic kernel: c10 arithmetic in x's dtype (a rounding after each operation),
    the dot product summed in float32 and the sum of dy rounded to the dtype."""
    dt = x.dtype

    def r(t):
        return t.to(dt).to(_F32)
    n = _round_scalar(count, dt)
    inv = invstd.reshape(shape)
    xm = r(x.to(_F32) - mean.reshape(shape))
    total = r(dy.to(_F32).sum(dims))
    dotp = r(xm * dy.to(_F32)).sum(dims)
    dx = dw = db = None
    if needs[0]:
        k = r(r(r(r(dotp) * invstd) * invstd) / n).reshape(shape)
        dx = r(r(r(dy.to(_F32) - r(total / n).reshape(shape)) - r(xm * k)) * inv)
        if weight is not None:
            dx = r(dx * weight.to(_F32).reshape(shape))
        dx = dx.to(dt)
    if needs[1]:
        dw = (dotp * invstd).to(weight.dtype)
    if needs[2]:
        db = total.to(dt)
    return dx, dw, db


@functools.cache
def _make_batch_norm16():
    """Built on first use (tessel.autograd imports tessel.nn's package): the autograd.Function whose forward
    normalizes with the rounded statistics and whose backward is torch's batch_norm_backward with them: with
    xm = x - mean, dx = ((dy - Σdy / N) - xm · (Σxm·dy · invstd² / N)) · invstd · weight in float32, dweight =
    Σxm·dy · invstd, dbias = Σdy, each rounded to its dtype (the generic kernel: in the dtype's arithmetic)."""
    from ..autograd import Function

    class BatchNorm16(Function):
        @staticmethod
        def forward(ctx, x, weight, bias, save_mean, save_invstd, eps, layout):
            shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
            ctx.save_for_backward(x, weight, save_mean, save_invstd)
            ctx.eps, ctx.layout = eps, layout
            if layout == "generic":
                return _in_dtype_arithmetic(x, weight, bias, save_mean, save_invstd, shape)
            return _normalize(x, weight, bias, save_mean, save_invstd, shape)

        @staticmethod
        def backward(ctx, dy):
            x, weight, save_mean, save_invstd = ctx.saved_tensors
            c = x.shape[1]
            dims = (0,) + tuple(range(2, x.ndim))
            shape = [1, c] + [1] * (x.ndim - 2)
            mean, invstd = save_mean.to(_F32), save_invstd.to(_F32)
            if _C.is_grad_enabled():
                # create_graph: the statistics as the functions of x they are (values kept rounded), so the
                # gradient's own gradient sees them move with x
                x32 = x.to(_F32)
                m = x32.mean(dims)
                mean = m + (mean - m).detach()
                s = (((x32 - m.reshape(shape)) ** 2).mean(dims) + ctx.eps).rsqrt()
                invstd = s + (invstd - s).detach()
            kernel = _backward_generic if ctx.layout == "generic" else _backward
            dx, dw, db = kernel(x, dy, weight, mean, invstd, dims, shape, x.numel() // c, ctx.needs_input_grad)
            return dx, dw, db, None, None, None, None

    return BatchNorm16
