"""torch.nn.functional and its layers against torch 2.15, from the fortieth session's sweep of nn.functional (each
expected value below is what torch 2.15 printed for the same script): the deprecated size_average / reduce of the
losses, the losses' dtype rules, uint8 bicubic resampling's saturation, ctc_loss at zero input lengths, gaussian
_nll_loss's variance forms, F.normalize(out=), torch's argument errors and warnings, and the pieces that were
missing (fractional max pooling, AdaptiveLogSoftmaxWithLoss, linear_cross_entropy, PairwiseDistance.norm)."""
import math
import warnings

import pytest
from pytest import approx

import tessel
import tessel.nn as nn
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


def test_uint8_resampling_saturates_and_rounds_as_torch():
    img = tessel.tensor([[[[0, 255, 0, 255], [255, 0, 255, 0], [0, 0, 255, 255]]]], dtype=tessel.uint8)
    # torch's, each pass saturated to [0, 255] (the overshoots wrapped around: 253, 25, 2, ...)
    assert F.interpolate(img, size=(5, 7), mode="bicubic")[0, 0].tolist() == [
        [0, 98, 255, 128, 0, 157, 255], [117, 133, 156, 128, 99, 122, 138], [255, 152, 3, 128, 252, 103, 0],
        [117, 63, 0, 128, 255, 192, 138], [0, 0, 0, 128, 255, 255, 255]]
    assert F.interpolate(img, size=(4, 6), mode="bicubic", align_corners=True)[0, 0].tolist() == [
        [0, 184, 228, 27, 71, 255], [203, 114, 88, 167, 141, 52], [203, 36, 10, 245, 219, 52],
        [0, 0, 45, 210, 255, 255]]  # torch's
    assert F.interpolate(img, size=(2, 3), mode="bicubic", antialias=True)[0, 0].tolist() == [
        [120, 128, 135], [66, 128, 189]]  # torch's
    assert F.interpolate(img, size=(5, 3), mode="bilinear", antialias=True)[0, 0].tolist() == [
        [76, 128, 179], [117, 128, 138], [179, 128, 76], [72, 128, 183], [0, 128, 255]]  # torch's
    # torch's int16 fixed-point weights, width first: a float blend rounded once was off by one in places
    img2 = tessel.tensor([[[[10, 200, 37], [90, 3, 250], [128, 64, 7]]]], dtype=tessel.uint8)
    assert F.interpolate(img2, size=(5, 4), mode="bilinear")[0, 0].tolist() == [
        [10, 129, 139, 37], [42, 92, 122, 122], [90, 36, 96, 250], [113, 67, 64, 104], [128, 88, 43, 7]]  # torch's
    assert F.interpolate(img2, scale_factor=1.5, mode="bilinear", align_corners=True)[0, 0].tolist() == [
        [10, 137, 146, 37], [63, 67, 105, 179], [103, 50, 72, 169], [128, 85, 45, 7]]  # torch's
    with pytest.raises(NotImplementedError, match="\"compute_indices_weights_linear\" not implemented for 'Byte'"):
        F.interpolate(img[0], size=5, mode="linear")


def test_interpolate_argument_errors():
    x = tessel.ones(1, 1, 3, 4)
    with pytest.raises(RuntimeError, match=r"Input and output sizes should be greater than 0, but got input "
                                           r"\(H: 3, W: 4\) output \(H: 0, W: 0\)"):
        F.interpolate(x, size=0)
    with pytest.raises(RuntimeError, match=r"input \(H: 3, W: 4\) output \(H: 0, W: 0\)"):
        F.interpolate(x, scale_factor=0.1, mode="bilinear")
    with pytest.raises(RuntimeError, match=r"input \(W: 3\) and output \(W: 0\)"):
        F.interpolate(tessel.ones(1, 1, 3), size=0)
    assert tuple(F.interpolate(x, size=0, mode="area").shape) == (1, 1, 0, 0)  # (area: adaptive pooling)
    with pytest.raises(ValueError, match="recompute_scale_factor is not meaningful with an explicit size."):
        F.interpolate(x, size=5, recompute_scale_factor=True)
    with pytest.raises(TypeError, match="expected size to be one of int or Tuple"):
        F.interpolate(x, size=(2.0, 2))
    with pytest.raises(NotImplementedError, match="\"compute_index_ranges_weights\" not implemented for 'Half'"):
        F.interpolate(x.half(), size=(2, 2), mode="bilinear", antialias=True)


