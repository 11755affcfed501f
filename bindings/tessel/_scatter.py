"""torch.scatter / scatter_add / scatter_reduce (and their in-place methods), composed in Python of one
index_add over the flattened input, so they are differentiable in input and src; split from _extra.py by
concept. Importing this module registers them in _extra's TORCH_FUNCTIONS / TENSOR_METHODS.
"""
import builtins
import warnings

import numpy as np

from . import _C, _dtypes
from ._extra import TENSOR_METHODS, TORCH_FUNCTIONS, Tensor, _host, _tensor
from ._lazy_function import lazy_function

# ---- scatter family: torch.scatter / scatter_add / scatter_reduce, composed of one index_add over the
# flattened input (differentiable in input and src); the positions are computed on the host from index.

def _scatter_plan(x, dim, index, src_shape, name):
    """(dim, target positions in x.reshape(-1), source positions in src.reshape(-1)) for every element of
    index, with torch's shape and bounds checks."""
    idx = _host(index, name) if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":  # torch names scatter() for the three
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    nd = builtins.max(x.ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-nd, nd - 1, dim))
    dim = dim % nd
    xs = tuple(x.shape) or (1,)
    idx = idx.reshape(idx.shape or (1,))
    if idx.ndim != len(xs) or (src_shape is not None and len(src_shape or (1,)) != idx.ndim):
        raise RuntimeError("Index tensor must have the same number of dimensions as %s tensor"
                           % ("self" if idx.ndim != len(xs) else "src"))
    ss = tuple(src_shape or (1,)) if src_shape is not None else None
    for d in range(idx.ndim):
        if (d != dim and idx.shape[d] > xs[d]) or (ss is not None and idx.shape[d] > ss[d]):
            raise RuntimeError("%s(): Expected index %s to be smaller than self %s apart from dimension %d%s"
                               % (name, list(idx.shape), list(xs), dim,
                                  "" if ss is None else " and to be smaller size than src %s" % list(ss)))
    if idx.size and (idx.min() < 0 or idx.max() >= xs[dim]):  # torch wraps no index, negative ones included
        bad = idx[(idx < 0) | (idx >= xs[dim])].reshape(-1)[0]
        raise RuntimeError("index %d is out of bounds for dimension %d with size %d" % (bad, dim, xs[dim]))
    if idx.size == 0:
        return dim, np.zeros(0, np.int64), np.zeros(0, np.int64)
    grids = [np.broadcast_to(g, idx.shape) for g in np.indices(idx.shape, sparse=True)]
    src_pos = np.ravel_multi_index(tuple(grids), ss).reshape(-1) if ss is not None else None
    grids[dim] = idx
    target = np.ravel_multi_index(tuple(grids), xs).reshape(-1)
    return dim, target.astype(np.int64), src_pos


def _check_src_dtype(input, src, name):
    if isinstance(src, Tensor) and src.dtype != input.dtype:
        raise RuntimeError("%s(): Expected self.dtype to be equal to src.dtype" % name)


def _scatter_host(input, target, src, src_pos, mode, include_self=True):
    """Integer and bool tensors (no gradient) on the host: "set" (last writer wins), "sum", "prod",
    "mean" (floor division for integers, as torch), "amax", "amin"."""
    a = input.numpy()
    out = a.reshape(-1).copy()
    vals = src.numpy().reshape(-1)[src_pos] if isinstance(src, Tensor) else np.full(target.size, src, dtype=a.dtype)
    vals = vals.astype(a.dtype)
    if mode == "set":
        last = _last_writers(target)
        out[target[last]] = vals[last]
        return _tensor(out.reshape(a.shape))
    if a.dtype == np.bool_:  # torch: sum / amax are "or", prod / amin "and" on bools
        mode = {"sum": "amax", "mean": "amax", "prod": "amin"}.get(mode, mode)
    ufunc = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[mode]
    if not include_self:  # the written positions start from the reduction's identity
        if a.dtype == np.bool_:
            identity = mode == "amin"
        else:
            info = np.iinfo(a.dtype)
            identity = {"sum": 0, "mean": 0, "prod": 1, "amax": info.min, "amin": info.max}[mode]
        out[target] = identity
    ufunc.at(out, target, vals)
    if mode == "mean":
        counts = np.bincount(target, minlength=out.size) + (1 if include_self else 0)
        touched = np.bincount(target, minlength=out.size) > 0
        out = np.where(touched, np.floor_divide(out, np.maximum(counts, 1)), out).astype(a.dtype)
    return _tensor(out.reshape(a.shape))


def _scatter_values(src, src_pos, n, like):
    """The src elements index names, in index's order (a differentiable gather), or a scalar's copies."""
    if isinstance(src, Tensor):
        return src.reshape(-1)[src_pos] if n else src.reshape(-1)[:0]
    return _C._full([n], float(src), like.dtype)


