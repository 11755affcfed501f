"""An optimizer written in Python as torch's are (a subclass of tessel.optim.Optimizer with its own step() over
param_groups and self.state, buffers from zeros_like): it trains a fully_shard model on 2 ranks exactly as on one
rank, its buffers are DTensor shards of the parameters, an LR scheduler drives it, its state dict round-trips
and resumes bit for bit, and so does a distributed checkpoint (get/set_optimizer_state_dict, full and sharded).
The built-in optimizers expose their buffers as self.state[p] too; tessel.optim.Muon (written the same way) gives
torch 2.15's Muon weights to 5 decimals, and on fully_shard parameters one rank's within bfloat16 rounding. And
swa_utils' AveragedModel (SWA and EMA, with or without buffers) and update_bn against the averages written out."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                      set_optimizer_state_dict)
from tessel.distributed.fsdp import fully_shard

X = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)


class Lion(tessel.optim.Optimizer):
    """Lion (Chen et al. 2023) as its authors' torch code writes it."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0):
        if not lr > 0:
            raise ValueError("Invalid learning rate: %s" % lr)
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @tessel.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with tessel.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.mul_(1 - group["lr"] * group["weight_decay"])
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = tessel.zeros_like(p)
                    state["step"] = 0
                state["step"] += 1
                exp_avg = state["exp_avg"]
                beta1, beta2 = group["betas"]
                update = exp_avg * beta1 + p.grad * (1 - beta1)
                p.add_(update.sign(), alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return loss


def make():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))


def loss_of(model, x):
    return (model(tessel.tensor(x)) ** 2).mean()


def lion_reference(steps, lr=0.01, betas=(0.9, 0.99), wd=0.1, gamma=0.5):
    """Lion in float64 numpy on one rank's whole batch, the LR halved after each step (StepLR(1, 0.5)), with the
    gradients from tessel's one-rank model at each step's weights."""
    model = make()
    params = [p.detach().numpy().astype(np.float64) for p in model.parameters()]
    m = [np.zeros_like(p) for p in params]
    for t in range(steps):
        with tessel.no_grad():
            for p, v in zip(model.parameters(), params):
                p.copy_(tessel.tensor(v.astype(np.float32)))
        model.zero_grad()
        loss_of(model, X).backward()
        grads = [p.grad.numpy().astype(np.float64) for p in model.parameters()]
        lr_t = lr * gamma ** t
        for i, g in enumerate(grads):
            params[i] = params[i] * (1 - lr_t * wd)
            params[i] = params[i] - lr_t * np.sign(m[i] * betas[0] + g * (1 - betas[0]))
            m[i] = m[i] * betas[1] + g * (1 - betas[1])
    return params


def test_a_python_optimizer_trains_fully_shard_parameters_as_one_rank():
    want = lion_reference(3)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = make()
        fully_shard(model)
        opt = Lion(model.parameters(), lr=0.01, weight_decay=0.1)
        sched = tessel.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        for _ in range(3):
            opt.zero_grad()
            loss_of(model, X[rank * 4:(rank + 1) * 4]).backward()
            opt.step()
            sched.step()
        p0 = next(iter(model.parameters()))
        got[rank] = ([p.full_tensor().numpy() for p in model.parameters()],
                     (opt.state[p0]["exp_avg"].is_distributed, opt.state[p0]["exp_avg"].placements,
                      tuple(opt.state[p0]["exp_avg"].to_local().shape), opt.state[p0]["step"]),
                     opt.param_groups[0]["lr"])

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        params, buf, lr = got[r]
        for p, w in zip(params, want):
            # sign() makes Lion's steps ±lr: float32 gradients against float64 could only differ at a sign flip
            np.testing.assert_allclose(p, w, rtol=0, atol=1e-6)
        assert buf[0] and buf[2] == ((3 if r == 0 else 2), 4) and buf[3] == 3  # a DTensor shard of weight 0
        assert lr == pytest.approx(0.01 * 0.5 ** 3)


