"""torch.optim behaviours found by running the same optimizer and scheduler code under torch 2.15 and tessel:
schedulers resumed with last_epoch keep the resumed lr, per-group options, torch's optimizer hooks and module
layout. Expected values: closed forms (lr schedules, Adam's update) computed here."""
import math
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.optim import lr_scheduler as S


def _resumed(make):
    p = tessel.zeros(2, requires_grad=True)
    opt = tessel.optim.SGD([p], lr=1.0)
    opt.param_groups[0]["initial_lr"] = 1.0
    sched = make(opt)  # torch's resume pattern: the group holds the resumed lr, the scheduler last_epoch=3
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(3):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def test_schedulers_built_with_last_epoch_keep_the_resumed_lr_then_continue():
    assert _resumed(lambda o: S.ExponentialLR(o, 0.5, last_epoch=3)) == [1.0, 0.5, 0.25, 0.125]
    assert _resumed(lambda o: S.MultiplicativeLR(o, lambda e: 0.5, last_epoch=3)) == [1.0, 0.5, 0.25, 0.125]
    # (the constructor's initial step counts: last_epoch is 4 after it, so the first user step is epoch 5)
    cos = _resumed(lambda o: S.CosineAnnealingLR(o, T_max=10, last_epoch=3))
    ratio = [(1 + math.cos(math.pi * e / 10)) / (1 + math.cos(math.pi * (e - 1) / 10)) for e in (5, 6, 7)]
    np.testing.assert_allclose(cos, [1.0, ratio[0], ratio[0] * ratio[1], ratio[0] * ratio[1] * ratio[2]])
    poly = _resumed(lambda o: S.PolynomialLR(o, total_iters=10, power=1.0, last_epoch=3))
    np.testing.assert_allclose(poly, [1.0, 5 / 6, 4 / 6, 3 / 6])
    linear = _resumed(lambda o: S.LinearLR(o, 0.5, 1.0, total_iters=10, last_epoch=3))
    f = [1 + 0.5 / (10 * 0.5 + (e - 1) * 0.5) for e in (5, 6, 7)]
    np.testing.assert_allclose(linear, [1.0, f[0], f[0] * f[1], f[0] * f[1] * f[2]])
    fresh = _resumed(lambda o: S.ExponentialLR(o, 0.5))  # a fresh scheduler: unchanged
    assert fresh == [1.0, 0.5, 0.25, 0.125]


