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
