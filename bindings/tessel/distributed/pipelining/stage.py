"""tessel.distributed.pipelining.stage: torch's module of PipelineStage (the same class as the package's)."""
from . import PipelineStage  # noqa: F401
