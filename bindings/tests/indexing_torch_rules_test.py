"""Indexing, scatter and search ops against torch 2.15's values, dtypes and errors, from the fortieth session's
read-only sweep of indexing / scatter / search (each expected value below is what torch 2.15 printed for the same
call): t[int, :, idx] = v in torch's dim order, index-returning ops on tensors that require grad, advanced
setitem with tensor values, take_along_dim's wrap-around, per-add rounding of 16-bit index_add / index_put, the
0-d cases of nonzero and x[True, idx], mode with NaN, and torch's checks and error types.
"""
import math
import warnings

import numpy as np
import pytest

import tessel

T = tessel.tensor
nan = math.nan


def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [str(w.message) for w in caught if w.category is UserWarning]


def _forget_warned(*flags):
    """torch warns these once per process, as tessel does: forget that tessel did (torch has no such flags)."""
    for flag in flags:
        owner = tessel
        for part in flag.split(".")[:-1]:
            owner = getattr(owner, part, None)
        getattr(owner, flag.rsplit(".", 1)[-1], []).clear()


def test_index_reduce_and_scatter_reduce_warn_as_torch():
    _forget_warned("_tensor_extras._warned_index_reduce", "_scatter._warned_reduce")
    _, caught = _warnings_of(lambda: tessel.zeros(3).index_reduce(0, T([0]), tessel.ones(1), "prod"))
    assert [m.split(" (Triggered")[0] for m in caught] == [
        "index_reduce() is in beta and the API may change at any time."]  # torch's
    out, caught = _warnings_of(lambda: tessel.zeros(3).scatter(0, T([0, 0]), tessel.ones(2), reduce="add"))
    assert out.tolist() == [2.0, 0.0, 0.0]  # torch's
    assert [m.split(" (Triggered")[0] for m in caught] == [  # torch's
        "The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a future PyTorch "
        "release. Use torch.scatter_reduce instead for more reduction options."]


def test_int_slice_and_advanced_setitem_writes_in_torchs_dim_order():
    # torch selects with the int first, so the advanced dim stays where it was (it was written transposed)
    x = tessel.zeros(2, 3, 3)
    x[0, :, [1, 2, 0]] = tessel.arange(9.0).reshape(3, 3)
    assert x[0].tolist() == [[2.0, 0.0, 1.0], [5.0, 3.0, 4.0], [8.0, 6.0, 7.0]]  # torch's
    y = tessel.zeros(2, 3, 4)
    y[0, :, [1, 2]] += 1  # (raised expand's error: target [2, 3], tensor [3, 2])
    assert y[0].tolist() == [[0.0, 1.0, 1.0, 0.0]] * 3  # torch's
    z = tessel.zeros(2, 3, 4, 5)
    z[:, 0, :, [1, 2]] = tessel.arange(16.0).reshape(2, 4, 2)
    assert z[1, 0].tolist() == [[0.0, 8.0, 9.0, 0.0, 0.0], [0.0, 10.0, 11.0, 0.0, 0.0],
                                [0.0, 12.0, 13.0, 0.0, 0.0], [0.0, 14.0, 15.0, 0.0, 0.0]]  # torch's
    assert z.sum().item() == 120.0
    # recorded by autograd: the values and both gradients as torch's
    x = tessel.zeros(2, 3, 4, requires_grad=True)
    v = tessel.arange(6.0, requires_grad=True)
    y = x * 1
    y[1, :, [3, 0]] = v.reshape(3, 2)
    (y * tessel.arange(24.0).reshape(2, 3, 4)).sum().backward()
    assert y[1].tolist() == [[1.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 2.0], [5.0, 0.0, 0.0, 4.0]]  # torch's
    assert v.grad.tolist() == [15.0, 12.0, 19.0, 16.0, 23.0, 20.0]  # torch's
    assert x.grad[1].tolist() == [[0.0, 13.0, 14.0, 0.0], [0.0, 17.0, 18.0, 0.0], [0.0, 21.0, 22.0, 0.0]]  # torch's
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[4, 2\] cannot be broadcast to "
                                           r"indexing result of shape \[2, 4\]"):
        tessel.zeros(3, 4, 5)[[1, 2], :, 0] = tessel.arange(8.0).reshape(4, 2)
    with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 0, but got slice"):
        tessel.zeros(2, 3).index_put_((T([0]), slice(None)), T(1.0))  # (a slice was read as a subscript entry)


