"""What torch does on a machine without CUDA, which scripts written for GPUs rely on: torch.cuda.amp's GradScaler
and autocast (deprecated aliases) and torch.amp's with device "cuda" warn and do nothing (a GradScaler passes
values through; a disabled CUDA autocast leaves an enclosing CPU region alone); and torch functions checked
against torch 2.15's outputs: where with two Python numbers, isin, histc."""
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def caught(fn):
    """fn()'s result and the (category, message) of each warning it raised."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    return out, [(w.category, str(w.message)) for w in seen]


def test_cuda_amp_warns_and_passes_through_as_torch_without_cuda():
    scaler, seen = caught(lambda: tessel.cuda.amp.GradScaler(enabled=True))
    assert seen == [(FutureWarning, "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                                    "`torch.amp.GradScaler('cuda', args...)` instead."),
                    (UserWarning, "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")]
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    loss = tessel.tensor(3.0)
    assert scaler.scale(loss) is loss  # torch's disabled scaler returns its argument
    disabled, seen = caught(lambda: tessel.cuda.amp.GradScaler(enabled=False))
    assert not disabled.is_enabled() and [c for c, _ in seen] == [FutureWarning]  # no CUDA warning when disabled
    disabled, seen = caught(lambda: tessel.amp.GradScaler("cuda", enabled=False))
    assert not disabled.is_enabled() and seen == []
    model = nn.Linear(2, 2)
    region, seen = caught(lambda: tessel.autocast(device_type="cuda", dtype=tessel.float16))
    assert seen == [(UserWarning, "CUDA is not available or torch_xla is imported. Disabling autocast.")]
    with region:
        assert not tessel.is_autocast_enabled() and model(tessel.randn(1, 2)).dtype == tessel.float32
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        inner, seen = caught(tessel.cuda.amp.autocast)
        assert [c for c, _ in seen] == [FutureWarning, UserWarning]
        with inner:  # the enclosing CPU region stays on
            assert tessel.is_autocast_enabled("cpu") and model(tessel.randn(1, 2)).dtype == tessel.bfloat16
        assert tessel.is_autocast_enabled("cpu")
    assert not tessel.is_autocast_enabled("cpu")


def test_where_with_two_python_numbers_takes_torchs_result_type():
    cond = tessel.tensor([True, False, True])
    out = tessel.where(cond, 1.0, 0.0)
    assert out.dtype == tessel.float32 and out.tolist() == [1.0, 0.0, 1.0]
    assert tessel.where(cond, 2, -1).dtype == tessel.int64 and tessel.where(cond, 2, -1).tolist() == [2, -1, 2]
    assert tessel.where(cond, 1, 0.5).dtype == tessel.float32
    assert tessel.where(cond, False, True).dtype == tessel.bool


def test_isin_and_histc_as_torch():
    assert tessel.isin(tessel.tensor([1, 2, 3]), tessel.tensor([2])).tolist() == [False, True, False]
    assert tessel.isin(tessel.tensor([1, 2]), 2, invert=True).tolist() == [True, False]
    x = tessel.tensor([1.0, 2.0, 1.0, 2.5, 4.0, 0.0])
    assert tessel.histc(x, bins=4, min=0, max=3).tolist() == [1.0, 2.0, 1.0, 1.0]  # 4.0 is outside; 3 closes
    assert x.histc(bins=3).tolist() == [3.0, 2.0, 1.0]  # min == max: the data's range [0, 4]
    assert tessel.histc(tessel.tensor([2.0]), bins=2).tolist() == [0.0, 1.0]  # one value: [1, 3]
    counts = tessel.histc(tessel.tensor(np.linspace(-1, 1, 101)), bins=10, min=-1, max=1)
    np.testing.assert_array_equal(counts.numpy(), np.histogram(np.linspace(-1, 1, 101), bins=10, range=(-1, 1))[0])
    with pytest.raises(NotImplementedError, match="\"histogram_cpu\" not implemented for 'Long'"):  # torch 2.15's
        tessel.histc(tessel.tensor([1, 2]))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
