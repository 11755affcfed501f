"""tessel.utils.data's collation, as torch.utils.data._utils.collate's: default_convert (batch_size=None),
default_collate and the collate registry it is built on (default_collate_fn_map, keyed as torch's)."""
import collections.abc
import copy
import re

import numpy as np

from ... import _C
from ..._tensor import Tensor, as_tensor, tensor as _tensor

np_str_obj_array_pattern = re.compile(r"[SaUO]")  # numpy dtypes of strings, bytes and objects (torch's name)

default_collate_err_msg_format = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                                  "lists; found {}")


def default_convert(data):
    """torch's default_convert (DataLoader with batch_size=None): numpy arrays and scalars become tensors through
    as_tensor (a dtype tessel lacks raises its TypeError there: never an ndarray handed on), numpy string/object
    arrays and numpy strings are kept; mappings, namedtuples and other sequences are converted element by element
    (a tuple, or a sequence that cannot be rebuilt, as a list); everything else is kept."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray) and np_str_obj_array_pattern.search(data.dtype.str) is not None:
            return data
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # a list, as torch's
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate_tensor_fn(batch, *, collate_fn_map=None):
    from ... import stack
    if isinstance(batch, Tensor):  # default_collate(a tensor): torch.stack refuses it
        raise TypeError("stack(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")
    for i, t in enumerate(batch):
        if not isinstance(t, Tensor):
            raise TypeError("expected Tensor as element %d in argument 0, but got %s" % (i, type(t).__name__))
    return stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    """torch's: string and object arrays refused (its TypeError); the others as tensors, collated as tensors."""
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    """numpy scalars in their dtype; several dtypes promoted as torch.as_tensor would (int32 with float32:
    float32, where numpy's promotion gives float64)."""
    if len({np.asarray(b).dtype for b in batch}) > 1:
        from ... import stack  # (stack promotes as torch: the tensors' common dtype)
        return stack([_tensor(np.asarray(b)) for b in batch], 0)
    return _tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return _tensor(list(batch), dtype=_C.dtype.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return _tensor(list(batch))  # ints int64, bools bool, an int then a float float32 (tensor's inference)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


# torch's registry: exact type first, then the first key the element is an instance of (insertion order); users
# extend default_collate by updating it, or pass their own map to collate
default_collate_fn_map = {Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
                          (np.bool_, np.number, np.object_): collate_numpy_scalar_fn, float: collate_float_fn,
                          int: collate_int_fn, str: collate_str_fn, bytes: collate_str_fn}


def collate(batch, *, collate_fn_map=None):
    """torch's general collate: an element type found in collate_fn_map takes its function; mappings (their
    type kept where it can be rebuilt), namedtuples and other sequences (as lists, or their own type) are
    collated field by field."""
    elem = batch[0]
    if collate_fn_map is not None:
        if type(elem) in collate_fn_map:
            return collate_fn_map[type(elem)](batch, collate_fn_map=collate_fn_map)
        for kind, fn in collate_fn_map.items():
            if isinstance(elem, kind):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        fields = {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
        if isinstance(elem, collections.abc.MutableMapping):
            out = copy.copy(elem)
            out.update(fields)
            return out
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)]  # (a field's strings: a tuple)
        if isinstance(elem, tuple):
            return fields  # a tuple sample comes out as a list, as torch's
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(default_collate_err_msg_format.format(type(elem)))


def default_collate(batch):
    """torch's default_collate: tensors (and numpy arrays) stacked along a new dim 0; numpy scalars in
    their dtype; Python floats float64, other Python numbers as torch.tensor infers them (ints int64, a
    mix float32, bools bool); mappings (their type kept) and sequences (as lists) collated element-wise;
    strings as a list. Extend it through default_collate_fn_map, as torch's."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
