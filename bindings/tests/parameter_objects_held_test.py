"""A module holds its Parameter objects, as torch's modules do ([Note: parameter host objects] in
core/nn/module.h): id() maps made once, attributes set on a parameter and weakrefs to it stay valid for as long as
the module holds that tensor, and a replaced parameter's object is let go. Expected values are torch 2.15's results
for the same lines."""
import gc
import weakref

import tessel
import tessel.nn as nn


def test_an_id_map_made_once_still_names_the_parameters_later():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    head_ids = list(map(id, model[2].parameters()))  # the "lower lr for the head" recipe
    base = filter(lambda p: id(p) not in head_ids, model.parameters())
    opt = tessel.optim.SGD([{"params": base}, {"params": model[2].parameters(), "lr": 1e-3}], lr=0.1)
    assert [len(g["params"]) for g in opt.param_groups] == [2, 2]
    w0 = model[0].weight.detach().clone()
    model(tessel.ones(3, 4)).sum().backward()
    opt.step()
    assert not tessel.equal(w0, model[0].weight)  # the backbone trains (it silently did not)
    names = {id(p): n for n, p in model.named_parameters()}
    gc.collect()
    assert [names.get(id(p)) for p in model.parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len({id(p) for p in model.parameters()}) == 4


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(tessel.ones(2))
        self.lin = nn.Linear(1, 1)


def test_attributes_set_on_parameters_last_through_module_methods():
    m = _Block()
    m.p.tag, m.lin.bias.tag, m.lin.weight.no_weight_decay = 1, 2, True
    gc.collect()
    for change in (lambda: None, m.double, lambda: m.requires_grad_(False), lambda: m.to("cpu"), m.float):
        change()
        assert (getattr(m.p, "tag", None), getattr(m.lin.bias, "tag", None)) == (1, 2)
    assert [n for n, p in m.named_parameters() if getattr(p, "no_weight_decay", False)] == ["lin.weight"]
    for _, p in m.named_parameters():  # tags set in a loop over named_parameters
        p.seen = True
    gc.collect()
    assert all(getattr(p, "seen", False) for p in m.parameters())
    assert m.get_parameter("lin.bias").tag == 2


def test_weakrefs_to_parameters_stay_alive_while_the_module_holds_them():
    lin = nn.Linear(2, 2)
    ref = weakref.ref(lin.weight)
    table = weakref.WeakKeyDictionary({p: i for i, p in enumerate(lin.parameters())})
    gc.collect()
    assert ref() is lin.weight and len(table) == 2


def test_a_replaced_parameters_object_is_let_go():
    m = _Block()
    old = weakref.ref(m.p)
    old_bias = weakref.ref(m.lin.bias)
    m.p = nn.Parameter(tessel.zeros(2))
    m.lin.bias = nn.Parameter(tessel.zeros(1))
    gc.collect()
    assert old() is None and old_bias() is None
    assert m.p.tolist() == [0.0, 0.0] and m.lin.bias.tolist() == [0.0]
    kept = nn.Parameter(tessel.full((2,), 3.0))
    m.p = kept
    assert m.p is kept and m.p.tolist() == [3.0, 3.0]
