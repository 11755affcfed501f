"""tessel.distributed: torch.distributed's process-group functions.

The default process group is the process's, as torch's (every thread of a process under ``tessel_run`` or
mp.spawn sees it); each rank thread of ``tessel.run_ranks(n, fn)`` (threads backend) is a process of its own and
has its own. So the same script body runs unchanged as n processes or as n threads.

    import tessel.distributed as dist
    def main():
        dist.init_process_group("gloo")
        print(dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
    tessel.run_ranks(2, lambda world: main())     # or: tessel_run --nproc-per-node 2 python script.py
"""
import datetime
import functools
import inspect
import os
import sys
import threading
import types
import warnings

from .. import _C
from .._complex import ComplexTensor
from .._dtypes import int64 as _int64

# torch.distributed's exceptions (bindings/errors_py.cc raises them from tessel's error codes): DistError is a
# RuntimeError; a deadline that passed is a DistTimeoutError, at once a DistBackendError, a DistStoreError and
# a TimeoutError; a peer that failed is a DistBackendError.
DistError, DistBackendError, DistNetworkError = _C.DistError, _C.DistBackendError, _C.DistNetworkError
DistStoreError, QueueEmptyError, DistTimeoutError = _C.DistStoreError, _C.QueueEmptyError, _C.DistTimeoutError


class _GroupState:
    """Where the default group and its bookkeeping live: one namespace for the process (torch's: a thread a
    script starts sees the group its main thread joined), and one per run_ranks rank thread, each rank being a
    process of its own."""
    __slots__ = ("_threads", "_process")

    def __init__(self):
        object.__setattr__(self, "_threads", threading.local())
        object.__setattr__(self, "_process", types.SimpleNamespace())

    def _space(self):
        return self._threads if getattr(self._threads, "in_run_ranks", False) else self._process

    def __getattr__(self, name):
        return getattr(self._space(), name)

    def __setattr__(self, name, value):
        setattr(self._space(), name, value)

    def __delattr__(self, name):
        delattr(self._space(), name)


_local = _GroupState()


def run_ranks(world_size, fn):
    """Runs fn(world) on world_size in-process ranks (threads backend); in each rank thread the default
    process group is that rank's world. Rethrows the first failure."""
    def rank_fn(world):
        rank = _local._threads
        rank.in_run_ranks = True  # first: the assignments below go to this thread's namespace
        rank.world, rank.initialized = world, False
        try:
            fn(world)
        finally:
            rank.world, rank.initialized, rank.mesh, rank.store = None, False, None, None
            rank.meshes, rank.groups = None, []
            rank.in_run_ranks = False
            rank.mesh_groups = None

    # The rank threads share the GIL: a rank ready to run Python waits for the holder's switch interval (5 ms by
    # default) whenever the holder runs Python, not C++ (which releases it). At 1 ms, examples/python/train_moe_ep.py's
    # 2-rank step ran 1.5x faster (10,200 against 6,700 tokens/s on 2 cores); shorter intervals gained nothing more.
    interval = sys.getswitchinterval()
    if world_size > 1:
        sys.setswitchinterval(min(interval, 0.001))
    try:
        _C.run_ranks(world_size, rank_fn)
    finally:
        sys.setswitchinterval(interval)


# torch.distributed.Store and its kinds: _store.py
from ._store import FileStore, HashStore, PrefixStore, Store, TCPStore, _network_error  # noqa: E402,F401
from ._rendezvous import check_arguments as _check_init_arguments, rendezvous as _rendezvous  # noqa: E402


def _env_error(var, hint):
    """torch's env:// rendezvous error for a launcher variable that is not set, then tessel's hint: a ValueError,
    as torch's, and a RuntimeError."""
    return _C.InvalidArgumentError("Error initializing torch.distributed using env:// rendezvous: environment "
                                   "variable %s expected, but not set (%s)" % (var, hint))


