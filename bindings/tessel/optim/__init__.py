"""tessel.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam with torch's signatures
(C++), and Muon, Rprop, ASGD, Adafactor and LBFGS (Python subclasses of Optimizer, below),
over ``model.parameters()``, named parameters or parameter groups (dicts with "params" and per-group options).

Each parameter group is one C++ optimizer (core/optim), whose state is keyed by the parameter's FQN, so a
checkpoint of the optimizer reshards like the model's; with several groups their entries are merged
(per-parameter state by FQN, group i's hyperparameters under "optim.hyper.group<i>." for i > 0) and a load
restores each group's hyperparameters into ``param_groups``, as torch's load_state_dict does. Every
hyperparameter of ``param_groups[i]`` (lr, weight_decay, betas, eps, momentum, ...) is read at every step,
as in torch, so LR schedulers and hand-edited groups work.

    opt = tessel.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss.backward(); opt.step(); opt.zero_grad()

An optimizer written in Python subclasses Optimizer as in torch: __init__(params, defaults) and a step() that
reads self.param_groups and keeps per-parameter state in self.state[p] (tensors made with zeros_like(p) are
DTensor shards for fully_shard parameters). Its state_dict / load_state_dict, checkpoints (tessel.save,
distributed.checkpoint's get/set_optimizer_state_dict) and LR schedulers work as for the built-in ones.
`optimizer.state`'s mappings are in _state.py, the step hooks in _hooks.py, and the parameter groups in
_groups.py (parameters or groups put into param_groups by hand are stepped, as torch's, from the next step on).
"""
import numbers

from .. import _C
from . import _hooks, lr_scheduler  # noqa: F401
from ._state import _LiveState, _ParamState, _loaded_value
from ._groups import GroupMethods, _param_groups, required  # noqa: F401
from ._hooks import register_optimizer_step_post_hook, register_optimizer_step_pre_hook  # noqa: F401


def _state_fqn(key):
    """The parameter an optimizer checkpoint entry belongs to ('optim.state.<fqn>.<buffer>' or
    'optim.step.<fqn>'); None for the other entries (hyperparameters)."""
    if key.startswith("optim.state."):
        return key[len("optim.state."):].rsplit(".", 1)[0]
    if key.startswith("optim.step."):
        return key[len("optim.step."):]
    return None


def _scalar_dtype():
    """torch's _get_scalar_dtype: the dtype of a state's "step", float64 under set_default_dtype(float64)."""
    return _C.dtype.float64 if _C._get_default_dtype() == _C.dtype.float64 else _C.dtype.float32


def _copied_containers(value):
    """torch's load_state_dict copy of a state value: dicts, lists and tuples rebuilt (the loaded optimizer's
    state does not share them with the state dict), tensors and other values as they are."""
    if isinstance(value, dict):
        return {k: _copied_containers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, _C.Tensor):
        return type(value)(_copied_containers(v) for v in value)
    return value


