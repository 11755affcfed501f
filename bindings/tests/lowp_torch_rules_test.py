"""Low-precision convolution and batch-norm numerics against torch 2.15 on CPU (the seeded end-to-end sweep's items
7 and 9). Every expected list below is what torch 2.15 printed for the same call on an x86 CPU with AVX512 (oneDNN's
bfloat16 convolutions; no float16 oneDNN, so torch's slow_conv* kernels run float16), compared bit for bit:

- bfloat16 ConvTranspose (module, functional, CPU bf16 autocast) and float16 Conv add the bias to the float32 sums and
  round once; float16 ConvTranspose, and bfloat16 with output_padding >= stride, round the columns, then after each
  kernel offset of col2im, then after the bias.
- BatchNorm training with 16-bit input and parameters normalizes with the mean and invstd rounded to the input's
  dtype, blends the running statistics in that dtype's arithmetic (momentum=None: the cumulative average too), and
  differentiates with the rounded statistics; [N, C] input takes torch's channels-last kernel, a transposed input its
  generic one; a bfloat16 input into a float32 BatchNorm keeps torch's float32 statistics.
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
BN2D_BF16_Y = [
    -1.015625, 1.796875, -0.00885009765625, -1.8203125, 0.9921875, -0.81640625, 2.0, 0.189453125, -1.6171875,
    -0.8359375, 0.1015625, -1.3515625, -0.41796875, 0.515625, -0.9375, -0.0023651123046875, -1.453125, -0.5234375,
    0.2578125, 2.203125, 0.953125, -0.30078125, 1.6484375, 0.396484375, 2.34375, 1.09375, -0.16015625, 0.9921875,
    -0.81640625, 2.0, 0.189453125, -1.6171875, 1.203125, -0.61328125, 2.203125, 0.392578125, 0.515625, -0.9375,
    -0.0023651123046875, -1.453125, -0.5234375, 0.412109375, -1.0390625, -0.1064453125, 0.828125, 1.6484375,
    0.396484375, 2.34375, 1.09375, -0.16015625, 1.7890625, 0.53515625, 2.484375, 1.234375]
BN2D_BF16_GX = [
    0.10205078125, -0.0693359375, 0.8671875, -0.51171875, -0.6796875, 0.25390625, 0.08544921875, 1.015625,
    -0.357421875, 0.2099609375, -0.29296875, -0.1728515625, 0.515625, 0.0147705078125, 0.1337890625, -0.369140625,
    -0.2490234375, 0.44140625, -0.007232666015625, -0.154296875, 0.515625, -0.423828125, -0.5703125, 0.09765625,
    -0.049560546875, 0.6171875, -0.318359375, -0.6796875, 0.25390625, 0.08544921875, 1.015625, -0.357421875,
    -0.52734375, 0.408203125, 0.2373046875, -1.140625, 0.0147705078125, 0.1337890625, -0.369140625, -0.2490234375,
    0.44140625, -0.061767578125, 0.057861328125, -0.447265625, 0.2451171875, -0.5703125, 0.09765625,
    -0.049560546875, 0.6171875, -0.318359375, -0.46484375, 0.2001953125, 0.0556640625, 0.71875]
BN2D_BF16_GW = [-8.625, -8.3125, -8.1875]
BN2D_BF16_GB = [2.140625, -2.4375, 2.859375]
BN2D_BF16_Y2 = [
    -1.015625, 1.7890625, -0.01214599609375, -1.8203125, 0.9921875, -0.8125, 2.0, 0.189453125, -1.625, -0.7109375,
    0.25, -1.2421875, -0.283203125, 0.67578125, -0.81640625, 0.1455078125, -1.34375, -0.388671875, 0.10400390625,
    2.015625, 0.78515625, 2.6875, 1.4609375, 0.23828125, 2.140625, 0.921875, -0.302734375, 0.9921875, -0.8125, 2.0,
    0.189453125, -1.625, 1.1953125, -0.6171875, 2.203125, 0.388671875, 0.67578125, -0.81640625, 0.1455078125,
    -1.34375, -0.388671875, 0.5703125, -0.921875, 0.03662109375, -1.453125, 1.4609375, 0.23828125, 2.140625,
    0.921875, -0.302734375, 1.6015625, 0.376953125, 2.28125, 1.0546875]
BN2D_BF16_RM = [0.10546875, 0.65625, 0.0234375]
BN2D_BF16_RV = [5.875, 6.15625, 6.0625]
BN2D_BF16_EVAL = [
    0.75390625, -0.62109375, 1.5234375, 0.1435546875, -1.234375, 0.91015625, -0.466796875, 1.671875, 0.296875,
    0.427734375, -0.69921875, 0.025634765625, -1.1015625, -0.376953125, 0.34765625, -0.77734375, -0.0546875,
    0.66796875, 1.40625, 0.46875, 1.921875, 0.98828125, 0.049560546875, 1.5078125, 0.5703125, 2.03125, 1.09375,
    -1.234375, 0.91015625, -0.466796875, 1.671875, 0.296875, -1.078125, 1.0625, -0.314453125, 1.8203125,
    -0.376953125, 0.34765625, -0.77734375, -0.0546875, 0.66796875, -0.45703125, 0.267578125, -0.859375,
    -0.134765625, 0.049560546875, 1.5078125, 0.5703125, 2.03125, 1.09375, 0.15234375, 1.6171875, 0.67578125,
    2.140625]
BN2D_MIXED_Y = [
    -0.9375, 1.2265625, -0.1630859375, -1.5546875, 0.609375, -0.78515625, 1.390625, -0.00848388671875, -1.40625,
    0.6171875, -0.71484375, 1.359375, 0.024169921875, -1.3046875, 0.765625, -0.56640625, 1.5078125, 0.171875,
    -0.9375, 1.234375, -0.1630859375, -1.5546875, 0.609375, -0.78125, 1.3828125, -0.00823974609375, -1.40625,
    0.609375, -0.78515625, 1.390625, -0.00848388671875, -1.40625, 0.765625, -0.625, 1.5390625, 0.146484375,
    -1.3046875, 0.765625, -0.56640625, 1.5078125, 0.171875, -1.1640625, 0.9140625, -0.419921875, -1.75, 0.609375,
    -0.78125, 1.3828125, -0.00823974609375, -1.40625, 0.765625, -0.62890625, 1.546875, 0.146484375]
BN1D_FP16_Y = [
    -0.8876953125, 0.810546875, -0.359130859375, 1.3681640625, 0.63427734375, -1.048828125, 1.4365234375,
    -0.50390625, -1.3447265625, 0.381591796875, -0.89794921875, 0.935546875, 0.177490234375, -1.4775390625,
    0.89794921875, -0.93603515625, 1.7001953125, -0.047760009765625, -1.4365234375, 0.50390625, -0.279052734375,
    1.3828125, 0.359130859375, -1.3671875]
BN3D_BF16_Y = [
    0.416015625, -0.9453125, 1.171875, -0.1904296875, -1.5546875, 0.56640625, -0.796875, 1.3203125, -0.0380859375,
    -1.3984375, 0.71875, -0.64453125, 1.46875, 0.11279296875, -1.25, 0.87109375, -0.4921875, 1.625, 0.3203125,
    -1.0390625, 1.078125, -0.28515625, -1.6484375, 0.47265625, -0.890625, 1.2265625, -0.1337890625, -1.4921875,
    0.625, -0.73828125, 1.3828125, 0.0181884765625, -1.34375, 0.77734375, -0.5859375, 1.5234375, 0.11279296875,
    -1.25, 0.87109375, -0.4921875, 1.625, 0.263671875, -1.09375, 1.015625, -0.341796875, -1.703125, 0.416015625,
    -0.9453125, 1.171875, -0.1904296875, -1.5546875, 0.56640625, -0.796875, 1.3203125, 0.0181884765625, -1.34375,
    0.77734375, -0.5859375, 1.5234375, 0.1689453125, -1.1875, 0.9296875, -0.435546875, 1.6875, 0.3203125,
    -1.0390625, 1.078125, -0.28515625, -1.6484375, 0.47265625, -0.890625, 1.2265625]
BN3D_BF16_RM = [0.55859375, -0.87890625]
BN3D_BF16_RV = [3.125, 1.8984375]
BN1D_BF16_TRANSPOSED_Y = [
    -1.40625, 1.375, 0.7890625, 0.203125, -0.384765625, 1.109375, 0.42578125, -0.255859375, -0.94140625, -1.6171875,
    -0.7109375, -1.2734375, 1.421875, 0.8515625, 0.28515625, -0.97265625, -1.5625, 1.2265625, 0.640625,
    0.053466796875, 1.6171875, 0.9453125, 0.2578125, -0.42578125, -1.109375, -0.283203125, -0.8515625, -1.421875,
    1.2890625, 0.71484375]
BN1D_BF16_TRANSPOSED_RM = [0.2470703125, 0.1552734375, 0.26171875]
BN1D_BF16_TRANSPOSED_RV = [1.8515625, 1.6015625, 1.90625]
BN2D_MIXED_RV = [1.260374665260315, 1.293360710144043, 1.2594695091247559]


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


def test_bfloat16_batch_norm_training_normalizes_with_rounded_statistics():
    bn = nn.BatchNorm2d(3, momentum=None)
    with tessel.no_grad():
        bn.weight.copy_(tessel.tensor([1.3, -0.7, 0.9]))
        bn.bias.copy_(tessel.tensor([0.2, -0.4, 1.1]))
    bn = bn.to(bf)
    x = (T((2, 3, 3, 3), 13, 2.0) + 1.3).to(bf).requires_grad_()
    y = bn(x)
    y.backward(T((2, 3, 3, 3), 14).to(bf))
    same(y, BN2D_BF16_Y, bf)
    same(x.grad, BN2D_BF16_GX, bf)
    same(bn.weight.grad, BN2D_BF16_GW, bf)
    same(bn.bias.grad, BN2D_BF16_GB, bf)
    same(bn((T((2, 3, 3, 3), 15, 3.0) - 0.7).to(bf)), BN2D_BF16_Y2, bf)
    same(bn.running_mean, BN2D_BF16_RM, bf)  # momentum=None: the average of the two batches
    same(bn.running_var, BN2D_BF16_RV, bf)
    bn.eval()
    same(bn(T((2, 3, 3, 3), 16, 2.0).to(bf)), BN2D_BF16_EVAL, bf)
    # a bfloat16 input into a float32 BatchNorm: torch's mixed kernel keeps float32 statistics (its running
    # variance is a float32 sum whose last bit depends on the summation order)
    bm = nn.BatchNorm2d(3)
    same(bm(T((2, 3, 3, 3), 13, 2.0).to(bf)), BN2D_MIXED_Y, bf)
    np.testing.assert_allclose(bm.running_var.numpy(), BN2D_MIXED_RV, rtol=1e-6)


def test_sixteen_bit_batch_norm_layouts_and_momentum():
    b1 = nn.BatchNorm1d(4, affine=False, track_running_stats=False).half()
    same(b1(T((6, 4), 17, 3.0).half()), BN1D_FP16_Y, hf)
    b3 = nn.BatchNorm3d(2, momentum=0.3).to(bf)
    with tessel.no_grad():
        b3.running_mean.copy_(tessel.tensor([0.5, -1.5]))
        b3.running_var.copy_(tessel.tensor([2.0, 0.25]))
    same(b3((T((2, 2, 2, 3, 3), 18, 2.5) + 0.6).to(bf)), BN3D_BF16_Y, bf)
    same(b3.running_mean, BN3D_BF16_RM, bf)
    same(b3.running_var, BN3D_BF16_RV, bf)
    bt = nn.BatchNorm1d(3).to(bf)
    same(bt((T((2, 5, 3), 19, 3.0) + 2.2).to(bf).transpose(1, 2)), BN1D_BF16_TRANSPOSED_Y, bf)
    same(bt.running_mean, BN1D_BF16_TRANSPOSED_RM, bf)
    same(bt.running_var, BN1D_BF16_TRANSPOSED_RV, bf)


@pytest.mark.parametrize("dtype,torch_sums", [
    ("bfloat16", (10.699743270874023, 833.8201389312744)),  # torch's
    ("float16", (10.748342037200928, 835.616934299469)),  # torch's
])
def test_sixteen_bit_embedding_gradient_rounds_after_each_added_row(dtype, torch_sums):
    """torch adds each looked-up row's gradient into a gradient of the weight's dtype, in index order, rounding after
    every add; summed in float32 and rounded once, repeated indices gave other values (10.734 / 835.827 for
    bfloat16). Exact float64 sums (plain and position-weighted) of the seeded gradient."""
    tessel.manual_seed(0)
    e = tessel.nn.Embedding(16, 8).to(getattr(tessel, dtype))
    idx = tessel.randint(0, 16, (4, 20))
    e(idx).backward((tessel.randn(4, 20, 8) * 0.37).to(getattr(tessel, dtype)))
    w = tessel.arange(128, dtype=tessel.float64).reshape(16, 8)
    g = e.weight.grad
    assert g.dtype == getattr(tessel, dtype)
    assert (g.double().sum().item(), (g.double() * w).sum().item()) == torch_sums


# torch 2.15's values for _cross_entropy_case: log_softmax sums, then (loss, grad sum, weighted grad sum) per reduction,
# then the (N, C, d) case
_TORCH_CE = {
    "bfloat16": [(-12780.3994140625, -12897986.090820312), (6.0, -0.0003734163474291563, -2.503535848343745),
                 (186.0, 0.006116218864917755, -63.00287037342787),
                 (183.734375, 0.006116218864917755, -63.00287037342787),
                 (2.671875, -2.288818359375e-05, -4.978582382202148)],
    "float16": [(-12781.550537109375, -12898887.297729492), (5.92578125, 8.618831634521484e-05, -2.3908026814460754),
                (183.75, 0.0015154480934143066, -73.79284858703613),
                (183.751953125, 0.0015154480934143066, -73.79284858703613),
                (2.66015625, 1.436471939086914e-05, -4.9687371253967285)]}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sixteen_bit_log_softmax_and_cross_entropy_round_as_torchs(dtype):
    """torch's log_softmax along the last dim keeps the sum of exponentials and its log in the 16-bit dtype; nll_loss
    adds the rows' losses in the dtype through its cascade of partial sums and divides by the count in the dtype;
    along dim 1 ((N, C, d) logits) the log-sum-exp stays float32. A float32 fused kernel rounded once printed 5.9375
    for torch's 6.0 (bfloat16 mean) and differed in most gradient elements. Exact float64 sums of each result."""
    F = tessel.nn.functional
    dt = getattr(tessel, dtype)
    tessel.manual_seed(0)
    x = (tessel.randn(32, 64) * 2).to(dt).requires_grad_()
    t = tessel.randint(0, 64, (32,))
    t[3] = -100
    pos = tessel.arange(2048, dtype=tessel.float64).reshape(32, 64)
    y = F.log_softmax(x.detach(), -1)
    got = [(y.double().sum().item(), (y.double() * pos).sum().item())]
    for red in ("mean", "sum", "none"):
        xx = x.detach().clone().requires_grad_()
        loss = F.cross_entropy(xx, t, reduction=red)
        (loss.sum() if red == "none" else loss).backward()
        got.append((loss.double().sum().item(), xx.grad.double().sum().item(), (xx.grad.double() * pos).sum().item()))
    x3 = (tessel.randn(2, 8, 5) * 2).to(dt).requires_grad_()
    t3 = tessel.randint(0, 8, (2, 5))
    loss3 = F.cross_entropy(x3, t3)
    loss3.backward()
    got.append((loss3.item(), x3.grad.double().sum().item(),
                (x3.grad.double() * tessel.arange(80, dtype=tessel.float64).reshape(2, 8, 5)).sum().item()))
    assert got == _TORCH_CE[dtype]


@pytest.mark.parametrize("dtype,torch_values", [
    ("bfloat16", (4.3125, 0.00012081593740731478, 0.6476753001334146)),  # torch's
    ("float16", (4.27734375, 1.1086463928222656e-05, 0.39555490016937256)),  # torch's
])
def test_sixteen_bit_cross_entropy_mean_over_many_rows_divides_by_the_count_in_the_dtype(dtype, torch_values):
    """300 rows (several levels of torch's cascade of partial sums), 257 of them valid: torch's total weight is the
    count in the dtype (bfloat16 256), in the loss and in its gradient."""
    dt = getattr(tessel, dtype)
    tessel.manual_seed(1)
    x = (tessel.randn(300, 16) * 2).to(dt).requires_grad_()
    t = tessel.randint(0, 16, (300,))
    t[:43] = -100
    loss = tessel.nn.functional.cross_entropy(x, t)
    loss.backward()
    pos = tessel.arange(4800, dtype=tessel.float64).reshape(300, 16)
    assert (loss.item(), x.grad.double().sum().item(), (x.grad.double() * pos).sum().item()) == torch_values


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
