"""dcp.save / dcp.load failures raise torch's CheckpointException on every rank of the process group,
naming each failing rank's own exception (torch 2.15: a key missing on rank 1 fails both ranks with
failures {1: (RuntimeError "Missing key ...", StackSummary)}): no rank goes on with state its peers did not
save or load, and no rank waits for a peer that failed before the exchange."""
import os
import time
import traceback

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.distributed.checkpoint as dcp
from tessel.distributed.checkpoint import CheckpointException


def _failure(exc, rank):
    """(exception, StackSummary) of `rank` in a CheckpointException."""
    got, summary = exc.failures[rank]
    assert isinstance(summary, traceback.StackSummary)
    return got


def test_is_torchs_base_exception_with_failures_and_text():
    assert issubclass(CheckpointException, BaseException) and not issubclass(CheckpointException, Exception)
    try:
        raise KeyError("k")
    except KeyError as e:
        failure = (e, traceback.extract_tb(e.__traceback__))
    exc = CheckpointException("load", {3: failure})
    assert exc.failures == {3: failure}
    text = str(exc)
    assert text.startswith("CheckpointException ranks:dict_keys([3])\nTraceback (most recent call last): (RANK 3)\n")
    assert text.endswith("KeyError: 'k'\n")
    assert dcp.api.CheckpointException is CheckpointException


def test_load_missing_a_key_on_one_rank_fails_every_rank(tmp_path):
    ckpt = str(tmp_path / "ck")
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        dcp.save({"w": tessel.arange(4.0), "b": tessel.zeros(2)}, checkpoint_id=ckpt)
        want = {"w": tessel.zeros(4)}
        if world.rank == 1:
            want["missing"] = tessel.zeros(3)
        with pytest.raises(CheckpointException) as info:
            dcp.load(want, checkpoint_id=ckpt)
        seen[world.rank] = info.value.failures
        # no_dist: this rank alone, no exchange (rank 0 loads while rank 1 does not call load at all)
        if world.rank == 0:
            back = {"w": tessel.zeros(4)}
            dcp.load(back, checkpoint_id=ckpt, no_dist=True)
            np.testing.assert_array_equal(back["w"].numpy(), np.arange(4.0))
        dist.barrier()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        assert sorted(seen[r]) == [1], seen[r]
        err, _ = seen[r][1]  # torch: RuntimeError('Missing key in checkpoint state_dict: missing.')
        assert isinstance(err, RuntimeError) and str(err) == "Missing key in checkpoint state_dict: missing.", err


def test_load_without_a_process_group_raises_it_for_rank_zero(tmp_path):
    ckpt = str(tmp_path / "ck")
    dcp.save({"w": tessel.ones(4)}, checkpoint_id=ckpt)
    with pytest.raises(CheckpointException) as info:
        dcp.load({"w": tessel.zeros(5)}, checkpoint_id=ckpt)
    err = _failure(info.value, 0)
    # torch: ValueError('Size mismatch between saved torch.Size([4]) and current: torch.Size([5]) for w')
    assert isinstance(err, ValueError) and str(err) == \
        "Size mismatch between saved tessel.Size([4]) and current: tessel.Size([5]) for w", err
    with pytest.raises(CheckpointException) as info:
        dcp.load({"w": tessel.zeros(4)}, checkpoint_id=str(tmp_path / "absent"))
    assert isinstance(_failure(info.value, 0), FileNotFoundError)


class _Broken:
    """A Stateful whose state_dict() fails (on one rank)."""

    def state_dict(self):
        raise ValueError("boom on this rank")

    def load_state_dict(self, sd):
        pass


def test_save_whose_stateful_fails_on_one_rank_fails_every_rank_at_once_and_keeps_the_old_checkpoint(tmp_path):
    ckpt = str(tmp_path / "ck")
    seen, seconds = {}, {}

    def rank_fn(world):
        dist.init_process_group()
        dcp.save({"w": tessel.arange(4.0)}, checkpoint_id=ckpt)
        state = {"w": tessel.ones(4), "app": _Broken() if world.rank == 1 else {"step": 3}}
        start = time.monotonic()
        with pytest.raises(CheckpointException) as info:
            dcp.save(state, checkpoint_id=ckpt)
        seconds[world.rank] = time.monotonic() - start
        seen[world.rank] = info.value.failures
        dist.barrier()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    for r in range(2):
        assert seconds[r] < 10, seconds  # the peer learned it in the plan exchange, not at the timeout
        assert sorted(seen[r]) == [1], seen[r]
        err, _ = seen[r][1]
        assert isinstance(err, ValueError) and str(err) == "boom on this rank", err
    back = {"w": tessel.zeros(4)}
    dcp.load(back, checkpoint_id=ckpt)
    np.testing.assert_array_equal(back["w"].numpy(), np.arange(4.0))


def test_save_that_fails_in_planning_on_every_rank_names_every_rank(tmp_path):
    # The ranks disagree on w's dtype: the global plan fails alike on both (each its own failure).
    def rank_fn(world):
        dist.init_process_group()
        w = tessel.ones(4) if world.rank == 0 else tessel.ones(4, dtype=tessel.float64)
        with pytest.raises(CheckpointException) as info:
            dcp.save({"w": w}, checkpoint_id=str(tmp_path / "ck"))
        assert sorted(info.value.failures) == [0, 1], info.value.failures
        for r in range(2):
            assert "'w'" in str(_failure(info.value, r)), info.value
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert not os.path.exists(tmp_path / "ck" / "metadata.json")


