"""tessel.Tensor's Python-side conveniences and the creation functions, with torch's signatures.

Every function here only converts Python arguments (varargs shapes, Python scalars, index tuples) and
calls one bound op of ``tessel._C``; the computing happens in C++ with the GIL released.

    x = tessel.randn(2, 3, requires_grad=True)
    y = (x[:, 1:] * 2).sum()
    y.backward(); x.grad.numpy()
"""
import builtins
import functools
import math
import os
import sys
import warnings

import numpy as np

from . import _C
from . import _dtypes
from ._device import check_cpu, factory_device
from ._host_random import exponential_values, host_int64, host_ints  # noqa: F401 (host_*: re-exported)
from ._dtensor_like import (_contiguous_strides, _distributed_like, _indices_like,  # noqa: F401
                            _internal_index, _like_placements, _on_pieces, _random_like, _whole_rows)
from ._tensor_data import (_holds_numpy_float64, _holds_tensor, _plain_numbers, _tensors_as_scalars, checked_numbers,
                           complex_tensor, dtype_of_scalar)
from ._subscript import (_as_plain, _index_array, _is_advanced, _is_zero_d_bool, _mask_mismatch,  # noqa: F401
                         _torch_dtype_name, _torch_key)

Tensor = _C.Tensor


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return [builtins.int(s) for s in size]


def _size_arg(size_args, size, name):
    """A factory's shape as positional sizes (zeros(2, 3), zeros((2, 3))) or torch's size= keyword (zeros(size=(2,
    3))), as the tuple _shape reads."""
    if size is None:
        return size_args
    if size_args:
        raise TypeError("%s() received an invalid combination of arguments: got both positional sizes and size=" % name)
    return (size,)


_default_float = _dtypes.default_float
_Dtype = _C.dtype  # tessel's own dtypes (the complex ones are tessel._complex.ComplexDType)


def _plain_factory(dtype, device):
    """Whether a factory call needs none of the general path (the common case, checked first): no device
    (factory_device(None) is a no-op context), no dtype or one of _C's (never complex)."""
    return device is None and (dtype is None or type(dtype) is _Dtype)


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def _complex_full(size, value, dtype, requires_grad):
    """zeros / ones / full / empty with torch.complex64 / complex128 (tessel/_complex.py): zero-filled parts."""
    from ._complex import full as complex_full
    out = complex_full(size, value, dtype)
    return out.requires_grad_(True) if requires_grad else out


def empty(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size, 'empty')
    if _plain_factory(dtype, device):
        t = _C._empty(_shape(size), dtype or _default_float())
        return t.requires_grad_(True) if requires_grad else t
    with factory_device(device, "empty"):  # "meta": built without writing values
        if getattr(dtype, "is_complex", False):
            return _complex_full(_shape(size), 0.0, dtype, requires_grad)
        return _finish(_C._empty(_shape(size), dtype or _dtypes.default_float()), requires_grad)


def zeros(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size, 'zeros')
    if _plain_factory(dtype, device):
        t = _C._full(_shape(size), 0.0, dtype or _default_float())
        return t.requires_grad_(True) if requires_grad else t
    with factory_device(device, "zeros"):  # "meta": built without writing values
        if getattr(dtype, "is_complex", False):
            return _complex_full(_shape(size), 0.0, dtype, requires_grad)
        return _finish(_C._full(_shape(size), 0.0, dtype or _dtypes.default_float()), requires_grad)


