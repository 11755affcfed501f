"""tessel.distributed.checkpoint.state_dict: get/set the model and optimizer state dicts (torch's names).

Values alias the live tensors (DTensors stay sharded) unless StateDictOptions(full_state_dict=True),
which gathers full tensors on every rank. Optimizer entries are keyed "optim.<param fqn>.<state>".

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
    strict: bool = True


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
    options = options or StateDictOptions()
    opt = _one_optimizer(optimizers)
    if opt is None or isinstance(opt, _C.Optimizer):
        return _split(_C._get_state_dict(model, opt, options.full_state_dict))
    # A tessel.optim optimizer: one C++ optimizer per parameter group, merged.
    return (_split(_C._get_state_dict(model, None, options.full_state_dict))[0],
            opt._get_checkpoint_state(model, options.full_state_dict))


def get_model_state_dict(model, *, submodules=None, options=None):
    return get_state_dict(model, None, options=options)[0]


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    return get_state_dict(model, optimizers, options=options)[1]


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    options = options or StateDictOptions()
    opt = _one_optimizer(optimizers)
    if opt is None or isinstance(opt, _C.Optimizer):
        merged = dict(model_state_dict)
        merged.update(optim_state_dict or {})
        return _C._set_state_dict(model, opt, merged, options.strict)
    missing, unexpected = _C._set_state_dict(model, None, dict(model_state_dict), options.strict)
    opt._set_checkpoint_state(model, dict(optim_state_dict or {}))
    return missing, unexpected


def set_model_state_dict(model, model_state_dict, *, options=None):
    options = options or StateDictOptions()
    return _C._set_state_dict(model, None, dict(model_state_dict), options.strict)
