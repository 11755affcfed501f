"""tessel.distributed.device_mesh: init_device_mesh and DeviceMesh (torch's names).

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
"""
from .. import _C
from . import _default_group

DeviceMesh = _C.DeviceMesh


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """An N-D mesh over the default process group, row-major in rank order (collective: one group per
    axis). device_type: "cpu" (tessel's Python face runs on the CPU backends)."""
    if device_type != "cpu":
        raise NotImplementedError("init_device_mesh: device_type '%s' is not available from Python (use 'cpu')"
                                  % device_type)
    names = list(mesh_dim_names) if mesh_dim_names else []
    return _C.init_device_mesh(_default_group("init_device_mesh"), [int(s) for s in mesh_shape], names)
