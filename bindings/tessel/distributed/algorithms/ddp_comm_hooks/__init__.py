"""tessel.distributed.algorithms.ddp_comm_hooks: torch's DDP communication hooks (default_hooks)."""
from . import default_hooks  # noqa: F401
