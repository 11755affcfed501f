"""tessel.distributed.fsdp: FSDP2's fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy, FSDPModule; and FSDP1's
FullyShardedDataParallel wrapper with its options (ShardingStrategy, MixedPrecision, StateDictType, ...; built on
fully_shard: fully_sharded_data_parallel.py) and its auto-wrap policies in .wrap.

Call fully_shard bottom-up: each block first, the root last (fsdp/fully_shard.h). As in torch, the module
is returned and becomes an instance of FSDPModule (its class is swapped for a subclass), whose methods
control unsharding, resharding, gradient sync and prefetching.

    mp = MixedPrecisionPolicy(param_dtype=tessel.bfloat16, reduce_dtype=tessel.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
"""
import dataclasses
import functools
import warnings

from ... import _C
from .. import _local, get_world_size
from ..device_mesh import init_device_mesh

@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """torch's MixedPrecisionPolicy (a frozen dataclass with its fields): param_dtype for the unsharded
    parameters (the all-gather, forward and backward), reduce_dtype for the gradient reduce-scatter (unset:
    the parameter's own dtype, torch 2.15's default: float32 parameters reduce in float32 whatever
    param_dtype), output_dtype for forward outputs, cast_forward_inputs. param_dtype_override_fn (torch 2.15's
    per-parameter dtype) is not supported: fully_shard raises NotImplementedError when it is set."""
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True
    param_dtype_override_fn: object = dataclasses.field(default=None, kw_only=True)


@dataclasses.dataclass
class OffloadPolicy:
    """torch's OffloadPolicy: the base policy, meaning no offloading (fully_shard takes it as None)."""


@dataclasses.dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """torch's CPUOffloadPolicy: the sharded parameters, gradients and optimizer step live on the CPU (on a CPU
    mesh they already do); pin_memory as torch's (page-locked host copies on a CUDA mesh)."""
    pin_memory: bool = True


@dataclasses.dataclass
class DataParallelMeshDims:
    """torch 2.15's DataParallelMeshDims for fully_shard(dp_mesh_dims=): which named dims of a full SPMD mesh
    are data parallel: shard (FSDP shards over it) and replicate (HSDP's replication dim). tessel takes one
    name each (fully_shard's shard_axis / replicate_axis); several names (torch flattens them) raise
    NotImplementedError, and replicate alone (DDP on the mesh) points to tessel's replicate()."""
    shard: object = None
    replicate: object = None

    def __post_init__(self):
        if self.shard is None and self.replicate is None:
            raise ValueError("At least one of shard or replicate must be set in DataParallelMeshDims")

    @property
    def shard_names(self):
        return () if self.shard is None else (self.shard,) if isinstance(self.shard, str) else tuple(self.shard)

    @property
    def replicate_names(self):
        return () if self.replicate is None else (self.replicate,) if isinstance(self.replicate, str) else \
            tuple(self.replicate)


def _mesh_axes(dp_mesh_dims, shard_axis, replicate_axis):
    """(shard_axis, replicate_axis) from torch's dp_mesh_dims, or tessel's own keywords."""
    if dp_mesh_dims is None:
        return shard_axis, replicate_axis
    if shard_axis is not None or replicate_axis is not None:
        raise ValueError("fully_shard: give dp_mesh_dims or shard_axis / replicate_axis, not both")
    shard, replicate = dp_mesh_dims.shard_names, dp_mesh_dims.replicate_names
    if len(shard) > 1 or len(replicate) > 1:
        raise NotImplementedError("fully_shard: dp_mesh_dims with several shard or replicate dims (%r, %r) would be "
                                  "flattened into one; pass a mesh with one dim for each" % (shard, replicate))
    # replicate dims only: torch's DDPMeshInfo (whole parameters, gradients all-reduced)
    return shard[0] if shard else None, replicate[0] if replicate else None