def _init_world(timeout=None):
    """This thread's world group: the run_ranks rank's, else the gloo world from tessel_run's environment."""
    world = getattr(_local, "world", None)
    if world is None:
        for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):  # torch's order
            if not os.environ.get(var):
                raise _env_error(var, "no ranks to join: run under tessel_run (it sets RANK, WORLD_SIZE, "
                                 "MASTER_ADDR, MASTER_PORT), inside tessel.run_ranks(n, fn), or pass rank= and "
                                 "world_size= (tessel.multiprocessing.spawn, as torch's mp.spawn)")
        saved = os.environ.get("TESSEL_COMM_TIMEOUT_MS")
        if timeout is not None:  # the C++ rendezvous reads its deadline there; the caller's environment stays
            os.environ["TESSEL_COMM_TIMEOUT_MS"] = str(max(1, int(timeout.total_seconds() * 1000)))
        try:
            world = _C.init_process_group()
        except RuntimeError as e:
            network = _network_error(e)
            if network is None:
                raise
            raise network from None
        finally:
            if timeout is not None:
                if saved is None:
                    os.environ.pop("TESSEL_COMM_TIMEOUT_MS", None)
                else:
                    os.environ["TESSEL_COMM_TIMEOUT_MS"] = saved
        _local.world = world
    if not getattr(_local, "initialized", False):
        _local.pg_count = 1  # get_pg_count: the default group (torch's _world.group_count)
    _local.initialized = True
    return world


def _init_world_with_store(store, rank, world_size, timeout):
    """torch's init_process_group(store=...): the gloo world rendezvousing through the caller's store."""
    if not isinstance(store, Store) or store._impl is None:
        raise TypeError("init_process_group: store must be a tessel.distributed Store, got %s" % type(store).__name__)
    _local.world = _C._init_process_group_with_store(store._impl, int(rank), int(world_size),
                                                     timeout if timeout is not None else store.timeout,
                                                     getattr(store, "host", ""))
    _local.store = store  # the group's: a FileStore's folder stays until destroy_process_group, as torch's file


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None, _ranks=None, enable_reconfigure=False):
    """Joins the default process group (backend: "gloo", "cpu:gloo" or None; threads under run_ranks). A second
    call before destroy_process_group raises torch's ValueError (it returned, keeping the first group). _ranks
    (torch: only the group's name) and enable_reconfigure (ignored by backends without reconfiguration, as
    gloo) are accepted and change nothing."""
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice!")
    _check_init_arguments(backend, init_method, timeout, world_size, rank, store, device_id)
    if getattr(_local, "world", None) is None:  # (a run_ranks rank has its world already)
        if store is None:
            found = _rendezvous(init_method, rank, world_size, timeout)
            if found is not None:
                store, rank, world_size = found
        if store is not None:
            _init_world_with_store(store, rank, world_size, timeout)
    world = _init_world(timeout)
    if getattr(_local, "in_run_ranks", False) and getattr(_local, "departed", False):
        # back in its groups after a destroy_process_group: a rendezvous of every rank, as torch's init
        _C._threads_set_departed(world, False)
        _local.departed = False
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
        # torch raises ValueError ("Default process group has not been initialized, ..."); this error is both a
        # ValueError and a RuntimeError
        raise _C.InvalidArgumentError("Default process group has not been initialized, please make sure to call "
                                      "init_process_group. (%s)" % op)
    return world


class _WorldMeta(type):
    """torch's class property WORLD of `group` / `GroupMember`: this rank's default group once
    init_process_group ran, else None (and None again after destroy_process_group)."""

    @property
    def WORLD(cls):
        return getattr(_local, "world", None) if getattr(_local, "initialized", False) else None


class GroupMember(metaclass=_WorldMeta):
    """torch's sentinels: WORLD (the default group) and NON_GROUP_MEMBER (what new_group returns on a rank
    outside the new group; passing it to a collective raises)."""
    NON_GROUP_MEMBER = object()


def _group(group, op):
    return group if group is not None else _default_group(op)


# torch.distributed.Work and the deferred isend / irecv: _work.py
from ._work import (Work, _defer_p2p, _flush_all_p2p, _flush_p2p, _issue,  # noqa: E402,F401
                    _pending_p2p)


def _blocking_p2p(g, is_send, tensor, peer, tag):
    """A blocking send / recv: with isend / irecv deferred on the group it joins their batch (the tutorial's ring
    all-reduce: isend(right); recv(left); wait() — issued alone, each rank's send waited for a receive queued
    behind it), else it runs at once; what this thread deferred on other groups goes out first (it blocks)."""
    if _pending_p2p(g):
        handle = _defer_p2p(g, is_send, tensor, peer, tag)
        _flush_all_p2p()
        handle.wait()
        return
    _flush_all_p2p()
    if is_send:
        g.send(tensor, peer, tag)
    else:
        g.recv(tensor, peer, tag)


def _holds_complex(v):
    return isinstance(v, ComplexTensor) or (isinstance(v, list) and any(isinstance(t, ComplexTensor) for t in v))


