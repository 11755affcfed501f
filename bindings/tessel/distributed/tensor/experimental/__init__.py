"""torch.distributed.tensor.experimental: implicit_replication (plain tensors that do not require grad, next
to DTensors, are taken as Replicate on their mesh instead of raising; per thread)."""
import contextlib

from .... import _C


@contextlib.contextmanager
def implicit_replication():
    guard = _C._ImplicitReplication()
    guard.__enter__()
    try:
        yield
    finally:
        guard.__exit__(None, None, None)
