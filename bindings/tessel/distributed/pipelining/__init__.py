"""tessel.distributed.pipelining: torch's pipelining names over pipelining/ (pipelining/README.md).

Runtime: ``PipelineStage(submodule, stage_index, num_stages, device)`` over any module (a Python-defined
``tessel.nn.Module`` is an ``nn::Module``, so it can be a stage) and the schedules by torch's class names:
``ScheduleGPipe`` / ``Schedule1F1B`` (one stage per rank), ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV`` (a list of stages per
rank). ``step(x)`` on the first stage's rank, ``step(target=y)`` on the last, ``step()`` elsewhere; the
batch splits into ``n_microbatches`` along dim 0 and the gradients are the full batch's (torch's
``scale_grads=True``). Differences from torch: ``loss_fn`` takes (output, target) and must return the
microbatch's mean loss; ``step`` returns the full-batch loss on the last stage's rank (None elsewhere)
rather than the merged output, and per-microbatch ``losses`` are not reported.

Schedule IR (pure, no ranks): ``generate_schedule``, ``stage_to_rank_map``, ``lower_program``, the
verifier, ``parse_action`` / ``format_rank_program`` / CSV, ``simulate`` (makespan, bubble, peak in-flight
activations) and ``timeline_svg``. ``pipeline_gpt`` builds one rank's part of the C++ GPT pipeline.

    stage = PipelineStage(part, rank, 2, "cpu")
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=lambda out, y: F.mse_loss(out, y))
    loss = schedule.step(x) if rank == 0 else schedule.step(target=y)
"""
from ... import _C
from .. import _default_group

__all__ = ["PipelineStage", "PipelineScheduleSingle", "PipelineScheduleMulti", "ScheduleGPipe", "Schedule1F1B",
           "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
           "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV", "get_schedule_class",
           "pipeline_gpt",
           "generate_schedule", "stage_to_rank_map", "lower_program", "verify_compute_program",
           "verify_lowered_program", "parse_action", "parse_rank_program", "format_rank_program",
           "format_program", "dump_csv", "parse_csv", "simulate", "simulate_lockstep", "timeline_svg",
           "schedule_names"]

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


class PipelineStage:
    """One stage module on this rank (torch.distributed.pipelining.PipelineStage). Shapes are inferred
    from the first step's microbatch 0 (input_args / output_args are not needed and not accepted)."""

    def __init__(self, submodule, stage_index, num_stages, device=None, input_args=None, output_args=None,
                 group=None, dw_builder=None):
        if device not in (None, "cpu") and str(device) != "cpu":
            raise NotImplementedError("PipelineStage: device '%s' is not available from Python (use 'cpu')" % device)
        if input_args is not None or output_args is not None or dw_builder is not None:
            raise NotImplementedError("PipelineStage: input_args, output_args and dw_builder are not supported "
                                      "(tessel infers shapes from the first step and splits backward itself)")
        self.submod = submodule
        self.stage_index, self.num_stages = int(stage_index), int(num_stages)
        self.group = group if group is not None else _default_group("PipelineStage")
        self.is_first, self.is_last = self.stage_index == 0, self.stage_index == self.num_stages - 1
        self._c = None  # built by the schedule, which knows the loss and the stage placement


