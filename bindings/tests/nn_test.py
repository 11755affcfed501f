"""tessel.nn from Python: a Python subclass of tessel.nn.Module registers parameters, buffers and
children by attribute assignment, runs hooks around its Python forward, shares the C++ module's state
dict and modes, and is freed exactly once whoever drops the last reference; a GPT written in Python
matches the C++ GPT's loss and every gradient, and finite differences."""
import collections
import gc
import importlib
import io
import sys
import weakref

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F
from gpt import PyGPT  # examples/python/gpt.py


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim, bias=False)
        self.scale = nn.Parameter(tessel.ones(dim))
        self.register_buffer("offset", tessel.zeros(dim))
        self.hidden = hidden  # a plain attribute

    def forward(self, x, mult=1.0):
        return self.proj(F.gelu(self.fc(x))) * self.scale * mult + self.offset


def test_attribute_assignment_registers_parameters_buffers_and_children_in_torch_order():
    m = MLP(4, 8)
    assert [(n, p.shape) for n, p in m.named_parameters()] == [
        ("scale", (4,)), ("fc.weight", (8, 4)), ("fc.bias", (8,)), ("proj.weight", (4, 8))]
    assert [n for n, _ in m.named_buffers()] == ["offset"]
    assert [n for n, _ in m.named_modules()] == ["", "fc", "proj"]
    assert [n for n, _ in m.named_children()] == ["fc", "proj"] and list(m.children())[0] is m.fc
    assert list(m.state_dict()) == ["scale", "offset", "fc.weight", "fc.bias", "proj.weight"]
    assert m.hidden == 8 and isinstance(m.scale, nn.Parameter) and m.scale.requires_grad
    assert m.get_submodule("fc") is m.fc and m.get_parameter("fc.bias").shape == (8,)
    assert len(list(m.parameters())) == 4 and m._type_name == "MLP"
    assert m.get_buffer("offset").data_ptr() == m.offset.data_ptr()  # the buffer itself, not a copy
    with pytest.raises(AttributeError, match="has no buffer 'scale'"):
        m.get_buffer("scale")
    # Assigning a Parameter to an existing name replaces it (same shape required by the C++ module).
    m.scale = nn.Parameter(tessel.full((4,), 2.0))
    assert m.scale.tolist() == [2.0] * 4
    with pytest.raises(AttributeError, match="'MLP' object has no attribute 'nope'"):
        m.nope
    m.offset = tessel.full((4,), 3.0)  # torch: assigning a tensor to a buffer's name replaces the buffer
    assert m.offset.tolist() == [3.0] * 4 and list(m.state_dict())[1] == "offset"
    m.offset.copy_(tessel.ones(4))
    assert m.state_dict()["offset"].tolist() == [1.0] * 4


def test_assigning_a_plain_tensor_to_a_parameter_raises_type_error_as_torch():
    lin = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        lin.weight = tessel.zeros(2, 3)  # used to register it frozen (requires_grad False), silently
    lin.weight = nn.Parameter(tessel.zeros(2, 3))
    assert lin.weight.requires_grad and lin.weight.numpy().sum() == 0


def test_optimizer_reads_every_param_group_hyperparameter_at_each_step():
    # torch reads param_groups at every step: edits to weight_decay, betas, momentum... take effect.
    def one_step(edit):
        p = nn.Parameter(tessel.tensor(np.array([1.0, -2.0], dtype=np.float32)))
        opt = tessel.optim.AdamW([p], lr=0.1, weight_decay=0.0)
        edit(opt.param_groups[0])
        p.grad = tessel.tensor(np.array([0.5, 0.5], dtype=np.float32))
        opt.step()
        return p.numpy()
    plain = one_step(lambda g: None)
    decayed = one_step(lambda g: g.update(weight_decay=1.0))
    np.testing.assert_allclose(decayed, plain - 0.1 * 1.0 * np.array([1.0, -2.0]), rtol=1e-6)  # decoupled decay
    q = nn.Parameter(tessel.tensor(np.array([1.0], dtype=np.float32)))
    sgd = tessel.optim.SGD([q], lr=1.0)
    sgd.param_groups[0]["momentum"] = 0.5
    for _ in range(2):
        q.grad = tessel.tensor(np.array([1.0], dtype=np.float32))
        sgd.step()
    np.testing.assert_allclose(q.numpy(), [1.0 - 1.0 - 1.5])  # buf: 1, then 0.5 + 1


def test_optimizers_take_parameters_from_several_modules_and_frozen_ones_as_torch():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    opt = tessel.optim.SGD([a.weight, b.weight], lr=0.1)  # both named 'weight' locally: used to raise
    opt2 = tessel.optim.AdamW([{"params": a.parameters()}, {"params": b.parameters(), "lr": 0.0}])
    with pytest.warns(UserWarning, match="a parameter group with duplicate parameters"):  # torch: a warning
        twice = tessel.optim.SGD([a.weight, a.weight], lr=0.1)
    assert len(twice.param_groups[0]["params"]) == 1  # stepped once (torch steps it twice: its issue 40967)
    b.bias.requires_grad_(False)  # frozen: accepted and skipped while its grad is None (torch)
    frozen = tessel.optim.AdamW(b.parameters(), lr=0.1)
    (b(tessel.ones(1, 2)).sum() + a(tessel.ones(1, 2)).sum()).backward()
    before = b.bias.numpy().copy()
    for o in (opt, opt2, frozen):
        o.step()
    np.testing.assert_array_equal(b.bias.numpy(), before)


def test_parameters_and_buffers_registered_as_none_read_none_and_placements_compare_across_types():
    lin = nn.Linear(3, 2, bias=False)
    assert lin.bias is None  # used to raise AttributeError
    m = nn.Module()
    m.register_buffer("b", None)
    m.register_parameter("p", None)
    assert m.b is None and m.p is None
    with pytest.raises(AttributeError):
        m.missing
    from tessel.distributed.tensor import Partial, Replicate, Shard
    assert (Shard(0) == Replicate()) is False and Shard(0) != Replicate() and Shard(1) == Shard(1)
    assert Shard(0) in [Replicate(), Shard(0)] and len({Shard(0), Shard(0), Replicate(), Partial()}) == 3


def test_rms_norm_default_eps_is_the_dtypes_machine_epsilon_as_torch():
    x = np.random.default_rng(0).normal(size=(2, 8)) * 1e-3  # where eps is not negligible
    eps = np.finfo(np.float32).eps
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)  # torch: eps=None -> finfo(dtype).eps
    xt = tessel.tensor(x.astype(np.float32))
    np.testing.assert_allclose(nn.RMSNorm(8)(xt).numpy(), want, rtol=1e-4)
    np.testing.assert_allclose(F.rms_norm(xt, (8,)).numpy(), want, rtol=1e-4)
    np.testing.assert_allclose(F.rms_norm(xt, (8,), eps=1e-6).numpy(), x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-4)


def test_item_returns_the_python_number_of_the_dtype():
    big = tessel.tensor(2 ** 53 + 1)
    assert type(big.item()) is int and big.item() == 2 ** 53 + 1  # exact, as torch (a float rounded it)
    assert ["a", "b", "c"][tessel.tensor(2, dtype=tessel.int32).item()] == "c"
    assert tessel.tensor(True).item() is True and tessel.tensor(False).item() is False
    assert type(tessel.tensor([1.5]).sum().item()) is float


def test_call_runs_forward_with_non_tensor_arguments_and_matches_numpy():
    m = MLP(4, 8)
    x = tessel.randn(2, 4)
    y = m(x, 2.0)
    w1, b1 = m.fc.weight.numpy(), m.fc.bias.numpy()
    w2 = m.proj.weight.numpy()
    xa = x.numpy().astype(np.float64)
    h = xa @ w1.T + b1
    gelu = 0.5 * h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(y.numpy(), (gelu @ w2.T) * 2.0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.forward(x, 2.0).numpy(), y.numpy())


def test_hooks_rewrite_inputs_and_outputs_and_handles_remove_them():
    m = MLP(4, 8)
    x = tessel.randn(2, 4)
    base = m(x).numpy()
    calls = []
    pre = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    post = m.register_forward_hook(lambda mod, args, out: out + 1)
    bwd = m.register_full_backward_hook(lambda mod, gin, gout: calls.append((len(gin), gout[0].shape)))
    y = m(x.requires_grad_())
    np.testing.assert_allclose(y.numpy(), m(tessel.zeros(2, 4)).numpy(), rtol=1e-6)  # hooks still on: consistent
    y.sum().backward()
    assert calls and calls[0] == (1, (2, 4))
    for h in (pre, post, bwd):
        h.remove()
    np.testing.assert_allclose(m(x).numpy(), base, rtol=1e-6)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mult=1.0, *, bias=None):
        y = self.fc(x) * mult
        return y if bias is None else y + bias


def test_with_kwargs_hooks_see_and_rewrite_the_whole_call_as_torch():
    m = Scaled()
    x, b = tessel.randn(2, 4), tessel.randn(2, 4)
    w, c = m.fc.weight.numpy().astype(np.float64), m.fc.bias.numpy().astype(np.float64)
    affine = lambda xa: xa.astype(np.float64) @ w.T + c  # noqa: E731
    seen = []

    def pre(mod, args, kwargs):
        seen.append(("pre", len(args), type(args[1]).__name__, sorted(kwargs)))
        return (args[0] * 2, 3.0), {"bias": kwargs["bias"] - 1}  # doubles x, replaces mult and bias

    def post(mod, args, kwargs, out):
        seen.append(("post", args[1:], sorted(kwargs)))
        return out + kwargs["bias"]  # sees the call forward ran: bias - 1

    h1 = m.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = m.register_forward_hook(post, with_kwargs=True)
    y = m(x, 0.5, bias=b)
    want = affine(2 * x.numpy()) * 3.0 + 2 * (b.numpy() - 1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    assert seen == [("pre", 2, "float", ["bias"]), ("post", (3.0,), ["bias"])]
    # a tensor that the hook adds becomes forward's tensor argument (its gradient flows)
    h1.remove()
    extra = tessel.randn(2, 4).requires_grad_()
    h3 = m.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0],), {"bias": extra}), with_kwargs=True)
    m(x).sum().backward()
    np.testing.assert_allclose(extra.grad.numpy(), np.ones((2, 4)) * 2, rtol=1e-6)  # used by forward and post
    for h in (h2, h3):
        h.remove()
    with pytest.raises(RuntimeError, match=r"forward pre-hook must return None or a tuple of \(new_args, new_kwargs\)"):
        with m.register_forward_pre_hook(lambda mod, args, kwargs: args, with_kwargs=True):
            m(x)
    np.testing.assert_allclose(m(x).numpy(), affine(x.numpy()), rtol=1e-5, atol=1e-5)


def test_prepend_hooks_run_before_those_already_registered_as_torch():
    m = Scaled()
    order = []
    for name, prepend in (("a", False), ("b", True), ("c", False), ("d", True)):
        m.register_forward_pre_hook(lambda mod, args, n=name: order.append("pre " + n), prepend=prepend)
        m.register_forward_hook(lambda mod, args, out, n=name: order.append("post " + n), prepend=prepend)
        m.register_full_backward_pre_hook(lambda mod, g, n=name: order.append("bwd pre " + n), prepend=prepend)
        m.register_full_backward_hook(lambda mod, gi, go, n=name: order.append("bwd " + n), prepend=prepend)
    m(tessel.randn(2, 4).requires_grad_()).sum().backward()
    want = [k + " " + n for k in ("pre", "post", "bwd pre", "bwd") for n in "dbac"]
    assert order == want


def test_state_dict_hooks_rename_keys_both_ways_as_torch_libraries_use_them():
    # a module that stores its weight as "fc.weight" but publishes it as "proj.weight" (PEFT / torchtune key
    # remapping): the post hook renames on save, the load pre-hook renames back; hooks run per module with its
    # prefix, pre-hooks parents first, post-hooks children first
    order = []

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Scaled()

    model = Outer()

    def rename_out(mod, sd, prefix, meta):
        order.append(("post", type(mod).__name__, prefix))
        for suffix in ("weight", "bias"):
            sd[prefix + "proj." + suffix] = sd.pop(prefix + "fc." + suffix)

    def rename_in(mod, sd, prefix, meta, strict, missing, unexpected, errors):
        order.append(("load_pre", type(mod).__name__, prefix))
        for suffix in ("weight", "bias"):
            sd[prefix + "fc." + suffix] = sd.pop(prefix + "proj." + suffix)

    model.inner.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: order.append(("pre", prefix)))
    model.inner.register_state_dict_post_hook(rename_out)
    model.register_state_dict_post_hook(lambda mod, sd, prefix, meta: order.append(("post", "Outer", prefix)))
    model.inner.register_load_state_dict_pre_hook(rename_in)
    sd = model.state_dict()
    assert list(sd) == ["inner.proj.weight", "inner.proj.bias"]
    assert order == [("pre", "inner."), ("post", "Scaled", "inner."), ("post", "Outer", "")]
    fresh = Outer()
    fresh.inner.register_load_state_dict_pre_hook(rename_in)
    fresh.load_state_dict(sd)  # strict: the renamed keys match
    np.testing.assert_array_equal(fresh.inner.fc.weight.numpy(), model.inner.fc.weight.numpy())
    # a post hook may clear keys it expects to be missing before strict's check (torch's rule)
    part = Outer()
    part.register_load_state_dict_post_hook(lambda mod, keys: keys.missing_keys.remove("inner.fc.bias"))
    keys = part.load_state_dict({"inner.fc.weight": sd["inner.proj.weight"]})
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    with pytest.raises(ValueError, match=r'Error\(s\) in loading state_dict for Outer:\n\t'
                                         r'Missing key\(s\) in state_dict: "inner.fc.bias"'):
        Outer().load_state_dict({"inner.fc.weight": sd["inner.proj.weight"]})
    hooked = Outer()  # the same check, and words, when hooks leave keys missing
    hooked.register_load_state_dict_post_hook(lambda mod, keys: None)
    with pytest.raises(ValueError, match=r'Missing key\(s\) in state_dict: "inner.fc.bias". $'):
        hooked.load_state_dict({"inner.fc.weight": sd["inner.proj.weight"]})
    # the older private forms: a dict the state-dict hook returns replaces it; a load pre-hook without the module
    legacy = Scaled()
    legacy._register_state_dict_hook(lambda mod, sd, prefix, meta: {k.upper(): v for k, v in sd.items()})
    assert list(legacy.state_dict()) == ["FC.WEIGHT", "FC.BIAS"]
    seen = []
    legacy._register_load_state_dict_pre_hook(lambda sd, prefix, *rest: seen.append(sorted(sd)))
    legacy.load_state_dict(Scaled().state_dict())
    assert seen == [["fc.bias", "fc.weight"]]
    # hooks do not run where tessel reads the state dict for itself: casting keeps a hooked module's buffers
    # persistent (it asks which names the state dict holds)
    normed = nn.BatchNorm1d(2)
    normed.register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd.clear())
    normed.double()
    assert {n for n, _ in normed._state_dict()} >= {"running_mean", "running_var"}
    assert normed.running_mean.dtype == tessel.float64 and normed.state_dict() == {}
    with pytest.raises(RuntimeError, match="state_dict post-hook must return None"):
        bad = Scaled()
        bad.register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd)
        bad.state_dict()