def test_ctc_loss_without_frames_and_past_the_input_length():
    lp = tessel.zeros(4, 2, 3).log_softmax(2).requires_grad_()
    loss = F.ctc_loss(lp, tessel.tensor([[1, 2], [0, 0]]), tessel.tensor([4, 0]), tessel.tensor([2, 0]),
                      reduction="none")
    assert loss.tolist() == approx([1.686398983001709, 0.0])  # torch's (the empty sample was inf)
    loss.sum().backward()
    assert lp.grad[:, 1].tolist() == [[0.0] * 3] * 4  # torch's (was NaN)
    lp = tessel.zeros(4, 1, 3).log_softmax(2).requires_grad_()  # three repeats need five frames: impossible
    loss = F.ctc_loss(lp, tessel.tensor([[1, 1, 1]]), tessel.tensor([3]), tessel.tensor([3]), reduction="sum")
    loss.backward()
    assert loss.item() == math.inf
    assert all(math.isnan(v) for v in lp.grad[:3].reshape(-1).tolist())
    assert lp.grad[3].tolist() == [[0.0, 0.0, 0.0]]  # torch's: frame 3 lies past input_length 3 (was NaN)


def test_ctc_loss_with_the_blank_among_the_targets():
    y = tessel.tensor([[[0.5, -1.0, 0.2]], [[0.1, 0.3, -0.4]], [[1.0, 0.0, -1.0]], [[0.2, 0.2, 0.9]]]).log_softmax(2)
    loss = F.ctc_loss(y, tessel.tensor([[1, 0, 2]]), tessel.tensor([4]), tessel.tensor([3]), reduction="sum")
    assert loss.item() == approx(2.0195138454437256)  # torch's (was 4.3118: no skip into the blank label)
    x = tessel.tensor([[[0.5, -1.0, 0.2]], [[0.1, 0.3, -0.4]], [[1.0, 0.0, -1.0]]]).log_softmax(2).detach()
    x.requires_grad_()
    loss = F.ctc_loss(x, tessel.tensor([[2, 0]]), tessel.tensor([3]), tessel.tensor([2]), blank=0, reduction="sum")
    loss.backward()
    assert loss.item() == approx(0.9347796440124512)  # torch's, and its gradient at the last frame
    expected = [[0.324165403842926, 0.11361303180456161, -0.4377783536911011],
                [-0.32431092858314514, 0.43190649151802063, -0.1075955331325531],
                [-0.10878366231918335, 0.24472849071025848, 0.09003058075904846]]
    for got, want in zip(x.grad[:, 0].tolist(), expected):
        assert got == approx(want, abs=1e-6)


def test_gaussian_nll_loss_variance_forms():
    assert F.gaussian_nll_loss(tessel.zeros(2, 3), tessel.ones(2, 3), 0.5).item() == approx(
        0.6534264087677002)  # torch's (a float var raised AttributeError)
    assert nn.GaussianNLLLoss(full=True)(tessel.zeros(3), tessel.ones(3), 0.25).item() == approx(
        2.2257914543151855)  # torch's
    v = tessel.full((2, 1, 4), 2.0, requires_grad=True)  # one variance per dim-1 slice (was "incorrect size")
    assert F.gaussian_nll_loss(tessel.zeros(2, 3, 4), tessel.ones(2, 3, 4), v).item() == approx(0.596573531627655)
    F.gaussian_nll_loss(tessel.zeros(2, 3, 4), tessel.arange(24.0).reshape(2, 3, 4), v, reduction="sum").backward()
    assert v.grad.reshape(-1).tolist() == approx(
        [-9.25, -12.625, -16.75, -21.625, -99.25, -111.625, -124.75, -138.625])  # torch's
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(tessel.zeros(2, 3), tessel.ones(2, 3), -0.5)
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(tessel.zeros(2, 3, 4), tessel.ones(2, 3, 4), tessel.ones(2, 1, 1))
    with pytest.raises(ValueError, match="x is not valid"):
        F.gaussian_nll_loss(tessel.zeros(2, 3), tessel.ones(2, 3), tessel.ones(2, 3), reduction="x")


