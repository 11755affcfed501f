"""tessel.nn.Module's state dicts (modules.py installs these as its methods): state_dict / load_state_dict
over the C++ module tree's own (core/nn/module.h), the complex buffers kept in Python, torch's version-gated
legacy entries, and the state-dict hooks (register_state_dict_pre_hook / _post_hook,
register_load_state_dict_pre_hook / _post_hook and the older private forms), which run Python-side per module
of the tree with its prefix, in torch's orders: pre-hooks parents first, post-hooks children first.

    model.register_load_state_dict_pre_hook(rename)   # rename(module, sd, prefix, ...) edits keys before loading
    model.load_state_dict(sd)
"""
import collections

from .. import _C
from .modules import (_BUFFER_OBJECTS, Tensor, _GlobalHookHandle, _IncompatibleKeys, _dict, _has_dict,
                      _named_complex_buffers)

_SD_HOOKS = "_tessel_state_dict_hooks"


def _sd_hooks(module, kind):
    return _dict(module).get(_SD_HOOKS, {}).get(kind, {})


def _add_sd_hook(module, kind, hook):
    try:
        hooks = object.__getattribute__(module, "__dict__").setdefault(_SD_HOOKS, {}).setdefault(
            kind, collections.OrderedDict())
    except AttributeError:
        raise NotImplementedError("%s: a module C++ created (a GPT's block) holds no Python state-dict hooks; "
                                  "register them on a Python module above it" % type(module).__name__) from None
    return _GlobalHookHandle(hooks, hook)


def _tree_has_sd_hooks(module, kinds):
    return any(_sd_hooks(m, k) for m in module.modules() for k in kinds)


def _pre_order(module, prefix):
    yield prefix, module
    for name, child in module._named_children():
        if child is not None:
            yield from _pre_order(child, prefix + name + ".")


def _post_order(module, prefix):
    for name, child in module._named_children():
        if child is not None:
            yield from _post_order(child, prefix + name + ".")
    yield prefix, module


def _local_metadata(module):
    return {"version": getattr(type(module), "_version", 1)}


def _with_metadata(root, out, prefix):
    """torch's state_dict records each module's local metadata ({"version": its class's _version}) in the
    destination's _metadata under its prefix without the dot ("" for the root), pre-order, when the destination
    has one (a fresh state dict does; a plain dict passed as destination does not). Returns prefix -> local
    metadata, the dicts the state-dict post-hooks are handed."""
    metadata = getattr(out, "_metadata", None)
    local = collections.OrderedDict()
    for p, m in _pre_order(root, prefix):
        local[p] = _local_metadata(m)
        if metadata is not None:
            metadata[p[:-1]] = local[p]
    return local


def _loaded_metadata(state_dict, prefix, assign):
    """The local_metadata torch's load_state_dict hands a module at prefix: the state dict's _metadata entry for
    it, {} for a dict without one (a plain dict: version-gated loaders take it as the oldest version);
    assign=True adds assign_to_params_buffers."""
    metadata = getattr(state_dict, "_metadata", None)
    local = {} if metadata is None else metadata.get(prefix[:-1], {})
    if assign:
        local["assign_to_params_buffers"] = assign
    return local


def get_extra_state(self):
    """torch's Module.get_extra_state: a module class that overrides it (with set_extra_state) adds its return
    value to the state dict as `<prefix>_extra_state`."""
    raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called. Please file an "
                       "issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report this "
                       "bug.")


def set_extra_state(self, state):
    raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called. Please file an "
                       "issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report this "
                       "bug.")


def _extra_state_modules(root, prefix, method):
    """(prefix, module) of root's tree whose class overrides get_extra_state / set_extra_state (`method`)."""
    from .modules import Module
    base = getattr(Module, method)
    return [(p, m) for p, m in _pre_order(root, prefix) if getattr(type(m), method, base) is not base]


