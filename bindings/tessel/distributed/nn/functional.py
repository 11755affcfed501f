"""tessel.distributed.nn.functional: torch.distributed.nn.functional, the collectives autograd differentiates
(a contrastive loss over every rank's embeddings: ``all_gather`` with gradients). Each returns new tensors (the
inputs are left as they are) and records the adjoint collective for backward, as torch's:

    all_reduce (SUM / AVG)    backward: all_reduce of the gradients with the same op
    all_gather                backward: each rank's slot summed over the ranks (a reduce-scatter)
    reduce_scatter (SUM)      backward: all_gather of the gradient
    broadcast(src)            backward: the sum of every rank's gradient on src, zero elsewhere
    reduce(dst, SUM)          backward: dst's gradient broadcast to every rank
    gather(dst)               backward: dst's gradient of slot r sent to rank r (a scatter)
    scatter(src)              backward: every rank's gradient gathered on src
    all_to_all(_single)       backward: the all_to_all of the gradients with the splits swapped

Every rank must run the backward too (its collectives pair with the other ranks'), as under torch.
"""
from ... import _C
from ...autograd import Function
from .. import ReduceOp, _group

__all__ = ["broadcast", "gather", "scatter", "reduce", "reduce_scatter", "all_gather", "all_to_all",
           "all_to_all_single", "all_reduce"]


def _size(g):
    return g.size() if callable(getattr(g, "size", None)) else g.size


def _rank(g):
    return g.rank() if callable(getattr(g, "rank", None)) else g.rank


def _copy(t):
    return t.detach().clone().contiguous()


def _check_op(op, name, allowed):
    if op not in allowed:
        raise NotImplementedError("tessel.distributed.nn.functional.%s: only %s are differentiable, got %s"
                                  % (name, " and ".join(str(o) for o in allowed), op))


def _all_reduce(t, op, g):
    from .. import all_reduce as _ar
    out = _copy(t)
    _ar(out, op=op, group=g)
    return out


def _all_gather(t, g):
    from .. import all_gather_into_tensor
    n = _size(g)
    src = _copy(t)
    out = _C._full([n * src.shape[0]] + list(src.shape[1:]), 0.0, src.dtype) if src.dim() else None
    if out is None:  # a 0-d tensor: gather it as [1]
        out = _C._full([n], 0.0, src.dtype)
        all_gather_into_tensor(out, src.reshape(1), group=g)
        return tuple(out[i] for i in range(n))
    all_gather_into_tensor(out, src, group=g)
    return tuple(out.chunk(n, 0))


def _reduce_scatter(ts, g):
    from .. import reduce_scatter as _rs
    out = _C._full(list(ts[0].shape), 0.0, ts[0].dtype)
    _rs(out, [_copy(t) for t in ts], op=ReduceOp.SUM, group=g)
    return out


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        return _all_reduce(tensor, op, group)

    @staticmethod
    def backward(ctx, grad):
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad)


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        return _all_gather(tensor, group)

    @staticmethod
    def backward(ctx, *grads):
        return None, _ReduceScatter.apply(ctx.group, *grads)


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, group, *tensors):
        ctx.group = group
        return _reduce_scatter(tensors, group)

    @staticmethod
    def backward(ctx, grad):
        return (None,) + _AllGather.apply(ctx.group, grad)


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, tensor):
        from .. import broadcast as _bc
        ctx.src, ctx.group = src, group
        out = _copy(tensor)
        _bc(out, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        from .. import get_global_rank
        g = _Reduce.apply(ctx.src, ReduceOp.SUM, ctx.group, grad)
        if get_global_rank(ctx.group, _rank(ctx.group)) != ctx.src:
            g = g * 0.0  # the input of a rank other than src does not reach the output
        return None, None, g


class _Reduce(Function):
    @staticmethod
    def forward(ctx, dst, op, group, tensor):
        from .. import reduce as _red
        ctx.dst, ctx.group = dst, group
        out = _copy(tensor)
        _red(out, dst=dst, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, None, _Broadcast.apply(ctx.dst, ctx.group, grad)


class _Gather(Function):
    @staticmethod
    def forward(ctx, dst, group, tensor):
        from .. import get_global_rank
        ctx.dst, ctx.group = dst, group
        slots = _all_gather(tensor, group)
        if get_global_rank(group, _rank(group)) != dst:  # torch's: zeros outside dst
            slots = tuple(s * 0.0 for s in slots)
        return slots

    @staticmethod
    def backward(ctx, *grads):
        return None, None, _Scatter.apply(ctx.dst, ctx.group, *grads)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, group, *tensors):
        from .. import scatter as _sc
        ctx.src, ctx.group = src, group
        out = _C._full(list(tensors[0].shape), 0.0, tensors[0].dtype)
        from .. import get_global_rank
        mine = get_global_rank(group, _rank(group)) == src
        _sc(out, [_copy(t) for t in tensors] if mine else None, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None) + _Gather.apply(ctx.src, ctx.group, grad)


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, group, output_split_sizes, input_split_sizes, tensor):
        from .. import all_to_all_single as _a2a
        ctx.group, ctx.out_splits, ctx.in_splits = group, output_split_sizes, input_split_sizes
        rows = sum(output_split_sizes) if output_split_sizes is not None else tensor.shape[0]
        out = _C._full([rows] + list(tensor.shape[1:]), 0.0, tensor.dtype)
        _a2a(out, _copy(tensor), output_split_sizes, input_split_sizes, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, None, _AllToAllSingle.apply(ctx.group, ctx.in_splits, ctx.out_splits, grad)


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, group, out_shapes, *tensors):
        from .. import all_to_all as _a2a
        ctx.group, ctx.in_shapes = group, [list(t.shape) for t in tensors]
        outs = [_C._full(list(shape), 0.0, tensors[0].dtype) for shape in out_shapes]
        _a2a(outs, [_copy(t) for t in tensors], group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + _AllToAll.apply(ctx.group, ctx.in_shapes, *grads)


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    _check_op(op, "all_reduce", (ReduceOp.SUM, ReduceOp.AVG))
    return _AllReduce.apply(op, _group(group, "all_reduce"), tensor)


def all_gather(tensor, group=None):
    """A tuple of every rank's tensor, in rank order."""
    return _AllGather.apply(_group(group, "all_gather"), tensor)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None):
    """The sum over ranks of every rank's input_list[rank] (output gives the shape; it is not written)."""
    _check_op(op, "reduce_scatter", (ReduceOp.SUM,))
    return _ReduceScatter.apply(_group(group, "reduce_scatter"), *input_list)


def broadcast(tensor, src, group=None):
    return _Broadcast.apply(src, _group(group, "broadcast"), tensor)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None):
    _check_op(op, "reduce", (ReduceOp.SUM,))
    return _Reduce.apply(dst, op, _group(group, "reduce"), tensor)


def gather(tensor, dst=0, group=None):
    """A tuple of every rank's tensor (meaningful on dst, as torch's)."""
    return _Gather.apply(dst, _group(group, "gather"), tensor)


def scatter(tensors, src=0, group=None):
    """This rank's tensors[rank] from src (every rank passes a list of the same shapes)."""
    return _Scatter.apply(src, _group(group, "scatter"), *tensors)


def all_to_all(output_tensor_list, input_tensor_list, group=None):
    """A tuple: slot r holds rank r's input_tensor_list[this rank] (output_tensor_list gives the shapes)."""
    return _AllToAll.apply(_group(group, "all_to_all"), [list(t.shape) for t in output_tensor_list], *input_tensor_list)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    return _AllToAllSingle.apply(_group(group, "all_to_all_single"), output_split_sizes, input_split_sizes, input)
