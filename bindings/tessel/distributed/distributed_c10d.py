"""tessel.distributed.distributed_c10d: torch's implementation module of torch.distributed, which scripts import
from directly (``from torch.distributed.distributed_c10d import _get_default_group``): every public name of
tessel.distributed, plus _get_default_group."""
from . import *  # noqa: F401,F403
from . import _default_group


def _get_default_group():
    """The default process group (this thread's world); a RuntimeError before init_process_group, as torch."""
    return _default_group("_get_default_group")
