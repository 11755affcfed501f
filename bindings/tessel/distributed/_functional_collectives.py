"""torch.distributed._functional_collectives: collectives that return a new tensor (the input is left
as is), as torchtitan uses them for metrics (funcol.all_reduce(loss, reduceOp="avg", group=mesh)).

group is a process group, a 1-D DeviceMesh or (mesh, mesh_dim); reduceOp a name ("sum", "avg", "max",
"min", "product", any case, or a ReduceOp). The results carry no autograd history (torch's functional
collectives are not differentiable either). They complete before returning, so wait_tensor is the identity.
"""
from .. import _C
from . import ReduceOp, all_gather_into_tensor, all_reduce as _all_reduce, all_to_all_single as _all_to_all_single
from . import broadcast as _broadcast, reduce_scatter_tensor as _reduce_scatter_tensor

_OPS = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "max": ReduceOp.MAX, "min": ReduceOp.MIN,
        "product": ReduceOp.PRODUCT, "prod": ReduceOp.PRODUCT}


def _op(reduce_op):
    if isinstance(reduce_op, str):
        op = _OPS.get(reduce_op.lower())
        if op is None:
            raise ValueError("Unrecognized reduce op %r (one of %s)" % (reduce_op, sorted(_OPS)))
        return op
    return reduce_op


def _resolve(group):
    from .device_mesh import DeviceMesh
    if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], DeviceMesh):
        return group[0].get_group(group[1])
    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError("functional collectives: a %d-D DeviceMesh needs a mesh dim: pass (mesh, dim)"
                             % group.ndim)
        return group.get_group()
    if isinstance(group, (list, tuple)):
        raise NotImplementedError("functional collectives over a list of ranks: pass a process group or a mesh")
    return group


def _fresh(x):
    with _C._GradMode(False):
        return x.detach().clone()


def all_reduce(self, reduceOp, group, tag=""):
    out = _fresh(self)
    _all_reduce(out, op=_op(reduceOp), group=_resolve(group))
    return out


def all_gather_tensor(self, gather_dim, group, tag=""):
    g = _resolve(group)
    n = g.size() if callable(getattr(g, "size", None)) else g.size
    moved = _fresh(self).movedim(gather_dim, 0).contiguous() if gather_dim != 0 else _fresh(self)
    out = _C._full([moved.shape[0] * n] + list(moved.shape[1:]), 0.0, self.dtype)
    all_gather_into_tensor(out, moved, group=g)
    return out.movedim(0, gather_dim) if gather_dim != 0 else out


def reduce_scatter_tensor(self, reduceOp, scatter_dim, group, tag=""):
    g = _resolve(group)
    n = g.size() if callable(getattr(g, "size", None)) else g.size
    moved = _fresh(self).movedim(scatter_dim, 0).contiguous() if scatter_dim != 0 else _fresh(self)
    if moved.shape[0] % n:
        raise ValueError("reduce_scatter_tensor: dim %d of size %d is not divisible by the group size %d"
                         % (scatter_dim, moved.shape[0], n))
    out = _C._full([moved.shape[0] // n] + list(moved.shape[1:]), 0.0, self.dtype)
    _reduce_scatter_tensor(out, moved, op=_op(reduceOp), group=g)
    return out.movedim(0, scatter_dim) if scatter_dim != 0 else out


def all_to_all_single(self, output_split_sizes, input_split_sizes, group, tag=""):
    g = _resolve(group)
    rows = sum(output_split_sizes) if output_split_sizes is not None else self.shape[0]
    out = _C._full([rows] + list(self.shape[1:]), 0.0, self.dtype)
    _all_to_all_single(out, _fresh(self), output_split_sizes, input_split_sizes, group=g)
    return out


def broadcast(self, src, group, tag=""):
    out = _fresh(self)
    _broadcast(out, src=src, group=_resolve(group))
    return out


def wait_tensor(tensor):
    return tensor
