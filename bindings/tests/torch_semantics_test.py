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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
