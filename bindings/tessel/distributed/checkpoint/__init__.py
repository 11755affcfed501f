"""tessel.distributed.checkpoint: DCP's save / load of (nested) state dicts, sharded across ranks and
reshardable to any layout or world size (checkpoint/).

Keys of nested dicts are joined with "." (two that join to the same key raise ValueError), and a list holding a
tensor or a dict is entered too (its items keyed 0, 1, ...), as torch's flattening; tensors (dense or DTensor,
and complex ones) are filled in place by load; other values are replaced in their dict or list: ints, floats,
strings and bytes as such, bools as bools, anything else picklable (other lists, None, ints beyond int64, RNG
states) as a pickle, as torch's DCP keeps them. Like DCP, load fills the keys of the state dict it is given and
ignores the checkpoint's other keys; a key the checkpoint lacks raises (unless strict=False or
DefaultLoadPlanner(allow_partial_load=True)), a shape mismatch always raises, a tensor saved in another dtype is
cast and a value saved where the state dict holds a tensor replaces it (as torch's). Every rank checks its
whole state dict against the checkpoint before any rank reads, so a failure leaves every rank's state as it was.
Collective over the default process group.
The directory comes from checkpoint_id or torch's FileSystemWriter / FileSystemReader (filesystem.py) or the
HuggingFace storages (hf_storage.py); other storages raise NotImplementedError rather than being ignored. A
planner that overrides torch's hooks is driven hook by hook (default_planner.py, _planned.py). A top-level
value with state_dict() and load_state_dict() (torch's Stateful: a module, an optimizer, an AppState) is saved
as its state_dict() and loaded back through its load_state_dict(), as torch's DCP does. load also reads a
checkpoint torch's DCP wrote (its .metadata and .distcp files, at any world size: _torch_format.py), and
format_utils.dcp_to_torch_dcp writes tessel's checkpoint in that format for torch.

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
from . import _planned, _torch_format
from .api import CheckpointException  # noqa: F401
from .default_planner import DefaultLoadPlanner, DefaultSavePlanner  # noqa: F401
from .filesystem import FileSystemReader, FileSystemWriter
from .hf_storage import HuggingFaceStorageReader, HuggingFaceStorageWriter, _write_safetensors_index  # noqa: F401
from .planner import LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem  # noqa: F401
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
    """{flat key: value}; paths (when given) gets each flat key's path of keys (a dict's key as a str, a list's
    index as an int), torch's planner_data mapping (dcp_to_torch_save nests the entries again by it)."""
    for k, v in _entries(sd):
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        step = path + (k if isinstance(sd, list) else str(k),)
        if _entered(v):
            _flatten(v, key, out, paths, step)
            continue
        if key in out:  # {"a.b": x, "a": {"b": y}}, or the keys 0 and "0": one would silently replace the other
            raise ValueError("duplicated flatten key %s" % key)
        out[key] = _leaf(key, v)
        if paths is not None:
            paths[key] = list(step)
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


def _write_back(sd, prefix, flat, missing=(), replaced=()):
    """Puts the values load read into sd: tensors were filled in place; other values (and a value read where
    sd held a tensor: the keys in `replaced`) take their entry's place."""
    for k, v in list(_entries(sd)):
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if _entered(v):
            _write_back(v, key, flat, missing, replaced)
        elif (not isinstance(v, _C.Tensor) or key in replaced) and key in flat and key not in missing:
            new = _restore(v, flat[key])
            if _is_complex_tensor(v) and _is_complex_tensor(new) and tuple(new.shape) == tuple(v.shape):
                with _C._GradMode(False):  # a complex tensor (kept as a pickle) is filled in place too
                    v.copy_(new)
            else:
                sd[k] = new


def _is_complex_tensor(v):
    return isinstance(v, ComplexTensor)


def _dir(checkpoint_id, storage=None, what="save"):
    """The checkpoint directory from checkpoint_id or a FileSystemWriter/Reader (checkpoint_id wins and
    resets the storage, as torch); any other storage raises instead of being ignored."""
    storage_type = (FileSystemWriter, HuggingFaceStorageWriter) if what == "save" else \
        (FileSystemReader, HuggingFaceStorageReader)
    if storage is not None and not isinstance(storage, storage_type):
        raise NotImplementedError("%s: storage_%s must be a %s (tessel writes its own file layout), got %s"
                                  % (what, "writer" if what == "save" else "reader",
                                     " or ".join(t.__name__ for t in storage_type), type(storage).__name__))
    if storage is not None:
        storage.reset(checkpoint_id)
        return os.fspath(storage.path)
    if not checkpoint_id:
        raise RuntimeError("`checkpoint_id` must be specified if storage_reader/storage_writer is None.")
    return os.fspath(checkpoint_id)


