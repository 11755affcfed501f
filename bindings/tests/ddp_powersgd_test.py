"""PowerSGD for DDP (torch's powerSGD_hook) on 2 ranks: with a rank that covers the summed gradients it trains
exactly as plain DDP; at rank 1 the averaged gradient becomes its projection on one direction (rank 1, residual
orthogonal to it) and the error feedback holds what was dropped (its mean over the ranks is the true average
minus the approximation); plain all-reduce before start_powerSGD_iter; torch's argument checks; the Reducer's
buckets (bucket_cap_mb) reach hooks with torch's indices; register_ddp_comm_hook."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook
from tessel.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import (PowerSGDState, batched_powerSGD_hook,
                                                                       powerSGD_hook)
from tessel.nn.parallel import DistributedDataParallel as DDP

RNG = np.random.default_rng(9)
X = RNG.standard_normal((2, 4, 6)).astype(np.float32)  # [rank, step, features]: one row per rank and step
Y = RNG.standard_normal((2, 4, 4)).astype(np.float32)


def make():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))


def train(hook_state=None, steps=4, probe=None, hook=powerSGD_hook):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        model = DDP(make())
        if hook_state is not None:
            model.register_comm_hook(hook_state(), hook)
        opt = tessel.optim.SGD(model.parameters(), lr=0.1)
        grads = []
        for step in range(steps):
            x, y = tessel.tensor(X[world.rank, step:step + 1]), tessel.tensor(Y[world.rank, step:step + 1])
            (model(x) - y).pow(2).sum().backward()
            grads.append([p.grad.numpy().copy() for p in model.parameters()])
            opt.step()
            opt.zero_grad()
        state = model._comm_hook[0] if hook_state is not None else None
        out[world.rank] = ([p.detach().numpy() for p in model.parameters()], grads, state)

    tessel.run_ranks(2, rank_fn)
    return out


def test_a_covering_rank_trains_exactly_as_plain_ddp():
    ref = train()
    got = train(lambda: PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                      min_compression_rate=0.1))
    for r in (0, 1):
        for a, b in zip(got[r][0], ref[r][0]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        state = got[r][2]
        assert state.iter == 4 and state.compression_stats()[2] < state.compression_stats()[1]
    # each rank's error is its input minus the average (torch's definition); nothing dropped: they cancel
    mean_error = (got[0][2].error_dict[0].numpy() + got[1][2].error_dict[0].numpy()) / 2
    assert np.abs(mean_error).max() < 1e-4 and np.abs(got[0][2].error_dict[0].numpy()).max() > 1e-2


def test_rank_one_projects_the_average_and_keeps_the_error():
    steps = 3  # steps 0, 1 plain; step 2 compressed
    ref = train(steps=steps)
    got = train(lambda: PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                      min_compression_rate=0.1), steps=steps)
    for r in (0, 1):  # identical through the plain steps
        for a, b in zip(got[r][1][1], ref[r][1][1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the compressed step: the weights' average g (two rank-1 gradients: rank 2) and its approximation h
    names = [n for n, _ in make().named_parameters()]
    errors = [got[r][2].error_dict[0].numpy() for r in (0, 1)]
    mean_error = (errors[0] + errors[1]) / 2
    offsets = {}
    offset = 0
    for n in ["2.bias", "2.weight", "0.bias", "0.weight"]:  # the Reducer's order inside the one bucket
        size = int(np.prod(dict(zip(names, [p.shape for p in make().parameters()]))[n]))
        offsets[n] = (offset, size)
        offset += size
    for i, n in enumerate(names):
        g, h = ref[0][1][2][i], got[0][1][2][i]
        o, size = offsets[n]
        if n.endswith("bias"):  # vectors travel uncompressed: the exact average, no error
            np.testing.assert_allclose(h, g, rtol=1e-5, atol=1e-6)
            assert np.abs(mean_error[o:o + size]).max() < 1e-5
            continue
        s = np.linalg.svd(h, compute_uv=False)
        assert s[1] < 1e-4 * s[0]  # rank 1
        np.testing.assert_allclose(h.T @ (g - h), 0, atol=1e-4)  # the residual is orthogonal to the approximation
        assert np.linalg.norm(g - h) > 1e-3 * np.linalg.norm(g)  # something was dropped
        np.testing.assert_allclose(mean_error[o:o + size].reshape(g.shape), g - h, rtol=1e-3, atol=1e-5)


def test_batched_powerSGD_compresses_the_padded_bucket_as_one_matrix():
    """The 59-element bucket, zero-padded to 64, is one [8, 8] matrix: rank 8 covers it (plain DDP's training);
    at rank 1 the step's averaged bucket becomes its rank-1 projection (as an [8, 8] matrix: rank 1, residual
    orthogonal, the padding's zeros kept) and the mean error over the ranks is what was dropped."""
    ref = train()
    got = train(lambda: PowerSGDState(None, matrix_approximation_rank=8, start_powerSGD_iter=2),
                hook=batched_powerSGD_hook)
    for r in (0, 1):
        for a, b in zip(got[r][0], ref[r][0]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        assert got[r][2].compression_stats()[1:] == (59 * 2, 8 * 8 * 2 * 2)  # two compressed steps
    steps = 3
    ref = train(steps=steps)
    got = train(lambda: PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2),
                hook=batched_powerSGD_hook, steps=steps)
    params = list(make().named_parameters())
    order = ["2.bias", "2.weight", "0.bias", "0.weight"]  # the Reducer's order inside the one bucket
    sizes = {n: p.numel() for n, p in params}

    def flat(grads):
        by_name = {n: g for (n, _), g in zip(params, grads)}
        return np.concatenate([by_name[n].ravel() for n in order] + [np.zeros(64 - 59, np.float32)]).reshape(8, 8)

    g, applied = flat(ref[0][1][2]), flat(got[0][1][2])
    assert sum(sizes.values()) == 59
    np.testing.assert_allclose(flat(got[1][1][2]), applied, rtol=1e-6)  # every rank applies the same gradient
    # the mean of the ranks' errors is the average g minus the [8, 8] approximation h (whose padding entries
    # need not be zero: the bucket keeps h's first 59)
    mean_error = ((got[0][2].error_dict[0].numpy() + got[1][2].error_dict[0].numpy()) / 2).reshape(8, 8)
    h = g - mean_error
    np.testing.assert_allclose(applied.ravel()[:59], h.ravel()[:59], rtol=1e-4, atol=1e-6)
    s = np.linalg.svd(h, compute_uv=False)
    assert s[1] < 1e-4 * s[0]  # rank 1
    np.testing.assert_allclose(h.T @ (g - h), 0, atol=1e-4)  # the dropped part is orthogonal to it
    assert np.linalg.norm(g - h) > 1e-2 * np.linalg.norm(g)


def test_state_checks_buckets_and_builtin_registration():
    with pytest.raises(ValueError, match="Expect `start_powerSGD_iter` > 1"):
        PowerSGDState(None, start_powerSGD_iter=1)
    PowerSGDState(None, start_powerSGD_iter=1, use_error_feedback=False, warm_start=False)
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        model = DDP(make(), bucket_cap_mb=100 / 2 ** 20)  # 100 bytes: several buckets, as torch's Reducer

        def spy(state, bucket):
            seen.setdefault(world.rank, []).append((bucket.index(), [p.shape for p in bucket.parameters()],
                                                   bucket.is_last()))
            from tessel.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, spy)
        model(tessel.tensor(X[world.rank, :1])).sum().backward()
        other = DDP(make())
        register_ddp_comm_hook(DDPCommHookType.POWER_SGD_RANK2, other)
        assert other._comm_hook[0].matrix_approximation_rank == 2 and other._comm_hook[0].start_powerSGD_iter == 1000
        batched = DDP(make())
        register_ddp_comm_hook(DDPCommHookType.BATCHED_POWER_SGD, batched)
        assert batched._comm_hook[1] is batched_powerSGD_hook and batched._comm_hook[0].matrix_approximation_rank == 1

    tessel.run_ranks(2, rank_fn)
    indices = [i for i, _, _ in seen[0]]
    assert indices == list(range(len(indices))) and len(indices) > 1 and seen[0][-1][2] and not seen[0][0][2]
    assert tuple(seen[0][0][1][0]) == (4,)  # the last layer's bias first (reverse registration order)


def test_fp16_compress_wrapper_runs_a_hook_in_half_precision():
    from tessel.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook, fp16_compress_wrapper
    ref = train(steps=1)
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        model = DDP(make())
        model.register_comm_hook(None, fp16_compress_wrapper(allreduce_hook))
        x, y = tessel.tensor(X[world.rank, :1]), tessel.tensor(Y[world.rank, :1])
        (model(x) - y).pow(2).sum().backward()
        out[world.rank] = [p.grad.numpy().copy() for p in model.parameters()]

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        for a, b in zip(out[r], ref[r][1][0]):
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3)  # float16 on the wire
            assert a.dtype == np.float32
    assert any(not np.array_equal(a, b) for a, b in zip(out[0], ref[0][1][0]))  # it did round through fp16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
