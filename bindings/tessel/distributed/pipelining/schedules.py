"""tessel.distributed.pipelining.schedules: torch's module of the schedule classes (torchtitan imports them from
here): the same classes as tessel.distributed.pipelining's, under torch's bases PipelineScheduleSingle (one stage
per rank) and PipelineScheduleMulti (several)."""
from . import (PipelineScheduleMulti, PipelineScheduleSingle, Schedule1F1B, ScheduleDualPipeV,  # noqa: F401
               ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleLoopedBFS,
               ScheduleZBVZeroBubble, _PipelineSchedule, _PipelineScheduleRuntime, _ScheduleForwardOnly,
               analyze_pipeline_activation_liveness, PipelineActivationLiveness, get_schedule_class)
