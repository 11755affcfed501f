"""torch.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp) and gradcheck / gradgradcheck against
derivatives written out by hand; nn.utils.get_total_norm and clip_grads_with_norm_ (the two halves of
clip_grad_norm_ that torchtitan calls) against numpy, and on 2 fully_shard ranks equal to one rank with one
all-reduce of one number; utils.data's StackDataset, ChainDataset and get_worker_info."""
import os
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.autograd.functional import hessian, hvp, jacobian, jvp, vhp, vjp
from tessel.autograd.gradcheck import GradcheckError
from tessel.distributed.fsdp import fully_shard
from tessel.nn.utils import clip_grads_with_norm_, get_total_norm

X = np.array([0.5, -1.0, 2.0])
Y = np.array([[1.0, 2.0], [0.5, -0.5]])


def t(a):
    return tessel.tensor(np.asarray(a, dtype=np.float64))


def f_two(x, y):
    """(x² · sum(y), x · y[0, 1]) : R³ × R²ˣ² -> R³ × R³"""
    return x * x * y.sum(), x * y[0, 1]


def test_jacobian_of_several_inputs_and_outputs():
    jac = jacobian(f_two, (t(X), t(Y)))
    assert len(jac) == 2 and len(jac[0]) == 2
    np.testing.assert_allclose(jac[0][0].numpy(), np.diag(2 * X * Y.sum()))
    np.testing.assert_allclose(jac[0][1].numpy(), np.broadcast_to((X * X)[:, None, None], (3, 2, 2)))
    np.testing.assert_allclose(jac[1][0].numpy(), np.eye(3) * Y[0, 1])
    want = np.zeros((3, 2, 2))
    want[:, 0, 1] = X
    np.testing.assert_allclose(jac[1][1].numpy(), want)
    single = jacobian(lambda x: x.sin(), t(X))  # one tensor in, one out: one tensor
    np.testing.assert_allclose(single.numpy(), np.diag(np.cos(X)), rtol=1e-12)
    assert not single.requires_grad


def test_hessian_and_hessian_vector_products():
    def f(x):
        return (x ** 3).sum() + x[0] * x[1]
    want = np.diag(6 * X)
    want[0, 1] = want[1, 0] = 1.0
    np.testing.assert_allclose(hessian(f, t(X)).numpy(), want, rtol=1e-12)
    v = np.array([1.0, -2.0, 0.5])
    value, product = hvp(f, t(X), t(v))
    assert value.item() == pytest.approx((X ** 3).sum() + X[0] * X[1])
    np.testing.assert_allclose(product.numpy(), want @ v, rtol=1e-12)
    np.testing.assert_allclose(vhp(f, t(X), t(v))[1].numpy(), v @ want, rtol=1e-12)
    hxy = hessian(lambda x, y: (x * x).sum() * (y * y).sum(), (t(X), t(Y)))
    np.testing.assert_allclose(hxy[0][1].numpy(), 4 * X[:, None, None] * Y[None], rtol=1e-12)  # ∂²/∂x∂y


def test_vjp_and_jvp():
    out, g = vjp(lambda x: x * x, t(X), t([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out.numpy(), X * X)
    np.testing.assert_allclose(g.numpy(), 2 * X * [1.0, 2.0, 3.0])
    out, (gx, gy) = vjp(f_two, (t(X), t(Y)), (t([1.0, 0.0, 1.0]), t([0.0, 1.0, 0.0])))
    np.testing.assert_allclose(gx.numpy(), 2 * X * Y.sum() * [1.0, 0.0, 1.0] + Y[0, 1] * np.array([0.0, 1.0, 0.0]))
    want_gy = np.full((2, 2), (X * X * [1.0, 0.0, 1.0]).sum())
    want_gy[0, 1] += X[1]
    np.testing.assert_allclose(gy.numpy(), want_gy)
    out, tangent = jvp(lambda x: x.exp() * x[0], t(X), t([1.0, 0.0, -1.0]))
    jac = np.diag(np.exp(X) * X[0])
    jac[:, 0] += np.exp(X)
    np.testing.assert_allclose(tangent.numpy(), jac @ [1.0, 0.0, -1.0], rtol=1e-12)
    with pytest.raises(RuntimeError, match="v can only be None if the user-provided function returns a single"):
        vjp(lambda x: x * 2, t(X))
    # create_graph: the product stays differentiable (d/dx of vᵀ(2x·v) = 2v²)
    x = t(X).requires_grad_(True)
    _, g = vjp(lambda z: z * z, x, t([1.0, 2.0, 3.0]), create_graph=True)
    gx, = tessel.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0, 6.0])


