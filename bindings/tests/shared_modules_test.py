"""A module in several parents, as torch allows (nn::Module shares its children): a feature extractor built
from another model's children, a layer reused across depth (ALBERT), ModuleList([layer] * n), aliases. Each
case's expected values were read from torch 2.15 running the same lines, or computed another way (numpy
gradients of the composed function, the dense run against fully_shard). Also the container operations that
make such sharing common: slices, deletion, insertion, + and * of Sequential and ModuleList."""
import collections
import copy
import gc
import io
import sys
import weakref

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard


def names(m):
    return [n for n, _ in m.named_children()]


def kinds(m):
    return [type(x).__name__ for x in m]


def test_the_sharing_idioms_of_torch_scripts_keep_one_module():
    lin = nn.Linear(3, 3)
    repeated = nn.ModuleList([lin] * 3)
    assert len(list(repeated.parameters())) == 2 and len(repeated.state_dict()) == 6

    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    features = nn.Sequential(*list(net.children())[:-1])
    assert len(net) == 3 and len(features) == 2 and features[0] is net[0]
    assert features(tessel.ones(1, 2)).shape == (1, 3)
    features[0].weight.data.fill_(1.0)  # one tensor: the change shows through both parents
    assert float(net[0].weight.detach().sum()) == 6.0

    d = nn.ModuleDict({"a": nn.Linear(2, 2)})
    d["b"] = d["a"]
    assert len(list(d.parameters())) == 2
    assert sorted(d.state_dict()) == ["a.bias", "a.weight", "b.bias", "b.weight"]

    encoder = nn.Linear(2, 2)
    left, right = nn.Sequential(encoder, nn.ReLU()), nn.Sequential(encoder, nn.Tanh())
    (left(tessel.ones(1, 2)) + right(tessel.ones(1, 2))).sum().backward()
    assert left[0] is right[0] and encoder.weight.grad.shape == (2, 2)


class Albert(nn.Module):
    """One block applied at every depth (torch's attribute alias: both names in the state dict)."""

    def __init__(self):
        super().__init__()
        self.block = nn.Linear(3, 3)
        self.again = self.block

    def forward(self, x):
        return self.again(self.block(x).tanh())


def test_a_reused_layer_gets_both_uses_gradients_and_one_optimizer_update():
    tessel.manual_seed(1)
    m = Albert().double()
    assert [n for n, _ in m.named_parameters()] == ["block.weight", "block.bias"]
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == [
        "block.weight", "block.bias", "again.weight", "again.bias"]
    assert list(m.state_dict()) == ["block.weight", "block.bias", "again.weight", "again.bias"]
    assert [n for n, _ in m.named_modules()] == ["", "block"]
    assert [n for n, _ in m.named_modules(remove_duplicate=False)] == ["", "block", "again"]
    w, b = m.block.weight.detach().numpy().copy(), m.block.bias.detach().numpy().copy()
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])

    def loss(w, b):
        return float(((np.tanh(x @ w.T + b) @ w.T + b) ** 2).sum())

    m(tessel.tensor(x)).pow(2).sum().backward()
    eps = 1e-6
    for p, value in ((m.block.weight, w), (m.block.bias, b)):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up, down = value.copy(), value.copy()
            up[i] += eps
            down[i] -= eps
            args = (up, b) if value is w else (w, up)
            args_down = (down, b) if value is w else (w, down)
            numeric[i] = (loss(*args) - loss(*args_down)) / (2 * eps)
        np.testing.assert_allclose(p.grad.numpy(), numeric, rtol=1e-6, atol=1e-8)
    opt = tessel.optim.SGD(m.parameters(), lr=0.1)
    assert len(opt.param_groups[0]["params"]) == 2
    grad = m.block.weight.grad.numpy().copy()
    opt.step()  # once: a parameter listed twice would be stepped twice
    np.testing.assert_allclose(m.again.weight.detach().numpy(), w - 0.1 * grad, rtol=1e-12)


