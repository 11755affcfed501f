"""Parameters keep their identity as in torch (one Parameter object per parameter tensor: `m.fc.weight is
m.fc.weight`, parameters() yields the same objects every time), so code keyed by parameter identity works: an
id() map of named_parameters against an optimizer's param_groups, a dict of per-parameter optimizers stepped from
register_post_accumulate_grad_hook (optimizer in backward) equal to one optimizer's step, and optimizer
checkpoints still keyed by the full FQN after attribute access."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.distributed.checkpoint.state_dict import get_optimizer_state_dict


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.fc(x).tanh())


def make():
    tessel.manual_seed(0)
    return Net()


def test_parameter_objects_are_stable():
    m = make()
    assert m.fc.weight is m.fc.weight and m.head.bias is m.head.bias
    first, second = list(m.parameters()), list(m.parameters())
    assert all(a is b for a, b in zip(first, second))
    assert dict(m.named_parameters())["fc.weight"] is m.fc.weight
    names = {id(p): n for n, p in m.named_parameters()}
    opt = tessel.optim.AdamW(m.parameters(), lr=1e-3)
    assert [names[id(p)] for p in opt.param_groups[0]["params"]] == ["fc.weight", "fc.bias", "head.weight",
                                                                       "head.bias"]


def test_optimizer_state_is_keyed_by_the_full_name_after_attribute_access():
    def train(touch):
        m = make()
        params = list(m.parameters())
        if touch:  # the attributes' own names are "weight" / "bias": the optimizer must still see full names
            assert m.fc.weight is params[0] and m.head.weight is params[2] and m.head.bias is params[3]
        opt = tessel.optim.SGD(params, lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            m(tessel.ones(2, 3)).pow(2).sum().backward()
            opt.step()
        names = sorted(get_optimizer_state_dict(m, opt)["state"])  # torch's layout: keyed by parameter FQN
        return [p.detach().numpy().copy() for p in m.parameters()], names
    touched, names = train(True)
    plain, _ = train(False)
    assert names == ["fc.bias", "fc.weight", "head.bias", "head.weight"]
    for a, b in zip(touched, plain):  # each parameter kept its own momentum buffer
        np.testing.assert_array_equal(a, b)


def test_optimizer_in_backward_through_post_accumulate_grad_hooks():
    x = tessel.tensor(np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32))
    ref = make()
    ref_opt = tessel.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        ref(x).pow(2).sum().backward()
        ref_opt.step()
    m = make()
    optimizers = {p: tessel.optim.SGD([p], lr=0.1) for p in m.parameters()}
    calls = []

    def step_and_free(p):
        calls.append(p)
        optimizers[p].step()
        optimizers[p].zero_grad()

    handles = [p.register_post_accumulate_grad_hook(step_and_free) for p in m.parameters()]
    for _ in range(2):
        m(x).pow(2).sum().backward()
        assert all(p.grad is None for p in m.parameters())  # each gradient freed as soon as it was used
    assert len(calls) == 8 and all(any(c is p for p in m.parameters()) for c in calls)
    for a, b in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
    for h in handles:
        h.remove()
    m(x).pow(2).sum().backward()
    assert len(calls) == 8 and m.fc.weight.grad is not None
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf tensors"):
        (m.fc.weight * 2).register_post_accumulate_grad_hook(step_and_free)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        tessel.zeros(2).register_post_accumulate_grad_hook(step_and_free)


def test_module_to_dtype_keeps_the_parameter_objects_so_an_optimizer_built_before_trains_as_torch():
    # torch: Module._apply sets param.data (and param.grad.data) to the cast tensor; an optimizer holding the
    # parameters keeps stepping them. Reference: the same net built in float64 and stepped with its own optimizer.
    net, ref = make(), make()
    ref.double()
    held = list(net.parameters())
    opt = tessel.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref_opt = tessel.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x = tessel.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=tessel.float64)
    net(x.float()).sum().backward()  # a float32 .grad, cast with its parameter below
    net.double()
    assert all(a is b for a, b in zip(held, net.parameters())) and net.fc.weight is held[0]
    assert {(p.dtype, p.grad.dtype) for p in held} == {(tessel.float64, tessel.float64)}
    net.zero_grad()
    for model, o in ((net, opt), (ref, ref_opt)):
        for _ in range(2):
            o.zero_grad()
            model(x).pow(2).sum().backward()
            o.step()
    for p, q in zip(net.parameters(), ref.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    # a tied weight stays one tensor under both names
    tied = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    tied.to(tessel.bfloat16)
    assert tied[1].weight is tied[0].weight and tied[0].weight.dtype == tessel.bfloat16


def test_data_assignment_of_another_dtype_changes_the_parameters_dtype_as_torch():
    lin = nn.Linear(2, 2)
    lin(tessel.ones(1, 2)).sum().backward()
    w = lin.weight
    lin.weight.data = lin.weight.data.double()
    lin.bias.data = lin.bias.data.double()
    assert lin.weight is w and w.dtype == tessel.float64 and w.requires_grad and w.is_leaf
    # the float32 .grad stays float32 and accumulates the new float64 gradient, as torch's in-place add
    lin(tessel.ones(1, 2, dtype=tessel.float64)).sum().backward()
    assert w.grad.dtype == tessel.float32 and w.grad.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
        nn.Parameter(tessel.zeros(3)).data = tessel.arange(3)
    q = tessel.ones(2)
    q.data = tessel.ones(2, dtype=tessel.float16)
    assert q.dtype == tessel.float16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def _untied(how):
    """Two Linears whose weights were tied, then untied (or re-tied) the way `how` says; returns the parameters an
    optimizer is built over afterwards, the tied original among them (torch steps every one of them)."""
    a, b, c = nn.Linear(2, 2), nn.Linear(2, 2, bias=how != "none"), nn.Linear(2, 2)
    b.weight = a.weight
    if how == "assign":
        b.weight = nn.Parameter(tessel.ones(2, 2))
    elif how == "other_side":  # the original's first owner gets the new one; the original lives on in b
        a.weight = nn.Parameter(tessel.ones(2, 2))
        return list(b.parameters())
    elif how == "register":
        b.register_parameter("weight", nn.Parameter(tessel.ones(2, 2)))
    elif how == "retie":
        b.weight = c.weight
        return list(a.parameters()) + list(c.parameters())
    elif how == "none":
        b.weight = None
    elif how == "three_way":
        c.weight = a.weight
        c.weight = nn.Parameter(tessel.ones(2, 2))
        return list(a.parameters()) + [b.bias]  # b.weight is a.weight
    elif how == "load_assign":
        b.load_state_dict({"weight": tessel.ones(2, 2), "bias": tessel.zeros(2)}, assign=True)
    return list(a.parameters())


@pytest.mark.parametrize("how", ["assign", "other_side", "register", "retie", "none", "three_way", "load_assign"])
def test_an_untied_weight_is_still_its_other_modules_and_an_optimizer_steps_it_as_torch(how):
    """Untying a tied weight (out.weight = nn.Parameter(tok.weight.detach().clone()), register_parameter,
    load_state_dict(assign=True), ...) replaces it in one module only; the other still holds it, so an optimizer
    built afterwards steps it (every such step raised "no longer the module's" before)."""
    tessel.manual_seed(0)
    params = _untied(how)
    before = [p.detach().clone().numpy() for p in params]
    opt = tessel.optim.SGD(params, lr=1.0)
    sum(p.sum() for p in params).backward()
    opt.step()
    for p, b in zip(params, before):
        np.testing.assert_allclose(p.detach().numpy(), b - 1.0, rtol=1e-6)
