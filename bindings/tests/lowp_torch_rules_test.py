"""Low-precision convolution numerics against torch 2.15 on CPU (the seeded end-to-end sweep's item 7). Every
expected list below is what torch 2.15 printed for the same call on an x86 CPU with AVX512 (oneDNN's bfloat16
convolutions; no float16 oneDNN, so torch's slow_conv* kernels run float16), compared bit for bit:

- bfloat16 ConvTranspose (module, functional, CPU bf16 autocast) and float16 Conv add the bias to the float32 sums and
  round once; float16 ConvTranspose, and bfloat16 with output_padding >= stride, round the columns, then after each
  kernel offset of col2im, then after the bias.
"""
import numpy as np
import pytest

import tessel

nn, F = tessel.nn, tessel.nn.functional
bf, hf = tessel.bfloat16, tessel.float16


def vals(n, seed, scale=1.0):
    return [(((i * 37 + seed * 11) % 23) - 11) / 7.0 * scale for i in range(n)]


def T(shape, seed, scale=1.0):
    """A deterministic float32 tensor (the same values the torch run was given)."""
    return tessel.tensor(vals(int(np.prod(shape)), seed, scale)).reshape(*shape)


def same(t, expected, dtype):
    assert t.dtype == dtype, t.dtype
    np.testing.assert_array_equal(t.detach().float().numpy().ravel(), np.asarray(expected, dtype=np.float32))


# torch 2.15's outputs for the calls in the tests below
CONVT1D_AUTOCAST = [
    8.4375, 8.4375, 11.375, 9.5625, 8.875, 10.1875, 10.625, 9.1875, 9.375, 9.875, 9.6875, -14.5625, -11.9375,
    -11.8125, -13.1875, -13.75, -13.875, -12.4375, -12.75, -14.125, -13.5, -13.25, 19.875, 22.5, 19.875, 21.125,
    21.75, 21.125, 20.5, 21.125, 21.75, 21.125, 21.125]
CONVT1D_BF16 = [
    8.4375, 8.4375, 11.375, 9.5625, 8.875, 10.1875, 10.625, 9.1875, 9.375, 9.875, 9.6875, -14.5625, -11.9375,
    -11.8125, -13.1875, -13.75, -13.875, -12.4375, -12.75, -14.125, -13.5, -13.25, 19.875, 22.5, 19.875, 21.125,
    21.75, 21.125, 20.5, 21.125, 21.75, 21.125, 21.125]
CONVT2D_BF16_SLOW = [
    3.9375, 8.375, 3.375, 5.3125, 10.0, 2.265625, 3.9375, 5.3125, 3.078125, 7.5, 2.46875, 6.65625, 4.34375,
    3.015625, 6.78125, 5.3125, 0.09375, 8.3125, 7.4375, 6.65625, 2.78125, 7.125, 8.4375, 5.3125, 3.328125, 7.125,
    5.25, 3.484375, 5.6875, 7.5625, 4.40625, 5.3125, 0.59375, 7.5625, 9.5, 0.3125, 0.59375, 8.5, 5.03125, 5.3125,
    3.5625, 6.75, 4.5, 3.109375, 4.96875, 7.21875, 3.40625, 5.3125, 4.6875, 7.84375, 6.09375, 3.59375, 5.34375,
    7.09375, 3.28125, 5.3125, 5.3125, 5.3125, 5.3125, 5.3125, 5.3125, 5.3125, 5.3125, 5.3125]
CONV2D_FP16 = [
    7.48828125, 7.88671875, 6.0078125, 7.296875, 6.875, 5.796875, 8.59375, 5.45703125, 5.69140625, 6.41796875,
    6.8671875, 6.61328125, 6.21484375, 7.8671875, 6.0390625, 5.68359375, -10.96875, -10.5234375, -12.46875,
    -11.1015625, -9.40625, -12.7109375, -12.0234375, -11.90625, -13.6953125, -9.703125, -11.359375, -13.625,
    -10.828125, -11.3515625, -9.7265625, -12.234375]