def test_normalize_writes_out():
    o = tessel.zeros(2, 2)
    assert F.normalize(tessel.tensor([[3., 4.], [1., 0.]]), out=o) is o  # o stayed zeros
    assert o.reshape(-1).tolist() == approx([0.6000000238418579, 0.800000011920929, 1.0, 0.0])  # torch's
    o = tessel.zeros(2, 2, dtype=tessel.float64)
    F.normalize(tessel.tensor([[3., 4.], [1., 0.]]), dim=0, out=o)
    assert o.dtype == tessel.float64
    assert o.reshape(-1).tolist() == approx([0.9486832618713379, 1.0, 0.3162277638912201, 0.0])  # torch's
    with pytest.raises(RuntimeError, match="functions with out=... arguments don't support automatic differentiation"):
        F.normalize(tessel.ones(2, 2, requires_grad=True), out=tessel.zeros(2, 2))


def test_loss_argument_errors():
    a, b, c = tessel.ones(2, 3), tessel.zeros(2, 3), tessel.full((2, 3), 2.)
    with pytest.raises(ValueError, match="margin must be greater than 0, got -1.0"):  # each was accepted
        F.triplet_margin_loss(a, b, c, margin=-1.0)
    with pytest.raises(ValueError, match="TripletMarginLoss: expected margin to be greater than 0, got -1.0 instead"):
        nn.TripletMarginLoss(margin=-1.0)
    with pytest.raises(ValueError, match="margin must be greater than 0, got 0"):
        F.triplet_margin_with_distance_loss(a, b, c, margin=0)
    with pytest.raises(RuntimeError, match="expected to have the same number of dimensions, but got: anchor 2D, "
                                           "positive 1D, and negative 2D inputs"):
        F.triplet_margin_loss(a, b[0], c)
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match="MultiMarginLoss: expected weight to be None or 1D tensor, got 2D instead"):
        nn.MultiMarginLoss(weight=tessel.ones(2, 2))
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected, multi-target not supported"):
        F.cosine_embedding_loss(a, b + 1, tessel.ones(2, 1))
    with pytest.raises(RuntimeError, match=r"1D target tensor expects 2D input tensors, but found inputs with sizes "
                                           r"\[3\] and \[3\]"):
        F.cosine_embedding_loss(a[0], b[0] + 1, tessel.ones(2))


def test_distance_and_encoding_errors():
    a = tessel.ones(2, 3)
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors, got: 3D"):
        F.pdist(tessel.ones(2, 3, 4))
    with pytest.raises(RuntimeError, match="pdist only supports non-negative p values"):
        F.pdist(a, p=-1)
    with pytest.raises(RuntimeError, match="cdist only supports non-negative p values"):
        tessel.cdist(a, a, p=-1)
    with pytest.raises(ValueError, match="foo is not a valid value for compute_mode"):
        tessel.cdist(a, a, compute_mode="foo")
    with pytest.raises(RuntimeError, match="cdist only supports at least 2D tensors, X1 got: 1D"):  # IndexError
        tessel.cdist(tessel.ones(3), tessel.ones(3))
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns. X1: 3 X2: 4"):
        tessel.cdist(a, tessel.ones(2, 4))
    for dtype in (tessel.int32, tessel.int16, tessel.uint8):
        with pytest.raises(RuntimeError, match="one_hot is only applicable to index tensor of type LongTensor."):
            F.one_hot(tessel.tensor([0, 1], dtype=dtype))
    with pytest.raises(RuntimeError, match="Can not infer total number of classes from empty tensor."):  # ValueError
        F.one_hot(tessel.tensor([], dtype=tessel.int64))
    assert tuple(F.one_hot(tessel.tensor([], dtype=tessel.int64), 3).shape) == (0, 3)
    with pytest.raises(RuntimeError, match="Class values must be non-negative."):
        F.one_hot(tessel.tensor([-1, 1]), 3)
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes."):
        F.one_hot(tessel.tensor([5, 1]), 3)


