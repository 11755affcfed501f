"""torch's CPU autocast lists for the functions tessel composes in Python, and GradScaler's checks, found by running
the same code under torch 2.15 and tessel: a float32-list op casts bfloat16 arguments up (its result equals the op
on float32 copies, computed outside the region); an op on neither list keeps its inputs' dtypes (its result inside
the region equals the result outside it, bit for bit); the scale is a float32 value that never grows past float32's
largest finite number. Reduced-precision arithmetic with a Python number follows torch's CPU kernels too (expected
values: float32 numpy rounded to bfloat16 here)."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F


def _bf16(*shape, seed=0):
    g = tessel.Generator().manual_seed(seed)
    return tessel.randn(*shape, generator=g).to(tessel.bfloat16)


def _same(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


_UNPOOL_AT = tessel.tensor([[[[0, 3], [8, 11]]]])
FLOAT32_LIST = [
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t), lambda: (_bf16(4, 5), tessel.tensor([0, 4, 2, 1]))),
    ("poisson_nll_loss", lambda x, y: F.poisson_nll_loss(x, y), lambda: (_bf16(3, 4), _bf16(3, 4, seed=1).abs())),
    ("multi_margin_loss", lambda x, t: F.multi_margin_loss(x, t), lambda: (_bf16(3, 4), tessel.tensor([0, 3, 1]))),
    ("cdist", lambda a, b: tessel.cdist(a, b), lambda: (_bf16(3, 4), _bf16(5, 4, seed=1))),
    ("trace", lambda a: tessel.trace(a), lambda: (_bf16(4, 4),)),
    ("quantile", lambda a: tessel.quantile(a, 0.3), lambda: (_bf16(9),)),
    ("max_pool3d", lambda a: F.max_pool3d(a, 2), lambda: (_bf16(1, 1, 4, 4, 4),)),
    ("adaptive_avg_pool3d", lambda a: F.adaptive_avg_pool3d(a, 2), lambda: (_bf16(1, 2, 4, 4, 4),)),
    ("reflect pad", lambda a: F.pad(a, (1, 1), mode="reflect"), lambda: (_bf16(1, 2, 5),)),
    ("local_response_norm", lambda a: F.local_response_norm(a, 2), lambda: (_bf16(1, 4, 3, 3),)),
    ("fft.rfft", lambda a: tessel.fft.rfft(a).abs(), lambda: (_bf16(8),)),
    ("linalg.inv", lambda a: tessel.linalg.inv(a), lambda: (_spd(),)),
    ("inverse", lambda a: tessel.inverse(a), lambda: (_spd(),)),
    ("linalg.solve", lambda a, b: tessel.linalg.solve(a, b), lambda: (_spd(), _bf16(3, 2))),
    ("linalg.cholesky", lambda a: tessel.linalg.cholesky(a), lambda: (_spd(),)),
    ("linalg.svdvals", lambda a: tessel.linalg.svdvals(a), lambda: (_spd(),)),
    ("linalg.eigvalsh", lambda a: tessel.linalg.eigvalsh(a), lambda: (_spd(),)),
    ("triangular_solve", lambda b, a: tessel.triangular_solve(b, a)[0], lambda: (_bf16(3, 2), _spd())),
    ("max_unpool2d", lambda a: F.max_unpool2d(a, _UNPOOL_AT, 2), lambda: (_bf16(1, 1, 2, 2),)),
]


def _spd():
    return (tessel.eye(3) * 3 + 0.25).to(tessel.bfloat16)


@pytest.mark.parametrize("name,fn,make", FLOAT32_LIST, ids=[c[0] for c in FLOAT32_LIST])
def test_float32_list_ops_cast_bfloat16_arguments_up(name, fn, make):
    args = make()
    want = fn(*[a.float() if a.dtype == tessel.bfloat16 else a for a in args])
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        got = fn(*args)
    assert want.dtype == tessel.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    assert got.dtype == tessel.float32


def test_float32_list_cast_is_recorded_by_autograd():
    x = _bf16(4, 5).requires_grad_()
    t = tessel.tensor([0, 4, 2, 1])
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        F.cross_entropy(x, t).backward()
    p = tessel.softmax(x.detach().double(), -1).numpy()
    p[np.arange(4), t.numpy()] -= 1
    assert x.grad.dtype == tessel.bfloat16
    np.testing.assert_allclose(x.grad.double().numpy(), p / 4, rtol=1e-2, atol=1e-3)


NEITHER_LIST = [
    ("interpolate", lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), (1, 2, 3, 3)),
    ("adaptive_avg_pool2d", lambda a: F.adaptive_avg_pool2d(a, 2), (1, 2, 5, 5)),
    ("adaptive_avg_pool1d", lambda a: F.adaptive_avg_pool1d(a, 2), (1, 2, 5)),
    ("dot", lambda a: tessel.dot(a[0], a[1]), (2, 7)),
    ("mv", lambda a: tessel.mv(a, a[0]), (3, 3)),
    ("addmv", lambda a: tessel.addmv(a[0], a, a[1]), (3, 3)),
    ("embedding_bag", lambda w: F.embedding_bag(tessel.tensor([0, 2, 1, 2]), w, tessel.tensor([0, 2])), (3, 4)),
    ("inner", lambda a: tessel.inner(a, a), (2, 5)),
]


@pytest.mark.parametrize("name,fn,shape", NEITHER_LIST, ids=[c[0] for c in NEITHER_LIST])
def test_ops_on_neither_list_keep_float32_inputs_in_float32(name, fn, shape):
    x = tessel.randn(*shape, generator=tessel.Generator().manual_seed(3))
    want = fn(x)
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        got = fn(x)
    _same(got, want)  # float32, not products rounded through bfloat16


LOWER_LIST = [
    ("conv2d with bias", lambda x, w, b: F.conv2d(x, w, b, padding=1), [(1, 2, 4, 4), (3, 2, 3, 3), (3,)]),
    ("conv_transpose1d with bias", lambda x, w, b: F.conv_transpose1d(x, w, b), [(1, 2, 5), (2, 3, 2), (3,)]),
    ("prelu", lambda x, w: F.prelu(x, w), [(2, 3, 4), (3,)]),
    ("linalg.vecdot", lambda x, y: tessel.linalg.vecdot(x, y), [(3, 4), (3, 4)]),
]


@pytest.mark.parametrize("name,fn,shapes", LOWER_LIST, ids=[c[0] for c in LOWER_LIST])
@pytest.mark.parametrize("region", ["bfloat16", "float16"])
def test_lower_precision_list_ops_cast_every_argument_the_bias_too(name, fn, shapes, region):
    dtype = getattr(tessel, region)
    g = tessel.Generator().manual_seed(4)
    args = [tessel.randn(*s, generator=g) for s in shapes]
    want = fn(*[a.to(dtype) for a in args])  # the same op on arguments cast by hand, outside the region
    with tessel.autocast("cpu", dtype=dtype):
        got = fn(*args)
    _same(got, want)  # (a float32 bias left a convolution's output float32)


def test_attention_float_mask_is_cast_with_q_k_v_and_added_in_float32_outside_autocast():
    g = tessel.Generator().manual_seed(5)
    q, k, v = (tessel.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    mask = tessel.randn(4, 4, generator=g)
    bf = tessel.bfloat16
    with tessel.autocast("cpu", dtype=bf):
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    _same(got, F.scaled_dot_product_attention(q.to(bf), k.to(bf), v.to(bf), attn_mask=mask.to(bf)))
    # bfloat16 q, k, v with a float32 mask (torch's CPU kernel takes it): float32 scores, one rounding at the end
    out = F.scaled_dot_product_attention(q.to(bf), k.to(bf), v.to(bf), attn_mask=mask)
    ref = F.scaled_dot_product_attention(q.to(bf).float(), k.to(bf).float(), v.to(bf).float(), attn_mask=mask)
    _same(out, ref.to(bf))


def test_recurrent_layers_under_autocast_return_torchs_dtypes():
    # torch 2.15 on the CPU: LSTM runs as oneDNN's RNN layer (lower-precision list: all bfloat16); with proj_size
    # or a packed input it is a composition (the cell state stays float32); RNN's chain is bfloat16, GRU's float32
    tessel.manual_seed(0)
    bf, f32 = tessel.bfloat16, tessel.float32
    x = tessel.randn(5, 2, 4, requires_grad=True)
    cases = [(nn.LSTM(4, 3, num_layers=2, bidirectional=True), [bf, bf, bf]),
             (nn.LSTM(4, 3, proj_size=2), [bf, bf, f32]), (nn.GRU(4, 3), [f32, f32]), (nn.RNN(4, 3), [bf, bf])]
    for module, want in cases:
        with tessel.autocast("cpu", dtype=bf):
            out, state = module(x)
        got = [out.dtype] + ([t.dtype for t in state] if isinstance(state, tuple) else [state.dtype])
        assert got == want, (type(module).__name__, got)
        out.float().sum().backward()
        assert module.weight_ih_l0.grad.dtype == f32 and x.grad.dtype == f32
    lstm = nn.LSTM(4, 3)
    with tessel.autocast("cpu", dtype=bf):
        plain, (h, c) = lstm(x)
        packed, _ = lstm(nn.utils.rnn.pack_padded_sequence(x, [5, 3]))
    assert packed.data.dtype == f32
    want, (h32, c32) = lstm(x)  # the same products in float32: within bfloat16's rounding
    np.testing.assert_allclose(plain.float().detach().numpy(), want.detach().numpy(), atol=0.03)
    np.testing.assert_allclose(c.float().detach().numpy(), c32.detach().numpy(), atol=0.03)


def test_deprecated_cpu_autocast_spellings_warn_and_work():
    with pytest.warns(DeprecationWarning, match=r"is_autocast_cpu_enabled\(\) is deprecated"):
        assert tessel.is_autocast_cpu_enabled() is False
    with pytest.warns(DeprecationWarning, match=r"set_autocast_cpu_enabled\(enabled\) is deprecated"):
        tessel.set_autocast_cpu_enabled(True)
    try:
        assert tessel.is_autocast_enabled("cpu")
        with pytest.warns(DeprecationWarning, match="get_autocast_cpu_dtype"):
            assert tessel.get_autocast_cpu_dtype() == tessel.bfloat16
        assert (tessel.ones(2, 3) @ tessel.ones(3, 2)).dtype == tessel.bfloat16
    finally:
        tessel.set_autocast_enabled("cpu", False)
    assert (tessel.ones(2, 3) @ tessel.ones(3, 2)).dtype == tessel.float32


def test_custom_fwd_casts_inputs_and_custom_bwd_runs_in_the_forwards_state():
    seen = []

    class Scaled(tessel.autograd.Function):
        @staticmethod
        @tessel.amp.custom_fwd(device_type="cpu", cast_inputs=tessel.float32)
        def forward(ctx, x, w):
            seen.append(("fwd", x.dtype, w.dtype, tessel.is_autocast_enabled("cpu")))
            ctx.save_for_backward(x, w)
            return x @ w

        @staticmethod
        @tessel.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            seen.append(("bwd", g.dtype, tessel.is_autocast_enabled("cpu")))
            return g @ w.t(), x.t() @ g

    x = tessel.ones(2, 3, dtype=tessel.bfloat16, requires_grad=True)
    w = tessel.ones(3, 4, requires_grad=True)
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        y = Scaled.apply(x, w)
    assert y.dtype == tessel.float32  # computed with autocast off on float32 inputs
    y.sum().backward()
    assert seen == [("fwd", tessel.float32, tessel.float32, False), ("bwd", tessel.float32, False)]
    assert x.grad.dtype == tessel.bfloat16 and x.grad.float().tolist() == [[4.0] * 3] * 2
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        tessel.amp.custom_fwd(device_type=None)


def test_grad_scaler_scale_is_float32_and_never_grows_past_its_largest_finite_value():
    p = tessel.ones(2, requires_grad=True)
    opt = tessel.optim.SGD([p], lr=0.1)
    scaler = tessel.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
    for _ in range(2):
        opt.zero_grad()
        scaler.scale(p.sum()).backward()
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == 2.0 ** 127  # 2**128 is inf in float32: the growth is skipped
    np.testing.assert_allclose(p.detach().numpy(), [0.8, 0.8], rtol=1e-6)

    backoff = tessel.amp.GradScaler("cpu", init_scale=3.0, backoff_factor=0.1)
    q = tessel.ones(1, requires_grad=True)
    qopt = tessel.optim.SGD([q], lr=0.1)
    (backoff.scale(q.sum()) * float("inf")).backward()
    backoff.step(qopt)
    backoff.update()
    assert backoff.get_scale() == float(np.float32(np.float32(3.0) * np.float32(0.1)))
    assert q.item() == 1.0  # the step with inf gradients was skipped


def test_grad_scaler_refuses_what_torch_refuses():
    p = tessel.ones(2, requires_grad=True)
    opt = tessel.optim.SGD([p], lr=0.1)
    scaler = tessel.amp.GradScaler("cpu")
    with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
        scaler.scale(2.0)
    scaler.scale(p.sum()).backward()
    with pytest.raises(RuntimeError, match="Closure use is not currently supported if GradScaler is enabled"):
        scaler.step(opt, closure=lambda: None)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called since the last update\(\)"):
        scaler.step(opt)
    scaler.update()
    scaler.step(opt)  # a new iteration may step again

    h = tessel.ones(2, dtype=tessel.float16, requires_grad=True)
    hopt = tessel.optim.SGD([h], lr=0.1)
    scaler.scale(h.float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(hopt)


def _round_bf16(a):
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def test_bfloat16_arithmetic_with_a_python_number_rounds_as_torch():
    x32 = _round_bf16(np.arange(1, 201, dtype=np.float32) * np.float32(0.37))
    x = tessel.tensor(x32).to(tessel.bfloat16)
    v = np.float32(0.7)
    # t / v: divided in float32 by v at float32 precision, rounded once (v was rounded to bfloat16 first)
    np.testing.assert_array_equal((x / 0.7).float().numpy(), _round_bf16(x32 / v))
    np.testing.assert_array_equal(tessel.div(x, 0.7).float().numpy(), _round_bf16(x32 / v))
    # v / t: torch's t.reciprocal() * v
    np.testing.assert_array_equal((0.7 / x).float().numpy(), _round_bf16(_round_bf16(np.float32(1) / x32) * v))
    # addcmul: one rounding of the float32 chain (three roundings gave 7072 for 100 + 0.7 * 100 * 100)
    want = _round_bf16(x32 + v * x32 * x32)
    np.testing.assert_array_equal(tessel.addcmul(x, x, x, value=0.7).float().numpy(), want)
    # pow: the exponent in the tensor's dtype (0.69921875)
    assert (tessel.tensor([100.0, 1000.0]).to(tessel.bfloat16) ** 0.7).float().tolist() == [25.0, 125.0]


def test_float32_number_over_tensor_is_reciprocal_times_number():
    x = np.arange(1, 2001, dtype=np.float32) * np.float32(0.37)
    got = (0.7 / tessel.tensor(x)).numpy()
    np.testing.assert_array_equal(got, (np.float32(1) / x) * np.float32(0.7))
    assert (got != np.float32(0.7) / x).sum() > 100  # (the two formulas differ in the last bit this often)


def test_index_copy_promotes_to_the_widest_float_under_autocast():
    """torch's CPU promote list has index_copy beside cat and stack: a bfloat16 source into a float32 tensor gives
    float32 in a region (tessel raised "source and destination dtypes match")."""
    x = tessel.zeros(3, 4)
    src = tessel.ones(2, 4, dtype=tessel.bfloat16) * 1.5
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        y = x.index_copy(0, tessel.tensor([0, 2]), src)
    assert y.dtype == tessel.float32
    assert y.tolist() == [[1.5] * 4, [0.0] * 4, [1.5] * 4]


def test_grad_scaler_scales_a_0d_half_loss_in_float32_and_refuses_a_step_without_gradients():
    """torch multiplies by a 0-d float32 scale: a 0-d float16 loss of 3 times 2^15 is 98304 in float32 (tessel's
    stayed float16: inf); a step with no gradient anywhere is torch's AssertionError (it stepped); unscale_ after
    step names it."""
    scaler = tessel.amp.GradScaler("cpu", init_scale=2.0 ** 15)
    scaled = scaler.scale(tessel.tensor(3.0, dtype=tessel.float16))
    assert scaled.dtype == tessel.float32 and scaled.item() == 98304.0
    assert scaler.scale(tessel.ones(2, dtype=tessel.bfloat16)).dtype == tessel.bfloat16  # a loss with dims keeps it
    w = tessel.nn.Parameter(tessel.ones(2))
    opt = tessel.optim.SGD([w], lr=0.1)
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        scaler.step(opt)
    w2 = tessel.nn.Parameter(tessel.ones(2))
    opt2 = tessel.optim.SGD([w2], lr=0.1)
    w2.grad = tessel.full((2,), 2.0 ** 15)
    scaler.step(opt2)  # unscaled by 2^15 first
    assert w2.tolist() == [np.float32(0.9)] * 2
    with pytest.raises(RuntimeError, match=r"unscale_\(\) is being called after step\(\)"):
        scaler.unscale_(opt2)


def test_index_copy_of_bfloat16_into_float16_promotes_to_float32_under_autocast():
    x = tessel.zeros(2, 2, dtype=tessel.float16)
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        y = x.index_copy(0, tessel.tensor([1]), tessel.ones(1, 2, dtype=tessel.bfloat16))
    assert y.dtype == tessel.float32 and y.tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_cuda_amp_custom_fwd_and_bwd_decorate_custom_functions_with_torchs_deprecation_warning():
    """torch.cuda.amp.custom_fwd / custom_bwd (Megatron- and apex-era custom Functions) were missing."""
    class Square(tessel.autograd.Function):
        @staticmethod
        @tessel.cuda.amp.custom_fwd
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @tessel.cuda.amp.custom_bwd
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g
    with pytest.warns(FutureWarning, match="torch.cuda.amp.custom_fwd"):
        tessel.cuda.amp.custom_fwd(lambda ctx, x: x)
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(x)
    y.sum().backward()
    assert y.tolist() == [1.0, 4.0] and x.grad.tolist() == [2.0, 4.0]


def test_an_unsupported_autocast_dtype_is_the_regions_dtype_and_a_nested_region_inherits_it():
    """torch: autocast("cpu", dtype=float32) warns and stays off, and get_autocast_dtype reports float32 inside,
    so a nested autocast("cpu") without a dtype inherits it and stays off; tessel's nested region enabled
    bfloat16 (a float32 matmul came out bfloat16)."""
    import warnings
    a = tessel.ones(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tessel.autocast("cpu", dtype=tessel.float32):
            assert tessel.get_autocast_dtype("cpu") == tessel.float32
            with tessel.autocast("cpu"):
                assert (a @ a).dtype == tessel.float32
    assert tessel.get_autocast_dtype("cpu") == tessel.bfloat16
    with tessel.autocast("cpu"):
        assert (a @ a).dtype == tessel.bfloat16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_scaler_step_before_any_scale_asserts_as_torch():
    # torch's scale tensor is made by the first scale(); tessel stepped anyway, dividing unscaled gradients by
    # 65536 (updates 65536 times too small, no error).
    p = tessel.nn.Parameter(tessel.ones(2))
    opt = tessel.optim.SGD([p], lr=0.1)
    p.sum().backward()
    scaler = tessel.amp.GradScaler("cpu")
    for call in (lambda: scaler.step(opt), lambda: scaler.unscale_(opt)):
        with pytest.raises(AssertionError, match=r"Attempted (step|unscale_) but _scale is None"):
            call()
    assert p.tolist() == [1.0, 1.0]
    scaler.scale(p.sum())
    scaler.step(opt)  # the gradient [1, 1] was not scaled here, so the step moves by lr / 65536
    assert p.tolist() == pytest.approx([1.0 - 0.1 / 65536] * 2, abs=1e-7)
