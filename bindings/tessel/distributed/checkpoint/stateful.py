"""torch.distributed.checkpoint.stateful: the Stateful protocol dcp.save / dcp.load recognize (an object with
state_dict() and load_state_dict(state_dict))."""
from typing import Any, Dict, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> Dict[str, Any]:
        ...

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        ...
