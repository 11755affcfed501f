"""tessel/_tensor.py's helpers for creating tensors like a DTensor (zeros_like / rand_like of a sharded parameter)
and for running host-computed elementwise ops on DTensor pieces, and the layouts of indexing's helpers
(_internal_index, _indices_like, _whole_rows) (moved out of _tensor.py to keep it under 1,000 lines; _tensor.py
re-exports them)."""
import builtins

import numpy as np

from . import _C

Tensor = _C.Tensor


def _like_placements(t):
    """torch's create_like_strategy for a DTensor t: its placements, Partial ones made Replicate (the new
    values do not depend on t's, so there is nothing to sum)."""
    return [_C.Replicate() if isinstance(p, _C.Partial) else p for p in t.placements]


def local_view(x, view, dim_map, shape):
    """A view op on DTensor x computed on each rank's local piece, as a DTensor over that piece's memory, so
    writes through it reach x (x.diagonal().fill_(v) was lost: the DTensor form copied): view(local) must not
    mix elements across x's sharded dims; dim_map maps each of x's dims to the result's (None: consumed, which
    must not be sharded). None when a placement does not allow it (a shard of a consumed dim, a strided shard):
    the caller takes the copying path then."""
    placements = []
    for p in x.placements:
        if p.is_shard():
            if type(p) is not _C.Shard or dim_map.get(p.dim) is None:
                return None
            placements.append(_C.Shard(dim_map[p.dim]))
        else:
            placements.append(p)
    local = view(x.to_local())
    return _C.from_local(local, x.device_mesh, placements, list(shape), _contiguous_strides(shape), False)


def _contiguous_strides(shape):
    """The row-major strides of `shape` (a DTensor's global strides when from_local is told its shape)."""
    strides, n = [], 1
    for size in reversed(tuple(shape)):
        strides.insert(0, n)
        n *= size
    return strides


def _on_pieces(fn, *args):
    """fn, an elementwise op computed on the host for dense tensors (pow with a tensor exponent, bit shifts, the
    special functions, integer division), applied to DTensor operands: each DTensor laid out as the first one
    (its Partial made Replicate; every one Replicate when their shapes differ, as broadcasting would not line
    the pieces up), numbers and 0-d dense tensors as they are; fn runs on each rank's pieces and its result (or
    each of a tuple of results) becomes a DTensor of that layout (to_local / from_local carry the gradients)."""
    dts = [a for a in args if isinstance(a, Tensor) and a.is_distributed]
    lead = dts[0]
    mesh = lead.device_mesh
    for a in args:
        if isinstance(a, Tensor) and not a.is_distributed and a.dim() > 0:
            raise RuntimeError("got mixed DTensor and dense tensor inputs: a dense tensor of shape %s next to a "
                               "DTensor of shape %s; distribute it first (only 0-d dense tensors are accepted)"
                               % (tuple(a.shape), tuple(lead.shape)))
        if isinstance(a, Tensor) and a.is_distributed and a.device_mesh != mesh:
            raise RuntimeError("all DTensor operands of one op must share a mesh: %s and %s" % (mesh, a.device_mesh))
    if builtins.all(tuple(d.shape) == tuple(lead.shape) for d in dts):
        placements = _like_placements(lead)
    else:
        placements = [_C.Replicate()] * mesh.ndim
    pieces = [a.redistribute(mesh, placements).to_local() if isinstance(a, Tensor) and a.is_distributed else a
              for a in args]
    shape = list(np.broadcast_shapes(*[tuple(a.shape) for a in args if isinstance(a, Tensor)]))
    out = fn(*pieces)

    def wrap(local):
        return _C.from_local(local, mesh, placements, shape, _contiguous_strides(shape), False)
    return tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)


def _distributed_like(t, make_local, dtype, requires_grad, keep_partial=False):
    """A DTensor of t's global shape on t's mesh (_like_placements), each rank's piece make_local(its shape,
    dtype): zeros_like(param) on a fully_shard parameter is a DTensor shard, as torch's. keep_partial: t's
    placements as they are, Partial included (torch's empty_like: its values are unspecified anyway)."""
    local = make_local(list(t.to_local().shape), dtype or t.dtype)
    placements = list(t.placements) if keep_partial else _like_placements(t)
    out = _C.from_local(local, t.device_mesh, placements, list(t.shape), list(t.stride()), False)
    return out.requires_grad_(True) if requires_grad else out


def _random_like(t, make_full, dtype, requires_grad):
    """rand_like / randn_like of a DTensor: one full draw on rank 0 distributed to t's placements (ranks that
    share a piece must hold the same values)."""
    full_values = make_full(list(t.shape), dtype or t.dtype)
    out = _C.distribute_tensor(full_values, t.device_mesh, _like_placements(t), 0)
    return out.requires_grad_(True) if requires_grad else out


def _internal_index(x, t):
    """An index or mask tensor that an op on x builds for itself (every rank builds the same one): on a
    DTensor x, replicated on x's mesh so that the op's DTensor rule applies (flip, roll, sort, tril, x[[0, 2]]
    work on DTensors); else t itself."""
    if not x.is_distributed:
        return t
    return _C.from_local(t, x.device_mesh, [_C.Replicate()] * x.device_mesh.ndim, list(t.shape), None, False)


def _indices_like(x, order, dim=None):
    """The int64 indices (numpy, the full tensor's) that sort / topk / argsort of x return: a DTensor laid out
    as x's values are (_like_placements) when x is one, as torch's; dim: the dim they order, whole on every
    rank (Replicate where x shards it, as torch's sort strategy)."""
    out = _C._from_numpy(order)
    if not x.is_distributed:
        return out
    placements = _like_placements(x)
    if dim is not None:
        d = dim % x.ndim
        placements = [_C.Replicate() if isinstance(p, (_C.Shard, _C._StridedShard)) and p.dim % x.ndim == d
                      else p for p in placements]
    return _C.distribute_tensor(out, x.device_mesh, placements, None)


def _whole_rows(x):
    """DTensor x with its dim 0 made whole on every rank (Replicate on the mesh dims that shard it): indexing,
    sort, topk, flip, roll, index_select and gather along a sharded dim come back Replicate, as torch's
    strategies replicate the indexed dim. (_tensor._gather_rows's embedding op on a row-sharded table gives each
    rank's rows and zeros elsewhere, a Partial sum: that is F.embedding's row-wise layout, not indexing's.)"""
    want = [_C.Replicate() if isinstance(p, (_C.Shard, _C._StridedShard)) and p.dim % x.ndim == 0 else p
            for p in x.placements]
    return x if want == list(x.placements) else x.redistribute(x.device_mesh, want)
