"""Writing torch's file formats without torch: torch.save's zip archive (what torch.load reads, weights_only
included) and pickles that name torch's classes (a DCP checkpoint's .metadata).

torch.save's zip: <name>/data.pkl, a protocol-2 pickle in which each tensor is
torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict()) and each storage a
persistent id ("storage", torch.<Kind>Storage, key, "cpu", numel) whose bytes are the record <name>/data/<key>
(little-endian, 64-byte aligned as torch writes them), plus byteorder, version and .format_version records.

pickle cannot name a global whose module it cannot import, so the pickler here writes torch's names itself: a
TorchGlobal stands for one (torch.float32, torch.Size, ...), and torch_class(module, name) makes a stand-in
class whose instances pickle as instances of torch's class (their __dict__ as the state, as a dataclass's).

Written by hand because only torch writes this format, and tessel must not depend on torch.
"""
import collections
import io
import pickle
import zipfile

import numpy as np

from . import _C

_STORAGES = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
             "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage",
             "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage",
             "complex64": "ComplexFloatStorage", "complex128": "ComplexDoubleStorage"}
_ALIGN = 64


class TorchGlobal:
    """A name in torch (module, name) that pickles as that global."""
    _cache = {}

    def __new__(cls, module, name):
        key = (module, name)
        if key not in cls._cache:
            g = super().__new__(cls)
            g.module, g.name = module, name
            cls._cache[key] = g
        return cls._cache[key]

    def __reduce_ex__(self, protocol):
        return self.name  # a string: pickle saves it as a global (the pickler below writes it unchecked)

    def __call__(self, *args, **kwargs):  # pickle wants the function of a reduce to be callable
        raise TypeError("%r stands for torch's name in a pickle; it cannot be called" % self)

    def __repr__(self):
        return "%s.%s" % (self.module, self.name)


def torch_class(module, name, getstate=None):
    """A class that pickles as torch's module.name; getstate(obj), when given, is its pickled state."""
    body = {"_torch_global": (module, name), "__module__": module, "__qualname__": name}
    if getstate is not None:
        body["__getstate__"] = getstate
    return type(name, (), body)


