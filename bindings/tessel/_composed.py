"""More torch functions composed from tessel's differentiable ops (gradients flow through the values), registered
as torch functions and Tensor methods where torch has them: addcmul / addcdiv, nansum / nanmean, tile, diagonal,
diag_embed, tensordot, cross, dist, rot90, cartesian_prod, combinations, aminmax, cummax / cummin, mode,
unique_consecutive, fmax / fmin, deg2rad / rad2deg, logspace and linalg.matrix_power. Split from _extra.py by
concept; importing it registers them. Each was checked against torch 2.15's outputs (ties included: cummax /
cummin / mode report the last index of the value they pick, mode the smallest most frequent value).

Index outputs (cummax's indices, mode's) are computed on the host from the values, as sort's are
(_compat._sort_order); their values are gathered through those indices, so gradients reach the input.
"""
import builtins
import inspect
import itertools
import math
import numbers
import warnings

import numpy as np

from . import _C, _dtypes, return_types
from ._dtensor_compose import aligned, gathered_along
from ._extra import (FUNCTIONAL, TENSOR_METHODS, TORCH_FUNCTIONS, _legacy, _reduce, fused_operands, isnan, lerp,
                     linspace, maximum, meshgrid, minimum, movedim)
from ._inplace import honours_inplace as _honours_inplace
from ._subscript import _broadcast_shape, _torch_dtype_name
from ._tensor import _host_numpy, tensor as _tensor, wrap_dim, zero_dim_as_vector
from ._autocast_policy import float32_under_autocast as _float32_under_autocast
from ._autocast_policy import widest_under_autocast as _widest_under_autocast

_min_max = return_types.aminmax


def _addc_dtype(input, tensor1, tensor2, value):
    from ._namespace import result_type
    return result_type(input, tensor1, tensor2)


def addcmul(input, tensor1, tensor2, *, value=1):
    """input + value · tensor1 · tensor2 in the three's promoted dtype (the product in it too, as torch's:
    float64 input with float32 factors multiplies in float64). One dtype: one C++ op with torch's fused values."""
    ops = None if isinstance(value, complex) else fused_operands(input, tensor1, tensor2)
    if ops is not None:
        return _C._functional.addcmul(*ops, builtins.float(value))
    dtype = _addc_dtype(input, tensor1, tensor2, value)
    if not dtype.is_floating_point:
        value = int(value)  # torch's integral kernels take the value as an integer
    work = _opmath(dtype)
    out = input.to(work) + tensor1.to(work) * tensor2.to(work) * value
    return out.to(dtype)


_opmath = _dtypes.opmath


def addcdiv(input, tensor1, tensor2, *, value=1):
    """input + value · tensor1 / tensor2 in the three's promoted dtype (integer division is refused, as torch)."""
    ops = None if isinstance(value, complex) else fused_operands(input, tensor1, tensor2)
    if ops is not None:
        return _C._functional.addcdiv(*ops, builtins.float(value))
    dtype = _addc_dtype(input, tensor1, tensor2, value)
    if not dtype.is_floating_point:
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
                           "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                           "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")
    work = _opmath(dtype)
    return (input.to(work) + tensor1.to(work) / tensor2.to(work) * value).to(dtype)


