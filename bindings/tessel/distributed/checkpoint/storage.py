"""tessel.distributed.checkpoint.storage: torch's storage base classes, the bases of tessel's
FileSystemWriter / HuggingFaceStorageWriter and FileSystemReader / HuggingFaceStorageReader (tessel writes
its own file layout: other storages raise NotImplementedError)."""


class StorageWriter:
    """torch's StorageWriter."""


class StorageReader:
    """torch's StorageReader."""
