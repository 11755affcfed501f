"""torch.distributed.tensor._utils: compute_local_shape_and_global_offset, where this rank's piece of a DTensor of
a given global shape and placements sits (checkpoint planners and torchtitan's helpers call it)."""
from ... import _C

__all__ = ["compute_local_shape_and_global_offset"]


def _shard_positions(positions, num_chunks, index, split_factor=None):
    """The global positions mesh coordinate `index` keeps of `positions` (the positions of the dim still held
    before this mesh dim): the index-th of num_chunks torch.chunk pieces; a _StridedShard takes its piece of each
    of split_factor chunks."""
    def piece(run):
        size = -(-len(run) // num_chunks) if run else 0
        return run[min(size * index, len(run)):min(size * (index + 1), len(run))]
    if split_factor is None:
        return piece(positions)
    size = -(-len(positions) // split_factor) if positions else 0
    out = []
    for k in range(split_factor):
        out.extend(piece(positions[min(size * k, len(positions)):min(size * (k + 1), len(positions))]))
    return out


def compute_local_shape_and_global_offset(global_shape, mesh, placements, skip_offset=False):
    """(local_shape, global_offset) of this rank's piece: its shape (uneven shards as torch.chunk splits them, a
    rank past the end holding 0) and where it starts in each global dim (a 0-size piece starts at the dim's
    size). skip_offset: () for the offset. A rank outside the mesh gets ((0,), ()), as torch's."""
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return (0,), ()
    shape = list(global_shape)
    held = {}  # tensor dim -> the global positions this rank still holds along it
    for mesh_dim, p in enumerate(placements):
        if not isinstance(p, (_C.Shard, _C._StridedShard)):
            continue
        if p.dim >= len(shape):
            raise AssertionError("Sharding dim %d greater than tensor ndim %d" % (p.dim, len(shape)))
        positions = held.get(p.dim, range(global_shape[p.dim]))  # (ranges slice without a list)
        split = p.split_factor if isinstance(p, _C._StridedShard) else None
        held[p.dim] = _shard_positions(positions, mesh.size(mesh_dim), coordinate[mesh_dim], split)
        shape[p.dim] = len(held[p.dim])
    if skip_offset:
        return tuple(shape), ()
    offset = [0] * len(shape)
    for dim, positions in held.items():
        offset[dim] = positions[0] if positions else global_shape[dim]
    return tuple(shape), tuple(offset)
