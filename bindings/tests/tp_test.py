"""tessel.distributed.tensor.parallel from Python, laid out like torch: ColwiseParallel / RowwiseParallel
on nn.Linear cost exactly the collectives tp/ documents (counted by the comm tracer), values and gradients
on 2 rank threads equal one rank's, a Python-defined attention + MLP block under Megatron TP (wildcard
plan) matches the same block unsharded, loss_parallel computes cross-entropy on vocab-sharded logits
without gathering them, and bad plans raise the exception their error code names with tp/'s message."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Replicate, Shard
from tessel.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                RowwiseParallel, SequenceParallel, loss_parallel,
                                                parallelize_module)

W = 2


def on_ranks(fn, world_size=W):
    """fn(rank, mesh) on world_size rank threads with a 1-D "tp" mesh; returns {rank: result}."""
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("tp",))
        out[world.rank] = fn(world.rank, mesh)
        dist.destroy_process_group()

    tessel.run_ranks(world_size, rank_fn)
    return out


def full(t):
    return (t.full_tensor() if isinstance(t, DTensor) else t).numpy().astype(np.float64)


def inputs(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def linear_reference(x_np):
    """One rank: nn.Linear(8, 6) with seed 0; returns (y, dW, db, dx) for loss = sum(y * y)."""
    tessel.manual_seed(0)
    lin = nn.Linear(8, 6)
    x = tessel.from_numpy(x_np).requires_grad_()
    y = lin(x)
    (y * y).sum().backward()
    return y.numpy(), lin.weight.grad.numpy(), lin.bias.grad.numpy(), x.grad.numpy()


def sharded_linear_step(style, x_of_rank):
    """On 2 ranks: nn.Linear(8, 6) (seed 0) under `style`, input x_of_rank(rank); per rank the forward and
    backward tracer summaries, y, the full weight and bias gradients and the input's gradient."""
    def fn(rank, mesh):
        tessel.manual_seed(0)
        lin = parallelize_module(nn.Linear(8, 6), mesh, style)
        x = tessel.from_numpy(x_of_rank(rank)).requires_grad_()
        with tessel.CommTracer() as fwd:
            y = lin(x)  # use_local_output=True: a plain tensor
        with tessel.CommTracer() as bwd:
            (y * y).sum().backward()
        placements = (lin.weight.placements, lin.bias.placements)
        return placements, fwd.summary(), bwd.summary(), y.numpy(), full(lin.weight.grad), full(lin.bias.grad), \
            x.grad.numpy()

    return on_ranks(fn)


