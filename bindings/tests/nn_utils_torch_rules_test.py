"""torch.nn.utils against torch 2.15, from the thirty-eighth session's sweep of RNNs and nn.utils (each expected
value below is what torch 2.15 printed for the same script): the inf-norm clipping with a NaN gradient after the
first, prune.remove keeping the Parameter object an optimizer holds, remove_parametrizations of an unsafe
parametrization that changes the shape, and the hook-based spectral_norm's weight before any forward."""
import math

import pytest

import tessel
import tessel.nn as nn
from tessel.nn.utils import parametrize, prune


def test_inf_norm_sees_a_nan_in_any_gradient():
    for norm_type in (math.inf, -math.inf):
        a, b = nn.Parameter(tessel.ones(2)), nn.Parameter(tessel.ones(2))
        a.grad, b.grad = tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, math.nan])
        total = nn.utils.clip_grad_norm_([a, b], max_norm=1.0, norm_type=norm_type)
        assert math.isnan(total.item())  # was 2.0 (inf) / 1.0 (-inf): Python's max skipped the NaN
        assert all(math.isnan(v) for v in a.grad.tolist() + b.grad.tolist())  # torch scales by clamp(NaN)
        assert math.isnan(nn.utils.get_total_norm([tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, math.nan])],
                                                  norm_type).item())
        a.grad, b.grad = tessel.tensor([1.0, 2.0]), tessel.tensor([3.0, math.nan])
        with pytest.raises(RuntimeError, match="non-finite"):
            nn.utils.clip_grad_norm_([a, b], max_norm=1.0, norm_type=norm_type, error_if_nonfinite=True)


def test_prune_remove_keeps_the_parameter_an_optimizer_holds():
    m = nn.Linear(2, 1)
    with tessel.no_grad():
        m.weight.copy_(tessel.tensor([[1.0, 0.1]]))
    prune.l1_unstructured(m, "weight", amount=1)
    opt = tessel.optim.SGD(m.parameters(), lr=1.0)  # holds weight_orig
    orig = m.weight_orig
    prune.remove(m, "weight")
    assert m.weight is orig and m.weight.tolist() == [[1.0, 0.0]]
    for p in m.parameters():
        p.grad = tessel.ones_like(p)
    opt.step()
    assert m.weight.tolist() == [[0.0, -1.0]]  # a new Parameter stayed [[1, 0]]: the optimizer held the old one


def test_removing_an_unsafe_parametrization_takes_its_shape():
    class Shrink(nn.Module):
        def forward(self, X):
            return X.sum(0)

    m = nn.Linear(3, 3)
    with tessel.no_grad():
        m.weight.copy_(tessel.arange(9.0).reshape(3, 3))
    parametrize.register_parametrization(m, "weight", Shrink(), unsafe=True)
    parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    assert tuple(m.weight.shape) == (3,) and m.weight.tolist() == [9.0, 12.0, 15.0]  # was broadcast into [3, 3]
    assert isinstance(m.weight, nn.Parameter)


