"""tessel.distributed.tensor.parallel: torch's tensor-parallel API over tp/ (tp/README.md).

``parallelize_module(module, device_mesh, parallelize_plan)`` with a plan that is one style (for the module
itself) or a dict of FQN patterns (``*``, ``?``, ``[..]`` per dotted atom, e.g. ``"layers.*.attn.w[qk]"``)
to styles, applied in the dict's order. The styles take torch's keyword names and defaults; applying them
is C++ (parameters become DTensors on the tensor-parallel mesh, forward hooks move the activations), so
they act alike on Python-defined modules (``tessel.nn.Module`` subclasses are ``nn::Module``s) and on the
C++ layers. Colwise/Rowwise shard ``nn.Linear`` and ``nn.Embedding``; SequenceParallel acts on
``nn.LayerNorm`` / ``nn.RMSNorm``; PrepareModuleInput/Output act on any module, one layout per positional
input (None for one to leave as it is, a complex freqs_cis say) or per output, and PrepareModuleInput's
``input_kwarg_layouts`` / ``desired_input_kwarg_layouts`` per keyword argument by name (the inputs in a
Python forward pre-hook with_kwargs, as torch's, which sees every argument).

    tp_mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    parallelize_module(mlp, tp_mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    with loss_parallel():                # logits left Shard(-1) by ColwiseParallel(use_local_output=False)
        loss = F.cross_entropy(logits, targets)
        loss.backward()
"""
import contextlib
import warnings

from .... import _C
from ...tensor import Replicate, Shard

__all__ = ["parallelize_module", "ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput", "PrepareModuleInputOutput", "loss_parallel"]


class ParallelStyle:
    """Base of the styles; ``_c`` is the C++ value (tp/parallel_style.h) that parallelize_module applies. A
    subclass written as torch's (torchtitan's NoParallel, MoE ExpertParallel) defines ``_apply(module,
    device_mesh)`` instead, usually with distribute_module; parallelize_module calls it for each module it
    matches."""

    src_data_rank = 0  # (torch's attribute; parallelize_module sets it on the style before _apply)

    def __repr__(self):
        return repr(self._c) if "_c" in self.__dict__ else object.__repr__(self)

    def __eq__(self, other):
        if "_c" not in self.__dict__:
            return self is other
        return type(self) is type(other) and self._c == other._c and \
            getattr(self, "_inputs", None) == getattr(other, "_inputs", None)

    def __hash__(self):  # (equal styles hash alike)
        return hash((type(self).__name__, repr(self))) if "_c" in self.__dict__ else object.__hash__(self)

    def _apply(self, module, device_mesh):
        """torch's: applies this style to `module` on `device_mesh` (a subclass's _apply may call it through
        super()). A built-in style runs in C++; a subclass overriding its input / output / partition functions is
        refused, since the C++ style would not call them."""
        if "_c" not in self.__dict__:
            raise NotImplementedError("%s defines no _apply(module, device_mesh)" % type(self).__name__)
        _refuse_overrides(self)
        axis = device_mesh.mesh_dim_names[0] if device_mesh.ndim == 1 and device_mesh.mesh_dim_names else "tp"
        return _apply_built_in(self, module, device_mesh, self.src_data_rank, axis)


def _tp_mesh(device_mesh, tp_axis):
    return device_mesh if device_mesh.ndim == 1 else device_mesh[tp_axis]


def _apply_built_in(style, module, device_mesh, src_data_rank, tp_axis):
    """A built-in style on `module` itself: its C++ style, then its Python input half (PrepareModuleInput's)."""
    _C.parallelize_module_with_style(module, device_mesh, _style(style, "parallelize_plan"), src_data_rank, tp_axis)
    if getattr(style, "_inputs", None):
        style._inputs.apply(module, _tp_mesh(device_mesh, tp_axis))
    return module


# torch's styles are Python and call these from their _apply; tessel's built-in styles run in C++ and would ignore a
# subclass's override of one (torchao's Float8 styles override the input / output preparation): refused instead.
_TORCH_STYLE_HOOKS = ("_prepare_input_fn", "_prepare_output_fn", "_partition_linear_fn", "_partition_embedding_fn",
                      "_partition_fn")
_BUILT_IN = {"ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
             "PrepareModuleOutput", "PrepareModuleInputOutput"}


def _custom_apply(style):
    """style._apply when a class of the user's defines one (a torch-style subclass), else None (a built-in style,
    applied in C++; its overrides refused)."""
    for cls in type(style).__mro__:
        if cls.__module__ == __name__ and cls.__name__ in _BUILT_IN:
            break
        if "_apply" in cls.__dict__:
            return style._apply
    _refuse_overrides(style)
    return None