@pytest.mark.parametrize("style", ["colwise", "rowwise"])
def test_colwise_and_rowwise_linear_cost_tps_collectives_and_match_one_rank(style):
    x_np = inputs((4, 8))
    y_ref, dw_ref, db_ref, dx_ref = linear_reference(x_np)
    if style == "colwise":  # input replicated, output = this rank's 3 columns; the input grad all-reduced
        res = sharded_linear_step(ColwiseParallel(), lambda rank: x_np)
        want = ((Shard(0),), (Shard(0),)), "", "all_reduce(tp) x1"
        y_want = lambda rank: y_ref[:, 3 * rank:3 * rank + 3]
        dx_want = lambda rank: dx_ref
    else:  # input = this rank's 4 features, output all-reduced
        res = sharded_linear_step(RowwiseParallel(), lambda rank: x_np[:, 4 * rank:4 * rank + 4].copy())
        want = ((Shard(1),), (Replicate(),)), "all_reduce(tp) x1", ""
        y_want = lambda rank: y_ref
        dx_want = lambda rank: dx_ref[:, 4 * rank:4 * rank + 4]
    for rank, (placements, fwd, bwd, y, dw, db, dx) in res.items():
        assert (placements, fwd, bwd) == want
        np.testing.assert_allclose(y, y_want(rank), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dw, dw_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(db, db_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dx, dx_want(rank), rtol=1e-5, atol=1e-6)


def test_colwise_output_layouts_replicate_all_gathers_the_output():
    x_np = inputs((4, 8))
    y_ref = linear_reference(x_np)[0]

    def fn(rank, mesh):
        tessel.manual_seed(0)
        lin = parallelize_module(nn.Linear(8, 6), mesh, ColwiseParallel(output_layouts=Replicate()))
        with tessel.CommTracer() as fwd:
            y = lin(tessel.from_numpy(x_np))
        return fwd.summary(), y.numpy()

    for fwd, y in on_ranks(fn).values():
        assert fwd == "all_gather(tp) x1"
        np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        # -1 heads: all of them on one rank, this rank's under tensor parallelism (Megatron's local view).
        q, k, v = (w(x).view(B, T, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, dim=16, n_heads=4):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), Attention(dim, n_heads)
        self.ln2, self.mlp = nn.LayerNorm(dim), MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


MEGATRON_PLAN = {"attn.w[qkv]": ColwiseParallel(), "attn.wo": RowwiseParallel(),
                 "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}


def block_step(block, x_np):
    x = tessel.from_numpy(x_np).requires_grad_()
    with tessel.CommTracer() as fwd:
        y = block(x)
    with tessel.CommTracer() as bwd:
        (y * y).mean().backward()
    grads = {name: full(p.grad) for name, p in block.named_parameters()}
    return fwd.summary(), bwd.summary(), y.numpy(), x.grad.numpy(), grads


def test_python_attention_mlp_block_under_megatron_tp_matches_one_rank():
    x_np = inputs((2, 5, 16))
    tessel.manual_seed(0)
    _, _, y_ref, dx_ref, grads_ref = block_step(Block(), x_np)

    def fn(rank, mesh):
        tessel.manual_seed(0)
        block = parallelize_module(Block(), mesh, MEGATRON_PLAN)
        assert block.attn.wk.weight.placements == (Shard(0),) and block.mlp.proj.weight.placements == (Shard(1),)
        return block_step(block, x_np)

    for fwd, bwd, y, dx, grads in on_ranks(fn).values():
        # Forward: the two Rowwise outputs (Partial -> Replicate). Backward: each Colwise input gradient
        # (Partial -> Replicate): wq, wk, wv and fc take the same replicated activation separately.
        assert fwd == "all_reduce(tp) x2" and bwd == "all_reduce(tp) x4", (fwd, bwd)
        np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-5)
        assert sorted(grads) == sorted(grads_ref)
        for name in grads:
            np.testing.assert_allclose(grads[name], grads_ref[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_sequence_parallel_and_prepare_module_input_move_activations_as_declared():
    x_np = inputs((2, 4, 16))
    tessel.manual_seed(0)
    ln_ref = nn.LayerNorm(16)(tessel.from_numpy(x_np)).numpy()

    def fn(rank, mesh):
        tessel.manual_seed(0)
        ln = parallelize_module(nn.LayerNorm(16), mesh, SequenceParallel())
        shard = tessel.from_numpy(x_np[:, 2 * rank:2 * rank + 2].copy())
        with tessel.CommTracer() as t:
            y = ln(shard)  # use_local_output=False: a DTensor Shard(1)
        assert isinstance(y, DTensor) and y.placements == (Shard(1),) and t.summary() == ""
        gathered = y.full_tensor().numpy()
        tessel.manual_seed(0)
        mlp = parallelize_module(MLP(16), mesh, PrepareModuleInput(input_layouts=Shard(1),
                                                                   desired_input_layouts=Replicate(),
                                                                   use_local_output=True))
        with tessel.CommTracer() as t:
            z = mlp(shard)  # the whole sequence, gathered once, as a plain tensor
        assert not isinstance(z, DTensor)
        return gathered, t.summary(), z.numpy()

    tessel.manual_seed(0)
    mlp_ref = MLP(16)(tessel.from_numpy(x_np)).numpy()
    for gathered, summary, z in on_ranks(fn).values():
        np.testing.assert_allclose(gathered, ln_ref, rtol=1e-5, atol=1e-6)
        assert summary == "all_gather(tp) x1"
        np.testing.assert_allclose(z, mlp_ref, rtol=1e-5, atol=1e-6)


def test_loss_parallel_matches_one_rank_and_never_gathers_the_logits():
    # V = 64 here; dtensor/rules/loss_test.cc checks that even a 4-class vocabulary is never gathered.
    x_np, targets = inputs((6, 8)), np.array([0, 63, 3, 35, 2, 47], dtype=np.int64)

    def loss_and_grad(head):
        x = tessel.from_numpy(x_np)
        logits = head(x)
        with loss_parallel():
            with tessel.CommTracer() as t:
                loss = F.cross_entropy(logits, tessel.from_numpy(targets))
                loss.backward()
        value = loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item()
        return value, full(head.weight.grad), t.summary()

    tessel.manual_seed(0)
    loss_ref, dw_ref, _ = loss_and_grad(nn.Linear(8, 64))

    def fn(rank, mesh):
        tessel.manual_seed(0)
        head = parallelize_module(nn.Linear(8, 64), mesh,
                                  ColwiseParallel(output_layouts=Shard(-1), use_local_output=False))
        return loss_and_grad(head)

    for loss, dw, summary in on_ranks(fn).values():
        # forward: all_reduce(max) + all_reduce(sum) of the row statistics; backward recomputes them.
        assert summary == "all_reduce(tp) x4", summary
        assert loss == pytest.approx(loss_ref, abs=1e-6)
        np.testing.assert_allclose(dw, dw_ref, rtol=1e-5, atol=1e-6)


def gpt_plan():
    """Megatron TP on the C++ GPT (its FQNs) with a vocab-sharded head for loss_parallel, written as a
    torch user writes a plan (examples/gpt/parallelize.cc's plan without sequence parallelism)."""
    one_input = PrepareModuleInput(input_layouts=Replicate(), desired_input_layouts=Replicate())
    return {"wte": RowwiseParallel(input_layouts=Replicate()),
            "layers.*.attn": one_input, "layers.*.attn.w[qkv]": ColwiseParallel(),
            "layers.*.attn.wo": RowwiseParallel(),
            "layers.*.mlp": one_input, "layers.*.mlp.fc": ColwiseParallel(), "layers.*.mlp.proj": RowwiseParallel(),
            "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}


def test_cpp_gpt_under_a_python_plan_with_loss_parallel_trains_like_one_rank():
    cfg = dict(vocab_size=64, d_model=16, n_layers=2, n_heads=2, seq_len=8)
    tokens = np.random.default_rng(5).integers(0, 64, size=(2, 9))
    idx, tgt = tokens[:, :-1].copy(), tokens[:, 1:].copy()

    def train(model, steps=3):
        opt = tessel.optim.AdamW(model.parameters(), lr=1e-2)
        losses, summaries = [], []
        for _ in range(steps):
            with loss_parallel():
                with tessel.CommTracer() as t:
                    loss = model.loss(tessel.from_numpy(idx), tessel.from_numpy(tgt))
                loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item())
            summaries.append(t.summary())
        return losses, summaries

    ref, _ = train(tessel.GPT(tessel.GPTConfig(**cfg), seed=0))
    assert ref[-1] < ref[0]

    def fn(rank, mesh):
        gpt = parallelize_module(tessel.GPT(tessel.GPTConfig(**cfg), seed=0), mesh, gpt_plan())
        assert gpt.layers[1].attn.wv.weight.placements == (Shard(0),)
        return train(gpt)

    for losses, summaries in on_ranks(fn).values():
        np.testing.assert_allclose(losses, ref, rtol=0, atol=1e-5)
        # Forward: wte, then wo and proj per block (5 all-reduces of Partial outputs) and the loss's 2
        # all-reduces of row statistics; the logits are never gathered.
        assert summaries[0] == "all_reduce(tp) x7", summaries[0]


def test_clip_grad_norm_of_tp_on_a_sub_mesh_reduces_over_the_tp_group_and_returns_a_dtensor():
    # A 2 x 2 (dp, tp) mesh with tensor parallelism on mesh["tp"] only (replicas of one model, same batch):
    # torch reduces each DTensor's norm over its own mesh, so the norm is one rank's, with one all-reduce
    # on the tp group; it used to raise (the default group has 4 ranks).
    x_np, y_np = inputs((3, 8)), np.array([0, 5, 2])

    def model():
        tessel.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 6))

    ref = model()
    F.cross_entropy(ref(tessel.from_numpy(x_np)), tessel.from_numpy(y_np)).backward()
    want = tessel.nn.utils.clip_grad_norm_(ref.parameters(), 0.1).item()
    want_grad = ref[0].weight.grad.numpy()
    out = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m = parallelize_module(model(), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        F.cross_entropy(m(tessel.from_numpy(x_np)), tessel.from_numpy(y_np)).backward()
        with tessel.CommTracer() as t:
            n = tessel.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
        assert isinstance(n, DTensor) and n.placements == (Replicate(),)
        out[world.rank] = (t.summary(), n.full_tensor().item(), full(m[0].weight.grad))
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    for rank in range(4):
        summary, norm, grad = out[rank]
        assert summary == "all_reduce(tp) x1"
        assert norm == pytest.approx(want, rel=1e-6)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)


def test_parallelize_module_takes_rank_zeros_values_by_default_when_ranks_differ():
    tessel.manual_seed(0)
    w_ref = nn.Linear(8, 6).weight.numpy()

    def fn(rank, mesh):
        tessel.manual_seed(rank)  # rank 1 draws other values: only src_data_rank makes them agree
        with tessel.CommTracer() as t:
            lin = parallelize_module(nn.Linear(8, 6), mesh, ColwiseParallel())  # torch's default src_data_rank=0
        return full(lin.weight), t.summary()

    for w, summary in on_ranks(fn).values():
        np.testing.assert_allclose(w, w_ref, rtol=0, atol=0)
        assert summary == "broadcast(tp) x2"  # weight and bias, from rank 0


def test_a_plan_key_that_names_no_submodule_is_skipped_with_torchs_warning():
    def fn(rank, mesh):
        tessel.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "layers.*.wq": ColwiseParallel(),
                                         "2": RowwiseParallel()})
        from tessel.distributed.checkpoint.state_dict import get_model_state_dict
        sd = get_model_state_dict(model)
        assert not any(v.requires_grad for v in sd.values())  # detached, as torch's module.state_dict()
        with tessel.no_grad():
            sd["0.bias"].to_local().fill_(7.0)  # the parameters' memory
        assert model[0].bias.to_local().tolist() == [7.0] * 3
        raw = model[0].bias._local_tensor  # torch's raw shard: the same memory, no autograd history
        assert raw.tolist() == [7.0] * 3 and not raw.requires_grad and model[0].bias.requires_grad
        with tessel.no_grad():
            raw.fill_(1.0)
        assert model[0].bias.to_local().tolist() == [1.0] * 3
        return [str(p.placements[0]) for p in model.parameters()]  # the other entries applied

    with pytest.warns(UserWarning) as caught:  # (from the main thread: catch_warnings is process-wide)
        out = on_ranks(fn)
    for placements in out.values():
        assert placements == ["S(0)", "S(0)", "S(1)", "R"]
    assert [str(w.message) for w in caught] == [
        "Parallelize plan key 'layers.*.wq' could not be resolved: no submodule matching token 'layers' in module "
        "Sequential(\n  (0): Linear(in_features=8, out_features=6, bias=True)\n  (1): ReLU()\n  (2): Linear("
        "in_features=6, out_features=4, bias=True)\n), skipping this plan entry."] * W


