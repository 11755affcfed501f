"""nn.Module's lookups by dotted path (get_parameter, get_buffer, get_submodule, set_submodule), split from
nn/modules.py by concept; modules.py installs them on Module."""
from .modules import Module, _complex_buffers, _dict, _held_parameter


def get_parameter(self, target):
    owner, _, name = target.rpartition(".")
    module = self.get_submodule(owner)
    if not module._has_parameter(name):
        raise AttributeError("%s has no parameter '%s'" % (module._type_name, name))
    p = _held_parameter(module, name, module._lookup(name))
    p._fqn = target  # qualified from the module it was asked of, as named_parameters names it
    return p


def get_buffer(self, target):
    """torch's get_buffer: the buffer at a dotted path (AttributeError naming what is missing)."""
    owner, _, name = target.rpartition(".")
    module = self.get_submodule(owner)
    if name not in {n for n, _ in module._named_buffers(False)} and name not in (_complex_buffers(module) or {}):
        raise AttributeError("%s has no buffer '%s'" % (module._type_name, name))
    return getattr(module, name)


_get_submodule_cpp = Module.get_submodule


def _activation_wrapper():
    from ..distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper
    return ActivationWrapper


def get_submodule(self, target):
    """torch's get_submodule: the module at a dotted path; AttributeError naming the first missing step."""
    try:
        return _get_submodule_cpp(self, target)
    except KeyError:
        pass
    module = self
    for item in target.split("."):
        if item == "_checkpoint_wrapped_module" and isinstance(module, _activation_wrapper()):
            continue  # torch's CheckpointWrapper child: tessel's wrapper is the module itself
        child = dict(module._named_children()).get(item)
        if child is None:
            if hasattr(module, item) and not isinstance(getattr(module, item), Module):
                raise AttributeError("`%s` is not an nn.Module" % item) from None
            raise AttributeError("%s has no attribute `%s`" % (type(module).__name__, item)) from None
        module = child
    return module


def set_submodule(self, target, module, strict=False):
    """torch's set_submodule: the module at a dotted path replaced by `module` (LoRA / quantization injection);
    strict=True requires a submodule there already. The parent path must exist (AttributeError otherwise)."""
    if not isinstance(module, Module):
        raise ValueError("`module` is not an nn.Module, found %s" % type(module).__name__)
    if not target:
        raise ValueError("Cannot set the submodule without a target name!")
    owner_path, _, name = target.rpartition(".")
    owner = self.get_submodule(owner_path)
    exists = name in (_dict(owner).get("_modules") or {}) or any(n == name for n, _ in owner._named_children())
    if strict and not exists:
        raise AttributeError("%s has no attribute `%s`" % (owner._type_name, name))
    if not exists and hasattr(owner, name):
        raise AttributeError("`%s` is not an nn.Module" % name)
    setattr(owner, name, module)
