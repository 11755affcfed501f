"""save and load driven by a planner's hooks, as torch's DCP calls them: set_up_planner and create_local_plan on
every rank, create_global_plan on the coordinator (rank 0 of the group), finish_plan on every rank, then per item
resolve_data (save) or resolve_tensor / commit_tensor and load_bytes (load). tessel's storage still writes and
reads whole tensors (a DTensor's piece per rank, resharded by the C++ checkpoint), so an item is a key: the plan
decides which keys are saved or loaded and under which names, and the hooks what their values are.

Used for a planner that overrides a hook, one with flatten_state_dict=False, or any other object implementing
torch's protocol; a plain DefaultSavePlanner / DefaultLoadPlanner takes the direct path. Every step that can
fail on one rank is agreed across the group before the next collective step (CheckpointException on every rank,
as torch's plan exchange), and nothing is read before every rank's plan is known good."""
import inspect
import io
import warnings

from ... import _C
from . import api
from .planner import LoadItemType, WriteItemType

# The hooks torch's DCP calls (and the default planners' helpers they call): overriding one means the direct path
# would skip it.
_HOOKS = ("set_up_planner", "create_local_plan", "create_global_plan", "finish_plan", "resolve_data",
          "lookup_object", "transform_object", "load_bytes", "resolve_tensor", "commit_tensor", "lookup_tensor",
          "transform_tensor", "resolve_bytes", "_dedup_save_plans", "_should_include_key")


def drives(planner, default_type):
    """Whether save / load must call `planner`'s hooks (it is not the default planner's behavior)."""
    if planner is None:
        return False
    if not isinstance(planner, default_type) or not getattr(planner, "flatten_state_dict", True):
        return True
    for cls in type(planner).__mro__:
        if cls is default_type:
            return False
        if any(h in vars(cls) for h in _HOOKS):
            return True
    return False


def _default(planner, names, default_type):
    """Whether none of the hooks `names` is overridden below default_type."""
    return isinstance(planner, default_type) and \
        all(getattr(type(planner), n, None) is getattr(default_type, n) for n in names)


def _rank(world):
    return 0 if world is None else world.rank


def _agreed(step, what, world, rank):
    """step()'s result on this rank, once every rank's step went well (else CheckpointException everywhere)."""
    result, error = None, None
    try:
        result = step()
    except Exception as e:  # noqa: BLE001 (agreed below)
        error = e
    api._raise_agreed(what, error, world, rank)
    return result


def _plan(world, local_step, global_step, finish_plan, what):
    """This rank's final plan: local plans gathered, the coordinator's global step, each rank's finish_plan."""
    rank = _rank(world)
    local = _agreed(local_step, what, world, rank)
    if world is None or world.size == 1:
        central = _agreed(lambda: global_step([local]), what, None, rank)
        return _agreed(lambda: finish_plan(central[0]), what, None, rank)
    from .. import _object_collectives as oc
    plans = [None] * world.size
    oc.all_gather_object(plans, local, group=world)
    central = _agreed(lambda: global_step(plans) if rank == 0 else None, what, world, rank)
    box = [central]
    oc.broadcast_object_list(box, src=world.global_ranks[0], group=world)
    return _agreed(lambda: finish_plan(box[0][rank]), what, world, rank)


def _as_dtensor(value, like):
    """A DTensor over `value` (a rank's local tensor, as torch's hooks see a DTensor) laid out as `like`: loading
    into it fills value, saving it writes value as this rank's piece."""
    if not isinstance(like, _C.Tensor) or not like.is_distributed or not isinstance(value, _C.Tensor) or \
            value.is_distributed:
        return value
    from ..tensor import DTensor
    return DTensor.from_local(value, like.device_mesh, list(like.placements), run_check=False,
                              shape=like.shape, stride=like.stride())


