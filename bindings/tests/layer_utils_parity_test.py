"""nn layers, nn.init, nn.utils, torch.func and autocast as torch 2.15 behaves, from two side-by-side sweeps
(1,459 layer cases, 631 utility cases): the expected values are closed forms or numpy, and the messages
torch's. Each test failed before its fix: InstanceNorm(momentum=None) moved its running statistics, RReLU
trained with the evaluation slope, MultiheadAttention's is_causal hint lost to a mask (and was taken without
one), functional_call ignored tie_weights, Linear.bias / LayerNorm.weight read None once prune or a
parametrization computed them, func.grad cut the graph to a tensor the function closes over, bf16 addbmm
summed in bf16, trunc_normal_ refused bf16 and far tails."""
import math
import warnings

import numpy as np
import pytest

import tessel as T
import tessel.nn as nn
import tessel.nn.functional as F
import tessel.nn.utils.parametrize as P
import tessel.nn.utils.prune as prune
from tessel import func


def caught(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in seen], [w.category for w in seen]


# ---- layers ----------------------------------------------------------------------------------------------

def test_instance_norm_with_momentum_none_keeps_its_running_statistics():
    x = T.tensor(np.arange(12.0).reshape(2, 2, 3) ** 1.5, dtype=T.float32)
    frozen = nn.InstanceNorm1d(2, momentum=None, track_running_stats=True)
    frozen(x)
    assert frozen.running_mean.tolist() == [0.0, 0.0] and frozen.running_var.tolist() == [1.0, 1.0]
    moving = nn.InstanceNorm1d(2, momentum=0.5, track_running_stats=True)
    moving(x)
    per = x.numpy().astype(np.float64)
    np.testing.assert_allclose(moving.running_mean.numpy(), 0.5 * per.mean(2).mean(0), rtol=1e-6)


def test_instance_norm_channel_checks_and_one_spatial_element():
    _, msgs, _ = caught(lambda: nn.InstanceNorm1d(3)(T.randn(2, 4, 5)))
    assert msgs == ["input's size at dim=1 does not match num_features. You can silence this warning by not passing "
                    "in num_features, which is not used because affine=False"]
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features \(3\), but got: 4"):
        nn.InstanceNorm1d(3, affine=True)(T.randn(2, 4, 5))
    with pytest.raises(ValueError, match=r"Expected more than 1 spatial element when training, got input size"):
        nn.InstanceNorm1d(3)(T.randn(2, 3, 1))


def test_rrelu_module_draws_a_slope_per_element_in_training():
    x = -T.ones(4000)
    m = nn.RReLU(0.1, 0.3)
    slopes = -m(x).numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and len(np.unique(slopes)) > 1000
    assert abs(slopes.mean() - 0.2) < 0.01
    m.eval()
    np.testing.assert_allclose(m(x).numpy(), -0.2, rtol=1e-6)
    assert m(T.ones(3)).tolist() == [1.0, 1.0, 1.0]


def mha_inputs(L=3, S=4, E=4):
    rng = np.random.default_rng(0)
    q = T.tensor(rng.standard_normal((L, 1, E)), dtype=T.float64)
    kv = T.tensor(rng.standard_normal((S, 1, E)), dtype=T.float64)
    m = nn.MultiheadAttention(E, 2, dtype=T.float64)
    return m, q, kv


def test_multihead_attention_is_causal_hint_as_torch():
    m, q, kv = mha_inputs()
    causal = T.tensor(np.triu(np.ones((3, 4), dtype=bool), 1))
    other = T.tensor(np.array([[False, True, False, False]] * 3))
    explicit = m(q, kv, kv, attn_mask=causal, need_weights=False)[0]
    hinted = m(q, kv, kv, attn_mask=other, is_causal=True, need_weights=False)[0]
    np.testing.assert_allclose(hinted.detach().numpy(), explicit.detach().numpy(), rtol=1e-12)
    # with attention weights asked for, the mask given is used (the hint only helps the fused path)
    masked = m(q, kv, kv, attn_mask=other, need_weights=False)[0]
    weighted = m(q, kv, kv, attn_mask=other, is_causal=True)[0]
    np.testing.assert_allclose(weighted.detach().numpy(), masked.detach().numpy(), rtol=1e-12)
    assert not np.allclose(masked.detach().numpy(), explicit.detach().numpy())
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(q, kv, kv, is_causal=True)


