"""torch.distributed's exception classes from tessel's error codes (bindings/errors_py.cc): the hierarchy, a store
wait's timeout, a collective's timeout and a peer that failed, each caught as a torch script catches it; and torch
2.15's newer spellings: set_timeout, all_gather_single / reduce_scatter_single / gather_single (gather_into_tensor),
is_backend_available, get_default_backend_for_device; breakpoint."""
import datetime
import sys
import time

import pytest

import tessel
import tessel.distributed as dist


def test_distributed_errors_follow_torchs_hierarchy():
    # torch's classes: DistError is a RuntimeError (gloo's failures are RuntimeErrors in torch); tessel's
    # timeouts are also TimeoutErrors, and both the store's and the backend's kind.
    assert issubclass(dist.DistError, RuntimeError)
    for sub in (dist.DistBackendError, dist.DistNetworkError, dist.DistStoreError):
        assert issubclass(sub, dist.DistError)
    assert issubclass(dist.QueueEmptyError, dist.DistStoreError)
    assert dist.DistTimeoutError.__mro__[1:4] == (dist.DistBackendError, dist.DistStoreError, dist.DistError)
    assert issubclass(dist.DistTimeoutError, TimeoutError)
    with pytest.raises(dist.DistStoreError, match="'never' not set after 20 ms") as store_timeout:
        dist.HashStore().wait(["never"], datetime.timedelta(milliseconds=20))
    assert isinstance(store_timeout.value, RuntimeError) and isinstance(store_timeout.value, TimeoutError)
    caught = {}

    def late_peer(world):
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=0.2))
        if world.rank == 1:
            time.sleep(0.8)
            return
        try:
            dist.all_reduce(tessel.ones(2))
        except RuntimeError as e:  # a torch script's handler catches it
            caught["timeout"] = e

    tessel.run_ranks(2, late_peer)
    assert type(caught["timeout"]) is dist.DistTimeoutError and isinstance(caught["timeout"], dist.DistBackendError)

    def failed_peer(world):
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
        if world.rank == 1:
            raise ValueError("rank 1 fails before the collective")
        start = time.monotonic()
        try:
            dist.all_reduce(tessel.ones(2))
        except dist.DistBackendError as e:
            caught["failed"], caught["after"] = e, time.monotonic() - start

    with pytest.raises(ValueError, match="rank 1 fails"):
        tessel.run_ranks(2, failed_peer)
    # The peer is known to be gone: an error at once (not after the 30 s timeout), a DistBackendError.
    assert type(caught["failed"]) is dist.DistBackendError and caught["after"] < 5.0


def test_newer_collective_spellings_and_set_timeout():
    got = {}

    def rank_fn(world):
        dist.init_process_group("gloo")
        r = world.rank
        x = tessel.tensor([10.0 * r, 10.0 * r + 1])
        cat, stacked = tessel.zeros(4), tessel.zeros(2, 2)
        dist.all_gather_single(cat, x)
        dist.all_gather_single(stacked, x)
        out = tessel.zeros(2)
        dist.reduce_scatter_single(out, tessel.arange(4.0) * (r + 1))
        out_stacked = tessel.zeros(2)
        dist.reduce_scatter_tensor(out_stacked, (tessel.arange(4.0) * (r + 1)).reshape(2, 2))  # torch's stacked form
        assert out_stacked.tolist() == out.tolist()
        dst = tessel.zeros(2, 2) if r == 1 else None
        dist.gather_single(x, dst, dst=1)
        dst2 = tessel.zeros(4) if r == 0 else None
        dist.gather_into_tensor(x, dst2)
        dist.set_timeout(datetime.timedelta(seconds=0.2))
        timeout = world.timeout
        if r == 1:
            time.sleep(0.7)
        else:
            with pytest.raises(dist.DistTimeoutError, match="never arrived|timed out"):
                dist.all_reduce(tessel.ones(1))
        got[r] = (cat.tolist(), stacked.tolist(), out.tolist(), None if dst is None else dst.tolist(),
                  None if dst2 is None else dst2.tolist(), timeout)

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):
        cat, stacked, out, dst, dst2, timeout = got[r]
        assert cat == [0.0, 1.0, 10.0, 11.0] and stacked == [[0.0, 1.0], [10.0, 11.0]]
        assert out == ([0.0, 3.0] if r == 0 else [6.0, 9.0])  # arange(4) * (1 + 2), this rank's half
        assert timeout == datetime.timedelta(seconds=0.2)
    assert got[1][3] == [[0.0, 1.0], [10.0, 11.0]] and got[0][3] is None
    assert got[0][4] == [0.0, 1.0, 10.0, 11.0] and got[1][4] is None
    assert dist.is_backend_available("gloo") and not dist.is_backend_available("mpi")
    assert dist.get_default_backend_for_device("cpu") == "gloo"
    assert dist.get_default_backend_for_device("cuda:1") == "nccl"
    with pytest.raises(ValueError, match="Default backend not registered for device : xpu"):
        dist.get_default_backend_for_device("xpu")


