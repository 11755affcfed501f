"""tessel.distributed.pipelining.schedules: torch's module of the schedule classes (torchtitan imports them from
here): the same classes as tessel.distributed.pipelining's, under torch's bases PipelineScheduleSingle (one stage
per rank) and PipelineScheduleMulti (several); torch's action vocabulary (_ComputationType and its members,
_Action, _PipelineContext, _wait_batch_p2p), which torchtitan imports at module level."""
import enum as _enum
from typing import NamedTuple as _NamedTuple
from . import (PipelineScheduleMulti, PipelineScheduleSingle, Schedule1F1B, ScheduleDualPipeV,  # noqa: F401
               ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleLoopedBFS,
               ScheduleZBVZeroBubble, _PipelineSchedule, _PipelineScheduleRuntime, _ScheduleForwardOnly,
               analyze_pipeline_activation_liveness, PipelineActivationLiveness, get_schedule_class)


class _ComputationType(str, _enum.Enum):
    """torch's action types of a pipeline program (a CSV cell's suffix: 0F1 is stage 0's forward of microbatch 1)."""
    FORWARD = "F"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    WAIT_SEND_F = "WAIT_SEND_F"
    WAIT_SEND_B = "WAIT_SEND_B"
    FULL_BACKWARD = "B"
    OVERLAP_F_B = "OVERLAP_F_B"
    REDUCE_GRAD = "REDUCE_GRAD"
    WAIT_REDUCE_GRAD = "WAIT_REDUCE_GRAD"

    @staticmethod
    def from_str(action):
        try:
            return _ComputationType(action)
        except ValueError as exc:
            raise RuntimeError("Invalid computation type %s" % action) from exc


# torch's module names for the members
FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = _ComputationType.FORWARD, _ComputationType.BACKWARD_INPUT, \
    _ComputationType.BACKWARD_WEIGHT
UNSHARD, RESHARD, REDUCE_GRAD = _ComputationType.UNSHARD, _ComputationType.RESHARD, _ComputationType.REDUCE_GRAD
SEND_F, RECV_F, SEND_B, RECV_B = _ComputationType.SEND_F, _ComputationType.RECV_F, _ComputationType.SEND_B, \
    _ComputationType.RECV_B
WAIT_SEND_F, WAIT_SEND_B = _ComputationType.WAIT_SEND_F, _ComputationType.WAIT_SEND_B
FULL_BACKWARD, OVERLAP_F_B = _ComputationType.FULL_BACKWARD, _ComputationType.OVERLAP_F_B
WAIT_REDUCE_GRAD = _ComputationType.WAIT_REDUCE_GRAD
_CUSTOMIZABLE = (FORWARD, FULL_BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, OVERLAP_F_B, UNSHARD, RESHARD, REDUCE_GRAD,
                 WAIT_REDUCE_GRAD)


class _Action(_NamedTuple):
    """torch's program action: stage, type, microbatch, and an OVERLAP_F_B's sub-actions."""
    stage_index: int
    computation_type: _ComputationType
    microbatch_index: object = None
    sub_actions: object = None

    def __repr__(self):
        if self.sub_actions is not None:
            return "(%s)%s" % (";".join(repr(a) for a in self.sub_actions), self.computation_type.value)
        mb = "" if self.microbatch_index is None else str(self.microbatch_index)
        return "%d%s%s" % (self.stage_index, self.computation_type.value, mb)

    __str__ = __repr__


class _PipelineContext:
    """torch's context given to a custom function (schedule_ref and the step's microbatches)."""

    def __init__(self, schedule_ref, arg_mbs=None, kwarg_mbs=None, target_mbs=None, losses=None):
        self.schedule_ref, self.arg_mbs, self.kwarg_mbs = schedule_ref, arg_mbs, kwarg_mbs
        self.target_mbs, self.losses = target_mbs, losses


def _wait_batch_p2p(work):
    """torch's: waits for every Work of a batch of p2p operations."""
    for w in work:
        w.wait()
