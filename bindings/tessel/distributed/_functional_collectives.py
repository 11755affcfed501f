"""torch.distributed._functional_collectives: collectives that return a new tensor (the input is left
as is), as torchtitan uses them for metrics (funcol.all_reduce(loss, reduceOp="avg", group=mesh)).

group is a process group, a 1-D DeviceMesh, (mesh, mesh_dim), a group name or a list of global ranks (torch's
deprecated form); reduceOp a name ("sum", "avg", "max", "min", "product", "band", "bor", "bxor", any case) or a
ReduceOp. all_reduce, all_gather_single, reduce_scatter_single and all_to_all_single (their *_autograd and
deprecated *_tensor spellings, and the *_coalesced forms over lists) are differentiable, as torch 2.15's
(their backward is the collective that undoes the layout: all_reduce's the same reduction of the gradient (min /
max: the summed gradient shared among the ranks holding the extremum), all_gather's a reduce-scatter (sum),
reduce_scatter's (sum only) an all-gather, all_to_all's the all-to-all with the split sizes swapped; every rank
must run the backward). They complete before returning, so wait_tensor is the identity.
"""
import functools
import warnings

from .. import _C
from ..autograd import Function
from .nn.functional import _all_reduce as _all_reduce_copy, _size  # a new tensor holding the all-reduce; group size
from . import ReduceOp, all_gather_into_tensor, all_to_all_single as _all_to_all_single
from . import broadcast as _broadcast, reduce_scatter_tensor as _reduce_scatter_tensor

_OPS = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "max": ReduceOp.MAX, "min": ReduceOp.MIN,
        "product": ReduceOp.PRODUCT, "band": ReduceOp.BAND, "bor": ReduceOp.BOR, "bxor": ReduceOp.BXOR}


def _op(reduce_op):
    """A reduce op given by name (torch's: any case; "prod" is not one) or as a ReduceOp."""
    if isinstance(reduce_op, str):
        op = _OPS.get(reduce_op.lower())
        if op is None:  # torch's RuntimeError (and a ValueError)
            raise _C.InvalidArgumentError("Unrecognized reduce_op: %s" % reduce_op.lower())
        return op
    return reduce_op


def _known_groups():
    """This rank's process groups in the order torch registers them: the default group, then those new_group /
    split_group made, then the DeviceMeshes' dim groups."""
    from . import _local, group as _member
    if _member.WORLD is not None:
        yield _member.WORLD
    yield from list(getattr(_local, "groups", None) or [])
    for mesh in list((getattr(_local, "meshes", None) or {}).values()):
        for dim in range(mesh.ndim):
            yield mesh.get_group(dim)


def _resolve(group):
    """torch's group forms: a process group, a 1-D DeviceMesh, (mesh, dim), a group name (ProcessGroup
    .group_name) or a list of global ranks (deprecated in torch: the first group of that size holding them all)."""
    from .device_mesh import DeviceMesh
    if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], DeviceMesh):
        return group[0].get_group(group[1])
    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError("functional collectives: a %d-D DeviceMesh needs a mesh dim: pass (mesh, dim)"
                             % group.ndim)
        return group.get_group()
    if isinstance(group, str):
        for g in _known_groups():
            if g.name == group:
                return g
        raise RuntimeError("Could not resolve the process group registered under the name %s" % group)  # torch's
    if isinstance(group, list):
        warnings.warn("The combination of ranks + tag as process group identifier has been deprecated. Please "
                      "switch to using ProcessGroup, DeviceMesh, or group name instead.", FutureWarning, stacklevel=3)
        ranks = [int(r) for r in group]
        for g in _known_groups():
            if g.size == len(ranks) and all(r in g.global_ranks for r in ranks):
                return g
        raise ValueError("")  # torch's (no group holds those ranks)
    return group


def _fresh(x):
    with _C._GradMode(False):
        return x.detach().clone()


def _all_gather_fn(x, gather_dim, g):
    if x.dim() == 0:  # torch's (gloo's) error: a 0-d tensor has no dim to gather along
        raise RuntimeError("ProcessGroupGloo::allgather_coalesced: invalid size of output tensor at index 0 "
                           "(expected length (), got (1))")
    moved = _fresh(x).movedim(gather_dim, 0).contiguous() if gather_dim != 0 else _fresh(x)
    out = _C._full([moved.shape[0] * _size(g)] + list(moved.shape[1:]), 0.0, x.dtype)
    all_gather_into_tensor(out, moved, group=g)
    return out.movedim(0, gather_dim) if gather_dim != 0 else out