def test_cross_entropy_on_sharded_logits_outside_loss_parallel_is_a_value_error():
    def fn(rank, mesh):
        tessel.manual_seed(0)
        head = parallelize_module(nn.Linear(8, 10), mesh,
                                  ColwiseParallel(output_layouts=Shard(-1), use_local_output=False))
        logits = head(tessel.from_numpy(inputs((3, 8))))
        with pytest.raises(ValueError, match="cross_entropy"):
            F.cross_entropy(logits, tessel.from_numpy(np.array([1, 2, 3], dtype=np.int64)))

    on_ranks(fn)


class KwBlock(nn.Module):
    """attention-style call: forward(x, *, freqs=..., mask=None), keyword tensors next to the activation."""

    def __init__(self):
        super().__init__()
        self.attn = KwAttn()

    def forward(self, x, freqs):
        return self.attn(x, freqs=freqs, mask=None, tag="kept")


class KwAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.seen = []

    def forward(self, x, *, freqs, mask, tag):
        self.seen.append((isinstance(freqs, DTensor), tuple(freqs.shape), mask, tag))
        return self.fc(x) * (freqs.to_local() if isinstance(freqs, DTensor) else freqs)


def test_prepare_module_input_moves_keyword_arguments_by_name_as_torch():
    x_np, f_np = inputs((4, 16)), inputs((4, 16)) + 2.0
    tessel.manual_seed(0)
    ref = KwBlock()(tessel.from_numpy(x_np), tessel.from_numpy(f_np)).numpy()

    def fn(rank, mesh):
        tessel.manual_seed(0)
        block = KwBlock()
        # each rank holds its rows of freqs; the attention wants all of them, as a plain tensor
        plan = {"attn": PrepareModuleInput(input_kwarg_layouts={"freqs": Shard(0)},
                                           desired_input_kwarg_layouts={"freqs": Replicate()}, use_local_output=True)}
        parallelize_module(block, mesh, plan)
        with tessel.CommTracer() as t:
            y = block(tessel.from_numpy(x_np), tessel.from_numpy(f_np[2 * rank:2 * rank + 2].copy()))
        # without use_local_output the attention sees the DTensor, and no redistribute when the layouts agree
        tessel.manual_seed(0)
        block2 = parallelize_module(KwBlock(), mesh, {"attn": PrepareModuleInput(
            input_kwarg_layouts={"freqs": Replicate()}, desired_input_kwarg_layouts={"freqs": Replicate()})})
        with tessel.CommTracer() as t2:
            block2(tessel.from_numpy(x_np), tessel.from_numpy(f_np))
        return y.numpy(), block.attn.seen, t.summary(), block2.attn.seen[0][0], t2.summary()

    for y, seen, summary, kind2, summary2 in on_ranks(fn).values():
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        assert seen == [(False, (4, 16), None, "kept")]  # gathered rows, local; the other kwargs untouched
        assert summary == "all_gather(tp) x1"
        assert kind2 is True and summary2 == ""
    def style(layout):
        return PrepareModuleInput(input_kwarg_layouts={"f": layout}, desired_input_kwarg_layouts={"f": Replicate()})
    assert style(Shard(0)) == style(Shard(0)) and style(Shard(0)) != style(Shard(1))


