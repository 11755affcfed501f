"""torch.nn.functional values and gradients as torch 2.15 computes them, from a 975-case side-by-side sweep
(float32 and float64, every gradient): the expected numbers are torch's, printed by the sweep's repro script
(/tmp/sweep_functional/repro.py in the session that found them) and checked against torch's rules
(torch/_decomp/decompositions.py, ATen): cosine_embedding_loss's 1e-12 in the squared norms, cosine_similarity's
clamp that passes the gradient, a repeated multilabel target counted twice, cross_entropy's probability path
differentiable in weight, BCE's unclamped target gradient and its target range check, replicate padding wider
than the input, a NaN grid point, mixed-dtype rms_norm and SDPA masks, pdist(p=0)'s zero gradient, and torch's
refusal of class weights that require grad where its kernels have no gradient for them."""
import math
import sys
import warnings

import numpy as np
import pytest

import tessel as T
import tessel.nn.functional as F

D = T.float64


def t(v, rg=True, dt=D):
    return T.tensor(v, dtype=dt, requires_grad=rg)


def test_cosine_losses_use_torchs_eps_and_pass_the_gradient_through_the_clamp():
    x1, x2 = t([[1e-7, 0., 0.]]), t([[1., 1., 1.]])
    loss = F.cosine_embedding_loss(x1, x2, T.tensor([1]))
    loss.backward()
    assert round(loss.item(), 6) == 0.942552  # tessel's cosine_similarity-based value was 0.422650
    np.testing.assert_allclose(x1.grad[0].numpy(), [-568797.0, -574485.0, -574485.0], rtol=1e-6)
    zero = t([[0., 0., 0.]])
    F.cosine_embedding_loss(zero, x2, T.tensor([1])).backward()
    np.testing.assert_allclose(zero.grad[0].numpy(), [-577350.3] * 3, rtol=1e-6)  # 100x too large before
    small = t([[3e-9, -4e-9, 0.]])
    y = F.cosine_similarity(small, t([[1., 2., 2.]], rg=False))
    y.sum().backward()
    assert y.item() == pytest.approx(-1 / 6, rel=1e-12)
    np.testing.assert_allclose(small.grad[0].numpy(), [43333333.33333333, 53333333.33333333, 66666666.666666664],
                               rtol=1e-12)


def test_multilabel_margin_counts_a_repeated_label_per_listing():
    x = t([[0.1, 0.5, -0.2, 0.3]])
    loss = F.multilabel_margin_loss(x, T.tensor([[1, 1, -1, 0]]))
    loss.backward()
    assert loss.item() == pytest.approx(0.85, rel=1e-12)  # 0.425 when the duplicate collapsed
    np.testing.assert_allclose(x.grad[0].numpy(), [0.5, -1.5, 0.5, 0.5], rtol=1e-12)


def test_cross_entropy_with_probabilities_differentiates_the_weight_and_index_targets_refuse_it():
    x = t([[0.3, -1.2, 0.8], [1.0, 0.2, -0.5]])
    w = t([0.5, 1.0, 2.0])
    loss = F.cross_entropy(x, t([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], rg=False), weight=w)
    loss.backward()
    assert round(loss.item(), 6) == 1.460617
    np.testing.assert_allclose(w.grad.numpy(), [0.259784, 0.448958, 0.440883], atol=1e-6)  # None before
    message = "The function '%s' is not differentiable with respect to argument '%s'"
    for call, fn, arg in (
            (lambda: F.cross_entropy(x, T.tensor([0, 2]), weight=w), "nll_loss_forward", "weight"),
            (lambda: F.nll_loss(x, T.tensor([0, 2]), weight=w), "nll_loss_forward", "weight"),
            (lambda: F.binary_cross_entropy(t([0.5], False), t([1.], False), weight=t([2.])), "binary_cross_entropy",
             "weight"),
            (lambda: F.binary_cross_entropy_with_logits(t([0.5], False), t([1.], False), pos_weight=t([2.])),
             "binary_cross_entropy_with_logits", "pos_weight"),
            (lambda: F.multi_margin_loss(x, T.tensor([0, 2]), weight=w), "multi_margin_loss", "weight")):
        with pytest.raises(RuntimeError, match=message % (fn, arg)):  # tessel gave some of them no gradient
            call()
    with T.no_grad():
        F.nll_loss(x, T.tensor([0, 2]), weight=w)  # nothing to differentiate: accepted


