"""tessel.nn.functional: torch.nn.functional's names, each one C++ op (bindings/functional_py.cc).

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
"""
from .. import _C
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


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean (or sum, or none) of the squared differences."""
    if size_average is not None or reduce is not None:
        raise NotImplementedError("mse_loss: size_average and reduce are deprecated in torch; use reduction=")
    from .._extra import _reduce
    return _reduce((input - target).pow(2.0), reduction)


from .._extra import FUNCTIONAL as _EXTRA  # noqa: E402 (one_hot, pad, normalize, the other losses, ...)
globals().update(_EXTRA)
