"""tessel.planner from Python: the ledger planner's numbers against closed forms (LLaMA-7B's parameter count and
bytes per parameter), against the allocator's measured peaks of Python-driven training (tessel.nn.GPT on one rank,
and fully_shard of its blocks and root on two rank threads: every ledger to the byte), "which ledger blew up?", the
layout search, and bad layouts named. Also fully_shard of the modules C++ created (tessel.nn.GPT's blocks, which
have no __dict__): it raised AttributeError('__dict__') before, now they shard and train as the one-rank model."""
import math

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
from tessel import planner
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import FSDPModule, fully_shard

LLAMA_7B = 6_738_415_616  # Hugging Face's count for LLaMA-7B (untied 32000-row embedding and head)
GIB = 1 << 30


def test_llama_7b_ledgers_are_the_bytes_per_parameter_of_the_layout():
    llama = planner.preset("llama-7b")
    assert llama.num_parameters() == LLAMA_7B
    assert sum(math.prod(shape) for _, shape in llama.parameter_shapes()) == LLAMA_7B
    # one rank, bf16 parameters and gradients, fp32 AdamW moments: 2 + 2 + 8 bytes per parameter
    one = planner.plan_rank(llama, planner.Layout(), 0)
    assert (one.ledgers["params"], one.ledgers["grads"], one.ledgers["optim"]) == (2 * LLAMA_7B, 2 * LLAMA_7B,
                                                                                 8 * LLAMA_7B)
    assert one.axis_bytes == {"pp": 0, "dp_replicate": 0, "dp_shard": 0, "tp": 0}
    # ZeRO-1 over 8 ranks shards the moments only (N divides by 8: every rank holds 8 * N / 8 bytes of them)
    zero1 = planner.plan_rank(llama, planner.Layout(dp_shard=8, zero_stage=1), 3)
    assert zero1.ledgers["optim"] == LLAMA_7B and zero1.ledgers["params"] == 2 * LLAMA_7B
    assert zero1.coord == {"pp": 0, "dp_replicate": 0, "dp_shard": 3, "tp": 0}
    # fp32 master weights add 4 bytes per (sharded) parameter to the optimizer state
    master = planner.plan_rank(llama, planner.Layout(dp_shard=8, zero_stage=1, master_weights=True), 0)
    assert master.ledgers["optim"] == LLAMA_7B + 4 * LLAMA_7B // 8


def test_which_ledger_blew_up():
    llama = planner.preset("llama-7b")
    one = planner.plan_peak_rank(llama, planner.Layout(seq_len=4096))
    assert planner.exceeds_budget(one, "80GiB") == planner.OverBudget("optim", 8 * LLAMA_7B, False)
    assert planner.exceeds_budget(one, 40 * GIB) == planner.OverBudget("optim", 8 * LLAMA_7B, True)  # alone > 40 GiB
    text = planner.format_plan(one, "80GiB")
    assert "DOES NOT FIT" in text and "the largest ledger is optim (53907324928 B)" in text
    sharded = planner.plan_peak_rank(llama, planner.Layout(dp_shard=8, global_batch=8, seq_len=4096))
    assert planner.exceeds_budget(sharded, "80GiB") is None
    assert "fits: total" in planner.format_plan(sharded, "80GiB")
    assert sharded.ledgers["total"] == sum(sharded.ledgers[k] for k in ("params", "grads", "optim", "activations",
                                                                        "comm"))


def test_layout_search_lists_only_layouts_that_fit_fastest_first():
    llama = planner.preset("llama-7b")
    found = planner.rank_layouts(llama, world=8, budget="40GiB")
    assert len(found) > 10
    steps = [c.step["step_s"] for c in found]
    assert steps == sorted(steps)
    for c in found[:24]:
        assert c.layout.world_size == 8
        assert c.peak.ledgers["total"] <= 40 * GIB
        plans = [planner.plan_rank(llama, c.layout, r) for r in range(8)]
        assert c.peak.ledgers == max(plans, key=lambda p: p.ledgers["total"]).ledgers
        assert c.step["step_s"] == max(planner.estimate_step(p, c.layout)["step_s"] for p in plans)  # the slowest
    # one rank: 12 B per parameter (75.3 GiB) fit 80 GiB only with full checkpointing, and never 64 GiB
    assert [str(c.layout) for c in planner.rank_layouts(llama, world=1, budget="80GiB")] == [
        "pp1 dp_replicate1 dp_shard1 zero0 tp1 ac=full"]
    assert planner.rank_layouts(llama, world=1, budget="64GiB") == []
    # the default base takes the model's own sequence length (gpt2-small's 1024 learned positions), as the CLI
    gpt2 = planner.preset("gpt2-small")
    assert all(c.layout.seq_len == 1024 for c in planner.rank_layouts(gpt2, world=4, budget="80GiB"))
    assert len(planner.rank_layouts(gpt2, world=4, budget="80GiB")) > 10
    with pytest.raises(ValueError, match="base seq_len 4096 exceeds gpt2-small's learned positions"):
        planner.rank_layouts(gpt2, world=4, budget="80GiB", base=planner.Layout(global_batch=4))


