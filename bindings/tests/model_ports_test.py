"""Behaviours found by porting model code to tessel by its imports and comparing with torch 2.15: HF BERT's
masked-LM head (a bias assigned to a Linear built without one), Swin's roll-then-view, Mixtral's experts without
tokens, DeepSeek's auxiliary-loss Function, T5's integer buckets, mamba-minimal's keyword arguments, and
pytorch/examples' legacy constructors, warnings and optimizer state. Expected values are computed another way
(numpy, closed forms) or are torch 2.15's printed results for the same lines."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn


def test_a_bias_or_norm_weight_assigned_after_construction_takes_part_in_forward_and_backward():
    # HF BertLMPredictionHead: decoder = nn.Linear(h, V, bias=False); self.bias = Parameter(zeros(V));
    # decoder.bias = self.bias. The C++ layers read a bias flag fixed at construction and ignored it silently.
    x_np = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)
    x = tessel.tensor(x_np)
    lin = nn.Linear(3, 2, bias=False)
    bias = nn.Parameter(tessel.tensor([5.0, -1.0]))
    lin.bias = bias
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    out = lin(x)
    np.testing.assert_allclose(out.detach().numpy(), x_np @ lin.weight.detach().numpy().T + [5.0, -1.0], rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(bias.grad.numpy(), [1.0, 1.0])
    lin.bias = None  # and back: no bias
    np.testing.assert_allclose(lin(x).detach().numpy(), x_np @ lin.weight.detach().numpy().T, rtol=1e-6)

    row = np.array([[1.0, 2.0]], dtype=np.float32)  # normalized: [-1, 1] (up to eps)
    norm = (row - row.mean()) / np.sqrt(row.var() + 1e-5)
    ln = nn.LayerNorm(2, bias=False)
    ln.bias = nn.Parameter(tessel.tensor([5.0, 5.0]))
    out = ln(tessel.tensor(row))
    np.testing.assert_allclose(out.detach().numpy(), norm + 5.0, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(ln.bias.grad.numpy(), [1.0, 1.0])
    bare = nn.LayerNorm(2, elementwise_affine=False)
    bare.weight = nn.Parameter(tessel.tensor([2.0, 3.0]))
    np.testing.assert_allclose(bare(tessel.tensor(row)).detach().numpy(), norm * [2.0, 3.0], rtol=1e-6)
    rms = nn.RMSNorm(2, elementwise_affine=False)
    rms.weight = nn.Parameter(tessel.tensor([2.0, 3.0]))
    want = row / np.sqrt((row ** 2).mean() + np.finfo(np.float32).eps) * [2.0, 3.0]
    np.testing.assert_allclose(rms(tessel.tensor(row)).detach().numpy(), want, rtol=1e-6)



def test_roll_flip_index_select_and_indexing_give_contiguous_results_that_view_as_torchs():
    # Swin: shifted = torch.roll(x, (-s, -s), dims=(1, 2)) then .view(B, H * W, C): tessel's gather results kept
    # the indexed dim moved (a permuted view), so the view raised.
    x_np = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)
    x = tessel.tensor(x_np)
    shifted = tessel.roll(x, shifts=(-1, -1), dims=(1, 2))
    assert shifted.is_contiguous()
    np.testing.assert_array_equal(shifted.view(2, 16, 3).numpy(), np.roll(x_np, (-1, -1), (1, 2)).reshape(2, 16, 3))
    idx = tessel.tensor([2, 0])
    mask = tessel.tensor([True, False, True, True])
    cases = {"flip": (x.flip(2), x_np[:, :, ::-1]), "index_select": (x.index_select(2, idx), x_np[:, :, [2, 0]]),
             "x[:, :, idx]": (x[:, :, idx], x_np[:, :, [2, 0]]), "x[:, mask]": (x[:, mask], x_np[:, [0, 2, 3]]),
             "repeat_interleave": (x.repeat_interleave(2, dim=1), np.repeat(x_np, 2, axis=1)),
             "cumprod": (x.cumprod(2), np.cumprod(x_np, axis=2))}
    for name, (got, want) in cases.items():
        assert got.is_contiguous(), name
        np.testing.assert_allclose(got.view(-1).numpy(), np.ascontiguousarray(want).reshape(-1), rtol=1e-6,
                                   err_msg=name)


def test_index_add_with_no_indices_leaves_the_tensor_and_its_gradient_flows():
    # Mixtral's MoE block: an expert that got no tokens index_adds an empty [0, h] block.
    lin = nn.Linear(3, 3)
    empty = tessel.tensor([], dtype=tessel.int64)
    out = tessel.ones(4, 3).index_add(0, empty, lin(tessel.zeros(0, 3)))
    np.testing.assert_array_equal(out.detach().numpy(), np.ones((4, 3)))
    (out.sum() + lin(tessel.ones(1, 3)).sum()).backward()
    np.testing.assert_array_equal(lin.bias.grad.numpy(), [1.0, 1.0, 1.0])  # only the second term's
    inplace = tessel.ones(4, 3)
    assert inplace.index_add_(0, empty, tessel.zeros(0, 3)) is inplace and inplace.sum().item() == 12.0


def test_a_function_may_return_a_gradient_its_input_broadcasts_to():
    # DeepSeek-V2's AddAuxiliaryLoss returns ones(1) for a 0-d loss: torch sums such gradients down.
    class AddAux(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x, loss):
            return x

        @staticmethod
        def backward(ctx, g):
            return g, tessel.ones(1, dtype=g.dtype) * 3.0

    class Spread(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return (g * 2).unsqueeze(0).expand(3, *g.shape)  # [3, 2] for a [2] input

    x, aux = tessel.ones(2, requires_grad=True), tessel.tensor(0.5, requires_grad=True)
    AddAux.apply(x, aux).sum().backward()
    assert aux.grad.shape == () and aux.grad.item() == 3.0
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    x.grad = None
    Spread.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])

    class Wrong(tessel.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return tessel.ones(3)  # [2] does not broadcast to [3]

    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - got \[3\] but expected shape "
                                           r"compatible with \[2\]"):
        Wrong.apply(tessel.ones(2, requires_grad=True)).sum().backward()


def test_in_place_add_and_sub_of_integer_and_mixed_dtype_tensors_as_torch():
    # T5's _relative_position_bucket: relative_buckets += torch.where(is_small, rp, rp_if_large) (int64 += int64).
    a = tessel.tensor([1, 2, 3])
    a += tessel.tensor([1, 2, 3])
    assert a.tolist() == [2, 4, 6] and a.dtype == tessel.int64
    assert a.add_(tessel.tensor([1, 1, 1]), alpha=2).tolist() == [4, 6, 8]
    assert a.sub_(tessel.tensor([1, 2, 3]), alpha=2).tolist() == [2, 2, 2]
    a += a > 1  # long += bool
    assert a.tolist() == [3, 3, 3] and a.dtype == tessel.int64
    small = tessel.tensor([250], dtype=tessel.uint8)
    assert small.add_(tessel.tensor([10])).tolist() == [4]  # computed in int64, wraps back into uint8 as torch
    f = tessel.ones(2)
    f.add_(tessel.full((2,), 0.5, dtype=tessel.float64))
    assert f.dtype == tessel.float32 and f.tolist() == [1.5, 1.5]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        tessel.tensor([1]).add_(tessel.tensor([0.5]))
    with pytest.raises(NotImplementedError, match="with two bool tensors is not supported"):
        tessel.tensor([True]).sub_(tessel.tensor([True]))


def test_numpy_argument_names_and_torchs_split_size_keyword():
    # mamba-minimal: probs.sum(axis=1, keepdims=True); x.split(split_size=[...], dim=-1)
    x_np = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = tessel.tensor(x_np)
    np.testing.assert_array_equal(x.sum(axis=1, keepdims=True).numpy(), x_np.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(tessel.sum(x, axis=0).numpy(), x_np.sum(axis=0))
    np.testing.assert_array_equal(x.mean(axis=0).numpy(), x_np.mean(axis=0))
    np.testing.assert_array_equal(x.cumsum(axis=1).numpy(), np.cumsum(x_np, axis=1))
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), x_np.argmax(axis=1))
    np.testing.assert_array_equal(x.max(axis=1).values.numpy(), x_np.max(axis=1))
    np.testing.assert_allclose(x.std(axis=1).numpy(), x_np.std(axis=1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(x.softmax(axis=1).numpy().sum(axis=1), [1.0] * 3, rtol=1e-6)
    np.testing.assert_array_equal(tessel.cat([x, x], axis=1).numpy(), np.concatenate([x_np, x_np], axis=1))
    assert x.sum(1).tolist() == x_np.sum(1).tolist() and x.sum(dim=1, dtype=tessel.float64).dtype == tessel.float64
    with pytest.raises(TypeError, match="incompatible function arguments"):
        x.sum(foo=1)
    assert [tuple(p.shape) for p in x.split(split_size=[1, 3], dim=-1)] == [(3, 1), (3, 3)]
    assert [tuple(p.shape) for p in x.split(split_size=2, dim=1)] == [(3, 2), (3, 2)]
    assert [tuple(p.shape) for p in tessel.split(x, split_size_or_sections=[2, 1])] == [(2, 4), (1, 4)]


def test_the_legacy_tensor_constructor_and_printing_a_parameter():
    # word_language_model/generate.py: torch.Tensor([[word_idx]]).long()
    assert tessel.Tensor([[6]]).long().tolist() == [[6]] and tessel.Tensor([[6]]).dtype == tessel.float32
    assert tuple(tessel.Tensor(2, 3).shape) == (2, 3) and tuple(tessel.Tensor().shape) == (0,)
    assert tuple(tessel.Tensor(tessel.Size([4])).shape) == (4,)  # a Size is a shape, a tuple is data
    assert tessel.Tensor((2, 3)).tolist() == [2.0, 3.0]
    assert tessel.Tensor(np.array([1.5, 2.5], dtype=np.float64)).dtype == tessel.float32
    t = tessel.ones(2)
    alias = tessel.Tensor(t)
    alias.add_(1.0)
    assert t.tolist() == [2.0, 2.0]  # torch.Tensor(tensor) shares it
    p = nn.Parameter(tessel.zeros(2))
    assert str(p) == repr(p) == "Parameter containing:\ntensor([0., 0.], requires_grad=True)"


def test_torchs_warnings_for_these_constructs(recwarn):
    import warnings

    from tessel import _extra, _tensor
    from tessel.utils.data import DataLoader, TensorDataset

    def caught(fn):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn()
        return [str(x.message) for x in w]

    assert caught(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1)) == [
        "enable_nested_tensor is True, but self.use_nested_tensor is False because encoder_layer.self_attn.batch_first "
        "was not True(use batch_first for better inference performance)"]
    assert caught(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1)) == []
    assert caught(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1,
                                                enable_nested_tensor=False)) == []
    assert caught(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True,
                                                                           norm_first=True), 1)) == [
        "enable_nested_tensor is True, but self.use_nested_tensor is False because encoder_layer.norm_first was True"]
    for rnn in (nn.LSTM, nn.GRU, nn.RNN):
        assert caught(lambda: rnn(4, 4, 1, dropout=0.5)) == [
            "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects num_layers "
            "greater than 1, but got dropout=0.5 and num_layers=1"]
        assert caught(lambda: rnn(4, 4, 2, dropout=0.5)) == []
    _tensor._warned_float.clear()
    x = tessel.ones(1, requires_grad=True) * 2
    assert caught(lambda: float(x)) == ["Converting a tensor with requires_grad=True to a scalar may lead to "
                                        "unexpected behavior.\nConsider using tensor.detach() first."]
    assert caught(lambda: float(x)) == [] and caught(lambda: x.item()) == []  # once per process, as torch
    assert caught(lambda: list(DataLoader(TensorDataset(tessel.ones(2)), pin_memory=True))) == [
        "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."]
    _extra._warned_meshgrid.clear()
    grids = []
    assert caught(lambda: grids.extend(tessel.meshgrid([tessel.arange(2), tessel.arange(3)]))) == [
        "torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument."]
    assert [tuple(g.shape) for g in grids] == [(2, 3), (2, 3)]  # "ij"
    assert caught(lambda: tessel.meshgrid(tessel.arange(2), tessel.arange(3))) == []


def test_scheduler_state_dicts_carry_torchs_keys():
    opt = tessel.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    sched = tessel.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    opt.step()
    sched.step()
    assert sorted(sched.state_dict()) == ["_get_lr_called_within_step", "_is_initial", "_last_lr", "_step_count",
                                          "base_lrs", "gamma", "last_epoch", "step_size"]  # torch 2.15's
    assert sched.state_dict()["_is_initial"] is False and sched.get_last_lr() == [0.05]


def test_optimizers_print_and_order_their_state_as_torch():
    m = nn.Linear(2, 2)
    opt = tessel.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.5}], lr=0.1)
    group = ("    dampening: 0\n    differentiable: False\n    foreach: None\n    fused: None\n    lr: %s\n"
             "    maximize: False\n    momentum: 0\n    nesterov: False\n    weight_decay: 0\n")
    assert repr(opt) == ("SGD (\nParameter Group 0\n" + group % 0.1 + "\nParameter Group 1\n" + group % 0.5 + ")")
    for name, keys in (("Adam", ["step", "exp_avg", "exp_avg_sq"]), ("Adadelta", ["step", "square_avg", "acc_delta"]),
                       ("NAdam", ["step", "mu_product", "exp_avg", "exp_avg_sq"])):  # torch 2.15's orders
        opt = getattr(tessel.optim, name)(m.parameters())
        m(tessel.ones(1, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
        assert [list(v) for v in opt.state_dict()["state"].values()] == [keys, keys], name


def test_cycle_scheduler_states_load_with_weights_only_and_freeze_bn_helpers_find_torchs_base_classes(tmp_path):
    import io
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.InstanceNorm2d(2), nn.SyncBatchNorm(2))
    opt = tessel.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = tessel.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    for _ in range(3):
        opt.step()
        sched.step()
    buf = io.BytesIO()
    tessel.save({"sched": sched.state_dict()}, buf)
    buf.seek(0)
    state = tessel.load(buf, weights_only=True)["sched"]  # it held a _MomentumCycle object: refused
    assert state["cycle_momentum"] is True and state["use_beta1"] is False
    opt2 = tessel.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    again = tessel.optim.lr_scheduler.OneCycleLR(opt2, max_lr=1.0, total_steps=10)
    again.load_state_dict(state)
    opt.step()
    sched.step()
    opt2.step()
    again.step()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert opt2.param_groups[0]["momentum"] == opt.param_groups[0]["momentum"]
    from tessel.nn.modules import batchnorm, conv, instancenorm
    kinds = [(type(m).__name__, isinstance(m, batchnorm._BatchNorm), isinstance(m, batchnorm._NormBase),
              isinstance(m, instancenorm._InstanceNorm), isinstance(m, conv._ConvNd)) for m in model]
    assert kinds == [("Conv2d", False, False, False, True), ("BatchNorm2d", True, True, False, False),
                     ("InstanceNorm2d", False, True, True, False), ("SyncBatchNorm", True, True, False, False)]


def test_label_smoothing_cross_entropy_under_bf16_autocast_runs_in_float32():
    # timm-style training: autocast("cpu", bfloat16) around the model and a label-smoothing loss raised a dtype
    # mismatch (the smoothing term stayed bfloat16 while the class term ran in float32)
    import tessel.nn.functional as F
    rng = np.random.default_rng(1)
    logits_np, target_np = rng.standard_normal((4, 5)).astype(np.float32), np.array([0, 3, 1, 4])
    lin = nn.Linear(5, 5)
    with tessel.no_grad():
        lin.weight.copy_(tessel.eye(5))
        lin.bias.zero_()
    x = tessel.tensor(logits_np)
    with tessel.autocast("cpu", dtype=tessel.bfloat16):
        logits = lin(x)
        assert logits.dtype == tessel.bfloat16
        loss = F.cross_entropy(logits, tessel.tensor(target_np), label_smoothing=0.1)
    assert loss.dtype == tessel.float32
    lb = logits.float().numpy().astype(np.float64)  # the bf16 logits, as float32 takes them
    logp = lb - np.log(np.exp(lb).sum(-1, keepdims=True))
    want = np.mean(0.9 * -logp[np.arange(4), target_np] + 0.1 * -logp.mean(-1))
    np.testing.assert_allclose(loss.item(), want, rtol=1e-5)
    loss.backward()
    assert lin.weight.grad.dtype == tessel.float32


def test_data_utilities_as_torch_scripts_use_them():
    from typing import List

    from tessel.utils.data import DataLoader, Dataset, IterableDataset, Sampler, Subset
    from tessel.utils.data._utils.collate import default_collate
    from tessel.utils.data.dataloader import default_convert

    class Pairs(Dataset[int]):  # torch's Dataset is a typing.Generic
        def __init__(self, n):
            self.n, self.batched_calls = n, 0

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return i, "path%d" % i

        def __getitems__(self, indices):  # HF datasets: one call per batch
            self.batched_calls += 1
            return [(10 * i, "path%d" % i) for i in indices]

    class Buckets(Sampler[List[int]]):
        def __iter__(self):
            return iter([[0, 1], [2, 3, 4]])

        def __len__(self):
            return 2

    data = Pairs(5)
    loader = DataLoader(data, batch_sampler=Buckets())  # (torch 2.15's Sampler takes no data_source)
    it = iter(loader)
    assert len(it) == 2
    batches = list(it)
    assert batches[0][0].tolist() == [0, 10] and batches[0][1] == ("path0", "path1")  # strings: a tuple
    assert data.batched_calls == 2
    sub = Subset(data, [4, 3])
    assert sub.__getitems__([0, 1]) == [(40, "path4"), (30, "path3")]
    assert len(data + data) == 10 and (data + data)[7] == (2, "path2")
    assert default_collate([(1, "a"), (2, "b")])[1] == ("a", "b")
    converted = default_convert((np.float32(1.5), "x"))
    assert isinstance(converted, list) and converted[0].item() == 1.5 and converted[1] == "x"  # torch: a list

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))
    assert list(Stream() + Stream()) == [0, 1, 2, 0, 1, 2]


def test_sgd_with_momentum_resumes_from_a_saved_momentum_buffer():
    # torch's SGD state has no "step": the loaded buffer was started over from the gradient on the next step
    def run(resume):
        w = nn.Parameter(tessel.tensor([1.0, 2.0]))
        opt = tessel.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=resume == "nesterov")
        for _ in range(3):
            opt.zero_grad()
            (w * w).sum().backward()
            opt.step()
        state = opt.state_dict()
        w2 = nn.Parameter(w.detach().clone())
        opt2 = tessel.optim.SGD([w2], lr=0.1, momentum=0.9, nesterov=resume == "nesterov")
        opt2.load_state_dict(state)
        for o, p in ((opt, w), (opt2, w2)):
            o.zero_grad()
            (p * p).sum().backward()
            o.step()
        return w.detach().tolist(), w2.detach().tolist()
    for kind in ("momentum", "nesterov"):
        continued, resumed = run(kind)
        np.testing.assert_allclose(resumed, continued, rtol=1e-7, err_msg=kind)

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
