"""Semantics tutorials and research code rely on, found by printing the same computations under torch 2.15 and
tessel: augmented assignments write in place (aliases, views and buffers see them), custom autograd.Functions
check and free their saved tensors and take one gradient per output, once_differentiable refuses a second
derivative, and smaller behaviours of tensors and modules. Expected values are torch 2.15's printed results for
the same lines, or closed forms."""
import sys
import warnings

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def test_augmented_assignments_write_in_place_as_torch():
    a = tessel.tensor([5, 6, 7])
    alias = a
    a //= 2
    assert alias.tolist() == [2, 3, 3] and a is alias
    m = tessel.tensor([True, False, False])
    view = m[1:]
    view |= tessel.tensor([True, True])
    assert m.tolist() == [True, True, True]

    def update(mask, new):
        mask &= new
    k = tessel.tensor([True, True])
    update(k, tessel.tensor([False, True]))
    assert k.tolist() == [False, True]
    f = tessel.tensor([2.0, 3.0])
    g = f
    f **= 2
    assert g.tolist() == [4.0, 9.0]
    r = tessel.tensor([5, -7])
    r %= 3
    assert r.tolist() == [2, 2]  # remainder takes the divisor's sign, as torch's
    x = tessel.tensor([True, False])
    x ^= tessel.tensor([True, True])
    assert x.tolist() == [False, True]

    class Seen(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", tessel.tensor([False, False]))

        def forward(self, x):
            s = self.seen
            s |= x > 0
            return x
    mod = Seen()
    mod(tessel.tensor([1.0, -1.0]))
    assert mod.seen.tolist() == [True, False]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i = tessel.tensor([4])
        i //= 1.5
    w = tessel.tensor([1.0, 2.0], requires_grad=True)
    h = w * 1
    h **= 3  # recorded: d(w^3)/dw = 3 w^2
    h.sum().backward()
    assert w.grad.tolist() == [3.0, 12.0]


class _Square(tessel.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


def test_function_saved_tensors_are_version_checked_and_freed_after_backward():
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = _Square.apply(y)
    y.mul_(10)  # the saved tensor changes: its gradient would be 20, 40
    with pytest.raises(RuntimeError, match="modified by an inplace operation: saved tensor 0 of '_SquareBackward'"):
        z.sum().backward()
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    z = _Square.apply(x)
    z.sum().backward(retain_graph=True)
    z.sum().backward()  # retained once: the second backward accumulates
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        z.sum().backward()


def test_function_backward_gets_one_gradient_per_output_and_may_return_extra_nones():
    class WithCount(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale=2.0):
            flag = x > 0
            ctx.mark_non_differentiable(flag)
            return x * scale, 3, flag

        @staticmethod
        def backward(ctx, g, g_count, g_flag):
            assert g_count is None  # the int output's slot
            assert g_flag.tolist() == [False, False]  # a non-differentiable output's gradient: zeros, as torch
            return g * 2.0, None, None  # one more None than inputs given to apply: accepted, as torch

    x = tessel.tensor([1.0, -1.0], requires_grad=True)
    y, count, flag = WithCount.apply(x)
    assert count == 3 and flag.tolist() == [True, False] and not flag.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_once_differentiable_runs_unrecorded_and_refuses_a_second_derivative():
    from tessel.autograd.function import once_differentiable

    class Cube(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x * x * g

    x = tessel.tensor([2.0], requires_grad=True)
    g, = tessel.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [12.0] and not g.requires_grad  # as torch: the backward ran unrecorded
    v = tessel.tensor([1.0], requires_grad=True)  # a gradient that requires grad: its result is marked
    g, = tessel.autograd.grad(Cube.apply(x), x, grad_outputs=v, create_graph=True)
    assert g.tolist() == [12.0] and g.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with "
                                           "@once_differentiable"):
        g.sum().backward()


def test_module_private_dicts_are_write_through_views():
    # HF Trainer's get_parameter_names reads model._parameters; accelerate / peft write module._parameters[name].
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(tessel.ones(2))
            self.register_buffer("b", tessel.zeros(2))
            self.register_buffer("scratch", tessel.zeros(1), persistent=False)
            self.lin = nn.Linear(2, 2)

    net = Net()
    assert list(net._parameters) == ["w"] and net._parameters["w"] is net.w
    assert list(nn.Linear(2, 3)._parameters) == ["weight", "bias"] and list(nn.Linear(2, 3)._modules) == []
    assert list(net._buffers) == ["b", "scratch"] and list(net._modules) == ["lin"] and net._modules["lin"] is net.lin
    assert set(net._non_persistent_buffers_set) == {"scratch"}
    net._parameters["v"] = nn.Parameter(tessel.full((3,), 2.0))
    assert [n for n, _ in net.named_parameters()][:2] == ["w", "v"] and net.v.tolist() == [2.0] * 3
    net._buffers["b"] = tessel.ones(2)
    assert net.b.tolist() == [1.0, 1.0] and "b" in net.state_dict()
    net._non_persistent_buffers_set.add("b")
    assert "b" not in net.state_dict() and net.b.tolist() == [1.0, 1.0]
    del net._parameters["v"]
    assert "v" not in dict(net.named_parameters())
    net._modules["extra"] = nn.ReLU()
    assert isinstance(net.extra, nn.ReLU) and "extra" in dict(net.named_children())
    with pytest.raises(KeyError):
        net._parameters["missing"]


def test_buffers_keep_one_object_and_can_be_deleted():
    class Rope(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", tessel.arange(3.0))
            self.original_inv_freq = self.inv_freq  # HF rotary's alias

    m = Rope()
    assert m.inv_freq is m.inv_freq and id(m.inv_freq) == id(m.inv_freq)
    assert next(m.buffers()) is m.inv_freq and m.inv_freq in {m.inv_freq: 1}
    assert m.state_dict(keep_vars=True)["inv_freq"] is m.inv_freq
    lin = nn.Linear(2, 2)
    assert lin.state_dict(keep_vars=True)["weight"] is lin.weight
    del m.inv_freq
    assert list(m.state_dict()) == [] and not hasattr(m, "inv_freq")
    del lin.bias  # a built-in layer's parameter too: see the next test for what its forward then reads
    assert list(lin.state_dict()) == ["weight"] and not hasattr(lin, "bias")

    class P(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(tessel.ones(1))
    p = P()
    del p.w
    assert list(p.parameters()) == []


def test_del_then_assign_a_tensor_to_a_built_in_layers_parameter_is_read_by_its_forward_as_torch():
    """torch's `del lin.weight; lin.weight = w * 3` (meta-learning, hand-made sharing): the layer's forward uses the
    non-leaf tensor, whose graph reaches w; parameters() and the state dict no longer hold the name; reading it
    before anything is assigned is torch's AttributeError; a Parameter assigned later is a parameter again. (A
    NotImplementedError before.)"""
    lin = nn.Linear(2, 2, bias=False)
    del lin.weight
    assert list(lin.parameters()) == [] and list(lin.state_dict()) == []
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'weight'"):
        lin.weight
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'weight'"):
        lin(tessel.ones(1, 2))
    w = tessel.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    lin.weight = w * 3
    x = tessel.tensor([[1.0, -1.0]])
    y = lin(x)
    np.testing.assert_allclose(y.detach().numpy(), [[-3.0, -3.0]])  # x @ (3 w).T
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[3.0, -3.0], [3.0, -3.0]])  # 3 * ones(2, 1) @ x
    assert list(lin.parameters()) == []
    lin.weight = nn.Parameter(tessel.zeros(2, 2))
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    np.testing.assert_allclose(lin(x).detach().numpy(), [[0.0, 0.0]])
    # Linear's bias (a property of the C++ layer): a tensor assigned after del is what forward adds; None drops it.
    biased = nn.Linear(2, 2)
    del biased.bias
    b = tessel.tensor([1.0, 2.0], requires_grad=True)
    biased.bias = b * 2
    assert biased.bias is not None and [n for n, _ in biased.named_parameters()] == ["weight"]
    ref = x @ biased.weight.detach().t()
    np.testing.assert_allclose(biased(x).detach().numpy(), (ref + tessel.tensor([2.0, 4.0])).numpy(), rtol=1e-6)
    biased(x).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), [2.0, 2.0])
    biased.bias = None
    assert biased.bias is None
    np.testing.assert_allclose(biased(x).detach().numpy(), ref.numpy(), rtol=1e-6)