def test_multihead_attention_mask_checks():
    m, q, kv = mha_inputs()
    with pytest.raises(RuntimeError, match=r"The shape of the 2D attn_mask is .*\[1, 4\]\), but should be \(3, 4\)"):
        m(q, kv, kv, attn_mask=T.zeros(1, 4, dtype=T.float64))
    with pytest.raises(RuntimeError, match=r"The shape of the 3D attn_mask is .*but should be \(2, 3, 4\)"):
        m(q, kv, kv, attn_mask=T.zeros(1, 3, 4, dtype=T.float64))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask are supported"):
        m(q, kv, kv, attn_mask=T.zeros(3, 4, dtype=T.int64))
    _, msgs, _ = caught(lambda: m(q, kv, kv, attn_mask=T.zeros(3, 4, dtype=T.float64),
                                  key_padding_mask=T.zeros(1, 4, dtype=T.bool)))
    assert "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both " \
           "instead." in msgs
    assert type(m.out_proj).__name__ == "NonDynamicallyQuantizableLinear" and isinstance(m.out_proj, nn.Linear)
    from tessel.nn.modules.linear import NonDynamicallyQuantizableLinear
    assert type(m.out_proj) is NonDynamicallyQuantizableLinear


def test_transformer_decoder_builds_without_the_encoders_nested_tensor_warning():
    layer = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True)
    dec, msgs, _ = caught(lambda: nn.TransformerDecoder(layer, 2))
    assert msgs == [] and not hasattr(dec, "enable_nested_tensor") and len(dec.layers) == 2


def test_alpha_dropouts_at_p_one_and_in_eval():
    x = T.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
    for m in (nn.AlphaDropout(1.0), nn.FeatureAlphaDropout(1.0)):
        assert m(x).tolist() == [[0.0, 0.0, 0.0]]
        m.inplace = True
        m.eval()
        assert m(x) is x  # nothing dropped: the input itself, a leaf that requires grad included
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.AlphaDropout(1.5)


def test_module_call_returns_the_input_object_when_forward_does():
    x = T.randn(3)
    assert nn.Identity()(x) is x
    y = T.tensor([-1.0, 2.0])
    assert nn.ReLU(inplace=True)(y) is y and y.tolist() == [0.0, 2.0]
    assert nn.ReLU()(y) is not y


def test_reprs_as_torch():
    assert repr(nn.ReLU6()) == "ReLU6()" and repr(nn.ReLU6(True)) == "ReLU6(inplace=True)"
    assert repr(nn.LeakyReLU()) == "LeakyReLU(negative_slope=0.01)"
    assert repr(nn.Hardtanh(-2, 2, True)) == "Hardtanh(min_val=-2, max_val=2, inplace=True)"
    assert repr(nn.Hardswish(True)) == "Hardswish()"
    assert repr(nn.Softshrink(0.3)) == "Softshrink(0.3)" and repr(nn.Hardshrink()) == "Hardshrink(0.5)"
    assert repr(nn.LocalResponseNorm(3)) == "LocalResponseNorm(3, alpha=0.0001, beta=0.75, k=1.0)"
    assert repr(nn.RReLU()) == "RReLU(lower=0.125, upper=0.3333333333333333)"
    assert repr(nn.Upsample(scale_factor=(1.5, 2.0), mode="bilinear")) == \
        "Upsample(scale_factor=(1.5, 2.0), mode='bilinear')"
    assert repr(nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2.0, mode='nearest')"


def test_softmax_modules_warn_on_the_implicit_dim():
    out, msgs, _ = caught(lambda: nn.LogSoftmax()(T.zeros(2, 3)))
    assert msgs == ["Implicit dimension choice for log_softmax has been deprecated. Change the call to include "
                    "dim=X as an argument."]
    np.testing.assert_allclose(out.numpy(), np.log(1 / 3), rtol=1e-6)  # dim 1 for a 2-D input
    _, msgs, _ = caught(lambda: nn.Softmax(dim=0)(T.zeros(2, 3)))
    assert msgs == []


