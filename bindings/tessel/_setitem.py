"""t[idx] = value and index_put_ (split from _tensor.py, which indexes): writes through the view of a basic
subscript; an advanced one writes the positions self[idx] selects, recorded by autograd where the value or t
requires grad; DTensors through replicated masks. Importing it installs Tensor.__setitem__, index_put_ and
index_put.
"""
import builtins
import math

import numpy as np

from . import _C
from . import _dtypes
from ._subscript import (_as_plain, _check_index_put_dtype, _index_array, _is_advanced, _mask_mismatch,
                         _torch_dtype_name, _torch_key)
from ._tensor import _basic_index, _gather_rows, _getitem, _host_numpy, _internal_index, tensor

Tensor = _C.Tensor
# the C++ fill_ and masked_fill: this module is imported before tessel/_inplace.py wraps fill_ with autograd's
# checks and tessel/_logical.py masked_fill with torch's mask errors
_fill_cpp, _masked_fill_cpp = Tensor.fill_, Tensor.masked_fill
_BOOL = _dtypes.bool


def _rows_of(self, idx):
    """(k, positions, shape): the index along the first k dims as flat row positions (an int index: k = 1) and
    the shape its positions take in the indexing result."""
    arr = _index_array(idx)
    if self.ndim == 0:
        raise IndexError("too many indices for tensor of dimension 0")
    if arr.dtype == np.bool_:
        mismatch = _mask_mismatch(arr.shape, self.shape, 0)
        if mismatch is not None:
            raise mismatch
        rows = np.flatnonzero(arr.reshape(-1))
        return arr.ndim, rows, rows.shape
    if arr.dtype not in (np.int64, np.int32):  # (int8 / int16 were taken; torch refuses them)
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    n = self.shape[0]
    rows = arr.reshape(-1).astype(np.int64)
    if rows.size and (rows.min() < -n or rows.max() >= n):
        raise IndexError("index %d is out of bounds for dimension 0 with size %d"
                         % (rows[(rows < -n) | (rows >= n)][0], n))
    return 1, np.where(rows < 0, rows + n, rows), arr.shape


def _advanced_setitem(self, idx, value):
    """t[int_tensor] = v, t[mask] = v: a scalar through one masked_fill of the rows; a tensor row by row."""
    k, rows, index_shape = _rows_of(self, idx)
    lead = self.shape[:k]
    count = 1
    for d in lead:
        count *= d
    if not isinstance(value, Tensor):
        mask = np.zeros(count, dtype=np.bool_)
        mask[rows] = True
        m = _C._from_numpy(mask.reshape(tuple(lead) + (1,) * (self.ndim - k))).expand(*self.shape)
        self.copy_(self.masked_fill(m, builtins.float(value)))
        return
    if k > 1 and not self.is_contiguous():  # (self.view of a transposed self raised; torch writes through)
        return self.copy_(_written(self, idx, value))
    flat = self if k == 1 else self.view(count, *self.shape[k:])  # a view: writes land in self
    rows_value = _as_indexing_result(value, index_shape + tuple(self.shape[k:]))
    rows_value = rows_value.reshape(builtins.int(rows.size), *self.shape[k:])
    for j, r in enumerate(rows.tolist()):
        flat.select(0, r).copy_(rows_value.select(0, j))


