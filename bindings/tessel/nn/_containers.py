"""tessel.nn's containers: ModuleList, ModuleDict and Sequential (children registered in order) and
ParameterList / ParameterDict (parameters named by position or key), with torch's indexing, iteration and
replacement rules. Split from modules.py, whose Module methods (attribute registration, calling) they use.
"""
import collections
import collections.abc
import operator

from .. import _C
from .modules import Module, Parameter, _getattr, _keep_frozen


class _Container(Module):
    """Children in registration order; len() counts them."""

    def _children(self):
        return self.__dict__.get("_modules", {})

    def __len__(self):
        return len(self._children())


class _IndexedContainer(_Container):
    """Children named "0", "1", ...: iterated and indexed (ints, negative ints, slices) in order. A slice is
    a new container of the same modules (shared with this one, as torch's `model[:-1]`); deleting or
    inserting renumbers the names "0", "1", ... as torch does."""

    def _abs_index(self, idx):
        idx, n = operator.index(idx), len(self)
        if not -n <= idx < n:
            raise IndexError("index %d is out of range" % idx)
        return idx + n if idx < 0 else idx

    def __iter__(self):
        return iter(list(self._children().values()))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self._sliced(idx)
        return list(self._children().values())[self._abs_index(idx)]

    def __setitem__(self, idx, module):
        """Replaces the child at position idx (negative counts from the end), keeping its name."""
        self.add_module(list(self._children())[self._abs_index(idx)], module)

    def __delitem__(self, idx):
        names = list(self._children())
        for name in (names[idx] if isinstance(idx, slice) else [names[self._abs_index(idx)]]):
            delattr(self, name)  # the child leaves the C++ tree (and the state dict)
        self._renumber(list(self._children().values()))

    def _renumber(self, modules):
        """Makes `modules` the children, named "0", "1", ... in order."""
        if list(self._children().items()) == [(str(i), m) for i, m in enumerate(modules)]:
            return
        for name in list(self._children()):
            delattr(self, name)
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def insert(self, index, module):
        modules = list(self._children().values())
        modules.insert(operator.index(index), module)
        self._renumber(modules)

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class ModuleList(_IndexedContainer):
    """Holds modules named "0", "1", ... (torch.nn.ModuleList); not callable."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _sliced(self, idx):
        return type(self)(list(self._children().values())[idx])

    def extend(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        for m in modules:
            self.append(m)
        return self

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def __repr__(self):
        """torch's: consecutive items with equal reprs print once, as "(first-last): n x item"."""
        runs = []  # [first index, last index, repr]
        for i, m in enumerate(self):
            text = repr(m)
            if runs and runs[-1][2] == text:
                runs[-1][1] = i
            else:
                runs.append([i, i, text])
        if not runs:
            return type(self).__name__ + "()"
        lines = [("(%d): %s" % (a, r) if a == b else "(%d-%d): %d x %s" % (a, b, b - a + 1, r)).replace("\n", "\n  ")
                 for a, b, r in runs]
        return "%s(\n  %s\n)" % (type(self).__name__, "\n  ".join(lines))

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList is not callable: iterate over it in the parent's forward")


