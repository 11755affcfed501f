"""tessel.fft: torch.fft's transforms — fft / ifft, rfft / irfft, hfft / ihfft and their 2-D and n-D forms,
fftfreq / rfftfreq, fftshift / ifftshift — with torch's n (pad or trim), dim and norm ("backward", "ortho",
"forward") arguments. Complex results are tessel ComplexTensors (tessel/_complex.py).

One autograd Function does the transforming: an unnormalized complex-to-complex DFT along the last dim, computed
by numpy's FFT on the host (O(n log n) for any n), whose backward is the opposite-sign DFT of the gradient (the
DFT's adjoint) through the same Function, so second derivatives work. Everything else is tessel ops around it:
rfft is fft's first n//2 + 1 bins, irfft rebuilds the Hermitian spectrum (conj of the mirrored bins) and keeps
the real part, which gives torch's gradients (the mirrored bins' doubling, Im X₀ and Im X_{n/2} unused). A
DTensor input raises (full_tensor() first), as the host linalg does.

    spectrum = tessel.fft.rfft(signal)                    # [..., n // 2 + 1], complex
    smoothed = tessel.fft.irfft(spectrum * kernel, n=signal.shape[-1])
"""
import math

import numpy as np

from . import _C, _dtypes
from ._complex import ComplexTensor, _from_parts
from ._linalg_checks import dim_index as _dim_index, name as _dtype_name
from .autograd import Function

Tensor = _C.Tensor
_NORMS = (None, "backward", "ortho", "forward")
# hfft / ihfft are irfft / rfft of the conjugate with the normalization on the other side
_OPPOSITE = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


class _DFT(Function):
    """(re, im) -> the unnormalized DFT along the last dim, sign -1 (forward) or +1 (inverse)."""

    @staticmethod
    def forward(ctx, re, im, sign):
        ctx.sign = sign
        if re.is_distributed or im.is_distributed:
            raise NotImplementedError("torch.fft of a DTensor: call full_tensor() first")
        z = np.empty(tuple(re.shape), np.complex128)  # (re + 1j·im made inf + 0j NaN: 1j·0 is fine, but inf·1j
        z.real, z.imag = re.detach().to(_C.dtype.float64).numpy(), im.detach().to(_C.dtype.float64).numpy()  # is not)
        out = np.fft.fft(z, axis=-1) if sign < 0 else np.fft.ifft(z, axis=-1) * z.shape[-1]
        back = (_C._from_numpy(np.ascontiguousarray(out.real)).to(re.dtype),
                _C._from_numpy(np.ascontiguousarray(out.imag)).to(re.dtype))
        return back

    @staticmethod
    def backward(ctx, g_re, g_im):
        # y = W x with W symmetric: the adjoint of W is conj(W), the DFT of the opposite sign
        re, im = _DFT.apply(g_re, g_im, -ctx.sign)
        return re, im, None


def _check_norm(norm):
    if norm not in _NORMS:
        raise RuntimeError('Invalid normalization mode: "%s"' % norm)


def _scale(norm, n, inverse):
    norm = norm or "backward"
    if norm == "ortho":
        return 1 / math.sqrt(n)
    if (norm == "backward") == inverse:
        return 1 / n
    return 1.0


def _parts(x):
    """(real part, imaginary part); an integer input in the default float dtype, as torch's; the imaginary part of a
    real one zeros (x·0 was NaN at ±inf, and rfft([inf, 0, 0, 0]) NaN where torch's is inf)."""
    if isinstance(x, ComplexTensor):
        return x.real, x.imag
    if not isinstance(x, Tensor):
        raise TypeError("torch.fft expects a Tensor, got %s" % type(x).__name__)
    if x.dtype in _dtypes.REDUCED:  # torch's CPU FFT has no 16-bit kernels (autocast casts them up first)
        raise NotImplementedError("Unsupported dtype %s" % _dtype_name(x.dtype))
    re = x if x.dtype.is_floating_point else x.to(_dtypes.default_float())
    return re, _C._full(list(re.shape), 0.0, re.dtype)


