"""torch.nn.functional's padding modes, interpolate and pixel shuffles, and their modules (ZeroPad*/ConstantPad*/
ReflectionPad*/ReplicationPad*/CircularPad*, Upsample, UpsamplingNearest2d/Bilinear2d, PixelShuffle/Unshuffle),
composed from bound ops so gradients come from them: every padding mode and nearest interpolation is one
index_select per resized dim (its backward an index-add), linear and bicubic interpolation one small weight
matrix per dim applied with F.linear (separable, as torch's kernels: bicubic's 4x4 taps are the product of
per-dim weights; antialias=True widens each weight matrix's filter, as torch's _aa kernels); area mode is
adaptive average pooling.

    y = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    y = F.pad(x, (1, 1, 2, 2), mode="reflect")
"""
import builtins
import math

import numpy as np

from .. import _C, _dtypes
from ._conv_ops import _accumulation_dtype, _as_tensor, _map_coords
from .modules import Module
from .._autocast_policy import autocast_off as _autocast_off


def _select(x, dim, index):
    """x's entries at `index` (numpy int64) along dim, differentiably."""
    from .._extra import index_select
    return index_select(x, dim, _as_tensor(index.astype(np.int64)))


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: (left, right, top, bottom, ...) amounts for the last len(pad) / 2 dims;
    constant (value, default 0; negative amounts crop), reflect, replicate or circular."""
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError("Unrecognised padding mode %s" % mode)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError("Padding length should be less than or equal to two times the input dimension but got "
                           "padding length %d and input of dimension %d" % (len(pad), input.ndim))
    if mode == "constant":
        from .._extra import pad as constant_pad
        return constant_pad(input, pad, "constant", value)
    if value not in (None, 0, 0.0):
        raise RuntimeError("Padding mode \"%s\" doesn't take in value argument" % mode)
    if input.ndim not in (len(pad) // 2 + 1, len(pad) // 2 + 2) or not pad:  # torch's kernels: [N,] C, *padded
        raise NotImplementedError(
            "Padding size %d is not supported for %dD input tensor.\nSupported combinations for non-constant "
            "padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)\n  - 3D or 4D input: padding size "
            "= 4 (pads last 2 dimensions)\n  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
            % (len(pad), input.ndim))
    if mode in ("reflect", "replicate") and _C._autocast_state()[0] and input.dtype in (_dtypes.bfloat16,
                                                                                        _dtypes.float16):
        input = input.to(_dtypes.float32)  # torch's CPU autocast float32 list (reflection / replication pads)
    out = input
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        if mode == "circular" and min(before, after) < 0:  # torch's: crop first, then wrap around what is left
            start, stop = max(0, -before), out.shape[d] - max(0, -after)
            out = out.narrow(d, start, stop - start)
            before, after = max(0, before), max(0, after)
        size = out.shape[d]
        limit = size - 1 if mode == "reflect" else size if mode == "circular" else float("inf")  # replicate: any
        if max(before, after) > limit or (mode == "replicate" and size == 0):
            raise RuntimeError("%s padding: padding size should be less than %s the corresponding input dimension, "
                               "but got: padding (%d, %d) at dimension %d of input %s"
                               % (mode, "" if mode == "reflect" else "or equal to", before, after, d,
                                  list(input.shape)))
        coords = np.arange(-before, size + after)
        out = _select(out, d, _map_coords(coords, size, mode)[0])
    return out


def _output_sizes(x, nd, size, scale_factor):
    spatial = list(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (tuple, list)) and len(size) == nd and \
                not all(isinstance(s, (int, np.integer)) or _integer_tensor(s) for s in size):
            raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or Tuple[int, int, int], "
                            "but got size with types %s" % [type(s) for s in size])
        sizes = [int(size)] * nd if not isinstance(size, (tuple, list)) else [int(s) for s in size]
        if len(sizes) != nd:
            raise ValueError("Input and output must have the same number of spatial dimensions, but got input with "
                             "spatial dimensions of %s and output size of %s" % (spatial, list(size)))
        return sizes, [None] * nd
    scales = [float(scale_factor)] * nd if not isinstance(scale_factor, (tuple, list)) else \
        [float(s) for s in scale_factor]
    if len(scales) != nd:
        raise ValueError("Input and scale_factor must have the same number of spatial dimensions, but got input "
                         "with spatial dimensions of %s and scale_factor of shape %s" % (spatial, list(scale_factor)))
    return [int(math.floor(spatial[i] * scales[i])) for i in range(nd)], scales


def _integer_tensor(s):
    return isinstance(s, _C.Tensor) and not s.dtype.is_floating_point and s.numel() == 1


def _check_sizes(input, outs):
    """torch's upsample kernels refuse an empty spatial input or output dim (size=0, or a scale_factor that
    floors a size to 0), naming them (W), (H, W) or (D, H, W)."""
    nd = len(outs)
    ins = list(input.shape[2:])
    if min(ins) > 0 and min(outs) > 0:
        return
    names = "DHW"[3 - nd:]
    text = lambda sizes: ", ".join("%s: %d" % (n, v) for n, v in zip(names, sizes))  # noqa: E731
    raise RuntimeError("Input and output sizes should be greater than 0, but got input (%s)%s output (%s)"
                       % (text(ins), " and" if nd == 1 else "", text(outs)))


@_autocast_off
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate for modes nearest, nearest-exact, linear, bilinear, bicubic, trilinear
    and area over [N, C, *spatial] (1 to 3 spatial dims), with torch's source-index rules (align_corners, and
    the given scale_factor used as is unless recompute_scale_factor); antialias=True (bilinear and bicubic on
    4-D input, torch's) widens the filter by the downscaling factor, as PIL does."""
    nd = input.ndim - 2
    if nd < 1 or nd > 3:
        raise NotImplementedError("interpolate: input must be 3-D, 4-D or 5-D (got %dD)" % input.ndim)
    linear_modes = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                         "tensor as input")
    if mode == "area":
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | "
                             "bilinear | bicubic | trilinear")
        from . import functional as F  # torch's area mode is adaptive average pooling to the output size
        outs, _ = _output_sizes(input, nd, size, scale_factor)
        return getattr(F, "adaptive_avg_pool%dd" % nd)(input, outs)
    if mode not in ("nearest", "nearest-exact") and mode not in linear_modes:
        raise NotImplementedError("interpolate: unknown mode %r" % mode)
    if mode in linear_modes and linear_modes[mode] != nd:
        raise NotImplementedError("Got %dD input, but %s mode needs %dD input" % (input.ndim, mode,
                                                                                  linear_modes[mode] + 2))
    if mode not in linear_modes and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    outs, scales = _output_sizes(input, nd, size, scale_factor)
    if recompute_scale_factor:
        scales = [None] * nd
    _check_sizes(input, outs)
    if antialias and input.dtype in (_dtypes.float16, _dtypes.bfloat16):
        raise NotImplementedError("\"compute_index_ranges_weights\" not implemented for '%s'"
                                  % ("Half" if input.dtype == _dtypes.float16 else "BFloat16"))
    if input.dtype == _dtypes.uint8 and mode in linear_modes:
        if nd != 2:
            raise NotImplementedError("\"compute_indices_weights_linear\" not implemented for 'Byte'")
        from ._resample_uint8 import resample_uint8
        return resample_uint8(input, outs, scales, mode, bool(align_corners), antialias)
    kept_all = all(outs[i] == input.shape[2 + i] for i in range(nd))
    from ._conv_ops import _DenseGrad
    out = input if kept_all else _DenseGrad.apply(input)  # input's gradient contiguous, as torch's
    for i in range(nd):
        d = 2 + i
        n_in, n_out = input.shape[d], outs[i]
        scale = (1.0 / scales[i]) if scales[i] else (n_in / n_out if n_out else 0.0)
        dst = np.arange(n_out, dtype=np.float64)
        # torch's kernels copy a dim whose size is kept, whatever scale_factor says, and its 2-D nearest kernel
        # (nearest_idx) halves an exact double; its 1-D and 3-D nearest kernels use floor(i · scale) throughout
        if n_out == n_in and (mode in ("linear", "bilinear", "trilinear") or (mode == "nearest" and nd == 2)):
            continue
        if mode == "nearest":
            if nd == 2 and n_out == 2 * n_in:
                index = np.arange(n_out) // 2
            else:  # floorf(i · scale) in float32, as torch's nearest_neighbor_compute_source_index
                index = np.floor(dst.astype(np.float32) * np.float32(scale)).astype(np.int64)
            out = _select(out, d, np.minimum(index, n_in - 1))
            continue
        if mode == "nearest-exact":
            out = _select(out, d, np.minimum(np.floor((dst + 0.5) * scale).astype(np.int64), n_in - 1))
            continue
        corner_scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        if antialias:
            weights = _antialias_weights(n_in, n_out, corner_scale if align_corners else scale, mode)
        else:
            if align_corners:
                src = dst * corner_scale
            else:
                src = (dst + 0.5) * scale - 0.5
                if mode != "bicubic":  # torch clamps the linear source index at 0, not the cubic one
                    src = np.maximum(src, 0.0)
            weights = _cubic_weights(src, n_in) if mode == "bicubic" else _linear_weights(src, n_in)
        acc = _accumulation_dtype(out)
        moved = out.to(acc).movedim(d, -1)
        out = _C._functional.linear(moved, _as_tensor(weights).to(acc), None).movedim(-1, d)
        out = ((out + 0.5).floor() if not input.dtype.is_floating_point else out).to(input.dtype)  # uint8: half up
    return out.clone() if kept_all and out is input else out  # every size kept: a copy, never the input's memory


