"""Activation checkpointing as torch 2.15 does it (values and messages printed by torch 2.15): torchtitan's save
list's handles, checkpoint_wrapper's modes, the reentrant rerun, what a selective policy sees, torch's op names,
checkpoint's argument checks, and the rerun's shape and dtype check (determinism_check)."""
import functools
import warnings

import pytest

import tessel
import tessel.nn as nn
from tessel.distributed.algorithms._checkpoint import checkpoint_wrapper as cw
from tessel.utils import checkpoint as cp

aten = tessel.ops.aten
F = tessel.nn.functional


def test_torchtitans_module_level_save_list_builds_with_torchs_handles():
    save_list = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
                 aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_cudnn_attention.default,
                 aten._scaled_dot_product_attention_math.default,
                 aten._scaled_dot_product_fused_attention_overrideable.default,
                 tessel.ops._c10d_functional.reduce_scatter_tensor.default,
                 tessel.ops._c10d_functional.all_to_all_single.default, aten.max.default,
                 tessel._higher_order_ops.flex_attention, tessel._higher_order_ops.inductor_compiled_code}
    assert tessel._higher_order_ops.flex_attention in save_list and aten.max.default in save_list
    assert aten.addmm.default not in save_list  # torch: only mm is listed
    assert str(tessel._higher_order_ops.flex_attention) == "flex_attention"
    assert tessel._higher_order_ops.flex_attention.name() == "flex_attention"
    assert getattr(tessel.ops.torch_attn, "_varlen_attn", None) is None  # torch: None
    with pytest.raises(AttributeError, match="'_OpNamespace' 'torch_attn' object has no attribute '_varlen_attn'"):
        tessel.ops.torch_attn._varlen_attn
    mm = aten.mm.default
    assert str(mm.overloadpacket) == "aten.mm" and mm.overloadpacket is aten.mm  # torch: aten.mm, True
    assert (mm._opname, mm._overloadname, mm.name(), mm.__name__) == ("mm", "default", "aten::mm", "mm.default")
    mul = aten.mul.Tensor
    assert (mul._opname, mul._overloadname, str(mul.overloadpacket), mul.name()) == \
        ("mul", "Tensor", "aten.mul", "aten::mul.Tensor")


class _Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return self.l(x).tanh()


def test_checkpoint_wrapper_keeps_each_wraps_mode():
    cw.checkpoint_wrapper(_Blk(), checkpoint_impl=cw.CheckpointImpl.REENTRANT)
    b = cw.checkpoint_wrapper(_Blk())  # NO_REENTRANT: the parameters get gradients without an input needing one
    b(tessel.ones(2, 3)).sum().backward()
    assert b._checkpoint_wrapped_module.l.weight.grad is not None  # torch: `weight.grad is None` -> False


def test_reentrant_checkpoint_reruns_the_whole_function():
    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    n = {"fwd": 0}
    m.register_forward_hook(lambda *a: n.__setitem__("fwd", n["fwd"] + 1))
    x = tessel.ones(2, 3, requires_grad=True)
    cp.checkpoint(m, x, use_reentrant=True).sum().backward()
    assert n == {"fwd": 2}  # torch: {'fwd': 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cp.checkpoint(m, x).sum().backward()  # unset: torch's reentrant default
    assert n == {"fwd": 4}


def _policy_calls(fn, x):
    seen = []

    def policy(ctx, func, *args):
        seen.append((str(func), [tuple(a.shape) if isinstance(a, tessel.Tensor) else a for a in args]))
        return cp.CheckpointPolicy.PREFER_RECOMPUTE
    ctx = functools.partial(cp.create_selective_checkpoint_contexts, policy)
    cp.checkpoint(fn, x, use_reentrant=False, context_fn=ctx).sum().backward()
    return seen


def test_a_policy_sees_linear_as_torchs_mm_and_addmm_with_torchs_arguments():
    lin, lin_nb = nn.Linear(4, 6), nn.Linear(4, 6, bias=False)
    x = tessel.ones(2, 3, 4, requires_grad=True)
    seen = _policy_calls(lambda t: lin(t) + lin_nb(t), x)
    # torch 2.15: aten.addmm.default [(6,), (6, 4), (4, 6)] and aten.mm.default [(6, 4), (4, 6)]
    assert ("aten.addmm.default", [(6,), (6, 4), (4, 6)]) in seen
    assert ("aten.mm.default", [(6, 4), (4, 6)]) in seen
    w = lin_nb.weight.detach().numpy()
    mm_args = []

    def policy(ctx, func, *args):  # torchtitan's `args[1].shape in mm_recompute_shapes`, and the values
        if func == aten.mm.default:
            mm_args.append(args[1].numpy().copy())
        return func == aten.mm.default
    y = cp.checkpoint(lin_nb, x, use_reentrant=False,
                      context_fn=functools.partial(cp.create_selective_checkpoint_contexts, policy))
    y.sum().backward()
    assert len(mm_args) == 1 and (mm_args[0] == w.T).all()
    assert len(x.grad.shape) == 3


