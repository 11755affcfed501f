"""One contiguous buffer for a list of tensors (so one collective moves them all) and its pieces back as views
shaped like them: what DDP's buckets, ZeRO's broadcasts, PowerSGD and model averaging share."""
from .. import _C

__all__ = ["flatten", "views"]


def flatten(tensors):
    """The tensors' values, concatenated into one new contiguous 1-D tensor."""
    return _C._functional.cat([t.reshape(-1) for t in tensors], 0).contiguous()


def views(flat, like):
    """flat's consecutive pieces, each a view shaped like the matching tensor of `like`."""
    out, offset = [], 0
    for t in like:
        out.append(flat[offset:offset + t.numel()].view(*t.shape))
        offset += t.numel()
    return out
