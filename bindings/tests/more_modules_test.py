"""torch.nn's remaining common layers (tessel/nn/_more_modules.py) against numpy: ChannelShuffle, MaxUnpool1d/2d/3d
(the maxima back at their pooling indices, gradients to them), MultiLabelMarginLoss and
TripletMarginWithDistanceLoss written out as loops, FeatureAlphaDropout's per-channel draw and its preserved
mean and variance, LazyLinear's deferred shape and torch's initialization, and DataParallel on the CPU (the
module itself, state-dict keys under "module.")."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F

RNG = np.random.default_rng(2)


def t(a, **kw):
    return tessel.tensor(np.asarray(a), **kw)


def test_channel_shuffle_interleaves_the_groups():
    x = RNG.standard_normal((2, 6, 3, 2))
    want = x.reshape(2, 3, 2, 3, 2).transpose(0, 2, 1, 3, 4).reshape(2, 6, 3, 2)
    np.testing.assert_array_equal(F.channel_shuffle(t(x), 3).numpy(), want)
    np.testing.assert_array_equal(nn.ChannelShuffle(3)(t(x)).numpy(), want)
    with pytest.raises(RuntimeError, match="Number of channels must be divisible by groups. Got 6 channels and 4"):
        F.channel_shuffle(t(x), 4)


def unpool_reference(pooled, indices, out_shape):
    out = np.zeros(out_shape).reshape(out_shape[0], out_shape[1], -1)
    for n in range(out.shape[0]):
        for c in range(out.shape[1]):
            out[n, c, indices[n, c].reshape(-1)] = pooled[n, c].reshape(-1)
    return out.reshape(out_shape)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_puts_the_maxima_back_and_routes_their_gradient(nd):
    shape = (2, 3) + (4,) * nd
    x = RNG.standard_normal(shape)
    pool = getattr(F, "max_pool%dd" % nd)
    y, idx = pool(t(x), 2, return_indices=True)
    unpool = getattr(nn, "MaxUnpool%dd" % nd)(2)
    out = unpool(y, idx)
    want = unpool_reference(y.numpy(), idx.numpy(), shape)
    np.testing.assert_array_equal(out.numpy(), want)
    # every window's maximum sits where it was: out equals x there and is 0 elsewhere
    np.testing.assert_array_equal(out.numpy()[want != 0], x[want != 0])
    assert (want != 0).sum() == y.numel()
    yg = y.detach().requires_grad_(True)
    weights = RNG.standard_normal(shape)
    (unpool(yg, idx) * t(weights)).sum().backward()
    np.testing.assert_array_equal(yg.grad.numpy().reshape(2, 3, -1),
                                  np.take_along_axis(weights.reshape(2, 3, -1), idx.numpy().reshape(2, 3, -1), 2))
    with pytest.raises(RuntimeError, match="Expected shape of indices to be same as that of the input"):
        unpool(y, idx.narrow(1, 0, 1))


def test_max_unpool_output_size_and_its_bounds():
    x = RNG.standard_normal((1, 1, 4, 4))
    y, idx = F.max_pool2d(t(x), 2, return_indices=True)
    out = F.max_unpool2d(y, idx, 2, output_size=[5, 5])
    assert tuple(out.shape) == (1, 1, 5, 5)
    np.testing.assert_array_equal(out.numpy().reshape(-1)[:16][idx.numpy().reshape(-1)], y.numpy().reshape(-1))
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool2d(y, idx, 2, output_size=[7, 7])


def multilabel_reference(x, y):
    losses = []
    for row, labels in zip(x, y):
        targets = []
        for v in labels:
            if v < 0:
                break
            targets.append(v)
        total = 0.0
        for j in targets:
            for i in range(len(row)):
                if i not in targets:
                    total += max(0.0, 1 - (row[j] - row[i]))
        losses.append(total / len(row))
    return np.array(losses)


def test_multilabel_margin_and_triplet_with_distance_losses():
    x = RNG.standard_normal((3, 5))
    y = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0]])
    want = multilabel_reference(x, y)
    np.testing.assert_allclose(F.multilabel_margin_loss(t(x), t(y), reduction="none").numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(nn.MultiLabelMarginLoss()(t(x), t(y)).item(), want.mean(), rtol=1e-12)
    np.testing.assert_allclose(F.multilabel_margin_loss(t(x[0]), t(y[0])).item(), want[0], rtol=1e-12)
    a, p, n = (RNG.standard_normal((4, 3)) for _ in range(3))

    def l1(u, v):
        return np.abs(u - v).sum(-1)
    want = np.maximum(l1(a, p) - np.minimum(l1(a, n), l1(p, n)) + 0.5, 0)
    loss = nn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: (u - v).abs().sum(-1), margin=0.5,
                                            swap=True, reduction="none")
    np.testing.assert_allclose(loss(t(a), t(p), t(n)).numpy(), want, rtol=1e-12)
    euclid = np.sqrt(((a - p + 1e-6) ** 2).sum(-1)) - np.sqrt(((a - n + 1e-6) ** 2).sum(-1))
    np.testing.assert_allclose(F.triplet_margin_with_distance_loss(t(a), t(p), t(n)).item(),
                               np.maximum(euclid + 1.0, 0).mean(), rtol=1e-12)
    with pytest.raises(ValueError, match="expected margin to be greater than 0"):
        nn.TripletMarginWithDistanceLoss(margin=0)


def test_feature_alpha_dropout_drops_whole_channels_and_keeps_the_moments():
    tessel.manual_seed(0)
    x = t(RNG.standard_normal((64, 32, 50)).astype(np.float32))
    out = F.feature_alpha_dropout(x, 0.3, training=True).numpy()
    alpha_p = -1.7580993408473766
    a = ((1 - 0.3) * (1 + 0.3 * alpha_p ** 2)) ** -0.5
    dropped_value = alpha_p * a + (-a * alpha_p * 0.3)
    dropped = np.all(np.isclose(out, dropped_value, atol=1e-5), axis=2)  # a channel is dropped whole or not at all
    kept = np.allclose(out[~dropped], x.numpy()[~dropped] * a - a * alpha_p * 0.3, atol=1e-5)
    assert kept and abs(dropped.mean() - 0.3) < 0.03
    assert abs(out.mean()) < 0.05 and abs(out.var() - 1.0) < 0.05  # SELU's fixed point: mean 0, variance 1
    module = nn.FeatureAlphaDropout(0.3)
    module.eval()
    np.testing.assert_array_equal(module(x).numpy(), x.numpy())


def test_lazy_linear_takes_its_shape_from_the_first_input():
    tessel.manual_seed(1)
    layer = nn.LazyLinear(4)
    assert layer.has_uninitialized_params() and list(layer.parameters()) == []
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    out = layer(t(x))
    assert layer.in_features == 7 and tuple(layer.weight.shape) == (4, 7)
    w, b = layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()
    assert np.abs(w).max() <= 7 ** -0.5 and np.abs(b).max() <= 7 ** -0.5
    np.testing.assert_allclose(out.detach().numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    opt = tessel.optim.SGD(layer.parameters(), lr=0.1)
    layer(t(x)).sum().backward()
    opt.step()
    np.testing.assert_allclose(layer.bias.detach().numpy(), b - 0.1 * 3, rtol=1e-5)


def test_lazy_conv_and_batchnorm_become_their_layers():
    tessel.manual_seed(2)
    conv = nn.LazyConv2d(4, 3, padding=1)
    assert list(conv.parameters()) == [] and conv.has_uninitialized_params()
    x = t(RNG.standard_normal((2, 3, 5, 5)).astype(np.float32))
    y = conv(x)
    assert type(conv) is nn.Conv2d and conv.in_channels == 3 and tuple(conv.weight.shape) == (4, 3, 3, 3)
    np.testing.assert_allclose(y.detach().numpy(), F.conv2d(x, conv.weight, conv.bias, padding=1).detach().numpy(),
                               rtol=1e-6)
    assert np.abs(conv.weight.detach().numpy()).max() <= 1 / np.sqrt(27)  # torch's kaiming_uniform(a=√5) bound
    plain = nn.Conv2d(3, 4, 3, padding=1)
    plain.load_state_dict(conv.state_dict())
    np.testing.assert_array_equal(plain(x).detach().numpy(), y.detach().numpy())
    bn = nn.LazyBatchNorm2d()
    out = bn(y)
    assert type(bn) is nn.BatchNorm2d and bn.num_features == 4
    mean = y.detach().numpy().mean((0, 2, 3))
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.detach().numpy().mean((0, 2, 3)), 0.0, atol=1e-5)
    transposed = nn.LazyConvTranspose1d(6, 2, stride=2)
    assert tuple(transposed(t(RNG.standard_normal((2, 3, 4)).astype(np.float32))).shape) == (2, 6, 8)
    assert type(transposed) is nn.ConvTranspose1d and tuple(transposed.weight.shape) == (3, 6, 2)
    unbatched = nn.LazyConv1d(5, 3)
    assert tuple(unbatched(t(RNG.standard_normal((3, 7)).astype(np.float32))).shape) == (5, 5)
    assert unbatched.in_channels == 3
    opt = tessel.optim.SGD(conv.parameters(), lr=0.1)
    conv(x).sum().backward()
    opt.step()  # its parameters are ordinary ones after the first forward


def test_data_parallel_on_the_cpu_is_the_module():
    inner = nn.Linear(3, 2)
    wrapped = nn.DataParallel(inner)
    x = t(RNG.standard_normal((4, 3)).astype(np.float32))
    np.testing.assert_array_equal(wrapped(x).detach().numpy(), inner(x).detach().numpy())
    assert wrapped.module is inner and sorted(wrapped.state_dict()) == ["module.bias", "module.weight"]
    plain = nn.Linear(3, 2)
    plain.load_state_dict({k[len("module."):]: v for k, v in wrapped.state_dict().items()})
    np.testing.assert_array_equal(plain(x).detach().numpy(), inner(x).detach().numpy())
    v1, i1 = F.adaptive_max_pool2d_with_indices(x.reshape(1, 1, 4, 3), 2)
    v2, i2 = F.adaptive_max_pool2d(x.reshape(1, 1, 4, 3), 2, return_indices=True)
    np.testing.assert_array_equal(v1.numpy(), v2.numpy())
    np.testing.assert_array_equal(i1.numpy(), i2.numpy())


def test_attention_without_weights_gives_rows_with_every_key_masked_zero_and_finite_gradients():
    """torch computes MultiheadAttention with need_weights=False (what the Transformer layers pass) through
    scaled_dot_product_attention, whose fully masked rows are 0; tessel's softmax made them NaN, and the NaN
    reached every gradient (left padding under a causal mask). Such a query's output is out_proj's bias."""
    tessel.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = tessel.randn(2, 4, 8, requires_grad=True)
    pad = tessel.tensor([[True, True, False, False], [False, False, False, False]])  # batch 0: 2 left pads
    causal = tessel.tensor(np.triu(np.ones((4, 4), dtype=bool), 1))
    out, weights = mha(x, x, x, key_padding_mask=pad, attn_mask=causal, need_weights=False)
    assert weights is None
    bias = mha.out_proj.bias.detach().numpy()
    assert np.array_equal(out[0, :2].detach().numpy(), np.stack([bias, bias]))  # queries 0, 1 see no key
    reference, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=causal, need_weights=True)  # softmax path
    assert np.allclose(out[0, 2:].detach().numpy(), reference[0, 2:].detach().numpy(), atol=1e-6)
    assert np.allclose(out[1].detach().numpy(), reference[1].detach().numpy(), atol=1e-6)
    assert np.isnan(reference[0, :2].detach().numpy()).all()  # torch's need_weights=True path: NaN, as here
    out.sum().backward()
    assert np.isfinite(x.grad.numpy()).all() and np.isfinite(mha.in_proj_weight.grad.numpy()).all()
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    y = layer(x, src_mask=causal, src_key_padding_mask=pad)
    assert np.isfinite(y.detach().numpy()).all()


def test_mse_and_l1_losses_take_torchs_per_element_weight():
    """torch 2.15's weight= of mse_loss / l1_loss (a TypeError here): weighted errors; their mean is
    sum(w e) / sum(w), where huber_loss's weighted mean divides by the count."""
    x = tessel.tensor([0.5, 2.0, -3.0, 0.1], requires_grad=True)
    y = tessel.zeros(4)
    w = tessel.tensor([1.0, 2.0, 0.5, 4.0])
    xn, wn = np.array([0.5, 2.0, -3.0, 0.1]), np.array([1.0, 2.0, 0.5, 4.0])
    assert F.mse_loss(x, y, weight=w).item() == pytest.approx(float((wn * xn ** 2).sum() / wn.sum()), rel=1e-6)
    assert F.l1_loss(x, y, weight=w, reduction="sum").item() == pytest.approx(float((wn * abs(xn)).sum()), rel=1e-6)
    assert np.allclose(F.mse_loss(x, y, weight=w, reduction="none").detach().numpy(), wn * xn ** 2)
    assert F.huber_loss(x, y, weight=w).item() == pytest.approx(
        float(np.mean(wn * np.where(abs(xn) < 1, 0.5 * xn ** 2, abs(xn) - 0.5))), rel=1e-6)
    F.mse_loss(x, y, weight=w).backward()
    assert np.allclose(x.grad.numpy(), 2 * wn * xn / wn.sum(), rtol=1e-6)
    with pytest.raises(ValueError, match="Weights and input must have the same size"):
        F.l1_loss(x, y, weight=tessel.ones(2))


