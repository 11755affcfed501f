"""tessel.optim and tessel.optim.lr_scheduler against torch 2.15, from a read-only sweep of the optimizers and
schedulers: param_groups edited after construction (parameters appended or replaced, groups appended or removed)
are stepped as torch steps them, ReduceLROnPlateau follows groups added later, a subclass of a built-in optimizer
may keep any state, load_state_dict swaps in copies of the saved groups, `optimizer.state` is a dict, and torch's
warnings and argument checks. Each expected value below is what torch 2.15 computed for the same calls (pasted
from its output), never tessel's own.
"""
import collections
import warnings

import pytest

import tessel

O = tessel.optim
S = tessel.optim.lr_scheduler


def t(values, requires_grad=False):
    return tessel.tensor(values, requires_grad=requires_grad)


def close(got, want, tol=1e-6):
    got = got.tolist() if hasattr(got, "tolist") else got
    assert len(got) == len(want), (got, want)
    assert all(abs(a - b) <= tol * max(1.0, abs(b)) for a, b in zip(got, want)), (got, want)


# ---- 1. param_groups edited after construction ----

def test_a_parameter_appended_to_a_group_is_stepped():
    w, b = t([1.0, 1.0], True), t([1.0, 1.0], True)
    opt = O.SGD([w], lr=0.1)
    opt.param_groups[0]["params"].append(b)
    w.grad, b.grad = t([1.0, 1.0]), t([1.0, 1.0])
    opt.step()
    close(b, [0.8999999761581421, 0.8999999761581421])  # torch's


def test_a_group_dict_appended_to_param_groups_is_stepped():
    w, b = t([1.0, 1.0], True), t([1.0, 1.0], True)
    opt = O.Adam([w], lr=0.1)
    opt.param_groups.append(dict(opt.defaults, params=[b]))
    w.grad, b.grad = t([1.0, 1.0]), t([1.0, 1.0])
    opt.step()
    close(b, [0.9000000357627869, 0.9000000357627869])  # torch's


def test_a_replaced_parameter_is_stepped():
    w, w2 = t([1.0, 1.0], True), t([0.0, 0.0], True)
    opt = O.SGD([w], lr=0.1)
    opt.param_groups[0]["params"][0] = w2
    w.grad, w2.grad = t([1.0, 1.0]), t([1.0, 1.0])
    opt.step()
    close(w2, [-0.10000000149011612, -0.10000000149011612])  # torch's
    close(w, [1.0, 1.0])  # no longer optimized


def test_the_parameters_that_stay_keep_their_state_when_a_group_changes():
    w, b = t([1.0, 2.0], True), t([3.0], True)
    opt = O.SGD([w], lr=0.1, momentum=0.9)
    for _ in range(2):
        w.grad = t([1.0, -1.0])
        opt.step()
    opt.param_groups[0]["params"].append(b)
    for _ in range(2):
        w.grad, b.grad = t([1.0, -1.0]), t([2.0])
        opt.step()
    sd = opt.state_dict()
    # torch's
    close(w, [0.09509998559951782, 2.904899835586548])
    close(b, [2.419999837875366])
    assert sorted(sd["state"]) == [0, 1] and sd["param_groups"][0]["params"] == [0, 1]
    close(sd["state"][0]["momentum_buffer"], [3.438999891281128, -3.438999891281128])


def test_an_appended_adam_group_counts_its_own_steps():
    w, b = t([1.0, 2.0], True), t([3.0], True)
    opt = O.Adam([w], lr=0.1)
    w.grad = t([1.0, -1.0])
    opt.step()
    opt.param_groups.append(dict(opt.defaults, params=[b], lr=0.5))
    w.grad, b.grad = t([1.0, -1.0]), t([2.0])
    opt.step()
    sd = opt.state_dict()
    # torch's
    close(w, [0.800000011920929, 2.1999998092651367])
    close(b, [2.5])
    assert [float(sd["state"][i]["step"]) for i in (0, 1)] == [2.0, 1.0] and len(sd["param_groups"]) == 2


