"""tessel/nn/modules.py's flattening of a forward's output to its tensors (nested tuples, lists, dicts) and back
(moved out of modules.py to keep it under 1,000 lines)."""
import copy

from .. import _C

Tensor = _C.Tensor


def _flatten_output(out, tensors):
    """Appends out's tensors (nested in tuples, lists, dicts) to `tensors` and returns the function that
    rebuilds out around a list of replacements for them."""
    if isinstance(out, Tensor):
        i = len(tensors)
        tensors.append(out)
        return lambda ts: ts[i]
    if isinstance(out, (tuple, list)):
        parts = [_flatten_output(o, tensors) for o in out]
        if isinstance(out, tuple) and hasattr(out, "_fields"):  # namedtuple
            return lambda ts: type(out)(*(p(ts) for p in parts))
        return lambda ts: type(out)(p(ts) for p in parts)
    if isinstance(out, dict):
        parts = [(k, _flatten_output(v, tensors)) for k, v in out.items()]

        def rebuild(ts):
            new = copy.copy(out)  # the mapping's own type (OrderedDict, defaultdict, ...)
            for k, p in parts:
                new[k] = p(ts)
            return new
        return rebuild
    return lambda ts: out