def _flat_index_add(flat, target, values):
    return flat.index_add(0, _tensor(target), values.to(flat.dtype) if values.dtype != flat.dtype else values)


def _scatter_add_plain(input, dim, index, src):
    """scatter_add of plain floating tensors in C++ (core/ops/index_dim.h: in index order, each add rounded to
    input's dtype, as torch's CPU kernel; differentiable in input and src). None where the general path must
    answer (DTensors, 0-d or integer tensors, an index narrower than input off dim, or out of range)."""
    tensors = (input, index, src)
    if not builtins.all(isinstance(t, Tensor) and not t.is_distributed for t in tensors) or input.ndim == 0 or \
            index.dtype != _dtypes.int64 or not input.dtype.is_floating_point or src.dtype != input.dtype or \
            not index.ndim == input.ndim == src.ndim or index.numel() == 0:
        return None
    d = dim % input.ndim
    if builtins.any(index.shape[k] > src.shape[k] or (k != d and index.shape[k] != input.shape[k])
                    for k in range(input.ndim)):
        return None
    for k in range(src.ndim):
        if src.shape[k] != index.shape[k]:
            src = src.narrow(k, 0, index.shape[k])  # torch reads only index's extent of src
    try:
        return _C._functional._scatter_add_dim(input, d, index, src)
    except (IndexError, RuntimeError, ValueError):
        return None


def scatter_add(input, dim, index, src):
    """torch.scatter_add: out[index[i][j]][j] += src[i][j] (dim 0, and so on), repeats accumulating."""
    _check_src_dtype(input, src, "scatter_add")
    if -builtins.max(input.ndim, 1) <= dim < builtins.max(input.ndim, 1):
        out = _scatter_add_plain(input, dim, index, src)
        if out is not None:
            return out
    _, target, src_pos = _scatter_plan(input, dim, index, tuple(src.shape), "scatter_add")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, "sum")
    flat = input.reshape(-1)
    return _flat_index_add(flat, target, _scatter_values(src, src_pos, target.size, input)).reshape(*input.shape)


def _last_writers(target):
    """For each distinct target, the position in target of its last occurrence (torch's CPU kernel writes
    in order, so the last element wins; the value of repeats is unspecified in torch's docs)."""
    if target.size == 0:
        return target
    _, first_of_reversed = np.unique(target[::-1], return_index=True)
    return target.size - 1 - first_of_reversed


def _touched(target, numel):
    mask = np.zeros(numel, dtype=bool)
    mask[target] = True
    return _tensor(mask)


