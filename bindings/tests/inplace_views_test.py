"""In-place writes through views and shared bases under autograd (torch's CopySlices semantics,
core/ops/strided_view.h, tessel/_inplace.py), as_strided, and diagonal as a view: every gradient against central
finite differences of the same float64 computation, values against numpy, errors with torch's wording."""
import numpy as np
import pytest

import tessel
import tessel.nn.functional as F


def _w():
    return np.array([[1.0, -2.0, 3.0, 0.5], [4.0, 5.0, -6.0, 1.5], [0.1, 0.2, 0.3, 0.4]])


def _grad_and_fd(f, w0, eps=1e-6):
    """f's gradient at w0 by autograd, and by central differences of f itself (float64)."""
    w = tessel.tensor(w0, dtype=tessel.float64, requires_grad=True)
    f(w).backward()
    fd = np.zeros_like(w0)
    for i in np.ndindex(*w0.shape):
        hi, lo = w0.copy(), w0.copy()
        hi[i] += eps
        lo[i] -= eps
        with tessel.no_grad():
            fd[i] = (f(tessel.tensor(hi, dtype=tessel.float64)).item() - f(tessel.tensor(lo, dtype=tessel.float64)).item()) / (2 * eps)
    return w.grad.numpy(), fd


def _slice_imul(w):
    x = w * 2
    x[:, :2] *= 3
    return (x * x).sum()


def _view_add(w):
    x = w * 2
    v = x[0]
    v.add_(1)
    return (x * x).sum()


def _flat_view_mul(w):
    x = w * 2
    x.view(-1).mul_(w.reshape(-1))
    return (x * x).sum()


def _transposed_row(w):
    x = w * 2
    x.t()[0] += w[:, 3]
    return (x * x).sum()


def _view_of_view(w):
    x = w * 2
    x[1:][:, 1:3].mul_(w[1:, 1:3])
    return (x ** 2).sum()


def _two_views(w):
    x = w * 2
    a, b = x[0], x[1]
    b.add_(a)
    return (a * b).sum() + x.sum()


def _rnn_loop(w):
    h = tessel.zeros(3, 4, dtype=tessel.float64)
    for t in range(4):
        h[:, t] = tessel.tanh(w[:, t] * (t + 1)) + (h[:, t - 1] if t else 0)
    return (h ** 2).sum()


def _diagonal_mul(w):
    x = w * 2
    x.diagonal().mul_(10)
    return (x * x).sum()


def _diagonal_copy(w):
    x = w * 2
    x.diagonal(1).copy_(w[0, :3] * 7)
    return (x * x).sum()


def _base_write_old_view(w):
    x = w * 2
    v = x[0]
    x.mul_(w)
    return (v * v).sum()


def _slice_assign(w):
    x = w * 2
    x[:, 1:3] = w[:, :2] ** 2
    return (x ** 3).sum()


def _clamp_through_unsqueeze(w):
    x = w * 2
    x.unsqueeze(0)[0, 1, :].clamp_(max=1.0)
    return (x ** 2).sum()


def _relu_inplace_on_view(w):
    x = w * 1.5
    F.relu(x[:, 1:], inplace=True)
    return (x * w).sum()


def _as_strided_windows(w):
    x = w * 2
    return (x.as_strided((3, 3), (2, 1), 1) ** 2).sum()


def _masked_assign_on_view(w):
    x = w * 2
    r = x[1]
    r[r > 3.5] = 0.5
    return (x ** 2).sum()


@pytest.mark.parametrize("f", [_slice_imul, _view_add, _flat_view_mul, _transposed_row, _view_of_view, _two_views,
                               _rnn_loop, _diagonal_mul, _diagonal_copy, _base_write_old_view, _slice_assign,
                               _clamp_through_unsqueeze, _relu_inplace_on_view, _as_strided_windows,
                               _masked_assign_on_view])
def test_gradient_of_a_write_through_a_view_matches_finite_differences(f):
    grad, fd = _grad_and_fd(f, _w())
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)
    assert np.abs(grad).sum() > 0


