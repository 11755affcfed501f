"""torch.distributed.pipelining behaviours found by running the same pipeline scripts under torch 2.15 and
tessel on gloo ranks: the shape handshake leaves module buffers as they were, step() under no_grad fails
before any communication, a schedule without loss_fn steps forward only, and miscounted pre-split
microbatches are torch's ValueError; torch 2.15's forward contexts (PipelineStageInfo), forward-only schedule and
activation liveness analysis. Expected values: a one-rank run of the same modules, and lifetimes and slots
worked out by hand from the schedules' programs."""
import contextlib
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed import pipelining as pp


def _parts():
    tessel.manual_seed(0)
    first = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))  # its forward updates running statistics
    second = nn.Linear(3, 2)
    return first, second


def test_the_shape_handshake_leaves_batch_norm_statistics_as_one_rank_gets_them():
    x_np = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    first, second = _parts()
    for mb in np.split(x_np, 2):  # what the pipeline's two microbatches do to the first stage's statistics
        first(tessel.tensor(mb))
    want = (first[1].running_mean.numpy().copy(), first[1].num_batches_tracked.item())
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = _parts()
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        sched = pp.Schedule1F1B(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
        sched.step(tessel.tensor(x_np) if world.rank == 0 else None,
                   target=tessel.zeros(8, 2) if world.rank == 1 else None)
        if world.rank == 0:
            bn = parts[0][1]
            got["stats"] = (bn.running_mean.numpy().copy(), bn.num_batches_tracked.item())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    np.testing.assert_allclose(got["stats"][0], want[0], rtol=1e-6)
    assert got["stats"][1] == want[1] == 2  # the handshake's forward made it 3


def test_step_errors_and_forward_only_steps_as_torch():
    x_np = np.ones((4, 3), dtype=np.float32)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = _parts()
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        sched = pp.ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
        with tessel.no_grad():  # before any communication: the group stays usable afterwards
            with pytest.raises(RuntimeError, match="requires gradients to be enabled.*Please call eval"):
                sched.step(tessel.tensor(x_np) if world.rank == 0 else None)
        with pytest.raises(ValueError, match="Expecting 2 (arg|target)_mbs but got 3"):
            if world.rank == 0:
                sched.step(arg_mbs=[tessel.ones(1, 3)] * 3)
            else:
                sched.step(target_mbs=[tessel.zeros(1, 2)] * 3)
        plain = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        forward_only = pp.Schedule1F1B(plain, n_microbatches=2)  # no loss_fn: torch's inference step
        out = forward_only.step(tessel.tensor(x_np) if world.rank == 0 else None)
        got[world.rank] = None if out is None else out.detach().numpy()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    first, second = _parts()
    want = second(first(tessel.tensor(x_np[:2]))).detach().numpy()  # microbatch 0, modules in training mode
    assert got[0] is None and got[1].shape == (4, 2)
    np.testing.assert_allclose(got[1][:2], want, rtol=1e-5, atol=1e-6)


def test_losses_entries_are_loss_fns_own_tensors():
    # torch appends loss_fn's tensors (their dtype and graph); they were float32 copies of the values
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        parts = (nn.Linear(3, 3).double(), nn.Linear(3, 2).double())
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        sched = pp.ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
        losses = []
        sched.step(tessel.ones(4, 3, dtype=tessel.float64) if world.rank == 0 else None,
                   target=tessel.zeros(4, 2, dtype=tessel.float64) if world.rank == 1 else None, losses=losses)
        got[world.rank] = [(t.dtype, t.requires_grad) for t in losses]
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0] == [] and got[1] == [(tessel.float64, True)] * 2


def test_forward_contexts_wrap_every_stage_forward_with_its_stage_and_microbatch():
    # torch 2.15's PipelineStage.register_forward_context: a context per forward, (stage, microbatch) given;
    # the shape handshake before the first step is torch's metadata probe (the sequence is torch's, run on gloo)
    x_np = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = _parts()
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        seen = []

        @contextlib.contextmanager
        def record(info):
            seen.append(("enter", info.stage_index, info.microbatch_index, info.is_metadata_inference))
            yield
            seen.append(("exit", info.stage_index, info.microbatch_index))

        handle = stage.register_forward_context(record)
        with pytest.raises(RuntimeError, match="already registered; remove its handle"):
            stage.register_forward_context(record)
        sched = pp.ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
        x, y = (tessel.tensor(x_np), None) if world.rank == 0 else (None, tessel.zeros(4, 2))
        sched.step(x, target=y)
        seen.append("step 2")
        sched.step(x, target=y)
        handle.remove()
        sched.step(x, target=y)  # removed: no further entries
        got[world.rank] = seen
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        step = [("enter", r, 0, False), ("exit", r, 0), ("enter", r, 1, False), ("exit", r, 1)]
        assert got[r] == [("enter", r, 0, True), ("exit", r, 0)] + step + ["step 2"] + step


