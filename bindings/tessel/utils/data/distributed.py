"""tessel.utils.data.distributed: torch.utils.data.distributed's DistributedSampler (the same class as
tessel.utils.data.DistributedSampler)."""
from . import DistributedSampler  # noqa: F401
