"""dcp.load's reading on one rank: prepare(state_dict, ...) checks the state dict against the checkpoint (tessel's
format, torch's DCP format, safetensors, or a torch.save file for BroadcastingTorchSaveReader) and returns the
read, which load runs only once every rank's check went well (a failure on one rank leaves every rank's
tensors untouched, as torch's plan step fails before its reads). The checks raise torch's errors: a key the
checkpoint lacks (strict), a tensor of another size, a tensor saved where the state dict holds a value."""
from ... import _C
from .. import _default_group
from . import _flatten, _restore, _torch_format, _write_back, api
from .filesystem import FileSystemReader
from .hf_storage import HuggingFaceStorageReader, _load_safetensors
from .metadata import TensorStorageMetadata

_PLACEHOLDER = {"bytes": _C._Bytes(b""), "int64": 0, "float64": 0.0, "string": ""}


def prepare(state_dict, path, storage_reader, broadcast, process_group, strict):
    """The read of state_dict from the checkpoint at `path`, a function returning load's report (missing_keys,
    unexpected_keys, bytes_read); raises before anything is read when the state dict does not fit."""
    if not broadcast and (storage_reader is None or isinstance(storage_reader, FileSystemReader)) and \
            _torch_format.is_torch_checkpoint(path):  # written by torch's DCP: read in its format
        return _torch_format.prepare_load(state_dict, path, strict)
    flat = _flatten(state_dict, "", {})
    if broadcast:
        def read_broadcast():
            result = _load_broadcast_torch_save(flat, path, storage_reader.coordinator_rank, process_group, strict)
            _write_back(state_dict, "", flat, set(result["missing_keys"]))
            return result
        return read_broadcast
    if isinstance(storage_reader, HuggingFaceStorageReader):
        def read_safetensors():
            loaded, result = _load_safetensors(storage_reader, flat, strict)
            _write_back(state_dict, "", loaded, set(result["missing_keys"]))
            return result
        return read_safetensors
    return _prepare_tessel(state_dict, flat, path, strict)


def _size_mismatch(key, saved, current):
    from ..._tensor import Size
    return ValueError("Size mismatch between saved %r and current: %r for %s" % (Size(saved), Size(current), key))


def _prepare_tessel(state_dict, flat, path, strict):
    _C._dcp_recover(path)  # (as _dcp_load would, before this reads the metadata: a killed save's index restored)
    kinds = _C._dcp_value_kinds(path)
    specs = _C._dcp_tensor_specs(path)
    # A non-tensor value saved entered (a list of dicts: "groups.0.lr", "groups.1") and asked for whole (a [] or
    # None placeholder): its entries are read and folded back into lists and dicts.
    folded = {}
    for key in [k for k, v in flat.items() if not isinstance(v, _C.Tensor) and k not in kinds and k not in specs]:
        subs = [k for k in kinds if k.startswith(key + ".") and k not in flat]
        if subs:
            folded[key] = subs
    # torch's checks, in the state dict's order, before anything is read
    replaced = set()  # a value saved where the state dict holds a tensor: the value replaces it (torch's)
    for key, target in flat.items():
        if key in specs:
            if not isinstance(target, _C.Tensor):
                raise ValueError("Invalid checkpoint metadata for %s, expected BytesStorageMetadata but found %s"
                                 % (key, TensorStorageMetadata))
            if tuple(specs[key][1]) != tuple(target.shape):
                raise _size_mismatch(key, specs[key][1], target.shape)
        elif key in kinds:
            if isinstance(target, _C.Tensor):
                replaced.add(key)
        elif key not in folded and strict:
            raise RuntimeError("Missing key in checkpoint state_dict: %s." % key)
    # Non-tensor values come from the checkpoint whatever the state dict held (DCP: a 0 placeholder takes
    # a saved pickle, an int target a saved bool): ask for each in the checkpoint's kind.
    for key, kind in kinds.items():
        if key in flat and (not isinstance(flat[key], _C.Tensor) or key in replaced):
            flat[key] = _PLACEHOLDER[kind]
    for key, subs in folded.items():
        del flat[key]
        flat.update((k, _PLACEHOLDER[kinds[k]]) for k in subs)
    # A tensor saved in another dtype is read in that dtype and cast into the target, as torch's load copies
    # (fp32 weights into a bf16 model; the torch-format reader casts too).
    casts = {}
    for key, (dtype, shape) in specs.items():
        t = flat.get(key)
        if isinstance(t, _C.Tensor) and t.dtype != dtype and tuple(shape) == tuple(t.shape):
            with _C._GradMode(False):
                casts[key] = (t, t.detach().to(dtype))
    flat.update((key, read) for key, (_, read) in casts.items())

    def read():
        loaded, result = _C._dcp_load(flat, path, strict)
        with _C._GradMode(False):
            for target, value in casts.values():
                target.copy_(value)
        for key, subs in folded.items():
            loaded[key] = _fold({k[len(key) + 1:]: _restore(None, loaded.pop(k)) for k in subs})
        _write_back(state_dict, "", loaded, set(result["missing_keys"]), replaced)
        return result
    return read


