"""Autograd modes and small ops as torch 2.15's, found by a 338-case side-by-side sweep: set_grad_enabled as a
decorator (it raised when called and left grad mode off for the whole process), sign's zero gradient, and torch's
refusal of an in-place write into a view made under no_grad."""
import sys

import pytest

import tessel


def test_set_grad_enabled_as_a_decorator_holds_inside_the_function_only():
    @tessel.set_grad_enabled(False)
    def double(a):
        return a * 2, tessel.is_grad_enabled()

    assert tessel.is_grad_enabled()  # the decorator's construction does not leave the mode off
    x = tessel.ones(2, requires_grad=True)
    y, inside = double(x)
    assert not inside and not y.requires_grad and tessel.is_grad_enabled()
    with tessel.set_grad_enabled(False):
        assert not tessel.is_grad_enabled()
    assert tessel.is_grad_enabled()
    tessel.set_grad_enabled(False)  # as a function: at once, until changed
    try:
        assert not tessel.is_grad_enabled()
    finally:
        tessel.set_grad_enabled(True)


def test_sign_is_differentiable_with_a_zero_gradient():
    x = tessel.tensor([1.0, -2.0, 0.0, float("inf")], requires_grad=True)
    y = x.sign()
    assert y.tolist() == [1.0, -1.0, 0.0, 1.0] and y.requires_grad
    y.sum().backward()  # (it raised: element 0 of tensors does not require grad)
    assert x.grad.tolist() == [0.0] * 4


def test_an_in_place_write_into_a_view_made_under_no_grad_is_refused_in_grad_mode():
    msg = "A view was created in no_grad mode and is being modified inplace with grad mode enabled"
    x = tessel.tensor([1.0, 2.0, -3.0], requires_grad=True)
    y = x * 1
    with tessel.no_grad():
        v = y[:2]
    with pytest.raises(RuntimeError, match=msg):
        v.mul_(x[:2])  # (it dropped the path through y's old value: x.grad [1, 2, 1], not [2, 4, 1])
    with tessel.no_grad():
        w = x[:2]
    for write in (lambda: w.add_(1.0), lambda: w.__setitem__(0, 5.0), lambda: w.zero_()):
        with pytest.raises(RuntimeError, match=msg):
            write()  # (a leaf that requires grad was changed unseen)
    assert x.tolist() == [1.0, 2.0, -3.0]
    with tessel.no_grad():
        w.mul_(2)  # view and write both under no_grad: allowed, as torch
    d = y.detach()[:2]
    d.mul_(2)  # a view of a detached tensor: allowed, as torch
    assert x.tolist() == [2.0, 4.0, -3.0] and y.tolist() == [2.0, 4.0, -3.0]


def test_grad_fn_is_one_object_per_node():
    x = tessel.ones(2, requires_grad=True)
    y = (x * 2 + x).sum()
    assert y.grad_fn is y.grad_fn  # torchviz tells nodes apart by id() (a fresh view per access drew duplicates)
    seen = set()

    def walk(fn):
        if fn is None or id(fn) in seen:
            return
        seen.add(id(fn))
        for n, _ in fn.next_functions:
            walk(n)
    walk(y.grad_fn)
    assert len(seen) == 4  # SumBackward0, AddBackward0, MulBackward0, AccumulateGrad: x's node reached twice


def test_retain_grad_follows_the_tensor_through_in_place_writes():
    x = tessel.tensor([1.0, 2.0, -3.0], dtype=tessel.float64, requires_grad=True)
    y = x * 1
    y.retain_grad()
    y.mul_(2)
    (y * y).sum().backward()
    assert y.retains_grad and y.grad.tolist() == [4.0, 8.0, -12.0]  # (it was None: the retain was lost)
    x = tessel.ones(2, 3, dtype=tessel.float64, requires_grad=True)
    y = x * 1
    y.retain_grad()
    y[0].mul_(3)  # through a view: y's new version's gradient, not the old one's (row 0 read [6, 6, 6])
    (y * 2).sum().backward()
    assert y.grad.tolist() == [[2.0] * 3] * 2 and x.grad.tolist() == [[6.0] * 3, [2.0] * 3]


def test_node_hooks_run_around_the_node_and_on_a_parameters_accumulator_after_its_grad_is_set():
    # torch's grad_fn.register_prehook / register_hook were missing: Megatron / DeepSpeed / apex DDP hang their
    # gradient-ready callback on p.expand_as(p).grad_fn.next_functions[0][0] (p's AccumulateGrad node)
    p = tessel.tensor([1.0, 2.0], requires_grad=True)
    acc = p.expand_as(p).grad_fn.next_functions[0][0]
    seen = []
    handle = acc.register_hook(lambda grad_inputs, grad_outputs: seen.append(
        (len(grad_inputs), grad_outputs[0].tolist(), p.grad.tolist())))
    (p * 2).sum().backward()
    (p * 3).sum().backward()
    assert seen == [(0, [2.0, 2.0], [2.0, 2.0]), (0, [3.0, 3.0], [5.0, 5.0])]
    handle.remove()
    (p * 2).sum().backward()
    assert len(seen) == 2 and p.grad.tolist() == [7.0, 7.0]

    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    w = tessel.tensor([3.0, -1.0], requires_grad=True)
    y = x * w
    assert isinstance(y.grad_fn, tessel.autograd.graph.Node) and y.output_nr == 0
    order = []
    y.grad_fn.register_prehook(lambda go: order.append("pre") or (go[0] * 10,))
    # the post hook sees what the node computed (d/dx = 10·w, d/dw = 10·x) and replaces x's part
    y.grad_fn.register_hook(lambda gi, go: order.append(("post", gi[0].tolist(), gi[1].tolist(), go[0].tolist()))
                            or (gi[0] + 1, gi[1]))
    y.sum().backward()
    assert order == ["pre", ("post", [30.0, -10.0], [10.0, 20.0], [10.0, 10.0])]
    assert x.grad.tolist() == [31.0, -9.0] and w.grad.tolist() == [10.0, 20.0]
    z = x * w
    z.grad_fn.register_hook(lambda gi, go: (gi[0],))
    with pytest.raises(RuntimeError, match=r"has returned an incorrect number of values \(got 1, but expected 2\)"):
        z.sum().backward()
    z = x * w
    z.grad_fn.register_prehook(lambda go: go[0])
    with pytest.raises(TypeError, match="expected tuple, but hook returned 'Tensor'"):
        z.sum().backward()


def test_retain_grad_on_a_tensor_that_needs_no_gradient_is_torchs_error():
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        tessel.ones(2).retain_grad()  # (accepted before, and .grad then stayed None silently)
    y = tessel.ones(2, requires_grad=True) * 2
    y.retain_grad()
    y.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0]

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
