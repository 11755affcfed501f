"""The module paths torch scripts import from besides the main ones (torchtitan's `record` and schedules, the
pre-2.4 `_tensor` and `_composable.fsdp`, `placement_types`, `distributed_c10d`), each holding the objects that
act (the same classes and functions, checked by identity and use), tessel-run reporting a rank's exception
recorded by `record` as the job's root cause, and torch 2.6's split_group."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.elastic.multiprocessing.errors import ChildFailedError, record


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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
