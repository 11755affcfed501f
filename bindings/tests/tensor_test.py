"""tessel.Tensor from Python: torch's names for the C++ ops, checked against numpy in float64; autograd
through Python against finite differences; creation functions, dtypes, no_grad and seeding; and the
inputs that used to crash the interpreter (issue 15) now raise Python exceptions."""
import gc
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F


def t64(a):
    return tessel.tensor(np.asarray(a, dtype=np.float64))


def test_arithmetic_with_tensors_and_reflected_scalars_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)) + 3.0
    x, y = t64(a), t64(b)
    cases = {
        "x+y": (x + y, a + b), "x-y": (x - y, a - b), "x*y": (x * y, a * b), "x/y": (x / y, a / b),
        "2+x": (2 + x, 2 + a), "2-x": (2 - x, 2 - a), "2*x": (2 * x, 2 * a), "2/y": (2 / y, 2 / b),
        "x+2": (x + 2, a + 2), "x-2": (x - 2, a - 2), "x/2": (x / 2, a / 2), "-x": (-x, -a),
        "y**1.5": (y ** 1.5, b ** 1.5), "x@y.T": (x @ y.T, a @ b.T), "abs": (abs(x), np.abs(a)),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
    assert (x + 2).dtype == tessel.float64  # a Python scalar keeps the tensor's dtype, as in torch


def test_numpy_array_operands_give_tensors_in_the_arrays_dtype():
    # torch: tensor (op) ndarray is a tensor, a float64 array promotes; tessel also answers ndarray (op) tensor
    # with a tensor (torch raises TypeError for most of those), where numpy used to return an ndarray.
    t = tessel.tensor([1.0, 2.0])
    a64, a32 = np.array([3.0, 4.0]), np.array([3.0, 4.0], np.float32)
    cases = {"t+a": (t + a64, [4, 6], tessel.float64), "a+t": (a64 + t, [4, 6], tessel.float64),
             "t-a": (t - a64, [-2, -2], tessel.float64), "a-t": (a64 - t, [2, 2], tessel.float64),
             "t*a32": (t * a32, [3, 8], tessel.float32), "a32/t": (a32 / t, [3, 2], tessel.float32),
             "t@a32": (t @ a32, 11, tessel.float32), "a32@t": (a32 @ t, 11, tessel.float32)}
    for name, (got, want, dtype) in cases.items():
        assert isinstance(got, tessel.Tensor) and got.dtype == dtype, name
        np.testing.assert_allclose(got.numpy(), want, err_msg=name)
    w = tessel.tensor([1.0, 2.0], requires_grad=True)
    (w * a32).sum().backward()  # the array is a constant: the gradient flows to w alone
    np.testing.assert_allclose(w.grad.numpy(), a32)
    with pytest.raises(TypeError, match="unsupported operand"):
        t + [1, 2]  # lists stay unsupported, as in torch


def test_data_ptr_is_the_first_elements_address_shared_by_views():
    x = tessel.arange(6.0)
    assert x.data_ptr() == x.numpy().ctypes.data != 0
    assert x[2:].data_ptr() == x.data_ptr() + 2 * 4 and x.view(2, 3).data_ptr() == x.data_ptr()
    assert x.clone().data_ptr() != x.data_ptr() and tessel.zeros(0).data_ptr() == 0


def test_import_refuses_numpy_2_whose_abi_the_extension_cannot_read():
    import subprocess
    code = "import numpy; numpy.__version__ = '2.1.0'\ntry:\n    import tessel\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(__import__("os").environ))
    assert "install numpy<2" in out.stdout, out.stdout + out.stderr


def test_numpy_shares_the_tensors_memory_as_torch():
    t = tessel.zeros(2, 3)
    a = t.numpy()
    a[0, 1] = 5.0
    assert t.tolist()[0][1] == 5.0  # written through the array
    t.add_(1.0)
    assert a[1, 2] == 1.0 and a[0, 1] == 6.0  # and the other way
    b = t.transpose(0, 1).numpy()  # a strided view, not a copy
    assert b.shape == (3, 2) and b[1, 0] == 6.0 and not b.flags.c_contiguous
    n = t.narrow(0, 1, 1).numpy()  # a storage offset
    n[0, 2] = -2.0
    assert t.tolist()[1] == [1.0, 1.0, -2.0]
    kept = tessel.ones(4).numpy()  # the array keeps the tensor alive
    gc.collect()
    np.testing.assert_array_equal(kept, np.ones(4, np.float32))
    assert tessel.zeros(0, 3).numpy().shape == (0, 3)
    c = tessel.arange(6).reshape(2, 3).numpy()
    assert c.dtype == np.int64 and c.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_python_scalars_promote_integer_tensors_as_torch_does():
    i = tessel.tensor([1, 2, 3])
    assert i.dtype == tessel.int64
    # an int scalar keeps int64; a float scalar, and true division, give float32 (torch's default dtype)
    assert (i + 1).dtype == tessel.int64 and (i + 1).tolist() == [2, 3, 4]
    for got, want in [(i + 1.5, [2.5, 3.5, 4.5]), (1.5 + i, [2.5, 3.5, 4.5]), (i * 0.5, [0.5, 1.0, 1.5]),
                      (i - 0.5, [0.5, 1.5, 2.5]), (0.5 - i, [-0.5, -1.5, -2.5]), (i / 2, [0.5, 1.0, 1.5]),
                      (i / i, [1.0, 1.0, 1.0]), (3 / i, [3.0, 1.5, 1.0]), (i / 0.5, [2.0, 4.0, 6.0])]:
        assert got.dtype == tessel.float32
        np.testing.assert_allclose(got.numpy(), want)
    np.testing.assert_array_equal((i / tessel.tensor([0, 1, 2])).numpy(), [np.inf, 2.0, 1.5])  # was SIGFPE
    np.testing.assert_array_equal((i == 1.5).numpy(), [False, False, False])
    np.testing.assert_array_equal((i < 1.5).numpy(), [True, False, False])
    np.testing.assert_array_equal((i >= 2).numpy(), [False, True, True])


def test_one_tensor_index_anywhere_in_a_tuple_follows_torch():
    a = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    x = tessel.tensor(a)
    idx = np.array([[1, 2], [3, 0]])
    # torch applies ints as selects first and puts the index's dims where the indexed dim was.
    for got, want in [(x[:, [2, 0]], a[:, [2, 0]]), (x[..., [4, 1, 1]], a[..., [4, 1, 1]]),
                      (x[0, :, tessel.tensor(idx)], a[0][:, idx]), (x[:, 1:3, [0, 3], :], a[:, 1:3, [0, 3], :]),
                      (x[..., [0], 2], a[..., 2][..., [0]]), (x[1, [True, False, True]], a[1][[True, False, True]]),
                      (x[None, :, [2]], a[None][:, :, [2]])]:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)
    w = tessel.tensor(a, requires_grad=True)
    w[:, :, [2, 0, 2]].sum().backward()  # the index's gradient: counts per picked position
    want = np.zeros_like(a)
    want[:, :, 2], want[:, :, 0] = 2.0, 1.0
    np.testing.assert_array_equal(w.grad.numpy(), want)
    # Several tensor indices broadcast together (numpy's and torch's rule): the pairs idiom
    # logp[arange(N), targets], with a gradient into exactly those entries; separated ones go first.
    logp = tessel.tensor(a[0, :, :, 0], requires_grad=True)  # [3, 4]
    picked = logp[tessel.arange(3), tessel.tensor([2, 0, 3])]
    assert picked.tolist() == [a[0, 0, 2, 0], a[0, 1, 0, 0], a[0, 2, 3, 0]]
    picked.sum().backward()
    assert logp.grad.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]]
    np.testing.assert_array_equal(x[[0, 1], :, [1, 3]].numpy(), np.stack([a[0, :, 1], a[1, :, 3]]))  # [2, 3, 5]
    np.testing.assert_array_equal(x[[[0], [1]], [0, 1, 2]].numpy(), a[[[0], [1]], [0, 1, 2]])  # broadcast
    with pytest.raises(IndexError, match="could not be broadcast together"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 1 with size 3"):
        x[[0], [7]]
    # Empty dims, 0-d booleans, ranges / tuples as index lists and 0-d numpy ints, as torch.
    assert tessel.zeros(0, 3)[:, [0, 1]].shape == (0, 2) and tessel.zeros(4, 0)[[0, 1], :].shape == (2, 0)
    m2 = tessel.arange(12.0).reshape(3, 4)
    assert m2[tessel.tensor(True)].shape == (1, 3, 4) and m2[tessel.tensor(False)].shape == (0, 3, 4)
    assert m2[:, tessel.tensor(True)].shape == (3, 1, 4)
    assert m2[range(2), [1, 2]].tolist() == [1.0, 6.0] and m2[[0, 1], (1, 2)].tolist() == [1.0, 6.0]
    assert m2[(0, 2), ].tolist() == [[0.0, 1.0, 2.0, 3.0], [8.0, 9.0, 10.0, 11.0]]
    np.testing.assert_array_equal(x[np.array(0), :, [0, 1]].numpy(), a[0][:, [0, 1]])  # [3, 2]: an int
    # A k-dim boolean mask covers k dims (torch: x[:, m] with m [2, 2] over dims 1 and 2); a 0-d integer
    # tensor beside the index is an int.
    b = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    m = np.array([[True, False], [True, True]])
    np.testing.assert_array_equal(tessel.tensor(b)[:, tessel.tensor(m)].numpy(), [[0, 2, 3], [4, 6, 7]])
    np.testing.assert_array_equal(tessel.tensor(b)[..., tessel.tensor(m)].numpy(), [[0, 2, 3], [4, 6, 7]])
    np.testing.assert_array_equal(x[:, tessel.tensor(1), [0, 1]].numpy(), a[:, 1][:, [0, 1]])


def test_tril_gather_sort_topk_multinomial_and_index_follow_torch():
    a = np.random.default_rng(8).standard_normal((2, 4, 5))
    x = tessel.tensor(a, requires_grad=True)
    np.testing.assert_array_equal(x.tril().detach().numpy(), np.tril(a))
    np.testing.assert_array_equal(tessel.triu(x, 1).detach().numpy(), np.triu(a, 1))
    mask = tessel.tril(tessel.ones(3, 3))
    assert mask.tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    idx = np.array([[[0, 4], [1, 1], [3, 2], [0, 0]], [[2, 2], [4, 0], [1, 3], [0, 4]]])
    g = x.gather(2, tessel.tensor(idx))
    np.testing.assert_array_equal(g.detach().numpy(), np.take_along_axis(a, idx, 2))
    g.sum().backward()  # each picked position counts once per pick
    want = np.zeros_like(a)
    np.add.at(want, (np.arange(2)[:, None, None], np.arange(4)[None, :, None], idx), 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    values, indices = x.sort(dim=1, descending=True)
    np.testing.assert_array_equal(values.detach().numpy(), -np.sort(-a, axis=1))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-a, axis=1, kind="stable"))
    top = tessel.topk(x, 2)
    np.testing.assert_array_equal(top.values.detach().numpy(), -np.sort(-a, axis=-1)[..., :2])
    assert top.indices.dtype == tessel.int64 and tessel.argsort(x[0, 0]).tolist() == np.argsort(a[0, 0]).tolist()
    probs = tessel.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    tessel.manual_seed(2)
    draws = tessel.multinomial(probs, 200, replacement=True)
    assert draws.shape == (2, 200) and set(draws[0].tolist()) == {1} and set(draws[1].tolist()) == {0, 2}
    tessel.manual_seed(2)
    assert tessel.multinomial(probs, 200, replacement=True).tolist() == draws.tolist()  # manual_seed decides
    assert sorted(tessel.multinomial(tessel.ones(4), 4).tolist()) == [0, 1, 2, 3]  # without replacement
    d, i = tessel.arange(10), tessel.tensor(3)
    assert d[i:i + 2].tolist() == [3, 4] and list(range(tessel.tensor(2))) == [0, 1]  # __index__
    with pytest.raises(TypeError, match="converted to an index"):
        d[tessel.tensor(1.5):]
    # Stable sorts with torch's NaN placement, bools, INT64_MIN, 0-d; gather refuses negative indices.
    nan = float("nan")
    v, i = tessel.tensor([1.0, 3.0, nan, 1.0, float("inf"), -2.0]).sort(descending=True)
    assert i.tolist() == [2, 4, 1, 0, 3, 5] and np.isnan(v.tolist()[0])
    assert tessel.tensor([1.0, 3.0, nan, 1.0]).sort().indices.tolist() == [0, 3, 1, 2]
    assert tessel.tensor([True, False, True]).sort(descending=True).values.tolist() == [True, True, False]
    assert tessel.tensor([-2 ** 63, 5, 0]).sort(descending=True).values.tolist() == [5, 0, -2 ** 63]
    assert tessel.tensor(3.0).sort().values.item() == 3.0
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        tessel.arange(6.0).reshape(2, 3).gather(1, [[-1], [0]])
    # multinomial without replacement past the positive weights: the zero-weight categories follow.
    assert tessel.multinomial(tessel.tensor([0.0, 1.0, 0.0]), 2).tolist() == [1, 0]
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        tessel.multinomial(tessel.ones(3), 0)
    with pytest.raises(RuntimeError, match="floating-point"):
        tessel.multinomial(tessel.tensor([1, 2]), 1)


