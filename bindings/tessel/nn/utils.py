"""tessel.nn.utils: clip_grad_norm_ (torch.nn.utils.clip_grad_norm_).

Sharded (DTensor) gradients, e.g. under fully_shard, are clipped with exactly one all-reduce of one
number over the default process group; plain gradients need no communication.

    total_norm = tessel.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
"""
from .. import _C


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so their global L2 norm is at most max_norm; returns the norm
    before clipping as a 0-d float64 tensor."""
    if float(norm_type) != 2.0:
        raise NotImplementedError("clip_grad_norm_: norm_type=%s (tessel clips the L2 norm)" % norm_type)
    params = [parameters] if isinstance(parameters, _C.Tensor) else list(parameters)
    if any(p.is_distributed for p in params):
        from ..distributed import _default_group
        norm = _C._clip_grad_norm_sharded(params, float(max_norm), _default_group("clip_grad_norm_"))
    else:
        norm = _C._clip_grad_norm(params, float(max_norm))
    if error_if_nonfinite and not abs(norm) < float("inf"):
        raise RuntimeError("clip_grad_norm_: the total norm of the gradients is non-finite (%s)" % norm)
    return _C._full([], norm, _C.dtype.float64)