def test_set_submodule_type_and_compile_follow_torch():
    # set_submodule at a dotted path, as LoRA / quantization injection does; the new layer computes
    outer = nn.Sequential(MLP(4, 8), nn.Linear(4, 2))
    replacement = nn.Linear(4, 8, bias=False)
    outer.set_submodule("0.fc", replacement)
    assert outer[0].fc is replacement and "0.fc.bias" not in outer.state_dict()
    x = tessel.randn(3, 4)
    h = F.gelu(x @ replacement.weight.t())
    want = (h @ outer[0].proj.weight.t()) * outer[0].scale + outer[0].offset
    np.testing.assert_allclose(outer[0](x).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(AttributeError, match="has no attribute `extra`"):
        outer.set_submodule("0.extra", nn.Linear(2, 2), strict=True)
    outer.set_submodule("0.extra", nn.Linear(2, 2))  # not strict: added
    assert isinstance(outer[0].extra, nn.Linear)
    with pytest.raises(AttributeError, match="`hidden` is not an nn.Module"):
        outer.set_submodule("0.hidden", nn.Linear(2, 2))
    with pytest.raises(ValueError, match="is not an nn.Module"):
        outer.set_submodule("1", "linear")
    # Module.type(dtype) casts as .to(dtype); Module.compile() leaves an eager module as it is
    assert outer.type(tessel.float64) is outer and {p.dtype for p in outer.parameters()} == {tessel.float64}
    assert outer.compile() is None and outer[1](tessel.ones(1, 4, dtype=tessel.float64)).dtype == tessel.float64


def test_a_bare_module_is_a_container_as_in_torch():
    m = nn.Module()
    m.first = nn.Linear(2, 2)
    m.add_module("second", nn.Linear(2, 3))
    m.register_buffer("step", tessel.zeros(1))
    assert isinstance(m, nn.Module) and type(m).__name__ == "Module"
    assert [n for n, _ in m.named_parameters()] == ["first.weight", "first.bias", "second.weight", "second.bias"]
    assert list(m.state_dict())[-1] == "second.bias" and "step" in m.state_dict()
    assert repr(m).startswith("Module(\n  (first): Linear(in_features=2, out_features=2, bias=True)")
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required "forward" function'):
        m(tessel.ones(2))
    holder = MLP(4, 8)
    holder.extras = nn.Module()  # a bare module as a child namespace
    holder.extras.scale = nn.Parameter(tessel.ones(1))
    assert "extras.scale" in holder.state_dict()


def test_child_outlives_its_parent_and_every_module_is_freed_exactly_once():
    m = MLP(4, 8)
    parent = weakref.ref(m)
    fc = m.fc
    weight = fc.weight.numpy()
    child = weakref.ref(fc)
    del m
    gc.collect()
    assert parent() is None  # fc co-owns its C++ module: the parent goes, as in torch
    np.testing.assert_array_equal(fc.weight.numpy(), weight)
    assert fc(tessel.ones(1, 4)).shape == (1, 8)
    del fc
    gc.collect()
    assert child() is None  # and then everything goes
    # Many trees built and dropped in every order: a double free or use-after-free would crash here.
    for i in range(200):
        seq = nn.Sequential(MLP(4, 8), nn.Sequential(nn.Linear(4, 4), MLP(4, 4)))
        keep = [seq, seq[0], seq[1][1].fc][i % 3]
        del seq
        assert keep(tessel.ones(2, 4)).shape == (2, 4)
        del keep
    gc.collect()


def test_a_module_may_have_two_parents_but_cannot_contain_itself():
    lin = nn.Linear(2, 2)
    a, b = nn.Sequential(lin), nn.Sequential()
    b.add_module("x", lin)  # torch: a module may sit in several parents
    assert b.x is lin and a[0] is lin
    with pytest.raises(ValueError, match="the module is an ancestor of Sequential"):
        b.add_module("self", b)
    outer = nn.Sequential(a)
    with pytest.raises(ValueError, match="ancestor"):
        a.add_module("loop", outer)
    m = MLP(2, 2)
    replacement = nn.Linear(2, 2)
    m.fc = replacement  # replaces the child, as torch
    assert m.fc is replacement
    m.fc = lin  # a's child too now
    assert m.fc is lin and a[0] is lin


def test_state_dict_round_trip_modes_zero_grad_and_apply():
    a, b = MLP(4, 8), MLP(4, 8)
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = tessel.randn(3, 4)
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    with pytest.raises(ValueError, match="fc.bias"):
        b.load_state_dict({k: v for k, v in a.state_dict().items() if k != "fc.bias"})
    missing, unexpected = b.load_state_dict({"extra": tessel.ones(1)}, strict=False)
    assert "fc.bias" in missing and unexpected == ["extra"]
    assert b.eval() is b and not b.training and not b.fc.training
    assert b.train().fc.training
    b(x).sum().backward()
    assert all(p.grad is not None for p in b.parameters())
    b.zero_grad()
    assert all(p.grad is None for p in b.parameters())
    seen = []
    b.apply(lambda mod: seen.append(mod._type_name))
    assert seen == ["Linear", "Linear", "MLP"]  # children first, like torch


def test_containers_follow_torch():
    seq = nn.Sequential(nn.Linear(3, 5), nn.SiLU(), nn.Linear(5, 2))
    x = tessel.randn(4, 3)
    np.testing.assert_allclose(seq(x).numpy(), seq[2](F.silu(seq[0](x))).numpy(), rtol=1e-6)
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    layers.append(nn.GELU())
    assert len(layers) == 4 and [n for n, _ in layers.named_children()] == ["0", "1", "2", "3"]
    assert layers[-1] is list(layers)[3]
    d = nn.ModuleDict({"a": nn.Linear(2, 3)})
    d["b"] = nn.ReLU()
    assert list(d) == ["a", "b"] and "a" in d and d["a"].out_features == 3
    with pytest.raises(NotImplementedError, match="ModuleList is not callable"):
        layers(x)
    np.testing.assert_array_equal(nn.Dropout(0.0)(x).numpy(), x.numpy())


def test_embedding_padding_idx_row_starts_at_zero_and_gets_no_gradient():
    emb = nn.Embedding(6, 3, padding_idx=-1)
    assert emb.padding_idx == 5
    np.testing.assert_array_equal(emb.weight.numpy()[5], [0.0, 0.0, 0.0])
    idx = tessel.tensor([[5, 2, 5], [2, 0, 1]])
    emb(idx).sum().backward()
    g = emb.weight.grad.numpy()
    np.testing.assert_array_equal(g[5], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(g[2], [2.0, 2.0, 2.0])
    w = tessel.randn(4, 2, requires_grad=True)
    F.embedding(tessel.tensor([0, 0, 3]), w, padding_idx=0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0], [0, 0], [0, 0], [1, 1]])
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):  # torch's assert
        nn.Embedding(4, 2, padding_idx=4)
    with pytest.raises(NotImplementedError, match="sparse gradients are not supported"):
        nn.Embedding(4, 2, sparse=True)


def test_embedding_from_pretrained_shares_the_table_and_freezes_it_by_default():
    # torch: the given tensor's storage becomes the weight (no copy); frozen unless freeze=False; the
    # padding row is left as given (checked against torch 2.15).
    w = tessel.tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3))
    e = nn.Embedding.from_pretrained(w)
    assert not e.weight.requires_grad and not w.requires_grad
    assert e(tessel.tensor([1, 3])).tolist() == [[3.0, 4.0, 5.0], [9.0, 10.0, 11.0]]
    e2 = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=0)
    assert e2.weight.requires_grad and e2.padding_idx == 0 and e2.weight[0].tolist() == [0.0, 1.0, 2.0]
    with tessel.no_grad():
        w[1, 0] = 100.0
    assert e2.weight[1].tolist() == [100.0, 4.0, 5.0]  # shared storage
    e2(tessel.tensor([0, 2, 2])).sum().backward()
    assert e2.weight.grad[:, 0].tolist() == [0.0, 0.0, 2.0, 0.0]  # padding_idx still passes no gradient
    with pytest.raises(ValueError, match="Shape of weight does not match"):
        nn.Embedding(3, 3, _weight=w)


def test_embedding_max_norm_renormalizes_the_rows_it_looks_up_in_place_as_torch():
    # torch: before the lookup, each looked-up row with norm > max_norm is scaled by max_norm / (norm + 1e-7),
    # in place; rows not looked up keep their values. Reference in float64.
    emb = nn.Embedding(5, 3, max_norm=1.0)
    assert emb.max_norm == 1.0 and emb.norm_type == 2.0
    with tessel.no_grad():
        emb.weight.copy_(tessel.tensor([[3.0, 0, 4], [0.2, 0.2, 0.2], [0, 6, 8], [1, 1, 1], [0, 0, 9]]))
    before = emb.weight.numpy().astype(np.float64)
    idx = tessel.tensor([[0, 1], [3, 0]])
    out = emb(idx)
    norms = np.linalg.norm(before, axis=1)
    want = before.copy()
    for r in (0, 1, 3):
        if norms[r] > 1.0:
            want[r] *= 1.0 / (norms[r] + 1e-7)
    np.testing.assert_allclose(emb.weight.numpy(), want, rtol=1e-6)  # rows 2 and 4 untouched (norms 10, 9)
    np.testing.assert_allclose(out.detach().numpy(), want[[[0, 1], [3, 0]]], rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [2, 1, 0, 1, 0])  # the lookup's gradient only
    # One table looked up twice before backward (the second lookup renormalizes in place): the first
    # lookup's backward needs only its indices, as torch's.
    t = tessel.tensor([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], requires_grad=True)
    first = F.embedding(tessel.tensor([0, 1]), t, max_norm=1.0)
    second = F.embedding(tessel.tensor([1, 2, 2]), t, max_norm=1.0)
    (first.sum() + (second * second).sum()).backward()
    np.testing.assert_allclose(t.grad.numpy(), [[1, 1], [1, 1 + 2 * 2.0 / (2 + 1e-7)], [4, 0]], rtol=1e-6)
    w = tessel.tensor([[1.0, -2.0], [0.5, 0.5]])
    F.embedding(tessel.tensor([0]), w, max_norm=1.5, norm_type=1.0)  # L1 norm 3 -> 1.5
    np.testing.assert_allclose(w.numpy(), [[1.5 / (3 + 1e-7), -3.0 / (3 + 1e-7)], [0.5, 0.5]], rtol=1e-6)


def test_adam_is_torchs_coupled_l2_adam_and_leaves_grad_untouched():
    def reference(p, grads, lr, b1, b2, eps, wd):  # torch.optim.Adam's documented update, in float64
        m, v = np.zeros_like(p), np.zeros_like(p)
        for t, g in enumerate(grads, start=1):
            g = g + wd * p
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        return p

    rng = np.random.default_rng(0)
    start = rng.standard_normal((3, 2))
    grads = [rng.standard_normal((3, 2)) for _ in range(3)]
    for wd in (0.0, 0.1):
        w = tessel.tensor(start, requires_grad=True)
        opt = tessel.optim.Adam([w], lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=wd)
        for g in grads:
            w.grad = tessel.tensor(g)
            opt.step()
            np.testing.assert_array_equal(w.grad.numpy(), g)  # the L2 term never lands in .grad
        np.testing.assert_allclose(w.detach().numpy(), reference(start, grads, 0.05, 0.8, 0.99, 1e-6, wd), rtol=1e-10)
    w = tessel.tensor(start, requires_grad=True)
    opt = tessel.optim.Adam([w], lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)  # = AdamW
    ref = tessel.tensor(start, requires_grad=True)
    opt_ref = tessel.optim.AdamW([ref], lr=0.05, weight_decay=0.1)
    w.grad, ref.grad = tessel.tensor(grads[0]), tessel.tensor(grads[0])
    opt.step()
    opt_ref.step()
    np.testing.assert_array_equal(w.detach().numpy(), ref.detach().numpy())
    with pytest.raises(NotImplementedError, match="Adam: capturable is not supported"):
        tessel.optim.Adam([w], capturable=True)


