"""tessel.utils: torch.utils's data loading (tessel.utils.data) and activation checkpointing
(tessel.utils.checkpoint)."""
from . import checkpoint, data  # noqa: F401
