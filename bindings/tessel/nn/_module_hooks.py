"""Module hook registration for the Python face (torch.nn.Module's register_forward_pre_hook /
register_forward_hook / register_full_backward_(pre_)hook): the C++ hooks get wrappers that show a Python call's
whole arguments and output structure, and always_call hooks also run when forward raises (modules.py's _call).
Split from nn/modules.py by concept.
"""
import collections.abc

from .. import _C
from .modules import (_ALWAYS_CALL, _ALWAYS_RAN, _CALL_LAYOUTS, Module, RemovableHandle, _call_args, _current_call,
                      _dict, _flatten_output, _GlobalHookHandle, _has_dict, _hooks, _run_pending_global_hooks)

Tensor = _C.Tensor


_OUT_LAYOUTS = "_tessel_output_layouts"  # {tensor count: {layout}} of the module's Python calls' outputs


def note_output_layout(module, out, n_tensors):
    """Called by _call_forward (once a full backward hook or pre-hook is registered) with a call's final output
    and its tensor count: torch's grad_output has one entry per element of a tuple output, None for a non-tensor
    one (a nested tensor's gradient is not shown), so the layout is, per element, its tensor's index among the
    C++ hook's tensors or None (None as a whole: the C++ hook's tuple already is torch's)."""
    layout = None
    if isinstance(out, tuple) and not all(isinstance(o, _C.Tensor) for o in out):
        layout, k = [], 0
        for o in out:
            if isinstance(o, _C.Tensor):
                layout.append(k)
                k += 1
            else:
                layout.append(None)
                k += len(_flattened(o))
        layout = tuple(layout)
    module.__dict__.setdefault(_OUT_LAYOUTS, {}).setdefault(n_tensors, set()).add(layout)


def _flattened(value):
    tensors = []
    _flatten_output(value, tensors)
    return tensors


def _shown_grad_output(mod, grad_output):
    """(grad_output as torch's hooks see it, the layout to map a replacement back; None: as it is). A module
    called with several output layouts of as many tensors shows the tensor-only tuple."""
    layouts = _dict(mod).get(_OUT_LAYOUTS, {}).get(len(grad_output), ())
    layout = next(iter(layouts)) if len(layouts) == 1 else None
    if layout is None:
        return tuple(grad_output), None
    return tuple(None if k is None else grad_output[k] for k in layout), layout


def _full_backward_pre_hook_method(self, hook, prepend=False):
    """register_full_backward_pre_hook: hook(module, grad_output) with one entry per element of forward's output
    tuple (None for the non-tensor ones, as torch's); a replacement must have as many entries, those of the
    tensor elements are taken."""
    if _has_dict(self):
        self.__dict__.setdefault(_CALL_LAYOUTS, {})  # (_call_forward notes the output layouts from now on)

    def on_grad_output(mod, grad_output):
        shown, layout = _shown_grad_output(mod, grad_output)
        result = hook(mod, shown)
        if result is None or layout is None:  # (the C++ hook checks a replacement of the tensors' tuple)
            return result
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(result) != len(shown):
            raise RuntimeError("Backward pre hook returned an invalid number of grad_output, got %d, but expected %d"
                               % (len(result), len(shown)))
        new = list(grad_output)
        for k, g in zip(layout, result):
            if k is not None:
                new[k] = g
        return tuple(new)
    return RemovableHandle(self, Module._register_full_backward_pre_hook(self, on_grad_output, bool(prepend)))