def test_constructor_and_input_checks_torch_makes():
    with pytest.raises(AssertionError, match=r"max_val \(-1.0\) must be greater than min_val \(1.0\)"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'divisor_override'"):
        nn.AvgPool1d(2, divisor_override=3)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training, got input size "
                                         r"\[1, 4\]"):
        nn.GroupNorm(4, 4)(T.randn(1, 4))
    with pytest.raises(ValueError, match=r"Expected 3D or higher dimensionality\s+input \(got 2 dimensions\)"):
        nn.LocalResponseNorm(2)(T.randn(3, 4))
    bag = nn.EmbeddingBag(10, 3)
    ids = T.tensor([1, 2, 3, 4])
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0.*However, got 1"):
        bag(ids, T.tensor([1, 2]))
    with pytest.raises(RuntimeError, match=r"offsets\[-1\] can not be greater than input's length 4 but got "
                                           r"offsets\[-1\] of 9"):
        bag(ids, T.tensor([0, 9]))
    with pytest.raises(ValueError, match="max mode does not support scaling the gradient by the frequency"):
        F.embedding_bag(ids, bag.weight, T.tensor([0, 2]), mode="max", scale_grad_by_freq=True)


# ---- nn.init ---------------------------------------------------------------------------------------------

def test_trunc_normal_on_bfloat16_and_in_a_far_tail():
    w = T.empty(64, 64, dtype=T.bfloat16)
    assert nn.init.trunc_normal_(w, std=0.5, a=-0.6, b=0.6) is w and w.dtype == T.bfloat16
    bound = float(T.tensor(0.6, dtype=T.bfloat16).float())  # torch's bounds are the dtype's: 0.6015625
    assert float(w.float().abs().max()) <= bound and float(w.float().std()) > 0.25
    tail = T.empty(4000)
    _, msgs, _ = caught(lambda: nn.init.trunc_normal_(tail, a=8.0, b=9.0))
    assert msgs == ["mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                    "be incorrect."]
    v = tail.numpy().astype(np.float64)
    # N(0, 1) truncated to [8, 9]: mean = (phi(8) - phi(9)) / (Phi(9) - Phi(8)) ≈ 8.1215
    assert v.min() >= 8.0 and v.max() <= 9.0 and abs(v.mean() - 8.1215) < 0.02


def test_init_helpers_torch_names():
    assert nn.init.calculate_gain("conv_transpose2d") == 1
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        nn.init.calculate_gain("leaky_relu", True)
    assert nn.init._calculate_fan_in_and_fan_out(T.empty(5, 3, 2, 2)) == (12, 20)
    assert nn.init._calculate_correct_fan(T.empty(5, 3), "FAN_OUT") == 5
    with pytest.raises(ValueError, match=r"Mode fan_x not supported, please use one of \['fan_in', 'fan_out'\]"):
        nn.init._calculate_correct_fan(T.empty(5, 3), "fan_x")
    empty = T.empty(3, 0)
    out, msgs, _ = caught(lambda: nn.init.kaiming_uniform_(empty))
    assert out is empty and msgs == ["Initializing zero-element tensors is a no-op"]
    w = nn.init.sparse_(T.empty(10, 6), 0.25, std=0.5)
    assert ((w.numpy() == 0).sum(0) == 3).all()  # ceil(0.25 * 10) zeros in every column
    _, msgs, cats = caught(lambda: nn.init.xavier_uniform(T.empty(3, 4)))
    assert msgs == ["`nn.init.xavier_uniform` is now deprecated in favor of `nn.init.xavier_uniform_`."]
    assert cats == [FutureWarning]


# ---- nn.utils / func -------------------------------------------------------------------------------------

class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_functional_call_ties_weights_by_default():
    m = Tied()
    with T.no_grad():
        m.a.weight.fill_(3.0)
    x = T.ones(1, 2)
    assert func.functional_call(m, {"a.weight": T.eye(2)}, (x,)).tolist() == [[1.0, 1.0]]
    # untied: a uses eye, b keeps 3s: 3 * [[1, 1], [1, 1]] @ [1, 1] = [6, 6]
    assert func.functional_call(m, {"a.weight": T.eye(2)}, (x,), tie_weights=False).tolist() == [[6.0, 6.0]]
    with pytest.raises(ValueError, match=r"multiple values for keys \['a.weight', 'b.weight'\], which are tied"):
        func.functional_call(m, {"a.weight": T.eye(2), "b.weight": T.zeros(2, 2)}, (x,))
    assert m.a.weight.tolist() == [[3.0, 3.0], [3.0, 3.0]]  # restored


def test_linear_bias_and_layer_norm_weight_read_what_prune_or_a_parametrization_computed():
    lin = nn.Linear(2, 3)
    with T.no_grad():
        lin.bias.copy_(T.tensor([1.0, 2.0, 3.0]))
    prune.custom_from_mask(lin, "bias", T.tensor([1.0, 0.0, 1.0]))
    assert lin.bias.tolist() == [1.0, 0.0, 3.0] and lin(T.zeros(1, 2)).tolist() == [[1.0, 0.0, 3.0]]

    class Double(nn.Module):
        def forward(self, x):
            return x * 2
    ln = nn.LayerNorm(3)
    P.register_parametrization(ln, "weight", Double())
    assert ln.weight.tolist() == [2.0, 2.0, 2.0]
    assert nn.Linear(2, 3, bias=False).bias is None and nn.LayerNorm(3, elementwise_affine=False).weight is None


def test_func_grad_stays_connected_to_a_tensor_the_function_closes_over():
    w = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = T.tensor([1.0, 1.0, 1.0])
    g = func.grad(lambda x: (x * x * w).sum())(x)  # 2 x w
    assert g.tolist() == [2.0, 4.0, 6.0] and g.requires_grad
    g.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
    plain = func.grad(lambda x: (x * x).sum())(x)
    assert not plain.requires_grad and plain.tolist() == [2.0, 2.0, 2.0]


# ---- autocast / amp --------------------------------------------------------------------------------------

def test_autocast_flags_and_dtypes_as_torch():
    with T.autocast("cpu"):
        assert not T.is_autocast_enabled() and T.is_autocast_enabled("cpu")
    region, msgs, _ = caught(lambda: T.autocast("cpu", dtype=T.float32))
    assert msgs == ["In CPU autocast, but the target dtype is not supported. Disabling autocast.\nCPU Autocast only "
                    "supports dtypes of torch.bfloat16, torch.float16 currently."]
    with region:
        assert (T.ones(2, 2) @ T.ones(2, 2)).dtype == T.float32 and not T.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        T.autocast(T.device("cpu"))
    assert T.is_autocast_cache_enabled() and T.vmap is func.vmap
    assert T.amp.GradScaler("cpu", init_scale=0.1).get_scale() == float(np.float32(0.1))
    # torch.amp.GradScaler's device defaults to "cuda": without CUDA it warns and passes through (tessel scaled)
    with pytest.warns(UserWarning, match="GradScaler is enabled, but CUDA is not available.  Disabling."):
        default = T.amp.GradScaler(init_scale=0.1)
    assert not default.is_enabled() and default.get_scale() == 1.0
    with pytest.warns(FutureWarning, match=r"torch.cpu.amp.GradScaler\(args...\)` is deprecated"):
        old_cpu = T.cpu.amp.GradScaler(init_scale=0.5)
    assert old_cpu.is_enabled() and old_cpu.get_scale() == 0.5


def test_bfloat16_addbmm_sums_the_batch_in_float32():
    rng = np.random.default_rng(3)
    a, b, c = rng.standard_normal((8, 2, 16)), rng.standard_normal((8, 16, 3)), rng.standard_normal((2, 3))
    bf = [T.tensor(v, dtype=T.bfloat16) for v in (c, a, b)]
    exact = sum(x.double().numpy() for x in [bf[0]]) + np.einsum("bij,bjk->ik", bf[1].double().numpy(),
                                                                  bf[2].double().numpy())
    got = T.addbmm(*bf).double().numpy()
    # one rounding to bfloat16 (8 bits): within half a unit in the last place of the exact sum
    ulp = 2.0 ** (np.floor(np.log2(np.abs(exact))) - 7)
    assert (np.abs(got - exact) <= 0.5 * ulp + 1e-12).all()
    assert math.isclose(float(got[0, 0]), float(T.tensor(exact[0, 0], dtype=T.bfloat16).double()))


# ---- func / autograd.functional / prune / fusion / parametrize: second round -----------------------------

def test_func_transforms_take_pytrees_as_torch():
    d = {"a": T.tensor([1.0, 2.0]), "b": T.tensor([3.0, 4.0])}
    (grads,) = func.vjp(lambda d: d["a"] * d["b"], d)[1](T.ones(2))
    assert grads["a"].tolist() == [3.0, 4.0] and grads["b"].tolist() == [1.0, 2.0]
    out, tangent = func.jvp(lambda d: d["a"] * d["b"], (d,), ({"a": T.ones(2), "b": T.zeros(2)},))
    assert out.tolist() == [3.0, 8.0] and tangent.tolist() == [3.0, 4.0]
    jac = func.jacrev(lambda x: {"s": x.sin(), "c": x.sum()})(T.ones(2, dtype=T.float64))
    assert set(jac) == {"s", "c"} and jac["c"].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(jac["s"].numpy(), np.diag([math.cos(1.0)] * 2), rtol=1e-12)
    empty = func.vmap(lambda x: x.sum(0, keepdim=True) * 2)(T.zeros(0, 3))
    assert tuple(empty.shape) == (0, 1)


def test_vmap_and_grad_argument_checks():
    x = T.arange(6.0).reshape(3, 2)
    with pytest.raises(ValueError, match="Got in_dim=2 for some input, but that input is a Tensor of dimensionality 2"):
        func.vmap(lambda t: t, in_dims=2)(x)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 3\)"):
        func.vmap(lambda t: t, out_dims=3)(x)
    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        func.vmap(lambda t: t, out_dims=None)(x)
    assert func.vmap(lambda t: T.ones(2), out_dims=None)(x).tolist() == [1.0, 1.0]  # unbatched: as is
    with pytest.raises(ValueError, match=r"chunk_size should be None or greater than 0. \(got 0\)"):
        func.vmap(lambda t: t, chunk_size=0)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor, got tensor with 1 dims"):
        func.grad(lambda t: t.sum(0, keepdim=True))(T.ones(2))


