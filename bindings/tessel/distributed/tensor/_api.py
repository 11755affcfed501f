"""torch.distributed.tensor._api: the module torch defines DTensor, distribute_tensor and distribute_module in
(imported by that path in some libraries); tessel's are the package's own."""
from . import DTensor, distribute_module, distribute_tensor  # noqa: F401

__all__ = ["DTensor", "distribute_tensor", "distribute_module"]