def _written_back(name, compose, fused):
    """Tensor.<name> (lerp_, addcmul_, addcdiv_) where autograd records nothing and the C++ front of these methods
    (bindings/inplace_py.cc, which takes positional operands of self's dtype and Python numbers) declined. With the
    keywords bound and a numpy number made a float, operands the fused op takes go to it in place (its overlap and
    DTensor layout checks are torch's); promoted dtypes and a DTensor next to plain tensors are computed by compose
    and written back, after torch's partial-overlap check."""
    from ._compat import _in_place
    sig = inspect.signature(compose)

    def method(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        ops = [builtins.float(v) if isinstance(v, numbers.Real) and not isinstance(v, (builtins.bool, _C.Tensor))
               else v for v in bound.arguments.values()]
        tensors = [v for v in ops[1:] if isinstance(v, _C.Tensor)]
        if len(ops) == 3:  # lerp_: end a tensor of self's dtype, weight a float or a tensor
            takes = isinstance(ops[1], _C.Tensor) and ops[1].dtype == self.dtype and isinstance(
                ops[2], (_C.Tensor, builtins.float))
        else:  # addcmul_ / addcdiv_: two tensors and a float value
            t1, t2, value = ops[1:]
            takes = isinstance(t1, _C.Tensor) and isinstance(t2, _C.Tensor) and isinstance(value, builtins.float)
        fused_tensors = fused_operands(self, *tensors) if takes else None
        if fused_tensors is not None and fused_tensors[0] is self:  # (self keeps its dtype)
            fused(*fused_tensors, *[v for v in ops[1:] if not isinstance(v, _C.Tensor)])
            return self
        for t in tensors:
            if not self.is_distributed and not t.is_distributed:
                _C._functional._check_no_partial_overlap(self, t, name)
        return _in_place(self, compose(*ops[:3], **({"value": ops[3]} if len(ops) > 3 else {})), name)
    method.__name__ = name
    return method


_C.Tensor.lerp_ = _written_back("lerp_", lerp, _C._functional.lerp_)
_C.Tensor.addcmul_ = _written_back("addcmul_", addcmul, _C._functional.addcmul_)
_C.Tensor.addcdiv_ = _written_back("addcdiv_", addcdiv, _C._functional.addcdiv_)


def _dims_or_all(x, dim):
    return tuple(range(x.ndim)) if dim is None else dim


def nansum(x, dim=None, keepdim=False, *, dtype=None):
    kept = _C._functional.where(isnan(x), _C._full([], 0.0, x.dtype), x) if x.dtype.is_floating_point else x
    kept = kept.to(dtype) if dtype is not None else kept
    return kept.sum() if dim is None and not keepdim else kept.sum(_dims_or_all(x, dim), keepdim=keepdim)


def nanmean(x, dim=None, keepdim=False, *, dtype=None):
    if not x.dtype.is_floating_point:
        from ._namespace import _name
        raise NotImplementedError("nanmean(): expected input to have floating point or complex dtype but got %s"
                                  % _name(x.dtype))
    count = (~isnan(x)).to(dtype or x.dtype)
    total = count.sum() if dim is None and not keepdim else count.sum(_dims_or_all(x, dim), keepdim=keepdim)
    return nansum(x, dim, keepdim, dtype=dtype) / total


def tile(x, *dims):
    """torch's x.tile(2), x.tile(2, 1), x.tile((2, 1)), torch.tile(x, (2, 1))."""
    dims = dims[0] if len(dims) == 1 and not isinstance(dims[0], builtins.int) else dims
    dims = [builtins.int(d) for d in dims]
    return x.repeat(*([1] * (x.ndim - len(dims)) + dims))


def _diagonal_index(n_rows, n_cols, offset):
    """The (rows, cols) numpy indices of the offset-th diagonal of an n_rows x n_cols matrix."""
    length = builtins.max(0, builtins.min(n_rows + builtins.min(offset, 0), n_cols - builtins.max(offset, 0)))
    idx = np.arange(length)
    return idx - builtins.min(offset, 0), idx + builtins.max(offset, 0)


def diagonal(x, offset=0, dim1=0, dim2=1):
    """torch.diagonal: the diagonal over dims (dim1, dim2), appended as the last dim; a view of x (as_strided), so
    `x.diagonal().zero_()` writes x, as torch; a DTensor's too when neither dim is sharded (each rank's piece's
    diagonal), else a copy (the diagonal crosses the shards)."""
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    if d1 == d2:
        raise RuntimeError("diagonal dimensions cannot be identical %d, %d" % (dim1, dim2))
    if not x.is_distributed:
        n1, n2 = x.shape[d1], x.shape[d2]
        s1, s2 = x.stride(d1), x.stride(d2)
        length = builtins.max(0, builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2))
        start = x.storage_offset() + ((offset * s2 if offset >= 0 else -offset * s1) if length > 0 else 0)
        rest = [d for d in range(x.ndim) if d not in (d1, d2)]
        return x.as_strided([x.shape[d] for d in rest] + [length], [x.stride(d) for d in rest] + [s1 + s2], start)
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    n1, n2 = x.shape[d1], x.shape[d2]
    length = builtins.max(0, builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2))
    from ._dtensor_like import local_view  # neither dim sharded: a view of each rank's piece, written through
    view = local_view(x, lambda local: diagonal(local, offset, d1, d2), {d: i for i, d in enumerate(rest)},
                      [x.shape[d] for d in rest] + [length])
    if view is not None:
        return view
    y = movedim(x, [d1, d2], [x.ndim - 2, x.ndim - 1])  # a copy: the diagonal crosses the shards
    rows, cols = _diagonal_index(y.shape[-2], y.shape[-1], offset)
    return y[(builtins.Ellipsis, _tensor(rows), _tensor(cols))]


def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """torch.diag_embed: each last-dim vector of x on the offset-th diagonal of a matrix over (dim1, dim2)."""
    m = x.shape[-1]
    n = m + builtins.abs(offset)
    rows, cols = _diagonal_index(n, n, offset)
    placing = np.zeros((m, n * n), dtype=np.float64)
    placing[np.arange(m), rows * n + cols] = 1.0
    out = (x @ _tensor(placing).to(x.dtype)).reshape(*x.shape[:-1], n, n)
    d1, d2 = dim1 % out.ndim, dim2 % out.ndim
    return out if (d1, d2) == (out.ndim - 2, out.ndim - 1) else movedim(out, [out.ndim - 2, out.ndim - 1], [d1, d2])


def tensordot(a, b, dims=2):
    if isinstance(dims, builtins.int):
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, builtins.int) else list(d) for d in dims)
    dims_a, dims_b = [d % a.ndim for d in dims_a], [d % b.ndim for d in dims_b]
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = 1
    for d in dims_a:
        k *= a.shape[d]
    left = a.permute(*(free_a + dims_a)).reshape(-1, k)
    right = b.permute(*(dims_b + free_b)).reshape(k, -1)
    return (left @ right).reshape(*([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b]))


def cross(input, other, dim=None):
    """torch.cross (dim None: the first dim of size 3, with torch's deprecation warning) and linalg.cross."""
    _checks().cross_inputs(input, other)
    shape = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
    a, b = input.expand(*shape), other.expand(*shape)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the "
                      "dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to "
                      "agree with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    if shape[dim] != 3:
        raise RuntimeError("linalg.cross: inputs dimension %d must have length 3. Got %d and %d"
                           % (dim, input.shape[dim], other.shape[dim]))
    # a DTensor sharded along dim made whole there first: unbind refuses a sharded dim, as torch's
    a1, a2, a3 = gathered_along(a, dim).unbind(dim)
    b1, b2, b3 = gathered_along(b, dim).unbind(dim)
    return _C._functional.stack([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], dim % len(shape))


def dist(input, other, p=2):
    from . import linalg  # vector_norm's gradient: torch's masks at zero (the p-norm formula's 0 · inf)
    return linalg.vector_norm(input - other, p)


