"""tessel.distributed.pipelining: torch's pipelining names over pipelining/ (pipelining/README.md).

Runtime: ``PipelineStage(submodule, stage_index, num_stages, device)`` over any module (a Python-defined
``tessel.nn.Module`` is an ``nn::Module``, so it can be a stage) and the schedules by torch's class names:
``ScheduleGPipe`` / ``Schedule1F1B`` (one stage per rank), ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV`` (a list of stages per
rank). ``step(x)`` on the first stage's rank, ``step(target=y)`` on the last, ``step()`` elsewhere; the
batch splits into ``n_microbatches`` along dim 0 and the gradients are the full batch's (torch's
``scale_grads=True``). As torch's, further positional inputs (``step(tokens, positions)``) go to the first
stage only and keyword arguments to every stage of the rank, tensors split along dim 0 per microbatch. A stage
module may return a tuple of tensors: each travels to the next stage as one positional input (integer and
bool tensors forward only, floating ones with their gradients back), and the last stage's tuple reaches
``loss_fn`` as a tuple. As torch's, ``step`` returns the last stage's outputs merged along dim 0 on its rank
(None elsewhere) and ``losses=[]`` collects each microbatch's loss there. Difference from torch: ``loss_fn``
takes (output, target) and must return the microbatch's mean loss.

torch 2.15's additions: ``stage.register_forward_context(factory)`` runs each forward of the stage inside
``factory(PipelineStageInfo(...))`` (stage, microbatch; the shape handshake before the first step is the metadata
probe), ``schedules._ScheduleForwardOnly`` and ``analyze_pipeline_activation_liveness`` (_liveness.py).

Schedule IR (pure, no ranks): ``generate_schedule``, ``stage_to_rank_map``, ``lower_program``, the
verifier, ``parse_action`` / ``format_rank_program`` / CSV, ``simulate`` (makespan, bubble, peak in-flight
activations) and ``timeline_svg``. ``pipeline_gpt`` builds one rank's part of the C++ GPT pipeline.

    stage = PipelineStage(part, rank, 2, "cpu")
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=lambda out, y: F.mse_loss(out, y))
    losses = []
    out = schedule.step(x) if rank == 0 else schedule.step(target=y, losses=losses)  # rank 1: the merged output
"""
from collections import OrderedDict as _OrderedDict
from dataclasses import dataclass as _dataclass

from ... import _C
from .. import _default_group
from ...nn.modules import Module
from ._utils import PipeliningMetadataError

__all__ = ["PipelineStage", "PipelineStageInfo", "PipelineScheduleSingle", "PipelineScheduleMulti", "ScheduleGPipe",
           "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
           "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV", "get_schedule_class",
           "pipeline_gpt",
           "generate_schedule", "stage_to_rank_map", "lower_program", "verify_compute_program",
           "verify_lowered_program", "parse_action", "parse_rank_program", "format_rank_program",
           "format_program", "dump_csv", "parse_csv", "simulate", "simulate_lockstep", "timeline_svg",
           "schedule_names", "analyze_pipeline_activation_liveness", "PipelineActivationLiveness",
           "SplitPoint", "pipe_split", "pipeline", "Pipe", "build_stage"]

Action = _C._Action
parse_action = _C.parse_action
parse_rank_program = _C.parse_rank_program
format_rank_program = _C.format_rank_program
format_program = _C.format_program
dump_csv = _C.dump_csv
parse_csv = _C.parse_csv
schedule_names = _C.schedule_names
generate_schedule = _C.generate_schedule
stage_to_rank_map = _C.stage_to_rank_map
lower_program = _C.lower_program
verify_compute_program = _C.verify_compute_program
verify_lowered_program = _C.verify_lowered_program
simulate = _C.simulate
simulate_lockstep = _C.simulate_lockstep
timeline_svg = _C.timeline_svg
SimulationResult = _C.SimulationResult


def _example_shapes(args, what):
    """The shapes of the tensors in torch's input_args / output_args (a tensor or a tuple of them), or None."""
    if args is None:
        return None
    items = list(args) if isinstance(args, (tuple, list)) else [args]
    tensors = [a for a in items if isinstance(a, _C.Tensor)]
    if not tensors:
        raise TypeError("PipelineStage: %s must hold a tensor, got %r" % (what, args))
    return [list(t.shape) for t in tensors]