def ones(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size, 'ones')
    if _plain_factory(dtype, device):
        t = _C._full(_shape(size), 1.0, dtype or _default_float())
        return t.requires_grad_(True) if requires_grad else t
    with factory_device(device, "ones"):  # "meta": built without writing values
        if getattr(dtype, "is_complex", False):
            return _complex_full(_shape(size), 1.0, dtype, requires_grad)
        return _finish(_C._full(_shape(size), 1.0, dtype or _dtypes.default_float()), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    if _plain_factory(dtype, device) and type(fill_value) is builtins.float:
        # fast path: a Python float (never beyond the int64 branch below), checked as below
        dtype = dtype or _default_float()
        _C._check_number_fits(fill_value, dtype)
        return _finish(_C._full(_shape((size,)), fill_value, dtype), requires_grad)
    with factory_device(device, "full"):  # "meta": built without writing values
        if isinstance(fill_value, Tensor):  # torch: a 0-d tensor is the number it holds (int64 for integers)
            if fill_value.dim() or fill_value.requires_grad:
                raise TypeError("full(): argument 'fill_value' (position 2) must be Number, not Tensor")
            fill_value = fill_value.item()
        dtype = dtype or dtype_of_scalar(fill_value)
        if getattr(dtype, "is_complex", False):
            return _complex_full(_shape((size,)), fill_value, dtype, requires_grad)
        if dtype == _dtypes.int64 and isinstance(fill_value, builtins.int) and builtins.abs(fill_value) > 2 ** 53:
            # exact beyond 2^53 (the C++ fill takes a double)
            return _finish(_C._from_numpy(np.full(_shape((size,)), fill_value, dtype=np.int64)), requires_grad)
        if not isinstance(fill_value, builtins.bool):
            _C._check_number_fits(builtins.float(fill_value), dtype)  # torch's checked conversion (300 for uint8)
        return _finish(_C._full(_shape((size,)), builtins.float(fill_value), dtype), requires_grad)


def zeros_like(t, *, dtype=None, device=None, requires_grad=False):
    if device is None and dtype is None and type(t) is Tensor and not t.is_distributed:  # fast path: as below
        return _finish(_C._full(list(t.shape), 0.0, t.dtype), requires_grad)
    check_cpu(device, "zeros_like")
    if t.is_distributed:
        return _distributed_like(t, lambda shape, dt: zeros(shape, dtype=dt), dtype, requires_grad)
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t, *, dtype=None, device=None, requires_grad=False):
    if device is None and dtype is None and type(t) is Tensor and not t.is_distributed:  # fast path: as below
        return _finish(_C._full(list(t.shape), 1.0, t.dtype), requires_grad)
    check_cpu(device, "ones_like")
    if t.is_distributed:
        return _distributed_like(t, lambda shape, dt: ones(shape, dtype=dt), dtype, requires_grad)
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t, fill_value, *, dtype=None, device=None, requires_grad=False):
    check_cpu(device, "full_like")
    if t.is_distributed:
        return _distributed_like(t, lambda shape, dt: full(shape, fill_value, dtype=dt), dtype, requires_grad)
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def new_filled(x, shape, value, dtype=None, requires_grad=False):
    """Tensor.new_zeros / new_ones / new_full / new_empty: x's dtype by default; on a DTensor, torch's
    new_factory_strategy: x's placements when the shape is x's (Partial made Replicate), else replicated."""
    shape = [builtins.int(s) for s in shape]
    if not x.is_distributed:
        return _finish(_C._full(shape, builtins.float(value), dtype or x.dtype), requires_grad)
    if shape == list(x.shape):
        return _distributed_like(x, lambda sh, dt: _C._full(sh, builtins.float(value), dt), dtype, requires_grad)
    out = _C.from_local(_C._full(shape, builtins.float(value), dtype or x.dtype), x.device_mesh,
                        [_C.Replicate()] * x.device_mesh.ndim, shape, None, False)
    return _finish(out, requires_grad)


def arange(start=None, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if device is not None:  # "meta" builds without values (torchtitan's RoPE: device=freqs.device); "cpu" wins
        with factory_device(device, "arange"):  # over an enclosing meta block, as torch's explicit device does
            return arange(start, end, step, dtype=dtype, requires_grad=requires_grad)
    if start is None:  # arange(end=n)
        if end is None:
            raise TypeError("arange() missing 1 required positional argument: 'end'")
        start = 0
    elif end is None:
        start, end = 0, start
    if type(start) is builtins.int and type(end) is builtins.int and type(step) is builtins.int:
        ints = True  # fast path (arange(n)): nothing to convert
    else:
        # 0-d tensors and numpy numbers count as the Python numbers they hold (arange(lengths.max()) is int64)
        start, end, step = (v.item() if isinstance(v, (Tensor, np.generic)) else v for v in (start, end, step))
        ints = all(isinstance(v, builtins.int) for v in (start, end, step))
    if dtype is None:
        dtype = _dtypes.int64 if ints else _dtypes.default_float()
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if not ints and not dtype.is_floating_point:  # torch: the length from the floats, the values in the integer
        n = builtins.max(0, math.ceil((end - start) / step))  # dtype (start and step truncated)
        return _finish(builtins.int(start) + _C._arange(0.0, builtins.float(n), 1.0, dtype) * builtins.int(step),
                       requires_grad)
    if ints and dtype == _dtypes.int64 and builtins.max(builtins.abs(start), builtins.abs(end)) > 2 ** 53:
        return _finish(_C._from_numpy(np.arange(start, end, step, dtype=np.int64)), requires_grad)
    return _finish(_C._arange(builtins.float(start), builtins.float(end), builtins.float(step), dtype), requires_grad)


def _float_draw(dtype, kernel):
    """torch: rand / randn / normal_ / uniform_ have no integer or bool kernels (they gave zeros here)."""
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError('"%s" not implemented for \'%s\'' % (kernel, _torch_dtype_name(dtype)))


def rand(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size, 'rand')
    if dtype is None and device is None:  # fast path: no dtype to check, no device context
        return _finish(_C._rand(_shape(size), generator, _default_float()), requires_grad)
    if getattr(dtype, "is_complex", False) is True:  # (tessel/_complex_ops.py: torch's draws of the real view)
        from ._complex_ops import random
        check_cpu(device, "rand")
        return random("rand", _shape(size), generator, dtype, requires_grad)
    _float_draw(dtype, "check_uniform_bounds")
    with factory_device(device, "rand"):  # "meta": built without writing values
        return _finish(_C._rand(_shape(size), generator, dtype or _dtypes.default_float()), requires_grad)


def randn(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size, 'randn')
    if dtype is None and device is None:  # fast path: no dtype to check, no device context
        return _finish(_C._randn(_shape(size), generator, _default_float()), requires_grad)
    if getattr(dtype, "is_complex", False) is True:  # (tessel/_complex_ops.py: torch's draws of the real view)
        from ._complex_ops import random
        check_cpu(device, "randn")
        return random("randn", _shape(size), generator, dtype, requires_grad)
    _float_draw(dtype, "normal_kernel_cpu")
    with factory_device(device, "randn"):  # "meta": built without writing values
        return _finish(_C._randn(_shape(size), generator, dtype or _dtypes.default_float()), requires_grad)


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None):
    check_cpu(device, "randint")
    if size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if high is None or size is None:
        raise TypeError("randint(low=0, high, size): high and size are required")
    # torch's CPU randint is random_(low, high) on a new tensor: the generator's host stream (tessel._host_random)
    dtype = dtype or _I64
    t = _C._from_numpy(_random_values(tuple(_shape((size,))), dtype, low, high, generator))  # (int64 values)
    return t if dtype is _I64 else t.to(dtype)  # (an int64 .to(int64) alone cost ~1 us)


