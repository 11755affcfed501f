"""torch.nn.Module's private dictionaries as write-through views over tessel's module tree: `_parameters`,
`_buffers` and `_non_persistent_buffers_set`. Scripts and libraries read and write them directly (HF Trainer's
get_parameter_names lists `model._parameters`, accelerate and peft assign `module._parameters[name] = p`);
tessel keeps the tensors in its C++ modules, so these are views, not the storage.
"""
import collections.abc

from .. import _C

Tensor = _C.Tensor


class _NamedView(collections.abc.MutableMapping):
    """A module's own tensors of one kind by name, read through getattr and removed through delattr."""

    def __init__(self, module):
        self._module = module

    def _names(self):
        raise NotImplementedError

    def __getitem__(self, name):
        if name not in self._names():
            raise KeyError(name)
        return getattr(self._module, name)

    def __delitem__(self, name):
        if name not in self._names():
            raise KeyError(name)
        delattr(self._module, name)

    def __iter__(self):
        return iter(self._names())

    def __len__(self):
        return len(self._names())

    def __repr__(self):
        return repr(dict(self.items()))


class _ParametersView(_NamedView):
    """module._parameters: its own parameters by name (None for one registered as None), in registration order;
    view[name] = p registers or replaces (as setattr), del view[name] removes it."""

    def _names(self):
        from .modules import _NONE_KEY, _dict
        names = [n for n, _ in self._module.named_parameters(recurse=False, remove_duplicate=False)]
        return names + [n for n, is_param in _dict(self._module).get(_NONE_KEY, {}).items()
                        if is_param and n not in names]

    def __setitem__(self, name, value):
        from .modules import Parameter
        if value is not None and not isinstance(value, Parameter):  # torch stores any tensor; tessel a Parameter
            value = Parameter(value, requires_grad=value.requires_grad)
        if name in self._names():
            setattr(self._module, name, value)
        else:
            self._module.register_parameter(name, value)


class _BuffersView(_NamedView):
    """module._buffers: its own buffers by name (None for one registered as None); view[name] = t registers or
    replaces it (keeping its persistence), del view[name] removes it."""

    def _names(self):
        from .modules import _NONE_KEY, _complex_buffers, _dict
        names = [n for n, _ in self._module._named_buffers(False)] + list(_complex_buffers(self._module) or {})
        return names + [n for n, is_param in _dict(self._module).get(_NONE_KEY, {}).items()
                        if not is_param and n not in names]

    def __setitem__(self, name, value):
        if name in self._names():
            setattr(self._module, name, value)
        else:
            self._module.register_buffer(name, value)


class _NonPersistentView(collections.abc.MutableSet):
    """module._non_persistent_buffers_set: the names of its buffers its state dict leaves out; add / discard
    change a buffer's persistence (it is registered again)."""

    def __init__(self, module):
        self._module = module

    def _names(self):
        from .modules import _persistent_buffer_names
        return [n for n, _ in self._module._named_buffers(False) if n not in _persistent_buffer_names(self._module)]

    def __contains__(self, name):
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __len__(self):
        return len(self._names())

    def _set_persistent(self, name, persistent):
        if not any(n == name for n, _ in self._module._named_buffers(False)):
            return  # torch's set takes any name; only a buffer's changes anything here
        value = getattr(self._module, name)
        self._module._remove_buffer(name)
        self._module.register_buffer(name, value, persistent=persistent)

    def add(self, name):
        if name not in self:
            self._set_persistent(name, False)

    def discard(self, name):
        if name in self:
            self._set_persistent(name, True)

    def __repr__(self):
        return repr(set(self._names()))


class _ModulesView(collections.abc.MutableMapping):
    """module._modules: its children by name (None for one set to None), in registration order; view[name] = m
    registers or replaces (as setattr), del view[name] drops it."""

    def __init__(self, module):
        self._module = module

    def _items(self):
        """(name, child or None): the C++ children in order, and each name set to None (or registered as None) at
        its place among the names Python registered, as torch's one dict keeps it."""
        from .modules import _dict
        items = list(self._module._named_children())
        registered = list(_dict(self._module).get("_modules", {}).items())
        if not any(m is None for _, m in registered):
            return items
        for i, (name, m) in enumerate(registered):
            if m is not None or any(n == name for n, _ in items):
                continue
            at = 0  # after the closest name registered before it that is still listed
            for before, _ in reversed(registered[:i]):
                found = [k for k, (n, _) in enumerate(items) if n == before]
                if found:
                    at = found[0] + 1
                    break
            items.insert(at, (name, None))
        return items

    def __getitem__(self, name):
        for n, m in self._items():
            if n == name:
                return getattr(self._module, name) if m is not None else None
        raise KeyError(name)

    def __setitem__(self, name, value):
        setattr(self._module, name, value)

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        delattr(self._module, name)

    def __contains__(self, name):
        return any(n == name for n, _ in self._items())

    def __iter__(self):
        return iter([n for n, _ in self._items()])

    def __len__(self):
        return len(self._items())

    def __repr__(self):
        return repr(dict(self.items()))


def install(module_class):
    module_class._modules = property(_ModulesView, doc=_ModulesView.__doc__)
    module_class._parameters = property(_ParametersView, doc=_ParametersView.__doc__)
    module_class._buffers = property(_BuffersView, doc=_BuffersView.__doc__)
    module_class._non_persistent_buffers_set = property(_NonPersistentView, doc=_NonPersistentView.__doc__)