@_dataclass(frozen=True, slots=True, kw_only=True)
class PipelineStageInfo:
    """torch 2.15's identity of one stage forward, given to a context registered with
    PipelineStage.register_forward_context: the global stage index, the microbatch within the step, and whether
    the forward is the shape handshake's before the first step (microbatch 0; torch's metadata inference probe)."""
    stage_index: int
    microbatch_index: int
    is_metadata_inference: bool = False


class PipelineStage:
    """One stage module on this rank (torch.distributed.pipelining.PipelineStage). Shapes are inferred
    from the first step's microbatch 0; torch's input_args / output_args (one microbatch's example input and
    output) are checked against what that inference finds (ValueError naming both shapes)."""

    def __init__(self, submodule, stage_index, num_stages, device=None, input_args=None, output_args=None,
                 group=None, dw_builder=None):
        if device not in (None, "cpu") and str(device) != "cpu":
            raise NotImplementedError("PipelineStage: device '%s' is not available from Python (use 'cpu')" % device)
        inputs = _example_shapes(input_args, "input_args")
        if inputs is not None and int(stage_index) == 0:
            inputs = inputs[:1]  # the first stage's own input; step()'s further inputs reach it from Python
        self._expected = (inputs, _example_shapes(output_args, "output_args"))
        # torch's: a microbatch's B / I run the module's whole backward, then dw_builder() gives the runner of
        # what the module deferred (W runs it; under F/B-only schedules B runs it at once)
        self.dw_builder = dw_builder
        self.submod = submodule
        self.stage_index, self.num_stages = int(stage_index), int(num_stages)
        if self.stage_index >= self.num_stages:  # torch's checks, its wording and types
            raise ValueError("Stage index %d is out of range of %d" % (self.stage_index, self.num_stages))
        self.group = group  # torch's attribute: the group as given (None: the default group)
        self._group = group if group is not None else _default_group("PipelineStage")
        self.is_first, self.is_last = self.stage_index == 0, self.stage_index == self.num_stages - 1
        self.group_rank, self.group_size = self._group.rank, self._group.size  # (torch's attributes)
        if self.group_size > self.num_stages:
            raise RuntimeError("Pipeline group size %d cannot be larger than number of stages %d"
                               % (self.group_size, self.num_stages))
        self.has_backward = False  # torch's: set by each step (True) or eval (False)
        from ..._device import device as _device_type
        self.device = _device_type("cpu")
        self._c = None  # built by the schedule, which knows the loss and the stage placement
        self._forward_contexts = _OrderedDict()  # a RemovableHandle keeps a weak reference to it

    def register_forward_context(self, context_factory):
        """torch 2.15's: every forward of this stage (each microbatch, step and eval) runs inside
        ``context_factory(PipelineStageInfo(stage_index=..., microbatch_index=...))``. One at a time; the
        returned handle's remove() unregisters it. The context must not suppress the stage's exceptions."""
        from ...utils.hooks import RemovableHandle
        if self._forward_contexts:
            raise RuntimeError("A pipeline forward context is already registered; remove its handle before "
                               "registering another")
        handle = RemovableHandle(self._forward_contexts)
        self._forward_contexts[handle.id] = context_factory
        return handle

    def _run(self, module, args, kwargs):
        """module(*args, **kwargs), its exception wrapped as torch's stage wraps it (RuntimeError "[Stage i] failed
        to run forward: args: ..." from the module's own error: a port's `except RuntimeError` catches it), except
        the distributed runtime's errors, which name a peer and go on as they are."""
        try:
            return module(*args, **kwargs)
        except Exception as e:
            from .. import DistError
            if isinstance(e, DistError):
                raise

            def shown(v):
                return ("Tensor(shape=%s, dtype=%s)" % (list(v.shape), str(v.dtype).rsplit(".", 1)[-1])
                        if isinstance(v, _C.Tensor) else type(v).__name__)
            # (the cause's own text last: peers and the launcher report this message, not the chain)
            raise RuntimeError("[Stage %d] failed to run forward:\nargs: (%s)\nkwargs: {%s}\ncaused by %s: %s"
                               % (self.stage_index, ", ".join(shown(a) for a in args),
                                  ", ".join("%r: %s" % (k, shown(v)) for k, v in kwargs.items()),
                                  type(e).__name__, e)) from e

    def _forward(self, module, microbatch, probe, *args, **kwargs):
        if not self._forward_contexts:
            return self._run(module, args, kwargs)
        factory = next(iter(self._forward_contexts.values()))
        completed = False
        info = PipelineStageInfo(stage_index=self.stage_index, microbatch_index=microbatch,
                                 is_metadata_inference=probe)
        with factory(info):
            output = self._run(module, args, kwargs)
            completed = True
        if not completed:
            raise RuntimeError("A pipeline forward context suppressed an exception from the stage module; forward "
                               "contexts must not suppress exceptions")
        return output


