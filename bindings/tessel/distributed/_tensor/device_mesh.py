"""tessel.distributed._tensor.device_mesh: torch's pre-2.4 path (the tensor-parallel examples import it)."""
from ..device_mesh import DeviceMesh, init_device_mesh  # noqa: F401