def save_flat(state_dict, planner, world, storage_meta, error, what):
    """(flat state dict, its keys' paths, this rank's error or None) of the items of the planner's final plan
    (every rank takes part in the plan exchange even when `error`, its own earlier failure, is set)."""
    from . import _leaf
    from .default_planner import DefaultSavePlanner
    rank = _rank(world)
    order = []  # the local plan's keys: the saved order, also of the keys the global plan gave another rank

    def local_step():
        if error is not None:
            raise error
        if "storage_meta" not in inspect.signature(planner.set_up_planner).parameters:
            warnings.warn("The function definition for SavePlanner.set_up_planner has been updated to include the "
                          "storage_meta argument. Please update your implementation to include this parameter.",
                          stacklevel=2)
            planner.set_up_planner(state_dict, rank == 0)
        else:
            planner.set_up_planner(state_dict=state_dict, storage_meta=storage_meta(), is_coordinator=rank == 0)
        plan = planner.create_local_plan()
        order.extend(item.index.fqn for item in plan.items)
        return plan

    final = _plan(world, local_step, lambda plans: planner.create_global_plan(plans)[0],
                  lambda plan: planner.finish_plan(plan), what)
    direct = _default(planner, ("resolve_data", "lookup_object", "transform_object"), DefaultSavePlanner)
    mappings = getattr(planner, "mappings", None) or {}
    flat = {}
    paths = {key: list(mappings.get(key, (key,))) for key in order}
    try:
        for item in final.items:
            key = item.index.fqn
            if key in flat:
                continue
            own = getattr(planner, "state_dict", {}).get(key)
            if direct:
                value = own
            else:
                value = planner.resolve_data(item)
                if isinstance(value, io.BytesIO):
                    from ... import load
                    value.seek(0)
                    value = load(value, weights_only=False)
                elif item.type == WriteItemType.SHARD:
                    value = _as_dtensor(value, own)
            flat[key] = _leaf(key, value)
            paths.setdefault(key, list(mappings.get(key, (key,))))
    except Exception as e:  # noqa: BLE001 (agreed by save, with the other ranks' failures)
        return {}, {}, e
    return flat, paths, None


def _serialized(value):
    from ... import save
    buffer = io.BytesIO()
    save(value, buffer)
    buffer.seek(0)
    return buffer


def load(state_dict, path, storage_reader, planner, world, prepare):
    """Fills state_dict through the planner's hooks; `prepare(flat, path, storage_reader, strict)` checks a flat
    {checkpoint key: tensor to fill or None for a value} against the checkpoint and returns the read."""
    from .default_planner import DefaultLoadPlanner
    from .filesystem import FileSystemReader
    rank = _rank(world)
    reader = storage_reader if storage_reader is not None else FileSystemReader(path)
    md = []

    def local_step():
        md.append(reader.read_metadata())
        planner.set_up_planner(state_dict, md[0], rank == 0)
        if hasattr(reader, "set_up_storage_reader"):
            reader.set_up_storage_reader(md[0], rank == 0)
        plan = planner.create_local_plan()
        return reader.prepare_local_plan(plan) if hasattr(reader, "prepare_local_plan") else plan

    def global_step(plans):
        plans = planner.create_global_plan(plans)
        return reader.prepare_global_plan(plans) if hasattr(reader, "prepare_global_plan") else plans

    final = _plan(world, local_step, global_step, lambda plan: planner.finish_plan(plan), "load")
    direct = _default(planner, ("resolve_tensor", "lookup_tensor", "transform_tensor"), DefaultLoadPlanner)
    targets, tensors, values = {}, [], []

    def check():
        entries = md[0].state_dict_metadata
        for item in final.items:
            key = item.storage_index.fqn
            if key not in entries:
                raise RuntimeError(f"Missing key in checkpoint state_dict: {key}.")
            if item.type == LoadItemType.BYTE_IO:
                targets.setdefault(key, None)
                values.append(item)
                continue
            own = getattr(planner, "state_dict", {}).get(item.dest_index.fqn)
            tensor = own if direct else planner.resolve_tensor(item)
            placed = targets.get(key) is None
            if placed:
                targets[key] = _as_dtensor(tensor, own)
            tensors.append((item, tensor, placed))
        return prepare(targets, path, storage_reader, True)

    read = _agreed(check, "load", world, rank)  # nothing is read before every rank's plan checked out

    def fill():
        result = read()
        for item, tensor, placed in tensors:
            if not placed:  # a second item reading the same saved tensor
                with _C._GradMode(False):
                    tensor.copy_(targets[item.storage_index.fqn])
            planner.commit_tensor(item, tensor)
        for item in values:
            planner.load_bytes(item, _serialized(targets[item.storage_index.fqn]))
        return result

    return _agreed(fill, "load", world, rank)