def test_index_returning_ops_take_inputs_that_require_grad():
    w = T([0.0, 1.0, 2.0], requires_grad=True)  # (each raised NotImplementedError)
    assert w.nonzero().tolist() == [[1], [2]]  # torch's
    assert [t.tolist() for t in tessel.where(w)] == [[1, 2]]  # torch's
    assert tessel.argwhere(w).tolist() == [[1], [2]]  # torch's
    assert tessel.relu(w - 1).nonzero().tolist() == [[2]]  # torch's (a non-leaf)
    assert w[w.nonzero().squeeze(1)].tolist() == [1.0, 2.0]  # torch's
    assert tessel.searchsorted(w, T([0.5, 1.5])).tolist() == [1, 2]  # torch's
    assert tessel.searchsorted(T([0.0, 1.0, 2.0]), w[1:] - 0.5).tolist() == [1, 2]  # torch's
    assert tessel.bucketize(T([0.5, 1.5]), w).tolist() == [1, 2]  # torch's
    assert tessel.isin(w, T([1.0])).tolist() == [False, True, False]  # torch's
    assert tessel.histc(w, 3, 0, 3).tolist() == [1.0, 1.0, 1.0]  # torch's
    counts = tessel.bincount(T([0, 2, 2]), weights=T([1.5, 1.0, 1.0], requires_grad=True))
    assert counts.tolist() == [1.5, 0.0, 2.0]  # torch's


def test_advanced_setitem_takes_torchs_tensor_values():
    x = tessel.zeros(4, 2)
    x[T([[0, 1], [3, 3]])] = tessel.arange(8.0).reshape(2, 2, 2)  # a 2-D index: the value is [2, 2, 2]
    assert x.tolist() == [[0.0, 1.0], [2.0, 3.0], [0.0, 0.0], [6.0, 7.0]]  # torch's
    # the value's leading size-1 dims are dropped, as torch's setitem does
    x = tessel.zeros(3, 2)
    x[[0, 2]] = tessel.ones(1, 1, 2, 2)
    assert x.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]  # torch's
    x = tessel.zeros(3, 3)
    x[:, [0, 2]] = tessel.arange(6.0).reshape(1, 3, 2)
    assert x.tolist() == [[0.0, 0.0, 1.0], [2.0, 0.0, 3.0], [4.0, 0.0, 5.0]]  # torch's
    x = tessel.zeros(3, 3)
    x[[0, 1], [1, 2]] = T([[7.0, 8.0]])
    assert x.tolist() == [[0.0, 7.0, 0.0], [0.0, 0.0, 8.0], [0.0, 0.0, 0.0]]  # torch's
    x = tessel.zeros(4)
    x[T([True, False, True, False])] = T([[5.0, 6.0]])
    assert x.tolist() == [5.0, 0.0, 6.0, 0.0]  # torch's
    x = tessel.zeros(3, 2, requires_grad=True)
    v = tessel.ones(1, 2, 2, requires_grad=True)
    y = x * 1
    y[[0, 2]] = v * 2
    (y * tessel.arange(6.0).reshape(3, 2)).sum().backward()
    assert y.tolist() == [[2.0, 2.0], [0.0, 0.0], [2.0, 2.0]]  # torch's
    assert v.grad.tolist() == [[[0.0, 2.0], [8.0, 10.0]]]  # torch's
    # through a transposed view: the writes land in its base (self.view raised)
    b = tessel.zeros(4, 3)
    m = tessel.zeros(3, 4, dtype=tessel.bool)
    m[0, 1] = True
    m[2, 3] = True
    b.t()[m] = T([5.0, 6.0])
    assert b.tolist() == [[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 6.0]]  # torch's


