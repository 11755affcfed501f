"""tessel.distributed.checkpoint.default_planner: torch's default planners and plan functions.

A plain DefaultSavePlanner / DefaultLoadPlanner (or a subclass that only sets options) takes tessel's direct path:
the plan is the one these classes would make. A subclass overriding a hook (set_up_planner renaming keys,
create_local_plan filtering items, resolve_data / transform_tensor changing values), a planner with
flatten_state_dict=False, _EmptyStateDictLoadPlanner, or any other object implementing torch's protocol is
driven hook by hook (_planned.py). Items are per tensor: a plain tensor's WriteItem / ReadItem covers it whole,
a DTensor's covers this rank's piece (torch splits reads further, by saved chunk)."""
import collections
import dataclasses
import io
import logging

from ... import _C
from ._nested_dict import flatten_state_dict
from ._sharded_tensor_utils import _flatten_sharded_tensors
from ._traverse import set_element
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, TensorProperties,
                       TensorStorageMetadata)
from .planner import (LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner,
                      TensorWriteData, WriteItem, WriteItemType)

__all__ = ["DefaultSavePlanner", "DefaultLoadPlanner", "create_default_local_load_plan",
           "create_default_global_load_plan", "create_default_local_save_plan", "create_default_global_save_plan"]

logger = logging.getLogger(__name__)


def _size(shape):
    from ..._tensor import Size
    return Size(tuple(int(n) for n in shape))


def _local_box(tensor):
    """(offsets, sizes) of the part of `tensor` this rank holds: the whole of a plain tensor, a DTensor's piece."""
    if not tensor.is_distributed:
        return [0] * tensor.dim(), list(tensor.shape)
    from ._torch_format import _local_box as box_of
    _, box = box_of(tensor)
    return [o for o, _ in box], [n for _, n in box]


def find_state_dict_object(state_dict, index):
    """state_dict[index.fqn]; for a DTensor this rank's local tensor, as torch's planners see it."""
    if index.fqn not in state_dict:
        raise ValueError(f"Could not find FQN: '{index.fqn}'")
    obj = state_dict[index.fqn]
    if isinstance(obj, _C.Tensor):
        return obj.to_local() if obj.is_distributed else obj
    if index.offset is not None:
        raise ValueError(f"FQN: '{index.fqn}' is not a ShardedTensor, can't find by offset: '{index.offset}'")
    return obj


def narrow_tensor_by_index(tensor, offsets, sizes):
    """The view of `tensor` at offsets / sizes (the tensor itself when they cover it)."""
    narrowed = tensor
    for dim, (offset, size) in enumerate(zip(offsets, sizes)):
        if size < tensor.shape[dim]:
            narrowed = narrowed.narrow(dim, offset, size)
    return narrowed


def _write_items(fqn, obj):
    if not isinstance(obj, _C.Tensor):
        return [WriteItem(index=MetadataIndex(fqn), type=WriteItemType.BYTE_IO)]
    offsets, sizes = _local_box(obj)
    local = obj.to_local() if obj.is_distributed else obj
    properties = TensorProperties.create_from_tensor(local)
    data = TensorWriteData(chunk=ChunkStorageMetadata(offsets=_size(offsets), sizes=_size(sizes)),
                           properties=properties, size=_size(obj.shape))
    return [WriteItem(index=MetadataIndex(fqn, offsets), type=WriteItemType.SHARD if obj.is_distributed
                      else WriteItemType.TENSOR, tensor_data=data)]


def _read_items(fqn, md, obj):
    if isinstance(md, BytesStorageMetadata):
        return [ReadItem(type=LoadItemType.BYTE_IO, dest_index=MetadataIndex(fqn), dest_offsets=_size([0]),
                         storage_index=MetadataIndex(fqn), storage_offsets=_size([0]), lengths=_size([0]))]
    if not isinstance(obj, _C.Tensor):
        raise ValueError(f"Invalid checkpoint metadata for {fqn}, expected BytesStorageMetadata but found {type(md)}")
    offsets, sizes = _local_box(obj)
    return [ReadItem(type=LoadItemType.TENSOR, dest_index=MetadataIndex(fqn, offsets),
                     dest_offsets=_size([0] * len(sizes)), storage_index=MetadataIndex(fqn, offsets),
                     storage_offsets=_size(offsets), lengths=_size(sizes))]


