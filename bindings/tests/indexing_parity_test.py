"""Indexing as torch 2.15 reads a subscript, found by a 17,867-case side-by-side sweep: a list holding sequences,
slices, None or ... is a tuple of indices; a uint8 tensor is a boolean mask (torch's deprecation warning); indices
outside a dim raise in index_select / index_add / index_copy / put_ instead of wrapping; a number that does not fit
an integer tensor raises on assignment. Expected values: numpy's indexing of the same array."""
import sys
import warnings

import numpy as np
import pytest

import tessel


def _x():
    return np.arange(24.0).reshape(2, 3, 4)


@pytest.mark.parametrize("key,numpy_key", [
    ([[0, 1]], ([0, 1],)),
    ([[0, 1], [1, 2]], ([0, 1], [1, 2])),
    ([0, slice(None)], (0, slice(None))),
    ([None, 0], (None, 0)),
    ([Ellipsis, 1], (Ellipsis, 1)),
])
def test_a_list_holding_sequences_slices_or_none_is_a_tuple_of_indices(key, numpy_key):
    a = _x()
    with pytest.warns(UserWarning, match="Using a non-tuple sequence for multidimensional indexing is deprecated"):
        got = tessel.tensor(a)[key]
    np.testing.assert_array_equal(got.numpy(), a[numpy_key])


def test_a_list_of_tensors_indexes_like_their_tuple_and_a_list_of_ints_stays_one_index():
    a = _x()
    x = tessel.tensor(a)
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        got = x[[tessel.tensor([0, 1]), tessel.tensor([1, 2])]]
    np.testing.assert_array_equal(got.numpy(), a[[0, 1], [1, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plain list of ints is one index, without the warning
        np.testing.assert_array_equal(x[[1, 0]].numpy(), a[[1, 0]])
    y = x.clone()
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        y[[[0, 1], [1, 2]]] = -1.0
    b = a.copy()
    b[[0, 1], [1, 2]] = -1.0
    np.testing.assert_array_equal(y.numpy(), b)


def test_a_uint8_index_is_a_boolean_mask_with_torchs_warning():
    a = _x()
    x = tessel.tensor(a)
    m = tessel.tensor([1, 0], dtype=tessel.uint8)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        np.testing.assert_array_equal(x[m].numpy(), a[np.array([True, False])])  # it read rows 1, 0
    with pytest.warns(UserWarning, match="uint8"):
        np.testing.assert_array_equal(x[m, tessel.tensor([0, 1])].numpy(), a[np.array([True, False]), [0, 1]])
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks, but got mask with dtype "
                                           "unsigned char"):
        x.clone()[m] = 5.0
    with pytest.raises(RuntimeError, match="masked_select: expected BoolTensor for mask"):
        tessel.masked_select(x, tessel.ones(2, 3, 4, dtype=tessel.uint8))


def test_0d_tensors_and_0d_indices_in_index_ops():
    a = tessel.tensor(5.0)
    assert tessel.index_select(a, 0, tessel.tensor([0])).shape == ()  # (it raised, as gather did)
    assert tessel.gather(a, 0, tessel.tensor(0)).item() == 5.0
    x = tessel.zeros(3, 3)
    assert tessel.index_add(x, 0, tessel.tensor(1), tessel.ones(1, 3)).tolist() == [[0] * 3, [1] * 3, [0] * 3]
    assert tessel.index_copy(x, 1, tessel.tensor(1), tessel.ones(3, 1)).tolist() == [[0, 1, 0]] * 3


def test_an_advanced_write_of_another_dtype_is_refused_as_torchs_index_put():
    x = tessel.zeros(3, 3)
    msg = "Index put requires the source and destination dtypes match, got Float for the destination and Double"
    for key in (tessel.tensor([0, 1]), [0, 1], tessel.tensor([True, False, True]), (tessel.tensor([0]), 1)):
        with pytest.raises(RuntimeError, match=msg):
            x[key] = tessel.ones(3, dtype=tessel.float64)  # (it was cast)
    with pytest.raises(RuntimeError, match=msg):
        x.index_put_((tessel.tensor([0]),), tessel.ones(3, dtype=tessel.float64), accumulate=True)
    x[x > -1] = tessel.tensor(2.0, dtype=tessel.float64)  # a mask with a 0-d value is masked_fill: cast, as torch
    x[0] = tessel.ones(3, dtype=tessel.float64)  # a basic subscript copies: cast, as torch
    assert x.tolist() == [[1.0] * 3, [2.0] * 3, [2.0] * 3]


def test_index_tensors_of_other_integer_dtypes_are_refused():
    x = tessel.zeros(3, 3)
    for dtype in (tessel.int8, tessel.int16):
        with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
            x[tessel.tensor([0, 1], dtype=dtype)]
    assert x[tessel.tensor([0, 2], dtype=tessel.int32)].shape == (2, 3)


def test_indices_outside_the_dim_raise_instead_of_wrapping():
    x = tessel.zeros(3, 3)
    idx = tessel.tensor([-1, 0])
    with pytest.raises(IndexError, match="index out of range in self"):
        tessel.index_select(x, 0, tessel.tensor([-1]))  # (it returned row 2)
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 3"):
        tessel.index_add(x, 0, idx, tessel.ones(2, 3))
    with pytest.raises(IndexError, match=r"index_copy_\(\): index 3 is out of bounds for dimension 0 with size 3"):
        tessel.index_copy(x, 0, tessel.tensor([3, 0]), tessel.ones(2, 3))
    with pytest.raises(IndexError, match="out of range: tried to access index 9 on a tensor of 9 elements"):
        x.clone().put_(tessel.tensor([9]), tessel.ones(1))
    assert x.clone().put_(tessel.tensor([-9]), tessel.ones(1)).reshape(-1).tolist()[0] == 1.0  # in range: wraps
    np.testing.assert_array_equal(tessel.index_select(tessel.tensor(_x()), 2, tessel.tensor([3, 0])).numpy(),
                                  _x()[:, :, [3, 0]])


def test_assigning_a_number_an_integer_tensor_cannot_hold_raises():
    x = tessel.zeros(3, 4, dtype=tessel.int32)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int without overflow"):
        x[0] = 2 ** 40  # (it stored -2147483648)
    y = tessel.zeros(3, dtype=tessel.int64)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int64_t without overflow"):
        y[0] = float("nan")
    x[1] = 2 ** 31 - 1
    assert x[1].tolist() == [2 ** 31 - 1] * 4


def _rows(n, m, off=0):
    return tessel.tensor(np.arange(1.0, n * m + 1).reshape(n, m) + off, requires_grad=True)


def test_repeated_writes_give_every_written_element_its_positions_gradient():
    # torch's backward gathers the output gradient at each index, so an element that lost a repeated write gets
    # its position's gradient too (only the last writer got it); expected values: that gather, by hand
    w = np.arange(1.0, 10.0).reshape(3, 3)
    x, v = _rows(3, 3), _rows(3, 3, 10)
    (tessel.index_put(x, (tessel.tensor([0, 0, 2]),), v) * tessel.tensor(w)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), w[[0, 0, 2]])
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], w[1], [0, 0, 0]])
    x, src = _rows(3, 3), _rows(2, 3, 10)
    index = np.array([[1, 1, 1], [0, 2, 0]])
    (tessel.scatter(x, 1, tessel.tensor(index), src) * tessel.tensor(w)).sum().backward()
    np.testing.assert_array_equal(src.grad.numpy(), np.take_along_axis(w[:2], index, 1))
    x = _rows(3, 4)
    g = np.arange(12.0).reshape(3, 4)
    y = x * 2
    y[tessel.tensor([1, 1, 0, 1])] += 1  # three reads of row 1 through the gather: three gradients, as torch
    (y * tessel.tensor(g)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2 * g[0], 3 * 2 * g[1], 2 * g[2]])
    src = tessel.tensor([5.0, 6.0, 7.0], dtype=tessel.float64, requires_grad=True)
    (_rows(3, 3).detach().clone().put_(tessel.tensor([0, 0, 4]), src) * tessel.tensor(w)).sum().backward()
    assert src.grad.tolist() == [w[0, 0], w[0, 0], w[1, 1]]
    with tessel.no_grad():  # values: the last write wins, as before
        assert tessel.index_put(_rows(3, 3), (tessel.tensor([0, 0]),), _rows(2, 3, 10))[0].tolist() == [14, 15, 16]