def test_scheduler_warnings_and_checks_as_torch():
    p = tessel.zeros(1, requires_grad=True)
    opt = tessel.optim.SGD([p], lr=1.0)
    seq = S.SequentialLR(opt, [S.ConstantLR(opt, 0.5, total_iters=2), S.ExponentialLR(opt, 0.9)], milestones=[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no epoch-argument warning at the milestone (torch restarts quietly)
        for _ in range(4):
            opt.step()
            seq.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.81)
    step = S.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        step.get_lr()
    two = tessel.optim.SGD([{"params": [p]}, {"params": [tessel.zeros(1, requires_grad=True)]}], lr=1.0)
    with pytest.raises(ValueError, match="expected 2 min_lrs, got 1"):
        S.ReduceLROnPlateau(two, min_lr=[0.1])


def test_adam_reads_decoupled_weight_decay_per_param_group():
    a = nn.Parameter(tessel.tensor([1.0, -2.0]))
    b = nn.Parameter(tessel.tensor([1.0, -2.0]))
    opt = tessel.optim.Adam([{"params": [a], "decoupled_weight_decay": True}, {"params": [b]}], lr=0.1,
                            weight_decay=0.5)
    for p in (a, b):
        p.grad = tessel.tensor([0.5, 0.5])
    opt.step()
    # Adam's first step moves by lr * sign(gradient) (m_hat / sqrt(v_hat) = g / |g|); decoupled decay first
    # shrinks the parameter by lr * wd; L2 decay adds wd * p to the gradient instead
    np.testing.assert_allclose(a.detach().numpy(), np.array([1.0, -2.0]) * (1 - 0.05) - 0.1 * np.sign([0.5, 0.5]),
                               rtol=1e-6)
    g = np.array([0.5, 0.5]) + 0.5 * np.array([1.0, -2.0])
    np.testing.assert_allclose(b.detach().numpy(), np.array([1.0, -2.0]) - 0.1 * np.sign(g), rtol=1e-6)


def test_scalar_state_follows_the_default_dtype():
    previous = tessel.get_default_dtype()
    tessel.set_default_dtype(tessel.float64)
    try:
        p = nn.Parameter(tessel.ones(2))
        opt = tessel.optim.ASGD([p], lr=0.1)
        p.grad = tessel.ones(2)
        opt.step()
        state = opt.state[p]
        assert state["step"].dtype == state["eta"].dtype == state["mu"].dtype == tessel.float64
        assert state["eta"].item() == 0.1 / (1 + 1e-4 * 0.1 * 1) ** 0.75  # not rounded through float32
    finally:
        tessel.set_default_dtype(previous)


def test_optimizer_hooks_run_in_torchs_order_and_can_rewrite_arguments_and_state_dicts():
    from tessel.optim.optimizer import Optimizer, register_optimizer_step_pre_hook, required
    p = nn.Parameter(tessel.ones(1))
    opt = tessel.optim.SGD([p], lr=0.1)
    assert isinstance(opt, Optimizer) and repr(required) == "<required parameter>"
    calls = []
    handles = [register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre")),
               opt.register_step_pre_hook(lambda o, a, k: calls.append("pre")),
               opt.register_step_post_hook(lambda o, a, k: calls.append("post")),
               tessel.optim.register_optimizer_step_post_hook(lambda o, a, k: calls.append("global post"))]
    p.grad = tessel.ones(1)
    opt.step()
    assert calls == ["global pre", "pre", "post", "global post"]
    for h in handles:
        h.remove()
    opt.step()
    assert len(calls) == 4
    opt.register_state_dict_post_hook(lambda o, sd: dict(sd, note="added"))
    opt.register_load_state_dict_pre_hook(lambda o, sd: {k: v for k, v in sd.items() if k != "note"})
    seen = []
    opt.register_load_state_dict_post_hook(lambda o: seen.append("loaded"))
    sd = opt.state_dict()
    assert sd["note"] == "added"
    opt.load_state_dict(sd)
    assert seen == ["loaded"] and isinstance(opt.state[p], dict)
    from tessel.optim.adam import Adam
    assert Adam is tessel.optim.Adam


def test_lbfgs_reads_its_losses_without_the_requires_grad_warning_and_empty_clipping_is_default_dtype():
    model = nn.Linear(2, 1)
    opt = tessel.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    x, y = tessel.ones(4, 2), tessel.zeros(4, 1)

    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's step reads the loss under no_grad: no warning
        opt.step(closure)
    previous = tessel.get_default_dtype()
    tessel.set_default_dtype(tessel.float64)
    try:
        empty = tessel.nn.utils.clip_grad_norm_([nn.Parameter(tessel.ones(1))], 1.0)
        assert empty.dtype == tessel.float64 and empty.item() == 0.0
    finally:
        tessel.set_default_dtype(previous)


def test_state_dict_step_tensors_are_live_and_an_edited_step_is_used():
    # torch's state["step"] is incremented in place: a state_dict() kept across steps shows the current count,
    # and an edit of it is what the next step uses (Adam's bias correction)
    w = nn.Parameter(tessel.tensor([1.0]))
    opt = tessel.optim.Adam([w], lr=0.1)
    w.grad = tessel.tensor([1.0])
    opt.step()
    kept = opt.state_dict()
    opt.step()
    assert kept["state"][0]["step"].item() == 2.0
    opt.state[w]["step"].fill_(100.0)
    before, m, v = w.item(), opt.state[w]["exp_avg"].item(), opt.state[w]["exp_avg_sq"].item()
    opt.step()  # step 101: m and v updated with g = 1, bias corrections at 101
    m, v = 0.9 * m + 0.1, 0.999 * v + 0.001
    want = before - 0.1 * (m / (1 - 0.9 ** 101)) / (math.sqrt(v / (1 - 0.999 ** 101)) + 1e-8)
    assert w.item() == pytest.approx(want, rel=1e-6) and opt.state[w]["step"].item() == 101.0


def test_warm_restarts_resumed_several_periods_on_and_torchs_scheduler_checks():
    # torch's values (repro of the optimizer sweep): T_cur resumed at 5 with periods 2, 4, 8 is taken modulo
    p = tessel.tensor([1.0], requires_grad=True)
    opt = tessel.optim.SGD([p], lr=0.1)
    opt.param_groups[0]["initial_lr"] = 0.1
    s = S.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=0.001, last_epoch=5)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(4):
        opt.step()
        s.step()
        lrs.append(round(opt.param_groups[0]["lr"], 6))
    assert lrs == [0.1, 0.085502, 0.0505, 0.015498, 0.1] and (s.T_cur, s.T_i) == (0, 8)
    with pytest.raises(ValueError, match="Expected positive integer total_steps, but got 0"):
        S.OneCycleLR(opt, max_lr=1.0, total_steps=0)
    with pytest.raises(ValueError, match="Expected float between 0 and 1 pct_start, but got 1.5"):
        S.OneCycleLR(opt, max_lr=1.0, total_steps=10, pct_start=1.5)
    other = tessel.optim.SGD([tessel.tensor([1.0], requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(other, 2)], milestones=[3])


def test_clip_grad_norm_with_a_nan_gradient_scales_every_gradient_by_nan_as_torch():
    for norm_type in (1.0, 3.0, float("inf"), 0.5):
        a, b = tessel.tensor([1.0, 2.0], requires_grad=True), tessel.tensor([3.0], requires_grad=True)
        a.grad, b.grad = tessel.tensor([float("nan"), 1.0]), tessel.tensor([2.0])
        total = nn.utils.clip_grad_norm_([a, b], 1.0, norm_type=norm_type)
        assert math.isnan(total.item()), norm_type
        assert all(math.isnan(v) for v in a.grad.tolist() + b.grad.tolist()), norm_type  # left unscaled before


def _adam_after(edit):
    """Adam over [1, 2] and [3] (loss Σp0² + 2Σp1²): two steps, `edit(opt, p0, p1)`, one more step; the parameters
    and each state entry's step. Expected values are torch 2.15's."""
    p0, p1 = tessel.nn.Parameter(tessel.tensor([1.0, 2.0])), tessel.nn.Parameter(tessel.tensor([3.0]))
    opt = tessel.optim.Adam([p0, p1], lr=0.1)

    def step():
        opt.zero_grad()
        ((p0 * p0).sum() + (p1 * p1 * 2).sum()).backward()
        opt.step()
    step()
    step()
    edit(opt, p0, p1)
    step()
    return ([round(v, 6) for v in p0.tolist() + p1.tolist()],
            {i: float(e["step"]) for i, e in opt.state_dict()["state"].items()})


def test_writes_to_a_built_in_optimizers_state_reach_it_as_torchs():
    # opt.state was a snapshot: `del opt.state[p]`, `opt.state[p] = ...` and entry assignments were dropped, and
    # `opt.state = defaultdict(dict)` (resetting an optimizer) raised AttributeError.
    import collections
    untouched = ([0.701586, 1.700623, 2.700382], {0: 3.0, 1: 3.0})
    assert _adam_after(lambda o, p0, p1: None) == untouched
    fresh_p0 = ([0.700412, 1.700166, 2.700382], {0: 1.0, 1: 3.0})  # p0 starts over at its next step

    def delete(o, p0, p1):
        del o.state[p0]
    assert _adam_after(delete) == fresh_p0
    assert _adam_after(lambda o, p0, p1: o.state.__setitem__(p0, {})) == fresh_p0

    def reset(o, p0, p1):
        o.state = collections.defaultdict(dict)
    assert _adam_after(reset) == ([0.700412, 1.700166, 2.700103], {0: 1.0, 1: 1.0})
    zeroed = ([0.701586, 1.700623, 2.764487], {0: 3.0, 1: 3.0})
    assert _adam_after(lambda o, p0, p1: o.state[p1]["exp_avg"].zero_()) == zeroed
    assert _adam_after(lambda o, p0, p1: o.state[p1].__setitem__("exp_avg", tessel.zeros(1))) == zeroed


def test_a_loaded_state_dict_without_a_parameters_entry_starts_it_over():
    # load_state_dict kept the parameter's old moments while its step count went to 0, so its next step bias-
    # corrected the old moments as a first step (p0 read 0.64571 where torch gives 0.700412)
    def load_without_p0(o, p0, p1):
        sd = o.state_dict()
        sd["state"] = {k: v for k, v in sd["state"].items() if k != 0}
        o.load_state_dict(sd)
    assert _adam_after(load_without_p0) == ([0.700412, 1.700166, 2.700382], {0: 1.0, 1: 3.0})


def test_an_sgd_momentum_buffer_set_to_none_restarts_from_the_next_gradient():
    # torch accepts state[p]["momentum_buffer"] = None and starts the buffer over; the write-through raised TypeError
    p = tessel.nn.Parameter(tessel.tensor([1.0, 2.0]))
    opt = tessel.optim.SGD([p], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    opt.state[p]["momentum_buffer"] = None
    before = p.tolist()
    opt.zero_grad()
    (p * p).sum().backward()
    opt.step()  # a fresh buffer is the gradient itself: p - 0.1 * 2p
    assert p.tolist() == pytest.approx([v - 0.1 * 2 * v for v in before], rel=1e-6)


def _sgd_momentum(n):
    ps = [tessel.nn.Parameter(tessel.tensor([float(i + 1), 1.0])) for i in range(n)]
    opt = tessel.optim.SGD(ps, lr=0.1, momentum=0.5)
    opt.zero_grad()
    sum((p * p).sum() for p in ps).backward()
    opt.step()
    return ps, opt


def test_a_state_entry_written_then_edited_in_place_is_what_the_next_step_uses():
    # torch's state keeps the written tensor, so an in-place edit through the entry reaches the step; the entry
    # kept the caller's tensor after its value was copied into the optimizer, and later edits were lost
    ps, opt = _sgd_momentum(2)
    st = opt.state[ps[0]]
    st["momentum_buffer"] = tessel.ones(2)
    st["momentum_buffer"].mul_(3.0)
    before = ps[0].tolist()
    opt.zero_grad()
    sum((p * p).sum() for p in ps).backward()
    opt.step()  # buf = 0.5 * 3 + 2p, p -= 0.1 * buf
    assert ps[0].tolist() == pytest.approx([v - 0.1 * (1.5 + 2 * v) for v in before], rel=1e-6)


def test_a_step_tensor_written_into_the_state_is_the_live_one_and_other_entries_stay_live():
    # torch increments state["step"] in place: a tensor written there counts on. A write reloaded the whole state,
    # which also detached the step tensors state_dict() had handed out for the other parameters.
    p0, p1 = tessel.nn.Parameter(tessel.ones(2)), tessel.nn.Parameter(tessel.ones(2))
    opt = tessel.optim.Adam([p0, p1], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        ((p0 * p0).sum() + (p1 * p1).sum()).backward()
        opt.step()
    other = opt.state_dict()["state"][1]["step"]
    mine = tessel.tensor(5.0)
    opt.state[p0]["step"] = mine
    opt.zero_grad()
    ((p0 * p0).sum() + (p1 * p1).sum()).backward()
    opt.step()
    assert (mine.item(), other.item()) == (6.0, 3.0)
    assert opt.state_dict()["state"][0]["step"].item() == 6.0


def test_state_entries_are_read_and_written_per_parameter():
    # every opt.state access rebuilt the whole state dict (a new object each time) and every write loaded it
    # back: a loop over the parameters' entries did quadratic work. As torch's, opt.state is now one dict whose
    # entries keep their identity, a key that is not one of the optimizer's parameters is a plain entry, and a
    # deleted entry is gone from the optimizer alone.
    ps, opt = _sgd_momentum(3)
    stranger = tessel.nn.Parameter(tessel.zeros(2))
    state = opt.state
    ids = lambda keys: [id(k) for k in keys]  # noqa: E731
    assert stranger not in state and len(state) == 3 and ids(state) == ids(ps)
    assert opt.state is state and opt.state[ps[0]] is state[ps[0]]
    del state[ps[1]]
    assert ids(opt.state) == ids([ps[0], ps[2]]) and opt.state_dict()["state"].keys() == {0, 2}
    state[stranger]["x"] = 1  # a defaultdict entry of its own, not written to the optimizer
    assert ids(opt.state) == ids([ps[0], ps[2], stranger]) and opt.state[stranger] == {"x": 1}
    with pytest.raises(KeyError):
        del opt.state[ps[1]]


def test_every_dict_mutator_of_a_state_entry_reaches_the_optimizer():
    # update / pop / setdefault / clear on opt.state[p] bypassed the write-through (only [k] = v and del did): the
    # next read put the optimizer's old buffers back
    for mutate, expect in ((lambda st: st.update(momentum_buffer=tessel.full((2,), 3.0)), 0.5 * 3.0),
                           (lambda st: st.pop("momentum_buffer"), 0.0),
                           (lambda st: st.clear(), 0.0)):
        ps, opt = _sgd_momentum(1)
        before = ps[0].tolist()
        mutate(opt.state[ps[0]])
        opt.zero_grad()
        (ps[0] * ps[0]).sum().backward()
        opt.step()  # buf = 0.5 * written (or a fresh buffer: the gradient alone) + 2p
        assert ps[0].tolist() == pytest.approx([v - 0.1 * (expect + 2 * v) for v in before], rel=1e-6)

def _params(seed=0, dtype=tessel.float64):
    rng = np.random.default_rng(seed)
    return [nn.Parameter(tessel.tensor(rng.standard_normal(shape), dtype=dtype)) for shape in ((2, 3), (3,), (1, 2))]


def _grads(params, seed):
    rng = np.random.default_rng(100 + seed)
    for p in params:
        p.grad = tessel.tensor(rng.standard_normal(tuple(p.shape)), dtype=p.dtype)


def test_step_with_a_closure_under_no_grad_computes_the_loss_with_grad_mode_on():
    """torch runs step(closure) with grad enabled; tessel's built-in optimizers called the closure as it was (a
    training loop's no_grad around the step made its backward raise)."""
    w = nn.Parameter(tessel.tensor([1.0, 2.0], dtype=tessel.float64))
    opt = tessel.optim.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with tessel.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 5.0
    assert w.tolist() == [1.0 - 0.1 * 2.0, 2.0 - 0.1 * 4.0]


def test_a_required_option_left_unset_is_torchs_value_error():
    from tessel.optim.optimizer import Optimizer, required

    class Custom(Optimizer):
        def __init__(self, params, lr=required):
            super().__init__(params, dict(lr=lr))

    with pytest.raises(ValueError, match="didn't specify a value of required optimization parameter lr"):
        Custom(_params())
    opt = Custom(_params()[:1], lr=0.5)
    opt.add_param_group({"params": _params()[1:]})  # the constructor's lr is the default
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]


def test_total_norms_of_order_zero_and_negative_orders_are_torchs_vector_norms():
    """get_total_norm rejected norm_type 0 and negative orders, clip_grad_norm_ negative ones; torch computes
    vector_norm's: the count of nonzero tensors for 0, (sum |x|^p)^(1/p) for p < 0."""
    values = [np.array([0.5, -2.0, 0.0]), np.array([0.0, 0.0]), np.array([1.5])]
    grads = [tessel.tensor(v) for v in values]
    U = tessel.nn.utils
    assert U.get_total_norm(grads, norm_type=0).item() == 2.0
    nonzero = np.concatenate(values)
    expected = float(np.sum(np.abs(np.array([0.5, -2.0, 1.5])) ** -1.0) ** -1.0)
    assert U.get_total_norm([tessel.tensor(v) for v in (values[0][:2], values[2])], norm_type=-1).item() == \
        pytest.approx(expected, rel=1e-12)
    assert U.get_total_norm(grads, norm_type=-1).item() == 0.0  # a zero element: |0|^-1 is inf, the norm 0
    ps = [nn.Parameter(tessel.zeros(2, dtype=tessel.float64)), nn.Parameter(tessel.zeros(1, dtype=tessel.float64))]
    ps[0].grad = tessel.tensor([0.5, -2.0], dtype=tessel.float64)
    ps[1].grad = tessel.tensor([1.5], dtype=tessel.float64)
    total = U.clip_grad_norm_(ps, max_norm=100.0, norm_type=-2.5)
    assert total.item() == pytest.approx(float(np.sum(np.abs(nonzero[nonzero != 0]) ** -2.5) ** (1 / -2.5)), rel=1e-12)
    assert ps[0].grad.tolist() == [0.5, -2.0]  # below max_norm: unchanged


def test_adagrad_fills_every_sum_with_the_constructors_initial_accumulator_value_at_construction():
    """torch: state (step 0, sum = initial_accumulator_value) for the constructor's parameters in __init__, and
    the constructor's value for every group, a group's own initial_accumulator_value and later groups
    included. tessel used each group's value and made the state at the first step."""
    ps = _params()
    opt = tessel.optim.Adagrad([{"params": ps[:1]}, {"params": ps[1:2], "initial_accumulator_value": 0.5}],
                               lr=0.1, initial_accumulator_value=0.25)
    assert len(opt.state) == 2
    assert opt.state_dict()["state"][1]["step"].item() == 0.0
    assert opt.state[ps[1]]["sum"].tolist() == [0.25] * 3
    _grads(ps, 0)
    g1 = ps[1].grad.clone()
    before = ps[1].detach().clone()
    opt.step()
    assert np.allclose(opt.state[ps[1]]["sum"].numpy(), 0.25 + g1.numpy() ** 2, rtol=0, atol=1e-15)
    assert np.allclose(ps[1].detach().numpy(), before.numpy() - 0.1 * g1.numpy() / (np.sqrt(0.25 + g1.numpy() ** 2)
                                                                                   + 1e-10), rtol=1e-12)
    opt.add_param_group({"params": ps[2:], "initial_accumulator_value": 1.0})
    _grads(ps, 1)
    g2 = ps[2].grad.clone()
    opt.step()
    assert np.allclose(opt.state[ps[2]]["sum"].numpy(), 0.25 + g2.numpy() ** 2, rtol=0, atol=1e-15)


def test_python_optimizers_cast_loaded_state_to_the_parameters_dtype():
    """torch's load_state_dict casts floating state (not step) to the parameter's dtype; Rprop / ASGD /
    Adafactor kept float32 state for float64 parameters (Adafactor then raised at its next step)."""
    for cls in (tessel.optim.Rprop, tessel.optim.ASGD, tessel.optim.Adafactor):
        ps32, ps64 = _params(dtype=tessel.float32), _params(dtype=tessel.float64)
        src = cls(ps32, lr=0.01)
        _grads(ps32, 0)
        src.step()
        dst = cls(ps64, lr=0.01)
        dst.load_state_dict(src.state_dict())
        for p in ps64:
            for key, value in dst.state[p].items():
                if isinstance(value, tessel.Tensor) and value.is_floating_point() and key != "step":
                    assert value.dtype == tessel.float64, (cls.__name__, key)
        _grads(ps64, 1)
        dst.step()


def test_lbfgs_continues_from_a_state_in_torchs_flat_layout():
    """torch's LBFGS state holds d, prev_flat_grad and the history as flat vectors over every parameter; tessel's
    per-parameter lists read those as garbage (a torch checkpoint went off: p 0.74 -> 50.8). Loaded into tessel
    in torch's layout, the run continues exactly as the original."""
    def rosen(ps):
        x = tessel.cat([p.reshape(-1) for p in ps])
        return ((1 - x[:-1]) ** 2 + 10 * (x[1:] - x[:-1] ** 2) ** 2).sum()

    def run(ps, opt, steps):
        def closure():
            opt.zero_grad()
            loss = rosen(ps)
            loss.backward()
            return loss
        return [opt.step(closure).item() for _ in range(steps)]

    ps = _params()
    opt = tessel.optim.LBFGS(ps, history_size=3, max_iter=4)
    run(ps, opt, 2)
    sd = opt.state_dict()
    flat = dict(sd["state"][0])
    cat = lambda vs: tessel.cat([v.reshape(-1) for v in vs])  # noqa: E731
    flat["d"], flat["prev_flat_grad"] = cat(flat["d"]), cat(flat["prev_flat_grad"])
    flat["old_dirs"] = [cat(v) for v in flat["old_dirs"]]
    flat["old_stps"] = [cat(v) for v in flat["old_stps"]]
    flat["ro"] = [tessel.tensor(r, dtype=tessel.float64) for r in flat["ro"]]  # torch's 0-d tensors
    flat["H_diag"] = tessel.tensor(flat["H_diag"], dtype=tessel.float64)
    ps2 = [nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = tessel.optim.LBFGS(ps2, history_size=3, max_iter=4)
    opt2.load_state_dict({"state": {0: flat}, "param_groups": sd["param_groups"]})
    assert run(ps2, opt2, 2) == run(ps, opt, 2)
    assert all(a.tolist() == b.tolist() for a, b in zip(ps, ps2))
    bad = dict(flat, d=tessel.zeros(5))
    opt3 = tessel.optim.LBFGS([nn.Parameter(p.detach().clone()) for p in ps], history_size=3, max_iter=4)
    opt3.load_state_dict({"state": {0: bad}, "param_groups": sd["param_groups"]})
    with pytest.raises(ValueError, match="not one flat vector over this optimizer's 11 parameter elements"):
        run(opt3.param_groups[0]["params"], opt3, 1)


def test_deepcopy_of_a_model_and_its_optimizer_continues_as_the_original():
    """copy.deepcopy of a built-in optimizer raised (cannot pickle its C++ object) and a Python one's copy lost
    its state (keyed by the originals); copied together with the parameters, the copy steps them as the
    original steps its own."""
    import copy
    for cls, kw in ((tessel.optim.SGD, {"momentum": 0.9}), (tessel.optim.AdamW, {}), (tessel.optim.Rprop, {})):
        ps = _params()
        opt = cls([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.5}], lr=0.01, **kw)
        _grads(ps, 0)
        opt.step()
        both = copy.deepcopy({"ps": ps, "opt": opt})
        ps2, opt2 = both["ps"], both["opt"]
        assert type(opt2) is cls and opt2.param_groups[1]["params"][0] is ps2[2] and opt2.param_groups[1]["lr"] == 0.5
        for params, o in ((ps, opt), (ps2, opt2)):
            _grads(params, 1)
            o.step()
        assert all(a.tolist() == b.tolist() for a, b in zip(ps, ps2)), cls.__name__


def test_schedulers_fill_a_tensor_lr_in_place_and_report_snapshots():
    """torch fills a tensor lr in place (a reference to group['lr'] sees the schedule) and get_last_lr() holds
    copies; tessel replaced the tensor (CyclicLR / OneCycleLR by an unrounded float) and returned aliases."""
    for make, lr_at in ((lambda o: S.StepLR(o, 1, gamma=0.5), lambda k: 0.1 * 0.5 ** k),
                        (lambda o: S.LambdaLR(o, lambda e: 0.9 ** e),
                         lambda k: np.float32(0.1) * np.float32(0.9 ** k))):  # float32 tensor arithmetic
        lr = tessel.tensor(0.1)
        opt = tessel.optim.Adam(_params(), lr=lr)
        sched = make(opt)
        seen = []
        for k in range(1, 4):
            opt.step()
            sched.step()
            seen.append(sched.get_last_lr()[0])
            assert opt.param_groups[0]["lr"] is lr
            assert lr.item() == float(np.float32(lr_at(k)))
        assert [float(v) for v in seen] == [float(np.float32(lr_at(k))) for k in (1, 2, 3)]


def test_get_optimizer_state_dict_has_no_entries_for_parameters_without_state():
    """torch's get_optimizer_state_dict lists only parameters with state: SGD without momentum keeps none (not
    even a step), so its "state" is {} (tessel's was {'0.weight': {}, ...}); with momentum each has its buffer."""
    from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict
    for momentum, want in ((0.0, {}), (0.9, {"0.weight": ["momentum_buffer"], "0.bias": ["momentum_buffer"]})):
        model = nn.Sequential(nn.Linear(3, 2))
        opt = tessel.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
        model(tessel.ones(4, 3)).sum().backward()
        opt.step()
        state = get_optimizer_state_dict(model, opt)["state"]
        assert {k: sorted(v) for k, v in state.items()} == want


def test_scheduler_argument_errors_are_torchs():
    opt = tessel.optim.SGD(_params(), lr=0.1)
    cases = [(lambda: S.LinearLR(opt, start_factor=0.5, end_factor=1.5), ValueError,
              "Ending multiplicative factor expected to be between 0 and 1"),
             (lambda: S.SequentialLR(opt, [S.ReduceLROnPlateau(opt), S.StepLR(opt, 2)], milestones=[2]), ValueError,
              "SequentialLR does not support `ReduceLROnPlateau` scheduler"),
             (lambda: S.StepLR(object(), 2), TypeError, "object is not an Optimizer"),
             (lambda: S.CosineAnnealingWarmRestarts(opt, 2, eta_min="a"), ValueError, "Expected float or int eta_min"),
             (lambda: S.ReduceLROnPlateau(opt, mode="x"), ValueError, "mode x is unknown!"),
             (lambda: S.ReduceLROnPlateau(opt, threshold_mode="y"), ValueError, "threshold mode y is unknown!")]
    for make, error, text in cases:
        with pytest.raises(error, match=text.replace("(", r"\(")):
            make()


def test_rmsprop_state_lists_its_buffers_in_torchs_order():
    p = nn.Parameter(tessel.ones(2))
    opt = tessel.optim.RMSprop([p], lr=0.1, momentum=0.9, centered=True)
    p.grad = tessel.ones(2)
    opt.step()
    assert list(opt.state_dict()["state"][0]) == ["step", "square_avg", "momentum_buffer", "grad_avg"]


def test_deepcopy_of_a_python_optimizer_with_a_scheduler_steps_the_copy():
    """A scheduler wraps optimizer.step in a closure over the optimizer; the copy took that closure along and
    stepped the original's parameters."""
    import copy
    p = nn.Parameter(tessel.ones(3))
    opt = tessel.optim.Rprop([p], lr=0.1)
    S.StepLR(opt, 1)
    opt2 = copy.deepcopy(opt)
    q = opt2.param_groups[0]["params"][0]
    p.grad, q.grad = tessel.ones(3), tessel.ones(3)
    opt2.step()
    assert p.tolist() == [1.0] * 3 and q.tolist() == [np.float32(0.9)] * 3


def test_get_optimizer_state_dict_of_nadam_holds_torchs_mu_product_and_loads_back():
    """torch's NAdam state keeps mu_product; the distributed state dict dropped it (tessel's C++ NAdam rebuilds it
    from the step), so a checkpoint taken to torch lacked a key its NAdam needs. It equals the C++ optimizer's own
    running product (state_dict()) and a load skips it."""
    from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    def make():
        tessel.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 2))
    model = make()
    opt = tessel.optim.NAdam(model.parameters(), lr=0.01)
    for _ in range(7):
        model(tessel.ones(4, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
    sd = get_optimizer_state_dict(model, opt)
    assert sorted(sd["state"]["0.weight"]) == ["exp_avg", "exp_avg_sq", "mu_product", "step"]
    assert sd["state"]["0.weight"]["mu_product"].item() == opt.state_dict()["state"][0]["mu_product"].item()
    model2 = make()
    model2.load_state_dict(model.state_dict())
    opt2 = tessel.optim.NAdam(model2.parameters(), lr=0.01)
    set_optimizer_state_dict(model2, opt2, sd)
    for m, o in ((model, opt), (model2, opt2)):
        m(tessel.ones(4, 3)).sum().backward()
        o.step()
    assert all(a.tolist() == b.tolist() for a, b in zip(model.parameters(), model2.parameters()))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
