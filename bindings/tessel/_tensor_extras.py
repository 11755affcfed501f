"""torch's remaining dense-tensor surface: memory formats (contiguous_format, channels_last, channels_last_3d,
preserve_format) with real strides (x.contiguous(memory_format=torch.channels_last) is NHWC in memory, as in
torch, and is_contiguous(memory_format=...) checks the strides), layouts (torch.strided; tensor.layout), the
is_meta / is_sparse / is_quantized / ... flags of a dense CPU tensor, the bit shifts (<<, >>,
bitwise_left_shift / right_shift, integer only, with torch's wrap-around), nextafter, index_reduce,
nonzero_static, dim_order, put, prelu, const_data_ptr, to_dense, asarray, empty_strided, the default-device
getters, torch.cond / while_loop (eager, as torch runs them outside compile), typename, Tensor.new (the legacy
constructor) and is_set_to. install(namespace) adds what tessel lacks.

The shifts and nextafter compute on the host with numpy (they are integer or bit-level ops with no gradient in
torch either); the rest are tessel ops, differentiable where torch's are.
"""
import builtins

import numpy as np

from . import _C, _dtypes

Tensor = _C.Tensor


class memory_format:
    """torch.memory_format: contiguous_format, channels_last (4-D, NHWC in memory), channels_last_3d (5-D,
    NDHWC), preserve_format."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "torch." + self._name

    def __reduce__(self):
        return self._name


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


class layout:
    """torch.layout: every tessel tensor is torch.strided."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "torch." + self._name


strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc, jagged = (
    layout(n) for n in ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "jagged"))

_contiguous_cpp = Tensor.contiguous
_is_contiguous_cpp = Tensor.is_contiguous


def _channels_last_order(fmt, ndim, op):
    """The dims from outermost to innermost in memory for fmt (None: the plain row-major order)."""
    if fmt is None or fmt is contiguous_format:
        return None
    if fmt is channels_last:
        if ndim != 4:
            raise RuntimeError("required rank 4 tensor to use channels_last format")
        return [0, 2, 3, 1]
    if fmt is channels_last_3d:
        if ndim != 5:
            raise RuntimeError("required rank 5 tensor to use channels_last_3d format")
        return [0, 2, 3, 4, 1]
    raise TypeError("%s(): memory_format must be a torch.memory_format, got %r" % (op, fmt))


def _contiguous(self, memory_format=contiguous_format):
    """Tensor.contiguous(memory_format=...): the same values laid out row-major, or channels-last (the channels
    innermost: x.permute(0, 2, 3, 1) is then contiguous)."""
    if memory_format is contiguous_format and type(self) is Tensor and _is_contiguous_cpp(self) and \
            not self.is_distributed:
        return self  # fast path: torch returns the tensor itself (0.70 -> 0.2 µs)
    if memory_format is contiguous_format:
        return _contiguous_cpp(self)
    if memory_format is preserve_format:  # torch: keep a dense channels-last layout, else row-major
        for fmt, nd in ((channels_last, 4), (channels_last_3d, 5)):
            if self.dim() == nd and not _is_contiguous_cpp(self) and _is_contiguous(self, fmt):
                return self
        return _contiguous_cpp(self)
    order = _channels_last_order(memory_format, self.dim(), "contiguous")
    if order is None:
        return _contiguous_cpp(self)
    if _is_contiguous(self, memory_format):
        return self
    inverse = [order.index(d) for d in range(len(order))]
    return _contiguous_cpp(self.permute(*order)).permute(*inverse)


def _is_contiguous(self, memory_format=contiguous_format):
    """Tensor.is_contiguous(memory_format=...): the strides are those of that layout (dims of size 1 free); a
    tensor of another rank is not channels-last contiguous (False, as torch's, not an error)."""
    if memory_format is contiguous_format:  # (the default: the C++ check alone)
        return _is_contiguous_cpp(self)
    if (memory_format is channels_last and self.dim() != 4) or (memory_format is channels_last_3d and
                                                                 self.dim() != 5):
        return False
    order = _channels_last_order(memory_format, self.dim(), "is_contiguous")
    if order is None:
        return _is_contiguous_cpp(self)
    expected = 1
    for d in reversed(order):
        size = self.shape[d]
        if size != 1 and self.stride(d) != expected:
            return False
        expected *= size
    return True


def _clone(self, *, memory_format=preserve_format):
    """Tensor.clone(memory_format=...): a copy, laid out as memory_format says; preserve_format (the default)
    keeps a dense channels-last layout, as torch's (the plain copy was row-major)."""
    out = _clone_cpp(self)
    if memory_format is preserve_format:
        for fmt, nd in ((channels_last, 4), (channels_last_3d, 5)):
            if self.dim() == nd and not _is_contiguous_cpp(self) and _is_contiguous(self, fmt):
                return _contiguous(out, fmt)
        return out
    return _contiguous(out, memory_format)


