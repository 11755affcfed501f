"""tessel.distributed.checkpoint.state_dict: get/set the model and optimizer state dicts (torch's names).

Values alias the live tensors (DTensors stay sharded) unless StateDictOptions(full_state_dict=True),
which gathers full tensors (on rank 0 only with cpu_offload=True; the other ranks get {}, as torch's).
The optimizer state dict has torch's layout: {"state": {fqn: {"step": tensor, "exp_avg": ...}},
"param_groups": [{options..., "params": [fqn, ...]}]}, or with
StateDictOptions(flatten_optimizer_state_dict=True) torch's flattened names "state.<fqn>.<name>" and
"param_groups.<fqn>.<option>" (_optim_layout.py); set_optimizer_state_dict takes either, and tessel's older
internal layout ("optim.state.<fqn>.<name>", "optim.step.<fqn>", "optim.hyper.<name>") too.
ignore_frozen_params=True leaves parameters with requires_grad=False out of the model state dict (a fine-tuning checkpoint of the trained part only).
StateDictOptions(full_state_dict=True, broadcast_from_rank0=True) on a set: only rank 0's model and
optimizer state dicts are read (the others may pass {}); each tensor is broadcast from rank 0 and sharded
one at a time, so no rank holds more than one full tensor beyond rank 0's dict (torch's loading of a full
checkpoint read on rank 0).

    model_sd, optim_sd = get_state_dict(model, opt)
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
"""
import dataclasses

from ... import _C
from . import _optim_layout

_OPTIM = "optim."


@dataclasses.dataclass
class StateDictOptions:
    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"  # (keep_submodule_prefixes only matters with submodules=: it raises)


def _verify_options(options):
    """torch checks the options when they are used (a StateDictOptions is built freely)."""
    options = options or StateDictOptions()
    if options.broadcast_from_rank0 and not options.full_state_dict:
        raise ValueError("full_state_dict must be True when broadcast_from_rank0 is True.")
    return options


def _no_submodules(submodules):
    if submodules is not None:
        raise NotImplementedError("state dicts of submodules= (deprecated in torch) are not supported: take the "
                                  "whole model's and select the keys")


def _broadcast_model_state_from_rank0(model, model_state_dict, strict):
    """broadcast_from_rank0: rank 0's full tensors, one at a time, into every rank's (sharded) model. Rank 0
    first sends every key with its shape, so all ranks check the same things and raise alike before
    anything is loaded (a rank raising alone would leave the others waiting in a broadcast)."""
    from ... import distributed as dist
    from ..._tensor import empty
    own = _split(_C._get_state_dict(model, None, False))[0]  # keys, global shapes and dtypes, no copies
    meta = None
    if dist.get_rank() == 0:
        meta = [(k, tuple(v.shape) if isinstance(v, _C.Tensor) else None,
                 isinstance(v, _C.Tensor) and v.is_distributed) for k, v in model_state_dict.items()]
    box = [meta]
    dist.broadcast_object_list(box, src=0)
    meta = box[0]
    sent = [k for k, _, _ in meta]
    problems = []
    for key, shape, distributed in meta:
        live = own.get(key)
        if not isinstance(live, _C.Tensor):
            continue
        if distributed:
            problems.append("'%s' is a DTensor on rank 0 (pass full tensors: full_state_dict)" % key)
        elif shape is None:
            problems.append("'%s' is not a tensor on rank 0" % key)
        elif shape != tuple(live.shape):
            problems.append("'%s' has shape %s on rank 0, the model's is %s" % (key, shape, tuple(live.shape)))
    if problems:
        raise ValueError("broadcast_from_rank0: " + "; ".join(problems))
    missing = [k for k in own if k not in sent]
    unexpected = [k for k in sent if k not in own]
    if strict and (missing or unexpected):
        raise RuntimeError("Error(s) in loading state_dict: missing keys %s, unexpected keys %s"
                           % (missing, unexpected))
    for key in sent:
        live = own.get(key)
        if not isinstance(live, _C.Tensor):
            continue
        if dist.get_rank() == 0:
            value = model_state_dict[key].detach().to(live.dtype).contiguous()
        else:
            value = empty(*live.shape, dtype=live.dtype)
        dist.broadcast(value, src=0)
        _C._set_state_dict(model, None, {key: value}, False)
    return missing, unexpected