class _StageCall(Module):
    """What the C++ stage calls: forward(*xs) = the stage module on xs (the batch on the first stage, the
    previous stage's output tensors elsewhere), on the first stage also this microbatch's further positional
    inputs (step(x, *more)), and this microbatch's keyword arguments (step(**kwargs)), split into microbatches
    as torch chunks them."""

    def __init__(self, stage, schedule):
        import weakref
        super().__init__()
        self.module = stage.submod
        # weak: the C++ stage keeps this module alive, and the schedule and the stage hold the C++ stage
        self._schedule, self._stage, self._stage_index = weakref.ref(schedule), weakref.ref(stage), stage.stage_index

    def forward(self, *xs):
        schedule = self._schedule()
        more, kwargs = schedule._inputs_for(self._stage_index)
        out = self._stage()._forward(self.module, schedule._current.get(self._stage_index, 0),
                                     schedule._probing.get(self._stage_index, False), *xs, *more, **kwargs)
        if not isinstance(out, (_C.Tensor, tuple, list)):
            raise PipeliningMetadataError("Stage args must be a tensor, tuple, or list of tensors, got %s."
                                          % type(out).__name__)
        # what loss_fn and step() give back: a tuple or list (a namedtuple too) as the module returned it
        self.output_type = None if isinstance(out, _C.Tensor) else type(out)
        return out


def _as_returned(output_type, tensors):
    """The last stage's tensors in the container its module returned them in (torch passes loss_fn the module's
    own output: `(out,)` stays a 1-tuple, a list a list)."""
    if output_type is None:
        return tensors[0] if len(tensors) == 1 else tuple(tensors)
    if hasattr(output_type, "_fields"):  # a namedtuple
        return output_type(*tensors)
    return output_type(tensors)


def _split_kwarg(value, n):
    """torch's default chunking of a keyword argument: a tensor along dim 0 as tensor_split (the sizes the
    batch gets), anything else whole to every microbatch."""
    if isinstance(value, _C.Tensor) and value.dim() > 0:
        from ..._extra import tensor_split
        return list(tensor_split(value, n, 0))
    return [value] * n


def _splits_dim0(spec):
    """Whether a chunk spec asks for what the schedules do: every tensor split along dim 0 (None: the
    default, or TensorChunkSpec(0) for each argument)."""
    from .microbatch import TensorChunkSpec
    from ...utils._pytree import tree_flatten
    if spec is None:
        return True
    leaves, _ = tree_flatten(spec, is_leaf=lambda s: isinstance(s, TensorChunkSpec))
    return all(s == TensorChunkSpec(0) for s in leaves)


# torch's schedules that refuse fewer microbatches than stages (its messages)
_AT_LEAST_ONE_PER_STAGE = {
    "1F1B": "Number of microbatches (%d) must be greater than or equal to the number of stages (%d).",
    "DualPipeV": "DualPipeV requires at least as many microbatches as stages, but got %d microbatches and %d stages.",
}


