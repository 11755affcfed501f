"""torch.optim.Optimizer's hooks: step pre / post hooks (per optimizer and global), state_dict and
load_state_dict pre / post hooks, with torch's signatures and order (global pre hooks first, global post hooks
last; a pre hook may return (new_args, new_kwargs), a state-dict post hook or a load pre hook a new dict).

The first instance of each optimizer class wraps that class's step / state_dict / load_state_dict once (torch's
_patch_step_function); a class whose method is already wrapped (a subclass inheriting it) is left alone, so a hook
runs once per call."""
import collections
import functools
import itertools

from ..utils.hooks import RemovableHandle

_global_pre_hooks = collections.OrderedDict()
_global_post_hooks = collections.OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """hook(optimizer, args, kwargs) -> None or (new_args, new_kwargs), before every optimizer's step."""
    handle = RemovableHandle(_global_pre_hooks)
    _global_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook):
    """hook(optimizer, args, kwargs), after every optimizer's step."""
    handle = RemovableHandle(_global_post_hooks)
    _global_post_hooks[handle.id] = hook
    return handle


_HOOK_DICTS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
               "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
               "_optimizer_load_state_dict_post_hooks")


def init_hook_dicts(opt):
    """torch's Optimizer.__init__ makes the six per-optimizer hook dicts (code that reads them, such as
    torch.compile's or a checkpoint utility's, finds them empty rather than missing)."""
    for name in _HOOK_DICTS:
        opt.__dict__.setdefault(name, collections.OrderedDict())


def _hooks(opt, name):
    d = opt.__dict__.get(name)
    if d is None:
        d = opt.__dict__[name] = collections.OrderedDict()
    return d


def _retag_state(opt):
    """A Python optimizer's state tensors (Rprop, ASGD, Adafactor, LBFGS, a user's subclass) are the memory
    ledger's optimizer state, as the built-in optimizers' (they were counted as 'other')."""
    from .. import _C

    def retag(value):
        if isinstance(value, _C.Tensor):
            _C._retag_memory(value, "optim")
        elif isinstance(value, (list, tuple)):  # LBFGS's direction and history
            for v in value:
                retag(v)
    for entry in opt.state.values():
        for value in (entry.values() if isinstance(entry, dict) else ()):
            retag(value)


def _hooked_step(step):
    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        self = args[0]
        for hook in itertools.chain(_global_pre_hooks.values(), _hooks(self, "_optimizer_step_pre_hooks").values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError("%s must return None or a tuple of (new_args, new_kwargs), but got %s."
                                       % (step, result))
                args, kwargs = result
        out = step(*args, **kwargs)
        if getattr(self, "_python", False):
            _retag_state(self)
        for hook in itertools.chain(_hooks(self, "_optimizer_step_post_hooks").values(), _global_post_hooks.values()):
            hook(self, args, kwargs)
        return out
    wrapper._tessel_hooked = True
    return wrapper


def _hooked_state_dict(state_dict):
    @functools.wraps(state_dict)
    def wrapper(self):
        for hook in _hooks(self, "_optimizer_state_dict_pre_hooks").values():
            hook(self)
        sd = state_dict(self)
        for hook in _hooks(self, "_optimizer_state_dict_post_hooks").values():
            result = hook(self, sd)
            if result is not None:
                sd = result
        return sd
    wrapper._tessel_hooked = True
    return wrapper


def _hooked_load_state_dict(load_state_dict):
    @functools.wraps(load_state_dict)
    def wrapper(self, state_dict):
        for hook in _hooks(self, "_optimizer_load_state_dict_pre_hooks").values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        out = load_state_dict(self, state_dict)
        for hook in _hooks(self, "_optimizer_load_state_dict_post_hooks").values():
            hook(self)
        return out
    wrapper._tessel_hooked = True
    return wrapper


def patch(cls):
    """Wraps cls's step / state_dict / load_state_dict with the hook calls, once."""
    for name, wrap in (("step", _hooked_step), ("state_dict", _hooked_state_dict),
                       ("load_state_dict", _hooked_load_state_dict)):
        fn = getattr(cls, name)
        if not getattr(fn, "_tessel_hooked", False):
            setattr(cls, name, wrap(fn))


def unhooked(opt, name):
    """opt's method `name` without the hook calls (internal reads such as Optimizer.state)."""
    fn = getattr(type(opt), name)
    return functools.partial(getattr(fn, "__wrapped__", fn), opt)


def _register(opt, dict_name, hook, prepend):
    hooks = _hooks(opt, dict_name)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


class HookMethods:
    """Optimizer's register_* methods (mixed into tessel.optim.Optimizer)."""

    def register_step_pre_hook(self, hook):
        return _register(self, "_optimizer_step_pre_hooks", hook, False)

    def register_step_post_hook(self, hook):
        return _register(self, "_optimizer_step_post_hooks", hook, False)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        return _register(self, "_optimizer_state_dict_pre_hooks", hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        return _register(self, "_optimizer_state_dict_post_hooks", hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        return _register(self, "_optimizer_load_state_dict_pre_hooks", hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        return _register(self, "_optimizer_load_state_dict_post_hooks", hook, prepend)