def _reduce_scatter_fn(x, op, scatter_dim, g):
    n = _size(g)
    moved = _fresh(x).movedim(scatter_dim, 0).contiguous() if scatter_dim != 0 else _fresh(x)
    if moved.shape[0] % n:
        raise ValueError("reduce_scatter_tensor: dim %d of size %d is not divisible by the group size %d"
                         % (scatter_dim, moved.shape[0], n))
    out = _C._full([moved.shape[0] // n] + list(moved.shape[1:]), 0.0, x.dtype)
    _reduce_scatter_tensor(out, moved, op=op, group=g)
    return out.movedim(0, scatter_dim) if scatter_dim != 0 else out


def _all_to_all_fn(x, output_split_sizes, input_split_sizes, g):
    rows = sum(output_split_sizes) if output_split_sizes is not None else x.shape[0]
    out = _C._full([rows] + list(x.shape[1:]), 0.0, x.dtype)
    _all_to_all_single(out, _fresh(x).contiguous(), output_split_sizes, input_split_sizes, group=g)
    return out


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, x, op, g):
        ctx.op, ctx.group = op, g
        out = _all_reduce_copy(x, op, g)
        if op in (ReduceOp.MIN, ReduceOp.MAX):
            ctx.save_for_backward(x.detach(), out.detach())
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.MAX):
            raise RuntimeError("all_reduce backward only supports `sum`, `premul_sum`, `avg`, `max`, `min` "
                               "reductions, got '%s'" % (ctx.op,))
        extremum = ctx.op in (ReduceOp.MIN, ReduceOp.MAX)
        out = _all_reduce_copy(grad, ReduceOp.SUM if extremum else ctx.op, ctx.group)
        if extremum:  # the summed gradient shared evenly among the elements (on any rank) holding the extremum
            x, y = ctx.saved_tensors
            mask = (x == y) | (x.isnan() & y.isnan())
            ties = _all_reduce_copy(mask.float(), ReduceOp.SUM, ctx.group)
            from .. import where
            out = where(mask, (out / ties).to(out.dtype), 0.0)
        return out, None, None


class _AllGather(Function):
    @staticmethod
    def forward(ctx, x, gather_dim, g):
        ctx.dim, ctx.group = gather_dim, g
        return _all_gather_fn(x, gather_dim, g)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_fn(grad, ReduceOp.SUM, ctx.dim, ctx.group), None, None


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, x, op, scatter_dim, g):
        ctx.op, ctx.dim, ctx.group = op, scatter_dim, g
        return _reduce_scatter_fn(x, op, scatter_dim, g)

    @staticmethod
    def backward(ctx, grad):
        if ctx.op != ReduceOp.SUM:
            raise RuntimeError("reduce_scatter_tensor backward only supports 'sum' reduction, got '%s'" % (ctx.op,))
        return _all_gather_fn(grad, ctx.dim, ctx.group), None, None, None


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, x, output_split_sizes, input_split_sizes, g):
        ctx.splits, ctx.group = (output_split_sizes, input_split_sizes), g
        return _all_to_all_fn(x, output_split_sizes, input_split_sizes, g)

    @staticmethod
    def backward(ctx, grad):
        output_split_sizes, input_split_sizes = ctx.splits
        return _all_to_all_fn(grad, input_split_sizes, output_split_sizes, ctx.group), None, None, None


def all_reduce(self, reduceOp, group, tag=""):
    return _AllReduce.apply(self, _op(reduceOp), _resolve(group))


def all_gather_single(self, gather_dim, group, tag=""):
    """The inputs of the group's ranks concatenated along gather_dim (torch 2.15's name)."""
    return _AllGather.apply(self, gather_dim, _resolve(group))


def reduce_scatter_single(self, reduceOp, scatter_dim, group, tag=""):
    """This rank's block (along scatter_dim) of the reduction over the group's ranks (torch 2.15's name)."""
    return _ReduceScatter.apply(self, _op(reduceOp), scatter_dim, _resolve(group))


def all_to_all_single(self, output_split_sizes, input_split_sizes, group, tag=""):
    return _AllToAll.apply(self, output_split_sizes, input_split_sizes, _resolve(group))


# torch 2.15's other spellings: the *_autograd ones are the same functions (every one is differentiable); the
# *_tensor ones are deprecated there with a FutureWarning naming their *_single replacement.
all_gather_single_autograd, reduce_scatter_single_autograd = all_gather_single, reduce_scatter_single
all_to_all_single_autograd = all_to_all_single


