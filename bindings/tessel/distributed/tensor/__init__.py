"""tessel.distributed.tensor: DTensor, distribute_tensor, distribute_module, Shard, Replicate, Partial,
and the DTensor factories (zeros, ones, empty, full, rand, randn).

A DTensor is a tessel.Tensor whose impl is distributed (DESIGN.md: "DTensor is a kind of Tensor"), so
``isinstance(x, DTensor)`` asks ``x.is_distributed``, and every op and module works on it unchanged.

    d = distribute_tensor(tessel.ones(4, 3), mesh, [Shard(0)])      # this rank's rows
    d.placements, d.to_local(), d.full_tensor(), d.redistribute(mesh, [Replicate()])
"""
from ... import _C

Shard = _C.Shard
Replicate = _C.Replicate
Partial = _C.Partial
_StridedShard = _C._StridedShard  # torch 2.15's label of a Shard axis applied out of mesh order (FSDP over TP)
Placement = (_C.Shard, _C.Replicate, _C.Partial, _C._StridedShard)  # isinstance(p, Placement) as torch's base
DeviceMesh = _C.DeviceMesh


class _DTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _C.Tensor) and obj.is_distributed


class DTensor(metaclass=_DTensorMeta):
    """torch's DTensor: tessel tensors with ``is_distributed`` are instances of it."""

    def __init__(self, *args, **kwargs):
        raise TypeError("DTensor is not constructed directly: use distribute_tensor or DTensor.from_local")

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None,
                   grad_placements=None):
        """Wraps each rank's local piece. shape/stride: the global ones (uneven shards, as torch.chunk splits
        them); without them run_check=True derives the shape from every rank's piece (one small all_gather
        per mesh axis), else even shards are assumed, as torch. A piece that is not this rank's shard of
        the global shape is a ValueError naming both. grad_placements: the layout the incoming gradient is
        redistributed to before its local piece becomes local_tensor's gradient (default: placements, Partial
        read as Replicate)."""
        device_mesh = _mesh_or_current(device_mesh)
        placements = _placement_list(placements, device_mesh, "DTensor.from_local")
        _no_mixed_partials(placements)
        args = (local_tensor, device_mesh, placements, None if shape is None else list(shape),
                None if stride is None else list(stride), run_check,
                None if grad_placements is None else list(grad_placements))
        if not run_check:
            return _C.from_local(*args)
        from .. import _run_keyed
        from ... import ops
        # the check's collectives under torch's keys in a CommDebugMode
        return _run_keyed({("all_gather", None): ops.c10d._allgather_base_, ("broadcast", None): ops.c10d.broadcast_},
                          _C.from_local, args, {})


def _local_tensor(self):
    """torch's DTensor._local_tensor: this rank's piece, sharing its memory, without the DTensor's autograd
    history (code that reads or writes the raw shard, as torchtitan's and FSDP2's internals do)."""
    if not self.is_distributed:
        raise AttributeError("'Tensor' object has no attribute '_local_tensor' (it is not a DTensor)")
    return self.to_local().detach()


_C.Tensor._local_tensor = property(_local_tensor)
_device_mesh_cpp = _C.Tensor.device_mesh


def _device_mesh(self):
    """torch's DTensor.device_mesh: the mesh object it was made on (`d.device_mesh is mesh`). The C++ property
    gives a new handle each time; this rank's registered mesh of the same layout over the same groups is returned
    in its place."""
    mesh = _device_mesh_cpp.__get__(self)
    from .. import _local
    key = repr(mesh)
    known = (getattr(_local, "meshes", None) or {}).get(key)
    if known is None:
        return mesh
    groups = getattr(_local, "mesh_groups", None)
    if groups is None:
        groups = _local.mesh_groups = {}
    entry = groups.get(key)
    if entry is None or entry[0] is not known:
        entry = groups[key] = (known, known.get_all_groups())
    return known if all(a is b for a, b in zip(entry[1], mesh.get_all_groups())) else mesh


_C.Tensor.device_mesh = property(_device_mesh, doc=_device_mesh_cpp.__doc__)


def _placement_list(placements, device_mesh, op):
    """The placements as a list (Replicate on every mesh dim when None); anything but a Shard / Replicate /
    Partial in it is a TypeError naming it (pybind11's cast error named neither the op nor the entry)."""
    if placements is None:
        return [Replicate()] * device_mesh.ndim
    placements = list(placements)
    for i, p in enumerate(placements):
        if not isinstance(p, Placement):
            raise TypeError("%s: placements[%d] is %r (%s); expected Shard(dim), Replicate() or Partial()"
                            % (op, i, p, type(p).__name__))
    return placements