def _c_policies(mp_policy, offload_policy):
    """The C++ policies fully_shard takes (None for no mixed precision / no offload)."""
    if isinstance(offload_policy, (_C.MixedPrecisionPolicy, _C.CPUOffloadPolicy)) or \
            isinstance(mp_policy, (_C.MixedPrecisionPolicy, _C.CPUOffloadPolicy)):
        raise TypeError("fully_shard: pass tessel.distributed.fsdp's MixedPrecisionPolicy / CPUOffloadPolicy")
    if mp_policy is not None:
        if not isinstance(mp_policy, MixedPrecisionPolicy):
            raise TypeError("fully_shard: mp_policy must be a MixedPrecisionPolicy, got %s" % type(mp_policy).__name__)
        if mp_policy.param_dtype_override_fn is not None:
            raise NotImplementedError("MixedPrecisionPolicy(param_dtype_override_fn=...): a per-parameter param_dtype "
                                      "is not supported; shard the parameters to keep in their dtype in their own "
                                      "fully_shard call with param_dtype=None")
        mp_policy = _C.MixedPrecisionPolicy(mp_policy.param_dtype, mp_policy.reduce_dtype, mp_policy.output_dtype,
                                            mp_policy.cast_forward_inputs)
    if offload_policy is not None and not isinstance(offload_policy, OffloadPolicy):
        raise TypeError("fully_shard: offload_policy must be an OffloadPolicy, got %s" % type(offload_policy).__name__)
    if isinstance(offload_policy, CPUOffloadPolicy):
        offload_policy = _C.CPUOffloadPolicy(offload_policy.pin_memory)
    elif offload_policy is not None:  # the base OffloadPolicy: no offloading
        offload_policy = None
    return mp_policy, offload_policy


def _state(module):
    st = _C._fsdp_state(module)
    if st is None:
        raise RuntimeError("%s is not managed by fully_shard" % type(module).__name__)
    return st


class _FSDPModuleMeta(type):
    """isinstance(m, FSDPModule) is also True for a C++ layer (nn.Linear, nn.Embedding, ...) that fully_shard
    was applied to: such a layer keeps its class (_become_fsdp_module), but scripts find FSDP modules with
    isinstance, as torch's class swap lets them."""

    def __instancecheck__(cls, obj):
        if type.__instancecheck__(cls, obj):
            return True
        return cls is FSDPModule and isinstance(obj, _C.Module) and not obj._has_python_forward and \
            _C._fsdp_state(obj) is not None


