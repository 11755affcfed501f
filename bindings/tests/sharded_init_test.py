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
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(6, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 5)  # 5 rows: fully_shard's pieces are uneven (3 and 2)

    def init_weights(self):
        self.emb.reset_parameters()  # N(0, 1), the padding row zero
        nn.init.trunc_normal_(self.fc1.weight, std=0.5, a=-0.6, b=0.6)  # resamples about a quarter
        self.fc1.bias.uniform_(-0.1, 0.1)
        nn.init.orthogonal_(self.fc2.weight)
        self.norm.reset_parameters()
        self.proj.reset_parameters()
        nn.init.xavier_normal_(self.proj.weight)
        self.proj.bias.normal_(0.0, 0.02)


def values(net):
    return {n: (p.full_tensor() if p.is_distributed else p).detach().numpy().copy()
            for n, p in net.named_parameters()}


def one_rank():
    tessel.manual_seed(0)
    net = Net()
    tessel.manual_seed(5)
    with tessel.no_grad():
        net.init_weights()
    return values(net)


@pytest.mark.parametrize("how", ["fully_shard", "tensor_parallel"])
def test_init_weights_after_sharding_gives_one_ranks_values_bitwise(how):
    ref = one_rank()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        if how == "fully_shard":
            for m in (net.fc1, net.fc2, net.proj):
                fully_shard(m)
            fully_shard(net)
        else:
            parallelize_module(net, init_device_mesh("cpu", (2,)), {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
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
