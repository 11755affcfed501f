"""Writes through advanced indices (x[rows, cols] = v, x[:, idx] = v, repeated positions, strided targets) and
index_put_ / index_put, the generator state (get_rng_state / set_rng_state, fork_rng, Generator.get_state), and
tessel.testing.assert_close: every expected value and message below is PyTorch 2.15's output for the same code."""
import sys

import numpy as np
import pytest

import tessel


def test_setitem_with_advanced_indices_writes_into_the_tensor():
    t = tessel.tensor
    x = tessel.zeros(3)
    x[(t([0, 2]),)] = 1
    assert x.tolist() == [1.0, 0.0, 1.0]
    y = tessel.zeros(2, 2)
    y[t([0, 1]), t([1, 0])] = 5  # before: written into a gathered copy, y stayed zero
    assert y.tolist() == [[0.0, 5.0], [5.0, 0.0]]
    z = tessel.zeros(2, 3)
    z[:, t([0, 2])] = 7
    assert z.tolist() == [[7.0, 0.0, 7.0], [7.0, 0.0, 7.0]]
    u = tessel.zeros(2, 3, 4)
    u[:, t([0, 2]), 1:3] = tessel.arange(8.0).reshape(2, 2, 2)
    assert u.tolist() == [[[0, 0, 1, 0], [0, 0, 0, 0], [0, 2, 3, 0]], [[0, 4, 5, 0], [0, 0, 0, 0], [0, 6, 7, 0]]]
    rows = tessel.zeros(3, 4)
    rows[t([0, 2]), :] = t([1.0, 2, 3, 4])
    assert rows.tolist() == [[1, 2, 3, 4], [0, 0, 0, 0], [1, 2, 3, 4]]
    strided = tessel.zeros(4, 3).t()  # a transposed view: the writes land in its base
    strided[1, t([0, 3])] = 9
    assert strided.tolist() == [[0, 0, 0, 0], [9, 0, 0, 9], [0, 0, 0, 0]]
    twice = tessel.zeros(2, 3)
    twice[t([0, 0]), t([1, 1])] = t([3.0, 4.0])  # one position listed twice: the last value
    assert twice.tolist() == [[0, 4, 0], [0, 0, 0]]
    summed = tessel.zeros(3, 3)
    summed[t([0, 1]), t([1, 2])] += t([1.0, 2.0])
    assert summed.tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    v = tessel.zeros(4)
    v[t([1, 1])] += 1  # x[i] += 1 reads then writes: a repeated index adds once
    assert v.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_index_put_accumulates_repeated_positions_and_records_gradients():
    a = tessel.zeros(4)
    assert a.index_put_((tessel.tensor([1, 1, 3]),), tessel.tensor([1.0, 2.0, 3.0]), accumulate=True) is a
    assert a.tolist() == [0.0, 3.0, 0.0, 3.0]
    b = tessel.zeros(2, 3)
    b.index_put_((tessel.tensor([0, 1]), tessel.tensor([2, 0])), tessel.tensor(5.0))
    assert b.tolist() == [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]
    ones = tessel.ones(3)
    assert tessel.index_put(ones, (tessel.tensor([0]),), tessel.tensor([7.0])).tolist() == [7.0, 1.0, 1.0]
    assert ones.tolist() == [1.0, 1.0, 1.0]  # out of place
    w = tessel.ones(3, requires_grad=True)
    h = w * 2
    h.index_put_((tessel.tensor([0, 0]),), tessel.tensor([1.0, 1.0]), accumulate=True)
    h.sum().backward()
    assert h.tolist() == [4.0, 2.0, 2.0] and w.grad.tolist() == [2.0, 2.0, 2.0]


def test_generator_state_saves_and_restores_the_draws():
    tessel.manual_seed(5)
    tessel.randn(2)
    state = tessel.get_rng_state()
    first = tessel.randn(3)
    tessel.set_rng_state(state)
    np.testing.assert_array_equal(tessel.randn(3).numpy(), first.numpy())
    after = tessel.get_rng_state()
    with tessel.random.fork_rng():
        tessel.randn(10)
    assert tessel.equal(tessel.get_rng_state(), after)  # fork_rng gave the state back
    g = tessel.Generator().manual_seed(2 ** 64 - 1)  # every bit of the seed survives the int64 state
    tessel.rand(4, generator=g)
    restored = tessel.Generator().set_state(g.get_state())
    assert restored.initial_seed() == 2 ** 64 - 1
    np.testing.assert_array_equal(tessel.rand(4, generator=restored).numpy(), tessel.rand(4, generator=g).numpy())
    assert tessel.initial_seed() == 5
    with pytest.raises(RuntimeError, match="the int64 tensor of 5 elements"):
        tessel.set_rng_state(tessel.zeros(4))


