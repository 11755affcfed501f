"""tessel.utils.checkpoint: torch.utils.checkpoint's activation checkpointing on tessel's autograd
(core/autograd/checkpoint.h): the function's intermediate tensors are dropped after the forward and
recomputed, once, when the backward first needs them.

``checkpoint(fn, *args, **kwargs)`` keeps only fn's tensor inputs (full checkpointing); with
``context_fn=partial(create_selective_checkpoint_contexts, ["linear", "scaled_dot_product_attention"])``
the outputs of the named ops are kept too and only the rest is recomputed (selective checkpointing; the
list holds tessel op names, or a policy ``fn(ctx, op_name)`` returns a CheckpointPolicy / bool).
preserve_rng_state=True (the default) replays the thread's default generator, so dropout draws the same
mask in the recompute. use_reentrant=True runs the same non-reentrant implementation (the gradients are
equal; torch recommends use_reentrant=False).

    h = checkpoint(block, h, use_reentrant=False)
"""
import enum

from .. import _C
from .._tensor import Tensor


class CheckpointPolicy(enum.Enum):
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3


class SelectiveCheckpointContext:
    """What a selective policy function receives first (torch's ctx)."""

    def __init__(self, *, is_recompute):
        self.is_recompute = is_recompute


class _SelectiveContexts(tuple):
    """create_selective_checkpoint_contexts' result: torch returns two context managers; checkpoint()
    reads the policy off this pair."""

    policy = None

    def __new__(cls, policy):
        self = super().__new__(cls, (_NullContext(), _NullContext()))
        self.policy = policy
        return self


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """A list of op names (tessel's: "linear", "matmul", "scaled_dot_product_attention", ...) whose outputs
    are saved, or a policy fn(ctx, op_name) returning a CheckpointPolicy (or a bool: save)."""
    if isinstance(policy_fn_or_list, (list, tuple, set, frozenset)):
        names = [n if isinstance(n, str) else getattr(n, "__name__", None) for n in policy_fn_or_list]
        if not all(isinstance(n, str) for n in names):
            raise TypeError("create_selective_checkpoint_contexts: the list must hold op names (tessel has no "
                            "torch.ops objects), got %r" % (list(policy_fn_or_list),))
        return _SelectiveContexts(sorted(names))
    if not callable(policy_fn_or_list):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    fn = policy_fn_or_list
    ctx = SelectiveCheckpointContext(is_recompute=False)

    def save(op_name):
        decision = fn(ctx, op_name)
        if isinstance(decision, CheckpointPolicy):
            return decision in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
        return bool(decision)
    return _SelectiveContexts(save)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, **kwargs):
    if not _C.is_grad_enabled():  # nothing will be differentiated: run it, as torch does
        return function(*args, **kwargs)
    policy = None
    if context_fn is not None:
        contexts = context_fn()
        if not isinstance(contexts, _SelectiveContexts):
            raise NotImplementedError("checkpoint(context_fn=): only create_selective_checkpoint_contexts' "
                                      "contexts are supported")
        policy = contexts.policy
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

    outs = _C._checkpoint(run, [args[i] for i in slots], policy, bool(preserve_rng_state))
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