class Cube(tessel.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x * x


class WrongCube(Cube):
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x  # missing a factor x


def test_grad_with_batched_grad_outputs_gives_each_rows_vector_jacobian_product():
    # identity rows as the batch: the Jacobians of f_two, row by row, as torch's is_grads_batched computes them
    x, y = t(X).requires_grad_(), t(Y).requires_grad_()
    a, b = f_two(x, y)
    eye = t(np.eye(3))
    ja, jy = tessel.autograd.grad(a, [x, y], grad_outputs=eye, is_grads_batched=True, retain_graph=True)
    np.testing.assert_allclose(ja.numpy(), np.diag(2 * X * Y.sum()), rtol=1e-12)  # d(x² Σy)/dx
    np.testing.assert_allclose(jy.numpy(), np.broadcast_to((X * X)[:, None, None], (3, 2, 2)), rtol=1e-12)
    # two outputs at once: the batch rows pair up; an input no output uses stays None with allow_unused
    z = t([1.0]).requires_grad_()
    gx, gz = tessel.autograd.grad([a, b], [x, z], grad_outputs=[eye, 2 * eye], is_grads_batched=True,
                                  allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), np.diag(2 * X * Y.sum() + 2 * Y[0, 1]), rtol=1e-12)
    assert gz is None
    with pytest.raises(ValueError, match="dim 0 sizes differ"):
        a2, b2 = f_two(x, y)
        tessel.autograd.grad([a2, b2], [x], grad_outputs=[eye, eye[:2]], is_grads_batched=True)
    with pytest.raises(ValueError, match="every output needs a grad_outputs tensor"):
        tessel.autograd.grad(f_two(x, y)[0].sum(), [x], is_grads_batched=True)


def test_saved_tensors_hooks_see_every_saved_tensor_and_backward_uses_what_unpack_returns():
    from tessel.autograd.graph import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks
    a, b = t([0.5, -1.0, 2.0]).requires_grad_(), t([1.5, 2.0, -0.5]).requires_grad_()
    (a * b).sin().sum().backward()
    want_a, want_b = a.grad.numpy().copy(), b.grad.numpy().copy()
    a.grad = b.grad = None
    packed = []

    def pack(x):  # offload to a numpy array, as an activation-offloading hook would
        packed.append(tuple(x.shape))
        return x.detach().numpy().copy()
    with saved_tensors_hooks(pack, lambda arr: tessel.from_numpy(arr)):
        loss = (a * b).sin().sum()
    assert packed == [(3,), (3,), (3,)]  # mul saves a and b, sin its input
    loss.backward()
    np.testing.assert_allclose(a.grad.numpy(), want_a, rtol=1e-15)
    np.testing.assert_allclose(b.grad.numpy(), want_b, rtol=1e-15)
    # a product with a Python number saves no tensor: hooks that would zero what they unpack change nothing
    a.grad = None
    with saved_tensors_hooks(lambda x: x, lambda x: x * 0):
        (a * 3.0).sum().backward()  # mul by a number saves nothing: unaffected
    assert a.grad.tolist() == [3.0, 3.0, 3.0]
    # backward reads what unpack returns, not the original: d(a·b)/da is the saved b, here doubled
    a.grad = None
    with saved_tensors_hooks(lambda x: x, lambda x: x * 2):
        (a * b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * b.detach().numpy(), rtol=1e-15)
    with saved_tensors_hooks(lambda x: x, lambda x: x[:1]):
        bad = (a * b).sum()
    with pytest.raises(ValueError, match="unpack_hook returned a tensor of shape \\[1\\] for one saved with shape "
                                        "\\[3\\]"):
        bad.backward()
    with disable_saved_tensors_hooks("no hooks in here"):  # torch's: ops save as usual, hooks are refused
        (a * b).sum().backward()
        with pytest.raises(RuntimeError, match="no hooks in here"):
            with save_on_cpu():
                pass
    with saved_tensors_hooks(lambda x: x, lambda x: x):
        with pytest.raises(RuntimeError, match="not while hooks"):
            with disable_saved_tensors_hooks("not while hooks"):
                pass
    a.grad = None
    with save_on_cpu(pin_memory=True):
        (a * b).sum().backward()