def from_numpy(array):
    """A tessel Tensor holding a copy of the numpy array (tessel owns its memory: its allocator counts
    every byte in a ledger, so it never aliases numpy's buffer)."""
    if getattr(array, "dtype", None) is not None and array.dtype.kind == "c":
        from ._complex import from_numpy as complex_from_numpy
        return complex_from_numpy(array)
    return _C._from_numpy(array)


_F32, _F64, _I64 = _dtypes.float32, _dtypes.float64, _dtypes.int64
_F32_ROUNDS_TO_INF = 3.4028235677973366e38  # float32's max plus half an ulp: from here a double rounds to inf
_EXACT_INT = 2 ** 53


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor from a numpy array, a (nested) list or a Python scalar; Python floats give the default
    dtype (float32 unless set) and Python ints int64, as in torch; a numpy array keeps its dtype."""
    if dtype is None and device is None:  # fast path: a Python float / int (tessel.tensor(3.0): 10 -> ~2.5 us)
        kind = data.__class__
        if kind is builtins.float:
            default = _dtypes.default_float()
            if default is _F64 or (default is _F32 and -_F32_ROUNDS_TO_INF < data < _F32_ROUNDS_TO_INF):
                return _finish(_C._full([], data, default), requires_grad)  # (NaN, inf: the general path)
        elif kind is builtins.int and -_EXACT_INT <= data <= _EXACT_INT:  # (not bool; exact in _full's double)
            return _finish(_C._full([], data, _I64), requires_grad)
    check_cpu(device, "tensor")
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        plain = isinstance(data, (list, tuple)) and _plain_numbers(data)
        if not plain and isinstance(data, (list, tuple)) and _holds_tensor(data):
            data = _tensors_as_scalars(data)  # torch reads a tensor inside a list as the number it holds
        array = np.asarray(data)
        if array.dtype.kind == "c" or getattr(dtype, "is_complex", False) is True:
            return _finish(complex_tensor(data, array, dtype), requires_grad)
        if not isinstance(data, np.ndarray):
            array = checked_numbers(data, array, dtype)  # torch's unpacking of Python numbers (range checks)
        t = None
        if not isinstance(data, np.ndarray) and array.dtype == np.float64 and dtype is None \
                and (plain or not _holds_numpy_float64(data)):
            # Python floats take the default dtype, as torch (rounded once from the float64 values); a numpy
            # float64 scalar among them keeps float64 (torch reads a numpy scalar's own dtype)
            default = _dtypes.default_float()
            if default == _dtypes.float64:
                t = _C._from_numpy(array)
            elif default == _dtypes.float32:
                if plain and array.ndim == 1 and array.size and \
                        -_F32_ROUNDS_TO_INF < builtins.min(data) and builtins.max(data) < _F32_ROUNDS_TO_INF:
                    # a flat list in float32's range: no overflow to silence (np.errstate costs ~4 us); a NaN
                    # first makes max() NaN and takes the general path
                    t = _C._from_numpy(array.astype(np.float32))
                else:
                    with np.errstate(over="ignore"):  # beyond float32's range: inf, as torch's (silently)
                        t = _C._from_numpy(array.astype(np.float32))
            else:
                t = _C._from_numpy(array).to(default)
        if t is None:
            t = _C._from_numpy(array)
    if dtype is not None:
        t = t.to(dtype)
    return _finish(t, requires_grad)


def wrap_dim(dim, ndim):
    """dim normalized to [0, ndim) (a 0-d tensor counts as 1-D), or torch's IndexError for one out of range."""
    n = builtins.max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)" % (-n, n - 1, dim))
    return dim % n


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel():
    """The warnings.warn stacklevel, for the function that calls this, that names the first frame outside
    tessel: the line the user wrote, however many of tessel's wrappers sit between (torch's C++ warnings point
    there)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def with_zero_gradient(value, *inputs):
    """value, joined to the graph of those of `inputs` that require grad with a zero gradient, under grad mode:
    torch's ops whose derivative is zero (sign, copysign's sign argument, a rounded division) give results that
    require grad (a backward through them gives zeros, not "does not require grad")."""
    for t in inputs:
        if isinstance(t, _C.Tensor) and t.requires_grad and _C.is_grad_enabled():
            value = _C._functional.where(_C._full([], 0.0, _dtypes.bool), t, value)
    return value


def zero_dim_as_vector(fn):
    """fn(x, ...) for a 0-d x computed on x viewed as [1] with the [1]-shaped results viewed back as 0-d: torch
    takes dim 0 / -1 of a 0-d tensor (logsumexp, median, quantile, var, topk, cummax, flip, ...) and gives 0-d
    results; dim 1 raises its "range of [-1, 0]" IndexError, as the [1] view's does."""
    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if not isinstance(x, Tensor) or x.ndim != 0:
            return fn(x, *args, **kwargs)
        out = fn(x.reshape(1), *args, **kwargs)
        if isinstance(out, Tensor):
            return out.reshape(()) if tuple(out.shape) == (1,) else out
        if isinstance(out, tuple):
            parts = [o.reshape(()) if isinstance(o, Tensor) and tuple(o.shape) == (1,) else o for o in out]
            return type(out)(*parts) if hasattr(out, "_fields") else type(out)(parts)
        return out
    return wrapper