def test_composed_torch_functions_match_numpy_formulas_and_finite_differences():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    x, y = tessel.tensor(a), tessel.tensor(b)
    close = np.testing.assert_allclose
    close(tessel.minimum(x, y).numpy(), np.minimum(a, b)), close(tessel.maximum(x, y).numpy(), np.maximum(a, b))
    close(tessel.logsumexp(x, 1).numpy(), np.log(np.exp(a).sum(1)), rtol=1e-12)
    close(tessel.cumsum(x, 0).numpy(), np.cumsum(a, 0), rtol=1e-12), close(x.cumsum(1).numpy(), np.cumsum(a, 1))
    assert tessel.cumsum(tessel.tensor([1, 2, 3]), 0).tolist() == [1, 3, 6]
    close(F.softplus(x * 30).numpy(), np.where(a * 30 > 20, a * 30, np.log1p(np.exp(a * 30))), rtol=1e-12, atol=1e-15)
    close(F.leaky_relu(x, 0.1).numpy(), np.where(a > 0, a, 0.1 * a)), close(F.elu(x).numpy(), np.where(a > 0, a, np.expm1(a)))
    close(F.logsigmoid(x).numpy(), -np.log1p(np.exp(-a)), rtol=1e-12)
    close(x.flip(1).numpy(), a[:, ::-1]), close(x.roll(1, 1).numpy(), np.roll(a, 1, 1))
    close(x.repeat(2, 1).numpy(), np.tile(a, (2, 1))), close(x.repeat_interleave(2, 0).numpy(), np.repeat(a, 2, 0))
    close(tessel.movedim(x.reshape(3, 2, 2), 0, 2).numpy(), np.moveaxis(a.reshape(3, 2, 2), 0, 2))
    close(tessel.diag(x).numpy(), np.diag(a)), close(tessel.diag(tessel.tensor(a[0])).numpy(), np.diag(a[0]))
    close(tessel.outer(x[0], x[1]).numpy(), np.outer(a[0], a[1])), close(tessel.trace(x).item(), np.trace(a))
    close(tessel.sin(x).numpy(), np.sin(a)), close(tessel.cos(tessel.arange(4.0)).numpy(), np.cos(np.arange(4.0)), rtol=1e-6)
    # sin ... erf are C++ ops with gradients (torch's formulas), checked against float64 numpy derivatives.
    import math
    erf = np.vectorize(math.erf)
    fns = {"sin": (np.sin, np.cos), "cos": (np.cos, lambda v: -np.sin(v)), "log1p": (np.log1p, lambda v: 1 / (1 + v)),
           "erf": (erf, lambda v: 2 / np.sqrt(np.pi) * np.exp(-v * v)), "expm1": (np.expm1, np.exp),
           "exp2": (np.exp2, lambda v: np.log(2) * np.exp2(v)), "floor": (np.floor, np.zeros_like),
           "ceil": (np.ceil, np.zeros_like), "round": (np.round, np.zeros_like)}
    for name, (f, df) in fns.items():
        v = np.abs(a) if name == "log1p" else a
        w = tessel.tensor(v, requires_grad=True)
        out = getattr(tessel, name)(w)
        out.backward(tessel.ones_like(out))
        close(out.detach().numpy(), f(v), rtol=1e-12, atol=1e-15, err_msg=name)
        close(w.grad.numpy(), df(v), rtol=1e-12, atol=1e-15, err_msg=name)
        close(getattr(w, name)().detach().numpy(), f(v), rtol=1e-12, atol=1e-15, err_msg=name)  # the method form
    assert tessel.round(tessel.tensor([0.5, 1.5, 2.5, -0.5])).tolist() == [0.0, 2.0, 2.0, -0.0]  # half to even
    close(tessel.round(tessel.tensor([1.2345, -2.5678]), decimals=2).numpy(), [1.23, -2.57], rtol=1e-6)
    assert tessel.floor(tessel.tensor([3, -2])).tolist() == [3, -2]  # integers: a copy
    assert tessel.trunc(tessel.tensor([-2.5, -0.5, 0.5, 1.9])).tolist() == [-2.0, -0.0, 0.0, 1.0]
    assert tessel.tensor([-7, 3]).fix().tolist() == [-7, 3]
    assert tessel.exp(tessel.tensor([0, 1])).dtype == tessel.float32 and tessel.tensor([4]).sqrt().tolist() == [2.0]
    s = tessel.sin(tessel.tensor([0, 1]))  # integers promote to float32, as torch
    assert s.dtype == tessel.float32 and abs(s.tolist()[1] - math.sin(1)) < 1e-6
    assert tessel.tensor([True]).exp2().tolist() == [2.0]
    assert F.one_hot(tessel.tensor([2, 0]), 3).tolist() == [[0, 0, 1], [1, 0, 0]]
    close(F.pad(x, (1, 2)).numpy(), np.pad(a, ((0, 0), (1, 2)))), close(F.pad(x, (0, -1, 1, 0), value=5.0).numpy(),
                                                                      np.pad(a[:, :3], ((1, 0), (0, 0)), constant_values=5))
    close(F.normalize(x, dim=1).numpy(), a / np.linalg.norm(a, axis=1, keepdims=True))
    t = (b > 0).astype(np.float64)
    close(F.binary_cross_entropy_with_logits(x, tessel.tensor(t)).item(),
          np.mean(np.maximum(a, 0) - a * t + np.log1p(np.exp(-np.abs(a)))), rtol=1e-12)
    p = 1 / (1 + np.exp(-a))
    close(nn.BCELoss()(tessel.tensor(p), tessel.tensor(t)).item(), -np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)), rtol=1e-10)
    logp = a - np.log(np.exp(a).sum(1, keepdims=True))
    close(F.nll_loss(tessel.tensor(logp), tessel.tensor([1, -100, 3])).item(), -(logp[0, 1] + logp[2, 3]) / 2, rtol=1e-12)
    close(F.nll_loss(tessel.tensor(logp), tessel.tensor([1, -100, 3]), reduction="none").numpy(), [-logp[0, 1], 0, -logp[2, 3]])
    close(nn.SmoothL1Loss()(x, y).item(), np.mean(np.where(np.abs(a - b) < 1, 0.5 * (a - b) ** 2, np.abs(a - b) - 0.5)))
    close(nn.L1Loss(reduction="sum")(x, y).item(), np.abs(a - b).sum())
    close(nn.Softmax(dim=0)(x).numpy(), np.exp(a) / np.exp(a).sum(0)), close(nn.Flatten(0)(x).numpy(), a.reshape(-1))
    assert tessel.isnan(tessel.tensor([1.0, float("nan")])).tolist() == [False, True]
    assert tessel.nan_to_num(tessel.tensor([float("nan"), float("inf")]), posinf=7.0).tolist() == [0.0, 7.0]
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_ones((1,)).dtype == tessel.float64
    assert tessel.nonzero(tessel.tensor([[0, 1], [1, 0]])).tolist() == [[0, 1], [1, 0]]
    assert tessel.any(tessel.tensor([0, 0, 1])).item() and not tessel.all(tessel.tensor([0, 1])).item()
    # Edge values as torch (a review's findings): gradients at exactly 0, NaN and ties, inf in sums.
    z = tessel.tensor([0.0, 0.0], requires_grad=True)
    (F.softplus(z).sum() + F.logsigmoid(z).sum() + F.elu(z).sum()).backward()
    close(z.grad.numpy(), [0.5 + 0.5 + 1.0] * 2)
    z = tessel.tensor([0.0, 0.0], requires_grad=True)
    F.binary_cross_entropy_with_logits(z, tessel.tensor([1.0, 0.0]), reduction="sum").backward()
    close(z.grad.numpy(), [-0.5, 0.5])
    nan = float("nan")
    assert np.isnan(tessel.minimum(tessel.tensor([nan, 1.0]), tessel.tensor([1.0, nan])).numpy()).all()
    u, v = tessel.tensor([2.0], requires_grad=True), tessel.tensor([2.0], requires_grad=True)
    tessel.maximum(u, v).sum().backward()
    assert u.grad.tolist() == [0.5] and v.grad.tolist() == [0.5]  # a tie splits the gradient
    assert tessel.cumsum(tessel.tensor([1.0, float("inf"), 2.0]), 0).tolist() == [1.0, float("inf"), float("inf")]
    assert tessel.cumsum(tessel.tensor([True, False, True]), 0).tolist() == [1, 1, 2]
    assert tessel.cumsum(tessel.tensor([1, 2], dtype=tessel.int32), 0).dtype == tessel.int64
    assert np.isnan(tessel.cumsum(tessel.tensor([1.0, 2.0, nan]), 0).numpy()[2])
    assert tessel.cumsum(tessel.tensor([1.0, 2.0, nan]), 0).tolist()[:2] == [1.0, 3.0]
    assert tessel.logsumexp(tessel.tensor([[float("inf"), 1.0], [-float("inf"), -float("inf")]]), 1).tolist() == \
        [float("inf"), -float("inf")]
    assert tessel.sign(tessel.tensor([nan, -2.0, 0.0])).tolist() == [0.0, -1.0, 0.0]
    assert tessel.floor(tessel.tensor([3, -2])).dtype == tessel.int64
    # Loss modules bind torch's positional order; Softmax's default dim is torch's legacy choice.
    logp = tessel.tensor(np.log(np.full((2, 3), 1 / 3)))
    w = tessel.tensor([1.0, 2.0, 3.0], dtype=tessel.float64)  # (logp's dtype: torch refuses float32 weights here)
    close(nn.NLLLoss(w)(logp, tessel.tensor([0, 2])).item(), np.log(3.0), rtol=1e-12)  # weighted mean of equal terms
    close(F.nll_loss(logp, tessel.tensor([0, 2]), w, reduction="sum").item(), 4 * np.log(3.0), rtol=1e-12)
    close(nn.HuberLoss("sum", 0.5)(x, y).item(),
          np.sum(np.where(np.abs(a - b) < 0.5, 0.5 * (a - b) ** 2, 0.5 * (np.abs(a - b) - 0.25))), rtol=1e-12)
    with pytest.raises(TypeError, match="unexpected keyword"):
        nn.L1Loss(delta=1.0)
    c = tessel.tensor(rng.standard_normal((2, 3, 4)))
    close(nn.Softmax()(c).numpy(), np.exp(c.numpy()) / np.exp(c.numpy()).sum(0))  # 3-D: dim 0, as torch
    # Gradients of the composed ones, against central differences.
    for fn in (lambda z: tessel.logsumexp(z, 1).sum(), lambda z: F.softplus(z * 3.0).sum(),
               lambda z: tessel.minimum(z, y).sum() + tessel.cumsum(z, 1).pow(2.0).sum(),
               lambda z: F.binary_cross_entropy_with_logits(z, tessel.tensor(t)),
               lambda z: F.pad(z, (1, 1)).pow(2.0).sum() + z.roll(1, 0).flip(1)[0].sum() * 3.0):
        z = tessel.tensor(a, requires_grad=True)
        fn(z).backward()
        num = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            d = np.zeros_like(a)
            d[i] = 1e-6
            num[i] = (fn(tessel.tensor(a + d)).item() - fn(tessel.tensor(a - d)).item()) / 2e-6
        close(z.grad.numpy(), num, rtol=1e-5, atol=1e-6)