def _no_mixed_partials(placements):
    """torch's check in from_local and distribute_tensor: Partials of different reduce ops (but sum with avg) would
    make the value depend on the order the mesh dims are reduced in (max over one then sum over the other, or
    the reverse)."""
    ops = {p.reduce_op for p in placements if isinstance(p, Partial)}
    if len(ops) > 1 and ops != {"sum", "avg"}:
        raise ValueError("Mixed Partial reduce types are not supported in the same placement list. Found reduce ops: "
                         "%s. Please ensure all Partial placements use the same reduce operation." % ops)


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    device_mesh = _mesh_or_current(device_mesh)
    if not getattr(tensor, "is_leaf", True):  # torch's check and text (a result of ops that require grad)
        raise RuntimeError("`distribute_tensor` should be used to distribute leaf tensors! but found non-leaf tensor!")
    placements = _placement_list(placements, device_mesh, "distribute_tensor")
    _no_mixed_partials(placements)
    if len(placements) != device_mesh.ndim:  # torch's check and text
        raise ValueError("`placements` must have the same length as `device_mesh.ndim`! Found placements length: "
                         "%d, and device_mesh.ndim: %d." % (len(placements), device_mesh.ndim))
    if isinstance(tensor, DTensor):  # torch: a DTensor already so placed is returned as it is
        if tensor.device_mesh != device_mesh:
            raise ValueError("Cannot distribute a DTensor with device mesh %s to a different device mesh %s."
                             % (tensor.device_mesh, device_mesh))
        wanted = tuple(Shard(p.dim + tensor.dim()) if isinstance(p, Shard) and p.dim < 0 else p for p in placements)
        if tuple(tensor.placements) != wanted:
            raise ValueError("Cannot distribute a DTensor with placements %s to a different placements %s. do you "
                             "want to call `redistribute` instead?" % (tuple(tensor.placements), tuple(placements)))
        return tensor
    for p in placements:  # torch's errors for a Shard dim the tensor lacks
        if isinstance(p, (Shard, _StridedShard)):
            if tensor.dim() == 0:
                raise AssertionError("Expected tensor.dim() > 0, got 0")
            if not -tensor.dim() <= p.dim < tensor.dim():
                raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got %d)"
                                 % (-tensor.dim(), tensor.dim() - 1, p.dim))
    if any(isinstance(p, Partial) for p in placements):
        return _distribute_partial(tensor, device_mesh, placements, src_data_rank)
    from .. import _run_keyed
    out = _run_keyed(_distribute_keys(device_mesh, placements), _C.distribute_tensor,
                     (tensor, device_mesh, placements, src_data_rank), {})
    if out._version and out._storage()[0] != tensor._storage()[0]:
        out._unsafe_set_version_counter(0)  # a fresh copy, as torch's (the write that filled it counted one)
    return out


def _distribute_keys(device_mesh, placements):
    """How a CommDebugMode keys distribute_tensor's broadcasts: torch scatters along a Shard mesh dim
    (c10d.scatter_) and broadcasts along a Replicate one (c10d.broadcast_)."""
    from ... import ops
    keys = {}
    for i, p in enumerate(placements):
        op = ops.c10d.scatter_ if isinstance(p, (Shard, _StridedShard)) else ops.c10d.broadcast_
        keys[("broadcast", device_mesh.get_group(i).group_name)] = op
        keys.setdefault(("broadcast", None), op)
    return keys


def _distribute_partial(tensor, device_mesh, placements, src_data_rank):
    """torch's distribute_tensor onto a Partial placement: each rank's piece is the replicated value divided by
    the mesh dim's size for Partial(sum), the value itself for avg / max / min, so the reduction gives the
    tensor back (torch's Partial._partition_value)."""
    dense = [Replicate() if isinstance(p, Partial) else p for p in placements]
    from .. import _run_keyed
    with _C._GradMode(False):
        local = _run_keyed(_distribute_keys(device_mesh, dense), _C.distribute_tensor,
                           (tensor.detach(), device_mesh, dense, src_data_rank), {}).to_local()
        for i, p in enumerate(placements):
            if isinstance(p, Partial) and p.reduce_op == "sum":
                local = local / float(device_mesh.size(i))
        out = DTensor.from_local(local, device_mesh, placements, run_check=False, shape=tuple(tensor.shape))
    return out.requires_grad_(True) if tensor.requires_grad else out

def _mesh_or_current(device_mesh):
    """torch's `device_mesh or _mesh_resources.get_current_mesh()`: without one, the innermost `with mesh:` of this
    thread (a RuntimeError outside any)."""
    if device_mesh is not None:
        return device_mesh
    from ..device_mesh import _mesh_resources
    return _mesh_resources.get_current_mesh()


