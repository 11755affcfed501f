"""Custom autograd.Function, autograd.backward / grad, tensor and module hooks against torch 2.15, from the
thirty-ninth session's sweep (each expected value or message below is what torch 2.15 printed for the same script):
apply's keyword arguments and setup_context's bound inputs, save_for_backward under saved_tensors_hooks, y.grad_fn
as the ctx, vjp, mark_dirty under no_grad and with retain_grad, backward's result checks, saved_tensors in forward
and with clear_saved_tensors_on_access, backward(inputs=) retaining .grad, materialized zeros under create_graph,
post-accumulate-grad hooks that return a value, full backward (pre-)hooks' grad_output per output element, hook
handle ids and flag dicts, and always_call forward hooks that raise after forward raised.
"""
import warnings

import numpy as np
import pytest

import tessel

F = tessel.autograd.Function
nn = tessel.nn


def ones(*shape, requires_grad=False):
    return tessel.ones(*shape, requires_grad=requires_grad)


class Scale(F):
    @staticmethod
    def forward(x, k=4.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.inputs = [type(i).__name__ for i in inputs]
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


def test_setup_context_inputs_are_forwards_bound_arguments_with_defaults():
    a = ones(2, requires_grad=True)
    y = Scale.apply(a)
    assert y.grad_fn.inputs == ["Tensor", "float"]
    y.sum().backward()
    assert a.grad.tolist() == [4.0, 4.0]
    a.grad = None
    Scale.apply(a, k=3.0).sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]

    class Mul(F):
        @staticmethod
        def forward(x, y=None, k=1.0):
            return x * y * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.seen = (len(inputs), inputs[2], ctx.needs_input_grad)

        @staticmethod
        def backward(ctx, g):
            return g, g, None
    b = ones(2, requires_grad=True)
    assert Mul.apply(a, y=b).grad_fn.seen == (3, 1.0, (True, True, False))
    assert Mul.apply(y=b, x=a).grad_fn.seen == (3, 1.0, (True, True, False))
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'q'"):
        Mul.apply(a, q=1)
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        Mul.apply()


class Both(F):
    @staticmethod
    def forward(ctx, x, y=None, k=1.0):
        ctx.ng = ctx.needs_input_grad
        return x * y * k

    @staticmethod
    def backward(ctx, g):
        return g, g * 2, None


def test_tensors_passed_to_apply_by_keyword_are_inputs():
    a, b = ones(2, requires_grad=True), ones(2, requires_grad=True)
    y = Both.apply(a, y=b, k=2.0)
    assert y.grad_fn.ng == (True, True, False)
    y.sum().backward()
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [2.0, 2.0]

    class One(F):
        @staticmethod
        def forward(ctx, x, y=None):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match=r"function OneBackward returned an incorrect number of gradients "
                                           r"\(expected 2, got 1\)"):
        One.apply(a, y=b).sum().backward()
    with pytest.raises(TypeError, match=r"forward\(\) missing required argument: 'y' \(position 1\)"):
        Both.apply(a, k=3.0)
    with pytest.raises(TypeError, match=r"forward\(\) got an unexpected keyword argument 'z'"):
        Both.apply(a, z=3)
    with pytest.raises(TypeError, match=r"forward\(\) got multiple values for argument 'y'"):
        Both.apply(a, b, y=3)


class Saves(F):
    @staticmethod
    def forward(ctx, x, w):
        y = x * w
        ctx.save_for_backward(x, None, y, w)
        return y

    @staticmethod
    def backward(ctx, g):
        x, n, y, w = ctx.saved_tensors
        assert n is None
        return g * w, g * x


def test_saved_tensors_hooks_pack_a_custom_functions_saved_tensors():
    log = []

    def pack(t):
        log.append("pack")
        return ("boxed", t)

    def unpack(p):
        log.append("unpack")
        return p[1] * 10

    x, w = ones(2, requires_grad=True), tessel.full((2,), 2.0, requires_grad=True)
    with tessel.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = Saves.apply(x, w)
    assert log == ["pack"] * 3  # once each when apply ends (not the None)
    assert len(y.grad_fn.saved_tensors) == 4 and log[3:] == ["unpack"] * 3  # unpacked on every read
    y.sum().backward()
    assert log[6:] == ["unpack"] * 3
    assert x.grad.tolist() == [20.0, 20.0] and w.grad.tolist() == [10.0, 10.0]  # unpack's values
    log.clear()
    with tessel.autograd.graph.saved_tensors_hooks(pack, unpack):
        with tessel.no_grad():
            Saves.apply(x, w)
        Saves.apply(ones(2), ones(2))
    assert log == []  # no node, nothing packed
    with tessel.autograd.graph.saved_tensors_hooks(lambda t: t, lambda p: 3):
        y = Saves.apply(x, w)
    with pytest.raises(TypeError, match="Output of saved tensor unpack_hook expected to be a Tensor but got result "
                                        "of type int"):
        y.sum().backward()
    x.grad = None
    with tessel.autograd.graph.save_on_cpu():
        Saves.apply(x, x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


class Cube(F):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.foo = 42
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x ** 2


def test_custom_function_grad_fn_is_its_ctx():
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x)
    assert y.grad_fn.foo == 42 and y.grad_fn.needs_input_grad == (True,)
    assert type(y.grad_fn).__name__ == "CubeBackward"
    g = y.grad_fn.apply(ones(2))
    assert g.tolist() == [3.0, 12.0] and g.requires_grad
    y.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.grad_fn.saved_tensors