def test_prod_meshgrid_split_kron_unique_and_searches_match_numpy():
    a = np.array([[1.5, -2.0, 0.0], [3.0, 0.5, -1.0]])
    x = tessel.tensor(a, requires_grad=True)
    np.testing.assert_allclose(x.prod(1).detach().numpy(), a.prod(1))
    assert tessel.prod(tessel.tensor([2, 3, 4])).item() == 24 and tessel.prod(tessel.tensor([2, 3, 4])).dtype == tessel.int64
    x.prod(1).sum().backward()  # d/dx_j of Π x = Π_{k != j} x_k, also where a factor is 0
    np.testing.assert_allclose(x.grad.numpy(), [[-0.0, 0.0, -3.0], [-0.5, -3.0, 1.5]])
    for indexing in ("ij", "xy"):
        got = tessel.meshgrid(tessel.arange(3), tessel.arange(2), indexing=indexing)
        want = np.meshgrid(np.arange(3), np.arange(2), indexing=indexing)
        assert all(np.array_equal(u.numpy(), v) for u, v in zip(got, want))
    assert [t.tolist() for t in tessel.tensor_split(tessel.arange(7), [1, 5])] == [[0], [1, 2, 3, 4], [5, 6]]
    assert [t.numel() for t in tessel.tensor_split(tessel.arange(7), 3)] == [3, 2, 2]
    np.testing.assert_array_equal(tessel.kron(tessel.tensor(a), tessel.tensor(np.eye(2))).numpy(), np.kron(a, np.eye(2)))
    values, inverse, counts = tessel.unique(tessel.tensor([3, 1, 3, 2]), return_inverse=True, return_counts=True)
    assert values.tolist() == [1, 2, 3] and inverse.tolist() == [2, 0, 2, 1] and counts.tolist() == [1, 1, 2]
    # dim=: unique rows (or columns) in lexicographic order, as torch's; the inverse indexes dim's positions
    rows = tessel.tensor([[1, 2], [0, 5], [1, 2], [0, 4]])
    values, inverse, counts = tessel.unique(rows, dim=0, return_inverse=True, return_counts=True)
    assert values.tolist() == [[0, 4], [0, 5], [1, 2]] and inverse.tolist() == [2, 1, 2, 0]
    assert counts.tolist() == [1, 1, 2]
    cols = rows.t().unique(dim=-1)
    assert cols.tolist() == [[0, 0, 1], [4, 5, 2]]
    out, inv, cnt = tessel.unique_consecutive(tessel.tensor([[1, 1, 2, 1], [3, 3, 4, 3]]), dim=1, return_inverse=True,
                                              return_counts=True)
    assert out.tolist() == [[1, 2, 1], [3, 4, 3]] and inv.tolist() == [0, 0, 1, 2] and cnt.tolist() == [2, 1, 1]
    with pytest.raises(IndexError, match="Dimension out of range"):
        tessel.unique(rows, dim=2)
    assert tessel.bincount(tessel.tensor([0, 2, 2, 5])).tolist() == [1, 0, 2, 0, 0, 1]
    assert tessel.searchsorted(tessel.tensor([1, 3, 5]), tessel.tensor([0, 3, 6])).tolist() == [0, 1, 3]
    assert tessel.bucketize(tessel.tensor([0.5, 3.0]), tessel.tensor([1.0, 3.0]), right=True).tolist() == [0, 2]
    assert tessel.searchsorted(tessel.tensor([5, 1, 7, 3]), tessel.tensor([0.5, 2, 6, 8]),
                               sorter=tessel.tensor([1, 3, 0, 2])).tolist() == [0, 1, 3, 4]
    assert [t.tolist() for t in tessel.tensor_split(tessel.arange(7), [-2])] == [[0, 1, 2, 3, 4], [5, 6]]
    assert len(tessel.tensor_split(tessel.arange(7), tessel.tensor(3))) == 3
    assert tessel.bincount(tessel.tensor([0, 1, 1]), weights=tessel.tensor([0.5, 1.0, 2.0])).dtype == tessel.float32


def test_einsum_matches_numpy_and_finite_differences():
    rng = np.random.default_rng(12)
    cases = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
             ("i,j->ij", [(3,), (4,)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
             ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("i,i->", [(5,), (5,)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
             ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ij,jk", [(3, 4), (4, 2)]),
             ("bid,bjd->bij", [(1, 3, 4), (2, 5, 4)])]
    for eq, shapes in cases:
        arrs = [rng.standard_normal(sh) for sh in shapes]
        got = tessel.einsum(eq, *[tessel.tensor(a) for a in arrs]).numpy()
        np.testing.assert_allclose(got, np.einsum(eq, *arrs), rtol=1e-12, atol=1e-12, err_msg=eq)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3))
    x = tessel.tensor(a, requires_grad=True)
    (tessel.einsum("bij,jk->bik", x, tessel.tensor(b)) ** 2).sum().backward()
    num = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = 1e-6
        num[i] = ((np.einsum("bij,jk->bik", a + d, b) ** 2).sum() - (np.einsum("bij,jk->bik", a - d, b) ** 2).sum()) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-5, atol=1e-6)
    assert tessel.einsum("ii->i", tessel.ones(3, 3)).tolist() == [1.0, 1.0, 1.0]  # a diagonal (composed_functions_test)
    got = tessel.einsum("ij,jk->ik", tessel.tensor([[1, 2]]), tessel.tensor([[3], [4]]))
    assert got.dtype == tessel.int64 and got.tolist() == [[11]]  # integer operands, as torch


