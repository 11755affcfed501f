"""Complex tensors: rotary position embeddings in Meta's Llama reference, torchtitan and their ports (torch.polar,
view_as_complex, a complex product, view_as_real), FFT-based code (rfft / irfft around complex arithmetic, spectral
convolutions) and signal processing.

tessel's kernels, its dispatcher and its DTensor are real-valued, so a complex tensor here is a Python
object over a real tensor of shape [..., 2] (real and imaginary parts interleaved, torch's own memory
layout for complex64 / complex128): view_as_complex wraps such a tensor without copying, view_as_real
views it, and every complex operation is composed of real tessel ops on it. Gradients therefore
come from the real ops' autograd: for a real loss they are torch's (its conjugate-Wirtinger gradient of a
real function is the pair of real partial derivatives, z.grad = dL/da + i dL/db).

isinstance(z, tessel.Tensor) is true in user code, as torch's (generic code that tests for tensors takes complex
ones), and false in tessel's own code: ComplexTensor's __class__ answers by its caller's file. tessel's checks for
tensors pick what goes to C++ (module calls and hooks, checkpointing, FSDP, DCP, collectives), which takes real
tensors only, so there a complex tensor stays the opaque Python object it always was; the functions that take one
name ComplexTensor (is_tensor, tensor, assert_close, the functions here). type(z) is ComplexTensor everywhere.

This file holds the type: metadata, views, indexing, arithmetic and conversions. _complex_math.py has the
elementwise functions (abs, exp, log, sqrt, pow, trigonometric ones, division), _complex_ops.py reductions,
products, joins, masked writes and random factories, _complex_torch.py their places in tessel's namespace (and
Tensor's operators with Python complex numbers). Anything else raises AttributeError naming this module, instead
of computing on the interleaved real view.

Example:
    freqs = torch.outer(torch.arange(16).float(), 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)                  # complex64 [16, 4]
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))  # [B, T, H, 4]
    out = torch.view_as_real(xq_ * freqs_cis.view(1, 16, 1, 4)).flatten(3)  # [B, T, H, 8]
"""
import builtins
import numbers
import sys

import numpy as np

from . import _C, _dtypes
from ._size import Size
from ._tensor import _PACKAGE_DIR, Tensor
from ._autocast_policy import float32_under_autocast as _float32_under_autocast


class ComplexDType:
    """torch.complex64 / torch.complex128: the dtype of a ComplexTensor over float32 / float64 parts."""

    is_complex = True
    is_floating_point = False
    is_signed = True

    def __init__(self, name, real, itemsize):
        self._name, self.real, self.itemsize = name, real, itemsize

    def to_real(self):
        return self.real

    def __repr__(self):
        return "tessel." + self._name

    __str__ = __repr__

    def __reduce__(self):
        return (_dtype_named, (self._name,))


def _dtype_named(name):
    return complex64 if name == "complex64" else complex128


complex64 = ComplexDType("complex64", _dtypes.float32, 8)
complex128 = ComplexDType("complex128", _dtypes.float64, 16)
cfloat, cdouble = complex64, complex128
_OF_REAL = {_dtypes.float32: complex64, _dtypes.float64: complex128}
_TYPE_NAMES = {"complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _unsupported(op):
    return NotImplementedError("%s of a complex tensor: tessel's complex tensors (tessel/_complex.py) cover "
                               "rotary embeddings' and spectral code's operations (creation, shape ops, indexing, "
                               "arithmetic, elementwise math, reductions, products); use view_as_real for anything "
                               "else" % op)


def _norm_dim(d, ndim):
    if not -ndim <= d < builtins.max(ndim, 1):
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-ndim, ndim - 1, d))
    return d + ndim if d < 0 else d


def _dims_arg(dims):
    return tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else tuple(dims)


def _is_bool_index(k):
    return isinstance(k, (Tensor, np.ndarray)) and not isinstance(k, ComplexTensor) and k.dtype in (
        _dtypes.bool, np.bool_)


