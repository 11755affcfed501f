"""Objects that torch frees and tessel kept (a read-only leak sweep against torch 2.15, /tmp/sweep_leaks in the
thirty-third session): a custom autograd.Function's outputs, storage and ctx outlived every call (its backward
closure, held by the graph node the outputs point at, held the outputs); a removed tensor hook stayed in the C++
list as a pass-through, run on every backward (20,000 register / remove pairs made one backward 300x slower); and a
removed module hook left an entry in the module's dict."""
import gc
import weakref

import tessel
from tessel import autograd, nn


class Double(autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class SavesOutput(autograd.Function):
    @staticmethod
    def forward(ctx, a):
        out = a.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class ReluInPlace(autograd.Function):  # a dirty input that is also saved
    @staticmethod
    def forward(ctx, a):
        ctx.mark_dirty(a)
        a.clamp_(min=0)
        ctx.save_for_backward(a)
        return a

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (out > 0)


class ScaleInPlace(autograd.Function):  # a dirty input becomes the output
    @staticmethod
    def forward(ctx, a):
        ctx.mark_dirty(a)
        return a.mul_(3)

    @staticmethod
    def backward(ctx, g):
        return g * 3


def _freed(make):
    out = make()
    ref = weakref.ref(out)
    del out
    gc.collect()
    return ref() is None


def test_custom_function_outputs_die_with_their_last_handle():
    w = tessel.randn(8, 4, requires_grad=True)
    assert _freed(lambda: Double.apply(w))
    assert _freed(lambda: SavesOutput.apply(w))
    assert _freed(lambda: ScaleInPlace.apply(w.clone()))
    assert _freed(lambda: ReluInPlace.apply(w.clone()))
    x = tessel.tensor([-1.0, 2.0, -3.0, 4.0], requires_grad=True)
    ReluInPlace.apply(x.clone()).sum().backward()  # (raised "saved tensor 0 ... is at version 2", as torch does not)
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 1.0]
    out = Double.apply(w)
    out.sum().backward()
    assert w.grad.tolist() == [[2.0] * 4] * 8  # (the gradient itself is unchanged)
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


def _growth(step, n=300):
    for _ in range(20):
        step()
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(n):
        step()
    gc.collect()
    return len(gc.get_objects()) - before


def test_calls_of_a_custom_function_do_not_accumulate_objects():
    w = tessel.randn(4, requires_grad=True)

    def step():
        Double.apply(w).sum().backward()
        w.grad = None
    assert _growth(step) < 30  # was 17 per call


def test_a_removed_tensor_hook_is_gone_from_the_graph():
    w = tessel.randn(4, requires_grad=True)
    calls = []
    assert _growth(lambda: w.register_hook(lambda g: calls.append(1)).remove(), n=2000) < 30  # was 4 per pair
    assert _growth(lambda: w.register_post_accumulate_grad_hook(lambda p: calls.append(2)).remove(), n=2000) < 30
    (w * 2).sum().backward()
    assert calls == []

    class Probe:  # the user's hook object dies with its removal
        def __call__(self, g):
            calls.append(3)
    probe = Probe()
    ref = weakref.ref(probe)
    handle = w.register_hook(probe)
    del probe
    handle.remove()
    handle.remove()  # a second remove is a no-op, as torch's
    gc.collect()
    assert ref() is None


def test_a_hook_that_removes_itself_runs_once_and_others_still_run():
    w = tessel.ones(3, requires_grad=True)
    seen = []
    handles = []

    def once(g):
        seen.append("once")
        handles[0].remove()
        return g * 10
    handles.append(w.register_hook(once))
    w.register_hook(lambda g: seen.append("always"))
    for _ in range(2):
        w.grad = None
        (w * 1).sum().backward()
    assert seen == ["once", "always", "always"]
    assert w.grad.tolist() == [1.0, 1.0, 1.0]
    y = w * 2  # a non-leaf's hook is removed from its graph node
    h = y.register_hook(lambda g: g * 100)
    h.remove()
    w.grad = None
    y.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


def test_removed_module_hooks_leave_nothing_behind():
    m = nn.Linear(4, 4)
    assert _growth(lambda: m.register_forward_hook(lambda *a: None).remove(), n=2000) < 30  # was 1 per pair
    assert not m.__dict__.get("_tessel_hook_regs")


def test_an_array_from_numpy_keeps_its_bytes_after_the_tensor_takes_others():
    # The array's base was the tensor: x.set_(y) or x.data = y gave x other bytes and freed the old ones, so the
    # array read and wrote whatever tensor the allocator put there next (a write into `a` landed in `b`).
    for rebind in (lambda x: x.set_(tessel.zeros(10)), lambda x: setattr(x, "data", tessel.zeros(3))):
        x = tessel.arange(100000.0)
        a = x.numpy()
        rebind(x)
        gc.collect()
        b = tessel.full((100000,), 9.0)
        assert a[:3].tolist() == [0.0, 1.0, 2.0] and a[-1] == 99999.0
        a[:] = 12345.0
        assert b[:3].tolist() == [9.0, 9.0, 9.0] and x.tolist()[:3] == [0.0, 0.0, 0.0]


def test_a_graph_of_a_hundred_thousand_python_ops_is_freed_without_a_crash():
    # ~Node released its inputs' nodes recursively: the chain overflowed the main thread's stack (SIGSEGV) when the
    # last tensor went, after a backward or without one.
    for backward in (False, True):
        x = tessel.ones(1, requires_grad=True)
        y = x
        for _ in range(100000):
            y = y + 1.0
        assert y.item() == 100001.0
        if backward:
            y.sum().backward()
            assert x.grad.tolist() == [1.0]
        del y


def test_hooks_returning_something_else_than_the_gradient_raise_torchs_errors():
    x = tessel.ones(2, requires_grad=True)
    x.register_hook(lambda g: 5)
    try:
        x.sum().backward()
        raise AssertionError("no error")
    except TypeError as e:  # pybind11's "Unable to cast Python instance to C++ type" before
        assert str(e) == "expected Tensor, but hook returned 'int'"
    x = tessel.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: tessel.ones(3))
    try:
        y.sum().backward()
        raise AssertionError("no error")
    except RuntimeError as e:  # an internal error ("this is a tessel bug") before
        assert "a tensor hook has changed the size of value: the gradient is [2] float32" in str(e), str(e)
        assert "the hook returned [3] float32" in str(e)


def test_a_tensor_hook_handle_is_a_context_manager_with_an_id_as_torchs():
    x = tessel.ones(2, requires_grad=True)
    seen = []
    with x.register_hook(lambda g: seen.append(g.tolist())) as handle:  # TypeError before: no __enter__
        (x * 2).sum().backward()
    (x * 2).sum().backward()  # removed on exit
    assert seen == [[2.0, 2.0]] and isinstance(handle.id, int)
    assert x.register_hook(lambda g: None).id != x.register_hook(lambda g: None).id
