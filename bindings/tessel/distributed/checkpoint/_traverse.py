"""torch.distributed.checkpoint._traverse: walking a nested state dict by object paths (tuples of keys: a str per
dict level, an int per list index), as DCP's flattening and planners use them (planner subclasses written for
torch import set_element / get_element from here)."""
from collections.abc import Mapping

from ... import _C

OBJ_PATH = tuple
STATE_DICT_ITEM = object
CONTAINER_TYPE = object


def _keep_visiting_tensors(value):
    return isinstance(value, _C.Tensor)


def traverse_state_dict(state_dict, visitor, keep_traversing=_keep_visiting_tensors):
    """visitor(path, value) for each leaf: a mapping is always entered, a list only when it holds a tensor or
    an entered container (a list of numbers is one value), as torch's."""

    def is_terminal(value):
        if isinstance(value, Mapping):
            return False
        if not isinstance(value, list):
            return True
        for entry in value:
            if isinstance(entry, (Mapping, list)) and not is_terminal(entry):
                return False
            if keep_traversing is not None and keep_traversing(entry):
                return False
        return True

    def visit(path, value):
        if isinstance(value, Mapping):
            for k, v in value.items():
                visit(path + (str(k),), v)
        elif is_terminal(value):
            visitor(path, value)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                visit(path + (i,), v)

    for key, value in state_dict.items():
        visit((str(key),), value)


def set_element(root_dict, path, value):
    """Sets value at `path` in root_dict, making the dicts (a str key next) and lists (an int key next) on the
    way; a list grows with None up to the index."""
    container = root_dict

    def extend(lst, idx):
        while len(lst) <= idx:
            lst.append(None)

    for prev_key, key in zip(path[:-1], path[1:]):
        default = {} if type(key) is str else []
        if isinstance(container, Mapping):
            container = container.setdefault(prev_key, default)
        else:
            extend(container, prev_key)
            if container[prev_key] is None:
                container[prev_key] = default
            container = container[prev_key]
    if type(path[-1]) is int:
        extend(container, path[-1])
    container[path[-1]] = value


def get_element(root_dict, path, default_value=None):
    """The value at `path` in root_dict, or default_value where the path leads nowhere."""
    value = root_dict
    for part in path:
        if type(part) is int:
            if not isinstance(value, list) or len(value) < part:
                return default_value
        elif not isinstance(value, Mapping) or part not in value:
            return default_value
        value = value[part]
    return value