def test_layer_argument_errors():
    with pytest.raises(RuntimeError, match="Expected at least 2 dimensions for input tensor but received 1"):
        F.group_norm(tessel.ones(4), 2)  # IndexError
    with pytest.raises(RuntimeError, match=r"pixel_shuffle expects input to have at least 3 dimensions, but got "
                                           r"input with 2 dimension\(s\)"):
        F.pixel_shuffle(tessel.ones(4, 2), 2)
    with pytest.raises(RuntimeError, match=r"adaptive_avg_pool2d\(\): Expected input to have non-zero size for "
                                           r"non-batch dimensions, but input has sizes \[1, 2, 0, 6\] with dimension "
                                           r"2 being empty"):
        F.adaptive_avg_pool2d(tessel.ones(1, 2, 0, 6), 2)  # averaged nothing into NaN
    with pytest.raises(RuntimeError, match=r"adaptive_max_pool2d\(\): .* sizes \[1, 0, 2, 2\] with dimension 1"):
        F.adaptive_max_pool2d(tessel.ones(1, 0, 2, 2), 1)
    empty = tessel.ones(0, 3, 2)
    assert F.local_response_norm(empty, 2) is empty  # torch's (a reshape error)
    with pytest.raises(TypeError, match=r"layer_norm\(\): argument 'normalized_shape' \(position 2\) must be tuple "
                                        r"of ints, not int"):
        F.layer_norm(tessel.ones(2, 3), 3)
    with pytest.raises(TypeError, match="must be tuple of ints, but found element of type float at pos 0"):
        F.layer_norm(tessel.ones(2, 3), (3.0,))
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 4D input tensor."):
            F.pad(tessel.ones(1, 1, 3, 3), (1, 1), mode=mode)
    with pytest.raises(NotImplementedError, match="Padding size 4 is not supported for 2D input tensor."):
        nn.ReflectionPad2d(1)(tessel.ones(5, 5))
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo"):
        F.pad(tessel.ones(2, 3), (1, 1), mode="foo")


def test_grid_sample_rules():
    x = tessel.arange(12.).reshape(1, 1, 3, 4)
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):  # was promoted
        F.grid_sample(x, tessel.zeros(1, 1, 1, 2, dtype=tessel.float64), align_corners=False)
    inf, nan = math.inf, math.nan
    g = tessel.tensor([[[[inf, 0.], [-inf, 0.], [0., inf], [0., -inf], [inf, inf]]]])
    out = F.grid_sample(x, g, padding_mode="reflection", align_corners=False)
    assert out.reshape(-1).tolist() == [4.0, 4.0, 1.5, 1.5, 0.0]  # torch's (was NaN): a NaN coordinate reads 0
    g = tessel.tensor([[[[nan, 0.], [0.5, 0.3]]]])
    assert F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True).reshape(-1).tolist() == [
        4.0, 6.0]  # torch's
    x3 = tessel.arange(24.).reshape(1, 1, 2, 3, 4)
    g3 = tessel.tensor([[[[[inf, 0., 0.], [0., -inf, 0.], [0., 0., inf], [nan, 0., 0.]]]]])
    assert F.grid_sample(x3, g3, padding_mode="reflection", align_corners=False).reshape(-1).tolist() == [
        13.0, 15.5, 17.5, 13.0]  # torch's: its 3-D kernel puts a NaN coordinate at the far edge
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed to "
                                         "align_corners=False since 1.3.0"):
        F.grid_sample(x, tessel.zeros(1, 1, 1, 2))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        F.affine_grid(tessel.zeros(1, 2, 3), [1, 1, 2, 2])
    with pytest.warns(UserWarning, match="affine_grid behavior has changed for unit-size grids when "
                                         "align_corners=True"):
        F.affine_grid(tessel.zeros(1, 2, 3), [1, 1, 1, 2], align_corners=True)
    with pytest.raises(RuntimeError, match=r"Expected size for first two dimensions of batch2 tensor to be: "
                                           r"\[1, 3\] but got: \[2, 3\]."):
        F.affine_grid(tessel.zeros(2, 2, 3), [1, 1, 2, 2], align_corners=False)


