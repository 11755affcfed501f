"""The module paths torch scripts import from besides the main ones (torchtitan's `record` and schedules, the
pre-2.4 `_tensor` and `_composable.fsdp`, `placement_types`, `distributed_c10d`), each holding the objects that
act (the same classes and functions, checked by identity and use), tessel-run reporting a rank's exception
recorded by `record` as the job's root cause, torch 2.6's split_group, DCP's format_utils (a 2-rank sharded
checkpoint to one torch.save file of full tensors and back), and sends and receives that leave the group's
collectives free to run while they wait for their peer (threads and gloo)."""
import datetime
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from dcp_testing import dotted


def test_record_writes_torchs_error_file_and_reraises(tmp_path, monkeypatch):
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    @record
    def fails(x):
        raise ValueError("bad input %d" % x)

    with pytest.raises(ValueError, match="bad input 3"):
        fails(3)
    data = json.loads(path.read_text())
    message = data["message"]
    assert message["message"] == "ValueError: bad input 3"
    assert "in fails" in message["extraInfo"]["py_callstack"]
    assert message["extraInfo"]["py_callstack"].rstrip().endswith("ValueError: bad input 3")
    assert int(message["extraInfo"]["timestamp"]) > 1.7e9
    path.unlink()

    assert record(lambda: 5)() == 5
    assert record(lambda: sys.exit(0))() is None  # a clean exit returns, as torch's
    with pytest.raises(SystemExit):
        record(lambda: sys.exit(2))()
    assert not path.exists()  # neither wrote an error file
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    with pytest.raises(KeyError):  # no file to write: the exception still propagates
        record(lambda: {}["missing"])()
    assert issubclass(ChildFailedError, Exception)