class Optimizer(GroupMethods, _hooks.HookMethods):
    """Base: one C++ optimizer per parameter group (the built-in subclasses define _make), or, for a subclass
    written in Python, its own step() over param_groups with per-parameter state in self.state. torch's hooks
    (register_step_pre_hook, ...: tessel/optim/_hooks.py) wrap each class's step / state_dict / load_state_dict
    when its first instance is made."""
    _make = None  # built-in subclasses: (named parameters, group) -> the group's C++ optimizer

    _torch_keys = ()  # torch's order of the built-in optimizers' defaults (param_groups and state dicts show it)

    def __init__(self, params, defaults):
        order = type(self)._torch_keys
        if order:
            defaults = dict([(k, defaults[k]) for k in order if k in defaults] +
                            [(k, v) for k, v in defaults.items() if k not in order])
        _hooks.patch(type(self))
        _hooks.init_hook_dicts(self)
        self.defaults = defaults
        self.param_groups = []
        self._optimizers = []  # per group: its C++ optimizer (None for a Python subclass)
        self._fqns = []  # per group: its parameters' FQNs in order (checkpoint keys; state_dict's integer ids)
        self._built = []  # per group: the parameters its C++ optimizer was built over (_groups.py)
        self._state = _ParamState()
        self._where = {}
        for g in _param_groups(params):
            self.add_param_group(g)

    @property
    def _python(self):
        return type(self)._make is None

    @property
    def state(self):
        """Per-parameter state, self.state[p] (torch's). A Python subclass keeps its own here; for the built-in
        optimizers it is read from state_dict(): the entries alias the optimizer's live buffers, and writes to the
        mapping (`del opt.state[p]`, `opt.state[p] = {...}`, `opt.state[p]["exp_avg"] = t`, `opt.state = {}`)
        reach the optimizer, as torch's (they were dropped)."""
        if self._python:
            return self._state
        if "_live_state" not in self.__dict__:
            self._live_state = _LiveState(self)
        return self._live_state

    @state.setter
    def state(self, value):
        if self._python:
            state = _ParamState()
            for p, entry in (value.items() if value is not None else ()):
                state[p] = entry
            self._state = state
        else:
            self._write_state(value)

    def _write_state(self, mapping):
        """The built-in optimizers' state replaced by `mapping` (parameter -> entries; a parameter without any
        starts over at its next step): each parameter's entry written as `state[p] = entry` writes it."""
        for p in self._params_in_order():
            self._write_entry(p, mapping.get(p))
        self.__dict__.pop("_live_state", None)  # (torch's state is the mapping given now)

    def _params_in_order(self):
        self._sync_groups()
        return [p for g in self.param_groups for p in g["params"]]

    def _param_entry(self, p):
        """p's entry in torch's layout, read from its group's C++ optimizer ({} before its first step; None when
        p is not one of this optimizer's parameters)."""
        where = self._where.get(hash(p))
        if where is None:
            self._sync_groups()  # (a parameter put in param_groups since the last step)
            where = self._where.get(hash(p))
        if where is None:
            return None
        gi, name = where
        opt = self._optimizers[gi]
        buffers, step = opt._param_state(name)
        return self._with_extra(hash(p), self._torch_entry(gi, opt, name, buffers, step))

    # [Note: extra state] The C++ optimizers keep tensors and a step count per parameter. A subclass's own step()
    # may keep anything in self.state[p] (a Python int, a list, SGD's "step" which torch's SGD never writes): those
    # entries live here, in self._extra (parameter hash -> {key: value}), and each read of p's entry appends them.
    def _split_entry(self, entry):
        """(what the C++ optimizer keeps, what _extra keeps) of a torch-layout entry."""
        cpp, extra = {}, {}
        counts = getattr(type(self), "_torch_counts_steps", True)
        for k, v in entry.items():
            if k == "step":
                ours = counts and isinstance(v, (_C.Tensor, numbers.Number))
            else:
                ours = v is None or isinstance(v, _C.Tensor)
            (cpp if ours else extra)[k] = v
        return cpp, extra

    def _key_of(self):
        """(group, name) -> the parameter's hash (_where's inverse)."""
        return {at: h for h, at in self._where.items()}

    def _with_extra(self, key, entry):
        extra = self._extra.get(key) if "_extra" in self.__dict__ else None
        return dict(entry, **extra) if extra else entry

    def _write_entry(self, p, entry):
        """torch's `state[p] = entry` (None: `del state[p]`) for a built-in optimizer: p's buffers and step become
        the entry's (a buffer set to None is dropped: it starts over from the next gradient, as torch's
        momentum_buffer = None); the other parameters' state is untouched. False when p is not optimized here."""
        where = self._where.get(hash(p))
        if where is None:
            self._sync_groups()
            where = self._where.get(hash(p))
        if where is None:
            return False
        gi, name = where
        cpp, extra = self._split_entry(entry or {})
        buffers, step = self._cpp_entry(cpp)
        self._optimizers[gi]._load_param_state(name, buffers, step)
        self._set_extra(hash(p), extra)
        live = self.__dict__.get("_live_steps")  # [Note: live steps]: a step tensor written in is the live one
        given = cpp.get("step")  # (SGD's "step" is a plain entry: torch's SGD never touches it)
        if isinstance(given, _C.Tensor) and given.dim() == 0 and given.dtype == _scalar_dtype():
            self.__dict__.setdefault("_live_steps", {})[(gi, name)] = [given, step]
        elif live:
            live.pop((gi, name), None)
        return True

    def _set_extra(self, key, extra):
        if extra:
            self.__dict__.setdefault("_extra", {})[key] = extra
        elif "_extra" in self.__dict__:
            self._extra.pop(key, None)

    @staticmethod
    def _closure_loss(closure):
        """torch's step(closure): the closure recomputes the loss (and gradients) with grad mode on."""
        if closure is None:
            return None
        with _C._GradMode(True):
            return closure()

    def _gradients(self):
        """(group, parameter, gradient) for each parameter that has one, the gradient negated where the group
        maximizes: the loop a Python subclass's step() runs (under no_grad)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p, (-p.grad if group.get("maximize") else p.grad)

    def step(self, closure=None):
        if self._python:
            raise NotImplementedError("%s.step: an Optimizer subclass defines its own step()" % type(self).__name__)
        loss = self._closure_loss(closure)  # grad mode on, as torch's (a step under no_grad still computes)
        self._sync_groups()  # (after the closure: it may edit param_groups too)
        live = self.__dict__.get("_live_steps")
        if live:
            self._push_step_edits(live)
        for group, opt in zip(self.param_groups, self._optimizers):
            self._step_group(group, opt)
        if live:
            self._refresh_live_steps(live)
        return loss

    # [Note: live steps] torch's state["step"] is a tensor its step() increments in place, so a state_dict()
    # taken earlier shows the current count and an in-place edit (state["step"].fill_(100)) is what the next
    # step uses. The C++ optimizers count in integers; the step tensors state_dict() hands out are kept here by
    # (group, parameter), refreshed after each step, and an edited one is pushed into the C++ optimizer first.
    def _live_step(self, index, name, value):
        live = self.__dict__.setdefault("_live_steps", {})  # (group, name) -> [tensor, the count written into it]
        entry = live.get((index, name))
        if entry is None or entry[0].dtype != _scalar_dtype():
            entry = live[(index, name)] = [_C._full([], float(value), _scalar_dtype()), value]
        elif entry[0].item() == entry[1] and entry[1] != value:
            with _C._GradMode(False):
                entry[0].fill_(float(value))
            entry[1] = value
        return entry[0]  # (a value other than the one written is the user's edit: the next step pushes it)

    def _push_step_edits(self, live):
        for index, (group, opt) in enumerate(zip(self.param_groups, self._optimizers)):
            edited = {name: int(t.item()) for (i, name), (t, written) in live.items()
                      if i == index and t.item() != written}
            if edited:
                buffers, steps, _ = opt._get_state()
                steps.update(edited)
                opt._load_state(buffers, steps, self._hyper(group))

    def _refresh_live_steps(self, live):
        for index, opt in enumerate(self._optimizers):
            _, steps, _ = opt._get_state()
            with _C._GradMode(False):
                for (i, name), entry in live.items():
                    if i == index and name in steps:
                        entry[0].fill_(float(steps[name]))
                        entry[1] = steps[name]

    def _grad_transform(self, group):
        """None, or transform(param, grad): the gradient the C++ step should see (Adam's L2 term)."""
        return None

    def _step_group(self, group, opt):
        """opt.step() with group's hyperparameters. With group["maximize"] (torch's: ascend) each .grad is negated
        for the step, and with _grad_transform it becomes transform(param, that gradient); .grad is put back
        afterwards (torch leaves it untouched)."""
        opt.hyper = self._hyper(group)
        transform = self._grad_transform(group)
        maximize = bool(group.get("maximize", False))
        if transform is None and not maximize:
            return opt.step()
        saved = [(p, p.grad) for p in group["params"] if p.grad is not None]
        with _C._GradMode(False):
            for p, g in saved:
                g = -g if maximize else g
                p.grad = transform(p, g) if transform is not None else g
        try:
            opt.step()
        finally:
            for p, g in saved:
                p.grad = g

    def zero_grad(self, set_to_none=True):
        self._sync_groups()
        for group, opt in zip(self.param_groups, self._optimizers):
            if set_to_none and opt is None:
                for p in group["params"]:
                    p.grad = None
            elif set_to_none:
                opt.zero_grad()
            else:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.zero_()

    # ---- torch's state_dict: {"state": {id: {...}}, "param_groups": [{..., "params": [ids]}]} ----

    def __deepcopy__(self, memo):
        """copy.deepcopy: the same optimizer over deep copies of its parameters (the copies of the model's when both
        are copied at once, through memo, as torch's) with a copy of its state and options. A built-in optimizer
        (its state in C++) is rebuilt from its class, options and state_dict(); step hooks are not copied."""
        import copy
        import inspect
        from ..nn._copy import _copied_tensor
        cls = type(self)
        # Each parameter's copy is the one a model copied in the same deepcopy gets (Module.__deepcopy__ keys its
        # copies by the tensor's data, not by id): one memo entry per parameter, whichever is copied first.
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) not in memo:
                    memo[id(p)] = _copied_tensor(p, memo)
        if self._python:  # plain Python state: the default deep copy
            new = cls.__new__(cls)
            memo[id(self)] = new
            # (not a scheduler's step wrapper: a closure over this optimizer, which the copy would step)
            own = {k: v for k, v in self.__dict__.items()
                   if not (k == "step" and getattr(v, "_wrapped_by_lr_sched", False))}
            new.__dict__.update(copy.deepcopy(own, memo))
            return new
        groups = [copy.deepcopy(dict(g), memo) for g in self.param_groups]
        accepted = inspect.signature(cls.__init__).parameters
        new = cls(groups, **{k: v for k, v in self.defaults.items() if k in accepted})
        memo[id(self)] = new
        new.load_state_dict(copy.deepcopy(self.state_dict()))
        return new

    def __repr__(self):
        """torch's: the class name, then each parameter group's options in sorted order."""
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += "\nParameter Group %d\n" % i
            text += "".join("    %s: %s\n" % (key, group[key]) for key in sorted(group) if key != "params")
        return text + ")"

    def state_dict(self):
        """torch's layout: parameters numbered across the groups in order; each one's state ("step" and the
        optimizer's buffers, aliases of the live tensors) and each group's options with its ids."""
        if self._python:
            return self._python_state_dict()
        self._sync_groups()
        state, groups, index = {}, [], 0
        key_of = self._key_of() if self.__dict__.get("_extra") else {}  # [Note: extra state]
        for gi, (group, opt, names) in enumerate(zip(self.param_groups, self._optimizers, self._fqns)):
            buffers, steps, _ = opt._get_state()
            ids = []
            for name in names:
                entry = self._torch_entry(gi, opt, name, buffers.get(name, {}), steps.get(name, 0))
                if key_of:
                    entry = self._with_extra(key_of.get((gi, name)), entry)
                if entry:  # (plain SGD keeps none)
                    state[index] = entry
                ids.append(index)
                index += 1
            groups.append(dict({k: v for k, v in group.items() if k != "params"}, params=ids))
        return {"state": state, "param_groups": groups}

    _derived_state = ()  # state_dict entries torch keeps that tessel recomputes (NAdam's mu_product)
    _state_order = ()  # a parameter's state entries in torch's order where it is not "step", then the buffers'

    def _torch_state(self, entry, opt, name):
        """Parameter `name`'s state_dict entry as torch's optimizer keeps it (hook for the subclasses; opt is the
        group's C++ optimizer)."""
        return entry

    def _torch_entry(self, gi, opt, name, buffers, step):
        """Parameter `name`'s state_dict entry in torch's layout from its C++ buffers and step count in group gi
        ({} while it has neither): "step" first, as torch's (Adam: step, exp_avg, exp_avg_sq)."""
        if not (buffers or step):
            return {}
        entry = dict(step=self._live_step(gi, name, step), **buffers)  # [Note: live steps]
        entry = self._torch_state(entry, opt, name)
        order = type(self)._state_order
        return dict([(k, entry[k]) for k in order if k in entry] + [(k, v) for k, v in entry.items() if k not in order])

    def _cpp_entry(self, entry):
        """(buffers, step count) of a torch-layout entry as the C++ optimizer keeps them. A buffer that is None is
        dropped: torch's momentum_buffer = None restarts it from the next gradient."""
        entry = {k: v for k, v in entry.items() if k not in self._derived_state and v is not None}
        # torch's SGD saves no "step": a saved momentum buffer means the parameter has stepped (its next step must
        # update that buffer, not start it over from the gradient)
        step = entry.pop("step", 1 if entry else 0)
        return entry, int(step.item() if isinstance(step, _C.Tensor) else step)

    def load_state_dict(self, state_dict):
        """Loads torch's layout (from state_dict()): per-parameter state by id and each group's options."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups (%d, the optimizer has "
                             "%d)" % (len(groups), len(self.param_groups)))
        for i, (saved, group) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group %d (%d vs %d parameters)" % (i, len(saved["params"]),
                                                                                 len(group["params"])))
        self._sync_groups()
        if self._python:
            return self._python_load_state_dict(state_dict)
        self.__dict__.pop("_live_steps", None)  # the loaded counts are the C++ optimizers' now
        self.__dict__.pop("_live_state", None)  # (torch's load_state_dict makes a new state dict)
        self.__dict__.pop("_extra", None)
        parts = [({}, {}) for _ in self._optimizers]  # per group: (buffers, steps) by name
        for group, saved in zip(self.param_groups, groups):
            for pid, p in zip(saved["params"], group["params"]):
                entry = state_dict["state"].get(pid, state_dict["state"].get(str(pid)))
                if entry is not None:
                    gi, name = self._where[hash(p)]
                    cpp, extra = self._split_entry(entry)
                    parts[gi][0][name], parts[gi][1][name] = self._cpp_entry(cpp)
                    self._set_extra(hash(p), _copied_containers(extra))
        self._replace_groups(groups)
        for group, opt, (buffers, steps) in zip(self.param_groups, self._optimizers, parts):
            opt._load_state(buffers, steps, self._hyper(group))

    def _replace_groups(self, saved_groups):
        """torch's load_state_dict: each group becomes a deep copy of the saved one (a tensor lr no longer shared
        with the optimizer saved, keys the saved group lacks gone) holding this optimizer's parameters, and its
        param_names unless the saved group has its own. The list itself stays (a wrapper such as
        PostLocalSGDOptimizer shares it)."""
        import copy
        new = []
        for group, saved in zip(self.param_groups, copy.deepcopy(list(saved_groups))):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new.append(saved)
        self.param_groups[:] = new

    def _python_state_dict(self):
        state, groups, index = {}, [], 0
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                entry = self._state.get(p)
                if entry:
                    state[index] = dict(entry)
                ids.append(index)
                index += 1
            groups.append(dict({k: v for k, v in group.items() if k != "params"}, params=ids))
        return {"state": state, "param_groups": groups}

    def _python_load_state_dict(self, state_dict):
        state = _ParamState()  # (torch's load replaces the whole state)
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            for pid, p in zip(saved["params"], group["params"]):
                entry = state_dict["state"].get(pid, state_dict["state"].get(str(pid)))
                if entry is not None:
                    state[p] = {k: _copied_containers(_loaded_value(p, v, k)) for k, v in entry.items()}
        self._state = state
        self._replace_groups(state_dict["param_groups"])

    # ---- checkpoints (tessel.distributed.checkpoint.state_dict, tessel.save / tessel.load) ----

    def _hyper_prefix(self, i):
        return "optim.hyper." if i == 0 else "optim.hyper.group%d." % i

    def _get_checkpoint_state(self, model, full_state_dict=False):
        """Every group's optimizer entries, merged; group i > 0's hyperparameters renamed."""
        if self._python:
            return self._python_checkpoint_state(model, full_state_dict)
        self._sync_groups()
        out = {}
        for i, opt in enumerate(self._optimizers):
            opt.hyper = self._hyper(self.param_groups[i])  # the state dict records the group's current values
            for k, v in _C._get_optimizer_state_dict(model, opt, full_state_dict).items():
                if k.startswith("optim.hyper."):
                    k = self._hyper_prefix(i) + k[len("optim.hyper."):]
                out[k] = v
        return out

    def _model_fqns(self, model):
        """Per group, its parameters' FQNs in `model` (the checkpoint's keys), matched by identity as torch does:
        parameters taken from a submodule (model[0].parameters()) carry that submodule's names ('weight')."""
        if self._python:
            names = {}
            for name, p in model.named_parameters():
                names.setdefault(hash(p), name)
            missing = [p for g in self.param_groups for p in g["params"] if hash(p) not in names]
            if missing:
                raise ValueError("%s: a parameter of shape %s is not in the model" % (type(self).__name__,
                                                                                    tuple(missing[0].shape)))
            return [[names[hash(p)] for p in g["params"]] for g in self.param_groups]
        self._sync_groups()
        return [_C._optimizer_param_fqns(model, opt) for opt in self._optimizers]

    def _python_checkpoint_state(self, model, full_state_dict):
        """A Python subclass's entries in tessel's flat layout: optim.state.<fqn>.<name> (optim.step.<fqn> for
        "step") and each group's numeric options (a tuple's items as <name>.<i>)."""
        out = {}
        for i, (group, fqns) in enumerate(zip(self.param_groups, self._model_fqns(model))):
            for p, fqn in zip(group["params"], fqns):
                for name, v in (self._state.get(p) or {}).items():
                    if full_state_dict and isinstance(v, _C.Tensor) and v.is_distributed:
                        v = v.full_tensor()
                    out[("optim.step." + fqn) if name == "step" else "optim.state.%s.%s" % (fqn, name)] = v
            for name, v in group.items():
                if isinstance(v, bool) or not isinstance(v, (numbers.Number, tuple)):
                    continue
                if isinstance(v, tuple):
                    out.update({"%s%s.%d" % (self._hyper_prefix(i), name, j): x for j, x in enumerate(v)})
                else:
                    out[self._hyper_prefix(i) + name] = v
        return out

    def _python_set_checkpoint_state(self, model, state_dict):
        params = {f: p for g, fqns in zip(self.param_groups, self._model_fqns(model))
                  for p, f in zip(g["params"], fqns)}
        for key, v in state_dict.items():
            fqn = _state_fqn(key)
            if fqn is not None:
                if fqn not in params:
                    raise ValueError("set_optimizer_state_dict: '%s' names no parameter of the optimizer" % key)
                name = "step" if key.startswith("optim.step.") else key.rsplit(".", 1)[1]
                self._state[params[fqn]][name] = _loaded_value(params[fqn], v, name)
        for i, group in enumerate(self.param_groups):
            prefix = self._hyper_prefix(i)
            for name, v in list(group.items()):
                if isinstance(v, tuple):
                    items = [state_dict.get("%s%s.%d" % (prefix, name, j)) for j in range(len(v))]
                    if all(x is not None for x in items):
                        group[name] = tuple(items)
                elif isinstance(v, numbers.Number) and not isinstance(v, bool) and prefix + name in state_dict:
                    group[name] = state_dict[prefix + name]

    def _set_checkpoint_state(self, model, state_dict):
        """Loads each group's entries (by its parameters' FQNs) and its hyperparameters into param_groups."""
        if self._python:
            return self._python_set_checkpoint_state(model, state_dict)
        group_of = {name: i for i, fqns in enumerate(self._model_fqns(model)) for name in fqns}
        parts = [{} for _ in self._optimizers]
        for k, v in state_dict.items():
            fqn = _state_fqn(k)
            if fqn is None:
                continue
            if fqn not in group_of:
                raise ValueError("set_optimizer_state_dict: '%s' names no parameter of the optimizer" % k)
            parts[group_of[fqn]][k] = v
        for i, (opt, part) in enumerate(zip(self._optimizers, parts)):
            prefix = self._hyper_prefix(i)
            for k, v in state_dict.items():
                if k.startswith(prefix) and "." not in k[len(prefix):]:
                    part["optim.hyper." + k[len(prefix):]] = v
            _C._set_optimizer_state_dict(model, opt, part)
            self._load_hyper(self.param_groups[i], opt.hyper)


