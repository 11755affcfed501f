"""Shared by the multi-rank tests: each rank thread of run_ranks in its own default process group."""
import tessel
import tessel.distributed as dist


def on_ranks(n, fn):
    """{rank: fn(rank)} from n rank threads, each inside init_process_group / destroy_process_group."""
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        try:
            out[world.rank] = fn(world.rank)
        finally:
            dist.destroy_process_group()

    tessel.run_ranks(n, rank_fn)
    return out


def placed(full, mesh, placements):
    """A DTensor of the numpy array `full` (its dtype kept) in `placements` on `mesh`; a Partial axis holds the value on
    its coordinate 0 and zeros elsewhere (torch's from_local convention for a Partial that sums to `full`)."""
    from tessel.distributed.tensor import DTensor, Replicate, distribute_tensor
    base = [Replicate() if p.is_partial() else p for p in placements]
    local = distribute_tensor(tessel.tensor(full), mesh, base).to_local()
    coord = mesh.get_coordinate()
    if any(p.is_partial() and coord[a] != 0 for a, p in enumerate(placements)):
        local = local * 0
    return DTensor.from_local(local, mesh, list(placements), shape=full.shape, stride=None)
