"""tessel.distributed.tensor.parallel: torch's tensor-parallel API over tp/ (tp/README.md).

``parallelize_module(module, device_mesh, parallelize_plan)`` with a plan that is one style (for the module
itself) or a dict of FQN patterns (``*``, ``?``, ``[..]`` per dotted atom, e.g. ``"layers.*.attn.w[qk]"``)
to styles, applied in the dict's order. The styles take torch's keyword names and defaults; applying them
is C++ (parameters become DTensors on the tensor-parallel mesh, forward hooks move the activations), so
they act alike on Python-defined modules (``tessel.nn.Module`` subclasses are ``nn::Module``s) and on the
C++ layers. Colwise/Rowwise shard ``nn.Linear`` and ``nn.Embedding``; SequenceParallel acts on
``nn.LayerNorm`` / ``nn.RMSNorm``; PrepareModuleInput/Output act on any module, one layout per *tensor*
positional input (non-tensor arguments bypass module hooks in tessel) or per output.

    tp_mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    parallelize_module(mlp, tp_mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    with loss_parallel():                # logits left Shard(-1) by ColwiseParallel(use_local_output=False)
        loss = F.cross_entropy(logits, targets)
        loss.backward()
"""
import contextlib

from .... import _C
from ...tensor import Replicate, Shard

__all__ = ["parallelize_module", "ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput", "PrepareModuleInputOutput", "loss_parallel"]


class ParallelStyle:
    """Base of the styles; ``_c`` is the C++ value (tp/parallel_style.h) that parallelize_module applies."""

    def __repr__(self):
        return repr(self._c)

    def __eq__(self, other):
        return type(self) is type(other) and self._c == other._c


def _one(layout, name, default):
    if layout is None:
        return default
    if isinstance(layout, (tuple, list)):
        raise ValueError("%s: expects one placement on the 1-D tensor-parallel mesh, got %d (%r)"
                         % (name, len(layout), layout))
    return layout


def _layouts(layouts, name):
    """torch accepts one placement (a one-input module) or a tuple with None for untouched inputs."""
    if layouts is None:
        return []
    return list(layouts) if isinstance(layouts, (tuple, list)) else [layouts]


def _no_kwarg_layouts(style, **kwarg_layouts):
    for name, value in kwarg_layouts.items():
        if value:
            raise NotImplementedError("%s: %s is not supported (tessel's module hooks see positional tensors "
                                      "only; pass the tensor positionally)" % (style, name))


class ColwiseParallel(ParallelStyle):
    """Linear: weight/bias Shard(0); Embedding: weight Shard(1). Input: input_layouts (default Replicate)
    moved to Replicate; output: Shard(-1) moved to output_layouts (default Shard(-1))."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self._c = _C.ColwiseParallel(_one(input_layouts, "ColwiseParallel.input_layouts", Replicate()),
                                     _one(output_layouts, "ColwiseParallel.output_layouts", Shard(-1)),
                                     bool(use_local_output))


class RowwiseParallel(ParallelStyle):
    """Linear: weight Shard(1), bias Replicate, input moved to Shard(-1); Embedding: weight Shard(0).
    Output: Partial(sum) reduced to output_layouts (default Replicate: one all_reduce)."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self._c = _C.RowwiseParallel(_one(input_layouts, "RowwiseParallel.input_layouts", Shard(-1)),
                                     _one(output_layouts, "RowwiseParallel.output_layouts", Replicate()),
                                     bool(use_local_output))


class SequenceParallel(ParallelStyle):
    """LayerNorm / RMSNorm on a sequence-sharded activation: parameters Replicate, no communication."""

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self._c = _C.SequenceParallel(int(sequence_dim), bool(use_local_output))


class PrepareModuleInput(ParallelStyle):
    """Annotates each tensor input with input_layouts and redistributes it to desired_input_layouts."""

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        _no_kwarg_layouts("PrepareModuleInput", input_kwarg_layouts=input_kwarg_layouts,
                          desired_input_kwarg_layouts=desired_input_kwarg_layouts)
        self._c = _C.PrepareModuleInput(_layouts(input_layouts, "input_layouts"),
                                        _layouts(desired_input_layouts, "desired_input_layouts"),
                                        bool(use_local_output))


class PrepareModuleOutput(ParallelStyle):
    """Annotates each output with output_layouts and redistributes it to desired_output_layouts."""

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        self._c = _C.PrepareModuleOutput(_layouts(output_layouts, "output_layouts"),
                                         _layouts(desired_output_layouts, "desired_output_layouts"),
                                         bool(use_local_output))


class PrepareModuleInputOutput(ParallelStyle):
    """PrepareModuleInput and PrepareModuleOutput on one module."""

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_input=False, output_layouts,
                 desired_output_layouts, use_local_output=True):
        _no_kwarg_layouts("PrepareModuleInputOutput", input_kwarg_layouts=input_kwarg_layouts,
                          desired_input_kwarg_layouts=desired_input_kwarg_layouts)
        self._c = _C.PrepareModuleInputOutput(_layouts(input_layouts, "input_layouts"),
                                              _layouts(desired_input_layouts, "desired_input_layouts"),
                                              bool(use_local_input), _layouts(output_layouts, "output_layouts"),
                                              _layouts(desired_output_layouts, "desired_output_layouts"),
                                              bool(use_local_output))


def _style(style, where):
    if not isinstance(style, ParallelStyle):
        raise TypeError("parallelize_module: %s must be a ParallelStyle (ColwiseParallel(), ...), got %s"
                        % (where, type(style).__name__))
    return style._c


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=None, tp_axis="tp"):
    """Applies tensor parallelism to ``module`` and returns it.

    device_mesh: 1-D, or with a mesh dim named ``tp_axis``; None takes a 1-D mesh over the default
    process group. parallelize_plan: a ParallelStyle, or a dict {FQN pattern: ParallelStyle}. Every
    pattern must match a submodule (ValueError naming it). src_data_rank: None (tessel's default, torch's is
    0: each rank cuts its Shard pieces from its own values, so ranks start from the same seed; Replicate
    parameters take the TP group's rank-0 values) or k, a rank of the tensor-parallel group whose whole
    parameters are broadcast over the group first (torch's group_src semantics)."""
    if device_mesh is None:
        from ...fsdp import _default_mesh
        device_mesh = _default_mesh()
    if parallelize_plan is None:
        raise ValueError("parallelize_module: no parallelize_plan given for %s (a ParallelStyle or a dict of "
                         "FQN patterns to styles)" % type(module).__name__)
    if isinstance(parallelize_plan, dict):
        plan = [(str(fqn), _style(s, "plan['%s']" % fqn)) for fqn, s in parallelize_plan.items()]
        _C.parallelize_module(module, device_mesh, plan, src_data_rank, tp_axis)
    else:
        _C.parallelize_module_with_style(module, device_mesh, _style(parallelize_plan, "parallelize_plan"),
                                         src_data_rank, tp_axis)
    return module


@contextlib.contextmanager
def loss_parallel():
    """Cross-entropy on vocab-sharded logits (Shard(-1)) without gathering them; the loss and its backward
    both run inside. Plain targets next to DTensor logits are taken as Replicate in this scope (per thread)."""
    with _C._LossParallel():
        yield


from . import api, loss, style  # noqa: E402,F401 (torch's submodules, reachable as attributes)
