"""Convolution, pooling, fold/unfold and batch norm (tessel/nn/_conv_ops.py, _conv_modules.py) against naive
numpy loops in float64, gradients against finite differences and adjoint identities, torch's running-stat
rules for batch norm, and torch's error messages."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F
from sharded_equivalence import finite_difference


def t64(a, grad=False):
    x = tessel.tensor(np.asarray(a, dtype=np.float64))
    return x.requires_grad_() if grad else x


def naive_conv(x, w, b, stride, pads, dilation, groups):
    """x [N, C, *S], w [OC, C/G, *K]; pads ((before, after), ...) of zeros: loops over every output."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    n, c = x.shape[:2]
    oc, cg = w.shape[:2]
    k = w.shape[2:]
    outs = [(xp.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros([n, oc] + outs)
    ocg = oc // groups
    for o in np.ndindex(*outs):
        for kk in np.ndindex(*k):
            pos = tuple(o[i] * stride[i] + kk[i] * dilation[i] for i in range(nd))
            for g in range(groups):
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # [N, Cg]
                wk = w[(slice(g * ocg, (g + 1) * ocg), slice(None)) + kk]  # [OCg, Cg]
                out[(slice(None), slice(g * ocg, (g + 1) * ocg)) + o] += patch @ wk.T
    if b is not None:
        out += b.reshape([1, oc] + [1] * nd)
    return out


@pytest.mark.parametrize("nd,stride,padding,dilation,groups", [
    (1, 1, 0, 1, 1), (1, 2, 1, 2, 2), (2, 1, 1, 1, 1), (2, (2, 1), (0, 2), (1, 2), 1), (2, 2, 1, 1, 3),
    (3, 1, 1, 1, 1), (3, (1, 2, 1), 0, (2, 1, 1), 2)])
def test_conv_matches_naive_loops(nd, stride, padding, dilation, groups):
    rng = np.random.default_rng(nd * 10 + groups)
    c, oc = 6, 6
    size = [7, 6, 5][:nd]
    kernel = [3, 2, 2][:nd]
    x = rng.normal(size=[2, c] + size)
    w = rng.normal(size=[oc, c // groups] + kernel)
    b = rng.normal(size=oc)
    got = getattr(F, "conv%dd" % nd)(t64(x), t64(w), t64(b), stride, padding, dilation, groups).numpy()
    tup = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    want = naive_conv(x, w, b, tup(stride), [(p, p) for p in tup(padding)], tup(dilation), groups)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conv2d_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(2, 4, 5, 4)), rng.normal(size=(6, 2, 3, 2)), rng.normal(size=6)
    r = rng.normal(size=(2, 6, 3, 4))
    args = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)

    def loss(xa, wa, ba):
        return float((naive_conv(xa, wa, ba, (2, 1), [(1, 1), (1, 1)], (1, 2), 2) * r).sum())
    xt, wt, bt = t64(x, True), t64(w, True), t64(b, True)
    (F.conv2d(xt, wt, bt, **args) * t64(r)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda a: loss(a, w, b), x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(wt.grad.numpy(), finite_difference(lambda a: loss(x, a, b), w), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bt.grad.numpy(), finite_difference(lambda a: loss(x, w, a), b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nd,stride,padding,dilation,groups", [
    (1, 2, 1, 2, 2), (2, 1, "same", 1, 1), (2, (2, 1), (0, 2), (1, 2), 3), (3, (1, 2, 1), 1, (2, 1, 1), 2)])
def test_float32_conv_on_onednn_matches_loops_and_its_gradients_the_adjoint_loops(nd, stride, padding, dilation,
                                                                                  groups):
    """float32 runs on the C++ op (oneDNN, core/ops/conv.h): values and all three gradients against the
    float64 loops (the gradients as loops over the adjoint: d<conv(x, w), r>/dx and /dw, sum of r)."""
    rng = np.random.default_rng(nd * 7 + groups)
    c, oc = 6, 6
    size, kernel = [8, 7, 6][:nd], [4, 3, 2][:nd]  # even kernel: padding='same' pads one more after
    x = rng.normal(size=[3, c] + size).astype(np.float32)
    w = rng.normal(size=[oc, c // groups] + kernel).astype(np.float32)
    b = rng.normal(size=oc).astype(np.float32)
    xt, wt, bt = (tessel.tensor(a).requires_grad_() for a in (x, w, b))
    out = getattr(F, "conv%dd" % nd)(xt, wt, bt, stride, padding, dilation, groups)
    assert out.dtype == tessel.float32
    tup = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    if padding == "same":
        pads = [((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2) for d, k in zip(tup(dilation), kernel)]
    else:
        pads = [(p, p) for p in tup(padding)]
    x64, w64, b64 = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    want = naive_conv(x64, w64, b64, tup(stride), pads, tup(dilation), groups)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    r = rng.normal(size=want.shape)
    (out * tessel.tensor(r.astype(np.float32))).sum().backward()
    # <conv(x, w), r> is linear in x and in w: its gradient entries are the loss at unit vectors.
    def unit_grads(shape, loss_at):
        return np.array([loss_at(np.eye(1, int(np.prod(shape)), i).reshape(shape)) for i in range(int(np.prod(shape)))])
    dw = unit_grads(w.shape, lambda e: (naive_conv(x64, e, None, tup(stride), pads, tup(dilation), groups) * r).sum())
    np.testing.assert_allclose(wt.grad.numpy().ravel(), dw, rtol=1e-4, atol=1e-4)
    if nd < 3:  # the input's unit loop is long in 3-D; the C++ test covers it there
        dx = unit_grads(x.shape, lambda e: (naive_conv(e, w64, None, tup(stride), pads, tup(dilation), groups) * r).sum())
        np.testing.assert_allclose(xt.grad.numpy().ravel(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bt.grad.numpy(), r.sum(axis=tuple(i for i in range(r.ndim) if i != 1)), rtol=1e-5,
                               atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
def test_autocast_bfloat16_convolutions_run_on_onednn_in_bfloat16(transposed):
    """Under a bfloat16 autocast, conv2d / conv_transpose2d cast float32 operands to bfloat16 and run the C++
    op (bf16 primitives where oneDNN's are fast: AMX-BF16, AMD's AVX512-BF16; else fp32 primitives on the
    bf16 values): a bf16 output within one rounding of the float64 result on the rounded operands, float32
    gradients (autocast's casts) within bf16 accuracy of float64's; a plain bf16 model takes the same op;
    float64 operands stay float64.
    (conv_transpose adds its bias to the rounded bf16 result: two roundings, where torch's deconvolution has one.)"""
    rng = np.random.default_rng(40)
    x = rng.normal(size=(3, 4, 7, 6)).astype(np.float32)
    w = rng.normal(size=(4, 6, 3, 3) if transposed else (6, 4, 3, 3)).astype(np.float32)
    b = rng.normal(size=6).astype(np.float32)
    fn = (lambda *a: F.conv_transpose2d(*a, stride=2, padding=1)) if transposed else \
        (lambda *a: F.conv2d(*a, stride=1, padding=1))  # noqa: E731
    xt, wt, bt = (tessel.tensor(a).requires_grad_(True) for a in (x, w, b))
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        with tessel.profiler.profile() as prof:
            out = fn(xt, wt, bt)
    ops = {e.key for e in prof.key_averages()}
    assert out.dtype == tessel.bfloat16
    assert ("convolution_backward_input" if transposed else "convolution") in ops, sorted(ops)
    assert "matmul" not in ops and "bmm" not in ops, sorted(ops)
    rounded = [tessel.tensor(a).to(tessel.bfloat16).double().requires_grad_(True) for a in (x, w, b)]
    want = fn(*rounded)
    got = out.double().detach().numpy()
    exact = want.detach().numpy()
    before_bias = np.abs(exact - b.astype(np.float64).reshape(1, 6, 1, 1)) if transposed else 0.0
    assert np.all(np.abs(got - exact) <= (np.abs(exact) + before_bias) * 1.01 / 256 + 1e-4)
    r = rng.normal(size=got.shape)
    (out.float() * tessel.tensor(r.astype(np.float32))).sum().backward()
    (want * tessel.tensor(r)).sum().backward()
    for t, ref in zip((xt, wt, bt), rounded):
        assert t.grad.dtype == tessel.float32
        scale = np.abs(ref.grad.numpy()).max()
        np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), atol=scale * 2 ** -6)
    bf = [tessel.tensor(a).to(tessel.bfloat16) for a in (x, w, b)]
    np.testing.assert_array_equal(fn(*bf).float().numpy(), out.float().detach().numpy())
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        with tessel.profiler.profile() as prof:
            wide = fn(*(tessel.tensor(a.astype(np.float64)) for a in (x, w, b)))
    assert wide.dtype == tessel.float64
    assert not {"convolution", "convolution_backward_input"} & {e.key for e in prof.key_averages()}


def test_gradient_penalty_through_a_float32_conv_critic_matches_its_float64_twin():
    """WGAN-GP: |d critic(x) / dx|^2 differentiated again (create_graph) through the oneDNN convolutions
    equals the same penalty's gradient through the float64 composition (gather + matmul)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 2, 6, 6))
    w1, w2 = rng.normal(size=(4, 2, 3, 3)) * 0.5, rng.normal(size=(1, 4, 3, 3)) * 0.5
    grads = {}
    for dt, npdt in ((tessel.float32, np.float32), (tessel.float64, np.float64)):
        xt = tessel.tensor(x.astype(npdt)).requires_grad_()
        p1, p2 = (tessel.tensor(a.astype(npdt)).requires_grad_() for a in (w1, w2))
        critic = F.conv2d(tessel.tanh(F.conv2d(xt, p1, stride=2, padding=1)), p2).sum()
        (gx,) = tessel.autograd.grad(critic, xt, create_graph=True)
        penalty = ((gx.reshape(3, -1).norm(dim=1) - 1) ** 2).mean()
        penalty.backward()
        grads[dt] = (p1.grad.numpy().astype(np.float64), p2.grad.numpy().astype(np.float64))
    for g32, g64 in zip(grads[tessel.float32], grads[tessel.float64]):
        assert np.abs(g64).max() > 1e-3
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-5)


def test_padding_same_with_an_even_kernel_pads_more_after_as_torch():
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(1, 2, 6, 5)), rng.normal(size=(3, 2, 4, 3))
    got = F.conv2d(t64(x), t64(w), None, 1, "same", (1, 2)).numpy()
    # total padding d*(k-1): (3, 4) -> (1 before, 2 after) rows, (2, 2) columns
    want = naive_conv(x, w, None, (1, 1), [(1, 2), (2, 2)], (1, 2), 1)
    assert got.shape == (1, 3, 6, 5)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.conv2d(t64(x), t64(w), None, 1, "valid").numpy(),
                               naive_conv(x, w, None, (1, 1), [(0, 0), (0, 0)], (1, 1), 1), rtol=1e-12)
    with pytest.raises(RuntimeError, match="padding='same' is not supported for strided convolutions"):
        F.conv2d(t64(x), t64(w), None, 2, "same")


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_conv_padding_modes_match_numpy_pad(mode, np_mode):
    rng = np.random.default_rng(3)
    conv = nn.Conv2d(2, 3, 3, padding=(2, 1), padding_mode=mode, dtype=tessel.float64)
    x = rng.normal(size=(2, 2, 5, 4))
    xp = np.pad(x, [(0, 0), (0, 0), (2, 2), (1, 1)], mode=np_mode)
    want = naive_conv(xp, conv.weight.detach().numpy(), conv.bias.detach().numpy(), (1, 1), [(0, 0), (0, 0)],
                      (1, 1), 1)
    np.testing.assert_allclose(conv(t64(x)).detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert "padding_mode=%s" % mode in repr(conv)


def test_conv_module_shapes_init_bounds_unbatched_input_and_state_dict():
    tessel.manual_seed(0)
    conv = nn.Conv2d(4, 8, (3, 2), stride=2, groups=2, bias=True)
    assert list(conv.weight.shape) == [8, 2, 3, 2] and list(conv.bias.shape) == [8]
    bound = 1.0 / math.sqrt(2 * 3 * 2)  # kaiming_uniform(a=sqrt(5)) and the bias: 1/sqrt(fan_in)
    w = conv.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound
    assert sorted(conv.state_dict().keys()) == ["bias", "weight"]
    x = tessel.randn(4, 9, 8)
    np.testing.assert_allclose(conv(x).detach().numpy(), conv(x.unsqueeze(0)).detach().numpy()[0], rtol=1e-6)
    assert list(conv(x).shape) == [8, 4, 4]
    assert nn.Conv1d(3, 5, 2, bias=False).bias is None
    assert list(nn.Conv3d(2, 4, 3).weight.shape) == [4, 2, 3, 3, 3]


def test_conv_errors_name_the_shapes():
    x, w = tessel.randn(1, 4, 6, 6), tessel.randn(8, 3, 3, 3)
    with pytest.raises(RuntimeError, match=r"Given groups=1, weight of size \[8, 3, 3, 3\], expected "
                                           r"input\[1, 4, 6, 6\] to have 3 channels, but got 4 channels instead"):
        F.conv2d(x, w)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
        F.conv2d(tessel.randn(1, 3, 2, 2), w)
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d"):
        F.conv2d(tessel.randn(3, 6), w)
    with pytest.raises(ValueError, match="must be divisible by groups"):
        nn.Conv2d(4, 6, 3, groups=4)
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(4, 6, 3, padding_mode="mirror")


@pytest.mark.parametrize("nd,stride,padding,output_padding,dilation,groups", [
    (1, 2, 1, 1, 1, 1), (2, 2, 1, 1, 1, 2), (2, (1, 3), (0, 1), (0, 2), 1, 1), (2, 1, 0, 0, 2, 1),
    (3, 2, 0, 1, 1, 1)])
def test_conv_transpose_is_the_adjoint_of_conv(nd, stride, padding, output_padding, dilation, groups):
    """<conv(y, w), x> == <y, conv_transpose(x, w)> for every geometry, and the output size is torch's formula."""
    rng = np.random.default_rng(nd + groups)
    cin, cout = 4, 2 * groups
    size_in = [4, 3, 3][:nd]
    kernel = [3, 2, 2][:nd]
    tup = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    s, p, op, d = tup(stride), tup(padding), tup(output_padding), tup(dilation)
    out_size = [(size_in[i] - 1) * s[i] - 2 * p[i] + d[i] * (kernel[i] - 1) + op[i] + 1 for i in range(nd)]
    x = rng.normal(size=[2, cin] + size_in)
    w = rng.normal(size=[cin, cout // groups] + kernel)
    got = getattr(F, "conv_transpose%dd" % nd)(t64(x), t64(w), None, stride, padding, output_padding, groups,
                                                dilation).numpy()
    assert list(got.shape) == [2, cout] + out_size
    y = rng.normal(size=[2, cout] + out_size)
    # conv with the same weight maps [.., cout, out_size] back onto [.., cin, size_in]
    conv_y = naive_conv(y, w, None, s, [(p[i], p[i]) for i in range(nd)], d, groups)
    assert list(conv_y.shape) == [2, cin] + size_in
    np.testing.assert_allclose((conv_y * x).sum(), (y * got).sum(), rtol=1e-11)


@pytest.mark.parametrize("nd,stride,padding,output_padding,dilation,groups", [
    (1, 2, 1, 1, 1, 1), (2, 2, 1, 1, 1, 2), (2, (1, 3), (0, 1), (0, 2), 1, 1), (2, 1, 0, 0, 2, 1),
    (2, 1, 1, 2, 3, 1), (3, 2, 0, 1, 1, 1)])
def test_float32_conv_transpose_on_onednn_matches_the_float64_composition(nd, stride, padding, output_padding,
                                                                          dilation, groups):
    """float32 conv_transpose runs on oneDNN (the convolution's input gradient; output_padding >= stride,
    the (2, 1, 1, 2, 3, 1) case, stays composed): values and the input, weight and bias gradients against the
    float64 composed path of the adjoint test above."""
    rng = np.random.default_rng(30 + nd + groups)
    cin, cout = 4, 2 * groups
    x = rng.normal(size=[2, cin] + [5, 4, 3][:nd])
    w = rng.normal(size=[cin, cout // groups] + [3, 2, 2][:nd])
    b = rng.normal(size=cout)
    fn = getattr(F, "conv_transpose%dd" % nd)
    outs, grads = {}, {}
    for dt, npdt in ((tessel.float32, np.float32), (tessel.float64, np.float64)):
        ts = [tessel.tensor(a.astype(npdt)).requires_grad_(True) for a in (x, w, b)]
        with tessel.profiler.profile() as prof:
            out = fn(*ts, stride, padding, output_padding, groups, dilation)
        ops = {e.key for e in prof.key_averages()}
        fused = dt == tessel.float32 and output_padding != 2
        assert ("convolution_backward_input" in ops) == fused, (dt, sorted(ops))
        assert out.dtype == dt
        r = np.random.default_rng(3).normal(size=out.shape)
        (out * tessel.tensor(r.astype(npdt))).sum().backward()
        outs[dt] = out.detach().numpy().astype(np.float64)
        grads[dt] = [t.grad.numpy().astype(np.float64) for t in ts]
    np.testing.assert_allclose(outs[tessel.float32], outs[tessel.float64], rtol=1e-4, atol=1e-5)
    for g32, g64 in zip(grads[tessel.float32], grads[tessel.float64]):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-4)


def test_conv_transpose_module_output_size_and_bias():
    tessel.manual_seed(1)
    up = nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1, dtype=tessel.float64)
    x = tessel.randn(2, 3, 4, 4, dtype=tessel.float64)
    assert list(up(x).shape) == [2, 5, 7, 7]
    assert list(up(x, output_size=[8, 8]).shape) == [2, 5, 8, 8]
    with pytest.raises(ValueError, match="requested an output size of \\[10, 10\\]"):
        up(x, output_size=[10, 10])
    nobias = F.conv_transpose2d(x, up.weight, None, 2, 1)
    np.testing.assert_allclose((up(x) - nobias).detach().numpy(),
                               np.broadcast_to(up.bias.detach().numpy().reshape(1, 5, 1, 1), (2, 5, 7, 7)), atol=1e-12)
    assert list(up.weight.shape) == [3, 5, 3, 3]


def test_unfold_matches_numpy_patches_and_fold_is_its_adjoint():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 5, 6))
    cols = F.unfold(t64(x), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)).numpy()
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    oh, ow = (7 - 2) // 2 + 1, (8 - 5) // 1 + 1
    want = np.zeros((2, 3 * 6, oh * ow))
    for c in range(3):
        for ki in range(2):
            for kj in range(3):
                for i in range(oh):
                    for j in range(ow):
                        want[:, c * 6 + ki * 3 + kj, i * ow + j] = xp[:, c, i * 2 + ki, j + kj * 2]
    np.testing.assert_allclose(cols, want, rtol=0, atol=0)
    y = rng.normal(size=cols.shape)
    folded = F.fold(t64(y), (5, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)).numpy()
    np.testing.assert_allclose((cols * y).sum(), (x * folded).sum(), rtol=1e-12)
    # non-overlapping windows: fold(unfold(x)) == x
    x2 = rng.normal(size=(1, 2, 4, 6))
    np.testing.assert_array_equal(nn.Fold((4, 6), 2, stride=2)(nn.Unfold(2, stride=2)(t64(x2))).numpy(), x2)


def naive_pool(x, kernel, stride, pad, ceil_mode, reduce, dilation=(1, 1)):
    """2-D pooling by loops; reduce(window values, count inside padded bounds, count of input entries)."""
    n, c, h, w = x.shape
    outs = []
    for size, k, s, p, d in zip((h, w), kernel, stride, pad, dilation):
        room = size + 2 * p - d * (k - 1) - 1
        o = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (o - 1) * s >= size + p:
            o -= 1
        outs.append(o)
    out = np.zeros((n, c, outs[0], outs[1]))
    arg = np.zeros((n, c, outs[0], outs[1]), dtype=np.int64)
    for i in range(outs[0]):
        for j in range(outs[1]):
            vals, where, padded = [], [], 0
            for a in range(kernel[0]):
                for b in range(kernel[1]):
                    r, q = i * stride[0] - pad[0] + a * dilation[0], j * stride[1] - pad[1] + b * dilation[1]
                    if -pad[0] <= r < h + pad[0] and -pad[1] <= q < w + pad[1]:
                        padded += 1
                    if 0 <= r < h and 0 <= q < w:
                        vals.append(x[:, :, r, q])
                        where.append(r * w + q)
            out[:, :, i, j], arg[:, :, i, j] = reduce(np.stack(vals, -1), padded, np.array(where))
    return out, arg


def _max_reduce(v, padded, where):
    return v.max(-1), where[v.argmax(-1)]


@pytest.mark.parametrize("kernel,stride,pad,dilation,ceil", [
    ((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), True), ((3, 2), (2, 1), (1, 0), (2, 1), False),
    ((2, 3), (3, 2), (1, 1), (1, 1), True)])
def test_max_pool2d_values_indices_and_gradient_match_loops(kernel, stride, pad, dilation, ceil):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 7, 6))
    xt = t64(x, True)
    values, indices = F.max_pool2d(xt, kernel, stride, pad, dilation, ceil, return_indices=True)
    want, warg = naive_pool(x, kernel, stride, pad, ceil, _max_reduce, dilation)
    np.testing.assert_array_equal(values.detach().numpy(), want)
    np.testing.assert_array_equal(indices.numpy(), warg)
    values.sum().backward()
    grad = np.zeros_like(x).reshape(2, 3, -1)
    for ni in range(2):
        for ci in range(3):
            np.add.at(grad[ni, ci], warg[ni, ci].reshape(-1), 1.0)
    np.testing.assert_array_equal(xt.grad.numpy(), grad.reshape(x.shape))


def test_max_pool_ties_route_the_gradient_to_the_first_maximum_as_torch():
    x = t64(np.array([[[1.0, 3.0, 3.0, 2.0]]]), True)
    out, idx = F.max_pool1d(x, 3, 1, return_indices=True)
    assert idx.numpy().tolist() == [[[1, 1]]]
    out.sum().backward()
    assert x.grad.numpy().tolist() == [[[0.0, 2.0, 0.0, 0.0]]]
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size, but got pad=2, "
                                           "kernel_size=3"):
        F.max_pool2d(tessel.randn(1, 1, 5, 5), 3, 1, 2)


@pytest.mark.parametrize("count_include_pad,ceil,divisor", [(True, False, None), (False, False, None), (True, True, None),
                                                            (False, True, None), (True, False, 5)])
def test_avg_pool2d_divisors_match_torch_rules(count_include_pad, ceil, divisor):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 2, 7, 5))

    def avg(v, padded, where):
        return v.sum(-1) / (divisor or (padded if count_include_pad else len(where))), 0
    want, _ = naive_pool(x, (3, 2), (2, 2), (1, 1), ceil, avg)
    got = F.avg_pool2d(t64(x), (3, 2), 2, 1, ceil, count_include_pad, divisor).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # float32 sums windows with a depthwise convolution (oneDNN); its gradient against float64's, and
    # float64's against finite differences
    r = rng.normal(size=want.shape)
    grads = {}
    for dt, npdt in ((tessel.float32, np.float32), (tessel.float64, np.float64)):
        xt = tessel.tensor(x.astype(npdt)).requires_grad_(True)
        with tessel.profiler.profile() as prof:
            out = F.avg_pool2d(xt, (3, 2), 2, 1, ceil, count_include_pad, divisor)
        assert ("convolution" in {e.key for e in prof.key_averages()}) == (dt == tessel.float32)
        assert out.dtype == dt
        np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-6)
        (out * tessel.tensor(r.astype(npdt))).sum().backward()
        grads[dt] = xt.grad.numpy().astype(np.float64)
    np.testing.assert_allclose(grads[tessel.float32], grads[tessel.float64], rtol=1e-5, atol=1e-6)
    loss = lambda a: float((F.avg_pool2d(t64(a), (3, 2), 2, 1, ceil, count_include_pad, divisor).numpy() * r).sum())  # noqa: E731
    np.testing.assert_allclose(grads[tessel.float64], finite_difference(loss, x), rtol=1e-6, atol=1e-8)


