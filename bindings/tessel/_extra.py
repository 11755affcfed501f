"""torch functions, Tensor methods, nn.functional entries and nn modules composed from tessel's ops in
Python: each is a few bound ops (so autograd and DTensor dispatch come from them) or, for values that carry
no gradient (one_hot, nonzero, sin/cos of a tensor that does not require grad), numpy on the host.

Functions whose gradient would need an op tessel lacks (sin, cos, erf, floor, ...) refuse a tensor that
requires grad with NotImplementedError instead of returning a value with no gradient; they serve the
constant tables models build from them (rotary embeddings' cos/sin, positional encodings).
"""
import builtins
import math

import numpy as np

from . import _C, _dtypes
from ._tensor import Tensor, tensor as _tensor, zeros as _zeros


def _floating(x):
    return x if x.dtype.is_floating_point else x.float()


def _scalar_like(x, v):
    return _C._full([], float(v), x.dtype)


# ---- elementwise, composed -------------------------------------------------------------------------

def _pick(a, b, first):
    """torch's minimum / maximum: NaN wins, a tie splits the gradient 0.5 / 0.5."""
    w = _C._functional.where
    return w(isnan(a), a, w(isnan(b), b, w(a == b, (a + b) * 0.5, w(first, a, b))))


def minimum(a, b):
    return _pick(a, b, a < b) if isinstance(b, Tensor) else a.clamp(max=b)


def maximum(a, b):
    return _pick(a, b, a > b) if isinstance(b, Tensor) else a.clamp(min=b)


def square(x):
    return x * x


def reciprocal(x):
    return 1.0 / _floating(x)


def lerp(a, b, weight):
    return a + (b - a) * weight