def _fold(entries):
    """{"0.lr": 0.1, "1": (1, 2)} -> [{"lr": 0.1}, (1, 2)]: flat entries back into nested values, a level whose
    keys are 0, 1, ... n - 1 as a list, any other as a dict."""
    tree, groups = {}, {}
    for key, value in entries.items():
        head, dot, rest = key.partition(".")
        if dot:
            groups.setdefault(head, {})[rest] = value
            tree.setdefault(head, None)
        else:
            tree[head] = value
    tree.update((k, _fold(v)) for k, v in groups.items())
    if sorted(tree) == sorted(str(i) for i in range(len(tree))):
        return [tree[str(i)] for i in range(len(tree))]
    return tree


def _load_broadcast_torch_save(flat, path, coordinator, process_group, strict):
    """BroadcastingTorchSaveReader's load: the coordinator reads the file and sends every key's shape first (all
    ranks check alike before any tensor moves), then each requested tensor whole; each rank copies its piece."""
    from ... import distributed as dist
    from ... import load as torch_load
    from ..._tensor import empty
    from ..tensor import distribute_tensor
    group = process_group if process_group is not None else _default_group("load")
    source, failure = None, None
    if group.rank == coordinator:
        try:
            source = _flatten(torch_load(path), "", {})
        except Exception as e:  # noqa: BLE001 (the others learn it from the broadcast, then every rank raises)
            failure = e
    box = [("failed", "%s: %s" % (type(failure).__name__, failure)) if failure is not None else
           None if source is None else {k: tuple(v.shape) if isinstance(v, _C.Tensor) else None
                                        for k, v in source.items()}]
    dist.broadcast_object_list(box, src=group.global_ranks[coordinator], group=group)
    if failure is not None:
        raise failure
    if isinstance(box[0], tuple):
        raise api._PeerFailed(coordinator, "load: the coordinator (rank %d) could not read %s: %s"
                              % (coordinator, path, box[0][1]))
    shapes = box[0]
    problems = []
    for key, target in flat.items():
        if not isinstance(target, _C.Tensor):
            problems.append("Non-tensor value identified at %s. At this time BroadcastingTorchSaveReader only "
                            "supports loading Tensors." % key)
        elif key in shapes and shapes[key] != tuple(target.shape):
            problems.append("'%s' has shape %s in %s, the state dict's is %s" % (key, shapes[key], path,
                                                                               tuple(target.shape)))
    missing = [k for k in flat if k not in shapes]
    if strict and missing:
        problems.append("missing keys %s (not in %s)" % (missing, path))
    if problems:
        raise RuntimeError("load: " + "; ".join(problems))
    for key, target in flat.items():
        if key in missing:
            continue
        value = (source[key].detach().to(target.dtype).contiguous() if source is not None
                 else empty(*target.shape, dtype=target.dtype))
        dist.broadcast(value, src=group.global_ranks[coordinator], group=group)
        with _C._GradMode(False):
            if target.is_distributed:
                piece = distribute_tensor(value, target.device_mesh, list(target.placements), src_data_rank=None)
                target.to_local().copy_(piece.to_local())
            else:
                target.copy_(value)
    return {"missing_keys": missing, "unexpected_keys": [k for k in shapes if k not in flat], "bytes_read": 0}
