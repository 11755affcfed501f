"""torch's order statistics, composed in Python through sort (so the values keep their gradient):
median (the lower median), kthvalue, quantile with its five interpolations; split from _extra.py by
concept. Importing it registers them in _extra's TORCH_FUNCTIONS / TENSOR_METHODS.
"""
import builtins
import math

from . import _C, _dtypes, return_types
from ._extra import TENSOR_METHODS, TORCH_FUNCTIONS, Tensor, lerp as _lerp
from ._tensor import wrap_dim, zero_dim_as_vector
from ._autocast_policy import float32_under_autocast as _float32_under_autocast

_MEDIAN = return_types.median
_KTHVALUE = return_types.kthvalue


def _kth_along(x, k, dim, keepdim, kind, nan_wins=False):
    """The k-th smallest (0-based) along dim and its index, through sort (values keep the gradient); with
    nan_wins (torch's median), a row holding NaN gives its first NaN (sort puts NaNs last)."""
    dim = dim % builtins.max(x.dim(), 1)
    if x.dim() == 0:
        return kind(x, _C._full([], 0.0, _dtypes.int64))
    values, indices = x.sort(dim)
    if nan_wins and x.dtype.is_floating_point:
        n = values.shape[dim]
        nans = values.isnan().sum(dim, keepdim=True)
        pos = _C._functional.where(nans > 0, n - nans, nans * 0 + k)
        v, i = values.gather(dim, pos), indices.gather(dim, pos)
    else:
        v, i = values.narrow(dim, k, 1), indices.narrow(dim, k, 1)
    return kind(v, i) if keepdim else kind(v.squeeze(dim), i.squeeze(dim))


class _EvenlyDistributed:
    """torch's evenly_distribute_backward for the full reductions max() / min() / median() / nanmedian(): the
    gradient split evenly among the entries equal to the result (its NaNs when the result is NaN), not given to
    one of them (ties) nor lost (a NaN result: it made every gradient NaN)."""
    _fn = None

    @classmethod
    def apply(cls, x, value):
        if cls._fn is None:
            from .autograd import Function

            class Evenly(Function):
                @staticmethod
                def forward(ctx, x, value):
                    ctx.save_for_backward(x, value)
                    return value.clone()

                @staticmethod
                def backward(ctx, g):
                    x, value = ctx.saved_tensors
                    mask = x.isnan() if bool(value.isnan()) else x == value
                    mask = mask.to(g.dtype)
                    return mask * (g / mask.sum()), None
            cls._fn = Evenly
        return cls._fn.apply(x, value)


def evenly_distributed(x, reduce):
    """reduce(x) (a 0-d max / min / median of x) with the gradient torch's evenly_distribute_backward gives."""
    if not (_C.is_grad_enabled() and x.requires_grad and x.dtype.is_floating_point):
        return reduce(x)
    with _C._GradMode(False):
        value = reduce(x.detach())
    return _EvenlyDistributed.apply(x, value)


@zero_dim_as_vector
def median(x, dim=None, keepdim=False):
    """torch.median: the lower median ((n - 1) // 2-th smallest), NaN where the values hold NaN (as torch;
    nanmedian skips them); with dim, (values, indices)."""
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            return _C._full([], math.nan, x.dtype)
        return evenly_distributed(flat, lambda f: _kth_along(f, (f.shape[0] - 1) // 2, 0, False, _MEDIAN,
                                                             nan_wins=True).values)
    return _kth_along(x, (x.shape[dim] - 1) // 2, dim, keepdim, _MEDIAN, nan_wins=True)


def kthvalue(x, k, dim=-1, keepdim=False):
    """torch.kthvalue: the k-th smallest (1-based) along dim, (values, indices)."""
    d = wrap_dim(dim, x.dim())  # (x.shape[dim] raised "tuple index out of range")
    n = x.shape[d] if x.dim() else 1
    if n == 0:
        raise IndexError("kthvalue(): Expected reduction dim %d to have non-zero size." % d)
    if not 1 <= k <= n:
        raise RuntimeError("kthvalue(): selected number k out of range for dimension %d" % d)
    return _kth_along(x, k - 1, dim, keepdim, _KTHVALUE)


@zero_dim_as_vector
@_float32_under_autocast
def quantile(x, q, dim=None, keepdim=False, *, interpolation="linear"):
    """torch.quantile: q in [0, 1] (a number or a 1-D tensor, whose values become the leading dim);
    interpolation linear / lower / higher / nearest (ties to even) / midpoint between sorted neighbours; NaN
    where the values hold NaN (nanquantile skips them)."""
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
        raise ValueError("quantile() interpolation must be one of linear, lower, higher, midpoint or nearest. Got "
                         + str(interpolation))
    qs = q.detach().numpy().reshape(-1).tolist() if isinstance(q, Tensor) else [builtins.float(q)]
    if builtins.any(not 0.0 <= v <= 1.0 for v in qs):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")
    if dim is None:
        src, d = x.reshape(-1), 0
    else:
        src, d = x, dim % x.dim()
    values = src.sort(d)[0]
    n = values.shape[d]
    has_nan = values.narrow(d, n - 1, 1).isnan()  # NaNs sort last: a row holding one gives NaN (torch's rank)
    outs = []
    for v in qs:
        pos = _q_in(v, x) * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        frac = pos - lo
        if interpolation == "lower" or (interpolation == "nearest" and builtins.round(pos) == lo):
            hi, frac = lo, 0.0
        elif interpolation in ("higher", "nearest"):
            lo, frac = hi, 0.0
        elif interpolation == "midpoint":
            frac = 0.5
        a, b = values.narrow(d, lo, 1), values.narrow(d, hi, 1)
        if interpolation in ("linear", "midpoint"):  # torch's lerp even at a whole rank: inf next to -inf is NaN
            a = _lerp(a, b, frac)
        outs.append(_C._functional.where(has_nan, _C._full([], math.nan, a.dtype), a))
    return shaped_quantiles(outs, q, x, dim, keepdim, d)


def _q_in(v, x):
    """q as torch takes it: in the input's dtype (float32's 0.2 is 0.20000000298, so the rank 0.2 · 5 is just
    above 1 and 'higher' takes 2), the rank then computed in double."""
    import numpy as np
    if x.dtype == _dtypes.float16:
        return float(np.float16(v))
    return float(np.float32(v)) if x.dtype in (_dtypes.float32, _dtypes.bfloat16) else v


def shaped_quantiles(outs, q, x, dim, keepdim, d):
    """quantile's per-q results (each kept along d of the sorted input) shaped as torch returns them: dim=None
    gives 0-d results (keepdim: all-ones shape), otherwise d squeezed unless keepdim; a 1-D q stacks them first."""
    shaped = []
    for out in outs:
        if dim is None:
            out = out.reshape([1] * x.dim()) if keepdim else out.reshape([])
        elif not keepdim:
            out = out.squeeze(d)
        shaped.append(out)
    if isinstance(q, Tensor) and q.dim() > 0:
        return _C._functional.stack(shaped, 0)
    return shaped[0]


for _name, _fn in dict(median=median, kthvalue=kthvalue, quantile=quantile).items():
    TORCH_FUNCTIONS[_name] = TENSOR_METHODS[_name] = _fn
