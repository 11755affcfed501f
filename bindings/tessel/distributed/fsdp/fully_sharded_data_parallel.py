"""tessel.distributed.fsdp.FullyShardedDataParallel: torch's FSDP1 wrapper, built on fully_shard (FSDP2).

    model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                     sharding_strategy=ShardingStrategy.FULL_SHARD,
                                     mixed_precision=MixedPrecision(param_dtype=tessel.bfloat16))
    opt = tessel.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn(model(x), y).backward(); model.clip_grad_norm_(1.0); opt.step()
    with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                                  FullStateDictConfig(rank0_only=True)):
        state = model.state_dict()                  # full tensors on rank 0, clean keys

Each FullyShardedDataParallel holds the module it wraps as `_fsdp_wrapped_module` (`.module`) and applies
fully_shard to it: the auto-wrap policy first turns the chosen submodules into units of their own (bottom-up,
each replaced in its parent by its wrapper), then the call shards what is left. The sharding strategy maps to
fully_shard's arguments: FULL_SHARD reshards after forward (except the root, as FSDP1), SHARD_GRAD_OP keeps
parameters unsharded until backward; NO_SHARD runs on a (world, 1) mesh (one gradient all-reduce, no gathers);
HYBRID_SHARD and _HYBRID_SHARD_ZERO2 on a 2-D (replicate, shard) mesh: device_mesh=, else LOCAL_WORLD_SIZE ranks
per node. MixedPrecision maps to MixedPrecisionPolicy (reduce_dtype None: param_dtype's, as FSDP1); CPUOffload to
CPUOffloadPolicy.

What differs from torch's FSDP1, by design: parameters stay per-parameter DTensor shards under their own
names (what torch's use_orig_params=True keeps; there are no FlatParameters, whatever use_orig_params says),
so an optimizer over model.parameters() steps exactly as torch's. SHARDED_STATE_DICT values are DTensors
(torch's _use_dtensor form); LOCAL_STATE_DICT (FlatParameter shards) does not exist. Prefetching follows
fully_shard's (backward_prefetch, forward_prefetch and limit_all_gathers are accepted and change nothing).
Floating buffers are not cast (buffer_dtype must match them), and summon_full_params under a param_dtype
raises (fully_shard unshards in the compute dtype, and torch hands out full precision).
"""
import contextlib
import enum
import os
import threading

from ... import _C
from ...nn.modules import Module, _parent_of
from .. import _default_group, get_world_size
from ..device_mesh import DeviceMesh, init_device_mesh
from . import _apply_fully_shard as _fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy  # (no torch checks)
# (the configs are imported from here too, as from torch's fully_sharded_data_parallel module)
from .api import (BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,  # noqa: F401
                  LocalStateDictConfig, MixedPrecision, OptimStateDictConfig, ShardedOptimStateDictConfig,
                  ShardedStateDictConfig, ShardingStrategy, StateDictConfig, StateDictSettings, StateDictType)
from .wrap import _recursive_wrap