def test_a_group_removed_from_param_groups_is_no_longer_stepped():
    w, b = t([1.0], True), t([3.0], True)
    opt = O.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.5)
    w.grad, b.grad = t([1.0]), t([1.0])
    opt.step()
    del opt.param_groups[0]
    w.grad, b.grad = t([1.0]), t([1.0])
    opt.step()
    close(w, [0.8999999761581421])  # torch's
    close(b, [1.75])  # torch's: b's momentum buffer carried on (1.5 at the second step)


def test_zero_grad_and_state_reach_an_appended_parameter():
    w, b = t([1.0], True), t([3.0], True)
    opt = O.SGD([w], lr=0.1, momentum=0.9)
    opt.param_groups[0]["params"].append(b)
    b.grad = t([2.0])
    opt.step()
    close(opt.state[b]["momentum_buffer"], [2.0])  # torch's
    assert len(opt.state) == 1  # torch's: w had no gradient
    opt.zero_grad()
    assert b.grad is None


# ---- 2. ReduceLROnPlateau and groups added later ----

def _plateau_with_a_group_added(**kwargs):
    w, b = t([1.0], True), t([1.0], True)
    opt = O.SGD([w], lr=1.0)
    sched = S.ReduceLROnPlateau(opt, patience=0, **kwargs)
    opt.add_param_group({"params": [b], "lr": 0.5})
    return opt, sched


def test_reduce_lr_on_plateau_reduces_a_group_added_later():
    opt, sched = _plateau_with_a_group_added()
    sched.step(1.0)
    sched.step(2.0)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1, 0.05])  # torch's
    assert sched.min_lrs == [0, 0]


def test_reduce_lr_on_plateau_with_a_min_lr_list_refuses_a_group_added_later():
    opt, sched = _plateau_with_a_group_added(min_lr=[0.0])
    sched.step(1.0)
    with pytest.raises(RuntimeError, match=r"The number of param groups in the `optimizer` \(2\) differs from when "
                       r"`ReduceLROnPlateau` was initialized \(1\)"):  # torch's
        sched.step(2.0)


def test_reduce_lr_on_plateau_state_dict_is_torchs():
    w = t([1.0], True)
    sd = S.ReduceLROnPlateau(O.SGD([w], lr=1.0), mode="max", min_lr=0.01).state_dict()
    # torch's keys, in its order, and values
    assert list(sd) == ["factor", "default_min_lr", "min_lrs", "patience", "cooldown", "eps", "last_epoch", "_last_lr",
                        "mode_worse", "mode", "threshold", "threshold_mode", "best", "cooldown_counter",
                        "num_bad_epochs"]
    assert sd["default_min_lr"] == 0.01 and sd["min_lrs"] == [0.01] and sd["mode_worse"] == -float("inf")
    sd = S.ReduceLROnPlateau(O.SGD([w], lr=1.0), min_lr=[0.2]).state_dict()
    assert sd["default_min_lr"] is None and sd["mode_worse"] == float("inf") and sd["best"] == float("inf")


# ---- 3. a subclass of a built-in optimizer keeps any state ----

def test_a_subclass_step_may_keep_a_python_number_in_the_state():
    class MySGD(O.SGD):
        @tessel.no_grad()
        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    st = self.state[p]
                    st["n"] = st.get("n", 0) + 1
                    p.add_(p.grad, alpha=-g["lr"])

    w = t([1.0, 1.0], True)
    opt = MySGD([w], lr=0.1)
    w.grad = t([1.0, 1.0])
    opt.step()
    close(w, [0.8999999761581421, 0.8999999761581421])  # torch's
    assert opt.state[w]["n"] == 1 and opt.state_dict()["state"][0] == {"n": 1}


