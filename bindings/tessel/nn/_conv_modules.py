"""torch.nn's convolution, pooling, fold/unfold and batch-norm modules over tessel.nn._conv_ops (the
functional forms; see there for how they compute). Parameters are initialized as torch initializes them
(kaiming_uniform_ with a = sqrt(5) for the weight, uniform(±1/sqrt(fan_in)) for the bias), so a ported
script's model starts from the same distribution; values differ from torch's only through the RNG.

    stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
"""
import functools
import math
import warnings

from .. import _C
from . import _conv_ops as F, _resample, init
from .modules import Module, Parameter


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvNd(Module):
    _transposed = False

    def __init__(self, nd, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                 padding_mode, output_padding=0, device=None, dtype=None):
        super().__init__()
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError("in_channels (%d) and out_channels (%d) must be divisible by groups (%d)"
                             % (in_channels, out_channels, groups))
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError("Invalid padding string %r, should be one of ['valid', 'same']" % padding)
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError("padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             "padding_mode='%s'" % padding_mode)
        if self._transposed and padding_mode != "zeros":
            raise ValueError('Only "zeros" padding mode is supported for %s' % type(self).__name__)
        self._nd, self.transposed = nd, self._transposed
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, nd), _tuple(stride, nd)
        if padding == "same" and any(st != 1 for st in self.stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        self.padding = padding if isinstance(padding, str) else _tuple(padding, nd)
        self.dilation, self.output_padding = _tuple(dilation, nd), _tuple(output_padding, nd)
        self.padding_mode = padding_mode
        dt = dtype or _C._get_default_dtype()
        shape = ([in_channels, out_channels // groups] if self._transposed else
                 [out_channels, in_channels // groups]) + list(self.kernel_size)
        self.weight = Parameter(_C._full(shape, 0.0, dt))
        if bias:
            self.bias = Parameter(_C._full([out_channels], 0.0, dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._fans(self.weight)
            if fan_in:
                bound = 1.0 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _pads(self):
        """Explicit (before, after) amounts for a non-zeros padding_mode (torch pads the input first)."""
        if self.padding == "valid":
            return [(0, 0)] * self._nd
        if self.padding == "same":
            out = []
            for k, d in zip(self.kernel_size, self.dilation):
                total = d * (k - 1)
                out.append((total // 2, total - total // 2))
            return out
        return [(p, p) for p in self.padding]

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)

    def _conv_forward(self, input, weight, bias):
        """torch's: this layer's convolution with the given weight and bias (LoRA-style subclasses pass
        their own)."""
        if self.padding_mode == "zeros":
            return F._conv(self._nd, input, weight, bias, self.stride, self.padding, self.dilation, self.groups)
        x, batched = F._batched(input, self._nd, "conv%dd" % self._nd)
        # torch pads the input in the mode first (F.pad, last dim first), then convolves unpadded
        amounts = [a for before_after in reversed(self._pads()) for a in before_after]
        padded = _resample.pad(x, amounts, self.padding_mode)
        out = F._conv(self._nd, padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return out if batched else out.squeeze(0)

    def extra_repr(self):
        s = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels, self.kernel_size, self.stride)
        if self.padding != (0,) * self._nd:
            s += ", padding=%s" % (self.padding,)
        if self.dilation != (1,) * self._nd:
            s += ", dilation=%s" % (self.dilation,)
        if self._transposed and self.output_padding != (0,) * self._nd:
            s += ", output_padding=%s" % (self.output_padding,)
        if self.groups != 1:
            s += ", groups=%d" % self.groups
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode=%s" % self.padding_mode
        return s


def _conv_class(nd):
    class Conv(_ConvNd):
        def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                     bias=True, padding_mode="zeros", device=None, dtype=None):
            super().__init__(nd, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                             padding_mode, device=device, dtype=dtype)
    Conv.__name__ = Conv.__qualname__ = "Conv%dd" % nd
    Conv.__doc__ = "torch.nn.Conv%dd: weight [out, in / groups, *kernel], optional bias [out]." % nd
    return Conv


def _conv_transpose_class(nd):
    class ConvTranspose(_ConvNd):
        _transposed = True

        def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                     bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
            super().__init__(nd, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                             padding_mode, output_padding, device=device, dtype=dtype)

        def forward(self, input, output_size=None):
            output_padding = self.output_padding
            if output_size is not None:
                x = input if input.ndim == nd + 2 else input.unsqueeze(0)
                if len(output_size) not in (nd, nd + 2):
                    raise ValueError("ConvTranspose%dD: for %dD input, output_size must have %d or %d elements (got %d)"
                                     % (nd, input.ndim, nd, nd + 2, len(output_size)))
                want = list(output_size)[-nd:]
                output_padding = []
                for i in range(nd):
                    base = ((x.shape[2 + i] - 1) * self.stride[i] - 2 * self.padding[i]
                            + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
                    extra = want[i] - base
                    if extra < 0 or extra >= self.stride[i]:  # torch: sizes from base to base + stride - 1
                        raise ValueError("requested an output size of %s, but valid sizes range from %s to %s "
                                         "(for an input of %s)" % (want, base, base + self.stride[i] - 1,
                                                                   list(x.shape[2:])))
                    output_padding.append(extra)
            return F._conv_transpose(nd, input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                     self.groups, self.dilation)
    ConvTranspose.__name__ = ConvTranspose.__qualname__ = "ConvTranspose%dd" % nd
    ConvTranspose.__doc__ = ("torch.nn.ConvTranspose%dd: weight [in, out / groups, *kernel] (the adjoint of Conv%dd "
                             "with the same weight)." % (nd, nd))
    return ConvTranspose


class _MaxPoolNd(Module):
    _nd = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return F._max_pool(self._nd, input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                           self.return_indices)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s" % (
            self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class _AvgPoolNd(Module):
    _nd = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override
        if self._nd == 1:  # torch's AvgPool1d keeps its sizes as 1-tuples (the 2-D and 3-D forms as given)
            self.kernel_size, self.stride, self.padding = (_tuple(self.kernel_size, 1), _tuple(self.stride, 1),
                                                           _tuple(self.padding, 1))

    def forward(self, input):
        return F._avg_pool(self._nd, input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                           self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class _AdaptiveAvgPoolNd(Module):
    _nd = 0

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F._adaptive_avg_pool(self._nd, input, self.output_size)

    def extra_repr(self):
        return "output_size=%s" % (self.output_size,)


class _AdaptiveMaxPoolNd(Module):
    _nd = 0

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return F._adaptive_max_pool(self._nd, input, self.output_size, self.return_indices)

    def extra_repr(self):
        return "output_size=%s" % (self.output_size,)


def _pool_class(base, prefix, nd):
    cls = type("%s%dd" % (prefix, nd), (base,), {"_nd": nd, "__doc__": "torch.nn.%s%dd." % (prefix, nd)})
    return cls


class _NormBase(Module):
    """torch.nn.BatchNorm*'s state: weight ones / bias zeros [C] (affine; bias=False drops the bias, as torch
    2.15), running_mean zeros, running_var ones and num_batches_tracked (int64 0) as buffers
    (track_running_stats)."""
    _dims = ()
    _version = 2  # torch's: state dicts from version 2 on carry num_batches_tracked

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True, _share=None):
        # _share: a norm module whose parameters and buffers this one registers as its own (the same tensors;
        # convert_sync_batchnorm).
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = dtype or _C._get_default_dtype()
        if affine:
            self.weight = _share.weight if _share is not None else Parameter(_C._full([num_features], 1.0, dt))
            if bias:
                self.bias = _share.bias if _share is not None else Parameter(_C._full([num_features], 0.0, dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            own = _share is None
            self.register_buffer("running_mean", _C._full([num_features], 0.0, dt) if own else _share.running_mean)
            self.register_buffer("running_var", _C._full([num_features], 1.0, dt) if own else _share.running_var)
            self.register_buffer("num_batches_tracked", _C._full([], 0.0, _C.dtype.int64) if own
                                 else _share.num_batches_tracked)
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        if _share is None:  # (a shared module's values stay as they are)
            self.reset_parameters()  # torch's layers end __init__ so: a subclass's override runs

    def _legacy_state(self, state_dict, prefix, version):
        """torch's _NormBase._load_from_state_dict: a state dict from before version 2 (torch < 0.4.1, or any
        plain dict without torch's _metadata) may lack num_batches_tracked; the module keeps its own count."""
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            return {key: self.num_batches_tracked}
        return {}

    def reset_running_stats(self):
        if self.track_running_stats:
            with _C._GradMode(False):
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        if self._dims and input.ndim not in self._dims:  # SyncBatchNorm (no _dims) takes any rank >= 2
            raise ValueError("expected %s input (got %dD input)"
                             % (" or ".join("%dD" % d for d in self._dims), input.ndim))
        if input.shape[1] != self.num_features:
            raise ValueError("%s: expected %d channels in dim 1, got input of size %s"
                             % (type(self).__name__, self.num_features, list(input.shape)))
        factor = self._count_batch()
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def _count_batch(self):
        """Counts a training batch (num_batches_tracked) and returns the running statistics' blend factor:
        momentum, or 1 / batches seen with momentum=None (a cumulative average), as torch."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with _C._GradMode(False):
                self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        return factor

    def extra_repr(self):
        return "%d, eps=%s, momentum=%s, affine=%s, bias=%s, track_running_stats=%s" % (
            self.num_features, self.eps, self.momentum, self.affine, self.bias is not None, self.track_running_stats)


@functools.cache
def _make_sync_batch_norm_function():
    """Built on first use (tessel.autograd imports tessel.nn's package): the autograd.Function of
    SyncBatchNorm's training forward and backward."""
    from .. import autograd, distributed as dist

    class SyncBatchNormFunction(autograd.Function):
        """Forward: each rank's per-channel (mean, sum of squared deviations, count) all-gathered and combined
        exactly (parallel variance, as torch's batch_norm_gather_stats_with_counts), so ranks may hold
        different batch sizes; backward: one all_reduce of (Σdy, Σdy·x̂) per channel, the input gradient
        from the global sums, the weight and bias gradients from this rank's (DDP averages them)."""

        @staticmethod
        def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, group):
            c = input.shape[1]
            dims = [0] + list(range(2, input.ndim))
            x = input if input.dtype == _C.dtype.float64 else input.float()
            count = input.numel() // c
            mean = x.mean(dims)
            centered = x - mean.reshape(1, c, *([1] * (input.ndim - 2)))
            m2 = (centered * centered).sum(dims)
            local = _C._functional.cat([mean.double(), m2.double(), _C._full([1], float(count), _C.dtype.float64)], 0)
            world = dist.get_world_size(group)
            gathered = [_C._full([2 * c + 1], 0.0, _C.dtype.float64) for _ in range(world)]
            dist.all_gather(gathered, local, group=group)
            stats = _C._functional.stack(gathered, 0)  # [W, 2C + 1]
            counts = stats[:, 2 * c:2 * c + 1]
            total = counts.sum()
            if float(total.item()) <= 1:
                raise ValueError("Expected more than 1 value per channel when training, got input size %s"
                                 % list(input.shape))
            means = stats[:, :c]
            global_mean = (means * counts).sum(0) / total
            spread = means - global_mean.reshape(1, c)
            global_m2 = (stats[:, c:2 * c] + counts * spread * spread).sum(0)
            var = global_m2 / total
            with _C._GradMode(False):
                if running_mean is not None:
                    running_mean.copy_(running_mean * (1.0 - momentum) + global_mean.to(running_mean.dtype) * momentum)
                if running_var is not None:
                    unbiased = global_m2 / (total - 1.0)
                    running_var.copy_(running_var * (1.0 - momentum) + unbiased.to(running_var.dtype) * momentum)
            shape = [1, c] + [1] * (input.ndim - 2)
            invstd = (var + eps).rsqrt().to(x.dtype).reshape(*shape)
            xhat = (x - global_mean.to(x.dtype).reshape(*shape)) * invstd
            ctx.save_for_backward(xhat, invstd, weight if weight is not None else _C._full([c], 1.0, x.dtype))
            ctx.total, ctx.group, ctx.dims = total, group, dims
            ctx.has_weight, ctx.has_bias, ctx.input_dtype = weight is not None, bias is not None, input.dtype
            y = xhat
            if weight is not None:
                y = y * weight.to(x.dtype).reshape(*shape)
            if bias is not None:
                y = y + bias.to(x.dtype).reshape(*shape)
            return y.to(input.dtype)

        @staticmethod
        def backward(ctx, grad):
            xhat, invstd, weight = ctx.saved_tensors
            c = xhat.shape[1]
            shape = [1, c] + [1] * (xhat.ndim - 2)
            g = grad.to(xhat.dtype)
            sum_dy = g.sum(ctx.dims)
            sum_dy_xhat = (g * xhat).sum(ctx.dims)
            both = _C._functional.cat([sum_dy, sum_dy_xhat], 0)
            dist.all_reduce(both, group=ctx.group)
            n = ctx.total.to(xhat.dtype)
            mean_dy = both[:c].reshape(*shape) / n
            mean_dy_xhat = both[c:].reshape(*shape) / n
            grad_input = (g - mean_dy - xhat * mean_dy_xhat) * invstd * weight.to(xhat.dtype).reshape(*shape)
            grad_weight = sum_dy_xhat.to(weight.dtype) if ctx.has_weight else None
            grad_bias = sum_dy.to(weight.dtype) if ctx.has_bias else None
            return grad_input.to(ctx.input_dtype), grad_weight, grad_bias, None, None, None, None, None

    return SyncBatchNormFunction


class _BatchNormNd(_NormBase):
    """torch's _BatchNorm: BatchNorm1d/2d/3d and SyncBatchNorm (InstanceNorm is a _NormBase too, not one), the
    class freeze-BN helpers test with isinstance (torch.nn.modules.batchnorm._BatchNorm)."""


class SyncBatchNorm(_BatchNormNd):
    """torch.nn.SyncBatchNorm: in training, the batch statistics of every rank of process_group (default:
    the world) — one all_gather of per-channel (mean, M2, count) forward, one all_reduce of (Σdy, Σdy·x̂)
    backward — so data-parallel ranks normalize as one process over the global batch would; in eval, or
    without a process group of more than one rank, it is BatchNorm. Inputs [N, C, *] of any rank >= 2."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None, *, bias=True, _share=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias,
                         _share=_share)
        self.process_group = process_group

    def forward(self, input):
        from .. import distributed as dist
        if input.ndim < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.ndim)
        if input.shape[1] != self.num_features:
            raise ValueError("SyncBatchNorm: expected %d channels in dim 1, got input of size %s"
                             % (self.num_features, list(input.shape)))
        # As torch: synchronize only in training (eval without running statistics normalizes per rank).
        if not (self.training and dist.is_initialized() and dist.get_world_size(self.process_group) > 1):
            return _NormBase.forward(self, input)
        factor = self._count_batch()
        track = self.training and self.track_running_stats
        return _make_sync_batch_norm_function().apply(input, self.weight, self.bias,
                                                  self.running_mean if track else None,
                                                  self.running_var if track else None, self.eps, factor,
                                                  self.process_group)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """Every BatchNorm1d/2d/3d in module (module itself included) replaced by a SyncBatchNorm holding the
        same parameters and buffers (torch.nn.SyncBatchNorm.convert_sync_batchnorm); returns the module."""
        if isinstance(module, _BatchNormNd) and not isinstance(module, SyncBatchNorm):
            like = module.weight if module.weight is not None else module.running_mean
            # The same parameter and buffer tensors, as torch's (an optimizer built on the model keeps working).
            out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats, process_group,
                                dtype=like.dtype if like is not None else None, bias=module.bias is not None,
                                _share=module)
            out.train(module.training)
            return out
        for name, child in list(module.named_children()):
            converted = cls.convert_sync_batchnorm(child, process_group)
            if converted is not child:
                setattr(module, name, converted)
        return module


class _InstanceNormNd(_NormBase):
    """torch.nn.InstanceNorm1d/2d/3d: affine and track_running_stats off by default; each sample's channels are
    normalized over their spatial dims (with running statistics, eval uses them); unbatched inputs too."""
    _spatial = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        name = type(self).__name__
        if input.ndim not in (self._spatial + 1, self._spatial + 2):
            raise ValueError("%s: expected %dD (unbatched) or %dD (batched) input (got %dD input)"
                             % (name, self._spatial + 1, self._spatial + 2, input.ndim))
        x = input if input.ndim == self._spatial + 2 else input.unsqueeze(0)
        feature_dim = input.ndim - self._spatial - 1
        if x.shape[1] != self.num_features:
            if self.affine:
                raise ValueError("%s: expected input's size at dim=%d to match num_features (%d), but got: %d."
                                 % (name, feature_dim, self.num_features, x.shape[1]))
            warnings.warn("input's size at dim=%d does not match num_features. You can silence this warning by not "
                          "passing in num_features, which is not used because affine=False" % feature_dim)
        use_input_stats = self.training or not self.track_running_stats
        # torch's: momentum=None leaves the running statistics where they are (no cumulative average here)
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
                              0.0 if self.momentum is None else self.momentum, self.eps)
        return out if input.ndim == self._spatial + 2 else out.squeeze(0)


def _norm_class(name, dims):
    return type(name, (_BatchNormNd,), {"_dims": dims, "__doc__": "torch.nn.%s over [N, C, *] (per channel)." % name})


class Unfold(Module):
    """torch.nn.Unfold: F.unfold (im2col)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return "kernel_size=%s, dilation=%s, padding=%s, stride=%s" % (self.kernel_size, self.dilation, self.padding,
                                                                       self.stride)


class Fold(Module):
    """torch.nn.Fold: F.fold (col2im, the adjoint of Unfold)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return "output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s" % (
            self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)


def make_modules():
    out = dict(Unfold=Unfold, Fold=Fold)
    for nd in (1, 2, 3):
        out["Conv%dd" % nd] = _conv_class(nd)
        out["ConvTranspose%dd" % nd] = _conv_transpose_class(nd)
        out["MaxPool%dd" % nd] = _pool_class(_MaxPoolNd, "MaxPool", nd)
        out["AvgPool%dd" % nd] = _pool_class(_AvgPoolNd, "AvgPool", nd)
        out["AdaptiveAvgPool%dd" % nd] = _pool_class(_AdaptiveAvgPoolNd, "AdaptiveAvgPool", nd)
        out["AdaptiveMaxPool%dd" % nd] = _pool_class(_AdaptiveMaxPoolNd, "AdaptiveMaxPool", nd)

    def avg_pool1d_init(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        _AvgPoolNd.__init__(self, kernel_size, stride, padding, ceil_mode, count_include_pad)
    avg_pool1d_init.__qualname__ = "AvgPool1d.__init__"
    out["AvgPool1d"].__init__ = avg_pool1d_init  # torch's AvgPool1d has no divisor_override
    out["BatchNorm1d"] = _norm_class("BatchNorm1d", (2, 3))
    out["BatchNorm2d"] = _norm_class("BatchNorm2d", (4,))
    out["BatchNorm3d"] = _norm_class("BatchNorm3d", (5,))
    out["SyncBatchNorm"] = SyncBatchNorm
    for nd in (1, 2, 3):
        out["InstanceNorm%dd" % nd] = type("InstanceNorm%dd" % nd, (_InstanceNormNd,),
                                           {"_spatial": nd, "__doc__": "torch.nn.InstanceNorm%dd." % nd})
    return out
