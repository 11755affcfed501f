"""torch.save / torch.load for state dicts: tessel.save(obj, f) writes torch.save's zip format (_torch_zip.py:
torch.load reads it, weights_only included, and tessel.load reads it back; dtype and requires_grad kept).
Files of tessel.save before it wrote that format (a plain pickle, tensors as numpy arrays) still load.

tessel.load also reads the files torch.save writes (the zip format of torch >= 1.6): tensors and
parameters (every dtype tessel has: float32/64/16, bfloat16, int64/32/16/8, uint8, bool, complex64/128;
strides kept, and tensors over one storage share it after loading, as torch's: views and tied weights stay
tied), inside dicts, OrderedDicts, Counters, lists, tuples and sets, with numbers, strings, dtypes, devices and
Sizes — a torch state dict or checkpoint of them, loaded on the CPU whatever device it was saved from. Its
unpickler builds nothing else (torch's weights_only=True semantics, for every file: a plain pickle is never
handed to pickle.load): any other class in the file is an UnpicklingError naming it (weights_only=False
builds them, as torch's). Both directions write each storage once (a view saved beside its base is an
offset into the base's bytes) and name torch's classes (torch.float32, torch.device, torch.Size), so
torch.load reads tessel's files with weights_only=True.

A DTensor pickles as torch's does, as this rank's piece with its mesh and placements, and loads back on the rank
that saved it (tessel/distributed/tensor/_pickle.py): a per-rank `tessel.save(model.state_dict(), ...)` of a sharded
model. A sharded checkpoint that reloads at another world size or layout is tessel.distributed.checkpoint's (DCP's).

    tessel.save({"model": model.state_dict(), "optim": opt.state_dict()}, "ckpt.pt")
    ck = tessel.load("ckpt.pt"); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])
"""
import codecs
import collections
import io
import os
import pickle
import stat
import threading
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


def _rebuild_strided(array, dtype_name, offset, size, stride, requires_grad):
    """A pickled tensor: a leaf of its shape, strides and offset over a copy of the whole storage it viewed."""
    flat = _rebuild(array, dtype_name, False)
    with _C._GradMode(False):
        t = flat.as_strided(list(size), list(stride), offset).detach()
    if requires_grad:
        t.requires_grad_(True)
    return t


