"""tessel.distributed.checkpoint.filesystem: torch's module of the file-system storages."""
from . import FileSystemReader, FileSystemWriter  # noqa: F401