class FSDPModule(metaclass=_FSDPModuleMeta):
    """Mixed into a module's class by fully_shard (torch's FSDPModule)."""

    def __new__(cls, *args, **kwargs):
        """A new instance of an FSDP class (Sequential's slicing builds type(self)(...)) is one of the original
        class, as torch's: only fully_shard makes FSDP modules."""
        orig = next(c for c in cls.__mro__[1:] if c is not FSDPModule and not issubclass(c, FSDPModule))
        self = orig.__new__(orig, *args, **kwargs) if orig.__new__ is not object.__new__ else orig.__new__(orig)
        self.__init__(*args, **kwargs)
        return self

    def unshard(self, async_op=False):
        """All-gathers the parameters; with async_op=True returns a handle whose wait() blocks until done
        (torch's UnshardHandle)."""
        st = _state(self)
        st.unshard(async_op)
        return UnshardHandle(st) if async_op else None

    def reshard(self):
        _state(self).reshard()

    def reset_iter_state(self):
        """torch's: on the root, after an exception aborted a forward or backward, waits for and drops the
        in-flight collectives (that iteration's pending gradient reductions are lost), reshards, and clears
        the iteration state. tessel's root also does this by itself at the next forward when the previous
        iteration was left unfinished."""
        _state(self).reset_iter_state()

    def set_is_last_backward(self, is_last_backward):
        """torch's: False makes the next backward return without waiting for its last gradient reduction (it
        completes in a later backward, first thing, or in the next last one), for microbatching; the last
        reduced group's .grad is set then. Before the first forward, call it on the root."""
        _state(self).set_is_last_backward(bool(is_last_backward))

    def set_manual_backward_finalization(self, enabled):
        """torch 2.15's: on the root, before backward. Enabled, a backward ends without reducing the groups whose
        post-backward did not run in it and without waiting for reductions; call finalize_backward() after the
        logical backward (several passes: with gradient sync off for all but the last), before reading .grad."""
        _state(self).set_manual_backward_finalization(bool(enabled))

    def finalize_backward(self, *, async_op=False):
        """torch 2.15's: runs the owed gradient reductions and reshards, then waits for every reduction (.grad
        set); with async_op=True returns a GradientReductionHandle whose wait() does the waiting."""
        st = _state(self)
        st.finish_pending_backward()
        if async_op:
            return GradientReductionHandle(st)
        st.wait_for_gradient_reduction()
        return None

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        _state(self).set_requires_gradient_sync(requires_gradient_sync, recurse)

    def set_requires_all_reduce(self, requires_all_reduce, *, recurse=True):
        """HSDP: False reduce-scatters without the replicate all-reduce, summing the reduced shards until a
        backward with True all-reduces them with its own (gradient accumulation); no effect without HSDP."""
        _state(self).set_requires_all_reduce(requires_all_reduce, recurse)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        """A bool replaces fully_shard's setting, an int size included (torch's setter takes bools only)."""
        if not isinstance(reshard_after_forward, bool):
            raise ValueError("reshard_after_forward should be a bool, got %s" % type(reshard_after_forward))
        _state(self).set_reshard_after_forward(reshard_after_forward, recurse)

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        _state(self).set_reshard_after_backward(reshard_after_backward, recurse)

    def set_modules_to_forward_prefetch(self, modules):
        _assert_all_fsdp_modules(modules)
        _state(self).set_modules_to_forward_prefetch([_state(m) for m in modules])

    def set_modules_to_backward_prefetch(self, modules):
        _assert_all_fsdp_modules(modules)
        _state(self).set_modules_to_backward_prefetch([_state(m) for m in modules])

    def set_post_optim_event(self, event):
        """torch's: the root's next all-gathers wait on `event` (recorded after the optimizer step) instead of the
        current stream. tessel's CPU ranks run the step before the next forward's all-gathers in program order, so
        there is nothing to wait on: the event (None included) is accepted and dropped, as torch drops it after
        one wait."""
        _state(self)  # a module fully_shard manages, as torch requires

    def set_gradient_divide_factor(self, factor):
        _state(self).set_gradient_divide_factor(factor)

    def set_reduce_scatter_divide_factor(self, factor):
        """Deprecated in torch: use set_gradient_divide_factor."""
        warnings.warn("set_reduce_scatter_divide_factor is deprecated: use set_gradient_divide_factor instead",
                      FutureWarning, stacklevel=2)
        self.set_gradient_divide_factor(factor)

    def set_force_sum_reduction_for_comms(self, enable):
        """True: gradient reductions send SUM (not AVG or a pre-divided SUM) and divide afterwards."""
        _state(self).set_force_sum_reduction_for_comms(enable)

    def set_separate_reduce_scatter_group(self, enable=True, *, recurse=True):
        """True: gradients are reduce-scattered on a process group of their own over the shard ranks (one per
        shard group, shared), so a reduce-scatter and the next all-gather no longer queue behind each other
        on one group (torch's; collective the first time for each shard group: call it alike on every rank).
        False: back to the shard group."""
        _state(self).set_separate_reduce_scatter_group(enable, recurse)

    def set_unshard_in_backward(self, unshard_in_backward):
        """False: backward does not all-gather this module's parameters (for modules whose backward reads none
        of them, e.g. an embedding); a backward that does read one raises RuntimeError (freed bytes)."""
        _state(self).set_unshard_in_backward(unshard_in_backward)

    def set_reduce_scatter_unused_params(self, reduce_scatter_unused_params, *, recurse=True):
        """torch 2.15's switch for parameters some ranks use and others do not (conditional branches, MoE):
        tessel's reduce-scatter always carries every parameter of the group, a rank without a gradient for one
        contributing zeros, with a flag per parameter so that one no rank used keeps grad None
        (fsdp/param_group.cc); True asks for what already happens, False cannot make ranks disagree."""
        if not isinstance(reduce_scatter_unused_params, bool):
            raise TypeError("reduce_scatter_unused_params should be a bool, got %s"
                            % type(reduce_scatter_unused_params).__name__)
        _state(self)  # a module fully_shard manages, as torch requires

    def set_all_reduce_hook(self, hook, *, stream=None):
        """hook(reduce_output) runs in each backward that reduces this module's parameters, on the reduced
        gradient block (this rank's shard of each parameter, padding included) after the reduce-scatter and
        the HSDP all-reduce; in-place changes reach .grad. stream (CUDA streams in torch) must be None."""
        if stream is not None:
            raise ValueError("set_all_reduce_hook: stream is not supported (the hook runs where FSDP reduces)")
        _state(self).set_all_reduce_hook(hook)