def test_take_along_dim_wraps_indices_along_a_dim():
    x = tessel.arange(6.0).reshape(2, 3)
    assert tessel.take_along_dim(x, T([[-1], [0]]), 1).tolist() == [[2.0], [3.0]]  # torch's
    assert tessel.take_along_dim(x, T([[-1], [7]]), 1).tolist() == [[2.0], [4.0]]  # torch's
    assert tessel.take_along_dim(x, T([[-1], [7]]), 0).tolist() == [[3.0, 4.0, 5.0], [3.0, 4.0, 5.0]]  # torch's
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 6"):
        tessel.take_along_dim(x, T([[-1], [7]]))  # without a dim: no wrap-around, as torch
    with pytest.raises(RuntimeError, match="dtype of indices should be Long but got Int"):
        tessel.take_along_dim(x, T([[0], [1]], dtype=tessel.int32), 1)


def test_index_ops_raise_torchs_error_types():
    with pytest.raises(IndexError, match="index out of range in self"):
        tessel.zeros(3).index_add(0, T([3]), tessel.ones(1))
    with pytest.raises(IndexError, match="index out of range in self"):
        tessel.zeros(2, 3, 2).index_add(1, T([-1]), tessel.ones(2, 1, 2))
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
        tessel.zeros(2, 3).index_add(1, T([3]), tessel.ones(2, 1))  # torch's 2-D kernel says it this way
    with pytest.raises(IndexError, match="index out of range in self"):
        tessel.zeros(2, 3).index_reduce(1, T([3]), tessel.ones(2, 1), "prod")
    for call in (lambda: tessel.zeros(2, 3).index_add(2, T([0]), tessel.ones(2, 1)),
                 lambda: tessel.zeros(2, 3).kthvalue(1, 2), lambda: tessel.zeros(2, 3).index_reduce(
                     2, T([0]), tessel.ones(2, 1), "amax")):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], "
                                             r"but got 2\)"):
            call()
    with pytest.raises(IndexError, match=r"only integers, slices \(`:`\), ellipsis \(`...`\), None and long or byte "
                                         r"Variables are valid indices \(got float\)"):
        tessel.arange(6)[1.0]
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(2\) must match the size of tensor b \(3\) at "
                                           r"non-singleton dimension 1"):
        tessel.zeros(2, 3).masked_select(T([True, False]))
    with pytest.raises(IndexError, match=r"mode\(\): Expected reduction dim 0 to have non-zero size."):
        tessel.zeros(0).mode()
    with pytest.raises(IndexError, match=r"kthvalue\(\): Expected reduction dim 1 to have non-zero size."):
        tessel.kthvalue(tessel.zeros(2, 0), 1)
    values, counts = tessel.unique_consecutive(tessel.zeros(0, 2), dim=0, return_counts=True)
    assert tuple(values.shape) == (0, 2) and counts.tolist() == []  # torch's
    with pytest.raises(RuntimeError, match="There are 0 sized dimensions, and they aren't selected"):
        tessel.unique_consecutive(tessel.zeros(2, 0), dim=0)


def test_where_takes_a_uint8_condition_with_torchs_warning():
    _forget_warned("_warned_uint8_where")
    out, caught = _warnings_of(lambda: tessel.where(T([1, 0], dtype=tessel.uint8), T([1.0, -2.0]), 0.0))
    assert out.tolist() == [1.0, 0.0]  # torch's
    assert [m.split(" (Triggered")[0] for m in caught] == [  # torch's
        "where received a uint8 condition tensor. This behavior is deprecated and will be removed in a future "
        "version of PyTorch. Use a boolean condition instead."]
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor, but got a tensor with "
                                           "dtype Long"):
        tessel.where(T([1, 0]), T([1.0, -2.0]), 0.0)