def _refuse_overrides(style):
    overridden = sorted({name for cls in type(style).__mro__ if not (cls.__module__ == __name__ or cls is object)
                         for name in _TORCH_STYLE_HOOKS if name in cls.__dict__})
    if overridden:
        raise NotImplementedError(
            "parallelize_module: %s overrides %s of a built-in style, which tessel applies in C++ without calling "
            "them (the override would be ignored silently); define _apply(module, device_mesh) instead, with "
            "distribute_module(module, device_mesh, partition_fn, input_fn, output_fn)"
            % (type(style).__name__, ", ".join(overridden)))


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


class _InputLayouts:
    """PrepareModuleInput's input half, torch's (a Python forward pre-hook with_kwargs, which sees every
    argument, so positional layouts pair with all positional arguments, as torch's: a complex freqs_cis
    with a None layout passes as it is). An argument with a layout is taken as that placement (a local
    tensor becomes a DTensor on the tensor-parallel mesh; a DTensor is kept), redistributed to its desired
    layout when that differs, and handed to forward local when use_local_output; those with None (or not
    named in input_kwarg_layouts) pass unchanged."""

    def __init__(self, style, layouts, desired, kw_layouts, kw_desired, use_local_output):
        kw_layouts, kw_desired = dict(kw_layouts or {}), dict(kw_desired or {})
        if len(kw_layouts) != len(kw_desired):
            raise ValueError("%s: input_kwarg_layouts and desired_input_kwarg_layouts should have same length! "
                             "(got %s and %s)" % (style, sorted(kw_layouts), sorted(kw_desired)))
        _C._tp_check_input_layouts(layouts, desired, style)
        self.layouts, self.desired = list(layouts), list(desired)
        self.kw_layouts, self.kw_desired, self.use_local_output = kw_layouts, kw_desired, bool(use_local_output)

    def __bool__(self):
        return bool(self.layouts or self.kw_layouts)

    def _key(self):
        return (self.layouts, self.desired, self.kw_layouts, self.kw_desired, self.use_local_output)

    def __eq__(self, other):
        return isinstance(other, _InputLayouts) and self._key() == other._key()

    def _prepared(self, mod, what, value, layout, want, tp_mesh):
        from ...._complex import ComplexTensor, view_as_complex, view_as_real
        if layout is None:
            return value
        if isinstance(value, ComplexTensor):  # over its real view [..., 2]: a negative Shard dim moves by one
            def real_dim(p):
                return Shard(p.dim - 1) if isinstance(p, Shard) and p.dim < 0 else p
            real = self._prepared(mod, what, view_as_real(value), real_dim(layout),
                                  None if want is None else real_dim(want), tp_mesh)
            return view_as_complex(real)
        if not isinstance(value, _C.Tensor):
            raise TypeError("PrepareModuleInput: %s of %s has input layout %r but is a %s, not a tensor"
                            % (what, type(mod).__name__, layout, type(value).__name__))
        return _C._tp_prepare_input(value, layout, want, self.use_local_output, tp_mesh,
                                    "PrepareModuleInput on %s %s" % (type(mod).__name__, what))

    def apply(self, module, tp_mesh):
        def hook(mod, args, kwargs):
            if self.layouts:
                if len(args) != len(self.layouts):
                    raise ValueError("PrepareModuleInput: %s got %d positional inputs but input_layouts has %d "
                                     "entries (module inputs and input_layouts should have same length!)"
                                     % (type(mod).__name__, len(args), len(self.layouts)))
                args = tuple(self._prepared(mod, "positional input %d" % i, a, layout, want, tp_mesh)
                             for i, (a, layout, want) in enumerate(zip(args, self.layouts, self.desired)))
            kwargs = {name: self._prepared(mod, "keyword argument '%s'" % name, value, self.kw_layouts.get(name),
                                           self.kw_desired.get(name), tp_mesh) for name, value in kwargs.items()}
            return args, kwargs
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
    """Annotates each input with input_layouts and redistributes it to desired_input_layouts."""

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        layouts = _layouts(input_layouts, "input_layouts")
        desired = _layouts(desired_input_layouts, "desired_input_layouts")
        self._shown = _C.PrepareModuleInput(layouts, desired, bool(use_local_output))  # checks, repr
        self._inputs = _InputLayouts("PrepareModuleInput", layouts, desired, input_kwarg_layouts,
                                     desired_input_kwarg_layouts, use_local_output)
        self._c = _C.PrepareModuleInput([], [], bool(use_local_output))  # the inputs are _inputs' (Python)

    def __repr__(self):
        return repr(self._shown)


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
        layouts = _layouts(input_layouts, "input_layouts")
        desired = _layouts(desired_input_layouts, "desired_input_layouts")
        outputs = (_layouts(output_layouts, "output_layouts"),
                   _layouts(desired_output_layouts, "desired_output_layouts"), bool(use_local_output))
        self._shown = _C.PrepareModuleInputOutput(layouts, desired, bool(use_local_input), *outputs)
        self._inputs = _InputLayouts("PrepareModuleInputOutput", layouts, desired, input_kwarg_layouts,
                                     desired_input_kwarg_layouts, use_local_input)
        self._c = _C.PrepareModuleInputOutput([], [], bool(use_local_input), *outputs)

    def __repr__(self):
        return repr(self._shown)


