"""torch's optimizer state-dict layouts for get/set_optimizer_state_dict (tessel.distributed.checkpoint.state_dict).

torch's default, nested by parameter FQN:
    {"state": {fqn: {"step": tensor(5.), "exp_avg": ..., ...}},
     "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), ..., "params": [fqn, ...]}, ...]}
and with StateDictOptions(flatten_optimizer_state_dict=True) (torchtitan's choice): "state.<fqn>.<name>" and
"param_groups.<fqn>.<option>" for every parameter. Both come from tessel's internal per-optimizer entries
("optim.state.<fqn>.<name>", "optim.step.<fqn>", "optim.hyper.<name>": what the C++ optimizers load and
save) and the param_groups' own options, and load back through them; a load takes either layout, as torch's
does (a dict with "state" is nested, any other the flattened one). The step is torch's float32 0-d tensor.
"""
import numbers

from ... import _C

_STATE, _STEP, _HYPER = "optim.state.", "optim.step.", "optim.hyper."


def _step_out(v):
    return _C._full([], float(v), _C.dtype.float32) if not isinstance(v, _C.Tensor) else v


def _nadam_mu_product(options, step):
    """torch NAdam's state "mu_product", the product of its momentum coefficients mu_t = beta1 (1 - 0.5 *
    0.96^(t * momentum_decay)) over the steps taken, kept in float32 as torch's tensor (tessel's C++ NAdam
    rebuilds it from the step count, so its internal entries hold none; torch's checkpoints need it)."""
    import numpy as np
    beta1, decay = float(options["betas"][0]), float(options["momentum_decay"])
    product = np.float32(1.0)
    for t in range(1, int(float(step)) + 1):
        product = np.float32(product * np.float32(beta1 * (1.0 - 0.5 * 0.96 ** (t * decay))))
    return _C._full([], float(product), _C.dtype.float32)


def _step_in(key, v):
    if isinstance(v, _C.Tensor):
        if v.numel() != 1:
            raise ValueError("set_optimizer_state_dict: the step of '%s' is a tensor of shape %s, expected one value"
                             % (key, tuple(v.shape)))
        v = v.item()
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or float(v) != int(v):
        raise ValueError("set_optimizer_state_dict: the step of '%s' is %r, expected a whole number" % (key, v))
    return int(v)


def _groups(model, opt, internal):
    """[(parameter FQNs, options)] per param group: a tessel.optim optimizer's param_groups (torch's option
    names, "params" left out); a C++ optimizer's one group with its hyperparameters from `internal`."""
    if isinstance(opt, _C.Optimizer):
        hyper = {k[len(_HYPER):]: v for k, v in internal.items() if k.startswith(_HYPER) and "." not in k[len(_HYPER):]}
        return [(list(_C._optimizer_param_fqns(model, opt)), hyper)]
    return [(list(fqns), {k: v for k, v in g.items() if k != "params"})
            for g, fqns in zip(opt.param_groups, opt._model_fqns(model))]


def nested(model, opts, internals):
    """torch's nested optimizer state dict of `opts` from each one's internal entries (one merged dict for
    several optimizers: their states and their param_groups one after the other, as torch)."""
    from ...optim import _state_fqn
    state, groups = {}, []
    for opt, internal in zip(opts, internals):
        per = {}
        for k, v in internal.items():
            fqn = _state_fqn(k)
            if fqn is not None:
                entry = per.setdefault(fqn, {})
                if k.startswith(_STEP):
                    if getattr(opt, "_torch_counts_steps", True):  # torch's SGD state has no "step"
                        entry["step"] = _step_out(v)
                else:
                    entry[k.rsplit(".", 1)[1]] = v
        for fqns, options in _groups(model, opt, internal):
            groups.append(dict(options, params=list(fqns)))
            if type(opt).__name__ == "NAdam":
                for f in fqns:
                    if per.get(f) and "step" in per[f]:
                        per[f]["mu_product"] = _nadam_mu_product(options, per[f]["step"])
            for f in fqns:
                if f in state:
                    raise ValueError("optimizer state dict: parameter '%s' is in two of the optimizers" % f)
                if per.get(f):  # step first, then the buffers, as torch lists them (no entry without state:
                    # SGD without momentum, whose "step" torch does not keep)
                    state[f] = dict(sorted(per[f].items(), key=lambda kv: kv[0] != "step"))
    return {"state": state, "param_groups": groups}