def _whole_storage(t):
    """A flat tensor over all of t's storage (what its views share), or None when there is none to view."""
    if t.is_meta:
        return None
    _, nbytes = t._storage()
    if nbytes <= 0:
        return None
    with _C._GradMode(False):
        return t.detach().as_strided([nbytes // t.element_size()], [1], 0)


def _reduce(self):
    """pickle, as torch pickles a tensor: its whole storage with its shape, strides and offset (a view stays a
    view, t.t() keeps its strides), its requires_grad (a non-leaf's too: it comes back a leaf) and its attributes
    (`x.tag = 1`: torch's __dict__ state)."""
    if self.is_distributed:
        from .distributed.tensor import _pickle
        return _pickle._reduce(self)
    name = str(self.dtype).rsplit(".", 1)[-1]
    whole = _whole_storage(self)
    if whole is None:
        array = (self.float() if name == _BF16 else self).detach().numpy()
        recipe = _rebuild, (array, name, bool(self.requires_grad))
    else:
        array = (whole.float() if name == _BF16 else whole).numpy()
        recipe = _rebuild_strided, (array, name, self.storage_offset(), tuple(self.shape), tuple(self.stride()),
                                    bool(self.requires_grad))
    attrs = _C._tensor_attrs(self)
    return recipe + (dict(attrs),) if attrs else recipe


_C.Tensor.__reduce__ = _reduce


def _copy(self):
    """copy.copy, as torch's (through its __reduce_ex__ without copying the storage): a leaf over the same
    storage, with the tensor's requires_grad."""
    if self.is_distributed:
        rebuild, args = _reduce(self)
        return rebuild(*args)
    with _C._GradMode(False):
        new = self.detach()
    if self.requires_grad:
        new.requires_grad_(True)
    attrs = _C._tensor_attrs(self)
    if attrs:  # the same values in a dict of its own, as torch's copy through __reduce_ex__'s state
        new.__dict__ = dict(attrs)
    return new


_C.Tensor.__copy__ = _copy


# A deepcopy memo holding this key true copies everything but tensors, which it shares (the DataLoader's worker
# copies of a dataset: a forked worker's tensors are copy-on-write, not copies; N workers must not hold N copies).
SHARE_TENSORS = "tessel: share tensors"


def _deepcopy(self, memo):
    """copy.deepcopy, as torch's Tensor.__deepcopy__: a leaf over a copy of its storage, made once per storage
    for the whole deepcopy (memo["torch"]: copy.deepcopy([x, x[2:]]) keeps the two sharing, t.t() its strides),
    with its requires_grad and deep copies of its .grad and attributes (a DTensor keeps its mesh and placements:
    each rank clones its own piece, with no trip through pickling); a tensor with autograd history raises torch's
    error."""
    if id(self) in memo:
        return memo[id(self)]
    if memo.get(SHARE_TENSORS):
        return self
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol "
                           "at the moment.  If you were attempting to deepcopy a module, this may be because of a "
                           "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
    whole = None if self.is_distributed else _whole_storage(self)
    with _C._GradMode(False):
        if whole is None:
            new = self.clone()
        else:
            storages = memo.setdefault("torch", {})  # (the original stays alive in memo: its address is its own)
            key = self._storage()
            if key not in storages:
                storages[key] = whole.clone()
            new = storages[key].as_strided(list(self.shape), list(self.stride()), self.storage_offset()).detach()
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    import copy
    if self.grad is not None:
        new.grad = copy.deepcopy(self.grad, memo)
    attrs = _C._tensor_attrs(self)
    if attrs:  # its attributes, deep-copied as torch's __deepcopy__ copies __dict__
        new.__dict__ = copy.deepcopy(attrs, memo)
    return new


_C.Tensor.__deepcopy__ = _deepcopy


def save(obj, f, pickle_module=pickle, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """torch.save (its signature: pickle_module and pickle_protocol are accepted; the pickle is protocol 2): obj
    (tensors, state dicts, anything picklable) as torch.save's zip file at f (a path or a binary file object).
    Objects other than tensors, numbers, strings and containers need weights_only=False to load, in torch and
    tessel alike."""
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("tessel.save: the legacy (_use_new_zipfile_serialization=False) format")
    from ._torch_zip import dump
    if hasattr(f, "write"):
        if isinstance(f, (io.BytesIO, io.BufferedWriter, io.BufferedRandom, io.FileIO)) and f.seekable():
            dump(obj, f)
        else:  # a pipe, a gzip file (seekable() yet no seeking back): zipfile seeks back, so built in memory first
            buf = io.BytesIO()
            dump(obj, buf)
            f.write(buf.getvalue())
        return
    # A new file or a plain one is written beside the target and moved over it once complete (its permissions
    # kept): an object that fails to pickle (a lambda) or a crash mid-write leaves the previous file as it was,
    # never a truncated one that the next load fails on. Anything else (a symlink, a FIFO, a device, a file with
    # other hard links) is written through in place, as torch writes it.
    path = os.fspath(f)
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        raise RuntimeError("Parent directory %s does not exist." % parent)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    if old is not None and not (stat.S_ISREG(old.st_mode) and old.st_nlink == 1):
        with open(path, "wb") as out:
            return save(obj, out)
    tmp = "%s.tmp-%d-%d" % (path, os.getpid(), threading.get_ident())
    try:
        with open(tmp, "wb") as out:
            dump(obj, out)
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# torch.save's zip format: <name>/data.pkl (protocol-2 pickle whose tensors are persistent ids of
# storages), <name>/data/<key> (each storage's raw bytes), <name>/byteorder.
_TORCH_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": _BF16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
}
# torch's dtypes by their names in a pickle (torch.float32 is the global torch.float32, and its aliases)
_TORCH_DTYPES = {"float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
                 "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64", "long": "int64",
                 "int32": "int32", "int": "int32", "int16": "int16", "short": "int16", "int8": "int8",
                 "uint8": "uint8", "bool": "bool", "complex64": "complex64", "cfloat": "complex64",
                 "complex128": "complex128", "cdouble": "complex128"}


class _StorageType:
    def __init__(self, name):
        self.name = name


class _LoadedStorage:
    """One storage of a torch file, loaded once: every tensor over it is a view of `flat` (torch's shared
    storages: views, tied weights); a complex storage's flat tensor holds the interleaved real parts."""

    def __init__(self, flat, dtype_name):
        self.flat, self.dtype_name = flat, dtype_name


def _torch_tensor(storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    size, stride = [int(n) for n in size], [int(s) for s in stride]
    complex_ = storage.dtype_name.startswith("complex")
    if complex_:  # over [..., 2] of the real parts: torch's own layout of a complex storage
        size, stride, offset = size + [2], [2 * s for s in stride] + [1], 2 * offset
    flat = storage.flat
    if any(n == 0 for n in size):
        if flat.is_meta:
            from ._tensor import empty
            t = empty(size, dtype=flat.dtype, device="meta")
        else:
            t = _C._full(size, 0.0, flat.dtype)
    else:
        end = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if offset < 0 or end > flat.numel() or any(s < 0 for s in stride):
            raise pickle.UnpicklingError("tessel.load: a tensor of shape %s reaches past its storage of %d elements"
                                         % (size, flat.numel()))
        with _C._GradMode(False):  # a leaf over the shared storage (as torch's set_), not a view with history
            t = flat.as_strided(size, stride, offset).detach()
    if requires_grad:  # (a complex tensor's too: set on its real parts' leaf, before the complex view)
        t.requires_grad_(True)
    if complex_:
        from ._complex import view_as_complex
        return view_as_complex(t)
    return t


def _torch_parameter(data, requires_grad, backward_hooks=None, state=None):
    """torch's _rebuild_parameter(_with_state): a Parameter, with the attributes its state names."""
    from .nn.modules import Parameter
    p = Parameter(data, bool(requires_grad))
    for name, value in (state or {}).items():
        setattr(p, name, value)
    return p


def _rebuild_from_type(func, new_type, args, state):
    """torch's _rebuild_from_type_v2: a tensor (func(*args)) of type new_type with the attributes in state (a
    Parameter's _is_hf_initialized, a tag): torch writes tensors that carry attributes so. Attributes a plain
    tessel tensor cannot hold are left out (metadata; the values are the tensor's)."""
    t = func(*args)
    from .nn.modules import Parameter
    if not isinstance(new_type, type) or new_type is not _C.Tensor:  # torch.nn.Parameter's rebuild function
        if not isinstance(t, Parameter):
            t = Parameter(t, t.requires_grad)
    items = state[1] if isinstance(state, tuple) and len(state) == 2 else state
    for name, value in (items or {}).items():
        try:
            setattr(t, name, value)
        except AttributeError:
            pass
    return t


def _refuse_module(cls, _recipe):
    """A weights_only load of a whole module (as torch's: its class is not an allowed global)."""
    raise pickle.UnpicklingError("tessel.load: weights_only load failed: unsupported global %s.%s (a whole module; "
                                 "pass weights_only=False for a file you trust)" % (cls.__module__, cls.__qualname__))


def _torch_device(*args):
    from ._device import device
    return device(*args)


def _torch_size(dims=()):
    from ._size import Size
    return Size(dims)


def _dtype(name):
    from . import _dtypes
    if name.startswith("complex"):
        from . import _complex
        return getattr(_complex, name)
    return getattr(_dtypes, name)


_np_reconstruct = (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct


def _rebuild_dtensor(*args):  # (imported when a file names it: tessel.distributed loads after this module)
    from .distributed.tensor._pickle import _rebuild_dtensor as rebuild
    return rebuild(*args)


def _unpickle_mesh(*args):
    from .distributed.device_mesh import _unpickle_mesh as unpickle
    return unpickle(*args)


def _get_layout(name):
    """torch.serialization._get_layout: how torch pickles a layout (torch.strided is _get_layout("torch.strided"))."""
    from . import _tensor_extras
    value = getattr(_tensor_extras, name.rsplit(".", 1)[-1], None) if name.startswith("torch.") else None
    if not isinstance(value, _tensor_extras.layout):
        raise KeyError(name)
    return value


# What a weights_only load builds (torch's default allowlist, _weights_only_unpickler.py, as it applies here).
_SAFE = {
    ("torch._utils", "_rebuild_tensor_v2"): _torch_tensor,
    ("torch._utils", "_rebuild_parameter"): _torch_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _torch_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("torch", "Size"): _torch_size,
    ("torch", "device"): _torch_device,
    ("torch.serialization", "_get_layout"): _get_layout,
    ("builtins", "set"): set, ("builtins", "complex"): complex, ("builtins", "bytearray"): bytearray,
    ("__builtin__", "set"): set, ("__builtin__", "complex"): complex, ("__builtin__", "bytearray"): bytearray,
    ("torch._tensor", "_rebuild_from_type_v2"): lambda *a: _rebuild_from_type(*a),
    ("torch", "Tensor"): _C.Tensor,
    ("torch.nn.parameter", "Parameter"): lambda *a: _torch_parameter(*a),
    ("_codecs", "encode"): codecs.encode,  # how protocol-2 pickles write bytes (torch's weights_only allows it)
    ("_io", "BytesIO"): io.BytesIO,  # torch's DCP saves an io.BytesIO value so (harmless: a buffer)
    ("io", "BytesIO"): io.BytesIO,
    # DTensors (torch allows its own once torch.distributed.tensor is imported): rebuilt on the loading rank's
    # existing mesh; placements are plain records (tensor/_pickle.py, device_mesh.py's _unpickle_mesh)
    ("tessel.distributed.tensor._pickle", "_rebuild_dtensor"): _rebuild_dtensor,
    ("tessel.distributed.device_mesh", "_unpickle_mesh"): _unpickle_mesh,
    ("tessel._C", "Shard"): _C.Shard, ("tessel._C", "Replicate"): _C.Replicate, ("tessel._C", "Partial"): _C.Partial,
    ("tessel._C", "_StridedShard"): _C._StridedShard,
}


# tessel.save's files from before it wrote torch's format (plain pickles, tensors as numpy arrays): only there
_OLD_TESSEL = {
    ("tessel._serialization", "_rebuild"): _rebuild,
    ("tessel._serialization", "_rebuild_strided"): _rebuild_strided,  # (a plain pickle of a tessel tensor now)
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
}


class _SafeUnpickler(pickle.Unpickler):
    """torch's weights_only unpickler: only the globals above, tessel.serialization's safe globals and torch's
    dtypes are built; anything else (a function that would run code, a class) is an UnpicklingError naming it.
    weights_only=False builds any class, as pickle does (trusted files only)."""

    def __init__(self, data, weights_only=True, old_tessel=False):
        super().__init__(data)
        self._weights_only, self._old_tessel = weights_only, old_tessel

    def find_class(self, module, name):
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if self._old_tessel and (module, name) in _OLD_TESSEL:
            return _OLD_TESSEL[(module, name)]
        if module == "torch" and name in _TORCH_DTYPES:
            return _dtype(_TORCH_DTYPES[name])
        allowed = _safe_global(module, name)
        if allowed is not None:  # tessel.serialization.add_safe_globals
            return allowed
        if not self._weights_only and module.split(".")[0] != "torch":  # torch's weights_only=False
            return super().find_class(module, name)
        if (module, name) == ("tessel.nn._pickle", "_rebuild"):
            return _refuse_module  # a whole module: the error names its class (the next global pickle reads)
        raise pickle.UnpicklingError("tessel.load: Weights only load failed: unsupported global %s.%s (tessel "
                                     "builds tensors, parameters, numbers, strings, dtypes, devices and containers of "
                                     "them; pass weights_only=False for a file you trust, or allow the class with "
                                     "tessel.serialization.add_safe_globals)" % (module, name))


class _TorchUnpickler(_SafeUnpickler):
    def __init__(self, data, archive, prefix, weights_only=True, map_location=None):
        super().__init__(data, weights_only)
        self._archive, self._prefix, self._storages = archive, prefix, {}
        self._map_location = map_location

    def find_class(self, module, name):
        if module == "torch" and name in _TORCH_STORAGE_DTYPES:
            return _StorageType(name)
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError("tessel.load: unsupported persistent id %r in a torch file" % (pid,))
        _, kind, key, location, numel = pid
        if key not in self._storages:
            mapping = self._map_location
            target = None if callable(mapping) else _restore_location(mapping, location)
            if target == "meta":  # torch's meta storages: shapes, no bytes read
                flat, name = _meta_storage(kind.name, numel)
            else:
                flat, name = self._read_storage(kind.name, key, numel)
            if callable(mapping):  # torch's map_location(storage, location) -> the storage to use (None: its own)
                mapped = mapping(flat, location)
                flat = flat if mapped is None else mapped
            self._storages[key] = _LoadedStorage(flat, name)
        return self._storages[key]

    def _read_storage(self, kind, key, numel):
        dtype = _TORCH_STORAGE_DTYPES[kind]
        raw = self._archive.read("%s/data/%s" % (self._prefix, key))
        array = np.frombuffer(raw, dtype=np.uint16 if dtype == _BF16 else dtype, count=numel)
        if dtype == _BF16:  # the raw bits: widened to float32 (exact), then back to bfloat16
            return _rebuild((array.astype(np.uint32) << 16).view(np.float32), _BF16, False), _BF16
        if array.dtype.kind == "c":
            real = np.float32 if array.dtype == np.complex64 else np.float64
            return _C._from_numpy(np.array(array).view(real)), str(array.dtype)
        return _C._from_numpy(np.array(array)), str(array.dtype)


def _meta_storage(kind, numel):
    """A storage of `kind` on the meta device (a complex one as its interleaved real parts)."""
    from ._tensor import empty
    dtype = _TORCH_STORAGE_DTYPES[kind]
    name = _BF16 if dtype == _BF16 else str(np.dtype(dtype))
    real = {"complex64": "float32", "complex128": "float64"}.get(name)
    return empty(numel * 2 if real else numel, dtype=_dtype(real or name), device="meta"), name


def _restore_location(map_location, location):
    """torch's default_restore_location for a map_location that is not a callable: "cpu" or "meta", where a
    storage saved at `location` loads (map_location=None: the CPU, whatever device it was saved from). A CUDA
    target is torch's error on a machine without one, any other torch's "don't know how" error, and a
    map_location of another type torch's TypeError (raised at the first storage, as torch's)."""
    from ._device import device
    if map_location is None:
        return "cpu"
    if isinstance(map_location, dict):
        target = map_location.get(location, location)
    elif isinstance(map_location, (str, bytes, device)):
        target = map_location
    else:
        raise TypeError("'%s' object is not callable" % type(map_location).__name__)
    target = target.decode() if isinstance(target, bytes) else str(target)
    if target in ("cpu", "meta"):
        return target
    if target.startswith("cuda"):
        raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                           "False. If you are running on a CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")
    raise RuntimeError("don't know how to restore data location of torch.storage.UntypedStorage (tagged with %s)"
                       % target)


_SAFE_GLOBALS = []  # tessel.serialization.add_safe_globals's list


def _safe_global(module, name):
    for entry in _SAFE_GLOBALS:
        obj, path = entry if isinstance(entry, tuple) else (entry, None)
        full = path or "%s.%s" % (getattr(obj, "__module__", ""), getattr(obj, "__qualname__", ""))
        if full == "%s.%s" % (module, name):
            return obj
    return None


_MINIZ = ("PytorchStreamReader failed reading zip archive: %s. This is an internal miniz error. If you are seeing "
          "this error, there is a high likelihood that your checkpoint file is corrupted. This can happen if the "
          "checkpoint was not saved properly, was transferred incorrectly, or the file was modified after saving.")


def _open_archive(src):
    """zipfile.ZipFile(src), a file that is not a whole zip being torch's RuntimeError (miniz's reason: shorter
    than a zip's end record, else no central directory: a truncated file)."""
    start = src.tell()
    try:
        return zipfile.ZipFile(src)
    except zipfile.BadZipFile:
        size = src.seek(0, os.SEEK_END) - start
        raise RuntimeError(_MINIZ % ("not a ZIP archive" if size < 22 else "failed finding central directory")) \
            from None


def _load_torch_zip(src, weights_only=True, map_location=None):
    with _open_archive(src) as archive:
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise pickle.UnpicklingError("tessel.load: a zip file that is not torch.save's (no single data.pkl)")
        prefix = pkl[0][:-len("/data.pkl")]
        order = prefix + "/byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise pickle.UnpicklingError("tessel.load: a big-endian torch file")
        return _TorchUnpickler(io.BytesIO(archive.read(pkl[0])), archive, prefix, weights_only, map_location).load()


_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # the first object of a pre-1.6 torch.save file


def _load_pickle(src, weights_only):
    """A file that is not a zip: tessel.save's own older format (a pickle of numpy arrays), through the
    weights_only unpickler unless weights_only=False (a plain pickle would run whatever code the file names)."""
    obj = _SafeUnpickler(src, weights_only, old_tessel=True).load()
    if isinstance(obj, int) and obj == _LEGACY_TORCH_MAGIC:
        raise pickle.UnpicklingError("tessel.load: the legacy (pre-1.6, _use_new_zipfile_serialization=False) "
                                     "torch.save format is not supported; re-save it with a current torch")
    return obj


def _weights_only(weights_only, pickle_module):
    """torch.load's choice: unset, weights_only is True unless a pickle_module is given (_default_to_weights_only);
    TORCH_FORCE_WEIGHTS_ONLY_LOAD / TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (the latter only when unset) override it."""
    unset = weights_only is None
    if unset:
        weights_only = pickle_module is None
    yes = ("1", "y", "yes", "true")
    force = os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in yes
    force_no = os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in yes
    if force and force_no:
        raise RuntimeError("Only one of `TORCH_FORCE_WEIGHTS_ONLY_LOAD` or `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` "
                           "should be set, but both were set.")
    if force:
        weights_only = True
    elif force_no and unset:
        weights_only = False
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    return bool(weights_only)


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **kwargs):
    """tessel.save's files and torch.save's zip files (see the module docstring). map_location: "cpu" or "meta"
    (a string, a device, a dict of them from the saved locations; meta: no bytes read) or a callable called as
    torch calls it, fn(storage, location) -> the storage to use (here the storage is a flat tensor); a CUDA
    target is torch's error on a machine without one, any other device torch's "don't know how". weights_only
    (default True, as torch's; False with an explicit pickle_module) builds only tensors, containers, numbers,
    strings, dtypes and devices; weights_only=False builds any class a file names, as pickle does: only for
    trusted files."""
    strict = _weights_only(weights_only, pickle_module)
    mapping = map_location
    if hasattr(f, "read"):
        seekable = f.seekable() if hasattr(f, "seekable") else False
        if seekable:  # peek at the zip signature
            start = f.tell()
            head = f.read(4)
            f.seek(start)
            if head == _ZIP_MAGIC:
                return _load_torch_zip(f, strict, mapping)
        elif hasattr(f, "peek") and f.peek(4)[:4] == _ZIP_MAGIC:  # a buffered pipe: zip needs seeking
            return _load_torch_zip(io.BytesIO(f.read()), strict, mapping)
        return _load_pickle(f, strict)
    with open(os.fspath(f), "rb") as src:
        if src.read(4) == _ZIP_MAGIC:  # the leading signature, as above (not zipfile.is_zipfile's search)
            src.seek(0)
            return _load_torch_zip(src, strict, mapping)
        src.seek(0)
        return _load_pickle(src, strict)