class _PipelineSchedule:
    _name = None            # pipelining's schedule name (schedules.h)
    _single_stage = False   # torch's PipelineScheduleSingle takes one stage, the Multi ones a list
    _max_active_stages = 3  # FSDP: stages whose parameters may be unsharded at once (lowering.h)

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True, **kwargs):
        cls = type(self).__name__
        if kwargs or not _splits_dim0(args_chunk_spec) or not _splits_dim0(kwargs_chunk_spec) \
                or output_merge_spec is not None:
            raise NotImplementedError("%s: chunk specs other than TensorChunkSpec(0) and %s are not supported "
                                      "(microbatches split dim 0)" % (cls, sorted(kwargs) or "output_merge_spec"))
        if self._single_stage:
            if not isinstance(stages, PipelineStage):
                raise TypeError("%s takes one PipelineStage (use a multi-stage schedule for a list)" % cls)
            stages = [stages]
        stages = list(stages)
        if not stages or not all(isinstance(s, PipelineStage) for s in stages):
            raise TypeError("%s: stages must be PipelineStages, got %r" % (cls, stages))
        self._stages, self._n_microbatches = stages, int(n_microbatches)
        if self._name in _AT_LEAST_ONE_PER_STAGE and self._n_microbatches < stages[0].num_stages:
            raise ValueError(_AT_LEAST_ONE_PER_STAGE[self._name] % (self._n_microbatches, stages[0].num_stages))
        self._loss_fn, self._scale_grads = loss_fn, bool(scale_grads)
        self._executor = None
        if self._name is not None:  # the named schedule; _PipelineScheduleRuntime waits for _load_csv
            group, n = stages[0]._group, stages[0].num_stages
            self._build(_C.generate_schedule(self._name, group.size, n, self._n_microbatches),
                        _C.stage_to_rank_map(self._name, group.size, n))

    @property
    def scale_grads(self):
        """torch's: whether a step's gradients are averaged over the microbatches (set after construction too)."""
        return self._scale_grads

    @scale_grads.setter
    def scale_grads(self, value):
        self._scale_grads = bool(value)
        if self._executor is not None:  # (the executor weighs each microbatch's loss by it, step by step)
            self._executor.set_scale_grads(self._scale_grads)

    @property
    def _has_backward(self):  # (torch's attribute: a step with a loss_fn runs the backward)
        return self._loss_fn is not None

    @property
    def _num_stages(self):
        return self._stages[0].num_stages

    @property
    def _stage(self):  # (torch's PipelineScheduleSingle attribute)
        return self._stages[0]

    def register_custom_function(self, computation_type, custom_function):
        """torch's _PipelineScheduleRuntime.register_custom_function (torchtitan registers its MoE overlap
        callback for DualPipeV's OVERLAP_F_B). tessel runs an OVERLAP_F_B pair's forward and backward itself, one
        after the other (the values the overlap callback computes), and does not call the function; other action
        types cannot be replaced here."""
        from .schedules import OVERLAP_F_B, _CUSTOMIZABLE
        if computation_type not in _CUSTOMIZABLE:
            raise ValueError("Invalid computation type %s. Only FORWARD, FULL_BACKWARD, BACKWARD_INPUT, "
                             "BACKWARD_WEIGHT, OVERLAP_F_B, UNSHARD, RESHARD, REDUCE_GRAD, and WAIT_REDUCE_GRAD are "
                             "supported." % (computation_type,))
        if computation_type != OVERLAP_F_B:
            raise NotImplementedError("%s.register_custom_function(%s): tessel runs its own %s actions; only "
                                      "OVERLAP_F_B takes a function (run as its forward then its backward)"
                                      % (type(self).__name__, computation_type.name, computation_type.name))
        import warnings
        warnings.warn("register_custom_function(OVERLAP_F_B): tessel runs each overlapped pair's forward and then "
                      "its backward itself (the same values); the registered function is not called", stacklevel=2)

    def _build(self, compute, where):
        """This rank's stages placed by `where` (stage -> rank) and the executor of `compute` (the
        compute-only program, one action list per rank) lowered with its sends, receives and FSDP actions."""
        stages = self._stages
        group, n = stages[0]._group, stages[0].num_stages
        self._mb_kwargs, self._mb_more_args, self._current, self._loss_kwargs = [], [], {}, {}
        self._loss_values = {}
        self._handshaken, self._probing = set(), {}  # stages whose shape handshake ran; this forward is one
        self._calls, self._keep_outputs, self._output_chunks = {}, False, {}
        for s in stages:
            last = s.stage_index == n - 1
            self._calls[s.stage_index] = _StageCall(s, self)
            # without a loss_fn (forward-only steps, as torch's) the last stage takes a loss that keeps its
            # outputs for step() and computes nothing
            loss = self._loss_fn if self._loss_fn is not None else \
                (lambda output, target: _C._full([], 0.0, _C.dtype.float32))
            s._c = _C._PipelineStage(self._calls[s.stage_index], s.stage_index, n, group,
                                     self._with_loss_kwargs(loss) if last else None, where)
            s._c.set_expected_shapes(*s._expected)
            if s.dw_builder is not None:
                s._c.set_dw_builder(s.dw_builder)
        # PP + FSDP (torchtitan's order: fully_shard each stage's blocks and the stage module, then the
        # schedule): the executor gathers each stage once per step (UNSHARD), keeps it gathered through its
        # microbatches, accumulates the gradients locally and reduces them once (REDUCE_GRAD), then turns the
        # stages' gradient sync and resharding back on (torch's stage does the same after its reduction).
        # DistributedDataParallel stages likewise accumulate and all-reduce once per step (torch's no_sync but
        # for the last backward), unless a communication hook reduces them. Stages of one rank may differ (one
        # under fully_shard, another under DDP or plain): each is driven by its own state, as each torch stage
        # checks its own module; UNSHARD / RESHARD do nothing for a stage without fully_shard.
        sharded = any(_fsdp_groups(s.submod) for s in stages)
        program = _C.lower_program(compute, where, self._n_microbatches, fsdp=sharded,
                                   max_active_stages=self._max_active_stages)
        # scale_grads=False (torchtitan's): each microbatch's loss backpropagated unscaled, gradients summed.
        self._executor = _C._PipelineExecutor([s._c for s in stages], program[group.rank], self._n_microbatches,
                                              self._scale_grads, self._before_forward,
                                              max_active_stages=self._max_active_stages)
        self.program, self.stage_to_rank = program, where
        self.pipeline_order = dict(enumerate(compute))  # torch's attribute: rank -> its compute actions

    def _require_program(self, what):
        if self._executor is None:  # _PipelineScheduleRuntime before _load_csv
            raise RuntimeError("%s.%s: load a schedule first (_load_csv)" % (type(self).__name__, what))

    def _with_loss_kwargs(self, loss_fn):
        def loss(outputs, target):  # the last stage module's tensors: one is passed as itself, several as a tuple
            mb = self._current.get(self._stages[0].num_stages - 1, 0)
            if self._keep_outputs:  # torch's output_chunks, merged by step()
                self._output_chunks[mb] = [o.detach() for o in outputs]
            output = self._as_last_returned(outputs)
            value = loss_fn(output, target, **self._loss_kwargs) if self._loss_kwargs else loss_fn(output, target)
            self._loss_values[mb] = value  # the `losses` entries: loss_fn's own tensors, as torch's
            return value
        return loss

    def _as_last_returned(self, tensors):
        """The last stage's tensors in the container its module returned (this rank holds the last stage)."""
        return _as_returned(self._calls[self._stages[0].num_stages - 1].output_type, tensors)

    def _run(self, run, return_outputs, losses):
        """Runs `run` (the executor's step or eval) and returns torch's value: the last stage's outputs merged
        along dim 0 over the microbatches (a tuple of them for a stage returning several tensors) on the rank
        that holds the last stage when return_outputs, else None; `losses` gets each microbatch's loss."""
        self._keep_outputs, self._output_chunks, self._loss_values = bool(return_outputs), {}, {}
        try:
            _, per_microbatch = run()
        finally:
            self._keep_outputs = False
        if losses is not None and any(s.is_last for s in self._stages):
            if self._loss_fn is None:  # torch's _update_losses: no loss computed, none to give
                raise RuntimeError("Expecting %d losses but got 0" % self._n_microbatches)
            losses.clear()  # torch's _update_losses: this step's microbatches only
            # loss_fn's tensors (their dtype, their graph); a microbatch whose targets are all ignored has none
            losses.extend(self._loss_values.get(mb, _C._full([], v, _C.dtype.float32))
                          for mb, v in enumerate(per_microbatch))
        self._loss_values = {}
        chunks, self._output_chunks = [self._output_chunks[mb] for mb in sorted(self._output_chunks)], {}
        if not return_outputs or not chunks:
            return None
        cat = _C._functional.cat
        merged = [cat([c[i] for c in chunks], 0) for i in range(len(chunks[0]))]
        return self._as_last_returned(merged)

    def _before_forward(self, stage, mb):
        # the executor calls this before each forward, the first time per stage before its shape handshake's
        self._current[stage] = mb
        self._probing[stage] = stage not in self._handshaken
        self._handshaken.add(stage)

    def _inputs_for(self, stage):
        """What `stage` takes besides x for the microbatch it runs: the first stage's positional inputs after
        the first (torch: a step's args go to the first stage only; later stages take the previous stage's
        output) and the keyword arguments (every stage)."""
        mb = self._current.get(stage, 0)
        more = self._mb_more_args[mb] if stage == 0 and self._mb_more_args else ()
        return more, (self._mb_kwargs[mb] if self._mb_kwargs else {})

    def _inputs(self, what, args, target, loss_kwargs, arg_mbs, kwarg_mbs, target_mbs, kwargs):
        """(the first stage's batch, the targets) with the microbatches' kwargs and loss_kwargs in place;
        pre-split inputs (arg_mbs / kwarg_mbs / target_mbs) are joined back along dim 0, which must give the
        same split again."""
        cls = "%s.%s" % (type(self).__name__, what)
        if arg_mbs is not None or target_mbs is not None or kwarg_mbs is not None:
            if args or kwargs or target is not None:
                raise ValueError("%s: pass either whole-batch inputs or pre-split ones (arg_mbs / kwarg_mbs / "
                                 "target_mbs), not both" % cls)
            args, target, more_per_mb = self._joined(cls, arg_mbs, target_mbs)
            kwargs_per_mb = [dict(k) for k in kwarg_mbs] if kwarg_mbs is not None else []
        else:
            kwargs_per_mb = ([{k: parts[i] for k, parts in ((k, _split_kwarg(v, self._n_microbatches))
                                                              for k, v in kwargs.items())}
                              for i in range(self._n_microbatches)] if kwargs else [])
            more = [_split_kwarg(a, self._n_microbatches) for a in args[1:]]
            more_per_mb = [tuple(parts[i] for parts in more) for i in range(self._n_microbatches)] if more else []
        if kwargs_per_mb and len(kwargs_per_mb) != self._n_microbatches:
            raise ValueError("%s: %d microbatches of kwargs for %d microbatches" % (cls, len(kwargs_per_mb),
                                                                                  self._n_microbatches))
        self._mb_kwargs, self._mb_more_args, self._current = kwargs_per_mb, more_per_mb, {}
        self._loss_kwargs = dict(loss_kwargs or {})
        return (args[0] if args else None), target

    def _joined(self, cls, arg_mbs, target_mbs):
        cat = _C._functional.cat
        args = ()
        if arg_mbs is not None:
            if len(arg_mbs) != self._n_microbatches:  # torch's ValueError
                raise ValueError("Expecting %d arg_mbs but got %d" % (self._n_microbatches, len(arg_mbs)))
            mbs = [tuple(mb) if isinstance(mb, (tuple, list)) else (mb,) for mb in arg_mbs]
            if len({len(mb) for mb in mbs}) > 1:
                raise ValueError("%s: every microbatch in arg_mbs needs the same number of inputs, got %s"
                                 % (cls, [len(mb) for mb in mbs]))
            firsts = [mb[0] for mb in mbs]
            args = (self._check_split(cls, cat(firsts, 0), firsts),)
            more_per_mb = [mb[1:] for mb in mbs] if mbs and len(mbs[0]) > 1 else []
        else:
            more_per_mb = []
        target = None
        if target_mbs is not None:
            if len(target_mbs) != self._n_microbatches:  # torch's ValueError
                raise ValueError("Expecting %d target_mbs but got %d" % (self._n_microbatches, len(target_mbs)))
            target = self._check_split(cls, cat(list(target_mbs), 0), list(target_mbs))
        return args, target, more_per_mb

    def _check_split(self, cls, whole, parts):
        from ..._extra import tensor_split
        want = [p.shape[0] for p in tensor_split(whole, self._n_microbatches, 0)]
        if [p.shape[0] for p in parts] != want:
            raise NotImplementedError("%s: pre-split microbatches of %s rows; tessel splits a batch of %d rows as "
                                      "tensor_split does (%s)" % (cls, [p.shape[0] for p in parts], whole.shape[0],
                                                                  want))
        return whole

    def step(self, *args, target=None, losses=None, return_outputs=True, loss_kwargs=None, arg_mbs=None,
             kwarg_mbs=None, target_mbs=None, finalize_gradients=True, **kwargs):
        """One step's forward and backward over the microbatches. Returns torch's value: on the rank holding the
        last stage the last stage's outputs merged along dim 0 (return_outputs=True; in the tuple or list the
        stage module returned them in), None elsewhere or with return_outputs=False. Keyword arguments
        reach every stage's forward, tensors split along dim 0 per microbatch; loss_kwargs reach loss_fn;
        arg_mbs / kwarg_mbs / target_mbs are torch's pre-split inputs. A `losses` list gets each microbatch's
        loss_fn value appended on the last stage's rank (0-d tensors, NaN for a microbatch whose targets are all
        ignored), as torch's. Optimizer steps stay the caller's. A rank that holds neither the first nor the
        last stage may call step() with no arguments, as in torch: it takes the last step's microbatch sizes,
        or at the first step microbatch 0's rows for every microbatch; a batch that does not split evenly into
        n_microbatches needs the batch there too at the first step (else a p2p mismatch)."""
        self._require_program("step")
        if self._loss_fn is None:  # torch: no loss, no backward; the step is the forward over the microbatches
            x, target = self._inputs("step", args, target, loss_kwargs, arg_mbs, kwarg_mbs, target_mbs, kwargs)
            return self._run(lambda: self._executor.eval_with_losses(x, target, targets_optional=True),
                             return_outputs, losses)
        if not _C.is_grad_enabled():  # before any communication, as torch: the group stays usable
            raise RuntimeError("step() requires gradients to be enabled for backward computation; it should not be "
                               "used under torch.no_grad() context. Please call eval() instead.")
        x, target = self._inputs("step", args, target, loss_kwargs, arg_mbs, kwarg_mbs, target_mbs, kwargs)
        for s in self._stages:
            s.has_backward = True
        # finalize_gradients=False (torch's gradient accumulation across steps): this step's REDUCE_GRAD actions
        # are skipped, so fully_shard stages keep accumulating unreduced gradients until a finalizing step
        out = self._run(lambda: self._executor.step_with_losses(x, target, bool(finalize_gradients)),
                        return_outputs, losses)
        if finalize_gradients:
            # A DistributedDataParallel stage with a communication hook: the stages' backwards ran in C++, so its
            # hook (queued by each microbatch's forward) reduces the accumulated gradients once, now, as torch's stage
            # syncs DDP on the last backward only.
            from ...nn.parallel import _run_pending
            _run_pending()
        return out

    def eval(self, *args, target=None, losses=None, arg_mbs=None, kwarg_mbs=None, target_mbs=None, **kwargs):
        """torch's forward-only step (validation: torchtitan's `schedule.eval(inputs, target=..., losses=...)`):
        the same microbatches and p2p as step() without any backward, under no_grad; nothing touches the
        gradients. Returns the merged outputs on the last stage's rank (as step()), and fills `losses` there with
        each microbatch's loss."""
        self._require_program("eval")
        x, target = self._inputs("eval", args, target, None, arg_mbs, kwarg_mbs, target_mbs, kwargs)
        # without a loss_fn the last stage needs no targets (the outputs are the answer), as torch's eval
        optional = self._loss_fn is None
        return self._run(lambda: self._executor.eval_with_losses(x, target, targets_optional=optional), True, losses)