def test_the_write_lands_in_the_base_and_every_view_with_torch_histories():
    w = tessel.tensor(_w(), requires_grad=True)
    x = w * 2
    row0 = x[0]  # taken before the write
    x[:, :2] *= 3
    expected = _w() * 2
    expected[:, :2] *= 3
    np.testing.assert_allclose(x.detach().numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(row0.detach().numpy(), expected[0], rtol=1e-6)
    assert type(x.grad_fn).__name__ == "torch::autograd::CopySlices" or x.grad_fn.name() == "torch::autograd::CopySlices"
    assert row0.grad_fn.name() == "AsStridedBackward0"
    assert row0._base is not None and x._base is None and row0._is_view() and not x._is_view()


def test_diagonal_is_a_view_outside_autograd_too():
    x = tessel.tensor(np.arange(12.0).reshape(3, 4))
    x.diagonal().zero_()
    x.diagonal(-1).fill_(-1.0)
    expected = np.arange(12.0).reshape(3, 4)
    np.fill_diagonal(expected, 0.0)
    expected[1, 0], expected[2, 1] = -1.0, -1.0
    np.testing.assert_array_equal(x.numpy(), expected)
    b = tessel.tensor(np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(b.diagonal(1, 1, 2).numpy(), np.diagonal(np.arange(24.0).reshape(2, 3, 4), 1, 1, 2))
    np.testing.assert_array_equal(b.diagonal(0, 0, 2).numpy(), np.diagonal(np.arange(24.0).reshape(2, 3, 4), 0, 0, 2))


def test_as_strided_storage_offset_and_strides_read_memory_as_numpy():
    base = np.arange(20.0, dtype=np.float32)
    x = tessel.tensor(base.reshape(4, 5))
    got = x.as_strided((3, 4), (5, 2), 1)
    want = np.lib.stride_tricks.as_strided(base[1:], shape=(3, 4), strides=(20, 8))
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(tessel.as_strided(x, (2,), (6,), 2).numpy(), [2.0, 8.0])
    assert x[1:, 2:].storage_offset() == 7 and x.t().stride(0) == 1 and x.stride(-2) == 5
    with pytest.raises(RuntimeError, match="outside a storage of 80 bytes"):
        x.as_strided((5, 5), (5, 1), 0)


def test_errors_as_torch():
    w = tessel.tensor(_w(), requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an in-place"):
        w[0] += 1
    x = w * 2
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single memory"):
        x[0].expand(2, 4).add_(1)
    y = x * x  # saves x
    x[0, 0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    h = w.exp()  # exp saves its output
    h.view(-1)[3] = 0.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h.sum().backward()


# Every activation that takes inplace=True (by keyword, by position, or through its module) writes its input,
# as torch: the caller's tensor holds the result afterwards, also when it is a view or a DTensor.
ACTIVATIONS = {
    "relu": (lambda x, ip: F.relu(x, inplace=ip), lambda x: np.maximum(x, 0)),
    "relu positional": (lambda x, ip: F.relu(x, ip), lambda x: np.maximum(x, 0)),
    "silu": (lambda x, ip: F.silu(x, inplace=ip), lambda x: x / (1 + np.exp(-x))),
    "leaky_relu": (lambda x, ip: F.leaky_relu(x, 0.1, ip), lambda x: np.where(x > 0, x, 0.1 * x)),
    "elu": (lambda x, ip: F.elu(x, inplace=ip), lambda x: np.where(x > 0, x, np.expm1(x))),
    "celu": (lambda x, ip: F.celu(x, 2.0, ip), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x / 2.0))),
    "selu": (lambda x, ip: F.selu(x, inplace=ip),
             lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "hardtanh": (lambda x, ip: F.hardtanh(x, -0.5, 0.5, ip), lambda x: np.clip(x, -0.5, 0.5)),
    "relu6": (lambda x, ip: F.relu6(x, inplace=ip), lambda x: np.clip(x, 0, 6)),
    "hardsigmoid": (lambda x, ip: F.hardsigmoid(x, inplace=ip), lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (lambda x, ip: F.hardswish(x, inplace=ip), lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "mish": (lambda x, ip: F.mish(x, inplace=ip), lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "threshold": (lambda x, ip: F.threshold(x, 0.5, 9.0, ip), lambda x: np.where(x <= 0.5, 9.0, x)),
    "nn.LeakyReLU": (lambda x, ip: tessel.nn.LeakyReLU(0.2, inplace=ip)(x), lambda x: np.where(x > 0, x, 0.2 * x)),
    "nn.ReLU": (lambda x, ip: tessel.nn.ReLU(inplace=ip)(x), lambda x: np.maximum(x, 0)),
    "nn.Hardtanh": (lambda x, ip: tessel.nn.Hardtanh(inplace=ip)(x), lambda x: np.clip(x, -1, 1)),
    "F.elu_": (lambda x, ip: F.elu_(x) if ip else F.elu(x), lambda x: np.where(x > 0, x, np.expm1(x))),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_with_inplace_write_their_input_as_torch(name):
    fn, ref = ACTIVATIONS[name]
    w = _w()
    want = ref(w)
    x = tessel.tensor(w, dtype=tessel.float64)
    out = fn(x, True)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-12, atol=1e-12)  # the caller's tensor holds the result
    if not name.startswith("nn."):
        assert out is x
    base = tessel.tensor(w, dtype=tessel.float64)
    fn(base.view(-1)[4:], True)  # through a view: the base sees it
    np.testing.assert_allclose(base.numpy().reshape(-1)[4:], want.reshape(-1)[4:], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(base.numpy().reshape(-1)[:4], w.reshape(-1)[:4])

    def through_autograd(v):  # recorded: the same gradient as the out-of-place form (1.37: no input at a kink)
        h = v * 1.37
        fn(h, True)
        return (h * v).sum()

    def out_of_place(v):
        return (fn(v * 1.37, False) * v).sum()
    grad, _ = _grad_and_fd(through_autograd, w)
    want_grad, fd = _grad_and_fd(out_of_place, w)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        fn(tessel.tensor(w, requires_grad=True), True)


def test_inplace_activations_write_a_dtensor():
    import tessel.distributed as dist
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import Shard, distribute_tensor
    w = _w()

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for name in ("relu", "elu", "nn.LeakyReLU", "hardtanh"):
            fn, ref = ACTIVATIONS[name]
            y = distribute_tensor(tessel.tensor(w), mesh, [Shard(1)])
            fn(y, True)
            assert y.placements == (Shard(1),)
            np.testing.assert_allclose(y.full_tensor().numpy(), ref(w).astype(np.float32), rtol=1e-6, err_msg=name)
            leaf = distribute_tensor(tessel.tensor(w), mesh, [Shard(1)]).requires_grad_(True)
            h = leaf * 1.0
            out = fn(h, True)
            # Under autograd a module call shares its DTensor argument: the result comes back new (h unchanged).
            assert out is h if not name.startswith("nn.") else out is not h
            (out * out).sum().backward()  # d/dleaf of sum(act(leaf)^2)
            dense = tessel.tensor(w).requires_grad_(True)
            (fn(dense * 1.0, False) ** 2).sum().backward()
            np.testing.assert_allclose(leaf.grad.full_tensor().numpy(), dense.grad.numpy(), rtol=1e-6, err_msg=name)

    tessel.run_ranks(2, rank_fn)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
