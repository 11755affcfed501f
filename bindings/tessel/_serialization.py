"""torch.save / torch.load for state dicts: tessel.save(obj, f) writes torch.save's zip format (_torch_zip.py:
torch.load reads it, weights_only included, and tessel.load reads it back; dtype and requires_grad kept).
Files of tessel.save before it wrote that format (a plain pickle, tensors as numpy arrays) still load.

tessel.load also reads the files torch.save writes (the zip format of torch >= 1.6): tensors and
parameters (views, strides and shared storages kept as values; every dtype tessel has: float32/64/16,
bfloat16, int64/32/16/8, uint8, bool), inside dicts,
OrderedDicts, lists and tuples — a torch state dict or checkpoint of them, loaded on the CPU whatever
device it was saved from. Its unpickler builds nothing else (torch's weights_only=True semantics): any
other class in the file is an UnpicklingError naming it (weights_only=False builds them, as torch's).

DTensors are refused: each rank holds a shard, and a file of one rank's shard is not the model. A sharded
checkpoint that reloads at another world size is tessel.distributed.checkpoint's (DCP's).

    tessel.save({"model": model.state_dict(), "optim": opt.state_dict()}, "ckpt.pt")
    ck = tessel.load("ckpt.pt"); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])
"""
import codecs
import collections
import io
import os
import pickle
import zipfile

import numpy as np

from . import _C

_BF16 = "bfloat16"


def _rebuild(array, dtype_name, requires_grad):
    t = _C._from_numpy(array)
    if dtype_name == _BF16:
        t = t.to(_C.dtype.bfloat16)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _reduce(self):
    if self.is_distributed:
        raise TypeError("pickling a DTensor (placements %s): a file of one rank's shard is not the tensor; save "
                        "sharded state with tessel.distributed.checkpoint.save (DCP), or full_tensor() first"
                        % (self.placements,))
    name = str(self.dtype).rsplit(".", 1)[-1]
    array = (self.float() if name == _BF16 else self).detach().numpy()
    return _rebuild, (array, name, bool(self.requires_grad and self.is_leaf))


_C.Tensor.__reduce__ = _reduce


def _deepcopy(self, memo):
    """copy.deepcopy, as torch's Tensor.__deepcopy__: a leaf's values cloned (a DTensor keeps its mesh and
    placements: each rank clones its own piece; it went through pickling, which a DTensor refuses), with its
    requires_grad and a deep copy of its .grad; a tensor with autograd history raises torch's error."""
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol "
                           "at the moment.  If you were attempting to deepcopy a module, this may be because of a "
                           "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
    with _C._GradMode(False):
        new = self.clone()
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    if self.grad is not None:
        import copy
        new.grad = copy.deepcopy(self.grad, memo)
    return new


_C.Tensor.__deepcopy__ = _deepcopy


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True, **kwargs):
    """torch.save: obj (tensors, state dicts, anything picklable) as torch.save's zip file at f (a path or a
    binary file object). Objects other than tensors, numbers, strings and containers need weights_only=False
    to load, in torch and tessel alike."""
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("tessel.save: the legacy (_use_new_zipfile_serialization=False) format")
    from ._torch_zip import dump
    if hasattr(f, "write"):
        if hasattr(f, "seekable") and f.seekable():
            dump(obj, f)
        else:  # a pipe: zipfile wants to seek, so build it in memory first
            buf = io.BytesIO()
            dump(obj, buf)
            f.write(buf.getvalue())
        return
    with open(os.fspath(f), "wb") as out:
        dump(obj, out)


# torch.save's zip format: <name>/data.pkl (protocol-2 pickle whose tensors are persistent ids of
# storages), <name>/data/<key> (each storage's raw bytes), <name>/byteorder.
_TORCH_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": _BF16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class _StorageType:
    def __init__(self, name):
        self.name = name