def _index_list(t, idx):
    if not isinstance(idx, tuple):
        idx = (idx,)
    named = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    out = []
    for i in idx:
        if i is Ellipsis:
            out.extend([builtins.slice(None)] * (t.ndim - named))
        else:
            out.append(i)
    return out


def _gather_rows(self, rows):
    """self[rows] for an int64 numpy array of row indices (any shape): rows of dim 0 through the embedding
    op, so the gradient flows back (scattered and summed into the rows, as torch's index backward)."""
    n = self.shape[0]
    lo = rows.min() if rows.size else 0
    if rows.size and (lo < -n or rows.max() >= n):
        bad = rows[(rows < -n) | (rows >= n)].reshape(-1)[0]
        raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (bad, n))
    if lo < 0:  # (only then: three passes over a mask's 500K positions cost more than the gather)
        rows = np.where(rows < 0, rows + n, rows)
    rows = rows.astype(np.int64, copy=False)
    if self.is_distributed:
        self = _whole_rows(self)
    rest = tuple(self.shape[1:])
    width = 1
    for r in rest:
        width *= r
    table = self.reshape(n, width)  # explicit: -1 is ambiguous when a dim is 0
    if not self.is_distributed and table.numel() > 0:  # rows copied by index_select (element loads for width 1)
        flat = _C._functional._index_select_dim(table, 0, _C._from_numpy(rows.reshape(-1)))
        return flat.reshape(*(tuple(rows.shape) + rest))
    out = _C._functional.embedding(_internal_index(table, _C._from_numpy(rows)), table)
    return out.reshape(*(tuple(rows.shape) + rest))


def _advanced_index(self, idx):
    """torch's advanced indexing with one index along dim 0: an integer tensor / array / list (gather),
    or a boolean mask over the leading dims (the selected rows, in order)."""
    arr = _index_array(idx)
    if self.ndim == 0:
        raise IndexError("too many indices for tensor of dimension 0")
    if arr.dtype == np.bool_:
        k = arr.ndim
        mismatch = _mask_mismatch(arr.shape, self.shape, 0)
        if mismatch is not None:
            raise mismatch
        lead = 1
        for size in self.shape[:k]:
            lead *= size
        flat = self.reshape(lead, *self.shape[k:]) if k > 1 else self
        return _gather_rows(flat, np.flatnonzero(arr.reshape(-1)))
    if arr.dtype not in (np.int64, np.int32):  # (int8 / int16 were taken; torch refuses them)
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return _gather_rows(self, arr.astype(np.int64))


def _result_dims(idx, ndim):
    """The result dim where each subscript entry lands: None and a 0-d bool add a dim, an int removes
    one, ... stands for the dims no other entry names, slices and tensor indices keep theirs."""
    named = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis and not _is_zero_d_bool(i))
    out, d = [], 0
    for i in idx:
        out.append(d)
        if i is Ellipsis:
            d += ndim - named
        elif i is None or isinstance(i, builtins.slice) or _is_zero_d_bool(i) or _is_advanced(i):
            d += 1
    return out


