"""torch.distributed.checkpoint.state_dict_loader: load (dcp.load), its deprecated spelling load_state_dict, and
torch's private _load_state_dict (no Stateful handling: the planner fills the dict it is given, so
_EmptyStateDictLoadPlanner loads a whole checkpoint into {} without a model) and _load_state_dict_from_keys."""
import warnings

from .. import _default_group, is_initialized
from . import _dir, _is_stateful, _loading, _planned, _rank, api
from .default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner

__all__ = ["load_state_dict", "load"]


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, no_dist=False,
         strict=True):
    """Fills state_dict in place from the checkpoint (its other keys are ignored, as in DCP) and returns None,
    as torch's. strict=False (tessel's spelling of DefaultLoadPlanner(allow_partial_load=True)) tolerates keys
    the checkpoint lacks. Collective over process_group (default: the default group when initialized;
    no_dist=True: this rank alone, as torch's): a failure on any rank (a key the checkpoint lacks, a shape
    mismatch, a damaged file) raises CheckpointException on every rank, naming each failing rank's exception,
    and no rank has read anything when a check failed."""
    _load(state_dict, checkpoint_id=checkpoint_id, storage_reader=storage_reader, planner=planner,
          process_group=process_group, no_dist=no_dist, strict=strict)


def _load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, no_dist=False,
          strict=True):
    """load's work; returns tessel's report of it: {"missing_keys", "unexpected_keys", "bytes_read"}."""
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
        path = _dir(checkpoint_id, storage_reader, "load")
    world = None if no_dist else (process_group or (_default_group("checkpoint.load") if is_initialized() else None))
    # Each Stateful's state_dict() is filled, then handed to its load_state_dict; other top-level values are
    # replaced in state_dict (a new dict is filled, as torch's: an empty dict stays empty)
    target = {k: v.state_dict() if _is_stateful(v) else v for k, v in state_dict.items()}
    result = _load_state_dict_into(target, path, storage_reader, broadcast, planner, process_group, world, strict)
    for k, v in state_dict.items():
        if _is_stateful(v):
            v.load_state_dict(target[k])  # outside the agreed read, as torch's: its own errors reach the caller
        else:
            state_dict[k] = target[k]
    return result


def _load_state_dict_into(state_dict, path, storage_reader, broadcast, planner, process_group, world, strict):
    rank = _rank(world)
    if not broadcast and _planned.drives(planner, DefaultLoadPlanner):
        return _planned.load(state_dict, path, storage_reader, planner, world,
                             lambda flat, p, r, s: _loading.prepare(flat, p, r, False, process_group, s))
    strict = strict and not getattr(planner, "allow_partial_load", False)
    read, error = None, None
    try:
        read = _loading.prepare(state_dict, path, storage_reader, broadcast, process_group, strict)
    except Exception as e:  # noqa: BLE001 (agreed with the other ranks below)
        error = e
    api._raise_agreed("load", error, world, rank)  # every rank's state dict fits before any rank reads
    result = None
    try:
        result = read()
    except Exception as e:  # noqa: BLE001 (agreed with the other ranks below)
        error = e
    api._raise_agreed("load", error, world, rank)
    return result


def _load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0, no_dist=False,
                     planner=None):
    """torch's private load: state_dict is filled as given (no Stateful handling)."""
    path = _dir(None, storage_reader, "load")
    world = None if no_dist else (process_group or (_default_group("checkpoint.load") if is_initialized() else None))
    _load_state_dict_into(state_dict, path, storage_reader, False, planner, process_group, world, True)


def _load_state_dict_from_keys(keys=None, *, checkpoint_id=None, storage_reader=None, process_group=None):
    """The checkpoint's entries under `keys` (a key or a set; None: all of them) as a new nested state dict, read
    by this process alone (torch's: no process group needed)."""
    no_dist = not is_initialized()
    if no_dist:
        warnings.warn("torch.distributed is unavailable or uninitialized, assuming the intent is to load in a "
                      "single process.", stacklevel=2)
    if storage_reader is None:
        from .filesystem import FileSystemReader
        if not checkpoint_id:
            raise RuntimeError("`checkpoint_id` must be specified if storage_reader/storage_writer is None.")
        storage_reader = FileSystemReader(checkpoint_id)
    elif checkpoint_id is not None:
        storage_reader.reset(checkpoint_id)
    if isinstance(keys, str):
        keys = {keys}
    sd = {}
    _load_state_dict(sd, storage_reader, process_group=process_group, no_dist=no_dist,
                     planner=_EmptyStateDictLoadPlanner(keys=keys))
    return sd


def load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """torch's deprecated spelling of load(state_dict, storage_reader=...); warns as torch's does."""
    warnings.warn("`load_state_dict` is deprecated and will be removed in future versions. Please use `load` "
                  "instead.", FutureWarning, stacklevel=2)
    return load(state_dict, storage_reader=storage_reader, planner=planner, process_group=process_group)