def test_a_forward_context_that_swallows_the_stages_error_is_refused():
    def rank_fn(world):
        dist.init_process_group()
        stage = pp.PipelineStage(nn.Linear(3, 3), 0, 1, "cpu")
        stage.register_forward_context(lambda info: contextlib.suppress(Exception))
        sched = pp.ScheduleGPipe(stage, n_microbatches=1, loss_fn=lambda out, y: out.sum())
        with pytest.raises(RuntimeError, match="forward contexts must not suppress exceptions"):
            sched.step(tessel.ones(2, 4), target=tessel.zeros(2, 3))  # 4 features into Linear(3, 3) raise
        dist.destroy_process_group()

    tessel.run_ranks(1, rank_fn)


def test_pipeline_stage_info_is_a_frozen_keyword_only_record():
    info = pp.PipelineStageInfo(stage_index=1, microbatch_index=2)
    assert (info.stage_index, info.microbatch_index, info.is_metadata_inference) == (1, 2, False)
    assert info == pp.stage.PipelineStageInfo(stage_index=1, microbatch_index=2)
    with pytest.raises(TypeError):
        pp.PipelineStageInfo(1, 2)
    with pytest.raises(AttributeError):
        info.stage_index = 3


def test_forward_only_schedule_runs_the_forwards_and_refuses_losses():
    x_np = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = _parts()
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        sched = pp.schedules._ScheduleForwardOnly(stage, n_microbatches=2, loss_fn=lambda out, y: out.sum())
        out = sched.step(tessel.tensor(x_np) if world.rank == 0 else None)
        got[world.rank] = None if out is None else out.detach().numpy()
        with pytest.raises(RuntimeError, match="Forward-only schedule does not support loss computation"):
            sched.step(tessel.tensor(x_np) if world.rank == 0 else None, losses=[])  # before any communication
        got["grads"] = all(p.grad is None for p in parts[world.rank].parameters())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    first, second = _parts()
    want = np.concatenate([second(first(tessel.tensor(mb))).detach().numpy() for mb in np.split(x_np, 2)])
    assert got[0] is None and got["grads"]
    np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-6)


def _two_stages_one_rank(schedule, n_microbatches):
    """A schedule over stages 0 and 1, both on the one rank of a single-process group: its program is data."""
    holder = {}

    def rank_fn(world):
        dist.init_process_group()
        stages = [pp.PipelineStage(nn.Linear(2, 2), i, 2, "cpu") for i in (0, 1)]
        holder["sched"] = schedule(stages, n_microbatches=n_microbatches, loss_fn=lambda out, y: out.sum())
        dist.destroy_process_group()

    tessel.run_ranks(1, rank_fn)
    return holder["sched"]


def test_activation_liveness_from_the_schedules_program():
    sched = _two_stages_one_rank(pp.ScheduleInterleaved1F1B, 2)
    assert [str(a) for a in sched.pipeline_order[0]] == ["0F0", "1F0", "1B0", "0F1", "0B0", "1F1", "1B1", "0B1"]
    live = pp.analyze_pipeline_activation_liveness(sched, pp_rank=0, stage_indices=[0, 1],
                                                   granularity="stage_microbatch")
    # stage 0: microbatch 0 lives 0..4, microbatch 1 3..7 (overlap: two slots); stage 1: 1..2 and 5..6 (one
    # slot, reused; 1F0 takes slot 1 while 0F0's slot 0 is held)
    assert {k: live.get_activation_lifetime(*k) for k in live.slot_by_stage_and_microbatch} == {
        (0, 0): (0, 4), (0, 1): (3, 7), (1, 0): (1, 2), (1, 1): (5, 6)}
    assert dict(live.slot_by_stage_and_microbatch) == {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 0}
    assert live.num_slots == 2 and live.slot_for(1, 1) == 0
    whole = pp.analyze_pipeline_activation_liveness(sched, pp_rank=0, stage_indices=[0, 1], granularity="microbatch")
    assert whole.get_activation_lifetime(1, 0) == (0, 4) and whole.get_activation_lifetime(0, 1) == (3, 7)
    assert dict(whole.slot_by_stage_and_microbatch) == {(0, 0): 0, (0, 1): 1, (1, 0): 0, (1, 1): 1}
    with pytest.raises(ValueError, match="No activation slot exists for stage 7, microbatch 0"):
        live.slot_for(7, 0)
    for kwargs, message in ((dict(stage_indices=[]), "must not be empty"), (dict(stage_indices=[0, 0]), "unique"),
                            (dict(pp_rank=3), "Rank 3 is not present"), (dict(granularity="x"), "granularity: x"),
                            (dict(stage_indices=[5]), r"missing=\[\(5, 0\), \(5, 1\)\]")):
        args = {**dict(pp_rank=0, stage_indices=[0], granularity="microbatch"), **kwargs}
        with pytest.raises(ValueError, match=message):
            pp.analyze_pipeline_activation_liveness(sched, **args)