def _with_extra_states(root, out, prefix):
    """out with each overriding module's `_extra_state` entry after its own parameters and buffers, before its
    children's, as torch's _save_to_state_dict writes it (the key was missing: a checkpoint lost the state)."""
    extras = _extra_state_modules(root, prefix, "get_extra_state")
    if not extras:
        return out
    with_extra = {p: m for p, m in extras}
    ordered = collections.OrderedDict()
    for p, m in _pre_order(root, prefix):
        for name in list(_own_state(m)) + [n for n, _ in _named_complex_buffers(m, False, persistent_only=True)]:
            if p + name in out:
                ordered[p + name] = out.pop(p + name)
        if p in with_extra:
            ordered[p + "_extra_state"] = with_extra[p].get_extra_state()
    ordered.update(out)  # (entries no module owns, e.g. a hook's, keep their place after)
    out.clear()
    out.update(ordered)
    return out


def _load_extra_states(root, state_dict):
    """Hands each overriding module its `_extra_state` entry (set_extra_state) and returns the rest of the state
    dict and the extra-state keys missing from it."""
    loaders = _extra_state_modules(root, "", "set_extra_state")
    if not loaders:
        return state_dict, []
    rest = collections.OrderedDict(state_dict)
    if hasattr(state_dict, "_metadata"):
        rest._metadata = state_dict._metadata
    missing = []
    for p, m in loaders:
        key = p + "_extra_state"
        if key in rest:
            m.set_extra_state(rest.pop(key))
        else:  # reported whatever strict says (torch's loader is called with strict=True), raised under strict
            missing.append(key)
    return rest, missing


def _collect_state_dict(self, destination, prefix, keep_vars):
    # module by module (torch's recursion) where a class saves its own way, or where complex buffers (kept in
    # Python) must follow their module's own entries rather than end the dict
    if _overriding_savers(self) or any(_named_complex_buffers(self, True)):
        out = collections.OrderedDict() if destination is None else destination
        for p, m in _pre_order(self, prefix):  # each module's own entries, parents first, as torch's recursion
            m._save_to_state_dict(out, p, keep_vars)
        return out
    out = _collect_entries(self, destination, prefix, keep_vars)
    return _with_extra_states(self, out, prefix)


def _overriding_savers(root):
    """Whether a module of root's tree has a class that overrides Module._save_to_state_dict."""
    from .modules import Module
    base = Module._save_to_state_dict
    return any(type(m)._save_to_state_dict is not base for m in root.modules())


def _save_to_state_dict(self, destination, prefix, keep_vars):
    """torch's Module._save_to_state_dict, which subclasses override (adding derived entries, packing weights)
    and reach through super(): writes this module's own parameters and persistent buffers (the module's objects
    under keep_vars, else detached) and its get_extra_state() into destination under prefix. Children are not
    written here (state_dict visits them)."""
    from .modules import Module, _stable
    held = {hash(p): p for _, p in self.named_parameters(recurse=False)} if keep_vars else {}
    for name, t in _own_state(self).items():
        if t is None:
            continue
        destination[prefix + name] = (held[hash(t)] if hash(t) in held else _stable(t)) if keep_vars else t.detach()
    for name, t in _named_complex_buffers(self, False, persistent_only=True):
        destination[prefix + name] = t if keep_vars else t.detach()
    if getattr(type(self), "get_extra_state", Module.get_extra_state) is not Module.get_extra_state:
        destination[prefix + "_extra_state"] = self.get_extra_state()


def _collect_entries(self, destination, prefix, keep_vars):
    out = collections.OrderedDict() if destination is None else destination
    held = {}
    if keep_vars:  # torch's keep_vars: the module's own Parameter and buffer objects
        from .modules import _stable
        held = {hash(p): p for _, p in self.named_parameters(remove_duplicate=False)}
    for name, t in self._state_dict():
        out[prefix + name] = (held[hash(t)] if hash(t) in held else _stable(t)) if keep_vars else t.detach()
    for name, t in _named_complex_buffers(self, True, persistent_only=True):
        out[prefix + name] = t if keep_vars else t.detach()
    return out