class Adam(Optimizer):
    """torch.optim.Adam: weight_decay is an L2 term added to the gradient (grad + weight_decay · param) before
    the moments, or, with decoupled_weight_decay=True (AdamW), a decay of the parameter itself. Runs the C++
    AdamW: with the L2 form its decoupled decay is 0 and each step adds the L2 term to a copy of the gradient,
    putting the original .grad back afterwards (torch leaves .grad untouched too). amsgrad (the running maximum
    of exp_avg_sq in the denominator, state max_exp_avg_sq) and maximize as torch's."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        _check_lr(lr, foreach, capturable)
        _unsupported(type(self).__name__, capturable=capturable, differentiable=differentiable)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        self._decoupled = bool(decoupled_weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=bool(amsgrad), maximize=bool(maximize), foreach=foreach,
                                      capturable=False, differentiable=False, fused=fused,
                                      decoupled_weight_decay=self._decoupled))
        _no_fused_foreach(fused, foreach)

    def _decoupled_in(self, group):
        """The group's own decoupled_weight_decay (a param group may set it, as torch's), else the constructor's."""
        return bool(group.get("decoupled_weight_decay", self._decoupled))

    def _grad_transform(self, group):
        wd = float(group["weight_decay"])
        if self._decoupled_in(group) or wd == 0.0:
            return None
        return lambda p, g: g.add(p.detach(), alpha=wd)  # torch's grad.add(param, alpha=wd): one rounding

    def _hyper(self, g):
        b1, b2 = g["betas"]
        return {"lr": float(g["lr"]), "beta1": float(b1), "beta2": float(b2), "eps": float(g["eps"]),
                "weight_decay": float(g["weight_decay"]) if self._decoupled_in(g) else 0.0,
                "amsgrad": float(bool(g.get("amsgrad", False)))}

    def _load_hyper(self, g, h):
        g.update(lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
        if "amsgrad" in h:
            g["amsgrad"] = bool(h["amsgrad"])
        if self._decoupled_in(g):
            g["weight_decay"] = h["weight_decay"]

    def _make(self, named, g):
        h = self._hyper(g)
        h["amsgrad"] = bool(h["amsgrad"])
        return _C.AdamW(named, **h)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (a subclass of Adam, as in torch)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        _check_lr(lr)
        _unsupported("SGD", differentiable=differentiable)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=bool(maximize), foreach=foreach,
                                      differentiable=False, fused=fused))
        _no_fused_foreach(fused, foreach)

    @staticmethod
    def _hyper(g):
        return {"lr": float(g["lr"]), "momentum": float(g["momentum"]), "dampening": float(g["dampening"]),
                "weight_decay": float(g["weight_decay"]), "nesterov": float(bool(g["nesterov"]))}

    @staticmethod
    def _load_hyper(g, h):
        g.update(lr=h["lr"], momentum=h["momentum"], dampening=h["dampening"], weight_decay=h["weight_decay"],
                 nesterov=bool(h["nesterov"]))

    _torch_counts_steps = False  # torch's SGD state is the momentum buffer alone

    def _torch_state(self, entry, opt, name):
        entry.pop("step", None)  # torch's SGD counts no steps
        return entry

    @staticmethod
    def _make(named, g):
        return _C.SGD(named, lr=float(g["lr"]), momentum=float(g["momentum"]), dampening=float(g["dampening"]),
                      weight_decay=float(g["weight_decay"]), nesterov=bool(g["nesterov"]))