def test_pool_modules_and_1d_3d_forms():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2, 3, 8))
    np.testing.assert_allclose(nn.AvgPool1d(2)(t64(x)).numpy(), x.reshape(2, 3, 4, 2).mean(-1), rtol=1e-12)
    np.testing.assert_array_equal(nn.MaxPool1d(2)(t64(x)).numpy(), x.reshape(2, 3, 4, 2).max(-1))
    v = rng.normal(size=(1, 2, 4, 4, 6))
    np.testing.assert_array_equal(nn.MaxPool3d(2)(t64(v)).numpy(), v.reshape(1, 2, 2, 2, 2, 2, 3, 2).max((3, 5, 7)))
    np.testing.assert_allclose(nn.AvgPool3d((2, 2, 3))(t64(v)).numpy(),
                               v.reshape(1, 2, 2, 2, 2, 2, 2, 3).mean((3, 5, 7)), rtol=1e-12)
    f32 = lambda a: tessel.tensor(a.astype(np.float32))  # noqa: E731  (the depthwise-convolution path)
    np.testing.assert_allclose(nn.AvgPool1d(2)(f32(x)).numpy(), x.reshape(2, 3, 4, 2).mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.AvgPool3d((2, 2, 3))(f32(v)).numpy(), v.reshape(1, 2, 2, 2, 2, 2, 2, 3).mean((3, 5, 7)),
                               rtol=1e-5, atol=1e-6)
    unbatched = rng.normal(size=(3, 6, 6))
    np.testing.assert_array_equal(nn.MaxPool2d(3)(t64(unbatched)).numpy(),
                                  unbatched.reshape(3, 2, 3, 2, 3).max((2, 4)))
    np.testing.assert_allclose(nn.AvgPool2d(2)(f32(unbatched)).numpy(), unbatched.reshape(3, 3, 2, 3, 2).mean((2, 4)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size,out", [((7, 5), (3, 2)), ((6, 6), (4, None)), ((5, 3), 1), ((4, 9), (4, 9)),
                                      ((8, 6), (2, 3))])