def test_binary_cross_entropy_target_gradient_and_range_as_torchs():
    p, y = t([0., 1., 0.5]), t([1., 0., 0.5])
    F.binary_cross_entropy(p, y, reduction="sum").backward()
    np.testing.assert_allclose(p.grad.numpy(), [-1000000003995.8029, 1000000003995.8029, 0.0], rtol=1e-15)
    assert y.grad.tolist()[:2] == [float("inf"), float("-inf")]  # -logit(p); ±100 from the clamped logs before
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(t([0.5, 0.5], False), t([1.5, -0.5], False))


def test_padding_grid_sampling_and_mixed_dtypes_torch_accepts():
    padded = F.pad(T.arange(2.).reshape(1, 1, 2), (5, 4), mode="replicate")  # wider than the input: it raised
    assert padded.tolist() == [[[0.0] * 6 + [1.0] * 5]]
    out = F.grid_sample(T.arange(9.).reshape(1, 1, 3, 3), T.tensor([[[[float("nan"), 0.], [0., 0.]]]]),
                        align_corners=False)  # a NaN point: NaN there (it raised: an int64-min gather index)
    assert np.isnan(out[0, 0, 0, 0].item()) and out[0, 0, 0, 1].item() == 4.0
    F._rms_norm_warned.clear()  # torch warns once per process: an earlier test may have had it
    with pytest.warns(UserWarning, match="Mismatch dtype between input and weight: input dtype = double, weight "
                                         "dtype = float"):
        y = F.rms_norm(t([[1., 2., 3.]], rg=False), (3,), T.tensor([1., 2., 3.]))
    assert y.dtype == D
    np.testing.assert_allclose(y.numpy(), np.array([[1., 2., 3.]]) / np.sqrt(14 / 3) * [1, 2, 3], rtol=1e-6)
    q = T.ones(1, 2, 3, dtype=D)
    assert F.scaled_dot_product_attention(q, q, q, attn_mask=T.zeros(2, 2)).dtype == D  # a float32 mask
    x = t([[0., 1.], [2., 3.], [1., 1.]])
    d = F.pdist(x, p=0)
    assert d.requires_grad and d.tolist() == [2.0, 1.0, 2.0]
    d.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0]] * 3


def test_warnings_torch_gives():
    with pytest.warns(UserWarning, match="'mean' divides the total loss by both the batch size and the support"):
        F.kl_div(t([-1., -2.], rg=False), t([0.5, 0.5], rg=False))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin has been deprecated"):
        F.softmin(T.ones(3))
    with pytest.warns(UserWarning, match=r"Using a target size \(tessel.Size\(\[1\]\)\) that is different to the "
                                         r"input size \(tessel.Size\(\[3\]\)\)"):
        F.l1_loss(T.ones(3), T.ones(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.kl_div(t([-1., -2.], rg=False), t([0.5, 0.5], rg=False), reduction="batchmean")


def test_long_reductions_into_few_outputs_are_as_accurate_as_torchs_cascade():
    tessel = T
    """Gradients through broadcasting (a bias over 2^20 rows: sum_to_size) and sums over a long leading dim with
    a few columns summed their rows one after another in float32 (relative errors 1e-3 to 1e-2; torch's cascade
    ~1e-7). Exact references: n * 0.1 in float64, rounded once."""
    n = 1 << 20
    b = tessel.zeros(4, requires_grad=True)
    (tessel.zeros(n, 4) + b).backward(tessel.full((n, 4), 0.1))
    want = n * float(np.float32(0.1))
    np.testing.assert_allclose(b.grad.numpy(), [want] * 4, rtol=2e-7)
    col = tessel.full((n, 1), 0.1)
    np.testing.assert_allclose(tessel.zeros(1, 1, requires_grad=True).expand(n, 1).sum().item(), 0.0)
    np.testing.assert_allclose(tessel.full((n, 2), 0.1).sum(0).numpy(), [want] * 2, rtol=2e-6)  # (was 1.5e-4 off)
    np.testing.assert_allclose(tessel.full((n, 2), 0.1).mean(0).numpy(), [float(np.float32(0.1))] * 2, rtol=2e-6)
    assert col.sum().item() == pytest.approx(want, rel=2e-7)


def test_cross_entropy_keeps_its_digits_for_large_logits():
    tessel = T
    """-log softmax(x)[t] as (max - x[t]) + log sum exp(x - max): computed as (max + log sum) - x[t] a confident
    row's loss (one logit 40, 999 at 20) came out 0, and logits near 1e4 lost three digits in the loss and its
    gradient. References in float64."""
    F = tessel.nn.functional
    row = np.full((1, 1000), 20.0, np.float32)
    row[0, 0] = 40.0
    want = np.log1p(999 * np.exp(-20.0))
    got = F.cross_entropy(tessel.tensor(row), tessel.tensor([0])).item()
    assert got == pytest.approx(want, rel=1e-5)
    rng = np.random.default_rng(0)
    x = (1e4 + rng.standard_normal((8, 50))).astype(np.float32)
    t = rng.integers(0, 50, 8)
    x64 = x.astype(np.float64)
    lse = x64.max(1) + np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1))
    loss64 = np.mean(lse - x64[np.arange(8), t])
    p = np.exp(x64 - lse[:, None])
    p[np.arange(8), t] -= 1
    logits = tessel.tensor(x, requires_grad=True)
    loss = F.cross_entropy(logits, tessel.tensor(t))
    loss.backward()
    assert loss.item() == pytest.approx(loss64, rel=1e-5)
    np.testing.assert_allclose(logits.grad.numpy(), p / 8, rtol=1e-4, atol=1e-7)


