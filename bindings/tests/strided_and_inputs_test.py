"""Two torch-parity points of composed parallelism found by running pytorch/examples' fsdp_tp_example
side by side with torch 2.15: (1) fully_shard over a tensor-parallel weight prints and accepts torch's
_StridedShard placement, so p.placements round-trips through from_local / distribute_tensor / redistribute
(it printed (Shard(0), Shard(0)), and rebuilding from it permuted rows); (2) PrepareModuleInput pairs its
layouts with every positional input, a complex freqs_cis included (it counted tensors only and raised).
Expected values: the dense tensors the shards came from, torch 2.15's printed placements."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor import DTensor, Replicate, Shard, _StridedShard, distribute_tensor
from tessel.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, parallelize_module


def test_fsdp_over_tp_placements_are_torchs_strided_shard_and_round_trip():
    full = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m = nn.Linear(4, 8, bias=False)
        with tessel.no_grad():
            m.weight.copy_(tessel.from_numpy(full))
        parallelize_module(m, mesh["tp"], ColwiseParallel())
        fully_shard(m, mesh=mesh["dp"])
        p = m.weight
        rebuilt = DTensor.from_local(p.to_local(), mesh, p.placements, shape=p.shape, stride=p.stride())
        spread = distribute_tensor(tessel.from_numpy(full), mesh, p.placements)
        moved = p.redistribute(mesh, [Replicate(), Replicate()])
        back = moved.redistribute(mesh, p.placements)
        out[world.rank] = (p.placements, repr(p.placements), p.to_local().numpy()[:, 0].tolist(),
                           rebuilt.full_tensor().numpy(), spread.to_local().numpy(), back.to_local().numpy(),
                           back.placements)
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    # tp shards rows [0, 4) / [4, 8) first, then dp halves each piece: rank (dp, tp) holds rows
    # 4 tp + 2 dp + [0, 2)
    for rank, (placements, text, rows, rebuilt, spread, back, back_placements) in out.items():
        dp, tp = divmod(rank, 2)
        start = 4 * tp + 2 * dp
        assert placements == (_StridedShard(0, split_factor=2), Shard(0)) and back_placements == placements
        assert text == "(_StridedShard(dim=0, sf=2), Shard(dim=0))"
        assert rows == [full[start, 0], full[start + 1, 0]]
        np.testing.assert_array_equal(rebuilt, full)
        np.testing.assert_array_equal(spread, full[start:start + 2])
        np.testing.assert_array_equal(back, full[start:start + 2])


def test_strided_shard_values_and_errors():
    s = _StridedShard(0, split_factor=2)
    assert s == _StridedShard(dim=0, split_factor=2) and s != _StridedShard(0, 3) and s != Shard(0)
    assert hash(s) == hash(_StridedShard(0, 2)) and str(s) == "_S(0, 2)" and (s.dim, s.split_factor) == (0, 2)
    assert not s.is_shard() and not s.is_replicate() and not s.is_partial()
    assert not isinstance(s, Shard) and isinstance(s, tessel.distributed.tensor.Placement)

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        with pytest.raises(ValueError, match=r"no sharding order of placements \[S\(0\), S\(0\)\] on a mesh of shape "
                                             r"\[2, 2\] gives the split factors \[1, 2\]"):
            distribute_tensor(tessel.ones(8, 4), mesh, [Shard(0), _StridedShard(0, 2)])
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)


class Rotary(nn.Module):
    """llama2's attention input: x and the complex freqs_cis as the second positional argument."""

    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(4, 4, bias=False)

    def forward(self, x, freqs_cis):
        q = tessel.view_as_complex(self.wq(x).reshape(*x.shape[:-1], 2, 2))
        return tessel.view_as_real(q * freqs_cis).flatten(-2)


@pytest.mark.parametrize("freqs_layout", [None, Replicate()], ids=["None", "Replicate"])
def test_prepare_module_input_pairs_layouts_with_every_positional_input(freqs_layout):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    x = rng.standard_normal((2, 6, 4)).astype(np.float32)
    angles = rng.standard_normal((6, 2)).astype(np.float32)

    def build():
        m = Rotary()
        with tessel.no_grad():
            m.wq.weight.copy_(tessel.from_numpy(w))
        return m

    freqs = tessel.polar(tessel.ones(6, 2), tessel.from_numpy(angles))
    want = build()(tessel.from_numpy(x), freqs).detach().numpy()
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
        m = parallelize_module(build(), mesh, PrepareModuleInput(input_layouts=(Shard(1), freqs_layout),
                                                                 desired_input_layouts=(Replicate(), freqs_layout),
                                                                 use_local_output=True))
        local = tessel.from_numpy(x[:, 3 * world.rank:3 * world.rank + 3])  # this rank's sequence half
        with tessel.CommTracer() as t:
            y = m(local, tessel.polar(tessel.ones(6, 2), tessel.from_numpy(angles)))
        out[world.rank] = (y.detach().numpy(), t.summary())
        with pytest.raises(ValueError, match="got 1 positional inputs but input_layouts has 2 entries"):
            m(local)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for y, summary in out.values():
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        assert summary == "all_gather(tp) x1"  # the sequence gathered once; freqs_cis moves nothing


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