def _fsdp_groups(module):
    """The fully_shard handles in a stage module's tree, the stage module's own (its root) last; [] when
    the stage is not under fully_shard."""
    root = _C._fsdp_state(module)
    if root is None:
        return []
    inner = [h for h in (_C._fsdp_state(m) for _, m in module.named_modules() if m is not module) if h is not None]
    return inner + [root]


class PipelineScheduleSingle(_PipelineSchedule):
    """torch's base of the schedules with one stage per rank (torchtitan asks issubclass to size its stages)."""


class PipelineScheduleMulti(_PipelineSchedule):
    """torch's base of the schedules with several stages per rank."""

    def _load_csv(self, filename, format="compute_only"):
        """torch's: replaces the schedule with the one in `filename` (torch's CSV: one row of compute actions
        such as 0F0, 1B0, 0I1, 0W1 per rank), checked (every stage runs every microbatch forward and backward
        in an order the ranks can run) and lowered with its sends, receives and FSDP actions; the stage ->
        rank placement is the one the CSV implies. Collective in effect: load the same file on every rank."""
        if format != "compute_only":
            raise NotImplementedError("%s._load_csv(format=%r): tessel loads compute-only schedules and adds the "
                                      "communication itself" % (type(self).__name__, format))
        with open(filename) as f:
            compute = _C.parse_csv(f.read())
        stages = self._stages
        group, n = stages[0]._group, stages[0].num_stages
        if len(compute) != group.size:
            raise ValueError("%s._load_csv: %s has %d rows for %d ranks" % (type(self).__name__, filename,
                                                                           len(compute), group.size))
        where = _C.verify_compute_program(compute, n, self._n_microbatches)
        self._build(compute, list(where))

    def _dump_csv(self, filename, format="compute_only"):  # noqa: A002 (torch's name)
        """torch's: writes the compute-only schedule (one row per rank) in the layout _load_csv reads; tessel adds
        the communication when it lowers a program, so it has no compute_comms form to write."""
        if format != "compute_only":
            raise NotImplementedError("%s._dump_csv(format=%r): tessel writes compute-only schedules (it adds the "
                                      "communication itself when it lowers one)" % (type(self).__name__, format))
        with open(filename, "w") as f:
            f.write(_C.dump_csv([self.pipeline_order[r] for r in sorted(self.pipeline_order)]))


