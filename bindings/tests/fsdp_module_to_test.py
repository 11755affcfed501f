"""Module.to(dtype) / .double() / .half() after fully_shard, as torch 2.15's FSDPModule._apply: the sharded
parameters keep their objects (an optimizer built before keeps training them), take the new dtype, and the
groups all-gather and reduce in it unless a MixedPrecisionPolicy names a dtype. Training after the cast equals
one rank training the whole batch in that dtype. A cast while gradients wait for their reduction is refused
before anything changes."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from tessel.distributed.tensor import DTensor

X = np.random.default_rng(5).standard_normal((4, 6))
Y = np.random.default_rng(6).standard_normal((4, 3))


def make_model():
    tessel.manual_seed(0)
    # 5 rows: uneven shards over 2 ranks (rank 1 holds 2 rows and a zero row of padding)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def one_rank(dtype, cast_after_steps=0):
    """The whole batch on one rank: FSDP's ranks each see half of it and their gradients are averaged, so the
    loss here is the mean of two halves' sums."""
    m = make_model()
    opt = tessel.optim.SGD(m.parameters(), lr=0.05)
    losses = []
    for step in range(3):
        if step == cast_after_steps:
            m.to(dtype)
        x, y = tessel.tensor(X).to(m[0].weight.dtype), tessel.tensor(Y).to(m[0].weight.dtype)
        loss = ((m(x[:2]) - y[:2]).pow(2).sum() + (m(x[2:]) - y[2:]).pow(2).sum()) / 2
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().numpy() for p in m.parameters()]


def sharded(dtype, cast_after_steps=0, policy=None, cast=None):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        m = make_model()
        for layer in (m[0], m[2]):
            fully_shard(layer, mesh=init_device_mesh("cpu", (2,)), mp_policy=policy or MixedPrecisionPolicy())
        fully_shard(m, mesh=init_device_mesh("cpu", (2,)), mp_policy=policy or MixedPrecisionPolicy())
        params = list(m.parameters())
        opt = tessel.optim.SGD(params, lr=0.05)
        losses, seen = [], {}
        rows = slice(2 * world.rank, 2 * world.rank + 2)
        for step in range(3):
            if step == cast_after_steps:
                (cast or (lambda mod: mod.to(dtype)))(m)
                seen["same_objects"] = all(a is b for a, b in zip(params, m.parameters()))
            x, y = tessel.tensor(X[rows]).to(m[0].weight.dtype), tessel.tensor(Y[rows]).to(m[0].weight.dtype)
            loss = (m(x) - y).pow(2).sum()
            loss.backward()
            seen.setdefault("grad_dtypes", {p.grad.dtype for p in m.parameters()})
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        seen["losses"] = losses
        seen["params"] = [p.full_tensor().numpy() for p in m.parameters()]
        seen["dtypes"] = {p.dtype for p in m.parameters()}
        seen["dtensors"] = all(isinstance(p, DTensor) for p in m.parameters())
        out[world.rank] = seen
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return out


def check_against_one_rank(out, dtype, cast_after_steps, rtol):
    ref_losses, ref_params = one_rank(dtype, cast_after_steps)
    for rank in (0, 1):
        seen = out[rank]
        assert seen["same_objects"] and seen["dtensors"]
        assert seen["dtypes"] == {dtype}
        for a, b in zip(seen["params"], ref_params):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    # each rank's loss is its half's sum: their mean is the one-rank loss
    mean = [(a + b) / 2 for a, b in zip(out[0]["losses"], out[1]["losses"])]
    np.testing.assert_allclose(mean, ref_losses, rtol=rtol)


def test_double_before_the_first_forward_trains_as_one_rank_in_float64():
    out = sharded(tessel.float64)
    assert out[0]["grad_dtypes"] == {tessel.float64}
    check_against_one_rank(out, tessel.float64, 0, 1e-12)


def test_cast_between_iterations_continues_training_in_the_new_dtype():
    out = sharded(tessel.float64, cast_after_steps=1)
    check_against_one_rank(out, tessel.float64, 1, 1e-6)


def test_half_method_after_fully_shard():
    out = sharded(tessel.float16, cast=lambda m: m.half())
    assert out[0]["dtypes"] == {tessel.float16} and out[0]["grad_dtypes"] == {tessel.float16}
    check_against_one_rank(out, tessel.float16, 0, 2e-2)


def test_a_policy_dtype_is_kept_and_unset_ones_follow_the_parameters():
    # param_dtype stays bfloat16 (the all-gather and forward), reduce_dtype unset follows the new float64
    out = sharded(tessel.float64, policy=MixedPrecisionPolicy(param_dtype=tessel.bfloat16))
    assert out[0]["dtypes"] == {tessel.float64} and out[0]["grad_dtypes"] == {tessel.float64}
    ref_losses, _ = one_rank(tessel.float64)
    mean = [(a + b) / 2 for a, b in zip(out[0]["losses"], out[1]["losses"])]
    # computed in bfloat16: near the float64 run, not equal to it
    np.testing.assert_allclose(mean, ref_losses, rtol=5e-2)
    assert mean != ref_losses


def test_cast_while_gradients_wait_for_their_reduction_is_refused_and_changes_nothing():
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        m = make_model()
        fully_shard(m, mesh=init_device_mesh("cpu", (2,)))
        m.set_requires_gradient_sync(False)
        m(tessel.tensor(X[:2]).float()).sum().backward()
        with pytest.raises(RuntimeError, match="wait for their reduction") as e:
            m.to(tessel.float64)
        out[world.rank] = (str(e.value), {p.dtype for p in m.parameters()})
        m.set_requires_gradient_sync(True)
        m(tessel.tensor(X[:2]).float()).sum().backward()  # the held gradients are reduced as before
        out[world.rank] += ({p.grad.dtype for p in m.parameters()},)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    message, dtypes, grad_dtypes = out[0]
    assert "set_requires_gradient_sync(False)" in message
    assert dtypes == {tessel.float32} and grad_dtypes == {tessel.float32}


def test_tensor_parallel_parameters_keep_their_objects():
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        m = make_model()
        full = [p.detach().clone() for p in m.parameters()]
        parallelize_module(m, init_device_mesh("cpu", (2,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
        params = list(m.parameters())
        m.double()
        y = m(tessel.tensor(X))
        out[world.rank] = ([a is b for a, b in zip(params, m.parameters())], {p.dtype for p in m.parameters()},
                           y.dtype, y.detach().numpy(), [p.full_tensor().numpy() for p in m.parameters()],
                           [f.double().numpy() for f in full])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    same, dtypes, y_dtype, y, params, full = out[0]
    assert all(same) and dtypes == {tessel.float64} and y_dtype == tessel.float64
    for a, b in zip(params, full):
        np.testing.assert_array_equal(a, b)
    w0, b0, w2, b2 = full
    np.testing.assert_allclose(y, np.tanh(X @ w0.T + b0) @ w2.T + b2, rtol=1e-12)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
