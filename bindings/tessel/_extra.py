"""torch functions, Tensor methods, nn.functional entries and nn modules composed from tessel's ops in
Python: each is a few bound ops (so autograd and DTensor dispatch come from them) or, for values that carry
no gradient (one_hot, nonzero, sin/cos of a tensor that does not require grad), numpy on the host.

Functions whose gradient would need an op tessel lacks (sin, cos, erf, floor, ...) refuse a tensor that
requires grad with NotImplementedError instead of returning a value with no gradient; they serve the
constant tables models build from them (rotary embeddings' cos/sin, positional encodings). The scatter
family (_scatter.py), einsum (_einsum.py), the logical / bitwise operators (_logical.py), the order
statistics (_order.py), the host-side counts and searches (_counting.py), pow with a tensor exponent
(_pow.py) and the activations (_activations.py) are split out by concept and register into (or are registered
in) this module's tables.
"""
import builtins
import math

import numpy as np

from . import _C, _dtypes
from ._autocast_policy import float32_under_autocast as _float32_under_autocast_early
from ._dtensor_compose import aligned, by_index_pieces, gathered_along, shape_only
from ._activations import (_scalar_like, celu, elu, glu, hardshrink, hardsigmoid, hardswish, hardtanh, leaky_relu,
                           logsigmoid, mish, prelu, relu6, selu, softmin, softplus, softshrink, softsign, tanhshrink,
                           threshold)
from ._subscript import _broadcast_shape
from ._linspace import linspace  # noqa: F401 (torch.linspace; _composed imports it from here)
from ._tensor import (Tensor, _host_numpy, _torch_dtype_name, bernoulli, exponential_, random_, tensor as _tensor,
                      with_zero_gradient, wrap_dim, zero_dim_as_vector, zeros as _zeros)


def _floating(x):
    return x if x.dtype.is_floating_point else x.float()


# ---- elementwise, composed -------------------------------------------------------------------------

def _pick(a, b, first):
    """torch's minimum / maximum: NaN wins, a tie splits the gradient 0.5 / 0.5; integers and bools keep their
    (promoted) dtype (the tie's average made them float32)."""
    w = _C._functional.where
    if not a.dtype.is_floating_point and not b.dtype.is_floating_point:
        from ._namespace import result_type
        dt = result_type(a, b)  # torch's: a 0-d operand does not widen (maximum(u8, tensor(2)) is uint8)
        return w(first, a.to(dt), b.to(dt))
    if _C.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        # a tie's value is a itself (not (a + b) / 2, which overflowed for 2e38 and 2e38), its gradient half each
        tie = a.detach() + (a - a.detach()) * 0.5 + (b - b.detach()) * 0.5
        # a NaN on either side: NaN, the whole gradient to both (torch's masks a < b, a > b are both false)
        nan = (a - a.detach()) + (b - b.detach()) + float("nan")
        return w(isnan(a) | isnan(b), nan, w(a == b, tie, w(first, a, b)))
    # a where it wins (first), ties, or is NaN; otherwise b (b's NaN included: then a neither wins nor ties). The
    # same picks as w(isnan(a), a, w(isnan(b), b, w(a == b, a, w(first, a, b)))), in 5 ops, not 7 (2 isnan and 2
    # bool ops are the slow ones: ~16 -> ~8 us on [4, 4])
    return w(first, a, w(a == b, a, w(a == a, b, a)))


@aligned
def minimum(a, b):
    if isinstance(b, Tensor) and b.dtype == a.dtype:  # one C++ op (core/ops/ternary.h), _pick's values and gradients
        return _C._functional.minimum(a, b)
    return _pick(a, b, a < b) if isinstance(b, Tensor) else a.clamp(max=b)


@aligned
def maximum(a, b):
    if isinstance(b, Tensor) and b.dtype == a.dtype:
        return _C._functional.maximum(a, b)
    return _pick(a, b, a > b) if isinstance(b, Tensor) else a.clamp(min=b)


def square(x):
    return x.long() * x.long() if x.dtype == _dtypes.bool else x * x  # torch: a bool square is int64


def reciprocal(x):
    return 1.0 / _floating(x)


def fused_operands(*tensors):
    """The tensors as core/ops/ternary.h's fused kernels take them, or None where torch's promotion has work to do
    (a composed form does it): one floating dtype, all plain or all DTensors, after torch's rule for 0-d tensors
    of the same category, which take the other operands' dtype (torch casts them so and still fuses) and stand
    next to DTensors as replicated scalars when plain."""
    first = tensors[0]
    if isinstance(first, _C.Tensor):  # the common case first: plain tensors of one floating dtype (20 -> ~3 µs a call)
        d = first.dtype
        if d.is_floating_point and not first.is_distributed:
            for t in tensors:
                if not isinstance(t, _C.Tensor) or t.dtype is not d or t.is_distributed:
                    break
            else:
                return list(tensors)
    if not all(isinstance(t, _C.Tensor) and t.dtype.is_floating_point for t in tensors):
        return None
    shaped = [t for t in tensors if t.dim() > 0] or list(tensors)
    d, dist = shaped[0].dtype, shaped[0].is_distributed
    if any(t.dtype != d or t.is_distributed != dist for t in shaped):
        return None
    out = []
    for t in tensors:
        if t.dtype != d or t.is_distributed != dist:  # 0-d, as shaped holds every other tensor
            if t.is_distributed:
                return None
            t = t.to(d)
        out.append(t)
    return out