class _PipelineScheduleRuntime(PipelineScheduleMulti):
    """torch's runtime for a schedule given as data: build it with the stages, then _load_csv a compute-only
    schedule (tessel adds the sends, receives and FSDP actions, as torch's lowering passes do).
    max_active_stages bounds the stages whose parameters FSDP keeps unsharded at once; torch's other
    runtime knobs are accepted at their defaults."""

    def _dump_csv(self, filename, format="compute_comms"):  # noqa: A002 (torch's runtime writes the lowered form)
        return super()._dump_csv(filename, format)

    def __init__(self, *args, **kwargs):
        self._max_active_stages = int(kwargs.pop("max_active_stages", 3))
        defaults = {"defer_pp_recv": False, "unshard_lookahead": "full", "defer_reduce_grad_wait": False,
                    "max_outstanding_sends": None}
        for key, default in defaults.items():
            value = kwargs.pop(key, default)
            if value != default:
                raise NotImplementedError("_PipelineScheduleRuntime(%s=%r): only the default (%r) is supported"
                                          % (key, value, default))
        super().__init__(*args, **kwargs)


def _schedule(name, torch_name, single):
    doc = "torch's %s (pipelining's %s)" % (torch_name, name)
    return type(torch_name, (PipelineScheduleSingle if single else PipelineScheduleMulti,),
                {"_name": name, "_single_stage": single, "__doc__": doc})