def test_a_python_optimizers_state_dict_and_checkpoints_resume_bit_for_bit():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        x = X[rank * 4:(rank + 1) * 4]

        def train(model, opt, steps):
            for _ in range(steps):
                opt.zero_grad()
                loss_of(model, x).backward()
                opt.step()

        model = make()
        fully_shard(model)
        opt = Lion(model.parameters(), lr=0.01, betas=(0.8, 0.95))
        train(model, opt, 2)
        sd = opt.state_dict()
        full = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
        sharded = get_optimizer_state_dict(model, opt)
        copies = []
        for how in ("state_dict", "full", "sharded"):
            other = make()
            fully_shard(other)
            with tessel.no_grad():
                for p, q in zip(other.parameters(), model.parameters()):
                    p.to_local().copy_(q.to_local())
            other_opt = Lion(other.parameters(), lr=0.5, betas=(0.1, 0.2))
            if how == "state_dict":
                other_opt.load_state_dict(sd)
            else:
                set_optimizer_state_dict(other, other_opt, full if how == "full" else sharded,
                                         options=StateDictOptions(full_state_dict=how == "full"))
            copies.append((other, other_opt))
        train(model, opt, 1)
        for other, other_opt in copies:
            train(other, other_opt, 1)
        got[rank] = (sorted(sd["state"]), sd["param_groups"][0]["params"], sd["state"][0]["step"],
                     full, full["state"]["0.weight"]["exp_avg"].is_distributed,
                     [p.full_tensor().numpy() for p in model.parameters()],
                     [([p.full_tensor().numpy() for p in o.parameters()], oo.param_groups[0]["betas"],
                       oo.param_groups[0]["lr"]) for o, oo in copies])

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        ids, group_ids, step, full, full_distributed, cont, copies = got[r]
        assert ids == [0, 1, 2, 3] and group_ids == [0, 1, 2, 3] and step == 2
        assert "exp_avg" in full["state"]["2.bias"] and float(full["state"]["0.weight"]["step"]) == 2
        assert full["param_groups"][0]["lr"] == 0.01 and full["param_groups"][0]["betas"] == (0.8, 0.95)
        assert not full_distributed
        for params, betas, lr in copies:
            assert betas == (0.8, 0.95) and lr == 0.01
            for a, b in zip(params, cont):
                np.testing.assert_array_equal(a, b)


# torch.optim.Muon's weights after 3 steps of the model below under PyTorch 2.15 (lr 0.05; the defaults, then
# nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0), rounded to 5 decimals.
MUON_DEFAULT = ([[[-0.39828, -0.01846, 0.79519, 0.34251], [-0.85189, -0.07243, -0.23103, 0.0481], [-0.76948,
                0.25163, 0.20435, 0.79553], [0.19614, 0.21043, -0.69196, 1.24435], [-0.90129, 0.54772, -0.21176,
                -0.38518], [-0.19595, -0.30979, 0.18602, -0.11386]], [[0.71815, -0.85191, 0.08808, -0.42046,
                0.41595, -1.06209], [-0.17698, 0.18333, -0.79271, 0.48318, 0.11744, 0.5793], [0.39003, -0.4673,
                -0.43279, -0.04564, 0.37058, 0.38435]]])
MUON_PLAIN = ([[[-0.35546, -0.06057, 0.82257, 0.3393], [-0.83763, -0.0304, -0.28063, 0.06405], [-0.79543, 0.17543,
              0.154, 0.79603], [0.17287, 0.2419, -0.73082, 1.17315], [-0.94022, 0.55536, -0.18509, -0.42226],
              [-0.27427, -0.32927, 0.19032, -0.07603]], [[0.73503, -0.88744, 0.0418, -0.43769, 0.40624, -1.0664],
              [-0.17518, 0.14001, -0.76649, 0.49234, 0.10136, 0.54218], [0.4395, -0.48346, -0.41748, -0.0743,
              0.37332, 0.4075]]])