def test_adaptive_pools_use_torch_windows(size, out):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 3) + size)
    outs = (out, out) if isinstance(out, int) else tuple(size[i] if out[i] is None else out[i] for i in range(2))
    want_avg, want_max = np.zeros((2, 3) + outs), np.zeros((2, 3) + outs)
    for i in range(outs[0]):
        for j in range(outs[1]):
            r0, r1 = (i * size[0]) // outs[0], -(-((i + 1) * size[0]) // outs[0])
            c0, c1 = (j * size[1]) // outs[1], -(-((j + 1) * size[1]) // outs[1])
            want_avg[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean((2, 3))
            want_max[:, :, i, j] = x[:, :, r0:r1, c0:c1].max((2, 3))
    xt = t64(x, True)
    got = F.adaptive_avg_pool2d(xt, out)
    np.testing.assert_allclose(got.detach().numpy(), want_avg, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(nn.AdaptiveMaxPool2d(out)(t64(x)).numpy(), want_max)
    r = rng.normal(size=want_avg.shape)
    (got * t64(r)).sum().backward()

    def loss(a):
        return float((F.adaptive_avg_pool2d(t64(a), out).numpy() * r).sum())
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(loss, x), rtol=1e-6, atol=1e-8)
    vals, idx = F.adaptive_max_pool1d(t64(x[:, :, 0, :]), 2, return_indices=True)
    flat = x[:, :, 0, :]
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.numpy(), -1), vals.numpy())


