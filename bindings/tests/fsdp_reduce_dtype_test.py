"""MixedPrecisionPolicy(param_dtype=bfloat16) with reduce_dtype unset reduces float32 parameters' gradients in
float32, as torch 2.15's fully_shard (its changed default; FSDP1 keeps param_dtype): the gradients equal an
explicit reduce_dtype=float32 run bit for bit and differ from reduce_dtype=bfloat16's."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import MixedPrecisionPolicy, fully_shard

X = np.random.default_rng(11).standard_normal((4, 16)).astype(np.float32)


def grads(**policy):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
        fully_shard(m, mesh=init_device_mesh("cpu", (2,)), mp_policy=MixedPrecisionPolicy(**policy))
        m(tessel.tensor(X[world.rank * 2:(world.rank + 1) * 2])).float().pow(2).mean().backward()
        out[world.rank] = [(p.grad.dtype, p.grad.full_tensor().numpy()) for p in m.parameters()]
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return out[0]


def test_unset_reduce_dtype_reduces_in_the_parameters_dtype():
    unset = grads(param_dtype=tessel.bfloat16)
    fp32 = grads(param_dtype=tessel.bfloat16, reduce_dtype=tessel.float32)
    bf16 = grads(param_dtype=tessel.bfloat16, reduce_dtype=tessel.bfloat16)
    assert [d for d, _ in unset] == [tessel.float32] * 4
    for (_, a), (_, b) in zip(unset, fp32):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for (_, a), (_, c) in zip(unset, bf16))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
