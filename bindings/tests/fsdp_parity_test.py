"""fully_shard as torch 2.15's, from a side-by-side sweep (2 gloo ranks): a forward pre-hook registered before
fully_shard runs after its pre-forward (torch's prepend=True) and sees the unsharded parameters; mixed precision
casts floating tensors inside list / tuple / dict arguments and keyword arguments; copy.deepcopy of a sharded
state dict keeps each rank's piece and placements; isinstance(layer, FSDPModule) holds for a sharded nn.Linear;
a slice of a sharded Sequential is a plain Sequential; sharded parameters keep their Python objects (ids, attributes)
across forward and backward; Module.to(dtype) after fully_shard casts the shards (it was once undone at the
next forward)."""
import copy
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from tessel.distributed.tensor import DTensor, Shard

W = np.arange(16, dtype=np.float32).reshape(4, 4) * 0.1 - 0.3
B = np.array([0.5, -1.0, 0.25, 2.0], dtype=np.float32)


def mlp():
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    with tessel.no_grad():
        m[0].weight.copy_(tessel.tensor(W)), m[0].bias.copy_(tessel.tensor(B))
        m[2].weight.copy_(tessel.tensor(W[:2])), m[2].bias.zero_()
    return m


def on_two_ranks(fn):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        out[world.rank] = fn(init_device_mesh("cpu", (2,)))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return out


def test_a_pre_hook_registered_before_fully_shard_sees_the_unsharded_parameters():
    def run(mesh):
        m = mlp()
        seen = []

        def pre(mod, args):
            seen.append((isinstance(mod[0].weight, DTensor), tuple(mod[0].weight.shape)))
            return (args[0] + mod[0].bias,)  # uses a parameter: it must be the whole one
        m.register_forward_pre_hook(pre)
        fully_shard(m, mesh=mesh)
        return seen, m(tessel.ones(3, 4)).detach().numpy()

    x = np.ones((3, 4), np.float32) + B
    want = np.tanh(x.astype(np.float64) @ W.T + B) @ W[:2].T
    for seen, y in on_two_ranks(run).values():
        assert seen == [(False, (4, 4))]
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_mixed_precision_casts_tensors_inside_containers_and_keywords():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, pair, named, *, extra):
            self.dtypes = [pair[0].dtype, pair[1].dtype, named["x"].dtype, extra.dtype, named["ids"].dtype]
            return self.lin(pair[0] + pair[1] + named["x"] + extra)

    def run(mesh):
        b = Block()
        fully_shard(b, mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=tessel.bfloat16))
        x = tessel.ones(2, 4)
        y = b((x, [x][0]), {"x": x, "ids": tessel.arange(2)}, extra=x)
        return b.dtypes, y.dtype

    for dtypes, out in on_two_ranks(run).values():
        assert dtypes == [tessel.bfloat16] * 4 + [tessel.int64] and out == tessel.bfloat16


def test_deepcopy_of_a_sharded_state_dict_keeps_pieces_and_placements():
    def run(mesh):
        m = mlp()
        fully_shard(m, mesh=mesh)
        sd = m.state_dict()
        snap = copy.deepcopy(sd)
        with tessel.no_grad():
            m[0].weight.add_(1.0)  # the snapshot does not follow
        w = snap["0.weight"]
        return (isinstance(w, DTensor), w.placements, w.to_local().numpy(), w.full_tensor().numpy(),
                m[0].weight.full_tensor().numpy())

    for rank, (is_d, placements, local, full, live) in on_two_ranks(run).items():
        assert is_d and placements == (Shard(0),)
        np.testing.assert_array_equal(local, W[2 * rank:2 * rank + 2])
        np.testing.assert_array_equal(full, W)
        np.testing.assert_array_equal(live, W + 1)
    y = tessel.ones(2).requires_grad_() * 2
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
        copy.deepcopy(y)


def test_fsdp_module_checks_and_sequential_slices_as_torch():
    def run(mesh):
        m = mlp()
        fully_shard(m[0], mesh=mesh)  # a C++ layer keeps its class
        fully_shard(m, mesh=mesh)
        found = [n for n, x in m.named_modules() if isinstance(x, FSDPModule)]
        part = m[0:2]
        return found, type(part).__name__, isinstance(part, FSDPModule), isinstance(m[2], FSDPModule)

    for found, part_type, part_is_fsdp, tail_is_fsdp in on_two_ranks(run).values():
        assert found == ["", "0"] and part_type == "Sequential" and not part_is_fsdp and not tail_is_fsdp


def test_module_to_dtype_after_fully_shard_casts_the_shards():
    """(More in fsdp_module_to_test.py.) Once raised: the cast was undone at the next forward."""
    def run(mesh):
        m = mlp()
        fully_shard(m, mesh=mesh)
        m.float()  # the same dtype: nothing to cast
        m.double()
        local = m[0].weight.to_local().dtype
        y = m(tessel.ones(2, m[0].in_features, dtype=tessel.float64))
        return m[0].weight.dtype, local, y.dtype

    assert set(on_two_ranks(run).values()) == {(tessel.float64, tessel.float64, tessel.float64)}


def test_adagrad_on_sharded_parameters_starts_at_step_zero_through_a_step0_state_dict():
    """torch's Adagrad makes its state at construction; tessel's made it at the first step, so get_state_dict's
    _init_optim_state ran a zero-lr step first and the count ran one ahead for the rest of training (lr_decay's
    schedule shifted: losses 0.605 / 0.502 became 0.585 / 0.519). Reference: the same training on one rank."""
    from tessel.distributed.checkpoint.state_dict import get_state_dict
    x = tessel.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))

    def train(m, sharded):
        opt = tessel.optim.Adagrad(m.parameters(), lr=0.1, lr_decay=0.5)
        if sharded:
            _, osd = get_state_dict(m, opt)  # a step-0 checkpoint
            assert all(float(entry["step"]) == 0.0 for entry in osd["state"].values())
        losses = []
        for _ in range(3):
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, [float(e["step"]) for e in opt.state_dict()["state"].values()]

    def run(mesh):
        m = mlp()
        fully_shard(m, mesh=mesh)
        return train(m, True)

    want, _ = train(mlp(), False)
    for losses, steps in on_two_ranks(run).values():
        np.testing.assert_allclose(losses, want, rtol=1e-5)
        assert steps == [3.0] * 4


def test_sharded_parameters_keep_their_objects_and_attributes_across_forward_and_backward():
    # the unshard / reshard toggle dropped the sharded Parameter's Python object: an attribute set after
    # fully_shard (torchtitan-style p.no_weight_decay tags) read MISSING after one step, and id() maps went stale
    def body(mesh):
        m = mlp()
        fully_shard(m, mesh=mesh)
        m[0].weight.no_weight_decay = True
        ids = [id(p) for p in m.parameters()]
        m(tessel.ones(2, 4)).sum().backward()
        m(tessel.ones(2, 4)).sum().backward()
        return getattr(m[0].weight, "no_weight_decay", "MISSING"), ids == [id(p) for p in m.parameters()], \
            isinstance(m[0].weight, DTensor)

    assert on_two_ranks(body) == {0: (True, True, True), 1: (True, True, True)}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
