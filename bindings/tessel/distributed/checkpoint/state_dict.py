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


def _cpp_optimizer(optimizers):
    if optimizers is None:
        return None
    if isinstance(optimizers, (list, tuple)):
        if len(optimizers) != 1:
            raise NotImplementedError("state dicts of %d optimizers (tessel supports one)" % len(optimizers))
        optimizers = optimizers[0]
    if isinstance(optimizers, _C.Optimizer):
        return optimizers
    return optimizers._single("get_state_dict")


def _split(sd):
    model = {k: v for k, v in sd.items() if not k.startswith(_OPTIM)}
    optim = {k: v for k, v in sd.items() if k.startswith(_OPTIM)}
    return model, optim


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    options = options or StateDictOptions()
    return _split(_C._get_state_dict(model, _cpp_optimizer(optimizers), options.full_state_dict))


def get_model_state_dict(model, *, submodules=None, options=None):
    return get_state_dict(model, None, options=options)[0]


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    return get_state_dict(model, optimizers, options=options)[1]


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    options = options or StateDictOptions()
    merged = dict(model_state_dict)
    merged.update(optim_state_dict or {})
    missing, unexpected = _C._set_state_dict(model, _cpp_optimizer(optimizers), merged, options.strict)
    return missing, unexpected


def set_model_state_dict(model, model_state_dict, *, options=None):
    options = options or StateDictOptions()
    return _C._set_state_dict(model, None, dict(model_state_dict), options.strict)