def _zero_d_bool_index(self, idx):
    """x[..., tensor(True), ...]: a new dim of size 1 there (size 0 for False), then the rest, as torch."""
    k = [j for j, i in enumerate(idx) if _is_zero_d_bool(i)][0]
    keep = idx[k] if isinstance(idx[k], builtins.bool) else builtins.bool(idx[k].item())  # x[True]: as torch
    out = _getitem(self, idx[:k] + (None,) + idx[k + 1:])
    if keep:
        return out
    return out.narrow(_result_dims(idx, self.ndim)[k], 0, 0)


def _tuple_with_advanced_index(self, idx):
    """A subscript tuple with integer / boolean tensor (or list, array) entries among basic ones, by
    torch's rules: the basic entries as a view; the index entries (a k-dim boolean mask counts as k
    integer indices, its nonzero positions) broadcast together and pick elements through one gather
    (with a gradient); their broadcast dims replace the indexed dims where those were adjacent, else
    they come first. x[:, idx], x[rows, cols] (logits[arange(N), targets]) and x[mask2d] all go here."""
    # ("adv", int array, the view's entry for its dim) or ("basic", entry, None); masks: (first entry, shape)
    entries, masks = [], []
    for i in idx:
        if _is_zero_d_bool(i):  # torch: a new dim of size 1 indexed by [0] (True) or [] (False), an index too
            keep = i if isinstance(i, builtins.bool) else builtins.bool(i.item())
            entries.append(("adv", np.arange(1 if keep else 0, dtype=np.int64), None))
            continue
        if not _is_advanced(i):
            entries.append(("basic", i, None))
            continue
        arr = _index_array(i)
        if arr.dtype == np.bool_:
            masks.append((len(entries), arr.shape))
            entries.extend(("adv", positions, builtins.slice(None)) for positions in np.nonzero(arr))
        elif arr.dtype in (np.int64, np.int32):
            entries.append(("adv", arr.astype(np.int64), builtins.slice(None)))
        else:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    basic = [v if k == "basic" else placeholder for k, v, placeholder in entries]
    view = _getitem(self, tuple(basic))
    # The view's dim each index entry indexes (an index entry keeps its dim in the view, as a slice).
    dims = _result_dims(basic, self.ndim)
    positions = [d for d, (k, _, _) in zip(dims, entries) if k == "adv"]
    adv = [v for k, v, _ in entries if k == "adv"]
    for first, shape in masks:
        mismatch = _mask_mismatch(shape, view.shape, dims[first])
        if mismatch is not None:
            raise mismatch
    try:
        adv = np.broadcast_arrays(*adv)
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes %s"
                         % ", ".join(str(list(a.shape)) for a in adv)) from None
    linear = np.zeros(adv[0].shape, dtype=np.int64)
    for p, a in zip(positions, adv):
        n = view.shape[p]
        if a.size and (a.min() < -n or a.max() >= n):
            bad = a[(a < -n) | (a >= n)].reshape(-1)[0]
            raise IndexError("index %d is out of bounds for dimension %d with size %d" % (bad, p, n))
        linear = linear * n + np.where(a < 0, a + n, a)
    rest = [j for j in range(view.ndim) if j not in positions]
    moved = view.permute(*(positions + rest))
    indexed = 1
    for p in positions:
        indexed *= view.shape[p]
    rows = _gather_rows(moved.reshape(indexed, *[view.shape[j] for j in rest]), linear)
    index_dims = linear.ndim
    first = positions[0]
    if positions != list(range(first, first + len(positions))):  # separated: the index dims come first
        return rows
    back = list(range(index_dims, index_dims + first)) + list(range(index_dims)) + \
        list(range(index_dims + first, rows.ndim))
    # torch's result is contiguous (Swin's roll, then .view): the index dims placed back, copied once
    return rows.permute(*back).contiguous() if first else rows


