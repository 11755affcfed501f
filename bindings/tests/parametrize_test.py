"""torch.nn.utils.parametrize, parametrizations.weight_norm / spectral_norm and the hook-based weight_norm
from Python, on the C++ layers (nn.Linear, nn.Conv1d) and on Python modules: torch's state-dict keys,
values and gradients computed another way (the formula written out on plain leaves, numpy, an SVD), the
checkpoint compatibility between the two weight_norm forms, and a weight-normed block under fully_shard
equal to one process."""
import copy
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.fsdp import fully_shard
from tessel.nn.utils import (parametrize, parametrizations, remove_spectral_norm, remove_weight_norm, spectral_norm,
                             weight_norm)


def _np(t):
    return t.detach().numpy()


def _row_norms(w, dim):
    if dim is None:
        return np.sqrt((w ** 2).sum())
    moved = np.moveaxis(w, dim, 0)
    norms = np.sqrt((moved.reshape(moved.shape[0], -1) ** 2).sum(1))
    shape = [1] * w.ndim
    shape[dim] = w.shape[dim]
    return norms.reshape(shape)


def test_weight_norm_on_a_linear_keeps_its_value_and_trains_g_and_v_as_the_formula_does():
    tessel.manual_seed(0)
    lin = nn.Linear(4, 3)
    w0, b0 = _np(lin.weight).copy(), _np(lin.bias).copy()
    parametrizations.weight_norm(lin)
    assert [k for k, _ in lin.named_parameters()] == [
        "bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert list(lin.state_dict()) == ["bias", "parametrizations.weight.original0",
                                      "parametrizations.weight.original1"]
    g, v = lin.parametrizations.weight.original0, lin.parametrizations.weight.original1
    np.testing.assert_allclose(_np(g), _row_norms(w0, 0), rtol=1e-6)
    np.testing.assert_array_equal(_np(v), w0)
    np.testing.assert_allclose(_np(lin.weight), w0, rtol=1e-6)
    assert parametrize.is_parametrized(lin, "weight") and not parametrize.is_parametrized(lin, "bias")
    with tessel.no_grad():
        g.copy_(g * 2.0)
    x = tessel.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))
    np.testing.assert_allclose(_np(lin(x)), _np(x) @ (2 * w0).T + b0, rtol=1e-5, atol=1e-6)
    # Gradients of g and v equal those of the formula written out on plain leaves.
    (lin(x) ** 2).sum().backward()
    g2, v2 = tessel.tensor(_np(g), requires_grad=True), tessel.tensor(_np(v), requires_grad=True)
    w = v2 * (g2 / ((v2 * v2).sum(1, keepdim=True)).sqrt())
    ((x @ w.transpose(0, 1) + tessel.tensor(b0)) ** 2).sum().backward()
    np.testing.assert_allclose(_np(g.grad), _np(g2.grad), rtol=1e-5)
    np.testing.assert_allclose(_np(v.grad), _np(v2.grad), rtol=1e-5, atol=1e-6)
    # An optimizer over named_parameters steps g and v; the weight follows.
    opt = tessel.optim.SGD(lin.parameters(), lr=0.1)
    before = _np(lin.weight).copy()
    opt.step()
    assert not np.allclose(_np(lin.weight), before)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_on_a_conv_normalizes_over_every_dim_but_dim(dim):
    tessel.manual_seed(1)
    conv = nn.Conv1d(2, 3, 3)
    w0 = _np(conv.weight).copy()
    parametrizations.weight_norm(conv, dim=dim)
    g = conv.parametrizations.weight.original0
    assert tuple(g.shape) == np.shape(_row_norms(w0, dim))
    np.testing.assert_allclose(_np(g), _row_norms(w0, dim), rtol=1e-6)
    with tessel.no_grad():
        g.copy_(g * 0.5)
    x = tessel.randn(2, 2, 7)
    np.testing.assert_allclose(_np(conv(x)), _np(F.conv1d(x, tessel.tensor(0.5 * w0), conv.bias)), rtol=1e-5,
                               atol=1e-6)


