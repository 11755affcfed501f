"""Python subclasses of tessel's C++ layers (Linear, Embedding, LayerNorm, RMSNorm) behave as subclasses of
torch's: their forward runs wherever the layer is called (a Python parent, a C++ GPT block, inside hooks),
`super().forward` reaches the layer's own, `layer.forward = fn` on an instance is honoured, an overridden
reset_parameters runs at construction, parent.train() calls a child's own train(), and copies keep the
subclass. The models are LoRA (microsoft/LoRA's loralib pattern) and variations; expected values come from
the composed function in numpy or from the plain layer."""
import copy
import io
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
import tessel.nn.functional as F


class LoRALinear(nn.Linear):
    """loralib's Linear: W x + b + (x Aᵀ) Bᵀ · scale, A and B trainable, W frozen."""

    def __init__(self, i, o, r=2, alpha=4):
        nn.Linear.__init__(self, i, o)
        self.r, self.scale = r, alpha / r
        self.lora_A = nn.Parameter(tessel.zeros(r, i))
        self.lora_B = nn.Parameter(tessel.zeros(o, r))
        self.weight.requires_grad = False
        self.reset_parameters()

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)
        if hasattr(self, "lora_A"):  # loralib's guard: Linear.__init__ calls this before lora_A exists
            nn.init.constant_(self.lora_A, 0.5)
            nn.init.constant_(self.lora_B, 0.25)

    def forward(self, x):
        return super().forward(x) + (x @ self.lora_A.t()) @ self.lora_B.t() * self.scale


def test_a_subclass_forward_runs_and_trains_only_its_adapters():
    tessel.manual_seed(0)
    m = LoRALinear(3, 2)
    x = np.array([[1.0, -2.0, 0.5], [0.25, 1.5, -1.0]], dtype=np.float32)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    expected = x @ w.T + b + (x @ np.full((2, 3), 0.5).T) @ np.full((2, 2), 0.25).T * 2.0
    out = m(tessel.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)
    out.sum().backward()
    assert m.weight.grad is None and m.lora_A.grad is not None
    # d/dA of sum((x Aᵀ) Bᵀ · 2) = 2 · (Bᵀ 1) ⊗ (1ᵀ x)
    np.testing.assert_allclose(m.lora_A.grad.numpy(), 2.0 * np.outer(np.full(2, 0.5), x.sum(0)), rtol=1e-6)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["bias", "lora_A", "lora_B"]


@pytest.mark.parametrize("layer, args, x", [
    (nn.Linear, (2, 2), lambda: tessel.ones(1, 2)),
    (nn.Embedding, (4, 2), lambda: tessel.tensor([1])),
    (nn.LayerNorm, (2,), lambda: tessel.randn(1, 2)),
    (nn.RMSNorm, (2,), lambda: tessel.randn(1, 2)),
], ids=["Linear", "Embedding", "LayerNorm", "RMSNorm"])
def test_every_cpp_layer_runs_a_subclass_forward_and_reaches_its_own(layer, args, x):
    class Seven(layer):
        def forward(self, v):
            return super().forward(v) * 0 + 7

    class Doubled(layer):
        def forward(self, v):
            return super().forward(v) * 2

    plain, inp = layer(*args), x()
    np.testing.assert_array_equal(Seven(*args)(inp).detach().numpy(), np.full(plain(inp).shape, 7.0, np.float32))
    d = Doubled(*args)
    d.load_state_dict(plain.state_dict())
    np.testing.assert_allclose(d(inp).detach().numpy(), 2 * plain(inp).detach().numpy(), rtol=1e-6)
    assert type(nn.Sequential(d)[0]) is Doubled
    np.testing.assert_allclose(nn.Sequential(d)(inp).detach().numpy(), 2 * plain(inp).detach().numpy(), rtol=1e-6)


def test_an_instance_forward_a_cpp_parent_and_hooks_use_the_override():
    lin = nn.Linear(2, 2)
    original = lin.forward
    lin.forward = lambda v: original(v) * 0 + 5  # torch honours an instance attribute
    assert lin(tessel.ones(1, 2)).tolist() == [[5.0, 5.0]]
    del lin.forward
    assert lin(tessel.zeros(1, 2)).tolist() == [lin.bias.tolist()]
    # A subclass put into a block a C++ GPT created: the C++ block calls it (as torch's LoRA injection).
    gpt = tessel.GPT(tessel.GPTConfig(vocab_size=16, d_model=8, n_heads=2, n_layers=1, seq_len=4), seed=3)
    idx = tessel.tensor([[1, 2, 3, 4]])
    before = gpt(idx).numpy()
    seven = type("Seven", (nn.Linear,), {"forward": lambda self, v: super(type(self), self).forward(v) * 0 + 7})
    calls = []
    wo = seven(8, 8, bias=False)
    wo.register_forward_hook(lambda mod, args, out: calls.append(out.detach().numpy().max()))
    gpt.layers[0].attn.wo = wo
    assert gpt.layers[0].attn.wo is wo
    after = gpt(idx).numpy()
    assert calls == [7.0] and not np.allclose(after, before)


