"""Training-loop utilities against torch 2.15, from the fortieth session's sweep (each expected value below is what
torch 2.15 printed for the same lines): pruning and the hook-based weight_norm in module._forward_pre_hooks, the
entries pruning keeps among tied scores (aten's CPU topk), gradient norms in the promoted dtype with torch's
bfloat16 / float16 rounding, parametrizations whose original takes right_inverse's value as set_ does, buffers
parametrized, parameters_to_vector / vector_to_parameters, functional_call on plain attributes, swa_utils'
update_bn / SWALR / averaging functions, trunc_normal_'s bounds and fuse_conv_bn_weights' bias dtype."""
import pickle
import warnings

import pytest

import tessel
import tessel.nn as nn
from tessel.nn import utils as U
from tessel.nn.utils import parametrize, prune
from tessel.optim import swa_utils


def _with_grads(values, dtypes):
    params = []
    for v, dtype in zip(values, dtypes):
        p = nn.Parameter(tessel.zeros(len(v), dtype=dtype))
        p.grad = tessel.tensor(v, dtype=dtype)
        params.append(p)
    return params


def _linear(scale=1.0):
    m = nn.Linear(4, 3)
    with tessel.no_grad():
        m.weight.copy_(scale * tessel.tensor([[0.5, -0.1, 0.3, -0.7], [0.2, 0.9, -0.4, 0.05],
                                              [-0.6, 0.15, 0.8, -0.25]]))
        m.bias.copy_(tessel.tensor([0.1, -0.2, 0.3]))
    return m


# ---- pruning and the hook-based norms in module._forward_pre_hooks ------------------------------------------

def test_pruning_lists_its_method_in_forward_pre_hooks_as_the_tutorial_reads_it():
    m = nn.Conv2d(1, 2, 3)
    prune.random_unstructured(m, name="weight", amount=0.3)
    prune.l1_unstructured(m, name="weight", amount=0.2)
    hooks = list(m._forward_pre_hooks.values())
    assert len(hooks) == 1 and isinstance(hooks[0], prune.PruningContainer)  # torch: {1: <PruningContainer>}
    for hook in m._forward_pre_hooks.values():  # the pruning tutorial's loop
        if hook._tensor_name == "weight":
            break
    assert [type(h).__name__ for h in hook] == ["RandomUnstructured", "L1Unstructured"]  # torch's
    assert hook.apply_mask(m).tolist() == m.weight.tolist()
    m(tessel.ones(1, 1, 3, 3))  # the hook runs (and does nothing) at each forward
    prune.remove(m, "weight")
    assert len(m._forward_pre_hooks) == 0 and not prune.is_pruned(m)


def test_hook_based_weight_norm_and_spectral_norm_are_forward_pre_hooks():
    w = nn.Linear(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        U.weight_norm(w)
    assert [type(h).__name__ for h in w._forward_pre_hooks.values()] == ["WeightNorm"]  # torch's
    hook = next(iter(w._forward_pre_hooks.values()))
    assert (hook.name, hook.dim) == ("weight", 0) and hook.compute_weight(w).tolist() == w.weight.tolist()
    U.remove_weight_norm(w)
    assert len(w._forward_pre_hooks) == 0
    s = U.spectral_norm(nn.Linear(2, 2))
    assert [type(h).__name__ for h in s._forward_pre_hooks.values()] == ["SpectralNorm"]  # torch's
    U.remove_spectral_norm(s)
    assert len(s._forward_pre_hooks) == 0


# ---- ties: aten's CPU topk ------------------------------------------------------------------------------------

def test_pruning_keeps_torchs_entries_among_tied_scores():
    m = nn.Linear(4, 1, bias=False)
    nn.init.ones_(m.weight)
    prune.l1_unstructured(m, "weight", amount=2)
    assert m.weight_mask.tolist() == [[1.0, 1.0, 0.0, 0.0]]  # torch's (a stable sort pruned the first two)
    for n, pruned in ((6, [3, 4, 5]), (10, [5, 6, 7, 8, 9]), (40, list(range(20, 40)))):  # torch's
        m = nn.Linear(n, 1, bias=False)
        nn.init.ones_(m.weight)
        prune.l1_unstructured(m, "weight", amount=0.5)
        assert tessel.nonzero(m.weight_mask.reshape(-1) == 0).reshape(-1).tolist() == pruned
    m = nn.Linear(200, 1, bias=False)  # k * 64 <= n: aten's partial_sort
    nn.init.zeros_(m.weight)
    prune.l1_unstructured(m, "weight", amount=2)
    assert tessel.nonzero(m.weight_mask.reshape(-1) == 0).reshape(-1).tolist() == [0, 1]  # torch's
    m = nn.Linear(3, 4, bias=False)
    nn.init.ones_(m.weight)
    prune.ln_structured(m, "weight", amount=2, n=2, dim=0)
    assert m.weight_mask[:, 0].tolist() == [0.0, 0.0, 1.0, 1.0]  # torch's
    m = _linear()
    prune.ln_structured(m, "weight", amount=0.34, n=0, dim=1)  # four columns of 3 nonzeros: keep 3
    assert m.weight_mask[0].tolist() == [1.0, 0.0, 1.0, 1.0]  # torch's (neither the first nor the last tied one)


def test_global_pruning_twice_splits_the_ties_as_torch():
    a, b = _linear(), _linear(0.5)  # |a| 0.2 ties |b| 0.2 (= 0.4 / 2)
    for _ in range(2):
        prune.global_unstructured([(a, "weight"), (b, "weight")], pruning_method=prune.L1Unstructured, amount=0.25)
    assert a.weight_mask.tolist() == [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]]  # torch's
    assert b.weight_mask.tolist() == [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]]  # (9 / 5)
    assert [type(h).__name__ for h in a._forward_pre_hooks.values()] == ["PruningContainer"]  # torch's