def test_autograd_functional_strict_mode():
    from tessel.autograd.functional import hessian, jacobian, vjp
    x, y = T.ones(2, dtype=T.float64), T.ones(2, dtype=T.float64)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 1. This "
                                           "is not allowed in strict mode."):
        jacobian(lambda a, b: a * 2, (x, y), strict=True)
    j = jacobian(lambda a, b: a * 2, (x, y))
    assert j[0].tolist() == [[2.0, 0.0], [0.0, 2.0]] and j[1].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(RuntimeError, match="found that the jacobian of the user-provided function with respect to "
                                           "input 0 is independent of the input"):
        hessian(lambda a: (a * 3).sum(), x, strict=True)
    assert hessian(lambda a: (a * 3).sum(), x).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients"):
        vjp(lambda a: T.ones(2), x, T.ones(2), strict=True)
    with pytest.raises(NotImplementedError, match="only implemented for `vectorize=True`"):
        jacobian(lambda a: a, x, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="`strict=True` and `vectorized=True` are not supported together"):
        jacobian(lambda a: a, x, strict=True, vectorize=True)


def test_a_users_pruning_method_computes_on_tensors():
    class EveryOther(prune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            assert isinstance(t, T.Tensor) and isinstance(default_mask, T.Tensor)
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask
    m = nn.Linear(2, 2)
    EveryOther.apply(m, "weight")
    assert m.weight_mask.reshape(-1).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert m.weight.reshape(-1)[0].item() == 0.0


def test_fuse_linear_bn_eval_without_a_bias_and_with_one_feature():
    from tessel.nn.utils import fuse_linear_bn_eval
    x = T.randn(5, 4)
    for lin, bn in ((nn.Linear(4, 3, bias=False), nn.BatchNorm1d(3)), (nn.Linear(4, 3), nn.BatchNorm1d(1))):
        with T.no_grad():
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 2)
            bn.bias.uniform_(-1, 1)
        lin.eval(), bn.eval()
        fused = fuse_linear_bn_eval(lin, bn)
        y = lin(x).detach().numpy()
        rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
        want = (y - rm) / np.sqrt(rv + bn.eps) * bn.weight.detach().numpy() + bn.bias.detach().numpy()
        np.testing.assert_allclose(fused(x).detach().numpy(), want, rtol=1e-5, atol=1e-6)
        assert tuple(fused.bias.shape) == (3,)


