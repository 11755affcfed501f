"""copy.deepcopy of tessel.nn modules (Module.__deepcopy__) and what pickling (_pickle.py) shares with it: the
C++ layers' recorded constructor arguments (_record_constructor_args, applied in nn/__init__.py), rebuilding a
C++ layer or a Python subclass of one from them, and putting copied parameters and buffers into the new
module. Split from modules.py by concept; modules.py installs _deepcopy as Module.__deepcopy__.
"""
import copy

from .. import _C, _device
from .modules import _ALWAYS_CALL, _BUFFER_OBJECTS, _NONE_KEY, Module, Parameter, _dict
from ._state_dict import _persistent_buffer_names

_CTOR_KEY = "_tessel_ctor"  # the C++ layers' constructor arguments, recorded by _record_constructor_args


def _record_constructor_args(cls):
    """Wraps a C++ layer's __init__ so its arguments are kept (deepcopy rebuilds the layer from them) and, as
    torch's layers end their __init__ with self.reset_parameters(), a subclass's own reset_parameters runs
    (the C++ constructor has initialized the parameters as the layer's reset_parameters would)."""
    original = cls.__init__
    cls._tessel_cpp_init = original  # (copies and unpickling build a layer with it, nn/_pickle.py)

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.__dict__[_CTOR_KEY] = (args, kwargs)
        if type(self).reset_parameters is not cls.reset_parameters:
            self.reset_parameters()
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__


def _copied_tensor(t, memo):
    """A detached copy of t, once per underlying tensor (tied weights stay tied), with its requires_grad."""
    key = ("tessel-tensor",) + t._data_key()
    if key[1] == 0:  # no data to identify it by (empty): never shared
        key = ("tessel-tensor-object", id(t))
        memo.setdefault(id(memo), []).append(t)
    if key not in memo:
        if t.is_meta:  # torch's deepcopy of a meta tensor is meta: unwritten, nothing copied
            with _device.device("meta"):
                copy_ = _C._empty(list(t.shape), t.dtype)
        else:
            copy_ = t.detach().clone()
        memo[key] = Parameter(copy_, requires_grad=t.requires_grad) if isinstance(t, Parameter) else copy_
    return memo[key]


_COMPUTED_FNS = "_tessel_computed_fns"  # name -> fn(module) of each computed parameter (nn_py.cc)


