"""tessel.distributed.pipelining from Python, laid out like torch: the C++ GPT pipeline under 1F1B on 2 rank
threads trains with one rank's losses; torch's schedule classes run Python-defined stage modules (one and
two stages per rank, zero-bubble included) with one rank's loss and gradients; the schedule IR parses and
prints back, lowers, verifies, simulates to the closed-form bubble and draws its timeline; bad shapes raise
ValueError with pipelining's message."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
import tessel.nn.functional as F
from tessel.distributed import pipelining as pp

CFG = dict(vocab_size=32, d_model=16, n_layers=2, n_heads=2, seq_len=8)
BATCH, STEPS = 4, 4


def batches():
    """The same batch each step: its loss must fall."""
    tokens = np.random.default_rng(0).integers(0, CFG["vocab_size"], size=(BATCH, CFG["seq_len"] + 1))
    for _ in range(STEPS):
        yield tessel.from_numpy(tokens[:, :-1].copy()), tessel.from_numpy(tokens[:, 1:].copy())


@pytest.mark.parametrize("schedule,where", [("1F1B", [0, 1]), ("Interleaved1F1B", [0, 1, 0, 1]),
                                            ("ZBVZeroBubble", [0, 1, 1, 0])])
def test_gpt_pipeline_on_two_rank_threads_matches_one_rank(schedule, where):
    cfg = dict(CFG, n_layers=len(where))
    model = tessel.GPT(tessel.GPTConfig(**cfg), seed=0)
    opt = tessel.optim.AdamW(model.named_parameters(), lr=1e-2)
    ref = []
    for idx, tgt in batches():
        loss = model.loss(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref.append(loss.item())
    assert ref[-1] < ref[0]  # it trains

    losses = {}

    def rank_fn(world):
        dist.init_process_group()
        part = pp.pipeline_gpt(tessel.GPTConfig(**cfg), seed=0, schedule=schedule, n_microbatches=4)
        assert part.stage_to_rank == where and part.num_stages == len(where)
        first, last = world.rank == where[0], world.rank == where[-1]
        opt = tessel.optim.AdamW(part.named_parameters(), lr=1e-2)
        out = []
        for idx, tgt in batches():
            # A rank with neither end (rank 1 of the V) passes the tokens too: they size the microbatches.
            out.append(part.step(idx if first or not last else None, tgt if last else None))
            opt.step()
            opt.zero_grad()
        losses[world.rank] = out
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert losses[1 - where[-1]] == [None] * STEPS  # the loss lives on the last stage's rank
    np.testing.assert_allclose(losses[where[-1]], ref, rtol=0, atol=1e-5)


class Part(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.tanh(self.fc(x))


def mse(out, target):
    return ((out - target) ** 2).mean()


def stepped(sched, *args, **kwargs):
    """torch's step with losses=[]: (what step returns: the merged output on the last stage's rank, else
    None; the full-batch loss there, else None). The batches here split evenly, so the full-batch loss is the
    microbatches' mean."""
    losses = []
    out = sched.step(*args, losses=losses, **kwargs)
    return out, (float(np.mean([v.item() for v in losses])) if losses else None)


def make_parts(n):
    tessel.manual_seed(0)
    return [Part() for _ in range(n)]


def through(parts, x_np):
    h = tessel.from_numpy(x_np)
    for part in parts:
        h = part(h)
    return h


def microbatch_losses(parts, x_np, y_np):
    """loss_fn on each of 4 microbatches (rows 2i, 2i + 1): what a schedule's `losses` list must hold."""
    return [mse(through(parts, x_np[2 * i:2 * i + 2]), tessel.from_numpy(y_np[2 * i:2 * i + 2])).item()
            for i in range(4)]


def one_process(parts, x_np, y_np):
    """The whole batch through the parts in one process: its loss and each part's fc.weight gradient."""
    loss = mse(through(parts, x_np), tessel.from_numpy(y_np))
    loss.backward()
    return loss, [p.fc.weight.grad.numpy() for p in parts]


def assert_stage_grads(grads, ref_grads):
    for i, ref in enumerate(ref_grads):
        np.testing.assert_allclose(grads[i], ref, rtol=1e-5, atol=1e-6, err_msg="stage %d" % i)


def schedule_over(schedule, parts, rank, loss_fn=mse, stage_kwargs=lambda i: {}):
    """The stage indices `rank` holds under `schedule` when `parts` (one stage module each, 2 per rank at
    most) run on 2 ranks, and the schedule over their PipelineStages (4 microbatches)."""
    n = len(parts)
    where = pp.stage_to_rank_map(schedule._name, 2, n)
    mine = [i for i in range(n) if where[i] == rank]
    stages = [pp.PipelineStage(parts[i], i, n, "cpu", **stage_kwargs(i)) for i in mine]
    return mine, schedule(stages[0] if n == 2 else stages, n_microbatches=4, loss_fn=loss_fn)


def schedule_on_rank(schedule, stages_per_rank, rank):
    """2 * stages_per_rank fresh Parts, the stage indices `rank` holds and the schedule over them (mse)."""
    parts = make_parts(2 * stages_per_rank)
    return (parts, *schedule_over(schedule, parts, rank))


def merged_over_ranks(got, ref_loss, **tolerance):
    """got[rank] = (the step's loss or None, {stage index: value}): the loss is on exactly one rank and equals
    ref_loss (pytest.approx with `tolerance`); returns both ranks' {stage index: value} together."""
    losses = [got[r][0] for r in (0, 1) if got[r][0] is not None]
    assert len(losses) == 1 and losses[0] == pytest.approx(ref_loss, **tolerance)
    return {**got[0][1], **got[1][1]}


