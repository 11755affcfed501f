"""Data parallelism that keeps parameters whole, from Python: DistributedDataParallel's buckets (torch's Reducer
order, all-reduced during the backward, find_unused_parameters) and ZeroRedundancyOptimizer (torch's ZeRO-1),
which trains exactly as one optimizer on one rank, partitions as torch does, broadcasts with the collectives
counted by the comm tracer, and round-trips torch's consolidated state dict."""
import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.optim import ZeroRedundancyOptimizer
from tessel.nn.parallel import DistributedDataParallel as DDP

RNG = np.random.default_rng(7)
X_ALL = RNG.standard_normal((8, 3)).astype(np.float32)
Y_ALL = RNG.standard_normal((8, 2)).astype(np.float32)


def make(seed=0):
    tessel.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))  # 12, 4, 8 and 2 elements


def loss_of(model, x, y):
    return ((model(tessel.tensor(x)) - tessel.tensor(y)) ** 2).mean()


def train(model, opt, x, y, steps, extra=None):
    """`steps` steps on the batch (x, y); extra(opt, i) runs before step i (an LR schedule)."""
    for i in range(steps):
        if extra is not None:
            extra(opt, i)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()


def reference(steps, lr=0.05, extra=None):
    """One process, the whole batch, a plain AdamW: the parameters after `steps` steps and its state dict."""
    model = make(0)
    opt = tessel.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    train(model, opt, X_ALL, Y_ALL, steps, extra)
    return [p.detach().numpy() for p in model.parameters()], opt.state_dict()


def zero_steps(rank, model, opt, steps, extra=None):
    """`steps` steps on this rank's half of the batch."""
    train(model, opt, X_ALL[rank * 4:(rank + 1) * 4], Y_ALL[rank * 4:(rank + 1) * 4], steps, extra)


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))
        self.on_hidden_grad = None

    def forward(self, x):
        h = self.net[0](x)
        if self.on_hidden_grad is not None and h.requires_grad:
            h.register_hook(self.on_hidden_grad)
        for layer in list(self.net)[1:]:
            h = layer(h)
        return h