def test_gradcheck_passes_a_right_backward_and_catches_a_wrong_one():
    x = t(X).requires_grad_(True)
    assert tessel.autograd.gradcheck(Cube.apply, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        tessel.autograd.gradcheck(WrongCube.apply, (x,))
    assert tessel.autograd.gradcheck(WrongCube.apply, (x,), raise_exception=False) is False
    assert tessel.autograd.gradgradcheck(lambda z: (z ** 3).sin(), (x,))
    y = t(Y).requires_grad_(True)
    assert tessel.autograd.gradcheck(lambda a, b: (a.unsqueeze(1) * b[0]).tanh(), (x, y))
    with pytest.raises(ValueError, match="gradcheck expects at least one input tensor to require gradient"):
        tessel.autograd.gradcheck(Cube.apply, (t(X),))
    with tessel.autograd.no_grad():
        assert not (x * 2).requires_grad
    assert tessel.autograd.enable_grad is tessel.enable_grad


def test_detect_anomaly_names_the_function_that_returned_nan():
    a = tessel.tensor([0.0, 1.0], requires_grad=True)

    def nan_backward():
        (a * 0).sqrt().sum().backward()  # sqrt' at 0 is inf, and MulBackward0 makes inf · 0 = NaN
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        with tessel.autograd.detect_anomaly():
            assert tessel.is_anomaly_enabled() and tessel.autograd.is_anomaly_enabled()
            with pytest.raises(RuntimeError, match="Function 'MulBackward0' returned nan values in its 0th output"):
                nan_backward()
    assert not tessel.is_anomaly_enabled()
    nan_backward()  # off: the NaN reaches the gradient, as in torch
    assert np.isnan(a.grad.numpy()).all()
    with tessel.autograd.set_detect_anomaly(True, check_nan=False):
        assert tessel.is_anomaly_enabled() and not tessel.is_anomaly_check_nan_enabled()
        nan_backward()
    tessel.autograd.set_detect_anomaly(True)  # as a function: on until turned off
    try:
        with pytest.raises(RuntimeError, match="returned nan values"):
            nan_backward()
    finally:
        tessel.autograd.set_detect_anomaly(False)
    assert not tessel.is_anomaly_enabled()


def test_detect_anomaly_warns_with_the_forward_stack_of_the_failing_node():
    # torch's anomaly mode exists for this warning: "Error detected in <node>. Traceback of forward call that caused
    # the error:" and the user's line that made the failing node (tessel raised the same error without it)
    import warnings
    x = tessel.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tessel.autograd.detect_anomaly():
            y = (x / x).sum()  # the forward call: 0 / 0 gives NaN gradients in DivBackward0
            with pytest.raises(RuntimeError, match="Function 'DivBackward0' returned nan values in its 1th output"):
                y.backward()
    texts = [str(w.message) for w in caught if "Error detected in" in str(w.message)]
    assert len(texts) == 1, [str(w.message) for w in caught]
    lines = texts[0].splitlines()
    assert lines[0] == "Error detected in DivBackward0. Traceback of forward call that caused the error:"
    # the user's line is the last frame outside tessel's package (Tensor's operators have a Python frame for
    # Python complex operands, tessel/_complex_torch.py; torch's Python-level ones show theirs too)
    package = os.path.dirname(tessel.__file__) + os.sep
    frames = [ln for ln in texts[0].split('\n  File "')[1:] if not ln.startswith(package)]
    assert "autograd_functional_test.py" in texts[0] and frames[-1].splitlines()[-1].strip() == "y = (x / x).sum()" \
        "  # the forward call: 0 / 0 gives NaN gradients in DivBackward0", texts[0]
    z = (x / x).sum()  # made outside anomaly mode: nothing recorded, nothing warned
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tessel.autograd.detect_anomaly():
            with pytest.raises(RuntimeError, match="returned nan values"):
                z.backward()
    assert not [w for w in caught if "Error detected in" in str(w.message)]


def small_model():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))


