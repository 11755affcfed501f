"""tessel.distributed.checkpoint.default_planner: torch's module of the default planners."""
from . import DefaultLoadPlanner, DefaultSavePlanner  # noqa: F401