class ModuleDict(_Container):
    """Holds modules by name (torch.nn.ModuleDict); not callable."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        for k, m in (modules.items() if hasattr(modules, "items") else modules):
            self.add_module(k, m)

    __setitem__ = Module.add_module

    def __getitem__(self, key):
        return self._children()[key]

    def __contains__(self, key):
        return key in self._children()

    def __delitem__(self, key):
        delattr(self, key)  # the child leaves the C++ tree (and the state dict)

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def __iter__(self):
        return iter(list(self._children()))

    def clear(self):
        for name in list(self._children()):
            del self[name]

    def keys(self):
        return list(self._children().keys())

    def values(self):
        return list(self._children().values())

    def items(self):
        return list(self._children().items())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict is not callable: index it in the parent's forward")


class Sequential(_IndexedContainer):
    """Calls its modules in order (torch.nn.Sequential); built from modules or an OrderedDict."""

    def __init__(self, *args):
        super().__init__()
        items = args[0].items() if len(args) == 1 and isinstance(args[0], collections.OrderedDict) else enumerate(args)
        for k, m in items:
            self.add_module(str(k), m)

    def _sliced(self, idx):
        return type(self)(collections.OrderedDict(list(self._children().items())[idx]))  # names kept, as torch

    def insert(self, index, module):
        """torch's: the children from index on move one numbered key up ("i" takes "i - 1"'s module) and the new
        one takes str(index); named children keep their names when it goes at the end, and a move that needs a
        named child's key raises KeyError, as torch's (every child was renamed "0", "1", ...: the state_dict keys
        changed silently)."""
        n = len(self)
        idx = operator.index(index)
        if not -n <= idx <= n:
            raise IndexError("Index out of range: %d" % index)
        if idx < 0:
            idx += n
        children = self._children()
        for i in range(n, idx, -1):
            if str(i - 1) not in children:
                raise KeyError(str(i - 1))
            self.add_module(str(i), children[str(i - 1)])
        self.add_module(str(idx), module)
        return self

    def extend(self, sequential):
        for m in sequential:
            self.append(m)
        return self

    def _repeated(self, other, op):
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError("unsupported operand type(s) for %s: %s and %s" % (op, type(self), type(other)))
        if other <= 0:
            raise ValueError("Non-positive multiplication factor %d for %s" % (other, type(self)))
        return list(self) * other  # the same modules again, shared (torch's)

    def __mul__(self, other):
        return Sequential(*self._repeated(other, "*"))

    __rmul__ = __mul__

    def __imul__(self, other):
        self._renumber(self._repeated(other, "*="))
        return self

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but %s is given." % type(other))
        return Sequential(*(list(self) + list(other)))

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but %s is given." % type(other))
        return self.extend(list(other))

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


def _put_parameter(module, name, value):
    """Registers, or replaces (any shape, as torch), the container's entry `name`; a tensor becomes a
    Parameter (requires_grad as torch's Parameter(t): True), a Parameter keeps its own flag."""
    param = value if isinstance(value, Parameter) else Parameter(value)
    if module._has_parameter(name):
        _keep_frozen(param, lambda: module._set_parameter(name, param, True))
    else:
        _keep_frozen(param, lambda: module._register_parameter(name, param))


def _parameter_line(key, p, type_name):
    """torch's line for one ParameterList / ParameterDict entry in the container's repr."""
    if not isinstance(p, _C.Tensor):
        return "  (%s): Object of type: %s" % (key, type(p).__name__)
    return "  (%s): %s containing: [%s of size %s]" % (key, "Parameter" if isinstance(p, Parameter) else "Tensor",
                                                       type_name(p), "x".join(str(n) for n in p.shape))


class ParameterList(Module):
    """torch.nn.ParameterList: parameters named "0", "1", ...; tensors appended become Parameters."""

    def extra_repr(self):  # torch's: each entry's kind, dtype and size (it printed "ParameterList()")
        return "\n".join(_parameter_line(k, p, lambda t: str(t.dtype)) for k, p in enumerate(self))

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def __len__(self):
        return len(self._named_parameters(False))

    def _index(self, idx):
        n = len(self)
        if not -n <= idx < n:
            raise IndexError("index %d is out of range" % idx)
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return _getattr(self, self._index(idx))

    def __setitem__(self, idx, param):
        _put_parameter(self, self._index(idx), param)

    def __iadd__(self, values):
        return self.extend(values)

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def append(self, value):
        _put_parameter(self, str(len(self)), value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList is not callable")


class ParameterDict(Module):
    """torch.nn.ParameterDict: parameters by name, in insertion order; tensors become Parameters."""

    def extra_repr(self):  # torch's: each entry's kind, tensor type and size (it printed "ParameterDict()")
        return "\n".join(_parameter_line(k, p, lambda t: t.type()) for k, p in self.items())

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __len__(self):
        return len(self._named_parameters(False))

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(key)
        return _getattr(self, key)  # the entry, even where the class defines that name (values, training)

    def __setitem__(self, key, value):
        if not isinstance(key, str):
            raise TypeError("ParameterDict keys must be strings, got %s" % type(key).__name__)
        if hasattr(type(self), key):
            raise KeyError("attribute '%s' already exists" % key)  # torch's rule
        _put_parameter(self, key, value)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __contains__(self, key):
        return key in self.keys()

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        return [k for k, _ in self._named_parameters(False)]

    def values(self):
        return [self[k] for k in self.keys()]

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    # torch's dict API beyond lookups: the same Parameter objects move, nothing is copied
    def __delitem__(self, key):
        if key not in self:
            raise KeyError(key)
        delattr(self, key)

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        keys = self.keys()
        if not keys:
            raise KeyError("popitem(): dictionary is empty")
        return keys[-1], self.pop(keys[-1])

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for key in self.keys():
            del self[key]

    def copy(self):
        return ParameterDict(collections.OrderedDict(self.items()))

    def fromkeys(self, keys, default=None):
        return ParameterDict(collections.OrderedDict((k, default) for k in keys))

    def __or__(self, other):
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = ParameterDict(other)
        out.update(self)
        return out

    def __ior__(self, other):
        self.update(other)
        return self

    def update(self, parameters):
        """torch's order: an OrderedDict or ParameterDict in its order, another mapping sorted by key, an
        iterable of pairs in its order."""
        if isinstance(parameters, (collections.OrderedDict, ParameterDict)):
            items = list(parameters.items())
        elif hasattr(parameters, "items"):
            items = sorted(parameters.items())
        else:
            items = list(parameters)
        for k, v in items:
            self[k] = v

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict is not callable")
