"""tessel.distributed: torch.distributed's process-group functions.

The default process group is per thread: a process under ``tessel_run`` (gloo, torchrun's environment
variables) has one; each rank thread of ``tessel.run_ranks(n, fn)`` (threads backend) has its own. So the
same script body runs unchanged as n processes or as n threads.

    import tessel.distributed as dist
    def main():
        dist.init_process_group("gloo")
        print(dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
    tessel.run_ranks(2, lambda world: main())     # or: tessel_run --nproc-per-node 2 python script.py
"""
import os
import threading

from .. import _C

_local = threading.local()


def run_ranks(world_size, fn):
    """Runs fn(world) on world_size in-process ranks (threads backend); in each rank thread the default
    process group is that rank's world. Rethrows the first failure."""
    def rank_fn(world):
        _local.world, _local.initialized, _local.in_run_ranks = world, False, True
        try:
            fn(world)
        finally:
            _local.world, _local.initialized, _local.mesh, _local.in_run_ranks = None, False, None, False

    _C.run_ranks(world_size, rank_fn)


def _rendezvous_env(init_method, world_size, rank):
    """torch's explicit rendezvous (mp.spawn scripts): rank= and world_size= (and init_method
    "tcp://host:port" or "env://") fill the environment tessel_run would have set."""
    if "WORLD_SIZE" in os.environ or rank < 0 or world_size < 1:
        return
    if init_method not in (None, "env://"):
        if not init_method.startswith("tcp://") or ":" not in init_method[len("tcp://"):]:
            raise ValueError("init_process_group: init_method '%s' is not supported (tcp://host:port or "
                             "env://)" % init_method)
        host, port = init_method[len("tcp://"):].rsplit(":", 1)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise ValueError("init_process_group: rank=%d world_size=%d need MASTER_ADDR and MASTER_PORT in the "
                         "environment (or init_method='tcp://host:port'), as torch's env:// does"
                         % (rank, world_size))
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(world_size))  # one node: split the cores over the ranks


def _init_world():
    """This thread's world group: the run_ranks rank's, else the gloo world from tessel_run's environment."""
    world = getattr(_local, "world", None)
    if world is None:
        if "WORLD_SIZE" not in os.environ:
            raise RuntimeError("init_process_group: no ranks to join: run under tessel_run (it sets RANK, "
                               "WORLD_SIZE, MASTER_ADDR, MASTER_PORT), inside tessel.run_ranks(n, fn), or pass "
                               "rank= and world_size= (tessel.multiprocessing.spawn, as torch's mp.spawn)")
        world = _C.init_process_group()
        _local.world = world
    _local.initialized = True
    return world


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Joins the default process group (backend: "gloo", "cpu:gloo" or None; threads under run_ranks)."""
    if backend not in (None, "gloo", "cpu:gloo", "threads"):
        raise ValueError("init_process_group: backend '%s' is not available from Python (gloo, or threads "
                         "under tessel.run_ranks)" % backend)
    if getattr(_local, "world", None) is None:
        _rendezvous_env(init_method, world_size, rank)
        if timeout is not None and "WORLD_SIZE" in os.environ:  # the gloo rendezvous waits this long too
            os.environ["TESSEL_COMM_TIMEOUT_MS"] = str(max(1, int(timeout.total_seconds() * 1000)))
    world = _init_world()
    if timeout is not None:
        world.timeout = timeout  # every call of the default group, and of groups made from it
    if world_size not in (-1, world.size) or rank not in (-1, world.rank):
        raise ValueError("init_process_group: world_size=%d rank=%d disagree with the launcher's %d / %d"
                         % (world_size, rank, world.size, world.rank))


def is_initialized():
    return bool(getattr(_local, "initialized", False))


def _default_group(op="this call"):
    world = getattr(_local, "world", None)
    if world is None or not is_initialized():
        raise RuntimeError("%s: the default process group is not initialized (call "
                           "tessel.distributed.init_process_group() first)" % op)
    return world


def get_rank(group=None):
    return (group or _default_group("get_rank")).rank


def get_world_size(group=None):
    return (group or _default_group("get_world_size")).size


def barrier(group=None, async_op=False, device_ids=None):
    (group or _default_group("barrier")).barrier()


def destroy_process_group(group=None):
    """Leaves the default group: a gloo world is released; a run_ranks rank keeps its thread's world
    (the threads backend ends with run_ranks), so init_process_group may be called again."""
    _local.initialized, _local.mesh = False, None
    if not getattr(_local, "in_run_ranks", False):
        _local.world = None


ProcessGroup = _C.ProcessGroup
ReduceOp = _C.ReduceOp
Work = _C.Work


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """In place over the group (default: the default group); async_op returns a Work to wait on."""
    return (group or _default_group("all_reduce")).all_reduce(tensor, op, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return (group or _default_group("all_gather_into_tensor")).all_gather_into_tensor(output_tensor, input_tensor,
                                                                                     async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    return (group or _default_group("reduce_scatter_tensor")).reduce_scatter_tensor(output, input, op, async_op)


def get_global_rank(group, group_rank):
    """The global rank of `group`'s member `group_rank` (torch.distributed.get_global_rank)."""
    ranks = group.global_ranks
    if not 0 <= group_rank < len(ranks):
        raise ValueError("group rank %d is not in the group (size %d)" % (group_rank, len(ranks)))
    return ranks[group_rank]


def get_group_rank(group, global_rank):
    """`global_rank`'s rank within `group` (torch.distributed.get_group_rank)."""
    ranks = list(group.global_ranks)
    if global_rank not in ranks:
        raise ValueError("global rank %d is not part of the group (global ranks %s)" % (global_rank, ranks))
    return ranks.index(global_rank)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """As torch: src is a global rank (on any group); group_src a rank within the group."""
    g = group or _default_group("broadcast")
    if (src is None) == (group_src is None):
        raise ValueError("broadcast: pass exactly one of src (a global rank) and group_src (a rank of the group)")
    return g.broadcast(tensor, get_group_rank(g, src) if group_src is None else group_src, async_op)

from . import checkpoint, device_mesh, fsdp, pipelining, tensor  # noqa: E402,F401 (torch.distributed's subpackages)
