"""torch names and module paths training code imports, from a missing-names probe (torchtitan, timm, litgpt,
lightning, accelerate, torchtune, diffusers, pytorch/examples): flex_attention (its values are torch 2.15's,
printed by the probe: causal, document masks, ALiBi and soft-capping score mods, a fully masked row),
torch.library's custom ops with their autograd, and the import paths (torch.backends.cudnn, nn.parameter,
nn.modules.utils, fsdp._fully_shard, ShardedGradScaler, _LRScheduler, torch._check, get_device_module)."""
import importlib
import math

import numpy as np
import pytest

import tessel as T
import tessel.nn.functional as F
from tessel.nn.attention.flex_attention import (and_masks, create_block_mask, create_mask, flex_attention,
                                                  or_masks)


def qkv(requires_grad=False):
    rng = np.random.default_rng(0)
    B, Hq, Hkv, L, E = 2, 4, 2, 6, 8
    return [T.tensor(rng.standard_normal(s), dtype=T.float64, requires_grad=requires_grad)
            for s in ((B, Hq, L, E), (B, Hkv, L, E), (B, Hkv, L, E))]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def test_flex_attention_values_are_torchs():
    q, k, v = qkv()
    doc = T.tensor([0, 0, 1, 1, 1, 2])
    slopes = T.tensor([0.5, 0.25, 0.125, 0.0625], dtype=T.float64)
    cases = [  # (mask_mod, score_mod, torch's out.sum(), torch's lse.sum() over the finite entries)
        (causal, None, -47.4566603521, 66.1034965413),
        (and_masks(causal, lambda b, h, qi, ki: doc[qi] == doc[ki]), None, -66.6303657269, 24.5894023679),
        (or_masks(lambda b, h, qi, ki: (qi - ki) <= 2, lambda b, h, qi, ki: doc[qi] == doc[ki]),
         lambda s, b, h, qi, ki: s + slopes[h] * (ki - qi), -11.0044475094, 97.7109867582),
        (None, lambda s, b, h, qi, ki: T.tanh(s / 2.0) * 2.0, -26.7903244789, 98.2282316205),
        (lambda b, h, qi, ki: (qi > 0) & (ki <= qi), None, -37.9693739115, 65.6921320223),
    ]
    for mask_mod, score_mod, out_sum, lse_sum in cases:
        mask = create_block_mask(mask_mod, None, None, 6, 6, device="cpu") if mask_mod else None
        out, lse = flex_attention(q, k, v, score_mod=score_mod, block_mask=mask, enable_gqa=True, return_lse=True)
        assert math.isclose(float(out.sum()), out_sum, rel_tol=1e-9)
        finite = lse.numpy()[np.isfinite(lse.numpy())]
        assert math.isclose(float(finite.sum()), lse_sum, rel_tol=1e-9) and lse.dtype == T.float64
    # the fully masked query row: zeros and -inf, as torch's kernel
    out, lse = flex_attention(q, k, v, block_mask=create_block_mask(lambda b, h, qi, ki: qi > 0, None, None, 6, 6),
                              enable_gqa=True, return_lse=True)
    assert out[:, :, 0].abs().sum().item() == 0.0 and lse[:, :, 0].tolist() == [[-math.inf] * 4] * 2


def test_flex_attention_gradients_equal_causal_sdpa():
    q, k, v = qkv(requires_grad=True)
    out = flex_attention(q, k, v, block_mask=create_block_mask(causal, None, None, 6, 6), enable_gqa=True)
    got = T.autograd.grad((out * out).sum(), [q, k, v])
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    want = T.autograd.grad((ref * ref).sum(), [q, k, v])
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)


def test_block_mask_views_and_errors():
    m = create_block_mask(causal, 1, 1, 300, 300)
    assert m.to_dense().tolist() == [[[[1, 0, 0], [1, 1, 0], [1, 1, 1]]]] and m.shape == (1, 1, 300, 300)
    assert math.isclose(m.sparsity(), 100.0 / 3)
    assert create_mask(causal, 1, 1, 3, 3).int().tolist() == [[[[1, 0, 0], [1, 1, 0], [1, 1, 1]]]]
    q, k, v = qkv()
    with pytest.raises(ValueError, match="Try setting enable_gqa=True"):
        flex_attention(q, k, v)
    with pytest.raises(ValueError, match="block_mask was created for"):
        flex_attention(q, k, v, block_mask=m, enable_gqa=True)