FSDP_WRAPPED_MODULE = "_fsdp_wrapped_module"
_PREFIX = FSDP_WRAPPED_MODULE + "."
_HYBRID = (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
# None: fully_shard's default, True except for the root, whose parameters stay for the backward that follows
# (FSDP1 does not free the root's after forward either).
_RESHARD_AFTER_FORWARD = {ShardingStrategy.FULL_SHARD: None, ShardingStrategy.SHARD_GRAD_OP: False,
                          ShardingStrategy.NO_SHARD: False, ShardingStrategy.HYBRID_SHARD: None,
                          ShardingStrategy._HYBRID_SHARD_ZERO2: False}
_meshes = threading.local()  # per rank thread: (group id, strategy kind) -> the mesh every unit of a call shares


def _clean(name):
    return name.replace(_PREFIX, "")


def _strategy_mesh(strategy, process_group, device_mesh):
    """The mesh fully_shard gets for this strategy (made once per rank thread and group: making one is
    collective, and every unit of a model shares it)."""
    hybrid = strategy in _HYBRID
    if device_mesh is not None:
        if hybrid and device_mesh.ndim != 2:
            raise ValueError("FullyShardedDataParallel: %s needs a 2-D device_mesh (replicate, shard), got %d-D"
                             % (strategy.name, device_mesh.ndim))
        if not hybrid and device_mesh.ndim != 1:
            raise ValueError("FullyShardedDataParallel: %s takes a 1-D device_mesh, got %d-D (HYBRID_SHARD "
                             "takes 2-D)" % (strategy.name, device_mesh.ndim))
        if strategy is not ShardingStrategy.NO_SHARD:
            return device_mesh
        if device_mesh.size() != get_world_size():
            raise NotImplementedError("FullyShardedDataParallel: NO_SHARD over a device_mesh smaller than the "
                                      "world: pass none (the default group)")
    if isinstance(process_group, tuple):
        raise NotImplementedError("FullyShardedDataParallel: a (intra-node, inter-node) process_group pair: pass "
                                  "device_mesh=init_device_mesh('cpu', (nodes, ranks_per_node)) instead")
    default = process_group is None or process_group is _default_group("FullyShardedDataParallel")
    if not default and (hybrid or strategy is ShardingStrategy.NO_SHARD):
        raise NotImplementedError("FullyShardedDataParallel: %s over a process_group other than the default "
                                  "group: pass device_mesh=" % strategy.name)
    group = process_group if process_group is not None else _default_group("FullyShardedDataParallel")
    kind = "hybrid" if hybrid else ("replicate" if strategy is ShardingStrategy.NO_SHARD else "shard")
    cache = _meshes.__dict__.setdefault("meshes", {})
    key = (id(group), kind, get_world_size())
    if key not in cache:
        world = get_world_size()
        if kind == "shard":
            mesh = DeviceMesh.from_group(group, "cpu")
        elif kind == "replicate":
            mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp_replicate", "dp_shard"))
        else:
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            if per_node <= 0 or world % per_node != 0:
                raise ValueError("FullyShardedDataParallel: %s needs the world size (%d) to be a multiple of "
                                 "LOCAL_WORLD_SIZE (%d)" % (strategy.name, world, per_node))
            mesh = init_device_mesh("cpu", (world // per_node, per_node), mesh_dim_names=("dp_replicate", "dp_shard"))
        cache[key] = (group, mesh)  # the group is kept so its id is not reused while the mesh is cached
    return cache[key][1]


def _mp_policy(mp, root):
    if mp is None or (mp.param_dtype is None and mp.reduce_dtype is None):
        return None
    if mp.keep_low_precision_grads:
        raise NotImplementedError("MixedPrecision(keep_low_precision_grads=True): gradients are reduced and kept "
                                  "in the parameters' dtype")
    cast = mp.cast_forward_inputs or (root and mp.cast_root_forward_inputs)
    return MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype or mp.param_dtype,
                                cast_forward_inputs=cast)


def _batch_norm_classes():
    from ... import nn
    return tuple(getattr(nn, n) for n in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
                 if hasattr(nn, n))


def _check_buffers(module, mp):
    if mp is None or mp.buffer_dtype is None:
        return
    for name, b in module.named_buffers():
        if b is not None and b.is_floating_point() and b.dtype != mp.buffer_dtype:
            raise NotImplementedError("FullyShardedDataParallel: MixedPrecision(buffer_dtype=%s) would cast the "
                                      "buffer '%s' (%s); tessel does not cast buffers: leave buffer_dtype None"
                                      % (mp.buffer_dtype, _clean(name), b.dtype))


def _materialize_meta(module, param_init_fn, ignored_modules):
    """torch's _materialize_module: a module built under tessel.device("meta") (a parameter or buffer
    is_meta) gets param_init_fn(m) for each of its modules, breadth first, ignored ones and their subtrees
    skipped; without param_init_fn, each such module's to_empty(recurse=False) and reset_parameters() (where it
    has one). A module with no meta tensor is left alone, param_init_fn or not, as torch's."""
    tensors = list(module.parameters()) + [b for b in module.buffers() if b is not None]
    if not any(t.is_meta for t in tensors):
        return
    skip = {id(m) for m in ignored_modules}
    order, queue = [], [module]
    while queue:
        m = queue.pop(0)
        if id(m) in skip or isinstance(m, FullyShardedDataParallel):
            continue
        order.append(m)
        queue.extend(child for _, child in m.named_children())
    for m in order:
        if param_init_fn is not None:
            param_init_fn(m)
            continue
        m.to_empty(device="cpu", recurse=False)
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            with _C._GradMode(False):
                reset()


class OptimStateKeyType(enum.Enum):
    """torch's: how an FSDP1 optimizer state dict names parameters (rekey_optim_state_dict)."""
    PARAM_NAME = enum.auto()
    PARAM_ID = enum.auto()


class FullyShardedDataParallel(Module):
    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None, auto_wrap_policy=None,
                 backward_prefetch=BackwardPrefetch.BACKWARD_PRE, mixed_precision=None, ignored_modules=None,
                 param_init_fn=None, device_id=None, sync_module_states=False, forward_prefetch=False,
                 limit_all_gathers=True, use_orig_params=False, ignored_states=None, device_mesh=None,
                 _is_root_call=True, _mesh=None):
        super().__init__()
        from ... import distributed as dist
        if device_id is not None and str(device_id) not in ("cpu", "-1"):
            raise NotImplementedError("FullyShardedDataParallel(device_id=%s): tessel's Python face runs on the "
                                      "CPU; pass no device_id" % (device_id,))
        if ignored_modules is not None and ignored_states is not None:
            raise ValueError("Cannot pass both ignored_modules and ignored_states at the same time. Please just "
                             "pass ignored_states.")
        if isinstance(module, FullyShardedDataParallel):
            raise ValueError("FullyShardedDataParallel: the module is already wrapped")
        strategy = sharding_strategy or ShardingStrategy.FULL_SHARD
        mesh = _mesh if _mesh is not None else _strategy_mesh(strategy, process_group, device_mesh)
        ignored_mods, ignored_params = [], {}
        for item in list(ignored_modules or []) + list(ignored_states or []):
            if isinstance(item, _C.Tensor):
                ignored_params[hash(item)] = item
            else:
                ignored_mods.append(item)
                for p in item.parameters():
                    ignored_params[hash(p)] = p
        _materialize_meta(module, param_init_fn, ignored_mods)
        self.sharding_strategy = strategy
        self.mixed_precision = mixed_precision
        self.cpu_offload = cpu_offload or CPUOffload()
        self.backward_prefetch, self.forward_prefetch = backward_prefetch, forward_prefetch
        self.limit_all_gathers, self._use_orig_params = limit_all_gathers, use_orig_params
        self.process_group = mesh.get_group(mesh.ndim - 1)  # the shard dim's group (HSDP: the last dim)
        self.rank, self.world_size = dist.get_rank(), get_world_size()
        self._device_mesh = mesh
        self._settings = StateDictSettings(StateDictType.FULL_STATE_DICT, FullStateDictConfig(),
                                           FullOptimStateDictConfig())
        if sync_module_states:  # the group's first rank's parameters and buffers, before anything is sharded
            group = process_group if process_group is not None and not isinstance(process_group, tuple) else None
            root = dist.get_global_rank(group, 0) if group is not None else 0
            with _C._GradMode(False):  # (DTensors are an inner unit's, synced by its own call)
                for t in [p for p in module.parameters()] + [b for b in module.buffers() if b is not None]:
                    if not t.is_distributed:
                        dist.broadcast(t, src=root, group=group)
        _check_buffers(module, mixed_precision)
        if auto_wrap_policy is not None:
            for name, m in module.named_modules():
                if isinstance(m, FullyShardedDataParallel):
                    raise ValueError("FSDP auto wrapping requires modules to not already have FSDP applied but "
                                     "found %s in %s" % (name, type(module).__name__))
            kwargs = dict(process_group=process_group, sharding_strategy=strategy, cpu_offload=cpu_offload,
                          backward_prefetch=backward_prefetch, mixed_precision=mixed_precision,
                          forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                          use_orig_params=use_orig_params, _mesh=mesh, _is_root_call=False)
            kwargs["ignored_states"] = list(ignored_params.values()) or None
            unmixed = ()
            if mixed_precision is not None:
                ignore = mixed_precision._module_classes_to_ignore
                unmixed = _batch_norm_classes() if ignore is None else tuple(ignore)

            def wrap_fn(m, overrides):
                args = dict(kwargs, **overrides)
                return FullyShardedDataParallel(m, **args)

            def policy(module, recurse, nonwrapped_numel):
                if unmixed and isinstance(module, unmixed):  # torch: batch norm in a full-precision unit
                    return True if recurse else {"mixed_precision": None}
                return auto_wrap_policy(module=module, recurse=recurse, nonwrapped_numel=nonwrapped_numel)

            _recursive_wrap(module, policy, wrap_fn, ignored_mods, ignored_params, only_wrap_children=True)
        _detach_from_parent(module)
        self._fsdp_wrapped_module = module
        for m in module.modules():  # the units inside this one are not roots (torch's root: the outermost)
            if isinstance(m, FullyShardedDataParallel):
                object.__setattr__(m, "_fsdp_nonroot", True)
        offload = CPUOffloadPolicy() if self.cpu_offload.offload_params else None
        _fully_shard(module, mesh=mesh, reshard_after_forward=_RESHARD_AFTER_FORWARD[strategy],
                     mp_policy=_mp_policy(mixed_precision, _is_root_call), offload_policy=offload,
                     ignored_params=list(ignored_params.values()) or None)

    @property
    def module(self):
        return self._fsdp_wrapped_module

    def forward(self, *args, **kwargs):
        return self._fsdp_wrapped_module(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == FSDP_WRAPPED_MODULE:
                raise
            return getattr(self._fsdp_wrapped_module, name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module.__getitem__(key)

    def _state(self):
        return _C._fsdp_state(self._fsdp_wrapped_module)

    # -- names without the wrapper's prefix (torch's clean tensor names) ----------------------------------

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            yield _clean(name), p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        for name, b in super().named_buffers(prefix, recurse, remove_duplicate):
            yield _clean(name), b

    # -- gradient sync, clipping ------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate unsharded gradients without reducing them; the first backward
        after reduces the sum (torch's no_sync; FSDP2's set_requires_gradient_sync(False))."""
        st = self._state()
        st.set_requires_gradient_sync(False, True)
        try:
            yield
        finally:
            st.set_requires_gradient_sync(True, True)

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scales the gradients so that their norm over all ranks (the norm of the unsharded gradients) is
        at most max_norm; returns that total norm (one all-reduce: tessel.nn.utils.clip_grad_norm_)."""
        if getattr(self, "_fsdp_nonroot", False):  # (it clipped that unit's gradients alone by their own norm)
            raise RuntimeError("clip_grad_norm_() should only be called on the root FSDP instance")
        from ...nn.utils import clip_grad_norm_
        return clip_grad_norm_(list(self.parameters()), max_norm, norm_type)

    def apply(self, fn):
        """fn on every submodule (then self) with this unit's parameters unsharded and written back after,
        as torch's FSDP1 apply (nested units unshard their own when their apply runs)."""
        with _summon(self, recurse=False, writeback=True, rank0_only=False):
            return super().apply(fn)

    # -- state dicts ----------------------------------------------------------------------------------

    @staticmethod
    def fsdp_modules(module, root_only=False):
        found = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        return _roots_of(module) if root_only else found

    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        """Sets the state dict type of every FSDP module in module; returns the previous settings. Deprecated in
        torch 2.15 for get_state_dict / set_state_dict, with its FutureWarning."""
        import warnings
        warnings.warn("FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated. Please use APIs, "
                      "get_state_dict() and set_state_dict(), which can support different parallelisms, FSDP1, FSDP2, "
                      "DDP. API doc: https://pytorch.org/docs/stable/distributed.checkpoint.html"
                      "#torch.distributed.checkpoint.state_dict.get_state_dict .Tutorial: "
                      "https://pytorch.org/tutorials/recipes/distributed_checkpoint_recipe.html .", FutureWarning,
                      stacklevel=2)
        if state_dict_type is StateDictType.LOCAL_STATE_DICT:
            raise NotImplementedError("StateDictType.LOCAL_STATE_DICT holds FlatParameter shards, which tessel "
                                      "does not have: use SHARDED_STATE_DICT (DTensors) or FULL_STATE_DICT")
        defaults = {StateDictType.FULL_STATE_DICT: (FullStateDictConfig, FullOptimStateDictConfig),
                    StateDictType.SHARDED_STATE_DICT: (ShardedStateDictConfig, ShardedOptimStateDictConfig)}
        config_cls, optim_cls = defaults[state_dict_type]
        config = state_dict_config if state_dict_config is not None else config_cls()
        optim_config = optim_state_dict_config if optim_state_dict_config is not None else optim_cls()
        if not isinstance(config, config_cls) or not isinstance(optim_config, optim_cls):
            raise RuntimeError("Expected state_dict_config of type %s and optim_state_dict_config of type %s for "
                               "%s, got %s and %s" % (config_cls.__name__, optim_cls.__name__, state_dict_type,
                                                      type(config).__name__, type(optim_config).__name__))
        units = FullyShardedDataParallel.fsdp_modules(module)
        if not units:
            raise ValueError("set_state_dict_type: %s holds no FullyShardedDataParallel module"
                             % type(module).__name__)
        previous = units[0]._settings
        for m in units:
            m._settings = StateDictSettings(state_dict_type, config, optim_config)
        return previous

    @staticmethod
    def get_state_dict_type(module):
        units = FullyShardedDataParallel.fsdp_modules(module)
        if not units:
            raise ValueError("get_state_dict_type: %s holds no FullyShardedDataParallel module"
                             % type(module).__name__)
        if any(m._settings != units[0]._settings for m in units):
            raise ValueError("All FSDP modules should have the same state_dict settings")
        return units[0]._settings

    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        previous = FullyShardedDataParallel.set_state_dict_type(module, state_dict_type, state_dict_config,
                                                                optim_state_dict_config)
        try:
            yield
        finally:
            for m in FullyShardedDataParallel.fsdp_modules(module):
                m._settings = previous

    def _full(self):
        return self._settings.state_dict_type is StateDictType.FULL_STATE_DICT

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """FULL_STATE_DICT (the default): the unsharded tensors on every rank (FullStateDictConfig(rank0_only=
        True): on global rank 0 only, the others get {}); SHARDED_STATE_DICT: the DTensor shards. Keys are the
        wrapped model's own (no _fsdp_wrapped_module)."""
        from .. import get_rank
        from ..checkpoint.state_dict import StateDictOptions, get_model_state_dict
        sd = get_model_state_dict(self._fsdp_wrapped_module, options=StateDictOptions(full_state_dict=self._full()))
        out = destination if destination is not None else {}
        if self._full() and self._settings.state_dict_config.rank0_only and get_rank() != 0:
            return out
        for key, value in sd.items():
            out[prefix + _clean(key)] = value
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Loads a state dict of the type set (FULL: full tensors, sliced to this rank's shards; SHARDED:
        DTensors) under the wrapped model's own keys."""
        from ..checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
        if assign:
            raise NotImplementedError("FullyShardedDataParallel.load_state_dict(assign=True): the parameters are "
                                      "sharded; load without assign")
        raw = {_clean(k): k for k in get_model_state_dict(self._fsdp_wrapped_module)}
        renamed = {raw.get(k, k): v for k, v in state_dict.items()}
        missing, unexpected = set_model_state_dict(
            self._fsdp_wrapped_module, renamed, options=StateDictOptions(full_state_dict=self._full(), strict=strict))
        from ...nn.modules import _IncompatibleKeys
        return _IncompatibleKeys([_clean(k) for k in missing], [_clean(k) for k in unexpected])

    @staticmethod
    def optim_state_dict(model, optim, optim_state_dict=None, group=None):
        """optim's state keyed by parameter name (torch's FSDP1 layout: {"state": {fqn: {name: value}},
        "param_groups": [{..., "params": [fqn, ...]}]}); values full tensors under FULL_STATE_DICT (on global
        rank 0 only with FullOptimStateDictConfig(rank0_only=True)), DTensors under SHARDED_STATE_DICT."""
        from .. import get_rank
        settings = FullyShardedDataParallel.get_state_dict_type(model)
        full = settings.state_dict_type is StateDictType.FULL_STATE_DICT
        sd = optim_state_dict if optim_state_dict is not None else optim.state_dict()
        fqns = _optim_fqns(model, optim)
        state = {}
        for pid, entries in sd["state"].items():
            state[fqns[pid]] = {k: (v.full_tensor() if full and isinstance(v, _C.Tensor) and v.is_distributed else v)
                                for k, v in entries.items()}
        if full and settings.optim_state_dict_config.rank0_only and get_rank() != 0:
            return {}
        groups = [dict(g, params=[fqns[i] for i in g["params"]]) for g in sd["param_groups"]]
        return {"state": state, "param_groups": groups}

    @staticmethod
    def optim_state_dict_to_load(model, optim, optim_state_dict, is_named_optimizer=False, load_directly=False,
                                 group=None):
        """optim_state_dict's result turned back into optim.load_state_dict's form for this rank: ids for
        names, full tensors sliced to this rank's shard of each parameter (a state dict that only global rank
        0 holds, from FullOptimStateDictConfig(rank0_only=True), is broadcast from it first). load_directly:
        also loads it."""
        from ... import distributed as dist
        settings = FullyShardedDataParallel.get_state_dict_type(model)
        if settings.state_dict_type is StateDictType.FULL_STATE_DICT and settings.optim_state_dict_config.rank0_only:
            box = [optim_state_dict if dist.get_rank() == 0 else None]
            dist.broadcast_object_list(box, src=0)
            optim_state_dict = box[0]
        out = _to_load_form(model, [p for g in optim.param_groups for p in g["params"]], optim_state_dict,
                            len(optim.param_groups))
        if load_directly:
            optim.load_state_dict(out)
        return out

    @staticmethod
    def full_optim_state_dict(model, optim, optim_input=None, rank0_only=True, group=None):
        """torch's FSDP1 (deprecated there for optim_state_dict): optim's state with full tensors in
        torch.optim's layout, keyed by parameter ids (the optimizer's order); {} on ranks other than 0 with
        rank0_only. Collective."""
        _warn_legacy("full_optim_state_dict", "optim_state_dict")
        from .. import get_rank
        fqns = _optim_fqns(model, optim)
        named = _named_full(fqns, optim.state_dict())
        if rank0_only and get_rank() != 0:
            return {}
        return FullyShardedDataParallel.rekey_optim_state_dict(named, OptimStateKeyType.PARAM_ID, model, optim=optim)

    @staticmethod
    def shard_full_optim_state_dict(full_optim_state_dict, model, optim_input=None, optim=None):
        """torch's FSDP1: a full optimizer state dict (from full_optim_state_dict, keyed by ids or names) as this
        rank's optim.load_state_dict input: each full tensor sliced to this rank's shard of its parameter; ids
        follow optim's parameters, or model.parameters() without optim (torch's optim_input=None)."""
        _warn_legacy("shard_full_optim_state_dict", "optim_state_dict_to_load")
        return _shard_full(full_optim_state_dict, model, optim)

    @staticmethod
    def scatter_full_optim_state_dict(full_optim_state_dict, model, optim_input=None, optim=None, group=None):
        """torch's FSDP1: shard_full_optim_state_dict of the full dict that rank 0 holds (the others may pass
        None); collective."""
        _warn_legacy("scatter_full_optim_state_dict", "optim_state_dict_to_load")
        from ... import distributed as dist
        box = [full_optim_state_dict if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0, group=group)
        return _shard_full(box[0], model, optim)

    @staticmethod
    def rekey_optim_state_dict(optim_state_dict, optim_state_key_type, model, optim_input=None, optim=None):
        """torch's FSDP1: an optimizer state dict's parameter keys (state and param_groups' params) as
        parameter names (OptimStateKeyType.PARAM_NAME) or ids (PARAM_ID; optim's order, or model.parameters()
        without optim); keys already of that kind stay."""
        names = dict(enumerate(_fqn_of(model, p) for p in _param_order(model, optim)))
        if optim_state_key_type == OptimStateKeyType.PARAM_ID:
            convert = {name: i for i, name in names.items()}
        elif optim_state_key_type == OptimStateKeyType.PARAM_NAME:
            convert = names
        else:
            raise ValueError("rekey_optim_state_dict: optim_state_key_type must be an OptimStateKeyType, got %r"
                             % (optim_state_key_type,))

        def key(k):
            if k in convert:
                return convert[k]
            if k in convert.values():
                return k
            raise ValueError("rekey_optim_state_dict: the state dict names parameter %r, which is not in the model"
                             % (k,))
        return {"state": {key(k): v for k, v in optim_state_dict.get("state", {}).items()},
                "param_groups": [dict(g, params=[key(k) for k in g["params"]])
                                 for g in optim_state_dict.get("param_groups", [])]}

    @staticmethod
    @contextlib.contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False, offload_to_cpu=False,
                           with_grads=False):
        """Inside, the FSDP units' parameters are the full tensors (rank0_only: on global rank 0 only);
        writeback=True copies in-place changes made to them back into each rank's shard on exit."""
        if with_grads:
            raise NotImplementedError("summon_full_params(with_grads=True): the gradients stay sharded")
        if rank0_only and writeback:
            raise NotImplementedError("writeback=True and rank0_only=True is not supported, as model parameter "
                                      "shapes will be different across ranks, and writing to them can lead to "
                                      "inconsistencies across ranks when the context is exited.")
        with _summon(module, recurse, writeback, rank0_only):
            yield


class _WrappedElsewhere(Module):
    """Holds a module's place in its parent while FullyShardedDataParallel wraps it, so the parent cannot
    call the module around the wrapper (its parameters are the wrapper's shards now): `parent.child =
    FSDP(parent.child)` and auto-wrapping put the wrapper there next."""

    def forward(self, *args, **kwargs):
        raise RuntimeError("this submodule was wrapped by FullyShardedDataParallel, which now holds it: put the "
                           "wrapper in its place (parent.child = FullyShardedDataParallel(parent.child))")


def _detach_from_parent(module):
    parent = _parent_of(module)
    if parent is None:
        return
    for name, child in parent._named_children():
        if child is module:  # every name it has there
            setattr(parent, name, _WrappedElsewhere())


def _roots_of(module):
    """The outermost FSDP modules in module (module itself when it is one)."""
    roots, inside = [], set()
    for m in module.modules():
        if not isinstance(m, FullyShardedDataParallel) or id(m) in inside:
            continue
        roots.append(m)
        inside.update(id(d) for d in m.modules())
    return roots


def _shard_full(full_optim_state_dict, model, optim):
    named = FullyShardedDataParallel.rekey_optim_state_dict(full_optim_state_dict, OptimStateKeyType.PARAM_NAME, model,
                                                            optim=optim)
    return _to_load_form(model, _param_order(model, optim), named,
                         len(optim.param_groups) if optim is not None else None)


def _warn_legacy(curr, new):
    """torch's FutureWarning for FSDP1's older optimizer state dict functions."""
    import warnings
    warnings.warn("``FullyShardedDataParallel.%s``is being deprecated and is replaced by "
                  "``FullyShardedDataParallel.%s``. ``FullyShardedDataParallel.%s`` may be removed after PyTorch 2.2."
                  % (curr, new, curr), FutureWarning, stacklevel=3)


def _param_order(model, optim):
    """The parameters optimizer state ids number: optim's groups in order, or model.parameters()."""
    if optim is not None:
        return [p for g in optim.param_groups for p in g["params"]]
    return list(model.parameters())


def _fqn_of(model, p):
    for name, q in model.named_parameters():
        if q is p or hash(q) == hash(p):
            return name
    raise ValueError("the optimizer holds a parameter (%s) that is not in the model" % (tuple(p.shape),))


def _named_full(fqns, sd):
    """torch.optim's state dict keyed by parameter names, every DTensor value full (collective)."""
    state = {fqns[pid]: {k: (v.full_tensor() if isinstance(v, _C.Tensor) and v.is_distributed else v)
                         for k, v in entries.items()} for pid, entries in sd["state"].items()}
    return {"state": state, "param_groups": [dict(g, params=[fqns[i] for i in g["params"]])
                                             for g in sd["param_groups"]]}


def _to_load_form(model, params, optim_state_dict, n_groups):
    """A name-keyed optimizer state dict as optim.load_state_dict's input for `params` (ids in their order):
    full tensors sliced to this rank's shard of each parameter."""
    from ..tensor import distribute_tensor
    ids = {_fqn_of(model, p): i for i, p in enumerate(params)}
    state = {}
    for name, entries in optim_state_dict["state"].items():
        if name not in ids:
            raise ValueError("optim_state_dict_to_load: the state dict names parameter '%s', which the "
                             "optimizer does not hold" % name)
        p = params[ids[name]]
        state[ids[name]] = {k: (distribute_tensor(v, p.device_mesh, p.placements, src_data_rank=None)
                                if p.is_distributed and isinstance(v, _C.Tensor) and not v.is_distributed
                                and tuple(v.shape) == tuple(p.shape) else v)
                            for k, v in entries.items()}
    groups = optim_state_dict["param_groups"]
    if n_groups is not None and len(groups) != n_groups:
        raise ValueError("optim_state_dict_to_load: %d parameter groups in the state dict, %d in the optimizer"
                         % (len(groups), n_groups))
    return {"state": state, "param_groups": [dict(g, params=[ids[n] for n in g["params"]]) for g in groups]}


def _optim_fqns(model, optim):
    """{optimizer state id: clean parameter name}: ids number the parameters of optim's groups in order."""
    names = {}
    for name, p in model.named_parameters():
        names.setdefault(hash(p), name)
    out = {}
    for i, p in enumerate(p for g in optim.param_groups for p in g["params"]):
        if hash(p) not in names:
            raise ValueError("optim_state_dict: the optimizer holds a parameter (%s) that is not in the model"
                             % (tuple(p.shape),))
        out[i] = names[hash(p)]
    return out


@contextlib.contextmanager
def _summon(module, recurse, writeback, rank0_only):
    from .. import get_rank
    from ..tensor import distribute_tensor
    units = FullyShardedDataParallel.fsdp_modules(module) if recurse else [module]
    if not units or not isinstance(units[0], FullyShardedDataParallel):
        raise ValueError("summon_full_params: %s is not (and holds no) FullyShardedDataParallel module"
                         % type(module).__name__)
    for u in units:
        mp = u.mixed_precision
        if mp is not None and mp.param_dtype is not None:
            raise NotImplementedError("summon_full_params under MixedPrecision(param_dtype=%s): fully_shard "
                                      "unshards in the compute dtype, not the full-precision one" % mp.param_dtype)
    states = [u._state() for u in units]
    # A unit left unsharded (the root after a forward with no backward, e.g. an eval pass) is resharded first:
    # its parameters were then the full tensors, none was collected below, and the writeback's edits were lost
    # at the reshard after the block (FSDP.apply after a forward left the root's parameters unchanged).
    for st in states:
        st.reshard()
    # Every (owner module, name, DTensor) these units shard, before unsharding swaps in the full tensors.
    owned = []
    for u in units:
        inner = u._fsdp_wrapped_module
        skip = set()
        for m in inner.modules():
            if id(m) in skip:
                continue
            if m is not inner and isinstance(m, FullyShardedDataParallel):
                skip.update(id(d) for d in m.modules())
                continue
            for name, p in m._named_parameters(False):
                if p.is_distributed:
                    owned.append((m, name, p))
    for st in states:
        st.unshard()
    early = rank0_only and get_rank() != 0
    slices = []  # this rank's part of each full tensor, taken before resharding frees them
    try:
        if early:
            for st in states:
                st.reshard()
        yield
        if writeback and not early:
            for m, name, shard in owned:
                full = getattr(m, name).detach()
                local = distribute_tensor(full, shard.device_mesh, shard.placements, src_data_rank=None)
                slices.append(local.to_local().clone())
    finally:
        if not early:
            for st in states:
                st.reshard()
    with _C._GradMode(False):
        for (_, _, shard), value in zip(owned, slices):
            shard.to_local().copy_(value)


FSDP = FullyShardedDataParallel
