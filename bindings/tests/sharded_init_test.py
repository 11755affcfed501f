"""Initializers run after fully_shard / parallelize_module, as torchtitan's init_weights runs after
parallelizing: each rank's piece of every parameter is the piece of the values the same calls give the
whole, unsharded model on one rank (Tensor.normal_ / uniform_, nn.init's functions including those computed
on the host (trunc_normal_'s resampling, orthogonal_'s QR), and the layers' reset_parameters). They raised
NotImplementedError or a bare copy_ error on DTensor parameters."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist

from init_testing import Net, one_rank, parallelize, values


@pytest.mark.parametrize("how", ["fully_shard", "tensor_parallel"])
def test_init_weights_after_sharding_gives_one_ranks_values_bitwise(how):
    ref = one_rank()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        parallelize(net, how)
        sharded = sorted(n for n, p in net.named_parameters() if p.is_distributed)
        tessel.manual_seed(5)
        with tessel.no_grad():
            net.init_weights()
        got[world.rank] = (sharded, values(net))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    want_sharded = (sorted(ref) if how == "fully_shard" else ["fc1.bias", "fc1.weight", "fc2.weight"])
    for r in (0, 1):
        sharded, vals = got[r]
        assert sharded == want_sharded
        assert sorted(vals) == sorted(ref)
        for name in ref:
            np.testing.assert_array_equal(vals[name], ref[name], err_msg="rank %d %s" % (r, name))
    assert not ref["emb.weight"][0].any() and np.abs(ref["fc1.weight"]).max() <= 0.6


def test_init_weights_after_tensor_parallel_then_fully_shard_gives_one_ranks_values_bitwise():
    """FSDP over TP on a (dp 2, tp 2) mesh, torchtitan's order: fc1's and fc2's weights are _StridedShard on dp
    beside Shard on tp, their rows held tensor-parallel-major. Each rank's piece is the one-rank values' piece; the
    whole draw used to be distributed in the default order, permuting rows (the same values, so training depended
    on the layout)."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.fsdp import fully_shard
    from tessel.distributed.tensor import _StridedShard
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    ref = one_rank()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tessel.manual_seed(0)
        net = Net()
        parallelize_module(net, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        for m in (net.fc1, net.fc2, net.proj):
            fully_shard(m, mesh=mesh["dp"])
        fully_shard(net, mesh=mesh["dp"])
        strided = sorted(n for n, p in net.named_parameters()
                         if any(isinstance(pl, _StridedShard) for pl in p.placements))
        tessel.manual_seed(5)
        with tessel.no_grad():
            net.init_weights()
        got[world.rank] = (strided, values(net))
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    for r in range(4):
        strided, vals = got[r]
        assert "fc1.weight" in strided
        assert sorted(vals) == sorted(ref)
        for name in ref:
            np.testing.assert_array_equal(vals[name], ref[name], err_msg="rank %d %s" % (r, name))


def test_embedding_bag_reset_parameters_after_fully_shard_zeroes_the_padding_row_as_one_rank():
    """EmbeddingBag(padding_idx=2).reset_parameters() on a fully_shard'ed weight raised ("zero_: the DTensor it
    writes ... is a copy, not a view": its padding row lives on one rank); now the values are one rank's."""
    from tessel.distributed.fsdp import fully_shard
    tessel.manual_seed(5)
    ref = tessel.nn.EmbeddingBag(6, 4, padding_idx=2).weight.detach().numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        bag = tessel.nn.EmbeddingBag(6, 4, padding_idx=2)
        fully_shard(bag)
        tessel.manual_seed(5)
        with tessel.no_grad():
            bag.reset_parameters()
        got[world.rank] = bag.weight.full_tensor().numpy()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert not ref[2].any()
    for r in (0, 1):
        np.testing.assert_array_equal(got[r], ref)


def test_a_whole_value_initializer_refuses_a_partial_dtensor():
    """nn.init.eye_ on a Partial(sum) parameter: each rank keeping the whole value would make the sum world-size
    times it; refused with a clear error (as before whole-value initializers copied this rank's box)."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import DTensor, Partial
    errors = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        p = tessel.nn.Parameter(DTensor.from_local(tessel.zeros(2, 3), mesh, [Partial()]))
        with pytest.raises(ValueError, match=r"P\(sum\).*a Partial placement holds no piece of it"):
            tessel.nn.init.eye_(p)
        errors[world.rank] = True
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert errors == {0: True, 1: True}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