def test_custom_op_with_and_without_registered_autograd():
    @T.library.custom_op("tessel_test::scale", mutates_args=())
    def scale(x: T.Tensor, s: float) -> T.Tensor:
        return x * s

    def setup_context(ctx, inputs, output):
        ctx.s = inputs[1]
    scale.register_autograd(lambda ctx, g: (g * ctx.s * 10, None), setup_context=setup_context)
    x = T.ones(3, requires_grad=True)
    y = scale(x, 2.0)
    y.sum().backward()
    assert y.tolist() == [2.0, 2.0, 2.0] and x.grad.tolist() == [20.0, 20.0, 20.0]  # the registered backward
    assert T.ops.tessel_test.scale.default(T.ones(2), 4.0).tolist() == [4.0, 4.0]
    lib = T.library.Library("tessel_test2", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda t: t * 2, "CPU")
    assert T.ops.tessel_test2.twice(T.ones(2)).tolist() == [2.0, 2.0]


def test_torch_import_paths_and_small_names():
    for path in ("backends.cudnn", "backends.cuda", "nn.parameter", "nn.modules.utils", "nn.common_types",
                 "distributed.fsdp._fully_shard", "distributed._composable.fsdp.fully_shard",
                 "distributed.fsdp.sharded_grad_scaler", "amp.grad_scaler", "library"):
        importlib.import_module("tessel." + path)
    from tessel.distributed.fsdp import fully_shard
    from tessel.distributed.fsdp._fully_shard import fully_shard as titan_path
    from tessel.nn.modules.utils import _pair, _triple
    assert titan_path is fully_shard and _pair(3) == (3, 3) and _triple((1, 2, 3)) == (1, 2, 3)
    assert T.nn.parameter.Parameter is T.nn.Parameter and T.optim.lr_scheduler._LRScheduler is \
        T.optim.lr_scheduler.LRScheduler and T.GradScaler is T.amp.GradScaler
    assert issubclass(T.OutOfMemoryError, RuntimeError) and T.cuda.OutOfMemoryError is T.OutOfMemoryError
    with pytest.raises(RuntimeError, match="bad shape"):
        T._check(False, lambda: "bad shape")
    with pytest.raises(IndexError):
        T._check_index(False)
    T._check(True)
    assert T.get_device_module("cuda") is T.cuda and T.get_device_module() is T.cpu


def test_sharded_grad_scaler_agrees_on_an_overflow_across_ranks():
    import tessel.distributed as dist
    from tessel.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    def rank_fn(world):
        dist.init_process_group()
        try:
            p = T.nn.Parameter(T.ones(2))
            opt = T.optim.SGD([p], lr=1.0)
            scaler = ShardedGradScaler("cpu", init_scale=4.0)
            scaler.scale(p.sum())  # (torch's scaler makes its scale tensor here; a step before it asserts)
            p.grad = T.tensor([math.inf, 0.0]) if dist.get_rank() == 1 else T.ones(2)
            scaler.step(opt)  # rank 1 overflowed: every rank skips the step
            scaler.update()
            assert p.tolist() == [1.0, 1.0] and scaler.get_scale() == 2.0
        finally:
            dist.destroy_process_group()
    T.run_ranks(2, rank_fn)