def test_batch_norm_training_eval_and_running_statistics_follow_torch():
    rng = np.random.default_rng(10)
    bn = nn.BatchNorm2d(3, momentum=0.2, dtype=tessel.float64)
    with tessel.no_grad():
        bn.weight.copy_(t64([1.0, 2.0, 0.5]))
        bn.bias.copy_(t64([0.0, -1.0, 3.0]))
    x = rng.normal(size=(4, 3, 2, 5)) * 3 + 1
    y = bn(t64(x)).detach().numpy()
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    want = want * np.array([1.0, 2.0, 0.5]).reshape(1, 3, 1, 1) + np.array([0.0, -1.0, 3.0]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * x.var((0, 2, 3), ddof=1), rtol=1e-12)
    assert int(bn.num_batches_tracked.item()) == 1
    assert sorted(bn.state_dict().keys()) == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]
    bn.eval()
    z = rng.normal(size=(2, 3, 2, 2))
    want_eval = (z - bn.running_mean.numpy().reshape(1, 3, 1, 1)) / np.sqrt(bn.running_var.numpy().reshape(1, 3, 1, 1)
                                                                             + 1e-5)
    want_eval = want_eval * np.array([1.0, 2.0, 0.5]).reshape(1, 3, 1, 1) + np.array([0.0, -1.0, 3.0]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(bn(t64(z)).detach().numpy(), want_eval, rtol=1e-10, atol=1e-12)
    assert int(bn.num_batches_tracked.item()) == 1  # eval leaves the statistics alone
    cumulative = nn.BatchNorm1d(2, momentum=None, dtype=tessel.float64)
    a, b = rng.normal(size=(5, 2)), rng.normal(size=(3, 2))
    cumulative(t64(a))
    cumulative(t64(b))
    np.testing.assert_allclose(cumulative.running_mean.numpy(), (a.mean(0) + b.mean(0)) / 2, rtol=1e-12)


def test_batch_norm_loads_pre_version_2_state_dicts_without_num_batches_tracked():
    # torch < 0.4.1 checkpoints have no num_batches_tracked: a plain dict (no _metadata) or version 1 fills
    # it with the module's own count, as torch's _load_from_state_dict; version 2 reports the key missing.
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
    net[1].num_batches_tracked.fill_(7)
    old = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    old["1.running_mean"] = t64([0.5, -0.5]).float()
    fresh = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
    fresh[1].num_batches_tracked.fill_(3)
    result = fresh.load_state_dict(old)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert int(fresh[1].num_batches_tracked.item()) == 3
    np.testing.assert_array_equal(fresh[1].running_mean.numpy(), [0.5, -0.5])
    import collections
    versioned = collections.OrderedDict(old)
    versioned._metadata = {"1": {"version": 1}}
    fresh.load_state_dict(versioned)
    versioned._metadata = {"1": {"version": 2}}
    with pytest.raises(ValueError, match="num_batches_tracked"):
        fresh.load_state_dict(versioned)
    assert fresh.load_state_dict(versioned, strict=False).missing_keys == ["1.num_batches_tracked"]


def test_batch_norm_gradient_matches_finite_differences_and_errors():
    rng = np.random.default_rng(11)
    x, r = rng.normal(size=(3, 2, 4)), rng.normal(size=(3, 2, 4))
    w, b = np.array([1.5, -0.5]), np.array([0.1, 0.2])
    xt, wt = t64(x, True), t64(w, True)
    (F.batch_norm(xt, None, None, wt, t64(b), True) * t64(r)).sum().backward()

    def loss(a, wa):
        m, v = a.mean((0, 2), keepdims=True), a.var((0, 2), keepdims=True)
        return float((((a - m) / np.sqrt(v + 1e-5) * wa.reshape(1, 2, 1) + b.reshape(1, 2, 1)) * r).sum())
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda a: loss(a, w), x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(wt.grad.numpy(), finite_difference(lambda a: loss(x, a), w), rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training, got input size "
                                         r"\[1, 2\]"):
        nn.BatchNorm1d(2)(tessel.randn(1, 2))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(2)(tessel.randn(2, 2, 3))
    no_bias = nn.BatchNorm1d(2, bias=False)
    assert no_bias.bias is None and sorted(no_bias.state_dict()) == ["num_batches_tracked", "running_mean",
                                                                      "running_var", "weight"]
    assert repr(no_bias) == "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=True, bias=False, track_running_stats=True)"
    no_stats = nn.BatchNorm1d(2, track_running_stats=False, affine=False)
    assert no_stats.running_mean is None and no_stats.weight is None
    no_stats.eval()  # without running statistics eval normalizes with the batch's, as torch
    out = no_stats(t64(x)).numpy()
    np.testing.assert_allclose(out.mean((0, 2)), 0.0, atol=1e-12)


def test_small_cnn_trains_under_sgd_and_matches_its_float64_twin():
    """A conv -> bn -> relu -> pool -> linear classifier in float32 and its float64 copy take the same
    steps (the float32 losses track the float64 ones), and the loss falls on a fixed batch."""
    tessel.manual_seed(3)

    def make(dtype):
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, dtype=dtype), nn.BatchNorm2d(4, dtype=dtype), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, stride=2, dtype=dtype), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(4, 3, dtype=dtype))
    m32, m64 = make(tessel.float32), make(tessel.float64)
    with tessel.no_grad():
        for p32, p64 in zip(m32.parameters(), m64.parameters()):
            p64.copy_(p32.to(tessel.float64))
    rng = np.random.default_rng(12)
    x = rng.normal(size=(8, 1, 10, 10))
    y = tessel.tensor(rng.integers(0, 3, size=8))
    losses = {}
    for name, m, dt in (("f32", m32, np.float32), ("f64", m64, np.float64)):
        opt = tessel.optim.SGD(m.parameters(), lr=0.2)
        losses[name] = []
        for _ in range(20):
            opt.zero_grad()
            loss = F.cross_entropy(m(tessel.tensor(x.astype(dt))), y)
            loss.backward()
            opt.step()
            losses[name].append(float(loss.item()))
    np.testing.assert_allclose(losses["f32"], losses["f64"], rtol=2e-4)
    assert losses["f64"][-1] < 0.6 * losses["f64"][0], losses["f64"]