def test_index_fill_differentiates_a_tensor_value():
    x = tessel.tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)
    v = tessel.tensor(5.0, dtype=tessel.float64, requires_grad=True)
    g = np.arange(9.0).reshape(3, 3)
    (tessel.index_fill(x, 1, tessel.tensor([2, 2]), v) * tessel.tensor(g)).sum().backward()
    assert v.grad.item() == g[:, 2].sum()  # (it was None: the value was read as a number)
    np.testing.assert_array_equal(x.grad.numpy(), g * [1, 1, 0])


def test_an_advanced_setitem_value_broadcasts_to_the_whole_indexing_result():
    a = np.arange(12.0).reshape(3, 4)
    for key, value in ((np.array([0, 2]), np.array([[1.0, 2, 3, 4]])), (np.array([True, False, True]),
                                                                        np.array([[5.0], [6.0]]))):
        x = tessel.tensor(a)
        x[tessel.tensor(key)] = tessel.tensor(value)  # [1, 4] / [2, 1] against the result [2, 4]: it raised
        b = a.copy()
        b[key] = value
        np.testing.assert_array_equal(x.numpy(), b)
    x = tessel.tensor(a)
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[2, 4\] cannot be broadcast to "
                                           r"indexing result of shape \[8\]"):
        x[x > 3] = tessel.tensor(np.arange(8.0).reshape(2, 4))  # 8 values in another shape were written flattened


def test_bfloat16_scatter_reduce_and_its_tie_split():
    b = tessel.tensor([1.0, 2.0, 3.0]).to(tessel.bfloat16)
    src = tessel.tensor([2.0, 0.5, 4.0]).to(tessel.bfloat16)
    idx = tessel.tensor([0, 0, 2])
    assert tessel.scatter_reduce(b, 0, idx, src, "prod").float().tolist() == [1.0, 2.0, 12.0]  # (it raised)
    assert tessel.scatter_reduce(b, 0, idx, src, "amax").float().tolist() == [2.0, 2.0, 4.0]
    x = tessel.tensor([3.0, 5.0, 7.0], requires_grad=True)
    s = tessel.tensor([3.0, 1.0, 7.0, 3.0], requires_grad=True)
    out = tessel.scatter_reduce(x, 0, tessel.tensor([0, 0, 1, 0]), s, "amax", include_self=False)
    (out * tessel.tensor([1.0, 2.0, 3.0])).sum().backward()
    # torch counts self's tie in the split even when include_self=False (self then gets no share)
    np.testing.assert_allclose(s.grad.numpy(), [1 / 3, 0.0, 2.0, 1 / 3], rtol=1e-6)
    assert x.grad.tolist() == [0.0, 0.0, 3.0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
