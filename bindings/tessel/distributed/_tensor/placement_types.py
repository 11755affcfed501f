"""tessel.distributed._tensor.placement_types: torch's pre-2.4 path."""
from ..tensor.placement_types import *  # noqa: F401,F403
from ..tensor.placement_types import Partial, Placement, Replicate, Shard  # noqa: F401