def test_cnn_under_fully_shard_on_two_ranks_equals_one_rank():
    """Each Conv2d and the root wrapped by fully_shard (4-D weights sharded on dim 0) on 2 rank threads, each
    with half the batch, take the same AdamW steps as one rank on the whole batch."""
    from tessel.distributed.fsdp import fully_shard
    from sharded_equivalence import assert_fully_shard_halves_equal_one_rank

    def make():
        tessel.manual_seed(5)
        return nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 4, 3, stride=2),
                             nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(4, 3))

    def shard(net):
        for i in (0, 3):
            fully_shard(net[i])
        fully_shard(net)
        assert list(net[0].weight.to_local().shape) == [3, 2, 3, 3]
    rng = np.random.default_rng(13)
    x = tessel.tensor(rng.normal(size=(4, 2, 10, 10)).astype(np.float32))
    y = tessel.tensor(rng.integers(0, 3, size=4))
    assert_fully_shard_halves_equal_one_rank(make, shard, x, y, lambda p: tessel.optim.AdamW(p, lr=1e-2))


def test_review_fixes_edge_cases_follow_torch():
    # ceil_mode on an input smaller than the window: one output (torch's formula), not an error
    x = t64(np.arange(4.0).reshape(1, 1, 2, 2))
    assert F.max_pool2d(x, 3, 2, ceil_mode=True).numpy().tolist() == [[[[3.0]]]]
    assert F.avg_pool2d(x, 3, 2, ceil_mode=True).numpy().tolist() == [[[[1.5]]]]
    assert F.avg_pool2d(x.float(), 3, 2, ceil_mode=True).numpy().tolist() == [[[[1.5]]]]
    # an all -inf window that touches padding: indices and the gradient go to its input taps, as torch's
    neg = t64(np.full((1, 1, 3, 3), -np.inf), True)
    values, idx = F.max_pool2d(neg, 2, 2, 1, return_indices=True)
    assert idx.numpy().tolist() == [[[[0, 1], [3, 4]]]]
    values.sum().backward()
    assert neg.grad.numpy().reshape(-1).tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    # bad arguments raise as torch does
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="dilation should be greater than zero"):
        F.max_pool2d(x, 2, dilation=0)
    with pytest.raises(RuntimeError, match=r"expected bias to be 1-dimensional with 3 elements, but got bias of size "
                                           r"\[5\] instead"):
        F.conv2d(tessel.randn(1, 2, 5, 5), tessel.randn(3, 2, 3, 3), tessel.randn(5))
    with pytest.raises(RuntimeError, match=r"batch_norm: running_mean should have 3 elements"):
        F.batch_norm(tessel.randn(4, 3), tessel.zeros(2), tessel.ones(3))
    with pytest.raises(RuntimeError, match="unfold: the dilated kernel \\[4, 4\\] does not fit"):
        F.unfold(tessel.randn(1, 1, 3, 3), 4)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided convolutions"):
        nn.Conv2d(2, 2, 3, stride=2, padding="same")
    up = nn.ConvTranspose1d(4, 2, 3, stride=1, dilation=3)
    with pytest.raises(ValueError, match="requested an output size of \\[16\\]"):
        up(tessel.randn(2, 4, 9), output_size=[16])  # valid: 15 only (base to base + stride - 1)
    with pytest.raises(ValueError, match="output_size must have 1 or 3 elements \\(got 2\\)"):
        up(tessel.randn(2, 4, 9), output_size=[4, 15])
    assert list(up(tessel.randn(2, 4, 9), output_size=[2, 2, 15]).shape) == [2, 2, 15]
    # adaptive pools to an empty output, as torch
    assert list(F.adaptive_avg_pool2d(tessel.randn(1, 2, 4, 4), (0, 2)).shape) == [1, 2, 0, 2]
    assert list(F.adaptive_max_pool2d(tessel.randn(1, 2, 4, 4), 0).shape) == [1, 2, 0, 0]
    # reprs as torch's
    assert repr(nn.Conv2d(2, 2, 3, padding="same")) == "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=same)"
    assert "affine=False, bias=False" in repr(nn.BatchNorm1d(2, affine=False))
    assert repr(nn.Unfold(2, stride=2)) == "Unfold(kernel_size=2, dilation=1, padding=0, stride=2)"
    assert repr(nn.AvgPool1d(3)) == "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"


def test_low_precision_pools_and_batch_norm_round_once_and_keep_the_dtype():
    rng = np.random.default_rng(16)
    x = rng.normal(size=(2, 3, 21, 21))
    xb = tessel.tensor(x.astype(np.float32)).to(tessel.bfloat16)
    exact = xb.float().numpy().astype(np.float64)  # the bf16 values, exactly
    for name, got, want in (
            ("adaptive", F.adaptive_avg_pool2d(xb, 7), exact.reshape(2, 3, 7, 3, 7, 3).mean((3, 5))),
            ("avg", F.avg_pool2d(xb, 3), exact.reshape(2, 3, 7, 3, 7, 3).mean((3, 5)))):
        assert got.dtype == tessel.bfloat16, name
        err = np.abs(got.float().numpy() - want)
        assert np.all(err <= np.abs(want) * 2.0 ** -8 * 1.01 + 1e-30), (name, float((err / np.abs(want)).max()))
    bn = nn.BatchNorm2d(3)
    for training in (True, False):
        bn.train(training)
        assert bn(xb).dtype == tessel.bfloat16
    assert F.batch_norm(xb, None, None, tessel.ones(3), tessel.zeros(3), True).dtype == tessel.bfloat16