@aligned
def lerp(input, end, weight):
    """torch's formula: input + w (end - input) for |w| < 0.5, else end - (end - input)(1 - w), so w = 1 gives end
    exactly (1e30 to 1 at w = 1 gave 0) and a large w does not overflow early. Operands of one floating dtype: one
    C++ op with torch's fused multiply-adds (core/ops/ternary.h), bit for bit. torch's argument names."""
    a, b = input, end
    # torch lets only the weight differ (a 0-d one); input and end share a dtype
    same = isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype == b.dtype
    if same and isinstance(weight, Tensor):
        ops = fused_operands(a, b, weight)
        if ops is not None:
            return _C._functional.lerp(*ops)
    elif same and isinstance(weight, (builtins.float, builtins.int)):
        ops = fused_operands(a, b)
        if ops is not None:
            return _C._functional.lerp(*ops, builtins.float(weight))
    if isinstance(a, Tensor) and isinstance(b, Tensor) and b.dtype != a.dtype:
        raise RuntimeError("expected dtype %s for `end` but got dtype %s" % (_c_type(a.dtype), _c_type(b.dtype)))
    if isinstance(a, Tensor) and not (a.dtype.is_floating_point or a.dtype.is_complex):  # torch has no such kernel
        raise NotImplementedError('"lerp_kernel_%s" not implemented for \'%s\'' % (
            "tensor" if isinstance(weight, Tensor) else "scalar", _torch_dtype_name(a.dtype)))
    if isinstance(a, Tensor) and isinstance(weight, Tensor) and weight.dim() > 0 and weight.dtype != a.dtype:
        raise RuntimeError("expected dtype %s for `weight` but got dtype %s" % (_c_type(a.dtype),
                                                                             _c_type(weight.dtype)))
    if isinstance(a, Tensor) and a.dtype in _REDUCED and getattr(b, "dtype", a.dtype) == a.dtype and \
            getattr(weight, "dtype", a.dtype) == a.dtype:  # torch's kernel: in float32, one rounding at the end
        return lerp(a.float(), b.float(), weight.float() if isinstance(weight, Tensor) else weight).to(a.dtype)
    diff = b - a
    if isinstance(weight, Tensor):
        return _C._functional.where(weight.abs() < 0.5, a + weight * diff, b - diff * (1 - weight))
    return a + diff * weight if abs(weight) < 0.5 else b - diff * (1 - weight)


