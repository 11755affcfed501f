"""torch.nn.functional.affine_grid and grid_sample (spatial transformer networks, flow warping), composed from
bound ops so both gradients come from autograd: the input's through a gather (its backward a scatter-add),
the grid's through the interpolation weights, which are differentiable functions of the sampling
coordinates (unnormalize, border clamp, reflection) while the tap positions (their floor) are constants.
Modes bilinear (trilinear for 5-D input), nearest and bicubic (4-D input), padding zeros / border /
reflection, align_corners as torch.

    grid = F.affine_grid(theta, x.size(), align_corners=False)   # theta [N, 2, 3]
    y = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
"""
import itertools

import numpy as np

from .. import _C
from ._conv_ops import _accumulation_dtype, _as_tensor
from ..autograd import Function
from ._resample import _cubic_taps
from .._autocast_policy import float32_under_autocast as _float32_under_autocast


def _base_coords(n, align_corners):
    """The normalized positions of n pixels along one dim: their corners at -1 and 1 (align_corners) or
    their centers ((2i + 1) / n - 1), as torch's linspace_from_neg_one; a single pixel sits at 0."""
    if n <= 1:
        return np.zeros(max(n, 0))
    i = np.arange(n, dtype=np.float64)
    return -1.0 + 2.0 * i / (n - 1) if align_corners else (2.0 * i + 1.0) / n - 1.0


_DEFAULT_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False since "
                          "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
                          "documentation of grid_sample for details.")


def _default_align_corners(align_corners):
    """align_corners unset: False, with torch's warning (its default changed in 1.3)."""
    if align_corners is None:
        import warnings
        warnings.warn(_DEFAULT_ALIGN_WARNING, stacklevel=3)
        return False
    return align_corners


