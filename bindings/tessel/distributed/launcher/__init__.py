"""tessel.distributed.launcher: torch.distributed.launcher's programmatic launch (api.py)."""
from .api import LaunchConfig, elastic_launch, launch_agent  # noqa: F401
