"""torch.distributed.checkpoint.state_dict_loader: load (the package's own)."""
from . import load  # noqa: F401