def test_reset_parameters_overrides_run_at_construction_as_torch():
    def const(self):
        for p in self.parameters():
            nn.init.constant_(p, 0.5)

    cases = [(nn.Linear, (4, 1)), (nn.Embedding, (3, 2)), (nn.LayerNorm, (3,)), (nn.RMSNorm, (3,)),
             (nn.GroupNorm, (1, 2)), (nn.BatchNorm1d, (2,)), (nn.Bilinear, (2, 2, 1)), (nn.PReLU, ()),
             (nn.EmbeddingBag, (3, 2)), (nn.Conv1d, (1, 1, 2))]
    for cls, args in cases:
        m = type("Const" + cls.__name__, (cls,), {"reset_parameters": const})(*args)
        values = {float(v) for p in m.parameters() for v in p.detach().numpy().ravel()}
        assert values == {0.5}, (cls.__name__, values)
    # the defaults are unchanged: Linear's U(±1/sqrt(in)), Bilinear's, GroupNorm's ones / zeros
    tessel.manual_seed(3)
    lin = nn.Linear(4, 3)
    assert np.abs(lin.weight.detach().numpy()).max() <= 0.5 and len(set(lin.weight.detach().numpy().ravel())) == 12
    g = nn.GroupNorm(1, 2)
    assert g.weight.tolist() == [1.0, 1.0] and g.bias.tolist() == [0.0, 0.0]


class Frozen(nn.Module):
    """loralib's merge-on-eval: a child whose train() override does work."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.modes = []

    def train(self, mode=True):
        self.modes.append(mode)
        return super().train(mode)

    def forward(self, x):
        return self.lin(x)


def test_parent_train_and_eval_call_each_childs_own_train():
    child = Frozen()
    parent = nn.Sequential(nn.Sequential(child))
    parent.eval()
    parent.train()
    assert child.modes == [False, True] and child.lin.training
    parent.eval()
    assert not child.lin.training and not parent[0].training


def test_copies_and_pickles_keep_the_subclass_its_attributes_and_adapters():
    tessel.manual_seed(1)
    m = LoRALinear(3, 3, r=4)
    x = tessel.randn(2, 3)
    twin = copy.deepcopy(m)
    buffer = io.BytesIO()
    tessel.save(m, buffer)
    buffer.seek(0)
    loaded = tessel.load(buffer, weights_only=False)
    for c in (twin, loaded):
        assert type(c) is LoRALinear and c.r == 4 and c.lora_A.shape == (4, 3)
        assert c.lora_A is not m.lora_A and not c.weight.requires_grad
        np.testing.assert_array_equal(c(x).detach().numpy(), m(x).detach().numpy())


def test_conv_forward_takes_the_given_weight_and_bias():
    conv = nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect")
    x = tessel.randn(1, 1, 4, 4)
    w, b = conv.weight * 2, conv.bias * 0
    np.testing.assert_allclose(conv._conv_forward(x, w, b).detach().numpy(),
                               (2 * (conv(x) - conv.bias.reshape(1, 2, 1, 1))).detach().numpy(), rtol=1e-5, atol=1e-6)
    direct = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), w, b)
    np.testing.assert_allclose(conv._conv_forward(x, w, b).detach().numpy(), direct.detach().numpy(), rtol=1e-6)


def test_data_assignment_takes_the_new_shape_and_memory_and_optimizers_update_strided_parameters():
    lin = nn.Linear(3, 4)
    param = lin.weight
    w = param.detach().numpy().copy()
    lin.weight.data = lin.weight.data.transpose(0, 1)  # loralib's fan_in_fan_out (torch's set_data)
    assert lin.weight is param and tuple(param.shape) == (3, 4) and param.requires_grad
    assert not param.is_contiguous()
    np.testing.assert_array_equal(param.detach().numpy(), w.T)
    dense = nn.Parameter(tessel.tensor(w.T.copy()))
    x = tessel.tensor([[1.0, -2.0, 0.5]])
    for p in (param, dense):
        (x @ p).pow(2).sum().backward()
    for make in (lambda ps: tessel.optim.AdamW(ps, lr=0.1), lambda ps: tessel.optim.SGD(ps, lr=0.1, momentum=0.9)):
        for ps in ([param], [dense]):
            make(ps).step()
        np.testing.assert_array_equal(param.detach().numpy(), dense.detach().numpy())
    q, r = nn.Parameter(tessel.zeros(2)), tessel.ones(2)
    q.data = r  # torch: q now uses r's memory
    r.add_(1)
    assert q.tolist() == [2.0, 2.0] and q.requires_grad


def test_adam_first_step_has_torchs_rounding():
    # torch 2.15: Adam(lr=0.1) after one step with gradient 1 gives -0.09999998658895493 (1 - beta2 in double);
    # 1 - 0.999 in float32 gave -0.10000066459178925.
    p = nn.Parameter(tessel.zeros(1))
    opt = tessel.optim.Adam([p], lr=0.1)
    p.grad = tessel.tensor([1.0])
    opt.step()
    assert p.item() == -0.09999998658895493


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