def _assert_all_fsdp_modules(modules):
    for module in modules:
        if not isinstance(module, FSDPModule):
            raise ValueError("Expects FSDPModule but got %s: %s" % (type(module), module))


def _unimplemented_deepcopy(*args, **kwargs):
    """torch's: an FSDP module does not deep-copy (its sharded parameters and state are shared with the groups)."""
    raise AssertionError("FSDP does not support deepcopy. Please use state dict for serialization.")


FSDPModule.__deepcopy__ = _unimplemented_deepcopy


class GradientReductionHandle:
    """What finalize_backward(async_op=True) returns: wait() blocks until every gradient reduction is done and
    .grad is set."""

    def __init__(self, state):
        self._state = state

    def wait(self):
        self._state.wait_for_gradient_reduction()


class UnshardHandle:
    """What unshard(async_op=True) returns: wait() blocks until the all-gather is done."""

    def __init__(self, state):
        self._state = state

    def wait(self):
        self._state.wait_for_unshard()


_METHODS = [name for name, v in vars(FSDPModule).items() if callable(v) and not name.startswith("_")]
_classes, _metas = {}, {}


def _default_mesh():
    # One 1-D mesh over the default group per rank thread (creating one is collective). As torch's, without a
    # default group fully_shard joins one (init_process_group(): a launched job's, from the environment).
    from .. import init_process_group, is_initialized
    if not is_initialized():
        init_process_group()
    mesh = getattr(_local, "mesh", None)
    if mesh is None or mesh.size() != get_world_size():
        mesh = _local.mesh = init_device_mesh("cpu", (get_world_size(),))
    return mesh


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None, mp_policy=None,
                offload_policy=None, ignored_params=None, dp_mesh_dims=None, shard_axis=None, replicate_axis=None):
    """Shards module's parameters over mesh (default: a 1-D mesh over the default process group).

    reshard_after_forward: free the unsharded parameters after forward (default: True, False for the root); an int r
    (a factor of the shard dim's size W) keeps them sharded over groups of r consecutive ranks instead, so backward
    all-gathers within such a group (e.g. one host) while each rank holds 1/r of the parameters until its backward
    (1 is False, W is True); mp_policy: MixedPrecisionPolicy; offload_policy: CPUOffloadPolicy. shard_axis /
    replicate_axis (tessel's; torch 2.15's dp_mesh_dims=DataParallelMeshDims(shard=, replicate=) names the same):
    the mesh dims FSDP shards over / all-reduces over (HSDP); unnamed, a 2-D mesh is (replicate, shard) by position,
    as torch's, unless the names say otherwise ("dp_shard", "dp_replicate" reversed, or "tp"). Returns module; a
    module defined in Python becomes an instance of FSDPModule; a C++ layer (nn.Linear, ...) keeps its class and gets
    FSDPModule's methods (isinstance(layer, FSDPModule) holds for it too). A list of modules (torch 2.6) becomes one
    group: one all-gather when the first of them runs, resharded when all have run; each becomes an FSDPModule
    steering that group; the list is returned. ignored_params: a set of parameters this call leaves alone: not
    sharded, not all-gathered, their gradients not reduced (each rank keeps its local one); parameters of other
    modules may be in it. shard_placement_fn: called with each parameter this call shards, returns Shard(d) to shard
    its dim d (the size must divide evenly by the shard dim's size unless d is 0: NotImplementedError otherwise, as
    torch) or None for Shard(0). As torch's: a second fully_shard of a module is an AssertionError, a ModuleList /
    ModuleDict (no forward) a ValueError, a 2-D mesh without mesh_dim_names an AssertionError; without a default
    process group, mesh=None joins one (init_process_group() from the launcher's environment)."""
    from .._composable.contract import _get_registry
    for m in (module if isinstance(module, (list, tuple)) else [module]):
        if not isinstance(m, _C.Module):
            continue  # (the C++ TypeError names it)
        if "fully_shard" in (_get_registry(m) or {}):  # torch's @contract
            raise AssertionError("Each distinct composable distributed API can only be applied to a module once. "
                                 "fully_shard has already been applied to the following module:\n%s" % m)
        _validate_module(m, "fully_shard")
    mesh = mesh if mesh is not None else _default_mesh()
    _validate_mesh(mesh, dp_mesh_dims)
    return _apply_fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward,
                        shard_placement_fn=_checked_placement_fn(shard_placement_fn), mp_policy=mp_policy,
                        offload_policy=offload_policy, ignored_params=ignored_params, dp_mesh_dims=dp_mesh_dims,
                        shard_axis=shard_axis, replicate_axis=replicate_axis)