def test_module_registration_errors_and_lookups_as_torch():
    m = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"cannot assign 'Tensor' object to parameter 'q' \(torch.nn.Parameter or None"):
        m.register_parameter("q", tessel.ones(1))
    with pytest.raises(KeyError, match="buffer name can.+t contain"):
        m.register_buffer("a.b", tessel.ones(1))
    with pytest.raises(AttributeError, match="Sequential has no attribute `5`"):
        m.get_submodule("5")
    assert [n for n, _ in m.named_modules(prefix="root")] == ["root", "root.0"]
    y = tessel.ones(2, requires_grad=True) * 2
    assert y.requires_grad_() is y  # a non-leaf that requires grad: a no-op, as torch
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)


def test_tensor_construction_and_indexing_details_as_torch():
    lengths = tessel.tensor([3, 5, 2])
    r = tessel.arange(lengths.max())
    assert r.dtype == tessel.int64 and r.tolist() == [0, 1, 2, 3, 4]
    assert tessel.arange(np.int64(3)).tolist() == [0, 1, 2] and tessel.arange(1, tessel.tensor(4)).tolist() == [1, 2, 3]
    assert tessel.arange(0.0, 5.0, 1.5, dtype=tessel.int64).tolist() == [0, 1, 2, 3]  # torch's truncation
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent with step sign"):
        tessel.arange(5, 0)
    acc = tessel.tensor([])
    assert tuple(tessel.cat([acc, tessel.ones(2, 2)]).shape) == (2, 2)  # the legacy empty tensor is skipped
    assert tuple(tessel.cat([acc, tessel.ones(2, 2, dtype=tessel.float64)]).shape) == (2, 2)
    assert tessel.logsumexp(tessel.zeros(0, 3), 0).tolist() == [float("-inf")] * 3
    assert tuple(tessel.tensor([tessel.tensor([1.0]), tessel.tensor([2.0])]).shape) == (2,)  # tensors read as numbers
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        tessel.tensor([tessel.ones(2), tessel.ones(2)])
    with pytest.raises(RuntimeError, match="value cannot be converted to type uint8 without overflow"):
        tessel.tensor(300, dtype=tessel.uint8)
    x = tessel.arange(3.0)
    assert tuple(x[True].shape) == (1, 3) and tuple(x[False].shape) == (0, 3)
    assert tuple(x[None, True].shape) == (1, 1, 3)
    previous = tessel.get_default_dtype()
    tessel.set_default_dtype(tessel.float64)
    try:
        assert repr(tessel.tensor([1.0, 2.0])) == "tensor([1., 2.])"
        assert repr(tessel.tensor([1.0], dtype=tessel.float32)) == "tensor([1.], dtype=tessel.float32)"
    finally:
        tessel.set_default_dtype(previous)


def test_functional_jacobians_of_outputs_that_do_not_depend_on_the_inputs_are_zeros():
    from tessel.autograd.functional import hessian, jacobian, vjp
    x = tessel.tensor([1.0, 2.0])
    assert jacobian(lambda t: tessel.ones(2), x).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert hessian(lambda t: (t * tessel.tensor([3.0, -1.0])).sum(), x).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    out, g = vjp(lambda t: t.detach() * 2, x, tessel.ones(2))
    assert out.tolist() == [2.0, 4.0] and g.tolist() == [0.0, 0.0]


def test_lambda_lr_saves_its_callables_state_and_scripts_find_jit_and_compiler():
    class Scale:
        def __init__(self, scale):
            self.scale = scale

        def __call__(self, epoch):
            return self.scale

    opt = tessel.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0)
    sched = tessel.optim.lr_scheduler.LambdaLR(opt, Scale(0.5))
    state = sched.state_dict()
    assert state["lr_lambdas"] == [{"scale": 0.5}]  # torch's: the callable's __dict__ (None for a function)
    other = tessel.optim.lr_scheduler.LambdaLR(tessel.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0), Scale(1.0))
    other.load_state_dict(state)
    assert other.lr_lambdas[0].scale == 0.5
    plain = tessel.optim.lr_scheduler.LambdaLR(tessel.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0), lambda e: 1.0)
    assert plain.state_dict()["lr_lambdas"] == [None]
    assert not tessel.jit.is_tracing() and not tessel.jit.is_scripting() and not tessel.compiler.is_compiling()
    assert tessel.jit.unused(len) is len and tessel.compiler.disable(len) is len and tessel.jit.annotate(int, 3) == 3
    assert tessel.ones(2).to(None).dtype == tessel.float32 and tessel.ones(2).to(None, tessel.float64).dtype == \
        tessel.float64


def test_repeated_pruning_ranks_the_already_masked_weight():
    # torch's pruning tutorial: l1_unstructured twice, then ln_structured; torch scores module.weight (masked).
    import tessel.nn.utils.prune as prune
    lin = nn.Linear(4, 3).double()
    with tessel.no_grad():
        lin.weight.copy_(tessel.tensor([[0.5, -1.2, 0.3, 0.05], [2.0, 0.1, -0.7, -0.01], [0.4, -0.45, 0.9, 1.5]],
                                       dtype=tessel.float64))
    prune.l1_unstructured(lin, "weight", amount=0.25)
    prune.l1_unstructured(lin, "weight", amount=0.5)
    prune.ln_structured(lin, "weight", amount=1, n=1, dim=1)
    assert lin.weight_mask.tolist() == [[0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1]]  # torch 2.15's


def test_always_call_forward_hooks_run_when_forward_raises_and_std_warns_without_degrees_of_freedom():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    seen = []
    m = Boom()
    handle = m.register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    m.register_forward_hook(lambda mod, args, out: seen.append("plain"))
    with pytest.raises(ValueError, match="boom"):
        m(tessel.ones(1))
    assert seen == [None]
    handle.remove()
    with pytest.raises(ValueError, match="boom"):
        m(tessel.ones(1))
    assert seen == [None]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        value = tessel.tensor([3.0]).std()
    assert np.isnan(value.item()) and [str(x.message) for x in w] == [
        "std(): degrees of freedom is <= 0. Correction should be strictly less than the reduction factor (input "
        "numel divided by output numel)."]


