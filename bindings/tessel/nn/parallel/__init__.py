"""tessel.nn.parallel: torch.nn.parallel.DistributedDataParallel for the Python face.

    model = DistributedDataParallel(model)          # after init_process_group; every rank wraps alike
    loss = loss_fn(model(x_rank), y_rank); loss.backward(); opt.step()

What torch's DDP guarantees, kept: at construction every rank's parameters and buffers become rank 0's
(broadcast); after each backward that followed a forward of the wrapped module, every parameter's .grad
is the mean over the ranks; `no_sync()` skips the averaging (gradients accumulate locally until the
next synchronized backward); `model.module` is the wrapped module and state dict keys start with
"module.", as torch's.

How, as torch's Reducer: the C++ engine (fsdp::Replicate, fsdp/replicate.h) puts the parameters that require
grad in buckets of at most `bucket_cap_mb` (25) in reverse registration order; a hook on each parameter marks
its gradient ready and a complete bucket is all-reduced (average) at once, overlapped with the rest of the
backward; the end of the backward waits for the buckets and writes the averages into .grad. A parameter with no
gradient on a rank is reduced as zeros there. With `find_unused_parameters=True` one more all-reduce of one flag
per parameter follows, and a parameter no rank had a gradient for keeps .grad None; without it, such a backward
makes the next forward raise torch's "Expected to have finished reduction" RuntimeError naming the parameters.
With a communication hook (`register_comm_hook`) the reduction instead runs after the backward, each of the
Reducer's buckets (bucket_cap_mb, reverse registration order, one dtype each: torch's bucket indices) through the
hook in turn. Uneven inputs: `with model.join():` (or tessel.distributed.algorithms.join.Join with
the model, and a ZeroRedundancyOptimizer, as Joinables): a rank that ran out of batches shadows the others'
iterations (their buffer broadcasts and gradient buckets, with zeros from it; the gradients stay divided by the
initial world size and also reach its own .grad), and at the end every rank takes the last joiner's parameters.
"""
import contextlib
import threading

from ... import _C
from ...distributed.algorithms.join import _GroupJoinable
from ..modules import Module, _flatten_output

_pending = threading.local()  # per thread (a run_ranks rank): the DDP modules with a comm hook whose forward ran


def _queue(ddp):
    lst = getattr(_pending, "modules", None)
    if lst is None:
        lst = _pending.modules = []
    if all(m is not ddp for m in lst):
        lst.append(ddp)


def _run_pending():
    """Called after every backward on this thread: runs the comm hooks of the DDP modules that backward
    reached (a hook on their outputs saw a gradient); the others stay pending (a GAN's generator whose output
    the first backward used detached)."""
    lst = getattr(_pending, "modules", None)
    if not lst:
        return
    reached = [m for m in lst if m._reached]
    _pending.modules = [m for m in lst if not m._reached]
    for ddp in reached:
        ddp._reached = False
        ddp._sync_gradients()


def _same_parameters_everywhere(module, group):
    """torch's verify_params_across_processes, on every rank: the same number of parameters and the same shapes
    (one all_gather of the shapes; the broadcast of rank 0's parameters failed on byte counts instead)."""
    from ... import distributed as dist
    shapes = [(name, tuple(p.shape)) for name, p in module.named_parameters()]
    gathered = [None] * group.size()
    dist.all_gather_object(gathered, shapes, group=group)
    for r, theirs in enumerate(gathered[1:], 1):
        if len(theirs) != len(gathered[0]):
            raise RuntimeError("DDP expects same model across all ranks, but Rank %d has %d params, while rank 0 "
                               "has inconsistent %d params." % (r, len(theirs), len(gathered[0])))
        for i, ((name, shape), (_, first)) in enumerate(zip(theirs, gathered[0])):
            if shape != first:
                raise RuntimeError("params[%d] ('%s') in process %d with sizes %s appears not to match sizes of the "
                                   "same param in process 0 (%s)." % (i, name, r, list(shape), list(first)))


