"""tessel.optim's parameter groups (split from optim/__init__.py by concept): how the constructor's params and
add_param_group's dict become groups (torch's checks), and how a built-in optimizer's per-group C++ optimizers
follow `param_groups` when it is edited in place.

torch's step() reads `group["params"]` and the `param_groups` list afresh every time, so a parameter appended to
a group, a parameter replaced in one, or a group dict appended to the list is stepped from then on. A built-in
tessel optimizer runs one C++ optimizer per group, built over the parameters it was given; GroupMethods keeps
what each was built over and, before the optimizer next reads its groups (step, zero_grad, state_dict, ...),
rebuilds the C++ optimizer of any group whose parameters changed, carrying the state of the parameters that
stayed (by identity, whichever group they are in now).
"""
from .. import _C


class _RequiredParameter:
    """torch.optim.optimizer.required: the default of an option a custom optimizer's caller must give."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _named(params, group_index):
    out = []
    for i, p in enumerate(params):
        if isinstance(p, tuple):
            name, p = p
        else:
            name = getattr(p, "_fqn", None) or "param_groups.%d.%d" % (group_index, i)
        if not isinstance(p, _C.Tensor):
            raise TypeError("optimizer can only optimize Tensors, got %s" % type(p).__name__)
        out.append((name, p))
    return out


_UNORDERED = ("optimizer parameters need to be organized in ordered collections, but the ordering of tensors in "
              "sets will change between runs. Please use a list instead.")


def _param_groups(params):
    """The constructor's params as a list of group dicts (a plain iterable of tensors is one group)."""
    if isinstance(params, _C.Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                        "but got a Tensor")
    if isinstance(params, set):  # (stacklevel: the optimizer class's __init__, as torch's)
        import warnings
        warnings.warn(_UNORDERED + " This will be an error in a future release.", FutureWarning, stacklevel=3)
    groups = list(params)
    if not groups:
        raise ValueError("optimizer got an empty parameter list")
    return groups if isinstance(groups[0], dict) else [{"params": groups}]


def _ids(params):
    return list(map(id, params))


