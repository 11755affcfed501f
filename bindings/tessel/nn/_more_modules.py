"""torch.nn's remaining common layers and their functional forms, composed from tessel's differentiable ops:
ChannelShuffle (ShuffleNet), FeatureAlphaDropout, MaxUnpool1d/2d/3d (SegNet-style decoders: the inverse of
max_pool*d(return_indices=True)), MultiLabelMarginLoss, TripletMarginWithDistanceLoss, LazyLinear (in_features
from the first input), LazyConv*d / LazyConvTranspose*d / LazyBatchNorm*d (which become their layers on the first
forward, as torch's) and DataParallel (on tessel's CPU-only Python face: the module itself, as torch's
DataParallel is with no visible GPU), plus F.adaptive_max_pool*d_with_indices.

    unpool = nn.MaxUnpool2d(2)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    x_again = unpool(y, idx)          # the maxima back in place, zeros elsewhere
"""
import builtins
import math

from .. import _C
from .._inplace import honours_inplace as _honours_inplace
from ..autograd import Function as _Function
from .modules import Module, Parameter
from .._autocast_policy import float32_under_autocast as _float32_under_autocast

Tensor = _C.Tensor


def _reduce(loss, reduction):
    from .._extra import _reduce as reduce
    return reduce(loss, reduction)


