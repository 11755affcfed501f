"""tessel.utils.checkpoint: torch.utils.checkpoint's activation checkpointing on tessel's autograd
(core/autograd/checkpoint.h): the function's intermediate tensors are dropped after the forward and
recomputed, once, when the backward first needs them.

``checkpoint(fn, *args, **kwargs)`` keeps only fn's tensor inputs (full checkpointing); with
``context_fn=partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default, ...])`` the outputs of
the listed ops are kept too and only the rest is recomputed (selective checkpointing; the list may also hold
tessel op names such as "linear"), or a policy ``fn(ctx, func, *args)`` returns a CheckpointPolicy / bool for
each op call: asked once, in the forward, with the op's tensor arguments and ctx.op_output (its output), as
torch 2.15 asks (ctx.is_recompute stays False; the rerun replays the decisions). Any other context_fn gives
two context managers: the forward runs inside the first, each recompute inside the second.
preserve_rng_state=True (the default) replays the thread's default generator, so dropout draws the same
mask in the recompute. use_reentrant is torch's: not passed, it warns and means True; True runs the same
recompute as False, with torch's reentrant rules where they change results (no tensor input that requires
grad: the region's parameters get no gradient, with torch's warning; keyword arguments, context_fn and debug
refused; the recompute reruns the whole function). Non-reentrant, the recompute stops once every saved tensor is
back (early_stop=True, torch's default: the ops and
module hooks after the last saving op run once; False or set_checkpoint_early_stop(False) reruns the whole
function). An input written in place after the forward
(`h += checkpoint(f, h)`) and, under a selective policy, a kept output written in place raise at backward as
torch's do (the recompute would read the written values). Second derivatives (create_graph=True) through a
checkpointed region are exact (core/autograd/checkpoint.cc).

    h = checkpoint(block, h, use_reentrant=False)
    step = checkpoint(use_reentrant=False)(block)   # torch 2.15's decorator form
"""
import contextlib
import enum
import warnings

from .. import _C
from .._tensor import Tensor


class CheckpointPolicy(enum.Enum):
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4  # torch 2.15: saved, offloaded to the host (a CPU tensor already is): saved here
    PREFER_CPU_OFFLOAD = 5


class CheckpointError(RuntimeError):
    """torch's checkpoint error class (tessel's own checks raise RuntimeError subclasses with torch's words)."""


def noop_context_fn():
    """checkpoint's default context_fn: two null contexts."""
    return contextlib.nullcontext(), contextlib.nullcontext()


_checkpoint_early_stop = None


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """torch's: inside, checkpoints made take this early_stop instead of their own argument (the recompute
    stops once every saved tensor is back: the rest of the function, and its modules' hooks, run once)."""
    global _checkpoint_early_stop
    previous, _checkpoint_early_stop = _checkpoint_early_stop, enable
    try:
        yield
    finally:
        _checkpoint_early_stop = previous


class SelectiveCheckpointContext:
    """What a selective policy function receives first (torch's ctx): op_output is the op's output (a tuple
    for several); is_recompute is always False, as in torch 2.15 (the policy is asked in the forward only)."""

    def __init__(self, *, is_recompute, op_output=None):
        self.is_recompute = is_recompute
        self.op_output = op_output


class _SelectiveContexts(tuple):
    """create_selective_checkpoint_contexts' result: torch returns two context managers; checkpoint()
    reads the policy off this pair."""

    policy = None

    allow_cache_entry_mutation = False

    def __new__(cls, policy, allow_cache_entry_mutation=False):
        self = super().__new__(cls, (_NullContext(), _NullContext()))
        self.policy = policy
        self.allow_cache_entry_mutation = bool(allow_cache_entry_mutation)
        return self


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _check_entry(entry):
    """A save-list entry: a tessel op name, or a torch.ops.aten handle (tessel.ops) / other named handle."""
    from .. import ops
    if isinstance(entry, str):
        return entry
    if isinstance(entry, ops._AtenPacket):  # torch's message for an OpOverloadPacket
        raise ValueError("Expected op in `op_list` to be an OpOverload but got: %r of type %s. Please update the "
                         "OpOverloadPacket to a specific OpOverload.For example, if you have `torch.ops.aten.mm`, "
                         "change it to `torch.ops.aten.mm.default`." % (entry, type(entry)))
    if isinstance(entry, ops._AtenOverload):
        return entry
    name = getattr(entry, "__name__", None)
    if not isinstance(name, str):
        raise TypeError("create_selective_checkpoint_contexts: the list must hold op names or torch.ops.aten "
                        "handles, got %r" % (entry,))
    return name  # a collective's handle (torch.ops._c10d_functional.*) or a higher-order op: by name