class _PipelineSchedule:
    _name = None            # pipelining's schedule name (schedules.h)
    _single_stage = False   # torch's PipelineScheduleSingle takes one stage, the Multi ones a list

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True, **kwargs):
        cls = type(self).__name__
        if kwargs or args_chunk_spec is not None or kwargs_chunk_spec is not None or output_merge_spec is not None:
            raise NotImplementedError("%s: chunk specs and %s are not supported (microbatches split dim 0)"
                                      % (cls, sorted(kwargs) or "output_merge_spec"))
        if self._single_stage:
            if not isinstance(stages, PipelineStage):
                raise TypeError("%s takes one PipelineStage (use a multi-stage schedule for a list)" % cls)
            stages = [stages]
        stages = list(stages)
        if not stages or not all(isinstance(s, PipelineStage) for s in stages):
            raise TypeError("%s: stages must be PipelineStages, got %r" % (cls, stages))
        group, n = stages[0].group, stages[0].num_stages
        where = _C.stage_to_rank_map(self._name, group.size, n)
        for s in stages:
            last = s.stage_index == n - 1
            s._c = _C._PipelineStage(s.submod, s.stage_index, n, group, loss_fn if last else None, where)
        # PP + FSDP (torchtitan's order: fully_shard each stage's blocks and the stage module, then the
        # schedule): the schedule gathers each stage once per step (UNSHARD), keeps it gathered through its
        # microbatches, accumulates the gradients locally and reduces them once (REDUCE_GRAD).
        groups = [_fsdp_groups(s.submod) for s in stages]
        sharded = any(groups)
        if sharded:
            for s, g in zip(stages, groups):
                if not g:
                    raise ValueError("%s: stage %d is not under fully_shard while another stage of this rank is"
                                     % (cls, s.stage_index))
                root = g[-1]
                root.set_reshard_after_forward(False)
                root.set_reshard_after_backward(False)
                root.set_requires_gradient_sync(False)
        program = _C.lower_program(_C.generate_schedule(self._name, group.size, n, int(n_microbatches)), where,
                                   int(n_microbatches), fsdp=sharded)
        self._stages, self._n_microbatches = stages, int(n_microbatches)
        # scale_grads=False (torchtitan's): each microbatch's loss backpropagated unscaled, gradients summed.
        self._executor = _C._PipelineExecutor([s._c for s in stages], program[group.rank], int(n_microbatches),
                                              groups if sharded else [], bool(scale_grads))
        self.program, self.stage_to_rank = program, where

    def step(self, *args, target=None, losses=None, **kwargs):
        """One step's forward and backward over the microbatches; the full-batch loss on the last stage's
        rank, None elsewhere; a `losses` list gets each microbatch's loss_fn value appended there (0-d
        tensors, NaN for a microbatch whose targets are all ignored), as torch's. Optimizer steps stay the caller's. A rank that holds neither the first nor
        the last stage may call step() with no arguments, as in torch: it takes the last step's microbatch
        sizes, or at the first step microbatch 0's rows for every microbatch; a batch that does not split
        evenly into n_microbatches needs the batch there too at the first step (else a p2p mismatch)."""
        if len(args) > 1 or kwargs:
            raise NotImplementedError("%s.step: the first stage takes one tensor input" % type(self).__name__)
        if losses is None:
            return self._executor.step(args[0] if args else None, target)
        # torch appends each microbatch's loss_fn output on the last stage's rank (torchtitan averages them).
        loss, per_microbatch = self._executor.step_with_losses(args[0] if args else None, target)
        losses.clear()  # torch's _update_losses: this step's microbatches only
        losses.extend(_C._full([], v, _C.dtype.float32) for v in per_microbatch)
        return loss

    def eval(self, *args, target=None, losses=None, **kwargs):
        """torch's forward-only step (validation: torchtitan's `schedule.eval(inputs, target=..., losses=...)`):
        the same microbatches and p2p as step() without any backward, under no_grad; nothing touches the
        gradients. Returns the full-batch loss on the last stage's rank (as step() here; torch returns the
        merged output), and fills `losses` there with each microbatch's loss."""
        if len(args) > 1 or kwargs:
            raise NotImplementedError("%s.eval: the first stage takes one tensor input" % type(self).__name__)
        loss, per_microbatch = self._executor.eval_with_losses(args[0] if args else None, target)
        if losses is not None:
            losses.clear()
            losses.extend(_C._full([], v, _C.dtype.float32) for v in per_microbatch)
        return loss


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


def _schedule(name, torch_name, single):
    doc = "torch's %s (pipelining's %s)" % (torch_name, name)
    return type(torch_name, (PipelineScheduleSingle if single else PipelineScheduleMulti,),
                {"_name": name, "_single_stage": single, "__doc__": doc})


ScheduleGPipe = _schedule("GPipe", "ScheduleGPipe", True)
Schedule1F1B = _schedule("1F1B", "Schedule1F1B", True)
ScheduleInterleaved1F1B = _schedule("Interleaved1F1B", "ScheduleInterleaved1F1B", False)
ScheduleLoopedBFS = _schedule("LoopedBFS", "ScheduleLoopedBFS", False)
ScheduleInterleavedZeroBubble = _schedule("InterleavedZeroBubble", "ScheduleInterleavedZeroBubble", False)
ScheduleZBVZeroBubble = _schedule("ZBVZeroBubble", "ScheduleZBVZeroBubble", False)
ScheduleDualPipeV = _schedule("DualPipeV", "ScheduleDualPipeV", False)


_SCHEDULES = {c._name.lower(): c for c in (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS,
                                           ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV)}


def get_schedule_class(schedule_name):
    """torch's get_schedule_class: "1F1B", "GPipe", "Interleaved1F1B", ... (case-insensitive) -> class."""
    cls = _SCHEDULES.get(str(schedule_name).lower())
    if cls is None:
        raise ValueError("Unknown schedule name '%s'. The valid options are %s"
                         % (schedule_name, sorted(c._name for c in _SCHEDULES.values())))
    return cls


def pipeline_gpt(config, *, seed=0, schedule="1F1B", n_microbatches=1, stages_per_rank=0, group=None):
    """This rank's part of the C++ GPT(config, seed) split into stages under ``schedule`` (a pipelining
    name: "1F1B", "GPipe", "Interleaved1F1B", "ZBVZeroBubble", ...). Returns a RankPipeline:
    ``step(idx, targets)`` (the loss on the last stage's rank), ``named_parameters()`` for the optimizer."""
    group = group if group is not None else _default_group("pipeline_gpt")
    return _C.pipeline_gpt(config, seed, group, schedule, int(n_microbatches), int(stages_per_rank))