def _entry_fqn(key):
    """The parameter a flat optimizer entry belongs to: torch's flattened 'state.<fqn>.<name>' or tessel's
    internal 'optim.state.<fqn>.<name>' / 'optim.step.<fqn>'; None for the other entries (options)."""
    from ...optim import _state_fqn
    return key[len("state."):].rpartition(".")[0] if key.startswith("state.") else _state_fqn(key)


def _broadcast_optimizer_state_from_rank0(model, optim_state_dict):
    """broadcast_from_rank0 for an optimizer: rank 0's full state dict in a flat layout (torch's flattened
    names or tessel's internal keys; the others may pass {}). Rank 0 sends the keys with their shapes and
    every non-tensor value (steps, options) at once, then each tensor; every rank keeps only its shard of it
    (the parameter's placements, sliced locally: no further communication), so no rank holds more than one
    full tensor beyond rank 0's dict. The sharded dict then loads as get_optimizer_state_dict's own output
    does."""
    from ... import distributed as dist
    from ..._tensor import empty
    from ..tensor import distribute_tensor
    meta = None
    if dist.get_rank() == 0:
        meta = []
        for k, v in optim_state_dict.items():
            if isinstance(v, _C.Tensor):
                if v.is_distributed:
                    raise ValueError("broadcast_from_rank0: '%s' is a DTensor on rank 0 (pass full tensors: "
                                     "full_state_dict)" % k)
                meta.append((k, tuple(v.shape), str(v.dtype), None))
            else:
                meta.append((k, None, None, v))
    box = [meta]
    dist.broadcast_object_list(box, src=0)
    params = dict(model.named_parameters())
    unknown = [k for k, shape, _, _ in box[0] if shape is not None and _entry_fqn(k) not in params]
    if unknown:  # every rank sees the same meta, so all raise alike before any tensor moves
        raise ValueError("broadcast_from_rank0: %s name no parameter of the model" % unknown)
    dtypes = {str(d): d for d in (_C.dtype.float32, _C.dtype.float64, _C.dtype.bfloat16, _C.dtype.float16,
                                  _C.dtype.int64, _C.dtype.int32, _C.dtype.int16, _C.dtype.int8,
                                  _C.dtype.uint8, _C.dtype.bool)}
    loaded = {}
    for key, shape, dtype, value in box[0]:
        if shape is None:
            loaded[key] = value
            continue
        full = optim_state_dict[key].detach().contiguous() if dist.get_rank() == 0 else \
            empty(*shape, dtype=dtypes[dtype])
        dist.broadcast(full, src=0)
        param = params[_entry_fqn(key)]
        if param.is_distributed and tuple(param.shape) == shape:
            full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        loaded[key] = full
    return loaded


def _without_frozen(model, sd):
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    return {k: v for k, v in sd.items() if k not in frozen}


def _optimizer_list(optimizers):
    if optimizers is None:
        return []
    return list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]


_HYPER = _OPTIM + "hyper."


def _own_hyper(key, i):
    """The single-optimizer name of `key` when it is optimizer i's hyperparameter entry, else None."""
    if not key.startswith(_HYPER):
        return None
    rest = key[len(_HYPER):]
    first = rest.split(".", 1)[0]
    theirs = first.startswith("opt") and first[3:].isdigit() and "." in rest
    if i == 0:
        return None if theirs else key
    prefix = "opt%d." % i
    return _HYPER + rest[len(prefix):] if rest.startswith(prefix) else None


def _optimizer_fqns(model, opt):
    """The model FQNs of the parameters `opt` optimizes."""
    if isinstance(opt, _C.Optimizer):
        return set(_C._optimizer_param_fqns(model, opt))
    return {f for fqns in opt._model_fqns(model) for f in fqns}


def _one_optimizer_state(model, opt, full_state_dict):
    if isinstance(opt, _C.Optimizer):
        return _split(_C._get_state_dict(model, opt, full_state_dict))[1]
    return opt._get_checkpoint_state(model, full_state_dict)  # a tessel.optim optimizer: its groups merged