def rot90(x, k=1, dims=(0, 1)):
    if len(dims) != 2:
        raise RuntimeError("expected total rotation dims == 2, but got dims = %d" % len(dims))
    if x.ndim < 2:
        raise RuntimeError("expected total dims >= 2, but got total dims = %d" % x.ndim)
    d0, d1 = (wrap_dim(d, x.ndim) for d in dims)
    if d0 == d1:
        raise RuntimeError("expected rotation dims to be different, but got dim0 = %d and dim1 = %d" % (d0, d1))
    k %= 4
    if k == 0:
        return x.clone()
    if k == 2:
        return x.flip([d0, d1])
    return (x.flip(d1) if k == 1 else x.flip(d0)).transpose(d0, d1)


def cartesian_prod(*tensors):
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return _C._functional.stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if rows.size == 0:
        return input[:0]
    return input[_tensor(rows.reshape(-1))].reshape(-1, r)


def amin(x, dim=(), keepdim=False):
    """The smallest entries over dim (all dims when empty), through amax of the order-reversed values."""
    from ._compat import _flipped
    dims = tuple(range(x.ndim)) if dim is None or dim == () or dim == [] else dim
    return _flipped(_flipped(x).amax(dims, keepdim=keepdim))


def aminmax(x, *, dim=None, keepdim=False):
    if dim is None:
        lo, hi = x.min(), x.max()
        return _min_max(lo.reshape(*([1] * x.ndim)) if keepdim else lo, hi.reshape(*([1] * x.ndim)) if keepdim
                        else hi)
    return _min_max(x.amin(dim, keepdim=keepdim), x.amax(dim, keepdim=keepdim))


def _running_best(x, dim, larger, result):
    """(values, indices) of the running max (larger) or min along dim: a tie takes the later index and a NaN
    takes over from where it appears (each later NaN too), as torch's. A DTensor whole along dim runs on each
    rank's piece and keeps its layout; else values and indices come back alike (Replicate along dim), as torch's."""
    from ._compat import _rewrap, _whole_along
    if _whole_along(x, dim):
        values, indices = _running_best(x.to_local(), dim, larger, result)
        return result(_rewrap(x, values, x.shape), _rewrap(x, indices, x.shape))
    a = x.detach().float().numpy() if x.dtype in (_dtypes.bfloat16, _dtypes.float16) else _host_numpy(x)
    a = np.moveaxis(a, dim, -1)
    idx = np.zeros(a.shape, dtype=np.int64)
    if a.size == 0:  # an empty input: empty values and indices of its shape (a[..., 0] raised IndexError)
        index = _tensor(np.moveaxis(idx, -1, dim))
        return result(x.detach().clone() if not x.requires_grad else x * 1, index)
    best = a[..., 0].copy()
    for j in range(1, a.shape[-1]):
        col = a[..., j]
        nan_col = np.isnan(col) if np.issubdtype(a.dtype, np.floating) else np.zeros(col.shape, dtype=bool)
        nan_best = np.isnan(best) if np.issubdtype(a.dtype, np.floating) else np.zeros(col.shape, dtype=bool)
        take = nan_col | (~nan_best & ((col >= best) if larger else (col <= best)))
        best = np.where(take, col, best)
        idx[..., j] = np.where(take, j, idx[..., j - 1])
    order = np.moveaxis(idx, -1, dim)
    values = x.gather(dim, _tensor(order))
    if values.is_distributed:
        from ._tensor import _indices_like
        return result(values, _indices_like(values, order))
    return result(values, _tensor(order))


@zero_dim_as_vector
def cummax(x, dim):
    return _running_best(x, wrap_dim(dim, x.ndim), True, return_types.cummax)


@zero_dim_as_vector
def cummin(x, dim):
    return _running_best(x, wrap_dim(dim, x.ndim), False, return_types.cummin)


def mode(x, dim=-1, keepdim=False):
    """The smallest most frequent value along dim and the last index where it occurs (torch's CPU choice); a
    row holding NaN as torch's CPU kernel reads it (_mode_with_nan)."""
    d = wrap_dim(dim, x.ndim)
    if x.ndim == 0:
        return return_types.mode(x.clone(), _tensor(np.zeros((), dtype=np.int64)))
    if x.shape[d] == 0:  # (numpy's reshape error came out)
        raise IndexError("mode(): Expected reduction dim %d to have non-zero size." % d)
    a = np.moveaxis(_host_numpy(x), d, -1)
    flat = a.reshape(-1, a.shape[-1])
    picks = np.empty(flat.shape[0], dtype=np.int64)
    floating = np.issubdtype(flat.dtype, np.floating)
    for r, row in enumerate(flat):
        if floating and np.isnan(row).any():
            picks[r] = _mode_with_nan(row)
            continue
        values, counts = np.unique(row, return_counts=True)
        value = values[np.argmax(counts)]  # np.unique sorts: the first of the most frequent is the smallest
        picks[r] = np.nonzero(row == value)[0][-1]
    idx = picks.reshape(a.shape[:-1] + (1,))
    index = _tensor(np.moveaxis(idx, -1, d))
    values = x.gather(d, index)
    if not keepdim:
        values, index = values.squeeze(d), index.squeeze(d)
    return return_types.mode(values, index)


def _mode_with_nan(row):
    """The index torch's CPU mode picks in a row holding NaN: it sorts (value, index) pairs with `<` (std::sort,
    an insertion sort up to 16 elements: a NaN, unordered, stays where the sort finds it) and takes the end of the
    first longest run of == values, so every NaN is a value of its own. Longer rows: a stable sort with NaN last
    (introsort's order there is not followed)."""
    n = row.size
    if n > 16:
        order = np.argsort(row, kind="stable")
    else:
        order = list(range(n))
        for i in range(1, n):  # libstdc++'s __insertion_sort
            j = order[i]
            if row[j] < row[order[0]]:
                order[1:i + 1] = order[0:i]
                order[0] = j
                continue
            k = i
            while row[j] < row[order[k - 1]]:
                order[k] = order[k - 1]
                k -= 1
            order[k] = j
    best, best_count, count = 0, 0, 0
    for i in range(n):
        count += 1
        if i == n - 1 or not row[order[i]] == row[order[i + 1]]:
            if count > best_count:
                best, best_count = order[i], count
            count = 0
    return best