def test_pairwise_distance_keeps_p_as_norm():
    m = nn.PairwiseDistance(1.5, 1e-3, True)
    assert (m.norm, m.eps, m.keepdim) == (1.5, 1e-3, True) and not hasattr(m, "p")  # torch's attributes
    out = m(tessel.tensor([[1., 2.], [0., 3.]]), tessel.tensor([[0., 0.], [1., 1.]]))
    assert out.reshape(-1).tolist() == approx([2.4488041400909424, 2.4475257396698])  # torch's


def _rows(t):
    return t.reshape(-1).tolist()


def test_fractional_max_pool_windows_indices_and_gradient():
    x = (tessel.arange(2 * 3 * 7 * 8.0).reshape(2, 3, 7, 8) * 0.37).sin()
    s = ((tessel.arange(12.0).reshape(2, 3, 2) * 0.618) % 1).float()
    _, i = F.fractional_max_pool2d(x, (2, 3), output_ratio=(0.5, 0.7), return_indices=True, _random_samples=s)
    assert i[1, 1].tolist() == [[1, 1, 2, 3, 15], [18, 18, 18, 19, 21], [50, 51, 52, 52, 53]]  # torch's
    xg = x.clone().requires_grad_()
    o = F.fractional_max_pool2d(xg, 2, output_size=(4, 5), _random_samples=s)
    (o * tessel.arange(float(o.numel())).reshape(o.shape)).sum().backward()
    assert xg.grad[0, 1, :3].tolist() == [[20.0, 21.0, 0.0, 22.0, 0.0, 0.0, 0.0, 0.0],
                                          [0.0, 0.0, 0.0, 0.0, 0.0, 23.0, 0.0, 24.0],
                                          [25.0, 26.0, 0.0, 27.0, 28.0, 0.0, 0.0, 0.0]]  # torch's
    x3 = (tessel.arange(1 * 2 * 5 * 6 * 7.0).reshape(1, 2, 5, 6, 7) * 0.29).cos()
    s3 = ((tessel.arange(6.0).reshape(1, 2, 3) * 0.377 + 0.05) % 1).float()
    _, i3 = nn.FractionalMaxPool3d((2, 3, 2), output_size=(3, 3, 4), return_indices=True, _random_samples=s3)(x3)
    assert i3[0, 1, 2].tolist() == [[182, 136, 137, 180], [182, 157, 158, 202], [203, 157, 158, 202]]  # torch's
    n = tessel.tensor([[[[1., math.nan, 3.], [math.nan, 2., 5.], [0., 1., 2.]]]])
    o, i = F.fractional_max_pool2d_with_indices(n, 2, output_size=2, _random_samples=tessel.tensor([[[0.5, 0.5]]]))
    assert i.reshape(-1).tolist() == [3, 1, 3, 5] and math.isnan(o[0, 0, 0, 0].item())  # torch's: the last NaN


def test_fractional_max_pool_draws_as_torch_from_a_fresh_seed():
    x = (tessel.arange(2 * 3 * 7 * 8.0).reshape(2, 3, 7, 8) * 0.37).sin()
    tessel.manual_seed(0)
    _, i = F.fractional_max_pool2d(x, 2, output_size=(4, 5), return_indices=True)
    assert i[0, 0].tolist() == [[1, 3, 4, 5, 6], [8, 19, 20, 21, 22], [24, 35, 36, 38, 38], [40, 42, 52, 54, 55]]
    tessel.manual_seed(0)  # torch's windows for its rand(2, 3, 2, dtype=float64) after manual_seed(0)
    _, i = nn.FractionalMaxPool2d(3, output_ratio=0.5, return_indices=True)(x.double())
    assert i[1, 2].tolist() == [[10, 12, 13, 13], [32, 28, 30, 30], [48, 44, 46, 47]]