def affine_grid(theta, size, align_corners=None):
    """torch.nn.functional.affine_grid: the sampling grid [N, H, W, 2] (or [N, D, H, W, 3]) of the affine maps
    theta [N, 2, 3] (or [N, 3, 4]) over an output of `size` [N, C, H, W] (or [N, C, D, H, W]); each
    grid point is theta · (x, y[, z], 1) of the output pixel's normalized position. torch's checks, in its
    order."""
    align_corners = _default_align_corners(align_corners)
    size = [int(s) for s in size]
    if not theta.dtype.is_floating_point:
        raise ValueError("Expected theta to have floating point type, but got %s" % theta.dtype)
    if len(size) not in (4, 5):
        raise NotImplementedError("affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  "respectively. Got size %s." % (size,))
    nd = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        from .._tensor import Size
        raise ValueError("Expected a batch of %dD affine matrices of shape Nx%dx%d for size %s. Got %s."
                         % (nd, nd, nd + 1, size, Size(theta.shape)))
    if align_corners and min(size[2:]) == 1:
        import warnings
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.", stacklevel=2)
    elif min(size) <= 0:
        raise ValueError("Expected non-zero, positive output size. Got %s" % (size,))
    if theta.shape[0] != size[0]:  # (torch's batched matmul of the base grid by theta's transpose says so)
        raise RuntimeError("Expected size for first two dimensions of batch2 tensor to be: [%d, %d] but got: "
                           "[%d, %d]." % (size[0], nd + 1, theta.shape[0], nd + 1))
    spatial = size[2:]  # (H, W) or (D, H, W); the grid's last dim is (x, y[, z]): W first
    axes = [_base_coords(n, bool(align_corners)) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([mesh[nd - 1 - k] for k in range(nd)] + [np.ones(spatial)], axis=-1).reshape(1, -1, nd + 1)
    base_t = _as_tensor(base).to(theta.dtype)
    grid = base_t.expand(size[0], base.shape[1], nd + 1) @ theta.transpose(1, 2)
    return grid.reshape([size[0]] + spatial + [nd])


def _reflect(coord, twice_low, twice_high):
    """torch's reflect_coordinates: coord mirrored at low and high (given doubled) until it lies between."""
    if twice_low == twice_high:
        return coord * 0.0
    low, span = twice_low / 2.0, (twice_high - twice_low) / 2.0
    dist = (coord - low).abs()
    flips = (dist.detach() / span).floor()
    extra = dist - flips * span  # fmod with a constant quotient: gradient 1, as torch's
    even = (flips.remainder(2.0) == 0)
    from .. import where
    return where(even, extra + low, (span + low) - extra)


def _unnormalize(g, n, align_corners):
    """Pixel coordinate (differentiable in g) of normalized grid values g along a dim of n pixels."""
    return (g + 1.0) * ((n - 1) / 2.0) if align_corners else ((g + 1.0) * n - 1.0) / 2.0


def _pad_coord(coord, n, padding_mode, align_corners, nd):
    """torch's compute_coordinates: a pixel coordinate moved inside by the padding mode (zeros: unchanged)."""
    if padding_mode == "border":
        coord = _clip(coord, n, nd)
    elif padding_mode == "reflection":
        coord = _reflect(coord, 0.0, 2.0 * (n - 1)) if align_corners else _reflect(coord, -1.0, 2.0 * n - 1.0)
        coord = _clip(coord, n, nd)
    return coord


def _clip(coord, n, nd):
    """coord clamped into [0, n - 1], and a NaN (a reflected ±inf's remainder among them) where torch's CPU
    kernels put it instead of propagating it: the vectorized 2-D kernel orders its clamp's operands so that a
    NaN lands on 0, the scalar 3-D one's std::min / std::max land it on n - 1."""
    coord = coord.clamp(0.0, n - 1.0)
    return _C._functional.where(coord != coord, _C._full([], 0.0 if nd == 2 else n - 1.0, coord.dtype), coord)


@_float32_under_autocast
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """torch.nn.functional.grid_sample: output[n, c, *p] = input[n, c] sampled at grid[n, *p] (x, y[, z] in
    [-1, 1] spanning the input's width, height[, depth]), bilinear/trilinear, nearest (round half to
    even, as torch) or bicubic, reading 0 (zeros), the edge (border) or a mirror image (reflection) outside."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError("nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         "but got: '%s'" % mode)
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         "'reflection', but got: '%s'" % padding_mode)
    align_corners = _default_align_corners(align_corners)
    nd = input.ndim - 2
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if nd not in (2, 3) or grid.ndim != input.ndim:
        raise RuntimeError("grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but "
                           "got input with sizes %s and grid with sizes %s" % (list(input.shape), list(grid.shape)))
    if grid.shape[0] != input.shape[0] or grid.shape[-1] != nd:
        raise RuntimeError("grid_sampler(): expected grid to have size %d in last dimension and the batch size of "
                           "input (%d), but got grid with sizes %s" % (nd, input.shape[0], list(grid.shape)))
    if min(input.shape[2:]) <= 0:
        raise RuntimeError("grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                           "sizes %s" % (list(input.shape),))
    from .._subscript import _torch_dtype_name
    if not input.dtype.is_floating_point:
        raise NotImplementedError("\"%s\" not implemented for '%s'" % (
            "grid_sampler_2d_cpu_kernel_impl" if nd == 2 else "grid_sampler3d_cpu", _torch_dtype_name(input.dtype)))
    if grid.dtype != input.dtype:  # torch's kernel promotes neither
        raise RuntimeError("expected scalar type %s but found %s" % (_torch_dtype_name(input.dtype),
                                                                     _torch_dtype_name(grid.dtype)))
    n, c = input.shape[0], input.shape[1]
    sizes = list(input.shape[2:])  # (H, W) or (D, H, W)
    out_spatial = list(grid.shape[1:-1])
    acc = _accumulation_dtype(input)
    flat_in = input.to(acc).reshape(n, c, -1)
    g = grid.to(acc).reshape(n, 1, -1, nd)  # [N, 1, L, nd]
    # coords[k]: pixel coordinate along input dim (2 + k), from grid component nd - 1 - k
    unpadded = [_unnormalize(g[..., nd - 1 - k], sizes[k], bool(align_corners)) for k in range(nd)]
    coords = [_pad_coord(p, sizes[k], padding_mode, bool(align_corners), nd) for k, p in enumerate(unpadded)]
    strides = [int(np.prod(sizes[k + 1:])) for k in range(nd)]

    def tap(positions):
        """input at integer positions (one [N, 1, L] float tensor per dim), 0 where outside."""
        inside, flat = None, None
        for k, p in enumerate(positions):
            ok = (p >= 0.0).logical_and(p <= sizes[k] - 1.0)  # false at a NaN coordinate (torch: NaN output)
            inside = ok if inside is None else inside.logical_and(ok)
            term = _C._functional.where(ok, p, _C._full([], 0.0, p.dtype)).clamp(0.0, sizes[k] - 1.0) * \
                float(strides[k])
            flat = term if flat is None else flat + term
        index = flat.to(_C.dtype.int64).expand(n, c, flat.shape[-1])
        return flat_in.gather(2, index) * inside.to(acc)

    if mode == "nearest":  # no gradient flows to grid, but grid gets a zero one (torch's), not None
        out = tap([p.detach().round() for p in coords])
        if _C.is_grad_enabled() and grid.requires_grad:
            out = out + _ZeroGradient.apply(grid).to(out.dtype)
    elif mode == "bicubic":  # 4x4 taps around the unpadded point, each tap's position padded on its own
        lows = [p.detach().floor() for p in unpadded]
        fracs = [p - low for p, low in zip(unpadded, lows)]
        weights = [_cubic_taps(t) for t in fracs]
        out = None
        for offsets in itertools.product(range(4), repeat=nd):
            positions = [_pad_coord(lows[k] + float(o - 1), sizes[k], padding_mode, bool(align_corners), nd)
                         for k, o in enumerate(offsets)]
            weight = weights[0][offsets[0]]
            for k in range(1, nd):
                weight = weight * weights[k][offsets[k]]
            term = tap(positions) * weight
            out = term if out is None else out + term
    else:
        lows = [p.detach().floor() for p in coords]
        out = None
        for corner in itertools.product((0, 1), repeat=nd):
            weight = None
            for k, bit in enumerate(corner):
                frac = coords[k] - lows[k]
                w = frac if bit else 1.0 - frac
                weight = w if weight is None else weight * w
            term = tap([lows[k] + float(bit) for k, bit in enumerate(corner)]) * weight
            out = term if out is None else out + term
    return out.reshape([n, c] + out_spatial).to(input.dtype)


class _ZeroGradient(Function):
    """A 0-d zero whose gradient to x is zeros shaped as x (a value that does not depend on x, differentiably)."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape, ctx.dtype = list(x.shape), x.dtype
        return _C._full([], 0.0, x.dtype)

    @staticmethod
    def backward(ctx, g):
        return _C._full(ctx.shape, 0.0, ctx.dtype)


FUNCTIONAL = dict(affine_grid=affine_grid, grid_sample=grid_sample)
