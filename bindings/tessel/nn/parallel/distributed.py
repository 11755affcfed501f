"""tessel.nn.parallel.distributed: torch's module path of DistributedDataParallel (``from torch.nn.parallel.distributed
import DistributedDataParallel``); the same class as tessel.nn.parallel's."""
from . import DistributedDataParallel  # noqa: F401
