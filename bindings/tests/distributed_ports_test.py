"""torch.distributed behaviours found by running distributed scripts under torch 2.15 and tessel side by side: DDP's
static_graph with a parameter no rank uses, placements that pickle (all_gather_object, torch.save and deepcopy
of plans), local_map outputs that are None, torch.distributed.tensor._random (torchtitan's set_determinism),
Work.result() and ReduceOp.RedOpType. Expected values come from numpy on the ranks' inputs."""
import copy
import pickle
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Partial, Replicate, Shard, _random, distribute_tensor
from tessel.distributed.tensor.experimental import local_map
from tessel.distributed.tensor.placement_types import _StridedShard
from tessel.nn.parallel import DistributedDataParallel as DDP


def test_ddp_static_graph_trains_with_a_parameter_no_rank_uses():
    # torch's static_graph finds the unused parameters in its first iteration; tessel raised "Expected to have
    # finished reduction" on the second forward.
    w0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], dtype=np.float32)
    xs = [np.arange(12, dtype=np.float32).reshape(4, 3) / 10, np.ones((4, 3), dtype=np.float32)]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.unused = nn.Linear(3, 2, bias=False), nn.Linear(3, 2)

        def forward(self, x):
            return self.a(x)

    got = {}

    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        net = Net()
        with tessel.no_grad():
            net.a.weight.copy_(tessel.tensor(w0))
        model = DDP(net, static_graph=True)
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(tessel.tensor(xs[r])).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        got[r] = (net.a.weight.detach().numpy(), net.unused.weight.grad)

    # d(sum(x Wᵀ))/dW[i, :] = Σ_b x[b, :], the same every step; DDP averages it over the two ranks.
    step = np.tile(np.mean([x.sum(axis=0) for x in xs], axis=0), (2, 1))
    tessel.run_ranks(2, rank_fn)
    assert len(got) == 2
    for weight, unused_grad in got.values():
        np.testing.assert_allclose(weight, w0 - 3 * 0.1 * step, rtol=1e-6)
        assert unused_grad is None


def test_placements_pickle_and_deepcopy():
    for p in (Shard(1), Replicate(), Partial(), Partial("avg"), _StridedShard(0, split_factor=2)):
        back = pickle.loads(pickle.dumps(p))
        assert back == p and type(back) is type(p) and repr(back) == repr(p)
        assert copy.deepcopy(p) == p
    plan = {"w": [Shard(0), Replicate()], "b": (Partial("max"),)}
    assert copy.deepcopy(plan) == plan


def test_local_map_outputs_may_be_none_and_random_seed_work_results_as_torch():
    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(tessel.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
        f = local_map(lambda t: (t * 2, None), out_placements=([Shard(0)], None), in_placements=([Shard(0)],),
                      device_mesh=mesh)
        y, nothing = f(x)
        assert nothing is None and y.placements == (Shard(0),)
        assert y.full_tensor().tolist() == (np.arange(8.0).reshape(4, 2) * 2).tolist()
        g = local_map(lambda t: (t + 1, 3), out_placements=([Shard(0)], None), in_placements=([Shard(0)],),
                      device_mesh=mesh)
        assert g(x)[1] == 3
        # torch.distributed.tensor._random.manual_seed(seed, mesh) seeds DTensor random ops: tessel's draw from
        # the default generator, so it is tessel.manual_seed on every rank of the mesh.
        assert _random.is_rng_supported_mesh(mesh)
        _random.manual_seed(7, mesh)
        a = distribute_tensor(tessel.zeros(6), mesh, [Shard(0)]).uniform_().full_tensor()
        tessel.manual_seed(7)
        b = distribute_tensor(tessel.zeros(6), mesh, [Shard(0)]).uniform_().full_tensor()
        assert a.tolist() == b.tolist() and len(set(a.tolist())) == 6
        assert _random._rng_tracker is not None and _random._rng_tracker.distribute_region_enabled
        work = dist.all_reduce(tessel.full((2,), float(r + 1)), async_op=True)
        assert [t.tolist() for t in work.result()] == [[3.0, 3.0]]
        assert isinstance(dist.ReduceOp.SUM, dist.ReduceOp.RedOpType)

    tessel.run_ranks(2, rank_fn)



def test_einsum_over_head_sharded_attention_keeps_the_heads_sharded_without_communication():
    # "bhqd,bhkd->bhqk" on Shard(1) q and k: tessel flattened [b, h] for one batched matmul, which gathered the
    # heads (a Replicate result, an all-gather each); torch keeps Shard(1) and communicates nothing.
    from tessel.distributed.tensor.debug import CommDebugMode
    rng = np.random.default_rng(0)
    q_np, k_np = rng.standard_normal((2, 4, 5, 3)), rng.standard_normal((2, 4, 6, 3))

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        q = distribute_tensor(tessel.tensor(q_np), mesh, [Shard(1)])
        k = distribute_tensor(tessel.tensor(k_np), mesh, [Shard(1)])
        with CommDebugMode() as comm:
            scores = tessel.einsum("bhqd,bhkd->bhqk", q, k)
        assert comm.get_total_counts() == 0 and scores.placements == (Shard(1),)
        assert tuple(scores.to_local().shape) == (2, 2, 5, 6)
        np.testing.assert_allclose(scores.full_tensor().numpy(), np.einsum("bhqd,bhkd->bhqk", q_np, k_np),
                                   rtol=1e-12)

    tessel.run_ranks(2, rank_fn)


def test_init_device_mesh_starts_a_launched_jobs_default_group(monkeypatch):
    # torch: init_device_mesh without init_process_group starts the default group from the launcher's environment
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    seen = {}

    def rank_fn(world):
        assert not dist.is_initialized()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        seen[dist.get_rank()] = (dist.is_initialized(), mesh.size(), mesh.get_local_rank())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: (True, 2, 0), 1: (True, 2, 1)}