def test_bad_plans_raise_the_exception_their_code_names_with_tps_message():
    def fn(rank, mesh):
        parallelize_module(Block(), mesh, {"mlp.nope": ColwiseParallel()})  # skipped with torch's warning
        with pytest.raises(NotImplementedError, match=r"ColwiseParallel on 'mlp' \(MLP\): ColwiseParallel supports "
                                                      r"Linear and Embedding, not MLP"):  # the FQN from the root
            parallelize_module(Block(), mesh, {"mlp": ColwiseParallel()})
        with pytest.raises(AssertionError, match="^input_kwarg_layouts and desired_input_kwarg_layouts should have "
                                                 "same length!$"):  # torch's type and text
            PrepareModuleInput(input_kwarg_layouts={"x": Shard(0)})
        with pytest.raises(TypeError, match=r"^Expect Union\[ParallelStyle, Dict\[str, ParallelStyle\]\] for "
                                            r"parallelize_plan, <class 'str'> found!$"):
            parallelize_module(Block(), mesh, {"mlp.fc": "colwise"})
        with pytest.raises(ValueError, match="one placement on the 1-D tensor-parallel mesh"):
            ColwiseParallel(input_layouts=(Replicate(), Replicate()))
        with pytest.raises(AssertionError, match="^input_layouts and desired_input_layouts should have same length!$"):
            PrepareModuleInput(input_layouts=(Shard(1), Shard(0)), desired_input_layouts=Replicate())
        mlp = MLP(16)
        assert parallelize_module(mlp, mesh) is mlp and not isinstance(mlp.fc.weight, DTensor)  # torch's warning
        mesh2 = init_device_mesh("cpu", (1, W), mesh_dim_names=("dp", "model"))
        with pytest.raises(ValueError, match="has no mesh axis 'tp'"):
            parallelize_module(MLP(16), mesh2, {"fc": ColwiseParallel()})
        with pytest.raises(ValueError, match="has no mesh axis 'tp'"):
            parallelize_module(MLP(16), mesh2, {"fc": PrepareModuleInput(input_layouts=Shard(0),
                                                                         desired_input_layouts=Replicate())})
        parallelize_module(MLP(16), mesh2, {"fc": ColwiseParallel()}, tp_axis="model")  # the named axis works

    with pytest.warns(UserWarning) as caught:  # (from the main thread: catch_warnings is process-wide)
        on_ranks(fn)
    messages = sorted(str(w.message) for w in caught)
    assert messages == ["No parallelize_plan is provided and auto-parallel is not supported at the moment, so this "
                        "parallelize_module call will do nothing."] * W + [
        "Parallelize plan key 'nope' could not be resolved: no submodule matching token 'nope' in module MLP(\n"
        "  (fc): Linear(in_features=16, out_features=64, bias=True)\n  (proj): Linear(in_features=64, "
        "out_features=16, bias=True)\n), skipping this plan entry."] * W  # (torch names the rest of the key)


