"""A Tensor (or Parameter) made by a bare `__new__`, before its `__init__` has run ([Note: bare Tensor.__new__] in
bindings/tensor_py.cc): every method and property either works or raises a Python exception. Twelve of them
(detach, data, tolist, set_, _base, __deepcopy__ / __reduce_ex__ of a Parameter, ...) crashed the interpreter on
the garbage value pybind11 allocated for it. torch gives such an instance an empty tensor; here it holds none, and
a use says so."""
import warnings

import pytest

import tessel


@pytest.mark.parametrize("cls", [tessel.Tensor, tessel.nn.Parameter], ids=lambda c: c.__name__)
def test_every_method_of_a_bare_instance_raises_instead_of_crashing(cls):
    real = tessel.ones(2)
    names = sorted(n for n in dir(cls) if n not in ("__class__", "__new__", "__init__", "__init_subclass__",
                                                      "__subclasshook__", "__del__"))
    assert len(names) > 500
    raised = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            for args in ((), (1,), (real,)):
                t = cls.__new__(cls)
                try:
                    attr = getattr(t, name)
                    if callable(attr):
                        attr(*args)
                except Exception:  # noqa: BLE001 - any Python exception is the point: no crash
                    raised += 1
    assert raised > 0


@pytest.mark.parametrize("method", ["dim", "detach", "tolist", "_variable_data", "_is_view", "numel"])
def test_a_bare_instance_says_it_holds_no_tensor(method):
    t = tessel.Tensor.__new__(tessel.Tensor)
    with pytest.raises(RuntimeError, match="use of an undefined Tensor"):
        getattr(t, method)()
    with pytest.raises(RuntimeError, match="use of an undefined Tensor"):
        t.data  # noqa: B018 - the property read is the call under test


@pytest.mark.parametrize("cls", [tessel.Tensor, tessel.nn.Parameter], ids=lambda c: c.__name__)
def test_setting_grad_state_on_a_bare_instance_raises(cls):  # (these three still crashed after the sweep above)
    for write in (lambda t: t.requires_grad_(False), lambda t: setattr(t, "requires_grad", False),
                  lambda t: setattr(t, "grad", None)):
        with pytest.raises(RuntimeError, match="use of an undefined Tensor"):
            write(cls.__new__(cls))


def test_a_tensor_stored_into_a_bare_instance_is_released_with_it():
    import gc
    src = tessel.zeros(4)
    t = tessel.Tensor.__new__(tessel.Tensor)
    t._rebind_(src)
    assert not src._sole_handle()
    del t
    gc.collect()
    assert src._sole_handle()  # pybind11 freed the value without its destructor: the handle leaked


def test_init_after_bare_new_still_builds_the_tensor():
    src = tessel.arange(6.0).reshape(2, 3)
    p = tessel.nn.Parameter.__new__(tessel.nn.Parameter)
    tessel.Tensor.__init__(p, src)
    assert p.shape == (2, 3) and p.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and p._is_same(src)
    # a method read before __init__ (the value was made then), and __init__ afterwards
    q = tessel.Tensor.__new__(tessel.Tensor)
    with pytest.raises(RuntimeError, match="undefined Tensor"):
        q.numel()
    tessel.Tensor.__init__(q, src)
    assert q.numel() == 6 and q.sum().item() == 15.0