def test_builtin_compute_mask_takes_and_returns_tensors():
    mask = prune.L1Unstructured(amount=2).compute_mask(tessel.tensor([3.0, -1.0, 2.0, 0.5]), tessel.ones(4))
    assert isinstance(mask, tessel.Tensor) and mask.tolist() == [1.0, 0.0, 1.0, 0.0]  # torch's
    mask = prune.LnStructured(amount=1, n=1, dim=0).compute_mask(tessel.tensor([[3.0, -1.0], [0.5, 0.25]]),
                                                                  tessel.ones(2, 2))
    assert mask.tolist() == [[1.0, 1.0], [0.0, 0.0]]  # torch's


def test_pruning_refusals_are_torchs():
    with pytest.raises(ValueError, match="Structured pruning can only be applied to multidimensional tensors. Found "
                                         "tensor of shape"):
        prune.ln_structured(_linear(), "bias", amount=1, n=1, dim=0)
    m = _linear()
    with pytest.raises(TypeError, match="topk\\(\\): argument 'k' must be int, not bool"):
        prune.l1_unstructured(m, "weight", amount=True)
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"]  # torch's: weight back, re-registered last
    assert not hasattr(m, "weight_orig") and len(m._forward_pre_hooks) == 0


# ---- gradient norms -------------------------------------------------------------------------------------------

def test_clip_grad_norm_takes_the_promoted_dtype_and_torchs_rounding():
    ps = _with_grads([[3.0, 4.0], [12.0]], [tessel.bfloat16, tessel.float32])
    total = U.clip_grad_norm_(ps, 1.0)
    assert total.dtype == tessel.float32 and total.item() == 13.0  # torch's (was bfloat16)
    assert [p.grad.tolist() for p in ps] == [[0.23046875, 0.30859375], [0.923076868057251]]  # torch's
    ps = _with_grads([[3.0, 4.0], [0.0, 12.0]], [tessel.float32, tessel.float64])
    total = U.clip_grad_norm_(ps, 1.0)
    assert total.dtype == tessel.float64 and total.item() == 13.0  # torch's
    ps = _with_grads([[3.1, 4.3], [0.7, 12.9]], [tessel.bfloat16] * 2)
    assert U.clip_grad_norm_(ps, 1.0).item() == 13.9375  # torch's: the scale from the rounded norm
    assert [p.grad.tolist() for p in ps] == [[0.2216796875, 0.30859375], [0.05029296875, 0.92578125]]  # torch's
    ps = _with_grads([[3.1, 4.3], [0.7, 12.9]], [tessel.float16] * 2)
    assert U.clip_grad_norm_(ps, 1.0).item() == 13.9609375  # torch's
    assert [p.grad.tolist() for p in ps] == [[0.2220458984375, 0.30810546875], [0.0501708984375, 0.92431640625]]
    ps = _with_grads([[60000.0, 60000.0], [1.0, 1.0]], [tessel.float16] * 2)
    assert U.clip_grad_norm_(ps, 1.0).item() == float("inf")  # torch's fp16 norm overflows: the grads become 0
    assert [p.grad.tolist() for p in ps] == [[0.0, 0.0], [0.0, 0.0]]  # (was 0.707 and 1e-05)
    ps = _with_grads([[0.3, 0.4], [1.2, 0.1]], [tessel.float16, tessel.bfloat16])
    total = U.clip_grad_norm_(ps, 1.0)
    assert total.dtype == tessel.float32 and total.item() == 1.310102939605713  # torch's
    assert [p.grad.tolist() for p in ps] == [[0.22900390625, 0.30517578125], [0.91796875, 0.076171875]]