def test_tessel_run_prints_the_first_failed_ranks_recorded_exception(tmp_path):
    runfiles = os.path.join(os.environ["TEST_SRCDIR"], "tessel")
    launcher = os.path.join(runfiles, "comm", "tessel_run")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, time
        from tessel.distributed.elastic.multiprocessing.errors import record

        def load_shard(rank):
            raise FileNotFoundError("shard %d is missing" % rank)

        @record
        def main():
            rank = int(os.environ["RANK"])
            if rank == 1:
                load_shard(rank)
            time.sleep(30)

        main()
    """))
    errors = tmp_path / "tmp"
    errors.mkdir()
    env = dict(os.environ, PYTHONPATH=os.path.join(runfiles, "bindings"), TMPDIR=str(errors))
    out = subprocess.run([launcher, "--nproc-per-node", "2", "--master-port", "0", sys.executable, str(script)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    start = lines.index("[tessel-run] root cause (first observed failure): rank 1 (local_rank 1), exit code 1")
    assert lines[start + 1] == "[tessel-run]   FileNotFoundError: shard 1 is missing"
    assert lines[start + 2] == "[tessel-run]   Traceback (most recent call last):"
    assert any("in load_shard" in l for l in lines[start:]), out.stderr
    assert list(errors.iterdir()) == []  # the launcher's error-file directory is gone


def test_torchs_other_module_paths_hold_the_same_objects():
    import tessel.distributed.fsdp as fsdp
    import tessel.distributed.pipelining as pipelining
    import tessel.distributed.tensor as dt
    from tessel.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from tessel.distributed._tensor import DTensor, Shard, distribute_tensor
    from tessel.distributed.distributed_c10d import _get_default_group, all_reduce
    from tessel.distributed.pipelining.schedules import (PipelineScheduleMulti, PipelineScheduleSingle,
                                                         Schedule1F1B, ScheduleInterleaved1F1B, get_schedule_class)
    from tessel.distributed.tensor.placement_types import Partial, Placement, Replicate

    assert fully_shard is fsdp.fully_shard and MixedPrecisionPolicy is fsdp.MixedPrecisionPolicy
    assert DTensor is dt.DTensor and Shard is dt.Shard and distribute_tensor is dt.distribute_tensor
    assert isinstance(Shard(0), Placement) and isinstance(Replicate(), Placement) and isinstance(Partial(), Placement)
    assert all_reduce is dist.all_reduce
    from tessel.nn.parallel import DataParallel
    assert DataParallel is tessel.nn.DataParallel
    from tessel.distributed.launcher.api import elastic_launch
    from tessel.distributed.run import main as torchrun_main
    assert callable(elastic_launch) and callable(torchrun_main)
    # torchtitan sizes its stages with issubclass(schedule_class, PipelineScheduleSingle).
    assert issubclass(Schedule1F1B, PipelineScheduleSingle) and not issubclass(Schedule1F1B, PipelineScheduleMulti)
    assert issubclass(ScheduleInterleaved1F1B, PipelineScheduleMulti)
    assert not issubclass(ScheduleInterleaved1F1B, PipelineScheduleSingle)
    assert get_schedule_class("ZBVZeroBubble") is pipelining.ScheduleZBVZeroBubble
    assert issubclass(pipelining.ScheduleZBVZeroBubble, PipelineScheduleMulti)

    with pytest.raises(RuntimeError, match="init_process_group"):
        _get_default_group()
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        g = _get_default_group()
        t = tessel.ones(2) * (dist.get_rank() + 1)
        all_reduce(t, group=g)
        seen[dist.get_rank()] = (g.size, t.tolist())

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: (2, [3.0, 3.0]), 1: (2, [3.0, 3.0])}


def test_isend_and_irecv_issued_one_by_one_exchange_without_waiting_in_a_cycle():
    # torch's exchange: every rank posts its isend, then its irecv, then waits (a ring of 3); a pair followed by a
    # blocking collective; is_completed() polling. Each group runs its calls in issue order, so issued one by one
    # each rank's send would wait for a receive queued behind it.
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        r, n = dist.get_rank(), dist.get_world_size()
        a, b = tessel.full((2,), float(r)), tessel.zeros(2)
        s = dist.isend(a, dst=(r + 1) % n)
        q = dist.irecv(b, src=(r - 1) % n)
        q.wait()
        s.wait()
        c, d = tessel.full((1,), 10.0 + r), tessel.zeros(1)
        s2 = dist.isend(c, dst=(r + 1) % n)
        q2 = dist.irecv(d, src=(r - 1) % n)
        t = tessel.ones(1)
        dist.all_reduce(t)  # the pending pair goes out first, as one batch, on every rank alike
        while not q2.is_completed():
            pass
        s2.wait()
        seen[r] = (b.tolist(), t.item(), d.item())

    tessel.run_ranks(3, rank_fn)
    assert seen == {0: ([2.0, 2.0], 3.0, 12.0), 1: ([0.0, 0.0], 3.0, 10.0), 2: ([1.0, 1.0], 3.0, 11.0)}


def test_a_query_between_isend_and_irecv_does_not_issue_the_isend_alone():
    # `irecv(b, src=(dist.get_rank() - 1) % n)` after an isend: get_rank is a query, not communication, so the
    # pair still goes out as one batch (issued alone, the send would wait for a receive queued behind it).
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        n = dist.get_world_size()
        a, b = tessel.full((1,), float(dist.get_rank())), tessel.zeros(1)
        s = dist.isend(a, dst=(dist.get_rank() + 1) % n)
        q = dist.irecv(b, src=(dist.get_rank() - 1) % n)
        dist.get_process_group_ranks(dist._default_group())
        q.wait()
        s.wait()
        seen[dist.get_rank()] = b.item()

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: 1.0, 1: 0.0}


P2P_BEFORE_COLLECTIVE = """
def exchange(dist, tessel, first):
    # Rank 0 posts its isend (or irecv) and then joins an all_reduce; rank 1 joins the all_reduce first and only
    # then posts the matching irecv (isend). As in torch, the all_reduce does not wait behind rank 0's pending
    # send or receive (those run on the group's p2p thread): both complete.
    r = dist.get_rank()
    data, t = tessel.zeros(3), tessel.ones(1) * (r + 1)
    if r == 0:
        w = dist.isend(tessel.full((3,), 7.0), dst=1) if first == "isend" else dist.irecv(data, src=1)
        dist.all_reduce(t)
        w.wait()
    else:
        dist.all_reduce(t)
        if first == "isend":
            dist.irecv(data, src=0).wait()
        else:
            dist.isend(tessel.full((3,), 7.0), dst=0).wait()
    return data.tolist(), t.item()
