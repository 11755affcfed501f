"""tessel.utils.checkpoint: torch.utils.checkpoint's activation checkpointing on tessel's autograd
(core/autograd/checkpoint.h): the function's intermediate tensors are dropped after the forward and
recomputed, once, when the backward first needs them.

``checkpoint(fn, *args, **kwargs)`` keeps only fn's tensor inputs (full checkpointing); with
``context_fn=partial(create_selective_checkpoint_contexts, ["linear", "scaled_dot_product_attention"])``
the outputs of the named ops are kept too and only the rest is recomputed (selective checkpointing; the
list holds tessel op names, or a policy ``fn(ctx, op_name)`` returns a CheckpointPolicy / bool).
preserve_rng_state=True (the default) replays the thread's default generator, so dropout draws the same
mask in the recompute. use_reentrant=True runs the same non-reentrant implementation (the gradients are
equal; torch recommends use_reentrant=False). The recompute always runs the whole function (early_stop is
accepted; the saved values are the same). An input written in place after the forward (`h +=
checkpoint(f, h)`) and, under a selective policy, a kept output written in place raise at backward as
torch's do (the recompute would read the written values). Not supported: a second derivative through the
recompute (create_graph=True over a checkpointed region raises).

    h = checkpoint(block, h, use_reentrant=False)
    step = checkpoint(use_reentrant=False)(block)   # torch 2.15's decorator form
"""
import contextlib
import enum

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


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """torch's switch for stopping the recompute once the needed tensors exist; tessel's recompute runs the
    whole function either way (same saved values), so this only scopes the flag."""
    yield


class SelectiveCheckpointContext:
    """What a selective policy function receives first (torch's ctx)."""

    def __init__(self, *, is_recompute):
        self.is_recompute = is_recompute


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


def _op_names(entry):
    """The tessel op names a save-list entry stands for: a name, or a torch.ops.aten handle (tessel.ops)."""
    if isinstance(entry, str):
        return [entry]
    ops = getattr(entry, "tessel_ops", None)
    if ops is not None:
        return list(ops)
    name = getattr(entry, "__name__", None)
    if not isinstance(name, str):
        raise TypeError("create_selective_checkpoint_contexts: the list must hold op names or torch.ops.aten "
                        "handles, got %r" % (entry,))
    return [name]


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """A list of ops whose outputs are saved: tessel's names ("linear", "matmul", "scaled_dot_product_attention",
    ...) or torch's handles (torch.ops.aten.mm.default, ...: tessel.ops); or a policy fn(ctx, func) returning a
    CheckpointPolicy (or a bool: save), where func is the torch.ops.aten handle of the op (aten.mm.default for
    linear / matmul; tessel.ops.aten_for) and ctx.is_recompute tells the forward from the recompute, as torch's."""
    from .. import ops
    if isinstance(policy_fn_or_list, (list, tuple, set, frozenset)):
        names = sorted({n for entry in policy_fn_or_list for n in _op_names(entry)})
        return _SelectiveContexts(names, allow_cache_entry_mutation)
    if not callable(policy_fn_or_list):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    fn = policy_fn_or_list
    ctx = SelectiveCheckpointContext(is_recompute=False)

    def save(op_name):
        ctx.is_recompute = _C._in_checkpoint_recompute()
        decision = fn(ctx, ops.aten_for(op_name))
        if isinstance(decision, CheckpointPolicy):
            return decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE,
                                CheckpointPolicy.MUST_CPU_OFFLOAD, CheckpointPolicy.PREFER_CPU_OFFLOAD)
        return bool(decision)
    return _SelectiveContexts(save, allow_cache_entry_mutation)


def checkpoint(function=None, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, early_stop=True, respect_saved_tensors_hooks=None, **kwargs):
    if function is None:  # torch 2.15's decorator form: checkpoint(use_reentrant=False)(fn)
        options = dict(use_reentrant=use_reentrant, context_fn=context_fn, determinism_check=determinism_check,
                       debug=debug, preserve_rng_state=preserve_rng_state, early_stop=early_stop)

        def decorate(fn):
            def wrapped(*a, **kw):
                return checkpoint(fn, *a, **options, **kw)
            return wrapped
        return decorate
    if not _C.is_grad_enabled():  # nothing will be differentiated: run it, as torch does
        return function(*args, **kwargs)
    policy, allow_mutation = None, False
    if context_fn is noop_context_fn:
        context_fn = None
    if context_fn is not None:
        contexts = context_fn()
        if not isinstance(contexts, _SelectiveContexts):
            raise NotImplementedError("checkpoint(context_fn=): only create_selective_checkpoint_contexts' "
                                      "contexts are supported")
        policy, allow_mutation = contexts.policy, contexts.allow_cache_entry_mutation
    slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    shape = []  # the first run's output structure (its non-tensor parts are kept as they were)

    def run(tensors):
        full = list(args)
        for i, t in zip(slots, tensors):
            full[i] = t
        out = function(*full, **kwargs)
        from ..nn.modules import _flatten_output
        flat = []
        rebuild = _flatten_output(out, flat)
        if not shape:
            shape.append(rebuild)
        return flat

    outs = _C._checkpoint(run, [args[i] for i in slots], policy, bool(preserve_rng_state), allow_mutation)
    return shape[0](outs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs functions (an nn.Sequential or a list of modules) in `segments` chunks, each but the last under
    checkpoint (torch's rule); each function takes and returns one tensor."""
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
