"""Module forward hooks as torch.nn.Module's: a hook without with_kwargs sees forward's positional arguments as the
call passed them (numbers and None included, not only the tensors) and may rewrite any of them; the global forward
hooks (torch.nn.modules.module.register_module_forward_hook) run before the module's own; a full backward hook's
grad_input has one entry per positional argument, zeros for an input whose outputs went unused; torch's global
backward hooks, register_multi_grad_hook and queue_callback (each was missing). Expected values were read off torch
2.15 running the same code (a 2x2 Linear with weight [[1, 2], [3, 4]] and no bias, x = ones: the Linear gives [3,
7])."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.nn.modules import module as module_globals


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(2, 2, bias=False)
        with tessel.no_grad():
            self.l.weight.copy_(tessel.tensor([[1.0, 2.0], [3.0, 4.0]]))

    def forward(self, x, scale, flag=None):
        return self.l(x) * scale


def test_forward_hooks_see_every_positional_argument_as_torch():
    m, x, seen = Scaled(), tessel.ones(1, 2), []
    m.register_forward_pre_hook(lambda mod, args: seen.append(("pre", args[1:])))
    m.register_forward_hook(lambda mod, args, out: seen.append(("post", args[1:])))
    m(x, 2.0)
    m(x, 3.0, None)
    m(x, scale=4.0)  # keyword arguments are not in args, as torch
    assert seen == [("pre", (2.0,)), ("post", (2.0,)), ("pre", (3.0, None)), ("post", (3.0, None)),
                    ("pre", ()), ("post", ())]


def test_a_pre_hook_rewrites_non_tensor_arguments_and_the_post_hook_sees_the_rewrite():
    m, x, seen = Scaled(), tessel.ones(1, 2), []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0 + 2, args[1] * 10))
    h2 = m.register_forward_hook(lambda mod, args, out: seen.append((args[0].tolist(), args[1])))
    np.testing.assert_allclose(m(x, 1.0).numpy(), [[60.0, 140.0]])  # l(2, 2) = [6, 14], times 10
    assert seen == [([[2.0, 2.0]], 10.0)]
    h1.remove()
    h2.remove()
    # one value (not a tuple) replaces the whole argument tuple, as torch: forward then misses `scale`
    with m.register_forward_pre_hook(lambda mod, args: args[0]):
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'scale'"):
            m(x, 2.0)
    # a C++ layer called from Python: one tensor returned is its new input
    with m.l.register_forward_pre_hook(lambda mod, args: args[0] * 2):
        np.testing.assert_allclose(m(x, 1.0).numpy(), [[6.0, 14.0]])
    np.testing.assert_allclose(m(x, 1.0).numpy(), [[3.0, 7.0]])


def test_global_forward_hooks_run_before_the_modules_own_as_torch():
    m, x, order = Scaled(), tessel.ones(1, 2), []
    g1 = module_globals.register_module_forward_hook(lambda mod, a, o: order.append("global " + type(mod).__name__))
    m.l.register_forward_hook(lambda mod, a, o: order.append("local"))
    g2 = module_globals.register_module_forward_pre_hook(lambda mod, a: order.append("gpre " + type(mod).__name__))
    m.l.register_forward_pre_hook(lambda mod, a: order.append("lpre"))
    m.l(x)
    assert order == ["gpre Linear", "lpre", "global Linear", "local"]
    g1.remove()
    g2.remove()


def test_a_global_hooks_output_reaches_the_modules_hook_and_the_caller():
    m, x, seen = Scaled(), tessel.ones(1, 2), []
    g = module_globals.register_module_forward_hook(lambda mod, a, o: o + 100 if isinstance(mod, Scaled) else None)
    h = m.register_forward_hook(lambda mod, a, o: seen.append(o.tolist()))
    np.testing.assert_allclose(m(x, 2.0).numpy(), [[106.0, 114.0]])
    assert seen == [[[106.0, 114.0]]]
    g.remove()
    h.remove()
    # the module's hook replaces the output after the global one saw forward's
    g = module_globals.register_module_forward_hook(lambda mod, a, o: seen.append((type(mod).__name__, o.tolist())))
    h = m.register_forward_hook(lambda mod, a, o: o * 0)
    np.testing.assert_allclose(m(x, 2.0).numpy(), [[0.0, 0.0]])
    assert seen[1:] == [("Linear", [[3.0, 7.0]]), ("Scaled", [[6.0, 14.0]])]
    g.remove()
    h.remove()


def test_always_call_global_hooks_run_once_when_forward_raises():
    class Bad(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    bad, seen = Bad(), []
    with module_globals.register_module_forward_hook(lambda mod, a, o: seen.append(o), always_call=True):
        bad.register_forward_hook(lambda mod, a, o: seen.append("local"))
        with pytest.raises(ValueError, match="boom"):
            bad(tessel.ones(1))
    assert seen == [None]


def test_tuple_outputs_with_non_tensors_reach_hooks_whole():
    class Three(nn.Module):
        def forward(self, x, k):
            return x * k, None, k

    t, seen = Three(), []
    t.register_forward_hook(lambda mod, a, o: seen.append((type(o).__name__, len(o), o[1], o[2], a[1])))
    assert t(tessel.ones(1), 3)[2] == 3
    assert seen == [("tuple", 3, None, 3, 3)]


def test_full_backward_hooks_see_grad_input_by_position_as_torch():
    class Mix(nn.Module):
        def forward(self, x, scale, y):
            return x * scale + y * 2

    m, seen = Mix(), []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append([None if g is None else g.tolist() for g in gin]))
    x, y = tessel.ones(2, requires_grad=True), tessel.ones(2, requires_grad=True)
    m(x, 3.0, y).sum().backward()
    assert seen == [[[3.0, 3.0], None, [2.0, 2.0]]]  # torch 2.15: None for the number
    # a replacement has one entry per positional argument too
    with m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 10, None, gin[2])):
        x.grad = y.grad = None
        m(x, 3.0, y).sum().backward()
    assert x.grad.tolist() == [30.0, 30.0] and y.grad.tolist() == [2.0, 2.0]
    with m.register_full_backward_hook(lambda mod, gin, gout: (gin[0], gin[2])):
        with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 3"):
            m(x, 3.0, y).sum().backward()


def test_global_backward_hooks_run_before_the_modules_own_and_may_replace_grad_input():
    # torch 2.15's event list for the same code (a Sequential of Linear, Tanh, Linear with a hook of its own on
    # the last Linear)
    tessel.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))
    log = []
    post = module_globals.register_module_full_backward_hook(
        lambda mod, gi, go: log.append(("post", type(mod).__name__, [None if g is None else tuple(g.shape)
                                                                      for g in gi])))
    pre = module_globals.register_module_full_backward_pre_hook(lambda mod, go: log.append(("pre", type(mod).__name__)))
    m[2].register_full_backward_hook(lambda mod, gi, go: log.append(("own", type(mod).__name__)))
    x = tessel.ones(2, 3, requires_grad=True)
    m(x).sum().backward()
    assert log == [("pre", "Sequential"), ("pre", "Linear"), ("post", "Linear", [(2, 3)]), ("own", "Linear"),
                   ("pre", "Tanh"), ("post", "Tanh", [(2, 3)]), ("pre", "Linear"), ("post", "Linear", [(2, 3)]),
                   ("post", "Sequential", [(2, 3)])]
    post.remove()
    pre.remove()
    log.clear()
    m(x).sum().backward()
    assert log == [("own", "Linear")]
    zero = module_globals.register_module_backward_hook(
        lambda mod, gi, go: tuple(g * 0 for g in gi) if isinstance(mod, nn.Tanh) else None)
    x.grad = None
    m(x).sum().backward()
    zero.remove()
    assert float(x.grad.abs().sum()) == 0.0


def test_multi_grad_hook_and_queue_callback_as_torchs():
    graph = tessel.autograd.graph
    a, b = tessel.ones(2, 3, requires_grad=True), (tessel.ones(2, 3) * 2).requires_grad_()
    c, d = a * b, a * b
    got = []
    handle = graph.register_multi_grad_hook((a, b, c, d), lambda grads: got.append([g is not None for g in grads]))
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,), retain_graph=True)
    (c.sum() + d.sum()).backward(retain_graph=True)
    handle.remove()
    c.sum().backward(retain_graph=True)
    assert got == [[True, True, True, False], [True, False, True, False], [True, True, True, True]]  # torch's
    first = []
    handle = graph.register_multi_grad_hook((a, b), lambda g: first.append(g.shape), mode="any")
    c.sum().backward(retain_graph=True)
    c.sum().backward(retain_graph=True)
    assert len(first) == 2  # once per pass
    order = []

    def hook(g):
        tessel.autograd.Variable._execution_engine.queue_callback(lambda: order.append("callback"))
        order.append("hook")
    y = a * 3
    y.register_hook(hook)
    y.sum().backward()
    order.append("after")
    assert order == ["hook", "callback", "after"]
    with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward pass"):
        graph.queue_callback(lambda: None)
    with pytest.raises(ValueError, match="Expects mode to be one of"):
        graph.register_multi_grad_hook((a,), print, mode="some")


def test_a_full_backward_hook_sees_zeros_for_inputs_whose_outputs_went_unused():
    # torch's BackwardHookFunction materializes them: grad_input had None there, and the parameter behind the
    # unused input kept .grad None where torch's gets zeros (what its optimizer then steps)
    class Two(nn.Module):
        def forward(self, a, b):
            return a * 2, b * 3

    log = []
    m = Two()
    m.register_full_backward_hook(lambda mod, gi, go: log.append([None if g is None else g.tolist() for g in gi]))
    p = nn.Parameter(tessel.ones(2))
    a = tessel.ones(2, requires_grad=True)
    y1, _ = m(a, p * 1)
    y1.sum().backward()
    assert log == [[[2.0, 2.0], [0.0, 0.0]]] and p.grad.tolist() == [0.0, 0.0]
    y1, _ = m(a, tessel.ones(2))  # an input that does not require grad: zeros too (torch's)
    y1.sum().backward()
    assert log[1] == [[2.0, 2.0], [0.0, 0.0]]
    # the output side is not materialized (torch's pre-hook sees None for an unused output)
    seen = []
    m2 = Two()
    m2.register_full_backward_pre_hook(lambda mod, go: seen.append([g is None for g in go]))
    y1, _ = m2(a, p * 1)
    y1.sum().backward()
    assert seen == [[False, True]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
