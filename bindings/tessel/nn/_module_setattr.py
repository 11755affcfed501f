"""Module attribute assignment and deletion for the Python face (torch.nn.Module's __setattr__ / __delattr__):
a Parameter, child module, buffer or plain value under a name, each kind evicting the others as torch's
remove_from does, and torch's TypeErrors for the assignments it refuses. Split from nn/modules.py by concept.
"""
from .._complex import ComplexTensor
from .modules import (_NONE_KEY, Buffer, Module, Parameter, Tensor, _adopt, _child_module, _complex_buffers,
                      _deleted, _DeletedParameter, _dict, _drop_child, _has_dict, _keep_frozen, _note_none, _parent_of,
                      _set_parent)


def _delattr(self, name):
    """del module.child / del module.attribute (torch drops the child and its state-dict entries)."""
    modules = self.__dict__.get("_modules", {})
    if name in modules or _child_module(self, name) is not None:
        if _child_module(self, name) is not None:
            _drop_child(self, name)
        modules.pop(name, None)
        return
    if self._has_parameter(name):
        self._remove_parameter(name)  # torch: gone from parameters() and the state dict
        if not self._has_python_forward:
            # A C++ layer's forward reads the name as a parameter: from now on it reads the tensor the attribute
            # holds (torch's `del lin.weight; lin.weight = w * 3`, a non-leaf carrying w's graph: meta-learning).
            self._set_computed_parameter(name, _DeletedParameter(name))
        return
    if any(n == name for n, _ in self._named_buffers(False)):
        self._remove_buffer(name)  # torch: gone from buffers() and the state dict
        return
    held = _complex_buffers(self)
    if held is not None and name in held:
        del held[name]
        return
    object.__delattr__(self, name)
    if name == "forward":
        self._forward_changed()


def _undelete(self, name):
    """A Parameter assigned to a name `del` removed from a built-in layer is its parameter again."""
    if _deleted(self, name):
        self._set_computed_parameter(name, None)