def test_instance_norm_modules_normalize_each_sample_and_track_the_mean_of_their_statistics():
    rng = np.random.default_rng(17)
    x = rng.normal(size=(3, 2, 4, 5)) * 2 + 1
    norm = nn.InstanceNorm2d(2, affine=True, track_running_stats=True, momentum=0.5, dtype=tessel.float64)
    with tessel.no_grad():
        norm.weight.copy_(t64([2.0, 0.5]))
    got = norm(t64(x)).detach().numpy()
    m, v = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    np.testing.assert_allclose(got, (x - m) / np.sqrt(v + 1e-5) * np.array([2.0, 0.5]).reshape(1, 2, 1, 1),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(norm.running_mean.numpy(), 0.5 * x.mean((2, 3)).mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.running_var.numpy(), 0.5 + 0.5 * x.var((2, 3), ddof=1).mean(0), rtol=1e-12)
    norm.eval()  # with running statistics, eval normalizes with them
    rm, rv = norm.running_mean.numpy().reshape(1, 2, 1, 1), norm.running_var.numpy().reshape(1, 2, 1, 1)
    np.testing.assert_allclose(norm(t64(x)).detach().numpy(),
                               (x - rm) / np.sqrt(rv + 1e-5) * np.array([2.0, 0.5]).reshape(1, 2, 1, 1), rtol=1e-10)
    plain = nn.InstanceNorm1d(2)
    assert plain.weight is None and plain.running_mean is None and sorted(plain.state_dict()) == []
    unbatched = rng.normal(size=(2, 6))
    np.testing.assert_allclose(nn.InstanceNorm1d(2, dtype=tessel.float64)(t64(unbatched)).numpy(),
                               (unbatched - unbatched.mean(1, keepdims=True))
                               / np.sqrt(unbatched.var(1, keepdims=True) + 1e-5), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap"),
                                          ("constant", "constant")])
def test_pad_modes_match_numpy_and_their_gradient_is_the_adjoint(mode, np_mode):
    rng = np.random.default_rng(19)
    x = rng.normal(size=(2, 3, 5, 6))
    xt = t64(x, True)
    out = F.pad(xt, (2, 1, 3, 0), mode=mode)
    want = np.pad(x, [(0, 0), (0, 0), (3, 0), (2, 1)], mode=np_mode)
    np.testing.assert_array_equal(out.detach().numpy(), want)
    r = rng.normal(size=want.shape)
    (out * t64(r)).sum().backward()
    # the adjoint: each input entry collects r from every padded position that copies it
    idx = np.pad(np.arange(x.size).reshape(x.shape), [(0, 0), (0, 0), (3, 0), (2, 1)], mode=np_mode)
    grad = np.zeros(x.size)
    keep = np.ones(idx.shape, bool) if mode != "constant" else np.pad(np.ones(x.shape, bool), [(0, 0), (0, 0), (3, 0),
                                                                                               (2, 1)])
    np.add.at(grad, idx[keep], r[keep])
    np.testing.assert_allclose(xt.grad.numpy().reshape(-1), grad, rtol=1e-12, atol=1e-14)
    module = {"reflect": nn.ReflectionPad2d, "replicate": nn.ReplicationPad2d, "circular": nn.CircularPad2d,
              "constant": nn.ZeroPad2d}[mode]((2, 1, 3, 0))
    np.testing.assert_array_equal(module(t64(x)).numpy(), want)
    if mode == "reflect":
        with pytest.raises(RuntimeError, match="padding size should be less than"):
            F.pad(t64(x[0]), (6, 0), mode="reflect")  # (3-D: torch pads a 4-D input by 4 or 6 amounts only)


def _np_linear_weights(n_in, n_out, align_corners, scale=None):
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        if align_corners:
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((o + 0.5) * (scale or n_in / n_out) - 0.5, 0.0)
        lo = min(int(np.floor(src)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        w[o, lo] += 1 - (src - lo)
        w[o, hi] += src - lo
    return w


@pytest.mark.parametrize("size,align", [((7, 4), False), ((9, 11), True), ((3, 2), False)])
def test_bilinear_and_nearest_interpolation_match_numpy_weights(size, align):
    rng = np.random.default_rng(20)
    x = rng.normal(size=(2, 3, 5, 6))
    xt = t64(x, True)
    out = F.interpolate(xt, size=size, mode="bilinear", align_corners=align)
    wh, ww = _np_linear_weights(5, size[0], align), _np_linear_weights(6, size[1], align)
    want = np.einsum("oh,nchw,pw->ncop", wh, x, ww)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-13)
    r = rng.normal(size=want.shape)
    (out * t64(r)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), np.einsum("oh,ncop,pw->nchw", wh, r, ww), rtol=1e-12, atol=1e-13)
    near = F.interpolate(t64(x), size=size, mode="nearest").numpy()
    rows = np.minimum(np.floor(np.arange(size[0]) * 5 / size[0]).astype(int), 4)
    cols = np.minimum(np.floor(np.arange(size[1]) * 6 / size[1]).astype(int), 5)
    np.testing.assert_array_equal(near, x[:, :, rows][:, :, :, cols])
    up = nn.Upsample(scale_factor=2, mode="nearest")(t64(x)).numpy()
    np.testing.assert_array_equal(up, x.repeat(2, axis=2).repeat(2, axis=3))


def _np_cubic(x):
    """Keys' cubic convolution kernel with a = -0.75 at distance x (torch's bicubic)."""
    a, x = -0.75, abs(x)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    if x < 2:
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return 0.0


@pytest.mark.parametrize("size,align", [((9, 4), False), ((7, 11), True), ((2, 3), False)])
def test_bicubic_interpolation_matches_a_direct_4x4_tap_loop(size, align):
    # Each output reads the 4x4 inputs around its source point, clamped at the edges, weighted by the cubic
    # kernel of each tap's distance; the source point is not clamped at 0 (torch's cubic rule).
    rng = np.random.default_rng(21)
    h, w = 5, 6
    x = rng.normal(size=(2, 3, h, w))

    def src(o, n_in, n_out):
        if align:
            return o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return (o + 0.5) * n_in / n_out - 0.5
    want = np.zeros((2, 3) + size)
    for i in range(size[0]):
        for j in range(size[1]):
            sy, sx = src(i, h, size[0]), src(j, w, size[1])
            y0, x0 = int(np.floor(sy)), int(np.floor(sx))
            for ty in range(y0 - 1, y0 + 3):
                for tx in range(x0 - 1, x0 + 3):
                    weight = _np_cubic(sy - ty) * _np_cubic(sx - tx)
                    want[:, :, i, j] += weight * x[:, :, min(max(ty, 0), h - 1), min(max(tx, 0), w - 1)]
    xt = t64(x, True)
    out = F.interpolate(xt, size=size, mode="bicubic", align_corners=align)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-13)
    r = rng.normal(size=want.shape)
    (out * t64(r)).sum().backward()

    def loss(a):
        return float((F.interpolate(t64(a), size=size, mode="bicubic", align_corners=align).numpy() * r).sum())
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(loss, x), rtol=1e-6, atol=1e-8)
    with pytest.raises(NotImplementedError, match="bicubic mode needs 4D input"):
        F.interpolate(t64(x[0]), size=4, mode="bicubic")


# F.interpolate(arange(16.) ** 1.5 as [1, 1, 4, 4], size=(3, 2), antialias=True) under torch 2.15
TORCH_BICUBIC_AA = [2.01753093193, 5.89146199805, 17.173051329583, 24.651469549601, 40.743570030973, 50.519880885075]
TORCH_BILINEAR_AA_AC = [5.650476572204, 9.2215012619, 25.123581420213, 31.360284599384, 44.980494532065,
                        52.636224499711]


