"""tessel.nn.Module's torch-shaped methods and Parameter (state dicts and their hooks: _state_dict.py;
copy.deepcopy: _copy.py; pickling: _pickle.py; activation and small layer modules: _layers.py; containers:
_containers.py).

``tessel.nn.Module`` *is* the C++ ``nn::Module`` (``tessel._C.Module``): a Python subclass gets a C++
trampoline whose Forward calls the Python ``forward``, so ``fully_shard`` and every other primitive act on
it exactly as on the C++ layers. This file installs torch's attribute registration and methods on that
class; each method converts and calls one C++ primitive (the bookkeeping lives in core/nn/module.cc).

Calling a module runs ``Module::Call``: forward pre-hooks (e.g. FSDP's all-gather), ``forward``, forward
hooks. Tensors among the positional arguments pass through the hooks; other arguments (ints, None,
keyword arguments) go to ``forward`` unchanged.

    class MLP(tessel.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.fc = tessel.nn.Linear(dim, 4 * dim)       # a child: ownership moves into this module
            self.scale = tessel.nn.Parameter(tessel.ones(dim))
        def forward(self, x):
            return F.gelu(self.fc(x))
"""
import collections
import threading
import warnings
import weakref

from .. import _C, _dtypes
from .._complex import ComplexTensor
from ._flatten import _flatten_output

Tensor = _C.Tensor
Module = _C.Module

