"""tessel.distributed.checkpoint: DCP's save / load of (nested) state dicts, sharded across ranks and
reshardable to any layout or world size (checkpoint/).

Keys of nested dicts are joined with "."; tensors (dense or DTensor) are filled in place by load; other
values (ints, floats, strings, bytes) are replaced in the dict. Like DCP, load fills the keys of the state
dict it is given and ignores the checkpoint's other keys; a key the checkpoint lacks raises (unless
strict=False), and a shape, dtype or kind mismatch always raises. Collective over the default process group.

    model_sd, optim_sd = get_state_dict(model, opt)
    save({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    load({"model": model_sd, "optim": optim_sd}, checkpoint_id="/tmp/ckpt")
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
"""
import os

from ... import _C
from .. import _default_group, is_initialized
from . import state_dict  # noqa: F401


def _flatten(sd, prefix, out):
    for k, v in sd.items():
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if isinstance(v, dict):
            _flatten(v, key, out)
        elif isinstance(v, (bytes, bytearray)):
            out[key] = _C._Bytes(bytes(v))  # else pybind would pass bytes as a (UTF-8) string
        else:
            out[key] = v
    return out


def _write_back(sd, prefix, flat):
    for k, v in sd.items():
        key = "%s.%s" % (prefix, k) if prefix else str(k)
        if isinstance(v, dict):
            _write_back(v, key, flat)
        elif not isinstance(v, _C.Tensor) and key in flat:
            sd[k] = bytes(flat[key]) if isinstance(flat[key], _C._Bytes) else flat[key]


def _dir(checkpoint_id):
    if checkpoint_id is None:
        raise ValueError("checkpoint_id (the checkpoint directory) is required")
    return os.fspath(checkpoint_id)


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None):
    world = process_group or (_default_group("checkpoint.save") if is_initialized() else None)
    _C._dcp_save(_flatten(state_dict, "", {}), _dir(checkpoint_id), world)


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, strict=True):
    """Fills state_dict in place from the checkpoint (its other keys are ignored, as in DCP); strict=False
    also tolerates keys the checkpoint lacks. Returns a dict with missing_keys, unexpected_keys (the
    checkpoint's keys not in state_dict) and bytes_read."""
    flat, result = _C._dcp_load(_flatten(state_dict, "", {}), _dir(checkpoint_id), strict)
    _write_back(state_dict, "", flat)
    return result
