"""tessel.optim's state mappings (split from optim/__init__.py by concept): _ParamState, torch's
`optimizer.state` (a dict keyed by parameter identity), its live form for the built-in optimizers (_LiveState,
_LiveEntry: each entry read from and written through to the group's C++ optimizer, per parameter), and how a
loaded state value meets its parameter (_loaded_value: the parameter's dtype and placements).
"""
import collections
import collections.abc

from .. import _C


class _ParamState(collections.abc.MutableMapping, collections.defaultdict):
    """torch's Optimizer.state: a defaultdict(dict) keyed by parameter, here by the tensor's identity (hash), so
    a lookup never compares two tensors elementwise. It is a defaultdict (isinstance(state, dict), as torch's:
    helpers that walk dicts, such as moving optimizer state to a device, reach it), but its entries live in
    _entries: the Mapping methods come first in its MRO, and the dict methods that would read the (empty) dict
    storage underneath are defined here."""

    def __init__(self):
        collections.defaultdict.__init__(self, dict)
        self._entries = {}  # hash(p) -> (p, its state dict)

    def __getitem__(self, p):
        key = hash(p)
        if key not in self._entries:
            self._entries[key] = (p, {})
        return self._entries[key][1]

    def __setitem__(self, p, value):
        self._entries[hash(p)] = (p, value)

    def __delitem__(self, p):
        del self._entries[hash(p)]

    def __contains__(self, p):
        return hash(p) in self._entries

    def get(self, p, default=None):
        return self._entries[hash(p)][1] if hash(p) in self._entries else default

    def __iter__(self):
        return iter([p for p, _ in self._entries.values()])

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return "defaultdict(%r, {%s})" % (dict, ", ".join("%r: %r" % kv for kv in self.items()))

    def __reversed__(self):
        return reversed(list(self))

    def copy(self):
        new = _ParamState()
        new.update(self.items())
        return new

    __copy__ = copy

    def __or__(self, other):
        new = self.copy()
        new.update(other)
        return new

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce__(self):  # (pickle: the entries, not the dict storage underneath)
        return (_rebuilt_state, (list(self.items()),))

    def __deepcopy__(self, memo):
        """Keyed by the copies' identities (the entries' keys are the originals' hashes)."""
        import copy
        new = type(self).__new__(type(self))
        collections.defaultdict.__init__(new, dict)
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "_entries"}, memo))
        new._entries = {}
        for p, value in self._entries.values():
            p2, value2 = copy.deepcopy((p, value), memo)
            new._entries[hash(p2)] = (p2, value2)
        return new


def _rebuilt_state(items):
    state = _ParamState()
    state.update(items)
    return state


class _LiveState(_ParamState):
    """A built-in optimizer's `state` (one object per optimizer, as torch's dict): a parameter's entry is read
    from its group's C++ optimizer on every access (into the same entry object, whose values alias the live
    buffers), and a write (an entry set or deleted, a buffer set in one) replaces that parameter's state alone,
    as torch's dict does: no whole state dict goes back and forth, so a loop over every parameter's entry
    costs one parameter's work each. Keys that are not this optimizer's parameters are plain entries."""

    def __init__(self, optimizer):
        super().__init__()
        self._optimizer = optimizer

    def _lookup(self, p):
        """p's entry, or None while it has none (torch's dict holds no key for it then)."""
        key = hash(p)
        cached = self._entries.get(key)
        fresh = self._optimizer._param_entry(p)
        if fresh is None or (not fresh and cached is None):  # not a parameter here / no state and never asked for
            return cached[1] if cached else None
        if cached is None:
            cached = self._entries[key] = (p, _LiveEntry(self, p, {}))
        dict.clear(cached[1])
        dict.update(cached[1], fresh)
        return cached[1]

    def __getitem__(self, p):
        entry = self._lookup(p)
        if entry is None:  # (defaultdict(dict): an entry to fill, written through like the others)
            entry = _LiveEntry(self, p, {})
            self._entries[hash(p)] = (p, entry)
        return entry

    def __contains__(self, p):
        return self._lookup(p) is not None

    def get(self, p, default=None):
        entry = self._lookup(p)
        return default if entry is None else entry

    def __iter__(self):
        params = self._optimizer._params_in_order()
        ours = {hash(p) for p in params}
        return iter([p for p in params if self._lookup(p) is not None] +
                    [p for p, _ in self._entries.values() if hash(p) not in ours])

    def __len__(self):
        return len(list(iter(self)))

    def __setitem__(self, p, value):
        entry = _LiveEntry(self, p, value)
        self._entries[hash(p)] = (p, entry)
        self._written(p, entry)

    def __delitem__(self, p):
        if self._lookup(p) is None:
            raise KeyError(p)
        del self._entries[hash(p)]
        self._optimizer._write_entry(p, None)

    def _written(self, p, entry):
        if self._optimizer._write_entry(p, dict(entry)):
            self._lookup(p)  # the entry now holds the live buffers the values were copied into


class _LiveEntry(dict):
    """One parameter's entries in a _LiveState: `state[p]["momentum_buffer"] = t` reaches the optimizer."""

    def __init__(self, owner, param, entries):
        super().__init__(entries)
        self._owner = owner
        self._param = param

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._owner._written(self._param, self)

    def __delitem__(self, key):
        super().__delitem__(key)
        self._owner._written(self._param, self)

    # dict's other mutators bypass __setitem__ / __delitem__: each writes through too
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self._owner._written(self._param, self)

    def pop(self, *args):
        value = super().pop(*args)
        self._owner._written(self._param, self)
        return value

    def popitem(self):
        item = super().popitem()
        self._owner._written(self._param, self)
        return item

    def setdefault(self, key, default=None):
        if key in self:
            return self[key]
        self[key] = default
        return self[key]

    def clear(self):
        super().clear()
        self._owner._written(self._param, self)


def _loaded_value(p, value, key=None):
    """A state value loaded for parameter p: a full tensor for a DTensor parameter becomes this rank's shard
    of it (as the optimizer had it); a floating tensor other than `step` takes a floating parameter's dtype, as
    torch's load_state_dict casts it (float32 state loaded for float64 parameters)."""
    if isinstance(value, _C.Tensor) and key != "step" and value.is_floating_point() and p.is_floating_point() \
            and value.dtype != p.dtype:
        value = value.to(p.dtype)
    if isinstance(value, _C.Tensor) and p.is_distributed and not value.is_distributed and \
            tuple(value.shape) == tuple(p.shape):
        return _C.distribute_tensor(value, p.device_mesh, list(p.placements), None)
    return value
