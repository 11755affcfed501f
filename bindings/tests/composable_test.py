"""torch.distributed._composable's APIs: replicate (composable DDP, torchtitan's apply_ddp), checkpoint (composable
activation checkpointing) and the contract registry, on 2 ranks of the threads backend. Expected gradients come
from a plain module with rank 0's weights run on each rank's batch, averaged here; the registry, class names,
errors and messages are those torch 2.15 gave side by side (gloo, 2 ranks)."""
import pytest

import tessel
import tessel.nn as nn
from tessel.distributed._composable import checkpoint, replicate
from tessel.distributed._composable.contract import _get_registry
from tessel.distributed._composable.replicate import DDP
from tessel.distributed.fsdp import fully_shard
from ranks_testing import on_ranks


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(3, 2)

    def forward(self, x):
        return self.b(tessel.relu(self.a(x)))


def make(seed):
    """A Net whose weights depend on seed (ranks start different: replicate must broadcast rank 0's)."""
    net = Net()
    with tessel.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(tessel.arange(p.numel(), dtype=tessel.float32).reshape(p.shape) * 0.1 * (seed + 1) - 0.2 * i)
    return net


def batch(rank):
    return tessel.arange(8, dtype=tessel.float32).reshape(2, 4) * (rank + 1) * 0.1


def local_grads(loss_of, rank, steps=1):
    """Gradients of rank 0's Net on this rank's batch, summed over `steps` backwards, without any communication."""
    net = make(0)
    for _ in range(steps):
        loss_of(net(batch(rank))).backward()
    return [p.grad.clone() for p in net.parameters()]


def on_two_ranks(fn):
    return on_ranks(2, fn)


def assert_close(got, want):
    for g, w in zip(got, want):
        assert tessel.allclose(g, w, rtol=1e-6, atol=1e-6), (g, w)


def test_replicate_keeps_the_module_and_averages_gradients_over_the_ranks():
    def loss_of(y):
        return y.pow(2).sum()

    def run(r):
        m = make(r)
        assert replicate(m) is m
        first = m.a.weight.detach().clone()  # the rank's own weights until the first forward broadcasts rank 0's
        loss_of(m(batch(r))).backward()
        return (type(m).__name__, isinstance(m, DDP), isinstance(m, Net), list(_get_registry(m)),
                list(m.state_dict()), first, m.a.weight.detach().clone(), [p.grad.clone() for p in m.parameters()])

    out = on_two_ranks(run)
    want = [(g0 + g1) / 2 for g0, g1 in zip(local_grads(loss_of, 0), local_grads(loss_of, 1))]
    for r, (name, is_ddp, is_net, registry, keys, first, weight, grads) in out.items():
        assert (name, is_ddp, is_net, registry) == ("DDPNet", True, True, ["replicate"])
        assert keys == ["a.weight", "a.bias", "b.weight", "b.bias"]  # no "module." prefix, unlike the DDP wrapper
        assert tessel.equal(first, make(r).a.weight.detach())
        assert tessel.equal(weight, make(0).a.weight.detach())
        assert_close(grads, want)


def test_set_requires_gradient_sync_accumulates_locally_until_a_synced_backward():
    def run(r):
        m = make(0)
        replicate(m)
        m.set_requires_gradient_sync(False)
        m(batch(r)).sum().backward()
        local = [p.grad.clone() for p in m.parameters()]
        m.set_requires_gradient_sync(True)
        m(batch(r)).sum().backward()
        return local, [p.grad.clone() for p in m.parameters()]

    out = on_two_ranks(run)
    per_rank = {r: local_grads(lambda y: y.sum(), r) for r in (0, 1)}
    for r, (local, synced) in out.items():
        assert_close(local, per_rank[r])  # no communication: this rank's own gradient
        assert_close(synced, [g0 + g1 for g0, g1 in zip(per_rank[0], per_rank[1])])  # mean over ranks of 2 steps


def test_ignored_modules_and_fully_sharded_submodules_are_left_to_themselves():
    def run(r):
        m = make(0)
        replicate(m, ignored_modules=[m.a])
        m(batch(r)).sum().backward()
        ignored = (m.a.bias.grad.clone(), m.b.bias.grad.clone())
        inner = make(0)
        fully_shard(inner.a)
        replicate(inner)
        inner(batch(r)).sum().backward()
        return ignored, inner.b.bias.grad.clone(), inner.a.bias.grad.full_tensor(), \
            list(_get_registry(inner)), list(_get_registry(inner.a))

    out = on_two_ranks(run)
    per_rank = {r: local_grads(lambda y: y.sum(), r) for r in (0, 1)}
    mean = [(g0 + g1) / 2 for g0, g1 in zip(per_rank[0], per_rank[1])]
    for r, ((a_bias, b_bias), inner_b, inner_a, registry, inner_registry) in out.items():
        assert_close([a_bias, b_bias], [per_rank[r][1], mean[3]])  # a's gradient stays this rank's
        assert_close([inner_b, inner_a], [mean[3], mean[1]])  # fully_shard reduces a, replicate averages b
        assert (registry, inner_registry) == (["replicate"], ["fully_shard"])