def failure(fn):
    try:
        fn()
    except (AssertionError, ValueError) as e:
        return "%s %s" % (type(e).__name__, str(e).replace("tessel.", "torch."))
    return "ok"


def test_assert_close_compares_and_reports_as_torch():
    t, close = tessel.tensor, tessel.testing.assert_close
    assert failure(lambda: close(t([1.0, 2.0, 3.0]), t([1.0, 2.5, 3.0]))) == (
        "AssertionError Tensor-likes are not close!\n\nMismatched elements: 1 / 3 (33.3%)\n"
        "Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 allowed)")
    assert failure(lambda: close(t([1.0, 2.0]), t([1.0, 2.0, 3.0]))) == (
        "AssertionError The values for attribute 'shape' do not match: torch.Size([2]) != torch.Size([3]).")
    assert failure(lambda: close(t([1.0]), t([1.0], dtype=tessel.float64))) == (
        "AssertionError The values for attribute 'dtype' do not match: torch.float32 != torch.float64.")
    assert failure(lambda: close(1.0, 1.5)) == (
        "AssertionError Scalars are not close!\n\nExpected 1.5 but got 1.0.\n"
        "Absolute difference: 0.5 (up to 1e-07 allowed)\nRelative difference: 0.3333333333333333 (up to 1e-07 allowed)")
    assert failure(lambda: close(t([1.0, 1.00001]), t([1.0, 1.0]))) == "ok"  # within float32's defaults
    assert failure(lambda: close(t([float("nan")]), t([float("nan")]))).endswith(
        "Greatest absolute difference: nan at index (0,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: nan at index (0,) (up to 1.3e-06 allowed)")
    assert failure(lambda: close(t([float("nan")]), t([float("nan")]), equal_nan=True)) == "ok"
    assert failure(lambda: close({"a": tessel.ones(2)}, {"a": tessel.ones(2)})) == "ok"
    assert failure(lambda: close(tessel.ones(2), tessel.ones(2) * 1.1, rtol=0.2, atol=0)) == "ok"
    assert failure(lambda: close(tessel.ones(2), tessel.ones(2), rtol=0.2)) == (
        "ValueError Both 'rtol' and 'atol' must be either specified or omitted, but got no atol.")
    assert failure(lambda: close(t([1, 2]), t([1, 3]))) == (
        "AssertionError Tensor-likes are not equal!\n\nMismatched elements: 1 / 2 (50.0%)\n"
        "Greatest absolute difference: 1 at index (1,)\nGreatest relative difference: 0.3333333432674408 at index (1,)")
    assert failure(lambda: close(t([1.0]), t([2.0]), msg="custom")) == "AssertionError custom"


def test_integer_tensors_take_index_put_index_add_and_tensor_writes_exactly():
    # integer index maps, counters: the float index-add kernel raised "embedding_backward: expected a floating
    # dtype"; now numpy's exact add.at (int64 beyond 2^53 too)
    big = 2 ** 60
    t = tessel.tensor([1, 2, big])
    assert t.clone().index_put_((tessel.tensor([0]),), tessel.tensor([9])).tolist() == [9, 2, big]
    assert t.clone().index_put_((tessel.tensor([2, 2]),), tessel.tensor([5, 6]), accumulate=True).tolist() == \
        [1, 2, big + 11]
    assert tessel.index_add(t, 0, tessel.tensor([0, 0]), tessel.tensor([5, 7])).tolist() == [13, 2, big]
    u = t.clone()
    u[tessel.tensor([0, 1])] = tessel.tensor([7, 8])
    assert u.tolist() == [7, 8, big] and u.dtype == tessel.int64
    # clamp_ of an integer tensor with a float bound raises torch's error (it truncated back: 1 stayed 1)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type long int"):
        t.clone().clamp_(min=1.5)
    assert t.clone().clamp_(min=2).tolist() == [2, 2, big]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