def _linear_weights(src, n_in):
    """[len(src), n_in]: each row blends the two inputs around its source position."""
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    weights = np.zeros((len(src), n_in))
    np.add.at(weights, (np.arange(len(src)), lo), 1.0 - frac)
    np.add.at(weights, (np.arange(len(src)), hi), frac)
    return weights


def _antialias_weights(n_in, n_out, scale, mode):
    """[n_out, n_in] for antialias=True, torch's _upsample_*_aa: output i centred at scale·(i + ½) takes the
    inputs within support = ½·taps·max(scale, 1) of it, weighted by the triangle (bilinear) or Keys' cubic with
    a = -0.5 (bicubic) at distance / max(scale, 1), each row normalized to sum 1 (so the edges renormalize
    instead of clamping)."""
    taps = 4 if mode == "bicubic" else 2
    stretch = scale if scale >= 1.0 else 1.0
    support = taps * 0.5 * stretch

    def kernel(x):
        x = np.abs(x)
        if mode == "bicubic":
            a = -0.5
            return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                            np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))
        return np.where(x < 1, 1 - x, 0.0)
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = builtins.max(int(center - support + 0.5), 0)
        hi = builtins.min(int(center + support + 0.5), n_in)
        j = np.arange(lo, hi)
        w = kernel((j - center + 0.5) / stretch)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    return weights


