"""tessel.distributed.tensor.parallel: torch's tensor-parallel API over tp/ (tp/README.md).

``parallelize_module(module, device_mesh, parallelize_plan)`` with a plan that is one style (for the module
itself) or a dict of FQN patterns (``*``, ``?``, ``[..]`` per dotted atom, e.g. ``"layers.*.attn.w[qk]"``)
to styles, applied in the dict's order. The styles take torch's keyword names and defaults; applying them
is C++ (parameters become DTensors on the tensor-parallel mesh, forward hooks move the activations), so
they act alike on Python-defined modules (``tessel.nn.Module`` subclasses are ``nn::Module``s) and on the
C++ layers. Colwise/Rowwise shard ``nn.Linear`` and ``nn.Embedding``; SequenceParallel acts on
``nn.LayerNorm`` / ``nn.RMSNorm``; PrepareModuleInput/Output act on any module, one layout per *tensor*
positional input (non-tensor arguments bypass module hooks in tessel) or per output, and
PrepareModuleInput's ``input_kwarg_layouts`` / ``desired_input_kwarg_layouts`` per keyword argument by name
(a Python forward pre-hook with_kwargs, as torch's).

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
        return type(self) is type(other) and self._c == other._c and \
            getattr(self, "_kwargs", None) == getattr(other, "_kwargs", None)


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


class _KwargLayouts:
    """PrepareModuleInput's keyword-argument half, torch's: a keyword argument named in input_kwarg_layouts
    is taken as that placement (a local tensor becomes a DTensor on the tensor-parallel mesh; a DTensor is
    kept), redistributed to its desired_input_kwarg_layouts entry when that differs, and handed to forward
    local when use_local_output; other keyword arguments pass unchanged."""

    def __init__(self, style, layouts, desired, use_local_output):
        layouts, desired = dict(layouts or {}), dict(desired or {})
        if len(layouts) != len(desired):
            raise ValueError("%s: input_kwarg_layouts and desired_input_kwarg_layouts should have same length! "
                             "(got %s and %s)" % (style, sorted(layouts), sorted(desired)))
        self.layouts, self.desired, self.use_local_output = layouts, desired, bool(use_local_output)

    def __bool__(self):
        return bool(self.layouts)

    def __eq__(self, other):
        return isinstance(other, _KwargLayouts) and (self.layouts, self.desired, self.use_local_output) == \
            (other.layouts, other.desired, other.use_local_output)

    def apply(self, module, tp_mesh):
        from ...tensor import DTensor

        def hook(mod, args, kwargs):
            out = dict(kwargs)
            for name, value in kwargs.items():
                layout = self.layouts.get(name)
                if layout is None:
                    continue
                if not isinstance(value, _C.Tensor):
                    raise TypeError("PrepareModuleInput: keyword argument '%s' of %s has input_kwarg_layouts %r but "
                                    "is a %s, not a tensor" % (name, type(mod).__name__, layout,
                                                               type(value).__name__))
                dt = value if isinstance(value, DTensor) else DTensor.from_local(value, tp_mesh, (layout,))
                want = self.desired.get(name)
                if want is not None and want != layout:
                    dt = dt.redistribute(tp_mesh, (want,))
                out[name] = dt.to_local() if self.use_local_output else dt
            return args, out
        module.register_forward_pre_hook(hook, with_kwargs=True)


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
        self._kwargs = _KwargLayouts("PrepareModuleInput", input_kwarg_layouts, desired_input_kwarg_layouts,
                                     use_local_output)
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
        self._kwargs = _KwargLayouts("PrepareModuleInputOutput", input_kwarg_layouts, desired_input_kwarg_layouts,
                                     use_local_input)
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
        styles = [(module.get_submodule(name), s) for fqn, s in parallelize_plan.items()
                  for name in _C.tp_match_modules(module, str(fqn))]
    else:
        _C.parallelize_module_with_style(module, device_mesh, _style(parallelize_plan, "parallelize_plan"),
                                         src_data_rank, tp_axis)
        styles = [(module, parallelize_plan)]
    kwarg_styles = [(m, s._kwargs) for m, s in styles if getattr(s, "_kwargs", None)]
    if kwarg_styles:
        tp_mesh = device_mesh if device_mesh.ndim == 1 else device_mesh[tp_axis]
        for m, kw in kwarg_styles:
            kw.apply(m, tp_mesh)
    return module


@contextlib.contextmanager
def loss_parallel():
    """Cross-entropy on vocab-sharded logits (Shard(-1)) without gathering them; the loss and its backward
    both run inside. Plain targets next to DTensor logits are taken as Replicate in this scope (per thread)."""
    with _C._LossParallel():
        yield


from . import api, loss, style  # noqa: E402,F401 (torch's submodules, reachable as attributes)