def test_walks_copies_and_loads_keep_the_sharing_as_torch():
    lin = nn.Linear(2, 2)
    m = nn.Sequential(lin, nn.ReLU(), lin)
    assert names(m) == ["0", "1"] and len(list(m.modules())) == 3  # torch's named_children: one per module
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Sequential"]
    assert [n for n, _ in m.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    assert "(2): Linear(in_features=2, out_features=2, bias=True)" in repr(m)
    memo = {lin}
    assert [n for n, _ in m.named_modules(memo=memo)] == ["", "1"]  # torch's memo: seen modules skipped
    # torch's load: both keys copy into the one tensor, the later one wins
    m.load_state_dict({"0.weight": tessel.ones(2, 2), "0.bias": tessel.zeros(2),
                       "2.weight": 2 * tessel.ones(2, 2), "2.bias": tessel.ones(2)})
    assert float(lin.weight.detach().sum()) == 8.0 and float(lin.bias.detach().sum()) == 2.0
    twin = copy.deepcopy(m)
    assert twin[0] is twin[2] and twin[0] is not lin
    buffer = io.BytesIO()
    tessel.save(m, buffer)
    buffer.seek(0)
    loaded = tessel.load(buffer, weights_only=False)
    assert loaded[0] is loaded[2] and float(loaded[2].weight.detach().sum()) == 8.0
    m.eval()
    assert not lin.training
    d = nn.Sequential(lin, lin).double()
    assert lin.weight.dtype == tessel.float64 and d[1].weight.dtype == tessel.float64
    with pytest.raises(ValueError, match="the module is an ancestor of Sequential"):
        inner = nn.Sequential(nn.Linear(1, 1))
        outer = nn.Sequential(inner)
        inner.add_module("loop", outer)  # torch accepts it and recurses forever later; refused here


def test_modules_outlive_the_parents_they_came_from():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    gone = weakref.ref(net)
    features = nn.Sequential(*list(net.children())[:-1])
    expected = features(tessel.ones(1, 2)).numpy()
    del net
    gc.collect()
    assert gone() is None  # the old parent is freed; its children live on in the new one
    np.testing.assert_array_equal(features(tessel.ones(1, 2)).numpy(), expected)
    # Blocks a C++ GPT created: their Python objects share the GPT's ownership, so they outlive it.
    gpt = tessel.GPT(tessel.GPTConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=2, seq_len=4), seed=3)
    block = gpt.layers[1]
    wrapped = nn.Sequential(block)  # a C++-created block in a Python container
    h = tessel.randn(1, 4, 8)
    expected = block(h).numpy()
    del gpt
    gc.collect()
    np.testing.assert_array_equal(wrapped(h).numpy(), expected)


def test_sequential_slices_deletion_insertion_and_arithmetic_as_torch():
    def seq():
        return nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3), nn.Tanh())

    s = seq()
    head = s[:-1]
    assert type(head) is nn.Sequential and head[0] is s[0] and head(tessel.ones(1, 2)).shape == (1, 3)
    assert names(s[1:3]) == ["1", "2"] and names(s[::2]) == ["0", "2"]  # a slice keeps the names
    del s[1]
    assert names(s) == ["0", "1", "2"] and kinds(s) == ["Linear", "Linear", "Tanh"]  # renumbered
    del s[1:]
    assert kinds(s) == ["Linear"] and list(s.state_dict()) == ["0.weight", "0.bias"]
    s = seq()
    assert s.insert(1, nn.Sigmoid()) is s
    s.insert(-1, nn.GELU())
    assert kinds(s) == ["Linear", "Sigmoid", "ReLU", "Linear", "GELU", "Tanh"] and names(s)[-1] == "5"
    with pytest.raises(IndexError, match="Index out of range: 10"):
        s.insert(10, nn.ReLU())
    s = seq()
    assert type(s.pop(1)).__name__ == "ReLU" and names(s) == ["0", "1", "2"]
    assert names(seq() + seq()) == [str(i) for i in range(8)]
    doubled = seq() * 2
    assert len(doubled) == 8 and doubled[0] is doubled[4] and len(list(doubled.parameters())) == 4
    lin = nn.Linear(2, 2)
    assert names(2 * nn.Sequential(lin)) == ["0"]
    s = nn.Sequential(lin, nn.ReLU())
    s *= 3
    assert len(s) == 6 and s[4] is lin
    s = nn.Sequential(lin)
    s += nn.Sequential(nn.ReLU())
    assert kinds(s) == ["Linear", "ReLU"]
    with pytest.raises(ValueError, match="add operator supports only objects of Sequential class"):
        nn.Sequential(lin) + [nn.ReLU()]
    with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
        nn.Sequential(lin) * 0
    with pytest.raises(IndexError, match="index 7 is out of range"):
        seq()[7]
    named = nn.Sequential(collections.OrderedDict([("a", nn.Linear(1, 1)), ("b", nn.ReLU()), ("c", nn.ReLU())]))
    tail = named[1:]
    del named[0]
    assert names(tail) == ["b", "c"] and names(named) == ["0", "1"]


