"""Complex tensors for the models that use them: rotary position embeddings in Meta's Llama reference,
torchtitan and their ports (torch.polar, view_as_complex, a complex product, view_as_real).

tessel's kernels, its dispatcher and its DTensor are real-valued, so a complex tensor here is a Python
object over a real tensor of shape [..., 2] (real and imaginary parts interleaved, torch's own memory
layout for complex64 / complex128): view_as_complex wraps such a tensor without copying, view_as_real
returns it, and every complex operation below is composed of real tessel ops on it. Gradients therefore
come from the real ops' autograd: for a real loss they are torch's (its conjugate-Wirtinger gradient of a
real function is the pair of real partial derivatives).

What is covered: creation (view_as_complex, polar, complex, zeros/ones/empty/tensor with a complex dtype
through the factories' dtype), shape ops on the leading dimensions (view, reshape, indexing, unsqueeze,
squeeze, flatten, transpose, permute, expand, contiguous, clone, detach), arithmetic (+, -, * and / with
complex, real tensors and numbers), elementwise == and != (bool tensors), conj, abs, angle, norm, .real / .imag
views, numpy(), .to(a real dtype) (the real part, with torch's warning), and module buffers (register_buffer,
attribute assignment, named_buffers, state_dict, load_state_dict; Module.to(float dtype) casts them to real
buffers, as torch 2.15). Anything else raises AttributeError naming this module,
instead of computing on the interleaved real view. A ComplexTensor is not an instance of tessel.Tensor.

Example:
    freqs = torch.outer(torch.arange(16).float(), 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)                  # complex64 [16, 4]
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))  # [B, T, H, 4]
    out = torch.view_as_real(xq_ * freqs_cis.view(1, 16, 1, 4)).flatten(3)  # [B, T, H, 8]
"""
import builtins
import numbers

import numpy as np

from . import _C, _dtypes
from ._tensor import Tensor
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


def _unsupported(op):
    return NotImplementedError("%s of a complex tensor: tessel's complex tensors (tessel/_complex.py) cover "
                               "rotary embeddings' operations: creation, shape ops, + - * /, conj, abs, "
                               "real / imag; use view_as_real for anything else" % op)


def _norm_dim(d, ndim):
    if not -ndim <= d < builtins.max(ndim, 1):
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-ndim, ndim - 1, d))
    return d + ndim if d < 0 else d


