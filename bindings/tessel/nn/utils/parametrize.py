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
from collections.abc import Sequence

from ... import _C
from ..._size import Size
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
    ``right_inverse`` to set the originals from a value. As torch's, the original takes the value right_inverse
    returns with set_ semantics (its shape, its storage: assigning a [1, 2] tensor to a [2, 2] weight makes it
    [1, 2]), and may not take another dtype."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = tuple(original.shape), original.dtype
        with _C._GradMode(False):
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:  # torch's: a right_inverse that cannot is taken as the identity
                        pass
        if not isinstance(new, (_C.Tensor, Sequence)):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). Got %s"
                             % type(new).__name__)
        self.is_tensor = isinstance(new, _C.Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if new.dtype != dtype:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                                 "original.dtype: %s\nright_inverse(original).dtype: %s" % (dtype, new.dtype))
            _set(original, new)
            _register(self, "original", original)
        else:
            for i, t in enumerate(new):
                if not isinstance(t, _C.Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                                     "Got element %d of the sequence with type %s." % (i, type(t).__name__))
                t = t.detach().clone()
                _register(self, "original%d" % i, Parameter(t, requires_grad=original.requires_grad)
                          if isinstance(original, Parameter) else t.requires_grad_(original.requires_grad))
        if not unsafe:
            value = self()
            if not isinstance(value, _C.Tensor):
                raise ValueError("A parametrization must return a tensor. Got %s." % type(value).__name__)
            if value.dtype != dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless "
                                 "`unsafe` flag is enabled.\nunparametrized dtype: %s\nparametrized dtype: %s"
                                 % (dtype, value.dtype))
            if tuple(value.shape) != shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless "
                                 "`unsafe` flag is enabled.\nunparametrized shape: %s\nparametrized shape: %s"
                                 % (Size(shape), Size(value.shape)))

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
                if value.dtype != self.original.dtype:
                    raise ValueError("The tensor returned by `right_inverse` has dtype %s while `original` has "
                                     "dtype %s" % (value.dtype, self.original.dtype))
                _set(self.original, value)
                return
            if not isinstance(value, Sequence):
                raise ValueError("'right_inverse' must return a sequence of tensors. Got %s." % type(value).__name__)
            if len(value) != self.ntensors:
                raise ValueError("'right_inverse' must return a sequence of tensors of length %d. Got a sequence of "
                                 "length %d." % (self.ntensors, len(value)))
            for i, t in enumerate(value):
                original = getattr(self, "original%d" % i)
                if not isinstance(t, _C.Tensor):
                    raise ValueError("'right_inverse' must return a sequence of tensors or reference-type opaques. "
                                     "Got element %d of type %s." % (i, type(t).__name__))
                if t.dtype != original.dtype:
                    raise ValueError("Tensor %d returned by `right_inverse` has dtype %s while `original%d` has "
                                     "dtype %s" % (i, t.dtype, i, original.dtype))
                _set(original, t)

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


def _set(original, value):
    """torch's original.set_(value): the original (the same Parameter object) takes value's shape and storage."""
    if value is not original:
        with _C._GradMode(False):
            original.data = value


def _register(plist, name, tensor):
    if isinstance(tensor, Parameter):
        setattr(plist, name, tensor)
    else:  # a parametrized buffer's original is a buffer too
        plist.register_buffer(name, tensor)


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
    """torch.nn.utils.parametrize.register_parametrization: ``module.<tensor_name>`` (a parameter or a buffer)
    becomes ``parametrization(original)``; registering again on the same name appends to its list."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            _check_appended(parametrization, getattr(module, tensor_name), tensor_name)
        plist.append(parametrization)
        plist.unsafe |= unsafe
        return module
    is_param = module._has_parameter(tensor_name)
    original = module._lookup(tensor_name) if is_param or module._has_buffer(tensor_name) else None
    if not isinstance(original, _C.Tensor):
        raise ValueError("Module '%s' does not have a parameter, a buffer, or a parametrized element with name '%s'"
                         % (type(module).__name__, tensor_name))
    if is_param:
        original = Parameter(original, requires_grad=original.requires_grad)
    # built before the tensor leaves the module: a rejected parametrization leaves it where it was (removing
    # and re-registering it on failure moved it after the others: named_parameters() reordered)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    if is_param:
        module._remove_parameter(tensor_name)
    else:
        module._remove_buffer(tensor_name)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    module._set_computed_parameter(tensor_name, _compute(tensor_name))
    return module


def _check_appended(parametrization, current, name):
    """torch's checks of a parametrization added to a list (unless unsafe): it keeps the tensor's dtype and shape,
    and so does its right_inverse."""
    with _C._GradMode(False):
        out = parametrization(current)
    if not isinstance(out, _C.Tensor):
        raise ValueError("A parametrization must return a tensor. Got %s." % type(out).__name__)
    for what, got, want in (("dtype", out.dtype, current.dtype), ("shape", Size(out.shape), Size(current.shape))):
        if got != want:
            raise ValueError("Registering a parametrization may not change the %s of the tensor, unless the `unsafe` "
                             "flag is enabled.\nmodule.%s.%s: %s\nparametrization(module.%s).%s: %s"
                             % (what, name, what, want, name, what, got))
    if not hasattr(parametrization, "right_inverse"):
        return
    try:
        with _C._GradMode(False):
            back = parametrization.right_inverse(out)
    except NotImplementedError:
        return
    if not isinstance(back, _C.Tensor):
        raise ValueError("parametrization.right_inverse must return a tensor. Got: %s" % type(back).__name__)
    for what, got, want in (("dtype", back.dtype, current.dtype), ("shape", Size(back.shape), Size(current.shape))):
        if got != want:
            raise ValueError("The tensor returned by parametrization.right_inverse must have the same %s as "
                             "module.%s, unless the `unsafe` flag is enabled.\nmodule.%s.%s: %s\nreturned %s: %s"
                             % (what, name, name, what, want, what, got))


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undoes register_parametrization: ``module.<tensor_name>`` is a parameter (or buffer) again, holding the
    current parametrized value (``leave_parametrized``) or the original."""
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
            original = plist.original
        else:
            value = value.detach().clone()
            requires_grad = plist.original0.requires_grad
            original = Parameter(value, requires_grad=True) if requires_grad else value
    else:
        if not plist.is_tensor:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
                             "parametrized in terms of a sequence of tensors.")
        original = plist.original
    module._set_computed_parameter(tensor_name, None)
    del module.parametrizations[tensor_name]
    if isinstance(original, Parameter):
        module._register_parameter(tensor_name, original)
    else:
        module.register_buffer(tensor_name, original)
    if len(module.parametrizations) == 0:
        del module.parametrizations
    return module