def test_fractional_max_pool_errors():
    x = tessel.ones(2, 3, 7, 8)
    s = tessel.full((2, 3, 2), 0.5)
    with pytest.raises(ValueError, match="fractional_max_pool2d requires specifying either an output_size or an "
                                         "output_ratio"):
        F.fractional_max_pool2d(x, 2)
    with pytest.raises(RuntimeError, match="fractional_max_pool2d\\(\\): pool height 5 too large relative to input "
                                           "height 7"):
        F.fractional_max_pool2d(x, 5, output_size=(4, 5), _random_samples=s)
    with pytest.raises(RuntimeError, match="Expect _random_samples.size\\(0\\) no less then input batch size."):
        F.fractional_max_pool2d(x, 2, output_size=(4, 5), _random_samples=s[:1])
    with pytest.raises(RuntimeError, match="Expect _random_samples to have the same dtype as input"):
        F.fractional_max_pool2d(x, 2, output_size=(4, 5), _random_samples=s.double())
    with pytest.raises(RuntimeError, match="fractional_max_pool3d_out\\(\\): pool time 4 too large relative to "
                                           "input time 5"):
        F.fractional_max_pool3d(tessel.ones(1, 2, 5, 6, 7), (4, 2, 2), output_size=(3, 3, 3),
                                _random_samples=tessel.full((1, 2, 3), 0.5))
    with pytest.raises(ValueError, match="FractionalMaxPool2d requires specifying either an output size, or a "
                                         "pooling ratio"):
        nn.FractionalMaxPool2d(2)
    with pytest.raises(ValueError, match="only one of output_size and output_ratio may be specified"):
        nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5)
    with pytest.raises(ValueError, match=r"output_ratio must be between 0 and 1 \(got 1.5\)"):
        nn.FractionalMaxPool2d(2, output_ratio=1.5)


def test_adaptive_log_softmax_with_loss():
    asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[3, 6], div_value=2.0, head_bias=True)
    assert [(k, tuple(v.shape)) for k, v in asm.state_dict().items()] == [
        ("head.weight", (5, 8)), ("head.bias", (5,)), ("tail.0.0.weight", (4, 8)), ("tail.0.1.weight", (3, 4)),
        ("tail.1.0.weight", (2, 8)), ("tail.1.1.weight", (4, 2))]  # torch's
    with tessel.no_grad():
        for i, p in enumerate(asm.parameters()):
            p.copy_((tessel.arange(float(p.numel())).reshape(p.shape) * (0.37 + 0.11 * i)).sin() * 0.5)
    x = (tessel.arange(32.0).reshape(4, 8) * 0.73).cos().requires_grad_()
    out, loss = asm(x, tessel.tensor([0, 4, 9, 2]))
    assert out.tolist() == approx([-3.425731658935547, -2.447152853012085, -5.894164562225342, -2.535388946533203])
    assert loss.item() == approx(3.5756096839904785)  # torch's
    loss.backward()
    assert asm.head.bias.grad.tolist() == approx(
        [-0.19669228792190552, 0.29642558097839355, -0.2014467865228653, 0.3149353861808777, -0.2132219672203064])
    assert asm.log_prob(x.detach())[0].tolist() == approx(
        [-3.425731658935547, -1.028705358505249, -3.222672939300537, -1.8435696363449097, -3.1586709022521973,
         -1.1116549968719482, -4.329755783081055, -4.248208999633789, -5.310700416564941, -4.827078342437744])
    assert asm.predict(x.detach()).tolist() == [1, 5, 1, 4]  # torch's
    out, loss = asm(x[2].detach(), tessel.tensor(9))
    assert out.shape == () and out.item() == approx(-5.894164562225342)
    with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 9\], but values in range \[0, 10\] "
                                           r"were found."):
        asm(x, tessel.tensor([0, 4, 10, 2]))
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique, positive integers sorted"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 10])
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6])  # the last cluster's projection: 8 // 16 = 0 features
    assert [tuple(v.shape) for v in asm.state_dict().values()] == [(5, 8), (2, 8), (3, 2), (0, 8), (4, 0)]  # torch's
    with tessel.no_grad():
        for i, p in enumerate(asm.parameters()):
            p.copy_((tessel.arange(float(p.numel())).reshape(p.shape) * (0.37 + 0.11 * i)).sin() * 0.5)
    out, loss = asm((tessel.arange(16.0).reshape(2, 8) * 0.3).cos(), tessel.tensor([7, 1]))
    assert out.tolist() == approx([-3.6945102214813232, -0.5198497176170349])  # torch's


