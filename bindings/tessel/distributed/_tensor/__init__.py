"""tessel.distributed._tensor: torch's pre-2.4 path of torch.distributed.tensor (still imported by older scripts);
the same objects."""
from ..tensor import *  # noqa: F401,F403
from ..tensor import (DTensor, DeviceMesh, Partial, Placement, Replicate, Shard, distribute_module,  # noqa: F401
                      distribute_tensor)
from ..device_mesh import init_device_mesh  # noqa: F401