def test_module_list_and_dict_operations_as_torch():
    ml = nn.ModuleList([nn.Linear(1, 1), nn.ReLU(), nn.Tanh()])
    tail = ml[1:]
    assert type(tail) is nn.ModuleList and kinds(tail) == ["ReLU", "Tanh"]
    del ml[0]
    ml.insert(0, nn.GELU())
    popped = ml.pop(-1)
    ml += [nn.Sigmoid()]
    joined = ml + [nn.ReLU()]
    assert type(popped).__name__ == "Tanh" and kinds(ml) == ["GELU", "ReLU", "Sigmoid"]
    assert type(joined) is nn.ModuleList and kinds(joined) == ["GELU", "ReLU", "Sigmoid", "ReLU"]
    assert names(ml) == ["0", "1", "2"]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got int"):
        nn.ModuleList().extend(3)
    lin = nn.Linear(2, 2)
    shared = nn.ModuleList([lin] * 3)
    shared[1] = nn.Tanh()  # only that entry changes
    assert kinds(shared) == ["Linear", "Tanh", "Linear"] and shared[2] is lin
    assert repr(nn.ModuleList([lin] * 3)) == ("ModuleList(\n  (0-2): 3 x Linear(in_features=2, out_features=2, "
                                                "bias=True)\n)")
    assert repr(nn.ModuleList([nn.ReLU(), lin, nn.Linear(2, 2)])) == (
        "ModuleList(\n  (0): ReLU()\n  (1-2): 2 x Linear(in_features=2, out_features=2, bias=True)\n)")
    d = nn.ModuleDict({"a": lin, "b": nn.ReLU()})
    d.clear()
    assert len(d) == 0 and list(d.keys()) == [] and d.state_dict() == {}


X = np.random.default_rng(7).standard_normal((4, 6)).astype(np.float32)


class Tied(nn.Module):
    """The same block at two depths of a ModuleList, then a head."""

    def __init__(self):
        super().__init__()
        block = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.blocks = nn.ModuleList([block, block])
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def train(model, x, steps=3):
    opt = tessel.optim.AdamW(model.parameters(), lr=0.05)
    for _ in range(steps):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("shard_block", [False, True])
def test_fully_shard_of_a_model_with_a_shared_block_equals_one_rank_training(shard_block):
    """With shard_block, the shared block (called twice per forward) is its own fully_shard group too."""
    tessel.manual_seed(0)
    dense = Tied()
    train(dense, tessel.tensor(X))
    expected = [p.detach().numpy() for p in dense.parameters()]
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        m = Tied()
        mesh = init_device_mesh("cpu", (2,))
        if shard_block:
            fully_shard(m.blocks[1], mesh=mesh)
        fully_shard(m, mesh=mesh)
        assert len(list(m.parameters())) == 4
        train(m, tessel.tensor(X[world.rank * 2:(world.rank + 1) * 2]))
        out[world.rank] = [p.full_tensor().numpy() for p in m.parameters()]

    tessel.run_ranks(2, rank_fn)
    for rank in (0, 1):
        assert len(out[rank]) == len(expected)
        for got, want in zip(out[rank], expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
