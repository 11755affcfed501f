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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
