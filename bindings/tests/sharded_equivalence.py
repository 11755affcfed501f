"""Shared by the layer tests (conv_test, rnn_test): central finite differences, and the sharded-equivalence check
(a classifier trained on 2 fully_shard rank threads, each on half the batch, must take the same optimizer steps
as one rank on the whole batch: the mean of the two ranks' losses equals the one-rank loss at every step)."""
import numpy as np

import tessel
import tessel.distributed as dist
import tessel.nn.functional as F


def finite_difference(f, a, eps=1e-6):
    """Central differences of the scalar f at every entry of the numpy array a."""
    g = np.zeros_like(a)
    for i in np.ndindex(*a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (f(hi) - f(lo)) / (2 * eps)
    return g


def train_classifier(net, x, y, make_optimizer, steps):
    opt = make_optimizer(net.parameters())
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def assert_fully_shard_halves_equal_one_rank(make, shard, x, y, make_optimizer, steps=3, rtol=2e-5):
    """make(): a fresh seeded model; shard(net): applies fully_shard (and may assert on the shards)."""
    ref = train_classifier(make(), x, y, make_optimizer, steps)
    half = x.shape[0] // 2
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        net = make()
        shard(net)
        rows = slice(world.rank * half, (world.rank + 1) * half)
        got[world.rank] = train_classifier(net, x[rows], y[rows], make_optimizer, steps)
        dist.destroy_process_group()
    tessel.run_ranks(2, rank_fn)
    np.testing.assert_allclose([(a + b) / 2 for a, b in zip(got[0], got[1])], ref, rtol=rtol)
