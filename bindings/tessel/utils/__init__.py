"""tessel.utils: torch.utils's data loading (tessel.utils.data) and activation checkpointing
(tessel.utils.checkpoint), and torch.utils._pytree's tree functions (tessel.utils._pytree)."""
from . import _pytree, checkpoint, data  # noqa: F401