def test_data_loader_samplers_and_collate_follow_torch_utils_data():
    from tessel.utils.data import (DataLoader, DistributedSampler, IterableDataset, TensorDataset,
                                   default_collate)
    x, y = tessel.arange(20.0).reshape(10, 2), tessel.arange(10)
    ds = TensorDataset(x, y)
    batches = list(DataLoader(ds, batch_size=4))
    assert [tuple(b[0].shape) for b in batches] == [(4, 2), (4, 2), (2, 2)] and len(DataLoader(ds, batch_size=4)) == 3
    assert batches[2][1].tolist() == [8, 9]
    assert len(list(DataLoader(ds, batch_size=4, drop_last=True))) == 2
    tessel.manual_seed(3)
    first = [b[1].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    tessel.manual_seed(3)
    again = [b[1].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    assert first == again and sorted(first[0] + first[1]) == list(range(10)) and first[0] != [0, 1, 2, 3, 4]
    # torch's DistributedSampler without shuffle: 10 samples over 3 ranks pad to 12 (repeating 0, 1) or
    # drop to 9.
    assert [list(DistributedSampler(ds, 3, r, shuffle=False)) for r in range(3)] == \
        [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    assert [list(DistributedSampler(ds, 3, r, shuffle=False, drop_last=True)) for r in range(3)] == \
        [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    s0, s1 = DistributedSampler(ds, 2, 0, seed=7), DistributedSampler(ds, 2, 1, seed=7)
    assert sorted(list(s0) + list(s1)) == list(range(10))  # one permutation split between the ranks
    epoch0 = list(s0)
    s0.set_epoch(1)
    assert list(s0) != epoch0
    loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, 2, 1, shuffle=False))
    assert [b[1].tolist() for b in loader] == [[1, 3], [5, 7], [9]]
    collated = default_collate([{"a": 1, "b": (2.5, np.zeros(2))}, {"a": 3, "b": (4.5, np.ones(2))}])
    assert collated["a"].dtype == tessel.int64 and collated["a"].tolist() == [1, 3]
    assert collated["b"][0].dtype == tessel.float64 and collated["b"][1].shape == (2, 2)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=2)] == [[0, 1], [2, 3], [4]]
    # torch's collate rules: numpy scalars keep their dtype, tuples become lists, mappings keep their type,
    # a mix of Python ints and floats is float32; batch_size=None converts each sample (default_convert).
    from collections import OrderedDict
    from tessel.utils.data import ConcatDataset, Subset, random_split
    assert default_collate([np.float32(1.5), np.float32(2)]).dtype == tessel.float32
    assert default_collate([np.int32(1), np.int32(2)]).dtype == tessel.int32
    assert default_collate([1, 2.5]).dtype == tessel.float32 and default_collate([True, False]).dtype == tessel.bool
    assert isinstance(default_collate([(1, 2), (3, 4)]), list)
    assert isinstance(default_collate([OrderedDict(a=1), OrderedDict(a=2)]), OrderedDict)
    one = list(DataLoader([np.arange(3), np.arange(3)], batch_size=None))
    assert isinstance(one[0], tessel.Tensor) and one[0].tolist() == [0, 1, 2]
    assert list(DataLoader([1, 2], batch_size=None, collate_fn=lambda v: ("c", v))) == [("c", 1), ("c", 2)]

    class Sized(Stream):
        def __len__(self):
            return 5

    assert len(DataLoader(Sized(), batch_size=2)) == 3 and len(DataLoader(Sized(), batch_size=2, drop_last=True)) == 2
    tessel.manual_seed(0)
    parts = random_split(ds, [0.7, 0.3])
    assert [len(p) for p in parts] == [7, 3] and sorted(parts[0].indices + parts[1].indices) == list(range(10))
    both = ConcatDataset([Subset(ds, [9, 8]), ds])
    assert len(both) == 12 and both[1][1].item() == 8 and both[2][1].item() == 0 and both[-1][1].item() == 9
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=DistributedSampler(ds, 2, 0), shuffle=True)


def test_multihead_attention_matches_a_numpy_reference_with_torchs_mask_conventions():
    rng = np.random.default_rng(5)
    E, H, L, S, N = 8, 2, 3, 4, 2
    W, b = rng.standard_normal((3 * E, E)) * 0.3, rng.standard_normal(3 * E) * 0.1
    Wo, bo = rng.standard_normal((E, E)) * 0.3, rng.standard_normal(E) * 0.1
    q, k, v = rng.standard_normal((N, L, E)), rng.standard_normal((N, S, E)), rng.standard_normal((N, S, E))
    am = np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=bool)  # True: NOT attended (torch's MHA)
    kpm = np.array([[0, 0, 0, 1], [0, 1, 0, 0]], dtype=bool)

    def reference(attn_mask, key_padding_mask):
        hd = E // H
        Q, K, V = q @ W[:E].T + b[:E], k @ W[E:2 * E].T + b[E:2 * E], v @ W[2 * E:].T + b[2 * E:]
        Q, K, V = (t.reshape(N, -1, H, hd).transpose(0, 2, 1, 3) for t in (Q, K, V))
        sc = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(hd)
        if attn_mask is not None:
            sc = sc + np.where(attn_mask, -np.inf, 0.0)[None, None]
        if key_padding_mask is not None:
            sc = sc + np.where(key_padding_mask, -np.inf, 0.0)[:, None, None, :]
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr = pr / pr.sum(-1, keepdims=True)
        return (pr @ V).transpose(0, 2, 1, 3).reshape(N, L, E) @ Wo.T + bo, pr

    m = nn.MultiheadAttention(E, H, batch_first=True, dtype=tessel.float64)
    assert sorted(m.state_dict()) == ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"]
    m.load_state_dict({"in_proj_weight": tessel.tensor(W), "in_proj_bias": tessel.tensor(b),
                       "out_proj.weight": tessel.tensor(Wo), "out_proj.bias": tessel.tensor(bo)})
    T = tessel.tensor
    out, weights = m(T(q), T(k), T(v), key_padding_mask=T(kpm), attn_mask=T(am))
    want, probs = reference(am, kpm)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.detach().numpy(), probs.mean(1), rtol=1e-10, atol=1e-12)
    out, per_head = m(T(q), T(k), T(v), average_attn_weights=False)
    want, probs = reference(None, None)
    np.testing.assert_allclose(per_head.detach().numpy(), probs, rtol=1e-10, atol=1e-12)
    seq_first = nn.MultiheadAttention(E, H, dtype=tessel.float64)  # batch_first=False: [L, N, E]
    seq_first.load_state_dict(m.state_dict())
    out_sf, none = seq_first(T(q.transpose(1, 0, 2)), T(k.transpose(1, 0, 2)), T(v.transpose(1, 0, 2)), need_weights=False)
    assert none is None
    np.testing.assert_allclose(out_sf.detach().numpy().transpose(1, 0, 2), want, rtol=1e-10, atol=1e-12)
    out_sf.sum().backward()
    assert seq_first.in_proj_weight.grad.shape == (3 * E, E) and np.isfinite(seq_first.in_proj_weight.grad.numpy()).all()
    with pytest.raises(AssertionError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    # Unbatched [L, E] inputs and a float key_padding_mask (added to the scores), as torch.
    o, wts = m(T(q[0]), T(k[0]), T(v[0]))
    want, probs = reference(None, None)
    np.testing.assert_allclose(o.detach().numpy(), want[0], rtol=1e-10, atol=1e-12)
    assert tuple(wts.shape) == (L, S)
    fmask = np.where(kpm, -1e9, 0.0)
    o, _ = m(T(q), T(k), T(v), key_padding_mask=T(fmask))
    np.testing.assert_allclose(o.detach().numpy(), reference(None, kpm)[0], rtol=1e-8, atol=1e-10)


def test_transformer_encoder_matches_a_numpy_reference():
    E, H, F_, L, N = 8, 2, 16, 5, 2
    tessel.manual_seed(3)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=F_, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2)
    sd = {k: v.detach().numpy().astype(np.float64) for k, v in enc.state_dict().items()}
    assert sd["layers.0.linear1.weight"].shape == (F_, E) and "layers.1.self_attn.in_proj_weight" in sd
    np.testing.assert_array_equal(sd["layers.0.linear1.weight"], sd["layers.1.linear1.weight"])  # copies
    x = np.random.default_rng(6).standard_normal((N, L, E)).astype(np.float32)
    causal = np.triu(np.full((L, L), -np.inf), 1)  # a float mask, as nn.Transformer.generate_square_subsequent_mask

    def ln(t, w, b):
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * w + b

    def layer_ref(t, p):
        W, b = sd[p + "self_attn.in_proj_weight"], sd[p + "self_attn.in_proj_bias"]
        Q, K, V = (t @ W[i * E:(i + 1) * E].T + b[i * E:(i + 1) * E] for i in range(3))
        Q, K, V = (u.reshape(N, L, H, E // H).transpose(0, 2, 1, 3) for u in (Q, K, V))
        sc = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(E // H) + causal
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        att = (pr @ V).transpose(0, 2, 1, 3).reshape(N, L, E) @ sd[p + "self_attn.out_proj.weight"].T + \
            sd[p + "self_attn.out_proj.bias"]
        t = ln(t + att, sd[p + "norm1.weight"], sd[p + "norm1.bias"])
        ff = np.maximum(t @ sd[p + "linear1.weight"].T + sd[p + "linear1.bias"], 0) @ sd[p + "linear2.weight"].T + \
            sd[p + "linear2.bias"]
        return ln(t + ff, sd[p + "norm2.weight"], sd[p + "norm2.bias"])

    want = layer_ref(layer_ref(x.astype(np.float64), "layers.0."), "layers.1.")
    got = enc(tessel.tensor(x), mask=tessel.tensor(causal.astype(np.float32))).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    layer.double()
    layer.eval()
    copies = nn.TransformerEncoder(layer, 2)  # the copies keep the layer's dtype and mode, as deepcopy does
    assert next(iter(copies.parameters())).dtype == tessel.float64 and not copies.layers[1].training
    assert copies(tessel.tensor(x[0]).double()).shape == (L, E)  # unbatched


def test_transformer_decoder_and_full_transformer_match_a_numpy_reference():
    # One post-norm decoder layer (causal self-attention, cross-attention with a memory key padding mask,
    # feed-forward) against numpy in float64; nn.Transformer's keys, init and shapes; norm_first.
    E, H, F_, T, S, N = 8, 2, 16, 4, 5, 2
    tessel.manual_seed(4)
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=F_, dropout=0.0, batch_first=True, dtype=tessel.float64)
    sd = {k: v.detach().numpy() for k, v in layer.state_dict().items()}
    assert sorted(k.split(".")[0] for k in sd if k.endswith("weight")) == sorted(
        ["linear1", "linear2", "multihead_attn", "multihead_attn", "norm1", "norm2", "norm3", "self_attn",
         "self_attn"])
    rng = np.random.default_rng(8)
    tgt, mem = rng.standard_normal((N, T, E)), rng.standard_normal((N, S, E))
    causal = np.triu(np.full((T, T), -np.inf), 1)
    kpm = np.zeros((N, S), dtype=bool)
    kpm[1, -2:] = True

    def ln(t, w, b):
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * w + b

    def mha(p, q_in, kv_in, add):
        W, b = sd[p + "in_proj_weight"], sd[p + "in_proj_bias"]
        Q = q_in @ W[:E].T + b[:E]
        K, V = (kv_in @ W[i * E:(i + 1) * E].T + b[i * E:(i + 1) * E] for i in (1, 2))
        Q, K, V = (u.reshape(N, -1, H, E // H).transpose(0, 2, 1, 3) for u in (Q, K, V))
        sc = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(E // H) + add
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        return (pr @ V).transpose(0, 2, 1, 3).reshape(N, -1, E) @ sd[p + "out_proj.weight"].T + sd[p + "out_proj.bias"]

    x = ln(tgt + mha("self_attn.", tgt, tgt, causal), sd["norm1.weight"], sd["norm1.bias"])
    x = ln(x + mha("multihead_attn.", x, mem, np.where(kpm, -np.inf, 0.0)[:, None, None, :]), sd["norm2.weight"],
           sd["norm2.bias"])
    ff = np.maximum(x @ sd["linear1.weight"].T + sd["linear1.bias"], 0) @ sd["linear2.weight"].T + sd["linear2.bias"]
    want = ln(x + ff, sd["norm3.weight"], sd["norm3.bias"])
    mask = nn.Transformer.generate_square_subsequent_mask(T).double()
    np.testing.assert_array_equal(mask.numpy(), causal)
    got = layer(tessel.tensor(tgt), tessel.tensor(mem), tgt_mask=mask, memory_key_padding_mask=tessel.tensor(kpm))
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    dec = nn.TransformerDecoder(layer, 2)
    np.testing.assert_array_equal(dec.layers[0].linear1.weight.detach().numpy(),
                                  dec.layers[1].linear1.weight.detach().numpy())  # copies of one layer
    assert list(dec(tessel.tensor(tgt), tessel.tensor(mem)).shape) == [N, T, E]

    class MyLayer(nn.Module):  # a user's own layer class: deep-copied as torch does
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(E, E)

        def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
            return src + self.fc(src)
    mine = nn.TransformerEncoder(MyLayer(), 3)
    assert len(mine.layers) == 3 and list(mine(tessel.randn(2, T, E)).shape) == [2, T, E]
    model = nn.Transformer(E, H, 2, 1, F_, dropout=0.0, norm_first=True)
    keys = model.state_dict()
    assert "encoder.norm.weight" in keys and "decoder.layers.0.multihead_attn.in_proj_weight" in keys
    assert sum(1 for k in keys if k.startswith("encoder.layers.") and k.endswith("linear1.weight")) == 2
    w = model.decoder.layers[0].linear1.weight.detach().numpy()
    assert np.abs(w).max() <= np.sqrt(6.0 / (E + F_)) + 1e-7  # xavier-uniform, re-drawn per parameter
    assert not np.array_equal(model.encoder.layers[0].linear1.weight.detach().numpy(),
                              model.encoder.layers[1].linear1.weight.detach().numpy())
    out = model(tessel.randn(S, N, E), tessel.randn(T, N, E), tgt_mask=nn.Transformer.generate_square_subsequent_mask(T))
    assert list(out.shape) == [T, N, E]
    out.sum().backward()
    assert model.encoder.layers[0].self_attn.in_proj_weight.grad is not None
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(tessel.randn(S, N, E), tessel.randn(T, N + 1, E))
    # torch's submodule order (parameters() and the state dict list as torch's), Dropout submodules, and a
    # parameterless activation module shared by the copies
    assert [k.split(".")[0] for k, _ in layer.named_parameters()][::2] == [
        "self_attn", "self_attn", "multihead_attn", "multihead_attn", "linear1", "linear2", "norm1", "norm2", "norm3"]
    assert layer.dropout3.p == 0.0 and not isinstance(layer, nn.TransformerEncoderLayer)
    gelu_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, F_, activation=nn.GELU()), 2)
    assert list(gelu_dec(tessel.randn(T, N, E), tessel.randn(S, N, E)).shape) == [T, N, E]
    prelu = nn.TransformerEncoderLayer(E, H, F_, activation=nn.PReLU())  # torch's child "activation", trained
    assert "activation.weight" in prelu.state_dict()


def test_bilinear_softmax2d_and_gumbel_softmax():
    rng = np.random.default_rng(23)
    tessel.manual_seed(5)
    m = nn.Bilinear(3, 4, 2, dtype=tessel.float64)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(5, 4))
    W, bias = m.weight.detach().numpy(), m.bias.detach().numpy()
    np.testing.assert_allclose(m(tessel.tensor(a), tessel.tensor(b)).detach().numpy(),
                               np.einsum("ni,oij,nj->no", a, W, b) + bias, rtol=1e-12)
    assert np.abs(W).max() <= 1 / np.sqrt(3) and repr(m) == "Bilinear(in1_features=3, in2_features=4, out_features=2, bias=True)"
    x = rng.normal(size=(2, 3, 4, 5))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(nn.Softmax2d()(tessel.tensor(x)).numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)
    logits = tessel.tensor(rng.normal(size=(64, 4)), requires_grad=True)
    tessel.manual_seed(6)
    soft = F.gumbel_softmax(logits, tau=0.7)
    np.testing.assert_allclose(soft.detach().numpy().sum(-1), 1.0, rtol=1e-12)
    tessel.manual_seed(6)
    hard = F.gumbel_softmax(logits, tau=0.7, hard=True)
    h = hard.detach().numpy()
    assert set(np.unique(h).tolist()) == {0.0, 1.0} and (h.sum(-1) == 1).all()
    np.testing.assert_array_equal(h.argmax(-1), soft.detach().numpy().argmax(-1))  # the same noise, its argmax
    (hard * tessel.tensor(rng.normal(size=(64, 4)))).sum().backward()  # straight-through: the soft sample's gradient
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0


def test_deepcopy_copies_modules_as_torch_does():
    # torch's copy.deepcopy(model): EMA / target networks, the Annotated Transformer's clones(). Values,
    # state-dict keys, tied weights (tied again in the copy), None registrations, plain attributes, C++ layers'
    # constructor arguments (LayerNorm's eps) and the training flag carry over; the copy is independent.
    import copy

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 8, padding_idx=0)
            self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
                                         for _ in range(2)])
            self.norm = nn.LayerNorm(8, eps=1e-3)
            self.head = nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight  # tied
            self.scale = 2.0
            self.register_buffer("pos", tessel.arange(4).float())
            self.register_buffer("cache", tessel.zeros(2), persistent=False)
            self.register_parameter("extra", None)

        def forward(self, idx):
            return self.head(self.norm(self.blocks[1](self.blocks[0](self.emb(idx))))) * self.scale

    tessel.manual_seed(0)
    net = Net()
    net.eval()
    twin = copy.deepcopy(net)
    idx = tessel.tensor([[1, 2, 3, 4]])
    np.testing.assert_array_equal(net(idx).detach().numpy(), twin(idx).detach().numpy())
    assert list(twin.state_dict()) == list(net.state_dict()) and "cache" not in twin.state_dict()
    assert not twin.training and not twin.blocks[1].training and twin.extra is None and twin.scale == 2.0
    with tessel.no_grad():
        twin.emb.weight.fill_(0.5)
    assert np.all(twin.head.weight.detach().numpy() == 0.5)  # still tied in the copy
    assert not np.any(net.emb.weight.detach().numpy() == 0.5)  # the original is untouched
    twin.train()
    twin(idx).sum().backward()
    assert twin.emb.weight.grad is not None and net.emb.weight.grad is None
    clones = nn.ModuleList([copy.deepcopy(nn.Linear(3, 3)) for _ in range(3)])
    assert len(list(clones.parameters())) == 6
    gru = nn.GRU(3, 4, num_layers=2)
    assert list(copy.deepcopy(gru).state_dict()) == list(gru.state_dict())


