"""tessel.distributed.tensor.parallel: torch's tensor-parallel API over tp/ (tp/README.md).

``parallelize_module(module, device_mesh, parallelize_plan)`` with a plan that is one style (for the module
itself) or a dict of FQN patterns (``*``, ``?``, ``[..]`` per dotted atom, e.g. ``"layers.*.attn.w[qk]"``)
to styles or to nested plan dicts, applied in the dict's order. The styles take torch's keyword names and
defaults and keep torch's attributes (``ColwiseParallel().output_layouts == (Shard(-1),)``), read when the
style is applied, so a subclass or a caller may set them. Colwise / Rowwise / SequenceParallel apply in C++
(parameters become DTensors on the tensor-parallel mesh, forward hooks move the activations), so they act alike
on Python-defined modules (``tessel.nn.Module`` subclasses are ``nn::Module``s) and on the C++ layers.
Colwise/Rowwise shard ``nn.Linear`` and ``nn.Embedding``; SequenceParallel acts on ``nn.LayerNorm`` /
``nn.RMSNorm``; PrepareModuleInput/Output are Python hooks on any module, as torch's: one layout per positional
input (None for one to leave as it is, a complex freqs_cis say) or per output (None for a None, an int, a
tensor left as it is), and PrepareModuleInput's ``input_kwarg_layouts`` / ``desired_input_kwarg_layouts`` per
keyword argument by name (a forward pre-hook with_kwargs, which sees every argument).

    tp_mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    parallelize_module(mlp, tp_mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    with loss_parallel():                # logits left Shard(-1) by ColwiseParallel(use_local_output=False)
        loss = F.cross_entropy(logits, targets)
        loss.backward()
"""
import contextlib
import fnmatch
import warnings

from .... import _C
from ...tensor import DTensor, Placement, Replicate, Shard, _mesh_or_current

__all__ = ["parallelize_module", "ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput", "PrepareModuleInputOutput", "loss_parallel"]


class ParallelStyle:
    """Base of the styles. The built-in ones keep torch's attributes and build what applies them (a C++ style of
    tp/parallel_style.h, or Python hooks) from their current values when parallelize_module applies them. A
    subclass written as torch's (torchtitan's NoParallel, MoE ExpertParallel) defines ``_apply(module,
    device_mesh)`` instead, usually with distribute_module; parallelize_module calls it for each module it
    matches."""

    src_data_rank = 0  # (torch's attribute; parallelize_module sets it on the style before applying it)
    _fields = None  # a built-in style's attributes: styles with equal ones are equal (torch's compare by identity)

    def _key(self):
        return tuple(getattr(self, f, None) for f in self._fields)

    def __repr__(self):
        if self._fields is None or not hasattr(self, "_to_c"):
            return object.__repr__(self)
        try:
            return repr(self._to_c())
        except Exception:  # (attributes the C++ style cannot take: shown as they are)
            return "%s(%s)" % (type(self).__name__,
                               ", ".join("%s=%r" % (f, getattr(self, f, None)) for f in self._fields))

    def __eq__(self, other):
        if self._fields is None:
            return self is other
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):  # (equal styles hash alike)
        return object.__hash__(self) if self._fields is None else hash((type(self).__name__, repr(self)))

    def _apply(self, module, device_mesh):
        """torch's: applies this style to `module` on `device_mesh` (a subclass's _apply may call it through
        super()). A subclass of a built-in style overriding its input / output / partition functions is refused,
        since what applies the style would not call them."""
        if not hasattr(self, "_apply_tp"):
            raise NotImplementedError("%s defines no _apply(module, device_mesh)" % type(self).__name__)
        axis = device_mesh.mesh_dim_names[0] if device_mesh.ndim == 1 and device_mesh.mesh_dim_names else "tp"
        return self._apply_tp(module, device_mesh, axis)


def _tp_mesh(device_mesh, tp_axis):
    if device_mesh.ndim == 1:
        return device_mesh
    names = tuple(device_mesh.mesh_dim_names or ())
    if tp_axis not in names:
        raise ValueError("parallelize_module: the mesh %s has no mesh axis '%s' (axes: %s); pass a 1-D mesh or "
                         "name its axis with tp_axis=" % (device_mesh, tp_axis, ", ".join(names)))
    return device_mesh[tp_axis]


