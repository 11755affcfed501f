"""Functional collectives are differentiable, as torch 2.15's (they returned detached results: a loss term through
them silently lost its gradient). Two ranks; rank r weighs the collective's output by (r + 1), so each expected
gradient is worked out by hand below: all_reduce(sum)'s is the sum of the weights (3), max's goes to the rank
holding the maximum (shared on a tie), all_gather's is the weight of the rank that receives each row, reduce_scatter's
(sum) the weight of the rank keeping each half, all_to_all's the weight of the rank each row is sent to."""
import sys

import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed._functional_collectives as funcol


def grads(make_input, collective):
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        r = world.rank
        x = make_input(r).requires_grad_()
        y = funcol.wait_tensor(collective(x, dist.group.WORLD))
        (y * (r + 1)).sum().backward()
        out[r] = (y.requires_grad, x.grad.tolist())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return out


def test_all_reduce_sum_avg_and_max_gradients():
    ar = grads(lambda r: tessel.arange(4.0), lambda x, g: funcol.all_reduce(x, "sum", g))
    assert ar == {0: (True, [3.0] * 4), 1: (True, [3.0] * 4)}
    avg = grads(lambda r: tessel.arange(4.0), lambda x, g: funcol.all_reduce(x, "avg", g))
    assert avg == {0: (True, [1.5] * 4), 1: (True, [1.5] * 4)}
    # rank 1 holds the max of elements 0 and 1, rank 0 of element 3; element 2 ties (3 shared evenly)
    mx = grads(lambda r: tessel.tensor([0.0, 1.0, 5.0, 9.0]) if r == 0 else tessel.tensor([2.0, 3.0, 5.0, 1.0]),
               lambda x, g: funcol.all_reduce(x, "max", g))
    assert mx[0][1] == [0.0, 0.0, 1.5, 3.0] and mx[1][1] == [3.0, 3.0, 1.5, 0.0]


def test_all_gather_reduce_scatter_and_all_to_all_gradients():
    ag = grads(lambda r: tessel.arange(3.0), lambda x, g: funcol.all_gather_single(x, 0, g))
    assert ag == {0: (True, [3.0] * 3), 1: (True, [3.0] * 3)}
    rs = grads(lambda r: tessel.arange(4.0), lambda x, g: funcol.reduce_scatter_single(x, "sum", 0, g))
    assert rs[0][1] == [1.0, 1.0, 2.0, 2.0] and rs[1][1] == [1.0, 1.0, 2.0, 2.0]
    # uneven splits: rank 0 sends 1 row to itself and 3 to rank 1; rank 1 sends 2 and 2
    def a2a(x, g):
        r = dist.get_rank()
        send = [1, 3] if r == 0 else [2, 2]
        recv = [1, 2] if r == 0 else [3, 2]
        return funcol.all_to_all_single(x, recv, send, g)
    aa = grads(lambda r: tessel.arange(4.0), a2a)
    assert aa[0][1] == [1.0, 2.0, 2.0, 2.0] and aa[1][1] == [1.0, 1.0, 2.0, 2.0]


def test_a_product_all_reduce_has_no_backward():
    with pytest.raises(RuntimeError, match="all_reduce backward only supports"):
        grads(lambda r: tessel.arange(1.0, 3.0), lambda x, g: funcol.all_reduce(x, "product", g))


def test_torchs_other_spellings_and_the_deprecated_ones_warn():
    assert funcol.all_gather_single_autograd is funcol.all_gather_single
    assert funcol.reduce_scatter_single_autograd is funcol.reduce_scatter_single
    assert funcol.all_to_all_single_autograd is funcol.all_to_all_single
    with pytest.warns(FutureWarning, match="all_gather_tensor` is deprecated. Please use .*all_gather_single"):
        ag = grads(lambda r: tessel.arange(3.0), lambda x, g: funcol.all_gather_tensor(x, 0, g))
    assert ag == {0: (True, [3.0] * 3), 1: (True, [3.0] * 3)}
    with pytest.warns(FutureWarning, match="reduce_scatter_tensor_autograd` is deprecated"):
        grads(lambda r: tessel.arange(4.0), lambda x, g: funcol.reduce_scatter_tensor_autograd(x, "sum", 0, g))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