def test_lr_schedulers_give_torchs_learning_rates():
    # torch 2.15's lr after each of 12 steps (SGD lr 0.1), recorded once from torch itself.
    want = {"step": [0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125, 0.00625],
            "multistep": [0.1, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001, 0.0001, 0.0001, 0.0001, 0.0001],
            "exp": [0.09, 0.081, 0.0729, 0.06561, 0.059049, 0.0531441, 0.04782969, 0.043046721, 0.0387420489, 0.03486784401, 0.031381059609, 0.028242953648],
            "cos": [0.091405764747, 0.068905764747, 0.041094235253, 0.018594235253, 0.01, 0.018594235253, 0.041094235253, 0.068905764747, 0.091405764747, 0.1, 0.091405764747, 0.068905764747],
            "linear": [0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
            "const": [0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
            "seq": [0.04, 0.07, 0.1, 0.093301270189, 0.075, 0.05, 0.025, 0.006698729811, 0.0, 0.006698729811, 0.025, 0.05],
            "plateau": [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.0125, 0.0125]}
    S = tessel.optim.lr_scheduler
    makers = {
        "step": lambda o: S.StepLR(o, 3, 0.5), "multistep": lambda o: S.MultiStepLR(o, [2, 5, 9], 0.1),
        "exp": lambda o: S.ExponentialLR(o, 0.9), "cos": lambda o: S.CosineAnnealingLR(o, 5, 0.01),
        "linear": lambda o: S.LinearLR(o, 0.25, 1.0, 4), "const": lambda o: S.ConstantLR(o, 0.5, 3),
        "seq": lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 3), S.CosineAnnealingLR(o, 6, 0.0)], [3]),
        "plateau": lambda o: S.ReduceLROnPlateau(o, "min", 0.5, 1)}
    metric = [5, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2]
    for name, make in makers.items():
        w = tessel.zeros(1, requires_grad=True)
        opt = tessel.optim.SGD([w], lr=0.1)
        sched, got = make(opt), []
        for i in range(12):
            opt.step()
            sched.step(metric[i]) if name == "plateau" else sched.step()
            got.append(opt.param_groups[0]["lr"])
        np.testing.assert_allclose(got, want[name], rtol=1e-9, atol=1e-12, err_msg=name)
    # Chaining (two schedulers on one optimizer; a hand-set lr carried on) and a SequentialLR resumed from
    # its state_dict, again against torch 2.15's values.
    chained = {"chain": [0.09000000000000001, 0.08100000000000002, 0.007290000000000002, 0.006561000000000002, 0.005904900000000002, 0.0005314410000000002, 0.0004782969000000002, 0.0004304672100000002], "warm_exp": [0.010000000000000002, 0.02925000000000001, 0.04455000000000001, 0.05649750000000003, 0.06561000000000003, 0.059049000000000025, 0.05314410000000002], "manual": [0.1, 0.05, 0.05, 0.5, 0.5, 0.25], "resume": [[0.03454915028125263, 0.03454915028125263], [0.009549150281252633, 0.009549150281252633], [0.0, 0.0], [0.009549150281252628, 0.009549150281252628]]}

    def opt1():
        return tessel.optim.SGD([tessel.zeros(1, requires_grad=True)], lr=0.1)

    o = opt1()
    a, b = S.ExponentialLR(o, 0.9), S.MultiStepLR(o, [3, 6], 0.1)
    got = []
    for _ in range(8):
        o.step(), a.step(), b.step()
        got.append(o.param_groups[0]["lr"])
    np.testing.assert_allclose(got, chained["chain"], rtol=1e-9)
    o = opt1()
    a, b = S.LinearLR(o, 0.1, 1.0, 4), S.ExponentialLR(o, 0.9)
    got = [o.param_groups[0]["lr"]]
    for _ in range(6):
        o.step(), a.step(), b.step()
        got.append(o.param_groups[0]["lr"])
    np.testing.assert_allclose(got, chained["warm_exp"], rtol=1e-9)
    o, got = opt1(), []
    s = S.StepLR(o, 2, 0.5)
    for i in range(6):
        if i == 3:
            o.param_groups[0]["lr"] = 1.0
        o.step(), s.step()
        got.append(o.param_groups[0]["lr"])
    np.testing.assert_allclose(got, chained["manual"], rtol=1e-9)
    o = opt1()
    s = S.SequentialLR(o, [S.LinearLR(o, 0.2, 1.0, 3), S.CosineAnnealingLR(o, 5)], [3])
    for _ in range(5):
        o.step(), s.step()
    o2 = opt1()
    s2 = S.SequentialLR(o2, [S.LinearLR(o2, 0.2, 1.0, 3), S.CosineAnnealingLR(o2, 5)], [3])
    s2.load_state_dict(s.state_dict())
    o2.param_groups[0]["lr"] = o.param_groups[0]["lr"]
    got = []
    for _ in range(4):
        o.step(), s.step(), o2.step(), s2.step()
        got.append((o.param_groups[0]["lr"], o2.param_groups[0]["lr"]))
    np.testing.assert_allclose(got, chained["resume"], rtol=1e-9, atol=1e-15)
    assert isinstance(S.ReduceLROnPlateau(opt1()), S.LRScheduler)
    more = {"poly": [0.06944444444444446, 0.04444444444444447, 0.02500000000000001, 0.011111111111111117, 0.0027777777777777775, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "warm": [0.0775, 0.032500000000000015, 0.1, 0.09397114317029975, 0.0775, 0.05500000000000001, 0.032500000000000015, 0.01602885682970026, 0.1, 0.09846666218300808, 0.09397114317029975, 0.08681980515339464], "onecycle": [0.29516394846410077, 0.7893697913739435, 0.9997020714672542, 0.9643782625501709, 0.8742558770640542, 0.7399697791049373, 0.5773663579364711, 0.4056335797487326, 0.24503671767014096, 0.11452695450885979, 0.029505054314122554, 4e-06], "onecycle3": [0.37103448275862067, 0.7020689655172414, 0.9668965517241379, 0.6358620689655172, 0.30482758620689654, 0.038709806451612906, 0.03225883870967742, 0.025807870967741932, 0.01935690322580645, 0.012905935483870964, 0.006454967741935477, 3.9999999999970615e-06]}
    for name, make in {"poly": lambda o: S.PolynomialLR(o, 6, 2.0),
                       "warm": lambda o: S.CosineAnnealingWarmRestarts(o, 3, 2, 0.01),
                       "onecycle": lambda o: S.OneCycleLR(o, 1.0, total_steps=13, cycle_momentum=False),
                       "onecycle3": lambda o: S.OneCycleLR(o, 1.0, total_steps=13, cycle_momentum=False,
                                                           three_phase=True, anneal_strategy="linear")}.items():
        o, got = opt1(), []
        sched = make(o)
        for _ in range(12):
            o.step(), sched.step()
            got.append(o.param_groups[0]["lr"])
        np.testing.assert_allclose(got, more[name], rtol=1e-9, atol=1e-15, err_msg=name)
    # add_param_group: a second group with its own lr steps with it.
    a, b = tessel.ones(2, requires_grad=True), tessel.ones(2, requires_grad=True)
    o = tessel.optim.SGD([a], lr=0.1)
    o.add_param_group({"params": [b], "lr": 0.5})
    a.grad, b.grad = tessel.ones(2), tessel.ones(2)
    o.step()
    np.testing.assert_allclose(a.tolist() + b.tolist(), [0.9, 0.9, 0.5, 0.5], rtol=1e-6)  # float32 steps
    assert len(o.param_groups) == 2
    with pytest.raises(ValueError, match="more than one parameter group"):
        o.add_param_group({"params": [a]})


def test_cycling_schedulers_move_lr_and_momentum_or_beta1_as_torch():
    # torch 2.15's (lr, momentum or beta1) after each of 12 steps, recorded once from torch itself: OneCycleLR
    # and CyclicLR cycle momentum (SGD) or beta1 (AdamW) opposite to the lr by default; ChainedScheduler
    # multiplies its schedulers' factors.
    want = {
        "onecycle_sgd": [(0.29516394846410077, 0.9234204220349895), (0.7893697913739435, 0.8719406467318809), (0.9997020714672542, 0.8500297929724464), (0.9643782625501709, 0.8535621879937348), (0.8742558770640542, 0.8625744625914449), (0.7399697791049373, 0.8760031261020107), (0.5773663579364711, 0.8922635332604859), (0.4056335797487326, 0.9094368797726458), (0.24503671767014096, 0.9254966302195068), (0.11452695450885979, 0.938547658739749), (0.029505054314122554, 0.9470498827681187), (4e-06, 0.95)],
        "onecycle3_adam": [(0.37103448275862067, 0.9155172413793103), (0.7020689655172414, 0.8810344827586206), (0.9668965517241379, 0.853448275862069), (0.6358620689655172, 0.8879310344827586), (0.30482758620689654, 0.9224137931034482), (0.038709806451612906, 0.95), (0.03225883870967742, 0.95), (0.025807870967741932, 0.95), (0.01935690322580645, 0.95), (0.012905935483870964, 0.95), (0.006454967741935477, 0.95), (3.9999999999970615e-06, 0.95)],
        "cyclic_tri2_sgd": [(0.055, 0.8500000000000001), (0.09999999999999999, 0.8), (0.06999999999999999, 0.8333333333333334), (0.039999999999999994, 0.8666666666666667), (0.01, 0.9), (0.03250000000000002, 0.875), (0.055, 0.8500000000000001), (0.039999999999999994, 0.8666666666666667), (0.025000000000000015, 0.8833333333333333), (0.01, 0.9), (0.021250000000000012, 0.8875000000000001), (0.0325, 0.875)],
        "cyclic_exp_adam": [(0.03700000000000001, 0.87), (0.0586, 0.8460000000000001), (0.07561000000000001, 0.8271000000000001), (0.04936600000000002, 0.85626), (0.027714699999999988, 0.880317), (0.01, 0.9), (0.02434890700000003, 0.8840567699999999), (0.03582803259999999, 0.8713021860000001), (0.04486784401000001, 0.8612579511), (0.03092070640599999, 0.8767547706600001), (0.019414317882700018, 0.889539646797), (0.01, 0.9)],
        "cyclic_tri_nomom": [(0.05500000000000001, 0), (0.1, 0), (0.05500000000000001, 0), (0.01, 0), (0.05500000000000001, 0), (0.1, 0), (0.05500000000000001, 0), (0.01, 0), (0.05500000000000001, 0), (0.1, 0), (0.05500000000000001, 0), (0.01, 0)],
        "chained": [(0.045000000000000005, 0.5), (0.04050000000000001, 0.5), (0.07290000000000002, 0.5), (0.06561000000000002, 0.5), (0.05904900000000002, 0.5), (0.05314410000000002, 0.5), (0.04782969000000002, 0.5), (0.043046721000000024, 0.5), (0.03874204890000002, 0.5), (0.03486784401000002, 0.5), (0.03138105960900001, 0.5), (0.028242953648100012, 0.5)]}
    S = tessel.optim.lr_scheduler
    sgd = lambda p: tessel.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
    adam = lambda p: tessel.optim.AdamW(p, lr=0.1)  # noqa: E731
    cases = {
        "onecycle_sgd": (sgd, lambda o: S.OneCycleLR(o, 1.0, total_steps=13)),
        "onecycle3_adam": (adam, lambda o: S.OneCycleLR(o, 1.0, total_steps=13, three_phase=True,
                                                         anneal_strategy="linear")),
        "cyclic_tri2_sgd": (sgd, lambda o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2, step_size_down=3,
                                                      mode="triangular2")),
        "cyclic_exp_adam": (adam, lambda o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3, mode="exp_range", gamma=0.9)),
        "cyclic_tri_nomom": (lambda p: tessel.optim.SGD(p, lr=0.1),
                             lambda o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2, cycle_momentum=False)),
        "chained": (lambda p: tessel.optim.SGD(p, lr=0.1, momentum=0.5),
                    lambda o: S.ChainedScheduler([S.ConstantLR(o, 0.5, 3), S.ExponentialLR(o, 0.9)])),
    }
    for name, (make_opt, make) in cases.items():
        o = make_opt([tessel.zeros(1, requires_grad=True)])
        sched, got = make(o), []
        for _ in range(12):
            o.step(), sched.step()
            g = o.param_groups[0]
            got.append((g["lr"], g["betas"][0] if "betas" in g else g["momentum"]))
        np.testing.assert_allclose(got, want[name], rtol=1e-12, atol=1e-15, err_msg=name)
    # The optimizer steps with the cycled momentum: SGD's first step from a zero buffer is plain (lr·g), the
    # second adds momentum·buf, with the momentum OneCycleLR set (0.9234... after one scheduler step).
    w = tessel.zeros(1, requires_grad=True)
    o = tessel.optim.SGD([w], lr=0.1, momentum=0.9)
    sched = S.OneCycleLR(o, 1.0, total_steps=13)
    lr0, steps = o.param_groups[0]["lr"], []
    for _ in range(2):
        w.grad = tessel.ones(1)
        lr, m = o.param_groups[0]["lr"], o.param_groups[0]["momentum"]
        o.step(), sched.step()
        steps.append((lr, m))
    (lr1, _), (lr2, m2) = steps
    np.testing.assert_allclose(w.item(), -lr1 * 1.0 - lr2 * (m2 * 1.0 + 1.0), rtol=1e-6)
    assert lr1 == lr0 and abs(lr0 - 1.0 / 25) < 1e-15
    with pytest.raises(ValueError, match="must support momentum or beta1"):
        S.OneCycleLR(_NoMomentum(), 1.0, total_steps=5)
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        o = tessel.optim.SGD([tessel.zeros(1, requires_grad=True)], lr=0.1)
        S.ChainedScheduler([S.ReduceLROnPlateau(o)])


