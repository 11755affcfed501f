"""tessel.distributed.checkpoint: DCP's save / load of (nested) state dicts, sharded across ranks and
reshardable to any layout or world size (checkpoint/).

Keys of nested dicts are joined with "." (two that join to the same key raise ValueError), and a list holding a
tensor or a dict is entered too (its items keyed 0, 1, ...), as torch's flattening; tensors (dense or DTensor,
and complex ones) are filled in place by load; other values are replaced in their dict or list: ints, floats,
strings and bytes as such, bools as bools, anything else picklable (other lists, None, ints beyond int64, RNG
states) as a pickle, as torch's DCP keeps them. Like DCP, load fills the keys of the state
dict it is given and ignores the checkpoint's other keys; a key the checkpoint lacks raises (unless
strict=False), a shape or kind mismatch always raises, and a tensor saved in another dtype is cast (as torch's).
Collective over the default process group.
The directory comes from checkpoint_id or torch's FileSystemWriter / FileSystemReader; the planner may be
DefaultSavePlanner / DefaultLoadPlanner (allow_partial_load=True: strict=False); other storages and
planners raise NotImplementedError rather than being ignored. A top-level value with state_dict() and
load_state_dict() (torch's Stateful: a module, an optimizer, an AppState) is saved as its state_dict() and
loaded back through its load_state_dict(), as torch's DCP does. load also reads a checkpoint torch's DCP wrote
(its .metadata and .distcp files, at any world size: _torch_format.py), and format_utils.dcp_to_torch_dcp
writes tessel's checkpoint in that format for torch.

    model_sd, optim_sd = get_state_dict(model, opt)
    save({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    load({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
"""
import concurrent.futures
import os
import pickle
import re
import threading

from ... import _C
from ..._complex import ComplexTensor
from .. import _default_group, is_initialized
from . import api, metadata, planner, state_dict, stateful, storage  # noqa: F401
from . import _torch_format
from .api import CheckpointException  # noqa: F401
from .planner import LoadPlanner, SavePlanner  # noqa: F401
from .filesystem import FileSystemReader, FileSystemWriter
from .hf_storage import (HuggingFaceStorageReader, HuggingFaceStorageWriter, _load_safetensors,  # noqa: F401
                         _write_safetensors_index)
from .staging import AsyncStager, BlockingAsyncStager, DefaultStager, StagingOptions  # noqa: F401
from .storage import StorageReader, StorageWriter  # noqa: F401
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex,  # noqa: F401
                       TensorProperties, TensorStorageMetadata)
from .stateful import Stateful  # noqa: F401


