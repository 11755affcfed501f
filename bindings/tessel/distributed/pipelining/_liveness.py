"""torch 2.15's analyze_pipeline_activation_liveness over a schedule's pipeline_order: when each (stage,
microbatch) activation is alive on one pipeline rank, and reusable slot ids for them.

An activation is born at its forward (F) and dies at its full backward (B) or, where the backward is split,
at its weight backward (W): an input backward (I) alone keeps it, W still reads it. Positions are indices
into the rank's pipeline_order (idle slots, None, count), both ends inclusive. Slots are handed out greedily
by start position (then end, then order): a slot is free again only after its last activation's end, so an
activation ending where another starts does not share its slot. granularity="microbatch" gives every
microbatch one lifetime over the tracked stages, from their first forward to their last release.

Plain Python over the schedule's program (no tensors): it plans memory, it allocates none.
"""
import heapq
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["PipelineActivationLiveness", "analyze_pipeline_activation_liveness"]


@dataclass(frozen=True)
class PipelineActivationLiveness:
    """The result of analyze_pipeline_activation_liveness: slot ids by (stage, microbatch) and the number of
    slots; get_activation_lifetime gives an activation's (forward, release) positions."""
    pp_rank: int
    granularity: str
    stage_indices: tuple
    num_microbatches: int
    slot_by_stage_and_microbatch: object
    num_slots: int
    _activation_lifetime_by_stage_and_microbatch: object = field(repr=False)
    __hash__ = None  # equal by value, not hashable (its mappings are not)

    def slot_for(self, stage_index, microbatch_index):
        key = (stage_index, microbatch_index)
        if key not in self.slot_by_stage_and_microbatch:
            raise ValueError("No activation slot exists for stage %s, microbatch %s" % key)
        return self.slot_by_stage_and_microbatch[key]

    def get_activation_lifetime(self, stage_index, microbatch_index):
        key = (stage_index, microbatch_index)
        if key not in self._activation_lifetime_by_stage_and_microbatch:
            raise ValueError("No activation lifetime exists for stage %s, microbatch %s" % key)
        return self._activation_lifetime_by_stage_and_microbatch[key]


def _slots(lifetimes):
    """One slot id per (start, end) lifetime, in the input's order, and the number of slots."""
    ends = []  # (end, slot) of the slots in use
    free = []  # slot ids free again, smallest first
    out, count = [0] * len(lifetimes), 0
    for i in sorted(range(len(lifetimes)), key=lambda i: (lifetimes[i][0], lifetimes[i][1], i)):
        start, end = lifetimes[i]
        while ends and ends[0][0] < start:
            heapq.heappush(free, heapq.heappop(ends)[1])
        if free:
            out[i] = heapq.heappop(free)
        else:
            out[i], count = count, count + 1
        heapq.heappush(ends, (end, out[i]))
    return out, count


def analyze_pipeline_activation_liveness(schedule, *, pp_rank, stage_indices, granularity):
    """torch's: the activation lifetimes of `stage_indices` on pipeline rank `pp_rank` in `schedule`'s program
    and reusable slot ids for them (see the module docstring). ValueError for an unknown granularity, an empty
    or repeated stage list, a rank the schedule does not have, or a program in which a tracked (stage,
    microbatch) lacks its one forward and one release."""
    if granularity not in ("microbatch", "stage_microbatch"):
        raise ValueError("Unsupported activation granularity: %s" % (granularity,))
    stages = tuple(stage_indices)
    if not stages:
        raise ValueError("stage_indices must not be empty")
    if len(set(stages)) != len(stages):
        raise ValueError("stage_indices must be unique")
    order = schedule.pipeline_order
    if pp_rank not in order:
        raise ValueError("Rank %s is not present in the pipeline schedule" % (pp_rank,))
    n_mb = schedule._n_microbatches
    tracked = set(stages)
    born, dies, inputs, weights = {}, {}, set(), set()
    for position, action in enumerate(order[pp_rank]):
        if action is None or action.stage not in tracked:
            continue
        key = (action.stage, action.microbatch)
        if not 0 <= action.microbatch < n_mb:
            raise ValueError("Action %s has a microbatch outside [0, %d)" % (action, n_mb))
        if action.kind == "F":
            if key in born:
                raise ValueError("Activation lifetime %s has multiple forwards" % (key,))
            born[key] = position
        elif action.kind == "I":
            if key in inputs:
                raise ValueError("Activation lifetime %s has multiple input backwards" % (key,))
            inputs.add(key)
        elif action.kind in ("B", "W"):
            if key in dies:
                raise ValueError("Activation lifetime %s has multiple release actions" % (key,))
            dies[key] = position
            if action.kind == "W":
                weights.add(key)
    expected = {(s, mb) for s in stages for mb in range(n_mb)}
    for what, found in (("Forward actions", born), ("Backward release actions", dies)):
        if found.keys() != expected:
            raise ValueError("%s do not match tracked activations; missing=%s, extra=%s"
                             % (what, sorted(expected - found.keys()), sorted(found.keys() - expected)))
    if weights - inputs:
        raise ValueError("Activation lifetimes have weight backward without input backward: %s"
                         % sorted(weights - inputs))
    for key in expected:
        if dies[key] < born[key]:
            raise ValueError("Activation lifetime %s ends before its forward" % (key,))
    keys = sorted(expected)
    if granularity == "microbatch":
        per_mb = [(min(born[(s, mb)] for s in stages), max(dies[(s, mb)] for s in stages)) for mb in range(n_mb)]
        slots, count = _slots(per_mb)
        slot_of = {(s, mb): slots[mb] for s, mb in keys}
        life_of = {(s, mb): per_mb[mb] for s, mb in keys}
    else:
        lifetimes = [(born[k], dies[k]) for k in keys]
        slots, count = _slots(lifetimes)
        slot_of, life_of = dict(zip(keys, slots)), dict(zip(keys, lifetimes))
    return PipelineActivationLiveness(pp_rank=pp_rank, granularity=granularity, stage_indices=stages,
                                      num_microbatches=n_mb, slot_by_stage_and_microbatch=MappingProxyType(slot_of),
                                      num_slots=count,
                                      _activation_lifetime_by_stage_and_microbatch=MappingProxyType(life_of))
