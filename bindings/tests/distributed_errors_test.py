"""torch.distributed's exception classes from tessel's error codes (bindings/errors_py.cc): the hierarchy, a store
wait's timeout, a collective's timeout and a peer that failed, each caught as a torch script catches it."""
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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