_PICKLED = b"\x00tessel-pickle\x00"  # prefix of a value DCP keeps as a pickle (torch pickles such values too)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _leaf(key, v):
    """A state-dict value as the C++ checkpoint stores it: tensors, int64, float, str and bytes as they are;
    anything else picklable (bools, lists, tuples, None, ints beyond int64, numpy RNG states, ...) as a tagged
    pickle in a bytes entry, as torch's DCP pickles them (a bool comes back a bool; older checkpoints stored
    bools as int64, restored as bools into bool targets)."""
    if isinstance(v, _C.Tensor) or isinstance(v, (float, str)):
        return v
    if isinstance(v, (bytes, bytearray)):
        return _C._Bytes(bytes(v))  # else pybind would pass bytes as a (UTF-8) string
    if isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]:
        return v
    try:
        return _C._Bytes(_PICKLED + pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as e:  # noqa: BLE001 (any pickling failure)
        raise TypeError("checkpoint: '%s' is a %s, which is neither a tensor, int, float, str nor bytes, and cannot "
                        "be pickled: %s" % (key, type(v).__name__, e)) from None


def _entries(container):
    return container.items() if isinstance(container, dict) else enumerate(container)


def _entered(v):
    """Whether flattening enters v, as torch's traverse_state_dict: a dict always, a list when it holds a tensor
    or something entered (its items keyed 0, 1, ...: tensors in a list load in place); other values are one
    entry each."""
    return isinstance(v, (dict, list)) and not _torch_format._is_terminal(v)


def _flatten(sd, prefix, out, paths=None, path=()):
    """{flat key: value}; paths (when given) gets each flat key's path of keys, torch's planner_data mapping
    (dcp_to_torch_save nests the entries again by it)."""
    for k, v in _entries(sd):
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if _entered(v):
            _flatten(v, key, out, paths, path + (k,))
            continue
        if key in out:  # {"a.b": x, "a": {"b": y}}, or the keys 0 and "0": one would silently replace the other
            raise ValueError("duplicated flatten key %s" % key)
        out[key] = _leaf(key, v)
        if paths is not None:
            paths[key] = list(path + (k,))
    return out


def _same_directory_everywhere(path, world):
    """A ValueError (on every rank) when the ranks name different checkpoint directories: torch's save then
    reports success with the checkpoint split between them; tessel's committed one rank's and failed the other
    on reading metadata. Collective over `world`."""
    if world is None or world.size == 1:
        return None
    from .._object_collectives import all_gather_object
    given = [None] * world.size
    all_gather_object(given, os.fspath(path), group=world)
    if all(p == given[0] for p in given):
        return None
    return ValueError("dcp.save: the ranks name different checkpoint directories (%s); every rank must pass the "
                      "same checkpoint_id" % ", ".join("rank %d: %r" % (r, p) for r, p in enumerate(given)))


_PARAM_GROUP_LIST = re.compile(r"(^|\.)param_groups\.\d+\.params$")


def _merge_param_group_lists(flat, world):
    """An optimizer state dict's param_groups[i]["params"] (its parameters' FQNs) differs across ranks that hold
    different parts of a model (pipeline stages): every rank saves the union of the ranks' lists, in rank order,
    so the one value a key keeps names each rank's parameters and any of them resumes from it (the loader takes
    the group holding one of its parameters, as torch's). torch saves one rank's list instead; tessel refuses
    any other value that differs across ranks. Collective over `world` (every rank calls it, whatever it
    holds)."""
    if world is None or world.size == 1:
        return flat
    mine = {k: _restore(None, v) for k, v in flat.items() if _PARAM_GROUP_LIST.search(k)}
    gathered = [None] * world.size
    from .._object_collectives import all_gather_object
    all_gather_object(gathered, {k: v for k, v in mine.items() if isinstance(v, list)}, group=world)
    for key in mine:
        lists = [g[key] for g in gathered if key in g]
        if all(x == lists[0] for x in lists):
            continue
        union = []
        for x in lists:
            union.extend(f for f in x if f not in union)
        flat[key] = _leaf(key, union)
    return flat


def _restore(old, new):
    if isinstance(new, _C._Bytes):
        raw = bytes(new)
        return pickle.loads(raw[len(_PICKLED):]) if raw.startswith(_PICKLED) else raw
    if isinstance(old, bool) and isinstance(new, int):
        return bool(new)
    return new


def _write_back(sd, prefix, flat, missing=()):
    for k, v in list(_entries(sd)):
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if _entered(v):
            _write_back(v, key, flat, missing)
        elif not isinstance(v, _C.Tensor) and key in flat and key not in missing:
            new = _restore(v, flat[key])
            if _is_complex_tensor(v) and _is_complex_tensor(new) and tuple(new.shape) == tuple(v.shape):
                with _C._GradMode(False):  # a complex tensor (kept as a pickle) is filled in place too
                    v.copy_(new)
            else:
                sd[k] = new


def _is_complex_tensor(v):
    return isinstance(v, ComplexTensor)


class DefaultSavePlanner(SavePlanner):
    """torch's DefaultSavePlanner: tessel's save plan is fixed (every tensor's distinct shards written once,
    by their lowest owning rank; nested dicts flattened with '.'), which is the default planner's result;
    only its default arguments are accepted."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultSavePlanner(flatten_state_dict=False) is not supported: tessel always "
                                      "flattens nested state dicts")


class DefaultLoadPlanner(LoadPlanner):
    """torch's DefaultLoadPlanner; allow_partial_load=True tolerates keys the checkpoint lacks (strict=False)."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultLoadPlanner(flatten_state_dict=False) is not supported: tessel always "
                                      "flattens nested state dicts")
        self.allow_partial_load = allow_partial_load


