"""tessel.distributed.tensor.parallel.style: torch's module of the parallel styles."""
from . import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput,  # noqa: F401
               PrepareModuleOutput, RowwiseParallel, SequenceParallel)