def _full_backward_hook_method(self, hook, prepend=False):
    """register_full_backward_hook: hook(module, grad_input, grad_output), grad_input with one entry per positional
    argument of forward, None for the non-tensor ones, and grad_output with one per element of forward's output
    tuple, None for the non-tensor ones, as torch's (the C++ hook sees the tensors only). The positions come from
    the module's Python calls (_call_forward records them once a hook is registered); a module called with several
    layouts of as many tensors gets the tensor-only tuple, as before."""
    if _has_dict(self):
        self.__dict__.setdefault(_CALL_LAYOUTS, {})

    def on_backward(mod, grad_input, grad_output):
        grad_output = _shown_grad_output(mod, grad_output)[0]
        layouts = _dict(mod).get(_CALL_LAYOUTS, {}).get(len(grad_input), ())
        if len(layouts) != 1:
            return hook(mod, grad_input, grad_output)
        n, slots = next(iter(layouts))
        if n == len(slots):
            return hook(mod, grad_input, grad_output)
        full = [None] * n
        for i, g in zip(slots, grad_input):
            full[i] = g
        result = hook(mod, tuple(full), grad_output)
        if result is None:
            return None
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(result) != n:
            raise RuntimeError("Backward hook returned an invalid number of grad_input, got %d, but expected %d"
                               % (len(result), n))
        return tuple(result[i] for i in slots)
    return RemovableHandle(self, Module._register_full_backward_hook(self, on_backward, bool(prepend)))


def _forward_pre_hook_method(self, hook, *, prepend=False, with_kwargs=False):
    """register_forward_pre_hook, torch's: hook(module, args) sees forward's positional arguments as the call
    passed them (non-tensor ones included) and may return replacements for them (a tuple, or one value for a
    one-argument call); with_kwargs=True: hook(module, args, kwargs), which may return (new_args, new_kwargs).
    prepend=True: before the hooks already registered (fully_shard's own included)."""

    def on_call(mod, inputs):
        call = _current_call(mod)
        args = _call_args(mod, call, inputs)
        if with_kwargs:
            result = hook(mod, args, call[1] if call is not None else {})
            if result is None:
                return None
            if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
                raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but "
                                   "got %r." % (result,))
            new_args, new_kwargs = result[0], dict(result[1])
        else:
            result = hook(mod, args)
            if result is None:
                return None
            new_args, new_kwargs = result, None
        new_args = tuple(new_args) if isinstance(new_args, tuple) or (with_kwargs and isinstance(new_args, list)) \
            else (new_args,)
        if call is None:
            if new_kwargs or not all(isinstance(a, Tensor) for a in new_args):
                raise TypeError("%s: a forward pre-hook returned keyword or non-tensor arguments for a call from "
                                "C++, which passes tensors only" % type(mod).__name__)
            return new_args
        call[0] = new_args
        if new_kwargs is not None:
            call[1] = new_kwargs
        call[2] = [i for i, a in enumerate(new_args) if isinstance(a, Tensor)]
        return tuple(new_args[i] for i in call[2])
    return RemovableHandle(self, Module._register_forward_pre_hook(self, on_call, bool(prepend)))