# torch's planner hooks: a subclass that overrides one expects tessel to call it; tessel's plan is fixed and
# calls none, so such a planner is refused rather than silently ignored (its override would never run).
_PLANNER_HOOKS = ("set_up_planner", "create_local_plan", "create_global_plan", "finish_plan", "resolve_data",
                  "lookup_object", "transform_object", "load_bytes", "resolve_tensor", "commit_tensor",
                  "lookup_tensor", "transform_tensor", "resolve_bytes")


def _check_no_overrides(planner, planner_type, what):
    for cls in type(planner).__mro__:
        if cls is planner_type:
            return
        hooks = sorted(h for h in _PLANNER_HOOKS if h in vars(cls))
        if hooks:
            raise NotImplementedError("%s: planner %s overrides %s, which tessel never calls (its save/load plan is "
                                      "fixed: every shard once, resharded on load); transform the state dict "
                                      "before save or after load instead" % (what, type(planner).__name__,
                                                                             ", ".join(hooks)))


def _dir(checkpoint_id, storage=None, planner=None, what="save"):
    """The checkpoint directory from checkpoint_id or a FileSystemWriter/Reader (checkpoint_id wins and
    resets the storage, as torch); any other storage or planner raises instead of being ignored."""
    storage_type = (FileSystemWriter, HuggingFaceStorageWriter) if what == "save" else \
        (FileSystemReader, HuggingFaceStorageReader)
    planner_type = DefaultSavePlanner if what == "save" else DefaultLoadPlanner
    if storage is not None and not isinstance(storage, storage_type):
        raise NotImplementedError("%s: storage_%s must be a %s (tessel writes its own file layout), got %s"
                                  % (what, "writer" if what == "save" else "reader",
                                     " or ".join(t.__name__ for t in storage_type), type(storage).__name__))
    if planner is not None and not isinstance(planner, planner_type):
        raise NotImplementedError("%s: planner must be a %s, got %s (custom planners are not supported)"
                                  % (what, planner_type.__name__, type(planner).__name__))
    if planner is not None:
        _check_no_overrides(planner, planner_type, what)
    if storage is not None:
        storage.reset(checkpoint_id)
        return os.fspath(storage.path)
    if checkpoint_id is None:
        raise ValueError("checkpoint_id (the checkpoint directory) or storage_%s is required"
                         % ("writer" if what == "save" else "reader"))
    return os.fspath(checkpoint_id)


def _is_stateful(v):
    """torch's Stateful protocol (state_dict and load_state_dict methods): a module, an optimizer, or an
    application's own state object (the DCP tutorial's AppState)."""
    return not isinstance(v, (dict, _C.Tensor)) and callable(getattr(v, "state_dict", None)) \
        and callable(getattr(v, "load_state_dict", None))


def _stateful_to_state_dict(state_dict):
    """The state dict with each top-level Stateful value replaced by its state_dict(), as torch's DCP."""
    return {k: v.state_dict() if _is_stateful(v) else v for k, v in state_dict.items()}