def _part_of(model, opts, i, optim_state_dict):
    """Optimizer i's entries of a dict of several optimizers in tessel's internal layout, under its
    single-optimizer names: {its name: (the dict's key, value)}."""
    from ...optim import _state_fqn
    fqns = _optimizer_fqns(model, opts[i])
    part = {}
    for k, v in optim_state_dict.items():
        if _state_fqn(k) is not None:
            if _state_fqn(k) in fqns:
                part[k] = (k, v)
        elif _own_hyper(k, i) is not None:
            part[_own_hyper(k, i)] = (k, v)
    return part


def _parts(model, opts, optim_state_dict):
    """Each optimizer's part; an entry no optimizer takes is a ValueError naming it (one optimizer: its own
    loader names it)."""
    if len(opts) == 1:
        return [dict(optim_state_dict)]
    parts = [_part_of(model, opts, i, optim_state_dict) for i in range(len(opts))]
    stray = sorted(set(optim_state_dict) - {key for part in parts for key, _ in part.values()})
    if stray:
        raise ValueError("set_optimizer_state_dict: %s name no parameter or hyperparameter of the %d optimizers"
                         % (stray[:5], len(opts)))
    return [{name: v for name, (_, v) in part.items()} for part in parts]


def _load_optimizers(model, opts, optim_state_dict):
    for opt, part in zip(opts, _parts(model, opts, optim_state_dict)):
        if isinstance(opt, _C.Optimizer):
            _C._set_optimizer_state_dict(model, opt, part)
        else:
            opt._set_checkpoint_state(model, part)


def _split(sd):
    model = {k: v for k, v in sd.items() if not k.startswith(_OPTIM)}
    optim = {k: v for k, v in sd.items() if k.startswith(_OPTIM)}
    return model, optim


def _in_module_order(model, sd):
    """sd's entries in model.state_dict()'s order (each module's parameters, its buffers, then its children's,
    as torch's get_model_state_dict); entries the module tree does not name (none today) last."""
    order = {name: i for i, (name, _) in enumerate(model._state_dict())}
    return dict(sorted(sd.items(), key=lambda kv: order.get(kv[0], len(order))))


def _keys(result):
    from ...nn.modules import _IncompatibleKeys
    return _IncompatibleKeys(list(result[0]), list(result[1]))


_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def _clean(fqn):
    """torch's FQN as get_state_dict gives it: FSDP1's, activation checkpointing's and torch.compile's wrapper
    segments left out (a model saved wrapped loads unwrapped, into FSDP2, or into another wrapping)."""
    for segment in _WRAPPER_SEGMENTS:
        fqn = fqn.replace(segment, "")
    return fqn


def _cleaned_optim(optim_sd, rename):
    """An optimizer state dict (nested or flattened) with every parameter FQN renamed."""
    if "state" not in optim_sd:  # flattened: state.<fqn>.<key> / param_groups.<fqn>.<key>
        return {rename(k): v for k, v in optim_sd.items()}
    return {**optim_sd, "state": {rename(k): v for k, v in optim_sd["state"].items()},
            "param_groups": [{**g, "params": [rename(p) for p in g["params"]]} for g in optim_sd["param_groups"]]}


def _model_cleaner(model):
    """_clean for the names of `model`, also leaving out the "module." segment each DistributedDataParallel of it
    adds (torch's _get_fqns(skip_ddp_prefix=True)): a DDP model's checkpoint has the unwrapped model's keys, so it
    loads into an unwrapped or FSDP model, or from one."""
    from ...nn.parallel import DistributedDataParallel
    ddp = sorted((name + "." if name else "" for name, m in model.named_modules()
                  if isinstance(m, DistributedDataParallel)), key=len, reverse=True)
    if not ddp:
        return _clean

    def clean(fqn):
        head = next((h for h in ("state.", "param_groups.") if fqn.startswith(h)), "")  # flattened optimizer keys
        name = fqn[len(head):]
        for prefix in ddp:  # the innermost first: its "module." comes later in the name
            if name.startswith(prefix + "module."):
                name = prefix + name[len(prefix) + len("module."):]
        return _clean(head + name)
    return clean