def _forward_hook_method(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
    """register_forward_hook: the hook sees forward's output as forward returned it ((logits, None), a
    dict, ...) and may return a replacement of any structure. with_kwargs=True, torch's: hook(module, args,
    kwargs, output) with forward's whole call. prepend=True: before the hooks already registered."""

    def on_tensors(mod, inputs, out):
        if always_call:  # (so that a later error does not run it again: modules.py's _call_forward_or_hooks)
            ran = _dict(mod).get(_ALWAYS_RAN)
            if ran:
                ran[-1].add(hook_id)
        call = _current_call(mod)
        kind = call[3] if call is not None else None
        shown = kind(list(out) if isinstance(out, tuple) else [out]) if callable(kind) else out
        shown, changed = _run_pending_global_hooks(mod, shown)
        args = _call_args(mod, call, inputs)
        result = hook(mod, args, call[1] if call is not None else {}, shown) if with_kwargs else hook(mod, args, shown)
        if result is None:
            if not changed:
                return None
            result = shown
        if not callable(kind):
            return result
        tensors = []
        call[3] = _flatten_output(result, tensors)
        return tuple(tensors)
    hook_id = Module._register_forward_hook(self, on_tensors, bool(prepend))
    if not always_call or not _has_dict(self):
        return RemovableHandle(self, hook_id)
    always = self.__dict__.setdefault(_ALWAYS_CALL, {})
    always[hook_id] = (hook, with_kwargs)
    return _AlwaysCallHandle(self, hook_id, always)


class _AlwaysCallHandle(RemovableHandle):
    """An always_call forward hook's handle: remove() also drops it from the hooks run when forward raises."""

    def __init__(self, module, hook_id, always):
        super().__init__(module, hook_id)
        self._always = always

    def remove(self):
        self._always.pop(self._id, None)
        super().remove()


# ---- global backward hooks (torch.nn.modules.module.register_module_full_backward_(pre_)hook) ----------------

def register_module_full_backward_pre_hook(hook):
    """torch's global full backward pre-hook: hook(module, grad_output) before every module's full backward hooks
    on this rank thread; a non-None result replaces grad_output."""
    return _GlobalHookHandle(_hooks("bw_pre"), hook)


def register_module_full_backward_hook(hook):
    """torch's global full backward hook: hook(module, grad_input, grad_output) for every module called while it
    is registered, before the module's own backward hooks; a non-None result replaces grad_input."""
    return _GlobalHookHandle(_hooks("bw"), hook)


def register_module_backward_hook(hook):
    """torch's deprecated global (non-full) backward hook, run here as a full backward hook: the same for a module
    whose forward is one op, the documented meaning of grad_input (torch's non-full hook sees the last op's
    inputs instead)."""
    return _GlobalHookHandle(_hooks("bw"), hook)


_PROXIED = "_tessel_global_backward_proxies"


def _ensure_global_backward_proxies(mod):
    """Called by a module call while global backward hooks are registered: the module gets (once) a full backward
    pre-hook and hook, ahead of its own, that run the global hooks registered at backward time."""
    d = _dict(mod) if _has_dict(mod) else None
    if d is None or d.get(_PROXIED):
        return
    d[_PROXIED] = True

    def pre(m, grad_output):
        for hook in list(_hooks("bw_pre").values()):
            result = hook(m, grad_output)
            if result is not None:
                grad_output = result
        return grad_output

    def post(m, grad_input, grad_output):
        replaced = None
        for hook in list(_hooks("bw").values()):
            result = hook(m, grad_input if replaced is None else replaced, grad_output)
            if result is not None:
                replaced = result
        return replaced
    _full_backward_pre_hook_method(mod, pre, prepend=True)  # (not listed in its hook dicts)
    _full_backward_hook_method(mod, post, prepend=True)


# ---- module._forward_hooks / _forward_pre_hooks / _backward_hooks / _backward_pre_hooks ------------------------

_LISTS = "_tessel_hook_dicts"


class _HookDict(collections.abc.MutableMapping):
    """torch's per-module hook dicts (hook id -> hook, in run order), over the hooks registered from Python:
    len / iteration / values() read them, `del d[id]` and clear() remove them (fully_shard's and tensor parallel's
    own hooks are not listed, so clear() leaves them)."""

    def __init__(self, module, kind):
        self._module, self._kind = module, kind

    def _hooks(self):
        return _dict(self._module).get(_LISTS, {}).get(self._kind, {}) if _has_dict(self._module) else {}

    def __getitem__(self, hook_id):
        return self._hooks()[hook_id]

    def __iter__(self):
        return iter(list(self._hooks()))

    def __len__(self):
        return len(self._hooks())

    def __delitem__(self, hook_id):
        self._hooks()[hook_id]  # noqa: B018 - torch's KeyError for an id it does not hold
        _forget_listed(self._module, hook_id)
        self._module._remove_hook(hook_id)

    def __setitem__(self, hook_id, hook):
        raise NotImplementedError("tessel: add module hooks with register_%s_hook, not by writing %s"
                                  % (self._kind.strip("_").replace("_hooks", ""), self._kind))

    def __repr__(self):
        return "OrderedDict(%r)" % list(self._hooks().items())


def _forget_listed(module, hook_id):
    """Drops a removed hook's entries from the module's dict: its hook list and its registration record."""
    if module is not None and _has_dict(module):
        for hooks in _dict(module).get(_LISTS, {}).values():
            hooks.pop(hook_id, None)
        _dict(module).get(_REGS, {}).pop(hook_id, None)


class _ListedHandle(RemovableHandle):
    def remove(self):
        _forget_listed(self._module, self._id)
        super().remove()


_REGS = "_tessel_hook_regs"  # hook id -> (kind, register, args, kwargs): how copy_listed_hooks registers it again


def _listed(kind, register):
    """register_*_hook recording (id -> hook) in the module's dict for `kind` (prepend: first)."""
    def method(self, hook, *args, **kwargs):
        handle = register(self, hook, *args, **kwargs)
        if _has_dict(self):
            hooks = self.__dict__.setdefault(_LISTS, {}).setdefault(kind, {})
            hooks[handle._id] = hook
            self.__dict__.setdefault(_REGS, {})[handle._id] = (kind, register, args, kwargs)
            if kwargs.get("prepend") or (args and args[0] is True):
                for other in [k for k in hooks if k != handle._id]:
                    hooks[other] = hooks.pop(other)
        handle.__class__ = type("_Listed" + type(handle).__name__, (type(handle), _ListedHandle), {}) \
            if type(handle) is not RemovableHandle else _ListedHandle
        return handle
    method.__doc__, method.__name__ = register.__doc__, getattr(register, "__name__", "register_hook")
    return method


def copy_listed_hooks(src, dst):
    """Registers src's listed hooks (those registered from Python) on its copy dst, in src's run order: torch's
    deepcopy copies the hook dicts (sharing the hooks). fully_shard's and tensor parallel's own hooks are not
    listed and stay with the original (a tensor-parallel copy's inputs are not redistributed by its plan)."""
    if not _has_dict(src):
        return
    regs = _dict(src).get(_REGS, {})
    for hooks in _dict(src).get(_LISTS, {}).values():
        for hook_id, hook in hooks.items():
            if hook_id not in regs:
                continue
            kind, register, args, kwargs = regs[hook_id]
            if args and isinstance(args[0], bool):  # a positional prepend: the listed order is replayed instead
                args = args[1:]
            _listed(kind, register)(dst, hook, *args, **{k: v for k, v in kwargs.items() if k != "prepend"})


class _HookFlags(collections.abc.Mapping):
    """torch's _forward_hooks_with_kwargs / _forward_hooks_always_called / _forward_pre_hooks_with_kwargs: hook
    id -> True for the listed hooks of `kind` registered with that keyword set."""

    def __init__(self, module, kind, flag):
        self._module, self._kind, self._flag = module, kind, flag

    def _ids(self):
        regs = _dict(self._module).get(_REGS, {}) if _has_dict(self._module) else {}
        return [hook_id for hook_id, (kind, _, _, kwargs) in regs.items()
                if kind == self._kind and kwargs.get(self._flag)]

    def __getitem__(self, hook_id):
        if hook_id not in self._ids():
            raise KeyError(hook_id)
        return True

    def __iter__(self):
        return iter(self._ids())

    def __len__(self):
        return len(self._ids())

    def __repr__(self):
        return "OrderedDict(%r)" % [(hook_id, True) for hook_id in self._ids()]


def install_hook_dicts(cls):
    for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
        setattr(cls, kind, property(lambda self, kind=kind: _HookDict(self, kind)))
    for name, kind, flag in (("_forward_hooks_with_kwargs", "_forward_hooks", "with_kwargs"),
                             ("_forward_hooks_always_called", "_forward_hooks", "always_call"),
                             ("_forward_pre_hooks_with_kwargs", "_forward_pre_hooks", "with_kwargs")):
        setattr(cls, name, property(lambda self, kind=kind, flag=flag: _HookFlags(self, kind, flag)))
    # torch's deprecated non-full module backward hook, run as a full one (as register_module_backward_hook)
    cls.register_backward_hook = _listed("_backward_hooks", _full_backward_hook_method)
