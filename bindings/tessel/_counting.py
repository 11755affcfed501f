"""torch's counts and searches over values, computed on the host (numpy; no gradient by construction, as
torch's, so an input that requires grad is read as its values): unique, bincount, searchsorted, bucketize, isin,
histc; split from _extra.py by concept. Importing it registers them in _extra's TORCH_FUNCTIONS / TENSOR_METHODS.
"""
import builtins

import numpy as np

from . import _dtypes
from ._extra import TENSOR_METHODS, TORCH_FUNCTIONS, Tensor
from ._tensor import _host_numpy, tensor as _tensor


def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique (values carry no gradient, as torch's): sorted unique values, optionally the inverse
    indices and the counts. With dim: the unique slices along dim, in lexicographic order (torch's), the
    inverse indexing dim's positions. NaNs are not merged (NaN != NaN: each is its own value, as torch)."""
    a = _host_numpy(x)
    if dim is not None:
        d = dim + a.ndim if dim < 0 else dim
        if not 0 <= d < builtins.max(a.ndim, 1):
            raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                             % (-a.ndim, a.ndim - 1, dim))
        values, inverse, counts = np.unique(a, axis=d, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)  # numpy 2 may keep a trailing axis
    else:
        values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True, equal_nan=False)
        inverse = inverse.reshape(a.shape)
    out = [_tensor(values).to(x.dtype)]
    if return_inverse:
        out.append(_tensor(inverse.astype(np.int64)))
    if return_counts:
        out.append(_tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x, weights=None, minlength=0):
    a = _host_numpy(x)
    if a.ndim != 1 or (a.size and a.min() < 0) or x.dtype.is_floating_point:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else _host_numpy(weights)
    counts = np.bincount(a, weights=w, minlength=minlength)
    if w is None:
        return _tensor(counts.astype(np.int64))
    return _tensor(counts.astype(np.float32 if weights.dtype == _dtypes.float32 else np.float64))


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    seq = _host_numpy(sorted_sequence)
    vals = _host_numpy(values) if isinstance(values, Tensor) else np.asarray(values)
    _check_search(seq, vals, right, side, sorter)
    side = side or ("right" if right else "left")
    if sorter is not None:  # search the sequence in sorter's order, as torch
        order = _host_numpy(sorter)
        if order.size and (order.min() < 0 or order.max() >= seq.shape[-1]):
            raise RuntimeError("torch.searchsorted(): sorter index out of range")
        seq = np.take_along_axis(seq, order, -1)
    if seq.ndim == 1:
        out = _binary_search(seq[None, :], vals.reshape(1, -1), side == "right").reshape(vals.shape)
    else:
        out = _binary_search(seq.reshape(-1, seq.shape[-1]), vals.reshape(-1, vals.shape[-1]), side == "right")
        out = out.reshape(vals.shape)
    return _tensor(out.astype(np.int32 if out_int32 else np.int64))


def _check_search(seq, vals, right, side, sorter):
    """torch's checks of searchsorted's arguments (numpy's errors, or a result, came out before)."""
    name = "torch.searchsorted(): "
    if side not in (None, "left", "right"):
        raise RuntimeError(name + "side can only be 'left' or 'right' but got %s" % side)
    if side == "left" and right:
        raise RuntimeError(name + "side and right can't be set to opposites, got side of left while right was True")
    if seq.ndim == 0:
        raise RuntimeError(name + "boundaries tensor should have positive dimension, but got 0 dimension")
    if seq.ndim > 1 and vals.ndim == 0:
        raise RuntimeError(name + "input value can be a scalar only when boundaries tensor dimension is 1, but we got "
                           "boundaries tensor dim(%d) and input value's dim(0) numel(1)" % seq.ndim)
    if seq.ndim > 1 and (vals.ndim != seq.ndim or vals.shape[:-1] != seq.shape[:-1]):
        raise RuntimeError(name + "boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries "
                           "tensor and input value tensor must match, but we got boundaries tensor %s and input value "
                           "tensor %s" % (list(seq.shape), list(vals.shape)))
    if sorter is not None:
        if sorter.dtype != _dtypes.int64:
            from ._subscript import _torch_dtype_name
            raise RuntimeError(name + "sorter must be a tensor of long dtype but got dtype %s"
                               % _torch_dtype_name(sorter.dtype))
        if tuple(sorter.shape) != seq.shape:
            raise RuntimeError(name + "boundary and sorter must have the same size, but got boundary tensor %sand got "
                               "sorter tensor %s" % (list(seq.shape), list(sorter.shape)))


def _binary_search(seq, vals, right):
    """torch's search, vectorized: per row of seq [R, n] the insertion point of each of vals [R, m], moving right
    while not (seq[mid] >= v) (right: not >), so NaN compares as torch's: a NaN value, and any value against a
    NaN in the sequence, goes right (searchsorted([1, 2, nan], inf) is 3; numpy's NaN-last order said 2)."""
    n = seq.shape[-1]
    start = np.zeros(vals.shape, np.int64)
    end = np.full(vals.shape, n, np.int64)
    with np.errstate(invalid="ignore"):
        while True:
            active = start < end
            if not active.any():
                return start
            mid = start + ((end - start) >> 1)
            at = np.take_along_axis(seq, np.minimum(mid, n - 1), -1)
            go_right = ~(at > vals) if right else ~(at >= vals)
            start = np.where(active & go_right, mid + 1, start)
            end = np.where(active & ~go_right, mid, end)


def bucketize(input, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError("boundaries tensor must be 1 dimension, but got dim(%d)" % boundaries.dim())
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """torch.isin: whether each element of `elements` is in `test_elements` (either may be a scalar)."""
    out = np.isin(_host_numpy(elements) if isinstance(elements, Tensor) else np.asarray(elements),
                  _host_numpy(test_elements) if isinstance(test_elements, Tensor) else np.asarray(test_elements),
                  assume_unique=assume_unique, invert=invert)
    return _tensor(np.asarray(out, dtype=np.bool_))


def histc(input, bins=100, min=0, max=0):
    """torch.histc: counts of the elements in `bins` equal-width bins over [min, max] (min == max: the data's
    range), the last bin closed; elements outside are left out; the input's float dtype (float16 too)."""
    if not input.dtype.is_floating_point:  # torch 2.15's CPU kernels (torchtitan's router histc's int64 experts)
        from ._linalg_checks import name
        raise NotImplementedError('"%s" not implemented for \'%s\'' % (
            "linspace_cpu" if input.dtype == _dtypes.bool else "histogram_cpu", name(input.dtype)))
    a = _host_numpy(input).astype(np.float64).reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and a.size:
        lo, hi = float(a.min()), float(a.max())
    if lo == hi:  # torch widens an empty range by one on each side
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histogramc: max must be larger than min")
    counts, _ = np.histogram(a[(a >= lo) & (a <= hi)], bins=int(bins), range=(lo, hi))
    return _tensor(counts.astype(np.float64)).to(input.dtype)


TORCH_FUNCTIONS.update(unique=unique, bincount=bincount, searchsorted=searchsorted, bucketize=bucketize, isin=isin,
                       histc=histc)
TENSOR_METHODS.update(unique=unique, bincount=bincount, histc=histc)
