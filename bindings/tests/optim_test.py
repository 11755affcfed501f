"""tessel.optim's Adam relatives (Adamax, NAdam, RAdam) and Adadelta against torch's update rules written out in numpy
(float64, a varying gradient, L2 and decoupled weight decay, RAdam on both sides of its ρ_t > 5 switch), their state
dicts resuming exactly, and torch's argument checks; Adam / AdamW's amsgrad against numpy, and maximize on every
C++-backed optimizer (ascent on G is descent on -G, .grad left as it was)."""
import sys

import numpy as np
import pytest

import tessel

P0 = np.array([1.0, -2.0, 0.5, 3.0])
GRADS = [np.array([0.5, -0.25, 0.0, 1.0]) * (1 + 0.3 * t) * (-1) ** t for t in range(8)]


def run(opt_cls, steps, **kw):
    p = tessel.tensor(P0.copy(), requires_grad=True)
    opt = opt_cls([p], **kw)
    for t in range(steps):
        p.grad = tessel.tensor(GRADS[t])
        opt.step()
    return p, opt


def adamax_ref(steps, lr, b1, b2, eps, wd):
    p, m, u = P0.copy(), np.zeros(4), np.zeros(4)
    for t in range(1, steps + 1):
        g = GRADS[t - 1] + wd * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1 ** t) * m / u
    return p


def decayed(t, p, lr, wd, decoupled):
    """(p, g) after torch's weight decay at step t: decoupled shrinks p, else g gets the L2 term."""
    return (p * (1 - lr * wd), GRADS[t - 1]) if decoupled else (p, GRADS[t - 1] + wd * p)


def nadam_ref(steps, lr, b1, b2, eps, wd, md, decoupled):
    p, m, v, prod = P0.copy(), np.zeros(4), np.zeros(4), 1.0
    for t in range(1, steps + 1):
        p, g = decayed(t, p, lr, wd, decoupled)
        mu, mu_next = b1 * (1 - 0.5 * 0.96 ** (t * md)), b1 * (1 - 0.5 * 0.96 ** ((t + 1) * md))
        prod *= mu
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2 ** t)) + eps
        p = p - lr * (1 - mu) / (1 - prod) * g / denom - lr * mu_next / (1 - prod * mu_next) * m / denom
    return p


def radam_ref(steps, lr, b1, b2, eps, wd, decoupled):
    p, m, v = P0.copy(), np.zeros(4), np.zeros(4)
    rho_inf = 2 / (1 - b2) - 1
    rectified = []
    for t in range(1, steps + 1):
        p, g = decayed(t, p, lr, wd, decoupled)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        rho_t = rho_inf - 2 * t * b2 ** t / bc2
        rectified.append(rho_t > 5)
        if rho_t > 5:
            r = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            p = p - lr * m / bc1 * r * np.sqrt(bc2) / (np.sqrt(v) + eps)
        else:
            p = p - lr * m / bc1
    return p, rectified


def test_adadelta_follows_torchs_rule():
    p, _ = run(tessel.optim.Adadelta, 5, lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)
    q, sq, acc = P0.copy(), np.zeros(4), np.zeros(4)
    for t in range(5):
        g = GRADS[t] + 0.1 * q
        sq = 0.8 * sq + 0.2 * g * g
        delta = np.sqrt(acc + 1e-4) / np.sqrt(sq + 1e-4) * g
        acc = 0.8 * acc + 0.2 * delta * delta
        q = q - 0.5 * delta
    np.testing.assert_allclose(p.detach().numpy(), q, rtol=1e-12)


def test_adamax_follows_torchs_rule():
    p, _ = run(tessel.optim.Adamax, 5, lr=0.01, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1)
    np.testing.assert_allclose(p.detach().numpy(), adamax_ref(5, 0.01, 0.8, 0.9, 1e-3, 0.1), rtol=1e-12)


@pytest.mark.parametrize("decoupled", [False, True])
def test_nadam_follows_torchs_rule(decoupled):
    p, _ = run(tessel.optim.NAdam, 6, lr=0.02, betas=(0.85, 0.95), eps=1e-6, weight_decay=0.05, momentum_decay=0.2,
               decoupled_weight_decay=decoupled)
    want = nadam_ref(6, 0.02, 0.85, 0.95, 1e-6, 0.05, 0.2, decoupled)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("decoupled", [False, True])
def test_radam_follows_torchs_rule_on_both_sides_of_the_rectification(decoupled):
    p, _ = run(tessel.optim.RAdam, 8, lr=0.03, betas=(0.9, 0.9), eps=1e-8, weight_decay=0.02,
               decoupled_weight_decay=decoupled)
    want, rectified = radam_ref(8, 0.03, 0.9, 0.9, 1e-8, 0.02, decoupled)
    assert rectified == [False] * 5 + [True] * 3  # ρ_t crosses 5 at t = 6 with β2 = 0.9
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("cls,kw", [(tessel.optim.Adamax, {}), (tessel.optim.NAdam, {"momentum_decay": 0.3}),
                                    (tessel.optim.RAdam, {"betas": (0.9, 0.9)}), (tessel.optim.Adadelta, {})])
