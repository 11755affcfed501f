"""tessel.distributed.pipelining.stage: torch's module of PipelineStage and PipelineStageInfo (the package's)."""
from . import PipelineStage, PipelineStageInfo  # noqa: F401
