"""Local SGD as torch builds it: DDP with the post_localSGD hook (global gradient all-reduce for the first
steps, then only within a subgroup) and PostLocalSGDOptimizer with a PeriodicModelAverager (every rank steps on
its own gradients, the models averaged every `period` steps after `warmup_steps`). Two ranks on different data
against a one-process simulation of both ranks (two models, gradients and parameters averaged by hand)."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook
from tessel.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from tessel.distributed.optim import PostLocalSGDOptimizer
from tessel.nn.parallel import DistributedDataParallel as DDP

RNG = np.random.default_rng(12)
X = RNG.standard_normal((2, 8, 2, 5)).astype(np.float32)  # [rank, step, rows, features]
Y = RNG.standard_normal((2, 8, 2, 3)).astype(np.float32)
STEPS, START, WARMUP, PERIOD, LR = 8, 2, 2, 3, 0.1


def make():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))


def loss_of(model, r, step):
    return (model(tessel.tensor(X[r, step])) - tessel.tensor(Y[r, step])).pow(2).mean()


def simulate():
    """Both ranks in one process: averaged gradients before START, local ones after; the parameters averaged
    at averager steps WARMUP, WARMUP + PERIOD, ..."""
    models = [make(), make()]
    opts = [tessel.optim.SGD(m.parameters(), lr=LR) for m in models]
    for step in range(STEPS):
        for r in (0, 1):
            loss_of(models[r], r, step).backward()
        if step < START:
            for a, b in zip(models[0].parameters(), models[1].parameters()):
                mean = (a.grad + b.grad) / 2
                a.grad, b.grad = mean.clone(), mean.clone()
        for o in opts:
            o.step()
            o.zero_grad()
        if step >= WARMUP and (step - WARMUP) % PERIOD == 0:
            with tessel.no_grad():
                for a, b in zip(models[0].parameters(), models[1].parameters()):
                    mean = (a + b) / 2
                    a.copy_(mean)
                    b.copy_(mean)
    return [[p.detach().numpy() for p in m.parameters()] for m in models]


def test_post_local_sgd_matches_the_simulation():
    want = simulate()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        subgroup, _ = dist.new_subgroups(1)  # after START each rank keeps its own gradients
        model = DDP(make())
        model.register_comm_hook(PostLocalSGDState(None, subgroup, start_localSGD_iter=START), post_localSGD_hook)
        opt = PostLocalSGDOptimizer(tessel.optim.SGD(model.parameters(), lr=LR),
                                    PeriodicModelAverager(period=PERIOD, warmup_steps=WARMUP))
        for step in range(STEPS):
            loss_of(model, world.rank, step).backward()
            opt.step()
            opt.zero_grad()
        sd = opt.state_dict()
        got[world.rank] = ([p.detach().numpy() for p in model.parameters()], sd["step"])

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        params, step = got[r]
        assert step == STEPS
        for a, b in zip(params, want[r]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the last averaging was at step 5: steps 6 and 7 were local, so the ranks differ again
    assert not np.allclose(got[0][0][0], got[1][0][0])


def test_averager_arguments_and_optimizer_state_as_torch():
    with pytest.raises(ValueError, match="``period`` must be a positive value"):
        PeriodicModelAverager(period=0)
    with pytest.raises(ValueError, match="``warmup_steps`` must be a non-negative number"):
        PeriodicModelAverager(period=2, warmup_steps=-1)
    with pytest.warns(UserWarning, match="When period is 1"):
        PeriodicModelAverager(period=1)
    m = make()
    opt = PostLocalSGDOptimizer(tessel.optim.SGD(m.parameters(), lr=LR), PeriodicModelAverager(period=2))
    opt.averager.step = 5
    sd = opt.state_dict()
    opt.averager.step = 0
    opt.load_state_dict(sd)
    assert opt.averager.step == 5 and opt.param_groups is opt.optim.param_groups
    del sd["step"]
    with pytest.warns(UserWarning, match="does not contain a step counter"):
        opt.load_state_dict(sd)
    assert opt.averager.step == 0


def test_hierarchical_averaging_picks_the_level_by_step():
    import collections
    from tessel.distributed.algorithms.model_averaging.hierarchical_model_averager import HierarchicalModelAverager
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        averager = HierarchicalModelAverager(collections.OrderedDict([(2, 2), (4, 4)]), warmup_steps=1)
        p = tessel.zeros(2).requires_grad_(True)
        p.grad = tessel.zeros(2)
        seen = []
        for step in range(6):
            with tessel.no_grad():
                p.copy_(tessel.tensor([float(world.rank * 10 + step), 1.0]))
            averager.average_parameters([p])
            seen.append(p[0].item())
        got[world.rank] = seen
        with pytest.raises(ValueError, match="must be equal to the size of arg ``process_group`` 4"):
            HierarchicalModelAverager(collections.OrderedDict([(2, 2)]))

    tessel.run_ranks(4, rank_fn)
    for r in range(4):
        pair = [q for q in range(4) if q // 2 == r // 2]
        want = []
        for step in range(6):
            own = r * 10 + step
            if step < 1 or step % 2:  # warm-up, or no period divides the step
                want.append(own)
            elif step % 4 == 0:  # the world level
                want.append(np.mean([q * 10 + step for q in range(4)]))
            else:  # groups of two consecutive ranks
                want.append(np.mean([q * 10 + step for q in pair]))
        np.testing.assert_allclose(got[r], want, rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
