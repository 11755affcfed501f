"""Attention and transformer building blocks against torch 2.15, from the fortieth session's sweep (each expected
value below is what torch 2.15 printed for the same script): F.rms_norm with a weight of another dtype,
RMSNorm(elementwise_affine=False).weight, a module activation as a transformer layer's child, elementwise == on
complex tensors, MultiheadAttention's AssertionErrors and private helpers, Embedding.from_pretrained's
assertions, TransformerEncoder(mask_check=False)'s nested path, complex buffers under Module.to, sdpa_kernel's
backends, torch.nn.attention.bias and torch.nn.modules.transformer's helpers."""
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.nn.attention import SDPBackend, sdpa_kernel


def _ravel(t):
    return t.detach().float().numpy().ravel()


def test_rms_norm_with_a_weight_of_another_dtype_keeps_the_input_dtype():
    x = tessel.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.25, 2.0]])
    w = tessel.tensor([0.5, 1.5, 2.0, 0.1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = F.rms_norm(x.bfloat16(), (4,), w)
        F.rms_norm(x.bfloat16(), (4,), w)
    assert out.dtype == tessel.bfloat16  # was float32 (the promoted dtype)
    # torch's (normalized in float32, rounded to bfloat16 once, after the weight)
    np.testing.assert_allclose(_ravel(out), [0.182617, 1.09375, 2.1875, 0.146484, 0.216797, -1.304688, 0.433594,
                                             0.173828], atol=1e-6)  # (bfloat16 ones: -1.296875 if rounded twice)
    assert len([c for c in caught if "Mismatch dtype between input and weight" in str(c.message)]) <= 1  # once
    out = F.rms_norm(x, (4,), w.double())
    assert out.dtype == tessel.float32  # was float64
    np.testing.assert_allclose(_ravel(out), [0.182574, 1.095445, 2.19089, 0.146059, 0.21693, -1.301583, 0.433861,
                                             0.173544], atol=2e-6)  # torch's


def test_rms_norm_without_elementwise_affine_has_a_none_weight():
    n = nn.RMSNorm(4, elementwise_affine=False)
    assert n.weight is None  # was AttributeError; torch registers the parameter as None
    assert list(n.state_dict()) == [] and list(n.parameters()) == []
    assert isinstance(nn.RMSNorm(4).weight, nn.Parameter)


def test_a_module_activation_is_the_layers_child_named_activation():
    layer = nn.TransformerEncoderLayer(4, 2, 8, 0.0, activation=nn.PReLU())  # was NotImplementedError
    assert list(layer.state_dict()) == [  # torch's
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
        "norm2.weight", "norm2.bias", "activation.weight"]
    assert [n for n, _ in layer.named_children()] == ["self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                                      "dropout1", "dropout2", "activation"]
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    assert encoder.layers[0].activation is not encoder.layers[1].activation  # deep copies, as torch's
    decoder_layer = nn.TransformerDecoderLayer(4, 2, 8, activation=nn.GELU())
    assert [n for n, _ in decoder_layer.named_children()] == [
        "self_attn", "multihead_attn", "linear1", "dropout", "linear2", "norm1", "norm2", "norm3", "dropout1",
        "dropout2", "dropout3", "activation"]
    relu = nn.TransformerEncoderLayer(4, 2, 8, 0.0, activation=nn.ReLU())
    assert relu.activation_relu_or_gelu == 1 and "activation" in dict(relu.named_children())
    assert "activation" not in dict(nn.TransformerEncoderLayer(4, 2, 8, activation="gelu").named_children())


def test_complex_equality_is_elementwise():
    a = tessel.view_as_complex(tessel.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]))
    b = tessel.view_as_complex(tessel.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 0.0]]))
    # torch's: [True, False, True] [False, True, False] [False, False, True] [False, False, True]
    assert (a == b).tolist() == [True, False, True]  # was a Python bool (identity)
    assert (a != b).tolist() == [False, True, False]
    assert (a == 5).tolist() == [False, False, True]
    assert (a == tessel.tensor([1.0, 3.0, 5.0])).tolist() == [False, False, True]
    assert {a: 1}[a] == 1  # still hashable, by identity