def _complex_as_real(name, sig, args, kwargs):
    """A collective over complex tensors runs on their real views ([..., 2] floats sharing their memory: results
    land in the complex tensors), as torch's gloo; reductions other than sums (MAX, MIN, PRODUCT, bitwise) are
    refused with torch's error."""
    bound = sig.bind(*args, **kwargs)
    op = bound.arguments.get("op")
    if op is not None and op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise ValueError("%s does not support %s on complex tensors" % (name, getattr(op, "name", op)))

    def real(v):
        if isinstance(v, ComplexTensor):
            return v._r
        if isinstance(v, list):
            return [t._r if isinstance(t, ComplexTensor) else t for t in v]
        return v
    for key, value in list(bound.arguments.items()):
        bound.arguments[key] = real(value)
    return bound.args, bound.kwargs


# CommDebugMode (tensor/debug) keys the collectives these calls issue as torch's c10d ops (torch counts
# dist.all_reduce as c10d.allreduce_, a DTensor redistribute's as c10d_functional.all_reduce): while one of them
# runs under a CommDebugMode of this thread, its tracer records are keyed by the call (the outermost such call:
# dist.gather's all_gather inside it is torch's one c10d.gather_).
# Outside a CommDebugMode this costs one thread-local read per call.
_C10D_OPS = {"all_reduce": "allreduce_", "broadcast": "broadcast_", "all_gather_into_tensor": "_allgather_base_",
             "reduce_scatter_tensor": "_reduce_scatter_base_", "all_gather": "allgather_", "gather": "gather_",
             "scatter": "scatter_", "reduce": "reduce_", "reduce_scatter": "reduce_scatter_",
             "all_to_all_single": "alltoall_base_", "all_to_all": "alltoall_", "all_gather_object": "_allgather_base_",
             "broadcast_object_list": "broadcast_", "barrier": "barrier"}
_comm_debug = threading.local()  # .modes: the CommDebugModes entered on this thread; .op: the c10d call running


def _register_c10d_handles():
    from .. import ops
    for name in sorted(set(_C10D_OPS.values())):  # torch.ops.c10d.allreduce_, ... (tessel.ops lists send, recv_)
        if not hasattr(ops.c10d, name):
            setattr(ops.c10d, name, ops._OpHandle("c10d", name))


_register_c10d_handles()


def _run_keyed(op, fn, args, kwargs):
    """fn(*args, **kwargs) with the CommDebugModes of this thread keying its collectives as c10d.<op>; op may
    also be a dict {(tracer kind, group name or None): handle} (distribute_tensor's per-placement keys)."""
    modes = getattr(_comm_debug, "modes", None)
    if not modes or getattr(_comm_debug, "op", None) is not None:
        return fn(*args, **kwargs)
    from .. import ops
    for mode in modes:
        mode._drain()  # what ran before this call keeps its own key
    _comm_debug.op = getattr(ops.c10d, op) if isinstance(op, str) else op
    try:
        return fn(*args, **kwargs)
    finally:
        for mode in modes:
            mode._drain(_comm_debug.op)
        _comm_debug.op = None


# The tensor arguments torch checks (_check_single_tensor / _check_tensor_list) before anything runs: a wrong type is
# torch's TypeError, not an AttributeError from deep inside. Optional lists (gather_list, scatter_list) are checked
# when given.
_TENSOR_ARGS = {"all_reduce": ("tensor",), "broadcast": ("tensor",), "reduce": ("tensor",), "send": ("tensor",),
                "recv": ("tensor",), "isend": ("tensor",), "irecv": ("tensor",),
                "all_gather": ("[tensor_list", "tensor"), "all_gather_into_tensor": ("input_tensor", "output_tensor"),
                "reduce_scatter_tensor": ("output", "input"), "all_to_all_single": ("output", "input"),
                "reduce_scatter": ("output", "[input_list"),
                "all_to_all": ("[output_tensor_list", "[input_tensor_list"),
                "gather": ("tensor", "?gather_list"), "scatter": ("tensor", "?scatter_list")}


def _is_tensor(v):
    return isinstance(v, (_C.Tensor, ComplexTensor))


def _check_single_tensor(param, name):
    if not _is_tensor(param):
        raise TypeError("Invalid function argument. Expected parameter `%s` of type torch.Tensor\n"
                        "             but got %s instead." % (name, type(param)))


