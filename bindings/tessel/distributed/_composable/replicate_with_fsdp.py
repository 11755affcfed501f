"""tessel.distributed._composable.replicate_with_fsdp: torch 2.15's ``replicate`` on fully_shard's machinery
(torchtitan's apply_replicate_to_model: data parallelism with whole parameters, applied per block like
fully_shard).

``replicate(module, *, mesh=None, mp_policy=..., offload_policy=..., ignored_params=None, dp_mesh_dims=None)``
makes the module's parameters DTensors with Replicate placement on a 1-D mesh (default: the world, dim
"replicate"); the module becomes a ReplicateModule (an FSDPModule: set_requires_gradient_sync,
set_gradient_divide_factor, unshard / reshard work as fully_shard's) of class ``Replicate<Name>``. Each group's
gradients are all-reduced (averaged) once over the mesh in the backward, overlapped with it; nothing is
communicated in the forward. Mixed precision and offload follow fully_shard's policies. Nested calls make
nested groups, the outermost call the root, as fully_shard's. C++: fully_shard's replicate-only mode
(FullyShardOptions::replicate_axis without shard_axis, fsdp/fully_shard.h). The all-gather of the group's
parameters before the forward is a local copy here (the group keeps that copy until its backward), so a
replicated model holds its parameters twice during a step.

    for block in model.layers.values(): replicate(block, mesh=dp_mesh)
    replicate(model, mesh=dp_mesh)
"""
import threading

from ... import _C
from ..fsdp import FSDPModule, _become_fsdp_module, _c_policies
from .contract import _get_registry, contract


class ReplicateModule(FSDPModule):
    """Mixed into a module's class by replicate (torch's ReplicateModule, an FSDPModule)."""


_local = threading.local()


def _default_mesh():
    from ..device_mesh import init_device_mesh
    from ..distributed_c10d import get_world_size
    mesh = getattr(_local, "mesh", None)
    if mesh is None or mesh.size() != get_world_size():
        mesh = _local.mesh = init_device_mesh("cpu", (get_world_size(),), mesh_dim_names=("replicate",))
    return mesh


def is_composable_with_replicate(module):
    return "fully_shard" not in (_get_registry(module) or {})


@contract()
def replicate(module, *, mesh=None, mp_policy=None, offload_policy=None, ignored_params=None, dp_mesh_dims=None):
    modules = list(module) if isinstance(module, (list, tuple)) else [module]
    for m in modules:
        if not is_composable_with_replicate(m):
            raise RuntimeError("Cannot apply `replicate()` on a Module already managed by `fully_shard`")
    mesh = mesh if mesh is not None else _default_mesh()
    if dp_mesh_dims is not None:
        if dp_mesh_dims.shard_names:
            raise ValueError("replicate() with dp_mesh_dims requires replicate-only dims (no shard dims). Use "
                             "fully_shard() for sharding.")
        if len(dp_mesh_dims.replicate_names) != 1:
            raise NotImplementedError("replicate: dp_mesh_dims with several replicate dims (%r) would be flattened "
                                      "into one; pass a mesh with one dim for them" % (dp_mesh_dims.replicate_names,))
        axis = dp_mesh_dims.replicate_names[0]
    else:
        if mesh.ndim != 1:
            raise ValueError("replicate expects a 1D DeviceMesh but got %s" % (mesh,))
        axis = mesh.mesh_dim_names[0] if mesh.mesh_dim_names else "axis0"  # the C++ name of an unnamed dim
    ignored = list(ignored_params) if ignored_params is not None else []
    mp_policy, offload_policy = _c_policies(mp_policy, offload_policy)
    _C.fully_shard(modules if isinstance(module, (list, tuple)) else module, mesh, False, mp_policy, offload_policy,
                   None, axis, ignored, None)
    for m in modules:
        _become_fsdp_module(m, ReplicateModule, "Replicate")
    return module
