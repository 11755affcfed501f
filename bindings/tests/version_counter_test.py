"""Tensor._version as torch 2.15 counts it, and Tensor.data's own counter. Expected values are torch 2.15's
printed results for the same lines: factories and op outputs start at 0 (tessel fills them by counted in-place
writes and resets fresh ones), each in-place write counts one through any view, the in-place shape methods count
one (detach_ none), and p.data is the same memory under a counter of its own, so old-style updates through it
between forward and backward are not "modified by an inplace operation"."""
import numpy as np
import pytest

import tessel
import tessel.nn as nn


def test_factories_and_op_outputs_start_at_version_zero():
    x = tessel.randn(3, 4)
    made = {
        "zeros": tessel.zeros(3), "ones": tessel.ones(3, dtype=tessel.bool), "full": tessel.full((3,), 2.0),
        "randn": x, "rand": tessel.rand(3), "randint": tessel.randint(0, 5, (3,)), "arange": tessel.arange(5),
        "arange float": tessel.arange(0, 1, 0.25), "linspace": tessel.linspace(0, 1, 5), "eye": tessel.eye(3),
        "tensor": tessel.tensor([1.0, 2.0]), "from_numpy": tessel.from_numpy(np.ones(3)),
        "zeros_like": tessel.zeros_like(x), "full_like": tessel.full_like(x, 3), "randn_like": tessel.randn_like(x),
        "clone": x.clone(), "to float64": x.to(tessel.float64), "contiguous": x.t().contiguous(),
        "cat": tessel.cat([x, x]), "new_full": x.new_full((2,), 1.0), "scalar_tensor": tessel.scalar_tensor(1.0),
        "bernoulli": tessel.bernoulli(tessel.full((3,), 0.5)), "view of a fresh tensor": x.view(12),
        "detach": x.detach(),
    }
    assert {name: t._version for name, t in made.items() if t._version != 0} == {}


def test_each_in_place_write_counts_one_through_any_view():
    x, y = tessel.zeros(4), tessel.ones(4)
    steps = [lambda: x.add_(1), lambda: x.mul_(2), lambda: x.__setitem__(0, 5.0), lambda: x.zero_(),
             lambda: x.fill_(2), lambda: x.copy_(y), lambda: x.clamp_(0, 1), lambda: x.normal_(),
             lambda: x.masked_fill_(x > 0.5, 0.0), lambda: x.exp_(), lambda: nn.init.zeros_(x),
             lambda: x[1:].add_(1), lambda: x.relu_(), lambda: x.addcmul_(y, y), lambda: x.lerp_(y, 0.3),
             lambda: x.detach().add_(1), lambda: x.index_fill_(0, tessel.tensor([1]), 3.0)]
    for i, step in enumerate(steps):
        step()
        assert x._version == i + 1, i
    with tessel.no_grad():
        w = tessel.ones(3, requires_grad=True)
        w.add_(1)
    assert w._version == 1


def test_in_place_shape_methods_count_one_and_detach_none():
    counts = {"t_": lambda x: x.t_(), "unsqueeze_": lambda x: x.unsqueeze_(0),
              "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(), "transpose_": lambda x: x.transpose_(0, 1),
              "swapaxes_": lambda x: x.swapaxes_(0, 1), "resize_": lambda x: x.resize_(4),
              "as_strided_": lambda x: x.as_strided_((2, 2), (1, 2)), "detach_": lambda x: x.detach_()}
    seen = {}
    for name, f in counts.items():
        x = tessel.arange(4.0).reshape(2, 2).clone()
        x.add_(0)  # from 1, so a method that reset the count would show
        assert f(x) is x
        seen[name] = x._version
    assert seen == {"t_": 2, "unsqueeze_": 2, "squeeze_": 3, "transpose_": 2, "swapaxes_": 2, "resize_": 2,
                    "as_strided_": 2, "detach_": 1}
    x = tessel.arange(4.0).reshape(2, 2)
    assert x.as_strided_((2, 2), (1, 2)).tolist() == [[0.0, 2.0], [1.0, 3.0]]


def test_data_is_the_same_memory_under_a_counter_of_its_own():
    w = tessel.ones(3, requires_grad=True)
    y = (w * w).sum()  # saves w twice
    d = w.data
    d.mul_(2)  # torch: not a modification autograd sees; backward reads the new values
    assert w._version == 0 and d._version == 1 and w.tolist() == [2.0, 2.0, 2.0]
    assert not d.requires_grad and d.data_ptr() == w.data_ptr()
    y.backward()
    assert w.grad.tolist() == [4.0, 4.0, 4.0]
    y = (w * w).sum()
    with tessel.no_grad():
        w.mul_(2)  # through w itself: counted and caught, as before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    lin = nn.Linear(2, 2)
    out = lin(tessel.ones(1, 2)).sum()
    for p in lin.parameters():
        p.data.add_(-0.1 * tessel.ones_like(p))  # an old-style SGD step between forward and backward
    out.backward()
    assert lin.weight.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]] and lin.bias.grad.tolist() == [1.0, 1.0]


def test_lerp_of_integer_tensors_is_refused_as_torch():
    a, b = tessel.tensor([1, 2, 3]), tessel.tensor([4, 5, 6])
    with pytest.raises(NotImplementedError, match="\"lerp_kernel_scalar\" not implemented for 'Long'"):
        a.lerp_(b, 0.5)
    with pytest.raises(NotImplementedError, match="\"lerp_kernel_tensor\" not implemented for 'Long'"):
        tessel.lerp(a, b, tessel.tensor([1, 1, 1]))
    assert a.tolist() == [1, 2, 3]
