"""Python attributes on tensors and the identity of .grad, as torch 2.15 (each expectation is what torch printed
for the same lines): a tensor carries attributes that every Python object of it sees (`p.grad.tag` after
`g = p.grad; g.tag = 3; del g`), views / detach / clone start without them, an in-place op keeps them, and
pickle, copy, deepcopy and tessel.save / load carry them (torch's _rebuild_from_type_v2 state); `p.grad is p.grad`
and after `p.grad = g`, `p.grad is g`. Attributes released on a thread without the GIL are freed later, never
waited for (bindings/tensor_attrs.cc)."""
import copy
import gc
import io
import pickle
import threading
import weakref
import zipfile

import pytest

import tessel
import tessel.nn as nn
from ranks_testing import on_ranks


def test_set_read_delete():
    x = tessel.ones(2)
    x.tag = 1
    assert x.tag == 1 and x.__dict__ == {"tag": 1} and vars(x) == {"tag": 1} and "tag" in dir(x)
    x.__dict__["k"] = 2
    assert x.k == 2
    del x.tag
    assert x.__dict__ == {"k": 2}
    x.__dict__ = {"a": 1}
    assert x.a == 1 and not hasattr(x, "k")
    with pytest.raises(AttributeError, match="object has no attribute 'bar'"):
        x.bar
    with pytest.raises(AttributeError, match="object has no attribute 'bar'"):
        del x.bar
    with pytest.raises(TypeError, match="__dict__ must be set to a dictionary, not a 'int'"):
        x.__dict__ = 3


def test_properties_stay_properties():
    x = tessel.ones(2)
    x.requires_grad = True  # a property of the type, not an attribute
    assert x.requires_grad and x.__dict__ == {}
    x.add = 7  # an instance attribute hides a method, as on any Python object
    assert x.add == 7 and tessel.ones(2).add(1).tolist() == [2.0, 2.0]


def test_attributes_belong_to_the_tensor():
    x = tessel.ones(2, 3)
    x.tag = "t"
    assert [hasattr(y, "tag") for y in (x.view(6), x.detach(), x.clone(), x[0])] == [False] * 4
    assert x.add_(1) is x and x.add_(1).tag == "t"
    x.t_()  # a shape method composed in Python (the object rebinds to the view)
    assert tuple(x.shape) == (3, 2) and x.tag == "t"
    y = tessel.ones(3, requires_grad=True) * 1
    y.tag = 2
    y.sin_()  # recorded in-place under autograd
    assert y.tag == 2


def test_grad_identity_and_attributes():
    p = nn.Parameter(tessel.ones(2))
    (p * 2).sum().backward()
    assert p.grad is p.grad
    g = p.grad
    g.scale = 3
    del g
    assert p.grad.scale == 3  # the same tensor, whatever Python object reads it
    (p * 2).sum().backward()  # accumulated in place: still that tensor
    assert p.grad.scale == 3 and p.grad.tolist() == [4.0, 4.0]
    z = tessel.zeros(2)
    p.grad = z
    assert p.grad is z
    p.grad = None
    assert p.grad is None
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None but got grad of type int"):
        p.grad = 3
    opt = tessel.optim.SGD([p], lr=0.1)
    (p * 2).sum().backward()
    p.grad.tag = 1
    opt.zero_grad()  # set_to_none: the next gradient is a new tensor
    (p * 2).sum().backward()
    assert not hasattr(p.grad, "tag")


def test_pickle_copy_deepcopy():
    x = tessel.ones(2)
    x.k = [2]
    assert pickle.loads(pickle.dumps(x)).__dict__ == {"k": [2]}
    c = copy.copy(x)
    assert c.__dict__ == {"k": [2]} and c.__dict__ is not x.__dict__ and c.k is x.k
    d = copy.deepcopy(x)
    assert d.__dict__ == {"k": [2]} and d.k is not x.k
    assert copy.deepcopy(tessel.ones(1)).__dict__ == {}


def test_save_load_as_torch_writes_it():
    x = tessel.ones(2)
    x.k = [3]
    buf = io.BytesIO()
    tessel.save({"x": x, "plain": tessel.zeros(1)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
    # torch's form for a tensor with attributes (torch 2.15 loads it with .k == [3]); a plain one stays plain
    assert pkl.count(b"_rebuild_from_type_v2") == 1 and b"torch._tensor" in pkl
    buf.seek(0)
    loaded = tessel.load(buf)
    assert loaded["x"].__dict__ == {"k": [3]} and loaded["x"].tolist() == [1.0, 1.0]
    assert loaded["plain"].__dict__ == {}


class _Tag:
    pass


def test_released_without_the_gil_later():
    # Intermediate tensors carrying attributes die inside backward (the GIL released) and on other threads.
    refs = []
    x = tessel.ones(64, requires_grad=True)
    for _ in range(20):
        y = x * 2
        tag = _Tag()
        refs.append(weakref.ref(tag))
        y.tag = tag
        del tag
        z = (y * y).sum()
        del y
        z.backward()
    dropped = []

    def drop(ts):
        ts.clear()  # the last handles go on a plain thread
        dropped.append(True)

    held = []
    for _ in range(20):
        t = tessel.ones(3)
        tag = _Tag()
        refs.append(weakref.ref(tag))
        t.tag = tag
        held.append(t)
        del tag, t
    th = threading.Thread(target=drop, args=(held,))
    th.start()
    th.join()
    x.shape  # the next attribute read releases what is still queued
    gc.collect()
    assert dropped == [True] and [r() for r in refs] == [None] * 40


def test_rank_threads_and_dtensors():
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import Shard, distribute_tensor

    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        d = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        d.rank_tag = rank
        p = nn.Parameter(distribute_tensor(tessel.ones(4), mesh, [Shard(0)]))
        (p * d).sum().backward()
        g = p.grad
        g.tag = "g%d" % rank
        del g
        return d.rank_tag, p.grad.tag, p.grad is p.grad, p.grad.full_tensor().tolist()

    assert on_ranks(2, fn) == {0: (0, "g0", True, [0.0, 1.0, 2.0, 3.0]), 1: (1, "g1", True, [0.0, 1.0, 2.0, 3.0])}


def test_parameters_keep_their_own_dict():
    p = nn.Parameter(tessel.ones(2))
    p.flag = True
    assert p.flag and p.__dict__["flag"] and type(p).__name__ == "Parameter"
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter)