def _torch_tensor(storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    array, dtype_name = storage
    size, stride = tuple(size), tuple(stride)
    if any(n == 0 for n in size):
        view = np.zeros(size, dtype=array.dtype)
    else:
        end = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if offset < 0 or end > array.size:
            raise pickle.UnpicklingError("tessel.load: a tensor of shape %s reaches past its storage of %d elements"
                                         % (size, array.size))
        view = np.lib.stride_tricks.as_strided(array[offset:], size, [s * array.itemsize for s in stride])
    view = view.copy(order="C")  # (np.ascontiguousarray would make a 0-d tensor 1-d)
    if dtype_name == _BF16:  # the raw bits: widen to float32 (exact), then back to bfloat16
        return _rebuild((view.astype(np.uint32) << 16).view(np.float32), _BF16, requires_grad)
    return _rebuild(view, str(view.dtype), requires_grad)


def _torch_parameter(data, requires_grad, backward_hooks=None, state=None):
    data.requires_grad_(bool(requires_grad))
    return data


def _refuse_module(cls, _recipe):
    """A weights_only load of a whole module (as torch's: its class is not an allowed global)."""
    raise pickle.UnpicklingError("tessel.load: weights_only load failed: unsupported global %s.%s (a whole module; "
                                 "pass weights_only=False for a file you trust)" % (cls.__module__, cls.__qualname__))


class _TorchUnpickler(pickle.Unpickler):
    _CLASSES = {
        ("torch._utils", "_rebuild_tensor_v2"): _torch_tensor,
        ("torch._utils", "_rebuild_parameter"): _torch_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _torch_parameter,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch", "Size"): tuple,
        ("_codecs", "encode"): codecs.encode,  # how protocol-2 pickles write bytes (torch's weights_only allows it)
        ("_io", "BytesIO"): io.BytesIO,  # torch's DCP saves an io.BytesIO value so (harmless: a buffer)
        ("io", "BytesIO"): io.BytesIO,
    }

    def __init__(self, data, archive, prefix, weights_only=True):
        super().__init__(data)
        self._archive, self._prefix, self._storages = archive, prefix, {}
        self._weights_only = weights_only

    def find_class(self, module, name):
        if module == "torch" and name in _TORCH_STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) in self._CLASSES:
            return self._CLASSES[(module, name)]
        allowed = _safe_global(module, name)
        if allowed is not None:  # tessel.serialization.add_safe_globals
            return allowed
        if not self._weights_only and module.split(".")[0] != "torch":  # torch's weights_only=False
            return super().find_class(module, name)
        if (module, name) == ("tessel.nn._pickle", "_rebuild"):
            return _refuse_module  # a whole module: the error names its class (the next global pickle reads)
        raise pickle.UnpicklingError("tessel.load: %s.%s in a torch file is not supported (tessel reads tensors, "
                                     "parameters, numbers, strings and dicts / lists / tuples of them)"
                                     % (module, name))

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError("tessel.load: unsupported persistent id %r in a torch file" % (pid,))
        _, kind, key, _location, numel = pid
        if key not in self._storages:
            dtype = _TORCH_STORAGE_DTYPES[kind.name]
            raw = self._archive.read("%s/data/%s" % (self._prefix, key))
            array = np.frombuffer(raw, dtype=np.uint16 if dtype == _BF16 else dtype, count=numel)
            self._storages[key] = (array, dtype if dtype == _BF16 else str(array.dtype))
        return self._storages[key]


_SAFE_GLOBALS = []  # tessel.serialization.add_safe_globals's list


def _safe_global(module, name):
    for entry in _SAFE_GLOBALS:
        obj, path = entry if isinstance(entry, tuple) else (entry, None)
        full = path or "%s.%s" % (getattr(obj, "__module__", ""), getattr(obj, "__qualname__", ""))
        if full == "%s.%s" % (module, name):
            return obj
    return None


def _load_torch_zip(src, weights_only=True):
    with zipfile.ZipFile(src) as archive:
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise pickle.UnpicklingError("tessel.load: a zip file that is not torch.save's (no single data.pkl)")
        prefix = pkl[0][:-len("/data.pkl")]
        order = prefix + "/byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise pickle.UnpicklingError("tessel.load: a big-endian torch file")
        return _TorchUnpickler(io.BytesIO(archive.read(pkl[0])), archive, prefix, weights_only).load()


_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # the first object of a pre-1.6 torch.save file


def _load_pickle(src):
    obj = pickle.load(src)
    if isinstance(obj, int) and obj == _LEGACY_TORCH_MAGIC:
        raise pickle.UnpicklingError("tessel.load: the legacy (pre-1.6, _use_new_zipfile_serialization=False) "
                                     "torch.save format is not supported; re-save it with a current torch")
    return obj


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **kwargs):
    """tessel.save's pickles, and torch.save's zip files (see the module docstring); map_location is
    accepted and ignored (everything loads on the CPU). weights_only=False (torch's) lets a torch.save file's
    other classes (numpy arrays, your own) be imported and built, as pickle does; only for trusted files."""
    strict = weights_only is not False
    if hasattr(f, "read"):
        seekable = f.seekable() if hasattr(f, "seekable") else False
        if seekable:  # peek at the zip signature
            start = f.tell()
            head = f.read(4)
            f.seek(start)
            if head == _ZIP_MAGIC:
                return _load_torch_zip(f, strict)
        elif hasattr(f, "peek") and f.peek(4)[:4] == _ZIP_MAGIC:  # a buffered pipe: zip needs seeking
            return _load_torch_zip(io.BytesIO(f.read()), strict)
        return _load_pickle(f)
    with open(os.fspath(f), "rb") as src:
        if src.read(4) == _ZIP_MAGIC:  # the leading signature, as above (not zipfile.is_zipfile's search)
            src.seek(0)
            return _load_torch_zip(src, strict)
        src.seek(0)
        return _load_pickle(src)