def _rank(world):
    return 0 if world is None else world.rank


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Collective over process_group (default: the default group when initialized; no_dist=True: this rank
    alone writes the whole checkpoint, as torch's). Returns the checkpoint's Metadata, as torch's (None for a
    HuggingFaceStorageWriter's safetensors export). A failure on any rank raises CheckpointException on
    every rank (torch's), naming each failing rank's exception; the previous checkpoint in the directory
    stays loadable."""
    path = _dir(checkpoint_id, storage_writer, planner, "save")
    world = None if no_dist else (process_group or (_default_group("checkpoint.save") if is_initialized() else None))
    if storage_writer is not None and not getattr(storage_writer, "overwrite", True):
        # FileSystemWriter(overwrite=False) over an existing checkpoint: CheckpointException on every rank, as torch's
        exists = any(os.path.exists(os.path.join(path, name)) for name in ("metadata.json", ".metadata"))
        api._raise_agreed("save", RuntimeError("Checkpoint already exists and overwrite=False: %s" % path)
                          if exists else None, world, _rank(world))
    error, flat, paths = None, {}, {}
    try:
        flat = _flatten(_stateful_to_state_dict(state_dict), "", {}, paths)
    except Exception as e:  # noqa: BLE001 (the peers learn it in the save's plan exchange, then agree)
        error = e
    mismatch = _same_directory_everywhere(path, world)  # collective: every rank calls it, failed or not
    error = error or mismatch
    flat = _merge_param_group_lists(flat, world)  # collective: a rank whose flattening failed takes part too
    if error is not None:
        e = error
        try:
            _C._dcp_save({}, path, world, local_error="%s: %s" % (type(e).__name__, e))
        except Exception:  # noqa: BLE001 (it fails by design; this rank reports its own exception)
            pass
        api._raise_agreed("save", e, world, _rank(world))
    hf = isinstance(storage_writer, HuggingFaceStorageWriter)
    staging = os.path.join(path, ".tessel_dcp") if hf else path
    try:
        _C._dcp_save(flat, staging, world)  # collective: every rank's shards written, then committed
    except Exception as e:  # noqa: BLE001 (the C++ save failed on every rank at the same step)
        api._raise_agreed("save", e, world, _rank(world))
    if not hf:
        error = None
        if _rank(world) == 0:
            try:
                _torch_format.write_marker(path, paths)
            except Exception as e:  # noqa: BLE001 (agreed below)
                error = e
        # The exchange is also the barrier: no rank returns (and reads or loads the checkpoint) before rank 0 has
        # written the marker (a peer's load could read it half written: "pickle data was truncated").
        api._raise_agreed("save", error, world, _rank(world))
        return metadata.read(path)
    error = None
    if world is None or world.rank == 0:
        import shutil
        try:
            _C._export_safetensors(staging, os.path.join(path, "model.safetensors"))
            _write_safetensors_index(path, "model.safetensors")
        except Exception as e:  # noqa: BLE001 (agreed below)
            error = e
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    # The exchange is also the barrier: the file exists for every rank once save returns, or every rank raises.
    api._raise_agreed("save", error, world, _rank(world))


_savers = threading.local()  # per thread (a run_ranks rank): one AsyncSaver per process group


def _release_savers():
    """destroy_process_group: waits for this thread's in-flight async saves and drops the savers, so
    neither they nor the groups they hold outlive the world."""
    cache = getattr(_savers, "by_group", None) or {}
    _savers.by_group = {}
    for _, saver in cache.values():
        try:
            saver.wait()
        except Exception:  # noqa: BLE001 (the save's own future reports its error)
            pass


def _as_future(cpp_future, rank, path=None, paths=None):
    """A concurrent.futures.Future (torch's async_save returns one): a thread waits for the C++ future
    (the GIL released) and sets its result or exception (a save's failure as CheckpointException naming
    this rank's own failure, or the peer whose failure failed the save: no exchange from that thread). Rank 0
    marks the committed checkpoint for torch's probes (_torch_format.write_marker) before the result is set."""
    future = concurrent.futures.Future()

    def wait():
        try:
            result = cpp_future.result()
            if path is not None and rank == 0:
                _torch_format.write_marker(path, paths)
            future.set_result(result)
        except Exception as e:  # noqa: BLE001 (handed to the caller through the future)
            try:
                api._raise_agreed("async_save", e, None, rank)
            except BaseException as agreed:  # noqa: BLE001
                future.set_exception(agreed)
        except BaseException as e:  # noqa: BLE001
            future.set_exception(e)

    threading.Thread(target=wait, name="tessel-async-save-wait", daemon=True).start()
    return future


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=None, async_stager=None, no_dist=False, use_cached_state_dict=False):
    """torch's dcp.async_save: returns once this rank's share of state_dict is snapshotted (training may
    change every tensor at once); the returned concurrent.futures.Future's result() waits for the
    committed checkpoint and raises the save's error from any rank. One save in flight per process group
    (the next waits for it). The first call on a group is collective (the saver makes its own group for
    its background work); destroy_process_group waits for the saves and releases the savers.
    async_checkpointer_type (AsyncCheckpointerType.THREAD or PROCESS) is accepted: tessel's background
    writer is a native thread of this process either way, which holds no GIL while it writes.
    async_stager (staging.py): a DefaultStager adds no copy (the snapshot is the staging) and, with
    use_async_staging, makes the result an AsyncSaveResponse, as torch's; another AsyncStager's copy is
    what gets saved."""
    if async_stager is not None and not isinstance(async_stager, AsyncStager):
        raise TypeError("async_save: async_stager must be an AsyncStager, got %s" % type(async_stager).__name__)
    staging = None  # a Future of the stager's copy, when its stage() is asynchronous
    if async_stager is not None and not isinstance(async_stager, DefaultStager):
        staged = async_stager.stage(_stateful_to_state_dict(state_dict))  # its training-safe copy is saved
        if isinstance(staged, concurrent.futures.Future):
            staging, staged = staged, staged.result()
        state_dict = staged
        if async_stager.should_synchronize_after_execute:
            async_stager.synchronize_staging()
    elif async_stager is not None and async_stager._config.use_async_staging:
        staging = concurrent.futures.Future()  # tessel's own snapshot below is the staging
    future = _async_save(state_dict, checkpoint_id, storage_writer, planner, process_group, no_dist)
    if staging is None:
        return future
    from .state_dict_saver import AsyncSaveResponse
    done = concurrent.futures.Future()
    done.set_result(None)  # staged: async_save returns after the snapshot (and the stager's copy)
    return AsyncSaveResponse(staging_completion=done, upload_completion=future)


def _async_save(state_dict, checkpoint_id, storage_writer, planner, process_group, no_dist):
    path = _dir(checkpoint_id, storage_writer, planner, "save")
    world = None if no_dist else (process_group or (_default_group("checkpoint.async_save")
                                                    if is_initialized() else None))
    cache = getattr(_savers, "by_group", None)
    if cache is None:
        cache = _savers.by_group = {}
    saver = cache.get(id(world))
    if saver is None:
        saver = cache[id(world)] = (world, _C._AsyncSaver(world))
    error, flat, paths = None, {}, {}
    try:
        flat = _flatten(_stateful_to_state_dict(state_dict), "", {}, paths)
    except Exception as e:  # noqa: BLE001 (reported below, after the collective merge every rank takes part in)
        error = e
    mismatch = _same_directory_everywhere(path, world)  # collective: every rank calls it, failed or not
    error = error or mismatch
    flat = _merge_param_group_lists(flat, world)
    try:
        if error is not None:
            raise error
        cpp_future = saver[1].save(flat, path)
    except Exception as e:  # noqa: BLE001 (planning failed: through the future, as torch's planning in its thread)
        future = concurrent.futures.Future()
        try:
            api._raise_agreed("async_save", e, None, _rank(world))
        except BaseException as agreed:  # noqa: BLE001
            future.set_exception(agreed)
        return future
    return _as_future(cpp_future, _rank(world), path, paths)


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, strict=True,
         no_dist=False):
    """Fills state_dict in place from the checkpoint (its other keys are ignored, as in DCP); strict=False
    also tolerates keys the checkpoint lacks. Returns a dict with missing_keys, unexpected_keys (the
    checkpoint's keys not in state_dict) and bytes_read. Collective over process_group (default: the
    default group when initialized; no_dist=True: this rank alone, as torch's): a failure on any rank (a
    key the checkpoint lacks, a shape mismatch, a damaged file) raises CheckpointException on every rank,
    naming each failing rank's exception, so no rank goes on with a model its peers did not load."""
    from .format_utils import BroadcastingTorchSaveReader
    broadcast = isinstance(storage_reader, BroadcastingTorchSaveReader)
    if broadcast:
        storage_reader.reset(checkpoint_id)
        path = storage_reader.checkpoint_id
        if path is None:
            raise ValueError("load: BroadcastingTorchSaveReader needs the torch.save file (checkpoint_id)")
        if planner is not None and not isinstance(planner, DefaultLoadPlanner):
            raise NotImplementedError("load: planner must be a DefaultLoadPlanner (DynamicMetaLoadPlanner), got %s"
                                      % type(planner).__name__)
    else:
        path = _dir(checkpoint_id, storage_reader, planner, "load")
    strict = strict and not getattr(planner, "allow_partial_load", False)
    world = None if no_dist else (process_group or (_default_group("checkpoint.load") if is_initialized() else None))
    result, error = None, None
    stateful = any(_is_stateful(v) for v in state_dict.values())
    target = _stateful_to_state_dict(state_dict) if stateful else state_dict  # their state_dict()s are filled
    try:
        result = _load_into(target, path, storage_reader, broadcast, process_group, strict)
    except Exception as e:  # noqa: BLE001 (agreed with the other ranks below)
        error = e
    api._raise_agreed("load", error, world, _rank(world))
    if stateful:  # then handed back, outside the agreed read, as torch's: their own errors reach the caller as raised
        for k, v in state_dict.items():
            if _is_stateful(v):
                v.load_state_dict(target[k])
            else:
                state_dict[k] = target[k]
    return result


def _load_into(state_dict, path, storage_reader, broadcast, process_group, strict):
    """load's work on this rank (load checked the arguments)."""
    if not broadcast and (storage_reader is None or isinstance(storage_reader, FileSystemReader)) and \
            _torch_format.is_torch_checkpoint(path):  # written by torch's DCP: read in its format
        return _torch_format.load(state_dict, path, strict)
    flat = _flatten(state_dict, "", {})
    if broadcast:
        result = _load_broadcast_torch_save(flat, path, storage_reader.coordinator_rank, process_group, strict)
        _write_back(state_dict, "", flat, set(result["missing_keys"]))
        return result
    if isinstance(storage_reader, HuggingFaceStorageReader):
        flat, result = _load_safetensors(storage_reader, flat, strict)
        _write_back(state_dict, "", flat, set(result["missing_keys"]))
        return result
    # Non-tensor values come from the checkpoint whatever the state dict held (DCP: a 0 placeholder takes
    # a saved pickle, an int target a saved bool): ask for each in the checkpoint's kind.
    placeholder = {"bytes": _C._Bytes(b""), "int64": 0, "float64": 0.0, "string": ""}
    _C._dcp_recover(path)  # (as _dcp_load would, before this reads the metadata: a killed save's index restored)
    kinds = _C._dcp_value_kinds(path)
    for key, kind in kinds.items():
        if key in flat and not isinstance(flat[key], _C.Tensor):
            flat[key] = placeholder[kind]
    # A non-tensor value saved entered (a list of dicts: "groups.0.lr", "groups.1") and asked for whole (a [] or
    # None placeholder): its entries are read and folded back into lists and dicts.
    folded = {}
    for key in [k for k, v in flat.items() if not isinstance(v, _C.Tensor) and k not in kinds]:
        subs = [k for k in kinds if k.startswith(key + ".") and k not in flat]
        if subs:
            del flat[key]
            folded[key] = subs
            flat.update((k, placeholder[kinds[k]]) for k in subs)
    # A tensor saved in another dtype is read in that dtype and cast into the target, as torch's load copies
    # (fp32 weights into a bf16 model; the torch-format reader casts too).
    casts = {}
    if any(isinstance(v, _C.Tensor) for v in flat.values()):
        for key, (dtype, shape) in _C._dcp_tensor_specs(path).items():
            t = flat.get(key)
            if isinstance(t, _C.Tensor) and t.dtype != dtype and tuple(shape) == tuple(t.shape):
                with _C._GradMode(False):
                    casts[key] = (t, t.detach().to(dtype))
        flat.update((key, read) for key, (_, read) in casts.items())
    flat, result = _C._dcp_load(flat, path, strict)
    with _C._GradMode(False):
        for target, read in casts.values():
            target.copy_(read)
    for key, subs in folded.items():
        flat[key] = _fold({k[len(key) + 1:]: _restore(None, flat.pop(k)) for k in subs})
    _write_back(state_dict, "", flat, set(result["missing_keys"]))
    return result


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


def save_state_dict(state_dict, storage_writer, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """torch's deprecated spelling of save(state_dict, storage_writer=...); warns as torch's does."""
    import warnings
    warnings.warn("`save_state_dict` is deprecated and will be removed in future versions. Please use `save` "
                  "instead.", FutureWarning, stacklevel=2)
    return save(state_dict, storage_writer=storage_writer, planner=planner, process_group=process_group)


def load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """torch's deprecated spelling of load(state_dict, storage_reader=...); warns as torch's does."""
    import warnings
    warnings.warn("`load_state_dict` is deprecated and will be removed in future versions. Please use `load` "
                  "instead.", FutureWarning, stacklevel=2)
    return load(state_dict, storage_reader=storage_reader, planner=planner, process_group=process_group)


from . import default_planner, filesystem, state_dict_loader, state_dict_saver  # noqa: E402,F401 (torch's modules)