def _check_tensor_list(param, name):
    if not isinstance(param, list):
        raise TypeError("Invalid function argument. Expected parameter `%s` of type List[torch.Tensor]\n"
                        "             but got %s instead." % (name, type(param)))
    if not all(_is_tensor(p) for p in param):
        raise TypeError("Invalid function argument. Expected parameter `%s` of type List[torch.Tensor]\n"
                        "             but got %s with elements of type %s." % (name, type(param),
                                                                               [type(p) for p in param]))


def _check_arguments(op, bound):
    for spec in _TENSOR_ARGS.get(op, ()):
        if spec[0] == "?":
            if bound.get(spec[1:]):
                _check_tensor_list(bound[spec[1:]], spec[1:])
        elif spec[0] == "[":
            _check_tensor_list(bound.get(spec[1:]), spec[1:])
        else:
            _check_single_tensor(bound.get(spec), spec)


def _collective(fn):
    """On a rank outside `group` (NON_GROUP_MEMBER from new_group) the collective does nothing and warns,
    as torch's; otherwise fn runs. An async call's handle becomes a Work holding the call's first tensor
    argument (the output of the collectives that have one first), for get_future()."""
    sig = inspect.signature(fn)
    c10d_op = _C10D_OPS.get(fn.__name__)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = sig.bind_partial(*args, **kwargs).arguments
        _check_arguments(fn.__name__, bound)
        if bound.get("group") is GroupMember.NON_GROUP_MEMBER:
            if fn.__name__ == "send":  # (torch's: a blocking send names its peer in the group first)
                raise ValueError("Invalid process group specified")
            warnings.warn("Running %s on global rank %d which does not belong to the given group."
                          % ("irecv" if fn.__name__ == "recv" else fn.__name__, get_rank()), stacklevel=2)
            return -1 if fn.__name__ == "recv" else None
        if fn.__name__ not in ("isend", "irecv", "send", "recv"):  # p2p joins the deferred batch (see _defer_p2p)
            if bound.get("async_op"):
                _flush_p2p(bound.get("group"))  # the group runs its calls in issue order
            else:
                _flush_all_p2p()  # it blocks: isends deferred on any group go out first (see _work.py)
        if any(_holds_complex(v) for v in bound.values()):
            args, kwargs = _complex_as_real(fn.__name__, sig, args, kwargs)
        out = fn(*args, **kwargs) if c10d_op is None else _run_keyed(c10d_op, fn, args, kwargs)
        if isinstance(out, _C.Work):
            out = Work(out, [v for v in bound.values() if isinstance(v, _C.Tensor)][:1])
        return out
    return wrapper


def get_rank(group=None):
    """This rank within group (default: the default group), a plain int as torch's; -1 outside it."""
    return -1 if group is GroupMember.NON_GROUP_MEMBER else int(_group(group, "get_rank").rank)


def get_world_size(group=None):
    return -1 if group is GroupMember.NON_GROUP_MEMBER else int(_group(group, "get_world_size").size)


@_collective
def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """The group's barrier (a collective of its own, so a mismatch or deadlock message names it "barrier");
    async_op=True returns its Work at once. timeout: this barrier's deadline (default: the group's)."""
    g = _group(group, "barrier")
    saved = g.timeout
    if timeout is not None:
        g.timeout = timeout  # (the call's deadline is taken when it is issued)
    try:
        work = g._barrier_work()
    finally:
        g.timeout = saved
    return _issue(work, [], None, async_op)


def destroy_process_group(group=None):
    """Leaves the default group: a gloo world is released; a run_ranks rank keeps its thread's world
    (the threads backend ends with run_ranks), so init_process_group may be called again. A subgroup (or
    NON_GROUP_MEMBER) leaves the default group alone, as torch: the subgroup is released with its last
    reference."""
    if group is None and not is_initialized():
        raise AssertionError("Process group cannot be None")  # torch's: there is no default group to leave
    if group is not None and group is not getattr(_local, "world", None):
        return
    if getattr(_local, "world", None) is not None:
        _flush_all_p2p()  # an isend never waited on still goes out, as torch's
    from .checkpoint import _release_savers
    _release_savers()  # their groups (and a gloo world's store) must not outlive the world
    if getattr(_local, "in_run_ranks", False) and is_initialized() and sys.exc_info()[0] is None:
        # Peers waiting for this rank fail at once, as on gloo where the group's connections close. Not while an
        # exception unwinds through a `finally:` here: the rank is failing, and its failure (run_ranks aborts the
        # world with it at once) is the root cause its peers must report, not this departure.
        _C._threads_set_departed(_local.world, True)
        _local.departed = True
    _local.initialized, _local.mesh, _local.pg_count, _local.meshes = False, None, 0, None
    _local.groups, _local.store, _local.mesh_groups = [], None, None  # (mesh_groups: DTensor.device_mesh)
    if not getattr(_local, "in_run_ranks", False):
        _local.world = None


