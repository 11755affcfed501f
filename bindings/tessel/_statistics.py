"""torch's statistics and window functions for tessel's namespace (installed by tessel/_namespace.py): cov (with
frequency and observation weights, differentiable), corrcoef, nanmedian and nanquantile (over the non-NaN
entries, through sort so the values keep their gradient), histogram (host numpy; no gradient, as torch), and
the hann / hamming / blackman / bartlett / kaiser windows (host numpy in float64, then the dtype)."""
import builtins
import math

import numpy as np

from . import _C, _dtypes, return_types
from ._tensor import zero_dim_as_vector
from ._autocast_policy import float32_under_autocast as _float32_under_autocast

Tensor = _C.Tensor
_float, _int = builtins.float, builtins.int


def _name(d):
    from ._namespace import _name as name
    return name(d)


# ---- statistics -----------------------------------------------------------------------------------------

def cov(input, *, correction=1, fweights=None, aweights=None):
    """torch.cov: the covariance of the variables in input's rows (observations in columns), with integer
    frequency weights and/or observation weights and the given correction."""
    if input.dim() > 2:
        raise ValueError("cov(): expected input to have two or fewer dimensions but got an input with %d dimensions"
                         % input.dim())
    x = input if input.dim() == 2 else input.reshape(1, -1)
    if not (x.dtype.is_floating_point or x.dtype.is_complex):  # (a complex one keeps its imaginary part)
        x = x.to(_dtypes.float32)
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights.to(x.dtype)
    if aweights is not None:
        w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
    xc = x - (x.mean(1, True) if w is None else (x * w).sum(1, True) / w.sum())
    xt = xc.transpose(0, 1).conj() if x.dtype.is_complex else xc.transpose(0, 1)  # (torch's: the adjoint)
    if w is None:
        out = xc.matmul(xt) / builtins.max(_float(n) - correction, 0.0)  # <= 0: inf / NaN, as torch
    else:  # the normalization a tensor of the weights, so their gradient has its part (it was a constant)
        w_sum = w.sum()
        norm = w_sum - correction if aweights is None or correction == 0 else \
            w_sum - correction * (w * aweights.to(x.dtype)).sum() / w_sum  # numpy's / torch's rule for aweights
        norm = _C._functional.where(norm <= 0, _C._full([], 0.0, norm.dtype), norm)
        out = (xc * w).matmul(xt) / norm
    return out.squeeze() if input.dim() < 2 else out


def corrcoef(input):
    """torch.corrcoef: cov / sqrt(diag ⊗ diag), clipped to [-1, 1]."""
    c = cov(input)
    if c.dim() == 0:
        return c / c
    if c.dtype.is_complex:  # torch's: the real diagonal's roots, each part clipped
        from ._complex import complex as joined
        d = c.diagonal().real.sqrt()
        c = c / d.unsqueeze(1) / d.unsqueeze(0)
        return joined(c.real.clamp(-1, 1), c.imag.clamp(-1, 1))
    d = c.diagonal().sqrt()
    return (c / d.unsqueeze(1) / d.unsqueeze(0)).clamp(-1, 1)


def _nan_sorted(x, dim):
    """x sorted along dim with NaN last, the sort's indices, and the count of non-NaN entries (keepdim)."""
    nan = x.detach().isnan()
    big = _C._full([], _float("inf"), x.dtype)
    keyed = _C._functional.where(nan, big + 0 * x.detach(), x.detach())
    # order by (is NaN, value): a stable sort by value after NaN became +inf, then NaN after real +inf
    order = keyed.argsort(dim, stable=True)
    nan_sorted = nan.to(_dtypes.int32).gather(dim, order)
    order = order.gather(dim, nan_sorted.argsort(dim, stable=True))
    count = (~nan).to(_dtypes.int64).sum(dim, True)
    return x.gather(dim, order), order, count


_NANMEDIAN = return_types.nanmedian


