"""torch.linspace with torch's CPU values, bit for bit (numpy's linspace differed in the last bit for ~40% of
float32 values: linspace(0, 1, 7)[4] was 0.6666666865, torch's 0.6666666269).

torch's kernel computes step = (end - start) / (steps - 1) in the output's type and every value from the nearer
end: start + step·i for the first half, end - step·(steps - 1 - i) for the second. How it rounds depends on the
dtype, as its compiled kernels do (each rule checked against torch 2.15 on ~1M values):
    float32, float64     one fused multiply-add, fma(±step, k, start or end), in the dtype
    bfloat16             start and end rounded to bfloat16, step and the fma in float32, rounded once at the end
    float16              the same without the fused multiply-add (a product and a sum in float32)
    integer dtypes       step in float64, the fma in float64, truncated towards zero
numpy has no fused multiply-add: the exact one below rounds the exact product-sum once, through round-to-odd
(Boldo and Melquiond's emulation, exact for float64 short of overflow and underflow).
"""
import builtins

import numpy as np

from . import _C, _dtypes


def _two_sum(x, y):
    s = x + y
    bp = s - x
    return s, (x - (s - bp)) + (y - bp)


def _split(x):
    c = x * 134217729.0  # Veltkamp's split: 2**27 + 1
    hi = c - (c - x)
    return hi, x - hi


def _to_odd(x, err):
    """x, the rounding to nearest of x + err, rounded to odd instead (an inexact even result steps towards err):
    rounding that once more to fewer bits then rounds the exact value correctly."""
    even = (x.view(np.int64) & 1) == 0
    return np.where((err != 0) & even, np.nextafter(x, np.where(err > 0, np.inf, -np.inf)), x)


def fma64(a, b, c):
    """a·b + c for float64 arrays with one rounding."""
    p = a * b
    (ah, al), (bh, bl) = _split(a), _split(b)
    product_error = ((ah * bh - p) + ah * bl + al * bh) + al * bl  # a·b = p + product_error exactly (Dekker)
    high, low = _two_sum(c, p)
    v, v_error = _two_sum(low, product_error)
    return high + _to_odd(v, v_error)


def fma32(a, b, c):
    """a·b + c for float32 arrays with one rounding (the product is exact in float64; the sum rounded to odd
    there, then to float32)."""
    s, e = _two_sum(a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64))
    return _to_odd(s, e).astype(np.float32)


def _bfloat16(x):
    """float32 values rounded to bfloat16's (to nearest even), as float32."""
    x = np.asarray(x, np.float32).reshape(-1)
    bits, sixteen = x.view(np.uint32).astype(np.uint64), np.uint64(16)
    rounded = (((bits + np.uint64(0x7FFF) + ((bits >> sixteen) & np.uint64(1))) >> sixteen) << sixteen)
    return np.where(np.isnan(x), x, rounded.astype(np.uint32).view(np.float32))


def _values(start, end, steps, dtype):
    """The linspace values as a numpy array of dtype's compute type."""
    i = np.arange(steps)
    first = i < steps // 2
    k = np.where(first, i, steps - 1 - i)
    if dtype in (_dtypes.float32, _dtypes.float64):
        t = np.float32 if dtype == _dtypes.float32 else np.float64
        s, e = t(start), t(end)
        step = (e - s) / t(steps - 1)
        fma = fma32 if t is np.float32 else fma64
        return fma(np.where(first, step, -step).astype(t), k.astype(t), np.where(first, s, e).astype(t))
    if dtype in _dtypes.REDUCED:
        if dtype == _dtypes.float16:
            s, e = (np.float32(np.float16(np.float32(v))) for v in (start, end))
        else:
            s, e = (_bfloat16(np.float32(v))[0] for v in (start, end))
        step = (e - s) / np.float32(steps - 1)
        kf = k.astype(np.float32)
        if dtype == _dtypes.float16:
            return np.where(first, s + step * kf, e - step * kf)
        return fma32(np.where(first, step, -step).astype(np.float32), kf, np.where(first, s, e).astype(np.float32))
    s, e = np.float64(start), np.float64(end)  # integer dtypes: integral start and end, a float64 step
    step = (e - s) / np.float64(steps - 1)
    return np.trunc(fma64(np.where(first, step, -step), k.astype(np.float64), np.where(first, s, e)))


def _number(v, name):
    if isinstance(v, _C.Tensor):
        if v.dim() != 0:
            raise RuntimeError("linspace only supports 0-dimensional start and end tensors, but got %s with %d "
                               "dimension(s)." % (name, v.dim()))
        return v.item()
    return v


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """torch.linspace: steps values from start to end (both included) in dtype (the default dtype by default),
    with torch's CPU values (see the module docstring)."""
    if device is not None:  # "meta" builds without values, "cpu" wins over an enclosing meta block (as torch's)
        from ._device import factory_device
        with factory_device(device, "linspace"):
            return linspace(start, end, steps, dtype=dtype, requires_grad=requires_grad)
    if not isinstance(steps, (builtins.int, np.integer)) or isinstance(steps, builtins.bool):
        raise TypeError("linspace(): argument 'steps' (position 3) must be int, not %s" % type(steps).__name__)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dtype = dtype or _dtypes.default_float()
    start, end = _number(start, "start"), _number(end, "end")
    if getattr(dtype, "is_complex", False) is True:  # (complex tensors: numpy's values)
        from ._tensor import tensor
        return tensor(np.linspace(start, end, steps), dtype=dtype, requires_grad=requires_grad)
    with np.errstate(over="ignore", invalid="ignore"):  # values beyond the dtype's range: inf, as torch's
        if not dtype.is_floating_point:
            start, end = builtins.int(start), builtins.int(end)  # (torch's integer kernel reads them so)
        values = np.full(steps, start, np.float64) if steps <= 1 else _values(start, end, steps, dtype)
        if dtype == _dtypes.float64:
            t = _C._from_numpy(np.asarray(values, np.float64))
        elif dtype.is_floating_point:  # float32, or float16 / bfloat16 values exact in float32 (rounded once)
            t = _C._from_numpy(np.asarray(values, np.float32))
        else:
            t = _C._from_numpy(np.asarray(values, np.int64))
        t = t if t.dtype == dtype else t.to(dtype)
    return t.requires_grad_(True) if requires_grad else t