def _apply_fully_shard(module, *, mesh, reshard_after_forward=None, shard_placement_fn=None, mp_policy=None,
                       offload_policy=None, ignored_params=None, dp_mesh_dims=None, shard_axis=None,
                       replicate_axis=None):
    """fully_shard without torch's checks of the module and mesh (FullyShardedDataParallel's units: FSDP1 takes
    a 2-D mesh without mesh_dim_names for HYBRID_SHARD, and any module)."""
    mp_policy, offload_policy = _c_policies(mp_policy, offload_policy)
    shard_axis, replicate_axis = _mesh_axes(dp_mesh_dims, shard_axis, replicate_axis)
    ignored = list(ignored_params) if ignored_params is not None else []
    for p in ignored:
        if not isinstance(p, _C.Tensor):
            raise TypeError("fully_shard: ignored_params must hold parameters (tensors), got %s" % type(p).__name__)
    mesh = mesh if mesh is not None else _default_mesh()
    _C.fully_shard(list(module) if isinstance(module, (list, tuple)) else module, mesh, reshard_after_forward,
                   mp_policy, offload_policy, shard_axis, replicate_axis, ignored, shard_placement_fn)
    from .._composable.contract import _register
    for m in (module if isinstance(module, (list, tuple)) else [module]):
        _become_fsdp_module(m)
        _register(m, "fully_shard")  # torch's composable registry (_get_registry; replicate refuses it)
    return module


def _state_of(module):
    """fully_shard.state(module), torch's: the FSDP state of a module fully_shard was applied to (tessel's C++
    state object), else None."""
    return _C._fsdp_state(module)


fully_shard.state = _state_of


def _validate_module(module, func_name):
    """torch's: a ModuleList / ModuleDict that does not define forward is refused (it never runs, so its
    parameters would never be all-gathered)."""
    from ...nn import Module, ModuleDict, ModuleList
    if isinstance(module, (ModuleList, ModuleDict)) and \
            type(module).forward in (Module.forward, ModuleList.forward, ModuleDict.forward):
        raise ValueError("%s does not support containers that do not implement forward: %s" % (func_name, module))


def _validate_mesh(mesh, dp_mesh_dims):
    """torch's checks of a mesh without mesh_dim_names (tessel's internal dim names must not stand in)."""
    if not isinstance(mesh, _C.DeviceMesh) or mesh.mesh_dim_names is not None:
        return  # (the C++ TypeError names a mesh that is not one)
    if dp_mesh_dims is not None:
        raise ValueError("mesh must have mesh_dim_names when dp_mesh_dims is provided")
    if mesh.ndim == 2:
        raise AssertionError("Please init the 2D mesh for HSDP with mesh_dim_names specified")