def muon_model():
    rng = np.random.default_rng(4)
    w1 = (rng.standard_normal((6, 4)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((3, 6)) * 0.5).astype(np.float32)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    model = nn.Sequential(nn.Linear(4, 6, bias=False), nn.Tanh(), nn.Linear(6, 3, bias=False))
    with tessel.no_grad():
        model[0].weight.copy_(tessel.tensor(w1))
        model[2].weight.copy_(tessel.tensor(w2))
    return model, x, y


def test_muon_steps_as_torchs():
    for kwargs, want in (({}, MUON_DEFAULT),
                         (dict(nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.0), MUON_PLAIN)):
        model, x, y = muon_model()
        opt = tessel.optim.Muon(model.parameters(), lr=0.05, **kwargs)
        for _ in range(3):
            opt.zero_grad()
            ((model(tessel.tensor(x)) - tessel.tensor(y)) ** 2).mean().backward()
            opt.step()
        for p, w in zip(model.parameters(), want):
            np.testing.assert_allclose(p.detach().numpy(), np.array(w), rtol=0, atol=2e-5)
    with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
        tessel.optim.Muon(nn.Linear(2, 2).parameters())  # the bias is 1-D
    with pytest.raises(ValueError, match="Adjust learning rate function bogus is not supported"):
        tessel.optim.Muon(nn.Linear(2, 2, bias=False).parameters(), adjust_lr_fn="bogus")


def test_muon_on_fully_shard_parameters_equals_one_rank():
    model, x, y = muon_model()
    opt = tessel.optim.Muon(model.parameters(), lr=0.05)
    for _ in range(2):
        opt.zero_grad()
        ((model(tessel.tensor(x)) - tessel.tensor(y)) ** 2).mean().backward()
        opt.step()
    want = [p.detach().numpy() for p in model.parameters()]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        sharded, _, _ = muon_model()
        fully_shard(sharded)
        sharded_opt = tessel.optim.Muon(sharded.parameters(), lr=0.05)
        for _ in range(2):
            sharded_opt.zero_grad()
            ((sharded(tessel.tensor(x[rank * 4:(rank + 1) * 4])) - tessel.tensor(y[rank * 4:(rank + 1) * 4])) ** 2
             ).mean().backward()
            sharded_opt.step()
        got[rank] = [p.full_tensor().numpy() for p in sharded.parameters()]

    tessel.run_ranks(2, rank_fn)
    start = [p.detach().numpy() for p in muon_model()[0].parameters()]
    for r in range(2):
        for a, b, s0 in zip(got[r], want, start):
            # The ranks' gradients are summed in another order than one rank's, and the bfloat16 Newton-Schulz
            # iteration turns those last-bit differences into bfloat16 rounding flips (~0.4% of an update entry):
            # the two runs agree within 5e-3 while each step moved the weights by ~0.06.
            assert np.abs(b - s0).max() > 0.05
            np.testing.assert_allclose(a, b, rtol=0, atol=5e-3)


def test_averaged_models_take_the_swa_and_ema_averages_and_update_bn_the_pass_statistics():
    from tessel.optim import swa_utils

    def bn_model():
        tessel.manual_seed(1)
        return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))

    batches = [tessel.tensor(np.random.default_rng(i).standard_normal((5, 3)).astype(np.float32)) for i in range(3)]
    for kind in ("swa", "ema", "ema_fn", "ema_buffers"):
        model = bn_model()
        avg = {"swa": lambda: swa_utils.AveragedModel(model),
               "ema": lambda: swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9)),
               "ema_fn": lambda: swa_utils.AveragedModel(model, avg_fn=swa_utils.get_ema_avg_fn(0.8)),
               "ema_buffers": lambda: swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9),
                                                              use_buffers=True)}[kind]()
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        seen = []  # the model's state after each step, by name
        for x in batches:
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
            avg.update_parameters(model)
            seen.append({k: v.numpy().copy() for k, v in model.state_dict().items()})
        assert avg.n_averaged.item() == 3
        averaged = {k: v.numpy() for k, v in avg.module.state_dict().items()}
        decay = {"swa": None, "ema": 0.9, "ema_fn": 0.8, "ema_buffers": 0.9}[kind]
        for name, value in averaged.items():
            history = [step[name] for step in seen]
            is_buffer = name.startswith("1.running") or name.endswith("num_batches_tracked")
            if is_buffer and kind != "ema_buffers":
                np.testing.assert_array_equal(value, history[-1], err_msg=name)  # copied from the model
                continue
            if decay is None:
                want = np.mean(history, axis=0)  # the equal average of the three updates
            else:
                want = history[0]
                for h in history[1:]:
                    want = decay * want + (1 - decay) * h
                    if want.dtype.kind == "f" and h.dtype.kind == "i":
                        want = np.trunc(want).astype(h.dtype)  # torch: integer buffers truncated back
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6, err_msg="%s %s" % (kind, name))
    model = bn_model()
    loader = [(batches[0], None), (batches[1][:4], None)]
    swa_utils.update_bn(loader, model)
    norm = model[1]
    hidden = [model[0](x).detach().numpy() for x, _ in loader]
    np.testing.assert_allclose(norm.running_mean.numpy(), np.mean([h.mean(0) for h in hidden], 0), rtol=1e-5)
    np.testing.assert_allclose(norm.running_var.numpy(), np.mean([h.var(0, ddof=1) for h in hidden], 0), rtol=1e-5)
    assert norm.momentum == 0.1 and norm.num_batches_tracked.item() == 2 and model.training


def rprop_reference(p, grads_of, steps, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), maximize=False):
    """Rprop as torch documents it, in float64 numpy."""
    p, prev, size = p.astype(np.float64), np.zeros_like(p, dtype=np.float64), np.full(p.shape, lr)
    for t in range(steps):
        g = grads_of(p, t) * (-1 if maximize else 1)
        sign = np.sign(g * prev)
        size = np.clip(size * np.where(sign > 0, etas[1], np.where(sign < 0, etas[0], 1.0)), *step_sizes)
        g = np.where(sign < 0, 0.0, g)
        p = p - np.sign(g) * size
        prev = g
    return p