def test_multihead_attention_argument_errors_are_torchs_assertions():
    m = nn.MultiheadAttention(8, 2)
    q, k = tessel.randn(3, 2, 8), tessel.randn(5, 2, 8)
    with pytest.raises(AssertionError, match="expected `attn_mask` to be `None`, 2-D or 3-D but found 4-D tensor"):
        m(q, k, k, attn_mask=tessel.zeros(1, 2, 3, 5))
    with pytest.raises(AssertionError, match="expected `key` and `value` to be 3-D but found 2-D and 2-D tensors"):
        m(q, k[:, 0], k[:, 0])
    with pytest.raises(AssertionError, match="was expecting embedding dimension of 8, but got 9"):
        m(tessel.randn(3, 2, 9), tessel.randn(5, 2, 9), tessel.randn(5, 2, 9))
    with pytest.raises(AssertionError, match=r"Expected key_padded_mask.shape\[1\] to be 5, but got 6"):
        m(q, k, k, key_padding_mask=tessel.zeros(2, 6, dtype=tessel.bool))
    with pytest.raises(AssertionError, match=r"key shape .*\[5, 2, 8\]\) does not match value shape .*\[4, 2, 8\]"):
        m(q, k, k[:4])


def test_multihead_attention_reset_parameters_and_merge_masks():
    m = nn.MultiheadAttention(4, 2, add_bias_kv=True)
    assert m.q_proj_weight is None and nn.MultiheadAttention(4, 2, bias=False).in_proj_bias is None
    with tessel.no_grad():
        m.in_proj_bias.fill_(3.0)
        m.out_proj.bias.fill_(3.0)
    m._reset_parameters()
    assert m.in_proj_bias.abs().sum().item() == 0.0 and m.out_proj.bias.abs().sum().item() == 0.0  # torch's 0.0
    merged, kind = m.merge_masks(tessel.tensor([[0.0, -1.0], [2.0, 0.0]]), tessel.tensor([[0.0, -5.0]]),
                                 tessel.zeros(1, 2, 4))
    assert kind == 2 and tuple(merged.shape) == (1, 2, 2, 2)
    assert _ravel(merged).tolist() == [0.0, -6.0, 2.0, -5.0, 0.0, -6.0, 2.0, -5.0]  # torch's
    merged, kind = m.merge_masks(None, tessel.zeros(2, 3), tessel.zeros(2, 3, 4))
    assert kind == 1 and tuple(merged.shape) == (2, 3) and m.merge_masks(None, None, tessel.zeros(1, 2, 4)) == (None,
                                                                                                                None)


def test_embedding_padding_idx_and_from_pretrained_assertions():
    with pytest.raises(AssertionError, match="Embeddings parameter is expected to be 2-dimensional"):
        nn.Embedding.from_pretrained(tessel.ones(3))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding.from_pretrained(tessel.ones(5, 2), padding_idx=7)
    for bad in (5, -6):
        with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
            nn.Embedding(5, 3, padding_idx=bad)
    assert nn.Embedding(5, 3, padding_idx=-5).padding_idx == 0  # torch's

    class Mine(nn.Embedding):
        pass
    e = Mine.from_pretrained(tessel.ones(3, 2), padding_idx=-1)
    assert type(e) is Mine and e.padding_idx == 2 and not e.weight.requires_grad  # torch's: cls, 2, frozen


def _seeded(module):
    with tessel.no_grad():
        for i, p in enumerate(module.state_dict(keep_vars=True).values()):
            values = (0.5 * np.sin(np.arange(p.numel()) * 0.7 + i)).astype(np.float32)
            p.copy_(tessel.tensor(values.reshape(tuple(p.shape))))
    return module


def test_encoder_without_mask_check_keeps_each_sequences_first_tokens():
    layer = nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True)
    encoder = _seeded(nn.TransformerEncoder(layer, 1, mask_check=False)).eval()
    src = tessel.tensor(np.linspace(-1, 1, 24).astype(np.float32).reshape(2, 3, 4))
    hole = tessel.tensor([[False, True, False], [False, False, False]])  # not left aligned
    with tessel.no_grad():
        out = encoder(src, src_key_padding_mask=hole)
    # torch's nested path: sequence 0 keeps its first sum(keep) = 2 tokens (the padded one among them), its tail 0
    np.testing.assert_allclose(_ravel(out), [
        -0.950737, -0.279667, 0.117487, 0.481292, -0.950752, -0.278953, 0.116659, 0.481375, 0.0, 0.0, 0.0, 0.0,
        -0.551546, -1.124544, 0.265336, 0.476155, -0.576638, -1.104673, 0.28315, 0.478842, -0.603271, -1.080905,
        0.29979, 0.481544], atol=2e-5)