def _deepcopy(self, memo):
    """copy.deepcopy(module), as torch's: a new module tree with copies of every parameter and buffer (tied
    ones tied again), each module's training flag and plain attributes. A Python-defined module is rebuilt
    field by field (its __init__ is not rerun); a C++ layer (Linear, Embedding, LayerNorm, RMSNorm) from its
    recorded constructor arguments. DTensor parameters (tensor parallel) copy as DTensors on the same mesh with
    the same placements, without communication, as torch's. The hooks registered from Python are registered on
    the copy too (torch's copied hook dicts); tensor parallel's input hooks stay on the original. A parametrized,
    pruned or weight-normed tensor is computed on the copy from the copy's originals. fully_shard-ed modules, and
    C++ layers created inside C++ (a GPT's blocks), raise NotImplementedError."""
    if id(self) in memo:
        return memo[id(self)]
    memo.setdefault(id(memo), []).append(self)  # keep the wrapper alive: its id must not be reused meanwhile
    name = type(self).__name__
    for mname, m in self.named_modules():  # tensor parallel / distribute_module parameters copy as DTensors
        if _C._fsdp_state(m) is not None:
            raise NotImplementedError("deepcopy of %s: '%s' is fully_shard-ed (its FSDP state does not copy); copy "
                                      "the module before sharding it" % (name, mname or name))
    if not self._has_python_forward:
        ctor = _dict(self).get(_CTOR_KEY)
        if ctor is None:
            raise NotImplementedError("deepcopy of %s: a layer created by C++ code has no recorded constructor "
                                      "arguments" % name)
        new = _new_cpp_layer(type(self), copy.deepcopy(ctor, memo), cpp_settings(self))
    else:
        new = type(self).__new__(type(self))
        Module.__init__(new)
    memo[id(self)] = new
    new.train(self.training)
    for pname, p in self.named_parameters(recurse=False):
        _put_copied_parameter(new, pname, _copied_tensor(p, memo))
    persistent = _persistent_buffer_names(self)
    for bname, b in self._named_buffers(False):  # (complex buffers are copied with __dict__ below)
        _put_copied_buffer(new, bname, b, bname in persistent, lambda t: _copied_tensor(t, memo))
    for rname, is_parameter in (_dict(self).get(_NONE_KEY) or {}).items():
        (new.register_parameter if is_parameter else new.register_buffer)(rname, None)
    for cname, child in self._named_children():
        setattr(new, cname, copy.deepcopy(child, memo))
    # parametrized / pruned / weight-normed names: the copy computes them from its own copied originals
    for pname, fn in (_dict(self).get(_COMPUTED_FNS) or {}).items():
        if new._has_parameter(pname):  # a C++ layer's constructor registered it
            new._remove_parameter(pname)
        new._set_computed_parameter(pname, fn)
    handled = set(_dict(new)) | {"_modules", "_tessel_parent", _NONE_KEY, _CTOR_KEY, _BUFFER_OBJECTS, _ALWAYS_CALL,
                                 _COMPUTED_FNS, "_tessel_hook_dicts", "_tessel_hook_regs"}
    for key, value in _dict(self).items():
        if key in handled or (isinstance(value, Module) and key in (_dict(self).get("_modules") or {})):
            continue
        object.__setattr__(new, key, copy.deepcopy(value, memo))
    from ._module_hooks import copy_listed_hooks
    copy_listed_hooks(self, new)
    return new


_CPP_SETTINGS = ("eps", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq")


def cpp_settings(module):
    """A C++ layer's settings assigned since construction may differ from its recorded constructor arguments
    (`ln.eps = 1e-12`, `emb.padding_idx = None`): their current values, for its copies."""
    cls = type(module)
    return {n: getattr(module, n) for n in _CPP_SETTINGS
            if isinstance(getattr(cls, n, None), property) and getattr(cls, n).fset is not None}


def _new_cpp_layer(cls, ctor, settings=None):
    """An instance of cls (a C++ layer class or a Python subclass of one) built by the C++ layer's own
    constructor from the recorded arguments (a subclass's __init__ takes other ones, as LoRA's r), then given
    the settings assigned since (cpp_settings). Built as on the meta device: the caller puts the copied
    parameters in, and no random number is drawn (torch's deepcopy and unpickling draw none; a draw here moved the
    generator, so a seeded script's later draws differed from torch's)."""
    base = next(c for c in cls.__mro__ if "_tessel_cpp_init" in c.__dict__)
    new = cls.__new__(cls)
    with _device.device("meta"):
        base._tessel_cpp_init(new, *ctor[0], **ctor[1])
    new.__dict__[_CTOR_KEY] = ctor
    for name, value in (settings or {}).items():
        object.__setattr__(new, name, value)
    return new


def _put_copied_parameter(new, name, value):
    """The copy's parameter `name`: the layer's own replaced (any shape), one a subclass added registered."""
    if new._has_parameter(name):
        new._set_parameter(name, value, True)
    else:
        setattr(new, name, value if isinstance(value, Parameter) else Parameter(value.detach(), value.requires_grad))


def _put_copied_buffer(new, name, value, persistent, copied):
    """The copy's buffer `name`: the layer's own filled with value, one a subclass added registered as
    copied(value)."""
    if any(n == name for n, _ in new._named_buffers(False)):
        if not value.is_meta:
            with _C._GradMode(False):
                getattr(new, name).copy_(value)
    else:
        new.register_buffer(name, copied(value), persistent)
