"""torch.distributed.checkpoint.state_dict_saver: save and async_save (the package's own),
AsyncCheckpointerType (async_save's async_checkpointer_type: tessel's background saver is a thread of this
process either way) and AsyncSaveResponse (async_save's result with an asynchronous stager)."""
import dataclasses
import enum

from . import async_save, save, save_state_dict  # noqa: F401


class AsyncCheckpointerType(enum.Enum):
    """torch's: where async_save's background work runs."""
    THREAD = "thread"
    PROCESS = "process"


@dataclasses.dataclass
class AsyncSaveResponse:
    """torch's: staging_completion resolves (to None) once the state dict is staged, upload_completion
    once the checkpoint is committed."""
    staging_completion: object
    upload_completion: object