def _real_only(input, name):
    if isinstance(input, ComplexTensor):
        raise TypeError("%s expects a real input tensor, but got %s" % (name, _dtype_name(input.dtype)))


def _one_dim(dim, ndim, name):
    """torch's single-dim argument: an int, wrapped with IndexError (a 0-d input has no dim to name)."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError("fft_%s(): argument 'dim' must be int, not %s" % (name, type(dim).__name__))
    if ndim == 0:
        raise IndexError("Dimension specified as %d but tensor has no dimensions" % dim)
    return _dim_index(dim, ndim)


def _resize(t, n, dim):
    """t trimmed or zero-padded along dim to length n."""
    size = t.shape[dim]
    if n is None or n == size:
        return t
    if n < 1:
        raise RuntimeError("Invalid number of data points (%d) specified" % n)
    if n < size:
        return t.narrow(dim, 0, n)
    shape = list(t.shape)
    shape[dim] = n - size
    return _C._functional.cat([t, _C._full(shape, 0.0, t.dtype)], dim)


def _c2c(re, im, n, dim, norm, inverse):
    _check_norm(norm)
    dim = _dim_index(dim, re.dim())
    re, im = _resize(re, n, dim), _resize(im, n, dim)
    length = re.shape[dim]
    if length < 1:
        raise RuntimeError("Invalid number of data points (%d) specified" % length)
    re, im = re.movedim(dim, -1), im.movedim(dim, -1)
    out_re, out_im = _DFT.apply(re, im, 1 if inverse else -1)
    scale = _scale(norm, length, inverse)
    if scale != 1.0:
        out_re, out_im = out_re * scale, out_im * scale
    return out_re.movedim(-1, dim), out_im.movedim(-1, dim)


def fft(input, n=None, dim=-1, norm=None):
    """torch.fft.fft: the 1-D DFT along dim (complex output)."""
    _one_dim(dim, input.dim(), "fft")
    return _from_parts(*_c2c(*_parts(input), n, dim, norm, False))


def ifft(input, n=None, dim=-1, norm=None):
    """torch.fft.ifft: the inverse DFT along dim."""
    _one_dim(dim, input.dim(), "ifft")
    return _from_parts(*_c2c(*_parts(input), n, dim, norm, True))


def rfft(input, n=None, dim=-1, norm=None):
    """torch.fft.rfft: the DFT of a real signal, its n // 2 + 1 non-negative-frequency bins."""
    return _rfft(input, n, dim, norm, "rfft")


def _rfft(input, n, dim, norm, name):
    _real_only(input, name)
    dim = _one_dim(dim, input.dim(), name)
    re, im = _c2c(*_parts(input), n, dim, norm, False)
    keep = re.shape[dim] // 2 + 1
    return _from_parts(re.narrow(dim, 0, keep), im.narrow(dim, 0, keep))


def irfft(input, n=None, dim=-1, norm=None):
    """torch.fft.irfft: the real signal of length n (default 2·(bins - 1)) whose rfft is input."""
    _check_norm(norm)
    dim = _one_dim(dim, input.dim(), "irfft")
    re, im = _parts(input)
    bins = re.shape[dim]
    n = 2 * (bins - 1) if n is None else n
    if n < 1:
        raise RuntimeError("Invalid number of data points (%d) specified" % n)
    half = n // 2 + 1
    re, im = _resize(re, half, dim), _resize(im, half, dim)
    mirrored = n - half  # bins n-1 .. half: conj of bins 1 .. n - half, reversed
    if mirrored > 0:
        tail_re = re.narrow(dim, 1, mirrored).flip([dim])
        tail_im = -im.narrow(dim, 1, mirrored).flip([dim])
        re, im = _C._functional.cat([re, tail_re], dim), _C._functional.cat([im, tail_im], dim)
    out_re, _ = _c2c(re, im, None, dim, norm, True)
    return out_re


def hfft(input, n=None, dim=-1, norm=None):
    """torch.fft.hfft: the DFT of a Hermitian-symmetric signal given by its first half (real output)."""
    _check_norm(norm)
    _one_dim(dim, input.dim(), "hfft")
    re, im = _parts(input)
    return irfft(_from_parts(re, -im), n, dim, _OPPOSITE[norm])