def test_calls_the_probe_found_broken():
    x = T.arange(6.0, dtype=T.float64).reshape(2, 3) / 6
    assert x.where(x > 0.3, 0.0).tolist() == [[0.0, 0.0, 2 / 6], [0.5, 4 / 6, 5 / 6]]
    assert x.tile(2).shape == (2, 6) and x.tile(2, 1).shape == (4, 3) and T.tile(x, (1, 2)).shape == (2, 6)
    np.testing.assert_allclose(T.fft.fftn(x, dim=-1).abs().numpy(), np.abs(np.fft.fft(x.numpy(), axis=-1)),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(T.fft.rfftn(x, s=4, dim=1).abs().numpy(),
                               np.abs(np.fft.rfft(x.numpy(), n=4, axis=1)), rtol=1e-12, atol=1e-12)
    f32 = x.float()
    assert f32.norm(dtype=T.float64).dtype == T.float64
    assert math.isclose(f32.norm(dtype=T.float64).item(), float(np.linalg.norm(x.numpy())), rel_tol=1e-7)
    assert math.isclose(T.nuclear_norm(x, dim=(0, 1)).item(), float(np.linalg.norm(x.numpy(), "nuc")), rel_tol=1e-12)
    assert T.chain_matmul(x).tolist() == x.tolist()


def test_functional_multi_head_attention_forward_equals_the_module():
    rng = np.random.default_rng(0)
    m = T.nn.MultiheadAttention(4, 2, add_bias_kv=True).double()
    with T.no_grad():
        for p in m.parameters():
            p.copy_(T.tensor(rng.standard_normal(tuple(p.shape))))
    x = T.tensor(rng.standard_normal((3, 2, 4)))
    mask = T.triu(T.ones(3, 3, dtype=T.bool), 1)
    out, weights = F.multi_head_attention_forward(
        x, x, x, 4, 2, m.in_proj_weight, m.in_proj_bias, m.bias_k, m.bias_v, False, 0.0, m.out_proj.weight,
        m.out_proj.bias, training=False, attn_mask=mask)
    want, want_weights = m.eval()(x, x, x, attn_mask=mask)
    assert out.tolist() == want.tolist() and weights.tolist() == want_weights.tolist()
    assert math.isclose(float(out.sum()), -13.4372212879, rel_tol=1e-9)  # torch 2.15's, same weights
    with pytest.raises(AssertionError, match="was expecting embedding dimension of 8, but got 4"):
        F.multi_head_attention_forward(x, x, x, 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
                                       m.out_proj.weight, m.out_proj.bias)


def test_distributed_sampler_shuffles_in_torchs_order():
    from tessel.utils.data import DistributedSampler
    data = list(range(10))
    # torch 2.15: DistributedSampler(range(10), num_replicas=2, rank=r, seed=0), epoch 0
    assert list(DistributedSampler(data, 2, 0, seed=0)) == [4, 7, 3, 0, 6]
    from tessel.utils.data import _torch_randperm
    assert _torch_randperm(10, 0) == [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]  # torch.randperm(10, generator=seed 0)
    # The C++ pass against the loop it replaced (aten's randperm_cpu over numpy's MT19937 draws).
    for n, seed in ((0, 1), (1, 2), (2, 3), (1000, 4), (4097, 2 ** 33 + 5)):
        raw = np.frombuffer(np.random.RandomState(seed & 0xFFFFFFFF).bytes(4 * max(n - 1, 0)), dtype="<u4")
        want = list(range(n))
        for i in range(n - 1):
            z = i + int(raw[i]) % (n - i)
            want[i], want[z] = want[z], want[i]
        assert _torch_randperm(n, seed) == want, (n, seed)


def test_dcp_to_torch_save_nests_the_state_dict_as_saved(tmp_path):
    import tessel.distributed.checkpoint as dcp
    from tessel.distributed.checkpoint.format_utils import dcp_to_torch_save
    state = {"app": {"model": {"layer.0.weight": T.ones(2)}, "step": 3, "hist": [T.zeros(1), T.ones(1)]}}
    dcp.save(state, checkpoint_id=str(tmp_path / "ck"))
    dcp_to_torch_save(str(tmp_path / "ck"), str(tmp_path / "x.pth"))
    back = T.load(str(tmp_path / "x.pth"), weights_only=False)
    assert list(back) == ["app"] and back["app"]["step"] == 3
    assert back["app"]["model"]["layer.0.weight"].tolist() == [1.0, 1.0]
    assert [t.tolist() for t in back["app"]["hist"]] == [[0.0], [1.0]]
    # converted to torch's format, the paths travel as its planner_data (torch's own converter nests by it)
    from tessel.distributed.checkpoint.format_utils import dcp_to_torch_dcp
    dcp_to_torch_dcp(str(tmp_path / "ck"), str(tmp_path / "torch_ck"))
    dcp_to_torch_save(str(tmp_path / "torch_ck"), str(tmp_path / "y.pth"))
    again = T.load(str(tmp_path / "y.pth"), weights_only=False)
    assert again["app"]["model"]["layer.0.weight"].tolist() == [1.0, 1.0] and again["app"]["step"] == 3


def test_get_state_dict_of_an_fsdp1_model_uses_torchs_clean_names():
    import tessel.distributed as dist
    from tessel.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from tessel.distributed.fsdp import FullyShardedDataParallel as FSDP

    def rank_fn(world):
        dist.init_process_group()
        try:
            T.manual_seed(0)
            model = FSDP(T.nn.Sequential(T.nn.Linear(4, 4), T.nn.ReLU(), T.nn.Linear(4, 2)))
            opt = T.optim.Adam(model.parameters(), lr=0.1)
            model(T.ones(3, 4)).sum().backward()
            opt.step()
            msd, osd = get_state_dict(model, opt)
            assert list(msd) == ["0.weight", "0.bias", "2.weight", "2.bias"]
            assert list(osd["state"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
            T.manual_seed(1)
            other = FSDP(T.nn.Sequential(T.nn.Linear(4, 4), T.nn.ReLU(), T.nn.Linear(4, 2)))
            opt2 = T.optim.Adam(other.parameters(), lr=0.1)
            set_state_dict(other, opt2, model_state_dict=msd, optim_state_dict=osd)
            again, osd2 = get_state_dict(other, opt2)
            for k in msd:
                assert again[k].full_tensor().tolist() == msd[k].full_tensor().tolist()
            assert osd2["state"]["2.bias"]["exp_avg"].full_tensor().tolist() == \
                osd["state"]["2.bias"]["exp_avg"].full_tensor().tolist()
        finally:
            dist.destroy_process_group()
    T.run_ranks(2, rank_fn)


def test_tutorial_import_lines():
    from tessel.distributed._tensor.device_mesh import init_device_mesh  # the tensor-parallel examples'
    from tessel.distributed._tensor.placement_types import Shard
    from tessel.distributed.pipelining import PipelineStage, ScheduleGPipe, SplitPoint, pipe_split, pipeline
    assert init_device_mesh is T.distributed.device_mesh.init_device_mesh and Shard(0) == T.distributed.tensor.Shard(0)
    assert PipelineStage is not None and ScheduleGPipe is not None and SplitPoint.END.value == 2
    assert pipe_split() is None  # a marker: nothing happens when run eagerly, as torch's
    with pytest.raises(NotImplementedError, match="records no graphs; build each stage's module by hand"):
        pipeline(T.nn.Linear(2, 2), (T.ones(1, 2),))


def test_dense_tensors_have_no_dtensor_methods():
    import tessel.distributed as dist
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import Shard, distribute_tensor
    x = T.ones(2)
    assert not hasattr(x, "full_tensor") and not hasattr(x, "to_local") and not hasattr(x, "redistribute")
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'to_local'"):
        x.to_local()

    def rank_fn(world):
        dist.init_process_group()
        try:
            d = distribute_tensor(T.arange(4.0), init_device_mesh("cpu", (2,)), [Shard(0)])
            assert hasattr(d, "full_tensor") and d.full_tensor().tolist() == [0.0, 1.0, 2.0, 3.0]
            assert d.to_local().tolist() == ([0.0, 1.0] if dist.get_rank() == 0 else [2.0, 3.0])
        finally:
            dist.destroy_process_group()
    T.run_ranks(2, rank_fn)


def test_misuse_gives_one_clear_error_on_every_rank(tmp_path):
    import tessel.distributed as dist
    import tessel.distributed.checkpoint as dcp
    from tessel.distributed.checkpoint.api import CheckpointException
    errors = {}

    def rank_fn(world):
        dist.init_process_group()
        r = dist.get_rank()
        try:
            model = T.nn.Linear(4, 4 if r == 0 else 6)  # a different model on rank 1
            with pytest.raises(RuntimeError) as e:
                T.nn.parallel.DistributedDataParallel(model)
            errors[("ddp", r)] = str(e.value)
            with pytest.raises(CheckpointException) as e:  # each rank names its own directory
                dcp.save({"w": T.ones(2)}, checkpoint_id=str(tmp_path / ("ck%d" % r)))
            errors[("dcp", r)] = str(e.value)
        finally:
            dist.destroy_process_group()
    T.run_ranks(2, rank_fn)
    for r in (0, 1):
        assert "params[0] ('weight') in process 1 with sizes [6, 4] appears not to match sizes of the same param " \
               "in process 0 ([4, 4])" in errors[("ddp", r)]
        assert "the ranks name different checkpoint directories" in errors[("dcp", r)]