@pytest.mark.parametrize("name,where", [("Interleaved1F1B", [0, 1, 0, 1]), ("ZBVZeroBubble", [0, 1, 1, 0])])
def test_schedule_runtime_runs_a_csv_schedule_placed_as_the_csv_says(tmp_path, name, where):
    # torch's _PipelineScheduleRuntime + _load_csv: a compute-only schedule from a file (here a generated one,
    # written in torch's CSV layout), its stage placement taken from the file, runs to one rank's gradients.
    rng = np.random.default_rng(4)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    ref_loss, ref_grads = one_process(make_parts(4), x_np, y_np)
    csv = tmp_path / ("%s.csv" % name)
    csv.write_text(pp.dump_csv(pp.generate_schedule(name, 2, 4, 4)))
    bad = tmp_path / "bad.csv"
    bad.write_text(csv.read_text().replace("1F3", ""))  # stage 1 never runs microbatch 3 forward
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = make_parts(4)
        mine = [i for i in range(4) if where[i] == world.rank]
        runtime = pp.schedules._PipelineScheduleRuntime([pp.PipelineStage(parts[i], i, 4) for i in mine],
                                                        n_microbatches=4, loss_fn=mse)
        with pytest.raises(RuntimeError, match="load a schedule first"):
            runtime.step(tessel.from_numpy(x_np))
        with pytest.raises(NotImplementedError, match="compute_comms"):
            runtime._load_csv(str(csv), format="compute_comms")
        with pytest.raises(ValueError, match=r"action 1[BI]3 runs before its forward 1F3"):  # with the grid
            runtime._load_csv(str(bad))
        runtime._load_csv(str(csv))
        assert runtime.stage_to_rank == where
        with pytest.raises(NotImplementedError, match="compute_comms"):  # torch's runtime default: the lowered form
            runtime._dump_csv(str(tmp_path / "lowered.csv"))
        runtime._dump_csv(str(tmp_path / ("back%d.csv" % world.rank)), format="compute_only")
        x = tessel.from_numpy(x_np) if 0 in mine else None
        _, loss = stepped(runtime, x, target=tessel.from_numpy(y_np) if 3 in mine else None)
        got[world.rank] = (loss, {i: parts[i].fc.weight.grad.numpy() for i in mine})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert (tmp_path / "back0.csv").read_text() == csv.read_text()
    assert_stage_grads(merged_over_ranks(got, ref_loss, rel=1e-5), ref_grads)
    with pytest.raises(NotImplementedError, match="defer_pp_recv=True"):
        pp.schedules._PipelineScheduleRuntime([], 4, defer_pp_recv=True)


@pytest.mark.parametrize("schedule,stages_per_rank", [
    (pp.ScheduleGPipe, 1), (pp.Schedule1F1B, 1), (pp.ScheduleInterleaved1F1B, 2),
    (pp.ScheduleInterleavedZeroBubble, 2), (pp.ScheduleZBVZeroBubble, 2)])