def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
    """torch's state_dict (positional destination, prefix, keep_vars accepted too), with the state-dict hooks
    of every module in the tree."""
    if args:  # torch's deprecated positional form
        destination, prefix, keep_vars = (list(args) + [destination, prefix, keep_vars][len(args):])[:3]
    if destination is None:  # torch's fresh state dict: an OrderedDict with the modules' _metadata
        destination = collections.OrderedDict()
        destination._metadata = collections.OrderedDict()
    if not _tree_has_sd_hooks(self, ("sd_pre", "sd_post", "sd_post_private")):
        _with_metadata(self, destination, prefix)
        return _collect_state_dict(self, destination, prefix, keep_vars)
    for p, m in _pre_order(self, prefix):
        for hook in list(_sd_hooks(m, "sd_pre").values()):
            hook(m, p, keep_vars)
    local = _with_metadata(self, destination, prefix)
    out = _collect_state_dict(self, destination, prefix, keep_vars)
    for p, m in _post_order(self, prefix):
        for hook in list(_sd_hooks(m, "sd_post_private").values()):
            result = hook(m, out, p, local[p])
            if result is not None and m is self:  # a child's returned dict stays the child's (torch's parent
                out = result  # keeps its own destination): only the root's replaces the state dict
        for hook in list(_sd_hooks(m, "sd_post").values()):
            if hook(m, out, p, local[p]) is not None:
                raise RuntimeError("state_dict post-hook must return None")
    return out


def register_state_dict_pre_hook(self, hook):
    """hook(module, prefix, keep_vars) before the module's entries are collected."""
    return _add_sd_hook(self, "sd_pre", hook)


def register_state_dict_post_hook(self, hook):
    """hook(module, state_dict, prefix, local_metadata) after them; it edits the dict in place (returns None)."""
    return _add_sd_hook(self, "sd_post", hook)


def _register_state_dict_hook(self, hook):
    """torch's older private form: like the post hook, and a dict it returns replaces the state dict."""
    return _add_sd_hook(self, "sd_post_private", hook)


def register_load_state_dict_pre_hook(self, hook):
    """hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    before loading: it may edit the state dict (rename keys, convert values) and append error messages."""
    return _add_sd_hook(self, "load_pre", hook)


def _register_load_state_dict_pre_hook(self, hook, with_module=False):
    """torch's older private form: hook(state_dict, prefix, ...) (with_module=True: module first)."""
    return _add_sd_hook(self, "load_pre", hook if with_module else (lambda m, *rest: hook(*rest)))


def register_load_state_dict_post_hook(self, hook):
    """hook(module, incompatible_keys) after loading, before strict's check: it may remove keys it expects
    to be missing or unexpected (the lists are the ones strict then checks)."""
    return _add_sd_hook(self, "load_post", hook)


def _load_complex_buffers(self, state_dict, strict, assign=False):
    """Copies the state dict's entries for complex buffers (assign: makes them the buffers) and returns the rest
    (for the C++ loader) and the complex buffers it lacked."""
    rest = collections.OrderedDict()
    names = dict(_named_complex_buffers(self, True, persistent_only=True))
    for key, value in state_dict.items():
        if key not in names:
            rest[key] = value
            continue
        if tuple(value.shape) != tuple(names[key].shape):
            raise ValueError("load_state_dict: size mismatch for %s: copying a param with shape %s from "
                             "checkpoint, the shape in current model is %s."
                             % (key, list(value.shape), list(names[key].shape)))
        if assign:
            owner, _, leaf = key.rpartition(".")
            setattr(self.get_submodule(owner) if owner else self, leaf, value)
            continue
        with _C._GradMode(False):
            names[key].copy_(value)
    missing = [k for k in names if k not in state_dict]
    if missing and strict:
        raise ValueError("Error(s) in loading state_dict for %s: missing keys %s"
                         % (type(self).__name__, missing))
    return rest, missing