def _check_lr(lr, foreach=None, capturable=True):
    """torch's checks of a tensor lr (Adam's also refuses one with foreach=True and capturable=False)."""
    if isinstance(lr, _C.Tensor):
        if foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
        if lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")


def _no_fused_foreach(fused, foreach):
    if fused and foreach:  # (torch checks after the groups are built)
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def _unsupported(name, **flags):
    on = [k for k, v in flags.items() if v]
    if on:
        raise NotImplementedError("%s: %s not supported" % (name, ", ".join(on) + (" is" if len(on) == 1 else " are")))


class RMSprop(Optimizer):
    """torch.optim.RMSprop (alpha, eps, weight_decay as an L2 term, momentum, centered)."""

    _state_order = ("step", "square_avg", "momentum_buffer", "grad_avg")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_lr(lr)
        _unsupported("RMSprop", capturable=capturable, differentiable=differentiable)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=False, foreach=foreach,
                                      maximize=bool(maximize), differentiable=False))

    @staticmethod
    def _hyper(g):
        return {"lr": float(g["lr"]), "alpha": float(g["alpha"]), "eps": float(g["eps"]),
                "weight_decay": float(g["weight_decay"]), "momentum": float(g["momentum"]),
                "centered": float(bool(g["centered"]))}

    @staticmethod
    def _load_hyper(g, h):
        g.update(lr=h["lr"], alpha=h["alpha"], eps=h["eps"], weight_decay=h["weight_decay"], momentum=h["momentum"],
                 centered=bool(h["centered"]))

    @classmethod
    def _make(cls, named, g):
        h = cls._hyper(g)
        h["centered"] = bool(h["centered"])
        return _C.RMSprop(named, **h)