def flatten(sd):
    """torch's _flatten_optim_state_dict: state.<fqn>.<name> and param_groups.<fqn>.<option>."""
    out = {"state.%s.%s" % (f, n): v for f, entry in sd["state"].items() for n, v in entry.items()}
    for g in sd["param_groups"]:
        for f in g["params"]:
            out.update({"param_groups.%s.%s" % (f, k): v for k, v in g.items() if k != "params"})
    return out


def unflatten(model, opts, flat):
    """The nested form of a flattened dict; the param groups are the optimizers' current ones, each taking
    the options saved for its first parameter."""
    state, options = {}, {}
    for k, v in flat.items():
        head, _, rest = k.partition(".")
        fqn, _, name = rest.rpartition(".")
        if head not in ("state", "param_groups") or not fqn:
            raise ValueError("set_optimizer_state_dict: '%s' is neither a nested optimizer state dict's 'state' / "
                             "'param_groups' nor a flattened entry (state.<fqn>.<name>, param_groups.<fqn>.<name>)"
                             % k)
        (state if head == "state" else options).setdefault(fqn, {})[name] = v
    groups = []
    for opt in opts:
        for fqns, _ in _groups(model, opt, {}):
            saved = next((options[f] for f in fqns if f in options), None)
            if saved is not None:
                groups.append(dict(saved, params=list(fqns)))
    return {"state": state, "param_groups": groups}


def load(model, opts, sd, optimizer_fqns):
    """Loads a nested dict into `opts`, taking their part of it as torch's _split_optim_state_dict does (the dict
    may be a superset: a whole model's, loaded into one pipeline stage's optimizer): each parameter's state into
    the optimizer that holds it, state of parameters no optimizer holds left out, and each saved param group's
    options into the group holding the first of its parameters that one of them holds (a group holding none
    is left out). A dict whose state, or whose param groups, name none of the optimizers' parameters while they
    have some is a ValueError naming a few (a model prefix that does not match, e.g. "module.", would load
    nothing)."""
    owner = {f: i for i, opt in enumerate(opts) for f in optimizer_fqns(model, opt)}
    parts = [{} for _ in opts]
    state = sd.get("state", {})
    if state and owner and not any(fqn in owner for fqn in state):
        raise ValueError("set_optimizer_state_dict: the state names none of the optimizer's parameters (saved: %s; "
                         "the optimizer's: %s)" % (sorted(state)[:3], sorted(owner)[:3]))
    for fqn, entries in state.items():
        if fqn not in owner:
            continue  # another stage's (or optimizer's) parameter
        if entries and "step" not in entries:  # torch's SGD: a saved momentum buffer means the parameter stepped
            parts[owner[fqn]][_STEP + fqn] = 1
        derived = getattr(opts[owner[fqn]], "_derived_state", ())  # (NAdam's mu_product: rebuilt from the step)
        for name, v in entries.items():
            if name in derived:
                continue
            if name == "step":
                parts[owner[fqn]][_STEP + fqn] = _step_in(fqn, v)
            else:
                parts[owner[fqn]]["%s%s.%s" % (_STATE, fqn, name)] = v
    saved_groups = [[] for _ in opts]
    named = [g for g in sd.get("param_groups", []) if g.get("params")]
    for g in named:
        held = next((f for f in g["params"] if f in owner), None)
        if held is not None:
            saved_groups[owner[held]].append((held, g))
    if named and owner and not any(saved_groups):
        raise ValueError("set_optimizer_state_dict: the param groups name none of the optimizer's parameters (saved: "
                         "%s; the optimizer's: %s)" % (named[0]["params"][:3], sorted(owner)[:3]))
    for opt, part, saved in zip(opts, parts, saved_groups):
        if isinstance(opt, _C.Optimizer):
            for _, g in saved:
                part.update({_HYPER + k: float(v) for k, v in g.items()
                             if k != "params" and isinstance(v, numbers.Real) and not isinstance(v, bool)})
            _C._set_optimizer_state_dict(model, opt, part)
            continue
        opt._set_checkpoint_state(model, part)
        group_of = {f: gi for gi, fqns in enumerate(opt._model_fqns(model)) for f in fqns}
        for held, g in saved:
            opt.param_groups[group_of[held]].update({k: v for k, v in g.items() if k != "params"})