def _tensor_or_none(t):
    """An op's input as torch passes it: an undefined tensor (a Linear without bias) is None."""
    try:
        t.dim()
    except RuntimeError:
        return None
    return t


def _host(t, view):
    """t's data laid out as torch's decomposition passes it (view of its numpy array: x.reshape(-1, k), w.T), as a
    new tensor: built off the autograd and checkpoint machinery (a tessel op run inside the policy call would be
    recorded as one of the region's ops). A tensor numpy cannot hold (bfloat16, a DTensor) is passed as it is."""
    import numpy as np
    from .. import from_numpy
    try:
        return from_numpy(np.ascontiguousarray(view(t.detach().numpy())))
    except Exception:
        return t


def _aten_call(op_name, inputs, outputs):
    """torch's (OpOverload, args) for a call of tessel's op op_name: a linear is aten.addmm(bias, x2d, w.t()) or
    aten.mm(x2d, w.t()), a matmul aten.mm / bmm / mv / dot, softmax aten._softmax, layer_norm aten.native_layer_norm
    (x, normalized_shape, weight, bias), a full amax (t.max()) aten.max, mul / add (tensor or scalar)
    aten.mul.Tensor / add.Tensor, a 2-D transpose aten.t; other ops aten.<name>.default with their tensor inputs
    (tessel's ops hand over no non-tensor arguments: softmax's dim, a scalar operand, eps, ... are not in args)."""
    from .. import ops
    aten = ops.aten
    args = tuple(_tensor_or_none(t) for t in inputs)
    if op_name == "linear" and len(args) >= 2 and args[0] is not None:
        x, w = args[0], args[1]
        x2 = x if x.dim() == 2 else _host(x, lambda a: a.reshape(-1, a.shape[-1]))
        bias = args[2] if len(args) > 2 else None
        if bias is not None:
            return aten.addmm.default, (bias, x2, _host(w, lambda a: a.T))
        return aten.mm.default, (x2, _host(w, lambda a: a.T))
    if op_name == "matmul" and len(args) == 2 and None not in args:
        a, b = args
        if a.dim() == 1 and b.dim() == 1:
            return aten.dot.default, args
        if a.dim() == 2 and b.dim() == 1:
            return aten.mv.default, args
        if b.dim() == 2 and a.dim() >= 2:
            return aten.mm.default, (a if a.dim() == 2 else _host(a, lambda n: n.reshape(-1, n.shape[-1])), b)
        if a.dim() >= 3 and b.dim() >= 3 and a.shape[:-2] == b.shape[:-2]:
            if a.dim() == 3:
                return aten.bmm.default, args
            return aten.bmm.default, tuple(_host(t, lambda n: n.reshape(-1, *n.shape[-2:])) for t in args)
        return aten.matmul.default, args
    out = outputs[0] if outputs else None
    if op_name == "softmax":
        return aten._softmax.default, args
    if op_name == "layer_norm" and len(args) == 3:
        x, w, b = args
        normalized = list(w.shape) if w is not None else list(x.shape[-1:])
        return aten.native_layer_norm.default, (x, normalized, w, b)
    if op_name == "amax" and out is not None and out.dim() == 0 and args[0].dim() > 0:
        return aten.max.default, args
    if op_name in ("mul", "mul_scalar"):
        return aten.mul.Tensor, args
    if op_name in ("add", "add_scalar"):
        return aten.add.Tensor, args
    if op_name == "transpose" and args and args[0] is not None:
        return (aten.t.default if args[0].dim() == 2 else aten.transpose.int), args
    return ops.aten_for(op_name), args