def test_hook_based_weight_norm_keys_remove_and_loading_into_the_parametrized_form():
    tessel.manual_seed(2)
    old = nn.Linear(4, 3)
    w0 = _np(old.weight).copy()
    weight_norm(old)
    assert list(old.state_dict()) == ["bias", "weight_g", "weight_v"]
    np.testing.assert_allclose(_np(old.weight_g), _row_norms(w0, 0), rtol=1e-6)
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks on the same parameter weight"):
        weight_norm(old)
    with tessel.no_grad():
        old.weight_g.copy_(old.weight_g * 3.0)
    x = tessel.randn(2, 4)
    want = _np(old(x))
    np.testing.assert_allclose(want, _np(x) @ (3 * w0).T + _np(old.bias), rtol=1e-5, atol=1e-6)
    # torch's _weight_norm_compat_hook: weight_g / weight_v load into original0 / original1.
    new = parametrizations.weight_norm(nn.Linear(4, 3))
    result = new.load_state_dict(old.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_allclose(_np(new(x)), want, rtol=1e-6)
    remove_weight_norm(old)
    assert list(old.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(_np(old.weight), 3 * w0, rtol=1e-5)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        remove_weight_norm(old)
    twin = copy.deepcopy(new)  # torch's: the copy computes its weight from its own originals
    np.testing.assert_allclose(_np(twin(x)), want, rtol=1e-6)
    with tessel.no_grad():
        twin.parametrizations.weight.original0.mul_(2.0)
    np.testing.assert_allclose(_np(twin(x)), _np(x) @ (6 * w0).T + _np(old.bias), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(new(x)), want, rtol=1e-6)  # the original is untouched


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)

    def right_inverse(self, A):
        return A.triu()


class Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.calls = 0

    def forward(self, X):
        self.calls += 1
        return X * self.s


class Bilinear(nn.Module):
    """A Python module whose forward reads self.weight (a parametrized attribute)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(tessel.randn(3, 3))

    def forward(self, x):
        return x @ self.weight


def test_register_parametrization_on_a_python_module_chains_assigns_and_removes():
    tessel.manual_seed(3)
    m = Bilinear()
    a0 = _np(m.weight).copy()
    parametrize.register_parametrization(m, "weight", Symmetric())
    sym = np.triu(a0) + np.triu(a0, 1).T
    np.testing.assert_allclose(_np(m.weight), sym, rtol=1e-6)
    x = tessel.randn(2, 3)
    np.testing.assert_allclose(_np(m(x)), _np(x) @ sym, rtol=1e-5, atol=1e-6)
    scale = Scale(2.0)
    parametrize.register_parametrization(m, "weight", scale)
    np.testing.assert_allclose(_np(m.weight), 2 * sym, rtol=1e-6)
    # One computation per forward however often forward reads the attribute; cached() outside one.
    calls = scale.calls
    m(x)
    assert scale.calls == calls + 1
    with parametrize.cached():
        m.weight, m.weight
    assert scale.calls == calls + 2
    # Assignment goes through right_inverse of every parametrization: Scale has none.
    with pytest.raises(RuntimeError, match="Scale does not implement right_inverse"):
        m.weight = tessel.ones(3, 3)
    parametrize.remove_parametrizations(m, "weight")
    assert not parametrize.is_parametrized(m) and [k for k, _ in m.named_parameters()] == ["weight"]
    np.testing.assert_allclose(_np(m.weight), 2 * sym, rtol=1e-6)
    parametrize.register_parametrization(m, "weight", Symmetric())
    m.weight = tessel.tensor(np.arange(9.0, dtype=np.float32).reshape(3, 3))
    np.testing.assert_allclose(_np(m.parametrizations.weight.original), np.triu(np.arange(9.0).reshape(3, 3)))
    parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
    np.testing.assert_allclose(_np(m.weight), np.triu(np.arange(9.0).reshape(3, 3)))

    class Wider(nn.Module):
        def forward(self, X):
            return tessel.cat([X, X], 0)

    with pytest.raises(ValueError, match="may not change the shape of the tensor"):
        parametrize.register_parametrization(m, "weight", Wider())
    assert [k for k, _ in m.named_parameters()] == ["weight"]  # left as it was


def test_spectral_norm_divides_by_the_largest_singular_value():
    tessel.manual_seed(4)
    lin = nn.Linear(6, 5)
    w0 = _np(lin.weight).copy()
    parametrizations.spectral_norm(lin)
    assert "parametrizations.weight.0._u" in lin.state_dict() and "parametrizations.weight.0._v" in lin.state_dict()
    x = tessel.randn(2, 6)
    for _ in range(30):  # power iterations converge while training
        lin(x)
    sigma = np.linalg.svd(w0, compute_uv=False)[0]
    np.testing.assert_allclose(_np(lin.weight), w0 / sigma, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.linalg.svd(_np(lin.weight), compute_uv=False)[0], 1.0, rtol=1e-4)
    lin.eval()
    u = _np(lin.parametrizations.weight[0]._u).copy()
    lin(x)
    np.testing.assert_array_equal(_np(lin.parametrizations.weight[0]._u), u)  # no update in eval mode
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        parametrizations.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)


def test_hook_based_spectral_norm_iterates_once_per_training_forward_only():
    tessel.manual_seed(6)
    lin = nn.Linear(6, 5)
    w0 = _np(lin.weight).copy()
    spectral_norm(lin)
    assert list(lin.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    x = tessel.randn(2, 6)
    u_before = _np(lin.weight_u).copy()
    lin.weight, lin.weight  # reading outside a forward does not iterate
    np.testing.assert_array_equal(_np(lin.weight_u), u_before)
    for _ in range(40):
        lin(x)
    sigma = np.linalg.svd(w0, compute_uv=False)[0]
    np.testing.assert_allclose(_np(lin.weight), w0 / sigma, rtol=1e-4, atol=1e-6)
    # One step per forward, v then u, as torch's compute_weight: replayed in numpy from the stored vectors.
    u, v = _np(lin.weight_u).astype(np.float64), _np(lin.weight_v).astype(np.float64)
    lin(x)
    v = w0.T @ u
    v /= np.linalg.norm(v)
    u = w0 @ v
    u /= np.linalg.norm(u)
    np.testing.assert_allclose(_np(lin.weight_u), u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(lin.weight_v), v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(lin.weight), w0 / (u @ w0 @ v), rtol=1e-5, atol=1e-6)
    lin.eval()
    lin(x)
    np.testing.assert_allclose(_np(lin.weight_u), u, rtol=1e-5, atol=1e-6)  # eval: no step
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm hooks"):
        spectral_norm(lin)
    remove_spectral_norm(lin)
    assert list(lin.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(_np(lin.weight), w0 / (u @ w0 @ v), rtol=1e-5, atol=1e-6)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = parametrizations.weight_norm(nn.Linear(8, 8))

    def forward(self, x):
        return x + F.gelu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_weight_normed_blocks_under_fully_shard_train_as_one_process():
    # fully_shard gathers g and v before the weight is computed (after the forward pre-hooks).
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    tessel.manual_seed(0)
    ref = Net()
    (ref(tessel.tensor(x)) ** 2).mean().backward()
    want = {k: _np(p.grad) for k, p in ref.named_parameters()}
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        for block in net.layers:
            fully_shard(block)
        fully_shard(net)
        rows = tessel.tensor(x[2 * world.rank:2 * world.rank + 2])
        (net(rows) ** 2).mean().backward()
        grads = {k: p.grad.full_tensor().numpy() for k, p in net.named_parameters()}
        if world.rank == 0:
            got.update(grads)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert sorted(got) == sorted(want)
    for k in want:
        # Each rank's mean is over its 2 rows: the average of the two ranks' gradients is the global one.
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