def _deprecated(name, replacement, fn):
    """fn under its deprecated name (its signature, as inspect reads it), warning as torch's."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        warnings.warn("`torch.distributed._functional_collectives.%s` is deprecated. Please use "
                      "`torch.distributed._functional_collectives.%s` instead." % (name, replacement),
                      FutureWarning, stacklevel=2)
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    return call


all_gather_tensor = _deprecated("all_gather_tensor", "all_gather_single", all_gather_single)
all_gather_tensor_autograd = _deprecated("all_gather_tensor_autograd", "all_gather_single_autograd",
                                         all_gather_single)
reduce_scatter_tensor = _deprecated("reduce_scatter_tensor", "reduce_scatter_single", reduce_scatter_single)
reduce_scatter_tensor_autograd = _deprecated("reduce_scatter_tensor_autograd", "reduce_scatter_single_autograd",
                                             reduce_scatter_single)


class _Broadcast(Function):
    """torch's funcol broadcast has no autograd formula: its output requires grad as the input does and the
    gradient passes through unchanged, with torch's warning that this may be silently incorrect."""

    @staticmethod
    def forward(ctx, x, src, g):
        out = _fresh(x)
        _broadcast(out, group=g, group_src=src)
        return out

    @staticmethod
    def backward(ctx, grad):
        warnings.warn("_c10d_functional::broadcast: an autograd kernel was not registered to the Autograd key(s) but "
                      "we are trying to backprop through it. This may lead to silently incorrect behavior. This "
                      "behavior is deprecated and will be removed in a future version of PyTorch. If your operator "
                      "is differentiable, please ensure you have registered an autograd kernel to the correct "
                      "Autograd key (e.g. DispatchKey::Autograd, DispatchKey::CompositeImplicitAutograd). If your "
                      "operator is not differentiable, or to squash this warning and use the previous behavior, "
                      "please register torch::CppFunction::makeFallthrough() to DispatchKey::Autograd.")
        return grad, None, None


def broadcast(self, src, group, tag=""):
    """The tensor of the group's rank `src` (a rank within the group, as torch's: ProcessGroup::broadcast's root,
    unlike dist.broadcast's global src), a new tensor on every rank."""
    return _Broadcast.apply(self, src, _resolve(group))


def all_reduce_coalesced(self, reduceOp, group, tag=""):
    """Each tensor of the list all-reduced (a new list; each differentiable as all_reduce)."""
    op, g = _op(reduceOp), _resolve(group)
    return [_AllReduce.apply(t, op, g) for t in self]


def all_gather_single_coalesced(self, group, tag=""):
    """Each tensor of the list gathered along dim 0 (a new list)."""
    g = _resolve(group)
    return [_AllGather.apply(t, 0, g) for t in self]


def reduce_scatter_single_coalesced(inputs, reduceOp, scatter_dim, group, tag=""):
    """Each input's block (along its scatter_dim) of the reduction over the group's ranks (a new list)."""
    op, g = _op(reduceOp), _resolve(group)
    if len(scatter_dim) != len(inputs):
        raise AssertionError("Length of scatter_dim (%d) must equal length of inputs (%d)"
                             % (len(scatter_dim), len(inputs)))
    for idx, (dim, t) in enumerate(zip(scatter_dim, inputs)):
        if t.shape[dim] % _size(g):
            raise AssertionError("input dimension %d (%d must be a multiple of group_size %d for tensor at index %d"
                                 % (dim, t.shape[dim], _size(g), idx))
    return [_ReduceScatter.apply(t, op, dim, g) for t, dim in zip(inputs, scatter_dim)]


all_gather_into_tensor_coalesced = _deprecated(
    "all_gather_into_tensor_coalesced", "all_gather_single_coalesced", all_gather_single_coalesced)
reduce_scatter_tensor_coalesced = _deprecated(
    "reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced", reduce_scatter_single_coalesced)


def permute_tensor(self, src_dst, group, tag=""):
    """src_dst[m] == n: group rank m sends its tensor to group rank n (an all_to_all_single of whole tensors)."""
    g = _resolve(group)
    me, n = int(g.rank), _size(g)
    output_split_sizes, input_split_sizes = [0] * n, [0] * n
    for src, dst in enumerate(src_dst):
        if src == me:
            input_split_sizes[dst] = self.numel()
        if dst == me:
            output_split_sizes[src] = self.numel()
    return all_to_all_single(self, output_split_sizes, input_split_sizes, g)


def wait_tensor(tensor):
    return tensor


def wait_tensors(tensors):
    return list(tensors)


class AsyncCollectiveTensor(_C.Tensor):
    """torch's handle on a collective's result that may still be in flight (what to_local() of a DTensor from
    redistribute(async_op=True) gives): wait() returns the plain tensor. tessel's collectives complete before
    returning, so there is nothing to wait for; ops on it give plain tensors, as torch's."""

    def __init__(self, elem):
        _C.Tensor.__init__(self, elem)

    def wait(self):
        return _C.Tensor(self)

    def trigger_wait(self):
        return _C.Tensor(self)

    def __repr__(self):
        return "AsyncCollectiveTensor(%r)" % (_C.Tensor(self),)

