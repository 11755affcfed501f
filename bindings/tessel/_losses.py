"""torch.nn.functional's composed losses (l1, smooth_l1, huber, binary cross-entropy with and without logits, nll,
kl_div) with torch's argument checks: shapes that would broadcast silently ([N, 1] logits against [N] labels),
targets of the wrong shape, dtype or range raise as torch's. Split from _extra.py by concept; _extra registers
them (FUNCTIONAL).
"""
import numpy as np

from . import _C, _dtypes
from ._activations import _softplus1
from ._extra import movedim
from ._tensor import zeros as _zeros
from .autograd import Function


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError("%s is not a valid value for reduction" % reduction)


def _legacy(size_average, reduce, reduction):
    """The reduction a loss runs: torch's deprecated size_average / reduce, when either is given, override
    reduction= (with torch's deprecation warning)."""
    if size_average is None and reduce is None:
        return reduction
    from .nn import _reduction
    return _reduction.legacy_get_string(size_average, reduce)


def _warn_broadcast(input, target):
    if tuple(target.shape) != tuple(input.shape):  # torch's warning (mse_loss, l1_loss)
        import warnings
        from ._tensor import Size
        warnings.warn("Using a target size (%s) that is different to the input size (%s). This will likely lead to "
                      "incorrect results due to broadcasting. Please ensure they have the same size."
                      % (Size(target.shape), Size(input.shape)), stacklevel=3)


