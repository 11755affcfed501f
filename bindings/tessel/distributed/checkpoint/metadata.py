"""tessel.distributed.checkpoint.metadata: torch's DCP metadata classes, as FileSystemReader(path).read_metadata()
returns them: which keys a checkpoint holds, each tensor's dtype, global size and the chunks it was saved in.

    md = FileSystemReader("/tmp/ckpt").read_metadata()
    for fqn, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            print(fqn, m.properties.dtype, m.size, [(c.offsets, c.sizes) for c in m.chunks])

Read from the checkpoint's metadata.json (checkpoint/metadata.h), or from the .metadata of a checkpoint torch's
DCP wrote (_torch_format.py); non-tensor values (bytes, numbers, strings, pickles) are BytesStorageMetadata, as
torch pickles them. tessel's own extras sit beside torch's fields:
storage_meta.save_id, Metadata.world_size and format_version (tessel's format), TensorStorageMetadata.layout (the
placements it was saved with).
"""
import dataclasses
import itertools
import os
import pathlib
import re

from ..._tensor import Size
from ..._tensor_extras import channels_last, contiguous_format, preserve_format, strided

__all__ = ["ChunkStorageMetadata", "TensorProperties", "TensorStorageMetadata", "BytesStorageMetadata",
           "StorageMeta", "Metadata", "MetadataIndex"]

STATE_DICT_TYPE = dict


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: Size
    sizes: Size


# torch pickles a TensorProperties' memory format as _MEM_FORMAT_ENCODING's value (_torch_format reads it as an
# enum of the same names); the layout as its name
_MEMORY_FORMATS = {"TORCH_CONTIGUOUS_FORMAT": contiguous_format, "TORCH_CHANNELS_LAST": channels_last,
                   "TORCH_PRESERVE_FORMAT": preserve_format}


@dataclasses.dataclass
class TensorProperties:
    dtype: object = None
    layout: object = dataclasses.field(default=strided)
    requires_grad: bool = False
    memory_format: object = dataclasses.field(default=contiguous_format)
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
        if isinstance(self.layout, str) and self.layout == "torch.strided":
            self.layout = strided
        self.memory_format = _MEMORY_FORMATS.get(getattr(self.memory_format, "name", None), self.memory_format)

    @staticmethod
    def create_from_tensor(tensor):
        return TensorProperties(dtype=tensor.dtype, layout=strided, requires_grad=tensor.requires_grad,
                                memory_format=contiguous_format, pin_memory=False, strides=tuple(tensor.stride()))


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: Size
    chunks: list
    layout: str = ""


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


STORAGE_TYPES = (TensorStorageMetadata, BytesStorageMetadata)


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
    format_version: object = None


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = dataclasses.field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "offset", Size(offset) if offset is not None else None)
        object.__setattr__(self, "index", index)


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(list(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


_LAYOUT = re.compile(r"^\(([^)]*)\) \[(.*)\]$")


def _mesh_boxes(shape, layout):
    """Every mesh coordinate's box (offsets, sizes) of a tensor of `shape` laid out as `layout` ("(axis0=2)
    [S(0)]": the mesh's axes and sizes, then a placement per axis), in rank order; None when the layout is not
    one of Shard / Replicate placements this reads."""
    m = _LAYOUT.match(layout or "")
    if not m:
        return None
    try:
        sizes = [int(a.split("=")[1]) for a in m.group(1).split(",")]
    except (IndexError, ValueError):
        return None
    placements = [p.strip() for p in m.group(2).split(",")]
    if len(placements) != len(sizes) or not all(p == "R" or re.fullmatch(r"S\(\d+\)", p) for p in placements):
        return None
    boxes = []
    for coordinate in itertools.product(*[range(n) for n in sizes]):
        start, length = [0] * len(shape), list(shape)
        for c, k, p in zip(coordinate, sizes, placements):
            if p == "R":
                continue
            d = int(p[2:-1])
            if d >= len(shape):
                return None
            chunk = -(-length[d] // k)  # torch.chunk's pieces: the last ones short or empty
            lo = min(c * chunk, length[d])
            start[d], length[d] = start[d] + lo, min(lo + chunk, length[d]) - lo
        if (start, length) not in boxes:
            boxes.append((start, length))
    return boxes


def _chunks(shape, layout, saved):
    """The saved chunks, with the empty pieces of an uneven sharding listed too (torch lists each rank's chunk,
    empty or not), in rank order; as saved when the layout does not account for them."""
    chunks = [ChunkStorageMetadata(Size(o), Size(s)) for o, s in saved]
    boxes = _mesh_boxes(shape, layout)
    if boxes is None:
        return chunks
    full = [(o, s) for o, s in boxes if all(s)]
    if sorted((list(o), list(s)) for o, s in saved) != sorted(full) or len(full) == len(boxes):
        return chunks
    return [ChunkStorageMetadata(Size(o), Size(s)) for o, s in boxes]


def _tessel_index(path):
    """metadata.json's chunk and value records (None when it cannot be read as JSON)."""
    import json
    try:
        with open(os.path.join(path, "metadata.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _storage_data(path, entries):
    """{MetadataIndex: _StorageInfo} of each chunk (its file, byte offset and length) and each value (kept in
    metadata.json itself), as torch's storage_data maps each index to where its bytes are."""
    from ._torch_format import _StorageInfo
    index = _tessel_index(path) or {}
    files = [f.get("name") for f in index.get("files", [])]
    out = {}
    for fqn, entry in entries.items():
        if isinstance(entry, BytesStorageMetadata):
            out[MetadataIndex(fqn)] = _StorageInfo("metadata.json", 0, 0)
            continue
        records = {tuple(c["offsets"]): c for c in index.get("tensors", {}).get(fqn, {}).get("chunks", [])}
        for i, chunk in enumerate(entry.chunks):
            c = records.get(tuple(chunk.offsets), {})
            name = files[c["file"]] if isinstance(c.get("file"), int) and c["file"] < len(files) else None
            out[MetadataIndex(fqn, chunk.offsets, i)] = _StorageInfo(name, c.get("byte_offset", 0),
                                                                     c.get("byte_length", 0))
    return out


def read(path, paths=None):
    """The Metadata of the checkpoint in directory `path` (FileNotFoundError if it holds none). Keys come in the
    order they were saved (the flattening order: `paths`, {flat key: its path of keys}, else the paths file
    rank 0 wrote), which also gives torch's planner_data."""
    from ... import _C
    from . import _torch_format
    tensors, others, save_id, world_size, version = _C._dcp_metadata(path)
    if paths is None:
        paths = _torch_format.read_paths(path) or {}
    entries = {}
    for fqn, (dtype, shape, layout, chunks) in tensors.items():
        entries[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=dtype, strides=_contiguous_strides(shape)),
            Size(shape), _chunks(shape, layout, chunks), layout)
    for key in others:
        entries[key] = BytesStorageMetadata()
    order = [k for k in paths if k in entries] + sorted(k for k in entries if k not in paths)
    entries = {k: entries[k] for k in order}
    planner_data = {k: tuple(paths[k]) for k in order if k in paths}
    return Metadata(entries, planner_data=planner_data, storage_data=_storage_data(path, entries),
                    storage_meta=StorageMeta(checkpoint_id=pathlib.Path(path), save_id=save_id),
                    version="1.0.0", world_size=world_size, format_version=version)