def _cubic_taps(t, a=-0.75):
    """Keys' cubic-convolution weights (torch's A = -0.75) of the taps at floor - 1 .. floor + 2 for fractions
    t of the source point past floor (numpy arrays, or tensors: grid_sample's grid gradient flows through)."""
    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_weights(src, n_in):
    """[len(src), n_in]: torch's bicubic taps at floor(src) - 1 .. floor(src) + 2, each clamped into the input
    (a tap past the edge reads the edge), as upsample_bicubic2d."""
    lo = np.floor(src).astype(np.int64)
    weights = np.zeros((len(src), n_in))
    for k, w in enumerate(_cubic_taps(src - lo)):
        np.add.at(weights, (np.arange(len(src)), np.clip(lo - 1 + k, 0, n_in - 1)), w)
    return weights


def pixel_shuffle(input, upscale_factor):
    """[*, C·r², H, W] -> [*, C, H·r, W·r]."""
    if input.ndim < 3:
        raise RuntimeError("pixel_shuffle expects input to have at least 3 dimensions, but got input with %d "
                           "dimension(s)" % input.ndim)
    r = int(upscale_factor)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           "upscale_factor, but input.size(-3)=%d is not divisible by %d" % (c, r * r))
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    k = len(lead)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    out = x.reshape(*lead, c // (r * r), h * r, w * r)
    return out.clone() if r == 1 else out  # r = 1: a copy, as torch's (never the input's memory)


def pixel_unshuffle(input, downscale_factor):
    """[*, C, H·r, W·r] -> [*, C·r², H, W]."""
    if input.ndim < 3:
        raise RuntimeError("pixel_unshuffle expects input to have at least 3 dimensions, but got input with %d "
                           "dimension(s)" % input.ndim)
    r = int(downscale_factor)
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError("pixel_unshuffle expects height and width to be divisible by downscale_factor, got %s"
                           % list(input.shape))
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    k = len(lead)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    out = x.reshape(*lead, c * r * r, h // r, w // r)
    return out.clone() if r == 1 else out  # r = 1: a copy, as torch's


def _deprecated(name):
    import warnings
    warnings.warn("`nn.functional.%s` is deprecated. Use `nn.functional.interpolate` instead." % name, stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor)


def upsample_bilinear(input, size=None, scale_factor=None):
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, "bilinear", True)


FUNCTIONAL = dict(pad=pad, interpolate=interpolate, upsample=upsample, pixel_shuffle=pixel_shuffle,
                  pixel_unshuffle=pixel_unshuffle, upsample_nearest=upsample_nearest,
                  upsample_bilinear=upsample_bilinear)


def _pad_class(name, nd, mode, fixed_value=None):
    class Pad(Module):
        def __init__(self, padding, value=None):
            super().__init__()
            self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * (2 * nd)
            if len(self.padding) != 2 * nd:
                raise ValueError("%s: padding must be an int or a %d-tuple, got %s" % (name, 2 * nd, padding))
            self.value = fixed_value if fixed_value is not None else value

        def forward(self, input):
            return pad(input, self.padding, mode, self.value if mode == "constant" else None)

        def extra_repr(self):
            if mode == "constant" and fixed_value is None:
                return "padding=%s, value=%s" % (self.padding, self.value)
            return "%s" % (self.padding,)
    Pad.__name__ = Pad.__qualname__ = name
    Pad.__doc__ = "torch.nn.%s: F.pad(input, padding, %r)." % (name, mode)
    return Pad


class Upsample(Module):
    """torch.nn.Upsample: F.interpolate(input, size, scale_factor, mode, align_corners)."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self):
        info = ("scale_factor=%s" % ((float(self.scale_factor),) if not isinstance(self.scale_factor, (tuple, list))
                                     else (tuple(float(s) for s in self.scale_factor),))
                if self.scale_factor is not None else "size=%s" % (self.size,))
        return "%s, mode='%s'" % (info, self.mode)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", True)


def _shuffle_class(name, fn, factor_name):
    """torch.nn.PixelShuffle / PixelUnshuffle: fn(input, factor), the factor kept under torch's name."""
    def __init__(self, factor):
        Module.__init__(self)
        setattr(self, factor_name, factor)

    return type(name, (Module,), {
        "__init__": __init__, "forward": lambda self, input: fn(input, getattr(self, factor_name)),
        "extra_repr": lambda self: "%s=%d" % (factor_name, getattr(self, factor_name)),
        "__doc__": "torch.nn.%s." % name})


PixelShuffle = _shuffle_class("PixelShuffle", pixel_shuffle, "upscale_factor")
PixelUnshuffle = _shuffle_class("PixelUnshuffle", pixel_unshuffle, "downscale_factor")


def make_modules():
    out = dict(Upsample=Upsample, UpsamplingNearest2d=UpsamplingNearest2d, UpsamplingBilinear2d=UpsamplingBilinear2d,
               PixelShuffle=PixelShuffle, PixelUnshuffle=PixelUnshuffle)
    for nd in (1, 2, 3):
        out["ZeroPad%dd" % nd] = _pad_class("ZeroPad%dd" % nd, nd, "constant", 0.0)
        out["ConstantPad%dd" % nd] = _pad_class("ConstantPad%dd" % nd, nd, "constant")
        out["ReflectionPad%dd" % nd] = _pad_class("ReflectionPad%dd" % nd, nd, "reflect")
        out["ReplicationPad%dd" % nd] = _pad_class("ReplicationPad%dd" % nd, nd, "replicate")
        out["CircularPad%dd" % nd] = _pad_class("CircularPad%dd" % nd, nd, "circular")
    return out