class Pickler(pickle._Pickler):
    """A protocol-2 pickler that writes TorchGlobal and torch_class names without importing torch; tessel
    tensors become torch tensors whose storages go to `storages` (key -> bytes) when that is a dict."""

    def __init__(self, f, storages=None):
        super().__init__(f, protocol=2)
        self._storages = storages
        self._by_memory = {}  # (address, bytes) of a storage already written -> its _Storage

    def save_global(self, obj, name=None):
        if _is_dtype(obj):  # torch.float32 is the global torch.float32
            where = ("torch", str(obj).rsplit(".", 1)[-1])
        else:
            where = (obj.module, obj.name) if isinstance(obj, TorchGlobal) else getattr(obj, "_torch_global", None)
        if where is None or not isinstance(where, tuple):
            return super().save_global(obj, name)
        self.write(pickle.GLOBAL + where[0].encode("utf-8") + b"\n" + where[1].encode("utf-8") + b"\n")
        self.memoize(obj)

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", TorchGlobal("torch", obj.kind), obj.key, "cpu", obj.numel)
        return None

    def reducer_override(self, obj):
        if _is_dtype(obj):
            return "dtype"  # a global: save_global writes torch's name
        from ._device import device
        from ._size import Size
        if isinstance(obj, device):  # torch.device(type[, index]) and torch.Size(dims), as torch pickles them
            return (TorchGlobal("torch", "device"), (obj.type,) if obj.index is None else (obj.type, obj.index))
        if isinstance(obj, Size):
            return (TorchGlobal("torch", "Size"), (tuple(obj),))
        from ._tensor_extras import layout
        if isinstance(obj, layout):  # torch.serialization._get_layout("torch.strided"), as torch pickles a layout
            return (TorchGlobal("torch.serialization", "_get_layout"), (repr(obj),))
        if self._storages is None:
            return NotImplemented
        from ._complex import ComplexTensor
        if isinstance(obj, ComplexTensor):
            return self._tensor(obj._r, obj.requires_grad, complex_of=str(obj.dtype).rsplit(".", 1)[-1])
        if not isinstance(obj, _C.Tensor):
            return NotImplemented
        from .nn.modules import Parameter
        if isinstance(obj, Parameter):  # torch's _rebuild_parameter(data, requires_grad, hooks[, state])
            from .nn.modules import _parameter_state
            state = _parameter_state(obj)
            if state:  # its attributes (`p._is_hf_initialized = True`), as torch's Parameter.__reduce_ex__
                return (TorchGlobal("torch._utils", "_rebuild_parameter_with_state"),
                        (obj.detach(), bool(obj.requires_grad), collections.OrderedDict(), state))
            return (TorchGlobal("torch._utils", "_rebuild_parameter"),
                    (obj.detach(), bool(obj.requires_grad), collections.OrderedDict()))
        if obj.is_distributed:  # this rank's piece, its mesh and placements (distributed/tensor/_pickle.py)
            from .distributed.tensor import _pickle
            return _pickle._reduce(obj)
        attrs = _C._tensor_attrs(obj)
        if attrs:  # a tensor with attributes (`x.tag = 1`), as torch's Tensor.__reduce_ex__ writes one
            func, args = self._tensor(obj, obj.requires_grad)
            return (TorchGlobal("torch._tensor", "_rebuild_from_type_v2"),
                    (func, TorchGlobal("torch", "Tensor"), args, dict(attrs)))
        return self._tensor(obj, obj.requires_grad)

    def _tensor(self, obj, requires_grad, complex_of=None):
        """torch's _rebuild_tensor_v2 over the storage under obj, written once however many tensors view it
        (torch keeps views and tied weights sharing their bytes). A complex tensor is its [..., 2] real view."""
        name = complex_of or str(obj.dtype).rsplit(".", 1)[-1]
        if name not in _STORAGES:
            raise TypeError("torch.save format: no torch storage for dtype %s" % obj.dtype)
        address, nbytes = obj._storage()
        item = obj.element_size()
        storage = self._by_memory.get((address, nbytes)) if nbytes > 0 else None
        if storage is not None and storage.kind != _STORAGES[name]:
            raise RuntimeError("Cannot save multiple tensors or storages that view the same data as different types")
        if storage is None:
            key = str(len(self._storages))
            with _C._GradMode(False):  # the whole storage, whatever part of it obj shows
                whole = obj.detach().as_strided([nbytes // item], [1], 0) if nbytes > 0 else obj.detach().reshape(-1)
            self._storages[key] = whole  # its bytes are written after the pickle (_raw)
            per = 2 if complex_of else 1
            storage = _Storage(_STORAGES[name], key, whole.numel() // per)
            if nbytes > 0:
                self._by_memory[(address, nbytes)] = storage
        shape, stride, offset = list(obj.shape), list(obj.stride()), obj.storage_offset()
        if complex_of:  # the complex tensor's own shape and strides, in complex elements
            shape, stride, offset = shape[:-1], [s // 2 for s in stride[:-1]], offset // 2
        return (TorchGlobal("torch._utils", "_rebuild_tensor_v2"),
                (storage, offset, tuple(shape), tuple(stride), bool(requires_grad), collections.OrderedDict()))


def _is_dtype(obj):
    from ._complex import ComplexDType
    return isinstance(obj, (_C.dtype, ComplexDType))


class _Storage:
    def __init__(self, kind, key, numel):
        self.kind, self.key, self.numel = kind, key, numel


def _padded(zf, name, data):
    """Writes record `name` uncompressed, its data 64-byte aligned (torch's extra-field padding, id "FB")."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = zf.fp.tell() + 30 + len(name.encode("utf-8"))  # where the data would begin without an extra field
    pad = (-(start + 4)) % _ALIGN
    info.extra = b"FB" + pad.to_bytes(2, "little") + b"Z" * pad
    zf.writestr(info, data)


def _raw(t):
    """A contiguous tensor's bytes, little-endian (bfloat16 as its raw bits: float32 holds each exactly)."""
    if t.dtype == _C.dtype.bfloat16:
        return (t.float().numpy().view(np.uint32) >> 16).astype("<u2").tobytes()
    a = t.numpy()
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()


def dump(obj, f, archive="archive"):
    """Writes obj to the binary file f (seekable) as a torch.save file; one tensor's bytes at a time."""
    storages = {}
    pkl = io.BytesIO()
    Pickler(pkl, storages).dump(obj)
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        _padded(zf, archive + "/data.pkl", pkl.getvalue())
        _padded(zf, archive + "/.format_version", b"1")
        _padded(zf, archive + "/.storage_alignment", b"64")
        _padded(zf, archive + "/byteorder", b"little")
        for key, t in storages.items():
            _padded(zf, "%s/data/%s" % (archive, key), _raw(t))
        _padded(zf, archive + "/version", b"3\n")


def dumps(obj, archive="archive"):
    """obj as the bytes of a torch.save file."""
    out = io.BytesIO()
    dump(obj, out, archive)
    return out.getvalue()


def pickle_dumps(obj):
    """obj as a protocol-2 pickle whose TorchGlobal / torch_class names are torch's (no tensors in it)."""
    out = io.BytesIO()
    Pickler(out).dump(obj)
    return out.getvalue()