def test_a_subclass_of_sgd_may_count_steps_in_a_step_tensor():
    class MySGD(O.SGD):
        @tessel.no_grad()
        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    st = self.state[p]
                    if not st:
                        st["step"] = tessel.tensor(0.0)
                    st["step"] += 1
                    p.add_(p.grad, alpha=-g["lr"])

    w = t([1.0, 1.0], True)
    opt = MySGD([w], lr=0.1)
    w.grad = t([1.0, 1.0])
    opt.step()
    opt.step()
    close(w, [0.7999999523162842, 0.7999999523162842])  # torch's
    assert float(opt.state[w]["step"]) == 2.0


class _CountingAdam(O.Adam):
    def step(self, closure=None):
        loss = super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                st["calls"] = st.get("calls", 0) + 1
                st.setdefault("log", []).append(float(g["lr"]))
        return loss


def test_a_subclass_that_calls_the_built_in_step_keeps_its_own_entries_beside_the_buffers():
    w = t([1.0, -1.0], True)
    opt = _CountingAdam([w], lr=0.1)
    for _ in range(2):
        w.grad = t([0.5, 2.0])
        opt.step()
    # torch's
    close(w, [0.800000011920929, -1.2000000476837158])
    assert list(opt.state[w]) == ["step", "exp_avg", "exp_avg_sq", "calls", "log"]
    assert opt.state[w]["calls"] == 2 and opt.state[w]["log"] == pytest.approx([0.1, 0.1])
    sd = opt.state_dict()
    assert list(sd["state"][0]) == ["step", "exp_avg", "exp_avg_sq", "calls", "log"] and sd["state"][0]["calls"] == 2
    w2 = t([1.0, -1.0], True)
    o2 = _CountingAdam([w2], lr=0.1)
    o2.load_state_dict(sd)
    assert o2.state[w2]["calls"] == 2 and float(o2.state[w2]["step"]) == 2.0
    w2.grad = t([0.5, 2.0])
    o2.step()
    # torch's: the loaded state goes on; the list was copied by the load, so the first optimizer's is untouched
    close(w2, [0.8999999761581421, -1.100000023841858])
    assert o2.state[w2]["calls"] == 3 and float(o2.state[w2]["step"]) == 3.0
    assert len(opt.state[w]["log"]) == 2 and len(o2.state[w2]["log"]) == 3


# ---- 4. load_state_dict swaps in copies of the saved groups ----

def test_load_state_dict_copies_a_tensor_lr():
    w1, w2 = t([1.0], True), t([1.0], True)
    o1, o2 = O.SGD([w1], lr=tessel.tensor(0.1)), O.SGD([w2], lr=tessel.tensor(0.1))
    o2.load_state_dict(o1.state_dict())
    o2.param_groups[0]["lr"].fill_(0.5)
    assert float(o1.param_groups[0]["lr"]) == pytest.approx(0.10000000149011612)  # torch's


def test_load_state_dict_replaces_the_group_dicts():
    w1, w2 = t([1.0], True), t([1.0], True)
    o1 = O.SGD([w1], lr=0.1, momentum=0.9)
    o2 = O.SGD([{"params": [("w", w2)], "tag": "x"}], lr=0.3)
    old = o2.param_groups[0]
    o2.load_state_dict(o1.state_dict())
    g = o2.param_groups[0]
    # torch's: the saved group's keys in its order, this optimizer's parameters and names; "tag" gone
    assert list(g) == ["lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach",
                       "differentiable", "fused", "params", "param_names"]
    assert g is not old and g["params"][0] is w2 and g["param_names"] == ["w"]
    assert (g["lr"], g["momentum"]) == (0.1, 0.9)
    o1.param_groups[0]["lr"] = 7.0
    assert o2.param_groups[0]["lr"] == 0.1


def test_load_state_dict_of_a_python_optimizer_copies_the_groups_too():
    r1, r2 = t([1.0, 1.0], True), t([1.0, 1.0], True)
    p1 = O.Rprop([r1], lr=tessel.tensor(0.1))
    p2 = O.Rprop([{"params": [r2], "tag": 1}], lr=tessel.tensor(0.1))
    r1.grad = t([1.0, -1.0])
    p1.step()
    p2.load_state_dict(p1.state_dict())
    p2.param_groups[0]["lr"].fill_(0.5)
    # torch's
    assert float(p1.param_groups[0]["lr"]) == pytest.approx(0.10000000149011612)
    assert list(p2.param_groups[0]) == ["lr", "etas", "step_sizes", "foreach", "maximize", "differentiable",
                                        "capturable", "params"]
    r2.grad = t([1.0, -1.0])
    p2.step()
    close(r2, [0.8799999952316284, 1.1200000047683716])