class DistributedDataParallel(Module, _GroupJoinable):
    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False,
                 forward_sync_buffers=None, lazy_bucket_allocation=False):
        super().__init__()
        import warnings
        from ... import distributed as dist
        from ...distributed.device_mesh import DeviceMesh
        # torch 2.15: broadcast_buffers is deprecated for forward_sync_buffers; broadcast_buffers=False also keeps
        # the buffers out of the construction's sync, forward_sync_buffers=False does not
        if broadcast_buffers is not None:
            warnings.warn("Both `broadcast_buffers` and `forward_sync_buffers` were specified. `broadcast_buffers` is "
                          "deprecated and its value is ignored when `forward_sync_buffers` is provided."
                          if forward_sync_buffers is not None else
                          "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead. IMPORTANT: unlike "
                          "`broadcast_buffers=False`, `forward_sync_buffers=False` still syncs buffers at init. If you "
                          "rely on buffers NOT being synced at init (e.g. rank-local buffers), keep using "
                          "`broadcast_buffers=False` until `init_sync_buffers` is available.", FutureWarning,
                          stacklevel=2)
        if forward_sync_buffers is not None:
            self.forward_sync_buffers, init_sync_buffers = bool(forward_sync_buffers), True
        else:
            self.forward_sync_buffers = init_sync_buffers = broadcast_buffers is None or bool(broadcast_buffers)
        # the reducer's options that change no value here: its buckets are allocated whole and copied per bucket
        self.batched_grad_copy, self.lazy_bucket_allocation = batched_grad_copy, lazy_bucket_allocation
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params  # (unused ones stay None, as torch's)
        if bucket_cap_mb_list:  # torch's per-bucket caps: the largest bounds tessel's uniform buckets, as its first
            bucket_cap_mb = max(bucket_cap_mb_list)
        if device_ids not in (None, []) and any(str(d) not in ("cpu", "-1") for d in device_ids):
            raise NotImplementedError("DistributedDataParallel(device_ids=%s): tessel's Python face runs on "
                                      "the CPU; pass no device_ids" % (device_ids,))
        if device_mesh is not None:
            process_group = device_mesh.get_group()
        self.module = module
        self.process_group = process_group if process_group is not None else dist._default_group("DDP")
        self.require_forward_param_sync = True  # torch's: the next forward syncs the buffers (not after an
        # unsynced one)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.static_graph = bool(static_graph)
        # torch's static_graph finds the unused parameters in its first iteration and skips them after: here they
        # are found every backward (one small all-reduce), with the same gradients (None for unused ones)
        self._detect_unused = self.find_unused_parameters or self.static_graph
        self.require_backward_grad_sync = True
        self._reached = False
        self._comm_hook = None
        from ...distributed.algorithms.join import _JoinConfig
        self._join_config = _JoinConfig.disabled()
        if any(p.is_distributed for p in module.parameters()):
            raise ValueError("DistributedDataParallel: the module has DTensor (sharded) parameters; use "
                             "fully_shard's replicate axis (HSDP) for data parallelism over them")
        cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
        if not cap_mb > 0:
            raise ValueError("DistributedDataParallel: bucket_cap_mb must be positive, got %s" % (bucket_cap_mb,))
        mesh = device_mesh if device_mesh is not None else DeviceMesh.from_group(self.process_group, "cpu")
        _same_parameters_everywhere(module, mesh.get_group())
        if not any(p.requires_grad for p in module.parameters()):
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                               "requires a gradient.")
        # Broadcasts rank 0's parameters (one per bucket; not with init_sync=False, which keeps each rank's, as
        # torch's) and registers the gradient hooks.
        self._replicate = _C.replicate(module, mesh, max(1, int(cap_mb * 1024 * 1024)), self._detect_unused,
                                       bool(init_sync))
        if init_sync and init_sync_buffers:
            self._broadcast_from_first_rank(self._buffers_to_sync())

    def forward(self, *args, **kwargs):
        self._pre_forward()
        return self._post_forward(self.module(*args, **kwargs))

    def _pre_forward(self):
        """What precedes the wrapped module's forward (also composable replicate's pre-hook): the unused-parameter
        check, Join's announcement, the buffer broadcast and whether this forward's backward synchronizes."""
        unused = self._replicate.unused_in_last_backward() if not self._detect_unused else []
        if unused and self._comm_hook is None:
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a new one. This error "
                "indicates that your module has parameters that were not used in producing loss. You can enable "
                "unused parameter detection by passing the keyword argument `find_unused_parameters=True` to "
                "`tessel.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
                "participate in calculating loss. Parameters which did not receive grad for rank %d: %s"
                % (self.process_group.rank, ", ".join(unused)))
        sync = self.require_backward_grad_sync and _C.is_grad_enabled()
        joining = self._join_config.enable
        if joining:  # Join: announce this iteration, then tell the joined ranks whether a synced backward follows
            from ...distributed.algorithms.join import Join, _count
            Join.notify_join_context(self)
            _count(1 if sync else 0, self.process_group)
        # torch: rank 0's buffers before a forward (under Join: a live rank's), unless the previous forward's backward
        # was not to sync (no_sync, no_grad: require_forward_param_sync)
        if self.forward_sync_buffers and joining:
            self._broadcast_buffers(active=True)
        elif self.forward_sync_buffers and self.require_forward_param_sync:
            self._broadcast_from_first_rank(self._buffers_to_sync())
        # (held by a pipeline step, this decides whether the step's REDUCE_GRAD reduces: no_sync accumulates)
        self._replicate.set_requires_gradient_sync(sync and self._comm_hook is None)
        self.require_forward_param_sync = sync  # this forward's backward synchronizes

    def _post_forward(self, out):
        """With a comm hook: marks the outputs so the backward that reaches them runs the hook."""
        if self.require_forward_param_sync and self._comm_hook is not None:
            _queue(self)
            tensors = []
            _flatten_output(out, tensors)
            for t in tensors:
                if t.requires_grad:
                    t.register_hook(self._mark_reached)
        return out

    def _buffers_to_sync(self):
        return [b for b in self.module.buffers() if b is not None]

    def _broadcast_from_first_rank(self, tensors):
        """Every rank's tensors become those of the group's first rank."""
        from ... import distributed as dist
        if not tensors:
            return
        root = dist.get_global_rank(self.process_group, 0)
        with _C._GradMode(False):
            for t in tensors:
                dist.broadcast(t, src=root, group=self.process_group)

    def _broadcast_buffers(self, active):
        """Under Join: the buffers of the highest rank that still has inputs, to every rank."""
        from ... import distributed as dist
        from ...distributed.algorithms.join import _max_rank
        buffers = self._buffers_to_sync()
        if not buffers:
            return
        root = _max_rank(active, self.process_group)
        with _C._GradMode(False):
            for t in buffers:
                dist.broadcast(t, src=dist.get_global_rank(self.process_group, root), group=self.process_group)

    def _mark_reached(self, grad):
        self._reached = True

    # ---- torch's Joinable (uneven inputs; tessel/distributed/algorithms/join.py) ----

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        from ...distributed.algorithms.join import Join
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs):
        if not kwargs.get("divide_by_initial_world_size", True):
            raise NotImplementedError("DistributedDataParallel.join(divide_by_initial_world_size=False): the buckets "
                                      "always average over the initial world size")
        return _DDPJoinHook(self)

    def _set_static_graph(self):
        """torch's: the graph is the same every iteration (static_graph=True after construction)."""
        if self.static_graph:
            import warnings
            warnings.warn("You've set static_graph to be True, no need to set it again.", stacklevel=2)
            return
        if self.find_unused_parameters:
            import warnings
            warnings.warn("You passed find_unused_parameters=true to DistributedDataParallel, `_set_static_graph` "
                          "will detect unused parameters automatically, so you do not need to set "
                          "find_unused_parameters=true, just be sure these unused parameters will not change during "
                          "training loop while calling `_set_static_graph`.", stacklevel=2)
        # (the reducer was built without the used-flags all-reduce: a parameter no rank uses gets a zero gradient
        # here where static_graph=True at construction leaves it None)
        self.static_graph = True
        self._detect_unused = True

    def _register_builtin_comm_hook(self, comm_hook_type):
        """torch's built-in hooks by name: BuiltinCommHookType.ALLREDUCE (the default averaging, through the hook
        path) or FP16_COMPRESS."""
        from ...distributed.algorithms.ddp_comm_hooks import default_hooks
        hooks = {"ALLREDUCE": default_hooks.allreduce_hook, "FP16_COMPRESS": default_hooks.fp16_compress_hook}
        name = getattr(comm_hook_type, "name", str(comm_hook_type).rsplit(".", 1)[-1])
        if name not in hooks:
            raise ValueError("_register_builtin_comm_hook: unknown BuiltinCommHookType %r" % (comm_hook_type,))
        self.register_comm_hook(None, hooks[name])

    def register_comm_hook(self, state, hook):
        """torch's DDP communication hook: after each synchronized backward, hook(state, bucket) gets each of the
        Reducer's buckets in turn as a GradBucket (its index as torch's; the gradients, flattened, zeros for a
        parameter without one) and returns a
        tessel.futures.Future of the reduced buffer, which becomes the parameters' .grad (a parameter no rank
        had a gradient for stays None). Once per module, as torch; the buckets then no longer reduce during the
        backward."""
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        if not callable(hook):
            raise TypeError("register_comm_hook: hook must be callable, got %s" % type(hook).__name__)
        self._comm_hook = (state, hook)
        self._replicate.set_pipeline_drivable(False)  # the hook reduces after each synced backward, in a pipeline too
        self._replicate.set_requires_gradient_sync(False)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients of the backwards of forwards inside accumulate locally; the next synchronized one averages
        the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def _bucket_fqns(self):
        """Each bucket's parameter names (relative to .module), in the order they sit in its flat buffer."""
        return self._replicate.bucket_fqns()

    def _sync_gradients(self):
        """With a comm hook: each Reducer bucket through the hook as a GradBucket; which parameters had a gradient on some
        rank travels in one separate all_reduce of flags (the hook's buffer holds only gradients, as torch's)."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        if any(p.grad is not None and p.grad.requires_grad for p in params):
            # backward(create_graph=True): averaging in place would leave each .grad's graph describing the
            # local gradient only (torch's DDP does not support double backward either).
            raise NotImplementedError("DistributedDataParallel: gradients that carry a graph "
                                      "(backward(create_graph=True)) cannot be averaged across ranks; take the inner "
                                      "gradient with tessel.autograd.grad(..., create_graph=True) of the inputs, then "
                                      "call backward() without create_graph")
        named = dict(self.module.named_parameters())
        buckets = [[named[n] for n in names] for names in self._bucket_fqns()]  # torch's Reducer buckets
        state, hook = self._comm_hook
        g = self.process_group
        with _C._GradMode(False):
            everyone = [p for ps in buckets for p in ps]
            flags = _grad_flags(everyone)
            g.all_reduce(flags, _C.ReduceOp.SUM, False)
            had = dict(zip(map(id, everyone), flags.tolist()))
            for index, ps in enumerate(buckets):
                bucket = GradBucket(index, _flat_grads(ps), ps, index == len(buckets) - 1, g)
                out = hook(state, bucket).wait()
                _assign_grads(ps, out[0] if isinstance(out, (list, tuple)) else out, [had[id(p)] for p in ps])


class _DDPJoinHook:  # torch's JoinHook protocol (main_hook, post_hook)
    """A joined rank's DDP iteration: the announcement of sync (0 from here), the buffer broadcast, and when the
    others sync, every gradient bucket with zeros from this rank (the averages land in its .grad too)."""

    def __init__(self, ddp):
        self.ddp = ddp

    def main_hook(self):
        from ...distributed.algorithms.join import _count
        ddp = self.ddp
        sync = _count(0, ddp.process_group) > 0
        if ddp.forward_sync_buffers:
            ddp._broadcast_buffers(active=False)
        if not sync:
            return
        if ddp._comm_hook is None:
            ddp._replicate.shadow_backward()
            return
        for p in ddp.module.parameters():
            p.grad = None
        ddp._sync_gradients()

    def post_hook(self, is_last_joiner):
        """Every rank takes the last joiner's parameters, and its buffers unless forward_sync_buffers
        (broadcast_buffers) is False (torch's _sync_final_model)."""
        from ... import distributed as dist
        from ...distributed.algorithms.join import _max_rank
        ddp = self.ddp
        root = dist.get_global_rank(ddp.process_group, _max_rank(is_last_joiner, ddp.process_group))
        with _C._GradMode(False):
            buffers = ddp._buffers_to_sync() if ddp.forward_sync_buffers else []
            for t in list(ddp.module.parameters()) + buffers:
                dist.broadcast(t, src=root, group=ddp.process_group)


def _grad_flags(ps):
    """1 for each parameter that has a .grad, else 0 (summed over the ranks: how many had one)."""
    from ... import zeros
    flags = zeros(len(ps))
    for i, p in enumerate(ps):
        if p.grad is not None:
            flags[i] = 1.0
    return flags


def _flat_grads(ps):
    """The parameters' gradients (zeros for one without), flattened into one contiguous buffer."""
    from ...distributed._flat import flatten
    from ..._tensor import zeros_like
    return flatten([p.grad if p.grad is not None else zeros_like(p) for p in ps])


def _assign_grads(ps, flat, counts):
    """Each parameter whose count is positive (some rank had a gradient) gets its slice of flat as .grad; the
    others keep theirs."""
    offset = 0
    for p, count in zip(ps, counts):
        n = p.numel()
        if count > 0:
            value = flat[offset:offset + n].view(*p.shape)
            if p.grad is None:
                p.grad = value.contiguous()
            else:
                p.grad.copy_(value)
        offset += n


class GradBucket:
    """torch's GradBucket: the flattened gradients of one of the Reducer's buckets."""

    def __init__(self, index, buffer, params, is_last, process_group):
        self._index, self._buffer, self._params, self._is_last = index, buffer, list(params), is_last
        self._process_group = process_group

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def set_buffer(self, buffer):
        self._buffer.copy_(buffer)

    def gradients(self):
        """Each parameter's gradient as a view of the buffer."""
        from ...distributed._flat import views
        return views(self._buffer, self._params)

    def parameters(self):
        return list(self._params)

    def is_last(self):
        return self._is_last


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """torch.nn.parallel.data_parallel: module(*inputs) (no accelerators to replicate it over here)."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return module(*inputs, **(module_kwargs or {}))


def __getattr__(name):
    """torch.nn.parallel.DataParallel is tessel.nn.DataParallel (the module itself on the CPU-only face); loaded on
    first use (tessel.nn imports this module)."""
    if name == "DataParallel":
        from .._more_modules import DataParallel
        return DataParallel
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