class MulInto(F):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_mark_dirty_under_no_grad_is_a_plain_in_place_write():
    a = ones(2, requires_grad=True)
    v = a._version
    with tessel.no_grad():
        out = MulInto.apply(a)
    assert (a.tolist(), a.requires_grad, a.is_leaf, a.grad_fn, a._version - v) == ([2.0, 2.0], True, True, None, 2)
    assert out.tolist() == [2.0, 2.0] and not out.requires_grad
    (a * 3).sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad has been used in an in-place "
                                           "operation.$"):  # (recording: torch's words)
        MulInto.apply(a)


def test_retain_grad_follows_mark_dirtys_input_to_its_new_history():
    a = ones(2, requires_grad=True)
    x = a * 1
    x.retain_grad()
    MulInto.apply(x)
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0] and a.grad.tolist() == [6.0, 6.0]
    a = ones(4, requires_grad=True)
    b = a * 1
    b.retain_grad()
    MulInto.apply(b[1:3])
    (b * 3).sum().backward()
    assert b.grad.tolist() == [3.0] * 4 and a.grad.tolist() == [3.0, 6.0, 6.0, 3.0]


def test_vjp_instead_of_backward_and_never_both():
    class Vjp(F):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def vjp(ctx, g):
            return g * 7
    x = ones(2, requires_grad=True)
    Vjp.apply(x).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0]

    class Two(Vjp):
        @staticmethod
        def backward(ctx, g):
            return g * 2
    with pytest.raises(RuntimeError, match="Implementing both 'backward' and 'vjp' for a custom Function is not "
                                           "allowed. You should only implement one of them."):
        Two.apply(x).sum().backward()


class Pair(F):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, g):
        return g, ones(5)


def test_a_gradient_for_an_input_that_needs_none_is_ignored_whatever_its_shape():
    x = ones(2, requires_grad=True)
    Pair.apply(x, ones(2)).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_a_gradient_for_a_non_tensor_argument_is_refused():
    with pytest.raises(RuntimeError, match="function PairBackward returned a gradient different than None at "
                                           "position 2, but the corresponding forward input was not a Variable"):
        Pair.apply(ones(2, requires_grad=True), 2.0).sum().backward()


class Returns(F):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return ctx.value


def test_a_gradient_that_is_not_a_tensor_is_refused():
    x = ones(2, requires_grad=True)
    for value, name in ((3.0, "float"), (np.ones(2, np.float32), "numpy.ndarray"), ([1.0], "list")):
        y = Returns.apply(x)
        y.grad_fn.value = value  # (torch's grad_fn is the ctx: attributes set on it are the ctx's)
        with pytest.raises(RuntimeError, match=r"^expected Variable or None \(got %s\)$" % name):
            y.sum().backward()


def test_save_for_backward_names_the_argument_that_is_not_a_tensor():
    class SaveInt(F):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x * 2
    with pytest.raises(TypeError, match="save_for_backward can only save variables, but argument 1 is of type int"):
        SaveInt.apply(ones(2, requires_grad=True))


def test_saved_tensors_are_empty_in_forward_and_readable_once_when_cleared_on_access():
    seen = []

    class Peek(F):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            seen.append(ctx.saved_tensors)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            if ctx.clear_once:
                try:
                    ctx.saved_tensors
                except RuntimeError as e:
                    seen.append(str(e))
            return g * x

    class Once(Peek):
        clear_saved_tensors_on_access = True

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2
    assert F.clear_saved_tensors_on_access is False
    x = ones(2, requires_grad=True)
    y = Peek.apply(x)
    y.grad_fn.clear_once = False
    y.sum().backward()
    assert seen == [()] and x.grad.tolist() == [1.0, 1.0]
    y = Once.apply(x)
    y.grad_fn.clear_once = True
    y.sum().backward(retain_graph=True)
    message = ("saved_tensors can only be accessed once when clear_saved_tensors_on_access=True is set on the "
               "autograd.Function. Either access saved_tensors only once, or set clear_saved_tensors_on_access=False.")
    assert seen == [(), message] and x.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="saved_tensors can only be accessed once"):
        y.sum().backward()

    class PeekOnce(Peek):
        clear_saved_tensors_on_access = True
    with pytest.raises(RuntimeError, match="saved_tensors can only be accessed once"):
        PeekOnce.apply(x).sum().backward()  # (reading them in forward was the one access)