def _weighted_reduce(loss, input, weight, reduction):
    """torch 2.15's weighted mse_loss / l1_loss: weight of input's shape times each error; 'mean' divides the
    weighted sum by the weights' sum (not by the count, as huber_loss's weighted mean does)."""
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    if reduction not in ("none", "sum", "mean"):
        raise ValueError("Invalid reduction mode: %s. Expected one of 'none', 'mean', 'sum'." % reduction)
    weighted = loss * weight
    if reduction == "none":
        return weighted
    return weighted.sum() if reduction == "sum" else weighted.sum() / weight.sum()


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_broadcast(input, target)
    reduction = _legacy(size_average, reduce, reduction)
    return _weighted_reduce((input - target).abs(), input, weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    reduction = _legacy(size_average, reduce, reduction)
    r = input - target
    d = r.abs()
    if beta == 0:
        return _reduce(d, reduction)
    # the square of r, not of |r|: |r|'s derivative is 0 at r = 0, so (|r|·|r|)'' read 0 there instead of 1/beta
    return _reduce(_C._functional.where(d < beta, r * r * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    _warn_broadcast(input, target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    r = input - target
    d = r.abs()
    loss = _C._functional.where(d < delta, r * r * 0.5, (d - 0.5 * delta) * delta)  # (r², not |r|²: smooth_l1_loss)
    loss = in_input_dtype(loss, input)
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    return _reduce(loss * weight if weight is not None else loss, reduction)


def in_input_dtype(loss, input):
    """loss in the input's floating dtype: torch's kernels of huber_loss and soft_margin_loss write their
    output in the input's dtype (a float64 target next to float32 input still gives float32)."""
    if loss.dtype != input.dtype and input.dtype.is_floating_point:
        return loss.to(input.dtype)
    return loss


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """max(x, 0) - x·y + log(1 + exp(-|x|)) (torch's stable form); pos_weight scales the positive term."""
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):  # torch refuses: [N, 1] logits against [N] labels would broadcast
        from ._tensor import Size
        raise ValueError("Target size (%s) must be the same as input size (%s)" % (Size(target.shape),
                                                                                 Size(input.shape)))
    from .nn.functional import _no_weight_grad
    _no_weight_grad("binary_cross_entropy_with_logits", weight=weight, pos_weight=pos_weight)
    # (1 - y)·x + w·log(1 + exp(-x)), w = 1 + (pos_weight - 1)·y: exact gradients at x = 0 too.
    lw = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + lw * _softplus1(-input)
    return _reduce(loss * weight if weight is not None else loss, reduction)


def _clamped_log(p):
    """log p clamped at -100 (torch's BCE), finite where p is 0."""
    w = _C._functional.where
    return w(p > 0, w(p > 0, p, p * 0.0 + 1.0).log(), p * 0.0 - 100.0).clamp(min=-100.0)


_BCE_EPS = 9.999999960041972e-13  # torch's EPSILON 1e-12, held as a float32 by its kernel


class _BinaryCrossEntropy(Function):
    """-(y·log p + (1 - y)·log(1 - p)) elementwise, the logs clamped at -100, with torch's gradients: d/dp =
    (p - y) / max(p (1 - p), 1e-12) (finite at p = 0 and 1: -1e12 where y = 1 and p = 0), d/dy = log(1 - p) -
    log(p) = -logit(p) unclamped (±inf at p = 1 and 0, as torch's)."""

    @staticmethod
    def forward(ctx, p, y):
        ctx.save_for_backward(p, y)
        return -(y * _clamped_log(p) + (1.0 - y) * _clamped_log(1.0 - p))

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        gp = gy = None
        if ctx.needs_input_grad[0]:
            gp = g * (p - y) / ((1.0 - p) * p).clamp(min=_BCE_EPS)
        if ctx.needs_input_grad[1]:
            gy = g * ((1.0 - p).log() - p.log())
        return gp, gy


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(y·log p + (1 - y)·log(1 - p)) with each log clamped at -100 and torch's gradient; p outside [0, 1]
    (NaN too) raises as torch."""
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        from ._tensor import Size
        raise ValueError("Using a target size (%s) that is different to the input size (%s) is deprecated. Please "
                         "ensure they have the same size." % (Size(target.shape), Size(input.shape)))
    if target.dtype != input.dtype:  # torch's kernel promotes neither side
        from ._subscript import _torch_dtype_name
        raise RuntimeError("Found dtype %s but expected %s" % (_torch_dtype_name(target.dtype),
                                                               _torch_dtype_name(input.dtype)))
    if not input.is_distributed and not bool(((input >= 0) & (input <= 1)).all()):
        raise RuntimeError("all elements of input should be between 0 and 1")
    if not target.is_distributed and target.dtype.is_floating_point and \
            not bool(((target >= 0) & (target <= 1)).all()):
        raise RuntimeError("all elements of target should be between 0 and 1")
    from .nn.functional import _no_weight_grad
    _no_weight_grad("binary_cross_entropy", weight=weight)
    loss = _BinaryCrossEntropy.apply(input, target)
    return _reduce(loss * weight.to(loss.dtype) if weight is not None else loss, reduction)  # (input's dtype)


def _check_nll_target(input, target):
    """torch's checks of nll_loss's target: class indices (integers) of shape [N] for [N, C] input ([] for [C]),
    [N, d1, ...] for [N, C, d1, ...]."""
    if target.dtype.is_floating_point or target.dtype == _dtypes.bool:
        raise RuntimeError("expected scalar type Long but found %s" % str(target.dtype).rsplit(".", 1)[-1].title())
    if input.ndim == 1:
        if target.ndim != 0:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    elif input.ndim == 2:
        if target.ndim != 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if target.shape[0] != input.shape[0]:
            raise ValueError("Expected input batch_size (%d) to match target batch_size (%d)."
                             % (input.shape[0], target.shape[0]))
    elif tuple(target.shape) != (input.shape[0],) + tuple(input.shape[2:]):
        from ._tensor import Size
        raise ValueError("Expected target size %s, got %s" % ((input.shape[0],) + tuple(input.shape[2:]),
                                                             Size(target.shape)))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-input[n, target[n]] over log-probabilities [N, C] ([C], or [N, C, d1, ...] with targets
    [N, d1, ...]); ignored targets count for nothing; weight[c] scales class c and the weighted mean
    divides by the picked weights, as torch."""
    reduction = _legacy(size_average, reduce, reduction)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError("%s is not a valid value for reduction" % reduction)
    _check_nll_target(input, target)
    from .nn.functional import _check_weight_dtype, _no_weight_grad
    _no_weight_grad("nll_loss_forward", weight=weight)
    _check_weight_dtype(input, weight)
    if input.ndim > 2:  # classes on dim 1: one row per position
        rows = movedim(input, 1, -1).reshape(-1, input.shape[1])
        out = nll_loss(rows, target.reshape(-1), weight, ignore_index=ignore_index, reduction=reduction)
        return out.reshape(*target.shape) if reduction == "none" else out
    logp = input.reshape(1, -1) if input.ndim == 1 else input
    t = target.reshape(-1).numpy()
    keep = t != ignore_index
    if keep.any() and (t[keep].min() < 0 or t[keep].max() >= logp.shape[1]):
        bad = t[keep][(t[keep] < 0) | (t[keep] >= logp.shape[1])][0]
        raise IndexError("Target %d is out of bounds." % bad)
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
    if size_average is not None or reduce is not None:  # (no 'mean' warning then, as torch)
        reduction = _legacy(size_average, reduce, reduction)
    elif reduction == "mean":  # torch's warning
        import warnings
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    # xlogy semantics: 0 where target is 0, NaN where it is negative, as torch
    loss = target.exp() * (target - input) if log_target else \
        _C._functional.where(target == 0, input * 0.0, target * (target.log() - input))
    if reduction == "batchmean":
        return loss.sum() / float(input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)