def test_func_transforms_take_pytrees_as_torch_func_tutorials_use_them():
    from tessel.func import functional_call, grad, jacrev, stack_module_state, vmap
    rng = np.random.default_rng(3)
    xs_np, ys_np = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    xs, ys = tessel.tensor(xs_np), tessel.tensor(ys_np)
    tessel.manual_seed(0)
    net = nn.Linear(3, 2).double()
    params = {k: v.detach() for k, v in net.named_parameters()}

    def loss(p, x, y):  # one sample
        return ((functional_call(net, p, (x.unsqueeze(0),)) - y) ** 2).sum()

    # per-sample gradients (the torch.func tutorial): a dict of [5, ...] gradients
    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    assert sorted(per_sample) == ["bias", "weight"] and tuple(per_sample["weight"].shape) == (5, 2, 3)
    w, b = params["weight"].numpy(), params["bias"].numpy()
    for i in range(5):
        r = 2 * (w @ xs_np[i] + b - ys_np[i])
        np.testing.assert_allclose(per_sample["weight"][i].numpy(), np.outer(r, xs_np[i]), rtol=1e-12)
        np.testing.assert_allclose(per_sample["bias"][i].numpy(), r, rtol=1e-12)
    assert not per_sample["weight"].requires_grad
    jac = jacrev(lambda d: d["a"] * 2)({"a": xs[0]})
    assert list(jac) == ["a"] and jac["a"].tolist() == (2 * np.eye(3)).tolist()
    out = vmap(lambda d: [d["a"] + d["b"], d["a"]])({"a": xs, "b": xs})
    assert isinstance(out, list) and out[0].tolist() == (2 * xs_np).tolist()
    assert vmap(lambda t: t[0] + t[1], in_dims=((0, 1),))((xs, xs.t().contiguous())).tolist() == \
        (2 * xs_np).tolist()
    # model ensembling (torch's tutorial): stack_module_state + vmap over functional_call
    models = [nn.Linear(3, 2).double() for _ in range(4)]
    stacked, buffers = stack_module_state(models)
    assert tuple(stacked["weight"].shape) == (4, 2, 3) and stacked["weight"].requires_grad and buffers == {}
    ensemble = vmap(lambda p, b, x: functional_call(models[0], (p, b), (x,)), in_dims=(0, 0, None))(stacked, buffers,
                                                                                                   xs)
    for k, m in enumerate(models):
        np.testing.assert_allclose(ensemble[k].detach().numpy(), m(xs).detach().numpy(), rtol=1e-12)
    assert functional_call(net, {"unknown": tessel.ones(1)}, (xs,)).shape == (5, 2)  # ignored unless strict


def test_grad_fn_classes_are_named_as_torch_names_them():
    # torchviz labels each node with type(fn).__name__
    x = tessel.ones(2, requires_grad=True)
    y = (x * 2).sum()
    assert type(y.grad_fn).__name__ == "SumBackward0" and y.grad_fn.name() == "SumBackward0"
    (mul, _), = y.grad_fn.next_functions
    assert type(mul).__name__ == "MulBackward0"
    (acc, _), = mul.next_functions
    assert type(acc).__name__ == "AccumulateGrad" and acc.variable.tolist() == [1.0, 1.0]
    assert y.grad_fn == y.grad_fn and {y.grad_fn: 1}[y.grad_fn] == 1 and x.grad_fn is None


def test_user_mistakes_raise_as_torch_instead_of_computing_something_else():
    import tessel.nn.functional as F
    logits, labels = tessel.zeros(3, 1), tessel.ones(3)
    with pytest.raises(ValueError, match=r"Target size \(tessel.Size\(\[3\]\)\) must be the same as input size"):
        F.binary_cross_entropy_with_logits(logits, labels)  # [N, 1] vs [N] broadcast to [N, N] silently
    with pytest.raises(ValueError, match="Using a target size .* that is different to the input size"):
        F.binary_cross_entropy(tessel.full((3, 1), 0.5), labels)
    logp = tessel.zeros(3, 5)
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"):
        F.nll_loss(logp, tessel.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected"):
        F.nll_loss(logp, tessel.zeros(3, 1, dtype=tessel.int64))
    with pytest.raises(IndexError, match="Target 5 is out of bounds."):
        F.nll_loss(logp, tessel.tensor([0, 5, 1]))
    x = tessel.arange(12.0).reshape(3, 4)
    for name, call in (("index_select", lambda: x.index_select(2, tessel.tensor([0]))),
                       ("cumsum", lambda: x.cumsum(2)), ("prod", lambda: x.prod(2)), ("cummax", lambda: x.cummax(2)),
                       ("mode", lambda: x.mode(2)), ("diff", lambda: x.diff(dim=2)),
                       ("movedim", lambda: x.movedim(2, 0)),
                       ("gather", lambda: x.gather(2, tessel.zeros(3, 4, dtype=tessel.int64))),
                       ("take_along_dim", lambda: tessel.take_along_dim(x, tessel.zeros(3, 4, dtype=tessel.int64), 2))):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], "
                                             r"but got 2\)"):
            call()  # these wrapped the dim (2 % 2 = 0) and returned a result along dim 0
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):  # torch 2.15's message
        x.gather(1, tessel.zeros(3, 4))
    w = tessel.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        tessel.optim.SGD([w], lr=0.1)
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(tessel.ones(2))
    with pytest.raises(RuntimeError):  # torch.linalg.LinAlgError is a RuntimeError ("except RuntimeError: jitter")
        tessel.linalg.cholesky(tessel.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=tessel.float64))
    with pytest.raises(tessel.linalg.LinAlgError):
        tessel.linalg.inv(tessel.zeros(2, 2, dtype=tessel.float64))