def _style(style, where):
    if not isinstance(style, ParallelStyle):
        raise TypeError("parallelize_module: %s must be a ParallelStyle (ColwiseParallel(), ...), got %s"
                        % (where, type(style).__name__))
    if "_c" not in style.__dict__:
        raise TypeError("parallelize_module: %s (%s) defines no _apply(module, device_mesh) and is none of "
                        "tessel's built-in styles" % (where, type(style).__name__))
    return style._c


def _resolves(module, fqn):
    """Whether a plan key names a submodule; if not, torch's warning (the entry is skipped, as torch's: one plan
    can serve models that lack some of its modules)."""
    if _C.tp_match_modules(module, fqn):  # ("" matches the module itself: torch's shortcut)
        return True
    atoms, at = fqn.split("."), module
    for k in range(1, len(atoms) + 1):
        found = _C.tp_match_modules(module, ".".join(atoms[:k]))
        if not found:
            warnings.warn("Parallelize plan key '%s' could not be resolved: no submodule matching token '%s' in "
                          "module %s, skipping this plan entry." % (fqn, atoms[k - 1], at), stacklevel=3)
            return False
        at = module.get_submodule(found[0])
    return True


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=0, tp_axis="tp"):
    """Applies tensor parallelism to ``module`` and returns it.

    device_mesh: 1-D, or with a mesh dim named ``tp_axis``; None takes a 1-D mesh over the default
    process group. parallelize_plan: a ParallelStyle, or a dict {FQN pattern: ParallelStyle}; a pattern that
    matches no submodule is skipped with torch's warning (no plan at all: torch's warning, nothing done).
    src_data_rank: k (0 by default, as torch's), a rank of the tensor-parallel group whose whole parameters are
    broadcast over the group first (torch's group_src semantics: ranks initialized differently end with rank k's
    model), or None: no communication, each rank cuts its Shard pieces from its own values (ranks must start from
    the same seed; Replicate parameters take the TP group's rank-0 values, where torch keeps each rank's own)."""
    if device_mesh is None:
        from ...fsdp import _default_mesh
        device_mesh = _default_mesh()
    if parallelize_plan is None:  # torch's: a warning, and the module as it is
        warnings.warn("No parallelize_plan is provided and auto-parallel is not supported at the moment, so this "
                      "parallelize_module call will do nothing.", stacklevel=2)
        return module
    if not isinstance(parallelize_plan, dict):
        apply = _custom_apply(parallelize_plan) if isinstance(parallelize_plan, ParallelStyle) else None
        if apply is None:
            return _apply_built_in(parallelize_plan, module, device_mesh, src_data_rank, tp_axis)
        parallelize_plan.src_data_rank = src_data_rank
        return apply(module, device_mesh)
    parallelize_plan = {fqn: s for fqn, s in parallelize_plan.items() if _resolves(module, str(fqn))}
    custom = {fqn: _custom_apply(s) for fqn, s in parallelize_plan.items() if isinstance(s, ParallelStyle)}
    built_in = {fqn: s for fqn, s in parallelize_plan.items() if not custom.get(fqn)}
    if built_in:
        _C.parallelize_module(module, device_mesh, [(str(fqn), _style(s, "plan['%s']" % fqn))
                                                    for fqn, s in built_in.items()], src_data_rank, tp_axis)
    for fqn, apply in custom.items():  # torch's: each matched module through the style's own _apply, which gets
        if apply is None:              # the mesh as the caller passed it (an ("ep", "tp") one included)
            continue
        parallelize_plan[fqn].src_data_rank = src_data_rank
        for name in _C.tp_match_modules(module, str(fqn)):
            apply(module.get_submodule(name), device_mesh)
    for fqn, s in built_in.items():  # the styles' Python input halves (PrepareModuleInput's)
        if getattr(s, "_inputs", None):
            for name in _C.tp_match_modules(module, str(fqn)):
                s._inputs.apply(module.get_submodule(name), _tp_mesh(device_mesh, tp_axis))
    return module


@contextlib.contextmanager
def loss_parallel():
    """Cross-entropy on vocab-sharded logits (Shard(-1)) without gathering them; the loss and its backward
    both run inside. Plain targets next to DTensor logits are taken as Replicate in this scope (per thread)."""
    with _C._LossParallel():
        yield


from . import api, loss, style  # noqa: E402,F401 (torch's submodules, reachable as attributes)