def test_antialiased_downscaling_widens_the_filter_and_area_mode_averages_blocks():
    # bilinear antialias at 1/2: a triangle 2 input pixels wide, weights (1, 3, 3, 1) / 8 inside and, at the
    # edge, the part inside the image renormalized: (3, 3, 1) / 7 (torch's _upsample_bilinear2d_aa, PIL's)
    row = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
    got = F.interpolate(t64(row.reshape(1, 1, 1, 8)), size=(1, 4), mode="bilinear", antialias=True).numpy()
    want = [(3 * 1 + 3 * 2 + 4) / 7, (2 + 3 * 4 + 3 * 8 + 16) / 8, (8 + 3 * 16 + 3 * 32 + 64) / 8,
            (32 + 3 * 64 + 3 * 128) / 7]
    np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-14)
    # every row of the filter sums to 1: a constant image stays constant, at any scale, either mode
    ones = tessel.ones(1, 2, 13, 9, dtype=tessel.float64)
    for mode in ("bilinear", "bicubic"):
        for size in ((4, 3), (13, 2), (20, 5)):
            np.testing.assert_allclose(F.interpolate(ones, size=size, mode=mode, antialias=True).numpy(), 1.0,
                                       rtol=1e-14)
    # torch 2.15's values (bicubic a = -0.5 with antialias; bilinear with align_corners): x = arange(16) ** 1.5
    x = t64((np.arange(16.0) ** 1.5).reshape(1, 1, 4, 4))
    np.testing.assert_allclose(F.interpolate(x, size=(3, 2), mode="bicubic", antialias=True).numpy().reshape(-1),
                               TORCH_BICUBIC_AA, rtol=1e-11)
    np.testing.assert_allclose(F.interpolate(x, size=(3, 2), mode="bilinear", antialias=True,
                                             align_corners=True).numpy().reshape(-1), TORCH_BILINEAR_AA_AC, rtol=1e-11)
    with pytest.raises(ValueError, match="restricted to bilinear, bicubic, and lanczos modes and requires a 4-D"):
        F.interpolate(t64(row.reshape(1, 1, 8)), size=4, mode="linear", antialias=True)
    # area: torch's adaptive average pooling to the output size, 1-D to 3-D
    v = np.random.default_rng(3).normal(size=(2, 3, 4, 6))
    area = F.interpolate(t64(v), size=(2, 3), mode="area").numpy()
    np.testing.assert_allclose(area, v.reshape(2, 3, 2, 2, 3, 2).mean(axis=(3, 5)), rtol=1e-13)
    np.testing.assert_allclose(F.interpolate(t64(v[:, :, 0]), scale_factor=0.5, mode="area").numpy(),
                               v[:, :, 0].reshape(2, 3, 3, 2).mean(-1), rtol=1e-13)


def test_pixel_shuffle_unfold_where_cdist_and_tensor_clamp_bounds():
    rng = np.random.default_rng(22)
    x = rng.normal(size=(2, 8, 3, 4))
    shuffled = nn.PixelShuffle(2)(t64(x))
    assert list(shuffled.shape) == [2, 2, 6, 8]
    np.testing.assert_array_equal(shuffled.numpy()[0, 1, 2 * 1 + 1, 2 * 3 + 0], x[0, 1 * 4 + 1 * 2 + 0, 1, 3])
    np.testing.assert_array_equal(nn.PixelUnshuffle(2)(shuffled).numpy(), x)
    v = rng.normal(size=(3, 10))
    windows = t64(v).unfold(1, 4, 3).numpy()
    np.testing.assert_array_equal(windows, np.lib.stride_tricks.sliding_window_view(v, 4, axis=1)[:, ::3])
    rows, cols = tessel.where(t64(v) > 0.5)
    want_rows, want_cols = np.nonzero(v > 0.5)
    assert rows.tolist() == want_rows.tolist() and cols.tolist() == want_cols.tolist()
    np.testing.assert_array_equal(tessel.where(t64(v) > 0, t64(v), 0.0).numpy(), np.where(v > 0, v, 0.0))
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    np.testing.assert_allclose(tessel.cdist(t64(a), t64(b)).numpy(),
                               np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)), rtol=1e-12)
    lo, hi = rng.normal(size=(3, 10)) - 1, rng.normal(size=(3, 10)) + 1
    np.testing.assert_array_equal(tessel.clamp(t64(v), min=t64(lo), max=t64(hi)).numpy(), np.clip(v, lo, hi))


def _bn_net():
    tessel.manual_seed(9)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3))


def test_sync_batch_norm_under_ddp_on_two_ranks_equals_batch_norm_on_one_rank():
    """convert_sync_batchnorm + DDP on 2 rank threads, each with half the batch, take the same SGD steps
    (losses, running statistics, every parameter) as plain BatchNorm on one rank with the whole batch;
    each step costs one all_gather forward and one all_reduce backward beyond DDP's."""
    import tessel.distributed as dist
    from tessel.nn.parallel import DistributedDataParallel as DDP
    rng = np.random.default_rng(14)
    x = tessel.tensor((rng.normal(size=(8, 2, 5, 5)) * 2 + 1).astype(np.float32))
    y = tessel.tensor(rng.integers(0, 3, size=8))

    from sharded_equivalence import train_classifier

    def train(net, xs, ys):
        return train_classifier(net, xs, ys, lambda p: tessel.optim.SGD(p, lr=0.2), 3)
    ref_net = _bn_net()
    ref = train(ref_net, x, y)
    got, traces = {}, {}

    def rank_fn(world):
        dist.init_process_group()
        net = nn.SyncBatchNorm.convert_sync_batchnorm(_bn_net())
        assert type(net[1]).__name__ == "SyncBatchNorm" and net[1].num_features == 4
        model = DDP(net)
        rows = slice(world.rank * 4, (world.rank + 1) * 4)
        with tessel.CommTracer() as fwd:
            probe = F.cross_entropy(model(x[rows]), y[rows])
        with tessel.CommTracer() as bwd:
            probe.backward()
        net.zero_grad()
        with tessel.no_grad():  # the probe step moved the running statistics: put them back
            net[1].reset_running_stats()
        traces[world.rank] = (fwd.summary(), bwd.summary())
        got[world.rank] = (train(model, x[rows], y[rows]), net[1].running_mean.numpy().copy(),
                           net[1].running_var.numpy().copy(), [p.detach().numpy().copy() for p in net.parameters()],
                           int(net[1].num_batches_tracked.item()))
        dist.destroy_process_group()
    tessel.run_ranks(2, rank_fn)
    # DDP: its buffers' broadcast each forward (3) and one gradient all_reduce; SyncBatchNorm: one all_gather
    # forward, one all_reduce backward
    assert traces[0] == traces[1] == ("broadcast(world) x3, all_gather(world) x1", "all_reduce(world) x2")
    np.testing.assert_allclose([(a + b) / 2 for a, b in zip(got[0][0], got[1][0])], ref, rtol=1e-5)
    for r in range(2):
        np.testing.assert_allclose(got[r][1], ref_net[1].running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[r][2], ref_net[1].running_var.numpy(), rtol=1e-5)
        for mine, want in zip(got[r][3], [p.detach().numpy() for p in ref_net.parameters()]):
            np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-6)
        assert got[r][4] == 3


