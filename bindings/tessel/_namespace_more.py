"""More of torch's top-level namespace that ported scripts reach for: torch.gradient (the numerical derivative
of sampled values, numpy's and torch's second-order scheme), the legacy typed-tensor classes
(torch.FloatTensor(2, 3), torch.LongTensor([1, 2]), isinstance(x, torch.FloatTensor)), torch.frombuffer,
get/set_num_interop_threads, the function forms of the in-place methods (torch.abs_(x), torch.relu_(x), ...),
and the function names torch keeps next to torch.nn.functional's (embedding_bag, channel_shuffle,
cosine_embedding_loss, hinge_embedding_loss). Installed into tessel's namespace by tessel/__init__.py.
"""
import builtins

import numpy as np

from . import _C, _dtypes

Tensor = _C.Tensor


def _spacing_list(spacing, dims, shape):
    """Per-dim spacing: a number (uniform), a list of numbers, or a list of coordinate tensors."""
    if spacing is None:
        return [1.0] * len(dims)
    if isinstance(spacing, (int, float)):
        return [float(spacing)] * len(dims)
    items = list(spacing)
    if len(items) == 1 and len(dims) > 1 and not isinstance(items[0], Tensor):
        items = items * len(dims)
    if len(items) != len(dims):
        raise RuntimeError("torch.gradient expected spacing to be unspecified, a scalar or a list of length equal "
                           "to 'self.dim() = %d', since dim argument was not given, but got a list of length %d"
                           % (len(dims), len(items)))
    out = []
    for d, s in zip(dims, items):
        if isinstance(s, Tensor):
            if s.ndim != 1 or s.shape[0] != shape[d]:
                raise RuntimeError("torch.gradient expected each tensor to be on the same device and to have the "
                                   "size of dim %d (%d), got %s" % (d, shape[d], list(s.shape)))
            out.append(s)
        else:
            out.append(float(s))
    return out