def test_unsafe_parametrization_may_change_the_originals_shape():
    class Flat(nn.Module):
        def forward(self, x):
            return x.reshape(3, 4)

        def right_inverse(self, w):
            return w.reshape(-1)
    m = nn.Linear(4, 3)
    w = m.weight.detach().clone()
    P.register_parametrization(m, "weight", Flat(), unsafe=True)
    assert list(m.parametrizations.weight.original.shape) == [12]
    assert m.weight.tolist() == w.tolist()


def test_transformer_encoder_inference_path_pads_with_zeros_as_torchs_nested_tensors():
    T.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(4)).eval()
    with T.no_grad():
        enc.norm.bias.copy_(T.tensor([0.5, -1.0, 2.0, 0.0]))
    x = T.randn(2, 3, 4)
    pad = T.tensor([[False, False, True], [False, True, True]])
    tracked = enc(x, src_key_padding_mask=pad)  # grad enabled: the dense path, padded rows computed
    with T.no_grad():
        fast = enc(x, src_key_padding_mask=pad)
    for b, t in ((0, 2), (1, 1), (1, 2)):  # padded: the norm of a zero row is its bias
        assert fast[b, t].tolist() == [0.5, -1.0, 2.0, 0.0]
        assert tracked[b, t].tolist() != [0.5, -1.0, 2.0, 0.0]
    for b, t in ((0, 0), (0, 1), (1, 0)):
        np.testing.assert_allclose(fast[b, t].numpy(), tracked[b, t].detach().numpy(), rtol=1e-5, atol=1e-6)
    with T.no_grad():  # padding not at the end: torch's mask check keeps the dense path
        assert enc(x, src_key_padding_mask=T.tensor([[True, False, False]] * 2))[0, 0].tolist() != \
            [0.5, -1.0, 2.0, 0.0]