def test_ddp_buckets_follow_torchs_reducer_and_reduce_during_the_backward():
    def make_deep():
        tessel.manual_seed(0)
        return Deep()

    ref = make_deep()
    opt = tessel.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        loss_of(ref, X_ALL, Y_ALL).backward()
        opt.step()
    want = [p.detach().numpy() for p in ref.parameters()]
    buckets, traces, results = {}, {}, {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        module = make_deep()
        # 524 bytes: parameters in reverse registration order (bytes: 8, 128, 64 | 1024 | 64, 192); one larger than
        # the cap gets a bucket of its own.
        model = DDP(module, bucket_cap_mb=524 / 2 ** 20)
        buckets[rank] = model._bucket_fqns()
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        x, y = X_ALL[rank * 4:(rank + 1) * 4], Y_ALL[rank * 4:(rank + 1) * 4]
        seen = []
        for _ in range(2):
            opt.zero_grad()
            with tessel.CommTracer() as t:
                module.on_hidden_grad = lambda g: seen.append(t.total())
                loss_of(model, x, y).backward()
            opt.step()
        traces[rank] = (t.summary(), seen)
        results[rank] = [p.detach().numpy() for p in module.parameters()]

    tessel.run_ranks(2, rank_fn)
    assert buckets[0] == buckets[1] == [["net.4.bias", "net.4.weight", "net.2.bias"], ["net.2.weight"],
                                        ["net.0.bias", "net.0.weight"]]
    # When the first layer's output gradient exists, the two later buckets are already on the wire.
    assert traces[0] == traces[1] == ("all_reduce(world) x3", [2, 2])
    for r in range(2):
        for got, w in zip(results[r], want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
        self.out.weight = self.emb.weight  # one parameter under two names

    def forward(self, i):
        return self.out(self.emb(i))


def test_ddp_reduces_a_tied_weight_once_under_its_first_name():
    tessel.manual_seed(0)
    ref = Tied()
    ref(tessel.tensor([0, 1, 2, 3])).sum().backward()
    want = ref.emb.weight.grad.numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        model = DDP(Tied())
        with tessel.CommTracer() as t:
            model(tessel.tensor([0, 1] if dist.get_rank() == 0 else [2, 3])).sum().backward()
        got[dist.get_rank()] = (model._bucket_fqns(), t.summary(), model.module.emb.weight.grad.numpy())

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        assert got[r][:2] == ([["emb.weight"]], "all_reduce(world) x1")
        np.testing.assert_allclose(got[r][2], want / 2, rtol=1e-6)  # the mean of the ranks' sums


class Branchy(nn.Module):
    def __init__(self, use_side):
        super().__init__()
        self.main, self.side, self.unused = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2)
        self.use_side = use_side

    def forward(self, x):
        y = self.main(x)
        return y + self.side(x) if self.use_side else y


def test_ddp_find_unused_parameters_as_torch():
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        x = tessel.tensor(X_ALL[rank * 4:(rank + 1) * 4])
        tessel.manual_seed(1)
        found = DDP(Branchy(use_side=rank == 0), find_unused_parameters=True)
        with tessel.CommTracer() as t:
            found(x).sum().backward()
        side = found.module.side.weight.grad.numpy()
        got[rank] = (t.summary(), found.module.unused.weight.grad, side, found.module.main.weight.grad.numpy())
        found(x)  # no error: unused parameters are expected
        tessel.manual_seed(1)
        plain = DDP(Branchy(use_side=True))
        plain(x).sum().backward()  # `unused` had no gradient: the next forward raises, as torch's
        with pytest.raises(RuntimeError, match=r"Expected to have finished reduction in the prior iteration(.|\n)*"
                                               r"find_unused_parameters=True(.|\n)*rank %d: unused.bias, unused.weight"
                                               % rank):
            plain(x)

    tessel.run_ranks(2, rank_fn)
    x_sum = X_ALL.reshape(2, 4, 3).sum(1)  # per rank: d(sum y)/dW = 1 · Σ_rows x for each of the 2 outputs
    for r in range(2):
        summary, unused_grad, side, main = got[r]
        assert summary == "all_reduce(world) x2"  # one bucket, then the flags
        assert unused_grad is None
        np.testing.assert_allclose(side, np.tile(x_sum[0] / 2, (2, 1)), rtol=1e-6)  # rank 0's, averaged with zeros
        np.testing.assert_allclose(main, np.tile(x_sum.mean(0), (2, 1)), rtol=1e-6)


def test_device_mesh_from_group_wraps_an_existing_group():
    def rank_fn(world):
        dist.init_process_group()
        from tessel.distributed.device_mesh import DeviceMesh
        g = dist.new_group([0, 1])
        mesh = DeviceMesh.from_group(g, "cpu", mesh_dim_names=("dp",))
        assert mesh.shape == (2,) and mesh.mesh_dim_names == ("dp",) and mesh.get_local_rank() == dist.get_rank()
        t = tessel.ones(1) * (dist.get_rank() + 1)
        with tessel.CommTracer() as tr:
            mesh.get_group().all_reduce(t, tessel._C.ReduceOp.SUM, False)
        assert tr.summary() == "all_reduce(world.0) x1" and t.tolist() == [3.0]  # the group keeps its name
        with pytest.raises(ValueError, match="Must pass mesh if passing multiple ProcessGroups"):  # torch's
            DeviceMesh.from_group([g, g], "cpu")

    tessel.run_ranks(2, rank_fn)


class Scaled(nn.Module):
    """make()'s layers times a buffer (so DDP's per-forward buffer broadcast is part of every iteration)."""

    def __init__(self):
        super().__init__()
        tessel.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        self.register_buffer("scale", tessel.full((1,), 2.0))

    def forward(self, x):
        return self.net(x) * self.scale


def uneven_batches(rank):
    """Rank 0 has 2 batches of 2 rows, rank 1 has 4."""
    rows = X_ALL.reshape(4, 2, 3), Y_ALL.reshape(4, 2, 2)
    return [(rows[0][i], rows[1][i]) for i in range(2 if rank == 0 else 4)]


@pytest.mark.parametrize("with_zero", [False, True])
def test_join_trains_uneven_inputs_as_the_live_ranks_gradients_over_the_initial_world(with_zero):
    ref = Scaled()  # one process: each step's gradient is the sum over the ranks that still have a batch, over 2
    opt = tessel.optim.AdamW(ref.parameters(), lr=0.05) if with_zero else tessel.optim.SGD(ref.parameters(), lr=0.1)
    for i in range(4):
        opt.zero_grad()
        live = [r for r in range(2) if i < len(uneven_batches(r))]
        (sum(loss_of(ref, *uneven_batches(r)[i]) for r in live) / 2).backward()
        opt.step()
    want = [p.detach().numpy() for p in ref.parameters()]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        from tessel.distributed.algorithms.join import Join
        model = DDP(Scaled())
        if with_zero:
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tessel.optim.AdamW, lr=0.05)
            context = Join([model, opt])
        else:
            opt = tessel.optim.SGD(model.parameters(), lr=0.1)
            context = model.join()
        with context:
            for x, y in uneven_batches(dist.get_rank()):
                opt.zero_grad()
                loss_of(model, x, y).backward()
                opt.step()
        got[dist.get_rank()] = [p.detach().numpy() for p in model.module.parameters()]

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        for g, w in zip(got[r], want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_join_throw_on_early_termination_raises_on_every_rank():
    errors = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(Scaled())
        try:
            with model.join(throw_on_early_termination=True):
                for x, y in uneven_batches(rank)[:1 if rank == 0 else 3]:
                    loss_of(model, x, y).backward()
        except RuntimeError as e:
            errors[rank] = str(e)

    tessel.run_ranks(2, rank_fn)
    assert errors == {0: "Rank 0 exhausted all inputs.",
                      1: "Detected at least one rank that exhausted inputs. Throwing across all ranks."}


def test_zero_redundancy_optimizer_steps_as_one_adamw_and_partitions_whole_parameters_as_torch():
    want, _ = reference(3)
    results, owned, traces = {}, {}, {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(rank))
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tessel.optim.AdamW, lr=0.05,
                                      weight_decay=0.1)
        # Largest first, each to the rank with the fewest elements so far: 12 -> 0, 8 -> 1, 4 -> 1, 2 -> 0.
        owned[rank] = sorted(p.numel() for g in opt.optim.param_groups for p in g["params"])
        assert opt.param_groups[0]["betas"] == (0.9, 0.999)  # the local optimizer's defaults, synced back
        zero_steps(rank, model, opt, 2)
        opt.zero_grad()
        loss_of(model, X_ALL[rank * 4:(rank + 1) * 4], Y_ALL[rank * 4:(rank + 1) * 4]).backward()
        with tessel.CommTracer() as t:
            opt.step()  # the local step, then one broadcast per parameter from its owner
        traces[rank] = t.summary()
        results[rank] = [p.detach().numpy() for p in model.module.parameters()]

    tessel.run_ranks(2, rank_fn)
    assert owned == {0: [2, 12], 1: [4, 8]}
    assert traces[0] == traces[1] == "broadcast(world) x4"
    for r in range(2):
        for got, w in zip(results[r], want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_zero_bucket_view_broadcasts_once_per_rank_and_param_group_options_reach_the_local_optimizer():
    # lr 0 for the first step through param_groups (as an LR scheduler writes it), then 0.05.
    def lr_schedule(opt, i):
        for g in opt.param_groups:
            g["lr"] = 0.0 if i == 0 else 0.05

    want, _ = reference(3, extra=lr_schedule)
    results, traces = {}, {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(rank))
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tessel.optim.AdamW,
                                      parameters_as_bucket_view=True, lr=0.05, weight_decay=0.1)
        first = [p.detach().numpy().copy() for p in model.module.parameters()]
        with tessel.CommTracer() as t:
            zero_steps(rank, model, opt, 1, extra=lr_schedule)
        traces[rank] = t.summary()
        after_lr0 = [p.detach().numpy() for p in model.module.parameters()]
        for a, b in zip(first, after_lr0):  # lr 0: AdamW's decay is lr-scaled too, nothing moves
            np.testing.assert_array_equal(a, b)
        zero_steps(rank, model, opt, 2, extra=lambda o, i: lr_schedule(o, i + 1))
        results[rank] = [p.detach().numpy() for p in model.module.parameters()]

    tessel.run_ranks(2, rank_fn)
    # DDP's gradient all-reduce (one bucket of the float32 gradients and flags), then one broadcast per rank.
    assert traces[0] == traces[1] == "all_reduce(world) x1, broadcast(world) x2"
    for r in range(2):
        for got, w in zip(results[r], want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_zero_consolidated_state_dict_is_torchs_layout_and_resumes_training():
    _, want_state = reference(2)
    want_after, _ = reference(3)
    saved, results = {}, {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(rank))
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tessel.optim.AdamW, lr=0.05,
                                      weight_decay=0.1)
        zero_steps(rank, model, opt, 2)
        with pytest.raises(RuntimeError, match=r"consolidate_state_dict\(to=%d\)" % rank):
            opt.state_dict()
        opt.consolidate_state_dict(to=0)
        if rank == 0:
            saved["state"] = opt.state_dict()
        else:
            with pytest.raises(RuntimeError, match="has not been consolidated"):
                opt.state_dict()
        saved["params"] = [p.detach().numpy().copy() for p in model.module.parameters()]
        dist.barrier()
        # A new job: fresh model and optimizer, the saved parameters and state dict, one more step.
        fresh = DDP(make(5))
        with tessel.no_grad():
            for p, v in zip(fresh.module.parameters(), saved["params"]):
                p.copy_(tessel.tensor(v))
        opt2 = ZeroRedundancyOptimizer(fresh.parameters(), optimizer_class=tessel.optim.AdamW, lr=0.5)
        opt2.load_state_dict(saved["state"])
        assert opt2.param_groups[0]["lr"] == 0.05 and opt2.optim.param_groups[0]["weight_decay"] == 0.1
        zero_steps(rank, fresh, opt2, 1)
        results[rank] = [p.detach().numpy() for p in fresh.module.parameters()]

    tessel.run_ranks(2, rank_fn)
    got = saved["state"]
    assert sorted(got["state"]) == sorted(want_state["state"]) == [0, 1, 2, 3]
    assert got["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert {k: v for k, v in got["param_groups"][0].items()} == want_state["param_groups"][0]
    for i in range(4):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            np.testing.assert_allclose(got["state"][i][key].numpy(), want_state["state"][i][key].numpy(),
                                       rtol=1e-5, atol=1e-7)
    for r in range(2):
        for g, w in zip(results[r], want_after):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_zero_add_param_group_keeps_earlier_owners_and_bad_input_raises_torchs_errors():
    owners, results = {}, {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(rank))
        first, second = model.module[0], model.module[2]
        opt = ZeroRedundancyOptimizer(first.parameters(), optimizer_class=tessel.optim.SGD, lr=0.1)
        before = {tuple(p.shape): r for r, gs in enumerate(opt._partition_parameters()) for g in gs
                  for p in g["params"]}
        opt.add_param_group({"params": second.parameters(), "lr": 0.2})
        after = {tuple(p.shape): r for r, gs in enumerate(opt._partition_parameters()) for g in gs
                 for p in g["params"]}
        owners[rank] = (before, after, [len(g["params"]) for g in opt.optim.param_groups],
                        [g["lr"] for g in opt.optim.param_groups])
        x, y = X_ALL[rank * 4:(rank + 1) * 4], Y_ALL[rank * 4:(rank + 1) * 4]
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
        results[rank] = [p.detach().numpy() for p in model.module.parameters()]
        mixed = ZeroRedundancyOptimizer([first.bias, second.weight, first.weight, second.bias],
                                        optimizer_class=tessel.optim.SGD, lr=0.1)  # 4, 8, 12, 2 elements
        owners[rank] += (sorted(p.numel() for g in mixed.optim.param_groups for p in g["params"]),)
        with pytest.raises(ValueError, match="more than one parameter group"):
            opt.add_param_group({"params": [second.weight]})
        with pytest.raises(ValueError, match="same dense type"):
            ZeroRedundancyOptimizer([first.weight, tessel.zeros(2, dtype=tessel.float64, requires_grad=True)],
                                    optimizer_class=tessel.optim.SGD, lr=0.1)
        with pytest.raises(NotImplementedError, match="overlap_with_ddp"):
            ZeroRedundancyOptimizer(first.parameters(), optimizer_class=tessel.optim.SGD, overlap_with_ddp=True)
        with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
            ZeroRedundancyOptimizer(first.weight, optimizer_class=tessel.optim.SGD, lr=0.1)
        with pytest.raises(ValueError, match="empty parameter list"):
            ZeroRedundancyOptimizer([], optimizer_class=tessel.optim.SGD, lr=0.1)

    tessel.run_ranks(2, rank_fn)
    # first: weight 12 -> 0, bias 4 -> 1; second (sizes continue 12, 4): weight 8 -> 1, bias 2 -> 0 (a tie).
    assert owners[0][0] == {(4, 3): 0, (4,): 1}
    assert owners[0][1] == owners[1][1] == {(4, 3): 0, (4,): 1, (2, 4): 1, (2,): 0}
    assert owners[0][2:4] == owners[1][2:4] == ([1, 1], [0.1, 0.2])
    assert owners[0][4] == [2, 12] and owners[1][4] == [4, 8]  # sorted largest first, not in the given order
    model = make(0)  # one process: SGD with lr 0.1 on the first layer, 0.2 on the second
    opt = tessel.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.2}], lr=0.1)
    loss_of(model, X_ALL, Y_ALL).backward()
    opt.step()
    for r in range(2):
        for got, w in zip(results[r], [p.detach().numpy() for p in model.parameters()]):
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7)