class _Rope(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("freqs", tessel.polar(tessel.ones(2, 2), tessel.tensor([[0.0, 1.0], [2.0, 3.0]])))


def test_complex_buffers_follow_their_module_and_module_to_makes_them_real():
    m = _Rope()
    assert list(m.state_dict()) == ["freqs", "lin.weight", "lin.bias"]  # torch's; was freqs last
    import tessel._complex as complex_module
    complex_module._warned_imaginary.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.to(tessel.float64)
        _Rope().to(tessel.float64)
    assert [str(c.message) for c in caught if "imaginary" in str(c.message)] == [
        "Casting complex values to real discards the imaginary part"]  # torch's, once
    assert m.freqs.dtype == tessel.float64 and list(m.state_dict()) == ["freqs", "lin.weight", "lin.bias"]
    np.testing.assert_allclose(_ravel(m.freqs), [1.0, 0.540302, -0.416147, -0.989992], atol=1e-6)  # torch's


def test_sdpa_kernel_needs_math_or_flash_on_the_cpu():
    q = tessel.randn(1, 2, 4, 8)
    for backends in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, []):
        with sdpa_kernel(backends):
            with pytest.raises(RuntimeError, match="No viable backend for scaled_dot_product_attention was found"):
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert tuple(F.scaled_dot_product_attention(q, q, q, is_causal=True).shape) == (1, 2, 4, 8)
        with pytest.warns(UserWarning, match="Flash attention kernel not used because"):
            with pytest.raises(RuntimeError, match="No available kernel.  Aborting execution."):
                F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert tessel.backends.cuda.math_sdp_enabled() and tessel.backends.cuda.mem_efficient_sdp_enabled()
    with pytest.raises(AssertionError, match="a list of SDPBackend instances, got tuple"):
        with sdpa_kernel((SDPBackend.MATH,)):
            pass
    assert SDPBackend.MATH != 0 and int(SDPBackend.MATH) == 0 and str(SDPBackend.MATH) == "SDPBackend.MATH"
    assert SDPBackend(1) is SDPBackend.FLASH_ATTENTION
    params = tessel.backends.cuda.SDPAParams(q, q, q, None, 0.0, False, False)
    assert tessel.backends.cuda.can_use_flash_attention(params) is False  # torch's, on CPU tensors
    assert tessel.backends.cuda.can_use_efficient_attention(params) is False


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_16_bit_sdpa_rounds_probabilities_and_score_gradients_as_torchs_cpu_kernel(causal, dtype):
    """torch's CPU flash kernel feeds its GEMMs 16-bit operands: P = exp(s - max) rounded (its row sum not) before
    P·v, and in backward P before Pᵀ·dO and dS (before the scale) before dS·k and dSᵀ·q. Computed in float32 and
    rounded once, 32-64 of the 192 outputs and 66-98 of each gradient's differed from torch's; now none. Exact
    float64 sums (plain and position-weighted) of each 16-bit result, printed by torch 2.15."""
    torch_sums = {
        ("bfloat16", False): [(28.7882080078125, 2194.38037109375), (-4.242164611816406, -877.1593475341797),
                              (0.0060882568359375, -78.05287170410156), (10.252368927001953, 661.7393379211426)],
        ("bfloat16", True): [(37.9971923828125, 2198.0665283203125), (-8.860034942626953, -1124.616786956787),
                             (-0.01566314697265625, -30.388187408447266), (10.2550048828125, 630.8484191894531)],
        ("float16", False): [(28.76421356201172, 2193.4553833007812), (-4.268977165222168, -882.4368839263916),
                             (-0.003688812255859375, -77.75775527954102), (10.192453384399414, 655.1108264923096)],
        ("float16", True): [(38.01996612548828, 2199.2815475463867), (-8.86885678768158, -1127.4904814958572),
                            (-0.003380298614501953, -28.598138332366943), (10.192249298095703, 622.7587280273438)]}
    tessel.manual_seed(0)
    to = getattr(tessel.Tensor, "bfloat16" if dtype == "bfloat16" else "half")
    q, k, v = (to(tessel.randn(2, 2, 6, 8)).requires_grad_() for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(to(tessel.randn(2, 2, 6, 8)))
    w = tessel.arange(192, dtype=tessel.float64).reshape(2, 2, 6, 8)
    got = [(x.double().sum().item(), (x.double() * w).sum().item()) for x in (out.detach(), q.grad, k.grad, v.grad)]
    if dtype == "bfloat16":
        assert got == torch_sums[(dtype, causal)]
    else:
        # equal on the AVX-512 kernels; float16 keeps 3 more bits, so the AVX2 kernels' row sums (8 lanes, not 16,
        # folded in another order) flip the last bit of an element or two (sums within 4e-4; rounding P once
        # put them 1e-3 to 0.5 away)
        np.testing.assert_allclose(np.array(got), np.array(torch_sums[(dtype, causal)]), rtol=0, atol=1e-3)


def test_causal_biases_as_attn_mask():
    from tessel.nn.attention.bias import CausalBias, CausalVariant, causal_lower_right, causal_upper_left
    q = tessel.tensor(np.linspace(-1, 1, 24).astype(np.float32).reshape(1, 1, 3, 8))
    k = tessel.tensor(np.cos(np.arange(40)).astype(np.float32).reshape(1, 1, 5, 8))
    v = tessel.tensor(np.sin(np.arange(40)).astype(np.float32).reshape(1, 1, 5, 8))
    np.testing.assert_allclose(_ravel(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 5))), [
        0.289642, -0.015188, -0.306054, -0.315535, -0.034915, 0.277806, 0.335113, 0.084319, 0.001017, 0.080935,
        0.086442, 0.012474, -0.072962, -0.091318, -0.025716, 0.063529, 0.067684, 0.388558, 0.352194, -0.007976,
        -0.360812, -0.38192, -0.051892, 0.325845], atol=2e-6)  # torch's
    np.testing.assert_allclose(_ravel(F.scaled_dot_product_attention(q, k, v, causal_upper_left(3, 5))), [
        0.0, 0.841471, 0.909297, 0.14112, -0.756802, -0.958924, -0.279415, 0.656987, 0.510667, 0.619856, 0.159152,
        -0.447876, -0.643129, -0.247092, 0.37612, 0.653529, 0.230898, 0.318445, 0.113215, -0.196104, -0.325126,
        -0.155229, 0.157385, 0.3253], atol=2e-6)  # torch's
    assert causal_lower_right(3, 5)._materialize().tolist() == [
        [True, True, True, False, False], [True, True, True, True, False], [True, True, True, True, True]]
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(3, 5), is_causal=True)
    with pytest.raises(AssertionError, match="causal_lower_right only supports 2D tensors"):
        causal_lower_right(3)
    with pytest.raises(AssertionError, match="variant must be a CausalVariant, got int"):
        CausalBias(1, 3, 3)
    with pytest.warns(UserWarning, match="Lower right causal bias will produce NaNs"):
        causal_lower_right(5, 3)
    assert int(CausalVariant.LOWER_RIGHT) == 2