class _NoMomentum:  # an optimizer-like object without momentum or betas
    def __init__(self):
        self.defaults, self.param_groups = {"lr": 0.1}, [{"lr": 0.1, "params": []}]


def test_more_activations_losses_group_norm_and_parameter_containers_follow_torchs_formulas():
    # float64 numpy references of torch's documented formulas (and checked against torch 2.15 once).
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3))
    x, y = tessel.tensor(a), tessel.tensor(b)
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    elu = lambda v, al=1.0: np.where(v > 0, v, al * (np.exp(v / al) - 1))  # noqa: E731 (celu's form)
    hsig = np.clip(a / 6 + 0.5, 0, 1)
    want = {"selu": scale * np.where(a > 0, a, alpha * (np.exp(a) - 1)), "celu": elu(a), "hardsigmoid": hsig,
            "hardswish": a * hsig, "softsign": a / (1 + np.abs(a)), "tanhshrink": a - np.tanh(a),
            "softshrink": np.where(a > 0.5, a - 0.5, np.where(a < -0.5, a + 0.5, 0.0)),
            "hardshrink": np.where(np.abs(a) > 0.5, a, 0.0)}
    for name, w in want.items():
        np.testing.assert_allclose(getattr(F, name)(x).numpy(), w, rtol=1e-12, atol=1e-15, err_msg=name)
        module = {"selu": "SELU", "celu": "CELU", "hardsigmoid": "Hardsigmoid", "hardswish": "Hardswish",
                  "softsign": "Softsign", "tanhshrink": "Tanhshrink", "softshrink": "Softshrink",
                  "hardshrink": "Hardshrink"}[name]
        np.testing.assert_allclose(getattr(nn, module)()(x).numpy(), w, rtol=1e-12, atol=1e-15, err_msg=module)
    np.testing.assert_allclose(F.threshold(x, 0.1, 20.0).numpy(), np.where(a > 0.1, a, 20.0))
    slopes = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(F.prelu(x, tessel.tensor(slopes)).numpy(),
                               np.where(a >= 0, a, a * slopes[None, :, None]), rtol=1e-12)
    pr = nn.PReLU(4)
    pr(x.float()).sum().backward()
    np.testing.assert_allclose(pr.weight.grad.numpy(), np.minimum(a, 0).sum((0, 2)), rtol=1e-5)
    d = np.linalg.norm(a.reshape(8, 3) - b.reshape(8, 3) + 1e-6, axis=-1)
    np.testing.assert_allclose(F.pairwise_distance(x.reshape(8, 3), y.reshape(8, 3)).numpy(), d, rtol=1e-12)
    np.testing.assert_allclose(nn.PairwiseDistance()(x.reshape(8, 3), y.reshape(8, 3)).numpy(), d, rtol=1e-12)
    t = tessel.tensor([1.0, -1.0])
    s1, s2, tt = a[:, 0, 0], b[:, 0, 0], np.array([1.0, -1.0])
    assert F.margin_ranking_loss(x[:, 0, 0], y[:, 0, 0], t, margin=0.2).item() == pytest.approx(
        np.maximum(0, -tt * (s1 - s2) + 0.2).mean(), rel=1e-12)
    assert F.soft_margin_loss(x[:, 0, 0], t).item() == pytest.approx(np.log1p(np.exp(-tt * s1)).mean(), rel=1e-12)
    assert F.hinge_embedding_loss(x[:, 0, 0], t, margin=0.5).item() == pytest.approx(
        np.where(tt == 1, s1, np.maximum(0, 0.5 - s1)).mean(), rel=1e-12)
    u, v, w3 = a[:, 0], b[:, 0], a[:, 1]
    cos = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    assert nn.CosineEmbeddingLoss(margin=0.1)(x[:, 0], y[:, 0], t).item() == pytest.approx(
        np.where(tt == 1, 1 - cos, np.maximum(0, cos - 0.1)).mean(), rel=1e-9)
    dist_ = lambda p, q: np.linalg.norm(p - q + 1e-6, axis=1)  # noqa: E731
    want_t = np.maximum(0, dist_(u, v) - np.minimum(dist_(u, w3), dist_(v, w3)) + 1.0).mean()
    assert nn.TripletMarginLoss(swap=True)(x[:, 0], y[:, 0], x[:, 1]).item() == pytest.approx(want_t, rel=1e-12)
    # GroupNorm: 2 groups of 2 channels, over the channels and the trailing dim, biased variance.
    g = a.reshape(2, 2, 6)
    gn = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(2, 4, 3)
    wt, bs = np.array([1.0, 2, 3, 4]), np.array([0.5, 0, 0, -1.0])
    np.testing.assert_allclose(F.group_norm(x, 2, tessel.tensor(wt), tessel.tensor(bs)).numpy(),
                               gn * wt[None, :, None] + bs[None, :, None], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(nn.GroupNorm(2, 4)(x.float()).numpy(), gn, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 3)
    # ParameterList / ParameterDict: tensors become Parameters named by position / key, seen by optimizers.
    holder = type("Holder", (nn.Module,), {})()
    holder.pl = nn.ParameterList([tessel.ones(2), tessel.zeros(3)])
    holder.pl.append(tessel.ones(1))
    holder.pd = nn.ParameterDict({"a": tessel.ones(2)})
    holder.pd["b"] = tessel.zeros(1)
    assert len(holder.pl) == 3 and [tuple(p.shape) for p in holder.pl] == [(2,), (3,), (1,)]
    assert holder.pl[-1].shape == (1,) and len(holder.pl[:2]) == 2 and holder.pl[0].requires_grad
    assert list(holder.pd.keys()) == ["a", "b"] and "a" in holder.pd and holder.pd["b"].tolist() == [0.0]
    assert [n for n, _ in holder.named_parameters()] == ["pl.0", "pl.1", "pl.2", "pd.a", "pd.b"]
    with pytest.raises(KeyError):
        holder.pd["missing"]
    # Reviewed edge cases, each as torch 2.15: slots are replaced (any shape); a frozen Parameter stays
    # frozen in a container and as an attribute; a plain dict's keys are sorted; names the class defines
    # are refused; NaN passes threshold / shrink; prelu's gradient at 0 is the slope.
    holder.pl[0] = tessel.full((4,), 7.0)
    holder.pd["a"] = tessel.zeros(3)
    assert holder.pl[0].tolist() == [7.0] * 4 and holder.pd["a"].shape == (3,)
    frozen = nn.Parameter(tessel.ones(2), requires_grad=False)
    holder.pl.append(frozen)
    holder.frozen_attr = nn.Parameter(tessel.ones(1), requires_grad=False)
    holder.frozen_attr = nn.Parameter(tessel.ones(3), requires_grad=False)  # reassigned with another shape
    assert not holder.pl[-1].requires_grad and not holder.frozen_attr.requires_grad
    assert holder.frozen_attr.shape == (3,)
    assert list(nn.ParameterDict({"b": tessel.ones(1), "a": tessel.ones(4)}).keys()) == ["a", "b"]
    with pytest.raises(KeyError, match="attribute 'values' already exists"):
        nn.ParameterDict({"values": tessel.ones(1)})
    nan = tessel.tensor([float("nan"), 0.1, 0.3])
    assert np.isnan(F.threshold(nan, 0.25, -7.0).numpy()[0]) and F.threshold(nan, 0.25, -7.0).tolist()[1:] == [-7.0, 0.30000001192092896]
    assert np.isnan(F.hardshrink(nan).numpy()[0]) and np.isnan(F.softshrink(nan).numpy()[0])
    z = tessel.tensor([0.0, -1.0], requires_grad=True)
    F.prelu(z, tessel.tensor([0.3])).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.3, 0.3], rtol=1e-6)
    assert nn.PReLU()(tessel.tensor(-1.0)).shape == ()
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        F.prelu(tessel.ones(2, 3), tessel.ones(4))
    inf = tessel.tensor([float("inf")], requires_grad=True)
    F.selu(inf).sum().backward()
    np.testing.assert_allclose(inf.grad.numpy(), [scale], rtol=1e-6)
    h = tessel.tensor([0.3, 0.2])
    assert F.hinge_embedding_loss(h, tessel.tensor([0.0, 1.0]), margin=1.0, reduction="sum").item() == \
        pytest.approx((1 - 0.3) + 0.3 + 0.2, rel=1e-6)  # a 0 target takes both terms, as torch
    with pytest.raises(RuntimeError, match="All input tensors should have same dimension"):
        F.margin_ranking_loss(h, h, tessel.tensor([1.0]))


def test_channel_dropout_zeroes_whole_channels_and_scales_the_rest():
    tessel.manual_seed(0)
    x = tessel.tensor(np.arange(2 * 8 * 9, dtype=np.float32).reshape(2, 8, 3, 3) + 1.0, requires_grad=True)
    y = nn.Dropout2d(0.5)(x)
    ratio = (y / x).detach().numpy().reshape(2, 8, 9)
    assert set(np.unique(ratio)) <= {0.0, 2.0}  # dropped, or kept and scaled by 1 / (1 - p)
    assert np.all(ratio.min(-1) == ratio.max(-1))  # one draw per (sample, channel)
    assert 0 < (ratio[:, :, 0] == 0).sum() < 16
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy().reshape(2, 8, 9), ratio)
    unbatched = F.dropout1d(tessel.ones(4, 5), 0.5)  # [C, L]: one draw per channel
    u = unbatched.numpy()
    assert np.all(u.min(-1) == u.max(-1))
    assert nn.Dropout3d(0.9).eval()(tessel.ones(1, 2, 2, 2, 2)).sum().item() == 16.0  # eval: identity
    # torch 2.15's rules for other ranks: 2-D warns (deprecated) and drops single entries; 3-D is read as
    # (N, C, L), one draw per (n, c) row, with its warning (it was read as an unbatched (C, H, W))
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        flat = F.dropout2d(tessel.ones(40, 30), 0.5).numpy()
    assert set(np.unique(flat)) == {0.0, 2.0}
    with pytest.warns(UserWarning, match="interpreted as shape \\(N, C, L\\)"):
        rows = F.dropout2d(tessel.ones(6, 8, 5), 0.5).numpy()
    assert np.all(rows.min(-1) == rows.max(-1)) and 0 < (rows[:, :, 0] == 0).sum() < 48
    assert not np.all(rows.min((1, 2)) == rows.max((1, 2)))  # not whole dim-0 slices
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(tessel.ones(2, 2, 2, 2), 0.5)


def test_embedding_bag_sums_averages_and_maxes_bags_as_torch():
    # Bags [1, 2, 4], [], [5, 4], [3, 2, 0] with padding_idx 2 left out; references in float64 numpy.
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 3))
    flat, offsets = [1, 2, 4, 5, 4, 3, 2, 0], [0, 3, 3, 5]
    bags = [[1, 4], [], [5, 4], [3, 0]]  # without the padding index
    for mode, reduce in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
        w = tessel.tensor(table, requires_grad=True)
        y = F.embedding_bag(tessel.tensor(flat), w, tessel.tensor(offsets), mode=mode, padding_idx=2)
        want = np.array([reduce(table[b], 0) if b else np.zeros(3) for b in bags])
        np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12, err_msg=mode)
        y.sum().backward()
        grad = np.zeros_like(table)
        for b in bags:
            if not b:
                continue
            if mode == "max":
                for c in range(3):
                    grad[b[int(np.argmax(table[b, c]))], c] += 1
            else:
                for i in b:
                    grad[i] += 1.0 / (len(b) if mode == "mean" else 1)
        np.testing.assert_allclose(w.grad.numpy(), grad, rtol=1e-12, err_msg=mode)
    # [B, L] input with per_sample_weights (mode sum): rows scaled, the weights get their gradient.
    w = tessel.tensor(table)
    psw = tessel.tensor([[0.5, 2.0], [1.0, -1.0]], dtype=tessel.float64, requires_grad=True)
    y = F.embedding_bag(tessel.tensor([[0, 1], [2, 3]]), w, per_sample_weights=psw, mode="sum")
    np.testing.assert_allclose(y.detach().numpy(),
                               [0.5 * table[0] + 2 * table[1], table[2] - table[3]], rtol=1e-12)
    y.sum().backward()
    np.testing.assert_allclose(psw.grad.numpy(), table[[[0, 1], [2, 3]]].sum(-1), rtol=1e-12)
    bag = nn.EmbeddingBag(6, 3, mode="sum")
    assert bag(tessel.tensor([0, 1, 2]), tessel.tensor([0, 1])).shape == (2, 3)
    with pytest.raises(ValueError, match="must have the same shape as the input"):
        F.embedding_bag(tessel.tensor([[0, 1]]), w, per_sample_weights=tessel.ones(2), mode="sum")