"""


@pytest.mark.parametrize("first", ["isend", "irecv"])
def test_a_pending_send_or_receive_does_not_hold_up_the_groups_collectives(first):
    # Before, the group ran sends and receives on its collectives' thread, so this waited for the 2 s timeout.
    scope = {}
    exec(P2P_BEFORE_COLLECTIVE, scope)
    seen = {}

    def rank_fn(world):
        dist.init_process_group(timeout=datetime.timedelta(seconds=2))
        seen[dist.get_rank()] = scope["exchange"](dist, tessel, first)

    tessel.run_ranks(2, rank_fn)
    receiver = 1 if first == "isend" else 0
    assert seen[receiver] == ([7.0, 7.0, 7.0], 3.0) and seen[1 - receiver] == ([0.0, 0.0, 0.0], 3.0)


def test_a_pending_send_or_receive_does_not_hold_up_gloos_collectives(tmp_path):
    runfiles = os.path.join(os.environ["TEST_SRCDIR"], "tessel")
    script = tmp_path / "job.py"
    script.write_text(P2P_BEFORE_COLLECTIVE + textwrap.dedent("""
        import datetime
        import tessel
        import tessel.distributed as dist
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
        for first in ("isend", "irecv"):
            print("rank", dist.get_rank(), first, exchange(dist, tessel, first), flush=True)
        dist.destroy_process_group()
    """))
    env = dict(os.environ, PYTHONPATH=os.path.join(runfiles, "bindings"))
    out = subprocess.run([os.path.join(runfiles, "comm", "tessel_run"), "--nproc-per-node", "2", "--master-port", "0",
                          sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # tessel-run prefixes each rank's lines with "[rank r] ".
    assert sorted(line.split("] ", 1)[1] for line in out.stdout.splitlines() if "] rank" in line) == [
        "rank 0 irecv ([7.0, 7.0, 7.0], 3.0)", "rank 0 isend ([0.0, 0.0, 0.0], 3.0)",
        "rank 1 irecv ([0.0, 0.0, 0.0], 3.0)", "rank 1 isend ([7.0, 7.0, 7.0], 3.0)"]


def test_split_group_cuts_the_parent_by_its_group_ranks():
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        pairs = dist.split_group(split_ranks=[[0, 2], [1, 3]])
        t = tessel.ones(1) * (rank + 1)
        dist.all_reduce(t, group=pairs)
        # Split the pair again by its own group ranks: [[1], [0]] puts each member alone.
        alone = dist.split_group(pairs, split_ranks=[[1], [0]])
        u = tessel.ones(1) * (rank + 1)
        dist.all_reduce(u, group=alone)
        partial = dist.split_group(split_ranks=[[0, 1]])  # ranks 2 and 3 are in no split
        seen[rank] = (dist.get_process_group_ranks(pairs), t.item(), dist.get_process_group_ranks(alone), u.item(),
                      partial is None)
        with pytest.raises(ValueError, match="rank 2 appears in splits 0 and 1"):
            dist.split_group(split_ranks=[[0, 2], [2, 3]])
        with pytest.raises(ValueError, match="not a rank of the parent group of 2 ranks"):
            dist.split_group(pairs, split_ranks=[[0, 2]])
        with pytest.raises(ValueError, match="cannot be None or empty"):
            dist.split_group(split_ranks=[])

    tessel.run_ranks(4, rank_fn)
    assert seen == {0: ([0, 2], 4.0, [0], 1.0, False), 1: ([1, 3], 6.0, [1], 2.0, False),
                    2: ([0, 2], 4.0, [2], 3.0, True), 3: ([1, 3], 6.0, [3], 4.0, True)}


def test_format_utils_converts_a_sharded_checkpoint_to_one_file_and_back(tmp_path):
    import numpy as np

    import tessel.distributed.checkpoint as dcp
    import tessel.nn as nn
    from tessel.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp
    from tessel.distributed.checkpoint.state_dict import get_model_state_dict
    from tessel.distributed.fsdp import fully_shard
    from tessel.distributed.tensor import Shard, distribute_tensor
    from tessel.distributed.device_mesh import init_device_mesh

    def make():
        tessel.manual_seed(3)
        return nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2))

    full = {k: v.detach().numpy() for k, v in make().state_dict().items()}
    ckpt, pt = tmp_path / "dcp", tmp_path / "model.pt"

    def save_sharded(world):
        dist.init_process_group()
        model = fully_shard(make())  # each rank holds rows of every parameter
        dcp.save({"model": get_model_state_dict(model), "step": 7, "extra": {"epochs": [1, 2]}}, checkpoint_id=ckpt)

    tessel.run_ranks(2, save_sharded)
    dcp_to_torch_save(ckpt, pt)
    got = tessel.load(str(pt))
    assert sorted(got) == ["extra", "model", "step"]  # nested as saved, as torch's
    got = dotted(got)
    assert sorted(got) == sorted(["model." + k for k in full] + ["step", "extra.epochs"])
    for k, v in full.items():
        np.testing.assert_array_equal(got["model." + k].numpy(), v)
    assert got["step"] == 7 and got["extra.epochs"] == [1, 2]

    # Back: a torch.save file (here nested) to DCP, loaded as row shards on 2 ranks.
    tessel.save({"w": tessel.tensor(full["0.weight"]), "meta": {"lr": 0.5}}, str(tmp_path / "nested.pt"))
    torch_save_to_dcp(tmp_path / "nested.pt", tmp_path / "from_pt")
    rows = {}

    def load_sharded(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        sd = {"w": distribute_tensor(tessel.zeros(5, 3), mesh, [Shard(0)]), "meta": {"lr": 0.0}}
        dcp.load(sd, checkpoint_id=tmp_path / "from_pt")
        rows[dist.get_rank()] = (sd["w"].to_local().numpy(), sd["meta"]["lr"])

    tessel.run_ranks(2, load_sharded)
    np.testing.assert_array_equal(np.concatenate([rows[0][0], rows[1][0]]), full["0.weight"])
    assert rows[0][1] == rows[1][1] == 0.5
    runfiles = os.path.join(os.environ["TEST_SRCDIR"], "tessel")
    out = subprocess.run([sys.executable, "-m", "tessel.distributed.checkpoint.format_utils", "dcp_to_torch",
                          str(ckpt), str(tmp_path / "cli.pt")], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.path.join(runfiles, "bindings")))
    assert out.returncode == 0 and "Converted checkpoint from" in out.stdout, out.stderr
    np.testing.assert_array_equal(tessel.load(str(tmp_path / "cli.pt"))["model"]["1.bias"].numpy(), full["1.bias"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