def test_a_policy_and_a_save_list_see_torchs_op_names():
    lin, lin_nb, ln = nn.Linear(4, 6), nn.Linear(4, 6, bias=False), nn.LayerNorm(6)

    def f(x):
        a = lin(x)
        b = lin_nb(x)
        c = F.softmax(a, -1)
        d = ln(b)
        return (c * 2 + 1).sum() + d[0].t().sum() + x.max() + (a @ b.transpose(-1, -2)).sum()
    seen = _policy_calls(f, tessel.ones(2, 3, 4, requires_grad=True))
    keep = {"mm", "addmm", "bmm", "_softmax", "native_layer_norm", "max", "mul", "t", "transpose"}
    names = [n for n, _ in seen if n.split(".")[1] in keep]
    assert names == ["aten.addmm.default", "aten.mm.default", "aten._softmax.default",  # torch 2.15's order
                     "aten.native_layer_norm.default", "aten.mul.Tensor", "aten.t.default", "aten.max.default",
                     "aten.transpose.int", "aten.bmm.default"]
    assert ("aten.native_layer_norm.default", [(2, 3, 6), [6], (6,), (6,)]) in seen  # torch adds eps: 1e-05
    assert ("aten.bmm.default", [(2, 3, 6), (2, 6, 3)]) in seen
    assert aten.mm.default != aten.addmm.default  # torch: False for ==
    x = tessel.ones(3, 4, requires_grad=True)
    for op, fn in [(aten._softmax.default, lambda t: F.softmax(t, -1)),
                   (aten.native_layer_norm.default, lambda t: F.layer_norm(t, (4,))),
                   (aten.mul.Tensor, lambda t: t * 2)]:
        def g(t):
            y = fn(t)
            a = y.exp()
            y.mul_(2)  # mutates the cached output: torch raises at backward
            return (a + y).sum()
        out = cp.checkpoint(g, x, use_reentrant=False,
                            context_fn=functools.partial(cp.create_selective_checkpoint_contexts, [op]))
        with pytest.raises(RuntimeError, match="Tensor cached during selective activatio"):
            out.backward()


def test_checkpoint_argument_checks_and_wrapped_paths_as_torch():
    with pytest.warns(UserWarning, match=r"^torch\.utils\.checkpoint\.checkpoint_sequential: the use_reentrant "
                      r"parameter should be passed explicitly\. In a future release, we will raise an exception if "
                      r"use_reentrant is not passed\."):
        cp.checkpoint_sequential(nn.Sequential(nn.Linear(3, 3), nn.Tanh()), 2, tessel.ones(2, 3, requires_grad=True))
    x = tessel.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="'NoneType' object is not callable"):
        cp.checkpoint(lambda a: a.sin(), x, use_reentrant=False, context_fn=None)
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        cp.checkpoint(lambda a: a.sin(), x, use_reentrant=True, context_fn=None)
    net = nn.Sequential(_Blk())
    cw.apply_activation_checkpointing(net, check_fn=lambda m: isinstance(m, _Blk))
    assert type(net.get_submodule("0._checkpoint_wrapped_module.l")).__name__ == "Linear"  # torch: Linear
    assert net.get_parameter("0._checkpoint_wrapped_module.l.weight").shape == (3, 3)


def test_the_rerun_must_save_tensors_of_the_forwards_shapes_and_dtypes():
    # a rerun that took another branch gave a silently wrong (broadcast) gradient; torch's determinism_check="default"
    calls = [0]

    def f(x):
        calls[0] += 1
        return x.sin().sum() if calls[0] == 1 else x[:1].sin().sum()

    x = tessel.ones(2, 3, requires_grad=True)
    want = r"(?s)Recomputed values for the following tensors have different metadata than during the forward pass" \
        r".*position 0.*\[2, 3\].*\[1, 3\]"
    with pytest.raises(cp.CheckpointError, match=want):
        cp.checkpoint(f, x, use_reentrant=False).backward()
    calls[0] = 0
    cp.checkpoint(f, x, use_reentrant=False, determinism_check="none").backward()  # torch's opt-out: no check
    assert tuple(x.grad.shape) == (2, 3)

    def g(x):
        calls[0] += 1
        return (x.sin() if calls[0] == 1 else x.double().sin()).sum()

    calls[0] = 0
    with pytest.raises(cp.CheckpointError, match=r"(?s)different metadata.*float32.*float64"):  # (torch's class)
        tessel.autograd.grad(cp.checkpoint(g, y := tessel.ones(2, requires_grad=True), use_reentrant=False), y)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