_clone_cpp = Tensor.clone


def _suggest_order(self):
    """dim_order: the dims sorted by stride, outermost first (ties keep the dims' order)."""
    return tuple(sorted(range(self.dim()), key=lambda d: (-self.stride(d), d)))


# ---- integer bit ops and nextafter (host) -----------------------------------------------------------------

def _host_binary(name, fn, integer_only, kernel=None, bfloat16_fn=None):
    """fn on the host over numpy arrays of the operands' promoted dtype (torch's result_type: int8 << uint8 is
    int16, a bool operand is promoted too); bfloat16 operands (numpy has no such dtype) go to bfloat16_fn as
    exact float32 arrays, its float32 result holding bfloat16 values. 0-d operands give a 0-d result."""
    def op(input, other):
        if not isinstance(input, Tensor):
            input = _C._full([], builtins.float(input), other.dtype)
        if (isinstance(input, Tensor) and input.is_distributed) or (isinstance(other, Tensor) and other.is_distributed):
            from ._tensor import _on_pieces
            return _on_pieces(op, input, other)
        from ._namespace import result_type, _name
        dt = result_type(input, other)
        if integer_only and (dt.is_floating_point or dt == _dtypes.bool):
            raise NotImplementedError('"%s_cpu" not implemented for \'%s\'' % (kernel or name, _name(dt)))
        if not integer_only and not dt.is_floating_point:
            raise RuntimeError("%s: expected floating point inputs, got %s" % (name, dt))
        a = input.to(dt)
        b = other.to(dt) if isinstance(other, Tensor) else _C._full([], builtins.float(other), dt)
        if dt == _dtypes.bfloat16 and bfloat16_fn is not None:
            return _C._from_numpy(_dense(bfloat16_fn(a.float().numpy(), b.float().numpy()))).to(_dtypes.bfloat16)
        return _C._from_numpy(_dense(fn(a.detach().numpy(), b.detach().numpy())))
    op.__name__ = name
    return op


def _dense(x):
    """x as a C-contiguous array of its own shape (np.ascontiguousarray makes a 0-d array 1-d)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy(order="C")


def _shift_left(a, b):
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    out = np.left_shift(a, np.clip(b, 0, bits - 1).astype(a.dtype))
    return np.where((b >= bits) | (b < 0), 0, out).astype(a.dtype)


def _shift_right(a, b):
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    out = np.right_shift(a, np.clip(b, 0, bits - 1).astype(a.dtype))
    return np.where((b >= bits) | (b < 0), np.where(a < 0, -1, 0), out).astype(a.dtype)


def _nextafter(a, b):
    a, b = np.broadcast_arrays(a, b)
    b = b.astype(a.dtype)
    return np.where(a == b, b, np.nextafter(a, b))  # equal values give b, its zero sign included (C's, torch's)


def _nextafter_bf16(a, b):
    """nextafter for bfloat16 values held in float32 arrays: one step of the sign-magnitude 16-bit pattern
    (bfloat16 is float32's upper half) toward b; from ±0 the smallest subnormal with b's direction."""
    a, b = np.broadcast_arrays(np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32))
    bits = (a.view(np.uint32) >> 16).astype(np.int64)
    negative = bits >= 0x8000
    stepped = bits + np.where((b > a) != negative, 1, -1)
    stepped = np.where(a == 0, np.where(b > 0, 0x0001, 0x8001), stepped)
    out = (stepped.astype(np.uint32) << 16).view(np.float32)
    return np.where(a == b, b, np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), out))


bitwise_left_shift = _host_binary("bitwise_left_shift", _shift_left, True, "lshift")
bitwise_right_shift = _host_binary("bitwise_right_shift", _shift_right, True, "rshift")
nextafter = _host_binary("nextafter", _nextafter, False, bfloat16_fn=_nextafter_bf16)


# ---- index ops ------------------------------------------------------------------------------------------

_warned_index_reduce = []


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """torch.index_reduce: input with source's slices reduced into the rows index names along dim ("prod",
    "mean", "amax", "amin"), through scatter_reduce."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError("index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s."
                           % reduce)
    from ._extra import _out_of_range, check_index_dtype
    from ._tensor import wrap_dim
    if not _warned_index_reduce:  # torch warns once per process
        _warned_index_reduce.append(True)
        import warnings
        warnings.warn("index_reduce() is in beta and the API may change at any time.", UserWarning, stacklevel=2)
    dim = wrap_dim(dim, input.dim())  # (it wrapped any dim: 2 of a 2-D input was dim 0)
    check_index_dtype(index, "index_reduce_")
    if index.dim() != 1:
        raise IndexError("index_reduce_(): Index is supposed to be a vector")
    if source.shape[dim] != index.shape[0]:
        raise RuntimeError("index_reduce_(): Number of indices (%d) should be equal to source.size(dim) (%d)"
                           % (index.shape[0], source.shape[dim]))
    if _out_of_range(index, input.shape[dim] if input.dim() else 1) is not None:  # (scatter_reduce's message)
        raise IndexError("index out of range in self")
    shape = [1] * source.dim()
    shape[dim] = index.shape[0]
    expanded = index.reshape(shape).expand(*source.shape)
    return input.scatter_reduce(dim, expanded, source, reduce, include_self=include_self)