class _ScheduleForwardOnly(PipelineScheduleSingle):
    """torch's forward-only schedule: step() runs every microbatch's forward through the stages (GPipe's order)
    and nothing else; a loss_fn is not called, and a target or a losses list is refused as torch refuses it."""
    _name = "GPipe"
    _single_stage = True

    def __init__(self, stage, n_microbatches, loss_fn=None, **kwargs):
        super().__init__(stage, n_microbatches, None, **kwargs)

    def step(self, *args, target=None, losses=None, **kwargs):
        if target is not None or losses is not None:
            raise RuntimeError("Forward-only schedule does not support loss computation")
        return super().step(*args, **kwargs)


ScheduleGPipe = _schedule("GPipe", "ScheduleGPipe", True)
Schedule1F1B = _schedule("1F1B", "Schedule1F1B", True)
ScheduleInterleaved1F1B = _schedule("Interleaved1F1B", "ScheduleInterleaved1F1B", False)
ScheduleLoopedBFS = _schedule("LoopedBFS", "ScheduleLoopedBFS", False)
ScheduleInterleavedZeroBubble = _schedule("InterleavedZeroBubble", "ScheduleInterleavedZeroBubble", False)
ScheduleZBVZeroBubble = _schedule("ZBVZeroBubble", "ScheduleZBVZeroBubble", False)
ScheduleDualPipeV = _schedule("DualPipeV", "ScheduleDualPipeV", False)