def test_load_state_dict_assign_takes_the_state_dicts_tensors():
    lin = nn.Linear(2, 3)
    old_weight = lin.weight.numpy().copy()
    old = lin.weight
    sd = {"weight": tessel.ones(3, 2, dtype=tessel.float64), "bias": tessel.zeros(3, dtype=tessel.float64)}
    result = lin.load_state_dict(sd, assign=True)
    np.testing.assert_array_equal(old.numpy(), old_weight)  # the replaced parameter is not written
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    assert lin.weight.dtype == tessel.float64 and lin.weight.requires_grad  # the state dict's dtype
    with tessel.no_grad():
        sd["weight"].mul_(2.0)  # the same storage, as torch's assign
    assert lin.weight.tolist() == [[2.0, 2.0]] * 3
    with pytest.raises(ValueError, match="size mismatch for weight"):
        lin.load_state_dict({"weight": tessel.ones(4, 2), "bias": tessel.zeros(3)}, assign=True)
    with pytest.raises(ValueError, match=r'Missing key\(s\) in state_dict: "bias"'):
        lin.load_state_dict({"weight": tessel.ones(3, 2)}, assign=True)
    assert list(lin.load_state_dict({"weight": tessel.ones(3, 2)}, strict=False, assign=True).missing_keys) == \
        ["bias"]


def test_module_backward_hooks_replace_gradients_by_returning_them():
    tessel.manual_seed(5)
    lin = nn.Linear(3, 2)
    x = tessel.randn(4, 3, requires_grad=True)
    lin(x).sum().backward()
    w_plain, x_plain = lin.weight.grad.numpy().copy(), x.grad.numpy().copy()
    lin.weight.grad, x.grad = None, None
    pre = lin.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 3.0,))
    post = lin.register_full_backward_hook(lambda mod, gin, gout: (gin[0] + 1.0,))
    lin(x).sum().backward()
    # float32 sums of 3·g differ from 3 × the sums by rounding only
    np.testing.assert_allclose(lin.weight.grad.numpy(), 3.0 * w_plain, rtol=1e-5, atol=1e-5)  # the module saw 3·g
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * x_plain + 1.0, rtol=1e-5, atol=1e-5)  # then grad_input + 1
    pre.remove()
    post.remove()
    lin.register_full_backward_hook(lambda mod, gin, gout: (gin[0], gin[0]))
    with pytest.raises(ValueError, match="returned 2 grad_input entries, expected 1"):
        lin(x).sum().backward()


def test_device_handling_of_a_cpu_only_script_follows_torch():
    device = "cuda" if tessel.cuda.is_available() else "cpu"
    assert device == "cpu" and tessel.cuda.device_count() == 0
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert model.to(device) is model and model.cpu() is model
    x = tessel.randn(5, 3, device=device).to(device)
    assert x.device == tessel.device("cpu") and str(x.device) == "cpu" and not x.is_cuda
    assert tessel.zeros(2, device=x.device).device == tessel.device("cpu") and x.cpu() is x
    assert x.device != "cpu"  # torch 2.15: a device never equals its string
    assert x.to("cpu", tessel.float64).dtype == tessel.float64 and x.to(x) is x
    assert x.to(dtype=tessel.bfloat16, non_blocking=True).dtype == tessel.bfloat16
    assert x.to("cpu", copy=True) is not x
    assert x.to(tessel.float64, True).dtype == tessel.float64 and x.to(x.dtype, False, True) is not x
    assert tessel.device("cpu") != "banana"
    cuda = importlib.import_module("tessel.cuda")  # import tessel.cuda works, as torch.cuda
    assert cuda is tessel.cuda and not cuda.is_available()
    assert nn.Linear(3, 4, device="cpu").weight.shape == (4, 3) and nn.LayerNorm(4, device=device) is not None
    with pytest.raises(NotImplementedError, match="Linear: device 'cuda' is not available"):
        nn.Linear(3, 4, device="cuda")
    with pytest.raises(NotImplementedError, match="device 'cuda:0' is not available from Python"):
        x.to("cuda:0")
    with pytest.raises(NotImplementedError, match="device 'cuda' is not available"):
        model.to(tessel.device("cuda"))
    with pytest.raises(NotImplementedError, match="device 'cuda' is not available"):
        tessel.ones(2, device="cuda")
    with pytest.raises(NotImplementedError, match="computes on the CPU"):
        model.cuda()
    # A dtype casts the floating parameters (in place: the same Parameter objects, parameter_identity_test).
    y32 = model(x).detach()
    model.to(tessel.float64)
    assert {p.dtype for p in model.parameters()} == {tessel.float64}
    np.testing.assert_allclose(model(x.double()).numpy(), y32.numpy(), rtol=1e-6, atol=1e-6)
    assert model.float() is model and {p.dtype for p in model.parameters()} == {tessel.float32}
    with pytest.raises(TypeError, match="only accepts floating point dtypes"):
        model.to(tessel.int64)
    # A tied weight stays tied (both names get the one cast tensor) and its gradient is cast too.
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, i):
            return self.head(self.emb(i))

    tied = Tied()
    tied(tessel.tensor([1, 2])).sum().backward()
    tied.to(tessel.float64)
    assert tied.emb.weight.dtype == tied.head.weight.dtype == tessel.float64
    assert tied.emb.weight.grad.dtype == tessel.float64
    with tessel.no_grad():
        tied.emb.weight.mul_(0.0)
    assert tied.head.weight.abs().sum().item() == 0.0  # still one tensor
    assert tied(tessel.tensor([1])).dtype == tessel.float64
    # Floating buffers are cast too (BatchNorm's running statistics), persistence kept; integer ones are not.
    class Normed(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)
            self.register_buffer("scale", tessel.full((3,), 2.0), persistent=False)

        def forward(self, v):
            return self.bn(v) * self.scale

    net = Normed()
    v = tessel.randn(8, 3)
    net(v)  # one training step of running statistics
    mean32 = net.bn.running_mean.numpy().copy()
    net.double()
    assert net.bn.running_mean.dtype == net.bn.running_var.dtype == net.scale.dtype == tessel.float64
    assert net.bn.num_batches_tracked.dtype == tessel.int64
    np.testing.assert_allclose(net.bn.running_mean.numpy(), mean32, rtol=1e-7)
    assert "scale" not in net.state_dict() and "bn.running_mean" in net.state_dict()
    out = net.eval()(v.double())
    assert out.dtype == tessel.float64
    want = (v.numpy() - mean32) / np.sqrt(net.bn.running_var.numpy() + 1e-5) * 2.0
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_dropout_draws_from_the_default_generator_like_torch():
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got -0.5"):
        F.dropout(tessel.ones(3), -0.5)
    x = tessel.ones(400, 50)
    tessel.manual_seed(3)
    start = tessel._C.default_generator().host_draws
    drop = nn.Dropout(0.2)
    y = drop(x).numpy()
    # torch's CPU bernoulli_: a 53-bit uniform (two MT19937 words) per element
    assert tessel._C.default_generator().host_draws == start + 40000
    assert set(np.unique(y).tolist()) == {0.0, np.float32(1.25)}
    assert abs((y == 0).mean() - 0.2) < 0.02  # Binomial(20000, 0.2): sigma 0.0028
    tessel.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.2).numpy(), y)  # same seed, same mask
    drop.eval()
    offset = tessel._C.default_generator().host_draws
    assert F.dropout(x, 0.2, training=False) is x
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())
    assert tessel._C.default_generator().host_draws == offset  # eval draws nothing
    # Backward: the same mask times 1 / (1 - p).
    w = tessel.ones(400, 50, requires_grad=True)
    tessel.manual_seed(3)
    (F.dropout(w, 0.2) * 2.0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2.0 * y)
    # inplace=True: the input itself holds the result where that loses nothing (torch's nn.Dropout(inplace=True))
    buf = tessel.ones(400, 50)
    tessel.manual_seed(3)
    out = nn.Dropout(0.2, inplace=True)(buf)
    assert np.array_equal(buf.numpy(), y) and np.array_equal(out.numpy(), y)  # written into the input
    v = tessel.ones(3, requires_grad=True)
    h = v * 1.0
    relu_inplace = nn.ReLU(inplace=True)
    assert repr(relu_inplace) == "ReLU(inplace=True)"
    r = relu_inplace(h - 2.0)  # under autograd: recorded (or a new tensor when the input is shared)
    (r + F.relu(h, inplace=True)).sum().backward()
    assert r.tolist() == [0.0, 0.0, 0.0] and v.grad.tolist() == [1.0, 1.0, 1.0]
    z = tessel.tensor([-1.0, 2.0])
    assert F.relu_(z) is z and z.tolist() == [0.0, 2.0] and tessel.relu_(tessel.tensor([-3.0])).tolist() == [0.0]


def test_bad_forward_and_bad_arguments_raise_python_errors():
    class ReturnsDict(nn.Module):
        def forward(self, x):
            return {"y": x}

    class NoForward(nn.Module):
        pass

    # Any output structure, as torch: tensors inside dicts / tuples with None keep their gradients, and
    # forward hooks see (and may replace) the structure forward returned.
    x = tessel.ones(2, requires_grad=True)
    seen = []
    m = ReturnsDict()
    m.register_forward_hook(lambda mod, inp, out: seen.append(type(out).__name__))
    out = m(x)
    assert isinstance(out, dict) and out["y"].tolist() == [1.0, 1.0] and seen == ["dict"]
    (out["y"] * 3.0).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]

    class LogitsAndLoss(nn.Module):
        def forward(self, x, targets=None):
            return x * 2.0, None if targets is None else (x - targets).pow(2.0).mean()

    logits, loss = LogitsAndLoss()(x)
    assert loss is None and logits.tolist() == [2.0, 2.0]
    logits, loss = LogitsAndLoss()(x, tessel.zeros(2))
    assert loss.item() == 1.0
    hooked = LogitsAndLoss()
    hooked.register_forward_hook(lambda mod, inp, out: (out[0] + 1.0, "replaced"))
    logits, tag = hooked(x)
    assert logits.tolist() == [3.0, 3.0] and tag == "replaced"
    Pair = collections.namedtuple("Pair", ["logits", "loss"])

    class ReturnsPair(nn.Module):
        def forward(self, x):
            return Pair(x * 2.0, x.sum())

    assert ReturnsPair()(x).loss.item() == 2.0  # a namedtuple of tensors stays one
    with pytest.raises(NotImplementedError, match='Module \\[NoForward\\] is missing the required "forward"'):
        NoForward()(tessel.ones(1))
    with pytest.raises(TypeError, match=r"Linear.forward\(\) takes 2 positional arguments but 3 were given"):
        nn.Linear(2, 2)(tessel.ones(2), 3)  # as torch's
    with pytest.raises(TypeError, match=r"Linear.forward\(\) missing 1 required positional argument: 'input'"):
        nn.Linear(2, 2)()
    assert nn.Linear(2, 3)(input=tessel.ones(2)).shape == (3,)  # torch's parameter name
    with pytest.raises(ValueError, match=r"linear: input \[3\] has in_features 3 but weight \[2, 2\] expects 2"):
        nn.Linear(2, 2)(tessel.ones(3))
    with pytest.raises(TypeError):
        nn.Linear("a", 2)


# ---- a GPT written in Python (examples/python/gpt.py) against the C++ GPT ----------------------------

CFG = dict(vocab_size=29, d_model=16, n_layers=2, n_heads=2, seq_len=8)


def python_and_cpp_gpt():
    cpp = tessel.GPT(tessel.GPTConfig(**CFG), seed=11)
    py = PyGPT(tessel.GPTConfig(**CFG))
    result = py.load_state_dict(cpp.state_dict())  # strict: the Python model has the C++ FQNs exactly
    assert result.missing_keys == [] and result.unexpected_keys == []
    rng = np.random.default_rng(3)
    idx = rng.integers(0, CFG["vocab_size"], size=(3, CFG["seq_len"]), dtype=np.int64)
    return py, cpp, tessel.tensor(idx), tessel.tensor(np.roll(idx, -1, axis=1))


def py_loss(model, idx, tgt):
    return model.loss(idx, tgt)


def test_python_gpt_matches_the_cpp_gpt_loss_and_every_gradient():
    py, cpp, idx, tgt = python_and_cpp_gpt()
    lp, lc = py_loss(py, idx, tgt), cpp.loss(idx, tgt)
    lp.backward()
    lc.backward()
    assert abs(lp.item() - lc.item()) < 1e-6
    grads_cpp = {n: p.grad.numpy() for n, p in cpp.named_parameters()}
    grads_py = {n: p.grad.numpy() for n, p in py.named_parameters()}
    assert list(grads_py) == list(grads_cpp)
    for n in grads_cpp:
        np.testing.assert_allclose(grads_py[n], grads_cpp[n], rtol=1e-5, atol=1e-7, err_msg=n)


def test_python_gpt_gradients_match_finite_differences():
    py, _, idx, tgt = python_and_cpp_gpt()
    sd = {k: v.numpy().astype(np.float64) for k, v in py.state_dict().items()}
    for k in sd:  # the whole model in float64, so central differences are accurate
        setattr(py.get_submodule(k.rpartition(".")[0]), k.rpartition(".")[2],
                nn.Parameter(tessel.tensor(sd[k])))
    loss = py_loss(py, idx, tgt)
    loss.backward()
    rng = np.random.default_rng(4)
    eps = 1e-6
    for name in ("wte.weight", "layers.0.attn.wq.weight", "layers.1.mlp.fc.weight", "ln_f.bias"):
        p = py.get_parameter(name)
        grad = p.grad.numpy()
        for _ in range(3):
            i = tuple(int(rng.integers(0, s)) for s in p.shape)
            if name == "wte.weight":
                i = (int(idx.numpy()[0, 0]),) + i[1:]  # a row the batch uses
            base = p.numpy().copy()  # numpy() shares the memory (torch), p changes below
            vals = []
            for delta in (eps, -eps):
                moved = base.copy()
                moved[i] += delta
                with tessel.no_grad():
                    p.copy_(tessel.tensor(moved))
                    vals.append(py_loss(py, idx, tgt).item())
            with tessel.no_grad():
                p.copy_(tessel.tensor(base))
            fd = (vals[0] - vals[1]) / (2 * eps)
            assert abs(fd - grad[i]) < 1e-6 + 1e-4 * abs(fd), (name, i, fd, grad[i])