def test_torch_schedules_over_python_stage_modules_match_one_rank(schedule, stages_per_rank):
    rng = np.random.default_rng(3)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    n = 2 * stages_per_rank
    ref_loss, ref_grads = one_process(make_parts(n), x_np, y_np)

    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts, mine, sched = schedule_on_rank(schedule, stages_per_rank, world.rank)
        # A rank with neither end (rank 1 of the V) calls step() with no batch, as in torch.
        x = tessel.from_numpy(x_np) if 0 in mine else None
        out, loss = stepped(sched, x, target=tessel.from_numpy(y_np) if n - 1 in mine else None)
        assert (out is None) == (n - 1 not in mine)
        if out is not None:  # torch's merged output: the whole batch through every stage, as one process
            np.testing.assert_allclose(out.numpy(), through(make_parts(n), x_np).detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
        got[world.rank] = (loss, {i: parts[i].fc.weight.grad.numpy() for i in mine})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    grads = merged_over_ranks(got, ref_loss.item(), abs=1e-6)
    assert sorted(grads) == list(range(n))
    assert_stage_grads(grads, ref_grads)


class TPPart(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return F.tanh(self.proj(F.gelu(self.fc(x))))


def two_part_reference(seed):
    """A batch of 8 rows and one process's loss and gradients through two TPParts (seed 0): what the
    sharded pipelines below must reproduce."""
    rng = np.random.default_rng(seed)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    tessel.manual_seed(0)
    parts = [TPPart(), TPPart()]
    loss = mse(parts[1](parts[0](tessel.from_numpy(x_np))), tessel.from_numpy(y_np))
    loss.backward()
    return x_np, y_np, loss, {(i, n): p.grad.numpy() for i, part in enumerate(parts) for n, p in part.named_parameters()}


def expect_grads(grads, ref, scale=1):
    """The gathered stage gradients, keyed (stage, name), are `scale` times two_part_reference's."""
    assert sorted(grads) == sorted(ref)
    for key in ref:
        np.testing.assert_allclose(grads[key], scale * ref[key], rtol=1e-5, atol=1e-6, err_msg=str(key))


def test_1f1b_over_tensor_parallel_python_stages_on_a_pp_by_tp_mesh_matches_one_rank():
    """Composition (DESIGN.md's order): split into stages, tensor parallelism per stage on mesh["tp"], then
    a PipelineStage on mesh["pp"]'s group; 4 rank threads = 2 stages x 2-way TP."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    x_np, y_np, ref_loss, ref = two_part_reference(4)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
        tessel.manual_seed(0)
        parts = [TPPart(), TPPart()]
        s = mesh.get_local_rank("pp")
        part = parallelize_module(parts[s], mesh["tp"], {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
        stage = pp.PipelineStage(part, s, 2, "cpu", group=mesh.get_group("pp"))
        sched = pp.Schedule1F1B(stage, n_microbatches=4, loss_fn=mse)
        _, loss = stepped(sched, tessel.from_numpy(x_np)) if s == 0 else stepped(sched, target=tessel.from_numpy(y_np))
        got[world.rank] = (s, loss, {(s, n): p.grad.full_tensor().numpy() for n, p in part.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    grads = {}
    for s, loss, g in got.values():
        assert (loss is None) == (s == 0)
        if loss is not None:
            assert loss == pytest.approx(ref_loss.item(), abs=1e-6)
        grads.update(g)
    expect_grads(grads, ref)


def _fully_shard_stage_on_pp_by_dp():
    """This rank's stage of two TPParts on a (pp 2, dp 2) mesh, its block and the stage module under fully_shard
    on mesh["dp"] (torchtitan's PP + FSDP): (stage index, dp index, the part, the PipelineStage)."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.fsdp import fully_shard
    dist.init_process_group()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    tessel.manual_seed(0)
    parts = [TPPart(), TPPart()]
    s, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
    part = parts[s]
    fully_shard(part.fc, mesh=mesh["dp"])
    fully_shard(part, mesh=mesh["dp"])
    return s, d, part, pp.PipelineStage(part, s, 2, "cpu", group=mesh.get_group("pp"))


@pytest.mark.parametrize("schedule", [pp.Schedule1F1B, pp.ScheduleGPipe])
def test_fully_shard_python_stages_under_a_schedule_on_a_pp_by_dp_mesh_match_one_rank(schedule):
    """torchtitan's PP + FSDP from Python: each stage's blocks and the stage module under fully_shard on
    mesh["dp"], then the schedule on mesh["pp"]; the schedule gathers each stage once per step,
    accumulates locally and reduces once (UNSHARD ... REDUCE_GRAD). 4 rank threads = 2 stages x 2-way FSDP,
    each dp rank on its half of the batch; gradients equal one process on the whole batch."""

    x_np, y_np, ref_loss, ref = two_part_reference(5)
    got = {}

    def rank_fn(world):
        s, d, part, stage = _fully_shard_stage_on_pp_by_dp()
        sched = schedule(stage, n_microbatches=2, loss_fn=mse)
        rows = slice(4 * d, 4 * d + 4)
        with tessel.CommTracer() as t:
            _, loss = (stepped(sched, tessel.from_numpy(x_np[rows])) if s == 0 else
                       stepped(sched, target=tessel.from_numpy(y_np[rows])))
        grads = {(s, n): p.grad.full_tensor().numpy() for n, p in part.named_parameters()}
        # After the step the stage trains on its own again (torch's stage turns sync back on): a plain backward
        # reduces its two groups' gradients.
        with tessel.CommTracer() as alone:
            part(tessel.from_numpy(x_np[rows])).sum().backward()
        got[world.rank] = (s, loss, t.summary(), grads, alone.summary())
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    grads, losses = {}, []
    for s, loss, summary, g, alone in got.values():
        # Two groups per stage, each gathered and reduced once per step, not once per microbatch.
        import re
        assert re.search(r"all_gather\(dp\) x2\b", summary) and re.search(r"reduce_scatter\(dp\) x2\b", summary), \
            summary
        assert re.search(r"reduce_scatter\(dp\) x2\b", alone), alone
        if loss is not None:
            losses.append(loss)
        grads.update(g)
    assert np.mean(losses) == pytest.approx(ref_loss.item(), abs=1e-6)
    expect_grads(grads, ref)


@pytest.mark.parametrize("mode", ["plain", "hook", "no_sync"])
def test_distributed_data_parallel_stages_all_reduce_once_per_step_unless_a_comm_hook_reduces(mode):
    """Each stage a DistributedDataParallel over mesh["dp"] of a (pp 2, dp 2) mesh: the schedule accumulates its
    gradients over the microbatches and all-reduces its bucket once per step (torch's stage: no_sync but for the last
    backward), where DDP on its own reduced after each microbatch's backward; with a communication hook registered
    the hook reduces the accumulated gradients once after the step (it never ran under a schedule before: the
    stages' backwards run in C++, and the gradients were left unreduced). Gradients equal one process on the whole
    batch either way. A step inside ddp.no_sync() reduces nothing; the next step reduces both steps' sum."""
    from tessel.distributed.algorithms.ddp_comm_hooks import default_hooks
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.nn.parallel import DistributedDataParallel

    x_np, y_np, ref_loss, ref = two_part_reference(5)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        tessel.manual_seed(0)
        parts = [TPPart(), TPPart()]
        s, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
        ddp = DistributedDataParallel(parts[s], device_mesh=mesh["dp"])
        if mode == "hook":
            ddp.register_comm_hook(mesh["dp"].get_group(), default_hooks.allreduce_hook)
        sched = pp.Schedule1F1B(pp.PipelineStage(ddp, s, 2, "cpu", group=mesh.get_group("pp")), n_microbatches=2,
                                loss_fn=mse)
        rows = slice(4 * d, 4 * d + 4)

        def step():
            with tessel.CommTracer() as t:
                _, loss = (stepped(sched, tessel.from_numpy(x_np[rows])) if s == 0 else
                           stepped(sched, target=tessel.from_numpy(y_np[rows])))
            return loss, t.summary()

        if mode == "no_sync":
            with ddp.no_sync():
                _, unsynced = step()
            assert "all_reduce" not in unsynced, unsynced
        loss, summary = step()
        scale = 0.5 if mode == "no_sync" else 1.0  # the same batch twice: twice the gradients
        got[world.rank] = (loss, summary, {(s, n): p.grad.numpy() * scale for n, p in parts[s].named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    grads, losses = {}, []
    for loss, summary, g in got.values():
        import re
        # one bucket: all-reduced once per step; with the hook, its flags all-reduce + the hook's bucket all-reduce
        assert re.search(r"all_reduce\(dp\) x%d\b" % (2 if mode == "hook" else 1), summary), summary
        if loss is not None:
            losses.append(loss)
        grads.update(g)
    assert np.mean(losses) == pytest.approx(ref_loss.item(), abs=1e-6)
    expect_grads(grads, ref)


def test_a_fully_shard_stage_and_a_ddp_stage_on_one_rank_are_each_driven_as_torchs_stages():
    """Interleaved 1F1B, four stages on a (pp 2, dp 2) mesh: on each pipeline rank one stage under fully_shard and
    one under DistributedDataParallel (torch's stages each check their own module; tessel's schedule used to refuse
    the mix with a ValueError). Per step each fully_shard stage is reduce-scattered once and each DDP bucket
    all-reduced once; the gradients equal one process on the whole batch."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.fsdp import fully_shard
    from tessel.nn.parallel import DistributedDataParallel

    rng = np.random.default_rng(4)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    ref_loss, ref_grads = one_process(make_parts(4), x_np, y_np)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        parts = make_parts(4)
        p, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
        mine = [p, p + 2]  # interleaved: stages p and p + 2 on pipeline rank p
        fully_shard(parts[p], mesh=mesh["dp"])
        wrapped = {p: parts[p], p + 2: DistributedDataParallel(parts[p + 2], device_mesh=mesh["dp"])}
        stages = [pp.PipelineStage(wrapped[i], i, 4, "cpu", group=mesh.get_group("pp")) for i in mine]
        sched = pp.ScheduleInterleaved1F1B(stages, n_microbatches=2, loss_fn=mse)
        rows = slice(4 * d, 4 * d + 4)
        with tessel.CommTracer() as t:
            _, loss = (stepped(sched, tessel.from_numpy(x_np[rows])) if p == 0 else
                       stepped(sched, target=tessel.from_numpy(y_np[rows])))
        grads = {p: parts[p].fc.weight.grad.full_tensor().numpy(), p + 2: parts[p + 2].fc.weight.grad.numpy()}
        got[world.rank] = (loss, t.summary(), grads)
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    import re
    grads, losses = {}, []
    for loss, summary, g in got.values():
        assert re.search(r"reduce_scatter\(dp\) x1\b", summary) and re.search(r"all_reduce\(dp\) x1\b", summary), \
            summary
        if loss is not None:
            losses.append(loss)
        grads.update(g)
    assert np.mean(losses) == pytest.approx(ref_loss.item(), abs=1e-6)
    assert sorted(grads) == [0, 1, 2, 3]
    assert_stage_grads(grads, ref_grads)


def test_finalize_gradients_false_accumulates_fully_shard_stages_unreduced_until_a_finalizing_step():
    """torch's step(finalize_gradients=False): the step's REDUCE_GRAD is skipped, fully_shard stages keep their
    unreduced gradients, and the next step reduces both at once. Each dp rank's 4 rows go as two steps of 2: the
    accumulated gradient is twice the one-process gradient of the mean over the whole batch (two means)."""

    x_np, y_np, ref_loss, ref = two_part_reference(5)
    got = {}

    def rank_fn(world):
        s, d, part, stage = _fully_shard_stage_on_pp_by_dp()
        sched = pp.Schedule1F1B(stage, n_microbatches=2, loss_fn=mse)
        summaries = []
        for half, finalize in ((0, False), (1, True)):
            rows = slice(4 * d + 2 * half, 4 * d + 2 * half + 2)
            with tessel.CommTracer() as t:
                if s == 0:
                    sched.step(tessel.from_numpy(x_np[rows]), finalize_gradients=finalize)
                else:
                    sched.step(target=tessel.from_numpy(y_np[rows]), finalize_gradients=finalize)
            summaries.append(t.summary())
        got[world.rank] = (summaries, {(s, n): p.grad.full_tensor().numpy() for n, p in part.named_parameters()})
        dist.destroy_process_group()

    tessel.run_ranks(4, rank_fn)
    import re
    grads = {}
    for (first, second), g in got.values():
        assert "reduce_scatter" not in first, first  # nothing reduced by the non-finalizing step
        assert re.search(r"reduce_scatter\(dp\) x2\b", second), second  # both steps' gradients at once
        grads.update(g)
    expect_grads(grads, ref, scale=2)


def test_schedule_ir_parses_lowers_verifies_and_simulates_to_the_closed_form_bubble():
    assert str(pp.parse_action("2SEND_B2")) == "2SEND_B2" and pp.parse_action("1UNSHARD").microbatch is None
    a = pp.parse_action("0W3")
    assert (a.stage, a.kind, a.microbatch) == (0, "W", 3)
    row = pp.parse_rank_program("0F0,0F1,,0B0,0B1")
    assert row[2] is None and pp.format_rank_program(row) == "0F0,0F1,,0B0,0B1"
    p, m = 4, 8
    prog = pp.generate_schedule("1F1B", p, p, m)
    assert pp.verify_compute_program(prog, p, m) == [0, 1, 2, 3]
    assert pp.parse_csv(pp.dump_csv(prog)) == prog
    where = pp.stage_to_rank_map("1F1B", p, p)
    lowered = pp.lower_program(prog, where, m)
    pp.verify_lowered_program(lowered, where, m)
    assert any(a is not None and a.kind == "SEND_F" for a in lowered[0])
    r = pp.simulate(prog, where)
    assert r.bubble == pytest.approx((p - 1) / (m + p - 1))  # PipeDream-Flush's bubble, unit costs
    assert r.makespan == pytest.approx(3 * (m + p - 1))  # F = 1, B = I + W = 2
    assert r.peak_in_flight == [4, 3, 2, 1]  # 1F1B: p - s on stage s
    assert pp.simulate(pp.generate_schedule("GPipe", p, p, m), where).peak_in_flight == [m] * p
    zb = pp.simulate(pp.generate_schedule("InterleavedZeroBubble", p, p, m), where)
    assert zb.bubble == pytest.approx((p - 1) / (3 * m + p - 1))  # ZB-H1
    svg = pp.timeline_svg(r, "1F1B p=4 m=8")
    assert "<svg" in svg and svg.rstrip().endswith("</svg>") and "1F1B p=4 m=8" in svg
    assert len(r.timeline()) == 2 * p * m
    assert "ZBVZeroBubble" in pp.schedule_names()
    assert pp.get_schedule_class("zbvzerobubble") is pp.ScheduleZBVZeroBubble
    assert [pp.get_schedule_class(n)._name for n in pp.schedule_names()] == pp.schedule_names()
    assert pp.stage_to_rank_map("ZBVZeroBubble", 2, 4) == [0, 1, 1, 0]


def test_bad_schedules_and_actions_raise_value_errors_with_pipelinings_message():
    with pytest.raises(ValueError, match="ZBVZeroBubble requires exactly 2 stages per rank, got 3"):
        pp.generate_schedule("ZBVZeroBubble", 2, 6, 4)
    with pytest.raises(ValueError, match="1X0"):
        pp.parse_action("1X0")
    with pytest.raises(ValueError, match="Schedule2F2B"):
        pp.generate_schedule("Schedule2F2B", 2, 2, 2)
    with pytest.raises(ValueError, match="Unknown schedule name '2F2B'"):
        pp.get_schedule_class("2F2B")
    broken = pp.generate_schedule("1F1B", 2, 2, 2)
    broken[1] = [a for a in broken[1] if a is None or a.kind != "B"]
    with pytest.raises(ValueError, match="pipeline program"):
        pp.verify_compute_program(broken, 2, 2)

    def rank_fn(world):
        dist.init_process_group()
        parts = make_parts(2)
        with pytest.raises(TypeError, match="takes one PipelineStage"):
            pp.Schedule1F1B([pp.PipelineStage(parts[world.rank], world.rank, 2)], n_microbatches=2, loss_fn=mse)
        with pytest.raises(ValueError, match="stage"):  # stage 1 does not live on rank 0 (looped placement)
            pp.Schedule1F1B(pp.PipelineStage(parts[1 - world.rank], 1 - world.rank, 2), 2, loss_fn=mse)
        # torch's chunk specs: TensorChunkSpec(0) for every argument is what the schedules do; another dim is not.
        from tessel.distributed.pipelining.microbatch import TensorChunkSpec
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2)
        pp.Schedule1F1B(stage, 2, loss_fn=mse, args_chunk_spec=(TensorChunkSpec(0),),
                        kwargs_chunk_spec={"mask": TensorChunkSpec(0)})
        with pytest.raises(NotImplementedError, match="chunk specs other than TensorChunkSpec"):
            pp.Schedule1F1B(stage, 2, loss_fn=mse, args_chunk_spec=(TensorChunkSpec(1),))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_schedule_step_reports_each_microbatchs_loss_as_torch():
    # torchtitan's call: schedule.step(x, target=y, losses=losses) then mean(stack(losses)): each entry is
    # loss_fn on that microbatch (rows 2i, 2i + 1 of the batch), on the last stage's rank only.
    rng = np.random.default_rng(4)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    parts = make_parts(2)
    want = microbatch_losses(parts, x_np, y_np)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = make_parts(2)
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        sched = pp.Schedule1F1B(stage, n_microbatches=4, loss_fn=mse)
        losses = []
        for _ in range(2):  # the same list again: it holds this step's microbatches only (torch clears it)
            loss = sched.step(tessel.from_numpy(x_np) if world.rank == 0 else None,
                              target=tessel.from_numpy(y_np) if world.rank == 1 else None, losses=losses)
            for part in parts:
                for p in part.parameters():
                    p.grad = None
        got[world.rank] = (loss, [t.item() for t in losses])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0] == (None, [])
    np.testing.assert_allclose(got[1][1], want, rtol=1e-6)
    # step's value there is torch's: the last stage's outputs of the 4 microbatches merged along dim 0
    np.testing.assert_allclose(got[1][0].numpy(), through(parts, x_np).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("schedule,stages_per_rank", [
    (pp.Schedule1F1B, 1), (pp.ScheduleInterleaved1F1B, 2), (pp.ScheduleZBVZeroBubble, 2)])
def test_schedule_eval_is_a_forward_only_step_as_torch(schedule, stages_per_rank):
    # torchtitan's validation: schedule.eval(x, target=y, losses=losses): each microbatch's loss, no backward
    # (no gradient appears, a step afterwards trains as if eval never ran).
    rng = np.random.default_rng(6)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    n = 2 * stages_per_rank
    parts = make_parts(n)
    want = microbatch_losses(parts, x_np, y_np)
    _, ref_grads = one_process(parts, x_np, y_np)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts, mine, sched = schedule_on_rank(schedule, stages_per_rank, world.rank)
        x = tessel.from_numpy(x_np) if 0 in mine else None
        y = tessel.from_numpy(y_np) if n - 1 in mine else None
        losses = []
        with tessel.CommTracer() as t:
            loss = sched.eval(x, target=y, losses=losses)
        no_grads = all(p.grad is None for i in mine for p in parts[i].parameters())
        sched.step(x, target=y)  # then a training step: the gradients of one process on the whole batch
        got[world.rank] = (loss, [v.item() for v in losses], no_grads, t.summary(),
                           {i: parts[i].fc.weight.grad.numpy() for i in mine})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    last = [r for r in (0, 1) if got[r][0] is not None]
    assert len(last) == 1
    out, losses, _, _, _ = got[last[0]]
    np.testing.assert_allclose(losses, want, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), through(parts, x_np).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert got[1 - last[0]][1] == []
    where = pp.stage_to_rank_map(schedule._name, 2, n)
    want_p2p = {0: {}, 1: {}}
    for stage in range(n - 1):  # activations only, each boundary's 4 microbatches plus its shape handshake
        a, b = where[stage], where[stage + 1]
        if a != b:
            want_p2p[a]["send"] = want_p2p[a].get("send", 0) + 5
            want_p2p[b]["recv"] = want_p2p[b].get("recv", 0) + 5
    for r in (0, 1):
        assert got[r][2], "eval left gradients"
        counts = {k.split("(")[0]: int(v) for k, v in (item.split(" x") for item in got[r][3].split(", "))}
        assert counts == want_p2p[r], (r, got[r][3])  # no gradient comes back
    assert_stage_grads({**got[0][4], **got[1][4]}, ref_grads)


class KwPart(nn.Module):
    """A stage whose forward takes keyword arguments (torchtitan passes input_batch= to every stage)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, row_scale=None, shift=0.0):
        return F.tanh(self.fc(x) * row_scale + shift)


def weighted_mse(out, target, weight=1.0):
    return weight * ((out - target) ** 2).mean()


def two_stage_1f1b(world, make_parts, loss_fn):
    """This rank's stage module of two, built from seed 0 on every rank, and its 1F1B schedule of 4
    microbatches."""
    dist.init_process_group()
    tessel.manual_seed(0)
    part = make_parts()[world.rank]
    return part, pp.Schedule1F1B(pp.PipelineStage(part, world.rank, 2, "cpu"), n_microbatches=4, loss_fn=loss_fn)


def assert_steps_match_one_rank(got, ref, ref_grads):
    """got[rank] = (step's loss, weight gradient of each step): the loss on the last stage's rank only, every
    step's gradients those of one rank on the whole batch."""
    assert got[0][0] is None and got[1][0] == pytest.approx(ref.item(), abs=1e-6)
    for r in (0, 1):
        for grad in got[r][1:]:
            np.testing.assert_allclose(grad, ref_grads[r], rtol=1e-5, atol=1e-6)


def test_step_passes_keyword_arguments_to_every_stage_per_microbatch_as_torch():
    rng = np.random.default_rng(8)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    scale_np = rng.uniform(0.5, 1.5, (8, 1)).astype(np.float32)
    tessel.manual_seed(0)
    parts = [KwPart(), KwPart()]
    h = tessel.from_numpy(x_np)
    for part in parts:
        h = part(h, row_scale=tessel.from_numpy(scale_np), shift=0.25)
    ref = weighted_mse(h, tessel.from_numpy(y_np), weight=3.0)
    ref.backward()
    ref_grads = [p.fc.weight.grad.numpy() for p in parts]
    got = {}

    def rank_fn(world):
        part, sched = two_stage_1f1b(world, lambda: [KwPart(), KwPart()], weighted_mse)
        kw = dict(row_scale=tessel.from_numpy(scale_np), shift=0.25, loss_kwargs={"weight": 3.0},
                  return_outputs=False)
        if world.rank == 0:
            out, loss = stepped(sched, tessel.from_numpy(x_np), **kw)
        else:
            out, loss = stepped(sched, target=tessel.from_numpy(y_np), **kw)
        assert out is None  # return_outputs=False
        first = part.fc.weight.grad.numpy().copy()
        part.fc.weight.grad = None
        # the same batch pre-split (torch's arg_mbs / kwarg_mbs / target_mbs)
        kwarg_mbs = [{"row_scale": tessel.from_numpy(scale_np[2 * i:2 * i + 2]), "shift": 0.25} for i in range(4)]
        if world.rank == 0:
            sched.step(arg_mbs=[(tessel.from_numpy(x_np[2 * i:2 * i + 2]),) for i in range(4)], kwarg_mbs=kwarg_mbs,
                       loss_kwargs={"weight": 3.0})
        else:
            sched.step(target_mbs=[tessel.from_numpy(y_np[2 * i:2 * i + 2]) for i in range(4)], kwarg_mbs=kwarg_mbs,
                       loss_kwargs={"weight": 3.0})
        second = part.fc.weight.grad.numpy()
        with pytest.raises(ValueError, match="either whole-batch inputs or pre-split ones"):
            sched.step(tessel.from_numpy(x_np), arg_mbs=[])
        got[world.rank] = (loss, first, second)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert_steps_match_one_rank(got, ref, ref_grads)


class FirstPart(nn.Module):
    """A first stage with two tensor inputs and a number, as torch's step(tokens, positions, ...) feeds it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, pos, scale):
        return F.tanh(self.fc(x) + pos * scale)


class LastPart(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, h):  # one input: the first stage's further positional inputs must not reach it
        return self.fc(h)


def test_further_positional_inputs_go_to_the_first_stage_per_microbatch_as_torch():
    rng = np.random.default_rng(9)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    pos_np = rng.standard_normal((8, 8)).astype(np.float32)
    tessel.manual_seed(0)
    first, last = FirstPart(), LastPart()
    ref = mse(last(first(tessel.from_numpy(x_np), tessel.from_numpy(pos_np), 0.5)), tessel.from_numpy(y_np))
    ref.backward()
    ref_grads = [first.fc.weight.grad.numpy(), last.fc.weight.grad.numpy()]
    got = {}

    def rank_fn(world):
        part, sched = two_stage_1f1b(world, lambda: [FirstPart(), LastPart()], mse)
        if world.rank == 0:
            _, loss = stepped(sched, tessel.from_numpy(x_np), tessel.from_numpy(pos_np), 0.5)
        else:
            _, loss = stepped(sched, target=tessel.from_numpy(y_np))
        whole = part.fc.weight.grad.numpy().copy()
        part.fc.weight.grad = None
        # pre-split: each microbatch of arg_mbs is the first stage's whole argument tuple
        if world.rank == 0:
            sched.step(arg_mbs=[(tessel.from_numpy(x_np[2 * i:2 * i + 2]), tessel.from_numpy(pos_np[2 * i:2 * i + 2]),
                                 0.5) for i in range(4)])
            with pytest.raises(ValueError, match="same number of inputs"):
                sched.step(arg_mbs=[(tessel.from_numpy(x_np[:2]),)] * 3 + [(tessel.from_numpy(x_np[:2]), 0.5)])
        else:
            sched.step(target_mbs=[tessel.from_numpy(y_np[2 * i:2 * i + 2]) for i in range(4)])
        got[world.rank] = (loss, whole, part.fc.weight.grad.numpy())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert_steps_match_one_rank(got, ref, ref_grads)


def test_input_args_and_output_args_are_checked_against_the_inferred_shapes():
    # torch's tutorial passes one microbatch's example input (and output) to PipelineStage; tessel infers
    # the shapes itself and holds the examples to them
    rng = np.random.default_rng(3)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    got = {}

    def rank_fn(world, out_rows, extra_output=False):
        dist.init_process_group()
        parts = make_parts(2)
        example = tessel.zeros(2, 8)  # a microbatch: 8 rows in 4 microbatches
        out = (tessel.zeros(out_rows, 8), tessel.zeros(2)) if extra_output else tessel.zeros(out_rows, 8)
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu", input_args=(example,),
                                 output_args=out if world.rank == 1 else example)
        sched = pp.Schedule1F1B(stage, n_microbatches=4, loss_fn=mse)
        try:
            got[world.rank] = sched.step(tessel.from_numpy(x_np)) if world.rank == 0 else \
                sched.step(target=tessel.from_numpy(y_np))
        finally:
            dist.destroy_process_group()

    tessel.run_ranks(2, lambda w: rank_fn(w, 2))
    assert got[0] is None and got[1] is not None
    with pytest.raises(ValueError, match=r"pipeline stage 1: outputs \[2, 8\] for microbatch 0 but was built "
                                         r"for output \[3, 8\] \(output_args\)"):
        tessel.run_ranks(2, lambda w: rank_fn(w, 3))
    with pytest.raises(ValueError, match=r"pipeline stage 1: outputs \[2, 8\] for microbatch 0 but was built "
                                         r"for output \[2, 8\], \[2\] \(output_args\)"):
        tessel.run_ranks(2, lambda w: rank_fn(w, 2, extra_output=True))


def test_scale_grads_false_sums_the_microbatches_gradients_as_torch():
    # torchtitan builds its schedules with scale_grads=False and scales the loss itself: each microbatch's
    # loss is backpropagated unscaled, so the gradients are the sum over the 4 microbatches, 4x the default
    # (the full batch's mean); the reported loss stays the full batch's.
    rng = np.random.default_rng(5)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        out = []
        for scale in (True, False):
            parts = make_parts(2)
            stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
            sched = pp.Schedule1F1B(stage, n_microbatches=4, loss_fn=mse, scale_grads=scale)
            _, loss = stepped(sched, tessel.from_numpy(x_np) if world.rank == 0 else None,
                              target=tessel.from_numpy(y_np) if world.rank == 1 else None)
            out.append((loss, [p.grad.numpy().copy() for p in parts[world.rank].parameters()]))
        got[world.rank] = out
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        (loss_scaled, scaled), (loss_summed, summed) = got[r]
        assert loss_scaled == loss_summed  # None on rank 0
        for a, b in zip(scaled, summed):
            np.testing.assert_allclose(b, 4 * a, rtol=1e-6, atol=1e-7)
    assert got[1][0][0] is not None



class TuplePart(nn.Module):
    """A stage whose boundary carries three tensors, as models that pass (hidden, gate, positions) between
    stages: two floating ones (gradients flow back through both) and int64 positions (forward only), which
    the next stage embeds. The last stage returns (out, aux) and the loss takes both."""

    def __init__(self, first, last):
        super().__init__()
        self.first, self.last = first, last
        self.fc, self.gate_fc, self.emb = nn.Linear(8, 8), nn.Linear(8, 8), nn.Embedding(4, 8)

    def forward(self, h, g=None, pos=None):
        if self.first:
            return F.tanh(self.fc(h)), F.sigmoid(self.gate_fc(h)), (h[:, 0] > 0).long() + (h[:, 1] > 0).long()
        mixed = self.fc(h) * g + self.emb(pos)
        if self.last:
            return mixed, (self.gate_fc(h) ** 2).mean(dim=1)
        return F.tanh(mixed), F.sigmoid(self.gate_fc(h)), pos


def tuple_loss(outputs, target):
    out, aux = outputs
    return mse(out, target) + 0.1 * aux.mean()


def make_tuple_parts(n):
    tessel.manual_seed(0)
    return [TuplePart(i == 0, i == n - 1) for i in range(n)]


def tuple_grads(part):
    names = ["fc.weight", "gate_fc.weight"] + ([] if part.first else ["emb.weight"])
    return {name: part.get_parameter(name).grad.numpy().copy() for name in names}


@pytest.mark.parametrize("schedule,stages_per_rank,backend", [(pp.Schedule1F1B, 1, None),
                                                              (pp.ScheduleZBVZeroBubble, 2, None),
                                                              (pp.Schedule1F1B, 1, "gloo")])
def test_stage_modules_passing_several_tensors_match_one_rank(schedule, stages_per_rank, backend):
    # torch's stages send each tensor of a tuple output and take them as positional inputs; ZBV adds the
    # split backward (I, then W) and the local hand-off of the V's bottom; gloo checks each transfer's dtype
    # and size against its receive (the int64 positions among float32 tensors, each on its own tag)
    rng = np.random.default_rng(11)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    n = 2 * stages_per_rank
    parts = make_tuple_parts(n)
    h = (tessel.from_numpy(x_np),)
    for part in parts:
        h = part(*h)
    ref = tuple_loss(h, tessel.from_numpy(y_np))
    ref.backward()
    ref_grads = [tuple_grads(p) for p in parts]
    assert ref_grads[1]["emb.weight"].any()  # the int64 positions do reach the next stage's embedding
    got = {}

    def rank_fn(world):
        dist.init_process_group(*([backend] if backend else []))
        mine_parts = make_tuple_parts(n)
        mine, sched = schedule_over(schedule, mine_parts, world.rank, loss_fn=tuple_loss)
        out, loss = stepped(sched, tessel.from_numpy(x_np) if 0 in mine else None,
                            target=tessel.from_numpy(y_np) if n - 1 in mine else None)
        if out is not None:  # the last stage's (out, aux), each merged over the microbatches
            assert isinstance(out, tuple) and len(out) == 2
            for got_t, want_t in zip(out, h):
                np.testing.assert_allclose(got_t.numpy(), want_t.detach().numpy(), rtol=1e-5, atol=1e-6)
        got[world.rank] = (loss, {i: tuple_grads(mine_parts[i]) for i in mine})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    grads = merged_over_ranks(got, ref.item(), abs=1e-6)
    assert sorted(grads) == list(range(n))
    for i in range(n):
        for name, want in ref_grads[i].items():
            np.testing.assert_allclose(grads[i][name], want, rtol=1e-5, atol=1e-6, err_msg="stage %d %s" % (i, name))


class DeferredLinear(tessel.autograd.Function):
    """y = x·wᵀ whose backward returns only dx and leaves (x, dy) in `stash` for a weight pass by hand: the
    kind of module torch's dw_builder serves (zero-bubble's W)."""

    @staticmethod
    def forward(ctx, x, weight, stash):
        ctx.save_for_backward(x, weight)
        ctx.stash = stash
        return x @ weight.t()

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        ctx.stash.append((x, dy))
        return dy @ weight, None, None


class DwPart(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)
        self.stash, self.runs = [], 0

    def forward(self, x):
        return F.tanh(DeferredLinear.apply(x, self.fc.weight, self.stash))

    def dw_builder(self):
        pending = list(self.stash)  # this microbatch's (x, dy): its backward just ran
        self.stash.clear()

        def run():
            self.runs += 1
            for x, dy in pending:
                g = dy.t() @ x
                self.fc.weight.grad = g if self.fc.weight.grad is None else self.fc.weight.grad + g
        return run


@pytest.mark.parametrize("schedule,stages_per_rank", [(pp.Schedule1F1B, 1), (pp.ScheduleZBVZeroBubble, 2)])
def test_dw_builder_runs_the_modules_deferred_weight_pass_as_torch(schedule, stages_per_rank):
    # B (and I) run the module's own backward, which leaves fc.weight.grad alone; the runner dw_builder
    # returns after it computes the weight gradient (at W under ZBV, right after B under 1F1B)
    rng = np.random.default_rng(12)
    x_np, y_np = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    n = 2 * stages_per_rank
    tessel.manual_seed(0)
    ref_parts = [nn.Linear(8, 8, bias=False) for _ in range(n)]
    h = tessel.from_numpy(x_np)
    for lin in ref_parts:
        h = F.tanh(lin(h))
    ref = mse(h, tessel.from_numpy(y_np))
    ref.backward()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        parts = [DwPart() for _ in range(n)]
        mine, sched = schedule_over(schedule, parts, world.rank,
                                    stage_kwargs=lambda i: {"dw_builder": parts[i].dw_builder})
        _, loss = stepped(sched, tessel.from_numpy(x_np) if 0 in mine else None,
                          target=tessel.from_numpy(y_np) if n - 1 in mine else None)
        got[world.rank] = (loss, {i: (parts[i].fc.weight.grad.numpy(), parts[i].runs, len(parts[i].stash))
                                  for i in mine})
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    stages = merged_over_ranks(got, ref.item(), abs=1e-6)
    for i in range(n):
        grad, runs, left = stages[i]
        assert (runs, left) == (4, 0)  # one runner per microbatch, each run once; nothing left behind
        np.testing.assert_allclose(grad, ref_parts[i].weight.grad.numpy(), rtol=1e-5, atol=1e-6)