def test_rprop_steps_as_torch_documents_it():
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal((3, 4)).astype(np.float32)
    targets = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(6)]
    for kwargs in ({}, dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2)), dict(maximize=True)):
        p = tessel.tensor(p0, requires_grad=True)
        opt = tessel.optim.Rprop([p], **kwargs)
        for t in targets:
            opt.zero_grad()
            ((p - tessel.tensor(t)) ** 3).sum().backward()
            opt.step()
        want = rprop_reference(p0, lambda q, i: 3 * (q - targets[i]) ** 2, 6, **kwargs)
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5, atol=1e-6, err_msg=str(kwargs))
    with pytest.raises(ValueError, match="Invalid eta values"):
        tessel.optim.Rprop([tessel.zeros(1, requires_grad=True)], etas=(1.5, 1.2))


def asgd_reference(p, grads_of, steps, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, maximize=False):
    """ASGD as torch documents it, in float64 numpy (η and μ rounded to float32 between steps, as torch keeps
    them): the parameter, its running average, η and μ."""
    p = p.astype(np.float64)
    ax, eta, mu = np.zeros_like(p), float(np.float32(lr)), 1.0
    for t in range(1, steps + 1):
        g = grads_of(p, t - 1) * (-1 if maximize else 1) + weight_decay * p
        p = p * (1 - lambd * eta) - eta * g
        ax = ax + (p - ax) * mu if mu != 1 else p.copy()
        eta = float(np.float32(lr / (1 + lambd * lr * t) ** alpha))
        mu = float(np.float32(1 / max(1, t - t0)))
    return p, ax, eta, mu


def test_asgd_steps_and_averages_as_torch_documents_it():
    rng = np.random.default_rng(5)
    p0 = rng.standard_normal((3, 4)).astype(np.float32)
    targets = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(6)]
    for kwargs in ({}, dict(lr=0.1, lambd=0.01, alpha=0.5, t0=2, weight_decay=0.1), dict(maximize=True, t0=0)):
        p = tessel.tensor(p0, requires_grad=True)
        opt = tessel.optim.ASGD([p], **kwargs)
        for t in targets:
            opt.zero_grad()
            ((p - tessel.tensor(t)) ** 2).sum().backward()
            opt.step()
        want_p, want_ax, want_eta, want_mu = asgd_reference(p0, lambda q, i: 2 * (q - targets[i]), 6, **kwargs)
        np.testing.assert_allclose(p.detach().numpy(), want_p, rtol=1e-5, atol=1e-6, err_msg=str(kwargs))
        np.testing.assert_allclose(opt.state[p]["ax"].numpy(), want_ax, rtol=1e-5, atol=1e-6, err_msg=str(kwargs))
        assert opt.state[p]["eta"].item() == pytest.approx(want_eta) and opt.state[p]["mu"].item() == want_mu


def test_swalr_anneals_each_group_to_its_swa_lr_as_torch():
    from tessel.optim.swa_utils import SWALR
    want = {  # torch 2.15's lrs of the two groups after each of 6 steps (group 0 from lr 1.0, group 1 from 0.5)
        (0.05, 3, "cos"): [[0.7625, 0.3875], [0.2875, 0.1625], [0.05, 0.05], [0.05, 0.05], [0.05, 0.05],
                           [0.05, 0.05]],
        (0.01, 4, "linear"): [[0.7525, 0.3775], [0.505, 0.255], [0.2575, 0.1325], [0.01, 0.01], [0.01, 0.01],
                              [0.01, 0.01]],
        (0.2, 0, "cos"): [[0.2, 0.2]] * 6}
    for (swa_lr, epochs, strategy), lrs in want.items():
        p, q = tessel.zeros(1, requires_grad=True), tessel.zeros(1, requires_grad=True)
        opt = tessel.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=1.0)
        sched = SWALR(opt, swa_lr=swa_lr, anneal_epochs=epochs, anneal_strategy=strategy)
        got = []
        for _ in range(6):
            opt.step()
            sched.step()
            got.append([g["lr"] for g in opt.param_groups])
        np.testing.assert_allclose(got, lrs, rtol=1e-7, err_msg=str((swa_lr, epochs, strategy)))
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
        SWALR(tessel.optim.SGD([tessel.zeros(1, requires_grad=True)], lr=1.0), swa_lr=0.1, anneal_strategy="exp")


def test_builtin_optimizers_expose_their_buffers_as_state():
    model = make()
    opt = tessel.optim.AdamW(model.parameters(), lr=0.1)
    loss_of(model, X).backward()
    opt.step()
    w = model[0].weight
    assert sorted(opt.state[w]) == ["exp_avg", "exp_avg_sq", "step"]
    np.testing.assert_allclose(opt.state[w]["exp_avg"].numpy(), 0.1 * w.grad.numpy(), rtol=1e-6)
    assert len(opt.state) == 4 and w in opt.state


def test_a_python_optimizer_without_step_raises():
    class NoStep(tessel.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

    opt = NoStep(make().parameters())
    with pytest.raises(NotImplementedError, match="defines its own step"):
        opt.step()
    opt.zero_grad()  # no gradients yet: nothing to do


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