def test_ddp_init_sync_false_keeps_each_ranks_parameters_and_a_module_without_trainable_ones_is_refused():
    """torch's init_sync=False keeps every rank's parameters (tessel broadcast rank 0's anyway: a run started
    from per-rank initializations silently became rank 0's); DDP over a module with no parameter requiring a
    gradient is torch's RuntimeError."""
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        model = DDP(make(seed=rank), init_sync=False)
        got[rank, "kept"] = [p.detach().numpy() for p in model.module.parameters()]
        got[rank, "synced"] = [p.detach().numpy() for p in DDP(make(seed=rank)).module.parameters()]
        frozen = make()
        for p in frozen.parameters():
            p.requires_grad_(False)
        with pytest.raises(RuntimeError, match="DistributedDataParallel is not needed when a module doesn't have"):
            DDP(frozen)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for rank in range(2):
        own = [p.detach().numpy() for p in make(seed=rank).parameters()]
        first = [p.detach().numpy() for p in make(seed=0).parameters()]
        assert all(np.array_equal(a, b) for a, b in zip(got[rank, "kept"], own))
        assert all(np.array_equal(a, b) for a, b in zip(got[rank, "synced"], first))
    assert not np.array_equal(got[0, "kept"][0], got[1, "kept"][0])


def test_join_keeps_each_ranks_buffers_when_broadcast_buffers_is_false():
    """torch's final sync under Join broadcasts the last joiner's buffers only when forward_sync_buffers
    (broadcast_buffers) is on; tessel always did: running statistics and num_batches_tracked became the other
    rank's (2 batches counted 4)."""
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        tessel.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)), broadcast_buffers=False)
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        with model.join():
            for x, y in uneven_batches(rank):
                opt.zero_grad()
                loss_of(model, x, y).backward()
                opt.step()
        bn = model.module[1]
        got[rank] = (int(bn.num_batches_tracked.item()), bn.running_mean.numpy().copy())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0][0] == 2 and got[1][0] == 4
    assert not np.array_equal(got[0][1], got[1][1])


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
