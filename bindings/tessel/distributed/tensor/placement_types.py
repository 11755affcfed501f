"""tessel.distributed.tensor.placement_types: torch's module of the placement classes (the same objects as
tessel.distributed.tensor's; Placement is the tuple of the three, so isinstance(p, Placement) works)."""
from . import Partial, Placement, Replicate, Shard, _StridedShard  # noqa: F401

__all__ = ["Placement", "Shard", "Replicate", "Partial"]