def test_deepcopy_of_parametrized_pruned_and_weight_normed_modules():
    import copy
    from tessel.nn.utils import parametrizations, spectral_norm, weight_norm
    x = T.randn(2, 4, dtype=T.float64)
    for make in (lambda: parametrizations.weight_norm(nn.Linear(4, 3).double()),
                 lambda: parametrizations.spectral_norm(nn.Linear(4, 3).double()).eval(),
                 lambda: weight_norm(nn.Linear(4, 3).double()),
                 lambda: spectral_norm(nn.Linear(4, 3).double()).eval(),
                 lambda: prune.l1_unstructured(nn.Linear(4, 3).double(), "weight", amount=0.5)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = make()
        twin = copy.deepcopy(m)
        assert twin(x).tolist() == m(x).tolist() and twin.weight.tolist() == m.weight.tolist()
        assert sorted(twin.state_dict()) == sorted(m.state_dict())
        with T.no_grad():
            for p in twin.parameters():
                p.mul_(-1.0)
        assert twin(x).tolist() != m(x).tolist()  # the copy computes from its own originals


def test_module_hook_dicts_list_clear_and_remove_as_torchs():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda mod, i, o: None)
    pre = m.register_forward_pre_hook(lambda mod, i: None)
    m.register_forward_hook(lambda mod, i, o: o * 2, prepend=True)
    assert (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) == (2, 1, 0)
    x = T.ones(1, 2)
    doubled = m(x)
    m._forward_hooks.clear()  # removes them: the output is no longer doubled
    assert len(m._forward_hooks) == 0 and (m(x) * 2).tolist() == doubled.tolist()
    pre.remove()
    assert len(m._forward_pre_hooks) == 0
    seen = []
    m.register_backward_hook(lambda mod, gi, go: seen.append(len(go)))  # torch's deprecated form
    (key,) = list(m._backward_hooks)
    m(T.ones(1, 2, requires_grad=True)).sum().backward()
    assert seen == [1]
    del m._backward_hooks[key]
    m(T.ones(1, 2, requires_grad=True)).sum().backward()
    assert seen == [1] and len(m._backward_hooks) == 0