def _checked_placement_fn(fn):
    """shard_placement_fn with torch's ValueError for a result that is neither None nor a Shard."""
    if fn is None or not callable(fn):
        return fn  # (None, or the C++ TypeError for a non-callable)

    def checked(param):
        result = fn(param)
        if result is not None and not isinstance(result, _C.Shard):
            raise ValueError("Invalid shard_placement_fn result: %s" % (result,))
        return result
    return checked


def register_fsdp_forward_method(module, method_name):
    """Makes module.<method_name> run as a forward for FSDP: its parameters are all-gathered before it
    and resharded after it, as around forward (torch's register_fsdp_forward_method, e.g. for a generate or
    loss method that does not call forward). A no-op for a module fully_shard was not applied to."""
    if _C._fsdp_state(module) is None:
        return
    if not hasattr(module, method_name):
        raise ValueError("%s does not have a method %s" % (type(module), method_name))
    from ...nn.modules import _has_dict
    if not _has_dict(module):
        raise TypeError("register_fsdp_forward_method: %s was created in C++ and has no __dict__ to hold the wrapped "
                        "%s; register the method on a module defined in Python" % (module._type_name, method_name))
    from ...nn.modules import _flatten_output, _fsdp_cast_inputs, _outputs
    orig = getattr(module, method_name)

    @functools.wraps(orig)
    def wrapped(*args, **kwargs):
        args, kwargs = _fsdp_cast_inputs(module, args, kwargs)
        slots = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        rebuild = []

        def run(tensors):  # the tensor arguments as the pre-forward left them (cast, wrapped)
            call_args = list(args)
            for i, t in zip(slots, tensors):
                call_args[i] = t
            outs = []
            rebuild.append(_flatten_output(orig(*call_args, **kwargs), outs))
            return outs

        outs = _state(module).call_as_forward([args[i] for i in slots], run)
        return _outputs(outs, rebuild[0])

    module.__dict__[method_name] = wrapped


def _become_fsdp_module(module, mixin=None, prefix="FSDP"):
    """torch's class swap: a Python-defined module becomes an instance of `mixin` (FSDPModule, or a subclass:
    replicate_with_fsdp's ReplicateModule) under the class name prefix + its own; a C++ layer gets its methods on
    the instance."""
    mixin = mixin or FSDPModule
    cls = type(module)
    # NOTE: only Python-defined modules change class: a Python subclass of a C++ layer class (which has
    # py::dynamic_attr) would leak through pybind11 2.10's double GC visit (bindings/nn_py.cc). C++ layers
    # keep their class; their FSDP state is reached with _C._fsdp_state.
    if module._has_python_forward and not issubclass(cls, FSDPModule):
        if (cls, mixin) not in _classes:
            base = type(cls)
            if base not in _metas:  # FSDPModule's metaclass and the class's own (pybind11's)
                _metas[base] = type("_FSDP" + base.__name__, (_FSDPModuleMeta, base), {})
            meta = _metas[base]
            _classes[cls, mixin] = meta(prefix + cls.__name__, (mixin, cls), {"__module__": cls.__module__})
        module.__class__ = _classes[cls, mixin]
    elif not module._has_python_forward:
        # A C++ layer: the methods on the instance (isinstance(m, FSDPModule) holds through _FSDPModuleMeta); a
        # module C++ created without a Python class of its own (tessel.nn.GPT's blocks) has no __dict__: Module's
        # __getattr__ finds them (tessel/nn/modules.py, _fsdp_method).
        from ...nn.modules import _has_dict
        if not _has_dict(module):
            return
        import types
        for name in _METHODS + ["__deepcopy__"]:
            setattr(module, name, types.MethodType(getattr(FSDPModule, name), module))


from .api import (BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,  # noqa: E402
                  LocalOptimStateDictConfig, LocalStateDictConfig, MixedPrecision, OptimStateDictConfig,
                  ShardedOptimStateDictConfig, ShardedStateDictConfig, ShardingStrategy, StateDictConfig,
                  StateDictSettings, StateDictType)
from .fully_sharded_data_parallel import FullyShardedDataParallel, OptimStateKeyType  # noqa: E402
from . import wrap  # noqa: E402,F401
