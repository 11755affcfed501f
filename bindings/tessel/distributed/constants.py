"""tessel.distributed.constants: torch.distributed.constants' timeouts (``from torch.distributed.constants import
default_pg_timeout``). tessel's default group timeout is 300 s (torch's is 30 minutes): a peer that is gone is
reported at once, and a group's timeout bounds only a live peer's silence."""
from ._c10d_extras import default_pg_timeout

default_pg_nccl_timeout = default_pg_timeout  # one timeout for every backend tessel's Python face runs

__all__ = ["default_pg_timeout", "default_pg_nccl_timeout"]
