"""Autograd modes and small ops as torch 2.15's, found by a 338-case side-by-side sweep: set_grad_enabled as a
decorator (it raised when called and left grad mode off for the whole process) and sign's zero gradient."""
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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