class GroupMethods:
    """Optimizer's add_param_group and the bookkeeping that keeps its C++ optimizers on the live groups. Per
    group: self._optimizers[i] (None for a Python subclass), self._fqns[i] (its parameters' state names) and
    self._built[i] (the ids of the parameters it was built over, and those parameters, held so the ids stay
    theirs); self._where maps a parameter's hash to (group, name)."""

    def _new_group(self, param_group):
        """The group torch's add_param_group adds (its own options, the defaults for the rest) and its parameters,
        named; a parameter already in one of param_groups is a ValueError, as torch."""
        if not isinstance(param_group, dict):
            raise TypeError("param_group must be a dict, but got %s" % type(param_group).__name__)
        seen = {hash(p) for g in self.param_groups for p in g["params"]}  # hash is the tensor's identity
        # torch's key order: the group's own keys, its parameters' names when given named, then the defaults
        group = dict(param_group)
        ps = group["params"]
        if isinstance(ps, set):
            raise TypeError(_UNORDERED)
        given = group["params"] = ps = [ps] if isinstance(ps, _C.Tensor) else list(ps)  # (a generator: read once)
        if given and all(isinstance(x, tuple) for x in given):
            group["param_names"] = [n for n, _ in given]
        for key, value in self.defaults.items():
            group.setdefault(key, value)
            if isinstance(group[key], _RequiredParameter):  # a custom optimizer's `lr=required` left unset
                raise ValueError("parameter group didn't specify a value of required optimization parameter "
                                 + key)
        named = _named([ps] if isinstance(ps, _C.Tensor) else list(ps), len(self.param_groups))
        own = set()
        if len({hash(p) for _, p in named}) != len(named):
            # torch warns and keeps both (stepping the parameter twice, its issue 40967); tessel steps it once
            import warnings
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
            named = [(n, p) for n, p in named if not (hash(p) in own or own.add(hash(p)))]
            group["params"] = [p for _, p in named]
        for name, p in named:
            # torch: a non-leaf's gradient never lands in .grad (so it would never be updated) unless it retains it
            if not (p.is_leaf or p.retains_grad or self.defaults.get("differentiable")):
                raise ValueError("can't optimize a non-leaf Tensor")
            if hash(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group ('%s')" % name)
            seen.add(hash(p))
        return group, named

    def add_param_group(self, param_group):
        """torch's add_param_group (see _new_group): one more C++ optimizer."""
        self._sync_groups()  # (the groups edited before this one are rebuilt first: the new one's index is last)
        group, named = self._new_group(param_group)
        gi = len(self.param_groups)
        names = {n for fqns in self._fqns for n in fqns}
        for i, (name, p) in enumerate(named):
            # Names key the optimizer's state (checkpoints): parameters reached through attributes of
            # different modules share local names ('weight'), so a repeated name takes its position instead.
            if name in names:
                name = "param_groups.%d.%d" % (gi, i)
                named[i] = (name, p)
            names.add(name)
        self._optimizers.append(None if self._python else self._make(named, group))
        self._fqns.append([n for n, _ in named])
        self._where.update((hash(p), (gi, n)) for n, p in named)  # parameter -> (group, name): state[p]'s entry
        group["params"] = [p for _, p in named]
        self._built.append((_ids(group["params"]), list(group["params"])))
        self.param_groups.append(group)

    def _sync_groups(self):
        """Rebuilds the C++ optimizers of the groups whose parameters changed since they were built (a Python
        subclass reads param_groups itself). A group is compared by its parameters' identities, in order: one
        list of ids per group, cheap enough for every step."""
        if self._python:
            return
        groups, built = self.param_groups, self._built
        if len(groups) == len(built) and all(_ids(_as_list(g["params"])) == ids
                                              for g, (ids, _) in zip(groups, built)):
            return
        self._rebuild_groups()

    def _rebuild_groups(self):
        old_opts, old_where, old_fqns, old_built = self._optimizers, self._where, self._fqns, self._built
        groups = self.param_groups
        keep = [i < len(old_built) and _ids(_as_list(g["params"])) == old_built[i][0] for i, g in enumerate(groups)]
        taken = {n for i, k in enumerate(keep) if k for n in old_fqns[i]}
        optimizers, fqns, built = [], [], []
        where = {h: at for h, at in old_where.items() if at[0] < len(keep) and keep[at[0]]}
        for gi, group in enumerate(groups):
            params = _as_list(group["params"])
            if keep[gi]:
                optimizers.append(old_opts[gi])
                fqns.append(old_fqns[gi])
                built.append(old_built[gi])
                continue
            named, seen = [], set()
            for i, (name, p) in enumerate(_named(params, gi)):
                if hash(p) in seen:  # (a duplicate steps once, as the constructor's)
                    continue
                seen.add(hash(p))
                if hash(p) in old_where:  # a parameter that stays keeps its state's name
                    name = old_where[hash(p)][1]
                name = _free_name(name, gi, i, taken)
                named.append((name, p))
            opt = self._make(named, group)
            for name, p in named:  # the state of the parameters that were optimized before, wherever they were
                if hash(p) in old_where:
                    ogi, oname = old_where[hash(p)]
                    buffers, step = old_opts[ogi]._param_state(oname)
                    if buffers or step:
                        opt._load_param_state(name, buffers, step)
            optimizers.append(opt)
            fqns.append([n for n, _ in named])
            built.append((_ids(params), list(params)))
            where.update((hash(p), (gi, n)) for n, p in named)
        live = self.__dict__.get("_live_steps")  # [Note: live steps]: the step tensors handed out follow too
        if live:
            self._live_steps = {where[h]: live[old] for h, old in old_where.items()
                                if h in where and old in live}
        extra = self.__dict__.get("_extra")  # [Note: extra state]: that of the parameters that left goes
        if extra:
            self._extra = {h: v for h, v in extra.items() if h in where}
        self._optimizers, self._fqns, self._where, self._built = optimizers, fqns, where, built


def _as_list(params):
    return [params] if isinstance(params, _C.Tensor) else params


def _free_name(name, gi, i, taken):
    """name, or the parameter's position when another parameter's state has that name already."""
    if name in taken:
        name = "param_groups.%d.%d" % (gi, i)
        while name in taken:
            name += "'"
    taken.add(name)
    return name
