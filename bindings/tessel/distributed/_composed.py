"""torch.distributed's collectives that tessel composes of one async primitive and local copies: the list forms
all_gather, reduce_scatter and all_to_all, gather, scatter, reduce and gather_single. Each issues its primitive
(all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, broadcast, all_reduce) when called; its
copy-outs run when the Work is waited on (async_op=True: the call returns at once, as torch's, and other groups
may run before the wait), or before the call returns. Split from distributed/__init__.py by concept;
tessel.distributed re-exports every name.

    outs = [tessel.zeros(2) for _ in range(dist.get_world_size())]
    w = dist.all_gather(outs, x, async_op=True)
    w.wait()                                   # outs[r] is rank r's x
"""
from .. import _C
from .._tensor import empty, zeros
from . import (ReduceOp, _BitwiseOp, _bitwise_all_reduce, _bitwise_reduce_scatter, _collective, _group, _group_peer,
               _issue, all_gather_into_tensor)


def _check_parts(op, what, parts, like):
    """Every tensor of a list collective's list has `like`'s shape and dtype, as torch's gloo requires (a list
    entry of another shape with as many elements was reshaped, one of another dtype cast: silently)."""
    for i, t in enumerate(parts):
        if tuple(t.shape) != tuple(like.shape) or t.dtype != like.dtype:
            raise _C.InvalidArgumentError(  # a ValueError (torch's for a dtype) and a RuntimeError (for a shape)
                "%s: %s[%d] is %s %s, but the collective's tensor is %s %s (every entry must have its "
                "shape and dtype)" % (op, what, i, str(t.dtype).rsplit(".", 1)[-1], list(t.shape),
                                      str(like.dtype).rsplit(".", 1)[-1], list(like.shape)))


def _gathered(g, tensor):
    """(the buffer of every rank's tensor along dim 0, rows per rank, the in-flight all_gather_into_tensor):
    gathered with its shape, not flattened, so [2, 3] on one rank against [3, 2] on another raises instead of
    reinterpreting the same bytes."""
    piece = tensor.reshape(1) if tensor.dim() == 0 else tensor.contiguous()
    rows = piece.shape[0]
    flat = empty((g.size * rows,) + tuple(piece.shape[1:]), dtype=tensor.dtype)
    return flat, rows, g.all_gather_into_tensor(flat, piece, True)


def _after_exchange(error, work, async_op):
    """Raises `error` (an argument only this rank got wrong, found once the exchange was issued, so the peers are
    not left waiting for this rank): after the exchange, or at once with async_op (it stays in flight)."""
    if not async_op:
        work.wait()
    raise error


@_collective
def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] = rank r's tensor (equal shapes), through one all_gather_into_tensor."""
    g = _group(group, "all_gather")
    if len(tensor_list) != g.size:
        raise ValueError("all_gather: tensor_list has %d tensors for a group of %d ranks" % (len(tensor_list), g.size))
    _check_parts("all_gather", "tensor_list", tensor_list, tensor)
    flat, rows, work = _gathered(g, tensor)

    def copy_out():
        for r, out in enumerate(tensor_list):
            out.copy_(flat[r * rows:(r + 1) * rows].reshape(tuple(tensor.shape)))
    return _issue(work, tensor_list, copy_out, async_op)


@_collective
def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank dst's gather_list[r] = rank r's tensor; other ranks pass no list (torch's ValueErrors for a list
    missing on the destination or given elsewhere, raised once the exchange was issued)."""
    g = _group(group, "gather")
    root = _group_peer(g, 0 if dst is None and group_dst is None else dst, group_dst, "gather", "dst")
    flat, rows, work = _gathered(g, tensor)
    if g.rank != root and gather_list:
        _after_exchange(ValueError("Argument ``gather_list`` must NOT be specified on non-destination ranks."),
                        work, async_op)
    if g.rank == root and not gather_list:
        _after_exchange(ValueError("Argument ``gather_list`` must be specified on destination rank."), work, async_op)
    if g.rank == root and len(gather_list) != g.size:
        _after_exchange(ValueError("gather: the destination needs a gather_list of %d tensors, got %d"
                                   % (g.size, len(gather_list))), work, async_op)

    def copy_out():
        for r, out in enumerate(gather_list if g.rank == root else []):
            out.copy_(flat[r * rows:(r + 1) * rows].reshape(tuple(tensor.shape)))
    return _issue(work, gather_list or [], copy_out, async_op)


@_collective
def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """tensor = rank src's scatter_list[r] on rank r (one broadcast of the stacked list, with a last element that
    says whether the source's list was valid: a bad list raises on every rank at once, not only on the source while
    the others wait out the group's timeout). A scatter_list on another rank is torch's ValueError, raised once
    the exchange was issued."""
    g = _group(group, "scatter")
    root = _group_peer(g, 0 if src is None and group_src is None else src, group_src, "scatter", "src")
    n = tensor.numel()
    flat = zeros(g.size * n + 1, dtype=tensor.dtype)
    error = None
    if g.rank == root:
        try:
            if not scatter_list:
                raise ValueError("Argument ``scatter_list`` must be specified on source rank.")
            if len(scatter_list) != g.size:
                raise ValueError("scatter: the source needs a scatter_list of %d tensors, got %d"
                                 % (g.size, len(scatter_list)))
            _check_parts("scatter", "scatter_list", scatter_list, tensor)
            for r, part in enumerate(scatter_list):
                flat[r * n:(r + 1) * n].copy_(part.reshape(-1))
            flat[-1] = 1
        except Exception as e:  # noqa: BLE001 (raised below, after the peers learnt of it)
            error = e
    elif scatter_list:
        error = ValueError("Argument ``scatter_list`` must NOT be specified on non-source ranks.")
    work = g.broadcast(flat, root, True)
    if error is not None:
        _after_exchange(error, work, async_op)

    def copy_out():
        if not bool(flat[-1]):
            raise RuntimeError("scatter: the source rank %d's scatter_list was refused (its error names why)" % root)
        tensor.copy_(flat[g.rank * n:(g.rank + 1) * n].view(*tensor.shape))
    return _issue(work, [tensor], copy_out, async_op)


@_collective
def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Rank dst's tensor becomes the reduction; the others' are left as they were."""
    g = _group(group, "reduce")
    root = _group_peer(g, dst, group_dst, "reduce", "dst")
    result = tensor.clone()
    if isinstance(op, _BitwiseOp):
        work = _bitwise_all_reduce(result, op, g, True)
    else:
        work = g.all_reduce(result, op, True)

    def copy_out():
        if g.rank == root:
            tensor.copy_(result)
    return _issue(work, [tensor], copy_out, async_op)