def gradient(input, *, spacing=None, dim=None, edge_order=1):
    """torch.gradient: the derivative along each dim of values sampled on a grid (central differences inside, the
    coordinates' uneven spacing honoured, first- or second-order one-sided differences at the edges), one tensor
    per dim. Composed of narrow and arithmetic, so it is differentiable and works on DTensors."""
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    if input.dtype.is_complex:  # linear in the values (the spacing is real): the parts' gradients, joined
        from ._complex import complex as joined
        parts = [gradient(p, spacing=spacing, dim=dim, edge_order=edge_order) for p in (input.real, input.imag)]
        return tuple(joined(re, im) for re, im in zip(*parts))
    x = input if input.dtype.is_floating_point else input.to(_dtypes.default_float())
    dims = list(range(x.ndim)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    from ._tensor import wrap_dim
    dims = [wrap_dim(d, x.ndim) for d in dims]
    spacings = _spacing_list(spacing, dims, list(x.shape))
    out = []
    for d, h in zip(dims, spacings):
        n = x.shape[d]
        if n < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
        out.append(_gradient_along(x, d, h, n, edge_order))
    return tuple(out)


def _gradient_along(x, d, h, n, edge_order):
    shape = [1] * x.ndim
    shape[d] = -1

    def part(start, length):
        return x.narrow(d, start, length)
    if isinstance(h, Tensor):  # coordinates: uneven steps
        c = h.to(x.dtype)
        dx = (c[1:] - c[:-1]).reshape(*shape)
        a, b = dx.narrow(d, 0, n - 2), dx.narrow(d, 1, n - 2)  # h_left, h_right of each interior point
        inner = (part(2, n - 2) * (a * a) - part(0, n - 2) * (b * b) + part(1, n - 2) * (b * b - a * a)) / \
            (a * b * (a + b))
        h0, h1 = dx.narrow(d, 0, 1), dx.narrow(d, 1, 1) if n > 2 else dx.narrow(d, 0, 1)
        hl, hm = dx.narrow(d, n - 2, 1), dx.narrow(d, n - 3, 1) if n > 2 else dx.narrow(d, n - 2, 1)
    else:
        inner = (part(2, n - 2) - part(0, n - 2)) / (2.0 * h)
        h0 = h1 = hl = hm = h
    if edge_order == 1:
        first = (part(1, 1) - part(0, 1)) / h0
        last = (part(n - 1, 1) - part(n - 2, 1)) / hl
    else:  # second order one-sided (numpy's coefficients; uneven spacing included)
        first = -(2.0 * h0 + h1) / (h0 * (h0 + h1)) * part(0, 1) + (h0 + h1) / (h0 * h1) * part(1, 1) \
            - h0 / (h1 * (h0 + h1)) * part(2, 1)
        last = hl / (hm * (hm + hl)) * part(n - 3, 1) - (hm + hl) / (hm * hl) * part(n - 2, 1) \
            + (2.0 * hl + hm) / (hl * (hm + hl)) * part(n - 1, 1)
    return _C._functional.cat([first, inner, last], d) if n > 2 else _C._functional.cat([first, last], d)


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and not obj.is_distributed and obj.dtype == cls.dtype


def _typed_tensor(name, dtype):
    """torch.FloatTensor and friends: FloatTensor(2, 3) is uninitialized of that shape (zeros here),
    FloatTensor([1, 2]) holds the data, FloatTensor() is empty; isinstance checks the dtype."""
    def __new__(cls, *args):
        from ._tensor import tensor, zeros
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return zeros(*(args or (0,)), dtype=dtype)
        if len(args) == 1:
            data = args[0]
            if isinstance(data, Tensor):
                return data.to(dtype)
            if isinstance(data, tuple) and all(isinstance(a, int) for a in data):  # a Size
                return zeros(*data, dtype=dtype)
            return tensor(data, dtype=dtype)
        raise TypeError("%s(): expected sizes (ints) or one sequence of data, got %s"
                        % (name, [type(a).__name__ for a in args]))
    return _TypedTensorMeta(name, (), {"__new__": __new__, "dtype": dtype, "__module__": "tessel"})


def _legacy_tensor(*args, device=None):
    """torch.Tensor(...) (the legacy constructor): sizes give an uninitialized tensor of that shape (zeros here),
    a Size too, one sequence or array gives its data; in the default dtype (word_language_model's
    `torch.Tensor([[word_idx]]).long()`)."""
    from ._tensor import tensor, zeros
    dtype = _C._get_default_dtype()
    if device is not None and str(device) not in ("cpu", "meta"):
        raise RuntimeError("Tensor(): device %s is not available (tessel runs on the CPU)" % (device,))
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return zeros(*(args or (0,)), dtype=dtype)
    if len(args) == 1:
        data = args[0]
        if type(data).__name__ == "Size":
            return zeros(*data, dtype=dtype)
        if isinstance(data, Tensor):
            return data
        return tensor(data, dtype=dtype)
    raise TypeError("new(): invalid data type '%s'" % type(args[0]).__name__)


_TYPED = {"FloatTensor": _dtypes.float32, "DoubleTensor": _dtypes.float64, "HalfTensor": _dtypes.float16,
          "BFloat16Tensor": _dtypes.bfloat16, "LongTensor": _dtypes.int64, "IntTensor": _dtypes.int32,
          "ShortTensor": _dtypes.int16, "CharTensor": _dtypes.int8, "ByteTensor": _dtypes.uint8,
          "BoolTensor": _dtypes.bool}


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """torch.frombuffer: a 1-D tensor over the bytes of an object exposing the buffer protocol (a copy here:
    tessel tensors own their memory)."""
    from ._tensor import tensor
    np_dtype = {_dtypes.float32: np.float32, _dtypes.float64: np.float64, _dtypes.float16: np.float16,
                _dtypes.int64: np.int64, _dtypes.int32: np.int32, _dtypes.int16: np.int16, _dtypes.int8: np.int8,
                _dtypes.uint8: np.uint8, _dtypes.bool: np.bool_}.get(dtype)
    if np_dtype is None:
        raise TypeError("frombuffer: dtype %s is not supported" % dtype)
    raw = memoryview(buffer).cast("B")
    if offset < 0 or offset > len(raw):
        raise ValueError("offset (%d bytes) must be non-negative and no greater than buffer length (%d bytes) minus 1"
                         % (offset, len(raw)))
    array = np.frombuffer(raw, dtype=np_dtype, count=count, offset=offset)
    return tensor(array.copy(), requires_grad=requires_grad)


_INTEROP = []


def get_num_interop_threads():
    """torch's inter-op pool size (its default: the cores this process may use); tessel runs one op at a time
    per rank, so the value is only reported back."""
    if not _INTEROP:
        import os
        _INTEROP.append(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return _INTEROP[0]


def set_num_interop_threads(num):
    if num <= 0:
        raise RuntimeError("Expected positive number of threads")
    _INTEROP[:] = [int(num)]


_INPLACE = ("abs_ acos_ acosh_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_ asin_ asinh_ atan_ atanh_ ceil_ "
            "clamp_max_ clamp_min_ clip_ cos_ cosh_ deg2rad_ detach_ erf_ erfc_ exp2_ exp_ expm1_ fill_ fix_ floor_ "
            "frac_ gcd_ i0_ index_put_ lcm_ ldexp_ log10_ log1p_ log2_ log_ logit_ neg_ negative_ rad2deg_ "
            "reciprocal_ relu_ round_ rsqrt_ selu_ celu_ sigmoid_ sin_ sinc_ sinh_ sqrt_ square_ tan_ tanh_ trunc_ "
            "xlogy_ zero_").split()


def _new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False, layout=None,
                       pin_memory=False):
    """Tensor.new_empty_strided: torch.empty_strided in this tensor's dtype unless one is given."""
    from ._tensor_extras import empty_strided
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)


def _share_memory(self):
    """Tensor.share_memory_ / Module.share_memory: refused (see the message)."""
    raise NotImplementedError(
        "share_memory: tessel tensors live in process-private memory, so Hogwild-style training that shares "
        "parameters between processes would silently train separate copies; train in one process, or with "
        "DistributedDataParallel / tessel.run_ranks across ranks")


def _torch_lu(A, pivot=True, get_infos=False, out=None):
    from ._linalg_lu import torch_lu
    return torch_lu(A, pivot, get_infos, out)


def install(namespace):
    """Adds the names above to tessel's namespace (those it does not already have)."""
    from .nn import functional as F
    names = dict(gradient=gradient, frombuffer=frombuffer, get_num_interop_threads=get_num_interop_threads,
                 set_num_interop_threads=set_num_interop_threads, embedding_bag=F.embedding_bag,
                 channel_shuffle=F.channel_shuffle, cosine_embedding_loss=F.cosine_embedding_loss,
                 hinge_embedding_loss=F.hinge_embedding_loss, lu=_torch_lu)
    names.update({k: _typed_tensor(k, v) for k, v in _TYPED.items()})
    from ._compat import _function_form
    for name in _INPLACE:
        if hasattr(Tensor, name):
            names[name] = _function_form(name)
    for k, v in names.items():
        if k not in namespace:
            namespace[k] = v
    Tensor.share_memory_ = _share_memory
    Tensor.new_empty_strided = _new_empty_strided
    Tensor.is_shared = lambda self: False
    from .nn import Module
    Module.share_memory = _share_memory
    return builtins.sorted(names)
