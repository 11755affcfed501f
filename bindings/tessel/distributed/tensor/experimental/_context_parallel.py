"""Context parallelism (torch.distributed.tensor.experimental.context_parallel): the sequence dimension of a
batch split over a 1-D mesh, attention computed across the shards.

    with context_parallel(cp_mesh, buffers=[idx, targets, model.pos], buffer_seq_dims=[1, 1, 0]):
        loss = model(idx, targets)          # every F.scaled_dot_product_attention inside is ring attention
        loss.backward()

Inside the context each buffer holds this rank's shard (in place, Tensor.set_: a module's buffer and the
caller's tensor alike) and is restored at exit unless listed in no_restore_buffers. With load balancing on
(torch's default) the sequence is cut into 2·n chunks and rank r holds chunks r and 2n-1-r (head-tail), so
every rank does the same causal work; off, rank r holds the r-th of n contiguous pieces.

Attention: F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...) on the local shards of [..., S, D]
tensors (seq dim -2) runs the fused kernels (core/ops/attention.h) per block of keys and merges the blocks by
their log-sum-exps, so the rows are exact, not approximate; under causal masking a key chunk after the query's
is skipped, an earlier one is unmasked, its own is causal. How k and v travel is set_rotate_method's:
"allgather" (torch's default) gathers every rank's k and v once (O(S) per rank; backward reduce-scatters their
gradients back), "alltoall" (torch's name for the ring) passes each rank's block to the next rank n - 1 times
while computing on the current one (O(S / n) per rank; backward passes the key/value gradients along with their
block and home at the end). Not under the context: attn_mask, dropout (NotImplementedError); enable_gqa repeats
each key / value head to its query heads. Code that bound scaled_dot_product_attention by name before entering
(``from tessel.nn.functional import scaled_dot_product_attention``) is not redirected;
``F.scaled_dot_product_attention`` is. The sequence's length is the first buffer's: every buffer gives this
rank's positions of it (a longer rotary table included), and a length that does not divide into 2·n chunks is
cut into n contiguous pieces instead (torch's fallback).
"""
import contextlib
import math
import threading

from .... import _C
from ....autograd import Function

__all__ = ["context_parallel", "context_parallel_unshard", "set_rotate_method"]


class _Options:
    enable_load_balance = True
    rotate_method = "allgather"


_cp_options = _Options()
_active = threading.local()  # per thread (a run_ranks rank): the mesh group of the innermost context


def set_rotate_method(rotate_method):
    """torch's: how k and v travel, "allgather" or "alltoall" (the ring); see the module docstring."""
    if rotate_method not in ("allgather", "alltoall"):
        raise NotImplementedError("set_rotate_method: 'allgather' or 'alltoall', got %r" % (rotate_method,))
    _cp_options.rotate_method = rotate_method


def _group_of(mesh):
    if mesh.ndim != 1:
        raise ValueError("context_parallel: expected a 1-D mesh (the cp axis), got %d-D %s" % (mesh.ndim, mesh))
    return mesh.get_group()


def _balanced(seq_len, n):
    """torch's rule: head-tail load balancing when enabled and the sequence divides into 2·n chunks; otherwise
    (or off) n contiguous pieces."""
    return _cp_options.enable_load_balance and seq_len % (2 * n) == 0


def _chunk_order(n, balanced=None):
    """Global chunk indices held by each rank, in the order of its local rows (balanced: the innermost context's
    choice by default)."""
    if balanced is None:
        balanced = getattr(_active, "balanced", _cp_options.enable_load_balance)
    if balanced:
        return [[r, 2 * n - 1 - r] for r in range(n)]
    return [[r] for r in range(n)]


def _shard(t, dim, rank, n, seq_len, balanced):
    """This rank's rows of t along dim (a new contiguous tensor): the positions of a seq_len-long sequence it
    holds (torch builds them from the first buffer's length and takes them from every buffer, so a longer
    buffer, a rotary table past the sequence, gives the positions of the sequence's rows)."""
    order = _chunk_order(n, balanced)[rank]
    if seq_len % (n * len(order)):
        raise ValueError("context_parallel: sequence dim %d of size %d must divide into %d pieces (%d ranks)"
                         % (dim, seq_len, n, n))
    if t.shape[dim] < seq_len:
        raise ValueError("context_parallel: a buffer's sequence dim %d has %d rows, fewer than the sequence's %d"
                         % (dim, t.shape[dim], seq_len))
    length = seq_len // (n * len(order))
    pieces = [t.narrow(dim, c * length, length) for c in order]
    from .... import cat
    return cat(pieces, dim).contiguous()