def test_get_total_norm_and_clip_grads_with_norm_in_torchs_dtypes():
    total = U.get_total_norm([tessel.tensor([3.0, 4.0], dtype=tessel.bfloat16), tessel.tensor([12.01])])
    assert total.dtype == tessel.float32 and total.item() == 13.009231567382812  # torch's
    total = U.get_total_norm([tessel.tensor([3.1, 4.3], dtype=tessel.bfloat16),
                              tessel.tensor([1.1], dtype=tessel.float16)], norm_type=3)
    assert total.dtype == tessel.float32 and total.item() == 4.800559043884277  # torch's
    for norm in (tessel.tensor(13.3), tessel.tensor(13.3, dtype=tessel.bfloat16)):
        ps = _with_grads([[3.1, 4.3], [0.7, 12.9]], [tessel.bfloat16] * 2)
        U.clip_grads_with_norm_(ps, 1.0, norm)
        assert [p.grad.tolist() for p in ps] == [[0.232421875, 0.32421875], [0.052490234375, 0.96875]]  # torch's


def test_gradient_norm_refusals_and_warning_are_torchs():
    with pytest.raises(RuntimeError, match="_foreach_norm cannot compute the infinity norm on an empty tensor"):
        U.get_total_norm([tessel.ones(0)], norm_type=float("inf"))
    with pytest.raises(RuntimeError, match="_foreach_norm cannot compute the infinity norm on an empty tensor"):
        U.get_total_norm([tessel.ones(0), tessel.ones(2)], norm_type=float("inf"))
    with pytest.raises(NotImplementedError, match="linalg.vector_norm: Expected a floating point or complex tensor "
                                                  "as input. Got Long"):
        U.get_total_norm([tessel.tensor([3, 4])])
    with pytest.raises(RuntimeError, match="supposed to be defined but the 1-th Tensor is not"):
        U.get_total_norm([tessel.tensor([3.0, 4.0]), None])
    ps = _with_grads([[3.0, 4.0]], [tessel.float32])
    with pytest.raises(TypeError, match="clamp\\(\\) received an invalid combination of arguments - got \\(float, "
                                        "max=float\\)"):
        U.clip_grads_with_norm_(ps, 1.0, 13.0)
    with pytest.warns(UserWarning, match="`parameters` is an empty generator, no gradient clipping will occur."):
        assert U.clip_grad_norm_((p for p in []), 1.0).item() == 0.0


# ---- parameters_to_vector / vector_to_parameters ---------------------------------------------------------------

def test_parameters_to_vector_promotes_a_bfloat16_layer_and_a_float32_norm():
    m = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    with tessel.no_grad():
        m[0].weight.copy_(tessel.tensor([[0.1, 0.2], [0.3, 0.4]]))
        m[0].bias.copy_(tessel.tensor([0.5, 0.6]))
    m[0].to(tessel.bfloat16)
    v = U.parameters_to_vector(m.parameters())
    assert v.dtype == tessel.float32  # torch's
    assert v.tolist() == [0.10009765625, 0.2001953125, 0.30078125, 0.400390625, 0.5, 0.6015625, 1.0, 1.0, 0.0, 0.0]


def test_vector_to_parameters_rebinds_each_parameters_data_to_its_slice():
    a, b = nn.Parameter(tessel.zeros(2)), nn.Parameter(tessel.zeros(1))
    U.vector_to_parameters(tessel.arange(5.0).reshape(5, 1) * 10, [a, b])  # 2-D, and longer than needed
    assert (a.tolist(), b.tolist()) == ([0.0, 10.0], [20.0])  # torch's
    a = nn.Parameter(tessel.zeros(2))
    vec = tessel.arange(3.0, dtype=tessel.float64)
    U.vector_to_parameters(vec, [a])
    vec.add_(10)
    assert a.dtype == tessel.float64 and a.tolist() == [10.0, 11.0]  # torch's: vec's dtype, and aliasing it
    assert isinstance(a, nn.Parameter) and a.requires_grad


# ---- parametrizations ------------------------------------------------------------------------------------------

