"""torch.distributed.pipelining rules found by running the same 2-rank scripts under torch 2.15 (gloo) and tessel:
tensors between stages need not keep the batch in dim 0 (a flattened [B·T, H] activation, a side tensor such as a
rotary table, a time-major [T, B, H] one), targets need not have the batch's rows (flattened token labels), the
last stage's module output reaches loss_fn and step() in the container the module returned ((out,) stays a
1-tuple, a list a list), and PipelineStage / the schedules check their arguments with torch's exception types and
messages. Expected values: the same modules and microbatches run on one rank."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed import pipelining as pp

RNG = np.random.default_rng(5)
X3 = RNG.standard_normal((8, 3, 4)).astype(np.float32)  # [batch, time, features]
Y3 = RNG.standard_normal((8, 3, 4)).astype(np.float32)


def mse(out, y):
    return ((out - y) ** 2).mean()


class First(nn.Module):
    """Linear + tanh on [B, T, 4], returning the activation laid out as `mode` says (and a side tensor)."""

    def __init__(self, mode):
        super().__init__()
        tessel.manual_seed(0)
        self.fc, self.mode = nn.Linear(4, 4), mode

    def forward(self, x):
        h = tessel.tanh(self.fc(x))
        if self.mode == "flat":
            return h.reshape(-1, 4)  # [B·T, 4]
        if self.mode == "time_major":
            return h.transpose(0, 1).contiguous()  # [T, B, 4]
        return h, tessel.arange(12.0).reshape(3, 4)  # a side tensor whose dim 0 is not the batch


class Second(nn.Module):
    def __init__(self, mode):
        super().__init__()
        tessel.manual_seed(1)
        self.fc, self.mode = nn.Linear(4, 4), mode

    def forward(self, h, *side):
        if self.mode == "flat":
            h = h.reshape(-1, 3, 4)
        elif self.mode == "time_major":
            h = h.transpose(0, 1)
        else:
            h = h + side[0].sum() * 0.01
        return self.fc(h)


def one_rank(mode, n_microbatches):
    """Per-microbatch losses and the two weight gradients of the same model on one rank (scale_grads: the mean)."""
    first, second = First(mode), Second(mode)
    losses = []
    for x, y in zip(np.split(X3, n_microbatches), np.split(Y3, n_microbatches)):
        out = first(tessel.tensor(x))
        loss = mse(second(*(out if isinstance(out, tuple) else (out,))), tessel.tensor(y))
        (loss / n_microbatches).backward()
        losses.append(loss.item())
    return losses, first.fc.weight.grad.numpy(), second.fc.weight.grad.numpy()


def two_ranks(mode, n_microbatches):
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        part = First(mode) if world.rank == 0 else Second(mode)
        sched = pp.Schedule1F1B(pp.PipelineStage(part, world.rank, 2, "cpu"), n_microbatches, loss_fn=mse)
        losses = []
        if world.rank == 0:
            sched.step(tessel.tensor(X3))
        else:
            sched.step(target=tessel.tensor(Y3), losses=losses)
        got[world.rank] = ([v.item() for v in losses], part.fc.weight.grad.numpy())
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    return got


@pytest.mark.parametrize("mode", ["flat", "time_major", "side"])
def test_stage_boundaries_carry_tensors_whose_dim_0_is_not_the_batch(mode):
    # tessel refused these at the handshake ("output [6, 4] does not keep the batch dim 0 of its input [2, 3, 4]");
    # torch's static shapes carry them (its time-major case fails on gloo's contiguity check, tessel's runs)
    losses, g_first, g_second = one_rank(mode, 4)
    got = two_ranks(mode, 4)
    np.testing.assert_allclose(got[1][0], losses, rtol=1e-5)
    np.testing.assert_allclose(got[0][1], g_first, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got[1][1], g_second, rtol=1e-4, atol=1e-7)


def test_flattened_token_labels_split_with_the_microbatches():
    # labels [B·T] with the batch [B, T]: the last rank sized its receives from the labels' rows (a p2p mismatch)
    tokens = RNG.integers(0, 10, (8, 3))
    want_losses = []
    tessel.manual_seed(0)
    embed = nn.Embedding(10, 4)
    tessel.manual_seed(1)
    head = nn.Linear(4, 10)

    def ce(out, y):
        return nn.functional.cross_entropy(out.reshape(-1, 10), y)
    for tok in np.split(tokens, 4):
        want_losses.append(ce(head(embed(tessel.tensor(tok))), tessel.tensor(tok.reshape(-1))).item())
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(world.rank)
        part = nn.Embedding(10, 4) if world.rank == 0 else nn.Linear(4, 10)
        sched = pp.ScheduleGPipe(pp.PipelineStage(part, world.rank, 2, "cpu"), 4, loss_fn=ce)
        losses = []
        if world.rank == 0:
            sched.step(tessel.tensor(tokens))
        else:
            sched.step(target=tessel.tensor(tokens.reshape(-1)), losses=losses)
        got[world.rank] = [v.item() for v in losses]
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    np.testing.assert_allclose(got[1], want_losses, rtol=1e-5)
    assert got[0] == []


class Last(nn.Module):
    def __init__(self, container):
        super().__init__()
        tessel.manual_seed(1)
        self.fc, self.container = nn.Linear(4, 4), container

    def forward(self, x):
        y = tessel.tanh(self.fc(x))
        return (y,) if self.container is tuple else [y, y * 2]


@pytest.mark.parametrize("container", [tuple, list])
def test_loss_fn_and_step_get_the_last_modules_own_container(container):
    # a 1-tuple reached loss_fn as a bare tensor, so loss_fn's o[0] took its first row: wrong losses, no error
    x, y = RNG.standard_normal((8, 4)).astype(np.float32), RNG.standard_normal((8, 4)).astype(np.float32)

    def loss(out, target):
        assert type(out) is container
        return ((out[0] - target) ** 2).mean() + (0.0 if len(out) == 1 else (out[1] ** 2).mean())
    tessel.manual_seed(0)
    first = nn.Linear(4, 4)
    last = Last(container)
    want = [loss(last(first(tessel.tensor(a))), tessel.tensor(b)).item()
            for a, b in zip(np.split(x, 4), np.split(y, 4))]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        tessel.manual_seed(0)
        part = nn.Linear(4, 4) if world.rank == 0 else Last(container)
        sched = pp.Schedule1F1B(pp.PipelineStage(part, world.rank, 2, "cpu"), 4, loss_fn=loss)
        losses = ["kept"]
        if world.rank == 0:
            out = sched.step(tessel.tensor(x), losses=losses)  # not the last stage's rank: the list is left alone
        else:
            out = sched.step(target=tessel.tensor(y), losses=losses)
        got[world.rank] = ([v if isinstance(v, str) else v.item() for v in losses], type(out),
                           None if out is None else [o.shape[0] for o in out])
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert got[0] == (["kept"], type(None), None)
    np.testing.assert_allclose(got[1][0], want, rtol=1e-5)
    assert got[1][1] is container and got[1][2] == [8] * (1 if container is tuple else 2)


def test_stage_and_schedule_arguments_are_checked_as_torch():
    got = {}

    def attempt(fn):
        try:
            fn()
            return "ok"
        except Exception as e:  # noqa: BLE001 (the type is what is compared)
            return type(e).__name__, str(e)

    def rank_fn(world):
        dist.init_process_group()
        r = world.rank
        out = {}
        out["index"] = attempt(lambda: pp.PipelineStage(nn.Linear(2, 2), 2, 2, "cpu"))
        out["group"] = attempt(lambda: pp.PipelineStage(nn.Linear(2, 2), 0, 1, "cpu"))
        stage = pp.PipelineStage(nn.Linear(2, 2), r, 2, "cpu")
        out["attrs"] = (stage.group, stage.has_backward, stage.group_size)
        out["1f1b"] = attempt(lambda: pp.Schedule1F1B(stage, 1, loss_fn=mse))
        out["dualpipev"] = attempt(lambda: pp.ScheduleDualPipeV(
            [pp.PipelineStage(nn.Linear(2, 2), s, 4, "cpu") for s in ((0, 3) if r == 0 else (1, 2))], 2,
            loss_fn=mse))
        sched = pp.ScheduleGPipe(stage, 2, loss_fn=mse)
        sched.step(tessel.ones(4, 2)) if r == 0 else sched.step(target=tessel.ones(4, 2))
        out["after step"] = stage.has_backward
        forward_only = pp.ScheduleGPipe(pp.PipelineStage(nn.Linear(2, 2), r, 2, "cpu"), 2)
        out["no loss_fn"] = attempt(lambda: forward_only.step(tessel.ones(4, 2)) if r == 0 else
                                    forward_only.step(target=tessel.ones(4, 2), losses=[]))
        got[r] = out
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        assert got[r]["index"] == ("ValueError", "Stage index 2 is out of range of 2")
        assert got[r]["group"] == ("RuntimeError", "Pipeline group size 2 cannot be larger than number of stages 1")
        assert got[r]["attrs"] == (None, False, 2)  # the group as given (torch's attribute)
        assert got[r]["1f1b"] == ("ValueError", "Number of microbatches (1) must be greater than or equal to the "
                                                "number of stages (2).")
        assert got[r]["dualpipev"] == ("ValueError", "DualPipeV requires at least as many microbatches as stages, "
                                                     "but got 2 microbatches and 4 stages.")
        assert got[r]["after step"] is True
    assert got[0]["no loss_fn"] == "ok"
    assert got[1]["no loss_fn"] == ("RuntimeError", "Expecting 2 losses but got 0")


def test_a_stage_returning_a_dict_is_torchs_metadata_error():
    from tessel.distributed.pipelining._utils import PipeliningMetadataError

    class Dict(nn.Module):
        def forward(self, x):
            return {"h": x}
    got = {}

    def rank_fn(world):  # one rank, one stage: the check is the stage's own, before any communication
        dist.init_process_group()
        sched = pp.ScheduleGPipe(pp.PipelineStage(Dict(), 0, 1, "cpu"), 2, loss_fn=mse)
        with pytest.raises(PipeliningMetadataError, match="Stage args must be a tensor, tuple, or list of tensors, "
                                                          "got dict."):
            sched.step(tessel.ones(4, 2), target=tessel.ones(4, 2))
        got[0] = issubclass(PipeliningMetadataError, RuntimeError)
        dist.destroy_process_group()

    tessel.run_ranks(1, rank_fn)
    assert got == {0: True}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
