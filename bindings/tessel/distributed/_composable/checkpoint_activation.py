"""tessel.distributed._composable.checkpoint: torch's composable activation checkpointing, ``checkpoint(module)``.

The module stays where it is, with its names and state-dict keys (no wrapper module, unlike checkpoint_wrapper);
each later call of its forward runs under tessel.utils.checkpoint (non-reentrant): the forward's intermediate
tensors are dropped and recomputed in the backward. Options as torch's: preserve_rng_state, context_fn (selective
checkpointing), determinism_check, debug, early_stop; use_reentrant=True raises NotImplementedError and other
keywords ValueError, as torch's. A module defined in Python gets a subclass of the same name whose forward does
this (``checkpoint.state(module).enable_hook = False`` turns it off again); a C++ layer (nn.Linear, ...) is
checkpointed by the C++ wrapper (core/nn/checkpoint_wrapper.h), which takes preserve_rng_state only.

    checkpoint(model.layers[0])                 # torch.distributed._composable.checkpoint
    model(x).sum().backward()                   # layers[0]'s activations recomputed here
"""
import functools

from ...utils.checkpoint import checkpoint as _checkpoint
from .contract import _State, contract


class _CheckpointState(_State):
    enable_hook = False
    options = None


_classes = {}


def _checkpointed_class(cls):
    """cls with a forward that runs cls's own under the module's checkpoint options (one subclass per class)."""
    sub = _classes.get(cls)
    if sub is None:
        original = cls.forward

        @functools.wraps(original)
        def forward(self, *args, **kwargs):
            state = checkpoint.state(self)
            if state is None or not state.enable_hook:
                return original(self, *args, **kwargs)
            options = {k: v for k, v in state.options.items() if k != "context_fn" or v is not None}
            return _checkpoint(functools.partial(original, self), *args, use_reentrant=False, **options, **kwargs)
        sub = _classes[cls] = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                                          "__qualname__": cls.__qualname__})
    return sub


@contract(_CheckpointState)
def checkpoint(module, **kwargs):
    if kwargs.pop("use_reentrant", False):
        raise NotImplementedError("use_reentrant=True is not supported in composable checkpoint. Please use "
                                  "torch.utils.checkpoint.checkpoint instead.")
    options = dict(preserve_rng_state=kwargs.pop("preserve_rng_state", True), context_fn=kwargs.pop("context_fn", None),
                   determinism_check=kwargs.pop("determinism_check", "default"), debug=kwargs.pop("debug", False),
                   early_stop=kwargs.pop("early_stop", True))
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    state = checkpoint.state(module)
    state.options, state.enable_hook = options, True
    if getattr(module, "_has_python_forward", False):
        module.__class__ = _checkpointed_class(type(module))
        return module
    from ... import _C
    if options["context_fn"] is not None:
        raise NotImplementedError("checkpoint(%s, context_fn=...): a C++ layer is checkpointed whole; call it from "
                                  "a Python module to checkpoint it selectively" % type(module).__name__)
    if not _C._is_checkpoint_wrapped(module):
        _C._checkpoint_layer(module, bool(options["preserve_rng_state"]))
    return module