def _with_legacy_entries(root, state_dict):
    """The entries torch's version-gated _load_from_state_dict overrides add before loading: each submodule
    class with a _legacy_state(state_dict, prefix, version) method (BatchNorm: num_batches_tracked) is asked,
    with its version from the dict's _metadata as torch saves it (None without one). A None value drops
    that key (a renamed entry: weight_norm's weight_g / weight_v)."""
    metadata = getattr(state_dict, "_metadata", None)
    extra = {}
    for name, module in root.named_modules():
        fill = getattr(module, "_legacy_state", None)
        if fill is None:
            continue
        version = (metadata.get(name, {}) if metadata is not None else {}).get("version")
        extra.update(fill(state_dict, name + "." if name else "", version))
    if not extra:
        return state_dict
    merged = collections.OrderedDict(state_dict)
    merged.update(extra)
    for key in [k for k, v in extra.items() if v is None]:  # renamed entries (the fill returned the new keys)
        del merged[key]
    return merged


def load_state_dict(self, state_dict, strict=True, assign=False):
    """torch's load_state_dict: values are copied into the module's tensors (checked: keys under strict,
    shapes always). assign=True then makes each parameter the state dict's own tensor (its dtype and
    storage; requires_grad stays the module's) and each buffer the state dict's tensor, as torch. The tree's load
    pre-hooks see (and may edit) a copy of the state dict first, its post-hooks the incompatible keys before
    strict's check. A module whose class overrides _load_from_state_dict (torch's way to rename legacy keys)
    loads its own entries through it, pre-order as torch, before the rest of the tree loads."""
    state_dict, extra_missing = _load_extra_states(self, state_dict)
    if extra_missing:
        keys = _load_state_dict_into(self, state_dict, False, assign)
        keys = _IncompatibleKeys(list(keys.missing_keys) + extra_missing, list(keys.unexpected_keys))
        if strict:
            _raise_load_errors(self, [], keys.missing_keys, keys.unexpected_keys)
        return keys
    overriding = _overriding_loaders(self)
    if not overriding and not _tree_has_sd_hooks(self, ("load_pre", "load_post")):
        return _load_state_dict_into(self, state_dict, strict, assign)
    edited = collections.OrderedDict(state_dict)
    if hasattr(state_dict, "_metadata"):
        edited._metadata = state_dict._metadata
    missing, unexpected, errors = [], [], []
    for p, m in _pre_order(self, ""):
        if m in overriding:  # its pre-hooks run inside (the base _load_from_state_dict runs them)
            # strict=True, as torch passes whatever load_state_dict's strict (which only decides the raise)
            m._load_from_state_dict(edited, p, _loaded_metadata(edited, p, assign), True, missing, unexpected,
                                    errors)
            continue
        for hook in list(_sd_hooks(m, "load_pre").values()):  # (torch passes strict=True)
            hook(m, edited, p, _loaded_metadata(edited, p, assign), True, missing, unexpected, errors)
    if errors:
        raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s" % (type(self).__name__, "\n\t".join(errors)))
    # What an overriding module owns (its own entries, and any key under its prefix naming no child) was its
    # _load_from_state_dict's to load and to report; the rest of the tree loads as usual.
    domains = [(p, {n for n, _ in m._named_children()}) for p, m in _pre_order(self, "") if m in overriding]

    def claimed(key):
        return any(key.startswith(p) and key[len(p):].split(".", 1)[0] not in children for p, children in domains)
    keys = _load_state_dict_into(self, collections.OrderedDict((k, v) for k, v in edited.items() if not claimed(k)),
                                 False, assign)
    keys = _IncompatibleKeys([k for k in keys.missing_keys if not claimed(k)], list(keys.unexpected_keys))
    keys = _IncompatibleKeys(list(keys.missing_keys) + missing, list(keys.unexpected_keys) + unexpected)
    for _, m in _post_order(self, ""):  # children first, as torch's recursive load runs them
        for hook in list(_sd_hooks(m, "load_post").values()):
            if hook(m, keys) is not None:
                raise RuntimeError("load_state_dict post-hook must return None")
    if strict:
        _raise_load_errors(self, [], keys.missing_keys, keys.unexpected_keys)
    return keys


def _overriding_loaders(root):
    """The modules of root's tree whose class overrides Module._load_from_state_dict."""
    from .modules import Module
    base = Module._load_from_state_dict
    return {m for m in root.modules() if type(m)._load_from_state_dict is not base}