# torch's styles are Python and call these from their _apply; tessel's built-in styles would ignore a subclass's
# override of one (torchao's Float8 styles override the input / output preparation): refused instead.
_TORCH_STYLE_HOOKS = ("_prepare_input_fn", "_prepare_output_fn", "_partition_linear_fn", "_partition_embedding_fn",
                      "_partition_fn", "_replicate_module_fn", "_prepare_input_arg", "_prepare_input_kwarg_fn",
                      "_prepare_out_fn")


def _custom_apply(s):
    """style._apply when a class of the user's defines one (a torch-style subclass), else None (a built-in style,
    applied by its _apply_tp; its overrides refused)."""
    for cls in type(s).__mro__:
        if cls in _BUILT_IN:
            return None
        if "_apply" in cls.__dict__:
            return s._apply
    return None


def _refuse_overrides(s):
    overridden = sorted({name for cls in type(s).__mro__ if not (cls in _BUILT_IN or cls is object)
                         for name in _TORCH_STYLE_HOOKS if name in cls.__dict__})
    if overridden:
        raise NotImplementedError(
            "parallelize_module: %s overrides %s of a built-in style, which tessel applies without calling them "
            "(the override would be ignored silently); define _apply(module, device_mesh) instead, with "
            "distribute_module(module, device_mesh, partition_fn, input_fn, output_fn)"
            % (type(s).__name__, ", ".join(overridden)))


def _one(layout, name):
    """A Colwise / Rowwise layout argument: one placement (or None, the default)."""
    if isinstance(layout, (tuple, list)):
        raise ValueError("%s: expects one placement on the 1-D tensor-parallel mesh, got %d (%r)"
                         % (name, len(layout), layout))
    return layout


def _single(layouts, name):
    """A Colwise / Rowwise / SequenceParallel attribute (torch's 1-tuple, or a placement) as the C++ style's one
    placement."""
    if isinstance(layouts, (tuple, list)) and len(layouts) == 1:
        layouts = layouts[0]
    if not isinstance(layouts, Placement):
        raise ValueError("%s: expects one placement on the 1-D tensor-parallel mesh, got %r" % (name, layouts))
    return layouts


def _apply_cpp(s, module, device_mesh, tp_axis, fqn):
    """A Colwise / Rowwise / SequenceParallel style on `module`: the C++ style built from its attributes now."""
    _refuse_overrides(s)
    # its errors and collective labels name the module by `fqn` ("ColwiseParallel on 'layers.0.up' (Linear)")
    _C.parallelize_module_with_style(module, device_mesh, s._to_c(), s.src_data_rank, tp_axis, fqn or "")
    return module


class _InputLayouts:
    """PrepareModuleInput's input half, torch's (a Python forward pre-hook with_kwargs, which sees every
    argument, so positional layouts pair with all positional arguments, as torch's: a complex freqs_cis
    with a None layout passes as it is). An argument with a layout is taken as that placement (a local
    tensor becomes a DTensor on the tensor-parallel mesh; a DTensor is kept), redistributed to its desired
    layout when that differs, and handed to forward local when use_local_output; those with None (or not
    named in input_kwarg_layouts) pass unchanged."""

    def __init__(self, who, layouts, desired, kw_layouts, kw_desired, use_local_output):
        _C._tp_check_input_layouts(layouts, desired, who)
        self.layouts, self.desired = list(layouts), list(desired)
        self.kw_layouts, self.kw_desired = dict(kw_layouts or {}), dict(kw_desired or {})
        self.use_local_output = bool(use_local_output)

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
        if not isinstance(value, _C.Tensor):  # torch's check and text
            raise AssertionError("expecting input to be a torch.Tensor!")
        return _C._tp_prepare_input(value, layout, want, self.use_local_output, tp_mesh,
                                    "PrepareModuleInput on %s %s" % (type(mod).__name__, what))

    def __call__(self, mod, args, kwargs, tp_mesh):
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


def _prepared_output(mod, i, out, layout, want, use_local_output, tp_mesh):
    """torch's PrepareModuleOutput on one output with a layout: a local tensor is taken as that placement (a
    DTensor as it is), redistributed when the desired layout differs from the declared one."""
    if not isinstance(out, _C.Tensor):
        raise TypeError("PrepareModuleOutput: output %d of %s has output layout %r but is a %s, not a tensor"
                        % (i, type(mod).__name__, layout, type(out).__name__))
    d = out if isinstance(out, DTensor) else DTensor.from_local(out, tp_mesh, (layout,), run_check=False)
    if want is not None and want != layout:
        d = d.redistribute(placements=(want,))
    return d.to_local() if use_local_output else d


