"""tessel.distributed.checkpoint.hf_storage: torch's HuggingFace storages (safetensors files) for save and load."""
import os

from ... import _C
from .filesystem import _FileSystemStorage
from .storage import StorageReader, StorageWriter

__all__ = ["HuggingFaceStorageWriter", "HuggingFaceStorageReader"]


class HuggingFaceStorageWriter(_FileSystemStorage, StorageWriter):
    """torch's dcp.HuggingFaceStorageWriter: save(..., storage_writer=HuggingFaceStorageWriter(path)) writes
    path/model.safetensors, every tensor full (gathered from any layout) and named by its FQN, the
    non-tensor values in its "__metadata__"; the checkpoint is first saved in tessel's layout to
    path/.tessel_dcp, exported by the group's first rank, and removed. One file: the sharding knobs
    (fqn_to_index_mapping, save_distributed, enable_consolidation) are accepted and change nothing."""

    def __init__(self, path, fqn_to_index_mapping=None, thread_count=1, save_distributed=False,
                 enable_consolidation=False, thread_count_consolidation=1, **kwargs):
        super().__init__(path)


class HuggingFaceStorageReader(_FileSystemStorage, StorageReader):
    """torch's dcp.HuggingFaceStorageReader: load(..., storage_reader=HuggingFaceStorageReader(path)) fills a
    state dict of any layout (each rank reads only its boxes) from path's safetensors files: those of
    model.safetensors.index.json's weight_map when there is one, else every *.safetensors file."""

    def files(self):
        index = os.path.join(self.path, "model.safetensors.index.json")
        if os.path.exists(index):
            import json
            with open(index) as f:
                names = sorted(set(json.load(f)["weight_map"].values()))
        else:
            names = sorted(n for n in os.listdir(self.path) if n.endswith(".safetensors"))
        if not names:
            raise FileNotFoundError("HuggingFaceStorageReader: no .safetensors file in %s" % self.path)
        return [os.path.join(self.path, n) for n in names]


_SAFETENSORS_DTYPES = {"F32": "float32", "F64": "float64", "BF16": "bfloat16", "F16": "float16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _safetensors_specs(path):
    """{key: (dtype name, shape)} from a safetensors file's header (8 bytes of length, then JSON)."""
    import json
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: (_SAFETENSORS_DTYPES.get(v["dtype"]), tuple(v["shape"])) for k, v in header.items()
            if k != "__metadata__"}


def _write_safetensors_index(path, file_name):
    """model.safetensors.index.json beside a one-file export, as torch's consolidated HF checkpoints have (it
    names the file of each tensor; torchtitan finds a step's HF checkpoint by it)."""
    import json
    file_path = os.path.join(path, file_name)
    weight_map = {k: file_name for k in _safetensors_specs(file_path)}
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": os.path.getsize(file_path)}, "weight_map": weight_map}, f, indent=2)


def _load_safetensors(reader, flat, strict):
    """Each file fills the keys it holds; keys no file holds are missing (a RuntimeError when strict). A tensor
    stored in another dtype (a bfloat16 export) is read in that dtype and cast into the target, as torch's
    reader casts."""
    from ... import _dtypes
    missing, unexpected, read = set(flat), set(), 0
    for path in reader.files():
        part = {k: flat[k] for k in missing}
        casts = {}
        for key, (dtype, shape) in _safetensors_specs(path).items():
            t = part.get(key)
            if isinstance(t, _C.Tensor) and dtype is not None and str(t.dtype) != "tessel." + dtype and \
                    tuple(shape) == tuple(t.shape):
                with _C._GradMode(False):
                    casts[key] = (t, t.detach().to(getattr(_dtypes, dtype)))
                part[key] = casts[key][1]
        part, result = _C._import_safetensors(part, path)
        with _C._GradMode(False):
            for key, (target, stored) in casts.items():
                if key not in result["missing_keys"]:
                    target.copy_(stored)
                    part[key] = target
        now_missing = set(result["missing_keys"])
        for k in missing - now_missing:
            flat[k] = part[k]
        missing = now_missing
        unexpected |= set(result["unexpected_keys"])
        read += result["bytes_read"]
    unexpected -= set(flat)
    if strict and missing:
        raise RuntimeError("load: keys %s are in no safetensors file of %s" % (sorted(missing), reader.path))
    return flat, {"missing_keys": sorted(missing), "unexpected_keys": sorted(unexpected), "bytes_read": read}

