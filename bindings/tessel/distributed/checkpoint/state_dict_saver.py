"""torch.distributed.checkpoint.state_dict_saver: save and async_save (the package's own)."""
from . import async_save, save  # noqa: F401
