"""tessel.distributed._composable.contract: torch's bookkeeping of the composable distributed APIs.

``@contract(state_cls)`` wraps an API ``fn(module, ...)``: each module it is applied to records the API's name in
its registry (``_get_registry(module)``: an OrderedDict name -> RegistryItem, None before any) and gets one state
object per call (``fn.state(module)``, shared by the modules of one call on a list); applying the same API to a
module twice raises AssertionError, and an API that renamed, added or removed parameters, buffers or submodules
raises RuntimeError, as torch's. fully_shard records itself here too (tessel.distributed.fsdp), so replicate
refuses a fully sharded module as torch's does.

    @contract(MyState)
    def my_api(module): ...; return module
    my_api(model); my_api.state(model)      # MyState
"""
import collections
import functools

from ...nn.modules import _has_dict

STATE_KEY = "__composable_api_state_key"
REGISTRY_KEY = "__composable_api_registry"


class RegistryItem:
    pass


class _State:
    pass


def _modules_of(module):
    """The distinct root modules of a list (torch's _get_root_modules: none that is inside another), or [module]."""
    if not isinstance(module, (list, tuple)):
        return [module]
    mods = list(module)
    inside = {id(sub) for m in mods for sub in m.modules() if sub is not m}
    return [m for m in mods if id(m) not in inside]


def _names(module):
    return (list(dict(module.named_parameters())), list(dict(module.named_buffers())),
            [n for n, _ in module.named_modules()])


def _record(module, key, value, name):
    """Adds `key` -> value to one of the module's composable dicts (created on first use). A module C++ created
    (tessel.nn.GPT's blocks) has no __dict__: fully_shard's own state is in C++ (_get_registry reads it there), and
    @contract refuses such a module before recording anything (_refuse_stateless)."""
    if not _has_dict(module):
        return
    table = module.__dict__.setdefault(REGISTRY_KEY if name else STATE_KEY, collections.OrderedDict())
    if not isinstance(table, dict):
        raise AssertionError("Distributed composable API %s corrupted: %r" % ("registry" if name else "states", table))
    table.setdefault(key, value)


def _register(module, api_name):
    """Records an API applied without @contract (fully_shard) in the module's registry."""
    _record(module, api_name, RegistryItem(), name=True)


def _refuse_stateless(func, modules):
    """An API with Python state cannot be applied to a module C++ created (no __dict__ to hold it): a TypeError
    naming the module, raised before any module of the call is touched."""
    for m in modules:
        if _has_dict(m):
            continue
        managed = " (it is managed by fully_shard)" if "fully_shard" in (_get_registry(m) or {}) else ""
        raise TypeError("%s cannot be applied to %s%s: a module created in C++ carries no Python state; apply it to "
                        "a module defined in Python or to a tessel.nn layer" % (func.__name__, m._type_name, managed))


def contract(state_cls=_State):
    def inner(func):
        @functools.wraps(func)
        def wrapper(module, *args, **kwargs):
            modules = _modules_of(module)
            _refuse_stateless(func, modules)
            state, item = state_cls(), RegistryItem()
            before = []
            for m in modules:
                states = m.__dict__.get(STATE_KEY, {}) if _has_dict(m) else {}
                if func in states or func.__name__ in (_get_registry(m) or {}):
                    raise AssertionError("Each distinct composable distributed API can only be applied to a module "
                                         "once. %s has already been applied to the following module:\n%s"
                                         % (func.__name__, m))
                _record(m, func, state, name=False)
                _record(m, func.__name__, item, name=True)
                before.append(_names(m))
            updated = func(module, *args, **kwargs)
            if updated is None:
                updated = module
            after = [_names(m) for m in _modules_of(updated)]
            if len(after) != len(before):
                raise AssertionError("%s should return the same number of modules as input modules" % func.__name__)
            for old, new in zip(before, after):
                for kind, o, n in zip(("parameters", "buffers", "modules"), old, new):
                    if o != n:
                        raise RuntimeError("Checking %s: Composable distributed API implementations cannot modify "
                                           "FQNs.\nFQNs only in original: %s\nFQNs only in new: %s"
                                           % (kind, set(o) - set(n), set(n) - set(o)))
            return updated

        def get_state(module):
            return module.__dict__.setdefault(STATE_KEY, collections.OrderedDict()).get(func)

        wrapper.state = get_state
        return wrapper
    return inner


def _get_registry(module):
    """The composable APIs applied to module, in order (name -> RegistryItem), or None if none was."""
    if not _has_dict(module):  # a module C++ created: only fully_shard applies to it, and keeps its state in C++
        from ... import _C
        return collections.OrderedDict(fully_shard=RegistryItem()) if _C._fsdp_state(module) is not None else None
    return module.__dict__.get(REGISTRY_KEY)
