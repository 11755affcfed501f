"""torch's remaining dense-tensor surface (tessel/_tensor_extras.py) against numpy and by construction: memory
formats with real strides (channels_last is NHWC in memory: the permuted view is contiguous; values unchanged;
gradients flow), layout and the dense flags, integer shifts with torch's wrap-around and out-of-range rules
against Python's integers, nextafter against numpy, index_reduce against a loop, nonzero_static, dim_order, put,
asarray and empty_strided."""
import sys

import numpy as np
import pytest

import tessel

RNG = np.random.default_rng(4)


def t(a, **kw):
    return tessel.tensor(np.asarray(a), **kw)


def test_channels_last_lays_out_nhwc_with_the_same_values():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = t(x).contiguous(memory_format=tessel.channels_last)
    assert y.stride() == (60, 1, 15, 3) and y.is_contiguous(memory_format=tessel.channels_last)
    assert not y.is_contiguous() and t(x).is_contiguous() and not t(x).is_contiguous(memory_format=tessel.channels_last)
    np.testing.assert_array_equal(y.numpy(), x)
    assert y.permute(0, 2, 3, 1).is_contiguous()  # NHWC in memory
    assert y.dim_order() == (0, 2, 3, 1) and t(x).dim_order() == (0, 1, 2, 3)
    z = t(x).to(memory_format=tessel.channels_last)
    assert z.stride() == (60, 1, 15, 3)
    assert y.contiguous(memory_format=tessel.preserve_format) is y
    v = t(RNG.standard_normal((1, 2, 2, 2, 3)).astype(np.float32)).contiguous(memory_format=tessel.channels_last_3d)
    assert v.stride() == (24, 1, 12, 6, 2)
    w = t(x, requires_grad=True)
    (w.contiguous(memory_format=tessel.channels_last) * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full(x.shape, 2.0, np.float32))
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        t(x[0]).contiguous(memory_format=tessel.channels_last)
    assert t(x).layout == tessel.strided and not t(x).is_meta and not t(x).is_sparse and not t(x).is_quantized


def wrap64(v):
    return (v + 2 ** 63) % 2 ** 64 - 2 ** 63


def test_integer_shifts_wrap_as_torch():
    a = np.array([1, -8, 1024, -1, 2 ** 62, -(2 ** 62)], dtype=np.int64)
    b = np.array([3, 2, 60, 63, 1, 1], dtype=np.int64)
    got = tessel.bitwise_left_shift(t(a), t(b)).tolist()
    assert got == [wrap64(int(x) << int(s)) for x, s in zip(a, b)]
    assert (t(a) << 2).tolist() == [wrap64(int(x) << 2) for x in a]
    assert (t(a) >> t(b)).tolist() == [int(x) >> int(s) for x, s in zip(a, b)]  # arithmetic: floor
    assert tessel.bitwise_right_shift(t([5, -5]), t([64, 64])).tolist() == [0, -1]  # out of range: the sign
    assert tessel.bitwise_left_shift(t([5]), t([70])).tolist() == [0]
    x = t(np.array([3, 5], dtype=np.int32))
    x <<= 1
    assert x.tolist() == [6, 10] and x.dtype == tessel.int32
    with pytest.raises(NotImplementedError, match="\"lshift_cpu\" not implemented for 'Float'"):
        tessel.tensor([1.0]) << 1  # float32


def test_nextafter_and_index_ops():
    a = np.array([1.0, 0.0, -1.0, 1e-300], dtype=np.float64)
    b = np.array([2.0, -1.0, -2.0, 0.0])
    np.testing.assert_array_equal(tessel.nextafter(t(a), t(b)).numpy(), np.nextafter(a, b))
    f = np.array([1.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(t(f).nextafter(t(np.array([0.0, 4.0], np.float32))).numpy(),
                                  np.nextafter(f, np.array([0.0, 4.0], np.float32)))
    src = RNG.standard_normal((3, 2))
    index = [0, 2, 0]
    base = RNG.standard_normal((4, 2))
    for reduce, fold in (("prod", np.prod), ("amax", np.max), ("amin", np.min), ("mean", np.mean)):
        for include_self in (True, False):
            want = base.copy()
            for row in range(4):
                picked = [src[k] for k, i in enumerate(index) if i == row]
                if picked:
                    values = ([base[row]] if include_self else []) + picked
                    want[row] = fold(np.stack(values), axis=0)
            got = t(base).index_reduce(0, t(index), t(src), reduce, include_self=include_self).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=(reduce, include_self))
    with pytest.raises(RuntimeError, match="Expected reduce to be one of prod, mean, amax or amin but got sum"):
        t(base).index_reduce(0, t(index), t(src), "sum")
    assert tessel.nonzero_static(t([0, 3, 0, 5]), size=3).tolist() == [[1], [3], [-1]]
    assert t([[0, 3], [4, 0]]).nonzero_static(size=1).tolist() == [[0, 1]]
    assert t(np.zeros((2, 2))).put(t([0, 3]), t([7.0, 8.0])).tolist() == [[7.0, 0.0], [0.0, 8.0]]


def test_asarray_and_empty_strided():
    x = t([1.0, 2.0])
    assert tessel.asarray(x) is x and tessel.asarray(x, copy=True) is not x
    assert tessel.asarray([[1, 2], [3, 4]], dtype=tessel.float32).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert tessel.asarray(x, dtype=tessel.float64).dtype == tessel.float64
    e = tessel.empty_strided((2, 3), (1, 2))
    assert tuple(e.shape) == (2, 3) and e.stride() == (1, 2)


def test_control_flow_legacy_constructor_and_names():
    x = t([1.0, 2.0])
    assert tessel.cond(x.sum() > 2, lambda a: a * 2, lambda a: a - 1, (x,)).tolist() == [2.0, 4.0]
    assert tessel.cond(False, lambda a: a * 2, lambda a: a - 1, (x,)).tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="Expected pred to be bool or single-element tensor"):
        tessel.cond(x > 0, lambda: 1, lambda: 2)
    i, doubled = tessel.while_loop(lambda k, a: k < 3, lambda k, a: (k + 1, a * 2), (tessel.tensor(0), x))
    assert i.item() == 3 and doubled.tolist() == [8.0, 16.0]
    assert tessel.typename(tessel.tensor([1.0])) == "torch.FloatTensor"
    assert tessel.typename(tessel.tensor([1])) == "torch.LongTensor" and tessel.typename(3) == "int"
    f = tessel.tensor([1.0])
    assert tuple(f.new(2, 3).shape) == (2, 3) and f.new(2, 3).dtype == tessel.float32
    assert f.new([1, 2]).tolist() == [1.0, 2.0] and tuple(f.new().shape) == (0,)
    assert x.is_set_to(x) and x.is_set_to(x.view(2)) and not x.is_set_to(x.clone())
    assert [p.tolist() for p in t([1.0, 2.0, 3.0]).unsafe_split_with_sizes([1, 2])] == [[1.0], [2.0, 3.0]]
    with pytest.raises(NotImplementedError, match="set_default_device: device 'cuda"):
        tessel.set_default_device("cuda")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
