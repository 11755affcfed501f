"""Core tensor ops against torch 2.15's values, dtypes and shapes, from the thirty-eighth session's sweep of
~9,800 cases (each expected value below is what torch 2.15 printed for the same call): scatter_reduce with
infinities, numpy integer scalars as operands, shift and nextafter promotion, isclose on unsigned integers,
trapezoid with an N-D x, integer in-place ops with a floating result, heaviside's dtype, addmm-family alpha=0,
searchsorted with NaN, cummax of an empty tensor, and the dtype of a list of 0-d tensors.
"""
import math

import numpy as np
import pytest

import tessel

T = tessel.tensor
inf, nan = math.inf, math.nan


def same(t, values, dtype, shape):
    assert t.dtype == dtype and tuple(t.shape) == shape, (t.dtype, tuple(t.shape))
    np.testing.assert_array_equal(t.numpy(), np.asarray(values))


def test_scatter_reduce_and_index_reduce_keep_infinities_instead_of_nan():
    same(tessel.zeros(2).scatter_reduce(0, T([0, 0, 1]), T([1.0, inf, -inf]), "amax"), [inf, 0.0], tessel.float32,
         (2,))
    same(tessel.zeros(2).scatter_reduce(0, T([0, 1]), T([-inf, 3.0]), "amin", include_self=False), [-inf, 3.0],
         tessel.float32, (2,))
    same(tessel.ones(2).scatter_reduce(0, T([0, 0, 1]), T([2.0, inf, 3.0]), "prod", include_self=False),
         [inf, 3.0], tessel.float32, (2,))
    same(tessel.zeros(2).index_reduce(0, T([0, 1]), T([-inf, 5.0]), "amin"), [-inf, 0.0], tessel.float32, (2,))
    # the gradient still splits among the elements equal to the result (two tied maxima: half each)
    src = T([4.0, 4.0, -inf, 1.0], requires_grad=True)
    out = tessel.zeros(2).scatter_reduce(0, T([0, 0, 1, 1]), src, "amax", include_self=False)
    out.sum().backward()
    same(out.detach(), [4.0, 1.0], tessel.float32, (2,))
    np.testing.assert_array_equal(src.grad.numpy(), [0.5, 0.5, 0.0, 1.0])


def test_numpy_integer_scalars_are_integers_in_arithmetic_and_full():
    same(T([1, 2]) + np.int64(1), [2, 3], tessel.int64, (2,))
    same(np.int64(1) + T([1, 2]), [2, 3], tessel.int64, (2,))
    same(T([1, 2]) - np.int32(1), [0, 1], tessel.int64, (2,))
    same(np.int64(5) - T([1, 2]), [4, 3], tessel.int64, (2,))
    same(np.int64(3) * T([1, 2]), [3, 6], tessel.int64, (2,))
    same(T([1, 2], dtype=tessel.uint8) * np.int64(100), [100, 200], tessel.uint8, (2,))
    same(T([True]) + np.int64(2), [3], tessel.int64, (1,))
    same(tessel.full((2,), np.int64(3)), [3, 3], tessel.int64, (2,))
    same(T([1, 2]) + np.float32(0.5), [1.5, 2.5], tessel.float32, (2,))  # a numpy float stays a float


def test_shifts_and_nextafter_promote_as_torch_and_keep_zero_dims():
    same(T([1, 2], dtype=tessel.int8) << T([7, 8], dtype=tessel.uint8), [128, 512], tessel.int16, (2,))
    same(T([3], dtype=tessel.uint8) << T([8]), [768], tessel.int64, (1,))
    same(T(3) << 1, 6, tessel.int64, ())
    same(T(-8) >> 1, -4, tessel.int64, ())
    same(tessel.nextafter(T(1.0), T(2.0)), np.nextafter(np.float32(1), np.float32(2)), tessel.float32, ())
    assert tessel.nextafter(T([1.0], dtype=tessel.bfloat16), T([2.0])).dtype == tessel.float32
    with pytest.raises(NotImplementedError, match="lshift_cpu"):
        T([True]) << T([True])