def test_linear_cross_entropy():
    x = tessel.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], requires_grad=True)
    w = tessel.tensor([[0.1, 0.2, -0.3], [0.0, -0.5, 0.4], [0.3, 0.3, 0.3], [-0.2, 0.1, 0.0]], requires_grad=True)
    t = tessel.tensor([2, 0])
    loss = F.linear_cross_entropy(x, w, t, linear_bias=tessel.tensor([0.1, -0.1, 0.0, 0.2]))
    loss.backward()
    assert loss.item() == approx(1.2425181865692139)  # torch's
    assert _rows(w.grad)[:6] == approx([-0.47420528531074524, -0.12314558029174805, 0.2462911605834961,
                                        0.23596152663230896, -0.2412133812904358, 0.4824267625808716])
    assert F.linear_cross_entropy(x, w, t, reduction="none", label_smoothing=0.1).tolist() == approx(
        [1.4512088298797607, 1.1534655094146729])  # torch's
    assert F.linear_cross_entropy(x, w, tessel.tensor([2, 7]), ignore_index=7).item() == approx(1.4262088537216187)
    p = tessel.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    assert F.linear_cross_entropy(x, w, p, weight=tessel.tensor([1., 2., 3., 4.])).item() == approx(
        4.4231767654418945)  # torch's
    wk = tessel.arange(24.0).reshape(4, 2, 3) / 10  # a K-dimensional loss: logits [N, C, 2]
    assert F.linear_cross_entropy(x, wk, tessel.tensor([[0, 3], [1, 2]]), reduction="none").reshape(-1).tolist() \
        == approx([3.19413161277771, 0.4941317141056061, 2.0882842540740967, 1.3382842540740967])  # torch's
    with pytest.raises(RuntimeError, match="ignore_index cannot be specified when target contains probabilities"):
        F.linear_cross_entropy(x, w, p, ignore_index=1)
    with pytest.raises(RuntimeError, match="K-dimensional loss defined by linear_weight shape \\(4, 2, 3\\) "
                                           "requires batched input"):
        F.linear_cross_entropy(x[0], wk, tessel.tensor([0, 1]))
    with pytest.warns(UserWarning, match="linear_cross_entropy: ``options`` ignored; chunked path needs"):
        F.linear_cross_entropy(x, w, t, label_smoothing=0.2, options=nn.LinearCrossEntropyOptions())
    with pytest.raises(ValueError, match="invalid acc_policy: 'x'"):
        nn.LinearCrossEntropyOptions(acc_policy="x")
    m = nn.LinearCrossEntropyLoss(3, 4, out_features=(2,), bias=True, reduction="sum", label_smoothing=0.1)
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == [("linear.weight", (8, 3)),
                                                                        ("linear.bias", (8,))]  # torch's
    with tessel.no_grad():
        m.linear.weight.copy_(tessel.arange(24.0).reshape(8, 3) / 20)
        m.linear.bias.copy_(tessel.arange(8.0) / 10)
    assert m(x, tessel.tensor([[0, 3], [1, 2]])).item() == approx(6.440124988555908)  # torch's
    with pytest.raises(RuntimeError, match=r"expected weight shape to be \(4,\), got \(3,\)"):
        nn.LinearCrossEntropyLoss(3, 4, weight=tessel.ones(3))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