def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive: each run of equal consecutive elements (with dim: equal slices along dim)
    kept once, with the inverse (each element's / slice's run) and the run lengths."""
    if dim is not None:
        a = _host_numpy(x)
        d = dim + a.ndim if dim < 0 else dim
        if not 0 <= d < a.ndim:
            raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                             % (-a.ndim, a.ndim - 1, dim))
        if a.size == 0 and a.shape[d]:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        width = builtins.int(np.prod([n for j, n in enumerate(a.shape) if j != d]))  # (-1 fails for 0 slices)
        s = np.moveaxis(a, d, 0).reshape(a.shape[d], width)  # one row per slice along dim
        starts = np.concatenate([[True], (s[1:] != s[:-1]).any(axis=1)]) if len(s) else np.zeros(0, dtype=bool)
        out = [_tensor(np.compress(starts, a, axis=d)).to(x.dtype)]
        if return_inverse:
            out.append(_tensor((np.cumsum(starts) - 1).astype(np.int64)))
        if return_counts:
            out.append(_tensor(np.diff(np.append(np.nonzero(starts)[0], len(s))).astype(np.int64)))
        return out[0] if len(out) == 1 else tuple(out)
    a = _host_numpy(x).reshape(-1)
    starts = np.concatenate([[True], a[1:] != a[:-1]]) if a.size else np.zeros(0, dtype=bool)
    values = _tensor(a[starts]).to(x.dtype)
    out = [values]
    if return_inverse:
        out.append(_tensor((np.cumsum(starts) - 1).astype(np.int64).reshape(tuple(x.shape))))
    if return_counts:
        out.append(_tensor(np.diff(np.append(np.nonzero(starts)[0], a.size)).astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


@aligned
def fmax(a, b):
    """maximum where a NaN loses to a number (torch.fmax)."""
    m = maximum(a, b)
    return _C._functional.where(isnan(a), b, _C._functional.where(isnan(b), a, m))


@aligned
def fmin(a, b):
    m = minimum(a, b)
    return _C._functional.where(isnan(a), b, _C._functional.where(isnan(b), a, m))


def deg2rad(x):
    return x * (np.pi / 180.0)


def rad2deg(x):
    return x * (180.0 / np.pi)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    out = base ** linspace(start, end, steps, dtype=_dtypes.float64)
    out = out.to(dtype or _dtypes.default_float())
    return out.requires_grad_(True) if requires_grad else out


def matrix_power(A, n):
    if n < 0:
        from .linalg import inv
        A, n = inv(A), -n
    result = None
    square = A
    while n:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if n:
            square = square @ square
    if result is None:  # A⁰ = I: torch's result still requires grad (a zero gradient)
        from ._tensor import with_zero_gradient
        eye = _tensor(np.broadcast_to(np.eye(A.shape[-1]), tuple(A.shape)).copy()).to(A.dtype)
        return with_zero_gradient(eye, A)
    return result


@_float32_under_autocast
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """exp(x) - t·x (log_input) or x - t·log(x + eps); full adds Stirling's t·log t - t + log(2πt)/2 where t > 1."""
    reduction = _legacy(size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        t = target  # (Stirling's term is differentiable in the target too, as torch's)
        safe = _C._functional.where(t > 1, t, _C._full([], 1.0, t.dtype))
        stirling = safe * safe.log() - safe + 0.5 * (2 * np.pi * safe).log()
        loss = loss + _C._functional.where(t > 1, stirling, _C._full([], 0.0, t.dtype))
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """(log(max(var, eps)) + (x - t)² / max(var, eps)) / 2 (+ log(2π) / 2 with full); var a float, of the input's
    shape, with its last dim missing (one variance per row), or broadcastable with one dim of size 1 (torch's
    rule); the clamp passes var's gradient through, as torch's."""
    if isinstance(var, builtins.float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = _C._full(list(input.shape), var, input.dtype)
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (input.ndim == var.ndim and
                  builtins.sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):  # torch's test, as is
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var + (var.detach().clamp(min=eps) - var.detach())  # max(var, eps), gradient 1 wrt var
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * np.log(2 * np.pi)
    return _reduce(loss, reduction)


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, dims):
    from .nn import _conv_ops, functional as F
    if isinstance(norm_type, (builtins.int, builtins.float)):
        if norm_type == 0:
            raise ValueError("norm_type must be a non-zero value, but got %s" % norm_type)
        if math.isinf(norm_type):  # torch's: the max of |x| over each window (inf), or its min (-inf)
            max_pool = getattr(F, "max_pool%dd" % dims)
            sign = 1 if norm_type > 0 else -1
            return sign * max_pool(sign * input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    pool = {1: _conv_ops.avg_pool1d, 2: _conv_ops.avg_pool2d, 3: _conv_ops.avg_pool3d}[dims]
    window = kernel_size ** dims if isinstance(kernel_size, builtins.int) else int(np.prod(kernel_size))
    out = pool(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * window).pow(1.0 / norm_type)  # torch's form (sign: odd norms)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(Σ over each window of x^p)^(1/p): torch.nn.functional.lp_pool1d."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


@_float32_under_autocast
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """Σ_{j != y} max(0, margin - x_y + x_j)^p / C per sample (weight[y] times it), torch's multi-class hinge."""
    reduction = _legacy(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    from .nn.functional import _no_weight_grad
    _no_weight_grad("multi_margin_loss", weight=weight)
    x = input if input.ndim == 2 else input.unsqueeze(0)
    y = target.reshape(-1, 1)
    classes = x.shape[1]
    picked = x.gather(1, y)
    hinge = (margin - picked + x).relu()
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight.detach()[target.reshape(-1)].reshape(-1, 1)
    others = 1.0 - _tensor(np.eye(classes, dtype=np.float32)[target.reshape(-1).numpy()]).to(x.dtype)
    loss = (hinge * others).sum(1) / classes
    return _reduce(loss if input.ndim == 2 else loss.reshape(()), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(y log σ(x) + (1 - y) log σ(-x)), weighted per class, averaged over the classes: one value per sample."""
    reduction = _legacy(size_average, reduce, reduction)
    from .nn.functional import logsigmoid
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.mean(-1), reduction)


FUNCTIONAL.update(poisson_nll_loss=poisson_nll_loss, gaussian_nll_loss=gaussian_nll_loss, lp_pool1d=lp_pool1d,
                  lp_pool2d=lp_pool2d, lp_pool3d=lp_pool3d, multi_margin_loss=multi_margin_loss,
                  multilabel_soft_margin_loss=multilabel_soft_margin_loss)
_BOTH = dict(amin=amin, addcmul=addcmul, addcdiv=addcdiv, nansum=nansum, nanmean=nanmean, tile=tile, diagonal=diagonal,
             diag_embed=diag_embed, cross=cross, dist=dist, rot90=rot90, aminmax=aminmax, cummax=cummax,
             cummin=cummin, mode=mode, unique_consecutive=unique_consecutive, fmax=fmax, fmin=fmin, deg2rad=deg2rad,
             rad2deg=rad2deg)
TORCH_FUNCTIONS.update(_BOTH, tensordot=tensordot, cartesian_prod=cartesian_prod, combinations=combinations,
                       logspace=logspace)
TENSOR_METHODS.update(_BOTH)


# ---- Tensor methods and functions the differential script found missing (second round) -------------------

def _rebound(self, result, count=True):
    """An in-place shape method (t_, unsqueeze_, ...): this Python tensor becomes the view, one version later
    (torch counts these as in-place writes; detach_ does not, count=False)."""
    version = self._version
    self._rebind_(result)
    if count:
        self._unsafe_set_version_counter(version + 1)
    return self


def _detach_(self):
    """Detaches in place (this Python tensor becomes the detached one); torch refuses it on a view."""
    if self._base is not None:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    return _rebound(self, self.detach(), count=False)


def _resize_(self, *size):
    """torch's resize_: the new shape, keeping the first elements in row-major order (new ones zero here)."""
    shape = [builtins.int(s) for s in (size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size)]
    if any(s < 0 for s in shape):  # (a negative product sliced from the end: resize_(-1) kept all but one)
        raise RuntimeError("Trying to create tensor with negative dimension %d: %s"
                           % (next(s for s in shape if s < 0), shape))
    n = builtins.int(np.prod(shape)) if shape else 1
    flat = self.detach().reshape(-1)
    kept = flat[:n] if flat.shape[0] >= n else _C._functional.cat(
        [flat, _C._full([n - flat.shape[0]], 0.0, self.dtype)], 0)
    return _rebound(self, kept.reshape(*shape).clone())


def _long_index(index, name):
    if index.dtype != _dtypes.int64:  # (int32 was taken, a float index raised numpy's errors)
        raise RuntimeError("%s(): Expected a long tensor for index, but got %s"
                           % (name, _torch_dtype_name(index.dtype)))


def _in_elements(self, index):
    flat = index.reshape(-1).numpy()
    n = self.numel()
    bad = flat[(flat < -n) | (flat >= n)]
    if bad.size:  # torch's IndexError for take / put_ (put_ wrapped and wrote anyway)
        raise IndexError("out of range: tried to access index %d on a tensor of %d elements." % (bad[0], n))
    return flat


def take(input, index):
    _long_index(index, "take")
    _in_elements(input, index)
    return input.reshape(-1)[index.reshape(-1)].reshape(*index.shape)


def _put_(self, index, source, accumulate=False):
    _long_index(index, "put_")
    if source.dtype != self.dtype:
        raise RuntimeError("put_(): self and source expected to have the same dtype, but got self.dtype = %s and "
                           "source.dtype = %s" % (_torch_dtype_name(self.dtype), _torch_dtype_name(source.dtype)))
    if source.numel() != index.numel():  # (a one-element source was broadcast to every index)
        raise IndexError("put_(): Expected source and index to have the same number of elements, but got "
                         "source.numel() = %d, index.numel() = %d" % (source.numel(), index.numel()))
    flat = _in_elements(self, index)
    flat_index = np.unravel_index(flat % builtins.max(self.numel(), 1), tuple(self.shape))
    return self.index_put_(tuple(_tensor(i) for i in flat_index), source.reshape(-1), accumulate)


@_widest_under_autocast
def index_copy(x, dim, index, source):
    if isinstance(index, _C.Tensor) and index.ndim == 0:  # a 0-d index is one index, as torch's
        index = index.reshape(1)
    d = wrap_dim(dim, x.ndim)
    if isinstance(index, _C.Tensor):
        _long_index(index, "index_copy_")
    if isinstance(source, _C.Tensor) and source.dtype != x.dtype:
        raise RuntimeError("index_copy_(): self and source expected to have the same dtype, but got (self) %s and "
                           "(source) %s" % (_torch_dtype_name(x.dtype), _torch_dtype_name(source.dtype)))
    size = x.shape[d] if x.ndim else 1
    values = index.reshape(-1).numpy() if isinstance(index, _C.Tensor) else np.asarray(index).reshape(-1)
    bad = values[(values < 0) | (values >= size)]
    if bad.size:  # (a negative index copied into the row from the end)
        raise IndexError("index_copy_(): index %d is out of bounds for dimension %d with size %d" % (bad[0], d, size))
    out = x.clone()
    key = (builtins.slice(None),) * wrap_dim(dim, x.ndim) + (index,)
    out[key] = source
    return out


def masked_scatter(x, mask, source):
    """x with the True positions of mask filled from source's elements in row-major order; x and mask broadcast
    together (the result takes the broadcast shape, as torch's out-of-place masked_scatter)."""
    if source.dtype != x.dtype:
        raise RuntimeError("masked_scatter: expected self and source to have same dtypes but got%s and %s"
                           % (_torch_dtype_name(x.dtype), _torch_dtype_name(source.dtype)))
    shape = _broadcast_shape(tuple(mask.shape), tuple(x.shape))
    m = mask.expand(*shape).numpy() if tuple(mask.shape) != shape else mask.numpy()
    count = builtins.int(m.sum())
    if count > source.numel():  # (it reported setitem's shape mismatch)
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out = x.expand(*shape).contiguous() if tuple(x.shape) != shape else x.clone()
    if count:
        out[_tensor(m)] = source.reshape(-1)[:count]
    return out


_TYPE_NAMES = {_dtypes.float32: "torch.FloatTensor", _dtypes.float64: "torch.DoubleTensor",
               _dtypes.float16: "torch.HalfTensor", _dtypes.bfloat16: "torch.BFloat16Tensor",
               _dtypes.int64: "torch.LongTensor", _dtypes.int32: "torch.IntTensor", _dtypes.bool: "torch.BoolTensor",
               _dtypes.int16: "torch.ShortTensor", _dtypes.int8: "torch.CharTensor", _dtypes.uint8: "torch.ByteTensor"}


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """torch's Tensor.type(): the legacy type name, or the cast to a dtype, a legacy type name
    ('torch.LongTensor') or a legacy tensor type (torch.LongTensor, whose dtype attribute names it)."""
    if dtype is None:
        return _TYPE_NAMES.get(self.dtype, str(self.dtype))
    if isinstance(dtype, str):
        from ._namespace_more import _TYPED
        module, _, name = dtype.rpartition(".")
        if module.endswith("cuda"):
            raise RuntimeError("Tensor.type(%r): tessel's Python face has no CUDA device "
                               "(tessel.cuda.is_available() is False)" % dtype)
        if module not in ("torch", "tessel") or name not in _TYPED:
            raise ValueError("invalid type: %r" % dtype)
        dtype = _TYPED[name]
    elif isinstance(dtype, type) and isinstance(getattr(dtype, "dtype", None), _C.dtype):
        dtype = dtype.dtype  # torch.LongTensor and its kin (tessel/_namespace_more.py)
    return self.to(dtype)


def _trapezoid_widths(y, x, dim):
    """The widths between consecutive samples along dim, as torch takes them from x: a 1-D x runs along y's dim
    (one value per sample), an N-D x is differenced along its own dim `dim` and broadcasts with y."""
    n = y.shape[dim]
    if x.dim() == 1:
        if x.shape[0] != n:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
        shape = [1] * y.dim()
        shape[dim] = n
        x = x.reshape(shape)
    m = x.shape[dim]
    return x.narrow(dim, 1, m - 1) - x.narrow(dim, 0, m - 1)


def _sample_pairs(y, dim):
    n = y.shape[dim]
    return y.narrow(dim, 1, n - 1) + y.narrow(dim, 0, n - 1)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """torch.trapezoid: the trapezoidal rule along dim, with torch's formulas (a constant spacing: (Σ y - (y_0 +
    y_n) / 2)·dx; widths from x: Σ dx·(y_i + y_i+1) / 2), so the values round as torch's; an empty dim gives 0."""
    dim = dim % builtins.max(y.dim(), 1)
    if y.shape[dim] == 0:
        return _C._full([s for i, s in enumerate(y.shape) if i != dim], 0.0, y.dtype)
    if x is None:
        spacing = 1.0 if dx is None else dx
        return (y.sum(dim) - (y.select(dim, 0) + y.select(dim, -1)) * 0.5) * spacing
    return (_trapezoid_widths(y, x, dim) * _sample_pairs(y, dim)).sum(dim) / 2.0


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """torch.cumulative_trapezoid: the running trapezoidal rule along dim (n - 1 values), dx / 2·(y_i + y_i+1)."""
    dim = dim % builtins.max(y.dim(), 1)
    if y.shape[dim] == 0:
        return y.narrow(dim, 0, 0)
    spacing = (1.0 if dx is None else dx) if x is None else _trapezoid_widths(y, x, dim)
    return (spacing / 2.0 * _sample_pairs(y, dim)).cumsum(dim)


def vander(x, N=None, increasing=False):
    """torch.vander: x⁰ is 1 for inf and NaN too (x·0 + 1 was NaN there)."""
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if n == 0:
        return x.unsqueeze(1)[:, :0]
    powers = range(n) if increasing else range(n - 1, -1, -1)
    return _C._functional.stack([x ** p if p else x.detach() ** 0 for p in powers], 1)


def block_diag(*tensors):
    mats = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    rows = builtins.sum(m.shape[0] for m in mats)
    cols = builtins.sum(m.shape[1] for m in mats)
    out, r, c = None, 0, 0
    for m in mats:
        padded = _C._functional.cat([_C._full([m.shape[0], c], 0.0, m.dtype), m,
                                     _C._full([m.shape[0], cols - c - m.shape[1]], 0.0, m.dtype)], 1)
        out = padded if out is None else _C._functional.cat([out, padded], 0)
        r, c = r + m.shape[0], c + m.shape[1]
    return out if out is not None else _C._full([0, 0], 0.0, _dtypes.float32)


def signbit(x):
    """True where the sign bit is set (-0.0 included)."""
    if not x.dtype.is_floating_point:
        return x < 0
    return _tensor(np.signbit(x.detach().float().numpy() if x.dtype in (_dtypes.bfloat16, _dtypes.float16)
                              else _host_numpy(x)))


def float_power(input, exponent):
    base = input.double() if hasattr(input, "double") else input
    exp = exponent.double() if hasattr(exponent, "double") else exponent
    return base ** exp


def true_divide(dividend, divisor):
    """torch.true_divide = torch.div: the quotient in the floating result type (bool / f16 is float16)."""
    from ._namespace import div
    return div(dividend, divisor)


@_honours_inplace
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Eval: leaky ReLU with slope (lower + upper) / 2; training: a slope drawn uniformly per element."""
    from ._tensor import rand_like
    if not training:
        slope = (lower + upper) / 2
    elif not input.is_distributed and input.device.type == "cpu":
        slope = _rrelu_slopes(input, lower, upper)
    else:
        slope = rand_like(input) * (upper - lower) + lower
    return _C._functional.where(input > 0, input, input * slope)  # at 0: the slope's gradient, as torch's


def _rrelu_slopes(input, lower, upper):
    """torch's CPU rrelu noise: in row-major order, each element <= 0 draws a double u (two host-stream words,
    tessel._host_random) and takes the slope lower + u·(upper - lower) in double from the bounds as the input's
    precision holds them (float32 below float64), rounded to the input's dtype; the others 1."""
    import numpy as np
    from ._host_random import host_doubles
    from ._tensor import tensor
    values = input.detach().contiguous().to(_C.dtype.float64).numpy().ravel()
    slopes = np.ones(values.shape)
    drawn = values <= 0
    bound = float if input.dtype == _C.dtype.float64 else (lambda v: float(np.float32(v)))
    slopes[drawn] = host_doubles(int(drawn.sum())) * (bound(upper) - bound(lower)) + bound(lower)
    return tensor(slopes.reshape(tuple(input.shape))).to(input.dtype)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """SELU's dropout: dropped units set to alpha', then an affine map keeping mean and variance; p = 1 gives
    zeros (torch's); eval and p = 0 give the input itself, inplace or not."""
    if not 0 <= p <= 1:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if not training or p == 0:
        return input
    return _alpha_dropout(input, p, inplace)


@_honours_inplace
def _alpha_dropout(input, p, inplace=False):
    from ._tensor import rand_like
    if p == 1:
        return input * 0.0
    if not input.is_distributed and input.device.type == "cpu":
        return torch_alpha_dropout(input, p, list(input.shape))
    alpha_p = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    keep = (rand_like(input) >= p).to(input.dtype)
    return (input * keep + alpha_p * (1 - keep)) * a + (-a * alpha_p * p)


def torch_alpha_dropout(input, p, noise_shape):
    """torch's CPU alpha dropout, draw for draw: noise = bernoulli_(1 - p) of noise_shape (input's, or [N, C, 1...]
    for the feature form) in input's dtype, b = (noise - 1)·α·a + α·a·p, out = input · (noise · a) + b."""
    from ._tensor import empty_like
    alpha = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    like = input.detach() if list(input.shape) == noise_shape else _C._empty(noise_shape, input.dtype)
    noise = _C._torch_random_(empty_like(like), "bernoulli", 1.0 - p, 0.0, None)
    b = noise.add(-1).mul_(alpha * a).add_(alpha * a * p)
    return input * noise.mul_(a) + b


@_float32_under_autocast
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha/size · Σ x² over `size` neighbouring channels)^beta (torch's padding: size//2 before,
    (size-1)//2 after)."""
    from .nn.functional import pad
    if input.dim() < 3:  # (torch's message, its source line's indentation included)
        raise ValueError("Expected 3D or higher dimensionality%sinput (got %d dimensions)" % (" " * 26, input.dim()))
    if input.numel() == 0:
        return input  # the object itself, as torch's
    sq = (input * input).unsqueeze(1)
    c = input.shape[1]
    padded = pad(sq.reshape(sq.shape[0], 1, c, -1), (0, 0, size // 2, (size - 1) // 2))
    windows = _C._functional.stack([padded[:, :, i:i + c] for i in range(size)], 0).sum(0)
    div = (windows.reshape(*sq.shape).squeeze(1) * (alpha / size) + k) ** beta
    return input / div


def _is_nonzero(self):
    if self.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with %s values is ambiguous"
                           % ("no" if self.numel() == 0 else "more than one"))
    return bool(self.reshape(-1)[0].item())


_INPLACE_SHAPES = dict(
    t_=lambda self: _rebound(self, self.t()), unsqueeze_=lambda self, dim: _rebound(self, self.unsqueeze(dim)),
    squeeze_=lambda self, dim=None: _rebound(self, self.squeeze(dim)),
    transpose_=lambda self, dim0, dim1: _rebound(self, self.transpose(dim0, dim1)),
    as_strided_=lambda self, size, stride, storage_offset=None: _rebound(
        self, self.as_strided(size, stride, storage_offset)),
    resize_=_resize_, put_=_put_, detach_=_detach_)
TENSOR_METHODS.update(_INPLACE_SHAPES, take=take, index_copy=index_copy, masked_scatter=masked_scatter, type=_type,
                      itemsize=property(lambda self: self.element_size()), ndimension=lambda self: self.ndim,
                      is_nonzero=_is_nonzero,
                      signbit=signbit, float_power=float_power, true_divide=true_divide)
TORCH_FUNCTIONS.update(take=take, index_copy=index_copy, masked_scatter=masked_scatter, trapezoid=trapezoid,
                       trapz=trapezoid, cumulative_trapezoid=cumulative_trapezoid, vander=vander, block_diag=block_diag,
                       signbit=signbit, float_power=float_power, true_divide=true_divide)
FUNCTIONAL.update(rrelu=rrelu, alpha_dropout=alpha_dropout, local_response_norm=local_response_norm)


# ---- third round: torch.nn.functional's in-place activations, pdist; linalg.vecdot / multi_dot / cond /
# solve_triangular -----------------------------------------------------------------------------------------

def _in_place_activation(name, fn):
    """F.<name>_(x, ...): x holds fn(x, ...) (written in place, or under autograd repointed where nothing else
    shares x, as the activations' inplace=True: tessel/_inplace.apply) and is returned."""
    def activation_(input, *args, **kwargs):
        from . import _inplace
        kwargs.pop("inplace", None)
        return _inplace.apply(input, lambda t: fn(t, *args, **kwargs), name + "_")
    activation_.__name__ = name + "_"
    return activation_


def pdist(input, p=2):
    """The p-norm distance of every pair of rows i < j of input [N, M], in row-major pair order."""
    if input.ndim != 2:
        raise RuntimeError("pdist only supports 2D tensors, got: %dD" % input.ndim)
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    rows, cols = np.triu_indices(n, 1)
    diff = input[_tensor(rows.astype(np.int64))] - input[_tensor(cols.astype(np.int64))]
    if p == 0:  # a count of the differing entries: torch's result still requires grad (a zero gradient)
        from ._tensor import with_zero_gradient
        return with_zero_gradient(diff.norm(0, -1), diff.sum(-1))
    return diff.norm(p, -1)


def vecdot(x, y, *, dim=-1):
    return (x * y).sum(dim)


def multi_dot(tensors):
    """A product of matrices, the first (a vector: a row) and the last (a vector: a column) possibly 1-D."""
    mats = list(tensors)
    _checks().multi_dot_inputs(mats)
    first_vector, last_vector = mats[0].ndim == 1, mats[-1].ndim == 1
    if first_vector:
        mats[0] = mats[0].unsqueeze(0)
    if last_vector:
        mats[-1] = mats[-1].unsqueeze(1)
    out = mats[0]
    for m in mats[1:]:
        out = out @ m
    if first_vector:
        out = out.squeeze(0)
    if last_vector:
        out = out.squeeze(-1)
    return out


def cond(A, p=None):
    """torch.linalg.cond: σ_max / σ_min for p None or 2 (σ_min / σ_max for -2), (Σσ)(Σ1/σ) for 'nuc', else
    ‖A‖_p ‖A⁻¹‖_p (square A; inf where A is singular); differentiable through svdvals / inv."""
    from . import linalg
    _checks().cond_inputs(A, p)
    if p is None or p in (2, -2):
        s = linalg.svdvals(A)
        big, small = s.amax(-1), -(-s).amax(-1)
        return big / small if p != -2 else small / big
    if p == "nuc":  # (Σσ)(Σ1/σ), torch's: finite for a singular matrix whose σ_min rounds above 0
        s = linalg.svdvals(A)
        return s.sum(-1) * (1.0 / s).sum(-1)
    inverse, info = linalg.inv_ex(A)  # a singular matrix's condition number is inf (torch's), not an error
    singular = info > 0
    inverse = _C._functional.where(singular.unsqueeze(-1).unsqueeze(-1), _C._full([], 0.0, inverse.dtype), inverse)
    value = linalg.matrix_norm(A, p) * linalg.matrix_norm(inverse, p)
    return _C._functional.where(singular, _C._full([], float("inf"), value.dtype), value)


def _solve_triangular_host(A, B, upper, left, unitriangular):
    from ._linalg_lu import _triangular
    from .linalg import _back, _host
    a, b = _host(A, "solve_triangular"), _host(B, "solve_triangular")
    if left:  # substitution as trsm: a zero on the diagonal gives inf / NaN (torch's), not a singular-matrix error
        return _back(_triangular(a, b, lower=not upper, unit=unitriangular), A)
    at, bt = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
    return _back(np.swapaxes(_triangular(at, bt, lower=upper, unit=unitriangular), -1, -2), A)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with A X = B (left) or X A = B, A triangular (numpy's solve on the host, as tessel's other solves;
    differentiable through tessel/_linalg_grad.py)."""
    from .linalg import _needs_grad
    _checks().solve_triangular_inputs(A, B, left)
    if _needs_grad(A, B):
        from ._linalg_grad import SolveTriangular
        return SolveTriangular.apply(A, B, upper, left, unitriangular)
    return _solve_triangular_host(A, B, upper, left, unitriangular)


def _checks():
    from . import _linalg_checks
    return _linalg_checks


def _register_third_round():
    from . import _extra
    for name in ("elu", "leaky_relu", "hardtanh", "threshold", "selu", "celu"):
        FUNCTIONAL[name + "_"] = _in_place_activation(name, getattr(_extra, name))
    FUNCTIONAL["rrelu_"] = _in_place_activation("rrelu", rrelu)
    FUNCTIONAL["pdist"] = pdist


_register_third_round()