def ihfft(input, n=None, dim=-1, norm=None):
    """torch.fft.ihfft: the inverse of hfft (the conjugate half spectrum of a real signal)."""
    _check_norm(norm)
    spectrum = _rfft(input, n, dim, _OPPOSITE[norm], "ihfft")
    return _from_parts(spectrum.real, -spectrum.imag)


def _dims_and_sizes(input, s, dim, default_last, name=None):
    """(dims, sizes) of an n-D transform with torch's checks: dims wrapped (IndexError) and unique, s no longer than
    the input's dims, an s entry -1 meaning that dim's own size; name: the real transforms' need of a dim."""
    ndim = input.dim()
    if s is not None and dim is None and len([s] if isinstance(s, int) else s) > ndim:
        raise RuntimeError("Got shape with %d values but input tensor only has %d dimensions."
                           % (len([s] if isinstance(s, int) else s), ndim))
    if dim is None:
        dim = list(range(ndim - (len(s) if s is not None else ndim), ndim)) if default_last is None else default_last
    named = [dim] if isinstance(dim, int) else list(dim)  # an int: that one dim, as torch
    if ndim == 0 and named:
        raise IndexError("Dimension specified as %d but tensor has no dimensions" % named[0])
    dims = [_dim_index(d, ndim) for d in named]
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    sizes = ([s] if isinstance(s, int) else list(s)) if s is not None else [None] * len(dims)
    if len(sizes) != len(dims):
        raise RuntimeError("When given, dim and shape arguments must have the same length")
    if name is not None and not dims:
        raise RuntimeError("%s must transform at least one axis" % name)
    return dims, [None if n == -1 else n for n in sizes]


def _c2c_dims(re, im, dims, sizes, norm, inverse):
    for d, n in zip(dims, sizes):
        re, im = _c2c(re, im, n, d, norm, inverse)
    return re, im


def fftn(input, s=None, dim=None, norm=None):
    """torch.fft.fftn: fft along each of dim (all dims by default; the last len(s) with s)."""
    dims, sizes = _dims_and_sizes(input, s, dim, None)
    return _from_parts(*_c2c_dims(*_parts(input), dims, sizes, norm, False))


def ifftn(input, s=None, dim=None, norm=None):
    dims, sizes = _dims_and_sizes(input, s, dim, None)
    return _from_parts(*_c2c_dims(*_parts(input), dims, sizes, norm, True))


def rfftn(input, s=None, dim=None, norm=None):
    """torch.fft.rfftn: rfft along the last of dim, fft along the others."""
    if isinstance(input, ComplexTensor):
        raise TypeError("rfftn expects a real-valued input tensor, but got %s" % _dtype_name(input.dtype))
    dims, sizes = _dims_and_sizes(input, s, dim, None, "rfftn")
    out = rfft(input, sizes[-1], dims[-1], norm)
    return _from_parts(*_c2c_dims(out.real, out.imag, dims[:-1], sizes[:-1], norm, False))


def irfftn(input, s=None, dim=None, norm=None):
    """torch.fft.irfftn: ifft along all but the last of dim, then irfft along it."""
    dims, sizes = _dims_and_sizes(input, s, dim, None, "irfftn")
    re, im = _c2c_dims(*_parts(input), dims[:-1], sizes[:-1], norm, True)
    return irfft(_from_parts(re, im), sizes[-1], dims[-1], norm)


def hfftn(input, s=None, dim=None, norm=None):
    """torch.fft.hfftn: the n-dimensional DFT of a Hermitian-symmetric signal given by its half (real output):
    irfftn of the conjugate with the opposite normalization, as hfft is."""
    _check_norm(norm)
    _dims_and_sizes(input, s, dim, None, "hfftn")
    re, im = _parts(input)
    return irfftn(_from_parts(re, -im), s, dim, _OPPOSITE[norm])