def _unshard(t, dim, group):
    """The full tensor from every rank's shard of t along dim (one all_gather)."""
    from .... import cat
    from ... import all_gather
    n = group.size
    gathered = [_C._full(list(t.shape), 0.0, t.dtype) for _ in range(n)]
    all_gather(gathered, t.contiguous(), group=group)
    # inside a context its choice; after it (context_parallel_unshard) torch's rule on the whole length
    order = _chunk_order(n, getattr(_active, "balanced", None) if getattr(_active, "group", None) is not None
                         else _balanced(t.shape[dim] * n, n))
    per = len(order[0])
    length = t.shape[dim] // per
    by_chunk = {}
    for r in range(n):
        for i, c in enumerate(order[r]):
            by_chunk[c] = gathered[r].narrow(dim, i * length, length)
    return cat([by_chunk[c] for c in range(n * per)], dim)


def context_parallel_unshard(mesh, buffers, seq_dims):
    """torch's: the full tensors of sharded buffers (collective over the mesh); inverse of the context's split."""
    group = _group_of(mesh)
    return [_unshard(b, d, group) for b, d in zip(buffers, seq_dims)]


def _merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions over disjoint key blocks as one: weights exp(lse_x - lse)."""
    m = _C._functional.where(lse_a > lse_b, lse_a, lse_b)
    lse = m + ((lse_a - m).exp() + (lse_b - m).exp()).log()
    out = out_a.float() * (lse_a - lse).exp().unsqueeze(-1) + out_b.float() * (lse_b - lse).exp().unsqueeze(-1)
    return out.to(out_a.dtype), lse


def _blocks(n, rank, length, causal):
    """Per local chunk i (rows [i·L, (i+1)·L) of q): the key blocks as (key start, key end, causal) in global
    sequence positions, for a sequence of n·chunks·L keys."""
    order = _chunk_order(n)[rank]
    total = length * n * len(order)
    if not causal:
        return [[(0, total, False)] for _ in order]
    out = []
    for c in order:
        blocks = [(0, c * length, False)] if c > 0 else []
        out.append(blocks + [(c * length, (c + 1) * length, True)])
    return out


def _rows(t, i, length, dim=-2):
    """Rows [i·length, (i+1)·length) of t along the sequence (dim -2; an lse's is dim -1)."""
    return t.narrow(dim, i * length, length)


def _block_forward(state, i, qi, keys, values, causal, scale):
    """Query chunk i attends to one block of keys; the result folds into state[i] = (out, lse)."""
    o, l = _C._functional._sdpa_forward(qi, keys, values, causal, scale)
    state[i] = (o, l) if state[i] is None else _merge(*state[i], o, l)


def _block_backward(saved, i, length, keys, values, dkeys, dvalues, dq, causal, scale):
    """One block's share of the gradients of query chunk i: into dq's rows of the chunk, dkeys and dvalues (views
    of the block). `saved` is (grad, q, out, lse) of the whole shard; the merged out and lse make it exact."""
    grad, q, out = (_rows(t, i, length) for t in saved[:3])
    lse = _rows(saved[3], i, length, dim=-1)
    dqb, dkb, dvb = _C._functional._sdpa_backward(grad, q, keys, values, out, lse, causal, scale)
    _rows(dq, i, length).add_(dqb)
    dkeys.add_(dkb)
    dvalues.add_(dvb)


def _kind(q_chunk, k_chunk, causal):
    """How a query chunk sees a key chunk: None (all masked), False (unmasked) or True (causal, the diagonal)."""
    if not causal or k_chunk < q_chunk:
        return False
    return True if k_chunk == q_chunk else None


def _start_rotate(tensors, group):
    """Posts the ring step: `tensors` to the next rank, the previous rank's into new buffers (same shapes). One
    batch_isend_irecv, so the sends and receives are in flight together (one by one, a ring waits in a cycle)."""
    from ... import P2POp, batch_isend_irecv, irecv, isend
    n, r = group.size, group.rank
    incoming = [_C._full(list(t.shape), 0.0, t.dtype) for t in tensors]
    sent = [t.contiguous() for t in tensors]
    ops = [P2POp(isend, t, group=group, group_peer=(r + 1) % n) for t in sent]
    ops += [P2POp(irecv, t, group=group, group_peer=(r - 1) % n) for t in incoming]
    works = batch_isend_irecv(ops)
    return works[:1], sent, incoming  # one Work per group's batch


def _finish_rotate(posted):
    works, _, incoming = posted
    for w in works:
        w.wait()
    return incoming


class _RingRotateAttention(Function):
    """The "alltoall" rotate method: k/v blocks go round the ring (see the module docstring)."""

    @staticmethod
    def forward(ctx, group, causal, scale, q, k, v):
        from .... import cat
        n, r = group.size, group.rank
        order = _chunk_order(n)
        length = q.shape[-2] // len(order[r])
        state = [None] * len(order[r])
        kb, vb = k, v
        for s in range(n):
            owner = (r - s) % n
            posted = _start_rotate([kb, vb], group) if s < n - 1 else None
            for i, c in enumerate(order[r]):
                for j, kc in enumerate(order[owner]):
                    kind = _kind(c, kc, causal)
                    if kind is not None:
                        _block_forward(state, i, _rows(q, i, length), _rows(kb, j, length), _rows(vb, j, length),
                                       kind, scale)
            if posted is not None:
                kb, vb = _finish_rotate(posted)
        out, lse = cat([st[0] for st in state], -2), cat([st[1] for st in state], -1)
        ctx.group, ctx.causal, ctx.scale, ctx.length, ctx.order = group, causal, scale, length, order
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        from .... import zeros_like
        q, k, v, out, lse = ctx.saved_tensors
        group, length = ctx.group, ctx.length
        n, r = group.size, group.rank
        order = ctx.order  # the context's split (the backward may run after it exits)
        saved = (grad.contiguous(), q, out, lse)
        dq = zeros_like(q)
        kb, vb, dkb, dvb = k, v, zeros_like(k), zeros_like(v)
        for s in range(n):
            owner = (r - s) % n
            posted = _start_rotate([kb, vb], group) if s < n - 1 else None
            for i, c in enumerate(order[r]):
                for j, kc in enumerate(order[owner]):
                    kind = _kind(c, kc, ctx.causal)
                    if kind is not None:
                        _block_backward(saved, i, length, _rows(kb, j, length), _rows(vb, j, length),
                                        _rows(dkb, j, length), _rows(dvb, j, length), dq, kind, ctx.scale)
            if n > 1:  # the gradients travel with their block; after the last step they go home
                dkb, dvb = _finish_rotate(_start_rotate([dkb, dvb], group))
            if posted is not None:
                kb, vb = _finish_rotate(posted)
        return None, None, None, dq, dkb, dvb


class _RingAttention(Function):
    @staticmethod
    def forward(ctx, group, causal, scale, q, k, v):
        from .... import cat
        n, rank = group.size, group.rank
        per = len(_chunk_order(n)[0])
        length = q.shape[-2] // per
        keys, values = _unshard(k, -2, group), _unshard(v, -2, group)
        plan = _blocks(n, rank, length, causal)
        state = [None] * len(plan)
        for i, blocks in enumerate(plan):
            for start, end, is_causal in blocks:
                _block_forward(state, i, _rows(q, i, length), keys.narrow(-2, start, end - start),
                               values.narrow(-2, start, end - start), is_causal, scale)
        out, lse = cat([st[0] for st in state], -2), cat([st[1] for st in state], -1)
        ctx.group, ctx.plan, ctx.length, ctx.scale, ctx.order = group, plan, length, scale, _chunk_order(n)
        ctx.save_for_backward(q, keys, values, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        from .... import cat, zeros_like
        from ... import reduce_scatter_tensor
        q, keys, values, out, lse = ctx.saved_tensors
        length, group = ctx.length, ctx.group
        saved = (grad.contiguous(), q, out, lse)
        dq, dkeys, dvalues = zeros_like(q), zeros_like(keys), zeros_like(values)
        for i, blocks in enumerate(ctx.plan):
            for start, end, is_causal in blocks:
                block = lambda t: t.narrow(-2, start, end - start)  # noqa: E731
                _block_backward(saved, i, length, block(keys), block(values), block(dkeys), block(dvalues), dq,
                                is_causal, ctx.scale)
        n = group.size
        order = ctx.order  # the context's split (the backward may run after it exits)
        chunk = length

        def back_to_owners(full):
            # Rank-major: rank r's chunks in its local order, then reduce-scatter sums every rank's part.
            parts = [cat([full.narrow(-2, c * chunk, chunk) for c in order[r]], -2) for r in range(n)]
            stacked = cat([p.unsqueeze(0) for p in parts], 0).contiguous()
            mine = _C._full(list(stacked.shape[1:]), 0.0, full.dtype)
            reduce_scatter_tensor(mine.unsqueeze(0), stacked, group=group)
            return mine

        return None, None, None, dq, back_to_owners(dkeys), back_to_owners(dvalues)


def _ring_sdpa(original):
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                     scale=None, enable_gqa=False):  # (torch's keyword-only scale and enable_gqa)
        group = getattr(_active, "group", None)
        if group is None:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        if attn_mask is not None or dropout_p > 0.0:
            raise NotImplementedError("scaled_dot_product_attention under context_parallel: attn_mask and dropout_p "
                                      "are not supported (is_causal, scale and enable_gqa are)")
        if enable_gqa and key.dim() >= 3 and key.shape[-3] != query.shape[-3]:  # each key / value head serves a
            groups = query.shape[-3] // key.shape[-3]  # group of query heads: repeated to them, as SDPA's GQA does
            key, value = key.repeat_interleave(groups, dim=-3), value.repeat_interleave(groups, dim=-3)
        if query.shape[-2] != key.shape[-2]:
            raise ValueError("scaled_dot_product_attention under context_parallel: query and key shards need the "
                             "same length, got %s and %s" % (list(query.shape), list(key.shape)))
        s = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        ring = _RingRotateAttention if _cp_options.rotate_method == "alltoall" else _RingAttention
        return ring.apply(group, bool(is_causal), float(s), query, key, value)
    scaled_dot_product_attention.__doc__ = original.__doc__
    scaled_dot_product_attention._tessel_original = original
    return scaled_dot_product_attention


def _install():
    from ....nn import functional as F
    if not hasattr(F.scaled_dot_product_attention, "_tessel_original"):
        F.scaled_dot_product_attention = _ring_sdpa(F.scaled_dot_product_attention)


@contextlib.contextmanager
def context_parallel(mesh, *, buffers=None, buffer_seq_dims=None, no_restore_buffers=None):
    """torch's context_parallel: see the module docstring."""
    group = _group_of(mesh)
    buffers = list(buffers or [])
    seq_dims = list(buffer_seq_dims or [])
    if len(seq_dims) != len(buffers):
        raise ValueError("context_parallel: %d buffers but %d buffer_seq_dims" % (len(buffers), len(seq_dims)))
    keep = {id(b) for b in (no_restore_buffers or [])}
    if any(not any(id(b) == k for b in buffers) for k in keep):
        raise ValueError("context_parallel: no_restore_buffers must be a subset of buffers")
    _install()
    n = group.size
    seq_len = buffers[0].shape[seq_dims[0] % buffers[0].ndim] if buffers else 0
    balanced = _balanced(seq_len, n)
    originals, seen = [], set()
    with _C._GradMode(False):
        for b, d in zip(buffers, seq_dims):
            if id(b) in seen:  # listed twice: sharded once, restored once
                continue
            seen.add(id(b))
            originals.append((b, b.detach()))  # the full tensor, kept alive for the restore
            b.set_(_shard(b, d % b.ndim, group.rank, n, seq_len, balanced))
    outer = (getattr(_active, "group", None), getattr(_active, "balanced", None))
    _active.group, _active.balanced = group, balanced
    try:
        yield
    finally:
        _active.group, _active.balanced = outer
        if outer[1] is None:
            del _active.balanced
        for b, full in originals:
            if id(b) not in keep:
                b.set_(full)