def test_bad_layouts_and_budgets_are_named():
    llama = planner.preset("llama-7b")
    with pytest.raises(ValueError, match="n_heads 32 is not divisible by tp 3"):
        planner.verify(planner.Layout(tp=3), llama)
    with pytest.raises(ValueError, match="world"):
        planner.verify(planner.Layout(dp_shard=4), llama, world=8)
    with pytest.raises(ValueError, match="zero_stage 0 needs dp_shard == 1|dp_shard"):
        planner.plan_rank(llama, planner.Layout(dp_shard=2, zero_stage=0), 0)
    with pytest.raises(ValueError, match="gpipe"):
        planner.Layout(schedule="zigzag")
    with pytest.raises(ValueError, match="llama-7b"):
        planner.preset("llama-70b")
    with pytest.raises(ValueError, match="unknown unit ' parsecs'"):
        planner.parse_bytes("80 parsecs")
    with pytest.raises(ValueError, match="not a positive byte count"):
        planner.parse_bytes("-5GiB")
    with pytest.raises(TypeError, match="80GiB"):
        planner.parse_bytes(80.0)
    assert planner.parse_bytes("1.5KiB") == 1536 and planner.parse_bytes("40GB") == 40 * 10**9
    with pytest.raises(ValueError, match="below 8 EiB"):
        planner.parse_bytes(2**70)


def test_bad_models_and_sizes_are_errors_not_crashes_or_wrapped_numbers():
    with pytest.raises(ValueError, match="n_layers 1073741824 exceeds 65536"):  # listed per layer: it was OOM-killed
        planner.ModelSpec(vocab_size=10, d_model=8, n_layers=2**30, n_heads=2)
    with pytest.raises(ValueError, match="d_model 30 is not divisible by n_heads 4"):
        planner.ModelSpec(vocab_size=10, d_model=30, n_layers=2, n_heads=4)
    with pytest.raises(ValueError, match="ffn_hidden must be >= 1, got -1"):
        planner.ModelSpec(vocab_size=10, d_model=8, n_layers=2, n_heads=2, ffn_hidden=-1)
    with pytest.raises(ValueError, match="d_model 32 is not divisible by n_heads 3"):
        planner.from_gpt_config(tessel.GPTConfig(d_model=32, n_heads=3))
    # byte counts past int64 are refused (they wrapped: activations 0 for gpt2-small at global_batch 2**62)
    gpt2 = planner.preset("gpt2-small")
    with pytest.raises(ValueError, match="activation byte counts would overflow int64"):
        planner.plan_rank(gpt2, planner.Layout(global_batch=2**62, seq_len=1024))
    llama = planner.preset("llama-7b")
    with pytest.raises(ValueError, match="exceeds llama-7b|overflow int64"):
        planner.plan_rank(llama, planner.Layout(seq_len=2**40))
    # the layout search says what is wrong with its base or hardware instead of "nothing fits"
    for base, match in [(planner.Layout(seq_len=0, global_batch=4), "seq_len >= 1"),
                        (planner.Layout(global_batch=-4, seq_len=1024), "global_batch and seq_len >= 1"),
                        (planner.Layout(param_dtype=tessel.int32, global_batch=4, seq_len=1024), "floating")]:
        with pytest.raises(ValueError, match=match):
            planner.rank_layouts(gpt2, world=4, budget="80GiB", base=base)
    with pytest.raises(ValueError, match="ranks_per_node must be positive|must be positive, got"):
        planner.Hardware(ranks_per_node=0)
    one = planner.Layout(seq_len=1024)
    with pytest.raises(ValueError, match="rank 1 is not a rank of the layout's 1"):
        planner.plan_rank(gpt2, one, 1)
    with pytest.raises(ValueError, match="measured_activations=-5"):
        planner.plan_rank(gpt2, one, 0, measured_activations=-5)
    with pytest.raises(ValueError, match="stage 1 is not a stage of the layout's pp=1"):
        planner.step_flops(gpt2, one, 1)
    with pytest.raises(ValueError, match="local_batch must be >= 1"):
        planner.measure_gpt_activations(tessel.GPTConfig(**CFG), 0)
    with pytest.raises(ValueError, match="rank 3 is not a rank"):
        planner.plan_vs_measured(gpt2, one, 3)


CFG = dict(vocab_size=127, d_model=32, n_layers=2, n_heads=4, seq_len=16)  # vocab 127: uneven over 2 ranks
BATCH = 2  # sequences per rank


def _batches(world):
    rng = np.random.default_rng(0)
    return [(rng.integers(0, 127, (BATCH * world, 16)), rng.integers(0, 127, (BATCH * world, 16)))
            for _ in range(3)]


