"""torch.distributed.algorithms._checkpoint.checkpoint_wrapper: a module whose forward runs under
tessel.utils.checkpoint (torchtitan's and torch's way to checkpoint transformer blocks).

torch returns a CheckpointWrapper module around the original and strips its `_checkpoint_wrapped_module.`
prefix from state-dict keys; tessel changes the module's class instead (as fully_shard does), so the very
module comes back with the same parameter names and state-dict keys, its forward checkpointed (so
named_parameters has no `_checkpoint_wrapped_module.` segment either). A C++ layer (nn.Linear, ...) keeps its class
and is checkpointed by the C++ wrapper (core/nn/checkpoint_wrapper.h). Compose in torchtitan's order:
checkpoint_wrapper (or apply_activation_checkpointing), then fully_shard.

    model.layers[i] = checkpoint_wrapper(model.layers[i], preserve_rng_state=False)
    CheckpointWrapper(block)                      # torch's constructor: the same as checkpoint_wrapper(block)
    offload_wrapper(block)                        # saved activations to the host: they are there already

apply_activation_checkpointing takes check_fn or torch's auto_wrap_policy (ModuleWrapPolicy, a callable
policy such as functools.partial(transformer_auto_wrap_policy, ...)); either wraps the children bottom-up, the
model itself never.
"""
import enum
import functools

from ....utils.checkpoint import checkpoint as _checkpoint


class CheckpointImpl(enum.Enum):
    REENTRANT = enum.auto()
    NO_REENTRANT = enum.auto()


class ActivationWrapper:
    """torch's base of CheckpointWrapper and OffloadWrapper, mixed into a wrapped module's class."""

    @property
    def _checkpoint_wrapped_module(self):
        return self

    def __init__(self, *args, **kwargs):
        if args and args[0] is self:  # CheckpointWrapper(mod) / OffloadWrapper(mod) gave back mod itself
            return
        super().__init__(*args, **kwargs)


class CheckpointWrapper(ActivationWrapper):
    """Mixed into a wrapped module's class: isinstance(m, CheckpointWrapper) holds, as for torch's wrapper.
    Called as torch's constructor, CheckpointWrapper(mod, checkpoint_impl, checkpoint_fn, **kwargs) is
    checkpoint_wrapper(mod, ...): the module itself comes back, wrapped."""

    def __new__(cls, *args, **kwargs):
        if cls is CheckpointWrapper:
            return checkpoint_wrapper(*args, **kwargs)
        return super().__new__(cls)


class OffloadWrapper(ActivationWrapper):
    """torch's offload_wrapper class: the forward runs under save_on_cpu(pin_memory=True), which on tessel's CPU
    face keeps the saved tensors where they are. OffloadWrapper(mod) is offload_wrapper(mod)."""

    def __new__(cls, *args, **kwargs):
        if cls is OffloadWrapper:
            return offload_wrapper(*args, **kwargs)
        return super().__new__(cls)


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
    key = (cls, fn, checkpoint_impl, tuple(sorted(checkpoint_fn_kwargs.items(), key=lambda kv: kv[0])))
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


def offload_wrapper(module):
    """torch's: the module's forward saves its activations on the host (save_on_cpu(pin_memory=True)); tessel's
    Python face computes on the host, so they stay where they are. A C++ layer comes back unchanged."""
    if not getattr(module, "_has_python_forward", False) or isinstance(module, ActivationWrapper):
        return module
    cls = type(module)
    wrapped = _classes.get((cls, "offload"))
    if wrapped is None:
        original = cls.forward

        @functools.wraps(original)
        def forward(self, *args, **kw):
            from ....autograd import save_on_cpu
            with save_on_cpu(pin_memory=True):
                return original(self, *args, **kw)
        wrapped = type("OffloadWrapped" + cls.__name__, (OffloadWrapper, cls),
                       {"forward": forward, "__module__": cls.__module__})
        _classes[(cls, "offload")] = wrapped
    module.__class__ = wrapped
    return module


def apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper, check_fn=lambda _: True,
                                   auto_wrap_policy=None):
    """Wraps, bottom-up, every submodule (not the model) that check_fn or torch's auto_wrap_policy selects (in
    place; the module objects stay in the tree)."""
    from .... import _C
    from ...fsdp.wrap import _recursive_wrap, lambda_auto_wrap_policy
    policy = auto_wrap_policy if auto_wrap_policy is not None else \
        functools.partial(lambda_auto_wrap_policy, lambda_fn=check_fn)
    if not callable(policy):
        raise ValueError("Expected %s to be callable or be a pre-defined wrap policy" % (policy,))

    def wrap(m, overrides):
        if isinstance(m, ActivationWrapper) or _C._is_checkpoint_wrapped(m):
            return m
        return checkpoint_wrapper_fn(m)
    _recursive_wrap(model, policy, wrap, set(), set(), only_wrap_children=True)
