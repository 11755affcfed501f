"""Complex tensors against torch 2.15, from the forty-first session's read-only sweep of complex code (rotary
embeddings, FFT-based losses and spectral layers, signal processing): Module.half() / float() keeping complex
buffers, abs() and its gradient at zero, real tensors with Python complex numbers, the float-class tests, the
factories, complex tensors as Tensors, indexing, numeric range, and the operations that were missing. Each expected
value below is what torch 2.15 printed for the same call (pasted from its output), never tessel's own.
"""
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn

C64 = tessel.complex64


def close(got, want, rtol=2e-6, atol=1e-7):
    got = got.tolist() if hasattr(got, "tolist") else got
    np.testing.assert_allclose(np.asarray(got, dtype=np.complex128), np.asarray(want, dtype=np.complex128),
                               rtol=rtol, atol=atol, equal_nan=True)


def raises(kind, fragment, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert fragment in str(info.value), str(info.value)
    return info.value


# ---- Module.half() / float() / double() / bfloat16() ------------------------------------------------------

class _Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("freqs_cis", tessel.polar(tessel.ones(2, 2), tessel.tensor([[0.5, 1.0], [1.5, 2.0]])),
                             persistent=False)
        self.register_buffer("scale", tessel.ones(2))


_FREQS_CIS = [[0.8775825500488281 + 0.4794255495071411j, 0.5403022766113281 + 0.8414709568023682j],
              [0.07073719799518585 + 0.9974949955940247j, -0.416146844625473 + 0.9092974066734314j]]  # torch's


def test_module_half_and_float_keep_complex_buffers_complex():
    # torch casts only the tensors whose is_floating_point() is true: a rotary table stays complex64 (it became
    # real, silently off by up to 2.0 in RoPE's output, with the "discards the imaginary part" warning)
    for name, real in (("half", tessel.float16), ("float", tessel.float32), ("double", tessel.float64),
                       ("bfloat16", tessel.bfloat16)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m = getattr(_Rotary(), name)()
        assert m.freqs_cis.dtype == C64 and m.scale.dtype == real, name
        close(m.freqs_cis, _FREQS_CIS, rtol=0, atol=0)
    m = _Rotary().to(tessel.float64)  # Module.to(dtype) does cast them, to their real part (torch's)
    assert m.freqs_cis.dtype == tessel.float64
    close(m.freqs_cis, [[0.8775825500488281, 0.5403022766113281], [0.07073719799518585, -0.416146844625473]], rtol=0,
          atol=0)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