class _Vec(nn.Module):
    def forward(self, v):
        return v.reshape(3, 3)

    def right_inverse(self, w):
        return w.reshape(-1)


class _Identity(nn.Module):
    def forward(self, x):
        return x

    def right_inverse(self, x):
        return x


class _ToDouble(nn.Module):
    def forward(self, x):
        return x.float()

    def right_inverse(self, x):
        return x.double()


class _Double(nn.Module):
    def forward(self, x):
        return x * 2

    def right_inverse(self, x):
        return x / 2


def test_the_original_takes_right_inverses_value_as_set_does():
    m = nn.Linear(3, 3)
    parametrize.register_parametrization(m, "weight", _Vec())
    assert tuple(m.parametrizations.weight.original.shape) == (9,)  # torch's: right_inverse may change the shape
    assert tuple(m.weight.shape) == (3, 3)
    m = nn.Linear(2, 2)
    parametrize.register_parametrization(m, "weight", _Identity())
    m.weight = tessel.ones(1, 2)
    assert tuple(m.weight.shape) == (1, 2)  # torch's (was broadcast into [2, 2])
    with pytest.raises(ValueError, match="The tensor returned by `right_inverse` has dtype"):
        m.weight = tessel.ones(2, 2, dtype=tessel.float64)  # torch refuses (was cast)
    m = nn.Linear(2, 2)
    parametrize.register_parametrization(m, "weight", _Identity(), unsafe=True)
    m.weight = tessel.ones(3, 2)
    assert tuple(m.weight.shape) == (3, 2)  # torch's
    for unsafe in (False, True):
        with pytest.raises(ValueError, match="When `right_inverse` outputs one tensor, it may not change the dtype"):
            parametrize.register_parametrization(nn.Linear(2, 2), "weight", _ToDouble(), unsafe=unsafe)


def test_a_buffer_can_be_parametrized():
    bn = nn.BatchNorm1d(3)
    parametrize.register_parametrization(bn, "running_var", _Double())
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "num_batches_tracked",
                                     "parametrizations.running_var.original"]  # torch's
    assert bn.parametrizations.running_var.original.tolist() == [0.5, 0.5, 0.5]  # torch's
    assert bn.running_var.tolist() == [1.0, 1.0, 1.0]
    parametrize.remove_parametrizations(bn, "running_var")
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "num_batches_tracked", "running_var"]  # torch's


def test_parametrization_refusals_are_torchs():
    class Three(nn.Module):
        def forward(self, x):
            return 3

    class IntInverse(nn.Module):
        def forward(self, x):
            return x

        def right_inverse(self, x):
            return 3

    with pytest.raises(ValueError, match="A parametrization must return a tensor. Got int."):
        parametrize.register_parametrization(nn.Linear(2, 2), "weight", Three())
    with pytest.raises(ValueError, match="'right_inverse' must return a Tensor or a Sequence of tensors \\(list, "
                                         "tuple...\\). Got int"):
        parametrize.register_parametrization(nn.Linear(2, 2), "weight", IntInverse())
    m = nn.Linear(2, 2)
    parametrize.register_parametrization(m, "weight", _Double())
    with pytest.raises(RuntimeError, match="Serialization of parametrized modules is only supported through "
                                           "state_dict()"):
        pickle.dumps(m)


# ---- functional_call -----------------------------------------------------------------------------------------

def test_functional_call_swaps_a_plain_tensor_attribute():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = tessel.tensor(2.0)

        def forward(self, x):
            return x * self.scale

    m = M()
    out = tessel.func.functional_call(m, {"scale": tessel.tensor(3.0)}, (tessel.ones(1),))
    assert out.tolist() == [3.0] and m.scale.item() == 2.0  # torch's (was [2.0]), and restored


def test_stateless_functional_call_is_torchs_deprecated_one_dict_form():
    m = nn.Linear(2, 2)
    with pytest.warns(FutureWarning, match="`torch.nn.utils.stateless.functional_call` is deprecated"):
        U.stateless.functional_call(m, {"bias": tessel.zeros(2)}, (tessel.ones(1, 2),))
    with pytest.warns(FutureWarning), pytest.raises(AttributeError, match="'tuple' object has no attribute 'keys'"):
        U.stateless.functional_call(m, ({"bias": tessel.zeros(2)},), (tessel.ones(1, 2),))


# ---- swa_utils -------------------------------------------------------------------------------------------------