def test_activation_liveness_ends_at_the_weight_backward_under_zero_bubble():
    sched = _two_stages_one_rank(pp.ScheduleInterleavedZeroBubble, 2)
    order = [str(a) for a in sched.pipeline_order[0]]
    live = pp.analyze_pipeline_activation_liveness(sched, pp_rank=0, stage_indices=[0, 1],
                                                   granularity="stage_microbatch")
    for (stage, mb), (start, end) in ((k, live.get_activation_lifetime(*k)) for k in live.slot_by_stage_and_microbatch):
        assert order[start] == "%dF%d" % (stage, mb) and order[end] == "%dW%d" % (stage, mb)
        assert "%dI%d" % (stage, mb) in order[start:end]  # the input backward alone does not end it


def test_eval_without_a_loss_fn_returns_the_outputs_and_torchtitans_schedule_names_import():
    # eval() on a schedule built without loss_fn asked the last stage's rank for targets (torch returns the merged
    # outputs), and a rank that caught that left its peer waiting in eval; torchtitan's pipeline_parallel.py imports
    # OVERLAP_F_B and the action vocabulary from schedules at module level, and asks get_schedule_class for the bases
    from tessel.distributed.pipelining import schedules
    from tessel.distributed.pipelining.schedules import OVERLAP_F_B, _Action, _ComputationType  # noqa: F401
    assert schedules.get_schedule_class("PipelineScheduleMulti") is pp.PipelineScheduleMulti
    assert schedules.get_schedule_class("pipelineschedulesingle") is pp.PipelineScheduleSingle
    assert repr(_Action(2, schedules.FULL_BACKWARD, 3)) == "2B3" and OVERLAP_F_B.value == "OVERLAP_F_B"
    x_np = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    first, second = _parts()
    first.eval()
    want = second(first(tessel.tensor(x_np))).detach().numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        parts = _parts()
        parts[0].eval()
        stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
        assert (stage.group_rank, stage.group_size, str(stage.device)) == (world.rank, 2, "cpu")
        sched = pp.Schedule1F1B(stage, n_microbatches=2)
        out = sched.eval(tessel.tensor(x_np) if world.rank == 0 else None)
        got[world.rank] = None if out is None else out.detach().numpy()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0] is None
    np.testing.assert_allclose(got[1], want, rtol=1e-6, atol=1e-7)


def test_scale_grads_set_after_construction_is_what_the_next_step_uses():
    # torch reads schedule.scale_grads at each step; tessel's executor took it at construction and ignored the set
    x_np, y_np = np.ones((4, 3), dtype=np.float32), np.zeros((4, 2), dtype=np.float32)
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        grads = []
        for flip in (False, True):
            parts = _parts()
            stage = pp.PipelineStage(parts[world.rank], world.rank, 2, "cpu")
            sched = pp.ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
            if flip:
                sched.scale_grads = False
            assert sched.scale_grads is not flip
            sched.step(tessel.tensor(x_np) if world.rank == 0 else None,
                       target=tessel.tensor(y_np) if world.rank == 1 else None)
            grads.append(parts[world.rank][-1].weight.grad.numpy().copy() if world.rank == 0 else
                         parts[1].weight.grad.numpy().copy())
        got[world.rank] = grads
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        np.testing.assert_allclose(got[r][1], 2 * got[r][0], rtol=1e-6)


class _Failing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        raise ValueError("boom in the stage")


def test_a_stage_modules_exception_is_torchs_runtime_error_naming_the_stage_and_the_cause():
    # torch wraps a stage forward's error in RuntimeError("[Stage i] failed to run forward: ...") from it, so a
    # port's `except RuntimeError` catches it; the original ValueError passed through
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        first, _ = _parts()
        stage = pp.PipelineStage(first if world.rank == 0 else _Failing(), world.rank, 2, "cpu")
        sched = pp.ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: (out - y).square().mean())
        try:
            sched.step(tessel.ones(4, 3) if world.rank == 0 else None,
                       target=tessel.zeros(4, 2) if world.rank == 1 else None)
        except RuntimeError as e:
            got[world.rank] = (type(e).__name__, str(e), type(e.__cause__).__name__)

    tessel.run_ranks(2, rank_fn)
    kind, text, cause = got[1]
    assert (kind, cause) == ("RuntimeError", "ValueError"), got[1]
    assert text.startswith("[Stage 1] failed to run forward:\nargs: (Tensor(shape=[2, 3], dtype=float32))")
    assert text.endswith("caused by ValueError: boom in the stage")  # (the text peers and the launcher report)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