def test_sdpa_broadcasts_the_batch_and_head_dims_of_its_inputs():
    """torch broadcasts q, k, v's leading dims (a key of batch 1 for queries of batch 2, one value head for
    four); tessel raised "leading (batch/head) dims differ". Reference: the same inputs expanded and copied."""
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 8), (1, 4, 6, 8), (2, 1, 6, 8))]
    q, k, v = (tessel.tensor(d, requires_grad=True) for d in data)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = tessel.tensor(rng.standard_normal((2, 4, 5, 8)).astype(np.float32))
    out.backward(g)
    q2, k2, v2 = (tessel.tensor(d, requires_grad=True) for d in data)
    ref = F.scaled_dot_product_attention(q2, k2.expand(2, 4, 6, 8).contiguous(), v2.expand(2, 4, 6, 8).contiguous(),
                                         is_causal=True)
    ref.backward(g)
    assert tuple(out.shape) == (2, 4, 5, 8)
    assert np.allclose(out.detach().numpy(), ref.detach().numpy(), atol=1e-6)
    for a, b in ((q, q2), (k, k2), (v, v2)):
        assert tuple(a.grad.shape) == tuple(a.shape)
        assert np.allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-5)
    with pytest.raises(RuntimeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, tessel.zeros(3, 4, 6, 8), tessel.zeros(3, 4, 6, 8))