_warned_reduce = []


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """torch.scatter: a copy of input with out[index[i][j]][j] = src[i][j] (dim 0, and so on) or = value;
    reduce='add' / 'multiply' combine instead (torch's deprecated form of scatter_reduce). Differentiable in
    input (zero where written) and src (the written elements)."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply, got %s" % reduce)
        if not isinstance(src, Tensor):
            src = _C._full(list(index.shape), float(src), input.dtype)
        elif not _warned_reduce:  # torch warns once per process, for a tensor src only
            _warned_reduce.append(True)
            warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a "
                          "future PyTorch release. Use torch.scatter_reduce instead for more reduction options.",
                          UserWarning, stacklevel=2)
        return scatter_reduce(input, dim, index, src, "sum" if reduce == "add" else "prod")
    _check_src_dtype(input, src, "scatter")
    shape = tuple(src.shape) if isinstance(src, Tensor) else None
    _, target, src_pos = _scatter_plan(input, dim, index, shape, "scatter")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, "set")
    last = _last_writers(target)
    values = _scatter_values(src, None if src_pos is None else src_pos[last], last.size, input)
    flat = input.reshape(-1)
    placed = _flat_index_add(_C._full([flat.shape[0]], 0.0, flat.dtype), target[last], values)
    if last.size != target.size and isinstance(src, Tensor) and src.requires_grad and _C.is_grad_enabled():
        # torch's gradient for repeated targets: every src element gets its target's gradient (src.grad is the
        # output gradient gathered at index), the overwritten ones too
        every = _flat_index_add(_C._full([flat.shape[0]], 0.0, flat.dtype), target,
                                _scatter_values(src, src_pos, target.size, input))
        placed = placed.detach() + (every - every.detach())
    return _C._functional.where(_touched(target, flat.shape[0]), placed, flat).reshape(*input.shape)


_REDUCE_INIT = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -np.inf, "amin": np.inf}


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: combines src's elements into input's positions named by index with "sum",
    "prod", "mean", "amax" or "amin" (with or without input's own value: include_self). Gradients as torch's:
    sum / mean through the composed index_add; amax / amin split evenly among the elements equal to the
    result, prod the product of the others (for these three the values come from the host and the
    gradient through a surrogate with those weights)."""
    if reduce not in _REDUCE_INIT:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin, got %s" % reduce)
    _check_src_dtype(input, src, "scatter_reduce")
    _, target, src_pos = _scatter_plan(input, dim, index, tuple(src.shape), "scatter_reduce")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, reduce, include_self)
    flat = input.reshape(-1)
    n = flat.shape[0]
    values = _scatter_values(src, src_pos, target.size, input)
    touched = _touched(target, n)
    zeros = _C._full([n], 0.0, flat.dtype)
    if reduce in ("sum", "mean"):
        total = _flat_index_add(flat if include_self else zeros, target, values)
        if reduce == "mean":
            counts = np.bincount(target, minlength=n).astype(np.float64) + (1.0 if include_self else 0.0)
            counts = np.maximum(counts, 1.0)
            total = total / _tensor(counts.astype(np.float64)).to(flat.dtype)  # in the input's dtype, as torch
        out = total if include_self else _C._functional.where(touched, total, flat)
        return out.reshape(*input.shape)
    if flat.dtype == _dtypes.bfloat16:  # numpy has no bfloat16: the host reduction on float32 copies (exact)
        return scatter_reduce(input.float(), dim, index, src.float(), reduce, include_self=include_self).to(
            input.dtype)
    xv = flat.detach().numpy()
    sv = values.detach().numpy().astype(xv.dtype, copy=False)
    result = xv.copy()
    if not include_self:
        result[target] = _REDUCE_INIT[reduce]
    {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce].at(result, target, sv)
    # Each element's weight in d result / d element, for the surrogate below.
    if reduce == "prod":  # d out / d element = the product of the group's other elements (zeros counted apart)
        group_src, group_self = sv.astype(np.float64), np.where(include_self, xv, 1.0).astype(np.float64)
        nonzero = np.where(group_self != 0, group_self, 1.0)
        np.multiply.at(nonzero, target, np.where(group_src != 0, group_src, 1.0))
        zeros_in = (group_self == 0).astype(np.int64)
        np.add.at(zeros_in, target, (group_src == 0).astype(np.int64))

        def others(v, t):
            excl_zero = zeros_in[t] - (v == 0)
            with np.errstate(invalid="ignore"):  # inf / inf: a NaN weight, as torch's gradient there
                return np.where(excl_zero > 0, 0.0, nonzero[t] / np.where(v != 0, v, 1.0))
        w_src = others(group_src, target)
        w_self = others(group_self, np.arange(n)) if include_self else np.zeros(n)
    else:
        hit_src = sv == result[target]
        # torch counts self's tie in the split even with include_self=False (self itself then gets no share)
        ties = np.bincount(target, weights=hit_src, minlength=n) + (xv == result)
        hit_self = (xv == result) & include_self
        w_src = np.where(hit_src, 1.0 / np.maximum(ties[target], 1), 0.0)
        w_self = np.where(hit_self, 1.0 / np.maximum(ties, 1), 0.0)
    exact = _tensor(result)
    if _C.is_grad_enabled() and (flat.requires_grad or values.requires_grad):
        np_dtype = xv.dtype  # the host's values with those weights as gradients (an infinite element made the
        exact = _value_with_weights(exact, flat, values, _tensor(w_self.astype(np_dtype)),  # surrogate trick's
                                    _tensor(w_src.astype(np_dtype)), _tensor(target))  # inf - inf a NaN value)
    return _C._functional.where(touched, exact, flat).reshape(*input.shape)


def _build_value_with_weights():
    """value with gradients g * w_self for flat and g[target] * w_src for values."""
    from .autograd import Function

    class ValueWithWeights(Function):
        @staticmethod
        def forward(ctx, value, flat, values, w_self, w_src, target):
            ctx.save_for_backward(w_self, w_src, target)
            return value.clone()

        @staticmethod
        def backward(ctx, g):
            w_self, w_src, target = ctx.saved_tensors
            return None, g * w_self, g.index_select(0, target) * w_src, None, None, None
    return ValueWithWeights


_value_with_weights = lazy_function(_build_value_with_weights)


def _in_place(fn, name):
    """fn's result written into x (under autograd tessel/_inplace.py records the method instead)."""
    def method(x, *args, **kwargs):
        return x.copy_(fn(x, *args, **kwargs))
    method.__name__ = name
    return method


TORCH_FUNCTIONS.update(scatter=scatter, scatter_add=scatter_add, scatter_reduce=scatter_reduce)
TENSOR_METHODS.update(scatter=scatter, scatter_add=scatter_add, scatter_reduce=scatter_reduce,
                      scatter_=_in_place(scatter, "scatter_"), scatter_add_=_in_place(scatter_add, "scatter_add_"),
                      scatter_reduce_=_in_place(scatter_reduce, "scatter_reduce_"))