def nonzero_static(input, *, size, fill_value=-1):
    """torch.nonzero_static: the first `size` rows of nonzero()'s [n, ndim] indices, padded with fill_value."""
    found = input.nonzero()
    n = found.shape[0]
    if n >= size:
        return found.narrow(0, 0, size)
    pad = _C._full([size - n, input.dim()], builtins.float(fill_value), found.dtype)
    return _C._functional.cat([found, pad], 0)


def _put(self, index, source, accumulate=False):
    """Tensor.put: a copy with put_'s writes (out of place)."""
    return self.clone().put_(index, source, accumulate)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """torch.asarray: obj as a tensor, sharing a given tensor unless a copy or another dtype is asked for."""
    from ._device import check_cpu
    check_cpu(device, "asarray")
    from ._tensor import tensor
    if isinstance(obj, Tensor):
        out = obj if dtype is None or dtype == obj.dtype else obj.to(dtype)
        if copy and out is obj:
            out = obj.clone()
    else:
        if copy is False:
            raise ValueError("asarray(copy=False): tessel owns every tensor's memory (its allocator ledger), so a "
                             "non-tensor object cannot be shared without a copy")
        out = tensor(obj, dtype=dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """torch.empty_strided: an uninitialized tensor with exactly these sizes and strides (over one storage large
    enough for its furthest element)."""
    size, stride = list(size), list(stride)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    extent = 1 + builtins.sum((s - 1) * st for s, st in zip(size, stride)) if builtins.all(size) else 0
    base = _C._empty([builtins.max(extent, 0)], dtype or _dtypes.default_float())
    out = base.as_strided(size, stride)
    if requires_grad:
        out.requires_grad_(True)
    return out


# ---- control flow, legacy constructors, names -----------------------------------------------------------

def cond(pred, true_fn, false_fn, operands=()):
    """torch.cond: true_fn(*operands) if pred else false_fn(*operands) — torch's eager semantics (its tracing
    form is for torch.compile / export, which tessel does not have); pred a bool or a one-element tensor."""
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError("Expected pred to be bool or single-element tensor, but got %s" % list(pred.shape))
        pred = builtins.bool(pred.item())
    return (true_fn if pred else false_fn)(*operands)


def while_loop(cond_fn, body_fn, carried_inputs):
    """torch.while_loop: carried = body_fn(*carried) while cond_fn(*carried), eagerly; the carried tensors'
    number must not change."""
    carried = tuple(carried_inputs)
    while builtins.bool(cond(cond_fn(*carried), lambda: True, lambda: False)):
        out = body_fn(*carried)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(out) != len(carried):
            raise RuntimeError("while_loop: body_fn returned %d values for %d carried inputs"
                               % (len(out), len(carried)))
        carried = out
    return carried


_TYPE_NAMES = {_dtypes.float32: "FloatTensor", _dtypes.float64: "DoubleTensor", _dtypes.float16: "HalfTensor",
               _dtypes.bfloat16: "BFloat16Tensor", _dtypes.int64: "LongTensor", _dtypes.int32: "IntTensor",
               _dtypes.bool: "BoolTensor", _dtypes.int16: "ShortTensor", _dtypes.int8: "CharTensor",
               _dtypes.uint8: "ByteTensor"}


def typename(obj):
    """torch.typename: "torch.FloatTensor" & co. for a tensor, the qualified class name for anything else."""
    if isinstance(obj, Tensor):
        return "torch." + _TYPE_NAMES.get(obj.dtype, "Tensor")
    cls = obj if isinstance(obj, type) else type(obj)
    module = getattr(cls, "__module__", "") or ""
    return cls.__qualname__ if module in ("builtins", "") else module + "." + cls.__qualname__


def _new(self, *args, **kwargs):
    """Tensor.new (torch's legacy constructor): new(*sizes) an uninitialized tensor, new(data) a tensor of data,
    new(tensor) that tensor, new() an empty one — in self's dtype."""
    from ._tensor import tensor as make
    dtype = kwargs.pop("dtype", None) or self.dtype
    kwargs.pop("device", None)
    if kwargs:
        raise TypeError("new() got unexpected keyword arguments %s" % sorted(kwargs))
    if not args:
        return _C._empty([0], dtype)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0]
    if builtins.all(isinstance(a, builtins.int) and not isinstance(a, builtins.bool) for a in args):
        return _C._empty(list(args), dtype)
    return make(args[0], dtype=dtype)


