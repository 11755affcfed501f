"""tessel.distributed.tensor: DTensor, distribute_tensor, Shard, Replicate, Partial.

A DTensor is a tessel.Tensor whose impl is distributed (DESIGN.md: "DTensor is a kind of Tensor"), so
``isinstance(x, DTensor)`` asks ``x.is_distributed``, and every op and module works on it unchanged.

    d = distribute_tensor(tessel.ones(4, 3), mesh, [Shard(0)])      # this rank's rows
    d.placements, d.to_local(), d.full_tensor(), d.redistribute(mesh, [Replicate()])
"""
from ... import _C

Shard = _C.Shard
Replicate = _C.Replicate
Partial = _C.Partial
DeviceMesh = _C.DeviceMesh


class _DTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _C.Tensor) and obj.is_distributed


class DTensor(metaclass=_DTensorMeta):
    """torch's DTensor: tessel tensors with ``is_distributed`` are instances of it."""

    def __init__(self, *args, **kwargs):
        raise TypeError("DTensor is not constructed directly: use distribute_tensor or DTensor.from_local")

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None):
        """Wraps each rank's local piece. shape/stride: the global ones, checked against the result
        (tessel infers them from even shards, as torch does without them)."""
        if device_mesh is None:
            raise ValueError("DTensor.from_local: device_mesh is required")
        placements = list(placements) if placements is not None else [Replicate()] * device_mesh.ndim
        out = _C.from_local(local_tensor, device_mesh, placements)
        if shape is not None and tuple(shape) != tuple(out.shape):
            raise NotImplementedError("DTensor.from_local: global shape %s differs from the even-shard shape %s "
                                      "(uneven from_local is not supported)" % (tuple(shape), tuple(out.shape)))
        return out


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    if device_mesh is None:
        raise ValueError("distribute_tensor: device_mesh is required")
    placements = list(placements) if placements is not None else [Replicate()] * device_mesh.ndim
    return _C.distribute_tensor(tensor, device_mesh, placements, src_data_rank)

from . import parallel  # noqa: E402,F401 (torch.distributed.tensor.parallel)