def test_update_bn_leaves_instance_norm_statistics():
    m = nn.Sequential(nn.InstanceNorm1d(1, track_running_stats=True))
    m[0].running_mean.fill_(5.0)
    swa_utils.update_bn([tessel.arange(6.0).reshape(2, 1, 3)], m)
    assert m[0].running_mean.tolist() == [5.0]  # torch's: only _BatchNorm layers are reset (was [0.0])


def test_averaging_functions_and_averaged_model_are_torchs():
    with pytest.raises(ValueError, match="Invalid decay value 1.5 provided. Please provide a value in \\[0,1\\]"):
        swa_utils.get_ema_avg_fn(1.5)
    averaged = [tessel.tensor([1.0, 2.0], dtype=tessel.float64)]
    swa_utils.get_swa_multi_avg_fn()(averaged, [tessel.tensor([3.0, 7.0], dtype=tessel.float64)], tessel.tensor(2))
    assert averaged[0].tolist() == [1.6666666865348816, 3.666666716337204]  # torch's lerp by a float32 1/3
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
        swa_utils.get_swa_multi_avg_fn()([tessel.tensor([1, 2])], [tessel.tensor([3, 6])], tessel.tensor(1))
    with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must not be a floating point"):
        swa_utils.get_swa_multi_avg_fn()([tessel.tensor([1, 2])], [tessel.tensor([3, 6])], 1)
    avg = swa_utils.AveragedModel(nn.Linear(2, 2, bias=False))
    first = nn.Linear(2, 2, bias=False)
    nn.init.ones_(first.weight)
    avg.update_parameters(first)
    bigger = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    nn.init.zeros_(bigger[0].weight)
    avg.update_parameters(bigger)  # torch zips without strict: the common prefix is averaged
    assert avg.n_averaged.item() == 2 and avg.module.weight.tolist() == [[0.5, 0.5], [0.5, 0.5]]  # torch's


def test_swalr_anneal_functions_state_dict_and_get_lr_warning_are_torchs():
    opt = tessel.optim.SGD([nn.Parameter(tessel.zeros(1))], lr=1.0)
    sched = swa_utils.SWALR(opt, swa_lr=0.1, anneal_epochs=3)
    assert swa_utils.SWALR._cosine_anneal(0.25) == 0.1464466094067262  # torch's
    assert swa_utils.SWALR._linear_anneal(0.25) == 0.25 and swa_utils.SWALR._get_initial_lr(1.0, 0.1, 0.5) == 1.9
    assert sched.anneal_func(0.5) == 0.49999999999999994  # torch's
    assert sorted(sched.state_dict()) == ["_anneal_strategy", "_get_lr_called_within_step", "_is_initial", "_last_lr",
                                          "_step_count", "anneal_epochs", "base_lrs", "last_epoch"]  # torch's
    with pytest.warns(UserWarning, match="To get the last learning rate computed by the scheduler"):
        sched.get_lr()
    other = swa_utils.SWALR(tessel.optim.SGD([nn.Parameter(tessel.zeros(1))], lr=1.0), swa_lr=0.5,
                            anneal_strategy="linear")
    other.load_state_dict(sched.state_dict())
    assert other.anneal_func(0.5) == 0.49999999999999994  # the cosine again, from the strategy loaded


# ---- nn.init and fusion ----------------------------------------------------------------------------------------

def test_trunc_normal_bounds_are_torchs():
    assert nn.init.trunc_normal_(tessel.empty(2), a=1.0, b=1.0).tolist() == [1.0, 1.0]  # torch's (was ValueError)
    with pytest.raises(RuntimeError, match="uniform_ expects to return a \\[from, to\\) range, but found from=2 > "
                                           "to=-2"):
        nn.init.trunc_normal_(tessel.empty(3), a=2.0, b=-2.0)
    with pytest.raises(NotImplementedError, match="\"normal_kernel_cpu\" not implemented for 'Long'"):
        nn.init.trunc_normal_(tessel.empty(3, dtype=tessel.int64))


def test_fused_bias_without_a_conv_bias_takes_the_weights_dtype():
    w, b = U.fuse_conv_bn_weights(tessel.ones(3, 2, 1, 1, dtype=tessel.float64), None,
                                  tessel.tensor([0.1, 0.2, 0.3]), tessel.tensor([1.0, 2.0, 3.0]), 1e-5, None, None)
    assert (w.dtype, b.dtype) == (tessel.float64, tessel.float64)  # torch's (the bias was float32)
    assert b.tolist() == [-0.09999950230121613, -0.14142100512981415, -0.17320479452610016]  # torch's
    assert not b.requires_grad


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
