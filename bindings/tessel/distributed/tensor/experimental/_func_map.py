"""local_map (torch.distributed.tensor.experimental.local_map): run a function written for plain tensors on the
local pieces of DTensors, and wrap what it returns as DTensors with the placements the caller declares.

    def local_mm_allreduce(W, X):                       # plain tensors: this rank's pieces
        return funcol.all_reduce(W @ X, "sum", mesh)
    f = local_map(local_mm_allreduce, out_placements=[Replicate()],
                  in_placements=([Shard(1)], [Shard(0)]), device_mesh=mesh)
    Y = f(W_dt, X_dt)                                   # a DTensor, Replicate

Semantics follow torch's: arguments are flattened as a pytree; each DTensor is checked against its
in_placements (or redistributed with redistribute_inputs=True), unwrapped with to_local(grad_placements=
in_grad_placements[i]) so its gradient comes back in the declared layout; non-DTensor arguments pass through.
Outputs are flattened too and each tensor becomes DTensor.from_local(out, mesh, placements) without a check
(placements None: Replicate, as torch's from_local reads it);
when no argument was a DTensor the function's result is returned unchanged. Misuse raises torch's
exceptions (AssertionError for a count or None mismatch, ValueError for a placement mismatch). Not kept:
spmd_types=True (torch's optional spmd_types package), which raises NotImplementedError.
"""
import functools

from .... import _C
from ....utils import _pytree as pytree

__all__ = ["local_map"]


def local_map(func=None, out_placements=None, in_placements=None, in_grad_placements=None, device_mesh=None, *,
              redistribute_inputs=False, spmd_types=False):
    if spmd_types:
        raise NotImplementedError("local_map(spmd_types=True): tessel has no spmd_types checker; run without it")
    if func is None:  # used as a decorator with arguments
        return lambda f: local_map(f, out_placements, in_placements, in_grad_placements, device_mesh,
                                   redistribute_inputs=redistribute_inputs)
    return functools.partial(_local_map_wrapped, func, out_placements, in_placements, in_grad_placements,
                             device_mesh, redistribute_inputs)


def _is_dtensor(x):
    return isinstance(x, _C.Tensor) and x.is_distributed


def _unwrap(i, arg, in_placements, in_grad_placements, redistribute_inputs):
    if in_placements is not None:
        spec = in_placements[i]
        if spec is None:
            raise AssertionError("DTensor input %s expects placements but received None!" % (arg.shape,))
        spec = tuple(spec)
        if tuple(arg.placements) != spec:
            if not redistribute_inputs:
                raise ValueError("arg %d in local_map has a mismatched placements: arg placements is %s but the "
                                 "input placements is %s! If redistribute_inputs is wanted, set "
                                 "redistribute_inputs=True to local_map." % (i, tuple(arg.placements), spec))
            arg = arg.redistribute(placements=list(spec))
    if in_grad_placements is None:
        return arg.to_local()
    grad_spec = in_grad_placements[i]
    if grad_spec is None:
        raise AssertionError("DTensor input %d expects in grad placements but received None!" % i)
    return arg.to_local(grad_placements=list(grad_spec))


def _local_map_wrapped(func, out_placements, in_placements, in_grad_placements, device_mesh, redistribute_inputs,
                       *args, **kwargs):
    flat_args, args_spec = pytree.tree_flatten(args)
    if in_placements is not None and len(in_placements) != len(flat_args):
        raise AssertionError("in_placements length %d does not match the number of input args %d!"
                             % (len(in_placements), len(flat_args)))
    local_args, seen_dtensor = [], False
    for i, arg in enumerate(flat_args):
        if _is_dtensor(arg):
            device_mesh = arg.device_mesh if device_mesh is None else device_mesh
            seen_dtensor = True
            local_args.append(_unwrap(i, arg, in_placements, in_grad_placements, redistribute_inputs))
            continue
        if in_placements is not None and not isinstance(arg, _C.Tensor) and in_placements[i] is not None:
            raise AssertionError("Non-Tensor input %r expects None placements but received %s!"
                                 % (arg, in_placements[i]))
        local_args.append(arg)
    out = func(*pytree.tree_unflatten(local_args, args_spec), **kwargs)
    if not seen_dtensor:
        return out
    flat_out, out_spec = pytree.tree_flatten(out)
    specs = out_placements if isinstance(out_placements, tuple) else (out_placements,)
    if len(flat_out) != len(specs):
        raise AssertionError("local_map requires one PlacementType be provided for each output value, received "
                             "%d out_placements but %d is expected!" % (len(specs), len(flat_out)))
    wrapped = []
    for o, spec in zip(flat_out, specs):
        if isinstance(o, _C.Tensor):
            if o.is_distributed:
                raise AssertionError("torch.Tensor output expected but received a DTensor: %s" % (o.shape,))
            # torch wraps with DTensor.from_local(out, mesh, spec): a None spec there means Replicate everywhere
            placements = [_C.Replicate()] * device_mesh.ndim if spec is None else list(spec)
            wrapped.append(_C.from_local(o, device_mesh, placements, None, None, False, None))
        elif spec is not None:
            raise AssertionError("Non-tensor output %r expects None placements but received %s!" % (o, spec))
        else:
            wrapped.append(o)
    return pytree.tree_unflatten(wrapped, out_spec)