def _wrapped_names(model, names):
    """rename(k): a clean FQN (or flattened optimizer key) back to the model's own, wrapper segments included."""
    clean = _model_cleaner(model)
    actual = {clean(n): n for n in names if clean(n) != n}
    if not actual:
        return None

    def rename(key):
        if key in actual:
            return actual[key]
        for prefix in ("state.", "param_groups."):
            if key.startswith(prefix):
                for clean, own in actual.items():
                    if key.startswith(prefix + clean + "."):
                        return prefix + own + key[len(prefix + clean):]
        return key
    return rename


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """The model's and the optimizers' state dicts (several optimizers: one merged optimizer dict, as torch)."""
    _no_submodules(submodules)
    options = _verify_options(options)
    opts = _optimizer_list(optimizers)
    model_sd, optim_sd = _get_state_dict(model, opts, options)
    clean = _model_cleaner(model)
    if any(clean(k) != k for k in model_sd):
        model_sd = {clean(k): v for k, v in model_sd.items()}
        optim_sd = _cleaned_optim(optim_sd, clean) if optim_sd else optim_sd
    return model_sd, optim_sd


def _get_state_dict(model, opts, options):
    model_sd = _in_module_order(model, _split(_C._get_state_dict(model, None, options.full_state_dict))[0])
    # torch's values are detached (module.state_dict()): no requires_grad, the parameters' memory all the same
    model_sd = {k: v.detach() if isinstance(v, _C.Tensor) and v.requires_grad else v for k, v in model_sd.items()}
    if options.ignore_frozen_params:
        model_sd = _without_frozen(model, model_sd)
    optim_sd = {}
    if opts:
        _init_optim_states(opts)
        internals = [_one_optimizer_state(model, opt, options.full_state_dict) for opt in opts]
        optim_sd = _optim_layout.nested(model, opts, internals)
        if options.flatten_optimizer_state_dict:
            optim_sd = _optim_layout.flatten(optim_sd)
    if options.full_state_dict and options.cpu_offload:
        from ... import distributed as dist
        if dist.is_initialized() and dist.get_rank() != 0:  # torch: the full dicts on rank 0 only
            return {}, {}
    return model_sd, optim_sd


