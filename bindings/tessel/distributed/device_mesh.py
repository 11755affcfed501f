"""tessel.distributed.device_mesh: init_device_mesh and DeviceMesh (torch's names).

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
"""
import copy
import threading

from .. import _C
from . import _default_group

DeviceMesh = _C.DeviceMesh


class _MeshEnv(threading.local):
    """torch's _mesh_resources: this thread's (rank's) stack of the meshes `with mesh:` entered; the DTensor
    factories, distribute_tensor, from_local and distribute_module use its top when device_mesh is None."""

    def __init__(self):
        self.mesh_stack = []

    def get_current_mesh(self):
        if not self.mesh_stack:
            raise RuntimeError("No device mesh is currently active!")
        return self.mesh_stack[-1]


_mesh_resources = _MeshEnv()


def _enter(self):
    _mesh_resources.mesh_stack.append(self)
    return self


def _exit(self, exc_type, exc_value, traceback):
    _mesh_resources.mesh_stack.pop()


DeviceMesh.__enter__, DeviceMesh.__exit__ = _enter, _exit


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """An N-D mesh over the default process group, row-major in rank order (collective: one group per
    axis). device_type: "cpu" (tessel's Python face runs on the CPU backends)."""
    if device_type != "cpu":
        raise NotImplementedError("init_device_mesh: device_type '%s' is not available from Python (use 'cpu')"
                                  % device_type)
    names = list(mesh_dim_names) if mesh_dim_names else []
    import os
    from . import init_process_group, is_initialized
    if not is_initialized() and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        init_process_group()  # as torch: a launched job's default group, from the environment
    shape = [int(s) for s in mesh_shape]
    world = _default_group("init_device_mesh")
    import math
    if math.prod(shape) < world.size:  # torch's: the first ranks, the others not part of the mesh
        import numpy
        ranks = numpy.arange(math.prod(shape), dtype=numpy.int64).reshape(shape)
        return DeviceMesh("cpu", ranks, mesh_dim_names=names or None)
    mesh = _C.init_device_mesh(world, shape, names)
    _count_mesh_groups(mesh)
    return _register(mesh)


def _register(mesh):
    """Keeps `mesh` in this rank's table of meshes (per default process group; destroy_process_group empties
    it), where unpickling finds the mesh a pickle names (_unpickle_mesh). Returns mesh."""
    from . import _local
    if getattr(_local, "meshes", None) is None:
        _local.meshes = {}
    _local.meshes[repr(mesh)] = mesh
    return mesh


def _reduce(self):
    """pickle, as torch's DeviceMesh: the mesh by its layout (shape, dim names, ranks), which unpickling on a rank
    of the same process group resolves to an equal mesh over that rank's groups (torch's by its groups' names).
    A DTensor's mesh, a module's mesh attribute and a parallelize plan's mesh pickle with it."""
    return _unpickle_mesh, (repr(self), self.mesh_dim_names)


def _unpickle_mesh(layout, mesh_dim_names):
    """The mesh of this rank equal to the pickled one: one this rank created (init_device_mesh, DeviceMesh,
    from_group, _flatten), or the slice of one by the pickled dim names (mesh["tp"] pickled on any rank of its
    group). A mesh this rank has none of (or is not in) raises: no group is created while unpickling."""
    from . import _local
    meshes = getattr(_local, "meshes", None) or {}
    if layout in meshes:
        return copy.copy(meshes[layout])
    if mesh_dim_names:
        key = mesh_dim_names[0] if len(mesh_dim_names) == 1 else list(mesh_dim_names)
        for root in list(meshes.values()):
            try:
                sub = _CGetItem(root, key)
            except (KeyError, ValueError, RuntimeError):
                continue
            if repr(sub) == layout:
                return sub
    from . import get_rank, is_initialized
    raise RuntimeError("DeviceMesh: cannot unpickle %s on %s: no mesh this rank created in its process group "
                       "holds it (create the mesh on this rank first; tessel does not create groups while "
                       "unpickling)" % (layout, "rank %d" % get_rank() if is_initialized() else "this rank"))


DeviceMesh.__reduce__ = _reduce