def create_default_local_save_plan(state_dict, is_coordinator):
    """A WriteItem per value (a DTensor's: this rank's piece)."""
    items = []
    for fqn, obj in state_dict.items():
        items += _write_items(fqn, obj)
    return SavePlan(items)


def create_default_global_save_plan(all_plans, rewrite_index_hints=True):
    """(the plans with index hints, the Metadata their items describe)."""
    md, new_plans = {}, []
    for plan in all_plans:
        new_items = []
        for item in plan.items:
            if item.type != WriteItemType.SHARD and item.index.fqn in md:
                raise AssertionError("item.index.fqn not in md")
            if item.type == WriteItemType.BYTE_IO:
                md[item.index.fqn] = BytesStorageMetadata()
                new_items.append(item)
                continue
            entry = md.setdefault(item.index.fqn, TensorStorageMetadata(
                properties=item.tensor_data.properties, size=item.tensor_data.size, chunks=[]))
            if rewrite_index_hints:
                item = dataclasses.replace(item, index=MetadataIndex(item.index.fqn, item.index.offset,
                                                                     len(entry.chunks)))
            new_items.append(item)
            entry.chunks.append(item.tensor_data.chunk)
        new_plans.append(dataclasses.replace(plan, items=new_items))
    return new_plans, Metadata(md)


def create_default_local_load_plan(state_dict, metadata, strict=True):
    """A ReadItem per key of state_dict; a key the checkpoint lacks is a RuntimeError when strict, a tensor of
    another size a ValueError (torch's checks and texts)."""
    requests = []
    for fqn, obj in state_dict.items():
        if fqn not in metadata.state_dict_metadata:
            if strict:
                raise RuntimeError(f"Missing key in checkpoint state_dict: {fqn}.")
            continue
        md = metadata.state_dict_metadata[fqn]
        if isinstance(md, TensorStorageMetadata) and isinstance(obj, _C.Tensor) and \
                tuple(md.size) != tuple(obj.shape):
            raise ValueError(f"Size mismatch between saved {_size(md.size)!r} and current: {_size(obj.shape)!r} "
                             f"for {fqn}")
        requests += _read_items(fqn, md, obj)
    return LoadPlan(requests)


def create_default_global_load_plan(all_plans):
    return all_plans


def _dedup_save_plans(all_plans, save_to_lowest_rank=False):
    """Each item written by one plan only: the lowest rank's, or (torch's default) the plan with the fewest
    bytes planned so far."""
    holders = collections.defaultdict(set)
    items = {}
    for i, plan in enumerate(all_plans):
        for item in plan.items:
            holders[item.index].add(i)
            items[item.index] = item
    keep = [{item.index for item in plan.items} for plan in all_plans]
    planned = [0] * len(all_plans)
    for index, plans in holders.items():
        chosen = min(plans) if save_to_lowest_rank else min(plans, key=lambda i: planned[i])
        planned[chosen] += items[index].tensor_storage_size() or 1
        for i in plans - {chosen}:
            keep[i].discard(index)
    return [dataclasses.replace(plan, items=[item for item in plan.items if item.index in kept])
            for plan, kept in zip(all_plans, keep)]


