"""tessel.distributed.nn.functional: torch's differentiable collectives. Every rank's input gradient equals the
gradient of the sum of all ranks' losses computed in one process (numpy or one-process autograd), for the
contrastive all_gather, all_reduce (SUM, AVG), reduce_scatter, broadcast, reduce, gather, scatter, all_to_all
and all_to_all_single with uneven splits."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.nn.functional as dnn
import tessel.nn.functional as F

RNG = np.random.default_rng(11)


def per_rank(fn, world=2):
    """Runs fn(rank) on `world` rank threads with the default group; {rank: result}."""
    out = {}

    def rank_fn(w):
        dist.init_process_group()
        out[dist.get_rank()] = fn(dist.get_rank())

    tessel.run_ranks(world, rank_fn)
    return out


def leaf(a):
    return tessel.tensor(np.asarray(a, dtype=np.float32), requires_grad=True)


def test_contrastive_loss_over_all_gather_has_the_global_gradient():
    emb = RNG.standard_normal((2, 3, 4)).astype(np.float32)  # rank r's 3 embeddings

    def loss_of(mine, everyone, r):
        logits = mine @ everyone.t()  # [3, 6]: each row's positive is itself, the rest are negatives
        return F.cross_entropy(logits, tessel.tensor(np.arange(3) + 3 * r))

    whole = leaf(emb.reshape(6, 4))  # one process: the sum of both ranks' losses
    sum(loss_of(whole[3 * r:3 * r + 3], whole, r) for r in range(2)).backward()
    want = whole.grad.numpy().reshape(2, 3, 4)

    def fn(r):
        mine = leaf(emb[r])
        gathered = dnn.all_gather(mine)
        assert len(gathered) == 2 and gathered[1 - r].requires_grad
        np.testing.assert_array_equal(gathered[1 - r].detach().numpy(), emb[1 - r])
        loss_of(mine, tessel.cat(list(gathered), 0), r).backward()
        return mine.grad.numpy()

    got = per_rank(fn)
    for r in range(2):
        np.testing.assert_allclose(got[r], want[r], rtol=1e-5, atol=1e-6)


def test_all_reduce_reduce_scatter_and_broadcast_backward_are_their_adjoints():
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    c = RNG.standard_normal((2, 4)).astype(np.float32)  # rank r's loss: sum(c[r] * y)

    def fn(r):
        out = {}
        for name, op in (("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG)):
            xr = leaf(x[r])
            (dnn.all_reduce(xr * 2.0, op=op) * tessel.tensor(c[r])).sum().backward()
            out[name] = xr.grad.numpy()
        xr = leaf(x[r])
        (dnn.broadcast(xr, src=1) * tessel.tensor(c[r])).sum().backward()
        out["broadcast"] = xr.grad.numpy()
        pieces = [leaf(x[r][:2] * (k + 1)) for k in range(2)]  # rank r's input for rank k
        y = dnn.reduce_scatter(tessel.zeros(2), pieces)
        out["reduce_scatter_value"] = y.detach().numpy()
        (y * tessel.tensor(c[r][:2])).sum().backward()
        out["reduce_scatter"] = [p.grad.numpy() for p in pieces]
        with pytest.raises(NotImplementedError, match="only"):
            dnn.all_reduce(xr, op=dist.ReduceOp.MAX)
        return out

    got = per_rank(fn)
    for r in range(2):
        np.testing.assert_allclose(got[r]["sum"], 2 * c.sum(0), rtol=1e-6)
        np.testing.assert_allclose(got[r]["avg"], 2 * c.mean(0), rtol=1e-6)  # d/dx_r of sum_r' c_r' . (sum 2x)/2
        np.testing.assert_allclose(got[r]["broadcast"], c.sum(0) if r == 1 else np.zeros(4), rtol=1e-6)
        np.testing.assert_allclose(got[r]["reduce_scatter_value"], (r + 1) * (x[0][:2] + x[1][:2]), rtol=1e-6)
        for k in range(2):  # input slot k of rank r reached rank k's output: its gradient is c[k]
            np.testing.assert_allclose(got[r]["reduce_scatter"][k], c[k][:2], rtol=1e-6)


def test_reduce_gather_scatter_and_all_to_all_route_gradients_back():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    c = RNG.standard_normal((2, 3)).astype(np.float32)
    rows = [[1, 2], [3, 0]]  # all_to_all_single: rank r sends rows[r][k] rows to rank k (uneven)
    data = [RNG.standard_normal((3, 2)).astype(np.float32) for _ in range(2)]

    def fn(r):
        out = {}
        xr = leaf(x[r])
        (dnn.reduce(xr, dst=0) * tessel.tensor(c[r])).sum().backward()
        out["reduce"] = xr.grad.numpy()
        xr = leaf(x[r])
        slots = dnn.gather(xr, dst=1)
        out["gather_values"] = [s.detach().numpy() for s in slots]
        sum((s * tessel.tensor(c[k])).sum() for k, s in enumerate(slots)).backward()
        out["gather"] = xr.grad.numpy()
        srcs = [leaf(x[r] * (k + 1)) for k in range(2)]
        y = dnn.scatter(srcs, src=0)
        (y * tessel.tensor(c[r])).sum().backward()
        out["scatter"] = [s.grad.numpy() for s in srcs]
        d = leaf(data[r])
        y = dnn.all_to_all_single(None, d, output_split_sizes=[rows[0][r], rows[1][r]], input_split_sizes=rows[r])
        (y * tessel.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))).sum().backward()
        out["a2a_value"], out["a2a"] = y.detach().numpy(), d.grad.numpy()
        ins = [leaf(x[r][:k + 1]) for k in range(2)]  # rank r's slot k has k + 1 elements
        outs = dnn.all_to_all([tessel.zeros(r + 1), tessel.zeros(r + 1)], ins)
        sum((o * float(10 * k + 1)).sum() for k, o in enumerate(outs)).backward()
        out["a2a_list"] = [i.grad.numpy() for i in ins]
        return out

    got = per_rank(fn)
    for r in range(2):
        np.testing.assert_allclose(got[r]["reduce"], c[0], rtol=1e-6)  # dst 0's output is the sum
        # gather: only dst 1's slots carry values (zeros elsewhere, as torch); slot r's gradient is dst's c[r].
        for k in range(2):
            np.testing.assert_allclose(got[r]["gather_values"][k], x[k] if r == 1 else np.zeros(3), rtol=1e-6)
        np.testing.assert_allclose(got[r]["gather"], c[r], rtol=1e-6)
        for k in range(2):  # src 0's list: slot k went to rank k; the other ranks' lists reach nothing
            np.testing.assert_allclose(got[r]["scatter"][k], c[k] if r == 0 else np.zeros(3), rtol=1e-6)
        # all_to_all_single: rank r's rows for rank k are rows[r][k] consecutive rows; its gradient is the weight
        # those rows met in rank k's output (the arange, offset by what lower ranks sent k).
        start = 0
        for k in range(2):
            n = rows[r][k]
            offset = sum(rows[j][k] for j in range(r))
            want = np.arange(offset * 2, (offset + n) * 2, dtype=np.float32).reshape(n, 2)
            np.testing.assert_allclose(got[r]["a2a"][start:start + n], want, rtol=1e-6)
            np.testing.assert_allclose(got[k]["a2a_value"][offset:offset + n], data[r][start:start + n], rtol=1e-6)
            start += n
        for k in range(2):  # rank r's slot k (k + 1 elements) became slot r of rank k, weighted 10 r + 1
            np.testing.assert_allclose(got[r]["a2a_list"][k], np.full(k + 1, 10.0 * r + 1), rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