# ---- 12. optimizer.state is a dict ----

@pytest.mark.parametrize("make", [lambda w: O.SGD([w], lr=0.1, momentum=0.9), lambda w: O.Rprop([w], lr=0.1)])
def test_optimizer_state_is_a_defaultdict(make):
    w = t([1.0, 2.0], True)
    opt = make(w)
    w.grad = t([1.0, 1.0])
    opt.step()
    st = opt.state
    # torch's: a defaultdict(dict), which dict-walking helpers recurse into
    assert isinstance(st, dict) and isinstance(st, collections.defaultdict) and st.default_factory is dict
    assert len(st) == 1 and bool(st) and w in st
    assert [k is w for k in dict(st)] == [True]

    def walk(x):
        return {k: walk(v) for k, v in x.items()} if isinstance(x, dict) else x
    walked = walk(st)
    assert len(walked) == 1 and set(next(iter(walked.values()))) == set(st[w])
    assert repr(st).startswith("defaultdict(<class 'dict'>, {tensor(")


# ---- 7. scheduler warnings ----

def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(w.category, str(w.message), w.filename) for w in caught]


def test_reduce_lr_on_plateau_warns_of_the_epoch_argument():
    w = t([1.0], True)
    sched = S.ReduceLROnPlateau(O.SGD([w], lr=1.0))
    got = _caught(lambda: sched.step(1.0, 3))
    # torch's
    assert [(c, m[:50]) for c, m, _ in got] == [(UserWarning, "The epoch parameter in `scheduler.step()` was not ")]
    assert got[0][2] == __file__ and sched.last_epoch == 3


def test_a_scheduler_warns_when_optimizer_step_was_replaced_after_it():
    w = t([1.0], True)
    opt = O.SGD([w], lr=1.0)
    sched = S.StepLR(opt, 1)
    opt.step = lambda *a, **k: None

    def steps():
        opt.step()
        sched.step()
    got = _caught(steps)
    # torch's
    assert [(c, m[:60]) for c, m, _ in got] == [(UserWarning,
                                                 "Seems like `optimizer.step()` has been overridden after lear")]
    assert got[0][2] == __file__
    sched = S.StepLR(O.SGD([w], lr=1.0), 1)  # not replaced, not stepped: the other warning
    got = _caught(sched.step)
    assert [(c, m[:60]) for c, m, _ in got] == [(UserWarning,  # torch's
                                                 "Detected call of `lr_scheduler.step()` before `optimizer.ste")]


# ---- 8. scheduler arguments checked as torch checks them ----

def _two_groups(**kwargs):
    w, b = t([1.0], True), t([1.0], True)
    return O.SGD([{"params": [w]}, {"params": [b]}], lr=1.0, **kwargs)


def test_multiplicative_lr_checks_its_lambdas():
    with pytest.raises(ValueError, match=r"Expected 2 lr_lambdas, but got 1"):  # torch's
        S.MultiplicativeLR(_two_groups(), [lambda e: 0.5])
    with pytest.raises(TypeError, match=r"lr_lambda should be a function, but got float"):  # torch's
        S.MultiplicativeLR(O.SGD([t([1.0], True)], lr=1.0), 0.5)


def test_one_cycle_lr_checks_the_length_of_max_lr():
    with pytest.raises(ValueError, match=r"max_lr must have the same length as optimizer.param_groups. max_lr has 1 "
                       r"values, param_groups has 2."):  # torch's
        S.OneCycleLR(_two_groups(momentum=0.9), max_lr=[1.0], total_steps=10)


# ---- 9. optimizer flag checks ----

