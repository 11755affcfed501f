"""tessel.nn.functional: torch.nn.functional's names, each one C++ op (bindings/functional_py.cc).

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
"""
from .. import _C
from .._C._functional import (  # noqa: F401
    embedding,
    gelu,
    layer_norm,
    linear,
    log_softmax,
    relu,
    rms_norm,
    scaled_dot_product_attention,
    sigmoid,
    silu,
    softmax,
    tanh,
)


def dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: in training, zeroes each element with probability p and scales the
    rest by 1 / (1 - p), drawing from tessel's default generator (tessel.manual_seed; the same seed on
    every rank gives a DTensor's shards their blocks of one mask). Not training or p == 0 returns input.
    The masks are tessel's (Philox counters), not torch's: only their distribution matches."""
    if p < 0 or p > 1:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if not training or p == 0:
        return input  # the object itself, as torch
    if inplace:
        raise NotImplementedError("dropout(inplace=True) in training: tessel's dropout is out of place; use "
                                  "inplace=False and the returned tensor")
    return _C._functional.dropout(input, p, training)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy over class indices: (N, C), (C,) or (N, C, d1, ...) logits; one fused
    C++ op (log-softmax, pick, ignore_index, label smoothing, reduction) when there are no class weights.
    With `weight` (C,), as torch: row i costs weight[target_i] * -log p(target_i) and the mean divides by
    the sum of weight[target_i] over the rows not ignored; label smoothing adds eps/C * sum_c weight[c] *
    -log p(c), normalized the same way. The weights take no gradient (torch's nll_loss has none for them)."""
    loss = _C._functional.cross_entropy(input, target, None, size_average, ignore_index, reduce,
                                        reduction if weight is None else "none", 0.0 if weight is not None
                                        else label_smoothing)
    if weight is None:
        return loss
    if reduction not in ("none", "mean", "sum"):
        raise ValueError("%s is not a valid value for reduction" % reduction)
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    if tuple(weight.shape) != (classes,):
        raise RuntimeError("weight tensor should be defined either for all %d classes or no classes but got weight "
                           "tensor of shape: %s" % (classes, list(weight.shape)))
    weight = weight.detach().to(loss.dtype)
    valid = (target != ignore_index).to(loss.dtype)
    rows = (target * (target != ignore_index).to(target.dtype)).reshape(-1)  # ignored rows read class 0
    picked = weight[rows].reshape(*target.shape) * valid
    loss = loss * picked
    smooth = None
    if label_smoothing > 0:
        shape = [1] * input.ndim
        shape[class_dim] = classes
        smooth = -(log_softmax(input, class_dim) * weight.reshape(*shape)).sum(class_dim) * valid
    if reduction == "none":
        return loss if smooth is None else loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    loss, total = loss.sum(), picked.sum()
    smooth = None if smooth is None else smooth.sum()
    if reduction == "mean":
        loss = loss / total
        smooth = None if smooth is None else smooth / total
    return loss if smooth is None else loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


def _channel_dropout(name, spatial):
    def fn(input, p=0.5, training=True, inplace=False):
        """torch.nn.functional.%s: zeroes whole channels (dim 1 of [N, C, *spatial], dim 0 without the
        batch) with probability p and scales the others by 1 / (1 - p): one draw per channel.""" % name
        batched = input.ndim == spatial + 2
        if input.ndim not in (spatial + 1, spatial + 2):
            raise RuntimeError("%s: Expected %dD or %dD input, but received a %dD input"
                               % (name, spatial + 1, spatial + 2, input.ndim))
        if not training or p == 0:
            return input
        keep = list(input.shape[:2] if batched else input.shape[:1]) + [1] * spatial
        mask = dropout(_C._full(keep, 1.0, input.dtype), p, True)
        return input * mask
    fn.__name__ = name
    return fn


dropout1d = _channel_dropout("dropout1d", 1)
dropout2d = _channel_dropout("dropout2d", 2)
dropout3d = _channel_dropout("dropout3d", 3)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean (or sum, or none) of the squared differences."""
    if size_average is not None or reduce is not None:
        raise NotImplementedError("mse_loss: size_average and reduce are deprecated in torch; use reduction=")
    from .._extra import _reduce
    return _reduce((input - target).pow(2.0), reduction)


from .._extra import FUNCTIONAL as _EXTRA  # noqa: E402 (one_hot, pad, normalize, the other losses, ...)
globals().update(_EXTRA)
