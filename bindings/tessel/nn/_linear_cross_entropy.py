"""torch 2.15's F.linear_cross_entropy, nn.LinearCrossEntropyLoss and nn.LinearCrossEntropyOptions: the cross
entropy of a linear projection's logits, cross_entropy(linear(input, W, b).reshape(*N, C, *out_features), target).

torch's `options` asks for a chunked kernel that never holds all the logits at once (its memory saving for large
vocabularies); its value is the reference path's up to rounding. tessel always takes the reference path: options
are validated and torch's warning when they could not apply is given, but the logits are materialized. The chunked
kernel's autograd limits (no second backward without allow_retain_graph, no double backward) do not apply here.

    loss = F.linear_cross_entropy(hidden, lm_head.weight, targets)    # hidden [N, D], weight [V, D]
"""
import dataclasses
import math
import warnings

from .modules import Module

_VALID_ACC_POLICIES = ("auto", "accurate", "compact")


@dataclasses.dataclass(frozen=True)
class LinearCrossEntropyOptions:
    """torch.nn.LinearCrossEntropyOptions: the chunked kernel's settings, with torch's validation."""
    allow_retain_graph: bool = False
    batch_chunk_size: object = None
    chunking_method: object = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in _VALID_ACC_POLICIES:
            raise ValueError("invalid acc_policy: %r; expected one of %s"
                             % (self.acc_policy, ", ".join(map(repr, _VALID_ACC_POLICIES))))
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            if not sep:
                factor = "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError("invalid chunking_method: %r" % (self.chunking_method,))
        size = self.batch_chunk_size
        if not (size is None or (isinstance(size, int) and not isinstance(size, bool) and size > 0)):
            raise ValueError("batch_chunk_size must be positive int or None, got %r" % (size,))
        from .. import _dtypes
        if self.acc_dtype is not None and self.acc_dtype not in (_dtypes.float16, _dtypes.bfloat16, _dtypes.float32,
                                                                 _dtypes.float64):
            raise ValueError("acc_dtype must be one of {None, torch.float16, torch.bfloat16, torch.float32, "
                             "torch.float64}, got %r. Pass acc_dtype=None to let the op pick automatically."
                             % (self.acc_dtype,))


def _warn_unused_options(input, linear_weight, target, linear_bias, reduction, label_smoothing):
    """torch's warning where options were given but its chunked path cannot take the call."""
    from .. import _C, _dtypes
    out_features = tuple(linear_weight.shape[1:-1])
    logits_shape = tuple(input.shape[:-1]) + (linear_weight.shape[0],) + out_features
    grad_on = _C.is_grad_enabled()
    chunkable_prob_target = (tuple(target.shape) == logits_shape and target.dtype == input.dtype
                             and not (target.requires_grad and grad_on))
    if (reduction in ("mean", "sum", "none") and label_smoothing == 0.0
            and (target.dtype == _dtypes.int64 or chunkable_prob_target) and not out_features):
        return
    warnings.warn(
        "linear_cross_entropy: ``options`` ignored; chunked path needs reduction in {'mean','sum','none'}, "
        "label_smoothing == 0, target.dtype == int64 (or a probability target with dtype matching input and "
        "requires_grad == False), out_features == (). Got reduction=%r, label_smoothing=%s, target.dtype=%s, "
        "out_features=%s, tracing=False, target.requires_grad=%s, linear_bias.shape=%s."
        % (reduction, label_smoothing, str(target.dtype).replace("tessel.", "torch."), out_features,
           target.requires_grad, tuple(linear_bias.shape) if linear_bias is not None else None), stacklevel=3)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """torch.nn.functional.linear_cross_entropy: input [D] or [N, D], linear_weight [C, D] or [C, d1, ..., dK, D]
    (K-dimensional loss, batched input only), target class indices or class probabilities (the logits' shape;
    ignore_index must then be None); ignore_index None means -100 for class indices."""
    from . import functional as F
    if input.dim() < 1 or input.dim() > 2:
        raise RuntimeError("expected input with dimensionality 1 or 2, got %d" % input.dim())
    if linear_weight.dim() < 2:
        raise RuntimeError("expected linear_weight with dimensionality at least 2, got %d" % linear_weight.dim())
    batch = tuple(input.shape[:-1])
    in_features = input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError("expected equal input and linear_weight last dimensions (in_features), got %d and %d, "
                           "respectively" % (input.shape[-1], linear_weight.shape[-1]))
    num_classes = linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes,) + out_features:
        raise RuntimeError("expected linear_bias shape %s, got %s" % ((num_classes,) + out_features,
                                                                      tuple(linear_bias.shape)))
    if out_features and not batch:
        raise RuntimeError("K-dimensional loss defined by linear_weight shape %s requires batched input, (N, %d), "
                           "got unbatched input with shape %s" % (tuple(linear_weight.shape), in_features,
                                                                 tuple(input.shape)))
    logits_shape = batch + (num_classes,) + out_features
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore_index = ignore_index if ignore_index is not None else -100
    if options is not None:
        _warn_unused_options(input, linear_weight, target, linear_bias, reduction, label_smoothing)
    if out_features:
        rows = math.prod(out_features) * num_classes
        linear_weight = linear_weight.reshape(rows, in_features)
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(rows)
    logits = F.linear(input, linear_weight, linear_bias).reshape(*logits_shape)
    return F.cross_entropy(logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=label_smoothing)


class LinearCrossEntropyLoss(Module):
    """torch.nn.LinearCrossEntropyLoss(in_features, num_classes, *, out_features=(), bias=False, ...): a Linear of
    C · prod(out_features) outputs (its weight stored flat, as torch's) followed by the cross entropy; weight (class
    weights, a buffer), reduction, ignore_index, label_smoothing and options as F.linear_cross_entropy's."""

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None, dtype=None,
                 reduction="mean", weight=None, ignore_index=None, label_smoothing=0.0, options=None):
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError("expected weight shape to be %s, got %s" % ((num_classes,), tuple(weight.shape)))
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError("expected label_smoothing to be in range [0, 1], got %s" % label_smoothing)
        super().__init__()
        self.register_buffer("weight", weight)
        self.reduction = reduction
        self.num_classes = num_classes
        self.out_features = out_features
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        from . import Linear
        self.linear = Linear(in_features, math.prod(out_features) * num_classes, bias=bias, device=device,
                             dtype=dtype)
        self.options = options

    def forward(self, input, target):
        linear_weight = self.linear.weight.reshape(self.num_classes, *self.out_features, self.linear.in_features)
        linear_bias = (self.linear.bias.reshape(self.num_classes, *self.out_features)
                       if self.linear.bias is not None else None)
        return linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                    reduction=self.reduction, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self):
        return ("in_features=%s, num_classes=%s, out_features=%s, bias=%s, reduction=%s, ignore_index=%s, "
                "label_smoothing=%s, options=%s" % (self.linear.in_features, self.num_classes, self.out_features,
                                                     self.linear.bias is not None, self.reduction, self.ignore_index,
                                                     self.label_smoothing, self.options))


FUNCTIONAL = dict(linear_cross_entropy=linear_cross_entropy)
MODULES = dict(LinearCrossEntropyLoss=LinearCrossEntropyLoss, LinearCrossEntropyOptions=LinearCrossEntropyOptions)
