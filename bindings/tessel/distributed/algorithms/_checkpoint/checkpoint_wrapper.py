"""torch.distributed.algorithms._checkpoint.checkpoint_wrapper: a module whose forward runs under
tessel.utils.checkpoint (torchtitan's and torch's way to checkpoint transformer blocks).

torch returns a CheckpointWrapper module around the original and strips its `_checkpoint_wrapped_module.`
prefix from state-dict keys; tessel changes the module's class instead (as fully_shard does), so the very
module comes back with the same parameter names and state-dict keys, its forward checkpointed (so
named_parameters has no `_checkpoint_wrapped_module.` segment either). A C++ layer (nn.Linear, ...) keeps its class
and is checkpointed by the C++ wrapper (core/nn/checkpoint_wrapper.h). Compose in torchtitan's order:
checkpoint_wrapper (or apply_activation_checkpointing), then fully_shard.

    model.layers[i] = checkpoint_wrapper(model.layers[i], preserve_rng_state=False)
"""
import enum
import functools

from ....utils.checkpoint import checkpoint as _checkpoint


class CheckpointImpl(enum.Enum):
    REENTRANT = enum.auto()
    NO_REENTRANT = enum.auto()


class CheckpointWrapper:
    """Mixed into a wrapped module's class: isinstance(m, CheckpointWrapper) holds, as for torch's wrapper."""

    @property
    def _checkpoint_wrapped_module(self):
        return self


_classes = {}


def _wrap_layer(module, checkpoint_fn, kwargs):
    """A C++ layer (nn.Linear, ...): its class cannot change, so the C++ wrapper checkpoints each call
    (core/nn/checkpoint_wrapper.h); isinstance(layer, CheckpointWrapper) stays False."""
    from .... import _C
    if _C._is_checkpoint_wrapped(module):
        return module
    if checkpoint_fn is not None and checkpoint_fn is not _checkpoint:
        raise NotImplementedError("checkpoint_wrapper(%s, checkpoint_fn=...): a C++ layer runs tessel's checkpoint; "
                                  "wrap a Python module that calls it to use your own function"
                                  % type(module).__name__)
    unknown = sorted(set(kwargs) - {"preserve_rng_state", "use_reentrant", "determinism_check", "debug"})
    if unknown:
        raise NotImplementedError("checkpoint_wrapper(%s): %s not supported on a C++ layer (wrap a Python module "
                                  "that calls it)" % (type(module).__name__, ", ".join(unknown)))
    _C._checkpoint_layer(module, bool(kwargs.get("preserve_rng_state", True)))
    return module


def checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT, checkpoint_fn=None,
                       **checkpoint_fn_kwargs):
    cls = type(module)
    if not getattr(module, "_has_python_forward", False):
        return _wrap_layer(module, checkpoint_fn, checkpoint_fn_kwargs)
    if isinstance(module, CheckpointWrapper):
        return module
    fn = checkpoint_fn or _checkpoint
    key = (cls, fn, tuple(sorted(checkpoint_fn_kwargs.items(), key=lambda kv: kv[0])))
    wrapped = _classes.get(key)
    if wrapped is None:
        original = cls.forward
        kwargs = dict(checkpoint_fn_kwargs)
        if fn is _checkpoint:
            kwargs.setdefault("use_reentrant", checkpoint_impl == CheckpointImpl.REENTRANT)

        @functools.wraps(original)
        def forward(self, *args, **kw):
            return fn(functools.partial(original, self), *args, **kwargs, **kw)
        wrapped = type("CheckpointWrapped" + cls.__name__, (CheckpointWrapper, cls),
                       {"forward": forward, "__module__": cls.__module__})
        _classes[key] = wrapped
    module.__class__ = wrapped
    return module


def apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper, check_fn=lambda _: True,
                                   auto_wrap_policy=None):
    """Wraps every submodule for which check_fn holds (in place; the module objects stay in the tree)."""
    if auto_wrap_policy is not None:
        raise NotImplementedError("apply_activation_checkpointing(auto_wrap_policy=): pass check_fn")
    from .... import _C
    for _, m in list(model.named_modules()):
        if m is not model and check_fn(m) and not isinstance(m, CheckpointWrapper) and \
                not _C._is_checkpoint_wrapped(m):
            checkpoint_wrapper_fn(m)