def test_isclose_of_unsigned_integers_does_not_wrap():
    assert tessel.isclose(T([2], dtype=tessel.uint8), T([3], dtype=tessel.uint8), atol=1).tolist() == [True]
    assert tessel.isclose(T([0], dtype=tessel.uint8), T([255], dtype=tessel.uint8), atol=1).tolist() == [False]
    assert tessel.isclose(T([True, False]), T([True, True])).tolist() == [True, False]


def test_trapezoid_takes_widths_along_dim_with_torchs_formulas():
    y, x = T([[1.0, 2.0], [3.0, 5.0]]), T([[0.0, 0.0], [1.0, 2.0]])
    same(tessel.trapezoid(y, x, dim=0), [2.0, 7.0], tessel.float32, (2,))  # was along the last dim: [2, 3.5]
    same(tessel.cumulative_trapezoid(y, x, dim=0), [[2.0, 7.0]], tessel.float32, (1, 2))
    same(tessel.trapezoid(y, T([0.0, 2.0]), dim=0), [4.0, 7.0], tessel.float32, (2,))  # a 1-D x runs along dim
    same(tessel.trapezoid(tessel.zeros(2, 0)), [0.0, 0.0], tessel.float32, (2,))  # an empty dim: zeros
    same(tessel.trapezoid(T([[nan, 1.0]]), dim=0), [nan, 0.0], tessel.float32, (2,))  # one sample: (y - y)·dx
    same(tessel.trapezoid(T([1.0, 2.0, 4.0]), dx=0.5), 2.25, tessel.float32, ())
    with pytest.raises(RuntimeError, match="one `x` value for each sample point"):
        tessel.trapezoid(y, T([0.0, 1.0, 2.0]), dim=0)


def test_unsigned_integers_are_not_signed():
    assert not T([1], dtype=tessel.uint8).is_signed() and T([1], dtype=tessel.int8).is_signed()


def test_in_place_ops_with_a_floating_result_refuse_integer_tensors():
    for op in (lambda t: t.exp_(), lambda t: t.sqrt_(), lambda t: t.log_(), lambda t: t.sigmoid_(),
               lambda t: t.pow_(0.5), lambda t: t.clamp_(min=T([1.5]))):
        t = T([4, 9])
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type"):
            op(t)
        assert t.tolist() == [4, 9]  # untouched (it was truncated: exp_ of [1, 2, 3] left [2, 7, 20])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Bool"):
        T([True]).exp_()
    assert T([4, 9]).pow_(2).tolist() == [16, 81] and T([4, 9]).clamp_(min=T([5])).tolist() == [5, 9]


def test_heaviside_keeps_integer_dtypes_and_refuses_mixed_ones():
    same(tessel.heaviside(T([-2, 0, 3]), T([7])), [0, 7, 1], tessel.int64, (3,))
    same(tessel.heaviside(T([-2.0, 0.0, 3.0]), T([0.5])), [0.0, 0.5, 1.0], tessel.float32, (3,))
    with pytest.raises(RuntimeError, match="different dtypes"):
        tessel.heaviside(T([1], dtype=tessel.int32), T([1]))


def test_alpha_zero_leaves_the_product_out_of_the_addmm_family():
    one = tessel.ones(1, 1)
    same(tessel.addmm(one, T([[nan]]), T([[1.0]]), alpha=0), [[1.0]], tessel.float32, (1, 1))
    # (torch's batched kernel multiplies anyway: NaN, as there)
    same(tessel.baddbmm(tessel.ones(1, 1, 1), T([[[inf]]]), T([[[0.0]]]), alpha=0), [[[nan]]], tessel.float32,
         (1, 1, 1))
    same(tessel.addbmm(one, T([[[nan]]]), T([[[1.0]]]), alpha=0, beta=2), [[2.0]], tessel.float32, (1, 1))
    same(tessel.addmv(tessel.ones(1), T([[nan]]), T([1.0]), alpha=0), [1.0], tessel.float32, (1,))
    m = T([[2.0]], requires_grad=True)
    tessel.addmm(one, m, T([[3.0]]), alpha=0).sum().backward()
    assert m.grad.tolist() == [[0.0]]


