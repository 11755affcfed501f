"""How torch reads a subscript before indexing (split from _tensor.py, which indexes with it): which entries are
advanced indices, a 0-d index as a plain int, a list of sequences as a tuple and a uint8 index as a mask (with
torch's deprecation warnings), and index_put's dtype check; torch's scalar-type names for the messages."""
import builtins
import warnings

import numpy as np

from . import _C, _dtypes

Tensor = _C.Tensor


def _torch_dtype_name(dtype):
    """torch's scalar-type name in its messages: Float, Long, BFloat16, ..."""
    return {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
            "float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}.get(
                str(dtype).rsplit(".", 1)[-1], str(dtype))


def _is_advanced(i):
    if isinstance(i, Tensor):
        return i.ndim > 0 or i.dtype.is_floating_point or i.dtype == _dtypes.bool
    if isinstance(i, np.ndarray):
        return i.ndim > 0 or i.dtype == np.bool_
    return isinstance(i, (list, range))


def _as_plain(i):
    """A 0-d integer tensor or array is a plain int index (a view), as torch; a range an int list."""
    if isinstance(i, (Tensor, np.ndarray)) and i.ndim == 0 and not _is_advanced(i):
        return builtins.int(i.item())
    return list(i) if isinstance(i, (range, tuple)) else i  # a tuple inside a subscript is an index list


def _index_array(i):
    """An advanced index entry as a numpy array: a tensor's or array's values; a list (or range) as torch reads
    one, a long index unless it holds only bools, its floats truncated (x[[0., 1.]] is x[[0, 1]]) and [] no rows
    (numpy reads both as float64)."""
    if isinstance(i, Tensor):
        return i.numpy()
    arr = np.asarray(i)
    if not isinstance(i, np.ndarray) and arr.dtype != np.bool_ and arr.dtype.kind != "i":
        arr = arr.astype(np.int64)
    return arr


def _mask_mismatch(mask_shape, shape, at):
    """torch's IndexError for a boolean mask over the dims of `shape` (the tensor after the basic entries) from
    `at` on, or None where every mask dim matches."""
    if at + len(mask_shape) > len(shape):
        return IndexError("too many indices for tensor of dimension %d" % len(shape))
    for j, size in enumerate(mask_shape):
        if shape[at + j] != size:
            return IndexError("The shape of the mask %s at index %d does not match the shape of the indexed tensor %s "
                              "at index %d" % (list(mask_shape), j, list(shape), at + j))
    return None


def _broadcast_shape(a, b):
    """Shapes a and b broadcast together (a mask's and the tensor's), or torch's RuntimeError for the first dim,
    from the last, where they differ (numpy's ValueError said it another way)."""
    n = builtins.max(len(a), len(b))
    out = []
    for i in range(n - 1, -1, -1):
        da = a[i - n + len(a)] if i - n + len(a) >= 0 else 1
        db = b[i - n + len(b)] if i - n + len(b) >= 0 else 1
        if da != db and da != 1 and db != 1:
            raise RuntimeError("The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton "
                               "dimension %d" % (da, db, i))
        out.append(db if da == 1 else da)
    return tuple(out[::-1])


def _is_zero_d_bool(i):
    return isinstance(i, builtins.bool) or (isinstance(i, Tensor) and i.ndim == 0 and i.dtype == _dtypes.bool) or \
        (isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype == np.bool_)


_SEQUENCE_AS_TUPLE = ("Using a non-tuple sequence for multidimensional indexing is deprecated and will be changed in "
                      "pytorch 2.9; use x[tuple(seq)] instead of x[seq]. In pytorch 2.9 this will be interpreted as "
                      "tensor index, x[torch.tensor(seq)], which will result either in an error or a different result")


def _torch_key(idx):
    """torch's reading of a subscript before indexing: a list (fewer than 32 entries) holding a tensor, a sequence,
    a slice, None or ... is a tuple of indices (numpy's legacy rule, with torch's warning: x[[[0, 1]]] is x[[0, 1]],
    x[[0, slice(None)]] is x[0, :]); a uint8 tensor is a boolean mask (with torch's deprecation warning)."""
    if isinstance(idx, list) and len(idx) < 32 and builtins.any(
            isinstance(i, (Tensor, list, tuple, builtins.slice, np.ndarray)) or i is None or i is Ellipsis
            for i in idx):
        warnings.warn(_SEQUENCE_AS_TUPLE, UserWarning, stacklevel=3)
        idx = tuple(idx)
    if isinstance(idx, Tensor) and idx.dtype == _dtypes.uint8:
        warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
                      UserWarning, stacklevel=3)
        return idx.to(_dtypes.bool)
    if isinstance(idx, tuple) and builtins.any(isinstance(i, Tensor) and i.dtype == _dtypes.uint8 for i in idx):
        warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
                      UserWarning, stacklevel=3)
        return tuple(i.to(_dtypes.bool) if isinstance(i, Tensor) and i.dtype == _dtypes.uint8 else i for i in idx)
    return idx


def _check_index_put_dtype(self, idx, value):
    """torch's index_put_ check for an advanced subscript (int / bool tensors, lists, arrays): the value tensor
    has self's dtype (it was cast silently); a bool mask with a 0-d value is a masked_fill, which casts, as a
    basic subscript's copy does."""
    key = idx if isinstance(idx, tuple) else (idx,)
    plain = [_as_plain(i) for i in key]
    if not builtins.any(_is_advanced(i) for i in plain):
        return
    if len(plain) == 1 and isinstance(plain[0], Tensor) and plain[0].dtype == _dtypes.bool and value.ndim == 0:
        return
    raise RuntimeError("Index put requires the source and destination dtypes match, got %s for the destination and "
                       "%s for the source." % (_torch_dtype_name(self.dtype), _torch_dtype_name(value.dtype)))