class ComplexTensor:
    """A complex tensor over `_r`, a real tensor [..., 2] whose last dimension has stride 1."""

    __slots__ = ("_r",)

    def __init__(self, real_view):
        self._r = real_view

    # ---- metadata --------------------------------------------------------------------------------------
    @property
    def dtype(self):
        return _OF_REAL[self._r.dtype]

    @property
    def shape(self):
        return tuple(self._r.shape)[:-1]

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[_norm_dim(dim, self.ndim)]

    def dim(self):
        return self._r.dim() - 1

    ndim = property(dim)

    def numel(self):
        return self._r.numel() // 2

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def device(self):
        return self._r.device

    @property
    def requires_grad(self):
        return self._r.requires_grad

    def requires_grad_(self, requires_grad=True):
        self._r.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        g = self._r.grad
        return None if g is None else ComplexTensor(g)

    def is_complex(self):
        return True

    def is_floating_point(self):
        return False

    @property
    def real(self):
        return self._r.select(-1, 0)

    @property
    def imag(self):
        return self._r.select(-1, 1)

    def __repr__(self):
        return "tessel.ComplexTensor(%s, %s)" % (list(self.shape), self.dtype._name)

    # ---- views and copies -------------------------------------------------------------------------------
    def _dims(self, shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        return shape + (2,)

    def view(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (builtins.int, tuple, list)):
            raise _unsupported("view(%r)" % (shape[0],))
        return ComplexTensor(self._r.view(*self._dims(shape)))

    def reshape(self, *shape):
        return ComplexTensor(self._r.reshape(*self._dims(shape)))

    def view_as(self, other):
        return self.view(*other.shape)

    def unsqueeze(self, dim):
        return ComplexTensor(self._r.unsqueeze(_norm_dim(dim, self.ndim + 1)))

    def squeeze(self, dim=None):
        if dim is None:
            return ComplexTensor(self._r.reshape(*[n for n in self.shape if n != 1], 2))
        return ComplexTensor(self._r.squeeze(_norm_dim(dim, self.ndim)))

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _norm_dim(start_dim, self.ndim), _norm_dim(end_dim, self.ndim)
        return ComplexTensor(self._r.flatten(s, e))

    def transpose(self, d0, d1):
        return ComplexTensor(self._r.transpose(_norm_dim(d0, self.ndim), _norm_dim(d1, self.ndim)))

    def permute(self, *dims):
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return ComplexTensor(self._r.permute(*[_norm_dim(d, self.ndim) for d in dims], self.ndim))

    def expand(self, *shape):
        return ComplexTensor(self._r.expand(*self._dims(shape)))

    def contiguous(self):
        return ComplexTensor(self._r.contiguous())

    def clone(self):
        return ComplexTensor(self._r.clone())

    def detach(self):
        return ComplexTensor(self._r.detach())

    def __deepcopy__(self, memo):
        return ComplexTensor(self._r.detach().clone().requires_grad_(self._r.requires_grad))

    def to(self, *args, **kwargs):
        """Devices other than the CPU raise as for real tensors; a complex dtype converts the parts; a real one
        keeps the real part, with torch's warning (once per process, as torch's)."""
        dtype = kwargs.pop("dtype", None)
        rest = []
        for a in args:
            if isinstance(a, ComplexDType) or (isinstance(a, type(_dtypes.float32))):
                dtype = a
            elif isinstance(a, ComplexTensor):
                dtype = a.dtype
            else:
                rest.append(a)
        r = self._r.to(*rest, **kwargs) if rest or kwargs else self._r
        if dtype is None or dtype == self.dtype:
            return self if r is self._r else ComplexTensor(r)
        if not isinstance(dtype, ComplexDType):
            if dtype == _dtypes.bool:
                raise _unsupported("to(%s)" % dtype)
            _warn_discarding_imaginary()
            real = r.select(-1, 0)
            return real.to(dtype) if real.dtype != dtype else real.clone()
        return ComplexTensor(r.to(dtype.real))

    def type_as(self, other):
        return self.to(other.dtype)

    def cpu(self):
        return self

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
        full = []
        for k in key:
            if k is Ellipsis:
                full.extend([slice(None)] * (self.ndim - consumed))
            else:
                full.append(k)
        if Ellipsis not in key:
            full.extend([slice(None)] * (self.ndim - consumed))
        return ComplexTensor(self._r[tuple(full) + (slice(None),)])

    def numpy(self):
        r = self._r.detach()
        return (r if r.is_contiguous() else r.contiguous()).numpy().view(
            np.complex64 if r.dtype == _dtypes.float32 else np.complex128)[..., 0]

    def tolist(self):
        return self.numpy().tolist()

    def copy_(self, src):
        self._r.copy_(_parts(src, self._r.dtype))
        return self

    # ---- arithmetic -------------------------------------------------------------------------------------
    def _pair(self):
        return self._r.select(-1, 0), self._r.select(-1, 1)

    def _with_real(self, other):
        """self's parts and the real tensor `other` in the real dtype of torch's result type (an integer tensor
        takes self's complex dtype, a float one keeps its precision next to a 0-d complex: int64 [2] + complex128
        0-d is complex128, float32 [2] + complex128 0-d complex64)."""
        from ._promotion import result_type
        real = result_type(self, other).to_real()
        return (self._r if self._r.dtype == real else self._r.to(real)), (other if other.dtype == real else
                                                                          other.to(real))

    def __mul__(self, other):
        a, b = self._pair()
        if isinstance(other, ComplexTensor):
            c, d = other._pair()
            return _from_parts(a * c - b * d, a * d + b * c)
        if isinstance(other, builtins.complex):
            return _from_parts(a * other.real - b * other.imag, a * other.imag + b * other.real)
        if isinstance(other, Tensor):
            r, other = self._with_real(other)
            return ComplexTensor(r * other.unsqueeze(-1))
        if not isinstance(other, numbers.Real):
            return NotImplemented
        return ComplexTensor(self._r * other)

    __rmul__ = __mul__

    def __add__(self, other):
        if isinstance(other, Tensor):  # a real tensor adds to the real parts
            r, other = self._with_real(other)
            a, b = r.select(-1, 0), r.select(-1, 1)
            return _from_parts(a + other, b + other * 0.0)
        if not isinstance(other, (ComplexTensor, numbers.Number)):
            return NotImplemented
        return ComplexTensor(self._r + _parts(other, self._r.dtype))

    __radd__ = __add__

    def __neg__(self):
        return ComplexTensor(-self._r)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def conj(self):
        a, b = self._pair()
        return _from_parts(a, -b)

    def __truediv__(self, other):
        if isinstance(other, ComplexTensor):
            return other.__rtruediv__(self)
        if isinstance(other, builtins.complex):
            return self / ComplexTensor(_parts(other, self._r.dtype))
        if isinstance(other, Tensor):
            r, other = self._with_real(other)
            return ComplexTensor(r / other.unsqueeze(-1))
        if isinstance(other, numbers.Real):
            return ComplexTensor(self._r / other)
        return NotImplemented

    def __rtruediv__(self, other):  # other / self = other · conj(self) / |self|²
        if isinstance(other, (ComplexTensor, Tensor, numbers.Number)):
            a, b = self._pair()
            return (self.conj() * other) * (1.0 / (a * a + b * b))
        return NotImplemented

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
            r, other = self._with_real(other)
            return (r.select(-1, 0), r.select(-1, 1)), (other, 0.0)
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

    __hash__ = object.__hash__  # (defining __eq__ would drop it) identity, as a torch tensor's

    def abs(self):
        a, b = self._pair()
        return (a * a + b * b).sqrt()

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


_warned_imaginary = []  # torch's TORCH_WARN_ONCE: the warning once per process


def _warn_discarding_imaginary():
    if not _warned_imaginary:
        import warnings
        _warned_imaginary.append(True)
        warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)