def get_model_state_dict(model, *, submodules=None, options=None):
    _no_submodules(submodules)
    return get_state_dict(model, None, options=options)[0]


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    _no_submodules(submodules)
    return get_state_dict(model, optimizers, options=options)[1]


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    options = _verify_options(options)
    opts = _optimizer_list(optimizers)
    result = set_model_state_dict(model, model_state_dict, options=options)
    if opts:
        set_optimizer_state_dict(model, opts, optim_state_dict, options=options)
    return result


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Loads an optimizer state dict from get_optimizer_state_dict (sharded or full; one optimizer or several,
    each taking its parameters' entries) into the optimizers of model's parameters, as torch's."""
    options = _verify_options(options)
    opts = _optimizer_list(optimizers)
    if not opts:
        raise ValueError("set_optimizer_state_dict: no optimizer given")
    _init_optim_states(opts)
    optim_state_dict = dict(optim_state_dict or {})
    if options.broadcast_from_rank0:  # rank 0's dict travels flat (the layout is decided from what arrives)
        flat = _optim_layout.flatten(optim_state_dict) if "state" in optim_state_dict else optim_state_dict
        optim_state_dict = _broadcast_optimizer_state_from_rank0(model, flat)
    if any(k.startswith(_OPTIM) for k in optim_state_dict):  # tessel's internal layout (from before torch's)
        return _load_optimizers(model, opts, optim_state_dict)
    rename = _wrapped_names(model, sorted(set().union(*(_optimizer_fqns(model, opt) for opt in opts))))
    if rename is not None and optim_state_dict:  # a clean FQN (torch's) for a wrapped model's parameter
        optim_state_dict = _cleaned_optim(optim_state_dict, rename)
    if optim_state_dict and "state" not in optim_state_dict:  # torch's test: no "state" key = flattened
        optim_state_dict = _optim_layout.unflatten(model, opts, optim_state_dict)
    if optim_state_dict:  # torch loads nothing from an empty dict
        _optim_layout.load(model, opts, optim_state_dict, _optimizer_fqns)


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Loads model_state_dict (get_model_state_dict's, sharded or full) into model. As torch's: an empty dict
    loads nothing; with full_state_dict, a key the dict lacks keeps the model's value (torch fills the dict
    from the model's own state first), so only unexpected keys are reported or, strict, raise."""
    options = _verify_options(options)
    if options.broadcast_from_rank0:
        # (rank 0's dict stays full, unlike torch's: a second broadcast of the same dict then works)
        return _keys(_broadcast_model_state_from_rank0(model, model_state_dict, options.strict))
    if not model_state_dict:
        return _keys(([], []))
    from ...nn._state_dict import _raise_load_errors, tensor_entries
    own = [n for n, _ in model._state_dict()]
    rename = _wrapped_names(model, own)
    if rename is not None:
        model_state_dict = {rename(k): v for k, v in model_state_dict.items()}
    tensors, others = tensor_entries(model, dict(model_state_dict))
    if others and options.strict:  # torch's error before anything loads
        _raise_load_errors(model, [], [], others)
    if options.full_state_dict:
        known = set(own)
        unexpected = [k for k in tensors if k not in known] + others
        _C._set_state_dict(model, None, {k: v for k, v in tensors.items() if k in known}, False)
        _distribute_in_place(model, model_state_dict)
        if options.strict and unexpected:  # (torch's load_state_dict copies the rest, then raises)
            _raise_load_errors(model, [], [], unexpected)
        return _keys(([], unexpected))
    result = _keys(_C._set_state_dict(model, None, tensors, options.strict))
    result.unexpected_keys.extend(others)  # torch reports them and loads the rest
    return result


def _distribute_in_place(model, full_state_dict):
    """torch's set_model_state_dict(full_state_dict=True) leaves the caller's dict holding what it loaded, distributed
    as the model's entries: each full tensor whose model entry is a DTensor becomes a DTensor copy with that entry's
    mesh and placements (a later load_state_dict of that dict into another sharded model then works, as torch's). Keys
    the model lacks, and plain entries, stay as they were. Not after broadcast_from_rank0: torch's rewrite of rank 0's
    dict there breaks a second broadcast of it (its values are no longer full)."""
    if not isinstance(full_state_dict, dict) or not full_state_dict:
        return
    own = model.state_dict()
    rename = _wrapped_names(model, list(own))
    for key, value in list(full_state_dict.items()):
        live = own.get(rename(key) if rename is not None else key)
        if (isinstance(live, _C.Tensor) and live.is_distributed and isinstance(value, _C.Tensor)
                and not value.is_distributed):
            full_state_dict[key] = live.detach().clone()


def _init_optim_states(opts):
    """torch's get / set_optimizer_state_dict first give a fresh optimizer its state (_init_optim_state: a zero-lr
    step, so Adam's step is 1 after it); tessel's do the same, so a script that saves or loads before training
    takes torch's path (the next step's bias correction included)."""
    for opt in opts:
        if hasattr(opt, "state") and hasattr(opt, "param_groups"):
            _init_optim_state(opt)


def _init_optim_state(optim):
    """torch's private helper (the FSDP2 tutorial's checkpointer imports it): the optimizer's state created by a
    step with zero gradients and lr 0, unless it already has state or any parameter has a gradient."""
    if len(optim.state):
        return
    params = [p for g in optim.param_groups for p in g["params"]]
    if any(p.grad is not None for p in params):
        return
    from ... import zeros_like
    for p in params:
        if p.requires_grad:
            p.grad = zeros_like(p)
    lrs = [g.get("lr") for g in optim.param_groups]
    for g in optim.param_groups:
        if "lr" in g:
            g["lr"] = 0.0
    optim.step()
    for g, lr in zip(optim.param_groups, lrs):
        if lr is not None:
            g["lr"] = lr
    optim.zero_grad(set_to_none=True)