def test_styles_keep_torchs_defaults_and_print_like_tp():
    assert ColwiseParallel() == ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1))
    assert RowwiseParallel() == RowwiseParallel(input_layouts=Shard(-1), output_layouts=Replicate(),
                                                use_local_output=True)
    assert ColwiseParallel() != ColwiseParallel(use_local_output=False)
    assert repr(RowwiseParallel(output_layouts=Shard(1))).startswith("RowwiseParallel(input_layouts=S(-1), "
                                                                     "output_layouts=S(1)")
    assert repr(PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate())).startswith(
        "PrepareModuleOutput(")


def test_comm_debug_mode_counts_the_tp_mlps_collectives_per_module_as_torchs_tutorial():
    from tessel.distributed.tensor.debug import CommDebugMode
    from tessel.nn.modules.module import register_module_forward_hook

    class MLPModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.net1, self.relu, self.net2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        tessel.manual_seed(0)
        model = MLPModule()
        parallelize_module(model, mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
        x = tessel.ones(3, 4, requires_grad=True)
        mode = CommDebugMode()
        with mode:
            out = model(x)
        fwd = (mode.get_total_counts(), mode.get_comm_counts(), mode.get_comm_module_counts())
        with mode:  # entering again starts over
            model(x).sum().backward()
        calls = []
        with register_module_forward_hook(lambda m, a, o: calls.append(type(m).__name__)):
            model(x)
        got[dist.get_rank()] = (fwd, mode.get_comm_counts(), mode.get_comm_module_counts(),
                                mode.generate_comm_debug_tracing_table(noise_level=1), mode.get_sharding_info(),
                                calls, out.shape)

    tessel.run_ranks(2, rank_fn)
    ar = tessel.ops.c10d_functional.all_reduce
    (total, counts, modules), both, both_modules, table, sharding, calls, shape = got[0]
    # Forward: RowwiseParallel's output all-reduce, counted for net2 and its ancestors.
    assert total == 1 and counts == {ar: 1} and tuple(shape) == (3, 4)
    assert modules == {"Global": {"forward": {ar: 1}, "backward": {}},
                       "MLPModule": {"forward": {ar: 1}, "backward": {}},
                       "MLPModule.net2": {"forward": {ar: 1}, "backward": {}}}
    # Forward and backward: ColwiseParallel's input gradient (Partial) all-reduced in net1's backward.
    assert both == {ar: 2}
    assert both_modules["MLPModule.net1"] == {"forward": {}, "backward": {ar: 1}}
    assert both_modules["Global"] == {"forward": {ar: 1}, "backward": {ar: 1}}
    assert "MLPModule.net2\n" in table and "*FORWARD: c10d_functional.all_reduce x1" in table
    assert "weight: Shard(dim=0)" in table  # net1's column shards (noise level 1 lists placements)
    assert str(sharding["MLPModule.net2.weight"]) == str((Shard(1),))
    assert calls == ["Linear", "ReLU", "Linear", "MLPModule"] and got[1][0] == got[0][0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_the_plan_key_empty_applies_its_style_to_the_module_itself_as_torch():
    # torch's shortcut (tensor/parallel/api.py): "" in a plan dict is the module itself, e.g. a root
    # PrepareModuleOutput next to its children's styles. tessel refused it as an empty FQN.
    x_np = inputs((3, 8))

    def fn(rank, mesh):
        tessel.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 6))
        parallelize_module(model, mesh, {
            "0": ColwiseParallel(use_local_output=False),
            "": PrepareModuleOutput(output_layouts=Shard(-1), desired_output_layouts=Replicate())})
        with tessel.CommTracer() as fwd:
            y = model(tessel.from_numpy(x_np))
        return str(model[0].weight.placements[0]), type(y).__name__, fwd.summary(), y.numpy()

    want = linear_reference(x_np)[0]
    for placement, kind, comm, y in on_ranks(fn).values():
        assert placement == "S(0)" and kind == "Tensor"  # the root's output redistributed and made local
        assert comm == "all_gather(tp) x1", comm  # the output layout move; a plain input needs none
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_a_style_written_as_torchs_runs_its_own_apply_and_a_built_in_subclass_override_is_refused():
    # torchtitan's NoParallel (a ParallelStyle subclass whose _apply calls distribute_module) raised AttributeError
    # ('_c'); a ColwiseParallel subclass overriding _prepare_input_fn (torchao's Float8 styles) was applied by the
    # C++ style without its override: silently other values
    from tessel.distributed.tensor import distribute_module
    from tessel.distributed.tensor.parallel import ParallelStyle

    class NoParallel(ParallelStyle):
        def _apply(self, module, device_mesh):
            def into(mod, inputs, mesh):
                return (DTensor.from_local(inputs[0], mesh, (Replicate(),), run_check=False), *inputs[1:])
            return distribute_module(module, device_mesh, None, into, lambda mod, out, mesh: out.to_local())

    class DoubledInput(ColwiseParallel):
        @staticmethod
        def _prepare_input_fn(*args):
            raise AssertionError("never called")

    class Checked(ColwiseParallel):  # torchao's pattern: its own _apply checks the module, then super()'s
        def _apply(self, module, device_mesh):
            module.seen_mesh_dims = device_mesh.ndim
            return super()._apply(module, device_mesh)

    class CheckedAndDoubled(Checked, DoubledInput):
        pass

    def fn(rank, mesh):
        tessel.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        want = model(tessel.ones(3, 4)).detach().numpy()
        parallelize_module(model, mesh, {"0": NoParallel(), "1": ColwiseParallel(output_layouts=Replicate())})
        got = model(tessel.ones(3, 4))
        kinds = (type(model[0].weight).__name__, model[0].weight.placements, model[1].weight.placements)
        with pytest.raises(NotImplementedError, match="DoubledInput overrides _prepare_input_fn of a built-in style"):
            parallelize_module(nn.Linear(4, 4), mesh, DoubledInput())
        checked = parallelize_module(nn.Linear(4, 4), mesh, Checked())  # super()._apply: the built-in style
        assert checked.weight.placements == (Shard(0),) and checked.seen_mesh_dims == 1
        with pytest.raises(NotImplementedError, match="overrides _prepare_input_fn of a built-in style"):
            parallelize_module(nn.Linear(4, 4), mesh, CheckedAndDoubled())
        assert ColwiseParallel() == ColwiseParallel() and len({ColwiseParallel(), ColwiseParallel()}) == 1
        return kinds, np.abs(got.numpy() - want).max()

    for (kind, p0, p1), err in on_ranks(fn).values():
        assert (p0, p1) == ((Replicate(),), (Shard(0),)) and err < 1e-6, (kind, p0, p1, err)