def ihfftn(input, s=None, dim=None, norm=None):
    """torch.fft.ihfftn: the inverse of hfftn (the conjugate half spectrum of a real signal)."""
    if isinstance(input, ComplexTensor):
        raise TypeError("Only supports floating-point dtypes, but found: %s" % _dtype_name(input.dtype))
    _check_norm(norm)
    _dims_and_sizes(input, s, dim, None, "ihfftn")
    spectrum = rfftn(input, s, dim, _OPPOSITE[norm])
    return _from_parts(spectrum.real, -spectrum.imag)


def hfft2(input, s=None, dim=(-2, -1), norm=None):
    return hfftn(input, s, dim, norm)


def ihfft2(input, s=None, dim=(-2, -1), norm=None):
    return ihfftn(input, s, dim, norm)


def fft2(input, s=None, dim=(-2, -1), norm=None):
    return fftn(input, s, dim, norm)


def ifft2(input, s=None, dim=(-2, -1), norm=None):
    return ifftn(input, s, dim, norm)


def rfft2(input, s=None, dim=(-2, -1), norm=None):
    return rfftn(input, s, dim, norm)


def irfft2(input, s=None, dim=(-2, -1), norm=None):
    return irfftn(input, s, dim, norm)


def _frequencies(name, n, d, dtype, requires_grad, count, wrap):
    """torch's (r)fftfreq: arange(count) (the upper half less n with wrap) / (n·d) in IEEE arithmetic (n = 0 and
    d = 0 give NaN and inf, as torch's), in dtype (the default float dtype unless given)."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError("fft_%s(): argument 'n' (position 1) must be int, not %s" % (name, type(n).__name__))
    dtype = dtype or _dtypes.default_float()
    if getattr(dtype, "is_floating_point", True) is False:
        raise RuntimeError("%s requires a floating point or complex dtype" % name)
    if count < 0:
        raise RuntimeError("Trying to create tensor with negative dimension %d: [%d]" % (count, count))
    values = np.arange(count, dtype=np.float64)
    if wrap:
        values[(n + 1) // 2:] -= n
    with np.errstate(divide="ignore", invalid="ignore"):
        values = values / (np.float64(n) * np.float64(d))
    if getattr(dtype, "is_complex", False):  # a complex dtype: the frequencies with zero imaginary parts
        from ._complex import from_numpy
        out = from_numpy(values.astype(np.complex128 if dtype.to_real() == _C.dtype.float64 else np.complex64))
    else:
        out = _C._from_numpy(np.ascontiguousarray(values)).to(dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False, out=None):
    """torch.fft.fftfreq: the sample frequencies [0, 1, ..., n/2 - 1, -n/2, ..., -1] / (d·n)."""
    return _frequencies("fftfreq", n, d, dtype, requires_grad, n, True)


def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False, out=None):
    """torch.fft.rfftfreq: [0, 1, ..., n // 2] / (d·n) (n // 2 truncated toward zero, as torch's C++)."""
    return _frequencies("rfftfreq", n, d, dtype, requires_grad, int(n / 2) + 1 if isinstance(n, int) else 0, False)


def _shift(input, dim, sign):
    x_dims = list(range(input.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    x_dims = [_dim_index(d, input.dim()) for d in x_dims]
    shifts = [sign * (input.shape[d] // 2) for d in x_dims]
    if isinstance(input, ComplexTensor):
        return _from_parts(input.real.roll(shifts, x_dims), input.imag.roll(shifts, x_dims))
    return input.roll(shifts, x_dims)


def fftshift(input, dim=None):
    """torch.fft.fftshift: the zero frequency moved to the centre (a roll by n // 2 along each dim)."""
    return _shift(input, dim, 1)


def ifftshift(input, dim=None):
    """torch.fft.ifftshift: fftshift's inverse (a roll by -(n // 2))."""
    return _shift(input, dim, -1)


__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _float32_list():
    """torch's CPU autocast float32 list holds the fft functions: bfloat16 / float16 inputs are cast up first."""
    from ._autocast_policy import float32_under_autocast
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
                 "rfftn", "irfftn", "hfftn", "ihfftn", "hfft2", "ihfft2"):
        globals()[name] = float32_under_autocast(globals()[name])


_float32_list()
