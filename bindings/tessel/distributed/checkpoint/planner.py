"""tessel.distributed.checkpoint.planner: torch's planner base classes. tessel's plan is fixed (see
DefaultSavePlanner / DefaultLoadPlanner, which derive from these): save and load accept those two and their
subclasses that keep their behavior; a planner of another class raises NotImplementedError."""


class SavePlanner:
    """torch's SavePlanner: the base of DefaultSavePlanner."""


class LoadPlanner:
    """torch's LoadPlanner: the base of DefaultLoadPlanner."""
