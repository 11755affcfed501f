"""tessel.distributed.checkpoint.metadata: torch's DCP metadata classes, as FileSystemReader(path).read_metadata()
returns them: which keys a checkpoint holds, each tensor's dtype, global size and the chunks it was saved in.

    md = FileSystemReader("/tmp/ckpt").read_metadata()
    for fqn, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            print(fqn, m.properties.dtype, m.size, [(c.offsets, c.sizes) for c in m.chunks])

Read from the checkpoint's metadata.json (checkpoint/metadata.h), or from the .metadata of a checkpoint torch's
DCP wrote (_torch_format.py); non-tensor values (bytes, numbers, strings, pickles) are BytesStorageMetadata, as
torch pickles them. tessel's own extras sit beside torch's fields:
storage_meta.save_id, Metadata.world_size, TensorStorageMetadata.layout (the placements it was saved with).
"""
import dataclasses

from ..._tensor import Size

__all__ = ["ChunkStorageMetadata", "TensorProperties", "TensorStorageMetadata", "BytesStorageMetadata",
           "StorageMeta", "Metadata", "MetadataIndex"]


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: Size
    sizes: Size


@dataclasses.dataclass
class TensorProperties:
    dtype: object = None
    layout: object = None
    requires_grad: bool = False
    memory_format: object = None
    pin_memory: bool = False
    strides: object = None

    def __setstate__(self, state):
        """A dict (tessel's pickles), or torch's tuple (dtype, layout, requires_grad, memory format, pin_memory[,
        strides]) from a torch checkpoint's .metadata."""
        if isinstance(state, dict):
            self.__dict__.update(state)
            return
        self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory = state[:5]
        self.strides = tuple(state[5]) if len(state) > 5 and state[5] is not None else None


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: Size
    chunks: list
    layout: str = ""


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: object = None
    save_id: object = None
    load_id: object = None
    modules: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None
    storage_meta: object = None
    version: object = None
    world_size: int = 1


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = dataclasses.field(hash=False, compare=False, default=None)


def read(path):
    """The Metadata of the checkpoint in directory `path` (FileNotFoundError if it holds none)."""
    from ... import _C
    tensors, others, save_id, world_size, version = _C._dcp_metadata(path)
    entries = {}
    for fqn, (dtype, shape, layout, chunks) in tensors.items():
        entries[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=dtype),
            Size(shape), [ChunkStorageMetadata(Size(o), Size(s)) for o, s in chunks], layout)
    for key in others:
        entries[key] = BytesStorageMetadata()
    return Metadata(dict(sorted(entries.items())), storage_meta=StorageMeta(checkpoint_id=path, save_id=save_id),
                    version=str(version), world_size=world_size)