def test_masked_scatter_broadcasts_self_with_the_mask():
    out = tessel.masked_scatter(tessel.zeros(3), T([[True, False, True], [True, True, True]]), tessel.arange(1.0, 7.0))
    assert tuple(out.shape) == (2, 3) and out.tolist() == [[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]]  # torch's
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        tessel.zeros(2, 3).masked_scatter_(T([True, False, True]), tessel.arange(10.0, 12.0))
    with pytest.raises(RuntimeError, match="masked_scatter: expected self and source to have same dtypes but "
                                           "gotFloat and Long"):
        tessel.zeros(3).masked_scatter_(T([True, False, True]), T([1, 2]))


def test_sixteen_bit_index_add_of_a_vector_and_index_put_round_each_add():
    src = T([256.0, 1.0, 1.0, 1.0], dtype=tessel.bfloat16)
    at = tessel.zeros(4, dtype=tessel.int64)
    assert tessel.zeros(1, dtype=tessel.bfloat16).index_add(0, at, src).float().tolist() == [256.0]  # torch's
    assert tessel.zeros(1, dtype=tessel.bfloat16).index_add(0, at, src, alpha=3).float().tolist() == [780.0]  # torch's
    out = tessel.zeros(1, dtype=tessel.bfloat16).index_put((at,), src, accumulate=True)
    assert out.float().tolist() == [256.0]  # torch's (a float32 sum first gave 260)
    half = T([2048.0, 1.0, 1.0, 1.0], dtype=tessel.float16)
    assert tessel.zeros(1, dtype=tessel.float16).index_put((at,), half, accumulate=True).tolist() == [2048.0]
    # the gradient still flows to both operands
    x = tessel.zeros(2, 3, dtype=tessel.bfloat16, requires_grad=True)
    s = tessel.ones(2, 4, dtype=tessel.bfloat16, requires_grad=True)
    y = x.index_add(1, T([0, 2, 0, 0]), s * T([[300.0], [1.0]], dtype=tessel.bfloat16))
    (y.float() * tessel.arange(6.0).reshape(2, 3)).sum().backward()
    assert y.float().tolist() == [[900.0, 0.0, 300.0], [3.0, 0.0, 1.0]]  # torch's
    assert x.grad.float().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]  # torch's
    assert s.grad.float().tolist() == [[0.0, 600.0, 0.0, 0.0], [3.0, 5.0, 3.0, 3.0]]  # torch's
    # an integer self takes alpha as an integer
    out = tessel.zeros(3, dtype=tessel.int64).index_add_(0, T([0, 0]), T([5, 6]), alpha=2.5)
    assert out.tolist() == [22, 0, 0]  # torch's



def test_sixteen_bit_index_add_and_index_gradients_round_where_torch_does():
    # torch 2.15: index_add_ of a tensor of 2+ dims sums in float32 and rounds once (259 -> 260 in bfloat16), of a
    # 1-D one rounds after each add (256 + 1 stays 256); x[index]'s gradient is index_put_(accumulate=True), per
    # add, whatever x's rank; index_select's is index_add_'s (once for 2+ dims, per add in 1-D). Printed by torch.
    bf = tessel.bfloat16
    g2 = T([[256.0], [1.0], [1.0], [1.0]], dtype=bf)
    at = tessel.zeros(4, dtype=tessel.int64)
    assert tessel.zeros(1, 1, dtype=bf).index_add(0, at, g2).float().tolist() == [[260.0]]
    assert tessel.zeros(1, dtype=bf).index_add(0, at, g2.reshape(4)).float().tolist() == [256.0]
    grads = []
    for shape, grad in (((1, 1), g2), ((1,), g2.reshape(4))):
        for pick in (lambda x: x[at], lambda x: tessel.index_select(x, 0, at)):
            x = tessel.zeros(*shape, dtype=bf, requires_grad=True)
            pick(x).backward(grad)
            grads.append(x.grad.float().tolist())
    assert grads == [[[256.0]], [[260.0]], [256.0], [256.0]]
    h = T([[2048.0], [1.0], [1.0], [1.0]], dtype=tessel.float16)
    assert tessel.zeros(1, 1, dtype=tessel.float16).index_add(0, at, h).float().tolist() == [[2052.0]]
    x = tessel.zeros(1, 1, dtype=tessel.float16, requires_grad=True)
    x[at].backward(h)
    assert x.grad.float().tolist() == [[2048.0]]