def _storage_meta(storage_writer, path):
    """What a save planner's set_up_planner gets (torch's: the writer's storage_meta())."""
    writer = storage_writer if hasattr(storage_writer, "storage_meta") else FileSystemWriter(path)
    return writer.storage_meta()


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


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False,
         use_collectives=True):
    """Collective over process_group (default: the default group when initialized; no_dist=True: this rank
    alone writes the whole checkpoint, as torch's). Returns the checkpoint's Metadata, as torch's (None for a
    HuggingFaceStorageWriter's safetensors export). A failure on any rank raises CheckpointException on
    every rank (torch's), naming each failing rank's exception; the previous checkpoint in the directory
    stays loadable. use_collectives=False (torch's experimental uncoordinated save) is accepted: tessel's
    save stays coordinated, one committed checkpoint."""
    path = _dir(checkpoint_id, storage_writer, "save")
    world = None if no_dist else (process_group or (_default_group("checkpoint.save") if is_initialized() else None))
    if storage_writer is not None and not getattr(storage_writer, "overwrite", True):
        # FileSystemWriter(overwrite=False) over an existing checkpoint: CheckpointException on every rank, as torch's
        exists = any(os.path.exists(os.path.join(path, name)) for name in ("metadata.json", ".metadata"))
        api._raise_agreed("save", RuntimeError("Checkpoint already exists and overwrite=False: %s" % path)
                          if exists else None, world, _rank(world))
    flat, paths, error = _flat_to_save(state_dict, planner, world, storage_writer, path, "save")
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
        return metadata.read(path, paths)
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


def _flat_to_save(state_dict, planner, world, storage_writer, path, what):
    """(flat state dict, its keys' paths, this rank's error or None). A planner overriding torch's hooks makes
    the plan (collective: a failed local plan raises CheckpointException on every rank here)."""
    error, sd, flat, paths = None, None, {}, {}
    try:
        sd = _stateful_to_state_dict(state_dict)
    except Exception as e:  # noqa: BLE001 (the peers learn it in the save's plan exchange, then agree)
        error = e
    if _planned.drives(planner, DefaultSavePlanner):
        return _planned.save_flat(sd, planner, world, lambda: _storage_meta(storage_writer, path), error, what)
    if error is None:
        try:
            flat = _flatten(sd, "", {}, paths)
        except Exception as e:  # noqa: BLE001 (agreed by the caller)
            error = e
    return flat, paths, error


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
    """A concurrent.futures.Future (torch's async_save returns one) of the checkpoint's Metadata: a thread waits
    for the C++ future (the GIL released) and sets its result or exception (a save's failure as
    CheckpointException naming this rank's own failure, or the peer whose failure failed the save: no exchange
    from that thread). Rank 0 marks the committed checkpoint for torch's probes (_torch_format.write_marker)
    before the result is set."""
    future = concurrent.futures.Future()

    def wait():
        try:
            cpp_future.result()
            if path is not None and rank == 0:
                _torch_format.write_marker(path, paths)
            future.set_result(metadata.read(path, paths) if path is not None else None)
        except Exception as e:  # noqa: BLE001 (handed to the caller through the future)
            try:
                api._raise_agreed("async_save", e, None, rank)
            except BaseException as agreed:  # noqa: BLE001
                future.set_exception(agreed)
        except BaseException as e:  # noqa: BLE001
            future.set_exception(e)

    threading.Thread(target=wait, name="tessel-async-save-wait", daemon=True).start()
    return future


def _failed(exception):
    future = concurrent.futures.Future()
    future.set_exception(exception)
    return future


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=None, async_stager=None, no_dist=False, use_collectives=True,
               use_cached_state_dict=False):
    """torch's dcp.async_save: returns once this rank's share of state_dict is snapshotted (training may
    change every tensor at once); the returned concurrent.futures.Future's result() waits for the
    committed checkpoint (its Metadata, as torch's) and raises the save's error from any rank (a failure
    planning on one rank fails every rank's future, as torch's). One save in flight per process group
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
    try:
        path = _dir(checkpoint_id, storage_writer, "save")
    except Exception as e:  # noqa: BLE001 (torch's checks run in its save thread: they reach the caller's future)
        return _failed(e)
    world = None if no_dist else (process_group or (_default_group("checkpoint.async_save")
                                                    if is_initialized() else None))
    cache = getattr(_savers, "by_group", None)
    if cache is None:
        cache = _savers.by_group = {}
    saver = cache.get(id(world))
    if saver is None:
        saver = cache[id(world)] = (world, _C._AsyncSaver(world))
    try:
        flat, paths, error = _flat_to_save(state_dict, planner, world, storage_writer, path, "async_save")
    except CheckpointException as agreed:  # a planner's failed plan, agreed by every rank
        return _failed(agreed)
    mismatch = _same_directory_everywhere(path, world)  # collective: every rank calls it, failed or not
    error = error or mismatch
    flat = _merge_param_group_lists(flat, world)
    try:  # every rank learns of any rank's failure before the saver's collective plan (a lone rank would hang it)
        api._raise_agreed("async_save", error, world, _rank(world))
    except CheckpointException as agreed:
        return _failed(agreed)
    try:
        cpp_future = saver[1].save(flat, path)
    except Exception as e:  # noqa: BLE001 (planning failed: through the future, as torch's planning in its thread)
        future = concurrent.futures.Future()
        try:
            api._raise_agreed("async_save", e, None, _rank(world))
        except BaseException as agreed:  # noqa: BLE001
            future.set_exception(agreed)
        return future
    return _as_future(cpp_future, _rank(world), path, paths)


def save_state_dict(state_dict, storage_writer, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """torch's deprecated spelling of save(state_dict, storage_writer=...); warns as torch's does."""
    import warnings
    warnings.warn("`save_state_dict` is deprecated and will be removed in future versions. Please use `save` "
                  "instead.", FutureWarning, stacklevel=2)
    return save(state_dict, storage_writer=storage_writer, planner=planner, process_group=process_group)


from . import default_planner, filesystem, state_dict_loader, state_dict_saver  # noqa: E402,F401 (torch's modules)
from .state_dict_loader import load, load_state_dict  # noqa: E402,F401