def test_sync_batch_norm_combines_uneven_rank_batches_exactly_and_eval_is_local():
    """Ranks with 3 and 5 rows normalize as BatchNorm over all 8 (the per-rank mean / M2 / count combine);
    the input gradient of sum(out * r) over both ranks equals the one-process gradient; eval uses the
    running statistics without communicating."""
    import tessel.distributed as dist
    rng = np.random.default_rng(15)
    x = rng.normal(size=(8, 3, 4)) * 3 + 2
    r = rng.normal(size=(8, 3, 4))
    ref_bn = nn.BatchNorm1d(3, dtype=tessel.float64)
    xt = t64(x, True)
    ref_out = ref_bn(xt)
    (ref_out * t64(r)).sum().backward()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        bn = nn.SyncBatchNorm(3, dtype=tessel.float64)
        rows = slice(0, 3) if world.rank == 0 else slice(3, 8)
        xr = t64(x[rows], True)
        out = bn(xr)
        (out * t64(r[rows])).sum().backward()
        bn.eval()
        with tessel.CommTracer() as tracer:
            evaluated = bn(t64(x[rows])).numpy()
            local = nn.SyncBatchNorm(3, track_running_stats=False, dtype=tessel.float64)
            local.eval()  # no running statistics: this rank's batch statistics, without communicating
            np.testing.assert_allclose(local(t64(x[rows])).numpy().mean((0, 2)), 0.0, atol=1e-12)
        got[world.rank] = (out.detach().numpy(), xr.grad.numpy(), bn.running_var.numpy().copy(), evaluated,
                           tracer.summary())
        dist.destroy_process_group()
    tessel.run_ranks(2, rank_fn)
    np.testing.assert_allclose(np.concatenate([got[0][0], got[1][0]]), ref_out.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(np.concatenate([got[0][1], got[1][1]]), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[0][2], ref_bn.running_var.numpy(), rtol=1e-12)
    ref_bn.eval()
    np.testing.assert_allclose(np.concatenate([got[0][3], got[1][3]]), ref_bn(t64(x)).numpy(), rtol=1e-10)
    assert got[0][4] == "" and got[1][4] == ""


def test_convert_sync_batchnorm_keeps_parameters_dtype_and_leaves_instance_norm():
    bn = nn.BatchNorm1d(4, bias=False, dtype=tessel.float64)
    inorm = nn.InstanceNorm2d(3, affine=True)
    net = nn.Sequential(bn, nn.ReLU(), inorm)
    weight, running_mean = bn.weight, bn.running_mean
    opt = tessel.optim.SGD(net.parameters(), lr=0.1)
    net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    sync = net[0]
    assert type(sync).__name__ == "SyncBatchNorm" and sync.bias is None
    with tessel.no_grad():  # the same tensors, as torch's (writes through either name show in the other)
        weight.fill_(3.0)
        running_mean.fill_(0.5)
    assert sync.weight.numpy().tolist() == [3.0] * 4 and sync.running_mean.numpy().tolist() == [0.5] * 4
    assert sync.weight.dtype == tessel.float64 and sync.running_var.dtype == tessel.float64
    assert type(net[2]).__name__ == "InstanceNorm2d"  # not a batch norm: left alone, as torch
    x = t64(np.random.default_rng(18).normal(size=(5, 4)))
    sync(x).sum().backward()
    opt.step()  # the optimizer built before the conversion still steps the live weight
    assert weight.grad is not None
    rm = nn.SyncBatchNorm(3, track_running_stats=False)
    rm.eval()
    assert "bias=True" in repr(rm)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def _np_grid_sample_bilinear(x, grid, padding_mode, align_corners):
    """Naive loops: each output point's four neighbours, each read through the padding rule."""
    n, c, h, w = x.shape
    out = np.zeros((n, c) + grid.shape[1:3])

    def pixel(v, size):
        return (v + 1) / 2 * (size - 1) if align_corners else ((v + 1) * size - 1) / 2

    def mirror(p, size):  # reflect at the image's edges (pixel corners, or centers when align_corners)
        lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if hi == lo:
            return 0.0
        while p < lo or p > hi:
            p = 2 * lo - p if p < lo else 2 * hi - p
        return min(max(p, 0.0), size - 1.0)
    for b in range(n):
        for i in range(grid.shape[1]):
            for j in range(grid.shape[2]):
                px, py = pixel(grid[b, i, j, 0], w), pixel(grid[b, i, j, 1], h)
                if padding_mode == "border":
                    px, py = min(max(px, 0), w - 1), min(max(py, 0), h - 1)
                elif padding_mode == "reflection":
                    px, py = mirror(px, w), mirror(py, h)
                x0, y0 = int(np.floor(px)), int(np.floor(py))
                for yy in (y0, y0 + 1):
                    for xx in (x0, x0 + 1):
                        if 0 <= yy < h and 0 <= xx < w:
                            out[b, :, i, j] += (1 - abs(px - xx)) * (1 - abs(py - yy)) * x[b, :, yy, xx]
    return out


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_bilinear_matches_loops_and_both_gradients_match_finite_differences(padding_mode, align):
    rng = np.random.default_rng(30)
    x = rng.normal(size=(2, 3, 4, 5))
    grid = rng.uniform(-1.7, 1.7, size=(2, 3, 2, 2))
    xt, gt = t64(x, True), t64(grid, True)
    out = F.grid_sample(xt, gt, mode="bilinear", padding_mode=padding_mode, align_corners=align)
    np.testing.assert_allclose(out.detach().numpy(), _np_grid_sample_bilinear(x, grid, padding_mode, align),
                               rtol=1e-12, atol=1e-12)
    r = rng.normal(size=(2, 3, 3, 2))
    (out * t64(r)).sum().backward()

    def loss(a, b):
        return float((F.grid_sample(t64(a), t64(b), padding_mode=padding_mode, align_corners=align).numpy()
                      * r).sum())
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(lambda a: loss(a, grid), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gt.grad.numpy(), finite_difference(lambda b: loss(x, b), grid), rtol=1e-5, atol=1e-7)


def test_affine_grid_identity_reproduces_the_input_and_a_shift_moves_it_by_a_pixel():
    rng = np.random.default_rng(31)
    x = rng.normal(size=(2, 3, 4, 6))
    eye = t64(np.tile(np.eye(2, 3), (2, 1, 1)))
    for align in (False, True):
        grid = F.affine_grid(eye, (2, 3, 4, 6), align_corners=align)
        assert list(grid.shape) == [2, 4, 6, 2]
        xs = (2 * np.arange(6) + 1) / 6 - 1 if not align else np.linspace(-1, 1, 6)
        np.testing.assert_allclose(grid.numpy()[1, 2, :, 0], xs, rtol=0, atol=1e-15)
        for mode in ("bilinear", "nearest", "bicubic"):
            np.testing.assert_allclose(F.grid_sample(t64(x), grid, mode=mode, align_corners=align).numpy(), x,
                                       rtol=0, atol=1e-12)
    shift = np.tile(np.eye(2, 3), (2, 1, 1))
    shift[:, 0, 2] = 2 / 6  # one pixel to the right in normalized width units (align_corners=False)
    moved = F.grid_sample(t64(x), F.affine_grid(t64(shift), (2, 3, 4, 6), align_corners=False),
                          align_corners=False).numpy()
    np.testing.assert_allclose(moved[..., :-1], x[..., 1:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(moved[..., -1], 0.0, atol=1e-15)
    cube = rng.normal(size=(1, 2, 3, 4, 5))
    grid3 = F.affine_grid(t64(np.eye(3, 4)[None]), (1, 2, 3, 4, 5), align_corners=False)
    assert list(grid3.shape) == [1, 3, 4, 5, 3]
    np.testing.assert_allclose(F.grid_sample(t64(cube), grid3, align_corners=False).numpy(), cube, atol=1e-12)


def test_grid_sample_nearest_rounds_half_to_even_and_bicubic_agrees_with_interpolate():
    x = t64(np.arange(4.0).reshape(1, 1, 1, 4))
    # align_corners=True: x pixel = (g + 1) * 1.5; g = -1/3 -> 1.0, g = 0 -> 1.5 (ties to 2), g = -2/3 -> 0.5 (to 0)
    grid = t64(np.array([[[[-1 / 3, 0.0], [0.0, 0.0], [-2 / 3, 0.0]]]]))
    np.testing.assert_array_equal(F.grid_sample(x, grid, mode="nearest", align_corners=True).numpy().ravel(),
                                  [1.0, 2.0, 0.0])
    # bicubic grid_sample at interpolate's sample points (align_corners=True, border = interpolate's edge clamp)
    rng = np.random.default_rng(32)
    img = rng.normal(size=(1, 2, 5, 6))
    ys, xs = np.linspace(-1, 1, 7), np.linspace(-1, 1, 9)
    g = np.stack(np.meshgrid(xs, ys), -1)[None]
    sampled = F.grid_sample(t64(img), t64(g), mode="bicubic", padding_mode="border", align_corners=True).numpy()
    resized = F.interpolate(t64(img), size=(7, 9), mode="bicubic", align_corners=True).numpy()
    np.testing.assert_allclose(sampled, resized, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="expected padding_mode to be 'zeros', 'border', or 'reflection'"):
        F.grid_sample(x, grid, padding_mode="wrap")
    with pytest.raises(RuntimeError, match="expected grid to have size 2 in last dimension"):
        F.grid_sample(x, t64(np.zeros((1, 1, 1, 3))))
    with pytest.raises(ValueError, match="Expected a batch of 2D affine matrices of shape Nx2x3"):
        F.affine_grid(t64(np.zeros((2, 3, 3))), (2, 1, 4, 4), align_corners=False)
