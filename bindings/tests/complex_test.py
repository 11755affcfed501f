"""Complex tensors (tessel/_complex.py) and pow with a tensor exponent, from Python: values against numpy's
complex128 and float64 arithmetic, gradients against the formulas written out and central differences,
memory sharing of view_as_complex / view_as_real, complex module buffers (state dict, load, named_buffers,
Module.to leaving them alone, deepcopy), torch's result types for pow, and the errors. Also the global
settings ported scripts make (set_float32_matmul_precision, use_deterministic_algorithms, torch.backends)."""
import copy
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def _c(z):
    """A ComplexTensor holding numpy's complex array z (complex64)."""
    parts = np.stack([z.real, z.imag], -1).astype(np.float32)
    return tessel.view_as_complex(tessel.tensor(parts))


def _rand_complex(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def test_view_as_complex_and_view_as_real_share_memory():
    x = tessel.arange(12).float().reshape(2, 3, 2)
    z = tessel.view_as_complex(x)
    assert z.dtype == tessel.complex64 and z.shape == (2, 3) and z.is_complex() and not x.is_complex()
    np.testing.assert_array_equal(z.numpy(), x.numpy()[..., 0] + 1j * x.numpy()[..., 1])
    r = tessel.view_as_real(z)
    r[1, 2, 1] = 100.0  # a write through the real view reaches x: no copy was made
    assert x[1, 2, 1].item() == 100.0 and z.imag[1, 2].item() == 100.0
    assert tessel.view_as_complex(x.double()).dtype == tessel.complex128


def test_arithmetic_matches_numpy_complex():
    rng = np.random.default_rng(0)
    a, b = _rand_complex(rng, 2, 3, 4), _rand_complex(rng, 3, 1)  # broadcasting
    r = rng.standard_normal((3, 4)).astype(np.float32)
    ta, tb, tr = _c(a), _c(b), tessel.tensor(r)
    cases = {
        "a*b": (ta * tb, a * b), "a+b": (ta + tb, a + b), "a-b": (ta - tb, a - b), "a/b": (ta / tb, a / b),
        "a*r": (ta * tr, a * r), "r*a": (tr * ta, r * a), "a+r": (ta + tr, a + r), "r+a": (tr + ta, r + a), "r-a": (tr - ta, r - a),
        "r/a": (tr / ta, r / a), "3/a": (3.0 / ta, 3 / a),
        "2.5*a": (2.5 * ta, 2.5 * a), "a*(1+2j)": (ta * (1 + 2j), a * (1 + 2j)), "a/2": (ta / 2.0, a / 2),
        "a+(1-1j)": (ta + (1 - 1j), a + (1 - 1j)), "-a": (-ta, -a), "conj": (ta.conj(), np.conj(a)),
        "1-a": (1.0 - ta, 1 - a),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=2e-6, err_msg=name)
    np.testing.assert_allclose(ta.abs().numpy(), np.abs(a), rtol=2e-6)
    np.testing.assert_allclose(ta.angle().numpy(), np.angle(a), rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(tessel.real(ta).numpy(), a.real)
    np.testing.assert_array_equal(tessel.imag(ta).numpy(), a.imag)


def test_shape_ops_follow_the_complex_dimensions():
    rng = np.random.default_rng(1)
    a = _rand_complex(rng, 4, 3, 2)
    t = _c(a)
    cases = {
        "[1:3]": (t[1:3], a[1:3]), "[..., 1]": (t[..., 1], a[..., 1]), "[:, None, 0]": (t[:, None, 0], a[:, None, 0]),
        "[2]": (t[2], a[2]), "view": (t.view(4, 6), a.reshape(4, 6)), "reshape": (t.reshape(-1, 2), a.reshape(-1, 2)),
        "unsqueeze(-1)": (t.unsqueeze(-1), a[..., None]), "flatten(1)": (t.flatten(1), a.reshape(4, 6)),
        "transpose(0,-1)": (t.transpose(0, -1), a.transpose(2, 1, 0)),
        "permute": (t.permute(2, 0, 1), a.transpose(2, 0, 1)),
        "expand": (t[:, :1].expand(4, 5, 2), np.broadcast_to(a[:, :1], (4, 5, 2))),
        "squeeze": (t[:, :1].squeeze(1), a[:, 0]),
    }
    for name, (got, want) in cases.items():
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got.contiguous().numpy(), want, err_msg=name)
    assert t.size(-1) == 2 and t.ndim == 3 and t.numel() == 24 and len(t) == 4


def test_polar_and_complex_build_the_parts_and_differentiate():
    rng = np.random.default_rng(2)
    mag, ang = rng.random((3, 4)) + 0.5, rng.standard_normal((3, 4))
    m = tessel.tensor(mag, dtype=tessel.float64, requires_grad=True)
    p = tessel.tensor(ang, dtype=tessel.float64, requires_grad=True)
    z = tessel.polar(m, p)
    assert z.dtype == tessel.complex128
    np.testing.assert_allclose(z.numpy(), mag * np.exp(1j * ang), rtol=1e-12)
    g = rng.standard_normal((3, 4, 2))
    (tessel.view_as_real(z) * tessel.tensor(g)).sum().backward()  # d/d|z| and d/dangle of <g, (re, im)>
    np.testing.assert_allclose(m.grad.numpy(), g[..., 0] * np.cos(ang) + g[..., 1] * np.sin(ang), rtol=1e-10)
    np.testing.assert_allclose(p.grad.numpy(), mag * (-g[..., 0] * np.sin(ang) + g[..., 1] * np.cos(ang)),
                               rtol=1e-10)
    w = tessel.complex(tessel.tensor(mag), tessel.tensor(ang))
    np.testing.assert_allclose(w.numpy(), (mag + 1j * ang).astype(np.complex64), rtol=1e-7)


def test_rotary_embedding_equals_the_rotation_in_double_with_its_gradient():
    """Meta Llama's apply_rotary_emb (view_as_complex, a product with polar(1, p·theta^(-2i/d)),
    view_as_real) against the rotation of each pair (x_2i, x_2i+1) by p·theta^(-2i/d) in float64; its
    gradient is the inverse rotation of the incoming gradient."""
    rng = np.random.default_rng(3)
    b, t, h, d = 2, 5, 3, 8
    x = rng.standard_normal((b, t, h, d)).astype(np.float32)
    gout = rng.standard_normal((b, t, h, d))
    freqs = 1.0 / (10000.0 ** (tessel.arange(0, d, 2).float() / d))
    cis = tessel.polar(tessel.ones(t, d // 2), tessel.outer(tessel.arange(t).float(), freqs))
    xt = tessel.tensor(x, requires_grad=True)
    xc = tessel.view_as_complex(xt.float().reshape(b, t, h, -1, 2))
    out = tessel.view_as_real(xc * cis.view(1, t, 1, d // 2)).flatten(3)
    (out * tessel.tensor(gout, dtype=tessel.float32)).sum().backward()
    angle = np.arange(t)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)  # [t, d/2]
    c, s = np.cos(angle)[None, :, None, :], np.sin(angle)[None, :, None, :]
    x0, x1 = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    want = np.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(b, t, h, d)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    g0, g1 = gout[..., 0::2], gout[..., 1::2]
    want_grad = np.stack([g0 * c + g1 * s, -g0 * s + g1 * c], -1).reshape(b, t, h, d)
    np.testing.assert_allclose(xt.grad.numpy(), want_grad, rtol=1e-5, atol=1e-5)


class _Rope(nn.Module):
    def __init__(self, persistent):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("freqs_cis", tessel.polar(tessel.ones(4, 2), tessel.arange(8).float().view(4, 2)),
                             persistent=persistent)


def test_complex_module_buffers():
    m = _Rope(persistent=True)
    assert isinstance(m.freqs_cis, tessel.ComplexTensor)
    names = [n for n, _ in m.named_buffers()]
    assert names == ["freqs_cis"]
    sd = m.state_dict()
    # torch 2.15's order: a module's own buffers before its children's entries
    assert list(sd) == ["freqs_cis", "lin.weight", "lin.bias"] and sd["freqs_cis"].dtype == tessel.complex64
    other = _Rope(persistent=True)
    with tessel.no_grad():
        tessel.view_as_real(other.freqs_cis).zero_()
    other.load_state_dict(sd)
    np.testing.assert_array_equal(other.freqs_cis.numpy(), m.freqs_cis.numpy())
    with pytest.raises(ValueError, match='Missing key\\(s\\) in state_dict: "freqs_cis"'):
        other.load_state_dict({k: v for k, v in sd.items() if k != "freqs_cis"})
    with pytest.raises(ValueError, match="size mismatch for freqs_cis"):
        other.load_state_dict(dict(sd, freqs_cis=tessel.zeros(3, 2, dtype=tessel.complex64)))
    assert "freqs_cis" not in _Rope(persistent=False).state_dict()
    # Assignment replaces the buffer (torchtitan's init_weights recomputes it this way).
    m.freqs_cis = tessel.zeros(4, 2, dtype=tessel.complex64)
    assert np.all(m.freqs_cis.numpy() == 0) and [n for n, _ in m.named_buffers()] == ["freqs_cis"]
    with pytest.raises(TypeError, match="complex buffer 'freqs_cis'"):
        m.freqs_cis = tessel.zeros(4, 2)
    # Module.to(a floating dtype) casts a complex buffer to a real one, its real part (torch 2.15's rule).
    m.freqs_cis = tessel.polar(tessel.ones(4, 2), tessel.arange(8).float().view(4, 2))
    m.to(tessel.float64)
    assert m.lin.weight.dtype == tessel.float64 and m.freqs_cis.dtype == tessel.float64
    assert list(m.state_dict()) == ["freqs_cis", "lin.weight", "lin.bias"]
    np.testing.assert_allclose(m.freqs_cis[0].numpy(), [1.0, 0.5403], atol=1e-4)  # torch's [1.0000, 0.5403]
    twin = copy.deepcopy(_Rope(persistent=True))
    np.testing.assert_array_equal(twin.freqs_cis.numpy(), _Rope(persistent=True).freqs_cis.numpy())
    assert twin.freqs_cis._r is not _Rope(persistent=True).freqs_cis._r


def test_complex_factories_and_errors():
    z = tessel.zeros(2, 3, dtype=tessel.cfloat)
    assert z.dtype == tessel.complex64 and z.shape == (2, 3) and np.all(z.numpy() == 0)
    np.testing.assert_array_equal(tessel.ones(2, dtype=tessel.complex128).numpy(), np.ones(2, np.complex128))
    np.testing.assert_array_equal(tessel.full((2,), 1 + 2j, dtype=tessel.complex64).numpy(), [1 + 2j, 1 + 2j])
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        tessel.view_as_complex(tessel.zeros(3, 3))
    with pytest.raises(RuntimeError, match="last dimension with stride 1"):
        tessel.view_as_complex(tessel.zeros(2, 3).t())
    with pytest.raises(NotImplementedError, match="only supported for half, float and double"):  # torch's types
        tessel.view_as_complex(tessel.zeros(3, 2, dtype=tessel.bfloat16))
    with pytest.raises(TypeError, match="only supported for complex tensors"):
        tessel.view_as_real(tessel.zeros(3, 2))
    with pytest.raises(AttributeError, match="no attribute 'softmax'.*rotary embeddings"):
        z.softmax(-1)
    assert z.to(tessel.bool).tolist() == [[False] * 3] * 2  # torch's: where nonzero


def _np_pow(a, b):
    return np.power(np.asarray(a, np.float64), np.asarray(b, np.float64))


def test_pow_with_a_tensor_exponent_values_and_types():
    theta = 10000 ** (tessel.arange(0, 8, 2).float() / 8)  # the rotary tables' form
    assert theta.dtype == tessel.float32
    np.testing.assert_allclose(theta.numpy(), [1, 10, 100, 1000], rtol=1e-6)
    cases = [  # (expression, result dtype) as torch 2.15 gives them
        (lambda: 2.0 ** tessel.arange(0, 4), tessel.float32),
        (lambda: tessel.pow(2, tessel.tensor([1, 2, 3])), tessel.int64),
        (lambda: tessel.tensor([2, 3]) ** tessel.tensor([3, 2]), tessel.int64),
        (lambda: tessel.tensor([2.0, 3.0], dtype=tessel.float64) ** tessel.tensor([3.0, 2.0]), tessel.float64),
        (lambda: tessel.tensor([2.0, 3.0], dtype=tessel.bfloat16) ** tessel.tensor([3, 2]), tessel.bfloat16),
        (lambda: tessel.tensor([2.0, 3.0], dtype=tessel.bfloat16) ** tessel.tensor([3.0, 2.0], dtype=tessel.float16),
         tessel.float32),
    ]
    for make, dtype in cases:
        assert make().dtype == dtype
    np.testing.assert_array_equal(tessel.tensor([2, 3]).pow(tessel.tensor([3, 2])).numpy(), [8, 9])
    np.testing.assert_array_equal((tessel.tensor([-2.0, 0.0]) ** tessel.tensor([3.0, 0.5])).numpy(), [-8.0, 0.0])
    # a tensor of negative integer exponents computes (torch 2.15: tensor([2]) ** tensor([-1]) is tensor([0]));
    # only a negative Python int exponent raises
    assert (tessel.tensor([2]) ** tessel.tensor([-1])).tolist() == [0]
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        tessel.tensor([2]) ** -1
    x = tessel.tensor([1.5, 2.0])
    np.testing.assert_allclose((x ** 2).numpy(), [2.25, 4.0])  # the C++ op for a number exponent stays
    np.testing.assert_allclose(tessel.pow(x, 0.5).numpy(), np.sqrt([1.5, 2.0]), rtol=1e-6)


def test_pow_with_a_tensor_exponent_differentiates_in_both_operands():
    rng = np.random.default_rng(4)
    a = rng.random((2, 3)) + 0.2
    b = rng.standard_normal(3)  # broadcast over a's rows: its gradient sums them
    ta = tessel.tensor(a, dtype=tessel.float64, requires_grad=True)
    tb = tessel.tensor(b, dtype=tessel.float64, requires_grad=True)
    w = rng.standard_normal((2, 3))
    (ta ** tb * tessel.tensor(w, dtype=tessel.float64)).sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), w * b * a ** (b - 1), rtol=1e-12)
    np.testing.assert_allclose(tb.grad.numpy(), (w * a ** b * np.log(a)).sum(0), rtol=1e-12)
    eps = 1e-6  # and by central differences of the value itself
    f = lambda bb: (_np_pow(a, bb) * w).sum()  # noqa: E731
    fd = [(f(b + eps * e) - f(b - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(tb.grad.numpy(), fd, rtol=1e-6)
    # torch: the exponent's gradient is 0 where the base is 0 and the exponent >= 0 (not 0 * log 0 = nan).
    z = tessel.tensor([0.0, 2.0], dtype=tessel.float64)
    e = tessel.tensor([2.0, 2.0], dtype=tessel.float64, requires_grad=True)
    (z ** e).sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), [0.0, 4.0 * np.log(2.0)], rtol=1e-12)
    s = tessel.tensor([0.5, 1.5], requires_grad=True)  # number ** tensor
    (3.0 ** s).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), 3.0 ** np.array([0.5, 1.5]) * np.log(3.0), rtol=1e-6)


def test_stacking_and_global_settings():
    a, b = tessel.tensor([1.0, 2.0]), tessel.tensor([3.0])
    np.testing.assert_array_equal(tessel.hstack([a, b]).numpy(), [1, 2, 3])
    m = tessel.zeros(2, 1)
    np.testing.assert_array_equal(tessel.hstack([m, tessel.ones(2, 2)]).numpy(), [[0, 1, 1], [0, 1, 1]])
    np.testing.assert_array_equal(tessel.vstack([a, a]).numpy(), [[1, 2], [1, 2]])
    tessel.set_float32_matmul_precision("high")
    assert tessel.get_float32_matmul_precision() == "high"
    tessel.set_float32_matmul_precision("highest")
    with pytest.warns(UserWarning, match="fast is not one of 'highest', 'high', or 'medium'"):  # torch: no effect
        tessel.set_float32_matmul_precision("fast")
    assert tessel.get_float32_matmul_precision() == "highest"
    tessel.use_deterministic_algorithms(True, warn_only=True)
    assert tessel.are_deterministic_algorithms_enabled() and tessel.is_deterministic_algorithms_warn_only_enabled()
    tessel.use_deterministic_algorithms(False)
    assert tessel.get_default_dtype() == tessel.float32 and tessel.is_floating_point(a)
    # torch.backends: the flags scripts set read back; device probes say what this build has.
    tessel.backends.cudnn.benchmark = True
    tessel.backends.cuda.matmul.allow_tf32 = True  # torch: the float32 matmul precision becomes "high"
    assert tessel.backends.cudnn.benchmark and tessel.backends.cuda.matmul.allow_tf32
    assert tessel.get_float32_matmul_precision() == "high"
    tessel.backends.cuda.matmul.allow_tf32 = False
    tessel.backends.cudnn.benchmark = False
    assert not tessel.backends.mps.is_available() and not tessel.backends.cudnn.is_available()
    # the CPU's vector ISA, read from /proc/cpuinfo another way: AVX512 with AVX-512 F/VL/DQ/BW, else AVX2
    flags = set(next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split(":")[1].split())
    wide = {"avx512f", "avx512vl", "avx512dq", "avx512bw"} <= flags
    assert tessel.backends.cpu.get_cpu_capability() == ("AVX512" if wide else "AVX2")
    tessel.backends.cuda.enable_flash_sdp(False)
    assert not tessel.backends.cuda.flash_sdp_enabled() and tessel.backends.cuda.math_sdp_enabled()
    tessel.backends.cuda.enable_flash_sdp(True)
    from tessel.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401 (torch.nn imports it as well)
    assert int(SDPBackend.MATH) == 0 and SDPBackend.MATH != 0  # torch's is a pybind11 enum, not an IntEnum
    tessel.cuda.empty_cache()  # a no-op without CUDA, as torch's; so are the memory counters (0), the device
    assert tessel.cuda.max_memory_allocated() == 0  # queries name the guard to add
    with pytest.raises(RuntimeError, match="current_device.*torch.cuda.is_available"):
        tessel.cuda.current_device()
    x = tessel.tensor([-1.0, 2.0])
    y = tessel.nn.functional.silu(x, inplace=True)
    np.testing.assert_allclose(x.numpy(), [-1.0 / (1 + np.e), 2.0 / (1 + np.exp(-2.0))], rtol=1e-6)
    assert y is x or np.array_equal(y.numpy(), x.numpy())
    with pytest.raises(TypeError, match="only floating-point types are supported"):  # (default_dtype_test.py)
        tessel.set_default_dtype(tessel.int64)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