ProcessGroup = _C.ProcessGroup
ReduceOp = _C.ReduceOp
ReduceOp.RedOpType = ReduceOp  # torch's name for the enum of ReduceOp.SUM, ... (isinstance(op, ReduceOp.RedOpType))


class _CallableInt(int):
    """A group's rank or size: an int (tessel's `group.rank`) that torch's method spelling `group.rank()` also
    reads."""

    def __call__(self):
        return int(self)

    def __reduce__(self):
        return int, (int(self),)  # pickled as the int it is (a weights_only load builds plain ints only)


def _callable_int_property(prop):
    return property(lambda group: _CallableInt(prop.fget(group)), doc=prop.__doc__)


if not hasattr(ProcessGroup, "group_name"):  # once per interpreter (a reload must not wrap twice)
    ProcessGroup.rank = _callable_int_property(ProcessGroup.__dict__["rank"])
    ProcessGroup.size = _callable_int_property(ProcessGroup.__dict__["size"])
    ProcessGroup.group_name = property(lambda group: group.name, doc="torch's ProcessGroup.group_name: the name")


@_collective
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """In place over the group (default: the default group); async_op returns a Work to wait on."""
    if isinstance(op, _BitwiseOp):
        return _bitwise_all_reduce(tensor, op, _group(group, "all_reduce"), async_op)
    g = _group(group, "all_reduce")
    return _dense_call([tensor], [], lambda o, i, a: g.all_reduce(o[0], op, a), async_op)


def _dense_call(outs, ins, call, async_op):
    """call(outs, ins, async_op) on contiguous tensors, as the backends take them: a strided input (a transposed
    one, a funcol output gathered along dim 1) is copied, a strided output (or in-place tensor) gets a contiguous
    copy that is written back once the collective completed (on wait() with async_op; torch's gloo takes strided
    tensors)."""
    if all(t.is_contiguous() for t in outs) and all(t.is_contiguous() for t in ins):
        return call(outs, ins, async_op)
    dense_out = [t if t.is_contiguous() else t.contiguous() for t in outs]
    work = call(dense_out, [t if t.is_contiguous() else t.contiguous() for t in ins], True)

    def write_back():
        with _C._GradMode(False):
            for t, d in zip(outs, dense_out):
                if d is not t:
                    t.copy_(d)
    return _issue(work, outs, write_back, async_op)


class _BitwiseOp:
    """ReduceOp.BAND / BOR / BXOR (torch's, for integer and bool tensors): an all-gather, then the bitwise
    reduction over the ranks' tensors on each rank (the backends reduce arithmetic ops only; these carry flags and
    masks, a few bytes)."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __repr__(self):
        return "<ReduceOp.%s>" % self.name


def _bitwise_all_reduce(tensor, op, g, async_op):
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        raise RuntimeError("Cannot use ReduceOp.%s with non-integral dtype" % op.name)  # torch's
    from .._tensor import empty
    flat = empty(g.size * tensor.numel(), dtype=tensor.dtype)
    work = g.all_gather_into_tensor(flat, tensor.reshape(-1).contiguous(), True)

    def reduce_gathered():
        import numpy as np
        result = op.fn.reduce(flat.numpy().reshape((g.size,) + tuple(tensor.shape)), axis=0)
        tensor.copy_(_C._from_numpy(np.ascontiguousarray(result)))
    return _issue(work, [tensor], reduce_gathered, async_op)


def _register_bitwise_ops():
    import numpy as np
    for name, fn in (("BAND", np.bitwise_and), ("BOR", np.bitwise_or), ("BXOR", np.bitwise_xor)):
        setattr(ReduceOp, name, _BitwiseOp(name, fn))


_register_bitwise_ops()


@_collective
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor: the inputs concatenated on dim 0, or (torch's other form) stacked: [world, *input.shape]."""
    g = _group(group, "all_gather_into_tensor")
    output_tensor, input_tensor = _unstacked(output_tensor, input_tensor, g)
    return _dense_call([output_tensor], [input_tensor], lambda o, i, a: g.all_gather_into_tensor(o[0], i[0], a),
                       async_op)