def _is_set_to(self, other):
    """Tensor.is_set_to: the same memory (storage, offset), sizes and strides."""
    return (self.data_ptr() == other.data_ptr() and tuple(self.shape) == tuple(other.shape)
            and self.stride() == other.stride() and self.dtype == other.dtype)


def set_default_device(device):
    """torch.set_default_device: tessel's Python face computes on the CPU, so "cpu" (or None) is accepted and
    any other device raises."""
    from ._device import check_cpu
    check_cpu(device, "set_default_device")


def _flag(value):
    return property(lambda self: value)


_FALSE_FLAGS = ("is_meta", "is_sparse", "is_sparse_csr", "is_quantized", "is_nested", "is_mkldnn", "is_xpu", "is_mps",
                "is_vulkan", "is_ipu", "is_maia", "is_mtia", "is_xla")


def install(namespace):
    names = dict(memory_format=memory_format, contiguous_format=contiguous_format, channels_last=channels_last,
                 channels_last_3d=channels_last_3d, preserve_format=preserve_format, layout=layout, strided=strided,
                 sparse_coo=sparse_coo, sparse_csr=sparse_csr, sparse_csc=sparse_csc, sparse_bsr=sparse_bsr,
                 sparse_bsc=sparse_bsc, jagged=jagged, bitwise_left_shift=bitwise_left_shift,
                 bitwise_right_shift=bitwise_right_shift, nextafter=nextafter, index_reduce=index_reduce,
                 nonzero_static=nonzero_static, put=_put, asarray=asarray, empty_strided=empty_strided,
                 get_default_device=lambda: namespace["device"]("cpu"), set_default_device=set_default_device,
                 cond=cond, while_loop=while_loop, typename=typename, is_storage=lambda obj: False)
    for name, value in names.items():
        if name not in namespace:
            namespace[name] = value
    Tensor.contiguous = _contiguous
    Tensor.is_contiguous = _is_contiguous
    Tensor.clone = _clone
    methods = dict(dim_order=_suggest_order, bitwise_left_shift=bitwise_left_shift,
                   bitwise_right_shift=bitwise_right_shift, nextafter=nextafter, index_reduce=index_reduce,
                   nonzero_static=nonzero_static, put=_put, const_data_ptr=lambda self: self.data_ptr(),
                   to_dense=lambda self, dtype=None, *, masked_grad=None: self if dtype is None else self.to(dtype),
                   prelu=lambda self, weight: _prelu(self, weight), __lshift__=bitwise_left_shift,
                   __rshift__=bitwise_right_shift, __rlshift__=lambda self, other: bitwise_left_shift(other, self),
                   __rrshift__=lambda self, other: bitwise_right_shift(other, self), new=_new, is_set_to=_is_set_to,
                   unsafe_split_with_sizes=lambda self, split_sizes, dim=0: self.split(list(split_sizes), dim))
    for name, fn in methods.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    if not hasattr(Tensor, "layout"):
        Tensor.layout = _flag(strided)
    for name in _FALSE_FLAGS:
        if not hasattr(Tensor, name):
            setattr(Tensor, name, _flag(False))
    for name, base in (("bitwise_left_shift_", "bitwise_left_shift"), ("bitwise_right_shift_", "bitwise_right_shift"),
                       ("nextafter_", "nextafter"), ("index_reduce_", "index_reduce")):
        if not hasattr(Tensor, name):
            setattr(Tensor, name, _written_back(name, base))
    Tensor.__ilshift__ = lambda self, other: self.bitwise_left_shift_(other)
    Tensor.__irshift__ = lambda self, other: self.bitwise_right_shift_(other)
    for name, transposed in (("swapaxes_", "transpose_"), ("swapdims_", "transpose_")):
        if not hasattr(Tensor, name) and hasattr(Tensor, transposed):
            setattr(Tensor, name, getattr(Tensor, transposed))


def _written_back(name, base):
    from ._inplace_methods import _in_place_of
    return _in_place_of(name, base)


def _prelu(x, weight):
    from .nn import functional as F
    return F.prelu(x, weight)