class _IncompatibleKeys(collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict / set_model_state_dict return: (missing_keys, unexpected_keys), shown as torch's
    "<All keys matched successfully>" when both are empty."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class Parameter(Tensor):
    """A tensor that a module registers as a parameter when assigned as an attribute (torch.nn.Parameter).

    It shares ``data``'s storage (a handle, not a copy); a non-leaf is detached first."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _C._empty([0], _C._get_default_dtype())
        if requires_grad and not data.dtype.is_floating_point:  # (an integer Parameter was accepted)
            raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
        Tensor.__init__(self, data if data.is_leaf else data.detach())
        if data.dtype.is_floating_point:
            self.requires_grad_(requires_grad)
        _C._retag_memory(self, "params")  # its bytes are a parameter's now (a deepcopy's, an assign=True load's)

    def __deepcopy__(self, memo):
        """A Parameter copy (the values cloned, requires_grad kept), as torch's (it came back a plain Tensor)."""
        if id(self) in memo:
            return memo[id(self)]
        from .._serialization import SHARE_TENSORS
        if memo.get(SHARE_TENSORS):
            return self
        out = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = out
        return out

    def __copy__(self):
        """copy.copy, as torch's (a Parameter over the same storage, the attributes shared)."""
        out = Parameter(self.detach(), self.requires_grad)
        for name, value in _parameter_state(self).items():
            setattr(out, name, value)
        return out

    def __reduce_ex__(self, protocol):  # with its attributes, as torch's _rebuild_parameter_with_state
        return (_rebuild_parameter, (self.detach().clone(), self.requires_grad, _parameter_state(self)))

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    __str__ = __repr__  # print(param), as torch's


def _parameter_state(p):
    """The attributes a Parameter pickles with (torch's obj.__dict__: `p._is_hf_initialized = True`), without the
    name tessel keeps on it for optimizers (_fqn)."""
    return {k: v for k, v in getattr(p, "__dict__", {}).items() if k != "_fqn"}


def _rebuild_parameter(data, requires_grad, state=None):
    p = Parameter(data, requires_grad)
    for name, value in (state or {}).items():
        setattr(p, name, value)
    return p


class Buffer(Tensor):
    """torch.nn.Buffer (torch 2.5): a tensor that a module registers as a buffer when assigned as an attribute
    (`self.freqs = nn.Buffer(t, persistent=False)`), as register_buffer does; it shares data's storage."""

    def __init__(self, data=None, *, persistent=True):
        if data is None:
            data = _C._empty([0], _C._get_default_dtype())
        Tensor.__init__(self, data.detach())
        self.persistent = persistent


# One Parameter object per parameter tensor while any handle to it lives (keyed by the TensorImpl, whose
# address Tensor.__hash__ is): `model.fc.weight is model.fc.weight` and `list(model.parameters())` yielding the
# same objects every time, as in torch, so code keyed by parameter identity (dicts of per-parameter
# optimizers, id() maps, post-accumulate-grad hooks) finds its keys again. The entry dies with the object, and
# the module that owns the parameter holds the object for as long as it holds that tensor (_held_parameter), so
# nobody else needs to: `id()` maps made once and attributes set on it (`p.no_weight_decay = True`) stay valid.
_PARAMETERS = weakref.WeakValueDictionary()


def _held_parameter(module, fqn, t):
    """_as_parameter's object for module parameter `fqn` (relative to `module`), held by the module that owns it
    ([Note: parameter host objects] in core/nn/module.h) until that parameter becomes another tensor."""
    return module._host_parameter(fqn, t, lambda tensor: _as_parameter(tensor, fqn, qualified=False))


# The same for buffers (plain tensors): `m.pos is m.pos`, `m.pos in set(m.buffers())` and aliases such as HF's
# `self.original_inv_freq = self.inv_freq` keep one object per buffer tensor while it is held.
_BUFFERS = weakref.WeakValueDictionary()


def _stable(t):
    """The Python object already standing for tensor t (the same TensorImpl), else t, remembered."""
    key = hash(t)
    held = _BUFFERS.get(key)
    if held is not None:
        return held
    _BUFFERS[key] = t
    return t


_BUFFER_OBJECTS = "_tessel_buffer_objects"  # {name: the Python object standing for the buffer} (not copied)


def _buffer_object(module, name, t):
    """One object per buffer for as long as the module holds it (`id(m.pos) == id(m.pos)`, as torch's dict)."""
    if not _has_dict(module):
        return _stable(t)
    held = module.__dict__.setdefault(_BUFFER_OBJECTS, {})
    obj = held.get(name)
    if obj is None or hash(obj) != hash(t):
        obj = held[name] = _stable(t)
    return obj


def _as_parameter(t, fqn, qualified=True):
    """The Parameter object for module tensor t. `fqn` is the name optimizers key their state by (tessel.optim):
    named_parameters passes the name from the module it walks (qualified=True, it replaces the one held);
    attribute access passes the attribute's own name, kept only by an object seen first that way."""
    key = hash(t)
    p = _PARAMETERS.get(key)
    if p is None:
        p = Parameter.__new__(Parameter)
        Tensor.__init__(p, t)
        p._fqn = fqn
        _PARAMETERS[key] = p
    elif qualified:
        p._fqn = fqn
    return p


class RemovableHandle:
    """Returned by register_*_hook; ``remove()`` detaches the hook."""

    def __init__(self, module, hook_id):
        self._module, self._id = module, hook_id

    @property
    def id(self):
        """torch's handle.id: the hook's key in the module's hook dicts (m._forward_hooks[h.id])."""
        return self._id

    def remove(self):
        if self._module is not None:
            self._module._remove_hook(self._id)
            self._module = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _dict(module):
    """The module's __dict__ ({} for a module C++ created, which has none)."""
    try:
        return object.__getattribute__(module, "__dict__")
    except AttributeError:
        return {}


def _has_dict(module):
    try:
        object.__getattribute__(module, "__dict__")
        return True
    except AttributeError:
        return False


def _join(prefix, name):
    return prefix + "." + name if prefix and name else prefix or name  # the root itself is `prefix`, as torch


# ---- attribute registration -------------------------------------------------------------------------

def _keep_frozen(param, register):
    """Registers a Parameter keeping requires_grad=False (the C++ registration marks parameters trainable;
    torch keeps the Parameter's own flag)."""
    frozen = isinstance(param, Tensor) and param.dtype.is_floating_point and not param.requires_grad
    register()
    if frozen:
        param.requires_grad_(False)


def _adopt(module, name, param):
    """After `param` (a Parameter object the caller made) was registered as `name`: it becomes the object that
    attribute access and parameters() return, as in torch (`m.w = p; m.w is p`), unless another object
    already stands for the same tensor."""
    if isinstance(param, Parameter) and hash(param) not in _PARAMETERS:
        held = module._lookup(name)
        if held is not None and hash(held) == hash(param):
            param._fqn = name
            _PARAMETERS[hash(param)] = param
            module._host_parameter(name, param, lambda tensor: param)  # the module holds it from now on


def _child_module(self, name):
    """The child module registered as `name` (Python- or C++-created), or None."""
    child = _dict(self).get("_modules", {}).get(name)
    if child is None:
        found = self._lookup(name)
        child = found if isinstance(found, Module) else None
    return child


def _parent_of(module):
    """The module `module` was last registered into (None when dropped since): FullyShardedDataParallel's
    wrapping puts its placeholder there. A weak reference: children share their C++ parents' ownership
    (bindings/nn_py.cc), so a child needs no reference to its parent."""
    ref = _dict(module).get("_tessel_parent")
    return None if ref is None else ref()


def _set_parent(module, parent):
    state = _dict(module)  # ({} for a module C++ created: FSDP1 never wraps those)
    if parent is not None:
        state["_tessel_parent"] = weakref.ref(parent)
    else:
        state.pop("_tessel_parent", None)


def _drop_child(self, name):
    """Removes child `name` from the C++ tree (the module stays usable wherever else it is held)."""
    child = _child_module(self, name)
    self._remove_module(name)
    if _parent_of(child) is self:
        _set_parent(child, None)


_COMPLEX_KEY = "_tessel_complex_buffers"  # {name: [ComplexTensor, persistent]}: kept in Python (tessel/_complex.py)


def _complex_buffers(module):
    return _dict(module).get(_COMPLEX_KEY)


class _DeletedParameter:
    """What a built-in layer's forward reads for a parameter `del` removed: the tensor assigned to the attribute
    since, as torch's forward reads self.weight (AttributeError, as torch's, while there is none)."""

    def __init__(self, name):
        self.name = name

    def __call__(self, module):
        value = module.__dict__.get(self.name)
        if not isinstance(value, Tensor):
            raise AttributeError("'%s' object has no attribute '%s'" % (type(module).__name__, self.name))
        return value


def _deleted(self, name):
    """Whether `del` removed parameter `name` of a built-in layer (its forward then reads the attribute)."""
    return isinstance(_dict(self).get("_tessel_computed_fns", {}).get(name), _DeletedParameter)


def _getattr(self, name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    modules = _dict(self).get("_modules")
    if modules is not None and name in modules:
        return modules[name]
    try:
        held = self._held_parameter_object(name)  # a parameter read before (the common case): one C++ call
        if held is not None:
            return held
        found = self._lookup(name)
    except TypeError:  # before Module.__init__ ran
        found = None
    if found is not None:
        if self._has_parameter(name):
            return _held_parameter(self, name, found)
        return _buffer_object(self, name, found) if isinstance(found, Tensor) else found
    held = _complex_buffers(self)
    if held is not None and name in held:
        return held[name][0]
    try:
        if _deleted(self, name):  # the tensor assigned since (past a property such as Linear.bias), else torch's error
            return _DeletedParameter(name)(self)
        if self._registered(name):  # register_parameter("bias", None), Linear(bias=False).bias: None, as torch
            return None
    except TypeError:  # before Module.__init__ ran
        pass
    method = _fsdp_method(self, name)
    if method is not None:
        return method
    # (a module C++ created has the generic class: name its own type, "TransformerBlock")
    owner = self._type_name if type(self) is _C.Module else type(self).__name__
    raise AttributeError("'%s' object has no attribute '%s'" % (owner, name))


def _fsdp_method(module, name):
    """FSDPModule's method `name` bound to a fully sharded module that C++ created (tessel.nn.GPT's blocks): such
    a module has no __dict__ to hold them, as fully_shard puts them on other C++ layers; else None."""
    if _has_dict(module) or _C._fsdp_state(module) is None:
        return None
    from ..distributed.fsdp import _METHODS, FSDPModule
    if name not in _METHODS:
        return None
    import types
    return types.MethodType(getattr(FSDPModule, name), module)


# ---- calling ----------------------------------------------------------------------------------------

def _outputs(outs, kind):
    if callable(kind):  # any other structure: rebuilt around the (hook-wrapped) tensors
        return kind(list(outs))
    if kind == "tensor" or (kind is None and len(outs) == 1):
        return outs[0]
    return list(outs) if kind == "list" else tuple(outs)


def _fsdp_cast_inputs(module, args, kwargs):
    """fully_shard's cast_forward_inputs casts the positional tensors in its C++ pre-forward hook, which
    keyword arguments and tensors inside containers ([x, mask], {"ids": ...}) do not reach: the floating ones
    are cast here, as torch's pre-forward casts every floating tensor of the call. Returns (args, kwargs)."""
    if not kwargs:  # (a loop, not all(genexpr): every module call passes here)
        for a in args:
            if not isinstance(a, Tensor) and isinstance(a, (list, tuple, dict)):
                break
        else:
            return args, kwargs
    st = _C._fsdp_state(module) if hasattr(_C, "_fsdp_state") else None
    cast = st.forward_input_cast_dtype if st is not None else None
    if cast is None:
        return args, kwargs

    def tree(v):  # v with its floating tensors (in any nesting _flatten_output walks) cast
        tensors = []
        rebuild = _flatten_output(v, tensors)
        return rebuild([t.to(cast) if t.dtype.is_floating_point else t for t in tensors])
    return tuple(a if isinstance(a, Tensor) else tree(a) for a in args), {k: tree(v) for k, v in kwargs.items()}


# torch.nn.modules.module's global hooks: every module call (from Python) runs them around its forward. Global to
# the rank: per thread, since a run_ranks rank is a thread (as the default process group is), so one rank's hooks
# do not see another rank's modules.
_global_hooks = threading.local()
_global_hook_ids = [0]


def _hooks(kind):
    hooks = getattr(_global_hooks, kind, None)
    if hooks is None:
        hooks = collections.OrderedDict()
        setattr(_global_hooks, kind, hooks)
    return hooks


class _GlobalHookHandle:
    """torch's RemovableHandle for a global hook: remove(), or use it as a context manager."""

    def __init__(self, hooks, hook):
        _global_hook_ids[0] += 1
        self._hooks, self.id = hooks, _global_hook_ids[0]
        hooks[self.id] = hook

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_module_forward_pre_hook(hook):
    """torch's global forward pre-hook: hook(module, args) before every module's forward on this rank; a
    non-None result replaces args (a tuple, or one value)."""
    return _GlobalHookHandle(_hooks("pre"), hook)


def register_module_forward_hook(hook, *, always_call=False):
    """torch's global forward hook: hook(module, args, output) after every module's forward on this rank; a
    non-None result replaces the output. always_call: also when forward raised (with output None)."""
    return _GlobalHookHandle(_hooks("post"), (hook, always_call))


_CALL_LAYOUTS = "_tessel_call_layouts"  # {tensor count: {(positional count, tensor slots)}} of the Python calls
_ALWAYS_CALL = "_tessel_always_call_hooks"  # {hook id: (hook, with_kwargs)}: forward hooks with always_call=True
_ALWAYS_RAN = "_tessel_always_call_ran"  # per call in progress: the ids of its always_call hooks that have run


def _call_forward_or_hooks(self, args, kwargs):
    """forward, and when it (or a forward hook) raises, the module's always_call forward hooks that have not run
    with output None, as torch: one that raises then is reported by a warning, and the first error goes on."""
    always = _dict(self).get(_ALWAYS_CALL)
    if not always:
        return _call_forward(self, *args, **kwargs)
    ran = self.__dict__.setdefault(_ALWAYS_RAN, [])
    ran.append(set())  # (the always_call hooks of this call that ran: _module_hooks.py marks them)
    try:
        return _call_forward(self, *args, **kwargs)
    except Exception:
        done = ran[-1]
        for hook_id, (hook, with_kwargs) in list(always.items()):
            if hook_id not in done:
                _silenced(hook, (self, args, kwargs, None) if with_kwargs else (self, args, None), "")
        raise
    finally:
        ran.pop()


def _silenced(hook, args, scope):
    """An always_call forward hook run after forward raised: its own error becomes torch's warning."""
    try:
        hook(*args)
    except Exception as e:
        warnings.warn("%smodule forward hook with ``always_call=True`` raised an exception that was silenced as "
                      "another error was raised in forward: %s" % (scope, e), stacklevel=4)


def _call(self, *args, **kwargs):
    if not _global_hooks.__dict__:  # fast path: this thread never set a global hook (the rest reads them all None)
        return _call_forward_or_hooks(self, args, kwargs)
    pre, post = getattr(_global_hooks, "pre", None), getattr(_global_hooks, "post", None)
    if getattr(_global_hooks, "bw", None) or getattr(_global_hooks, "bw_pre", None):
        _ensure_global_backward_proxies(self)  # torch's global backward hooks (_module_hooks.py)
    if not (pre or post):
        return _call_forward_or_hooks(self, args, kwargs)
    for hook in list((pre or {}).values()):
        result = hook(self, args)
        if result is not None:
            args = result if isinstance(result, tuple) else (result,)
    # The global forward hooks run before the module's own, as torch's: the first of the module's Python forward
    # hooks runs them (_run_pending_global_hooks); if none does, they run here on forward's output.
    pending = _PendingGlobalHooks(self, args, list((post or {}).values()))
    stack = _dict(self).setdefault(_GLOBAL_POST, []) if _has_dict(self) else []
    stack.append(pending)
    try:
        out = _call_forward_or_hooks(self, args, kwargs)
    except Exception:
        if not pending.done:
            for hook, always in pending.hooks:
                if always:
                    _silenced(hook, (self, args, None), "global ")
        raise
    finally:
        stack.pop()
    if not pending.done:
        out, _ = pending.run(out)
    return out


_GLOBAL_POST = "_tessel_global_post"  # per module: its calls in progress (_PendingGlobalHooks)


class _PendingGlobalHooks:
    """One module call's global forward hooks (hook, always_call), run once on its output."""
    __slots__ = ("module", "args", "hooks", "done")

    def __init__(self, module, args, hooks):
        self.module, self.args, self.hooks, self.done = module, args, hooks, False

    def run(self, out):
        """(the output the hooks leave, whether one replaced it)."""
        self.done = True
        changed = False
        for hook, _ in self.hooks:
            result = hook(self.module, self.args, out)
            if result is not None:
                out, changed = result, True
        return out, changed


def _run_pending_global_hooks(mod, out):
    """From a module's forward hook: runs the global forward hooks of `mod`'s current call if they have not run
    yet, so that they come before the module's own hooks."""
    stack = _dict(mod).get(_GLOBAL_POST) if _has_dict(mod) else None
    if not stack or stack[-1].done:
        return out, False
    return stack[-1].run(out)


_ONE_INPUT_LAYERS = (_C.Linear, _C.LayerNorm, _C.RMSNorm, _C.Embedding)  # the C++ layers: forward(input)


def _call_forward(self, *args, **kwargs):
    slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not self._has_python_forward and not self._forward_overridden:  # a C++ module: its Forward takes tensors
        if not args and list(kwargs) == ["input"]:  # layer(input=x), torch's parameter name
            args, kwargs, slots = (kwargs["input"],), {}, [0] if isinstance(kwargs["input"], Tensor) else []
        if isinstance(self, _ONE_INPUT_LAYERS) and len(args) != 1:
            raise TypeError("%s.forward() missing 1 required positional argument: 'input'" % type(self).__name__
                            if not args else "%s.forward() takes 2 positional arguments but %d were given"
                            % (type(self).__name__, len(args) + 1))
        if kwargs or len(slots) != len(args):
            raise TypeError("%s.forward takes tensors only, got (%s)" % (
                self._type_name, ", ".join(type(a).__name__ for a in args) + (", **kwargs" if kwargs else "")))
        return _outputs(_kept_identity(self._call(list(args)), args), None)
    args, kwargs = _fsdp_cast_inputs(self, args, kwargs)
    layouts = self.__dict__.get(_CALL_LAYOUTS)
    if layouts is not None:  # a full backward hook shows grad_input by position (_module_hooks.py)
        layouts.setdefault(len(slots), set()).add((len(args), tuple(slots)))
    call = [args, kwargs, slots, None]  # the last entry: output kind, set by _forward_from_cpp
    stack = self.__dict__.setdefault("_tessel_calls", [])
    stack.append(call)
    try:
        outs = self._call([args[i] for i in slots])
    finally:
        stack.pop()
    out = _outputs(_kept_identity(outs, [args[i] for i in slots]), call[3])
    if layouts is not None:  # and the output's, for the grad_output the backward hooks show (_module_hooks.py)
        note_output_layout(self, out, len(outs))
    return out


def _kept_identity(outs, inputs):
    """An output that is an input tensor comes back as the caller's object (torch's `Identity()(x) is x`; the
    C++ call hands back a new handle on the same tensor)."""
    if not inputs:
        return outs
    if len(outs) == 1 and len(inputs) == 1 and isinstance(outs[0], Tensor):  # fast path: one in, one out
        return [inputs[0]] if outs[0]._is_same(inputs[0]) else outs
    return [next((a for a in inputs if o._is_same(a)), o) if isinstance(o, Tensor) else o for o in outs]


def _forward_from_cpp(self, inputs):
    """Called by the C++ trampoline between the hooks: rebuilds the Python call around the (possibly
    hook-rewritten) tensors, runs forward and flattens its output to a list of tensors."""
    call = _current_call(self)  # None: called from C++ (a pipeline stage, a C++ parent), tensors only
    out = self.forward(*_call_args(self, call, inputs), **(call[1] if call is not None else {}))
    if isinstance(out, Tensor):
        kind, outs = "tensor", [out]
    elif type(out) in (tuple, list) and all(isinstance(o, Tensor) for o in out):
        kind, outs = ("list" if isinstance(out, list) else "tuple"), list(out)
    elif call is None:
        raise TypeError("%s.forward must return a Tensor or a tuple/list of Tensors when called from C++, got %s"
                        % (type(self).__name__, type(out).__name__))
    else:  # (logits, None), dicts, namedtuples, numbers: hooks see the tensors, the rest is kept as is
        outs = []
        kind = _flatten_output(out, outs)
    if call is not None:
        call[3] = kind
    return outs


def _forward(self, *args, **kwargs):
    if self._has_python_forward:
        raise NotImplementedError('Module [%s] is missing the required "forward" function' % type(self).__name__)
    return _outputs(self._forward_cpp(list(args)), None)


# ---- torch.nn.Module's methods ----------------------------------------------------------------------

def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    for name, held, t in self._named_parameter_objects(recurse, remove_duplicate):
        fqn = _join(prefix, name)
        p = held if held is not None else _held_parameter(self, name, t)
        p._fqn = fqn  # the name optimizers key its state by: the one from the walk that found it last
        yield fqn, p


def parameters(self, recurse=True):
    for _, p in self.named_parameters(recurse=recurse):
        yield p


def _named_complex_buffers(self, recurse, persistent_only=False):
    """(qualified name, ComplexTensor) of the complex buffers, module by module after the real ones."""
    for mname, m in (self.named_modules() if recurse else [("", self)]):
        for name, (value, persistent) in (_complex_buffers(m) or {}).items():
            if persistent or not persistent_only:
                yield _join(mname, name), value


def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
    for name, t in self._named_buffers(recurse, remove_duplicate):
        yield _join(prefix, name), _stable(t) if t is not None else t
    for name, t in _named_complex_buffers(self, recurse):
        yield _join(prefix, name), t


def buffers(self, recurse=True):
    for _, b in self.named_buffers(recurse=recurse):
        yield b


def named_modules(self, memo=None, prefix="", remove_duplicate=True):
    skipped = []  # torch's memo: a module already seen is skipped with its subtree
    for name, m in self._named_modules(remove_duplicate):
        if memo is not None and remove_duplicate:
            if any(s == "" or name == s or name.startswith(s + ".") for s in skipped):
                continue
            if m in memo:
                skipped.append(name)
                continue
            memo.add(m)
        yield _join(prefix, name), m


def modules(self):
    for _, m in self.named_modules():
        yield m


def named_children(self):
    seen = set()  # torch's: a module registered under two names is one child
    for name, m in self._named_children():
        if id(m) not in seen:
            seen.add(id(m))
            yield name, m


def children(self):
    for _, m in named_children(self):
        yield m


def train(self, mode=True):
    if not isinstance(mode, bool):
        raise TypeError("training mode is expected to be boolean, got %s" % type(mode).__name__)
    self._train(mode, False)
    for child in self.children():  # through Python, so a child's own train() override runs (torch's)
        child.train(mode)
    return self


def eval(self):
    return self.train(False)


def zero_grad(self, set_to_none=True):
    if set_to_none:
        self._zero_grad()
        return
    for p in self.parameters():
        if p.grad is not None:
            p.grad.zero_()


def requires_grad_(self, requires_grad=True):
    for p in self.parameters():
        p.requires_grad_(requires_grad)
    return self


def apply(self, fn):
    for m in self.children():
        m.apply(fn)
    fn(self)
    return self


_NONE_KEY = "_tessel_registered_none"  # {name: is_parameter} of register_parameter / register_buffer(name, None)


def _note_none(self, name, is_parameter, value):
    try:
        noted = object.__getattribute__(self, "__dict__").setdefault(_NONE_KEY, {})
    except AttributeError:  # a module C++ created has no __dict__ (nothing to deepcopy from Python either)
        return
    if value is None:
        noted[name] = is_parameter
    else:
        noted.pop(name, None)


def register_parameter(self, name, param):
    """torch's rules: a name that is already a parameter is replaced (distribute_module's partition_fn
    re-registers each parameter as a DTensor), any other existing attribute is a KeyError."""
    if not isinstance(name, str):
        raise TypeError("parameter name should be a string. Got %s" % type(name).__name__)
    if "." in name:
        raise KeyError('parameter name can\'t contain "."')
    if name == "":
        raise KeyError('parameter name can\'t be empty string ""')
    replacing = self._has_parameter(name)
    if not replacing and (name in _dict(self) or hasattr(type(self), name) or self._lookup(name) is not None):
        raise KeyError("attribute '%s' already exists" % name)
    if param is not None and not isinstance(param, Parameter):  # a plain tensor too, as torch
        raise TypeError("cannot assign '%s' object to parameter '%s' (torch.nn.Parameter or None required)"
                        % (type(param).__name__, name))
    _note_none(self, name, True, param)
    if replacing:
        _keep_frozen(param, lambda: self._set_parameter(name, param, True))
    elif isinstance(param, Parameter):
        _keep_frozen(param, lambda: self._register_parameter(name, param))
    else:
        self._register_parameter(name, param)
    _adopt(self, name, param)


_register_buffer_cpp = Module.register_buffer


def register_buffer(self, name, tensor, persistent=True):
    if not isinstance(name, str):
        raise TypeError("buffer name should be a string. Got %s" % type(name).__name__)
    if "." in name:
        raise KeyError('buffer name can\'t contain "."')
    if name == "":
        raise KeyError('buffer name can\'t be empty string ""')
    is_buffer = any(n == name for n, _ in self._named_buffers(False)) or name in (_complex_buffers(self) or {}) or \
        (_dict(self).get(_NONE_KEY, {}).get(name) is False)
    if not is_buffer and (self._has_parameter(name) or _child_module(self, name) is not None or name in _dict(self)):
        raise KeyError("attribute '%s' already exists" % name)  # torch's: a parameter, child or attribute
    if isinstance(tensor, ComplexTensor):
        if name in _dict(self) or self._lookup(name) is not None:
            raise KeyError("attribute '%s' already exists" % name)
        _note_none(self, name, False, tensor)
        self.__dict__.setdefault(_COMPLEX_KEY, collections.OrderedDict())[name] = [tensor, persistent]
        return
    _note_none(self, name, False, tensor)
    _register_buffer_cpp(self, name, tensor, persistent)


def add_module(self, name, module):
    if module is not None and not isinstance(module, Module):
        raise TypeError("%s is not a Module subclass" % type(module).__name__)
    if not isinstance(name, str):
        raise TypeError("module name should be a string. Got %s" % type(name).__name__)
    if "." in name or name == "":
        raise KeyError('module name can\'t contain ".", got: %s' % name if name else 'module name can\'t be empty '
                       'string ""')
    if _child_module(self, name) is None and name not in _dict(self).get("_modules", {}) and (
            self._has_parameter(name) or any(n == name for n, _ in self._named_buffers(False))
            or name in _dict(self) or hasattr(type(self), name)):  # (a plain attribute too, as torch's)
        raise KeyError("attribute '%s' already exists" % name)
    if module is None and _child_module(self, name) is None and _has_dict(self):
        self.__dict__.setdefault("_modules", {})[name] = None  # torch: a child slot holding None (not an attribute)
        return
    _setattr(self, name, module)


def _module_compile(self, *args, **kwargs):
    """torch's in-place Module.compile(): tessel runs eagerly (tessel.compile returns its argument), so the
    module is left as it is."""
    return None


def _current_call(mod):
    """The Python call of `mod` being run ([args, kwargs, tensor slots, output kind]; _call_forward), or None
    when C++ called it (a pipeline stage, a C++ parent: tensors only)."""
    calls = _dict(mod).get("_tessel_calls")  # (a module C++ created has no dict: C++ calls it)
    return calls[-1] if calls else None


def _call_args(mod, call, inputs):
    """forward's positional arguments with the tensors as the hooks so far left them (`inputs`, in slot order)."""
    if call is None:
        return tuple(inputs)
    if len(inputs) != len(call[2]):
        raise RuntimeError("%s: a forward pre-hook returned %d tensors for %d tensor arguments"
                           % (type(mod).__name__, len(inputs), len(call[2])))
    args = list(call[0])
    for i, t in zip(call[2], inputs):
        args[i] = t
    return tuple(args)


def extra_repr(self):
    return ""


def _repr(self):
    if not self._constructed:  # a layer whose __init__ raised, as a traceback's locals show it
        return "<%s (not constructed)>" % type(self).__name__
    child_lines = []
    for name, child in self._modules._items():  # a child set to None prints as None, in its place (torch's)
        child_lines.append("(%s): %s" % (name, repr(child).replace("\n", "\n  ")))
    extra = self.extra_repr()
    extra_lines = extra.split("\n") if extra else []
    # the C++ type name (a Python module's class name when it was built; a GPT's block, which has no class of
    # its own), but a Python subclass of a C++ layer prints its class's name, as torch's _get_name()
    subclass = not self._has_python_forward and type(self).__module__ != _C.__name__
    name = type(self).__name__ if subclass else self._type_name
    lines = extra_lines + child_lines  # torch's layout: one extra line alone inline, else every line indented
    if not lines:
        return "%s()" % name
    if len(extra_lines) == 1 and not child_lines:
        return "%s(%s)" % (name, extra_lines[0])
    return "%s(\n  %s\n)" % (name, "\n  ".join(lines))


# State dicts and their hooks live in _state_dict.py, which imports this file's helpers defined above.
from ._state_dict import (  # noqa: E402
    _load_from_state_dict, _persistent_buffer_names, _register_load_state_dict_pre_hook, _register_state_dict_hook,
    _save_to_state_dict,
    get_extra_state, load_state_dict, register_load_state_dict_post_hook, register_load_state_dict_pre_hook,
    register_state_dict_post_hook, register_state_dict_pre_hook, set_extra_state, state_dict)
# Lookups by dotted path live in _module_lookup.py (they read the helpers above).
from ._module_lookup import get_buffer, get_parameter, get_submodule, set_submodule  # noqa: E402
# copy.deepcopy lives in _copy.py (it reads _persistent_buffer_names above).
from ._copy import _deepcopy  # noqa: E402
from ._module_setattr import _delattr, _setattr  # noqa: E402

from ._module_hooks import (_ensure_global_backward_proxies, _forward_hook_method, _listed,  # noqa: E402
                            _forward_pre_hook_method, _full_backward_hook_method, _full_backward_pre_hook_method,
                            install_hook_dicts, note_output_layout,
                            register_module_backward_hook, register_module_full_backward_hook,  # noqa: F401
                            register_module_full_backward_pre_hook)
from ._module_to import _module_cast, _module_cuda, _module_to, _module_type, _to_empty  # noqa: E402

_METHODS = dict(
    __setattr__=_setattr, __delattr__=_delattr, __getattr__=_getattr, __call__=_call, __repr__=_repr,
    _forward_from_cpp=_forward_from_cpp,
    forward=_forward, named_parameters=named_parameters, parameters=parameters, named_buffers=named_buffers,
    buffers=buffers, named_modules=named_modules, modules=modules, named_children=named_children, children=children,
    state_dict=state_dict, load_state_dict=load_state_dict, _load_from_state_dict=_load_from_state_dict, train=train,
    _save_to_state_dict=_save_to_state_dict,
    eval=eval, zero_grad=zero_grad,
    requires_grad_=requires_grad_, apply=apply, to=_module_to, cpu=lambda self: self, cuda=_module_cuda,
    to_empty=_to_empty,
    float=_module_cast(_dtypes.float32), double=_module_cast(_dtypes.float64), half=_module_cast(_dtypes.float16),
    bfloat16=_module_cast(_dtypes.bfloat16),
    register_parameter=register_parameter, add_module=add_module,
    register_module=add_module, get_parameter=get_parameter, extra_repr=extra_repr, register_buffer=register_buffer,
    get_buffer=get_buffer, set_submodule=set_submodule, get_submodule=get_submodule, type=_module_type,
    compile=_module_compile,
    register_forward_pre_hook=_listed("_forward_pre_hooks", _forward_pre_hook_method),
    register_forward_hook=_listed("_forward_hooks", _forward_hook_method), __deepcopy__=_deepcopy,
    register_full_backward_pre_hook=_listed("_backward_pre_hooks", _full_backward_pre_hook_method),
    register_full_backward_hook=_listed("_backward_hooks", _full_backward_hook_method),
    register_state_dict_pre_hook=register_state_dict_pre_hook,
    register_state_dict_post_hook=register_state_dict_post_hook,
    _register_state_dict_hook=_register_state_dict_hook,
    register_load_state_dict_pre_hook=register_load_state_dict_pre_hook,
    _register_load_state_dict_pre_hook=_register_load_state_dict_pre_hook,
    register_load_state_dict_post_hook=register_load_state_dict_post_hook,
    get_extra_state=get_extra_state, set_extra_state=set_extra_state,
)
_NO_ATTR = "'{}' object has no attribute '%s'"
# method -> what torch raises when a subclass calls it before Module.__init__ (the C++ module does not exist yet:
# the call crashed the process)
_BEFORE_INIT = dict(
    register_buffer="cannot assign buffer before Module.__init__() call",
    register_parameter="cannot assign parameter before Module.__init__() call",
    **{name: _NO_ATTR % "_modules" for name in ("add_module", "register_module", "named_modules", "modules",
                                                "named_children", "children", "state_dict", "load_state_dict",
                                                "apply", "to")},
    **{name: _NO_ATTR % "_parameters" for name in ("named_parameters", "parameters", "zero_grad", "requires_grad_")},
    **{name: _NO_ATTR % "_buffers" for name in ("named_buffers", "buffers")},
)


def _guarded(fn, message):
    def method(self, *args, **kwargs):
        if not self._constructed:
            raise AttributeError(message.format(type(self).__name__))
        return fn(self, *args, **kwargs)
    method.__name__, method.__doc__, method.__wrapped__ = fn.__name__, fn.__doc__, fn
    return method


for _name, _fn in _METHODS.items():
    setattr(Module, _name, _guarded(_fn, _BEFORE_INIT[_name]) if _name in _BEFORE_INIT else _fn)
Module._version = 1  # torch's: the local metadata's version a state dict records (a subclass bumps it)
from ._dict_views import install as _install_dict_views  # noqa: E402
_install_dict_views(Module)  # module._parameters / _buffers / _non_persistent_buffers_set, as torch's
install_hook_dicts(Module)  # module._forward_hooks / _forward_pre_hooks / _backward_hooks / _backward_pre_hooks


class _PlainModule(Module):
    """What `nn.Module()` itself makes: torch's bare Module, used as a container (`m = nn.Module();
    m.block = ...`). The C++ base class has no instance dictionary (nn_py.cc says why), so a bare instance
    could hold no attributes; this Python subclass named "Module" has one."""


_PlainModule.__name__ = _PlainModule.__qualname__ = "Module"
_pybind_new = Module.__new__


def _module_new(cls, *args, **kwargs):
    return _pybind_new(_PlainModule if cls is Module else cls)


Module.__new__ = _module_new

_C.Linear.extra_repr = lambda self: "in_features=%d, out_features=%d, bias=%s" % (
    self.in_features, self.out_features, self._has_parameter("bias"))
_C.LayerNorm.extra_repr = lambda self: "%s, eps=%s, elementwise_affine=%s, bias=%s" % (
    self.normalized_shape, self.eps, self.elementwise_affine, self._has_parameter("bias"))


def _rms_norm_repr(self):
    """torch prints eps=None for the default (the input dtype's machine epsilon)."""
    return "%s, eps=%s, elementwise_affine=%s" % (self.normalized_shape, self.eps, self.elementwise_affine)


def _embedding_repr(self):
    text = "%d, %d" % tuple(self.weight.shape)
    if self.padding_idx is not None:
        text += ", padding_idx=%d" % self.padding_idx
    if self.max_norm is not None:
        text += ", max_norm=%s" % self.max_norm
    if self.norm_type != 2.0:
        text += ", norm_type=%s" % self.norm_type
    if self.scale_grad_by_freq:
        text += ", scale_grad_by_freq=True"
    return text


_C.RMSNorm.extra_repr = _rms_norm_repr
_C.Embedding.extra_repr = _embedding_repr
# torch's attributes of an Embedding (the table's shape; sparse gradients are refused at construction)
_C.Embedding.num_embeddings = property(lambda self: self.weight.shape[0])
_C.Embedding.embedding_dim = property(lambda self: self.weight.shape[1])
_C.Embedding.sparse = False


import sys as _sys  # noqa: E402

# torch.nn.modules.module's path for the hooks above, imported or read as an attribute
module = _sys.modules[__name__ + ".module"] = _sys.modules[__name__]


def _torch_file_modules():
    """torch.nn.modules.<file> (linear, conv, rnn, dropout, activation, ...), the paths scripts name classes by
    (`torch.nn.modules.linear.Linear` in safe_globals lists, isinstance checks): each resolves any of tessel.nn's
    names on first use."""
    import types

    # torch's private base classes that scripts test with isinstance (freeze-BN helpers, timm's layer walks)
    private = {"_BatchNorm": "_BatchNormNd", "_NormBase": "_NormBase", "_InstanceNorm": "_InstanceNormNd",
               "_ConvNd": "_ConvNd", "_MaxPoolNd": "_MaxPoolNd", "_AvgPoolNd": "_AvgPoolNd",
               "_AdaptiveAvgPoolNd": "_AdaptiveAvgPoolNd", "_AdaptiveMaxPoolNd": "_AdaptiveMaxPoolNd"}

    def resolver(path):
        def __getattr__(name):
            from .. import nn
            if name in private:
                from . import _conv_modules
                return getattr(_conv_modules, private[name])
            if name == "NonDynamicallyQuantizableLinear":  # MultiheadAttention's out_proj class
                from . import _transformer
                return _transformer.NonDynamicallyQuantizableLinear
            if name.startswith("__") or not hasattr(nn, name):
                raise AttributeError("module %r has no attribute %r" % (path, name))
            return getattr(nn, name)
        return __getattr__
    for short in ("activation", "adaptive", "batchnorm", "channelshuffle", "container", "conv", "distance",
                  "dropout", "flatten", "fold", "instancenorm", "lazy", "linear", "loss", "normalization", "padding",
                  "pixelshuffle", "pooling", "rnn", "sparse", "transformer", "upsampling"):
        path = __name__ + "." + short
        mod = types.ModuleType(path, "torch.nn.modules.%s: tessel.nn's classes under torch's file path" % short)
        mod.__getattr__ = resolver(path)
        _sys.modules[path] = mod
        globals()[short] = mod


_torch_file_modules()