XS = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)


def test_total_norm_and_clip_against_numpy():
    model = small_model()
    (model(tessel.tensor(XS)) ** 2).mean().backward()
    grads = [p.grad.numpy().astype(np.float64) for p in model.parameters()]
    for p in (2.0, 3.0, 1.0):
        want = sum((np.abs(g) ** p).sum() for g in grads) ** (1 / p)
        got = get_total_norm([q.grad for q in model.parameters()], p)
        assert got.dtype == tessel.float32 and got.item() == pytest.approx(want, rel=1e-6)
    assert get_total_norm([q.grad for q in model.parameters()], float("inf")).item() == pytest.approx(
        max(np.abs(g).max() for g in grads))
    total = get_total_norm([q.grad for q in model.parameters()])
    clip_grads_with_norm_(model.parameters(), 0.5 * total.item(), total)
    coef = 0.5 * total.item() / (total.item() + 1e-6)
    for q, g in zip(model.parameters(), grads):
        np.testing.assert_allclose(q.grad.numpy(), g * coef, rtol=1e-6)
    clip_grads_with_norm_(model.parameters(), 10.0, tessel.tensor(0.1))  # under the bound: untouched
    for q, g in zip(model.parameters(), grads):
        np.testing.assert_allclose(q.grad.numpy(), g * coef, rtol=1e-6)
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        get_total_norm([tessel.tensor([1.0, float("nan")])], error_if_nonfinite=True)


def test_total_norm_of_fully_shard_gradients_is_one_ranks_with_one_all_reduce():
    model = small_model()
    (model(tessel.tensor(XS)) ** 2).mean().backward()
    want = np.sqrt(sum((p.grad.numpy().astype(np.float64) ** 2).sum() for p in model.parameters()))
    clip_grads_with_norm_(model.parameters(), 0.1, tessel.tensor(want))  # (torch's takes the norm as a tensor only)
    want_grads = [p.grad.numpy() for p in model.parameters()]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        sharded = small_model()
        fully_shard(sharded)
        (sharded(tessel.tensor(XS[rank * 4:(rank + 1) * 4])) ** 2).mean().backward()
        with tessel.CommTracer() as tracer:
            total = get_total_norm([p.grad for p in sharded.parameters()])
        # torchtitan's sequence: the DTensor's full_tensor(), then the clip with it
        clip_grads_with_norm_(sharded.parameters(), 0.1, total.full_tensor())
        got[rank] = (total.full_tensor().item(), [type(pl).__name__ for pl in total.placements], tracer.summary(),
                     [p.grad.full_tensor().numpy() for p in sharded.parameters()])

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        norm, placements, trace, grads = got[r]
        assert norm == pytest.approx(want, rel=1e-6) and placements == ["Replicate"]
        assert trace == "all_reduce(axis0) x1", trace
        for g, w in zip(grads, want_grads):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-8)


def test_stack_and_chain_datasets_and_worker_info():
    from tessel.utils.data import ChainDataset, IterableDataset, StackDataset, TensorDataset, get_worker_info
    a, b = TensorDataset(tessel.arange(4)), [10, 11, 12, 13]
    stacked = StackDataset(a, b)
    assert len(stacked) == 4 and stacked[2][0][0].item() == 2 and stacked[2][1] == 12
    named = StackDataset(x=b, y=[0, 1, 0, 1])
    assert named[3] == {"x": 13, "y": 1}
    with pytest.raises(ValueError, match="Size mismatch between datasets"):
        StackDataset(b, [1, 2])

    class Stream(IterableDataset):
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

        def __len__(self):
            return len(self.items)
    chained = ChainDataset([Stream([1, 2]), Stream([3])])
    assert list(chained) == [1, 2, 3] and len(chained) == 3
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(ChainDataset([Stream([1]), [2]]))
    assert get_worker_info() is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))

