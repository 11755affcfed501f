"""nn.Module machinery as torch's, found by a 268-case nn.Module API sweep: a subclass that touches it before calling
Module.__init__ gets torch's AttributeError (it crashed the process: the C++ module does not exist yet), and
get_extra_state / set_extra_state put a module's extra state in its state dict (it was left out)."""
import sys

import pytest

import tessel
import tessel.nn as nn


@pytest.mark.parametrize("early,msg", [
    (lambda m: setattr(m, "w", nn.Parameter(tessel.zeros(2))), "cannot assign parameters before Module.__init__"),
    (lambda m: setattr(m, "l", nn.Linear(2, 2)), "cannot assign module before Module.__init__"),
    (lambda m: m.register_buffer("b", tessel.zeros(2)), "cannot assign buffer before Module.__init__"),
    (lambda m: m.register_parameter("p", None), "cannot assign parameter before Module.__init__"),
    (lambda m: m.add_module("m", nn.Linear(2, 2)), "object has no attribute '_modules'"),
    (lambda m: list(m.parameters()), "object has no attribute '_parameters'"),
    (lambda m: m.state_dict(), "object has no attribute '_modules'"),
], ids=["parameter", "module", "register_buffer", "register_parameter", "add_module", "parameters", "state_dict"])
def test_module_machinery_before_init_raises_torchs_error(early, msg):
    class Early(nn.Module):
        def __init__(self):
            early(self)
            super().__init__()

    with pytest.raises(AttributeError, match=msg):
        Early()


def test_plain_attributes_before_init_and_the_machinery_after_it_work():
    class Fine(nn.Module):
        def __init__(self):
            self.scale = 3  # a plain attribute before __init__: allowed, as torch
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.w = nn.Parameter(tessel.zeros(2))

    m = Fine()
    assert m.scale == 3 and len(list(m.parameters())) == 3 and list(m.state_dict()) == ["w", "lin.weight", "lin.bias"]


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", tessel.zeros(1))
        self.lin = nn.Linear(2, 1)
        self.steps = 0

    def get_extra_state(self):
        return {"steps": self.steps}

    def set_extra_state(self, state):
        self.steps = state["steps"]


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(tessel.zeros(1))
        self.c = Counter()


def test_extra_state_is_saved_after_a_modules_own_entries_and_loaded_back():
    m = Outer()
    m.c.steps = 7
    sd = m.state_dict()
    assert list(sd) == ["w", "c.b", "c._extra_state", "c.lin.weight", "c.lin.bias"]  # torch's order
    assert sd["c._extra_state"] == {"steps": 7}
    other = Outer()
    assert not other.load_state_dict(sd).missing_keys and other.c.steps == 7
    without = {k: v for k, v in sd.items() if k != "c._extra_state"}
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "c._extra_state"'):
        Outer().load_state_dict(without)
    assert Outer().load_state_dict(without, strict=False).missing_keys == ["c._extra_state"]
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "_extra_state"'):
        nn.Linear(2, 1).load_state_dict({**nn.Linear(2, 1).state_dict(), "_extra_state": 1})


def test_parameters_refuse_integer_data_and_copy_as_parameters():
    import copy
    import pickle
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype can require gradients"):
        nn.Parameter(tessel.tensor([1, 2]))  # (it was accepted)
    frozen = nn.Parameter(tessel.tensor([1, 2]), requires_grad=False)
    assert frozen.dtype == tessel.int64 and not frozen.requires_grad
    p = nn.Parameter(tessel.ones(2))
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):  # (they came back plain Tensors)
        assert isinstance(q, nn.Parameter) and q.requires_grad and q.tolist() == [1.0, 1.0]


def test_a_childs_private_state_dict_hook_returning_a_dict_leaves_the_parents_alone():
    m = nn.Sequential(nn.Linear(2, 1), nn.Linear(1, 1))
    m[0]._register_state_dict_hook(lambda mod, sd, prefix, meta: {"replaced": 1})
    assert list(m.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]  # (it became {"replaced": 1})
    m._register_state_dict_hook(lambda mod, sd, prefix, meta: {"root": 1})
    assert list(m.state_dict()) == ["root"]  # the root's own hook does replace it, as torch's


def test_load_state_dict_post_hooks_run_children_first():
    m = nn.Sequential(nn.Linear(2, 1), nn.Sequential(nn.Linear(1, 1)))
    order = []
    for name, mod in m.named_modules():
        mod.register_load_state_dict_post_hook(lambda mod, keys, name=name: order.append(name))
    m.load_state_dict(m.state_dict())
    assert order == ["0", "1.0", "1", ""]  # torch's recursive load (the parent ran first)


def test_add_module_refuses_a_name_an_attribute_already_has():
    class WithAttr(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = 3

    m = WithAttr()
    for name in ("x", "forward", "training"):  # (x was registered while m.x still read 3)
        with pytest.raises(KeyError, match="attribute '%s' already exists" % name):
            m.add_module(name, nn.Linear(1, 1))
    m.add_module("lin", nn.Linear(1, 1))
    m.add_module("lin", nn.Linear(2, 2))  # replacing a child is allowed
    assert m.lin.in_features == 2


def test_a_save_to_state_dict_override_writes_the_modules_entries_as_torch():
    # torch 2.15 gives these keys, in this order, for this tree: the override adds `scale` after its own entries
    # and rewrites `weight`; the others (a non-persistent buffer left out) are the default's.
    class Packed(nn.Linear):
        def _save_to_state_dict(self, destination, prefix, keep_vars):
            super()._save_to_state_dict(destination, prefix, keep_vars)
            destination[prefix + "scale"] = tessel.tensor(2.0)
            destination[prefix + "weight"] = destination[prefix + "weight"] * 2

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.p, self.bn = nn.Linear(2, 2), Packed(2, 3), nn.BatchNorm1d(3)
            self.register_buffer("tmp", tessel.ones(1), persistent=False)
            self.register_buffer("keep", tessel.zeros(1))

    n = Net()
    sd = n.state_dict()
    assert list(sd) == ["keep", "a.weight", "a.bias", "p.weight", "p.bias", "p.scale", "bn.weight", "bn.bias",
                        "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert sd["p.scale"].item() == 2.0 and sd["p.weight"].tolist() == (n.p.weight * 2).tolist()
    kept = n.state_dict(keep_vars=True)
    assert kept["a.weight"] is n.a.weight and kept["keep"] is n.keep and kept["p.bias"] is n.p.bias
    assert list(n.state_dict(prefix="m."))[:2] == ["m.keep", "m.a.weight"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
