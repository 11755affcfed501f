"""torch.distributed.checkpoint._nested_dict: DCP's flattening of a nested state dict into dotted keys and back
(the planners' `mappings`; planner subclasses written for torch import flatten_state_dict from here)."""
from ._traverse import OBJ_PATH, set_element, traverse_state_dict  # noqa: F401

FLATTEN_MAPPING = dict

__all__ = ["flatten_state_dict", "unflatten_state_dict", "FLATTEN_MAPPING", "OBJ_PATH", "set_element"]


def flatten_state_dict(state_dict):
    """({dotted key: value}, {dotted key: its object path}); ValueError when two leaves join to one key."""
    flattened, mappings = {}, {}

    def flat_copy(path, value):
        key = ".".join(map(str, path))
        if key in flattened:
            raise ValueError(f"duplicated flatten key {key}")
        flattened[key] = value
        mappings[key] = path

    traverse_state_dict(state_dict, flat_copy)
    return flattened, mappings


def unflatten_state_dict(state_dict, mapping):
    """The nested state dict `mapping` describes, holding state_dict's values."""
    nested = {}
    for key, value in state_dict.items():
        set_element(nested, mapping[key], value)
    return nested