def _global_size(size):
    """torch's normalize_to_torch_size: zeros(2, 3), zeros((2, 3)), zeros([2, 3]) and zeros(Size) alike; zeros()
    is 0-d. Each entry an int (or has __index__, as a 0-d integer tensor), else torch.Size's TypeError."""
    if isinstance(size, int):
        size = [size]
    elif len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = list(size[0])
    out = []
    for i, n in enumerate(size):
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError("torch.Size() takes an iterable of 'int' (item %d is '%s')" % (i, type(n).__name__))
        out.append(n.__index__())
    return tuple(out)


def _place(make, device_mesh, placements, requires_grad, layout=None, random=False):
    """torch's _dtensor_init_helper: the global tensor make() gives, on device_mesh with placements (default
    Replicate everywhere). Each rank's piece is the tensor's values at its place (rank 0's values when random,
    so random ones agree on every rank; otherwise every rank's own, which are the same: no collective, as
    torch's factories make none); along a Partial dim every rank holds them whole, as torch's
    init_op(local_shape) does for every reduce op (ones with [Partial()] holds 1 on each rank, full_tensor() the
    world size; avg / max / min give the value back)."""
    from ..._tensor_extras import strided
    if layout is not None and layout != strided:
        raise AssertionError("layout value not supported!")
    device_mesh = _mesh_or_current(device_mesh)
    placements = list(placements) if placements else [Replicate()] * device_mesh.ndim
    if len(placements) != device_mesh.ndim:
        raise AssertionError("mesh dimension does not match the length of placements")
    value = make()
    source = 0 if random else None
    if any(isinstance(p, Partial) for p in placements):
        dense = [Replicate() if isinstance(p, Partial) else p for p in placements]
        with _C._GradMode(False):
            local = _C.distribute_tensor(value, device_mesh, dense, source).to_local()
            out = DTensor.from_local(local, device_mesh, placements, run_check=False, shape=tuple(value.shape))
    else:
        out = distribute_tensor(value, device_mesh, placements, src_data_rank=source)
    return out.requires_grad_(True) if requires_grad else out


def _factory(kind):
    from ..._tensor_extras import strided

    def fn(*size, requires_grad=False, dtype=None, layout=strided, device_mesh=None, placements=None):
        """torch.distributed.tensor.%s(*size, requires_grad=False, dtype=None, layout=torch.strided,
        device_mesh=None, placements=None): the global tensor of `size` (ints, or one list / tuple / Size) on
        device_mesh (default: the current `with mesh:`) with placements (default Replicate everywhere)."""
        from ... import _tensor as T
        shape = _global_size(size)
        return _place(lambda: getattr(T, kind)(shape, dtype=dtype), device_mesh, placements, requires_grad,
                      layout, random=kind in ("rand", "randn"))
    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = fn.__doc__ % kind
    return fn


zeros, ones, empty, rand, randn = (_factory(k) for k in ("zeros", "ones", "empty", "rand", "randn"))


def full(size, fill_value, *, dtype=None, layout=None, requires_grad=False, device_mesh=None, placements=None):
    """torch.distributed.tensor.full: the global tensor of `size` filled with fill_value (a Partial dim holds it
    on every rank, as torch's)."""
    from ... import _tensor as T
    shape = _global_size(size)
    return _place(lambda: T.full(shape, fill_value, dtype=dtype), device_mesh, placements, requires_grad,
                  layout)


def _endpoint(value, name):
    if isinstance(value, _C.Tensor):
        if value.dim() != 0:
            raise RuntimeError("%s only supports 0-dimensional start and end tensors" % name)
        return value.item()
    return value


def linspace(start, end, steps, *, dtype=None, layout=None, requires_grad=False, device_mesh=None,
             placements=None):
    """torch.distributed.tensor.linspace: `steps` evenly spaced values from start to end (0-d tensors
    allowed) as a DTensor on device_mesh with placements (default Replicate everywhere)."""
    import tessel
    start, end = _endpoint(start, "linspace"), _endpoint(end, "linspace")
    return _place(lambda: tessel.linspace(start, end, steps, dtype=dtype), device_mesh, placements,
                  requires_grad, layout)


def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, requires_grad=False, device_mesh=None,
             placements=None):
    """torch.distributed.tensor.logspace: base ** linspace(start, end, steps) as a DTensor on device_mesh."""
    import tessel
    start, end = _endpoint(start, "logspace"), _endpoint(end, "logspace")
    return _place(lambda: tessel.logspace(start, end, steps, base=base, dtype=dtype), device_mesh,
                  placements, requires_grad, layout)


def distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None, output_fn=None):
    """torch's distribute_module: partition_fn(name, submodule, device_mesh) places each submodule's
    parameters; afterwards (and without one) every parameter and buffer that is not a DTensor becomes
    Replicate on the mesh (a parameter keeps its requires_grad; torch's re-wrap makes a frozen one
    trainable). input_fn(module, inputs, device_mesh) and output_fn(module, outputs, device_mesh) become the
    module's forward pre-hook and forward hook; the older two-argument forms (inputs, device_mesh) and
    (outputs, device_mesh) are accepted with torch's FutureWarning. Once per module, as torch. Returns module."""
    import inspect
    import warnings
    from ...nn._state_dict import _persistent_buffer_names
    from ...nn.modules import Parameter
    device_mesh = _mesh_or_current(device_mesh)
    if getattr(module, "_distribute_module_applied", False):
        raise RuntimeError("distribute_module should only be called once on a module, "
                           "but it has already been called on this module!")
    replicate = [Replicate()] * device_mesh.ndim

    def replicate_rest(sub):
        for pname, p in list(sub.named_parameters(recurse=False)):
            if p is not None and not isinstance(p, DTensor):
                sub.register_parameter(pname, Parameter(distribute_tensor(p.detach(), device_mesh, replicate),
                                                        requires_grad=p.requires_grad))
        persistent = None
        for bname, b in list(sub.named_buffers(recurse=False)):
            if b is not None and not isinstance(b, DTensor):
                persistent = _persistent_buffer_names(sub) if persistent is None else persistent
                sub.register_buffer(bname, distribute_tensor(b, device_mesh, replicate),
                                    persistent=bname in persistent)

    for name, sub in module.named_modules():
        if partition_fn is not None:
            partition_fn(name, sub, device_mesh)
        replicate_rest(sub)

    def arity(fn, what):
        n = len(inspect.signature(fn).parameters)
        if n not in (2, 3):
            raise ValueError("%s should take in 3 arguments, but got %d arguments!" % (what, n))
        if n == 2:
            warnings.warn("Deprecating %s that takes two arguments (%s, device_mesh), please use %s that takes in "
                          "(module, %s, device_mesh) instead!" % (what, what[:-3] + "s", what, what[:-3] + "s"),
                          FutureWarning, stacklevel=3)
        return n

    if input_fn is not None:
        if arity(input_fn, "input_fn") == 2:
            module.register_forward_pre_hook(lambda m, args: input_fn(args, device_mesh))
        else:
            module.register_forward_pre_hook(lambda m, args: input_fn(m, args, device_mesh))
    if output_fn is not None:
        if arity(output_fn, "output_fn") == 2:
            module.register_forward_hook(lambda m, args, out: output_fn(out, device_mesh))
        else:
            module.register_forward_hook(lambda m, args, out: output_fn(m, out, device_mesh))
    module._distribute_module_applied = True
    return module


from ..device_mesh import init_device_mesh  # noqa: E402,F401 (torch.distributed.tensor exports it)
from . import _random, device_mesh, parallel, placement_types  # noqa: E402,F401 (torch.distributed.tensor's
#   submodules)


class _DTensorMethod:
    """Tensor.full_tensor / to_local / redistribute: DTensor methods, absent on a dense tensor (AttributeError, so
    `hasattr(t, "full_tensor")`, the duck-typed DTensor test accelerate and others use, reads as in torch where
    only DTensor has them; the call raised tessel's "expected a DTensor" error)."""

    def __init__(self, name, method):
        self._name, self._method = name, method

    def __get__(self, obj, owner=None):
        if obj is None:
            return self._method
        if not obj.is_distributed:
            raise AttributeError("'Tensor' object has no attribute '%s'" % self._name)
        return self._method.__get__(obj, owner)


_redistribute_cpp = _C.Tensor.redistribute


def _redistribute(self, device_mesh=None, placements=None, *, async_op=False, forward_dtype=None,
                  backward_dtype=None):
    out = _redistribute_cpp(self, device_mesh, placements, async_op=async_op, forward_dtype=forward_dtype,
                            backward_dtype=backward_dtype)
    if async_op and tuple(out.placements) != tuple(self.placements):
        return _AsyncRedistributed(out)
    return out


_redistribute.__doc__ = _redistribute_cpp.__doc__


class _AsyncRedistributed(_C.Tensor):
    """What redistribute(async_op=True) returns when it moved data: a DTensor whose to_local() is torch's
    AsyncCollectiveTensor (scripts call .wait() on it); the collectives have completed already."""

    def __init__(self, dtensor):
        _C.Tensor.__init__(self, dtensor)

    def to_local(self, *, grad_placements=None):
        from .._functional_collectives import AsyncCollectiveTensor
        return AsyncCollectiveTensor(_C.Tensor.to_local(self, grad_placements=grad_placements))


for _name, _method in (("full_tensor", _C.Tensor.full_tensor), ("to_local", _C.Tensor.to_local),
                       ("redistribute", _redistribute)):
    setattr(_C.Tensor, _name, _DTensorMethod(_name, _method))


# torch's internal modules that libraries import by path; _dtensor_spec installs DTensor._spec
from . import _api, _dtensor_spec, _utils  # noqa: E402,F401