def _own_state(module):
    """name -> tensor of the module's own parameters and persistent buffers (its own state-dict entries)."""
    persistent = _persistent_buffer_names(module)
    own = collections.OrderedDict(module._named_parameters(False))
    own.update((n, b) for n, b in module._named_buffers(False) if n in persistent)
    return own


def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                          error_msgs):
    """torch's Module._load_from_state_dict, which subclasses override (renaming legacy keys, converting
    values) and reach through super(): runs this module's load pre-hooks, copies state_dict[prefix + name]
    into each of its own parameters and persistent buffers (a missing one goes to missing_keys, a shape
    mismatch to error_msgs) and, under strict, lists the keys under prefix that name nothing here in
    unexpected_keys. Children are not loaded here (load_state_dict visits them)."""
    for hook in list(_sd_hooks(self, "load_pre").values()):
        hook(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    own = _own_state(self)
    with _C._GradMode(False):
        for name, tensor in own.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if tuple(tensor.shape) == () and tuple(value.shape) == (1,):  # torch's input_param[0]
                value = value[0]
            if tuple(value.shape) != tuple(tensor.shape):
                error_msgs.append("size mismatch for %s: copying a param with shape %s from checkpoint, the shape "
                                  "in current model is %s." % (key, value.shape, tensor.shape))
            else:
                tensor.copy_(value)
    if strict:
        children = {n for n, _ in self._named_children()}
        for key in state_dict:
            if not key.startswith(prefix):
                continue
            head, dot, _ = key[len(prefix):].partition(".")
            if (dot and head not in children) or (not dot and head not in own):  # torch's test
                unexpected_keys.append(key)


def _raise_load_errors(module, size_errors, missing, unexpected):
    """torch's load_state_dict error: "Error(s) in loading state_dict for <class>:" then the missing keys, the
    unexpected keys and each size mismatch, one per line (a RuntimeError; here also a ValueError)."""
    errors = list(size_errors)
    if unexpected:
        errors.insert(0, "Unexpected key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in unexpected))
    if missing:
        errors.insert(0, "Missing key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in missing))
    if errors:
        raise _C.InvalidArgumentError("Error(s) in loading state_dict for %s:\n\t%s"
                                      % (type(module).__name__, "\n\t".join(errors)))


def _check_loadable(module, state_dict, strict):
    """Raises torch's error before anything loads: a size mismatch always, missing / unexpected keys if strict."""
    from .._tensor import Size
    own = _collect_entries(module, None, "", True)  # (extra states were handed over before)
    sizes = ["size mismatch for %s: copying a param with shape %s from checkpoint, the shape in current model is %s."
             % (k, Size(v.shape), Size(own[k].shape)) for k, v in state_dict.items()
             if k in own and isinstance(v, Tensor) and tuple(v.shape) != tuple(own[k].shape)]
    missing = [k for k in own if k not in state_dict] if strict else []
    unexpected = [k for k in state_dict if k not in own] if strict else []
    _raise_load_errors(module, sizes, missing, unexpected)


def tensor_entries(module, state_dict):
    """(state_dict without its non-tensor values, the keys of those): a non-tensor value under a key the module
    does not have is an unexpected key (torchtitan hands load_state_dict its whole checkpoint dict, step counts
    and other Statefuls' values included); under one of the module's keys it is torch's error."""
    others = [k for k, v in state_dict.items() if not isinstance(v, Tensor) and not _is_complex(v)]
    if not others:
        return state_dict, []
    own = _collect_entries(module, None, "", True)
    for k in others:
        if k in own:
            raise RuntimeError('While copying the parameter named "%s", expected torch.Tensor or Tensor-like object '
                               "from checkpoint but received %s" % (k, type(state_dict[k])))
    return {k: v for k, v in state_dict.items() if k not in set(others)}, others


def _is_complex(v):
    from .._complex import ComplexTensor
    return isinstance(v, ComplexTensor)


def _one_element_into_scalars(module, state_dict, own=None):
    """torch's _load_from_state_dict loads a shape-[1] value into a 0-d parameter or buffer (input_param[0]):
    state_dict with those values indexed so (the same dict when there are none)."""
    ones = [k for k, v in state_dict.items() if isinstance(v, Tensor) and tuple(v.shape) == (1,)]
    if not ones:
        return state_dict
    own = _collect_entries(module, None, "", True) if own is None else own
    scalars = [k for k in ones if k in own and own[k] is not None and tuple(own[k].shape) == ()]
    if not scalars:
        return state_dict
    out = collections.OrderedDict(state_dict)
    for k in scalars:
        out[k] = state_dict[k][0]
    return out


def _load_state_dict_into(self, state_dict, strict, assign):
    state_dict = _one_element_into_scalars(self, _with_legacy_entries(self, state_dict))
    _check_loadable(self, state_dict, strict)
    state_dict, others = tensor_entries(self, state_dict)
    result = _load_tensors_into(self, state_dict, strict, assign)
    return _IncompatibleKeys(result.missing_keys, result.unexpected_keys + others)


def _load_tensors_into(self, state_dict, strict, assign):
    params = dict(self.named_parameters(remove_duplicate=False)) if assign else {}
    if any(p.is_distributed for p in params.values()):
        # Sharded parameters stay the objects fully_shard / parallelize_module manage: their values are copied in
        # (each rank its piece) instead of the parameters being replaced; the FSDP2 tutorial's checkpointer loads
        # nn.Parameter(distribute_tensor(...)) values this way with assign=True.
        assign = False
    state_dict, complex_missing = _load_complex_buffers(self, state_dict, strict, assign)
    if not assign:
        # in the module's own order, as torch fills module by module: of two keys naming one tied tensor
        # (a decoder sharing the embedding), the later module's value is the one kept, whatever the dict order
        order = {k: i for i, k in enumerate(_collect_entries(self, None, "", True))}
        items = sorted(state_dict.items(), key=lambda kv: order.get(kv[0], len(order)))
        missing, unexpected = self._load_state_dict(items, strict)
        return _IncompatibleKeys(list(missing) + complex_missing, unexpected)
    # assign (torch's setattr(module, name, input_param)): the old tensors stay untouched; shapes and keys were
    # checked above. Each parameter becomes the state dict's own Parameter (its requires_grad set to the old
    # one's), or a Parameter over the state dict's tensor; each persistent buffer becomes the state dict's tensor
    # (its dtype and storage); non-tensor entries load as usual.
    buffers = [k for k in _collect_entries(self, None, "", True) if k not in params]
    assigned = [k for k in list(params) + buffers if k in state_dict and isinstance(state_dict[k], Tensor)]
    missing, unexpected = self._load_state_dict([(k, v) for k, v in state_dict.items() if k not in assigned], False)
    missing = [k for k in missing if k not in assigned]
    from .modules import Parameter
    for name in assigned:
        value = state_dict[name]
        if name in params:
            if isinstance(value, Parameter):
                value.requires_grad_(params[name].requires_grad)
                _C._retag_memory(value, "params")  # the state dict's bytes are the parameter's now
            else:  # over the same storage, a tensor of its own (the state dict's keeps its requires_grad)
                value = Parameter(value.detach(), params[name].requires_grad)
        owner, _, leaf = name.rpartition(".")
        owner = self.get_submodule(owner) if owner else self
        setattr(owner, leaf, value)
        if name not in params and _has_dict(owner) and hash(getattr(owner, leaf)) == hash(value):
            owner.__dict__.setdefault(_BUFFER_OBJECTS, {})[leaf] = value  # m.buf is the state dict's tensor
    return _IncompatibleKeys(missing + complex_missing, unexpected)


def _persistent_buffer_names(module):
    """The module's own buffers that its state dict saves."""
    own = {n for n, _ in module._named_buffers(False)}
    # the tree's own entries, not state_dict(): its hooks (renaming keys, say) must not decide persistence
    return {k for k in _collect_entries(module, None, "", True) if k in own}
