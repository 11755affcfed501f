"""torch.distributed.pipelining behaviours found by running the same pipeline scripts under torch 2.15 and
tessel on gloo ranks: the shape handshake leaves module buffers as they were, step() under no_grad fails
before any communication, a schedule without loss_fn steps forward only, and miscounted pre-split
microbatches are torch's ValueError. Expected values: a one-rank run of the same modules."""
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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
