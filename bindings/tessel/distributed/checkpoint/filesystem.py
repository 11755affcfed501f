"""tessel.distributed.checkpoint.filesystem: torch's file-system storages. save(..., storage_writer=
FileSystemWriter(path)) writes the checkpoint to directory path, load(..., storage_reader=FileSystemReader(path))
reads it; read_metadata() says what a checkpoint holds (metadata.py) without loading it. `path` is a
pathlib.Path and the attributes are torch's; tessel always writes its own layout (one file per rank, synced
before the commit), so single_file_per_rank, sync_files, thread_count and per_thread_copy_ahead are kept for
source compatibility and do not change the files."""
import contextlib
import os
import pathlib
import uuid

from . import _torch_format, metadata
from .metadata import StorageMeta
from .staging import BlockingAsyncStager
from .storage import StorageReader, StorageWriter

__all__ = ["FileSystemReader", "FileSystemWriter", "FileSystem"]


class _FileSystemStorage:
    """The directory a checkpoint lives in, kept as a str (the HuggingFace storages' spelling)."""

    def __init__(self, path):
        self.path = os.fspath(path)

    @property
    def checkpoint_id(self):
        return self.path

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            os.fspath(checkpoint_id)
        except TypeError:
            return False
        return True


class FileSystem:
    """torch's local file system of the storages (paths as pathlib.Path)."""

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with pathlib.Path(path).open(mode) as stream:
            yield stream

    def concat_path(self, path, suffix):
        return pathlib.Path(path) / suffix

    def init_path(self, path):
        return path if isinstance(path, pathlib.Path) else pathlib.Path(path)

    def rename(self, path, new_path):
        pathlib.Path(path).rename(new_path)

    def mkdir(self, path):
        pathlib.Path(path).mkdir(parents=True, exist_ok=True)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        if isinstance(checkpoint_id, pathlib.Path):
            return True
        if "://" in str(checkpoint_id):
            return False
        return any(p.exists() and os.access(str(p), os.W_OK) for p in pathlib.Path(checkpoint_id).parents)

    def exists(self, path):
        return pathlib.Path(path).exists()

    def rm_file(self, path):
        pathlib.Path(path).unlink()

    def ls(self, path):
        return [str(p) for p in pathlib.Path(path).iterdir()]


def _new_id():
    return str(uuid.uuid4())


class FileSystemWriter(StorageWriter, BlockingAsyncStager):
    """torch's dcp.FileSystemWriter (a BlockingAsyncStager too, as torch's)."""

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False, overwrite=True, _extensions=None,
                 serialization_format=None):
        self.fs = FileSystem()
        self.path = self.fs.init_path(path)
        self.single_file_per_rank = single_file_per_rank
        self.sync_files = sync_files
        self.thread_count = thread_count
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.save_id = _new_id()
        self.overwrite = overwrite
        self.serialization_format = serialization_format
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)

    def reset(self, checkpoint_id=None):
        if checkpoint_id:
            self.path = self.fs.init_path(checkpoint_id)
        self.save_id = _new_id()

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    @property
    def checkpoint_id(self):
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return FileSystem.validate_checkpoint_id(checkpoint_id)

    def stage(self, state_dict):
        self.per_thread_copy_ahead = 0  # (torch's: a staged dict is already on the CPU)
        return super().stage(state_dict)


class FileSystemReader(StorageReader):
    """torch's dcp.FileSystemReader."""

    def __init__(self, path, _extension_registry=None):
        self.fs = FileSystem()
        self.path = self.fs.init_path(path)
        self.storage_data = {}
        self.load_id = _new_id()
        self.rank = None
        self.use_collectives = True

    def reset(self, checkpoint_id=None):
        self.storage_data = {}
        if checkpoint_id:
            self.path = self.fs.init_path(checkpoint_id)
        self.load_id = _new_id()

    def read_metadata(self, *args, **kwargs):
        path = os.fspath(self.path)
        md = _torch_format.read_metadata(path) if _torch_format.is_torch_checkpoint(path) else metadata.read(path)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    @property
    def checkpoint_id(self):
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return FileSystem.validate_checkpoint_id(checkpoint_id)
