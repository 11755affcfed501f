"""torch.nn.functional and its layers against torch 2.15, from the fortieth session's sweep of nn.functional (each
expected value below is what torch 2.15 printed for the same script): the deprecated size_average / reduce of the
losses, the losses' dtype rules, uint8 bicubic resampling's saturation, ctc_loss at zero input lengths, gaussian
_nll_loss's variance forms, F.normalize(out=), torch's argument errors and warnings, and the pieces that were
missing (fractional max pooling, AdaptiveLogSoftmaxWithLoss, linear_cross_entropy, PairwiseDistance.norm)."""
import warnings

import pytest
from pytest import approx

import tessel
import tessel.nn.functional as F


def _legacy_warning(reduction):
    return pytest.warns(UserWarning, match="size_average and reduce args will be deprecated, please use "
                                           "reduction='%s' instead" % reduction)


def test_deprecated_size_average_and_reduce_choose_the_reduction():
    x, y, s = tessel.tensor([0.2, 0.7, 0.9]), tessel.tensor([0., 1., 1.]), tessel.tensor([1., -1., 1.])
    a, b = tessel.tensor([[1., 2.], [0., 1.]]), tessel.tensor([[0.5, 1.], [2., -1.]])
    with _legacy_warning("sum"):  # each was the mean: size_average / reduce were ignored
        assert F.binary_cross_entropy(x, y, size_average=False).item() == approx(0.6851791143417358)  # torch's
    with _legacy_warning("none"):
        assert F.binary_cross_entropy_with_logits(x, y, reduce=False).tolist() == approx(
            [0.7981388568878174, 0.40318605303764343, 0.3411538898944855])  # torch's
    with _legacy_warning("none"):
        assert F.kl_div(x.log(), y, reduce=False).tolist() == approx([0.0, 0.3566749691963196, 0.10536054521799088])
    with _legacy_warning("sum"):
        assert F.poisson_nll_loss(x, y, size_average=False).item() == approx(4.0947585105896)  # torch's
    with _legacy_warning("none"):
        assert F.margin_ranking_loss(x, y, s, reduce=False).tolist() == approx([0.0, 0.0, 0.10000002384185791])
    with _legacy_warning("sum"):
        assert F.hinge_embedding_loss(x, s, size_average=False).item() == approx(1.399999976158142)  # torch's
    with _legacy_warning("none"):
        assert F.soft_margin_loss(x, s, reduce=False).tolist() == approx(
            [0.5981388688087463, 1.103186011314392, 0.3411538898944855])  # torch's
    with _legacy_warning("none"):
        assert F.triplet_margin_loss(a, b, -b, reduce=False).tolist() == approx([0.0, 1.8284261226654053])
    with _legacy_warning("sum"):
        assert F.multi_margin_loss(a, tessel.tensor([0, 1]), size_average=False).item() == approx(1.0)  # torch's
    with _legacy_warning("none"):
        assert F.multilabel_margin_loss(a, tessel.tensor([[1, -1], [0, 1]]), reduce=False).tolist() == [0.0, 0.0]
    with _legacy_warning("sum"):
        assert F.multilabel_soft_margin_loss(a, tessel.tensor([[1., 0.], [0., 1.]]),
                                             size_average=False).item() == approx(1.7232993841171265)  # torch's
    with _legacy_warning("sum"):
        assert F.cosine_embedding_loss(a, b, tessel.tensor([1., -1.]), size_average=False).item() == 0.0


def test_cross_entropy_takes_the_deprecated_arguments():
    a, t = tessel.tensor([[1., 2.], [0., 1.]]), tessel.tensor([0, 1])
    with _legacy_warning("sum"):  # raised NotImplementedError
        assert F.cross_entropy(a, t, size_average=False).item() == approx(1.6265232563018799)  # torch's
    with _legacy_warning("none"):
        assert F.cross_entropy(a, t, reduce=False).tolist() == approx([1.31326162815094, 0.31326165795326233])
    with _legacy_warning("sum"):
        assert F.cross_entropy(a, t, weight=tessel.tensor([1., 3.]), size_average=False).item() == approx(
            2.2530465126037598)  # torch's
    with warnings.catch_warnings(record=True) as caught:  # the legacy form replaces kl_div's 'mean' warning
        warnings.simplefilter("always")
        F.kl_div(a.log_softmax(1), a.softmax(1), size_average=True)
    assert [str(w.message) for w in caught] == [
        "size_average and reduce args will be deprecated, please use reduction='mean' instead."]  # torch's


def test_loss_dtype_rules():
    a, t = tessel.ones(2, 3), tessel.tensor([0, 1])
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):  # was promoted
        F.cross_entropy(a, t, weight=tessel.ones(3, dtype=tessel.float64))
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        F.nll_loss(a.double(), t, weight=tessel.ones(3))
    assert F.cross_entropy(a, a.softmax(1), weight=tessel.ones(3, dtype=tessel.float64)).dtype == tessel.float64
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        F.binary_cross_entropy(tessel.full((2,), 0.5), tessel.ones(2, dtype=tessel.float64))
    assert F.binary_cross_entropy(tessel.full((2,), 0.5), tessel.ones(2),
                                  weight=tessel.ones(2, dtype=tessel.float64)).dtype == tessel.float32  # torch's
    b = tessel.tensor([[0.5, 1.], [2., -1.]], dtype=tessel.float64)
    out = F.huber_loss(tessel.tensor([[1., 2.], [0., 1.]]), b)
    assert out.dtype == tessel.float32 and out.item() == 0.90625  # torch's (was float64)
    assert F.soft_margin_loss(tessel.tensor([[1., 2.], [0., 1.]]), b).dtype == tessel.float32
    with pytest.warns(UserWarning, match=r"Using a target size \(\w+.Size\(\[3\]\)\) that is different"):
        F.huber_loss(tessel.ones(2, 3), tessel.zeros(3))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
