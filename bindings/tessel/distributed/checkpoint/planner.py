"""tessel.distributed.checkpoint.planner: torch's planner protocol (SavePlanner / LoadPlanner) and its plan
dataclasses (SavePlan of WriteItems, LoadPlan of ReadItems).

save and load call a planner's hooks as torch's DCP does (set_up_planner, create_local_plan, create_global_plan on
the coordinator, finish_plan, then resolve_data per WriteItem on save, or load_bytes / resolve_tensor /
commit_tensor per ReadItem on load: _planned.py), so a subclass that renames or filters keys, or transforms
values, behaves as in torch. tessel's storage still lays the bytes out itself: an item names a whole tensor (a
DTensor's: this rank's piece), not torch's per-chunk reads and writes."""
import abc
import dataclasses
import enum
import operator
from functools import reduce

from .metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties

__all__ = ["WriteItemType", "LoadItemType", "BytesIOWriteData", "TensorWriteData", "WriteItem", "ReadItem",
           "SavePlan", "LoadPlan", "SavePlanner", "LoadPlanner"]


class WriteItemType(enum.Enum):
    TENSOR = enum.auto()
    SHARD = enum.auto()
    BYTE_IO = enum.auto()


class LoadItemType(enum.Enum):
    TENSOR = enum.auto()
    BYTE_IO = enum.auto()


@dataclasses.dataclass(frozen=True)
class BytesIOWriteData:
    nbytes: int


@dataclasses.dataclass(frozen=True)
class TensorWriteData:
    chunk: ChunkStorageMetadata
    properties: TensorProperties
    size: object


@dataclasses.dataclass(frozen=True)
class WriteItem:
    """What one rank writes: a value (BYTE_IO), a whole tensor (TENSOR) or its piece of a DTensor (SHARD)."""
    index: MetadataIndex
    type: WriteItemType
    bytes_io_data: BytesIOWriteData = None
    tensor_data: TensorWriteData = None

    def tensor_storage_size(self):
        """Bytes of the tensor this item writes (None for a value)."""
        if self.tensor_data is None:
            return None
        return reduce(operator.mul, self.tensor_data.size, 1) * self.tensor_data.properties.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class ReadItem:
    type: LoadItemType
    dest_index: MetadataIndex
    dest_offsets: object
    storage_index: MetadataIndex
    storage_offsets: object
    lengths: object


@dataclasses.dataclass(frozen=True)
class SavePlan:
    items: list
    storage_data: object = None
    planner_data: object = None
    usable: bool = True


@dataclasses.dataclass
class LoadPlan:
    items: list
    storage_data: object = None
    planner_data: object = None


class SavePlanner(abc.ABC):
    """torch's protocol of a save planner (DefaultSavePlanner is the one to extend). save calls, on every rank:
    set_up_planner, create_local_plan, create_global_plan (coordinator), finish_plan, resolve_data per item."""
    _cached_save_plan = {}
    _cached_final_save_plan = {}
    _cached_all_plans = {}
    _cached_global_plan = {}
    _cached_metadata = {}

    @abc.abstractmethod
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        """Keeps the state dict this save writes."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's SavePlan."""

    @abc.abstractmethod
    def create_global_plan(self, all_plans):
        """(every rank's final SavePlan, Metadata), on the coordinator."""

    @abc.abstractmethod
    def finish_plan(self, new_plan):
        """This rank's plan after the global step."""

    @abc.abstractmethod
    def resolve_data(self, write_item):
        """The tensor or io.BytesIO the storage writes for write_item."""


class LoadPlanner:
    """torch's protocol of a load planner (DefaultLoadPlanner is the one to extend). load calls, on every rank:
    set_up_planner, create_local_plan, create_global_plan (coordinator), finish_plan, then load_bytes per value
    and resolve_tensor / commit_tensor per tensor."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        """Keeps the state dict this load fills."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's LoadPlan."""

    @abc.abstractmethod
    def create_global_plan(self, global_plan):
        """Every rank's LoadPlan, on the coordinator."""

    @abc.abstractmethod
    def finish_plan(self, central_plan):
        """This rank's plan after the global step."""

    @abc.abstractmethod
    def load_bytes(self, read_item, value):
        """Puts the value read for read_item (an io.BytesIO of its serialized form) into the state dict."""

    def resolve_bytes(self, read_item):
        raise NotImplementedError("LoadPlanner.resolve_bytes is not implemented")

    @abc.abstractmethod
    def resolve_tensor(self, read_item):
        """The tensor the storage fills for read_item."""

    @abc.abstractmethod
    def commit_tensor(self, read_item, tensor):
        """Called once `tensor` (resolve_tensor's) holds the checkpoint's data."""
