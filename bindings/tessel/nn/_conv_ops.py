"""torch.nn.functional's convolution, pooling, fold/unfold and batch-norm entries, composed from bound ops
(so autograd, autocast and the dtype rules come from them).

Every windowed op reads its windows through a host-built index of shape [K, O] (kernel offsets x output
positions, cached per geometry). Max pooling hands it to the C++ op window_max (core/ops/pool.h: one
pass, ties to the first tap, NaN wins; padding taps redirected to the window's first input tap).
The others are one gather: the input's spatial dims are flattened, one sentinel entry is appended (0 for
convolution, fold and average pooling), zero padding and the windows ceil_mode adds point at the
sentinel, while reflect / replicate / circular padding map into the input itself. Convolution is then one batched matmul of the weight [G, OC/G, C/G*K] with the columns
[N, G, C/G*K, O] (no permute on either side); pooling reduces over K; fold (and so conv_transpose) is the
gather's adjoint, one index-add of rows. The gather's backward is that same index-add, so gradients are
exact. Adaptive average pooling is one small averaging matrix per spatial dim (F.linear).

float32 convolutions outside autocast (zero padding; other padding modes gather) run instead on the C++
op of core/ops/conv.h, oneDNN's convolution primitives: 12x faster than this composition on a [32, 64,
32, 32] 3x3 layer (fwd + bwd). The composition remains for float64 and the reflect / replicate / circular
modes, and serves pooling, fold/unfold and conv_transpose; its index arrays are cached per geometry.
16-bit convolutions round as torch's CPU kernels do: bfloat16 ones on oneDNN's bfloat16 primitives, or in
float32 rounded once where those would round before the bias; float16 ones in float32, rounded once;
float16 conv_transpose through torch's slow kernel (nn/_lowp.py).
"""
import builtins
import functools
import math

import numpy as np

from .. import _C
from . import _lowp
from .._extra import _channel_affine
from .._autocast_policy import autocast_off as _autocast_off, float32_under_autocast as _float32_under_autocast
from .._autocast_policy import lower_precision_under_autocast as _lower_under_autocast


def _tuple(v, n, name):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return tuple(int(v[0]) for _ in range(n))
        if len(v) != n:
            raise RuntimeError("expected %s to be a single integer value or a list of %d values to match the "
                               "convolution dimensions, but got %s=%s" % (name, n, name, list(v)))
        return tuple(int(x) for x in v)
    return tuple(int(v) for _ in range(n))


def _output_len(size, kernel, stride, before, after, dilation, ceil_mode):
    span = dilation * (kernel - 1) + 1
    room = size + before + after - span
    out = (room + (stride - 1 if ceil_mode else 0)) // stride + 1  # floor division, as torch's div_rtn
    if ceil_mode and (out - 1) * stride >= size + before:
        out -= 1  # torch: the last window must start inside the input or its left padding
    return max(out, 0)


def _map_coords(c, size, mode):
    """Input coordinates of padded positions under padding_mode; valid marks those that read the input."""
    if mode == "zeros":
        return c, (c >= 0) & (c < size)
    if mode == "reflect":
        period = 2 * (size - 1) if size > 1 else 1
        m = np.abs(c) % period
        return np.where(m >= size, period - m, m), np.ones_like(c, dtype=bool)
    if mode == "replicate":
        return np.clip(c, 0, size - 1), np.ones_like(c, dtype=bool)
    if mode == "circular":
        return c % size, np.ones_like(c, dtype=bool)
    raise ValueError("padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got %r" % mode)


@functools.lru_cache(maxsize=256)
def _window_index(size, kernel, stride, pads, dilation, ceil_mode, mode, outs=None):
    """(index tensor [K*O] into the flattened input + sentinel, the same index as an array [K, O], output
    sizes, in_padded [K, O] (inside the padded bounds), valid [K, O] (reads the input)). pads is
    ((before, after), ...) per spatial dim; outs, where given, keeps only the first outs windows per dim."""
    nd = len(size)
    outs = outs or tuple(_output_len(size[i], kernel[i], stride[i], pads[i][0], pads[i][1], dilation[i], ceil_mode)
                 for i in range(nd))
    per_dim = []
    for i in range(nd):
        c = np.arange(kernel[i])[:, None] * dilation[i] + np.arange(outs[i])[None, :] * stride[i] - pads[i][0]
        inside = (c >= -pads[i][0]) & (c < size[i] + pads[i][1])
        per_dim.append(_map_coords(c, size[i], mode) + (inside,))
    index, valid, in_padded = _combine_windows(size, per_dim)
    return _as_tensor(index.reshape(-1)), index, outs, in_padded, valid