def _saves(decision):
    if isinstance(decision, CheckpointPolicy):
        return decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE,
                            CheckpointPolicy.MUST_CPU_OFFLOAD, CheckpointPolicy.PREFER_CPU_OFFLOAD)
    return bool(decision)


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """A list of ops whose outputs are saved: tessel's names ("linear", "matmul", "scaled_dot_product_attention",
    ...) or torch's handles (torch.ops.aten.mm.default, ...: tessel.ops, matched as torch names the call:
    _aten_call); or a policy fn(ctx, func, *args) returning a CheckpointPolicy (or a bool: save), where func is
    the torch.ops.aten handle of the op (aten.mm.default for an unbiased linear, aten.addmm.default for a biased
    one, ...), args torch's tensor arguments (an undefined tensor None) and ctx.op_output its output; asked once
    per op call, in the forward (torch 2.15's rule)."""
    if isinstance(policy_fn_or_list, (list, tuple, set, frozenset)):
        entries = [_check_entry(e) for e in policy_fn_or_list]
        names = sorted({e for e in entries if isinstance(e, str)})
        handles = {e for e in entries if not isinstance(e, str)}
        if not handles:
            return _SelectiveContexts(names, allow_cache_entry_mutation)

        def listed(op_name, inputs, outputs):
            return op_name in names or _aten_call(op_name, inputs, outputs)[0] in handles
        return _SelectiveContexts(listed, allow_cache_entry_mutation)
    if not callable(policy_fn_or_list):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    fn = policy_fn_or_list

    def save(op_name, inputs, outputs):
        out = None if outputs is None else (outputs[0] if len(outputs) == 1 else tuple(outputs))
        func, args = _aten_call(op_name, inputs, outputs)
        return _saves(fn(SelectiveCheckpointContext(is_recompute=False, op_output=out), func, *args))
    return _SelectiveContexts(save, allow_cache_entry_mutation)


_REENTRANT_DEFAULT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. In a future release, calling "
    "checkpoint without use_reentrant will raise an exception. use_reentrant=False is recommended, but if you need "
    "to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs for more details on "
    "the differences between the two variants.")


_SEQUENTIAL_REENTRANT_DEFAULT_WARNING = (
    "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed explicitly. In a "
    "future release, we will raise an exception if use_reentrant is not passed. use_reentrant=False is recommended, "
    "but if you need to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs for "
    "more details on the differences between the two variants.")


def _reentrant(use_reentrant, stacklevel, message=_REENTRANT_DEFAULT_WARNING):
    """torch's default: not passed, it warns and is True."""
    if use_reentrant is None:
        warnings.warn(message, stacklevel=stacklevel + 1)
        return True
    return bool(use_reentrant)