def test_zero_d_nonzero_and_a_zero_d_bool_among_advanced_indices():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's DeprecationWarning for nonzero of a 0-d array came out
        assert tuple(tessel.nonzero(T(5)).shape) == (1, 0)  # torch's
        assert tuple(tessel.nonzero(T(0)).shape) == (0, 0)  # torch's
        assert tuple(tessel.argwhere(T(5)).shape) == (1, 0)  # torch's
        assert [t.tolist() for t in tessel.where(T(True))] == [[0]]  # torch's
    x = tessel.arange(12).reshape(3, 4)
    assert tuple(x[True, [0, 1]].shape) == (2, 4)  # torch's (a 0-d bool is an index too here)
    assert x[True, [0, 1]].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]  # torch's
    assert tuple(x[:, True, [0, 2]].shape) == (3, 2)  # torch's


def test_mode_reads_each_nan_as_a_value_of_its_own():
    for values, value, index in (([1.0, nan, nan, 2.0], 1.0, 0), ([nan, 1.0, nan], nan, 0),  # torch's
                                 ([2.0, nan, 2.0, nan, nan], 2.0, 0), ([3.0, nan, 1.0, nan], 1.0, 2),
                                 ([1.0, 1.0, nan, 2.0, 2.0], 1.0, 1)):
        out = tessel.tensor(values).mode()
        np.testing.assert_array_equal(out.values.numpy(), np.float32(value))
        assert out.indices.item() == index, values


