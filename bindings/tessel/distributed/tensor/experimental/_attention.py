"""torch.distributed.tensor.experimental._attention: the module torchtitan imports set_rotate_method and
_cp_options from; the same objects as _context_parallel's."""
from ._context_parallel import _cp_options, context_parallel, context_parallel_unshard, set_rotate_method  # noqa: F401