def test_module_name_clashes_raise_as_torch():
    lin = nn.Linear(2, 2)
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        lin.register_buffer("weight", tessel.zeros(2))
    seq = nn.Sequential(nn.Linear(2, 2))
    seq.p = nn.Parameter(tessel.ones(1))
    with pytest.raises(KeyError, match="attribute 'p' already exists"):
        seq.add_module("p", nn.ReLU())
    with pytest.raises(TypeError, match=r"cannot assign 'int' as child module '0' \(torch.nn.Module or None "
                                        r"expected\)"):
        setattr(seq, "0", 3)
    assert isinstance(seq[0], nn.Linear) and list(dict(seq.named_children())) == ["0"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'inplace'"):
        nn.Sigmoid(inplace=True)
    act = nn.SiLU(inplace=True)
    t = tessel.tensor([1.0, -1.0])
    expected = (t / (1 + (-t).exp())).tolist()
    assert act(t).tolist() == expected and repr(act) == "SiLU(inplace=True)"
    assert nn.ReLU()(input=tessel.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_results_never_alias_the_input_when_the_op_has_nothing_to_do():
    import tessel.nn.functional as F
    img = tessel.ones(1, 1, 2, 2)
    for name, out in (("interpolate", F.interpolate(img, size=(2, 2), mode="bilinear")),
                      ("interpolate nearest", F.interpolate(img, scale_factor=1.0)), ("repeat", img.repeat(1, 1, 1, 1)),
                      ("tile", img.tile((1,))), ("flip", tessel.flip(img, [])),
                      ("pixel_shuffle", F.pixel_shuffle(img, 1)),
                      ("pixel_unshuffle", F.pixel_unshuffle(img, 1)), ("channel_shuffle", F.channel_shuffle(img, 1))):
        out.zero_()
        assert img.sum().item() == 4.0, name  # torch returns a copy: the source image stays as it was


def test_random_ops_draw_from_the_generator_they_are_given():
    def draws(global_seed):
        tessel.manual_seed(global_seed)
        g = tessel.Generator().manual_seed(7)
        p = tessel.full((64,), 0.5)
        return [tessel.bernoulli(p, generator=g).tolist(), tessel.zeros(64).bernoulli_(0.5, generator=g).tolist(),
                tessel.zeros(64).random_(0, 10, generator=g).tolist(),
                tessel.zeros(64).exponential_(generator=g).tolist(),
                tessel.zeros(64).geometric_(0.5, generator=g).tolist(), tessel.zeros(64).cauchy_(generator=g).tolist(),
                tessel.zeros(64).log_normal_(generator=g).tolist()]
    first, second = draws(1), draws(2)
    assert first == second  # the global seed no longer matters
    assert len(set(first[0])) == 2 and len(set(first[2])) > 5
    assert tessel.Generator(device="cpu").device == tessel.device("cpu")
    assert tessel.Generator("cpu").initial_seed() == tessel.Generator().initial_seed() == 67280421310721  # torch's
    assert isinstance(tessel.default_generator, tessel.Generator)
    tessel.default_generator.manual_seed(3)
    a = tessel.rand(3)
    tessel.manual_seed(3)
    assert tessel.rand(3).tolist() == a.tolist()


def test_foreach_functions_and_masked_categorical_kl_as_torch():
    params = [tessel.ones(2), tessel.full((3,), 2.0)]
    ema = [tessel.zeros(2), tessel.zeros(3)]
    tessel._foreach_lerp_(ema, params, 0.25)
    assert [e.tolist() for e in ema] == [[0.25, 0.25], [0.5, 0.5, 0.5]]
    tessel._foreach_mul_(ema, 2.0)
    tessel._foreach_add_(ema, params, alpha=-1.0)
    assert [e.tolist() for e in ema] == [[-0.5, -0.5], [-1.0, -1.0, -1.0]]
    norms = tessel._foreach_norm(params)
    np.testing.assert_allclose([n.item() for n in norms], [np.sqrt(2.0), np.sqrt(12.0)], rtol=1e-6)
    from tessel.distributions import Categorical, kl_divergence
    p = Categorical(logits=tessel.tensor([0.0, 1.0, 2.0]))
    q = Categorical(logits=tessel.tensor([1.0, float("-inf"), 0.0]))
    assert kl_divergence(p, q).item() == float("inf")  # it was NaN (inf * 0)
    probs_q = np.exp([1.0, 0.0]) / np.exp([1.0, 0.0]).sum()
    probs_p = np.exp([0.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    want = sum(pq * (np.log(pq) - np.log(pp)) for pq, pp in zip(probs_q, probs_p))
    np.testing.assert_allclose(kl_divergence(q, p).item(), want, rtol=1e-5)


def test_random_and_indexing_calls_torch_refuses_are_refused():
    import tessel.nn.functional as F
    with pytest.raises(RuntimeError, match="\"normal_kernel_cpu\" not implemented for 'Long'"):
        tessel.randn(3, dtype=tessel.int64)  # it gave zeros
    with pytest.raises(RuntimeError, match="\"check_uniform_bounds\" not implemented for 'Long'"):
        tessel.zeros(3, dtype=tessel.int64).uniform_()
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        tessel.bernoulli(tessel.tensor([1.5]))
    with pytest.raises(RuntimeError, match=r"Trying to create tensor with negative dimension -1: \[-1\]"):
        tessel.randperm(-1)
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        tessel.ones(3, 2).index_select(0, tessel.zeros(2, 2, dtype=tessel.int64))
    with pytest.raises(RuntimeError, match="huber_loss does not support non-positive values for delta"):
        F.huber_loss(tessel.ones(2), tessel.zeros(2), delta=-1.0)
    with pytest.raises(RuntimeError, match="diag\\(\\): Supports 1D or 2D tensors. Got 3D"):
        tessel.diag(tessel.ones(2, 2, 2))
    g = tessel.manual_seed(-1)  # torch wraps a negative seed to 64 bits
    assert g.initial_seed() == 2 ** 64 - 1
    x = tessel.tensor([[1.0, 2.0], [3.0, 5.0]])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        implicit = F.softmax(x)  # torch's deprecated implicit dim: 1 for 2-D
    assert "Implicit dimension choice for softmax has been deprecated" in str(w[0].message)
    np.testing.assert_allclose(implicit.numpy(), F.softmax(x, dim=1).numpy())


def test_input_gradients_of_windowed_ops_are_contiguous_for_views_as_wgan_gp_takes_them():
    # WGAN-GP: g = autograd.grad(critic(x), x, ...); g.view(B, -1).norm(2, dim=1) raised on tessel's strided gradients
    import tessel.nn.functional as F
    from tessel.autograd import Variable
    ops = {"conv2d": lambda x: F.conv2d(x, tessel.ones(4, 2, 3, 3, dtype=x.dtype), padding=1),
           "avg_pool2d": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
           "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 4),
           "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x, 4), "unfold": lambda x: F.unfold(x, 3, padding=1),
           "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear")}
    base = np.random.default_rng(0).standard_normal((3, 2, 6, 6))
    for dtype in (tessel.float32, tessel.float64):
        for name, op in ops.items():
            x = Variable(tessel.tensor(base, dtype=dtype), requires_grad=True)
            y = op(x)
            g, = tessel.autograd.grad(y, x, tessel.ones_like(y))
            assert g.is_contiguous(), (name, dtype)
            assert tuple(g.view(3, -1).shape) == (3, 72)
    assert isinstance(tessel.ones(1), Variable) and Variable(tessel.ones(2), requires_grad=True).is_leaf
    with warnings.catch_warnings(record=True) as w:  # torch warns about float() only with grad mode on
        warnings.simplefilter("always")
        from tessel import _tensor
        _tensor._warned_float.clear()
        with tessel.no_grad():
            float(tessel.ones(1, requires_grad=True))
    assert w == [] and _tensor._warned_float == []


def test_zero_std_and_norm_have_zero_gradients_and_binary_ops_promote_as_torch():
    # a constant feature or an all-zero vector: NaN gradients (sqrt's inf times 0) spread through training
    x = tessel.tensor([3.0, 3.0, 3.0], requires_grad=True)
    x.std().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    z = tessel.zeros(2, 3, requires_grad=True)
    tessel.linalg.vector_norm(z).backward()
    assert z.grad.tolist() == [[0.0] * 3] * 2
    rows = tessel.tensor([[2.0, 2.0], [1.0, 3.0]], requires_grad=True)
    std, _ = tessel.std_mean(rows, dim=1)
    std.sum().backward()
    np.testing.assert_allclose(rows.grad.numpy(), [[0.0, 0.0], [-np.sqrt(0.5), np.sqrt(0.5)]], rtol=1e-6)
    b = tessel.tensor([True, False, True])
    assert (b % 2).tolist() == [1, 0, 1] and (b % 2).dtype == tessel.int64 and (b // 2).tolist() == [0, 0, 0]
    u8 = tessel.tensor([1, 2, 3], dtype=tessel.uint8)
    assert tessel.remainder(u8, tessel.tensor(2, dtype=tessel.int8)).dtype == tessel.uint8  # 0-d: no widening
    assert tessel.maximum(u8, tessel.tensor(2)).dtype == tessel.uint8
    h = tessel.hypot(tessel.tensor([3.0], dtype=tessel.float16), tessel.tensor([4.0]))
    assert h.dtype == tessel.float32 and h.item() == 5.0
    assert tessel.add(tessel.ones(2, dtype=tessel.float16), tessel.ones(2, dtype=tessel.int32), alpha=0.5).dtype == \
        tessel.float16
    assert tessel.add(b, b, alpha=2).tolist() == [True, False, True]
    acc = tessel.addcmul(tessel.zeros(1, dtype=tessel.float64), tessel.tensor([1.1]), tessel.tensor([3.3]))
    assert acc.item() == float(np.float64(np.float32(1.1)) * np.float64(np.float32(3.3)))  # the product in float64
    assert tessel.addcmul(tessel.tensor([5, 7]), tessel.tensor([5, 7]), tessel.tensor([5, 7]), value=2.5).tolist() == \
        [55, 105]  # torch's integral kernel takes the value as 2


def test_out_arguments_of_the_tensors_tutorial():
    t = tessel.tensor([[1.0, 2.0], [3.0, 4.0]])
    y3 = tessel.rand_like(t)
    assert tessel.matmul(t, t.T, out=y3) is y3 and y3.tolist() == [[5.0, 11.0], [11.0, 25.0]]
    z3 = tessel.empty(1)  # resized to the result's shape, as torch's
    assert tessel.mul(t, t, out=z3) is z3 and z3.tolist() == [[1.0, 4.0], [9.0, 16.0]]
    c = tessel.empty(0)
    tessel.cat([t, t], 0, out=c)
    assert tuple(c.shape) == (4, 2) and tessel.exp(tessel.zeros(2), out=tessel.empty(2)).tolist() == [1.0, 1.0]
    s = tessel.empty(2)
    assert tessel.sum(t, 1, out=s) is s and s.tolist() == [3.0, 7.0]
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        tessel.mul(t.requires_grad_(), t, out=tessel.empty(2, 2))


def test_float32_cumprod_accumulates_in_double_as_torch():
    betas = np.linspace(1e-4, 0.02, 1000, dtype=np.float32)  # a DDPM schedule's alphas_cumprod
    got = tessel.cumprod(tessel.tensor(1 - betas), 0).numpy().astype(np.float64)
    want = np.cumprod((1 - betas).astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 1e-7  # float32 accumulation drifted to 1.1e-6


def test_a_zero_dim_tensor_operand_does_not_widen_pow_and_bitwise_results():
    # torch 2.15: a 0-d tensor only lifts the category, as a Python number does (uint8 ** tensor(3) is uint8)
    b = tessel.tensor([1, 2], dtype=tessel.uint8)
    three = tessel.tensor(3)
    assert tessel.pow(b, three).dtype == tessel.uint8 and tessel.pow(b, three).tolist() == [1, 8]
    assert (b & three).dtype == tessel.uint8 and (b & three).tolist() == [1, 2]
    assert (b | tessel.tensor(256)).tolist() == [1, 2]  # computed in uint8: 256 wraps to 0
    assert (tessel.tensor([1., 2.]) ** tessel.tensor(2, dtype=tessel.float64)).dtype == tessel.float32
    assert (tessel.tensor([1, 2], dtype=tessel.int8) ** tessel.tensor(2.5)).dtype == tessel.float32
    assert (tessel.tensor([1, 2]) ** tessel.tensor([2., 3.], dtype=tessel.float64)).dtype == tessel.float64
    assert (tessel.tensor([1, 2], dtype=tessel.int8) & tessel.tensor([3, 3], dtype=tessel.int16)).dtype == \
        tessel.int16


def test_reductions_and_scans_take_dim_zero_of_a_zero_dim_tensor():
    x = tessel.tensor(2.)
    assert tessel.logsumexp(x, 0).item() == 2.0 and tessel.logsumexp(x, 0).shape == ()
    assert tuple(x.median(0)) == (2.0, 0) and x.median(0).values.shape == ()
    assert tessel.quantile(x, 0.5, dim=0).item() == 2.0 and tessel.nanquantile(x, 0.5, dim=-1).item() == 2.0
    assert x.topk(1).values.shape == () and x.topk(1).indices.item() == 0
    assert x.cummax(0).values.shape == () and x.cummin(-1).indices.shape == () and x.flip(0).item() == 2.0
    with pytest.warns(UserWarning, match=r"^var_mean\(\): degrees of freedom is <= 0") as caught:
        v, m = tessel.var_mean(x, 0)
    assert caught[0].filename == __file__  # the warning names the caller's line, as torch's
    assert np.isnan(v.item()) and m.item() == 2.0 and v.shape == ()
    assert tessel.tensor([1., 3.]).std(0, correction=0).item() == 1.0
    with pytest.raises(IndexError, match=r"range of \[-1, 0\], but got 1"):
        tessel.logsumexp(x, 1)


def test_return_types_are_named_tuples_with_torchs_repr():
    import pickle
    r = tessel.tensor([[1., 5.], [4., 2.]]).max(1)
    assert type(r).__module__ == "tessel.return_types" and type(r) is tessel.return_types.max
    assert repr(r) == "tessel.return_types.max(\nvalues=tensor([5., 4.]),\nindices=tensor([1, 0]))"
    values, indices = r
    assert isinstance(r, tuple) and values is r.values and indices.tolist() == [1, 0]
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is tessel.return_types.max and back.values.tolist() == [5., 4.]
    x = tessel.tensor([3., 1., 3.])
    assert type(x.cummin(0)).__name__ == "cummin" and type(x.mode(0)).__name__ == "mode"
    assert type(x.sort()).__name__ == "sort" and type(tessel.aminmax(x)).__name__ == "aminmax"
    assert type(tessel.linalg.qr(tessel.eye(2))).__name__ == "linalg_qr"
    assert type(tessel.slogdet(tessel.eye(2))).__name__ == "slogdet"
    assert type(tessel.linalg.slogdet(tessel.eye(2))).__name__ == "linalg_slogdet"


def test_in_place_into_an_expanded_view_is_refused_as_torch():
    # ones(1, 4).expand(3, 4).add_(ones(3, 4)) added three times into one row (4s); torch refuses
    for write in (lambda x: x.add_(tessel.ones(3, 4)), lambda x: x.sub_(tessel.ones(3, 4)), lambda x: x.mul_(2.),
                  lambda x: x.mul_(2), lambda x: x.__iadd__(tessel.ones(3, 4))):
        base = tessel.ones(1, 4)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
            write(base.expand(3, 4))
        assert base.tolist() == [[1., 1., 1., 1.]]
    base = tessel.ones(1, 4)
    base.expand(3, 4).fill_(2.)  # the same value to every alias: torch allows it
    assert base.tolist() == [[2., 2., 2., 2.]]


def test_torchs_refusals_of_negative_std_mismatched_index_add_bool_add_and_detaching_views():
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0.0, but found std -1$"):
        tessel.normal(tessel.zeros(3), -1.)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0.0, but found std -0.5"):
        tessel.normal(0., -0.5, size=(2,))
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        tessel.normal(tessel.zeros(3), tessel.tensor([1., -1., 1.]))
    assert tessel.normal(tessel.zeros(3), tessel.zeros(3)).tolist() == [0., 0., 0.]  # std 0 is allowed
    with pytest.raises(RuntimeError, match=r"index_add_\(\): self \(Float\) and source \(Double\) must have the same"):
        tessel.zeros(3).index_add_(0, tessel.tensor([0]), tessel.ones(1, dtype=tessel.float64))
    flags = tessel.tensor([True, False])
    with pytest.raises(RuntimeError, match="result type Long can't be cast to the desired output type Bool"):
        flags.add_(1)
    flags.add_(tessel.tensor([False, True]))  # bool into bool is allowed: logical or
    assert flags.tolist() == [True, True]
    w = tessel.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't detach views in-place. Use detach"):
        w[1:].detach_()
    y = (w * 2).detach_()
    assert not y.requires_grad and y.tolist() == [2., 2., 2.]


def test_basic_indexing_fast_path_gives_numpys_values_as_views_with_gradients():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = tessel.tensor(a)
    keys = [1, -1, (1, 2), (slice(None), 2), (slice(1, 3), -2, slice(None, None, 2)), (Ellipsis, 1),
            (None, 1), (1, None, slice(0, 2)), (Ellipsis, None), (slice(-2, None), Ellipsis, 3),
            (slice(5, 1),), (slice(None, 100),), (0, 0, 0), (None, Ellipsis, None), (slice(1, 2), None, 1)]
    for key in keys:
        got = t[key]
        assert got.shape == a[key].shape and np.array_equal(got.numpy(), a[key]), key
        assert got._base is not None, key  # a view, as torch's basic indexing
    row = t[1]
    row[0, 0] = -1.0  # writes through the view
    assert t[1, 0, 0].item() == -1.0
    w = tessel.ones(3, 4, requires_grad=True)
    (w[1:, ::2] * tessel.tensor([[1., 2.], [3., 4.]])).sum().backward()
    assert w.grad.tolist() == [[0, 0, 0, 0], [1, 0, 2, 0], [3, 0, 4, 0]]
    # keys the fast path leaves to the Python path: errors and the other index kinds as before
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 3"):
        t[0, 0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    assert t[np.int64(2), True].shape == (1, 4, 5) and t[[0, 2]].shape == (2, 4, 5) and t[...]._base is not None


def test_tensor_index_and_mask_fast_path_gathers_rows_with_gradients_as_numpy():
    a = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    t = tessel.tensor(a)
    for key in ([2, -1, 0, 2], [[0, 1], [3, -4]], []):
        idx = tessel.tensor(key, dtype=tessel.int64)
        np.testing.assert_array_equal(t[idx].numpy(), a[np.array(key, dtype=np.int64)])
        np.testing.assert_array_equal(t[idx.int()].numpy(), a[np.array(key, dtype=np.int64)])
    mask = a[:, :, 0] > 7
    np.testing.assert_array_equal(t[tessel.tensor(mask)].numpy(), a[mask])
    np.testing.assert_array_equal(t[tessel.tensor(a > 10)].numpy(), a[a > 10])
    w = tessel.ones(4, 2, requires_grad=True)
    (w[tessel.tensor([1, 1, -1])] * tessel.tensor([[1., 2.], [3., 4.], [5., 6.]])).sum().backward()
    assert w.grad.tolist() == [[0, 0], [4, 6], [0, 0], [5, 6]]  # repeats accumulate, as torch's index backward
    g = tessel.zeros(3, requires_grad=True)
    (g[tessel.tensor([True, False, True])] * 2).sum().backward()
    assert g.grad.tolist() == [2, 0, 2]
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        t[tessel.tensor([4])]
    with pytest.raises(IndexError, match="does not match the shape of the indexed tensor"):
        t[tessel.tensor([True, False])]
    t2 = tessel.zeros(3, 2)
    t2[tessel.tensor([0, 2])] = 1.0  # a tensor key writes the rows (the fast path's copy is only for reads)
    t2[1, 0] = 5.0
    assert t2.tolist() == [[1, 1], [5, 0], [1, 1]]
    m = tessel.tensor([True, False])
    assert tessel.where(m, tessel.tensor([1., 2.]).half(), 2.5).dtype == tessel.float16
    assert tessel.where(m, tessel.tensor([1, 2]), 0.5).dtype == tessel.float32
    assert tessel.where(m, 1.0, 0.0).tolist() == [1.0, 0.0]


def test_layer_options_found_by_the_nn_zoo_sweep_match_torch():
    import tessel.nn.functional as F
    # nearest in 1-D and 3-D: floor(i * scale) (torch's 2-D kernel alone copies a kept size and halves a double)
    x = tessel.arange(3.).reshape(1, 1, 3)
    assert F.interpolate(x, scale_factor=2.3, mode="nearest").flatten().tolist() == [0, 0, 0, 1, 1, 2]
    assert F.interpolate(x, scale_factor=1.2, mode="nearest").flatten().tolist() == [0, 0, 1]
    assert F.interpolate(x.reshape(1, 1, 3, 1), scale_factor=(1.2, 1.0), mode="nearest").flatten().tolist() == \
        [0, 1, 2]
    # LPPool with norm_type inf / -inf: the max / min of |x| per window, with max_pool's gradient
    v = tessel.tensor([[[0.9, -0.1, 0.5, 0.3, -2.0, 1.5]]], requires_grad=True)
    F.lp_pool1d(v, float("inf"), 2).sum().backward()
    assert F.lp_pool1d(v, float("inf"), 2).flatten().tolist() == pytest.approx([0.9, 0.5, 2.0])
    assert v.grad.flatten().tolist() == [1, 0, 1, 0, -1, 0]
    assert F.lp_pool1d(v, -float("inf"), 2).flatten().tolist() == pytest.approx([0.1, 0.3, 1.5])
    # poisson_nll_loss(full=True) differentiates Stirling's term in the target: t log t - t + log(2 pi t) / 2
    t = tessel.tensor([3.0], requires_grad=True)
    F.poisson_nll_loss(tessel.tensor([0.5]), t, full=True, reduction="sum").backward()
    assert t.grad.item() == pytest.approx(-0.5 + np.log(3.0) + 0.5 / 3.0, rel=1e-6)
    # RReLU in eval: at 0 the gradient is the slope (torch's leaky_relu)
    r = tessel.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    F.rrelu(r, 0.1, 0.3).sum().backward()
    assert r.grad.tolist() == pytest.approx([0.2, 0.2, 1.0])
    # max_unpool with a repeated index sends the gradient to every value written there (torch's gather)
    vals = tessel.tensor([[[3.0, 5.0, 2.0]]], requires_grad=True)
    out = F.max_unpool1d(vals, tessel.tensor([[[1, 1, 4]]]), 3, stride=1)
    (out * tessel.tensor([[[1.0, 10.0, 100.0, 1000.0, 10000.0]]])).sum().backward()
    assert vals.grad.flatten().tolist() == [10.0, 10.0, 10000.0]
    # loss weights are buffers; the deprecated size_average / reduce become reduction= with torch's warning
    bce = nn.BCEWithLogitsLoss(weight=tessel.ones(2), pos_weight=tessel.ones(2)).double()
    assert list(bce.state_dict()) == ["weight", "pos_weight"] and bce.weight.dtype == tessel.float64
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        assert nn.MSELoss(size_average=False)(tessel.ones(2), tessel.zeros(2)).item() == 2.0
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.nll_loss(tessel.tensor([[-1.0, -4.0]]), tessel.tensor([1]), reduce=False).tolist() == [4.0]
    with pytest.raises(RuntimeError, match="does not support negative values for beta"):
        F.smooth_l1_loss(tessel.ones(2), tessel.zeros(2), beta=-1.0)
    bag = nn.EmbeddingBag.from_pretrained(tessel.tensor([[1.0, 2.0], [3.0, 4.0]]), mode="sum")
    assert bag(tessel.tensor([[0, 1]])).tolist() == [[4.0, 6.0]] and not bag.weight.requires_grad


def test_smooth_l1_and_huber_second_derivatives_at_a_zero_residual_are_one_over_beta():
    # the quadratic branch squared |r|, whose derivative is 0 at r = 0: the Hessian there read 0 instead of 1/beta
    # (and delta for huber), silently wrong double backward where a prediction meets its target exactly
    d = tessel.tensor([-0.5, 0.0, 0.25], requires_grad=True)
    zero = tessel.zeros(3)
    for loss, curvature in ((lambda: nn.functional.smooth_l1_loss(d, zero, reduction="sum", beta=2.0), 0.5),
                            (lambda: nn.functional.huber_loss(d, zero, reduction="sum", delta=2.0), 1.0)):
        g, = tessel.autograd.grad(loss(), d, create_graph=True)
        h, = tessel.autograd.grad(g.sum(), d)
        assert g.tolist() == [-0.5 * curvature, 0.0, 0.25 * curvature] and h.tolist() == [curvature] * 3


def test_second_derivatives_through_functions_that_save_their_outputs():
    # a custom Function saving its output (torch's docs' Exp), and tessel's own std / vector_norm / pow with a
    # tensor exponent / ndtri / log_ndtr: a create_graph backward lost the saved output's graph (silently wrong
    # Hessians; WGAN-GP with a minibatch-stddev feature got wrong parameter gradients)
    tessel.set_default_dtype(tessel.float64)
    try:
        class Exp(tessel.autograd.Function):
            @staticmethod
            def forward(ctx, i):
                result = i.exp()
                ctx.save_for_backward(result)
                return result

            @staticmethod
            def backward(ctx, grad):
                result, = ctx.saved_tensors
                return grad * result
        x = tessel.tensor([0.5, 1.0, -0.3], requires_grad=True)
        g, = tessel.autograd.grad(Exp.apply(x).sum(), x, create_graph=True)
        h, = tessel.autograd.grad(g.sum(), x)
        np.testing.assert_allclose(h.numpy(), np.exp([0.5, 1.0, -0.3]), rtol=1e-12)
        v = tessel.tensor([[0.3, -1.2, 2.0, 0.7]], requires_grad=True)
        for f in (lambda t: t.std(), lambda t: tessel.linalg.vector_norm(t)):
            g, = tessel.autograd.grad(f(v), v, create_graph=True)
            hv, = tessel.autograd.grad((g * g).sum(), v)  # |grad std|^2 and |grad norm|^2 are constants
            np.testing.assert_allclose(hv.numpy(), np.zeros((1, 4)), atol=1e-12)
        e = tessel.tensor([0.5, -0.5, 2.0], requires_grad=True)
        g, = tessel.autograd.grad((2.0 ** e).sum(), e, create_graph=True)
        h, = tessel.autograd.grad(g.sum(), e)
        np.testing.assert_allclose(h.numpy(), np.log(2.0) ** 2 * 2.0 ** np.array([0.5, -0.5, 2.0]), rtol=1e-12)
        for fn, at in ((tessel.special.ndtri, [0.1, 0.6]), (tessel.special.log_ndtr, [-1.0, 0.5])):
            p = tessel.tensor(at, requires_grad=True)
            g, = tessel.autograd.grad(fn(p).sum(), p, create_graph=True)
            h, = tessel.autograd.grad(g.sum(), p)
            eps = 1e-6  # the second derivative against a central difference of the first
            up, = tessel.autograd.grad(fn(tessel.tensor(at) + eps).requires_grad_(False).sum() * 0 +
                                       fn(p + eps).sum(), p)
            down, = tessel.autograd.grad(fn(p - eps).sum(), p)
            np.testing.assert_allclose(h.numpy(), (up.numpy() - down.numpy()) / (2 * eps), rtol=1e-5)
    finally:
        tessel.set_default_dtype(tessel.float32)


def test_out_refuses_a_result_it_cannot_hold_and_resize_refuses_negative_sizes_as_torch():
    out = tessel.zeros(3, dtype=tessel.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        tessel.mul(tessel.tensor([0.5, 1.5, 2.7]), 1.0, out=out)  # it truncated into [0, 1, 2] silently
    assert out.tolist() == [0, 0, 0]
    wide = tessel.zeros(2, dtype=tessel.float64)
    tessel.add(tessel.ones(2), 1, out=wide)  # a float32 result widens into a float64 out, as torch's
    assert wide.tolist() == [2.0, 2.0] and wide.dtype == tessel.float64
    for shape in ((-1,), (-1, 4)):  # resize_(-1) kept all elements but the last; (-1, 4) gave [1, 4]
        with pytest.raises(RuntimeError, match=r"Trying to create tensor with negative dimension -1"):
            tessel.arange(8.0).resize_(*shape)


def test_compile_wraps_a_module_as_torchs_optimized_module():
    # torch.compile(module) returns torch._dynamo.eval_frame.OptimizedModule: `_orig_mod`, keys under `_orig_mod.`,
    # attributes read and written through. tessel returned the module itself, so `compiled._orig_mod` raised and
    # `hasattr(model, "_orig_mod")` checks (HF's unwrap) took the other branch. Expected values are torch 2.15's.
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    c = tessel.compile(m)
    assert type(c).__name__ == "OptimizedModule" and isinstance(c, tessel._dynamo.eval_frame.OptimizedModule)
    assert c._orig_mod is m and list(c.state_dict()) == ["_orig_mod.0.weight", "_orig_mod.0.bias"]
    assert [n for n, _ in c.named_modules()] == ["", "_orig_mod", "_orig_mod.0", "_orig_mod.1"]
    x = tessel.ones(1, 2)
    assert c(x).tolist() == m(x).tolist()
    c.eval()
    assert not m.training
    c.foo = 3
    assert m.foo == 3 and c.foo == 3
    assert tessel.compile(m, disable=True) is m and tessel.compile(c) is c
    f = lambda t: t + 1  # noqa: E731
    assert tessel.compile(f) is f
    from tessel._dynamo.eval_frame import OptimizedModule  # importable as torch's module path
    assert OptimizedModule is type(c)


@pytest.mark.parametrize("call, message", [
    (lambda: tessel.einsum("ij->k", tessel.ones(2, 3)),
     "einsum(): output subscript k does not appear in the equation for any input operand"),  # "substring not found"
    (lambda: tessel.randperm(-1), "Trying to create tensor with negative dimension -1: [-1]"),  # "got-1"
    (lambda: tessel.gather(tessel.ones(2, 2), 1, tessel.zeros(3, 2, dtype=tessel.int64)),  # an IndexError on dim 0
     "Size does not match at dimension 0 expected index [3, 2] to be no larger than self [2, 2] apart from dimension 1"),
])
def test_misuse_raises_torchs_runtime_error_text(call, message):
    with pytest.raises(RuntimeError) as e:
        call()
    assert str(e.value) == message

def test_python_ints_beyond_2_53_are_exact_in_int64_arithmetic():
    # the operators passed a Python int as a double: x + (2**53 + 1) added 2**53 (expected values are torch 2.15's)
    n = 2 ** 53 + 1
    x = tessel.tensor([0, 5, -7])
    assert (x + n).tolist() == [9007199254740993, 9007199254740998, 9007199254740986]
    assert (n + x).tolist() == (x - (-n)).tolist() == [9007199254740993, 9007199254740998, 9007199254740986]
    assert (n - x).tolist() == [9007199254740993, 9007199254740988, 9007199254741000]
    assert (x - n).tolist() == [-9007199254740993, -9007199254740988, -9007199254741000]
    assert (x * n).tolist() == (n * x).tolist() == [0, 45035996273704965, -63050394783186951]
    assert (x * (2 ** 61 + 1)).tolist() == [0, -6917529027641081851, 2305843009213693945]  # wraps as torch's
    assert (x * -(2 ** 60 + 7)).tolist() == [0, -5764607523034234915, 8070450532247928881]
    assert (tessel.tensor([True]) + n).tolist() == [9007199254740994]
    r = tessel.tensor([3], dtype=tessel.int32) + n
    assert r.dtype == tessel.int32 and r.tolist() == [4]


def test_masked_fill_refuses_values_its_dtype_cannot_hold_as_torch():
    # only float16 was checked: int8 masked_fill(m, 200) stored -56, float32 1e39 stored inf (torch 2.15 raises)
    m = tessel.tensor([True, False])
    for dtype, value, name in [(tessel.int8, 200, "int8_t"), (tessel.int32, 2 ** 40, "int"),
                               (tessel.uint8, 300, "uint8_t"), (tessel.float32, 1e39, "float"),
                               (tessel.bfloat16, 1e39, "c10::BFloat16"), (tessel.int64, 2 ** 63, "int64_t"),
                               (tessel.int8, float("inf"), "int8_t")]:
        with pytest.raises(RuntimeError, match="value cannot be converted to type %s without overflow" % name):
            tessel.tensor([1, 2], dtype=dtype).masked_fill(m, value)
    assert tessel.tensor([1, 2], dtype=tessel.uint8).masked_fill(m, -5).tolist() == [251, 2]  # wraps, as torch's
    assert tessel.tensor([1, 2], dtype=tessel.int8).masked_fill(m, -128).tolist() == [-128, 2]
    assert tessel.tensor([1, 2], dtype=tessel.int8).masked_fill(m, 1.5).tolist() == [1, 2]


def test_topk_returns_torchs_indices_among_ties():
    # tessel's topk kept tied positions in index order ([0, 1, 2] for zeros(6)); torch's CPU kernel runs libstdc++'s
    # partial_sort / nth_element on (value, position) pairs, and ported code (pruning masks, multinomial without
    # replacement over zero weights) sees its order. Expected lists are torch 2.15's.
    assert tessel.topk(tessel.zeros(6), 3).indices.tolist() == [3, 5, 4]
    assert tessel.topk(tessel.tensor([1., 5, 3, 5, 5]), 3).indices.tolist() == [1, 4, 3]
    x = tessel.zeros(10)
    x[3] = 1.0
    assert tessel.topk(x, 10).indices.tolist() == [3, 5, 9, 8, 7, 6, 2, 1, 0, 4]
    nans = tessel.tensor([2., float("nan"), 2., 1., float("nan"), 2.])
    assert tessel.topk(nans, 4).indices.tolist() == [1, 4, 0, 5]
    assert tessel.topk(nans, 4, largest=False).indices.tolist() == [3, 5, 0, 2]
    assert tessel.topk(tessel.tensor([0, 1, 0, 1, 0, 1, 0, 1]), 3, sorted=False).indices.tolist() == [1, 7, 5]
    y = tessel.zeros(200)
    y[[5, 50, 150]] = 1.0  # k·64 <= n: partial_sort
    assert tessel.topk(y, 3).indices.tolist() == [150, 50, 5]
    assert tessel.topk(y, 2, largest=False).indices.tolist() == [0, 1]
    w = tessel.zeros(34)
    w[3] = 1.0
    assert tessel.multinomial(w, 20, False, generator=tessel.Generator().manual_seed(0)).tolist() == \
        [3, 26, 7, 18, 19, 20, 21, 22, 23, 24, 25, 17, 27, 28, 29, 30, 31, 32, 33, 6]


def test_rms_norm_module_with_a_weight_of_another_dtype_returns_the_inputs_dtype_as_torch():
    # nn.RMSNorm raised "rms_norm: input 1 has dtype bfloat16 but x has float32" for a module cast to one dtype
    # and input of another; torch normalizes in x's compute type, multiplies by the weight promoted, rounds once.
    # Expected values printed by torch 2.15.
    x = tessel.tensor([[0.3, -1.7, 2.2, 0.05], [1.0, 2.0, -3.0, 0.5]])
    w = tessel.tensor([0.9, 1.1, 1.3, 0.7])
    expected = {
        ("bfloat16", "float32"): [[0.193359375, -1.3359375, 2.046875, 0.0250244140625],
                                  [0.4765625, 1.1640625, -2.0625, 0.185546875]],
        ("float32", "bfloat16"): [[0.19273756444454193, -1.3391070365905762, 2.04022479057312, 0.025000017136335373],
                                  [0.4760037958621979, 1.1672440767288208, -2.0613033771514893, 0.18522757291793823]],
        ("float16", "float64"): [[0.193115234375, -1.337890625, 2.044921875, 0.0250244140625],
                                 [0.476806640625, 1.166015625, -2.06640625, 0.1854248046875]],
        ("float32", "float64"): [[0.19307275116443634, -1.3372076749801636, 2.0451409816741943, 0.02502794936299324],
                                 [0.4768316149711609, 1.1655884981155396, -2.066270351409912, 0.1854345202445984]]}
    for (xd, wd), want in expected.items():
        norm = tessel.nn.RMSNorm(4)
        with tessel.no_grad():
            norm.weight.copy_(w)
        y = norm.to(getattr(tessel, wd))(x.to(getattr(tessel, xd)))
        assert y.dtype == getattr(tessel, xd) and y.detach().double().tolist() == want, (xd, wd)


def test_sdpa_refuses_masks_torch_refuses():
    # a float64 / bf16 / f16 mask with float32 q was cast, a [S] mask broadcast, a rank-5 mask widened the output,
    # a positional scale accepted: torch 2.15 raises each (its messages)
    F = tessel.nn.functional
    q, k, v = tessel.randn(2, 3, 4, 8), tessel.randn(2, 3, 6, 8), tessel.randn(2, 3, 6, 8)
    for mask, name in ((tessel.randn(4, 6).double(), "double"), (tessel.randn(4, 6).bfloat16(), "c10::BFloat16"),
                       (tessel.randn(4, 6).half(), "c10::Half")):
        with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float or to match query dtype, "
                                               "but got attn_mask.dtype: %s and  query.dtype: float instead." % name):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-1, 0\], but "
                                         r"got -2\)"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=tessel.randn(6))
    with pytest.raises(RuntimeError, match=r"output with shape \[2, 3, 4, 6\] doesn't match the broadcast shape "
                                           r"\[1, 2, 3, 4, 6\]"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=tessel.randn(1, 2, 3, 4, 6))
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, None, 0.0, False, 0.5)
    assert F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(),
                                          attn_mask=tessel.randn(4, 6)).dtype == tessel.bfloat16  # float32 mask: ok
    assert tuple(F.scaled_dot_product_attention(q, k, v, attn_mask=tessel.randn(4, 6) > 0, scale=0.5).shape) == \
        (2, 3, 4, 8)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