def _setattr(self, name, value):
    if not self._constructed:  # before Module.__init__ (the C++ module does not exist yet: touching it crashed)
        if isinstance(value, Parameter):
            raise AttributeError("cannot assign parameters before Module.__init__() call")
        if isinstance(value, Module):
            raise AttributeError("cannot assign module before Module.__init__() call")
        return object.__setattr__(self, name, value)  # a plain attribute, as torch's
    if _deleted(self, name) and value is None:  # the layer runs without it (Linear without bias), as torch's
        self._set_computed_parameter(name, None)
        self._register_parameter(name, None)
        return
    if _deleted(self, name) and isinstance(value, Tensor) and not isinstance(value, Parameter):
        # a plain attribute the layer's forward reads (_DeletedParameter); past a read-only property (Linear.bias)
        object.__getattribute__(self, "__dict__")[name] = value
        return
    held = _complex_buffers(self)
    if held is not None and name in held and not isinstance(value, (Parameter, Module)):
        # torch: assigning to a buffer's name replaces the buffer (a parameter or child evicts it: below)
        if value is not None and not isinstance(value, ComplexTensor):
            raise TypeError("cannot assign '%s' as the complex buffer '%s' (a complex tensor or None expected)"
                            % (type(value).__name__, name))
        if value is None:
            del held[name]
            _note_none(self, name, False, None)
        else:
            held[name][0] = value
        return
    if isinstance(value, Tensor):
        plists = _dict(self).get("_modules", {}).get("parametrizations")
        if plists is not None and name in plists:
            plists[name].right_inverse(value)  # torch: assigning a parametrized tensor sets its originals
            return
    if isinstance(value, Parameter):
        _undelete(self, name)
        _evict(self, name, buffer=True, child=True)  # torch's remove_from: the name becomes a parameter only
        _note_none(self, name, True, value)
        if self._has_parameter(name):  # any shape, as torch (self.w = nn.Parameter(new_shape))
            _keep_frozen(value, lambda: self._set_parameter(name, value, True))
        else:
            _keep_frozen(value, lambda: self._register_parameter(name, value))
        _adopt(self, name, value)
    elif self._has_parameter(name):  # a parameter's name takes a Parameter or None (torch: TypeError)
        if value is not None:
            raise TypeError("cannot assign '%s' as parameter '%s' (torch.nn.Parameter or None expected)"
                            % (type(value).__name__, name))
        _note_none(self, name, True, None)
        self._set_parameter(name, None, True)
    elif isinstance(value, Module):
        if _dict(self).get("_modules", {}).get(name) is value:  # model.layers[0] = model.layers[0]
            return
        if value is self:  # deeper cycles: the C++ registration refuses them (Module::CheckNotAncestorOf)
            raise ValueError("%s: cannot register '%s': the module is an ancestor of %s"
                             % (type(self).__name__, name, type(self).__name__))
        _evict(self, name, buffer=True)
        previous = _dict(self).get("_modules", {}).get(name)
        if previous is None and self._lookup(name) is not None and isinstance(self._lookup(name), Module):
            previous = self._lookup(name)  # a child C++ created (a GPT's block): its Python object on demand
        if previous is not None:  # torch replaces a child; the old one stays usable wherever else it is held
            self._replace_module(name, value)
            if _parent_of(previous) is self and not any(c is previous for _, c in self._named_children()):
                _set_parent(previous, None)
        else:
            self._register_module(name, value)  # the C++ parent shares its ownership (see bindings/nn_py.cc)
        if _has_dict(self):  # (either way the C++ parent keeps the child's Python object: _register_module)
            self.__dict__.setdefault("_modules", {})[name] = value
        _set_parent(value, self)
    elif _child_module(self, name) is not None or name in _dict(self).get("_modules", {}):
        if value is not None:  # torch: a child's name takes a module or None
            raise TypeError("cannot assign '%s' as child module '%s' (torch.nn.Module or None expected)"
                            % (type(value).__name__, name))
        if _child_module(self, name) is not None:  # torch: the child is dropped, the name is None
            _drop_child(self, name)
        if _has_dict(self):
            self.__dict__.setdefault("_modules", {})[name] = None
    elif isinstance(value, Buffer) or self._has_buffer(name):  # torch 2.5's nn.Buffer, or a buffer's name
        if value is not None and not isinstance(value, Tensor):
            raise TypeError("cannot assign '%s' as buffer '%s' (torch.nn.Buffer, torch.Tensor or None expected)"
                            % (type(value).__name__, name))
        persistent = value.persistent if isinstance(value, Buffer) else self._buffer_is_persistent(name)
        # torch: assigning a tensor (or None) to a buffer's name replaces the buffer, persistence kept
        self.register_buffer(name, Tensor(value) if isinstance(value, Buffer) else value, persistent=persistent)
    else:
        if not _has_dict(self) and not hasattr(getattr(type(self), name, None), "__set__"):  # (no property setter)
            raise AttributeError("cannot set attribute '%s' on %s: a module created in C++ (such as tessel.nn.GPT's "
                                 "blocks) has no __dict__ for Python attributes; its parameters, buffers and children "
                                 "can be assigned" % (name, self._type_name))
        object.__setattr__(self, name, value)
        if name == "forward":  # `lin.forward = fn` on a C++ layer runs fn from then on, as torch
            self._forward_changed()


def _evict(self, name, buffer=False, child=False):
    """torch's remove_from before a parameter or child takes `name`: its plain attribute, and (`buffer`) a
    buffer or (`child`) a child module of that name, go."""
    if buffer:
        if self._has_buffer(name):
            self._remove_buffer(name)
        held = _complex_buffers(self)
        if held is not None and name in held:
            del held[name]
        noted = _dict(self).get(_NONE_KEY)
        if noted is not None and noted.get(name) is False:
            del noted[name]
    if child:
        if _child_module(self, name) is not None:
            _drop_child(self, name)
        _dict(self).get("_modules", {}).pop(name, None)
    if _has_dict(self) and name in self.__dict__:
        del self.__dict__[name]