def test_model_zoo_sweep_fixes():
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    w = conv[0].weight
    conv.to(memory_format=T.channels_last)
    assert conv[0].weight is w and w.stride() == (27, 1, 9, 3) and conv[1].weight.stride() == (1,)
    y = T.arange(10.0, dtype=T.float64).requires_grad_(True)
    z = y.unfold(0, 3, 1).unfold(1, 2, 1)  # overlapping windows of overlapping windows
    assert tuple(z.shape) == (8, 2, 2) and z[3].tolist() == [[3.0, 4.0], [4.0, 5.0]]
    z.sum().backward()  # each element: the number of (window, pair) slots that read it, counted directly
    counts = np.zeros(10)
    for a in range(8):
        for b in range(2):
            counts[a + b: a + b + 2] += 1
    assert y.grad.tolist() == counts.tolist()
    with pytest.raises(RuntimeError, match="grad requires non-empty inputs."):
        T.autograd.grad(y.sum(), [])
    _, msgs, _ = caught(lambda: F.upsample(T.ones(1, 1, 2), scale_factor=2))
    assert msgs == ["`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead."]


def test_reading_a_non_leafs_grad_warns_as_torch():
    x = T.ones(2, requires_grad=True)
    y = x * 2
    g, msgs, _ = caught(lambda: y.grad)
    assert g is None and len(msgs) == 1 and msgs[0].startswith("The .grad attribute of a Tensor that is not a leaf")
    y.retain_grad()
    y.sum().backward()
    g, msgs, _ = caught(lambda: (y.grad, x.grad))
    assert msgs == [] and g[0].tolist() == [1.0, 1.0] and g[1].tolist() == [2.0, 2.0]


def test_orthogonal_parametrization_values_and_gradients_are_torchs():
    from tessel.nn.utils import parametrizations
    rng = np.random.default_rng(0)
    x = T.tensor(rng.standard_normal((2, 4)))
    # (shape, map, use_trivialization, torch 2.15's weight.sum(), torch's |grad of the original|.sum())
    cases = [((4, 4), None, True, -0.107808153, 5.996588299), ((4, 4), "cayley", True, 2.141658746, 9.071002851),
             ((6, 4), None, True, None, None), ((4, 4), "householder", True, 3.05011263, 19.559332865),
             ((6, 4), "householder", False, -2.84122494, 55.609724163),
             ((4, 4), "matrix_exp", False, -1.051252374, 12.897755993), ((3, 4), None, True, None, None)]
    for shape, orthogonal_map, trivial, weight_sum, grad_sum in cases:
        m = nn.Linear(shape[1], shape[0], bias=False).double()
        with T.no_grad():
            m.weight.copy_(T.tensor(rng.standard_normal(shape)))
        parametrizations.orthogonal(m, orthogonal_map=orthogonal_map, use_trivialization=trivial)
        W = m.weight
        gram = W @ W.mT if shape[0] <= shape[1] else W.mT @ W
        np.testing.assert_allclose(gram.detach().numpy(), np.eye(gram.shape[0]), atol=1e-12)
        assert ("parametrizations.weight.0.base" in m.state_dict()) == trivial
        if weight_sum is None:  # a wide / tall weight completed by random columns: only orthogonality is torch's
            continue
        y = m(x)
        (grad,) = T.autograd.grad((y * y * T.arange(1.0, shape[0] + 1, dtype=T.float64)).sum(), list(m.parameters()))
        assert math.isclose(float(W.sum()), weight_sum, abs_tol=1e-8)
        assert math.isclose(float(grad.abs().sum()), grad_sum, rel_tol=1e-8)
    a, tau = T.geqrf(T.tensor(rng.standard_normal((5, 3))))
    q = T.linalg.householder_product(a, tau)
    np.testing.assert_allclose((q.mT @ q).numpy(), np.eye(3), atol=1e-12)


def test_clip_grad_norm_and_get_total_norm_take_norm_type_minus_inf_as_torch():
    # torch's -inf norm: the smallest magnitude of any element (tessel raised ValueError)
    ps = [T.nn.Parameter(T.zeros(3)), T.nn.Parameter(T.zeros(2))]
    ps[0].grad, ps[1].grad = T.tensor([3.0, -0.5, 2.0]), T.tensor([-4.0, 1.0])
    assert T.nn.utils.get_total_norm([p.grad for p in ps], norm_type=-math.inf).item() == 0.5
    assert T.nn.utils.clip_grad_norm_(ps, max_norm=0.25, norm_type=-math.inf).item() == 0.5
    np.testing.assert_allclose(ps[0].grad.numpy(), np.array([3.0, -0.5, 2.0]) * 0.25 / (0.5 + 1e-6), rtol=1e-6)