@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_and_foreach_together_are_refused(name):
    with pytest.raises(RuntimeError, match=r"`fused` and `foreach` cannot be `True` together."):  # torch's
        getattr(O, name)([t([1.0], True)], fused=True, foreach=True)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_refuses_a_tensor_lr_with_foreach(name):
    with pytest.raises(ValueError, match=r"lr as a Tensor is not supported for capturable=False and foreach=True"):
        getattr(O, name)([t([1.0], True)], lr=tessel.tensor(0.01), foreach=True)  # torch's


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                                  "RAdam", "Rprop", "ASGD", "Adafactor", "LBFGS", "Muon"])
def test_a_tensor_lr_must_have_one_element(name):
    with pytest.raises(ValueError, match=r"Tensor lr must be 1-element"):  # torch's
        getattr(O, name)([t([[1.0]], True)], lr=tessel.tensor([0.1, 0.2]))


# ---- 11. set-typed params, non-leaf tensors that retain their gradient ----

_UNORDERED = ("optimizer parameters need to be organized in ordered collections, but the ordering of tensors in "
              "sets will change between runs. Please use a list instead.")  # torch's


def test_params_given_as_a_set_warn_and_a_set_group_is_refused():
    w = t([1.0], True)
    got = _caught(lambda: O.SGD({w}, lr=0.1))
    assert [(c, m) for c, m, _ in got] == [(FutureWarning, _UNORDERED + " This will be an error in a future "
                                            "release.")]  # torch's
    opt = O.SGD([w], lr=0.1)
    with pytest.raises(TypeError, match=r"optimizer parameters need to be organized in ordered collections"):
        opt.add_param_group({"params": {t([1.0], True)}})
    with pytest.raises(TypeError, match=r"Please use a list instead.$"):
        O.SGD([{"params": {t([1.0], True)}}], lr=0.1)


@pytest.mark.parametrize("name, want", [("SGD", [1.899999976158142, 1.7000000476837158]),  # torch's
                                        ("Adam", [1.899999976158142, 1.899999976158142]),
                                        ("Rprop", [1.899999976158142, 1.899999976158142])])
def test_a_non_leaf_that_retains_its_gradient_is_optimized(name, want):
    w = t([1.0, 1.0], True)
    h = w * 2
    h.retain_grad()
    opt = getattr(O, name)([h], lr=0.1)
    (h * t([1.0, 3.0])).sum().backward()
    opt.step()
    close(h, want)
    close(w.grad, [2.0, 6.0])
    with pytest.raises(ValueError, match=r"can't optimize a non-leaf Tensor"):  # torch's, without retain_grad
        getattr(O, name)([w * 2])


# ---- 14. scheduler state dicts and attributes as torch's ----

_PHASES = [{"end_step": 2.0, "start_lr": "initial_lr", "end_lr": "max_lr", "start_momentum": "max_momentum",
            "end_momentum": "base_momentum"},
           {"end_step": 9, "start_lr": "max_lr", "end_lr": "min_lr", "start_momentum": "base_momentum",
            "end_momentum": "max_momentum"}]  # torch's


def test_one_cycle_lr_state_dict_is_torchs():
    w = t([1.0], True)
    opt = O.SGD([w], lr=0.1, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    sd = sched.state_dict()
    # torch's keys in its order
    assert list(sd) == ["total_steps", "_schedule_phases", "_anneal_func_type", "cycle_momentum", "use_beta1",
                        "base_lrs", "last_epoch", "_step_count", "_is_initial", "_get_lr_called_within_step",
                        "_last_lr"]
    assert sd["_schedule_phases"] == _PHASES and sd["_anneal_func_type"] == "cos" and sd["use_beta1"] is False
    sd = S.OneCycleLR(O.Adam([w], lr=0.1), max_lr=1.0, total_steps=10, cycle_momentum=False,
                      anneal_strategy="linear").state_dict()
    assert "use_beta1" not in sd and sd["cycle_momentum"] is False and sd["_anneal_func_type"] == "linear"
    # a torch-written state dict loads, and the schedule goes on as torch's
    opt2 = O.SGD([t([1.0], True)], lr=0.1, momentum=0.9)
    again = S.OneCycleLR(opt2, max_lr=1.0, total_steps=10)
    for _ in range(3):
        opt.step()
        sched.step()
    again.load_state_dict(sched.state_dict())
    opt2.step()
    again.step()
    # torch's lr and momentum at step 4
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.8117456539497631, rel=1e-12)
    assert opt2.param_groups[0]["momentum"] == pytest.approx(0.8688255099070633, rel=1e-12)