def test_hook_spectral_norm_weight_is_the_raw_weight_before_a_forward():
    m = nn.Linear(3, 2, bias=False)
    with tessel.no_grad():
        m.weight.copy_(tessel.tensor([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    nn.utils.spectral_norm(m)
    assert m.weight.tolist() == [[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]]  # W / (uᵀ W v) with the random u, v was read
    m(tessel.ones(1, 3))
    w = m.weight.detach()
    sigma = (m.weight_u @ m.weight_orig.detach() @ m.weight_v).item()
    assert abs(w[0, 0].item() - 3.0 / sigma) < 1e-6



def test_packed_sequence_dtype_conversions():
    from tessel.nn.utils.rnn import pack_sequence
    p = pack_sequence([tessel.tensor([1.0, 2.0, 3.0]), tessel.tensor([4.0, 5.0])])
    for name, dtype in (("half", tessel.float16), ("long", tessel.int64), ("int", tessel.int32),
                        ("short", tessel.int16), ("char", tessel.int8), ("byte", tessel.uint8)):
        q = getattr(p, name)()
        assert q.data.dtype == dtype and q.batch_sizes.tolist() == [2, 2, 1] and q.data.tolist() == [1, 4, 2, 5, 3]


def test_a_failed_pruning_leaves_the_module_as_it_was():
    m = nn.Linear(3, 2)
    w = m.weight
    with pytest.raises(ValueError):
        prune.l1_unstructured(m, "weight", amount=7)  # only 6 entries
    assert list(m.state_dict().keys()) == ["bias", "weight"]  # torch's order after its rollback too
    assert m.weight is w and not prune.is_pruned(m)
    assert tuple(m(tessel.ones(1, 3)).shape) == (1, 2)  # was KeyError: weight_orig without a mask


def test_a_rejected_parametrization_keeps_the_parameter_order():
    class Shrink(nn.Module):
        def forward(self, X):
            return X.sum(0)

    m = nn.Linear(3, 3)
    with pytest.raises(ValueError):
        parametrize.register_parametrization(m, "weight", Shrink())  # a shape change without unsafe=True
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]  # was ['bias', 'weight']
    assert not parametrize.is_parametrized(m)


def test_module_training_setter_and_type_casting_every_buffer():
    class C(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def train(self, mode=True):  # the common override: it raised "property has no setter"
            self.training = mode
            return self

    c = C()
    c.train(False)
    assert c.training is False and c.lin.training is True  # the flag of this module alone, as torch's
    bn = nn.BatchNorm1d(2)
    bn.register_buffer("mask", tessel.tensor([True, False]))
    bn.type(tessel.float64)  # every tensor, integer and bool ones too (as torch's _apply(t.type(...)))
    assert {n: b.dtype for n, b in bn.named_buffers()} == {
        "running_mean": tessel.float64, "running_var": tessel.float64, "num_batches_tracked": tessel.float64,
        "mask": tessel.float64}
    assert bn.weight.dtype == tessel.float64


def test_sequential_insert_moves_numbered_keys_as_torch():
    from collections import OrderedDict
    s = nn.Sequential(OrderedDict([("conv", nn.Linear(1, 1)), ("act", nn.ReLU())]))
    s.insert(2, nn.Tanh())  # at the end: the named children keep their names (they were renamed "0", "1")
    assert [n for n, _ in s.named_children()] == ["conv", "act", "2"]
    assert list(s.state_dict()) == ["conv.weight", "conv.bias"]
    s = nn.Sequential(OrderedDict([("conv", nn.Linear(1, 1)), ("act", nn.ReLU())]))
    with pytest.raises(KeyError):
        s.insert(1, nn.Tanh())  # torch's: the move needs key "1"
    s = nn.Sequential(nn.Linear(1, 1), nn.ReLU(), nn.Linear(1, 2))
    s.insert(1, nn.Tanh())
    assert [(n, type(m).__name__) for n, m in s.named_children()] == [
        ("0", "Linear"), ("1", "Tanh"), ("2", "ReLU"), ("3", "Linear")]


def test_module_repr_layout_and_parameter_containers_as_torch():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(1, 1)

        def extra_repr(self):
            return "k=1\nj=2"

    class N(nn.Module):
        def extra_repr(self):
            return "k=1\nj=2"

    # torch's layout: several extra lines (or extra lines and children) each on its own indented line
    assert repr(M()) == "M(\n  k=1\n  j=2\n  (l): Linear(in_features=1, out_features=1, bias=True)\n)"
    assert repr(N()) == "N(\n  k=1\n  j=2\n)"
    assert repr(nn.Linear(2, 3)) == "Linear(in_features=2, out_features=3, bias=True)"
    pl = nn.ParameterList([nn.Parameter(tessel.zeros(2)), nn.Parameter(tessel.zeros(2, 3))])
    assert repr(pl) == ("ParameterList(\n    (0): Parameter containing: [tessel.float32 of size 2]\n"
                        "    (1): Parameter containing: [tessel.float32 of size 2x3]\n)")  # was "ParameterList()"
    assert repr(nn.ParameterDict({"a": nn.Parameter(tessel.zeros(2))})) == (
        "ParameterDict(  (a): Parameter containing: [torch.FloatTensor of size 2])")
    assert tessel.tensor(1.0).index_fill_(0, tessel.tensor([0]), 5).item() == 5.0  # a 0-d tensor (IndexError)


def test_parameter_dict_dict_api():
    def P(v):
        return nn.Parameter(tessel.tensor([v]))
    d = nn.ParameterDict({"a": P(1.0), "b": P(2.0)})
    a = d["a"]
    assert d.pop("a") is a and list(d.keys()) == ["b"]  # pop, setdefault, popitem, copy, fromkeys, |, |=, clear
    assert d.setdefault("c", P(3.0)).tolist() == [3.0] and d.setdefault("b", P(9.0)).tolist() == [2.0]
    key, value = d.popitem()
    assert key == "c" and value.tolist() == [3.0] and list(d.keys()) == ["b"]
    c = d.copy()
    assert list(c.keys()) == ["b"] and c["b"] is d["b"]
    assert list(d.fromkeys(["x", "y"], P(0.0)).keys()) == ["x", "y"]
    assert list((d | nn.ParameterDict({"z": P(5.0)})).keys()) == ["b", "z"] and list(d.keys()) == ["b"]
    d |= {"w": P(6.0)}
    assert list(d.keys()) == ["b", "w"]
    d.clear()
    assert len(d) == 0
    with pytest.raises(KeyError, match="dictionary is empty"):
        d.popitem()

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
