"""tessel.distributed.fsdp.wrap: FSDP1's auto-wrap policies (torch.distributed.fsdp.wrap's names).

A policy decides which submodules become FullyShardedDataParallel units of their own. A callable policy is
called as policy(module=m, recurse=r, nonwrapped_numel=n): with recurse=True, whether to look inside m; with
recurse=False, whether to wrap m, whose parameters not yet in a wrapped descendant number n. Wrapping walks
the tree depth first and wraps bottom-up (each child before its parent; the root is wrapped by the
FullyShardedDataParallel call itself), as torch's _recursive_wrap.

    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FullyShardedDataParallel(model, auto_wrap_policy=policy)      # or ModuleWrapPolicy({Block})
"""
import contextlib
import threading

from ... import nn


def always_wrap_policy(*args, **kwargs):
    return True


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wraps a module once the parameters not yet wrapped below it number at least min_num_params; does not
    look inside force_leaf_modules (default: MultiheadAttention) nor wrap exclude_wrap_modules (default:
    ModuleList, ModuleDict)."""
    leaves = size_based_auto_wrap_policy.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules
    excluded = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None \
        else exclude_wrap_modules
    is_large = nonwrapped_numel >= min_num_params
    if recurse:
        return is_large and not isinstance(module, tuple(leaves))
    return is_large and not isinstance(module, tuple(excluded))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention} if hasattr(nn, "MultiheadAttention") \
    else set()


class ModuleWrapPolicy:
    """Wraps every submodule that is an instance of one of module_classes."""

    def __init__(self, module_classes):
        self._module_classes = tuple(set(module_classes))

    def __call__(self, module, recurse, *args, **kwargs):
        return True if recurse else isinstance(module, self._module_classes)

    def __repr__(self):
        return "ModuleWrapPolicy(%s)" % sorted(c.__name__ for c in self._module_classes)


class CustomPolicy:
    """lambda_fn(module) returns False (no unit), True (a unit with the root's arguments) or a dict of
    FullyShardedDataParallel keyword arguments that override the root's for that unit."""

    def __init__(self, lambda_fn):
        self._lambda_fn = lambda_fn

    def __call__(self, module, recurse, *args, **kwargs):
        return True if recurse else self._lambda_fn(module)


def _numel(module, ignored_params):
    return sum(p.numel() for p in module.parameters() if hash(p) not in ignored_params)


def _recursive_wrap(module, policy, wrap_fn, ignored_modules, ignored_params, only_wrap_children=False):
    """(module or its wrapper, the number of parameters wrapped at or below it): torch's _recursive_wrap.
    wrap_fn(module, overrides) wraps one module (overrides: a CustomPolicy's dict, else {})."""
    nonwrapped = _numel(module, ignored_params)
    if not policy(module=module, recurse=True, nonwrapped_numel=nonwrapped):
        return module, 0
    wrapped_numel = 0
    for name, child in list(module.named_children()):
        if any(child is m for m in ignored_modules):
            continue
        new_child, n = _recursive_wrap(child, policy, wrap_fn, ignored_modules, ignored_params)
        if new_child is not child:
            setattr(module, name, new_child)
        wrapped_numel += n
    decision = False if only_wrap_children else policy(module=module, recurse=False,
                                                       nonwrapped_numel=nonwrapped - wrapped_numel)
    if decision is False or decision is None:
        return module, wrapped_numel
    return wrap_fn(module, decision if isinstance(decision, dict) else {}), nonwrapped


_wrap_context = threading.local()


@contextlib.contextmanager
def enable_wrap(*, wrapper_cls, **wrapper_kwargs):
    """Inside, wrap(module) returns wrapper_cls(module, **wrapper_kwargs) (kwargs given to wrap override)."""
    previous = getattr(_wrap_context, "config", None)
    _wrap_context.config = (wrapper_cls, dict(wrapper_kwargs))
    try:
        yield
    finally:
        _wrap_context.config = previous


def wrap(module, **wrap_overrides):
    """module wrapped as the enclosing enable_wrap says; outside enable_wrap, module itself."""
    config = getattr(_wrap_context, "config", None)
    if config is None:
        return module
    cls, kwargs = config
    return cls(module, **dict(kwargs, **wrap_overrides))
