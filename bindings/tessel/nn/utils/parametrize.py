"""tessel.nn.utils.parametrize: torch.nn.utils.parametrize (register_parametrization,
remove_parametrizations, is_parametrized, cached), with torch's layout and state-dict keys.

After ``register_parametrization(m, "weight", P)`` the tensor ``m.weight`` is ``P(original)`` computed from
``m.parametrizations.weight.original`` (or ``original0``, ``original1``, ... when ``P.right_inverse``
returns several tensors), the parameters the optimizer steps and the state dict holds
("parametrizations.weight.original"). It works the same on Python modules and on the C++ layers
(nn.Linear, nn.Conv2d, ...): the name becomes a computed parameter of the C++ module (core/nn/module.h,
[Note: computed parameters]) that the module's C++ forward reads, computed once per forward after the
forward pre-hooks (fully_shard gathers the originals first) and inside activation checkpointing; outside
a forward every access computes it, unless inside ``cached()``. The class of the module does not change
(torch swaps in a "Parametrized<Name>" subclass); ``type_before_parametrizations`` returns the class.

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)
    register_parametrization(layer, "weight", Symmetric())
"""
import contextlib

from ... import _C
from .._containers import ModuleDict, ModuleList
from ..modules import Parameter

_cache_enabled = 0
_cache = {}


@contextlib.contextmanager
def cached():
    """Within the context each parametrized tensor is computed once on first access (torch's cached())."""
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor (torch.nn.utils.parametrize.ParametrizationList): its items
    applied in order to ``original`` (or to ``original0``, ``original1``, ... by the first), and
    ``right_inverse`` to set the originals from a value."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = tuple(original.shape), original.dtype
        first = modules[0]
        with _C._GradMode(False):
            new = original
            if hasattr(first, "right_inverse"):
                try:
                    new = first.right_inverse(original)
                except NotImplementedError:  # torch's: a right_inverse that cannot is taken as the identity
                    pass
        if isinstance(new, _C.Tensor):
            if not unsafe:
                _check_same(new, shape, dtype, "right_inverse")
            self.is_tensor, self.ntensors = True, 1
            if tuple(new.shape) != shape or new.dtype != dtype:  # unsafe: the original takes the new shape
                original = Parameter(new.detach().clone(), requires_grad=original.requires_grad)
            with _C._GradMode(False):
                original.copy_(new)
            self.original = original if isinstance(original, Parameter) else Parameter(original)
        else:
            self.is_tensor, self.ntensors = False, len(new)
            for i, t in enumerate(new):
                if not isinstance(t, _C.Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors "
                                     "(list, tuple...). Got element %d of type %s" % (i, type(t).__name__))
                setattr(self, "original%d" % i,
                        Parameter(t.detach().clone(), requires_grad=original.requires_grad))
        if not unsafe:
            _check_same(self(), shape, dtype, "forward")

    def right_inverse(self, value):
        """Sets the originals so that this list evaluates to ``value`` (no gradient recorded)."""
        with _C._GradMode(False):
            for module in reversed(list(self)):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError("parametrization %s does not implement right_inverse."
                                       % type(module).__name__)
                value = module.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, _C.Tensor):
                    raise ValueError("`right_inverse` should return a tensor. Got %s" % type(value).__name__)
                self.original.copy_(value)
            else:
                if not isinstance(value, (list, tuple)) or len(value) != self.ntensors:
                    raise ValueError("'right_inverse' must return a sequence of tensors of length %d"
                                     % self.ntensors)
                for i, t in enumerate(value):
                    getattr(self, "original%d" % i).copy_(t)

    def _legacy_state(self, state_dict, prefix, version):
        """torch's _weight_norm_compat_hook: a checkpoint of the hook-based weight_norm
        (<owner>.<name>_g, <owner>.<name>_v) loads into parametrizations.weight_norm's originals."""
        if not getattr(self[0], "_weight_norm_compat", False):
            return {}
        parts = prefix[:-1].split(".")  # <owner>.parametrizations.<name>
        owner = ".".join(parts[:-2])
        old = (owner + "." if owner else "") + parts[-1]
        g, v = old + "_g", old + "_v"
        if g not in state_dict or v not in state_dict:
            return {}
        return {prefix + "original0": state_dict[g], prefix + "original1": state_dict[v], g: None, v: None}

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, "original%d" % i) for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _check_same(t, shape, dtype, what):
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError("Registering a parametrization may not change the dtype or shape of the tensor, unless "
                         "`unsafe` flag is enabled.\nunparametrized dtype: %s\nparametrized dtype: %s\n"
                         "unparametrized shape: %s\nparametrized shape: %s (after %s)"
                         % (dtype, t.dtype, list(shape), list(t.shape), what))


def _compute(name):
    def compute(module):
        key = (id(module), name)
        if _cache_enabled and key in _cache:
            return _cache[key]
        value = module.parametrizations[name]()
        if _cache_enabled:
            _cache[key] = value
        return value
    return compute


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has a parametrization (on ``tensor_name`` when given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if plists is None:
        return False
    return tensor_name is None or tensor_name in plists


def type_before_parametrizations(module):
    """The module's class (tessel does not swap it)."""
    return type(module)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """torch.nn.utils.parametrize.register_parametrization: ``module.<tensor_name>`` becomes
    ``parametrization(original)``; registering again on the same name appends to its list."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            current = getattr(module, tensor_name)
            with _C._GradMode(False):
                out = parametrization(current)
            _check_same(out, tuple(current.shape), current.dtype, "forward")
        plist.append(parametrization)
        return module
    original = module._lookup(tensor_name)
    if not isinstance(original, _C.Tensor):
        raise ValueError("Module '%s' has no parameter or buffer with name '%s'" % (type(module).__name__, tensor_name))
    if not module._has_parameter(tensor_name):
        raise NotImplementedError("register_parametrization: '%s' is a buffer of %s; tessel parametrizes "
                                  "parameters only" % (tensor_name, type(module).__name__))
    original = Parameter(original, requires_grad=original.requires_grad)
    # built before the parameter leaves the module: a rejected parametrization leaves it where it was (removing
    # and re-registering it on failure moved it after the others: named_parameters() reordered)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    module._remove_parameter(tensor_name)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    module._set_computed_parameter(tensor_name, _compute(tensor_name))
    return module


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undoes register_parametrization: ``module.<tensor_name>`` is a parameter again, holding the current
    parametrized value (``leave_parametrized``) or the original."""
    if not is_parametrized(module, tensor_name):
        raise ValueError("Module %s does not have a parametrization on %s" % (type(module).__name__, tensor_name))
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with _C._GradMode(False):
            value = getattr(module, tensor_name)
        if plist.is_tensor:
            with _C._GradMode(False):
                if tuple(value.shape) == tuple(plist.original.shape) and value.dtype == plist.original.dtype:
                    plist.original.copy_(value)
                else:  # an unsafe parametrization's other shape or dtype: torch's set_ (copy_ broadcast it)
                    plist.original.data = value.detach().clone()
            param = plist.original
        else:
            param = Parameter(value.detach().clone(), requires_grad=plist.original0.requires_grad)
    else:
        if not plist.is_tensor:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
                             "parametrized in terms of a sequence of tensors.")
        param = plist.original
    module._set_computed_parameter(tensor_name, None)
    del module.parametrizations[tensor_name]
    module._register_parameter(tensor_name, param)
    if len(module.parametrizations) == 0:
        del module.parametrizations
    return module
