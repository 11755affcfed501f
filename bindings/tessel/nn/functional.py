"""tessel.nn.functional: torch.nn.functional's names, each one C++ op (bindings/functional_py.cc).

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
"""
from .._C._functional import (  # noqa: F401
    cross_entropy,
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
    """Identity when p == 0 or not training; tessel has no dropout op, so p > 0 in training raises
    NotImplementedError rather than silently not dropping."""
    if p == 0 or not training:
        return input
    raise NotImplementedError("dropout(p=%s, training=True): tessel has no dropout op" % p)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean (or sum, or none) of the squared differences."""
    if size_average is not None or reduce is not None:
        raise NotImplementedError("mse_loss: size_average and reduce are deprecated in torch; use reduction=")
    sq = (input - target).pow(2.0)
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    if reduction == "none":
        return sq
    raise ValueError("%s is not a valid value for reduction" % reduction)