def test_sequential_lr_and_warm_restarts_keep_torchs_attributes():
    w = t([1.0], True)
    opt = O.SGD([w], lr=0.1)
    a, b = S.ConstantLR(opt, factor=0.5, total_iters=2), S.ExponentialLR(opt, gamma=0.9)
    assert sorted(S.SequentialLR(opt, [a, b], milestones=[2]).state_dict()) == [
        "_last_lr", "_milestones", "_schedulers", "last_epoch"]  # torch's: no base_lrs
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=3)
    for _ in range(3):
        opt.step()
        sched.step()
    assert sched._step_count == 0  # torch's


def test_an_optimizer_has_its_hook_dicts_from_the_start():
    opt = O.SGD([t([1.0], True)], lr=0.1)
    for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                 "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                 "_optimizer_load_state_dict_post_hooks"):
        hooks = getattr(opt, name)  # torch's: empty OrderedDicts
        assert isinstance(hooks, collections.OrderedDict) and len(hooks) == 0


def test_resuming_a_scheduler_without_initial_lr_is_torchs_key_error():
    opt = O.SGD([t([1.0], True)], lr=0.1)
    with pytest.raises(KeyError) as info:
        S.StepLR(opt, 2, last_epoch=3)
    assert info.value.args[0].startswith("param 'initial_lr' is not specified in param_groups[0] when resuming "
                                         "scheduler with last_epoch >= 0.\nThis typically happens when:")  # torch's


# ---- 13. LBFGS state in torch's layout ----

def test_lbfgs_state_has_torchs_flat_layout():
    x, y = t([1.0, 2.0], True), tessel.tensor([[0.5], [-1.0]], requires_grad=True)
    opt = O.LBFGS([x, y], lr=1, max_iter=3, history_size=4)

    def closure():
        opt.zero_grad()
        loss = ((x - 3) ** 2).sum() + ((y * x.reshape(2, 1) - 1) ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
    st = opt.state[x]
    # torch's keys in its order; one flat vector over both parameters; 0-d H_diag, ro and al
    assert list(st) == ["func_evals", "n_iter", "al", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
                        "prev_flat_grad", "prev_loss"]
    assert tuple(st["d"].shape) == (4,) and tuple(st["prev_flat_grad"].shape) == (4,)
    assert st["H_diag"].dim() == 0 and [r.dim() for r in st["ro"]] == [0]
    assert len(st["al"]) == 4 and st["al"][0].dim() == 0 and st["al"][1:] == [None, None, None]
    # torch's values
    close(st["d"], [0.5723307132720947, 0.17359499633312225, 0.11795370280742645, 0.8899639844894409])
    close(st["prev_flat_grad"], [-3.9520421028137207, -0.7800569534301758, -0.8201541900634766, -6.535726547241211])
    close(st["old_dirs"][0], [0.5479578971862793, -4.780056953430176, 0.17984580993652344, 5.464273452758789])
    assert float(st["H_diag"]) == pytest.approx(0.07658760994672775, rel=1e-6)
    assert float(st["ro"][0]) == pytest.approx(0.24617239832878113, rel=1e-6)
    assert float(st["al"][0]) == pytest.approx(1.0752906799316406, rel=1e-6)
    assert st["t"] == 1 and st["prev_loss"] == pytest.approx(7.973749160766602, rel=1e-6)
    close(x, [1.7816330194473267, 1.9875484704971313])
    close(y.reshape(-1), [0.6644653677940369, 0.44810351729393005])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