def test_the_distributed_tutorials_ring_all_reduce_with_isend_and_a_blocking_recv():
    # "Writing Distributed Applications with PyTorch": each step isend(right), recv(left), wait(); the blocking recv
    # ran alone behind the deferred isend and the ranks reported a send-send deadlock
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank, size = dist.get_rank(), dist.get_world_size()
        send = tessel.full((3,), float(rank + 1))
        recv, accum = tessel.zeros(3), tessel.full((3,), float(rank + 1))
        left, right = (rank - 1 + size) % size, (rank + 1) % size
        for _ in range(size - 1):
            req = dist.isend(send, right)
            dist.recv(recv, left)
            accum += recv
            req.wait()
            send = recv.clone()
        got[rank] = accum.tolist()

    tessel.run_ranks(3, rank_fn)
    assert got == {r: [6.0, 6.0, 6.0] for r in range(3)}


def test_the_fsdp2_tutorials_checkpointer_loads_with_assign_and_initializes_the_optimizer_state():
    from tessel.distributed.checkpoint.state_dict import _init_optim_state
    from tessel.distributed.fsdp import fully_shard
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        full = {k: tessel.full(tuple(v.shape), float(i + 1)) for i, (k, v) in enumerate(model.state_dict().items())}
        sharded = {}
        for k, v in model.state_dict().items():  # the tutorial: nn.Parameter(distribute_tensor(full, mesh, ...))
            sharded[k] = nn.Parameter(distribute_tensor(full[k], v.device_mesh, list(v.placements)))
        model.load_state_dict(sharded, strict=False, assign=True)
        got["values"] = {k: v.full_tensor().tolist() for k, v in model.state_dict().items()}
        opt = tessel.optim.AdamW(model.parameters(), lr=0.1)
        _init_optim_state(opt)
        got["state"] = sorted(next(iter(opt.state_dict()["state"].values())))
        got["unchanged"] = model[0].weight.full_tensor().tolist() == got["values"]["0.weight"]

    tessel.run_ranks(2, rank_fn)
    assert got["values"]["0.weight"] == [[1.0] * 4] * 4 and got["values"]["1.bias"] == [4.0, 4.0]
    assert got["state"] == ["exp_avg", "exp_avg_sq", "step"] and got["unchanged"]  # lr 0: nothing moved


def test_sgd_optimizer_state_dict_has_torchs_keys_and_resumes_its_momentum_without_a_step():
    # torch's SGD state is {"momentum_buffer"} alone: a torch DCP checkpoint of it did not load ("optim.state.
    # weight.step are not in the checkpoint"), and a loaded buffer without a step was started over
    from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    def train(model, opt, steps):
        for i in range(steps):
            opt.zero_grad()
            (model(tessel.full((2, 3), float(i + 1))) ** 2).sum().backward()
            opt.step()

    tessel.manual_seed(0)
    model = nn.Linear(3, 2)
    start = copy.deepcopy(model.state_dict())
    opt = tessel.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, opt, 1)
    sd = get_optimizer_state_dict(model, opt)
    assert {k: sorted(v) for k, v in sd["state"].items()} == {"weight": ["momentum_buffer"],
                                                               "bias": ["momentum_buffer"]}
    saved = {k: {"momentum_buffer": v["momentum_buffer"].clone()} for k, v in sd["state"].items()}
    params = copy.deepcopy(model.state_dict())
    train(model, opt, 1)
    want = model.weight.detach().numpy().copy()
    resumed = nn.Linear(3, 2)
    resumed.load_state_dict(params)
    opt2 = tessel.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
    set_optimizer_state_dict(resumed, opt2, {"state": saved, "param_groups": sd["param_groups"]})
    train(resumed, opt2, 1)
    np.testing.assert_allclose(resumed.weight.detach().numpy(), want, rtol=1e-6)
    assert not np.allclose(start["weight"].numpy(), want)