def test_var_std_softmax_dtype_and_spatial_cross_entropy_follow_torch():
    a = np.random.default_rng(3).standard_normal((3, 4, 5))
    x = tessel.tensor(a)  # float64
    np.testing.assert_allclose(x.var().item(), a.var(ddof=1), rtol=1e-12)
    np.testing.assert_allclose(x.std(1).numpy(), a.std(1, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(tessel.var(x, (0, 2), keepdim=True, correction=0).numpy(),
                               a.var((0, 2), keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(x.std(-1, unbiased=False).numpy(), a.std(-1), rtol=1e-12)
    assert np.isnan(tessel.tensor([2.0]).var().item())  # one sample, correction 1: 0 / 0
    np.testing.assert_allclose(x.var(False).item(), a.var(), rtol=1e-12)  # var(unbiased=False), positional
    np.testing.assert_allclose(x.std(dim=[]).item(), a.std(ddof=1), rtol=1e-12)  # [] is every dim
    with pytest.raises(RuntimeError, match="only support floating point"):
        tessel.tensor([1, 2]).std()
    h = tessel.tensor([[1.0, 2.0, 3.0]], dtype=tessel.bfloat16)
    p = F.softmax(h, dim=-1, dtype=tessel.float32)
    assert p.dtype == tessel.float32 and h.softmax(-1, dtype=tessel.float64).dtype == tessel.float64
    np.testing.assert_allclose(p.numpy()[0], np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-6)
    assert F.log_softmax(h, 1, dtype=tessel.float32).dtype == tessel.float32
    # cross_entropy over (N, C, d1): classes on dim 1, as torch; the same as the rows moved last.
    logits = np.random.default_rng(4).standard_normal((2, 5, 3)).astype(np.float32)
    target = np.array([[0, 4, 2], [1, -100, 3]])
    rows = tessel.tensor(logits.transpose(0, 2, 1).reshape(-1, 5))
    want = F.cross_entropy(rows, tessel.tensor(target.reshape(-1)), reduction="none").numpy().reshape(2, 3)
    got = F.cross_entropy(tessel.tensor(logits), tessel.tensor(target), reduction="none")
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(F.cross_entropy(tessel.tensor(logits), tessel.tensor(target)).item(),
                               want.sum() / 5, rtol=1e-6)
    with pytest.raises(ValueError, match=r"needs targets of shape \[2, 3, 2\]"):  # rows would pair wrongly
        F.cross_entropy(tessel.zeros(2, 5, 3, 2), tessel.zeros(2, 2, 3, dtype=tessel.int64))


def test_maml_second_order_meta_gradient_matches_finite_differences():
    # MAML's outer gradient differentiates through one inner SGD step (create_graph=True): Linear, tanh,
    # cross_entropy and mse all take second derivatives. Float64, against central differences.
    rng = np.random.default_rng(12)
    xs, ys = rng.standard_normal((6, 3)), rng.integers(0, 4, 6)
    xq, yq = rng.standard_normal((5, 3)), rng.integers(0, 4, 5)
    w1, b1, w2 = rng.standard_normal((5, 3)), rng.standard_normal(5), rng.standard_normal((4, 5))

    def outer_loss(params, create_graph):
        a, b, c = params
        def net(x, a, b, c):
            return F.linear(F.linear(tessel.tensor(x), a, b).tanh(), c)
        inner = F.cross_entropy(net(xs, a, b, c), tessel.tensor(ys))
        grads = tessel.autograd.grad(inner, [a, b, c], create_graph=create_graph)
        fast = [p - 0.5 * g for p, g in zip((a, b, c), grads)]
        return F.cross_entropy(net(xq, *fast), tessel.tensor(yq)) + 0.1 * (fast[1] ** 2).sum()

    params = [tessel.tensor(v, requires_grad=True) for v in (w1, b1, w2)]
    meta = tessel.autograd.grad(outer_loss(params, True), params)
    eps = 1e-6
    for k, base in enumerate((w1, b1, w2)):
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            vals = []
            for sign in (1, -1):
                shifted = [v.copy() for v in (w1, b1, w2)]
                shifted[k][idx] += sign * eps
                vals.append(outer_loss([tessel.tensor(v, requires_grad=True) for v in shifted], False).item())
            fd[idx] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(meta[k].numpy(), fd, rtol=1e-5, atol=1e-8)


def test_load_reads_a_file_torch_save_wrote(tmp_path):
    # tests/data/torch_saved.pt was written by torch 2.15's torch.save (tests/data/make_torch_saved.py).
    import collections
    import os
    import pickle
    import zipfile
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_saved.pt")
    d = tessel.load(path, map_location="cpu", weights_only=True)
    assert isinstance(d["model"], collections.OrderedDict) and d["step"] == 7 and d["name"] == "ckpt"
    np.testing.assert_array_equal(d["model"]["weight"].numpy(), (np.arange(6.0, dtype=np.float32) / 10).reshape(2, 3))
    assert d["half"].dtype == tessel.float16 and d["half"].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert d["bf16"].dtype == tessel.bfloat16 and d["bf16"].float().tolist() == [1.5, -2.25]
    assert d["ints_t"].dtype == tessel.int64 and d["ints_t"].tolist() == [[1, 3], [2, 4]]  # the transpose's values
    assert d["param"].requires_grad and not d["half"].requires_grad
    assert d["flags"].tolist() == [True, False] and d["strided"].tolist() == [2.0, 4.0, 6.0]
    assert d["whole"].tolist() == list(map(float, range(10)))
    assert d["f64"].dtype == tessel.float64 and d["f64"].tolist() == [1e-300, 2.0]
    assert d["i32"].tolist() == [-7] and d["u8"].dtype == tessel.uint8 and d["u8"].tolist() == [255]
    assert d["list"][0].tolist() == [0.0] and d["list"][1] == (1, 2.5)
    assert d["scalar"].shape == () and d["scalar"].item() == 3.5  # 0-d stays 0-d
    assert d["scale"].shape == () and d["scale"].requires_grad and d["scale"].item() == 2.0
    lin = tessel.nn.Linear(3, 2)
    lin.load_state_dict(d["model"])
    assert lin.bias.tolist() == [0.5, -0.5]
    with open(path, "rb") as f:  # a file object too
        assert tessel.load(f)["step"] == 7
    import threading

    def through_a_pipe(blob):  # a non-seekable stream, as torch.load accepts
        r, w = os.pipe()
        threading.Thread(target=lambda: (os.write(w, blob), os.close(w))).start()
        with os.fdopen(r, "rb") as stream:
            return tessel.load(stream)
    with open(path, "rb") as f:
        assert through_a_pipe(f.read())["step"] == 7
    own = tmp_path / "magic.pt"  # tessel's pickle whose data holds the zip end-record signature bytes
    tessel.save({"v": tessel.tensor([0, 0x06054B50, 0], dtype=tessel.int32)}, str(own))
    assert tessel.load(str(own))["v"].tolist() == [0, 0x06054B50, 0]
    assert through_a_pipe(own.read_bytes())["v"].tolist() == [0, 0x06054B50, 0]
    legacy = tmp_path / "legacy.pt"  # the pre-1.6 format starts with torch's magic number
    legacy.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="legacy"):
        tessel.load(str(legacy))
    # Only tensors, plain containers and torch's allowed classes are built: any other class is refused by name.
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("bad/data.pkl", pickle.dumps(collections.defaultdict(int, a=1), protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed: unsupported global "
                                                     "collections.defaultdict"):
        tessel.load(str(bad))
    tessel.save({"w": tessel.ones(2)}, str(tmp_path / "own.pt"))  # tessel's own format still loads
    assert tessel.load(str(tmp_path / "own.pt"))["w"].tolist() == [1.0, 1.0]


def test_index_add_accumulates_repeated_indices_and_differentiates_both_inputs():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 5, 2))
    idx = [0, 2, 2, 1, 0]
    want = a.copy()
    for j, i in enumerate(idx):
        want[:, i] += 2.0 * b[:, j]
    x, src = tessel.tensor(a, requires_grad=True), tessel.tensor(b, requires_grad=True)
    y = x.index_add(1, tessel.tensor(idx), src, alpha=2.0)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12)
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-12)
    np.testing.assert_allclose(src.grad.numpy(), 2 * 2.0 * want[:, idx], rtol=1e-12)
    z = tessel.zeros(3).index_add_(0, tessel.tensor([2, 2, 0]), tessel.tensor([1.0, 2.0, 5.0]))
    assert z.tolist() == [5.0, 0.0, 3.0] and tessel.index_add(tessel.zeros(2), 0, tessel.tensor([1]),
                                                              tessel.ones(1)).tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation \\(index_add_"):
        tessel.zeros(3, requires_grad=True).index_add_(0, tessel.tensor([0]), tessel.ones(1))
    with pytest.raises(IndexError, match="Number of indices"):
        tessel.zeros(3).index_add(0, tessel.tensor([0, 1]), tessel.ones(1))


def test_autograd_grad_and_backward_inputs_follow_torch():
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    w = tessel.tensor([3.0, 5.0], requires_grad=True)
    h = x * x
    loss = (x * w + h * h).sum()
    gx, gh = tessel.autograd.grad(loss, [x, h], retain_graph=True)
    assert gx.tolist() == [3.0 + 4.0, 5.0 + 32.0] and gh.tolist() == [2.0, 8.0]
    assert x.grad is None and w.grad is None  # grad() accumulates nothing
    (gw,) = tessel.autograd.grad([loss], (w,), grad_outputs=[tessel.tensor(2.0)], retain_graph=True)
    assert gw.tolist() == [2.0, 4.0]
    loss.backward(inputs=[w], retain_graph=True)  # only w.grad
    assert w.grad.tolist() == [1.0, 2.0] and x.grad is None
    loss.backward(inputs=[w])
    assert w.grad.tolist() == [2.0, 4.0]
    unused = tessel.ones(1, requires_grad=True)
    y = (x * 2.0).sum()
    with pytest.raises(ValueError, match="was not used in the graph"):
        tessel.autograd.grad(y, [x, unused], retain_graph=True)
    gx, gu = tessel.autograd.grad(y, [x, unused], allow_unused=True, retain_graph=True)
    assert gx.tolist() == [2.0, 2.0] and gu is None
    assert tessel.autograd.grad(y, [unused], materialize_grads=True)[0].tolist() == [0.0]
    # create_graph (torch's higher-order gradients): d/dx of (dy/dx)^2 for y = sum(x^3) is 36 x^3; a
    # gradient penalty through backward(create_graph=True) keeps x.grad's graph.
    z = tessel.tensor([1.0, -2.0], requires_grad=True)
    (gz,) = tessel.autograd.grad((z ** 3).sum(), [z], create_graph=True)
    assert gz.requires_grad and gz.tolist() == [3.0, 12.0]
    (hz,) = tessel.autograd.grad((gz ** 2).sum(), [z])
    assert hz.tolist() == [36.0, -288.0]
    z.grad = None
    (z.tanh().sum() * 2.0).backward(create_graph=True)
    penalty = (z.grad ** 2).sum()
    (dpen,) = tessel.autograd.grad(penalty, [z])
    t = np.tanh([1.0, -2.0])
    np.testing.assert_allclose(dpen.numpy(), 2 * (2 * (1 - t ** 2)) * (2 * -2 * t * (1 - t ** 2)), rtol=1e-5)
    q4 = tessel.randn(1, 1, 2, 2, requires_grad=True)
    # The first create_graph .grad is a copy, not the seed (a later in-place accumulation must not write
    # into the caller's tensor or a sibling leaf's .grad), and a retained non-leaf .grad keeps its graph.
    a, b, seed = (tessel.tensor([1.0, 2.0], requires_grad=True), tessel.tensor([3.0, 4.0], requires_grad=True),
                  tessel.tensor([1.0, 1.0]))
    (a + b).backward(seed, create_graph=True)
    (a * 3.0).sum().backward()
    assert a.grad.tolist() == [4.0, 4.0] and b.grad.tolist() == [1.0, 1.0] and seed.tolist() == [1.0, 1.0]
    xr = tessel.tensor([0.3, -0.7, 1.1], dtype=tessel.float64, requires_grad=True)
    yr = xr * 2.0
    yr.retain_grad()
    yr.tanh().sum().backward(create_graph=True)
    xr.grad = None
    (xr.sum() + (yr.grad ** 2).sum()).backward()
    th = np.tanh(2 * np.array([0.3, -0.7, 1.1]))
    np.testing.assert_allclose(xr.grad.numpy(), 1 + 2 * (1 - th ** 2) * (-2 * th * (1 - th ** 2)) * 2, rtol=1e-12)
    # Through the fused attention too: its create_graph backward is composed, and the second derivative
    # equals the one through softmax(q kᵀ / √d) v written out (float64).
    q3 = tessel.randn(1, 2, 3, 2, dtype=tessel.float64, requires_grad=True)

    def penalty_grad(attend):
        (g,) = tessel.autograd.grad(attend(q3).pow(2).sum(), [q3], create_graph=True)
        return tessel.autograd.grad((g ** 2).sum(), [q3])[0].numpy()

    np.testing.assert_allclose(
        penalty_grad(lambda x: F.scaled_dot_product_attention(x, x, x)),
        penalty_grad(lambda x: ((x @ x.transpose(-2, -1)) * (1 / np.sqrt(2))).softmax(-1) @ x), rtol=1e-10)
    r = tessel.tensor([1.0, 2.0], requires_grad=True) * 3.0
    r.retain_grad()
    (r * r).sum().backward(inputs=[r])
    assert r.grad.tolist() == [6.0, 12.0]  # once, not again by the retain hook
    a, b = (x * 3.0).sum(), (x * x).sum()
    tessel.autograd.backward([a, b])  # several roots at once
    assert x.grad.tolist() == [3.0 + 2.0, 3.0 + 4.0]


def test_two_tensors_of_different_dtypes_promote_as_torch_result_type():
    f32, f64 = tessel.tensor([1.5, 2.0]), tessel.tensor([0.25, 1.0], dtype=tessel.float64)
    i64, mask = tessel.tensor([2, 3]), tessel.tensor([True, False])
    cases = [(f32 + f64, tessel.float64, [1.75, 3.0]), (f64 - f32, tessel.float64, [-1.25, -1.0]),
             (i64 * f32, tessel.float32, [3.0, 6.0]), (f32 * mask, tessel.float32, [1.5, 0.0]),
             (mask + i64, tessel.int64, [3, 3]), (i64 / f64, tessel.float64, [8.0, 3.0]),
             (f32.add(f64), tessel.float64, [1.75, 3.0]), (i64.mul(mask), tessel.int64, [2, 0]),
             # a 0-d tensor decides only across categories (bool < int < float)
             (f32 + tessel.tensor(1.0, dtype=tessel.float64), tessel.float32, [2.5, 3.0]),
             (i64 + tessel.tensor(0.5), tessel.float32, [2.5, 3.5]),
             (tessel.tensor(1.0, dtype=tessel.float64) + tessel.tensor(2.0), tessel.float64, 3.0),
             (tessel.where(mask, f32, f64), tessel.float64, [1.5, 1.0])]
    for got, dtype, want in cases:
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)
    assert (f32.to(tessel.bfloat16) + f32.to(tessel.float16)).dtype == tessel.float32
    np.testing.assert_array_equal((i64 == tessel.tensor([2.0, 3.5])).numpy(), [True, False])
    np.testing.assert_array_equal((i64 >= tessel.tensor([2.5, 2.5])).numpy(), [False, True])
    # The gradient flows back through the cast into each input's own dtype.
    a = tessel.tensor([1.0, 2.0], requires_grad=True)
    b = tessel.tensor([3.0, 4.0], dtype=tessel.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == tessel.float32 and a.grad.tolist() == [3.0, 4.0]
    assert b.grad.dtype == tessel.float64 and b.grad.tolist() == [1.0, 2.0]


def test_nan_compares_false_except_ne_and_scalars_keep_shape_zero_d():
    x = tessel.tensor([float("nan"), 1.0])
    for got in [x <= 1.0, x >= 1.0, x < 1.0, x > 1.0, x == x, x <= x, x >= x]:
        assert got.tolist()[0] is False
    assert (x != x).tolist() == [True, False]
    assert tessel.tensor(1.0).shape == () and tessel.tensor(3).shape == ()
    assert tessel.from_numpy(np.array(2.5)).shape == ()
    assert tessel.tensor([tessel.tensor(1.0), tessel.tensor(2.0)]).shape == (2,)
    assert (x == None) is False and (x != None) is True  # noqa: E711 (torch: False / True, no error)


def test_in_place_ops_that_would_drop_the_graph_raise_instead():
    w = tessel.ones(3, requires_grad=True)
    out = tessel.zeros(2, 3)
    out[0] = w * 2.0  # recorded, as torch records it (tessel once copied the values and lost w's gradient)
    out.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
    out = tessel.zeros(2, 3)
    x = tessel.ones(3, requires_grad=True)
    y = x * 2.0
    y.fill_(5.0)  # recorded: y no longer depends on x (tessel once kept y's graph: x.grad read 6, torch's 0)
    y.sum().backward()
    assert y.tolist() == [5.0, 5.0, 5.0] and x.grad.tolist() == [0.0, 0.0, 0.0]
    y = x * 2.0
    with tessel.no_grad():
        out[0] = w * 2.0  # outside autograd both are fine
        y.zero_()
    assert out.tolist()[0] == [2.0, 2.0, 2.0] and y.tolist() == [0.0, 0.0, 0.0]


def test_comparisons_give_bool_tensors_equal_to_numpy():
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    x, y = t64(a), t64(np.full((2, 3), 2.0))
    for got, want in [(x == y, a == 2), (x != y, a != 2), (x < y, a < 2), (x > y, a > 2), (x <= y, a <= 2),
                      (x >= y, a >= 2), (x > 1.5, a > 1.5), (x == 3, a == 3)]:
        assert got.dtype == tessel.bool
        np.testing.assert_array_equal(got.numpy(), want)


def test_views_and_shape_methods_follow_torch():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x = t64(a)
    np.testing.assert_array_equal(x.view(6, 4).numpy(), a.reshape(6, 4))
    np.testing.assert_array_equal(x.view((4, 6)).numpy(), a.reshape(4, 6))
    np.testing.assert_array_equal(x.reshape(-1).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(x.transpose(0, 2).numpy(), a.transpose(2, 1, 0))
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.permute(1, 2, 0).contiguous().numpy(), a.transpose(1, 2, 0))
    np.testing.assert_array_equal(x.flatten(1).numpy(), a.reshape(2, 12))
    np.testing.assert_array_equal(x.unsqueeze(1).numpy(), a[:, None])
    assert x.unsqueeze(0).squeeze(0).shape == (2, 3, 4) and x.unsqueeze(2).squeeze().shape == (2, 3, 4)
    # split / chunk: torch's sizes (ceil pieces, the last one smaller).
    assert [p.shape for p in x.split(2, dim=2)] == [(2, 3, 2), (2, 3, 2)]
    assert [p.shape for p in x.split([1, 3], dim=2)] == [(2, 3, 1), (2, 3, 3)]
    assert [p.shape[1] for p in x.chunk(2, dim=1)] == [2, 1]
    np.testing.assert_array_equal(x.chunk(2, dim=1)[1].numpy(), a[:, 2:])
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24 and x.size() == (2, 3, 4) and x.size(1) == 3
    assert len(x) == 2 and x.tolist() == a.tolist()


def test_basic_indexing_matches_numpy():
    a = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    x = t64(a)
    for idx in [1, -1, (slice(None), 2), (0, slice(1, 3)), (slice(None, None, 2),), (Ellipsis, 1),
                (None, 1), (1, None, slice(2, 5, 2)), (slice(1, None), Ellipsis, slice(None, 1)), (slice(3, 1),)]:
        np.testing.assert_array_equal(x[idx].numpy(), a[idx], err_msg=repr(idx))
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(TypeError, match="invalid data type 'str'"):  # torch's errors
        x["a"]
    with pytest.raises(IndexError, match=r"valid indices \(got float\)"):
        x[1.0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]


def test_item_assignment_writes_through_views_like_numpy():
    a = np.arange(12.0).reshape(3, 4)
    x = t64(a)
    x[1] = 7
    a[1] = 7
    x[:, 2:] = t64(np.full((3, 2), 5.0))
    a[:, 2:] = 5
    x[0, ::2] = -1
    a[0, ::2] = -1
    np.testing.assert_array_equal(x.numpy(), a)
    p = tessel.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        p[0] = 3
    with tessel.no_grad():
        p[0] = 3
    assert p.tolist() == [3.0, 1.0]


def test_reductions_and_math_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 2.0, size=(3, 4))
    x = t64(a)
    np.testing.assert_allclose(x.sum().item(), a.sum(), rtol=1e-12)
    np.testing.assert_allclose(x.sum(dim=1).numpy(), a.sum(1), rtol=1e-12)
    np.testing.assert_allclose(x.mean(dim=(0, 1), keepdim=True).numpy(), a.mean(keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(x.amax(dim=0).numpy(), a.max(0))
    np.testing.assert_allclose(x.max().item(), a.max())
    values, indices = x.max(dim=1)
    np.testing.assert_allclose(values.numpy(), a.max(1))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(1))
    for name, fn in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
                     ("rsqrt", lambda v: 1 / np.sqrt(v))]:
        np.testing.assert_allclose(getattr(x, name)().numpy(), fn(a), rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(getattr(tessel, name)(x).numpy(), fn(a), rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(x.pow(3).numpy(), a ** 3, rtol=1e-12)
    np.testing.assert_allclose(F.softmax(x, dim=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-12)


def test_backward_through_python_ops_matches_finite_differences():
    rng = np.random.default_rng(2)
    a, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))

    def loss_of(av):
        x = t64(av)
        h = (x @ t64(w)).tanh()
        return ((h * h).sum(dim=1) / 2 + x[:, 1:3].exp().mean()).sum()

    x = t64(a).requires_grad_()
    h = (x @ t64(w)).tanh()
    loss = ((h * h).sum(dim=1) / 2 + x[:, 1:3].exp().mean()).sum()
    loss.backward()
    eps, fd = 1e-6, np.zeros_like(a)
    for i in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[i] += eps
        am[i] -= eps
        fd[i] = (loss_of(ap).item() - loss_of(am).item()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    # backward(gradient=) on a non-scalar, and retain_graph for a second pass.
    y = t64(a).requires_grad_()
    z = y * 3
    z.backward(gradient=tessel.ones(3, 4, dtype=tessel.float64), retain_graph=True)
    z.backward(gradient=tessel.ones(3, 4, dtype=tessel.float64))
    np.testing.assert_array_equal(y.grad.numpy(), np.full((3, 4), 6.0))


def test_creation_functions_dtypes_and_seeding():
    assert tessel.zeros(2, 3).dtype == tessel.float32 and tessel.zeros((2, 3)).shape == (2, 3)
    assert tessel.ones(4, dtype=tessel.int64).tolist() == [1, 1, 1, 1]
    assert tessel.full((2,), 7).dtype == tessel.int64 and tessel.full((2,), 0.5).tolist() == [0.5, 0.5]
    assert tessel.arange(5).tolist() == [0, 1, 2, 3, 4] and tessel.arange(5).dtype == tessel.int64
    assert tessel.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert tessel.tensor([1.5, 2.5]).dtype == tessel.float32 and tessel.tensor([[1, 2]]).dtype == tessel.int64
    assert tessel.tensor(np.zeros(2)).dtype == tessel.float64  # numpy's dtype is kept
    assert tessel.tensor([1.0], requires_grad=True).requires_grad
    assert repr(tessel.bfloat16) == "tessel.bfloat16" and tessel.long == tessel.int64
    tessel.manual_seed(7)
    a = tessel.randn(3, 4).numpy()
    b = tessel.rand(5).numpy()
    tessel.manual_seed(7)
    np.testing.assert_array_equal(tessel.randn(3, 4).numpy(), a)
    np.testing.assert_array_equal(tessel.rand(5).numpy(), b)
    assert abs(a.mean()) < 1.5 and 0.0 <= b.min() and b.max() < 1.0
    g = tessel.Generator().manual_seed(7)
    np.testing.assert_array_equal(tessel.randn(3, 4, generator=g).numpy(), a)  # same stream as the default
    r = tessel.randint(3, 9, (1000,)).numpy()
    assert r.min() == 3 and r.max() == 8 and r.dtype == np.int64


def test_no_grad_records_nothing_and_restores_the_mode():
    x = tessel.ones(2, requires_grad=True)
    with tessel.no_grad():
        assert not tessel.is_grad_enabled()
        y = x * 2
        with tessel.enable_grad():
            assert (x * 2).requires_grad
        assert not tessel.is_grad_enabled()
    assert tessel.is_grad_enabled() and not y.requires_grad and (x * 2).requires_grad

    @tessel.no_grad()
    def f():
        return x * 2

    assert not f().requires_grad and tessel.is_grad_enabled()


def test_huge_broadcast_numpy_array_raises_memory_error_instead_of_crashing():
    # 10**12 float32 elements (4 TB) as a zero-stride view: making it contiguous cannot succeed.
    with pytest.raises(MemoryError):
        tessel.tensor(np.broadcast_to(np.float32(0), (10 ** 12,)))
    with pytest.raises(MemoryError):  # (a complex array too: tessel/_complex.py's copy of its parts)
        tessel.from_numpy(np.broadcast_to(np.complex64(0), (10 ** 12,)))


def test_comm_tracer_exit_without_enter_raises_instead_of_crashing():
    with pytest.raises(RuntimeError, match="CommTracer.__exit__ without __enter__"):
        tessel.CommTracer().__exit__(None, None, None)
    tracer = tessel.CommTracer()
    with tracer:
        with pytest.raises(RuntimeError, match="CommTracer: already entered"):
            tracer.__enter__()
    assert tracer.total() == 0


def test_bad_arguments_raise_the_exception_torch_would():
    x = tessel.ones(2, 3)
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError, match="view: expected ints or one sequence of ints"):
        x.view("a")
    with pytest.raises(ValueError, match=r"\[2, 3\]"):  # tessel's message names the shapes
        x @ tessel.ones(2, 3)
    with pytest.raises(ValueError, match="only one element tensors can be converted"):
        float(x)
    with pytest.raises(ValueError, match="attn_mask must not be set together with is_causal=True"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=x, is_causal=True)


def test_scaled_dot_product_attention_takes_masks_and_dropout_like_torch():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 5, 4)).astype(np.float32) for _ in range(3))
    keep = rng.random((5, 5)) > 0.4
    keep[3] = False  # a query with no key: 0, as torch >= 2.5

    def reference(bias):
        s = q @ k.transpose(0, 2, 1) / 2.0 + bias
        m = s.max(-1, keepdims=True)
        w = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        w = np.where(np.isfinite(m), w / np.maximum(w.sum(-1, keepdims=True), 1e-30), 0.0)
        return w @ v

    tq, tk, tv = (tessel.tensor(a) for a in (q, k, v))
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tessel.tensor(keep))
    np.testing.assert_allclose(got.numpy(), reference(np.where(keep, 0.0, -np.inf)), rtol=1e-5, atol=1e-6)
    bias = rng.standard_normal((5, 5)).astype(np.float32)
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tessel.tensor(bias))
    np.testing.assert_allclose(got.numpy(), reference(bias), rtol=1e-5, atol=1e-6)
    tessel.manual_seed(1)
    a = F.scaled_dot_product_attention(tq, tk, tv, dropout_p=0.5, is_causal=True).numpy()
    tessel.manual_seed(1)
    b = F.scaled_dot_product_attention(tq, tk, tv, dropout_p=0.5, is_causal=True).numpy()
    np.testing.assert_array_equal(a, b)  # the default generator decides the mask
    assert not np.allclose(a, F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy())