def _getitem(self, idx):
    """Basic indexing: ints, slices (step > 0), None and ... (views, like torch's basic indexing); and one
    integer or boolean tensor (or list / numpy array) index along dim 0 (a copy, with a gradient). The common
    keys take the C++ path (_basic_index: the same views in one call); it returns None for the rest."""
    out = _basic_index(self, idx)
    if out is not None:
        return out
    idx = _torch_key(idx)
    if isinstance(idx, Tensor) and idx.ndim == 0 and not idx.dtype.is_floating_point and idx.dtype != _dtypes.bool:
        idx = idx.item()  # a 0-d integer tensor is a plain index (a view), as in torch
    if _is_zero_d_bool(idx):
        return _zero_d_bool_index(self, (idx,))
    if isinstance(idx, range):
        idx = list(idx)
    if isinstance(idx, (Tensor, list, np.ndarray)):
        return _advanced_index(self, idx)
    if isinstance(idx, tuple):
        idx = tuple(_as_plain(i) for i in idx)
        if builtins.any(_is_advanced(i) and not _is_zero_d_bool(i) for i in idx):
            return _tuple_with_advanced_index(self, idx)
        if builtins.any(_is_zero_d_bool(i) for i in idx):
            return _zero_d_bool_index(self, idx)
    entries = _index_list(self, idx)
    named = builtins.sum(1 for i in entries if i is not None)
    if named > self.ndim:  # torch's IndexErrors (this raised "tuple index out of range")
        if self.ndim == 0:
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in "
                             "C++ to convert a 0-dim tensor to a number")
        raise IndexError("too many indices for tensor of dimension %d" % self.ndim)
    out, dim, source_dim = self, 0, 0  # source_dim: the dim of self an index entry names (for messages)
    for i in entries:
        if i is None:
            out = out.unsqueeze(dim)
            dim += 1
        elif isinstance(i, builtins.slice):
            source_dim += 1
            size = out.shape[dim]
            start, stop, step = i.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            out = out._slice(dim, start, builtins.max(stop, start), step)
            dim += 1
        elif isinstance(i, (builtins.int, np.integer)) and not isinstance(i, builtins.bool):
            size = out.shape[dim]
            if not -size <= i < size:
                raise IndexError("index %d is out of bounds for dimension %d with size %d" % (i, source_dim, size))
            out = out.select(dim, builtins.int(i) % size)
            source_dim += 1
        elif isinstance(i, str):  # torch reads a string as data for an index tensor
            raise TypeError("new(): invalid data type 'str'")
        else:
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                             "indices (got %s)" % type(i).__name__)
    return out


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _iter(self):
    return (self.select(0, i) for i in range(_len(self)))


def _one_element(self, kind):
    if self.numel() != 1:
        if kind == "booleans":  # torch: `if t:` on several elements is a RuntimeError
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        raise ValueError("only one element tensors can be converted to Python %s, got shape %s"
                         % (kind, tuple(self.shape)))
    return self.item()


_basic_index = Tensor._basic_index
Tensor.__getitem__ = _getitem
Tensor.__len__ = _len
Tensor.__iter__ = _iter
_warned_float = []


def _float(self):
    if self.requires_grad and _C.is_grad_enabled() and not _warned_float:  # torch: once, and only in grad mode
        _warned_float.append(True)
        warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected behavior.\n"
                      "Consider using tensor.detach() first.", UserWarning, stacklevel=2)
    return builtins.float(_one_element(self, "scalars"))


Tensor.__float__ = _float
Tensor.__int__ = lambda self: builtins.int(_one_element(self, "scalars"))
Tensor.__array__ = lambda self, dtype=None: self.numpy() if dtype is None else self.numpy().astype(dtype)
def _host_numpy(t):
    """t's values as a numpy array, without its history; bfloat16, which numpy lacks, as float32 (exactly)."""
    t = t.detach()
    return (t.float() if t.dtype.value == _BFLOAT16 else t).numpy()


_BFLOAT16 = _C.dtype.bfloat16.value  # (an int compare: pybind's dtype == costs ~0.5 us)


_tolist_in_place = Tensor._tolist_in_place


def _tolist(self):  # t.tolist() (bfloat16 too, as torch's Python floats)
    out = _tolist_in_place(self)  # a plain CPU tensor: read in C++; None otherwise
    return _host_numpy(self).tolist() if out is None else out


Tensor.tolist = _tolist
Tensor.type_as = lambda self, other: self.to(other.dtype)


def _in_memory_order(t, make):
    """make(shape) laid out as t is in memory, as torch's *_like factories (preserve_format) lay out a permuted
    input: made contiguous over t's dims sorted by decreasing stride, then permuted back, so the values a draw
    writes in memory order land where torch's do (dropout on a transposed activation: torch's mask)."""
    if t.is_contiguous():
        return make(tuple(t.shape))
    strides = t.stride()
    order = sorted(range(t.dim()), key=lambda d: -strides[d])
    made = make(tuple(t.shape[d] for d in order))
    return made.permute(*[order.index(d) for d in range(t.dim())])


def rand_like(t, *, dtype=None, device=None, requires_grad=False):
    check_cpu(device, "rand_like")
    if t.is_distributed:
        return _random_like(t, lambda shape, dt: rand(*shape, dtype=dt), dtype, requires_grad)
    return _finish(_in_memory_order(t, lambda shape: rand(*shape, dtype=dtype or t.dtype)), requires_grad)


def randn_like(t, *, dtype=None, device=None, requires_grad=False):
    check_cpu(device, "randn_like")
    if t.is_distributed:
        return _random_like(t, lambda shape, dt: randn(*shape, dtype=dt), dtype, requires_grad)
    return _finish(_in_memory_order(t, lambda shape: randn(*shape, dtype=dtype or t.dtype)), requires_grad)