class ComplexTensor:
    """A complex tensor over `_r`, a real tensor [..., 2] whose last dimension has stride 1."""

    __slots__ = ("_r", "__weakref__")
    is_distributed = is_sparse = is_quantized = is_cuda = is_mps = is_nested = False
    __array_priority__ = 1000  # numpy defers: ndarray * z and np.float64 * z are tensors, as Tensor's

    def __init__(self, real_view):
        self._r = real_view

    @property
    def __class__(self):
        """Tensor to code outside tessel, so isinstance(z, torch.Tensor) and torch.is_tensor(z) are true there (as
        torch's); ComplexTensor to tessel's own code, whose tests for tensors pick what goes to C++ (module calls,
        hooks, checkpointing, FSDP, DCP: real tensors only) and which names ComplexTensor where it takes one."""
        try:
            caller = sys._getframe(1).f_code.co_filename
        except ValueError:  # (called from C with no Python frame)
            return Tensor
        return ComplexTensor if caller.startswith(_PACKAGE_DIR) else Tensor

    # ---- metadata --------------------------------------------------------------------------------------
    @property
    def dtype(self):
        return _OF_REAL[self._r.dtype]

    @property
    def shape(self):
        return Size(tuple(self._r.shape)[:-1])

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[_norm_dim(dim, self.ndim)]

    def dim(self):
        return self._r.dim() - 1

    ndim = property(dim)

    def numel(self):
        return self._r.numel() // 2

    nelement = numel

    def stride(self, dim=None):
        strides = tuple(s // 2 for s in self._r.stride()[:-1])
        return strides if dim is None else strides[_norm_dim(dim, self.ndim)]

    def storage_offset(self):
        return self._r.storage_offset() // 2

    def is_contiguous(self, memory_format=None):
        return self._r.is_contiguous()

    def data_ptr(self):
        return self._r.data_ptr()

    def element_size(self):
        return self.dtype.itemsize

    itemsize = property(element_size)

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    @property
    def layout(self):
        return self._r.layout

    def type(self, dtype=None):
        if dtype is None:
            return "torch.%sTensor" % _TYPE_NAMES[self.dtype._name]
        return self.to(dtype)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    @property
    def device(self):
        return self._r.device

    @property
    def is_meta(self):  # built under tessel.device("meta") (torchtitan's freqs_cis buffer), until to_empty
        return self._r.is_meta

    def _clear_meta(self):  # Module.to_empty
        self._r._clear_meta()

    @property
    def requires_grad(self):
        return self._r.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self._r.requires_grad_(value)

    def requires_grad_(self, requires_grad=True):
        self._r.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        g = self._r.grad
        return None if g is None else ComplexTensor(g)

    @grad.setter
    def grad(self, value):
        self._r.grad = None if value is None else _parts(value, self._r.dtype)

    @property
    def is_leaf(self):
        return self._r.is_leaf

    @property
    def grad_fn(self):
        return self._r.grad_fn

    @property
    def retains_grad(self):
        return self._r.retains_grad

    def retain_grad(self):
        self._r.retain_grad()

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """As torch's: a complex output needs its gradient (the real view's backward with the gradient's parts is
        torch's vector-Jacobian product for the conjugate-Wirtinger convention)."""
        if gradient is None:
            from .autograd import _implicit_complex_seed
            _implicit_complex_seed(self._r)
        self._r.backward(_parts(gradient, self._r.dtype), retain_graph, create_graph, inputs)

    def is_complex(self):
        return True

    def is_floating_point(self):
        return False

    def is_conj(self):
        return False  # conj() copies here (torch's is a lazy view: it answers True for one)

    def is_signed(self):
        return True

    @property
    def real(self):
        return self._r.select(-1, 0)

    @property
    def imag(self):
        return self._r.select(-1, 1)

    @property
    def data(self):
        return ComplexTensor(self._r.detach())

    def __repr__(self):
        from ._repr import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        from ._repr import tensor_format
        return tensor_format(self, spec)

    # ---- Python scalars and numpy ------------------------------------------------------------------------
    def item(self):
        if self.numel() != 1:
            raise RuntimeError("a Tensor with %d elements cannot be converted to Scalar" % self.numel())
        re, im = self._r.detach().reshape(2).tolist()
        return builtins.complex(re, im)

    __complex__ = item

    # (no __float__: pybind11 converts an argument declared double through it, so t * z of a one-element z with
    # a zero imaginary part silently took the real overload)
    def __int__(self):
        z = self.item()
        if z.imag != 0:
            raise RuntimeError("value cannot be converted to type int64_t without overflow")
        return builtins.int(z.real)

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return self.item() != 0

    def numpy(self, *, force=False):
        r = self._r.detach()
        return (r if r.is_contiguous() else r.contiguous()).numpy().view(
            np.complex64 if r.dtype == _dtypes.float32 else np.complex128)[..., 0]

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        return self.numpy().tolist()

    def __reduce_ex__(self, protocol):
        return (ComplexTensor, (self._r,))

    # ---- views and copies -------------------------------------------------------------------------------
    def _dims(self, shape):
        return _dims_arg(shape) + (2,)

    def view(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (builtins.int, tuple, list)):
            raise _unsupported("view(%r)" % (shape[0],))
        return ComplexTensor(self._r.view(*self._dims(shape)))

    def reshape(self, *shape):
        return ComplexTensor(self._r.reshape(*self._dims(shape)))

    def view_as(self, other):
        return self.view(*other.shape)

    def reshape_as(self, other):
        return self.reshape(*other.shape)

    def unsqueeze(self, dim):
        return ComplexTensor(self._r.unsqueeze(_norm_dim(dim, self.ndim + 1)))

    def squeeze(self, dim=None):
        if dim is None:
            return ComplexTensor(self._r.reshape(*[n for n in self.shape if n != 1], 2))
        dims = sorted({_norm_dim(d, self.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))})
        r = self._r
        for d in reversed(dims):
            r = r.squeeze(d)
        return ComplexTensor(r)

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _norm_dim(start_dim, self.ndim), _norm_dim(end_dim, self.ndim)
        return ComplexTensor(self._r.flatten(s, e))

    def unflatten(self, dim, sizes):
        return ComplexTensor(self._r.unflatten(_norm_dim(dim, self.ndim), sizes))

    def transpose(self, d0, d1):
        return ComplexTensor(self._r.transpose(_norm_dim(d0, self.ndim), _norm_dim(d1, self.ndim)))

    swapaxes = swapdims = transpose

    def t(self):
        if self.ndim > 2:
            raise RuntimeError("t() expects a tensor with <= 2 dimensions, but self is %dD" % self.ndim)
        return self if self.ndim < 2 else self.transpose(0, 1)

    T = property(lambda self: self.permute(*reversed(range(self.ndim))))
    mT = property(lambda self: self.transpose(-2, -1))
    mH = property(lambda self: self.transpose(-2, -1).conj())
    H = property(lambda self: self.t().conj())

    def adjoint(self):
        return self.mH

    def permute(self, *dims):
        return ComplexTensor(self._r.permute(*[_norm_dim(d, self.ndim) for d in _dims_arg(dims)], self.ndim))

    def movedim(self, source, destination):
        src = [_norm_dim(d, self.ndim) for d in (source if isinstance(source, (tuple, list)) else (source,))]
        dst = [_norm_dim(d, self.ndim) for d in (destination if isinstance(destination, (tuple, list))
                                                 else (destination,))]
        return ComplexTensor(self._r.movedim(src, dst))

    moveaxis = movedim

    def expand(self, *shape):
        return ComplexTensor(self._r.expand(*self._dims(shape)))

    def expand_as(self, other):
        return self.expand(*other.shape)

    def contiguous(self, memory_format=None):
        return ComplexTensor(self._r.contiguous())

    def clone(self, memory_format=None):
        return ComplexTensor(self._r.clone())

    def detach(self):
        return ComplexTensor(self._r.detach())

    def detach_(self):
        self._r.detach_()
        return self

    def __deepcopy__(self, memo):
        return ComplexTensor(self._r.detach().clone().requires_grad_(self._r.requires_grad))

    def narrow(self, dim, start, length):
        return ComplexTensor(self._r.narrow(_norm_dim(dim, self.ndim), start, length))

    def select(self, dim, index):
        return ComplexTensor(self._r.select(_norm_dim(dim, self.ndim), index))

    def unbind(self, dim=0):
        return tuple(ComplexTensor(r) for r in self._r.unbind(_norm_dim(dim, self.ndim)))

    def split(self, split_size, dim=0):
        return tuple(ComplexTensor(r) for r in self._r.split(split_size, _norm_dim(dim, self.ndim)))

    def chunk(self, chunks, dim=0):
        return tuple(ComplexTensor(r) for r in self._r.chunk(chunks, _norm_dim(dim, self.ndim)))

    def flip(self, *dims):
        return ComplexTensor(self._r.flip([_norm_dim(d, self.ndim) for d in _dims_arg(dims)]))

    def roll(self, shifts, dims=None):
        if dims is None:
            return self.flatten().roll(shifts, 0).view(self.shape)
        dims = [_norm_dim(d, self.ndim) for d in (dims if isinstance(dims, (tuple, list)) else (dims,))]
        return ComplexTensor(self._r.roll(shifts, dims))

    def repeat(self, *sizes):
        return ComplexTensor(self._r.repeat(*_dims_arg(sizes), 1))

    def index_select(self, dim, index):
        return ComplexTensor(self._r.index_select(_norm_dim(dim, self.ndim), index))

    def gather(self, dim, index):
        idx = index.unsqueeze(-1).expand(*index.shape, 2)
        return ComplexTensor(self._r.gather(_norm_dim(dim, self.ndim), idx))

    def _on_matrices(self, name, *args):
        """A matrix op of the two trailing complex dims, on the real view with its parts' dim moved in front."""
        return ComplexTensor(getattr(self._r.movedim(-1, 0), name)(*args).movedim(0, -1))

    def tril(self, diagonal=0):
        return self._on_matrices("tril", diagonal)

    def triu(self, diagonal=0):
        return self._on_matrices("triu", diagonal)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        d1, d2 = _norm_dim(dim1, self.ndim), _norm_dim(dim2, self.ndim)
        return ComplexTensor(self._r.diagonal(offset, d1, d2).movedim(-2, -1))

    def diag(self, diagonal=0):
        if self.ndim == 2:
            return self.diagonal(diagonal).contiguous()
        if self.ndim != 1:
            raise RuntimeError("diag(): Supports 1D or 2D tensors. Got %dD" % self.ndim)
        n = self.shape[0] + builtins.abs(diagonal)
        from ._complex_ops import zeros_parts
        out = zeros_parts((n, n), self._r)
        idx = np.arange(self.shape[0])
        rows, cols = (idx, idx + diagonal) if diagonal >= 0 else (idx - diagonal, idx)
        out[_C._from_numpy(rows), _C._from_numpy(cols)] = self._r
        return ComplexTensor(out)

    def to(self, *args, **kwargs):
        """Devices other than the CPU raise as for real tensors; a complex dtype converts the parts; a real one
        keeps the real part, with torch's warning (once per process, as torch's)."""
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("copy", None)
        rest = []
        for a in args:
            if isinstance(a, ComplexDType) or (isinstance(a, type(_dtypes.float32))):
                dtype = a
            elif isinstance(a, ComplexTensor):
                dtype = a.dtype
            elif isinstance(a, Tensor):
                dtype = a.dtype
            else:
                rest.append(a)
        r = self._r.to(*rest, **kwargs) if rest or kwargs else self._r
        if dtype is None or dtype == self.dtype:
            return self if r is self._r else ComplexTensor(r)
        if not isinstance(dtype, ComplexDType):
            if dtype == _dtypes.bool:
                return (self != 0)
            _warn_discarding_imaginary()
            real = r.select(-1, 0)
            return real.to(dtype) if real.dtype != dtype else real.clone()
        return ComplexTensor(r.to(dtype.real))

    def type_as(self, other):
        return self.to(other.dtype)

    def cfloat(self):
        return self.to(complex64)

    def cdouble(self):
        return self.to(complex128)

    def cpu(self, memory_format=None):
        return self

    def cuda(self, *args, **kwargs):
        self._r.cuda(*args, **kwargs)  # raises as a real tensor's does
        return self

    def _key(self, key):
        """key for the real view: each index of the complex dims (a k-d bool mask takes k), then all of the
        parts' dim."""
        key = key if isinstance(key, tuple) else (key,)
        consumed = 0
        for k in key:
            if k is None or k is Ellipsis or isinstance(k, builtins.bool):
                continue
            consumed += k.ndim if _is_bool_index(k) else 1
        if consumed > self.ndim:
            raise IndexError("too many indices for tensor of dimension %d" % self.ndim)
        full, seen = [], False
        for k in key:
            if k is Ellipsis and not seen:
                full.extend([slice(None)] * (self.ndim - consumed))
                seen = True
            else:
                full.append(k)
        if not seen:
            full.extend([slice(None)] * (self.ndim - consumed))
        return tuple(full) + (slice(None),)

    def __getitem__(self, key):
        return ComplexTensor(self._r[self._key(key)])

    def __setitem__(self, key, value):
        self._r[self._key(key)] = _parts(value, self._r.dtype)

    def copy_(self, src, non_blocking=False):
        self._r.copy_(_parts(src, self._r.dtype))
        return self

    def zero_(self):
        self._r.zero_()
        return self

    def fill_(self, value):
        return self.copy_(value)

    # ---- arithmetic -------------------------------------------------------------------------------------
    def _pair(self):
        return self._r.select(-1, 0), self._r.select(-1, 1)

    def _operands(self, other):
        """(a, b, c, d): self's parts and other's in the real dtype of torch's result type; d is None for a real
        operand (torch makes it other + 0j); c and d are Python floats for a number. None for what is neither a
        number nor a tensor."""
        if isinstance(other, ComplexTensor):
            real = _result_real(self, other)
            return self._pair_in(real) + other._pair_in(real)
        if isinstance(other, Tensor):
            real = _result_real(self, other)
            return self._pair_in(real) + ((other if other.dtype == real else other.to(real)), None)
        if isinstance(other, numbers.Real):
            return self._pair() + (builtins.float(other), None)
        if isinstance(other, numbers.Complex):
            z = builtins.complex(other)
            return self._pair() + (z.real, z.imag)
        return None

    def _pair_in(self, real):
        r = self._r if self._r.dtype == real else self._r.to(real)
        return r.select(-1, 0), r.select(-1, 1)

    def __mul__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        if d is None:  # torch's product with c + 0j: the zero's signs and NaNs of inf * 0 as torch's
            return _from_parts(a * c - b * 0.0, a * 0.0 + b * c)
        return _from_parts(a * c - b * d, a * d + b * c)

    __rmul__ = __mul__

    def __add__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        return _from_parts(a + c, b + (0.0 if d is None else d))

    __radd__ = __add__

    def __neg__(self):
        return ComplexTensor(-self._r)

    def __pos__(self):
        return self

    def __sub__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        return _from_parts(a - c, b - (0.0 if d is None else d))

    def __rsub__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        return _from_parts(c - a, (0.0 if d is None else d) - b)

    def conj(self):
        a, b = self._pair()
        return _from_parts(a, -b)

    def __truediv__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        if d is None:  # torch multiplies by the divisor's reciprocal: a * (1 / c), rounded as its kernel
            inv = (1.0 / c) if isinstance(c, builtins.float) else c.reciprocal()
            return _from_parts(a * inv - b * 0.0, a * 0.0 + b * inv)
        if isinstance(c, builtins.float):  # a complex number: divided by as a tensor, as torch's kernel does
            c, d = _C._full([], c, a.dtype), _C._full([], d, a.dtype)
        from ._complex_math import divide
        return _from_parts(*divide(a, b, c, d))

    def __rtruediv__(self, other):
        ops = self._operands(other)
        if ops is None:
            return NotImplemented
        a, b, c, d = ops
        from ._complex_math import divide
        return _from_parts(*divide(c, 0.0 if d is None else d, a, b))

    def _compared(self, other):
        """(self's parts, other's parts) for == and !=: a real tensor or number has a zero imaginary part; None
        for what is not compared elementwise."""
        a, b = self._pair()
        if isinstance(other, ComplexTensor):
            c, d = other._pair()
            if a.dtype != c.dtype:  # complex64 next to complex128: compared in float64
                a, b, c, d = (t.to(_dtypes.float64) for t in (a, b, c, d))
            return (a, b), (c, d)
        if isinstance(other, Tensor):
            real = _result_real(self, other)
            a, b = self._pair_in(real)
            return (a, b), (other, 0.0)
        if isinstance(other, numbers.Number):
            z = builtins.complex(other)
            return (a, b), (z.real, z.imag)
        return None

    def __eq__(self, other):
        """Elementwise, as torch's: a bool tensor, True where both parts are equal."""
        pairs = self._compared(other)
        if pairs is None:
            return NotImplemented
        (a, b), (c, d) = pairs
        return (a == c) & (b == d)

    def __ne__(self, other):
        pairs = self._compared(other)
        if pairs is None:
            return NotImplemented
        (a, b), (c, d) = pairs
        return (a != c) | (b != d)

    def _unordered(self, other, kernel):
        raise NotImplementedError("\"%s\" not implemented for '%s'" % (kernel, _TYPE_NAMES[self.dtype._name]))

    __lt__ = lambda self, other: self._unordered(other, "lt_cpu")  # noqa: E731
    __le__ = lambda self, other: self._unordered(other, "le_cpu")  # noqa: E731
    __gt__ = lambda self, other: self._unordered(other, "gt_cpu")  # noqa: E731
    __ge__ = lambda self, other: self._unordered(other, "ge_cpu")  # noqa: E731

    __hash__ = object.__hash__  # (defining __eq__ would drop it) identity, as a torch tensor's

    # in place: the result written into the parts (a leaf that requires grad refuses, as torch's)
    def _assign(self, result):
        if result is NotImplemented:
            return result
        self._r.copy_(_parts(result, self._r.dtype))
        return self

    def __iadd__(self, other):
        return self._assign(self.__add__(other))

    def __isub__(self, other):
        return self._assign(self.__sub__(other))

    def __imul__(self, other):
        return self._assign(self.__mul__(other))

    def __itruediv__(self, other):
        return self._assign(self.__truediv__(other))

    def add(self, other, *, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, *, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def add_(self, other, *, alpha=1):
        return self._assign(self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        return self._assign(self.sub(other, alpha=alpha))

    def mul_(self, other):
        return self._assign(self * other)

    def div_(self, other):
        return self._assign(self / other)

    mul = multiply = __mul__
    div = divide = true_divide = __truediv__
    subtract = sub
    neg = negative = __neg__
    eq, ne = __eq__, __ne__

    def angle(self):
        if self.requires_grad and _C.is_grad_enabled():  # atan2 of the parts: torch's gradient (0 at 0, too)
            from ._special import FUNCTIONS
            return FUNCTIONS["atan2"](self.imag, self.real)
        z = self.numpy()
        return _C._from_numpy(np.ascontiguousarray(np.angle(z)).astype(np.float32 if z.dtype == np.complex64
                                                                         else np.float64))

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """Tensor.norm: the vector norm of the moduli, real (p 'fro' is the 2-norm; 'nuc' needs singular values)."""
        from .linalg import vector_norm
        if p == "nuc":
            raise _unsupported("norm(p='nuc')")
        return vector_norm(self, 2 if p in ("fro", None) else p, dim, keepdim, dtype=dtype)

    def __getattr__(self, name):
        raise AttributeError("'ComplexTensor' object has no attribute '%s' (%s)" % (name, _unsupported(name)))


ComplexTensor.conj_physical = ComplexTensor.conj
ComplexTensor.resolve_conj = ComplexTensor.resolve_neg = lambda self: self


def _result_real(x, y):
    from ._promotion import result_type
    return result_type(x, y).to_real()


_warned_imaginary = []  # torch's TORCH_WARN_ONCE: the warning once per process


def _warn_discarding_imaginary():
    if not _warned_imaginary:
        import warnings
        _warned_imaginary.append(True)
        warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)


def _from_parts(re, im):
    """A ComplexTensor of the parts (broadcast together: a real operand's zero imaginary part is a number)."""
    if not isinstance(im, Tensor):
        im = _C._full(list(re.shape), builtins.float(im), re.dtype)
    elif not isinstance(re, Tensor):
        re = _C._full(list(im.shape), builtins.float(re), im.dtype)
    elif tuple(re.shape) != tuple(im.shape):
        from ._tensor import broadcast_tensors
        re, im = broadcast_tensors(re, im)
    return ComplexTensor(_C._functional.stack([re, im], -1))


def _parts(x, dtype):
    """x as interleaved real parts [..., 2] in `dtype`: a ComplexTensor, a real tensor (imaginary part 0) or a
    number."""
    if isinstance(x, ComplexTensor):
        return x._r if x._r.dtype == dtype else x._r.to(dtype)
    if isinstance(x, Tensor):
        x = x if x.dtype == dtype else x.to(dtype)
        return _C._functional.stack([x, _C._full(list(x.shape), 0.0, dtype)], -1)
    z = builtins.complex(x)
    return _C._from_numpy(np.array([z.real, z.imag], np.float64)).to(dtype)


# ---- torch functions ----------------------------------------------------------------------------------

def _type_name(dtype):
    from ._subscript import _torch_dtype_name
    return _torch_dtype_name(dtype)


@_float32_under_autocast
def view_as_complex(input):
    """torch's checks, in its order: a half / float / double tensor of one or more dims whose last one has size 2
    and stride 1, every other stride and the storage offset even (a complex element must start on a pair)."""
    if isinstance(input, ComplexTensor):
        raise TypeError("view_as_complex is not supported for complex tensors")
    if input.dtype not in _OF_REAL and input.dtype != _dtypes.float16:
        raise NotImplementedError("view_as_complex is only supported for half, float and double tensors, but got a "
                                  "tensor of scalar type: %s" % _type_name(input.dtype))
    if input.dim() == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.stride()[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in input.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if input.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    if input.dtype == _dtypes.float16:
        raise NotImplementedError("view_as_complex of a float16 tensor: torch's complex32 (chalf) is not in tessel")
    return ComplexTensor(input)


def view_as_real(input):
    """A view of the parts (a new tensor object over the same memory, as torch's: writes reach the complex one)."""
    if not isinstance(input, ComplexTensor):
        raise TypeError("view_as_real is only supported for complex tensors")
    return input._r.view(list(input._r.shape))


@_float32_under_autocast
def polar(abs, angle):  # noqa: A002 (torch's argument name)
    if abs.dtype != angle.dtype or abs.dtype not in _OF_REAL:
        raise TypeError("polar: expected abs and angle of the same float or double dtype, got %s and %s"
                        % (abs.dtype, angle.dtype))
    return _from_parts(abs * angle.cos(), abs * angle.sin())


def complex(real, imag):  # noqa: A001 (torch.complex)
    """torch.complex: the parts broadcast together; torch's errors for other dtypes (NotImplementedError) and for
    two different ones."""
    if real.dtype not in _OF_REAL or imag.dtype not in _OF_REAL:
        raise NotImplementedError("Expected both inputs to be Half, Float or Double tensors but got %s and %s"
                                  % (_type_name(real.dtype), _type_name(imag.dtype)))
    if real.dtype != imag.dtype:
        raise RuntimeError("Expected object of scalar type %s but got scalar type %s for second argument"
                           % (_type_name(real.dtype), _type_name(imag.dtype)))
    return _from_parts(real, imag)


def is_complex(input):
    return isinstance(input, ComplexTensor)


def real(input):
    return input.real if isinstance(input, ComplexTensor) else input


def imag(input):
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return input.imag


def conj(input):
    return input.conj() if isinstance(input, ComplexTensor) else input


def full(shape, value, dtype):
    """zeros / ones / full / empty with a complex dtype: the interleaved parts, (value, 0)."""
    z = builtins.complex(value)
    shape = list(shape)
    re = _C._full(shape, z.real, dtype.real)
    return _from_parts(re, _C._full(shape, z.imag, dtype.real))


def from_numpy(array):
    """A ComplexTensor copy of a complex numpy array."""
    parts = np.ascontiguousarray(array).view(np.float32 if array.dtype == np.complex64 else np.float64)
    return ComplexTensor(_C._from_numpy(parts.reshape(array.shape + (2,))))


TORCH_FUNCTIONS = dict(
    view_as_complex=view_as_complex, view_as_real=view_as_real, polar=polar, complex=complex,
    is_complex=is_complex, real=real, imag=imag, conj=conj, complex64=complex64, complex128=complex128,
    cfloat=cfloat, cdouble=cdouble)

from . import _complex_math, _complex_ops  # noqa: E402 (the elementwise math, reductions, products as methods)
_complex_math.install(ComplexTensor)
_complex_ops.install(ComplexTensor)