def test_state_dict_resumes_exactly_and_options_reach_the_step(cls, kw):
    p, opt = run(cls, 4, lr=0.05, **kw)
    sd = opt.state_dict()
    names = {tessel.optim.Adamax: ["exp_avg", "exp_inf", "step"],
             tessel.optim.Adadelta: ["acc_delta", "square_avg", "step"],
             tessel.optim.NAdam: ["exp_avg", "exp_avg_sq", "mu_product", "step"]}.get(cls, ["exp_avg", "exp_avg_sq",
                                                                                          "step"])
    assert sorted(sd["state"][0]) == names and sd["state"][0]["step"].item() == 4
    if cls is tessel.optim.NAdam:  # torch's running product of the momentum coefficients μ_1..μ_4
        mus = [0.9 * (1 - 0.5 * 0.96 ** (t * 0.3)) for t in range(1, 5)]
        assert sd["state"][0]["mu_product"].item() == pytest.approx(float(np.prod(mus)), rel=1e-6)
    q = tessel.tensor(p.detach().numpy(), requires_grad=True)
    fresh = cls([q], lr=1.0)
    fresh.load_state_dict(sd)  # NAdam rebuilds its momentum product from the step count
    assert fresh.param_groups[0]["lr"] == 0.05
    for t, o in ((q, fresh), (p, opt)):
        for step in (4, 5):
            t.grad = tessel.tensor(GRADS[step])
            o.step()
    np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    opt.param_groups[0]["lr"] = 0.0  # read at the next step, as torch
    before = p.detach().numpy().copy()
    p.grad = tessel.tensor(GRADS[6])
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), before)


SHRINKING = GRADS[::-1]  # falling magnitudes: exp_avg_sq drops below its running maximum


def adam_ref(steps, lr, b1, b2, eps, wd, decoupled, amsgrad, maximize):
    p, m, v, v_max = P0.copy(), np.zeros(4), np.zeros(4), np.zeros(4)
    for t in range(1, steps + 1):
        g = -SHRINKING[t - 1] if maximize else SHRINKING[t - 1]
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        v_max = np.maximum(v_max, v)
        denom = np.sqrt(v_max if amsgrad else v) / np.sqrt(1 - b2 ** t) + eps
        p = p - lr / (1 - b1 ** t) * m / denom
    return p


@pytest.mark.parametrize("cls,maximize", [(tessel.optim.Adam, False), (tessel.optim.Adam, True),
                                          (tessel.optim.AdamW, False), (tessel.optim.AdamW, True)])
def test_adam_amsgrad_follows_torchs_rule(cls, maximize):
    p = tessel.tensor(P0.copy(), requires_grad=True)
    opt = cls([p], lr=0.05, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True, maximize=maximize)
    for t in range(8):
        p.grad = tessel.tensor(SHRINKING[t])
        opt.step()
    want = adam_ref(8, 0.05, 0.8, 0.9, 1e-8, 0.1, cls is tessel.optim.AdamW, True, maximize)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-12)
    assert not np.allclose(want, adam_ref(8, 0.05, 0.8, 0.9, 1e-8, 0.1, cls is tessel.optim.AdamW, False, maximize))
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert sd["param_groups"][0]["amsgrad"] is True and sd["param_groups"][0]["maximize"] is maximize


@pytest.mark.parametrize("cls,kw", [(tessel.optim.SGD, {"momentum": 0.9, "weight_decay": 0.01}),
                                    (tessel.optim.Adam, {"weight_decay": 0.1}), (tessel.optim.AdamW, {}),
                                    (tessel.optim.RMSprop, {"weight_decay": 0.1, "centered": True}),
                                    (tessel.optim.Adagrad, {}), (tessel.optim.Adamax, {}), (tessel.optim.NAdam, {}),
                                    (tessel.optim.RAdam, {}), (tessel.optim.Adadelta, {"weight_decay": 0.1})])
def test_maximize_ascends(cls, kw):
    up = tessel.tensor(P0.copy(), requires_grad=True)
    down = tessel.tensor(P0.copy(), requires_grad=True)
    ascend, descend = cls([up], lr=0.05, maximize=True, **kw), cls([down], lr=0.05, **kw)
    for t in range(4):
        up.grad, down.grad = tessel.tensor(GRADS[t]), tessel.tensor(-GRADS[t])
        ascend.step()
        descend.step()
        np.testing.assert_array_equal(up.grad.numpy(), GRADS[t])  # torch leaves .grad as it was
    np.testing.assert_array_equal(up.detach().numpy(), down.detach().numpy())
    assert not np.allclose(up.detach().numpy(), P0)


def test_sgd_state_dict_has_torchs_keys():
    p, opt = run(tessel.optim.SGD, 2, lr=0.1, momentum=0.9)
    assert sorted(opt.state_dict()["state"][0]) == ["momentum_buffer"]  # torch's SGD counts no steps
    p, opt = run(tessel.optim.SGD, 2, lr=0.1)
    assert opt.state_dict()["state"] == {}  # no momentum: no state at all, as torch


def test_bad_arguments_raise_torchs_errors():
    w = [tessel.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        tessel.optim.NAdam(w, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Invalid momentum_decay value: -1"):
        tessel.optim.NAdam(w, momentum_decay=-1)
    with pytest.raises(ValueError, match="Invalid learning rate: -0.1"):
        tessel.optim.RAdam(w, lr=-0.1)
    with pytest.raises(NotImplementedError, match="capturable"):
        tessel.optim.Adamax(w, capturable=True)
    with pytest.raises(ValueError, match="Invalid rho value: 1.5"):
        tessel.optim.Adadelta(w, rho=1.5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
