"""tessel.distributed.checkpoint.state_dict: get/set the model and optimizer state dicts (torch's names).

Values alias the live tensors (DTensors stay sharded) unless StateDictOptions(full_state_dict=True),
which gathers full tensors on every rank. Optimizer entries are keyed "optim.<param fqn>.<state>".
StateDictOptions(full_state_dict=True, broadcast_from_rank0=True) on a set: only rank 0's model and
optimizer state dicts are read (the others may pass {}); each tensor is broadcast from rank 0 and sharded
one at a time, so no rank holds more than one full tensor beyond rank 0's dict (torch's loading of a full
checkpoint read on rank 0).

    model_sd, optim_sd = get_state_dict(model, opt)
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
"""
import dataclasses

from ... import _C

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

    def __post_init__(self):
        if self.ignore_frozen_params or self.flatten_optimizer_state_dict or not self.keep_submodule_prefixes:
            raise NotImplementedError("StateDictOptions: ignore_frozen_params, flatten_optimizer_state_dict and "
                                      "keep_submodule_prefixes=False are not supported")
        if self.broadcast_from_rank0 and not self.full_state_dict:
            raise ValueError("full_state_dict must be True when broadcast_from_rank0 is True.")


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


def _broadcast_optimizer_state_from_rank0(model, opt, optim_state_dict):
    """broadcast_from_rank0 for an optimizer: rank 0's full state dict (the others may pass {}). Rank 0 sends
    the keys with their shapes and every non-tensor value (steps, hyperparameters) at once, then each tensor;
    every rank keeps only its shard of it (the parameter's placements, sliced locally: no further
    communication), so no rank holds more than one full tensor beyond rank 0's dict. The sharded dict then
    loads as get_optimizer_state_dict's own output does."""
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
    from ...optim import _state_fqn
    unknown = [k for k, shape, _, _ in box[0] if shape is not None and _state_fqn(k) not in params]
    if unknown:  # every rank sees the same meta, so all raise alike before any tensor moves
        raise ValueError("broadcast_from_rank0: %s name no parameter of the model" % unknown)
    dtypes = {str(d): d for d in (_C.dtype.float32, _C.dtype.float64, _C.dtype.bfloat16, _C.dtype.float16,
                                  _C.dtype.int64, _C.dtype.int32, _C.dtype.bool)}
    loaded = {}
    for key, shape, dtype, value in box[0]:
        if shape is None:
            loaded[key] = value
            continue
        full = optim_state_dict[key].detach().contiguous() if dist.get_rank() == 0 else \
            empty(*shape, dtype=dtypes[dtype])
        dist.broadcast(full, src=0)
        param = params[_state_fqn(key)]
        if param.is_distributed and tuple(param.shape) == shape:
            full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        loaded[key] = full
    return loaded


def _one_optimizer(optimizers):
    if isinstance(optimizers, (list, tuple)):
        if len(optimizers) != 1:
            raise NotImplementedError("state dicts of %d optimizers (tessel supports one)" % len(optimizers))
        optimizers = optimizers[0]
    return optimizers


def _split(sd):
    model = {k: v for k, v in sd.items() if not k.startswith(_OPTIM)}
    optim = {k: v for k, v in sd.items() if k.startswith(_OPTIM)}
    return model, optim


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    _no_submodules(submodules)
    options = options or StateDictOptions()
    opt = _one_optimizer(optimizers)
    if opt is None or isinstance(opt, _C.Optimizer):
        return _split(_C._get_state_dict(model, opt, options.full_state_dict))
    # A tessel.optim optimizer: one C++ optimizer per parameter group, merged.
    return (_split(_C._get_state_dict(model, None, options.full_state_dict))[0],
            opt._get_checkpoint_state(model, options.full_state_dict))


def get_model_state_dict(model, *, submodules=None, options=None):
    _no_submodules(submodules)
    return get_state_dict(model, None, options=options)[0]


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    _no_submodules(submodules)
    return get_state_dict(model, optimizers, options=options)[1]


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    options = options or StateDictOptions()
    opt = _one_optimizer(optimizers)
    if options.broadcast_from_rank0:
        result = _broadcast_model_state_from_rank0(model, model_state_dict, options.strict)
        if opt is not None:
            set_optimizer_state_dict(model, opt, optim_state_dict, options=options)
        return result
    if opt is None or isinstance(opt, _C.Optimizer):
        merged = dict(model_state_dict)
        merged.update(optim_state_dict or {})
        return _C._set_state_dict(model, opt, merged, options.strict)
    missing, unexpected = _C._set_state_dict(model, None, dict(model_state_dict), options.strict)
    opt._set_checkpoint_state(model, dict(optim_state_dict or {}))
    return missing, unexpected


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Loads an optimizer state dict from get_optimizer_state_dict (sharded or full) into the optimizer of
    model's parameters, as torch's set_optimizer_state_dict."""
    options = options or StateDictOptions()
    opt = _one_optimizer(optimizers)
    if opt is None:
        raise ValueError("set_optimizer_state_dict: no optimizer given")
    if options.broadcast_from_rank0:
        optim_state_dict = _broadcast_optimizer_state_from_rank0(model, opt, optim_state_dict or {})
    if isinstance(opt, _C.Optimizer):
        _C._set_optimizer_state_dict(model, opt, dict(optim_state_dict))
    else:
        opt._set_checkpoint_state(model, dict(optim_state_dict))


def set_model_state_dict(model, model_state_dict, *, options=None):
    options = options or StateDictOptions()
    if options.broadcast_from_rank0:
        return _broadcast_model_state_from_rank0(model, model_state_dict, options.strict)
    return _C._set_state_dict(model, None, dict(model_state_dict), options.strict)
