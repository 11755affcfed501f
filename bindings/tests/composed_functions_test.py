"""torch functions tessel composes (tessel/_composed.py and fixes found by running one script of ~200 small
computations under both tessel and PyTorch 2.15 and diffing the outputs: tools/dev/torch_differential), and the
norm modules' constructor forms and reprs: every expected value and string below is torch 2.15's output for the
same code, ties and NaNs included; gradients are checked against closed forms."""
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn.functional as F

A = [[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]
B = [[0.5, 1.5, -2.5], [3.5, -4.5, 5.5]]


def close(t, want, tol=1e-4):
    np.testing.assert_allclose(np.asarray(t.tolist() if hasattr(t, "tolist") else t, dtype=np.float64),
                               np.asarray(want, dtype=np.float64), rtol=0, atol=tol)


def test_arithmetic_reductions_and_shapes_match_torch():
    a, b = tessel.tensor(A), tessel.tensor(B)
    close(tessel.addcmul(a, a, b, value=0.5), [[1.25, -3.5, -0.75], [11.0, -6.25, -22.5]])
    close(tessel.addcdiv(a, a, b, value=0.5), [[2.0, -2.6667, 2.4], [4.5714, 4.4444, -6.5455]])
    close(tessel.dist(a, b), 16.2942)
    close(tessel.tensordot(a, b, dims=([1], [1])), [[-10.0, 29.0], [24.5, -41.5]])
    close(tessel.tensordot(tessel.arange(24.0).reshape(2, 3, 4), tessel.arange(12.0).reshape(3, 4), dims=2),
          [506.0, 1298.0])
    close(tessel.max(a, b), [[1.0, 1.5, 3.0], [4.0, 5.0, 5.5]])  # torch.max with a tensor: elementwise
    close(tessel.aminmax(a), [-6.0, 5.0])
    close(tessel.aminmax(tessel.tensor([[1.0, 5.0], [3.0, -2.0]]), dim=0).min, [1.0, -2.0])
    assert tessel.amin(tessel.tensor([3, -9, 2])).tolist() == -9
    nan = float("nan")
    assert tessel.nansum(tessel.tensor([1.0, nan])).tolist() == 1.0
    assert tessel.nanmean(tessel.tensor([1.0, nan, 3.0])).tolist() == 2.0
    close(tessel.nanmean(tessel.tensor([[1.0, nan], [3.0, 4.0]]), dim=1), [1.0, 3.5])
    close(tessel.fmax(tessel.tensor([nan, 1.0]), tessel.tensor([0.0, 2.0])), [0.0, 2.0])
    close(tessel.deg2rad(tessel.tensor([180.0])), [3.1416])
    close(tessel.logspace(0, 2, 3), [1.0, 10.0, 100.0])
    close(tessel.logspace(0, 2, 3, base=2), [1.0, 2.0, 4.0])
    # integer powers stay integers; 0-d results stay 0-d
    p = tessel.tensor([2, 3]) ** 2
    assert p.dtype == tessel.int64 and p.tolist() == [4, 9]
    assert (tessel.tensor(3) ** tessel.tensor(2)).shape == () and tuple(tessel.pow(2, tessel.tensor(3)).shape) == ()
    assert tessel.tensor([2, 3]).pow(0.5).dtype == tessel.float32
    assert tuple(tessel.linalg.det(tessel.tensor([[2.0, 1], [1, 3]])).shape) == ()
    close(tessel.linalg.det(tessel.tensor([[2.0, 1], [1, 3]])), 5.0)
    assert tuple(tessel.linalg.slogdet(tessel.eye(2))[1].shape) == ()


def test_layout_functions_match_torch():
    a = tessel.tensor(A)
    close(a.flip(0, 1), [[-6.0, 5.0, 4.0], [3.0, -2.0, 1.0]])
    assert tuple(tessel.zeros(1, 2, 1).squeeze((0, 2)).shape) == (2,)
    assert tessel.tile(tessel.tensor([1, 2]), (2,)).tolist() == [1, 2, 1, 2]
    assert tuple(tessel.tile(tessel.ones(2, 3), (2,)).shape) == (2, 6)
    assert tuple(tessel.tile(tessel.ones(2), (2, 2)).shape) == (2, 4)
    close(tessel.rot90(a, 1, (0, 1)), [[3.0, -6.0], [-2.0, 5.0], [1.0, 4.0]])
    close(tessel.rot90(tessel.arange(6.0).reshape(2, 3), -1), [[3.0, 0.0], [4.0, 1.0], [5.0, 2.0]])
    close(tessel.arange(9.0).reshape(3, 3).diagonal(1), [1.0, 5.0])
    close(tessel.diagonal(tessel.arange(24.0).reshape(2, 3, 4), offset=-1, dim1=1, dim2=2), [[4.0, 9.0], [16.0, 21.0]])
    close(tessel.diag_embed(tessel.tensor([[1.0, 2.0], [3.0, 4.0]]), offset=1),
          [[[0, 1, 0], [0, 0, 2], [0, 0, 0]], [[0, 3, 0], [0, 0, 4], [0, 0, 0]]])
    assert tessel.cartesian_prod(tessel.tensor([1, 2]), tessel.tensor([3, 4])).tolist() == [[1, 3], [1, 4], [2, 3],
                                                                                              [2, 4]]
    assert tessel.combinations(tessel.tensor([1, 2, 3])).tolist() == [[1, 2], [1, 3], [2, 3]]
    assert tessel.combinations(tessel.tensor([1, 2, 3]), 2, with_replacement=True).tolist() == [
        [1, 1], [1, 2], [1, 3], [2, 2], [2, 3], [3, 3]]
    close(tessel.linalg.cross(tessel.tensor([1.0, 0, 0]), tessel.tensor([0.0, 1, 0])), [0.0, 0.0, 1.0])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert tuple(tessel.cross(tessel.ones(3, 2), tessel.ones(3, 2)).shape) == (3, 2)  # dim 0: the first of 3
    assert str(seen[0].message).startswith("Using torch.cross without specifying the dim arg is deprecated.")


def test_running_and_counting_functions_take_torchs_ties():
    x = tessel.tensor([1.0, 3.0, 3.0, 2.0, 5.0, 5.0])
    values, indices = x.cummax(0)
    assert values.tolist() == [1, 3, 3, 3, 5, 5] and indices.tolist() == [0, 1, 2, 2, 4, 5]  # a tie: the later
    assert x.cummin(0).indices.tolist() == [0, 0, 0, 0, 0, 0]
    close(tessel.tensor([A[0], A[1]]).cummax(1).values, [[1.0, 1.0, 3.0], [4.0, 5.0, 5.0]])
    m = tessel.tensor([[1, 2, 2, 3, 3], [4, 4, 1, 1, 0]]).mode(1)
    assert m.values.tolist() == [2, 1] and m.indices.tolist() == [2, 3]  # the smallest most frequent, its last index
    assert tessel.tensor([2, 2, 1, 1]).mode().indices.tolist() == 3
    out, inverse, counts = tessel.unique_consecutive(tessel.tensor([1, 1, 2, 2, 3, 1, 1]), return_inverse=True,
                                                     return_counts=True)
    assert out.tolist() == [1, 2, 3, 1] and inverse.tolist() == [0, 0, 1, 1, 2, 3, 3] and counts.tolist() == [2, 2,
                                                                                                              1, 2]


def test_einsum_takes_diagonals_of_repeated_subscripts():
    a = tessel.arange(9.0).reshape(3, 3)
    assert tessel.einsum("ii", a).tolist() == 12.0
    assert tessel.einsum("ii->i", a).tolist() == [0.0, 4.0, 8.0]
    assert tessel.einsum("bii->bi", tessel.arange(18.0).reshape(2, 3, 3)).tolist() == [[0, 4, 8], [9, 13, 17]]
    close(tessel.einsum("ij,jj->i", a, a), np.einsum("ij,jj->i", a.numpy(), a.numpy()))
    w = tessel.arange(4.0).reshape(2, 2).requires_grad_(True)
    tessel.einsum("ii", w).backward()
    close(w.grad, [[1.0, 0.0], [0.0, 1.0]])


def test_linear_algebra_matches_torch():
    close(tessel.linalg.matrix_power(tessel.tensor([[1.0, 1], [0, 1]]), 3), [[1.0, 3.0], [0.0, 1.0]])
    close(tessel.linalg.matrix_power(tessel.tensor([[2.0, 1.0], [1.0, 3.0]]), -2), [[0.4, -0.2], [-0.2, 0.2]])
    close(tessel.linalg.matrix_power(tessel.tensor([[2.0, 1.0], [1.0, 3.0]]), 0), [[1.0, 0.0], [0.0, 1.0]])
    m = tessel.tensor([[1.0, 2], [3, 4]])
    q, r = tessel.linalg.qr(m)
    close(r.abs(), [[3.1623, 4.4272], [0.0, 0.6325]])
    close(q @ r, [[1.0, 2.0], [3.0, 4.0]], 1e-5)
    close(q.t() @ q, [[1.0, 0.0], [0.0, 1.0]], 1e-5)


def test_losses_match_torch():
    a, b = tessel.tensor(A), tessel.tensor(B)
    close(F.cross_entropy(a, b.softmax(1)), 7.1957)  # class probabilities as the target
    logits, probs = tessel.tensor([[1.0, 2.0, 3.0], [1.0, 0.0, -1.0]]), tessel.tensor([[0.2, 0.3, 0.5], [1.0, 0, 0]])
    close(F.cross_entropy(logits, probs, label_smoothing=0.1, weight=tessel.tensor([1.0, 2.0, 3.0])), 1.3368, 1e-4)
    close(F.cross_entropy(logits, probs, reduction="none"), [1.1076, 0.4076])
    close(F.poisson_nll_loss(a, b.abs()), 36.2422)
    close(F.gaussian_nll_loss(a, b, tessel.ones(2, 3)), 22.125)


def test_norm_modules_take_torchs_shapes_and_print_as_torch():
    nn = tessel.nn
    ln = nn.LayerNorm([2, 4], elementwise_affine=False)
    assert repr(ln) == "LayerNorm((2, 4), eps=1e-05, elementwise_affine=False, bias=False)" and ln.state_dict() == {}
    ln = nn.LayerNorm((2, 4))
    with tessel.no_grad():
        ln.weight.copy_(tessel.arange(8.0).reshape(2, 4))
    x = tessel.tensor(np.random.default_rng(0).standard_normal((3, 2, 4)).astype(np.float32))
    rows = x.numpy().reshape(3, 8)
    want = (rows - rows.mean(1, keepdims=True)) / np.sqrt(rows.var(1, keepdims=True) + 1e-5) * np.arange(8.0)
    close(ln(x), want.reshape(3, 2, 4), 1e-5)
    close(F.layer_norm(x, (2, 4), ln.weight, ln.bias), want.reshape(3, 2, 4), 1e-5)
    assert [(k, tuple(v.shape)) for k, v in ln.state_dict().items()] == [("weight", (2, 4)), ("bias", (2, 4))]
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 2, 4\], but got input of size\[3, 4, 2\]"):
        ln(tessel.zeros(3, 4, 2))
    assert repr(nn.LayerNorm(4, bias=False)) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=False)"
    rms = nn.RMSNorm((2, 4), elementwise_affine=False)
    assert repr(rms) == "RMSNorm((2, 4), eps=None, elementwise_affine=False)" and rms.state_dict() == {}
    close(rms(x), rows.reshape(3, 2, 4) / np.sqrt((rows ** 2).mean(1) + np.finfo(np.float32).eps)[:, None, None],
          1e-5)
    assert repr(nn.RMSNorm(4, eps=1e-6)) == "RMSNorm((4,), eps=1e-06, elementwise_affine=True)"
    assert repr(nn.GroupNorm(2, 4, bias=False)) == "GroupNorm(2, 4, eps=1e-05, affine=True, bias=False)"
    assert list(nn.GroupNorm(2, 4, bias=False).state_dict()) == ["weight"]
    assert repr(nn.Embedding(10, 3, padding_idx=0)) == "Embedding(10, 3, padding_idx=0)"
    assert repr(nn.Embedding(10, 3, max_norm=1.0)) == "Embedding(10, 3, max_norm=1.0)"
    assert repr(nn.PReLU(3)) == "PReLU(num_parameters=3)"