def test_dot_sums_its_products_accurately():
    """torch.dot summed K products along a 1 x K x 1 GEMM one after another: 0.1 times 10^7 ones came out 956549.6
    (4% off); now the reductions' cascade (torch's 0.07%). Exact: 10^7 * float32(0.1)."""
    n = 10 ** 7
    got = T.dot(T.full((n,), 0.1), T.ones(n)).item()
    assert got == pytest.approx(n * float(np.float32(0.1)), rel=1e-6)


def test_histogram_bins_each_value_between_the_edges_it_returns():
    """Equal-width bins were chosen against float64 edges while the float32 edges were returned: a float32 0.7
    equal to the returned edges[7] was counted in bin 6 (torch's bin 7)."""
    values = T.tensor([0.7, 0.3, 0.6, 0.1, 0.9, 0.2])
    hist, edges = T.histogram(values, 10, range=(0.0, 1.0))
    e = edges.numpy()
    want = np.zeros(10)
    for v in values.numpy():
        want[min(int(np.searchsorted(e, v, side="right")) - 1, 9)] += 1
    assert hist.tolist() == want.tolist()
    assert hist.tolist()[7] == 1.0 and hist.tolist()[6] == 1.0


def test_layer_norm_of_a_very_long_row_with_a_large_mean_keeps_its_accuracy():
    """The row's mean was 16 running lanes n / 16 additions deep: a 2^20-column row with mean 1e3 came out 1.1e-3
    off (normwise; torch 5e-6); chunk totals now join in double. Reference: float64."""
    rng = np.random.default_rng(0)
    n = 1 << 20
    x = (1e3 + rng.standard_normal((1, n))).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    got = F.layer_norm(T.tensor(x), (n,)).numpy().astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-4


def test_elu_family_gradients_far_left_are_exp_not_zero():
    """expm1's gradient (its result + 1) underflowed to 0 below -17 in float32 and -38 in float64; torch's elu
    backward is alpha * exp(x). References: math.exp."""
    import math
    for dtype, x0 in ((T.float32, -20.0), (T.float64, -40.0)):
        for fn, scale in ((F.elu, 1.0), (F.celu, 1.0), (F.selu, 1.0507009873554805 * 1.6732632423543772)):
            x = T.tensor([x0], dtype=dtype, requires_grad=True)
            fn(x).sum().backward()
            assert x.grad.item() == pytest.approx(scale * math.exp(x0), rel=1e-5), fn.__name__


def test_cross_entropy_of_rows_with_infinite_logits_is_torchs():
    inf = math.inf
    for row, t, want in (([inf, 1.0, 0.0], 1, "nan"), ([inf, 1.0, 0.0], 0, "nan"), ([-inf, -inf, -inf], 0, "nan"),
                         ([1.0, -inf, 0.0], 1, "inf")):
        got = F.cross_entropy(T.tensor([row]), T.tensor([t])).item()
        assert (math.isnan(got) if want == "nan" else got == inf), (row, t, got)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