def nanmedian(input, dim=None, keepdim=False):
    """torch.nanmedian: the lower median of the non-NaN entries (NaN where all are NaN); with dim, (values,
    indices)."""
    if dim is None:
        from ._order import evenly_distributed

        def whole(x):
            values, _, count = _nan_sorted(x.reshape(-1), 0)
            k = builtins.max(0, (_int(count.item()) - 1) // 2)
            return values.narrow(0, k, 1).squeeze(0) if values.numel() else x.reshape(-1).sum() * _float("nan")
        return evenly_distributed(input, whole)
    dim = dim % builtins.max(input.dim(), 1)
    if input.dim() == 0:
        return _NANMEDIAN(input, _C._full([], 0.0, _dtypes.int64))
    values, order, count = _nan_sorted(input, dim)
    k = ((count - 1).clamp(0, None)).floor_divide(2)
    v, i = values.gather(dim, k), order.gather(dim, k)
    return _NANMEDIAN(v, i) if keepdim else _NANMEDIAN(v.squeeze(dim), i.squeeze(dim))


@zero_dim_as_vector
@_float32_under_autocast
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """torch.nanquantile: quantile over the non-NaN entries of each row (NaN where a row has none)."""
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
        raise ValueError("quantile() interpolation must be one of linear, lower, higher, midpoint or nearest. Got "
                         + str(interpolation))
    qs = q.detach().numpy().reshape(-1).tolist() if isinstance(q, Tensor) else [_float(q)]
    if builtins.any(not 0.0 <= v <= 1.0 for v in qs):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")
    src, d = (input.reshape(-1), 0) if dim is None else (input, dim % input.dim())
    values, _, count = _nan_sorted(src, d)
    valid = count.gt(0)
    last = (count - 1).clamp(0, None).to(_dtypes.float64)
    outs = []
    from ._order import _q_in
    for v in qs:
        pos = last * _q_in(v, input)
        lo, hi = pos.floor(), pos.ceil()
        frac = pos - lo
        if interpolation == "lower":
            hi, frac = lo, frac * 0
        elif interpolation == "higher":
            lo, frac = hi, frac * 0
        elif interpolation == "nearest":
            near = pos.round()  # ties to even, as torch
            lo, hi, frac = near, near, frac * 0
        elif interpolation == "midpoint":
            frac = _C._functional.where(hi.ne(lo), frac * 0 + 0.5, frac * 0)
        a = values.gather(d, lo.to(_dtypes.int64))
        b = values.gather(d, hi.to(_dtypes.int64))
        out = a + (b - a) * frac.to(values.dtype)
        outs.append(_C._functional.where(valid, out, out * 0 + _float("nan")))
    from ._order import shaped_quantiles
    return shaped_quantiles(outs, q, input, dim, keepdim, d)


_HISTOGRAM = return_types.histogram


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002 (torch's name)
    """torch.histogram of a floating tensor: (hist, bin_edges) in its dtype, bins an int (equal widths over
    range, default the data's min..max) or a 1-D tensor of increasing edges; the last bin includes its right
    edge. Computed on the host (numpy.histogram, whose binning rules torch's match); no gradient, as torch."""
    if not input.dtype.is_floating_point:
        raise RuntimeError("torch.histogram: input tensor and bins tensors should have the same dtype, but got "
                           "input %s and bins Float" % _name(input.dtype))
    if input.is_distributed:
        raise NotImplementedError("torch.histogram of a DTensor: call full_tensor() first")
    x = input.detach().to(_dtypes.float64).numpy().reshape(-1)
    b = bins.detach().to(_dtypes.float64).numpy() if isinstance(bins, Tensor) else _int(bins)
    w = None if weight is None else weight.detach().to(_dtypes.float64).numpy().reshape(-1)
    if isinstance(b, _int) and range is None and x.size:
        range = (_float(x.min()), _float(x.max()))
    if isinstance(b, _int):
        # the equal-width edges as they are returned (in the input's dtype), and the binning against those: a
        # float32 0.7 fell in bin 6 of (0, 1) / 10 against float64 edges, although it equals the returned
        # edges[7] (torch's bin 7)
        exact = np.histogram_bin_edges(x, bins=b, range=range)
        b = _C._from_numpy(np.ascontiguousarray(exact)).to(input.dtype).to(_dtypes.float64).numpy()
        range = None
    hist, edges = np.histogram(x, bins=b, range=range, weights=w, density=density)
    return _HISTOGRAM(_C._from_numpy(np.ascontiguousarray(hist, dtype=np.float64)).to(input.dtype),
                      _C._from_numpy(np.ascontiguousarray(edges, dtype=np.float64)).to(input.dtype))


# ---- window functions (host, float64, then the dtype) ---------------------------------------------------

def _window(name, values_of):
    def fn(window_length, periodic=True, *args, dtype=None, layout=None, device=None, requires_grad=False,
           **kwargs):
        if window_length < 0:
            raise RuntimeError("%s requires non-negative window_length, got window_length=%d" % (name, window_length))
        if window_length == 0:
            values = np.zeros((0,))
        elif window_length == 1:
            values = np.ones((1,))
        else:
            n = window_length + 1 if periodic else window_length
            values = values_of(n, *args, **kwargs)[:window_length]
        out = _C._from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(dtype or _dtypes.default_float())
        if requires_grad:
            out.requires_grad_(True)
        return out
    fn.__name__ = name
    fn.__doc__ = "torch.%s: the window as torch defines it (periodic: the N+1-point symmetric window's first N)." \
        % name
    return fn


def _cosine_sum(coefficients):
    def values(n):
        k = np.arange(n)
        return builtins.sum(((-1) ** i) * c * np.cos(2 * math.pi * i * k / (n - 1)) for i, c in enumerate(coefficients))
    return values


hann_window = _window("hann_window", _cosine_sum((0.5, 0.5)))
hamming_window = _window("hamming_window",
                         lambda n, alpha=0.54, beta=0.46: alpha - beta * np.cos(2 * math.pi * np.arange(n) / (n - 1)))
blackman_window = _window("blackman_window", _cosine_sum((0.42, 0.5, 0.08)))
bartlett_window = _window("bartlett_window", lambda n: 1 - np.abs(2 * np.arange(n) / (n - 1) - 1))
kaiser_window = _window("kaiser_window", lambda n, beta=12.0: np.i0(
    beta * np.sqrt(np.clip(1 - (2 * np.arange(n) / (n - 1) - 1) ** 2, 0, None))) / np.i0(beta))


FUNCTIONS = dict(cov=cov, corrcoef=corrcoef, nanmedian=nanmedian, nanquantile=nanquantile, histogram=histogram,
                 hann_window=hann_window, hamming_window=hamming_window, blackman_window=blackman_window,
                 bartlett_window=bartlett_window, kaiser_window=kaiser_window)
METHODS = dict(cov=cov, corrcoef=corrcoef, nanmedian=nanmedian, nanquantile=nanquantile, histogram=histogram)