class DefaultSavePlanner(SavePlanner):
    """torch's DefaultSavePlanner: nested dicts flattened with '.' (flatten_state_dict; False keeps each
    top-level value whole, a dict of tensors pickled as one value), every replicated value written once."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        self.flatten_state_dict = flatten_state_dict
        self.flatten_sharded_tensors = flatten_sharded_tensors
        self.mappings = {}
        self.dedup_save_to_lowest_rank = dedup_save_to_lowest_rank
        if dedup_replicated_tensors is not None:
            logger.warning("DefaultSavePlanner's `dedup_replicated_tensors` argument is being deprecated, and no "
                           "longer has any effect. Please remove this argument from your call.")
        self._cached_plans_key = self.__class__.__name__
        self._enable_plan_caching = enable_plan_caching

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        if self.flatten_state_dict:
            state_dict, self.mappings = flatten_state_dict(state_dict)
        if self.flatten_sharded_tensors:
            state_dict = _flatten_sharded_tensors(state_dict)
        self.state_dict = state_dict
        self.is_coordinator = is_coordinator

    def create_local_plan(self):
        plan = create_default_local_save_plan(self.state_dict, self.is_coordinator)
        if self.flatten_state_dict:
            plan = dataclasses.replace(plan, planner_data=self.mappings)
        self.plan = plan
        return plan

    def _dedup_save_plans(self, all_plans):
        return _dedup_save_plans(all_plans, self.dedup_save_to_lowest_rank)

    def create_global_plan(self, all_plans):
        global_plan, metadata = create_default_global_save_plan(self._dedup_save_plans(all_plans))
        if self.flatten_state_dict:
            merged = dict(collections.ChainMap(*[p.planner_data for p in global_plan if p.planner_data]))
            metadata = dataclasses.replace(metadata, planner_data=merged)
        self.global_plan, self.metadata = global_plan, metadata
        return global_plan, metadata

    def finish_plan(self, new_plan):
        self.plan = new_plan
        return new_plan

    def resolve_data(self, write_item):
        return self.transform_object(write_item, self.lookup_object(write_item.index))

    def lookup_object(self, index):
        return find_state_dict_object(self.state_dict, index)

    def transform_object(self, write_item, object):
        if write_item.type == WriteItemType.BYTE_IO:
            from ... import save
            buffer = io.BytesIO()
            save(object, buffer)
            object = buffer
        return object


class DefaultLoadPlanner(LoadPlanner):
    """torch's DefaultLoadPlanner; allow_partial_load=True tolerates keys the checkpoint lacks."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        self.flatten_state_dict = flatten_state_dict
        self.flatten_sharded_tensors = flatten_sharded_tensors
        self.original_state_dict = {}
        self.mappings = {}
        self.allow_partial_load = allow_partial_load

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        self.original_state_dict = state_dict
        if self.flatten_sharded_tensors:
            state_dict = _flatten_sharded_tensors(state_dict)
        if self.flatten_state_dict:
            state_dict, self.mappings = flatten_state_dict(state_dict)
        self.state_dict = state_dict
        self.metadata = metadata
        self.is_coordinator = is_coordinator

    def create_local_plan(self):
        if self.metadata is None:
            raise AssertionError("self.metadata is not None")
        return create_default_local_load_plan(self.state_dict, self.metadata, not self.allow_partial_load)

    def create_global_plan(self, global_plan):
        return create_default_global_load_plan(global_plan)

    def finish_plan(self, new_plan):
        return new_plan

    def load_bytes(self, read_item, value):
        from ... import load
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn],
                         load(value, weights_only=False))
        else:
            self.state_dict[read_item.dest_index.fqn] = load(value, weights_only=False)

    def resolve_tensor(self, read_item):
        return self.transform_tensor(read_item, self.lookup_tensor(read_item.dest_index))

    def commit_tensor(self, read_item, tensor):
        pass

    def lookup_tensor(self, index):
        return find_state_dict_object(self.state_dict, index)

    def transform_tensor(self, read_item, tensor):
        return narrow_tensor_by_index(tensor, read_item.dest_offsets, read_item.lengths)


class _EmptyStateDictLoadPlanner(DefaultLoadPlanner):
    """Loads a whole checkpoint (or the entries under `keys`) into an empty state dict, building it from the
    checkpoint's metadata: tensors of the saved sizes and dtypes, nested as saved (planner_data). One process
    holds everything: meant for conversions and inspection, not for training ranks."""

    def __init__(self, keys=None, *args, **kwargs):
        self.keys = keys
        super().__init__(*args, **kwargs)

    def _should_include_key(self, key, metadata):
        if self.keys is None or key in self.keys:
            return True
        prefixes = []
        for part in (metadata.planner_data or {}).get(key, ()):
            prefixes.append(".".join([prefixes[-1], str(part)]) if prefixes else part)
        return any(prefix in self.keys for prefix in prefixes)

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        if state_dict:
            raise AssertionError("not state_dict")
        if metadata is None:
            raise AssertionError("metadata is not None")
        for k, v in metadata.state_dict_metadata.items():
            if not self._should_include_key(k, metadata):
                continue
            if isinstance(v, TensorStorageMetadata):
                v = _C._full(list(v.size), 0.0, v.properties.dtype)
            if metadata.planner_data is not None and k in metadata.planner_data:
                set_element(state_dict, metadata.planner_data[k], v)
            else:
                state_dict[k] = v
        super().set_up_planner(state_dict, metadata, is_coordinator)