def test_torch_idioms_argmax_max_values_in_place_scalars_data_and_losses():
    x_np = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]], np.float32)
    x = tessel.from_numpy(x_np)
    assert x.argmax().item() == 3 and x.argmax(dim=1).tolist() == [1, 0]  # first index on ties, as torch
    assert x.argmin(dim=1).tolist() == [0, 1] and x.min().item() == 0.0
    m = x.max(dim=1)
    assert m.values.tolist() == [5.0, 7.0] and m.indices.tolist() == [1, 0]
    assert x.min(dim=0, keepdim=True).values.tolist() == [[1.0, 0.0, 2.0]]
    b = nn.Parameter(tessel.ones(3))
    with pytest.raises(RuntimeError, match="in-place operation"):
        b.add_(1.0)
    with tessel.no_grad():
        b.add_(2.0).sub_(0.5, alpha=2.0).div_(4.0).mul_(3.0)
        b.lerp_(tessel.zeros(3), 0.25)
    np.testing.assert_allclose(b.numpy(), [1.5 * 0.75] * 3)
    assert not b.data.requires_grad
    b.data = tessel.full((3,), 4.0)  # copies into the same parameter
    assert b.requires_grad and b.tolist() == [4.0, 4.0, 4.0]
    y = tessel.tensor([1, 2])
    lse = np.log(np.exp(x_np.astype(np.float64)).sum(1))  # (float64: float32 numpy rounds lse by 5e-7)
    want = np.mean(lse - x_np[[0, 1], [1, 2]])
    assert nn.CrossEntropyLoss()(x, y).item() == pytest.approx(want, rel=1e-6)
    assert nn.CrossEntropyLoss(ignore_index=2)(x, y).item() == pytest.approx(lse[0] - 5.0, rel=1e-6)
    # label_smoothing e: (1 - e)·nll + e·mean_c(lse - x_c) per row (torch's formula).
    smooth = 0.9 * (lse - x_np[[0, 1], [1, 2]]) + 0.1 * (lse - x_np.mean(1))
    assert nn.CrossEntropyLoss(label_smoothing=0.1)(x, y).item() == pytest.approx(smooth.mean(), rel=1e-6)
    assert F.cross_entropy(x, y, reduction="sum", label_smoothing=0.1).item() == pytest.approx(smooth.sum(), rel=1e-6)
    # Class weights w (torch): row i costs w[y_i]·nll_i, the mean divides by the sum of w[y_i] over the rows
    # kept; smoothing adds e/C·sum_c w_c·(lse - x_c), normalized the same way. ignore_index drops row 1.
    w = np.array([0.5, 2.0, 3.0], dtype=np.float32)  # the input's dtype: torch refuses a float64 weight
    nll = lse - x_np[[0, 1], [1, 2]]
    assert F.cross_entropy(x, y, tessel.tensor(w)).item() == pytest.approx((2.0 * nll[0] + 3.0 * nll[1]) / 5.0, rel=1e-6)
    ce = nn.CrossEntropyLoss(weight=tessel.tensor(w), ignore_index=2, label_smoothing=0.1, reduction="sum")
    assert list(ce.state_dict()) == ["weight"]  # a buffer, as torch
    want = 0.9 * 2.0 * nll[0] + 0.1 / 3 * (w * (lse[0] - x_np[0])).sum()
    assert ce(x, y).item() == pytest.approx(want, rel=1e-6)
    xg = tessel.tensor(x_np, requires_grad=True)
    F.cross_entropy(xg, y, tessel.tensor(w), reduction="none").sum().backward()
    soft = np.exp(x_np - lse[:, None])
    np.testing.assert_allclose(xg.grad.numpy(), np.array([[2.0], [3.0]]) * (soft - np.eye(3)[[1, 2]]), rtol=1e-5)
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 3 classes"):
        F.cross_entropy(x, y, tessel.ones(4))
    assert nn.MSELoss()(x, tessel.ones(2, 3)).item() == pytest.approx(((x_np - 1) ** 2).mean(), rel=1e-6)
    assert nn.MSELoss(reduction="sum")(x, tessel.ones(2, 3)).item() == pytest.approx(((x_np - 1) ** 2).sum())


def test_layer_norm_without_bias_matches_numpy_and_has_no_bias_parameter():
    x_np = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    ln = nn.LayerNorm(5, bias=False)
    assert ln.bias is None and [n for n, _ in ln.named_parameters()] == ["weight"]
    with tessel.no_grad():
        ln.weight.copy_(tessel.from_numpy(np.arange(1, 6, dtype=np.float32)))
    x = tessel.from_numpy(x_np).requires_grad_()
    y = ln(x)
    norm = (x_np - x_np.mean(1, keepdims=True)) / np.sqrt(x_np.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.numpy(), norm * np.arange(1, 6), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    np.testing.assert_allclose(ln.weight.grad.numpy(), norm.sum(0), rtol=1e-5, atol=1e-5)
    assert nn.LayerNorm(5, elementwise_affine=False).weight is None


def test_nn_init_draws_tessels_stream_with_torchs_bounds():
    w = nn.Parameter(tessel.zeros(6, 4))
    tessel.manual_seed(3)
    nn.init.normal_(w, mean=1.0, std=0.02)
    tessel.manual_seed(3)
    np.testing.assert_allclose(w.numpy(), tessel.randn(6, 4).numpy() * 0.02 + 1.0, rtol=1e-6)
    tessel.manual_seed(4)
    nn.init.xavier_uniform_(w)  # a = sqrt(6 / (fan_in + fan_out)) = sqrt(6 / 10)
    tessel.manual_seed(4)
    a = np.sqrt(0.6)
    np.testing.assert_allclose(w.numpy(), tessel.rand(6, 4).numpy() * 2 * a - a, rtol=1e-5, atol=1e-7)
    nn.init.kaiming_uniform_(w, a=np.sqrt(5))  # torch's Linear default: bound 1 / sqrt(fan_in) = 0.5
    assert np.abs(w.numpy()).max() <= 0.5 and np.abs(w.numpy()).max() > 0.3
    nn.init.trunc_normal_(w, std=1.0, a=-0.3, b=0.3)
    assert np.abs(w.numpy()).max() <= 0.3 and w.numpy().std() > 0.1
    nn.init.zeros_(w)
    assert not w.numpy().any() and w.requires_grad


def test_autograd_details_follow_torch():
    # *= on a view while autograd records it: written through to the base, whose gradient flows through
    # CopySlices, as torch.
    x = tessel.ones(4, requires_grad=True)
    h = x * 1
    v = h.view(2, 2)
    v *= 3
    assert h.tolist() == [3.0] * 4 and h.grad_fn.name() == "torch::autograd::CopySlices"
    (h * h).sum().backward()
    assert x.grad.tolist() == [18.0] * 4
    # no_grad as a decorator of a generator covers its body; bare @no_grad works.
    w = tessel.ones(2, requires_grad=True)

    @tessel.no_grad()
    def gen():
        for _ in range(2):
            yield w * 2, tessel.is_grad_enabled()

    assert [(t.requires_grad, on) for t, on in gen()] == [(False, False), (False, False)]

    @tessel.no_grad
    def bare():
        return (w * 2).requires_grad

    assert bare() is False and tessel.is_grad_enabled()
    with tessel.set_grad_enabled(False):
        assert not tessel.is_grad_enabled()
    assert tessel.is_grad_enabled()
    # A parameter frozen between forward and backward gets no .grad.
    lin = nn.Linear(2, 1)
    out = lin(tessel.ones(1, 2)).sum()
    lin.weight.requires_grad_(False)
    out.backward()
    assert lin.weight.grad is None and lin.bias.grad is not None
    # A second backward through nodes that saved nothing works, as in torch.
    y = tessel.ones(2, requires_grad=True)
    z = (y + 1).sum()
    z.backward()
    z.backward()
    assert y.grad.tolist() == [2.0, 2.0]
    # Tensor hooks and retain_grad.
    a = tessel.ones(2, requires_grad=True)
    b = a * 3
    b.retain_grad()
    handle = b.register_hook(lambda g: g * 10)
    b.sum().backward()
    assert a.grad.tolist() == [30.0, 30.0] and b.grad.tolist() == [10.0, 10.0]
    handle.remove()
    a.grad = None
    c = a * 3
    c.sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]
    # kInvalidArgument is a ValueError and a RuntimeError (torch raises RuntimeError for these).
    with pytest.raises(RuntimeError):
        (tessel.ones(2, requires_grad=True) * 2).backward()
    assert issubclass(tessel.InvalidArgumentError, ValueError)


def test_module_hooks_may_remove_themselves_and_outlive_their_module():
    calls = []
    m = nn.Linear(2, 2)
    handles = []

    def once(mod, inputs):
        calls.append("once")
        handles[0].remove()  # torch's one-shot idiom: undefined behaviour before (bad_function_call)

    handles.append(m.register_forward_pre_hook(once))
    m(tessel.ones(1, 2))
    m(tessel.ones(1, 2))
    assert calls == ["once"]
    seen = []
    frozen_input = nn.Linear(2, 2)
    frozen_input.register_full_backward_hook(lambda mod, gi, go: seen.append(gi))
    frozen_input(tessel.ones(1, 2)).sum().backward()  # its input needs no grad
    assert seen == [(None,)]  # torch passes one None per input, not ()
    # A module destroyed before backward: no crash (its hook node held a dangling module pointer).
    x = tessel.ones(1, 2, requires_grad=True)
    tmp = nn.Linear(2, 2)
    tmp.register_full_backward_hook(lambda mod, gi, go: None)
    y = tmp(x).sum()
    del tmp
    gc.collect()
    y.backward()
    assert x.grad is not None


def test_torch_save_and_load_of_state_dicts_resume_training_exactly(tmp_path):
    # torch.save({"model": m.state_dict(), "optim": opt.state_dict()}, f) / torch.load(f) with two
    # parameter groups: the resumed run's losses equal the uninterrupted one's, and the loaded optimizer
    # holds the saved options (the fresh one was built with another lr).
    batches = [tessel.from_numpy(np.random.default_rng(s).standard_normal((4, 8)).astype(np.float32))
               for s in range(4)]

    def build(lr):
        tessel.manual_seed(0)
        model = MLP(8, 16)
        named = list(model.named_parameters())
        opt = tessel.optim.AdamW([{"params": [p for n, p in named if n.endswith("weight")]},
                                  {"params": [p for n, p in named if not n.endswith("weight")], "lr": lr / 2,
                                   "weight_decay": 0.0}], lr=lr)
        return model, opt

    def train(model, opt, steps):
        losses = []
        for s in steps:
            loss = model(batches[s]).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    model, opt = build(0.05)
    train(model, opt, range(2))
    path = str(tmp_path / "ckpt.pt")
    tessel.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 2}, path)
    want = train(model, opt, range(2, 4))
    model, opt = build(0.9)
    ck = tessel.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optim"])
    assert ck["step"] == 2 and [g["lr"] for g in opt.param_groups] == [0.05, 0.025]
    assert sorted(ck["optim"]["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert train(model, opt, range(2, 4)) == want


def test_a_dtensor_on_a_run_ranks_mesh_saves_and_loads_on_its_rank():
    # (dtensor_save_load_test covers the process-group meshes; this is tessel.init_device_mesh(world, ...)'s)
    def rank_fn(world):
        mesh = tessel.init_device_mesh(world, [2], ["x"])
        d = tessel.distribute_tensor(tessel.arange(4.0), mesh, [tessel.Shard(0)])
        buf = io.BytesIO()
        tessel.save({"w": d}, buf)
        buf.seek(0)
        back = tessel.load(buf)["w"]
        assert back.placements == (tessel.Shard(0),) and back.to_local().tolist() == d.to_local().tolist()

    tessel.run_ranks(2, rank_fn)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_clip_grad_value_parameters_to_vector_and_orthogonal_eye_dirac_init():
    import tessel.nn.utils as U
    lin = nn.Linear(3, 2)
    lin(tessel.tensor(np.array([[10.0, -20.0, 0.01]], dtype=np.float32))).sum().backward()
    want = np.clip(lin.weight.grad.numpy(), -0.5, 0.5)
    U.clip_grad_value_(lin.parameters(), 0.5)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), want)
    assert np.abs(want).max() == 0.5  # the clamp did bite
    vec = U.parameters_to_vector(lin.parameters())
    np.testing.assert_array_equal(vec.detach().numpy(), np.concatenate([lin.weight.detach().numpy().ravel(),
                                                                       lin.bias.detach().numpy()]))
    U.vector_to_parameters(tessel.arange(8).float(), lin.parameters())
    assert lin.weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and lin.bias.tolist() == [6.0, 7.0]
    with pytest.raises(RuntimeError, match=r"shape '\[2\]' is invalid for input of size 1"):  # torch's view error
        U.vector_to_parameters(tessel.zeros(7), lin.parameters())
    for shape in ((4, 6), (6, 4), (3, 2, 2)):
        w = tessel.empty(*shape)
        nn.init.orthogonal_(w, gain=2.0)
        m = w.numpy().reshape(shape[0], -1)
        gram = m @ m.T if shape[0] <= m.shape[1] else m.T @ m
        np.testing.assert_allclose(gram, 4.0 * np.eye(gram.shape[0]), atol=1e-5)
    tessel.manual_seed(3)
    a = nn.init.orthogonal_(tessel.empty(3, 3)).numpy().copy()
    tessel.manual_seed(3)
    np.testing.assert_array_equal(nn.init.orthogonal_(tessel.empty(3, 3)).numpy(), a)
    np.testing.assert_array_equal(nn.init.eye_(tessel.empty(2, 3)).numpy(), np.eye(2, 3))
    d = nn.init.dirac_(tessel.empty(4, 2, 3), groups=2).numpy()
    want = np.zeros((4, 2, 3))
    want[0, 0, 1] = want[1, 1, 1] = want[2, 0, 1] = want[3, 1, 1] = 1.0
    np.testing.assert_array_equal(d, want)


def _tiny_lm():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.qkv, self.proj, self.ff = nn.LayerNorm(16), nn.Linear(16, 48), nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in self.qkv(self.ln(x)).split(16, dim=-1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 16)
            x = x + self.proj(a)
            return x + F.gelu(self.ff(x))
    return nn.Sequential(nn.Embedding(10, 16), Block(), nn.Linear(16, 10))