def seeded(module, seed):
    """module with every state-dict entry refilled from one numpy seed (as tools/dev/torch_differential/modules.py
    does under both libraries, so the expected values below are torch's for the same weights)."""
    rng = np.random.default_rng(seed)
    module.load_state_dict({k: tessel.tensor((rng.standard_normal(tuple(v.shape)) * 0.5).astype(np.float32))
                            for k, v in module.state_dict().items()})
    return module


def inputs(*shape, seed=0):
    return tessel.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_multihead_attention_variants_pools_and_margin_losses_match_torch():
    nn = tessel.nn
    mha = seeded(nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True), 2)
    assert list(mha.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                      "out_proj.weight", "out_proj.bias"]
    out, weights = mha(inputs(1, 2, 4), inputs(1, 3, 3), inputs(1, 3, 5))
    close(out, [[[-0.2458, 2.6556, 0.2384, 0.7596], [-0.2403, 2.6767, 0.2434, 0.751]]])
    close(weights, [[[0.352, 0.3475, 0.3005], [0.3494, 0.3325, 0.3181]]])
    mha = seeded(nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True, batch_first=True), 34)
    assert list(mha.state_dict()) == ["in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                      "out_proj.bias"]
    got = mha(inputs(2, 3, 4), inputs(2, 3, 4), inputs(2, 3, 4),
              key_padding_mask=tessel.tensor([[False, False, True], [False, True, True]]),
              attn_mask=tessel.ones(3, 3, dtype=tessel.bool).triu(1))
    want = ([[[0.4438, 0.0917, 0.8163, -0.0407], [0.6137, 0.0462, 0.6595, 0.0531], [0.6645, 0.0009, 0.5445,
            -0.1548]], [[1.3741, -0.1462, -0.3006, -1.2133], [0.3401, 0.048, 0.8709, -0.2003], [1.1781, -0.0989,
            -0.0739, -0.9967]]],
            [[[0.2973, 0.0, 0.0, 0.3573, 0.3453], [0.2404, 0.2204, 0.0, 0.2942, 0.2451], [0.2167, 0.2475, 0.0,
            0.2584, 0.2775]], [[0.5402, 0.0, 0.0, 0.1972, 0.2626], [0.2174, 0.0, 0.0, 0.403, 0.3796], [0.5326, 0.0,
            0.0, 0.1877, 0.2797]]])
    close(got[0], want[0])
    close(got[1], want[1])  # the masked keys get 0; the learned and the zero key (last two columns) are attended
    close(nn.LPPool1d(2, 2)(inputs(1, 1, 6)), [[[0.1824, 0.649, 0.6463]]])
    close(nn.MultiLabelSoftMarginLoss()(inputs(2, 3), tessel.tensor([[1.0, 0, 1], [0, 1, 0]])), 0.7197)
    close(nn.MultiMarginLoss()(inputs(2, 3), tessel.tensor([1, 2])), 0.6461)


def test_second_round_methods_and_functions_match_torch():
    a = tessel.tensor(A)
    t = a.clone()
    assert t.t_() is t and t.tolist() == [[1.0, 4.0], [-2.0, 5.0], [3.0, -6.0]]
    assert tuple(a.clone().unsqueeze_(0).shape) == (1, 2, 3) and tuple(tessel.zeros(4).resize_(2, 2).shape) == (2, 2)
    close(tessel.zeros(2, 3).masked_scatter(a > 0, tessel.arange(6.0)), [[0.0, 0.0, 1.0], [2.0, 3.0, 0.0]])
    close(a.index_fill(1, tessel.tensor([0, 2]), -1.0), [[-1.0, -2.0, -1.0], [-1.0, 5.0, -1.0]])
    close(tessel.zeros(3, 2).index_copy(0, tessel.tensor([2, 0]), tessel.ones(2, 2)), [[1, 1], [0, 0], [1, 1]])
    close(tessel.take(a, tessel.tensor([0, 5])), [1.0, -6.0])
    close(a.clone().put_(tessel.tensor([0, 5]), tessel.tensor([9.0, 8.0])), [[9.0, -2.0, 3.0], [4.0, 5.0, 8.0]])
    close(a.clone().clamp_min_(0), [[1.0, 0.0, 3.0], [4.0, 5.0, 0.0]])
    close(tessel.tensor([1.5]).floor_(), [1.0])
    assert a.type() == "torch.FloatTensor" and a.type(tessel.int64).dtype == tessel.int64 and a.itemsize == 4
    assert tessel.tensor([1]).is_nonzero() and not (tessel.ones(2, requires_grad=True) * 2).detach_().requires_grad
    assert a.sum(dtype=tessel.float64).dtype == tessel.float64 and a.mean(dtype=tessel.float64).dtype == tessel.float64
    close(a.norm(p="fro", dim=(0, 1)), 9.5394)
    close(tessel.linalg.eigh(tessel.tensor([[2.0, 1.0], [1.0, 2.0]])).eigenvalues, [1.0, 3.0])
    close(tessel.linalg.lstsq(tessel.tensor([[1.0, 0], [0, 1], [1, 1]]), tessel.tensor([[1.0], [2.0], [3.0]])).solution,
          [[1.0], [2.0]])
    close(tessel.trapezoid(tessel.tensor([1.0, 2.0, 3.0])), 4.0)
    close(tessel.cumulative_trapezoid(tessel.tensor([1.0, 2.0, 3.0])), [1.5, 4.0])
    close(tessel.vander(tessel.tensor([1.0, 2.0]), 3), [[1.0, 1.0, 1.0], [4.0, 2.0, 1.0]])
    close(tessel.block_diag(tessel.ones(1, 1), tessel.ones(2, 2) * 2), [[1, 0, 0], [0, 2, 2], [0, 2, 2]])
    close(tessel.cov(a), [[6.3333, -13.0], [-13.0, 37.0]])
    close(tessel.corrcoef(a), [[1.0, -0.8492], [-0.8492, 1.0]])
    assert tessel.signbit(tessel.tensor([-0.0, 1.0])).tolist() == [True, False]
    close(tessel.float_power(tessel.tensor([2]), 2), [4.0])
    close(tessel.true_divide(tessel.tensor([3]), 2), [1.5])
    close(F.rrelu(tessel.tensor([-1.0, 1.0]), training=False), [-0.2292, 1.0])
    close(F.alpha_dropout(tessel.tensor([1.0]), 0.5, training=False), [1.0])
    close(F.local_response_norm(tessel.ones(1, 3, 2), 2), [[[1.0, 1.0], [0.9999, 0.9999], [0.9999, 0.9999]]])
    dropped = F.alpha_dropout(tessel.randn(20000), 0.3, training=True)  # keeps SELU's mean 0 and variance 1
    assert abs(float(dropped.mean())) < 0.05 and abs(float(dropped.var()) - 1.0) < 0.1


def test_buffers_and_more_modules_match_torch():
    nn = tessel.nn

    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.freqs = nn.Buffer(tessel.arange(3.0))  # torch 2.5's nn.Buffer: registered as register_buffer does
            self.tmp = nn.Buffer(tessel.ones(2), persistent=False)

    m = WithBuffers()
    assert sorted(m.state_dict()) == ["freqs"] and sorted(n for n, _ in m.named_buffers()) == ["freqs", "tmp"]
    close(nn.PoissonNLLLoss()(inputs(2, 3), inputs(2, 3, seed=1).abs()), 1.1799)
    poisson = nn.PoissonNLLLoss(log_input=False, full=True)
    close(poisson(inputs(2, 3).abs() + 0.5, inputs(2, 3, seed=1).abs() * 3), 2.3462)
    close(nn.GaussianNLLLoss()(inputs(2, 3), inputs(2, 3, seed=1), inputs(2, 3, seed=2).abs() + 0.1), 0.2587)
    close(nn.GaussianNLLLoss(full=True, reduction="sum")(inputs(2, 3), inputs(2, 3, seed=1),
                                                           inputs(2, 1, seed=2).abs() + 0.1), 8.0296)
    close(nn.RReLU().eval()(inputs(4)), [0.1257, -0.0303, 0.6404, 0.1049])
    close(nn.LocalResponseNorm(3)(inputs(1, 4, 3)), [[[0.1257, -0.1321, 0.6404], [0.1049, -0.5357, 0.3616],
                                                      [1.3039, 0.947, -0.7037], [-1.2653, -0.6233, 0.0413]]])
    close(nn.AlphaDropout(0.2).eval()(inputs(3)), [0.1257, -0.1321, 0.6404])


def test_in_place_activations_pdist_and_linalg_helpers_match_torch():
    want = {"elu_": [0.1257, -0.1238, 0.6404, 0.1049, -0.4147],
            "leaky_relu_": [0.1257, -0.0013, 0.6404, 0.1049, -0.0054],
            "hardtanh_": [0.1257, -0.1321, 0.6404, 0.1049, -0.5357],
            "selu_": [0.1321, -0.2176, 0.6729, 0.1102, -0.7291],
            "celu_": [0.1257, -0.1238, 0.6404, 0.1049, -0.4147],
            "rrelu_": [0.1257, -0.0303, 0.6404, 0.1049, -0.1228]}
    for name, values in want.items():
        x = inputs(5)
        assert getattr(F, name)(x) is x, name  # in place: the argument itself, changed
        close(x, values)
    x = inputs(5)
    assert F.threshold_(x, 0.1, -2.0) is x
    close(x, [0.1257, -2.0, 0.6404, 0.1049, -2.0])
    close(F.pdist(inputs(4, 3)), [0.491, 2.088, 1.5923, 2.1843, 1.41, 3.1021])
    close(F.pdist(inputs(3, 2), p=1), [0.7517, 1.1551, 1.4328])
    la = tessel.linalg
    m = tessel.tensor([[2.0, 1.0], [0.5, 3.0]])
    close(la.vecdot(inputs(2, 3), inputs(2, 3, seed=1)), [0.1465, -0.4603])
    close(la.multi_dot([inputs(3), inputs(3, 4, seed=1), inputs(4, 2, seed=2), inputs(2, seed=3)]), 1.3353)
    close(la.cond(m), 2.119)
    close(la.cond(m, "fro"), 2.5909)
    close(la.solve_triangular(m, inputs(2, 3), upper=True), [[0.0454, 0.0232, 0.2599], [0.035, -0.1786, 0.1205]])
    close(la.solve_triangular(m, inputs(3, 2), upper=False, left=False), [[0.0739, -0.044], [0.3115, 0.035],
                                                                             [-0.298, 0.1205]])
    close(la.solve_triangular(m, inputs(2, 1), upper=True, unitriangular=True), [[0.2578], [-0.1321]])


def test_gradients_flow_through_the_composed_values():
    x = tessel.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = tessel.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    tessel.addcdiv(x, x, y, value=2.0).sum().backward()
    close(x.grad, 1 + 2 / np.array([[0.5, -1.0], [2.0, 0.25]]))  # d/dx (x + 2x/y)
    close(y.grad, -2 * np.array([[1.0, 2.0], [3.0, 4.0]]) / np.array([[0.5, -1.0], [2.0, 0.25]]) ** 2)
    z = tessel.arange(9.0).reshape(3, 3).requires_grad_(True)
    (tessel.diagonal(z, 1) * tessel.tensor([2.0, 3.0])).sum().backward()
    close(z.grad, [[0, 2, 0], [0, 0, 3], [0, 0, 0]])
    w = tessel.tensor([1.0, 3.0, 2.0], requires_grad=True)
    (w.cummax(0).values * tessel.tensor([1.0, 10.0, 100.0])).sum().backward()
    close(w.grad, [1.0, 110.0, 0.0])  # positions 1 and 2 both read w[1]
    v = tessel.tensor([1.0, 2.0], requires_grad=True)
    F.gaussian_nll_loss(tessel.zeros(2), tessel.zeros(2), v * v).backward()  # d/dv mean(log(v²)/2) = 1/(2v)
    close(v.grad, [0.5, 0.25])


def test_in_place_forms_record_autograd():
    g = tessel.tensor([0.5, -1.0])
    state = tessel.zeros(2)
    state.mul_(0.9).addcmul_(g, g, value=0.1)
    close(state, [0.025, 0.1])
    p = tessel.ones(2, requires_grad=True)
    h = p * 3
    h.addcdiv_(h, tessel.tensor([2.0, 4.0]), value=-1)
    h.sum().backward()
    close(h, [1.5, 2.25])
    close(p.grad, [1.5, 2.25])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_the_product_of_nothing_stays_on_the_graph():
    # prod over an empty dim gave a fresh tensor of ones, cut from x's graph: backward raised "element 0 of tensors
    # does not require grad". torch keeps ProdBackward (its gradient is x's, empty).
    x = tessel.zeros(0, 4, requires_grad=True)
    for y in (x.prod(0), x.prod(), x.prod(0, keepdim=True)):
        assert y.requires_grad and y.grad_fn is not None
        assert y.tolist() in ([1.0] * 4, 1.0, [[1.0] * 4])
    x.prod(0).sum().backward()
    assert tuple(x.grad.shape) == (0, 4)
    assert tessel.zeros(0, dtype=tessel.int64).prod().item() == 1 and tessel.zeros(3, 0).prod(1).tolist() == [1.0] * 3