def _as_indexing_result(value, shape, strip=True):
    """value expanded to the advanced indexing result's shape, as torch's setitem: its leading size-1 dims
    dropped first (strip; index_put_ keeps them), and torch's error where it does not broadcast (a value of the
    right size but another shape was written flattened, or raised expand's error)."""
    shape = tuple(builtins.int(d) for d in shape)
    while strip and value.ndim > len(shape) and value.shape[0] == 1:
        value = value.squeeze(0)
    try:
        fits = np.broadcast_shapes(tuple(value.shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError("shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape "
                           "%s" % (list(value.shape), list(shape)))
    return value.expand(*shape)


def _recorded_setitem(self, idx, value):
    """t[idx] = value where autograd must see it (a value that requires grad, or t itself a result that does),
    recorded as torch records it (tessel/_inplace.py). Basic subscripts (ints, slices, None, ...) write through
    the view t[idx], so t's grad_fn becomes CopySlices; advanced ones write where(written positions, value placed
    by an index-add, t) into t. torch's `outputs = zeros(T, B, V); outputs[t] = step_output` loop is the common
    case."""
    from . import _inplace
    if not self.dtype.is_floating_point:
        raise RuntimeError("t[...] = value with a value that requires grad into a %s tensor: autograd records "
                           "floating-point tensors only" % self.dtype)
    plain = tuple(_as_plain(i) for i in idx) if isinstance(idx, tuple) else _as_plain(idx)
    if not builtins.any(_is_advanced(i) for i in (plain if isinstance(plain, tuple) else (plain,))):
        return _write_view(_getitem(self, plain), value)  # copy_ / fill_ record the write (tessel/_inplace.py)
    _inplace.record(self, "t[...] = value", lambda x: _written(x, plain, value))


def _positions(self, idx):
    """The flat (row-major) positions self[idx] selects, laid out as the result: tessel's own indexing of an
    arange. (NumPy's indexing of it put t[0, :, idx]'s dims in another order: numpy counts the int as one of the
    advanced indices, now separated by the slice, so their dim went first; torch selects with the int first.)"""
    host = lambda i: i.full_tensor() if isinstance(i, Tensor) and i.is_distributed else i  # noqa: E731
    table = _C._from_numpy(np.arange(self.numel(), dtype=np.int64).reshape(tuple(self.shape)))
    return _getitem(table, tuple(host(i) for i in idx) if isinstance(idx, tuple) else host(idx)).numpy()


def index_add_rows(rows, index, num_rows):
    """_C._functional._index_add_rows (rows [n, ...] summed into num_rows rows at index) for any dtype:
    floating rows in C++ (differentiable); integer and bool rows on the host with numpy's add.at (exact; such
    tensors carry no gradient). The C++ kernel takes floating rows only, so integer index_put_ / index_add /
    x[idx] = int_tensor raised "embedding_backward: expected a floating dtype"."""
    if rows.dtype.is_floating_point:
        return _C._functional._index_add_rows(rows, index, num_rows)
    r = rows.numpy()
    out = np.zeros((builtins.int(num_rows),) + r.shape[1:], dtype=r.dtype)
    np.add.at(out, index.numpy(), r)
    return _C._from_numpy(out)


ROUNDED_PER_ADD = (_dtypes.bfloat16.value, _dtypes.float16.value)


def rounded_in_order(total, base, target, values, alpha=1):
    """total (base with values added at the flat positions target, summed in float32: differentiable) with the
    values torch gives a 16-bit float base in index_add / index_put_(accumulate=True): one add at a time in index
    order, each sum rounded to base's dtype (bfloat16 256 + 1 + 1 + 1 stays 256 there; the float32 sum gave 260).
    Each round adds every position's next value at once."""
    out = _host_numpy(base).astype(np.float32).reshape(-1)
    vals = _host_numpy(values).astype(np.float32).reshape(-1) * np.float32(alpha)
    order = np.argsort(target, kind="stable")  # each position's values, in index order
    sorted_target = target[order]
    starts = np.flatnonzero(np.r_[True, sorted_target[1:] != sorted_target[:-1]])
    rank = np.arange(target.size) - np.repeat(starts, np.diff(np.r_[starts, target.size]))
    for k in range(builtins.int(rank.max()) + 1 if rank.size else 0):
        picked = order[rank == k]
        added = out[target[picked]] + vals[picked]
        out[target[picked]] = _host_numpy(_C._from_numpy(added).to(base.dtype))
    exact = _C._from_numpy(out.reshape(tuple(total.shape))).to(base.dtype)
    return exact + (total - total.detach()) if total.requires_grad else exact


def _every_writer_gradient(placed, rows, positions, numel):
    """placed's values (each position's last write) with torch's gradient for repeated writes: every element
    written to a position gets that position's gradient, the overwritten ones too (torch's backward gathers the
    output gradient at each index; only the last write's element got it)."""
    every = index_add_rows(rows.contiguous() if not rows.is_contiguous() else rows.clone(), tensor(positions), numel)
    return placed.detach() + (every - every.detach())


def _written(self, idx, value, strip=True):
    """self with value written at self[idx], out of place: where(written positions, value placed by an
    index-add, self). The positions are self[idx]'s (_positions); a position listed twice takes the last value, as
    torch's CPU writes."""
    numel = self.numel()
    positions = _positions(self, idx)
    value = value if isinstance(value, Tensor) else _C._full([], builtins.float(value), self.dtype)
    rows = _as_indexing_result(value.to(self.dtype), positions.shape, strip).reshape(-1, 1)
    flat = positions.reshape(-1)
    every = None
    if np.unique(flat).size != flat.size:  # keep each position's last write only
        every = (rows, flat)
        _, first_from_end = np.unique(flat[::-1], return_index=True)
        keep = np.sort(flat.size - 1 - first_from_end)
        flat, rows = flat[keep], _gather_rows(rows, keep)
    # a fresh copy: the index-add saves it for backward, and value may share memory with self (written next)
    placed = index_add_rows(rows.contiguous() if not rows.is_contiguous() else rows.clone(), tensor(flat), numel)
    if every is not None and rows.requires_grad and _C.is_grad_enabled():
        placed = _every_writer_gradient(placed, *every, numel)
    mask = np.zeros(numel, dtype=np.bool_)
    mask[flat] = True
    return _C._functional.where(tensor(mask), placed.reshape(-1), self.reshape(-1)).reshape(*self.shape)


def _plain_value(self, value):
    """A setitem value for the DTensor self as a plain tensor holding the whole value (the same on every rank)."""
    if not isinstance(value, Tensor):
        return _C._full([], builtins.float(value), self.dtype)
    if value.is_distributed:
        return value.full_tensor()  # differentiable: the value's gradient is its piece of the written one
    from ._dtensor_compose import refused_plain
    if refused_plain(value):
        raise _C.InvalidArgumentError(
            "t[...] = value: t is a DTensor of shape %s (%s) but value is a plain tensor of shape %s; distribute it "
            "(distribute_tensor / DTensor.from_local) or assign inside implicit_replication(), as torch requires"
            % (list(self.shape), "[%s]" % ", ".join(map(str, self.placements)), list(value.shape)))
    return value


def _dtensor_setitem(self, idx, value):
    """t[idx] = value for a DTensor t: t becomes where(mask, placed, t), the mask and the placed value built as
    replicated tensors of t's shape, so every rank writes exactly the global positions its piece holds. (The
    view t[idx] of a sharded dim is a redistributed copy, so writing through it would change nothing: torch
    2.15 loses such writes silently.) A bool DTensor mask of t's shape with a scalar value stays distributed."""
    from .distributed.tensor import DTensor, Replicate
    scalar = not isinstance(value, Tensor) or (value.ndim == 0 and not value.is_distributed)
    if scalar and isinstance(idx, Tensor) and idx.is_distributed and idx.dtype == _dtypes.bool and \
            idx.shape == self.shape:
        v = _plain_value(self, value).to(self.dtype)
        compute = lambda x: _C._functional.where(idx, v, x)  # noqa: E731
    else:
        host = lambda i: i.full_tensor() if isinstance(i, Tensor) and i.is_distributed else i  # noqa: E731
        plain = tuple(host(i) for i in idx) if isinstance(idx, tuple) else host(idx)
        mesh = self.device_mesh
        rep = [Replicate()] * mesh.ndim
        written = np.zeros(self.numel(), dtype=np.bool_)
        written[_positions(self, plain).reshape(-1)] = True
        mask = tensor(written.reshape(tuple(self.shape)))
        placed = _C._full(list(self.shape), 0.0, self.dtype)
        placed[plain] = _plain_value(self, value).to(self.dtype)
        mask_d = DTensor.from_local(mask, mesh, rep, run_check=False)
        placed_d = DTensor.from_local(placed, mesh, rep, run_check=False)
        compute = lambda x: _C._functional.where(mask_d, placed_d, x)  # noqa: E731
    if _C.is_grad_enabled() and (self.requires_grad or (isinstance(value, Tensor) and value.requires_grad)):
        from . import _inplace
        return _inplace.record(self, "t[...] = value", compute)
    with _C._GradMode(False):
        self.copy_(compute(self))


def _setitem(self, idx, value):
    """t[idx] = value: writes through the view t[idx]; where autograd must record the write (grad mode on and
    the value or t requiring grad) it is _recorded_setitem; an integer or boolean tensor index along dim 0
    writes the selected rows. DTensors: _dtensor_setitem."""
    grad = _C.is_grad_enabled()
    recorded = grad and (self.requires_grad or (isinstance(value, Tensor) and value.requires_grad))
    if not isinstance(idx, (Tensor, list)) and not recorded and not self.is_distributed:
        view = _basic_index(self, idx)  # ints / slices / None / ...: the view in one C++ call (None for the rest)
        if view is not None:
            # nothing to record, and (grad off, or self no view) no no-grad view of a base that requires grad
            # for the recording fill_ to refuse: the C++ fill_ itself (the wrapper's checks cost ~3 us)
            raw = not grad or self._base is None
            return _write_view(view, value, _fill_cpp if raw else _fill_recorded)
    if idx.__class__ is Tensor and (value.__class__ is builtins.float or value.__class__ is builtins.int) and \
            not recorded and idx.dtype is _BOOL and not self.is_distributed and not idx.is_distributed and \
            self.ndim and idx.shape == self.shape:
        # t[mask] = number, the mask of t's shape: what _advanced_setitem computes, without its numpy round trip
        # of the mask (16 us against torch's 2)
        self.copy_(_masked_fill_cpp(self, idx, builtins.float(value)))
        return
    if isinstance(idx, Tensor) and idx.dtype == _dtypes.uint8 and not isinstance(value, Tensor):
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype unsigned char")
    if isinstance(idx, (list, tuple, Tensor)):
        idx = _torch_key(idx)
    if isinstance(value, Tensor) and value.dtype != self.dtype:
        _check_index_put_dtype(self, idx, value)
    if self.is_distributed:
        return _dtensor_setitem(self, idx, value)
    if recorded:
        return _recorded_setitem(self, idx, value)
    if isinstance(idx, Tensor) and idx.ndim == 0 and not idx.dtype.is_floating_point and idx.dtype != _dtypes.bool:
        idx = idx.item()
    if isinstance(idx, (Tensor, list, np.ndarray)):
        return _advanced_setitem(self, idx, value)
    if isinstance(idx, tuple) and builtins.any(_is_advanced(_as_plain(i)) for i in idx):
        # x[rows, cols] = v, x[:, idx] = v: the indexed elements of self itself (x[...] of such a subscript is a
        # copy, so writing through it would change nothing)
        with _C._GradMode(False):
            self.copy_(_written(self, tuple(_as_plain(i) for i in idx), value))
        return
    _write_view(_getitem(self, idx), value)


# by dtype.value (a dict of dtypes built per call cost ~1.5 us of pybind hashing and ==)
_FILL_LIMITS = {_dtypes.float16.value: 65520.0, _dtypes.float32.value: 3.4028235677973366e38}


def _fill_recorded(view, v):
    return view.fill_(v)


def _write_view(view, value, fill=_fill_recorded):
    """view[...] = value: copy_ of a tensor value (torch drops the value's leading ones first), fill(view, v) of
    a number; both record the write under autograd (fill: the recording fill_ unless the caller knows better)."""
    if not isinstance(value, Tensor):
        v = builtins.float(value)
        limit = _FILL_LIMITS.get(view.dtype.value)
        if limit is not None and builtins.abs(v) >= limit:  # torch's setitem rounds a float past the dtype's range
            v = math.copysign(math.inf, v)  # to inf (fill_ and full raise)
        return fill(view, v)
    while value.ndim > view.ndim and value.shape[0] == 1:
        value = value.squeeze(0)
    _check_no_partial_overlap(view, value)
    return view.copy_(value)


def _check_no_partial_overlap(view, value):
    """torch's copy_ refuses a value that shares part of the written view's memory (x[1:] = x[:-1] wrote
    [0, 0, 1, 2, 3]: each element read after the one before was written); the same memory in the same layout
    is fine, and strided tensors with gaps are too hard to tell, as there. (view is never a DTensor here:
    _dtensor_setitem writes those.) About 0.8 us per write, most of it in the four calls of the quick reject."""
    n = view.numel()
    if value.numel() != n or not n:
        return  # (a broadcast value reads some elements more than once: too hard to tell there)
    a, b = view.data_ptr(), value.data_ptr()
    if builtins.abs(a - b) >= n * 8 or value.is_distributed:
        return  # far apart even for 8-byte elements (element_size costs more than the rest of this check)
    a_end, b_end = a + n * view.element_size(), b + n * value.element_size()
    if not (a < b_end and b < a_end):
        return
    if a == b and a_end == b_end and tuple(view.stride()) == tuple(value.stride()):
        return
    if _dense(view) and _dense(value):
        raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor refer "
                           "to a single memory location. Please clone() the tensor before performing the operation.")


def _dense(t):
    """torch's non-overlapping and dense: the strides a permutation of contiguous ones (size-1 dims aside)."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


Tensor.__setitem__ = _setitem


def _index_put_(self, indices, values, accumulate=False):
    """torch's Tensor.index_put_: self[indices] = values (a tuple of index tensors, one per leading dim), or
    with accumulate=True self[indices] += values with repeated positions summed; recorded by autograd as the
    other in-place methods (tessel/_inplace.py)."""
    from . import _inplace
    idx = tuple(indices)
    for j, i in enumerate(idx):
        if not isinstance(i, Tensor):  # (a slice or None was read as a subscript entry)
            raise TypeError("expected Tensor as element %d in argument 0, but got %s" % (j, type(i).__name__))
    if isinstance(values, Tensor) and values.dtype != self.dtype:
        raise RuntimeError("Index put requires the source and destination dtypes match, got %s for the destination "
                           "and %s for the source." % (_torch_dtype_name(self.dtype), _torch_dtype_name(values.dtype)))
    if not accumulate:
        if isinstance(values, Tensor) and values.ndim and values.shape[0] == 1:  # unlike setitem, no leading 1 dropped
            _as_indexing_result(values, _positions(self, idx).shape, strip=False)
        self[idx] = values
        return self
    values = values if isinstance(values, Tensor) else _C._full([], builtins.float(values), self.dtype)
    recorded = _C.is_grad_enabled() and (self.requires_grad or values.requires_grad)
    positions = _positions(self, idx)
    if self.is_distributed and not values.is_distributed:  # a number or 0-d value: replicated on self's mesh
        values = _C.from_local(values, self.device_mesh, [_C.Replicate()] * self.device_mesh.ndim,
                               list(values.shape), None, False)
    rows = _as_indexing_result(values.to(self.dtype), positions.shape, strip=False).reshape(-1, 1).contiguous()
    where = _internal_index(rows, tensor(positions.reshape(-1)))  # replicated next to DTensor rows
    scattered = index_add_rows(rows, where, self.numel()).reshape(*self.shape)
    compute = lambda x: x + scattered  # noqa: E731
    if self.dtype.value in ROUNDED_PER_ADD and not self.is_distributed:
        compute = lambda x: rounded_in_order(x + scattered, x, positions.reshape(-1), rows)  # noqa: E731
    if recorded:
        return _inplace.record(self, "index_put_", compute)
    added = compute(self)
    with _C._GradMode(False):
        return self.copy_(added)


def _index_put(self, indices, values, accumulate=False):
    return _index_put_(self.clone(), indices, values, accumulate)


Tensor.index_put_ = _index_put_
Tensor.index_put = _index_put
