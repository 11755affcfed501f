"""tessel.distributed.tensor.parallel.loss: torch's module of loss_parallel."""
from . import loss_parallel  # noqa: F401

__all__ = ["loss_parallel"]
