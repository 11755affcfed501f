"""tessel.utils: torch.utils's data loading (tessel.utils.data)."""
from . import data  # noqa: F401
