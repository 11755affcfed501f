"""torch.distributed.checkpoint.state_dict_saver: save and async_save (the package's own) and
AsyncCheckpointerType (async_save's async_checkpointer_type: tessel's background saver is a thread of this
process either way)."""
import enum

from . import async_save, save, save_state_dict  # noqa: F401


class AsyncCheckpointerType(enum.Enum):
    """torch's: where async_save's background work runs."""
    THREAD = "thread"
    PROCESS = "process"