def _count_mesh_groups(mesh, ranks=None):
    """get_pg_count: a new mesh makes one group per sub-group of each dim across its `ranks` (default: the
    default group's; a dim of size n: ranks / n of them; a flattened mesh's one dim likewise), except a 1-D
    mesh over the whole default group, which reuses it (torch's counts, probed)."""
    from . import _count_groups, get_world_size
    shape = [int(n) for n in mesh.shape]
    if len(shape) == 1 and shape[0] == get_world_size():
        return
    ranks = get_world_size() if ranks is None else ranks
    _count_groups(sum(ranks // n for n in shape))


_DeviceMeshInit = DeviceMesh.__init__


def _device_mesh_init(self, *args, **kwargs):
    _DeviceMeshInit(self, *args, **kwargs)
    _count_mesh_groups(self, self.size())
    _register(self)


DeviceMesh.__init__ = _device_mesh_init


def _unflatten(self, dim, mesh_sizes, mesh_dim_names, backend_override=None):
    """torch's DeviceMesh._unflatten: dim `dim` (an index or name) split into `mesh_sizes` named
    `mesh_dim_names` (torchtitan's world mesh -> (pp, dp, cp, tp)), the ranks keeping their row-major order.
    Collective over the default process group: the mesh must span all of it (a sub-mesh raises
    NotImplementedError); the result is a new mesh with one group per dim."""
    import math
    names = list(self.mesh_dim_names or ())
    if isinstance(dim, int) and dim >= self.ndim:
        raise ValueError("dim %d specified in `_unflatten` is out of range %d" % (dim, self.ndim))
    if isinstance(dim, str) and dim not in names:
        raise ValueError("dim %s specified in `_unflatten` is not in %s" % (dim, tuple(names)))
    if len(mesh_sizes) != len(mesh_dim_names):
        raise RuntimeError("mesh_dim_names must have same length as mesh_sizes in _unflatten!")
    if backend_override is not None:
        raise NotImplementedError("DeviceMesh._unflatten: backend_override is not supported (one backend)")
    d = names.index(dim) if isinstance(dim, str) else dim
    shape = list(self.shape)
    if math.prod(mesh_sizes) != shape[d]:
        raise ValueError("DeviceMesh._unflatten: sizes %s do not multiply to dim %d's size %d"
                         % (tuple(mesh_sizes), d, shape[d]))
    from . import get_world_size
    if self.size() != get_world_size():
        raise NotImplementedError("DeviceMesh._unflatten: the mesh spans %d of the default group's %d ranks; "
                                  "tessel unflattens a mesh over the whole group" % (self.size(), get_world_size()))
    new_shape = shape[:d] + [int(n) for n in mesh_sizes] + shape[d + 1:]
    new_names = names[:d] + list(mesh_dim_names) + names[d + 1:] if names else list(mesh_dim_names)
    ranks = [int(r) for r in self.mesh.reshape(-1).tolist()]
    import numpy
    return DeviceMesh("cpu", numpy.asarray(ranks, dtype=numpy.int64).reshape(new_shape), mesh_dim_names=new_names)


DeviceMesh._unflatten = _unflatten


_CFlatten = DeviceMesh._flatten


class _FlatCache(threading.local):
    """This rank's meshes _flatten returned, by (name, id of the flattened group), so that flattening the same dims
    under the same name again returns the same object (torch's root._flatten_mapping[name]); the group is kept in
    the value so its id is not reused. Emptied with the mesh table (destroy_process_group)."""

    def __init__(self):
        self.owner, self.meshes = None, {}

    def get(self):
        from . import _local
        if getattr(_local, "meshes", None) is None:
            _local.meshes = {}
        if self.owner is not _local.meshes:
            self.owner, self.meshes = _local.meshes, {}
        return self.meshes


_flat_cache = _FlatCache()


def _flatten_dims(mesh, name):
    """The 1-D mesh named `name` over all of `mesh`'s dims (collective the first time; counted in get_pg_count as
    torch's), the same object for the same dims and name again. No check of the mesh's dim names: tessel's own
    callers (clip_grad_norm_) flatten meshes built without them too."""
    new = name not in mesh._flattened_names()
    flat = _CFlatten(mesh, name)
    if new:
        _count_mesh_groups(flat)
    try:
        group = _CGetGroup(flat)
    except Exception:  # (a rank outside the mesh: no group to key it by)
        return _register(flat)
    cache = _flat_cache.get()
    key = (name, id(group))
    if key not in cache:
        cache[key] = (group, _register(flat))
    return cache[key][1]


def _flatten(self, mesh_dim_name=None):
    """torch's DeviceMesh._flatten: a 1-D mesh over this mesh's dims (name: mesh_dim_name, else the dims'
    names joined by "_"), registered on the root mesh, which can then slice it by name. Collective the first
    time; the same name for the same dims again returns the cached mesh object. A 1-D mesh flattened under its
    own name is itself, and a mesh without mesh_dim_names raises torch's RuntimeError. get_pg_count grows as
    torch's: by the number of flattened groups, except for a flattened mesh over the whole default group (torch
    reuses that group) or a cached one."""
    names = self.mesh_dim_names
    if not names:
        raise RuntimeError("Cannot flatten a DeviceMesh without mesh_dim_names!")
    name = mesh_dim_name if mesh_dim_name else "_".join(names)
    if self.ndim == 1 and name in names:
        return self
    return _flatten_dims(self, name)


DeviceMesh._flatten = _flatten

_CGetItem = DeviceMesh.__getitem__


def _getitem(self, names):
    """mesh["tp"], mesh["dp", "tp"]; on the root mesh a name may be a flattened one (with torch's warning that
    this is deprecated: keep the mesh _flatten returned). A name the mesh does not have is torch's KeyError
    naming all the names asked for; a mesh without mesh_dim_names cannot be sliced (torch's RuntimeError)."""
    if not self.mesh_dim_names:
        raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
    names = (names,) if isinstance(names, str) else tuple(names)
    own = tuple(self.mesh_dim_names)
    if names == own:
        return self  # torch's: all of its names in order give the mesh itself
    flattened = [n for n in self._flattened_names() if n not in own]

    def invalid(valid):
        return KeyError("Invalid mesh_dim_names %s specified. Valid mesh_dim_names are %s." % (names, valid))
    if any(n not in own and n not in flattened for n in names):
        raise invalid(list(own) + flattened)
    dims = [own.index(n) for n in names if n in own]
    if len(dims) == len(names) and any(b <= a for a, b in zip(dims, dims[1:])):  # torch's KeyError (mesh["tp", "dp"])
        raise KeyError("Invalid mesh_dim_names %s specified. Mesh dim indices should be in ascending order." % (names,))
    from .. import InvalidArgumentError
    try:
        sub = _CGetItem(self, names[0] if len(names) == 1 else list(names))
    except InvalidArgumentError as e:
        if any(n not in own for n in names) and "unknown axis" in str(e):
            raise invalid(list(own)) from None  # torch's: a sub-mesh slices its own dims only, not flattened ones
        raise
    if any(n not in own for n in names):
        import warnings
        warnings.warn("Slicing a flattened dim from root mesh will be deprecated in PT 2.11. Users need to "
                      "bookkeep the flattened mesh directly. ", UserWarning, stacklevel=2)
    return sub


DeviceMesh.__getitem__ = _getitem


def _hash(self):
    """Equal meshes (shape, dim names and ranks: DeviceMesh.__eq__) hash alike, so meshes key dicts and sets as
    torch's do."""
    return hash(repr(self))


DeviceMesh.__hash__ = _hash

_CGetGroup = DeviceMesh.get_group
_CGetLocalRank = DeviceMesh.get_local_rank


def _flat_dim(self, mesh_dim):
    """For a dim name: the 1-D mesh _flatten made under it (torch's root._flatten_mapping[name]: torchtitan's
    root.get_group("dp_cp")), or None for one of the mesh's own dims. A name that is neither is torch's
    KeyError. A slice of the root finds the root among the meshes this rank created (one that slices to it)."""
    own = self.mesh_dim_names or ()
    if not isinstance(mesh_dim, str) or mesh_dim in own:
        return None
    if mesh_dim in self._flattened_names():
        from .. import InvalidArgumentError
        from . import _local
        roots = [self] + [m for m in list((getattr(_local, "meshes", None) or {}).values())
                          if own and m.mesh_dim_names and set(own) <= set(m.mesh_dim_names)]
        for root in roots:  # the root: this mesh, or a mesh this rank created that slices to it
            try:
                if root is self or repr(_CGetItem(root, own[0] if len(own) == 1 else list(own))) == repr(self):
                    return _CGetItem(root, mesh_dim)
            except (InvalidArgumentError, KeyError):
                continue
        return None  # (the C++ error names the dims)
    if not own:
        raise KeyError("No `mesh_dim_names` found.",)
    raise KeyError("Mesh dimension '%s' does not exist." % mesh_dim,
                   "Available mesh dimensions are: mesh_dim_names=%s" % (own,))


def _get_group(self, mesh_dim=None):
    """torch's get_group: a dim name the mesh does not have is a KeyError (it was an InvalidArgumentError, which
    `except KeyError` missed); on the root mesh a name _flatten registered gives the flattened dim's group."""
    flat = _flat_dim(self, mesh_dim)
    return _CGetGroup(flat) if flat is not None else _CGetGroup(self, mesh_dim)


def _get_local_rank(self, mesh_dim=None):
    """torch's get_local_rank: this rank's rank in get_group(mesh_dim), with get_group's KeyErrors; a flattened
    dim's name on the root mesh gives the rank along that dim."""
    flat = _flat_dim(self, mesh_dim)
    return _CGetLocalRank(flat) if flat is not None else _CGetLocalRank(self, mesh_dim)


DeviceMesh.get_group = _get_group
DeviceMesh.get_local_rank = _get_local_rank

_CFromGroup = DeviceMesh.from_group


def _from_group(group, device_type, mesh=None, *, mesh_dim_names=None):
    """torch's DeviceMesh.from_group (distributed_py.cc: MeshFromGroups); the mesh is registered for unpickling."""
    return _register(_CFromGroup(group, device_type, mesh, mesh_dim_names=mesh_dim_names))


DeviceMesh.from_group = staticmethod(_from_group)
