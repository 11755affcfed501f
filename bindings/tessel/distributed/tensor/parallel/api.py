"""tessel.distributed.tensor.parallel.api: torch's module of parallelize_module."""
from . import parallelize_module  # noqa: F401

__all__ = ["parallelize_module"]