@_collective
def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output = the reduction over ranks of their input_list[rank] (list form of reduce_scatter_tensor)."""
    from .. import cat
    g = _group(group, "reduce_scatter")
    if len(input_list) != g.size:
        raise ValueError("reduce_scatter: input_list has %d tensors for a group of %d ranks"
                         % (len(input_list), g.size))
    _check_parts("reduce_scatter", "input_list", input_list, output)
    flat = cat([t.reshape(-1) for t in input_list], 0).contiguous()
    if isinstance(op, _BitwiseOp):
        return _bitwise_reduce_scatter(output, flat, op, g, async_op)
    out = empty(output.numel(), dtype=output.dtype)
    work = g.reduce_scatter_tensor(out, flat, op, True)
    return _issue(work, [output], lambda: output.copy_(out.view(*output.shape)), async_op)


@_collective
def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """output_tensor_list[r] = rank r's input_tensor_list[this rank] (list form of all_to_all_single; the
    tensors are split along dim 0 of their concatenation)."""
    from .. import cat
    g = _group(group, "all_to_all")
    if len(input_tensor_list) != g.size or len(output_tensor_list) != g.size:
        raise ValueError("all_to_all: lists of %d and %d tensors for a group of %d ranks"
                         % (len(output_tensor_list), len(input_tensor_list), g.size))
    # Each tensor flattened, split by element counts: any per-peer shapes, empty and 0-d ones included.
    flat_in = cat([t.reshape(-1) for t in input_tensor_list], 0).contiguous()
    out_sizes = [t.numel() for t in output_tensor_list]
    flat_out = empty(sum(out_sizes), dtype=flat_in.dtype)
    work = g.all_to_all_single(flat_out, flat_in, out_sizes, [t.numel() for t in input_tensor_list], True)

    def copy_out():
        start = 0
        for t, n in zip(output_tensor_list, out_sizes):
            t.copy_(flat_out[start:start + n].reshape(*t.shape))
            start += n
    return _issue(work, output_tensor_list, copy_out, async_op)


def gather_single(tensor, gather_tensor=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank dst's gather_tensor (every rank's tensor concatenated or stacked on dim 0) from one all-gather; other
    ranks pass None."""
    g = _group(group, "gather_single")
    root = _group_peer(g, 0 if dst is None and group_dst is None else dst, group_dst, "gather_single", "dst")
    gathered = empty(g.size * tensor.shape[0] if tensor.dim() else g.size, *tensor.shape[1:], dtype=tensor.dtype)
    work = all_gather_into_tensor(gathered, tensor.contiguous(), group=g, async_op=True)
    if g.rank == root and (gather_tensor is None or gather_tensor.numel() != gathered.numel()):
        _after_exchange(ValueError(
            "gather_single: the destination needs a gather_tensor of %d elements (%d ranks x %s), got %s"
            % (gathered.numel(), g.size, tuple(tensor.shape),
               None if gather_tensor is None else tuple(gather_tensor.shape))), work, async_op)

    def copy_out():
        if g.rank == root:
            gather_tensor.copy_(gathered.reshape(gather_tensor.shape))
    return _issue(work, [gather_tensor] if gather_tensor is not None else [], copy_out, async_op)


gather_into_tensor = gather_single  # torch's older name for it