def test_comm_hook_registered_before_the_first_forward_reduces_the_gradients():
    def hook(state, bucket):
        state.append(bucket.index())
        from tessel.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        return allreduce_hook(None, bucket)

    def run(r):
        m, seen = make(0), []
        replicate(m, bucket_cap_mb=1)
        m.register_comm_hook(seen, hook)  # kept until the first forward builds the reducer, as torch
        m(batch(r)).sum().backward()
        return seen, [p.grad.clone() for p in m.parameters()]

    out = on_two_ranks(run)
    per_rank = {r: local_grads(lambda y: y.sum(), r) for r in (0, 1)}
    for seen, grads in out.values():
        assert seen == [0]
        assert_close(grads, [(g0 + g1) / 2 for g0, g1 in zip(per_rank[0], per_rank[1])])


def test_replicate_errors_are_torchs():
    def run(r):
        m = make(0)
        replicate(m)
        with pytest.raises(AssertionError, match="Each distinct composable distributed API can only be applied to a "
                                                 "module once. replicate has already been applied"):
            replicate(m)
        sharded = make(0)
        fully_shard(sharded)
        with pytest.raises(RuntimeError, match=r"Cannot apply `replicate\(\)` on a Module already managed by "
                                               "`fully_shard`"):
            replicate(sharded)
        with pytest.raises(RuntimeError, match="Expected device_id to be int or torch.device, but got <class 'str'>"):
            replicate(make(0), device_id="cpu")

    on_two_ranks(run)


def test_composable_checkpoint_recomputes_with_the_same_gradients():
    def grads(ckpt, target):
        m = make(0)
        if ckpt:
            checkpoint(getattr(m, target) if target else m)
        x = batch(1).requires_grad_(True)
        m(x).pow(2).sum().backward()
        return m, [p.grad for p in m.parameters()] + [x.grad]

    _, plain = grads(False, None)
    for target in ("a", None):  # a C++ layer (checkpointed by the C++ wrapper), the Python root
        m, got = grads(True, target)
        assert all(tessel.equal(g, w) for g, w in zip(got, plain))
        module = getattr(m, target) if target else m
        assert list(_get_registry(module)) == ["checkpoint"]
        assert type(module).__name__ == ("Linear" if target else "Net")
        assert list(m.state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]
    m = make(0)
    checkpoint(m)
    checkpoint.state(m).enable_hook = False  # off again: the forward runs as it is
    m(batch(1)).pow(2).sum().backward()
    assert all(tessel.equal(p.grad, w) for p, w in zip(m.parameters(), plain))


def test_composable_checkpoint_saves_only_its_inputs():
    """The checkpointed module's intermediate tensors are not kept for backward: fewer saved activations."""
    def saved(ckpt):
        m = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
        if ckpt:
            checkpoint(m)
        count = []
        with tessel.autograd.graph.saved_tensors_hooks(lambda t: count.append(t.numel()) or t, lambda t: t):
            m(tessel.ones(4, 8, requires_grad=True)).sum().backward()
        return sum(count)

    assert saved(True) < saved(False)


def test_composable_checkpoint_errors_are_torchs():
    with pytest.raises(NotImplementedError, match="use_reentrant=True is not supported in composable checkpoint"):
        checkpoint(make(0), use_reentrant=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
        checkpoint(make(0), foo=1)


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Net(), Net()])

    def forward(self, x):
        h = self.layers[0](x)
        return self.layers[1](tessel.cat([h, h], dim=1))


def make_blocks(seed):
    blocks = Blocks()
    with tessel.no_grad():
        for i, p in enumerate(blocks.parameters()):
            p.copy_(((tessel.arange(p.numel(), dtype=tessel.float32).reshape(p.shape) * 0.37 + i) % 1.3 - 0.6)
                    * (seed + 1))
    return blocks