def randint_like(t, low=0, high=None, *, dtype=None, device=None):
    check_cpu(device, "randint_like")
    if high is None:
        low, high = 0, low
    return _in_memory_order(t, lambda shape: randint(low, high, shape, dtype=dtype or t.dtype))


def uniform_like(x, generator=None, dtype=None):
    """U[0, 1) values of x's shape (dtype, default x's) from `generator`, else the thread's default one (a DTensor
    draws its piece of the full tensor's values from the default generator)."""
    if generator is None or x.is_distributed:
        return rand_like(x, dtype=dtype)
    return rand(*x.shape, generator=generator, dtype=dtype or x.dtype)


def bernoulli(p, *args, generator=None, out=None):
    """torch.bernoulli(input): 1 with probability input elementwise (input's dtype), drawn from `generator` (or
    the thread's); torch.bernoulli(input, p): input's shape and dtype, each 1 with probability p."""
    if args and isinstance(args[0], _C.Generator):  # (tessel's old positional generator)
        generator, args = args[0], args[1:]
    if args:
        from ._inplace_methods import _bernoulli_
        drawn = _bernoulli_(empty_like(p.detach()), args[0], generator=generator)
        return drawn if out is None else out.copy_(drawn)
    if out is not None:
        return out.copy_(bernoulli(p, generator=generator))
    if not p.is_distributed and p.numel() and not builtins.bool(((p >= 0) & (p <= 1)).all()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    if not p.is_distributed and p.device.type == "cpu":  # torch's CPU kernel (core/tensor/torch_random.h)
        out = _C._torch_bernoulli_(_C._empty(list(p.shape), p.dtype), p.detach(), generator)
        out._unsafe_set_version_counter(0)  # a new tensor: version 0, as torch's
        return out
    return (uniform_like(p, generator) < p).to(p.dtype)


def exponential_(x, lambd=1.0, generator=None):
    """torch's CPU exponential_, value for value from the generator's host stream (tessel._host_random); a
    DTensor draws its piece from the thread's default generator."""
    with _C._GradMode(False):
        if x.is_distributed:
            exponential_values(0, lambd)  # torch's check of lambda
            return x.copy_(-((1.0 - uniform_like(x, generator)).log()) / lambd)
        drawn = exponential_values(builtins.int(x.numel()), lambd, generator)
        return x.copy_(tensor(drawn.reshape(tuple(x.shape))).to(x.dtype))


def random_(x, from_=0, to=None, generator=None):
    """Tensor.random_(from, to) / random_(to): integers uniform in [from, to); random_() alone draws in
    [0, 2^mantissa bits] for floats and [0, the dtype's max] for integers. torch's draws on the CPU, in row-major
    order from the generator's host stream (core/tensor/random.h: its MT19937 words; host_ints), so
    `torch.empty((), dtype=torch.int64).random_(generator=g)` (a DataLoader's base seed) is torch's number."""
    drawn = _random_values(tuple(x.shape), x.dtype, from_, to, generator)
    with _C._GradMode(False):
        return x.copy_(tensor(drawn).to(x.dtype))


def _random_values(shape, dtype, from_, to, generator):
    """random_'s integers for a tensor of `shape` and `dtype` (numpy int64), with torch's range checks."""
    if to is None and not from_:
        span = _RANDOM_SPAN.get(dtype)
        if span is None:
            raise RuntimeError("random_: unsupported dtype %s" % dtype)
        low = 0
    else:
        low = 0 if to is None else builtins.int(from_)
        span = builtins.int(from_) if to is None else builtins.int(to) - low
        if span <= 0:
            raise RuntimeError("random_ expects 'from' to be less than 'to', but got from=%d >= to=%d"
                               % (low, low + span))
        bounds = _INTEGER_BOUNDS.get(dtype)
        if bounds is not None:  # torch's check: both ends of [from, to - 1] are values of the dtype
            if not bounds[0] <= low <= bounds[1]:
                raise RuntimeError("from is out of bounds for %s" % bounds[2])
            if not bounds[0] <= low + span - 1 <= bounds[1]:
                raise RuntimeError("to - 1 is out of bounds for %s" % bounds[2])
    return (host_ints(span, math.prod(builtins.int(n) for n in shape), generator) + low).reshape(shape)


# The integer dtypes' ranges and the C type names torch's bounds errors print
_INTEGER_BOUNDS = {_dtypes.int8: (-128, 127, "signed char"), _dtypes.uint8: (0, 255, "unsigned char"),
                   _dtypes.int16: (-32768, 32767, "short int"), _dtypes.int32: (-2 ** 31, 2 ** 31 - 1, "int"),
                   _dtypes.bool: (0, 1, "bool")}


# random_()'s range per dtype, [0, span): the mantissa's integers for floats (2^digits + 1 values, as torch's), the
# non-negative values for integers
_RANDOM_SPAN = {_dtypes.float32: (1 << 24) + 1, _dtypes.float64: (1 << 53) + 1, _dtypes.bfloat16: (1 << 8) + 1,
                _dtypes.float16: (1 << 11) + 1, _dtypes.int64: 1 << 63, _dtypes.int32: 1 << 31,
                _dtypes.int16: 1 << 15, _dtypes.int8: 1 << 7, _dtypes.uint8: 1 << 8, _dtypes.bool: 2}


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1, torch's on the CPU: aten's Fisher-Yates pass over the generator's host
    stream (the MT19937 words torch's CPU generator draws; core/tensor/random.h), so a generator seeded as in a
    torch script, with no other MT draws in between, gives torch's permutation."""
    check_cpu(device, "randperm")
    if builtins.int(n) < 0:
        raise RuntimeError("Trying to create tensor with negative dimension %d: [%d]"
                           % (builtins.int(n), builtins.int(n)))
    return _C._from_numpy(_C._host_randperm(builtins.int(n), generator)).to(dtype or _dtypes.int64)


_EYE_NUMPY = {_dtypes.float32.value: np.float32, _dtypes.float64.value: np.float64}


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    check_cpu(device, "eye")
    target = dtype or _default_float()
    as_numpy = _EYE_NUMPY.get(target.value) if type(target) is _Dtype else None
    if as_numpy is not None:  # fast path: numpy's eye made in the target dtype (0 and 1 exact), no tensor() + to()
        out = _C._from_numpy(np.eye(builtins.int(n), builtins.int(n if m is None else m), dtype=as_numpy))
        return out.requires_grad_(requires_grad) if requires_grad else out
    out = tensor(np.eye(builtins.int(n), builtins.int(n if m is None else m)), dtype=dtype or _dtypes.default_float())
    return out.requires_grad_(requires_grad) if requires_grad else out


def as_tensor(data, dtype=None, device=None):
    """torch.as_tensor: a tensor already of that dtype is returned as is; anything else is copied (tessel
    never aliases numpy's memory)."""
    check_cpu(device, "as_tensor")
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else data.to(dtype)
    return tensor(data, dtype=dtype)


from ._size import Size  # noqa: E402,F401 (torch.Size: Tensor.shape's type)


def is_tensor(obj):
    """torch.is_tensor: isinstance(obj, Tensor) (Parameters and DTensors included)."""
    return isinstance(obj, _C.Tensor)


def empty_like(t, *, dtype=None, device=None, requires_grad=False):
    if t.is_distributed:
        return _distributed_like(t, lambda shape, dt: empty(*shape, dtype=dt), dtype, requires_grad,
                                 keep_partial=True)
    return _finish(_in_memory_order(t, lambda shape: empty(*shape, dtype=dtype or t.dtype)), requires_grad)


def broadcast_shapes(*shapes):
    """torch.broadcast_shapes: numpy's broadcasting rules (np.broadcast_shapes); a mismatch is torch's
    RuntimeError ("shape mismatch: objects cannot be broadcast to a single shape ...")."""
    try:
        return Size(np.broadcast_shapes(*shapes))
    except ValueError as e:
        raise RuntimeError(str(e)) from None


def broadcast_tensors(*tensors):
    """torch.broadcast_tensors: every tensor expanded (a view, differentiable) to the common shape."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t if tuple(t.shape) == tuple(shape) else t.expand(*shape) for t in tensors)


def _num_str(v):
    return "%d" % v if builtins.float(v).is_integer() else "%g" % v  # torch prints -1 and -0.5


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, requires_grad=False):
    """torch.normal: draws with tensor or number mean and std (broadcast together), or numbers with size.
    Not differentiable in mean and std (as torch's; Distribution.rsample is)."""
    if not isinstance(mean, _C.Tensor) and not isinstance(std, _C.Tensor):
        if std < 0:
            raise RuntimeError("normal expects std >= 0.0, but found std %s" % _num_str(std))
        if size is None:
            raise TypeError("normal(): with number mean and std, size= is required")
        return _finish(randn(size, generator=generator, dtype=dtype) * float(std) + float(mean), requires_grad)
    if isinstance(std, _C.Tensor):
        if std.numel() and builtins.bool((std.detach() < 0).any()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError("normal expects std >= 0.0, but found std %s" % _num_str(std))
    like = mean if isinstance(mean, _C.Tensor) else std
    shape = broadcast_shapes(*(t.shape for t in (mean, std) if isinstance(t, _C.Tensor)))
    plain = [t.detach() if isinstance(t, _C.Tensor) else t for t in (mean, std)]
    return _finish(randn(*shape, generator=generator, dtype=like.dtype) * plain[1] + plain[0], requires_grad)


from . import _setitem  # noqa: E402,F401 (installs Tensor.__setitem__, index_put_ and index_put)