def _softplus1(z):
    """log(1 + exp(z)), finite everywhere, with the exact gradient sigmoid(z) at 0 too (no |z| or clamp,
    whose gradient is 0 there)."""
    w = _C._functional.where
    pos = z > 0
    return (1.0 + w(pos, -z, z).exp()).log() + w(pos, z, z * 0.0)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta·x)) / beta, linear above threshold (torch's)."""
    z = x * beta
    return _C._functional.where(z > threshold, x, _softplus1(z) / beta)


def logsigmoid(x):
    return -softplus(-x)


def leaky_relu(x, negative_slope=0.01, inplace=False):
    return _C._functional.where(x > 0, x, x * negative_slope)


def elu(x, alpha=1.0, inplace=False):
    w = _C._functional.where
    pos = x > 0
    return w(pos, x, (w(pos, x * 0.0, x).exp() - 1.0) * alpha)


def mish(x, inplace=False):
    return x * softplus(x).tanh()


def hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    return x.clamp(min=min_val, max=max_val)


def relu6(x, inplace=False):
    return x.clamp(min=0.0, max=6.0)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805  # torch's constants


def selu(x, inplace=False):
    """scale (max(0, x) + min(0, alpha (exp(x) - 1))), the exp of min(x, 0) (a finite gradient at +inf)."""
    return _C._functional.where(x > 0, x, (x.clamp(max=0.0).exp() - 1.0) * _SELU_ALPHA) * _SELU_SCALE


def celu(x, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)); the exp sees min(x, 0), so +inf keeps a finite
    gradient (torch's)."""
    return _C._functional.where(x > 0, x, ((x.clamp(max=0.0) / alpha).exp() - 1.0) * alpha)


def hardsigmoid(x, inplace=False):
    return (x / 6.0 + 0.5).clamp(min=0.0, max=1.0)


def hardswish(x, inplace=False):
    return x * hardsigmoid(x)


def softsign(x):
    return x / (x.abs() + 1.0)


def threshold(x, threshold, value, inplace=False):
    """torch's x <= threshold ? value : x (NaN passes through)."""
    return _C._functional.where(x <= threshold, _scalar_like(x, value), x)


def tanhshrink(x):
    return x - x.tanh()


def softshrink(x, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, else 0 (NaN passes through)."""
    w = _C._functional.where
    return w(x > lambd, x - lambd, w(x < -lambd, x + lambd, w(x == x, x * 0.0, x)))


def hardshrink(x, lambd=0.5):
    """x where |x| > lambd, else 0 (NaN passes through)."""
    return _C._functional.where(x.abs() <= lambd, x * 0.0, x)


def prelu(x, weight):
    """max(0, x) + weight * min(0, x); weight has 1 or C entries (C: dim 1 of x, as torch)."""
    if weight.numel() > 1:
        channels = x.shape[1] if x.ndim >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError("Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               "%d and channel size = %d." % (weight.numel(), channels))
        shape = [1] * x.ndim
        shape[1] = channels
        weight = weight.reshape(*shape)
    elif x.ndim == 0:
        weight = weight.reshape(())
    return _C._functional.where(x > 0, x, x * weight)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last dim (torch's eps placement)."""
    return (x1 - x2 + eps).norm(p, -1, keepdim)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    if not (tuple(input1.shape) == tuple(input2.shape) == tuple(target.shape)):
        raise RuntimeError("margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           "input1: %s, input2: %s, target: %s " % (list(input1.shape), list(input2.shape),
                                                                   list(target.shape)))
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce(softplus(-target * input), reduction)  # log(1 + exp(-y x)), stably


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    w = _C._functional.where  # torch's formula: a target that is neither 1 nor -1 takes both terms
    zero = input * 0.0
    return _reduce(w(target != 1, (margin - input).clamp(min=0.0), zero) + w(target != -1, input, zero), reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    cos = cosine_similarity(input1, input2, dim=-1)
    w = _C._functional.where
    zero = cos * 0.0
    return _reduce(w(target == 1, 1.0 - cos, zero) + w(target == -1, (cos - margin).clamp(min=0.0), zero), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).clamp(min=0.0), reduction)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: input [N, C, *] normalized over each group of C / num_groups
    channels and the trailing dims (biased variance), then weight / bias per channel."""
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           "shape %s and num_groups=%d" % (list(input.shape), num_groups))
    x = input.reshape(n, num_groups, -1)
    centered = x - x.mean(-1, keepdim=True)
    y = (centered * ((centered * centered).mean(-1, keepdim=True) + eps).rsqrt()).reshape(*input.shape)
    return _channel_affine(y, weight, bias)


def _channel_affine(y, weight=None, bias=None):
    """y [N, C, *] scaled by weight [C] and shifted by bias [C] (either may be None), per channel."""
    shape = [1, y.shape[1]] + [1] * (y.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(*shape)
    if bias is not None:
        y = y + bias.reshape(*shape)
    return y


def glu(x, dim=-1):
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


def softmin(x, dim=None, _stacklevel=3, dtype=None):
    return _C._functional.softmax(-x, dim, 3, dtype)


def sign(x):
    one, zero = _scalar_like(x, 1.0), _scalar_like(x, 0.0)
    return _C._functional.where(x > 0, one, _C._functional.where(x < 0, -one, zero))  # 0 for 0 and NaN


def isnan(x):
    return x != x


def isfinite(x):
    return (x - x) == (x - x) if x.dtype.is_floating_point else x == x


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    big = {_dtypes.float64: np.finfo(np.float64).max, _dtypes.float16: 65504.0,
           _dtypes.bfloat16: 3.3895313892515355e38}.get(x.dtype, float(np.finfo(np.float32).max))
    out = _C._functional.where(isnan(x), _scalar_like(x, nan), x)
    out = _C._functional.where(out == math.inf, _scalar_like(x, big if posinf is None else posinf), out)
    return _C._functional.where(out == -math.inf, _scalar_like(x, -big if neginf is None else neginf), out)


def logsumexp(x, dim, keepdim=False):
    """log Σ exp over dim, shifted by the max (finite for large inputs; -inf rows stay -inf)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    m = x.detach().amax(dims, keepdim=True)
    m = _C._functional.where(isfinite(m), m, _scalar_like(m, 0.0))  # inf / -inf rows give inf / -inf
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.reshape(*[s for i, s in enumerate(out.shape) if i not in [d % x.ndim for d in dims]])


def _accumulation_input(x, dtype):
    """cumsum / prod's input: cast to dtype, else bool and integer tensors as int64 (torch's rule)."""
    if dtype is not None:
        return x.to(dtype)
    return x if x.dtype.is_floating_point or x.dtype == _dtypes.int64 else x.long()


def cumsum(x, dim, dtype=None):
    """Running sums along dim by log-step prefix adds (Hillis-Steele: out[i] += out[i - 2^k]), so NaN and
    inf stay where torch puts them and integers add exactly; bool and integer inputs give int64, as
    torch."""
    x = _accumulation_input(x, dtype)
    if x.ndim == 0:
        return x.clone()
    dim %= x.ndim
    n, out, shift = x.shape[dim], x, 1
    while shift < n:
        shape = list(out.shape)
        shape[dim] = shift
        shifted = _C._functional.cat([_C._full(shape, 0.0, out.dtype), out.narrow(dim, 0, n - shift)], dim)
        out = out + shifted
        shift *= 2
    return out


def any_(x, dim=None, keepdim=False):
    s = (x != 0).long().sum(dim, keepdim=keepdim) if dim is not None else (x != 0).long().sum()
    return s > 0


def all_(x, dim=None, keepdim=False):
    s = (x == 0).long().sum(dim, keepdim=keepdim) if dim is not None else (x == 0).long().sum()
    return s == 0


# ---- shape and indexing, composed -------------------------------------------------------------------

def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src, dst = [s % x.ndim for s in src], [d % x.ndim for d in dst]
    rest = [d for d in range(x.ndim) if d not in src]
    order = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    it = iter(rest)
    order = [o if o is not None else next(it) for o in order]
    return x.permute(*order)


def swapaxes(x, a, b):
    return x.transpose(a, b)


def unbind(x, dim=0):
    return tuple(x.select(dim, i) for i in range(x.shape[dim]))


def unflatten(x, dim, sizes):
    dim %= x.ndim
    return x.reshape(*(list(x.shape[:dim]) + list(sizes) + list(x.shape[dim + 1:])))


def index_select(x, dim, index):
    dim %= x.ndim
    return x[(builtins.slice(None),) * dim + (index.reshape(-1) if isinstance(index, Tensor) else list(index),)]


def flip(x, dims):
    out = x
    for d in ([dims] if isinstance(dims, int) else list(dims)):
        out = index_select(out, d, list(range(x.shape[d] - 1, -1, -1)))
    return out


def roll(x, shifts, dims=None):
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(*x.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    out = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        out = index_select(out, d, [(i - s) % n for i in range(n)])
    return out


def repeat(x, *sizes):
    sizes = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else list(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    x = x.reshape(*([1] * (len(sizes) - x.ndim) + list(x.shape)))
    for d, r in enumerate(sizes):
        if r != 1:
            x = _C._functional.cat([x] * r, d) if r > 0 else index_select(x, d, [])
    return x


def repeat_interleave(x, repeats, dim=None):
    if dim is None:
        x, dim = x.reshape(-1), 0
    n = x.shape[dim]
    reps = [repeats] * n if isinstance(repeats, int) else (repeats.reshape(-1).tolist() if isinstance(repeats, Tensor)
                                                             else list(repeats))
    if len(reps) == 1:  # one repeat count broadcasts, as torch
        reps = reps * n
    return index_select(x, dim, [i for i in range(n) for _ in range(reps[i])])


def take_along_dim(x, indices, dim):
    return x.gather(dim, indices)


def masked_select(x, mask):
    shape = np.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    xs = x.expand(*shape) if tuple(x.shape) != shape else x
    m = mask.expand(*shape) if tuple(mask.shape) != shape else mask
    return xs.reshape(-1)[m.reshape(-1)]


def outer(a, b):
    return a.reshape(-1, 1) * b.reshape(1, -1)


def expand_as(x, other):
    return x.expand(*other.shape)


def diag(x, diagonal=0):
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        idx = np.arange(x.shape[0])
        rows, cols = (idx, idx + diagonal) if diagonal >= 0 else (idx - diagonal, idx)
        picked = np.zeros((n, n), dtype=np.int64)  # 0: the zero in front of x; i + 1: x[i]
        picked[rows, cols] = idx + 1
        table = _C._functional.cat([_zeros(1, dtype=x.dtype), x], 0)
        return table[_tensor(picked)]
    rows = np.arange(max(0, -diagonal), min(x.shape[0], x.shape[1] - diagonal))
    return x[rows.tolist(), (rows + diagonal).tolist()] if len(rows) else x.reshape(-1)[[]]


def trace(x):
    return diag(x).sum()


# ---- host-side values (no gradient by construction) ---------------------------------------------------

def _host(x, name):
    if isinstance(x, Tensor) and x.requires_grad and _C.is_grad_enabled():
        raise NotImplementedError("%s of a tensor that requires grad: tessel has no %s op with a gradient (it "
                                  "computes %s on constants: build the table under no_grad, or from a tensor "
                                  "that does not require grad)" % (name, name, name))
    return x.detach().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _float_op(name):
    """t.X() for a C++ op defined on floats (with its gradient, on DTensors too): integer and bool tensors
    are computed in float32, as torch promotes them."""
    method = getattr(_C.Tensor, name)

    def fn(input):
        return method(input if input.dtype.is_floating_point else input.to(_dtypes.float32))
    fn.__name__ = name
    return fn


def _function_of(name):
    """torch.X(t) for the method t.X()."""
    def fn(input):
        return getattr(input, name)()
    fn.__name__ = name
    return fn


_FLOAT_OPS = ("sin", "cos", "exp2", "log1p", "expm1", "erf", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid")
_C_UNARY_METHODS = {name: _float_op(name) for name in _FLOAT_OPS}  # floor / ceil keep integers (a copy)
_C_UNARY = {name: _function_of(name) for name in _FLOAT_OPS + ("floor", "ceil")}


def index_add(x, dim, index, source, *, alpha=1):
    """torch.index_add: x with source's slices along dim added at index (repeats accumulate), out of
    place and differentiable in x and source; one scatter-add of rows (the move of dim to the front is a
    view)."""
    if index.ndim != 1 or (source.ndim and index.shape[0] != source.shape[dim]):
        raise IndexError("index_add_(): Number of indices (%d) should be equal to source.size(dim) (%d)"
                         % (index.numel(), source.shape[dim] if source.ndim else 1))
    d = dim % max(x.ndim, 1)
    moved = source.movedim(d, 0) if source.ndim > 1 else source.reshape(-1, 1)
    target = x.movedim(d, 0) if x.ndim > 1 else x.reshape(-1, 1)
    rows = _C._functional._index_add_rows(moved.reshape(moved.shape[0], -1), index.long(), target.shape[0])
    rows = rows.reshape(*target.shape)
    rows = rows.movedim(0, d) if x.ndim > 1 else rows.reshape(*x.shape)
    return x + (rows * alpha if alpha != 1 else rows)


def index_add_(x, dim, index, source, *, alpha=1):
    """In place; under autograd tessel/_inplace.py records it instead (this runs outside it)."""
    return x.copy_(index_add(x, dim, index, source, alpha=alpha))


def trunc(x):
    """torch.trunc (fix): rounds toward zero, floor of |x| with x's sign (zero gradient); an integer
    tensor gives a copy."""
    if not x.dtype.is_floating_point:
        return x.floor()
    return _C._functional.where(x < 0, x.ceil(), x.floor())


def round_(x, *, decimals=0):
    """torch.round: half to even; with decimals, round(x * 10**decimals) / 10**decimals (torch's
    formula). An integer tensor gives a copy."""
    if decimals == 0 or not x.dtype.is_floating_point:
        return x._round()
    scale = 10.0 ** decimals
    return (x * scale)._round() / scale


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    from ._device import check_cpu
    check_cpu(device, "linspace")
    t = _tensor(np.linspace(start, end, steps), dtype=dtype or _dtypes.float32)
    return t.requires_grad_(True) if requires_grad else t


def one_hot(x, num_classes=-1):
    if x.dtype.is_floating_point or x.dtype == _dtypes.bool:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    a = _host(x, "one_hot").astype(np.int64)
    n = int(a.max()) + 1 if num_classes < 0 else num_classes
    if a.size and (a.min() < 0 or a.max() >= n):
        raise RuntimeError("Class values must be smaller than num_classes and non-negative.")
    return _tensor(np.eye(n, dtype=np.int64)[a])


def nonzero(x, *, as_tuple=False):
    idx = np.nonzero(_host(x, "nonzero"))
    if as_tuple:
        return tuple(_tensor(i.astype(np.int64)) for i in idx)
    return _tensor(np.stack(idx, 1).astype(np.int64) if idx else np.zeros((0, 0), np.int64))


def argwhere(x):
    return nonzero(x)


def count_nonzero(x, dim=None):
    return (x != 0).long().sum(dim) if dim is not None else (x != 0).long().sum()


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(a, b):
    return tuple(a.shape) == tuple(b.shape) and bool((a.detach().numpy() == b.detach().numpy()).all())


def numel(x):
    return x.numel()


# ---- nn.functional, composed ---------------------------------------------------------------------------

def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError("%s is not a valid value for reduction" % reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_C._functional.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    d = (input - target).abs()
    loss = _C._functional.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _reduce(loss * weight if weight is not None else loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """max(x, 0) - x·y + log(1 + exp(-|x|)) (torch's stable form); pos_weight scales the positive term."""
    # (1 - y)·x + w·log(1 + exp(-x)), w = 1 + (pos_weight - 1)·y: exact gradients at x = 0 too.
    lw = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + lw * _softplus1(-input)
    return _reduce(loss * weight if weight is not None else loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(y·log p + (1 - y)·log(1 - p)) with each log clamped at -100, as torch."""
    w = _C._functional.where

    def clamped_log(p):  # log p clamped at -100 (torch's), finite gradients where p is 0
        return w(p > 0, w(p > 0, p, p * 0.0 + 1.0).log(), p * 0.0 - 100.0).clamp(min=-100.0)
    loss = -(target * clamped_log(input) + (1.0 - target) * clamped_log(1.0 - input))
    return _reduce(loss * weight if weight is not None else loss, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-input[n, target[n]] over log-probabilities [N, C] ([C], or [N, C, d1, ...] with targets
    [N, d1, ...]); ignored targets count for nothing; weight[c] scales class c and the weighted mean
    divides by the picked weights, as torch."""
    if size_average is not None or reduce is not None:
        raise NotImplementedError("nll_loss: size_average and reduce are deprecated in torch; use reduction=")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError("%s is not a valid value for reduction" % reduction)
    if input.ndim > 2:  # classes on dim 1: one row per position
        rows = movedim(input, 1, -1).reshape(-1, input.shape[1])
        out = nll_loss(rows, target.reshape(-1), weight, ignore_index=ignore_index, reduction=reduction)
        return out.reshape(*target.shape) if reduction == "none" else out
    logp = input.reshape(1, -1) if input.ndim == 1 else input
    t = target.reshape(-1).numpy()
    keep = t != ignore_index
    rows = np.arange(len(t))[keep]
    picked = -logp[rows.tolist(), t[keep].tolist()] if keep.any() else logp.reshape(-1)[[]]
    if weight is not None:
        wk = weight[t[keep].tolist()] if keep.any() else weight.reshape(-1)[[]]
        picked = picked * wk
    if reduction == "none":  # 0 at the ignored positions
        out = _scatter_rows(picked, keep, input.dtype)
        return out.reshape(()) if input.ndim == 1 else out
    if reduction == "sum":
        return picked.sum()
    denom = (wk.sum() if weight is not None else float(keep.sum())) if keep.any() else 0.0
    return picked.sum() / denom


def _scatter_rows(values, keep, dtype):
    """A [len(keep)] tensor holding `values` at the kept positions (0 elsewhere), through one gather."""
    pos = np.cumsum(keep) - 1
    table = _C._functional.cat([values, _zeros(1, dtype=dtype)], 0)
    return table[np.where(keep, pos, len(values)).astype(np.int64).tolist()]


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    # xlogy semantics: 0 where target is 0, NaN where it is negative, as torch
    loss = target.exp() * (target - input) if log_target else \
        _C._functional.where(target == 0, input * 0.0, target * (target.log() - input))
    if reduction == "batchmean":
        return loss.sum() / float(input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    return input / input.norm(p, dim, keepdim=True).clamp(min=eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    num = (x1 * x2).sum(dim)
    return num / (x1.norm(2.0, dim).clamp(min=eps) * x2.norm(2.0, dim).clamp(min=eps))


def pad(input, pad, mode="constant", value=None):
    """Constant padding of the last len(pad)/2 dims (torch's (left, right, top, bottom, ...) order);
    negative amounts crop. Other modes raise NotImplementedError."""
    if mode != "constant":
        raise NotImplementedError("pad(mode=%r): only 'constant' is supported" % mode)
    out = input
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0:
            out = out.narrow(d, -before, out.shape[d] + before)
            before = 0
        if after < 0:
            out = out.narrow(d, 0, out.shape[d] + after)
            after = 0
        parts = []
        for amount in (before, after):
            shape = list(out.shape)
            shape[d] = amount
            parts.append(_C._full(shape, float(value or 0.0), out.dtype) if amount else None)
        out = _C._functional.cat([t for t in (parts[0], out, parts[1]) if t is not None], d)
    return out


# ---- registration ----------------------------------------------------------------------------------------

def _new_full(x, size, value, dtype=None, device=None, requires_grad=False):
    """Tensor.new_zeros / new_ones: size as varargs or one sequence, x's dtype by default."""
    shape = list(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size)
    return _C._full(shape, value, dtype or x.dtype).requires_grad_(requires_grad)


_BOTH = dict(  # torch.X(t, ...) and t.X(...)
    minimum=minimum, maximum=maximum, square=square, reciprocal=reciprocal, lerp=lerp, sign=sign, isnan=isnan,
    isfinite=isfinite, nan_to_num=nan_to_num, logsumexp=logsumexp, cumsum=cumsum, any=any_, all=all_,
    movedim=movedim, swapaxes=swapaxes, unbind=unbind, unflatten=unflatten, index_select=index_select, flip=flip,
    roll=roll, repeat_interleave=repeat_interleave, masked_select=masked_select, outer=outer, diag=diag,
    trace=trace, round=round_, trunc=trunc, fix=trunc, index_add=index_add, nonzero=nonzero, argwhere=argwhere, count_nonzero=count_nonzero, allclose=allclose, equal=equal,
    clip=lambda x, min=None, max=None: x.clamp(min, max))

TORCH_FUNCTIONS = dict(_BOTH, **_C_UNARY, take_along_dim=take_along_dim, linspace=linspace, numel=numel, softplus=softplus)

TENSOR_METHODS = dict(
    _BOTH, **_C_UNARY_METHODS, index_add_=index_add_, repeat=repeat, expand_as=expand_as,
    new_zeros=lambda x, *size, **kw: _new_full(x, size, 0.0, **kw),
    new_ones=lambda x, *size, **kw: _new_full(x, size, 1.0, **kw),
    new_full=lambda x, size, fill_value, dtype=None, device=None, requires_grad=False: _C._full(
        list(size), float(fill_value), dtype or x.dtype).requires_grad_(requires_grad),
    new_tensor=lambda x, data, dtype=None, device=None, requires_grad=False: _tensor(
        data, dtype=dtype or x.dtype, requires_grad=requires_grad))

def _float32_under_autocast(fn):
    """torch's CPU autocast float32 list (the losses, prod): inside an autocast region, bfloat16 / float16
    tensor arguments are cast up to float32 first (recorded by autograd)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _C._autocast_state()[0]:
            def up(a):
                return a.to(_dtypes.float32) if isinstance(a, Tensor) and a.dtype in (_dtypes.bfloat16,
                                                                                       _dtypes.float16) else a
            args = tuple(up(a) for a in args)
            kwargs = {k: up(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return wrapper


(binary_cross_entropy, binary_cross_entropy_with_logits, l1_loss, smooth_l1_loss, huber_loss, nll_loss, kl_div,
 margin_ranking_loss, soft_margin_loss, hinge_embedding_loss, cosine_embedding_loss, triplet_margin_loss) = (
    _float32_under_autocast(f) for f in (
        binary_cross_entropy, binary_cross_entropy_with_logits, l1_loss, smooth_l1_loss, huber_loss, nll_loss,
        kl_div, margin_ranking_loss, soft_margin_loss, hinge_embedding_loss, cosine_embedding_loss,
        triplet_margin_loss))

FUNCTIONAL = dict(
    one_hot=one_hot, pad=pad, normalize=normalize, binary_cross_entropy=binary_cross_entropy,
    binary_cross_entropy_with_logits=binary_cross_entropy_with_logits, l1_loss=l1_loss,
    smooth_l1_loss=smooth_l1_loss, huber_loss=huber_loss, nll_loss=nll_loss, kl_div=kl_div, softplus=softplus,
    leaky_relu=leaky_relu, elu=elu, mish=mish, hardtanh=hardtanh, relu6=relu6, glu=glu, logsigmoid=logsigmoid,
    cosine_similarity=cosine_similarity, softmin=softmin, selu=selu, celu=celu, hardsigmoid=hardsigmoid,
    hardswish=hardswish, softsign=softsign, threshold=threshold, tanhshrink=tanhshrink, softshrink=softshrink,
    hardshrink=hardshrink, prelu=prelu, pairwise_distance=pairwise_distance, margin_ranking_loss=margin_ranking_loss,
    soft_margin_loss=soft_margin_loss, hinge_embedding_loss=hinge_embedding_loss,
    cosine_embedding_loss=cosine_embedding_loss, triplet_margin_loss=triplet_margin_loss, group_norm=group_norm)


# ---- einsum ------------------------------------------------------------------------------------------------

def _einsum_parse(equation, operands):
    """Subscripts per operand and for the output, with '...' expanded to fresh letters (right-aligned
    across operands, as numpy and torch broadcast)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError("einsum(): more operands were provided than specified in the equation"
                         if len(operands) > len(terms) else "einsum(): fewer operands were provided than specified "
                         "in the equation")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    ell_dims = 0
    for t, x in zip(terms, operands):
        if "..." in t:
            ell_dims = builtins.max(ell_dims, x.ndim - len(t.replace("...", "")))
    ell = "".join(spare[:ell_dims])
    subs = []
    for t, x in zip(terms, operands):
        if "..." in t:
            k = x.ndim - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_dims - k:] if k else "")
        if len(t) != x.ndim:
            raise RuntimeError("einsum(): the number of subscripts in the equation (%d) does not match the number "
                               "of dimensions (%d) for operand %d" % (len(t), x.ndim, len(subs)))
        subs.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {}
        for t in subs:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return subs, out


def _einsum_reduce(x, sub, keep):
    """Sums the letters of sub not in keep (a letter repeated in one operand must be kept in pairs:
    unsupported, as numpy's diagonal form is rare in models)."""
    if len(set(sub)) != len(sub):
        raise NotImplementedError("einsum(): a subscript repeated within one operand (a diagonal) is not supported")
    drop = [i for i, c in enumerate(sub) if c not in keep]
    if drop:
        x = x.sum(drop)
        sub = "".join(c for c in sub if c in keep)
    return x, sub


def _einsum_pair(a, sa, b, sb, keep):
    """The product of a (subscripts sa) and b (sb), summed over the shared letters not in keep, as one
    batched matmul; returns it with its subscripts."""
    a, sa = _einsum_reduce(a, sa, set(sb) | set(keep))
    b, sb = _einsum_reduce(b, sb, set(sa) | set(keep))
    size = {}
    for x, s in ((a, sa), (b, sb)):
        for c, n in zip(s, x.shape):
            if size.get(c, 1) != 1 and n not in (1, size[c]):
                raise RuntimeError("einsum(): operands do not broadcast with remapped shapes (letter %s: %d and %d)"
                                   % (c, size[c], n))
            size[c] = builtins.max(size.get(c, 1), n)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    a_only = [c for c in sa if c not in sb]
    b_only = [c for c in sb if c not in sa]

    def arrange(x, s, first, second, third):
        order = [s.index(c) for c in first + second + third]
        x = x.permute(*order) if order != list(range(len(order))) else x
        full = [size[c] for c in first + second + third]
        if tuple(x.shape) != tuple(full):
            x = x.expand(*full)
        prod = [int(np.prod([size[c] for c in g])) if g else 1 for g in (first, second, third)]
        return x.reshape(*prod)

    am = arrange(a, sa, batch, a_only, contract)  # [batch, M, K]
    bm = arrange(b, sb, batch, contract, b_only)  # [batch, K, N]
    out = am @ bm
    shape = [size[c] for c in batch + a_only + b_only]
    return out.reshape(*shape) if shape else out.reshape(()), "".join(batch + a_only + b_only)


def einsum(equation, *operands):
    """torch.einsum over bound ops: each pair of operands is one batched matmul (with the sums, permutes
    and broadcasts around it), left to right, so gradients flow; '...' broadcasts. A subscript repeated
    inside one operand (a diagonal) raises NotImplementedError."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    subs, out = _einsum_parse(equation, operands)
    integral = all(not t.dtype.is_floating_point for t in operands)
    if integral:  # through float64 (the matmuls are floating), exact below 2^53, then back to int64
        operands = tuple(t.double() for t in operands)
    elif any(not t.dtype.is_floating_point for t in operands):
        raise RuntimeError("einsum(): operands must share one dtype (cast them first)")
    x, s = operands[0], subs[0]
    for i in range(1, len(operands)):
        later = set("".join(subs[i + 1:])) | set(out)
        x, s = _einsum_pair(x, s, operands[i], subs[i], later)
    x, s = _einsum_reduce(x, s, set(out))
    order = [s.index(c) for c in out]
    x = x.permute(*order) if order != list(range(len(order))) else x
    return x.round().long() if integral else x


TORCH_FUNCTIONS["einsum"] = einsum


# ---- more composed functions ---------------------------------------------------------------------------------

def prod(x, dim=None, keepdim=False, *, dtype=None):
    """Product over dim (all elements when None) by a pairwise tree of multiplies: exact with zeros and
    signs, a gradient through each multiply; bool and integer inputs give int64, as torch."""
    x = _accumulation_input(x, dtype)
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape(*([1] * x.ndim)) if keepdim else out
    dim %= builtins.max(x.ndim, 1)
    if x.ndim == 0:
        return x.clone()
    while x.shape[dim] > 1:
        n = x.shape[dim]
        if n % 2:
            shape = list(x.shape)
            shape[dim] = 1
            x = _C._functional.cat([x, _C._full(shape, 1.0, x.dtype)], dim)
            n += 1
        x = x.narrow(dim, 0, n // 2) * x.narrow(dim, n // 2, n // 2)
    if x.shape[dim] == 0:  # the empty product
        shape = list(x.shape)
        shape[dim] = 1
        x = _C._full(shape, 1.0, x.dtype)
    return x if keepdim else x.squeeze(dim)


def meshgrid(*tensors, indexing="ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError("torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: %s" % indexing)
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.numel() for t in ts]
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = t.numel()
        out.append(t.reshape(*view).expand(*shape))
    if swap:  # 'xy': the grid of (y, x, ...) in 'ij', returned in the inputs' order
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def tensor_split(x, indices_or_sections, dim=0):
    n = x.shape[dim]
    if isinstance(indices_or_sections, Tensor) and indices_or_sections.ndim == 0:
        indices_or_sections = int(indices_or_sections.item())  # a 0-d tensor is a section count
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        bounds = list(np.cumsum([0] + sizes))
    else:
        idx = indices_or_sections.tolist() if isinstance(indices_or_sections, Tensor) else list(indices_or_sections)
        bounds = [0] + [builtins.min(builtins.max(i + n if i < 0 else i, 0), n) for i in idx] + [n]
    return tuple(x.narrow(dim, int(s), int(builtins.max(e - s, 0))) for s, e in zip(bounds[:-1], bounds[1:]))


def kron(a, b):
    """Kronecker product: a's blocks scaled copies of b (a broadcast multiply, then a reshape)."""
    nd = builtins.max(a.ndim, b.ndim)
    a = a.reshape(*([1] * (nd - a.ndim) + list(a.shape)))
    b = b.reshape(*([1] * (nd - b.ndim) + list(b.shape)))
    av = a.reshape(*[s for d in a.shape for s in (d, 1)])
    bv = b.reshape(*[s for d in b.shape for s in (1, d)])
    return (av * bv).reshape(*[x * y for x, y in zip(a.shape, b.shape)])


def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique (values carry no gradient, as torch's): sorted unique values, optionally the inverse
    indices and the counts."""
    if dim is not None:
        raise NotImplementedError("unique(dim=) is not supported")
    a = x.detach().numpy()
    values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    out = [_tensor(values)]
    if return_inverse:
        out.append(_tensor(inverse.reshape(a.shape).astype(np.int64)))
    if return_counts:
        out.append(_tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x, weights=None, minlength=0):
    a = _host(x, "bincount")
    if a.ndim != 1 or (a.size and a.min() < 0) or x.dtype.is_floating_point:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else _host(weights, "bincount")
    counts = np.bincount(a, weights=w, minlength=minlength)
    if w is None:
        return _tensor(counts.astype(np.int64))
    return _tensor(counts.astype(np.float32 if weights.dtype == _dtypes.float32 else np.float64))


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    seq = _host(sorted_sequence, "searchsorted")
    vals = _host(values, "searchsorted") if isinstance(values, Tensor) else np.asarray(values)
    side = side or ("right" if right else "left")
    if sorter is not None:  # search the sequence in sorter's order, as torch
        seq = np.take_along_axis(seq, _host(sorter, "searchsorted").astype(np.int64), -1)
    if seq.ndim == 1:
        out = np.searchsorted(seq, vals, side=side)
    else:
        out = np.stack([np.searchsorted(s, v, side=side) for s, v in zip(seq.reshape(-1, seq.shape[-1]),
                                                                         vals.reshape(-1, vals.shape[-1]))])
        out = out.reshape(vals.shape)
    return _tensor(out.astype(np.int32 if out_int32 else np.int64))


def bucketize(input, boundaries, *, out_int32=False, right=False):
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


_prod_autocast = _float32_under_autocast(prod)  # torch's CPU autocast float32 list has prod
TORCH_FUNCTIONS.update(prod=_prod_autocast, meshgrid=meshgrid, tensor_split=tensor_split, kron=kron, unique=unique,
                       bincount=bincount, searchsorted=searchsorted, bucketize=bucketize)
TENSOR_METHODS.update(prod=_prod_autocast, tensor_split=tensor_split, kron=kron, unique=unique, bincount=bincount)


# ---- scatter family: torch.scatter / scatter_add / scatter_reduce, composed of one index_add over the
# flattened input (differentiable in input and src); the positions are computed on the host from index.

def _scatter_plan(x, dim, index, src_shape, name):
    """(dim, target positions in x.reshape(-1), source positions in src.reshape(-1)) for every element of
    index, with torch's shape and bounds checks."""
    idx = _host(index, name) if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise RuntimeError("%s(): Expected dtype int64 for index" % name)
    nd = builtins.max(x.ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-nd, nd - 1, dim))
    dim = dim % nd
    xs = tuple(x.shape) or (1,)
    idx = idx.reshape(idx.shape or (1,))
    if idx.ndim != len(xs) or (src_shape is not None and len(src_shape or (1,)) != idx.ndim):
        raise RuntimeError("%s(): Index tensor must have the same number of dimensions as %s tensor"
                           % (name, "self" if src_shape is None or idx.ndim == len(src_shape or (1,)) else "src"))
    ss = tuple(src_shape or (1,)) if src_shape is not None else None
    for d in range(idx.ndim):
        if (d != dim and idx.shape[d] > xs[d]) or (ss is not None and idx.shape[d] > ss[d]):
            raise RuntimeError("%s(): Expected index %s to be smaller than self %s apart from dimension %d%s"
                               % (name, list(idx.shape), list(xs), dim,
                                  "" if ss is None else " and to be smaller size than src %s" % list(ss)))
    if idx.size and (idx.min() < 0 or idx.max() >= xs[dim]):  # torch wraps no index, negative ones included
        bad = idx[(idx < 0) | (idx >= xs[dim])].reshape(-1)[0]
        raise RuntimeError("%s(): index %d is out of bounds for dimension %d with size %d" % (name, bad, dim, xs[dim]))
    if idx.size == 0:
        return dim, np.zeros(0, np.int64), np.zeros(0, np.int64)
    grids = [np.broadcast_to(g, idx.shape) for g in np.indices(idx.shape, sparse=True)]
    src_pos = np.ravel_multi_index(tuple(grids), ss).reshape(-1) if ss is not None else None
    grids[dim] = idx
    target = np.ravel_multi_index(tuple(grids), xs).reshape(-1)
    return dim, target.astype(np.int64), src_pos


def _check_src_dtype(input, src, name):
    if isinstance(src, Tensor) and src.dtype != input.dtype:
        raise RuntimeError("%s(): Expected self.dtype to be equal to src.dtype" % name)


def _scatter_host(input, target, src, src_pos, mode, include_self=True):
    """Integer and bool tensors (no gradient) on the host: "set" (last writer wins), "sum", "prod",
    "mean" (floor division for integers, as torch), "amax", "amin"."""
    a = input.numpy()
    out = a.reshape(-1).copy()
    vals = src.numpy().reshape(-1)[src_pos] if isinstance(src, Tensor) else np.full(target.size, src, dtype=a.dtype)
    vals = vals.astype(a.dtype)
    if mode == "set":
        last = _last_writers(target)
        out[target[last]] = vals[last]
        return _tensor(out.reshape(a.shape))
    if a.dtype == np.bool_:  # torch: sum / amax are "or", prod / amin "and" on bools
        mode = {"sum": "amax", "mean": "amax", "prod": "amin"}.get(mode, mode)
    ufunc = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[mode]
    if not include_self:  # the written positions start from the reduction's identity
        if a.dtype == np.bool_:
            identity = mode == "amin"
        else:
            info = np.iinfo(a.dtype)
            identity = {"sum": 0, "mean": 0, "prod": 1, "amax": info.min, "amin": info.max}[mode]
        out[target] = identity
    ufunc.at(out, target, vals)
    if mode == "mean":
        counts = np.bincount(target, minlength=out.size) + (1 if include_self else 0)
        touched = np.bincount(target, minlength=out.size) > 0
        out = np.where(touched, np.floor_divide(out, np.maximum(counts, 1)), out).astype(a.dtype)
    return _tensor(out.reshape(a.shape))


def _scatter_values(src, src_pos, n, like):
    """The src elements index names, in index's order (a differentiable gather), or a scalar's copies."""
    if isinstance(src, Tensor):
        return src.reshape(-1)[src_pos] if n else src.reshape(-1)[:0]
    return _C._full([n], float(src), like.dtype)


def _flat_index_add(flat, target, values):
    return flat.index_add(0, _tensor(target), values.to(flat.dtype) if values.dtype != flat.dtype else values)


def scatter_add(input, dim, index, src):
    """torch.scatter_add: out[index[i][j]][j] += src[i][j] (dim 0, and so on), repeats accumulating."""
    _check_src_dtype(input, src, "scatter_add")
    _, target, src_pos = _scatter_plan(input, dim, index, tuple(src.shape), "scatter_add")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, "sum")
    flat = input.reshape(-1)
    return _flat_index_add(flat, target, _scatter_values(src, src_pos, target.size, input)).reshape(*input.shape)


def _last_writers(target):
    """For each distinct target, the position in target of its last occurrence (torch's CPU kernel writes
    in order, so the last element wins; the value of repeats is unspecified in torch's docs)."""
    if target.size == 0:
        return target
    _, first_of_reversed = np.unique(target[::-1], return_index=True)
    return target.size - 1 - first_of_reversed


def _touched(target, numel):
    mask = np.zeros(numel, dtype=bool)
    mask[target] = True
    return _tensor(mask)


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """torch.scatter: a copy of input with out[index[i][j]][j] = src[i][j] (dim 0, and so on) or = value;
    reduce='add' / 'multiply' combine instead (torch's deprecated form of scatter_reduce). Differentiable in
    input (zero where written) and src (the written elements)."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply, got %s" % reduce)
        if not isinstance(src, Tensor):
            src = _C._full(list(index.shape), float(src), input.dtype)
        return scatter_reduce(input, dim, index, src, "sum" if reduce == "add" else "prod")
    _check_src_dtype(input, src, "scatter")
    shape = tuple(src.shape) if isinstance(src, Tensor) else None
    _, target, src_pos = _scatter_plan(input, dim, index, shape, "scatter")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, "set")
    last = _last_writers(target)
    values = _scatter_values(src, None if src_pos is None else src_pos[last], last.size, input)
    flat = input.reshape(-1)
    placed = _flat_index_add(_C._full([flat.shape[0]], 0.0, flat.dtype), target[last], values)
    return _C._functional.where(_touched(target, flat.shape[0]), placed, flat).reshape(*input.shape)


_REDUCE_INIT = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -np.inf, "amin": np.inf}


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: combines src's elements into input's positions named by index with "sum",
    "prod", "mean", "amax" or "amin" (with or without input's own value: include_self). Gradients as torch's:
    sum / mean through the composed index_add; amax / amin split evenly among the elements equal to the
    result, prod the product of the others (for these three the values come from the host and the
    gradient through a surrogate with those weights)."""
    if reduce not in _REDUCE_INIT:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin, got %s" % reduce)
    _check_src_dtype(input, src, "scatter_reduce")
    _, target, src_pos = _scatter_plan(input, dim, index, tuple(src.shape), "scatter_reduce")
    if target.size == 0:
        return input.clone()
    if not input.dtype.is_floating_point:
        return _scatter_host(input, target, src, src_pos, reduce, include_self)
    flat = input.reshape(-1)
    n = flat.shape[0]
    values = _scatter_values(src, src_pos, target.size, input)
    touched = _touched(target, n)
    zeros = _C._full([n], 0.0, flat.dtype)
    if reduce in ("sum", "mean"):
        total = _flat_index_add(flat if include_self else zeros, target, values)
        if reduce == "mean":
            counts = np.bincount(target, minlength=n).astype(np.float64) + (1.0 if include_self else 0.0)
            counts = np.maximum(counts, 1.0)
            total = total / _tensor(counts.astype(np.float64)).to(flat.dtype)  # in the input's dtype, as torch
        out = total if include_self else _C._functional.where(touched, total, flat)
        return out.reshape(*input.shape)
    xv = flat.detach().numpy()
    sv = values.detach().numpy().astype(xv.dtype, copy=False)
    result = xv.copy()
    if not include_self:
        result[target] = _REDUCE_INIT[reduce]
    {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce].at(result, target, sv)
    # Each element's weight in d result / d element, for the surrogate below.
    if reduce == "prod":  # d out / d element = the product of the group's other elements (zeros counted apart)
        group_src, group_self = sv.astype(np.float64), np.where(include_self, xv, 1.0).astype(np.float64)
        nonzero = np.where(group_self != 0, group_self, 1.0)
        np.multiply.at(nonzero, target, np.where(group_src != 0, group_src, 1.0))
        zeros_in = (group_self == 0).astype(np.int64)
        np.add.at(zeros_in, target, (group_src == 0).astype(np.int64))

        def others(v, t):
            excl_zero = zeros_in[t] - (v == 0)
            return np.where(excl_zero > 0, 0.0, nonzero[t] / np.where(v != 0, v, 1.0))
        w_src = others(group_src, target)
        w_self = others(group_self, np.arange(n)) if include_self else np.zeros(n)
    else:
        hit_src = sv == result[target]
        hit_self = (xv == result) & include_self
        ties = np.bincount(target, weights=hit_src, minlength=n) + hit_self
        w_src = np.where(hit_src, 1.0 / np.maximum(ties[target], 1), 0.0)
        w_self = np.where(hit_self, 1.0 / np.maximum(ties, 1), 0.0)
    np_dtype = xv.dtype
    surrogate = _flat_index_add(flat * _tensor(w_self.astype(np_dtype)), target,
                                values * _tensor(w_src.astype(np_dtype)))
    exact = _tensor(result) + (surrogate - surrogate.detach())  # the host's values, the surrogate's gradient
    return _C._functional.where(touched, exact, flat).reshape(*input.shape)


def _in_place(fn, name):
    """fn's result written into x (under autograd tessel/_inplace.py records the method instead)."""
    def method(x, *args, **kwargs):
        return x.copy_(fn(x, *args, **kwargs))
    method.__name__ = name
    return method


TORCH_FUNCTIONS.update(scatter=scatter, scatter_add=scatter_add, scatter_reduce=scatter_reduce)
TENSOR_METHODS.update(scatter=scatter, scatter_add=scatter_add, scatter_reduce=scatter_reduce,
                      scatter_=_in_place(scatter, "scatter_"), scatter_add_=_in_place(scatter_add, "scatter_add_"),
                      scatter_reduce_=_in_place(scatter_reduce, "scatter_reduce_"))


# ---- logical and bitwise operators, comparisons by name, and other small torch functions ----------------

def _truth(x):
    """A tensor's truth values (nonzero, NaN included, is True), as torch's logical ops read them."""
    if not isinstance(x, Tensor):
        return x
    return x if x.dtype == _dtypes.bool else x != 0


def _as_bool_tensor(x, like):
    return x if isinstance(x, Tensor) else _C._full([], float(bool(x)), _dtypes.bool).expand_as(like)


def logical_and(a, b):
    a, b = _truth(a), _truth(b)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _C._functional.where(a, _as_bool_tensor(b, a), _as_bool_tensor(False, a)) if isinstance(b, Tensor) \
        else (a if b else _as_bool_tensor(False, a))


def logical_or(a, b):
    a, b = _truth(a), _truth(b)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _C._functional.where(a, _as_bool_tensor(True, a), _as_bool_tensor(b, a)) if isinstance(b, Tensor) \
        else (_as_bool_tensor(True, a) if b else a)


def logical_xor(a, b):
    a, b = _truth(a), _truth(b)
    if not isinstance(a, Tensor):
        a, b = b, a
    return a != (_as_bool_tensor(b, a) if not isinstance(b, Tensor) else b)


def logical_not(a):
    return _truth(a) == False  # noqa: E712 (an elementwise comparison, not a Python truth test)


def _host_bitwise(op, name):
    """Integer bitwise ops (no gradient: integers carry none) on the host; bool tensors take the logical ops."""
    logical = {"and": logical_and, "or": logical_or, "xor": logical_xor}[op] if op != "not" else logical_not

    def fn(a, b=None):
        tensors = [t for t in (a, b) if isinstance(t, Tensor)]
        if all(t.dtype == _dtypes.bool for t in tensors) and all(isinstance(v, (bool, Tensor, np.bool_))
                                                                 for v in (a, b) if v is not None):
            return logical(a) if op == "not" else logical(a, b)
        if any(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in (a, b)):
            # bool_tensor & 1: an integer result, as torch promotes (a Python int over bool)
            a, b = (v.to(_dtypes.int64) if isinstance(v, Tensor) and v.dtype == _dtypes.bool else v for v in (a, b))
            tensors = [t for t in (a, b) if isinstance(t, Tensor)]
        if any(t.dtype.is_floating_point for t in tensors):
            raise TypeError("%s is only supported for integer and bool tensors (got %s)"
                            % (name, ", ".join(str(t.dtype) for t in tensors)))
        av = a.numpy() if isinstance(a, Tensor) else a
        if op == "not":
            return _tensor(np.invert(av))
        bv = b.numpy() if isinstance(b, Tensor) else b
        out = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](av, bv)
        return _tensor(np.asarray(out).astype(np.result_type(*[t.numpy().dtype for t in tensors])))
    fn.__name__ = name
    return fn


bitwise_and, bitwise_or = _host_bitwise("and", "bitwise_and"), _host_bitwise("or", "bitwise_or")
bitwise_xor, bitwise_not = _host_bitwise("xor", "bitwise_xor"), _host_bitwise("not", "bitwise_not")


def isinf(x):
    return (x == math.inf) | (x == -math.inf) if x.dtype.is_floating_point else x != x


def isposinf(x):
    return x == math.inf if x.dtype.is_floating_point else x != x


def isneginf(x):
    return x == -math.inf if x.dtype.is_floating_point else x != x


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol·|b| elementwise (infinities equal only to themselves; NaN to NaN with equal_nan),
    as torch.isclose."""
    b = b if isinstance(b, Tensor) else _C._full([], float(b), a.dtype)
    close = logical_and((a - b).abs() <= atol + rtol * b.abs(), logical_and(isfinite(a), isfinite(b)))
    out = logical_or(close, a == b)  # infinities: equal only to themselves
    if equal_nan:
        out = logical_or(out, logical_and(a != a, b != b))
    return out


def _lower_under_autocast(*tensors):
    """torch's autocast lower-precision list for the addmm family: every float32 operand, input included,
    cast to the region's dtype (the product alone would be cast by the matmul, and the add would promote
    the result back to float32)."""
    enabled, dtype = _C._autocast_state()
    if not enabled:
        return tensors
    return tuple(t.to(dtype) if isinstance(t, Tensor) and t.dtype in (_dtypes.float32, _dtypes.bfloat16,
                                                                        _dtypes.float16) else t for t in tensors)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta·input + alpha·(mat1 @ mat2)."""
    input, mat1, mat2 = _lower_under_autocast(input, mat1, mat2)
    prod = mat1.matmul(mat2)
    return (input * beta if beta != 1 else input) + (prod * alpha if alpha != 1 else prod) if beta != 0 else \
        (prod * alpha if alpha != 1 else prod)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta·input + alpha·(batch1 @ batch2), batched."""
    return addmm(input, batch1, batch2, beta=beta, alpha=alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta·input + alpha·Σ_b batch1[b] @ batch2[b]."""
    input, batch1, batch2 = _lower_under_autocast(input, batch1, batch2)
    prod = batch1.matmul(batch2).sum(0)
    return (input * beta + prod * alpha) if beta != 0 else prod * alpha


_CUMPROD_BLOCK = 64


def cumprod(x, dim, *, dtype=None):
    """Cumulative product along dim, differentiable: exp of the cumulative sum of log|x| with the sign and
    zeros tracked (no division by x, so zeros give exact products and finite gradients) — composed of a
    masked product over a lower-triangular [n, n] pairing (n = x.shape[dim])."""
    if dtype is not None:
        x = x.to(dtype)
    nd = builtins.max(x.ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-nd, nd - 1, dim))
    d = dim % nd
    if x.ndim == 0 or x.shape[d] == 0:
        return x.clone()
    n = x.shape[d]
    moved = x.movedim(d, -1)
    ones = _C._full([], 1.0, x.dtype)
    # Blocks of _CUMPROD_BLOCK entries: within a block row i multiplies the entries j <= i (a [.., b, b]
    # pairing), and each block is scaled by the product carried from the blocks before it, so memory is
    # O(n·b), not O(n²) (16 × 2048 took 560 MB as one block).
    parts, carry = [], None
    for start in range(0, n, _CUMPROD_BLOCK):
        b = builtins.min(_CUMPROD_BLOCK, n - start)
        block = moved.narrow(-1, start, b).unsqueeze(-2)  # [..., 1, b]
        keep = _tensor(np.tril(np.ones((b, b), dtype=bool)))
        local = prod(_C._functional.where(keep, block, ones), -1)  # [..., b]
        if carry is not None:
            local = local * carry
        parts.append(local)
        carry = local.narrow(-1, b - 1, 1)
    out = parts[0] if len(parts) == 1 else _C._functional.cat(parts, -1)
    return out.movedim(-1, d)


def diff(x, n=1, dim=-1, prepend=None, append=None):
    """n-th forward difference along dim (prepend / append joined first)."""
    d = dim % builtins.max(x.ndim, 1)
    parts = [t for t in (prepend, x, append) if t is not None]
    if len(parts) > 1:
        x = _C._functional.cat([t if isinstance(t, Tensor) else _tensor(t) for t in parts], d)
    for _ in range(n):
        length = x.shape[d]
        if length <= 1:
            return x.narrow(d, 0, 0)
        x = (x.narrow(d, 1, length - 1) - x.narrow(d, 0, length - 1)) if x.dtype != _dtypes.bool else \
            logical_xor(x.narrow(d, 1, length - 1), x.narrow(d, 0, length - 1))
    return x


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # torch's var_mean(x, unbiased) overload
        dim, unbiased = None, dim
    return x.var(dim, unbiased, keepdim, correction=correction), \
        (x.mean() if dim is None else x.mean(dim, keepdim=keepdim))


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = var_mean(x, dim, unbiased, keepdim, correction=correction)
    return v.sqrt(), m


def clamp_(x, min=None, max=None):
    return _in_place(lambda t: t.clamp(min, max), "clamp_")(x)


def masked_fill_(x, mask, value):
    return _in_place(lambda t: t.masked_fill(mask, value), "masked_fill_")(x)


_ITEMSIZE = {_dtypes.float32: 4, _dtypes.float64: 8, _dtypes.float16: 2, _dtypes.bfloat16: 2, _dtypes.int64: 8,
             _dtypes.int32: 4, _dtypes.bool: 1}


def split_with_sizes(x, split_sizes, dim=0):
    if builtins.sum(split_sizes) != x.shape[dim]:
        raise RuntimeError("split_with_sizes expects split_sizes to sum exactly to %d (input tensor's size at "
                           "dimension %d), but got split_sizes=%s" % (x.shape[dim], dim, list(split_sizes)))
    return x.split(list(split_sizes), dim)


TORCH_FUNCTIONS.update(
    logical_and=logical_and, logical_or=logical_or, logical_xor=logical_xor, logical_not=logical_not,
    bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor, bitwise_not=bitwise_not,
    isinf=isinf, isposinf=isposinf, isneginf=isneginf, isclose=isclose, addmm=addmm, baddbmm=baddbmm,
    addbmm=addbmm, cumprod=cumprod, diff=diff, var_mean=var_mean, std_mean=std_mean, clamp_=clamp_,
    eq=lambda a, b: a == b, ne=lambda a, b: a != b, lt=lambda a, b: a < b, le=lambda a, b: a <= b,
    gt=lambda a, b: a > b, ge=lambda a, b: a >= b, greater=lambda a, b: a > b, less=lambda a, b: a < b,
    not_equal=lambda a, b: a != b, greater_equal=lambda a, b: a >= b, less_equal=lambda a, b: a <= b,
    broadcast_to=lambda x, size: x.expand(*size), expand=lambda x, *size: x.expand(*size),
    split_with_sizes=split_with_sizes, clamp_min=lambda x, min: x.clamp(min, None),
    clamp_max=lambda x, max: x.clamp(None, max))
TENSOR_METHODS.update(
    logical_and=logical_and, logical_or=logical_or, logical_xor=logical_xor, logical_not=logical_not,
    bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor, bitwise_not=bitwise_not,
    __and__=bitwise_and, __or__=bitwise_or, __xor__=bitwise_xor, __invert__=bitwise_not,
    __rand__=lambda a, b: bitwise_and(b, a), __ror__=lambda a, b: bitwise_or(b, a),
    __rxor__=lambda a, b: bitwise_xor(b, a),
    isinf=isinf, isposinf=isposinf, isneginf=isneginf, isclose=isclose, addmm=addmm, baddbmm=baddbmm,
    addbmm=addbmm, cumprod=cumprod, diff=diff, clamp_=clamp_, clip_=clamp_, masked_fill_=masked_fill_,
    clamp_min=lambda x, min: x.clamp(min, None), clamp_max=lambda x, max: x.clamp(None, max),
    eq=lambda a, b: a == b, ne=lambda a, b: a != b, lt=lambda a, b: a < b, le=lambda a, b: a <= b,
    gt=lambda a, b: a > b, ge=lambda a, b: a >= b, broadcast_to=lambda x, size: x.expand(*size),
    view_as=lambda x, other: x.view(*other.shape), split_with_sizes=split_with_sizes,
    where=lambda x, condition, y: _C._functional.where(condition, x, y),
    nelement=lambda x: x.numel(), element_size=lambda x: _ITEMSIZE[x.dtype],
    new_empty=lambda x, *size, **kw: _new_full(x, size, 0.0, **kw))


# ---- remainder, fmod, floor division (%, //) --------------------------------------------------------------

def _int_host(a, b, fn, name):
    """Integer operands (no gradient) on the host, exact for int64; a zero divisor raises as torch does."""
    av = a.numpy() if isinstance(a, Tensor) else np.asarray(a)
    bv = b.numpy() if isinstance(b, Tensor) else np.asarray(b)
    if np.any(bv == 0):
        raise RuntimeError("ZeroDivisionError")
    dtype = np.result_type(*[t.numpy().dtype for t in (a, b) if isinstance(t, Tensor)])
    return _tensor(np.asarray(fn(av, bv)).astype(dtype))


def _is_int(x):
    return isinstance(x, (bool, int, np.integer)) or (isinstance(x, Tensor) and not x.dtype.is_floating_point)


def _floor_quotient(a, b):
    return (a / b).floor()


def remainder(input, other):
    """Python's modulo: the result has the divisor's sign (a - floor(a / b)·b); gradients 1 and -floor(a/b),
    as torch's."""
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.remainder, "remainder")
    if not isinstance(input, Tensor):
        input = _C._full([], float(input), other.dtype)
    return input - _floor_quotient(input, other).detach() * other


def fmod(input, other):
    """C's fmod: the result has the dividend's sign (a - trunc(a / b)·b)."""
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.fmod, "fmod")
    q = input / other
    return input - trunc(q).detach() * other


def floor_divide(input, other):
    """floor(a / b) (torch.floor_divide rounds down since 1.13); integers stay integers."""
    if _is_int(input) and _is_int(other):
        return _int_host(input, other, np.floor_divide, "floor_divide")
    if not isinstance(input, Tensor):
        input = _C._full([], float(input), other.dtype)
    return _floor_quotient(input, other)


TORCH_FUNCTIONS.update(remainder=remainder, fmod=fmod, floor_divide=floor_divide)
TENSOR_METHODS.update(remainder=remainder, fmod=fmod, floor_divide=floor_divide, __mod__=remainder,
                      __rmod__=lambda a, b: remainder(b, a), __floordiv__=floor_divide,
                      __rfloordiv__=lambda a, b: floor_divide(b, a))
