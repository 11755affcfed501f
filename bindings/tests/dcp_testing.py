"""Shared by the checkpoint tests: dcp.save / dcp.load raise torch's CheckpointException on every rank;
raises_on_ranks checks which ranks failed and with what."""
import contextlib
import re

import pytest

from tessel.distributed.checkpoint import CheckpointException


@contextlib.contextmanager
def raises_on_ranks(exc_type, match, ranks=(0,)):
    """The block raises CheckpointException whose failures are exactly `ranks`, each an `exc_type` whose
    text matches the regular expression `match`."""
    with pytest.raises(CheckpointException) as info:
        yield info
    failures = info.value.failures
    assert sorted(failures) == sorted(ranks), str(info.value)
    for rank, (exc, _) in failures.items():
        assert isinstance(exc, exc_type) and re.search(match, str(exc)), "rank %d: %r" % (rank, exc)
