"""torch's meta-device construction, torchtitan's order: `with tessel.device("meta"): model = Model()`,
then fully_shard, `to_empty(device=...)` and `init_weights()`. The meta-built parameters are CPU tensors whose
values were never written ([Note: deferred init] in core/tensor/factory.h): no random number is drawn while
building (as torch's meta construction draws none) and fresh large parameters take no resident memory
(mincore counts their pages) until written; the trained values after init_weights are one rank's."""
import copy
import ctypes
import os
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.fsdp import fully_shard

from init_testing import Net, one_rank, parallelize, values


def resident_fraction(t):
    """The fraction of t's memory pages that are resident (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
    start = ptr - ptr % page
    length = ptr + nbytes - start
    pages = (length + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(length), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec) / pages


def test_meta_construction_writes_nothing_and_draws_nothing():
    # first in this process: fresh 16 MiB blocks come from the system, not from the allocator's cache
    tessel.manual_seed(1)
    before = tessel.get_rng_state()
    with tessel.device("meta"):
        big = nn.Sequential(nn.Linear(2048, 2048), nn.Linear(2048, 2048))
        extra = tessel.randn(1024, 1024, dtype=tessel.float32)
    assert tessel.get_rng_state().tolist() == before.tolist()  # no draw while building
    for w in (big[0].weight, big[1].weight, extra):
        assert resident_fraction(w) < 0.05, resident_fraction(w)
    zeros_meta = tessel.zeros(1024, 1024, device="meta")
    assert resident_fraction(zeros_meta) < 0.05
    assert all(p.is_meta for p in big.parameters()) and extra.is_meta and not tessel.zeros(2).is_meta
    # torch's deepcopy of a meta module is meta (torchtitan's pipeline split copies the whole model per stage):
    # nothing drawn, nothing written
    state = tessel.get_rng_state()
    twin = copy.deepcopy(big)
    assert tessel.get_rng_state().tolist() == state.tolist()
    assert all(p.is_meta for p in twin.parameters()) and resident_fraction(twin[1].weight) < 0.05
    assert twin[0].weight.data_ptr() != big[0].weight.data_ptr()
    assert big.to_empty(device="cpu") is big
    assert not any(p.is_meta for p in big.parameters())
    with tessel.no_grad():
        nn.init.normal_(big[0].weight)  # an initializer writes the values: now resident
    assert resident_fraction(big[0].weight) > 0.95
    plain = nn.Linear(2048, 2048)  # built normally: written, resident
    assert resident_fraction(plain.weight) > 0.95
    # outside the block, factories write again; construction-time index computations kept working inside
    assert tessel.zeros(3).tolist() == [0.0, 0.0, 0.0]
    with tessel.device("meta"):
        assert tessel.arange(4).tolist() == [0, 1, 2, 3]
    with pytest.raises(NotImplementedError, match="device 'cuda'"):
        with tessel.device("cuda"):
            pass


@pytest.mark.parametrize("how", ["fully_shard", "tensor_parallel"])
def test_torchtitans_meta_then_parallelize_then_init_weights_gives_one_ranks_values(how):
    ref = one_rank()  # built normally from seed 0, then init_weights from seed 5
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(5)  # the meta build draws nothing: init_weights starts from seed 5's state
        with tessel.device("meta"):
            net = Net()
        parallelize(net, how)
        # Still meta until to_empty, as torch's (fully_shard / distribute_tensor copy no values out of them).
        assert all(p.is_meta and p.device.type == "meta" and not p.is_cpu for p in net.parameters())
        net.to_empty(device="cpu")
        assert not any(p.is_meta for p in net.parameters())
        assert all(p.device == tessel.device("cpu") and p.is_cpu for p in net.parameters())
        with tessel.no_grad():
            net.init_weights()
        got[world.rank] = values(net)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        for name in ref:
            np.testing.assert_array_equal(got[r][name], ref[name], err_msg="rank %d %s" % (r, name))


def test_fully_shard_refuses_to_train_a_model_still_on_meta():
    """torch's _validate_no_meta_params: a forward before to_empty raises, naming the parameters (tessel gathered
    the unwritten shards and trained on zeros)."""
    def rank_fn(world):
        dist.init_process_group()
        with tessel.device("meta"):
            net = nn.Sequential(nn.Linear(8, 6), nn.Linear(6, 4))
        for m in (net[0], net[1], net):
            fully_shard(m)
        with pytest.raises(RuntimeError, match=r"FSDP parameters should be materialized from meta device before "
                                               r"training, but the following were still on meta device: "
                                               r"\['0.weight', '0.bias'\]\nFor example, call module.to_empty"):
            net(tessel.ones(2, 8))
        net.to_empty(device="cpu")
        with tessel.no_grad():
            for m in net:
                m.reset_parameters()
        assert net(tessel.ones(2, 8)).abs().sum().item() > 0
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)


def test_a_layer_still_on_meta_refuses_a_real_input_as_torch_instead_of_computing_on_unwritten_values():
    """torch raises "Tensor on device meta is not on the expected device cpu!"; tessel's meta parameters are CPU
    tensors nobody wrote, and a forward before to_empty returned whatever was in them (also through tensor
    parallelism, where nothing else checked). After to_empty and an initializer the layer runs."""
    with tessel.device("meta"):
        lin = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match=r"Linear: parameter 'weight' is on the meta device .*call to_empty"):
        lin(tessel.ones(1, 3))
    lin.to_empty(device="cpu")
    with tessel.no_grad():
        lin.weight.fill_(1.0)
        lin.bias.fill_(0.5)
    np.testing.assert_allclose(lin(tessel.ones(1, 3)).detach().numpy(), [[3.5, 3.5]])

    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def rank_fn(world):
        dist.init_process_group()
        with tessel.device("meta"):
            net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4))
        parallelize_module(net, init_device_mesh("cpu", (2,)), {"0": ColwiseParallel(), "1": RowwiseParallel()})
        with pytest.raises(RuntimeError, match=r"Linear: parameter 'weight' is on the meta device"):
            net(tessel.ones(2, 4))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)


def test_device_meta_and_an_explicit_cpu_inside_a_meta_block_as_torch():
    """torchtitan's precompute_freqs_cis calls torch.arange(end, device=freqs.device) inside `with
    torch.device("meta")`: arange and linspace take device="meta" (they raised NotImplementedError), and an explicit
    device="cpu" inside a meta block builds real values, as torch's explicit device wins (it built meta ones)."""
    assert tessel.arange(8, device="meta").is_meta and tessel.linspace(0, 1, 5, device="meta").is_meta
    with tessel.device("meta"):
        freqs = tessel.ones(4)
        assert freqs.is_meta and tessel.arange(4, device=freqs.device).is_meta
        real = tessel.arange(3, device="cpu")
        zeros = tessel.zeros(2, device="cpu")
    assert not real.is_meta and real.tolist() == [0, 1, 2]
    assert not zeros.is_meta and zeros.tolist() == [0.0, 0.0]


def test_a_meta_model_takes_a_meta_input_outside_the_block_as_torchs_shape_inference():
    """model(torch.empty(..., device="meta")) on a meta model: each layer's output is meta, so the next layer's
    meta parameters meet a meta input (the first layer's output counted as real and the second layer raised)."""
    with tessel.device("meta"):
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        x = tessel.ones(3, 4)
    for inp in (x, tessel.empty(3, 4, device="meta")):
        out = m(inp)
        assert out.is_meta and tuple(out.shape) == (3, 2)
    with pytest.raises(RuntimeError, match=r"Linear: parameter 'weight' is on the meta device"):
        m(tessel.ones(3, 4))


def test_meta_blocks_and_explicit_devices_on_rank_threads_keep_each_threads_own_mode():
    """`with device("meta")` saved the flag it replaced on a list the whole process shared, while the flag is per
    thread: with two rank threads entering and leaving blocks (and factories with device="cpu", which enter one
    too), a rank restored the other's flag, staying in meta mode after its block or building real parameters
    inside it."""
    bad = []

    def rank_fn(world):
        for _ in range(100):
            with tessel.device("meta"):
                tessel.arange(0, 8, 2, device="cpu")
                lin = nn.Linear(4, 4)
                if not lin.weight.is_meta:
                    bad.append("a parameter built in the block is real")
            if tessel.ones(2).is_meta or tessel.zeros(3, device="cpu").is_meta:
                bad.append("a tensor built after the block is meta")

    tessel.run_ranks(2, rank_fn)
    assert bad == []


def test_to_empty_materializes_a_complex_meta_buffer_as_torchtitans_freqs_cis():
    """torchtitan's Llama registers freqs_cis = polar(...) (complex64) as a non-persistent buffer under the meta
    device; to_empty raised AttributeError on it ('ComplexTensor' object has no attribute '_clear_meta')."""
    class Rope(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            freqs = tessel.arange(4).float()
            self.register_buffer("freqs_cis", tessel.polar(tessel.ones_like(freqs), freqs), persistent=False)

    with tessel.device("meta"):
        m = Rope()
    assert m.freqs_cis.is_meta and m.freqs_cis.dtype == tessel.complex64
    m.to_empty(device="cpu")
    assert not m.freqs_cis.is_meta and not m.lin.weight.is_meta and m.freqs_cis.dtype == tessel.complex64
    freqs = tessel.arange(4).float()
    m.freqs_cis = tessel.polar(tessel.ones_like(freqs), freqs)  # init_weights recomputes it, as torchtitan's
    np.testing.assert_allclose(m.freqs_cis.real.numpy(), np.cos(np.arange(4.0)), rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