def test_breakpoint_stops_one_rank_while_the_others_wait(monkeypatch):
    stopped, after = [], {}
    monkeypatch.setattr(dist._DistributedPdb, "set_trace",
                        lambda self, frame=None: (stopped.append(dist.get_rank()), time.sleep(0.3)))

    def rank_fn(world):
        dist.init_process_group("gloo")
        for _ in range(3):
            dist.breakpoint(rank=1, skip=1, timeout_s=60)  # the first pass is skipped
        after[world.rank] = (time.monotonic(), world.timeout)

    start = time.monotonic()
    tessel.run_ranks(2, rank_fn)
    assert stopped == [1, 1]  # rank 1 only, the 2nd and 3rd pass
    assert after[0][0] - start >= 0.55  # rank 0 waited in the barrier while rank 1 was "debugging"
    assert after[0][1] == datetime.timedelta(seconds=60)


def test_a_rank_that_destroyed_its_process_group_fails_its_peers_at_once_and_may_join_again():
    """run_ranks: a rank that called destroy_process_group() (its thread goes on) is gone for its peers at once,
    as a gloo rank whose connections closed; before, they waited until its thread returned (here never: it
    waits for them) or out the timeout. A script in phases (init ... destroy, again) meets again at each init,
    a slow rank included, as torch's init_process_group is a rendezvous."""
    import threading
    failed, messages, sums = threading.Event(), {}, {}

    def rank_fn(world):
        for phase in range(2):
            dist.init_process_group(timeout=datetime.timedelta(seconds=20))
            rank = dist.get_rank()
            t = tessel.full((1,), float(rank + 1 + phase))
            dist.all_reduce(t)
            sums[rank, phase] = t.item()
            dist.destroy_process_group()
            if rank == 1:
                time.sleep(0.2)  # rank 0's next init waits for it
        dist.init_process_group(timeout=datetime.timedelta(seconds=20))
        if rank == 1:
            dist.destroy_process_group()
            failed.wait(30)
            return
        with pytest.raises(dist.DistBackendError) as e:
            dist.all_reduce(tessel.ones(4))
        messages[rank] = str(e.value)
        failed.set()
        dist.destroy_process_group()

    tessel.run_ranks(2, rank_fn)
    assert sums == {(0, 0): 3.0, (1, 0): 3.0, (0, 1): 5.0, (1, 1): 5.0}
    assert "all_reduce #2" in messages[0]
    assert "rank(s) 1 (global 1) called destroy_process_group() and will never call it" in messages[0]



def test_a_send_against_a_peers_barrier_and_from_local_with_other_placements_fail_at_once():
    """From a distributed-misuse sweep: a send whose peer went on to barrier() (a pipeline stage that ran one step
    more than its peer) raises the deadlock on both ranks at once (it waited out the group timeout, as torch's
    hangs), naming the send and the barrier (which a mismatch names "barrier", no longer a one-byte all_reduce);
    from_local(run_check=True) with other placements on each rank raises on both, naming them (each built a DTensor
    of another global shape, silently)."""
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import DTensor, Shard
    caught = {}

    def p2p(world):
        dist.init_process_group()
        start = time.monotonic()
        try:
            if world.rank == 0:
                dist.send(tessel.ones(4), 1)
            else:
                dist.barrier()
        except dist.DistBackendError as e:  # (the group is unusable afterwards)
            caught[("p2p", world.rank)] = (str(e), time.monotonic() - start)

    def placements(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        try:
            DTensor.from_local(tessel.ones(2, 2), mesh, [Shard(world.rank)], run_check=True)
        except ValueError as e:
            caught[("placements", world.rank)] = str(e)
        dist.destroy_process_group()

    tessel.run_ranks(2, p2p)
    tessel.run_ranks(2, placements)
    for r in (0, 1):
        message, seconds = caught[("p2p", r)]
        assert seconds < 5, seconds
        assert ("deadlock: rank 0 waits in send to rank 1 (tag 0, 16 B, float32) on group 'world' (global ranks "
                "[0, 1]) for rank 1, which has not posted its side; rank 1 waits in barrier #0 on group 'world'") \
            in message, message
        assert "a send or receive waits for a rank that is inside a collective" in message
        assert ("FromLocal(run_check): rank 1 passed placements [S(1)] but rank 0 passed [S(0)] on DeviceMesh"
                in caught[("placements", r)]), caught[("placements", r)]


def test_mismatched_sizes_name_both_shapes_and_too_many_placements_is_torchs_value_error():
    from tessel.distributed.device_mesh import init_device_mesh
    from tessel.distributed.tensor import Shard, distribute_tensor
    caught = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        with pytest.raises(ValueError, match=r"^`placements` must have the same length as `device_mesh.ndim`! Found "
                                             r"placements length: 2, and device_mesh.ndim: 1.$"):
            distribute_tensor(tessel.ones(4, 2), mesh, [Shard(0), Shard(1)])
        try:
            dist.all_reduce(tessel.ones(4 + 2 * world.rank))
        except dist.DistBackendError as e:
            caught[world.rank] = str(e)

    tessel.run_ranks(2, rank_fn)
    for r in (0, 1):  # (byte counts alone named neither tensor)
        assert ("rank 1 called all_reduce #1 (24 B of shape [6]) while rank 0 called all_reduce #1 (16 B of shape [4])"
                in caught[r]), caught[r]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
