"""register_post_accumulate_grad_hook on fully_shard parameters (torch FSDP2 runs the sharded parameter's hooks
right after the reduce-scatter sets its .grad): optimizer-in-backward on 2 ranks equals the usual
backward-then-step run, and each hook fires once per parameter per synchronized backward; parameters used on
only some ranks (set_reduce_scatter_unused_params); hooks registered before fully_shard (the process aborted);
backward(inputs=) runs the post-accumulate hooks (it ran none) and refuses sharded parameters it cannot reach
(torch leaves their .grad None, silently)."""
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


class Gated(nn.Module):
    """extra is used only where the caller says so: on rank 0 in the test; gate on no rank."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.extra = nn.Parameter(tessel.ones(6))
        self.gate = nn.Parameter(tessel.ones(6))

    def forward(self, x, use_extra):
        y = self.lin(x)
        return y * self.extra if use_extra else y


def test_parameters_used_on_some_ranks_reduce_with_zeros_elsewhere():
    """torch 2.15's set_reduce_scatter_unused_params(True): a parameter one rank did not use still takes part
    in the reduction (zeros from that rank); one no rank used keeps grad None. Gradients against one process
    holding both ranks' data (rank 0's half through extra, rank 1's half not)."""
    tessel.manual_seed(3)
    ref = Gated()
    x0, x1 = tessel.tensor(X[:2]), tessel.tensor(X[2:])
    ((ref(x0, True).pow(2).sum() + ref(x1, False).pow(2).sum()) / 2).backward()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(3)
        model = Gated()
        fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
        model.set_reduce_scatter_unused_params(True)
        with pytest.raises(TypeError, match="should be a bool"):
            model.set_reduce_scatter_unused_params(1)
        x = tessel.tensor(X[:2] if world.rank == 0 else X[2:])
        model(x, world.rank == 0).pow(2).sum().backward()  # the mean over ranks: FSDP averages
        got[world.rank] = {n: None if p.grad is None else p.grad.full_tensor().numpy()
                           for n, p in model.named_parameters()}

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        assert got[r]["gate"] is None
        for n, p in ref.named_parameters():
            if n != "gate":
                np.testing.assert_allclose(got[r][n], p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


def test_hooks_registered_before_fully_shard_do_not_abort_the_process():
    # the parameter replaced by fully_shard dropped its hooks' Python callables without the GIL (exit 134);
    # torch keeps running and the hooks never fire (they sit on the replaced tensor)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        m = nn.Linear(2, 2)
        fired = []
        m.weight.register_post_accumulate_grad_hook(lambda p: fired.append("post"))
        m.bias.register_hook(lambda g: fired.append("hook"))
        fully_shard(m, mesh=init_device_mesh("cpu", (2,)))
        m(tessel.ones(1, 2)).sum().backward()
        got[world.rank] = (fired, m.bias.grad.full_tensor().numpy())

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        assert got[r][0] == []
        np.testing.assert_allclose(got[r][1], [1.0, 1.0])


def test_backward_with_inputs_runs_post_accumulate_hooks_and_refuses_unreached_sharded_parameters():
    lin = nn.Linear(3, 2)
    fired = []
    for n, p in lin.named_parameters():
        p.register_post_accumulate_grad_hook(lambda q, n=n: fired.append(n))
    x = tessel.ones(4, 3)
    lin(x).sum().backward(inputs=[lin.weight])
    assert fired == ["weight"] and lin.bias.grad is None
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.full((2, 3), 4.0))
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        tessel.manual_seed(0)
        root = nn.Linear(2, 2)  # a root alone keeps its unsharded parameters through the backward: reached
        fully_shard(root, mesh=mesh)
        root(tessel.full((1, 2), float(world.rank + 1))).sum().backward(inputs=list(root.parameters()))
        nested = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        for m in (nested[0], nested[1], nested):
            fully_shard(m, mesh=mesh)
        with pytest.raises(RuntimeError, match=r"backward\(inputs=\): input 0 \(a DTensor of shape \[2, 2\]\) is not in "
                                               "the graph of the outputs"):
            nested(tessel.ones(1, 2)).sum().backward(inputs=list(nested.parameters()))
        got[world.rank] = [p.grad.full_tensor().numpy() for p in root.parameters()]

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):  # d/dW of sum(W x + b) averaged over the ranks' x = 1 and 2
        np.testing.assert_allclose(got[r][0], np.full((2, 2), 1.5))
        np.testing.assert_allclose(got[r][1], [1.0, 1.0])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
