"""Checkpoints in torch's DCP file format (torch.distributed.checkpoint's FileSystemWriter): a directory with a
pickled `.metadata` (Metadata: each key's global size, dtype and saved chunks; where each chunk's bytes are)
and `__<rank>_<n>.distcp` files in which every chunk, and every non-tensor value, is one torch.save archive.

dcp.load reads such a directory straight into a state dict of any layout (each rank reads only the chunks that
overlap its own pieces, so a checkpoint torch saved on 8 ranks loads on 2), and
FileSystemReader(path).read_metadata() describes it. Keys follow torch's flattening: nested dicts join with
".", and a list is entered (its items keyed 0, 1, ...) when it holds a dict, a list or a tensor (an optimizer's
param_groups), else it is one value ("params"). A saved dtype that differs from the target's is cast, as
torch's load copies. Nothing here imports torch: the metadata unpickler builds tessel's metadata classes and
refuses every other class, as tessel.load does for torch.save files.

Written by hand because no library reads this format without torch itself.
"""
import enum
import io
import os
import pathlib
import pickle

from ... import _C
from ..._serialization import _load_torch_zip
from ..._tensor import Size
from . import metadata as _md

METADATA_FILE = ".metadata"


# [Note: .metadata marker] tessel's checkpoint is described by metadata.json; it also writes a .metadata file
# holding this marker, because tools written for torch find a committed DCP checkpoint by that file's presence
# (torchtitan's _find_load_step and its keep_latest_k purge probe step-N/.metadata: without it a restarted
# job found no checkpoint and silently started from scratch). torch's DCP cannot read tessel's format (its
# unpickling of .metadata fails on the marker); dcp_to_torch_dcp converts. The marker starts as a pickle whose one
# global names no importable module, so torch's pickle.load fails with a ModuleNotFoundError that says what to do
# (its reader raised "pickle data was truncated" on the plain text); the text after the pickle's STOP says it too.
_MARKER = (b"\x80\x02ctessel_dcp_checkpoint__convert_with_tessel_dcp_to_torch_dcp\nmetadata_json\n.\n"
           b"TESSEL-DCP: this checkpoint is in tessel's format, described by metadata.json; "
           b"tessel.distributed.checkpoint.format_utils.dcp_to_torch_dcp converts it to torch's.\n")
_OLD_MARKERS = (b"TESSEL-DCP: this checkpoint is in tessel's format, described by metadata.json; "
                b"tessel.distributed.checkpoint.format_utils.dcp_to_torch_dcp converts it to torch's.\n",)


PATHS_FILE = ".tessel_paths.json"  # flat key -> its path of keys (torch keeps this in metadata.planner_data)


def write_marker(path, paths=None):
    """The marker and the keys' paths, each written whole under a temporary name and renamed into place (the
    paths first): a reader sees a file complete or not at all (a truncated .metadata read as torch's pickle)."""
    if paths:
        import json
        _replace_with(os.path.join(path, PATHS_FILE), json.dumps(paths).encode())
    _replace_with(os.path.join(path, METADATA_FILE), _MARKER)


def _replace_with(target, data):
    tmp = "%s.tmp.%d" % (target, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, target)


