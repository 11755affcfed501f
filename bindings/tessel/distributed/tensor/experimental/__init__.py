"""torch.distributed.tensor.experimental: implicit_replication (plain tensors that do not require grad, next
to DTensors, are taken as Replicate on their mesh instead of raising; per thread), and context parallelism
(context_parallel, context_parallel_unshard, set_rotate_method: _context_parallel.py), local_map
(_func_map.py), and register_sharding for custom ops (_register_sharding.py)."""
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


from ._context_parallel import context_parallel, context_parallel_unshard, set_rotate_method  # noqa: E402,F401
from ._func_map import local_map  # noqa: E402,F401
from ._register_sharding import register_sharding  # noqa: E402,F401