def checkpoint(function=None, *args, use_reentrant=None, context_fn=noop_context_fn, determinism_check="default",
               debug=False, preserve_rng_state=True, early_stop=True, respect_saved_tensors_hooks=None, **kwargs):
    if function is None and not args:  # torch 2.15's decorator form: checkpoint(use_reentrant=False)(fn)
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        options = dict(use_reentrant=use_reentrant, context_fn=context_fn, determinism_check=determinism_check,
                       debug=debug, preserve_rng_state=preserve_rng_state, early_stop=early_stop)

        def decorate(fn):
            def wrapped(*a, **kw):
                return checkpoint(fn, *a, **options, **kw)
            return wrapped
        return decorate
    reentrant = _reentrant(use_reentrant, 2)
    if reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if context_fn is not noop_context_fn or debug is not False or respect_saved_tensors_hooks is not None:
            raise ValueError("Passing `context_fn`, `debug`, or `respect_saved_tensors_hooks` is only supported "
                             "when use_reentrant=False.")
    elif determinism_check not in ("default", "none"):
        raise ValueError("determinism_check should be one of ['default', 'none'], but got %s" % determinism_check)
    if not _C.is_grad_enabled():  # nothing will be differentiated: run it, as torch does
        return function(*args, **kwargs)
    if reentrant and not any(a.requires_grad for a in args if isinstance(a, Tensor)):
        # torch's reentrant checkpoint tracks only its tensor inputs: none requires grad, so the region's
        # outputs do not either and its parameters get no gradient (torch's warning says so)
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        with _C._GradMode(False):
            return function(*args)
    policy, allow_mutation = None, False
    forward_ctx = recompute_ctx = None
    if context_fn is not noop_context_fn:
        contexts = context_fn()  # context_fn=None: torch's TypeError ('NoneType' object is not callable)
        if isinstance(contexts, _SelectiveContexts):
            policy, allow_mutation = contexts.policy, contexts.allow_cache_entry_mutation
        else:  # torch's: the forward inside the first context, each recompute inside the second
            forward_ctx, recompute_ctx = contexts
    slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    shape = []  # the first run's output structure (its non-tensor parts are kept as they were)

    def run(tensors):
        full = list(args)
        for i, t in zip(slots, tensors):
            full[i] = t
        with (recompute_ctx if shape and recompute_ctx is not None else
              forward_ctx if forward_ctx is not None else contextlib.nullcontext()):
            out = function(*full, **kwargs)
        from ..nn.modules import _flatten_output
        flat = []
        rebuild = _flatten_output(out, flat)
        if not shape:
            shape.append(rebuild)
        return flat

    # torch's reentrant checkpoint reruns the whole function (early stopping is the non-reentrant one's)
    stop = not reentrant and (early_stop if _checkpoint_early_stop is None else _checkpoint_early_stop)
    outs = _C._checkpoint(run, [args[i] for i in slots], policy, bool(preserve_rng_state), allow_mutation,
                          bool(stop), not reentrant and determinism_check != "none")
    return shape[0](outs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs functions (an nn.Sequential or a list of modules) in `segments` chunks, each but the last under
    checkpoint (torch's rule); each function takes and returns one tensor."""
    use_reentrant = _reentrant(use_reentrant, 2, _SEQUENTIAL_REENTRANT_DEFAULT_WARNING)
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    kwargs = {"preserve_rng_state": preserve}
    fns = list(functions.children()) if hasattr(functions, "children") and not isinstance(functions, list) \
        else list(functions)
    size = len(fns) // segments

    def run_range(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = fns[j](x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run_range(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run_range(end + 1, len(fns) - 1)(input)


# ---- the rest of torch.utils.checkpoint's names ---------------------------------------------------------------

_checkpoint_debug_enabled = None


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """torch's override of checkpoint's `debug` flag within the context (None defers to the call's); tessel's
    checkpoint prints no debug trace, so only the flag is scoped."""
    global _checkpoint_debug_enabled
    previous, _checkpoint_debug_enabled = _checkpoint_debug_enabled, enabled
    try:
        yield
    finally:
        _checkpoint_debug_enabled = previous


def detach_variable(inputs):
    """torch's: a tuple of the inputs with each tensor detached, keeping its requires_grad."""
    if not isinstance(inputs, tuple):
        raise RuntimeError("Only tuple of tensors is supported. Got Unsupported input type: %s"
                           % type(inputs).__name__)
    out = []
    for x in inputs:
        if isinstance(x, Tensor):
            d = x.detach()
            d.requires_grad_(x.requires_grad)
            x = d
        out.append(x)
    return tuple(out)


def check_backward_validity(inputs):
    """torch's: warns when no tensor input requires grad (a reentrant checkpoint would give no gradients)."""
    if not any(x.requires_grad for x in inputs if isinstance(x, Tensor)):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)


class DefaultDeviceType:
    """torch's default device type for the RNG states a checkpoint saves ('cuda' unless set)."""
    _default_device_type = None

    @staticmethod
    def set_device_type(device="cuda"):
        DefaultDeviceType._default_device_type = device

    @staticmethod
    def get_device_type():
        return DefaultDeviceType._default_device_type or "cuda"


def get_device_states(*args):
    """torch's (device ids, RNG states) of the accelerator tensors among args: none on tessel's CPU face."""
    return [], []


def set_device_states(devices, states, *, device_type=None):
    """torch's: sets accelerator RNG states; tessel's Python face has none to set."""
    if list(devices):
        raise RuntimeError("set_device_states: tessel's Python face computes on the CPU; no device RNG state")


class CheckpointFunction:
    """torch's reentrant checkpoint Function, for code that calls it directly:
    ``CheckpointFunction.apply(run_function, preserve_rng_state, *args)``."""

    @staticmethod
    def apply(run_function, preserve_rng_state, *args):
        return checkpoint(run_function, *args, use_reentrant=True, preserve_rng_state=preserve_rng_state)


def _ignored_ops():
    from .. import ops
    return {ops.aten.detach.default}


SAC_IGNORED_OPS = _ignored_ops()  # torch's ops a selective policy never sees (tessel's detach is not an op)


class GraphExecGroup:
    """torch 2.15's group of backward calls that share one recompute per checkpointed region. tessel recomputes a
    region once per backward that reaches it (the values are the same); the group only checks nesting."""
    _active = None

    def __enter__(self):
        if GraphExecGroup._active is not None:
            raise RuntimeError("GraphExecGroup contexts cannot be nested. Already inside group %r"
                               % GraphExecGroup._active)
        GraphExecGroup._active = self
        return self

    def __exit__(self, *exc):
        GraphExecGroup._active = None


__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "CheckpointFunction", "check_backward_validity",
           "detach_variable", "get_device_states", "set_device_states", "noop_context_fn", "set_checkpoint_early_stop",
           "DefaultDeviceType", "set_checkpoint_debug_enabled", "CheckpointPolicy", "SelectiveCheckpointContext",
           "create_selective_checkpoint_contexts", "SAC_IGNORED_OPS", "GraphExecGroup"]