def test_scaled_dot_product_attention_enable_gqa_shares_each_key_value_head_with_a_group_of_query_heads():
    # 6 query heads over 2 key/value heads (torch 2.5+'s enable_gqa): query head h reads kv head h // 3.
    # Reference in float64 with numpy, causal; gradients by the chain rule through the shared heads.
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 6, 5, 4))
    k, v = rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    g = rng.standard_normal((2, 6, 5, 3))
    kr, vr = np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)
    s = q @ kr.transpose(0, 1, 3, 2) / 2.0 + np.triu(np.full((5, 5), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ vr.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / 2.0
    want = {"out": p @ vr, "q": ds @ kr,
            "k": (ds.transpose(0, 1, 3, 2) @ q).reshape(2, 2, 3, 5, 4).sum(2),
            "v": (p.transpose(0, 1, 3, 2) @ g).reshape(2, 2, 3, 5, 3).sum(2)}
    tq, tk, tv = (tessel.tensor(a.astype(np.float32), requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    out.backward(tessel.tensor(g.astype(np.float32)))
    for name, got in {"out": out.detach(), "q": tq.grad, "k": tk.grad, "v": tv.grad}.items():
        np.testing.assert_allclose(got.numpy(), want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    with pytest.raises(ValueError, match="head counts to divide the query's"):
        F.scaled_dot_product_attention(tq, tessel.ones(2, 4, 5, 4), tessel.ones(2, 4, 5, 3), enable_gqa=True)
    with pytest.raises(ValueError, match=r"\[2, 2, 5, 4\]"):  # without enable_gqa the head counts must match
        F.scaled_dot_product_attention(tq, tk, tv)


def test_set_num_threads_sets_this_threads_budget_like_torch():
    before = tessel.get_num_threads()
    try:
        tessel.set_num_threads(1)
        assert tessel.get_num_threads() == 1
        x = tessel.randn(300, 200)
        want = (x @ x.t()).numpy()  # one thread
        tessel.set_num_threads(3)
        assert tessel.get_num_threads() == 3
        np.testing.assert_allclose((x @ x.t()).numpy(), want, rtol=1e-6, atol=1e-5)
        with pytest.raises(ValueError, match="set_num_threads: expected a positive integer, got 0"):
            tessel.set_num_threads(0)
    finally:
        tessel.set_num_threads(before)


def test_t_transposes_at_most_two_dims_like_torch():
    x = tessel.randn(3, 2)
    np.testing.assert_array_equal(x.t().numpy(), x.numpy().T)
    assert x.t().shape == (2, 3) and tessel.ones(4).t().shape == (4,)
    with pytest.raises(ValueError, match="t\\(\\) expects a tensor with <= 2 dimensions, but self is 3D"):
        tessel.ones(2, 3, 4).t()


def test_advanced_indexing_with_an_integer_or_boolean_tensor_gathers_rows_with_their_gradient():
    x_np = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = tessel.tensor(x_np, requires_grad=True)
    idx = [3, 0, -1, 3]
    y = x[tessel.tensor(idx)]
    np.testing.assert_array_equal(y.numpy(), x_np[idx])
    (y * tessel.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3))).sum().backward()
    want = np.zeros_like(x_np)
    np.add.at(want, idx, np.arange(12, dtype=np.float32).reshape(4, 3))  # repeated rows sum, as torch
    np.testing.assert_array_equal(x.grad.numpy(), want)
    d = x.detach()
    np.testing.assert_array_equal(d[d > 7].numpy(), x_np[x_np > 7])  # a full mask: the selected elements
    np.testing.assert_array_equal(d[tessel.tensor([True, False, True, False])].numpy(), x_np[[0, 2]])
    v = tessel.arange(5)
    assert v[tessel.tensor([[0, 1], [4, 2]])].tolist() == [[0, 1], [4, 2]] and v[[1, 2]].tolist() == [1, 2]
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        x[tessel.tensor([4])]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        x[tessel.tensor([0.5])]


def test_setitem_with_tensor_indices_writes_the_selected_rows():
    x = tessel.tensor([1.0, 2.0, 3.0])
    x[x > 1.5] = 0
    assert x.tolist() == [1.0, 0.0, 0.0]
    y = tessel.tensor([1.0, 2.0, 3.0])
    y[tessel.tensor([0, 2])] = 5
    assert y.tolist() == [5.0, 2.0, 5.0]
    y[tessel.tensor(1)] = 7  # a 0-d integer tensor is a plain index
    assert y.tolist() == [5.0, 7.0, 5.0]
    z = tessel.zeros(3, 2)
    z[[2, 0]] = tessel.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert z.tolist() == [[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]
    m = tessel.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    m[m > 3] = -1  # a mask over every dim
    assert m.tolist() == [[0.0, 1.0, 2.0], [3.0, -1.0, -1.0]]
    assert tessel.arange(4)[[]].shape == (0,)


def test_augmented_assignment_is_in_place_unless_autograd_must_record_it():
    b = tessel.zeros(3)
    v = b[1:]
    v += 1  # in place: the base sees it
    assert b.tolist() == [0.0, 1.0, 1.0]
    lin = tessel.nn.Linear(2, 2)
    lin(tessel.ones(1, 2)).sum().backward()
    before = lin.weight.numpy().copy()
    with tessel.no_grad():
        for p in lin.parameters():
            p -= 0.5 * p.grad  # the hand-written SGD step: it rebound p and changed nothing
    np.testing.assert_allclose(lin.weight.numpy(), before - 0.5 * lin.weight.grad.numpy(), rtol=1e-6)
    w = tessel.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w += 1
    h = w * 2
    kept = [h]  # another Python name of the same tensor (a list of hidden states, say)
    h += w  # in a forward: recorded by autograd, so the gradient is right
    assert kept[0] is h and kept[0].tolist() == [3.0, 3.0]  # the same tensor, updated, as torch
    h *= w  # (2w + w) * w: the recorded product sees the updated value
    h.sum().backward()
    assert w.grad.tolist() == [6.0, 6.0]
    acc = tessel.zeros(2)
    acc += w * w  # a tensor needing no grad takes a term that does: autograd records it too
    assert acc.requires_grad and acc.grad_fn is not None
    acc.sum().backward()
    assert w.grad.tolist() == [8.0, 8.0]
    h = w * 2
    with pytest.raises(RuntimeError, match=r"output with shape \[2\] doesn't match the broadcast shape \[3, 2\]"):
        h += tessel.ones(3, 2, requires_grad=True)
    h += tessel.ones(2, dtype=tessel.float64)  # in place keeps h's dtype, as torch
    assert h.dtype == tessel.float32 and h.tolist() == [3.0, 3.0]
    r = (w * 1).relu()
    r += 1  # relu saved its output: written in place all the same, so backward raises, as torch
    assert r.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        r.sum().backward()


def test_integer_and_bool_semantics_follow_torch():
    assert (tessel.tensor([True, False]) == 2).tolist() == [False, False]
    assert (tessel.tensor([True, False]) < 3).tolist() == [True, True]
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        tessel.tensor([3, 4]).div_(2)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        tessel.tensor([3, 4]).mul_(2.5)
    assert tessel.tensor([-3, 3]).clamp(-1.5, 1.5).tolist() == [-1.5, 1.5]
    big = 2 ** 62
    assert (tessel.tensor([big]) == big + 1).tolist() == [False]
    assert tessel.full((1,), 2 ** 53 + 1).tolist() == [2 ** 53 + 1]
    assert tessel.arange(2 ** 53, 2 ** 53 + 3).tolist() == [2 ** 53, 2 ** 53 + 1, 2 ** 53 + 2]
    lo = tessel.tensor([-2 ** 63, 5])
    assert lo.min().item() == -2 ** 63 and lo.argmin().item() == 0
    assert tessel.tensor([[1.0, 4.0], [2.0, 3.0]]).argmax(keepdim=True).tolist() == [[1]]
    assert tessel.tensor([0.1], dtype=tessel.float64).item() == 0.1  # not through float32
    assert tessel.tensor([1.0, 2.0]).div_(0).tolist() == [float("inf")] * 2
    assert tessel.ones(2, 3, 4).T.shape == (4, 3, 2) and tessel.ones(3).T.shape == (3,)
    assert tessel.ones(5, 2, 3).mT.shape == (5, 3, 2)


def test_rms_norm_default_eps_is_the_compute_types_in_bf16_and_fp16():
    x = tessel.full((1, 4), 0.01)
    want = F.rms_norm(x, (4,)).tolist()
    for dtype in (tessel.bfloat16, tessel.float16):
        got = F.rms_norm(x.to(dtype), (4,)).float().tolist()
        np.testing.assert_allclose(got, want, rtol=1e-2)  # bf16's own eps (7.8e-3) gave 0.112 for 1.0


def test_mm_bmm_and_torchs_function_forms():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(tessel.mm(tessel.from_numpy(a), tessel.from_numpy(b)).numpy(), a @ b)
    np.testing.assert_array_equal(tessel.from_numpy(a).mm(tessel.from_numpy(b)).numpy(), a @ b)
    x, y = np.ones((2, 2, 3), np.float32), np.ones((2, 3, 5), np.float32)
    np.testing.assert_array_equal(tessel.bmm(tessel.from_numpy(x), tessel.from_numpy(y)).numpy(), x @ y)
    with pytest.raises(RuntimeError, match="mm: expected 2-D tensors"):
        tessel.mm(tessel.from_numpy(x), tessel.from_numpy(y))
    t = tessel.from_numpy(a)
    assert tessel.sum(t, 1).tolist() == [3.0, 12.0] and tessel.mean(t).item() == 2.5
    assert tessel.transpose(t, 0, 1).shape == (3, 2) and tessel.argmax(t).item() == 5
    assert tessel.max(t, dim=0).values.tolist() == [3.0, 4.0, 5.0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def _naive_scatter_reduce(x, dim, idx, src, reduce, include_self):
    """torch's scatter_reduce by loops over index (float64), dims 0 and 1 of 2-D tensors."""
    out = x.copy()
    groups = {}
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            t = (idx[i, j], j) if dim == 0 else (i, idx[i, j])
            groups.setdefault(t, []).append(src[i, j])
    for t, vals in groups.items():
        vals = vals + ([x[t]] if include_self else [])
        out[t] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce](vals)
    return out


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_equals_loops_and_central_differences(reduce, include_self, dim):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    idx = rng.integers(0, 4 if dim == 0 else 5, size=(3, 5))  # repeats: several sources per position
    want = _naive_scatter_reduce(a, dim, idx, b, reduce, include_self)
    w = rng.standard_normal(want.shape)

    def loss(av, bv):
        return float((_naive_scatter_reduce(av, dim, idx, bv, reduce, include_self) * w).sum())

    x, src = tessel.tensor(a, requires_grad=True), tessel.tensor(b, requires_grad=True)
    y = x.scatter_reduce(dim, tessel.tensor(idx), src, reduce, include_self=include_self)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12, atol=1e-15)
    (y * tessel.tensor(w)).sum().backward()
    for got, base, which in ((x.grad.numpy(), a, 0), (src.grad.numpy(), b, 1)):
        fd = np.zeros_like(base)
        for k in np.ndindex(base.shape):
            h = np.zeros_like(base)
            h[k] = 1e-6
            args_p = (a + h, b) if which == 0 else (a, b + h)
            args_m = (a - h, b) if which == 0 else (a, b - h)
            fd[k] = (loss(*args_p) - loss(*args_m)) / 2e-6
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_scatter_scatter_add_and_ties():
    a = np.arange(12.0).reshape(3, 4)
    idx = np.array([[2, 0, 1, 2], [0, 0, 2, 1]])
    src = -np.arange(1.0, 9.0).reshape(2, 4)
    want = a.copy()
    for i in range(2):
        for j in range(4):
            want[idx[i, j], j] = src[i, j]  # later rows overwrite earlier ones (column 1: row 1 wins)
    x, s = tessel.tensor(a, requires_grad=True), tessel.tensor(src, requires_grad=True)
    y = tessel.scatter(x, 0, tessel.tensor(idx), s)
    np.testing.assert_array_equal(y.detach().numpy(), want)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (want == a).astype(float))  # overwritten: no gradient
    # torch's src gradient is the output gradient gathered at index: the overwritten element gets its target's too
    np.testing.assert_array_equal(s.grad.numpy(), [[1, 1, 1, 1], [1, 1, 1, 1]])
    filled = tessel.tensor(a).scatter(1, tessel.tensor([[3], [0], [1]]), value=7.0)
    np.testing.assert_array_equal(filled.numpy(), [[0, 1, 2, 7], [7, 5, 6, 7], [8, 7, 10, 11]])
    added = tessel.zeros(3, 4, dtype=tessel.float64).scatter_add_(0, tessel.tensor(idx), tessel.tensor(src))
    want_add = np.zeros((3, 4))
    np.add.at(want_add, (idx, np.broadcast_to(np.arange(4), idx.shape)), src)
    np.testing.assert_array_equal(added.numpy(), want_add)
    # amax ties split the gradient evenly among the tied elements, self included (torch's rule).
    x = tessel.tensor([1.0, 0.0], requires_grad=True)
    s = tessel.tensor([1.0, 1.0, -2.0], requires_grad=True)
    y = x.scatter_reduce(0, tessel.tensor([0, 0, 1]), s, "amax")
    assert y.tolist() == [1.0, 0.0]
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3, 1.0])
    np.testing.assert_allclose(s.grad.numpy(), [1 / 3, 1 / 3, 0.0])
    with pytest.raises(RuntimeError, match="index 4 is out of bounds for dimension 0 with size 3"):
        tessel.zeros(3).scatter(0, tessel.tensor([4]), tessel.ones(1))
    with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, amax or amin"):
        tessel.zeros(3).scatter_reduce(0, tessel.tensor([0]), tessel.ones(1), "max")
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation \\(scatter_add_"):
        tessel.zeros(3, requires_grad=True).scatter_add_(0, tessel.tensor([0]), tessel.ones(1))


def test_logical_and_bitwise_operators_match_numpy():
    a = np.array([1.0, 0.0, np.nan, -2.0, np.inf, -np.inf])
    x = tessel.tensor(a)
    m, n = x > 0, x < 1
    np.testing.assert_array_equal((m & n).numpy(), (a > 0) & (a < 1))
    np.testing.assert_array_equal((m | n).numpy(), (a > 0) | (a < 1))
    np.testing.assert_array_equal((m ^ n).numpy(), (a > 0) ^ (a < 1))
    np.testing.assert_array_equal((~m).numpy(), ~(a > 0))
    np.testing.assert_array_equal((True & m).numpy(), a > 0)
    np.testing.assert_array_equal((m | False).numpy(), a > 0)
    np.testing.assert_array_equal(tessel.logical_and(x, x > -3).numpy(), np.logical_and(a, a > -3))
    np.testing.assert_array_equal(tessel.logical_or(x, 0).numpy(), np.logical_or(a, 0))
    np.testing.assert_array_equal(x.logical_not().numpy(), np.logical_not(a))
    np.testing.assert_array_equal(tessel.logical_xor(x, m).numpy(), np.logical_xor(a, a > 0))
    i, j = np.array([5, 3, 12, -7]), np.array([6, 1, 10, 3])
    for got, want in (((tessel.tensor(i) & tessel.tensor(j)), i & j), ((tessel.tensor(i) | 1), i | 1),
                      ((tessel.tensor(i) ^ tessel.tensor(j)), i ^ j), ((~tessel.tensor(i)), ~i)):
        assert got.dtype == tessel.int64
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(NotImplementedError, match="\"bitwise_and_cpu\" not implemented for 'Double'"):
        x & x
    np.testing.assert_array_equal(tessel.isinf(x).numpy(), np.isinf(a))
    np.testing.assert_array_equal(x.isposinf().numpy(), np.isposinf(a))
    np.testing.assert_array_equal(tessel.isneginf(x).numpy(), np.isneginf(a))
    b = np.array([1.0 + 1e-6, 1e-9, np.nan, -2.1, np.inf, np.inf])
    for equal_nan in (False, True):
        np.testing.assert_array_equal(tessel.isclose(x, tessel.tensor(b), equal_nan=equal_nan).numpy(),
                                      np.isclose(a, b, equal_nan=equal_nan))
    assert (x.eq(x).tolist(), tessel.ne(x, 0).tolist()) == ((a == a).tolist(), (a != 0).tolist())


def test_addmm_cumprod_diff_var_mean_and_small_factories():
    rng = np.random.default_rng(5)
    c, p, q = rng.standard_normal((2, 4)), rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    got = tessel.addmm(tessel.tensor(c), tessel.tensor(p), tessel.tensor(q), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(got.numpy(), 0.5 * c + 2.0 * p @ q, rtol=1e-12)
    b1, b2 = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 3, 4))
    np.testing.assert_allclose(tessel.baddbmm(tessel.tensor(c), tessel.tensor(b1), tessel.tensor(b2)).numpy(),
                               c + b1 @ b2, rtol=1e-12)
    np.testing.assert_allclose(tessel.addbmm(tessel.tensor(c), tessel.tensor(b1), tessel.tensor(b2), beta=0).numpy(),
                               (b1 @ b2).sum(0), rtol=1e-12)
    # cumprod: values (zeros included) and gradients by central differences.
    a = np.array([[1.5, -2.0, 0.0, 3.0], [0.5, 2.0, -1.0, 4.0]])
    x = tessel.tensor(a, requires_grad=True)
    y = tessel.cumprod(x, 1)
    np.testing.assert_allclose(y.detach().numpy(), np.cumprod(a, 1), rtol=1e-12)
    w = rng.standard_normal(a.shape)
    (y * tessel.tensor(w)).sum().backward()
    fd = np.zeros_like(a)
    for k in np.ndindex(a.shape):
        h = np.zeros_like(a)
        h[k] = 1e-6
        fd[k] = ((np.cumprod(a + h, 1) * w).sum() - (np.cumprod(a - h, 1) * w).sum()) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-7, atol=1e-9)
    v = rng.standard_normal((3, 5))
    np.testing.assert_allclose(tessel.diff(tessel.tensor(v), n=2, dim=1, prepend=tessel.tensor(v[:, :1])).numpy(),
                               np.diff(v, n=2, axis=1, prepend=v[:, :1]), rtol=1e-12)
    var, mean = tessel.var_mean(tessel.tensor(v), 1, keepdim=True)
    np.testing.assert_allclose(var.numpy(), v.var(1, ddof=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(mean.numpy(), v.mean(1, keepdims=True), rtol=1e-12)
    std, _ = tessel.std_mean(tessel.tensor(v), correction=0)
    np.testing.assert_allclose(std.item(), v.std(), rtol=1e-12)
    tessel.manual_seed(7)
    perm = tessel.randperm(10)
    assert sorted(perm.tolist()) == list(range(10)) and perm.dtype == tessel.int64
    tessel.manual_seed(7)
    assert tessel.randperm(10).tolist() == perm.tolist()
    np.testing.assert_array_equal(tessel.eye(2, 3).numpy(), np.eye(2, 3))
    t = tessel.ones(2)
    assert tessel.as_tensor(t) is t and tessel.as_tensor([1, 2]).dtype == tessel.int64
    assert tessel.randn_like(tessel.zeros(2, 3, dtype=tessel.float64)).dtype == tessel.float64
    assert tessel.randn_like(t).shape == (2,)

    def f(z):
        return z * 2
    assert tessel.compile(f) is f and tessel.compile(mode="max-autotune")(f) is f
    z = tessel.tensor([1.0, -5.0, 9.0])
    z.clamp_(-1, 1).masked_fill_(z > 0, 3.0)
    assert z.tolist() == [3.0, -1.0, 3.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation \\(clamp_"):
        tessel.ones(2, requires_grad=True).clamp_(0, 1)
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly to 3"):
        z.split_with_sizes([1, 1])
    assert (z.element_size(), tessel.ones(1, dtype=tessel.bfloat16).element_size()) == (4, 2)


def test_remainder_fmod_and_floor_division_match_numpy_with_torchs_gradients():
    a = np.array([5.5, -5.5, 3.0, -3.0, 7.25])
    b = np.array([2.0, 2.0, -2.0, -2.5, 0.5])
    x, y = tessel.tensor(a, requires_grad=True), tessel.tensor(b, requires_grad=True)
    r = x % y
    np.testing.assert_array_equal(r.detach().numpy(), np.remainder(a, b))
    np.testing.assert_array_equal(tessel.fmod(x, y).detach().numpy(), np.fmod(a, b))
    np.testing.assert_array_equal((x // y).detach().numpy(), np.floor_divide(a, b))
    r.sum().backward()  # torch: d/dx = 1, d/dy = -floor(x / y)
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(5))
    np.testing.assert_array_equal(y.grad.numpy(), -np.floor(a / b))
    np.testing.assert_array_equal((tessel.tensor(a) % 2).numpy(), np.remainder(a, 2))
    np.testing.assert_array_equal((7 % tessel.tensor(b)).numpy(), np.remainder(7, b))
    i, j = np.array([7, -7, 9, 2 ** 40 + 3]), np.array([3, 3, -4, 7])
    for got, want in ((tessel.tensor(i) % tessel.tensor(j), np.remainder(i, j)),
                      (tessel.tensor(i) // 4, np.floor_divide(i, 4)), (20 % tessel.tensor(j), np.remainder(20, j)),
                      (tessel.fmod(tessel.tensor(i), tessel.tensor(j)), np.fmod(i, j))):
        assert got.dtype == tessel.int64
        np.testing.assert_array_equal(got.numpy(), want)  # exact beyond float precision
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        tessel.tensor([1, 2]) % 0


def torch_floor_divide(a, b):
    """torch's div_floor_floating (aten), in numpy for the dtype of a and b."""
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = np.floor(div)
    floordiv = np.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    return np.where(b == 0, a / b, np.where(div == 0, np.copysign(0.0, a / b), floordiv)).astype(a.dtype)


def test_float_remainder_and_floor_division_are_exact_as_torchs_on_dense_and_sharded_tensors():
    # 3.0 % 0.3f: floor(3 / 0.3f) rounds to 10 and would give 0 (or -1e-7); torch's fmod-based kernels give 9 and
    # 0.29999989 (torch 2.15: x // 0.3 = [9, -10, 2, -0, 16], x % 0.3 = [0.2999999, 1.19e-07, 0.1, -0, 0.2]).
    x32 = np.array([3.0, -3.0, 0.7, -0.0, 5.0, 1e6 + 0.25, -7.5, 2.0], np.float32)
    d32 = np.array([0.3, 0.3, 0.3, 0.3, 0.3, 0.7, -0.7, np.inf], np.float32)
    x64 = np.array([3.0, 1e17, -7.5, 2.0 ** 60, -0.0, 1e-300], np.float64)
    d64 = np.array([0.1, 0.1, -0.7, -0.7, 3.0, 1e-310], np.float64)

    def check(got, want, what):
        np.testing.assert_array_equal(got, want, err_msg=what)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=what + " (signs of zeros)")

    for a, b in ((x32, d32), (x64, d64)):
        ta, tb = tessel.tensor(a), tessel.tensor(b)
        check(tessel.fmod(ta, tb).numpy(), np.fmod(a, b), "fmod")
        mod = np.fmod(a, b)
        check((ta % tb).numpy(), np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod), "remainder")
        check((ta // tb).numpy(), torch_floor_divide(a, b), "floor_divide")
    assert (tessel.tensor(x32[:5]) // 0.3).tolist() == [9.0, -10.0, 2.0, -0.0, 16.0]  # the scalar as float32's 0.3
    assert str((tessel.tensor([-3.0]) * 0.0).tolist()) == "[-0.0]"  # x * 0 keeps the sign, as torch
    ints = tessel.tensor([-7, 7, 5])  # an integer tensor with a float number: float32, by 2.5 (torch 2.15's)
    for got, want in ((ints // 2.5, [-3.0, 2.0, 2.0]), (ints % 2.5, [0.5, 2.0, 0.0]),
                      (tessel.fmod(ints, 2.5), [-2.0, 2.0, 0.0]), (7.5 // ints, [-2.0, 1.0, 1.0])):
        assert got.dtype == tessel.float32 and got.tolist() == want
    assert (ints // 2).dtype == tessel.int64 and (ints // 2).tolist() == [-4, 3, 2]
    big = tessel.tensor([2e38, -3e38, 1.4e-45])  # a tie is the value itself ((a + b) / 2 overflowed)
    np.testing.assert_array_equal(tessel.maximum(big, big).numpy(), big.numpy())
    np.testing.assert_array_equal(tessel.minimum(big, big).numpy(), big.numpy())
    a, b = tessel.tensor([1.0, 2.0], requires_grad=True), tessel.tensor([1.0, 1.0], requires_grad=True)
    tessel.maximum(a, b).sum().backward()  # torch: a tie's gradient half each
    assert a.grad.tolist() == [0.5, 1.0] and b.grad.tolist() == [0.5, 0.0]
    for n in (1, 7, 8, 33):  # every length: the vector path negated as 0 - x (+0) from 8 elements on
        assert np.signbit(tessel.neg(tessel.zeros(n)).numpy()).all(), n
        assert np.signbit(tessel.copysign(tessel.zeros(n), -1.0).numpy()).all(), n

    import tessel.distributed as dist
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import Shard, distribute_tensor

    def rank_fn(world):  # DTensors: the same exact values by tensor ops (float32 through float64, and float64)
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        for a, b in ((x32, d32), (x64[[0, 2, 4]], d64[[0, 2, 4]])):
            da, db = (distribute_tensor(tessel.tensor(v), mesh, [Shard(0)]) for v in (a, b))
            check(tessel.fmod(da, db).full_tensor().numpy(), np.fmod(a, b), "sharded fmod")
            got = (da % db)
            assert got.placements == (Shard(0),)
            mod = np.fmod(a, b)
            check(got.full_tensor().numpy(), np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod), "sharded %")
            check((da // db).full_tensor().numpy(), torch_floor_divide(a, b), "sharded //")

    tessel.run_ranks(2, rank_fn)


def test_softplus_logsigmoid_and_acosh_at_infinities_and_far_tails_as_torch():
    # torch 2.15's values (float64): softplus(-inf) was NaN (-inf * 0), logsigmoid(inf) NaN, softplus(-100)
    # lost its 3.7e-44 (log of 1 + tiny), acosh(-1e30) was 0 and acosh(1e200) inf.
    inf, nan = float("inf"), float("nan")
    x = tessel.tensor([-inf, inf, -100.0, 0.0, 1.5, -1e30, 1e30, nan], dtype=tessel.float64)
    np.testing.assert_allclose(F.softplus(x).numpy(), [0.0, inf, 3.7200759760208356e-44, 0.6931471805599453,
                                                      1.7014132779827524, 0.0, 1e30, nan], rtol=1e-14)
    np.testing.assert_allclose(F.logsigmoid(x).numpy(), [-inf, 0.0, -100.0, -0.6931471805599453,
                                                        -0.2014132779827524, -1e30, 0.0, nan], rtol=1e-14)
    np.testing.assert_allclose(F.softplus(x, 2.0, 1.0).numpy(), [0.0, inf, 6.919482633683688e-88,
                                                                0.34657359027997264, 1.5, 0.0, 1e30, nan], rtol=1e-14)
    y = tessel.tensor([-1e30, -2.0, 0.5, 1.0, 1.0 + 1e-7, 2.0, 1e30, inf, nan, 1e200, 1e300], dtype=tessel.float64)
    np.testing.assert_allclose(tessel.acosh(y).numpy(), [nan, nan, nan, 0.0, 0.0004472135919037347,
                                                         1.3169578969248166, 69.77069997038132, inf, nan,
                                                         461.2101657793691, 691.4686750787736], rtol=1e-12)
    # hypot as C's (numpy's): 1e30 in float32 overflowed to inf, hypot(inf, nan) was NaN.
    hx = tessel.tensor([3.0, inf, nan, 0.0, 1e30, -1e30, 1e-30, nan, -5.0])
    hy = tessel.tensor([4.0, nan, inf, 0.0, 1e30, 2.0, 1e-30, nan, 12.0])
    np.testing.assert_array_equal(tessel.hypot(hx, hy).numpy(), np.hypot(hx.numpy(), hy.numpy()))
    ha, hb = tessel.tensor([3.0, -5.0], requires_grad=True), tessel.tensor([4.0, 12.0], requires_grad=True)
    tessel.hypot(ha, hb).sum().backward()  # x / hypot and y / hypot
    np.testing.assert_allclose(ha.grad.numpy(), [0.6, -5 / 13], rtol=1e-6)
    np.testing.assert_allclose(hb.grad.numpy(), [0.8, 12 / 13], rtol=1e-6)
    z = tessel.tensor([0.0, -3.0, -inf], requires_grad=True)
    F.softplus(z).sum().backward()  # sigmoid(z), 0.5 at 0 and 0 at -inf
    np.testing.assert_allclose(z.grad.numpy(), [0.5, 0.04742587357759476, 0.0], rtol=1e-6)


def test_median_with_nan_and_integer_clamp_beyond_the_dtype_as_torch():
    nan = float("nan")
    assert np.isnan(tessel.tensor([1.0, nan, 3.0]).median().item())  # torch: NaN wins (it gave 3.0)
    got = tessel.tensor([[1.0, nan, 3.0, nan], [4.0, 2.0, 0.0, 5.0]]).median(1)
    np.testing.assert_array_equal(got.values.numpy(), [nan, 2.0])
    assert got.indices.tolist() == [1, 1]  # the first NaN, as torch 2.15
    assert tessel.tensor([1.0, 2.0, 3.0, 4.0]).median().item() == 2.0 and np.isnan(tessel.median(tessel.tensor([])))
    x = tessel.tensor([3.0, 1.0, 2.0], requires_grad=True)
    x.median().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]
    # Bounds beyond an integer dtype's range are clipped, not wrapped (torch 2.15: [0, 5, 100], unchanged).
    assert tessel.clamp(tessel.tensor([0, 5, 255], dtype=tessel.uint8), min=-5, max=100).tolist() == [0, 5, 100]
    assert tessel.clamp(tessel.tensor([-128, 0, 127], dtype=tessel.int8), -1000, 1000).tolist() == [-128, 0, 127]


def test_review_fixes_var_mean_overload_bool_and_int_clamp_min_and_blocked_cumprod():
    v = np.array([[1.0, 2.0], [3.0, 8.0], [0.5, 9.0]])
    var, mean = tessel.var_mean(tessel.tensor(v), False)  # torch's (input, unbiased) overload
    assert var.item() == pytest.approx(v.var()) and mean.item() == pytest.approx(v.mean())
    got = tessel.tensor([True, False]) & 1
    assert got.dtype == tessel.int64 and got.tolist() == [1, 0]
    assert tessel.clamp_min(tessel.tensor([-1.0, 2.0]), 0.5).tolist() == [0.5, 2.0]
    assert tessel.clamp_max(tessel.tensor([-1.0, 2.0]), 0.5).tolist() == [-1.0, 0.5]
    # cumprod across several 64-entry blocks: values and gradients as one long product.
    rng = np.random.default_rng(2)
    a = 1.0 + 0.01 * rng.standard_normal((3, 150))
    a[1, 70] = 0.0  # a zero in the second block
    x = tessel.tensor(a, requires_grad=True)
    y = tessel.cumprod(x, 1)
    np.testing.assert_allclose(y.detach().numpy(), np.cumprod(a, 1), rtol=1e-12)
    w = rng.standard_normal(a.shape)
    (y * tessel.tensor(w)).sum().backward()
    want = np.zeros_like(a)  # d/da_k Σ_i w_i Π_{j<=i} a_j = Σ_{i>=k} w_i Π_{j<=i, j!=k} a_j
    for r in range(3):
        for k in range(150):
            others = np.cumprod(np.where(np.arange(150) == k, 1.0, a[r]))
            want[r, k] = (w[r, k:] * others[k:]).sum()
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-9, atol=1e-12)
    with pytest.raises(IndexError, match="Dimension out of range"):
        tessel.cumprod(x, 2)


def _exp_function():
    """exp as a torch.autograd.Function (saves its output for backward)."""
    class Exp(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            y, = ctx.saved_tensors
            return grad * y
    return Exp


def test_custom_autograd_function_as_torch():
    from tessel.autograd import Function
    Exp = _exp_function()

    a = np.array([0.5, -1.0, 2.0])
    x = tessel.tensor(a, requires_grad=True)
    y = Exp.apply(x)
    assert y.requires_grad
    (y * tessel.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(a) * [1.0, 2.0, 3.0], rtol=1e-12)

    seen = {}

    class ScaleAndArgmax(Function):  # a non-tensor argument, a non-differentiable second output
        @staticmethod
        def forward(ctx, x, scale):
            ctx.scale = scale
            idx = x.argmax()
            ctx.mark_non_differentiable(idx)
            return x * scale, idx

        @staticmethod
        def backward(ctx, grad, grad_idx):
            seen["grad_idx"] = grad_idx
            return grad * ctx.scale, None

    x.grad = None
    out, idx = ScaleAndArgmax.apply(x, 3.0)
    assert idx.item() == 2 and not idx.requires_grad
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0, 3.0])

    class Mul(Function):  # torch 2's form: forward without ctx, setup_context
        @staticmethod
        def forward(p, q):
            return p * q

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            seen["needs"] = ctx.needs_input_grad

        @staticmethod
        def backward(ctx, grad):
            p, q = ctx.saved_tensors
            return grad * q, grad * p

    p, q = tessel.tensor([2.0, 3.0], requires_grad=True), tessel.tensor([5.0, 7.0])
    Mul.apply(p, q).sum().backward()
    assert seen["needs"] == (True, False) and p.grad.tolist() == [5.0, 7.0] and q.grad is None

    class Two(Function):  # an unused output's gradient: zeros by default, None without materializing
        materialize = True

        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(Two.materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen["g2"] = None if g2 is None else g2.tolist()
            return g1 * 2 + (g2 * 3 if g2 is not None else 0)

    for materialize, want in ((True, [0.0, 0.0]), (False, None)):
        Two.materialize = materialize
        r = tessel.tensor([1.0, 1.0], requires_grad=True)
        Two.apply(r)[0].sum().backward()
        assert seen["g2"] == want and r.grad.tolist() == [2.0, 2.0]

    class BadCount(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, grad):
            return grad

    class BadShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, grad):
            return grad.reshape(1)

    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients \\(expected 2, got 1\\)"):
        BadCount.apply(p, p).sum().backward()
    with pytest.raises(RuntimeError, match="BadShapeBackward returned an invalid gradient at index 0"):
        BadShape.apply(p).backward()
    with tessel.no_grad():
        assert not Exp.apply(x).requires_grad


def test_mark_dirty_makes_the_modified_input_the_output_with_the_functions_history():
    class DoubleInPlace(tessel.autograd.Function):  # torch's in-place Function: modifies x, marks it, returns it
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    a = tessel.tensor([1.0, -3.0], requires_grad=True)
    y = a * 1.5
    z = DoubleInPlace.apply(y)
    assert z is y and y.grad_fn.name() == "DoubleInPlaceBackward" and y.tolist() == [3.0, -9.0]
    (z * z).sum().backward()  # d/da (3a)^2 = 18a
    assert a.grad.tolist() == [18.0, -54.0]
    # a view: its base sees the write and gets the history through it, as for tessel's own in-place ops
    b = tessel.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = b * 1.0
    DoubleInPlace.apply(h[1:])
    assert h.tolist() == [1.0, 4.0, 6.0]
    h.sum().backward()
    assert b.grad.tolist() == [1.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place "
                                           "operation."):  # (torch's words for a Function's, not an op's)
        DoubleInPlace.apply(tessel.ones(2, requires_grad=True))

    class Forgets(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            return grad
    with pytest.raises(RuntimeError, match="marked as dirty during the forward method were not returned"):
        Forgets.apply(a * 1)


def test_numpy_force_detaches_and_shares_memory():
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    arr = y.numpy(force=True)
    assert arr.tolist() == [3.0, 6.0]
    arr[0] = 7.0  # the same memory, as torch's
    assert y.tolist() == [7.0, 6.0]


def test_untyped_storage_is_shared_by_views_and_counts_the_whole_buffer():
    base = tessel.zeros(4, 6)
    view = base[1:, 2:]
    s, v = base.untyped_storage(), view.untyped_storage()
    assert s.nbytes() == v.nbytes() == 4 * 6 * 4 and s.data_ptr() == v.data_ptr() == base.data_ptr()
    assert view.data_ptr() - s.data_ptr() == (1 * 6 + 2) * 4  # a view starts inside its base's storage
    assert base.clone().untyped_storage().data_ptr() != s.data_ptr() and s.size() == len(s) == s.nbytes()


def test_grad_fn_names_its_node_and_walks_next_functions_as_torch():
    a = tessel.tensor([1.0, 2.0], requires_grad=True)
    b = tessel.tensor([3.0, 4.0])
    assert a.grad_fn is None and b.grad_fn is None  # a leaf, and a tensor without history
    y = a * b
    assert y.grad_fn.name() == "MulBackward0" and repr(y.grad_fn).startswith("<MulBackward0 object at ")
    assert y.grad_fn == y.grad_fn and hash(y.grad_fn) == hash(y.grad_fn)
    edges = y.grad_fn.next_functions
    assert len(edges) == 2 and edges[1] == (None, 0)  # b does not require grad
    acc, slot = edges[0]
    assert acc.name() == "torch::autograd::AccumulateGrad" and slot == 0
    assert y.grad_fn != None and not (y.grad_fn == acc)  # noqa: E711 (torch's comparisons with None work)
    assert (a * 2).grad_fn.name() == "MulBackward0" and (a + 2).grad_fn.name() == "AddBackward0"
    assert a.narrow(0, 0, 1).grad_fn.name() == "SliceBackward0"
    assert acc.variable.requires_grad and acc.variable.numpy().tolist() == [1.0, 2.0]
    loss = F.linear(y.reshape(1, 2), tessel.ones(3, 2)).sum()
    assert loss.grad_fn.name() == "SumBackward0"
    assert loss.grad_fn.next_functions[0][0].name() == "LinearBackward0"
    with pytest.raises(AttributeError, match="'SumBackward0' object has no attribute 'variable'"):
        loss.grad_fn.variable
    with tessel.no_grad():
        assert (a * 2).grad_fn is None
    assert a.detach().grad_fn is None
    Exp = _exp_function()
    assert Exp.apply(a).grad_fn.name() == "ExpBackward"


def test_setitem_of_values_that_require_grad_is_recorded_as_torch_records_it():
    # torch's seq2seq loop: outputs = zeros(T, B, V); outputs[t] = step(x[t]); the gradient reaches every step.
    rng = np.random.default_rng(21)
    w = t64(rng.normal(size=(3, 4)))
    w.requires_grad_()
    x = t64(rng.normal(size=(5, 2, 4)))
    outputs = tessel.zeros(5, 2, 3, dtype=tessel.float64)
    for t in range(5):
        outputs[t] = F.linear(x[t], w)
    assert outputs.requires_grad and outputs.grad_fn is not None
    (outputs * outputs).sum().backward()
    want = 2 * np.einsum("tbo,tbi->oi", x.numpy() @ w.detach().numpy().T, x.numpy())
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
    # into a result that requires grad: the overwritten entries get no gradient, the rest flow through
    a = t64([1.0, 2.0, 3.0, 4.0])
    a.requires_grad_()
    b = a * 3.0
    b[1:3] = 0.5
    b[tessel.tensor([0])] = a[3] * 2.0
    b.sum().backward()
    assert b.detach().numpy().tolist() == [8.0, 0.5, 0.5, 12.0] and a.grad.numpy().tolist() == [0.0, 0.0, 0.0, 5.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        a[0] = 1.0
    shared = tessel.zeros(3, dtype=tessel.float64)
    view = shared[1:]
    shared[0] = a[0] * 2.0  # a base with a live view: written in place and recorded (CopySlices), as torch
    view[0] = a[1] * 3.0  # and through the view: the base sees the value and the history
    assert shared.detach().numpy().tolist() == [2.0, 6.0, 0.0] and view.detach().numpy().tolist() == [6.0, 0.0]
    a.grad = None
    (shared * shared).sum().backward()
    assert a.grad.numpy().tolist() == [8.0, 36.0, 0.0, 0.0]  # d(2a0)²/da0 = 8·a0, d(3a1)²/da1 = 18·a1


def test_in_place_methods_are_recorded_when_nothing_else_shares_the_tensor():
    # h = x·w; h.add_(1); h.mul_(w); h.clamp_(max=10); h.masked_fill_(m, 0); h.relu_() as torch records them:
    # values and gradients equal the out-of-place chain's.
    a = np.array([1.0, -2.0, 3.0])
    wv = np.array([1.0, 2.0, 5.0])
    x, w = t64(a), t64(wv)
    x.requires_grad_()
    w.requires_grad_()
    h = x * w
    h.add_(1.0)
    h.mul_(w)
    h.clamp_(max=10.0)
    h.masked_fill_(tessel.tensor([False, True, False]), 0.0)
    h.relu_()
    assert h.grad_fn.name() == "ReluBackward0"
    h.sum().backward()
    want = np.maximum(np.where([False, True, False], 0.0, np.minimum((a * wv + 1) * wv, 10.0)), 0.0)
    np.testing.assert_allclose(h.detach().numpy(), want, rtol=1e-15)
    # d/dx = w² where the value survived (not clamped, masked or cut by relu): only entry 0 (2.0 < 10)
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(w.grad.numpy(), [2 * 1.0 * 1.0 + 1.0, 0.0, 0.0], rtol=1e-15)
    r = x.relu()  # relu saves its output for backward: the write is recorded, and backward then raises, as torch
    r.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        r.sum().backward()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        x.add_(1.0)
    plain = tessel.zeros(2)
    plain.add_(1.0).relu_()  # outside autograd: in place, as before
    assert plain.tolist() == [1.0, 1.0]


def test_order_statistics_match_numpy_and_keep_the_gradient():
    rng = np.random.default_rng(7)
    x = rng.permutation(24).reshape(4, 6).astype(np.float64)  # distinct values: indices are unambiguous
    t = tessel.tensor(x, dtype=tessel.float64, requires_grad=True)
    flat = np.sort(x.reshape(-1))
    assert tessel.median(t).item() == flat[(24 - 1) // 2]  # torch's lower median
    med = tessel.median(t, dim=1)
    np.testing.assert_array_equal(med.values.detach().numpy(), np.sort(x, 1)[:, 2])
    np.testing.assert_array_equal(med.indices.numpy(), np.argsort(x, 1)[:, 2])
    kth = t.kthvalue(3, dim=0, keepdim=True)
    np.testing.assert_array_equal(kth.values.detach().numpy(), np.sort(x, 0)[2:3])
    assert tuple(kth.indices.shape) == (1, 6)
    with pytest.raises(RuntimeError, match="k out of range"):
        tessel.kthvalue(t, 7, dim=1)
    for interp in ("linear", "lower", "higher", "midpoint", "nearest"):
        got = tessel.quantile(t, tessel.tensor([0.1, 0.5, 0.9], dtype=tessel.float64), dim=1, interpolation=interp)
        want = np.quantile(x, [0.1, 0.5, 0.9], axis=1, method=interp)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, err_msg=interp)
    np.testing.assert_allclose(tessel.quantile(t, 0.3).item(), np.quantile(x, 0.3), rtol=1e-12)
    # The gradient of the median / a linear quantile lands on the selected (interpolated) entries.
    tessel.quantile(t, 0.5, dim=1).sum().backward()
    want = np.zeros_like(x)
    order = np.argsort(x, 1)
    want[np.arange(4), order[:, 2]] = 0.5
    want[np.arange(4), order[:, 3]] = 0.5
    np.testing.assert_allclose(t.grad.numpy(), want)
    with pytest.raises(RuntimeError, match="q values must be in the range"):
        tessel.quantile(t, 1.5)


def test_random_fills_index_fill_and_triangle_indices():
    tessel.manual_seed(0)
    p = tessel.full((40000,), 0.3)
    draws = tessel.bernoulli(p).numpy()
    assert set(np.unique(draws)) == {0.0, 1.0} and abs(draws.mean() - 0.3) < 0.015  # 6 sigma
    e = tessel.empty(40000).exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.015
    r = tessel.empty(1000, dtype=tessel.int64).random_(3, 7).numpy()
    assert set(np.unique(r)) == {3, 4, 5, 6}
    x = np.arange(12.0).reshape(3, 4)
    want = x.copy()
    want[:, [0, 2]] = -1
    np.testing.assert_array_equal(tessel.tensor(x).index_fill(1, tessel.tensor([0, 2]), -1.0).numpy(), want)
    t = tessel.tensor(x)
    t.index_fill_(0, tessel.tensor([1]), 5.0)
    assert t[1].tolist() == [5.0] * 4 and t[0].tolist() == [0.0, 1.0, 2.0, 3.0]
    np.testing.assert_array_equal(tessel.triu_indices(3, 4, 1).numpy(), np.stack(np.triu_indices(3, 1, 4)))
    np.testing.assert_array_equal(tessel.tril_indices(4, 3, -1).numpy(), np.stack(np.tril_indices(4, -1, 3)))
    assert tessel.zeros(3, 5).nbytes == 60 and tessel.zeros(2, dtype=tessel.bfloat16).nbytes == 4
