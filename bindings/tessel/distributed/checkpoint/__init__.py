"""tessel.distributed.checkpoint: DCP's save / load of (nested) state dicts, sharded across ranks and
reshardable to any layout or world size (checkpoint/).

Keys of nested dicts are joined with "." (two that join to the same key raise ValueError); tensors (dense
or DTensor) are filled in place by load; other values are replaced in the dict: ints, floats, strings and
bytes as such, bools as bools, anything else picklable (lists, None, ints beyond int64, RNG states) as a
pickle, as torch's DCP keeps them. Like DCP, load fills the keys of the state
dict it is given and ignores the checkpoint's other keys; a key the checkpoint lacks raises (unless
strict=False), and a shape, dtype or kind mismatch always raises. Collective over the default process group.

    model_sd, optim_sd = get_state_dict(model, opt)
    save({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    load({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
"""
import os
import pickle
import threading

from ... import _C
from .. import _default_group, is_initialized
from . import state_dict  # noqa: F401


_PICKLED = b"\x00tessel-pickle\x00"  # prefix of a value DCP keeps as a pickle (torch pickles such values too)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _leaf(key, v):
    """A state-dict value as the C++ checkpoint stores it: tensors, int64, float, str and bytes as they are;
    bools as int64 (restored as bools into bool targets); anything else picklable (lists, tuples, None, ints
    beyond int64, numpy RNG states, ...) as a tagged pickle in a bytes entry, as torch's DCP pickles them."""
    if isinstance(v, _C.Tensor) or isinstance(v, (float, str)):
        return v
    if isinstance(v, (bytes, bytearray)):
        return _C._Bytes(bytes(v))  # else pybind would pass bytes as a (UTF-8) string
    if isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]:
        return v
    if isinstance(v, bool):
        return int(v)
    try:
        return _C._Bytes(_PICKLED + pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as e:  # noqa: BLE001 (any pickling failure)
        raise TypeError("checkpoint: '%s' is a %s, which is neither a tensor, int, float, str nor bytes, and cannot "
                        "be pickled: %s" % (key, type(v).__name__, e)) from None


def _flatten(sd, prefix, out):
    for k, v in sd.items():
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if isinstance(v, dict):
            _flatten(v, key, out)
            continue
        if key in out:  # {"a.b": x, "a": {"b": y}}, or the keys 0 and "0": one would silently replace the other
            raise ValueError("duplicated flatten key %s" % key)
        out[key] = _leaf(key, v)
    return out


def _restore(old, new):
    if isinstance(new, _C._Bytes):
        raw = bytes(new)
        return pickle.loads(raw[len(_PICKLED):]) if raw.startswith(_PICKLED) else raw
    if isinstance(old, bool) and isinstance(new, int):
        return bool(new)
    return new


def _write_back(sd, prefix, flat, missing=()):
    for k, v in sd.items():
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if isinstance(v, dict):
            _write_back(v, key, flat, missing)
        elif not isinstance(v, _C.Tensor) and key in flat and key not in missing:
            sd[k] = _restore(v, flat[key])


def _dir(checkpoint_id):
    if checkpoint_id is None:
        raise ValueError("checkpoint_id (the checkpoint directory) is required")
    return os.fspath(checkpoint_id)


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None):
    world = process_group or (_default_group("checkpoint.save") if is_initialized() else None)
    _C._dcp_save(_flatten(state_dict, "", {}), _dir(checkpoint_id), world)


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


def _as_future(cpp_future):
    """A concurrent.futures.Future (torch's async_save returns one): a thread waits for the C++ future
    (the GIL released) and sets its result or exception."""
    import concurrent.futures
    future = concurrent.futures.Future()

    def wait():
        try:
            future.set_result(cpp_future.result())
        except BaseException as e:  # noqa: BLE001 (handed to the caller through the future)
            future.set_exception(e)

    threading.Thread(target=wait, name="tessel-async-save-wait", daemon=True).start()
    return future


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=None, async_stager=None, no_dist=False, use_cached_state_dict=False):
    """torch's dcp.async_save: returns once this rank's share of state_dict is snapshotted (training may
    change every tensor at once); the returned concurrent.futures.Future's result() waits for the
    committed checkpoint and raises the save's error from any rank. One save in flight per process group
    (the next waits for it). The first call on a group is collective (the saver makes its own group for
    its background work); destroy_process_group waits for the saves and releases the savers."""
    if storage_writer is not None or planner is not None or async_stager is not None:
        raise NotImplementedError("async_save: storage_writer, planner and async_stager are not supported")
    world = None if no_dist else (process_group or (_default_group("checkpoint.async_save")
                                                    if is_initialized() else None))
    cache = getattr(_savers, "by_group", None)
    if cache is None:
        cache = _savers.by_group = {}
    saver = cache.get(id(world))
    if saver is None:
        saver = cache[id(world)] = (world, _C._AsyncSaver(world))
    return _as_future(saver[1].save(_flatten(state_dict, "", {}), _dir(checkpoint_id)))


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, strict=True):
    """Fills state_dict in place from the checkpoint (its other keys are ignored, as in DCP); strict=False
    also tolerates keys the checkpoint lacks. Returns a dict with missing_keys, unexpected_keys (the
    checkpoint's keys not in state_dict) and bytes_read."""
    flat = _flatten(state_dict, "", {})
    # Non-tensor values come from the checkpoint whatever the state dict held (DCP: a 0 placeholder takes
    # a saved pickle, an int target a saved bool): ask for each in the checkpoint's kind.
    placeholder = {"bytes": _C._Bytes(b""), "int64": 0, "float64": 0.0, "string": ""}
    for key, kind in _C._dcp_value_kinds(_dir(checkpoint_id)).items():
        if key in flat and not isinstance(flat[key], _C.Tensor):
            flat[key] = placeholder[kind]
    flat, result = _C._dcp_load(flat, _dir(checkpoint_id), strict)
    _write_back(state_dict, "", flat, set(result["missing_keys"]))
    return result