def channel_shuffle(input, groups):
    """F.channel_shuffle / nn.ChannelShuffle: channels [g0 g1 ...] of each of `groups` groups interleaved:
    [N, C, *] viewed [N, groups, C/groups, *], the two group dims swapped, viewed back."""
    if groups <= 0:
        raise RuntimeError("Number of groups to divide channels in must be positive. Value of groups:%d" % groups)
    if input.dim() < 3:
        raise RuntimeError("channel_shuffle expects input to have at least 3 dimensions, but got input with sizes %s"
                           % list(input.shape))
    n, c = input.shape[0], input.shape[1]
    if c % groups:
        raise RuntimeError("Number of channels must be divisible by groups. Got %d channels and %d groups."
                           % (c, groups))
    rest = list(input.shape[2:])
    out = input.reshape([n, groups, c // groups] + rest).transpose(1, 2).reshape([n, c] + rest)
    return out.clone() if groups == 1 else out  # one group: a copy, as torch's (never the input's memory)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """F.feature_alpha_dropout: alpha dropout with one draw per (sample, channel), the whole feature map kept
    or set to SELU's negative saturation, then the affine map that keeps mean and variance (as alpha_dropout);
    p = 1 gives zeros, eval and p = 0 the input itself."""
    if not 0 <= p <= 1:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if not training or p == 0:
        return input
    if input.dim() < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return _feature_alpha_dropout(input, p, inplace)


@_honours_inplace
def _feature_alpha_dropout(input, p, inplace=False):
    from .._tensor import rand
    from .._composed import torch_alpha_dropout
    if p == 1:
        return input * 0.0
    shape = list(input.shape[:2]) + [1] * (input.dim() - 2)
    if not input.is_distributed and input.device.type == "cpu":
        return torch_alpha_dropout(input, p, shape)
    alpha_p = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    keep = (rand(*shape) >= p).to(input.dtype)
    return (input * keep + alpha_p * (1 - keep)) * a + (-a * alpha_p * p)


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _max_unpool(nd, input, indices, kernel_size, stride=None, padding=0, output_size=None):
    kernel = _tuple(kernel_size, nd)
    stride = kernel if stride is None else _tuple(stride, nd)
    padding = _tuple(padding, nd)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError("max_unpool%dd: expected a %dD or %dD input, got %s"
                           % (nd, nd + 1, nd + 2, list(input.shape)))
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError("Expected shape of indices to be same as that of the input tensor (%s) but got indices "
                           "tensor with shape: %s" % (list(input.shape), list(indices.shape)))
    spatial_in = list(input.shape[-nd:])
    default = [(spatial_in[i] - 1) * stride[i] - 2 * padding[i] + kernel[i] for i in range(nd)]
    if output_size is None:
        size = default
    else:
        size = list(output_size)[-nd:]
        for i in range(nd):
            lo, hi = default[i] - stride[i], default[i] + stride[i]
            if not lo < size[i] < hi:
                raise ValueError("invalid output_size %s (dim %d must be between %d and %d)"
                                 % (list(output_size), i, lo + 1, hi - 1))
    lead = list(input.shape[:-nd])
    planes = 1
    for s in lead:
        planes *= s
    plane = 1
    for s in size:
        plane *= s
    flat_idx = indices.reshape(planes, -1)
    if flat_idx.numel() and (builtins.bool(flat_idx.lt(0).any().item()) or
                             builtins.bool(flat_idx.ge(plane).any().item())):
        raise RuntimeError("Found an invalid max index: the indices must lie in [0, %d) for an output of spatial size "
                           "%s" % (plane, size))
    out = _Unpool.apply(input.reshape(planes, -1), flat_idx, plane)
    return out.reshape(lead + size)


class _Unpool(_Function):
    """Each value scattered to its index in a zero plane; the backward gathers at the indices, as torch's
    max_unpool backward: a repeated index (overlapping pooling windows) sends the gradient to every value
    written there, not only to the last."""

    @staticmethod
    def forward(ctx, values, index, plane):
        ctx.save_for_backward(index)
        return _C._full([values.shape[0], plane], 0.0, values.dtype).scatter(1, index, values)

    @staticmethod
    def backward(ctx, grad):
        index, = ctx.saved_tensors
        return grad.gather(1, index), None, None


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """F.max_unpool1d: each value written at its max_pool1d index within its plane, zeros elsewhere."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


@_float32_under_autocast
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """F.max_unpool2d: each value written at its max_pool2d index (row-major within its H×W plane)."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


@_float32_under_autocast
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """F.max_unpool3d: each value written at its max_pool3d index within its D×H×W volume."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)


@_float32_under_autocast
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """F.multilabel_margin_loss: per sample, Σ over its target entries j (target's entries up to the first -1; a
    class listed twice counts twice, as torch's) and non-target classes i of max(0, 1 - (x[j] - x[i])), divided
    by the number of classes."""
    from .._losses import _legacy
    reduction = _legacy(size_average, reduce, reduction)
    squeeze = input.dim() == 1
    x = input.unsqueeze(0) if squeeze else input
    y = target.unsqueeze(0) if target.dim() == 1 else target
    if x.dim() != 2 or tuple(y.shape) != tuple(x.shape):
        raise RuntimeError("multilabel_margin_loss: inconsistent target size: %s for input of size: %s"
                           % (list(target.shape), list(input.shape)))
    import numpy as np
    labels = y.detach().numpy()
    n, c = labels.shape
    count = np.zeros((n, c), dtype=np.float64)  # how often each class is listed before the first -1
    for row in range(n):
        for v in labels[row]:
            if v < 0:
                break
            if v >= c:
                raise RuntimeError("multilabel_margin_loss: target index %d out of range for %d classes" % (v, c))
            count[row, v] += 1
    listed = _C._from_numpy(count).to(x.dtype)
    others = _C._from_numpy((count == 0).astype(np.float64)).to(x.dtype)
    # hinge[n, j, i] = max(0, 1 - x[n, j] + x[n, i]) for j a target (times its listings), i not one
    hinge = (1 - x.unsqueeze(2) + x.unsqueeze(1)).clamp(0, None)
    loss = (hinge * listed.unsqueeze(2) * others.unsqueeze(1)).sum([1, 2]) / c
    if squeeze and reduction == "none":
        loss = loss.squeeze(0)
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """F.triplet_margin_with_distance_loss: max(d(a, p) - d(a, n) + margin, 0) with d pairwise_distance unless
    given; swap takes min(d(a, n), d(p, n)) as the negative distance."""
    if margin <= 0:  # (the module's own check words it as "TripletMarginWithDistanceLoss: expected ...")
        raise ValueError("margin must be greater than 0, got %s" % margin)
    from .._extra import pairwise_distance
    d = distance_function if distance_function is not None else pairwise_distance
    d_ap, d_an = d(anchor, positive), d(anchor, negative)
    if swap:
        from .._extra import minimum
        d_an = minimum(d_an, d(positive, negative))
    return _reduce((d_ap - d_an + margin).clamp(0, None), reduction)


def _with_indices(name):
    def fn(input, output_size):
        from . import functional as F
        return getattr(F, name)(input, output_size, return_indices=True)
    fn.__name__ = name + "_with_indices"
    return fn


FUNCTIONAL = dict(
    channel_shuffle=channel_shuffle, native_channel_shuffle=channel_shuffle,
    feature_alpha_dropout=feature_alpha_dropout, max_unpool1d=max_unpool1d, max_unpool2d=max_unpool2d,
    max_unpool3d=max_unpool3d, multilabel_margin_loss=multilabel_margin_loss,
    triplet_margin_with_distance_loss=triplet_margin_with_distance_loss,
    adaptive_max_pool1d_with_indices=_with_indices("adaptive_max_pool1d"),
    adaptive_max_pool2d_with_indices=_with_indices("adaptive_max_pool2d"),
    adaptive_max_pool3d_with_indices=_with_indices("adaptive_max_pool3d"),
)


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return channel_shuffle(input, self.groups)

    def extra_repr(self):
        return "groups=%d" % self.groups


class FeatureAlphaDropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return feature_alpha_dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return "p=%s, inplace=%s" % (self.p, self.inplace)


def _unpool_module(nd):
    class MaxUnpool(Module):
        def __init__(self, kernel_size, stride=None, padding=0):
            super().__init__()
            self.kernel_size = _tuple(kernel_size, nd)
            self.stride = self.kernel_size if stride is None else _tuple(stride, nd)
            self.padding = _tuple(padding, nd)

        def forward(self, input, indices, output_size=None):
            return _max_unpool(nd, input, indices, self.kernel_size, self.stride, self.padding, output_size)

        def extra_repr(self):
            return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)
    MaxUnpool.__name__ = MaxUnpool.__qualname__ = "MaxUnpool%dd" % nd
    return MaxUnpool


MaxUnpool1d, MaxUnpool2d, MaxUnpool3d = _unpool_module(1), _unpool_module(2), _unpool_module(3)


class MultiLabelMarginLoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(Module):
    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__()
        if margin <= 0:
            raise ValueError("TripletMarginWithDistanceLoss: expected margin to be greater than 0, got %s instead"
                             % margin)
        self.distance_function, self.margin, self.swap, self.reduction = distance_function, margin, swap, reduction

    def forward(self, anchor, positive, negative):
        return triplet_margin_with_distance_loss(anchor, positive, negative, distance_function=self.distance_function,
                                                 margin=self.margin, swap=self.swap, reduction=self.reduction)


class LazyLinear(Module):
    """torch.nn.LazyLinear: a Linear whose in_features is the last dim of its first input; its weight and bias
    are created then, with torch's initialization (uniform on ±1/sqrt(in_features)). Before that it has no
    parameters (torch shows UninitializedParameter placeholders): run a forward before building the optimizer,
    as torch's documentation asks."""

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features, self._bias, self._dtype = 0, out_features, bias, dtype

    def has_uninitialized_params(self):
        return self.in_features == 0

    def initialize_parameters(self, input):
        if not self.has_uninitialized_params():
            return
        from .._tensor import rand
        self.in_features = input.shape[-1]
        bound = 1 / math.sqrt(self.in_features)
        dtype = self._dtype or input.dtype
        self.weight = Parameter((rand(self.out_features, self.in_features) * (2 * bound) - bound).to(dtype))
        if self._bias:
            self.bias = Parameter((rand(self.out_features) * (2 * bound) - bound).to(dtype))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.has_uninitialized_params():
            return
        from . import init
        bound = 1 / math.sqrt(self.in_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        self.initialize_parameters(input)
        from . import functional as F
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features, self._bias)


class DataParallel(Module):
    """torch.nn.DataParallel on tessel's Python face, which computes on the CPU: torch's DataParallel with no
    visible GPU runs the wrapped module as it is, and so does this (`.module` is the wrapped module; the state
    dict's keys carry its "module." prefix, as torch's). Data parallelism across ranks is
    DistributedDataParallel or fully_shard."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module, self.device_ids, self.output_device, self.dim = module, device_ids or [], output_device, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class _LazyModule(Module):
    """torch's LazyModuleMixin for a Python layer: the constructor keeps its arguments, the first forward reads
    the input's channels, builds the concrete layer (torch's initialization) and this module becomes it
    (torch's cls_to_become: parameters, buffers, attributes and class), then runs it. Before that it has no
    parameters (torch shows UninitializedParameter placeholders): run a forward before building the optimizer."""
    _concrete = None  # the layer class this becomes
    _unbatched_rank = 1  # an input of this rank has no batch dim (its channels are dim 0)

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.__dict__["_lazy_args"] = (args, kwargs)

    def has_uninitialized_params(self):
        return True

    def _channels(self, input):
        return input.shape[1 if input.dim() > self._unbatched_rank else 0]

    def forward(self, input, *rest, **kwargs):
        args, kw = self.__dict__.pop("_lazy_args")
        concrete = self._concrete(self._channels(input), *args, **kw)
        from .modules import _persistent_buffer_names
        persistent = _persistent_buffer_names(concrete)
        for name, p in concrete.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name in concrete.__dict__.get("_tessel_registered_none", ()):
            if not self._has_parameter(name) and name not in dict(concrete.named_buffers(recurse=False)):
                self.register_parameter(name, None)
        for name, b in concrete.named_buffers(recurse=False):
            self.register_buffer(name, b, persistent=name in persistent)
        for key, value in concrete.__dict__.items():
            if key != "_tessel_registered_none":
                self.__dict__[key] = value
        self.__class__ = type(concrete)
        return self.forward(input, *rest, **kwargs)


def _lazy(name, concrete, unbatched_rank, doc):
    return type(name, (_LazyModule,), {"_concrete": concrete, "__doc__": doc, "_unbatched_rank": unbatched_rank})


def _lazy_modules(namespace):
    """Lazy* classes over the nn namespace's own layer classes (so a lazy layer becomes an nn.Conv2d)."""
    made = {}
    for nd in (1, 2, 3):
        for family in ("Conv%dd", "ConvTranspose%dd"):
            concrete = namespace[family % nd]
            made["Lazy" + family % nd] = _lazy("Lazy" + family % nd, concrete, nd + 1,
                                               "torch.nn.Lazy%s: in_channels from the first input." % (family % nd))
        bn = namespace["BatchNorm%dd" % nd]
        made["LazyBatchNorm%dd" % nd] = _lazy("LazyBatchNorm%dd" % nd, bn, {1: 1, 2: 3, 3: 4}[nd],
                                              "torch.nn.LazyBatchNorm%dd: num_features from the first input." % nd)
    return made


MODULES = dict(ChannelShuffle=ChannelShuffle, FeatureAlphaDropout=FeatureAlphaDropout, MaxUnpool1d=MaxUnpool1d,
               MaxUnpool2d=MaxUnpool2d, MaxUnpool3d=MaxUnpool3d, MultiLabelMarginLoss=MultiLabelMarginLoss,
               TripletMarginWithDistanceLoss=TripletMarginWithDistanceLoss, LazyLinear=LazyLinear,
               DataParallel=DataParallel)