def test_backward_inputs_turn_on_retains_grad():
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (y * 3).sum().backward(inputs=[y], retain_graph=True)
    assert y.grad.tolist() == [3.0, 3.0] and y.retains_grad and x.grad is None
    (y * 3).sum().backward()
    assert y.grad.tolist() == [6.0, 6.0] and x.grad.tolist() == [6.0, 6.0]
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        (x * 3).sum().backward(inputs=[x, ones(2)])


def test_materialized_gradients_require_grad_under_create_graph():
    x, z = ones(2, requires_grad=True), ones(3, requires_grad=True)
    g = tessel.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True, create_graph=True)
    assert [t.requires_grad for t in g] == [False, True] and g[1].tolist() == [0.0] * 3 and g[1].is_leaf
    g = tessel.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert [t.requires_grad for t in g] == [False, False]


def test_a_post_accumulate_grad_hook_must_return_none():
    w = ones(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda t: t.grad * 0)
    with pytest.raises(RuntimeError, match="Tensor post accumulate grad hooks should return None."):
        (w * 3).sum().backward()


class OutNone(nn.Module):
    def forward(self, x):
        return x * 2, None


class Mixed(nn.Module):
    def forward(self, x):
        return 5, x * 2, None, x * 3


def test_full_backward_hooks_see_one_grad_output_per_output_element():
    m, log = OutNone(), []
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", [g is None for g in go])))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("h", len(gi), [g is None for g in go])))
    x = ones(2, requires_grad=True)
    y, n = m(x)
    y.sum().backward()
    assert n is None and log == [("pre", [False, True]), ("h", 1, [False, True])]
    m = OutNone()
    m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 5, None))
    x = ones(2, requires_grad=True)
    m(x)[0].sum().backward()
    assert x.grad.tolist() == [10.0, 10.0]
    m, log = Mixed(), []
    m.register_full_backward_pre_hook(lambda mod, go: (log.append([g is None for g in go]),
                                                       (None, go[1] * 5, None, go[3] * 7))[1])
    x = ones(1, requires_grad=True)
    out = m(x)
    (out[1] + out[3]).sum().backward()
    assert log == [[True, False, True, False]] and x.grad.tolist() == [31.0]
    m = Mixed()
    m.register_full_backward_pre_hook(lambda mod, go: (go[1], go[3]))
    out = m(ones(1, requires_grad=True))
    with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of grad_output, got 2, but "
                                           "expected 4"):
        (out[1] + out[3]).sum().backward()


def test_hook_handles_have_ids_and_modules_torchs_flag_dicts():
    m = nn.Identity()
    f = lambda *a: None  # noqa: E731
    h = m.register_forward_hook(f, with_kwargs=True, always_call=True)
    plain = m.register_forward_hook(f)
    pre = m.register_forward_pre_hook(f, with_kwargs=True)
    bw = m.register_full_backward_hook(f)
    assert type(h.id) is int and h.id in m._forward_hooks and bw.id in m._backward_hooks
    assert dict(m._forward_hooks_with_kwargs) == {h.id: True} and dict(m._forward_hooks_always_called) == {h.id: True}
    assert plain.id not in m._forward_hooks_with_kwargs and dict(m._forward_pre_hooks_with_kwargs) == {pre.id: True}
    h.remove()
    assert len(m._forward_hooks_with_kwargs) == 0 and len(m._forward_hooks_always_called) == 0


class Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def hook_raising(mod, args, out):
    raise KeyError("hook")


def test_an_always_call_hook_raising_after_forward_raised_is_a_warning():
    m = Boom()
    m.register_forward_hook(hook_raising, always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="boom"):
            m(ones(1))
    assert [str(w.message) for w in caught] == [
        "module forward hook with ``always_call=True`` raised an exception that was silenced as another error was "
        "raised in forward: 'hook'"]
    handle = tessel.nn.modules.module.register_module_forward_hook(hook_raising, always_call=True)
    try:
        with pytest.warns(UserWarning, match="^global module forward hook with ``always_call=True`` raised an "
                                             "exception that was silenced as another error was raised in forward: "
                                             "'hook'$"):
            with pytest.raises(ValueError, match="boom"):
                Boom()(ones(1))
    finally:
        handle.remove()


def test_an_always_call_hook_that_ran_does_not_run_again_when_a_later_hook_raises():
    log = []
    m = nn.Identity()
    m.register_forward_hook(lambda mod, a, o: log.append(o is None), always_call=True)
    m.register_forward_hook(hook_raising)
    with pytest.raises(KeyError, match="hook"):
        m(ones(1))
    assert log == [False]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
