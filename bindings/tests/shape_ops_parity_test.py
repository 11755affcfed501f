"""Shape and layout operations as torch 2.15's, found by a 21,298-case side-by-side sweep: size / stride of a 0-d
tensor raise (they crashed the process), unfold is a view, ravel is contiguous, clone takes memory_format and keeps
a channels-last layout, and bad arguments raise torch's errors instead of returning nonsense. Expected values:
numpy's sliding windows and torch's rules written out."""
import sys

import numpy as np
import pytest

import tessel


def test_size_and_stride_of_a_0d_tensor_raise_torchs_index_error():
    x = tessel.tensor(3.0)
    for call in (lambda: x.size(0), lambda: x.size(-1), lambda: x.stride(0), lambda: x.stride(-1)):
        with pytest.raises(IndexError, match="Dimension specified as -?[01] but tensor has no dimensions"):
            call()  # (it read past the empty shape: a segfault)
    assert x.size() == () and x.stride() == ()


def test_unfold_is_a_view_of_its_windows():
    a = np.arange(12.0).reshape(3, 4)
    x = tessel.tensor(a)
    u = x.unfold(1, 2, 1)
    np.testing.assert_array_equal(u.numpy(), np.lib.stride_tricks.sliding_window_view(a, 2, axis=1))
    assert u.stride() == (4, 1, 1)
    u[0, 1, 0] = 100.0  # the window's element is x's (it was a copy)
    assert x[0, 1].item() == 100.0
    t = tessel.arange(5.0, requires_grad=True)
    t.unfold(0, 3, 1).sum().backward()  # overlapping windows accumulate
    assert t.grad.tolist() == [1.0, 2.0, 3.0, 2.0, 1.0]
    assert tessel.tensor(3.0).unfold(0, 1, 1).shape == (1,)
    for args, msg in (((1, -1, 1), "size is -1 but must be >= 0"), ((1, 2, 0), "step is 0 but must be > 0"),
                      ((1, 5, 1), "maximum size for tensor at dimension 1 is 4 but size is 5")):
        with pytest.raises(RuntimeError, match=msg):
            x.unfold(*args)


def test_ravel_is_contiguous_and_clone_takes_memory_format():
    x = tessel.arange(12.0).reshape(3, 4)[:, ::2]
    r = x.ravel()
    r[0] = -1.0  # a copy for a non-contiguous input (a strided view wrote through)
    assert x[0, 0].item() == 0.0 and r.is_contiguous()
    c = tessel.arange(6.0)
    assert c.ravel().data_ptr() == c.data_ptr()  # a view where the input is contiguous
    y = tessel.ones(2, 3, 4, 5)
    assert y.clone(memory_format=tessel.channels_last).stride() == (60, 1, 15, 3)
    nhwc = y.contiguous(memory_format=tessel.channels_last)
    assert nhwc.clone().stride() == (60, 1, 15, 3)  # preserve_format: the layout kept, as torch's
    assert nhwc.clone(memory_format=tessel.contiguous_format).stride() == (60, 20, 5, 1)
    assert not tessel.ones(3).is_contiguous(memory_format=tessel.channels_last)  # (it raised)


@pytest.mark.parametrize("call,msg", [
    (lambda x: tessel.repeat_interleave(tessel.tensor([1.0, 2, 3]), tessel.tensor([-1, 1, 1])),
     "repeats can not be negative"),
    (lambda x: x.repeat(-1, 1), r"Trying to create tensor with negative dimension -2: \[-2, 3\]"),
    (lambda x: tessel.zeros(1, 2, 1).squeeze((0, 0)), "dim 0 appears multiple times in the list of dims"),
    (lambda x: tessel.roll(x, (1, 1), 0), "shifts and dimensions must align. shifts: 2, dims:1"),
    (lambda x: tessel.rot90(tessel.ones(3)), "expected total dims >= 2, but got total dims = 1"),
    (lambda x: tessel.rot90(x, 1, (0, 0)), "expected rotation dims to be different, but got dim0 = 0 and dim1 = 0"),
    (lambda x: tessel.tensor_split(x, 0), "number of sections must be larger than 0, got 0"),
], ids=["repeat_interleave", "repeat", "squeeze", "roll", "rot90_1d", "rot90_same", "tensor_split"])
def test_bad_shape_arguments_raise_torchs_errors(call, msg):
    with pytest.raises(RuntimeError, match=msg):  # (each returned a result)
        call(tessel.arange(6.0).reshape(2, 3))


def test_stacking_helpers_promote_and_torch_t_and_size_addition():
    f32, f64 = tessel.ones(2), tessel.ones(2, dtype=tessel.float64)
    for stack in (tessel.hstack, tessel.vstack, tessel.dstack, tessel.column_stack, tessel.row_stack):
        assert stack([f32, f64]).dtype == tessel.float64  # (they raised: cat of two dtypes)
    assert tessel.vstack([tessel.ones(2, dtype=tessel.int64), f32]).dtype == tessel.float32
    assert tessel.t(tessel.ones(2, 3)).shape == (3, 2) and tessel.t(tessel.ones(3)).shape == (3,)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions, but self is 3D"):
        tessel.t(tessel.ones(1, 2, 3))
    assert tessel.concat([tessel.ones(2, 2), tessel.zeros(0)]).shape == (2, 2)  # the legacy empty tensor, as cat
    assert tessel.repeat_interleave(tessel.tensor([1, 2, 0, 3])).tolist() == [0, 1, 1, 3, 3, 3]  # counts alone
    assert tessel.repeat_interleave(tessel.tensor([1.0, 2.0]), tessel.tensor([1, 2]), dim=0,
                                    output_size=3).tolist() == [1.0, 2.0, 2.0]
    s = tessel.tensor(2.0)  # torch 2.15: a 0-d tensor is its own transpose / adjoint; movedim moves nothing
    assert [getattr(s, n).item() for n in ("mT", "mH", "H")] == [2.0] * 3 and s.adjoint().shape == ()
    assert tessel.movedim(s, 0, 0).shape == () and tessel.movedim(s, -1, 0).item() == 2.0
    size = tessel.Size([2, 3])
    assert isinstance((1,) + size, tessel.Size) and (1,) + size == (1, 2, 3)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