def _combine_windows(size, per_dim):
    """Per spatial dim i, (input coordinate, reads the input, inside the padded bounds), each [k_i, o_i], into
    the flattened windows: (index [K, O] into the flattened input, padding taps at the sentinel `total`;
    valid [K, O]; inside [K, O]), kernel offsets and outputs both row-major over the dims."""
    nd = len(size)
    flat = np.zeros([1] * (2 * nd), dtype=np.int64)
    valid = np.ones([1] * (2 * nd), dtype=bool)
    inside = np.ones([1] * (2 * nd), dtype=bool)
    place = 1
    for i in reversed(range(nd)):
        coords, ok, within = per_dim[i]
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = coords.shape
        flat = flat + (coords * place).reshape(shape)
        valid = valid & ok.reshape(shape)
        inside = inside & within.reshape(shape)
        place *= size[i]
    full = [c.shape[0] for c, _, _ in per_dim] + [c.shape[1] for c, _, _ in per_dim]
    k, o = int(np.prod(full[:nd])), int(np.prod(full[nd:]))
    flat, valid, inside = (np.broadcast_to(a, full).reshape(k, o) for a in (flat, valid, inside))
    return np.where(valid, flat, place), valid, inside


def _as_tensor(array):
    from .._tensor import tensor
    return tensor(np.ascontiguousarray(array))


@functools.lru_cache(maxsize=128)
def _max_window_index(size, kernel, stride, pads, dilation, ceil_mode):
    """_window_index for max pooling: each padding tap reads its window's first input tap instead of the
    sentinel (the max is unchanged; ties, all -inf windows included, go to the first input tap as torch's)."""
    _, index, outs, _, valid = _window_index(size, kernel, stride, pads, dilation, ceil_mode, "zeros")
    first = index[valid.argmax(0), np.arange(index.shape[1])]
    redirected = np.where(valid | ~valid.any(0, keepdims=True), index, first[None, :])
    return _as_tensor(redirected.reshape(-1)), redirected, outs


class _DenseGrad:
    """The identity, whose backward hands on a contiguous gradient: the window gathers below append a fill column
    with cat, so x's gradient came back as a strided view and torch's `grad.view(B, -1)` (WGAN-GP's penalty over
    autograd.grad) raised where torch's gradient is contiguous."""
    _function = None

    @classmethod
    def apply(cls, x):
        if not (x.requires_grad and _C.is_grad_enabled()):
            return x
        if cls._function is None:
            from ..autograd import Function

            class ContiguousGrad(Function):
                @staticmethod
                def forward(ctx, t):
                    return t

                @staticmethod
                def backward(ctx, g):
                    return g.contiguous()
            cls._function = ContiguousGrad
        return cls._function.apply(x)


def _gather(x, size, kernel, stride, pads, dilation, ceil_mode, mode, fill):
    """x [N, C, *size] -> columns [N, C, K, O] and the output sizes."""
    x = _DenseGrad.apply(x)
    index, _, outs, _, _ = _window_index(size, kernel, stride, pads, dilation, ceil_mode, mode)
    n, c = x.shape[0], x.shape[1]
    total = int(np.prod(size))
    flat = x.reshape(n, c, total)
    flat = _C._functional.cat([flat, _C._full([n, c, 1], float(fill), x.dtype)], 2)
    cols = flat[:, :, index]
    return cols.reshape(n, c, int(np.prod(kernel)), int(np.prod(outs))), outs


def _accumulation_dtype(x):
    return x.dtype if x.dtype in (_C.dtype.float64, _C.dtype.float32) else _C.dtype.float32


def _batched(input, nd, name):
    if input.ndim == nd + 2:
        return input, True
    if input.ndim == nd + 1:
        return input.unsqueeze(0), False
    raise RuntimeError("Expected %dD (unbatched) or %dD (batched) input to %s, but got input of size: %s"
                       % (nd + 1, nd + 2, name, list(input.shape)))


_warned_once = {}


