"""tessel.distributed.nn: torch.distributed.nn's differentiable collectives (.functional)."""
from . import functional  # noqa: F401