def test_get_optimizer_state_dict_initializes_a_fresh_optimizer_with_torchs_zero_lr_step():
    # torch's _init_optim_state: a fresh Adam's state dict comes from a zero-lr step (step 1), so the first real
    # step is Adam's second (bias corrections 1 - 0.9^2, 1 - 0.999^2), as in torchtitan's resume-at-start
    from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict
    model = nn.Linear(2, 1, bias=False)
    with tessel.no_grad():
        model.weight.copy_(tessel.tensor([[0.5, -1.0]]))
    opt = tessel.optim.Adam(model.parameters(), lr=0.1)
    sd = get_optimizer_state_dict(model, opt)
    assert sd["state"]["weight"]["step"].item() == 1.0 and model.weight.tolist() == [[0.5, -1.0]]
    model(tessel.tensor([[1.0, 2.0]])).sum().backward()  # gradient [1, 2]
    opt.step()
    g = np.array([1.0, 2.0])
    m, v = 0.1 * g, 0.001 * g * g
    want = np.array([0.5, -1.0]) - 0.1 * (m / (1 - 0.9 ** 2)) / (np.sqrt(v / (1 - 0.999 ** 2)) + 1e-8)
    np.testing.assert_allclose(model.weight.detach().numpy()[0], want, rtol=1e-6)



def test_view_then_permute_backward_through_full_tensor_to_local_and_redistribute():
    # attention's h.view(...).transpose(...) then full_tensor / to_local / redistribute: the gradient's pieces
    # come back laid out as the redistribute made them, not as the global strides say; view's backward raised
    a = np.arange(64, dtype=np.float32).reshape(8, 8) / 10
    w = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 8, 2)
    xp = tessel.tensor(a, requires_grad=True)
    (xp.view(8, 2, 4).permute(2, 0, 1) * tessel.tensor(w)).sum().backward()
    want = xp.grad.numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for placement in (Shard(0), Replicate()):
            for how in ("full_tensor", "redistribute"):
                x = distribute_tensor(tessel.tensor(a), mesh, [placement]).requires_grad_(True)
                o = x.view(8, 2, 4).permute(2, 0, 1)
                full = o.full_tensor() if how == "full_tensor" else o.redistribute(mesh, [Replicate()]).to_local()
                (full * tessel.tensor(w)).sum().backward()
                got[(dist.get_rank(), str(placement), how)] = x.grad.full_tensor().numpy()

    tessel.run_ranks(2, rank_fn)
    assert len(got) == 8
    for key, grad in got.items():
        np.testing.assert_allclose(grad, want, rtol=1e-6, err_msg=str(key))



def test_a_sharded_parameters_gradient_is_laid_out_as_the_parameter():
    # F.linear(x, W S(0)) with a batch-sharded x: the weight's gradient came out Partial(sum) at full size (or
    # Shard(1)), so a local update W.to_local() -= lr * W.grad.to_local() raised; torch's is Shard(0)
    import tessel.nn.functional as F
    x_np = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    w_np = np.linspace(0.5, -0.5, 96, dtype=np.float32).reshape(12, 8)
    w = tessel.tensor(w_np, requires_grad=True)
    F.linear(tessel.tensor(x_np), w).square().sum().backward()
    want = w_np - 0.1 * w.grad.numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for xp in (Shard(0), Shard(1)):
            x = distribute_tensor(tessel.tensor(x_np), mesh, [xp])
            W = nn.Parameter(distribute_tensor(tessel.tensor(w_np), mesh, [Shard(0)]))
            F.linear(x, W).full_tensor().square().sum().backward()
            got[(dist.get_rank(), str(xp), "placements")] = W.grad.placements
            with tessel.no_grad():
                W.to_local().add_(W.grad.to_local(), alpha=-0.1)  # a hand-written local update
            got[(dist.get_rank(), str(xp), "W")] = W.full_tensor().numpy()

    tessel.run_ranks(2, rank_fn)
    for key, value in got.items():
        if key[2] == "placements":
            assert value == (Shard(0),), key
        else:
            np.testing.assert_allclose(value, want, rtol=1e-5, err_msg=str(key))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