def _same_pads(padding, kernel, dilation, stride, nd, name):
    if isinstance(padding, str):
        if padding == "valid":
            return tuple((0, 0) for _ in range(nd))
        if padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pads = []
            for i in range(nd):
                total = dilation[i] * (kernel[i] - 1)
                pads.append((total // 2, total - total // 2))
            if any(a != b for a, b in pads) and not _warned_once.get("same"):
                _warned_once["same"] = True  # torch's TORCH_WARN_ONCE
                import warnings
                warnings.warn("Using padding='same' with even kernel lengths and odd dilation may require a "
                              "zero-padded copy of the input be created")
            return tuple(pads)
        raise ValueError("Invalid padding string %r, should be one of ['valid', 'same']" % padding)
    p = _tuple(padding, nd, "padding")
    if any(x < 0 for x in p):
        raise RuntimeError("%s: negative padding is not supported, got %s" % (name, list(p)))
    return tuple((x, x) for x in p)


def _fused_dtype(x, weight, bias):
    """The dtype the C++ convolution runs a conv / conv_transpose in (core/ops/conv.h: float32 or bfloat16),
    or None for the composed path: the operands' own dtype where all are float32 or all bfloat16, outside
    autocast; bfloat16 inside a bfloat16 autocast region for float32 / bfloat16 operands (torch casts
    convolutions to the autocast dtype); anything else (float64, float16, a float16 autocast) composed."""
    f32, bf16 = _C.dtype.float32, _C.dtype.bfloat16
    dtypes = {x.dtype, weight.dtype} | ({bias.dtype} if bias is not None else set())
    enabled, cast = _C._autocast_state()
    if enabled:
        return bf16 if cast == bf16 and dtypes <= {f32, bf16} else None
    return dtypes.pop() if len(dtypes) == 1 and dtypes <= {f32, bf16} else None


def _cast_all(dtype, *ts):
    return [t if t is None or t.dtype == dtype else t.to(dtype) for t in ts]


@_lower_under_autocast
def _conv(nd, input, weight, bias, stride, padding, dilation, groups, padding_mode="zeros"):
    name = "conv%dd" % nd
    x, batched = _batched(input, nd, name)
    if weight.ndim != nd + 2:
        raise RuntimeError("%s: expected weight to be %d-dimensional, got weight of size %s"
                           % (name, nd + 2, list(weight.shape)))
    c = x.shape[1]
    oc, cg = weight.shape[0], weight.shape[1]
    kernel = tuple(weight.shape[2:])
    if groups < 1 or oc % groups:
        raise RuntimeError("%s: out channels (%d) must be divisible by groups (%d)" % (name, oc, groups))
    if c != cg * groups:
        raise RuntimeError("Given groups=%d, weight of size %s, expected input%s to have %d channels, but got %d "
                           "channels instead" % (groups, list(weight.shape), list(x.shape), cg * groups, c))
    stride = _tuple(stride, nd, "stride")
    dilation = _tuple(dilation, nd, "dilation")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise RuntimeError("%s: stride and dilation must be positive, got stride=%s dilation=%s"
                           % (name, list(stride), list(dilation)))
    pads = _same_pads(padding, kernel, dilation, stride, nd, name)
    size = tuple(x.shape[2:])
    for i in range(nd):
        if size[i] + pads[i][0] + pads[i][1] < dilation[i] * (kernel[i] - 1) + 1:
            raise RuntimeError("%s: calculated padded input size per channel: %s. Kernel size: %s. Kernel size can't "
                               "be greater than actual input size" % (
                                   name, [size[j] + pads[j][0] + pads[j][1] for j in range(nd)], list(kernel)))
    if bias is not None and tuple(bias.shape) != (oc,):
        raise RuntimeError("Given weight of size %s, expected bias to be 1-dimensional with %d elements, but got bias "
                           "of size %s instead" % (list(weight.shape), oc, list(bias.shape)))
    out = _conv_compute(nd, x, weight, bias, stride, pads, dilation, groups, padding_mode)
    return out if batched else out.squeeze(0)


def _conv_compute(nd, x, weight, bias, stride, pads, dilation, groups, padding_mode):
    dt = _fused_dtype(x, weight, bias) if padding_mode == "zeros" else None
    if dt is not None:  # (oneDNN's bfloat16 convolution adds the bias to its float32 sums: one rounding)
        x, weight, bias = _cast_all(dt, x, weight, bias)
        return _C._functional._convolution(x, weight, bias, list(stride), [p[0] for p in pads],
                                           [p[1] for p in pads], list(dilation), groups)
    low = _lowp.shared_16bit(x, weight, bias)
    if low is not None:
        # torch's float16 convolution (slow_conv*d: a gemm into the bias) and the bfloat16 one accumulate in
        # float32 and add the bias there: round once, not after the products and again after the bias
        return _lowp.rounded_once(low, _conv_compute, nd, x, weight, bias, stride, pads, dilation, groups,
                                  padding_mode)
    n, oc, cg = x.shape[0], weight.shape[0], weight.shape[1]
    kernel = tuple(weight.shape[2:])
    cols, outs = _gather(x, tuple(x.shape[2:]), kernel, stride, pads, dilation, False, padding_mode, 0.0)
    k, o = int(np.prod(kernel)), int(np.prod(outs))
    cols = cols.reshape(n, groups, cg * k, o)
    w = weight.reshape(groups, oc // groups, cg * k)
    out = w.unsqueeze(0).expand(n, groups, oc // groups, cg * k) @ cols
    out = out.reshape(n, oc, *outs)
    if bias is not None:
        out = out + bias.reshape(1, oc, *([1] * nd))
    return out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def _fold_rows(cols, size, kernel, stride, pads, dilation, outs=None):
    """The gather's adjoint: cols [N, C, K*O] summed into [N, C, *size] (padding positions dropped); outs:
    the windows per dim (conv_transpose's input size; by default all that fit)."""
    index, _, _, _, _ = _window_index(size, kernel, stride, pads, dilation, False, "zeros", outs)
    n, c = cols.shape[0], cols.shape[1]
    total = int(np.prod(size))
    rows = cols.reshape(n * c, -1).transpose(0, 1)
    summed = _C._functional._index_add_rows(rows.contiguous(), index, total + 1)
    return summed.narrow(0, 0, total).transpose(0, 1).reshape(n, c, *size)


@_lower_under_autocast
def _conv_transpose(nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    name = "conv_transpose%dd" % nd
    x, batched = _batched(input, nd, name)
    c = x.shape[1]
    if weight.ndim != nd + 2 or weight.shape[0] != c:
        raise RuntimeError("%s: weight of size %s does not match input%s (expected weight [%d, out_channels/groups, "
                           "kernel...])" % (name, list(weight.shape), list(x.shape), c))
    if c % groups:
        raise RuntimeError("%s: in channels (%d) must be divisible by groups (%d)" % (name, c, groups))
    ocg, kernel = weight.shape[1], tuple(weight.shape[2:])
    if bias is not None and tuple(bias.shape) != (groups * ocg,):
        raise RuntimeError("Given transposed weight of size %s, expected bias to be 1-dimensional with %d elements, "
                           "but got bias of size %s instead" % (list(weight.shape), groups * ocg, list(bias.shape)))
    stride, dilation = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    padding, output_padding = _tuple(padding, nd, "padding"), _tuple(output_padding, nd, "output_padding")
    for i in range(nd):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise RuntimeError("%s: output padding must be smaller than either stride or dilation, got "
                               "output_padding=%s stride=%s dilation=%s" % (name, list(output_padding), list(stride),
                                                                            list(dilation)))
    size_in = tuple(x.shape[2:])
    size = tuple((size_in[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1
                 for i in range(nd))
    if any(s <= 0 for s in size):
        raise RuntimeError("%s: output size %s is too small for input%s" % (name, list(size), list(x.shape)))
    out = _conv_transpose_compute(x, weight, bias, stride, padding, output_padding, groups, dilation, size)
    return out if batched else out.squeeze(0)


def _conv_transpose_compute(x, weight, bias, stride, padding, output_padding, groups, dilation, size):
    nd, n, c = x.ndim - 2, x.shape[0], x.shape[1]
    ocg, kernel, size_in = weight.shape[1], tuple(weight.shape[2:]), tuple(x.shape[2:])
    pads = tuple((padding[i], padding[i]) for i in range(nd))
    dt = _fused_dtype(x, weight, bias)
    fits = all(output_padding[i] < stride[i] for i in range(nd))
    low = _lowp.shared_16bit(x, weight, bias)
    if low == _C.dtype.float16 or (low is not None and not fits):
        # torch's slow_conv_transpose*d: float16 always (oneDNN has no float16 deconvolution without AVX512-FP16),
        # bfloat16 where output_padding >= stride (torch keeps those off oneDNN)
        return _lowp.conv_transpose_slow(x, weight, bias, groups, size, kernel, stride, padding, dilation)
    if low is not None and bias is not None:
        # torch's oneDNN deconvolution adds the bias to its float32 sums and rounds once (the bfloat16
        # primitive below would round before the bias)
        return _lowp.rounded_once(low, _conv_transpose_compute, x, weight, bias, stride, padding, output_padding,
                                  groups, dilation, size)
    if dt is not None and fits:
        # oneDNN (core/ops/conv.h): conv_transpose is the input gradient of the convolution with this weight
        # that maps the output back onto x; its gradients are a convolution (x) and a weight gradient (w).
        # (output_padding >= stride, allowed under a larger dilation, gives that convolution one output
        # too many and takes the composed path below.)
        x, weight, bias = _cast_all(dt, x, weight, bias)
        out = _C._functional._conv_transpose(x, weight, [n, groups * ocg] + list(size), list(stride), list(padding),
                                             list(dilation), groups)
        if bias is not None:
            out = out + bias.reshape(1, groups * ocg, *([1] * nd))
        return out
    k, l = int(np.prod(kernel)), int(np.prod(size_in))
    cg = c // groups
    w = weight.reshape(groups, cg, ocg * k).transpose(1, 2)  # [G, OCg*K, Cg]
    cols = w.unsqueeze(0).expand(n, groups, ocg * k, cg) @ x.reshape(n, groups, cg, l)  # [N, G, OCg*K, L]
    out = _fold_rows(cols.reshape(n, groups * ocg, k * l), size, kernel, stride, pads, dilation, size_in)
    if bias is not None:
        out = out + bias.reshape(1, groups * ocg, *([1] * nd))
    return out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


def _check_windows_fit(name, size, kernel, pads, dilation, what):
    for i in range(len(size)):
        if size[i] + pads[i][0] + pads[i][1] < dilation[i] * (kernel[i] - 1) + 1:
            raise RuntimeError("%s: the dilated kernel %s does not fit the padded %s (padding %s)"
                               % (name, list(kernel), what, [p for p, _ in pads]))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.unfold (im2col) of a 4-D (or unbatched 3-D) input: [N, C*kh*kw, L]."""
    x, batched = _batched(input, 2, "unfold")
    kernel, dilation = _tuple(kernel_size, 2, "kernel_size"), _tuple(dilation, 2, "dilation")
    stride, pads = _tuple(stride, 2, "stride"), tuple((p, p) for p in _tuple(padding, 2, "padding"))
    _check_windows_fit("unfold", tuple(x.shape[2:]), kernel, pads, dilation, list(input.shape))
    cols, outs = _gather(x, tuple(x.shape[2:]), kernel, stride, pads, dilation, False, "zeros", 0.0)
    out = cols.reshape(x.shape[0], -1, int(np.prod(outs)))
    return out if batched else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.fold (col2im): [N, C*kh*kw, L] summed into [N, C, *output_size]."""
    if input.ndim not in (2, 3):
        raise RuntimeError("fold: expected 2D or 3D (batched) input, got input of size %s" % list(input.shape))
    x = input if input.ndim == 3 else input.unsqueeze(0)
    size, kernel = _tuple(output_size, 2, "output_size"), _tuple(kernel_size, 2, "kernel_size")
    dilation, stride = _tuple(dilation, 2, "dilation"), _tuple(stride, 2, "stride")
    pads = tuple((p, p) for p in _tuple(padding, 2, "padding"))
    _check_windows_fit("fold", size, kernel, pads, dilation, "output_size %s" % list(size))
    _, _, outs, _, _ = _window_index(size, kernel, stride, pads, dilation, False, "zeros")
    k, l = int(np.prod(kernel)), int(np.prod(outs))
    if x.shape[1] % k or x.shape[2] != l:
        raise RuntimeError("fold: expected input of size [N, C * %d, %d] for output_size=%s, kernel_size=%s, got %s"
                           % (k, l, list(size), list(kernel), list(input.shape)))
    out = _fold_rows(x.reshape(x.shape[0], x.shape[1] // k, k * l), size, kernel, stride, pads, dilation)
    return out if input.ndim == 3 else out.squeeze(0)


def _pool_args(nd, name, x, kernel_size, stride, padding, dilation):
    kernel = _tuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else \
        _tuple(stride, nd, "stride")
    padding, dilation = _tuple(padding, nd, "padding"), _tuple(dilation, nd, "dilation")
    for i in range(nd):
        if padding[i] * 2 > kernel[i]:
            raise RuntimeError("%s: pad should be at most half of effective kernel size, but got pad=%d, "
                               "kernel_size=%d and dilation=%d" % (name, padding[i], kernel[i], dilation[i]))
    if any(s < 1 for s in stride) or any(k < 1 for k in kernel):
        raise RuntimeError("%s: kernel_size and stride must be positive, got %s and %s"
                           % (name, list(kernel), list(stride)))
    if any(d < 1 for d in dilation):
        raise RuntimeError("%s: dilation should be greater than zero, but got dilation=%s" % (name, list(dilation)))
    return kernel, stride, tuple((p, p) for p in padding), dilation


def _max_pool(nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    name = "max_pool%dd" % nd
    x, batched = _batched(input, nd, name)
    kernel, stride, pads, dilation = _pool_args(nd, name, x, kernel_size, stride, padding, dilation)
    size = tuple(x.shape[2:])
    index, windows, outs = _max_window_index(size, kernel, stride, pads, dilation, ceil_mode)
    if any(o <= 0 for o in outs):
        raise RuntimeError("%s: output size %s is too small for input%s" % (name, list(outs), list(x.shape)))
    n, c = x.shape[0], x.shape[1]
    shape = [n, c] + list(outs)
    # Each output is the max over its window's taps (core/ops/pool.h: ties to the first tap, NaN wins);
    # the positions it returns are torch's indices (into each flattened input plane).
    planes = x.reshape(n * c, int(np.prod(size)))
    if not x.dtype.is_floating_point:  # integer pooling (torch's): through float64, exact below 2**53
        planes = planes.to(_C.dtype.float64)
    values, indices = _C._functional._window_max(planes, index.reshape(*windows.shape))
    values, indices = values.to(x.dtype).reshape(*shape), indices.reshape(*shape)
    if not batched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@_float32_under_autocast
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    name = "avg_pool%dd" % nd
    x, batched = _batched(input, nd, name)
    kernel, stride, pads, dilation = _pool_args(nd, name, x, kernel_size, stride, padding, 1)
    size = tuple(x.shape[2:])
    _, _, outs, in_padded, valid = _window_index(size, kernel, stride, pads, dilation, ceil_mode, "zeros")
    if any(o <= 0 for o in outs):
        raise RuntimeError("%s: output size %s is too small for input%s" % (name, list(outs), list(x.shape)))
    if divisor_override is not None:
        if divisor_override == 0:
            raise RuntimeError("%s: divisor must be not zero" % name)
        divisor = np.full(in_padded.shape[1], float(divisor_override))
    else:
        divisor = (in_padded if count_include_pad else valid).sum(0).astype(np.float64)
    n, c = x.shape[0], x.shape[1]
    if x.dtype == _C.dtype.float32 and n * c > 0:  # (autocast leaves pooling in its input dtype, as torch)
        # The window sums are a depthwise convolution with a weight of ones (oneDNN, core/ops/conv.h; its
        # gradient is that convolution's input gradient), padded after each dim as far as the last window
        # reaches (ceil_mode); the divisors are the composed path's.
        pads_r = [max(0, (outs[i] - 1) * stride[i] + kernel[i] - size[i] - pads[i][0]) for i in range(nd)]
        ones = _C._full([c, 1] + list(kernel), 1.0, x.dtype)
        summed = _C._functional._convolution(x, ones, None, list(stride), [p[0] for p in pads], pads_r, [1] * nd, c)
        out = summed / _as_tensor(divisor.reshape(outs)).to(x.dtype)
        return out if batched else out.squeeze(0)
    cols, _ = _gather(x, size, kernel, stride, pads, dilation, ceil_mode, "zeros", 0.0)
    acc = _accumulation_dtype(x)  # bf16 / fp16: sum and divide in float32, round once
    out = (cols.to(acc).sum(2) / _as_tensor(divisor).to(acc)).to(x.dtype)
    out = out.reshape(n, c, *outs)
    return out if batched else out.squeeze(0)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@_float32_under_autocast
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_bounds(size, out):
    starts = [(i * size) // out for i in range(out)]
    ends = [-(-((i + 1) * size) // out) for i in range(out)]
    return starts, ends


def _adaptive_sizes(nd, x, output_size, name):
    outs = _tuple(output_size, nd, "output_size") if not isinstance(output_size, (tuple, list)) else \
        tuple(x.shape[2 + i] if output_size[i] is None else int(output_size[i]) for i in range(len(output_size)))
    if len(outs) != nd:
        raise RuntimeError("%s: output_size must be %d, got %s" % (name, nd, list(output_size)))
    if any(o < 0 for o in outs):
        raise RuntimeError("%s: output_size must not be negative, got %s" % (name, list(outs)))
    return outs


def _check_non_empty(name, shape, dims):
    """torch's adaptive pools refuse an empty non-batch dim (their windows would average or max over nothing)."""
    for d in dims:
        if shape[d] == 0:
            raise RuntimeError("%s(): Expected input to have non-zero size for non-batch dimensions, but input has "
                               "sizes %s with dimension %d being empty" % (name, list(shape), d))


def _adaptive_avg_pool(nd, input, output_size):
    name = "adaptive_avg_pool%dd" % nd
    x, batched = _batched(input, nd, name)
    # its spatial dims only; the 1-D pool runs as torch's 2-D one on [..., 1, L], and is named so
    shape = list(input.shape[:-1]) + [1, input.shape[-1]] if nd == 1 else list(input.shape)
    _check_non_empty("adaptive_avg_pool%dd" % max(nd, 2), shape, range(len(shape) - max(nd, 2), len(shape)))
    outs = _adaptive_sizes(nd, x, output_size, name)
    if any(o == 0 for o in outs):
        out = _C._full([x.shape[0], x.shape[1]] + list(outs), 0.0, x.dtype)
        return out if batched else out.squeeze(0)
    acc = _accumulation_dtype(x)  # bf16 / fp16: average in float32 (both passes), round once
    if all(s % o == 0 for s, o in zip(x.shape[2:], outs)):
        # Equal windows (the global pool of a classifier head among them): a mean over the split-off
        # window dims of a reshape, one reduction op instead of a matmul per dim and its movedim copies.
        split = [x.shape[0], x.shape[1]]
        for s, o in zip(x.shape[2:], outs):
            split += [o, s // o]
        out = x.to(acc).reshape(split).mean(tuple(3 + 2 * i for i in range(nd))).to(x.dtype)
        return out if batched else out.squeeze(0)
    out = _DenseGrad.apply(x).to(acc)  # (its gradient came back transposed by the movedims)
    for i in range(nd):
        size = x.shape[2 + i]
        starts, ends = _adaptive_bounds(size, outs[i])
        avg = np.zeros((outs[i], size))
        for o in range(outs[i]):
            avg[o, starts[o]:ends[o]] = 1.0 / (ends[o] - starts[o])
        moved = out.movedim(2 + i, -1)
        moved = _C._functional.linear(moved, _as_tensor(avg).to(acc), None)
        out = moved.movedim(-1, 2 + i)
    out = out.to(x.dtype)
    return out if batched else out.squeeze(0)


@_autocast_off
def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg_pool(1, input, output_size)


@_autocast_off
def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg_pool(2, input, output_size)


@_float32_under_autocast
def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg_pool(3, input, output_size)


@functools.lru_cache(maxsize=64)
def _adaptive_index(size, outs):
    """Windows of adaptive max pooling padded to the widest one: (index [Kmax*O], index matrix [Kmax, O])."""
    per_dim = []
    for i in range(len(size)):
        starts, ends = _adaptive_bounds(size[i], outs[i])
        kmax = builtins.max(e - s for s, e in zip(starts, ends))
        c = np.array(starts)[None, :] + np.arange(kmax)[:, None]
        ok = c < np.array(ends)[None, :]
        per_dim.append((np.minimum(c, size[i] - 1), ok, ok))
    index, _, _ = _combine_windows(size, per_dim)
    return index, index.shape[0]


def _adaptive_max_pool(nd, input, output_size, return_indices):
    name = "adaptive_max_pool%dd" % nd
    x, batched = _batched(input, nd, name)
    _check_non_empty(name, list(input.shape), range(1, input.ndim))
    outs = _adaptive_sizes(nd, x, output_size, name)
    if any(o == 0 for o in outs):
        shape = [x.shape[0], x.shape[1]] + list(outs)
        values = _C._full(shape, 0.0, x.dtype)
        indices = _C._full(shape, 0.0, _C.dtype.int64)
        values, indices = (values, indices) if batched else (values.squeeze(0), indices.squeeze(0))
        return (values, indices) if return_indices else values
    size = tuple(x.shape[2:])
    x = _DenseGrad.apply(x)
    index, k = _adaptive_index(size, outs)
    n, c = x.shape[0], x.shape[1]
    total = int(np.prod(size))
    flat = _C._functional.cat([x.reshape(n, c, total), _C._full([n, c, 1], -math.inf, x.dtype)], 2)
    cols = flat[:, :, _as_tensor(index.reshape(-1))].reshape(n, c, k, -1)
    values, arg = cols.max(2)
    values = values.reshape(n, c, *outs)
    if not batched:
        values = values.squeeze(0)
    if not return_indices:
        return values
    picked = index[arg.numpy(), np.arange(index.shape[1])[None, None, :]].reshape(n, c, *outs)
    indices = _as_tensor(picked.astype(np.int64))
    return values, (indices if batched else indices.squeeze(0))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max_pool(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max_pool(2, input, output_size, return_indices)


@_float32_under_autocast
def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max_pool(3, input, output_size, return_indices)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm over [N, C, *]: batch statistics in training (biased variance to
    normalize; the running variance takes the unbiased one, blended by momentum in place), the running
    statistics otherwise. Low-precision inputs are normalized in float32 and returned in their dtype; in
    evaluation, and in training with parameters and statistics of the input's 16-bit dtype, with torch's
    rounding (nn/_lowp.py)."""
    if input.ndim < 2:
        raise ValueError("batch_norm: expected at least 2D input (got %dD input)" % input.ndim)
    c = input.shape[1]
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise RuntimeError("batch_norm: %s should have %d elements (the channels of input %s), got shape %s"
                               % (what, c, list(input.shape), list(t.shape)))
    shape = [1, c] + [1] * (input.ndim - 2)
    count = input.numel() // c if c else 0
    if training and count <= 1:
        raise ValueError("Expected more than 1 value per channel when training, got input size %s"
                         % list(input.shape))
    if training and not input.is_distributed and \
            _lowp.shared_16bit(input, running_mean, running_var, weight, bias) is not None:
        return _lowp.batch_norm_train(input, running_mean, running_var, weight, bias, momentum, eps)
    if not training and running_mean is not None and running_var is not None:
        kind = _lowp.eval_parameters(input, running_mean, running_var, weight, bias)
        if kind is not None:
            return _lowp.batch_norm_eval(input, running_mean, running_var, weight, bias, eps, kind)
    # bfloat16 training input: the fused op reads and writes bf16 itself (float32 parameters and statistics)
    fused_bf16 = training and input.dtype == _C.dtype.bfloat16
    x = input if input.dtype == _C.dtype.float64 or fused_bf16 else input.float()
    pdt = _C.dtype.float32 if fused_bf16 else x.dtype
    if training:
        # One fused op (core/ops/batch_norm.h): the batch mean and biased variance, the normalized and
        # affine output; its backward is fused too (composed under create_graph).
        y, mean, var = _C._functional._batch_norm_train(
            x, None if weight is None else weight.to(pdt), None if bias is None else bias.to(pdt), eps)
        if running_mean is not None or running_var is not None:
            with _C._GradMode(False):
                if running_mean is not None:
                    running_mean.copy_((running_mean * (1.0 - momentum) + mean.to(running_mean.dtype) * momentum))
                if running_var is not None:
                    unbiased = var * (count / (count - 1.0))
                    running_var.copy_((running_var * (1.0 - momentum) + unbiased.to(running_var.dtype) * momentum))
        return y.to(input.dtype)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var are required when training=False")
        y = (x - running_mean.reshape(*shape).to(x.dtype)) * (running_var.reshape(*shape).to(x.dtype) + eps).rsqrt()
    return _channel_affine(y, None if weight is None else weight.to(y.dtype),
                           None if bias is None else bias.to(y.dtype)).to(input.dtype)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm: each sample's channels normalized over their spatial dims (batch_norm
    of the input seen as [1, N·C, *]); running statistics, where given, take the mean over the samples of the
    per-instance statistics (blended by momentum); use_input_stats=False normalizes with them instead."""
    if input.ndim < 3:
        raise ValueError("instance_norm: expected an input [N, C, *spatial] (got %dD input)" % input.ndim)
    n, c = input.shape[0], input.shape[1]
    if use_input_stats and math.prod(input.shape[2:]) == 1:
        raise ValueError("Expected more than 1 spatial element when training, got input size %s" % (input.shape,))
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("instance_norm: use_input_stats=False needs running_mean and running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    stats = [None if t is None else t.detach().repeat(n) for t in (running_mean, running_var)]
    y = batch_norm(input.reshape(1, n * c, *input.shape[2:]), stats[0], stats[1], None, None, True, momentum, eps)
    with _C._GradMode(False):
        for live, blended in zip((running_mean, running_var), stats):
            if live is not None:
                live.copy_(blended.reshape(n, c).mean(0))
    return _channel_affine(y.reshape(*input.shape), None if weight is None else weight.to(y.dtype),
                           None if bias is None else bias.to(y.dtype))


FUNCTIONAL = dict(
    conv1d=conv1d, conv2d=conv2d, conv3d=conv3d, conv_transpose1d=conv_transpose1d,
    conv_transpose2d=conv_transpose2d, conv_transpose3d=conv_transpose3d, unfold=unfold, fold=fold,
    max_pool1d=max_pool1d, max_pool2d=max_pool2d, max_pool3d=max_pool3d,
    max_pool1d_with_indices=lambda *a, **k: max_pool1d(*a, **dict(k, return_indices=True)),
    max_pool2d_with_indices=lambda *a, **k: max_pool2d(*a, **dict(k, return_indices=True)),
    max_pool3d_with_indices=lambda *a, **k: max_pool3d(*a, **dict(k, return_indices=True)),
    avg_pool1d=avg_pool1d, avg_pool2d=avg_pool2d, avg_pool3d=avg_pool3d,
    adaptive_avg_pool1d=adaptive_avg_pool1d, adaptive_avg_pool2d=adaptive_avg_pool2d,
    adaptive_avg_pool3d=adaptive_avg_pool3d, adaptive_max_pool1d=adaptive_max_pool1d,
    adaptive_max_pool2d=adaptive_max_pool2d, adaptive_max_pool3d=adaptive_max_pool3d,
    batch_norm=batch_norm, instance_norm=instance_norm)
