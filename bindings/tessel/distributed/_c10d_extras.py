"""torch.distributed's smaller names kept out of the package's __init__: the deprecated coalesced
collectives, the debug levels, supports_complex, default_pg_timeout and the availability checks of backends
tessel does not have. tessel.distributed re-exports every one."""
import datetime
import enum
import os
import warnings

from . import ProcessGroup, ReduceOp, _local, all_gather, all_reduce, broadcast, get_backend, get_world_size


def is_ucc_available():
    return False


def is_xccl_available():
    return False


# The group timeout tessel uses when init_process_group / new_group get none (comm/process_group.h's
# kDefaultTimeout; TESSEL_COMM_TIMEOUT_MS overrides it): torch's name, tessel's value (torch's is 30 min).
default_pg_timeout = datetime.timedelta(seconds=300)


def supports_complex(reduceOp):
    """torch's: whether `reduceOp` is defined on complex tensors (not MAX, MIN or PRODUCT)."""
    return reduceOp not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)


class DebugLevel(enum.Enum):
    """torch's TORCH_DISTRIBUTED_DEBUG levels. tessel's checks do not depend on it: every collective's
    arguments are compared across ranks (DETAIL's consistency check) and every failure names the call, group
    and rank, at any level."""
    OFF = 0
    INFO = 1
    DETAIL = 2


_debug_level = [DebugLevel.OFF]


def set_debug_level(level):
    _debug_level[0] = DebugLevel(level) if not isinstance(level, DebugLevel) else level


def get_debug_level():
    return _debug_level[0]


def set_debug_level_from_env():
    """TORCH_DISTRIBUTED_DEBUG=OFF|INFO|DETAIL (torch's; an unknown value is a ValueError)."""
    value = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper()
    if value not in DebugLevel.__members__:
        raise ValueError("TORCH_DISTRIBUTED_DEBUG: invalid value %r (OFF, INFO or DETAIL)" % value)
    set_debug_level(DebugLevel[value])


set_debug_level_from_env()


class _AllWorks:
    """One handle for several async collectives: wait() waits for each."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait()
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)


def _finish(handle, async_op):
    if async_op:
        return handle
    handle.wait()
    return None


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """torch's deprecated all_reduce_coalesced: each tensor all-reduced (complex tensors only with an op
    supports_complex allows)."""
    warnings.warn("`torch.distributed.all_reduce_coalesced` will be deprecated (torch's warning): all_reduce each "
                  "tensor, or one flat tensor, instead", FutureWarning, stacklevel=2)
    if any(t.is_complex() for t in tensors) and not supports_complex(op):
        raise ValueError("all_reduce does not support %s on complex tensors" % (op,))
    works = [all_reduce(t, op, group, async_op=True) for t in tensors]
    return _finish(_AllWorks([w for w in works if w is not None]), async_op)


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """torch's deprecated all_gather_coalesced: output_tensor_lists[r][i] = rank r's input_tensor_list[i]."""
    warnings.warn("`torch.distributed.all_gather_coalesced` will be deprecated (torch's warning): all_gather each "
                  "tensor instead", FutureWarning, stacklevel=2)
    size = get_world_size(group)
    if len(output_tensor_lists) != size:
        raise ValueError("all_gather_coalesced: %d output lists for %d ranks" % (len(output_tensor_lists), size))
    works = [all_gather([out[i] for out in output_tensor_lists], t, group, async_op=True)
             for i, t in enumerate(input_tensor_list)]
    return _finish(_AllWorks([w for w in works if w is not None]), async_op)


def _count_groups(n):
    """get_pg_count's bookkeeping: n more process groups made on this rank (thread, under run_ranks)."""
    _local.pg_count = getattr(_local, "pg_count", 0) + n


def get_pg_count():
    """torch's get_pg_count: the process groups made since init_process_group, the default one included: 1
    after init, +1 per new_group (on every rank, member or not) and per split_group call, + one per sub-group
    of each dim of a DeviceMesh (none for a 1-D mesh over the whole default group, which reuses it); 0 before
    init and after destroy_process_group()."""
    return getattr(_local, "pg_count", 0)


def get_backend_config(group=None):
    """torch's get_backend_config: the group's device:backend pairs ("cpu:gloo,cuda:gloo" for a gloo group, as
    torch reports it; "cpu:threads" for run_ranks' in-process groups)."""
    backend = get_backend(group)
    return "cpu:gloo,cuda:gloo" if backend == "gloo" else "cpu:%s" % backend


class _DeprecatedReduceOp:
    """torch.distributed.reduce_op: ReduceOp's members, each read warning that the name is deprecated."""

    def __getattr__(self, name):
        warnings.warn("`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` "
                      "instead", stacklevel=2)
        return getattr(ReduceOp, name)


reduce_op = _DeprecatedReduceOp()


class AllreduceOptions:
    """torch's c10d AllreduceOptions for ProcessGroup.allreduce: reduceOp (default SUM) and timeout."""

    def __init__(self):
        self.reduceOp, self.timeout = ReduceOp.SUM, None


class BroadcastOptions:
    """torch's c10d BroadcastOptions for ProcessGroup.broadcast: rootRank (a rank of the group), rootTensor
    (the index in the tensor list; one CPU tensor here, so 0) and timeout."""

    def __init__(self):
        self.rootRank, self.rootTensor, self.timeout = 0, 0, None


def _one_tensor(tensors, op):
    """The tensor of torch's low-level tensor-list argument: a CPU group takes exactly one."""
    if not isinstance(tensors, (list, tuple)):
        return tensors
    if len(tensors) != 1:
        raise ValueError("ProcessGroup.%s: a CPU process group takes one tensor per call, got %d" % (op, len(tensors)))
    return tensors[0]


def _pg_allreduce(self, tensors, opts=None):
    """torch's low-level ProcessGroup.allreduce(tensors, opts | op): asynchronous, returns the Work (its
    get_future().wait() gives [tensor]); tensors is one tensor or a list of one."""
    op = opts if isinstance(opts, ReduceOp) else (opts.reduceOp if opts is not None else ReduceOp.SUM)
    return all_reduce(_one_tensor(tensors, "allreduce"), op=op, group=self, async_op=True)


_pg_broadcast = ProcessGroup.broadcast


def _pg_broadcast_any(self, tensors, *args, **kwargs):
    """tessel's broadcast(tensor, src, async_op), or torch's low-level broadcast(tensors, BroadcastOptions)
    (asynchronous, root given as a group rank)."""
    if args and isinstance(args[0], BroadcastOptions) or isinstance(kwargs.get("opts"), BroadcastOptions):
        opts = args[0] if args else kwargs["opts"]
        return broadcast(_one_tensor(tensors, "broadcast"), group=self, group_src=opts.rootRank, async_op=True)
    return _pg_broadcast(self, tensors, *args, **kwargs)


ProcessGroup.allreduce = _pg_allreduce
ProcessGroup.broadcast = _pg_broadcast_any