def test_huggingface_export_failing_on_the_exporting_rank_fails_every_rank(tmp_path):
    # The group's first rank exports model.safetensors after the collective save; where that path is a
    # directory the export fails there, and the other rank raises too instead of waiting at a barrier.
    out = tmp_path / "hf"
    (out / "model.safetensors").mkdir(parents=True)
    seen = {}

    def rank_fn(world):
        dist.init_process_group()
        with pytest.raises(CheckpointException) as info:
            dcp.save({"w": tessel.ones(4)}, storage_writer=dcp.HuggingFaceStorageWriter(str(out)))
        seen[world.rank] = sorted(info.value.failures)
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert seen == {0: [0], 1: [0]}
    assert not (out / ".tessel_dcp").exists()  # the staging checkpoint is removed either way


def test_async_save_failure_is_a_checkpoint_exception_from_the_future(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    future = dcp.async_save({"w": tessel.ones(2)}, checkpoint_id=str(blocker / "ck"))
    exc = future.exception(timeout=60)
    assert isinstance(exc, CheckpointException) and sorted(exc.failures) == [0], exc


def test_a_rank_whose_load_went_well_raises_when_a_peer_failed_before_agreeing_and_calls_that_disagree_are_named(
        tmp_path):
    # rank 1 failed before its dcp.load: rank 0's load returned as if both had loaded (the failed agreement
    # exchange was swallowed) and failed later at an unrelated collective. A dcp.save on one rank against a
    # dcp.load on the other paired their exchanges: rank 0's CheckpointException held rank 1's directory string
    # as a "failure", and str() of it raised ValueError.
    ckpt, other = str(tmp_path / "ck"), str(tmp_path / "other")
    dcp.save({"w": tessel.arange(4.0)}, checkpoint_id=ckpt)
    seen = {}

    def lone_failure(world):
        dist.init_process_group()
        if world.rank == 1:
            raise RuntimeError("rank 1 failed before its load")
        with pytest.raises(CheckpointException) as info:
            dcp.load({"w": tessel.zeros(4)}, checkpoint_id=ckpt)
        seen["lone"] = str(info.value)

    with pytest.raises(RuntimeError, match="rank 1 failed before its load"):
        tessel.run_ranks(2, lone_failure)
    assert "(RANK 0)" in seen["lone"] and "rank 1" in seen["lone"], seen["lone"]

    def save_against_load(world):
        dist.init_process_group()
        try:
            if world.rank == 0:
                dcp.load({"w": tessel.zeros(4)}, checkpoint_id=ckpt)
            else:
                dcp.save({"w": tessel.zeros(4)}, checkpoint_id=other)
        except BaseException as e:  # noqa: BLE001 (CheckpointException is a BaseException)
            seen[world.rank] = str(e)

    tessel.run_ranks(2, save_against_load)  # (each rank caught its own error)
    assert "rank 1 is not in the same checkpoint call" in seen[0] and other in seen[0], seen[0]


def test_load_restores_the_index_a_save_killed_before_its_renames_moved_aside(tmp_path):
    # a save moves metadata.json to metadata.json.prev-<id> before replacing data files; killed there, the previous
    # checkpoint is intact and checkpoint::Load restores the index, but dcp.load read the metadata first (for its
    # value kinds) and failed with "metadata.json is missing"
    import json
    ckpt = str(tmp_path / "ck")
    dcp.save({"w": tessel.arange(4.0), "step": 7}, checkpoint_id=ckpt, no_dist=True)
    save_id = json.load(open(os.path.join(ckpt, "metadata.json")))["save_id"]
    os.rename(os.path.join(ckpt, "metadata.json"), os.path.join(ckpt, "metadata.json.prev-%s" % save_id))
    back = {"w": tessel.zeros(4), "step": 0}
    dcp.load(back, checkpoint_id=ckpt, no_dist=True)
    np.testing.assert_array_equal(back["w"].numpy(), np.arange(4.0))
    assert back["step"] == 7 and "metadata.json" in os.listdir(ckpt)


def test_save_returns_on_every_rank_after_rank_zero_wrote_the_marker(tmp_path, monkeypatch):
    """dcp.save returned on rank 1 while rank 0 still wrote the torch-format marker: a load right after it read a
    half-written .metadata ("pickle data was truncated", a flaky dcp_exception_test). The marker is written whole
    and renamed into place, and save's last exchange waits for it."""
    from tessel.distributed.checkpoint import _torch_format
    ckpt = str(tmp_path / "ck")
    original = _torch_format.write_marker

    def slow_marker(path, paths=None):
        time.sleep(0.3)  # rank 0's write of the marker, late
        original(path, paths)
    monkeypatch.setattr(_torch_format, "write_marker", slow_marker)
    complete = {}

    def rank_fn(world):
        dist.init_process_group()
        dcp.save({"w": tessel.arange(4.0)}, checkpoint_id=ckpt)
        complete[world.rank] = _torch_format._is_marker(os.path.join(ckpt, _torch_format.METADATA_FILE))
        back = {"w": tessel.zeros(4)}
        dcp.load(back, checkpoint_id=ckpt)
        np.testing.assert_array_equal(back["w"].numpy(), np.arange(4.0))
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert complete == {0: True, 1: True}

if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q"]))
