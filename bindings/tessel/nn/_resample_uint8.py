"""F.interpolate of uint8 images in bilinear and bicubic modes (antialias or not), as torch's CPU kernel for Byte
input computes them: separable passes, the width first and then the height (a dim whose size is kept is not
resampled), each output a sum of uint8 taps times int16 fixed-point weights, rounded by adding half a unit and
shifting, and saturated to [0, 255] after each pass. The weights are the antialias kernels' (a window of taps
around each output's centre, normalized to sum 1), so at the borders bicubic renormalizes over the taps inside
the image instead of repeating the edge pixel as the floating-point kernel does; without antialias the linear
filter is the plain triangle and the cubic one keeps torch's A = -0.75 (PIL's -0.5 with antialias).

Split from _resample.py: uint8 has no gradient, so this runs in numpy on the host.
"""
import numpy as np

from .. import _C


def _area_scale(n_in, n_out, align_corners, scale_factor):
    """torch's area_pixel_compute_scale: the input step per output step."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    if scale_factor:
        return 1.0 / scale_factor
    return n_in / n_out


def _filter(mode, antialias):
    if mode == "bilinear":
        return lambda x: max(0.0, 1.0 - abs(x))
    a = -0.5 if antialias else -0.75

    def cubic(x):
        x = abs(x)
        if x < 1.0:
            return ((a + 2) * x - (a + 3)) * x * x + 1
        if x < 2.0:
            return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return 0.0
    return cubic


def _window_weights(n_in, n_out, scale, mode, antialias, align_corners):
    """[n_out, n_in] weights of the antialias kernels' form: a window around each output's centre, normalized to
    sum 1."""
    width = 2 if mode == "bilinear" else 4
    stretched = antialias and scale >= 1.0
    support = width * 0.5 * (scale if stretched else 1.0)
    if antialias:
        width = int(np.ceil(support)) * 2 + 1
    delta = 0.5 if align_corners and not antialias else 0.0  # the corners' grid, shifted by half a pixel
    inv = 1.0 / scale if stretched else 1.0
    fn = _filter(mode, antialias)
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5 - delta)
        lo = max(int(center - support + 0.5 + delta), 0)  # (C's truncation toward zero, as int())
        size = min(max(min(int(center + support + 0.5 + delta), n_in) - lo, 0), width)
        w = np.array([fn((j + lo - center + 0.5 - delta) * inv) for j in range(size)])
        total = w.sum()
        weights[i, lo:lo + size] = w / total if total != 0.0 else w
    return weights


def _cubic_tap_weights(n_in, n_out, scale, align_corners):
    """[n_out, n_in] weights of bicubic without antialias: the floating-point kernel's four taps around each
    source point (A = -0.75) clamped into the input, a tap past the edge adding to the edge's weight (which
    then may pass 1, costing a bit of precision, as torch's)."""
    dst = np.arange(n_out, dtype=np.float64)
    src = dst * scale if align_corners else (dst + 0.5) * scale - 0.5
    lo = np.floor(src).astype(np.int64)
    fn = _filter("bicubic", False)
    weights = np.zeros((n_out, n_in))
    for k in range(4):
        taps = np.array([fn(t + 1 - k) for t in src - lo])
        np.add.at(weights, (np.arange(n_out), np.clip(lo - 1 + k, 0, n_in - 1)), taps)
    return weights


def _fixed_point(weights):
    """torch's int16 weights: the most precision bits that keep the largest weight (times two) under 2^15, each
    weight rounded half away from zero."""
    wt_max = float(weights.max()) if weights.size else 0.0
    precision = 0
    while precision < 22 and int(0.5 + wt_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * (1 << precision)
    return np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64), precision


def resample_uint8(input, outs, scales, mode, align_corners, antialias):
    """input [N, C, H, W] uint8 resized to outs (module doc)."""
    x = input.detach().numpy().astype(np.int64)
    for d in (3, 2):
        n_in, n_out = x.shape[d], outs[d - 2]
        if n_in == n_out:
            continue
        scale = _area_scale(n_in, n_out, align_corners, scales[d - 2])
        if mode == "bicubic" and not antialias:
            weights = _cubic_tap_weights(n_in, n_out, scale, align_corners)
        else:
            weights = _window_weights(n_in, n_out, scale, mode, antialias, align_corners)
        fixed, precision = _fixed_point(weights)
        acc = np.moveaxis(x, d, -1) @ fixed.T + ((1 << precision) >> 1)  # exact: int64
        x = np.moveaxis(np.clip(acc >> precision, 0, 255), -1, d)
    return _C._from_numpy(np.ascontiguousarray(x.astype(np.uint8)))