def blocks_local_grads(rank, steps=1):
    model = make_blocks(0)
    for _ in range(steps):
        model(batch(rank)).pow(2).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_replicate_with_fsdp_keeps_whole_replicated_parameters_and_averages_gradients():
    from tessel.distributed._composable.replicate_with_fsdp import ReplicateModule
    from tessel.distributed._composable.replicate_with_fsdp import replicate as replicate_fsdp
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.fsdp import FSDPModule

    def run(r):
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        model = make_blocks(0)
        for block in model.layers:
            replicate_fsdp(block, mesh=mesh)
        replicate_fsdp(model, mesh=mesh)
        w = model.layers[0].a.weight
        seen = (type(model).__name__, type(model.layers[0]).__name__, isinstance(model, ReplicateModule),
                isinstance(model, FSDPModule), list(_get_registry(model)), str(w.placements), tuple(w.to_local().shape),
                list(model.state_dict())[:2])
        model(batch(r)).pow(2).sum().backward()
        mean = [p.grad.full_tensor() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        model.set_requires_gradient_sync(False)  # accumulate locally, then one synced backward
        model(batch(r)).pow(2).sum().backward()
        local_none = all(p.grad is None for p in model.parameters())
        model.set_requires_gradient_sync(True)
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(1.0)  # torchtitan's: summed, not averaged
        model(batch(r)).pow(2).sum().backward()
        return seen, mean, local_none, [p.grad.full_tensor() for p in model.parameters()]

    out = on_two_ranks(run)
    per_rank = {r: blocks_local_grads(r) for r in (0, 1)}
    for seen, mean, local_none, summed in out.values():
        assert seen == ("ReplicateBlocks", "ReplicateNet", True, True, ["replicate"], "(Replicate(),)", (3, 4),
                        ["layers.0.a.weight", "layers.0.a.bias"])
        assert_close(mean, [(g0 + g1) / 2 for g0, g1 in zip(per_rank[0], per_rank[1])])
        assert local_none  # as torch: the unsynced backward leaves .grad unset until the synced one
        assert_close(summed, [2 * (g0 + g1) for g0, g1 in zip(per_rank[0], per_rank[1])])


def test_replicate_with_fsdp_trains_as_one_process_with_sgd():
    from tessel.distributed._composable.replicate_with_fsdp import replicate as replicate_fsdp

    def run(r):
        model = make_blocks(0)
        for block in model.layers:
            replicate_fsdp(block)  # the default mesh: the world, dim "replicate"
        replicate_fsdp(model)
        opt = tessel.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(3):
            model(batch(r)).pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
        return model.layers[1].b.weight.device_mesh.mesh_dim_names, [p.full_tensor() for p in model.parameters()]

    out = on_two_ranks(run)
    ref = make_blocks(0)
    opt = tessel.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(3):
        ((ref(batch(0)).pow(2).sum() + ref(batch(1)).pow(2).sum()) / 2).backward()
        opt.step()
        opt.zero_grad()
    for names, params in out.values():
        assert names == ("replicate",)
        for got, want in zip(params, ref.parameters()):
            assert tessel.allclose(got, want.detach(), rtol=1e-5, atol=1e-6)


def test_replicate_with_fsdp_errors_are_torchs():
    from tessel.distributed._composable.replicate_with_fsdp import replicate as replicate_fsdp
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.fsdp import DataParallelMeshDims

    def run(r):
        sharded = make(0)
        fully_shard(sharded)
        with pytest.raises(RuntimeError, match=r"Cannot apply `replicate\(\)` on a Module already managed by "):
            replicate_fsdp(sharded)
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("a", "b"))
        with pytest.raises(ValueError, match="replicate expects a 1D DeviceMesh but got"):
            replicate_fsdp(make(0), mesh=mesh)
        with pytest.raises(ValueError, match=r"replicate\(\) with dp_mesh_dims requires replicate-only dims"):
            replicate_fsdp(make(0), mesh=mesh, dp_mesh_dims=DataParallelMeshDims(shard="b"))
        plain = make(0)
        fully_shard(plain, mesh=mesh, dp_mesh_dims=DataParallelMeshDims(replicate="b"))  # torch's DDPMeshInfo
        return str(plain.a.weight.placements)

    assert set(on_two_ranks(run).values()) == {"(Replicate(), Replicate())"}


def test_ddp_takes_torch_2_15_arguments_and_private_methods():
    from tessel.distributed.algorithms.ddp_comm_hooks import default_hooks
    from tessel.nn.parallel.distributed import DistributedDataParallel  # torch's module path

    class Builtin:  # torch's dist.BuiltinCommHookType members carry their names
        name = "FP16_COMPRESS"

    def run(r):
        m = make(0)
        ddp = DistributedDataParallel(m, init_sync=True, forward_sync_buffers=True, skip_all_reduce_unused_params=False,
                                      bucket_cap_mb_list=[1, 2], batched_grad_copy=True, lazy_bucket_allocation=True)
        ddp._set_static_graph()
        ddp._register_builtin_comm_hook(Builtin())
        ddp(batch(r)).sum().backward()
        seq = nn.Sequential(make(0), nn.ReLU(), make(1))
        replicate(seq)
        head = seq[:1]  # a slice of a replicated Sequential is a plain Sequential, as torch's
        return (ddp.static_graph, ddp._comm_hook[1] is default_hooks.fp16_compress_hook,
                [p.grad.clone() for p in m.parameters()], type(head).__name__, len(head))

    out = on_two_ranks(run)
    per_rank = {r: local_grads(lambda y: y.sum(), r) for r in (0, 1)}
    for static, fp16, grads, head_cls, head_len in out.values():
        assert (static, fp16, head_cls, head_len) == (True, True, "Sequential", 1)
        for g, w in zip(grads, [(g0 + g1) / 2 for g0, g1 in zip(per_rank[0], per_rank[1])]):
            assert tessel.allclose(g, w, rtol=2e-3, atol=2e-3)  # through fp16 on the wire