@_collective
def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    """input: the ranks' blocks concatenated on dim 0, or (torch's other form) stacked: [world, *output.shape]."""
    g = _group(group, "reduce_scatter_tensor")
    input, output = _unstacked(input, output, g)  # noqa: A001
    if isinstance(op, _BitwiseOp):
        return _bitwise_reduce_scatter(output, input, op, g, async_op)
    return _dense_call([output], [input], lambda o, i, a: g.reduce_scatter_tensor(o[0], i[0], op, a), async_op)


def _bitwise_reduce_scatter(output, whole, op, g, async_op):
    """reduce_scatter with BAND / BOR / BXOR: the bitwise all-reduce of the whole input, this rank's block kept."""
    if whole.numel() != g.size * output.numel():
        raise ValueError("reduce_scatter: an input of %d elements for %d ranks x an output of %d"
                         % (whole.numel(), g.size, output.numel()))
    reduced = whole.reshape(-1).clone()
    work = _bitwise_all_reduce(reduced, op, g, True)

    def keep_block():
        with _C._GradMode(False):
            output.copy_(reduced[g.rank * output.numel():(g.rank + 1) * output.numel()].reshape(output.shape))
    return _issue(work, [output], keep_block, async_op)


def _unstacked(whole, piece, g):
    """(whole, piece) with a stacked whole [world, *piece.shape] seen as the concatenation (a view: the collective
    writes through it); a 0-d piece as [1]."""
    if piece.dim() == 0:
        piece = piece.reshape(1)
    if tuple(whole.shape) == (g.size,) + tuple(piece.shape) and whole.is_contiguous() and g.size > 0:
        whole = whole.view(g.size * piece.shape[0], *piece.shape[1:])
    return whole, piece


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """torch 2.15's name for all_gather_into_tensor (output: the inputs concatenated or stacked on dim 0)."""
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_single(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002 (torch's)
    """torch 2.15's name for reduce_scatter_tensor."""
    return reduce_scatter_tensor(output, input, op, group, async_op)


def set_timeout(timeout, group=None):
    """torch.distributed.set_timeout: every later call on the group (default: the default group) has this
    deadline."""
    _group(group, "set_timeout").timeout = timeout


class _DistributedPdb(__import__("pdb").Pdb):
    """pdb for a worker process (torch's): stdin is reopened from /dev/stdin, which launchers leave closed in
    their children."""

    def interaction(self, *args, **kwargs):
        import sys
        saved = sys.stdin
        try:
            sys.stdin = open("/dev/stdin")
            super().interaction(*args, **kwargs)
        finally:
            sys.stdin = saved


_breakpoint_counts = {}


def breakpoint(rank=0, skip=0, timeout_s=3600):  # noqa: A001 (torch's name)
    """torch.distributed.breakpoint: pdb on one rank while every other rank waits in a barrier. skip: pass this
    call site the first `skip` times (counted per calling line); timeout_s (None: unchanged) becomes the default
    group's deadline, so a long debugging session does not time the waiting ranks out."""
    import inspect
    if skip > 0:
        caller = inspect.stack()[1]
        key = (get_rank(), caller.filename, caller.lineno)  # per rank: run_ranks' ranks share this module
        _breakpoint_counts[key] = _breakpoint_counts.get(key, 0) + 1
        if _breakpoint_counts[key] <= skip:
            return
    if timeout_s is not None:
        set_timeout(datetime.timedelta(seconds=timeout_s))
    if get_rank() == rank:
        debugger = _DistributedPdb()
        debugger.message("\n!!! ATTENTION !!!\n\nType 'up' to get to the frame that called dist.breakpoint(rank=%d)\n"
                         % rank)
        debugger.set_trace(inspect.currentframe().f_back)
    barrier()


def is_backend_available(backend):
    """gloo (processes) and threads (run_ranks) on this build's Python face; nccl needs a GPU build."""
    return str(backend).lower() in ("gloo", "threads") or (str(backend).lower() == "nccl" and is_nccl_available())


def get_default_backend_for_device(device):
    """torch's mapping: "cpu" -> "gloo", "cuda" -> "nccl"."""
    kind = str(getattr(device, "type", device)).split(":")[0]
    table = {"cpu": "gloo", "cuda": "nccl"}
    if kind not in table:
        raise ValueError("Default backend not registered for device : %s" % kind)
    return table[kind]


def _registered(group, op):
    """group's global ranks, for get_global_rank / get_group_rank / get_process_group_ranks: None is torch's
    ValueError (no group is registered under it), NON_GROUP_MEMBER a ValueError (torch reads whichever group this
    rank was last left out of)."""
    if group is None:
        raise ValueError("Group None is not registered, please create group with torch.distributed.new_group API")
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("%s: this rank is not part of the group (NON_GROUP_MEMBER)" % op)
    return list(group.global_ranks)


def _remember_group(group):
    """Records a group new_group / split_group made on this rank: a funcol group name resolves to it."""
    if getattr(_local, "groups", None) is None:
        _local.groups = []
    _local.groups.append(group)


def get_global_rank(group, group_rank):
    """The global rank of `group`'s member `group_rank` (torch.distributed.get_global_rank)."""
    ranks = _registered(group, "get_global_rank")
    if not 0 <= group_rank < len(ranks):  # (a ValueError, as torch's here, and a RuntimeError, as its collectives')
        raise _C.InvalidArgumentError("group rank %d is not in the group (size %d)" % (group_rank, len(ranks)))
    return ranks[group_rank]


def get_group_rank(group, global_rank):
    """`global_rank`'s rank within `group` (torch.distributed.get_group_rank)."""
    ranks = _registered(group, "get_group_rank")
    if global_rank not in ranks:  # (ValueError as torch's get_group_rank; RuntimeError as broadcast(src=) there)
        raise _C.InvalidArgumentError("global rank %d is not part of the group (global ranks %s)"
                                      % (global_rank, ranks))
    return ranks.index(global_rank)


@_collective
def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """As torch: src is a global rank (on any group); group_src a rank within the group."""
    g = _group(group, "broadcast")
    if (src is None) == (group_src is None):
        raise ValueError("broadcast: pass exactly one of src (a global rank) and group_src (a rank of the group)")
    root = get_group_rank(g, src) if group_src is None else group_src
    return _dense_call([tensor], [], lambda o, i, a: g.broadcast(o[0], root, a), async_op)

def _group_peer(g, peer, group_peer, op, what):
    if (peer is None) == (group_peer is None):
        raise ValueError("%s: pass exactly one of %s (a global rank) and group_%s (a rank of the group)"
                         % (op, what, what))
    return get_group_rank(g, peer) if group_peer is None else group_peer


@_collective
def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    g = _group(group, "send")
    peer = _group_peer(g, dst, group_dst, "send", "dst")
    if peer == g.rank:
        raise ValueError("Invalid destination rank: destination rank should not be the same as the rank of the "
                         "current process.")  # torch's
    _blocking_p2p(g, True, tensor, peer, tag)


@_collective
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Blocking receive from src (a global rank), or with neither src nor group_src from any rank of the group
    (the first matching send). Returns the sender's global rank."""
    g = _group(group, "recv")
    if src is None and group_src is None:
        _flush_all_p2p()  # (it blocks)
        work = g.recv_any_source(tensor, tag)
        work.wait()
        return get_global_rank(g, work._source_rank())
    peer = _group_peer(g, src, group_src, "recv", "src")
    _blocking_p2p(g, False, tensor, peer, tag)
    return get_global_rank(g, peer)


@_collective
def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Deferred until waited on, polled, or anything else runs on the group (see _defer_p2p), then issued with
    the thread's other pending isend/irecv on that group as one batch."""
    g = _group(group, "isend")
    return Work(_defer_p2p(g, True, tensor, _group_peer(g, dst, group_dst, "isend", "dst"), tag), [tensor])


@_collective
def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    g = _group(group, "irecv")
    if src is None and group_src is None:  # from any rank: the work's _source_rank() names the sender
        _flush_p2p(g)
        return g.recv_any_source(tensor, tag)
    peer = _group_peer(g, src, group_src, "irecv", "src")
    return Work(_defer_p2p(g, False, tensor, peer, tag), [tensor], source=peer)


@_collective
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    g = _group(group, "all_to_all_single")
    splits = list(output_split_sizes or []), list(input_split_sizes or [])
    return _dense_call([output], [input], lambda o, i, a: g.all_to_all_single(o[0], i[0], *splits, a), async_op)


@_collective
def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that gives up after `timeout` (a timedelta; default: the group's), raising on the ranks that
    arrived with the ranks that did not (tessel's barrier names them all, torch's wait_all_ranks=True report)."""
    g = _group(group, "monitored_barrier")
    if timeout is None:
        g.barrier()
        return
    saved = g.timeout
    g.timeout = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
    try:
        g.barrier()
    finally:
        g.timeout = saved


class P2POp:
    """torch's P2POp for batch_isend_irecv: op is isend or irecv, peer a global rank."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type ``torch.distributed.isend`` or "
                             "``torch.distributed.irecv``.")
        _check_single_tensor(tensor, "tensor")
        self.op, self.tensor, self.peer, self.group = op, tensor, peer, group
        self.tag, self.group_peer = tag, group_peer


def batch_isend_irecv(p2p_op_list):
    """Issues every P2POp in one batch per group (all its sends and receives in flight together, so a ring
    cannot wait in a cycle) and returns their Works (one per group's batch, repeated for its ops)."""
    if not p2p_op_list:
        raise ValueError("batch_isend_irecv: an empty list")
    batches = {}
    for i, p in enumerate(p2p_op_list):
        g = _group(p.group, "batch_isend_irecv")
        _flush_p2p(g)
        is_send = p.op is isend
        peer = _group_peer(g, p.peer, p.group_peer, "batch_isend_irecv", "dst" if is_send else "src")
        batches.setdefault(id(g), (g, []))[1].append((i, (is_send, p.tensor, peer, int(p.tag))))
    works = [None] * len(p2p_op_list)
    for g, ops in batches.values():
        work = g.batch_p2p([op for _, op in ops])
        for i, _ in ops:
            works[i] = work
    return works


def get_process_group_ranks(group):
    """The global ranks of group's members, in group-rank order."""
    return _registered(_group(group, "get_process_group_ranks"), "get_process_group_ranks")


def get_backend(group=None):
    """The group's backend name ("gloo", "nccl"; "threads" for run_ranks' in-process ranks)."""
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("Invalid process group specified")  # torch's
    return _group(group, "get_backend").backend


class Backend(str):
    """torch's backend names."""
    UNDEFINED, GLOO, NCCL, MPI = "undefined", "gloo", "nccl", "mpi"

    def __new__(cls, name):
        return str.__new__(cls, name.lower())


def is_available():
    return True


def is_gloo_available():
    return True


def is_nccl_available():
    """False: tessel's Python face runs on the CPU (the nccl backend is C++-only for now)."""
    return False


def is_mpi_available():
    return False


def is_torchelastic_launched():
    """As torch: launched by an elastic launcher (TORCHELASTIC_RUN_ID is set; tessel_run sets it too)."""
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def get_node_local_rank(fallback_rank=None):
    """LOCAL_RANK from the launcher, else fallback_rank, else a RuntimeError (torch's)."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank to allow "
                       "`get_node_local_rank` to work, assuming you are not running in a multi-device context "
                       "and want the code to run locally instead.")


group = GroupMember  # torch.distributed.group.WORLD


from ._composed import (all_gather, all_to_all, gather, gather_into_tensor, gather_single,  # noqa: E402,F401
                        reduce, reduce_scatter, scatter)
from ._groups import new_group, new_subgroups, new_subgroups_by_enumeration, split_group  # noqa: E402,F401
from ._object_collectives import (all_gather_object, broadcast_object_list, gather_object,  # noqa: E402,F401
                                  recv_object_list, scatter_object_list, send_object_list)
from . import checkpoint, device_mesh, fsdp, pipelining, tensor  # noqa: E402,F401 (torch.distributed's subpackages)
from ._c10d_extras import (AllreduceOptions, BroadcastOptions, DebugLevel, _count_groups,  # noqa
                           all_gather_coalesced, all_reduce_coalesced, default_pg_timeout, get_backend_config,
                           get_debug_level, get_pg_count, is_ucc_available, is_xccl_available, reduce_op,
                           set_debug_level, set_debug_level_from_env, supports_complex)
from .device_mesh import DeviceMesh, init_device_mesh  # noqa: E402,F401 (torch.distributed exports them too)
from . import constants, distributed_c10d  # noqa: E402,F401 (torch.distributed's modules, reachable as attributes)


def __getattr__(name):
    """torch.distributed.GradBucket (DDP comm hooks' bucket type, used in their annotations), from
    tessel.nn.parallel, which imports this package (hence resolved on first use)."""
    if name == "GradBucket":
        from ..nn.parallel import GradBucket
        return GradBucket
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