CONV1D_FP16_AUTOCAST = [
    14.125, 12.2109375, 13.59375, 14.265625, 14.0, 14.203125, 12.296875, -6.94921875, -4.91796875, -5.0, -7.6640625,
    -5.8671875, -7.12109375, -5.08984375]
CONV3D_FP16 = [
    10.4765625, 8.296875, 8.390625, 10.6640625, 10.5390625, 10.703125, 10.796875, 10.7265625, -6.1875, -1.708984375,
    -4.484375, -0.94384765625, -0.84130859375, -4.8125, -2.1875, -6.39453125]
CONVT2D_FP16 = [
    -0.94287109375, 1.9296875, -2.54296875, 2.71484375, -0.1571044921875, -1.943359375, 3.171875, -6.96875,
    3.599609375, -1.513671875, 1.3994140625, 2.669921875, -4.68359375, 3.572265625, -3.61328125, 1.0859375,
    0.8564453125, -0.65625, 3.6015625, -2.0859375, -0.54296875, -3.013671875, 1.142578125, 2.71484375, -0.728515625]
CONVT2D_FP16_BIAS = [6.47265625, -3.66796875, 6.8984375, 5.96875, -1.3828125, 6.875, 4.15625, 2.64453125, 6.90234375]


def test_bfloat16_conv_transpose_adds_the_bias_before_rounding():
    ct = nn.ConvTranspose1d(2, 3, 3, stride=2)
    with tessel.no_grad():
        ct.weight.copy_(T((2, 3, 3), 1, 0.5))
        ct.bias.copy_(tessel.tensor([9.7, -13.3, 21.1]))
    x = T((1, 2, 5), 2)
    with tessel.autocast("cpu", dtype=bf):
        same(ct(x), CONVT1D_AUTOCAST, bf)
    same(ct.to(bf)(x.to(bf)), CONVT1D_BF16, bf)
    # output_padding >= stride keeps torch off oneDNN: its slow kernel rounds per kernel offset
    w, b = T((2, 1, 3, 3), 5, 0.5).to(bf), tessel.tensor([5.3]).to(bf)
    same(F.conv_transpose2d(T((1, 2, 3, 3), 6, 3.0).to(bf), w, b, stride=1, dilation=2, output_padding=1),
         CONVT2D_BF16_SLOW, bf)


def test_float16_convolutions_round_once_after_the_bias():
    c = nn.Conv2d(2, 2, 3, padding=1)
    with tessel.no_grad():
        c.weight.copy_(T((2, 2, 3, 3), 5, 0.5))
        c.bias.copy_(tessel.tensor([7.1, -11.3]))
    same(c.half()(T((1, 2, 4, 4), 6).half()), CONV2D_FP16, hf)
    c1 = nn.Conv1d(2, 2, 3)
    with tessel.no_grad():
        c1.weight.copy_(T((2, 2, 3), 7, 0.5))
        c1.bias.copy_(tessel.tensor([13.7, -6.1]))
    with tessel.autocast("cpu", dtype=hf):
        same(c1(T((1, 2, 9), 8)), CONV1D_FP16_AUTOCAST, hf)
    same(F.conv3d(T((1, 1, 3, 3, 3), 9).half(), T((2, 1, 2, 2, 2), 10, 0.5).half(), tessel.tensor([9.9, -3.3]).half()),
         CONV3D_FP16, hf)


def test_float16_conv_transpose_rounds_after_each_kernel_offset():
    x, w = T((1, 2, 3, 3), 11).half(), T((2, 1, 3, 3), 12, 0.7).half()
    same(F.conv_transpose2d(x, w), CONVT2D_FP16, hf)
    same(F.conv_transpose2d(x, w, tessel.tensor([3.3]).half(), stride=1, padding=1), CONVT2D_FP16_BIAS, hf)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