def test_transformer_module_helpers_and_canonical_mask():
    helpers = tessel.nn.modules.transformer
    mask = helpers._generate_square_subsequent_mask(3)
    assert mask.dtype == tessel.float32 and _ravel(mask).tolist() == [0.0, -np.inf, -np.inf, 0.0, 0.0, -np.inf,
                                                                     0.0, 0.0, 0.0]  # torch's
    # torch's: True False False False True
    assert helpers._detect_is_causal_mask(mask) is True
    assert helpers._detect_is_causal_mask(tessel.zeros(3, 3)) is False
    assert helpers._detect_is_causal_mask(mask, size=4) is False and helpers._detect_is_causal_mask(None) is False
    assert helpers._detect_is_causal_mask(tessel.zeros(3, 3), is_causal=True) is True
    np.testing.assert_allclose(_ravel(helpers._get_activation_fn("gelu")(tessel.tensor([1.0, -1.0]))),
                               [0.841345, -0.158655], atol=1e-6)  # torch's
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        helpers._get_activation_fn("tanh")
    clones = helpers._get_clones(nn.Linear(2, 2), 3)
    assert isinstance(clones, nn.ModuleList) and len(clones) == 3 and clones[0].weight is not clones[1].weight
    assert bool((clones[0].weight == clones[2].weight).all())
    canonical = F._canonical_mask(tessel.tensor([[True, False], [False, False]]), "m", None, "", tessel.float32)
    assert _ravel(canonical).tolist() == [-np.inf, 0.0, 0.0, 0.0]  # torch's
    with pytest.raises(AssertionError, match="only bool and floating types of kpm are supported"):
        F._canonical_mask(tessel.zeros(2, dtype=tessel.int64), "kpm", None, "", tessel.float32)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