def _train(model, batches, rank, world, reset_before=2):
    """Three AdamW steps on this rank's rows; the peaks of the third (steady state: optimizer state exists,
    gradients zeroed), and the losses."""
    opt = tessel.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step, (idx, tgt) in enumerate(batches):
        if step == reset_before:
            tessel.reset_peak_memory_stats()
        rows = slice(rank * BATCH, (rank + 1) * BATCH)
        loss = model.loss(tessel.tensor(idx[rows]), tessel.tensor(tgt[rows]))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v["peak"] for k, v in tessel.memory_stats().items()}


def test_unsharded_gpt_ledgers_equal_the_plan():
    cfg = tessel.GPTConfig(**CFG)
    spec = planner.from_gpt_config(cfg)
    _, peaks = _train(tessel.nn.GPT(cfg, 7), _batches(1), 0, 1)
    layout = planner.Layout(param_dtype=tessel.float32, reduce_dtype=tessel.float32, global_batch=BATCH, seq_len=16)
    plan = planner.plan_rank(spec, layout, 0)
    n = cfg.num_parameters()
    assert (plan.ledgers["params"], plan.ledgers["grads"], plan.ledgers["optim"]) == (4 * n, 4 * n, 8 * n)
    for ledger in ("params", "grads", "optim", "activations", "comm"):
        assert peaks[ledger] == plan.ledgers[ledger], ledger
    assert plan.ledgers["activations"] == planner.measure_gpt_activations(cfg, BATCH)
    assert "activations" in planner.plan_vs_measured(spec, layout)


def test_fully_shard_of_gpt_blocks_matches_one_rank_and_the_exact_plan_per_ledger():
    cfg = tessel.GPTConfig(**CFG)
    spec = planner.from_gpt_config(cfg)
    world = 2
    batches = _batches(world)
    want = []  # the one-rank model on the whole global batch: each step's mean over both ranks' rows
    ref_model = tessel.nn.GPT(cfg, 7)
    opt = tessel.optim.AdamW(ref_model.parameters(), lr=1e-2)
    for idx, tgt in batches:
        loss = ref_model.loss(tessel.tensor(idx), tessel.tensor(tgt))
        loss.backward()
        opt.step()
        opt.zero_grad()
        want.append(loss.item())
    ref_wte = ref_model.wte.weight.detach().numpy().copy()
    del ref_model, opt, loss  # (rank 0 runs on this thread's device: its ledger must hold the rank's bytes only)
    layout = planner.Layout(dp_shard=world, param_dtype=tessel.float32, reduce_dtype=tessel.float32,
                            global_batch=BATCH * world, seq_len=16)
    out = {}

    def fn(_):
        dist.init_process_group()
        rank = dist.get_rank()
        model = tessel.nn.GPT(cfg, 7)
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        for block in model.layers:  # modules C++ created: no __dict__
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        block = model.layers[0]
        assert isinstance(block, FSDPModule)
        with pytest.raises(AssertionError, match="only be applied to a module once"):
            fully_shard(block, mesh=mesh)
        method = block.set_requires_gradient_sync  # FSDPModule's methods reach it through Module.__getattr__
        assert method.__self__ is block and method.__func__ is FSDPModule.set_requires_gradient_sync
        losses, peaks = _train(model, batches, rank, world)
        wte = model.wte.weight.full_tensor().numpy()
        out[rank] = (losses, peaks, planner.plan_rank(spec, layout, rank), wte)

    dist.run_ranks(world, fn)
    for rank in range(world):
        losses, peaks, plan, wte = out[rank]
        assert plan.exact
        np.testing.assert_allclose((np.array(out[0][0]) + np.array(out[1][0])) / 2, want, rtol=1e-5)
        np.testing.assert_allclose(wte, ref_wte, rtol=1e-5, atol=1e-6)
        for ledger in ("params", "grads", "optim", "activations", "comm"):
            assert peaks[ledger] == plan.ledgers[ledger], (rank, ledger)
        assert abs(peaks["total"] / plan.ledgers["total"] - 1) < 0.02
    assert out[0][2].ledgers["optim"] != out[1][2].ledgers["optim"]  # 127 embedding rows: 64 on rank 0, 63 on 1


def test_python_state_apis_refuse_modules_created_in_cpp():
    from tessel.distributed._composable import checkpoint
    model = tessel.nn.GPT(tessel.GPTConfig(**CFG), 7)
    with pytest.raises(TypeError, match="a module created in C\\+\\+ carries no Python state"):
        checkpoint(model.layers[0])
    with pytest.raises(AttributeError, match="cannot set attribute 'tag' on TransformerBlock: a module created in C"):
        model.layers[0].tag = 1  # (it raised AttributeError('__dict__'))
    model.layers[0].ln1 = tessel.nn.LayerNorm(CFG["d_model"])  # children and parameters can be assigned
    assert isinstance(model.layers[0].ln1, tessel.nn.LayerNorm)
