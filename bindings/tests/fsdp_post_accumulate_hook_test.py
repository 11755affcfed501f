"""register_post_accumulate_grad_hook on fully_shard parameters (torch FSDP2 runs the sharded parameter's hooks
right after the reduce-scatter sets its .grad): optimizer-in-backward on 2 ranks equals the usual
backward-then-step run, and each hook fires once per parameter per synchronized backward."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard

X = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 6)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def run(in_backward, steps=3, accumulate=False):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        tessel.manual_seed(0)
        m = Net()
        for b in m.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        x = tessel.tensor(X[world.rank * 2:(world.rank + 1) * 2])
        calls = []
        if in_backward:
            opts = {p: tessel.optim.AdamW([p], lr=0.05) for p in m.parameters()}

            def hook(p):
                calls.append(p)
                opts[p].step()
                opts[p].zero_grad()

            for p in m.parameters():
                p.register_post_accumulate_grad_hook(hook)
        else:
            opt = tessel.optim.AdamW(m.parameters(), lr=0.05)
        for _ in range(steps):
            if accumulate:  # one unsynchronized micro-step first: no reduce-scatter, so no hook
                m.set_requires_gradient_sync(False)
                m(x).pow(2).mean().backward()
                m.set_requires_gradient_sync(True)
            m(x).pow(2).mean().backward()
            if not in_backward:
                opt.step()
                opt.zero_grad()
        out[world.rank] = ([p.full_tensor().numpy() for p in m.parameters()], len(calls),
                           sum(1 for _ in m.parameters()), all(any(c is p for c in calls) for p in m.parameters()))

    tessel.run_ranks(2, rank_fn)
    return out


@pytest.mark.parametrize("accumulate", [False, True])
def test_optimizer_in_backward_on_fully_shard_parameters(accumulate):
    ref, got = run(False, accumulate=accumulate), run(True, accumulate=accumulate)
    for r in (0, 1):
        params, calls, n, every_param = got[r]
        assert calls == 3 * n and every_param  # once per parameter per synchronized backward, with the Parameter
        for a, b in zip(params, ref[r][0]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.allclose(ref[0][0][0], run(False, steps=2)[0][0][0])  # the steps change the weights


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