class _OwnRMSNorm(nn.Module):  # HF Llama's: its own class, not nn.RMSNorm
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(tessel.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return x * tessel.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def test_sequence_parallel_takes_a_models_own_norm_module_as_torch():
    # SequenceParallel refused any module but nn.LayerNorm / nn.RMSNorm / nn.Dropout (NotImplementedError), so an
    # HF-style model's own RMSNorm class could not be sequence-parallel; torch accepts any module
    x_np = inputs((2, 4, 8))
    ref = _OwnRMSNorm(8)
    xr = tessel.from_numpy(x_np)
    (ref(xr) * tessel.from_numpy(x_np)).sum().backward()

    def fn(rank, mesh):
        norm = parallelize_module(_OwnRMSNorm(8), mesh, SequenceParallel())
        shard = tessel.from_numpy(x_np[:, 2 * rank:2 * rank + 2].copy())
        with tessel.CommTracer() as t:
            y = norm(shard)
        (y.to_local() * shard).sum().backward()
        return y.full_tensor().numpy(), t.summary(), full(norm.weight.grad)

    for y, summary, grad in on_ranks(fn).values():
        np.testing.assert_allclose(y, ref(xr).detach().numpy(), rtol=1e-5, atol=1e-6)
        assert summary == ""  # token by token: nothing moves forward
        np.testing.assert_allclose(grad, ref.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