def test_search_and_index_ops_check_their_arguments_as_torch():
    s = T([1, 3, 5])
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites, got side of left while right "
                                           "was True"):
        tessel.searchsorted(s, T([3]), side="left", right=True)
    with pytest.raises(RuntimeError, match="side can only be 'left' or 'right' but got middle"):
        tessel.searchsorted(s, T([3]), side="middle")
    with pytest.raises(RuntimeError, match=r"the first N-1 dimensions of boundaries tensor and input value tensor "
                                           r"must match, but we got boundaries tensor \[2, 3\] and input value tensor "
                                           r"\[2\]"):
        tessel.searchsorted(T([[1, 3, 5], [2, 4, 6]]), T([3, 6]))
    with pytest.raises(RuntimeError, match="sorter must be a tensor of long dtype but got dtype Int"):
        tessel.searchsorted(s, T([3]), sorter=T([0, 1, 2], dtype=tessel.int32))
    with pytest.raises(RuntimeError, match=r"boundaries tensor must be 1 dimension, but got dim\(2\)"):
        tessel.bucketize(T([2.0]), T([[1.0, 3.0]]))
    x = tessel.zeros(2, 3)
    with pytest.raises(IndexError, match=r"put_\(\): Expected source and index to have the same number of elements, "
                                         r"but got source.numel\(\) = 1, index.numel\(\) = 2"):
        x.put_(T([0, 1]), T([1.0]))
    with pytest.raises(RuntimeError, match=r"put_\(\): Expected a long tensor for index, but got Int"):
        x.put_(T([0], dtype=tessel.int32), T([1.0]))
    with pytest.raises(RuntimeError, match=r"take\(\): Expected a long tensor for index, but got Int"):
        tessel.take(x, T([0], dtype=tessel.int32))
    with pytest.raises(IndexError, match="out of range: tried to access index 6 on a tensor of 6 elements."):
        tessel.take(x, T([6]))
    with pytest.raises(RuntimeError, match=r"index_copy_\(\): Expected a long tensor for index, but got Int"):
        x.index_copy(1, T([0], dtype=tessel.int32), tessel.ones(2, 1))
    with pytest.raises(RuntimeError, match=r"index_add_\(\): Expected dtype int32/int64 for index but got: Float"):
        x.index_add(1, T([0.0]), tessel.ones(2, 1))
    with pytest.raises(IndexError, match=r"index_fill_\(\): Expected dtype int64 for index."):
        x.index_fill(1, T([0], dtype=tessel.int32), 1.0)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x.index_fill(1, T([3]), 1.0)
    with pytest.raises(RuntimeError, match="index_fill_ only supports a 0-dimensional value tensor, but got tensor "
                                           r"with 1 dimension\(s\)."):
        x.index_fill(1, T([0]), T([1.0]))
    with pytest.raises(RuntimeError, match="masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                                           r"with 1 dimension\(s\)."):
        x.masked_fill(T([True, False, True]), T([1.0]))
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks, but got mask with dtype "
                                           "unsigned char"):
        x.masked_fill(T([1, 0, 1], dtype=tessel.uint8), 1.0)
    # a list of Python floats is a long index (truncated), as torch reads it
    assert tessel.arange(6)[[0.0, 1.0]].tolist() == [0, 1]  # torch's
    assert tessel.arange(6)[[0.5, 1.0]].tolist() == [0, 1]  # torch's
    assert tessel.arange(6).reshape(2, 3)[[0.0, 1.0], [1.0, 2.0]].tolist() == [1, 5]  # torch's
    assert tessel.put(x, T([0, 1]), T([1.0, 2.0])).tolist() == [[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]  # torch's


def test_setitem_refuses_a_value_overlapping_the_written_view():
    x = tessel.arange(5.0)
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                           "written-to tensor refer to a single memory location"):
        x[1:] = x[:-1]  # (wrote [0, 0, 1, 2, 3])
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        y = tessel.arange(9.0).reshape(3, 3)
        y[:] = y.t()
    x = tessel.arange(5.0)
    x[:] = x  # the same memory in the same layout, and a broadcast or gapped value: written, as torch
    x[...] = x[0]
    assert x.tolist() == [0.0] * 5  # torch's
    y = tessel.arange(6.0)
    y[::2] = y[1::2]
    assert y.tolist() == [1.0, 1.0, 3.0, 3.0, 5.0, 5.0]  # torch's


def test_indexing_messages_are_torchs():
    x = tessel.zeros(2, 3)
    with pytest.raises(IndexError, match=r"The shape of the mask \[3\] at index 0 does not match the shape of the "
                                         r"indexed tensor \[2, 3\] at index 0"):
        x[T([True, False, True])]
    with pytest.raises(IndexError, match=r"The shape of the mask \[2\] at index 0 does not match the shape of the "
                                         r"indexed tensor \[2, 3\] at index 1"):
        x[:, T([True, False])]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 0"):
        T(5.0)[[0]]
    with pytest.raises(RuntimeError, match="^index 5 is out of bounds for dimension 1 with size 3$"):
        x.scatter(1, T([[5]]), tessel.ones(1, 1))
    with pytest.raises(RuntimeError, match="^index 5 is out of bounds for dimension 1 with size 3$"):
        x.gather(1, T([[5]]))
    with pytest.raises(RuntimeError, match="^Index tensor must have the same number of dimensions as self tensor$"):
        x.scatter(1, T([5]), tessel.ones(1, 1))
    with pytest.raises(RuntimeError, match=r"scatter\(\): Expected dtype int32/int64 for index"):
        x.scatter_add(1, T([[0.0]]), tessel.ones(1, 1))
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