_REDUCED, _c_type = _dtypes.REDUCED, _dtypes.c_type_name


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last dim (torch's eps placement)."""
    return (x1 - x2 + eps).norm(p, -1, keepdim)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if not (tuple(input1.shape) == tuple(input2.shape) == tuple(target.shape)):
        raise RuntimeError("margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           "input1: %s, input2: %s, target: %s " % (list(input1.shape), list(input2.shape),
                                                                   list(target.shape)))
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    from ._losses import in_input_dtype
    return _reduce(in_input_dtype(softplus(-target * input), input), reduction)  # log(1 + exp(-y x)), stably


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    w = _C._functional.where  # torch's formula: a target that is neither 1 nor -1 takes both terms
    zero = input * 0.0
    return _reduce(w(target != 1, (margin - input).clamp(min=0.0), zero) + w(target != -1, input, zero), reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != target.ndim + 1 or input2.ndim != target.ndim + 1:
        raise RuntimeError("%dD target tensor expects %dD input tensors, but found inputs with sizes %s and %s."
                           % (target.ndim, target.ndim + 1, list(input1.shape), list(input2.shape)))
    # torch's ATen formula: cos = Σ x1·x2 / sqrt((Σ x1² + 1e-12)(Σ x2² + 1e-12)), not cosine_similarity's clamp
    eps = 1e-12
    cos = (input1 * input2).sum(-1) / (((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps)).sqrt()
    w = _C._functional.where
    zero = cos * 0.0
    return _reduce(w(target == 1, 1.0 - cos, zero) + w(target == -1, (cos - margin).clamp(min=0.0), zero), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError("margin must be greater than 0, got %s" % margin)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError("The anchor, positive, and negative tensors are expected to have the same number of "
                           "dimensions, but got: anchor %dD, positive %dD, and negative %dD inputs"
                           % (anchor.ndim, positive.ndim, negative.ndim))
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).clamp(min=0.0), reduction)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: input [N, C, *] normalized over each group of C / num_groups
    channels and the trailing dims (biased variance), then weight / bias per channel."""
    if input.ndim < 2:
        raise RuntimeError("Expected at least 2 dimensions for input tensor but received %d" % input.ndim)
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           "shape %s and num_groups=%d" % (list(input.shape), num_groups))
    size = [n * c // num_groups, num_groups] + list(input.shape[2:])
    if math.prod([size[0]] + size[2:]) == 1:  # torch's _verify_batch_size: one value per group
        raise ValueError("Expected more than 1 value per channel when training, got input size %s" % size)
    x = input.reshape(n, num_groups, -1)
    x = x.float() if input.dtype in _REDUCED else x  # float32 statistics and normalization, rounded once (torch's)
    centered = x - x.mean(-1, keepdim=True)
    y = (centered * ((centered * centered).mean(-1, keepdim=True) + eps).rsqrt()).reshape(*input.shape)
    out = _channel_affine(y, weight, bias)
    return out.to(input.dtype) if input.dtype in _REDUCED else out  # (torch's mixed-type kernel: the input's)


def _channel_affine(y, weight=None, bias=None):
    """y [N, C, *] scaled by weight [C] and shifted by bias [C] (either may be None), per channel."""
    shape = [1, y.shape[1]] + [1] * (y.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(*shape)
    if bias is not None:
        y = y + bias.reshape(*shape)
    return y


@aligned
def sign(x):
    if x.dtype == _dtypes.bool:
        return x.clone()
    one, zero = _scalar_like(x, 1.0), _scalar_like(x, 0.0)
    value = _C._functional.where(x > 0, one, _C._functional.where(x < 0, -one, zero))  # 0 for 0 and NaN
    return with_zero_gradient(value, x)  # torch's sign is differentiable, its gradient zero


def isnan(x):
    return x != x


def isfinite(x):
    return (x - x) == (x - x) if x.dtype.is_floating_point else x == x


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN, inf and -inf of x replaced at once (the masks come from x: a nan of 1e39, inf in float32, was then
    replaced by posinf's default); replacements beyond the dtype's range are infinite, as torch's cast."""
    big = {_dtypes.float64: np.finfo(np.float64).max, _dtypes.float16: 65504.0,
           _dtypes.bfloat16: 3.3895313892515355e38}.get(x.dtype, float(np.finfo(np.float32).max))
    out = _C._functional.where(x == math.inf, _scalar_like(x, big if posinf is None else posinf), x)
    out = _C._functional.where(x == -math.inf, _scalar_like(x, -big if neginf is None else neginf), out)
    return _C._functional.where(isnan(x), _scalar_like(x, nan), out)


@zero_dim_as_vector
def logsumexp(x, dim, keepdim=False):
    """log Σ exp over dim, shifted by the max (finite for large inputs; -inf rows stay -inf)."""
    dims = [wrap_dim(d, x.ndim) for d in ([dim] if isinstance(dim, int) else dim)]
    if not x.dtype.is_floating_point:  # integer and bool inputs in the default float dtype (torch's)
        x = x.to(_C._get_default_dtype())
    if any(x.shape[d] == 0 for d in dims):  # an empty sum: log 0 = -inf, as torch
        return (x.sum(dims, keepdim=keepdim) + float("-inf"))
    m = x.detach().amax(dims, keepdim=True)
    m = _C._functional.where(isfinite(m), m, _scalar_like(m, 0.0))  # inf / -inf rows give inf / -inf
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.reshape(*[s for i, s in enumerate(out.shape) if i not in [d % x.ndim for d in dims]])


def _accumulation_input(x, dtype):
    """cumsum / prod's input: cast to dtype, else bool and integer tensors as int64 (torch's rule)."""
    if dtype is not None:
        return x.to(dtype)
    return x if x.dtype.is_floating_point or x.dtype == _dtypes.int64 else x.long()


_NARROW_FLOATS = (_dtypes.float32, _dtypes.float16, _dtypes.bfloat16)


def cumsum(x, dim, dtype=None):
    """Running sums along dim; bool and integer inputs give int64, as torch. A plain tensor sums in one pass in
    torch's order and accumulator (core/ops/scan_sort.h: float32 in float64, so 2**24 + 1 - 2**24 + 1 gives 2);
    a DTensor by log-step prefix adds (Hillis-Steele: out[i] += out[i - 2^k]) in float64 for narrower floats,
    so NaN and inf stay where torch puts them and integers add exactly."""
    from ._tensor import zeros_like
    x = _accumulation_input(x, dtype)
    if isinstance(x, _C.Tensor) and not x.is_distributed:
        return _C._functional._cumsum(x, wrap_dim(dim, x.ndim))
    if x.dtype in _NARROW_FLOATS:
        return cumsum(x.to(_dtypes.float64), dim).to(x.dtype)
    dim = wrap_dim(dim, x.ndim)
    if x.ndim == 0:
        return x.clone()
    x = gathered_along(x, dim)  # a DTensor sharded along dim: gathered once (each log step's shift did)
    n, out, shift = x.shape[dim], x, 1
    while shift < n:
        shape = list(out.shape)
        shape[dim] = shift
        head = out.narrow(dim, 0, shift)  # zeros in its layout: a DTensor's cat needs DTensor parts
        shifted = _C._functional.cat([zeros_like(head), out.narrow(dim, 0, n - shift)], dim)
        out = out + shifted
        shift *= 2
    return out


# ---- shape and indexing, composed -------------------------------------------------------------------

def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if x.ndim == 0:  # dim 0 / -1 of a 0-d tensor name its only element, as torch's: nothing moves
        for d in src + dst:
            wrap_dim(d, 0)
        return x.view(())
    src, dst = [wrap_dim(s, x.ndim) for s in src], [wrap_dim(d, x.ndim) for d in dst]
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
    if x.is_distributed:  # torch's rule: the pieces would each live on one rank (select replicated the dim)
        d = wrap_dim(dim, x.ndim)
        if builtins.any(isinstance(p, (_C.Shard, _C._StridedShard)) and p.dim % x.ndim == d for p in x.placements):
            raise RuntimeError("Attempted to unbind along the sharded dimension %d. Please redistribute the input "
                               "explicitly before unbinding." % d)
    return tuple(x.select(dim, i) for i in range(x.shape[dim]))


def unflatten(x, dim, sizes):
    dim = wrap_dim(dim, x.ndim)
    return x.reshape(*(list(x.shape[:dim]) + list(sizes) + list(x.shape[dim + 1:])))


def _out_of_range(index, size):
    """The first index outside [0, size) (negative ones included), or None; plain for a DTensor index."""
    if not isinstance(index, Tensor) or index.is_distributed or index.numel() == 0:
        values = np.asarray(index if not isinstance(index, Tensor) else [], dtype=np.int64).reshape(-1)
    else:
        values = index.detach().numpy().reshape(-1)
    bad = values[(values < 0) | (values >= size)]
    return builtins.int(bad[0]) if bad.size else None


def check_index_dtype(index, name):
    """torch's check of an index_add_ / index_reduce_ index: int32 or int64 (a float one was truncated)."""
    if isinstance(index, Tensor) and index.dtype != _dtypes.int64 and index.dtype != _dtypes.int32:
        raise RuntimeError("%s(): Expected dtype int32/int64 for index but got: %s"
                           % (name, _torch_dtype_name(index.dtype)))


def index_select(x, dim, index):
    if x.ndim == 0:  # torch: a 0-d tensor is its own only element (index 0 or -1's errors below)
        wrap_dim(dim, 1)
        n = index.numel() if isinstance(index, Tensor) else len(list(index))
        if n != 1:  # (it returned the scalar for [0, 0])
            raise RuntimeError("index_select(): Index to scalar can have only 1 value, got %d value(s)" % n)
        if _out_of_range(index if isinstance(index, Tensor) else list(index), 1) is not None:
            raise IndexError("index out of range in self")
        return x.clone()
    dim = wrap_dim(dim, x.ndim)
    if isinstance(index, Tensor):
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if index.dtype not in (_dtypes.int32, _dtypes.int64):  # (uint8 too: it is not an index here, as torch)
            raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    size = x.shape[dim] if x.ndim else 1
    bad = _out_of_range(index, size)
    if bad is not None:  # negative indices included: torch does not wrap them here (they read other rows)
        raise IndexError("index out of range in self")
    if isinstance(index, Tensor) and not index.is_distributed and not x.is_distributed and x.numel() > 0:
        # plain tensors: runs of the other dims copied per index in C++ (core/ops/index_dim.h, differentiable)
        return _C._functional._index_select_dim(x, dim, index.reshape(-1).to(_dtypes.int64))
    if isinstance(index, Tensor) and index.is_distributed:  # a replicated x, a sharded index: its rows per rank
        from .distributed.tensor import Shard
        shape = list(x.shape[:dim]) + [index.numel()] + list(x.shape[dim + 1:])
        out = by_index_pieces(x, index, lambda xl, il: index_select(xl, dim, il.reshape(-1)), shape,
                              [Shard(dim) if p.is_shard() else p for p in index.placements], along=dim)
        if out is not None:
            return out
    return x[(builtins.slice(None),) * dim + (index.reshape(-1) if isinstance(index, Tensor) else list(index),)]


@zero_dim_as_vector
def flip(x, *dims, **kwargs):
    """torch.flip(x, dims) and Tensor.flip(dims) / Tensor.flip(0, 1)."""
    dims = kwargs.pop("dims", dims[0] if len(dims) == 1 else dims)
    if kwargs:
        raise TypeError("flip() got unexpected keyword arguments %s" % sorted(kwargs))
    out = x
    dims = [dims] if isinstance(dims, int) else list(dims)
    wrapped = [wrap_dim(d, x.ndim) for d in dims]
    for d in wrapped:
        if wrapped.count(d) > 1:  # (flip(0, 0) flipped twice: the input back, silently)
            raise RuntimeError("dim %d appears multiple times in the list of dims" % d)
    for d in dims:
        out = index_select(out, d, list(range(x.shape[d] - 1, -1, -1)))
    if out is x:  # no dims: a copy, as torch's
        out = x.clone()
    return out


def roll(x, shifts, dims=None):
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(*x.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):  # (the extra shifts were dropped)
        raise RuntimeError("shifts and dimensions must align. shifts: %d, dims:%d" % (len(shifts), len(dims)))
    out = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        out = index_select(out, d, [(i - s) % n for i in range(n)])
    return out


def repeat(x, *sizes):
    sizes = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else list(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    if any(r < 0 for r in sizes):
        shape = [r * n for r, n in zip(sizes, [1] * (len(sizes) - x.ndim) + list(x.shape))]
        raise RuntimeError("Trying to create tensor with negative dimension %d: %s"
                           % (builtins.min(shape), shape))
    x = x.reshape(*([1] * (len(sizes) - x.ndim) + list(x.shape)))
    copied = False
    for d, r in enumerate(sizes):
        if r != 1:
            x = _C._functional.cat([x] * r, d) if r > 0 else index_select(x, d, [])
            copied = True
    return x if copied else x.clone()  # all ones: still a copy, as torch's (never the input's memory)


def repeat_interleave(x, repeats=None, dim=None, *, output_size=None):
    """torch.repeat_interleave; with repeats alone (x the counts) the indices repeated by their counts."""
    if repeats is None:
        counts = x.reshape(-1).tolist()
        if any(c < 0 for c in counts):
            raise RuntimeError("repeats can not be negative")
        return _tensor([i for i, c in enumerate(counts) for _ in range(c)], dtype=x.dtype)
    out = _repeat_interleave(x, repeats, dim)
    if output_size is not None and out.shape[dim if dim is not None else 0] != output_size:
        raise RuntimeError("repeat_interleave: output_size %d does not match the repeats' sum %d"
                           % (output_size, out.shape[dim if dim is not None else 0]))
    return out


def _repeat_interleave(x, repeats, dim):
    if dim is None:
        x, dim = x.reshape(-1), 0
    n = x.shape[dim]
    reps = [repeats] * n if isinstance(repeats, int) else (repeats.reshape(-1).tolist() if isinstance(repeats, Tensor)
                                                             else list(repeats))
    if len(reps) == 1:  # one repeat count broadcasts, as torch
        reps = reps * n
    if any(r < 0 for r in reps):  # (negative counts gave other rows)
        raise RuntimeError("Repeats must be non-negative" if isinstance(repeats, int) else
                           "repeats can not be negative")
    return index_select(x, dim, [i for i in range(n) for _ in range(reps[i])])


def masked_select(x, mask):
    if mask.dtype != _dtypes.bool:  # (a uint8 mask was read as indices)
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = _broadcast_shape(tuple(mask.shape), tuple(x.shape))
    xs = x.expand(*shape) if tuple(x.shape) != shape else x
    m = mask.expand(*shape) if tuple(mask.shape) != shape else mask
    return xs.reshape(-1)[m.reshape(-1)]


def outer(a, b):
    return a.reshape(-1, 1) * b.reshape(1, -1)


@shape_only
def expand_as(x, other):
    return x.expand(*other.shape)


def diag(x, diagonal=0):
    if x.ndim not in (1, 2):
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got %dD" % x.ndim)
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


@_float32_under_autocast_early
def trace(x):
    return diag(x).sum()


def _index_mask(x, dim, index):
    """A bool tensor broadcastable to x, true at `index` along dim."""
    d = wrap_dim(dim, x.dim())
    size = x.shape[d] if x.dim() else 1  # a 0-d x is its own one slice (x.shape[0] raised IndexError)
    hit = np.zeros(size, dtype=bool)
    values = np.asarray(index.detach().numpy() if isinstance(index, Tensor) else index).reshape(-1)
    bad = values[(values < -size) | (values >= size)]
    if bad.size:  # (numpy's message named an axis)
        raise IndexError("index %d is out of bounds for dimension %d with size %d" % (bad[0], d, size))
    hit[values] = True
    if x.dim() == 0:
        return _C._from_numpy(np.array(hit[0]))
    shape = [1] * x.dim()
    shape[d] = size
    return _C._from_numpy(hit.reshape(shape))


def _index_fill(x, dim, index, value):
    """torch.index_fill: x with the slices at index along dim set to value (differentiable in x, and in a 0-d
    tensor value: the sum of the filled positions' gradients, as torch's; it was read as a number)."""
    _check_index_fill(index, value)
    if isinstance(value, Tensor) and value.requires_grad and _C.is_grad_enabled():
        return _C._functional.where(_index_mask(x, dim, index), value.to(x.dtype), x)
    return x.masked_fill(_index_mask(x, dim, index), value)


def _index_fill_(x, dim, index, value):
    _check_index_fill(index, value)
    return x.masked_fill_(_index_mask(x, dim, index), value)


def _check_index_fill(index, value):
    """torch's checks (an int32 index and a one-element 1-D value were taken; masked_fill_ named itself)."""
    if isinstance(index, Tensor) and index.dtype != _dtypes.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor, but got tensor with %d "
                           "dimension(s)." % value.dim())


def _tri_indices(upper):
    def fn(row, col, offset=0, *, dtype=None, device=None, layout=None):
        r, c = (np.triu_indices if upper else np.tril_indices)(row, offset, col)
        return _C._from_numpy(np.ascontiguousarray(np.stack([r, c]).astype(np.int64))).to(dtype or _dtypes.int64)
    fn.__name__ = "triu_indices" if upper else "tril_indices"
    return fn


# ---- stacking by dimension -----------------------------------------------------------------------------

_promoted = _dtypes.promoted


def hstack(tensors):
    """torch.hstack: cat along dim 1, or dim 0 for 1-D tensors (0-D ones count as 1-D)."""
    tensors = [t.reshape(1) if t.dim() == 0 else t for t in _promoted(tensors)]
    return _C._functional.cat(tensors, 0 if tensors[0].dim() == 1 else 1)


def vstack(tensors):
    """torch.vstack: cat along dim 0 after making 0-D and 1-D tensors rows [1, N]."""
    return _C._functional.cat([t.reshape(1, -1) if t.dim() < 2 else t for t in _promoted(tensors)], 0)


# ---- host-side values (no gradient by construction) ---------------------------------------------------

def _host(x, name):
    if isinstance(x, Tensor) and x.requires_grad and _C.is_grad_enabled():
        raise NotImplementedError("%s of a tensor that requires grad: tessel has no %s op with a gradient (it "
                                  "computes %s on constants: build the table under no_grad, or from a tensor "
                                  "that does not require grad)" % (name, name, name))
    return _host_numpy(x) if isinstance(x, Tensor) else np.asarray(x)


def _float_op(name):
    """t.X() for a C++ op defined on floats (with its gradient, on DTensors too): integer and bool tensors
    are computed in the default dtype (float32 unless set), as torch promotes them."""
    method = getattr(_C.Tensor, name)

    def fn(input):
        if type(input) is Tensor and not input.is_distributed:
            try:  # fast path: the C++ op takes a floating tensor as is and refuses (before computing) the others
                return method(input)
            except _C.InvalidArgumentError:
                pass  # an integer or bool tensor (or a real error, which the line below raises again)
        return method(input if input.dtype.is_floating_point else input.to(_dtypes.default_float()))
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
    if source.dtype != x.dtype:
        raise RuntimeError("index_add_(): self (%s) and source (%s) must have the same scalar type"
                           % (_torch_dtype_name(x.dtype), _torch_dtype_name(source.dtype)))
    d = wrap_dim(dim, x.ndim)  # first: source.shape[dim] raised "tuple index out of range"
    check_index_dtype(index, "index_add_")
    if isinstance(index, Tensor) and index.ndim == 0:  # a 0-d index is one index, as torch's
        index = index.reshape(1)
    if index.ndim != 1 or (source.ndim and index.shape[0] != source.shape[dim]):
        raise IndexError("index_add_(): Number of indices (%d) should be equal to source.size(dim) (%d)"
                         % (index.numel(), source.shape[dim] if source.ndim else 1))
    bad = _out_of_range(index, x.shape[d] if x.ndim else 1)
    if bad is not None and x.ndim == 2:  # (a negative index added into the row from the end)
        raise RuntimeError("index %d is out of bounds for dimension %d with size %d" % (bad, d, x.shape[d]))
    if bad is not None:  # torch's error differs by rank: its CPU kernel has a separate 2-D loop
        raise IndexError("index out of range in self")
    if not x.dtype.is_floating_point:
        alpha = builtins.int(alpha)  # torch converts alpha to self's integer type (2.5 adds twice the source)
    from ._setitem import ROUNDED_PER_ADD, index_add_rows, rounded_in_order
    if x.dtype.value in ROUNDED_PER_ADD and x.ndim > 1:
        # torch's 16-bit index_add_ of a tensor of 2 or more dims sums in float32 and rounds once
        return index_add(x.float(), dim, index, source.float(), alpha=alpha).to(x.dtype)
    moved = source.movedim(d, 0) if source.ndim > 1 else source.reshape(-1, 1)
    target = x.movedim(d, 0) if x.ndim > 1 else x.reshape(-1, 1)
    width = 1
    for size in moved.shape[1:]:
        width *= size  # not reshape(n, -1): no -1 for n = 0 (an expert that got no tokens)
    rows = index_add_rows(moved.reshape(moved.shape[0], width), index.long(), target.shape[0])
    rows = rows.reshape(*target.shape)
    # torch's 16-bit index_add_ of a 1-D x rounds after each add, in index order
    if x.dtype.value in ROUNDED_PER_ADD and not x.is_distributed and moved.numel():
        positions = (index.long().numpy().reshape(-1, 1) * width + np.arange(width)).reshape(-1)
        out = rounded_in_order(target + (rows * alpha if alpha != 1 else rows), target, positions, moved, alpha)
        return out.movedim(0, d) if x.ndim > 1 else out.reshape(*x.shape)
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
    """torch.round: half to even; with decimals torch's formula, round(x · 10^d) / 10^d, or for d < 0
    round(x / 10^-d) · 10^-d (exact for powers of ten), computed in float32 for 16-bit floats (x · 100 of a
    float16 1234.5 overflowed); 10^d beyond the float range gives NaN as there. An integer tensor: a copy."""
    if decimals == 0 or not x.dtype.is_floating_point:
        return x._round()
    wide = x.float() if x.dtype in (_dtypes.float16, _dtypes.bfloat16) else x
    scale = _C._full([], math.inf if abs(decimals) > 308 else 10.0 ** abs(decimals), wide.dtype)
    out = (wide / scale)._round() * scale if decimals < 0 else (wide * scale)._round() / scale
    return out.to(x.dtype)


def one_hot(x, num_classes=-1):
    """torch's checks, in its order: int64 indices only, an empty input needs num_classes > 0, then the values'
    sign, then their bound."""
    if x.dtype != _dtypes.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    a = _host(x, "one_hot").astype(np.int64)
    if a.size == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        return _tensor(np.zeros(a.shape + (num_classes,), dtype=np.int64))
    if a.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(a.max()) + 1
    elif num_classes <= a.max():
        raise RuntimeError("Class values must be smaller than num_classes.")
    return _tensor(np.eye(num_classes, dtype=np.int64)[a])


def nonzero(x, *, as_tuple=False):
    """torch.nonzero: the indices of x's nonzero elements (no gradient, as torch's: an x that requires grad is
    read as its values); a 0-d x has one [1, 0] row or none (numpy read it as 1-D, with a DeprecationWarning)."""
    a = _host_numpy(x)
    if a.ndim == 0:
        hit = np.flatnonzero(a.reshape(1)).astype(np.int64)
        return (_tensor(hit),) if as_tuple else _tensor(np.zeros((hit.size, 0), np.int64))
    idx = np.nonzero(a)
    if as_tuple:
        return tuple(_tensor(i.astype(np.int64)) for i in idx)
    return _tensor(np.stack(idx, 1).astype(np.int64) if idx else np.zeros((0, 0), np.int64))


def argwhere(x):
    return nonzero(x)


def count_nonzero(x, dim=None):
    return (x != 0).long().sum(dim) if dim is not None else (x != 0).long().sum()


def _exact_numpy(t):
    """t's values in numpy (bfloat16, which numpy lacks, as float32: exact)."""
    return (t.float() if t.dtype == _dtypes.bfloat16 else t).detach().numpy()


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    from ._logical import check_close
    check_close(a, b, rtol, atol, "allclose")
    return bool(np.allclose(_exact_numpy(a), _exact_numpy(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(a, b):
    if a.__class__ is Tensor and b.__class__ is Tensor and a.dtype is b.dtype and not a.is_distributed and \
            not b.is_distributed:  # two plain tensors of one dtype: compared in C++ (two numpy copies cost ~7 us)
        if a.shape != b.shape:
            return False
        every = _C._any_all(a == b, None, False, True)  # (None: a case it leaves to the general path)
        if every is not None:
            return every.item()
    return tuple(a.shape) == tuple(b.shape) and bool((_exact_numpy(a) == _exact_numpy(b)).all())


def numel(x):
    return x.numel()


# ---- nn.functional, composed ---------------------------------------------------------------------------

from ._losses import (  # noqa: E402 (the losses, split out by concept)
    _legacy, _reduce, binary_cross_entropy, binary_cross_entropy_with_logits, huber_loss, kl_div, l1_loss, nll_loss,
    smooth_l1_loss)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps)
    if out is None:
        return input / denom
    from . import div  # torch's out= rules (resizing, dtype, no autograd through out=)
    return div(input, denom.expand_as(input), out=out)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Σ (x1 / max(‖x1‖, eps)) (x2 / max(‖x2‖, eps)) over dim: torch's order (each side normalized first, so
    1e30-sized vectors give a finite answer instead of inf / inf). As torch's ATen, the clamp to eps changes the
    norm's value only (it runs under no_grad there): the gradient flows through ‖x‖ as if unclamped."""
    def clamped_norm(x):
        n = x.norm(2.0, dim, keepdim=True)
        return _C._functional.where(n < eps, n + (eps - n).detach(), n)  # (an infinite norm stays inf)
    return ((x1 / clamped_norm(x1)) * (x2 / clamped_norm(x2))).sum(dim)


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

def sized(size, kwargs):
    """new_zeros / new_ones / new_empty's size, as varargs or torch's size= keyword (popped from kwargs)."""
    return (kwargs.pop("size"),) if "size" in kwargs else size


def _new_full(x, size, value, dtype=None, device=None, requires_grad=False):
    """Tensor.new_zeros / new_ones: size as varargs or one sequence (_tensor.new_filled: DTensors too)."""
    from ._tensor import new_filled
    shape = list(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size)
    return new_filled(x, shape, value, dtype, requires_grad)


_BOTH = dict(  # torch.X(t, ...) and t.X(...)
    minimum=minimum, maximum=maximum, square=square, reciprocal=reciprocal, lerp=lerp, sign=sign, isnan=isnan,
    isfinite=isfinite, nan_to_num=nan_to_num, logsumexp=logsumexp, cumsum=cumsum,
    movedim=movedim, swapaxes=swapaxes, unbind=unbind, unflatten=unflatten, index_select=index_select, flip=flip,
    roll=roll, repeat_interleave=repeat_interleave, masked_select=masked_select, outer=outer, diag=diag,
    trace=trace, round=round_, trunc=trunc, fix=trunc, index_add=index_add, nonzero=nonzero, argwhere=argwhere, count_nonzero=count_nonzero, allclose=allclose, equal=equal,
    clip=lambda x, min=None, max=None: x.clamp(min, max), index_fill=_index_fill)

TORCH_FUNCTIONS = dict(_BOTH, hstack=hstack, bernoulli=bernoulli, triu_indices=_tri_indices(True), tril_indices=_tri_indices(False), vstack=vstack, row_stack=vstack, **_C_UNARY, linspace=linspace, numel=numel, softplus=softplus)

TENSOR_METHODS = dict(
    _BOTH, bernoulli=bernoulli, exponential_=exponential_, random_=random_,
    index_fill_=_index_fill_, nbytes=property(lambda x: x.numel() * x.element_size()), **_C_UNARY_METHODS, index_add_=index_add_, repeat=repeat, expand_as=expand_as,
    new_zeros=lambda x, *size, **kw: _new_full(x, sized(size, kw), 0.0, **kw),
    new_ones=lambda x, *size, **kw: _new_full(x, sized(size, kw), 1.0, **kw),
    new_full=lambda x, size, fill_value, dtype=None, device=None, requires_grad=False: _new_full(
        x, (list(size),), fill_value, dtype, requires_grad=requires_grad),
    new_tensor=lambda x, data, dtype=None, device=None, requires_grad=False: _tensor(
        data, dtype=dtype or x.dtype, requires_grad=requires_grad))

from ._autocast_policy import float32_under_autocast as _float32_under_autocast  # noqa: E402


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


# ---- more composed functions ---------------------------------------------------------------------------------

def prod(x, dim=None, keepdim=False, *, dtype=None):
    """Product over dim (all elements when None) by a pairwise tree of multiplies: exact with zeros and
    signs, a gradient through each multiply; bool and integer inputs give int64, as torch."""
    x = _accumulation_input(x, dtype)
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape(*([1] * x.ndim)) if keepdim else out
    dim = wrap_dim(dim, x.ndim)
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
    if x.shape[dim] == 0:  # the empty product: ones, still on x's graph (torch's ProdBackward; a fresh full lost it)
        x = x.sum(dim, keepdim=True) + 1
    return x if keepdim else x.squeeze(dim)


_warned_meshgrid = []


def meshgrid(*tensors, indexing=None):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        if not _warned_meshgrid:  # torch warns once per process, then takes "ij"
            _warned_meshgrid.append(True)
            import warnings
            warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
                          "argument.", UserWarning, stacklevel=2)
        indexing = "ij"
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
        if k <= 0:  # (it returned an empty tuple)
            raise RuntimeError("number of sections must be larger than 0, got %d" % k)
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


_prod_autocast = _float32_under_autocast(prod)  # torch's CPU autocast float32 list has prod
TORCH_FUNCTIONS.update(prod=_prod_autocast, meshgrid=meshgrid, tensor_split=tensor_split, kron=kron)
TENSOR_METHODS.update(prod=_prod_autocast, tensor_split=tensor_split, kron=kron)




# The scatter family, einsum and the logical / bitwise operators live in their own files (split by concept);
# importing them registers their functions and methods.
from . import _scatter  # noqa: E402,F401
from . import _einsum, _logical  # noqa: E402,F401 (einsum; logical / bitwise operators and small functions)
from . import _order, _pow  # noqa: E402,F401 (median / kthvalue / quantile; pow with a tensor exponent)
from . import _counting  # noqa: E402,F401 (unique, bincount, searchsorted, bucketize, isin, histc)
from . import _division  # noqa: E402,F401 (remainder, fmod, floor division: %, //)
from . import _composed  # noqa: E402,F401 (addcmul, tensordot, cross, diagonal, cummax, mode, ...)