def test_searchsorted_orders_nan_as_torch():
    same(tessel.searchsorted(T([1.0, 2.0, nan]), T([nan, inf, 1.5])), [3, 3, 1], tessel.int64, (3,))
    same(tessel.searchsorted(T([1.0, 2.0, nan]), T([2.0]), right=True), [3], tessel.int64, (1,))
    same(tessel.searchsorted(T([[1.0, 3.0], [2.0, 4.0]]), T([[3.0], [1.0]]), side="right"), [[2], [0]],
         tessel.int64, (2, 1))


def test_cummax_and_cummin_of_empty_tensors():
    r = tessel.cummax(tessel.zeros(0), 0)
    same(r.values, [], tessel.float32, (0,))
    same(r.indices, [], tessel.int64, (0,))
    assert tuple(tessel.cummin(tessel.zeros(2, 0), 1).indices.shape) == (2, 0)


def test_a_list_of_tensors_takes_their_dtype():
    f64 = tessel.float64
    same(T([T(1.0, dtype=f64), T(2.0, dtype=f64)]), [1.0, 2.0], f64, (2,))
    same(T([T(1.0, dtype=f64), 2.5]), [1.0, 2.5], f64, (2,))
    same(T([T(1.0), 2.5]), [1.0, 2.5], tessel.float32, (2,))
    same(T([T(1, dtype=tessel.int32), T(2, dtype=tessel.int32)]), [1, 2], tessel.int32, (2,))
    same(T([[T(1), 2], [3, T(4)]]), [[1, 2], [3, 4]], tessel.int64, (2, 2))



def test_integer_einsum_keeps_its_dtype_and_cumprod_of_empty_ints_is_int64():
    u8 = tessel.uint8
    same(tessel.einsum("ij,jk->ik", T([[1, 2]], dtype=u8), T([[200], [100]], dtype=u8)), [[144]], u8, (1, 1))
    same(tessel.einsum("i,i->", T([1, 2], dtype=tessel.int32), T([3, 4], dtype=tessel.int32)), 11, tessel.int32, ())
    same(tessel.cumprod(T(3, dtype=u8), 0), 3, tessel.int64, ())
    same(tessel.cumprod(tessel.zeros(0, dtype=tessel.int16), 0), [], tessel.int64, (0,))


def test_zero_dim_index_select_and_vector_norm():
    with pytest.raises(RuntimeError, match="Index to scalar can have only 1 value, got 2"):
        T(5.0).index_select(0, T([0, 0]))
    same(T(5.0).index_select(0, T([0])), 5.0, tessel.float32, ())
    same(tessel.linalg.vector_norm(T(-2.0), 2, dim=0), 2.0, tessel.float32, ())  # was ZeroDivisionError
    n = tessel.linalg.vector_norm(T(2.0, dtype=tessel.bfloat16), 2, dim=0, keepdim=True)
    assert n.dtype == tessel.bfloat16 and tuple(n.shape) == () and n.item() == 2.0
    with pytest.raises(IndexError, match=r"expected to be in range of \[-1, 0\], but got 1"):
        tessel.linalg.vector_norm(T(-2.0), 2, dim=1)



def test_tensor_protocols_reversed_contains_index_flip_and_new_size_keyword():
    x = T([[1, 2], [3, 4]])
    r = reversed(x)  # torch's flip(0): a new tensor (Python's iterator over row views was returned)
    assert isinstance(r, tessel.Tensor) and r.tolist() == [[3, 4], [1, 2]]
    r[0, 0] = 9
    assert x.tolist() == [[1, 2], [3, 4]] and reversed(T(3)).item() == 3
    assert 2 in x and 5 not in x and 1 in T(1) and T(4) in x  # (2-D and 0-d raised)
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        "a" in T([1])
    assert [10, 20, 30][T(True)] == 20
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        T([1, 2, 3]).flip(0, 0)  # was the input back, unflipped
    with pytest.raises(RuntimeError, match="dim 1 appears multiple times"):
        x.flip(1, -1)
    assert x.flip(0, 1).tolist() == [[4, 3], [2, 1]]
    y = T([1.0])
    assert tuple(y.new_zeros(size=(2, 3)).shape) == (2, 3) and y.new_ones(size=[2]).tolist() == [1.0, 1.0]
    assert tuple(y.new_empty(size=(1, 2)).shape) == (1, 2)

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
