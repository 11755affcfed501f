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

from . import _C
from ._complex import ComplexTensor, _from_parts
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
        z = re.detach().to(_C.dtype.float64).numpy() + 1j * im.detach().to(_C.dtype.float64).numpy()
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
        raise ValueError('Invalid normalization mode: "%s"' % norm)


def _scale(norm, n, inverse):
    norm = norm or "backward"
    if norm == "ortho":
        return 1 / math.sqrt(n)
    if (norm == "backward") == inverse:
        return 1 / n
    return 1.0


def _parts(x):
    if isinstance(x, ComplexTensor):
        return x.real, x.imag
    if not isinstance(x, Tensor):
        raise TypeError("torch.fft expects a Tensor, got %s" % type(x).__name__)
    re = x if x.dtype.is_floating_point else x.to(_C.dtype.float32)
    return re, re * 0


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
    dim = dim % re.dim()
    re, im = _resize(re, n, dim), _resize(im, n, dim)
    length = re.shape[dim]
    re, im = re.movedim(dim, -1), im.movedim(dim, -1)
    out_re, out_im = _DFT.apply(re, im, 1 if inverse else -1)
    scale = _scale(norm, length, inverse)
    if scale != 1.0:
        out_re, out_im = out_re * scale, out_im * scale
    return out_re.movedim(-1, dim), out_im.movedim(-1, dim)


def fft(input, n=None, dim=-1, norm=None):
    """torch.fft.fft: the 1-D DFT along dim (complex output)."""
    return _from_parts(*_c2c(*_parts(input), n, dim, norm, False))


def ifft(input, n=None, dim=-1, norm=None):
    """torch.fft.ifft: the inverse DFT along dim."""
    return _from_parts(*_c2c(*_parts(input), n, dim, norm, True))


def rfft(input, n=None, dim=-1, norm=None):
    """torch.fft.rfft: the DFT of a real signal, its n // 2 + 1 non-negative-frequency bins."""
    if isinstance(input, ComplexTensor):
        raise RuntimeError("rfft expects a real input tensor, but got ComplexFloat")
    re, im = _c2c(*_parts(input), n, dim, norm, False)
    dim = dim % re.dim()
    keep = re.shape[dim] // 2 + 1
    return _from_parts(re.narrow(dim, 0, keep), im.narrow(dim, 0, keep))


def irfft(input, n=None, dim=-1, norm=None):
    """torch.fft.irfft: the real signal of length n (default 2·(bins - 1)) whose rfft is input."""
    re, im = _parts(input)
    dim = dim % re.dim()
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
    re, im = _parts(input)
    return irfft(_from_parts(re, -im), n, dim, _OPPOSITE[norm])


def ihfft(input, n=None, dim=-1, norm=None):
    """torch.fft.ihfft: the inverse of hfft (the conjugate half spectrum of a real signal)."""
    spectrum = rfft(input, n, dim, _OPPOSITE[norm])
    return _from_parts(spectrum.real, -spectrum.imag)


def _dims_and_sizes(input, s, dim, default_last):
    ndim = input.dim()
    if dim is None:
        dim = list(range(ndim - (len(s) if s is not None else ndim), ndim)) if default_last is None else default_last
    dims = [d % ndim for d in ([dim] if isinstance(dim, int) else dim)]  # an int: that one dim, as torch
    sizes = ([s] if isinstance(s, int) else list(s)) if s is not None else [None] * len(dims)
    if len(sizes) != len(dims):
        raise RuntimeError("When given, dim and shape arguments must have the same length")
    return dims, sizes


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
    dims, sizes = _dims_and_sizes(input, s, dim, None)
    out = rfft(input, sizes[-1], dims[-1], norm)
    return _from_parts(*_c2c_dims(out.real, out.imag, dims[:-1], sizes[:-1], norm, False))


def irfftn(input, s=None, dim=None, norm=None):
    """torch.fft.irfftn: ifft along all but the last of dim, then irfft along it."""
    dims, sizes = _dims_and_sizes(input, s, dim, None)
    re, im = _c2c_dims(*_parts(input), dims[:-1], sizes[:-1], norm, True)
    return irfft(_from_parts(re, im), sizes[-1], dims[-1], norm)


def hfftn(input, s=None, dim=None, norm=None):
    """torch.fft.hfftn: the n-dimensional DFT of a Hermitian-symmetric signal given by its half (real output):
    irfftn of the conjugate with the opposite normalization, as hfft is."""
    re, im = _parts(input)
    return irfftn(_from_parts(re, -im), s, dim, _OPPOSITE[norm])


def ihfftn(input, s=None, dim=None, norm=None):
    """torch.fft.ihfftn: the inverse of hfftn (the conjugate half spectrum of a real signal)."""
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


def _from_values(values, dtype, requires_grad):
    out = _C._from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(dtype or _C.dtype.float32)
    if requires_grad:
        out.requires_grad_(True)
    return out


def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False, out=None):
    """torch.fft.fftfreq: the sample frequencies [0, 1, ..., n/2 - 1, -n/2, ..., -1] / (d·n)."""
    return _from_values(np.fft.fftfreq(n, d), dtype, requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False, out=None):
    """torch.fft.rfftfreq: [0, 1, ..., n // 2] / (d·n)."""
    return _from_values(np.fft.rfftfreq(n, d), dtype, requires_grad)


def _shift(input, dim, sign):
    x_dims = list(range(input.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
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