def _prepared_outputs(mod, outputs, layouts, desired, use_local_output, tp_mesh):
    """torch's _prepare_out_fn: the raw output (a tuple, position by position; anything else is one output),
    outputs whose layout is None (a None, an int, a tensor left as it is) passed unchanged."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    if len(outputs) != len(layouts):
        raise ValueError("PrepareModuleOutput: %s returned %d outputs but output_layouts has %d entries (module "
                         "outputs and output_layouts should have same length!)"
                         % (type(mod).__name__, len(outputs), len(layouts)))
    prepared = [out if layout is None else _prepared_output(mod, i, out, layout, want, use_local_output, tp_mesh)
                for i, (out, layout, want) in enumerate(zip(outputs, layouts, desired))]
    return prepared[0] if len(prepared) == 1 else tuple(prepared)


class ColwiseParallel(ParallelStyle):
    """Linear: weight/bias Shard(0); Embedding: weight Shard(1). Input: input_layouts (default Replicate)
    moved to Replicate; output: Shard(-1) moved to output_layouts (default Shard(-1))."""

    _fields = ("input_layouts", "output_layouts", "use_local_output")

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        super().__init__()
        self.input_layouts = (_one(input_layouts, "ColwiseParallel.input_layouts") or Replicate(),)
        self.output_layouts = (_one(output_layouts, "ColwiseParallel.output_layouts") or Shard(-1),)
        self.desired_input_layouts = (Replicate(),)
        self.use_local_output = use_local_output

    def _to_c(self):
        if _single(self.desired_input_layouts, "ColwiseParallel.desired_input_layouts") != Replicate():
            raise NotImplementedError("ColwiseParallel: desired_input_layouts %r is not supported (its C++ style "
                                      "takes the input Replicate)" % (self.desired_input_layouts,))
        return _C.ColwiseParallel(_single(self.input_layouts, "ColwiseParallel.input_layouts"),
                                  _single(self.output_layouts, "ColwiseParallel.output_layouts"),
                                  bool(self.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        return _apply_cpp(self, module, device_mesh, tp_axis, fqn)


class RowwiseParallel(ParallelStyle):
    """Linear: weight Shard(1), bias Replicate, input moved to Shard(-1); Embedding: weight Shard(0).
    Output: Partial(sum) reduced to output_layouts (default Replicate: one all_reduce)."""

    _fields = ("input_layouts", "output_layouts", "use_local_output")

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        super().__init__()
        self.input_layouts = (_one(input_layouts, "RowwiseParallel.input_layouts") or Shard(-1),)
        self.output_layouts = (_one(output_layouts, "RowwiseParallel.output_layouts") or Replicate(),)
        self.use_local_output = use_local_output

    def _to_c(self):
        return _C.RowwiseParallel(_single(self.input_layouts, "RowwiseParallel.input_layouts"),
                                  _single(self.output_layouts, "RowwiseParallel.output_layouts"),
                                  bool(self.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        from ....nn import Embedding  # torch's _apply sets it: what the module's computation takes
        self.desired_input_layouts = (Replicate(),) if isinstance(module, Embedding) else (Shard(-1),)
        return _apply_cpp(self, module, device_mesh, tp_axis, fqn)


class SequenceParallel(ParallelStyle):
    """Any module (LayerNorm / RMSNorm, a model's own norm) on a sequence-sharded activation: parameters
    Replicate, no communication."""

    _fields = ("sequence_sharding", "use_local_output")

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        super().__init__()
        self.sequence_sharding = (Shard(sequence_dim),)
        self.use_local_output = use_local_output

    def _to_c(self):
        shard = _single(self.sequence_sharding, "SequenceParallel.sequence_sharding")
        if not isinstance(shard, Shard):
            raise ValueError("SequenceParallel.sequence_sharding: expects (Shard(sequence_dim),), got %r"
                             % (self.sequence_sharding,))
        return _C.SequenceParallel(int(shard.dim), bool(self.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        return _apply_cpp(self, module, device_mesh, tp_axis, fqn)


def _as_tuple(layouts):
    """torch's: one placement is a 1-tuple; a tuple, a list or None is kept as it is."""
    return (layouts,) if isinstance(layouts, Placement) else layouts


class PrepareModuleInput(ParallelStyle):
    """Annotates each input with input_layouts and redistributes it to desired_input_layouts."""

    _fields = ("input_layouts", "desired_input_layouts", "input_kwarg_layouts", "desired_input_kwarg_layouts",
               "use_local_output")

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        self.input_layouts = _as_tuple(input_layouts)
        self.desired_input_layouts = _as_tuple(desired_input_layouts)
        self.use_local_output = use_local_output
        if self.input_layouts is not None:  # torch's checks and texts
            if self.desired_input_layouts is None:
                raise AssertionError("desired module inputs should not be None!")
            if len(self.input_layouts) != len(self.desired_input_layouts):
                raise AssertionError("input_layouts and desired_input_layouts should have same length!")
        self.with_kwargs = input_kwarg_layouts is not None
        self.input_kwarg_layouts = input_kwarg_layouts or {}
        self.desired_input_kwarg_layouts = desired_input_kwarg_layouts or {}
        if self.with_kwargs and len(self.input_kwarg_layouts) != len(self.desired_input_kwarg_layouts):
            raise AssertionError("input_kwarg_layouts and desired_input_kwarg_layouts should have same length!")
        self._input_half()  # tessel's check: no desired layout where the input's is None

    def _layout_lists(self):
        return ([] if self.input_layouts is None else list(self.input_layouts),
                [] if self.desired_input_layouts is None else list(self.desired_input_layouts))

    def _input_half(self):
        return _InputLayouts("PrepareModuleInput", *self._layout_lists(), self.input_kwarg_layouts,
                             self.desired_input_kwarg_layouts, self.use_local_output)

    def _to_c(self):  # (its repr)
        return _C.PrepareModuleInput(*self._layout_lists(), bool(self.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        _refuse_overrides(self)
        tp_mesh = _tp_mesh(device_mesh, tp_axis)
        self._input_half()  # (checked when applied, not at the first forward)
        # the attributes as they are at each call, as torch's hook reads them
        module.register_forward_pre_hook(lambda mod, args, kwargs: self._input_half()(mod, args, kwargs, tp_mesh),
                                         with_kwargs=True)
        return module


class PrepareModuleOutput(ParallelStyle):
    """Annotates each output with output_layouts and redistributes it to desired_output_layouts."""

    _fields = ("output_layouts", "desired_output_layouts", "use_local_output")

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        self.output_layouts = _as_tuple(output_layouts)
        self.desired_output_layouts = _as_tuple(desired_output_layouts)
        self.use_local_output = use_local_output
        if len(self.output_layouts) != len(self.desired_output_layouts):  # torch's check and text
            raise AssertionError("output_layouts and desired_output_layouts should have same length!")

    def _to_c(self):  # (its repr)
        return _C.PrepareModuleOutput(list(self.output_layouts), list(self.desired_output_layouts),
                                      bool(self.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        _refuse_overrides(self)
        tp_mesh = _tp_mesh(device_mesh, tp_axis)
        module.register_forward_hook(lambda mod, args, outputs: _prepared_outputs(
            mod, outputs, list(self.output_layouts), list(self.desired_output_layouts), self.use_local_output,
            tp_mesh))
        return module


class PrepareModuleInputOutput(ParallelStyle):
    """PrepareModuleInput and PrepareModuleOutput on one module (torch's prepare_module_input and
    prepare_module_output attributes)."""

    _fields = ("prepare_module_input", "prepare_module_output")

    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_input=False, output_layouts,
                 desired_output_layouts, use_local_output=True):
        self.prepare_module_input = PrepareModuleInput(
            input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
            input_kwarg_layouts=input_kwarg_layouts, desired_input_kwarg_layouts=desired_input_kwarg_layouts,
            use_local_output=use_local_input)
        self.prepare_module_output = PrepareModuleOutput(
            output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
            use_local_output=use_local_output)

    def _to_c(self):  # (its repr)
        into, out = self.prepare_module_input, self.prepare_module_output
        return _C.PrepareModuleInputOutput(*into._layout_lists(), bool(into.use_local_output),
                                           list(out.output_layouts), list(out.desired_output_layouts),
                                           bool(out.use_local_output))

    def _apply_tp(self, module, device_mesh, tp_axis, fqn=""):
        _refuse_overrides(self)
        self.prepare_module_input._apply_tp(module, device_mesh, tp_axis, fqn)
        self.prepare_module_output._apply_tp(module, device_mesh, tp_axis, fqn)
        return module


_BUILT_IN = {ParallelStyle, ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput,
             PrepareModuleOutput, PrepareModuleInputOutput}


def _parallelize(module, fqn, device_mesh, plan, src_data_rank, tp_axis, depth):
    """torch's parallelize_module below the mesh lookup: a style applied to `module` (named `fqn` from the root);
    a dict's entries in its order, each key's first dotted token matched (fnmatch) against the children's
    names and the rest of the key (or the value itself, a dict included) applied to each match in turn."""
    if plan is None:  # torch's: a warning, and the module as it is
        warnings.warn("No parallelize_plan is provided and auto-parallel is not supported at the moment, so this "
                      "parallelize_module call will do nothing.", stacklevel=3 + depth)
        return module
    if isinstance(plan, ParallelStyle):
        plan.src_data_rank = src_data_rank
        apply = _custom_apply(plan)
        if apply is not None:  # the mesh as the caller passed it (an ("ep", "tp") one included)
            return apply(module, device_mesh)
        if not hasattr(plan, "_apply_tp"):
            raise TypeError("parallelize_module: %s defines no _apply(module, device_mesh) and is none of tessel's "
                            "built-in styles" % type(plan).__name__)
        return plan._apply_tp(module, device_mesh, tp_axis, fqn)
    if not isinstance(plan, dict):
        raise TypeError("Expect Union[ParallelStyle, Dict[str, ParallelStyle]] for parallelize_plan, %s found!"
                        % type(plan))
    for module_path, entry in plan.items():
        module_path = str(module_path)
        if module_path == "":  # torch's shortcut: the module itself
            _parallelize(module, fqn, device_mesh, entry, src_data_rank, tp_axis, depth + 1)
            continue
        token, _, rest = module_path.partition(".")
        children = [(name, child) for name, child in module.named_children() if fnmatch.fnmatch(name, token)]
        if not children:  # torch's warning, the entry skipped (one plan can serve models that lack some modules)
            warnings.warn("Parallelize plan key '%s' could not be resolved: no submodule matching token '%s' in "
                          "module %s, skipping this plan entry." % (module_path, token, module),
                          stacklevel=3 + depth)
            continue
        for name, child in children:
            _parallelize(child, name if not fqn else fqn + "." + name, device_mesh, {rest: entry} if rest else entry,
                         src_data_rank, tp_axis, depth + 1)
    return module


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=0, tp_axis="tp"):
    """Applies tensor parallelism to ``module`` and returns it.

    device_mesh: 1-D, or with a mesh dim named ``tp_axis``; None takes the innermost ``with mesh:`` (torch's
    RuntimeError outside any). parallelize_plan: a ParallelStyle, or a dict {FQN pattern: ParallelStyle or a
    nested dict}, applied in its order; a key that matches no submodule is skipped with torch's warning (no
    plan at all: torch's warning, nothing done). src_data_rank: k (0 by default, as torch's), a rank of the
    tensor-parallel group whose whole parameters are broadcast over the group first (torch's group_src
    semantics: ranks initialized differently end with rank k's model), or None: no communication, each rank cuts
    its Shard pieces from its own values (ranks must start from the same seed; Replicate parameters take the TP
    group's rank-0 values, where torch keeps each rank's own)."""
    device_mesh = _mesh_or_current(device_mesh)
    return _parallelize(module, "", device_mesh, parallelize_plan, src_data_rank, tp_axis, 0)


@contextlib.contextmanager
def loss_parallel():
    """Cross-entropy on vocab-sharded logits (Shard(-1)) without gathering them; the loss and its backward
    both run inside. Plain targets next to DTensor logits are taken as Replicate in this scope (per thread)."""
    with _C._LossParallel():
        yield


from . import api, loss, style  # noqa: E402 (torch's submodules, reachable as attributes)

_SUBMODULES = (api, loss, style)
