"""Shared by the checkpoint tests: dcp.save / dcp.load raise torch's CheckpointException on every rank;
raises_on_ranks checks which ranks failed and with what. dotted flattens a nested state dict as torch's keys."""
import contextlib
import re

import pytest

import tessel
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


def dotted(tree, prefix=""):
    """A nested state dict (dcp_to_torch_save's, as torch's) as torch's flat DCP keys."""
    out = {}
    for k, v in (tree.items() if isinstance(tree, dict) else enumerate(tree)):
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, (dict, tessel.Tensor)) for x in v)):
            out.update(dotted(v, key))
        else:
            out[key] = v
    return out
