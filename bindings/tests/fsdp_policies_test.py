"""fully_shard's policies as torch 2.15 defines them, found by running the same script under both:
MixedPrecisionPolicy is a frozen dataclass (equality, hash, repr, dataclasses.fields / replace), OffloadPolicy
the base dataclass of CPUOffloadPolicy(pin_memory=True); fully_shard takes them (the base policy means no
offloading) and refuses what it cannot honour (param_dtype_override_fn) or a wrong type with torch's kinds of
error. A parameter built under tessel.device("meta") stays meta (device and is_meta) through fully_shard."""
import dataclasses
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard


def test_policies_are_torchs_dataclasses():
    mp = MixedPrecisionPolicy(param_dtype=tessel.bfloat16)
    assert dataclasses.is_dataclass(mp) and mp == MixedPrecisionPolicy(param_dtype=tessel.bfloat16)
    assert hash(mp) == hash(MixedPrecisionPolicy(param_dtype=tessel.bfloat16)) and mp != MixedPrecisionPolicy()
    assert [f.name for f in dataclasses.fields(MixedPrecisionPolicy)] == [
        "param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs", "param_dtype_override_fn"]
    assert repr(mp) == ("MixedPrecisionPolicy(param_dtype=tessel.bfloat16, reduce_dtype=None, output_dtype=None, "
                        "cast_forward_inputs=True, param_dtype_override_fn=None)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        mp.param_dtype = tessel.float16
    assert dataclasses.replace(mp, reduce_dtype=tessel.float32).reduce_dtype == tessel.float32
    with pytest.raises(TypeError):  # keyword-only, as torch's
        MixedPrecisionPolicy(None, None, None, True, lambda p: None)
    off = CPUOffloadPolicy()
    assert isinstance(off, OffloadPolicy) and off.pin_memory is True and off == CPUOffloadPolicy(pin_memory=True)
    assert repr(off) == "CPUOffloadPolicy(pin_memory=True)" and not CPUOffloadPolicy(pin_memory=False).pin_memory


def test_fully_shard_takes_the_policies_and_refuses_what_it_cannot_honour():
    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        mp = MixedPrecisionPolicy(param_dtype=tessel.bfloat16, reduce_dtype=tessel.float32)
        fully_shard(net[0], mp_policy=mp, offload_policy=OffloadPolicy())
        fully_shard(net[1], mp_policy=mp, offload_policy=CPUOffloadPolicy(pin_memory=False))
        with pytest.raises(NotImplementedError, match="param_dtype_override_fn"):
            fully_shard(net, mp_policy=MixedPrecisionPolicy(param_dtype_override_fn=lambda p: tessel.float32))
        with pytest.raises(TypeError, match="mp_policy must be a MixedPrecisionPolicy, got dict"):
            fully_shard(net, mp_policy={"param_dtype": tessel.bfloat16})
        with pytest.raises(TypeError, match="offload_policy must be an OffloadPolicy, got bool"):
            fully_shard(net, offload_policy=True)
        fully_shard(net, mp_policy=mp)
        seen = []
        net[0].register_forward_hook(lambda m, args, out: seen.append((args[0].dtype, out.dtype)))
        out = net(tessel.ones(3, 4))
        assert seen == [(tessel.bfloat16, tessel.bfloat16)]  # param_dtype reached the C++ policy
        out.float().sum().backward()
        assert net[0].weight.grad.dtype == tessel.float32 and net[0].weight.dtype == tessel.float32

    tessel.run_ranks(2, rank_fn)


def test_meta_parameters_stay_meta_through_fully_shard_until_to_empty():
    def rank_fn(world):
        dist.init_process_group()
        with tessel.device("meta"):
            net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
        assert all(p.device.type == "meta" and p.is_meta and not p.is_cpu for p in net.parameters())
        fully_shard(net[0])
        fully_shard(net)
        assert all(p.device.type == "meta" and p.is_meta for p in net.parameters())
        net.to_empty(device="cpu")
        assert all(p.device.type == "cpu" and not p.is_meta for p in net.parameters())
        with tessel.no_grad():
            for p in net.parameters():
                p.fill_(0.5)
        hidden = 8 * 0.5 + 0.5  # every weight and bias 0.5, inputs 1
        np.testing.assert_allclose(net(tessel.ones(2, 8)).detach().numpy(), np.full((2, 4), 8 * 0.5 * hidden + 0.5))

    tessel.run_ranks(2, rank_fn)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
