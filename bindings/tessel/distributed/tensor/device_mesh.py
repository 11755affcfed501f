"""tessel.distributed.tensor.device_mesh: torch's older path of DeviceMesh and init_device_mesh."""
from ..device_mesh import DeviceMesh, init_device_mesh  # noqa: F401
