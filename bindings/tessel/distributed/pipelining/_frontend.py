"""torch.distributed.pipelining's tracer front end, as far as an eager library can have it: SplitPoint and
pipe_split() (in torch, a marker op in forward that does nothing when run eagerly: the same here, so a model
written with split points still runs), and pipeline() / Pipe / build_stage, which split a model by tracing it
into a graph (torch.export). tessel records no graphs, so these raise NotImplementedError saying so; the manual
path of the same tutorial (build each stage's module, wrap it in PipelineStage, run a schedule) is tessel's.
The names exist so that torch's imports (`from torch.distributed.pipelining import pipeline, SplitPoint,
PipelineStage, ScheduleGPipe`) work for scripts that take the manual path."""
import enum


class SplitPoint(enum.Enum):
    """Where pipeline() splits around a submodule: before it or after it."""
    BEGINNING = 1
    END = 2


def pipe_split():
    """A split marker for pipeline()'s tracer; running it eagerly does nothing, as torch's."""


_NO_TRACER = ("%s: splitting a model by tracing it (torch.export) is not available in tessel, which records no "
              "graphs; build each stage's module by hand and wrap it in PipelineStage (torch's manual path), or use "
              "pipeline_gpt for tessel's GPT")


def pipeline(module, mb_args, mb_kwargs=None, split_spec=None, split_policy=None):
    raise NotImplementedError(_NO_TRACER % "pipeline")


def build_stage(stage_module, stage_index, pipe_info, device, group=None):
    raise NotImplementedError(_NO_TRACER % "build_stage")


class Pipe:
    """What torch's pipeline() returns; tessel's pipeline() does not run (see the module's doc)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_NO_TRACER % "Pipe")