def read_paths(path):
    """The flat keys' paths of a checkpoint tessel saved (None for one saved before they were kept)."""
    import json
    try:
        with open(os.path.join(path, PATHS_FILE)) as f:
            return {k: tuple(v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return None


def _is_marker(md_path):
    with open(md_path, "rb") as f:
        head = f.read(len(_MARKER))
    return head == _MARKER or any(head.startswith(m) for m in _OLD_MARKERS)  # (checkpoints of earlier builds)


def is_torch_checkpoint(path):
    """Whether directory `path` holds a checkpoint in torch's DCP format: its .metadata (not tessel's marker),
    and no tessel metadata.json written after it (a directory saved in one format and then the other holds
    both; the later save is the checkpoint)."""
    torch_md, tessel_md = os.path.join(path, METADATA_FILE), os.path.join(path, "metadata.json")
    if not os.path.isfile(torch_md) or _is_marker(torch_md):
        return False
    return not os.path.isfile(tessel_md) or os.stat(torch_md).st_mtime_ns > os.stat(tessel_md).st_mtime_ns


class _StorageInfo:
    """torch's filesystem _StorageInfo: where one chunk's bytes are (relative_path, offset, length)."""

    def __init__(self, relative_path=None, offset=0, length=0, transform_descriptors=None):
        self.relative_path, self.offset, self.length = relative_path, offset, length
        self.transform_descriptors = transform_descriptors

    def __repr__(self):
        return "_StorageInfo(relative_path=%r, offset=%d, length=%d)" % (self.relative_path, self.offset, self.length)


class _MemFormat(enum.Enum):  # torch's _MEM_FORMAT_ENCODING (TensorProperties pickles memory_format as one)
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


def _dtype(name):
    if name in ("complex64", "complex128", "cfloat", "cdouble"):  # a checkpoint holding one still reads
        from ... import _complex
        return _complex.complex64 if name in ("complex64", "cfloat") else _complex.complex128
    d = getattr(_C.dtype, name, None)
    if not isinstance(d, _C.dtype):
        raise pickle.UnpicklingError("checkpoint: torch.%s in %s is not a dtype tessel has" % (name, METADATA_FILE))
    return d


def _getattr(obj, name):
    if obj is not _MemFormat:  # the only getattr torch's metadata pickles
        raise pickle.UnpicklingError("checkpoint: getattr(%r, %r) in %s" % (obj, name, METADATA_FILE))
    return getattr(_MemFormat, name)


class _MetadataUnpickler(pickle.Unpickler):
    _CLASSES = {
        "torch.distributed.checkpoint.metadata": {
            "Metadata": _md.Metadata, "TensorStorageMetadata": _md.TensorStorageMetadata,
            "BytesStorageMetadata": _md.BytesStorageMetadata, "ChunkStorageMetadata": _md.ChunkStorageMetadata,
            "TensorProperties": _md.TensorProperties, "MetadataIndex": _md.MetadataIndex,
            "StorageMeta": _md.StorageMeta, "_MEM_FORMAT_ENCODING": _MemFormat},
        "torch.distributed.checkpoint.filesystem": {"_StorageInfo": _StorageInfo},
        "torch.serialization": {"_get_layout": str},  # the layout's name ("torch.strided")
        "builtins": {"getattr": _getattr},
        "__builtin__": {"getattr": _getattr},  # protocol 2 names builtins so
        "pathlib": {"PosixPath": pathlib.PurePosixPath, "PurePosixPath": pathlib.PurePosixPath},
        "collections": {"OrderedDict": dict},
    }

    def find_class(self, module, name):
        if module == "torch":
            return Size if name == "Size" else _dtype(name)
        found = self._CLASSES.get(module, {}).get(name)
        if found is None:
            raise pickle.UnpicklingError("checkpoint: %s.%s in %s is not part of torch's DCP metadata"
                                         % (module, name, METADATA_FILE))
        return found


def read_metadata(path):
    """The checkpoint's Metadata (metadata.py's classes; storage_data maps MetadataIndex to _StorageInfo)."""
    with open(os.path.join(path, METADATA_FILE), "rb") as f:
        md = _MetadataUnpickler(f).load()
    if not isinstance(md, _md.Metadata):
        raise pickle.UnpicklingError("checkpoint: %s holds a %s, not torch's Metadata"
                                     % (os.path.join(path, METADATA_FILE), type(md).__name__))
    return md


def _is_terminal(value):
    """torch's traverse_state_dict: a dict is entered; a list too when it holds a tensor, or a dict or list
    that is entered; anything else is one value."""
    if isinstance(value, dict):
        return False
    if not isinstance(value, list):
        return True
    return not any(isinstance(v, _C.Tensor) or (isinstance(v, (dict, list)) and not _is_terminal(v)) for v in value)


def _leaves(tree):
    """(flat key, container, key in it, path of keys) of every leaf in torch's flattening (keys joined with
    "."); ValueError for two leaves with one flat key."""
    seen = set()

    def visit(container, prefix, path):
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for k, v in items:
            key = "%s.%s" % (prefix, k) if prefix else str(k)
            step = path + (k if isinstance(container, list) else str(k),)  # torch's paths: a dict's keys as str
            if _is_terminal(v) or isinstance(v, _C.Tensor):
                if key in seen:
                    raise ValueError("duplicated flatten key %s" % key)
                seen.add(key)
                yield key, container, k, step
            else:
                yield from visit(v, key, step)

    return visit(tree, "", ())


def flatten(state_dict):
    """{flat key: (container, key in it)} in torch's flattening (keys joined with ".")."""
    return {key: (container, k) for key, container, k, _ in _leaves(state_dict)}


class _Reader:
    """Reads chunks and values by their _StorageInfo (each is read when needed and not kept: a rank holds at
    most one saved chunk beyond its own pieces at a time)."""

    def __init__(self, path, md):
        self.path, self.md, self.bytes_read = path, md, 0
        self.where = {}  # fqn -> [(offsets, sizes, storage info)] (offsets None for a non-tensor value)
        for index, info in (md.storage_data or {}).items():
            self.where.setdefault(index.fqn, []).append((index.offset, info))

    def archive(self, info):
        with open(os.path.join(self.path, info.relative_path), "rb") as f:
            f.seek(info.offset)
            raw = f.read(info.length)
        if len(raw) != info.length:
            raise RuntimeError("checkpoint: %s ends before byte %d (a chunk of %d bytes at %d)"
                               % (info.relative_path, info.offset + info.length, info.length, info.offset))
        self.bytes_read += len(raw)
        return _load_torch_zip(io.BytesIO(raw))

    def value(self, fqn):
        return self.archive(self.where[fqn][0][1])

    def chunk_info(self, fqn, offsets):
        for offset, info in self.where.get(fqn, []):
            if tuple(offset) == tuple(offsets):
                return info
        raise RuntimeError("checkpoint: the chunk of '%s' at %s has no storage entry in %s"
                           % (fqn, tuple(offsets), METADATA_FILE))


def _local_box(target):
    """(local tensor, [(global offset, length)] per dim) of a dense tensor or this rank's DTensor piece."""
    if not target.is_distributed:
        return target, [(0, n) for n in target.shape]
    coordinate = tuple(target.device_mesh.get_coordinate())
    for _, coord, box in _C._rank_regions(target):
        if tuple(coord) == coordinate:
            return target.to_local(), list(box)
    raise RuntimeError("checkpoint: this rank holds no piece of a DTensor on %s" % target.device_mesh)


def _fill(fqn, target, entry, reader):
    if tuple(entry.size) != tuple(target.shape):
        raise RuntimeError("checkpoint: '%s' has shape %s in the checkpoint, the state dict's is %s"
                           % (fqn, tuple(entry.size), tuple(target.shape)))
    local, box = _local_box(target)
    covered, want = 0, 1
    for _, n in box:
        want *= n
    with _C._GradMode(False):
        for chunk in entry.chunks:
            lo = [max(b0, c0) for (b0, _), c0 in zip(box, chunk.offsets)]
            hi = [min(b0 + bn, c0 + cn) for (b0, bn), c0, cn in zip(box, chunk.offsets, chunk.sizes)]
            if any(h <= low for low, h in zip(lo, hi)) and local.dim() > 0:
                continue
            data = reader.archive(reader.chunk_info(fqn, chunk.offsets))
            if not isinstance(data, _C.Tensor) or tuple(data.shape) != tuple(chunk.sizes):
                raise RuntimeError("checkpoint: the chunk of '%s' at %s holds %s, not a tensor of shape %s"
                                   % (fqn, tuple(chunk.offsets), type(data).__name__, tuple(chunk.sizes)))
            if local.dim() == 0:
                local.copy_(data.to(local.dtype))
                covered = 1
                continue
            dst = local[tuple(slice(low - b0, h - b0) for low, h, (b0, _) in zip(lo, hi, box))]
            src = data[tuple(slice(low - c0, h - c0) for low, h, c0 in zip(lo, hi, chunk.offsets))]
            dst.copy_(src.to(local.dtype))
            n = 1
            for low, h in zip(lo, hi):
                n *= h - low
            covered += n
    if covered != want:
        raise RuntimeError("checkpoint: the saved chunks of '%s' cover %d of the %d elements this rank needs"
                           % (fqn, covered, want))


def whole_complex(path, md, fqn):
    """The complex tensor `fqn` of torch's checkpoint in `path` (metadata md), assembled from its chunks."""
    from ..._complex import view_as_complex, view_as_real
    entry, reader = md.state_dict_metadata[fqn], _Reader(path, md)
    out = _C._full(list(entry.size) + [2], 0.0, entry.properties.dtype.to_real())
    with _C._GradMode(False):
        for chunk in entry.chunks:
            data = reader.archive(reader.chunk_info(fqn, chunk.offsets))
            out[tuple(slice(o, o + n) for o, n in zip(chunk.offsets, chunk.sizes))].copy_(view_as_real(data))
    return view_as_complex(out)


def load(state_dict, path, strict):
    """Fills state_dict (nested, in place) from torch's DCP checkpoint in `path`; returns load()'s report."""
    return prepare_load(state_dict, path, strict)()


def prepare_load(state_dict, path, strict):
    """The read of state_dict from torch's DCP checkpoint in `path`, once every key is checked as torch's planner
    checks it (a key the checkpoint lacks when strict, a tensor of another size, a tensor saved where the state
    dict holds a value): nothing is read when one fails. A value saved where the state dict holds a tensor
    replaces it, as torch's."""
    md = read_metadata(path)
    entries = md.state_dict_metadata
    flat = flatten(state_dict)
    missing = []
    for key, (container, k) in flat.items():
        if key not in entries:
            if strict:
                raise RuntimeError("Missing key in checkpoint state_dict: %s." % key)
            missing.append(key)
            continue
        target, entry = container[k], entries[key]
        if not isinstance(entry, _md.TensorStorageMetadata):
            continue
        if getattr(entry.properties.dtype, "is_complex", False):
            raise NotImplementedError("checkpoint: '%s' is a %s tensor in %s: tessel does not read complex tensors "
                                      "from torch's format (leave the key out of the state dict to load the rest)"
                                      % (key, entry.properties.dtype, path))
        if not isinstance(target, _C.Tensor):
            raise ValueError("Invalid checkpoint metadata for %s, expected BytesStorageMetadata but found %s"
                             % (key, _md.TensorStorageMetadata))
        if tuple(entry.size) != tuple(target.shape):
            raise ValueError("Size mismatch between saved %r and current: %r for %s"
                             % (Size(entry.size), Size(target.shape), key))

    def read():
        reader = _Reader(path, md)
        for key, (container, k) in flat.items():
            if key in missing:
                continue
            entry = entries[key]
            if isinstance(entry, _md.TensorStorageMetadata):
                _fill(key, container[k], entry, reader)
            else:
                container[k] = reader.value(key)
        return {"missing_keys": missing, "unexpected_keys": [k for k in entries if k not in flat],
                "bytes_read": reader.bytes_read}
    return read


# ---- writing: one process writes a whole state dict as torch's DCP checkpoint (format_utils.dcp_to_torch_dcp) ----

_TORCH_MD = "torch.distributed.checkpoint.metadata"


def _properties_state(self):
    return self.state


_Classes = None


def _classes():
    """Stand-ins that pickle as torch's metadata classes (made on first use)."""
    global _Classes
    if _Classes is None:
        from ..._torch_zip import torch_class
        names = ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                 "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
        _Classes = {n: torch_class(_TORCH_MD, n) for n in names}
        _Classes["TensorProperties"] = torch_class(_TORCH_MD, "TensorProperties", _properties_state)
        _Classes["_StorageInfo"] = torch_class("torch.distributed.checkpoint.filesystem", "_StorageInfo")
    return _Classes


def _new(name, **fields):
    obj = _classes()[name].__new__(_classes()[name])
    obj.__dict__.update(fields)
    return obj


class _Call:
    """Pickles as func(*args) (torch's layouts and enum members are pickled as such calls)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _size(shape):
    from ..._torch_zip import TorchGlobal
    return _Call(TorchGlobal("torch", "Size"), tuple(int(n) for n in shape))


def _tensor_entry(t):
    from ..._tensor import _contiguous_strides
    from ..._torch_zip import TorchGlobal
    strides = _contiguous_strides(t.shape)
    props = _new("TensorProperties")
    props.state = (TorchGlobal("torch", str(t.dtype).rsplit(".", 1)[-1]),
                   _Call(TorchGlobal("torch.serialization", "_get_layout"), "torch.strided"), False,
                   _Call(getattr, _classes()["_MEM_FORMAT_ENCODING"], "TORCH_CONTIGUOUS_FORMAT"), False,
                   tuple(strides))
    chunk = _new("ChunkStorageMetadata", offsets=_size([0] * t.dim()), sizes=_size(t.shape))
    return _new("TensorStorageMetadata", properties=props, size=_size(t.shape), chunks=[chunk])


def flatten_with_paths(tree):
    """({flat key: value}, {flat key: its path of keys}) in torch's flattening of a nested state dict."""
    values, paths = {}, {}
    for key, container, k, path in _leaves(tree):
        values[key], paths[key] = container[k], path
    return values, paths


def save_whole(flat, path, file_name="__0_0.distcp", planner_data=None):
    """Writes {flat key: full tensor or value} as torch's DCP checkpoint in directory `path`: every tensor one
    chunk, every value torch.save'd, all in one file; .metadata last (torch's commit). planner_data: torch's
    {flat key: path of keys}, by which its dcp_to_torch_save nests the entries again (None: it gives them flat;
    torch's dcp.load matches them to any nesting either way)."""
    from ..._torch_zip import dumps, pickle_dumps
    os.makedirs(path, exist_ok=True)
    entries, storage = {}, {}
    with open(os.path.join(path, file_name), "wb") as f:
        for key, value in flat.items():
            is_tensor = isinstance(value, _C.Tensor)
            raw = dumps(value)
            offset = f.tell()
            f.write(raw)
            index = _new("MetadataIndex", fqn=key, offset=_size([0] * value.dim()) if is_tensor else None,
                         index=0 if is_tensor else None)
            storage[index] = _new("_StorageInfo", relative_path=file_name, offset=offset, length=len(raw),
                                  transform_descriptors=None)
            entries[key] = _tensor_entry(value) if is_tensor else _new("BytesStorageMetadata")
        f.flush()
        os.fsync(f.fileno())
    md = _new("Metadata", state_dict_metadata=entries, planner_data=planner_data, storage_data=storage,
              storage_meta=_new("StorageMeta", checkpoint_id=None, save_id="tessel", load_id=None, modules=[]),
              version="1.0.0")
    tmp = os.path.join(path, METADATA_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(pickle_dumps(md))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, METADATA_FILE))