def test_autocast_runs_products_in_bf16_keeps_float32_grads_and_tracks_float32_training():
    # 30 AdamW steps of a tiny causal LM under autocast("cpu") (bf16 products) against the same steps in
    # float32: logits come out bf16, the loss float32, every .grad float32, and the two loss curves stay
    # within 0.02 + 2% of each other while both fall.
    x = tessel.tensor(np.random.default_rng(0).integers(0, 10, (4, 8)))
    y = tessel.tensor(np.random.default_rng(1).integers(0, 10, (4, 8)))
    curves = {}
    for amp in (False, True):
        tessel.manual_seed(0)
        model = _tiny_lm()
        opt = tessel.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(30):
            with tessel.autocast(device_type="cpu", dtype=tessel.bfloat16, enabled=amp):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, 10), y.view(-1))
            assert logits.dtype == (tessel.bfloat16 if amp else tessel.float32) and loss.dtype == tessel.float32
            loss.backward()
            assert all(p.grad.dtype == tessel.float32 for p in model.parameters())
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        curves[amp] = np.array(losses)
    assert curves[True][-1] < 0.7 * curves[True][0]
    np.testing.assert_allclose(curves[True], curves[False], rtol=0.02, atol=0.02)
    assert not np.array_equal(curves[True], curves[False])  # bf16 did run


def test_autocast_regions_nest_decorate_and_equal_explicit_casts():
    a, b = tessel.randn(3, 4), tessel.randn(4, 2)
    assert not tessel.is_autocast_enabled("cpu")
    with tessel.autocast("cpu"):
        assert tessel.is_autocast_enabled("cpu") and tessel.get_autocast_dtype("cpu") == tessel.bfloat16
        prod = a @ b
        assert prod.dtype == tessel.bfloat16
        assert prod.float().tolist() == (a.to(tessel.bfloat16) @ b.to(tessel.bfloat16)).float().tolist()
        with tessel.autocast("cpu", enabled=False):
            assert (a @ b).dtype == tessel.float32
        assert (a @ b).dtype == tessel.bfloat16
        assert tessel.cat([prod, a[:, :2]]).dtype == tessel.float32  # widest type
        assert (a.double() @ b.double()).dtype == tessel.float64   # float64 is not eligible
    assert not tessel.is_autocast_enabled("cpu")

    @tessel.autocast(device_type="cpu", dtype=tessel.float16)
    def half_product(u, v):
        return u @ v
    assert half_product(a, b).dtype == tessel.float16 and (a @ b).dtype == tessel.float32
    with tessel.cpu.amp.autocast():
        assert (a @ b).dtype == tessel.bfloat16
    with pytest.warns(UserWarning, match="CPU Autocast only supports"):  # torch's: a warning, then no region
        assert not tessel.autocast("cpu", dtype=tessel.float64)._enabled
    with pytest.raises(NotImplementedError, match="device 'mps'"):
        tessel.autocast("mps")
    with pytest.warns(UserWarning, match="Disabling autocast"):  # torch without CUDA (cpu_only_compat_test.py)
        assert not tessel.autocast("cuda")._enabled


def test_grad_scaler_unscales_skips_overflowing_steps_and_adapts_its_scale():
    lin = nn.Linear(3, 1)
    opt = tessel.optim.SGD(lin.parameters(), lr=0.1)
    x = tessel.tensor([[1.0, 2.0, 3.0]])
    scaler = tessel.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    lin(x).sum().backward()
    want = lin.weight.grad.numpy().copy()
    opt.zero_grad()
    scaler.scale(lin(x).sum()).backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), 1024.0 * want)
    before = lin.weight.detach().numpy().copy()
    scaler.step(opt)
    np.testing.assert_allclose(lin.weight.detach().numpy(), before - 0.1 * want, rtol=1e-6)  # unscaled grads
    scaler.update()
    assert scaler.get_scale() == 1024.0
    opt.zero_grad()
    scaler.scale(lin(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2048.0  # two clean steps: grown
    opt.zero_grad()
    (lin(x).sum() * float("inf")).backward()  # an overflowing gradient
    before = lin.weight.detach().numpy().copy()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    assert scaler.step(opt) is None
    np.testing.assert_array_equal(lin.weight.detach().numpy(), before)  # skipped
    scaler.update()
    assert scaler.get_scale() == 1024.0
    state = scaler.state_dict()
    other = tessel.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.get_scale() == 1024.0
    off = tessel.amp.GradScaler(enabled=False)
    loss = lin(x).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0


def _live_mib():
    line = [ln for ln in tessel.memory_report().splitlines() if ln.strip().startswith("total")][0]
    return float(line.split()[1])


def test_checkpoint_recomputes_once_equals_plain_gradients_and_keeps_less():
    from functools import partial
    from tessel.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
    rng = np.random.default_rng(0)
    ws = [tessel.tensor(rng.standard_normal((128, 128)).astype(np.float32) * 0.1, requires_grad=True)
          for _ in range(6)]
    x = tessel.tensor(rng.standard_normal((64, 128)).astype(np.float32), requires_grad=True)
    calls = []

    def block(h, scale, *, shift=0.0):
        calls.append(1)
        for w in ws:
            h = F.dropout((h @ w).tanh(), p=0.25) * scale + shift
        return h, None  # a non-tensor output part comes back as it was

    def run(mode):
        for t in ws + [x]:
            t.grad = None
        calls.clear()
        tessel.manual_seed(5)
        base = _live_mib()
        if mode == "plain":
            out, none = block(x, 2.0, shift=0.5)
        else:
            # (context_fn=None is torch's TypeError: full checkpointing leaves it out)
            ctx = {} if mode == "full" else {"context_fn": partial(create_selective_checkpoint_contexts, ["matmul"])}
            out, none = checkpoint(block, x, 2.0, shift=0.5, use_reentrant=False, **ctx)
        kept = _live_mib() - base
        assert none is None
        out.sum().backward()
        return kept, len(calls), [t.grad.numpy().copy() for t in ws + [x]]

    plain_kept, plain_calls, plain = run("plain")
    full_kept, full_calls, full = run("full")
    sel_kept, sel_calls, sel = run("selective")
    assert (plain_calls, full_calls, sel_calls) == (1, 2, 2)  # one recompute, in the backward
    for a, b, c in zip(plain, full, sel):
        np.testing.assert_array_equal(a, b)  # the dropout masks replayed: bit-equal gradients
        np.testing.assert_array_equal(a, c)
    assert full_kept < sel_kept < plain_kept, (full_kept, sel_kept, plain_kept)
    # Without preserving the generator the recompute draws other masks: the gradients differ.
    tessel.manual_seed(5)
    out, _ = checkpoint(block, x, 2.0, preserve_rng_state=False)
    for t in ws:
        t.grad = None
    out.sum().backward()
    assert not np.array_equal(ws[0].grad.numpy(), plain[0])
    with tessel.no_grad():  # nothing to differentiate: a plain call
        calls.clear()
        checkpoint(block, x, 2.0)
        assert len(calls) == 1


def test_checkpoint_wrapper_on_fully_shard_blocks_equals_one_plain_rank():
    from tessel.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper, apply_activation_checkpointing, checkpoint_wrapper)
    from tessel.utils.checkpoint import checkpoint_sequential
    import tessel.distributed as dist
    from tessel.distributed.fsdp import fully_shard

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return x + F.gelu(self.fc(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block(), Block(), Block()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x.pow(2).mean()

    x = tessel.from_numpy(np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32))
    tessel.manual_seed(0)
    ref = Net()
    ref(x).backward()
    want = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    keys = sorted(ref.state_dict())

    tessel.manual_seed(0)
    seq = nn.Sequential(Block(), Block(), Block())
    checkpoint_sequential(seq, 2, x, use_reentrant=False).pow(2).mean().backward()
    for i in range(3):
        np.testing.assert_allclose(seq[i].fc.weight.grad.numpy(), want["layers.%d.fc.weight" % i], rtol=1e-6)

    got = {}

    def run(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        net = Net()
        net.layers[0] = checkpoint_wrapper(net.layers[0])
        apply_activation_checkpointing(net, check_fn=lambda m: isinstance(m, Block))
        assert all(isinstance(b, CheckpointWrapper) for b in net.layers)
        assert sorted(net.state_dict()) == keys  # the same names, no wrapper prefix
        for block in net.layers:
            fully_shard(block)
        fully_shard(net)
        net(x[world.rank * 2:(world.rank + 1) * 2]).backward()
        got[world.rank] = {n: p.grad.full_tensor().numpy() for n, p in net.named_parameters()}
        dist.destroy_process_group()

    tessel.run_ranks(2, run)
    for n, g in want.items():
        # each rank's loss is the mean over its half: the averaged gradient is the full batch's
        np.testing.assert_allclose(got[0][n], g, rtol=1e-5, atol=1e-7, err_msg=n)



def test_checkpoint_wrapper_on_cpp_layers_recomputes_them_with_the_same_values():
    from tessel.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper, apply_activation_checkpointing, checkpoint_wrapper)
    from tessel.profiler import profile

    def build():
        tessel.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.ReLU(), nn.Linear(6, 2))

    x = tessel.from_numpy(np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32))

    def run(net):
        tessel.manual_seed(7)  # the dropout mask
        with profile() as prof:
            net(x).pow(2).sum().backward()
        linear_calls = [e.count for e in prof.key_averages() if e.key == "linear"][0]
        return linear_calls, {n: p.grad.numpy() for n, p in net.named_parameters()}

    plain_calls, want = run(build())
    net = build()
    assert checkpoint_wrapper(net[0]) is net[0] and type(net[0]) is nn.Linear  # wrapped in place
    apply_activation_checkpointing(net, check_fn=lambda m: isinstance(m, (nn.Linear, nn.Dropout)))
    assert tessel._C._is_checkpoint_wrapped(net[0]) and tessel._C._is_checkpoint_wrapped(net[3])
    assert isinstance(net[1], CheckpointWrapper)  # a module defined in Python: its class is wrapped
    assert sorted(net.state_dict()) == sorted(build().state_dict())
    calls, got = run(net)
    assert (plain_calls, calls) == (2, 4)  # each Linear's forward ran again in backward
    for n, g in want.items():  # the recomputed dropout drew the same mask (the RNG state is replayed)
        np.testing.assert_array_equal(got[n], g, err_msg=n)
    with pytest.raises(NotImplementedError, match="context_fn not supported on a C\\+\\+ layer"):
        checkpoint_wrapper(nn.Linear(2, 2), context_fn=lambda: None)


def test_module_list_and_sequential_item_assignment_replace_the_child():
    ml = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    new = nn.Linear(2, 3)
    ml[-1] = new
    assert ml[1] is new and [tuple(p.shape) for p in ml.parameters()] == [(2, 2), (2,), (3, 2), (3,)]
    ml[0] = ml[0]  # the same module again: nothing changes
    assert sorted(ml.state_dict()) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    with pytest.raises(IndexError, match="index 2 is out of range"):
        ml[2] = nn.Linear(1, 1)
    seq = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    seq[1] = nn.ReLU()
    assert seq(tessel.tensor([[-1.0, 1.0]])).shape == (1, 2) and isinstance(seq[1], nn.ReLU)


def test_replacing_a_child_hands_the_old_one_back_to_python():
    import gc

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            return self.head(self.body(x).tanh())

    net = Net()
    old = net.head
    h = tessel.tensor(np.arange(8.0, dtype=np.float32).reshape(2, 4))
    want = old(h).detach().numpy()
    net.head = nn.Linear(4, 5)  # a new head, as for fine-tuning
    assert net(h).shape == (2, 5)
    assert [n for n, _ in net.named_parameters()] == ["body.weight", "body.bias", "head.weight", "head.bias"]
    assert tuple(net.head.weight.shape) == (5, 4)
    del net
    gc.collect()  # the old head is Python's again: it outlives the model it came from
    np.testing.assert_array_equal(old(h).detach().numpy(), want)
    other = Net()
    other.head = old  # and can join another model
    assert other.head is old and np.array_equal(other.head(h).detach().numpy(), want)


def test_autocast_policies_follow_torchs_cpu_lists_for_losses_addmm_and_mixed_norms():
    x, w = tessel.randn(3, 4), tessel.randn(4, 4)
    target = tessel.tensor([0, 1, 2])
    with tessel.autocast("cpu"):
        h = x @ w
        assert h.dtype == tessel.bfloat16
        for out in (F.mse_loss(h, h * 0), F.l1_loss(h, h), F.smooth_l1_loss(h, h), F.huber_loss(h, h),
                    F.nll_loss(h.log_softmax(-1), target), F.binary_cross_entropy_with_logits(h, h.sigmoid()),
                    h.prod(), tessel.prod(h)):
            assert out.dtype == tessel.float32  # torch's float32 list
        assert tessel.addmm(x, x, w).dtype == tessel.bfloat16  # lower precision, the input included
        assert tessel.baddbmm(x[None], x[None], w[None]).dtype == tessel.bfloat16
        # A bf16 activation into float32 norms: normalized in float32, returned bf16 (torch's mixed norms).
        net = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.RMSNorm(4))
        out = net(x)
        assert out.dtype == tessel.bfloat16
    out.float().sum().backward()
    assert all(p.grad.dtype == tessel.float32 for p in net.parameters())
    ln = nn.LayerNorm(4)
    hb = (x @ w).to(tessel.bfloat16)
    np.testing.assert_array_equal(ln(hb).float().detach().numpy(), ln(hb.float()).to(tessel.bfloat16).float().detach().numpy())


def test_setting_a_child_to_none_or_deleting_it_drops_it_as_torch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            x = self.body(x)
            return x if self.head is None else self.head(x)

    net = Net()
    old = net.head
    net.head = None
    assert net.head is None and net(tessel.ones(2, 4)).shape == (2, 4)
    assert sorted(net.state_dict()) == ["body.bias", "body.weight"]
    net.head = nn.Linear(4, 5)  # registered again under the same name
    assert net(tessel.ones(2, 4)).shape == (2, 5) and sorted(net.state_dict())[-1] == "head.weight"
    del net.head
    assert sorted(net.state_dict()) == ["body.bias", "body.weight"]
    with pytest.raises(AttributeError, match="has no attribute 'head'"):
        net.head
    assert old(tessel.ones(1, 4)).shape == (1, 3)  # the dropped module is Python's again
    other = Net()
    other.head = old
    assert other.head is old


def test_review_fixes_autocast_flag_per_device_grad_scaler_update_and_saver_modules():
    with tessel.autocast("cpu"):
        # torch's is_autocast_enabled() without an argument reads the CUDA flag: False in a CPU region
        assert not tessel.is_autocast_enabled() and tessel.is_autocast_enabled("cpu")
        assert not tessel.is_autocast_enabled("cuda")
    scaler = tessel.amp.GradScaler("cpu", growth_factor=3.0)
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval()) == (3.0, 0.5, 2000)
    with pytest.raises(AssertionError, match="No inf checks were recorded"):
        scaler.update()
    from tessel.distributed.checkpoint.state_dict_loader import load
    from tessel.distributed.checkpoint.state_dict_saver import save
    import tessel.distributed.checkpoint as dcp
    assert save is dcp.save and load is dcp.load