def _from_parts(re, im):
    return ComplexTensor(_C._functional.stack([re, im], -1))


def _parts(x, dtype):
    """x as interleaved real parts [..., 2] in `dtype` (a ComplexTensor, a complex number or a real one)."""
    if isinstance(x, ComplexTensor):
        return x._r if x._r.dtype == dtype else x._r.to(dtype)
    z = builtins.complex(x)
    return _C._from_numpy(np.array([z.real, z.imag], np.float64)).to(dtype)


# ---- torch functions ----------------------------------------------------------------------------------

@_float32_under_autocast
def view_as_complex(input):
    if isinstance(input, ComplexTensor):
        raise RuntimeError("view_as_complex is only supported for floating point tensors, but got a tensor of "
                           "scalar type: %s" % input.dtype)
    if input.dtype not in _OF_REAL:
        raise RuntimeError("view_as_complex is only supported for float and double tensors, but got a tensor "
                           "of scalar type: %s" % input.dtype)
    if input.dim() == 0 or input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.stride()[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    return ComplexTensor(input)


def view_as_real(input):
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return input._r


@_float32_under_autocast
def polar(abs, angle):  # noqa: A002 (torch's argument name)
    if abs.dtype != angle.dtype or abs.dtype not in _OF_REAL:
        raise TypeError("polar: expected abs and angle of the same float or double dtype, got %s and %s"
                        % (abs.dtype, angle.dtype))
    return _from_parts(abs * angle.cos(), abs * angle.sin())


def complex(real, imag):  # noqa: A001 (torch.complex)
    if real.dtype != imag.dtype or real.dtype not in _OF_REAL:
        raise RuntimeError("Expected both inputs to be Half, Float or Double tensors but got %s and %s"
                           % (real.dtype, imag.dtype))
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
