"""An optimizer written in Python as torch's are (a subclass of tessel.optim.Optimizer with its own step() over
param_groups and self.state, buffers from zeros_like): it trains a fully_shard model on 2 ranks exactly as on one
rank, its buffers are DTensor shards of the parameters, an LR scheduler drives it, its state dict round-trips
and resumes bit for bit, and so does a distributed checkpoint (get/set_optimizer_state_dict, full and sharded).
The built-in optimizers expose their buffers as self.state[p] too."""
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
                     sorted(full), full["optim.state.0.weight.exp_avg"].is_distributed,
                     [p.full_tensor().numpy() for p in model.parameters()],
                     [([p.full_tensor().numpy() for p in o.parameters()], oo.param_groups[0]["betas"],
                       oo.param_groups[0]["lr"]) for o, oo in copies])

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        ids, group_ids, step, full_keys, full_distributed, cont, copies = got[r]
        assert ids == [0, 1, 2, 3] and group_ids == [0, 1, 2, 3] and step == 2
        assert "optim.state.2.bias.exp_avg" in full_keys and "optim.step.0.weight" in full_keys
        assert {"optim.hyper.lr", "optim.hyper.betas.0", "optim.hyper.betas.1"} <= set(full_keys)
        assert not full_distributed
        for params, betas, lr in copies:
            assert betas == (0.8, 0.95) and lr == 0.01
            for a, b in zip(params, cont):
                np.testing.assert_array_equal(a, b)


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
