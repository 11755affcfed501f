"""Pickling whole modules: torch.save(model, f) and torch.load(f, weights_only=False), as older scripts save
their models (pytorch/examples' word_language_model, super_resolution), and copy by pickle.

A module pickles as a recipe its class rebuilds from, the way copy.deepcopy copies one (nn/_copy.py's
_deepcopy): a Python-defined module field by field (its __init__ is not rerun): parameters, buffers with their
persistence, children, training flag and plain attributes; a C++ layer (Linear, Embedding, LayerNorm, RMSNorm)
from its recorded constructor arguments, then its parameters and buffers. Tensors go through the pickler's own
tensor handling (tessel.save writes torch.save's zip). Sharded (DTensor) modules and those with computed
parameters (pruned, hook-based weight_norm) raise NotImplementedError (deepcopy copies them), parametrized ones
torch's RuntimeError; hooks are not saved (torch pickles them only when picklable).
"""
from ._copy import _CTOR_KEY, _new_cpp_layer, _put_copied_buffer, _put_copied_parameter, cpp_settings
from .modules import (_ALWAYS_CALL, _BUFFER_OBJECTS, _COMPLEX_KEY, _NONE_KEY, Module, _complex_buffers, _dict,
                      _persistent_buffer_names)

_SKIPPED = {"_modules", "_tessel_parent", _NONE_KEY, _CTOR_KEY, _COMPLEX_KEY, _BUFFER_OBJECTS, _ALWAYS_CALL,
            "_tessel_computed_fns"}


def _recipe(self):
    name = type(self).__name__
    if any(p.is_distributed for p in self.parameters()):
        raise NotImplementedError("pickling %s: its parameters are DTensors (fully_shard / tensor parallel); save "
                                  "its state_dict (or use tessel.distributed.checkpoint) instead" % name)
    if self._computed_parameter_names():
        from .utils.parametrize import is_parametrized
        if is_parametrized(self):  # torch's own refusal (its Parametrized<Name> class's __getstate__)
            raise RuntimeError("Serialization of parametrized modules is only supported through state_dict(). See:\n"
                               "https://pytorch.org/tutorials/beginner/saving_loading_models.html"
                               "#saving-loading-a-general-checkpoint-for-inference-and-or-resuming-training")
        raise NotImplementedError("pickling %s: it has computed parameters (pruning, the hook-based weight_norm / "
                                  "spectral_norm); pickle it before, or save its state_dict" % name)
    recipe = {"training": self.training, "params": list(self.named_parameters(recurse=False)),
              "complex": _complex_buffers(self) or None}
    if not self._has_python_forward:
        ctor = _dict(self).get(_CTOR_KEY)
        if ctor is None:
            raise NotImplementedError("pickling %s: a layer created by C++ code has no recorded constructor "
                                      "arguments; save the model's state_dict instead" % name)
        recipe["ctor"], recipe["settings"] = ctor, cpp_settings(self)
        fresh = set()
    else:
        probe = type(self).__new__(type(self))
        Module.__init__(probe)
        fresh = set(_dict(probe))
    persistent = _persistent_buffer_names(self)
    children = list(self._named_children())
    own = {n for n, _ in recipe["params"]} | {n for n, _ in self._named_buffers(False)} | {n for n, _ in children}
    recipe.update(buffers=[(n, b, n in persistent) for n, b in self._named_buffers(False)],
                  none=dict(_dict(self).get(_NONE_KEY) or {}), children=children,
                  attrs={k: v for k, v in _dict(self).items() if k not in fresh and k not in _SKIPPED and k not in own})
    return recipe


def _rebuild(cls, recipe):
    if "ctor" in recipe:  # a C++ layer, or a Python subclass of one (LoRA's Linear)
        new = _new_cpp_layer(cls, recipe["ctor"], recipe.get("settings"))
    else:
        new = cls.__new__(cls)
        Module.__init__(new)
    for pname, p in recipe["params"]:
        _put_copied_parameter(new, pname, p)
    for bname, b, persistent in recipe["buffers"]:
        _put_copied_buffer(new, bname, b, persistent, lambda t: t)
    for rname, is_parameter in recipe.get("none", {}).items():
        (new.register_parameter if is_parameter else new.register_buffer)(rname, None)
    for cname, child in recipe.get("children", []):
        setattr(new, cname, child)
    for key, value in recipe.get("attrs", {}).items():
        object.__setattr__(new, key, value)
    if recipe["complex"]:
        _dict(new)[_COMPLEX_KEY] = recipe["complex"]
    new.train(recipe["training"])
    return new


def _reduce_ex(self, protocol):
    return _rebuild, (type(self), _recipe(self))


Module.__reduce_ex__ = _reduce_ex