class Adagrad(Optimizer):
    """torch.optim.Adagrad (lr_decay, weight_decay as an L2 term, initial_accumulator_value, eps)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_lr(lr)
        _unsupported("Adagrad", differentiable=differentiable)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=bool(maximize), differentiable=False, fused=fused))
        _no_fused_foreach(fused, foreach)
        # torch creates the constructor's parameters' state here (state_dict() shows step 0 and the filled sum
        # before any step); groups added later get theirs at their first step
        from .._tensor import full_like
        for group in self.param_groups:
            for p in group["params"]:  # (a DTensor parameter's sum is a DTensor of its placements)
                self.state[p] = {"step": _C._full([], 0.0, _C.dtype.float32),
                                 "sum": full_like(p.detach(), float(initial_accumulator_value))}

    def _hyper(self, g):
        h = {k: float(g[k]) for k in ("lr", "lr_decay", "weight_decay", "eps")}
        # torch fills every parameter's sum with the constructor's value, whatever a group's own says
        h["initial_accumulator_value"] = float(self.defaults["initial_accumulator_value"])
        return h

    @staticmethod
    def _load_hyper(g, h):
        g.update({k: h[k] for k in ("lr", "lr_decay", "weight_decay", "eps")})

    def _make(self, named, g):
        return _C.Adagrad(named, **self._hyper(g))


class _AdamRelative(Optimizer):
    """Adamax / NAdam / RAdam: betas, eps, weight_decay (and the named extras) as torch's, one C++ optimizer per
    group (core/optim/adam_family.h)."""

    _extras = ()  # (name, default) beyond betas, eps and weight_decay

    def __init__(self, params, lr, betas, eps, weight_decay, flags, **extras):
        _check_lr(lr)
        name = type(self).__name__
        extras["maximize"] = bool(flags.pop("maximize", False))
        extras["foreach"] = flags.pop("foreach", None)
        _unsupported(name, **flags)
        extras.update(capturable=False, differentiable=False)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: %s" % eps)
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError("Invalid beta parameter at index %d: %s" % (i, b))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **extras))

    @classmethod
    def _hyper(cls, g):
        b1, b2 = g["betas"]
        h = {"lr": float(g["lr"]), "beta1": float(b1), "beta2": float(b2), "eps": float(g["eps"]),
             "weight_decay": float(g["weight_decay"])}
        h.update({k: float(g[k]) for k, _ in cls._extras})
        return h

    @classmethod
    def _load_hyper(cls, g, h):
        g.update(lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], weight_decay=h["weight_decay"])
        for k, default in cls._extras:
            g[k] = type(default)(h[k])

    @classmethod
    def _make(cls, named, g):
        h = cls._hyper(g)
        for k, default in cls._extras:
            h[k] = type(default)(h[k])
        return getattr(_C, cls.__name__)(named, **h)


class Adamax(_AdamRelative):
    """torch.optim.Adamax: exp_inf = max(β2·exp_inf, |g| + eps), p -= lr/(1-β1^t)·exp_avg/exp_inf."""

    _torch_keys = ("lr", "betas", "eps", "weight_decay", "foreach", "maximize", "differentiable", "capturable")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        super().__init__(params, lr, betas, eps, weight_decay,
                         dict(maximize=maximize, differentiable=differentiable, capturable=capturable, foreach=foreach))


class NAdam(_AdamRelative):
    """torch.optim.NAdam: Adam with Nesterov momentum, μ_t = β1·(1 - ½·0.96^(t·momentum_decay))."""

    _extras = (("momentum_decay", 4e-3), ("decoupled_weight_decay", False))
    _derived_state = ("mu_product",)  # rebuilt from the step count on load (core/optim/adam_family.h)
    _state_order = ("step", "mu_product")

    def _torch_state(self, entry, opt, name):
        """torch's entry: mu_product = Π_{i <= step} μ_i (the C++ optimizer's running product), step dtype."""
        entry["mu_product"] = _C._full([], opt.mu_product(name), _scalar_dtype())
        return entry

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        if not 0.0 <= momentum_decay:
            raise ValueError("Invalid momentum_decay value: %s" % momentum_decay)
        super().__init__(params, lr, betas, eps, weight_decay,
                         dict(maximize=maximize, differentiable=differentiable, capturable=capturable,
                              foreach=foreach),
                         momentum_decay=momentum_decay, decoupled_weight_decay=bool(decoupled_weight_decay))


class RAdam(_AdamRelative):
    """torch.optim.RAdam: Adam whose adaptive step is rectified by r_t once ρ_t > 5 (plain momentum before)."""

    _torch_keys = ("lr", "betas", "eps", "weight_decay", "maximize", "foreach", "capturable",
                   "decoupled_weight_decay", "differentiable")

    _extras = (("decoupled_weight_decay", False),)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        super().__init__(params, lr, betas, eps, weight_decay,
                         dict(maximize=maximize, differentiable=differentiable, capturable=capturable,
                              foreach=foreach),
                         decoupled_weight_decay=bool(decoupled_weight_decay))


class Adadelta(Optimizer):
    """torch.optim.Adadelta (rho, eps, weight_decay as an L2 term; lr scales the delta, 1.0 by default)."""

    _state_order = ("step", "square_avg", "acc_delta")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_lr(lr)
        _unsupported("Adadelta", capturable=capturable, differentiable=differentiable)
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: %s" % lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError("Invalid rho value: %s" % rho)
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: %s" % eps)
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=bool(maximize),
                                      capturable=False, foreach=foreach, differentiable=False))

    @staticmethod
    def _hyper(g):
        return {k: float(g[k]) for k in ("lr", "rho", "eps", "weight_decay")}

    @staticmethod
    def _load_hyper(g, h):
        g.update({k: h[k] for k in ("lr", "rho", "eps", "weight_decay")})

    @classmethod
    def _make(cls, named, g):
        return _C.Adadelta(named, **cls._hyper(g))


from ._muon import Muon  # noqa: E402 (a Python subclass of Optimizer above)
from ._rprop import Rprop  # noqa: E402 (likewise)
from ._asgd import ASGD  # noqa: E402 (likewise)
from ._adafactor import Adafactor  # noqa: E402 (likewise)
from ._lbfgs import LBFGS  # noqa: E402 (likewise: step(closure))
from . import swa_utils  # noqa: E402,F401 (AveragedModel: SWA and EMA of a model)



def _torch_submodules():
    """torch.optim's modules by class (torch.optim.optimizer.Optimizer, torch.optim.adam.Adam, ...), for the imports
    custom optimizers and training scripts write: `from torch.optim.optimizer import Optimizer, required`."""
    import sys
    import types
    members = {"optimizer": dict(Optimizer=Optimizer, required=required, ParamsT=object,
                                 register_optimizer_step_pre_hook=register_optimizer_step_pre_hook,
                                 register_optimizer_step_post_hook=register_optimizer_step_post_hook)}
    for cls in (Adam, AdamW, SGD, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, ASGD, Rprop, LBFGS, Adafactor):
        members[cls.__name__.lower()] = {cls.__name__: cls, "Optimizer": Optimizer}
    for name, attrs in members.items():
        module = types.ModuleType(__name__ + "." + name, "torch.optim.%s (tessel.optim's)" % name)
        module.__dict__.update(attrs)
        sys.modules[module.__name__] = module
        globals()[name] = module


_torch_submodules()