def test_linear_with_a_vector_weight_and_cross_entropy_with_byte_targets_as_torch():
    """torch: F.linear(x, w) with a 1-D weight is x @ w (shape [N]); cross_entropy takes uint8 class indices
    as well as int64 (both raised here)."""
    x = tessel.arange(6.0).reshape(2, 3)
    assert F.linear(x, tessel.tensor([1.0, 2.0, 3.0])).tolist() == [8.0, 26.0]
    logits = tessel.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    byte = F.cross_entropy(logits, tessel.tensor([2, 0], dtype=tessel.uint8))
    assert byte.item() == F.cross_entropy(logits, tessel.tensor([2, 0])).item()


def test_activations_take_torchs_input_keyword():
    """torch names these functions' tensor `input`: F.elu(input=x) raised TypeError (the parameter was `x`)."""
    x = tessel.tensor([-2.0, -0.5, 0.5, 2.0])
    for name in ("celu", "elu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "mish", "relu6", "selu",
                 "softsign", "tanhshrink"):
        fn = getattr(F, name)
        assert fn(input=x).tolist() == fn(x).tolist(), name
    assert F.softmin(input=x, dim=0).tolist() == F.softmin(x, 0).tolist()
    assert F.softplus(input=x).tolist() == F.softplus(x).tolist()
    assert F.logsigmoid(input=x).tolist() == F.logsigmoid(x).tolist()
    assert F.threshold(input=x, threshold=0.0, value=-1.0).tolist() == [-1.0, -1.0, 0.5, 2.0]
    pair = tessel.tensor([1.0, 2.0, 3.0, 4.0])
    assert F.glu(input=pair).tolist() == F.glu(pair).tolist()
    h = tessel.tensor([0.0, 2.0], dtype=tessel.bfloat16)
    assert F.hardswish(input=h).dtype == tessel.bfloat16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