# torch's names (get_schedule_class looks them up case-insensitively): the schedules and the two bases
_SCHEDULES = dict({c._name: c for c in (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS,
                                        ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV)},
                  PipelineScheduleSingle=PipelineScheduleSingle, PipelineScheduleMulti=PipelineScheduleMulti)


def get_schedule_class(schedule_name):
    """torch's get_schedule_class: "1F1B", "GPipe", "Interleaved1F1B", ... and the bases "PipelineScheduleSingle",
    "PipelineScheduleMulti" (case-insensitive) -> class."""
    cls = {name.lower(): c for name, c in _SCHEDULES.items()}.get(str(schedule_name).lower())
    if cls is None:
        raise ValueError("Unknown schedule name '%s'. The valid options are %s" % (schedule_name, sorted(_SCHEDULES)))
    return cls


def pipeline_gpt(config, *, seed=0, schedule="1F1B", n_microbatches=1, stages_per_rank=0, group=None):
    """This rank's part of the C++ GPT(config, seed) split into stages under ``schedule`` (a pipelining
    name: "1F1B", "GPipe", "Interleaved1F1B", "ZBVZeroBubble", ...). Returns a RankPipeline:
    ``step(idx, targets)`` (the loss on the last stage's rank), ``named_parameters()`` for the optimizer."""
    group = group if group is not None else _default_group("pipeline_gpt")
    return _C.pipeline_gpt(config, seed, group, schedule, int(n_microbatches), int(stages_per_rank))


from ._liveness import PipelineActivationLiveness, analyze_pipeline_activation_liveness  # noqa: E402
from . import microbatch, schedules, stage  # noqa: E402,F401 (torch's submodules)

from ._frontend import Pipe, SplitPoint, build_stage, pipe_split, pipeline  # noqa: E402,F401 (torch's tracer names)
